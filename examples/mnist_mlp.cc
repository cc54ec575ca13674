// Data-parallel training of an MLP on Fashion-MNIST over the overlap runtime.
//
// Every rank holds the whole model and takes a contiguous slice of every global batch. Backward
// runs last layer to first and hands each layer's weight and bias gradient to overlap::Allreduce
// the moment it is computed, so the averaging of layer l overlaps the differentiation of layers
// below it; the optimizer step waits for all of them.
//
// Run:  mpirun -np 4 bazel-bin/examples/mnist_mlp [--epochs 4] [--batch 128] ...
#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "examples/fashion_mnist.h"
#include "examples/mlp.h"
#include "examples/sgd.h"
#include "examples/shard.h"
#include "examples/train_flags.h"
#include "examples/weight_prediction.h"
#include "examples/weights_file.h"
#include "runtime/overlap.h"

namespace overlap {
namespace examples {
namespace {

const std::vector<int> kLayerSizes = {Dataset::kPixels, 256, 128, Dataset::kClasses};

std::string ParamName(int layer, bool bias) {
  return absl::StrCat("layer", layer, bias ? ".bias" : ".weight");
}

// The same permutation on every rank: a Fisher-Yates shuffle driven by a generator seeded from
// (seed, epoch), with no implementation-defined distribution in between.
std::vector<int64_t> EpochOrder(int64_t size, uint64_t seed, int epoch) {
  std::vector<int64_t> order(size);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 gen(seed * 1000003 + static_cast<uint64_t>(epoch));
  for (int64_t i = size - 1; i > 0; --i) {
    std::swap(order[i], order[gen() % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}

// Copies the images order[begin, begin + count) into the columns of `x` and their labels.
template <typename Scalar>
void Gather(const Dataset& data, const std::vector<int64_t>& order, RowRange rows,
            Matrix<Scalar>* x, std::vector<uint8_t>* labels) {
  x->resize(Dataset::kPixels, rows.count);
  labels->resize(rows.count);
  for (int64_t j = 0; j < rows.count; ++j) {
    const int64_t image = order[rows.begin + j];
    x->col(j) =
        Eigen::Map<const Eigen::VectorXf>(&data.pixels[image * Dataset::kPixels], Dataset::kPixels)
            .cast<Scalar>();
    (*labels)[j] = data.labels[image];
  }
}

absl::Status WaitAll(std::vector<Handle>& handles) {
  absl::Status first;
  for (const Handle& handle : handles) {
    first.Update(handle.Wait());
  }
  handles.clear();
  return first;
}

// Horovod's broadcast_parameters: the seeded initialisation already agrees everywhere, but a
// broadcast makes that a guarantee rather than an assumption.
template <typename Scalar>
absl::Status BroadcastParameters(Mlp<Scalar>& model) {
  std::vector<Handle> handles;
  for (int l = 0; l < model.num_layers(); ++l) {
    DenseLayer<Scalar>& p = model.params()[l];
    const Tensor weight = MakeTensor(p.weight.data(), {p.weight.rows(), p.weight.cols()});
    const Tensor bias = MakeTensor(p.bias.data(), {p.bias.size()});
    for (auto [name, tensor] :
         {std::pair{ParamName(l, false), weight}, std::pair{ParamName(l, true), bias}}) {
      absl::StatusOr<Handle> handle = Broadcast(absl::StrCat("init.", name), tensor, tensor);
      if (!handle.ok()) {
        return handle.status();
      }
      handles.push_back(*handle);
    }
  }
  return WaitAll(handles);
}

// One optimizer step on this rank's slice of the global batch `global`. Returns the summed
// (unscaled) loss of the slice.
// `allreduce` carries the compressor for this step; `local` is null unless momentum correction
// is on, in which case each rank's velocity is what gets allreduced. `predict` is null unless
// the staleness correction predicts weights; `step` counts this schedule's steps before this one.
// In synchronous warm-up epochs of a delayed run the gradients go by other names ("warmup."
// prefix), since the runtime keeps one schedule per name.
template <typename Scalar>
absl::StatusOr<double> TrainStep(const Dataset& train, const std::vector<int64_t>& order,
                                 RowRange global, const AllreduceOptions& allreduce,
                                 Mlp<Scalar>& model, LocalMomentum<Scalar>* local,
                                 WeightPrediction<Scalar>* predict, int64_t step,
                                 const std::string& prefix, Optimizer<Scalar>& optimizer) {
  const RowRange mine = ShardOf(global.count, Rank(), Size());
  Matrix<Scalar> x;
  std::vector<uint8_t> labels;
  Gather(train, order, {global.begin + mine.begin, mine.count}, &x, &labels);
  // Step markers: with them the runtime measures the step and can run a scheduler planner
  // (OVERLAP_PLANNER); without them it still works, with the plan it observes.
  (void)StartForward();
  if (predict != nullptr) {
    predict->Shift(step, allreduce.delay, allreduce.period, model.params());
  }
  model.Forward(x);

  // Each rank's gradient is scaled by size / global_rows, so that the average over ranks is
  // sum(per-sample gradients) / global_rows: exactly the 1-rank gradient of the global batch,
  // also when the batch does not divide evenly.
  const Scalar scale = static_cast<Scalar>(Size()) / static_cast<Scalar>(global.count);
  std::vector<Handle> handles;
  std::vector<size_t> handle_tensor;  // 2 l + (bias) for each handle
  absl::Status submit_status;
  (void)StartBackward();
  const double loss = model.Backward(labels, scale, [&](int l) {
    DenseLayer<Scalar>& g = model.grads()[l];
    if (local != nullptr) {
      local->Accumulate(g, l);
    }
    const Tensor weight = MakeTensor(g.weight.data(), {g.weight.rows(), g.weight.cols()});
    const Tensor bias = MakeTensor(g.bias.data(), {g.bias.size()});
    for (bool is_bias : {false, true}) {
      const size_t index = 2 * static_cast<size_t>(l) + (is_bias ? 1 : 0);
      AllreduceOptions options = allreduce;
      options.phase = static_cast<int>(index % static_cast<size_t>(allreduce.period));
      absl::StatusOr<Handle> handle =
          Allreduce(prefix + ParamName(l, is_bias), is_bias ? bias : weight,
                    is_bias ? bias : weight, options);
      if (handle.ok()) {
        handles.push_back(*handle);
        handle_tensor.push_back(index);
      } else {
        submit_status.Update(handle.status());
      }
    }
  });
  if (predict != nullptr) {
    predict->Restore(model.params());
  }
  (void)StartUpdate();  // this program waits for every gradient, then takes one optimizer step
  absl::Status status = WaitAll(handles);
  status.Update(submit_status);
  if (!status.ok()) {
    return status;
  }
  // Masking is for sparsified steps: after a dense (warm-up) allreduce it would zero every
  // velocity.
  if (local != nullptr && allreduce.compression != "none") {
    local->Mask(model.grads());
  }
  // With delays or periods some tensors have no update this step.
  UpdateMask apply(2 * model.params().size(), true);
  for (size_t h = 0; h < handles.size(); ++h) apply[handle_tensor[h]] = handles[h].has_update();
  optimizer.Step(model.grads(), model.params(), apply);
  if (predict != nullptr) {
    predict->Record(model.params(), apply);
  }
  return loss;
}

// This rank's count of correct predictions on its slice of the test set.
template <typename Scalar>
int64_t CountCorrect(const Dataset& test, Mlp<Scalar>& model) {
  const RowRange mine = ShardOf(test.size, Rank(), Size());
  Eigen::Map<const Eigen::MatrixXf> all(test.pixels.data(), Dataset::kPixels, test.size);
  const Matrix<Scalar> x = all.middleCols(mine.begin, mine.count).cast<Scalar>();
  const std::vector<int> predicted = model.Predict(x);
  int64_t correct = 0;
  for (int64_t j = 0; j < mine.count; ++j) {
    correct += predicted[j] == test.labels[mine.begin + j] ? 1 : 0;
  }
  return correct;
}

// Sums `values` over every rank, in place.
absl::Status SumAcrossRanks(const std::string& name, std::vector<double>& values) {
  const Tensor tensor = MakeTensor(values.data(), {static_cast<int64_t>(values.size())});
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  absl::StatusOr<Handle> handle = Allreduce(name, tensor, tensor, sum);
  if (!handle.ok()) {
    return handle.status();
  }
  return handle->Wait();
}

template <typename Scalar>
absl::Status Train(const TrainOptions& options, const Dataset& train, const Dataset& test) {
  Mlp<Scalar> model(kLayerSizes, options.seed);
  absl::Status status = BroadcastParameters(model);
  if (!status.ok()) {
    return status;
  }
  // With momentum correction the momentum lives in each rank's LocalMomentum and the optimizer
  // applies the averaged velocity as it is.
  const bool corrected = options.momentum_correction != MomentumCorrection::kOff;
  std::unique_ptr<LocalMomentum<Scalar>> local;
  if (corrected) {
    local = std::make_unique<LocalMomentum<Scalar>>(
        model.params(), options.momentum,
        options.momentum_correction == MomentumCorrection::kMasked);
  }
  // Against stale updates (docs/scheduler.md, "Accuracy"): stale gradients act as momentum
  // already, so both corrections take that much momentum off; kPredict also takes each gradient
  // at the predicted parameters and, for SGD, spreads a period's summed gradient over its steps.
  // Synchronous warm-up epochs run the plain optimizer.
  const bool own_schedule = options.delay > 0 || options.period > 1;
  StalenessCorrection correction = options.staleness_correction;
  if (correction == StalenessCorrection::kAuto) {
    correction = own_schedule ? StalenessCorrection::kPredict : StalenessCorrection::kMomentum;
  }
  const bool is_sgd = options.optimizer == OptimizerKind::kSgd;
  std::unique_ptr<WeightPrediction<Scalar>> predict;
  if (correction == StalenessCorrection::kPredict) {
    predict = std::make_unique<WeightPrediction<Scalar>>(model.params());
  }
  // The run's own schedule (--delay, --period), or, without one, the mean staleness of the plan
  // the runtime's planner put in force (OVERLAP_STALENESS > 0: Stats().plan_mean_staleness).
  double staleness = options.delay + (options.period - 1) / 2.0;
  auto momentum_of_epoch = [&](bool warmup) {
    const double m = !is_sgd ? 0.9 : corrected ? 0.0 : options.momentum;
    return warmup || correction == StalenessCorrection::kOff
               ? m
               : std::max(0.0, 1 - (1 - m) * (1 + staleness));
  };
  auto steps_per_update_of_epoch = [&](bool warmup) {
    return !warmup && is_sgd && predict != nullptr ? options.period : 1;
  };
  std::unique_ptr<Optimizer<Scalar>> optimizer;
  if (is_sgd) {
    optimizer =
        std::make_unique<MomentumSgd<Scalar>>(model.params(), options.learning_rate, Scalar{0});
  } else {
    const Scalar decay =
        options.optimizer == OptimizerKind::kAdamW ? static_cast<Scalar>(options.weight_decay) : 0;
    optimizer = std::make_unique<Adam<Scalar>>(model.params(), options.learning_rate, Scalar{0},
                                               decay, correction != StalenessCorrection::kOff);
  }
  Optimizer<Scalar>& sgd = *optimizer;
  if (Rank() == 0) {
    std::printf("training 784-256-128-10 MLP (%s) on %d rank(s), global batch %lld, %lld images\n",
                sizeof(Scalar) == 4 ? "float32" : "float64", Size(),
                static_cast<long long>(options.batch), static_cast<long long>(train.size));
    std::fflush(stdout);  // seen at once through a pipe (a launcher, a log), not at exit
  }

  int64_t steps = 0;
  int64_t scheduled_steps = 0;  // steps with the run's delay and period, after any warm-up
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    const std::vector<int64_t> order = EpochOrder(train.size, options.seed, epoch);
    sgd.set_learning_rate(
        static_cast<Scalar>(options.learning_rate * std::pow(double{options.lr_decay}, epoch - 1)));
    // Warm-up epochs ask for no compression explicitly; afterwards --compression, or the
    // runtime's default when it is empty.
    AllreduceOptions allreduce;
    allreduce.plan_may_delay = true;  // gradients: a delayed plan may deliver them late
    const bool warmup = epoch <= options.warmup_epochs;
    allreduce.compression = warmup ? "none" : options.compression;
    allreduce.delay = warmup ? 0 : options.delay;
    allreduce.period = warmup ? 1 : options.period;
    const bool scheduled = options.delay > 0 || options.period > 1;
    const std::string prefix = warmup && scheduled ? "warmup." : "";
    sgd.set_momentum(static_cast<Scalar>(momentum_of_epoch(warmup)),
                     steps_per_update_of_epoch(warmup));
    const auto start = std::chrono::steady_clock::now();
    // {summed loss, training images, correct test predictions, test images}, summed over ranks.
    std::vector<double> totals = {0.0, 0.0, 0.0, 0.0};
    for (int64_t begin = 0; begin < train.size; begin += options.batch) {
      if (options.max_steps > 0 && steps >= options.max_steps) {
        break;
      }
      if (!own_schedule && correction == StalenessCorrection::kMomentum &&
          Stats().plan_mean_staleness != staleness) {
        staleness = Stats().plan_mean_staleness;  // a delayed plan was adopted (or dropped)
        sgd.set_momentum(static_cast<Scalar>(momentum_of_epoch(warmup)),
                         steps_per_update_of_epoch(warmup));
      }
      const RowRange global = {begin, std::min(options.batch, train.size - begin)};
      absl::StatusOr<double> loss = TrainStep(train, order, global, allreduce, model, local.get(),
                                              predict.get(), scheduled_steps, prefix, sgd);
      if (!loss.ok()) {
        return loss.status();
      }
      totals[0] += *loss;
      totals[1] += static_cast<double>(ShardOf(global.count, Rank(), Size()).count);
      ++steps;
      scheduled_steps += warmup ? 0 : 1;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    totals[2] = static_cast<double>(CountCorrect(test, model));
    totals[3] = static_cast<double>(ShardOf(test.size, Rank(), Size()).count);
    status = SumAcrossRanks("epoch_totals", totals);
    if (!status.ok()) {
      return status;
    }
    if (Rank() == 0) {
      std::printf("epoch %d  loss %.4f  test accuracy %.2f%%  %.0f images/s  (%.1f s)\n", epoch,
                  totals[0] / std::max(totals[1], 1.0), 100.0 * totals[2] / totals[3],
                  totals[1] / seconds, seconds);
      std::fflush(stdout);
    }
    if (options.max_steps > 0 && steps >= options.max_steps) {
      break;
    }
  }
  if (Rank() == 0) {
    // How the gradients travelled: negotiated in the first steps, then on a frozen plan.
    const RuntimeStats stats = Stats();
    std::printf(
        "runtime on rank 0: %lld negotiation rounds, %lld planned launches, plan of %lld "
        "tensors (%lld frozen, %lld dropped)\n",
        static_cast<long long>(stats.negotiation_rounds),
        static_cast<long long>(stats.planned_launches),
        static_cast<long long>(stats.planned_tensors), static_cast<long long>(stats.plans_frozen),
        static_cast<long long>(stats.plans_dropped));
    std::fflush(stdout);
  }
  if (Rank() == 0 && !options.dump_weights.empty()) {
    return WriteWeights(options.dump_weights, model.params());
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Eigen::setNbThreads(1);  // ranks share the cores; one thread each
  absl::StatusOr<TrainOptions> options = ParseTrainFlags(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "mnist_mlp: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(kTrainUsage, stdout);
    return 0;
  }
  // Data first: a missing file is reported before any rank waits on a collective.
  absl::StatusOr<Dataset> train = LoadFashionMnist(options->data_dir, Split::kTrain);
  absl::StatusOr<Dataset> test =
      train.ok() ? LoadFashionMnist(options->data_dir, Split::kTest) : train.status();
  if (!test.ok()) {
    std::fprintf(stderr, "mnist_mlp: %s\n", std::string(test.status().message()).c_str());
    return 1;
  }
  absl::Status status = Init();
  if (status.ok()) {
    status = options->precision == Precision::kFloat64 ? Train<double>(*options, *train, *test)
                                                       : Train<float>(*options, *train, *test);
  }
  if (status.ok()) {
    status = Shutdown();
  }
  if (!status.ok()) {
    // Exiting without Shutdown on purpose: a failed collective may leave peers unable to join
    // it, and mpirun tears the job down once one rank exits non-zero.
    std::fprintf(stderr, "mnist_mlp: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace examples
}  // namespace overlap

int main(int argc, char** argv) { return overlap::examples::Main(argc, argv); }
