// GPU kernel throughput against device-to-device cudaMemcpy, measured on one GPU in the same run.
//
//   bazel-bin/bench/gpu_kernels [--elements=134217728] [--reps=20] [--device=0]
//
// cudaMemcpy's bandwidth is bytes read + bytes written per second; every kernel is measured the
// same way and reported as a fraction of it:
//   fusion_copy_*  BufferOps::Copy (one launch per batch; the slice-table upload is included):
//                  256 slices of mixed sizes (16-byte aligned, and packed back to back as a
//                  fusion buffer would hold them) with factor 1 and 0.25 on fp32, and 20000
//                  small slices; bytes = 2 x the bytes copied;
//   ef_fp16, ef_bf16, covap, topk_1pct, efsign  the compression kernels of
//                  compression/cuda/kernels.h on fp32 gradients; bytes = grad + residual read,
//                  residual + payload written.
// Each kernel is timed alone with CUDA events, after warm-ups, and the median of --reps runs is
// kept. Buffers are --elements floats (512 MiB each by default, several times any L2). Targets:
// >= 0.8 of the copy for fp16, bf16 and covap, >= 0.3 for top-k 1%. Every row is printed as a
// line of text and as a JSON object on its own line. Without a GPU it prints "SKIPPED: no GPU:
// <reason>" and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "collectives/buffer_ops.h"
#include "compression/cuda/kernels.h"

namespace overlap {
namespace {

struct Options {
  int64_t elements = int64_t{1} << 27;
  int reps = 20;
  int device = 0;
};

bool Parse(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    bool ok = false;
    if (absl::ConsumePrefix(&arg, "--elements=")) {
      ok = absl::SimpleAtoi(arg, &options->elements) && options->elements >= (1 << 20);
    } else if (absl::ConsumePrefix(&arg, "--reps=")) {
      ok = absl::SimpleAtoi(arg, &options->reps) && options->reps >= 1;
    } else if (absl::ConsumePrefix(&arg, "--device=")) {
      ok = absl::SimpleAtoi(arg, &options->device) && options->device >= 0;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "usage: %s [--elements=N (>= 1048576)] [--reps=N] [--device=K]\n"
                   "bad argument: %s\n",
                   argv[0], argv[i]);
      return false;
    }
  }
  return true;
}

