// covap's R=auto through the runtime, asked for by OVERLAP_COMPRESSION=covap:R=auto or, with
// COVAP_AUTO_IN_OPTIONS set, by the allreduce's own options (tests/runtime/BUILD): the
// steps before every rank agrees on the measured communication/computation ratio are exact sums
// (R=1); at the agreed step every rank takes the same ratio; after it, with a 4 MiB allreduce
// and next to no compute, the ratio is large, R > 1, and the sums arrive shard by shard with
// their residuals, none of the gradient lost.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/overlap.h"
#include "tests/runtime/agreed.h"

namespace overlap {
namespace {

constexpr int kSteps = 60;
constexpr int64_t kElements = 1 << 20;
// OVERLAP_PLAN_AFTER_STEPS + OVERLAP_PROFILE_STEPS + 2 in tests/runtime/BUILD: the first forward
// marker at which the ratio is agreed.
constexpr int kAgreedAt = 3 + 3 + 2;
// The checks read every kStride-th element: reading all of them each step was "compute" as long as
// the allreduce, and on a loaded machine the ratio came out below 1 (R = 1).
constexpr int64_t kStride = 61;

TEST_CASE("covap R=auto: exact until the ratio is agreed, then compressed, nothing lost",
          "[covap]") {
  const int size = Size();
  std::vector<float> grad(kElements, 1.0f);
  std::vector<float> out(kElements);
  std::vector<double> delivered(kElements, 0.0);
  double ratio_seen = 0;
  int64_t agreed_step = -1;
  bool saw_zero_after = false;
  AllreduceOptions options;
  options.op = ReduceOp::kSum;
  if (std::getenv("COVAP_AUTO_IN_OPTIONS") != nullptr) options.compression = "covap:R=auto";
  for (int step = 1; step <= kSteps; ++step) {
    REQUIRE(StartForward().ok());
    const double ratio = Stats().comm_compute_ratio;
    if (ratio > 0 && agreed_step < 0) {
      agreed_step = step;
      ratio_seen = ratio;
    }
    REQUIRE(StartBackward().ok());
    absl::StatusOr<Handle> h = Allreduce("covap.grad", MakeTensor(grad.data(), {kElements}),
                                         MakeTensor(out.data(), {kElements}), options);
    REQUIRE(h.ok());
    REQUIRE(StartUpdate().ok());
    REQUIRE(h->Wait(absl::Seconds(60)).ok());
    INFO("rank " << Rank() << " step " << step << " ratio " << ratio);
    bool all_whole = true;      // R=1: every element exactly `size`
    bool all_multiples = true;  // each element 0 (its shard not sent) or whole steps' sums
    for (int64_t i = 0; i < kElements; i += kStride) {
      all_whole = all_whole && out[i] == size;
      all_multiples = all_multiples && std::fmod(out[i], static_cast<float>(size)) == 0.0f;
      saw_zero_after = saw_zero_after || (agreed_step >= 0 && out[i] == 0.0f);
      delivered[i] += out[i];
    }
    REQUIRE((agreed_step < 0 ? all_whole : all_multiples));
  }
  INFO("rank " << Rank() << ": ratio " << ratio_seen << " agreed at step " << agreed_step);
  REQUIRE(agreed_step == kAgreedAt);
  // The same ratio on every rank, bit for bit.
  int64_t bits = 0;
  std::memcpy(&bits, &ratio_seen, sizeof(bits));
  REQUIRE(testing::AgreedMax(bits) == -testing::AgreedMax(-bits));
  const int interval = std::min(64, static_cast<int>(std::ceil(ratio_seen)));
  REQUIRE(interval > 1);  // 4 MiB of network per step against next to no compute
  REQUIRE(saw_zero_after);
  // Error feedback: what each element has not received yet is still in its residual, at most
  // R - 1 steps of it.
  double least = std::numeric_limits<double>::infinity(), most = 0;
  for (int64_t i = 0; i < kElements; i += kStride) {
    least = std::min(least, delivered[i]);
    most = std::max(most, delivered[i]);
  }
  const double all = static_cast<double>(kSteps) * size;
  CHECK(all - most >= 0);
  CHECK(all - least <= static_cast<double>(interval - 1) * size);
}

}  // namespace
}  // namespace overlap
