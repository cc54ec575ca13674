#include "runtime/planes/bucket_runner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/scaling.h"
#include "runtime/planes/device_backend.h"

namespace overlap {

namespace {

uint8_t* Bytes(const std::shared_ptr<DeviceMemory>& memory) {
  return static_cast<uint8_t*>(memory->data());
}

// kPacked: a bucket's packed slices (or gathered values); kChunk: a reduce-scatter's chunk.
enum BufferRole { kPacked = 0, kChunk = 1 };
int64_t Slot(int bucket, BufferRole role) { return int64_t{bucket} * 2 + role; }

}  // namespace

std::string UnitNames(const std::vector<std::shared_ptr<const Response>>& responses) {
  std::vector<std::string> names;
  for (size_t i = 0; i < responses.size() && i < 3; ++i) {
    names.push_back(absl::StrCat("'", responses[i]->name, "'"));
  }
  std::string text = absl::StrJoin(names, ", ");
  if (responses.size() > 3) absl::StrAppend(&text, " and ", responses.size() - 3, " more");
  return text;
}

// Buffers a plan's buckets reuse step after step, by slot (a bucket's packed values or chunk; as
// runtime/planes/buffer_pool.h, on any device): a new allocation of tens of MiB costs more than the
// copy into it. A buffer is free again once the pool holds the only reference; up to four per slot
// are kept. A new one is allocated on the stream that first writes it, the bucket's channel
// stream: on a GPU, memory from cudaMallocAsync belongs to its stream from that point on, and
// another stream using it at once may write into a block the pool handed out again while that
// stream's earlier work still uses it (the proxy device plays this: tests/fakes/proxy_device.h).
class BucketRunner::Pool {
 public:
  absl::StatusOr<std::shared_ptr<DeviceMemory>> Take(int64_t slot, size_t bytes, BufferOps& ops) {
    std::vector<std::shared_ptr<DeviceMemory>>& kept = slots_[slot];
    for (const std::shared_ptr<DeviceMemory>& b : kept) {
      if (b.use_count() == 1 && b->size() == bytes) return b;
    }
    absl::StatusOr<std::unique_ptr<DeviceMemory>> made = ops.Allocate(bytes);
    if (!made.ok()) return made.status();
    std::shared_ptr<DeviceMemory> buffer(std::move(*made));
    if (kept.size() < kMaxPerSlot) {
      kept.push_back(buffer);
      held_bytes_ += static_cast<int64_t>(bytes);
    }
    return buffer;
  }
  void Clear() {
    slots_.clear();
    held_bytes_ = 0;
  }
  int64_t held_bytes() const { return held_bytes_; }

