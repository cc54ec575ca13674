// Process sets on 4 ranks (overlap.h, AddProcessSet): sets {0,1}, {2,3} and {1,2,3} run their
// collectives concurrently with the global set's, each with its own runtime, and every value is
// checked on every rank against the sum computed here. Bad ranks, a disagreement between ranks,
// a non-member's submission, a broadcast root outside the set and a removed set fail with the
// same clear message on every rank. The test cases run in order and build on each other's sets.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

bool In(const std::vector<int>& ranks) {
  for (int r : ranks) {
    if (r == Rank()) return true;
  }
  return false;
}

std::string ErrorOf(const absl::StatusOr<Handle>& h) {
  if (!h.ok()) return std::string(h.status().message());
  return std::string(h->Wait(kWait).message());
}

std::string AddError(const std::vector<int>& ranks) {
  absl::StatusOr<int> id = AddProcessSet(ranks);
  return id.ok() ? absl::StrCat("added as ", *id) : std::string(id.status().message());
}

const std::vector<int> kPair = {0, 1};      // set 1
const std::vector<int> kUpper = {2, 3};     // set 2
const std::vector<int> kTriple = {1, 2, 3}; // set 3

TEST_CASE("AddProcessSet refuses bad ranks with the same message on every rank", "[validate]") {
  REQUIRE(Size() == 4);
  CHECK(AddError({}) == "AddProcessSet([]): a process set needs at least one rank");
  CHECK(AddError({0, 0}) == "AddProcessSet([0, 0]): rank 0 is listed twice");
  CHECK(AddError({1, 0}) ==
        "AddProcessSet([1, 0]): the ranks must be in increasing order (1 comes before 0)");
  CHECK(AddError({2, 4}) == "AddProcessSet([2, 4]): rank 4 is out of range (the job has ranks 0..3)");
  CHECK(AddError({-1, 2}) ==
        "AddProcessSet([-1, 2]): rank -1 is out of range (the job has ranks 0..3)");
  CHECK(AddError({0, 1, 2, 3}) ==
        "AddProcessSet([0, 1, 2, 3]): these are all the ranks, which the global process set 0 "
        "already has");
  // Ranks that ask for different sets all learn who asked for what, and nobody waits.
  CHECK(AddError(Rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2}) ==
        "AddProcessSet: every rank must make the same call, in the same order: rank 0 asked for "
        "[0, 1]; ranks 1, 2, 3 asked for [0, 2]");
  CHECK(ProcessSetIds() == std::vector<int>{0});
}

TEST_CASE("three process sets allreduce concurrently with the global set", "[allreduce]") {
  REQUIRE(AddProcessSet(kPair).value_or(-1) == 1);
  REQUIRE(AddProcessSet(kUpper).value_or(-1) == 2);
  REQUIRE(AddProcessSet(kTriple).value_or(-1) == 3);
  CHECK(ProcessSetIds() == std::vector<int>{0, 1, 2, 3});
  CHECK(ProcessSetRanks(3).value_or(std::vector<int>{}) == kTriple);
  CHECK(ProcessSetSize(2).value_or(-1) == 2);
  CHECK(ProcessSetSize(0).value_or(-1) == 4);
  CHECK(ProcessSetRank(0).value_or(-2) == Rank());
  CHECK(ProcessSetRank(3).value_or(-1) == (In(kTriple) ? Rank() - 1 : -1));
  CHECK(AddError(kPair) == "AddProcessSet([0, 1]): process set 1 already has these ranks");

  // The same names in every set: names are per set. Sizes differ so that fusion, direct sends
  // and (over the steps) the observed plan of each set's runtime all take part.
  const int r = Rank();
  for (int step = 0; step < 12; ++step) {
    std::vector<float> global(1000), pair(300), triple(70000);
    std::vector<double> upper(33);
    for (size_t i = 0; i < global.size(); ++i) global[i] = float((r + 1) * (i % 5 + step));
    for (size_t i = 0; i < pair.size(); ++i) pair[i] = float(r * 10 + i % 3);
    for (size_t i = 0; i < upper.size(); ++i) upper[i] = double(r) * double(i + step);
    for (size_t i = 0; i < triple.size(); ++i) triple[i] = float((r + 1) * (i % 11));
    std::vector<absl::StatusOr<Handle>> handles;
    handles.push_back(Allreduce("x", MakeTensor(global.data(), {1000}),
                                MakeTensor(global.data(), {1000}), {ReduceOp::kSum}));
    AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    if (In(kPair)) {
      sum.process_set = 1;
      handles.push_back(
          Allreduce("x", MakeTensor(pair.data(), {300}), MakeTensor(pair.data(), {300}), sum));
    }
    if (In(kUpper)) {
      sum.process_set = 2;
      handles.push_back(
          Allreduce("x", MakeTensor(upper.data(), {33}), MakeTensor(upper.data(), {33}), sum));
    }
    if (In(kTriple)) {
      AllreduceOptions average;  // divides by the set's size, 3
      average.process_set = 3;
      handles.push_back(Allreduce("x", MakeTensor(triple.data(), {70000}),
                                  MakeTensor(triple.data(), {70000}), average));
    }
    for (const absl::StatusOr<Handle>& h : handles) {
      REQUIRE(h.ok());
      REQUIRE(h->Wait(kWait).ok());
    }
    bool global_ok = true, pair_ok = true, upper_ok = true, triple_ok = true;
    for (size_t i = 0; i < global.size(); ++i) global_ok &= global[i] == float(10 * (i % 5 + step));
    for (size_t i = 0; i < pair.size() && In(kPair); ++i) pair_ok &= pair[i] == float(10 + 2 * (i % 3));
    for (size_t i = 0; i < upper.size() && In(kUpper); ++i) {
      upper_ok &= upper[i] == 5.0 * double(i + step);
    }
    for (size_t i = 0; i < triple.size() && In(kTriple); ++i) {
      triple_ok &= triple[i] == float(3 * (i % 11));
    }
    INFO("step " << step);
    CHECK(global_ok);
    CHECK(pair_ok);
    CHECK(upper_ok);
    CHECK(triple_ok);
  }
}

