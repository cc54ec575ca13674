#include "numeric/half.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "collectives/dtype.h"

namespace overlap {
namespace {

TEST_CASE("fp16 round trip is exact for every half value", "[half]") {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      REQUIRE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    REQUIRE(FloatToHalf(f) == h);
  }
}

TEST_CASE("fp16 rounds to nearest even", "[half]") {
  // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): ties go to the even one, 1.
  REQUIRE(FloatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3c00u);
  // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  REQUIRE(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02u);
  REQUIRE(FloatToHalf(65504.0f) == 0x7bffu);
  REQUIRE(FloatToHalf(65520.0f) == 0x7c00u);               // rounds up to infinity
  REQUIRE(FloatToHalf(std::ldexp(1.0f, -25)) == 0x0000u);  // half of the smallest subnormal: even
  REQUIRE(FloatToHalf(std::ldexp(1.5f, -25)) == 0x0001u);
  REQUIRE(FloatToHalf(-std::numeric_limits<float>::infinity()) == 0xfc00u);
}

TEST_CASE("bf16 rounds to nearest even and keeps NaN", "[half]") {
  REQUIRE(FloatToBFloat16(1.0f) == 0x3f80u);
  REQUIRE(FloatToBFloat16(BitsToFloat(0x3f808000u)) == 0x3f80u);  // tie, even stays
  REQUIRE(FloatToBFloat16(BitsToFloat(0x3f818000u)) == 0x3f82u);  // tie, odd rounds up
  REQUIRE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  REQUIRE(BFloat16ToFloat(FloatToBFloat16(3.0f)) == 3.0f);
}

TEST_CASE("dtype validation names the bad value", "[dtype]") {
  REQUIRE(ValidateDataType(DataType::kBFloat16).ok());
  const absl::Status bad = ValidateDataType(static_cast<DataType>(42));
  REQUIRE(bad.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(bad.message().find("42") != absl::string_view::npos);
  REQUIRE(!ValidateReduceOp(static_cast<ReduceOp>(9)).ok());
  DataType parsed;
  REQUIRE(ParseDataType("bf16", &parsed).ok());
  REQUIRE(parsed == DataType::kBFloat16);
  REQUIRE(DataTypeSize(DataType::kInt64) == 8);
}

}  // namespace
}  // namespace overlap
