// overlap: the public C++ API of the data-parallel training runtime.
//
// A training program calls Init() once per process, submits gradients for averaging as soon as
// backward produces them, waits on the returned handles before the optimizer step, and calls
// Shutdown() at the end. Every rank must submit the same named tensors with the same shapes,
// dtypes and ops; the order and timing may differ between ranks. A background coordinator thread
// learns which tensors are ready on every rank and runs the collectives, fused where possible.
//
// Threading: every function may be called from any thread. Handles may be waited on from any
// thread. Completion callbacks run on the runtime's coordinator thread and must not block.
//
// Errors are absl::Status values whose message names the rank, the tensor and the cause, for
// example "rank 2: allreduce 'fc1.weight': shape mismatch: rank 0 submitted [128,784], rank 2
// submitted [128,785]". A mismatch reaches every rank that submitted the tensor; a failed peer or
// network fails every pending handle within OVERLAP_COLLECTIVE_TIMEOUT_S; nothing hangs.
#ifndef OVERLAP_RUNTIME_OVERLAP_H_
#define OVERLAP_RUNTIME_OVERLAP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/device.h"
#include "collectives/dtype.h"
#include "runtime/config.h"

namespace overlap {

// A view of caller-owned memory. The memory must stay valid and untouched until the handle of
// the operation that uses it completes.
//
// CUDA tensors: `data` is a device pointer on `device`, and `stream` (a cudaStream_t) is the
// stream the producer wrote it on, nullptr for the legacy default stream. The runtime's copies and
// collectives wait on an event recorded on that stream, so the program need not synchronise
// before submitting; when the handle completes, the result is on the device and visible to every
// stream. Every tensor of one operation, input and output, must be on the same device.
struct Tensor {
  void* data = nullptr;
  size_t capacity_bytes = 0;  // bytes available at `data`; must cover the shape
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  Device device;           // where `data` lives; the CPU by default
  void* stream = nullptr;  // CUDA tensors: the producer's cudaStream_t

  int64_t NumElements() const;
  size_t ByteSize() const { return static_cast<size_t>(NumElements()) * DataTypeSize(dtype); }
};

// A Tensor over `data` whose capacity is exactly the shape's size.
Tensor MakeTensor(void* data, DataType dtype, std::vector<int64_t> shape);
Tensor MakeTensor(float* data, std::vector<int64_t> shape);
Tensor MakeTensor(double* data, std::vector<int64_t> shape);
Tensor MakeTensor(int32_t* data, std::vector<int64_t> shape);
Tensor MakeTensor(int64_t* data, std::vector<int64_t> shape);

namespace internal {
class HandleState;
}  // namespace internal

// The completion of one submitted operation. Copyable; all copies refer to the same operation.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<internal::HandleState> state) : state_(std::move(state)) {}

  // True once the operation finished, successfully or not. Never blocks.
  bool Poll() const;

  // Blocks until the operation finishes or `timeout` passes. Returns the operation's status, or
  // DeadlineExceeded naming the tensor if it is still running (the operation goes on; wait again).
  absl::Status Wait(absl::Duration timeout) const;

  // Blocks until the operation finishes, and returns its status. This ends: the runtime fails
  // stalled operations after OVERLAP_STALL_TIMEOUT_S and lost peers after
  // OVERLAP_COLLECTIVE_TIMEOUT_S. As a backstop, should it not, the wait gives up after the sum
  // of both plus 30 s with DeadlineExceeded saying so (a bug in overlap, to report); the
  // operation goes on, so its buffers must stay allocated until Poll() says it ended.
  absl::Status Wait() const;

  // The result of an operation whose output size is known only after negotiation (Allgather,
  // ReduceScatter, Alltoall): memory owned by the handle. Empty for the other operations and
  // before the operation succeeded.
  const Tensor& output() const;

  // Alltoall: how many first-dimension rows came from each rank.
  const std::vector<int64_t>& received_splits() const;

  // The name the operation was submitted under.
  const std::string& name() const;

  // False for an allreduce with a delayed update or period (AllreduceOptions::delay, period)
  // whose output holds no update this step (it was zeroed); true for every other operation.
  bool has_update() const;

 private:
  std::shared_ptr<internal::HandleState> state_;
};

// Called once when the operation finishes, on the coordinator thread; must not block.
using DoneCallback = std::function<void(const absl::Status&)>;

