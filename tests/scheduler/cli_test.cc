#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "scheduler/cli/sim_cli.h"

namespace overlap::sched {
namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) {
    out.push_back(w);
  }
  return out;
}

const char* kRing = " --cost ring --latency-us 10 --bandwidth-gbit 10";

// Field `key` of the one JSON line overlap-sim prints for `args` (one planner, --json).
double FieldOf(const std::string& args, const std::string& key) {
  auto o = ParseCliArgs(Split(args));
  REQUIRE(o.ok());
  std::ostringstream out;
  REQUIRE(RunCli(*o, out).ok());
  const std::string line = out.str();
  const std::string quoted = "\"" + key + "\":";
  const size_t at = line.find(quoted);
  REQUIRE(at != std::string::npos);
  return std::stod(line.substr(at + quoted.size()));
}

double CommMs(const std::string& args) { return FieldOf(args, "comm_ms"); }

TEST_CASE("The CLI parses the issue's flags and expands worker series") {
  auto o = ParseCliArgs(Split(std::string("--model vgg16 --sweep-workers 4,8,...,2048 "
                                          "--planners all --staleness 1 --json") +
                              kRing));
  REQUIRE(o.ok());
  CHECK(o->workers == std::vector<int>{4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048});
  CHECK(o->planners.size() == 8);
  CHECK(o->planner_options.staleness == 1);
  CHECK(o->json);
  auto lin =
      ParseCliArgs(Split("--model vgg16 --workers 8 --planners wfbp,deft --cost linear "
                         "--alpha-us 5 --beta-us-per-mb 80"));
  REQUIRE(lin.ok());
  CHECK(lin->planners == std::vector<std::string>{"wfbp", "deft"});
}

