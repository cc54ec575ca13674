// The launch units of a frozen plan: which tensors start together.
#ifndef OVERLAP_RUNTIME_LAUNCH_UNITS_H_
#define OVERLAP_RUNTIME_LAUNCH_UNITS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/messages.h"

namespace overlap {

// One tensor of the plan: the operation every rank agreed on, with its cache id.
struct PlanEntry {
  int32_t cache_id = -1;
  std::shared_ptr<const Response> response;
};

// Launch units over `entries` in order: consecutive entries of the same group up to `first_bytes`
// for the first unit and `unit_bytes` for the others (an entry larger than that is a unit of its
// own). Like DDP's buckets: a small first unit starts communication early in backward, larger
// ones later pay fewer per-collective costs. A unit is only a launch gate; the data plane still
// fuses or splits its tensors by dtype, op and size.
//
// `groups[i]` is entry i's segment: the runtime starts a new one wherever some rank's program
// looked at an outcome (a Wait, a Poll, a done callback) between submitting entry i - 1 and entry
// i (PendingOp::observed). A unit never spans two segments: the program may have needed the
// first tensor's result before it submitted the second (a GAN's discriminator step waits for its
// gradients before the generator's exist), and a unit holding both would wait for ever. Within a
// segment every tensor was submitted without such a look, so waiting for the last one is safe,
// however far apart negotiation agreed them.
std::vector<std::vector<int>> MakeLaunchUnits(const std::vector<PlanEntry>& entries,
                                              const std::vector<int64_t>& groups,
                                              int64_t first_bytes, int64_t unit_bytes);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_LAUNCH_UNITS_H_
