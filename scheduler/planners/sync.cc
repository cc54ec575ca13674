// The synchronous baselines: WFBP, Horovod fusion, MG-WFBP (see planner.h for sources).
#include <algorithm>
#include <cmath>
#include <limits>

#include "scheduler/planner.h"
#include "scheduler/planners/common.h"

namespace overlap::sched {

using internal::Piece;

absl::StatusOr<Plan> PlanWfbp(const Profile& profile, const CostModel&, const PlannerOptions&) {
  Plan plan = internal::NewPlan("wfbp", profile, 0);
  for (const Piece& p : internal::WholeTensors(profile, internal::ReadyOrder(profile))) {
    plan.buckets.push_back(
        internal::MakeBucket(profile, {p}, Collective::kAllreduce, 0, Window::kBackward));
  }
  return plan;
}

absl::StatusOr<Plan> PlanFusion(const Profile& profile, const CostModel&,
                                const PlannerOptions& options) {
  if (options.fusion_threshold_bytes <= 0 || !(options.cycle_time_ms > 0)) {
    return absl::InvalidArgumentError(
        "fusion: fusion_threshold_bytes and cycle_time_ms must be > 0");
  }
  Plan plan = internal::NewPlan("fusion", profile, 0);
  const std::vector<Piece> pieces = internal::WholeTensors(profile, internal::ReadyOrder(profile));
  // Tensors ready within the same cycle are fused together, up to the threshold.
  size_t i = 0;
  while (i < pieces.size()) {
    const double ready = profile.tensors[pieces[i].tensor].ready_ms;
    const double tick = std::ceil(ready / options.cycle_time_ms) * options.cycle_time_ms;
    std::vector<Piece> cycle;
    while (i < pieces.size() && profile.tensors[pieces[i].tensor].ready_ms <= tick) {
      cycle.push_back(pieces[i++]);
    }
    for (const auto& group : internal::FuseConsecutive(cycle, options.fusion_threshold_bytes)) {
      plan.buckets.push_back(
          internal::MakeBucket(profile, group, Collective::kAllreduce, 0, Window::kBackward));
    }
  }
  return plan;
}

absl::StatusOr<Plan> PlanMgwfbp(const Profile& profile, const CostModel& cost,
                                const PlannerOptions&) {
  const std::vector<Piece> pieces = internal::WholeTensors(profile, internal::ReadyOrder(profile));
  const size_t n = pieces.size();
  // best[i]: earliest end of the last allreduce when pieces [0, i) are sent in groups.
  // A later group's end only grows with the previous end, so optimal prefixes compose.
  std::vector<double> best(n + 1, std::numeric_limits<double>::infinity());
  std::vector<size_t> cut(n + 1, 0);
  best[0] = 0;
  for (size_t i = 1; i <= n; ++i) {
    const double ready = profile.tensors[pieces[i - 1].tensor].ready_ms;
    double bytes = 0;
    for (size_t j = i; j-- > 0;) {  // group = pieces [j, i)
      bytes += static_cast<double>(pieces[j].bytes);
      const double end = std::max(best[j], ready) + cost.Ms(0, Collective::kAllreduce, bytes);
      if (end < best[i]) {
        best[i] = end;
        cut[i] = j;
      }
    }
  }
  std::vector<std::vector<Piece>> groups;
  for (size_t i = n; i > 0; i = cut[i]) {
    groups.emplace_back(pieces.begin() + cut[i], pieces.begin() + i);
  }
  std::reverse(groups.begin(), groups.end());
  Plan plan = internal::NewPlan("mgwfbp", profile, 0);
  for (const auto& group : groups) {
    plan.buckets.push_back(
        internal::MakeBucket(profile, group, Collective::kAllreduce, 0, Window::kBackward));
  }
  return plan;
}

}  // namespace overlap::sched
