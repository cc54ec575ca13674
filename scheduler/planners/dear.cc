// DeAR: reduce-scatter in backward, all-gather in the next forward (planner.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "scheduler/planner.h"
#include "scheduler/planners/common.h"

namespace overlap::sched {

absl::StatusOr<Plan> PlanDear(const Profile& profile, const CostModel& cost,
                              const PlannerOptions&) {
  const std::vector<internal::Piece> pieces =
      internal::WholeTensors(profile, internal::ReadyOrder(profile));
  Plan best;
  double best_ms = std::numeric_limits<double>::infinity();
  for (int64_t size : {1'000'000, 4'000'000, 16'000'000, 64'000'000}) {
    const auto groups = internal::FuseConsecutive(pieces, size);
    Plan plan = internal::NewPlan("dear", profile, 0);
    plan.layerwise_update = true;
    for (const auto& g : groups) {
      plan.buckets.push_back(
          internal::MakeBucket(profile, g, Collective::kReduceScatter, 0, Window::kBackward));
    }
    // All-gathers in the order the next forward needs them.
    std::vector<size_t> by_use(groups.size());
    for (size_t i = 0; i < by_use.size(); ++i) {
      by_use[i] = i;
    }
    std::stable_sort(by_use.begin(), by_use.end(), [&](size_t a, size_t b) {
      return internal::FirstUseMs(profile, groups[a]) < internal::FirstUseMs(profile, groups[b]);
    });
    for (size_t i : by_use) {
      plan.buckets.push_back(internal::MakeBucket(profile, groups[i], Collective::kAllgather, 0,
                                                  Window::kNextForward));
    }
    const double ms = internal::SimulatedMs(profile, plan, cost);
    if (ms < best_ms) {
      best_ms = ms;
      best = std::move(plan);
    }
  }
  if (!std::isfinite(best_ms)) {
    return absl::InternalError("dear: no candidate simulated");
  }
  return best;
}

}  // namespace overlap::sched