// Every member of the options structs has an initializer, so that `{ReduceOp::kSum}` names the
// fields it sets and leaves the rest at their defaults without a -Wmissing-field-initializers
// warning in the caller's build.
struct AllreduceOptions {
  // kAdasum: the adaptive summation of collectives/adasum.h, per tensor (also within a grouped
  // allreduce), for floating-point tensors on a power-of-two number of ranks (InvalidArgument
  // otherwise, at submission). It stays negotiated (or in an observed plan): scheduled plans take
  // sums and averages only. CUDA tensors need OVERLAP_EXECUTOR=mpi (staged through host memory).
  ReduceOp op = ReduceOp::kAverage;
  // Gradient compressor with error feedback, e.g. "fp16", "topk:ratio=0.01", "covap:R=4",
  // "powersgd:rank=4" (docs/compression.md); empty means OVERLAP_COMPRESSION, whose default is
  // "none". Needs float32 tensors and op kSum or kAverage. Every rank must use the same one.
  std::string compression{};
  // Each rank's input is multiplied by prescale before the reduction and the result by postscale
  // after it (floating-point dtypes only; integer dtypes require 1.0).
  double prescale = 1.0;
  double postscale = 1.0;
  // Delayed update and update period (DeFT; runtime/planes/delay_line.h has the full contract).
  // With delay d, the handle of this tensor's n-th submission receives the reduced gradient of its
  // (n - d)-th. With period p and phase f, only submissions with n % p == f communicate, sending
  // their input plus what the skipped ones accumulated. Whenever no result is due, the output is
  // zeroed and Handle::has_update() is false: skip the layer's update. float32 or float64 CPU
  // tensors, op kSum or kAverage; every rank must use the same schedule for a tensor, and keep it.
  int delay = 0;   // 0..16
  int period = 1;  // 1..64
  int phase = 0;   // 0..period-1
  // This tensor is a gradient that the program applies as an update, so a delayed plan (DeFT
  // with staleness or update periods: OVERLAP_STALENESS, OVERLAP_MAX_PERIOD) may deliver it late,
  // as the delay above does. Off, the default, the handle always carries this submission's own
  // result, whatever the plan: a metric, SyncBatchNorm's statistics, anything the step reads at
  // once. The distributed optimizers of overlap.torch and overlap.tensorflow set it for the
  // gradients they reduce. Every rank must set it alike for a tensor.
  bool plan_may_delay = false;
  // The program built this input without waiting for the result of any operation it submitted
  // (a gradient of a traced step with no collective upstream of it: overlap.tensorflow works this
  // out from the graph). The observed plan cuts its launch units wherever the program saw an
  // operation finish between two submissions, since the later one may have needed that result;
  // this submission needs none, so no cut is made before it. TensorFlow's waiter thread sees
  // every allreduce finish as soon as it does, while backward goes on submitting: without this,
  // a traced step froze into about one unit per two gradients (bert-base: 105 units for 204
  // tensors), each paying a collective's fixed cost. Off, the default, is always safe.
  bool independent_of_results = false;
  // The program's optimizer looks ahead on this gradient under a delayed plan (the adapters'
  // default staleness correction): the optimizer steps that costs (scheduler/lookahead.h) are
  // charged to the delayed plans the planner weighs. Changes no result; every rank alike.
  bool looks_ahead = false;
  // The process set to reduce over (see AddProcessSet); 0, the global set, is every rank. On
  // another set, averages divide by the set's size, and compression, delay and period are refused.
  int process_set = 0;
  DoneCallback on_done{};
};

// On a process set other than 0, "rank" in the comments below means the position in the set
// (ProcessSetRank), and "every rank" its members; except BroadcastOptions::root, a global rank.
struct AllgatherOptions {
  int process_set = 0;
  DoneCallback on_done{};
};

struct BroadcastOptions {
  int root = 0;  // a global rank (Rank()), a member of the process set, as in Horovod
  int process_set = 0;
  DoneCallback on_done{};
};

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kAverage;
  double prescale = 1.0;
  double postscale = 1.0;
  int process_set = 0;
  DoneCallback on_done{};
};

struct AlltoallOptions {
  // Rows of the first dimension sent to each rank, in rank order; empty means equal parts (the
  // first dimension must then divide by the number of ranks).
  std::vector<int64_t> splits{};
  int process_set = 0;
  DoneCallback on_done{};
};

