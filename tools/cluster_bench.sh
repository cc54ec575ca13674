#!/usr/bin/env bash
# Emulated models on the 4-host namespace cluster: one bench/model_step run per (model, planner)
# with every host link capped by tc tbf, printed and written as JSON lines, then a markdown table
# (docs/benchmarks.md, "Emulated models on the namespace cluster"). Needs root.
#
#   tools/cluster_bench.sh [--quick] [--models vgg16,resnet50,bert-base] [--planners LIST]
#                          [--rate 1gbit] [--steps N] [--target-step-ms MS] [--out FILE] [--no-build]
#                          [--ranks-per-host K]
#
# --planners: comma- or space-separated; default observed,wfbp,fusion,mgwfbp,bytescheduler,usbyte,
#   dear,deft,auto (deft runs with OVERLAP_STALENESS=0; deft-s1, deft-s2: staleness 1 or 2 and
#   update periods up to 4, the runtime running the delayed plan); NAME+SPEC: NAME with
#   OVERLAP_COMPRESSION=SPEC, e.g. deft-s1+fp16; NAME@flat: NAME with OVERLAP_TWO_STAGE=off (no
#   two-stage buckets where ranks share hosts). --ranks-per-host K: 4 x K ranks, K on each host
#   (one by default). --quick: resnet50 only, 10 measured
#   steps, 0.5 s steps, at most 30 warm-up steps (about 3-5 minutes for the nine planners).
# Scaling: the cluster comes up once, with one rate for every model (--rate, default 1gbit); each
# model gets its own time scale (the ideal step is --target-step-ms, default 1000) and bytes scale
# s = time scale x rate / 1 GB/s, which keeps the communication/computation ratio of 16 workers
# on 10 Gbit/s (bench/model_step.cc). The cluster is taken down on exit, whatever happens.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=$ROOT/tools/cluster/cluster.sh

die() { echo "cluster_bench.sh: $*" >&2; exit 1; }

quick=0 models="" planners="" rate=1gbit steps="" target="" out="" out_given="" build=1 per_host=1
while (($#)); do
  case $1 in
    --quick) quick=1; shift ;;
    --models) models=${2:-}; shift 2 || die "--models needs a list" ;;
    --planners) planners=${2:-}; shift 2 || die "--planners needs a list" ;;
    --rate) rate=${2:-}; shift 2 || die "--rate needs a value like 1gbit" ;;
    --steps) steps=${2:-}; shift 2 || die "--steps needs a number" ;;
    --target-step-ms) target=${2:-}; shift 2 || die "--target-step-ms needs a number" ;;
    --out) out=${2:-}; out_given=1; shift 2 || die "--out needs a file" ;;
    --no-build) build=0; shift ;;
    --ranks-per-host) per_host=${2:-}; shift 2 || die "--ranks-per-host needs a number" ;;
    -h | --help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "needs root (it brings up the namespace cluster: network namespaces, veth, tc); run it as root or with sudo"

if ((quick)); then
  models=${models:-resnet50} steps=${steps:-10} target=${target:-500} warmup=30
  out=${out:-$ROOT/docs/data/cluster_bench_quick.jsonl}
  plot_default=$ROOT/docs/img/cluster_bench_quick.png
else
  models=${models:-vgg16,resnet50,bert-base} steps=${steps:-20} target=${target:-1000} warmup=60
  out=${out:-$ROOT/docs/data/cluster_bench.jsonl}
  plot_default=$ROOT/docs/img/cluster_bench.png
fi
# The plot goes to docs/img/ for the default output files, next to the output otherwise.
plot=$plot_default
[ -z "$out_given" ] || plot=${out%.jsonl}.png
planners=${planners:-observed,wfbp,fusion,mgwfbp,bytescheduler,usbyte,dear,deft,auto}
read -r -a model_list <<<"${models//,/ }"
read -r -a planner_list <<<"${planners//,/ }"
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps needs a positive integer, got '$steps'"
[[ $per_host =~ ^[1-9]$ ]] || die "--ranks-per-host needs an integer 1..9, got '$per_host'"

