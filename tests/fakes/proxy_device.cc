#include "tests/fakes/proxy_device.h"

#include <cstdlib>
#include <cstring>

#include <unistd.h>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/mpi_executor.h"
#include "collectives/staging_executor.h"

namespace overlap::fake {
namespace {

constexpr unsigned char kPoison = 0xA5;

// Every proxy stream's state is under this one lock: a stream may run another's steps (a
// WaitForStream), and buffer ops may be called from several threads.
std::recursive_mutex& ProxyLock() {
  static auto* lock = new std::recursive_mutex;
  return *lock;
}

// An in-order queue of steps. A step returns true once finished, false to be tried again later
// (a collective still running), or an error, which fails this step and every one after it.
class ProxyStream {
 public:
  using Step = std::function<absl::StatusOr<bool>()>;

  // The position of the step once queued (counting from 1).
  int64_t Enqueue(Step step) {
    std::lock_guard<std::recursive_mutex> lock(ProxyLock());
    steps_.push_back(std::move(step));
    return ++enqueued_;
  }
  int64_t enqueued() const {
    std::lock_guard<std::recursive_mutex> lock(ProxyLock());
    return enqueued_;
  }
  // Runs steps in order until one is not finished; true once the step at `position` has run.
  absl::StatusOr<bool> RunTo(int64_t position) {
    std::lock_guard<std::recursive_mutex> lock(ProxyLock());
    if (late_ && error_.ok() && executed_ < position && Coin()) return false;  // not there yet
    while (error_.ok() && executed_ < position && !steps_.empty() && !running_) {
      running_ = true;  // a step that waits on this stream again must not re-enter
      absl::StatusOr<bool> done = steps_.front()();
      running_ = false;
      if (!done.ok()) {
        error_ = done.status();
        break;
      }
      if (!*done) break;
      steps_.pop_front();
      ++executed_;
    }
    if (!error_.ok()) return error_;
    return executed_ >= position;
  }
  // A late stream reaches what it was asked about only every other time, at random, as a GPU's
  // copies finish at times the host does not choose and that differ between ranks.
  void set_late() { late_ = true; }

 private:
  static bool Coin() {
    static std::mt19937 bits(static_cast<uint32_t>(getpid()) ^
                             static_cast<uint32_t>(absl::ToUnixNanos(absl::Now())));
    return (bits() & 1) != 0;
  }

  bool late_ = false;
  std::deque<Step> steps_;
  int64_t enqueued_ = 0;
  int64_t executed_ = 0;
  bool running_ = false;
  absl::Status error_;
};

// Done once its stream has run the step at `position`.
class StreamWork : public Work {
 public:
  StreamWork(std::shared_ptr<ProxyStream> stream, int64_t position)
      : stream_(std::move(stream)), position_(position) {}
  absl::StatusOr<bool> Test() override { return stream_->RunTo(position_); }

 private:
  const std::shared_ptr<ProxyStream> stream_;
  const int64_t position_;
};

// Host bytes, poisoned when allocated; freed only once the stream that allocated them has run what
// was queued before the memory was dropped (as cudaFreeAsync would).
class ProxyMemory : public DeviceMemory {
 public:
  ProxyMemory(std::shared_ptr<ProxyStream> stream, size_t size)
      : stream_(std::move(stream)),
        bytes_(new unsigned char[size == 0 ? 1 : size], std::default_delete<unsigned char[]>()),
        size_(size) {
    std::memset(bytes_.get(), kPoison, size_);
  }
  ~ProxyMemory() override {
    std::shared_ptr<unsigned char> bytes = std::move(bytes_);
    stream_->Enqueue([bytes]() -> absl::StatusOr<bool> { return true; });
  }
  void* data() const override { return bytes_.get(); }
  size_t size() const override { return size_; }
  std::shared_ptr<unsigned char> bytes() const { return bytes_; }

