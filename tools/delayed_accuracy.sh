#!/usr/bin/env bash
# Trains the Fashion-MNIST demo on N ranks (default 4) with delayed updates and update periods
# (AllreduceOptions::delay, period; docs/scheduler.md), with SGD with momentum and with Adam, and
# prints a markdown table of final test accuracy against the synchronous run of the same
# optimizer. Used for docs/scheduler.md.
#   tools/delayed_accuracy.sh [ranks] [epochs]
# OVERLAP_BIN=<bazel-bin directory> skips the build and uses binaries built there.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-4}
epochs=${2:-4}
bin=${OVERLAP_BIN:-}
if [ -z "$bin" ]; then
  bazel build //examples:mnist_mlp //launcher:overlaprun >/dev/null 2>&1
  bin=$(bazel info bazel-bin 2>/dev/null)
fi
# "optimizer flags|schedule flags"; the first run of each optimizer is its synchronous baseline.
# OVERLAP_CORRECTION=only runs just the schedules with --staleness-correction on (and the
# baselines); by default each schedule runs without and with it.
runs=()
for opt in "--optimizer sgd" "--optimizer adam --lr 0.001"; do
  runs+=("$opt|")
  for sched in "--delay 1" "--delay 1 --period 2" "--delay 1 --period 4" "--delay 2 --period 4"; do
    [ "${OVERLAP_CORRECTION:-both}" = only ] || runs+=("$opt|$sched")
    runs+=("$opt|$sched --staleness-correction on")
  done
done
echo "| optimizer | schedule | test accuracy after ${epochs} epochs | vs synchronous (points) |"
echo "|---|---|---|---|"
base=""
for run in "${runs[@]}"; do
  opt=${run%%|*}
  sched=${run#*|}
  # shellcheck disable=SC2086  # flags are words
  out=$("$bin/launcher/overlaprun" -np "$ranks" -- "$bin/examples/mnist_mlp" --epochs "$epochs" \
        $opt $sched 2>&1) || true
  last=$(grep '^epoch' <<<"$out" | tail -1)
  if [ -z "$last" ]; then
    echo "| $opt | ${sched:-synchronous} | failed: $(tail -1 <<<"$out") | |"
    continue
  fi
  acc=$(sed -E 's/.*test accuracy ([0-9.]+)%.*/\1/' <<<"$last")
  [ -z "$sched" ] && base=$acc
  awk -v o="$opt" -v s="${sched:-synchronous}" -v a="$acc" -v b="$base" \
    'BEGIN {printf "| %s | %s | %.2f%% | %+.2f |\n", o, s, a, a - b}'
done
