#!/usr/bin/env bash
# One failure of one rank, and the whole job must stop with a message that names it.
#   failure_test.sh MODE WHERE
#   MODE:  exit     rank 2 exits with status 7 at step 5
#          sigkill  rank 1 kills itself with SIGKILL at step 5
#          stop     rank 1 stops submitting at step 5 (stall warning after 2 s, failure after 5 s)
#          linkdown host h3 (rank 2) loses its link mid-run (cluster only; collective timeout 8 s)
#   WHERE: local (4 ranks on this machine) or cluster (4 namespace hosts, needs root)
# Prints "measured: MODE WHERE stop_s=X" (seconds from the failure to overlaprun's exit) for
# docs/launcher.md. Every command runs under timeout(1); Bazel's own timeout is the last resort.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
MODE=$1 WHERE=$2
R=${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-overlap}
CLUSTER=$R/tools/cluster/cluster.sh
OVERLAPRUN=$R/launcher/overlaprun
LOOP=$R/tests/failure/failure_loop
OUT=${TEST_TMPDIR:-/tmp}/failure_test.$MODE.$WHERE.out
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}  # Open MPI wants one for its session files

fail() { echo "FAIL: $MODE $WHERE: $*" >&2; echo "---- output:" >&2; cat "$OUT" >&2 || true; exit 1; }
now_ms() { date +%s%3N; }

RUN=()
HOSTS=()
if [ "$WHERE" = cluster ]; then
  exec 9>/tmp/overlap-cluster.lock
  flock -w 300 9 || fail "another test held the cluster lock for 300 s"
  trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT
  timeout 60 "$CLUSTER" up 4 >/dev/null 2>&1
  RUN=("$CLUSTER" exec)
  HOSTS=(--hostfile "$("$CLUSTER" hostfile)" --tcp-only)
  host_of() { echo "h$(($1 + 1))"; }
else
  host_of() { hostname; }
fi

RUN_ID=$$.$RANDOM
COMMON=(--steps=400 --tensors=4 --tensor-kb=256 --compute-ms=20 --run-id="$RUN_ID")
case $MODE in
  exit) ARGS=(-- "$LOOP" "${COMMON[@]}" --fail-rank=2 --fail-step=5 --mode=exit --exit-code=7) ;;
  sigkill) ARGS=(-- "$LOOP" "${COMMON[@]}" --fail-rank=1 --fail-step=5 --mode=sigkill) ;;
  stop) ARGS=(--stall-warning 2 --stall-timeout 5 -- "$LOOP" "${COMMON[@]}" --fail-rank=1 --fail-step=5 --mode=stop) ;;
  linkdown)
    [ "$WHERE" = cluster ] || fail "linkdown needs the namespace cluster"
    ARGS=(--collective-timeout 8 --kill-grace 5 -- "$LOOP" "${COMMON[@]}") ;;
  *) fail "unknown mode" ;;
esac

set +e
if [ "$MODE" = linkdown ]; then
  timeout -k 5 90 "${RUN[@]}" "$OVERLAPRUN" -np 4 "${HOSTS[@]}" "${ARGS[@]}" >"$OUT" 2>&1 &
  job=$!
  for _ in $(seq 300); do grep -q "^failure_loop: step 10 done" "$OUT" && break; sleep 0.1; done
  grep -q "^failure_loop: step 10 done" "$OUT" || fail "the job did not reach step 10"
  "$CLUSTER" link h3 down
  failed_ms=$(now_ms)
  wait $job
  rc=$?
else
  timeout -k 5 90 "${RUN[@]}" "$OVERLAPRUN" -np 4 "${HOSTS[@]}" "${ARGS[@]}" >"$OUT" 2>&1
  rc=$?
  failed_ms=$(grep -o "injects '$MODE' at step 5 at_ms=[0-9]*" "$OUT" | grep -o '[0-9]*$')
fi
end_ms=$(now_ms)
set -e
if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "$MODE" != sigkill ]; }; then
  fail "overlaprun hung until timeout(1) (status $rc)"
fi
[ -n "$failed_ms" ] || fail "no injection time"
stop_s=$(awk -v a="$failed_ms" -v b="$end_ms" 'BEGIN { printf "%.2f", (b - a) / 1000 }')
summary=$(grep "^overlaprun: job failed: " "$OUT" || true)

