// Planned execution (runtime/planes/planned_mode.h) on N simulated ranks in one process: the fake
// executor (tests/fakes/fake_executor.h) carries the buckets' collectives and the fake control
// collectives (tests/fakes/fake_control.h) their consistency checks, so sliced, DeAR-split and
// whole-tensor plans, divergence, Join, failures and stalls are tested without mpirun. One
// thread runs every rank's Progress in turn, as each rank's coordinator thread would.
#include "runtime/planes/planned_mode.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "tests/fakes/fake_control.h"
#include "tests/fakes/fake_executor.h"

namespace overlap {
namespace {

using fake::ControlKind;
using fake::FakeControlWorld;
using fake::FakeWorld;

// The agreed float32 allreduce (sum) of `name` with `count` elements, as negotiation caches it.
Request SumRequest(const std::string& name, int64_t count) {
  Request request;
  request.name = name;
  request.kind = OpKind::kAllreduce;
  request.op = ReduceOp::kSum;
  request.tensors.push_back(TensorMeta{DataType::kFloat32, {count}});
  return request;
}

struct Rank {
  std::unique_ptr<Timeline> timeline = std::make_unique<Timeline>();  // not opened
  std::unique_ptr<CompressionStage> compression;
  std::unique_ptr<PlannedMode> planned;
  std::map<std::string, std::vector<float>> data;  // each submitted tensor's buffer, by name
  std::map<std::string, absl::Status> done;        // each completed operation's outcome
  std::vector<PendingOp> renegotiate;              // handed back for negotiation
  absl::Status error;                              // what Progress returned, once it failed
};

class PlannedJob {
 public:
  // `counts`: the plan's tensors and their element counts, in plan order (cache ids 0, 1, ...).
  PlannedJob(int size, std::vector<std::pair<std::string, int64_t>> counts, int channels = 1,
             Config config = Config())
      : world_(size, channels), checks_(size), ranks_(static_cast<size_t>(size)) {
    for (size_t i = 0; i < counts.size(); ++i) {
      auto response = std::make_shared<Response>();
      response->name = counts[i].first;
      response->cache_id = static_cast<int32_t>(i);
      response->request = SumRequest(counts[i].first, counts[i].second);
      entries_.push_back(PlanEntry{response->cache_id, response});
    }
    std::vector<std::string> hosts;
    for (int r = 0; r < size; ++r) hosts.push_back("h" + std::to_string(r + 1));
    config.num_channels = channels;
    for (int r = 0; r < size; ++r) {
      Rank& rank = this->rank(r);
      rank.compression = std::make_unique<CompressionStage>(r, size);
      rank.planned = std::make_unique<PlannedMode>(
          world_.CreateExecutor(r), checks_.Create(r),
          PlaneContext{config, r, size, rank.timeline.get(), rank.compression.get(),
                       [&rank](PendingOp& op, const absl::Status& status) {
                         CHECK(rank.done.count(op.request.name) == 0);  // completed once
                         rank.done[op.request.name] = status;
                       }},
          hosts);
    }
  }

  FakeWorld& world() { return world_; }
  FakeControlWorld& checks() { return checks_; }
  Rank& rank(int r) { return ranks_[static_cast<size_t>(r)]; }
  int size() const { return static_cast<int>(ranks_.size()); }

  // A plan over this job's tensors with `buckets`.
  ExecutablePlan Plan(std::vector<ExecBucket> buckets) const {
    ExecutablePlan plan;
    plan.source = "test";
    plan.entries = entries_;
    plan.buckets = std::move(buckets);
    return plan;
  }
  void Freeze(const ExecutablePlan& plan) {
    for (Rank& rank : ranks_) rank.planned->Freeze(plan, {}, absl::Milliseconds(10));
  }

