#include "examples/mlp.h"

#include <cmath>
#include <random>

namespace overlap {
namespace examples {
namespace {

// std::uniform_real_distribution is implementation-defined; this mapping is not, so a model
// initialised on one machine matches one initialised on another.
double UniformSymmetric(std::mt19937_64& gen, double limit) {
  const double unit = static_cast<double>(gen() >> 11) * 0x1.0p-53;  // [0, 1)
  return (2.0 * unit - 1.0) * limit;
}

}  // namespace

template <typename Scalar>
Mlp<Scalar>::Mlp(const std::vector<int>& sizes, uint64_t seed) {
  std::mt19937_64 gen(seed);
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    const int in = sizes[l];
    const int out = sizes[l + 1];
    DenseLayer<Scalar> layer;
    layer.weight.resize(out, in);
    // He-uniform keeps the activation variance constant through ReLU layers.
    const double limit = std::sqrt(6.0 / in);
    for (Eigen::Index i = 0; i < layer.weight.size(); ++i) {
      layer.weight.data()[i] = static_cast<Scalar>(UniformSymmetric(gen, limit));
    }
    layer.bias = Vector<Scalar>::Zero(out);
    params_.push_back(layer);
    grads_.push_back({Matrix<Scalar>::Zero(out, in), Vector<Scalar>::Zero(out)});
  }
  inputs_.resize(params_.size());
  pre_relu_.resize(params_.size());
}

template <typename Scalar>
const Matrix<Scalar>& Mlp<Scalar>::Forward(const Eigen::Ref<const Matrix<Scalar>>& x) {
  inputs_[0] = x;
  for (int l = 0; l < num_layers(); ++l) {
    pre_relu_[l].noalias() = params_[l].weight * inputs_[l];
    pre_relu_[l].colwise() += params_[l].bias;
    if (l + 1 < num_layers()) {
      inputs_[l + 1] = pre_relu_[l].cwiseMax(Scalar{0});
    }
  }
  return pre_relu_.back();
}

template <typename Scalar>
double Mlp<Scalar>::Backward(absl::Span<const uint8_t> labels, Scalar grad_scale,
                             const std::function<void(int layer)>& on_layer_done) {
  const Matrix<Scalar>& logits = pre_relu_.back();
  // d(loss)/d(logits) = softmax - one_hot, computed with the max subtracted for stability.
  Matrix<Scalar> delta(logits.rows(), logits.cols());
  double loss = 0.0;
  for (Eigen::Index j = 0; j < logits.cols(); ++j) {
    const Scalar max_logit = logits.col(j).maxCoeff();
    delta.col(j) = (logits.col(j).array() - max_logit).exp().matrix();
    const Scalar sum = delta.col(j).sum();
    loss += std::log(static_cast<double>(sum)) - (logits(labels[j], j) - max_logit);
    delta.col(j) /= sum;
    delta(labels[j], j) -= Scalar{1};
  }
  delta *= grad_scale;

  for (int l = num_layers() - 1; l >= 0; --l) {
    grads_[l].weight.noalias() = delta * inputs_[l].transpose();
    grads_[l].bias = delta.rowwise().sum();
    on_layer_done(l);
    if (l == 0) {
      break;
    }
    // Through the weights, then through the ReLU of the layer below.
    Matrix<Scalar> below = params_[l].weight.transpose() * delta;
    delta =
        below.cwiseProduct((pre_relu_[l - 1].array() > Scalar{0}).template cast<Scalar>().matrix());
  }
  return loss;
}

template <typename Scalar>
std::vector<int> Mlp<Scalar>::Predict(const Eigen::Ref<const Matrix<Scalar>>& x) {
  const Matrix<Scalar>& logits = Forward(x);
  std::vector<int> classes(logits.cols());
  for (Eigen::Index j = 0; j < logits.cols(); ++j) {
    Eigen::Index best;
    logits.col(j).maxCoeff(&best);
    classes[j] = static_cast<int>(best);
  }
  return classes;
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace examples
}  // namespace overlap
