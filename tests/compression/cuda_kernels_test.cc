// CUDA kernels against the CPU compressors and kernels. Needs a GPU; without one every GPU case
// prints why it skipped, or fails under OVERLAP_REQUIRE_GPU=1 (tests/gpu/gpu_gate.h); the build
// and link still prove the nvcc object is usable.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "numeric/half.h"
#include "compression/compressor.h"
#include "compression/covap.h"
#include "compression/cuda/kernels.h"
#include "numeric/cpu_kernels.h"
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

// Room for device pointers 0..7 elements past an allocation (cudaMalloc aligns to 256 bytes): every
// 16-byte alignment a float or a 16-bit array can have.
constexpr size_t kPad = 8;

// `window` at element `offset` of a buffer kPad elements longer, `guard` everywhere else, so an
// offset pointer into its device copy reaches the alignment wanted and a stray write shows.
template <typename T>
std::vector<T> Padded(const std::vector<T>& window, size_t offset, T guard) {
  std::vector<T> padded(window.size() + kPad, guard);
  std::copy(window.begin(), window.end(), padded.begin() + offset);
  return padded;
}

// Index of the first element whose bits differ; the size when none do.
template <typename T>
size_t FirstDifference(const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) return i;
  }
  return got.size();
}

// As FirstDifference, but a NaN matches any NaN: a GPU add returns the canonical NaN where x86
// returns the NaN operand's bits.
size_t FirstDifferenceUpToNan(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan && FloatBits(got[i]) != FloatBits(want[i])) return i;
  }
  return got.size();
}

// Elements [offset, offset + n) of a padded buffer, after requiring that the kernel left every
// element outside them at `guard`.
template <typename T>
std::vector<T> Window(const std::vector<T>& padded, size_t offset, size_t n, T guard) {
  std::vector<T> outside(padded.begin(), padded.begin() + offset);
  outside.insert(outside.end(), padded.begin() + offset + n, padded.end());
  REQUIRE(FirstDifference(outside, std::vector<T>(outside.size(), guard)) == outside.size());
  return std::vector<T>(padded.begin() + offset, padded.begin() + offset + n);
}

std::vector<float> AsVector(absl::Span<const float> x) { return {x.begin(), x.end()}; }