TEST_CASE("Bad CLI arguments name the flag and the problem") {
  struct Case {
    std::string args, expect;
  };
  const std::string base = "--model vgg16 --workers 8 --planners wfbp";
  const Case cases[] = {
      {base + " --frobnicate 1" + kRing, "--frobnicate: unknown flag"},
      {base + kRing + " --staleness", "--staleness: missing value"},
      {base + kRing + " --staleness -1", "--staleness: expected an integer >= 0"},
      {"--model vgg16 --workers 0 --planners wfbp" + std::string(kRing), "--workers"},
      {"--model vgg16 --workers x --planners wfbp" + std::string(kRing), "got 'x'"},
      {"--model vgg16 --workers 8 --planners magic" + std::string(kRing),
       "unknown planner 'magic'"},
      {base, "--cost: required"},
      {base + " --cost ring --latency-us 10", "needs --latency-us and --bandwidth-gbit"},
      {base + " --cost linear --alpha-us 1", "needs --alpha-us and --beta-us-per-mb"},
      {base + " --cost ring --latency-us 1 --bandwidth-gbit 0", "must be > 0"},
      {base + " --cost mesh", "unknown cost model 'mesh'"},
      {"--workers 8 --planners wfbp" + std::string(kRing), "give exactly one"},
      {"--model a --profile b --workers 8 --planners wfbp" + std::string(kRing), "exactly one"},
      {"--model vgg16 --planners wfbp" + std::string(kRing), "--workers: required"},
      {"--model vgg16 --sweep-workers 4,...,64 --planners wfbp" + std::string(kRing), "'...'"},
      {base + " --cost linear --alpha-us 1 --beta-us-per-mb 1 --latency-us 3", "not"},
      {base + kRing + " --channels 0", "--channels: expected an integer >= 1"},
      {base + " --cost hierarchical --latency-us 5 --bandwidth-gbit 10",
       "--ranks-per-host: required with --cost hierarchical"},
      {base + " --cost tree --latency-us 5 --bandwidth-gbit 10 --ranks-per-host 2",
       "--ranks-per-host: only with --cost hierarchical or ring"},
      {base + kRing + " --ranks-per-host 2 --slow-link 1:0.5",
       "--slow-link: with --cost ring, only at one rank per host"},
      {base + kRing + " --ranks-per-host 2 --two-stage maybe", "expected auto, on or off"},
      {base + " --cost hierarchical --latency-us 5 --bandwidth-gbit 10 --ranks-per-host 3",
       "3 ranks per host do not divide 8 workers"},
      {base + " --cost hierarchical --latency-us 5 --bandwidth-gbit 10 --ranks-per-host 2 "
              "--intra-bandwidth-gbit 0",
       "--intra-bandwidth-gbit: must be > 0"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    auto o = ParseCliArgs(Split(c.args));
    REQUIRE_FALSE(o.ok());
    CHECK_THAT(std::string(o.status().message()), Catch::Contains(c.expect));
  }
}

TEST_CASE("RunCli prints one JSON line per planner and worker count") {
  auto o = ParseCliArgs(Split(std::string("--model resnet50 --sweep-workers 4,16 --planners "
                                          "wfbp,deft --staleness 1 --json") +
                              kRing));
  REQUIRE(o.ok());
  std::ostringstream out;
  REQUIRE(RunCli(*o, out).ok());
  const std::vector<std::string> lines = [&] {
    std::vector<std::string> v;
    std::istringstream in(out.str());
    for (std::string l; std::getline(in, l);) {
      v.push_back(l);
    }
    return v;
  }();
  REQUIRE(lines.size() == 4);
  // Every field, in the order the issue documents.
  size_t at = 0;
  for (const char* key : {"{\"model\":\"resnet50\"", "\"workers\":4", "\"planner\":\"wfbp\"",
                          "\"iter_ms\":", "\"compute_ms\":", "\"comm_ms\":", "\"exposed_comm_ms\":",
                          "\"ideal_ms\":", "\"efficiency\":", "\"buckets\":", "\"max_delay\":",
                          "\"budget_used\":", "\"sync_bound_ms\":"}) {
    INFO(key);
    const size_t pos = lines[0].find(key);
    REQUIRE(pos != std::string::npos);
    CHECK(pos >= at);
    at = pos;
  }
  CHECK_THAT(lines[3], Catch::Contains("\"workers\":16"));
  CHECK_THAT(lines[3], Catch::Contains("\"planner\":\"deft\""));
}

TEST_CASE("--looks-ahead charges a delayed plan its look-ahead steps") {
  // A forced delay needs a plan that delays: deft with staleness 1 on a link slow enough that
  // delaying pays. Its predicted compute grows by look-ahead's steps (the update per step, or
  // more with periods), never shrinks.
  auto compute = [](const std::string& extra) {
    const std::string args =
        "--model vgg16 --workers 16 --planners deft --staleness 1 --budget 1 --json --cost ring "
        "--latency-us 10 --bandwidth-gbit 1" + extra;
    return std::pair<double, int>{FieldOf(args, "compute_ms"),
                                  static_cast<int>(FieldOf(args, "max_delay"))};
  };
  const auto [plain, plain_delay] = compute("");
  const auto [ahead, ahead_delay] = compute(" --looks-ahead on");
  REQUIRE(plain_delay == 1);  // the plan delays, so look-ahead has something to cost
  CHECK(ahead >= plain);
  if (ahead_delay == 1) CHECK(ahead > plain);
}

TEST_CASE("--cost hierarchical plans with the two-level allreduce's cost") {
  auto run = [](const std::string& cost) {
    return CommMs("--model bert-base --workers 16 --planners fusion --json " + cost);
  };
  const double flat = run("--cost ring --latency-us 5 --bandwidth-gbit 10");
  const double two_level =
      run("--cost hierarchical --latency-us 5 --bandwidth-gbit 10 --ranks-per-host 4");
  // 4 hosts of 4: 2(H-1)/H = 1.5 buffers through each NIC against the ring's 2(N-1)/N = 1.875.
  CHECK(two_level < flat);
  CHECK(two_level > 0.7 * flat);
}

TEST_CASE("--cost ring --ranks-per-host offers two-stage buckets where they pay") {
  auto run = [](const std::string& extra) {
    auto o = ParseCliArgs(Split(
        "--model bert-base --workers 8 --planners mgwfbp --json --cost ring --latency-us 5 "
        "--bandwidth-gbit 10 --ranks-per-host 2 --intra-bandwidth-gbit 400 " +
        extra));
    REQUIRE(o.ok());
    std::ostringstream out;
    REQUIRE(RunCli(*o, out).ok());
    const std::string line = out.str();
    auto field = [&](const std::string& key) {
      const size_t at = line.find("\"" + key + "\":");
      REQUIRE(at != std::string::npos);
      return std::stod(line.substr(at + key.size() + 3));
    };
    return std::pair{field("iter_ms"), static_cast<int>(field("two_stage_buckets"))};
  };
  const auto [flat_ms, flat_two] = run("--two-stage off");
  const auto [auto_ms, auto_two] = run("");
  const auto [on_ms, on_two] = run("--two-stage on");
  CHECK(flat_two == 0);
  // 4 hosts of 2 at 10 Gbit/s, 400 Gbit/s within a host: the two-stage form sends 1.5 gradients
  // through each host link against the flat ring's 1.75, so bert-base's large buckets take it,
  // and the step is no slower than the flat ring's.
  CHECK(auto_two > 0);
  CHECK(auto_ms <= flat_ms);
  CHECK(auto_ms < 0.99 * flat_ms);
  CHECK(on_two >= auto_two);
  CHECK(auto_ms <= on_ms + 1e-9);
}

TEST_CASE("--channels gives deft more links and splits the ideal's fused collective") {
  const std::string args =
      std::string("--model bert-base --workers 16 --planners deft --staleness 1 --json") + kRing;
  std::ostringstream one, two;
  REQUIRE(RunCli(*ParseCliArgs(Split(args)), one).ok());
  REQUIRE(RunCli(*ParseCliArgs(Split(args + " --channels 2")), two).ok());
  auto field = [](const std::string& line, const std::string& key) {
    const size_t at = line.find("\"" + key + "\":") + key.size() + 3;
    return std::stod(line.substr(at));
  };
  CHECK(field(two.str(), "iter_ms") < field(one.str(), "iter_ms"));
  CHECK(field(two.str(), "ideal_ms") < field(one.str(), "ideal_ms"));
}

TEST_CASE("RunCli reports malformed and missing profile files") {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
      "/bad_profile.json";
  std::ofstream(path) << "{\"model\": \"x\", \"update_ms\": 1, \"layers\": [}";
  auto o = ParseCliArgs(Split("--profile " + path + " --workers 8 --planners wfbp" + kRing));
  REQUIRE(o.ok());
  std::ostringstream out;
  absl::Status s = RunCli(*o, out);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("bad_profile.json: not valid JSON"));
  auto missing = ParseCliArgs(
      Split("--profile /no/such.json --workers 8 --planners wfbp" + std::string(kRing)));
  CHECK_FALSE(RunCli(*missing, out).ok());
  auto model =
      ParseCliArgs(Split("--model resnet9000 --workers 8 --planners wfbp" + std::string(kRing)));
  CHECK_THAT(std::string(RunCli(*model, out).message()), Catch::Contains("valid models"));
}

