#include "runtime/api/runtime.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "collectives/buffer_ops.h"
#include "collectives/mpi_wait.h"
#include "runtime/api/validation.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

constexpr absl::Duration kSpinAfterActivity = absl::Microseconds(300);
constexpr absl::Duration kSpinBeforeNap = absl::Milliseconds(1);
// The nap, which control_plane's poll() rounds to the millisecond anyway. Until 2026-12-05 this
// said 100 us and every nap measured was in fact 1 ms; with poll() made to sleep a true 100 us
// (ppoll) the naps came out slower: TensorFlow's emulated bert-base 729 against 700 ms a step,
// the LM's 30-bucket plan 171 against 159 ms (docs/tuning.md, "Coordinator wait").
constexpr absl::Duration kNapInFlight = absl::Milliseconds(1);
// How often a started planned unit asks which ranks have started it while another rank shuts
// down.
constexpr absl::Duration kShutdownProbe = absl::Milliseconds(50);
// A Shutdown that drains a delayed plan for longer than this says what it is waiting for.
constexpr absl::Duration kDrainWarning = absl::Seconds(5);

}  // namespace

absl::Status Runtime::Scoped(const absl::Status& status) const {
  if (status.ok() || scope_.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(scope_, status.message()));
}

Runtime::~Runtime() {
  if (thread_.joinable()) (void)Shutdown();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Runtime::DrawPhase(StepPhase phase, absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    if (phase_start_ < now) timeline_.Span("compute", StepPhaseName(phase_), phase_start_, now);
    phase_ = phase;
    phase_start_ = now;
  }
  if (phase != StepPhase::kForward) return;
  std::shared_ptr<const std::vector<sched::SimEvent>> predicted =
      plan_controller_->predicted_step();
  if (predicted == nullptr) return;
  for (const sched::SimEvent& e : *predicted) {
    timeline_.Predicted(e.lane, e.name, now + absl::Milliseconds(e.start_ms),
                        now + absl::Milliseconds(e.end_ms));
  }
}

absl::Status Runtime::NoteUpdateTime(double ms) {
  if (!std::isfinite(ms) || ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_,
                     ": NoteUpdateTime: the optimizer's time must be a finite number of "
                     "milliseconds >= 0, got ",
                     ms));
  }
  profiler_->OnUpdateTime(ms);
  counters_.updates_noted.fetch_add(1, std::memory_order_relaxed);
  counters_.update_ns_noted.fetch_add(static_cast<int64_t>(std::min(ms, 1e9) * 1e6),
                                      std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status Runtime::MarkPhase(StepPhase phase) {
  const absl::Time now = absl::Now();
  if (timeline_.enabled()) DrawPhase(phase, now);
  const int64_t step = profiler_->OnPhase(phase, now);
  if (phase != StepPhase::kForward) return absl::OkStatus();
  comm_meter_->OnForward();
  if (measures_comm_ratio_.load()) {
    absl::Status agreed = AgreeCommRatio(step);
    if (!agreed.ok()) return agreed;
  }
  plan_controller_->SetStep(step);
  if (!plan_controller_->schedules()) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    if (!fatal_.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank_, ": step ", step,
                       ": the runtime stopped after an error: ", fatal_.message()));
    }
    markers_.push_back(Marker{step, incoming_.size(), nullptr});
  }
  if (coordinator_sleeping_.load()) Wake();
  return absl::OkStatus();
}

