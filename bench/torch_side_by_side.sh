#!/usr/bin/env bash
# horovod.torch, torch DDP and overlap.torch side by side on the 4-host namespace cluster, in one
# run (issue 11, "Side by side"). Needs root.
#
#   bench/torch_side_by_side.sh [--quick] [--models vgg16,resnet50,bert-base] [--systems LIST]
#       [--planners LIST] [--rate 1gbit] [--steps N] [--warmup N] [--target-step-ms MS]
#       [--parts emulated,synthetic,tiny] [--out FILE] [--no-build] [--quiet-wait SECONDS]
#       [--library FILE] [--tiny-rounds N]
#
# Systems (--systems, default all of them):
#   horovod        horovod.torch 0.28.1 on torch 2.0.1 over MPI, as installed
#                  (bench/horovod_venv.sh builds it in ~/.cache/overlap/horovod-venv on first use)
#   horovod+yield  the same with OMPI_MCA_mpi_yield_when_idle=1: Horovod's background thread
#                  busy-polls MPI, which takes a shared core from compute; this gives it back
#   horovod-ring+yield  also Open MPI's ring for MPI_Allreduce, as overlap's runs get for theirs
#   ddp            torch DDP over gloo, newest torch (python3), bucket_cap_mb 25 (the default)
#   ddp-tuned      the same with the fastest bucket_cap_mb of a short sweep in the same job
#                  (and, in the synthetic part, ddp-torch2.0: DDP on the Horovod venv's torch)
#   overlap        overlap.torch (python/, OVERLAP_LIBRARY=liboverlap.so), newest torch, once per
#                  planner of --planners (default observed,wfbp,fusion,mgwfbp,bytescheduler,
#                  usbyte,dear,deft,auto; OVERLAP_PLANNER); PLANNER@step runs it with
#                  DistributedOptimizer(update_at_forward=False)
# Parts (--parts, default all):
#   emulated   the profile models (bench/torch_models.py) with compute slept, scaled like
#              bench/model_step.cc: 16 workers on 10 Gbit/s at --target-step-ms per ideal step
#   synthetic  a small ResNet on real CPU compute, img/s (Horovod's pytorch_synthetic_benchmark)
#   tiny       50 tiny tensors per step: coordination overhead, printed as overlap/horovod, and
#              above the same steps with no communication (local, local-torch2.0: each torch's
#              compute floor) as overhead ratios
# --quick: vgg16 only, 0.5 s steps, 8 measured steps after 20 warm-up (20-30 minutes).
# Output: one JSON line per run on stdout and in docs/data/torch_side_by_side.jsonl (--out), then
# docs/torch_side_by_side.md's tables and docs/img/torch_side_by_side.png
# (bench/torch_side_by_side_report.py). The cluster is taken down on exit, whatever happens.
# Each run waits (at most --quiet-wait, default 600 s) until the shared CPU is at most 25% busy.
# --library FILE: overlap.torch loads FILE instead of the freshly built liboverlap.so (to compare
# two builds of the core against the same baselines).
# --tiny-rounds N: the tiny part N times over (default 1), every system and both floors in each
# round, each line tagged with its round: Horovod's tiny step swings twofold between runs here, so
# overheads are compared round by round and by their medians.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=$ROOT/tools/cluster/cluster.sh

die() { echo "torch_side_by_side.sh: $*" >&2; exit 1; }
note() { echo "torch_side_by_side.sh: $*" >&2; }

quick=0 models="" systems="horovod,horovod+yield,horovod-ring+yield,ddp,ddp-tuned,overlap" planners="" rate=1gbit
steps="" warmup="" target="" parts="emulated,synthetic,tiny" out="" build=1 quiet_wait=600 max_busy=0.25
library="" tiny_rounds=1
while (($#)); do
  case $1 in
    --quick) quick=1; shift ;;
    --models) models=${2:-}; shift 2 || die "--models needs a list" ;;
    --systems) systems=${2:-}; shift 2 || die "--systems needs a list" ;;
    --planners) planners=${2:-}; shift 2 || die "--planners needs a list" ;;
    --rate) rate=${2:-}; shift 2 || die "--rate needs a value like 1gbit" ;;
    --steps) steps=${2:-}; shift 2 || die "--steps needs a number" ;;
    --warmup) warmup=${2:-}; shift 2 || die "--warmup needs a number" ;;
    --target-step-ms) target=${2:-}; shift 2 || die "--target-step-ms needs a number" ;;
    --parts) parts=${2:-}; shift 2 || die "--parts needs a list" ;;
    --out) out=${2:-}; shift 2 || die "--out needs a file" ;;
    --no-build) build=0; shift ;;
    --library) library=${2:-}; shift 2 || die "--library needs a file" ;;
    --tiny-rounds) tiny_rounds=${2:-}; shift 2 || die "--tiny-rounds needs a number" ;;
    --quiet-wait) quiet_wait=${2:-}; shift 2 || die "--quiet-wait needs seconds" ;;
    -h | --help) sed -n '2,36p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ $tiny_rounds =~ ^[1-9][0-9]*$ ]] || die "--tiny-rounds needs a positive number, got '$tiny_rounds'"
