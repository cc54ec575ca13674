// The negotiator (runtime/negotiation/negotiator.h) on N simulated ranks in one process, through the fake
// control collectives (tests/fakes/fake_control.h): agreement and the response cache, mismatches,
// the stall inspector, Join, shutdown and plan votes, and the failures of a round (a peer that
// never comes, a failed call, a lost peer), without mpirun. A round blocks until every rank takes
// part, so each rank runs its round on a thread of its own, as on its coordinator thread.
#include "runtime/negotiation/negotiator.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "tests/fakes/fake_control.h"

namespace overlap {
namespace {

using fake::ControlKind;
using fake::FakeControlWorld;

// What one rank brings to a round.
struct Turn {
  bool takes_part = true;
  bool joined = false;
  bool shutting_down = false;
  PlanVote vote;
};

class Negotiation {
 public:
  Negotiation(int size, const Config& config,
              std::function<absl::Status(int rank)> check_peers = nullptr)
      : world_(size), pending_(static_cast<size_t>(size)) {
    std::vector<std::string> hosts;
    for (int r = 0; r < size; ++r) hosts.push_back("h" + std::to_string(r + 1));
    for (int r = 0; r < size; ++r) {
      std::function<absl::Status()> check;
      if (check_peers != nullptr) check = [check_peers, r] { return check_peers(r); };
      negotiators_.push_back(
          std::make_unique<Negotiator>(world_.Create(r), config, hosts, std::move(check)));
    }
  }

  FakeControlWorld& world() { return world_; }
  Negotiator& negotiator(int r) { return *negotiators_[static_cast<size_t>(r)]; }
  PendingTable& pending(int r) { return pending_[static_cast<size_t>(r)]; }

  // Rank r submits an allreduce of `name` with float32 shape `shape`.
  void Submit(int r, const std::string& name, std::vector<int64_t> shape = {4}) {
    // Negotiation reads the request only; the tensor needs no memory.
    Tensor t;
    t.dtype = DataType::kFloat32;
    t.shape = std::move(shape);
    AllreduceOptions options;
    options.op = ReduceOp::kSum;
    pending(r)[name] = AllreduceOp(name, t, t, options);
  }
  // Rank r submits an allgather of `name`, float32 rows of 3.
  void SubmitAllgather(int r, const std::string& name) {
    PendingOp op;
    op.request.kind = OpKind::kAllgather;
    op.request.name = name;
    op.request.tensors.push_back(TensorMeta{DataType::kFloat32, {2, 3}});
    pending(r)[name] = std::move(op);
  }
  // Rank r calls Join; its turns must then say joined.
  void SubmitJoin(int r) {
    PendingOp op;
    op.request.kind = OpKind::kJoin;
    op.request.name = "__join";
    pending(r)["__join"] = std::move(op);
  }
  void SubmitEverywhere(const std::string& name) {
    for (int r = 0; r < size(); ++r) Submit(r, name);
  }

  int size() const { return static_cast<int>(negotiators_.size()); }

  // One round, each taking rank on a thread of its own. A rank that does not take part gets an
  // OK-less placeholder (Unknown "did not take part").
  std::vector<absl::StatusOr<RoundResult>> Round(std::vector<Turn> turns = {}) {
    turns.resize(static_cast<size_t>(size()));
    std::vector<absl::StatusOr<RoundResult>> results(static_cast<size_t>(size()),
                                                     absl::UnknownError("did not take part"));
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) {
      const Turn& turn = turns[static_cast<size_t>(r)];
      if (!turn.takes_part) continue;
      threads.emplace_back([this, r, &turn, &results] {
        results[static_cast<size_t>(r)] =
            negotiator(r).RunRound(&pending(r), turn.joined, turn.shutting_down, turn.vote);
      });
    }
    for (std::thread& t : threads) t.join();
    return results;
  }

