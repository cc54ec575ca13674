#!/usr/bin/env bash
# The Fashion-MNIST example (examples/mnist_mlp.cc) on 4 namespace hosts under network faults on
# one host's link (tools/cluster/faults.sh), each run under timeout(1). For each fault the job must
# either finish with exactly the no-fault result (the final loss and accuracy line and the weights,
# byte for byte) or fail with overlaprun's summary naming the faulty host. Needs root.
#
#   network_faults.sh [options] [FAULT...]
#     FAULT: drop:PERCENT | flap:PERIOD_S:DOWN_S | rate:RATE     (a no-fault run always comes first)
#     default: drop:1 drop:10 flap:3:1 flap:40:13 rate:10mbit
#   --bazel-bin DIR          take DIR/launcher/overlaprun and DIR/examples/mnist_mlp
#                            (default: this tree's bazel-bin)
#   --host HOST              the host whose link gets the fault (default h3, rank 2)
#   --steps N                optimizer steps (--max-steps; default 100)
#   --collective-timeout S   overlaprun --collective-timeout for every run (default 10)
#   --host-timeout S         overlaprun --host-timeout for every run (default 6; 0: not given)
#   --limit S                timeout(1) for each faulty run (default 240)
#   --out FILE               also write the results table (markdown) here
#
# Prints one "result:" line per run and a markdown table. The fault is injected as soon as rank 0
# has printed "training ..." (after Init and the initial broadcast, before the first step; polled
# every 0.1 s) plus --settle seconds (default 0), and stays until the job ends, so every step runs
# under it and the time is comparable from run to run. Exit status 1 when a run hung (timeout(1) fired), failed without
# naming the host, or finished with a different result.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}  # Open MPI wants one for its session files

if [ -n "${TEST_SRCDIR:-}" ]; then
  R=$TEST_SRCDIR/${TEST_WORKSPACE:-overlap}
  CLUSTER=$R/tools/cluster/cluster.sh FAULTS=$R/tools/cluster/faults.sh
  OVERLAPRUN=$R/launcher/overlaprun PROGRAM=$R/examples/mnist_mlp
else
  R=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  CLUSTER=$R/tools/cluster/cluster.sh FAULTS=$R/tools/cluster/faults.sh
  OVERLAPRUN=$R/bazel-bin/launcher/overlaprun PROGRAM=$R/bazel-bin/examples/mnist_mlp
fi

die() { echo "network_faults.sh: $*" >&2; exit 2; }

host=h3 steps=100 ctimeout=10 htimeout=6 limit=240 settle=0 out=""
faults=()
while (($#)); do
  case $1 in
    --bazel-bin) OVERLAPRUN=$2/launcher/overlaprun PROGRAM=$2/examples/mnist_mlp; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --collective-timeout) ctimeout=$2; shift 2 ;;
    --host-timeout) htimeout=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --settle) settle=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) faults+=("$1"); shift ;;
  esac
done
((${#faults[@]})) || faults=(drop:1 drop:10 flap:3:1 flap:40:13 rate:10mbit)
[ "$(id -u)" -eq 0 ] || die "needs root (the namespace cluster and nftables)"
for b in "$OVERLAPRUN" "$PROGRAM"; do [ -x "$b" ] || die "$b is missing; build //launcher:overlaprun //examples:mnist_mlp"; done

WORK=$(mktemp -d "${TEST_TMPDIR:-/tmp}/network_faults.XXXXXX")
chmod a+rx "$WORK"
job="" failures=0 locked=0
cleanup() {
  local status=$?
  [ -z "$job" ] || kill -TERM "$job" 2>/dev/null || true
  # The cluster is ours only once the lock is: before that it may be another job's.
  if ((locked)); then
    "$FAULTS" clear >/dev/null 2>&1 || true
    "$CLUSTER" down >/dev/null 2>&1 || true
  fi
  # The logs stay when something went wrong.
  if ((status == 0 && failures == 0)); then rm -rf "$WORK"; else echo "network_faults.sh: logs in $WORK" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Binaries are copied so that a concurrent build cannot swap them between runs.
cp "$OVERLAPRUN" "$PROGRAM" "$WORK/"
OVERLAPRUN=$WORK/overlaprun PROGRAM=$WORK/mnist_mlp

# One cluster per machine: the lock the cluster tests take (tests/cluster/BUILD).
exec 9>/tmp/overlap-cluster.lock
flock -w 300 9 || die "another job held /tmp/overlap-cluster.lock for 300 s"
locked=1

now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

# Runs the example once with FAULT ("none" for the reference), leaving in globals: rc, log,
# start_ms, inject_ms, end_ms. Every output line is prefixed with its arrival time in ms.
run_once() {
  local fault=$1 kind p1 p2
  log=$WORK/$fault.log
  IFS=: read -r kind p1 p2 <<<"$fault"
  timeout 60 "$CLUSTER" up 4 --rate 1gbit >/dev/null 2>&1 || die "the cluster did not come up"
  local extra=()
  [ "$htimeout" = 0 ] || extra=(--host-timeout "$htimeout")
  start_ms=$(now_ms)
  # stdbuf: rank 0's "training ..." line is the signal to inject, and it is not flushed.
  {
    local status=0
    timeout -k 10 "$limit" "$CLUSTER" exec "$OVERLAPRUN" -np 4 --hostfile "$("$CLUSTER" hostfile)" \
      --tcp-only --collective-timeout "$ctimeout" "${extra[@]}" --kill-grace 5 -- \
      stdbuf -oL "$PROGRAM" --epochs 1 --max-steps "$steps" --dump-weights "$WORK/$fault.weights" 2>&1 || status=$?
    echo "$status" >"$WORK/$fault.rc"
  } | while IFS= read -r line; do echo "$(now_ms) $line"; done >"$log" &
  job=$!
  inject_ms=""
  if [ "$kind" != none ]; then
    for _ in $(seq 600); do
      grep -q " training " "$log" && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.1
    done
    if grep -q " training " "$log"; then
      sleep "$settle"
      case $kind in
        drop) "$FAULTS" drop "$host" "$p1" ;;
        flap) "$FAULTS" flap "$host" "$p1" "$p2" ;;
        rate) "$FAULTS" rate "$host" "$p1" ;;
        *) die "unknown fault '$fault'" ;;
      esac
      inject_ms=$(now_ms)
    fi
  fi
  wait "$job" || true
  job=""
  rc=$(cat "$WORK/$fault.rc")
  end_ms=$(now_ms)
  "$FAULTS" list >"$WORK/$fault.faults" 2>&1 || true
  # When the link went down and up (faults.sh flap's log), to count the outages the run saw.
  cp "${OVERLAP_CLUSTER_DIR:-/tmp/overlap-cluster}/faults/$host.flap.log" "$WORK/$fault.flaps" 2>/dev/null || : >"$WORK/$fault.flaps"
  [ -z "$inject_ms" ] || "$FAULTS" clear "$host" || true
}

