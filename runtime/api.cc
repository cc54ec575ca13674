// The public functions of runtime/overlap.h: thin wrappers over the process's default Runtime.
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "runtime/overlap.h"
#include "runtime/runtime.h"

namespace overlap {
namespace {

// The default runtime of this process; the only process-wide state overlap keeps.
struct DefaultRuntime {
  absl::Mutex mu;
  std::shared_ptr<Runtime> runtime ABSL_GUARDED_BY(mu);
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

absl::Status NotRunning(const Request& request) {
  return absl::FailedPreconditionError(absl::StrCat(
      OpKindName(request.kind), " '", request.name,
      "': overlap is not initialised (call overlap::Init() first, and not after Shutdown())"));
}

absl::StatusOr<Handle> Submit(PendingOp op, DoneCallback on_done) {
  std::shared_ptr<Runtime> runtime = Current();
  if (runtime == nullptr) return NotRunning(op.request);
  return runtime->Submit(std::move(op), std::move(on_done));
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
  DefaultRuntime& d = Default();
  absl::MutexLock lock(&d.mu);
  if (d.runtime != nullptr) {
    return absl::FailedPreconditionError("overlap::Init: already initialised");
  }
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Start(std::move(config));
  if (!runtime.ok()) return runtime.status();
  d.runtime = std::move(*runtime);
  return absl::OkStatus();
}

absl::Status Init() { return StartDefault(Config::FromEnvironment()); }

absl::Status Init(const Config& config) {
  absl::Status valid = config.Validate();
  if (!valid.ok()) return StartDefault(valid);
  return StartDefault(config);
}

absl::Status Shutdown() {
  std::shared_ptr<Runtime> runtime;
  {
    DefaultRuntime& d = Default();
    absl::MutexLock lock(&d.mu);
    runtime = std::move(d.runtime);
  }
  if (runtime == nullptr) return absl::OkStatus();
  return runtime->Shutdown();
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

absl::StatusOr<Handle> Allreduce(const std::string& name, const Tensor& input, const Tensor& output,
                                 const AllreduceOptions& options) {
  if (options.delay != 0 || options.period != 1 || options.phase != 0) {
    std::shared_ptr<Runtime> runtime = Current();
    if (runtime == nullptr) return NotRunning(Request{name});
    return runtime->SubmitDelayed(name, input, output, options);
  }
  return Submit(AllreduceOp(name, input, output, options), options.on_done);
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
  for (const Tensor& t : inputs) op.request.tensors.push_back(MetaOf(t));
  op.inputs = inputs;
  op.outputs = outputs;
  op.request.compression = options.compression;
  SetReduction(options, &op.request);
  return Submit(std::move(op), options.on_done);
}

absl::StatusOr<Handle> Allgather(const std::string& name, const Tensor& input,
                                 const AllgatherOptions& options) {
  return Submit(SingleTensorOp(OpKind::kAllgather, name, input), options.on_done);
}

absl::StatusOr<Handle> Broadcast(const std::string& name, const Tensor& input, const Tensor& output,
                                 const BroadcastOptions& options) {
  PendingOp op = SingleTensorOp(OpKind::kBroadcast, name, input);
  op.outputs.push_back(output);
  op.request.root = options.root;
  return Submit(std::move(op), options.on_done);
}

absl::StatusOr<Handle> ReduceScatter(const std::string& name, const Tensor& input,
                                     const ReduceScatterOptions& options) {
  PendingOp op = SingleTensorOp(OpKind::kReduceScatter, name, input);
  SetReduction(options, &op.request);
  return Submit(std::move(op), options.on_done);
}

absl::StatusOr<Handle> Alltoall(const std::string& name, const Tensor& input,
                                const AlltoallOptions& options) {
  PendingOp op = SingleTensorOp(OpKind::kAlltoall, name, input);
  op.request.splits = options.splits;
  const int size = Size();
  if (op.request.splits.empty() && size > 0 && !input.shape.empty()) {
    if (input.shape[0] % size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", Rank(), ": alltoall '", name, "': first dimension ", input.shape[0],
                       " does not divide into ", size, " equal parts; pass options.splits"));
    }
    op.request.splits.assign(static_cast<size_t>(size), input.shape[0] / size);
  }
  return Submit(std::move(op), options.on_done);
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

absl::StatusOr<Handle> Barrier() {
  PendingOp op;
  op.request.kind = OpKind::kBarrier;
  op.request.name = "__barrier";
  return Submit(std::move(op), nullptr);
}

absl::StatusOr<Handle> Join() {
  PendingOp op;
  op.request.kind = OpKind::kJoin;
  op.request.name = "__join";
  return Submit(std::move(op), nullptr);
}

}  // namespace overlap
