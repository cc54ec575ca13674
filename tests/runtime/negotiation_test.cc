// Negotiated mode under staggered submissions: no step may wait for a timer. Runs with
// OVERLAP_PLAN_AFTER_STEPS=0 (every step negotiated) and OVERLAP_STALL_WARNING_S=30, so a lost
// wake-up - a round request that rank 0 read and then slept on until its stall timer - shows as
// a step of tens of seconds instead of milliseconds.
#include <catch2/catch.hpp>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

TEST_CASE("staggered negotiated steps never wait for the stall timer", "[negotiation]") {
  std::mt19937 rng(1234 + static_cast<unsigned>(Rank()));
  std::uniform_int_distribution<int> delay_us(0, 1500);
  std::vector<std::vector<float>> grads(3, std::vector<float>(256));
  double slowest = 0;
  for (int step = 0; step < 1000; ++step) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<Handle> handles;
    for (size_t g = 0; g < grads.size(); ++g) {
      // Ranks reach each tensor at different times after computing, as backward does; the busy
      // wait keeps the cores loaded, so coordinator threads get delayed and rounds run long.
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::microseconds(delay_us(rng));
      while (std::chrono::steady_clock::now() < until) {
      }
      std::fill(grads[g].begin(), grads[g].end(), static_cast<float>(Rank() + step));
      absl::StatusOr<Handle> h =
          Allreduce(absl::StrCat("neg.", g), MakeTensor(grads[g].data(), {256}),
                    MakeTensor(grads[g].data(), {256}), {ReduceOp::kSum});
      REQUIRE(h.ok());
      handles.push_back(*h);
    }
    for (Handle& h : handles) REQUIRE(h.Wait(absl::Seconds(120)).ok());
    const float want = static_cast<float>(Size() * (Size() - 1) / 2 + Size() * step);
    REQUIRE(grads[2][255] == want);
    slowest = std::max(
        slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  INFO("slowest step " << slowest << " s");
  CHECK(slowest < 2.0);
  CHECK(Stats().planned_launches == 0);
}

}  // namespace
}  // namespace overlap
