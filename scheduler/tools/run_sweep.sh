#!/bin/bash
# The scaling sweep of docs/simulator-results.md: every planner, 4..2048 ring workers, 10 and
# 100 Gbit/s, 10 us latency, staleness 1 and update periods up to 4 (deft only; the default
# budget), for every bundled profile.
# Usage: scheduler/tools/run_sweep.sh OUT_DIR [path/to/overlap-sim]
set -euo pipefail
out=${1:?usage: run_sweep.sh OUT_DIR [overlap-sim]}
sim=${2:-bazel-bin/scheduler/overlap-sim}
mkdir -p "$out"
for model in resnet50 resnet101 vgg16 bert-base bert-large gpt2-small gpt2-medium; do
  for gbit in 10 100; do
    "$sim" --model "$model" --sweep-workers 4,8,...,2048 --planners all --cost ring \
      --latency-us 10 --bandwidth-gbit "$gbit" --staleness 1 --max-period 4 --json > "$out/$model-$gbit.jsonl"
  done
done