  // Rank r submits `name` with values (r + 1) * (i + 1) for element i; `count` overrides the
  // plan's element count (a divergent submission).
  void Submit(int r, const std::string& name, int64_t count = -1) {
    Rank& rank = this->rank(r);
    if (count < 0) {
      for (const PlanEntry& entry : entries_) {
        if (entry.response->name == name) count = entry.response->request.tensors[0].shape[0];
      }
    }
    std::vector<float>& data = rank.data[name];
    data.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) data[static_cast<size_t>(i)] = float((r + 1) * (i + 1));
    Tensor tensor = MakeTensor(data.data(), {count});
    AllreduceOptions options;
    options.op = ReduceOp::kSum;
    options.compression = "none";
    rank.done.erase(name);
    rank.planned->Add(AllreduceOp(name, tensor, tensor, options));
  }
  void SubmitEverywhere(const std::string& name) {
    for (int r = 0; r < size(); ++r) Submit(r, name);
  }

  // Runs every rank's Progress in turn until every rank is idle with nothing waiting, or has
  // failed, or must unfreeze and has finished what it started (as the runtime keeps a dropped
  // plan's started units running); false after `limit`.
  bool Run(absl::Duration limit = absl::Seconds(20)) {
    const absl::Time deadline = absl::Now() + limit;
    while (absl::Now() < deadline) {
      bool busy = false;
      for (Rank& rank : ranks_) {
        if (!rank.error.ok()) continue;
        if (rank.planned->must_unfreeze() && rank.planned->idle()) continue;
        absl::Status s = rank.planned->Progress(&rank.renegotiate);
        if (!s.ok()) {
          rank.error = s;
          continue;
        }
        if (rank.planned->must_unfreeze() ? !rank.planned->idle() : !rank.planned->quiescent()) {
          busy = true;
        }
      }
      if (!busy) return true;
    }
    return false;
  }

  // The expected sum of element i over every rank: sum (r + 1) * (i + 1).
  float Sum(int64_t i) const {
    const int n = size();
    return float(n * (n + 1) / 2 * (i + 1));
  }
  void CheckSums(const std::string& name) {
    for (int r = 0; r < size(); ++r) {
      Rank& rank = this->rank(r);
      INFO("rank " << r << " tensor " << name);
      REQUIRE(rank.done.count(name) == 1);
      CHECK(rank.done[name].ok());
      const std::vector<float>& data = rank.data[name];
      for (size_t i = 0; i < data.size(); ++i) CHECK(data[i] == Sum(static_cast<int64_t>(i)));
    }
  }