// Fails the run with the CUDA call and its error.
#define CUDA_OR_DIE(call)                                                       \
  do {                                                                          \
    const cudaError_t err_ = (call);                                            \
    if (err_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

void OkOrDie(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { CUDA_OR_DIE(cudaMalloc(&data_, bytes)); }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

// The median time of `reps` runs of `run` on `stream`, in seconds, after three warm-ups.
double MedianSeconds(cudaStream_t stream, int reps, const std::function<void()>& run) {
  cudaEvent_t start, stop;
  CUDA_OR_DIE(cudaEventCreate(&start));
  CUDA_OR_DIE(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) run();
  CUDA_OR_DIE(cudaStreamSynchronize(stream));
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    CUDA_OR_DIE(cudaEventRecord(start, stream));
    run();
    CUDA_OR_DIE(cudaEventRecord(stop, stream));
    CUDA_OR_DIE(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_OR_DIE(cudaEventElapsedTime(&ms, start, stop));
    seconds.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

struct Row {
  std::string kernel;
  double bytes;    // read + written per run
  double seconds;  // median per run
  double target;   // minimum fraction of the copy bandwidth; 0: none
};

void Print(const std::string& gpu, const Row& row, double copy_gbps) {
  const double gbps = row.bytes / row.seconds / 1e9;
  const double fraction = gbps / copy_gbps;
  const char* verdict = row.target <= 0 ? "-" : fraction >= row.target ? "PASS" : "BELOW";
  const std::string target = row.target > 0 ? absl::StrFormat(">=%.2f", row.target) : "";
  std::printf("%-28s %9.1f GB/s  %6.3f of copy  %-6s %s\n", row.kernel.c_str(), gbps, fraction,
              target.c_str(), verdict);
  std::printf(
      "{\"bench\":\"gpu_kernels\",\"gpu\":\"%s\",\"kernel\":\"%s\",\"bytes\":%.0f,\"ms\":%.4f,"
      "\"gbps\":%.2f,\"fraction_of_copy\":%.4f,\"target\":%.2f,\"verdict\":\"%s\"}\n",
      gpu.c_str(), row.kernel.c_str(), row.bytes, row.seconds * 1e3, gbps, fraction, row.target,
      verdict);
  std::fflush(stdout);
}

// Slices of `count` elements in all with the given sizes, source and destination packed in that
// order from `src` and `dst`; `align` rounds every size up to a multiple of that many elements.
std::vector<CopySlice> PackedSlices(const std::vector<int64_t>& sizes, int64_t align, float* dst,
                                    const float* src) {
  std::vector<CopySlice> slices;
  int64_t at = 0;
  for (int64_t size : sizes) {
    const int64_t count = (size + align - 1) / align * align;
    slices.push_back({dst + at, src + at, count});
    at += count;
  }
  return slices;
}

// `n` sizes, log-uniform between `lo` and `hi` elements, scaled so they add up to about `total`.
std::vector<int64_t> MixedSizes(int n, int64_t lo, int64_t hi, int64_t total, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> exponent(std::log(lo), std::log(hi));
  std::vector<double> raw(n);
  double sum = 0;
  for (double& r : raw) sum += r = std::exp(exponent(gen));
  std::vector<int64_t> sizes;
  sizes.reserve(raw.size());
  for (double r : raw) sizes.push_back(std::max<int64_t>(1, static_cast<int64_t>(r / sum * total)));
  return sizes;
}

int64_t Total(absl::Span<const CopySlice> slices) {
  int64_t total = 0;
  for (const CopySlice& s : slices) total += s.count;
  return total;
}

int Main(int argc, char** argv) {
  Options options;
  if (!Parse(argc, argv, &options)) return 2;
  if (CudaDeviceCount() <= options.device) {
    const std::string reason = CudaUnavailableReason();
    std::printf("SKIPPED: no GPU: %s\n",
                reason.empty() ? absl::StrFormat("no CUDA device %d", options.device).c_str()
                               : reason.c_str());
    return 0;
  }
  CUDA_OR_DIE(cudaSetDevice(options.device));
  cudaDeviceProp props;
  CUDA_OR_DIE(cudaGetDeviceProperties(&props, options.device));
  const std::string gpu = props.name;
  const int64_t n = options.elements;
  std::printf("GPU %d: %s (sm_%d%d, %.1f GiB, L2 %.0f MiB); buffers of %lld floats (%.0f MiB)\n",
              options.device, gpu.c_str(), props.major, props.minor,
              props.totalGlobalMem / 1073741824.0, props.l2CacheSize / 1048576.0,
              static_cast<long long>(n), n * 4 / 1048576.0);

  cudaStream_t stream;
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer grad(n * 4), residual(n * 4), payload(n * 4 + 64), dst(n * 4);
  {
    // Gaussian gradients: a 4 Mi-element random block tiled over the buffer.
    const int64_t block = std::min<int64_t>(n, 1 << 22);
    std::vector<float> host(block);
    std::mt19937 gen(7);
    std::normal_distribution<float> normal(0.0f, 1e-2f);
    for (float& v : host) v = normal(gen);
    for (int64_t at = 0; at < n; at += block) {
      CUDA_OR_DIE(cudaMemcpy(grad.as<float>() + at, host.data(), std::min(block, n - at) * 4,
                             cudaMemcpyHostToDevice));
    }
    CUDA_OR_DIE(cudaMemset(residual.as<void>(), 0, n * 4));
  }

  const double copy_seconds = MedianSeconds(stream, options.reps, [&] {
    CUDA_OR_DIE(
        cudaMemcpyAsync(dst.as<void>(), grad.as<void>(), n * 4, cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_gbps = 2.0 * n * 4 / copy_seconds / 1e9;
  std::printf("%-28s %9.1f GB/s  (read + write; the reference below)\n", "cudaMemcpy D2D",
              copy_gbps);
  std::printf(
      "{\"bench\":\"gpu_kernels\",\"gpu\":\"%s\",\"kernel\":\"cudaMemcpy\",\"bytes\":%.0f,"
      "\"ms\":%.4f,\"gbps\":%.2f}\n",
      gpu.c_str(), 2.0 * n * 4, copy_seconds * 1e3, copy_gbps);

  absl::StatusOr<std::unique_ptr<BufferOps>> ops =
      CreateBufferOps(Device::Cuda(options.device), stream);
  OkOrDie(ops.status(), "CreateBufferOps");
  const auto fusion = [&](const std::string& name, const std::vector<CopySlice>& slices,
                          double factor) {
    const double seconds = MedianSeconds(stream, options.reps, [&] {
      OkOrDie((*ops)->Copy(slices, DataType::kFloat32, {factor, 1}), name.c_str());
    });
    Print(gpu, {name, 2.0 * Total(slices) * 4, seconds, 0}, copy_gbps);
  };
  // Mixed sizes sum to ~n; 4-element rounding can overshoot by 3 per slice, hence the margin.
  const std::vector<int64_t> mixed = MixedSizes(256, 256, n / 16, n - int64_t{4} * 256, 1);
  const std::vector<CopySlice> aligned = PackedSlices(mixed, 4, dst.as<float>(), grad.as<float>());
  const std::vector<CopySlice> packed = PackedSlices(mixed, 1, dst.as<float>(), grad.as<float>());
  fusion("fusion_copy_256_aligned_x1", aligned, 1.0);
  fusion("fusion_copy_256_aligned_x0.25", aligned, 0.25);
  fusion("fusion_copy_256_packed_x1", packed, 1.0);
  fusion("fusion_copy_256_packed_x0.25", packed, 0.25);
  {
    std::mt19937 gen(2);
    std::vector<int64_t> small;
    int64_t total = 0;
    for (int i = 0; i < 20000; ++i) {
      small.push_back(256 + static_cast<int64_t>(gen() % 7937));  // 1 KiB .. 32 KiB
      total += small.back() + 3;
    }
    if (total <= n) {
      fusion("fusion_copy_20000_small_x1",
             PackedSlices(small, 4, dst.as<float>(), grad.as<float>()), 1.0);
    }
  }

  const auto kernel = [&](const std::string& name, double bytes, double target,
                          const std::function<absl::Status()>& run) {
    const double seconds =
        MedianSeconds(stream, options.reps, [&] { OkOrDie(run(), name.c_str()); });
    Print(gpu, {name, bytes, seconds, target}, copy_gbps);
  };
  namespace cc = compress::cuda;
  const double grad_residual = 12.0 * n;  // read grad + residual, write residual
  auto* g = grad.as<float>();
  auto* r = residual.as<float>();
  kernel("ef_fp16", grad_residual + 2.0 * n, 0.8,
         [&] { return cc::ErrorFeedbackToHalf(g, r, payload.as<uint16_t>(), n, stream); });
  kernel("ef_bf16", grad_residual + 2.0 * n, 0.8,
         [&] { return cc::ErrorFeedbackToBFloat16(g, r, payload.as<uint16_t>(), n, stream); });
  {
    const int interval = 4;
    const int64_t shard = (n + interval - 1) / interval;
    int64_t step = 0;
    // Each step sends one shard in `interval`: n / interval floats of payload.
    kernel("covap_R4", grad_residual + 4.0 * shard, 0.8, [&] {
      return cc::CovapCompress(g, r, payload.as<float>(), n, shard, interval, step++, 0.5f, stream);
    });
  }
  {
    const int64_t k = n / 100;
    DeviceBuffer workspace(cc::TopKWorkspaceBytes());
    kernel("topk_1pct", grad_residual + 4.0 + 8.0 * k, 0.3, [&] {
      return cc::TopKCompress(g, r, payload.as<uint8_t>(), n, k, workspace.as<void>(), stream);
    });
  }
  {
    DeviceBuffer workspace(cc::EfSignWorkspaceBytes());
    const int64_t sign_bytes = (n + 7) / 8;
    kernel("efsign", grad_residual + 4.0 + sign_bytes, 0, [&] {
      return cc::EfSignCompress(g, r, payload.as<uint8_t>(), n, workspace.as<void>(), stream);
    });
  }
  ops->reset();
  CUDA_OR_DIE(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) { return overlap::Main(argc, argv); }
