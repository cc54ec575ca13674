// The Adasum allreduce (collectives/adasum.h) against a reference every rank computes itself:
// each rank regenerates every rank's input from a seed and combines whole vectors pairwise,
// level by level, in the algorithm's pairing order (the lower group's vector is `a`), rounding to
// the dtype after each level as the algorithm does. Only the order in which the dot products'
// partial sums are added differs, so the tolerance is a few units in the last place of the
// dtype. Ragged and tiny sizes, packed tensors with their own coefficients, every floating-point
// dtype, exact identities (identical inputs give the input back; a zero vector adds nothing),
// bit-identical results on every rank, and the refusals (non-power-of-two rank counts, integer
// dtypes), through AdasumAllreduce and through the MPI executor.
#include "collectives/adasum.h"

#include <mpi.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/time/clock.h"
#include "numeric/half.h"
#include "collectives/mpi_executor.h"
#include "tests/collectives/mpi_world.h"

namespace overlap {
namespace {

using testing::Rank;
using testing::Size;

bool PowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Uniform in [-1, 1), from (seed, rank, element) alone (splitmix64).
double Random(uint64_t seed, int rank, int64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank) * 0xbf58476d1ce4e5b9ull +
               static_cast<uint64_t>(i) + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(uint64_t{1} << 52) - 1.0;
}

double Round(DataType dtype, double v) {
  switch (dtype) {
    case DataType::kFloat16:
      return HalfToFloat(FloatToHalf(static_cast<float>(v)));
    case DataType::kBFloat16:
      return BFloat16ToFloat(FloatToBFloat16(static_cast<float>(v)));
    case DataType::kFloat32:
      return static_cast<float>(v);
    default:
      return v;
  }
}

// A buffer of one floating-point dtype, read and written as doubles.
struct Buffer {
  DataType dtype;
  std::vector<uint8_t> bytes;
  Buffer(DataType d, int64_t n) : dtype(d), bytes(static_cast<size_t>(n) * DataTypeSize(d)) {}
  void* data() { return bytes.data(); }
  void Set(int64_t i, double v) {
    uint8_t* p = bytes.data() + static_cast<size_t>(i) * DataTypeSize(dtype);
    if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
      const uint16_t h = dtype == DataType::kFloat16 ? FloatToHalf(static_cast<float>(v))
                                                     : FloatToBFloat16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
    } else if (dtype == DataType::kFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
    } else {
      std::memcpy(p, &v, 8);
    }
  }
  double Get(int64_t i) const {
    const uint8_t* p = bytes.data() + static_cast<size_t>(i) * DataTypeSize(dtype);
    if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
      uint16_t h = 0;
      std::memcpy(&h, p, 2);
      return dtype == DataType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
    }
    if (dtype == DataType::kFloat32) {
      float f = 0;
      std::memcpy(&f, p, 4);
      return f;
    }
    double d = 0;
    std::memcpy(&d, p, 8);
    return d;
  }
};

using Inputs = double (*)(uint64_t seed, int rank, int64_t i);

// Rank `q`'s input as the dtype holds it.
std::vector<double> InputOf(Inputs input, uint64_t seed, int q, int64_t n, DataType dtype) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = Round(dtype, input(seed, q, i));
  return v;
}

// The pairwise combination of whole vectors, each segment with its own coefficients.
std::vector<double> Reference(Inputs input, uint64_t seed, int64_t n,
                              const std::vector<int64_t>& segments, DataType dtype) {
  std::vector<std::vector<double>> v;
  for (int q = 0; q < Size(); ++q) v.push_back(InputOf(input, seed, q, n, dtype));
  for (int d = 1; d < Size(); d *= 2) {
    for (int q = 0; q < Size(); q += 2 * d) {
      std::vector<double>& a = v[static_cast<size_t>(q)];
      const std::vector<double>& b = v[static_cast<size_t>(q + d)];
      int64_t start = 0;
      for (int64_t count : segments) {
        double dot = 0, aa = 0, bb = 0;
        for (int64_t i = start; i < start + count; ++i) {
          const double x = a[static_cast<size_t>(i)], y = b[static_cast<size_t>(i)];
          dot += x * y;
          aa += x * x;
          bb += y * y;
        }
        const double ca = aa == 0 ? 1 : 1 - dot / (2 * aa);
        const double cb = bb == 0 ? 1 : 1 - dot / (2 * bb);
        for (int64_t i = start; i < start + count; ++i) {
          double& x = a[static_cast<size_t>(i)];
          x = Round(dtype, ca * x + cb * b[static_cast<size_t>(i)]);
        }
        start += count;
      }
    }
  }
  return v[0];
}