 private:
  FakeWorld world_;
  FakeControlWorld checks_;
  std::vector<Rank> ranks_;
  std::vector<PlanEntry> entries_;
};

ExecBucket Sliced(BucketKind kind, std::vector<ExecSlice> slices, int channel = 0) {
  ExecBucket bucket;
  bucket.kind = kind;
  bucket.slices = std::move(slices);
  bucket.channel = channel;
  return bucket;
}

int CountChecks(const FakeControlWorld& checks, int rank) {
  int n = 0;
  for (const fake::StartedControl& call : checks.started()) {
    if (call.rank == rank) {
      CHECK(call.kind == ControlKind::kOr);
      ++n;
    }
  }
  return n;
}

TEST_CASE("a sliced plan on two channels gives exact sums with one check per bucket", "[planned]") {
  PlannedJob job(3, {{"a", 8}, {"b", 6}}, /*channels=*/2);
  job.Freeze(job.Plan({
      Sliced(BucketKind::kAllreduce, {{0, 0, 3}}, 0),
      Sliced(BucketKind::kAllreduce, {{0, 3, 5}, {1, 0, 2}}, 1),
      Sliced(BucketKind::kAllreduce, {{1, 2, 4}}, 0),
  }));
  for (int step = 0; step < 3; ++step) {  // the plan repeats with no negotiation
    job.SubmitEverywhere("b");            // submission order does not matter
    job.SubmitEverywhere("a");
    REQUIRE(job.Run());
    for (int r = 0; r < 3; ++r) {
      REQUIRE(job.rank(r).error.ok());
      CHECK(job.rank(r).renegotiate.empty());
      CHECK(!job.rank(r).planned->must_unfreeze());
    }
    job.CheckSums("a");
    job.CheckSums("b");
  }
  for (int r = 0; r < 3; ++r) {
    CHECK(CountChecks(job.checks(), r) == 9);
    CHECK(job.rank(r).planned->launches() == 9);
  }
  // Bucket 1 went over channel 1 with 7 elements; the others over channel 0.
  std::vector<int64_t> channel1;
  for (const fake::StartedCollective& c : job.world().started(0)) {
    if (c.channel == 1) channel1.push_back(c.count);
  }
  CHECK(channel1 == std::vector<int64_t>{7, 7, 7});
}

TEST_CASE("a DeAR plan: reduce-scatter then all-gather of the same slices gives exact sums",
          "[planned]") {
  PlannedJob job(4, {{"w", 10}, {"v", 6}});
  ExecBucket gather = Sliced(BucketKind::kAllgather, {{0, 0, 10}, {1, 0, 6}});
  gather.reduce_scatter = 0;
  job.Freeze(job.Plan({Sliced(BucketKind::kReduceScatter, {{0, 0, 10}, {1, 0, 6}}), gather}));
  job.SubmitEverywhere("w");
  job.SubmitEverywhere("v");
  REQUIRE(job.Run());
  job.CheckSums("w");
  job.CheckSums("v");
  std::vector<CollectiveKind> kinds;
  for (const fake::StartedCollective& c : job.world().started(2)) kinds.push_back(c.kind);
  CHECK(kinds ==
        std::vector<CollectiveKind>{CollectiveKind::kReduceScatter, CollectiveKind::kAllgatherv});
}

TEST_CASE("an observed plan of whole-tensor buckets gives exact sums", "[planned]") {
  PlannedJob job(2, {{"x", 5}, {"y", 3}, {"z", 4}});
  ExecBucket first, second;
  first.slices = {{0, 0, 5}};
  second.slices = {{1, 0, 3}, {2, 0, 4}};
  job.Freeze(job.Plan({first, second}));
  for (const char* name : {"x", "y", "z"}) job.SubmitEverywhere(name);
  REQUIRE(job.Run());
  for (const char* name : {"x", "y", "z"}) job.CheckSums(name);
  CHECK(CountChecks(job.checks(), 1) == 2);
}

TEST_CASE("a tensor one rank submits differently goes back to negotiation on every rank",
          "[planned][divergence]") {
  PlannedJob job(3, {{"a", 4}, {"b", 4}});
  job.Freeze(job.Plan(
      {Sliced(BucketKind::kAllreduce, {{0, 0, 4}}), Sliced(BucketKind::kAllreduce, {{1, 0, 4}})}));
  job.SubmitEverywhere("a");
  job.Submit(0, "b");
  job.Submit(1, "b", /*count=*/5);  // rank 1 changed b's shape
  job.Submit(2, "b");
  REQUIRE(job.Run());
  job.CheckSums("a");  // a's bucket was checked clean
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    REQUIRE(job.rank(r).error.ok());
    CHECK(job.rank(r).planned->must_unfreeze());
    CHECK(job.rank(r).done.count("b") == 0);
    REQUIRE(job.rank(r).renegotiate.size() == 1);
    const PendingOp& back = job.rank(r).renegotiate[0];
    CHECK(back.request.name == "b");
    CHECK(back.request.tensors[0].shape == std::vector<int64_t>{r == 1 ? 5 : 4});
  }
  // Rank 1 sent zeros for b from a buffer of its own: its input is untouched. (The others'
  // whole-tensor bucket was reduced in place, ranks 0 and 2 only; negotiation fails b with the
  // shape mismatch, so those values never count as a result.)
  CHECK(job.rank(1).data["b"][1] == 4.0f);
  CHECK(job.rank(0).data["b"][1] == float((1 + 3) * 2));
}

// Six single-tensor buckets, a..f, for the check window's tests.
const std::vector<std::pair<std::string, int64_t>> kSix = {{"a", 4}, {"b", 4}, {"c", 4},
                                                           {"d", 4}, {"e", 4}, {"f", 4}};
std::vector<ExecBucket> SixBuckets(BucketKind kind) {
  std::vector<ExecBucket> buckets;
  for (int i = 0; i < 6; ++i) {
    ExecBucket b = Sliced(kind, {{i, 0, 4}});
    buckets.push_back(b);
  }
  return buckets;
}

