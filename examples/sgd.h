// Stochastic gradient descent with classical momentum over an Mlp's parameters:
//   velocity = momentum * velocity + gradient;  parameter -= learning_rate * velocity.
// Plain SGD rather than Adam: its update is linear in the gradient, and it is all this model
// needs to pass 85% on Fashion-MNIST.
#ifndef OVERLAP_EXAMPLES_SGD_H_
#define OVERLAP_EXAMPLES_SGD_H_

#include <vector>

#include "examples/mlp.h"

namespace overlap {
namespace examples {

template <typename Scalar>
class MomentumSgd {
 public:
  MomentumSgd(const std::vector<DenseLayer<Scalar>>& params, Scalar learning_rate, Scalar momentum);

  void set_learning_rate(Scalar learning_rate) { learning_rate_ = learning_rate; }

  // Applies one step of `grads` (same shapes as the params given to the constructor).
  void Step(const std::vector<DenseLayer<Scalar>>& grads, std::vector<DenseLayer<Scalar>>& params);

 private:
  Scalar learning_rate_;
  Scalar momentum_;
  std::vector<DenseLayer<Scalar>> velocity_;
};

extern template class MomentumSgd<float>;
extern template class MomentumSgd<double>;

}  // namespace examples
}  // namespace overlap

#endif  // OVERLAP_EXAMPLES_SGD_H_
