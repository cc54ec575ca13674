// The fake executor (tests/fakes/fake_executor.h): real values for every collective kind, the
// agreement check the real runtime relies on, and fault injection.
#include "tests/fakes/fake_executor.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "numeric/half.h"

namespace overlap {
namespace fake {
namespace {

struct Ranks {
  explicit Ranks(int size, int channels = 1) : world(size, channels) {
    for (int r = 0; r < size; ++r) executors.push_back(world.CreateExecutor(r));
  }
  FakeWorld world;
  std::vector<std::unique_ptr<Executor>> executors;
};

std::unique_ptr<Work> StartOk(Executor& executor, const CollectiveArgs& args, int channel = 0) {
  absl::StatusOr<std::unique_ptr<Work>> work = executor.Start(channel, args);
  REQUIRE(work.ok());
  return std::move(*work);
}

bool Done(Work& work) {
  absl::StatusOr<bool> done = work.Test();
  REQUIRE(done.ok());
  return *done;
}

// Starts `args[r]` on every rank and checks that every Work is done after the last Start.
void RunAll(Ranks& ranks, const std::vector<CollectiveArgs>& args) {
  std::vector<std::unique_ptr<Work>> works;
  for (size_t r = 0; r < args.size(); ++r) {
    works.push_back(StartOk(*ranks.executors[r], args[r]));
    if (r + 1 < args.size()) CHECK_FALSE(Done(*works.back()));
  }
  for (auto& w : works) CHECK(Done(*w));
}

template <typename T>
void CheckAllreduce(DataType dtype, ReduceOp op, const std::vector<T>& expected) {
  Ranks ranks(3);
  // rank r holds {r + 1, 2 - r}: sums {6, 3}, minima {1, 0}, maxima {3, 2}, products {6, 0}.
  std::vector<std::vector<T>> data;
  for (int r = 0; r < 3; ++r) data.push_back({static_cast<T>(r + 1), static_cast<T>(2 - r)});
  std::vector<CollectiveArgs> args(3);
  std::vector<std::vector<T>> out(3, std::vector<T>(2));
  for (size_t r = 0; r < 3; ++r) {
    args[r].dtype = dtype;
    args[r].op = op;
    args[r].count = 2;
    if (r == 1) {
      args[r].recv = data[r].data();  // in place
    } else {
      args[r].send = data[r].data();
      args[r].recv = out[r].data();
    }
  }
  RunAll(ranks, args);
  CHECK(out[0] == expected);
  CHECK(data[1] == expected);
  CHECK(out[2] == expected);
}

TEST_CASE("allreduce: every op on the runtime's dtypes") {
  CheckAllreduce<float>(DataType::kFloat32, ReduceOp::kSum, {6, 3});
  CheckAllreduce<double>(DataType::kFloat64, ReduceOp::kMin, {1, 0});
  CheckAllreduce<int32_t>(DataType::kInt32, ReduceOp::kMax, {3, 2});
  CheckAllreduce<int64_t>(DataType::kInt64, ReduceOp::kProduct, {6, 0});
  CheckAllreduce<int64_t>(DataType::kInt64, ReduceOp::kSum, {6, 3});
  CheckAllreduce<float>(DataType::kFloat32, ReduceOp::kProduct, {6, 0});
}

TEST_CASE("allreduce: float16 and bfloat16 through float") {
  Ranks ranks(2);
  std::vector<uint16_t> h0 = {FloatToHalf(1.5f), FloatToHalf(-2.0f)};
  std::vector<uint16_t> h1 = {FloatToHalf(0.25f), FloatToHalf(3.0f)};
  std::vector<uint16_t> b0 = {FloatToBFloat16(1.5f)}, b1 = {FloatToBFloat16(2.5f)};
  std::vector<CollectiveArgs> half(2), bf(2);
  half[0].dtype = half[1].dtype = DataType::kFloat16;
  half[0].count = half[1].count = 2;
  half[0].recv = h0.data();
  half[1].recv = h1.data();
  RunAll(ranks, half);
  CHECK(HalfToFloat(h0[0]) == 1.75f);
  CHECK(HalfToFloat(h1[1]) == 1.0f);
  bf[0].dtype = bf[1].dtype = DataType::kBFloat16;
  bf[0].op = bf[1].op = ReduceOp::kMax;
  bf[0].count = bf[1].count = 1;
  bf[0].recv = b0.data();
  bf[1].recv = b1.data();
  RunAll(ranks, bf);
  CHECK(BFloat16ToFloat(b0[0]) == 2.5f);
}

TEST_CASE("broadcast, allgatherv, reduce-scatter, alltoallv and barrier") {
  Ranks ranks(3);
  SECTION("broadcast from root 1") {
    std::vector<std::vector<int32_t>> buf = {{0, 0}, {7, 8}, {-1, -1}};
    std::vector<CollectiveArgs> args(3);
    for (size_t r = 0; r < 3; ++r) {
      args[r].kind = CollectiveKind::kBroadcast;
      args[r].dtype = DataType::kInt32;
      args[r].count = 2;
      args[r].root = 1;
      args[r].recv = buf[r].data();
    }
    RunAll(ranks, args);
    for (const auto& b : buf) CHECK(b == std::vector<int32_t>{7, 8});
  }
  SECTION("allgatherv with uneven counts") {
    // rank r contributes r + 1 copies of 10 * (r + 1).
    std::vector<std::vector<double>> in = {{10}, {20, 20}, {30, 30, 30}};
    std::vector<std::vector<double>> out(3, std::vector<double>(6, -1));
    std::vector<CollectiveArgs> args(3);
    for (size_t r = 0; r < 3; ++r) {
      args[r].kind = CollectiveKind::kAllgatherv;
      args[r].dtype = DataType::kFloat64;
      args[r].recv_counts = {1, 2, 3};
      args[r].recv_displs = {0, 1, 3};
      args[r].send = in[r].data();
      args[r].recv = out[r].data();
    }
    RunAll(ranks, args);
    for (const auto& o : out) CHECK(o == std::vector<double>{10, 20, 20, 30, 30, 30});
  }
  SECTION("reduce-scatter of 5 elements into 2, 2, 1") {
    std::vector<std::vector<int64_t>> in(3);
    std::vector<std::vector<int64_t>> out = {{0, 0}, {0, 0}, {0}};
    std::vector<CollectiveArgs> args(3);
    for (size_t r = 0; r < 3; ++r) {
      for (int64_t i = 0; i < 5; ++i) in[r].push_back(i * 10 + static_cast<int64_t>(r));
      args[r].kind = CollectiveKind::kReduceScatter;
      args[r].dtype = DataType::kInt64;
      args[r].count = 5;
      args[r].recv_counts = {2, 2, 1};
      args[r].send = in[r].data();
      args[r].recv = out[r].data();
    }
    RunAll(ranks, args);
    CHECK(out[0] == std::vector<int64_t>{3, 33});
    CHECK(out[1] == std::vector<int64_t>{63, 93});
    CHECK(out[2] == std::vector<int64_t>{123});
  }
  SECTION("alltoallv: rank s sends s + 1 elements of 10 * s + q to rank q") {
    std::vector<std::vector<float>> in(3), out(3);
    std::vector<CollectiveArgs> args(3);
    for (int s = 0; s < 3; ++s) {
      CollectiveArgs& a = args[static_cast<size_t>(s)];
      a.kind = CollectiveKind::kAlltoallv;
      for (int q = 0; q < 3; ++q) {
        a.send_counts.push_back(s + 1);
        a.send_displs.push_back(q * (s + 1));
        a.recv_counts.push_back(q + 1);
        a.recv_displs.push_back(q == 0 ? 0 : (q == 1 ? 1 : 3));
        for (int i = 0; i <= s; ++i) in[static_cast<size_t>(s)].push_back(10.0f * s + q);
      }
      out[static_cast<size_t>(s)].assign(6, -1);
      a.send = in[static_cast<size_t>(s)].data();
      a.recv = out[static_cast<size_t>(s)].data();
    }
    RunAll(ranks, args);
    CHECK(out[0] == std::vector<float>{0, 10, 10, 20, 20, 20});
    CHECK(out[2] == std::vector<float>{2, 12, 12, 22, 22, 22});
  }
  SECTION("barrier") {
    std::vector<CollectiveArgs> args(3);
    for (auto& a : args) a.kind = CollectiveKind::kBarrier;
    RunAll(ranks, args);
  }
}

TEST_CASE("channels are independent and every Start is recorded") {
  Ranks ranks(2, 2);
  std::vector<float> a0(4, 1), a1(4, 2), b0(2, 1), b1(2, 2);
  CollectiveArgs a;
  a.count = 4;
  CollectiveArgs b;
  b.count = 2;
  a.recv = a0.data();
  auto w0a = StartOk(*ranks.executors[0], a, 0);
  b.recv = b1.data();
  auto w1b = StartOk(*ranks.executors[1], b, 1);
  CHECK_FALSE(Done(*w0a));
  b.recv = b0.data();
  auto w0b = StartOk(*ranks.executors[0], b, 1);
  CHECK(Done(*w0b));
  CHECK(Done(*w1b));
  CHECK_FALSE(Done(*w0a));
  a.recv = a1.data();
  auto w1a = StartOk(*ranks.executors[1], a, 0);
  CHECK(Done(*w0a));
  CHECK(a0 == std::vector<float>(4, 3));

  const std::vector<StartedCollective> all = ranks.world.started();
  REQUIRE(all.size() == 4);
  CHECK(all[0].rank == 0);
  CHECK(all[0].channel == 0);
  CHECK(all[0].bytes == 16);
  CHECK(all[1].rank == 1);
  CHECK(all[1].channel == 1);
  CHECK(all[1].index == 0);
  CHECK(all[1].bytes == 8);
  CHECK(ranks.world.started(1).size() == 2);
}

TEST_CASE("ranks that disagree fail every rank's Work, naming both ranks and the difference") {
  Ranks ranks(3);
  std::vector<float> x(8, 1);
  CollectiveArgs small;
  small.count = 4;
  small.recv = x.data();
  CollectiveArgs large = small;
  large.count = 8;
  auto w0 = StartOk(*ranks.executors[0], large);
  auto w1 = StartOk(*ranks.executors[1], small);
  auto w2 = StartOk(*ranks.executors[2], large);
  for (Work* w : {w0.get(), w1.get(), w2.get()}) {
    absl::StatusOr<bool> done = w->Test();
    REQUIRE_FALSE(done.ok());
    CHECK(done.status().code() == absl::StatusCode::kInternal);
    CHECK(done.status().message() ==
          "fake executor: ranks disagree on collective #0 of channel 0: rank 0 started allreduce "
          "float32 sum of 8 elements, rank 1 started allreduce float32 sum of 4 elements");
  }
  CHECK(x == std::vector<float>(8, 1));  // nothing written

  SECTION("the next collective is matched on its own") {
    std::vector<CollectiveArgs> args(3, small);
    RunAll(ranks, args);
  }
  SECTION("a different order of kinds") {
    CollectiveArgs barrier;
    barrier.kind = CollectiveKind::kBarrier;
    auto b0 = StartOk(*ranks.executors[0], barrier);
    auto b1 = StartOk(*ranks.executors[1], small);
    absl::StatusOr<bool> done = b0->Test();
    REQUIRE_FALSE(done.ok());
    CHECK_THAT(std::string(done.status().message()),
               Catch::Contains("collective #1 of channel 0: rank 0 started barrier, rank 1 "
                               "started allreduce float32 sum of 4 elements"));
  }
  SECTION("a different root") {
    CollectiveArgs bcast;
    bcast.kind = CollectiveKind::kBroadcast;
    bcast.count = 1;
    bcast.recv = x.data();
    auto b0 = StartOk(*ranks.executors[0], bcast);
    bcast.root = 2;
    auto b1 = StartOk(*ranks.executors[1], bcast);
    CHECK_THAT(std::string(b0->Test().status().message()), Catch::Contains("from root 2"));
  }
}

TEST_CASE("alltoallv counts that do not pair up fail every rank") {
  Ranks ranks(2);
  std::vector<int32_t> in(4, 1), out(4, 0);
  std::vector<CollectiveArgs> args(2);
  for (auto& a : args) {
    a.kind = CollectiveKind::kAlltoallv;
    a.dtype = DataType::kInt32;
    a.send_counts = {1, 1};
    a.send_displs = {0, 1};
    a.recv_counts = {1, 1};
    a.recv_displs = {0, 1};
    a.send = in.data();
    a.recv = out.data();
  }
  args[1].recv_counts = {2, 1};
  auto w0 = StartOk(*ranks.executors[0], args[0]);
  auto w1 = StartOk(*ranks.executors[1], args[1]);
  absl::StatusOr<bool> done = w1->Test();
  REQUIRE_FALSE(done.ok());
  CHECK(std::string(done.status().message()) ==
        "fake executor: collective #0 of channel 0: alltoallv: rank 0 sends 1 elements to rank 1, "
        "which expects 2");
  CHECK_FALSE(w0->Test().ok());
}

TEST_CASE("arguments a backend refuses are InvalidArgument at Start") {
  Ranks ranks(2);
  float x = 0;
  CollectiveArgs average;
  average.op = ReduceOp::kAverage;
  average.count = 1;
  average.recv = &x;
  CHECK(ranks.executors[0]->Start(0, average).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CollectiveArgs ok;
  ok.count = 1;
  ok.recv = &x;
  CHECK(ranks.executors[0]->Start(1, ok).status().code() == absl::StatusCode::kInvalidArgument);
  CollectiveArgs gather;
  gather.kind = CollectiveKind::kAllgatherv;
  gather.recv_counts = {1};
  CHECK(ranks.executors[0]->Start(0, gather).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ranks.world.started().empty());  // refused Starts take no place in the sequence
}

TEST_CASE("fault injection: fail the k-th collective, on every rank or one") {
  Ranks ranks(2);
  std::vector<float> x0(1, 1), x1(1, 2);
  auto run = [&]() {
    CollectiveArgs a;
    a.count = 1;
    a.recv = x0.data();
    auto w0 = StartOk(*ranks.executors[0], a);
    a.recv = x1.data();
    auto w1 = StartOk(*ranks.executors[1], a);
    return std::vector<absl::StatusOr<bool>>{w0->Test(), w1->Test()};
  };
  ranks.world.FailCollective(0, 1, absl::UnavailableError("link down"));
  ranks.world.FailCollective(0, 2, absl::DataLossError("bad frame"), 1);
  std::vector<absl::StatusOr<bool>> first = run();
  CHECK(*first[0]);
  CHECK(*first[1]);
  CHECK(x0[0] == 3);
  std::vector<absl::StatusOr<bool>> second = run();
  for (const auto& s : second) CHECK(s.status() == absl::UnavailableError("link down"));
  CHECK(x0[0] == 3);  // a failed collective writes nothing
  std::vector<absl::StatusOr<bool>> third = run();
  CHECK(*third[0]);
  CHECK(third[1].status() == absl::DataLossError("bad frame"));
  CHECK(x0[0] == 6);
}

TEST_CASE("fault injection: a held collective never completes, and Abort fails it") {
  Ranks ranks(2, 2);
  ranks.world.HoldCollective(0, 0);
  CollectiveArgs barrier;
  barrier.kind = CollectiveKind::kBarrier;
  auto w0 = StartOk(*ranks.executors[0], barrier);
  auto w1 = StartOk(*ranks.executors[1], barrier);
  auto other0 = StartOk(*ranks.executors[0], barrier, 1);
  auto other1 = StartOk(*ranks.executors[1], barrier, 1);
  CHECK(Done(*other0));  // another channel is not held up
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(Done(*w0));
    CHECK_FALSE(Done(*w1));
  }
  ranks.executors[1]->Abort();
  CHECK(ranks.world.aborted() == std::vector<int>{1});
  CHECK(w1->Test().status().code() == absl::StatusCode::kAborted);
  CHECK_FALSE(Done(*w0));
  CHECK(ranks.executors[1]->Start(0, barrier).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace fake
}  // namespace overlap
