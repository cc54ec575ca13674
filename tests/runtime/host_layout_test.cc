// Host layouts for the hierarchical allreduce (runtime/control/host_layout.h): which layouts allow it, the
// reason given when one does not, and the agreement on the setting.
#include "runtime/control/host_layout.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace overlap {
namespace {

TEST_CASE("uniform hosts give each rank its host's index, in order of the hosts' first ranks") {
  const HostLayout layout = LayoutOf({"b", "a", "b", "a"});
  CHECK(layout.hosts == std::vector<std::string>{"b", "a"});
  CHECK(layout.host_of_rank == std::vector<int>{0, 1, 0, 1});
  std::string why;
  CHECK(HierarchyHost(layout, 0, true, &why) == 0);
  CHECK(HierarchyHost(layout, 3, true, &why) == 1);
  CHECK(why.empty());
  CHECK(HierarchyHost(layout, 3, false, &why) == -1);
  CHECK(why.empty());
}

TEST_CASE("layouts a two-level allreduce cannot use stay flat, saying why") {
  std::string why;
  CHECK(HierarchyHost(LayoutOf({"a", "a", "a"}), 0, true, &why) == -1);
  CHECK(why == "all 3 ranks are on one host (a)");
  why.clear();
  CHECK(HierarchyHost(LayoutOf({"a", "b", "c"}), 1, true, &why) == -1);
  CHECK(why == "every host runs one rank (3 hosts)");
  why.clear();
  CHECK(HierarchyHost(LayoutOf({"a", "a", "b"}), 2, true, &why) == -1);
  CHECK(why == "hosts hold different numbers of ranks: a has 2 (ranks 0,1), b has 1 (rank 2)");
}

TEST_CASE("ranks agree on the setting, or Init fails naming the ranks that differ") {
  bool hierarchical = false;
  absl::StatusOr<HostLayout> layout = AgreeOnHierarchy(
      {HierarchyWord(1, "h 1"), HierarchyWord(1, "h 1"), HierarchyWord(1, "h2")}, &hierarchical);
  REQUIRE(layout.ok());
  CHECK(hierarchical);
  CHECK(layout->hosts == std::vector<std::string>{"h 1", "h2"});  // names may hold spaces

  layout = AgreeOnHierarchy({"1 a", "0 a", "1 b", "0 b"}, &hierarchical);
  REQUIRE_FALSE(layout.ok());
  CHECK(std::string(layout.status().message()) ==
        "OVERLAP_HIERARCHICAL_ALLREDUCE differs between ranks: rank 0 has 1, ranks 1,3 have 0; set "
        "it "
        "alike on every rank (overlaprun --hierarchical-allreduce does)");
  CHECK_FALSE(AgreeOnHierarchy({"x a"}, &hierarchical).ok());
}

}  // namespace
}  // namespace overlap
