// Only allreduce may run while some ranks have joined (runtime/overlap.h, Join): any other
// operation fails on every rank that submitted it as soon as rank 0 knows of the join, even when
// its name differs from rank to rank (automatic names are numbered per process, and diverge once
// some ranks join), and an allreduce and a later Join still complete. The first half of the
// ranks join; the others submit. Runs with OVERLAP_STALL_TIMEOUT_S=60 (see BUILD), so a failure
// that waited for the stall inspector would take a minute, not the seconds asserted here.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

bool JoinsFirst() { return Rank() < Size() / 2; }

void WaitOk(const absl::StatusOr<Handle>& h) {
  INFO(h.status().message());
  REQUIRE(h.ok());
  const absl::Status s = h->Wait(kWait);
  INFO(s.message());
  REQUIRE(s.ok());
}

// The error of `h` ("" on success) and the seconds from `start` until it came.
std::pair<std::string, double> ErrorAndSeconds(const absl::StatusOr<Handle>& h,
                                               std::chrono::steady_clock::time_point start) {
  std::string error = h.ok() ? std::string(h->Wait(kWait).message())
                             : std::string(h.status().message());
  return {error,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

// What every refused operation's error says after its own description.
void CheckRefusal(const std::string& error, const std::string& what, double seconds) {
  INFO(error);
  CHECK(absl::StartsWith(error, absl::StrCat("rank ", Rank(), ": ", what,
                                             " cannot run while ranks [0 (")));
  for (int r = 1; r < Size() / 2; ++r) CHECK(absl::StrContains(error, absl::StrCat(", ", r, " (")));
  CHECK(!absl::StrContains(error, absl::StrCat(Size() / 2, " (")));
  CHECK(absl::EndsWith(error, "have joined; only allreduce may run during a join"));
  CHECK(seconds < 10.0);
}

// The ranks that did not join reduce once more (the joined ones stand in with zeros), then join,
// which completes the joined ranks' `join`; afterwards every rank reduces again.
void AllreduceThenJoin(const std::string& tag, const absl::StatusOr<Handle>& join) {
  if (JoinsFirst()) {
    WaitOk(join);
  } else {
    std::vector<float> x(6, 1.0f);
    WaitOk(Allreduce(absl::StrCat(tag, ".during"), MakeTensor(x.data(), {6}),
                     MakeTensor(x.data(), {6}), {ReduceOp::kSum}));
    CHECK(x[5] == static_cast<float>(Size() - Size() / 2));
    WaitOk(Join());
  }
  std::vector<float> y(3, 1.0f);
  WaitOk(Allreduce(absl::StrCat(tag, ".after"), MakeTensor(y.data(), {3}),
                   MakeTensor(y.data(), {3}), {ReduceOp::kSum}));
  CHECK(y[2] == static_cast<float>(Size()));
}

// Each rank that did not join submits `submit(name)`, under a name of its own when `own_names`,
// else under `tag`; the first half of the ranks join, before or after the others submit.
template <typename Submit>
void RefusedWhileJoined(const std::string& tag, const char* kind, bool own_names, bool join_late,
                        Submit submit) {
  absl::StatusOr<Handle> join;
  if (JoinsFirst()) {
    if (join_late) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    join = Join();
    REQUIRE(join.ok());
  } else {
    if (!join_late) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const std::string name = own_names ? absl::StrCat(tag, ".rank", Rank()) : tag;
    const auto start = std::chrono::steady_clock::now();
    const auto [error, seconds] = ErrorAndSeconds(submit(name), start);
    CheckRefusal(error, absl::StrCat(kind, " '", name, "'"), seconds);
  }
  AllreduceThenJoin(tag, join);
}

TEST_CASE("allgathers named differently on each rank fail at once while ranks have joined",
          "[join]") {
  for (bool join_late : {false, true}) {
    INFO("join_late " << join_late);
    std::vector<float> rows(static_cast<size_t>(2 * 3), static_cast<float>(Rank()));
    RefusedWhileJoined(join_late ? "join.gather.late" : "join.gather", "allgather",
                       /*own_names=*/true, join_late, [&](const std::string& name) {
                         return Allgather(name, MakeTensor(rows.data(), {2, 3}));
                       });
  }
}

TEST_CASE("broadcasts with different names and roots fail at once while ranks have joined",
          "[join]") {
  std::vector<float> x(4, 1.0f);
  RefusedWhileJoined("join.bcast", "broadcast", /*own_names=*/true, /*join_late=*/false,
                     [&](const std::string& name) {
                       return Broadcast(name, MakeTensor(x.data(), {4}),
                                        MakeTensor(x.data(), {4}), {Rank()});
                     });
}

TEST_CASE("a cached allgather fails at once while ranks have joined", "[join][cache]") {
  std::vector<float> rows(3, static_cast<float>(Rank()));
  absl::StatusOr<Handle> first = Allgather("join.cached", MakeTensor(rows.data(), {1, 3}));
  WaitOk(first);
  REQUIRE(first->output().shape == std::vector<int64_t>{static_cast<int64_t>(Size()), 3});
  RefusedWhileJoined("join.cached", "allgather", /*own_names=*/false, /*join_late=*/false,
                     [&](const std::string& name) {
                       return Allgather(name, MakeTensor(rows.data(), {1, 3}));
                     });
}

}  // namespace
}  // namespace overlap