RuntimeStats Runtime::stats() const {
  RuntimeStats stats;
  stats.negotiation_rounds = counters_.rounds.load();
  stats.negotiated_operations = counters_.negotiated.load();
  stats.delayed_bytes = (delay_line_ != nullptr ? delay_line_->held_bytes() : 0) +
                        (planned_ != nullptr ? planned_->delayed_bytes() : 0);
  stats.plan_buffer_bytes = planned_ != nullptr ? planned_->buffer_bytes() : 0;
  stats.plan_device_buffer_bytes = planned_ != nullptr ? planned_->device_buffer_bytes() : 0;
  stats.delayed_device_bytes = planned_ != nullptr ? planned_->delayed_device_bytes() : 0;
  stats.planned_launches = counters_.launches.load();
  plan_controller_->AddStats(&stats);
  {
    absl::MutexLock lock(&mu_);
    stats.cuda_executor = cuda_executor_;
    stats.link_rates = link_rates_;
  }
  stats.link_probes = link_counters_.probes.load();
  stats.weighted_allreduces = link_counters_.weighted.load();
  stats.hierarchy_hosts = hierarchy_hosts_;
  stats.comm_compute_ratio = agreed_comm_ratio_.load();
  stats.update_times_noted = counters_.updates_noted.load(std::memory_order_relaxed);
  stats.update_ms_noted = 1e-6 * static_cast<double>(counters_.update_ns_noted.load());
  return stats;
}

void Runtime::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

absl::StatusOr<Handle> Runtime::Submit(PendingOp op, DoneCallback on_done) {
  absl::StatusOr<Handle> handle = Enqueue(std::move(op), std::move(on_done));
  if (!handle.ok()) return Scoped(handle.status());
  return handle;
}

absl::StatusOr<Handle> Runtime::Enqueue(PendingOp op, DoneCallback on_done) {
  if (op.request.kind == OpKind::kAllreduce) {
    // The process-wide default applies where it can (float32 gradients being summed or
    // averaged, like Horovod's compression); asking for it explicitly elsewhere is an error.
    const bool compressible =
        !op.inputs.empty() && op.inputs[0].dtype == DataType::kFloat32 &&
        (op.request.op == ReduceOp::kSum || op.request.op == ReduceOp::kAverage);
    const std::string& fallback = compressible ? config_.compression : std::string("none");
    absl::StatusOr<std::string> compression = CompressionStage::Canonical(
        op.request.compression.empty() ? fallback : op.request.compression);
    if (!compression.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank_, ": allreduce '", op.request.name, "': ", compression.status().message()));
    }
    op.request.compression = *compression;
    if (CompressionStage::NeedsMeasurement(*compression)) {
      absl::StatusOr<std::string> resolved = ResolveDerived(*compression);
      if (!resolved.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank ", rank_, ": allreduce '", op.request.name, "': ", resolved.status().message()));
      }
      op.request.compression = *resolved;
    }
  }
  absl::Status valid = ValidateOp(op, size_);
  if (valid.ok() && !op.inputs.empty() && op.inputs[0].device.is_cuda()) {
    valid = ClaimCudaDevice(op);
  }
  if (!valid.ok()) {
    return absl::Status(valid.code(), absl::StrCat("rank ", rank_, ": ", valid.message()));
  }
  if (!op.inputs.empty()) op.request.device = op.inputs[0].device.kind;
  const std::string& name = op.request.name;
  auto state = std::make_shared<internal::HandleState>(name, rank_, std::move(on_done),
                                                       observations_, wait_bound());
  // Scheduled plans cover float32 gradients being summed or averaged, one tensor each, on the
  // host or the GPU (the bucket runner and the delay line serve both), with the default
  // compression where a plan can run it (CompressionStage::Plannable), else uncompressed; the
  // others are negotiated beside the plan. Without a scheduler, the compressed ones are profiled
  // too when covap's R=auto needs the compute time (their waits are not compute).
  const bool gradient = op.request.kind == OpKind::kAllreduce &&
                        op.request.update_schedule.empty() && op.request.tensors.size() == 1 &&
                        op.request.tensors[0].dtype == DataType::kFloat32 &&
                        (op.request.op == ReduceOp::kSum || op.request.op == ReduceOp::kAverage);
  if (gradient && (plan_controller_->schedules() ? op.request.compression == plan_compression_
                                                 : measures_comm_ratio_.load())) {
    // The clock, not the handle: the program may free its handle as soon as it has waited.
    profiler_->OnSubmit(
        name, op.request.tensors[0].NumElements() * 4, DataType::kFloat32,
        [clock = state->clock()] {
          return StepProfiler::WaitTimes{clock->first_wait(), clock->done_at()};
        },
        absl::Now(), op.request.plan_may_delay, op.request.device == DeviceKind::kCuda,
        op.looks_ahead);
  }
  {
    absl::MutexLock lock(&mu_);
    const std::string what =
        absl::StrCat("rank ", rank_, ": ", OpKindName(op.request.kind), " '", name, "'");
    if (!fatal_.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the runtime stopped after an error: ", fatal_.message()));
    }
    if (shutdown_requested_) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": submitted after Shutdown"));
    }
    if (in_flight_.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what,
                       ": a tensor with this name is already in flight; wait for its handle before "
                       "submitting the name again"));
    }
    if (joined_) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": submitted after Join on this rank; wait for the Join handle first"));
    }
    if (op.request.kind == OpKind::kJoin) joined_ = true;
    in_flight_.insert(name);
    op.handle = state;
    op.enqueued = absl::Now();
    op.observed = op.independent_of_results ? last_submission_observed_ : observations_->load();
    last_submission_observed_ = op.observed;
    incoming_.push_back(std::move(op));
  }
  // A coordinator that is spinning looks at incoming_ anyway; only a sleeping one needs waking.
  if (coordinator_sleeping_.load()) Wake();
  return Handle(state);
}

