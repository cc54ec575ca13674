#include "launcher/parse_args.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

namespace overlap::launcher {
namespace {

absl::StatusOr<ParsedCommand> Parse(std::vector<std::string> args) { return ParseArgs(args); }

TEST_CASE("placement, flags and the program are parsed", "[parse]") {
  auto p =
      Parse({"-np", "4", "-H", "a:2,b:2", "--oversubscribe", "--dry-run", "--tcp-only",
             "--network-interface=eth1", "--rsh-agent", "/bin/rsh", "./train", "--epochs", "3"});
  REQUIRE(p.ok());
  const LaunchOptions& o = p->options;
  CHECK(p->mode == ParsedCommand::Mode::kLaunch);
  CHECK(o.num_ranks == 4);
  CHECK(o.hosts.size() == 2);
  CHECK(o.hosts_source == "-H");
  CHECK(o.oversubscribe);
  CHECK(o.dry_run);
  CHECK(o.tcp_only);
  CHECK(o.network_interface == "eth1");
  CHECK(o.rsh_agent == "/bin/rsh");
  // Options after the program belong to the program.
  CHECK(o.program == std::vector<std::string>{"./train", "--epochs", "3"});
}

TEST_CASE("-- ends the options even before a program that starts with a dash", "[parse]") {
  auto p = Parse({"-np", "1", "--", "-weird", "-np"});
  REQUIRE(p.ok());
  CHECK(p->options.program == std::vector<std::string>{"-weird", "-np"});
}

TEST_CASE("runtime options become OVERLAP_* values in the runtime's units", "[parse]") {
  auto p = Parse({"-np",
                  "2",
                  "--fusion-threshold-mb",
                  "32",
                  "--timeline",
                  "/tmp/t.json",
                  "--log-level",
                  "debug",
                  "--stall-warning",
                  "5",
                  "--stall-timeout=20",
                  "--collective-timeout",
                  "30",
                  "--num-channels",
                  "4",
                  "--start-timeout",
                  "45",
                  "--planner",
                  "deft",
                  "--compression",
                  "topk:ratio=0.01",
                  "--cycle-time-ms",
                  "2.5",
                  "--plan-after-steps",
                  "5",
                  "prog"});
  REQUIRE(p.ok());
  const auto& env = p->options.runtime_env;
  CHECK(env.at("OVERLAP_FUSION_THRESHOLD") == "33554432");
  CHECK(env.at("OVERLAP_TIMELINE") == "/tmp/t.json");
  CHECK(env.at("OVERLAP_PLAN_AFTER_STEPS") == "5");
  CHECK(env.at("OVERLAP_LOG_LEVEL") == "debug");
  CHECK(env.at("OVERLAP_STALL_WARNING_S") == "5");
  CHECK(env.at("OVERLAP_STALL_TIMEOUT_S") == "20");
  CHECK(env.at("OVERLAP_COLLECTIVE_TIMEOUT_S") == "30");
  CHECK(env.at("OVERLAP_NUM_CHANNELS") == "4");
  CHECK(env.at("OVERLAP_START_TIMEOUT_S") == "45");
  CHECK(env.at("OVERLAP_PLANNER") == "deft");
  CHECK(env.at("OVERLAP_COMPRESSION") == "topk:ratio=0.01");
  CHECK(env.at("OVERLAP_CYCLE_TIME_MS") == "2.5");
  CHECK(p->options.start_timeout_s == 45.0);
  CHECK(env.size() == 12);
}

TEST_CASE("planner options become OVERLAP_* values in the runtime's units", "[parse]") {
  auto p = Parse({"-np", "2", "--planner", "bytescheduler", "--profile-steps", "7", "--staleness",
                  "2", "--max-period", "4", "--budget", "1.5", "--partition-mb", "4",
                  "--credit-mb=0.25", "--replan-drift", "0.5", "prog"});
  REQUIRE(p.ok());
  const auto& env = p->options.runtime_env;
  CHECK(env.at("OVERLAP_PLANNER") == "bytescheduler");
  CHECK(env.at("OVERLAP_PROFILE_STEPS") == "7");
  CHECK(env.at("OVERLAP_STALENESS") == "2");
  CHECK(env.at("OVERLAP_MAX_PERIOD") == "4");
  CHECK(env.at("OVERLAP_BUDGET") == "1.5");
  CHECK(env.at("OVERLAP_PARTITION_BYTES") == "4194304");
  CHECK(env.at("OVERLAP_CREDIT_BYTES") == "262144");
  CHECK(env.at("OVERLAP_REPLAN_DRIFT") == "0.5");
  CHECK(env.size() == 8);
}

TEST_CASE("planner options accept the ends of their ranges", "[parse]") {
  auto env = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"-np", "1"});
    args.push_back("prog");
    auto p = ParseArgs(args);
    REQUIRE(p.ok());
    REQUIRE(p->options.runtime_env.size() == 1);
    return *p->options.runtime_env.begin();
  };
  using Var = std::pair<const std::string, std::string>;
  for (const char* planner : {"observed", "wfbp", "fusion", "mgwfbp", "bytescheduler", "usbyte",
                              "dear", "deft", "auto"}) {
    CHECK(env({"--planner", planner}) == Var{"OVERLAP_PLANNER", planner});
  }
  CHECK(env({"--profile-steps", "1"}) == Var{"OVERLAP_PROFILE_STEPS", "1"});
  CHECK(env({"--profile-steps", "1000"}) == Var{"OVERLAP_PROFILE_STEPS", "1000"});
  CHECK(env({"--staleness", "0"}) == Var{"OVERLAP_STALENESS", "0"});
  CHECK(env({"--staleness", "16"}) == Var{"OVERLAP_STALENESS", "16"});
  CHECK(env({"--max-period", "1"}) == Var{"OVERLAP_MAX_PERIOD", "1"});
  CHECK(env({"--max-period", "64"}) == Var{"OVERLAP_MAX_PERIOD", "64"});
  CHECK(env({"--budget", "-1"}) == Var{"OVERLAP_BUDGET", "-1"});
  CHECK(env({"--budget", "0"}) == Var{"OVERLAP_BUDGET", "0"});
  CHECK(env({"--budget", "1e6"}) == Var{"OVERLAP_BUDGET", "1e6"});
  CHECK(env({"--partition-mb", "0"}) == Var{"OVERLAP_PARTITION_BYTES", "0"});
  CHECK(env({"--credit-mb", "0"}) == Var{"OVERLAP_CREDIT_BYTES", "0"});
  CHECK(env({"--replan-drift", "0"}) == Var{"OVERLAP_REPLAN_DRIFT", "0"});
  CHECK(env({"--replan-drift", "10"}) == Var{"OVERLAP_REPLAN_DRIFT", "10"});
}

