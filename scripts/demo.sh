#!/usr/bin/env bash
# The demo: what is registered, then scoring the example data with a config.
set -euo pipefail
cd "$(dirname "$0")/.."
RH=.venv/bin/rewardhub
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
# Training (rewardhub train examples/arithmetic.yaml) joins the demo once the trainer issue lands.