[ "$(id -u)" -eq 0 ] || die "needs root (it brings up the namespace cluster: network namespaces, veth, tc); run it as root or with sudo"

# Every system gets the same warm-up: overlap's scheduled planners adopt their plan after about
# 16 steps (docs/benchmarks.md), and the others are steady after a few.
if ((quick)); then
  models=${models:-vgg16} steps=${steps:-8} warmup=${warmup:-20} target=${target:-500}
  syn_steps=6 syn_warmup=3 tiny_steps=100 tiny_warmup=30 sweep="sweep:5,25,100"
else
  models=${models:-vgg16,resnet50,bert-base} steps=${steps:-20} warmup=${warmup:-25}
  target=${target:-1000} syn_steps=12 syn_warmup=4 tiny_steps=300 tiny_warmup=50
  sweep="sweep:2,5,10,25,50,100"
fi
planners=${planners:-observed,wfbp,fusion,mgwfbp,bytescheduler,usbyte,dear,deft,auto}
# The page and its plot are rewritten only for the default output; else the plot goes next to it.
report_args=()
if [ -z "$out" ]; then
  out=$ROOT/docs/data/torch_side_by_side.jsonl
else
  report_args=(--doc "" --plot "${out%.jsonl}.png")
fi
read -r -a model_list <<<"${models//,/ }"
read -r -a system_list <<<"${systems//,/ }"
read -r -a planner_list <<<"${planners//,/ }"
has() { [[ ",$1," == *",$2,"* ]]; }

# ---- what each system runs with ----------------------------------------------------------------
# Everything a run needs is copied to one directory first, so that builds and edits in the
# working tree during the run (other people work here) cannot change a system mid-run.
BIN=$(mktemp -d /tmp/torch_side_by_side.XXXXXX)
LOG=$BIN/logs
mkdir -p "$LOG"
# The repository's layout is kept: torch_models.py finds the profiles at ../scheduler/profiles.
mkdir -p "$BIN/bench" "$BIN/scheduler"
cp "$ROOT"/bench/torch_bench.py "$ROOT"/bench/torch_models.py "$ROOT"/bench/torch_systems.py "$BIN/bench/"
cp -r "$ROOT/scheduler/profiles" "$BIN/scheduler/"

