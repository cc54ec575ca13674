// The Runtime: the one object that owns a process's overlap state.
//
// It holds the configuration, the MPI communicators, the control plane, the negotiator, the
// data plane with its executor, the plan controller (runtime/plan/plan_controller.h: the plan's
// life) and the planned executor that runs the plan (runtime/planes/planned_mode.h), the timeline
// and the coordinator thread. User threads submit operations through Submit(); the coordinator
// thread does everything else: it sleeps in poll() on an eventfd and the control sockets until
// there is work, runs negotiation rounds, hands agreed operations to the data plane, routes the
// plan's operations to the planned executor and drives them to completion.
//
// Threading: Submit and the accessors may be called from any thread; Shutdown from one.
#ifndef OVERLAP_RUNTIME_API_RUNTIME_H_
#define OVERLAP_RUNTIME_API_RUNTIME_H_

#include <mpi.h>

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "collectives/executor.h"
#include "collectives/link_adaptation.h"
#include "runtime/api/handle_state.h"
#include "runtime/api/pending_op.h"
#include "runtime/api/timeline.h"
#include "runtime/config.h"
#include "runtime/control/control_plane.h"
#include "runtime/control/host_load.h"
#include "runtime/negotiation/negotiator.h"
#include "runtime/overlap.h"
#include "runtime/plan/comm_meter.h"
#include "runtime/plan/plan_controller.h"
#include "runtime/plan/step_profiler.h"
#include "runtime/planes/compression_stage.h"
#include "runtime/planes/cuda_plane.h"
#include "runtime/planes/data_plane.h"
#include "runtime/planes/delay_line.h"
#include "runtime/planes/planned_mode.h"

namespace overlap {

// A process holds one Runtime for the global process set (every rank) and one more for each
// process set it is a member of (overlap.h, AddProcessSet): each is complete on its own
// communicator, with its own coordinator thread, negotiation, data plane and timeouts, so sets
// run concurrently without knowing of each other. A process set's runtime runs negotiated and
// observed-plan execution only: no scheduler planner, step markers, timeline or delayed updates.
class Runtime {
 public:
  // The global runtime: collective over MPI_COMM_WORLD. Initialises MPI if needed. When any
  // rank's configuration is invalid, every rank fails with every rank's reason.
  static absl::StatusOr<std::unique_ptr<Runtime>> Start(absl::StatusOr<Config> config);
  // The runtime of process set `id`, whose members are the global `ranks`: collective over
  // `comm`, their communicator (MPI_ERRORS_RETURN), which the runtime duplicates (the caller
  // keeps and frees `comm`). `config` is the global runtime's; the planner is forced to
  // "observed". Errors of this runtime start with "process set <id> (ranks [...]...)", because the
  // ranks its messages name are positions in the set.
  static absl::StatusOr<std::unique_ptr<Runtime>> StartProcessSet(MPI_Comm comm, int id,
                                                                  const std::vector<int>& ranks,
                                                                  Config config);
  ~Runtime();

  // Collective over the runtime's ranks: finishes in-flight work, stops the coordinator,
  // releases its communicators (and, for the global runtime that initialised MPI, MPI). Returns
  // the error that stopped the runtime, if one did.
  absl::Status Shutdown();
  // The first half of Shutdown, which returns at once: from here submissions fail, and the other
  // ranks learn that this one will submit nothing more (what they wait on that it lacks fails).
  // The process sets' runtimes and the global one all announce it before any waits in Shutdown,
  // so a rank leaving early frees ranks waiting on it in any of them.
  void RequestShutdown();

  // Not collective: stops this rank's part at once, for a process about to exit after an error
  // (Shutdown would wait up to collective_timeout_s for ranks that may never call it). Pending and
  // later operations fail with `reason`; closing the control connections tells the peers, whose
  // waits fail within seconds naming this rank. Communicators and MPI are left to process exit.
  // Shutdown afterwards returns `reason` at once.
  void Abort(const absl::Status& reason);

