// CudaBufferOps against CpuBufferOps: batched copies bit for bit for every dtype and scaling
// (NaNs, infinities and subnormals included), batches of 1, 3 and 5000 slices, odd sizes,
// misaligned pointers, zeros and in-place slices; WaitForStream ordering and fences, checked
// with a stream held shut by a host function rather than with timing; staging reuse under a
// backlog; allocation failures. Every case skips (or fails under OVERLAP_REQUIRE_GPU=1) without
// a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/buffer_ops.h"
#include "tests/gpu/gpu_gate.h"

namespace overlap {
namespace {

#define CUDA_REQUIRE(call) REQUIRE((call) == cudaSuccess)

constexpr DataType kAllTypes[] = {
    DataType::kUint8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
    DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
};

std::unique_ptr<BufferOps> CudaOps(void* stream = nullptr) {
  absl::StatusOr<std::unique_ptr<BufferOps>> ops = CreateBufferOps(Device::Cuda(0), stream);
  INFO(ops.status().ToString());
  REQUIRE(ops.ok());
  return *std::move(ops);
}

// Polls a fence until it reports done (or fails the test after 30 s).
void Finish(BufferOps& ops) {
  absl::StatusOr<std::unique_ptr<Work>> fence = ops.Fence();
  REQUIRE(fence.ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    absl::StatusOr<bool> done = (*fence)->Test();
    INFO(done.status().ToString());
    REQUIRE(done.ok());
    if (*done) return;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// Device memory allocated by the test itself, so the reference does not lean on BufferOps.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    CUDA_REQUIRE(cudaMalloc(&data_, std::max<size_t>(bytes, 1)));
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  uint8_t* get() const { return static_cast<uint8_t*>(data_); }
  void Upload(const std::vector<uint8_t>& host) {
    CUDA_REQUIRE(cudaMemcpy(data_, host.data(), host.size(), cudaMemcpyHostToDevice));
    // From pageable memory cudaMemcpy may return before the DMA lands, and the copy kernels run
    // on a non-blocking stream that does not wait for it (seen on an H200: a source element
    // read as the fresh allocation's zero).
    CUDA_REQUIRE(cudaDeviceSynchronize());
  }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> host(bytes_);
    CUDA_REQUIRE(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void* data_ = nullptr;
  const size_t bytes_;
};

// Host bytes whose first byte is 256-byte aligned, like cudaMalloc's, so the host and device
// arenas have the same alignment at every offset.
class HostArena {
 public:
  explicit HostArena(const std::vector<uint8_t>& bytes) : storage_(bytes.size() + 256) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + ((256 - base % 256) % 256);
    std::memcpy(data_, bytes.data(), bytes.size());
    size_ = bytes.size();
  }
  uint8_t* get() { return data_; }
  std::vector<uint8_t> bytes() const { return std::vector<uint8_t>(data_, data_ + size_); }

 private:
  std::vector<uint8_t> storage_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Bit patterns every scaling must get right: signalling and quiet NaNs of both signs with
// payloads, infinities, signed zeros, subnormals, the largest finite values, rounding ties.
std::vector<uint64_t> Specials(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return {0x7c01, 0x7e00, 0xfc01, 0x7d55, 0xfe3f, 0x7c00, 0xfc00, 0x0000, 0x8000,
              0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0x3c01, 0x3555};
    case DataType::kBFloat16:
      return {0x7f81, 0x7fc0, 0xff81, 0x7fa5, 0xffc3, 0x7f80, 0xff80, 0x0000, 0x8000,
              0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0x3f81, 0x3eab};
    case DataType::kFloat32:
      return {0x7f800001, 0x7fc00000, 0xff800001, 0x7fa5a5a5, 0xffc00123, 0x7f800000,
              0xff800000, 0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff,
              0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0x3f800001, 0x33800000,
              0x38800000, 0x387fe000, 0x477ff000, 0x3f808000};
    case DataType::kFloat64:
      return {0x7ff0000000000001, 0x7ff8000000000000, 0xfff0000000000001, 0x7ff5a5a5a5a5a5a5,
              0xfff8000000000123, 0x7ff0000000000000, 0xfff0000000000000, 0x0000000000000000,
              0x8000000000000000, 0x0000000000000001, 0x800fffffffffffff, 0x7fefffffffffffff,
              0x3ff0000000000000, 0x3ff0000000000001};
    case DataType::kInt64:
      return {0x8000000000000000, 0x7fffffffffffffff, 0xffffffffffffffff, 0, 1, 0xfffffffffffffff9};
    case DataType::kInt32:
      return {0x80000000, 0x7fffffff, 0xffffffff, 0, 1, 0xfffffff9};
    case DataType::kInt8:
    case DataType::kUint8:
      return {0x80, 0x7f, 0xff, 0, 1, 0xf9};
  }
  return {};
}

// Random bytes with about one element in eight replaced by a special.
std::vector<uint8_t> ArenaBytes(DataType dtype, size_t bytes, uint32_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<uint8_t> out(bytes);
  for (uint8_t& b : out) b = static_cast<uint8_t>(gen());
  const size_t size = DataTypeSize(dtype);
  const std::vector<uint64_t> specials = Specials(dtype);
  for (size_t i = 0; i + size <= bytes; i += size) {
    if (gen() % 8 == 0) std::memcpy(&out[i], &specials[gen() % specials.size()], size);
  }
  return out;
}

enum class Source { kCopy, kZeros, kInPlace };

// One slice as offsets into a destination and a source arena, so the same batch runs on host and
// device arenas.
struct SliceSpec {
  int64_t count;
  size_t dst_offset;
  size_t src_offset;
  Source source;
};

struct Batch {
  std::vector<SliceSpec> slices;
  size_t dst_bytes = 0;
  size_t src_bytes = 0;
};

enum class Alignment { k16Bytes, kOdd, kMixed };

// Lays out slices of `counts` one after another with random gaps. k16Bytes starts every slice on
// a 16-byte boundary; kOdd puts dst and src one and two elements past one (so neither is
// vector-aligned where elements are smaller than 16 bytes); kMixed picks per slice. `sources`
// names each slice's source, or is empty for a random mix (mostly copies).
Batch Layout(DataType dtype, const std::vector<int64_t>& counts, Alignment alignment,
             std::vector<Source> sources, uint32_t seed) {
  std::mt19937 gen(seed);
  const size_t size = DataTypeSize(dtype);
  Batch batch;
  const auto place = [&](size_t* cursor, size_t skew_elements, bool aligned) {
    *cursor = (*cursor + 15) / 16 * 16;
    if (!aligned) *cursor += skew_elements * size;
    const size_t at = *cursor;
    return at;
  };
  for (size_t i = 0; i < counts.size(); ++i) {
    Source source = Source::kCopy;
    if (!sources.empty()) {
      source = sources[i];
    } else if (gen() % 10 == 0) {
      source = gen() % 2 == 0 ? Source::kZeros : Source::kInPlace;
    }
    const bool aligned =
        alignment == Alignment::k16Bytes || (alignment == Alignment::kMixed && gen() % 2 == 0);
    const size_t bytes = static_cast<size_t>(counts[i]) * size;
    SliceSpec spec{counts[i], place(&batch.dst_bytes, 1, aligned), 0, source};
    batch.dst_bytes += bytes + (gen() % 4) * size;
    if (source == Source::kCopy) {
      spec.src_offset = place(&batch.src_bytes, 2, aligned);
      batch.src_bytes += bytes + (gen() % 4) * size;
    }
    batch.slices.push_back(spec);
  }
  batch.dst_bytes += 64;
  batch.src_bytes += 64;
  return batch;
}

std::vector<CopySlice> Slices(const Batch& batch, uint8_t* dst, uint8_t* src) {
  std::vector<CopySlice> slices;
  for (const SliceSpec& s : batch.slices) {
    CopySlice slice{dst + s.dst_offset, nullptr, s.count};
    if (s.source == Source::kCopy) slice.src = src + s.src_offset;
    if (s.source == Source::kInPlace) slice.src = slice.dst;
    slices.push_back(slice);
  }
  return slices;
}

std::string Hex(const uint8_t* p, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p, size);
  char text[32];
  std::snprintf(text, sizeof(text), "0x%0*llx", static_cast<int>(2 * size),
                static_cast<unsigned long long>(v));
  return text;
}

// Runs `batch` through the CPU and the CUDA ops from identical arenas and requires identical
// destination arenas (gaps included, so a stray write shows too).
void RequireSameAsCpu(BufferOps& gpu, DataType dtype, const Batch& batch, CopyScaling scaling,
                      uint32_t seed) {
  const std::vector<uint8_t> dst0 = ArenaBytes(dtype, batch.dst_bytes, seed);
  const std::vector<uint8_t> src0 = ArenaBytes(dtype, batch.src_bytes, seed + 1);
  HostArena host_dst(dst0), host_src(src0);
  REQUIRE(CreateCpuBufferOps()
              ->Copy(Slices(batch, host_dst.get(), host_src.get()), dtype, scaling)
              .ok());
  DeviceBuffer device_dst(dst0.size()), device_src(src0.size());
  device_dst.Upload(dst0);
  device_src.Upload(src0);
  const absl::Status s =
      gpu.Copy(Slices(batch, device_dst.get(), device_src.get()), dtype, scaling);
  INFO(s.ToString());
  REQUIRE(s.ok());
  Finish(gpu);
  const std::vector<uint8_t> want = host_dst.bytes();
  const std::vector<uint8_t> got = device_dst.Download();
  if (want == got) return;
  const size_t size = DataTypeSize(dtype);
  const size_t first =
      static_cast<size_t>(std::mismatch(want.begin(), want.end(), got.begin()).first -
                          want.begin()) /
      size * size;
  size_t slice = 0;
  while (slice + 1 < batch.slices.size() && batch.slices[slice + 1].dst_offset <= first) ++slice;
  const size_t in_slice = first - std::min(first, batch.slices[slice].dst_offset);
  // The input of that element, where it came from a source arena.
  std::string input = "zeros";
  if (batch.slices[slice].source == Source::kCopy) {
    input = Hex(&src0[batch.slices[slice].src_offset + in_slice], size);
  } else if (batch.slices[slice].source == Source::kInPlace) {
    input = Hex(&dst0[first], size);
  }
  FAIL("first difference at byte "
       << first << " (slice " << slice << ", element " << in_slice / size << "): input " << input
       << ", CPU " << Hex(&want[first], size) << ", CUDA " << Hex(&got[first], size));
}

std::vector<CopyScaling> Scalings(DataType dtype) {
  if (!IsFloatingPoint(dtype)) {
    return {{1.0, 1}, {1.0, 2},       {1.0, 3},
            {1.0, 7}, {1.0, 1000003}, {1.0, std::numeric_limits<int64_t>::max()}};
  }
  // 1 + 1e-10 is not 1 but rounds to 1.0f: fp32 and fp16/bf16 multiply by one, quieting
  // signalling NaNs, where an exact 1 copies bytes. 0 turns infinities into x86's default NaN.
  return {{1.0, 1}, {0.25, 1}, {-1.0 / 3, 1}, {3.0e38, 1}, {1e-30, 1}, {0.0, 1}, {1.0 + 1e-10, 1}};
}

void RequireAllScalingsSameAsCpu(const std::vector<int64_t>& counts, Alignment alignment,
                                 const std::vector<Source>& sources) {
  std::unique_ptr<BufferOps> gpu = CudaOps();
  uint32_t seed = 1;
  for (DataType dtype : kAllTypes) {
    const Batch batch = Layout(dtype, counts, alignment, sources, seed++);
    for (const CopyScaling scaling : Scalings(dtype)) {
      INFO(DataTypeName(dtype) << " factor " << scaling.factor << " divisor " << scaling.divisor
                               << ", " << counts.size() << " slices");
      RequireSameAsCpu(*gpu, dtype, batch, scaling, seed++);
    }
  }
}

TEST_CASE("CUDA copy of one slice equals the CPU's for every dtype and scaling", "[cuda]") {
  if (!testing::GpuOrSkip()) return;
  RequireAllScalingsSameAsCpu({100003}, Alignment::k16Bytes, {Source::kCopy});
  RequireAllScalingsSameAsCpu({100003}, Alignment::kOdd, {Source::kCopy});
}

TEST_CASE("CUDA copy of three slices (copy, zeros, in place) equals the CPU's", "[cuda]") {
  if (!testing::GpuOrSkip()) return;
  for (Alignment alignment : {Alignment::k16Bytes, Alignment::kOdd, Alignment::kMixed}) {
    RequireAllScalingsSameAsCpu({12293, 517, 40000}, alignment,
                                {Source::kCopy, Source::kZeros, Source::kInPlace});
  }
}

TEST_CASE("CUDA copy of 5000 tiny slices equals the CPU's", "[cuda]") {
  if (!testing::GpuOrSkip()) return;
  std::mt19937 gen(5);
  std::vector<int64_t> counts(5000);
  for (int64_t& c : counts) c = static_cast<int64_t>(gen() % 41);  // empty slices included
  RequireAllScalingsSameAsCpu(counts, Alignment::kMixed, {});
}

TEST_CASE("CUDA copy of odd sizes at misaligned addresses equals the CPU's", "[cuda]") {
  if (!testing::GpuOrSkip()) return;
  RequireAllScalingsSameAsCpu({1, 3, 7, 15, 17, 1023, 4095, 4097, 65537, 262147}, Alignment::kOdd,
                              {});
  RequireAllScalingsSameAsCpu({1, 3, 7, 15, 17, 1023, 4095, 4097, 65537, 262147}, Alignment::kMixed,
                              {});
}

TEST_CASE("CUDA copy: empty batches and refusals", "[cuda]") {
  if (!testing::GpuOrSkip()) return;
  std::unique_ptr<BufferOps> gpu = CudaOps();
  CHECK(gpu->Copy({}, DataType::kFloat32, {}).ok());
  CHECK(gpu->Copy({{nullptr, nullptr, 0}, {nullptr, nullptr, 0}}, DataType::kFloat32, {}).ok());
  DeviceBuffer buffer(64);
  const absl::Status bad = gpu->Copy({{buffer.get() + 1, buffer.get(), 2}}, DataType::kInt32, {});
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad.message().find("cuda:0") != absl::string_view::npos);
  Finish(*gpu);  // the refusal left the stream usable
}

// A host function that holds a stream until the test opens it, so ordering checks need no
// timing. Opening is also done on destruction, so a failed check cannot leave a stream stuck.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) : stream_(stream) {
    CUDA_REQUIRE(cudaLaunchHostFunc(stream, &StreamGate::Hold, this));
  }
  ~StreamGate() {
    Open();
    cudaStreamSynchronize(stream_);
  }
  void Open() { open_.store(true); }

 private:
  static void CUDART_CB Hold(void* self) {
    while (!static_cast<StreamGate*>(self)->open_.load()) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  const cudaStream_t stream_;
  std::atomic<bool> open_{false};
};

