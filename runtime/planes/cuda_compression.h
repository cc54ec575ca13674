// Error-feedback compression of CUDA tensors: the kernels of compression/cuda, queued on the data
// plane channel's stream, with each tensor's residual kept on the device.
//
// One CudaCompressor serves one compressor configuration, as CompressionStage's host path does,
// and writes the same payload layouts, so what crosses the wire is what the CPU compressors
// write: fp16 and bf16 (with or without error feedback), covap and efsign bit for bit, top-k the
// same set of (index, value) pairs. Two exceptions: efsign's scale is summed in another order
// (within 1e-5), and fp16/bf16 without error feedback send a -0.0 element as +0.0. Supported: fp16, bf16, covap, topk (method=exact) and efsign;
// randomk and powersgd run on host tensors only (CudaCompressionSupports says so, naming them).
//
// Ordering: a residual is read and written on the stream of the channel that runs the tensor's
// bucket. A tensor's next step can only be submitted after its previous one completed (a name is
// never in flight twice), and completion waits for a fence after that work, so a residual is
// never used on two streams at once although a tensor may change channels between steps.
//
// Built without CUDA, Create returns Unavailable and CudaCompressionSupports says why.
//
// Threading: the coordinator thread, except CopyResidualsTo (any thread, between steps).
#ifndef OVERLAP_RUNTIME_PLANES_CUDA_COMPRESSION_H_
#define OVERLAP_RUNTIME_PLANES_CUDA_COMPRESSION_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/buffer_ops.h"
#include "compression/compressor.h"
#include "compression/residual.h"

namespace overlap {

// OK when CUDA tensors can be compressed with `spec` (a canonical compressor configuration);
// otherwise InvalidArgument naming the compressor and what to use instead, or Unavailable when
// overlap was built without CUDA.
absl::Status CudaCompressionSupports(const std::string& spec);

class CudaCompressor {
 public:
  // `compressor` is the host compressor of the same configuration, which must outlive this.
  static absl::StatusOr<std::unique_ptr<CudaCompressor>> Create(
      const compress::Compressor& compressor);
  // Frees the residuals once the device work that last used them is done. Must run while the
  // streams that work was queued on still exist (CudaPlane destroys it before its executor's).
  virtual ~CudaCompressor() = default;

  // Adds prescale * grad (zeros for a joined rank's null `grad`) to tensor `id`'s residual and
  // writes the payload for `step` at `payload` (device memory of at least the compressor's
  // MaxPayloadBytes(n)), on ops' stream. The residual is created zeroed on first use, or from
  // `restored` when that holds the tensor (a snapshot taken by CompressionStage::Restore);
  // InvalidArgument when the tensor comes back with another size than its residual, kept or
  // restored (as the host path).
  virtual absl::Status Compress(int64_t id, size_t n, const float* grad, float prescale,
                                int64_t step, uint8_t* payload,
                                const compress::ResidualMemory* restored, BufferOps& ops) = 0;

  // out = decoded(payload), or out += decoded(payload) with `accumulate`: for allreduce-combined
  // compressors the summed payload, for allgather-combined ones each rank's in turn.
  virtual absl::Status Decode(size_t n, const uint8_t* payload, int64_t step, bool accumulate,
                              float* out, BufferOps& ops) = 0;

  // Copies every residual into `memory` (created there at its size), after the work queued on
  // the stream that last used it. For checkpoints, taken between steps.
  virtual absl::Status CopyResidualsTo(compress::ResidualMemory& memory) = 0;

  // Frees tensor `id`'s residual once the work queued on the stream that last used it is done;
  // its next Compress starts from zeros. Returns the bytes freed (0 when it had none).
  virtual size_t Release(int64_t id) = 0;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANES_CUDA_COMPRESSION_H_