// Outside every window: no test value comes near it.
constexpr float kGuard = 1234.5f;

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
      numeric::ErrorFeedbackToBFloat16(grad, absl::MakeSpan(r_cpu), absl::MakeSpan(p_cpu),
                                       numeric::BestIsa());
    } else {
      numeric::ErrorFeedbackToHalf(grad, absl::MakeSpan(r_cpu), absl::MakeSpan(p_cpu),
                                   numeric::BestIsa());
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

// Offsets in elements from each array's allocation.
struct CastOffsets {
  size_t grad;
  size_t residual;
  size_t out;
};

TEST_CASE("CUDA fp16/bf16 error-feedback casts match the CPU at any alignment and length",
          "[cuda]") {
  if (!GpuOrSkip()) return;
  // Equal offsets: a head of (8 - offset) % 8 elements, 16-byte groups of eight, a tail. {1, 5, 1},
  // {2, 2, 6}, {0, 0, 4} and {4, 4, 0}: different offsets whose arrays still reach a 16-byte
  // boundary at one element (7, 2, 4 and 0). The rest never do, so every element goes alone.
  std::vector<CastOffsets> offsets = {{1, 5, 1}, {2, 2, 6}, {0, 0, 4}, {4, 4, 0},
                                      {1, 2, 3}, {0, 1, 0}, {7, 0, 0}, {0, 0, 1}};
  for (size_t o = 0; o < kPad; ++o) offsets.push_back({o, o, o});
  const uint16_t out_guard = 0xbeef;
  for (size_t n : {1u, 7u, 8u, 9u, 100003u}) {
    const std::vector<float> grad = Inputs(n);
    const std::vector<float> residual0 = testing::GaussianGradient(n, 22, 0.01f);
    for (bool bf16 : {false, true}) {
      std::vector<float> r_cpu = residual0;
      std::vector<uint16_t> p_cpu(n);
      if (bf16) {
        numeric::ErrorFeedbackToBFloat16(grad, absl::MakeSpan(r_cpu), absl::MakeSpan(p_cpu),
                                         numeric::BestIsa());
      } else {
        numeric::ErrorFeedbackToHalf(grad, absl::MakeSpan(r_cpu), absl::MakeSpan(p_cpu),
                                     numeric::BestIsa());
      }
      const auto cast = bf16 ? cuda::ErrorFeedbackToBFloat16 : cuda::ErrorFeedbackToHalf;
      for (const CastOffsets& at : offsets) {
        INFO("n " << n << (bf16 ? ", bf16" : ", fp16") << ", offsets " << at.grad << " "
                  << at.residual << " " << at.out);
        DeviceVector<float> g(Padded(grad, at.grad, kGuard));
        DeviceVector<float> r(Padded(residual0, at.residual, kGuard));
        DeviceVector<uint16_t> p(Padded(std::vector<uint16_t>(n, 0), at.out, out_guard));
        REQUIRE(cast(g.get() + at.grad, r.get() + at.residual, p.get() + at.out, n, nullptr).ok());
        REQUIRE(FirstDifference(Window(p.ToHost(), at.out, n, out_guard), p_cpu) == n);
        REQUIRE(FirstDifference(Window(r.ToHost(), at.residual, n, kGuard), r_cpu) == n);
      }
    }
  }
}

TEST_CASE("CUDA fp16/bf16 decode and decode-add match the CPU at any alignment and length",
          "[cuda]") {
  if (!GpuOrSkip()) return;
  // {in, out}. Equal offsets: a head of (8 - offset) % 8 elements, then groups of eight. {0, 4},
  // {4, 0} and {3, 7}: different offsets with a common 16-byte boundary (at 0, 4 and 5); {1, 2}
  // and {2, 0} have none, so every element goes alone.
  std::vector<std::pair<size_t, size_t>> offsets = {{0, 4}, {4, 0}, {3, 7}, {1, 2}, {2, 0}};
  for (size_t o = 0; o < kPad; ++o) offsets.emplace_back(o, o);
  const uint16_t in_guard = 0xbeef;
  for (size_t n : {1u, 7u, 8u, 9u, 100003u}) {
    std::vector<uint16_t> in(n);  // every 16-bit pattern once n >= 65536 (odd multiplier)
    for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint16_t>(i * 40503u);
    const std::vector<float> base = testing::GaussianGradient(n, 23);
    for (bool bf16 : {false, true}) {
      for (bool accumulate : {false, true}) {
        const auto cpu_widen =
            bf16 ? (accumulate ? numeric::BFloat16ToFloatAdd : numeric::BFloat16ToFloat)
                 : (accumulate ? numeric::HalfToFloatAdd : numeric::HalfToFloat);
        std::vector<float> want = base;
        cpu_widen(in, absl::MakeSpan(want), numeric::BestIsa());
        const auto widen = bf16 ? cuda::BFloat16ToFloat : cuda::HalfToFloat;
        for (const auto& [in_at, out_at] : offsets) {
          INFO("n " << n << (bf16 ? ", bf16" : ", fp16") << (accumulate ? ", add" : "")
                    << ", offsets " << in_at << " " << out_at);
          DeviceVector<uint16_t> d_in(Padded(in, in_at, in_guard));
          DeviceVector<float> out(Padded(base, out_at, kGuard));
          REQUIRE(widen(d_in.get() + in_at, out.get() + out_at, n, accumulate, nullptr).ok());
          const std::vector<float> got = Window(out.ToHost(), out_at, n, kGuard);
          // Plain decodes keep half.h's NaN bits; an add's NaN is the GPU's canonical one.
          REQUIRE((accumulate ? FirstDifferenceUpToNan(got, want) : FirstDifference(got, want)) ==
                  n);
        }
      }
    }
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

// Offsets in elements from each array's allocation; the decode writes at grad's offset.
struct CovapLayout {
  size_t n;
  size_t shard;
  int interval;
  size_t grad;
  size_t residual;
  size_t payload;
};

TEST_CASE("CUDA covap matches the CPU for shards off the float4 grid and unaligned arrays",
          "[cuda]") {
  if (!GpuOrSkip()) return;
  const CovapLayout layouts[] = {
      {10007, 3, 3, 0, 0, 0},    // groups of four straddle shards: payload stored per element
      {1001, 1, 3, 0, 0, 0},     // one-element shards
      {1001, 1, 1, 0, 0, 0},     // one-element shards, all sent every step
      {10007, 3, 2, 3, 3, 1},    // all of it shifted
      {10007, 100, 3, 2, 2, 0},  // head of 2: groups off the shards' multiples of 4
      {10007, 100, 3, 0, 0, 1},  // unaligned payload: groups, but per-element payload stores
      {1003, 8, 4, 0, 0, 0},     // whole float4 payload groups, short last shard, a tail of 3
      {10007, 8, 4, 1, 2, 0},    // grad and residual never both aligned: every element alone
  };
  for (const CovapLayout& at : layouts) {
    INFO("n " << at.n << ", shard " << at.shard << ", R " << at.interval << ", offsets " << at.grad
              << " " << at.residual << " " << at.payload);
    const std::string spec = "covap:R=" + std::to_string(at.interval) +
                             ",shard=" + std::to_string(at.shard) + ",alpha0=0.5,ramp_steps=4";
    auto cpu = MakeCompressor(spec).value();
    ResidualState state(1, at.n);
    DeviceVector<float> r(Padded(std::vector<float>(at.n, 0.0f), at.residual, kGuard));
    for (int64_t step = 0; step < 6; ++step) {
      INFO("step " << step);
      const std::vector<float> grad = testing::GaussianGradient(at.n, static_cast<uint32_t>(step));
      testing::Payload p_cpu(cpu->MaxPayloadBytes(at.n).value());
      const size_t sent = cpu->Compress(grad, state, step, p_cpu.span()).value() / sizeof(float);
      DeviceVector<float> g(Padded(grad, at.grad, kGuard));
      DeviceVector<float> payload(std::vector<float>(at.n + kPad, kGuard));
      REQUIRE(cuda::CovapCompress(g.get() + at.grad, r.get() + at.residual,
                                  payload.get() + at.payload, at.n, at.shard, at.interval, step,
                                  CovapAlpha(0.5, 4, step), nullptr)
                  .ok());
      const float* p = reinterpret_cast<const float*>(p_cpu.span().data());
      REQUIRE(FirstDifference(Window(payload.ToHost(), at.payload, sent, kGuard),
                              std::vector<float>(p, p + sent)) == sent);
      REQUIRE(FirstDifference(Window(r.ToHost(), at.residual, at.n, kGuard),
                              AsVector(state.residual())) == at.n);

      for (bool accumulate : {false, true}) {
        INFO((accumulate ? "decode-add" : "decode"));
        const std::vector<float> base = testing::GaussianGradient(at.n, 100 + step);
        std::vector<float> want = base;
        REQUIRE((accumulate ? cpu->DecompressAdd(p_cpu.span(), state, step, absl::MakeSpan(want))
                            : cpu->Decompress(p_cpu.span(), state, step, absl::MakeSpan(want)))
                    .ok());
        DeviceVector<float> out(Padded(base, at.grad, kGuard));
        REQUIRE(cuda::CovapDecode(payload.get() + at.payload, out.get() + at.grad, at.n, at.shard,
                                  at.interval, step, accumulate, nullptr)
                    .ok());
        REQUIRE(FirstDifference(Window(out.ToHost(), at.grad, at.n, kGuard), want) == at.n);
      }
    }
  }
}

// (index, value) pairs of a top-k payload (u32 count | u32 index[k] | f32 value[k]), by index.
std::vector<std::pair<uint32_t, float>> TopKPairs(const uint8_t* bytes, size_t k) {
  const auto* idx = reinterpret_cast<const uint32_t*>(bytes + 4);
  const auto* val = reinterpret_cast<const float*>(bytes + 4 + 4 * k);
  std::vector<std::pair<uint32_t, float>> out;
  for (size_t i = 0; i < reinterpret_cast<const uint32_t*>(bytes)[0]; ++i) {
    out.emplace_back(idx[i], val[i]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Top-k of grad + residual0 on the GPU, grad and residual `grad_at` and `residual_at` elements
// past their allocations, against the CPU compressor: the same pairs (when the k-th largest
// magnitude is unique; the CPU and the GPU break ties differently), residual and decode.
void RequireTopKMatchesCpu(const std::vector<float>& grad, const std::vector<float>& residual0,
                           size_t k, size_t grad_at, size_t residual_at) {
  INFO("grad at " << grad_at << ", residual at " << residual_at);
  const size_t n = grad.size();
  auto cpu = MakeCompressor("topk:k=" + std::to_string(k)).value();
  ResidualState state(1, n);
  std::copy(residual0.begin(), residual0.end(), state.residual().begin());
  testing::Payload p_cpu(cpu->MaxPayloadBytes(n).value());
  REQUIRE(cpu->Compress(grad, state, 0, p_cpu.span()).ok());

  DeviceVector<float> g(Padded(grad, grad_at, kGuard)), r(Padded(residual0, residual_at, kGuard));
  DeviceVector<uint8_t> payload(4 + 8 * k), workspace(cuda::TopKWorkspaceBytes());
  REQUIRE(cuda::TopKCompress(g.get() + grad_at, r.get() + residual_at, payload.get(), n, k,
                             workspace.get(), nullptr)
              .ok());
  const std::vector<uint8_t> p_gpu = payload.ToHost();
  REQUIRE(TopKPairs(p_gpu.data(), k) == TopKPairs(p_cpu.span().data(), k));
  REQUIRE(FirstDifference(Window(r.ToHost(), residual_at, n, kGuard), AsVector(state.residual())) ==
          n);

  DeviceVector<float> out(std::vector<float>(n, 1.0f));
  REQUIRE(cuda::TopKDecodeAdd(payload.get(), out.get(), n, k, nullptr).ok());
  std::vector<float> want(n, 1.0f);
  REQUIRE(cpu->DecompressAdd(p_cpu.span(), state, 0, absl::MakeSpan(want)).ok());
  REQUIRE(out.ToHost() == want);
}

// x / 2 twice: grad and residual that add up to x exactly, so the pass that adds them is part of
// what is checked while the magnitudes the select sees stay exactly as designed.
std::vector<float> Halved(const std::vector<float>& x) {
  std::vector<float> half(x.size());
  for (size_t i = 0; i < x.size(); ++i) half[i] = x[i] * 0.5f;
  return half;
}

// Random signs, random order.
std::vector<float> Shuffled(std::vector<float> x, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution negative(0.5);
  for (float& v : x) v = negative(rng) ? -v : v;
  std::shuffle(x.begin(), x.end(), rng);
  return x;
}

// `count` magnitudes with keys from `first`'s key upward, `step` apart.
void AppendKeys(std::vector<float>& x, float first, uint32_t step, size_t count) {
  for (size_t j = 0; j < count; ++j) {
    x.push_back(BitsToFloat(FloatBits(first) + static_cast<uint32_t>(j) * step));
  }
}

// The top-k select of kernels.cu works on the magnitude key (the float's bits less the sign) in
// three digits: bits 30..20 (a 1/8-octave bin), 19..10 and 9..0. Once the bin of the k-th largest
// key holds at most kTopKCandidates elements (kernels.cu's constant of that name) the next pass
// copies that bin and one block finishes the select from the copy; a bin still larger after two
// digits takes three counting passes and a collecting pass.
constexpr size_t kTopKCandidates = 16384;
constexpr size_t kTopKNarrowK = 2000;
constexpr size_t kTopKPlateauK = 4000;

// 200000 distinct magnitudes in [1, 1.125) (consecutive keys from 1.0f: one level-0 bin, level-1
// bins of 1024), 100 above 2 and 5000 below 1: the k-th largest's level-0 bin holds 200000
// elements and its level-1 bin 1024, so the bin is copied after the second digit.
std::vector<float> NarrowTopKInput() {
  std::vector<float> x;
  AppendKeys(x, 1.0f, 1, 200000);
  AppendKeys(x, 2.0f, 1000, 100);
  AppendKeys(x, 0.5f, 7, 5000);
  return Shuffled(std::move(x), 51);
}

// The level-1 bin from 1.0f (keys 1.0f .. 1.0f + 1023 ulp) holds 20000 copies of 1.0f and 1000
// distinct keys above it: over kTopKCandidates, so the select counts all three digits. 3000
// magnitudes above 2 and 500 in the same 1/8 octave above that bin make the k-th largest
// (k = 4000) the 500th of the distinct keys, which no other element shares, so the selected set is
// exact. 10000 more lie below 1.
std::vector<float> PlateauTopKInput() {
  std::vector<float> x(20000, 1.0f);
  AppendKeys(x, BitsToFloat(FloatBits(1.0f) + 1), 1, 1000);
  AppendKeys(x, BitsToFloat(FloatBits(1.0f) + 2048), 3, 500);
  AppendKeys(x, 2.0f, 1001, 3000);
  AppendKeys(x, 0.25f, 13, 10000);
  return Shuffled(std::move(x), 52);
}

// Every magnitude 0.75, signs mixed: one bin at every digit, all of it tied.
std::vector<float> ConstantTopKInput(size_t n) {
  std::vector<float> x(n, 0.75f);
  return Shuffled(std::move(x), 53);
}

// Sizes of the bins that hold the k-th largest magnitude key of x: the level-0 bin (bits 30..20
// agree), the level-1 bin (bits 30..10 agree) and the elements with exactly that key.
struct TopKBins {
  size_t level0;
  size_t level1;
  size_t ties;
};

TopKBins TopKBinsOf(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> keys(x.size());
  for (size_t i = 0; i < x.size(); ++i) keys[i] = numeric::MagnitudeKey(x[i]);
  std::sort(keys.begin(), keys.end(), std::greater<>());
  const uint32_t kth = keys[k - 1];
  const auto agree = [&](int shift) {
    return static_cast<size_t>(std::count_if(
        keys.begin(), keys.end(), [&](uint32_t key) { return (key >> shift) == (kth >> shift); }));
  };
  return {agree(20), agree(10), agree(0)};
}

TEST_CASE("CUDA top-k test inputs reach the select path each case is for", "[cuda]") {
  // Checks the test data, not the kernels, so it needs no GPU.
  const TopKBins gaussian = TopKBinsOf(testing::GaussianGradient(200003, 31), 2000);
  CHECK(gaussian.level0 <= kTopKCandidates);  // copied after the first digit
  CHECK(gaussian.ties == 1);
  const TopKBins narrow = TopKBinsOf(NarrowTopKInput(), kTopKNarrowK);
  CHECK(narrow.level0 > kTopKCandidates);  // copied after the second digit
  CHECK(narrow.level1 <= kTopKCandidates);
  CHECK(narrow.ties == 1);
  const TopKBins plateau = TopKBinsOf(PlateauTopKInput(), kTopKPlateauK);
  CHECK(plateau.level1 > kTopKCandidates);  // counted to the end, then collected
  CHECK(plateau.ties == 1);
  const TopKBins constant = TopKBinsOf(ConstantTopKInput(50000), 1000);
  CHECK(constant.level1 > kTopKCandidates);
  CHECK(constant.ties == 50000);
}

TEST_CASE("CUDA top-k selects exactly the CPU's k largest", "[cuda]") {
  if (!GpuOrSkip()) return;
  const size_t n = 200003;
  RequireTopKMatchesCpu(testing::GaussianGradient(n, 31), std::vector<float>(n, 0.0f), 2000, 0, 0);
}

TEST_CASE("CUDA top-k copies the bin after the second digit when the first stays large", "[cuda]") {
  if (!GpuOrSkip()) return;
  const std::vector<float> half = Halved(NarrowTopKInput());
  // Aligned tiles go as float4s; offset ones (and every partial tile) element by element.
  for (const auto& at : {std::pair<size_t, size_t>{0, 0}, {1, 3}, {2, 0}}) {
    RequireTopKMatchesCpu(half, half, kTopKNarrowK, at.first, at.second);
  }
}

TEST_CASE("CUDA top-k counts all three digits when the second digit's bin stays large", "[cuda]") {
  if (!GpuOrSkip()) return;
  const std::vector<float> half = Halved(PlateauTopKInput());
  for (const auto& at : {std::pair<size_t, size_t>{0, 0}, {3, 1}}) {
    RequireTopKMatchesCpu(half, half, kTopKPlateauK, at.first, at.second);
  }
}

// With every magnitude equal the CPU takes the highest indices and the GPU whichever elements win
// the tie counter, so what is checked is what both must do: k distinct in-range indices, each
// sent with its value of grad + residual (all of the one magnitude), a zero residual there and
// grad + residual everywhere else.
TEST_CASE("CUDA top-k of equal magnitudes sends k of them and keeps the rest", "[cuda]") {
  if (!GpuOrSkip()) return;
  const size_t n = 50000, k = 1000;
  const std::vector<float> sum = ConstantTopKInput(n);
  const std::vector<float> half = Halved(sum);
  auto cpu = MakeCompressor("topk:k=1000").value();
  ResidualState state(1, n);
  std::copy(half.begin(), half.end(), state.residual().begin());
  testing::Payload p_cpu(cpu->MaxPayloadBytes(n).value());
  REQUIRE(cpu->Compress(half, state, 0, p_cpu.span()).ok());
  REQUIRE(TopKPairs(p_cpu.span().data(), k).size() == k);

  for (const auto& at : {std::pair<size_t, size_t>{0, 0}, {1, 2}}) {
    INFO("grad at " << at.first << ", residual at " << at.second);
    DeviceVector<float> g(Padded(half, at.first, kGuard)), r(Padded(half, at.second, kGuard));
    DeviceVector<uint8_t> payload(4 + 8 * k), workspace(cuda::TopKWorkspaceBytes());
    REQUIRE(cuda::TopKCompress(g.get() + at.first, r.get() + at.second, payload.get(), n, k,
                               workspace.get(), nullptr)
                .ok());
    const std::vector<uint8_t> p_gpu = payload.ToHost();
    REQUIRE(reinterpret_cast<const uint32_t*>(p_gpu.data())[0] == k);
    const std::vector<std::pair<uint32_t, float>> pairs = TopKPairs(p_gpu.data(), k);
    REQUIRE(std::adjacent_find(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
              return a.first == b.first;
            }) == pairs.end());
    std::vector<float> kept = sum;
    for (const auto& [index, value] : pairs) {
      REQUIRE(index < n);
      REQUIRE(FloatBits(value) == FloatBits(sum[index]));
      kept[index] = 0.0f;
    }
    const std::vector<float> r_gpu = Window(r.ToHost(), at.second, n, kGuard);
    REQUIRE(FirstDifference(r_gpu, kept) == n);

    // Decoding onto the new residual gives grad + old residual back, bit for bit.
    DeviceVector<float> out(r_gpu);
    REQUIRE(cuda::TopKDecodeAdd(payload.get(), out.get(), n, k, nullptr).ok());
    REQUIRE(FirstDifference(out.ToHost(), sum) == n);
  }
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

TEST_CASE("CUDA efsign matches the CPU with unaligned grad and residual", "[cuda]") {
  if (!GpuOrSkip()) return;
  // {grad, residual}: equal offsets give a head before the float4 groups and pack the signs by
  // ballot (the residual is not 16-byte aligned); unequal ones add every element alone, and
  // {3, 0} then packs by float4s.
  const std::pair<size_t, size_t> offsets[] = {{1, 1}, {2, 2}, {3, 3}, {1, 3}, {0, 2}, {3, 0}};
  const uint8_t payload_guard = 0xab;
  for (size_t n : {5u, 33u, 100003u}) {
    const std::vector<float> grad = testing::GaussianGradient(n, 41);
    const std::vector<float> residual0 = testing::GaussianGradient(n, 42, 0.1f);
    auto cpu = MakeCompressor("efsign").value();
    ResidualState state(1, n);
    std::copy(residual0.begin(), residual0.end(), state.residual().begin());
    testing::Payload p_cpu(cpu->MaxPayloadBytes(n).value());
    REQUIRE(cpu->Compress(grad, state, 0, p_cpu.span()).ok());
    const uint8_t* p = p_cpu.span().data();
    const size_t bytes = 4 + (n + 7) / 8;
    for (const auto& [grad_at, residual_at] : offsets) {
      INFO("n " << n << ", offsets " << grad_at << " " << residual_at);
      DeviceVector<float> g(Padded(grad, grad_at, kGuard));
      DeviceVector<float> r(Padded(residual0, residual_at, kGuard));
      DeviceVector<uint8_t> payload(std::vector<uint8_t>(bytes + kPad, payload_guard));
      DeviceVector<uint8_t> workspace(cuda::EfSignWorkspaceBytes());
      REQUIRE(cuda::EfSignCompress(g.get() + grad_at, r.get() + residual_at, payload.get(), n,
                                   workspace.get(), nullptr)
                  .ok());
      const std::vector<uint8_t> p_gpu = payload.ToHost();
      REQUIRE(std::equal(p_gpu.begin() + 4, p_gpu.begin() + bytes, p + 4));
      REQUIRE(std::all_of(p_gpu.begin() + bytes, p_gpu.end(),
                          [&](uint8_t b) { return b == payload_guard; }));
      float scale_gpu, scale_cpu;
      std::memcpy(&scale_gpu, p_gpu.data(), 4);
      std::memcpy(&scale_cpu, p, 4);
      REQUIRE(scale_gpu == Approx(scale_cpu).epsilon(1e-5));
      // The scale's summation order differs, so the residuals agree to its rounding.
      const std::vector<float> r_gpu = Window(r.ToHost(), residual_at, n, kGuard);
      size_t far = 0;
      while (far < n && std::fabs(r_gpu[far] - state.residual()[far]) <= 1e-4f) ++far;
      REQUIRE(far == n);

      // The GPU's payload decodes bit for bit as the CPU decodes it.
      testing::Payload p_host(bytes);
      std::copy(p_gpu.begin(), p_gpu.begin() + bytes, p_host.span().begin());
      const std::vector<float> base = testing::GaussianGradient(n, 44);
      std::vector<float> want = base;
      REQUIRE(cpu->DecompressAdd(p_host.span(), state, 0, absl::MakeSpan(want)).ok());
      DeviceVector<float> out(Padded(base, residual_at, kGuard));
      REQUIRE(cuda::EfSignDecodeAdd(payload.get(), out.get() + residual_at, n, nullptr).ok());
      REQUIRE(FirstDifference(Window(out.ToHost(), residual_at, n, kGuard), want) == n);
    }
  }
}

}  // namespace
}  // namespace compress
}  // namespace overlap
