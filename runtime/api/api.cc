// The public functions of runtime/overlap.h: thin wrappers over the process's default Runtime.
#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "runtime/overlap.h"
#include "runtime/api/process_sets.h"
#include "runtime/api/runtime.h"

namespace overlap {
namespace {

// The default runtime of this process and its process sets; the only process-wide state overlap
// keeps.
struct DefaultRuntime {
  absl::Mutex mu;
  std::shared_ptr<Runtime> runtime ABSL_GUARDED_BY(mu);
  std::shared_ptr<ProcessSets> sets ABSL_GUARDED_BY(mu);  // set while runtime is
};

DefaultRuntime& Default() {
  static DefaultRuntime* instance = new DefaultRuntime();
  return *instance;
}

std::shared_ptr<Runtime> Current() {
  DefaultRuntime& d = Default();
  absl::MutexLock lock(&d.mu);
  return d.runtime;
}

absl::Status NotRunning(OpKind kind, absl::string_view name) {
  return absl::FailedPreconditionError(absl::StrCat(
      OpKindName(kind), " '", name,
      "': overlap is not initialised (call overlap::Init() first, and not after Shutdown())"));
}

absl::StatusOr<Handle> Submit(PendingOp op, DoneCallback on_done) {
  std::shared_ptr<Runtime> runtime = Current();
  if (runtime == nullptr) return NotRunning(op.request.kind, op.request.name);
  return runtime->Submit(std::move(op), std::move(on_done));
}

std::shared_ptr<ProcessSets> CurrentSets() {
  DefaultRuntime& d = Default();
  absl::MutexLock lock(&d.mu);
  return d.sets;
}

std::string Describe(const PendingOp& op) {
  return absl::StrCat(OpKindName(op.request.kind), " '", op.request.name, "'");
}

// Submits `op` to the runtime of `process_set`, or fails naming the rank, the operation and why
// this rank cannot submit to that set.
absl::StatusOr<Handle> SubmitTo(int process_set, PendingOp op, DoneCallback on_done) {
  std::shared_ptr<ProcessSets> sets = CurrentSets();
  // Set 0, or no runtime at all: Submit runs it, or says overlap is not initialised.
  if (process_set == 0 || sets == nullptr) return Submit(std::move(op), std::move(on_done));
  absl::StatusOr<std::shared_ptr<Runtime>> runtime = sets->Find(process_set, Describe(op));
  if (!runtime.ok()) return runtime.status();
  return (*runtime)->Submit(std::move(op), std::move(on_done));
}

// What a process set's allreduce cannot do: runtime compression (its residuals would be missing
// from SaveCompressionState) and delayed updates (the planner's, of the global set).
absl::Status CheckSetAllreduce(const AllreduceOptions& options, const std::string& what) {
  if (options.process_set == 0) return absl::OkStatus();
  if (options.delay != 0 || options.period != 1 || options.phase != 0 ||
      !options.compression.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", Rank(), ": allreduce '", what, "': process set ", options.process_set,
        ": compression and delayed updates (delay, period, phase) run on the global process set "
        "0 only"));
  }
  return absl::OkStatus();
}

TensorMeta MetaOf(const Tensor& t) { return TensorMeta{t.dtype, t.shape}; }

// The reduction fields shared by AllreduceOptions and ReduceScatterOptions.
template <typename Options>
void SetReduction(const Options& options, Request* request) {
  request->op = options.op;
  request->prescale = options.prescale;
  request->postscale = options.postscale;
}

PendingOp SingleTensorOp(OpKind kind, const std::string& name, const Tensor& input) {
  PendingOp op;
  op.request.kind = kind;
  op.request.name = name;
  op.request.tensors.push_back(MetaOf(input));
  op.inputs.push_back(input);
  return op;
}

}  // namespace