 private:
  static constexpr size_t kMaxPerSlot = 4;
  absl::flat_hash_map<int64_t, std::vector<std::shared_ptr<DeviceMemory>>> slots_;
  int64_t held_bytes_ = 0;
};

absl::StatusOr<std::unique_ptr<BucketRunner>> BucketRunner::Create(Executor* executor,
                                                                   Device device, int rank,
                                                                   int size, Timeline* timeline,
                                                                   absl::Duration timeout,
                                                                   CompressionStage* compression) {
  std::vector<std::unique_ptr<BufferOps>> ops;
  for (int c = 0; c < executor->num_channels(); ++c) {
    absl::StatusOr<std::unique_ptr<BufferOps>> made =
        Devices().CreateBufferOps(device, executor->channel_stream(c));
    if (!made.ok()) return made.status();
    ops.push_back(*std::move(made));
  }
  absl::StatusOr<std::unique_ptr<BufferOps>> deliver = Devices().CreateBufferOps(device, nullptr);
  if (!deliver.ok()) return deliver.status();
  return std::make_unique<BucketRunner>(executor, std::move(ops), *std::move(deliver), rank, size,
                                        timeline, timeout, compression);
}

BucketRunner::BucketRunner(Executor* executor, std::vector<std::unique_ptr<BufferOps>> ops,
                           std::unique_ptr<BufferOps> deliver, int rank, int size,
                           Timeline* timeline, absl::Duration timeout,
                           CompressionStage* compression)
    : executor_(executor),
      ops_(std::move(ops)),
      deliver_(std::move(deliver)),
      rank_(rank),
      size_(size),
      timeline_(timeline),
      timeout_(timeout),
      compression_(compression),
      pool_(std::make_unique<Pool>()),
      channel_jobs_(ops_.size()) {}

BucketRunner::~BucketRunner() = default;

Device BucketRunner::device() const { return deliver_->device(); }

bool BucketRunner::on_host() const { return deliver_->device().kind == DeviceKind::kCpu; }

std::unique_ptr<BucketJob> BucketRunner::NewJob(const ExecutablePlan* plan, int bucket) {
  const ExecBucket& b = plan->buckets[static_cast<size_t>(bucket)];
  auto job = std::make_unique<BucketJob>();
  job->plan = plan;
  job->bucket = bucket;
  job->kind = b.kind;
  job->channel = b.channel;
  const Request& first =
      plan->entries[static_cast<size_t>(b.slices.front().entry)].response->request;
  job->dtype = first.tensors[0].dtype;
  job->op = CollectiveOp(first.op);
  return job;
}

absl::Status BucketRunner::Start(BucketJob* job, const BucketInput& input) {
  channel_jobs_[static_cast<size_t>(job->channel)].push_back(job);
  // Packed now, while the channel may still be busy with earlier buckets, so that the collective
  // starts the moment the channel is free. An all-gather needs its reduce-scatter's result.
  if (job->kind == BucketKind::kAllgather) return Progress();
  absl::Status packed = Prepare(job, &input);
  if (!packed.ok()) return packed;
  return Progress();
}

absl::Status BucketRunner::CopyOn(BufferOps& ops, const std::vector<CopySlice>& slices,
                                  DataType dtype, CopyScaling scaling) {
  if (!on_host()) return ops.Copy(slices, dtype, scaling);
  const int64_t elem = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t piece = std::max<int64_t>(1, kPieceBytes / std::max<int64_t>(1, elem));
  bool first = true;
  for (const CopySlice& s : slices) {
    for (int64_t at = 0; at < s.count || (s.count == 0 && at == 0); at += piece) {
      if (s.count == 0) break;
      if (!first) executor_->Poke();
      first = false;
      const int64_t n = std::min(piece, s.count - at);
      const CopySlice part{
          static_cast<uint8_t*>(s.dst) + at * elem,
          s.src == nullptr ? nullptr : static_cast<const uint8_t*>(s.src) + at * elem, n};
      absl::Status done = ops.Copy({&part, 1}, dtype, scaling);
      if (!done.ok()) return done;
    }
  }
  return absl::OkStatus();
}

absl::Status BucketRunner::Prepare(BucketJob* job, const BucketInput* input) {
  job->prepared = true;
  const ExecutablePlan& plan = *job->plan;
  const ExecBucket& bucket = plan.buckets[static_cast<size_t>(job->bucket)];
  BufferOps& ops = *ops_[static_cast<size_t>(job->channel)];
  const size_t elem = DataTypeSize(job->dtype);
  int64_t total = 0;
  for (const ExecSlice& s : bucket.slices) total += s.count;
  CollectiveArgs args;
  args.dtype = job->dtype;
  args.op = job->op;
  args.count = total;
  std::vector<int64_t> counts(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    counts[static_cast<size_t>(r)] = total / size_ + (r < total % size_ ? 1 : 0);
  }
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("rank ", rank_, ": ", Describe(*job), ": ", s.message()));
  };
  if (job->kind == BucketKind::kAllgather) {
    auto chunk = chunks_.find(bucket.reduce_scatter);
    if (chunk == chunks_.end()) {
      return absl::InternalError(absl::StrCat("plan bucket ", job->bucket,
                                              ": allgather before its reduce-scatter finished"));
    }
    job->chunk = std::move(chunk->second);
    chunks_.erase(chunk);
    absl::StatusOr<std::shared_ptr<DeviceMemory>> buffer =
        pool_->Take(Slot(job->bucket, kPacked), static_cast<size_t>(total) * elem, ops);
    if (!buffer.ok()) return fail(buffer.status());
    job->buffer = *std::move(buffer);
    args.kind = CollectiveKind::kAllgatherv;
    args.recv_counts = counts;
    args.recv_displs.assign(counts.size(), 0);
    for (size_t r = 1; r < counts.size(); ++r) {
      args.recv_displs[r] = args.recv_displs[r - 1] + counts[r - 1];
    }
    args.send = job->chunk->data();
    args.recv = job->buffer->data();
  } else {
    // Inputs written on a producer's stream are complete there before packing reads them.
    std::vector<void*> streams;
    for (const BucketInput::Source& source : input->sources) {
      if (source.op == nullptr) continue;
      void* stream = source.op->inputs[0].stream;
      if (std::find(streams.begin(), streams.end(), stream) == streams.end()) {
        streams.push_back(stream);
      }
    }
    if (!on_host()) {
      for (void* stream : streams) {
        absl::Status s = ops.WaitForStream(stream);
        if (!s.ok()) return fail(s);
      }
    }
    if (input->in_place) {
      const PendingOp& op = *input->sources.front().op;
      const Tensor& in = op.inputs[0];
      const Tensor& out = op.outputs[0];
      job->in_place = true;
      job->in_place_data = out.data;
      if (in.data != out.data) args.send = in.data;
      args.recv = out.data;
    } else {
      absl::StatusOr<std::shared_ptr<DeviceMemory>> buffer =
          pool_->Take(Slot(job->bucket, kPacked), static_cast<size_t>(total) * elem, ops);
      if (!buffer.ok()) return fail(buffer.status());
      job->buffer = *std::move(buffer);
      // One batched copy per prescale factor (usually one for the whole bucket).
      uint8_t* cursor = Bytes(job->buffer);
      std::vector<std::pair<double, std::vector<CopySlice>>> batches;
      for (size_t i = 0; i < bucket.slices.size(); ++i) {
        const ExecSlice& s = bucket.slices[i];
        const PendingOp* op = input->sources[i].op;
        const double factor = op == nullptr ? 1.0 : op->request.prescale;
        const void* src = op == nullptr ? nullptr  // zeros: joined, or submitted differently here
                                        : static_cast<const uint8_t*>(op->inputs[0].data) +
                                              static_cast<size_t>(s.offset) * elem;
        auto batch = std::find_if(batches.begin(), batches.end(),
                                  [&](const auto& b) { return b.first == factor; });
        if (batch == batches.end()) {
          batches.emplace_back(factor, std::vector<CopySlice>());
          batch = batches.end() - 1;
        }
        batch->second.push_back(CopySlice{cursor, src, s.count});
        cursor += static_cast<size_t>(s.count) * elem;
      }
      for (auto& [factor, slices] : batches) {
        absl::Status s = CopyOn(ops, slices, job->dtype, CopyScaling{factor, 1});
        if (!s.ok()) return fail(s);
      }
      if (input->drain) {
        absl::Status s = input->drain(Bytes(job->buffer), ops);
        if (!s.ok()) return fail(s);
      }
      args.recv = job->buffer->data();
    }
    if (job->kind == BucketKind::kAllreduce) {
      args.kind = CollectiveKind::kAllreduce;
      if (bucket.compression != "none") {
        absl::Status s = BeginCompressed(job, total, ops, &args);
        if (!s.ok()) return fail(s);
      } else {
        args.two_stage = bucket.two_stage;
      }
    } else {
      args.kind = CollectiveKind::kReduceScatter;
      args.recv_counts = counts;
      absl::StatusOr<std::shared_ptr<DeviceMemory>> chunk =
          pool_->Take(Slot(job->bucket, kChunk),
                      static_cast<size_t>(counts[static_cast<size_t>(rank_)]) * elem, ops);
      if (!chunk.ok()) return fail(chunk.status());
      job->chunk = *std::move(chunk);
      args.send = job->buffer->data();
      args.recv = job->chunk->data();
    }
  }
  // A collective that does not read on the packing stream waits for the packing to finish.
  if (!on_host() && ops.stream() != executor_->channel_stream(job->channel)) {
    absl::StatusOr<std::unique_ptr<Work>> fence = ops.Fence();
    if (!fence.ok()) return fail(fence.status());
    job->pack_fence = *std::move(fence);
  }
  job->args = std::move(args);
  return absl::OkStatus();
}

