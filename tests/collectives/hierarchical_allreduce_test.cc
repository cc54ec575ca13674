// The hierarchical allreduce (collectives/hierarchical_allreduce.h) through the MPI executor, with
// the ranks of this one machine placed on pretend hosts of 2 ranks (3 when the rank count is a
// multiple of 3): sums against references computed on every rank, for counts that do not divide
// into shards, shards of zero elements, fp16 through its user-defined operation, min/max on
// integers, buffers of several segments, hosts whose ranks are not consecutive, two channels in
// flight at once, and the refusal of hosts of different sizes; and the same algorithm as a plan's
// two-stage buckets run it (CollectiveArgs::two_stage on an executor flat otherwise), every size
// and dtype.
#include "collectives/hierarchical_allreduce.h"

#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "numeric/half.h"
#include "collectives/mpi_executor.h"
#include "absl/time/clock.h"
#include "collectives/segmented_allreduce.h"
#include "tests/collectives/mpi_world.h"

namespace overlap {
namespace {

using testing::Rank;
using testing::RunToEnd;
using testing::Size;

int RanksPerHost() { return Size() % 3 == 0 ? 3 : 2; }

std::unique_ptr<MpiExecutor> Executor(int host, int channels = 1) {
  MpiExecutorOptions options;
  options.num_channels = channels;
  options.host = host;
  absl::StatusOr<std::unique_ptr<MpiExecutor>> executor =
      MpiExecutor::Create(MPI_COMM_WORLD, options);
  REQUIRE(executor.ok());
  REQUIRE((*executor)->hierarchical());
  return std::move(*executor);
}

// Rank q's element i: small integers, so float sums are exact and a misplaced shard shows.
float Value(int q, int64_t i) { return static_cast<float>((q + 1) * (i % 89 + 1)); }

float Sum(int64_t i) {
  float s = 0;
  for (int q = 0; q < Size(); ++q) s += Value(q, i);
  return s;
}

CollectiveArgs FloatSum(std::vector<float>& data, const std::vector<float>* send = nullptr) {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllreduce;
  args.dtype = DataType::kFloat32;
  args.op = ReduceOp::kSum;
  args.count = static_cast<int64_t>(data.size());
  args.send = send == nullptr ? nullptr : send->data();
  args.recv = data.data();
  return args;
}

int64_t WrongElements(const std::vector<float>& data) {
  int64_t wrong = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != Sum(static_cast<int64_t>(i))) ++wrong;
  }
  return wrong;
}

std::vector<float> Input(int64_t count) {
  std::vector<float> data(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) data[static_cast<size_t>(i)] = Value(Rank(), i);
  return data;
}

TEST_CASE("a hierarchical allreduce sums every element, whatever the shards") {
  std::unique_ptr<MpiExecutor> executor = Executor(Rank() / RanksPerHost());
  const int64_t min_floats = MpiExecutor::kHierarchicalMinBytes / 4;
  const int64_t segment_floats = SegmentedAllreduce::kSegmentBytes / 4;
  for (const int64_t count :
       {min_floats, min_floats + 1, min_floats + 2, 3 * segment_floats + 7, int64_t{1000}}) {
    for (const bool in_place : {true, false}) {
      INFO("count " << count << (in_place ? " in place" : " out of place"));
      std::vector<float> send = Input(count);
      std::vector<float> data = in_place ? send : std::vector<float>(send.size(), -1);
      absl::StatusOr<std::unique_ptr<Work>> work =
          executor->Start(0, FloatSum(data, in_place ? nullptr : &send));
      REQUIRE(work.ok());
      // Below the threshold the allreduce stays flat.
      CHECK((dynamic_cast<HierarchicalAllreduce*>(work->get()) != nullptr) ==
            (count >= min_floats));
      RunToEnd(**work);
      CHECK(WrongElements(data) == 0);
      if (!in_place) CHECK(send == Input(count));
    }
  }
}