// Runs one Adasum to completion (10 s at most).
void Run(AdasumAllreduce* work) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    absl::StatusOr<bool> done = work->Test();
    REQUIRE(done.ok());
    if (*done) return;
    REQUIRE(absl::Now() < deadline);
  }
}

Buffer Reduce(Inputs input, uint64_t seed, int64_t n, const std::vector<int64_t>& segments,
              DataType dtype, int tag = 1) {
  Buffer buffer(dtype, n);
  for (int64_t i = 0; i < n; ++i) buffer.Set(i, input(seed, Rank(), i));
  auto work = AdasumAllreduce::Start(MPI_COMM_WORLD, tag, n == 0 ? nullptr : buffer.data(), n,
                                     dtype, segments);
  REQUIRE(work.ok());
  Run(work->get());
  return buffer;
}

// Units in the last place the reference may differ by, relative to the largest value.
double Tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return 4 * std::ldexp(1.0, -10);
    case DataType::kBFloat16:
      return 4 * std::ldexp(1.0, -7);
    case DataType::kFloat32:
      return 16 * std::ldexp(1.0, -23);
    default:
      return 1e-12;
  }
}

// Every rank holds the same bytes.
bool SameOnEveryRank(const Buffer& b) {
  uint64_t hash = 1469598103934665603ull;
  for (uint8_t byte : b.bytes) hash = (hash ^ byte) * 1099511628211ull;
  uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&hash, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&hash, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

void CheckAgainstReference(int64_t n, std::vector<int64_t> segments, DataType dtype, uint64_t seed,
                           Inputs input = Random) {
  if (segments.empty()) segments.push_back(n);
  const Buffer got = Reduce(input, seed, n, segments, dtype);
  const std::vector<double> want = Reference(input, seed, n, segments, dtype);
  double scale = 1e-30;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (int64_t i = 0; i < n; ++i) {
    INFO(DataTypeName(dtype) << " n=" << n << " element " << i);
    REQUIRE(std::fabs(got.Get(i) - want[static_cast<size_t>(i)]) <= Tolerance(dtype) * scale);
  }
  REQUIRE(SameOnEveryRank(got));
}

const DataType kFloatTypes[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                DataType::kFloat64};

TEST_CASE("adasum: one tensor of every size class and float dtype matches the reference") {
  if (!PowerOfTwo(Size())) return;
  const int64_t sizes[] = {0, 1, 2, 3, Size() - 1, Size() + 1, 7, 1000, 1001, 65537};
  uint64_t seed = 11;
  for (DataType dtype : kFloatTypes) {
    for (int64_t n : sizes) CheckAgainstReference(n, {}, dtype, ++seed);
  }
}

TEST_CASE("adasum: packed tensors keep their own coefficients, wherever the halves cut them") {
  if (!PowerOfTwo(Size())) return;
  const std::vector<int64_t> segments = {3, 0, 5, 1, 100, 17, 2};
  const int64_t n = std::accumulate(segments.begin(), segments.end(), int64_t{0});
  uint64_t seed = 101;
  for (DataType dtype : kFloatTypes) CheckAgainstReference(n, segments, dtype, ++seed);
  // A packed tensor is not reduced as if the bucket were one vector: the first tensor alone
  // gives the same result as in the bucket (up to the partial sums' order).
  const Buffer packed = Reduce(Random, 7, n, segments, DataType::kFloat64);
  const Buffer alone = Reduce(Random, 7, 3, {}, DataType::kFloat64);
  for (int64_t i = 0; i < 3; ++i) REQUIRE(std::fabs(packed.Get(i) - alone.Get(i)) <= 1e-12);
}

double Same(uint64_t, int, int64_t i) { return std::sin(static_cast<double>(i) + 0.5); }

double ZeroOnRankZero(uint64_t seed, int rank, int64_t i) {
  return rank == 0 ? 0.0 : Random(seed, rank, i);
}

double Orthogonal(uint64_t, int rank, int64_t i) {
  return i % Size() == rank ? static_cast<double>(rank + 1) : 0.0;
}

TEST_CASE("adasum: identical inputs come back unchanged; orthogonal ones are summed") {
  if (!PowerOfTwo(Size())) return;
  for (DataType dtype : kFloatTypes) {
    const Buffer same = Reduce(Same, 0, 333, {}, dtype);
    for (int64_t i = 0; i < 333; ++i) REQUIRE(same.Get(i) == Round(dtype, Same(0, 0, i)));
    const Buffer orthogonal = Reduce(Orthogonal, 0, 64, {}, dtype);
    for (int64_t i = 0; i < 64; ++i) REQUIRE(orthogonal.Get(i) == (i % Size()) + 1);
  }
}

TEST_CASE("adasum: a zero vector adds nothing") {
  if (!PowerOfTwo(Size())) return;
  for (DataType dtype : kFloatTypes) CheckAgainstReference(101, {}, dtype, 5, ZeroOnRankZero);
  if (Size() != 2) return;  // on 2 ranks the result is rank 1's input exactly
  const Buffer got = Reduce(ZeroOnRankZero, 5, 101, {}, DataType::kFloat32);
  for (int64_t i = 0; i < 101; ++i) {
    REQUIRE(got.Get(i) == Round(DataType::kFloat32, Random(5, 1, i)));
  }
}

TEST_CASE("adasum: two in flight on one communicator, with different tags") {
  if (!PowerOfTwo(Size())) return;
  Buffer x(DataType::kFloat32, 500), y(DataType::kFloat32, 77);
  for (int64_t i = 0; i < 500; ++i) x.Set(i, Random(31, Rank(), i));
  for (int64_t i = 0; i < 77; ++i) y.Set(i, Random(32, Rank(), i));
  auto first = AdasumAllreduce::Start(MPI_COMM_WORLD, 5, x.data(), 500, DataType::kFloat32, {});
  auto second = AdasumAllreduce::Start(MPI_COMM_WORLD, 6, y.data(), 77, DataType::kFloat32, {});
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  Run(second->get());
  Run(first->get());
  const std::vector<double> want_x = Reference(Random, 31, 500, {500}, DataType::kFloat32);
  const std::vector<double> want_y = Reference(Random, 32, 77, {77}, DataType::kFloat32);
  for (int64_t i = 0; i < 500; ++i) REQUIRE(std::fabs(x.Get(i) - want_x[i]) <= 1e-5);
  for (int64_t i = 0; i < 77; ++i) REQUIRE(std::fabs(y.Get(i) - want_y[i]) <= 1e-5);
}

TEST_CASE("adasum: through the MPI executor, in and out of place") {
  auto executor = MpiExecutor::Create(MPI_COMM_WORLD, 2);
  REQUIRE(executor.ok());
  const int64_t n = 40;
  Buffer in(DataType::kFloat64, n), out(DataType::kFloat64, n);
  for (int64_t i = 0; i < n; ++i) in.Set(i, Random(77, Rank(), i));
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllreduce;
  args.dtype = DataType::kFloat64;
  args.op = ReduceOp::kAdasum;
  args.send = in.data();
  args.recv = out.data();
  args.count = n;
  args.segments = {10, 30};
  absl::StatusOr<std::unique_ptr<Work>> work = (*executor)->Start(1, args);
  if (!PowerOfTwo(Size())) {
    REQUIRE(work.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(work.status().message()) ==
            "Adasum needs a power-of-two number of ranks, and this job has " +
                std::to_string(Size()));
    return;
  }
  REQUIRE(work.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    absl::StatusOr<bool> done = (*work)->Test();
    REQUIRE(done.ok());
    if (*done) break;
    REQUIRE(absl::Now() < deadline);
  }
  const std::vector<double> want = Reference(Random, 77, n, {10, 30}, DataType::kFloat64);
  for (int64_t i = 0; i < n; ++i) REQUIRE(std::fabs(out.Get(i) - want[i]) <= 1e-12);
  for (int64_t i = 0; i < n; ++i)
    REQUIRE(in.Get(i) == Round(DataType::kFloat64, Random(77, Rank(), i)));
}

TEST_CASE("adasum: refuses non-power-of-two rank counts and integer dtypes, on every rank") {
  std::vector<int32_t> ints(8, 1);
  auto integer = AdasumAllreduce::Start(MPI_COMM_WORLD, 9, ints.data(), 8, DataType::kInt32, {});
  REQUIRE(integer.status().code() == absl::StatusCode::kInvalidArgument);
  if (PowerOfTwo(Size())) {
    REQUIRE(std::string(integer.status().message()) ==
            "Adasum is defined for floating-point tensors (float16, bfloat16, float32, float64), "
            "not int32");
  }
  std::vector<float> floats(8, 1.0f);
  auto work = AdasumAllreduce::Start(MPI_COMM_WORLD, 9, floats.data(), 8, DataType::kFloat32, {});
  if (PowerOfTwo(Size())) {
    REQUIRE(work.ok());
    Run(work->get());
    for (float f : floats) REQUIRE(f == 1.0f);  // identical inputs
  } else {
    REQUIRE(std::string(work.status().message()) ==
            "Adasum needs a power-of-two number of ranks, and this job has " +
                std::to_string(Size()));
    REQUIRE(std::string(integer.status().message()).find("power-of-two") != std::string::npos);
  }
  REQUIRE(AdasumSupports(8, DataType::kFloat16).ok());
  REQUIRE(!AdasumSupports(6, DataType::kFloat16).ok());
  REQUIRE(!AdasumSupports(4, DataType::kUint8).ok());
}

}  // namespace
}  // namespace overlap