TEST_CASE("up to the check window's units start before the first check is in, and no more",
          "[planned][window]") {
  Config config;
  config.plan_check_window = GENERATE(1, 3, 4);
  PlannedJob job(2, kSix, 1, config);
  job.checks().HoldCall(0);  // a's check never completes
  job.Freeze(job.Plan(SixBuckets(BucketKind::kAllreduce)));
  for (const auto& [name, count] : kSix) job.SubmitEverywhere(name);
  CHECK_FALSE(job.Run(absl::Milliseconds(200)));
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ", window " << config.plan_check_window);
    CHECK(job.rank(r).planned->launches() == static_cast<uint64_t>(config.plan_check_window));
    CHECK(CountChecks(job.checks(), r) == config.plan_check_window);
    CHECK(job.rank(r).done.empty());  // a handle completes only once its check is in
  }
}

TEST_CASE("a pass starts only once every check of the last one is in", "[planned][window]") {
  PlannedJob job(2, {{"a", 4}, {"b", 4}});
  job.checks().HoldCall(1);  // b's check never completes
  job.Freeze(job.Plan(
      {Sliced(BucketKind::kAllreduce, {{0, 0, 4}}), Sliced(BucketKind::kAllreduce, {{1, 0, 4}})}));
  job.SubmitEverywhere("a");
  job.SubmitEverywhere("b");
  CHECK_FALSE(job.Run(absl::Milliseconds(200)));
  job.CheckSums("a");
  job.SubmitEverywhere("a");  // the next step's a
  CHECK_FALSE(job.Run(absl::Milliseconds(200)));
  for (int r = 0; r < 2; ++r) CHECK(job.rank(r).planned->launches() == 2);
}

TEST_CASE("a divergence found with several units in flight stops every rank after the same unit",
          "[planned][divergence][window]") {
  PlannedJob job(3, kSix);  // the default window: 4
  job.Freeze(job.Plan(SixBuckets(BucketKind::kAllreduce)));
  for (int r = 0; r < 3; ++r) {
    job.Submit(r, "a", r == 1 ? 5 : 4);  // rank 1 changed a's shape
    for (const char* name : {"b", "c", "d", "e", "f"}) job.Submit(r, name);
  }
  REQUIRE(job.Run());
  // a's check set the stop at the last unit of its window (a, b, c, d); those checked clean
  // complete, a goes back to negotiation, e and f were never started.
  job.CheckSums("b");
  job.CheckSums("c");
  job.CheckSums("d");
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    Rank& rank = job.rank(r);
    REQUIRE(rank.error.ok());
    CHECK(rank.planned->must_unfreeze());
    CHECK(rank.planned->launches() == 4);
    REQUIRE(rank.renegotiate.size() == 1);
    CHECK(rank.renegotiate[0].request.name == "a");
    std::vector<std::string> back;
    for (PendingOp& op : rank.planned->Unfreeze()) back.push_back(op.request.name);
    std::sort(back.begin(), back.end());
    CHECK(back == std::vector<std::string>{"e", "f"});
  }
}

TEST_CASE("a rank short of a divergence's stop asks to drop the plan, then reaches the stop",
          "[planned][divergence][window]") {
  PlannedJob job(3, kSix);
  job.Freeze(job.Plan(SixBuckets(BucketKind::kAllreduce)));
  for (int r = 0; r < 3; ++r) {
    job.Submit(r, "a", r == 1 ? 5 : 4);
    job.Submit(r, "b");
    if (r == 2) continue;  // rank 2's c and d come later
    for (const char* name : {"c", "d", "e", "f"}) job.Submit(r, name);
  }
  CHECK_FALSE(job.Run(absl::Milliseconds(200)));  // ranks 0 and 1 wait for rank 2's c and d
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK_FALSE(job.rank(r).planned->must_unfreeze());
    CHECK(job.rank(r).planned->launches() == (r == 2 ? 2 : 4));
    // Rank 2 cannot reach the stop with what it has: a round may drop the plan where every
    // rank started as many units (here they did not, so it would not).
    CHECK(job.rank(r).planned->wants_unfreeze() == (r == 2));
  }
  job.Submit(2, "c");
  job.Submit(2, "d");
  REQUIRE(job.Run());
  for (const char* name : {"b", "c", "d"}) job.CheckSums(name);
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(job.rank(r).planned->must_unfreeze());
    CHECK(job.rank(r).planned->launches() == 4);
    REQUIRE(job.rank(r).renegotiate.size() == 1);
    CHECK(job.rank(r).renegotiate[0].request.name == "a");
  }
}