void Runtime::CompleteOp(PendingOp& op, const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    in_flight_.erase(op.request.name);
    if (op.request.kind == OpKind::kJoin) joined_ = false;
  }
  op.handle->Complete(Scoped(status));
  completions_.fetch_add(1, std::memory_order_relaxed);
}

absl::Status Runtime::ReadControl(absl::Duration timeout, bool local) {
  // Only the loop's own wait consumes the eventfd: it looks at the submission queue right after.
  absl::StatusOr<ControlEvents> events = control_->Wait(timeout, local ? wake_fd_ : -1);
  if (!events.ok()) return events.status();
  if (events->local_ready) {
    uint64_t count;
    (void)!read(wake_fd_, &count, sizeof(count));
  }
  rounds_owed_ += events->rounds_announced;
  peers_asked_ += events->round_requests;
  // A request read here (also from inside a round, through the negotiator's peer check) starts
  // the cycle at once; otherwise rank 0 would sleep until its next timer with the request
  // already taken off the socket.
  if (peers_asked_ > 0 && loop_.round_wanted == absl::InfiniteFuture()) {
    loop_.round_wanted = absl::Now();
  }
  return absl::OkStatus();
}

absl::Status Runtime::ClaimCudaDevice(const PendingOp& op) {
  const int device = op.inputs[0].device.index;
  int expected = -1;
  if (cuda_device_.compare_exchange_strong(expected, device) || expected == device) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      OpKindName(op.request.kind), " '", op.request.name, "': tensor on cuda:", device,
      ", but this process's collectives run on cuda:", expected,
      " (its first CUDA tensor's device); every CUDA tensor of a rank must be on one GPU"));
}

void Runtime::Fatal(const absl::Status& status) {
  spdlog::error("overlap: {}", std::string(status.message()));
  std::deque<PendingOp> incoming;
  {
    absl::MutexLock lock(&mu_);
    fatal_ = status;
    incoming.swap(incoming_);
  }
  for (PendingOp& op : incoming) CompleteOp(op, status);
  for (auto& [name, op] : pending_) CompleteOp(op, status);
  pending_.clear();
  data_plane_->FailAll(status);
  cuda_plane_->FailAll(status);
  // After the handles complete: ncclCommAbort stops kernels waiting on a dead peer at once, but
  // frees device memory, which waits for every other stream of the device; the program must
  // learn of the failure even when one of those is what is stuck.
  for (PendingOp& op : planned_->FailAll(status)) CompleteOp(op, status);
  cuda_plane_->Abort();
  planned_->AbortCuda();
  control_.reset();  // closing our sockets tells the peers at once
}

