# Two commands do all the set-up on a fresh machine:
#   make demo   creates .venv, installs, tunes the embedded CPU workload (contracts/minigpt-cpu.toml)
#   make test   creates or updates .venv, installs, runs the tests
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RUN    ?= .infrarsi/demo

.PHONY: install demo test test-slow clean

install: $(VENV)/.installed

# torch==2.13.0 first: it is the CPU build; an unpinned torch would pull a multi-GB CUDA build.
# bubblewrap: trials and kernel verification run isolated in it (infrarsi/execute/isolation.py); as root (CI) it is
# installed here, elsewhere ask an administrator (without it every trial is recorded as unisolated).
$(VENV)/.installed: pyproject.toml
	command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get install -y -q bubblewrap >/dev/null \
		|| { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }; } || \
		echo "warning: bubblewrap (bwrap) is not installed: trials will run unisolated"
	# libseccomp: the filter that refuses the kernel keyring's calls inside the box (pyseccomp loads it)
	ldconfig -p 2>/dev/null | grep -q libseccomp.so.2 || { [ "$$(id -u)" = 0 ] && apt-get install -y -q libseccomp2 \
		>/dev/null; } || echo "warning: libseccomp2 is not installed: trials will share the kernel keyring"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,megatron,bench,torchtitan]'
	# torchtitan 0.3 has 0.2's package name: its config code sits in a target directory of its own (the
	# framework check runs it in a subprocess)
	$(PY) -m pip install -q --no-deps --target $(VENV)/torchtitan-0.3 torchtitan==0.3.0 spmd_types==0.2.3 \
		torch_checkpointing==0.1.1
	touch $@

demo: install
	$(VENV)/bin/infrarsi tune contracts/minigpt-cpu.toml --run-dir $(RUN)

test: install
	$(PY) -m pytest -q

test-slow: install
	$(PY) -m pytest -q -m slow

clean:
	rm -rf $(VENV) .infrarsi
