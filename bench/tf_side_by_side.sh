#!/usr/bin/env bash
# overlap.tensorflow and tf.distribute.MultiWorkerMirroredStrategy side by side on the 4-host
# namespace cluster, in one run (issue 12, "Side by side"). Needs root (or --localhost).
#
#   bench/tf_side_by_side.sh [--models vgg16,bert-base] [--systems overlap,mwms]
#       [--planners LIST] [--apis optimizer,forward,tape] [--rate 1gbit] [--steps N] [--warmup N] [--target-step-ms MS]
#       [--out FILE] [--bazel-bin DIR] [--localhost] [--quiet-wait SECONDS] [--lock-wait SECONDS]
#
# Systems:
#   overlap  overlap.tensorflow (python/, liboverlap.so, the op library compiled for this
#            TensorFlow), a tf.function step, once per planner of --planners
#            (default observed,wfbp,fusion,mgwfbp,bytescheduler,usbyte,dear,deft,deft-s1,auto;
#            deft-sN: deft with staleness N and update periods up to 4, delayed updates;
#            deft-sNpK: the same with update periods up to K (1: delays only);
#            deft-sN:off: the same without the adapters' staleness correction) and API
#            of --apis: "optimizer" (default), the Keras DistributedOptimizer; "forward", the
#            same with update_at_forward=True (each layer updated just before its next
#            forward); "tape", DistributedGradientTape feeding the optimizer
#   mwms     tf.distribute.MultiWorkerMirroredStrategy (RING collectives over gRPC), TF_CONFIG
#            with one worker per rank on the ranks' hosts, ports 23456 + rank
# The model (bench/tf_models.py): the profile's layers with real shapes (first dimension scaled)
# and compute slept, scaled as bench/torch_side_by_side.sh's emulated part: 16 workers on
# 10 Gbit/s at --target-step-ms per ideal step. The same SleepOptimizer for both.
# --localhost: 4 ranks on this machine, no cluster, no link cap (root not needed).
# --lock-wait: how long to wait for the cluster lock others' benchmarks hold (default 3600 s).
# --bazel-bin DIR: take overlaprun and liboverlap.so from DIR instead of building them.
# Each run first waits (at most --quiet-wait, default 300 s) until the shared CPU is at most 25%
# busy, and records the busy fraction it found.
# Output: one JSON line per run on stdout and in docs/data/tf_side_by_side.jsonl (--out), each
# with "cpu_busy_before" and the 1-minute load average. The cluster is taken down on exit.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=$ROOT/tools/cluster/cluster.sh

die() { echo "tf_side_by_side.sh: $*" >&2; exit 1; }
note() { echo "tf_side_by_side.sh: $*" >&2; }

models=vgg16,bert-base systems=overlap,mwms rate=1gbit steps=20 warmup=25 target=1000
planners=observed,wfbp,fusion,mgwfbp,bytescheduler,usbyte,dear,deft,deft-s1,auto apis=optimizer
out=$ROOT/docs/data/tf_side_by_side.jsonl bazel_bin="" localhost=0 quiet_wait=300 lock_wait=3600
max_busy=0.25
while (($#)); do
  case $1 in
    --models) models=${2:-}; shift 2 || die "--models needs a list" ;;
    --systems) systems=${2:-}; shift 2 || die "--systems needs a list" ;;
    --planners) planners=${2:-}; shift 2 || die "--planners needs a list" ;;
    --apis) apis=${2:-}; shift 2 || die "--apis needs a list" ;;
    --rate) rate=${2:-}; shift 2 || die "--rate needs a value like 1gbit" ;;
    --steps) steps=${2:-}; shift 2 || die "--steps needs a number" ;;
    --warmup) warmup=${2:-}; shift 2 || die "--warmup needs a number" ;;
    --target-step-ms) target=${2:-}; shift 2 || die "--target-step-ms needs a number" ;;
    --out) out=${2:-}; shift 2 || die "--out needs a file" ;;
    --bazel-bin) bazel_bin=${2:-}; shift 2 || die "--bazel-bin needs a directory" ;;
    --localhost) localhost=1; shift ;;
    --quiet-wait) quiet_wait=${2:-}; shift 2 || die "--quiet-wait needs seconds" ;;
    --lock-wait) lock_wait=${2:-}; shift 2 || die "--lock-wait needs seconds" ;;
    -h | --help) sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
