#include "runtime/data_plane.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/scaling.h"

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

// Points the handle's output at fresh storage shaped like `like` but with `rows` rows.
void* AllocateOutput(PendingOp& op, const Tensor& like, int64_t rows) {
  internal::HandleState& h = *op.handle;
  Tensor& out = h.output();
  out.dtype = like.dtype;
  out.shape = like.shape;
  out.shape[0] = rows;
  h.output_storage().resize(out.ByteSize());
  out.data = h.output_storage().data();
  out.capacity_bytes = out.ByteSize();
  return out.data;
}

}  // namespace

DataPlane::DataPlane(Executor* executor, const Config& config, int rank, int size,
                     Timeline* timeline, CompressionStage* compression, CompleteFn complete,
                     std::string track_prefix)
    : executor_(executor),
      config_(config),
      rank_(rank),
      size_(size),
      timeline_(timeline),
      compression_(compression),
      complete_(std::move(complete)),
      track_prefix_(std::move(track_prefix)),
      channels_(static_cast<size_t>(executor->num_channels())) {}

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

  if (first.compression != "none") {
    bucket->compressed = std::make_unique<CompressedBucketState>();
    bucket->compressed->spec = first.compression;
    const absl::Time start = absl::Now();
    absl::Status s = compression_->Begin(bucket->ops, bucket->compressed.get(), args);
    if (timeline_->enabled()) {
      for (const ReadyOp& r : bucket->ops) {
        timeline_->Span(r.response->name, "COMPRESS", start, absl::Now());
      }
    }
    return s;
  }
  const ReadyOp& only = bucket->ops.front();
  const bool single = bucket->ops.size() == 1 && only.op.has_value() && only.op->inputs.size() == 1;
  if (single) {
    const Tensor& in = only.op->inputs[0];
    const Tensor& out = only.op->outputs[0];
    if (first.prescale != 1.0) {
      ScaledCopy(out.data, in.data, total, dtype, first.prescale);
    } else if (in.data != out.data) {
      args->send = in.data;
    }
    args->recv = out.data;
    return absl::OkStatus();
  }
  // Fused (or a joined rank's zeros): pack every tensor into the channel's fusion buffer.
  bucket->fused = true;
  std::vector<uint8_t>& buffer = channels_[static_cast<size_t>(bucket->channel)].fusion_buffer;
  if (buffer.size() < static_cast<size_t>(total) * elem) {
    buffer.resize(static_cast<size_t>(total) * elem);
  }
  uint8_t* cursor = buffer.data();
  for (const ReadyOp& r : bucket->ops) {
    const Request& request = r.response->request;
    const absl::Time copy_start = absl::Now();
    for (size_t t = 0; t < request.tensors.size(); ++t) {
      const int64_t n = request.tensors[t].NumElements();
      if (r.op.has_value()) {
        ScaledCopy(cursor, r.op->inputs[t].data, n, dtype, request.prescale);
      } else {
        std::memset(cursor, 0, static_cast<size_t>(n) * elem);
      }
      cursor += static_cast<size_t>(n) * elem;
    }
    if (timeline_->enabled()) timeline_->Span(r.response->name, "COPY_IN", copy_start, absl::Now());
  }
  args->recv = buffer.data();
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
        std::memcpy(out.data, in.data, in.ByteSize());
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
      args->recv = AllocateOutput(op, in, rows);
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
        bucket->scratch.resize(in.ByteSize());
        ScaledCopy(bucket->scratch.data(), in.data, in.NumElements(), dtype,
                   response.request.prescale);
        args->send = bucket->scratch.data();
      }
      args->recv = AllocateOutput(op, in, dim0 / size_ + (rank_ < dim0 % size_ ? 1 : 0));
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
      args->recv = AllocateOutput(op, in, rows);
      return absl::OkStatus();
    }
    default:
      return absl::InternalError(
          absl::StrCat("rank ", rank_, ": no data path for ", Describe(*bucket)));
  }
}