// Every rank reaches Runtime::Start even with a bad configuration, so that all ranks can
// agree on the failure instead of some waiting for the others.
absl::Status StartDefault(absl::StatusOr<Config> config) {
  // Debian's Abseil is built without NDEBUG, so every Mutex::Lock also maintained a lock-order
  // graph for deadlock detection: 5-6% of a step's CPU with 50 small gradients. Lock order is
  // checked where it belongs, under ThreadSanitizer (tools/sanitize.sh).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  DefaultRuntime& d = Default();
  absl::MutexLock lock(&d.mu);
  if (d.runtime != nullptr) {
    return absl::FailedPreconditionError("overlap::Init: already initialised");
  }
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Start(std::move(config));
  if (!runtime.ok()) return runtime.status();
  absl::StatusOr<std::unique_ptr<ProcessSets>> sets =
      ProcessSets::Create((*runtime)->config(), (*runtime)->rank(), (*runtime)->size());
  if (!sets.ok()) {
    (void)(*runtime)->Shutdown();
    return sets.status();
  }
  d.runtime = std::move(*runtime);
  d.sets = std::move(*sets);
  return absl::OkStatus();
}

absl::Status Init() { return StartDefault(Config::FromEnvironment()); }

absl::Status InitWithSettings(const std::vector<Config::Setting>& settings) {
  return StartDefault(Config::FromEnvironment(settings));
}

absl::StatusOr<Config> CurrentConfig() {
  std::shared_ptr<Runtime> runtime = Current();
  if (runtime == nullptr) {
    return absl::FailedPreconditionError("overlap::CurrentConfig: overlap is not initialised");
  }
  return runtime->config();
}

absl::Status Init(const Config& config) {
  absl::Status valid = config.Validate();
  if (!valid.ok()) return StartDefault(valid);
  return StartDefault(config);
}

absl::Status Shutdown() {
  std::shared_ptr<Runtime> runtime;
  std::shared_ptr<ProcessSets> sets;
  {
    DefaultRuntime& d = Default();
    absl::MutexLock lock(&d.mu);
    runtime = std::move(d.runtime);
    sets = std::move(d.sets);
  }
  if (runtime == nullptr) return absl::OkStatus();
  // The sets' runtimes first: they may wait on members still finishing the global set's work.
  // But the global runtime announces now that this rank will submit nothing more: a rank waiting
  // on it there fails at once instead of keeping it waiting in a set's shutdown.
  runtime->RequestShutdown();
  absl::Status sets_down = sets != nullptr ? sets->ShutdownAll() : absl::OkStatus();
  absl::Status down = runtime->Shutdown();
  return down.ok() ? sets_down : down;
}

void Abort(absl::string_view reason) {
  std::shared_ptr<Runtime> runtime = Current();
  if (runtime == nullptr) return;
  const absl::Status status = absl::AbortedError(
      absl::StrCat("rank ", runtime->rank(), ": ", reason,
                   "; this rank left the job without waiting for the others"));
  std::shared_ptr<ProcessSets> sets = CurrentSets();
  if (sets != nullptr) sets->AbortAll(status);
  runtime->Abort(status);
}

bool IsInitialized() { return Current() != nullptr; }

int Rank() {
  std::shared_ptr<Runtime> r = Current();
  return r ? r->rank() : -1;
}
int Size() {
  std::shared_ptr<Runtime> r = Current();
  return r ? r->size() : -1;
}
int LocalRank() {
  std::shared_ptr<Runtime> r = Current();
  return r ? r->local_rank() : -1;
}
int LocalSize() {
  std::shared_ptr<Runtime> r = Current();
  return r ? r->local_size() : -1;
}

namespace {
absl::Status MarkPhase(StepPhase phase) {
  std::shared_ptr<Runtime> runtime = Current();
  if (runtime == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step marker ", StepPhaseName(phase),
        ": overlap is not initialised (call overlap::Init() first, and not after Shutdown())"));
  }
  return runtime->MarkPhase(phase);
}
}  // namespace

absl::Status StartForward() { return MarkPhase(StepPhase::kForward); }
absl::Status StartBackward() { return MarkPhase(StepPhase::kBackward); }
absl::Status StartUpdate() { return MarkPhase(StepPhase::kUpdate); }

absl::Status NoteUpdateTime(double ms) {
  std::shared_ptr<Runtime> runtime = Current();
  if (runtime == nullptr) {
    return absl::FailedPreconditionError(
        "NoteUpdateTime: overlap is not initialised (call overlap::Init() first, and not after "
        "Shutdown())");
  }
  return runtime->NoteUpdateTime(ms);
}

absl::Status StartTimeline(const std::string& path) {
  std::shared_ptr<Runtime> runtime = Current();
  if (runtime == nullptr) {
    return absl::FailedPreconditionError("start_timeline: overlap is not initialised");
  }
  if (path.empty()) return absl::InvalidArgumentError("start_timeline: empty file path");
  return runtime->StartTimeline(path);
}