TEST_CASE("fractional megabytes round to whole bytes", "[parse]") {
  auto p = Parse({"-np", "1", "--fusion-threshold-mb", "0.5", "prog"});
  REQUIRE(p.ok());
  CHECK(p->options.runtime_env.at("OVERLAP_FUSION_THRESHOLD") == "524288");
}

TEST_CASE("-x takes NAME or NAME=VALUE, repeatedly, in order", "[parse]") {
  auto p = Parse({"-np", "1", "-x", "OMP_NUM_THREADS=1", "-x", "HOME", "-x", "A=b=c", "prog"});
  REQUIRE(p.ok());
  const auto& f = p->options.forwarded;
  REQUIRE(f.size() == 3);
  CHECK(f[0].name == "OMP_NUM_THREADS");
  CHECK(*f[0].value == "1");
  CHECK(f[1].name == "HOME");
  CHECK_FALSE(f[1].value.has_value());
  CHECK(f[2].name == "A");
  CHECK(*f[2].value == "b=c");
}

TEST_CASE("each bad argument gives one message naming the option", "[parse]") {
  auto message = [](std::vector<std::string> args) {
    auto p = ParseArgs(args);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() != absl::StatusCode::kOk);
    return std::string(p.status().message());
  };
  CHECK(message({"-np", "0", "p"}) == "-np must be at least 1, got 0");
  CHECK(message({"-np", "-3", "p"}) == "-np must be at least 1, got -3");
  CHECK(message({"-np", "four", "p"}) == "-np 'four' is not an integer");
  CHECK(message({"-np"}) == "-np needs a value");
  CHECK(message({"--frobnicate", "p"}) ==
        "unknown option '--frobnicate' (overlaprun --help lists them)");
  // The runtime options are checked as the runtime checks their variables (runtime/api/env_vars.h).
  const std::string planners =
      "one of observed, wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft, auto";
  const std::string budget =
      "-1 or a number in [0, 1e6] (-1: max(staleness, (max_period - 1) / 2))";
  CHECK(message({"-np", "1", "--log-level", "loud", "p"}) ==
        "--log-level 'loud' is not valid: expected one of trace, debug, info, warn, error, "
        "critical, off");
  CHECK(message({"-np", "1", "--fusion-threshold-mb", "-1", "p"}) ==
        "--fusion-threshold-mb '-1' is not valid: expected MiB in [0, 1048576]");
  CHECK(message({"-np", "1", "--stall-timeout", "0", "p"}) ==
        "--stall-timeout '0' is not valid: expected seconds in (0, 1e7]");
  CHECK(message({"-np", "1", "--num-channels", "17", "p"}) ==
        "--num-channels '17' is not valid: expected an integer in 1..16");
  CHECK(message({"-np", "1", "--cycle-time-ms", "1001", "p"}) ==
        "--cycle-time-ms '1001' is not valid: expected milliseconds in [0, 1000]");
  CHECK(message({"-np", "1", "--plan-after-steps", "-1", "p"}) ==
        "--plan-after-steps '-1' is not valid: expected an integer in 0..1000");
  CHECK(message({"-np", "1", "--planner", "foo", "p"}) ==
        "--planner 'foo' is not valid: expected " + planners);
  CHECK(message({"-np", "1", "--planner", "", "p"}) ==
        "--planner '' is not valid: expected " + planners);
  CHECK(message({"-np", "1", "--profile-steps", "0", "p"}) ==
        "--profile-steps '0' is not valid: expected an integer in 1..1000");
  CHECK(message({"-np", "1", "--profile-steps", "1001", "p"}) ==
        "--profile-steps '1001' is not valid: expected an integer in 1..1000");
  CHECK(message({"-np", "1", "--staleness", "17", "p"}) ==
        "--staleness '17' is not valid: expected an integer in 0..16");
  CHECK(message({"-np", "1", "--staleness", "-1", "p"}) ==
        "--staleness '-1' is not valid: expected an integer in 0..16");
  CHECK(message({"-np", "1", "--staleness", "1.5", "p"}) ==
        "--staleness '1.5' is not valid: expected an integer in 0..16");
  CHECK(message({"-np", "1", "--max-period", "0", "p"}) ==
        "--max-period '0' is not valid: expected an integer in 1..64");
  CHECK(message({"-np", "1", "--max-period", "65", "p"}) ==
        "--max-period '65' is not valid: expected an integer in 1..64");
  CHECK(message({"-np", "1", "--budget", "-2", "p"}) ==
        "--budget '-2' is not valid: expected " + budget);
  CHECK(message({"-np", "1", "--budget", "-0.5", "p"}) ==
        "--budget '-0.5' is not valid: expected " + budget);
  CHECK(message({"-np", "1", "--budget", "2e6", "p"}) ==
        "--budget '2e6' is not valid: expected " + budget);
  CHECK(message({"-np", "1", "--budget", "nan", "p"}) ==
        "--budget 'nan' is not valid: expected " + budget);
  CHECK(message({"-np", "1", "--partition-mb", "-1", "p"}) ==
        "--partition-mb '-1' is not valid: expected MiB in [0, 1048576] (0 tunes it)");
  CHECK(message({"-np", "1", "--partition-mb", "2097152", "p"}) ==
        "--partition-mb '2097152' is not valid: expected MiB in [0, 1048576] (0 tunes it)");
  CHECK(message({"-np", "1", "--credit-mb", "lots", "p"}) ==
        "--credit-mb 'lots' is not valid: expected MiB in [0, 1048576] (0 tunes it)");
  CHECK(message({"-np", "1", "--replan-drift", "11", "p"}) ==
        "--replan-drift '11' is not valid: expected a fraction in [0, 10] (0 never re-plans "
        "on drift)");
  CHECK(message({"-np", "1", "--replan-drift", "nan", "p"}) ==
        "--replan-drift 'nan' is not valid: expected a fraction in [0, 10] (0 never re-plans "
        "on drift)");
  CHECK(message({"-np", "1", "--replan-drift", "-0.1", "p"}) ==
        "--replan-drift '-0.1' is not valid: expected a fraction in [0, 10] (0 never re-plans "
        "on drift)");
  CHECK(message({"-np", "1", "--start-timeout", "2e7", "p"}) ==
        "--start-timeout: OVERLAP_START_TIMEOUT_S='2e7' is not valid: expected seconds in (0, 1e7]");
  CHECK(message({"-np", "1", "--start-timeout", "soon", "p"}) ==
        "--start-timeout 'soon' is not a positive number of seconds");
  CHECK(message({"-np", "1", "--host-timeout", "5", "p"}) ==
        "--host-timeout '5' must be between 6 and 86400 seconds");
  CHECK(message({"-np", "1", "--host-timeout", "0", "p"}) ==
        "--host-timeout '0' is not a positive number of seconds");
  CHECK(message({"-np", "1", "-x", "1BAD=2", "p"}) ==
        "-x '1BAD=2' is not NAME or NAME=VALUE with a valid variable name");
  CHECK(message({"-np", "1", "--dry-run=yes", "p"}) == "--dry-run takes no value");
  CHECK(message({"-np", "2", "-H", "a", "--hostfile", "f", "p"}) ==
        "give hosts once: with -H or with --hostfile, not both or twice");
}