// Runs the rounds rank 0 has announced. Returns false after a fatal error.
bool Runtime::RunRounds() {
  while (rounds_owed_ > 0) {
    --rounds_owed_;
    const bool joined = pending_.contains("__join");
    bool shutting_down = loop_.shutdown_announced;
    // A delayed plan's last buckets run after the program stopped waiting: finish them first.
    if (shutting_down && !planned_->delayed_drained()) {
      shutting_down = false;
      if (!loop_.shutdown_held) loop_.shutdown_held_warn = absl::Now() + kDrainWarning;
      loop_.shutdown_held = true;
    }
    const absl::Time start = absl::Now();
    const PlanVote vote = plan_controller_->Vote(loop_.plan_report, shutting_down);
    loop_.plan_report = false;
    absl::StatusOr<RoundResult> round =
        negotiator_->RunRound(&pending_, joined, shutting_down, vote);
    if (!round.ok()) {
      Fatal(round.status());
      return false;
    }
    const absl::Time now = absl::Now();
    counters_.rounds.fetch_add(1, std::memory_order_relaxed);
    counters_.negotiated.fetch_add(static_cast<int64_t>(round->ready.size() + round->failed.size()),
                                   std::memory_order_relaxed);
    timeline_.Span("negotiation rounds", "ROUND", start, now);
    for (auto& [op, error] : round->failed) {
      CompleteOp(op, absl::FailedPreconditionError(absl::StrCat("rank ", rank_, ": ", error)));
    }
    if (timeline_.enabled()) {
      for (const ReadyOp& r : round->ready) {
        if (r.op.has_value()) timeline_.Span(r.response->name, "NEGOTIATE", r.op->enqueued, now);
      }
    }
    const std::optional<LearnedStep> learned = plan_controller_->Learn(&*round);
    auto [host, cuda] = SplitByDevice(std::move(round->ready));
    data_plane_->Submit(std::move(host));
    if (!cuda.empty()) {
      cuda_plane_->Submit(std::move(cuda));
      absl::MutexLock lock(&mu_);
      cuda_executor_ = cuda_plane_->executor_name();
    }
    // Evicted requests go out whole in the next round, which this rank must ask for itself.
    if (round->resend) loop_.resend = true;
    absl::Status planned = plan_controller_->OnRound(*round, learned, &pending_);
    NoteHandedBack();
    if (!planned.ok()) {
      Fatal(planned);
      return false;
    }
    if (!round->launch_counts.empty()) {
      planned_->OnReport(round->launch_counts, round->starts_nothing_more);
    }
    // A rank that shut down may still finish its last units; ask until it has or says it never
    // will (its vote's starts_nothing_more), instead of waiting for the stall warning's probe.
    if (round->any_shutting_down) planned_->ProbeWithin(kShutdownProbe);
    if (round->all_shutting_down && !stopping_ && !round->agreed_launches.has_value() &&
        !planned_->idle()) {
      Fatal(absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_, ": Shutdown: planned allreduce of ", planned_->DescribeStarted(),
          " was started on this rank, but not every rank submitted it before Shutdown")));
      return false;
    }
    // A rank that called Shutdown drained its delayed plan first, so it will start no bucket
    // again: one this rank has yet to start was never started there. The ranks ran different
    // numbers of steps; say so now instead of waiting out OVERLAP_COLLECTIVE_TIMEOUT_S.
    if (round->any_shutting_down && loop_.shutdown_held && planned_->HasUnstartedBuckets()) {
      Fatal(absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_,
          ": Shutdown: another rank has shut down with nothing of the delayed plan "
          "left to run, but this rank submitted more steps than it did (",
          planned_->DescribeDrain(), "): every rank must run the same number of steps")));
      return false;
    }
    if (round->all_shutting_down && !stopping_) {
      stopping_ = true;
      control_->ExpectClose();
    }
  }
  return true;
}

void Runtime::Renegotiate(std::vector<PendingOp> ops) {
  if (ReturnToNegotiation(std::move(ops), &pending_)) loop_.resend = true;
}

bool Runtime::Quiescent() const {
  return pending_.empty() && rounds_owed_ == 0 && PlanesIdle() && planned_->quiescent();
}

