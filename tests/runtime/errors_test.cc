// Bad input gets a clear error on every rank that names the rank, the tensor and the cause, and
// the runtime keeps working afterwards. Runs with OVERLAP_STALL_WARNING_S=1 and
// OVERLAP_STALL_TIMEOUT_S=3 (see BUILD).
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

constexpr absl::Duration kWait = absl::Seconds(30);

std::string Me() { return absl::StrCat("rank ", Rank(), ": "); }

// Waits for `h` and returns its error text ("" on success).
std::string ErrorOf(const absl::StatusOr<Handle>& h) {
  if (!h.ok()) return std::string(h.status().message());
  const absl::Status s = h->Wait(kWait);
  return std::string(s.message());
}

void CheckStillWorks() {
  std::vector<float> x(5, 1.0f);
  absl::StatusOr<Handle> h = Allreduce("still.works", MakeTensor(x.data(), {5}),
                                       MakeTensor(x.data(), {5}), {ReduceOp::kSum});
  REQUIRE(h.ok());
  REQUIRE(h->Wait(kWait).ok());
  CHECK(x[4] == static_cast<float>(Size()));
}

TEST_CASE("shape mismatch fails on every rank, naming both shapes", "[mismatch]") {
  const int64_t cols = Rank() == 1 ? 4 : 3;
  std::vector<float> x(static_cast<size_t>(2 * cols), 1.0f);
  const std::string error = ErrorOf(
      Allreduce("mm.shape", MakeTensor(x.data(), {2, cols}), MakeTensor(x.data(), {2, cols})));
  INFO(error);
  CHECK(absl::StartsWith(error, Me()));
  CHECK(absl::StrContains(
      error,
      "allreduce 'mm.shape': shape mismatch: rank 0 submitted [2,3], rank 1 submitted [2,4]"));
  CheckStillWorks();
}

TEST_CASE("a shape change on one rank under a cached name fails on every rank at once",
          "[mismatch][cache]") {
  // Step 0 caches the name; in step 1 rank 1 changes the shape, so the other ranks, which announce
  // it by cache bit, must send their requests again for rank 0 to compare: that resend has to
  // start a round by itself, well before the stall inspector's 1 s warning would.
  for (int step = 0; step < 2; ++step) {
    const int64_t cols = step == 1 && Rank() == 1 ? 4 : 3;
    std::vector<float> x(static_cast<size_t>(2 * cols), 1.0f);
    const auto start = std::chrono::steady_clock::now();
    const std::string error = ErrorOf(
        Allreduce("mm.cached", MakeTensor(x.data(), {2, cols}), MakeTensor(x.data(), {2, cols})));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(error);
    if (step == 0) {
      CHECK(error.empty());
    } else {
      CHECK(absl::StrContains(error, "allreduce 'mm.cached': shape mismatch"));
      CHECK(seconds < 0.8);
    }
  }
  CheckStillWorks();
}

TEST_CASE("dtype mismatch fails on every rank", "[mismatch]") {
  std::vector<double> d(4, 1.0);
  std::vector<float> f(4, 1.0f);
  const bool odd = Rank() == Size() - 1;
  const Tensor t = odd ? MakeTensor(d.data(), {4}) : MakeTensor(f.data(), {4});
  const std::string error = ErrorOf(Allreduce("mm.dtype", t, t));
  INFO(error);
  CHECK(absl::StartsWith(error, Me()));
  CHECK(absl::StrContains(error, absl::StrCat("dtype mismatch: rank 0 submitted float32, rank ",
                                              Size() - 1, " submitted float64")));
  CheckStillWorks();
}

TEST_CASE("reduce op mismatch fails on every rank", "[mismatch]") {
  std::vector<float> x(4, 1.0f);
  AllreduceOptions options;
  options.op = Rank() == 1 ? ReduceOp::kMax : ReduceOp::kSum;
  const std::string error =
      ErrorOf(Allreduce("mm.op", MakeTensor(x.data(), {4}), MakeTensor(x.data(), {4}), options));
  INFO(error);
  CHECK(absl::StrContains(
      error, "allreduce 'mm.op': reduce op mismatch: rank 0 submitted sum, rank 1 submitted max"));
  CheckStillWorks();
}

TEST_CASE("broadcast root mismatch fails on every rank", "[mismatch]") {
  std::vector<int32_t> x(4, 7);
  BroadcastOptions options;
  options.root = Rank() == 1 ? 1 : 0;
  const std::string error =
      ErrorOf(Broadcast("mm.root", MakeTensor(x.data(), {4}), MakeTensor(x.data(), {4}), options));
  INFO(error);
  CHECK(absl::StrContains(
      error,
      "broadcast 'mm.root': root rank mismatch: rank 0 submitted root 0, rank 1 submitted root 1"));
  CheckStillWorks();
}

