#include "runtime/config.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "numeric/half.h"
#include "collectives/scaling.h"
#include "runtime/api/env_vars.h"

namespace overlap {
namespace {

TEST_CASE("configuration comes from OVERLAP_* variables", "[config]") {
  setenv("OVERLAP_FUSION_THRESHOLD", "1048576", 1);
  setenv("OVERLAP_NUM_CHANNELS", "3", 1);
  setenv("OVERLAP_STALL_WARNING_S", "5", 1);
  absl::StatusOr<Config> config = Config::FromEnvironment();
  REQUIRE(config.ok());
  CHECK(config->fusion_threshold_bytes == 1048576);
  CHECK(config->num_channels == 3);
  CHECK(config->stall_warning_s == 5.0);
  unsetenv("OVERLAP_FUSION_THRESHOLD");
  unsetenv("OVERLAP_NUM_CHANNELS");
  unsetenv("OVERLAP_STALL_WARNING_S");
}

TEST_CASE("Horovod's variables that mean the same are read when overlap's are unset", "[config]") {
  setenv("HOROVOD_FUSION_THRESHOLD", "33554432", 1);
  setenv("HOROVOD_CYCLE_TIME", "3.5", 1);
  setenv("HOROVOD_HIERARCHICAL_ALLREDUCE", "1", 1);
  setenv("HOROVOD_TIMELINE", "/tmp/hvd.json", 1);
  absl::StatusOr<Config> config = Config::FromEnvironment();
  REQUIRE(config.ok());
  CHECK(config->fusion_threshold_bytes == 33554432);
  CHECK(config->cycle_time_ms == 3.5);
  CHECK(config->hierarchical_allreduce == 1);
  CHECK(config->timeline_path == "/tmp/hvd.json");

  setenv("OVERLAP_FUSION_THRESHOLD", "1024", 1);  // overlap's own wins
  config = Config::FromEnvironment();
  REQUIRE(config.ok());
  CHECK(config->fusion_threshold_bytes == 1024);
  unsetenv("OVERLAP_FUSION_THRESHOLD");

  setenv("HOROVOD_HIERARCHICAL_ALLREDUCE", "yes", 1);
  config = Config::FromEnvironment();
  REQUIRE_FALSE(config.ok());
  CHECK(std::string(config.status().message()) ==
        "HOROVOD_HIERARCHICAL_ALLREDUCE (read as OVERLAP_HIERARCHICAL_ALLREDUCE): "
        "OVERLAP_HIERARCHICAL_ALLREDUCE='yes' is not valid: expected an integer in 0..1");
  for (const char* var : {"HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME",
                          "HOROVOD_HIERARCHICAL_ALLREDUCE", "HOROVOD_TIMELINE"}) {
    unsetenv(var);
  }
}

TEST_CASE("settings given in code are read over the environment", "[config]") {
  setenv("OVERLAP_PLANNER", "dear", 1);
  setenv("OVERLAP_STALENESS", "2", 1);
  setenv("HOROVOD_FUSION_THRESHOLD", "33554432", 1);
  absl::StatusOr<Config> config = Config::FromEnvironment(
      {{"OVERLAP_PLANNER", "deft"}, {"OVERLAP_FUSION_THRESHOLD", "1024"},
       {"OVERLAP_COMPRESSION", "fp16"}, {"OVERLAP_PLANNER", "auto"}});
  REQUIRE(config.ok());
  CHECK(config->planner == "auto");  // the last setting of a name wins
  CHECK(config->fusion_threshold_bytes == 1024);  // over Horovod's alias too
  CHECK(config->compression == "fp16");
  CHECK(config->staleness == 2);  // not given in code: the environment's

  config = Config::FromEnvironment({{"OVERLAP_STALENESS", "-1"}});
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(config.status().message()) ==
        "OVERLAP_STALENESS='-1' is not valid: expected an integer in 0..16 (given in code)");

