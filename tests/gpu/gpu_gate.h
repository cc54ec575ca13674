// The check every GPU test case starts with. Where no GPU is usable a case is skipped with a
// visible warning, so the GPU tests still pass on machines without one; OVERLAP_REQUIRE_GPU=1
// (set on GPU machines) turns that skip into a failure, so a broken driver cannot pass as "no GPU".
//
//   TEST_CASE("...") {
//     if (!testing::GpuOrSkip()) return;
//     ...
//   }
#ifndef OVERLAP_TESTS_GPU_GPU_GATE_H_
#define OVERLAP_TESTS_GPU_GPU_GATE_H_

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>

#include "collectives/buffer_ops.h"

namespace overlap {
namespace testing {

// True when a CUDA device is usable. Otherwise FAILs the test case when OVERLAP_REQUIRE_GPU=1,
// and else WARNs "skipping GPU check: <reason>" and returns false.
inline bool GpuOrSkip() {
  if (CudaDeviceCount() > 0) return true;
  const std::string reason = CudaUnavailableReason();
  const char* require = std::getenv("OVERLAP_REQUIRE_GPU");
  if (require != nullptr && std::strcmp(require, "1") == 0) {
    FAIL("OVERLAP_REQUIRE_GPU=1 but no GPU is usable: " << reason);
  }
  WARN("skipping GPU check: " << reason);
  return false;
}

}  // namespace testing
}  // namespace overlap

#endif  // OVERLAP_TESTS_GPU_GPU_GATE_H_