((localhost)) || [ "$(id -u)" -eq 0 ] || die "needs root for the namespace cluster (or --localhost)"
read -r -a model_list <<<"${models//,/ }"
read -r -a system_list <<<"${systems//,/ }"
read -r -a planner_list <<<"${planners//,/ }"
read -r -a api_list <<<"${apis//,/ }"

# ---- a private copy of everything a run needs: others edit and build in this tree meanwhile ----
if [ -z "$bazel_bin" ]; then
  (cd "$ROOT" && bazel build //launcher:overlaprun //runtime:liboverlap.so >&2) || die "bazel build failed"
  bazel_bin=$(cd "$ROOT" && bazel info bazel-bin 2>/dev/null) || die "bazel info bazel-bin failed"
fi
for f in launcher/overlaprun runtime/liboverlap.so; do
  [ -f "$bazel_bin/$f" ] || die "$bazel_bin/$f is missing"
done
BIN=$(mktemp -d /tmp/tf_side_by_side.XXXXXX)
LOG=$BIN/logs
mkdir -p "$LOG" "$BIN/bench" "$BIN/scheduler" "$BIN/runtime"
cp "$ROOT"/bench/{tf_bench.py,tf_models.py,torch_models.py,torch_bench.py,torch_systems.py} "$BIN/bench/"
cp -r "$ROOT/scheduler/profiles" "$BIN/scheduler/"
cp -r "$ROOT/python" "$BIN/python"
cp "$ROOT/runtime/c_api.h" "$BIN/runtime/"  # the op library compiles against it
find "$BIN/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$bazel_bin/launcher/overlaprun" "$bazel_bin/runtime/liboverlap.so" "$BIN/"
PY=$(python3 -c 'import sys; print(sys.executable)')
# The op library, compiled once for this TensorFlow into the copy (build_ops.py).
ops=$(PYTHONPATH=$BIN/python OVERLAP_LIBRARY=$BIN/liboverlap.so OVERLAP_TF_OPS_CACHE=$BIN/tf_ops \
  TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c 'from overlap.tensorflow import op_library; print(op_library.library_path())' 2>&1 | tail -1 || true)
[ -f "$ops" ] || die "the TensorFlow op library does not build: $ops"
chmod -R a+rX "$BIN"

if ((localhost)); then
  launch=(timeout -k 10)
  mpi=(-np 4 --oversubscribe)
  workers=127.0.0.1,127.0.0.1,127.0.0.1,127.0.0.1
else
  # shellcheck source=../tools/cluster/session.sh
  source "$ROOT/tools/cluster/session.sh"
  # Others' cluster benchmarks hold the lock for tens of minutes: wait up to --lock-wait for it
  # to come free before cluster_session takes it (which waits only 300 s).
  note "waiting up to ${lock_wait} s for /tmp/overlap-cluster.lock"
  flock -w "$lock_wait" /tmp/overlap-cluster.lock true || die "the cluster lock stayed taken for ${lock_wait} s"
  cluster_session "$rate"
  launch=(timeout -k 10)
  mpi=(-np 4 --hostfile "$HOSTFILE" --tcp-only)
  workers=10.77.0.1,10.77.0.2,10.77.0.3,10.77.0.4  # h1..h4: mpirun maps rank r to h(r+1)
fi
mkdir -p "$(dirname "$out")"
: >"$out"

cpu_busy() {  # fraction of the last 2 s the CPUs were busy, from /proc/stat
  local a b
  a=$(head -1 /proc/stat); sleep 2; b=$(head -1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { n = split(a, x); split(b, y); t = 0
    for (i = 2; i <= n; i++) t += y[i] - x[i]
    idle = (y[5] - x[5]) + (y[6] - x[6]); printf "%.2f", (t > 0 ? 1 - idle / t : 0) }'
}
wait_quiet() {  # until the shared CPU is mostly idle, at most quiet_wait seconds
  local waited=0 busy
  busy=$(cpu_busy)
  while awk -v b="$busy" -v m="$max_busy" 'BEGIN { exit !(b > m) }' && ((waited < quiet_wait)); do
    sleep 8; waited=$((waited + 10)); busy=$(cpu_busy)
  done
  echo "$busy"
}

failed=0
# run SYSTEM PLANNER MODEL [API]: one job of 4 ranks; appends its JSON line.
run() {
  local system=$1 planner=$2 model=$3 api=${4:-} env_args=(OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2
    TF_NUM_INTRAOP_THREADS=1 TF_ENABLE_ONEDNN_OPTS=0) mpi_args="" args=()
  case $system in
    overlap)
      env_args+=(PYTHONPATH="$BIN/python" OVERLAP_LIBRARY="$BIN/liboverlap.so" OVERLAP_TF_OPS_LIBRARY="$ops")
      # The ring for non-blocking allreduce, as bench/torch_side_by_side.sh.
      mpi_args="--mca coll_libnbc_iallreduce_algorithm 1"
      args+=(--api "$api")
      [[ $planner != *:off ]] || args+=(--staleness-correction off)
      if [[ $planner =~ ^deft-s([0-9]+)(p([0-9]+))?(:off)?$ ]]; then
        # deft-sN: update periods up to 4; deft-sNpK: up to K (1: delays only).
        env_args+=(OVERLAP_PLANNER=deft OVERLAP_STALENESS="${BASH_REMATCH[1]}"
                   OVERLAP_MAX_PERIOD="${BASH_REMATCH[3]:-4}"
                   OVERLAP_BUDGET=-1)  # at its bound: what delays buy in step time
      else
        env_args+=(OVERLAP_PLANNER="$planner")
      fi ;;
    mwms) args+=(--workers "$workers") ;;
    *) die "unknown system '$system' (overlap, mwms)" ;;
  esac
  local log=$LOG/$system-${planner:-none}${api:+-$api}-$model.log busy rc=0 line
  busy=$(wait_quiet)
  note "$system ${planner:+($planner${api:+, $api}) }$model ($(date -u +%H:%M:%S) UTC, CPU busy before: $busy, load $(cut -d' ' -f1-3 /proc/loadavg))"
  local limit=$((300 + (warmup + steps) * target * 4 / 1000))
  local cmd=("$BIN/overlaprun" "${mpi[@]}" --collective-timeout 120
    -x OMP_NUM_THREADS -x TF_CPP_MIN_LOG_LEVEL -x TF_NUM_INTRAOP_THREADS -x TF_ENABLE_ONEDNN_OPTS
    ${mpi_args:+--mpi-args "$mpi_args"}
    -- "$PY" "$BIN/bench/tf_bench.py" --system "$system" --model "$model" --warmup-steps "$warmup"
    --steps "$steps" --link-rate "$rate" --target-step-ms "$target" "${args[@]}")
  if ((localhost)); then
    env "${env_args[@]}" "${launch[@]}" "$limit" "${cmd[@]}" </dev/null >"$log.out" 2>"$log" || rc=$?
  else
    env "${env_args[@]}" "${launch[@]}" "$limit" "$CLUSTER" exec "${cmd[@]}" </dev/null >"$log.out" 2>"$log" || rc=$?
  fi
  line=$(grep -m1 '^{' "$log.out" || true)
  if ((rc == 0)) && [ -n "$line" ]; then
    "$PY" -c 'import json, sys; d = json.loads(sys.argv[1]); d["cpu_busy_before"] = float(sys.argv[2]); d["where"] = sys.argv[3]; print(json.dumps(d))' \
      "$line" "$busy" "$( ((localhost)) && echo localhost || echo "cluster $rate")" | tee -a "$out"
  else
    local reason
    reason=$(grep -E '^[A-Za-z_.]*(Error|Exception)\b|tf_bench.py:|overlaprun: job failed' "$log" | head -1 || true)
    [ -n "$reason" ] || reason=$(tail -1 "$log")
    ((rc != 124)) || reason="timed out after ${limit} s; $reason"
    note "$system $planner $model failed (status $rc; log $log): $reason"
    failed=$((failed + 1))
    "$PY" -c 'import json, sys; print(json.dumps({"system": sys.argv[1], "planner": sys.argv[2] or None, "model": sys.argv[3], "api": sys.argv[5] or None, "error": sys.argv[4]}))' \
      "$system" "$planner" "$model" "$reason" "$api" | tee -a "$out"
  fi
}

for model in "${model_list[@]}"; do
  for system in "${system_list[@]}"; do
    if [ "$system" = overlap ]; then
      for planner in "${planner_list[@]}"; do
        for api in "${api_list[@]}"; do run overlap "$planner" "$model" "$api"; done
      done
    else
      run "$system" "" "$model"
    fi
  done
done
note "wrote $out; logs in $LOG"
((failed == 0)) || die "$failed runs failed (their lines in $out carry \"error\")"