 private:
  const std::shared_ptr<ProxyStream> stream_;
  std::shared_ptr<unsigned char> bytes_;
  const size_t size_;
};

ProxyStream* AsStream(void* stream) { return static_cast<ProxyStream*>(stream); }

class ProxyBufferOps : public BufferOps {
 public:
  explicit ProxyBufferOps(std::shared_ptr<ProxyStream> stream)
      : stream_(std::move(stream)), cpu_(CreateCpuBufferOps()) {}

  Device device() const override { return Device::Cuda(0); }
  void* stream() const override { return stream_.get(); }

  // As cudaMallocAsync, the memory is this stream's from the point the allocation is queued at:
  // work queued on the stream before it (a delivery still reading the block a pool handed out
  // again) may still scribble on it until the stream gets there, which a step queued here plays
  // by poisoning the block once more. Another stream that uses the memory must wait for this
  // one first (WaitForStream), or that late poison overwrites what it wrote.
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(size_t bytes) override {
    auto memory = std::make_unique<ProxyMemory>(stream_, bytes);
    void* data = memory->data();
    std::shared_ptr<unsigned char> keep = memory->bytes();
    stream_->Enqueue([data, bytes, keep]() -> absl::StatusOr<bool> {
      std::memset(data, kPoison, bytes);
      return true;
    });
    return std::unique_ptr<DeviceMemory>(std::move(memory));
  }

  absl::Status WaitForStream(void* stream) override {
    if (stream == nullptr || stream == stream_.get()) return absl::OkStatus();
    ProxyStream* other = AsStream(stream);
    const int64_t target = other->enqueued();
    stream_->Enqueue([other, target] { return other->RunTo(target); });
    return absl::OkStatus();
  }

  absl::Status Copy(absl::Span<const CopySlice> slices, DataType dtype,
                    CopyScaling scaling) override {
    std::vector<CopySlice> queued(slices.begin(), slices.end());
    BufferOps* cpu = cpu_.get();
    stream_->Enqueue([cpu, queued, dtype, scaling]() -> absl::StatusOr<bool> {
      absl::Status s = cpu->Copy(queued, dtype, scaling);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("proxy cuda:0: ", s.message()));
      return true;
    });
    return absl::OkStatus();
  }

  absl::Status Accumulate(void* dst, const void* src, int64_t count, DataType dtype,
                          double factor) override {
    BufferOps* cpu = cpu_.get();
    stream_->Enqueue([cpu, dst, src, count, dtype, factor]() -> absl::StatusOr<bool> {
      absl::Status s = cpu->Accumulate(dst, src, count, dtype, factor);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("proxy cuda:0: ", s.message()));
      return true;
    });
    return absl::OkStatus();
  }

