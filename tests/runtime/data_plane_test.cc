// The data plane (runtime/planes/data_plane.h) on N simulated ranks in one process, through the fake
// executor (tests/fakes/fake_executor.h): fusion, channels, averaging, the other kinds, a failed
// collective and the collective timeout, pipelined buckets over a stream-ordered executor, without
// mpirun. Every rank gets the same agreed
// operations, as negotiation would hand them over, and one thread runs every rank's Progress in
// turn, as each rank's coordinator thread would.
#include "runtime/planes/data_plane.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "runtime/api/handle_state.h"
#include "tests/fakes/fake_executor.h"

namespace overlap {
namespace {

using fake::FakeWorld;
using fake::StartedCollective;

struct Rank {
  std::unique_ptr<Executor> executor;
  Timeline timeline;  // not opened: spans are skipped
  std::unique_ptr<CompressionStage> compression;
  std::unique_ptr<DataPlane> plane;
  std::map<std::string, absl::Status> done;  // each completed operation's outcome, by name
  absl::Status error;                        // what Progress returned, once it failed
};

class Job {
 public:
  Job(int size, const Config& config, int channels = 1) : world_(size, channels), ranks_(size) {
    for (int r = 0; r < size; ++r) {
      Rank& rank = ranks_[static_cast<size_t>(r)];
      rank.executor = world_.CreateExecutor(r);
      rank.compression = std::make_unique<CompressionStage>(r, size);
      rank.plane = std::make_unique<DataPlane>(
          rank.executor.get(),
          PlaneContext{config, r, size, &rank.timeline, rank.compression.get(),
                       [&rank](PendingOp& op, const absl::Status& status) {
                         CHECK(rank.done.count(op.request.name) == 0);  // completed once
                         rank.done[op.request.name] = status;
                       }});
    }
  }

  FakeWorld& world() { return world_; }
  Rank& rank(int r) { return ranks_[static_cast<size_t>(r)]; }
  int size() const { return static_cast<int>(ranks_.size()); }

  // Runs every plane until all are idle. A plane whose Progress fails fails all its operations
  // with that error, as Runtime::Fatal does.
  void Run(absl::Duration limit = absl::Seconds(30)) {
    const absl::Time deadline = absl::Now() + limit;
    for (;;) {
      bool busy = false;
      for (Rank& rank : ranks_) {
        if (!rank.error.ok() || rank.plane->idle()) continue;
        busy = true;
        absl::Status s = rank.plane->Progress();
        if (!s.ok()) {
          rank.error = s;
          rank.plane->FailAll(s);
        }
      }
      if (!busy) return;
      if (absl::Now() > deadline) FAIL("the data planes did not finish within the limit");
      absl::SleepFor(absl::Microseconds(200));
    }
  }

