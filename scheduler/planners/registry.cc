// MakePlan, the planner registry and the auto planner.
#include <algorithm>
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

// The payload ratio for options.compressor, or the error naming the problem.
absl::StatusOr<double> CompressionRatio(const Profile& profile, const CostModel& cost,
                                        const PlannerOptions& options) {
  const std::string& name = options.compressor;
  const double r = options.compression_ratio;
  if (!(r >= 0 && r <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner options: compression_ratio must be in [0, 1], got ", r));
  }
  if (name == "none") {
    if (r != 0 && r != 1) {
      return absl::InvalidArgumentError("planner options: compressor 'none' has ratio 1");
    }
    return 1.0;
  }
  if (name == "fp16" || name == "bf16") {
    if (r != 0 && r != 0.5) {
      return absl::InvalidArgumentError(
          absl::StrCat("planner options: compressor '", name, "' has ratio 0.5, got ", r));
    }
    return 0.5;
  }
  if (name == "randomk" || name == "covap" || name == "powersgd") {
    if (r > 0) {
      return r;
    }
    const double fused_ms =
        cost.Ms(0, Collective::kAllreduce, static_cast<double>(profile.total_bytes));
    if (fused_ms <= profile.compute_ms()) {
      return 1.0;
    }
    return std::max(0.01, profile.compute_ms() / fused_ms);
  }
  if (name == "topk" || name == "efsign") {
    return absl::InvalidArgumentError(
        absl::StrCat("planner options: compressor '", name,
                     "' combines payloads with allgather, which the planners do not model yet"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("planner options: unknown compressor '", name,
                   "'; valid: none, fp16, bf16, randomk, covap, powersgd"));
}

// A compressor combines whole allreduces (compression/compressor.h): a plan that splits one into
// a reduce-scatter and an all-gather (dear) cannot compress, and is refused naming the planner.
absl::Status CompressesOnlyAllreduces(absl::string_view planner, const Plan& plan,
                                      const PlannerOptions& options) {
  if (options.compressor == "none") {
    return absl::OkStatus();
  }
  for (const Bucket& b : plan.buckets) {
    if (b.op != Collective::kAllreduce) {
      return absl::InvalidArgumentError(absl::StrCat(
          "planner '", planner, "' splits allreduces into ", CollectiveName(b.op),
          "s, which compressor '", options.compressor,
          "' cannot run (it compresses whole allreduces): use another planner or no compression"));
    }
  }
  return absl::OkStatus();
}

// `cost` as seen by payloads `ratio` times the gradient size: only the per-byte terms shrink.
CostModel ScaledForPayload(const CostModel& cost, double ratio) {
  CostModel scaled = cost;
  for (ChannelCost& c : scaled.channels) {
    c.beta_s_per_byte *= ratio;
    c.two_stage.beta_s_per_byte *= ratio;
    c.DivideBandwidth(ratio);
  }
  return scaled;
}

}  // namespace

const std::vector<std::string>& PlannerNames() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>();
    for (const Entry& e : kPlanners) {
      v->push_back(e.name);
    }
    return v;
  }();
  return *names;
}

absl::StatusOr<Plan> MakePlan(absl::string_view planner, const Profile& profile,
                              const CostModel& cost, const PlannerOptions& options) {
  absl::Status status = cost.Validate();
  if (!status.ok()) {
    return status;
  }
  if (options.staleness < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner options: staleness must be >= 0, got ", options.staleness));
  }
  if (profile.tensors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile '", profile.model, "' has no tensors (was Finalize called?)"));
  }
  absl::StatusOr<double> ratio = CompressionRatio(profile, cost, options);
  if (!ratio.ok()) {
    return ratio.status();
  }
  for (const Entry& e : kPlanners) {
    if (planner != e.name) {
      continue;
    }
    absl::StatusOr<Plan> plan = e.fn(profile, ScaledForPayload(cost, *ratio), options);
    if (!plan.ok()) {
      return plan.status();
    }
    status = CompressesOnlyAllreduces(planner, *plan, options);
    if (!status.ok()) {
      return status;
    }
    for (Bucket& b : plan->buckets) {
      b.compressor = options.compressor;
      b.ratio = *ratio;
    }
    internal::MarkTwoStage(&*plan, cost, options.two_stage_always);
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
    if (e.fn == PlanAuto) {
      continue;
    }
    absl::StatusOr<Plan> plan = e.fn(profile, cost, options);
    if (!plan.ok() || !CompressesOnlyAllreduces(e.name, *plan, options).ok()) {
      continue;
    }
    const double ms = internal::SimulatedMs(profile, *plan, cost);
    if (ms < best_ms * (1 - 1e-9)) {
      best_ms = ms;
      best = *std::move(plan);
      winner = e.name;
    }
  }
  if (!std::isfinite(best_ms)) {
    return absl::InternalError("auto: no planner produced a plan");
  }
  best.planner = absl::StrCat("auto:", winner);
  return best;
}

absl::StatusOr<std::vector<RankedPlan>> RankPlans(const Profile& profile, const CostModel& cost,
                                                  const PlannerOptions& options) {
  absl::StatusOr<double> ratio = CompressionRatio(profile, cost, options);
  if (!ratio.ok()) {
    return ratio.status();
  }
  const CostModel scaled = ScaledForPayload(cost, *ratio);
  std::vector<RankedPlan> ranked;
  absl::Status last = absl::InternalError("auto: no planner produced a plan");
  for (const Entry& e : kPlanners) {
    if (e.fn == PlanAuto) {
      continue;
    }
    absl::StatusOr<Plan> plan = MakePlan(e.name, profile, cost, options);
    if (!plan.ok()) {
      last = plan.status();
      continue;
    }
    const double ms = internal::SimulatedMs(profile, *plan, scaled);
    plan->planner = absl::StrCat("auto:", e.name);
    ranked.push_back(RankedPlan{*std::move(plan), ms});
  }
  if (ranked.empty()) {
    return last;
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const RankedPlan& a, const RankedPlan& b) {
    return a.simulated_ms < b.simulated_ms;
  });
  return ranked;
}

}  // namespace overlap::sched
