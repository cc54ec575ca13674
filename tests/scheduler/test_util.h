// Small profiles and independent reference computations for the scheduler tests.
#ifndef OVERLAP_TESTS_SCHEDULER_TEST_UTIL_H_
#define OVERLAP_TESTS_SCHEDULER_TEST_UTIL_H_

#include <cstddef>
#include <string>
#include <vector>

#include "scheduler/plan.h"
#include "scheduler/profile.h"

namespace overlap::sched::testing {

// A profile with one fp32 tensor per layer; sizes in bytes, times in ms.
Profile MakeProfile(const std::vector<double>& forward_ms, const std::vector<double>& backward_ms,
                    const std::vector<int64_t>& bytes, double update_ms);

// MG-WFBP's iteration model for a plan of allreduces run one at a time in plan order on one
// channel: F + (end of the last collective, from the start of backward) + U, where each
// collective starts at max(previous end, its last tensor's ready time).
double MgwfbpModelMs(const Profile& profile, const Plan& plan, const CostModel& cost);

// Independent check that every element of every tensor is covered exactly once by an allreduce,
// or exactly once by a reduce-scatter and once by an allgather; returns the first problem or "".
std::string CoverageProblem(const Profile& profile, const Plan& plan);

// The sanitizer this test binary runs under ("asan", "tsan"; tools/sanitize.sh sets
// SANITIZER_BUILD), or nullptr uninstrumented. Instrumented, the planners run ~10x slower: time
// limits are not checked, and exhaustive sweeps keep every planner, cost and model but not every
// combination of them (RunsUnderSanitizer).
const char* Sanitizer();

// True for every `index` uninstrumented; under a sanitizer, for one index in `stride`, rotating,
// so a sweep still reaches each value of each of its axes but runs 1/stride of the product.
bool RunsUnderSanitizer(size_t index, size_t stride);

}  // namespace overlap::sched::testing

#endif  // OVERLAP_TESTS_SCHEDULER_TEST_UTIL_H_