  absl::Status CopyToHost(void* host, const void* device_src, size_t bytes) override {
    stream_->Enqueue([host, device_src, bytes]() -> absl::StatusOr<bool> {
      std::memcpy(host, device_src, bytes);
      return true;
    });
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(void* device_dst, const void* host, size_t bytes) override {
    return CopyToHost(device_dst, host, bytes);
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> AllocateHost(size_t bytes) override {
    return cpu_->Allocate(bytes);
  }

  absl::StatusOr<std::unique_ptr<Work>> Fence() override {
    return std::unique_ptr<Work>(new StreamWork(stream_, stream_->enqueued()));
  }

 private:
  const std::shared_ptr<ProxyStream> stream_;
  const std::unique_ptr<BufferOps> cpu_;
};

class ProxyExecutor : public Executor {
 public:
  explicit ProxyExecutor(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {
    for (int c = 0; c < inner_->num_channels(); ++c) {
      streams_.push_back(std::make_shared<ProxyStream>());
    }
  }
  const char* name() const override { return "proxy+mpi"; }
  int num_channels() const override { return inner_->num_channels(); }
  void* channel_stream(int channel) const override {
    return streams_[static_cast<size_t>(channel)].get();
  }
  bool stream_ordered() const override { return true; }
  void Poke() override { inner_->Poke(); }
  void Abort() override { inner_->Abort(); }

  absl::StatusOr<std::unique_ptr<Work>> Start(int channel, const CollectiveArgs& args) override {
    if (channel < 0 || channel >= num_channels()) {
      return absl::InvalidArgumentError(absl::StrCat("proxy executor: no channel ", channel));
    }
    Executor* inner = inner_.get();
    auto started = std::make_shared<std::unique_ptr<Work>>();
    const std::shared_ptr<ProxyStream>& stream = streams_[static_cast<size_t>(channel)];
    const int64_t position =
        stream->Enqueue([inner, channel, args, started]() -> absl::StatusOr<bool> {
          if (*started == nullptr) {
            absl::StatusOr<std::unique_ptr<Work>> work = inner->Start(channel, args);
            if (!work.ok()) return work.status();
            *started = *std::move(work);
          }
          return (*started)->Test();
        });
    return std::unique_ptr<Work>(new StreamWork(stream, position));
  }

 private:
  const std::unique_ptr<Executor> inner_;
  std::vector<std::shared_ptr<ProxyStream>> streams_;
};

class ProxyBackend : public DeviceBackend {
 public:
  int DeviceCount() const override { return 1; }
  std::string UnavailableReason() const override { return ""; }
  absl::StatusOr<std::unique_ptr<BufferOps>> CreateBufferOps(Device device,
                                                             void* stream) const override {
    if (!device.is_cuda()) return CreateCpuBufferOps();
    if (device.index != 0) {
      return absl::UnavailableError(
          absl::StrCat("the proxy device is cuda:0; ", device.ToString(), " does not exist"));
    }
    if (stream == nullptr) return CreateProxyBufferOps();
    // A channel's stream: owned by the executor, which outlives the ops made on it.
    std::shared_ptr<ProxyStream> borrowed(AsStream(stream), [](ProxyStream*) {});
    return std::unique_ptr<BufferOps>(new ProxyBufferOps(std::move(borrowed)));
  }
  absl::StatusOr<std::unique_ptr<Executor>> CreateExecutor(MPI_Comm comm, int rank,
                                                           int /*device*/, const Config& config,
                                                           const HostSplit& split,
                                                           std::string* /*note*/) const override {
    MpiExecutorOptions options;
    options.num_channels = config.num_channels;
    options.host = split.host;
    options.hierarchical = split.hierarchical;
    absl::StatusOr<std::unique_ptr<MpiExecutor>> mpi = MpiExecutor::Create(comm, options);
    if (!mpi.ok()) return mpi.status();
    if (std::getenv("OVERLAP_TEST_PROXY_STAGED") != nullptr) {
      // As ranks sharing a GPU: each collective copied to host memory, reduced by MPI and copied
      // back, phase by phase, on a stream per channel; late streams, so that the collectives'
      // copies finish in an order of their own.
      std::vector<std::unique_ptr<BufferOps>> streams;
      for (int c = 0; c < (*mpi)->num_channels(); ++c) {
        auto stream = std::make_shared<ProxyStream>();
        stream->set_late();
        streams.push_back(std::make_unique<ProxyBufferOps>(std::move(stream)));
      }
      absl::StatusOr<std::unique_ptr<StagingExecutor>> staged =
          StagingExecutor::Create(*std::move(mpi), std::move(streams), rank);
      if (!staged.ok()) return staged.status();
      return std::unique_ptr<Executor>(*std::move(staged));
    }
    return CreateProxyExecutor(std::move(*mpi));
  }
};

}  // namespace

std::unique_ptr<DeviceBackend> CreateProxyDeviceBackend() {
  return std::make_unique<ProxyBackend>();
}

std::unique_ptr<BufferOps> CreateProxyBufferOps() {
  return std::make_unique<ProxyBufferOps>(std::make_shared<ProxyStream>());
}

std::unique_ptr<Executor> CreateProxyExecutor(std::unique_ptr<Executor> inner) {
  return std::make_unique<ProxyExecutor>(std::move(inner));
}

}  // namespace overlap::fake
