#include "scheduler/cluster/contention.h"

#include <catch2/catch.hpp>
#include <cmath>
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

TEST_CASE("Slowdown with link utilization u < 1 is max(1, k u) (1 + eta (k - 1))") {
  ContentionModel m;
  m.eta = 0.25;
  m.link_utilization = 0.5;
  CHECK(m.Slowdown(1) == 1.0);
  CHECK(m.Slowdown(2) == Approx(1.25));       // two fit in the link: only eta's waste
  CHECK(m.Slowdown(3) == Approx(1.5 * 1.5));  // three need 1.5 links
  m.eta = 0;
  m.link_utilization = 0.3;
  CHECK(m.Slowdown(3) == 1.0);  // 0.9 of the link: no slowdown at all
  CHECK(m.Slowdown(4) == Approx(1.2));
}

TEST_CASE("u = 1 is the model without link utilization, bit for bit") {
  for (double eta : {0.0, 0.1, 0.2, 0.3, 0.5, 1.0, 2.7}) {
    ContentionModel m;
    m.eta = eta;
    REQUIRE(m.link_utilization == 1.0);  // the default
    for (int k = 0; k <= 8; ++k) {
      const double before = k <= 1 ? 1.0 : k * (1.0 + eta * (k - 1));
      INFO("eta " << eta << " k " << k);
      CHECK(m.Slowdown(k) == before);
    }
  }
}

TEST_CASE("A bad eta or link utilization is named") {
  ContentionModel m;
  m.eta = -0.1;
  absl::Status s = m.Validate();
  REQUIRE(!s.ok());
  CHECK(std::string(s.message()).find("eta") != std::string::npos);
  m.eta = 0.2;
  for (double u : {0.0, -0.5, 1.01, std::nan("")}) {
    m.link_utilization = u;
    s = m.Validate();
    REQUIRE(!s.ok());
    CHECK(std::string(s.message()).find("link_utilization") != std::string::npos);
  }
  m.link_utilization = 0.01;
  CHECK(m.Validate().ok());
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
// running one ends; the rule must pick the smaller sum of completion times. Over link
// utilizations on both sides of c = Slowdown(2) = 3/2, where the rule changes form (u = 0.75
// with eta = 0 is exactly on it).
TEST_CASE("AdaDualShares agrees with brute force over start/wait") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> draw(0.01, 5.0);
  int shared = 0, waited = 0;
  for (double u : {1.0, 0.9, 0.8, 0.75, 0.7, 0.6, 0.5, 0.3}) {
    for (double eta : {0.0, 0.1, 0.3, 1.0}) {
      ContentionModel m;
      m.eta = eta;
      m.link_utilization = u;
      for (int trial = 0; trial < 500; ++trial) {
        const double remaining = draw(rng), work = draw(rng);
        const std::vector<double> share = LinkFinishTimes({{0, remaining}, {0, work}}, m);
        const std::vector<double> wait = LinkFinishTimes({{0, remaining}, {remaining, work}}, m);
        const double share_sum = share[0] + share[1], wait_sum = wait[0] + wait[1];
        if (std::abs(share_sum - wait_sum) < 1e-9) {
          continue;  // a tie either way is optimal
        }
        INFO("u " << u << " eta " << eta << " remaining " << remaining << " new " << work);
        CHECK(AdaDualShares(work, remaining, m) == (share_sum < wait_sum));
        ++(share_sum < wait_sum ? shared : waited);
      }
    }
  }
  // Both answers occur often enough for the check to mean something.
  CHECK(shared > 2000);
  CHECK(waited > 2000);
}

TEST_CASE("AdaDUAL shares only with a much longer running transfer") {
  ContentionModel m;
  m.eta = 0.5;  // c = 3, threshold 2c - 2 = 4
  CHECK(AdaDualShares(0.24, 1.0, m));
  CHECK(!AdaDualShares(0.25, 1.0, m));  // tie: wait
  CHECK(!AdaDualShares(2.0, 1.0, m));
}

TEST_CASE("AdaDUAL with u < 1: a lower threshold, and any pair once c < 3/2") {
  ContentionModel m;
  m.eta = 0.5;
  m.link_utilization = 0.75;  // c = 1.5 x 1.5 = 2.25, threshold 2c - 2 = 2.5
  CHECK(AdaDualShares(0.49, 1.25, m));
  CHECK(!AdaDualShares(0.5, 1.25, m));  // tie: wait
  CHECK(!AdaDualShares(2.0, 1.0, m));
  m.eta = 0;
  m.link_utilization = 0.6;  // c = 1.2: sharing gains whichever ends first
  CHECK(AdaDualShares(0.5, 1.0, m));
  CHECK(AdaDualShares(4.0, 1.0, m));
  CHECK(!AdaDualShares(4.0, 0.0, m));  // nothing left to share with
  m.link_utilization = 0.75;           // c = 1.5 exactly: the u = 1 form, threshold 1
  CHECK(AdaDualShares(0.9, 1.0, m));
  CHECK(!AdaDualShares(1.0, 1.0, m));
  CHECK(!AdaDualShares(4.0, 1.0, m));
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
