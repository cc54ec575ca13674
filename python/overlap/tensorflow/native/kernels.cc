// Asynchronous CPU kernels of overlap's collectives: each one describes its tensors to the core
// library (runtime/c_api.h), submits the operation to its process set (the `process_set_id`
// attribute; 0 is every rank) and returns; a waiter thread finishes the
// kernel when the operation ends (waiter.h). Failures become the kernel's status with the core's
// code and message (rank, tensor, cause), so they raise tf.errors.OpError on every rank that the
// core fails.
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "c_api.h"
#include "core_tensor.h"
#include "pending.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "waiter.h"

namespace overlap_tf {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

constexpr int kMaxDims = 32;

// What a kernel does once its operation has succeeded (e.g. copy a runtime-owned result out).
using OnSuccess = std::function<absl::Status(overlap_handle*)>;

// Finishes the kernel after submission `rc` (0, or the failed submission's code), now if the
// submission failed, else when the operation ends or its wait reaches its bound (waiter.h).
// `what` names the operation ("allreduce 'grad.0'"); `keep`: the tensors the core reads or
// writes, which must live as long as the operation may run, past the kernel if its wait gives up.
void Finish(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, int rc, overlap_handle* handle,
            std::string what, std::vector<Tensor> keep, OnSuccess on_success = nullptr) {
  if (rc != 0) {
    ctx->SetStatus(CoreError(rc));
    done();
    return;
  }
  WhenDone(handle, std::move(what), std::move(keep),
           [ctx, done = std::move(done), on_success = std::move(on_success)](
               overlap_handle* h, const absl::Status& result) {
             absl::Status status = result;
             if (status.ok() && on_success) status = on_success(h);
             if (!status.ok()) ctx->SetStatus(status);
             done();
           });
}

// Copies a runtime-owned result (allgather, reducescatter, alltoall) into output `index`.
absl::Status CopyOutput(OpKernelContext* ctx, int index, overlap_handle* handle,
                        const std::string& name) {
  const void* data = nullptr;
  int32_t dtype = -1, ndim = 0;
  int64_t dims[kMaxDims];
  int rc = overlap_handle_output(handle, &data, &dtype, &ndim, dims, kMaxDims);
  if (rc != 0) return CoreError(rc);
  if (TfDtype(dtype) != ctx->expected_output_dtype(index)) {
    return absl::InternalError(
        "overlap: '" + name + "': the runtime returned dtype code " + std::to_string(dtype) +
        " for a " + tensorflow::DataTypeString(ctx->expected_output_dtype(index)) + " output");
  }
  TensorShape shape;
  for (int i = 0; i < ndim; ++i) TF_RETURN_IF_ERROR(shape.AddDimWithStatus(dims[i]));
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, shape, &out));
  if (out->TotalBytes() == 0) return absl::OkStatus();
  rc = overlap_handle_copy_output(handle, const_cast<char*>(out->tensor_data().data()),
                                  static_cast<int64_t>(out->TotalBytes()));
  return rc == 0 ? absl::OkStatus() : CoreError(rc);
}

// Attributes every reduction has.
struct Reduction {
  int op = 0;
  float prescale = 1.0f;
  float postscale = 1.0f;
  std::string compression;

  void Read(OpKernelConstruction* c, bool with_compression) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op));
    OP_REQUIRES_OK(c, c->GetAttr("prescale", &prescale));
    OP_REQUIRES_OK(c, c->GetAttr("postscale", &postscale));
    if (with_compression) OP_REQUIRES_OK(c, c->GetAttr("compression", &compression));
  }
};