if ((build)); then
  (cd "$ROOT" && bazel build //launcher:overlaprun //runtime:liboverlap.so >&2) || die "bazel build failed"
fi
# bazel info, not the bazel-bin symlink: another output base in this workspace may re-point it.
BAZEL_BIN=$(cd "$ROOT" && bazel info bazel-bin 2>/dev/null) || die "bazel info bazel-bin failed"
[ -x "$BAZEL_BIN/launcher/overlaprun" ] || die "$BAZEL_BIN/launcher/overlaprun is missing; build it or drop --no-build"
cp "$BAZEL_BIN/launcher/overlaprun" "$BIN/"

NEW_PY=$(python3 -c 'import sys; print(sys.executable)')
"$NEW_PY" -c 'import torch' 2>/dev/null || die "python3 ($NEW_PY) cannot import torch: pip install torch"
HVD_PY=""
if [[ ,$systems, == *,horovod* ]]; then
  HVD_PY=$("$ROOT/bench/horovod_venv.sh") || die "no Horovod venv (bench/horovod_venv.sh failed)"
fi
overlap_missing=""
if has "$systems" overlap; then
  if [ -f "$ROOT/python/overlap/torch/__init__.py" ] && [ -f "$BAZEL_BIN/runtime/liboverlap.so" ]; then
    cp -r "$ROOT/python" "$BIN/python"
    find "$BIN/python" -name __pycache__ -prune -exec rm -rf {} +
    cp "${library:-$BAZEL_BIN/runtime/liboverlap.so}" "$BIN/liboverlap.so"
    if ! check=$(PYTHONPATH=$BIN/python OVERLAP_LIBRARY=$BIN/liboverlap.so "$NEW_PY" -c \
      'import overlap.torch as hvd; hvd.DistributedOptimizer' 2>&1); then
      overlap_missing=$(echo "$check" | tail -1)
    fi
  else
    overlap_missing="python/overlap/torch/__init__.py or bazel-bin/runtime/liboverlap.so is not there yet"
  fi
  [ -z "$overlap_missing" ] || note "overlap.torch unavailable: $overlap_missing"
fi
chmod -R a+rX "$BIN"

# ---- the cluster --------------------------------------------------------------------------------
# shellcheck source=../tools/cluster/session.sh
source "$ROOT/tools/cluster/session.sh"
cluster_session "$rate"
MASTER=10.77.0.1  # h1, where mpirun's by-slot mapping puts rank 0: DDP's rendezvous

mkdir -p "$(dirname "$out")"
: >"$out"
failed=0 port=29500 round=""

# The machine is shared (other people build and test on it) and has two cores, so a run that
# starts while something else computes is slower for reasons that are not the system's. Before
# each run: wait until the CPU has been mostly idle for 2 s (nothing of ours runs then), at most
# --quiet-wait seconds, and record the busy fraction found in the run's line ("cpu_busy_before").
source "$ROOT/bench/quiet_cpu.sh"  # cpu_busy, wait_quiet

# run LABEL PLANNER TIMEOUT_S -- bench args...: one job of 4 ranks; appends its JSON line.
run() {
  local label=$1 planner=$2 limit=$3
  shift 4
  local system=${label%%[+-]*} py mpi_args="" env_args=(OMP_NUM_THREADS=1) args=("$@")
  case $label in
    horovod) py=$HVD_PY ;;
    horovod+yield) py=$HVD_PY mpi_args="--mca mpi_yield_when_idle 1" ;;
    horovod-ring+yield)
      # Open MPI's ring for MPI_Allreduce (coll tuned algorithm 4), the algorithm overlap's
      # runs get for their non-blocking allreduce below: the fairest Horovod on these links.
      py=$HVD_PY
      mpi_args="--mca mpi_yield_when_idle 1 --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4" ;;
    ddp | ddp-tuned | ddp-torch2.0 | local | local-torch2.0)
      py=$NEW_PY port=$((port + 1))
      [[ $label != *-torch2.0 ]] || py=$HVD_PY
      args+=(--master-addr "$MASTER" --master-port "$port")
      [ "$label" != ddp-tuned ] || args+=(--ddp-bucket-mb "$sweep") ;;
    overlap)
      py=$NEW_PY
      # The ring for non-blocking allreduce, as tools/cluster_bench.sh: on tbf-capped links it
      # runs at the cap, libnbc's default (Rabenseifner) below it.
      mpi_args="--mca coll_libnbc_iallreduce_algorithm 1"
      env_args+=(PYTHONPATH="$BIN/python" OVERLAP_LIBRARY="$BIN/liboverlap.so")
      # PLANNER@step: the planner with DistributedOptimizer(update_at_forward=False), every
      # update at step() as before updates at forward existed (the JSON's update_at_forward).
      local base=${planner%@step}
      [ "$base" = "$planner" ] || args+=(--update-at-forward off)
      # deft-sN: deft with staleness bound N and update periods up to 4 (delayed updates).
      if [[ $base =~ ^deft-s([0-9]+)$ ]]; then
        env_args+=(OVERLAP_PLANNER=deft OVERLAP_STALENESS="${BASH_REMATCH[1]}" OVERLAP_MAX_PERIOD=4
                   OVERLAP_BUDGET=-1)  # at its bound: what delays buy in step time
      else
        env_args+=(OVERLAP_PLANNER="$base")
      fi ;;
  esac
  local name=${args[*]}
  name=${label}-${planner:-none}-${name//[^a-z0-9]/_}
  local log=$LOG/${name:0:120}.log
  local model mode
  model=$(flag_value --model "${args[@]}")
  mode=$(flag_value --mode "${args[@]}")
  if [ "$system" = overlap ] && [ -n "$overlap_missing" ]; then
    emit_error "$label" "$planner" "$model" "$mode" "overlap.torch unavailable: $overlap_missing"
    return
  fi
  local busy
  busy=$(wait_quiet)
  note "$label ${planner:+($planner) }${args[*]} ($(date -u +%H:%M:%S) UTC, CPU busy before: $busy)"
  local rc=0
  env "${env_args[@]}" timeout -k 10 "$limit" "$CLUSTER" exec "$BIN/overlaprun" -np 4 \
    --hostfile "$HOSTFILE" --tcp-only --collective-timeout 120 \
    -x OMP_NUM_THREADS ${mpi_args:+--mpi-args "$mpi_args"} \
    -- "$py" "$BIN/bench/torch_bench.py" --system "$system" --label "$label" "${args[@]}" \
    </dev/null >"$log.out" 2>"$log" || rc=$?
  local line
  line=$(grep -m1 '^{' "$log.out" || true)
  if ((rc == 0)) && [ -n "$line" ]; then
    "$NEW_PY" -c 'import json, sys; d = json.loads(sys.argv[1]); d["cpu_busy_before"] = float(sys.argv[2]); d.update({"round": int(sys.argv[3])} if sys.argv[3] else {}); print(json.dumps(d))' \
      "$line" "$busy" "$round" | tee -a "$out"
  else
    local reason
    # A Python traceback's last line, this benchmark's own message, or overlaprun's summary.
    reason=$(grep -E '^[A-Za-z_.]*(Error|Exception)\b|torch_bench.py:|overlaprun: job failed' "$log" | head -1 || true)
    [ -n "$reason" ] || reason=$(tail -1 "$log")
    ((rc != 124)) || reason="timed out after ${limit} s; $reason"
    note "$label ${planner} failed (status $rc; log $log): $reason"
    emit_error "$label" "$planner" "$model" "$mode" "$reason"
  fi
}

