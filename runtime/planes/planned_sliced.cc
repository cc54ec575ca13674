// PlannedMode's sliced buckets (runtime/planes/planned_mode.h): handing them to the bucket runner
// of their device, folding a delayed plan's buckets off their period into residuals, finishing
// them, and a delayed plan's copies, deliveries and checkpoints (runtime/planes/plan_delays.h).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "runtime/planes/device_backend.h"
#include "runtime/planes/planned_mode.h"

namespace overlap {

absl::StatusOr<std::optional<PlanDelays::State>> PlannedMode::SaveState() const {
  if (!frozen_) return absl::FailedPreconditionError("no plan is in force");
  if (!launches_.empty()) return std::nullopt;  // its buckets are still running
  std::vector<std::string> submitted;
  for (const auto& [entry, op] : waiting_) submitted.push_back(QuotedName(entry));
  for (const auto& [entry, active] : active_) submitted.push_back(QuotedName(entry));
  if (!submitted.empty() || next_bucket_ != 0) {
    std::sort(submitted.begin(), submitted.end());
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan is in the middle of a step (bucket ", next_bucket_, " of ", plan_->buckets.size(),
        " is next",
        submitted.empty()
            ? ""
            : absl::StrCat("; ", absl::StrJoin(submitted, ", "), " submitted and waiting for it"),
        "); save between steps, once every handle of the step has completed"));
  }
  if (delays_ == nullptr) {
    PlanDelays::State state;
    state.passes = pass_;
    state.residuals.resize(plan_->buckets.size());
    return std::optional<PlanDelays::State>(std::move(state));
  }
  // Copies still in line, or results in that Progress has not delivered yet: all will be soon.
  if (!delayed_drained() || delays_->parked() > 0 || !delivering_.empty()) return std::nullopt;
  absl::StatusOr<PlanDelays::State> state = delays_->Save();
  if (!state.ok()) return state.status();
  return std::optional<PlanDelays::State>(*std::move(state));
}

void PlannedMode::Resume(ExecutablePlan plan, PlanDelays::State state, absl::Duration step_time) {
  Freeze(std::move(plan), {}, step_time);
  pass_ = state.passes;
  if (delays_ != nullptr) {
    absl::Status restored = delays_->Restore(std::move(state));
    if (!restored.ok()) {
      // A checkpoint that cannot be put back would not repeat the saved run: the job stops.
      stalled_ =
          absl::Status(restored.code(),
                       absl::StrCat("rank ", rank_,
                                    ": restoring the delayed plan's state: ", restored.message()));
    }
  }
  UpdateHeldBytes();
}

void PlannedMode::Feed(int entry) {
  auto line = backlog_.find(entry);
  if (line == backlog_.end() || line->second.empty()) return;
  if (waiting_.contains(entry) || active_.contains(entry)) return;
  waiting_.emplace(entry, std::move(line->second.front()));
  line->second.pop_front();
}

void PlannedMode::Deliver() {
  deliver_due_ = false;
  if (delays_ == nullptr) return;
  Delivering device;
  for (PendingOp& op : delays_->TakeDeliverable()) {
    if (op.request.device == DeviceKind::kCuda) {
      device.ops.push_back(std::move(op));
    } else {
      complete_(op, absl::OkStatus());
    }
  }
  absl::Status queued = delays_->TakeDeviceError();
  if (!device.ops.empty() && queued.ok()) {
    // CUDA results were copied out on the delay line's stream: complete once that is done.
    device.reads = delays_->TakeReads();
    absl::StatusOr<std::unique_ptr<Work>> fence = delay_ops_->Fence();
    if (fence.ok()) {
      device.fence = *std::move(fence);
      delivering_.push_back(std::move(device));
      UpdateHeldBytes();
      return;
    }
    queued = fence.status();
  }
  if (!queued.ok()) {
    stalled_ = absl::Status(
        queued.code(),
        absl::StrCat("rank ", rank_, ": delivering delayed CUDA results: ", queued.message()));
    for (PendingOp& op : device.ops) complete_(op, stalled_);
  }
  UpdateHeldBytes();
}

