// The planned executor: runs one ExecutablePlan (runtime/plan/executable_plan.h), whether observed
// from negotiation (DDP's frozen buckets) or made by a scheduler planner, with no negotiation.
//
// A rank starts bucket k of the plan as soon as every tensor it holds is submitted locally and
// fewer than OVERLAP_PLAN_CHECK_WINDOW (Config::plan_check_window, 4) started units still wait
// for their checks (none, for a pass's first bucket) - no negotiation round, no message to rank
// 0. Every rank starts the same buckets in the same order on communicators only the plan uses,
// so the collectives match. Whole-tensor buckets (observed plans) go to a data plane that fuses
// them as negotiated mode does: host tensors to one on the host, CUDA tensors to one on the GPU
// with an executor of its own (runtime/planes/cuda_plane.h: NCCL, or MPI staged through host
// memory); sliced buckets (scheduled plans) go to a bucket runner (runtime/planes/bucket_runner.h),
// the host's over this executor or the GPU's over the CUDA plane's executor (a plan's bucket holds
// tensors of one device: ScheduledPlan splits mixed ones), packed when they start and run one at a
// time per channel in plan order, so channels run concurrently. A bucket's check goes out just
// before its data; bucket k+1 starts (and packs) while bucket k's collective still runs, and its
// collective follows the moment the channel is free. On a link the data saturates a check still
// waits in the link's queue; one that waited there gated every later bucket when the window was
// one unit (a 30-bucket plan at 250 Mbit/s: its p90 192 and 231 ms against 172 and 188 with a
// window of 4, docs/time_to_accuracy.md), so a window of units runs ahead of their checks.
//
// Consistency check: with each bucket's collective, a small bitwise-OR allreduce on control
// collectives of its own (runtime/control/control_collectives.h) tells every rank which of the
// bucket's tensors some rank submitted differently from the plan (that rank contributes zeros for
// them, so the collective still matches) and which ranks have joined. Handles complete only once
// the tensor's last bucket and its check are done. Tensors that diverged on any rank go back to
// negotiation on every rank - which agrees on the new request if every rank changed it alike, and
// otherwise fails it with the usual mismatch error naming each rank's request - and the plan is
// dropped. Every rank drops it after the same unit: a check that finds a diverged tensor (or
// every rank joined, below) sets a stop at the last unit of its window - its own unit plus
// the window - 1, or the pass's last unit if that comes first - and the plan stops once this
// rank has started every unit up to the stop and every check up to there is in (their flags
// combined, so every rank acts alike). A window never reaches into the next pass, whose
// submissions the program may make only once this step's results are delivered; a rank blocked
// short of the stop (its program waits on a handle first) asks at once, in a round, to drop the
// plan, which every rank does where all started as many units. The check also carries a fingerprint
// of the unit (its bucket and slices): a unit that is not the same on every rank (a bug, since
// every rank freezes the same plan) would have combined different tensors, so it fails the job on
// every rank and delivers nothing. A tensor whose slices were only partly sent goes back to
// negotiation with its input untouched: sliced results reach the user's buffer only once all of a
// tensor's slices are in.
//
// Delayed plans (a scheduled plan with delays or update periods; runtime/planes/plan_delays.h): the
// program's submissions are parked and runtime-owned copies run through the buckets, one pass per
// step; a bucket off its period folds its slices into a residual instead of communicating (its
// check still runs, so divergence is caught on every rank at the same bucket); results are held
// per bucket and pass and delivered with the submission `delay` passes later. A tensor's next copy
// enters the plan once its previous one has run through all its buckets. When such a plan is
// dropped, the parked submissions go back to negotiation (each reduced synchronously from its own
// untouched input) and what was held is discarded with a warning naming each tensor.
//
// Buffers: a sliced bucket packs into (and an all-gather gathers into) a buffer on its tensors'
// device kept for that bucket across passes (the bucket runner's pool), so a step pays the copy
// but not a fresh allocation's zero-fill and page faults; the plan in force keeps about one
// gradient's worth (buffer_bytes on the host, device_buffer_bytes on the GPU). A compressed
// bucket's error-feedback residual (kept by the compression stage under the bucket's slices) is
// freed when a plan without that bucket is frozen.
//
// Join: a joined rank starts each next bucket with zeros (and whatever it submitted before
// joining). When a bucket's check shows every rank joined, that bucket was all zeros; every rank
// starts the units up to the stop it sets (zeros too), then nobody starts another, and the plan
// restarts at bucket 0 once the negotiated Join completes.
//
// Threading: the coordinator thread only.
#ifndef OVERLAP_RUNTIME_PLANES_PLANNED_MODE_H_
#define OVERLAP_RUNTIME_PLANES_PLANNED_MODE_H_

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/executor.h"
#include "runtime/api/pending_op.h"
#include "runtime/control/control_collectives.h"
#include "runtime/negotiation/messages.h"
#include "runtime/plan/executable_plan.h"
#include "runtime/planes/bucket_runner.h"
#include "runtime/planes/cuda_plane.h"
#include "runtime/planes/data_plane.h"
#include "runtime/planes/plan_delays.h"
#include "runtime/planes/plane_context.h"