// Starts the runtime on every rank of MPI_COMM_WORLD (initialising MPI if the program has not),
// with the configuration from OVERLAP_* environment variables or the one given. Collective: every
// rank must call it. Fails with a clear message on a bad configuration or when a peer does not
// connect within start_timeout_s; FailedPrecondition if already initialised.
absl::Status Init();
absl::Status Init(const Config& config);
// Init with settings given in code over the environment's (Config::FromEnvironment): what the
// adapters' init(planner=..., staleness=...) calls, through the C API.
absl::Status InitWithSettings(const std::vector<Config::Setting>& settings);

// The configuration the default runtime runs with; FailedPrecondition before Init and after
// Shutdown.
absl::StatusOr<Config> CurrentConfig();

// Finishes pending operations, stops the coordinator thread and releases MPI resources: the
// process sets' runtimes first (in id order), then the global one. Collective: every rank must
// call it. Safe to call twice (the second call is a no-op). From the call on this rank submits
// nothing more, so an operation the other ranks wait on and this rank never submitted fails on
// them at once (within a negotiation round), naming this rank, as under Horovod: a rank whose
// program ends early does not keep the others waiting out the timeouts.
absl::Status Shutdown();

// Not collective: ends this rank's part in the job at once, for a program about to exit after an
// error (an uncaught exception), where Shutdown would wait up to OVERLAP_COLLECTIVE_TIMEOUT_S for
// ranks that are waiting on this one. This rank's pending and later operations fail with
// `reason`; the other ranks' waits fail within seconds, naming this rank (its control connection
// closed). MPI is not finalised: the process must exit, non-zero. Shutdown afterwards returns at
// once with the reason. A no-op before Init.
void Abort(absl::string_view reason);

bool IsInitialized();

// The calling process's position; -1 before Init and after Shutdown.
int Rank();
int Size();
int LocalRank();  // among the ranks on this host
int LocalSize();

// Reduces `input` across ranks into `output` (which may be `input` itself: in place). Shapes and
// dtypes of input and output must match.
absl::StatusOr<Handle> Allreduce(const std::string& name, const Tensor& input, const Tensor& output,
                                 const AllreduceOptions& options = {});

// Reduces several tensors as one unit: they are negotiated together and travel in one fused
// collective. One handle completes when all are done. `names`, `inputs` and `outputs` have equal
// lengths; the group is identified by its names.
absl::StatusOr<Handle> GroupedAllreduce(const std::vector<std::string>& names,
                                        const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& outputs,
                                        const AllreduceOptions& options = {});

// Concatenates every rank's `input` along the first dimension, in rank order. First dimensions
// may differ between ranks; the other dimensions must match. Result in handle.output().
absl::StatusOr<Handle> Allgather(const std::string& name, const Tensor& input,
                                 const AllgatherOptions& options = {});

// Copies root's `input` into every rank's `output` (the same tensor for in place).
absl::StatusOr<Handle> Broadcast(const std::string& name, const Tensor& input, const Tensor& output,
                                 const BroadcastOptions& options = {});

// Reduces `input` across ranks and leaves rank r with rows [r*q + min(r, m), ...) of the first
// dimension, where q and m are the quotient and remainder of dim0 / size (earlier ranks get one
// extra row). Result in handle.output().
absl::StatusOr<Handle> ReduceScatter(const std::string& name, const Tensor& input,
                                     const ReduceScatterOptions& options = {});

// Sends options.splits[r] rows of `input` to rank r and receives the rows every rank sends here,
// concatenated in rank order. Result in handle.output(); row counts in handle.received_splits().
absl::StatusOr<Handle> Alltoall(const std::string& name, const Tensor& input,
                                const AlltoallOptions& options = {});

