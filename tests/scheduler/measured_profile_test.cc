#include "scheduler/measured_profile.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "scheduler/builtin.h"

namespace overlap::sched {
namespace {

IterationMeasurement Measure(const Profile& p) {
  IterationMeasurement m{p.model, p.forward_ms, p.backward_ms, p.update_ms, 0, {}};
  for (const TensorInfo& t : p.tensors) {
    m.tensors.push_back({t.name, t.bytes, t.dtype, t.ready_ms, t.first_use_ms});
  }
  return m;
}

TEST_CASE("Consistent measurements rebuild the same per-tensor timings") {
  for (const std::string& model : BuiltinModelNames()) {
    INFO(model);
    const Profile original = *LoadBuiltinProfile(model);
    auto rebuilt = ProfileFromMeasurements(Measure(original));
    INFO(rebuilt.status().message());
    REQUIRE(rebuilt.ok());
    CHECK(rebuilt->forward_ms == Approx(original.forward_ms));
    CHECK(rebuilt->backward_ms == Approx(original.backward_ms));
    CHECK(rebuilt->total_bytes == original.total_bytes);
    REQUIRE(rebuilt->tensors.size() == original.tensors.size());
    for (const TensorInfo& t : rebuilt->tensors) {
      const auto it = std::find_if(original.tensors.begin(), original.tensors.end(),
                                   [&](const TensorInfo& o) { return o.name == t.name; });
      REQUIRE(it != original.tensors.end());
      CHECK(t.first_use_ms == Approx(it->first_use_ms).margin(1e-9));
      // Layers with zero forward time merge with their neighbour, which can only make a
      // gradient later, never earlier.
      CHECK(t.ready_ms >= it->ready_ms - 1e-9);
    }
  }
}

TEST_CASE("Inconsistent readiness is clamped later, never earlier") {
  // b is read after a in forward, so its layer's backward must end before a's; a measurement
  // that says a is ready first is clamped to b's time.
  IterationMeasurement m{"toy", 10, 20, 1, 0, {}};
  m.tensors = {{"a", 400, DataType::kFloat32, 5, 0}, {"b", 800, DataType::kFloat32, 12, 4}};
  auto p = ProfileFromMeasurements(m);
  REQUIRE(p.ok());
  CHECK(p->forward_ms == Approx(10));
  CHECK(p->backward_ms == Approx(20));
  const TensorInfo& a = p->tensors[0].name == "a" ? p->tensors[0] : p->tensors[1];
  const TensorInfo& b = p->tensors[0].name == "b" ? p->tensors[0] : p->tensors[1];
  CHECK(b.ready_ms == Approx(12));
  CHECK(a.ready_ms == Approx(12));
  CHECK(a.first_use_ms == Approx(0));
  CHECK(b.first_use_ms == Approx(4));
}

TEST_CASE("Bad measurements name the tensor and the field") {
  IterationMeasurement m{"toy", 10, 20, 1, 0, {{"w", 400, DataType::kFloat32, 25, 0}}};
  auto p = ProfileFromMeasurements(m);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(std::string(p.status().message()), Catch::Contains("'w': ready_ms 25"));
  m.tensors[0] = {"w", 400, DataType::kFloat32, 5, -1};
  CHECK_THAT(std::string(ProfileFromMeasurements(m).status().message()),
             Catch::Contains("first_use_ms"));
  m.tensors[0] = {"w", 401, DataType::kFloat32, 5, 1};
  CHECK_THAT(std::string(ProfileFromMeasurements(m).status().message()),
             Catch::Contains("multiple of 4"));
  m.tensors.clear();
  CHECK_FALSE(ProfileFromMeasurements(m).ok());
}

}  // namespace
}  // namespace overlap::sched
