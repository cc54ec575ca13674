#include "runtime/plan/launch_units.h"

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
                                              const std::vector<int64_t>& segments,
                                              const std::vector<int64_t>& rounds,
                                              int64_t min_bytes, int64_t first_bytes,
                                              int64_t unit_bytes) {
  std::vector<std::vector<int>> units;
  int64_t open_bytes = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const int64_t bytes = RequestBytes(entries[i].response->request);
    const int64_t limit = units.size() <= 1 ? first_bytes : unit_bytes;
    const bool new_segment = i > 0 && segments[i] != segments[i - 1];
    const bool new_round = i > 0 && rounds[i] != rounds[i - 1];
    if (units.empty() || new_segment || (new_round && open_bytes >= min_bytes) ||
        (open_bytes > 0 && open_bytes + bytes > limit)) {
      units.emplace_back();
      open_bytes = 0;
    }
    units.back().push_back(static_cast<int>(i));
    open_bytes += bytes;
  }
  return units;
}

}  // namespace overlap
