// Optimizers over an Mlp's parameters: SGD with classical momentum
//   velocity = momentum * velocity + gradient;  parameter -= learning_rate * velocity
// (linear in the gradient, and all this model needs to pass 85% on Fashion-MNIST), and Adam and
// AdamW, for the delayed-update accuracy comparison (docs/scheduler.md, "Accuracy").
#ifndef OVERLAP_EXAMPLES_SGD_H_
#define OVERLAP_EXAMPLES_SGD_H_

#include <vector>

#include "examples/mlp.h"

namespace overlap {
namespace examples {

// Which of a model's tensors get an update this step: apply[2 l] for layer l's weight,
// apply[2 l + 1] for its bias. With delayed updates or periods some have none (the allreduce's
// Handle::has_update() is false); their parameters and optimizer state stay as they are.
using UpdateMask = std::vector<bool>;

template <typename Scalar>
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void set_learning_rate(Scalar learning_rate) = 0;
  // The momentum (SGD) or beta1 (Adam), and how many steps' gradients each update sums (SGD
  // only; see MomentumSgd). Used when a synchronous warm-up ends.
  virtual void set_momentum(Scalar momentum, int steps_per_update) = 0;
  // Applies one step of `grads` (same shapes as the params given to the constructor) to the
  // tensors `apply` selects (all when it is empty).
  virtual void Step(const std::vector<DenseLayer<Scalar>>& grads,
                    std::vector<DenseLayer<Scalar>>& params, const UpdateMask& apply) = 0;
};

template <typename Scalar>
class MomentumSgd : public Optimizer<Scalar> {
 public:
  // steps_per_update p > 1: each update carries the sum of p steps' gradients (an update period,
  // AllreduceOptions::period), and is applied as p momentum steps of 1/p of it each.
  MomentumSgd(const std::vector<DenseLayer<Scalar>>& params, Scalar learning_rate, Scalar momentum,
              int steps_per_update = 1);

  void set_learning_rate(Scalar learning_rate) override { learning_rate_ = learning_rate; }
  void set_momentum(Scalar momentum, int steps_per_update) override {
    momentum_ = momentum;
    steps_per_update_ = steps_per_update;
  }

  void Step(const std::vector<DenseLayer<Scalar>>& grads, std::vector<DenseLayer<Scalar>>& params,
            const UpdateMask& apply = {}) override;

 private:
  Scalar learning_rate_;
  Scalar momentum_;
  int steps_per_update_;
  std::vector<DenseLayer<Scalar>> velocity_;
};

// Adam (Kingma and Ba, 2015) with bias correction, beta1 (default 0.9), beta2 0.999, epsilon 1e-8.
// Each tensor counts its own steps, so one that skips a step (no update) is corrected for the steps
// it actually took.
//
// With weight_decay w > 0 it is AdamW (Loshchilov and Hutter, 2019): decoupled weight decay,
//   parameter *= 1 - learning_rate * w, then the Adam step
// (PyTorch's order), applied to every tensor, biases included, as torch.optim.AdamW does by
// default. The decay reads the current parameters, never the (possibly stale) gradient. A tensor
// with no update this step is not decayed either, unless decay_without_update: then the decay
// still runs every step, as in synchronous training, and only the gradient's step waits.
template <typename Scalar>
class Adam : public Optimizer<Scalar> {
 public:
  Adam(const std::vector<DenseLayer<Scalar>>& params, Scalar learning_rate, Scalar beta1 = 0.9,
       Scalar weight_decay = 0, bool decay_without_update = false);

  void set_learning_rate(Scalar learning_rate) override { learning_rate_ = learning_rate; }
  void set_momentum(Scalar beta1, int /*steps_per_update*/) override { beta1_ = beta1; }

  void Step(const std::vector<DenseLayer<Scalar>>& grads, std::vector<DenseLayer<Scalar>>& params,
            const UpdateMask& apply = {}) override;

 private:
  Scalar learning_rate_;
  Scalar beta1_;
  Scalar weight_decay_;
  bool decay_without_update_;
  std::vector<DenseLayer<Scalar>> m_, v_;
  std::vector<int64_t> steps_;  // per tensor, 2 l + (bias)
};

// DGC's momentum correction (Lin et al. 2018, "Deep Gradient Compression"), for training with a
// compressor that keeps error feedback. Each rank keeps its own velocity
//   u = momentum * u + gradient
// and hands u, not the gradient, to the allreduce; the optimizer then steps with the averaged u
// and no momentum of its own (MomentumSgd with momentum 0). Without compression this is the same
// optimizer as MomentumSgd: the average of the ranks' velocities is the velocity of the average
// gradient. With compression, error feedback then works on the momentum-corrected gradient, so
// what a compressor holds back is released later at its true weight, instead of being scaled by
// a global momentum that has already moved on.
//
// Masking (DGC's momentum factor masking): after the allreduce, a rank's velocity is zeroed
// wherever the reduced value is non-zero, i.e. wherever a sparsifier delivered an accumulated
// value this step, so momentum that has just been applied is not applied again. For allreduce
// sparsifiers (covap, randomk) every rank sends exactly the delivered coordinates; for topk the
// delivered set is the union over ranks, a superset of this rank's. Only for sparsifiers: with a
// dense result (none, casts, efsign, powersgd) masking would remove momentum entirely.
template <typename Scalar>
class LocalMomentum {
 public:
  LocalMomentum(const std::vector<DenseLayer<Scalar>>& params, Scalar momentum, bool masking);

  // grad := (velocity = momentum * velocity + grad): call before grad is allreduced in place.
  void Accumulate(DenseLayer<Scalar>& grad, int layer);

  // Momentum factor masking against the allreduced velocities (no-op without masking).
  void Mask(const std::vector<DenseLayer<Scalar>>& reduced);

 private:
  Scalar momentum_;
  bool masking_;
  std::vector<DenseLayer<Scalar>> velocity_;
};

extern template class MomentumSgd<float>;
extern template class MomentumSgd<double>;
extern template class Adam<float>;
extern template class Adam<double>;
extern template class LocalMomentum<float>;
extern template class LocalMomentum<double>;

}  // namespace examples
}  // namespace overlap

#endif  // OVERLAP_EXAMPLES_SGD_H_
