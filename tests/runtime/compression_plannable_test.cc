// What a scheduled plan compresses with (CompressionStage::Plannable, PayloadRatio): the runtime
// picks its planned tensors and the plan scheduler its planner's compressor from the same answer,
// given the configured default (OVERLAP_COMPRESSION) as the user wrote it.
#include <catch2/catch.hpp>
#include <string>

#include "runtime/planes/compression_stage.h"

namespace overlap {
namespace {

// The canonical form, which the submitted tensors carry too (Runtime::Enqueue).
std::string Canonical(const std::string& spec) {
  absl::StatusOr<std::string> canonical = CompressionStage::Canonical(spec);
  REQUIRE(canonical.ok());
  return *canonical;
}

TEST_CASE("a plan compresses with allreduce-combined compressors whose parameters are given") {
  CHECK(CompressionStage::Plannable("fp16") == Canonical("fp16"));
  CHECK(CompressionStage::Plannable("bf16") == Canonical("bf16"));
  CHECK(CompressionStage::Plannable("covap:R=4") == Canonical("covap:R=4"));
  CHECK(CompressionStage::CompressorName(CompressionStage::Plannable("covap:R=4")) == "covap");
  // Not: none, allgather-combined compressors, a parameter derived at run time (covap's R
  // defaults to auto), a spec that does not parse.
  CHECK(CompressionStage::Plannable("none") == "none");
  CHECK(CompressionStage::Plannable("") == "none");
  CHECK(CompressionStage::Plannable("topk:ratio=0.01") == "none");
  CHECK(CompressionStage::Plannable("covap") == "none");
  CHECK(CompressionStage::Plannable("covap:R=auto") == "none");
  CHECK(CompressionStage::Plannable("zip") == "none");
}

TEST_CASE("a plan's payload ratio and compressor name") {
  CHECK(CompressionStage::PayloadRatio("none") == 1.0);
  CHECK(CompressionStage::PayloadRatio(Canonical("fp16")) == 0.5);
  const std::string randomk = CompressionStage::Plannable("randomk:ratio=0.05");
  REQUIRE(randomk != "none");
  CHECK(CompressionStage::PayloadRatio(randomk) > 0.01);
  CHECK(CompressionStage::PayloadRatio(randomk) < 0.5);
  CHECK(CompressionStage::CompressorName(randomk) == "randomk");
  CHECK(CompressionStage::CompressorName("none") == "none");
}

}  // namespace
}  // namespace overlap
