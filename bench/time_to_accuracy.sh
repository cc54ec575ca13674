#!/usr/bin/env bash
# Time to accuracy (issue 33, "The benchmark"): real training on real data on the 4-host namespace
# cluster with tbf-capped links, horovod.torch, torch DDP and overlap.torch in one run, each
# system with the same seed, data order, hyper-parameters and epochs. Needs root.
#
#   bench/time_to_accuracy.sh [--quick] [--tasks fmnist,lm] [--rows LIST] [--rate fmnist=300mbit,lm=250mbit] [--queue-ms MS]
#       [--epochs N] [--fmnist-limit N] [--lm-limit N] [--test-limit N] [--evals-per-epoch N]
#       [--out FILE] [--no-build] [--quiet-wait SECONDS] [--library FILE] [--time-limit SECONDS]
#       [--seed N] [--optimizer sgd|adam|adamw]
#
# Tasks (--tasks, default both):
#   fmnist  a CNN on Fashion-MNIST (/usr/share/datasets/fashion-mnist); quality: test accuracy
#   lm      a byte-level decoder-only transformer on the Python standard library's top-level .py
#           files (name order; last 10% held out); quality: validation loss
# Rows (--rows, default all; each runs once per task):
#   horovod, horovod+yield (OMPI_MCA_mpi_yield_when_idle=1), ddp (gloo, bucket_cap_mb 25),
#   ddp-tuned (the fastest bucket_cap_mb of a short sweep, chosen before the clock starts),
#   overlap:observed, overlap:auto, overlap:deft-s1, overlap:deft-s1:off, overlap:deft-s2,
#   overlap:deft-s2:off (deft with staleness bound N, update periods up to 4 and the budget at its
#   bound max(N, 1.5), OVERLAP_BUDGET=-1; ":off" without
#   DistributedOptimizer's staleness correction, otherwise its default "auto"),
#   overlap:covap (covap:R=auto), overlap:topk (topk:ratio=0.01, error feedback); plus `local`, a
#   short run without communication that measures each task's compute floor. Only when named:
#   overlap:deft-s1+fp16, overlap:deft-s2+fp16, overlap:auto+fp16 (OVERLAP_COMPRESSION=fp16: every
#   bucket of the plan compressed, with error feedback). Any deft row may end in @B (before :off),
#   e.g. overlap:deft-s1@0.25: OVERLAP_BUDGET=B, deft's convergence budget (bench/budget_sweep.sh);
#   and deft-sNpK, e.g. overlap:deft-s1p1: update periods up to K instead of 4 (p1: delays only).
#   overlap:PLANNER runs one synchronous planner alone (wfbp, fusion, mgwfbp, bytescheduler,
#   usbyte, dear, deft: staleness 0), e.g. to compare a plan auto may pick with a runtime setting.
# --rate: the tbf cap of every host link, one rate for both tasks or TASK=RATE per task (default
#   fmnist=300mbit,lm=250mbit: communication about 1.1-1.4x each task's compute here; the cluster is
#   brought up again at each task's rate).
# --queue-ms MS: how much of the cap each link may queue (tbf's latency; default 100, as every
#   run before 2026-12-05 had; docs/time_to_accuracy.md, "auto on the LM, the afternoon of
#   2026-12-05", compares 100 and 20).
# --quick: 2 epochs of 10,240 images / 1,536 LM windows, 2,000 test images (27-50 minutes so far
#   here, more than the 15 the issue asks: 26 jobs of 4 ranks each start torch 4 times).
# Output: the raw lines (with quality-against-wall-time curves) in docs/data/time_to_accuracy_runs.jsonl
# (--out), then per task and row one line on stdout and in docs/data/time_to_accuracy.jsonl:
#   {"task","system","planner","correction","metric","target","time_to_target_s","final_quality",
#    "sync_final_quality","step_ms","sim_step_ms","epochs"} (and "error" for a row that failed),
# the table in docs/time_to_accuracy.md and the plot docs/img/time_to_accuracy.png
# (bench/time_to_accuracy_report.py). The target is ddp's final quality minus 0.5 point of
# accuracy, or plus 1% of validation loss. Every run has a hard time limit; a failed or timed-out
# row prints its "error" and the run carries on. The cluster is taken down on exit, whatever happens.
# --seed: the initial weights' and the data order's seed, the same for every row (default 42).
# --optimizer: fmnist's optimizer for every row (default sgd, momentum 0.9; adam and adamw at lr
#   0.001, adamw with weight decay 0.01); lm always trains with AdamW. The report's target is each
#   task's ddp run under the same optimizer.
# --time-limit: each run's hard limit (default: quick 240 s fmnist / 300 s lm, else 1800 / 3600).
# overlap's rows run with OVERLAP_STALL_TIMEOUT_S=90, so a stalled collective fails with the
# runtime's own message before the hard limit.
# Each run waits (at most --quiet-wait, default 120 s; --quick 30 s) until the shared CPU is at most 25% busy.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=$ROOT/tools/cluster/cluster.sh

