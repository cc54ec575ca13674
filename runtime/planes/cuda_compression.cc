#include "runtime/planes/cuda_compression.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compression/covap.h"
#include "compression/cuda/kernels.h"
#include "runtime/planes/compression_stage.h"

namespace overlap {
namespace {

absl::Status CudaError(cudaError_t err, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// A parameter of a canonical configuration, where MakeCompressor filled in every default.
template <typename T>
absl::StatusOr<T> Param(const compress::CompressorConfig& config, const std::string& key) {
  auto it = config.params.find(key);
  T value{};
  bool parsed = false;
  if (it != config.params.end()) {
    if constexpr (std::is_floating_point_v<T>) {
      parsed = absl::SimpleAtod(it->second, &value);
    } else {
      parsed = absl::SimpleAtoi(it->second, &value);
    }
  }
  if (!parsed) {
    return absl::InternalError(
        absl::StrCat("compressor '", config.ToString(), "' has no numeric parameter '", key, "'"));
  }
  return value;
}

class Kernels : public CudaCompressor {
 public:
  explicit Kernels(const compress::Compressor& compressor)
      : compressor_(compressor), name_(compressor.config().name) {}

  // A residual's memory is freed on the stream that allocated it; wait for the one that used it
  // last, which may be another channel's.
  ~Kernels() override {
    for (auto& [id, kept] : residuals_) cudaStreamSynchronize(kept.stream);
  }

  absl::Status Init() {
    const compress::CompressorConfig& config = compressor_.config();
    if (name_ == "fp16" || name_ == "bf16") {
      absl::StatusOr<int> ef = Param<int>(config, "ef");
      if (!ef.ok()) return ef.status();
      error_feedback_ = *ef != 0;
    } else if (name_ == "covap") {
      absl::StatusOr<int> interval = Param<int>(config, "R");
      absl::StatusOr<double> alpha0 = Param<double>(config, "alpha0");
      absl::StatusOr<int64_t> ramp = Param<int64_t>(config, "ramp_steps");
      absl::StatusOr<int64_t> shard = Param<int64_t>(config, "shard");
      for (const absl::Status& s :
           {interval.status(), alpha0.status(), ramp.status(), shard.status()}) {
        if (!s.ok()) return s;
      }
      interval_ = *interval;
      alpha0_ = *alpha0;
      ramp_steps_ = *ramp;
      shard_ = static_cast<size_t>(*shard);
    }
    return absl::OkStatus();
  }

  absl::Status Compress(int64_t id, size_t n, const float* grad, float prescale, int64_t step,
                        uint8_t* payload, const compress::ResidualMemory* restored,
                        BufferOps& ops) override {
    auto stream = static_cast<cudaStream_t>(ops.stream());
    // A joined rank's zeros, or the prescaled gradient, in memory freed after this stream's work.
    std::unique_ptr<DeviceMemory> input;
    if (grad == nullptr || prescale != 1.0f) {
      absl::StatusOr<std::unique_ptr<DeviceMemory>> scratch = ops.Allocate(n * sizeof(float));
      if (!scratch.ok()) return scratch.status();
      input = std::move(*scratch);
      const CopySlice slice{input->data(), grad, static_cast<int64_t>(n)};
      absl::Status s = ops.Copy({&slice, 1}, DataType::kFloat32, CopyScaling{prescale, 1});
      if (!s.ok()) return s;
      grad = static_cast<const float*>(input->data());
    }
    // Without error feedback the cast reads the gradient alone: a residual of zeros, each step.
    // (grad + 0 turns -0.0 into +0.0, where the host's plain cast keeps the sign: equal numbers.)
    std::unique_ptr<DeviceMemory> zeros;
    float* residual = nullptr;
    if ((name_ == "fp16" || name_ == "bf16") && !error_feedback_) {
      absl::StatusOr<std::unique_ptr<DeviceMemory>> scratch = ops.Allocate(n * sizeof(float));
      if (!scratch.ok()) return scratch.status();
      zeros = std::move(*scratch);
      absl::Status s = WriteZeros(ops, zeros->data(), static_cast<int64_t>(n), DataType::kFloat32);
      if (!s.ok()) return s;
      residual = static_cast<float*>(zeros->data());
    } else {
      absl::StatusOr<float*> kept = Residual(id, n, restored, ops);
      if (!kept.ok()) return kept.status();
      residual = *kept;
    }
    if (name_ == "fp16") {
      return compress::cuda::ErrorFeedbackToHalf(grad, residual,
                                                 reinterpret_cast<uint16_t*>(payload), n, stream);
    }
    if (name_ == "bf16") {
      return compress::cuda::ErrorFeedbackToBFloat16(
          grad, residual, reinterpret_cast<uint16_t*>(payload), n, stream);
    }
    if (name_ == "covap") {
      return compress::cuda::CovapCompress(
          grad, residual, reinterpret_cast<float*>(payload), n, ShardOf(n), interval_, step,
          compress::CovapAlpha(alpha0_, ramp_steps_, step), stream);
    }
    if (name_ == "topk") {
      absl::StatusOr<size_t> k = TopK(n);
      if (!k.ok()) return k.status();
      absl::StatusOr<void*> workspace = Workspace(compress::cuda::TopKWorkspaceBytes(), ops);
      if (!workspace.ok()) return workspace.status();
      return compress::cuda::TopKCompress(grad, residual, payload, n, *k, *workspace, stream);
    }
    absl::StatusOr<void*> workspace = Workspace(compress::cuda::EfSignWorkspaceBytes(), ops);
    if (!workspace.ok()) return workspace.status();
    return compress::cuda::EfSignCompress(grad, residual, payload, n, *workspace, stream);
  }

  absl::Status Decode(size_t n, const uint8_t* payload, int64_t step, bool accumulate, float* out,
                      BufferOps& ops) override {
    auto stream = static_cast<cudaStream_t>(ops.stream());
    if (name_ == "fp16") {
      return compress::cuda::HalfToFloat(reinterpret_cast<const uint16_t*>(payload), out, n,
                                         accumulate, stream);
    }
    if (name_ == "bf16") {
      return compress::cuda::BFloat16ToFloat(reinterpret_cast<const uint16_t*>(payload), out, n,
                                             accumulate, stream);
    }
    if (name_ == "covap") {
      return compress::cuda::CovapDecode(reinterpret_cast<const float*>(payload), out, n,
                                         ShardOf(n), interval_, step, accumulate, stream);
    }
    if (!accumulate) {
      absl::Status s = WriteZeros(ops, out, static_cast<int64_t>(n), DataType::kFloat32);
      if (!s.ok()) return s;
    }
    if (name_ == "topk") {
      absl::StatusOr<size_t> k = TopK(n);
      if (!k.ok()) return k.status();
      return compress::cuda::TopKDecodeAdd(payload, out, n, *k, stream);
    }
    return compress::cuda::EfSignDecodeAdd(payload, out, n, stream);
  }

  size_t Release(int64_t id) override {
    auto it = residuals_.find(id);
    if (it == residuals_.end()) return 0;
    cudaStreamSynchronize(it->second.stream);
    const size_t bytes = it->second.n * sizeof(float);
    residuals_.erase(it);
    return bytes;
  }

  absl::Status CopyResidualsTo(compress::ResidualMemory& memory) override {
    for (auto& [id, kept] : residuals_) {
      absl::StatusOr<compress::ResidualState*> state = memory.Get(id, kept.n);
      if (!state.ok()) return state.status();
      cudaError_t err = cudaStreamSynchronize(kept.stream);
      if (err != cudaSuccess) return CudaError(err, "waiting for a residual's stream");
      err = cudaMemcpy((*state)->residual().data(), kept.memory->data(), kept.n * sizeof(float),
                       cudaMemcpyDeviceToHost);
      if (err != cudaSuccess) return CudaError(err, "copying a residual to the host");
    }
    return absl::OkStatus();
  }

 private:
  struct Kept {
    std::unique_ptr<DeviceMemory> memory;
    size_t n = 0;
    cudaStream_t stream = nullptr;  // the last one that used it
  };

  absl::StatusOr<float*> Residual(int64_t id, size_t n, const compress::ResidualMemory* restored,
                                  BufferOps& ops) {
    auto it = residuals_.find(id);
    // A residual restored from a snapshot counts as made for its own size, as one kept here does.
    const compress::ResidualState* saved =
        it != residuals_.end() || restored == nullptr ? nullptr : restored->Find(id);
    const size_t made_for = it != residuals_.end() ? it->second.n
                            : saved != nullptr     ? saved->size()
                                                   : n;
    if (made_for != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("compressor '", compressor_.config().ToString(), "': tensor ", id, " has ",
                       n, " elements, but its residual was made for ", made_for,
                       " (a tensor name reused with another shape under compression)"));
    }
    if (it != residuals_.end()) {
      it->second.stream = static_cast<cudaStream_t>(ops.stream());
      return static_cast<float*>(it->second.memory->data());
    }
    absl::StatusOr<std::unique_ptr<DeviceMemory>> memory = ops.Allocate(n * sizeof(float));
    if (!memory.ok()) return memory.status();
    absl::Status s =
        saved != nullptr
            ? ops.CopyFromHost((*memory)->data(), saved->residual().data(), n * sizeof(float))
            : WriteZeros(ops, (*memory)->data(), static_cast<int64_t>(n), DataType::kFloat32);
    if (!s.ok()) return s;
    Kept& kept = residuals_[id];
    kept.memory = std::move(*memory);
    kept.n = n;
    kept.stream = static_cast<cudaStream_t>(ops.stream());
    return static_cast<float*>(kept.memory->data());
  }

  absl::StatusOr<void*> Workspace(size_t bytes, BufferOps& ops) {
    std::unique_ptr<DeviceMemory>& memory = workspaces_[ops.stream()];
    if (memory == nullptr) {
      absl::StatusOr<std::unique_ptr<DeviceMemory>> allocated = ops.Allocate(bytes);
      if (!allocated.ok()) return allocated.status();
      memory = std::move(*allocated);
    }
    return memory->data();
  }

  size_t ShardOf(size_t n) const {
    return shard_ > 0 ? shard_ : (n + static_cast<size_t>(interval_) - 1) / interval_;
  }

  // The host compressor's k for n elements, from its payload size (4 + 8k bytes).
  absl::StatusOr<size_t> TopK(size_t n) const {
    absl::StatusOr<size_t> bytes = compressor_.MaxPayloadBytes(n);
    if (!bytes.ok()) return bytes.status();
    return (*bytes - 4) / 8;
  }

  const compress::Compressor& compressor_;
  const std::string name_;
  bool error_feedback_ = true;
  int interval_ = 1;
  double alpha0_ = 1.0;
  int64_t ramp_steps_ = 0;
  size_t shard_ = 0;
  std::map<int64_t, Kept> residuals_;
  std::map<void*, std::unique_ptr<DeviceMemory>> workspaces_;  // per stream: calls may overlap
};

}  // namespace

absl::Status CudaCompressionSupports(const std::string& spec) {
  const std::string name = CompressionStage::CompressorName(spec);
  if (name == "fp16" || name == "bf16" || name == "covap" || name == "efsign") {
    return absl::OkStatus();
  }
  if (name == "topk" && spec.find("method=sampled") == std::string::npos) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "compression '", spec,
      "' of CUDA tensors is not available (CUDA tensors take fp16, bf16, "
      "covap, topk with method=exact, and efsign); compress host tensors with it, or pick one of "
      "those"));
}

absl::StatusOr<std::unique_ptr<CudaCompressor>> CudaCompressor::Create(
    const compress::Compressor& compressor) {
  absl::Status supported = CudaCompressionSupports(compressor.config().ToString());
  if (!supported.ok()) return supported;
  auto kernels = std::make_unique<Kernels>(compressor);
  absl::Status s = kernels->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<CudaCompressor>(std::move(kernels));
}

}  // namespace overlap
