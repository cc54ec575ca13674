// Allreduces larger than SegmentedAllreduce::kSegmentBytes (collectives/segmented_allreduce.h),
// through the MPI executor, against sums computed on every rank: counts that end mid-segment, in
// place and out of place, fp16 through its user-defined operation, and one exactly a segment long
// (which stays a single call).
#include "collectives/segmented_allreduce.h"

#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "numeric/half.h"
#include "collectives/mpi_executor.h"
#include "tests/collectives/mpi_world.h"

namespace overlap {
namespace {

using testing::Rank;
using testing::RunToEnd;
using testing::Size;

// Rank q's element i: small integers, so float sums are exact and a misplaced segment shows.
float Value(int q, int64_t i) { return static_cast<float>((q + 1) * (i % 97 + 1)); }

float Sum(int64_t i) {
  float s = 0;
  for (int q = 0; q < Size(); ++q) s += Value(q, i);
  return s;
}

constexpr int64_t kSegmentFloats = static_cast<int64_t>(SegmentedAllreduce::kSegmentBytes / 4);

TEST_CASE("a segmented allreduce sums every element, in place and out of place") {
  absl::StatusOr<std::unique_ptr<MpiExecutor>> executor = MpiExecutor::Create(MPI_COMM_WORLD, 1);
  REQUIRE(executor.ok());
  for (const int64_t count : {kSegmentFloats, 2 * kSegmentFloats + 12345, 3 * kSegmentFloats}) {
    for (const bool in_place : {true, false}) {
      INFO("count " << count << (in_place ? " in place" : " out of place"));
      std::vector<float> send(static_cast<size_t>(count)), recv(static_cast<size_t>(count), -1);
      for (int64_t i = 0; i < count; ++i) send[static_cast<size_t>(i)] = Value(Rank(), i);
      if (in_place) recv = send;
      CollectiveArgs args;
      args.kind = CollectiveKind::kAllreduce;
      args.dtype = DataType::kFloat32;
      args.op = ReduceOp::kSum;
      args.count = count;
      args.send = in_place ? nullptr : send.data();
      args.recv = recv.data();
      absl::StatusOr<std::unique_ptr<Work>> work = (*executor)->Start(0, args);
      REQUIRE(work.ok());
      // Only buffers above one segment are split.
      CHECK((dynamic_cast<SegmentedAllreduce*>(work->get()) != nullptr) ==
            (count > kSegmentFloats));
      RunToEnd(**work);
      int64_t wrong = 0, first = -1;
      for (int64_t i = 0; i < count; ++i) {
        if (recv[static_cast<size_t>(i)] != Sum(i)) {
          if (first < 0) first = i;
          ++wrong;
        }
      }
      INFO("first wrong element " << first);
      CHECK(wrong == 0);
      if (!in_place) CHECK(send[static_cast<size_t>(count - 1)] == Value(Rank(), count - 1));
    }
  }
}

TEST_CASE("a segmented fp16 allreduce uses the fp16 operation in every segment") {
  absl::StatusOr<std::unique_ptr<MpiExecutor>> executor = MpiExecutor::Create(MPI_COMM_WORLD, 1);
  REQUIRE(executor.ok());
  const int64_t count = 2 * kSegmentFloats + 3;  // fp16, 2 bytes each: a segment and 3 more
  std::vector<uint16_t> data(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    data[static_cast<size_t>(i)] = FloatToHalf(static_cast<float>(Rank() + 1 + i % 3));
  }
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllreduce;
  args.dtype = DataType::kFloat16;
  args.op = ReduceOp::kSum;
  args.count = count;
  args.recv = data.data();
  absl::StatusOr<std::unique_ptr<Work>> work = (*executor)->Start(0, args);
  REQUIRE(work.ok());
  RunToEnd(**work);
  const float ranks = static_cast<float>(Size() * (Size() + 1) / 2);
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float want = ranks + static_cast<float>(Size() * (i % 3));
    if (HalfToFloat(data[static_cast<size_t>(i)]) != want) ++wrong;
  }
  CHECK(wrong == 0);
}

}  // namespace
}  // namespace overlap