namespace overlap {

class PlannedMode {
 public:
  // DDP's bucket sizes: a small first unit starts communication early in backward.
  static constexpr int64_t kFirstUnitBytes = int64_t{1} << 20;
  static constexpr int64_t kUnitBytes = int64_t{25} << 20;
  // A unit ends with its negotiation round once it holds this much (launch_units.h).
  static constexpr int64_t kMinUnitBytes = int64_t{1} << 20;

  // Makes the plane for a plan's CUDA tensors (its own communicators, set up when a plan holding
  // CUDA tensors is frozen) in the context given: the planned executor's.
  using CudaPlaneFactory = std::function<std::unique_ptr<CudaPlane>(PlaneContext)>;

  // `executor` and `checks` carry planned collectives and their checks only; `context.rank` and
  // `context.size` are the checks'. `context.complete` receives every operation that finishes,
  // with its outcome. `hosts[r]` names rank r's host in messages. Without `make_cuda_plane`, a
  // plan's CUDA tensors fail with Unavailable.
  PlannedMode(std::unique_ptr<Executor> executor, std::unique_ptr<ControlCollectives> checks,
              PlaneContext context, std::vector<std::string> hosts,
              const CudaPlaneFactory& make_cuda_plane = nullptr);

  bool frozen() const { return frozen_; }

  // Adopts `plan` (one step, in launch order). A plan holding CUDA tensors sets up the CUDA
  // plane here, collectively: every rank freezes at the same agreed round. `already_agreed` holds
  // cache ids that negotiation has already agreed for the step in progress: the first pass skips
  // them (whole-tensor buckets only). `step_time`: how long a step took while learning (sets the
  // patience before asking to unfreeze).
  void Freeze(ExecutablePlan plan, const absl::flat_hash_set<int32_t>& already_agreed,
              absl::Duration step_time);

  // The plan in force (meaningful while frozen()).
  const ExecutablePlan& plan() const { return *plan_; }

  // Checkpoints of the plan in force (runtime/plan/plan_checkpoint.h). Its state between steps:
  // every submission has run through its buckets and been delivered. nullopt while buckets still
  // run (call again: the caller's loop keeps them moving); FailedPrecondition when the program is
  // in the middle of a step (tensors of the next step submitted, or handles not yet complete).
  absl::StatusOr<std::optional<PlanDelays::State>> SaveState() const;
  // Freeze(plan) and continue from `state` (PlanDelays::Check()ed): the next submission of each
  // tensor runs in pass state.passes.
  void Resume(ExecutablePlan plan, PlanDelays::State state, absl::Duration step_time);

  // Drops the plan. Returns, for negotiation, the operations submitted for it and not started,
  // and those whose slices were only partly started (their input is untouched), and, under a
  // delayed plan, every submission still waiting for its delayed results. Started buckets run to
  // completion. What a delayed plan held undelivered is named in the log (a warning on rank 0,
  // info on the others), as discarded on a drop and as left unapplied at shutdown.
  enum class UnfreezeCause { kDrop, kShutdown };
  std::vector<PendingOp> Unfreeze(UnfreezeCause cause = UnfreezeCause::kDrop);

  // True when the plan runs `name` (and the runtime must hand its submissions to Add).
  bool Owns(const std::string& name) const { return frozen_ && entry_of_.contains(name); }
  void Add(PendingOp op);

  // This rank has a Join pending (true) - it contributes zeros to every unit.
  void SetJoined(bool joined);
  // Negotiation agreed the Join. Returns it if it may complete now; otherwise keeps it until a
  // unit's check shows every rank joined.
  std::optional<PendingOp> JoinAgreed(PendingOp join);

  // Starts units, finishes checks and collectives. Operations that must be negotiated again are
  // appended to `renegotiate`. An error means the job cannot continue (a collective failed, or a
  // started unit stalled past OVERLAP_STALL_TIMEOUT_S: it cannot be withdrawn).
  absl::Status Progress(std::vector<PendingOp>* renegotiate);