bool Runtime::TakeIncoming() {
  bool dirty = false;
  bool shutting_down;
  {
    absl::MutexLock lock(&mu_);
    // Operations up to the next forward marker; a marker may start a scheduler stage, which holds
    // the operations after it until every rank has voted.
    while (!incoming_.empty() || !markers_.empty()) {
      if (plan_controller_->busy()) break;
      if (!markers_.empty() && markers_.front().before == 0) {
        Marker marker = std::move(markers_.front());
        markers_.pop_front();
        if (marker.restore != nullptr) {
          plan_controller_->AdoptRestored(std::move(*marker.restore), &pending_);
          NoteHandedBack();
        } else {
          plan_controller_->OnStep(marker.step);
        }
        continue;
      }
      const size_t take = markers_.empty() ? incoming_.size() : markers_.front().before;
      for (size_t i = 0; i < take; ++i) {
        PendingOp& op = incoming_.front();
        loop_.last_activity = absl::Now();
        if (plan_controller_->Owns(op.request.name)) {
          planned_->Add(std::move(op));
        } else {
          std::string name = op.request.name;
          pending_.emplace(std::move(name), std::move(op));
          dirty = true;
        }
        incoming_.pop_front();
      }
      for (Marker& m : markers_) m.before -= take;
    }
    shutting_down = shutdown_requested_;
    // Announced only once nothing submitted before Shutdown is left behind in incoming_: the
    // others fail what this rank has not submitted by then.
    if (shutting_down && incoming_.empty() && !loop_.shutdown_announced) {
      loop_.shutdown_announced = true;
      dirty = true;  // the flag must reach the others in a round
    }
  }
  planned_->SetJoined(pending_.contains("__join"));
  if (loop_.resend) {
    loop_.resend = false;
    dirty = true;
  }
  if (shutting_down && loop_.shutdown_deadline == absl::InfiniteFuture()) {
    spdlog::debug("overlap: rank {}: Shutdown called; the plan: {}", rank_,
                  planned_->DescribeDrain());
    loop_.shutdown_deadline = absl::Now() + absl::Seconds(config_.collective_timeout_s);
  }
  return dirty;
}

absl::Status Runtime::TriggerRounds(bool dirty) {
  if (rank_ != 0) {
    if (!dirty || loop_.asked) return absl::OkStatus();
    loop_.asked = true;
    return control_->RequestRound();
  }
  // An operation becomes ready when its last rank submits it, so a round started by the first
  // submitter is usually wasted. Rank 0 starts one when every rank has asked, or a cycle after
  // the first asked, whichever is sooner (Horovod's cycle time, cut short when nobody is left to
  // wait for); stall checks and shutdown do not wait.
  loop_.own_work = loop_.own_work || dirty;
  const absl::Time now = absl::Now();
  if ((loop_.own_work || peers_asked_ > 0) && loop_.round_wanted == absl::InfiniteFuture()) {
    loop_.round_wanted = now;
  }
  const bool everyone = peers_asked_ + (loop_.own_work ? 1 : 0) >= size_;
  const bool shutting_down = loop_.shutdown_deadline != absl::InfiniteFuture();
  const bool urgent = negotiator_->NextStallCheck() <= now || (shutting_down && dirty);
  if (!everyone && !urgent && now - loop_.round_wanted < Cycle()) return absl::OkStatus();
  // Not while a scheduler vote that may lead to blocking collectives is out: the round waits for
  // it (PlanScheduler::holds_rounds).
  if (plan_controller_->holds_rounds()) return absl::OkStatus();
  ++rounds_owed_;
  peers_asked_ = 0;
  loop_.own_work = false;
  loop_.round_wanted = absl::InfiniteFuture();
  return control_->AnnounceRound();
}

