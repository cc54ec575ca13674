// HandleState's wait clock: the step profiler reads it when the step closes, after a Python
// program has already freed the handle it waited on.
#include "runtime/api/handle_state.h"

#include <catch2/catch.hpp>
#include <memory>
#include <thread>

namespace overlap::internal {
namespace {

TEST_CASE("A handle's wait clock outlives the handle") {
  const absl::Time before = absl::Now();
  std::shared_ptr<const WaitClock> clock;
  {
    auto state = std::make_shared<HandleState>("grad.w", 0, nullptr);
    clock = state->clock();
    CHECK(clock->first_wait() == absl::InfiniteFuture());
    CHECK(clock->done_at() == absl::InfiniteFuture());
    std::thread completer([state] {
      absl::SleepFor(absl::Milliseconds(50));
      state->Complete(absl::OkStatus());
    });
    REQUIRE(state->Wait(absl::Seconds(30)).ok());
    completer.join();
    const absl::Time first = clock->first_wait();
    REQUIRE(state->Wait(absl::Seconds(1)).ok());  // a second wait does not move the first
    CHECK(clock->first_wait() == first);
  }
  // The state is gone; the times are not.
  CHECK(clock->first_wait() >= before);
  CHECK(clock->done_at() > clock->first_wait());
  CHECK(clock->done_at() - clock->first_wait() >= absl::Milliseconds(30));
}

TEST_CASE("A wait after completion blocks for nothing") {
  auto state = std::make_shared<HandleState>("grad.b", 0, nullptr);
  state->Complete(absl::OkStatus());
  REQUIRE(state->Wait(absl::Seconds(1)).ok());
  CHECK(state->clock()->first_wait() >= state->clock()->done_at());
}

}  // namespace
}  // namespace overlap::internal
