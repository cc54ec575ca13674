#include "runtime/runtime.h"

#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/buffer_ops.h"
#include "collectives/mpi_executor.h"
#include "collectives/mpi_wait.h"
#include "runtime/agreement.h"
#include "runtime/device_backend.h"
#include "runtime/host_layout.h"
#include "runtime/launch_units.h"
#include "runtime/mpi_control_collectives.h"
#include "runtime/plan_schedule.h"
#include "runtime/rank_bits.h"
#include "runtime/validation.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

constexpr absl::Duration kSpinAfterActivity = absl::Microseconds(300);
// How often a started planned unit asks which ranks have started it while another rank shuts
// down.
constexpr absl::Duration kShutdownProbe = absl::Milliseconds(50);
// A Shutdown that drains a delayed plan for longer than this says what it is waiting for.
constexpr absl::Duration kDrainWarning = absl::Seconds(5);

// A duplicate of `base` that returns errors instead of aborting, so that a failed peer becomes a
// status naming the call (MPI_Comm_dup copies MPI_COMM_WORLD's fatal handler).
absl::StatusOr<MPI_Comm> DupComm(MPI_Comm base, int rank, absl::string_view purpose) {
  MPI_Comm comm = MPI_COMM_NULL;
  const std::string what = absl::StrCat("rank ", rank, ": ", purpose);
  absl::Status s = MpiCheck(MPI_Comm_dup(base, &comm), what + ": MPI_Comm_dup");
  if (s.ok()) {
    s = MpiCheck(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN),
                 what + ": MPI_Comm_set_errhandler");
  }
  if (!s.ok()) return s;
  return comm;
}

// Every rank learns every rank's configuration problem, so that no rank waits in a collective
// that a failed rank will never join.
// The first collective of Init also tells a rank whose peers never call Init: it times out.
absl::Status AgreeOnStart(const absl::Status& mine, MPI_Comm comm, int rank, int size,
                          absl::Duration limit) {
  absl::StatusOr<std::vector<std::string>> words = AllgatherStrings(
      comm, rank, size, mine.ok() ? "" : absl::StrCat("rank ", rank, ": ", mine.message()), limit,
      "Init", "OVERLAP_START_TIMEOUT_S");
  if (!words.ok()) return words.status();
  std::vector<std::string> reasons;
  for (std::string& word : *words) {
    if (!word.empty()) reasons.push_back(std::move(word));
  }
  if (reasons.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("rank ", rank, ": Init failed: ", absl::StrJoin(reasons, "; ")));
}

absl::StatusOr<std::vector<std::string>> GatherHosts(MPI_Comm comm, int rank, int size) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  absl::Status s = MpiCheck(MPI_Get_processor_name(name, &length),
                            absl::StrCat("rank ", rank, ": MPI_Get_processor_name"));
  std::vector<char> all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  if (s.ok()) {
    s = MpiCheck(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                               MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm),
                 absl::StrCat("rank ", rank, ": MPI_Allgather of the host names"));
  }
  if (!s.ok()) return s;
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    hosts.emplace_back(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  }
  return hosts;
}

// This rank's host for the executors' hierarchical allreduce
// (collectives/hierarchical_allreduce.h), or -1 for flat allreduces. Every rank learns every rank's
// setting and host, so all decide alike.
absl::StatusOr<int> HierarchyHostOf(MPI_Comm comm, int rank, int size, const Config& config,
                                    const std::string& host_name, int* hosts) {
  absl::StatusOr<std::vector<std::string>> words =
      AllgatherStrings(comm, rank, size,
                       HierarchyWord(config.hierarchical_allreduce,
                                     config.host_id.empty() ? host_name : config.host_id),
                       absl::Seconds(config.start_timeout_s), "Init", "OVERLAP_START_TIMEOUT_S");
  if (!words.ok()) return words.status();
  bool hierarchical = false;
  absl::StatusOr<HostLayout> layout = AgreeOnHierarchy(*words, &hierarchical);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, ": Init failed: ", layout.status().message()));
  }
  std::string why_flat;
  const int host = HierarchyHost(*layout, rank, hierarchical, &why_flat);
  if (!why_flat.empty() && rank == 0) {
    spdlog::warn("overlap: OVERLAP_HIERARCHICAL_ALLREDUCE=1, but allreduces stay flat: {}",
                 why_flat);
  }
  *hosts = host >= 0 ? static_cast<int>(layout->hosts.size()) : 0;
  return host;
}

