#include "runtime/planes/compression_stage.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/negotiation/messages.h"

namespace overlap {

int64_t CompressionTensorId(const std::string& name, size_t index) {
  // FNV-1a: stable across processes and builds, unlike std::hash.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  mix(name.data(), name.size());
  mix(&index, sizeof(index));
  return static_cast<int64_t>(h >> 1);
}

namespace {

// Calls fn(op, t, k, residual, id) for tensor t of every operation, k counting tensors across
// the bucket in payload order, with the tensor's residual state.
template <typename Fn>
absl::Status ForEachTensor(std::vector<ReadyOp>& ops, compress::ResidualMemory& memory, Fn fn) {
  size_t k = 0;
  for (ReadyOp& r : ops) {
    const Request& request = r.response->request;
    for (size_t t = 0; t < request.tensors.size(); ++t, ++k) {
      const int64_t id = CompressionTensorId(request.name, t);
      absl::StatusOr<compress::ResidualState*> residual =
          memory.Get(id, static_cast<size_t>(request.tensors[t].NumElements()));
      if (!residual.ok()) return residual.status();
      absl::Status s = fn(r, t, k, **residual, id);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// Parses `spec`, spelling out a derived parameter it leaves to its default: covap's R is "auto"
// when not given (compression/covap.h).
absl::StatusOr<compress::CompressorConfig> ParseWithDerived(const std::string& spec) {
  absl::StatusOr<compress::CompressorConfig> parsed = compress::CompressorConfig::Parse(spec);
  if (parsed.ok() && parsed->name == "covap" && parsed->params.count("R") == 0) {
    parsed->params["R"] = "auto";
  }
  return parsed;
}

// A parameter left to be derived at run time ("auto").
bool HasDerived(const compress::CompressorConfig& config) {
  for (const auto& [key, value] : config.params) {
    if (value == "auto") return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::string> CompressionStage::Canonical(const std::string& spec) {
  if (spec.empty() || spec == "none") return std::string("none");
  absl::StatusOr<compress::CompressorConfig> parsed = ParseWithDerived(spec);
  if (!parsed.ok()) return parsed.status();
  // A derived parameter is checked with a stand-in measurement (a ratio of 1), then put back.
  const compress::CompressorContext stand_in{1.0};
  absl::StatusOr<std::unique_ptr<compress::Compressor>> c = compress::MakeCompressor(
      *parsed, HasDerived(*parsed) ? stand_in : compress::CompressorContext{});
  if (!c.ok()) return c.status();
  compress::CompressorConfig canonical = (*c)->config();
  for (const auto& [key, value] : parsed->params) {
    if (value == "auto") canonical.params[key] = "auto";
  }
  return canonical.ToString();
}

bool CompressionStage::NeedsMeasurement(const std::string& spec) {
  // Every allreduce's submission asks: the canonical form spells a derived parameter "=auto", so
  // the others need no parse.
  if (spec.find("=auto") == std::string::npos) return false;
  absl::StatusOr<compress::CompressorConfig> parsed = ParseWithDerived(spec);
  return parsed.ok() && HasDerived(*parsed);
}

absl::StatusOr<std::string> CompressionStage::Resolve(const std::string& spec,
                                                      const compress::CompressorContext& context) {
  if (!NeedsMeasurement(spec)) return spec;
  absl::StatusOr<std::unique_ptr<compress::Compressor>> c = compress::MakeCompressor(spec, context);
  if (!c.ok()) return c.status();
  return (*c)->config().ToString();
}

std::string CompressionStage::CompressorName(const std::string& spec) {
  return spec.substr(0, spec.find(':'));
}

std::string CompressionStage::Plannable(const std::string& spec) {
  absl::StatusOr<std::string> canonical = Canonical(spec);
  if (!canonical.ok() || *canonical == "none" || NeedsMeasurement(*canonical)) return "none";
  absl::StatusOr<std::unique_ptr<compress::Compressor>> c = compress::MakeCompressor(*canonical);
  if (!c.ok() || (*c)->combine() != compress::Combine::kAllreduce) return "none";
  return *canonical;
}

double CompressionStage::PayloadRatio(const std::string& plannable) {
  if (plannable == "none") return 1.0;
  absl::StatusOr<std::unique_ptr<compress::Compressor>> c = compress::MakeCompressor(plannable);
  if (!c.ok()) return 1.0;
  const std::string name = (*c)->config().name;
  if (name == "fp16" || name == "bf16") return 0.5;
  constexpr size_t kElements = size_t{1} << 20;
  absl::StatusOr<size_t> payload = (*c)->MaxPayloadBytes(kElements);
  if (!payload.ok()) return 1.0;
  return std::clamp(static_cast<double>(*payload) / (4.0 * kElements), 0.01, 1.0);
}

absl::StatusOr<CompressionStage::PerConfig*> CompressionStage::Get(const std::string& spec) {
  auto it = configs_.find(spec);
  if (it != configs_.end()) return &it->second;
  absl::StatusOr<std::unique_ptr<compress::Compressor>> c = compress::MakeCompressor(spec);
  if (!c.ok()) return c.status();
  PerConfig& config = configs_[spec];
  config.compressor = std::move(*c);
  config.memory = std::make_unique<compress::ResidualMemory>(spec);
  return &config;
}

void CompressionStage::Describe(const compress::Compressor& c, CompressedBucketState* state,
                                CollectiveArgs* args) const {
  *args = CollectiveArgs();
  const bool on_device = state->device_payload != nullptr;
  const size_t bytes = on_device ? state->payload_bytes : state->payload.size();
  void* payload = on_device ? state->device_payload->data() : state->payload.data();
  if (c.combine() == compress::Combine::kAllreduce) {
    args->kind = CollectiveKind::kAllreduce;
    args->dtype = c.payload_dtype();
    args->op = ReduceOp::kSum;
    args->count = static_cast<int64_t>(bytes / DataTypeSize(c.payload_dtype()));
    args->recv = payload;
    return;
  }
  // Every rank's payload has the same size, so the gather is never ragged.
  if (!on_device) state->combined.resize(bytes * static_cast<size_t>(size_));
  args->kind = CollectiveKind::kAllgatherv;
  args->dtype = DataType::kUint8;
  args->send = payload;
  args->recv = on_device ? state->device_combined->data() : state->combined.data();
  for (int r = 0; r < size_; ++r) {
    args->recv_counts.push_back(static_cast<int64_t>(bytes));
    args->recv_displs.push_back(static_cast<int64_t>(bytes) * r);
  }
}

absl::Status CompressionStage::Begin(std::vector<ReadyOp>& ops, CompressedBucketState* state,
                                     CollectiveArgs* args, BufferOps& buffers) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<PerConfig*> config = Get(state->spec);
  if (!config.ok()) return config.status();
  const compress::Compressor& c = *(*config)->compressor;
  // Sizes first, so the payload buffer is allocated once.
  size_t total = 0;
  for (const ReadyOp& r : ops) {
    for (const TensorMeta& t : r.response->request.tensors) {
      absl::StatusOr<size_t> max = c.MaxPayloadBytes(static_cast<size_t>(t.NumElements()));
      if (!max.ok()) return max.status();
      state->offsets.push_back(total);
      // Kernels read payloads as words: keep every tensor's part 8-byte aligned (the padding
      // is zero on every rank, so it sums and gathers harmlessly).
      total += (*max + 7) / 8 * 8;
    }
  }
  if (buffers.device().is_cuda()) {
    return BeginOnDevice(**config, ops, total, state, args, buffers);
  }
  state->payload.assign(total, 0);
  state->payload_bytes = total;
  state->sizes.clear();
  PerConfig& per = **config;
  absl::Status s = ForEachTensor(
      ops, *per.memory,
      [&](ReadyOp& r, size_t t, size_t k, compress::ResidualState& residual, int64_t id) {
        const size_t n = residual.size();
        // A joined rank contributes a zero gradient (its residual still drains).
        state->scaled.assign(n, 0.0f);
        if (r.op.has_value()) {
          const auto* in = static_cast<const float*>(r.op->inputs[t].data);
          const float prescale = static_cast<float>(r.response->request.prescale);
          for (size_t i = 0; i < n; ++i) state->scaled[i] = in[i] * prescale;
        }
        absl::StatusOr<size_t> bytes =
            c.Compress(state->scaled, residual, per.steps[id],
                       absl::MakeSpan(state->payload).subspan(state->offsets[k]));
        if (!bytes.ok()) return bytes.status();
        state->sizes.push_back(*bytes);
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  Describe(c, state, args);
  return absl::OkStatus();
}

absl::StatusOr<bool> CompressionStage::Next(std::vector<ReadyOp>& ops, CompressedBucketState* state,
                                            CollectiveArgs* args, BufferOps& buffers) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<PerConfig*> config = Get(state->spec);
  if (!config.ok()) return config.status();
  PerConfig& per = **config;
  if (state->device_payload != nullptr) {
    absl::Status decoded = DecodeOnDevice(per, ops, state, buffers);
    if (!decoded.ok()) return decoded;
    return false;  // the CUDA kernels do single-round compressors only
  }
  const compress::Compressor& c = *per.compressor;
  const bool gathered = c.combine() == compress::Combine::kAllgather;
  ++state->round;
  if (state->round < c.rounds()) {  // PowerSGD: P was summed, compute and send Q
    std::vector<uint8_t> next(state->payload.size(), 0);
    absl::Status s = ForEachTensor(
        ops, *per.memory,
        [&](ReadyOp&, size_t, size_t k, compress::ResidualState& residual, int64_t id) {
          absl::StatusOr<size_t> bytes = c.NextRound(
              state->round,
              absl::MakeConstSpan(state->payload).subspan(state->offsets[k], state->sizes[k]),
              residual, per.steps[id], absl::MakeSpan(next).subspan(state->offsets[k]));
          if (!bytes.ok()) return bytes.status();
          state->sizes[k] = *bytes;
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    state->payload.swap(next);
    Describe(c, state, args);
    return true;
  }
  absl::Status s = ForEachTensor(
      ops, *per.memory,
      [&](ReadyOp& r, size_t t, size_t k, compress::ResidualState& residual, int64_t id) {
        const size_t n = residual.size();
        int64_t& step = per.steps[id];
        std::vector<float> sink;  // a joined rank decodes into nothing
        absl::Span<float> out;
        if (r.op.has_value()) {
          out = absl::MakeSpan(static_cast<float*>(r.op->outputs[t].data), n);
        } else {
          sink.resize(n);
          out = absl::MakeSpan(sink);
        }
        absl::Status decoded;
        if (gathered) {
          std::fill(out.begin(), out.end(), 0.0f);
          for (int rank = 0; decoded.ok() && rank < size_; ++rank) {
            const size_t base = state->payload.size() * static_cast<size_t>(rank);
            decoded = c.DecompressAdd(absl::MakeConstSpan(state->combined)
                                          .subspan(base + state->offsets[k], state->sizes[k]),
                                      residual, step, out);
          }
        } else {
          decoded = c.Decompress(
              absl::MakeConstSpan(state->payload).subspan(state->offsets[k], state->sizes[k]),
              residual, step, out);
        }
        ++step;
        return decoded;
      });
  if (!s.ok()) return s;
  return false;
}

absl::Status CompressionStage::BeginOnDevice(PerConfig& per, std::vector<ReadyOp>& ops,
                                             size_t total, CompressedBucketState* state,
                                             CollectiveArgs* args, BufferOps& buffers) {
  const compress::Compressor& c = *per.compressor;
  if (per.cuda == nullptr) {
    absl::StatusOr<std::unique_ptr<CudaCompressor>> cuda = CudaCompressor::Create(c);
    if (!cuda.ok()) return cuda.status();
    per.cuda = std::move(*cuda);
  }
  // Zeroed, so padding and unsent slots are the same bytes on every rank.
  absl::StatusOr<std::unique_ptr<DeviceMemory>> payload =
      buffers.Allocate(std::max<size_t>(total, 8));
  if (!payload.ok()) return payload.status();
  state->device_payload = std::move(*payload);
  state->payload_bytes = total;
  absl::Status s = WriteZeros(buffers, state->device_payload->data(),
                              static_cast<int64_t>(total / 4), DataType::kFloat32);
  if (!s.ok()) return s;
  if (c.combine() == compress::Combine::kAllgather) {
    absl::StatusOr<std::unique_ptr<DeviceMemory>> combined =
        buffers.Allocate(std::max<size_t>(total, 8) * static_cast<size_t>(size_));
    if (!combined.ok()) return combined.status();
    state->device_combined = std::move(*combined);
  }
  auto* base = static_cast<uint8_t*>(state->device_payload->data());
  size_t k = 0;
  for (ReadyOp& r : ops) {
    const Request& request = r.response->request;
    for (size_t t = 0; t < request.tensors.size(); ++t, ++k) {
      const int64_t id = CompressionTensorId(request.name, t);
      // A joined rank contributes a zero gradient (its residual still drains).
      const float* grad =
          r.op.has_value() ? static_cast<const float*>(r.op->inputs[t].data) : nullptr;
      // The host memory holds a residual only where a snapshot was restored into it.
      s = per.cuda->Compress(id, static_cast<size_t>(request.tensors[t].NumElements()), grad,
                             static_cast<float>(request.prescale), per.steps[id],
                             base + state->offsets[k], per.memory.get(), buffers);
      if (!s.ok()) return s;
    }
  }
  Describe(c, state, args);
  return absl::OkStatus();
}

absl::Status CompressionStage::DecodeOnDevice(PerConfig& per, std::vector<ReadyOp>& ops,
                                              CompressedBucketState* state, BufferOps& buffers) {
  const bool gathered = per.compressor->combine() == compress::Combine::kAllgather;
  const auto* payload = static_cast<const uint8_t*>(gathered ? state->device_combined->data()
                                                             : state->device_payload->data());
  std::unique_ptr<DeviceMemory> sink;  // a joined rank decodes into scratch
  size_t k = 0;
  for (ReadyOp& r : ops) {
    const Request& request = r.response->request;
    for (size_t t = 0; t < request.tensors.size(); ++t, ++k) {
      const size_t n = static_cast<size_t>(request.tensors[t].NumElements());
      const int64_t id = CompressionTensorId(request.name, t);
      float* out = nullptr;
      if (r.op.has_value()) {
        out = static_cast<float*>(r.op->outputs[t].data);
      } else {
        if (sink == nullptr || sink->size() < n * sizeof(float)) {
          absl::StatusOr<std::unique_ptr<DeviceMemory>> scratch =
              buffers.Allocate(std::max<size_t>(n, 1) * sizeof(float));
          if (!scratch.ok()) return scratch.status();
          sink = std::move(*scratch);
        }
        out = static_cast<float*>(sink->data());
      }
      int64_t& step = per.steps[id];
      const int parts = gathered ? size_ : 1;
      for (int rank = 0; rank < parts; ++rank) {
        absl::Status s = per.cuda->Decode(
            n, payload + state->payload_bytes * static_cast<size_t>(rank) + state->offsets[k], step,
            /*accumulate=*/rank > 0, out, buffers);
        if (!s.ok()) return s;
      }
      ++step;
    }
  }
  return absl::OkStatus();
}

void CompressionStage::ReleaseDeviceState() {
  absl::MutexLock lock(&mu_);
  for (auto& [spec, config] : configs_) config.cuda.reset();
}

size_t CompressionStage::Release(const std::vector<std::string>& names) {
  absl::MutexLock lock(&mu_);
  size_t bytes = 0;
  for (const std::string& name : names) {
    const int64_t id = CompressionTensorId(name, 0);
    for (auto& [spec, config] : configs_) {
      if (const compress::ResidualState* state = config.memory->Find(id)) {
        bytes += (state->size() + state->aux().size()) * sizeof(float);
        config.memory->Erase(id);
      }
      if (config.cuda != nullptr) bytes += config.cuda->Release(id);
      config.steps.erase(id);
    }
  }
  return bytes;
}

absl::StatusOr<std::string> CompressionStage::Save() {
  absl::MutexLock lock(&mu_);
  for (auto& [spec, config] : configs_) {
    if (config.cuda == nullptr) continue;
    absl::Status s = config.cuda->CopyResidualsTo(*config.memory);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("rank ", rank_, ": SaveCompressionState: the residuals of '", spec,
                                 "' on the GPU: ", s.message()));
    }
  }
  ByteWriter out;
  out.PutString("overlap-residuals-v1");
  out.PutI64(static_cast<int64_t>(configs_.size()));
  for (const auto& [spec, config] : configs_) {
    out.PutString(spec);
    out.PutString(config.memory->Save());
    std::vector<int64_t> steps;
    for (const auto& [id, step] : config.steps) {
      steps.push_back(id);
      steps.push_back(step);
    }
    out.PutI64s(steps);
  }
  return std::move(out.bytes());
}

absl::Status CompressionStage::Restore(const std::string& snapshot) {
  ByteReader in(snapshot);
  std::string magic;
  int64_t count = 0;
  absl::Status s = in.GetString(&magic);
  if (s.ok() && magic != "overlap-residuals-v1") s = absl::DataLossError("bad magic");
  if (s.ok()) s = in.GetI64(&count);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": RestoreCompressionState: not a compression snapshot (",
                     s.message(), ")"));
  }
  absl::MutexLock lock(&mu_);
  std::map<std::string, PerConfig> restored;
  for (int64_t i = 0; i < count; ++i) {
    std::string spec, memory;
    std::vector<int64_t> steps;
    s = in.GetString(&spec);
    if (s.ok()) s = in.GetString(&memory);
    if (s.ok()) s = in.GetI64s(&steps);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank_, ": RestoreCompressionState: ", s.message()));
    }
    absl::StatusOr<std::unique_ptr<compress::Compressor>> c = compress::MakeCompressor(spec);
    if (!c.ok()) return c.status();
    PerConfig& config = restored[spec];
    config.compressor = std::move(*c);
    config.memory = std::make_unique<compress::ResidualMemory>(spec);
    s = config.memory->Restore(memory);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("rank ", rank_, ": RestoreCompressionState: ", s.message()));
    }
    for (size_t j = 0; j + 1 < steps.size(); j += 2) config.steps[steps[j]] = steps[j + 1];
  }
  configs_ = std::move(restored);
  return absl::OkStatus();
}

}  // namespace overlap