absl::Status PlannedMode::ProgressDelivering() {
  while (!delivering_.empty()) {
    absl::StatusOr<bool> done = delivering_.front().fence->Test();
    if (done.ok() && !*done) return absl::OkStatus();
    Delivering d = std::move(delivering_.front());
    delivering_.pop_front();
    absl::Status status =
        done.ok() ? absl::OkStatus()
                  : absl::Status(done.status().code(),
                                 absl::StrCat("rank ", rank_, ": delivering delayed CUDA results: ",
                                              done.status().message()));
    for (PendingOp& op : d.ops) complete_(op, status);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

void PlannedMode::UpdateHeldBytes() {
  delayed_bytes_.store(delays_ != nullptr ? delays_->held_bytes() : 0, std::memory_order_relaxed);
  delayed_device_bytes_.store(delays_ != nullptr ? delays_->held_device_bytes() : 0,
                              std::memory_order_relaxed);
  device_buffer_bytes_.store(device_runner_ != nullptr ? device_runner_->held_bytes() : 0,
                             std::memory_order_relaxed);
  buffer_bytes_.store(
      host_runner_->held_bytes() + (delays_ != nullptr ? delays_->pooled_bytes() : 0),
      std::memory_order_relaxed);
}

void PlannedMode::MakeDeviceRunner() {
  if (device_runner_ != nullptr || cuda_plane_->executor() == nullptr) return;
  absl::StatusOr<std::unique_ptr<BucketRunner>> runner = BucketRunner::Create(
      cuda_plane_->executor(), cuda_plane_->device(), rank_, size_, timeline_,
      absl::Seconds(config_.collective_timeout_s + config_.stall_timeout_s), compression_);
  if (runner.ok()) {
    device_runner_ = *std::move(runner);
  } else {
    device_runner_error_ = runner.status();
  }
}

BucketRunner* PlannedMode::RunnerFor(const ExecutablePlan& plan, int bucket) {
  const ExecSlice& first = plan.buckets[static_cast<size_t>(bucket)].slices.front();
  const bool cuda =
      plan.entries[static_cast<size_t>(first.entry)].response->request.device == DeviceKind::kCuda;
  return cuda ? device_runner_.get() : host_runner_.get();
}

absl::Status PlannedMode::LaunchSliced(Launch* launch) {
  const ExecutablePlan& plan = *launch->plan;
  const ExecBucket& bucket = plan.buckets[static_cast<size_t>(launch->bucket)];
  launch->job = BucketRunner::NewJob(&plan, launch->bucket);
  BucketJob* job = launch->job.get();
  const bool current_delayed = delays_ != nullptr && launch->plan == plan_;
  if (current_delayed && !delays_->Due(launch->bucket, launch->pass)) {
    // Off its period: this pass's slices wait in the residual; the check still runs.
    std::vector<const PendingOp*> inputs;
    for (const ExecSlice& s : bucket.slices) {
      auto a = active_.find(s.entry);
      inputs.push_back(a != active_.end() && !a->second.diverged_here ? &a->second.op : nullptr);
    }
    absl::Status folded = delays_->Fold(launch->bucket, inputs);
    if (!folded.ok()) {
      return absl::Status(
          folded.code(),
          absl::StrCat("rank ", rank_, ": folding plan bucket ", launch->bucket, " (",
                       UnitNames(launch->responses), ") into its residual: ", folded.message()));
    }
    job->skipped = true;
    job->done = true;
    return absl::OkStatus();
  }
  BucketInput input;
  for (const ExecSlice& s : bucket.slices) {
    auto a = active_.find(s.entry);
    input.sources.push_back(BucketInput::Source{
        a != active_.end() && !a->second.diverged_here ? &a->second.op : nullptr});
  }
  // One whole tensor alone, not prescaled: reduced in the user's buffer, as the data plane does
  // for large tensors (nothing else of it can be pending, so no partial result is exposed). Not
  // under a delayed plan: its results are kept per pass, apart from the tensors.
  const ExecSlice& only = bucket.slices.front();
  const PendingOp* op = input.sources.front().op;
  input.in_place = delays_ == nullptr && bucket.compression == "none" &&
                   bucket.slices.size() == 1 && job->kind == BucketKind::kAllreduce &&
                   plan.buckets_of[static_cast<size_t>(only.entry)].size() == 1 && op != nullptr &&
                   op->request.prescale == 1.0 && only.offset == 0 &&
                   only.count == op->request.tensors[0].NumElements();
  if (current_delayed) {
    input.drain = [this, b = launch->bucket](uint8_t* packed, BufferOps& ops) {
      return delays_->DrainResidual(b, packed, ops);
    };
  }
  BucketRunner* runner = RunnerFor(plan, launch->bucket);
  if (runner == nullptr) {
    // Every rank set the CUDA plane up at the same freeze, and it failed on every rank alike.
    absl::Status cause = device_runner_error_;
    if (cause.ok() && cuda_plane_ != nullptr) cause = cuda_plane_->SetUpOnce();
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_, ": the plan's CUDA tensors (", UnitNames(launch->responses),
        ") cannot run: ",
        cuda_plane_ == nullptr ? absl::string_view("this planned executor has no CUDA plane")
                               : cause.message()));
  }
  absl::Status started = runner->Start(job, input);
  UpdateHeldBytes();
  return started;
}

