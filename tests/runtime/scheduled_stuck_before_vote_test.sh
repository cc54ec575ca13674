#!/usr/bin/env bash
# Rank 1 waits before its forward marker of step 8 on an allreduce that rank 0 never submits,
# while rank 0 starts step 8's plan vote (scheduled_test.cc, "[stuck]"). Rank 0 holds every
# negotiation round while the vote is out, so the stall inspector cannot fail the lone
# allreduce: the vote's own deadline (OVERLAP_STALL_TIMEOUT_S, here 6 s) must end the job, with
# a warning first (OVERLAP_STALL_WARNING_S) and an error naming the step on rank 0, and rank 1's
# wait must end when rank 0 stops. Before the deadline existed both ranks waited for good.
set -euo pipefail
binary=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HOME=${HOME:-/tmp}
set +e
log=$(timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2 -x OVERLAP_PLANNER \
  -x OVERLAP_PLAN_AFTER_STEPS -x OVERLAP_PROFILE_STEPS -x OVERLAP_STALL_WARNING_S \
  -x OVERLAP_STALL_TIMEOUT_S -x OVERLAP_TEST_STUCK_AT_STEP "$binary" "[stuck]" 2>&1)
rc=$?
set -e
echo "$log" | grep -E "stuck:|plan vote" | cut -c1-400
fail() { echo "FAIL: $*" >&2; echo "$log" | tail -30 >&2; exit 1; }
((rc != 124 && rc != 137)) || fail "the job did not end within 120 s"
grep -qE "rank 0: step 8: the plan vote has waited [0-9]+ s for every rank to reach step 8's forward marker" <<<"$log" ||
  fail "rank 0 did not warn about the vote it waits for"
grep -qE "stuck: rank 0: step [0-9]+ failed \(rank 0: step 8: some rank did not reach step 8's forward marker within 6 s of this rank's plan vote \(OVERLAP_STALL_TIMEOUT_S; planner deft\)" <<<"$log" ||
  fail "rank 0's step did not fail naming the vote's step and its cause"
grep -qE "stuck: rank 1: the lone allreduce returned \(rank 1: lost the control connection to rank 0" <<<"$log" ||
  fail "rank 1's wait did not end when rank 0 stopped"
for rank in 0 1; do
  secs=$(sed -nE "s/^stuck: rank $rank: .* after ([0-9.]+) s:.*/\1/p" <<<"$log")
  [[ -n $secs ]] || fail "rank $rank printed no time"
  awk -v s="$secs" 'BEGIN { exit !(s >= 5 && s < 30) }' || fail "rank $rank's wait ended after $secs s"
done
echo PASS