TEST_CASE("allgather, broadcast, reduce-scatter, alltoall and barrier within a set", "[ops]") {
  const int r = Rank();
  if (In(kTriple)) {
    // Ragged allgather: global rank r sends r rows of 2, in set order.
    std::vector<int32_t> rows(static_cast<size_t>(2 * r));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = r * 100 + static_cast<int32_t>(i);
    AllgatherOptions gather;
    gather.process_set = 3;
    absl::StatusOr<Handle> h = Allgather("ps.gather", MakeTensor(rows.data(), {r, 2}), gather);
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    const Tensor& out = h->output();
    REQUIRE(out.shape == std::vector<int64_t>{6, 2});
    std::vector<int32_t> expected;
    for (int m : kTriple) {
      for (int i = 0; i < 2 * m; ++i) expected.push_back(m * 100 + i);
    }
    const int32_t* got = static_cast<const int32_t*>(out.data);
    CHECK(std::vector<int32_t>(got, got + 12) == expected);

    // Broadcast from global rank 2, the set's second member.
    std::vector<double> b(5, 7.0 * r);
    BroadcastOptions from2;
    from2.root = 2;
    from2.process_set = 3;
    absl::StatusOr<Handle> hb =
        Broadcast("ps.bcast", MakeTensor(b.data(), {5}), MakeTensor(b.data(), {5}), from2);
    REQUIRE(hb.ok());
    REQUIRE(hb->Wait(kWait).ok());
    CHECK(b == std::vector<double>(5, 14.0));

    // Alltoall in equal parts of the set's 3 members: set rank k gets row k of every member.
    std::vector<int64_t> rows3 = {r * 10 + 0, r * 10 + 1, r * 10 + 2};
    AlltoallOptions parts;
    parts.process_set = 3;
    absl::StatusOr<Handle> ha = Alltoall("ps.alltoall", MakeTensor(rows3.data(), {3}), parts);
    REQUIRE(ha.ok());
    REQUIRE(ha->Wait(kWait).ok());
    const int k = r - 1;
    const int64_t* a = static_cast<const int64_t*>(ha->output().data);
    REQUIRE(ha->output().shape == std::vector<int64_t>{3});
    CHECK(std::vector<int64_t>(a, a + 3) == std::vector<int64_t>{10 + k, 20 + k, 30 + k});
    CHECK(ha->received_splits() == std::vector<int64_t>{1, 1, 1});
    absl::StatusOr<Handle> barrier = Barrier(3);
    REQUIRE(barrier.ok());
    CHECK(barrier->Wait(kWait).ok());
  }
  if (In(kUpper)) {
    // Rows summed over ranks 2 and 3, two rows each: set rank k keeps rows 2k and 2k + 1.
    std::vector<float> rs = {float(r), float(2 * r), float(3 * r), float(4 * r)};
    ReduceScatterOptions scatter;
    scatter.op = ReduceOp::kSum;
    scatter.process_set = 2;
    absl::StatusOr<Handle> h = ReduceScatter("ps.rs", MakeTensor(rs.data(), {4, 1}), scatter);
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    REQUIRE(h->output().shape == std::vector<int64_t>{2, 1});
    const float* got = static_cast<const float*>(h->output().data);
    const float first = r == 2 ? 5.0f : 15.0f;
    CHECK(std::vector<float>(got, got + 2) == std::vector<float>{first, first + 5.0f});
  }
  // A root outside the set is refused on every rank, member or not, before any communication.
  std::vector<float> x(3, 1.0f);
  BroadcastOptions from0;
  from0.root = 0;
  from0.process_set = 3;
  CHECK(ErrorOf(Broadcast("ps.bcast.bad", MakeTensor(x.data(), {3}), MakeTensor(x.data(), {3}),
                          from0)) ==
        absl::StrCat("rank ", r, ": broadcast 'ps.bcast.bad': root rank 0 is not a member of "
                     "process set 3 (ranks [1, 2, 3])"));
  absl::StatusOr<Handle> all = Barrier();
  REQUIRE(all.ok());
  CHECK(all->Wait(kWait).ok());
}

