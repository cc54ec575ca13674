// Checks a submitted operation on the submitting rank, before any communication.
#ifndef OVERLAP_RUNTIME_API_VALIDATION_H_
#define OVERLAP_RUNTIME_API_VALIDATION_H_

#include "absl/status/status.h"
#include "runtime/api/pending_op.h"

namespace overlap {

// InvalidArgument whose message names the operation, the tensor and the cause: an empty name, a
// null or undersized buffer, an unknown dtype or op, a negative dimension, input/output shape or
// dtype disagreement, a root or splits that do not fit `size` ranks, scaling of integers.
absl::Status ValidateOp(const PendingOp& op, int size);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_API_VALIDATION_H_