// The error-feedback residuals of every compressed tensor on this rank, the state of its
// delayed updates (each tensor's schedule, submission count, residual of skipped steps and
// reduced results not yet delivered; Save waits for reductions still running) and the
// scheduled plan in force with its delayed state (runtime/plan/plan_checkpoint.h), for a
// checkpoint, and their restoration (with the same compressor configurations and planner) when
// training resumes: a run restored at step k, in this process or a fresh one, goes on exactly
// as the saved one would have, under the saved plan from its first step. Save and restore on
// every rank, between steps: once every handle of the step has completed and before the next
// step's first submission. Restore returns once the restored plan is in force (its
// CurrentPlanSchedule readable), or FailedPrecondition after OVERLAP_COLLECTIVE_TIMEOUT_S.
// FailedPrecondition before Init, and for a save in the middle of a
// step (naming the tensors) or a restore of a scheduled plan under OVERLAP_PLANNER=observed;
// InvalidArgument on bytes that are not such a snapshot or that do not fit together.
absl::StatusOr<std::string> SaveCompressionState();
absl::Status RestoreCompressionState(const std::string& snapshot);

// Completes when every rank of `process_set` (0: every rank) has called Barrier.
absl::StatusOr<Handle> Barrier(int process_set = 0);

// For ranks with uneven data: a rank that has run out calls Join and keeps contributing zeros to
// the allreduces the other ranks still submit (averages still divide by Size()). Completes on
// every rank when all ranks have joined. Only allreduce may run while some ranks have joined.
// The global set's operations only, as in Horovod: process sets do not see it.
absl::StatusOr<Handle> Join();

// Process sets, as Horovod's: subsets of the ranks whose collectives run among their members
// only, concurrently with the global set's and with each other's. Each has its own
// sub-communicator and its own complete runtime on its members (negotiation, fusion, stall
// inspector, timeouts), which runs negotiated and observed-plan execution: scheduled plans, step
// markers, delayed updates, the timeline and Stats() are the global set's only. Tensor names
// are per set: the same name may be in flight in two sets at once.
//
// AddProcessSet and RemoveProcessSet are collective over every rank (members or not), called in
// the same order everywhere; each returns only when the set is ready, or gone, on every rank.
// Errors are the same on every rank.
//
// Registers the set of global `ranks` (sorted, unique, in [0, Size()), not all of them, not
// already a set) and returns its id: 1 for the first, then one more for each set added (ids are
// never reused). InvalidArgument naming the offending rank and the cause, or the ranks that
// asked for different sets; FailedPrecondition before Init.
absl::StatusOr<int> AddProcessSet(const std::vector<int>& ranks);

// Shuts set `id`'s runtime down (an operation not submitted by every member fails) and forgets
// the set; later submissions to it fail naming it removed. InvalidArgument for 0, an unknown or
// removed id, or ranks that asked to remove different sets.
absl::Status RemoveProcessSet(int id);

// Queries, on any rank: the registered ids (0 first), a set's global ranks and size, and this
// rank's position in it (Rank() for 0). NotFound for an unknown id; ProcessSetRank fails with
// FailedPrecondition on a rank that is not a member; all fail before Init.
std::vector<int> ProcessSetIds();
absl::StatusOr<std::vector<int>> ProcessSetRanks(int id);
absl::StatusOr<int> ProcessSetSize(int id);
absl::StatusOr<int> ProcessSetRank(int id);

// Step markers: where each training step's forward, backward and optimizer update begin. A
// program (or a framework adapter's hooks) calls them in that order every step, on every rank.
// With them the runtime measures per-layer compute windows (when each gradient is submitted,
// when each handle is first waited on in the next forward) and, when OVERLAP_PLANNER names a
// scheduler planner, plans the communication from those measurements (docs/tuning.md).
// Without them the runtime still works, with the plan it observes (OVERLAP_PLANNER=observed).
// FailedPrecondition before Init or after Shutdown.
absl::Status StartForward();
absl::Status StartBackward();
absl::Status StartUpdate();
// Optional, beside the markers: `ms` of the program's optimizer updating parameters, noted as
// it happens (once per update call, wherever it runs: after StartUpdate, or at the next
// forward when each layer is updated just before it). The planner prices a delayed plan's
// look-ahead steps (scheduler/lookahead.h) from it; the adapters' optimizers note it.
// InvalidArgument for a negative or non-finite `ms`; FailedPrecondition before Init.
absl::Status NoteUpdateTime(double ms);

// Starts writing the timeline (a Chrome trace, docs/architecture.md) to `path`, replacing the one
// being written, if any; StopTimeline closes it. Local to this rank, like OVERLAP_TIMELINE.
absl::Status StartTimeline(const std::string& path);
absl::Status StopTimeline();

