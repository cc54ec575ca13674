// One operation this rank submitted that has not yet been negotiated.
#ifndef OVERLAP_RUNTIME_API_PENDING_OP_H_
#define OVERLAP_RUNTIME_API_PENDING_OP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "runtime/api/handle_state.h"
#include "runtime/negotiation/messages.h"

namespace overlap {

class DeviceMemory;  // collectives/buffer_ops.h

struct PendingOp {
  Request request;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  std::shared_ptr<internal::HandleState> handle;
  absl::Time enqueued;
  // The program's observations (internal::Observations) when it submitted this: two operations
  // with different counts may depend on each other, and never share a launch unit.
  uint64_t observed = 0;
  // AllreduceOptions::independent_of_results: `observed` is then the previous submission's, so
  // no launch unit is cut before this one.
  bool independent_of_results = false;
  bool looks_ahead = false;  // AllreduceOptions::looks_ahead, for the step profiler
  int cache_id = -1;  // >= 0: announced by setting this bit every round
  bool sent = false;  // the full request already went to rank 0
  // A delayed plan's runtime-owned copy of the program's submission number `plan_pass` of this
  // tensor (runtime/planes/plan_delays.h); -1 for the program's own operations. Nobody waits on its
  // handle (null); `owned` is the memory its tensors point into.
  int64_t plan_pass = -1;
  std::shared_ptr<std::vector<uint8_t>> owned;
  std::shared_ptr<DeviceMemory> owned_on_device;  // the same for a CUDA tensor's copy
};

// This rank's un-negotiated operations by name (names are unique while in flight).
using PendingTable = absl::flat_hash_map<std::string, PendingOp>;

// Puts `ops` back into `pending` as fresh submissions, whatever a plan had made of them: no cache
// bit, the full request still to send. Returns whether there were any (a round must send them).
inline bool ReturnToNegotiation(std::vector<PendingOp> ops, PendingTable* pending) {
  for (PendingOp& op : ops) {
    op.cache_id = -1;
    op.sent = false;
    std::string name = op.request.name;
    pending->emplace(std::move(name), std::move(op));
  }
  return !ops.empty();
}

// An allreduce of `input` into `output` with `options`' reduction and compression (the schedule
// fields are the delay line's, not the request's).
inline PendingOp AllreduceOp(const std::string& name, const Tensor& input, const Tensor& output,
                             const AllreduceOptions& options) {
  PendingOp op;
  op.request.kind = OpKind::kAllreduce;
  op.request.name = name;
  op.request.tensors.push_back(TensorMeta{input.dtype, input.shape});
  op.request.op = options.op;
  op.request.prescale = options.prescale;
  op.request.postscale = options.postscale;
  op.request.compression = options.compression;
  op.request.plan_may_delay = options.plan_may_delay;
  op.independent_of_results = options.independent_of_results;
  op.looks_ahead = options.looks_ahead;
  op.inputs.push_back(input);
  op.outputs.push_back(output);
  return op;
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_API_PENDING_OP_H_
