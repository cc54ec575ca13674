#include "collectives/staging_executor.h"

#include <numeric>

#include "absl/strings/str_cat.h"

namespace overlap {

// A channel's stream and its pinned host buffers, grown to the largest collective seen. The data
// plane runs one collective per channel at a time, so a channel's buffers are never shared.
struct StagingExecutor::Channel {
  std::unique_ptr<BufferOps> ops;
  std::unique_ptr<DeviceMemory> send, recv;
};

namespace {

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// Elements the collective reads from `send` (or from `recv` when in place) and writes to `recv`.
struct Extent {
  int64_t in = 0;
  int64_t out = 0;
};

Extent ExtentOf(const CollectiveArgs& a, int rank) {
  switch (a.kind) {
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kBroadcast:
      return {a.count, a.count};
    case CollectiveKind::kAllgatherv:
      return {a.recv_counts[static_cast<size_t>(rank)], Sum(a.recv_counts)};
    case CollectiveKind::kReduceScatter:
      return {a.count, a.recv_counts[static_cast<size_t>(rank)]};
    case CollectiveKind::kAlltoallv:
      return {Sum(a.send_counts), Sum(a.recv_counts)};
    case CollectiveKind::kBarrier:
      return {0, 0};
  }
  return {0, 0};
}

absl::Status Grow(BufferOps* ops, std::unique_ptr<DeviceMemory>* buffer, size_t bytes) {
  if (*buffer != nullptr && (*buffer)->size() >= bytes) return absl::OkStatus();
  buffer->reset();
  absl::StatusOr<std::unique_ptr<DeviceMemory>> grown = ops->AllocateHost(std::max<size_t>(bytes, 1));
  if (!grown.ok()) return grown.status();
  *buffer = std::move(*grown);
  return absl::OkStatus();
}

// Device to host, the host collective, host to device: each phase starts when the one before it
// is done, checked by Test().
class StagedWork : public Work {
 public:
  StagedWork(Executor* host, int channel, CollectiveArgs host_args, BufferOps* ops,
             void* device_recv, size_t out_bytes, std::unique_ptr<Work> copied_in)
      : host_(host),
        channel_(channel),
        host_args_(std::move(host_args)),
        ops_(ops),
        device_recv_(device_recv),
        out_bytes_(out_bytes),
        pending_(std::move(copied_in)) {}

  absl::StatusOr<bool> Test() override {
    while (true) {
      absl::StatusOr<bool> done = pending_->Test();
      if (!done.ok() || !*done) return done;
      switch (phase_) {
        case Phase::kCopyIn: {
          absl::StatusOr<std::unique_ptr<Work>> work = host_->Start(channel_, host_args_);
          if (!work.ok()) return work.status();
          pending_ = std::move(*work);
          phase_ = Phase::kCollective;
          break;
        }
        case Phase::kCollective: {
          absl::Status s = out_bytes_ == 0 ? absl::OkStatus()
                                           : ops_->CopyFromHost(device_recv_, host_args_.recv,
                                                                out_bytes_);
          if (!s.ok()) return s;
          absl::StatusOr<std::unique_ptr<Work>> fence = ops_->Fence();
          if (!fence.ok()) return fence.status();
          pending_ = std::move(*fence);
          phase_ = Phase::kCopyOut;
          break;
        }
        case Phase::kCopyOut:
          return true;
      }
    }
  }

 private:
  enum class Phase { kCopyIn, kCollective, kCopyOut };
  Executor* const host_;
  const int channel_;
  const CollectiveArgs host_args_;
  BufferOps* const ops_;
  void* const device_recv_;
  const size_t out_bytes_;
  Phase phase_ = Phase::kCopyIn;
  std::unique_ptr<Work> pending_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StagingExecutor>> StagingExecutor::Create(
    std::unique_ptr<Executor> host, Device device, int rank) {
  std::unique_ptr<StagingExecutor> executor(new StagingExecutor(std::move(host), rank));
  for (int c = 0; c < executor->host_->num_channels(); ++c) {
    absl::StatusOr<std::unique_ptr<BufferOps>> ops = CreateBufferOps(device, nullptr);
    if (!ops.ok()) return ops.status();
    auto channel = std::make_unique<Channel>();
    channel->ops = std::move(*ops);
    executor->channels_.push_back(std::move(channel));
  }
  return executor;
}

StagingExecutor::StagingExecutor(std::unique_ptr<Executor> host, int rank)
    : host_(std::move(host)),
      rank_(rank),
      name_(absl::StrCat(host_->name(), "+host-staging")) {}

StagingExecutor::~StagingExecutor() = default;

void* StagingExecutor::channel_stream(int channel) const {
  return channels_[static_cast<size_t>(channel)]->ops->stream();
}

absl::StatusOr<std::unique_ptr<Work>> StagingExecutor::Start(int channel_index,
                                                             const CollectiveArgs& args) {
  if (channel_index < 0 || channel_index >= num_channels()) {
    return absl::InvalidArgumentError(absl::StrCat("channel ", channel_index, " out of range"));
  }
  Channel& ch = *channels_[static_cast<size_t>(channel_index)];
  const Extent extent = ExtentOf(args, rank_);
  const size_t elem = DataTypeSize(args.dtype);
  const size_t in_bytes = static_cast<size_t>(extent.in) * elem;
  const size_t out_bytes = static_cast<size_t>(extent.out) * elem;
  absl::Status s = Grow(ch.ops.get(), &ch.send, in_bytes);
  if (s.ok()) s = Grow(ch.ops.get(), &ch.recv, out_bytes);
  if (!s.ok()) return s;
  CollectiveArgs host_args = args;
  const bool in_place = args.send == nullptr;
  // In place, the input is the output buffer; the host collective then runs in place too.
  const void* device_in = in_place ? args.recv : args.send;
  void* host_in = in_place ? ch.recv->data() : ch.send->data();
  host_args.send = in_place ? nullptr : ch.send->data();
  host_args.recv = args.kind == CollectiveKind::kBarrier ? nullptr : ch.recv->data();
  if (in_bytes > 0) s = ch.ops->CopyToHost(host_in, device_in, in_bytes);
  if (!s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Work>> copied_in = ch.ops->Fence();
  if (!copied_in.ok()) return copied_in.status();
  return std::unique_ptr<Work>(new StagedWork(host_.get(), channel_index, std::move(host_args),
                                              ch.ops.get(), args.recv, out_bytes,
                                              std::move(*copied_in)));
}

}  // namespace overlap