class AllreduceOp : public AsyncOpKernel {
 public:
  explicit AllreduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name_));
    reduction_.Read(c, true);
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
    OP_REQUIRES_OK(c, c->GetAttr("plan_may_delay", &plan_may_delay_));
    OP_REQUIRES_OK(c, c->GetAttr("independent_of_results", &independent_of_results_));
    OP_REQUIRES_OK(c, c->GetAttr("looks_ahead", &looks_ahead_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    Tensor* output = nullptr;
    // In place when TensorFlow lets the input go; the core reduces in place too.
    OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output),
                         done);
    Tensor* has_update = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(1, TensorShape({}), &has_update), done);
    CoreTensor in(input), out(*output);
    overlap_handle* handle = nullptr;
    // A gradient (plan_may_delay) may come from an earlier step under a delayed plan.
    const int32_t flags =
        (plan_may_delay_ ? OVERLAP_ALLREDUCE_GRADIENT : 0) |
        (independent_of_results_ ? OVERLAP_ALLREDUCE_INDEPENDENT_OF_RESULTS : 0) |
        (looks_ahead_ ? OVERLAP_ALLREDUCE_LOOKS_AHEAD : 0);
    int rc = overlap_allreduce_flags(process_set_, name_.c_str(), in.desc(), out.desc(),
                                     reduction_.op, reduction_.prescale, reduction_.postscale,
                                     reduction_.compression.c_str(), flags, &handle);
    // Read once the operation has ended: only then does the core know whether the plan
    // delivered anything to this submission.
    Finish(ctx, std::move(done), rc, handle, "allreduce '" + name_ + "'", {input, *output},
           [has_update](overlap_handle* h) {
             has_update->scalar<bool>()() = overlap_handle_has_update(h) != 0;
             return absl::OkStatus();
           });
  }

 private:
  std::string name_;
  Reduction reduction_;
  int process_set_ = 0;
  bool plan_may_delay_ = false;
  bool looks_ahead_ = false;
  bool independent_of_results_ = false;
};

// Submits a gradient's allreduce and parks it (pending.h); OverlapAllreduceFinish collects it.
class AllreduceStartOp : public tensorflow::OpKernel {
 public:
  explicit AllreduceStartOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name_));
    reduction_.Read(c, true);
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void Compute(OpKernelContext* ctx) override {
    PendingReduction pending;
    pending.input = ctx->input(0);
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(pending.input.dtype(), pending.input.shape(),
                                           &pending.output));
    CoreTensor in(pending.input), out(pending.output);
    int rc = overlap_allreduce_gradient(process_set_, name_.c_str(), in.desc(), out.desc(),
                                        reduction_.op, reduction_.prescale, reduction_.postscale,
                                        reduction_.compression.c_str(), &pending.handle);
    OP_REQUIRES(ctx, rc == 0, CoreError(rc));
    overlap_handle* handle = pending.handle;
    // References to both buffers outlive a refused Park, which drops its own.
    std::vector<Tensor> buffers = {pending.input, pending.output};
    absl::Status parked = Park(name_, std::move(pending));
    if (!parked.ok()) {
      // Not parked: its result goes nowhere, but the core may still read and write its buffers,
      // so they are held until the operation ends, as an abandoned wait's.
      WhenDone(handle, "allreduce '" + name_ + "'", std::move(buffers),
               [](overlap_handle*, const absl::Status&) {});
    }
    OP_REQUIRES_OK(ctx, parked);
  }

 private:
  std::string name_;
  Reduction reduction_;
  int process_set_ = 0;
};