  // Rounds until some taking rank has a failure or `limit` passes; returns the last round.
  std::vector<absl::StatusOr<RoundResult>> RoundsUntilFailure(std::vector<Turn> turns,
                                                              absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    for (;;) {
      std::vector<absl::StatusOr<RoundResult>> results = Round(turns);
      for (const auto& result : results) {
        if (result.ok() && !result->failed.empty()) return results;
      }
      if (absl::Now() > deadline) return results;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

 private:
  FakeControlWorld world_;
  std::vector<PendingTable> pending_;
  std::vector<std::unique_ptr<Negotiator>> negotiators_;
};

std::vector<std::string> ReadyNames(const RoundResult& result) {
  std::vector<std::string> names;
  for (const ReadyOp& ready : result.ready) names.push_back(ready.response->name);
  return names;
}

// The kinds of control calls rank r started, from call `from` on.
std::vector<ControlKind> CallsOf(const FakeControlWorld& world, int r, int64_t from = 0) {
  std::vector<ControlKind> kinds;
  for (const fake::StartedControl& call : world.started()) {
    if (call.rank == r && call.index >= from) kinds.push_back(call.kind);
  }
  return kinds;
}

Config FastConfig() {
  Config config;
  config.collective_timeout_s = 1;
  config.stall_warning_s = 0.05;
  config.stall_timeout_s = 0.2;
  return config;
}

TEST_CASE(
    "operations every rank submits are agreed in one round, in one order, then from the cache",
    "[negotiator]") {
  Negotiation job(4, FastConfig());
  for (int r = 0; r < 4; ++r) {
    // Each rank submits in its own order: the agreed order is rank 0's table order.
    for (const char* name : {"a", "b", "c"}) job.Submit(r, name);
  }
  auto first = job.Round();
  std::vector<std::string> order;
  for (int r = 0; r < 4; ++r) {
    REQUIRE(first[r].ok());
    CHECK(first[r]->failed.empty());
    std::vector<std::string> names = ReadyNames(*first[r]);
    CHECK(names.size() == 3);
    if (r == 0) order = names;
    CHECK(names == order);  // the same order on every rank
    for (const ReadyOp& ready : first[r]->ready) {
      REQUIRE(ready.op.has_value());
      CHECK(ready.op->request.name == ready.response->name);  // this rank's own submission
      CHECK(ready.response->cache_id >= 0);
      CHECK(ready.response->error.empty());
    }
    CHECK(job.pending(r).empty());
  }
  // First sight: the AND of the ready bits, the gather of the requests, the broadcast of the
  // responses.
  CHECK(CallsOf(job.world(), 2) ==
        std::vector<ControlKind>{ControlKind::kAnd, ControlKind::kGather, ControlKind::kBroadcast});
  for (const std::string& name : order) CHECK(job.negotiator(3).CachedId(name) >= 0);

  // The same step again: every rank's ids agree, and the round is one AND-allreduce.
  const int64_t calls = static_cast<int64_t>(job.world().started().size()) / 4;
  for (int r = 0; r < 4; ++r) {
    for (const char* name : {"c", "a", "b"}) job.Submit(r, name);
  }
  auto second = job.Round();
  for (int r = 0; r < 4; ++r) {
    REQUIRE(second[r].ok());
    CHECK(ReadyNames(*second[r]).size() == 3);
    CHECK(!second[r]->evicted);
    CHECK(CallsOf(job.world(), r, calls) == std::vector<ControlKind>{ControlKind::kAnd});
  }
}

TEST_CASE("a cached operation ready on some ranks only waits for the others", "[negotiator]") {
  Negotiation job(3, FastConfig());
  job.SubmitEverywhere("g");
  REQUIRE(job.Round()[0].ok());
  job.Submit(0, "g");
  job.Submit(1, "g");
  auto partial = job.Round();
  for (int r = 0; r < 3; ++r) {
    REQUIRE(partial[r].ok());
    CHECK(partial[r]->ready.empty());
  }
  job.Submit(2, "g");
  auto complete = job.Round();
  for (int r = 0; r < 3; ++r) {
    REQUIRE(complete[r].ok());
    CHECK(ReadyNames(*complete[r]) == std::vector<std::string>{"g"});
  }
}

TEST_CASE("ranks that submit different shapes get the mismatch on every rank that submitted",
          "[negotiator]") {
  Negotiation job(4, FastConfig());
  for (int r = 0; r < 4; ++r)
    job.Submit(r, "w", r == 2 ? std::vector<int64_t>{5} : std::vector<int64_t>{4});
  auto results = job.Round();
  for (int r = 0; r < 4; ++r) {
    REQUIRE(results[r].ok());
    CHECK(results[r]->ready.empty());
    REQUIRE(results[r]->failed.size() == 1);
    const std::string& error = results[r]->failed[0].second;
    CHECK(results[r]->failed[0].first.request.name == "w");
    CHECK(absl::StrContains(error, "shape mismatch"));
    CHECK(absl::StrContains(error, "rank 0 submitted"));
    CHECK(absl::StrContains(error, "rank 2 submitted"));
    CHECK(job.negotiator(r).CachedId("w") == -1);
  }
}

TEST_CASE("an operation some ranks never submit is failed by the stall inspector, naming them",
          "[negotiator][stall]") {
  Negotiation job(4, FastConfig());
  for (int r = 0; r < 3; ++r) job.Submit(r, "late");
  const absl::Time start = absl::Now();
  auto results = job.RoundsUntilFailure({}, absl::Seconds(10));
  CHECK(absl::Now() - start < absl::Seconds(5));
  for (int r = 0; r < 3; ++r) {
    REQUIRE(results[r].ok());
    REQUIRE(results[r]->failed.size() == 1);
    const std::string& error = results[r]->failed[0].second;
    CHECK(absl::StrContains(error,
                            "stalled: allreduce 'late': submitted by ranks [0 (h1), 1 (h2), "
                            "2 (h3)] but not by ranks [3 (h4)]"));
    CHECK(absl::StrContains(error, "OVERLAP_STALL_TIMEOUT_S"));
    CHECK(job.pending(r).empty());
  }
  REQUIRE(results[3].ok());
  CHECK(results[3]->failed.empty());  // rank 3 has nothing to fail
}

TEST_CASE("a tensor named differently on some ranks is failed with a hint naming both names",
          "[negotiator][stall]") {
  Negotiation job(4, FastConfig());
  // Ranks 0 and 1 call it "dense_1/kernel", ranks 2 and 3 "dense_3/kernel": the same tensor,
  // as a Keras model built after different numbers of other models would name it.
  for (int r = 0; r < 4; ++r) job.Submit(r, r < 2 ? "dense_1/kernel" : "dense_3/kernel", {4, 3});
  job.Submit(0, "alone", {4, 3});  // same shape, but rank 0 also has the first name: no hint
  auto results = job.RoundsUntilFailure({}, absl::Seconds(10));
  for (int r = 0; r < 4; ++r) {
    REQUIRE(results[r].ok());
    const std::string mine = r < 2 ? "dense_1/kernel" : "dense_3/kernel";
    const std::string theirs = r < 2 ? "dense_3/kernel" : "dense_1/kernel";
    const std::string others = r < 2 ? "[2 (h3), 3 (h4)]" : "[0 (h1), 1 (h2)]";
    bool found = false;
    for (const auto& [op, error] : results[r]->failed) {
      if (op.request.name != mine) continue;
      found = true;
      CHECK(absl::StrContains(error, absl::StrCat("; ranks ", others, " submitted allreduce '",
                                                  theirs, "' of the same dtype and shape")));
      CHECK(absl::StrContains(error, "names must match on every rank"));
    }
    CHECK(found);
    for (const auto& [op, error] : results[r]->failed) {
      if (op.request.name == "alone") CHECK_FALSE(absl::StrContains(error, "same dtype"));
    }
  }
}

TEST_CASE("different shapes on the two sides give no renaming hint", "[negotiator][stall]") {
  Negotiation job(2, FastConfig());
  job.Submit(0, "a", {4});
  job.Submit(1, "b", {5});
  auto results = job.RoundsUntilFailure({}, absl::Seconds(10));
  for (int r = 0; r < 2; ++r) {
    REQUIRE(results[r].ok());
    REQUIRE(results[r]->failed.size() == 1);
    CHECK_FALSE(absl::StrContains(results[r]->failed[0].second, "same dtype and shape"));
  }
}

TEST_CASE("a cached operation that one rank stops submitting is failed on the others, naming it",
          "[negotiator][stall]") {
  Negotiation job(3, FastConfig());
  job.SubmitEverywhere("x");
  REQUIRE(job.Round()[0].ok());
  job.Submit(0, "x");
  job.Submit(2, "x");
  auto results = job.RoundsUntilFailure({}, absl::Seconds(10));
  for (int r : {0, 2}) {
    REQUIRE(results[r].ok());
    REQUIRE(results[r]->failed.size() == 1);
    CHECK(absl::StrContains(results[r]->failed[0].second,
                            "submitted by ranks [0 (h1), 2 (h3)] but not by ranks [1 (h2)]"));
  }
}

// Stall limits far away: whatever fails here fails because a rank shut down.
Config PatientConfig() {
  Config config = FastConfig();
  config.stall_warning_s = 60;
  config.stall_timeout_s = 120;
  return config;
}

TEST_CASE("an operation a shut-down rank never submitted fails at once on the others, naming it",
          "[negotiator][stall][shutdown]") {
  Negotiation job(3, PatientConfig());
  job.SubmitEverywhere("cached");
  REQUIRE(job.Round()[0].ok());
  // Rank 1 has shut down (its program exited); ranks 0 and 2 wait on a cached operation and on
  // one never agreed before.
  for (int r : {0, 2}) {
    job.Submit(r, "cached");
    job.Submit(r, "new");
  }
  std::vector<Turn> turns(3);
  turns[1].shutting_down = true;
  const absl::Time start = absl::Now();
  auto results = job.Round(turns);
  CHECK(absl::Now() - start < absl::Seconds(1));
  for (int r : {0, 2}) {
    REQUIRE(results[r].ok());
    REQUIRE(results[r]->failed.size() == 2);
    for (const auto& [op, error] : results[r]->failed) {
      CHECK(absl::StrContains(error, absl::StrCat("cannot complete: allreduce '", op.request.name,
                                                  "': submitted by ranks [0 (h1), 2 (h3)] but "
                                                  "not by ranks [1 (h2)]")));
      CHECK(absl::StrContains(error, "ranks [1 (h2)] have called Shutdown"));
      CHECK(absl::StrContains(error, "sys.exit"));
    }
    CHECK(job.pending(r).empty());
  }
  REQUIRE(results[1].ok());
  CHECK(results[1]->failed.empty());
  CHECK(results[1]->any_shutting_down);
}

TEST_CASE("a failure for a shut-down rank blames it, not a rank that was only late",
          "[negotiator][stall][shutdown]") {
  Negotiation job(3, PatientConfig());
  // Rank 2 submitted "x", rank 1 shut down without it, rank 0 had not reached it yet: "x" can
  // never complete, and rank 0, reading the error, must not find itself among the cause.
  job.Submit(2, "x");
  std::vector<Turn> turns(3);
  turns[1].shutting_down = true;
  auto results = job.Round(turns);
  REQUIRE(results[2].ok());
  REQUIRE(results[2]->failed.size() == 1);
  const std::string& error = results[2]->failed[0].second;
  CHECK(absl::StrContains(error, "cannot complete: allreduce 'x': submitted by ranks [2 (h3)] "
                                 "but not by ranks [1 (h2)]; ranks [1 (h2)] have called Shutdown"));
  CHECK(absl::StrContains(error, "will submit nothing more; ranks [0 (h1)] had not reached it yet"));
}

TEST_CASE("a rank that is only late is waited for while another rank shuts down",
          "[negotiator][stall][shutdown]") {
  Negotiation job(3, PatientConfig());
  // Ranks 0 and 1 submitted "x" and rank 1 shut down; rank 2 has not submitted it yet.
  job.Submit(0, "x");
  job.Submit(1, "x");
  std::vector<Turn> turns(3);
  turns[1].shutting_down = true;
  for (int i = 0; i < 3; ++i) {
    auto results = job.Round(turns);
    for (int r = 0; r < 3; ++r) {
      REQUIRE(results[r].ok());
      CHECK(results[r]->failed.empty());
      CHECK(results[r]->ready.empty());
    }
  }
  job.Submit(2, "x");
  auto results = job.Round(turns);
  for (int r = 0; r < 3; ++r) {
    REQUIRE(results[r].ok());
    CHECK(ReadyNames(*results[r]) == std::vector<std::string>{"x"});
  }
}

TEST_CASE("a shut-down rank that has joined still stands in for allreduces",
          "[negotiator][stall][shutdown][join]") {
  Negotiation job(2, PatientConfig());
  job.SubmitEverywhere("p");
  REQUIRE(job.Round()[0].ok());
  job.Submit(0, "p");
  std::vector<Turn> turns(2);
  turns[1].joined = true;
  turns[1].shutting_down = true;
  auto results = job.Round(turns);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(results[r].ok());
    CHECK(results[r]->failed.empty());
    CHECK(ReadyNames(*results[r]) == std::vector<std::string>{"p"});
  }
}

TEST_CASE("a joined rank stands ready with zeros for every cached allreduce",
          "[negotiator][join]") {
  Negotiation job(3, FastConfig());
  job.SubmitEverywhere("p");
  REQUIRE(job.Round()[0].ok());
  job.Submit(0, "p");
  job.Submit(1, "p");
  std::vector<Turn> turns(3);
  turns[2].joined = true;
  auto results = job.Round(turns);
  for (int r = 0; r < 3; ++r) {
    REQUIRE(results[r].ok());
    REQUIRE(ReadyNames(*results[r]) == std::vector<std::string>{"p"});
    CHECK(results[r]->ready[0].op.has_value() == (r != 2));  // rank 2 only contributes zeros
  }
}

// The refusal every rank that submitted `name` gets while ranks 0 and 1 have joined.
std::string JoinRefusal(const std::string& name) {
  return "allgather '" + name +
         "' cannot run while ranks [0 (h1), 1 (h2)] have joined; only allreduce may run during a "
         "join";
}

TEST_CASE("an allgather joined ranks lack fails at once, whatever its name on each rank",
          "[negotiator][join]") {
  Negotiation job(4, PatientConfig());
  std::vector<Turn> turns(4);
  for (int r : {0, 1}) {
    job.SubmitJoin(r);
    turns[static_cast<size_t>(r)].joined = true;
  }
  // Automatic names, numbered per process, differ: no entry is ever submitted by both ranks.
  job.SubmitAllgather(2, "allgather.noname.7");
  job.SubmitAllgather(3, "allgather.noname.9");
  auto results = job.Round(turns);
  for (int r = 0; r < 4; ++r) {
    REQUIRE(results[r].ok());
    CHECK(results[r]->ready.empty());
    if (r < 2) {
      CHECK(results[r]->failed.empty());
      continue;
    }
    const std::string name = r == 2 ? "allgather.noname.7" : "allgather.noname.9";
    REQUIRE(results[r]->failed.size() == 1);
    CHECK(results[r]->failed[0].first.request.name == name);
    CHECK(results[r]->failed[0].second == JoinRefusal(name));
    CHECK(job.pending(r).empty());
  }
  // An allreduce still runs, the joined ranks standing in; then the Join completes everywhere.
  job.Submit(2, "p");
  job.Submit(3, "p");
  results = job.Round(turns);
  for (int r = 0; r < 4; ++r) {
    REQUIRE(results[r].ok());
    CHECK(ReadyNames(*results[r]) == std::vector<std::string>{"p"});
  }
  job.SubmitJoin(2);
  job.SubmitJoin(3);
  for (Turn& turn : turns) turn.joined = true;
  results = job.Round(turns);
  for (int r = 0; r < 4; ++r) {
    REQUIRE(results[r].ok());
    CHECK(results[r]->failed.empty());
    // (With every rank joined, each stands in for every cached allreduce: "p" runs with zeros.)
    const std::vector<std::string> names = ReadyNames(*results[r]);
    CHECK(std::count(names.begin(), names.end(), "__join") == 1);
  }
}

TEST_CASE("an allgather submitted before the others joined fails once they have",
          "[negotiator][join]") {
  Negotiation job(4, PatientConfig());
  job.SubmitAllgather(2, "g.2");
  job.SubmitAllgather(3, "g.3");
  auto waiting = job.Round();
  for (int r = 0; r < 4; ++r) {
    REQUIRE(waiting[r].ok());
    CHECK(waiting[r]->failed.empty());
  }
  std::vector<Turn> turns(4);
  for (int r : {0, 1}) {
    job.SubmitJoin(r);
    turns[static_cast<size_t>(r)].joined = true;
  }
  auto results = job.Round(turns);
  for (int r : {2, 3}) {
    REQUIRE(results[r].ok());
    REQUIRE(results[r]->failed.size() == 1);
    CHECK(results[r]->failed[0].second == JoinRefusal(r == 2 ? "g.2" : "g.3"));
  }
}

TEST_CASE("a cached allgather joined ranks lack fails within a few rounds",
          "[negotiator][join][cache]") {
  Negotiation job(4, PatientConfig());
  for (int r = 0; r < 4; ++r) job.SubmitAllgather(r, "c");
  auto first = job.Round();
  REQUIRE(first[0].ok());
  REQUIRE(ReadyNames(*first[0]) == std::vector<std::string>{"c"});
  std::vector<Turn> turns(4);
  for (int r : {0, 1}) {
    job.SubmitJoin(r);
    turns[static_cast<size_t>(r)].joined = true;
  }
  REQUIRE(job.Round(turns)[0].ok());  // rank 0 learns of the joins
  job.SubmitAllgather(2, "c");
  job.SubmitAllgather(3, "c");
  // The ranks announce "c" by its cache bit only: rank 0 sees it pending on some ranks, then
  // gathers who has it and refuses it. A few rounds, not the stall timeout (120 s).
  int rounds = 0;
  std::vector<absl::StatusOr<RoundResult>> results;
  do {
    results = job.Round(turns);
    REQUIRE(results[2].ok());
    ++rounds;
  } while (results[2]->failed.empty() && rounds < 5);
  CHECK(rounds <= 3);
  for (int r : {2, 3}) {
    REQUIRE(results[r].ok());
    REQUIRE(results[r]->failed.size() == 1);
    CHECK(results[r]->failed[0].second == JoinRefusal("c"));
    CHECK(job.pending(r).empty());
  }
  for (int r : {0, 1}) CHECK(results[r]->failed.empty());
  // Nothing is left to check: rank 0's next timer is the pending Join's stall warning.
  CHECK(job.negotiator(0).NextStallCheck() > absl::Now() + absl::Seconds(30));
}

TEST_CASE("shutdown, unfreeze wishes and planned-launch counts are agreed in the round",
          "[negotiator][plan]") {
  Negotiation job(3, FastConfig());
  std::vector<Turn> turns(3);
  for (Turn& turn : turns) {
    turn.shutting_down = true;
    turn.vote.launches = 7;
  }
  auto all = job.Round(turns);
  for (int r = 0; r < 3; ++r) {
    REQUIRE(all[r].ok());
    CHECK(all[r]->all_shutting_down);
    CHECK(all[r]->agreed_launches == std::optional<uint64_t>(7));
    CHECK(!all[r]->unfreeze_wanted);
    CHECK(all[r]->launch_counts.empty());
  }
  turns[1].shutting_down = false;
  turns[1].vote.launches = 6;
  turns[1].vote.wants_unfreeze = true;
  turns[0].vote.wants_report = true;
  auto mixed = job.Round(turns);
  for (int r = 0; r < 3; ++r) {
    REQUIRE(mixed[r].ok());
    CHECK(!mixed[r]->all_shutting_down);
    CHECK(!mixed[r]->agreed_launches.has_value());
    CHECK(mixed[r]->unfreeze_wanted);
    CHECK(mixed[r]->launch_counts == std::vector<uint64_t>{7, 6, 7});
  }
}

TEST_CASE("every rank changing a cached request alike evicts it and agrees the new one",
          "[negotiator]") {
  Negotiation job(2, FastConfig());
  job.SubmitEverywhere("v");
  REQUIRE(job.Round()[0].ok());
  const int32_t old_id = job.negotiator(0).CachedId("v");
  for (int r = 0; r < 2; ++r) job.Submit(r, "v", {8});
  bool agreed = false;
  for (int round = 0; round < 4 && !agreed; ++round) {
    auto results = job.Round();
    for (int r = 0; r < 2; ++r) {
      REQUIRE(results[r].ok());
      CHECK(results[r]->failed.empty());
    }
    agreed = !results[0]->ready.empty();
    if (agreed) {
      for (int r = 0; r < 2; ++r) {
        REQUIRE(results[r]->ready.size() == 1);
        CHECK(results[r]->ready[0].response->request.tensors[0].shape == std::vector<int64_t>{8});
      }
    }
  }
  CHECK(agreed);
  CHECK(job.negotiator(1).CachedId("v") != old_id);
  CHECK(job.negotiator(0).CachedId("v") == job.negotiator(1).CachedId("v"));
}

TEST_CASE("a rank that never comes to the round ends it with DeadlineExceeded naming the step",
          "[negotiator][timeout]") {
  Negotiation job(3, FastConfig());
  job.SubmitEverywhere("t");
  std::vector<Turn> turns(3);
  turns[1].takes_part = false;
  const absl::Time start = absl::Now();
  auto results = job.Round(turns);
  const absl::Duration took = absl::Now() - start;
  CHECK(took >= absl::Seconds(1));
  CHECK(took < absl::Seconds(5));
  for (int r : {0, 2}) {
    REQUIRE(!results[r].ok());
    CHECK(results[r].status().code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(absl::StrContains(results[r].status().message(),
                            "rank " + std::to_string(r) +
                                ": negotiation (AND-allreduce of the ready bits, "
                                "OVERLAP_COLLECTIVE_TIMEOUT_S) did not complete within 1 s"));
  }
}

TEST_CASE("a failed control call ends the round on every rank with the call and its cause",
          "[negotiator][errors]") {
  Negotiation job(3, FastConfig());
  job.world().FailCall(2, absl::UnavailableError("MPI_Ibcast of the bytes: connection reset"));
  job.SubmitEverywhere("f");
  auto results = job.Round();  // calls 0, 1, 2: AND, gather, broadcast
  for (int r = 0; r < 3; ++r) {
    REQUIRE(!results[r].ok());
    CHECK(results[r].status().code() == absl::StatusCode::kUnavailable);
    CHECK(results[r].status().message() ==
          "rank " + std::to_string(r) +
              ": negotiation (broadcast of the responses, OVERLAP_COLLECTIVE_TIMEOUT_S) failed: "
              "MPI_Ibcast of the bytes: connection reset");
  }
}

TEST_CASE("a lost peer reported by check_peers ends a waiting round before the timeout",
          "[negotiator][errors]") {
  Negotiation job(3, FastConfig(), [](int rank) {
    return absl::UnavailableError("rank " + std::to_string(rank) +
                                  ": lost the control connection to rank 2 (host h3)");
  });
  std::vector<Turn> turns(3);
  turns[2].takes_part = false;
  const absl::Time start = absl::Now();
  auto results = job.Round(turns);
  CHECK(absl::Now() - start < absl::Milliseconds(900));
  for (int r : {0, 1}) {
    REQUIRE(!results[r].ok());
    CHECK(results[r].status().message() ==
          "rank " + std::to_string(r) + ": lost the control connection to rank 2 (host h3)");
  }
}

TEST_CASE("a cache past one 64-bit word of ready bits keeps every rank's ids and rounds agreed",
          "[negotiator]") {
  Negotiation job(2, FastConfig());
  for (int i = 0; i < 70; ++i) job.SubmitEverywhere("n" + std::to_string(i));
  auto first = job.Round();
  for (int r = 0; r < 2; ++r) {
    REQUIRE(first[r].ok());
    CHECK(first[r]->ready.size() == 70);
  }
  for (int i = 0; i < 70; ++i) {
    const std::string name = "n" + std::to_string(i);
    CHECK(job.negotiator(0).CachedId(name) == job.negotiator(1).CachedId(name));
  }
  // Only the tensors in the second word, from the cache.
  for (int i = 64; i < 70; ++i) job.SubmitEverywhere("n" + std::to_string(i));
  auto second = job.Round();
  for (int r = 0; r < 2; ++r) {
    REQUIRE(second[r].ok());
    CHECK(ReadyNames(*second[r]).size() == 6);
  }
  const std::vector<fake::StartedControl> calls = job.world().started();
  CHECK(calls.back().kind == ControlKind::kAnd);
  CHECK(calls.back().size == 1 + 2 * 2 + 2);  // flags, 2 words and their complement, launches
}

}  // namespace
}  // namespace overlap