  // A unit's check found a diverged tensor and this rank has reached the stop it set (every rank
  // stops at the same unit): the runtime must Unfreeze now.
  bool must_unfreeze() const { return must_unfreeze_; }
  // Blocked on the plan (no unit running, and the next one waits for a tensor this rank has not
  // submitted while others are here) for longer than the patience (4 steps, at least 1 s), or for
  // a moment (a quarter step, 20 ms at least) once the program has gone on to its next step
  // without that tensor (a tensor the plan already ran this step was submitted again; not under a
  // delayed plan), or at once when a check has set a stop (see above) this rank cannot reach with
  // the tensors its program submitted: ask (in a round) to drop it. A tensor that stops being
  // submitted (a metric reduced only while warming up) then costs about a step, not the patience.
  // True once per patience interval, so that the caller asks for a round each time.
  bool TakeUnfreezeWish();
  bool wants_unfreeze() const { return wants_unfreeze_; }

  // A started unit has waited on its peers long enough to ask, in a round, which ranks have
  // started it (at the stall warning, at the stall timeout, and every so often in between so that
  // an unreachable peer ends the round with OVERLAP_COLLECTIVE_TIMEOUT_S). True once per probe.
  bool TakeReportWish();
  // Every rank's launch count, from that round: warns or fails naming the ranks. A started unit
  // that a rank which starts nothing more (`starts_nothing_more`, by rank: it has shut down)
  // lacks fails at once.
  void OnReport(const std::vector<uint64_t>& counts, const std::vector<bool>& starts_nothing_more);
  // Another rank has shut down: ask soon, and again every `within` while a started unit waits,
  // which ranks have started it (a rank that shut down may still be finishing its last units).
  void ProbeWithin(absl::Duration within);
  // With no more submissions, this rank would start no planned collective again: nothing is
  // started and unfinished, and the next unit cannot start.
  bool StartsNothingMore() const { return idle() && !CanLaunch(); }

  // Nothing started and unfinished (delayed CUDA results being copied out included).
  bool idle() const {
    return launches_.empty() && delivering_.empty() && plane_.idle() && host_runner_->idle() &&
           (device_runner_ == nullptr || device_runner_->idle()) &&
           (cuda_plane_ == nullptr || cuda_plane_->idle());
  }
  // Nothing started, unfinished or waiting to start.
  bool quiescent() const {
    return idle() && waiting_.empty() && active_.empty() &&
           (delays_ == nullptr || delays_->parked() == 0);
  }
  // No delayed plan, or nothing of it left to run: every copy has gone through its buckets.
  // Shutdown waits for this before it tells the others, because the program does not wait for
  // the last steps' buckets of a delayed plan (their results are due in steps that never come).
  bool delayed_drained() const {
    return delays_ == nullptr ||
           (launches_.empty() && waiting_.empty() && active_.empty() && BacklogEmpty());
  }
  // Bytes a delayed plan holds (PlanDelays::held_bytes), and their share on the GPU; any thread.
  int64_t delayed_bytes() const { return delayed_bytes_.load(std::memory_order_relaxed); }
  int64_t delayed_device_bytes() const {
    return delayed_device_bytes_.load(std::memory_order_relaxed);
  }
  // Bytes of the host buffers kept for reuse by the plan in force (its packed buckets and, under a
  // delayed plan, its copies of the submissions); any thread.
  int64_t buffer_bytes() const { return buffer_bytes_.load(std::memory_order_relaxed); }
  // Bytes of the device buffers kept for reuse by the plan in force (its CUDA tensors' packed
  // buckets); any thread.
  int64_t device_buffer_bytes() const {
    return device_buffer_bytes_.load(std::memory_order_relaxed);
  }

  uint64_t launches() const { return launch_count_; }
  // The whole-tensor buckets' collective timings (DataPlane::timings).
  const std::deque<DataPlane::Timing>& timings() const { return plane_.timings(); }
  const absl::flat_hash_set<int32_t>& planned_ids() const { return planned_ids_; }
  // When Progress must run again even if nothing happens (stall warnings, patience).
  absl::Time NextDeadline() const;
  // Names of tensors in started, unfinished units (for errors at shutdown).
  std::string DescribeStarted() const;
  // What keeps delayed_drained() false: the plan's position, started buckets, and the tensors
  // waiting, partly sent or in line (for the warning of a shutdown that drains too long).
  std::string DescribeDrain() const;
  // A submission of this rank has a bucket it has not started. A rank that has shut down
  // drained will never start it: a collective that finished there had this rank's part.
  bool HasUnstartedBuckets() const { return HasUnlaunched() || !BacklogEmpty(); }

