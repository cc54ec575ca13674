// The OverlapStepMarker kernel: tells the core where a training step's forward, backward and
// update begin (runtime/overlap.h, StartForward and the others), from wherever
// DistributedGradientTape and DistributedOptimizer place marker ops; and OverlapNoteUpdateTime,
// the optimizer's time beside them (NoteUpdateTime), which the Keras DistributedOptimizer notes.
//
// Markers are ops, not Python calls, so that inside a tf.function they run when the graph gets
// there rather than once at trace time. One state machine per process keeps the core's sequence
// forward -> backward -> update whatever marker arrives: a repeated marker is dropped, and a
// marker that skips a phase (a backward with no forward seen) supplies the missing one first.
#include <mutex>
#include <string>

#include "c_api.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "waiter.h"

namespace overlap_tf {
namespace {

enum class Phase { kIdle, kForward, kBackward, kUpdate };

class StepState {
 public:
  absl::Status Advance(Phase to) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!overlap_is_initialized()) return absl::OkStatus();  // markers before init are dropped
    if (to == Phase::kForward) {
      return phase_ == Phase::kForward || phase_ == Phase::kBackward ? absl::OkStatus()
                                                                     : Mark(Phase::kForward);
    }
    if (phase_ == to) return absl::OkStatus();
    if (to == Phase::kBackward && phase_ != Phase::kForward) {
      TF_RETURN_IF_ERROR(Mark(Phase::kForward));
    }
    if (to == Phase::kUpdate && phase_ != Phase::kBackward) {
      if (phase_ != Phase::kForward) TF_RETURN_IF_ERROR(Mark(Phase::kForward));
      TF_RETURN_IF_ERROR(Mark(Phase::kBackward));
    }
    return Mark(to);
  }

 private:
  absl::Status Mark(Phase to) {
    int rc = to == Phase::kForward    ? overlap_start_forward()
             : to == Phase::kBackward ? overlap_start_backward()
                                      : overlap_start_update();
    if (rc != 0) return CoreError(rc);
    phase_ = to;
    return absl::OkStatus();
  }

  std::mutex mu_;
  Phase phase_ = Phase::kIdle;
};

StepState& State() {
  static StepState* state = new StepState();
  return *state;
}

class StepMarkerOp : public tensorflow::OpKernel {
 public:
  explicit StepMarkerOp(tensorflow::OpKernelConstruction* c) : OpKernel(c) {
    std::string kind;
    OP_REQUIRES_OK(c, c->GetAttr("kind", &kind));
    phase_ = kind == "forward"    ? Phase::kForward
             : kind == "backward" ? Phase::kBackward
                                  : Phase::kUpdate;
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, State().Advance(phase_));
  }

 private:
  Phase phase_;
};

REGISTER_KERNEL_BUILDER(Name("OverlapStepMarker").Device(tensorflow::DEVICE_CPU), StepMarkerOp);

// A measurement only: like overlap.torch's note, it never fails the update it timed (before
// init or after shutdown the core drops it).
class NoteUpdateTimeOp : public tensorflow::OpKernel {
 public:
  explicit NoteUpdateTimeOp(tensorflow::OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& ms = ctx->input(0);
    if (ms.NumElements() == 1 && overlap_is_initialized()) {
      (void)overlap_note_update_ms(ms.flat<double>()(0));
    }
  }
};

REGISTER_KERNEL_BUILDER(Name("OverlapNoteUpdateTime").Device(tensorflow::DEVICE_CPU),
                        NoteUpdateTimeOp);

}  // namespace
}  // namespace overlap_tf
