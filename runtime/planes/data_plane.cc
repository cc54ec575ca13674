#include "runtime/planes/data_plane.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/scaling.h"
#include "runtime/planes/device_backend.h"

namespace overlap {
namespace {

bool Fusable(const Request& a, const Request& b) {
  return a.kind == OpKind::kAllreduce && b.kind == OpKind::kAllreduce &&
         a.tensors[0].dtype == b.tensors[0].dtype && a.op == b.op && a.prescale == b.prescale &&
         a.postscale == b.postscale && a.compression == b.compression;
}

int64_t Elements(const Request& r) {
  int64_t n = 0;
  for (const TensorMeta& t : r.tensors) n += t.NumElements();
  return n;
}

int64_t RowElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<int64_t> Prefix(const std::vector<int64_t>& counts) {
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}


std::vector<std::unique_ptr<BufferOps>> CpuOps(int channels) {
  std::vector<std::unique_ptr<BufferOps>> ops;
  for (int c = 0; c < channels; ++c) ops.push_back(CreateCpuBufferOps());
  return ops;
}

// Grows `memory` (a fusion buffer, scratch or output) to at least `bytes` on `ops`'s device.
absl::StatusOr<void*> Reserve(BufferOps* ops, std::unique_ptr<DeviceMemory>* memory, size_t bytes) {
  if (*memory == nullptr || (*memory)->size() < bytes) {
    memory->reset();  // the old buffer's queued work still runs before the memory is reused
    absl::StatusOr<std::unique_ptr<DeviceMemory>> grown = ops->Allocate(std::max<size_t>(bytes, 1));
    if (!grown.ok()) return grown.status();
    *memory = std::move(*grown);
  }
  return (*memory)->data();
}

}  // namespace

DataPlane::DataPlane(Executor* executor, PlaneContext context, std::string track_prefix)
    : DataPlane(Device::Cpu(), CpuOps(executor->num_channels()), executor, std::move(context),
                std::move(track_prefix)) {}

absl::StatusOr<std::unique_ptr<DataPlane>> DataPlane::OnDevice(Device device, Executor* executor,
                                                               PlaneContext context,
                                                               std::string track_prefix) {
  std::vector<std::unique_ptr<BufferOps>> ops;
  for (int c = 0; c < executor->num_channels(); ++c) {
    absl::StatusOr<std::unique_ptr<BufferOps>> channel_ops =
        Devices().CreateBufferOps(device, executor->channel_stream(c));
    if (!channel_ops.ok()) return channel_ops.status();
    ops.push_back(std::move(*channel_ops));
  }
  return std::unique_ptr<DataPlane>(
      new DataPlane(device, std::move(ops), executor, std::move(context), std::move(track_prefix)));
}

DataPlane::DataPlane(Device device, std::vector<std::unique_ptr<BufferOps>> channel_ops,
                     Executor* executor, PlaneContext context, std::string track_prefix)
    : device_(device),
      executor_(executor),
      config_(std::move(context.config)),
      rank_(context.rank),
      size_(context.size),
      timeline_(context.timeline),
      compression_(context.compression),
      complete_(std::move(context.complete)),
      comm_meter_(context.comm_meter),
      track_prefix_(std::move(track_prefix)),
      channels_(channel_ops.size()) {
  for (size_t c = 0; c < channels_.size(); ++c) channels_[c].ops = std::move(channel_ops[c]);
}

absl::StatusOr<void*> DataPlane::AllocateOutput(Bucket* bucket, PendingOp& op, const Tensor& like,
                                                int64_t rows) {
  internal::HandleState& h = *op.handle;
  Tensor& out = h.output();
  out.dtype = like.dtype;
  out.shape = like.shape;
  out.shape[0] = rows;
  out.device = device_;
  out.stream = nullptr;
  absl::StatusOr<void*> data = Reserve(OpsOf(*bucket), &h.output_memory(), out.ByteSize());
  if (!data.ok()) return data.status();
  out.data = *data;
  out.capacity_bytes = out.ByteSize();
  return out.data;
}

absl::Status DataPlane::WaitForProducers(Bucket* bucket) {
  if (!device_.is_cuda()) return absl::OkStatus();
  std::vector<void*> streams;
  for (const ReadyOp& r : bucket->ops) {
    if (!r.op.has_value()) continue;
    for (const Tensor& t : r.op->inputs) {
      if (std::find(streams.begin(), streams.end(), t.stream) == streams.end()) {
        streams.push_back(t.stream);
      }
    }
  }
  for (void* stream : streams) {
    absl::Status s = OpsOf(*bucket)->WaitForStream(stream);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

bool DataPlane::idle() const {
  for (const Channel& c : channels_) {
    if (!c.buckets.empty()) return false;
  }
  return true;
}

void DataPlane::Submit(std::vector<ReadyOp> ready) {
  const absl::Time now = absl::Now();
  Bucket open;
  int64_t open_bytes = 0;
  auto close = [&]() {
    if (open.ops.empty()) return;
    open.channel = next_channel_;
    next_channel_ = (next_channel_ + 1) % static_cast<int>(channels_.size());
    open.queued = now;
    channels_[static_cast<size_t>(open.channel)].buckets.push_back(std::move(open));
    open = Bucket();
    open_bytes = 0;
  };
  auto alone = [&](ReadyOp ready_op) {
    Bucket bucket;
    bucket.kind = ready_op.response->request.kind;
    bucket.ops.push_back(std::move(ready_op));
    std::swap(bucket, open);
    const int64_t kept_bytes = open_bytes;
    close();
    std::swap(bucket, open);
    open_bytes = kept_bytes;
  };
  for (ReadyOp& ready_op : ready) {
    const Request& request = ready_op.response->request;
    if (request.kind == OpKind::kJoin) {  // nothing to move: everyone has joined
      if (ready_op.op.has_value()) complete_(*ready_op.op, absl::OkStatus());
      continue;
    }
    const int64_t bytes =
        request.tensors.empty()
            ? 0
            : Elements(request) * static_cast<int64_t>(DataTypeSize(request.tensors[0].dtype));
    if (request.kind != OpKind::kAllreduce) {
      close();
      alone(std::move(ready_op));
      continue;
    }
    // Fusion saves per-collective latency at the price of two copies; a large tensor saves
    // little and pays much, so it is reduced in place on its own while the small ones around it
    // keep filling the open bucket. The decision uses only the agreed request, so every rank
    // (a joined one too) builds the same buckets.
    const bool direct = config_.direct_threshold_bytes > 0 &&
                        bytes >= config_.direct_threshold_bytes && request.tensors.size() == 1 &&
                        request.compression == "none";
    if (direct) {
      alone(std::move(ready_op));
      continue;
    }
    const bool joins_open = !open.ops.empty() &&
                            Fusable(open.ops.front().response->request, request) &&
                            open_bytes + bytes <= config_.fusion_threshold_bytes;
    if (!joins_open) close();
    open.kind = request.kind;
    open.ops.push_back(std::move(ready_op));
    open_bytes += bytes;
  }
  close();
}

std::string DataPlane::Describe(const Bucket& bucket) const {
  std::vector<std::string> names;
  for (size_t i = 0; i < bucket.ops.size() && i < 3; ++i) {
    names.push_back(absl::StrCat("'", bucket.ops[i].response->name, "'"));
  }
  std::string text = absl::StrCat(OpKindName(bucket.kind), " of ", absl::StrJoin(names, ", "));
  if (bucket.ops.size() > 3) absl::StrAppend(&text, " and ", bucket.ops.size() - 3, " more");
  return text;
}

absl::Status DataPlane::StartAllreduce(Bucket* bucket, CollectiveArgs* args) {
  const Request& first = bucket->ops.front().response->request;
  const DataType dtype = first.tensors[0].dtype;
  const size_t elem = DataTypeSize(dtype);
  int64_t total = 0;
  for (const ReadyOp& r : bucket->ops) total += Elements(r.response->request);
  args->kind = CollectiveKind::kAllreduce;
  args->dtype = dtype;
  args->op = CollectiveOp(first.op);
  args->count = total;
  if (first.op == ReduceOp::kAdasum) {  // each tensor of the bucket has its own coefficients
    for (const ReadyOp& r : bucket->ops) {
      for (const TensorMeta& t : r.response->request.tensors) {
        args->segments.push_back(t.NumElements());
      }
    }
  }

  if (first.compression != "none") {
    bucket->compressed = std::make_unique<CompressedBucketState>();
    bucket->compressed->spec = first.compression;
    const absl::Time start = absl::Now();
    absl::Status s =
        compression_->Begin(bucket->ops, bucket->compressed.get(), args, *OpsOf(*bucket));
    if (timeline_->enabled()) {
      for (const ReadyOp& r : bucket->ops) {
        timeline_->Span(r.response->name, "COMPRESS", start, absl::Now());
      }
    }
    return s;
  }
  const ReadyOp& only = bucket->ops.front();
  const bool single = bucket->ops.size() == 1 && only.op.has_value() && only.op->inputs.size() == 1;
  BufferOps* ops = OpsOf(*bucket);
  if (single) {
    const Tensor& in = only.op->inputs[0];
    const Tensor& out = only.op->outputs[0];
    if (first.prescale != 1.0) {
      const CopySlice slice{out.data, in.data, total};
      absl::Status s = ops->Copy({&slice, 1}, dtype, CopyScaling{first.prescale, 1});
      if (!s.ok()) return s;
    } else if (in.data != out.data) {
      args->send = in.data;
    }
    args->recv = out.data;
    return absl::OkStatus();
  }
  // Fused (or a joined rank's zeros): pack every tensor into the channel's fusion buffer, in one
  // batched copy (one kernel launch on a device).
  bucket->fused = true;
  absl::StatusOr<void*> buffer =
      Reserve(ops, &channels_[static_cast<size_t>(bucket->channel)].fusion_buffer,
              static_cast<size_t>(total) * elem);
  if (!buffer.ok()) return buffer.status();
  const absl::Time copy_start = absl::Now();
  std::vector<CopySlice> slices;
  auto* cursor = static_cast<uint8_t*>(*buffer);
  for (const ReadyOp& r : bucket->ops) {
    const Request& request = r.response->request;
    for (size_t t = 0; t < request.tensors.size(); ++t) {
      const int64_t n = request.tensors[t].NumElements();
      slices.push_back(CopySlice{cursor, r.op.has_value() ? r.op->inputs[t].data : nullptr, n});
      cursor += static_cast<size_t>(n) * elem;
    }
  }
  absl::Status s = ops->Copy(slices, dtype, CopyScaling{first.prescale, 1});
  if (!s.ok()) return s;
  if (timeline_->enabled()) {
    for (const ReadyOp& r : bucket->ops) {
      timeline_->Span(r.response->name, "COPY_IN", copy_start, absl::Now());
    }
  }
  args->recv = *buffer;
  return absl::OkStatus();
}

absl::Status DataPlane::StartOther(Bucket* bucket, CollectiveArgs* args) {
  ReadyOp& ready = bucket->ops.front();
  const Response& response = *ready.response;
  if (!ready.op.has_value()) {
    return absl::InternalError(
        absl::StrCat("rank ", rank_, ": ", Describe(*bucket), " reached a joined rank"));
  }
  PendingOp& op = *ready.op;
  if (response.request.kind == OpKind::kBarrier) {
    args->kind = CollectiveKind::kBarrier;
    return absl::OkStatus();
  }
  const Tensor& in = op.inputs[0];
  const DataType dtype = in.dtype;
  const int64_t row = RowElements(in.shape);
  args->dtype = dtype;
  switch (response.request.kind) {
    case OpKind::kBroadcast: {
      const Tensor& out = op.outputs[0];
      if (rank_ == response.request.root && in.data != out.data) {
        const CopySlice slice{out.data, in.data, in.NumElements()};
        absl::Status s = OpsOf(*bucket)->Copy({&slice, 1}, dtype, CopyScaling{});
        if (!s.ok()) return s;
      }
      args->kind = CollectiveKind::kBroadcast;
      args->recv = out.data;
      args->count = in.NumElements();
      args->root = response.request.root;
      return absl::OkStatus();
    }
    case OpKind::kAllgather: {
      args->kind = CollectiveKind::kAllgatherv;
      int64_t rows = 0;
      for (int64_t r : response.rank_rows) {
        args->recv_counts.push_back(r * row);
        rows += r;
      }
      args->recv_displs = Prefix(args->recv_counts);
      args->send = in.data;
      absl::StatusOr<void*> out = AllocateOutput(bucket, op, in, rows);
      if (!out.ok()) return out.status();
      args->recv = *out;
      return absl::OkStatus();
    }
    case OpKind::kReduceScatter: {
      args->kind = CollectiveKind::kReduceScatter;
      args->op = CollectiveOp(response.request.op);
      const int64_t dim0 = in.shape[0];
      for (int r = 0; r < size_; ++r) {
        args->recv_counts.push_back((dim0 / size_ + (r < dim0 % size_ ? 1 : 0)) * row);
      }
      args->count = in.NumElements();
      args->send = in.data;
      if (response.request.prescale != 1.0) {
        absl::StatusOr<void*> scratch = Reserve(OpsOf(*bucket), &bucket->scratch, in.ByteSize());
        if (!scratch.ok()) return scratch.status();
        const CopySlice slice{*scratch, in.data, in.NumElements()};
        absl::Status s =
            OpsOf(*bucket)->Copy({&slice, 1}, dtype, CopyScaling{response.request.prescale, 1});
        if (!s.ok()) return s;
        args->send = *scratch;
      }
      absl::StatusOr<void*> out =
          AllocateOutput(bucket, op, in, dim0 / size_ + (rank_ < dim0 % size_ ? 1 : 0));
      if (!out.ok()) return out.status();
      args->recv = *out;
      return absl::OkStatus();
    }
    case OpKind::kAlltoall: {
      args->kind = CollectiveKind::kAlltoallv;
      const std::vector<int64_t>& m = response.rank_rows;  // [sender * size + receiver]
      std::vector<int64_t>& received = op.handle->received_splits();
      received.clear();
      int64_t rows = 0;
      const auto at = [this, &m](int sender, int receiver) {
        return m[static_cast<size_t>(sender) * static_cast<size_t>(size_) +
                 static_cast<size_t>(receiver)];
      };
      for (int peer = 0; peer < size_; ++peer) {
        args->send_counts.push_back(at(rank_, peer) * row);
        const int64_t incoming = at(peer, rank_);
        args->recv_counts.push_back(incoming * row);
        received.push_back(incoming);
        rows += incoming;
      }
      args->send_displs = Prefix(args->send_counts);
      args->recv_displs = Prefix(args->recv_counts);
      args->send = in.data;
      absl::StatusOr<void*> out = AllocateOutput(bucket, op, in, rows);
      if (!out.ok()) return out.status();
      args->recv = *out;
      return absl::OkStatus();
    }
    default:
      return absl::InternalError(
          absl::StrCat("rank ", rank_, ": no data path for ", Describe(*bucket)));
  }
}

absl::Status DataPlane::Start(Bucket* bucket) {
  CollectiveArgs args;
  absl::Status s = WaitForProducers(bucket);
  if (s.ok()) {
    s = bucket->kind == OpKind::kAllreduce ? StartAllreduce(bucket, &args)
                                           : StartOther(bucket, &args);
  }
  if (s.ok()) {
    absl::StatusOr<std::unique_ptr<Work>> work = executor_->Start(bucket->channel, args);
    if (work.ok()) {
      bucket->work = std::move(*work);
    } else {
      s = work.status();
    }
  }
  bucket->started = absl::Now();
  if (timeline_->enabled()) {
    for (const ReadyOp& r : bucket->ops) {
      timeline_->Span(r.response->name, "QUEUE", bucket->queued, bucket->started);
    }
  }
  return s;
}

absl::Status DataPlane::FinishAllreduce(Bucket* bucket) {
  const Request& first = bucket->ops.front().response->request;
  const DataType dtype = first.tensors[0].dtype;
  const size_t elem = DataTypeSize(dtype);
  const absl::Time copy_start = absl::Now();
  const uint8_t* cursor =
      bucket->fused ? static_cast<const uint8_t*>(
                          channels_[static_cast<size_t>(bucket->channel)].fusion_buffer->data())
                    : nullptr;
  std::vector<CopySlice> slices;
  for (ReadyOp& r : bucket->ops) {
    const Request& request = r.response->request;
    for (size_t t = 0; t < request.tensors.size(); ++t) {
      const int64_t n = request.tensors[t].NumElements();
      if (r.op.has_value()) {
        void* out = r.op->outputs[t].data;
        slices.push_back(CopySlice{out, bucket->fused ? cursor : out, n});
      }
      if (bucket->fused) cursor += static_cast<size_t>(n) * elem;
    }
  }
  const CopyScaling scaling = FinishScaling(dtype, first.op, first.postscale, size_);
  // Unfused and nothing to scale: the collective already wrote the result in place.
  const bool copies = bucket->fused || scaling.factor != 1.0 || scaling.divisor != 1;
  absl::Status s = copies ? OpsOf(*bucket)->Copy(slices, dtype, scaling) : absl::OkStatus();
  if (timeline_->enabled()) {
    for (const ReadyOp& r : bucket->ops) {
      timeline_->Span(r.response->name, "COPY_OUT", copy_start, absl::Now());
    }
  }
  return s;
}

void DataPlane::RecordFinished(const Bucket& bucket, absl::Time done) {
  if (comm_meter_ != nullptr) comm_meter_->Add(bucket.started, done);
  if (timeline_->enabled()) {
    timeline_->Span(absl::StrCat(track_prefix_, "channel ", bucket.channel),
                    OpKindName(bucket.kind), bucket.started, done);
    for (const ReadyOp& r : bucket.ops) {
      timeline_->Span(r.response->name, "COLLECTIVE", bucket.started, done);
    }
  }
  // A pipelined bucket's span includes the wait behind the buckets queued before it: no timing.
  // Adasum runs another algorithm than the sums the link cost describes: no timing either.
  if (bucket.kind == OpKind::kAllreduce && bucket.compressed == nullptr && !bucket.pipelined &&
      bucket.ops.front().response->request.op != ReduceOp::kAdasum) {
    int64_t bytes = 0;
    for (const ReadyOp& r : bucket.ops) {
      bytes += Elements(r.response->request) *
               static_cast<int64_t>(DataTypeSize(r.response->request.tensors[0].dtype));
    }
    timings_.push_back(Timing{bytes, absl::ToDoubleSeconds(done - bucket.started)});
    if (timings_.size() > kMaxTimings) timings_.pop_front();
  }
}

absl::Status DataPlane::Finish(Bucket* bucket) {
  // A pipelined bucket is recorded when its fence has passed: now it has only been queued.
  if (!bucket->pipelined) RecordFinished(*bucket, absl::Now());
  if (bucket->kind == OpKind::kAllreduce) {
    absl::Status s = FinishAllreduce(bucket);
    if (!s.ok()) return s;
  } else if (bucket->kind == OpKind::kReduceScatter) {
    ReadyOp& r = bucket->ops.front();
    const Request& request = r.response->request;
    Tensor& out = r.op->handle->output();
    const CopyScaling scaling = FinishScaling(out.dtype, request.op, request.postscale, size_);
    if (scaling.factor != 1.0 || scaling.divisor != 1) {
      const CopySlice slice{out.data, out.data, out.NumElements()};
      absl::Status s = OpsOf(*bucket)->Copy({&slice, 1}, out.dtype, scaling);
      if (!s.ok()) return s;
    }
  }
  absl::StatusOr<std::unique_ptr<Work>> fence = OpsOf(*bucket)->Fence();
  if (!fence.ok()) return fence.status();
  bucket->finishing = std::move(*fence);
  return absl::OkStatus();
}

void DataPlane::Complete(Bucket* bucket, const absl::Status& status) {
  for (ReadyOp& r : bucket->ops) {
    if (r.op.has_value()) complete_(*r.op, status);
  }
}

absl::StatusOr<bool> DataPlane::ContinueCompressed(Bucket* bucket) {
  CollectiveArgs args;
  const absl::Time start = absl::Now();
  absl::StatusOr<bool> more =
      compression_->Next(bucket->ops, bucket->compressed.get(), &args, *OpsOf(*bucket));
  if (!more.ok() || !*more) {
    if (timeline_->enabled()) {
      for (const ReadyOp& r : bucket->ops) {
        timeline_->Span(r.response->name, "DECOMPRESS", start, absl::Now());
      }
    }
    return more;
  }
  absl::StatusOr<std::unique_ptr<Work>> work = executor_->Start(bucket->channel, args);
  if (!work.ok()) return work.status();
  bucket->work = std::move(*work);
  return true;
}

bool DataPlane::Pipelined(const Bucket& bucket) const {
  if (!executor_->stream_ordered()) return false;
  return bucket.kind != OpKind::kAllreduce ||
         bucket.ops.front().response->request.compression == "none";
}

absl::Status DataPlane::StartPipelined(Bucket* bucket) {
  bucket->pipelined = true;
  absl::Status s = Start(bucket);
  // The copy-out and the fence go behind the collective on the channel's stream at once.
  if (s.ok()) s = Finish(bucket);
  return s;
}

void DataPlane::StartFailed(Bucket* bucket, const absl::Status& s) {
  // Every rank derives the same arguments, so every rank fails the same way here.
  Complete(bucket, absl::Status(s.code(), absl::StrCat("rank ", rank_, ": ", Describe(*bucket),
                                                       ": ", s.message())));
}

void DataPlane::QueueAhead(Channel& channel) {
  int in_flight = 0;
  for (size_t i = 0; i < channel.buckets.size(); ++i) {
    Bucket& bucket = channel.buckets[i];
    if (bucket.work != nullptr) {
      if (!bucket.pipelined) return;  // the host drives it: nothing may pass it
      ++in_flight;
      continue;
    }
    // A bucket the host drives starts once it is at the front.
    if (!Pipelined(bucket) || in_flight >= kMaxPipelined) return;
    absl::Status s = StartPipelined(&bucket);
    if (!s.ok()) {
      StartFailed(&bucket, s);
      channel.buckets.erase(channel.buckets.begin() + static_cast<std::ptrdiff_t>(i));
      --i;
      continue;
    }
    ++in_flight;
  }
}

absl::Status DataPlane::Progress() {
  const absl::Duration limit = absl::Seconds(config_.collective_timeout_s);
  for (Channel& channel : channels_) {
    absl::Status s = ProgressFront(channel, limit);
    if (!s.ok()) return s;
    if (executor_->stream_ordered()) QueueAhead(channel);
  }
  return absl::OkStatus();
}

absl::Status DataPlane::ProgressFront(Channel& channel, absl::Duration limit) {
  while (!channel.buckets.empty()) {
    Bucket& bucket = channel.buckets.front();
    if (bucket.work == nullptr) {
      absl::Status s = Pipelined(bucket) ? StartPipelined(&bucket) : Start(&bucket);
      if (!s.ok()) {
        StartFailed(&bucket, s);
        channel.buckets.pop_front();
        continue;
      }
    }
    // The collective, until it is done: a host-driven bucket's copy-out waits for it, and a
    // pipelined bucket (copy-out and fence queued with it) is not complete before it either, which
    // a stream guarantees and this check keeps true of any executor.
    if (bucket.finishing == nullptr || bucket.pipelined) {
      absl::StatusOr<bool> done = bucket.work->Test();
      if (!done.ok()) {
        return absl::Status(done.status().code(),
                            absl::StrCat("rank ", rank_, ": ", Describe(bucket), " on channel ",
                                         bucket.channel, " failed: ", done.status().message()));
      }
      // A pipelined bucket that waited behind others on its channel is timed from when it
      // reached the front.
      if (!*done) {
        if (absl::Now() - std::max(bucket.started, channel.front_since) > limit) {
          return absl::DeadlineExceededError(absl::StrCat(
              "rank ", rank_, ": ", Describe(bucket), " on channel ", bucket.channel,
              " did not complete within ", absl::ToInt64Seconds(limit),
              " s (OVERLAP_COLLECTIVE_TIMEOUT_S): a peer process is stuck or dead, or the "
              "network is down"));
        }
        break;
      }
    }
    if (bucket.finishing == nullptr) {
      if (bucket.compressed != nullptr) {
        absl::StatusOr<bool> more = ContinueCompressed(&bucket);
        if (!more.ok()) {
          Complete(&bucket, absl::Status(more.status().code(),
                                         absl::StrCat("rank ", rank_, ": ", Describe(bucket), ": ",
                                                      more.status().message())));
          channel.buckets.pop_front();
          continue;
        }
        if (*more) break;  // the next round is in flight
      }
      absl::Status finished = Finish(&bucket);
      if (!finished.ok()) {
        Complete(&bucket,
                 absl::Status(finished.code(), absl::StrCat("rank ", rank_, ": ", Describe(bucket),
                                                            ": ", finished.message())));
        channel.buckets.pop_front();
        continue;
      }
    }
    absl::StatusOr<bool> copied = bucket.finishing->Test();
    if (!copied.ok()) {
      return absl::Status(copied.status().code(),
                          absl::StrCat("rank ", rank_, ": ", Describe(bucket),
                                       ": copying the result failed: ", copied.status().message()));
    }
    if (!*copied) break;
    if (bucket.pipelined) RecordFinished(bucket, absl::Now());
    Complete(&bucket, absl::OkStatus());
    channel.buckets.pop_front();
    channel.front_since = absl::Now();
  }
  return absl::OkStatus();
}

void DataPlane::FailAll(const absl::Status& status) {
  for (Channel& channel : channels_) {
    for (Bucket& bucket : channel.buckets) Complete(&bucket, status);
    channel.buckets.clear();
  }
}

}  // namespace overlap
