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
constexpr int32_t kSum = static_cast<int32_t>(ReduceOp::kSum);

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

TEST_CASE("handles are waited on in one call: every result, the first failure, or a timeout",
          "[c_api]") {
  const std::vector<int64_t> shape = {4};
  const std::vector<int64_t> odd_shape = {4 + Rank()};
  std::vector<float> a(4, 1.0f), b(4 + Rank(), 2.0f), c(4, 3.0f);
  overlap_tensor ta = Describe(a, shape), tb = Describe(b, odd_shape), tc = Describe(c, shape);
  overlap_handle* h[3] = {nullptr, nullptr, nullptr};
  REQUIRE(overlap_allreduce("c.all.a", &ta, &ta, kSum, 1.0, 1.0, "none", &h[0]) == 0);
  REQUIRE(overlap_allreduce("c.all.b", &tb, &tb, kSum, 1.0, 1.0, "none", &h[1]) == 0);
  REQUIRE(overlap_allreduce("c.all.c", &tc, &tc, kSum, 1.0, 1.0, "none", &h[2]) == 0);
  int32_t updates[3] = {-1, -1, -1}, first = -2, running = -1;
  // The ranks disagree on c.all.b's shape: its error, on every rank, and its index.
  const int rc = overlap_handles_wait(h, 3, 30.0, updates, &first, &running);
  CHECK(rc != 0);
  CHECK(rc != 4);
  CHECK(first == 1);
  CHECK(running == 0);
  CHECK(updates[0] == 1);
  CHECK_THAT(std::string(overlap_last_error()), Catch::Contains("c.all.b"));
  CHECK(overlap_handles_wait(h, 1, 30.0, updates, &first, &running) == 0);
  CHECK(first == -1);
  CHECK(a[0] == static_cast<float>(Size()));
  for (overlap_handle* handle : h) overlap_handle_free(handle);

  // Rank 1 submits c.all.late only after rank 0's wait has run out.
  std::vector<float> late(4, 1.0f), sync(1, 1.0f);
  const std::vector<int64_t> one = {1};
  overlap_tensor tl = Describe(late, shape), ts = Describe(sync, one);
  overlap_handle* pending[1] = {nullptr};
  if (Rank() == 0) {
    REQUIRE(overlap_allreduce("c.all.late", &tl, &tl, kSum, 1.0, 1.0, "none", &pending[0]) == 0);
    CHECK(overlap_handles_wait(pending, 1, 0.2, updates, &first, &running) == 4);
    CHECK(first == 0);
    CHECK(running == 1);
    CHECK(overlap_handle_poll(pending[0]) == 0);
  }
  overlap_handle* synced = nullptr;
  REQUIRE(overlap_allreduce("c.all.sync", &ts, &ts, kSum, 1.0, 1.0, "none", &synced) == 0);
  REQUIRE(overlap_handle_wait(synced, 30.0) == 0);
  overlap_handle_free(synced);
  if (Rank() != 0) {
    REQUIRE(overlap_allreduce("c.all.late", &tl, &tl, kSum, 1.0, 1.0, "none", &pending[0]) == 0);
  }
  CHECK(overlap_handles_wait(pending, 1, 30.0, updates, &first, &running) == 0);
  CHECK(running == 0);
  CHECK(late[0] == static_cast<float>(Size()));
  overlap_handle_free(pending[0]);

  CHECK(overlap_handles_wait(nullptr, 2, 1.0, nullptr, nullptr, nullptr) == kInvalidArgument);
  CHECK(std::string(overlap_last_error()) == Me() + "wait on 2 handles at null");
  CHECK(overlap_handles_wait(nullptr, 0, 1.0, nullptr, nullptr, nullptr) == 0);
}

}  // namespace
}  // namespace overlap
