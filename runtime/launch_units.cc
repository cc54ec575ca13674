#include "runtime/launch_units.h"

namespace overlap {
namespace {

int64_t RequestBytes(const Request& request) {
  int64_t bytes = 0;
  for (const TensorMeta& t : request.tensors) {
    bytes += t.NumElements() * static_cast<int64_t>(DataTypeSize(t.dtype));
  }
  return bytes;
}

}  // namespace

std::vector<std::vector<int>> MakeLaunchUnits(const std::vector<PlanEntry>& entries,
                                              const std::vector<int64_t>& groups,
                                              int64_t first_bytes, int64_t unit_bytes) {
  std::vector<std::vector<int>> units;
  int64_t open_bytes = 0;
  for (int i = 0; i < static_cast<int>(entries.size()); ++i) {
    const int64_t bytes = RequestBytes(entries[static_cast<size_t>(i)].response->request);
    const int64_t limit = units.size() <= 1 ? first_bytes : unit_bytes;
    const bool new_group =
        i > 0 && groups[static_cast<size_t>(i)] != groups[static_cast<size_t>(i - 1)];
    if (units.empty() || new_group || (open_bytes > 0 && open_bytes + bytes > limit)) {
      units.emplace_back();
      open_bytes = 0;
    }
    units.back().push_back(i);
    open_bytes += bytes;
  }
  return units;
}

}  // namespace overlap