// What the runtime has done on this rank so far, for tests, benchmarks and logs.
struct RuntimeStats {
  // Rounds include the liveness probes a frozen plan asks for while a rank waits on its peers;
  // operations agreed counts only what negotiation actually agreed, so it stays still while every
  // operation runs on a plan.
  int64_t negotiation_rounds = 0;
  int64_t negotiated_operations = 0;
  // Memory held for delayed updates and update periods: residuals plus reduced results not yet
  // delivered (runtime/planes/delay_line.h bounds it per tensor).
  int64_t delayed_bytes = 0;
  // The part of delayed_bytes on the GPU: a scheduled plan's CUDA tensors' copies, residuals and
  // results (runtime/planes/plan_delays.h).
  int64_t delayed_device_bytes = 0;
  // Host buffers the plan in force keeps for reuse across steps: its packed buckets and, under a
  // delayed plan, its copies of the submissions (runtime/planes/buffer_pool.h). About one
  // gradient's worth for a sliced plan.
  int64_t plan_buffer_bytes = 0;
  // The same on the GPU: the packed buckets of the plan's CUDA tensors
  // (runtime/planes/bucket_runner.h).
  int64_t plan_device_buffer_bytes = 0;
  int64_t planned_launches = 0;  // units the frozen plan started without negotiation
  int64_t plans_frozen = 0;      // plans adopted (see OVERLAP_PLAN_AFTER_STEPS)
  int64_t plans_dropped = 0;     // plans given up (divergence, a changed step, a blocked rank)
  int64_t planned_tensors = 0;   // tensors in the plan in force; 0 while negotiating everything
  // Its launch units (buckets). An observed plan's are runs of tensors between which the program
  // saw no operation finish (a Wait returned, a Poll of true, a done callback), ending with a
  // negotiation round once they hold 1 MiB, and at most DDP's sizes (1 MiB first, then 25 MiB).
  int64_t planned_units = 0;
  int64_t steps = 0;  // forwards marked with StartForward
  // The scheduled plan in force, if any (OVERLAP_PLANNER other than observed): the planner that
  // made it ("auto:dear" for auto), its number of buckets, the simulator's iteration time for it
  // on the measured profile and fitted cost, and the step at which it took effect. auto that
  // measured the observed plan faster than every candidate says "auto:observed", with no buckets
  // and no prediction: the observed plan runs again (planned_units). After a scheduled plan is
  // dropped these say none is in force (planner "", no buckets, prediction 0, update cycle 1),
  // but plan_adopted_step keeps the step at which the last one took effect.
  std::string planner;
  int64_t plan_buckets = 0;
  // Of them, those that compress their payload (the default compression, OVERLAP_COMPRESSION,
  // where a plan can run it; docs/scheduler.md, "Compression").
  int64_t plan_compressed_buckets = 0;
  // Of them, those whose allreduce runs in two link classes, within each host and then across
  // hosts (OVERLAP_TWO_STAGE; docs/tuning.md, "Two-stage buckets").
  int64_t plan_two_stage_buckets = 0;
  double predicted_step_ms = 0;
  int64_t plan_adopted_step = -1;
  int64_t plans_scheduled = 0;  // scheduled plans adopted (first plan and re-plans)
  int64_t plans_refused = 0;    // broadcast plans that some rank refused
  // The plan's update semantics (scheduler/plan.h): true when each layer may be updated once its
  // own buckets are in (bytescheduler, usbyte, dear), false when one optimizer step follows the
  // whole backward (wfbp, fusion, mgwfbp).
  bool plan_layerwise_update = false;
  // The plan's mean staleness in steps, weighted by bytes: the sum over buckets of their share of
  // the gradient x (delay + (period - 1) / 2). 0 for a synchronous plan. A program that corrects
  // its optimizer for stale gradients (examples/mnist_mlp.cc) reads it.
  double plan_mean_staleness = 0;
  // Steps after which the plan's pattern of communicating buckets repeats: the least common
  // multiple of its buckets' update periods (1 without periods). A step time of such a plan means
  // something only over whole cycles: short and long steps alternate.
  int64_t plan_update_cycle = 1;
  // The link cost fitted for planning, channel 0 allreduce: t = alpha + beta x bytes.
  double fitted_alpha_us = 0;
  double fitted_beta_us_per_mb = 0;
  // The same for the two-stage allreduce, where ranks share hosts (OVERLAP_TWO_STAGE); 0 where no
  // two-stage form was fitted.
  double fitted_two_stage_alpha_us = 0;
  double fitted_two_stage_beta_us_per_mb = 0;
  // Plannings that probed the links and fitted that cost, and plannings that kept the last fit
  // because the collectives measured since agreed with it (a re-plan after a drift in compute).
  int64_t link_cost_fits = 0;
  int64_t link_cost_reuses = 0;
  // Drifts (OVERLAP_REPLAN_DRIFT) after which planning from the drifted step made the plan in
  // force again, so it stayed, nothing dropped (runtime/plan/plan_scheduler.h, step 3).
  int64_t plan_drifts_kept = 0;
  // auto's trials (OVERLAP_AUTO_TRIALS): each tried plan's measured step, the plan it started
  // from first where it was measured, "auto:observed 560.2 ms, auto:dear 545.7 ms,
  // auto:bytescheduler 528.8 ms"; and true while more are to come (a benchmark waits for the
  // plan to settle).
  std::string plan_trials;
  bool plan_trials_pending = false;
  // What moves this rank's CUDA tensors, once the first one was agreed: "nccl" or
  // "mpi+host-staging" (OVERLAP_EXECUTOR); empty before.
  std::string cuda_executor;
  // Hosts the hierarchical allreduce spans (OVERLAP_HIERARCHICAL_ALLREDUCE); 0 while allreduces
  // are flat (not asked for, or the layout does not allow it: rank 0 logs why).
  int64_t hierarchy_hosts = 0;
  // The communication/computation ratio every rank agreed on for a compression parameter derived
  // from it (OVERLAP_COMPRESSION=covap:R=auto: R = ceil(ratio), 1..64); 0 until agreed, and when
  // nothing asks for it.
  double comm_compute_ratio = 0;
  // The adaptive allreduce (OVERLAP_ADAPTIVE_ALLREDUCE): link probes run, allreduces that ran
  // weighted by the measured rates, and the last probe's rate and share per host, e.g.
  // "h1 117.3 MB/s 33%, h2 58.1 MB/s 0%, ..." (shares absent while allreduces run unweighted;
  // "late 48 ms" after a straggler, whose allreduces ended that much sooner than the median's).
  int64_t link_probes = 0;
  int64_t weighted_allreduces = 0;
  std::string link_rates;
  // The program's optimizer time noted with NoteUpdateTime (overlap.torch's optimizer notes
  // each update; the Keras DistributedOptimizer each one apply() runs at once, not those
  // update_at_forward defers): how many notes, and their sum in ms.
  int64_t update_times_noted = 0;
  double update_ms_noted = 0;
};
// Zeros before Init and after Shutdown.
RuntimeStats Stats();