TEST_CASE("--timeline writes a Chrome trace") {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/trace.json";
  auto o = ParseCliArgs(
      Split("--model resnet50 --workers 8 --planners dear --timeline " + path + kRing));
  REQUIRE(o.ok());
  std::ostringstream out;
  REQUIRE(RunCli(*o, out).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains("reduce_scatter"));
  CHECK_THAT(text.str(), Catch::Contains("allgather"));
}

TEST_CASE("--plan-json writes one plan per planner with suffixed names") {
  const std::string dir =
      std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR") : "/tmp";
  auto o = ParseCliArgs(Split("--model resnet50 --workers 8 --planners wfbp,dear --plan-json " +
                              dir + "/plan.json" + kRing));
  REQUIRE(o.ok());
  std::ostringstream out;
  REQUIRE(RunCli(*o, out).ok());
  for (const char* planner : {"wfbp", "dear"}) {
    std::ifstream in(dir + "/plan-" + planner + "-8.json");
    std::stringstream text;
    text << in.rdbuf();
    CHECK_THAT(text.str(), Catch::Contains(std::string("\"planner\": \"") + planner + "\""));
    CHECK_THAT(text.str(), Catch::Contains("\"slices\""));
  }
}

TEST_CASE("--slow-link slows one host's link; allreduces cost what the runtime would run") {
  const std::string dir =
      std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string path = dir + "/one_tensor.json";
  std::ofstream(path) << R"({"model": "one", "update_ms": 0, "layers": [{"name": "l",
      "forward_ms": 0, "backward_ms": 0, "tensors": [{"name": "w", "bytes": 67108864}]}]})";
  const std::string base = "--profile " + path +
                           " --workers 4 --planners wfbp --json --cost ring --latency-us 50 "
                           "--bandwidth-gbit 1";
  auto comm_ms = [&](const std::string& extra) { return CommMs(base + extra); };
  const double m = 67108864, b = 1e9 / 8, steps = 6 * 50e-3;  // bytes, bytes/s, ms
  const double uniform = comm_ms("");
  CHECK(uniform == Approx(steps + 1e3 * 1.5 * m / b));
  // Host 2 at half rate: no shard, its m bytes each way (2m/B); the ring 3m/B.
  CHECK(comm_ms(" --slow-link 2:0.5") == Approx(steps + 1e3 * 2 * m / b));
  CHECK(comm_ms(" --slow-link 2:0.5 --adaptive-allreduce off") == Approx(steps + 1e3 * 3 * m / b));
  CHECK(comm_ms(" --slow-link 2:0.25") == Approx(steps + 1e3 * 4 * m / b));
  // Hosts 0 and 2 at half rate: the other two hold the shards, and every host moves 2m/B.
  CHECK(comm_ms(" --slow-link 0:0.5 --slow-link 2:0.5") == Approx(steps + 1e3 * 2 * m / b));
  auto o = ParseCliArgs(Split(base + " --slow-link 3:0.5 --slow-link 0:0.25"));
  REQUIRE(o.ok());
  CHECK(o->slow_links == std::map<int, double>{{0, 0.25}, {3, 0.5}});
  CHECK(o->adaptive_allreduce);
  // Hierarchical, 2 hosts of 4: too few hosts to weight, so the cross-host ring runs at half
  // rate, and it carries most of the communication.
  const std::string two_level =
      "--model bert-base --workers 8 --planners fusion --json --cost hierarchical "
      "--latency-us 5 --bandwidth-gbit 10 --ranks-per-host 4";
  std::ostringstream even, slow;
  REQUIRE(RunCli(*ParseCliArgs(Split(two_level)), even).ok());
  REQUIRE(RunCli(*ParseCliArgs(Split(two_level + " --slow-link 1:0.5")), slow).ok());
  auto field = [](const std::string& line, const std::string& key) {
    return std::stod(line.substr(line.find("\"" + key + "\":") + key.size() + 3));
  };
  CHECK(field(slow.str(), "comm_ms") > 1.5 * field(even.str(), "comm_ms"));
}