# flag_value FLAG ARGS...: the word after FLAG in ARGS, or nothing.
flag_value() {
  local flag=$1
  shift
  while (($#)); do
    [ "$1" != "$flag" ] || { echo "${2:-}"; return; }
    shift
  done
}

emit_error() {
  failed=$((failed + 1))
  "$NEW_PY" -c 'import json, sys; print(json.dumps({"system": sys.argv[1], "planner": sys.argv[2] or None, "model": sys.argv[3] or None, "mode": sys.argv[4], "error": sys.argv[5]}))' \
    "$@" | tee -a "$out"
}

# Each system label, expanded to one (label, planner) pair per overlap planner.
variants() {
  local s p
  for s in "${system_list[@]}"; do
    if [ "$s" = overlap ]; then
      for p in "${planner_list[@]}"; do echo "overlap $p"; done
    else
      echo "$s -"
    fi
  done
}

# Timeouts: start-up (Horovod and DDP broadcast the model, ~1 min at most), the DDP sweep, and
# up to three times the target per step.
emulated_limit=$(( 120 + (warmup + steps + 70) * target * 3 / 1000 ))
if has "$parts" emulated; then
  for model in "${model_list[@]}"; do
    while read -r label planner; do
      [ "$planner" != - ] || planner=""
      run "$label" "$planner" "$emulated_limit" -- --mode emulated --model "$model" \
        --warmup-steps "$warmup" --steps "$steps" --link-rate "$rate" --target-step-ms "$target"
    done < <(variants)
  done
fi
if has "$parts" synthetic; then
  while read -r label planner; do
    [ "$planner" != - ] || planner=""
    # Real compute: only the planners that need no step markers and auto.
    [ -z "$planner" ] || [ "$planner" = observed ] || [ "$planner" = auto ] || continue
    run "$label" "$planner" 900 -- --mode synthetic --warmup-steps "$syn_warmup" --steps "$syn_steps"
  done < <(variants)
  # Horovod computes on torch 2.0.1, the others on the newest torch: DDP on 2.0.1 shows how much
  # of a difference in img/s is the torch version rather than the communication runtime.
  if has "$systems" ddp && [ -n "$HVD_PY" ]; then
    run ddp-torch2.0 "" 900 -- --mode synthetic --warmup-steps "$syn_warmup" --steps "$syn_steps"
  fi
fi
if has "$parts" tiny; then
  # A tiny run takes about 20 s; 180 s is a hang.
  for ((k = 1; k <= tiny_rounds; k++)); do
    ((tiny_rounds == 1)) || round=$k
    while read -r label planner; do
      [ "$planner" != - ] || planner=""
      [ -z "$planner" ] || [ "$planner" = observed ] || continue
      [ "$label" != ddp-tuned ] || continue  # one bucket holds all 50 tensors either way
      run "$label" "$planner" 180 -- --mode tiny --warmup-steps "$tiny_warmup" --steps "$tiny_steps"
    done < <(variants)
    # The same steps without any communication, on each torch: the compute floor that each
    # system's coordination overhead is measured above (the report subtracts it).
    run local "" 180 -- --mode tiny --warmup-steps "$tiny_warmup" --steps "$tiny_steps"
    if [ -n "$HVD_PY" ]; then
      run local-torch2.0 "" 180 -- --mode tiny --warmup-steps "$tiny_warmup" --steps "$tiny_steps"
    fi
  done
  round=""
fi

note "wrote $out; logs in $LOG"
# matplotlib may be only in the system Python (Debian's python3-matplotlib), not in pyenv's.
REPORT_PY=python3
if ! python3 -c 'import matplotlib' 2>/dev/null && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  REPORT_PY=/usr/bin/python3
fi
"$REPORT_PY" "$ROOT/bench/torch_side_by_side_report.py" "$out" "${report_args[@]}"
((failed == 0)) || die "$failed runs failed (their lines in $out carry \"error\")"
