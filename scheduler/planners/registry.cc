// MakePlan, the planner registry and the auto planner.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/planner.h"
#include "scheduler/planners/common.h"

namespace overlap::sched {
namespace {

using PlannerFn = absl::StatusOr<Plan> (*)(const Profile&, const CostModel&, const PlannerOptions&);

struct Entry {
  const char* name;
  PlannerFn fn;
};

const Entry kPlanners[] = {
    {"wfbp", PlanWfbp},     {"fusion", PlanFusion},
    {"mgwfbp", PlanMgwfbp}, {"bytescheduler", PlanByteScheduler},
    {"usbyte", PlanUsByte}, {"dear", PlanDear},
    {"deft", PlanDeft},     {"auto", PlanAuto},
};

}  // namespace

const std::vector<std::string>& PlannerNames() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>();
    for (const Entry& e : kPlanners) v->push_back(e.name);
    return v;
  }();
  return *names;
}

absl::StatusOr<Plan> MakePlan(absl::string_view planner, const Profile& profile,
                              const CostModel& cost, const PlannerOptions& options) {
  absl::Status status = cost.Validate();
  if (!status.ok()) return status;
  if (options.staleness < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner options: staleness must be >= 0, got ", options.staleness));
  }
  if (profile.tensors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile '", profile.model, "' has no tensors (was Finalize called?)"));
  }
  for (const Entry& e : kPlanners) {
    if (planner != e.name) continue;
    absl::StatusOr<Plan> plan = e.fn(profile, cost, options);
    if (!plan.ok()) return plan.status();
    status = ValidatePlan(*plan, profile, cost);
    if (!status.ok()) {
      return absl::InternalError(
          absl::StrCat("planner '", planner, "' produced an invalid plan: ", status.message()));
    }
    return plan;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown planner '", planner, "'; valid planners: ", absl::StrJoin(PlannerNames(), ", ")));
}

absl::StatusOr<Plan> PlanAuto(const Profile& profile, const CostModel& cost,
                              const PlannerOptions& options) {
  Plan best;
  double best_ms = std::numeric_limits<double>::infinity();
  std::string winner;
  for (const Entry& e : kPlanners) {
    if (e.fn == PlanAuto) continue;
    absl::StatusOr<Plan> plan = e.fn(profile, cost, options);
    if (!plan.ok()) continue;
    const double ms = internal::SimulatedMs(profile, *plan, cost);
    if (ms < best_ms * (1 - 1e-9)) {
      best_ms = ms;
      best = *std::move(plan);
      winner = e.name;
    }
  }
  if (!std::isfinite(best_ms)) return absl::InternalError("auto: no planner produced a plan");
  best.planner = absl::StrCat("auto:", winner);
  return best;
}

}  // namespace overlap::sched
