// Runtime's start-up (runtime/api/runtime.h: Start, StartProcessSet): MPI, the agreement of every
// rank on the configuration, the runtime's communicators, and the parts it owns, made and wired.
#include <sys/eventfd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/mpi_executor.h"
#include "collectives/mpi_wait.h"
#include "runtime/api/runtime.h"
#include "runtime/control/agreement.h"
#include "runtime/control/host_layout.h"
#include "runtime/control/mpi_control_collectives.h"
#include "runtime/planes/device_backend.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// Large allreduces that the negotiated executor and the scheduler's probe executor run before
// their first link probe (MpiExecutorOptions::first_probe_after). The plan's executor probes the
// same links at its first; the negotiated one carries only a job's first steps (3-4 steps of a
// few large buckets each before the observed plan freezes), and the scheduler's runs a handful
// of large cost probes per planning, which would run unweighted after a first probe anyway (a
// weighted verdict needs two probes in a row).
constexpr int64_t kSecondaryFirstProbeAfter = 16;

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
// `*rank_hosts` gets every rank's host as the layout names it (OVERLAP_HOST_ID or the host name),
// `*distinct_hosts` their number, and `*two_stage_host` this rank's host where the layout allows
// two-stage allreduces (-1 where it does not: one host, one rank per host, uneven hosts).
absl::StatusOr<int> HierarchyHostOf(MPI_Comm comm, int rank, int size, const Config& config,
                                    const std::string& host_name, int* hosts,
                                    std::vector<std::string>* rank_hosts, int* distinct_hosts,
                                    int* two_stage_host) {
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
  // The layout decides once whether ranks can split by host; the setting whether they do.
  std::string why_flat;
  *two_stage_host = HierarchyHost(*layout, rank, /*requested=*/true, &why_flat);
  const int host = hierarchical ? *two_stage_host : -1;
  if (hierarchical && !why_flat.empty() && rank == 0) {
    spdlog::warn("overlap: OVERLAP_HIERARCHICAL_ALLREDUCE=1, but allreduces stay flat: {}",
                 why_flat);
  }
  *hosts = host >= 0 ? static_cast<int>(layout->hosts.size()) : 0;
  *distinct_hosts = static_cast<int>(layout->hosts.size());
  rank_hosts->clear();
  for (int h : layout->host_of_rank) rank_hosts->push_back(layout->hosts[static_cast<size_t>(h)]);
  return host;
}

