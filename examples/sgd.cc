#include "examples/sgd.h"

namespace overlap {
namespace examples {

MomentumSgd::MomentumSgd(const std::vector<DenseLayer>& params, float learning_rate,
                         float momentum)
    : learning_rate_(learning_rate), momentum_(momentum) {
  for (const DenseLayer& p : params) {
    velocity_.push_back({Eigen::MatrixXf::Zero(p.weight.rows(), p.weight.cols()),
                         Eigen::VectorXf::Zero(p.bias.size())});
  }
}

void MomentumSgd::Step(const std::vector<DenseLayer>& grads, std::vector<DenseLayer>& params) {
  for (size_t l = 0; l < params.size(); ++l) {
    velocity_[l].weight = momentum_ * velocity_[l].weight + grads[l].weight;
    velocity_[l].bias = momentum_ * velocity_[l].bias + grads[l].bias;
    params[l].weight -= learning_rate_ * velocity_[l].weight;
    params[l].bias -= learning_rate_ * velocity_[l].bias;
  }
}

}  // namespace examples
}  // namespace overlap