absl::Status BucketRunner::Launch(BucketJob* job) {
  if (!job->prepared) {
    absl::Status s = Prepare(job, nullptr);
    if (!s.ok()) return s;
  }
  job->started = absl::Now();
  absl::StatusOr<std::unique_ptr<Work>> work = executor_->Start(job->channel, job->args);
  if (!work.ok()) {
    return absl::Status(work.status().code(), absl::StrCat("rank ", rank_, ": ", Describe(*job),
                                                           ": ", work.status().message()));
  }
  job->work = std::move(*work);
  return absl::OkStatus();
}

absl::Status BucketRunner::BeginCompressed(BucketJob* job, int64_t count, BufferOps& ops,
                                           CollectiveArgs* args) {
  const ExecBucket& bucket = job->plan->buckets[static_cast<size_t>(job->bucket)];
  if (compression_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("compressor '", bucket.compression,
                                                      "': this runner has no compression stage"));
  }
  if (job->in_place || job->dtype != DataType::kFloat32) {
    return absl::InternalError("a compressed bucket must be packed float32 values");
  }
  // The packed values, prescaled already, are one tensor to the compression stage, compressed
  // and decoded in place under the bucket's key.
  auto response = std::make_shared<Response>();
  response->name = bucket.compression_key;
  Request& request = response->request;
  request.name = bucket.compression_key;
  request.kind = OpKind::kAllreduce;
  request.tensors = {TensorMeta{DataType::kFloat32, {count}}};
  request.compression = bucket.compression;
  PendingOp op;
  op.request = request;
  Tensor packed = MakeTensor(job->buffer->data(), DataType::kFloat32, {count});
  packed.device = ops.device();
  op.inputs = {packed};
  op.outputs = {packed};
  job->compressed_op.clear();
  job->compressed_op.push_back(ReadyOp{std::move(response), std::move(op)});
  job->compressed = std::make_unique<CompressedBucketState>();
  job->compressed->spec = bucket.compression;
  job->decoding = false;
  return compression_->Begin(job->compressed_op, job->compressed.get(), args, ops);
}