  // This rank's place in the runtime's communicator: the global rank for the global runtime,
  // the position in the set for a process set's.
  int rank() const { return rank_; }
  int size() const { return size_; }
  const Config& config() const { return config_; }
  // The backstop of every wait on this runtime's handles, from its timeouts.
  internal::WaitBound wait_bound() const {
    return {config_.stall_timeout_s, config_.collective_timeout_s};
  }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // Validates `op` (its request, buffers and options) and queues it for the coordinator.
  // InvalidArgument naming the rank, the tensor and the cause; FailedPrecondition after
  // Shutdown or a fatal error.
  absl::StatusOr<Handle> Submit(PendingOp op, DoneCallback on_done);

  // A step marker from the program (StartForward, StartBackward, StartUpdate).
  absl::Status MarkPhase(StepPhase phase);
  // The program's optimizer time (overlap::NoteUpdateTime), for the step profiler.
  absl::Status NoteUpdateTime(double ms);

  // An allreduce with a delayed update or period (runtime/planes/delay_line.h).
  absl::StatusOr<Handle> SubmitDelayed(const std::string& name, const Tensor& input,
                                       const Tensor& output, const AllreduceOptions& options) {
    return delay_line_->Submit(name, input, output, options);
  }

  RuntimeStats stats() const;
  // The per-tensor schedule of the plan in force (overlap.h, CurrentPlanSchedule).
  PlanSchedule plan_schedule() const { return plan_controller_->schedule(); }
  PlanClock plan_clock() const { return plan_controller_->clock(); }

  absl::Status StartTimeline(const std::string& path) { return timeline_.Open(path, rank_); }
  // Timeline: the phase that just ended on the compute track and, at a forward under a scheduled
  // plan, the simulator's prediction of the step starting `now` (rank 0, which planned it).
  void DrawPhase(StepPhase phase, absl::Time now);
  void StopTimeline() { timeline_.Close(); }

  // Error-feedback residuals of this rank's compressed tensors, its delayed updates, and the
  // scheduled plan in force with its delayed state (see overlap.h; runtime_checkpoint.cc).
  absl::StatusOr<std::string> SaveCompressionState();
  absl::Status RestoreCompressionState(const std::string& snapshot);

