#!/usr/bin/env bash
# Rank 1 runs one step more than rank 0 under a delayed plan (scheduled_delayed_test.cc,
# "[uneven]"), then both shut down. Rank 1's Shutdown must fail within seconds saying that the
# ranks ran different numbers of steps, and rank 0's must fail too, naming rank 1: no rank waits
# out OVERLAP_COLLECTIVE_TIMEOUT_S (300 s by default).
set -euo pipefail
binary=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HOME=${HOME:-/tmp}
set +e
log=$(timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2 -x OVERLAP_PLANNER \
  -x OVERLAP_PROFILE_STEPS -x OVERLAP_REPLAN_DRIFT -x OVERLAP_TEST_PLAN_SCHEDULE \
  "$binary" "[uneven]" 2>&1)
rc=$?
set -e
echo "$log" | grep -E "uneven:|Shutdown" | cut -c1-400
fail() { echo "FAIL: $*" >&2; echo "$log" | tail -30 >&2; exit 1; }
((rc != 124 && rc != 137)) || fail "the job did not end within 120 s"
# (The job's status is the test case's: it reports the Shutdown errors below, they are its point.)
grep -qE "uneven: rank 1: Shutdown returned after [0-9.]+ s: rank 1: Shutdown: another rank has shut down .*every rank must run the same number of steps" <<<"$log" ||
  fail "rank 1's Shutdown did not say that the ranks ran different numbers of steps"
grep -qE "uneven: rank 0: Shutdown returned after [0-9.]+ s: .*rank 1" <<<"$log" ||
  fail "rank 0's Shutdown did not fail naming rank 1"
for rank in 0 1; do
  secs=$(sed -nE "s/.*uneven: rank $rank: Shutdown returned after ([0-9.]+) s.*/\1/p" <<<"$log")
  awk -v s="$secs" 'BEGIN { exit !(s < 30) }' || fail "rank $rank's Shutdown took $secs s"
done
echo PASS