absl::Status DataPlane::Start(Bucket* bucket) {
  CollectiveArgs args;
  absl::Status s = bucket->kind == OpKind::kAllreduce ? StartAllreduce(bucket, &args)
                                                      : StartOther(bucket, &args);
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

void DataPlane::FinishAllreduce(Bucket* bucket) {
  const Request& first = bucket->ops.front().response->request;
  const DataType dtype = first.tensors[0].dtype;
  const uint8_t* cursor = channels_[static_cast<size_t>(bucket->channel)].fusion_buffer.data();
  const size_t elem = DataTypeSize(dtype);
  for (ReadyOp& r : bucket->ops) {
    const Request& request = r.response->request;
    const absl::Time copy_start = absl::Now();
    for (size_t t = 0; t < request.tensors.size(); ++t) {
      const int64_t n = request.tensors[t].NumElements();
      if (r.op.has_value()) {
        void* out = r.op->outputs[t].data;
        FinishReduced(out, bucket->fused ? cursor : out, n, dtype, first.op, first.postscale,
                      size_);
      }
      cursor += static_cast<size_t>(n) * elem;
    }
    if (timeline_->enabled()) {
      timeline_->Span(r.response->name, "COPY_OUT", copy_start, absl::Now());
    }
  }
}

void DataPlane::Finish(Bucket* bucket) {
  const absl::Time done = absl::Now();
  if (timeline_->enabled()) {
    timeline_->Span(absl::StrCat(track_prefix_, "channel ", bucket->channel),
                    OpKindName(bucket->kind), bucket->started, done);
    for (const ReadyOp& r : bucket->ops) {
      timeline_->Span(r.response->name, "COLLECTIVE", bucket->started, done);
    }
  }
  if (bucket->kind == OpKind::kAllreduce) {
    if (bucket->compressed == nullptr) {
      int64_t bytes = 0;
      for (const ReadyOp& r : bucket->ops) {
        bytes += Elements(r.response->request) *
                 static_cast<int64_t>(DataTypeSize(r.response->request.tensors[0].dtype));
      }
      timings_.push_back(Timing{bytes, absl::ToDoubleSeconds(done - bucket->started)});
      if (timings_.size() > kMaxTimings) timings_.pop_front();
    }
    FinishAllreduce(bucket);
  } else if (bucket->kind == OpKind::kReduceScatter) {
    ReadyOp& r = bucket->ops.front();
    const Request& request = r.response->request;
    Tensor& out = r.op->handle->output();
    FinishReduced(out.data, out.data, out.NumElements(), out.dtype, request.op, request.postscale,
                  size_);
  }
  Complete(bucket, absl::OkStatus());
}

void DataPlane::Complete(Bucket* bucket, const absl::Status& status) {
  for (ReadyOp& r : bucket->ops) {
    if (r.op.has_value()) complete_(*r.op, status);
  }
}

absl::StatusOr<bool> DataPlane::ContinueCompressed(Bucket* bucket) {
  CollectiveArgs args;
  const absl::Time start = absl::Now();
  absl::StatusOr<bool> more = compression_->Next(bucket->ops, bucket->compressed.get(), &args);
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

absl::Status DataPlane::Progress() {
  const absl::Duration limit = absl::Seconds(config_.collective_timeout_s);
  for (Channel& channel : channels_) {
    while (!channel.buckets.empty()) {
      Bucket& bucket = channel.buckets.front();
      if (bucket.work == nullptr) {
        absl::Status s = Start(&bucket);
        if (!s.ok()) {
          // Every rank derives the same arguments, so every rank fails the same way here.
          Complete(&bucket,
                   absl::Status(s.code(), absl::StrCat("rank ", rank_, ": ", Describe(bucket), ": ",
                                                       s.message())));
          channel.buckets.pop_front();
          continue;
        }
      }
      absl::StatusOr<bool> done = bucket.work->Test();
      if (!done.ok()) {
        return absl::Status(done.status().code(),
                            absl::StrCat("rank ", rank_, ": ", Describe(bucket), " on channel ",
                                         bucket.channel, " failed: ", done.status().message()));
      }
      if (!*done) {
        if (absl::Now() - bucket.started > limit) {
          return absl::DeadlineExceededError(absl::StrCat(
              "rank ", rank_, ": ", Describe(bucket), " on channel ", bucket.channel,
              " did not complete within ", absl::ToInt64Seconds(limit),
              " s (OVERLAP_COLLECTIVE_TIMEOUT_S): a peer process is stuck or dead, or the "
              "network is down"));
        }
        break;
      }
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
      Finish(&bucket);
      channel.buckets.pop_front();
    }
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
