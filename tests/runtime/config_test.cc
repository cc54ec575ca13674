#include "runtime/config.h"

#include <catch2/catch.hpp>
#include <cstdlib>

#include "collectives/half.h"
#include "collectives/scaling.h"

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

TEST_CASE("bad values name the variable, the value and what is expected", "[config]") {
  struct Case {
    const char* var;
    const char* value;
    const char* message;
  };
  const Case cases[] = {
      {"OVERLAP_FUSION_THRESHOLD", "64MB",
       "OVERLAP_FUSION_THRESHOLD='64MB' is not valid: expected an integer"},
      {"OVERLAP_FUSION_THRESHOLD", "-1",
       "OVERLAP_FUSION_THRESHOLD='-1' is not valid: expected a byte count >= 0"},
      {"OVERLAP_NUM_CHANNELS", "0",
       "OVERLAP_NUM_CHANNELS='0' is not valid: expected an integer in 1..16"},
      {"OVERLAP_PLAN_AFTER_STEPS", "1001",
       "OVERLAP_PLAN_AFTER_STEPS='1001' is not valid: expected an integer in 0..1000"},
      {"OVERLAP_STALL_TIMEOUT_S", "soon",
       "OVERLAP_STALL_TIMEOUT_S='soon' is not valid: expected a number"},
      {"OVERLAP_COLLECTIVE_TIMEOUT_S", "-3",
       "OVERLAP_COLLECTIVE_TIMEOUT_S='-3' is not valid: expected seconds in (0, 1e7]"},
      {"OVERLAP_DIRECT_THRESHOLD", "-5",
       "OVERLAP_DIRECT_THRESHOLD='-5' is not valid: expected a byte count >= 0"},
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
