// Installs the plan test hooks (runtime/plan/plan_test_hooks.h) that OVERLAP_TEST_PLAN_SCHEDULE,
// OVERLAP_TEST_CORRUPT_PLAN and OVERLAP_TEST_ROUND_IN_VOTE drive, when a test binary or
// liboverlap_testing.so is loaded. Each hook reads its variable when it runs, so a test may set it
// after start-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/plan/plan_test_hooks.h"

namespace overlap {
namespace {

// OVERLAP_TEST_CORRUPT_PLAN = slice | tensor | version | truncate: rank 0 damages the plan it
// broadcasts, so that the refusal path can be tested.
void DamageFromEnv(std::string* bytes, sched::Plan* plan) {
  const char* how = std::getenv("OVERLAP_TEST_CORRUPT_PLAN");
  if (how == nullptr) return;
  const std::string what = how;
  if (what == "slice") {
    plan->buckets.back().slices.back().count += 1;
    *bytes = plan->Serialize();
  } else if (what == "tensor") {
    plan->buckets.front().slices.front().name = "no.such.tensor";
    *bytes = plan->Serialize();
  } else if (what == "version" && !bytes->empty()) {
    (*bytes)[0] = static_cast<char>((*bytes)[0] + 7);
  } else if (what == "truncate") {
    bytes->resize(bytes->size() / 2);
  }
}

// Rank 0 gives every allreduce bucket of the plan it makes the schedule
// OVERLAP_TEST_PLAN_SCHEDULE = "delay,period", phases staggered by bucket, so that delayed plans
// are tested whatever the planner would choose for the test machine's timings. Buckets holding a
// tensor the step reads at once (TensorInfo::may_delay false) keep no delay, as planners do.
void ScheduleFromEnv(const sched::Profile& profile, sched::Plan* plan) {
  const char* spec = std::getenv("OVERLAP_TEST_PLAN_SCHEDULE");
  if (spec == nullptr) return;
  int delay = 0;
  int period = 1;
  if (std::sscanf(spec, "%d,%d", &delay, &period) != 2 || delay < 0 || period < 1) return;
  int index = 0;
  for (sched::Bucket& b : plan->buckets) {
    if (b.op != sched::Collective::kAllreduce) continue;
    if (std::any_of(b.slices.begin(), b.slices.end(), [&](const sched::TensorSlice& s) {
          return !profile.tensors[static_cast<size_t>(s.tensor)].may_delay;
        })) {
      continue;
    }
    b.delay = delay;
    b.lag = 0;
    b.period = period;
    b.phase = index++ % period;
  }
  plan->staleness = std::max(plan->staleness, delay);
}

// OVERLAP_TEST_ROUND_IN_VOTE = milliseconds: every rank that has started a plan vote it voted
// quiescent in asks for a negotiation round at once, except rank 0, which first waits that long
// (its peers see the vote's result meanwhile and go on to the stage's collectives). With every
// rank asking, rank 0 would start the round the moment it may.
bool RoundInVoteFromEnv(int rank) {
  const char* ms = std::getenv("OVERLAP_TEST_ROUND_IN_VOTE");
  if (ms == nullptr) return false;
  if (rank == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(std::atof(ms)));
  }
  return true;
}

// OVERLAP_TEST_REPLAN_DIFFERS set: a re-plan check after a drift finds no plan made again
// (OVERLAP_REPLAN_MIN_GAIN=0 then drops the plan).
bool ReplanDiffersFromEnv() { return std::getenv("OVERLAP_TEST_REPLAN_DIFFERS") != nullptr; }

// OVERLAP_TEST_PROBE_STALL_MS = milliseconds: each timed run of the first probe of every link
// fit (the smallest allreduce) takes that much longer, as when the training processes compute
// beside the coordinators while it runs.
double ProbeStallFromEnv(int64_t /*bytes*/, int probe) {
  const char* ms = std::getenv("OVERLAP_TEST_PROBE_STALL_MS");
  return ms != nullptr && probe == 0 ? std::atof(ms) * 1e-3 : 0;
}

const bool kInstalled = [] {
  PlanTestHooks hooks;
  hooks.probe_stall_s = ProbeStallFromEnv;
  hooks.replan_differs = ReplanDiffersFromEnv;
  hooks.round_in_vote = RoundInVoteFromEnv;
  hooks.adjust_plan = ScheduleFromEnv;
  hooks.damage_broadcast = DamageFromEnv;
  InstallPlanTestHooks(hooks);
  return true;
}();

}  // namespace
}  // namespace overlap

// For overlap.tensorflow (python/overlap/tensorflow/delayed_updates.py), which looks this symbol
// up in the library it loaded: whether this test build may deliver delayed results although
// staleness and period say none (OVERLAP_TEST_PLAN_SCHEDULE set). The shipped library has no
// such symbol.
extern "C" __attribute__((visibility("default"))) int overlap_test_plan_may_delay() {
  return std::getenv("OVERLAP_TEST_PLAN_SCHEDULE") != nullptr ? 1 : 0;
}