absl::Duration Runtime::IdleTimeout() const {
  // Right after activity we keep looking for a short while: training submits in bursts, and a
  // wake-up from poll() costs a context switch on every rank that the next submission would
  // otherwise pay. While collectives are in flight MPI needs our calls to make progress.
  const absl::Time now = absl::Now();
  if (rounds_owed_ > 0 || loop_.resend || plan_controller_->busy() || plan_save_wanted_.load()) {
    return absl::ZeroDuration();
  }
  if (!PlanesIdle() || !planned_->idle()) {
    // Nothing finished for a while: a long collective. Where ranks outnumber cores, spinning
    // on MPI takes the core compute needs (runtime/control/host_load.h).
    if (may_nap_ && now - loop_.last_progress > kSpinBeforeNap &&
        (nap_always_ || host_load_.Oversubscribed(now))) {
      return kNapInFlight;
    }
    return absl::ZeroDuration();
  }
  if (now - loop_.last_activity < kSpinAfterActivity) return absl::ZeroDuration();
  // Otherwise no timer but the stall inspector's, the plan's, the cycle, the shutdown deadline and
  // the warning of a long shutdown drain.
  absl::Time next =
      std::min({loop_.shutdown_deadline, loop_.shutdown_held_warn, planned_->NextDeadline()});
  if (rank_ == 0) {
    next = std::min({next, negotiator_->NextStallCheck(), loop_.round_wanted + Cycle()});
  }
  if (next == absl::InfiniteFuture()) return absl::InfiniteDuration();
  return std::max(absl::ZeroDuration(), next - now);
}

void Runtime::Loop() {
  while (true) {
    if (abort_requested_.load(std::memory_order_acquire)) {
      absl::Status abort_reason;
      {
        absl::MutexLock lock(&mu_);
        abort_reason = abort_reason_;
      }
      Fatal(abort_reason);
      return;
    }
    const bool dirty = TakeIncoming();
    absl::Status s = TriggerRounds(dirty);
    if (s.ok() && rounds_owed_ > 0) {
      loop_.asked = false;
      if (!RunRounds()) return;
    }
    if (dirty || !PlanesIdle() || !planned_->idle()) loop_.last_activity = absl::Now();
    const uint64_t completions = completions_.load(std::memory_order_relaxed);
    if (dirty || completions != loop_.completions_seen) {
      loop_.completions_seen = completions;
      loop_.last_progress = absl::Now();
    }
    // Many cheap MPI_Test calls per syscall: MPI moves large messages a fragment per call.
    std::vector<PendingOp> renegotiate;
    for (int i = 0; i < 64 && s.ok(); ++i) {
      if (!data_plane_->idle()) s = data_plane_->Progress();
      if (s.ok() && !cuda_plane_->idle()) s = cuda_plane_->Progress();
      if (s.ok()) s = planned_->Progress(&renegotiate);
      if (PlanesIdle() && planned_->idle()) break;
    }
    Renegotiate(std::move(renegotiate));
    if (s.ok() && plan_controller_->schedules()) {
      s = plan_controller_->ProgressSchedule(Quiescent(), &pending_);
      NoteHandedBack();
      if (plan_controller_->TakeRoundWish()) loop_.resend = true;
    }
    if (s.ok() && plan_save_wanted_.load(std::memory_order_acquire)) AnswerPlanSave();
    counters_.launches.store(static_cast<int64_t>(planned_->launches()), std::memory_order_relaxed);
    plan_controller_->DropIfDiverged(&pending_);
    NoteHandedBack();
    if (planned_->TakeUnfreezeWish()) loop_.resend = true;  // asks for a round to drop the plan
    if (planned_->TakeReportWish()) loop_.plan_report = loop_.resend = true;
    if (loop_.shutdown_held && planned_->delayed_drained()) {
      loop_.shutdown_held = false;
      loop_.shutdown_held_warn = absl::InfiniteFuture();
      loop_.resend = true;  // a round carries the shutdown flag held back while draining
    } else if (loop_.shutdown_held && absl::Now() > loop_.shutdown_held_warn) {
      loop_.shutdown_held_warn = absl::InfiniteFuture();  // once
      spdlog::warn(
          "overlap: rank {}: Shutdown has waited {} s for the delayed plan's last buckets "
          "(it fails after OVERLAP_COLLECTIVE_TIMEOUT_S={}): {}",
          rank_, absl::ToDoubleSeconds(kDrainWarning), config_.collective_timeout_s,
          planned_->DescribeDrain());
    }
    if (s.ok() && stopping_ && PlanesIdle() && planned_->idle()) break;
    if (s.ok() && !stopping_ && absl::Now() > loop_.shutdown_deadline) {
      s = absl::DeadlineExceededError(
          absl::StrCat("rank ", rank_, ": Shutdown: not every rank called Shutdown within ",
                       config_.collective_timeout_s, " s (OVERLAP_COLLECTIVE_TIMEOUT_S)"));
    }
    absl::Duration timeout = IdleTimeout();
    if (timeout != absl::ZeroDuration()) {
      // Announce the sleep before the last look at incoming_: a submission after that look sees
      // the flag and writes the eventfd (the mutex orders the two).
      coordinator_sleeping_.store(true);
      absl::MutexLock lock(&mu_);
      if (!incoming_.empty() || shutdown_requested_ || abort_requested_.load()) {
        timeout = absl::ZeroDuration();
      }
    }
    if (s.ok()) s = ReadControl(timeout, /*local=*/true);
    coordinator_sleeping_.store(false);
    if (!s.ok()) {
      Fatal(s);
      return;
    }
    // MPI's non-blocking collectives advance only inside MPI calls, so while ours are in
    // flight we keep calling it, yielding the core between calls as MPI's own blocking
    // collectives do when ranks outnumber cores.
    if (timeout == absl::ZeroDuration() && rounds_owed_ == 0) sched_yield();
  }
  // Every rank agreed to stop and our collectives are done.
  Renegotiate(planned_->Unfreeze(PlannedMode::UnfreezeCause::kShutdown));
  for (auto& [name, op] : pending_) {
    CompleteOp(op, absl::AbortedError(absl::StrCat(
                       "rank ", rank_, ": the runtime shut down before every rank submitted '",
                       name, "'")));
  }
  pending_.clear();
}