TEST_CASE("every rank joined: the units of the window run as zeros, then the Join completes",
          "[planned][join][window]") {
  PlannedJob job(2, kSix);
  ExecutablePlan plan = job.Plan({});
  for (int i = 0; i < 6; ++i) {
    ExecBucket whole;
    whole.slices = {{i, 0, 4}};
    plan.buckets.push_back(whole);
  }
  job.Freeze(plan);
  for (int r = 0; r < 2; ++r) {
    PendingOp join;
    join.request.kind = OpKind::kJoin;
    join.request.name = "join";
    job.rank(r).planned->SetJoined(true);
    const std::optional<PendingOp> back = job.rank(r).planned->JoinAgreed(std::move(join));
    CHECK_FALSE(back.has_value());  // held
  }
  REQUIRE(job.Run());
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(job.rank(r).error.ok());
    REQUIRE(job.rank(r).done.count("join") == 1);
    CHECK(job.rank(r).done["join"].ok());
    CHECK(job.rank(r).planned->launches() == 4);  // the default window
    CHECK_FALSE(job.rank(r).planned->must_unfreeze());
  }
  // The plan restarts at its first bucket for everyone.
  for (const auto& [name, count] : kSix) job.SubmitEverywhere(name);
  REQUIRE(job.Run());
  for (const auto& [name, count] : kSix) job.CheckSums(name);
}

TEST_CASE("units that differ between ranks fail on every rank instead of mixing tensors",
          "[planned][errors]") {
  // Rank 0's plan pairs x with the first unit, rank 1's y: the same sizes, so the collectives
  // match and would sum x on one rank with y on the other. The check's fingerprint catches it.
  PlannedJob job(2, {{"x", 4}, {"y", 4}, {"z", 4}});
  ExecBucket x, y, z;
  x.slices = {{0, 0, 4}};
  y.slices = {{1, 0, 4}};
  z.slices = {{2, 0, 4}};
  job.rank(0).planned->Freeze(job.Plan({x, y, z}), {}, absl::Milliseconds(10));
  job.rank(1).planned->Freeze(job.Plan({y, x, z}), {}, absl::Milliseconds(10));
  for (const char* name : {"x", "y", "z"}) job.SubmitEverywhere(name);
  job.Run();
  const std::vector<std::string> first = {"'x'", "'y'"};
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << job.rank(r).error.ToString());
    CHECK(job.rank(r).error.code() == absl::StatusCode::kInternal);
    CHECK(job.rank(r).error.message() ==
          "rank " + std::to_string(r) +
              ": the frozen plan's unit 1 (plan bucket 0: " + first[static_cast<size_t>(r)] +
              ") is not the same unit on every rank, so its results would be wrong; the job "
              "stops. This is a bug in overlap: please report it with the logs of "
              "OVERLAP_LOG_LEVEL=debug");
    CHECK(job.rank(r).done.empty());  // nothing delivered
  }
}

TEST_CASE("a failed check fails planned execution on every rank naming the tensors",
          "[planned][errors]") {
  PlannedJob job(2, {{"g", 4}});
  job.checks().FailCall(0, absl::UnavailableError("MPI_Iallreduce: peer gone"));
  job.Freeze(job.Plan({Sliced(BucketKind::kAllreduce, {{0, 0, 4}})}));
  job.SubmitEverywhere("g");
  job.Run();
  for (int r = 0; r < 2; ++r) {
    CHECK(job.rank(r).error.code() == absl::StatusCode::kUnavailable);
    CHECK(job.rank(r).error.message() ==
          "rank " + std::to_string(r) +
              ": the planned check of 'g' failed: MPI_Iallreduce: peer gone");
  }
}

