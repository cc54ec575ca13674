#include <catch2/catch.hpp>
#include <vector>
#include "runtime/overlap.h"
TEST_CASE("smoke allreduce") {
  std::vector<float> x(10, overlap::Rank() + 1.0f);
  auto h = overlap::Allreduce("x", overlap::MakeTensor(x.data(), {10}), overlap::MakeTensor(x.data(), {10}), {overlap::ReduceOp::kSum});
  REQUIRE(h.ok());
  REQUIRE(h->Wait(absl::Seconds(20)).ok());
  int n = overlap::Size();
  CHECK(x[3] == n * (n + 1) / 2.0f);
  for (int step = 0; step < 5; ++step) {
    std::vector<float> y(1000, 1.0f);
    auto h2 = overlap::Allreduce("y", overlap::MakeTensor(y.data(), {1000}), overlap::MakeTensor(y.data(), {1000}));
    REQUIRE(h2.ok());
    REQUIRE(h2->Wait(absl::Seconds(20)).ok());
    CHECK(y[999] == 1.0f);
  }
}