absl::StatusOr<bool> BucketRunner::ContinueCompressed(BucketJob* job) {
  if (job->decoding) return true;
  BufferOps& ops = *ops_[static_cast<size_t>(job->channel)];
  absl::StatusOr<bool> more =
      compression_->Next(job->compressed_op, job->compressed.get(), &job->args, ops);
  if (!more.ok()) return more.status();
  job->work.reset();
  if (*more) return false;  // Progress launches the next round
  if (on_host()) return true;
  // The decode is queued on the channel's stream; the delivery copies on a stream of its own.
  absl::StatusOr<std::unique_ptr<Work>> fence = ops.Fence();
  if (!fence.ok()) return fence.status();
  job->work = *std::move(fence);
  job->decoding = true;
  return false;
}

void BucketRunner::Finish(BucketJob* job) {
  job->done = true;
  job->work.reset();
  job->compressed.reset();
  job->compressed_op.clear();
  if (timeline_->enabled()) {
    timeline_->Span(absl::StrCat("planned channel ", job->channel), BucketKindName(job->kind),
                    job->started, absl::Now());
  }
  if (job->kind == BucketKind::kReduceScatter) {
    chunks_[job->bucket] = std::move(job->chunk);
    job->chunk.reset();
  }
}

std::vector<ReducedPiece> BucketRunner::Pieces(const BucketJob& job) const {
  std::vector<ReducedPiece> pieces;
  int64_t offset = 0;
  for (const ExecSlice& s : job.plan->buckets[static_cast<size_t>(job.bucket)].slices) {
    pieces.push_back(ReducedPiece{job.in_place ? nullptr : job.buffer, offset, s.offset, s.count});
    offset += s.count;
  }
  return pieces;
}

