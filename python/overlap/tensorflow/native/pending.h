// Gradient allreduces submitted in one step and collected in a later one: the op library's side
// of Keras updates at forward (overlap/tensorflow/layerwise.py).
//
// OverlapAllreduceStart submits a gradient's allreduce and parks its handle here under the
// allreduce's name, without waiting; OverlapAllreduceFinish, run just before the forward of the
// layer that owns the variable (next step, usually a later tf.function call), takes it back and
// waits. The parked tensors (the gradient, the buffer the core reduces into) stay referenced
// here until the finish, so they outlive the kernel that submitted them.
//
// Thread-safe. One table per process, never destroyed (kernels may run during static
// destruction at exit); what was never finished or abandoned is freed with the process.
#ifndef OVERLAP_TF_PENDING_H_
#define OVERLAP_TF_PENDING_H_

#include <optional>
#include <string>

#include "c_api.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/status.h"

namespace overlap_tf {

struct PendingReduction {
  overlap_handle* handle = nullptr;
  tensorflow::Tensor input;
  tensorflow::Tensor output;
};

// Parks `pending` under `name`. FailedPrecondition, naming the rank and the tensor, when `name`
// is already parked: the update of an earlier step was never collected, and submitting again
// would lose it.
absl::Status Park(const std::string& name, PendingReduction pending);

// Takes back what is parked under `name`; nullopt when nothing is (the update was collected
// already, or none was submitted since).
std::optional<PendingReduction> Collect(const std::string& name);

// Gives up what is parked under `name`: its owner (a Keras optimizer that was collected) will
// never collect it. The core still writes into its output until the allreduce ends, so it is kept
// until then (reaped by later calls here) and freed unread. Returns whether anything was parked.
bool Abandon(const std::string& name);

// Whether something is parked under `name`.
bool IsParked(const std::string& name);

// How many reductions are parked (for tests).
int ParkedCount();

}  // namespace overlap_tf

extern "C" int overlap_tf_is_parked(const char* name);
extern "C" int overlap_tf_abandon_parked(const char* name);
extern "C" int overlap_tf_parked_reductions(void);

#endif  // OVERLAP_TF_PENDING_H_
