// The planner settings of runtime/config.h: OVERLAP_PLANNER, OVERLAP_PROFILE_STEPS and the
// scheduler planner options, their defaults, parsing and the messages for bad values.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/config.h"

namespace overlap {
namespace {

// Sets one environment variable for the life of the object, so that a failed check cannot leave it
// set for the next test case.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

constexpr const char* kPlannerVariables[] = {
    "OVERLAP_PLANNER", "OVERLAP_PROFILE_STEPS",   "OVERLAP_STALENESS",    "OVERLAP_MAX_PERIOD",
    "OVERLAP_BUDGET",  "OVERLAP_PARTITION_BYTES", "OVERLAP_CREDIT_BYTES", "OVERLAP_REPLAN_DRIFT",
    "OVERLAP_AUTO_TRIALS",
};

void UnsetPlannerVariables() {
  for (const char* var : kPlannerVariables) unsetenv(var);
}

TEST_CASE("planner settings default to the observed plan", "[config]") {
  UnsetPlannerVariables();
  absl::StatusOr<Config> config = Config::FromEnvironment();
  REQUIRE(config.ok());
  CHECK(config->planner == "observed");
  CHECK(config->profile_steps == 5);
  CHECK(config->staleness == 0);
  CHECK(config->max_period == 1);
  CHECK(config->budget == 0);  // synchronous unless the user grants a budget
  CHECK(config->partition_bytes == 0);
  CHECK(config->credit_bytes == 0);
  CHECK(config->replan_drift == 0.25);
  CHECK(config->auto_trials == 3);
  // The defaults set in code are valid as they are.
  CHECK(Config().Validate().ok());
}

TEST_CASE("planner settings come from OVERLAP_* variables", "[config]") {
  UnsetPlannerVariables();
  ScopedEnv planner("OVERLAP_PLANNER", "bytescheduler");
  ScopedEnv profile_steps("OVERLAP_PROFILE_STEPS", "12");
  ScopedEnv staleness("OVERLAP_STALENESS", "3");
  ScopedEnv max_period("OVERLAP_MAX_PERIOD", "8");
  ScopedEnv budget("OVERLAP_BUDGET", "2.5");
  ScopedEnv partition("OVERLAP_PARTITION_BYTES", "4194304");
  ScopedEnv credit("OVERLAP_CREDIT_BYTES", "16777216");
  ScopedEnv drift("OVERLAP_REPLAN_DRIFT", "0.5");
  ScopedEnv trials("OVERLAP_AUTO_TRIALS", "3");
  absl::StatusOr<Config> config = Config::FromEnvironment();
  REQUIRE(config.ok());
  CHECK(config->planner == "bytescheduler");
  CHECK(config->profile_steps == 12);
  CHECK(config->staleness == 3);
  CHECK(config->max_period == 8);
  CHECK(config->budget == 2.5);
  CHECK(config->partition_bytes == 4194304);
  CHECK(config->credit_bytes == 16777216);
  CHECK(config->replan_drift == 0.5);
  CHECK(config->auto_trials == 3);
}

TEST_CASE("every planner name is accepted", "[config]") {
  UnsetPlannerVariables();
  for (const char* name : {"observed", "wfbp", "fusion", "mgwfbp", "bytescheduler", "usbyte",
                           "dear", "deft", "auto"}) {
    ScopedEnv planner("OVERLAP_PLANNER", name);
    absl::StatusOr<Config> config = Config::FromEnvironment();
    INFO("OVERLAP_PLANNER=" << name);
    REQUIRE(config.ok());
    CHECK(config->planner == name);
  }
}

TEST_CASE("planner settings accept the ends of their ranges", "[config]") {
  UnsetPlannerVariables();
  struct Case {
    const char* var;
    const char* value;
  };
  const Case cases[] = {
      {"OVERLAP_PROFILE_STEPS", "1"}, {"OVERLAP_PROFILE_STEPS", "1000"},
      {"OVERLAP_STALENESS", "0"},     {"OVERLAP_STALENESS", "16"},
      {"OVERLAP_MAX_PERIOD", "1"},    {"OVERLAP_MAX_PERIOD", "64"},
      {"OVERLAP_BUDGET", "-1"},       {"OVERLAP_BUDGET", "0"},
      {"OVERLAP_BUDGET", "1e6"},      {"OVERLAP_PARTITION_BYTES", "0"},
      {"OVERLAP_CREDIT_BYTES", "0"},  {"OVERLAP_REPLAN_DRIFT", "0"},
      {"OVERLAP_REPLAN_DRIFT", "10"},  {"OVERLAP_AUTO_TRIALS", "1"},
      {"OVERLAP_AUTO_TRIALS", "8"},
  };
  for (const Case& c : cases) {
    ScopedEnv env(c.var, c.value);
    absl::StatusOr<Config> config = Config::FromEnvironment();
    INFO(c.var << "=" << c.value);
    CHECK(config.ok());
  }
}

TEST_CASE("bad planner settings name the variable, the value and what is expected", "[config]") {
  UnsetPlannerVariables();
  const std::string planners =
      "one of observed, wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft, auto";
  const std::string budget =
      "-1 or a number in [0, 1e6] (-1: max(staleness, (max_period - 1) / 2))";
  // A value that does not parse gets the same message as one out of range: what is accepted.
  const std::string bytes = "a byte count in 0..1099511627776 (0 tunes it)";
  struct Case {
    const char* var;
    const char* value;
    std::string message;
  };
  const Case cases[] = {
      {"OVERLAP_PLANNER", "foo", "OVERLAP_PLANNER='foo' is not valid: expected " + planners},
      {"OVERLAP_PLANNER", "", "OVERLAP_PLANNER='' is not valid: expected " + planners},
      {"OVERLAP_PLANNER", "DEFT", "OVERLAP_PLANNER='DEFT' is not valid: expected " + planners},
      {"OVERLAP_PROFILE_STEPS", "0",
       "OVERLAP_PROFILE_STEPS='0' is not valid: expected an integer in 1..1000"},
      {"OVERLAP_PROFILE_STEPS", "1001",
       "OVERLAP_PROFILE_STEPS='1001' is not valid: expected an integer in 1..1000"},
      // Checked as a 64-bit value, so a huge count is not truncated into range.
      {"OVERLAP_PROFILE_STEPS", "4294967297",
       "OVERLAP_PROFILE_STEPS='4294967297' is not valid: expected an integer in 1..1000"},
      {"OVERLAP_PROFILE_STEPS", "five",
       "OVERLAP_PROFILE_STEPS='five' is not valid: expected an integer in 1..1000"},
      {"OVERLAP_AUTO_TRIALS", "0",
       "OVERLAP_AUTO_TRIALS='0' is not valid: expected an integer in 1..8"},
      {"OVERLAP_STALENESS", "17",
       "OVERLAP_STALENESS='17' is not valid: expected an integer in 0..16"},
      {"OVERLAP_STALENESS", "-1",
       "OVERLAP_STALENESS='-1' is not valid: expected an integer in 0..16"},
      {"OVERLAP_STALENESS", "1.5",
       "OVERLAP_STALENESS='1.5' is not valid: expected an integer in 0..16"},
      {"OVERLAP_MAX_PERIOD", "0",
       "OVERLAP_MAX_PERIOD='0' is not valid: expected an integer in 1..64"},
      {"OVERLAP_MAX_PERIOD", "65",
       "OVERLAP_MAX_PERIOD='65' is not valid: expected an integer in 1..64"},
      {"OVERLAP_BUDGET", "-2", "OVERLAP_BUDGET='-2' is not valid: expected " + budget},
      {"OVERLAP_BUDGET", "-0.5", "OVERLAP_BUDGET='-0.5' is not valid: expected " + budget},
      {"OVERLAP_BUDGET", "nan", "OVERLAP_BUDGET='nan' is not valid: expected " + budget},
      {"OVERLAP_BUDGET", "inf", "OVERLAP_BUDGET='inf' is not valid: expected " + budget},
      {"OVERLAP_BUDGET", "lots", "OVERLAP_BUDGET='lots' is not valid: expected " + budget},
      {"OVERLAP_PARTITION_BYTES", "-1",
       "OVERLAP_PARTITION_BYTES='-1' is not valid: expected " + bytes},
      {"OVERLAP_PARTITION_BYTES", "4MB",
       "OVERLAP_PARTITION_BYTES='4MB' is not valid: expected " + bytes},
      {"OVERLAP_CREDIT_BYTES", "-1", "OVERLAP_CREDIT_BYTES='-1' is not valid: expected " + bytes},
      {"OVERLAP_REPLAN_DRIFT", "nan",
       "OVERLAP_REPLAN_DRIFT='nan' is not valid: expected a fraction in [0, 10] (0 never re-plans "
       "on drift)"},
      {"OVERLAP_REPLAN_DRIFT", "11",
       "OVERLAP_REPLAN_DRIFT='11' is not valid: expected a fraction in [0, 10] (0 never re-plans "
       "on drift)"},
      {"OVERLAP_REPLAN_DRIFT", "-0.5",
       "OVERLAP_REPLAN_DRIFT='-0.5' is not valid: expected a fraction in [0, 10] (0 never "
       "re-plans on drift)"},
      {"OVERLAP_REPLAN_DRIFT", "fast",
       "OVERLAP_REPLAN_DRIFT='fast' is not valid: expected a fraction in [0, 10] (0 never "
       "re-plans on drift)"},
  };
  for (const Case& c : cases) {
    ScopedEnv env(c.var, c.value);
    absl::StatusOr<Config> config = Config::FromEnvironment();
    INFO(c.var << "='" << c.value << "'");
    REQUIRE(!config.ok());
    CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(config.status().message() == c.message);
  }
}

TEST_CASE("Validate checks planner settings made in code", "[config]") {
  Config config;
  config.planner = "deft";
  config.staleness = 16;
  config.max_period = 64;
  config.budget = 1e6;
  config.replan_drift = 10;
  CHECK(config.Validate().ok());
  struct Case {
    const char* name;
    void (*spoil)(Config&);
    const char* var;
  };
  const Case cases[] = {
      {"planner", [](Config& c) { c.planner = "nope"; }, "OVERLAP_PLANNER"},
      {"profile_steps", [](Config& c) { c.profile_steps = 0; }, "OVERLAP_PROFILE_STEPS"},
      {"staleness", [](Config& c) { c.staleness = 17; }, "OVERLAP_STALENESS"},
      {"max_period", [](Config& c) { c.max_period = 0; }, "OVERLAP_MAX_PERIOD"},
      {"budget", [](Config& c) { c.budget = -2; }, "OVERLAP_BUDGET"},
      {"partition_bytes", [](Config& c) { c.partition_bytes = -1; }, "OVERLAP_PARTITION_BYTES"},
      {"credit_bytes", [](Config& c) { c.credit_bytes = -1; }, "OVERLAP_CREDIT_BYTES"},
      {"replan_drift", [](Config& c) { c.replan_drift = 10.5; }, "OVERLAP_REPLAN_DRIFT"},
  };
  for (const Case& c : cases) {
    Config bad = config;
    c.spoil(bad);
    absl::Status status = bad.Validate();
    INFO(c.name);
    REQUIRE(!status.ok());
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(status.message()).rfind(std::string(c.var) + "=", 0) == 0);
  }
}

}  // namespace
}  // namespace overlap