command_line="bench/time_to_accuracy.sh $*"
die() { echo "time_to_accuracy.sh: $*" >&2; exit 1; }
note() { echo "time_to_accuracy.sh: $*" >&2; }

ALL_ROWS="local,ddp,ddp-tuned,horovod,horovod+yield,overlap:observed,overlap:auto,overlap:deft-s1,overlap:deft-s1:off,overlap:deft-s2,overlap:deft-s2:off,overlap:covap,overlap:topk"
# Run only when --rows names them: deft's compressed plans (every bucket fp16, error feedback).
EXTRA_ROWS="overlap:deft-s1+fp16,overlap:deft-s2+fp16,overlap:auto+fp16"
quick=0 tasks=fmnist,lm rows=$ALL_ROWS rate=fmnist=300mbit,lm=250mbit epochs="" fmnist_limit="" lm_limit="" test_limit=""
evals="" out="" build=1 quiet_wait="" time_limit="" max_busy=0.25 library="" seed=42 optimizer=""
queue_ms=100
while (($#)); do
  case $1 in
    --quick) quick=1; shift ;;
    --tasks) tasks=${2:-}; shift 2 || die "--tasks needs a list" ;;
    --rows) rows=${2:-}; shift 2 || die "--rows needs a list" ;;
    --rate) rate=${2:-}; shift 2 || die "--rate needs a value like 100mbit or fmnist=300mbit,lm=250mbit" ;;
    --epochs) epochs=${2:-}; shift 2 || die "--epochs needs a number" ;;
    --queue-ms) queue_ms=${2:-}; shift 2 || die "--queue-ms needs milliseconds" ;;
    --fmnist-limit) fmnist_limit=${2:-}; shift 2 || die "--fmnist-limit needs a number" ;;
    --lm-limit) lm_limit=${2:-}; shift 2 || die "--lm-limit needs a number" ;;
    --test-limit) test_limit=${2:-}; shift 2 || die "--test-limit needs a number" ;;
    --evals-per-epoch) evals=${2:-}; shift 2 || die "--evals-per-epoch needs a number" ;;
    --out) out=${2:-}; shift 2 || die "--out needs a file" ;;
    --no-build) build=0; shift ;;
    --library) library=${2:-}; shift 2 || die "--library needs a file" ;;
    --time-limit) time_limit=${2:-}; shift 2 || die "--time-limit needs seconds" ;;
    --quiet-wait) quiet_wait=${2:-}; shift 2 || die "--quiet-wait needs seconds" ;;
    --seed) seed=${2:-}; shift 2 || die "--seed needs a number" ;;
    --optimizer) optimizer=${2:-}; shift 2 || die "--optimizer needs sgd, adam or adamw" ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
