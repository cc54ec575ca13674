#include "runtime/plan/plan_schedule.h"

#include <algorithm>

namespace overlap {

std::map<std::string, std::vector<ScheduledSlice>> DelayedSlices(const ExecutablePlan& plan) {
  std::vector<std::vector<ScheduledSlice>> by_entry(plan.entries.size());
  std::vector<bool> delayed(plan.entries.size(), false);
  for (const ExecBucket& b : plan.buckets) {
    if (b.kind == BucketKind::kAllgather) continue;
    for (const ExecSlice& s : b.slices) {
      const size_t e = static_cast<size_t>(s.entry);
      by_entry[e].push_back(ScheduledSlice{s.offset, s.count, b.delay, b.period, b.phase});
      delayed[e] = delayed[e] || b.delayed();
    }
  }
  std::map<std::string, std::vector<ScheduledSlice>> tensors;
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    if (!delayed[e] || plan.entries[e].response == nullptr) continue;
    std::vector<ScheduledSlice>& slices = by_entry[e];
    std::sort(slices.begin(), slices.end(),
              [](const ScheduledSlice& a, const ScheduledSlice& b) { return a.offset < b.offset; });
    tensors[plan.entries[e].response->name] = std::move(slices);
  }
  return tensors;
}

}  // namespace overlap