class OwnedStream {
 public:
  OwnedStream() { CUDA_REQUIRE(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~OwnedStream() { cudaStreamDestroy(stream_); }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

bool Done(Work& work) {
  absl::StatusOr<bool> done = work.Test();
  REQUIRE(done.ok());
  return *done;
}

TEST_CASE("CUDA WaitForStream orders copies after another stream's work", "[cuda]") {
  if (!testing::GpuOrSkip()) return;
  std::unique_ptr<BufferOps> gpu = CudaOps();
  const size_t n = 1 << 20;
  DeviceBuffer produced(n), copied(n);
  CUDA_REQUIRE(cudaMemset(produced.get(), 0x11, n));
  absl::StatusOr<std::unique_ptr<DeviceMemory>> host = gpu->AllocateHost(n);
  REQUIRE(host.ok());
  OwnedStream producer;
  {
    StreamGate gate(producer.get());
    // The producer writes 0x42 only once the gate opens; the copy must wait for it.
    CUDA_REQUIRE(cudaMemsetAsync(produced.get(), 0x42, n, producer.get()));
    REQUIRE(gpu->WaitForStream(producer.get()).ok());
    REQUIRE(
        gpu->Copy({{copied.get(), produced.get(), static_cast<int64_t>(n)}}, DataType::kUint8, {})
            .ok());
    REQUIRE(gpu->CopyToHost((*host)->data(), copied.get(), n).ok());
    absl::StatusOr<std::unique_ptr<Work>> fence = gpu->Fence();
    REQUIRE(fence.ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(!Done(**fence));  // held behind the producer's gate
    gate.Open();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!Done(**fence)) REQUIRE(std::chrono::steady_clock::now() < deadline);
  }
  const auto* bytes = static_cast<const uint8_t*>((*host)->data());
  CHECK(std::all_of(bytes, bytes + n, [](uint8_t b) { return b == 0x42; }));
}

TEST_CASE("CUDA fences: pending while the stream is held, done after, one per point", "[cuda]") {
  if (!testing::GpuOrSkip()) return;
  OwnedStream stream;
  std::unique_ptr<BufferOps> gpu = CudaOps(stream.get());
  CHECK(gpu->stream() == static_cast<void*>(stream.get()));
  CHECK(gpu->device() == Device::Cuda(0));
  absl::StatusOr<std::unique_ptr<Work>> before = gpu->Fence();
  REQUIRE(before.ok());
  std::unique_ptr<Work> after;
  {
    StreamGate gate(stream.get());
    absl::StatusOr<std::unique_ptr<Work>> fence = gpu->Fence();
    REQUIRE(fence.ok());
    after = *std::move(fence);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(!Done(*after));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!Done(**before)) REQUIRE(std::chrono::steady_clock::now() < deadline);
    CHECK(!Done(*after));  // a fence covers only what was queued before it
  }
  CHECK(Done(*after));  // the gate's destructor synchronised the stream
}

TEST_CASE("CUDA copies queued behind a held stream keep their slice tables", "[cuda]") {
  if (!testing::GpuOrSkip()) return;
  // More batches than staging slots, with tables of different sizes, all queued before the GPU
  // runs any: a slot or device table reused too early would copy the wrong slices.
  std::unique_ptr<BufferOps> gpu = CudaOps();
  OwnedStream held;
  constexpr int kBatches = 40;
  const int64_t per_slice = 64;
  std::vector<int> slices_in(kBatches);
  int64_t total = 0;
  for (int b = 0; b < kBatches; ++b) {
    slices_in[b] = 1 + (b * 997) % 3000;
    total += slices_in[b] * per_slice;
  }
  std::vector<int32_t> values(total);
  for (int64_t i = 0; i < total; ++i) values[i] = static_cast<int32_t>(i * 7 + 1);
  DeviceBuffer src(total * 4), dst(total * 4);
  src.Upload(std::vector<uint8_t>(reinterpret_cast<uint8_t*>(values.data()),
                                  reinterpret_cast<uint8_t*>(values.data()) + total * 4));
  CUDA_REQUIRE(cudaMemset(dst.get(), 0, total * 4));
  StreamGate gate(held.get());
  REQUIRE(gpu->WaitForStream(held.get()).ok());
  // A full staging pool waits for the oldest upload; open the gate from elsewhere meanwhile.
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    gate.Open();
  });
  int64_t at = 0;
  for (int b = 0; b < kBatches; ++b) {
    std::vector<CopySlice> slices;
    for (int s = 0; s < slices_in[b]; ++s, at += per_slice) {
      // Reversed within each batch, so each table differs from the one before it.
      slices.push_back({dst.get() + 4 * at, src.get() + 4 * at, per_slice});
    }
    std::reverse(slices.begin(), slices.end());
    REQUIRE(gpu->Copy(slices, DataType::kInt32, {}).ok());
  }
  opener.join();
  Finish(*gpu);
  const std::vector<uint8_t> got = dst.Download();
  CHECK(std::memcmp(got.data(), values.data(), total * 4) == 0);
}