has() { [[ ",$1," == *",$2,"* ]]; }
for t in ${tasks//,/ }; do has fmnist,lm "$t" || die "--tasks: unknown task '$t' (fmnist, lm)"; done
[ -n "$tasks" ] || die "--tasks is empty"
for r in ${rows//,/ }; do
  [[ ! $r =~ ^overlap:deft-s[0-9]+(p[0-9]+)?(@[0-9]+(\.[0-9]+)?)?(:off)?$ ]] || continue
  [[ ! $r =~ ^overlap:(wfbp|fusion|mgwfbp|bytescheduler|usbyte|dear|deft)$ ]] || continue
  has "$ALL_ROWS,$EXTRA_ROWS" "$r" || die "--rows: unknown row '$r' (known: $ALL_ROWS,$EXTRA_ROWS)"
done
[[ -z $optimizer || $optimizer =~ ^(sgd|adam|adamw)$ ]] || die "--optimizer: '$optimizer' is not sgd, adam or adamw"
[[ -z $optimizer || $optimizer == adamw || $tasks == fmnist ]] || die "--optimizer $optimizer: lm trains with AdamW only; add --tasks fmnist"
has "$rows" ddp || die "--rows must include ddp: it sets every task's target"
if ((quick)); then
  epochs=${epochs:-2} fmnist_limit=${fmnist_limit:-10240} lm_limit=${lm_limit:-1536}
  test_limit=${test_limit:-2000} evals=${evals:-5} sweep=sweep:0.25,1,25 quiet_wait=${quiet_wait:-30}
else
  epochs=${epochs:-4} fmnist_limit=${fmnist_limit:-0} lm_limit=${lm_limit:-32768}
  test_limit=${test_limit:-0} evals=${evals:-8} sweep=sweep:0.1,0.25,0.5,1,5,25 quiet_wait=${quiet_wait:-120}
fi
for v in epochs fmnist_limit lm_limit test_limit evals quiet_wait seed ${time_limit:+time_limit}; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "--${v//_/-} needs a whole number, got '${!v}'"
done
((epochs > 0 && evals > 0)) || die "--epochs and --evals-per-epoch must be positive"
# task_rate TASK: the link rate of TASK's runs.
task_rate() {
  local item
  if [[ $rate != *=* ]]; then echo "$rate"; return; fi
  for item in ${rate//,/ }; do [ "${item%%=*}" != "$1" ] || { echo "${item#*=}"; return; }; done
}
for t in ${tasks//,/ }; do
  r=$(task_rate "$t")
  [ -n "$r" ] || die "--rate '$rate' gives no rate for task '$t'"
  [[ $r =~ ^[0-9]+(bit|kbit|mbit|gbit)$ ]] || die "--rate: '$r' is not a tc rate like 100mbit"
done
[ -z "$library" ] || [ -f "$library" ] || die "--library: no file '$library'"
[ "$(id -u)" -eq 0 ] || die "needs root (it brings up the namespace cluster: network namespaces, veth, tc); run it as root or with sudo"

report_args=()
if [ -z "$out" ]; then
  out=$ROOT/docs/data/time_to_accuracy_runs.jsonl
  report_args=(--lines "$ROOT/docs/data/time_to_accuracy.jsonl")
else
  report_args=(--lines "${out%.jsonl}.lines.jsonl" --doc "" --plot "${out%.jsonl}.png")
fi

# ---- what each system runs with (copied once: others edit and build in this tree) ------------
BIN=$(mktemp -d /tmp/time_to_accuracy.XXXXXX)
LOG=$BIN/logs
mkdir -p "$LOG" "$BIN/bench" "$BIN/data"
cp "$ROOT"/bench/tta_train.py "$ROOT"/bench/torch_systems.py "$BIN/bench/"
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
if [[ ,$rows, == *,horovod* ]]; then
  HVD_PY=$("$ROOT/bench/horovod_venv.sh") || die "no Horovod venv (bench/horovod_venv.sh failed)"
fi
cp -r "$ROOT/python" "$BIN/python"
find "$BIN/python" -name __pycache__ -prune -exec rm -rf {} +
cp "${library:-$BAZEL_BIN/runtime/liboverlap.so}" "$BIN/liboverlap.so"
# The LM's text: the standard library's top-level modules of the Python that runs DDP, in byte
# order of their names, so the corpus is the same for every system and every run on this machine.
STDLIB=$("$NEW_PY" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
find "$STDLIB" -maxdepth 1 -name '*.py' -print0 | LC_ALL=C sort -z | xargs -0 cat >"$BIN/data/corpus.txt"
corpus_bytes=$(stat -c %s "$BIN/data/corpus.txt")
((corpus_bytes > 1000000)) || die "the corpus from $STDLIB is only $corpus_bytes bytes"
chmod -R a+rX "$BIN"

# ---- the cluster --------------------------------------------------------------------------------
# shellcheck source=../tools/cluster/session.sh
source "$ROOT/tools/cluster/session.sh"
cluster_session "$(task_rate "${tasks%%,*}")"
MASTER=10.77.0.1  # h1, where mpirun's by-slot mapping puts rank 0: DDP's rendezvous
mkdir -p "$(dirname "$out")"
: >"$out"
failed=0 port=29600

# The machine is shared and has two cores: before each run (bench/quiet_cpu.sh),
# wait until the CPU has been mostly idle for 2 s, at most --quiet-wait seconds, and record it.
source "$ROOT/bench/quiet_cpu.sh"  # cpu_busy, wait_quiet

emit_error() {  # TASK ROW PLANNER CORRECTION REASON
  failed=$((failed + 1))
  "$NEW_PY" -c 'import json, sys; t, r, p, c, e = sys.argv[1:6]; print(json.dumps({"task": t, "system": r.split(":")[0], "row": r, "planner": p or None, "correction": c or None, "epochs": int(sys.argv[6]), "error": e}))' \
    "$@" "$epochs" | tee -a "$out"
}

# run TASK ROW LIMIT_S: one job of 4 ranks; appends its raw JSON line to $out.
run() {
  local task=$1 row=$2 limit=$3
  local system=${row%%[:+-]*} py=$NEW_PY mpi_args="" env_args=(OMP_NUM_THREADS=1) planner="" correction=""
  local args=(--task "$task" --epochs "$epochs" --evals-per-epoch "$evals" --seed "$seed" --data-dir /usr/share/datasets/fashion-mnist
              --corpus "$BIN/data/corpus.txt" --test-limit "$test_limit")
  if [ "$task" = fmnist ]; then args+=(--train-limit "$fmnist_limit"); else args+=(--train-limit "$lm_limit"); fi
  [ -z "$optimizer" ] || args+=(--optimizer "$optimizer")
  case $row in
    horovod) py=$HVD_PY ;;
    horovod+yield) py=$HVD_PY mpi_args="--mca mpi_yield_when_idle 1" ;;
    ddp | ddp-tuned | local)
      port=$((port + 1))
      args+=(--master-addr "$MASTER" --master-port "$port")
      [ "$row" != ddp-tuned ] || args+=(--ddp-bucket-mb "$sweep")
      [ "$row" != local ] || args+=(--max-steps 24) ;;
    overlap:*)
      system=overlap
      # The ring for non-blocking allreduce, as bench/torch_side_by_side.sh.
      mpi_args="--mca coll_libnbc_iallreduce_algorithm 1"
      env_args+=(PYTHONPATH="$BIN/python" OVERLAP_LIBRARY="$BIN/liboverlap.so"
                 OVERLAP_STALL_WARNING_S=30 OVERLAP_STALL_TIMEOUT_S=90)
      local v=${row#overlap:}
      correction=auto
      if [[ $v == *:off ]]; then correction=off; v=${v%:off}; fi
      # deft-sN@B: deft's convergence budget B; plain deft-sN runs at its bound (-1), as before
      # the runtime's default budget became 0.
      if [[ $v == *@* ]]; then env_args+=(OVERLAP_BUDGET="${v#*@}"); v=${v%@*};
      elif [[ $v == deft-s* ]]; then env_args+=(OVERLAP_BUDGET=-1); fi
      args+=(--staleness-correction "$correction")
      # PLANNER+SPEC: the runtime's default compression, which a scheduled plan's buckets carry.
      if [[ $v == *+* ]]; then env_args+=(OVERLAP_COMPRESSION="${v#*+}"); v=${v%%+*}; fi
      case $v in
        deft-s*p*) planner=$v  # deft-sNpK: update periods up to K (1: delays only)
          env_args+=(OVERLAP_PLANNER=deft OVERLAP_STALENESS="$(sed 's/deft-s\([0-9]*\)p.*/\1/' <<<"$v")"
                     OVERLAP_MAX_PERIOD="${v##*p}") ;;
        deft-s*) planner=$v
          env_args+=(OVERLAP_PLANNER=deft OVERLAP_STALENESS="${v#deft-s}" OVERLAP_MAX_PERIOD=4) ;;
        covap) planner=observed; args+=(--compression "covap:R=auto") ;;
        topk) planner=observed; args+=(--compression "topk:ratio=0.01") ;;
        *) planner=$v; env_args+=(OVERLAP_PLANNER="$v") ;;
      esac
      # The correction only acts under delays; elsewhere it is reported as not applicable.
      [[ $planner == deft-s* ]] || correction="" ;;
  esac
  local log=$LOG/${task}-${row//[^a-z0-9+-]/_}.log busy rc=0
  busy=$(wait_quiet)
  note "$task $row ($(date -u +%H:%M:%S) UTC, CPU busy before: $busy, limit ${limit} s)"
  env "${env_args[@]}" timeout -k 10 "$limit" "$CLUSTER" exec "$BIN/overlaprun" -np 4 \
    --hostfile "$HOSTFILE" --tcp-only --collective-timeout 120 \
    -x OMP_NUM_THREADS ${mpi_args:+--mpi-args "$mpi_args"} \
    -- "$py" "$BIN/bench/tta_train.py" --system "$system" --label "$row" "${args[@]}" \
    </dev/null >"$log.out" 2>"$log" || rc=$?
  local line
  line=$(grep -m1 '^{' "$log.out" || true)
  if ((rc == 0)) && [ -n "$line" ]; then
    # raw_decode: another rank's shutdown warning can land on the result's line (the ranks'
    # output is merged by mpirun), after the object.
    "$NEW_PY" -c 'import json, sys; d = json.JSONDecoder().raw_decode(sys.argv[1])[0]; d.update(row=sys.argv[2], cpu_busy_before=float(sys.argv[3]), planner_row=sys.argv[4] or None, correction=sys.argv[5] or None, link_rate=sys.argv[6], link_queue_ms=int(sys.argv[7])); print(json.dumps(d))' \
      "$line" "$row" "$busy" "$planner" "$correction" "$link_rate" "$queue_ms" >>"$out"
    note "$task $row: $(grep -o '"step_ms": [0-9.]*\|"final_quality": [0-9.]*\|"train_s": [0-9.]*' <<<"$line" | tr '\n' ' ')"
  else
    local reason
    reason=$(grep -E '^[A-Za-z_.]*(Error|Exception)\b|tta_train.py:|overlaprun: job failed' "$log" | head -1 || true)
    [ -n "$reason" ] || reason=$(tail -1 "$log")
    ((rc != 124)) || reason="timed out after ${limit} s; $reason"
    note "$task $row failed (status $rc; log $log): $reason"
    emit_error "$task" "$row" "$planner" "$correction" "$reason"
  fi
}

