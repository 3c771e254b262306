# The two commands the README promises: `make demo` and `make test`.
PYTHON ?= python3

.PHONY: demo test install down status

install:
	$(PYTHON) -m pip install -q -e .

demo: install
	sunk-dev demo

test:
	$(PYTHON) -m pip install -q 'tox>=4'
	$(PYTHON) -m tox

down:
	sunk-dev down

status:
	sunk-dev status
