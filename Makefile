# Two commands do all the set-up on a fresh machine:
#   make demo   creates .venv, installs, tunes the embedded CPU workload (contracts/minigpt-cpu.toml)
#   make test   creates or updates .venv, installs, runs the tests
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RUN    ?= .infrarsi/demo

.PHONY: install demo test test-slow clean

install: $(VENV)/.installed

# System packages, each installed with apt-get only when missing and only as root (CI, a fresh container), with one
# line saying what and why; not root, one line says what is left out and what that skips (pytest -ra lists it):
#   bubblewrap  (demo, test) trials and kernel checks run isolated in it (infrarsi/execute/isolation.py)
#   chromium    (test) the report's HTML is rendered in it (tests/report/test_html.py)
#   podman runc (test) a launch whose own srun starts a podman container, with podman as the box (execute/containers.py)
#   slurm + munge (test) a one-node Slurm on localhost for the Slurm executor's tests (installed by the tests
#               themselves as root, with the package scripts kept from starting daemons: infrarsi/testing/slurm.py)
define need
	@if command -v $(1) >/dev/null 2>&1 || [ -x /usr/sbin/$(1) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing $(2) with apt-get: $(3)"; \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(2) >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		    --no-install-recommends $(2) >/dev/null 2>&1; }; } || echo "  could not install $(2); $(4)"; \
	else echo "not installing $(2) (needs root; ask an administrator: apt-get install $(2)): $(4)"; fi
endef

# torch==2.13.0 first: it is the CPU build; an unpinned torch would pull a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	$(call need,bwrap,bubblewrap,trials run isolated in it,trials will be recorded unisolated and the isolation tests skipped)
	@# libseccomp: the filter that refuses the kernel keyring's calls inside the box (pyseccomp loads it)
	@ldconfig -p 2>/dev/null | grep -q libseccomp.so.2 || { [ "$$(id -u)" = 0 ] && \
		echo "installing libseccomp2 with apt-get: the filter that refuses the kernel keyring's calls inside a trial" && \
		apt-get install -y -q libseccomp2 >/dev/null 2>&1; } || \
		echo "not installing libseccomp2 (needs root; ask an administrator: apt-get install libseccomp2): trials will share the kernel keyring"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,megatron,bench,torchtitan]'
	# torchtitan 0.3 has 0.2's package name: its config code sits in a target directory of its own (the
	# framework check runs it in a subprocess)
	$(PY) -m pip install -q --no-deps --target $(VENV)/torchtitan-0.3 torchtitan==0.3.0 spmd_types==0.2.3 \
		torch_checkpointing==0.1.1
	touch $@

# Exit 3 (tune finished without a promotion, or stopped on the machine's noise: the lines above say which and what to
# do) is an outcome the demo shows, not a failure: make would call it "Error 3" and exit 2, so it ends 0 with one line;
# `infrarsi tune` itself keeps its exit codes for scripts.
DEMO_CONTRACT ?= contracts/minigpt-cpu.toml
demo: install
	@$(VENV)/bin/infrarsi tune $(DEMO_CONTRACT) --run-dir $(RUN); code=$$?; \
	if [ $$code -eq 3 ]; then echo "make demo: finished without a promotion (infrarsi exit 3); the lines above say why"; \
	else exit $$code; fi

test: install
	$(call need,chromium,chromium,the report test renders the HTML report in it,the report's rendering test is skipped)
	$(call need,podman,podman runc,a launch whose srun starts a podman container is tested with podman as the box (tests/execute/test_podman_trials.py),the podman container tests are skipped)
	@command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || { [ "$$(id -u)" = 0 ] && \
		echo "slurmctld slurmd slurm-client munge: the Slurm tests install them with apt-get when they start (daemons kept from starting), for a one-node Slurm on localhost"; } || \
		echo "not installing slurmctld slurmd slurm-client munge (needs root; ask an administrator): the Slurm tests are skipped"
	# two workers, a test file each at a time (pytest-xdist): most tests wait on trial processes, so two share 2 cores
	$(PY) -m pytest -q -n 2 --dist loadfile

test-slow: install
	$(PY) -m pytest -q -m slow

clean:
	rm -rf $(VENV) .infrarsi