  config = Config::FromEnvironment({{"OVERLAP_PLANER", "deft"}});
  REQUIRE_FALSE(config.ok());
  CHECK(std::string(config.status().message()) ==
        "unknown runtime setting OVERLAP_PLANER='deft' given in code (docs/tuning.md lists the "
        "OVERLAP_* settings)");
  // A launcher's variable is not a runtime setting.
  config = Config::FromEnvironment({{"OVERLAP_LAUNCHER", "/bin/true"}});
  REQUIRE_FALSE(config.ok());
  for (const char* var : {"OVERLAP_PLANNER", "OVERLAP_STALENESS", "HOROVOD_FUSION_THRESHOLD"}) {
    unsetenv(var);
  }
}

TEST_CASE("a configuration's settings read back to the same configuration", "[config]") {
  Config config;
  config.planner = "deft";
  config.staleness = 1;
  config.max_period = 4;
  config.cycle_time_ms = 0.1;
  config.stall_warning_s = 7.25;
  config.timeline_path = "/tmp/a \"quoted\" path";
  config.compression = "topk:ratio=0.01";
  const std::vector<Config::Setting> settings = config.AsSettings();
  for (const Config::Setting& setting : settings) {
    INFO(setting.first);
    CHECK(env::Find(setting.first) != nullptr);
  }
  absl::StatusOr<Config> read = Config::FromEnvironment(settings);
  REQUIRE(read.ok());
  CHECK(read->AsSettings() == settings);
  CHECK(read->planner == "deft");
  CHECK(read->cycle_time_ms == 0.1);
  CHECK(read->stall_warning_s == 7.25);
  CHECK(read->timeline_path == config.timeline_path);
  // Every runtime variable of the table is among them, by its name.
  size_t runtime_vars = 0;
  for (const env::Var& var : env::Vars()) {
    if (var.reader == env::Reader::kRuntime) ++runtime_vars;
  }
  CHECK(settings.size() == runtime_vars);
  CHECK(std::find(settings.begin(), settings.end(), Config::Setting{"OVERLAP_STALENESS", "1"}) !=
        settings.end());
  CHECK(std::find(settings.begin(), settings.end(), Config::Setting{"OVERLAP_CYCLE_TIME_MS",
                                                                    "0.1"}) != settings.end());
}

TEST_CASE("bad values name the variable, the value and what is expected", "[config]") {
  struct Case {
    const char* var;
    const char* value;
    const char* message;
  };
  const Case cases[] = {
      {"OVERLAP_FUSION_THRESHOLD", "64MB",
       "OVERLAP_FUSION_THRESHOLD='64MB' is not valid: expected a byte count in 0..1099511627776"},
      {"OVERLAP_FUSION_THRESHOLD", "-1",
       "OVERLAP_FUSION_THRESHOLD='-1' is not valid: expected a byte count in 0..1099511627776"},
      {"OVERLAP_NUM_CHANNELS", "0",
       "OVERLAP_NUM_CHANNELS='0' is not valid: expected an integer in 1..16"},
      {"OVERLAP_PLAN_AFTER_STEPS", "1001",
       "OVERLAP_PLAN_AFTER_STEPS='1001' is not valid: expected an integer in 0..1000"},
      {"OVERLAP_STALL_TIMEOUT_S", "soon",
       "OVERLAP_STALL_TIMEOUT_S='soon' is not valid: expected seconds in (0, 1e7]"},
      {"OVERLAP_COLLECTIVE_TIMEOUT_S", "-3",
       "OVERLAP_COLLECTIVE_TIMEOUT_S='-3' is not valid: expected seconds in (0, 1e7]"},
      {"OVERLAP_DIRECT_THRESHOLD", "-5",
       "OVERLAP_DIRECT_THRESHOLD='-5' is not valid: expected a byte count in 0..1099511627776"},
      {"OVERLAP_CYCLE_TIME_MS", "-1",
       "OVERLAP_CYCLE_TIME_MS='-1' is not valid: expected milliseconds in [0, 1000]"},
      {"OVERLAP_LOG_LEVEL", "loud",
       "OVERLAP_LOG_LEVEL='loud' is not valid: expected one of trace, debug, info, warn, error, "
       "critical, off"},
      {"OVERLAP_EXECUTOR", "cuda",
       "OVERLAP_EXECUTOR='cuda' is not valid: expected one of auto, nccl, mpi"},
      {"OVERLAP_COMPRESSION", "zip",
       "OVERLAP_COMPRESSION='zip' is not valid: unknown compressor 'zip'; known: none, fp16, "
       "bf16, topk, randomk, covap, efsign, powersgd"},
      {"OVERLAP_COMPRESSION", "topk:ratio=2",
       "OVERLAP_COMPRESSION='topk:ratio=2' is not valid: compressor 'topk': parameter 'ratio' = 2 "
       "is out of range [1e-09, 1]"},
      {"OVERLAP_START_TIMEOUT_S", "0",
       "OVERLAP_START_TIMEOUT_S='0' is not valid: expected seconds in (0, 1e7]"},
  };
  for (const Case& c : cases) {
    setenv(c.var, c.value, 1);
    absl::StatusOr<Config> config = Config::FromEnvironment();
    unsetenv(c.var);
    INFO(c.var << "=" << c.value);
    REQUIRE(!config.ok());
    CHECK(config.status().message() == c.message);
  }
}

TEST_CASE("a stall timeout below the stall warning is refused, naming both", "[config]") {
  setenv("OVERLAP_STALL_WARNING_S", "10", 1);
  setenv("OVERLAP_STALL_TIMEOUT_S", "5", 1);
  absl::StatusOr<Config> config = Config::FromEnvironment();
  unsetenv("OVERLAP_STALL_WARNING_S");
  unsetenv("OVERLAP_STALL_TIMEOUT_S");
  REQUIRE(!config.ok());
  CHECK(config.status().message() ==
        "OVERLAP_STALL_TIMEOUT_S=5 is below OVERLAP_STALL_WARNING_S=10: a stall must be warned "
        "about before it fails");
}

TEST_CASE("every runtime variable of the table is read into Config through its checks",
          "[config][env_vars]") {
  int checked = 0;
  for (const env::Var& var : env::Vars()) {
    if (var.reader != env::Reader::kRuntime) continue;
    INFO(var.name);
    if (var.kind == env::Kind::kPath) {
      // Any path is accepted; it must land in the config (OVERLAP_TIMELINE is the only one).
      setenv(var.name, "/tmp/x.json", 1);
      absl::StatusOr<Config> config = Config::FromEnvironment();
      unsetenv(var.name);
      REQUIRE(config.ok());
      CHECK(config->timeline_path == "/tmp/x.json");
      continue;
    }
    if (std::string(var.name) == "OVERLAP_HOST_ID") {
      // Any name is a host name; it must land in the config.
      setenv(var.name, "rack 3/host 7", 1);
      absl::StatusOr<Config> config = Config::FromEnvironment();
      unsetenv(var.name);
      REQUIRE(config.ok());
      CHECK(config->host_id == "rack 3/host 7");
      continue;
    }
    setenv(var.name, "not-a-value", 1);
    absl::StatusOr<Config> config = Config::FromEnvironment();
    unsetenv(var.name);
    REQUIRE(!config.ok());
    CHECK(std::string(config.status().message())
              .rfind(std::string(var.name) + "='not-a-value' is not valid: ", 0) == 0);
    ++checked;
  }
  CHECK(checked >= 20);
}

// overlaprun checks its runtime options with env::Check (env::FlagToValue); the runtime must refuse
// exactly those values, with the same words.
TEST_CASE("the runtime refuses what the table's check refuses, with its message",
          "[config][env_vars]") {
  const char* samples[] = {"",    "0",    "1",    "-1",   "0.5",  "1.5",        "16",
                           "17",  "64",   "65",   "1000", "1001", "10",         "11",
                           "1e6", "2e6",  "1e7",  "2e7",  "nan",  "inf",        "abc",
                           "off", "warn", "deft", "mpi",  "fp16", "4294967297", "1099511627777"};
  for (const env::Var& var : env::Vars()) {
    if (var.reader != env::Reader::kRuntime) continue;
    for (const char* sample : samples) {
      INFO(var.name << "='" << sample << "'");
      const absl::Status check = env::Check(var, sample);
      setenv(var.name, sample, 1);
      absl::StatusOr<Config> config = Config::FromEnvironment();
      unsetenv(var.name);
      if (!check.ok()) {
        REQUIRE(!config.ok());
        CHECK(config.status().message() == check.message());
        continue;
      }
      // Only checks across variables or beyond the table's (the stall timeout against the
      // warning, the compressor's spec) may refuse a value the table accepts.
      const std::string name = var.name;
      if (name != "OVERLAP_STALL_WARNING_S" && name != "OVERLAP_STALL_TIMEOUT_S" &&
          name != "OVERLAP_COMPRESSION") {
        CHECK(config.ok());
      }
    }
  }
}

TEST_CASE("the table names each variable and each option once", "[env_vars]") {
  for (const env::Var& var : env::Vars()) {
    INFO(var.name);
    CHECK(env::Find(var.name) == &var);
    CHECK(std::string(var.name).rfind("OVERLAP_", 0) == 0);
    CHECK(*var.description != '\0');
    if (var.flag.name != nullptr) CHECK(env::FindByFlag(var.flag.name) == &var);
    if (std::string(var.name).rfind("OVERLAP_TEST_", 0) == 0) CHECK(var.test_only());
  }
}

TEST_CASE("scaled copies round fp16 and bf16 through fp32", "[scaling]") {
  uint16_t h[3] = {FloatToHalf(1.0f), FloatToHalf(3.0f), FloatToHalf(-0.5f)};
  ScaledCopy(h, h, 3, DataType::kFloat16, 0.25);
  CHECK(HalfToFloat(h[0]) == 0.25f);
  CHECK(HalfToFloat(h[1]) == 0.75f);
  CHECK(HalfToFloat(h[2]) == -0.125f);
  int32_t ints[3] = {7, -7, 8};
  DivideIntegers(ints, 3, DataType::kInt32, 2);
  CHECK(ints[0] == 3);
  CHECK(ints[1] == -3);  // toward zero
  CHECK(ints[2] == 4);
}

}  // namespace
}  // namespace overlap
