#!/usr/bin/env bash
# Heterogeneous links and stragglers on the 4-host namespace cluster (docs/benchmarks.md, "Slow
# links and stragglers"), every run with the adaptive allreduce off (the runtime's ring) and on
# (OVERLAP_ADAPTIVE_ALLREDUCE=auto: measured link rates and lateness, weighted shards). Needs root.
#
#   tools/hetero_bench.sh [--part allreduce|steps|all] [--rate 1gbit] [--scenarios LIST]
#                         [--trials N] [--bytes B] [--models vgg16,bert-base] [--planners observed]
#                         [--quick] [--out FILE] [--no-build]
#
# Scenarios: uniform; slow-link-0.5 and slow-link-0.25 (host h3's link at half and a quarter of
# --rate); straggler-30 (rank 2's backward 30% slower) and hiccups (rank 2 pauses 50-200 ms once
# per backward), which only the steps part runs.
#
# Part "allreduce": one 64 MiB allreduce (bench/allreduce). One JSON line per run,
#   {"case":"allreduce","scenario":..,"adaptive":true|false,"bytes":..,"ms":..,"mpi_ms":..,
#    "vs_uniform":..,"weighted_allreduces":..,"link_rates":..}
# where ms is the runtime's median time per allreduce, mpi_ms MPI_Allreduce's in the same run,
# and vs_uniform ms over the uniform scenario's ring (adaptive off); then a table. The bound for
# one link at rate r x B among 4 hosts is 2m/(rB) against the uniform ring's 1.5m/B: 1.33 at
# half rate, 2.67 at a quarter; the ring takes 2 and 4.
#
# Part "steps": emulated training steps (bench/model_step, slept compute as in
# tools/cluster_bench.sh) per model, planner and scenario. One JSON line per run,
#   {"case":"step","model":..,"scenario":..,"planner":..,"adaptive":true|false,"step_ms":..,
#    "sim_step_ms":..,"sim_error":..,"ideal_ms":..,"weighted_allreduces":..,"link_rates":..}
# --quick: 10 measured steps of 0.5 s, at most 30 warm-up steps (about 20 minutes for the
# defaults); otherwise 20 steps of 1 s and 60 (about 45 minutes).
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=$ROOT/tools/cluster/cluster.sh
FAULTS=$ROOT/tools/cluster/faults.sh

die() { echo "hetero_bench.sh: $*" >&2; exit 1; }

part=all scenarios="" rate=1gbit trials=7 bytes=$((64 << 20)) out="" build=1 quick=0
models=vgg16,bert-base planners=observed
while (($#)); do
  case $1 in
    --rate) rate=${2:-}; shift 2 || die "--rate needs a value like 1gbit" ;;
    --trials) trials=${2:-}; shift 2 || die "--trials needs a number" ;;
    --bytes) bytes=${2:-}; shift 2 || die "--bytes needs a number" ;;
    --out) out=${2:-}; shift 2 || die "--out needs a file" ;;
    --scenarios) scenarios=${2:-}; shift 2 || die "--scenarios needs a list" ;;
    --part) part=${2:-}; shift 2 || die "--part needs allreduce, steps or all" ;;
    --models) models=${2:-}; shift 2 || die "--models needs a list" ;;
    --planners) planners=${2:-}; shift 2 || die "--planners needs a list" ;;
    --quick) quick=1; shift ;;
    --no-build) build=0; shift ;;
    -h | --help) sed -n '2,34p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "needs root (it brings up the namespace cluster: network namespaces, veth, tc); run it as root or with sudo"
case $part in allreduce | steps | all) ;; *) die "--part must be allreduce, steps or all, got '$part'" ;; esac
if ((quick)); then
  steps=10 target=500 warmup=30 out=${out:-$ROOT/docs/data/hetero_bench_quick.jsonl}
else
  steps=20 target=1000 warmup=60 out=${out:-$ROOT/docs/data/hetero_bench.jsonl}
fi
[[ $trials =~ ^[1-9][0-9]*$ ]] || die "--trials needs a positive integer, got '$trials'"
[[ $bytes =~ ^[1-9][0-9]*$ ]] || die "--bytes needs a positive integer, got '$bytes'"
[[ ${rate,,} =~ ^([0-9]+)(k|m|g)bit$ ]] || die "--rate '$rate' is not a rate like 1gbit or 500mbit"
case ${BASH_REMATCH[2]} in k) unit=1000 ;; m) unit=1000000 ;; g) unit=1000000000 ;; esac
rate_bits=$((BASH_REMATCH[1] * unit))

# shellcheck source=cluster/session.sh
source "$ROOT/tools/cluster/session.sh"
copy_binaries "$build" bench/allreduce bench/model_step launcher/overlaprun
cluster_session "$rate"

# Sets up `scenario`'s links; prints model_step's extra flags for it.
scenario_setup() {
  "$FAULTS" clear >/dev/null
  case $1 in
    slow-link-0.5) "$FAULTS" rate h3 "$((rate_bits / 2000))kbit" >/dev/null ;;
    slow-link-0.25) "$FAULTS" rate h3 "$((rate_bits / 4000))kbit" >/dev/null ;;
    straggler-30) echo "--straggler 2:0.3" ;;
    hiccups) echo "--hiccups 2" ;;
    uniform) ;;
    *) die "unknown scenario '$1' (uniform, slow-link-0.5, slow-link-0.25, straggler-30, hiccups)" ;;
  esac
}

