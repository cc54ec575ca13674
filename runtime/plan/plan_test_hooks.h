// A seam for the tests of planned execution: rank 0 passes each plan it makes, and each plan it
// broadcasts, through these hooks, and every rank tells them when it starts a vote. The shipped
// library installs none, so liboverlap.so as users install it reads no OVERLAP_TEST_* variable
// and never alters a plan. Test builds link
// //tests/runtime:plan_hooks_from_env, whose static initializer installs hooks driven by
// OVERLAP_TEST_PLAN_SCHEDULE (every bucket delayed / sent periodically, whatever the planner
// chose), OVERLAP_TEST_CORRUPT_PLAN (a damaged broadcast, to test the refusal) and
// OVERLAP_TEST_ROUND_IN_VOTE (a round wanted while a vote is out) and OVERLAP_TEST_REPLAN_DIFFERS
// (every re-plan check after a drift drops the plan) and OVERLAP_TEST_PROBE_STALL_MS (the first
// latency probe of each link fit slowed): the C++ test
// binaries through //runtime:core_for_tests and //tests:mpi_catch_main, the Python suites through
// //tests/runtime:liboverlap_testing.so.
//
// Install before the runtime starts; the hooks are read, never written, while it runs.
#ifndef OVERLAP_RUNTIME_PLAN_PLAN_TEST_HOOKS_H_
#define OVERLAP_RUNTIME_PLAN_PLAN_TEST_HOOKS_H_

#include <cstdint>
#include <string>

#include "scheduler/plan.h"
#include "scheduler/profile.h"

namespace overlap {

struct PlanTestHooks {
  // Rank 0, on each plan it makes from `profile`, before it is serialized.
  void (*adjust_plan)(const sched::Profile& profile, sched::Plan* plan) = nullptr;
  // Rank 0, on the bytes of the plan it is about to broadcast (and the plan they encode).
  void (*damage_broadcast)(std::string* bytes, sched::Plan* plan) = nullptr;
  // Each rank, right after it starts a plan vote in which it voted quiescent: true asks for a
  // negotiation round while the vote is out (after whatever the hook waited, so that the peers
  // may see the vote's result first), before the rank looks at the vote.
  bool (*round_in_vote)(int rank) = nullptr;
  // Rank 0, at a re-plan check after a drift: true counts no plan made from the drifted step as
  // the plan in force, whatever it is (as if its buckets had moved), so that the plan in force
  // stays only by OVERLAP_REPLAN_MIN_GAIN (0: the drop and the full re-plan run).
  bool (*replan_differs)() = nullptr;
  // Each rank, in each timed run of a link probe: seconds to wait before the run's time is taken
  // (a run slowed as by processes computing beside the coordinator). `probe` counts the sizes
  // probed so far in this fit of the link cost, from 0 (the first: the smallest allreduce).
  double (*probe_stall_s)(int64_t bytes, int probe) = nullptr;
};

void InstallPlanTestHooks(const PlanTestHooks& hooks);
const PlanTestHooks& InstalledPlanTestHooks();

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_PLAN_TEST_HOOKS_H_