  // Fails every held operation; hands back the submitted, unstarted ones.
  std::vector<PendingOp> FailAll(const absl::Status& status);
  // After a fatal error, once every handle has failed: abandons the CUDA plane's collectives in
  // flight (NCCL: ncclCommAbort).
  void AbortCuda();

 private:
  enum class JoinState { kNone, kJoined, kAllJoined };
  // How long a started unit waits before asking which ranks have started it: soon enough to warn
  // on time, and to notice an unreachable peer through a round that times out.
  static absl::Duration ProbeInterval(const Config& config);
  // A submitted tensor whose first bucket of this pass has started.
  struct ActiveEntry {
    PendingOp op;
    bool diverged_here = false;  // submitted differently here: sent as zeros
    size_t launched = 0;         // its buckets started so far
    // Reduced values waiting to be copied out once every slice is in.
    std::vector<ReducedPiece> pieces;
  };
  struct Launch {
    int bucket = 0;
    std::shared_ptr<const ExecutablePlan> plan;
    std::vector<int> members;                                // entries, in check-bit order
    std::vector<std::shared_ptr<const Response>> responses;  // of the members
    std::vector<uint64_t> check;                             // [diverged entries][joined ranks]
    std::unique_ptr<ControlRequest> request;                 // the check's OR-allreduce
    bool checked = false;
    std::vector<bool> diverged;  // by member, once checked
    // Whole-tensor buckets: names whose collective has not finished, and the finished ones.
    absl::flat_hash_set<std::string> expected;
    std::vector<std::pair<PendingOp, absl::Status>> done;
    std::vector<PendingOp> diverged_here;  // submitted differently here: sent as zeros
    std::unique_ptr<BucketJob> job;        // sliced buckets
    uint64_t number = 0;                   // this launch's place in the sequence, from 1
    int64_t pass = 0;                      // the plan's pass (one per step) it belongs to
    absl::Time started;
    absl::Time checked_at;  // every rank has started it from here on
    absl::Time next_probe;
    bool warned = false;
    bool data_done() const { return job != nullptr ? job->done : expected.empty(); }
  };

  bool CanLaunch() const;
  // Started units whose checks are not in yet.
  int Unchecked() const;
  // Where every rank stops starting units after a check found a diverged tensor or every rank
  // joined, and what it found (the flags of every check up to `at`, combined).
  struct PlanStop {
    uint64_t at = 0;  // the number of the last unit started
    bool diverged = false;
    bool all_joined = false;
  };
  // The number of the last unit of the window of `launch`'s check.
  uint64_t StopFor(const Launch& launch) const;
  // Once this rank has started every unit up to the stop and every check is in: acts on it.
  void ApplyStop();
  // A submitted tensor has buckets not yet started (with no unit running and the next one
  // unable to start, what "blocked on the plan" means).
  bool HasUnlaunched() const;
  // No copy of a delayed plan's submissions waits in line for its entry.
  bool BacklogEmpty() const {
    return std::all_of(backlog_.begin(), backlog_.end(),
                       [](const auto& line) { return line.second.empty(); });
  }
  // The tensor of plan entry `entry`, quoted, for messages.
  std::string QuotedName(int entry) const;
  // The bucket about to start is the first of `entry`'s buckets in the plan.
  bool FirstBucketOf(int entry) const;
  // The program went on without a tensor the next bucket waits for: (an entry submitted for the
  // next step, an entry the next bucket still lacks), or nullopt.
  std::optional<std::pair<int, int>> MovedOn() const;
  absl::Status LaunchNext();
  // Hands a sliced bucket to its device's runner (or, off its period, folds it).
  absl::Status LaunchSliced(Launch* launch);
  // The runner of the tensors of plan bucket `bucket` (its tensors share a device), or null where
  // the CUDA runner could not be made (device_runner_error_ says why).
  BucketRunner* RunnerFor(const ExecutablePlan& plan, int bucket);
  // Makes the CUDA tensors' runner once the CUDA plane is set up.
  void MakeDeviceRunner();
  void FinishSliced(Launch* launch, std::vector<PendingOp>* renegotiate);
  // A delayed plan's bucket is done: keeps its result for the pass, retires finished copies.
  void FinishDelayed(Launch* launch, std::vector<PendingOp>* renegotiate);
  void OnChecked(Launch* launch);
  void Finish(Launch* launch, std::vector<PendingOp>* renegotiate);
  void OnDataDone(PendingOp& op, const absl::Status& status);
  // The context of the planes this executor makes: `context`'s, with the planned executor's
  // settings (PlaneConfig) and completions through OnDataDone.
  PlaneContext PlanesContext(const PlaneContext& context);
  // At a freeze (nothing of the old plan in flight): frees the error-feedback residuals of
  // `old_plan`'s compressed buckets that `new_plan` has no bucket for. They are keyed by their
  // slices, so no other bucket would read them, and each replaced plan (auto's trials, a re-plan
  // on drift) would otherwise keep up to a gradient's worth on its device.
  void ReleaseResiduals(const ExecutablePlan& old_plan, const ExecutablePlan& new_plan);
  void Advance();
  // Delayed plans: moves `entry`'s next copy into the plan once its previous one is through.
  void Feed(int entry);
  // Delayed plans: completes the parked operations whose results are in.
  void Deliver();
  void UpdateHeldBytes();
  // Completes the delayed CUDA deliveries whose copies are done.
  absl::Status ProgressDelivering();

