# The two commands the README promises: `make demo` and `make test`.
PYTHON ?= python3

.PHONY: demo test install down status images package

DEV_HOME = $${SUNK_DEV_HOME:-$$HOME/.cache/sunk-dev}
# Everything installs into a virtual environment under the dev cluster's home, never the system Python
# (whose unrelated packages pip would report in conflict) nor the repository: `. $(VENV)/bin/activate`
# puts sunk-dev on PATH.
VENV = $(DEV_HOME)/venv
VPY = $(VENV)/bin/python

# The product and, beside it, the dev tools (dev/: sunk-dev, the fakes), which its wheel leaves out. One
# command, so that the sunk that sunk-dev requires is this checkout's. (A venv whose interpreter or pip went
# away is made afresh.)
install:
	mkdir -p $(DEV_HOME)
	$(VPY) -m pip --version >/dev/null 2>&1 || $(PYTHON) -m venv --clear $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -e . -e ./dev

demo: install
	$(VENV)/bin/sunk-dev demo

# tox's slurm2511 leg needs Slurm 25.11 built from source and pyslurm (about 25 minutes on 2 cores the
# first time, cached in the dev cluster's home after): it builds at low priority beside the other legs,
# and that leg waits for it (or, if it failed, builds it again and shows why).
test: install
	$(VPY) -m pip install -q --disable-pip-version-check 'tox>=4'
	nice -n 19 $(VENV)/bin/sunk-dev build --slurm 25.11 > $(DEV_HOME)/build-slurm-25.11.log 2>&1 & \
	$(VPY) -m tox; status=$$?; wait; exit $$status

# Every image as a docker archive ready to push (docs/images.md): the sunk image, its pyslurm variant and the
# five Slurm images of each release (SLURM="24.11 26.05" for some), into the dev home's images/out unless OUT.
images: install
	$(VENV)/bin/sunk-dev images $(foreach r,$(SLURM),--slurm $(r)) --out "$(or $(OUT),$(DEV_HOME)/images/out)"

# (the venv's sunk-dev as it is, when there is one: stopping the dev cluster needs neither pip nor the network)
down:
	test -x $(VENV)/bin/sunk-dev || $(MAKE) install
	$(VENV)/bin/sunk-dev down

status:
	test -x $(VENV)/bin/sunk-dev || $(MAKE) install
	$(VENV)/bin/sunk-dev status

# The chart as a release artefact: `helm lint --strict` (with what an install must give: an endpoint and a Secret
# holding its token), then `helm package`, writing sunk-<version>.tgz under the dev cluster's home, never in the
# repository. helm is the dev cluster's pinned build (sunk_dev.chart.helm_binary: built there the first time).
CHART = manifests/chart/sunk
PACKAGE_DIR = $(DEV_HOME)/dist

package: install
	helm=$$($(VPY) -c 'from sunk_dev.chart import helm_binary; print(helm_binary())') && \
	"$$helm" lint --strict $(CHART) --set slurm.api.url=http://slurm-restapi:6820 \
		--set slurm.auth.existingSecret=slurm-token && \
	mkdir -p $(PACKAGE_DIR) && \
	"$$helm" package $(CHART) --destination $(PACKAGE_DIR)