class AllreduceFinishOp : public AsyncOpKernel {
 public:
  explicit AllreduceFinishOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name_));
    OP_REQUIRES_OK(c, c->GetAttr("dtype", &dtype_));
    tensorflow::PartialTensorShape shape;
    OP_REQUIRES_OK(c, c->GetAttr("shape", &shape));
    OP_REQUIRES(c, shape.AsTensorShape(&shape_),
                absl::InvalidArgumentError("overlap: rank " + std::to_string(overlap_rank()) +
                                           ": allreduce finish '" + name_ +
                                           "': the variable's shape must be fully known"));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    Tensor* has_update = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(1, TensorShape({}), &has_update), done);
    std::optional<PendingReduction> pending = Collect(name_);
    if (!pending) {
      Tensor* zeros = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, shape_, &zeros), done);
      std::memset(const_cast<char*>(zeros->tensor_data().data()), 0, zeros->TotalBytes());
      has_update->scalar<bool>()() = false;
      done();
      return;
    }
    OP_REQUIRES_ASYNC(
        ctx, pending->output.dtype() == dtype_ && pending->output.shape() == shape_,
        absl::InvalidArgumentError(
            "overlap: rank " + std::to_string(overlap_rank()) + ": allreduce '" + name_ +
            "' was submitted as " + tensorflow::DataTypeString(pending->output.dtype()) +
            pending->output.shape().DebugString() + " and collected as " +
            tensorflow::DataTypeString(dtype_) + shape_.DebugString()),
        done);
    Tensor output = pending->output;
    Finish(ctx, std::move(done), 0, pending->handle, "allreduce '" + name_ + "'",
           {pending->input, output}, [ctx, output, has_update](overlap_handle* h) {
             ctx->set_output(0, output);
             has_update->scalar<bool>()() = overlap_handle_has_update(h) != 0;
             return absl::OkStatus();
           });
  }

 private:
  std::string name_;
  tensorflow::DataType dtype_;
  TensorShape shape_;
};

class GroupedAllreduceOp : public AsyncOpKernel {
 public:
  explicit GroupedAllreduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_names", &names_));
    reduction_.Read(c, true);
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
    OP_REQUIRES(c, static_cast<int>(names_.size()) == c->num_inputs(),
                absl::InvalidArgumentError("grouped allreduce: one name per tensor needed"));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs();
    std::vector<std::unique_ptr<CoreTensor>> descs;
    std::vector<Tensor> keep;
    std::vector<overlap_tensor> ins, outs;
    std::vector<const char*> names;
    for (int i = 0; i < n; ++i) {
      const Tensor& input = ctx->input(i);
      Tensor* output = nullptr;
      OP_REQUIRES_OK_ASYNC(
          ctx, ctx->forward_input_or_allocate_output({i}, i, input.shape(), &output), done);
      descs.push_back(std::make_unique<CoreTensor>(input));
      ins.push_back(*descs.back()->desc());
      descs.push_back(std::make_unique<CoreTensor>(*output));
      outs.push_back(*descs.back()->desc());
      keep.push_back(input);
      keep.push_back(*output);
      names.push_back(names_[i].c_str());
    }
    overlap_handle* handle = nullptr;
    int rc = overlap_grouped_allreduce_ps(process_set_, n, names.data(), ins.data(), outs.data(),
                                          reduction_.op, reduction_.prescale, reduction_.postscale,
                                          reduction_.compression.c_str(), &handle);
    const std::string more = n > 1 ? " and " + std::to_string(n - 1) + " more" : "";
    Finish(ctx, std::move(done), rc, handle,
           "grouped allreduce '" + (n > 0 ? names_.front() : "") + "'" + more, std::move(keep));
  }

 private:
  std::vector<std::string> names_;
  Reduction reduction_;
  int process_set_ = 0;
};

class AllgatherOp : public AsyncOpKernel {
 public:
  explicit AllgatherOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    CoreTensor in(ctx->input(0));
    overlap_handle* handle = nullptr;
    int rc = overlap_allgather_ps(process_set_, name_.c_str(), in.desc(), &handle);
    Finish(ctx, std::move(done), rc, handle, "allgather '" + name_ + "'", {ctx->input(0)},
           [ctx, name = name_](overlap_handle* h) { return CopyOutput(ctx, 0, h, name); });
  }

 private:
  std::string name_;
  int process_set_ = 0;
};

class BroadcastOp : public AsyncOpKernel {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name_));
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output),
                         done);
    CoreTensor in(input), out(*output);
    overlap_handle* handle = nullptr;
    // root_ is a global rank; the core maps it to the set's numbering.
    int rc =
        overlap_broadcast_ps(process_set_, name_.c_str(), in.desc(), out.desc(), root_, &handle);
    Finish(ctx, std::move(done), rc, handle, "broadcast '" + name_ + "'", {input, *output});
  }

 private:
  std::string name_;
  int root_ = 0;
  int process_set_ = 0;
};

