// Profiles built from model definitions: transformers (BERT, GPT-2) from their exact tensor sizes,
// with compute times from a two-term cost model calibrated on PipeDream's measured CNN profiles:
//
//   time = matmul FLOPs / matmul rate + elementwise output bytes x elementwise ms-per-byte
//
// The matmul rates (forward and backward separately) are fitted on every Conv2d and Linear layer
// of the calibration profiles (FLOPs from the layer's shape; output size from activation_size),
// the elementwise cost on every ReLU, BatchNorm2d, Add and Dropout layer. Backward uses the
// backward rates, so the measured backward/forward ratio carries over. The optimizer step is
// modelled as SGD with momentum: 5 passes over the parameters (read w, g, m; write w, m) at the
// elementwise rate, i.e. update_ms = 2.5 x parameter bytes x ms-per-byte (a ReLU is 2 passes).
#ifndef OVERLAP_SCHEDULER_MODEL_ZOO_H_
#define OVERLAP_SCHEDULER_MODEL_ZOO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/pipedream.h"
#include "scheduler/profile.h"

namespace overlap::sched {

struct Calibration {
  double matmul_forward_tflops = 0;          // 1e12 FLOP/s
  double matmul_backward_tflops = 0;         // backward FLOPs (2x forward) per second
  double elementwise_forward_ms_per_gb = 0;  // per 1e9 output bytes
  double elementwise_backward_ms_per_gb = 0;

  double UpdateMs(int64_t parameter_bytes) const {
    return 2.5 * static_cast<double>(parameter_bytes) * 1e-9 * elementwise_forward_ms_per_gb;
  }
};

// Fits the calibration on PipeDream graphs measured at `batch` samples per iteration.
// InvalidArgument if they hold no Conv2d/Linear or no elementwise layers to fit on.
absl::StatusOr<Calibration> CalibrateOnPipeDream(
    const std::vector<std::vector<PipeDreamNode>>& graphs, int batch);

// Shape of a transformer; `encoder` selects BERT (post-LN, pooler and masked-LM head) versus
// GPT-2 (pre-LN decoder, tied LM head, final LayerNorm).
struct TransformerConfig {
  std::string name;
  bool encoder = true;
  int64_t vocab = 0, positions = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0;
  int64_t batch = 0, sequence = 0;  // per worker
};

// bert-base, bert-large (batch 32 x 128 tokens), gpt2-small, gpt2-medium (batch 8 x 1024).
std::vector<TransformerConfig> TransformerPresets();

// One layer for the embeddings, two per block (attention, MLP), one for the head; a tensor per
// parameter (weight and bias separately, fp32) with the Hugging Face names.
absl::StatusOr<Profile> BuildTransformerProfile(const TransformerConfig& config,
                                                const Calibration& calibration);

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_MODEL_ZOO_H_
