// Completion delivery for overlap's asynchronous TensorFlow kernels.
//
// A kernel submits its operation to the core library (runtime/c_api.h) and hands the handle
// here; a waiter thread blocks in overlap_handle_wait until the operation ends, then runs the
// kernel's continuation and frees the handle. Threads block instead of polling (the core fails
// stalled and lost operations itself, so every wait ends), and TensorFlow's own inter-op threads
// are never blocked, so a graph can have any number of collectives in flight at once.
//
// Thread-safe. The pool grows to the number of operations in flight and idle threads beyond a
// few exit after a while; it is never destroyed, so waiters outlive static destruction at exit.
#ifndef OVERLAP_TF_WAITER_H_
#define OVERLAP_TF_WAITER_H_

#include <functional>

#include "c_api.h"
#include "tensorflow/core/platform/status.h"

namespace overlap_tf {

// Runs `then(handle, status)` on a waiter thread once `handle`'s operation has ended, where
// status is OK or the core's error (its code and its message naming the rank, tensor and cause).
// The handle is freed after `then` returns.
using Continuation = std::function<void(overlap_handle* handle, const absl::Status& status)>;
void WhenDone(overlap_handle* handle, Continuation then);

// The calling thread's last core failure as a status with the core's code and message.
absl::Status CoreError(int code);

}  // namespace overlap_tf

#endif  // OVERLAP_TF_WAITER_H_
