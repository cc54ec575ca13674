#include <catch2/catch.hpp>

#include "compression/compressor.h"
#include "compression/covap.h"

namespace overlap {
namespace compress {
namespace {

bool Contains(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST_CASE("config parses name and parameters and prints them canonically", "[config]") {
  absl::StatusOr<CompressorConfig> c =
      CompressorConfig::Parse(" topk : method=sampled, ratio=0.01 ");
  REQUIRE(c.ok());
  REQUIRE(c->name == "topk");
  REQUIRE(c->params.at("ratio") == "0.01");
  REQUIRE(c->ToString() == "topk:method=sampled,ratio=0.01");
  REQUIRE(CompressorConfig::Parse("fp16")->ToString() == "fp16");
}

TEST_CASE("config rejects malformed specs", "[config]") {
  REQUIRE(CompressorConfig::Parse("").status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(CompressorConfig::Parse(":R=4").status().code() == absl::StatusCode::kInvalidArgument);
  const absl::Status no_eq = CompressorConfig::Parse("covap:R").status();
  REQUIRE(no_eq.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(Contains(no_eq, "'R' is not key=value"));
  REQUIRE(Contains(CompressorConfig::Parse("covap:R=2,R=3").status(), "given twice"));
}

TEST_CASE("unknown compressor name is InvalidArgument listing the known ones", "[config]") {
  const absl::Status s = MakeCompressor("zstd").status();
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(Contains(s, "unknown compressor 'zstd'"));
  REQUIRE(Contains(s, "covap"));
}

TEST_CASE("covap R < 1 and non-numbers are InvalidArgument naming the parameter", "[config]") {
  for (const char* spec : {"covap:R=0", "covap:R=-3"}) {
    const absl::Status s = MakeCompressor(spec).status();
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(Contains(s, "parameter 'R'"));
    REQUIRE(Contains(s, "out of range"));
  }
  REQUIRE(Contains(MakeCompressor("covap:R=four").status(), "'four' is not an integer"));
  REQUIRE(MakeCompressor("covap:R=4,alpha0=0.2").status().code() ==
          absl::StatusCode::kInvalidArgument);
}

TEST_CASE("covap R=auto derives R from the measured ratio or says it is missing", "[config]") {
  const absl::Status missing = MakeCompressor("covap").status();
  REQUIRE(missing.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(Contains(missing, "R=auto"));
  CompressorContext ctx;
  ctx.comm_compute_ratio = 2.5;
  auto c = MakeCompressor("covap:R=auto", ctx);
  REQUIRE(c.ok());
  REQUIRE((*c)->config().params.at("R") == "3");
  REQUIRE(CovapIntervalForRatio(0.3).value() == 1);
  REQUIRE(CovapIntervalForRatio(4.0).value() == 4);
  REQUIRE(CovapIntervalForRatio(1e9).value() == kMaxCovapInterval);
}

TEST_CASE("k out of range is InvalidArgument naming k and the tensor size", "[config]") {
  REQUIRE(MakeCompressor("topk:k=0").status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(MakeCompressor("randomk:ratio=1.5").status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(MakeCompressor("topk:ratio=0").status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(Contains(MakeCompressor("topk:k=5,ratio=0.1").status(), "not both"));
  for (const char* spec : {"topk:k=100", "randomk:k=100"}) {
    auto c = MakeCompressor(spec);
    REQUIRE(c.ok());
    const absl::Status s = (*c)->MaxPayloadBytes(50).status();
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(Contains(s, "'k' = 100"));
    REQUIRE(Contains(s, "50 elements"));
    ResidualState state(9, 50);
    std::vector<float> grad(50, 1.0f);
    std::vector<uint32_t> buf(1024);
    const absl::Status cs =
        (*c)->Compress(grad, state, 0, absl::MakeSpan(reinterpret_cast<uint8_t*>(buf.data()), 4096))
            .status();
    REQUIRE(cs.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(Contains(cs, "tensor 9"));
  }
}

TEST_CASE("unknown parameters are rejected with the accepted list", "[config]") {
  const absl::Status s = MakeCompressor("fp16:ratio=0.1").status();
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(Contains(s, "unknown parameter(s) ratio"));
  REQUIRE(Contains(s, "accepted: ef"));
  REQUIRE(Contains(MakeCompressor("bf16:ef=2").status(), "out of range [0, 1]"));
  REQUIRE(Contains(MakeCompressor("powersgd:rank=4,rnk=2").status(), "accepted: rank, seed"));
}

TEST_CASE("canonical configs spell out defaults so ranks compare fully", "[config]") {
  REQUIRE(MakeCompressor("topk").value()->config().ToString() == "topk:method=exact,ratio=0.01");
  REQUIRE(MakeCompressor("powersgd").value()->config().ToString() == "powersgd:rank=4,seed=0");
  REQUIRE(MakeCompressor("fp16").value()->config().ToString() == "fp16:ef=1");
  REQUIRE(MakeCompressor("covap:R=4").value()->config().ToString() ==
          "covap:R=4,alpha0=0.5,ramp_steps=0,shard=0");
}

TEST_CASE("combine kinds and payload dtypes tell the executor what to run", "[config]") {
  struct Row {
    const char* spec;
    Combine combine;
    DataType dtype;
  };
  for (const Row& row : {Row{"none", Combine::kAllreduce, DataType::kFloat32},
                         Row{"fp16", Combine::kAllreduce, DataType::kFloat16},
                         Row{"bf16", Combine::kAllreduce, DataType::kBFloat16},
                         Row{"covap:R=2", Combine::kAllreduce, DataType::kFloat32},
                         Row{"randomk", Combine::kAllreduce, DataType::kFloat32},
                         Row{"powersgd", Combine::kAllreduce, DataType::kFloat32},
                         Row{"topk", Combine::kAllgather, DataType::kUint8},
                         Row{"efsign", Combine::kAllgather, DataType::kUint8}}) {
    INFO(row.spec);
    auto c = MakeCompressor(row.spec).value();
    REQUIRE(c->combine() == row.combine);
    REQUIRE(c->payload_dtype() == row.dtype);
    REQUIRE(c->rounds() == (std::string(row.spec) == "powersgd" ? 2 : 1));
  }
}

}  // namespace
}  // namespace compress
}  // namespace overlap