absl::Status StopTimeline() {
  std::shared_ptr<Runtime> runtime = Current();
  if (runtime != nullptr) runtime->StopTimeline();
  return absl::OkStatus();
}

RuntimeStats Stats() {
  std::shared_ptr<Runtime> r = Current();
  return r ? r->stats() : RuntimeStats();
}

PlanSchedule CurrentPlanSchedule() {
  std::shared_ptr<Runtime> r = Current();
  return r ? r->plan_schedule() : PlanSchedule();
}

PlanClock CurrentPlanClock() {
  std::shared_ptr<Runtime> r = Current();
  return r ? r->plan_clock() : PlanClock();
}

absl::StatusOr<Handle> Allreduce(const std::string& name, const Tensor& input, const Tensor& output,
                                 const AllreduceOptions& options) {
  absl::Status set_ok = CheckSetAllreduce(options, name);
  if (!set_ok.ok()) return set_ok;
  if (options.delay != 0 || options.period != 1 || options.phase != 0) {
    std::shared_ptr<Runtime> runtime = Current();
    if (runtime == nullptr) return NotRunning(OpKind::kAllreduce, name);
    return runtime->SubmitDelayed(name, input, output, options);
  }
  return SubmitTo(options.process_set, AllreduceOp(name, input, output, options), options.on_done);
}

absl::StatusOr<Handle> GroupedAllreduce(const std::vector<std::string>& names,
                                        const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& outputs,
                                        const AllreduceOptions& options) {
  PendingOp op;
  op.request.kind = OpKind::kAllreduce;
  op.request.name = absl::StrCat("group[", absl::StrJoin(names, ","), "]");
  if (names.empty() || names.size() != inputs.size() || names.size() != outputs.size()) {
    std::shared_ptr<Runtime> r = Current();
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", r ? r->rank() : -1, ": grouped allreduce '", op.request.name,
                     "': ", names.size(), " names, ", inputs.size(), " inputs and ", outputs.size(),
                     " outputs (need equal, non-zero counts)"));
  }
  absl::Status set_ok = CheckSetAllreduce(options, op.request.name);
  if (!set_ok.ok()) return set_ok;
  for (const Tensor& t : inputs) op.request.tensors.push_back(MetaOf(t));
  op.inputs = inputs;
  op.outputs = outputs;
  op.request.compression = options.compression;
  SetReduction(options, &op.request);
  return SubmitTo(options.process_set, std::move(op), options.on_done);
}

absl::StatusOr<Handle> Allgather(const std::string& name, const Tensor& input,
                                 const AllgatherOptions& options) {
  return SubmitTo(options.process_set, SingleTensorOp(OpKind::kAllgather, name, input),
                  options.on_done);
}

absl::StatusOr<Handle> Broadcast(const std::string& name, const Tensor& input, const Tensor& output,
                                 const BroadcastOptions& options) {
  PendingOp op = SingleTensorOp(OpKind::kBroadcast, name, input);
  op.outputs.push_back(output);
  op.request.root = options.root;
  std::shared_ptr<ProcessSets> sets = CurrentSets();
  if (options.process_set != 0 && sets != nullptr) {
    // The root is a global rank, as in Horovod; the set's runtime counts its members from 0.
    absl::StatusOr<std::vector<int>> ranks = sets->Ranks(options.process_set);
    if (ranks.ok()) {
      auto it = std::find(ranks->begin(), ranks->end(), options.root);
      if (it == ranks->end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank ", Rank(), ": broadcast '", name, "': root rank ", options.root,
            " is not a member of process set ", options.process_set, " (ranks ",
            RanksText(*ranks), ")"));
      }
      op.request.root = static_cast<int>(it - ranks->begin());
    }  // else SubmitTo names the unknown set
  }
  return SubmitTo(options.process_set, std::move(op), options.on_done);
}

absl::StatusOr<Handle> ReduceScatter(const std::string& name, const Tensor& input,
                                     const ReduceScatterOptions& options) {
  PendingOp op = SingleTensorOp(OpKind::kReduceScatter, name, input);
  SetReduction(options, &op.request);
  return SubmitTo(options.process_set, std::move(op), options.on_done);
}

