#include "examples/train_flags.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace overlap {
namespace examples {

const char kTrainUsage[] =
    "usage: mnist_mlp [flags]\n"
    "  --epochs N          passes over the training set (default 4)\n"
    "  --batch N           global batch size, split across ranks (default 128)\n"
    "  --lr X              learning rate (default 0.05)\n"
    "  --momentum X        SGD momentum in [0, 1) (default 0.9)\n"
    "  --lr-decay X        learning rate factor per epoch, in (0, 1] (default 0.6)\n"
    "  --seed N            seed of the initial weights and the shuffling (default 42)\n"
    "  --precision P       float32 or float64 (default float32)\n"
    "  --max-steps N       stop after N optimizer steps, 0 = no limit (default 0)\n"
    "  --dump-weights FILE write the final weights to FILE (rank 0)\n"
    "  --data-dir DIR      Fashion-MNIST files (default /usr/share/datasets/fashion-mnist)\n"
    "  --compression SPEC  gradient compressor, e.g. topk:ratio=0.01 (default:\n"
    "                      OVERLAP_COMPRESSION, set by overlaprun --compression)\n"
    "  --warmup-epochs N   epochs allreduced uncompressed and synchronously before compression,\n"
    "                      --delay and --period start (default 0)\n"
    "  --momentum-correction M\n"
    "                      off, on (each rank allreduces its own velocity: DGC momentum\n"
    "                      correction) or masked (on, and a rank's velocity restarts wherever\n"
    "                      the allreduce delivered a value: DGC momentum factor masking, for\n"
    "                      sparsifying compressors) (default off)\n"
    "  --optimizer O       sgd (with --momentum), adam (step size --lr, betas 0.9/0.999) or\n"
    "                      adamw (adam with decoupled --weight-decay) (default sgd)\n"
    "  --weight-decay X    adamw's decoupled weight decay, in [0, 1) (default 0.01)\n"
    "  --delay D           apply every gradient D steps late (0..16, default 0)\n"
    "  --period P          communicate each gradient one step in P, the skipped steps kept\n"
    "                      exactly in a residual (1..64, default 1)\n"
    "  --staleness-correction C\n"
    "                      auto (default): predict under this run's --delay / --period, on\n"
    "                      under a delayed plan of the runtime's planner (deft), which leaves\n"
    "                      synchronous plans exactly as off does;\n"
    "                      off; on (or momentum): lower the momentum (SGD) or beta1 (Adam,\n"
    "                      AdamW) for the mean staleness delay + (period - 1) / 2 of the\n"
    "                      updates; predict: as on, and take each gradient at the parameters\n"
    "                      extrapolated to the step that applies it, and (SGD) apply a\n"
    "                      period's summed gradient as that many momentum steps\n";

namespace {

absl::Status BadValue(absl::string_view flag, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("flag --", flag, ": bad value '", value, "': expected ", want));
}

absl::Status ParseInt(absl::string_view flag, absl::string_view value, int64_t min, int64_t max,
                      int64_t* out) {
  if (!absl::SimpleAtoi(value, out) || *out < min || *out > max) {
    return BadValue(flag, value, absl::StrCat("an integer in [", min, ", ", max, "]"));
  }
  return absl::OkStatus();
}

absl::Status ParseFloat(absl::string_view flag, absl::string_view value, float min_exclusive,
                        float max_exclusive, float* out) {
  if (!absl::SimpleAtof(value, out) || !std::isfinite(*out) || *out <= min_exclusive ||
      *out >= max_exclusive) {
    return BadValue(flag, value,
                    absl::StrCat("a number in (", min_exclusive, ", ", max_exclusive, ")"));
  }
  return absl::OkStatus();
}

absl::Status SetFlag(absl::string_view name, absl::string_view value, TrainOptions* options) {
  int64_t n = 0;
  absl::Status status;
  if (name == "epochs") {
    status = ParseInt(name, value, 1, 1000, &n);
    options->epochs = static_cast<int>(n);
  } else if (name == "batch") {
    status = ParseInt(name, value, 1, 60000, &options->batch);
  } else if (name == "lr") {
    status = ParseFloat(name, value, 0.0f, 10.0f, &options->learning_rate);
  } else if (name == "momentum") {
    // Zero is allowed, so the lower bound is just below it.
    status = ParseFloat(name, value, -1e-30f, 1.0f, &options->momentum);
  } else if (name == "lr-decay") {
    status = ParseFloat(name, value, 0.0f, 1.0f + 1e-6f, &options->lr_decay);
  } else if (name == "seed") {
    status = ParseInt(name, value, 0, int64_t{1} << 62, &n);
    options->seed = static_cast<uint64_t>(n);
  } else if (name == "precision") {
    if (value == "float32") {
      options->precision = Precision::kFloat32;
    } else if (value == "float64") {
      options->precision = Precision::kFloat64;
    } else {
      status = BadValue(name, value, "float32 or float64");
    }
  } else if (name == "max-steps") {
    status = ParseInt(name, value, 0, int64_t{1} << 40, &options->max_steps);
  } else if (name == "dump-weights") {
    if (value.empty()) {
      status = BadValue(name, value, "a file path");
    }
    options->dump_weights = std::string(value);
  } else if (name == "data-dir") {
    if (value.empty()) {
      status = BadValue(name, value, "a directory");
    }
    options->data_dir = std::string(value);
  } else if (name == "compression") {
    if (value.empty()) {
      status = BadValue(name, value, "a compressor spec such as topk:ratio=0.01");
    }
    options->compression = std::string(value);
  } else if (name == "warmup-epochs") {
    status = ParseInt(name, value, 0, 1000, &n);
    options->warmup_epochs = static_cast<int>(n);
  } else if (name == "optimizer") {
    if (value == "sgd") {
      options->optimizer = OptimizerKind::kSgd;
    } else if (value == "adam") {
      options->optimizer = OptimizerKind::kAdam;
    } else if (value == "adamw") {
      options->optimizer = OptimizerKind::kAdamW;
    } else {
      status = BadValue(name, value, "sgd, adam or adamw");
    }
  } else if (name == "weight-decay") {
    status = ParseFloat(name, value, -1e-30f, 1.0f, &options->weight_decay);
  } else if (name == "staleness-correction") {
    if (value == "auto") {
      options->staleness_correction = StalenessCorrection::kAuto;
    } else if (value == "off") {
      options->staleness_correction = StalenessCorrection::kOff;
    } else if (value == "on" || value == "momentum") {
      options->staleness_correction = StalenessCorrection::kMomentum;
    } else if (value == "predict") {
      options->staleness_correction = StalenessCorrection::kPredict;
    } else {
      status = BadValue(name, value, "auto, off, on (or momentum) or predict");
    }
  } else if (name == "delay") {
    status = ParseInt(name, value, 0, 16, &n);
    options->delay = static_cast<int>(n);
  } else if (name == "period") {
    status = ParseInt(name, value, 1, 64, &n);
    options->period = static_cast<int>(n);
  } else if (name == "momentum-correction") {
    if (value == "off") {
      options->momentum_correction = MomentumCorrection::kOff;
    } else if (value == "on") {
      options->momentum_correction = MomentumCorrection::kOn;
    } else if (value == "masked") {
      options->momentum_correction = MomentumCorrection::kMasked;
    } else {
      status = BadValue(name, value, "off, on or masked");
    }
  } else {
    status = absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
  }
  return status;
}

}  // namespace

absl::StatusOr<TrainOptions> ParseTrainFlags(int argc, char** argv) {
  TrainOptions options;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      options.help = true;
      continue;
    }
    if (!absl::ConsumePrefix(&arg, "--") || arg.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", argv[i], "' (flags look like --epochs 3)"));
    }
    absl::string_view name = arg;
    absl::string_view value;
    const size_t eq = arg.find('=');
    if (eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    absl::Status status = SetFlag(name, value, &options);
    if (!status.ok()) {
      return status;
    }
  }
  return options;
}

}  // namespace examples
}  // namespace overlap
