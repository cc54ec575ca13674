#include "launcher/hosts.h"

#include <catch2/catch.hpp>

namespace overlap::launcher {
namespace {

TEST_CASE("-H lists give hosts in order with slots defaulting to 1", "[hosts]") {
  auto hosts = ParseHostList("node1:4,node2,10.0.0.3:2");
  REQUIRE(hosts.ok());
  REQUIRE(hosts->size() == 3);
  CHECK((*hosts)[0].host == "node1");
  CHECK((*hosts)[0].slots == 4);
  CHECK((*hosts)[1].host == "node2");
  CHECK((*hosts)[1].slots == 1);
  CHECK((*hosts)[2].host == "10.0.0.3");
  CHECK(TotalSlots(*hosts) == 7);
  CHECK(FormatHostList(*hosts) == "node1:4,node2:1,10.0.0.3:2");
}

TEST_CASE("ranks map to hosts slot by slot, as mpirun --map-by slot places them", "[hosts]") {
  auto hosts = ParseHostList("a:2,b:1,c:2");
  REQUIRE(hosts.ok());
  CHECK(HostOfRank(*hosts, 0) == "a");
  CHECK(HostOfRank(*hosts, 1) == "a");
  CHECK(HostOfRank(*hosts, 2) == "b");
  CHECK(HostOfRank(*hosts, 4) == "c");
  CHECK(HostOfRank(*hosts, 5).empty());
}

TEST_CASE("-H rejects bad slots, empty hosts and duplicates with the entry named", "[hosts]") {
  auto zero = ParseHostList("a:0");
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.status().message() == "-H 'a:0': slot count '0' is not a positive integer");
  auto word = ParseHostList("a:x");
  CHECK(word.status().message() == "-H 'a:x': slot count 'x' is not a positive integer");
  auto empty = ParseHostList("a,,b");
  CHECK(empty.status().message() == "-H 'a,,b': '' has no host name");
  auto twice = ParseHostList("a:1,a:2");
  CHECK(twice.status().message() ==
        "-H: host 'a' is listed twice; give it once with all its slots");
}

TEST_CASE("hostfiles accept Open MPI and host:N lines, comments and blank lines", "[hosts]") {
  auto hosts = ParseHostfile(
      "# cluster\n"
      "node1 slots=2\n"
      "\n"
      "node2:3   # trailing comment\n"
      "node3 slots=4 max_slots=8\n"
      "node4\n",
      "hosts.txt");
  REQUIRE(hosts.ok());
  CHECK(FormatHostList(*hosts) == "node1:2,node2:3,node3:4,node4:1");
}

TEST_CASE("hostfile errors name the file, the line and the text", "[hosts]") {
  CHECK(ParseHostfile("a slots=2\nb slots=two\n", "h.txt").status().message() ==
        "hostfile h.txt line 2: slot count 'two' is not a positive integer");
  CHECK(ParseHostfile("a\nb cpus=3\n", "h.txt").status().message() ==
        "hostfile h.txt line 2: unknown 'cpus=3' (expected 'host', 'host slots=N' or 'host:N')");
  CHECK(ParseHostfile("# nothing\n\n", "h.txt").status().message() ==
        "hostfile h.txt lists no hosts");
  CHECK(ParseHostfile("a\na\n", "h.txt").status().message() ==
        "hostfile h.txt: host 'a' is listed twice; give it once with all its slots");
  auto missing = ReadHostfile("/nonexistent/hosts");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(missing.status().message() == "hostfile /nonexistent/hosts cannot be read");
}

TEST_CASE("host names mpirun's -H would misread are refused", "[hosts]") {
  // Found by tests/fuzz/hostfile_fuzz: "a,b" in a hostfile became two hosts in mpirun's -H list.
  CHECK(ParseHostfile("a,b slots=2\n", "h.txt").status().message() ==
        "hostfile h.txt line 1: host name 'a,b' may only have letters, digits, '.', '-' and '_'");
  CHECK(ParseHostList("a b:2").status().message() ==
        "-H 'a b:2': host name 'a b' may only have letters, digits, '.', '-' and '_'");
  CHECK(ParseHostList("node-1.example_2:3").ok());
}

TEST_CASE("total slots do not overflow", "[hosts]") {
  // Found by tests/fuzz/hostfile_fuzz: two hosts of 2^31-1 slots each overflowed int.
  auto hosts = ParseHostList("a:2147483647,b:2147483647");
  REQUIRE(hosts.ok());
  CHECK(TotalSlots(*hosts) == 2147483647);
}

}  // namespace
}  // namespace overlap::launcher
