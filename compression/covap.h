// COVAP's coarse-grained filter (Meng et al., "Near-Linear Scaling Data Parallel Training with
// Overlapping-Aware Gradient Compression", 2023), as used by the "covap" compressor.
//
// A tensor (in practice a fused bucket) is cut into shards; shard g is sent in step n when
// (g + n) mod R == 0, so each shard goes exactly once every R steps and the filter costs no
// selection work. Unsent shards accumulate in the residual. When a shard is sent it carries its
// gradient plus alpha(n) times its residual; the rest, (1 - alpha) * residual, stays. alpha ramps
// linearly from alpha0 to 1 over ramp_steps steps: COVAP feeds the stale accumulated residual
// back gradually early in training, when a full R-step residual would be a large stale jump.
// Keeping (1 - alpha) * residual instead of dropping it is our choice: nothing is ever lost, and
// for alpha in [1/2, 1] the split is exact in float arithmetic (Sterbenz).
//
// Parameters: R (integer >= 1, or "auto": from the measured communication/computation ratio),
// alpha0 in [0.5, 1] (default 0.5), ramp_steps >= 0 (default 0 = alpha is 1 from the start),
// shard (elements per shard; default 0 = ceil(n / R), so every step sends ~n / R elements).
#ifndef OVERLAP_COMPRESSION_COVAP_H_
#define OVERLAP_COMPRESSION_COVAP_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace overlap {
namespace compress {

// Largest interval R=auto will choose.
constexpr int kMaxCovapInterval = 64;

// The filter interval that lets communication hide behind computation: ceil(comm / compute),
// at least 1 and at most kMaxCovapInterval. FailedPrecondition when the ratio is unknown (<= 0).
absl::StatusOr<int> CovapIntervalForRatio(double comm_compute_ratio);

// alpha(step): alpha0 + (1 - alpha0) * step / ramp_steps, capped at 1 (1 when ramp_steps == 0).
float CovapAlpha(double alpha0, int64_t ramp_steps, int64_t step);

}  // namespace compress
}  // namespace overlap

#endif  // OVERLAP_COMPRESSION_COVAP_H_
