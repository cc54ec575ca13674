#include "runtime/config.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "runtime/compression_stage.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace overlap {
namespace {

absl::Status BadValue(absl::string_view var, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(var, "='", value, "' is not valid: expected ", want));
}

absl::Status ReadInt(const char* var, int64_t* out) {
  const char* value = std::getenv(var);
  if (value == nullptr) return absl::OkStatus();
  if (!absl::SimpleAtoi(value, out)) return BadValue(var, value, "an integer");
  return absl::OkStatus();
}

absl::Status ReadDouble(const char* var, double* out) {
  const char* value = std::getenv(var);
  if (value == nullptr) return absl::OkStatus();
  if (!absl::SimpleAtod(value, out)) return BadValue(var, value, "a number");
  return absl::OkStatus();
}

constexpr const char* kKnownVariables[] = {
    "OVERLAP_FUSION_THRESHOLD",
    "OVERLAP_NUM_CHANNELS",
    // Read by the Python package (overlap/_core.py, tests), not the runtime.
    "OVERLAP_LIBRARY",
    "OVERLAP_PYTHON",
    // Read by overlap.tensorflow (op_library.py): where its op library is, or is compiled to.
    "OVERLAP_TF_OPS_LIBRARY",
    "OVERLAP_TF_OPS_CACHE",
    // Read by the build (third_party/cuda/cuda_configure.bzl), not the runtime.
    "OVERLAP_CUDA_HOME",
    "OVERLAP_STALL_WARNING_S",
    "OVERLAP_STALL_TIMEOUT_S",
    "OVERLAP_TIMELINE",
    "OVERLAP_LOG_LEVEL",
    "OVERLAP_COLLECTIVE_TIMEOUT_S",
    "OVERLAP_START_TIMEOUT_S",
    "OVERLAP_COMPRESSION",
    "OVERLAP_EXECUTOR",
    // Read by the GPU tests (tests/gpu/gpu_gate.h): a missing GPU fails them instead of skipping.
    "OVERLAP_REQUIRE_GPU",
    "OVERLAP_CYCLE_TIME_MS",
    "OVERLAP_DIRECT_THRESHOLD",
    "OVERLAP_PLAN_AFTER_STEPS",
    "OVERLAP_PLANNER",
    "OVERLAP_PROFILE_STEPS",
    "OVERLAP_STALENESS",
    "OVERLAP_MAX_PERIOD",
    "OVERLAP_BUDGET",
    "OVERLAP_PARTITION_BYTES",
    "OVERLAP_CREDIT_BYTES",
    "OVERLAP_REPLAN_DRIFT",
    "OVERLAP_TEST_CORRUPT_PLAN",
    "OVERLAP_TEST_PLAN_SCHEDULE",
    // Read by tests/runtime/scheduled_test.cc, not the runtime.
    "OVERLAP_TEST_DRIFT",
    // Read by tests/gpu/device_runtime_test.cc, not the runtime.
    "OVERLAP_TEST_EXPECT_EXECUTOR",
    "OVERLAP_TEST_EXPECT_ERROR",
};

constexpr const char* kPlanners[] = {"observed", "wfbp", "fusion", "mgwfbp", "bytescheduler",
                                     "usbyte",   "dear", "deft",   "auto"};

// The integer settings with a range, checked alike whether read from the environment or set in
// code.
struct IntSetting {
  const char* var;
  int Config::*field;
  int64_t min, max;
};
constexpr IntSetting kIntSettings[] = {
    {"OVERLAP_NUM_CHANNELS", &Config::num_channels, 1, 16},
    {"OVERLAP_PLAN_AFTER_STEPS", &Config::plan_after_steps, 0, 1000},
    {"OVERLAP_PROFILE_STEPS", &Config::profile_steps, 1, 1000},
    {"OVERLAP_STALENESS", &Config::staleness, 0, 16},
    {"OVERLAP_MAX_PERIOD", &Config::max_period, 1, 64},
};

absl::Status CheckRange(const IntSetting& setting, int64_t value) {
  if (value >= setting.min && value <= setting.max) return absl::OkStatus();
  return BadValue(setting.var, std::to_string(value),
                  absl::StrCat("an integer in ", setting.min, "..", setting.max));
}

