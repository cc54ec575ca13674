#include "runtime/plan/plan_controller.h"

#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "runtime/negotiation/rank_bits.h"
#include "runtime/plan/launch_units.h"
#include "runtime/plan/plan_checkpoint.h"
#include "runtime/plan/plan_schedule.h"
#include "spdlog/spdlog.h"

namespace overlap {

PlanController::PlanController(const Config& config, int rank, Negotiator* negotiator,
                               PlannedMode* planned, StepProfiler* profiler,
                               std::unique_ptr<PlanScheduler> scheduler)
    : config_(config),
      rank_(rank),
      negotiator_(negotiator),
      planned_(planned),
      profiler_(profiler),
      detector_(config.plan_after_steps),
      scheduler_(std::move(scheduler)) {}

PlanVote PlanController::Vote(bool wants_report, bool shutting_down) const {
  PlanVote vote;
  vote.launches = planned_->launches();
  vote.wants_unfreeze = planned_->wants_unfreeze();
  vote.planned_ids = &planned_->planned_ids();
  vote.wants_report = wants_report;
  vote.starts_nothing_more = shutting_down && planned_->StartsNothingMore();
  return vote;
}

std::optional<LearnedStep> PlanController::Learn(RoundResult* round) {
  std::optional<LearnedStep> learned;
  for (ReadyOp& r : round->ready) {
    const Response& response = *r.response;
    // Delayed reductions rotate names by design and stay negotiated.
    if (response.request.kind == OpKind::kAllreduce && response.cache_id >= 0 &&
        response.request.update_schedule.empty()) {
      std::optional<LearnedStep> step = detector_.Observe(
          response.cache_id,
          r.op.has_value() ? std::optional<uint64_t>(r.op->observed) : std::nullopt,
          round->agreed_launches);
      if (step.has_value()) learned = std::move(step);
    } else if (response.request.kind == OpKind::kJoin) {
      detector_.Reset();
      // While a plan runs, the Join completes once the plan has seen every rank join too.
      if (r.op.has_value()) r.op = planned_->JoinAgreed(std::move(*r.op));
    }
  }
  detector_.EndRound();
  return learned;
}

absl::Status PlanController::OnRound(const RoundResult& round,
                                     const std::optional<LearnedStep>& learned,
                                     PendingTable* pending) {
  if (round.evicted) detector_.Reset();
  // Changes need every rank to have started the same planned collectives (agreed_launches):
  // then none is left waiting for a rank that stops following the plan.
  if (planned_->frozen() && round.unfreeze_wanted && round.agreed_launches.has_value()) {
    DropPlan(
        "a rank is blocked on it (its program went on without a tensor the plan waits for, waits "
        "for a result before the unit a check stopped the plan at, or waited past its patience)",
        pending);
  }
  if (!learned.has_value()) return absl::OkStatus();
  if (scheduler_ != nullptr && !warned_no_markers_ && !profiler_->used()) {
    warned_no_markers_ = true;
    if (rank_ == 0) {
      spdlog::warn(
          "overlap: OVERLAP_PLANNER={} needs the step markers (overlap::StartForward, "
          "StartBackward, StartUpdate) to measure the step; this program calls none, so the "
          "runtime runs the plan it observes",
          config_.planner);
    }
  }
  if (scheduled_in_force_) return absl::OkStatus();  // the scheduler's plan stays until dropped
  if (planned_->frozen() && !(round.agreed_launches.has_value() && learned->launches_unchanged)) {
    return absl::OkStatus();  // the plan in force is in use
  }
  std::vector<PlanEntry> entries;
  for (int32_t id : learned->ids) {
    std::shared_ptr<const Response> response = negotiator_->CachedResponse(id);
    if (response == nullptr) return absl::OkStatus();
    entries.push_back(PlanEntry{id, std::move(response)});
  }
  // The new plan's first pass skips what negotiation already agreed of the step in progress.
  const absl::flat_hash_set<int32_t> agreed(detector_.current().begin(), detector_.current().end());
  // Launch units may join tensors of different negotiation rounds, but never across a point
  // where the program, on any rank, saw an operation finish: every rank freezes at this same agreed
  // round, so all take part in the OR of the marks.
  std::vector<uint64_t> waits(Words(entries.size()), 0);
  for (size_t k = 1; k < entries.size(); ++k) {
    if (learned->observed[k] != learned->observed[k - 1]) SetBit(&waits, k);
  }
  absl::Status agreed_waits = negotiator_->OrAcrossRanks(&waits);
  if (!agreed_waits.ok()) return agreed_waits;
  std::vector<int64_t> segments(entries.size(), 0);
  for (size_t k = 1; k < entries.size(); ++k) {
    segments[k] = segments[k - 1] + (TestBit(waits, k) ? 1 : 0);
  }
  if (planned_->frozen()) {
    DropPlan("another step repeats while the plan goes unused", pending, /*relearn=*/false);
  }
  counters_.frozen.fetch_add(1, std::memory_order_relaxed);
  counters_.tensors.store(static_cast<int64_t>(entries.size()), std::memory_order_relaxed);
  const std::vector<std::vector<int>> units =
      MakeLaunchUnits(entries, segments, learned->rounds, PlannedMode::kMinUnitBytes,
                      PlannedMode::kFirstUnitBytes, PlannedMode::kUnitBytes);
  ExecutablePlan plan = ObservedPlan(std::move(entries), units);
  counters_.units.store(static_cast<int64_t>(plan.buckets.size()), std::memory_order_relaxed);
  spdlog::debug("overlap: rank {}: observed plan: {} tensors, {} launch units", rank_,
                plan.entries.size(), plan.buckets.size());
  planned_->Freeze(std::move(plan), agreed, learned->step_time);
  negotiator_->ForgetStalls(planned_->planned_ids());
  // This step's submissions that negotiation has not agreed yet continue under the plan.
  for (auto it = pending->begin(); it != pending->end();) {
    if (planned_->Owns(it->first)) {
      PendingOp op = std::move(it->second);
      op.cache_id = -1;
      op.sent = false;
      planned_->Add(std::move(op));
      pending->erase(it++);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

void PlanController::DropIfDiverged(PendingTable* pending) {
  // Each rank sees the check fail at its own moment, so the detector is not reset here: a freeze
  // (collective: the OR of the wait marks, the CUDA plane's set-up) must come at the same agreed
  // round on every rank. The diverged tensor's renegotiation evicts it in an agreed round, and
  // that resets every rank's detector alike.
  if (planned_->must_unfreeze()) {
    DropPlan("a tensor was submitted differently from the plan", pending, /*relearn=*/false);
  }
}

bool PlanController::TakeHandedBack() {
  const bool handed_back = handed_back_;
  handed_back_ = false;
  return handed_back;
}

void PlanController::HandBack(std::vector<PendingOp> ops, PendingTable* pending) {
  if (ReturnToNegotiation(std::move(ops), pending)) handed_back_ = true;
}

void PlanController::DropPlan(const char* why, PendingTable* pending, bool relearn) {
  spdlog::info("overlap: rank {}: dropping the frozen plan: {}", rank_, why);
  HandBack(planned_->Unfreeze(), pending);
  if (relearn) detector_.Reset();
  counters_.dropped.fetch_add(1, std::memory_order_relaxed);
  counters_.tensors.store(0, std::memory_order_relaxed);
  counters_.units.store(0, std::memory_order_relaxed);
  if (scheduled_in_force_) {
    scheduled_in_force_ = false;
    // The coordinator's marker, not the program's step count (steps_), which runs ahead of it by
    // different amounts on different ranks.
    scheduler_->OnPlanDropped(last_marker_step_);
  }
  absl::MutexLock lock(&schedule_mu_);
  if (!schedule_.tensors.empty()) {
    schedule_.tensors.clear();
    schedule_generation_.store(++schedule_.generation, std::memory_order_release);
  }
}

void PlanController::OnStep(int64_t step) {
  last_marker_step_ = step;
  scheduler_->OnStep(step);
}

absl::Status PlanController::ProgressSchedule(bool quiescent, PendingTable* pending) {
  absl::StatusOr<std::optional<ExecutablePlan>> plan =
      scheduler_->Progress(quiescent, [this](const std::vector<std::string>& names) {
        // What negotiation has agreed under these names: all a plan may refer to.
        absl::flat_hash_map<std::string, PlanEntry> table;
        for (const std::string& name : names) {
          const int32_t id = negotiator_->CachedId(name);
          std::shared_ptr<const Response> response = negotiator_->CachedResponse(id);
          if (response != nullptr) table.emplace(name, PlanEntry{id, std::move(response)});
        }
        return table;
      });
  if (!plan.ok()) return plan.status();
  if (plan->has_value()) {
    AdoptScheduled(std::move(**plan), absl::Milliseconds(profiler_->median_step_ms()), pending);
  }
  const char* drop = scheduler_->TakeDropWish();
  if (drop != nullptr && planned_->frozen()) DropPlan(drop, pending);
  return absl::OkStatus();
}

void PlanController::AdoptScheduled(ExecutablePlan plan, absl::Duration step_time,
                                    PendingTable* pending, PlanDelays::State* resume) {
  // Every rank is here with nothing in flight, between the same two steps.
  scheduled_in_force_ = false;  // a plan being replaced is not a plan lost
  if (planned_->frozen()) DropPlan("a scheduled plan replaces it", pending, /*relearn=*/true);
  detector_.Reset();
  counters_.frozen.fetch_add(1, std::memory_order_relaxed);
  counters_.tensors.store(static_cast<int64_t>(plan.entries.size()), std::memory_order_relaxed);
  counters_.units.store(static_cast<int64_t>(plan.buckets.size()), std::memory_order_relaxed);
  // Pass 0 (or a checkpoint's next pass) is the submission after the marker just taken in, or,
  // for a restore between steps, after the next one.
  std::map<std::string, std::vector<ScheduledSlice>> delayed = DelayedSlices(plan);
  {
    absl::MutexLock lock(&schedule_mu_);
    schedule_generation_.store(++schedule_.generation, std::memory_order_release);
    schedule_.first_step = last_marker_step_ + (resume != nullptr ? 1 : 0);
    schedule_.first_pass = resume != nullptr ? resume->passes : 0;
    schedule_.tensors = std::move(delayed);
  }
  if (resume != nullptr) {
    planned_->Resume(std::move(plan), std::move(*resume), step_time);
  } else {
    planned_->Freeze(std::move(plan), {}, step_time);
  }
  negotiator_->ForgetStalls(planned_->planned_ids());
  scheduled_in_force_ = true;
}

std::optional<absl::StatusOr<std::string>> PlanController::Save() const {
  absl::StatusOr<std::string> answer = std::string();  // no scheduled plan in force
  if (scheduled_in_force_ && planned_->frozen()) {
    absl::StatusOr<std::optional<PlanDelays::State>> state = planned_->SaveState();
    if (state.ok() && !state->has_value()) return std::nullopt;  // its buckets still run
    if (!state.ok()) {
      answer = absl::Status(
          state.status().code(),
          absl::StrCat("rank ", rank_, ": SaveCompressionState: ", state.status().message()));
    } else {
      answer = EncodePlanCheckpoint(MakePlanCheckpoint(planned_->plan(), **std::move(state),
                                                       profiler_->median_step_ms(),
                                                       scheduler_->info().predicted_step_ms));
    }
  }
  return answer;
}

absl::StatusOr<std::shared_ptr<RestoredPlan>> PlanController::PrepareRestore(
    absl::string_view bytes) const {
  const std::string what = absl::StrCat("rank ", rank_, ": RestoreCompressionState: ");
  absl::StatusOr<PlanCheckpoint> checkpoint = DecodePlanCheckpoint(bytes);
  if (!checkpoint.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, checkpoint.status().message()));
  absl::StatusOr<ExecutablePlan> plan = CheckpointedPlan(*checkpoint, config_.num_channels);
  if (!plan.ok()) return absl::InvalidArgumentError(absl::StrCat(what, plan.status().message()));
  if (scheduler_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, "the snapshot holds a scheduled plan (", plan->source,
        "), but this run has OVERLAP_PLANNER=observed, which runs none; resume with the planner "
        "the snapshot was saved under"));
  }
  auto restored = std::make_shared<RestoredPlan>();
  restored->plan = *std::move(plan);
  restored->state = std::move(checkpoint->state);
  restored->step_ms = checkpoint->step_ms;
  restored->predicted_step_ms = checkpoint->predicted_step_ms;
  return restored;
}

void PlanController::AdoptRestored(RestoredPlan restored, PendingTable* pending) {
  spdlog::info("overlap: rank {}: resuming the {} plan of a checkpoint at its pass {}", rank_,
               restored.plan.source, restored.state.passes);
  AdoptScheduled(std::move(restored.plan), absl::Milliseconds(restored.step_ms), pending,
                 &restored.state);
  scheduler_->OnRestored(planned_->plan(), restored.predicted_step_ms);
}

void PlanController::AddStats(RuntimeStats* stats) const {
  stats->plans_frozen = counters_.frozen.load();
  stats->plans_dropped = counters_.dropped.load();
  stats->planned_tensors = counters_.tensors.load();
  stats->planned_units = counters_.units.load();
  stats->steps = steps_.load();
  if (scheduler_ == nullptr) return;
  const ScheduleInfo info = scheduler_->info();
  stats->planner = info.planner;
  stats->plan_buckets = info.buckets;
  stats->plan_compressed_buckets = info.compressed_buckets;
  stats->plan_two_stage_buckets = info.two_stage_buckets;
  stats->predicted_step_ms = info.predicted_step_ms;
  stats->plan_adopted_step = info.adopted_step;
  stats->plans_scheduled = info.adopted;
  stats->plans_refused = info.refused;
  stats->plan_layerwise_update = info.layerwise_update;
  stats->plan_mean_staleness = info.mean_staleness;
  stats->plan_update_cycle = info.update_cycle;
  stats->fitted_alpha_us = info.alpha_us;
  stats->fitted_beta_us_per_mb = info.beta_us_per_mb;
  stats->fitted_two_stage_alpha_us = info.two_stage_alpha_us;
  stats->fitted_two_stage_beta_us_per_mb = info.two_stage_beta_us_per_mb;
  stats->link_cost_fits = info.cost_fits;
  stats->link_cost_reuses = info.cost_reuses;
  stats->plan_drifts_kept = info.drifts_kept;
  stats->plan_trials = info.trials;
  stats->plan_trials_pending = info.trials_pending;
}

}  // namespace overlap
