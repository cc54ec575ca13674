// Runtime's checkpoints (SaveCompressionState / RestoreCompressionState, runtime/overlap.h): the
// compression residuals, the delay line's state and the scheduled plan in force with its delayed
// state (runtime/plan_checkpoint.h), as one snapshot.
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/plan_checkpoint.h"
#include "runtime/runtime.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// v3 adds the plan's part; v2 (compression, delay line) and a bare compression snapshot still
// restore.
constexpr char kSnapshotV3[] = "overlap-state-v3";
constexpr char kSnapshotV2[] = "overlap-state-v2";

}  // namespace

absl::StatusOr<std::string> Runtime::SaveCompressionState() {
  absl::StatusOr<std::string> delayed =
      delay_line_->Save(absl::Seconds(config_.collective_timeout_s));
  if (!delayed.ok()) return delayed.status();
  absl::StatusOr<std::string> plan = SavePlan();
  if (!plan.ok()) return plan.status();
  ByteWriter out;
  out.PutString(kSnapshotV3);
  absl::StatusOr<std::string> residuals = compression_->Save();
  if (!residuals.ok()) return residuals.status();
  out.PutString(*residuals);
  out.PutString(*delayed);
  out.PutString(*plan);
  return std::move(out.bytes());
}

absl::Status Runtime::RestoreCompressionState(const std::string& snapshot) {
  ByteReader in(snapshot);
  std::string magic, residuals, delayed, plan;
  if (!in.GetString(&magic).ok() || (magic != kSnapshotV3 && magic != kSnapshotV2)) {
    return compression_->Restore(snapshot);
  }
  if (!in.GetString(&residuals).ok() || !in.GetString(&delayed).ok() ||
      (magic == kSnapshotV3 && !in.GetString(&plan).ok())) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": RestoreCompressionState: truncated snapshot"));
  }
  // The plan's part is checked in full before anything is restored.
  std::shared_ptr<RestoredPlan> restored;
  if (!plan.empty()) {
    absl::StatusOr<std::shared_ptr<RestoredPlan>> prepared = PrepareRestore(plan);
    if (!prepared.ok()) return prepared.status();
    restored = *std::move(prepared);
  }
  absl::Status s = delay_line_->Restore(delayed);
  if (s.ok()) s = compression_->Restore(residuals);
  if (!s.ok() || restored == nullptr) return s;
  // The caller returns with the plan in force: an adapter that reads the schedule at the next
  // forward (overlap.torch's staleness correction) must see the restored plan, not the state
  // before it, or the resumed run departs from the saved one.
  absl::MutexLock lock(&mu_);
  markers_.push_back(Marker{-1, incoming_.size(), std::move(restored)});
  Wake();
  const double timeout_s = config_.collective_timeout_s;
  if (mu_.AwaitWithTimeout(absl::Condition(this, &Runtime::RestoreTaken),
                           absl::Seconds(timeout_s)) &&
      fatal_.ok() && !stopped_) {
    return absl::OkStatus();
  }
  const std::string why =
      !fatal_.ok() ? absl::StrCat("the runtime stopped after an error: ", fatal_.message())
      : stopped_   ? std::string("the runtime has shut down")
                   : absl::StrCat("the coordinator did not take the restored plan within ",
                                  timeout_s, " s (OVERLAP_COLLECTIVE_TIMEOUT_S); restore on every "
                                  "rank between the same two steps");
  return absl::FailedPreconditionError(
      absl::StrCat("rank ", rank_, ": RestoreCompressionState: ", why));
}

absl::StatusOr<std::string> Runtime::SavePlan() {
  if (scheduler_ == nullptr) return std::string();  // no scheduled plan can be in force
  absl::MutexLock lock(&mu_);
  plan_save_.reset();
  plan_save_wanted_.store(true, std::memory_order_release);
  Wake();
  const double timeout_s = config_.collective_timeout_s;
  mu_.AwaitWithTimeout(absl::Condition(this, &Runtime::PlanSaveAnswered), absl::Seconds(timeout_s));
  plan_save_wanted_.store(false, std::memory_order_release);
  if (plan_save_.has_value()) {
    absl::StatusOr<std::string> answer = *std::move(plan_save_);
    plan_save_.reset();
    return answer;
  }
  const std::string why =
      !fatal_.ok() ? absl::StrCat("the runtime stopped after an error: ", fatal_.message())
      : stopped_   ? std::string("the runtime has shut down")
                   : absl::StrCat("the scheduled plan's collectives did not finish within ",
                                  timeout_s, " s (OVERLAP_COLLECTIVE_TIMEOUT_S)");
  return absl::FailedPreconditionError(
      absl::StrCat("rank ", rank_, ": SaveCompressionState: ", why));
}

void Runtime::AnswerPlanSave() {
  {
    // A submission (or a restore) not yet taken in belongs to the state too: take it in first.
    absl::MutexLock lock(&mu_);
    if (!incoming_.empty() || !markers_.empty()) return;
  }
  absl::StatusOr<std::string> answer = std::string();  // no scheduled plan in force
  if (scheduled_in_force_ && planned_->frozen()) {
    absl::StatusOr<std::optional<PlanDelays::State>> state = planned_->SaveState();
    if (state.ok() && !state->has_value()) return;  // its buckets still run: ask again
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
  absl::MutexLock lock(&mu_);
  plan_save_ = std::move(answer);
  plan_save_wanted_.store(false, std::memory_order_release);
}

absl::StatusOr<std::shared_ptr<Runtime::RestoredPlan>> Runtime::PrepareRestore(
    absl::string_view bytes) {
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
  {
    absl::MutexLock lock(&mu_);
    for (const PlanEntry& e : plan->entries) {
      if (in_flight_.contains(e.response->name)) {
        return absl::FailedPreconditionError(
            absl::StrCat(what, "'", e.response->name,
                         "' is in flight; restore between steps, once every handle has "
                         "completed"));
      }
    }
  }
  auto restored = std::make_shared<RestoredPlan>();
  restored->plan = *std::move(plan);
  restored->state = std::move(checkpoint->state);
  restored->step_ms = checkpoint->step_ms;
  restored->predicted_step_ms = checkpoint->predicted_step_ms;
  return restored;
}

void Runtime::AdoptRestored(RestoredPlan restored) {
  spdlog::info("overlap: rank {}: resuming the {} plan of a checkpoint at its pass {}", rank_,
               restored.plan.source, restored.state.passes);
  AdoptScheduled(std::move(restored.plan), absl::Milliseconds(restored.step_ms), &restored.state);
  scheduler_->OnRestored(planned_->plan(), restored.predicted_step_ms);
}

}  // namespace overlap
