#include "tests/scheduler/test_util.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace overlap::sched::testing {

Profile MakeProfile(const std::vector<double>& forward_ms, const std::vector<double>& backward_ms,
                    const std::vector<int64_t>& bytes, double update_ms) {
  Profile p;
  p.model = "toy";
  p.update_ms = update_ms;
  for (size_t i = 0; i < forward_ms.size(); ++i) {
    std::vector<std::pair<std::string, int64_t>> tensors;
    if (bytes[i] > 0) {
      tensors.emplace_back("t" + std::to_string(i), bytes[i]);
    }
    p.AddLayer("l" + std::to_string(i), forward_ms[i], backward_ms[i], tensors);
  }
  (void)p.Finalize();
  return p;
}

double MgwfbpModelMs(const Profile& profile, const Plan& plan, const CostModel& cost) {
  double end = 0;
  for (const Bucket& b : plan.buckets) {
    double ready = 0;
    for (const TensorSlice& s : b.slices) {
      ready = std::max(ready, profile.tensors[s.tensor].ready_ms);
    }
    end = std::max(end, ready) + cost.Ms(0, Collective::kAllreduce, static_cast<double>(b.bytes));
  }
  return profile.forward_ms + std::max(end, profile.backward_ms) + profile.update_ms;
}

std::string CoverageProblem(const Profile& profile, const Plan& plan) {
  // Per tensor and op kind, the slices sorted by offset must tile [0, count) exactly.
  for (size_t t = 0; t < profile.tensors.size(); ++t) {
    for (int op = 0; op < 3; ++op) {
      std::vector<std::pair<int64_t, int64_t>> parts;
      for (const Bucket& b : plan.buckets) {
        if (static_cast<int>(b.op) != op) {
          continue;
        }
        for (const TensorSlice& s : b.slices) {
          if (s.tensor == static_cast<int>(t)) {
            parts.emplace_back(s.offset, s.offset + s.count);
          }
        }
      }
      if (parts.empty()) {
        continue;  // which kinds must be present is checked below
      }
      std::sort(parts.begin(), parts.end());
      int64_t at = 0;
      for (const auto& [begin, end] : parts) {
        if (begin != at) {
          return profile.tensors[t].name + ": gap or overlap";
        }
        at = end;
      }
      if (at != profile.tensors[t].count()) {
        return profile.tensors[t].name + ": tail missing";
      }
    }
    bool any_ar = false, any_rs = false, any_ag = false;
    for (const Bucket& b : plan.buckets) {
      for (const TensorSlice& s : b.slices) {
        if (s.tensor != static_cast<int>(t)) {
          continue;
        }
        any_ar |= b.op == Collective::kAllreduce;
        any_rs |= b.op == Collective::kReduceScatter;
        any_ag |= b.op == Collective::kAllgather;
      }
    }
    if (any_ar == (any_rs || any_ag) || any_rs != any_ag) {
      return profile.tensors[t].name + ": not exactly one of allreduce or RS+AG";
    }
  }
  return "";
}

const char* Sanitizer() { return std::getenv("SANITIZER_BUILD"); }

bool RunsUnderSanitizer(size_t index, size_t stride) {
  return Sanitizer() == nullptr || stride <= 1 || index % stride == 0;
}

}  // namespace overlap::sched::testing