absl::StatusOr<Handle> Alltoall(const std::string& name, const Tensor& input,
                                const AlltoallOptions& options) {
  PendingOp op = SingleTensorOp(OpKind::kAlltoall, name, input);
  op.request.splits = options.splits;
  absl::StatusOr<int> set_size = ProcessSetSize(options.process_set);
  const int size = set_size.ok() ? *set_size : 0;  // else SubmitTo names the problem
  if (op.request.splits.empty() && size > 0 && !input.shape.empty()) {
    if (input.shape[0] % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", Rank(), ": alltoall '", name, "': first dimension ", input.shape[0],
          " does not divide into ", size, " equal parts",
          options.process_set != 0 ? absl::StrCat(" (the ranks of process set ",
                                                  options.process_set, ")")
                                   : "",
          "; pass options.splits"));
    }
    op.request.splits.assign(static_cast<size_t>(size), input.shape[0] / size);
  }
  return SubmitTo(options.process_set, std::move(op), options.on_done);
}

absl::StatusOr<std::string> SaveCompressionState() {
  std::shared_ptr<Runtime> runtime = Current();
  if (runtime == nullptr) {
    return absl::FailedPreconditionError("SaveCompressionState: overlap is not initialised");
  }
  return runtime->SaveCompressionState();
}

absl::Status RestoreCompressionState(const std::string& snapshot) {
  std::shared_ptr<Runtime> runtime = Current();
  if (runtime == nullptr) {
    return absl::FailedPreconditionError("RestoreCompressionState: overlap is not initialised");
  }
  return runtime->RestoreCompressionState(snapshot);
}

absl::StatusOr<Handle> Barrier(int process_set) {
  PendingOp op;
  op.request.kind = OpKind::kBarrier;
  op.request.name = "__barrier";
  return SubmitTo(process_set, std::move(op), nullptr);
}

absl::StatusOr<Handle> Join() {
  PendingOp op;
  op.request.kind = OpKind::kJoin;
  op.request.name = "__join";
  return Submit(std::move(op), nullptr);
}

namespace {
absl::Status SetsNotRunning(absl::string_view call) {
  return absl::FailedPreconditionError(absl::StrCat(
      call, ": overlap is not initialised (call overlap::Init() first, and not after Shutdown())"));
}
}  // namespace

absl::StatusOr<int> AddProcessSet(const std::vector<int>& ranks) {
  std::shared_ptr<ProcessSets> sets = CurrentSets();
  if (sets == nullptr) return SetsNotRunning("AddProcessSet");
  return sets->Add(ranks);
}

absl::Status RemoveProcessSet(int id) {
  std::shared_ptr<ProcessSets> sets = CurrentSets();
  if (sets == nullptr) return SetsNotRunning("RemoveProcessSet");
  return sets->Remove(id);
}

std::vector<int> ProcessSetIds() {
  std::shared_ptr<ProcessSets> sets = CurrentSets();
  if (sets == nullptr) return {};
  std::vector<int> ids = {0};
  for (int id : sets->Ids()) ids.push_back(id);
  return ids;
}

absl::StatusOr<std::vector<int>> ProcessSetRanks(int id) {
  std::shared_ptr<ProcessSets> sets = CurrentSets();
  const int size = Size();
  if (sets == nullptr || size < 0) return SetsNotRunning("ProcessSetRanks");
  if (id != 0) return sets->Ranks(id);
  std::vector<int> all(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) all[static_cast<size_t>(r)] = r;
  return all;
}

absl::StatusOr<int> ProcessSetSize(int id) {
  absl::StatusOr<std::vector<int>> ranks = ProcessSetRanks(id);
  if (!ranks.ok()) return ranks.status();
  return static_cast<int>(ranks->size());
}

absl::StatusOr<int> ProcessSetRank(int id) {
  absl::StatusOr<std::vector<int>> ranks = ProcessSetRanks(id);
  if (!ranks.ok()) return ranks.status();
  const int rank = Rank();
  auto it = std::find(ranks->begin(), ranks->end(), rank);
  if (it == ranks->end()) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", rank, " is not a member of process set ", id,
                                                      " (ranks ", RanksText(*ranks), ")"));
  }
  return static_cast<int>(it - ranks->begin());
}

}  // namespace overlap