TEST_CASE("an executor split by host but flat unasked runs two-stage exactly where asked") {
  // A plan's two-stage buckets (OVERLAP_TWO_STAGE): every size, the smallest included, runs
  // two-stage when CollectiveArgs::two_stage asks, and flat otherwise, with the same sums; every
  // dtype the plan's buckets carry.
  MpiExecutorOptions options;
  options.host = Rank() / RanksPerHost();
  options.hierarchical = false;
  absl::StatusOr<std::unique_ptr<MpiExecutor>> created =
      MpiExecutor::Create(MPI_COMM_WORLD, options);
  REQUIRE(created.ok());
  MpiExecutor& executor = **created;
  CHECK(executor.offers_two_stage());
  CHECK_FALSE(executor.hierarchical());
  const int64_t segment_floats = SegmentedAllreduce::kSegmentBytes / 4;
  for (const int64_t count : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{40001},
                              segment_floats + 13}) {
    for (const bool two_stage : {true, false}) {
      INFO("count " << count << (two_stage ? " two-stage" : " flat"));
      std::vector<float> data = Input(count);
      CollectiveArgs args = FloatSum(data);
      args.two_stage = two_stage;
      absl::StatusOr<std::unique_ptr<Work>> work = executor.Start(0, args);
      REQUIRE(work.ok());
      CHECK((dynamic_cast<HierarchicalAllreduce*>(work->get()) != nullptr) == two_stage);
      RunToEnd(**work);
      CHECK(WrongElements(data) == 0);
    }
  }
  // float64 and int32 sums, ragged.
  const int64_t count = 3001;
  std::vector<double> doubles(static_cast<size_t>(count));
  std::vector<int32_t> ints(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    doubles[static_cast<size_t>(i)] = 0.5 * Value(Rank(), i);
    ints[static_cast<size_t>(i)] = static_cast<int32_t>(Value(Rank(), i)) - 7;
  }
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllreduce;
  args.op = ReduceOp::kSum;
  args.count = count;
  args.two_stage = true;
  args.dtype = DataType::kFloat64;
  args.recv = doubles.data();
  absl::StatusOr<std::unique_ptr<Work>> work = executor.Start(0, args);
  REQUIRE(work.ok());
  RunToEnd(**work);
  args.dtype = DataType::kInt32;
  args.recv = ints.data();
  work = executor.Start(0, args);
  REQUIRE(work.ok());
  RunToEnd(**work);
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (doubles[static_cast<size_t>(i)] != 0.5 * Sum(i)) ++wrong;
    if (ints[static_cast<size_t>(i)] != static_cast<int32_t>(Sum(i)) - 7 * Size()) ++wrong;
  }
  CHECK(wrong == 0);
}

TEST_CASE("an executor that is not split by host ignores two_stage and runs flat") {
  absl::StatusOr<std::unique_ptr<MpiExecutor>> created = MpiExecutor::Create(MPI_COMM_WORLD, 1);
  REQUIRE(created.ok());
  CHECK_FALSE((*created)->offers_two_stage());
  std::vector<float> data = Input(5000);
  CollectiveArgs args = FloatSum(data);
  args.two_stage = true;
  absl::StatusOr<std::unique_ptr<Work>> work = (*created)->Start(0, args);
  REQUIRE(work.ok());
  CHECK(dynamic_cast<HierarchicalAllreduce*>(work->get()) == nullptr);
  RunToEnd(**work);
  CHECK(WrongElements(data) == 0);
}

TEST_CASE("the ranks of a host whose cross-host groups probe on different schedules still meet") {
  // Each local rank's cross-host group keeps its own link verdicts, so one group may probe
  // before an allreduce where the other does not. Here local rank 0's group probes before every
  // allreduce and the others' rarely: their host rings must still match (they did not when
  // probes took their tags from the rings' sequence: a hang, found on the namespace cluster).
  MpiExecutorOptions options;
  options.host = Rank() / RanksPerHost();
  options.adaptation = LinkAdaptation::kOn;
  options.reprobe_every = Rank() % RanksPerHost() == 0 ? 1 : 1000;
  options.probe_bytes = 64 << 10;
  absl::StatusOr<std::unique_ptr<MpiExecutor>> created =
      MpiExecutor::Create(MPI_COMM_WORLD, options);
  REQUIRE(created.ok());
  const int64_t count = (MpiExecutor::kAdaptiveMinBytes / 4) * 2 + 5;
  for (int round = 0; round < 6; ++round) {
    INFO("allreduce " << round);
    std::vector<float> data = Input(count);
    absl::StatusOr<std::unique_ptr<Work>> work = (*created)->Start(0, FloatSum(data));
    REQUIRE(work.ok());
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    bool done = false;
    while (!done && absl::Now() < deadline) {
      absl::StatusOr<bool> finished = (*work)->Test();
      REQUIRE(finished.ok());
      done = *finished;
    }
    REQUIRE(done);  // else the host's rings are waiting on tags their peers never send
    CHECK(WrongElements(data) == 0);
  }
  CHECK((*created)->link_probes() >= (Rank() % RanksPerHost() == 0 ? 6 : 1));
}

