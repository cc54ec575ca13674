#include "collectives/staging_executor.h"

#include <algorithm>
#include <deque>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace overlap {

// A channel's stream and the pinned host buffers its collectives stage through. Each collective
// takes buffers of its own: several may be in flight on one channel (a plan's bucket runner and a
// data plane share the executor), and one collective's copy-in must not overwrite another's
// payload (on an H200 a DeAR plan's buckets summed other buckets' bytes when the channel had one
// pair). A finished collective's buffers go back to the channel for the next one.
//
// A channel's host collectives start in the order of Start, whatever order their copy-ins are
// found done in: MPI pairs the collectives of a communicator by the order each rank starts them,
// and on a GPU the copies finish, and the owners (a bucket runner, a data plane) test their work,
// at times that differ between ranks. Started out of order, two collectives of one size summed
// each other's payloads across ranks (on an H200, the first step of a DeAR plan).
struct StagingExecutor::Channel {
  std::unique_ptr<BufferOps> ops;
  std::deque<StagedWork*> waiting;  // copying in, in Start order; their collectives not started
  std::vector<std::unique_ptr<DeviceMemory>> free;     // pinned, ready for reuse
  std::vector<std::unique_ptr<DeviceMemory>> retired;  // of collectives dropped in flight

  // A pinned buffer of at least `bytes`: the smallest free one that fits, else a new one.
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Take(size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    auto best = free.end();
    for (auto it = free.begin(); it != free.end(); ++it) {
      if ((*it)->size() >= bytes && (best == free.end() || (*it)->size() < (*best)->size())) {
        best = it;
      }
    }
    if (best != free.end()) {
      std::unique_ptr<DeviceMemory> taken = std::move(*best);
      free.erase(best);
      return taken;
    }
    return ops->AllocateHost(bytes);
  }
  // Keeps a buffer for reuse; the smallest go once more than kKeep are kept.
  void Give(std::unique_ptr<DeviceMemory> buffer) {
    if (buffer == nullptr) return;
    free.push_back(std::move(buffer));
    constexpr size_t kKeep = 8;
    if (free.size() > kKeep) {
      auto smallest = std::min_element(free.begin(), free.end(), [](const auto& a, const auto& b) {
        return a->size() < b->size();
      });
      free.erase(smallest);
    }
  }
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

}  // namespace

// Device to host, the host collective, host to device: each phase starts when the one before it
// is done, checked by Test(). Holds its pinned buffers until the copy back is done, then gives
// them back to the channel; dropped before that (a failed job), it retires them instead, since
// MPI or a queued copy may still use them.
class StagingExecutor::StagedWork : public Work {
 public:
  StagedWork(Executor* host, int channel, CollectiveArgs host_args, Channel* ch,
             void* device_recv, size_t out_bytes, std::unique_ptr<DeviceMemory> send,
             std::unique_ptr<DeviceMemory> recv, std::unique_ptr<Work> copied_in)
      : host_(host),
        channel_(channel),
        host_args_(std::move(host_args)),
        ch_(ch),
        ops_(ch->ops.get()),
        device_recv_(device_recv),
        out_bytes_(out_bytes),
        send_(std::move(send)),
        recv_(std::move(recv)),
        pending_(std::move(copied_in)) {}
  ~StagedWork() override {
    auto queued = std::find(ch_->waiting.begin(), ch_->waiting.end(), this);
    if (queued != ch_->waiting.end()) ch_->waiting.erase(queued);
    pending_.reset();
    if (phase_ == Phase::kFinished) {
      ch_->Give(std::move(send_));
      ch_->Give(std::move(recv_));
      return;
    }
    if (send_ != nullptr) ch_->retired.push_back(std::move(send_));
    if (recv_ != nullptr) ch_->retired.push_back(std::move(recv_));
  }

  // Starts the host collectives of the channel's waiting works, from the first, while their
  // copy-ins are done. A failure is kept by the work it belongs to, for its own Test.
  static void StartInOrder(Channel& ch) {
    while (!ch.waiting.empty()) {
      StagedWork* w = ch.waiting.front();
      absl::StatusOr<bool> copied = w->pending_->Test();
      if (copied.ok() && !*copied) return;
      ch.waiting.pop_front();
      if (!copied.ok()) {
        w->error_ = copied.status();
        continue;
      }
      absl::StatusOr<std::unique_ptr<Work>> work = w->host_->Start(w->channel_, w->host_args_);
      if (!work.ok()) {
        w->error_ = work.status();
        continue;
      }
      w->pending_ = std::move(*work);
      w->phase_ = Phase::kCollective;
    }
  }

