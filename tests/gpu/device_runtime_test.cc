// CUDA tensors through the runtime: every collective with values checked, fused and unfused
// allreduces, a producer stream the runtime must wait on, a repeating step on the frozen plan,
// and the executor OVERLAP_EXECUTOR and the ranks-per-GPU select (NCCL on one rank per GPU; MPI
// staged through host memory when ranks share the GPU), and every planner's scheduled plan over
// CUDA gradients. Skips where no GPU is visible; fails there when OVERLAP_REQUIRE_GPU=1.
#include <cuda_runtime.h>
#include <mpi.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "numeric/half.h"
#include "runtime/overlap.h"
#include "tests/gpu/gpu_gate.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

// Device memory holding a copy of host values, freed on scope exit.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : size_(host.size()) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(1, size_) * sizeof(T)) ==
            cudaSuccess);
    REQUIRE(cudaMemcpy(ptr_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice) ==
            cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr_); }
  T* get() const { return ptr_; }
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

int Device() {
  int device = 0;
  cudaGetDevice(&device);
  return device;
}

template <typename T>
Tensor OnDevice(const DeviceArray<T>& a, DataType dtype, std::vector<int64_t> shape,
                void* stream = nullptr) {
  Tensor t = MakeTensor(a.get(), dtype, std::move(shape));
  t.device = overlap::Device::Cuda(Device());
  t.stream = stream;
  return t;
}

template <typename T>
std::vector<T> OutputToHost(const Handle& h) {
  const Tensor& out = h.output();
  CHECK(out.device.is_cuda());
  std::vector<T> host(static_cast<size_t>(out.NumElements()));
  REQUIRE(cudaMemcpy(host.data(), out.data, out.ByteSize(), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

TEST_CASE("the executor for CUDA tensors is the one expected", "[gpu][probe]") {
  if (!testing::GpuOrSkip()) return;
  std::vector<float> x(16, 1.0f);
  DeviceArray<float> d(x);
  absl::StatusOr<Handle> h = Allreduce("executor.probe", OnDevice(d, DataType::kFloat32, {16}),
                                       OnDevice(d, DataType::kFloat32, {16}));
  REQUIRE(h.ok());
  const absl::Status s = h->Wait(kWait);
  // A configuration that cannot work fails every rank's first CUDA operation with the reason.
  if (const char* error = std::getenv("OVERLAP_TEST_EXPECT_ERROR")) {
    CHECK_FALSE(s.ok());
    CHECK_THAT(std::string(s.message()), Catch::Contains(error) && Catch::Contains("rank "));
    return;
  }
  REQUIRE(s.ok());
  const char* expected = std::getenv("OVERLAP_TEST_EXPECT_EXECUTOR");
  INFO("executor " << Stats().cuda_executor);
  if (expected != nullptr) CHECK(Stats().cuda_executor == expected);
  // The staged MPI path follows the hierarchical allreduce (pretend hosts: mpi_catch_main.cc).
  if (const char* hosts = std::getenv("OVERLAP_TEST_EXPECT_HIERARCHY_HOSTS")) {
    CHECK(Stats().hierarchy_hosts == std::atoi(hosts));
  }
}

TEST_CASE("CUDA allreduce averages fused, unfused and large tensors", "[gpu]") {
  if (!testing::GpuOrSkip()) return;
  const int rank = Rank(), size = Size();
  // Fused small tensors of several sizes, and one of 8M elements above the direct threshold.
  const std::vector<int64_t> sizes = {1, 7, 1000, 4099, 65536, 8 << 20};
  std::vector<std::unique_ptr<DeviceArray<float>>> in, out;
  std::vector<Handle> handles;
  for (size_t t = 0; t < sizes.size(); ++t) {
    std::vector<float> x(static_cast<size_t>(sizes[t]));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((rank + 1) * ((i + t) % 13));
    in.push_back(std::make_unique<DeviceArray<float>>(x));
    out.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(x.size(), -1.0f)));
    absl::StatusOr<Handle> h =
        Allreduce(absl::StrCat("avg.", t), OnDevice(*in.back(), DataType::kFloat32, {sizes[t]}),
                  OnDevice(*out.back(), DataType::kFloat32, {sizes[t]}));
    REQUIRE(h.ok());
    handles.push_back(*h);
  }
  const double rank_sum = size * (size + 1) / 2.0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    REQUIRE(handles[t].Wait(kWait).ok());
    const std::vector<float> got = out[t]->ToHost();
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = static_cast<float>(rank_sum * ((i + t) % 13) / size);
      if (std::fabs(got[i] - want) > 1e-5f * std::max(1.0f, std::fabs(want))) ++bad;
    }
    INFO("tensor " << t << " of " << sizes[t] << " elements");
    CHECK(bad == 0);
  }
}

