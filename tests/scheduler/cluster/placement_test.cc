#include "scheduler/cluster/placement.h"

#include <catch2/catch.hpp>

namespace overlap::sched::cluster {
namespace {

std::vector<GpuLoad> Loads(const std::vector<double>& workload) {
  std::vector<GpuLoad> out;
  out.reserve(workload.size());
  for (double w : workload) {
    out.push_back({w > 0 ? 1 : 0, w});
  }
  return out;
}

TEST_CASE("Placement names parse and print") {
  CHECK(ParsePlacement("first-fit")->Name() == "first-fit");
  CHECK(ParsePlacement("lwf-4")->kappa == 4);
  CHECK(ParsePlacement("lwf-2")->Name() == "lwf-2");
  for (const char* bad : {"lwf-0", "lwf-", "lwf-x", "best-fit", ""}) {
    absl::StatusOr<PlacementPolicy> p = ParsePlacement(bad);
    REQUIRE(!p.ok());
    CHECK(std::string(p.status().message()).find("placement") != std::string::npos);
  }
}

TEST_CASE("First-fit takes the least crowded GPUs in index order") {
  PlacementPolicy ff;
  // 2 servers x 4 GPUs; GPUs 0, 1 and 5 hold a job each.
  std::vector<GpuLoad> loads(8);
  loads[0].jobs = loads[1].jobs = loads[5].jobs = 1;
  CHECK(Place(ff, 1, loads, 4) == std::vector<int>{2});
  CHECK(Place(ff, 4, loads, 4) == std::vector<int>({2, 3, 4, 6}));
  CHECK(Place(ff, 6, loads, 4) == std::vector<int>({2, 3, 4, 6, 7, 0}));
}

TEST_CASE("LWF-1 balances workload, ignoring servers") {
  PlacementPolicy lwf = *ParsePlacement("lwf-1");
  // Server 0: 5, 0, 9, 9; server 1: 1, 2, 9, 9.
  std::vector<GpuLoad> loads = Loads({5, 0, 9, 9, 1, 2, 9, 9});
  CHECK(Place(lwf, 3, loads, 4) == std::vector<int>({1, 4, 5}));
}

TEST_CASE("LWF-kappa consolidates groups of kappa on the least loaded server") {
  // Server 0: 5, 0, 9, 9 (best pair 0 + 5 = 5); server 1: 1, 2, 9, 9 (best pair 3).
  std::vector<GpuLoad> loads = Loads({5, 0, 9, 9, 1, 2, 9, 9});
  CHECK(Place(*ParsePlacement("lwf-2"), 2, loads, 4) == std::vector<int>({4, 5}));
  // Four from one server: server 0 totals 23, server 1 totals 21.
  CHECK(Place(*ParsePlacement("lwf-4"), 4, loads, 4) == std::vector<int>({4, 5, 6, 7}));
  // Eight with kappa 4: both servers whole, the lighter first.
  CHECK(Place(*ParsePlacement("lwf-4"), 8, loads, 4) == std::vector<int>({4, 5, 6, 7, 1, 0, 2, 3}));
  // Three with kappa 2: a pair from server 1, then the single least-loaded GPU left (GPU 1).
  CHECK(Place(*ParsePlacement("lwf-2"), 3, loads, 4) == std::vector<int>({4, 5, 1}));
}

TEST_CASE("LWF on an idle cluster packs servers in order") {
  std::vector<GpuLoad> idle(8);
  CHECK(Place(*ParsePlacement("lwf-4"), 4, idle, 4) == std::vector<int>({0, 1, 2, 3}));
  CHECK(Place(*ParsePlacement("lwf-4"), 6, idle, 4) == std::vector<int>({0, 1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace overlap::sched::cluster
