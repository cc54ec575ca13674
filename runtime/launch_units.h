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

// Launch units over `entries` in order: consecutive entries of the same group (`groups[i]`, the
// negotiation round that agreed entry i) up to `first_bytes` for the first unit and `unit_bytes`
// for the others (an entry larger than that is a unit of its own). Like
// DDP's buckets: a small first unit starts communication early in backward, larger ones later
// pay fewer per-collective costs. A unit is only a launch gate; the data plane still fuses or
// splits its tensors by dtype, op and size.
std::vector<std::vector<int>> MakeLaunchUnits(const std::vector<PlanEntry>& entries,
                                              const std::vector<int64_t>& groups,
                                              int64_t first_bytes, int64_t unit_bytes);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_LAUNCH_UNITS_H_
