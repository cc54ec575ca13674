// The fake control collectives (fake_control.h): real results for every call, the sequence rule
// enforced with an error naming both ranks, and fault injection.
#include "tests/fakes/fake_control.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace overlap {
namespace {

using fake::ControlKind;
using fake::FakeControlWorld;

// Tests a request once and returns whether it completed, requiring no error.
bool Done(ControlRequest& request) {
  absl::StatusOr<bool> done = request.Test();
  REQUIRE(done.ok());
  return *done;
}

TEST_CASE("bitwise AND and OR, allgather, gather and broadcast compute every rank's result",
          "[fake]") {
  FakeControlWorld world(3);
  std::vector<std::unique_ptr<ControlCollectives>> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(world.Create(r));

  std::vector<std::vector<uint64_t>> words = {{0b1110, 1}, {0b0111, 3}, {0b1111, 5}};
  std::vector<std::unique_ptr<ControlRequest>> requests;
  for (int r = 0; r < 3; ++r) {
    requests.push_back(*ranks[r]->StartBitwise(BitOp::kAnd, absl::MakeSpan(words[r])));
    if (r < 2) CHECK(!Done(*requests[0]));  // not before every rank started
  }
  for (int r = 0; r < 3; ++r) {
    CHECK(Done(*requests[r]));
    CHECK(words[r] == std::vector<uint64_t>{0b0110, 1});
  }

  std::vector<std::vector<uint64_t>> ors = {{1}, {2}, {8}};
  std::vector<std::vector<uint64_t>> all(3);
  std::vector<std::vector<std::string>> gathered(3, std::vector<std::string>{"stale"});
  std::vector<std::string> broadcast = {"from rank 0", "x", ""};
  requests.clear();
  for (int r = 0; r < 3; ++r) {
    requests.push_back(*ranks[r]->StartBitwise(BitOp::kOr, absl::MakeSpan(ors[r])));
    requests.push_back(*ranks[r]->StartAllgather(10 + static_cast<uint64_t>(r), &all[r]));
    requests.push_back(*ranks[r]->StartGather(
        std::string(static_cast<size_t>(r), 'a' + static_cast<char>(r)), &gathered[r]));
    requests.push_back(*ranks[r]->StartBroadcast(&broadcast[r]));
  }
  for (auto& request : requests) CHECK(Done(*request));
  for (int r = 0; r < 3; ++r) {
    CHECK(ors[r] == std::vector<uint64_t>{11});
    CHECK(all[r] == std::vector<uint64_t>{10, 11, 12});
    CHECK(broadcast[r] == "from rank 0");
  }
  CHECK(gathered[0] == std::vector<std::string>{"", "b", "cc"});
  CHECK(gathered[1].empty());
  CHECK(gathered[2].empty());
  CHECK(world.started().size() == 15);
}

TEST_CASE("ranks that start different calls at one place fail every rank naming both", "[fake]") {
  FakeControlWorld world(2);
  auto a = world.Create(0);
  auto b = world.Create(1);
  std::vector<uint64_t> two = {1, 2}, three = {1, 2, 3};
  auto ra = *a->StartBitwise(BitOp::kAnd, absl::MakeSpan(two));
  auto rb = *b->StartBitwise(BitOp::kAnd, absl::MakeSpan(three));
  for (auto* request : {ra.get(), rb.get()}) {
    absl::StatusOr<bool> done = request->Test();
    REQUIRE(!done.ok());
    CHECK(done.status().code() == absl::StatusCode::kInternal);
    CHECK(done.status().message() ==
          "fake control call 0: rank 0 started AND-allreduce of 2 words but rank 1 started "
          "AND-allreduce of 3 words");
  }
  CHECK(two == std::vector<uint64_t>{1, 2});  // nothing written

  std::string bytes;
  std::vector<uint64_t> all;
  auto rc = *a->StartBroadcast(&bytes);
  auto rd = *b->StartAllgather(1, &all);
  CHECK(absl::StrContains(rc->Test().status().message(),
                          "rank 0 started broadcast but rank 1 "
                          "started allgather"));
}

TEST_CASE("a failed call fails on every rank and a held call never completes", "[fake]") {
  FakeControlWorld world(2);
  world.FailCall(0, absl::UnavailableError("link down"));
  world.HoldCall(1);
  auto a = world.Create(0);
  auto b = world.Create(1);
  std::vector<std::vector<uint64_t>> all(2);
  auto f0 = *a->StartAllgather(1, &all[0]);
  auto f1 = *b->StartAllgather(2, &all[1]);
  CHECK(f0->Test().status().message() == "link down");
  CHECK(f1->Test().status().message() == "link down");
  auto h0 = *a->StartAllgather(1, &all[0]);
  auto h1 = *b->StartAllgather(2, &all[1]);
  CHECK(!Done(*h0));
  CHECK(!Done(*h1));
  const std::vector<fake::StartedControl> started = world.started();
  REQUIRE(started.size() == 4);
  CHECK(started[3].rank == 1);
  CHECK(started[3].index == 1);
  CHECK(started[3].kind == ControlKind::kAllgather);
}

}  // namespace
}  // namespace overlap