bool IsKnown(absl::string_view name) {
  for (const char* known : kKnownVariables) {
    if (name == known) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<Config> Config::FromEnvironment() {
  Config config;
  absl::Status s = ReadInt("OVERLAP_FUSION_THRESHOLD", &config.fusion_threshold_bytes);
  if (s.ok()) s = ReadInt("OVERLAP_DIRECT_THRESHOLD", &config.direct_threshold_bytes);
  if (s.ok()) s = ReadDouble("OVERLAP_STALL_WARNING_S", &config.stall_warning_s);
  if (s.ok()) s = ReadDouble("OVERLAP_STALL_TIMEOUT_S", &config.stall_timeout_s);
  if (s.ok()) s = ReadDouble("OVERLAP_COLLECTIVE_TIMEOUT_S", &config.collective_timeout_s);
  if (s.ok()) s = ReadDouble("OVERLAP_START_TIMEOUT_S", &config.start_timeout_s);
  if (s.ok()) s = ReadDouble("OVERLAP_CYCLE_TIME_MS", &config.cycle_time_ms);
  if (s.ok()) s = ReadDouble("OVERLAP_BUDGET", &config.budget);
  if (s.ok()) s = ReadInt("OVERLAP_PARTITION_BYTES", &config.partition_bytes);
  if (s.ok()) s = ReadInt("OVERLAP_CREDIT_BYTES", &config.credit_bytes);
  if (s.ok()) s = ReadDouble("OVERLAP_REPLAN_DRIFT", &config.replan_drift);
  // Read and checked as 64-bit values, so that a huge number is not truncated into range.
  for (const IntSetting& setting : kIntSettings) {
    int64_t value = config.*setting.field;
    if (s.ok()) s = ReadInt(setting.var, &value);
    if (s.ok()) s = CheckRange(setting, value);
    if (s.ok()) config.*setting.field = static_cast<int>(value);
  }
  if (!s.ok()) return s;
  if (const char* v = std::getenv("OVERLAP_PLANNER")) config.planner = v;
  if (const char* v = std::getenv("OVERLAP_TIMELINE")) config.timeline_path = v;
  if (const char* v = std::getenv("OVERLAP_LOG_LEVEL")) config.log_level = v;
  if (const char* v = std::getenv("OVERLAP_COMPRESSION")) config.compression = v;
  if (const char* v = std::getenv("OVERLAP_EXECUTOR")) config.executor = v;
  // A misspelt variable would otherwise be silently ignored.
  for (char** env = environ; env != nullptr && *env != nullptr; ++env) {
    absl::string_view entry(*env);
    if (!absl::StartsWith(entry, "OVERLAP_")) continue;
    absl::string_view name = entry.substr(0, entry.find('='));
    if (!IsKnown(name)) {
      spdlog::warn("overlap: ignoring unknown environment variable {}", std::string(name));
    }
  }
  absl::Status valid = config.Validate();
  if (!valid.ok()) return valid;
  return config;
}

absl::Status Config::Validate() const {
  if (fusion_threshold_bytes < 0) {
    return BadValue("OVERLAP_FUSION_THRESHOLD", std::to_string(fusion_threshold_bytes),
                    "a byte count >= 0");
  }
  if (direct_threshold_bytes < 0) {
    return BadValue("OVERLAP_DIRECT_THRESHOLD", std::to_string(direct_threshold_bytes),
                    "a byte count >= 0");
  }
  for (const IntSetting& setting : kIntSettings) {
    absl::Status s = CheckRange(setting, this->*setting.field);
    if (!s.ok()) return s;
  }
  struct Positive {
    const char* var;
    double value;
  };
  for (const Positive& p : {Positive{"OVERLAP_STALL_WARNING_S", stall_warning_s},
                            Positive{"OVERLAP_STALL_TIMEOUT_S", stall_timeout_s},
                            Positive{"OVERLAP_COLLECTIVE_TIMEOUT_S", collective_timeout_s},
                            Positive{"OVERLAP_START_TIMEOUT_S", start_timeout_s}}) {
    if (!(p.value > 0) || p.value > 1e7) {
      return BadValue(p.var, absl::StrCat(p.value), "seconds in (0, 1e7]");
    }
  }
  if (!(cycle_time_ms >= 0) || cycle_time_ms > 1000) {
    return BadValue("OVERLAP_CYCLE_TIME_MS", absl::StrCat(cycle_time_ms),
                    "milliseconds in [0, 1000]");
  }
  if (stall_timeout_s < stall_warning_s) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OVERLAP_STALL_TIMEOUT_S=", stall_timeout_s, " is below OVERLAP_STALL_WARNING_S=",
        stall_warning_s, ": a stall must be warned about before it fails"));
  }
  bool known_planner = false;
  for (const char* p : kPlanners) known_planner = known_planner || planner == p;
  if (!known_planner) {
    return BadValue(
        "OVERLAP_PLANNER", planner,
        "one of observed, wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft, auto");
  }
  if (executor != "auto" && executor != "nccl" && executor != "mpi") {
    return BadValue("OVERLAP_EXECUTOR", executor, "one of auto, nccl, mpi");
  }
  if (!(budget == -1 || (budget >= 0 && budget <= 1e6))) {
    return BadValue("OVERLAP_BUDGET", absl::StrCat(budget),
                    "-1 (the default, max(staleness, (max_period - 1) / 2)) or in [0, 1e6]");
  }
  if (partition_bytes < 0) {
    return BadValue("OVERLAP_PARTITION_BYTES", std::to_string(partition_bytes),
                    "a byte count >= 0 (0 tunes it)");
  }
  if (credit_bytes < 0) {
    return BadValue("OVERLAP_CREDIT_BYTES", std::to_string(credit_bytes),
                    "a byte count >= 0 (0 tunes it)");
  }
  if (!(replan_drift >= 0) || replan_drift > 10) {
    return BadValue("OVERLAP_REPLAN_DRIFT", absl::StrCat(replan_drift),
                    "a fraction in [0, 10] (0 never re-plans on drift)");
  }
  absl::StatusOr<std::string> compression = CompressionStage::Canonical(this->compression);
  if (!compression.ok()) {
    // The compressor's own message says what is wrong; "expected" would read as nonsense here.
    return absl::InvalidArgumentError(absl::StrCat("OVERLAP_COMPRESSION='", this->compression,
                                                   "' is not valid: ",
                                                   compression.status().message()));
  }
  const spdlog::level::level_enum level = spdlog::level::from_str(log_level);
  if (level == spdlog::level::off && log_level != "off") {
    return BadValue("OVERLAP_LOG_LEVEL", log_level,
                    "one of trace, debug, info, warn, error, critical, off");
  }
  return absl::OkStatus();
}

}  // namespace overlap
