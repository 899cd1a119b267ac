# make help lists the targets.
SHELL := /bin/bash
PY := .venv/bin/python
VENV_STAMP := .venv/.installed
SWEEP ?= $(shell ls -dt outputs/sweeps/*/* 2>/dev/null | head -1)

.PHONY: help install install-gpu lock test-latest demo demo-brace base test test-fast test-times lint format test-policy golden mutants bench gpu-smoke bench-gpu report plan prompt-stats slurm-up slurm-down clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# the exact versions of requirements.lock (pip constraints), checked after the install
$(VENV_STAMP): pyproject.toml requirements.lock
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	# torch first, CPU build (GPU users: see docs/development.md "GPU install")
	$(PY) -m pip install -q -c requirements.lock "torch==2.13.0"
	$(PY) -m pip install -q -c requirements.lock -e ".[dev]"
	$(PY) -m benchmark.lockfile check
	touch $(VENV_STAMP)

install: $(VENV_STAMP) ## build .venv from nothing: the locked versions (requirements.lock), torch CPU wheel first, then the package + dev extras

# the newest versions pyproject.toml's ranges allow, in a venv of their own (the lock is not read)
LATEST := .venv-latest
$(LATEST)/.installed: pyproject.toml
	rm -rf $(LATEST) && python3 -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install -q --upgrade pip
	$(LATEST)/bin/python -m pip install -q "torch==2.13.0"
	$(LATEST)/bin/python -m pip install -q -e ".[dev]"
	touch $@

lock: ## rewrite requirements.lock from a fresh install of pyproject.toml's ranges (review the diff, then make test)
	rm -f $(LATEST)/.installed
	$(MAKE) $(LATEST)/.installed
	$(LATEST)/bin/python -m benchmark.lockfile write

test-latest: $(LATEST)/.installed ## the fast tests against the newest allowed versions (what the next `make lock` would bring)
	$(LATEST)/bin/python -m pytest -q -m "not slow"

# CUDA build of torch first, then the package with the [gpu] kernels compiled against it
TORCH_CUDA_INDEX ?= https://download.pytorch.org/whl/cu128
install-gpu: ## the one-line GPU install: .venv with a CUDA torch and the [dev,gpu] extras (flash-linear-attention, causal-conv1d; needs nvcc)
	test -d .venv || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip setuptools wheel ninja
	$(PY) -m pip install -q -c requirements.lock packaging
	$(PY) -m pip install -q "torch==2.13.0" --index-url $(TORCH_CUDA_INDEX)
	$(PY) -m pip install -q -c requirements.lock --no-build-isolation -e ".[dev,gpu]"
	$(PY) -m benchmark.lockfile check --extra-ok
	touch $(VENV_STAMP)
	# the kernel check (about 10 s): each fast kernel runs once and matches the reference code
	$(PY) -m benchmark.bench gpu-smoke --only kernels

demo: $(VENV_STAMP) ## what ASK does: a weak PPO, a tiny consultant fine-tuned at run time, oracle, dice; PPO-only / ASK / SLM-only table and figure (docs/measured/demo.md)
	$(PY) -m benchmark +experiment=demo tracking=none -m
	@sweep=$$(ls -dt outputs/sweeps/demo/* | head -1); \
	echo; \
	$(PY) -m benchmark.report $$sweep --no-wandb --brief --page demo

demo-brace: $(VENV_STAMP) ## Agent-BRACE learns at toy scale (TextWorld Quest, ~15 min on 2 cores): SFT / SFT+PPO / frozen-belief table; fails when nothing was learned
	$(PY) -m benchmark.brace.train +experiment=brace_demo -m
	@sweep=$$(ls -dt outputs/sweeps/brace_demo/* | head -1); \
	$(PY) -m benchmark.brace.table $$sweep --check > /dev/null && echo "brace demo: learned (table above, $$sweep/brace_table.md)" \
	|| { echo "brace demo: nothing learned ($$sweep/brace_table.json)"; exit 1; }

# the base that reads its prompt (docs/brace.md): pretrained on generated TextWorld transcripts,
# kill-safe (a rerun resumes), then its copy probe on held-out transcripts; BASE_ARGS="--steps N ..."
base: $(VENV_STAMP) ## pretrain the tiny Qwen3 base that copies names off its prompt (resumes; BASE_ARGS for settings), then probe it
	$(PY) -m benchmark.brace.base --probe 200 $(BASE_ARGS)

# pyproject's addopts deselect `slow` for a plain pytest; -m "slow or not slow" selects everything;
# --durations: the slowest tests, so a CI log shows which run near their timeouts
test: $(VENV_STAMP) ## everything, slow end-to-end tests included (what CI runs); SLURM tests skip without SLURM unless BENCHMARK_REQUIRE_SLURM=1
	$(PY) -m pytest -q -m "slow or not slow" --durations=40

test-fast: $(VENV_STAMP) ## the fast tests only (not marked slow), on every core: the same as a plain `pytest`
	$(PY) -m pytest -q -m "not slow"

test-times: $(VENV_STAMP) ## everything, then the fast tests, each writing its counts and times to docs/measured/ (tests.md, tests-fast.md)
	$(PY) -m pytest -q -m "slow or not slow" --measured-page tests
	$(PY) -m pytest -q -m "not slow" --measured-page tests-fast

lint: $(VENV_STAMP) ## ruff lint + format check + the layer contracts (import-linter, docs/architecture.md)
	.venv/bin/ruff check benchmark tests
	.venv/bin/ruff format --check benchmark tests
	.venv/bin/lint-imports --no-cache

format: $(VENV_STAMP) ## ruff format + autofix
	.venv/bin/ruff format benchmark tests
	.venv/bin/ruff check --fix benchmark tests

test-policy: $(VENV_STAMP) ## retrain the tests' committed small PPO policy (tests/data/small-policy) after its recipe or the training code changed
	PYTHONPATH=$(CURDIR) $(PY) -m tests.small_policy rebuild

golden: $(VENV_STAMP) ## re-record the golden prompt files of tests/golden (review the diff; a test run never writes them)
	PYTHONPATH=$(CURDIR) $(PY) -m tests.golden_prompts record

MODULES ?=
mutants: $(VENV_STAMP) ## mutation testing (mutmut) of the core arithmetic modules with their fast tests, share killed per module (MODULES="metrics gates"; long, not in CI)
	PYTHONPATH=$(CURDIR) $(PY) -m tests.mutation $(MODULES)

bench: $(VENV_STAMP) ## side-by-side speed/memory ratios (CPU), writes outputs/bench/<timestamp>.json and docs/measured/bench.md
	$(PY) -m benchmark.bench --page bench

gpu-smoke: $(VENV_STAMP) ## the first GPU run, under 3 min: kernel report and fast-vs-reference check, SDPA backend, padded vs by_length in bf16 (cuDNN on/off), a Qwen3.5-2B prefill at 64 x 750; exit 1 on a failed check; ARGS="--device cpu": its dry run
	$(PY) -m benchmark.bench gpu-smoke $(ARGS)

bench-gpu: $(VENV_STAMP) ## Qwen3.5 shapes on the first CUDA GPU: queries/s, prefill/decode, decisions/s at IR 0/1, memory, kernels, gate check, Table 1 projection, in 8 min (enforced); ARGS="--device cpu": its CPU dry run
	$(PY) -m benchmark.bench gpu $(ARGS)

report: $(VENV_STAMP) ## tables and plots for SWEEP=<sweep dir> (default: the newest sweep)
	$(PY) -m benchmark.report $(SWEEP)

EXP ?= table1
plan: $(VENV_STAMP) ## cells of EXP=<preset> (default table1): status in the results root, work left, projected time (ARGS="slm=tiny --queries-per-s 20")
	$(PY) -m benchmark.plan +experiment=$(EXP) $(ARGS)

prompt-stats: $(VENV_STAMP) ## prompt token statistics per env x prompt variant
	$(PY) -m benchmark.prompts stats

slurm-up: ## single-node SLURM on this machine (root, Debian); `eval` what launchers/local-slurm/up.sh prints to get SLURM_CONF
	bash launchers/local-slurm/up.sh

slurm-down: ## stop the daemons slurm-up started
	bash launchers/local-slurm/down.sh

clean: ## remove outputs (checkpoints, runs, cache) but keep outputs/README.md
	find outputs -mindepth 1 -not -name README.md -delete