TEST_CASE("CUDA allocation: device and pinned memory, transfers, and failures", "[cuda]") {
  if (!testing::GpuOrSkip()) return;
  std::unique_ptr<BufferOps> gpu = CudaOps();
  absl::StatusOr<std::unique_ptr<DeviceMemory>> device = gpu->Allocate(1 << 20);
  absl::StatusOr<std::unique_ptr<DeviceMemory>> host = gpu->AllocateHost(1 << 20);
  REQUIRE(device.ok());
  REQUIRE(host.ok());
  CHECK((*device)->size() == (1u << 20));
  cudaPointerAttributes attributes;
  CUDA_REQUIRE(cudaPointerGetAttributes(&attributes, (*device)->data()));
  CHECK(attributes.type == cudaMemoryTypeDevice);
  CHECK(attributes.device == 0);
  CUDA_REQUIRE(cudaPointerGetAttributes(&attributes, (*host)->data()));
  CHECK(attributes.type == cudaMemoryTypeHost);

  std::vector<uint8_t> bytes(1 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
  std::memcpy((*host)->data(), bytes.data(), bytes.size());
  REQUIRE(gpu->CopyFromHost((*device)->data(), (*host)->data(), bytes.size()).ok());
  Finish(*gpu);  // the copy reads the pinned buffer asynchronously: clear it only after
  std::memset((*host)->data(), 0, bytes.size());
  REQUIRE(gpu->CopyToHost((*host)->data(), (*device)->data(), bytes.size()).ok());
  Finish(*gpu);
  CHECK(std::memcmp((*host)->data(), bytes.data(), bytes.size()) == 0);

  const size_t absurd = size_t{1} << 52;  // 4 PiB
  for (bool pinned : {false, true}) {
    absl::StatusOr<std::unique_ptr<DeviceMemory>> big =
        pinned ? gpu->AllocateHost(absurd) : gpu->Allocate(absurd);
    INFO(big.status().ToString());
    REQUIRE(!big.ok());
    CHECK(big.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(big.status().message().find("cuda:0") != absl::string_view::npos);
    CHECK(big.status().message().find(std::to_string(absurd)) != absl::string_view::npos);
  }
  // The failure left nothing behind: copies still run and report no error.
  REQUIRE(gpu->Copy({{(*device)->data(), nullptr, 16}}, DataType::kFloat32, {}).ok());
  Finish(*gpu);
}

TEST_CASE("CreateBufferOps refuses a CUDA device that does not exist", "[cuda]") {
  if (!testing::GpuOrSkip()) return;
  absl::StatusOr<std::unique_ptr<BufferOps>> ops =
      CreateBufferOps(Device::Cuda(CudaDeviceCount()), nullptr);
  REQUIRE(!ops.ok());
  CHECK(ops.status().code() == absl::StatusCode::kUnavailable);
  CHECK(ops.status().message().find("cuda:" + std::to_string(CudaDeviceCount())) !=
        absl::string_view::npos);
  CHECK(CudaUnavailableReason().empty());
}

}  // namespace
}  // namespace overlap