TEST_CASE("--hostfile reads the file and reports its syntax errors", "[parse]") {
  const std::string path =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/parse_args_hosts.txt";
  { std::ofstream(path) << "n1 slots=2\nn2 slots=2\n"; }
  auto p = Parse({"-np", "4", "--hostfile", path, "prog"});
  REQUIRE(p.ok());
  CHECK(p->options.hosts_source == path);
  CHECK(p->options.hosts.size() == 2);
  { std::ofstream(path) << "n1 slots=2\nn2 slots=\n"; }
  auto bad = Parse({"-np", "4", "--hostfile", path, "prog"});
  CHECK(bad.status().message() ==
        "hostfile " + path + " line 2: slot count '' is not a positive integer");
}

TEST_CASE("--help and the internal rank wrapper mode", "[parse]") {
  auto help = Parse({"-np", "2", "--help", "--bogus"});
  REQUIRE(help.ok());
  CHECK(help->mode == ParsedCommand::Mode::kHelp);
  auto wrapper = Parse({"--rank-wrapper", "--", "prog", "-np", "3"});
  REQUIRE(wrapper.ok());
  CHECK(wrapper->mode == ParsedCommand::Mode::kRankWrapper);
  CHECK(wrapper->options.program == std::vector<std::string>{"prog", "-np", "3"});
  CHECK(Parse({"--rank-wrapper"}).status().message() == "--rank-wrapper needs a program");
  CHECK(wrapper->options.peer_grace_s == 2.0);
  auto graced = Parse({"--rank-wrapper", "--peer-grace", "0.5", "--", "prog"});
  REQUIRE(graced.ok());
  CHECK(graced->options.peer_grace_s == 0.5);
  CHECK(graced->options.program == std::vector<std::string>{"prog"});
  CHECK(Parse({"--rank-wrapper", "--peer-grace", "-1", "--", "prog"}).status().message() ==
        "--peer-grace '-1' is not a number of seconds in 0..60");
}

}  // namespace
TEST_CASE("horovodrun's elastic flags make an elastic job", "[parse][elastic]") {
  auto p = Parse({"--min-np", "2", "--max-num-proc=8", "--host-discovery-script", "./hosts.sh",
                  "--slots-per-host", "4", "--reset-limit", "3", "--blacklist-cooldown-range",
                  "10", "100", "--elastic-timeout", "60", "-x", "A=1", "--fusion-threshold-mb",
                  "8", "python", "train.py"});
  REQUIRE(p.ok());
  const LaunchOptions& o = p->options;
  CHECK(o.elastic.enabled);
  CHECK(o.elastic.min_ranks == 2);
  CHECK(o.num_ranks == 2);  // -np defaults to --min-np
  CHECK(o.elastic.max_ranks == 8);
  CHECK(o.elastic.discovery_script == "./hosts.sh");
  CHECK(o.elastic.slots_per_host == 4);
  CHECK(o.elastic.reset_limit == 3);
  REQUIRE(o.elastic.cooldown_s.has_value());
  CHECK(o.elastic.cooldown_s->first == 10);
  CHECK(o.elastic.cooldown_s->second == 100);
  CHECK(o.elastic.timeout_s == 60);
  // What every generation is started with: all but the elastic flags, -np and the hosts.
  CHECK(o.generation_args ==
        std::vector<std::string>{"-x", "A=1", "--fusion-threshold-mb", "8"});
  CHECK(o.program == std::vector<std::string>{"python", "train.py"});
}

