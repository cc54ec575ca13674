#include "runtime/api/handle_state.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace overlap {
namespace internal {

absl::Status WaitBound::Expired(int rank, const std::string& what, absl::Duration waited) const {
  return absl::DeadlineExceededError(absl::StrCat(
      "rank ", rank, ": ", what, " did not end within ",
      absl::StrFormat("%.0f", absl::ToDoubleSeconds(waited)),
      " s of this rank's wait: the runtime should",
      " have failed it (a stall after OVERLAP_STALL_TIMEOUT_S=", stall_timeout_s,
      ", a lost peer or stuck collective after OVERLAP_COLLECTIVE_TIMEOUT_S=", collective_timeout_s,
      ") and did not, so the wait gives up (a bug in overlap: please report it with every rank's",
      " log); the operation may still run, so its tensors stay allocated until it ends"));
}

void HandleState::Complete(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (completing_) return;
    completing_ = true;
  }
  // The callback runs before waiters wake, so a returned Wait implies the callback has run.
  if (on_done_) {
    if (observations_ != nullptr) observations_->fetch_add(1);  // before it can submit more
    on_done_(status);
  }
  absl::MutexLock lock(&mu_);
  status_ = std::move(status);
  done_ = true;
  clock_->MarkDone(absl::Now());
}

bool HandleState::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

bool HandleState::Poll() const {
  const bool finished = done();
  if (finished && observations_ != nullptr) observations_->fetch_add(1);
  return finished;
}

void WaitClock::MarkWaited(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (first_wait_ == absl::InfiniteFuture()) first_wait_ = now;
}

void WaitClock::MarkDone(absl::Time now) {
  absl::MutexLock lock(&mu_);
  done_at_ = now;
}

absl::Time WaitClock::first_wait() const {
  absl::MutexLock lock(&mu_);
  return first_wait_;
}

absl::Time WaitClock::done_at() const {
  absl::MutexLock lock(&mu_);
  return done_at_;
}

absl::Status HandleState::Wait(absl::Duration timeout) const {
  clock_->MarkWaited(absl::Now());
  absl::MutexLock lock(&mu_);
  auto is_done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&is_done), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", rank_, ": '", name_, "' has not completed after ", absl::FormatDuration(timeout)));
  }
  if (observations_ != nullptr) observations_->fetch_add(1);
  return status_;
}

absl::Status HandleState::WaitBounded() const {
  const absl::Time start = absl::Now();
  absl::Status s = Wait(wait_bound_.bound());
  if (absl::IsDeadlineExceeded(s) && !done()) {
    return wait_bound_.Expired(rank_, absl::StrCat("operation '", name_, "'"), absl::Now() - start);
  }
  // It ended between the timeout and the check: its own status.
  if (absl::IsDeadlineExceeded(s)) return Wait(absl::ZeroDuration());
  return s;
}

}  // namespace internal

namespace {
const Tensor kEmptyTensor;
const std::vector<int64_t> kNoSplits;
const std::string kNoName;
}  // namespace

bool Handle::Poll() const { return state_ != nullptr && state_->Poll(); }

absl::Status Handle::Wait(absl::Duration timeout) const {
  if (state_ == nullptr) return absl::FailedPreconditionError("Wait on an empty handle");
  return state_->Wait(timeout);
}

absl::Status Handle::Wait() const {
  if (state_ == nullptr) return absl::FailedPreconditionError("Wait on an empty handle");
  return state_->WaitBounded();
}

const Tensor& Handle::output() const {
  return state_ != nullptr && state_->done() ? state_->output() : kEmptyTensor;
}

const std::vector<int64_t>& Handle::received_splits() const {
  return state_ != nullptr && state_->done() ? state_->received_splits() : kNoSplits;
}

bool Handle::has_update() const { return state_ == nullptr || state_->has_update(); }

const std::string& Handle::name() const { return state_ != nullptr ? state_->name() : kNoName; }

}  // namespace overlap
