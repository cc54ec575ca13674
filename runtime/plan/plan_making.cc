// PlanScheduler's planning (runtime/plan/plan_scheduler.h): rank 0's planner thread, which makes
// the plans to adopt from a measured profile and the fitted link cost (sched::MakePlan, or
// sched::RankPlans for auto's trials, the code the simulator runs) and simulates each; and the
// re-plan check after a drift, which plans from the steps measured under the plan in force and
// tells whether that made the same plan.
#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "runtime/plan/plan_scheduler.h"
#include "runtime/plan/plan_test_hooks.h"
#include "runtime/planes/compression_stage.h"
#include "scheduler/lookahead.h"
#include "scheduler/planner.h"
#include "scheduler/simulator.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// auto's trials: runners-up simulated within this factor of the best plan are worth measuring.
constexpr double kTrialMargin = 1.15;

sched::PlannerOptions OptionsFrom(const Config& config) {
  sched::PlannerOptions o;
  o.staleness = config.staleness;
  o.max_period = config.max_period;
  o.budget = config.budget;
  o.partition_bytes = config.partition_bytes;
  o.credit_bytes = config.credit_bytes;
  // Horovod's fusion as this runtime configures it.
  o.fusion_threshold_bytes =
      config.fusion_threshold_bytes > 0 ? config.fusion_threshold_bytes : o.fusion_threshold_bytes;
  o.cycle_time_ms = config.cycle_time_ms;
  // Planned tensors carry the default compression where a plan can run it (runtime/api/
  // runtime.cc), so every bucket gets its compressor and the costs its payload.
  const std::string compression = CompressionStage::Plannable(config.compression);
  o.compressor = CompressionStage::CompressorName(compression);
  o.compression_ratio = CompressionStage::PayloadRatio(compression);
  o.two_stage_always = config.two_stage == "on";
  return o;
}

}  // namespace

bool PlanScheduler::Delayed(const sched::Plan& plan) {
  return std::any_of(plan.buckets.begin(), plan.buckets.end(),
                     [](const sched::Bucket& b) { return b.delay > 0 || b.period > 1; });
}

PlanScheduler::Candidate PlanScheduler::Simulated(const sched::Profile& profile,
                                                  const sched::Plan& plan,
                                                  const sched::CostModel& cost) {
  Candidate c;
  sched::SimOptions options;
  options.record_iteration = true;
  absl::StatusOr<sched::SimResult> sim = sched::Simulate(profile, plan, cost, options);
  if (sim.ok()) {
    c.predicted_ms = sim->iteration_ms;
    c.predicted_step = std::move(sim->iteration_events);
  }
  return c;
}

double PlanScheduler::BestPredictedMs(const std::vector<Candidate>& candidates) {
  double best_ms = std::numeric_limits<double>::infinity();
  for (const Candidate& c : candidates) {
    if (c.predicted_ms > 0) best_ms = std::min(best_ms, c.predicted_ms);
  }
  return best_ms;
}

std::string PlanScheduler::PlanShape(const std::string& bytes) {
  absl::StatusOr<sched::Plan> decoded = sched::Plan::Deserialize(bytes);
  if (!decoded.ok()) return "";
  decoded->model.clear();
  decoded->budget_used = 0;
  return decoded->Serialize();
}

void PlanScheduler::StartReplanCheck() {
  next_drift_check_ = std::numeric_limits<int64_t>::max();
  replan_check_step_ = step_ + 2;  // as an adoption after planning: time for the planner
  if (rank_ != 0) return;
  sched::CostModel cost;
  cost.channels = {*last_fit_};
  AddDeviceBucketCost(&cost);
  PlanFromMeasuredSteps(cost, plan_shape_);
}

const PlanScheduler::Candidate* PlanScheduler::ReplanMatch() const {
  if (!outcome_.done || !outcome_.status.ok()) return nullptr;
  // auto's candidates are the plans its trials would measure again: where the plan in force,
  // the fastest they measured last time, is among them, it stays.
  const auto differs = InstalledPlanTestHooks().replan_differs;
  for (const Candidate& c : outcome_.candidates) {
    if (PlanShape(c.bytes) == plan_shape_ && (differs == nullptr || !differs())) return &c;
  }
  // Plans that differ a little (a bucket boundary moved with the compute windows) are not
  // worth a drop: it costs the held steps, a new profiling and auto's trials.
  if (!outcome_.in_force.has_value() || outcome_.in_force->predicted_ms <= 0 ||
      config_.replan_min_gain <= 0) {
    return nullptr;
  }
  const bool pays = outcome_.in_force->predicted_ms >
                    (1 + config_.replan_min_gain) * BestPredictedMs(outcome_.candidates);
  return pays ? nullptr : &*outcome_.in_force;
}

void PlanScheduler::VoteOnReplanCheck() {
  absl::MutexLock lock(&mu_);
  if (!outcome_.done) {
    votes_[3] = -1;
    return;
  }
  const Candidate* match = ReplanMatch();
  if (outcome_.in_force.has_value() && outcome_.in_force->predicted_ms > 0 &&
      !outcome_.candidates.empty()) {
    spdlog::info(
        "overlap: rank 0: step {}: on the drifted step the plan in force is simulated at {:.1f} "
        "ms, the best plan made from it at {:.1f} ms (OVERLAP_REPLAN_MIN_GAIN={})",
        step_, outcome_.in_force->predicted_ms, BestPredictedMs(outcome_.candidates),
        config_.replan_min_gain);
  }
  votes_[1] = match != nullptr ? 1 : 0;
  const double ms = match != nullptr ? match->predicted_ms : 0;
  votes_[3] = -static_cast<int>(2 + std::min(2e9, std::max(0.0, 1e3 * ms)));
}

