#!/bin/bash
# The cluster experiment of docs/cluster-sim.md: the paper's setup (64 GPUs, its job mix) with
# 80, 160 and 480 jobs under every placement x communication policy pair, the planner table,
# a seed check, an eta sweep, a load sweep and a link-utilization sweep. Writes JSON lines into
# OUT_DIR; report.py turns them into the doc's tables and plot.
#
#   scheduler/cluster/tools/run_experiment.sh OUT_DIR [path/to/overlap-cluster-sim]
#
# Build the binary optimised first (bazel build -c opt //scheduler/cluster:overlap-cluster-sim).
# The six parts run side by side (each writes its own file): about 80 s of CPU in all, at most
# 22 s per part, so about 40 s of wall time on two free cores. No run is repeated: report.py takes the mean gap of 5 s
# from seeds.jsonl and u = 1 (at 160 and 480 jobs) from pairs, seeds and eta.jsonl.
set -euo pipefail
out=${1:?usage: run_experiment.sh OUT_DIR [overlap-cluster-sim]}
sim=${2:-bazel-bin/scheduler/cluster/overlap-cluster-sim}
mkdir -p "$out"

# 1. Every policy pair, seed 1 (the table beside the paper's claims).
pairs() {
  for jobs in 80 160 480; do
    "$sim" --preset paper --jobs "$jobs" --seed 1 --json
  done
}

# 2. Every job planned by fusion, mgwfbp or deft, under Ada-SRSF.
planners() {
  for jobs in 80 160 480; do
    for planner in fusion mgwfbp "deft --staleness 0" "deft --staleness 1"; do
      # shellcheck disable=SC2086  # "deft --staleness 1" is a planner plus its flag
      "$sim" --preset paper --jobs "$jobs" --seed 1 --placement first-fit,lwf-4 \
        --communication ada-srsf --planner $planner --json
    done
  done
}

# 3. Seeds 1-5 at 80 and 160 jobs: how much of a difference is one trace's luck.
seeds() {
  for jobs in 80 160; do
    for seed in 1 2 3 4 5; do
      "$sim" --preset paper --jobs "$jobs" --seed "$seed" --placement first-fit,lwf-4 --json
    done
  done
}

# 4. The contention constant.
eta() {
  for eta in 0 0.1 0.2 0.5 1; do
    "$sim" --preset paper --jobs 160 --seed 1 --placement first-fit,lwf-4 --eta "$eta" --json
  done
}

# 5. The load: mean gap between arrivals, seeds 1-5, 160 jobs (the preset's 5 s is seeds.jsonl).
load() {
  for gap in 20 60 120; do
    for seed in 1 2 3 4 5; do
      "$sim" --preset paper --jobs 160 --seed "$seed" --placement first-fit,lwf-4 \
        --mean-interarrival-s "$gap" --json
    done
  done
}

# 6. Link utilization u < 1 (a transfer alone leaves part of the NIC idle; contention.h): does
# Ada-SRSF then beat SRSF(1)? u = 0.8 and 0.6 with eta 0, 0.2 and 0.5 at 80 and 160 jobs,
# eta = 0.2 at 480 jobs and for seeds 2-5 at 160; u = 1 at 80 jobs for eta 0 and 0.5 (the
# other u = 1 cases are in parts 1, 3 and 4).
utilization() {
  util() {  # jobs seed u eta
    "$sim" --preset paper --jobs "$1" --seed "$2" --link-utilization "$3" --eta "$4" \
      --placement first-fit,lwf-4 --communication srsf1,srsf2,ada-srsf --json
  }
  util 80 1 1 0
  util 80 1 1 0.5
  for u in 0.8 0.6; do
    for eta in 0 0.2 0.5; do
      util 80 1 "$u" "$eta"
      util 160 1 "$u" "$eta"
    done
    util 480 1 "$u" 0.2
    for seed in 2 3 4 5; do
      util 160 "$seed" "$u" 0.2
    done
  done
}

pids=()
for part in pairs planners seeds eta load utilization; do
  "$part" > "$out/$part.jsonl" &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid"
done
echo "wrote $out/{pairs,planners,seeds,eta,load,utilization}.jsonl"
