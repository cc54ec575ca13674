#!/usr/bin/env bash
# Runs bench/allreduce in SETS sets of RUNS runs (JSON), 20 s apart, and summarises the median
# ratio per set and case (docs/benchmarks.md). Usage: tools/bench_sets.sh [SETS] [RUNS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
sets=${1:-4} runs=${2:-3} out=${3:-/tmp/bench_sets.jsonl}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bazel build //bench:allreduce >/dev/null 2>&1
bin=$(bazel info bazel-bin 2>/dev/null)/bench/allreduce
: >"$out"
for set in $(seq "$sets"); do
  for run in $(seq "$runs"); do
    echo "# set $set run $run $(date -u +%H:%M:%S)" >>"$out"
    timeout 600 mpirun --oversubscribe -np 4 "$bin" --json 2>/dev/null >>"$out"
  done
  [ "$set" -lt "$sets" ] && sleep 20
done
python3 tools/bench_summary.py "$out"
