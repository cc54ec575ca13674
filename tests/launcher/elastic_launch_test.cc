#include "launcher/elastic_launch.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "launcher/parse_args.h"

namespace overlap::launcher {
namespace {

std::vector<std::string> Command(std::vector<std::string> args, LaunchContext context = {}) {
  auto p = ParseArgs(args);
  REQUIRE(p.ok());
  context.self_path = "/opt/overlaprun";
  return ElasticDriverCommand(p->options, context);
}

TEST_CASE("the elastic driver gets the settings, the generation's arguments and the program",
          "[elastic]") {
  CHECK(Command({"--min-np", "2", "--max-np", "4", "--host-discovery-script", "./h.sh",
                 "--blacklist-cooldown-range", "5", "60", "-x", "A=1", "--dry-run", "python",
                 "t.py"}) ==
        std::vector<std::string>{
            "python3", "-m", "overlap.elastic_driver", "--overlaprun", "/opt/overlaprun",
            "--min-np", "2", "--max-np", "4", "--discovery-script", "./h.sh",
            "--slots-per-host", "1", "--reset-limit", "-1", "--elastic-timeout", "600",
            "--cooldown", "5", "60", "--dry-run", "--generation-args", "2", "-x", "A=1", "--",
            "python", "t.py"});
}

TEST_CASE("fixed hosts travel as a host list, and OVERLAP_ELASTIC_PYTHON picks the interpreter",
          "[elastic]") {
  LaunchContext context;
  context.environment = {{"OVERLAP_ELASTIC_PYTHON", "/venv/bin/python"}};
  const std::vector<std::string> argv =
      Command({"-np", "2", "--reset-limit", "0", "-H", "a:2", "p"}, context);
  CHECK(argv[0] == "/venv/bin/python");
}

TEST_CASE("-H hosts reach the driver", "[elastic]") {
  const std::vector<std::string> argv = Command({"--min-np", "2", "-H", "a:2,b", "p"});
  auto at = std::find(argv.begin(), argv.end(), "--hosts");
  REQUIRE(at != argv.end());
  CHECK(*(at + 1) == "a:2,b:1");
}

}  // namespace
}  // namespace overlap::launcher
