#include "scheduler/cluster/contention.h"

#include <catch2/catch.hpp>
#include <random>

#include "scheduler/cluster/policies.h"

namespace overlap::sched::cluster {
namespace {

TEST_CASE("Slowdown is k (1 + eta (k - 1))") {
  ContentionModel m;
  m.eta = 0.25;
  CHECK(m.Slowdown(0) == 1.0);
  CHECK(m.Slowdown(1) == 1.0);
  CHECK(m.Slowdown(2) == Approx(2.5));
  CHECK(m.Slowdown(3) == Approx(4.5));
  m.eta = 0;
  CHECK(m.Slowdown(4) == Approx(4.0));
}

TEST_CASE("A bad eta is named") {
  ContentionModel m;
  m.eta = -0.1;
  absl::Status s = m.Validate();
  REQUIRE(!s.ok());
  CHECK(std::string(s.message()).find("eta") != std::string::npos);
}

TEST_CASE("LinkFinishTimes: two transfers sharing one link, by hand") {
  ContentionModel m;
  m.eta = 0.5;  // two-way: each at 1/3
  // A needs 3 s from 0, B needs 1 s from 1: together from 1 at 1/3 each; B ends at 4 with A
  // at 2 of 3 done; A alone then ends at 5.
  std::vector<double> f = LinkFinishTimes({{0, 3}, {1, 1}}, m);
  REQUIRE(f.size() == 2);
  CHECK(f[0] == Approx(5.0));
  CHECK(f[1] == Approx(4.0));
  // Alone: its solo time.
  CHECK(LinkFinishTimes({{2, 1.5}}, m)[0] == Approx(3.5));
  // Three from 0 with eta 0: processor sharing, 1/3 each until the 1 s one ends at 3.
  m.eta = 0;
  f = LinkFinishTimes({{0, 1}, {0, 2}, {0, 2}}, m);
  CHECK(f[0] == Approx(3.0));
  CHECK(f[1] == Approx(5.0));
  CHECK(f[2] == Approx(5.0));
}

// Brute force over AdaDUAL's two choices: start the new transfer now (sharing) or when the
// running one ends; the rule must pick the smaller sum of completion times.
TEST_CASE("AdaDualShares agrees with brute force over start/wait") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.01, 5.0);
  for (double eta : {0.0, 0.1, 0.3, 1.0}) {
    ContentionModel m;
    m.eta = eta;
    for (int trial = 0; trial < 500; ++trial) {
      const double remaining = u(rng), work = u(rng);
      const std::vector<double> share = LinkFinishTimes({{0, remaining}, {0, work}}, m);
      const std::vector<double> wait = LinkFinishTimes({{0, remaining}, {remaining, work}}, m);
      const double share_sum = share[0] + share[1], wait_sum = wait[0] + wait[1];
      if (std::abs(share_sum - wait_sum) < 1e-9) {
        continue;  // a tie either way is optimal
      }
      INFO("eta " << eta << " remaining " << remaining << " new " << work);
      CHECK(AdaDualShares(work, remaining, m) == (share_sum < wait_sum));
    }
  }
}

TEST_CASE("AdaDUAL shares only with a much longer running transfer") {
  ContentionModel m;
  m.eta = 0.5;  // c = 3, threshold 2c - 2 = 4
  CHECK(AdaDualShares(0.24, 1.0, m));
  CHECK(!AdaDualShares(0.25, 1.0, m));  // tie: wait
  CHECK(!AdaDualShares(2.0, 1.0, m));
}

TEST_CASE("MayStart per policy") {
  ContentionModel m;
  m.eta = 0.5;
  auto policy = [](const char* name) { return *ParseCommPolicy(name); };
  const std::vector<std::vector<double>> idle = {{}, {}};
  const std::vector<std::vector<double>> one_long = {{}, {10.0}};
  const std::vector<std::vector<double>> two = {{10.0, 10.0}, {}};
  for (const char* name : {"srsf1", "srsf2", "adadual", "ada-srsf"}) {
    CHECK(MayStart(policy(name), 1.0, idle, m));
    CHECK(!MayStart(policy(name), 1.0, two, m));
  }
  CHECK(!MayStart(policy("srsf1"), 1.0, one_long, m));
  CHECK(MayStart(policy("srsf2"), 5.0, one_long, m));
  CHECK(MayStart(policy("ada-srsf"), 2.0, one_long, m));   // 2 x 4 < 10
  CHECK(!MayStart(policy("ada-srsf"), 3.0, one_long, m));  // 3 x 4 > 10
  CHECK(MayStart(policy("adadual"), 2.0, one_long, m));
  CHECK(!ParseCommPolicy("srsf3").ok());
}

}  // namespace
}  // namespace overlap::sched::cluster