  absl::StatusOr<bool> Test() override {
    if (!error_.ok()) return error_;
    if (phase_ == Phase::kCopyIn) {
      StartInOrder(*ch_);
      if (!error_.ok()) return error_;
      if (phase_ == Phase::kCopyIn) return false;  // copying in, or behind an earlier Start
    }
    while (true) {
      absl::StatusOr<bool> done = pending_->Test();
      if (!done.ok() || !*done) return done;
      switch (phase_) {
        case Phase::kCopyIn:  // started by StartInOrder above
          return false;
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
          phase_ = Phase::kFinished;
          return true;
        case Phase::kFinished:
          return true;
      }
    }
  }

 private:
  enum class Phase { kCopyIn, kCollective, kCopyOut, kFinished };
  Executor* const host_;
  const int channel_;
  const CollectiveArgs host_args_;
  Channel* const ch_;
  BufferOps* const ops_;
  void* const device_recv_;
  const size_t out_bytes_;
  std::unique_ptr<DeviceMemory> send_, recv_;
  Phase phase_ = Phase::kCopyIn;
  std::unique_ptr<Work> pending_;
  absl::Status error_;
};

absl::StatusOr<std::unique_ptr<StagingExecutor>> StagingExecutor::Create(
    std::unique_ptr<Executor> host, Device device, int rank) {
  std::vector<std::unique_ptr<BufferOps>> channel_ops;
  for (int c = 0; c < host->num_channels(); ++c) {
    absl::StatusOr<std::unique_ptr<BufferOps>> ops = CreateBufferOps(device, nullptr);
    if (!ops.ok()) return ops.status();
    channel_ops.push_back(*std::move(ops));
  }
  return Create(std::move(host), std::move(channel_ops), rank);
}

absl::StatusOr<std::unique_ptr<StagingExecutor>> StagingExecutor::Create(
    std::unique_ptr<Executor> host, std::vector<std::unique_ptr<BufferOps>> channel_ops,
    int rank) {
  if (static_cast<int>(channel_ops.size()) != host->num_channels()) {
    return absl::InvalidArgumentError(absl::StrCat("staging executor: ", channel_ops.size(),
                                                   " streams for ", host->num_channels(),
                                                   " channels"));
  }
  std::unique_ptr<StagingExecutor> executor(new StagingExecutor(std::move(host), rank));
  for (std::unique_ptr<BufferOps>& ops : channel_ops) {
    auto channel = std::make_unique<Channel>();
    channel->ops = std::move(ops);
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
  const bool in_place = args.send == nullptr;
  std::unique_ptr<DeviceMemory> send;
  if (!in_place) {
    absl::StatusOr<std::unique_ptr<DeviceMemory>> taken = ch.Take(in_bytes);
    if (!taken.ok()) return taken.status();
    send = *std::move(taken);
  }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> recv =
      ch.Take(in_place ? std::max(in_bytes, out_bytes) : out_bytes);
  if (!recv.ok()) {
    ch.Give(std::move(send));
    return recv.status();
  }
  CollectiveArgs host_args = args;
  // In place, the input is the output buffer; the host collective then runs in place too.
  const void* device_in = in_place ? args.recv : args.send;
  void* host_in = in_place ? (*recv)->data() : send->data();
  host_args.send = in_place ? nullptr : send->data();
  host_args.recv = args.kind == CollectiveKind::kBarrier ? nullptr : (*recv)->data();
  absl::Status s;
  if (in_bytes > 0) s = ch.ops->CopyToHost(host_in, device_in, in_bytes);
  std::unique_ptr<Work> copied_in;
  if (s.ok()) {
    absl::StatusOr<std::unique_ptr<Work>> fence = ch.ops->Fence();
    if (fence.ok()) {
      copied_in = *std::move(fence);
    } else {
      s = fence.status();
    }
  }
  // Built before the error check, so that buffers a queued copy may still read are retired.
  auto work = std::make_unique<StagedWork>(host_.get(), channel_index, std::move(host_args), &ch,
                                           args.recv, out_bytes, std::move(send),
                                           *std::move(recv), std::move(copied_in));
  if (!s.ok()) return s;
  ch.waiting.push_back(work.get());
  return std::unique_ptr<Work>(std::move(work));
}

}  // namespace overlap