 private:
  Runtime() = default;
  // The one start-up path of both kinds: agrees with every rank of `comm` on `config` (every
  // rank's problem reaches every rank), then connects and starts the coordinator thread.
  static absl::StatusOr<std::unique_ptr<Runtime>> Launch(std::unique_ptr<Runtime> rt, MPI_Comm comm,
                                                         absl::StatusOr<Config> config);
  absl::Status Connect(MPI_Comm comm, const Config& config);
  // `status` with this runtime's scope in front of its message (process sets only).
  absl::Status Scoped(const absl::Status& status) const;
  void Loop();
  // Loop steps: moves submissions into pending_ (true if there were any); asks for or
  // announces a negotiation round; how long the loop may sleep in poll().
  bool TakeIncoming();
  absl::Status TriggerRounds(bool dirty);
  absl::Duration IdleTimeout() const;
  absl::Duration Cycle() const { return absl::Milliseconds(config_.cycle_time_ms); }
  bool RunRounds();
  // Hands operations back to negotiation as fresh submissions (ReturnToNegotiation).
  void Renegotiate(std::vector<PendingOp> ops);
  // After a call of the plan controller that may have handed operations back to pending_: a
  // round must send them.
  void NoteHandedBack() {
    if (plan_controller_->TakeHandedBack()) loop_.resend = true;
  }
  // Checkpoints of the scheduled plan: the saving thread asks (SavePlan) and waits; the
  // coordinator answers between steps (AnswerPlanSave). A restore goes to the coordinator as a
  // marker, so it takes effect before every later submission (PlanController::AdoptRestored);
  // the restoring thread waits for it to be taken, so that the plan's schedule is in force when it
  // returns.
  absl::StatusOr<std::string> SavePlan();
  void AnswerPlanSave();
  bool PlanSaveAnswered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return plan_save_.has_value() || !fatal_.ok() || stopped_;
  }
  // PlanController::PrepareRestore, and none of the plan's tensors in flight.
  absl::StatusOr<std::shared_ptr<RestoredPlan>> PrepareRestore(absl::string_view bytes);
  // The restore marker has been taken in (its plan is in force and CurrentPlanSchedule shows
  // it), or the runtime has stopped.
  bool RestoreTaken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const Marker& m : markers_) {
      if (m.restore != nullptr) return !fatal_.ok() || stopped_;
    }
    return true;
  }
  bool Quiescent() const;
  bool PlanesIdle() const { return data_plane_->idle() && cuda_plane_->idle(); }
  // Binds this process to the GPU of `op`'s tensors on its first CUDA operation; afterwards,
  // InvalidArgument for a tensor on another GPU.
  absl::Status ClaimCudaDevice(const PendingOp& op);
  // Submit without the scope on its errors.
  absl::StatusOr<Handle> Enqueue(PendingOp op, DoneCallback on_done);
  // An allreduce's canonical compression with its derived parameters (covap's R=auto) computed
  // from the agreed communication/computation ratio; before every rank has agreed on one, from a
  // ratio so small that covap's R is 1 (every shard every step: exact, uncompressed sums). From
  // the first such allreduce on, the forward markers measure the ratio (runtime_measured.cc).
  absl::StatusOr<std::string> ResolveDerived(const std::string& canonical);
  // At a forward marker (the program's thread): at the agreed steps, measures this rank's
  // communication/computation ratio and agrees with every rank on the largest (an allreduce).
  absl::Status AgreeCommRatio(int64_t step);
  void CompleteOp(PendingOp& op, const absl::Status& status);
  void Fatal(const absl::Status& status);
  // Waits up to `timeout` for control signals (and, if `local`, for new submissions) and
  // records them; the error of a lost peer.
  absl::Status ReadControl(absl::Duration timeout, bool local);
  void Wake();
  // After an executor's link probe (runtime_links.cc): RuntimeStats::link_rates, a span on the
  // timeline's "link probe" track, and a log line from rank 0 whenever the verdict changes. Any
  // thread.
  void NoteLinkProbe(const LinkReport& report);

  Config config_;
  bool owns_mpi_ = false;
  // The runtime's own duplicate of MPI_COMM_WORLD or of its process set's communicator; every
  // other communicator of the runtime is duplicated from it.
  MPI_Comm comm_ = MPI_COMM_NULL;
  // Empty for the global runtime; "process set 1 (ranks [1, 2, 3], numbered 0..2 below): " for a
  // process set's.
  std::string scope_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::vector<std::string> hosts_;
  MPI_Comm control_comm_ = MPI_COMM_NULL;
  // Before the planes, which hold pointers to both: members are destroyed in reverse order, and a
  // runtime stopped by a fatal error is torn down here rather than in Shutdown (a CUDA plane
  // frees its device residuals through the compression stage when it goes).
  Timeline timeline_;
  std::unique_ptr<CompressionStage> compression_;
  std::unique_ptr<CommMeter> comm_meter_;
  // covap's R=auto: some allreduce (or OVERLAP_COMPRESSION) asked for a parameter derived from
  // the measured ratio; the ratio every rank agreed on (0 until then); the program thread's next
  // measuring step and tries so far.
  std::atomic<bool> measures_comm_ratio_{false};
  // The compression of the tensors a scheduled plan covers (CompressionStage::Plannable of the
  // default); set at start.
  std::string plan_compression_ = "none";
  std::atomic<double> agreed_comm_ratio_{0};
  int64_t next_ratio_step_ = 0;
  int ratio_attempts_ = 0;
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Negotiator> negotiator_;
  std::unique_ptr<DataPlane> data_plane_;
  std::unique_ptr<CudaPlane> cuda_plane_;
  // The GPU this process's CUDA tensors use: the first one submitted (-1 before), which every
  // later CUDA tensor must match. Set by submitting threads.
  std::atomic<int> cuda_device_{-1};
  std::unique_ptr<PlannedMode> planned_;
  // The program's sights of operations finishing (a Wait returned, a Poll of true, a done
  // callback), counted by its handles; each submission is stamped with the count
  // (PendingOp::observed).
  const std::shared_ptr<internal::Observations> observations_ =
      std::make_shared<internal::Observations>(0);
  std::unique_ptr<StepProfiler> profiler_;
  // The plan's life (after the parts it holds pointers to: destroyed before them).
  std::unique_ptr<PlanController> plan_controller_;
  std::unique_ptr<DelayLine> delay_line_;
  int wake_fd_ = -1;
  std::atomic<bool> coordinator_sleeping_{false};  // in poll() on wake_fd_, or about to be
  std::thread thread_;

  // Coordinator thread only.
  PendingTable pending_;
  int rounds_owed_ = 0;    // workers: rounds rank 0 announced and we have not run
  int peers_asked_ = 0;    // rank 0: workers that asked for a round since the last one
  bool stopping_ = false;  // every rank agreed to shut down
  struct LoopState {
    bool asked = false;          // worker: asked rank 0 for a round that has not run yet
    bool own_work = false;       // rank 0: new local work since the last round
    bool resend = false;         // a round evicted requests of ours: they must be sent whole
    bool plan_report = false;    // a planned unit waits on peers: gather launch counts
    bool shutdown_held = false;  // a round went without our shutdown flag: a delayed plan drains
    absl::Time shutdown_held_warn = absl::InfiniteFuture();  // when a long drain is reported
    absl::Time round_wanted = absl::InfiniteFuture();        // rank 0: first ask since a round
    absl::Time shutdown_deadline = absl::InfiniteFuture();   // set once Shutdown was called
    // Shutdown was called and every operation submitted before it has reached pending_: from
    // here this rank's rounds carry the shutdown flag, which tells the others it will submit
    // nothing more.
    bool shutdown_announced = false;
    absl::Time last_activity = absl::InfinitePast();
    // The last submission taken or operation completed, while collectives are in flight.
    absl::Time last_progress = absl::InfinitePast();
    uint64_t completions_seen = 0;
  } loop_;
  // Operations completed (CompleteOp), for the loop's progress.
  std::atomic<uint64_t> completions_{0};
  // The coordinator's wait while collectives are in flight (Config::coordinator_wait): whether it
  // may nap, and the host's load for "auto". Coordinator thread only.
  bool may_nap_ = false;
  bool nap_always_ = false;
  mutable HostLoad host_load_;

  mutable absl::Mutex mu_;
  std::deque<PendingOp> incoming_ ABSL_GUARDED_BY(mu_);
  // The last submission's PendingOp::observed, which one independent of results takes.
  uint64_t last_submission_observed_ ABSL_GUARDED_BY(mu_) = 0;
  // Forward markers for the scheduler, each with the number of incoming_ operations before it.
  struct Marker {
    int64_t step = 0;
    size_t before = 0;
    std::shared_ptr<RestoredPlan> restore;  // set: not a step but a restored plan to adopt
  };
  std::deque<Marker> markers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> in_flight_ ABSL_GUARDED_BY(mu_);
  bool joined_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_requested_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status abort_reason_ ABSL_GUARDED_BY(mu_);  // set by Abort, for the coordinator
  // Set with abort_reason_, so that the coordinator's loop tests it without taking mu_.
  std::atomic<bool> abort_requested_{false};
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> plan_save_wanted_{false};
  std::optional<absl::StatusOr<std::string>> plan_save_ ABSL_GUARDED_BY(mu_);
  std::string cuda_executor_ ABSL_GUARDED_BY(mu_);  // RuntimeStats::cuda_executor
  int hierarchy_hosts_ = 0;  // RuntimeStats::hierarchy_hosts; set before the coordinator starts
  // Every rank's host as the layout names it (OVERLAP_HOST_ID or the host name), by rank; set
  // before the coordinator starts. Names the links in RuntimeStats::link_rates.
  std::vector<std::string> link_hosts_;
  LinkCounters link_counters_;  // the adaptive allreduces of every executor of this runtime
  std::string link_rates_ ABSL_GUARDED_BY(mu_);  // RuntimeStats::link_rates
  int link_verdict_ ABSL_GUARDED_BY(mu_) = -1;   // last logged: 1 weighted, 0 not, -1 none
  // The step phase in progress and when it began, for the timeline's compute track.
  StepPhase phase_ ABSL_GUARDED_BY(mu_) = StepPhase::kForward;
  absl::Time phase_start_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Written by the coordinator thread, read by stats().
  struct Counters {
    std::atomic<int64_t> rounds{0}, negotiated{0}, launches{0};
    std::atomic<int64_t> updates_noted{0}, update_ns_noted{0};  // NoteUpdateTime's
  } counters_;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_API_RUNTIME_H_