 private:
  FakeWorld world_;
  std::vector<Rank> ranks_;
};

template <typename T>
ReadyOp Allreduce(const std::string& name, std::vector<T>* data, ReduceOp op = ReduceOp::kSum,
                  double postscale = 1.0) {
  const Tensor t = MakeTensor(data->data(), {static_cast<int64_t>(data->size())});
  AllreduceOptions options;
  options.op = op;
  options.compression = "none";
  options.postscale = postscale;
  PendingOp pending = AllreduceOp(name, t, t, options);
  pending.handle = std::make_shared<internal::HandleState>(name, 0, nullptr);
  auto response = std::make_shared<Response>();
  response->name = name;
  response->request = pending.request;
  return ReadyOp{std::move(response), std::move(pending)};
}

std::vector<StartedCollective> OnChannel(const std::vector<StartedCollective>& started,
                                         int channel) {
  std::vector<StartedCollective> on;
  for (const StartedCollective& c : started) {
    if (c.channel == channel) on.push_back(c);
  }
  return on;
}

std::vector<float> Filled(size_t n, float value) { return std::vector<float>(n, value); }

TEST_CASE("small allreduces are fused into one collective and reduced on every rank") {
  Job job(3, Config());
  // rank r's tensor i holds 10 * i + r; the sums are 30 * i + 3.
  const std::vector<size_t> sizes = {3, 1, 5, 2};
  std::vector<std::vector<std::vector<float>>> data(3);
  for (int r = 0; r < 3; ++r) {
    std::vector<ReadyOp> ready;
    for (size_t i = 0; i < sizes.size(); ++i) {
      data[static_cast<size_t>(r)].push_back(Filled(sizes[i], 10.0f * i + r));
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      ready.push_back(Allreduce("t" + std::to_string(i), &data[static_cast<size_t>(r)][i]));
    }
    job.rank(r).plane->Submit(std::move(ready));
  }
  job.Run();
  for (int r = 0; r < 3; ++r) {
    CHECK(job.rank(r).error.ok());
    CHECK(job.rank(r).done.size() == 4);
    for (const auto& [name, status] : job.rank(r).done) CHECK(status.ok());
    for (size_t i = 0; i < sizes.size(); ++i) {
      CHECK(data[static_cast<size_t>(r)][i] == Filled(sizes[i], 30.0f * i + 3));
    }
    const std::vector<StartedCollective> started = job.world().started(r);
    REQUIRE(started.size() == 1);
    CHECK(started[0].kind == CollectiveKind::kAllreduce);
    CHECK(started[0].count == 11);
    CHECK(started[0].bytes == 44);
  }
}

TEST_CASE(
    "buckets close at the fusion threshold and on a change of dtype, and go to channels "
    "round-robin") {
  Config config;
  config.fusion_threshold_bytes = 16;
  Job job(2, config, 2);
  std::vector<std::vector<float>> a(2), b(2), d(2);
  std::vector<std::vector<int32_t>> c(2);
  for (int r = 0; r < 2; ++r) {
    const size_t i = static_cast<size_t>(r);
    a[i] = Filled(2, 1);  // 8 bytes
    b[i] = Filled(2, 2);  // with a: 16 bytes, one bucket
    c[i] = {r, 10 * r};   // int32: a bucket of its own
    d[i] = Filled(5, 3);  // 20 bytes: over the threshold alone, still one bucket
    std::vector<ReadyOp> ready;
    ready.push_back(Allreduce("a", &a[i]));
    ready.push_back(Allreduce("b", &b[i]));
    ready.push_back(Allreduce("c", &c[i], ReduceOp::kMax));
    ready.push_back(Allreduce("d", &d[i]));
    job.rank(r).plane->Submit(std::move(ready));
  }
  job.Run();
  for (int r = 0; r < 2; ++r) {
    const size_t i = static_cast<size_t>(r);
    CHECK(job.rank(r).error.ok());
    CHECK(a[i] == Filled(2, 2));
    CHECK(b[i] == Filled(2, 4));
    CHECK(c[i] == std::vector<int32_t>{1, 10});
    CHECK(d[i] == Filled(5, 6));
    // Channels run concurrently, so only each channel's own sequence is fixed.
    const std::vector<StartedCollective> zero = OnChannel(job.world().started(r), 0);
    const std::vector<StartedCollective> one = OnChannel(job.world().started(r), 1);
    REQUIRE(zero.size() == 2);
    REQUIRE(one.size() == 1);
    CHECK(zero[0].count == 4);  // a and b
    CHECK(zero[1].count == 5);  // d
    CHECK(one[0].dtype == DataType::kInt32);
    CHECK(one[0].op == ReduceOp::kMax);
  }
}

TEST_CASE("averages: a sum and a scale for floats, integer division for integers") {
  Job job(4, Config());
  std::vector<std::vector<float>> f(4);
  std::vector<std::vector<double>> g(4);
  std::vector<std::vector<int32_t>> n(4);
  for (int r = 0; r < 4; ++r) {
    const size_t i = static_cast<size_t>(r);
    f[i] = {static_cast<float>(r), 1.0f};  // average {1.5, 1}
    g[i] = {2.0 * r};                      // average 3, postscale 0.5: 1.5
    n[i] = {r, 4 * r};                     // sums {6, 24}: averages {1, 6}
    std::vector<ReadyOp> ready;
    ready.push_back(Allreduce("f", &f[i], ReduceOp::kAverage));
    ready.push_back(Allreduce("g", &g[i], ReduceOp::kAverage, 0.5));
    ready.push_back(Allreduce("n", &n[i], ReduceOp::kAverage));
    job.rank(r).plane->Submit(std::move(ready));
  }
  job.Run();
  for (int r = 0; r < 4; ++r) {
    const size_t i = static_cast<size_t>(r);
    CHECK(job.rank(r).error.ok());
    CHECK(f[i] == std::vector<float>{1.5f, 1.0f});
    CHECK(g[i] == std::vector<double>{1.5});
    CHECK(n[i] == std::vector<int32_t>{1, 6});
    // The executor sees sums only (the fake refuses kAverage).
    for (const StartedCollective& c : job.world().started(r)) CHECK(c.op == ReduceOp::kSum);
  }
}

TEST_CASE("broadcast and allgather run alone, with results on every rank") {
  Job job(3, Config());
  std::vector<std::vector<int64_t>> bcast(3), gather(3);
  std::vector<std::shared_ptr<internal::HandleState>> gather_handles;
  for (int r = 0; r < 3; ++r) {
    const size_t i = static_cast<size_t>(r);
    bcast[i] = {r == 2 ? 42 : 0, r == 2 ? 43 : 0};
    gather[i].assign(i + 1, 100 + r);  // rank r contributes r + 1 rows
    std::vector<ReadyOp> ready;
    {
      PendingOp op;
      op.request.kind = OpKind::kBroadcast;
      op.request.name = "bcast";
      op.request.root = 2;
      op.request.tensors.push_back(TensorMeta{DataType::kInt64, {2}});
      op.inputs.push_back(MakeTensor(bcast[i].data(), {2}));
      op.outputs.push_back(op.inputs[0]);
      op.handle = std::make_shared<internal::HandleState>("bcast", 0, nullptr);
      auto response = std::make_shared<Response>();
      response->name = "bcast";
      response->request = op.request;
      ready.push_back(ReadyOp{std::move(response), std::move(op)});
    }
    {
      PendingOp op;
      op.request.kind = OpKind::kAllgather;
      op.request.name = "gather";
      op.request.tensors.push_back(TensorMeta{DataType::kInt64, {static_cast<int64_t>(i + 1)}});
      op.inputs.push_back(MakeTensor(gather[i].data(), {static_cast<int64_t>(i + 1)}));
      op.handle = std::make_shared<internal::HandleState>("gather", 0, nullptr);
      gather_handles.push_back(op.handle);
      auto response = std::make_shared<Response>();
      response->name = "gather";
      response->request = op.request;
      response->rank_rows = {1, 2, 3};
      ready.push_back(ReadyOp{std::move(response), std::move(op)});
    }
    job.rank(r).plane->Submit(std::move(ready));
  }
  job.Run();
  for (int r = 0; r < 3; ++r) {
    const size_t i = static_cast<size_t>(r);
    CHECK(job.rank(r).error.ok());
    CHECK(bcast[i] == std::vector<int64_t>{42, 43});
    const Tensor& out = gather_handles[i]->output();
    REQUIRE(out.shape == std::vector<int64_t>{6});
    const auto* values = static_cast<const int64_t*>(out.data);
    CHECK(std::vector<int64_t>(values, values + 6) ==
          std::vector<int64_t>{100, 101, 101, 102, 102, 102});
    const std::vector<StartedCollective> started = job.world().started(r);
    REQUIRE(started.size() == 2);
    CHECK(started[0].kind == CollectiveKind::kBroadcast);
    CHECK(started[1].kind == CollectiveKind::kAllgatherv);
  }
}

TEST_CASE("a failed collective reaches every operation's callback, naming the rank and tensors") {
  Job job(2, Config());
  job.world().FailCollective(0, 0, absl::UnavailableError("connection reset by peer"));
  std::vector<std::vector<float>> a(2), b(2);
  std::vector<std::vector<int32_t>> queued(2);
  for (int r = 0; r < 2; ++r) {
    const size_t i = static_cast<size_t>(r);
    a[i] = Filled(2, 1);
    b[i] = Filled(3, 1);
    queued[i] = {1};
    std::vector<ReadyOp> ready;
    ready.push_back(Allreduce("layer0.weight", &a[i]));
    ready.push_back(Allreduce("layer0.bias", &b[i]));
    ready.push_back(Allreduce("step", &queued[i]));  // int32: the next bucket, not yet started
    job.rank(r).plane->Submit(std::move(ready));
  }
  job.Run();
  for (int r = 0; r < 2; ++r) {
    const Rank& rank = job.rank(r);
    const std::string expected = "rank " + std::to_string(r) +
                                 ": allreduce of 'layer0.weight', 'layer0.bias' on channel 0 "
                                 "failed: connection reset by peer";
    CHECK(rank.error.code() == absl::StatusCode::kUnavailable);
    CHECK(rank.error.message() == expected);
    REQUIRE(rank.done.size() == 3);
    for (const auto& [name, status] : rank.done) {
      CHECK(status.code() == absl::StatusCode::kUnavailable);
      CHECK(status.message() == expected);
    }
    CHECK(a[static_cast<size_t>(r)] == Filled(2, 1));  // untouched
  }
}

TEST_CASE("a collective that never completes fails with DeadlineExceeded naming the tensor") {
  Config config;
  config.collective_timeout_s = 0.2;
  Job job(2, config);
  job.world().HoldCollective(0, 0);
  std::vector<std::vector<float>> x(2);
  for (int r = 0; r < 2; ++r) {
    x[static_cast<size_t>(r)] = Filled(4, 1);
    std::vector<ReadyOp> ready;
    ready.push_back(Allreduce("stuck.grad", &x[static_cast<size_t>(r)]));
    job.rank(r).plane->Submit(std::move(ready));
  }
  const absl::Time start = absl::Now();
  job.Run();
  CHECK(absl::Now() - start >= absl::Milliseconds(200));
  for (int r = 0; r < 2; ++r) {
    const Rank& rank = job.rank(r);
    CHECK(rank.error.code() == absl::StatusCode::kDeadlineExceeded);
    CHECK_THAT(std::string(rank.error.message()),
               Catch::StartsWith("rank " + std::to_string(r) +
                                 ": allreduce of 'stuck.grad' on channel 0 did not complete "
                                 "within") &&
                   Catch::Contains("OVERLAP_COLLECTIVE_TIMEOUT_S"));
    REQUIRE(rank.done.count("stuck.grad") == 1);
    CHECK(rank.done.at("stuck.grad") == rank.error);
  }
}

TEST_CASE("over a stream-ordered executor buckets are queued back to back, with values kept") {
  // One rank: the fake completes each collective at its Start. The dtype changes every second
  // tensor, which closes a fused bucket: 8 buckets of two through one fusion buffer, with
  // scaling on both sides.
  Config config;
  Job job(1, config);
  job.world().SetStreamOrdered(true);
  std::vector<std::vector<float>> f32(8);
  std::vector<std::vector<double>> f64(8);
  std::vector<ReadyOp> ready;
  for (int t = 0; t < 16; ++t) {
    const std::string name = "queued." + std::to_string(t);
    const size_t index = static_cast<size_t>(t / 4 * 2 + t % 2);
    const size_t n = 10 + static_cast<size_t>(t);
    if ((t / 2) % 2 == 0) {
      f32[index] = Filled(n, static_cast<float>(t));
      ready.push_back(Allreduce(name, &f32[index], ReduceOp::kSum, 2.0));
    } else {
      f64[index] = std::vector<double>(n, t);
      ready.push_back(Allreduce(name, &f64[index], ReduceOp::kSum, 2.0));
    }
  }
  job.rank(0).plane->Submit(std::move(ready));
  job.Run();
  REQUIRE(job.rank(0).error.ok());
  CHECK(job.world().started(0).size() == 8);
  for (int t = 0; t < 16; ++t) {
    const std::string name = "queued." + std::to_string(t);
    REQUIRE(job.rank(0).done.count(name) == 1);
    CHECK(job.rank(0).done.at(name).ok());
    const size_t index = static_cast<size_t>(t / 4 * 2 + t % 2);
    if ((t / 2) % 2 == 0) {
      CHECK(f32[index] == Filled(f32[index].size(), 2.0f * t));
    } else {
      CHECK(f64[index] == std::vector<double>(f64[index].size(), 2.0 * t));
    }
  }
}

TEST_CASE(
    "behind a stuck stream-ordered collective, at most four buckets start and none completes") {
  Config config;
  config.collective_timeout_s = 0.2;
  config.direct_threshold_bytes = 1;  // every tensor a bucket of its own
  Job job(1, config);
  job.world().SetStreamOrdered(true);
  job.world().HoldCollective(0, 0);
  std::vector<std::vector<float>> x(8, Filled(4, 1));
  std::vector<ReadyOp> ready;
  for (int t = 0; t < 8; ++t) ready.push_back(Allreduce("held." + std::to_string(t), &x[t]));
  job.rank(0).plane->Submit(std::move(ready));
  for (int i = 0; i < 5; ++i) REQUIRE(job.rank(0).plane->Progress().ok());
  // The held one and three queued behind it; nothing completes before the front.
  CHECK(job.world().started(0).size() == 4);
  CHECK(job.rank(0).done.empty());
  job.Run();
  const Rank& rank = job.rank(0);
  CHECK(rank.error.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_THAT(std::string(rank.error.message()),
             Catch::StartsWith("rank 0: allreduce of 'held.0' on channel 0 did not complete"));
  CHECK(rank.done.size() == 8);  // every operation failed with the error (Runtime::Fatal's part)
}

TEST_CASE("ranks that build different buckets are caught by the fake, not left hanging") {
  // Rank 1 has a smaller fusion threshold (a misconfiguration the runtime's agreement check
  // prevents): its first collective differs from rank 0's, and both fail naming the mismatch.
  Config small;
  small.fusion_threshold_bytes = 8;
  FakeWorld world(2);
  std::vector<std::unique_ptr<Executor>> executors;
  std::vector<std::unique_ptr<DataPlane>> planes;
  std::vector<std::unique_ptr<CompressionStage>> compression;
  Timeline timeline;
  std::map<std::string, absl::Status> done[2];
  std::vector<std::vector<float>> a(2), b(2);
  for (int r = 0; r < 2; ++r) {
    executors.push_back(world.CreateExecutor(r));
    compression.push_back(std::make_unique<CompressionStage>(r, 2));
    planes.push_back(std::make_unique<DataPlane>(
        executors.back().get(),
        PlaneContext{r == 0 ? Config() : small, r, 2, &timeline, compression.back().get(),
                     [&done, r](PendingOp& op, const absl::Status& s) {
                       done[r][op.request.name] = s;
                     }}));
    a[static_cast<size_t>(r)] = Filled(2, 1);
    b[static_cast<size_t>(r)] = Filled(2, 1);
    std::vector<ReadyOp> ready;
    ready.push_back(Allreduce("a", &a[static_cast<size_t>(r)]));
    ready.push_back(Allreduce("b", &b[static_cast<size_t>(r)]));
    planes.back()->Submit(std::move(ready));
  }
  absl::Status errors[2];
  for (int round = 0; round < 100 && (errors[0].ok() || errors[1].ok()); ++round) {
    for (int r = 0; r < 2; ++r) {
      if (errors[r].ok()) errors[r] = planes[static_cast<size_t>(r)]->Progress();
    }
  }
  for (int r = 0; r < 2; ++r) {
    CHECK(errors[r].code() == absl::StatusCode::kInternal);
    CHECK_THAT(std::string(errors[r].message()),
               Catch::Contains("rank 0 started allreduce float32 sum of 4 elements, rank 1 "
                               "started allreduce float32 sum of 2 elements"));
  }
}

}  // namespace
}  // namespace overlap
