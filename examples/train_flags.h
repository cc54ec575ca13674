// Command-line options of the Fashion-MNIST demo, with their defaults in one place.
#ifndef OVERLAP_EXAMPLES_TRAIN_FLAGS_H_
#define OVERLAP_EXAMPLES_TRAIN_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "examples/fashion_mnist.h"

namespace overlap {
namespace examples {

// The precision of the model, its gradients and their allreduce.
enum class Precision { kFloat32, kFloat64 };

// Where momentum is applied relative to gradient compression (examples/sgd.h, LocalMomentum).
enum class MomentumCorrection {
  kOff,     // allreduce the gradient, momentum on the averaged result (the textbook optimizer)
  kOn,      // DGC momentum correction: each rank allreduces its own velocity, no global momentum
  kMasked,  // kOn plus DGC momentum factor masking: velocity restarts where a value arrived
};

enum class OptimizerKind { kSgd, kAdam, kAdamW };

// What the demo does against stale updates (--delay, --period; docs/scheduler.md, "Accuracy").
enum class StalenessCorrection {
  // The default: kPredict where the run's own --delay / --period are in force (after any
  // warm-up), kMomentum otherwise, which follows the runtime plan's mean staleness and is the
  // plain optimizer, bit for bit, while that plan is synchronous.
  kAuto,
  kOff,
  // Momentum (SGD) or beta1 (Adam, AdamW) m becomes max(0, 1 - (1 - m)(1 + s)) for the mean
  // staleness s = delay + (period - 1) / 2, since stale gradients already act as momentum.
  kMomentum,
  // kMomentum, plus weight prediction (examples/weight_prediction.h): each gradient is taken at
  // the parameters extrapolated to the step that will apply it; and for SGD with a period p,
  // each update (the sum of p steps' gradients) is applied as p momentum steps of 1/p of it.
  kPredict,
};

struct TrainOptions {
  int epochs = 4;
  int64_t batch = 128;  // global batch: the sum of every rank's shard
  float learning_rate = 0.05f;
  float momentum = 0.9f;
  // The learning rate of epoch e (from 1) is lr * lr_decay^(e-1): large steps while the loss
  // falls fast, small ones to settle, which steadies the final accuracy.
  float lr_decay = 0.6f;
  uint64_t seed = 42;
  Precision precision = Precision::kFloat32;
  int64_t max_steps = 0;     // stop after this many optimizer steps; 0 means run every epoch
  std::string dump_weights;  // write the final parameters here (rank 0) when not empty
  std::string data_dir = kDefaultFashionMnistDir;
  // Gradient compressor spec for every gradient allreduce (docs/compression.md); empty means the
  // runtime's default, OVERLAP_COMPRESSION (what overlaprun --compression sets).
  std::string compression;
  // The first warmup_epochs epochs allreduce uncompressed (DGC and PowerSGD both warm up so) and
  // synchronously (no delay or period, plain optimizer, as large-batch training warms up); the
  // compressor and its residuals start with the first epoch after them.
  int warmup_epochs = 0;
  MomentumCorrection momentum_correction = MomentumCorrection::kOff;
  // kSgd: MomentumSgd; kAdam: Adam; kAdamW: Adam with decoupled weight decay (examples/sgd.h),
  // with learning_rate as its step size.
  OptimizerKind optimizer = OptimizerKind::kSgd;
  // AdamW's decoupled weight decay (torch.optim.AdamW's default); ignored by the others.
  float weight_decay = 0.01f;
  // Delayed updates and update periods (AllreduceOptions::delay, period): every gradient is
  // applied `delay` steps late and communicated one step in `period`, tensor k in phase
  // k % period so that the steps share the traffic.
  int delay = 0;
  int period = 1;
  // Any correction also makes AdamW decay tensors in steps where they get no update, so that the
  // decay, which reads the current parameters, keeps the synchronous rate under periods.
  StalenessCorrection staleness_correction = StalenessCorrection::kAuto;
  bool help = false;
};

// One line per flag, for --help and for error messages.
extern const char kTrainUsage[];

// Parses --name=value or --name value for every TrainOptions field. InvalidArgument naming the
// flag and the accepted values for an unknown flag, a missing value or a value out of range.
absl::StatusOr<TrainOptions> ParseTrainFlags(int argc, char** argv);

}  // namespace examples
}  // namespace overlap

#endif  // OVERLAP_EXAMPLES_TRAIN_FLAGS_H_
