#include "launcher/validate.h"

#include <catch2/catch.hpp>

#include "launcher/parse_args.h"

namespace overlap::launcher {
namespace {

std::string Check(std::vector<std::string> args) {
  auto p = ParseArgs(args);
  REQUIRE(p.ok());
  return std::string(Validate(p->options).message());
}

TEST_CASE("a complete job validates", "[validate]") {
  CHECK(Check({"-np", "4", "-H", "a:2,b:2", "prog"}).empty());
  // Without hosts every rank runs here, as many as asked.
  CHECK(Check({"-np", "64", "prog"}).empty());
  CHECK(Check({"-np", "5", "-H", "a:2,b:2", "--oversubscribe", "prog"}).empty());
}

TEST_CASE("missing -np or program is refused with the usage", "[validate]") {
  CHECK(Check({"prog"}) == "-np N is required: how many ranks to start");
  CHECK(Check({"-np", "2"}) ==
        "no program given; usage: overlaprun -np N [options] [--] program [args...]");
}

TEST_CASE("more ranks than slots needs --oversubscribe", "[validate]") {
  CHECK(Check({"-np", "5", "-H", "a:2,b:2", "prog"}) ==
        "-np 5 needs 5 slots but -H a:2,b:2 has 4; add hosts or slots, or pass --oversubscribe");
}

TEST_CASE("the stall timeout cannot come before the warning", "[validate]") {
  CHECK(Check({"-np", "2", "--stall-warning", "30", "--stall-timeout", "10", "prog"}) ==
        "--stall-timeout 10 is below --stall-warning 30; the warning must come first");
  CHECK(Check({"-np", "2", "--stall-warning", "10", "--stall-timeout", "10", "prog"}).empty());
}

TEST_CASE("the peer grace ends before the kill grace", "[validate]") {
  CHECK(Check({"-np", "2", "--kill-grace", "2", "prog"}) ==
        "--peer-grace 2 must be below --kill-grace 2");
  CHECK(Check({"-np", "2", "--kill-grace", "2", "--peer-grace", "0", "prog"}).empty());
  // Without the wrapper nothing lingers, so nothing to order.
  CHECK(Check({"-np", "2", "--kill-grace", "1", "--no-rank-wrapper", "prog"}).empty());
}

}  // namespace
TEST_CASE("elastic jobs: bounds, hosts and a program", "[validate][elastic]") {
  CHECK(Check({"--min-np", "2", "--host-discovery-script", "./h.sh", "prog"}).empty());
  CHECK(Check({"--min-np", "2", "-H", "a:1,b:1", "prog"}).empty());
  CHECK(Check({"--min-np", "4", "--max-np", "2", "--host-discovery-script", "h", "prog"}) ==
        "--min-np 4 is above --max-np 2");
  CHECK(Check({"-np", "8", "--min-np", "2", "--max-np", "4", "--host-discovery-script", "h",
               "prog"}) == "-np 8 must lie between --min-np 2 and --max-np 4");
  CHECK(Check({"--min-np", "2", "-H", "a:2", "--host-discovery-script", "h", "prog"}) ==
        "give an elastic job's hosts with --host-discovery-script or with -H/--hostfile, not "
        "both");
  CHECK(Check({"--min-np", "2", "prog"}).find("an elastic job needs --host-discovery-script") ==
        0);
  CHECK(Check({"--min-np", "3", "-H", "a:1,b:1", "prog"}) ==
        "--min-np 3 needs 3 slots but a:1,b:1 has 2");
  CHECK(Check({"--max-np", "2", "--host-discovery-script", "h", "prog"}) ==
        "an elastic job needs -np N or --min-np N: how many ranks to start with");
}

}  // namespace overlap::launcher
