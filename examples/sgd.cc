#include "examples/sgd.h"

namespace overlap {
namespace examples {

template <typename Scalar>
MomentumSgd<Scalar>::MomentumSgd(const std::vector<DenseLayer<Scalar>>& params,
                                 Scalar learning_rate, Scalar momentum)
    : learning_rate_(learning_rate), momentum_(momentum) {
  for (const DenseLayer<Scalar>& p : params) {
    velocity_.push_back({Matrix<Scalar>::Zero(p.weight.rows(), p.weight.cols()),
                         Vector<Scalar>::Zero(p.bias.size())});
  }
}

template <typename Scalar>
void MomentumSgd<Scalar>::Step(const std::vector<DenseLayer<Scalar>>& grads,
                               std::vector<DenseLayer<Scalar>>& params) {
  for (size_t l = 0; l < params.size(); ++l) {
    velocity_[l].weight = momentum_ * velocity_[l].weight + grads[l].weight;
    velocity_[l].bias = momentum_ * velocity_[l].bias + grads[l].bias;
    params[l].weight -= learning_rate_ * velocity_[l].weight;
    params[l].bias -= learning_rate_ * velocity_[l].bias;
  }
}

template <typename Scalar>
LocalMomentum<Scalar>::LocalMomentum(const std::vector<DenseLayer<Scalar>>& params, Scalar momentum,
                                     bool masking)
    : momentum_(momentum), masking_(masking) {
  for (const DenseLayer<Scalar>& p : params) {
    velocity_.push_back({Matrix<Scalar>::Zero(p.weight.rows(), p.weight.cols()),
                         Vector<Scalar>::Zero(p.bias.size())});
  }
}

template <typename Scalar>
void LocalMomentum<Scalar>::Accumulate(DenseLayer<Scalar>& grad, int layer) {
  DenseLayer<Scalar>& u = velocity_[static_cast<size_t>(layer)];
  u.weight = momentum_ * u.weight + grad.weight;
  u.bias = momentum_ * u.bias + grad.bias;
  grad.weight = u.weight;
  grad.bias = u.bias;
}

template <typename Scalar>
void LocalMomentum<Scalar>::Mask(const std::vector<DenseLayer<Scalar>>& reduced) {
  if (!masking_) {
    return;
  }
  for (size_t l = 0; l < velocity_.size(); ++l) {
    velocity_[l].weight =
        (reduced[l].weight.array() != Scalar{0}).select(Scalar{0}, velocity_[l].weight);
    velocity_[l].bias = (reduced[l].bias.array() != Scalar{0}).select(Scalar{0}, velocity_[l].bias);
  }
}

template class MomentumSgd<float>;
template class MomentumSgd<double>;
template class LocalMomentum<float>;
template class LocalMomentum<double>;

}  // namespace examples
}  // namespace overlap