void Runtime::Abort(const absl::Status& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    abort_reason_ = reason;
    abort_requested_.store(true, std::memory_order_release);
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  if (fatal_.ok()) fatal_ = reason;  // the coordinator had already stopped
}

void Runtime::RequestShutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    shutdown_requested_ = true;
  }
  Wake();
}

absl::Status Runtime::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return Scoped(fatal_);
  }
  RequestShutdown();
  if (thread_.joinable()) thread_.join();
  absl::Status fatal;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    fatal = fatal_;
  }
  timeline_.Close();
  for (const DelayLine::Pending& p :
       delay_line_ != nullptr ? delay_line_->Describe() : std::vector<DelayLine::Pending>{}) {
    spdlog::warn(
        "overlap: rank {}: shutdown discards the delayed updates of '{}': {} reduced result(s) "
        "not yet delivered{}",
        rank_, p.name, p.results, p.residual ? " and a non-zero residual of skipped steps" : "");
  }

  if (!fatal.ok()) return Scoped(fatal);  // MPI may be unusable: leave it to process exit
  if (rank_ == 0) {
    control_->ReleasePeers();
    control_->AwaitPeersClosed(absl::Seconds(config_.collective_timeout_s));
  } else {
    control_->AwaitRelease(absl::Seconds(config_.collective_timeout_s));
  }
  control_.reset();
  plan_controller_->ReleaseScheduler();  // frees its communicators: before MPI_Finalize
  planned_.reset();
  cuda_plane_.reset();
  data_plane_.reset();
  negotiator_.reset();
  executor_.reset();
  absl::Status freed = MpiCheck(
      MPI_Comm_free(&control_comm_),
      absl::StrCat("rank ", rank_, ": Shutdown: MPI_Comm_free of the control communicator"));
  if (freed.ok()) {
    freed = MpiCheck(
        MPI_Comm_free(&comm_),
        absl::StrCat("rank ", rank_, ": Shutdown: MPI_Comm_free of the runtime communicator"));
  }
  absl::Status finalized = absl::OkStatus();
  if (owns_mpi_) {
    finalized = MpiCheck(MPI_Finalize(), absl::StrCat("rank ", rank_, ": Shutdown: MPI_Finalize"));
  }
  return Scoped(freed.ok() ? finalized : freed);
}

}  // namespace overlap