TEST_CASE("a failed bucket collective reaches every rank as an error naming the bucket",
          "[planned][errors]") {
  PlannedJob job(2, {{"h", 4}});
  job.world().FailCollective(0, 0, absl::UnavailableError("connection reset by h2"));
  job.Freeze(job.Plan({Sliced(BucketKind::kAllreduce, {{0, 0, 4}})}));
  job.SubmitEverywhere("h");
  job.Run();
  for (int r = 0; r < 2; ++r) {
    INFO(job.rank(r).error.ToString());
    CHECK(!job.rank(r).error.ok());
    CHECK(absl::StrContains(job.rank(r).error.message(), "'h'"));
    CHECK(absl::StrContains(job.rank(r).error.message(), "connection reset by h2"));
  }
}

TEST_CASE("a planned bucket one rank never starts ends in an error on the others, not a hang",
          "[planned][stall]") {
  // Without negotiation rounds (which name the missing ranks at the stall timeout, OnReport),
  // the fallbacks end it: the check unanswered past OVERLAP_STALL_TIMEOUT_S +
  // OVERLAP_COLLECTIVE_TIMEOUT_S, or the bucket's collective past the same limit.
  Config config;
  config.stall_warning_s = 1;
  config.stall_timeout_s = 1;
  config.collective_timeout_s = 1;
  PlannedJob job(3, {{"s", 4}}, 1, config);
  job.Freeze(job.Plan({Sliced(BucketKind::kAllreduce, {{0, 0, 4}})}));
  job.Submit(0, "s");
  job.Submit(1, "s");  // rank 2 never submits
  const absl::Time start = absl::Now();
  job.Run(absl::Seconds(10));
  const absl::Duration took = absl::Now() - start;
  CHECK(took >= absl::Seconds(2));
  CHECK(took < absl::Seconds(6));
  for (int r : {0, 1}) {
    INFO(job.rank(r).error.ToString());
    CHECK(job.rank(r).error.code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(absl::StrContains(job.rank(r).error.message(), "rank " + std::to_string(r) + ": "));
    CHECK(absl::StrContains(job.rank(r).error.message(), "planned allreduce of 's'"));
    CHECK(absl::StrContains(job.rank(r).error.message(), " 2 s"));
  }
  CHECK(job.rank(2).error.ok());
  CHECK(job.rank(2).done.empty());
}

TEST_CASE("a started unit a shut-down rank never starts fails at the next report, naming it",
          "[planned][stall][shutdown]") {
  PlannedJob job(3, {{"s", 4}});
  job.Freeze(job.Plan({Sliced(BucketKind::kAllreduce, {{0, 0, 4}})}));
  job.Submit(0, "s");
  job.Submit(1, "s");                             // rank 2 has shut down without submitting it
  CHECK_FALSE(job.Run(absl::Milliseconds(200)));  // ranks 0 and 1 wait on it
  CHECK(job.rank(2).planned->StartsNothingMore());
  for (int r : {0, 1}) CHECK_FALSE(job.rank(r).planned->StartsNothingMore());
  const std::vector<uint64_t> counts = {job.rank(0).planned->launches(),
                                        job.rank(1).planned->launches(),
                                        job.rank(2).planned->launches()};
  CHECK(counts == std::vector<uint64_t>{1, 1, 0});
  // Rank 2 still finishing its last units: only slow.
  for (int r : {0, 1}) job.rank(r).planned->OnReport(counts, {false, false, false});
  CHECK_FALSE(job.Run(absl::Milliseconds(100)));
  for (int r : {0, 1}) CHECK(job.rank(r).error.ok());
  // Rank 2 says it starts nothing more.
  for (int r : {0, 1}) job.rank(r).planned->OnReport(counts, {false, false, true});
  job.Run(absl::Seconds(5));
  for (int r : {0, 1}) {
    INFO(job.rank(r).error.ToString());
    CHECK(job.rank(r).error.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(absl::StrContains(job.rank(r).error.message(),
                            absl::StrCat("rank ", r,
                                         ": cannot complete: planned allreduce 's': "
                                         "submitted by ranks [0 (h1), 1 (h2)] but not by ranks "
                                         "[2 (h3)]")));
    CHECK(absl::StrContains(job.rank(r).error.message(), "ranks [2 (h3)] have called Shutdown"));
  }
}

}  // namespace
}  // namespace overlap