void PlanScheduler::PlanFromMeasuredSteps(const sched::CostModel& cost,
                                          const std::string& in_force) {
  absl::StatusOr<sched::Profile> profile = profiler_->MakeProfile("measured");
  if (!profile.ok()) {
    absl::MutexLock lock(&mu_);
    outcome_ = Outcome();
    outcome_.done = true;
    outcome_.status = profile.status();
    return;
  }
  if (!in_force.empty()) {
    // Steps measured under a delayed plan hold its look-ahead already: every candidate is
    // charged its own, so the in-force plan's is taken out. A plan that no longer fits the
    // profile leaves the marks off instead, charging nothing rather than twice.
    absl::StatusOr<sched::Plan> plan = sched::Plan::Deserialize(in_force);
    if (plan.ok() && sched::ValidatePlan(*plan, *profile, cost).ok()) {
      const double taken = sched::TakeOutLookAhead(*plan, &*profile);
      if (taken > 0) {
        spdlog::info("overlap: rank 0: {:.2f} ms of the plan in force's look-ahead taken out "
                     "of the measured step before re-planning",
                     taken);
      }
    } else {
      for (sched::TensorInfo& t : profile->tensors) t.looks_ahead = false;
    }
  }
  StartPlanning(*std::move(profile), cost, in_force);
}

void PlanScheduler::StartPlanning(sched::Profile profile, sched::CostModel cost,
                                  std::string in_force) {
  if (planner_.joinable()) planner_.join();
  {
    absl::MutexLock lock(&mu_);
    outcome_ = Outcome();
  }
  planner_ = std::thread(
      [this, profile = std::move(profile), cost = std::move(cost), in_force = std::move(in_force)] {
        Outcome outcome = MakeOutcome(profile, cost, in_force);
        absl::MutexLock lock(&mu_);
        outcome_ = std::move(outcome);
      });
}

PlanScheduler::Outcome PlanScheduler::MakeOutcome(const sched::Profile& profile,
                                                  const sched::CostModel& cost,
                                                  const std::string& in_force) const {
  Outcome outcome;
  outcome.done = true;
  absl::StatusOr<std::vector<Candidate>> candidates = MakeCandidates(profile, cost);
  if (candidates.ok()) {
    outcome.candidates = *std::move(candidates);
  } else {
    outcome.status = candidates.status();
  }
  if (in_force.empty()) return outcome;
  absl::StatusOr<sched::Plan> plan = sched::Plan::Deserialize(in_force);
  if (!plan.ok()) return outcome;
  outcome.in_force = Simulated(profile, *plan, cost);
  outcome.in_force->bytes = in_force;
  return outcome;
}

absl::StatusOr<std::vector<PlanScheduler::Candidate>> PlanScheduler::MakeCandidates(
    const sched::Profile& profile, const sched::CostModel& cost) const {
  const absl::Time start = absl::Now();
  std::vector<sched::Plan> plans;
  if (config_.planner == "auto" && config_.auto_trials > 1) {
    absl::StatusOr<std::vector<sched::RankedPlan>> ranked =
        sched::RankPlans(profile, cost, OptionsFrom(config_));
    if (!ranked.ok()) return ranked.status();
    const double best_ms = ranked->front().simulated_ms;
    // Planners often agree (deft at staleness 0 may return dear's plan): each plan is tried once.
    auto same_buckets = [](sched::Plan a, sched::Plan b) {
      a.planner = b.planner = "";
      a.staleness = b.staleness = 0;
      a.budget_used = b.budget_used = 0;
      return a.Serialize() == b.Serialize();
    };
    for (sched::RankedPlan& r : *ranked) {
      if (static_cast<int>(plans.size()) == config_.auto_trials) break;
      if (!plans.empty() &&
          (r.simulated_ms > kTrialMargin * best_ms || Delayed(r.plan) || Delayed(plans.front()))) {
        continue;
      }
      if (std::any_of(plans.begin(), plans.end(),
                      [&](const sched::Plan& p) { return same_buckets(p, r.plan); })) {
        continue;
      }
      plans.push_back(std::move(r.plan));
    }
  } else {
    absl::StatusOr<sched::Plan> plan =
        sched::MakePlan(config_.planner, profile, cost, OptionsFrom(config_));
    if (!plan.ok()) return plan.status();
    plans.push_back(*std::move(plan));
  }
  std::vector<Candidate> candidates;
  for (sched::Plan& plan : plans) {
    if (const auto adjust = InstalledPlanTestHooks().adjust_plan) adjust(profile, &plan);
    // The test schedule delays every plan: trials would replace delayed plans.
    if (Delayed(plan) && !candidates.empty()) break;
    Candidate c = Simulated(profile, plan, cost);
    c.bytes = plan.Serialize();
    if (const auto damage = InstalledPlanTestHooks().damage_broadcast) damage(&c.bytes, &plan);
    spdlog::info(
        "overlap: rank 0: planner {} made {} buckets for a measured step of {:.1f} ms compute; "
        "simulated step {:.1f} ms",
        plan.planner, plan.buckets.size(), profile.compute_ms(), c.predicted_ms);
    candidates.push_back(std::move(c));
  }
  spdlog::info("overlap: rank 0: {} candidate plan(s) made in {:.1f} ms", candidates.size(),
               absl::ToDoubleMilliseconds(absl::Now() - start));
  return candidates;
}

}  // namespace overlap
