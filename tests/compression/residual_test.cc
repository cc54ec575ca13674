#include "compression/residual.h"

#include <catch2/catch.hpp>

#include "compression/compressor.h"
#include "tests/compression/test_util.h"

namespace overlap {
namespace compress {
namespace {

TEST_CASE("residual memory creates zeroed state per tensor and rejects size changes",
          "[residual]") {
  ResidualMemory memory("fp16");
  ResidualState* a = memory.Get(3, 5).value();
  REQUIRE(a->size() == 5);
  REQUIRE(a->residual()[4] == 0.0f);
  REQUIRE(memory.Get(3, 5).value() == a);
  const absl::Status s = memory.Get(3, 6).status();
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(s.message().find("tensor 3") != absl::string_view::npos);
  REQUIRE(memory.Find(4) == nullptr);
}

TEST_CASE("checkpoint save/restore resumes training bit for bit", "[residual]") {
  auto c = MakeCompressor("powersgd:rank=2").value();
  const std::string config = c->config().ToString();
  ResidualMemory memory(config);
  for (int64_t step = 0; step < 3; ++step) {
    for (int64_t id : {1, 2}) {
      ResidualState* s = memory.Get(id, 300 + id).value();
      testing::RunStep(*c, testing::GaussianGradient(300 + id, step * 10 + id), *s, step);
    }
  }
  const std::string snapshot = memory.Save();

  ResidualMemory restored(config);
  REQUIRE(restored.Restore(snapshot).ok());
  REQUIRE(restored.num_tensors() == 2);
  for (int64_t id : {1, 2}) {
    const ResidualState* a = memory.Find(id);
    const ResidualState* b = restored.Find(id);
    REQUIRE(b != nullptr);
    REQUIRE(std::equal(a->residual().begin(), a->residual().end(), b->residual().begin(),
                       b->residual().end()));
    REQUIRE(a->aux() == b->aux());  // the warm-start Q survives
  }
  // The next step gives identical results from the original and the restored memory.
  const std::vector<float> grad = testing::GaussianGradient(301, 99);
  const std::vector<float> x = testing::RunStep(*c, grad, *memory.Get(1, 301).value(), 3);
  const std::vector<float> y = testing::RunStep(*c, grad, *restored.Get(1, 301).value(), 3);
  REQUIRE(x == y);
}

TEST_CASE("restore rejects another compressor's checkpoint and corrupt bytes", "[residual]") {
  ResidualMemory memory("covap:R=4");
  REQUIRE(memory.Get(1, 10).ok());
  const std::string snapshot = memory.Save();

  ResidualMemory other("topk:k=1,method=exact");
  const absl::Status wrong = other.Restore(snapshot);
  REQUIRE(wrong.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(wrong.message().find("covap:R=4") != absl::string_view::npos);

  ResidualMemory same("covap:R=4");
  REQUIRE(same.Restore(snapshot.substr(0, snapshot.size() - 3)).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(same.Restore("garbage").code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(same.Restore(snapshot + "x").code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(same.num_tensors() == 0);  // failed restores change nothing
}

}  // namespace
}  // namespace compress
}  // namespace overlap
