#include "runtime/config.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "runtime/api/env_vars.h"
#include "runtime/planes/compression_stage.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace overlap {
namespace {

// Where each runtime variable of the table (runtime/api/env_vars.cc) lands in Config. The table
// says what each accepts; this says only which field holds it. tests/runtime/config_test.cc checks
// that every Reader::kRuntime variable of the table is bound here.
struct Field {
  constexpr Field(const char* var, int Config::*field) : var(var), int_field(field) {}
  constexpr Field(const char* var, int64_t Config::*field) : var(var), int64_field(field) {}
  constexpr Field(const char* var, double Config::*field) : var(var), double_field(field) {}
  constexpr Field(const char* var, std::string Config::*field) : var(var), string_field(field) {}
  const char* var;
  int Config::*int_field = nullptr;
  int64_t Config::*int64_field = nullptr;
  double Config::*double_field = nullptr;
  std::string Config::*string_field = nullptr;
};

const Field kFields[] = {
    {"OVERLAP_FUSION_THRESHOLD", &Config::fusion_threshold_bytes},
    {"OVERLAP_DIRECT_THRESHOLD", &Config::direct_threshold_bytes},
    {"OVERLAP_NUM_CHANNELS", &Config::num_channels},
    {"OVERLAP_HIERARCHICAL_ALLREDUCE", &Config::hierarchical_allreduce},
    {"OVERLAP_ADAPTIVE_ALLREDUCE", &Config::adaptive_allreduce},
    {"OVERLAP_TWO_STAGE", &Config::two_stage},
    {"OVERLAP_HOST_ID", &Config::host_id},
    {"OVERLAP_TIMELINE", &Config::timeline_path},
    {"OVERLAP_LOG_LEVEL", &Config::log_level},
    {"OVERLAP_STALL_WARNING_S", &Config::stall_warning_s},
    {"OVERLAP_STALL_TIMEOUT_S", &Config::stall_timeout_s},
    {"OVERLAP_COLLECTIVE_TIMEOUT_S", &Config::collective_timeout_s},
    {"OVERLAP_START_TIMEOUT_S", &Config::start_timeout_s},
    {"OVERLAP_PLANNER", &Config::planner},
    {"OVERLAP_COMPRESSION", &Config::compression},
    {"OVERLAP_EXECUTOR", &Config::executor},
    {"OVERLAP_CYCLE_TIME_MS", &Config::cycle_time_ms},
    {"OVERLAP_COORDINATOR_WAIT", &Config::coordinator_wait},
    {"OVERLAP_PLAN_AFTER_STEPS", &Config::plan_after_steps},
    {"OVERLAP_PLAN_CHECK_WINDOW", &Config::plan_check_window},
    {"OVERLAP_PROFILE_STEPS", &Config::profile_steps},
    {"OVERLAP_STALENESS", &Config::staleness},
    {"OVERLAP_MAX_PERIOD", &Config::max_period},
    {"OVERLAP_BUDGET", &Config::budget},
    {"OVERLAP_PARTITION_BYTES", &Config::partition_bytes},
    {"OVERLAP_CREDIT_BYTES", &Config::credit_bytes},
    {"OVERLAP_REPLAN_DRIFT", &Config::replan_drift},
    {"OVERLAP_REPLAN_MIN_MS", &Config::replan_min_ms},
    {"OVERLAP_REPLAN_MIN_GAIN", &Config::replan_min_gain},
    {"OVERLAP_DEVICE_BUCKET_US", &Config::device_bucket_us},
    {"OVERLAP_AUTO_TRIALS", &Config::auto_trials},
};

// Horovod's variables that mean exactly what an OVERLAP_* one means, read when the OVERLAP_* one
// is unset, so that a job script written for Horovod keeps its settings.
struct HorovodAlias {
  const char* horovod;
  const char* overlap;
};
constexpr HorovodAlias kHorovodAliases[] = {
    {"HOROVOD_FUSION_THRESHOLD", "OVERLAP_FUSION_THRESHOLD"},
    {"HOROVOD_CYCLE_TIME", "OVERLAP_CYCLE_TIME_MS"},
    {"HOROVOD_TIMELINE", "OVERLAP_TIMELINE"},
    {"HOROVOD_HIERARCHICAL_ALLREDUCE", "OVERLAP_HIERARCHICAL_ALLREDUCE"},
};

const char* HorovodAliasOf(const char* overlap_var) {
  for (const HorovodAlias& alias : kHorovodAliases) {
    if (absl::string_view(alias.overlap) == overlap_var) return alias.horovod;
  }
  return nullptr;
}

const env::Var& VarOf(const Field& field) {
  const env::Var* var = env::Find(field.var);
  if (var == nullptr) {
    spdlog::critical(
        "overlap: {} is bound in runtime/api/config.cc but not in runtime/api/env_vars.cc",
        field.var);
    std::abort();
  }
  return *var;
}

// Sets `field` of `config` from `text`, parsed and range-checked by the table. Integers are read
// and checked as 64-bit values, so that a huge number is not truncated into range.
absl::Status Read(const Field& field, absl::string_view text, Config& config) {
  const env::Var& var = VarOf(field);
  if (field.int_field != nullptr || field.int64_field != nullptr) {
    absl::StatusOr<int64_t> value = env::ParseInt(var, text);
    if (!value.ok()) return value.status();
    if (field.int_field != nullptr) config.*field.int_field = static_cast<int>(*value);
    if (field.int64_field != nullptr) config.*field.int64_field = *value;
  } else if (field.double_field != nullptr) {
    absl::StatusOr<double> value = env::ParseDouble(var, text);
    if (!value.ok()) return value.status();
    config.*field.double_field = *value;
  } else {
    // Checked in Validate, as a value set in code is.
    config.*field.string_field = std::string(text);
  }
  return absl::OkStatus();
}

// The field's value checked against the table, whether it came from the environment or code.
absl::Status CheckField(const Field& field, const Config& config) {
  const env::Var& var = VarOf(field);
  if (field.int_field != nullptr) return env::CheckInt(var, config.*field.int_field);
  if (field.int64_field != nullptr) return env::CheckInt(var, config.*field.int64_field);
  if (field.double_field != nullptr) return env::CheckDouble(var, config.*field.double_field);
  return env::Check(var, config.*field.string_field);
}

// 15 significant digits when they read back to the same double (0.5, not 0.50000000000000000),
// else 17, which always do.
std::string DoubleText(double value) {
  std::string text = absl::StrFormat("%.15g", value);
  if (std::strtod(text.c_str(), nullptr) != value) text = absl::StrFormat("%.17g", value);
  return text;
}

}  // namespace

