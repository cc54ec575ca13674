// The op definitions of overlap's TensorFlow op library: names, attributes and shape functions.
// Kernels are in kernels.cc and step_markers.cc.
//
// `process_set_id` (every collective but join): the registered process set to run on, 0 (the
// global set) by default, as Horovod's op attribute; Python checks membership first, and the core
// refuses a set that is unknown or was removed since the op was traced (runtime/c_api.h).
//
// The collectives are stateful, so that TensorFlow never constant-folds, deduplicates or
// reorders one away from the rank that submits it; overlap.tensorflow exempts them from
// tf.function's program-order chaining so that independent ones overlap (mpi_ops.py).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace overlap_tf {
namespace {

using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// The core's dtypes (collectives/dtype.h).
#define OVERLAP_TYPES "{uint8, int8, int32, int64, half, bfloat16, float, double}"

// Same shape as the input, except an unknown first dimension (allgather, reducescatter,
// alltoall: it depends on the other ranks).
absl::Status UnknownFirstDim(InferenceContext* c) {
  ShapeHandle in = c->input(0);
  if (!c->RankKnown(in)) {
    c->set_output(0, c->UnknownShape());
    return absl::OkStatus();
  }
  ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, c->UnknownDim(), &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

// `has_update`: false when a delayed plan (deft with staleness > 0 or update periods,
// runtime/planes/plan_delays.h) brings this tensor no update this step; `reduced` is zeros then,
// and the optimizer must skip the variable rather than apply them. True in every other case.
// `independent_of_results`: the input needs no collective's result (mpi_ops.py works it out from
// the graph; AllreduceOptions::independent_of_results). `looks_ahead`: the optimizer looks
// ahead on this gradient under delays (AllreduceOptions::looks_ahead).
REGISTER_OP("OverlapAllreduce")
    .Input("tensor: T")
    .Output("reduced: T")
    .Output("has_update: bool")
    .Attr("T: " OVERLAP_TYPES)
    .Attr("tensor_name: string")
    .Attr("reduce_op: int")
    .Attr("prescale: float = 1.0")
    .Attr("postscale: float = 1.0")
    .Attr("compression: string = ''")
    .Attr("process_set_id: int = 0")
    .Attr("plan_may_delay: bool = false")
    .Attr("independent_of_results: bool = false")
    .Attr("looks_ahead: bool = false")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->Scalar());
      return absl::OkStatus();
    });

// Updates at forward (pending.h): the allreduce of a gradient, submitted and parked under its
// name without waiting; a later OverlapAllreduceFinish of the same name collects the result
// (`reduced` of `dtype` and `shape`, and has_update as OverlapAllreduce's). A finish that finds
// nothing parked gives zeros and has_update false: its update was collected already.
REGISTER_OP("OverlapAllreduceStart")
    .Input("tensor: T")
    .Attr("T: " OVERLAP_TYPES)
    .Attr("tensor_name: string")
    .Attr("reduce_op: int")
    .Attr("prescale: float = 1.0")
    .Attr("postscale: float = 1.0")
    .Attr("compression: string = ''")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs);

REGISTER_OP("OverlapAllreduceFinish")
    .Output("reduced: dtype")
    .Output("has_update: bool")
    .Attr("dtype: " OVERLAP_TYPES)
    .Attr("shape: shape")
    .Attr("tensor_name: string")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      tensorflow::PartialTensorShape shape;
      TF_RETURN_IF_ERROR(c->GetAttr("shape", &shape));
      ShapeHandle out;
      TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shape, &out));
      c->set_output(0, out);
      c->set_output(1, c->Scalar());
      return absl::OkStatus();
    });

REGISTER_OP("OverlapGroupedAllreduce")
    .Input("tensors: T")
    .Output("reduced: T")
    .Attr("T: list(" OVERLAP_TYPES ")")
    .Attr("tensor_names: list(string)")
    .Attr("reduce_op: int")
    .Attr("prescale: float = 1.0")
    .Attr("postscale: float = 1.0")
    .Attr("compression: string = ''")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    });

REGISTER_OP("OverlapAllgather")
    .Input("tensor: T")
    .Output("gathered: T")
    .Attr("T: " OVERLAP_TYPES)
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(UnknownFirstDim);

REGISTER_OP("OverlapBroadcast")
    .Input("tensor: T")
    .Output("broadcast: T")
    .Attr("T: " OVERLAP_TYPES)
    .Attr("tensor_name: string")
    .Attr("root_rank: int")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape);

REGISTER_OP("OverlapReducescatter")
    .Input("tensor: T")
    .Output("scattered: T")
    .Attr("T: " OVERLAP_TYPES)
    .Attr("tensor_name: string")
    .Attr("reduce_op: int")
    .Attr("prescale: float = 1.0")
    .Attr("postscale: float = 1.0")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(UnknownFirstDim);

// `splits`: rows for each rank, or empty for equal parts.
REGISTER_OP("OverlapAlltoall")
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("received: T")
    .Output("received_splits: int32")
    .Attr("T: " OVERLAP_TYPES)
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(UnknownFirstDim(c));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });

// Completes once every rank has joined; outputs this rank's call time (seconds since the epoch),
// from which overlap.tensorflow.join() finds the rank that joined last.
REGISTER_OP("OverlapJoin")
    .Output("called: double")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape);

REGISTER_OP("OverlapBarrier")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs);

// kind: "forward", "backward" or "update" (runtime/overlap.h, StartForward and the others).
REGISTER_OP("OverlapStepMarker")
    .Attr("kind: {'forward', 'backward', 'update'}")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs);

// The optimizer's update just took `ms` (runtime/overlap.h, NoteUpdateTime).
REGISTER_OP("OverlapNoteUpdateTime")
    .Input("ms: double")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs);

}  // namespace
}  // namespace overlap_tf