TEST_CASE("CUDA allreduce of every dtype with sum and integer average", "[gpu]") {
  if (!testing::GpuOrSkip()) return;
  const int rank = Rank(), size = Size();
  const int64_t n = 3001;
  {  // int32 average rounds toward zero, as on the CPU
    std::vector<int32_t> x(n);
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] = static_cast<int32_t>((rank + i) % 7 - 3);
    DeviceArray<int32_t> d(x);
    AllreduceOptions options;
    options.op = ReduceOp::kAverage;
    absl::StatusOr<Handle> h = Allreduce("int32.avg", OnDevice(d, DataType::kInt32, {n}),
                                         OnDevice(d, DataType::kInt32, {n}), options);
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    const std::vector<int32_t> got = d.ToHost();
    size_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t sum = 0;
      for (int r = 0; r < size; ++r) sum += (r + i) % 7 - 3;
      if (got[static_cast<size_t>(i)] != static_cast<int32_t>(sum / size)) ++bad;
    }
    CHECK(bad == 0);
  }
  {  // fp16 and bf16 sums of small integers are exact
    for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
      std::vector<uint16_t> x(n);
      for (int64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>((rank * 3 + i) % 9);
        x[static_cast<size_t>(i)] =
            dtype == DataType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
      }
      DeviceArray<uint16_t> d(x);
      AllreduceOptions options;
      options.op = ReduceOp::kSum;
      absl::StatusOr<Handle> h =
          Allreduce(absl::StrCat("half.sum.", DataTypeName(dtype)), OnDevice(d, dtype, {n}),
                    OnDevice(d, dtype, {n}), options);
      REQUIRE(h.ok());
      REQUIRE(h->Wait(kWait).ok());
      const std::vector<uint16_t> got = d.ToHost();
      size_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < size; ++r) want += static_cast<float>((r * 3 + i) % 9);
        const uint16_t g = got[static_cast<size_t>(i)];
        if ((dtype == DataType::kFloat16 ? HalfToFloat(g) : BFloat16ToFloat(g)) != want) ++bad;
      }
      INFO(DataTypeName(dtype));
      CHECK(bad == 0);
    }
  }
  {  // fp64 with prescale and postscale
    std::vector<double> x(n, rank + 1.0);
    DeviceArray<double> d(x);
    AllreduceOptions options;
    options.op = ReduceOp::kSum;
    options.prescale = 0.5;
    options.postscale = 4.0;
    absl::StatusOr<Handle> h = Allreduce("f64.scaled", OnDevice(d, DataType::kFloat64, {n}),
                                         OnDevice(d, DataType::kFloat64, {n}), options);
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    const std::vector<double> got = d.ToHost();
    CHECK(got[0] == 2.0 * size * (size + 1) / 2.0);
    CHECK(got[static_cast<size_t>(n - 1)] == 2.0 * size * (size + 1) / 2.0);
  }
}