TEST_CASE("operation mismatch under one name fails on every rank", "[mismatch]") {
  std::vector<float> x(4, 1.0f);
  absl::StatusOr<Handle> h =
      Rank() == 1 ? Allgather("mm.kind", MakeTensor(x.data(), {4}))
                  : Allreduce("mm.kind", MakeTensor(x.data(), {4}), MakeTensor(x.data(), {4}));
  const std::string error = ErrorOf(h);
  INFO(error);
  CHECK(absl::StrContains(
      error, "operation mismatch: rank 0 submitted allreduce, rank 1 submitted allgather"));
  CheckStillWorks();
}

TEST_CASE("the same name twice in flight is refused locally", "[local]") {
  // Rank 0 holds back so that nobody's first submission can complete before its second.
  if (Rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  absl::StatusOr<Handle> first =
      Allreduce("dup", MakeTensor(a.data(), {4}), MakeTensor(a.data(), {4}));
  absl::StatusOr<Handle> second =
      Allreduce("dup", MakeTensor(b.data(), {4}), MakeTensor(b.data(), {4}));
  REQUIRE(first.ok());
  REQUIRE(!second.ok());
  CHECK(second.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(second.status().message() ==
        Me() +
            "allreduce 'dup': a tensor with this name is already in flight; wait for its handle "
            "before submitting the name again");
  CHECK(first->Wait(kWait).ok());
}

TEST_CASE("null, undersized and unknown-typed buffers are refused locally", "[local]") {
  std::vector<float> x(4, 1.0f);
  Tensor null_tensor = MakeTensor(static_cast<float*>(nullptr), {4});
  absl::StatusOr<Handle> h = Allreduce("bad.null", null_tensor, null_tensor);
  REQUIRE(!h.ok());
  CHECK(h.status().message() == Me() + "allreduce 'bad.null': input buffer is null");

  Tensor small = MakeTensor(x.data(), {4});
  small.capacity_bytes = 8;
  h = Allreduce("bad.small", small, small);
  REQUIRE(!h.ok());
  CHECK(h.status().message() ==
        Me() +
            "allreduce 'bad.small': input buffer holds 8 bytes but shape [4] of float32 needs 16");

  Tensor weird = MakeTensor(x.data(), {4});
  weird.dtype = static_cast<DataType>(42);
  h = Allreduce("bad.dtype", weird, weird);
  REQUIRE(!h.ok());
  CHECK(absl::StrContains(h.status().message(), "allreduce 'bad.dtype': input: unknown dtype 42"));

  AllreduceOptions options;
  options.op = static_cast<ReduceOp>(9);
  h = Allreduce("bad.op", MakeTensor(x.data(), {4}), MakeTensor(x.data(), {4}), options);
  REQUIRE(!h.ok());
  CHECK(absl::StrContains(h.status().message(), "allreduce 'bad.op': unknown reduce op 9"));

  BroadcastOptions root;
  root.root = Size();
  h = Broadcast("bad.root", MakeTensor(x.data(), {4}), MakeTensor(x.data(), {4}), root);
  REQUIRE(!h.ok());
  CHECK(absl::StrContains(h.status().message(),
                          absl::StrCat("root rank ", Size(), " is outside [0, ", Size(), ")")));

  std::vector<int32_t> ints(4, 1);
  AllreduceOptions scaled;
  scaled.postscale = 0.5;
  h = Allreduce("bad.intscale", MakeTensor(ints.data(), {4}), MakeTensor(ints.data(), {4}), scaled);
  REQUIRE(!h.ok());
  CHECK(absl::StrContains(h.status().message(),
                          "prescale/postscale must be 1 for integer dtype int32"));
  CheckStillWorks();
}

TEST_CASE("malformed calls are refused locally with the whole message", "[local][catalogue]") {
  // docs/bad-inputs.md quotes these messages; each names the rank, the operation, the tensor and
  // what is wrong, and none reaches the other ranks.
  std::vector<float> x(8, 1.0f);
  std::vector<double> d(8, 1.0);
  const Tensor t4 = MakeTensor(x.data(), {4});
  auto refused = [](const absl::StatusOr<Handle>& h) {
    REQUIRE(!h.ok());
    CHECK(h.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(h.status().message());
  };

  CHECK(refused(Allreduce("", t4, t4)) == Me() + "allreduce: empty tensor name");
  Tensor negative = MakeTensor(x.data(), {4});
  negative.shape = {2, -2};
  CHECK(refused(Allreduce("bad.negative", negative, negative)) ==
        Me() + "allreduce 'bad.negative': input has a negative dimension in shape [2,-2]");
  CHECK(refused(Allreduce("bad.layout", MakeTensor(x.data(), {8}), MakeTensor(x.data(), {2, 4}))) ==
        Me() + "allreduce 'bad.layout': output float32[2,4] does not match input float32[8]");
  float scalar = 1.0f;
  CHECK(refused(Allgather("bad.scalar", MakeTensor(&scalar, {}))) ==
        Me() + "allgather 'bad.scalar': needs at least one dimension to gather along");
  CHECK(refused(ReduceScatter("bad.scalar.rs", MakeTensor(&scalar, {}))) ==
        Me() + "reducescatter 'bad.scalar.rs': needs at least one dimension to scatter");

  const Tensor rows = MakeTensor(x.data(), {Size() * 2 - 1});
  CHECK(refused(Alltoall("bad.rows", rows)) ==
        Me() + absl::StrCat("alltoall 'bad.rows': first dimension ", Size() * 2 - 1,
                            " does not divide into ", Size(), " equal parts; pass options.splits"));
  AlltoallOptions splits;
  splits.splits = {4};
  CHECK(refused(Alltoall("bad.splits", t4, splits)) ==
        Me() + absl::StrCat("alltoall 'bad.splits': 1 splits for ", Size(), " ranks"));
  splits.splits.assign(static_cast<size_t>(Size()), 1);
  splits.splits[0] = -1;
  CHECK(refused(Alltoall("bad.negsplit", t4, splits)) ==
        Me() + "alltoall 'bad.negsplit': negative split");
  splits.splits.assign(static_cast<size_t>(Size()), 3);
  CHECK(refused(Alltoall("bad.sum", t4, splits)) ==
        Me() + absl::StrCat("alltoall 'bad.sum': splits add up to ", 3 * Size(),
                            " rows but the first dimension is 4"));

  const Tensor f = MakeTensor(x.data(), {4});
  const Tensor g = MakeTensor(d.data(), {4});
  CHECK(refused(GroupedAllreduce({"g.a", "g.b"}, {f, g}, {f, g})) ==
        Me() + "allreduce 'group[g.a,g.b]': a grouped allreduce needs one dtype for all tensors");
  CHECK(refused(GroupedAllreduce({"g.a", "g.b"}, {f}, {f})) ==
        Me() +
            "grouped allreduce 'group[g.a,g.b]': 2 names, 1 inputs and 1 outputs (need equal, "
            "non-zero counts)");
  CheckStillWorks();
}

TEST_CASE("a wait that times out names the tensor and the time waited", "[local][catalogue]") {
  // The last rank submits half a second late, so the others' 10 ms wait must time out.
  const int late = Size() - 1;
  std::vector<float> x(4, 1.0f);
  if (Rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  absl::StatusOr<Handle> h =
      Allreduce("slow.grad", MakeTensor(x.data(), {4}), MakeTensor(x.data(), {4}));
  REQUIRE(h.ok());
  if (Rank() != late) {
    const absl::Status s = h->Wait(absl::Milliseconds(10));
    CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(s.message() == absl::StrCat("rank ", Rank(), ": 'slow.grad' has not completed after 10ms"));
  }
  CHECK(h->Wait(kWait).ok());
}

TEST_CASE("a tensor one rank never submits fails on the others within the stall timeout",
          "[stall]") {
  const int missing = Size() - 1;
  if (Rank() != missing) {
    std::vector<float> x(4, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    const std::string error =
        ErrorOf(Allreduce("stalled.new", MakeTensor(x.data(), {4}), MakeTensor(x.data(), {4})));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(error);
    CHECK(absl::StartsWith(error, Me() + "stalled: allreduce 'stalled.new': submitted by ranks ["));
    CHECK(absl::StrContains(error, absl::StrCat("but not by ranks [", missing, " (")));
    CHECK(seconds >= 2.5);
    CHECK(seconds < 10.0);
  } else {
    // Let the others fail first, so that our next submission is young when they make theirs.
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  CheckStillWorks();
}

TEST_CASE("a cached tensor one rank stops submitting fails on the others", "[stall]") {
  const int missing = Size() - 1;
  std::vector<float> x(4, 1.0f);
  for (int step = 0; step < 2; ++step) {
    if (step == 1 && Rank() == missing) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      continue;
    }
    const std::string error =
        ErrorOf(Allreduce("stalled.cached", MakeTensor(x.data(), {4}), MakeTensor(x.data(), {4})));
    INFO(error);
    if (step == 0) {
      CHECK(error.empty());
    } else {
      CHECK(absl::StrContains(error, "stalled: allreduce 'stalled.cached': submitted by ranks ["));
      CHECK(absl::StrContains(error, absl::StrCat("but not by ranks [", missing, " (")));
    }
  }
  CheckStillWorks();
}

}  // namespace
}  // namespace overlap
