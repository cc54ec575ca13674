// Training-like steps of allreduces whose float sums are exact, checked element by element: rank r
// contributes r + step + (i % 5) at element i of every tensor. For the suites that change how
// allreduces run (hierarchical_test, adaptive_test) and must not change what they sum to.
#ifndef OVERLAP_TESTS_RUNTIME_EXACT_STEPS_H_
#define OVERLAP_TESTS_RUNTIME_EXACT_STEPS_H_

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime/overlap.h"

namespace overlap::testing {

inline float StepValue(int rank, int step, size_t i) {
  return static_cast<float>(rank + step + static_cast<int>(i % 5));
}

inline float StepExpected(int step, size_t i) {
  const int n = Size();
  return static_cast<float>(n * (n - 1) / 2 + n * (step + static_cast<int>(i % 5)));
}

// `steps` steps, each an in-place sum of one tensor per entry of `sizes` (elements), named
// "grad.<index>" and submitted last first as a backward would, then waited for (up to `wait`) and
// checked: enough steps for the runtime to freeze a plan.
inline void RunExactSteps(const std::vector<int64_t>& sizes, int steps, absl::Duration wait) {
  std::vector<std::vector<float>> grads;
  for (int64_t n : sizes) grads.emplace_back(static_cast<size_t>(n));
  for (int step = 0; step < steps; ++step) {
    std::vector<Handle> handles;
    for (size_t g = grads.size(); g-- > 0;) {
      for (size_t i = 0; i < grads[g].size(); ++i) grads[g][i] = StepValue(Rank(), step, i);
      const int64_t n = static_cast<int64_t>(grads[g].size());
      absl::StatusOr<Handle> h =
          Allreduce(absl::StrCat("grad.", g), MakeTensor(grads[g].data(), {n}),
                    MakeTensor(grads[g].data(), {n}), {ReduceOp::kSum});
      REQUIRE(h.ok());
      handles.push_back(*h);
    }
    for (Handle& h : handles) CHECK(h.Wait(wait).ok());
    int64_t wrong = 0;
    for (const std::vector<float>& g : grads) {
      for (size_t i = 0; i < g.size(); ++i) wrong += g[i] != StepExpected(step, i);
    }
    INFO("step " << step);
    CHECK(wrong == 0);
  }
}

}  // namespace overlap::testing

#endif  // OVERLAP_TESTS_RUNTIME_EXACT_STEPS_H_