absl::StatusOr<Config> Config::FromEnvironment(const std::vector<Setting>& settings) {
  for (const Setting& setting : settings) {
    if (std::none_of(std::begin(kFields), std::end(kFields),
                     [&](const Field& field) { return setting.first == field.var; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown runtime setting ", setting.first, "='", setting.second,
                       "' given in code (docs/tuning.md lists the OVERLAP_* settings)"));
    }
  }
  Config config;
  for (const Field& field : kFields) {
    // The last setting in code for this variable, else the environment's.
    const Setting* given = nullptr;
    for (const Setting& setting : settings) {
      if (setting.first == field.var) given = &setting;
    }
    if (given != nullptr) {
      absl::Status s = Read(field, given->second, config);
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat(s.message(), " (given in code)"));
      }
      continue;
    }
    const char* value = std::getenv(field.var);
    const char* alias = value == nullptr ? HorovodAliasOf(field.var) : nullptr;
    if (alias != nullptr) value = std::getenv(alias);
    if (value == nullptr) continue;
    absl::Status s = Read(field, value, config);
    if (!s.ok() && alias != nullptr) {
      return absl::Status(s.code(),
                          absl::StrCat(alias, " (read as ", field.var, "): ", s.message()));
    }
    if (!s.ok()) return s;
  }
  // A misspelt variable would otherwise be silently ignored. MPI may not be initialised yet: the
  // rank comes from the launcher's environment (Open MPI's, else PMIx's).
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) rank = std::getenv("PMIX_RANK");
  const std::string who = rank != nullptr ? absl::StrCat("rank ", rank, ": ") : "";
  for (char** env = environ; env != nullptr && *env != nullptr; ++env) {
    absl::string_view entry(*env);
    if (!absl::StartsWith(entry, "OVERLAP_")) continue;
    absl::string_view name = entry.substr(0, entry.find('='));
    if (env::Find(name) == nullptr) {
      spdlog::warn("overlap: {}ignoring unknown environment variable {}", who, std::string(name));
    }
  }
  absl::Status valid = config.Validate();
  if (!valid.ok()) return valid;
  return config;
}

std::vector<Config::Setting> Config::AsSettings() const {
  std::vector<Setting> settings;
  for (const Field& field : kFields) {
    std::string text;
    if (field.int_field != nullptr) text = absl::StrCat(this->*field.int_field);
    if (field.int64_field != nullptr) text = absl::StrCat(this->*field.int64_field);
    if (field.double_field != nullptr) text = DoubleText(this->*field.double_field);
    if (field.string_field != nullptr) text = this->*field.string_field;
    settings.emplace_back(field.var, std::move(text));
  }
  return settings;
}

absl::Status Config::Validate() const {
  for (const Field& field : kFields) {
    absl::Status s = CheckField(field, *this);
    if (!s.ok()) return s;
  }
  if (stall_timeout_s < stall_warning_s) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OVERLAP_STALL_TIMEOUT_S=", stall_timeout_s, " is below OVERLAP_STALL_WARNING_S=",
        stall_warning_s, ": a stall must be warned about before it fails"));
  }
  absl::StatusOr<std::string> compression = CompressionStage::Canonical(this->compression);
  if (!compression.ok()) {
    // The compressor's own message says what is wrong; "expected" would read as nonsense here.
    return absl::InvalidArgumentError(
        absl::StrCat("OVERLAP_COMPRESSION='", this->compression,
                     "' is not valid: ", compression.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace overlap