scenario_list() {
  local list=${scenarios:-$1}
  echo "${list//,/ }"
}

run_allreduce_part() {
  local scenario adaptive log rc line result uniform_ms=""
  for scenario in $(scenario_list uniform,slow-link-0.5,slow-link-0.25); do
    case $scenario in straggler-30 | hiccups) continue ;; esac
    scenario_setup "$scenario" >/dev/null
    for adaptive in off auto; do
      log=$LOG/allreduce-$scenario-$adaptive.log
      echo "hetero_bench.sh: allreduce, $scenario, adaptive $adaptive ($(date -u +%H:%M:%S) UTC)" >&2
      set +e
      OVERLAP_ADAPTIVE_ALLREDUCE=$adaptive timeout -k 10 600 "$CLUSTER" exec "$BIN/overlaprun" \
        -np 4 --hostfile "$HOSTFILE" --tcp-only --collective-timeout 120 \
        -- "$BIN/allreduce" --json --no-resnet50 --trials "$trials" --min-bytes "$bytes" \
        --max-bytes "$bytes" >"$log.out" 2>"$log"
      rc=$?
      set -e
      line=$(grep -m1 '^{"case":"size"' "$log.out" || true)
      if ((rc != 0)) || [ -z "$line" ]; then
        failed=$((failed + 1))
        echo "hetero_bench.sh: allreduce $scenario / $adaptive failed (status $rc): $(tail -2 "$log" | tr '\n' ' ')" >&2
        continue
      fi
      result=$(python3 - "$line" "$scenario" "$adaptive" "$uniform_ms" <<'PY'
import json, sys
run = json.loads(sys.argv[1])
ms = run["bytes"] / run["overlap_gbps"] / 1e6
mpi_ms = run["bytes"] / run["mpi_gbps"] / 1e6
uniform = float(sys.argv[4]) if sys.argv[4] else ms
print(json.dumps({
    "case": "allreduce", "scenario": sys.argv[2], "adaptive": sys.argv[3] == "auto",
    "bytes": run["bytes"], "ms": round(ms, 1), "mpi_ms": round(mpi_ms, 1),
    "vs_uniform": round(ms / uniform, 3),
    "weighted_allreduces": run.get("weighted_allreduces", 0),
    "link_rates": run.get("link_rates", "")}))
PY
)
      echo "$result" | tee -a "$out"
      if [ "$scenario" = uniform ] && [ "$adaptive" = off ]; then
        uniform_ms=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["ms"])' "$result")
      fi
    done
  done
}

run_steps_part() {
  local model planner scenario adaptive extra log rc line env_args
  local run_timeout=$(((warmup + steps + 10) * target * 3 / 1000 + 60))
  for model in ${models//,/ }; do
    for scenario in $(scenario_list uniform,slow-link-0.5,slow-link-0.25,straggler-30,hiccups); do
      extra=$(scenario_setup "$scenario")
      for planner in ${planners//,/ }; do
        for adaptive in off auto; do
          env_args=(OVERLAP_PLANNER="$planner" OVERLAP_ADAPTIVE_ALLREDUCE="$adaptive")
          [ "$planner" != deft ] || env_args+=(OVERLAP_STALENESS=0)
          log=$LOG/step-$model-$scenario-$planner-$adaptive.log
          echo "hetero_bench.sh: $model, $scenario, $planner, adaptive $adaptive ($(date -u +%H:%M:%S) UTC)" >&2
          set +e
          # shellcheck disable=SC2086  # $extra is a list of flags
          env "${env_args[@]}" timeout -k 10 "$run_timeout" "$CLUSTER" exec "$BIN/overlaprun" \
            -np 4 --hostfile "$HOSTFILE" --tcp-only --collective-timeout 60 \
            --mpi-args "--mca coll_libnbc_iallreduce_algorithm 1" \
            -- "$BIN/model_step" --model "$model" --link-rate "$rate" --steps "$steps" \
            --target-step-ms "$target" --max-warmup-steps "$warmup" $extra >"$log.out" 2>"$log"
          rc=$?
          set -e
          line=$(grep -m1 '^{' "$log.out" || true)
          if ((rc != 0)) || [ -z "$line" ]; then
            failed=$((failed + 1))
            echo "hetero_bench.sh: $model / $scenario / $planner / $adaptive failed (status $rc): $(tail -2 "$log" | tr '\n' ' ')" >&2
            continue
          fi
          python3 - "$line" "$scenario" "$adaptive" <<'PY' | tee -a "$out"
import json, sys
run = json.loads(sys.argv[1])
print(json.dumps({
    "case": "step", "model": run["model"], "scenario": sys.argv[2], "planner": run["planner"],
    "adaptive": sys.argv[3] == "auto", "step_ms": run["step_ms"],
    "sim_step_ms": run.get("sim_step_ms"), "sim_error": run.get("sim_error"),
    "ideal_ms": run["ideal_ms"], "weighted_allreduces": run.get("weighted_allreduces", 0),
    "link_rates": run.get("link_rates", "")}))
PY
        done
      done
    done
  done
}

mkdir -p "$(dirname "$out")"
: >"$out"
failed=0
[ "$part" = steps ] || run_allreduce_part
[ "$part" = allreduce ] || run_steps_part
"$FAULTS" clear >/dev/null || true

echo "hetero_bench.sh: wrote $out; logs in $LOG" >&2
python3 "$ROOT/tools/hetero_bench_report.py" "$out"
((failed == 0)) || die "$failed runs failed (see $LOG)"
