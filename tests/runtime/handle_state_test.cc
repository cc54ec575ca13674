// HandleState's wait clock: the step profiler reads it when the step closes, after a Python
// program has already freed the handle it waited on. And the backstop of Handle::Wait()
// (WaitBound): a wait the runtime never ends gives up at the bound with the error saying so.
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

TEST_CASE("Handle::Wait() gives up at the wait bound when the runtime never ends the operation") {
  WaitBound bound;
  bound.stall_timeout_s = 0.1;
  bound.collective_timeout_s = 0.2;
  bound.grace = absl::Milliseconds(100);
  auto state = std::make_shared<HandleState>("grad.late", 3, nullptr, nullptr, bound);
  const Handle handle(state);
  const absl::Time start = absl::Now();
  const absl::Status s = handle.Wait();
  const absl::Duration waited = absl::Now() - start;
  CHECK(absl::IsDeadlineExceeded(s));
  CHECK(waited >= absl::Milliseconds(400));
  CHECK(waited < absl::Seconds(5));
  CHECK(s.message() ==
        "rank 3: operation 'grad.late' did not end within 0 s of this rank's wait: the runtime "
        "should have failed it (a stall after OVERLAP_STALL_TIMEOUT_S=0.1, a lost peer or stuck "
        "collective after OVERLAP_COLLECTIVE_TIMEOUT_S=0.2) and did not, so the wait gives up (a "
        "bug in overlap: please report it with every rank's log); the operation may still run, "
        "so its tensors stay allocated until it ends");
  // The operation goes on; once the runtime ends it, a wait returns its own status.
  CHECK_FALSE(handle.Poll());
  state->Complete(absl::UnavailableError("peer lost"));
  CHECK(absl::IsUnavailable(handle.Wait()));
}

TEST_CASE("Handle::Wait() returns an operation's status well within the bound") {
  auto state = std::make_shared<HandleState>("grad.ok", 0, nullptr);
  std::thread completer([state] {
    absl::SleepFor(absl::Milliseconds(20));
    state->Complete(absl::OkStatus());
  });
  CHECK(Handle(state).Wait().ok());
  completer.join();
  CHECK(state->wait_bound().bound() == absl::Seconds(630));  // the defaults' 300 + 300 + 30 s
}

}  // namespace
}  // namespace overlap::internal
