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

TEST_CASE("overlap_handles_wait waits for many handles in one call", "[c_api]") {
  constexpr int kN = 5;
  std::vector<std::vector<float>> xs(kN, std::vector<float>(3, 0.0f));
  const std::vector<int64_t> shape = {3};
  std::vector<overlap_handle*> handles(kN, nullptr);
  for (int i = 0; i < kN; ++i) {
    for (float& v : xs[static_cast<size_t>(i)]) v = static_cast<float>(i + Rank());
    overlap_tensor t = Describe(xs[static_cast<size_t>(i)], shape);
    REQUIRE(overlap_allreduce(absl::StrCat("c.many.", i).c_str(), &t, &t, 0, 1.0, 1.0, "none",
                              &handles[static_cast<size_t>(i)]) == 0);
  }
  int32_t done = 0;
  std::vector<uint8_t> updates(kN, 7);
  REQUIRE(overlap_handles_wait(handles.data(), kN, 30.0, &done, updates.data()) == 0);
  CHECK(done == kN);
  const float ranks_sum = static_cast<float>(Size() * (Size() - 1) / 2);
  for (int i = 0; i < kN; ++i) {
    CHECK(updates[static_cast<size_t>(i)] == 1);
    CHECK(xs[static_cast<size_t>(i)][2] == static_cast<float>(Size() * i) + ranks_sum);
  }
  // Resumes from *done: nothing left to wait for.
  CHECK(overlap_handles_wait(handles.data(), kN, 0.0, &done, updates.data()) == 0);
  // A null handle is named; bad counts are refused.
  std::vector<overlap_handle*> with_null = {handles[0], nullptr};
  done = 0;
  CHECK(overlap_handles_wait(with_null.data(), 2, 1.0, &done, updates.data()) == kInvalidArgument);
  CHECK(done == 1);
  CHECK(std::string(overlap_last_error()) == Me() + "wait on a null handle");
  CHECK(overlap_handles_wait(handles.data(), -1, 1.0, &done, updates.data()) == kInvalidArgument);
  CHECK(std::string(overlap_last_error()) == Me() + "overlap_handles_wait: malformed arguments");
  for (overlap_handle* h : handles) overlap_handle_free(h);
}

}  // namespace
}  // namespace overlap
