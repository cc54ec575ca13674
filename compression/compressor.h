// Gradient compressors with error feedback: the contract between the runtime and compression/.
//
// A Compressor turns a gradient plus the tensor's error-feedback residual into a payload that the
// executor moves across ranks, and turns the combined payload back into a gradient. Whatever a
// compressor does not send stays in the residual and is added to the next step's gradient, so no
// gradient mass is lost: after every step, (everything sent so far) + residual == (every gradient
// seen so far), exactly for none/fp16/bf16/covap/randomk/topk up to the rounding of the running
// float sums, and within the documented bound for efsign and powersgd (docs/compression.md).
//
// The executor drives one tensor (or fused bucket) through a step like this:
//
//   auto bytes = c->Compress(grad, state, step, payload[0]);            // round 0
//   for (int r = 1; r < c->rounds(); ++r) {
//     combine payload[r-1] across ranks (allreduce-sum, or allgather);
//     bytes = c->NextRound(r, reduced[r-1], state, step, payload[r]);   // PowerSGD only
//   }
//   combine the last payload across ranks;
//   kAllreduce: c->Decompress(summed_payload, state, step, out);           // out = sum
//   kAllgather: zero out; for each rank: c->DecompressAdd(rank_payload, state, step, out);
//
// The decoded result is the SUM over ranks; the runtime applies averaging as a post-scale.
//
// Payload types. For kAllreduce compressors payload_dtype() says how the executor must sum the
// payload bytes: kFloat32 (none, covap, randomk, powersgd), kFloat16 (fp16) or kBFloat16 (bf16)
// elements, summed element-wise in that dtype with the RNE conversions of numeric/half.h. For
// kAllgather compressors (topk, efsign) the payload is opaque bytes (kUint8) of a fixed size per
// rank and step, so the allgather is never ragged.
//
// Cross-rank agreement. Every rank must use the same CompressorConfig (compare ToString()), the
// same tensor id for the same tensor, and the same step number; shared randomness (randomk, the
// PowerSGD initial Q) is a pure function of (seed, tensor id, step), and covap's shard schedule
// of the step, so payload layouts agree without communication.
//
// Threading: a Compressor holds only its immutable configuration, so one instance may serve many
// tensors from several threads at once; a ResidualState must be used by one thread at a time.
#ifndef OVERLAP_COMPRESSION_COMPRESSOR_H_
#define OVERLAP_COMPRESSION_COMPRESSOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/dtype.h"
#include "compression/residual.h"

namespace overlap {
namespace compress {

// How the executor combines payloads across ranks.
enum class Combine {
  kAllreduce,  // payloads are summed element-wise as payload_dtype()
  kAllgather,  // every rank receives every rank's payload
};

// A compressor name plus its parameters, e.g. "topk:ratio=0.01,method=sampled" or "covap:R=4".
// Parameters are kept as strings here and validated by MakeCompressor.
struct CompressorConfig {
  std::string name;
  std::map<std::string, std::string> params;  // ordered, so ToString() is canonical

  // Parses "name" or "name:key=value,key=value". InvalidArgument on an empty name, a parameter
  // without '=', an empty key or a repeated key. Does not check that the name or keys exist.
  static absl::StatusOr<CompressorConfig> Parse(absl::string_view spec);

  // Canonical text ("name:k1=v1,k2=v2", keys sorted): equal on two ranks iff the configs are.
  std::string ToString() const;
};

// Measurements the runtime can supply for parameters derived at run time.
struct CompressorContext {
  // Measured communication time / computation time of the bucket or step; <= 0 when unknown.
  // covap uses it when R=auto.
  double comm_compute_ratio = 0.0;
};

class Compressor {
 public:
  virtual ~Compressor() = default;

  // The validated configuration, with every default filled in (so ToString() compares fully).
  virtual const CompressorConfig& config() const = 0;
  virtual Combine combine() const = 0;
  // Element type of an allreduce payload; kUint8 for kAllgather compressors.
  virtual DataType payload_dtype() const = 0;
  // Communication rounds per step: 1, or 2 for PowerSGD (P, then Q).
  virtual int rounds() const { return 1; }

  // Upper bound on the payload bytes of any round for a tensor of `num_elements` elements; the
  // executor allocates this much per rank. InvalidArgument when the tensor cannot be compressed
  // with this configuration (for example k larger than the tensor).
  virtual absl::StatusOr<size_t> MaxPayloadBytes(size_t num_elements) const = 0;

  // Adds `grad` to the residual, writes the round-0 payload into `payload` (at least
  // MaxPayloadBytes long) and keeps in the residual what was not sent. Returns the payload bytes
  // written; for kAllreduce this is the same on every rank for the same (tensor, step).
  // `state` must have been created for grad.size() elements.
  virtual absl::StatusOr<size_t> Compress(absl::Span<const float> grad, ResidualState& state,
                                          int64_t step, absl::Span<uint8_t> payload) const = 0;

  // Multi-round compressors: `reduced` is round `round - 1`'s combined payload; writes round
  // `round`'s payload. The default returns FailedPrecondition.
  virtual absl::StatusOr<size_t> NextRound(int round, absl::Span<const uint8_t> reduced,
                                           ResidualState& state, int64_t step,
                                           absl::Span<uint8_t> payload) const;

  // out = decoded(payload). For kAllreduce, `payload` is the sum over ranks of the last round.
  // PowerSGD also keeps the reduced Q in `state` as next step's warm start.
  virtual absl::Status Decompress(absl::Span<const uint8_t> payload, ResidualState& state,
                                  int64_t step, absl::Span<float> out) const = 0;

  // out += decoded(payload): how a kAllgather executor sums the ranks' payloads. Works for every
  // compressor, so tests can build the reference decompress-then-sum.
  virtual absl::Status DecompressAdd(absl::Span<const uint8_t> payload, const ResidualState& state,
                                     int64_t step, absl::Span<float> out) const = 0;
};

// Creates the compressor named by `config`, filling in defaults and validating every parameter.
// InvalidArgument names the compressor, the parameter and the cause (unknown compressor, unknown
// parameter, unparsable value, R < 1, ratio outside (0, 1], k < 1, ...). FailedPrecondition when
// a parameter must be derived from `context` and the measurement is missing (covap R=auto).
absl::StatusOr<std::unique_ptr<Compressor>> MakeCompressor(const CompressorConfig& config,
                                                           const CompressorContext& context = {});

// Parse + MakeCompressor in one call, for strings from OVERLAP_COMPRESSION or the command line.
absl::StatusOr<std::unique_ptr<Compressor>> MakeCompressor(absl::string_view spec,
                                                           const CompressorContext& context = {});

}  // namespace compress
}  // namespace overlap

#endif  // OVERLAP_COMPRESSION_COMPRESSOR_H_
