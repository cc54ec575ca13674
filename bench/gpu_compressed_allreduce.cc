// Compressed allreduce of CUDA tensors through the runtime: compressed on the GPU (the CUDA
// kernels, residuals on the device: runtime/planes/cuda_compression.h) against the path a CUDA tensor
// took before, which randomk and powersgd still take: copied to pinned host memory, compressed
// on the CPU by the runtime, and copied back. Same process, same tensors, alternating steps.
//
//   overlaprun -np 1 bazel-bin/bench/gpu_compressed_allreduce [--tensors=32] [--elements=1048576]
//              [--steps=10]
//
// A step reduces --tensors float32 tensors of --elements each (submitted together, so they fuse
// into compressed buckets), in place, averaged, under one compressor; its time is from the first
// submission until every result is back on the device. Prints per compressor the median step of
// each path and host_ms / device_ms, as text and as one JSON line. Without a GPU it prints
// "SKIPPED: no GPU: <reason>" and exits 0.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "collectives/buffer_ops.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(120);

void Check(const absl::Status& s) {
  if (s.ok()) return;
  std::fprintf(stderr, "gpu_compressed_allreduce: rank %d: %s\n", Rank(), s.ToString().c_str());
  std::exit(1);
}

void CheckCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "gpu_compressed_allreduce: %s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

struct Options {
  int tensors = 32;
  int64_t elements = 1 << 20;
  int steps = 10;
};

bool Parse(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    bool ok = false;
    if (absl::ConsumePrefix(&arg, "--tensors=")) {
      ok = absl::SimpleAtoi(arg, &options->tensors) && options->tensors >= 1;
    } else if (absl::ConsumePrefix(&arg, "--elements=")) {
      ok = absl::SimpleAtoi(arg, &options->elements) && options->elements >= 1024;
    } else if (absl::ConsumePrefix(&arg, "--steps=")) {
      ok = absl::SimpleAtoi(arg, &options->steps) && options->steps >= 1;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "usage: %s [--tensors=N (>= 1)] [--elements=N (>= 1024)] [--steps=N (>= 1)]\n"
                   "bad argument: %s\n",
                   argv[0], argv[i]);
      return false;
    }
  }
  return true;
}

class Bench {
 public:
  explicit Bench(const Options& options) : options_(options) {
    const size_t bytes = static_cast<size_t>(options.elements) * sizeof(float);
    std::vector<float> values(static_cast<size_t>(options.elements));
    for (int t = 0; t < options.tensors; ++t) {
      for (size_t i = 0; i < values.size(); ++i) {
        values[i] = static_cast<float>((i * 2654435761u + t + Rank()) % 2001) / 1000.0f - 1.0f;
      }
      void* device = nullptr;
      void* host = nullptr;
      CheckCuda(cudaMalloc(&device, bytes), "cudaMalloc");
      CheckCuda(cudaMallocHost(&host, bytes), "cudaMallocHost");
      CheckCuda(cudaMemcpy(device, values.data(), bytes, cudaMemcpyHostToDevice), "upload");
      device_.push_back(device);
      host_.push_back(host);
    }
  }
  ~Bench() {
    for (void* p : device_) cudaFree(p);
    for (void* p : host_) cudaFreeHost(p);
  }

  // One step of the GPU path: the runtime takes the CUDA tensors as they are.
  double DeviceStep(const std::string& spec) {
    const absl::Time start = absl::Now();
    std::vector<Handle> handles;
    for (int t = 0; t < options_.tensors; ++t) {
      Tensor x = MakeTensor(device_[t], DataType::kFloat32, {options_.elements});
      x.device = Device::Cuda(0);
      handles.push_back(Submit(absl::StrCat("device.", spec, ".", t), x, spec));
    }
    for (Handle& h : handles) Check(h.Wait(kWait));
    return absl::ToDoubleMilliseconds(absl::Now() - start);
  }

  // One step of the host path: copy out, reduce host tensors, copy back.
  double HostStep(const std::string& spec) {
    const size_t bytes = static_cast<size_t>(options_.elements) * sizeof(float);
    const absl::Time start = absl::Now();
    for (int t = 0; t < options_.tensors; ++t) {
      CheckCuda(cudaMemcpyAsync(host_[t], device_[t], bytes, cudaMemcpyDeviceToHost, nullptr),
                "copy to host");
    }
    CheckCuda(cudaStreamSynchronize(nullptr), "waiting for the copies to host");
    std::vector<Handle> handles;
    for (int t = 0; t < options_.tensors; ++t) {
      Tensor x = MakeTensor(host_[t], DataType::kFloat32, {options_.elements});
      handles.push_back(Submit(absl::StrCat("host.", spec, ".", t), x, spec));
    }
    for (Handle& h : handles) Check(h.Wait(kWait));
    for (int t = 0; t < options_.tensors; ++t) {
      CheckCuda(cudaMemcpyAsync(device_[t], host_[t], bytes, cudaMemcpyHostToDevice, nullptr),
                "copy back");
    }
    CheckCuda(cudaStreamSynchronize(nullptr), "waiting for the copies back");
    return absl::ToDoubleMilliseconds(absl::Now() - start);
  }

 private:
  static Handle Submit(const std::string& name, const Tensor& x, const std::string& spec) {
    AllreduceOptions options;
    options.compression = spec;
    options.plan_may_delay = true;  // gradients
    absl::StatusOr<Handle> h = Allreduce(name, x, x, options);
    Check(h.status());
    return *h;
  }

  const Options options_;
  std::vector<void*> device_;
  std::vector<void*> host_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  Options options;
  if (!Parse(argc, argv, &options)) return 2;
  if (CudaDeviceCount() == 0) {
    std::printf("SKIPPED: no GPU: %s\n", CudaUnavailableReason().c_str());
    return 0;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CheckCuda(cudaSetDevice(0), "cudaSetDevice");
  Check(Init());
  {
    Bench bench(options);
    const double mib = static_cast<double>(options.elements) * 4 * options.tensors / (1 << 20);
    if (Rank() == 0) {
      std::printf(
          "compressed allreduce of %d x %lld float32 (%.0f MiB), %d ranks, median of %d "
          "steps\n%-22s %12s %12s %10s\n",
          options.tensors, static_cast<long long>(options.elements), mib, Size(), options.steps,
          "compressor", "device_ms", "host_ms", "host/dev");
    }
    for (const std::string spec :
         {"none", "fp16", "bf16", "covap:R=4", "topk:ratio=0.01", "efsign"}) {
      std::vector<double> device_ms, host_ms;
      for (int step = -2; step < options.steps; ++step) {  // two warm-up steps
        const double d = bench.DeviceStep(spec);
        const double h = bench.HostStep(spec);
        if (step >= 0) {
          device_ms.push_back(d);
          host_ms.push_back(h);
        }
      }
      const double d = Median(device_ms), h = Median(host_ms);
      if (Rank() == 0) {
        std::printf("%-22s %12.2f %12.2f %10.1f\n", spec.c_str(), d, h, h / d);
        std::printf(
            "{\"bench\":\"gpu_compressed_allreduce\",\"compressor\":\"%s\",\"ranks\":%d,"
            "\"tensors\":%d,\"elements\":%lld,\"device_ms\":%.3f,\"host_ms\":%.3f,"
            "\"host_over_device\":%.2f,\"executor\":\"%s\"}\n",
            spec.c_str(), Size(), options.tensors, static_cast<long long>(options.elements), d, h,
            h / d, Stats().cuda_executor.c_str());
      }
    }
  }
  Check(Shutdown());
  MPI_Finalize();
  return 0;
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) { return overlap::Main(argc, argv); }