TEST_CASE("CUDA allreduces in many buckets queued back to back keep their values", "[gpu]") {
  if (!testing::GpuOrSkip()) return;
  // The dtype changes every second tensor, which closes a fused bucket: 30 buckets of two one
  // after the other on one channel, through one fusion buffer that grows on the way, with
  // scaling on both sides. On NCCL they are queued on the stream without waiting for each other
  // (runtime/planes/data_plane.h).
  const int rank = Rank(), size = Size();
  constexpr int kTensors = 60;
  std::vector<std::unique_ptr<DeviceArray<float>>> f32;
  std::vector<std::unique_ptr<DeviceArray<double>>> f64;
  std::vector<Handle> handles;
  AllreduceOptions options;
  options.op = ReduceOp::kSum;
  options.prescale = 0.5;
  options.postscale = 2.0;
  for (int t = 0; t < kTensors; ++t) {
    const int64_t n = 100 + 37 * t;
    absl::StatusOr<Handle> h;
    if ((t / 2) % 2 == 0) {
      f32.push_back(std::make_unique<DeviceArray<float>>(
          std::vector<float>(static_cast<size_t>(n), static_cast<float>(rank + t))));
      h = Allreduce(absl::StrCat("queued.", t), OnDevice(*f32.back(), DataType::kFloat32, {n}),
                    OnDevice(*f32.back(), DataType::kFloat32, {n}), options);
    } else {
      f64.push_back(std::make_unique<DeviceArray<double>>(
          std::vector<double>(static_cast<size_t>(n), rank + t)));
      h = Allreduce(absl::StrCat("queued.", t), OnDevice(*f64.back(), DataType::kFloat64, {n}),
                    OnDevice(*f64.back(), DataType::kFloat64, {n}), options);
    }
    REQUIRE(h.ok());
    handles.push_back(*h);
  }
  for (int t = 0; t < kTensors; ++t) {
    const absl::Status s = handles[static_cast<size_t>(t)].Wait(kWait);
    INFO("tensor " << t << ": " << s.message());
    REQUIRE(s.ok());
    const double want = size * (size - 1) / 2.0 + static_cast<double>(size) * t;
    size_t bad = 0;
    // Tensor t is the (t / 4 * 2 + t % 2)-th of its dtype.
    const size_t index = static_cast<size_t>(t / 4 * 2 + t % 2);
    if ((t / 2) % 2 == 0) {
      for (float v : f32[index]->ToHost()) bad += v != want ? 1 : 0;
    } else {
      for (double v : f64[index]->ToHost()) bad += v != want ? 1 : 0;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("CUDA allgather, broadcast, reducescatter and alltoall", "[gpu]") {
  if (!testing::GpuOrSkip()) return;
  const int rank = Rank(), size = Size();
  {  // allgather with a different first dimension on each rank
    const int64_t rows = rank + 1, cols = 5;
    std::vector<float> x(static_cast<size_t>(rows * cols), static_cast<float>(rank));
    DeviceArray<float> d(x);
    absl::StatusOr<Handle> h = Allgather("gather", OnDevice(d, DataType::kFloat32, {rows, cols}));
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    const std::vector<float> got = OutputToHost<float>(*h);
    std::vector<float> want;
    for (int r = 0; r < size; ++r) want.insert(want.end(), static_cast<size_t>((r + 1) * cols), r);
    CHECK(got == want);
    CHECK(h->output().shape == std::vector<int64_t>{size * (size + 1) / 2, cols});
  }
  {  // broadcast from the last rank, out of place
    const int root = size - 1;
    std::vector<int64_t> x(1000, rank == root ? 42 : -1);
    DeviceArray<int64_t> in(x), out(std::vector<int64_t>(1000, 0));
    BroadcastOptions options;
    options.root = root;
    absl::StatusOr<Handle> h = Broadcast("bcast", OnDevice(in, DataType::kInt64, {1000}),
                                         OnDevice(out, DataType::kInt64, {1000}), options);
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    CHECK(out.ToHost() == std::vector<int64_t>(1000, 42));
  }
  {  // reducescatter of size*2+1 rows: the first rank gets one more
    const int64_t rows = size * 2 + 1, cols = 3;
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + rank);
    DeviceArray<float> d(x);
    ReduceScatterOptions options;
    options.op = ReduceOp::kSum;
    absl::StatusOr<Handle> h =
        ReduceScatter("rs", OnDevice(d, DataType::kFloat32, {rows, cols}), options);
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    const int64_t mine = rows / size + (rank < rows % size ? 1 : 0);
    const int64_t first = rank * (rows / size) + std::min<int64_t>(rank, rows % size);
    const std::vector<float> got = OutputToHost<float>(*h);
    REQUIRE(static_cast<int64_t>(got.size()) == mine * cols);
    size_t bad = 0;
    for (int64_t i = 0; i < mine * cols; ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += static_cast<float>(first * cols + i + r);
      if (got[static_cast<size_t>(i)] != want) ++bad;
    }
    CHECK(bad == 0);
  }
  {  // alltoall: rank r sends r+1 rows of value 100*r + peer to each peer
    const int64_t cols = 2;
    std::vector<int64_t> splits(static_cast<size_t>(size), rank + 1);
    std::vector<int32_t> x;
    for (int peer = 0; peer < size; ++peer) {
      x.insert(x.end(), static_cast<size_t>((rank + 1) * cols), 100 * rank + peer);
    }
    DeviceArray<int32_t> d(x);
    AlltoallOptions options;
    options.splits = splits;
    absl::StatusOr<Handle> h = Alltoall(
        "a2a", OnDevice(d, DataType::kInt32, {static_cast<int64_t>(size) * (rank + 1), cols}),
        options);
    REQUIRE(h.ok());
    REQUIRE(h->Wait(kWait).ok());
    std::vector<int32_t> want;
    for (int r = 0; r < size; ++r)
      want.insert(want.end(), static_cast<size_t>((r + 1) * cols), 100 * r + rank);
    CHECK(OutputToHost<int32_t>(*h) == want);
  }
}

TEST_CASE("CUDA allreduce waits for the producer's stream", "[gpu]") {
  if (!testing::GpuOrSkip()) return;
  const int rank = Rank(), size = Size();
  cudaStream_t producer;
  REQUIRE(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
  // The producer stream is held by a host callback until the tensor was submitted; only then is
  // the tensor written. A runtime that did not wait on the stream would reduce stale zeros.
  std::atomic<bool> release{false};
  const int64_t n = 1 << 20;
  DeviceArray<float> d(std::vector<float>(n, 0.0f));
  std::vector<float> values(n, static_cast<float>(rank + 1));
  float* pinned = nullptr;
  REQUIRE(cudaMallocHost(&pinned, n * sizeof(float)) == cudaSuccess);
  std::memcpy(pinned, values.data(), n * sizeof(float));
  REQUIRE(cudaLaunchHostFunc(
              producer,
              [](void* flag) {
                while (!static_cast<std::atomic<bool>*>(flag)->load()) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
              },
              &release) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(d.get(), pinned, n * sizeof(float), cudaMemcpyHostToDevice, producer) ==
          cudaSuccess);
  AllreduceOptions options;
  options.op = ReduceOp::kSum;
  absl::StatusOr<Handle> h =
      Allreduce("stream.ordered", OnDevice(d, DataType::kFloat32, {n}, producer),
                OnDevice(d, DataType::kFloat32, {n}, producer), options);
  REQUIRE(h.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(h->Poll());  // it cannot have finished: its input is not written yet
  release = true;
  REQUIRE(h->Wait(kWait).ok());
  const std::vector<float> got = d.ToHost();
  CHECK(got[0] == size * (size + 1) / 2.0f);
  CHECK(got[n - 1] == size * (size + 1) / 2.0f);
  cudaStreamSynchronize(producer);
  cudaStreamDestroy(producer);
  cudaFreeHost(pinned);
}

TEST_CASE("CUDA and CPU tensors mixed in one operation are refused", "[gpu]") {
  if (!testing::GpuOrSkip()) return;
  std::vector<float> host(8, 1.0f);
  DeviceArray<float> d(host);
  absl::StatusOr<Handle> h =
      Allreduce("mixed", OnDevice(d, DataType::kFloat32, {8}), MakeTensor(host.data(), {8}));
  REQUIRE_FALSE(h.ok());
  CHECK(h.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(h.status().message()),
             Catch::Contains("rank ") && Catch::Contains("'mixed'") &&
                 Catch::Contains("output 0 is on cpu but input 0 is on cuda:"));
}

// A gradient with a wide range of magnitudes and both signs, the same on every run: tensor t of
// `step` on `rank`.
std::vector<float> Gradient(int rank, int step, size_t t, size_t n) {
  std::vector<float> g(n);
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(1 + rank * 131 + step * 17 + t * 7);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const float unit = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f;
    g[i] = unit * std::ldexp(1.0f, static_cast<int>((x >> 8) % 12) - 6);
  }
  return g;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Index of the first element of `a` whose bits differ from `b`'s, or with `relative`, that is
// further from it than relative * max |b|; -1 when there is none.
int64_t FirstDifference(const std::vector<float>& a, const std::vector<float>& b,
                        float relative = 0.0f) {
  if (a.size() != b.size()) return 0;
  float largest = 0.0f;
  for (float x : b) largest = std::max(largest, std::fabs(x));
  for (size_t i = 0; i < a.size(); ++i) {
    if (relative > 0.0f ? std::fabs(a[i] - b[i]) > relative * largest : Bits(a[i]) != Bits(b[i])) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

const std::vector<int64_t> kCompressedSizes = {1000, 4099, 70001, 1 << 20};

// One step of every tensor of kCompressedSizes under `spec`, submitted together so that they
// fuse into one compressed bucket, as CUDA tensors (`on_device`) or host tensors named apart.
// Returns each tensor's averaged result.
std::vector<std::vector<float>> CompressedStep(const std::string& spec, const std::string& tag,
                                               int step, bool on_device) {
  const int rank = Rank();
  std::vector<std::vector<float>> host(kCompressedSizes.size());
  std::vector<std::unique_ptr<DeviceArray<float>>> device;
  std::vector<Handle> handles;
  AllreduceOptions options;
  options.compression = spec;
  for (size_t t = 0; t < kCompressedSizes.size(); ++t) {
    const int64_t n = kCompressedSizes[t];
    host[t] = Gradient(rank, step, t, static_cast<size_t>(n));
    const std::string name = absl::StrCat(tag, on_device ? ".cuda." : ".host.", t);
    absl::StatusOr<Handle> h;
    if (on_device) {
      device.push_back(std::make_unique<DeviceArray<float>>(host[t]));
      h = Allreduce(name, OnDevice(*device.back(), DataType::kFloat32, {n}),
                    OnDevice(*device.back(), DataType::kFloat32, {n}), options);
    } else {
      h = Allreduce(name, MakeTensor(host[t].data(), {n}), MakeTensor(host[t].data(), {n}),
                    options);
    }
    REQUIRE(h.ok());
    handles.push_back(*h);
  }
  for (size_t t = 0; t < handles.size(); ++t) {
    const absl::Status s = handles[t].Wait(kWait);
    INFO(s.message());
    REQUIRE(s.ok());
    if (on_device) host[t] = device[t]->ToHost();
  }
  return host;
}

TEST_CASE("compressed allreduce of CUDA tensors equals the host compressors'",
          "[gpu][compression]") {
  if (!testing::GpuOrSkip()) return;
  // Steps enough for residuals to matter: covap sends each shard once every R steps, top-k and
  // efsign carry what they did not send, the casts carry their rounding error.
  const std::vector<std::string> specs = {"fp16",
                                          "fp16:ef=0",
                                          "bf16",
                                          "covap:R=3,shard=100",
                                          "covap:R=2,alpha0=0.5,ramp_steps=3",
                                          "topk:ratio=0.01",
                                          "efsign"};
  for (size_t c = 0; c < specs.size(); ++c) {
    const std::string tag = absl::StrCat("compressed.", c);
    for (int step = 0; step < 4; ++step) {
      const std::vector<std::vector<float>> want = CompressedStep(specs[c], tag, step, false);
      const std::vector<std::vector<float>> got = CompressedStep(specs[c], tag, step, true);
      for (size_t t = 0; t < want.size(); ++t) {
        // efsign's scale is a sum over the tensor, added in another order on the GPU (its sign
        // bits are the CPU's): each rank's term within 1e-5 of the largest result; every other
        // compressor to the bit.
        const int64_t at = FirstDifference(got[t], want[t], specs[c] == "efsign" ? 2e-5f : 0.0f);
        INFO(specs[c] << ", step " << step << ", tensor " << t << " of " << want[t].size()
                      << " elements: first difference at " << at << " (cuda "
                      << (at >= 0 ? got[t][at] : 0.0f) << ", host "
                      << (at >= 0 ? want[t][at] : 0.0f) << ")");
        CHECK(at == -1);
      }
    }
  }
}

TEST_CASE("a checkpoint of CUDA residuals resumes the same results", "[gpu][compression]") {
  if (!testing::GpuOrSkip()) return;
  for (const std::string spec : {"covap:R=3,shard=100", "topk:ratio=0.01"}) {
    const std::string tag = absl::StrCat("resume.", spec);
    CompressedStep(spec, tag, 0, true);
    CompressedStep(spec, tag, 1, true);
    absl::StatusOr<std::string> snapshot = SaveCompressionState();
    REQUIRE(snapshot.ok());
    const std::vector<std::vector<float>> first = CompressedStep(spec, tag, 2, true);
    const std::vector<std::vector<float>> second = CompressedStep(spec, tag, 3, true);
    REQUIRE(RestoreCompressionState(*snapshot).ok());
    const std::vector<std::vector<float>> first_again = CompressedStep(spec, tag, 2, true);
    const std::vector<std::vector<float>> second_again = CompressedStep(spec, tag, 3, true);
    for (size_t t = 0; t < first.size(); ++t) {
      INFO(spec << ", tensor " << t);
      CHECK(FirstDifference(first_again[t], first[t]) == -1);
      CHECK(FirstDifference(second_again[t], second[t]) == -1);
    }
  }
}

// One step of the planned test: three CUDA tensors and one host tensor, averaged, each checked
// against the average of Gradient over the ranks. `first_size` replaces tensor 0's element count.
void PlannedStep(int step, int64_t first_size) {
  const int rank = Rank(), size = Size();
  const std::vector<int64_t> sizes = {first_size, 4099, 65536, 777};
  std::vector<std::vector<float>> host(sizes.size());
  std::vector<std::unique_ptr<DeviceArray<float>>> device;
  std::vector<Handle> handles;
  for (size_t t = 0; t < sizes.size(); ++t) {
    host[t] = Gradient(rank, step, t, static_cast<size_t>(sizes[t]));
    const std::string name = absl::StrCat("planned.", t);
    absl::StatusOr<Handle> h;
    if (t + 1 < sizes.size()) {
      device.push_back(std::make_unique<DeviceArray<float>>(host[t]));
      h = Allreduce(name, OnDevice(*device.back(), DataType::kFloat32, {sizes[t]}),
                    OnDevice(*device.back(), DataType::kFloat32, {sizes[t]}));
    } else {
      h = Allreduce(name, MakeTensor(host[t].data(), {sizes[t]}),
                    MakeTensor(host[t].data(), {sizes[t]}));
    }
    REQUIRE(h.ok());
    handles.push_back(*h);
  }
  for (size_t t = 0; t < sizes.size(); ++t) {
    const absl::Status s = handles[t].Wait(kWait);
    INFO("step " << step << ", tensor " << t << ": " << s.message());
    REQUIRE(s.ok());
    const std::vector<float> got = t < device.size() ? device[t]->ToHost() : host[t];
    // The float sum of `size` terms, in any order, is within a few ulps of the sum of their
    // magnitudes: where the terms cancel, that is far more than of the result.
    std::vector<double> want(got.size(), 0.0), magnitude(got.size(), 0.0);
    for (int r = 0; r < size; ++r) {
      const std::vector<float> g = Gradient(r, step, t, got.size());
      for (size_t i = 0; i < got.size(); ++i) {
        want[i] += g[i];
        magnitude[i] += std::fabs(g[i]);
      }
    }
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::fabs(got[i] - want[i] / size) > 1e-6 * magnitude[i] / size + 1e-30) ++bad;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("a repeating step of CUDA tensors runs on the frozen plan, without negotiation",
          "[gpu][planned]") {
  if (!testing::GpuOrSkip()) return;
  const int64_t dropped = Stats().plans_dropped;
  // OVERLAP_PLAN_AFTER_STEPS (3) steps to learn, then planned ones.
  for (int step = 0; step < 6; ++step) PlannedStep(step, 1000);
  const RuntimeStats before = Stats();
  for (int step = 6; step < 12; ++step) PlannedStep(step, 1000);
  const RuntimeStats after = Stats();
  INFO("planned tensors " << after.planned_tensors << ", launches " << before.planned_launches
                          << " -> " << after.planned_launches << ", negotiated "
                          << before.negotiated_operations << " -> " << after.negotiated_operations);
  CHECK(after.planned_tensors == 4);  // the three CUDA tensors as well as the host one
  CHECK(after.planned_launches > before.planned_launches);
  CHECK(after.negotiated_operations == before.negotiated_operations);
  // A CUDA tensor that comes back with another size leaves the plan on every rank, and is reduced
  // by negotiation from its own input.
  PlannedStep(12, 999);
  CHECK(Stats().plans_dropped > dropped);
}

TEST_CASE("compressors without CUDA kernels are refused for CUDA tensors, naming them",
          "[gpu][compression]") {
  if (!testing::GpuOrSkip()) return;
  std::vector<float> x(64, 1.0f);
  DeviceArray<float> d(x);
  for (const std::string spec :
       {"randomk:ratio=0.1", "powersgd:rank=2", "topk:ratio=0.1,method=sampled"}) {
    AllreduceOptions options;
    options.compression = spec;
    absl::StatusOr<Handle> h =
        Allreduce("refused.compression", OnDevice(d, DataType::kFloat32, {64}),
                  OnDevice(d, DataType::kFloat32, {64}), options);
    absl::Status s = h.ok() ? h->Wait(kWait) : h.status();
    INFO(spec << ": " << s.message());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("rank ") &&
                                             Catch::Contains("'refused.compression'") &&
                                             Catch::Contains("of CUDA tensors is not available") &&
                                             Catch::Contains(spec.substr(0, spec.find(':'))));
  }
}

// OVERLAP_PLANNER's scheduled plan over CUDA gradients (tests/gpu/BUILD runs this case alone,
// once per planner): rank r contributes r + step + (i % 5) at element i, so every average is exact
// in float, before, during and after the plan is adopted, whatever the planner slices, fuses or
// splits into reduce-scatter and all-gather.
TEST_CASE("every planner's scheduled plan keeps CUDA gradients exact", "[gpu][.scheduled]") {
  if (!testing::GpuOrSkip()) return;
  const char* planner = std::getenv("OVERLAP_PLANNER");
  REQUIRE(planner != nullptr);
  const std::vector<int64_t> sizes = {3, 1000, 250000, 17, 400000, 64, 4096, 131072, 5};
  std::vector<std::unique_ptr<DeviceArray<float>>> grads;
  for (int64_t n : sizes) {
    grads.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(n, 0.0f)));
  }
  std::vector<Handle> handles(sizes.size());
  std::vector<bool> pending(sizes.size(), false);
  auto check = [&](size_t l, int step) {
    REQUIRE(handles[l].Wait(kWait).ok());
    pending[l] = false;
    const std::vector<float> got = grads[l]->ToHost();
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = static_cast<float>((Size() - 1) / 2.0 + step + static_cast<int>(i % 5));
      if (got[i] != want) ++bad;
    }
    INFO("layer " << l << " at step " << step);
    CHECK(bad == 0);
  };
  auto agreed_max = [](int64_t local) {
    int64_t all = local;
    MPI_Allreduce(&local, &all, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    return all;
  };
  int64_t adopted = -1;
  int step = 0;
  for (; step < 120 && (adopted < 0 || step < adopted + 8); ++step) {
    REQUIRE(StartForward().ok());
    for (size_t l = 0; l < sizes.size(); ++l) {
      if (pending[l]) check(l, step - 1);
    }
    REQUIRE(StartBackward().ok());
    for (size_t l = sizes.size(); l-- > 0;) {
      std::vector<float> values(static_cast<size_t>(sizes[l]));
      for (size_t i = 0; i < values.size(); ++i) {
        values[i] = static_cast<float>(Rank() + step + static_cast<int>(i % 5));
      }
      REQUIRE(cudaMemcpy(grads[l]->get(), values.data(), values.size() * sizeof(float),
                         cudaMemcpyHostToDevice) == cudaSuccess);
      AllreduceOptions options;
      options.plan_may_delay = true;
      const std::string name = absl::StrCat("sched.layer", l);
      absl::StatusOr<Handle> h =
          Allreduce(name, OnDevice(*grads[l], DataType::kFloat32, {sizes[l]}),
                    OnDevice(*grads[l], DataType::kFloat32, {sizes[l]}), options);
      REQUIRE(h.ok());
      handles[l] = *h;
      pending[l] = true;
    }
    REQUIRE(StartUpdate().ok());
    adopted = agreed_max(Stats().plan_adopted_step);
  }
  for (size_t l = 0; l < sizes.size(); ++l) {
    if (pending[l]) check(l, step - 1);
  }
  const RuntimeStats stats = Stats();
  INFO("planner " << stats.planner << ", adopted at " << stats.plan_adopted_step << ", "
                  << stats.plan_buckets << " buckets, device buffers "
                  << stats.plan_device_buffer_bytes);
  REQUIRE(adopted >= 0);
  CHECK(stats.plans_refused == 0);
  CHECK(std::string(stats.planner).find(planner) != std::string::npos);
  if (const char* expected = std::getenv("OVERLAP_TEST_EXPECT_EXECUTOR")) {
    CHECK(stats.cuda_executor == expected);
  }
  // OVERLAP_COMPRESSION=fp16: every bucket compressed by the CUDA kernels (small integers stay
  // exact in fp16).
  const char* compression = std::getenv("OVERLAP_COMPRESSION");
  if (compression != nullptr && std::string(compression) != "none") {
    CHECK(stats.plan_compressed_buckets == stats.plan_buckets);
  }
}

}  // namespace
}  // namespace overlap