TEST_CASE("hierarchical allreduce with shards of zero elements, called directly") {
  // The executor keeps tiny buffers flat; the algorithm itself must still handle them.
  std::unique_ptr<MpiExecutor> executor = Executor(Rank() / RanksPerHost());
  MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, Rank() / RanksPerHost(), Rank(), &local) == MPI_SUCCESS);
  int local_rank = 0;
  MPI_Comm_rank(local, &local_rank);
  REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, local_rank, Rank(), &cross) == MPI_SUCCESS);
  const int tags[2] = {11, 12};
  for (const int64_t count : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{5}}) {
    INFO("count " << count);
    std::vector<float> data = Input(count);
    absl::StatusOr<std::unique_ptr<HierarchicalAllreduce>> work = HierarchicalAllreduce::Start(
        HostComms{local, cross}, tags, data.data(), count, MPI_FLOAT, 4, MPI_SUM);
    REQUIRE(work.ok());
    RunToEnd(**work);
    CHECK(WrongElements(data) == 0);
  }
  MPI_Comm_free(&local);
  MPI_Comm_free(&cross);
}

TEST_CASE("hierarchical fp16 sums use the fp16 operation; integer min and max are exact") {
  std::unique_ptr<MpiExecutor> executor = Executor(Rank() / RanksPerHost());
  const int64_t count = MpiExecutor::kHierarchicalMinBytes / 2 + 3;
  std::vector<uint16_t> half(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    half[static_cast<size_t>(i)] = FloatToHalf(static_cast<float>(Rank() + 1 + i % 3));
  }
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllreduce;
  args.dtype = DataType::kFloat16;
  args.op = ReduceOp::kSum;
  args.count = count;
  args.recv = half.data();
  absl::StatusOr<std::unique_ptr<Work>> work = executor->Start(0, args);
  REQUIRE(work.ok());
  RunToEnd(**work);
  const float ranks = static_cast<float>(Size() * (Size() + 1) / 2);
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (HalfToFloat(half[static_cast<size_t>(i)]) != ranks + static_cast<float>(Size() * (i % 3))) {
      ++wrong;
    }
  }
  CHECK(wrong == 0);

  for (const ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    const int64_t n = MpiExecutor::kHierarchicalMinBytes / 8 + 1;
    std::vector<int64_t> ints(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ints[static_cast<size_t>(i)] = (Rank() * 7 + i) % Size() - i;
    args.dtype = DataType::kInt64;
    args.op = op;
    args.count = n;
    args.recv = ints.data();
    work = executor->Start(0, args);
    REQUIRE(work.ok());
    RunToEnd(**work);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      // Rank q holds (7q + i) mod Size - i; 7 is prime to the sizes run, so some rank holds each
      // residue.
      const int64_t want = op == ReduceOp::kMin ? -i : (Size() - 1) - i;
      if (ints[static_cast<size_t>(i)] != want) ++bad;
    }
    INFO(ReduceOpName(op));
    CHECK(bad == 0);
  }
}

TEST_CASE("hosts whose ranks are not consecutive, and two channels in flight at once") {
  const int hosts = Size() / RanksPerHost();
  std::unique_ptr<MpiExecutor> executor = Executor(Rank() % hosts, /*channels=*/2);
  const int64_t count = 3 * MpiExecutor::kHierarchicalMinBytes / 4 + 17;
  std::vector<float> a = Input(count), b = Input(count + 5);
  absl::StatusOr<std::unique_ptr<Work>> first = executor->Start(0, FloatSum(a));
  absl::StatusOr<std::unique_ptr<Work>> second = executor->Start(1, FloatSum(b));
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  bool first_done = false, second_done = false;
  while (!first_done || !second_done) {
    if (!first_done) {
      absl::StatusOr<bool> done = (*first)->Test();
      REQUIRE(done.ok());
      first_done = *done;
    }
    if (!second_done) {
      absl::StatusOr<bool> done = (*second)->Test();
      REQUIRE(done.ok());
      second_done = *done;
    }
  }
  CHECK(WrongElements(a) == 0);
  CHECK(WrongElements(b) == 0);
}

TEST_CASE("hosts of different sizes are refused on every rank") {
  // Rank 0 alone on one host, the rest on another.
  MpiExecutorOptions options;
  options.host = Rank() == 0 ? 0 : 1;
  absl::StatusOr<std::unique_ptr<MpiExecutor>> executor =
      MpiExecutor::Create(MPI_COMM_WORLD, options);
  REQUIRE_FALSE(executor.ok());
  CHECK(executor.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(executor.status().message()),
             Catch::Contains("same number of ranks on every host"));
}

}  // namespace
}  // namespace overlap