class ReducescatterOp : public AsyncOpKernel {
 public:
  explicit ReducescatterOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name_));
    reduction_.Read(c, false);
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    CoreTensor in(ctx->input(0));
    overlap_handle* handle = nullptr;
    int rc = overlap_reducescatter_ps(process_set_, name_.c_str(), in.desc(), reduction_.op,
                                      reduction_.prescale, reduction_.postscale, &handle);
    Finish(ctx, std::move(done), rc, handle, "reducescatter '" + name_ + "'", {ctx->input(0)},
           [ctx, name = name_](overlap_handle* h) { return CopyOutput(ctx, 0, h, name); });
  }

 private:
  std::string name_;
  Reduction reduction_;
  int process_set_ = 0;
};

class AlltoallOp : public AsyncOpKernel {
 public:
  explicit AlltoallOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    CoreTensor in(ctx->input(0));
    auto given = ctx->input(1).flat<int32_t>();
    std::vector<int64_t> splits(given.data(), given.data() + given.size());
    overlap_handle* handle = nullptr;
    int rc = overlap_alltoall_ps(process_set_, name_.c_str(), in.desc(),
                                 splits.empty() ? nullptr : splits.data(),
                                 static_cast<int32_t>(splits.size()), &handle);
    Finish(ctx, std::move(done), rc, handle, "alltoall '" + name_ + "'", {ctx->input(0)},
           [ctx, name = name_](overlap_handle* h) {
             TF_RETURN_IF_ERROR(CopyOutput(ctx, 0, h, name));
             int64_t received[4096];
             int32_t n = overlap_handle_received_splits(h, received, 4096);
             Tensor* out = nullptr;
             TF_RETURN_IF_ERROR(ctx->allocate_output(1, TensorShape({n}), &out));
             auto flat = out->flat<int32_t>();
             for (int32_t i = 0; i < n; ++i) flat(i) = static_cast<int32_t>(received[i]);
             return absl::OkStatus();
           });
  }

 private:
  std::string name_;
  int process_set_ = 0;
};

class JoinOp : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    Tensor* called = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, TensorShape({}), &called), done);
    called->scalar<double>()() =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    overlap_handle* handle = nullptr;
    int rc = overlap_join(&handle);
    Finish(ctx, std::move(done), rc, handle, "join", {});
  }
};

class BarrierOp : public AsyncOpKernel {
 public:
  explicit BarrierOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    overlap_handle* handle = nullptr;
    int rc = overlap_barrier_ps(process_set_, &handle);
    Finish(ctx, std::move(done), rc, handle, "barrier", {});
  }

 private:
  int process_set_ = 0;
};

using tensorflow::DEVICE_CPU;
REGISTER_KERNEL_BUILDER(Name("OverlapAllreduce").Device(DEVICE_CPU), AllreduceOp);
REGISTER_KERNEL_BUILDER(Name("OverlapAllreduceStart").Device(DEVICE_CPU), AllreduceStartOp);
REGISTER_KERNEL_BUILDER(Name("OverlapAllreduceFinish").Device(DEVICE_CPU), AllreduceFinishOp);
REGISTER_KERNEL_BUILDER(Name("OverlapGroupedAllreduce").Device(DEVICE_CPU), GroupedAllreduceOp);
REGISTER_KERNEL_BUILDER(Name("OverlapAllgather").Device(DEVICE_CPU), AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("OverlapBroadcast").Device(DEVICE_CPU), BroadcastOp);
REGISTER_KERNEL_BUILDER(Name("OverlapReducescatter").Device(DEVICE_CPU), ReducescatterOp);
REGISTER_KERNEL_BUILDER(Name("OverlapAlltoall").Device(DEVICE_CPU), AlltoallOp);
REGISTER_KERNEL_BUILDER(Name("OverlapJoin").Device(DEVICE_CPU), JoinOp);
REGISTER_KERNEL_BUILDER(Name("OverlapBarrier").Device(DEVICE_CPU), BarrierOp);

}  // namespace
}  // namespace overlap_tf
