// Completion delivery for overlap's asynchronous TensorFlow kernels.
//
// A kernel submits its operation to the core library (runtime/c_api.h) and hands the handle
// here; a waiter thread blocks in overlap_handle_wait until the operation ends, then runs the
// kernel's continuation and frees the handle. Threads block instead of polling, and TensorFlow's
// own inter-op threads are never blocked, so a graph can have any number of collectives in
// flight at once.
//
// Every wait is bounded, by the core's own backstop (overlap_wait_bound, runtime/c_api.h). The
// core ends every operation itself (a stall after OVERLAP_STALL_TIMEOUT_S, a lost peer or stuck
// collective after OVERLAP_COLLECTIVE_TIMEOUT_S); the bound is a backstop behind it. A wait that
// reaches it finishes the kernel with the core's error for it (overlap_wait_expired:
// DeadlineExceeded naming the rank, the operation and the settings), and hands the handle, with
// the kernel's tensors, to one reaper thread that frees them once the core has ended the
// operation: the core may still write into those tensors, so they outlive the kernel, and the
// waiter thread goes back to the pool. An operation the core never ends keeps its handle and
// tensors until the process exits (memory, not a thread per wait).
//
// Thread-safe. The pool grows to the number of operations in flight and idle threads beyond a
// few exit after a while; it is never destroyed, so waiters outlive static destruction at exit.
#ifndef OVERLAP_TF_WAITER_H_
#define OVERLAP_TF_WAITER_H_

#include <functional>
#include <string>
#include <vector>

#include "c_api.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/status.h"

namespace overlap_tf {

// Runs `then(handle, status)` on a waiter thread once `handle`'s operation has ended, where
// status is OK or the core's error (its code and its message naming the rank, tensor and cause),
// or DeadlineExceeded when the wait reached its bound. `what` names the operation in that error
// ("allreduce 'grad.0'"); `keep` holds the tensors the core reads or writes, so that they live
// as long as the operation may run. The handle is freed after `then` returns; when the wait gave
// up, `then` gets a null handle and the handle is freed once the operation has ended.
using Continuation = std::function<void(overlap_handle* handle, const absl::Status& status)>;
void WhenDone(overlap_handle* handle, std::string what, std::vector<tensorflow::Tensor> keep,
              Continuation then);

// The calling thread's last core failure as a status with the core's code and message.
absl::Status CoreError(int code);

}  // namespace overlap_tf

// For tests (overlap/tensorflow/op_library.py): every wait from now on gives up after `bound_s`
// seconds instead of the core's bound, as if the core had failed to end the operation; 0 goes
// back to the core's.
extern "C" void overlap_tf_override_wait_bound(double bound_s);
// Handles whose wait gave up and whose operation still runs (the reaper holds them).
extern "C" int overlap_tf_abandoned_waits(void);

#endif  // OVERLAP_TF_WAITER_H_
