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

template class MomentumSgd<float>;
template class MomentumSgd<double>;

}  // namespace examples
}  // namespace overlap
