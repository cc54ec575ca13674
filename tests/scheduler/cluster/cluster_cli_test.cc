#include "scheduler/cluster/cluster_cli.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace overlap::sched::cluster {
namespace {

std::string ErrorOf(const std::vector<std::string>& args) {
  absl::StatusOr<ClusterCliOptions> o = ParseClusterCliArgs(args);
  if (o.ok()) {
    return "";
  }
  const absl::string_view message = o.status().message();
  return {message.begin(), message.end()};
}

TEST_CASE("The paper preset parses with every policy pair by default") {
  absl::StatusOr<ClusterCliOptions> o =
      ParseClusterCliArgs({"--preset", "paper", "--jobs", "160", "--seed", "3", "--json"});
  REQUIRE(o.ok());
  CHECK(o->generator.jobs == 160);
  CHECK(o->generator.seed == 3);
  CHECK(o->json);
  CHECK(o->placements.size() == 4);
  CHECK(o->communications.size() == 4);
  CHECK(o->spec.gpus() == 64);
  CHECK(o->spec.nic_gbit == 10);
  CHECK(o->spec.contention.link_utilization == 1.0);
  o = ParseClusterCliArgs({"--preset", "paper", "--link-utilization", "0.6"});
  REQUIRE(o.ok());
  CHECK(o->spec.contention.link_utilization == 0.6);
}

TEST_CASE("Bad flags are named") {
  CHECK(ErrorOf({"--jobs", "10"}).find("--preset/--trace") != std::string::npos);
  CHECK(ErrorOf({"--preset", "paper", "--trace", "t.json"}).find("exactly one") !=
        std::string::npos);
  CHECK(ErrorOf({"--preset", "cloud"}).find("unknown preset") != std::string::npos);
  CHECK(ErrorOf({"--preset", "paper", "--jobs", "0"}).find("--jobs") != std::string::npos);
  CHECK(ErrorOf({"--preset", "paper", "--jobs", "x"}).find("--jobs") != std::string::npos);
  CHECK(ErrorOf({"--preset", "paper", "--eta", "-1"}).find("--eta") != std::string::npos);
  for (const char* u : {"0", "-0.5", "1.5", "nan", "x"}) {
    INFO(u);
    CHECK(ErrorOf({"--preset", "paper", "--link-utilization", u})
              .find("--link-utilization: expected a number in (0, 1]") != std::string::npos);
  }
  CHECK(ErrorOf({"--preset", "paper", "--placement", "lwf-0"}).find("--placement") !=
        std::string::npos);
  CHECK(ErrorOf({"--preset", "paper", "--communication", "srsf3"}).find("--communication") !=
        std::string::npos);
  CHECK(ErrorOf({"--preset", "paper", "--planner", "magic"}).find("--planner") !=
        std::string::npos);
  CHECK(ErrorOf({"--preset", "paper", "--bogus", "1"}).find("unknown flag") != std::string::npos);
  CHECK(ErrorOf({"--preset", "paper", "--seed"}).find("missing value") != std::string::npos);
  CHECK(ErrorOf({"--trace", "t.json", "--jobs", "3"}).find("--jobs") != std::string::npos);
}

TEST_CASE("A small preset prints one JSON line per policy pair with the listed keys") {
  absl::StatusOr<ClusterCliOptions> o = ParseClusterCliArgs(
      {"--preset", "paper", "--jobs", "12", "--seed", "2", "--max-iterations", "150", "--json",
       "--placement", "first-fit,lwf-4", "--communication", "all", "--link-utilization", "0.8"});
  REQUIRE(o.ok());
  std::ostringstream out;
  REQUIRE(RunClusterCli(*o, out).ok());
  std::istringstream lines(out.str());
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* key : {"placement", "communication", "avg_jct_s", "median_jct_s", "p95_jct_s",
                            "makespan_s", "gpu_util", "eta", "link_utilization"}) {
      INFO(key);
      CHECK(j.contains(key));
    }
    CHECK(j["avg_jct_s"].get<double>() > 0);
    CHECK(j["link_utilization"].get<double>() == 0.8);
    CHECK(j["gpu_util"].get<double>() > 0);
    CHECK(j["gpu_util"].get<double>() <= 1);
    CHECK(j["p95_jct_s"].get<double>() >= j["median_jct_s"].get<double>());
    ++count;
  }
  CHECK(count == 8);
}

TEST_CASE("A bad trace file fails with the job and field named") {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
      "/bad_trace.json";
  std::ofstream(path) << R"({"jobs": [{"id": "big", "arrival_s": 0, "model": "vgg16",
                              "workers": 65, "iterations": 10}]})";
  absl::StatusOr<ClusterCliOptions> o = ParseClusterCliArgs({"--trace", path});
  REQUIRE(o.ok());
  std::ostringstream out;
  absl::Status s = RunClusterCli(*o, out);
  REQUIRE(!s.ok());
  const std::string message(s.message());
  CHECK(message.find("id 'big'") != std::string::npos);
  CHECK(message.find("workers") != std::string::npos);
  CHECK(message.find("65 GPUs requested but the cluster has 64") != std::string::npos);
}

}  // namespace
}  // namespace overlap::sched::cluster