case $MODE in
  exit)
    [ "$rc" -eq 7 ] || fail "overlaprun exited $rc, expected rank 2's status 7"
    [[ $summary =~ ^"overlaprun: job failed: rank 2 on host $(host_of 2) exited with status 7; " ]] ||
      fail "summary does not name rank 2, $(host_of 2), status 7: '$summary'"
    limit=10 ;;
  sigkill)
    [ "$rc" -eq 137 ] || fail "overlaprun exited $rc, expected 128+9"
    [[ $summary =~ ^"overlaprun: job failed: rank 1 on host $(host_of 1) was killed by signal 9 (SIGKILL); " ]] ||
      fail "summary does not name rank 1, $(host_of 1), SIGKILL: '$summary'"
    limit=10 ;;
  stop)
    [ "$rc" -eq 1 ] || fail "overlaprun exited $rc, expected 1 (a peer's failed allreduce)"
    grep -q "overlap: rank 0: stall: allreduce 'grad\.[0-9]'[^:]*: submitted by ranks \[.*\] but not by ranks \[1 ($(host_of 1))\] for 2 s" "$OUT" ||
      fail "no stall warning naming rank 1 on $(host_of 1)"
    grep -q "^failure_loop: rank [023] (host [^)]*): step 5: grad.0: rank [023]: stalled: allreduce 'grad\.[0-9]'.* but not by ranks \[1 ($(host_of 1))\] for 5 s, past OVERLAP_STALL_TIMEOUT_S=5$" "$OUT" ||
      fail "no rank failed its allreduce with the stall error"
    [[ $summary =~ ^"overlaprun: job failed: rank "[023]" on host "[^\ ]+" exited with status 1; " ]] ||
      fail "summary: '$summary'"
    limit=15 ;;  # 5 s stall timeout + 10 s for the others to stop
  linkdown)
    [ "$rc" -ne 0 ] || fail "the job succeeded although h3 lost its link"
    # Rank 0's control connection to rank 2 stops answering after half the collective timeout
    # (runtime/control/control_plane.h): rank 0 names rank 2 and h3, and overlaprun blames h3.
    grep -Eq "^failure_loop: rank 0 \(host h1\): step [0-9]+: grad\.[0-9]: rank 0: lost the control connection to rank 2 \(host h3\): no answer for 4s: the host or its network is down" "$OUT" ||
      fail "rank 0 did not name rank 2 on h3 as the peer that stopped answering"
    [[ $summary =~ ^"overlaprun: job failed: rank 0 lost contact with host h3 (rank 2): the host or its network is down; " ]] ||
      fail "summary: '$summary'"
    grep -qx "overlaprun: no end was reported by rank 2 (h3): still running, or on a host that is unreachable" "$OUT" ||
      fail "overlaprun did not point at rank 2 on h3"
    [[ $summary =~ "; no end was reported by rank 2 (h3)"$ ]] || fail "summary does not name rank 2 (h3): '$summary'"
    limit=20 ;;  # 4 s peer timeout + probes + 5 s kill grace + 3 s to SIGKILL mpirun + slack
esac
awk -v s="$stop_s" -v l="$limit" 'BEGIN { exit !(s < l) }' || fail "the job took $stop_s s to stop (limit $limit s)"
# Every rank is gone when overlaprun returns, except on a host cut off from the network, which
# nothing can reach until the cluster is taken down.
left=$( (pgrep -f -- "^$LOOP .*--run-id=$RUN_ID" || true) | wc -l)
if [ "$MODE" = linkdown ]; then
  [ "$left" -le 1 ] || fail "$left ranks still running; only h3's may be"
else
  [ "$left" -eq 0 ] || fail "$left ranks still running after overlaprun returned"
fi
grep -E "^overlaprun: |^failure_loop: rank .*(injects|: step)|overlap: rank [0-9]+: (stall|lost)" "$OUT" | cut -c1-400 | head -20 || true  # head may end the pipe early (SIGPIPE)
echo "measured: $MODE $WHERE stop_s=$stop_s"
echo PASS
