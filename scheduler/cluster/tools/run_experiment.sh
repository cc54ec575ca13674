#!/bin/bash
# The cluster experiment of docs/cluster-sim.md: the paper's setup (64 GPUs, its job mix) with
# 80, 160 and 480 jobs under every placement x communication policy pair, the planner table,
# a seed check, an eta sweep and a load sweep. Writes JSON lines into OUT_DIR.
#
#   scheduler/cluster/tools/run_experiment.sh OUT_DIR [path/to/overlap-cluster-sim]
#
# Build the binary optimised first (bazel build -c opt //scheduler/cluster:overlap-cluster-sim);
# the main runs (part 1) take 25-45 s on one core, the whole script two to three minutes.
set -euo pipefail
out=${1:?usage: run_experiment.sh OUT_DIR [overlap-cluster-sim]}
sim=${2:-bazel-bin/scheduler/cluster/overlap-cluster-sim}
mkdir -p "$out"

# 1. Every policy pair, seed 1 (the table beside the paper's claims).
: > "$out/pairs.jsonl"
for jobs in 80 160 480; do
  "$sim" --preset paper --jobs "$jobs" --seed 1 --json >> "$out/pairs.jsonl"
done

# 2. Every job planned by fusion, mgwfbp or deft, under Ada-SRSF.
: > "$out/planners.jsonl"
for jobs in 80 160 480; do
  for planner in fusion mgwfbp "deft --staleness 0" "deft --staleness 1"; do
    # shellcheck disable=SC2086  # "deft --staleness 1" is a planner plus its flag
    "$sim" --preset paper --jobs "$jobs" --seed 1 --placement first-fit,lwf-4 \
      --communication ada-srsf --planner $planner --json >> "$out/planners.jsonl"
  done
done

# 3. Seeds 1-5 at 80 and 160 jobs: how much of a difference is one trace's luck.
: > "$out/seeds.jsonl"
for jobs in 80 160; do
  for seed in 1 2 3 4 5; do
    "$sim" --preset paper --jobs "$jobs" --seed "$seed" --placement first-fit,lwf-4 --json \
      >> "$out/seeds.jsonl"
  done
done

# 4. The contention constant.
: > "$out/eta.jsonl"
for eta in 0 0.1 0.2 0.5 1; do
  "$sim" --preset paper --jobs 160 --seed 1 --placement first-fit,lwf-4 --eta "$eta" --json \
    >> "$out/eta.jsonl"
done

# 5. The load: mean gap between arrivals, seeds 1-5, 160 jobs.
: > "$out/load.jsonl"
for gap in 5 20 60 120; do
  for seed in 1 2 3 4 5; do
    "$sim" --preset paper --jobs 160 --seed "$seed" --placement first-fit,lwf-4 \
      --mean-interarrival-s "$gap" --json >> "$out/load.jsonl"
  done
done
echo "wrote $out/{pairs,planners,seeds,eta,load}.jsonl"