rows=()
ref_line="" ref_weights=""
for fault in none "${faults[@]}"; do
  run_once "$fault"
  status=$(grep -o "^[0-9]* overlaprun: job failed: .*" "$log" | cut -d' ' -f2- | head -1 || true)
  final=$(grep -o "epoch [0-9]*  loss [0-9.]*  test accuracy [0-9.]*%" "$log" | tail -1 || true)
  train_s=$( (grep -o "images/s  ([0-9.]* s)" "$log" || true) | tail -1 | grep -o "[0-9.]* s" || true)
  # overlaprun's first word of a failure: a rank's end, or mpirun losing a host.
  first_ms=$(grep -m1 -E "^[0-9]+ overlaprun: (rank [0-9]+ on host|(mpirun|rank [0-9]+) lost contact with host) .*stopping the job" "$log" | cut -d' ' -f1 || true)
  drops=$( (grep -o "dropped [0-9]* frames [a-z]* $host" "$WORK/$fault.faults" || true) | awk '{s += $2} END { print s + 0 }')
  outages=$(grep -c " down$" "$WORK/$fault.flaps" || true)
  if [ "$fault" = none ]; then
    [ "$rc" -eq 0 ] && [ -n "$final" ] || { cat "$log" >&2; die "the no-fault run did not finish (status $rc)"; }
    ref_line=$final ref_weights=$WORK/none.weights
    ref_s=$(secs "$start_ms" "$end_ms")
    echo "result: fault=none outcome=finished seconds=$ref_s training='$train_s' final='$final'"
    rows+=("| none | finished | $ref_s s (whole run; training $train_s) | \`$final\` |")
    continue
  fi
  [ -n "$inject_ms" ] || { cat "$log" >&2; echo "FAIL: $fault: the job ended before the fault was injected" >&2; failures=$((failures + 1)); continue; }
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "result: fault=$fault outcome=HUNG (timeout(1) after $limit s, status $rc)"
    rows+=("| $fault on $host | hung: stopped by timeout(1) after $limit s | - | - |")
    failures=$((failures + 1))
  elif [ "$rc" -eq 0 ] && [ -z "$status" ] && [ -n "$final" ]; then
    same=no
    [ "$final" = "$ref_line" ] && cmp -s "$WORK/$fault.weights" "$ref_weights" && same=yes
    t=$(secs "$inject_ms" "$end_ms")
    echo "result: fault=$fault outcome=finished after_inject_s=$t training='$train_s' same_result=$same final='$final' frames_dropped=$drops link_downs=$outages"
    rows+=("| $fault on $host | finished, same weights: $same | $t s after injection (training $train_s) | \`$final\` |")
    [ "$same" = yes ] || { echo "FAIL: $fault: the result differs from the no-fault run ('$ref_line')" >&2; failures=$((failures + 1)); }
  elif [ -n "$status" ]; then
    named=no
    # "rank 2 on host h3 ...", "mpirun lost contact with host h3 (rank 2)", or "... by rank 2 (h3)"
    [[ "$status " =~ (host\ $host[^0-9]|\($host\)) ]] && named=yes
    detect=$(secs "$inject_ms" "${first_ms:-$end_ms}")
    stop=$(secs "$inject_ms" "$end_ms")
    excerpt=$(echo "$status" | cut -c1-300)
    echo "result: fault=$fault outcome=failed status=$rc detect_s=$detect stop_s=$stop names_host=$named summary='$excerpt'"
    rows+=("| $fault on $host | failed, names $host: $named | detected $detect s, stopped $stop s after injection | \`$excerpt\` |")
    [ "$named" = yes ] || { echo "FAIL: $fault: the failure does not name $host" >&2; failures=$((failures + 1)); }
  else
    echo "result: fault=$fault outcome=failed rc=$rc without overlaprun's summary"
    rows+=("| $fault on $host | failed (status $rc) without a summary | - | - |")
    failures=$((failures + 1))
  fi
  # The lines that say what happened, for the reader of the test log.
  grep -E "overlaprun: |mnist_mlp: |stall|epoch [0-9]" "$log" | cut -d' ' -f2- | cut -c1-300 | head -12 | sed 's/^/    /' || true
done

table=$(
  echo "| fault | outcome | time | overlaprun's summary or the final line |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
)
echo "$table"
[ -z "$out" ] || echo "$table" >"$out"
((failures == 0)) || { echo "FAIL: $failures run(s) hung, failed without naming $host, or changed the result" >&2; exit 1; }
echo PASS