# shellcheck source=cluster/session.sh
source "$ROOT/tools/cluster/session.sh"
copy_binaries "$build" bench/model_step launcher/overlaprun

# One cluster per machine: the same lock as the cluster tests (tests/cluster/BUILD).
cluster_session "$rate" "$per_host"

mkdir -p "$(dirname "$out")"
: >"$out"
failed=0
# Per run: warm-up steps of at most ~2 x target, measured steps and start-up.
run_timeout=$(( (warmup + steps + 10) * target * 2 / 1000 + 60 ))
for model in "${model_list[@]}"; do
  for planner in "${planner_list[@]}"; do
    # deft-sN: deft with staleness bound N and update periods up to 4 (delayed updates).
    # NAME+SPEC: NAME with OVERLAP_COMPRESSION=SPEC (e.g. deft-s1+fp16).
    # NAME@flat: no two-stage buckets.
    spec=${planner%@flat} two_stage=auto
    [ "$spec" = "$planner" ] || two_stage=off
    name=${spec%%+*} compression=""
    [ "$name" = "$spec" ] || compression=${spec#*+}
    env_args=(OVERLAP_PLANNER="$name")
    [ "$name" != deft ] || env_args+=(OVERLAP_STALENESS=0)
    if [[ $name =~ ^deft-s([0-9]+)$ ]]; then
      # At its bound (OVERLAP_BUDGET=-1): the rows measure what delays buy in step time.
      env_args=(OVERLAP_PLANNER=deft OVERLAP_STALENESS="${BASH_REMATCH[1]}" OVERLAP_MAX_PERIOD=4
                OVERLAP_BUDGET=-1)
    fi
    [ -z "$compression" ] || env_args+=(OVERLAP_COMPRESSION="$compression")
    env_args+=(OVERLAP_TWO_STAGE="$two_stage")
    log=$LOG/$model-$planner.log
    echo "cluster_bench.sh: $model / $planner ($(date -u +%H:%M:%S) UTC)" >&2
    # The ring allreduce (libnbc algorithm 1) drives tbf-capped links at the cap, the default
    # Rabenseifner well below it (tests/cluster/bandwidth_test.sh), and the ideal is a ring.
    set +e
    env "${env_args[@]}" timeout -k 10 "$run_timeout" "$CLUSTER" exec "$BIN/overlaprun" \
      -np $((4 * per_host)) \
      --hostfile "$HOSTFILE" --tcp-only --collective-timeout 60 \
      --mpi-args "--mca coll_libnbc_iallreduce_algorithm 1" \
      -- "$BIN/model_step" --model "$model" --link-rate "$rate" --steps "$steps" \
      --target-step-ms "$target" --max-warmup-steps "$warmup" >"$log.out" 2>"$log"
    rc=$?
    set -e
    line=$(grep -m1 '^{' "$log.out" || true)
    if ((rc == 0)) && [ -n "$line" ]; then
      echo "$line" | tee -a "$out"
    else
      failed=$((failed + 1))
      reason=$(grep -m1 -E 'bench/model_step:|overlaprun: job failed' "$log" || tail -1 "$log")
      ((rc != 124)) || reason="timed out after ${run_timeout} s; $reason"
      echo "cluster_bench.sh: $model / $planner failed (status $rc): $reason" >&2
      python3 -c 'import json, sys; print(json.dumps({"model": sys.argv[1], "planner": sys.argv[2], "error": sys.argv[3]}))' \
        "$model" "$planner" "$reason" | tee -a "$out"
    fi
  done
done

echo "cluster_bench.sh: wrote $out; logs in $LOG" >&2
python3 "$ROOT/tools/cluster_bench_report.py" "$out" --plot "$plot"
((failed == 0)) || die "$failed of $(( ${#model_list[@]} * ${#planner_list[@]} )) runs failed (their lines in $out carry \"error\")"