TEST_CASE("submissions a rank cannot make to a set fail clearly", "[errors]") {
  const int r = Rank();
  std::vector<float> x(3, 1.0f);
  const Tensor t = MakeTensor(x.data(), {3});
  AllreduceOptions upper;
  upper.process_set = 2;
  if (!In(kUpper)) {
    CHECK(ErrorOf(Allreduce("ps.foreign", t, t, upper)) ==
          absl::StrCat("rank ", r, ": allreduce 'ps.foreign': rank ", r,
                       " is not a member of process set 2 (ranks [2, 3])"));
    CHECK(ProcessSetRank(2).status().message() ==
          absl::StrCat("rank ", r, " is not a member of process set 2 (ranks [2, 3])"));
  }
  AllreduceOptions unknown;
  unknown.process_set = 42;
  CHECK(ErrorOf(Allreduce("ps.unknown", t, t, unknown)) ==
        absl::StrCat("rank ", r, ": allreduce 'ps.unknown': process set 42 is not registered "
                     "(registered: 0, 1, 2, 3)"));
  AllreduceOptions compressed = upper;
  compressed.compression = "fp16";
  CHECK(ErrorOf(Allreduce("ps.compressed", t, t, compressed)) ==
        absl::StrCat("rank ", r, ": allreduce 'ps.compressed': process set 2: compression and "
                     "delayed updates (delay, period, phase) run on the global process set 0 "
                     "only"));
  if (In(kTriple)) {
    // A mismatch inside a set fails every member's handle, saying which set and how it counts.
    const int64_t n = r == 3 ? 4 : 3;
    std::vector<float> y(4, 1.0f);
    AllreduceOptions triple;
    triple.process_set = 3;
    const std::string error = ErrorOf(
        Allreduce("ps.mismatch", MakeTensor(y.data(), {n}), MakeTensor(y.data(), {n}), triple));
    INFO(error);
    CHECK(absl::StartsWith(error,
                           absl::StrCat("process set 3 (ranks [1, 2, 3], numbered 0..2 below): "
                                        "rank ", r - 1, ": ")));
    CHECK(absl::StrContains(error, "allreduce 'ps.mismatch': shape mismatch"));
    // The set goes on working.
    std::vector<float> z(2, float(r));
    AllreduceOptions sum = triple;
    sum.op = ReduceOp::kSum;
    absl::StatusOr<Handle> h = Allreduce("ps.after", MakeTensor(z.data(), {2}),
                                         MakeTensor(z.data(), {2}), sum);
    REQUIRE(h.ok());
    CHECK(h->Wait(kWait).ok());
    CHECK(z == std::vector<float>(2, 6.0f));
  }
}

TEST_CASE("RemoveProcessSet shuts a set down on every rank; ids are not reused", "[remove]") {
  const int r = Rank();
  REQUIRE(RemoveProcessSet(1).ok());
  CHECK(ProcessSetIds() == std::vector<int>{0, 2, 3});
  std::vector<float> x(3, 1.0f);
  const Tensor t = MakeTensor(x.data(), {3});
  AllreduceOptions removed;
  removed.process_set = 1;
  CHECK(ErrorOf(Allreduce("ps.removed", t, t, removed)) ==
        absl::StrCat("rank ", r, ": allreduce 'ps.removed': process set 1 was removed "
                     "(RemoveProcessSet)"));
  CHECK(RemoveProcessSet(1).message() == "RemoveProcessSet(1): process set 1 was removed already");
  CHECK(RemoveProcessSet(0).message() ==
        "RemoveProcessSet(0): the global process set 0 cannot be removed");
  CHECK(RemoveProcessSet(42).message() ==
        "RemoveProcessSet(42): process set 42 is not registered (registered: 0, 2, 3)");
  CHECK(RemoveProcessSet(r == 0 ? 2 : 3).message() ==
        "RemoveProcessSet: every rank must make the same call, in the same order: rank 0 asked "
        "for process set 2; ranks 1, 2, 3 asked for process set 3");
  CHECK(ProcessSetIds() == std::vector<int>{0, 2, 3});

  // The same ranks again: a new set with a new id, working at once.
  REQUIRE(AddProcessSet(kPair).value_or(-1) == 4);
  if (In(kPair)) {
    std::vector<int64_t> v = {r + 1, 2 * (r + 1)};
    AllreduceOptions product;
    product.op = ReduceOp::kProduct;
    product.process_set = 4;
    absl::StatusOr<Handle> h =
        Allreduce("ps.again", MakeTensor(v.data(), {2}), MakeTensor(v.data(), {2}), product);
    REQUIRE(h.ok());
    CHECK(h->Wait(kWait).ok());
    CHECK(v == std::vector<int64_t>{2, 8});
  }
  // Sets 2, 3 and 4 stay registered: Shutdown (in the test main) stops them before the global one.
}

}  // namespace
}  // namespace overlap
