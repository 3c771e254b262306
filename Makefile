# The two commands the README promises: `make demo` and `make test`.
PYTHON ?= python3

.PHONY: demo test install down status images

# The product and, beside it, the dev tools (dev/: sunk-dev, the fakes), which its wheel leaves out. One
# command, so that the sunk that sunk-dev requires is this checkout's.
install:
	$(PYTHON) -m pip install -q -e . -e ./dev

demo: install
	sunk-dev demo

# tox's slurm2511 leg needs Slurm 25.11 built from source and pyslurm (about 25 minutes on 2 cores the
# first time, cached in the dev cluster's home after): it builds at low priority beside the other legs,
# and that leg waits for it (or, if it failed, builds it again and shows why).
DEV_HOME = $${SUNK_DEV_HOME:-$$HOME/.cache/sunk-dev}

test: install
	$(PYTHON) -m pip install -q 'tox>=4'
	mkdir -p $(DEV_HOME)
	nice -n 19 sunk-dev build --slurm 25.11 > $(DEV_HOME)/build-slurm-25.11.log 2>&1 & \
	$(PYTHON) -m tox; status=$$?; wait; exit $$status

# Every image as a docker archive ready to push (docs/images.md): the sunk image, its pyslurm variant and the
# five Slurm images of each release (SLURM="24.11 26.05" for some), into the dev home's images/out unless OUT.
images: install
	sunk-dev images $(foreach r,$(SLURM),--slurm $(r)) --out "$(or $(OUT),$(DEV_HOME)/images/out)"

down:
	sunk-dev down

status:
	sunk-dev status