  const Config config_;
  const int rank_;
  const int size_;
  const std::vector<std::string> hosts_;
  Timeline* const timeline_;
  const DataPlane::CompleteFn complete_;
  std::unique_ptr<Executor> executor_;
  const std::unique_ptr<ControlCollectives> checks_;
  DataPlane plane_;
  // Whole-tensor buckets' CUDA tensors: a plane of their own, set up at the first freeze of a
  // plan that holds some; null without a factory.
  std::unique_ptr<CudaPlane> cuda_plane_;
  // Sliced buckets of host tensors, and of CUDA tensors (over the CUDA plane's executor, made at
  // the first freeze of a plan that slices some; null until then or when the plane failed).
  std::unique_ptr<BucketRunner> host_runner_;
  CompressionStage* const compression_;  // the runtime's; compressed plan buckets
  std::unique_ptr<BucketRunner> device_runner_;
  absl::Status device_runner_error_;
  // A delayed plan's CUDA state and deliveries (PlanDelays), on a stream of their own; made at
  // the first freeze of a delayed plan holding CUDA tensors. Outlives every PlanDelays.
  std::unique_ptr<BufferOps> delay_ops_;
  // Delayed CUDA results copied out, completed once their fence passes.
  struct Delivering {
    std::vector<PendingOp> ops;
    std::vector<std::shared_ptr<DeviceMemory>> reads;  // the results they read, held till then
    std::unique_ptr<Work> fence;
  };
  std::deque<Delivering> delivering_;
  // Called between the pieces of long host copies, so that the collectives in flight advance.
  const std::function<void()> poke_;

  bool frozen_ = false;
  std::shared_ptr<const ExecutablePlan> plan_;
  absl::flat_hash_map<std::string, int> entry_of_;
  absl::flat_hash_set<int32_t> planned_ids_;
  absl::flat_hash_set<int32_t> skip_;  // first pass only
  int next_bucket_ = 0;
  int64_t pass_ = 0;                    // passes started since the plan was frozen
  std::unique_ptr<PlanDelays> delays_;  // delayed plans only
  absl::flat_hash_map<int, std::deque<PendingOp>> backlog_;  // delayed plans: copies in line
  std::atomic<int64_t> delayed_bytes_{0};
  std::atomic<int64_t> delayed_device_bytes_{0};
  bool deliver_due_ = false;  // results or submissions arrived: Progress delivers
  absl::flat_hash_map<int, PendingOp> waiting_;   // by entry: submitted, no bucket started
  absl::flat_hash_map<int, ActiveEntry> active_;  // by entry: some bucket started
  std::atomic<int64_t> buffer_bytes_{0};
  std::atomic<int64_t> device_buffer_bytes_{0};
  std::deque<Launch> launches_;
  uint64_t launch_count_ = 0;
  bool must_unfreeze_ = false;
  std::optional<PlanStop> stop_;
  absl::Status stalled_;  // set by OnReport: the job cannot continue
  JoinState join_ = JoinState::kNone;
  std::optional<PendingOp> held_join_;

  absl::Duration patience_ = absl::Seconds(1);
  absl::Duration moved_on_grace_ = absl::Milliseconds(20);
  absl::Time blocked_since_ = absl::InfiniteFuture();
  bool blocked_warned_ = false;
  bool wants_unfreeze_ = false;
  absl::Time last_wish_ = absl::InfinitePast();
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_PLANNED_MODE_H_