# Time limits: generous multiples of what a run takes here (start-up, training, evaluation).
if ((quick)); then fmnist_limit_s=240 lm_limit_s=300; else fmnist_limit_s=1800 lm_limit_s=3600; fi
[ -z "$time_limit" ] || fmnist_limit_s=$time_limit lm_limit_s=$time_limit
for task in ${tasks//,/ }; do
  link_rate=$(task_rate "$task")
  # Re-created at this task's rate (cluster.sh up re-creates the hosts; the session's lock and
  # its take-down on exit stay as they are).
  timeout 60 "$CLUSTER" up 4 --rate "$link_rate" --queue-ms "$queue_ms" >&2 ||
    die "could not bring the cluster up at $link_rate (queue $queue_ms ms)"
  limit=$fmnist_limit_s
  [ "$task" = fmnist ] || limit=$lm_limit_s
  # ddp first: its final quality is the task's target.
  for row in ${rows//,/ }; do run "$task" "$row" "$limit"; done
done

note "wrote $out; logs in $LOG"
REPORT_PY=python3
if ! python3 -c 'import matplotlib' 2>/dev/null && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  REPORT_PY=/usr/bin/python3
fi
"$REPORT_PY" "$ROOT/bench/time_to_accuracy_report.py" "$out" "${report_args[@]}" \
  --command "$command_line" || die "the report failed"
((failed == 0)) || die "$failed runs failed (their lines carry \"error\")"
