// CUDA kernels against the CPU compressors and kernels. Needs a GPU; without one every GPU case
// prints why it skipped, or fails under OVERLAP_REQUIRE_GPU=1 (tests/gpu/gpu_gate.h); the build
// and link still prove the nvcc object is usable.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "collectives/half.h"
#include "compression/compressor.h"
#include "compression/covap.h"
#include "compression/cuda/kernels.h"
#include "compression/kernels/cpu.h"
#include "tests/compression/test_util.h"
#include "tests/gpu/gpu_gate.h"

namespace overlap {
namespace compress {
namespace {

using ::overlap::testing::GpuOrSkip;

// A device copy of a host vector, freed on scope exit.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : size_(host.size()) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(1, size_) * sizeof(T)) ==
            cudaSuccess);
    REQUIRE(cudaMemcpy(ptr_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice) ==
            cudaSuccess);
  }
  explicit DeviceVector(size_t n) : DeviceVector(std::vector<T>(n)) {}
  ~DeviceVector() { cudaFree(ptr_); }
  T* get() { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    REQUIRE(cudaMemcpy(host.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t size_;
};

std::vector<float> Inputs(size_t n) {
  std::vector<float> x = testing::GaussianGradient(n, 21, 100.0f);
  const float specials[] = {70000.0f, -1e9f, INFINITY, -INFINITY, NAN,
                            0.0f,     -0.0f, 1e-8f,    65520.0f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(float) && i < n; ++i) x[i * 7 % n] = specials[i];
  return x;
}

TEST_CASE("CUDA kernels validate sizes before touching the device", "[cuda]") {
  REQUIRE(cuda::TopKCompress(nullptr, nullptr, nullptr, 10, 11, nullptr, nullptr).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(cuda::TopKCompress(nullptr, nullptr, nullptr, 10, 0, nullptr, nullptr).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(cuda::CovapCompress(nullptr, nullptr, nullptr, 10, 5, 0, 0, 1.0f, nullptr).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(cuda::TopKWorkspaceBytes() >= 2048 * sizeof(uint32_t));
  REQUIRE(cuda::EfSignWorkspaceBytes() == sizeof(double));
}

TEST_CASE("CUDA fp16/bf16 error-feedback casts are bit-identical to the CPU", "[cuda]") {
  if (!GpuOrSkip()) return;
  const size_t n = 100003;
  const std::vector<float> grad = Inputs(n);
  const std::vector<float> residual0 = testing::GaussianGradient(n, 22, 0.01f);
  for (bool bf16 : {false, true}) {
    std::vector<float> r_cpu = residual0;
    std::vector<uint16_t> p_cpu(n);
    if (bf16) {
      kernels::ErrorFeedbackToBFloat16(grad, absl::MakeSpan(r_cpu), absl::MakeSpan(p_cpu),
                                       kernels::BestIsa());
    } else {
      kernels::ErrorFeedbackToHalf(grad, absl::MakeSpan(r_cpu), absl::MakeSpan(p_cpu),
                                   kernels::BestIsa());
    }
    DeviceVector<float> g(grad), r(residual0);
    DeviceVector<uint16_t> p(n);
    REQUIRE((bf16 ? cuda::ErrorFeedbackToBFloat16(g.get(), r.get(), p.get(), n, nullptr)
                  : cuda::ErrorFeedbackToHalf(g.get(), r.get(), p.get(), n, nullptr))
                .ok());
    REQUIRE(p.ToHost() == p_cpu);
    const std::vector<float> r_gpu = r.ToHost();
    for (size_t i = 0; i < n; ++i) REQUIRE(FloatBits(r_gpu[i]) == FloatBits(r_cpu[i]));
  }
}

TEST_CASE("CUDA fp16/bf16 decode matches half.h for all 65536 inputs", "[cuda]") {
  if (!GpuOrSkip()) return;
  std::vector<uint16_t> in(65536);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i);
  DeviceVector<uint16_t> d_in(in);
  DeviceVector<float> out(in.size());
  REQUIRE(cuda::HalfToFloat(d_in.get(), out.get(), in.size(), false, nullptr).ok());
  std::vector<float> h = out.ToHost();
  REQUIRE(cuda::BFloat16ToFloat(d_in.get(), out.get(), in.size(), false, nullptr).ok());
  std::vector<float> b = out.ToHost();
  for (size_t i = 0; i < in.size(); ++i) {
    REQUIRE(FloatBits(h[i]) == FloatBits(HalfToFloat(in[i])));
    REQUIRE(FloatBits(b[i]) == FloatBits(BFloat16ToFloat(in[i])));
  }
}

TEST_CASE("CUDA covap step equals the CPU compressor's payload and residual", "[cuda]") {
  if (!GpuOrSkip()) return;
  const size_t n = 10007, shard = 100;
  const int interval = 3;
  auto cpu = MakeCompressor("covap:R=3,shard=100,alpha0=0.5,ramp_steps=4").value();
  ResidualState state(1, n);
  DeviceVector<float> r(n);
  DeviceVector<float> payload(n);
  for (int64_t step = 0; step < 6; ++step) {
    const std::vector<float> grad = testing::GaussianGradient(n, static_cast<uint32_t>(step));
    testing::Payload p_cpu(cpu->MaxPayloadBytes(n).value());
    const size_t bytes = cpu->Compress(grad, state, step, p_cpu.span()).value();
    DeviceVector<float> g(grad);
    REQUIRE(cuda::CovapCompress(g.get(), r.get(), payload.get(), n, shard, interval, step,
                                CovapAlpha(0.5, 4, step), nullptr)
                .ok());
    const std::vector<float> p_gpu = payload.ToHost();
    const float* p = reinterpret_cast<const float*>(p_cpu.span().data());
    for (size_t i = 0; i < bytes / 4; ++i) REQUIRE(FloatBits(p_gpu[i]) == FloatBits(p[i]));
    const std::vector<float> r_gpu = r.ToHost();
    for (size_t i = 0; i < n; ++i) REQUIRE(FloatBits(r_gpu[i]) == FloatBits(state.residual()[i]));
    DeviceVector<float> decoded(n);
    REQUIRE(
        cuda::CovapDecode(payload.get(), decoded.get(), n, shard, interval, step, false, nullptr)
            .ok());
    std::vector<float> want(n);
    REQUIRE(cpu->Decompress(p_cpu.span(), state, step, absl::MakeSpan(want)).ok());
    REQUIRE(decoded.ToHost() == want);
  }
}

TEST_CASE("CUDA top-k selects exactly the CPU's k largest", "[cuda]") {
  if (!GpuOrSkip()) return;
  const size_t n = 200003, k = 2000;
  const std::vector<float> grad = testing::GaussianGradient(n, 31);
  auto cpu = MakeCompressor("topk:k=2000").value();
  ResidualState state(1, n);
  testing::Payload p_cpu(cpu->MaxPayloadBytes(n).value());
  REQUIRE(cpu->Compress(grad, state, 0, p_cpu.span()).ok());

  DeviceVector<float> g(grad), r(n);
  DeviceVector<uint8_t> payload(4 + 8 * k), workspace(cuda::TopKWorkspaceBytes());
  REQUIRE(cuda::TopKCompress(g.get(), r.get(), payload.get(), n, k, workspace.get(), nullptr).ok());
  const std::vector<uint8_t> p_gpu = payload.ToHost();
  auto pairs = [k](const uint8_t* bytes) {
    const auto* idx = reinterpret_cast<const uint32_t*>(bytes + 4);
    const auto* val = reinterpret_cast<const float*>(bytes + 4 + 4 * k);
    std::vector<std::pair<uint32_t, float>> out;
    for (size_t i = 0; i < reinterpret_cast<const uint32_t*>(bytes)[0]; ++i) {
      out.emplace_back(idx[i], val[i]);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  REQUIRE(pairs(p_gpu.data()) == pairs(p_cpu.span().data()));
  const std::vector<float> r_gpu = r.ToHost();
  for (size_t i = 0; i < n; ++i) REQUIRE(FloatBits(r_gpu[i]) == FloatBits(state.residual()[i]));

  DeviceVector<float> out(std::vector<float>(n, 1.0f));
  REQUIRE(cuda::TopKDecodeAdd(payload.get(), out.get(), n, k, nullptr).ok());
  std::vector<float> want(n, 1.0f);
  REQUIRE(cpu->DecompressAdd(p_cpu.span(), state, 0, absl::MakeSpan(want)).ok());
  REQUIRE(out.ToHost() == want);
}

TEST_CASE("CUDA efsign packs the CPU's sign bits and scale", "[cuda]") {
  if (!GpuOrSkip()) return;
  for (size_t n : {1u, 37u, 100003u}) {
    const std::vector<float> grad = testing::GaussianGradient(n, 41);
    auto cpu = MakeCompressor("efsign").value();
    ResidualState state(1, n);
    testing::Payload p_cpu(cpu->MaxPayloadBytes(n).value());
    REQUIRE(cpu->Compress(grad, state, 0, p_cpu.span()).ok());
    const size_t bytes = 4 + (n + 7) / 8;
    DeviceVector<float> g(grad), r(n);
    DeviceVector<uint8_t> payload(bytes), workspace(cuda::EfSignWorkspaceBytes());
    REQUIRE(
        cuda::EfSignCompress(g.get(), r.get(), payload.get(), n, workspace.get(), nullptr).ok());
    const std::vector<uint8_t> p_gpu = payload.ToHost();
    const uint8_t* p = p_cpu.span().data();
    REQUIRE(std::equal(p_gpu.begin() + 4, p_gpu.end(), p + 4));
    float scale_gpu, scale_cpu;
    std::memcpy(&scale_gpu, p_gpu.data(), 4);
    std::memcpy(&scale_cpu, p, 4);
    REQUIRE(scale_gpu == Approx(scale_cpu).epsilon(1e-5));
    const std::vector<float> r_gpu = r.ToHost();
    for (size_t i = 0; i < n; ++i) REQUIRE(r_gpu[i] == Approx(state.residual()[i]).margin(1e-4));
  }
}

}  // namespace
}  // namespace compress
}  // namespace overlap