absl::Status BucketRunner::Progress() {
  for (std::deque<BucketJob*>& jobs : channel_jobs_) {
    while (!jobs.empty()) {
      BucketJob* job = jobs.front();
      if (job->work == nullptr) {
        if (job->kind == BucketKind::kAllgather &&
            !chunks_.contains(
                job->plan->buckets[static_cast<size_t>(job->bucket)].reduce_scatter)) {
          break;  // its reduce-scatter runs on another channel
        }
        if (job->pack_fence != nullptr) {
          absl::StatusOr<bool> packed = job->pack_fence->Test();
          if (!packed.ok()) {
            return absl::Status(packed.status().code(),
                                absl::StrCat("rank ", rank_, ": packing ", Describe(*job),
                                             " failed: ", packed.status().message()));
          }
          if (!*packed) break;
          job->pack_fence.reset();
        }
        absl::Status s = Launch(job);
        if (!s.ok()) return s;
      }
      absl::StatusOr<bool> done = job->work->Test();
      if (!done.ok()) {
        return absl::Status(done.status().code(),
                            absl::StrCat("rank ", rank_, ": ", Describe(*job), " on channel ",
                                         job->channel, " failed: ", done.status().message()));
      }
      if (!*done) {
        if (absl::Now() - job->started > timeout_) {
          return absl::DeadlineExceededError(absl::StrCat(
              "rank ", rank_, ": ", Describe(*job), " on channel ", job->channel,
              " did not complete within ", absl::ToInt64Seconds(timeout_),
              " s (OVERLAP_COLLECTIVE_TIMEOUT_S): a peer process is stuck or dead, or the "
              "network is down"));
        }
        break;
      }
      if (job->compressed != nullptr) {
        absl::StatusOr<bool> decoded = ContinueCompressed(job);
        if (!decoded.ok()) {
          return absl::Status(
              decoded.status().code(),
              absl::StrCat("rank ", rank_, ": ", Describe(*job), " (compressor '",
                           job->compressed->spec, "') failed: ", decoded.status().message()));
        }
        if (!*decoded) continue;  // the next round, or the decode's fence
      }
      Finish(job);
      jobs.pop_front();
    }
  }
  while (!deliveries_.empty()) {
    Delivery& d = deliveries_.front();
    absl::StatusOr<bool> copied = d.fence->Test();
    if (copied.ok() && !*copied) break;
    absl::Status status =
        copied.ok() ? absl::OkStatus()
                    : absl::Status(copied.status().code(),
                                   absl::StrCat("rank ", rank_, ": copying '", d.op.request.name,
                                                "' out: ", copied.status().message()));
    Delivery finished = std::move(d);
    deliveries_.pop_front();
    finished.done(finished.op, status);
  }
  return absl::OkStatus();
}

void BucketRunner::Deliver(PendingOp op, std::vector<ReducedPiece> pieces, Done done) {
  const Request& request = op.request;
  const DataType dtype = request.tensors[0].dtype;
  const size_t elem = DataTypeSize(dtype);
  uint8_t* out = static_cast<uint8_t*>(op.outputs[0].data);
  const absl::Time copy_start = absl::Now();
  std::vector<CopySlice> slices;
  for (const ReducedPiece& piece : pieces) {
    uint8_t* dst = out + static_cast<size_t>(piece.offset) * elem;
    const uint8_t* src =
        piece.buffer == nullptr
            ? dst
            : Bytes(piece.buffer) + static_cast<size_t>(piece.buffer_offset) * elem;
    slices.push_back(CopySlice{dst, src, piece.count});
  }
  absl::Status status =
      CopyOn(*deliver_, slices, dtype, FinishScaling(dtype, request.op, request.postscale, size_));
  if (status.ok() && !on_host()) {
    absl::StatusOr<std::unique_ptr<Work>> fence = deliver_->Fence();
    if (fence.ok()) {
      deliveries_.push_back(
          Delivery{std::move(op), std::move(pieces), *std::move(fence), std::move(done)});
      return;
    }
    status = fence.status();
  }
  if (timeline_->enabled()) timeline_->Span(request.name, "COPY_OUT", copy_start, absl::Now());
  if (!status.ok()) {
    status = absl::Status(status.code(), absl::StrCat("rank ", rank_, ": copying '", request.name,
                                                      "' out: ", status.message()));
  }
  done(op, status);
}

bool BucketRunner::idle() const {
  if (!deliveries_.empty()) return false;
  for (const auto& jobs : channel_jobs_) {
    if (!jobs.empty()) return false;
  }
  return true;
}

void BucketRunner::FailAll(const absl::Status& status) {
  for (auto& jobs : channel_jobs_) jobs.clear();
  chunks_.clear();
  std::deque<Delivery> failed = std::move(deliveries_);
  deliveries_.clear();
  for (Delivery& d : failed) d.done(d.op, status);
}

void BucketRunner::Reset() {
  for (auto& jobs : channel_jobs_) jobs.clear();
  chunks_.clear();
  pool_->Clear();
}

int64_t BucketRunner::held_bytes() const { return pool_->held_bytes(); }

std::string BucketRunner::Describe(const BucketJob& job) const {
  std::vector<std::shared_ptr<const Response>> responses;
  for (const ExecSlice& s : job.plan->buckets[static_cast<size_t>(job.bucket)].slices) {
    responses.push_back(job.plan->entries[static_cast<size_t>(s.entry)].response);
  }
  return absl::StrCat("planned ", BucketKindName(job.kind), " of ", UnitNames(responses),
                      " (plan bucket ", job.bucket, ")");
}

}  // namespace overlap
