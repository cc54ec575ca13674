#!/usr/bin/env bash
# Trains the Fashion-MNIST demo on N ranks (default 4) with delayed updates and update periods
# (AllreduceOptions::delay, period; docs/scheduler.md), with SGD with momentum, Adam and AdamW,
# and prints a markdown table of final test accuracy against the synchronous run of the same
# optimizer. Used for docs/scheduler.md ("Accuracy with delayed updates and periods").
#   tools/delayed_accuracy.sh [ranks] [epochs]
# OVERLAP_BIN=<bazel-bin directory> skips the build and uses binaries built there.
# OVERLAP_OPTIMIZERS: any of sgd adam adamw (default all three).
# OVERLAP_CORRECTIONS: which --staleness-correction values run for each schedule, any of
#   off on predict predict-warmup (predict with --warmup-epochs 1) (default all four).
#   OVERLAP_CORRECTION=only, the old switch, means "on".
# OVERLAP_SCHEDULES: "|"-separated schedules (default the four below). OVERLAP_SEED: --seed.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-4}
epochs=${2:-4}
bin=${OVERLAP_BIN:-}
if [ -z "$bin" ]; then
  bazel build //examples:mnist_mlp //launcher:overlaprun >/dev/null 2>&1
  bin=$(bazel info bazel-bin 2>/dev/null)
fi
optimizers=${OVERLAP_OPTIMIZERS:-sgd adam adamw}
corrections=${OVERLAP_CORRECTIONS:-off on predict predict-warmup}
[ "${OVERLAP_CORRECTION:-}" = only ] && corrections=on
IFS='|' read -r -a schedules <<<"${OVERLAP_SCHEDULES:---delay 1|--delay 1 --period 2|--delay 1 --period 4|--delay 2 --period 4}"
seed=${OVERLAP_SEED:-42}
declare -A opt_flags=([sgd]="--optimizer sgd" [adam]="--optimizer adam --lr 0.001"
                      [adamw]="--optimizer adamw --lr 0.001 --weight-decay 0.01")
declare -A corr_flags=([off]="--staleness-correction off" [on]="--staleness-correction on"
                       [predict]="--staleness-correction predict"
                       [predict-warmup]="--staleness-correction predict --warmup-epochs 1")
# "optimizer flags|schedule flags"; the first run of each optimizer is its synchronous baseline.
runs=()
for o in $optimizers; do
  opt=${opt_flags[$o]}
  runs+=("$opt|")
  for sched in "${schedules[@]}"; do
    for c in $corrections; do
      runs+=("$opt|$sched${corr_flags[$c]:+ ${corr_flags[$c]}}")
    done
  done
done
echo "| optimizer | schedule | test accuracy after ${epochs} epochs (seed ${seed}) | vs synchronous (points) |"
echo "|---|---|---|---|"
base=""
for run in "${runs[@]}"; do
  opt=${run%%|*}
  sched=${run#*|}
  # shellcheck disable=SC2086  # flags are words
  out=$("$bin/launcher/overlaprun" -np "$ranks" -- "$bin/examples/mnist_mlp" --epochs "$epochs" \
        --seed "$seed" $opt $sched 2>&1) || true
  last=$(grep '^epoch' <<<"$out" | tail -1) || true
  if [ -z "$last" ]; then
    echo "| $opt | ${sched:-synchronous} | failed: $(tail -1 <<<"$out") | |"
    continue
  fi
  acc=$(sed -E 's/.*test accuracy ([0-9.]+)%.*/\1/' <<<"$last")
  [ -z "$sched" ] && base=$acc
  awk -v o="$opt" -v s="${sched:-synchronous}" -v a="$acc" -v b="$base" \
    'BEGIN {printf "| %s | %s | %.2f%% | %+.2f |\n", o, s, a, a - b}'
done
