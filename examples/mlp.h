// A multi-layer perceptron (dense layers, ReLU between them, softmax cross-entropy on top) with
// hand-written backward, so that a data-parallel trainer can hand each layer's gradient to the
// runtime the moment it exists, while the layers below are still being differentiated.
//
// Scalar is float or double. Samples are columns: a batch of b images is a 784 x b matrix. Not
// thread-safe.
#ifndef OVERLAP_EXAMPLES_MLP_H_
#define OVERLAP_EXAMPLES_MLP_H_

#include <Eigen/Dense>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/types/span.h"

namespace overlap {
namespace examples {

template <typename Scalar>
using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>;
template <typename Scalar>
using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

// Parameters of one dense layer, y = weight * x + bias, weight being out x in.
template <typename Scalar>
struct DenseLayer {
  Matrix<Scalar> weight;
  Vector<Scalar> bias;
};

template <typename Scalar>
class Mlp {
 public:
  // `sizes` lists the widths from input to output, e.g. {784, 256, 128, 10}; at least two.
  // Weights are He-uniform from a generator seeded with `seed` and biases zero, computed the same
  // way on every platform (and rounded from the same doubles for either Scalar), so every rank
  // that uses the same seed starts from the same model.
  Mlp(const std::vector<int>& sizes, uint64_t seed);

  int num_layers() const { return static_cast<int>(params_.size()); }
  std::vector<DenseLayer<Scalar>>& params() { return params_; }
  const std::vector<DenseLayer<Scalar>>& params() const { return params_; }
  // Filled by Backward; same shapes as params(). The memory of each gradient stays at the same
  // address for the life of the Mlp, so it may be handed to an asynchronous allreduce.
  std::vector<DenseLayer<Scalar>>& grads() { return grads_; }

  // Runs the network on the columns of `x` (sizes.front() rows, any number of columns, zero
  // included) and keeps the activations that Backward needs. Returns the logits.
  const Matrix<Scalar>& Forward(const Eigen::Ref<const Matrix<Scalar>>& x);

  // Differentiates the softmax cross-entropy of the last Forward against `labels` (one per
  // column) and stores `grad_scale` times the gradient of the summed per-sample loss in grads().
  // Layers are done last to first; `on_layer_done(l)` is called as soon as grads()[l] is final
  // and is never written again during this call. Returns the unscaled summed loss.
  double Backward(absl::Span<const uint8_t> labels, Scalar grad_scale,
                  const std::function<void(int layer)>& on_layer_done);

  // The class with the largest logit for each column of `x`.
  std::vector<int> Predict(const Eigen::Ref<const Matrix<Scalar>>& x);

 private:
  std::vector<DenseLayer<Scalar>> params_;
  std::vector<DenseLayer<Scalar>> grads_;
  // inputs_[l] is the input of layer l (inputs_[0] the batch itself); pre_relu_[l] is layer l's
  // output before the ReLU (the last entry holds the logits).
  std::vector<Matrix<Scalar>> inputs_;
  std::vector<Matrix<Scalar>> pre_relu_;
};

extern template class Mlp<float>;
extern template class Mlp<double>;

}  // namespace examples
}  // namespace overlap

#endif  // OVERLAP_EXAMPLES_MLP_H_