void PlannedMode::FinishDelayed(Launch* launch, std::vector<PendingOp>* renegotiate) {
  const ExecutablePlan& plan = *launch->plan;
  const bool diverged =
      std::find(launch->diverged.begin(), launch->diverged.end(), true) != launch->diverged.end();
  // A diverged bucket's result is never delivered: the plan is dropped right after this.
  if (!launch->job->skipped && !diverged) {
    delays_->Store(launch->bucket, launch->pass, std::move(launch->job->buffer));
  }
  for (size_t i = 0; i < launch->members.size(); ++i) {
    const int entry = launch->members[i];
    if (plan.buckets_of[static_cast<size_t>(entry)].back() != launch->bucket) continue;
    auto a = active_.find(entry);
    if (a == active_.end()) continue;  // joined here
    ActiveEntry active = std::move(a->second);
    active_.erase(a);
    delays_->Retire(active.op);
    if (launch->diverged[i] || active.diverged_here) {
      std::optional<PendingOp> parked = delays_->TakeParked(entry, active.op.plan_pass);
      if (parked.has_value()) renegotiate->push_back(std::move(*parked));
    }
    Feed(entry);
  }
  deliver_due_ = true;
}

void PlannedMode::FinishSliced(Launch* launch, std::vector<PendingOp>* renegotiate) {
  if (delays_ != nullptr && launch->plan == plan_) {
    FinishDelayed(launch, renegotiate);
    return;
  }
  const ExecutablePlan& plan = *launch->plan;
  BucketRunner* runner = RunnerFor(plan, launch->bucket);
  // Where this bucket's reduced values are, for the tensors still here.
  const std::vector<ExecSlice>& slices = plan.buckets[static_cast<size_t>(launch->bucket)].slices;
  std::vector<ReducedPiece> pieces = runner->Pieces(*launch->job);
  for (size_t i = 0; i < slices.size() && !launch->job->skipped; ++i) {
    auto a = active_.find(slices[i].entry);
    if (a != active_.end()) a->second.pieces.push_back(std::move(pieces[i]));
  }
  launch->job.reset();  // the pieces hold its buffer
  for (size_t i = 0; i < launch->members.size(); ++i) {
    const int entry = launch->members[i];
    if (plan.buckets_of[static_cast<size_t>(entry)].back() != launch->bucket) continue;
    auto a = active_.find(entry);
    if (a == active_.end()) continue;  // joined here, or sent back to negotiation meanwhile
    ActiveEntry active = std::move(a->second);
    active_.erase(a);
    PendingOp& op = active.op;
    if (op.plan_pass >= 0) continue;  // a dropped delayed plan's copy: its original went back
    if (launch->diverged[i] || active.diverged_here) {
      renegotiate->push_back(std::move(op));
      continue;
    }
    // Every slice is in: copy the averaged values out.
    runner->Deliver(std::move(op), std::move(active.pieces), complete_);
  }
}

}  // namespace overlap