// OK when every rank gives `var` rank 0's value; otherwise InvalidArgument, the same on every
// rank, naming the ranks that differ: a setting that shapes collectives must match everywhere,
// or the ranks run different algorithms and hang.
absl::Status AgreeOnValue(MPI_Comm comm, int rank, int size, const Config& config,
                          absl::string_view var, const std::string& value) {
  absl::StatusOr<std::vector<std::string>> values =
      AllgatherStrings(comm, rank, size, value, absl::Seconds(config.start_timeout_s), "Init",
                       "OVERLAP_START_TIMEOUT_S");
  if (!values.ok()) return values.status();
  std::vector<std::string> differ;
  for (int r = 1; r < size; ++r) {
    if ((*values)[static_cast<size_t>(r)] != values->front()) {
      differ.push_back(absl::StrCat("rank ", r, " has ", (*values)[static_cast<size_t>(r)]));
    }
  }
  if (differ.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "rank ", rank, ": Init failed: ", var, " must be the same on every rank: rank 0 has ",
      values->front(), ", ", absl::StrJoin(differ, ", ")));
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
  rt->may_nap_ = rt->config_.coordinator_wait != "spin";
  rt->nap_always_ = rt->config_.coordinator_wait == "nap";
  spdlog::set_level(spdlog::level::from_str(rt->config_.log_level));
  absl::Status connected = rt->Connect(comm, rt->config_);
  if (!connected.ok()) return rt->Scoped(connected);
  rt->thread_ = std::thread([r = rt.get()] { r->Loop(); });
  return rt;
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
  int distinct_hosts = 0, two_stage_host = -1;
  absl::StatusOr<int> host =
      HierarchyHostOf(control_comm_, rank_, size_, config, hosts_[static_cast<size_t>(rank_)],
                      &hierarchy_hosts_, &link_hosts_, &distinct_hosts, &two_stage_host);
  if (!host.ok()) return host.status();
  // Every rank splits its plan's communicators by host, or none does.
  absl::Status same_two_stage =
      AgreeOnValue(control_comm_, rank_, size_, config, "OVERLAP_TWO_STAGE", config.two_stage);
  if (!same_two_stage.ok()) return same_two_stage;
  absl::StatusOr<LinkAdaptation> adaptation = ParseLinkAdaptation(config.adaptive_allreduce);
  if (!adaptation.ok()) return adaptation.status();  // Config::Validate refused it already
  absl::Status same = AgreeOnValue(control_comm_, rank_, size_, config,
                                   "OVERLAP_ADAPTIVE_ALLREDUCE", config.adaptive_allreduce);
  if (!same.ok()) return same;
  // Every rank stops a plan after the same unit only with the same window.
  same = AgreeOnValue(control_comm_, rank_, size_, config, "OVERLAP_PLAN_CHECK_WINDOW",
                      absl::StrCat(config.plan_check_window));
  if (!same.ok()) return same;
  MpiExecutorOptions executor_options;
  executor_options.num_channels = config.num_channels;
  executor_options.host = *host;
  executor_options.adaptation = *adaptation;
  executor_options.hosts = distinct_hosts;
  executor_options.counters = &link_counters_;
  executor_options.on_probe = [this](const LinkReport& report) { NoteLinkProbe(report); };

  absl::StatusOr<std::unique_ptr<ControlPlane>> control = ControlPlane::Connect(
      control_comm_, hosts_, absl::Seconds(config.start_timeout_s), PeerTimeout(config));
  if (!control.ok()) return control.status();
  control_ = std::move(*control);
  // The negotiated executor carries a job's first steps until a plan takes over with an
  // executor of its own, which probes the links at its first large allreduce; so this one probes
  // only if it is still carrying large allreduces later (no plan froze, or it was dropped).
  MpiExecutorOptions negotiated_options = executor_options;
  negotiated_options.first_probe_after = kSecondaryFirstProbeAfter;
  absl::StatusOr<std::unique_ptr<MpiExecutor>> executor =
      MpiExecutor::Create(comm_, negotiated_options);
  if (!executor.ok()) return executor.status();
  executor_ = std::move(*executor);
  if (!config.timeline_path.empty()) {
    absl::Status s = timeline_.Open(config.timeline_path, rank_);
    if (!s.ok()) spdlog::warn("overlap: {}", std::string(s.message()));
  }
  compression_ = std::make_unique<CompressionStage>(rank_, size_);
  plan_compression_ = CompressionStage::Plannable(config.compression);
  comm_meter_ = std::make_unique<CommMeter>(config.profile_steps);
  next_ratio_step_ = config.plan_after_steps + config.profile_steps + 2;
  delay_line_ = std::make_unique<DelayLine>(
      rank_, wait_bound(),
      [this](const std::string& name, const Tensor& data, const AllreduceOptions& options,
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
  const PlaneContext planes{
      config,
      rank_,
      size_,
      &timeline_,
      compression_.get(),
      [this](PendingOp& op, const absl::Status& status) { CompleteOp(op, status); },
      comm_meter_.get()};
  data_plane_ = std::make_unique<DataPlane>(executor_.get(), planes);
  // The GPU of this rank's CUDA tensors, or, before it has submitted one, one by local rank.
  auto cuda_device = [this] {
    const int claimed = cuda_device_.load();
    return claimed >= 0 ? claimed : std::max(0, local_rank_) % std::max(1, Devices().DeviceCount());
  };
  cuda_plane_ = std::make_unique<CudaPlane>(comm_, planes, cuda_device, HostSplit{*host, true});
  // Planned collectives and their checks get communicators of their own: ranks start them
  // without negotiation, so they must not share a sequence with negotiated ones. Where ranks
  // share hosts and allreduces are flat, a scheduled plan may run buckets two-stage: the plan's
  // executor (and the probe's below, which fits that form's cost) splits its ranks by host.
  if (*host < 0 && two_stage_host >= 0 && config.two_stage != "off" &&
      config.planner != "observed") {
    executor_options.host = two_stage_host;
    executor_options.hierarchical = false;
  }
  absl::StatusOr<std::unique_ptr<MpiExecutor>> planned_executor =
      MpiExecutor::Create(comm_, executor_options);
  if (!planned_executor.ok()) return planned_executor.status();
  absl::StatusOr<MPI_Comm> check_comm = DupComm(comm_, rank_, "the planned check communicator");
  if (!check_comm.ok()) return check_comm.status();
  planned_ = std::make_unique<PlannedMode>(
      std::move(*planned_executor),
      std::make_unique<MpiControlCollectives>(*check_comm, rank_, size_,
                                              MpiControlCollectives::Ownership::kOwned),
      planes, hosts_,
      [this, cuda_device, split = HostSplit{executor_options.host, executor_options.hierarchical}](
          PlaneContext context) {
        return std::make_unique<CudaPlane>(comm_, std::move(context), cuda_device, split);
      });
  profiler_ = std::make_unique<StepProfiler>(config.profile_steps);
  std::unique_ptr<PlanScheduler> scheduler;  // none for OVERLAP_PLANNER=observed
  if (config.planner != "observed") {
    // The scheduler's votes, broadcasts and link probe get communicators of their own; the probe
    // runs the allreduces the plan will run, flat, hierarchical or two-stage, so the fitted costs
    // are theirs.
    MpiExecutorOptions probe_options = executor_options;
    probe_options.num_channels = 1;
    probe_options.first_probe_after = kSecondaryFirstProbeAfter;
    absl::StatusOr<std::unique_ptr<MpiExecutor>> probe = MpiExecutor::Create(comm_, probe_options);
    if (!probe.ok()) return probe.status();
    absl::StatusOr<MPI_Comm> plan_comm = DupComm(comm_, rank_, "the plan communicator");
    if (!plan_comm.ok()) return plan_comm.status();
    scheduler = std::make_unique<PlanScheduler>(
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
  plan_controller_ = std::make_unique<PlanController>(
      config, rank_, negotiator_.get(), planned_.get(), profiler_.get(), std::move(scheduler));
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  spdlog::info("overlap: {}rank {} of {} on {} started ({} channels, fusion threshold {} bytes)",
               scope_, rank_, size_, hosts_[static_cast<size_t>(rank_)], config.num_channels,
               config.fusion_threshold_bytes);
  return absl::OkStatus();
}

}  // namespace overlap
