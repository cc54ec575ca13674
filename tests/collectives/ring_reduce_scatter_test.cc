// The ring reduce-scatter (collectives/ring_reduce_scatter.h) against values computed on every
// rank: uneven and empty chunks, each dtype family and reduction, two rings in flight on one
// communicator, and the executor's choice of the ring for large reduce-scatters.
#include "collectives/ring_reduce_scatter.h"

#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "numeric/half.h"
#include "collectives/mpi_executor.h"
#include "tests/collectives/mpi_world.h"

namespace overlap {
namespace {

using testing::Rank;
using testing::Size;

// Rank q's input element i: small integers, so sums and products are exact in every dtype.
double Input(int q, int64_t i) { return static_cast<double>((q + 1) * ((i % 5) + 1) % 7) - 2; }

double Reduced(ReduceOp op, int64_t i) {
  double r = Input(0, i);
  for (int q = 1; q < Size(); ++q) {
    const double v = Input(q, i);
    switch (op) {
      case ReduceOp::kSum: r += v; break;
      case ReduceOp::kMax: r = std::max(r, v); break;
      case ReduceOp::kMin: r = std::min(r, v); break;
      default: r *= v; break;
    }
  }
  return r;
}

// Counts per rank: rank r gets base + r * skew elements (0 for some ranks when base is 0).
std::vector<int> Counts(int base, int skew) {
  std::vector<int> counts(static_cast<size_t>(Size()));
  for (int r = 0; r < Size(); ++r) counts[static_cast<size_t>(r)] = base + r * skew;
  return counts;
}

template <typename T>
std::vector<T> MakeInput(int64_t n, T (*convert)(double)) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = convert(Input(Rank(), i));
  return v;
}

// Runs one ring to completion; returns this rank's chunk.
template <typename T>
std::vector<T> RunRing(const std::vector<T>& input, const std::vector<int>& counts,
                       MPI_Datatype type, MPI_Op op, int tag) {
  std::vector<T> out(static_cast<size_t>(counts[static_cast<size_t>(Rank())]));
  auto ring = RingReduceScatter::Start(MPI_COMM_WORLD, tag, input.data(), out.data(), counts, type,
                                       sizeof(T), op);
  REQUIRE(ring.ok());
  while (true) {
    absl::StatusOr<bool> done = (*ring)->Test();
    REQUIRE(done.ok());
    if (*done) break;
  }
  return out;
}

int64_t Offset(const std::vector<int>& counts) {
  return std::accumulate(counts.begin(), counts.begin() + Rank(), int64_t{0});
}

float ToFloat(double v) { return static_cast<float>(v); }
double ToDouble(double v) { return v; }
int32_t ToInt(double v) { return static_cast<int32_t>(v); }
uint16_t ToHalf(double v) { return FloatToHalf(static_cast<float>(v)); }

TEST_CASE("ring reduce-scatter: float32 sum with uneven and empty chunks") {
  for (const auto& [base, skew] : {std::pair{0, 3}, std::pair{1000, 17}, std::pair{5, 0}}) {
    const std::vector<int> counts = Counts(base, skew);
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    const std::vector<float> in = MakeInput<float>(total, ToFloat);
    const std::vector<float> out = RunRing(in, counts, MPI_FLOAT, MPI_SUM, 7);
    const int64_t offset = Offset(counts);
    for (size_t i = 0; i < out.size(); ++i) {
      CHECK(out[i] == static_cast<float>(Reduced(ReduceOp::kSum, offset + static_cast<int64_t>(i))));
    }
    // The input is only read.
    CHECK(in == MakeInput<float>(total, ToFloat));
  }
}

TEST_CASE("ring reduce-scatter: max, min and product on int32 and float64") {
  const std::vector<int> counts = Counts(333, 1);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t offset = Offset(counts);
  const std::vector<int32_t> ints = MakeInput<int32_t>(total, ToInt);
  const std::vector<int32_t> max = RunRing(ints, counts, MPI_INT32_T, MPI_MAX, 8);
  const std::vector<int32_t> min = RunRing(ints, counts, MPI_INT32_T, MPI_MIN, 9);
  const std::vector<double> doubles = MakeInput<double>(total, ToDouble);
  const std::vector<double> prod = RunRing(doubles, counts, MPI_DOUBLE, MPI_PROD, 10);
  for (size_t i = 0; i < max.size(); ++i) {
    const int64_t at = offset + static_cast<int64_t>(i);
    CHECK(max[i] == static_cast<int32_t>(Reduced(ReduceOp::kMax, at)));
    CHECK(min[i] == static_cast<int32_t>(Reduced(ReduceOp::kMin, at)));
    CHECK(prod[i] == Reduced(ReduceOp::kProduct, at));
  }
}

TEST_CASE("ring reduce-scatter: fp16 through the executor's user-defined op") {
  const std::vector<int> counts = Counts(4096, 3);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  absl::StatusOr<MPI_Op> op = MpiReduceOp(DataType::kFloat16, ReduceOp::kSum);
  REQUIRE(op.ok());
  const std::vector<uint16_t> out =
      RunRing(MakeInput<uint16_t>(total, ToHalf), counts, MpiDataType(DataType::kFloat16), *op, 11);
  const int64_t offset = Offset(counts);
  for (size_t i = 0; i < out.size(); ++i) {
    CHECK(HalfToFloat(out[i]) ==
          static_cast<float>(Reduced(ReduceOp::kSum, offset + static_cast<int64_t>(i))));
  }
}

TEST_CASE("ring reduce-scatter: two rings in flight on one communicator") {
  const std::vector<int> small = Counts(100, 1), large = Counts(200000, 0);
  const int64_t small_total = std::accumulate(small.begin(), small.end(), int64_t{0});
  const int64_t large_total = std::accumulate(large.begin(), large.end(), int64_t{0});
  const std::vector<float> a = MakeInput<float>(large_total, ToFloat);
  const std::vector<float> b = MakeInput<float>(small_total, ToFloat);
  std::vector<float> out_a(static_cast<size_t>(large[static_cast<size_t>(Rank())]));
  std::vector<float> out_b(static_cast<size_t>(small[static_cast<size_t>(Rank())]));
  auto ra = RingReduceScatter::Start(MPI_COMM_WORLD, 21, a.data(), out_a.data(), large, MPI_FLOAT,
                                     4, MPI_SUM);
  auto rb = RingReduceScatter::Start(MPI_COMM_WORLD, 22, b.data(), out_b.data(), small, MPI_FLOAT,
                                     4, MPI_SUM);
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  bool done_a = false, done_b = false;
  while (!done_a || !done_b) {  // the small one is tested first, so it finishes first
    if (!done_b) done_b = *(*rb)->Test();
    if (!done_a) done_a = *(*ra)->Test();
  }
  for (size_t i = 0; i < out_a.size(); ++i) {
    CHECK(out_a[i] == static_cast<float>(Reduced(
                          ReduceOp::kSum, Offset(large) + static_cast<int64_t>(i))));
  }
  for (size_t i = 0; i < out_b.size(); ++i) {
    CHECK(out_b[i] == static_cast<float>(Reduced(
                          ReduceOp::kSum, Offset(small) + static_cast<int64_t>(i))));
  }
}

TEST_CASE("the MPI executor runs large reduce-scatters on the ring, small ones on MPI") {
  absl::StatusOr<std::unique_ptr<MpiExecutor>> executor = MpiExecutor::Create(MPI_COMM_WORLD, 2);
  REQUIRE(executor.ok());
  for (int64_t per_rank : {int64_t{10}, int64_t{1} << 16}) {  // 40 B and 256 KiB per rank
    const int64_t total = per_rank * Size();
    const std::vector<float> in = MakeInput<float>(total, ToFloat);
    std::vector<float> out(static_cast<size_t>(per_rank));
    CollectiveArgs args;
    args.kind = CollectiveKind::kReduceScatter;
    args.dtype = DataType::kFloat32;
    args.op = ReduceOp::kSum;
    args.send = in.data();
    args.recv = out.data();
    args.count = total;
    args.recv_counts.assign(static_cast<size_t>(Size()), per_rank);
    for (int channel = 0; channel < 2; ++channel) {
      auto work = (*executor)->Start(channel, args);
      REQUIRE(work.ok());
      while (!*(*work)->Test()) {
      }
      for (int64_t i = 0; i < per_rank; ++i) {
        CHECK(out[static_cast<size_t>(i)] ==
              static_cast<float>(Reduced(ReduceOp::kSum, Rank() * per_rank + i)));
      }
    }
  }
}

}  // namespace
}  // namespace overlap
