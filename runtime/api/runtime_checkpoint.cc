// Runtime's checkpoints (SaveCompressionState / RestoreCompressionState, runtime/overlap.h): the
// compression residuals, the delay line's state and the scheduled plan in force with its delayed
// state (runtime/plan/plan_checkpoint.h), as one snapshot.
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/plan/plan_checkpoint.h"
#include "runtime/api/runtime.h"

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
                 : absl::StrCat("the coordinator did not take the restored plan within ", timeout_s,
                                " s (OVERLAP_COLLECTIVE_TIMEOUT_S); restore on every "
                                "rank between the same two steps");
  return absl::FailedPreconditionError(
      absl::StrCat("rank ", rank_, ": RestoreCompressionState: ", why));
}

absl::StatusOr<std::string> Runtime::SavePlan() {
  if (!plan_controller_->schedules()) return std::string();  // no scheduled plan can be in force
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
  std::optional<absl::StatusOr<std::string>> answer = plan_controller_->Save();
  if (!answer.has_value()) return;  // its buckets still run: ask again
  absl::MutexLock lock(&mu_);
  plan_save_ = std::move(answer);
  plan_save_wanted_.store(false, std::memory_order_release);
}

absl::StatusOr<std::shared_ptr<RestoredPlan>> Runtime::PrepareRestore(absl::string_view bytes) {
  absl::StatusOr<std::shared_ptr<RestoredPlan>> restored = plan_controller_->PrepareRestore(bytes);
  if (!restored.ok()) return restored.status();
  absl::MutexLock lock(&mu_);
  for (const PlanEntry& e : (*restored)->plan.entries) {
    if (in_flight_.contains(e.response->name)) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank_, ": RestoreCompressionState: '", e.response->name,
                       "' is in flight; restore between steps, once every handle has completed"));
    }
  }
  return restored;
}

}  // namespace overlap