TEST_CASE("--min-np defaults to -np, and the cooldown range takes MIN,MAX", "[parse][elastic]") {
  auto p = Parse({"-np", "4", "--max-np", "6", "-H", "a:4,b:4", "--blacklist-cooldown-range",
                  "5,50", "prog"});
  REQUIRE(p.ok());
  CHECK(p->options.elastic.min_ranks == 4);
  CHECK(p->options.num_ranks == 4);
  CHECK(p->options.elastic.cooldown_s->second == 50);
  CHECK(p->options.generation_args.empty());
  CHECK_FALSE(Parse({"-np", "2", "prog"})->options.elastic.enabled);
}

TEST_CASE("bad elastic values are refused naming the flag", "[parse][elastic]") {
  CHECK(Parse({"--min-np", "0", "p"}).status().message() == "--min-np must be at least 1, got 0");
  CHECK(Parse({"--max-np", "x", "p"}).status().message() == "--max-np 'x' is not an integer");
  CHECK(Parse({"--reset-limit", "-1", "p"}).status().message() ==
        "--reset-limit must be at least 0, got -1");
  CHECK(Parse({"--blacklist-cooldown-range", "0", "10", "p"}).status().message() ==
        "--blacklist-cooldown-range 0 10: needs 1 <= MIN <= MAX <= 3600 seconds");
  CHECK(Parse({"--blacklist-cooldown-range", "10"}).status().message() ==
        "--blacklist-cooldown-range needs two values: MIN MAX seconds");
  CHECK(Parse({"--elastic-timeout", "-5", "p"}).status().message() ==
        "--elastic-timeout '-5' is not a positive number of seconds");
}

}  // namespace overlap::launcher