// The delays and update periods the scheduled plan in force gives each gradient, for a program
// that corrects its optimizer for stale gradients (weight prediction needs each tensor's own
// schedule, not only the plan's mean staleness; docs/scheduler.md, "Staleness correction").
struct ScheduledSlice {
  int64_t offset = 0;  // elements [offset, offset + count) of the tensor
  int64_t count = 0;
  int delay = 0;   // its result reaches the program `delay` submissions later
  int period = 1;  // it communicates in the passes k with k % period == phase
  int phase = 0;
};
struct PlanSchedule {
  // Changes whenever a plan is adopted or dropped (0 before the first); a caller re-reads the
  // rest only when it changed.
  int64_t generation = 0;
  // The plan runs a tensor's submission of the step marked by forward marker first_step
  // (RuntimeStats::steps) as pass first_pass, and each later step's as the next pass.
  int64_t first_step = 0;
  int64_t first_pass = 0;
  // Tensors with a delay or an update period in some slice, by name; empty when the plan in force
  // is synchronous, or there is none.
  std::map<std::string, std::vector<ScheduledSlice>> tensors;
};
// The schedule of the plan in force on this rank; an empty one before Init and after Shutdown.
PlanSchedule CurrentPlanSchedule();
// Cheap enough for every step: PlanSchedule::generation, and the forward markers so far
// (RuntimeStats::steps); zeros before Init and after Shutdown.
struct PlanClock {
  int64_t generation = 0;
  int64_t step = 0;
};
PlanClock CurrentPlanClock();

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_OVERLAP_H_
