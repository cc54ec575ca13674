// Compressed allreduce inside the data plane: error-feedback compression per tensor, payloads
// combined across ranks by allreduce or allgather, decoded into the outputs.
//
// Host tensors are compressed by the compressors of compression/ on the coordinator thread; CUDA
// tensors by the kernels of compression/cuda on the channel's stream
// (runtime/planes/cuda_compression.h), with the same payload layouts and their residuals on the
// device. The BufferOps each call gets says which.
//
// A bucket of compressed allreduces (all with one compressor configuration) goes through
// Begin(), which compresses every tensor into one contiguous payload, then, after each
// collective, Next(), which either prepares the next round (PowerSGD's second factor) or decodes
// the sums into the output buffers. Averaging and post-scaling stay with the data plane.
//
// Each tensor keeps its residual across steps in a ResidualMemory per configuration, keyed by a
// hash of its name, which every rank computes alike; the step number passed to the compressor is
// how many times that tensor was reduced under that configuration, also alike on every rank.
//
// Threading: Begin and Next run on the coordinator thread; Save and Restore may be called from
// any thread and are serialised with them (for CUDA tensors, between steps: Save waits for the
// device work that last used each residual).
#ifndef OVERLAP_RUNTIME_PLANES_COMPRESSION_STAGE_H_
#define OVERLAP_RUNTIME_PLANES_COMPRESSION_STAGE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collectives/buffer_ops.h"
#include "collectives/executor.h"
#include "compression/compressor.h"
#include "runtime/negotiation/negotiator.h"
#include "runtime/planes/cuda_compression.h"

namespace overlap {

// What a compressed bucket carries between rounds.
struct CompressedBucketState {
  std::string spec;  // canonical compressor configuration
  int round = 0;
  std::vector<uint8_t> payload;   // this rank's payload of the current round, all tensors
  std::vector<uint8_t> combined;  // allgather: every rank's payload
  std::vector<size_t> offsets;    // per tensor, into payload (and into each rank's gathered part)
  std::vector<size_t> sizes;
  std::vector<float> scaled;  // prescaled input of one tensor
  // CUDA tensors: payload and combined live here instead, on the device.
  std::unique_ptr<DeviceMemory> device_payload;
  std::unique_ptr<DeviceMemory> device_combined;
  size_t payload_bytes = 0;  // of this rank's payload, host or device
};

class CompressionStage {
 public:
  CompressionStage(int rank, int size) : rank_(rank), size_(size) {}

  // Canonical form of `spec` ("none" for empty), or InvalidArgument from the compressor library
  // naming the parameter and cause. A parameter derived from a measurement at run time (covap's
  // R=auto) stays "auto" there, every other parameter checked; Resolve turns it into a value.
  static absl::StatusOr<std::string> Canonical(const std::string& spec);
  // True when the canonical `spec` (Canonical's output) has a parameter derived at run time.
  static bool NeedsMeasurement(const std::string& spec);
  // The canonical `spec` with its derived parameters computed from `context` (covap's R from the
  // measured communication/computation ratio); `spec` itself when it has none.
  static absl::StatusOr<std::string> Resolve(const std::string& spec,
                                             const compress::CompressorContext& context);

  // The compressor a canonical `spec` names: "topk" of "topk:ratio=0.01", "none" of "none".
  static std::string CompressorName(const std::string& spec);
  // What a scheduled plan can compress with, given the configured default `spec`
  // (OVERLAP_COMPRESSION; runtime/plan/executable_plan.h): its canonical form when its compressor
  // combines payloads by allreduce (the planners model no allgathers: not topk, efsign) and has no
  // parameter derived at run time (covap's R=auto, which changes once measured); else "none",
  // also for a spec that does not parse. The runtime (which tensors are planned) and the plan
  // scheduler (the planner's compressor) both ask here, so they agree.
  static std::string Plannable(const std::string& spec);
  // The planners' payload ratio for Plannable's result: payload bytes over gradient bytes, 0.5 for
  // fp16 and bf16, the compressor's largest payload of a 1M-element tensor otherwise (clamped to
  // [0.01, 1]); 1 for "none".
  static double PayloadRatio(const std::string& plannable);

  // Compresses every tensor of `ops` into the bucket's payload and describes round 0's
  // collective. `buffers` are the channel's: the tensors' device and the stream to queue on.
  absl::Status Begin(std::vector<ReadyOp>& ops, CompressedBucketState* state, CollectiveArgs* args,
                     BufferOps& buffers);

  // Called when the current round's collective finished. Returns true with `args` set when
  // another round follows; false once the outputs hold the decoded sums (for CUDA tensors, once
  // the decode is queued on the stream).
  absl::StatusOr<bool> Next(std::vector<ReadyOp>& ops, CompressedBucketState* state,
                            CollectiveArgs* args, BufferOps& buffers);

  // Drops the residuals of CUDA tensors, before the streams they were used on go away (the CUDA
  // plane's shutdown): the next CUDA tensor starts from zero.
  void ReleaseDeviceState();

  // Frees what the single-tensor operations `names` keep, under every configuration, on the host
  // and the device: their residuals and reduction counts (a replaced plan's bucket keys, which
  // no later plan reuses unless it has the same bucket). None of them may be in flight. Returns
  // the host and device residual bytes freed.
  size_t Release(const std::vector<std::string>& names);

  // Every residual (with the compressor configuration it belongs to), for a checkpoint: the
  // device's are copied to the host first, which can fail.
  absl::StatusOr<std::string> Save();
  // Replaces the residuals with a snapshot from Save(). InvalidArgument on bytes that are not a
  // snapshot, FailedPrecondition on one made under other compressor configurations.
  absl::Status Restore(const std::string& snapshot);

 private:
  struct PerConfig {
    std::unique_ptr<compress::Compressor> compressor;
    std::unique_ptr<compress::ResidualMemory> memory;
    std::map<int64_t, int64_t> steps;      // tensor id -> reductions so far
    std::unique_ptr<CudaCompressor> cuda;  // made on the first CUDA tensor
  };

  absl::StatusOr<PerConfig*> Get(const std::string& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Describe(const compress::Compressor& c, CompressedBucketState* state,
                CollectiveArgs* args) const;
  // Begin for CUDA tensors, once state->offsets lays out a payload of `total` bytes.
  absl::Status BeginOnDevice(PerConfig& per, std::vector<ReadyOp>& ops, size_t total,
                             CompressedBucketState* state, CollectiveArgs* args,
                             BufferOps& buffers);
  absl::Status DecodeOnDevice(PerConfig& per, std::vector<ReadyOp>& ops,
                              CompressedBucketState* state, BufferOps& buffers);

  const int rank_;
  const int size_;
  absl::Mutex mu_;
  std::map<std::string, PerConfig> configs_ ABSL_GUARDED_BY(mu_);
};

// The id under which tensor `index` of operation `name` keeps its residual and shared
// randomness: a hash every rank computes alike.
int64_t CompressionTensorId(const std::string& name, size_t index);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_COMPRESSION_STAGE_H_
