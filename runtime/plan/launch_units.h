// The launch units of a frozen plan: which tensors start together.
#ifndef OVERLAP_RUNTIME_PLAN_LAUNCH_UNITS_H_
#define OVERLAP_RUNTIME_PLAN_LAUNCH_UNITS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/negotiation/messages.h"

namespace overlap {

// One tensor of the plan: the operation every rank agreed on, with its cache id.
struct PlanEntry {
  int32_t cache_id = -1;
  std::shared_ptr<const Response> response;
};

// Launch units over `entries` in order: consecutive entries up to `first_bytes` for the first
// unit and `unit_bytes` for the others (an entry larger than that is a unit of its own), like
// DDP's buckets: a small first unit starts communication early in backward, larger ones later pay
// fewer per-collective costs. A unit is only a launch gate; the data plane still fuses or splits
// its tensors by dtype, op and size.
//
// `segments[i]` is entry i's segment: the runtime starts a new one wherever some rank's program
// saw an operation finish (a Wait returned, a Poll of true, a done callback ran) between
// submitting entry i - 1 and entry i (PendingOp::observed). A unit never spans two segments: the
// program may have needed the first tensor's result before it submitted the second (a GAN's
// discriminator step waits for its gradients before the generator's exist), and a unit holding
// both would wait for ever.
//
// `rounds[i]` is the negotiation round that agreed entry i: entries of one round were ready
// together. A unit also ends where the round changes, once it holds `min_bytes`: a unit that
// waits for later rounds starts its transfer later, which on a busy link costs more than the
// collectives it saves (measured: docs/torch_side_by_side.md), but a unit per round of a slow
// backward (ResNet-50: 161 gradients, 147 rounds) pays a collective's fixed cost per tensor.
std::vector<std::vector<int>> MakeLaunchUnits(const std::vector<PlanEntry>& entries,
                                              const std::vector<int64_t>& segments,
                                              const std::vector<int64_t>& rounds,
                                              int64_t min_bytes, int64_t first_bytes,
                                              int64_t unit_bytes);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_LAUNCH_UNITS_H_