TEST_CASE("Bad --slow-link and --adaptive-allreduce values name the flag and the value") {
  struct Case {
    std::string args, expect;
  };
  const std::string base = "--model vgg16 --workers 4 --planners wfbp" + std::string(kRing);
  const std::string form = "--slow-link: expected HOST:FRACTION";
  const Case cases[] = {
      {base + " --slow-link 2", form + " (a host from 0, a fraction of the bandwidth in (0, 1]), "
                                       "got '2'"},
      {base + " --slow-link x:0.5", form},
      {base + " --slow-link -1:0.5", "got '-1:0.5'"},
      {base + " --slow-link 2:0", "got '2:0'"},
      {base + " --slow-link 2:1.5", "got '2:1.5'"},
      {base + " --slow-link 2:nan", "got '2:nan'"},
      {base + " --slow-link 2:0.5:1", "got '2:0.5:1'"},
      {base + " --slow-link", "--slow-link: missing value"},
      {base + " --slow-link 2:0.5 --slow-link 2:0.25", "--slow-link: host 2 given twice"},
      {base + " --slow-link 4:0.5", "--slow-link: host 4 is not among the 4 hosts of 4 workers"},
      {"--model vgg16 --sweep-workers 8,4 --planners wfbp --slow-link 5:0.5" + std::string(kRing),
       "host 5 is not among the 4 hosts of 4 workers"},
      {"--model vgg16 --workers 8 --planners wfbp --cost hierarchical --latency-us 5 "
       "--bandwidth-gbit 10 --ranks-per-host 4 --slow-link 2:0.5",
       "host 2 is not among the 2 hosts of 8 workers"},
      {"--model vgg16 --workers 4 --planners wfbp --cost tree --latency-us 5 --bandwidth-gbit 10 "
       "--slow-link 2:0.5",
       "--slow-link: only with --cost ring or hierarchical, not tree"},
      {"--model vgg16 --workers 4 --planners wfbp --cost linear --alpha-us 5 --beta-us-per-mb 8 "
       "--slow-link 2:0.5",
       "--slow-link: only with --cost ring or hierarchical, not linear"},
      {base + " --adaptive-allreduce on", "--adaptive-allreduce: expected auto or off, got 'on'"},
      {base + " --looks-ahead auto", "--looks-ahead: expected on or off, got 'auto'"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    auto o = ParseCliArgs(Split(c.args));
    REQUIRE_FALSE(o.ok());
    CHECK_THAT(std::string(o.status().message()), Catch::Contains(c.expect));
  }
}

}  // namespace
}  // namespace overlap::sched