// How long a peer's host may not answer on the control connection before the runtime fails
// naming it: well inside the collective timeout, so that a host cut off from the network is named
// before a collective gives up without a name, and at most a minute.
absl::Duration PeerTimeout(const Config& config) {
  return std::clamp(absl::Seconds(config.collective_timeout_s / 2), absl::Seconds(1),
                    absl::Seconds(60));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Start(absl::StatusOr<Config> config) {
  std::unique_ptr<Runtime> rt(new Runtime());
  // Any MPI call but these two after MPI_Finalize aborts the process with no error to report.
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && finalized) {
    return absl::FailedPreconditionError(
        "Init: MPI was finalised earlier in this process (by Shutdown, or by an Init that failed "
        "after starting MPI) and MPI cannot start twice in one process; run a new process");
  }
  int initialized = 0;
  absl::Status mpi = MpiCheck(MPI_Initialized(&initialized), "Init: MPI_Initialized");
  int provided = MPI_THREAD_SINGLE;
  if (mpi.ok() && !initialized) {
    mpi = MpiCheck(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                   "Init: MPI_Init_thread");
    rt->owns_mpi_ = mpi.ok();
  } else if (mpi.ok()) {
    mpi = MpiCheck(MPI_Query_thread(&provided), "Init: MPI_Query_thread");
  }
  if (!mpi.ok()) return mpi;
  if (config.ok() && provided < MPI_THREAD_SERIALIZED) {
    config = absl::FailedPreconditionError(
        "MPI was initialised below MPI_THREAD_SERIALIZED; overlap's coordinator thread needs "
        "MPI_THREAD_MULTIPLE (call MPI_Init_thread, or let overlap::Init initialise MPI)");
  }
  return Launch(std::move(rt), MPI_COMM_WORLD, std::move(config));
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::StartProcessSet(MPI_Comm comm, int id,
                                                                  const std::vector<int>& ranks,
                                                                  Config config) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->scope_ = absl::StrCat("process set ", id, " (ranks [", absl::StrJoin(ranks, ", "),
                            "], numbered 0..", ranks.size() - 1, " below): ");
  // Scheduled plans need step markers and delayed updates need the planner: neither exists for
  // a process set, so its runtime runs negotiation and the plan it observes. Its tensors are not
  // in the global runtime's compression snapshot, so no process-wide compressor applies.
  config.planner = "observed";
  config.timeline_path.clear();
  config.compression = "none";
  return Launch(std::move(rt), comm, std::move(config));
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Launch(std::unique_ptr<Runtime> rt, MPI_Comm comm,
                                                         absl::StatusOr<Config> config) {
  absl::Status mpi = MpiCheck(MPI_Comm_rank(comm, &rt->rank_), "Init: MPI_Comm_rank");
  if (mpi.ok()) mpi = MpiCheck(MPI_Comm_size(comm, &rt->size_), "Init: MPI_Comm_size");
  if (!mpi.ok()) return rt->Scoped(mpi);
  const double start_timeout_s = config.ok() ? config->start_timeout_s : Config().start_timeout_s;
  absl::Status agreed =
      AgreeOnStart(config.status(), comm, rt->rank_, rt->size_, absl::Seconds(start_timeout_s));
  if (!agreed.ok()) {
    if (rt->owns_mpi_) (void)MPI_Finalize();  // the failed start is the error to report
    return rt->Scoped(agreed);
  }
  rt->config_ = *config;
  spdlog::set_level(spdlog::level::from_str(rt->config_.log_level));
  absl::Status connected = rt->Connect(comm, rt->config_);
  if (!connected.ok()) return rt->Scoped(connected);
  rt->thread_ = std::thread([r = rt.get()] { r->Loop(); });
  return rt;
}

absl::Status Runtime::Scoped(const absl::Status& status) const {
  if (status.ok() || scope_.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(scope_, status.message()));
}

absl::Status Runtime::Connect(MPI_Comm comm, const Config& config) {
  absl::StatusOr<MPI_Comm> own = DupComm(comm, rank_, "the runtime communicator");
  if (!own.ok()) return own.status();
  comm_ = *own;
  absl::StatusOr<MPI_Comm> control_comm = DupComm(comm_, rank_, "the control communicator");
  if (!control_comm.ok()) return control_comm.status();
  control_comm_ = *control_comm;
  MPI_Comm local = MPI_COMM_NULL;
  const std::string node = absl::StrCat("rank ", rank_, ": the node communicator: ");
  absl::Status s = MpiCheck(
      MPI_Comm_split_type(control_comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
      node + "MPI_Comm_split_type");
  if (s.ok()) s = MpiCheck(MPI_Comm_rank(local, &local_rank_), node + "MPI_Comm_rank");
  if (s.ok()) s = MpiCheck(MPI_Comm_size(local, &local_size_), node + "MPI_Comm_size");
  if (local != MPI_COMM_NULL && s.ok()) s = MpiCheck(MPI_Comm_free(&local), node + "MPI_Comm_free");
  if (!s.ok()) return s;
  absl::StatusOr<std::vector<std::string>> hosts = GatherHosts(control_comm_, rank_, size_);
  if (!hosts.ok()) return hosts.status();
  hosts_ = *std::move(hosts);
  absl::StatusOr<int> host = HierarchyHostOf(control_comm_, rank_, size_, config,
                                             hosts_[static_cast<size_t>(rank_)], &hierarchy_hosts_);
  if (!host.ok()) return host.status();
  MpiExecutorOptions executor_options;
  executor_options.num_channels = config.num_channels;
  executor_options.host = *host;

  absl::StatusOr<std::unique_ptr<ControlPlane>> control = ControlPlane::Connect(
      control_comm_, hosts_, absl::Seconds(config.start_timeout_s), PeerTimeout(config));
  if (!control.ok()) return control.status();
  control_ = std::move(*control);
  absl::StatusOr<std::unique_ptr<MpiExecutor>> executor =
      MpiExecutor::Create(comm_, executor_options);
  if (!executor.ok()) return executor.status();
  executor_ = std::move(*executor);
  if (!config.timeline_path.empty()) {
    absl::Status s = timeline_.Open(config.timeline_path, rank_);
    if (!s.ok()) spdlog::warn("overlap: {}", std::string(s.message()));
  }
  compression_ = std::make_unique<CompressionStage>(rank_, size_);
  delay_line_ = std::make_unique<DelayLine>(
      rank_, [this](const std::string& name, const Tensor& data, const AllreduceOptions& options,
                    const std::string& schedule) {
        PendingOp op = AllreduceOp(name, data, data, options);
        op.request.update_schedule = schedule;
        return Submit(std::move(op), options.on_done);
      });
  // A round that waits on a dead peer ends as soon as its control connection closes.
  negotiator_ = std::make_unique<Negotiator>(
      std::make_unique<MpiControlCollectives>(control_comm_, rank_, size_,
                                              MpiControlCollectives::Ownership::kBorrowed),
      config, hosts_, [this] { return ReadControl(absl::ZeroDuration(), /*local=*/false); });
  data_plane_ = std::make_unique<DataPlane>(
      executor_.get(), config, rank_, size_, &timeline_, compression_.get(),
      [this](PendingOp& op, const absl::Status& status) { CompleteOp(op, status); });
  // The GPU of this rank's CUDA tensors, or, before it has submitted one, one by local rank.
  auto cuda_device = [this] {
    const int claimed = cuda_device_.load();
    return claimed >= 0 ? claimed : std::max(0, local_rank_) % std::max(1, Devices().DeviceCount());
  };
  cuda_plane_ = std::make_unique<CudaPlane>(
      comm_, config, rank_, size_, cuda_device, executor_options.host, &timeline_,
      compression_.get(),
      [this](PendingOp& op, const absl::Status& status) { CompleteOp(op, status); });
  // Planned collectives and their checks get communicators of their own: ranks start them
  // without negotiation, so they must not share a sequence with negotiated ones.
  absl::StatusOr<std::unique_ptr<MpiExecutor>> planned_executor =
      MpiExecutor::Create(comm_, executor_options);
  if (!planned_executor.ok()) return planned_executor.status();
  absl::StatusOr<MPI_Comm> check_comm = DupComm(comm_, rank_, "the planned check communicator");
  if (!check_comm.ok()) return check_comm.status();
  planned_ = std::make_unique<PlannedMode>(
      std::move(*planned_executor),
      std::make_unique<MpiControlCollectives>(*check_comm, rank_, size_,
                                              MpiControlCollectives::Ownership::kOwned),
      config, hosts_, &timeline_, compression_.get(),
      [this](PendingOp& op, const absl::Status& status) { CompleteOp(op, status); },
      [this, cuda_device, host = executor_options.host](const Config& plane_config,
                                                        DataPlane::CompleteFn complete) {
        return std::make_unique<CudaPlane>(comm_, plane_config, rank_, size_, cuda_device, host,
                                           &timeline_, compression_.get(), std::move(complete));
      });
  detector_ = std::make_unique<CycleDetector>(config.plan_after_steps);
  profiler_ = std::make_unique<StepProfiler>(config.profile_steps);
  if (config.planner != "observed") {
    // The scheduler's votes, broadcasts and link probe get communicators of their own; the probe
    // runs the allreduce the plan will run, flat or hierarchical, so the fitted cost is its.
    MpiExecutorOptions probe_options = executor_options;
    probe_options.num_channels = 1;
    absl::StatusOr<std::unique_ptr<MpiExecutor>> probe = MpiExecutor::Create(comm_, probe_options);
    if (!probe.ok()) return probe.status();
    absl::StatusOr<MPI_Comm> plan_comm = DupComm(comm_, rank_, "the plan communicator");
    if (!plan_comm.ok()) return plan_comm.status();
    scheduler_ = std::make_unique<PlanScheduler>(
        config, rank_, size_, *plan_comm, std::move(*probe), profiler_.get(),
        [this] {
          std::vector<sched::CostSample> samples;
          for (const DataPlane::Timing& t : planned_->timings()) {
            samples.push_back(sched::CostSample{static_cast<double>(t.bytes), t.seconds});
          }
          return samples;
        },
        [this] { return ReadControl(absl::ZeroDuration(), /*local=*/false); });
  }
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  spdlog::info("overlap: {}rank {} of {} on {} started ({} channels, fusion threshold {} bytes)",
               scope_, rank_, size_, hosts_[static_cast<size_t>(rank_)], config.num_channels,
               config.fusion_threshold_bytes);
  return absl::OkStatus();
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
  if (phase != StepPhase::kForward || scheduler_ == nullptr) return;
  std::shared_ptr<const std::vector<sched::SimEvent>> predicted = scheduler_->predicted_step();
  if (predicted == nullptr) return;
  for (const sched::SimEvent& e : *predicted) {
    timeline_.Predicted(e.lane, e.name, now + absl::Milliseconds(e.start_ms),
                        now + absl::Milliseconds(e.end_ms));
  }
}

absl::Status Runtime::MarkPhase(StepPhase phase) {
  const absl::Time now = absl::Now();
  if (timeline_.enabled()) DrawPhase(phase, now);
  const int64_t step = profiler_->OnPhase(phase, now);
  if (phase != StepPhase::kForward) return absl::OkStatus();
  counters_.steps.store(step, std::memory_order_relaxed);
  if (scheduler_ == nullptr) return absl::OkStatus();
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
  stats.plans_frozen = counters_.frozen.load();
  stats.plans_dropped = counters_.dropped.load();
  stats.planned_tensors = counters_.tensors.load();
  stats.planned_units = counters_.units.load();
  stats.steps = counters_.steps.load();
  {
    absl::MutexLock lock(&mu_);
    stats.cuda_executor = cuda_executor_;
  }
  stats.hierarchy_hosts = hierarchy_hosts_;
  if (scheduler_ != nullptr) {
    const ScheduleInfo info = scheduler_->info();
    stats.planner = info.planner;
    stats.plan_buckets = info.buckets;
    stats.predicted_step_ms = info.predicted_step_ms;
    stats.plan_adopted_step = info.adopted_step;
    stats.plans_scheduled = info.adopted;
    stats.plans_refused = info.refused;
    stats.plan_layerwise_update = info.layerwise_update;
    stats.plan_mean_staleness = info.mean_staleness;
    stats.plan_update_cycle = info.update_cycle;
    stats.fitted_alpha_us = info.alpha_us;
    stats.fitted_beta_us_per_mb = info.beta_us_per_mb;
    stats.plan_trials = info.trials;
    stats.plan_trials_pending = info.trials_pending;
  }
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
  auto state =
      std::make_shared<internal::HandleState>(name, rank_, std::move(on_done), observations_);
  // Scheduled plans cover float32 gradients being summed or averaged, one tensor each, on the
  // host or the GPU (the bucket runner and the delay line serve both).
  if (scheduler_ != nullptr && op.request.kind == OpKind::kAllreduce &&
      op.request.update_schedule.empty() && op.request.tensors.size() == 1 &&
      op.request.compression == "none" && op.request.tensors[0].dtype == DataType::kFloat32 &&
      (op.request.op == ReduceOp::kSum || op.request.op == ReduceOp::kAverage)) {
    // The clock, not the handle: the program may free its handle as soon as it has waited.
    profiler_->OnSubmit(
        name, op.request.tensors[0].NumElements() * 4, DataType::kFloat32,
        [clock = state->clock()] {
          return StepProfiler::WaitTimes{clock->first_wait(), clock->done_at()};
        },
        absl::Now(), op.request.plan_may_delay);
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
    op.observed = observations_->load();
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
    PlanVote vote;
    vote.launches = planned_->launches();
    vote.wants_unfreeze = planned_->wants_unfreeze();
    vote.planned_ids = &planned_->planned_ids();
    vote.wants_report = loop_.plan_report;
    vote.starts_nothing_more = shutting_down && planned_->StartsNothingMore();
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
    std::optional<LearnedStep> learned;
    for (ReadyOp& r : round->ready) {
      const Response& response = *r.response;
      // Delayed reductions rotate names by design and stay negotiated.
      if (response.request.kind == OpKind::kAllreduce && response.cache_id >= 0 &&
          response.request.update_schedule.empty()) {
        std::optional<LearnedStep> step = detector_->Observe(
            response.cache_id,
            r.op.has_value() ? std::optional<uint64_t>(r.op->observed) : std::nullopt,
            round->agreed_launches);
        if (step.has_value()) learned = std::move(step);
      } else if (response.request.kind == OpKind::kJoin) {
        detector_->Reset();
        // While a plan runs, the Join completes once the plan has seen every rank join too.
        if (r.op.has_value()) r.op = planned_->JoinAgreed(std::move(*r.op));
      }
    }
    detector_->EndRound();
    auto [host, cuda] = SplitByDevice(std::move(round->ready));
    data_plane_->Submit(std::move(host));
    if (!cuda.empty()) {
      cuda_plane_->Submit(std::move(cuda));
      absl::MutexLock lock(&mu_);
      cuda_executor_ = cuda_plane_->executor_name();
    }
    // Evicted requests go out whole in the next round, which this rank must ask for itself.
    if (round->resend) loop_.resend = true;
    if (round->evicted) detector_->Reset();
    absl::Status planned = UpdatePlan(*round, learned);
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
  for (PendingOp& op : ops) {
    op.cache_id = -1;
    op.sent = false;
    std::string name = op.request.name;
    pending_.emplace(std::move(name), std::move(op));
    loop_.resend = true;
  }
}

void Runtime::DropPlan(const char* why, bool relearn) {
  spdlog::info("overlap: rank {}: dropping the frozen plan: {}", rank_, why);
  Renegotiate(planned_->Unfreeze());
  if (relearn) detector_->Reset();
  counters_.dropped.fetch_add(1, std::memory_order_relaxed);
  counters_.tensors.store(0, std::memory_order_relaxed);
  counters_.units.store(0, std::memory_order_relaxed);
  if (scheduled_in_force_) {
    scheduled_in_force_ = false;
    scheduler_->OnPlanDropped(counters_.steps.load());
  }
  absl::MutexLock lock(&schedule_mu_);
  if (!schedule_.tensors.empty()) {
    schedule_.tensors.clear();
    schedule_generation_.store(++schedule_.generation, std::memory_order_release);
  }
}

bool Runtime::Quiescent() const {
  return pending_.empty() && rounds_owed_ == 0 && PlanesIdle() && planned_->quiescent();
}

absl::Status Runtime::ProgressSchedule() {
  absl::StatusOr<std::optional<ExecutablePlan>> plan =
      scheduler_->Progress(Quiescent(), [this](const std::vector<std::string>& names) {
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
    AdoptScheduled(std::move(**plan), absl::Milliseconds(profiler_->median_step_ms()));
  }
  if (scheduler_->TakeDropWish() && planned_->frozen()) {
    DropPlan("the measured step drifted (OVERLAP_REPLAN_DRIFT); planning again");
  }
  return absl::OkStatus();
}

void Runtime::AdoptScheduled(ExecutablePlan plan, absl::Duration step_time,
                             PlanDelays::State* resume) {
  // Every rank is here with nothing in flight, between the same two steps.
  scheduled_in_force_ = false;  // a plan being replaced is not a plan lost
  if (planned_->frozen()) DropPlan("a scheduled plan replaces it", /*relearn=*/true);
  detector_->Reset();
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

absl::Status Runtime::UpdatePlan(const RoundResult& round,
                                 const std::optional<LearnedStep>& learned) {
  // Changes need every rank to have started the same planned collectives (agreed_launches):
  // then none is left waiting for a rank that stops following the plan.
  if (planned_->frozen() && round.unfreeze_wanted && round.agreed_launches.has_value()) {
    DropPlan("a rank waited on it longer than its patience");
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
  const absl::flat_hash_set<int32_t> agreed(detector_->current().begin(),
                                            detector_->current().end());
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
    DropPlan("another step repeats while the plan goes unused", /*relearn=*/false);
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
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (planned_->Owns(it->first)) {
      PendingOp op = std::move(it->second);
      op.cache_id = -1;
      op.sent = false;
      planned_->Add(std::move(op));
      pending_.erase(it++);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

bool Runtime::TakeIncoming() {
  bool dirty = false;
  bool shutting_down;
  {
    absl::MutexLock lock(&mu_);
    // Operations up to the next forward marker; a marker may start a scheduler stage, which holds
    // the operations after it until every rank has voted.
    while (!incoming_.empty() || !markers_.empty()) {
      if (scheduler_ != nullptr && scheduler_->busy()) break;
      if (!markers_.empty() && markers_.front().before == 0) {
        Marker marker = std::move(markers_.front());
        markers_.pop_front();
        if (marker.restore != nullptr) {
          AdoptRestored(std::move(*marker.restore));
        } else {
          last_marker_step_ = marker.step;
          scheduler_->OnStep(marker.step);
        }
        continue;
      }
      const size_t take = markers_.empty() ? incoming_.size() : markers_.front().before;
      for (size_t i = 0; i < take; ++i) {
        PendingOp& op = incoming_.front();
        loop_.last_activity = absl::Now();
        if (planned_->Owns(op.request.name)) {
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
  if (rounds_owed_ > 0 || loop_.resend || !PlanesIdle() || !planned_->idle() ||
      (scheduler_ != nullptr && scheduler_->busy()) || plan_save_wanted_.load() ||
      now - loop_.last_activity < kSpinAfterActivity) {
    return absl::ZeroDuration();
  }
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
    // Many cheap MPI_Test calls per syscall: MPI moves large messages a fragment per call.
    std::vector<PendingOp> renegotiate;
    for (int i = 0; i < 64 && s.ok(); ++i) {
      if (!data_plane_->idle()) s = data_plane_->Progress();
      if (s.ok() && !cuda_plane_->idle()) s = cuda_plane_->Progress();
      if (s.ok()) s = planned_->Progress(&renegotiate);
      if (PlanesIdle() && planned_->idle()) break;
    }
    Renegotiate(std::move(renegotiate));
    if (s.ok() && scheduler_ != nullptr) s = ProgressSchedule();
    if (s.ok() && plan_save_wanted_.load(std::memory_order_acquire)) AnswerPlanSave();
    counters_.launches.store(static_cast<int64_t>(planned_->launches()), std::memory_order_relaxed);
    // Each rank sees the check fail at its own moment, so the detector is not reset here: a freeze
    // (collective: the OR of the wait marks, the CUDA plane's set-up) must come at the same agreed
    // round on every rank. The diverged tensor's renegotiation evicts it in an agreed round, and
    // that resets every rank's detector alike.
    if (planned_->must_unfreeze()) {
      DropPlan("a tensor was submitted differently from the plan", /*relearn=*/false);
    }
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
  Renegotiate(planned_->Unfreeze());
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
  scheduler_.reset();  // frees its communicators: before MPI_Finalize
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
