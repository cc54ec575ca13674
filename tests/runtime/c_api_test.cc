// The C ABI (runtime/c_api.h) that overlap.torch and overlap.tensorflow call through ctypes: bad
// arguments return InvalidArgument, and overlap_last_error() names the rank, the operation, the
// tensor and the cause (docs/bad-inputs.md quotes these messages). Runs on 2 ranks.
#include "runtime/c_api.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

constexpr int kInvalidArgument = static_cast<int>(absl::StatusCode::kInvalidArgument);

std::string Me() { return absl::StrCat("rank ", Rank(), ": "); }

overlap_tensor Describe(std::vector<float>& data, const std::vector<int64_t>& shape) {
  overlap_tensor t{};
  t.data = data.data();
  t.capacity_bytes = static_cast<int64_t>(data.size() * sizeof(float));
  t.dtype = static_cast<int32_t>(DataType::kFloat32);
  t.ndim = static_cast<int32_t>(shape.size());
  t.shape = shape.data();
  t.device_kind = static_cast<int32_t>(DeviceKind::kCpu);
  return t;
}

TEST_CASE("bad tensor descriptions are refused with the rank and the tensor named", "[c_api]") {
  std::vector<float> x(4, 1.0f);
  const std::vector<int64_t> shape = {4};
  overlap_tensor good = Describe(x, shape);
  overlap_handle* h = nullptr;

  CHECK(overlap_allreduce("c.null", nullptr, &good, 1, 1.0, 1.0, "none", &h) == kInvalidArgument);
  CHECK(std::string(overlap_last_error()) == Me() + "allreduce 'c.null': null tensor");

  overlap_tensor malformed = good;
  malformed.ndim = -1;
  CHECK(overlap_allreduce("c.ndim", &malformed, &malformed, 1, 1.0, 1.0, "none", &h) ==
        kInvalidArgument);
  CHECK(std::string(overlap_last_error()) ==
        Me() + "allreduce 'c.ndim': malformed tensor description (ndim -1, capacity 16)");

  overlap_tensor device = good;
  device.device_kind = 7;
  CHECK(overlap_broadcast("c.device", &device, &device, 0, &h) == kInvalidArgument);
  CHECK(std::string(overlap_last_error()) == Me() + "broadcast 'c.device': unknown device kind 7");

  CHECK(overlap_grouped_allreduce(0, nullptr, nullptr, nullptr, 1, 1.0, 1.0, "none", &h) ==
        kInvalidArgument);
  CHECK(std::string(overlap_last_error()) ==
        Me() + "grouped allreduce: 0 tensors (need at least 1)");

  CHECK(overlap_allgather(nullptr, &good, &h) == kInvalidArgument);
  CHECK(std::string(overlap_last_error()) == Me() + "allgather: empty tensor name");

  CHECK(overlap_handle_wait(nullptr, 1.0) == kInvalidArgument);
  CHECK(std::string(overlap_last_error()) == Me() + "wait on a null handle");
}

TEST_CASE("a runtime-owned result is checked against the caller's buffer", "[c_api]") {
  std::vector<float> x(4, 1.0f);
  const std::vector<int64_t> shape = {4};
  overlap_tensor t = Describe(x, shape);
  overlap_handle* h = nullptr;
  REQUIRE(overlap_allgather("c.gathered", &t, &h) == 0);
  REQUIRE(overlap_handle_wait(h, 30.0) == 0);
  std::vector<float> small(2);
  CHECK(overlap_handle_copy_output(h, small.data(), 8) == kInvalidArgument);
  CHECK(std::string(overlap_last_error()) ==
        Me() + absl::StrCat("'c.gathered': output holds ", 16 * Size(), " bytes, not 8"));
  const void* data = nullptr;
  int32_t dtype = 0, ndim = 0;
  CHECK(overlap_handle_output(h, &data, &dtype, &ndim, nullptr, 0) == kInvalidArgument);
  CHECK(std::string(overlap_last_error()) ==
        Me() + "'c.gathered': output has 1 dimensions, room for 0");
  overlap_handle_free(h);
}

}  // namespace
}  // namespace overlap
