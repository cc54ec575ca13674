// One operation this rank submitted that has not yet been negotiated.
#ifndef OVERLAP_RUNTIME_PENDING_OP_H_
#define OVERLAP_RUNTIME_PENDING_OP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "runtime/handle_state.h"
#include "runtime/messages.h"

namespace overlap {

struct PendingOp {
  Request request;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  std::shared_ptr<internal::HandleState> handle;
  absl::Time enqueued;
  int cache_id = -1;  // >= 0: announced by setting this bit every round
  bool sent = false;  // the full request already went to rank 0
};

// This rank's un-negotiated operations by name (names are unique while in flight).
using PendingTable = absl::flat_hash_map<std::string, PendingOp>;

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PENDING_OP_H_
