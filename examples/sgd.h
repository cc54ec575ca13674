// Stochastic gradient descent with classical momentum over an Mlp's parameters:
//   velocity = momentum * velocity + gradient;  parameter -= learning_rate * velocity.
// Plain SGD rather than Adam on purpose: its update is linear in the gradient, so the last-bit
// differences between a 1-rank and an N-rank gradient stay last-bit differences in the weights,
// which is what the equivalence test checks.
#ifndef OVERLAP_EXAMPLES_SGD_H_
#define OVERLAP_EXAMPLES_SGD_H_

#include <vector>

#include "examples/mlp.h"

namespace overlap {
namespace examples {

class MomentumSgd {
 public:
  MomentumSgd(const std::vector<DenseLayer>& params, float learning_rate, float momentum);

  void set_learning_rate(float learning_rate) { learning_rate_ = learning_rate; }

  // Applies one step of `grads` (same shapes as the params given to the constructor).
  void Step(const std::vector<DenseLayer>& grads, std::vector<DenseLayer>& params);

 private:
  float learning_rate_;
  float momentum_;
  std::vector<DenseLayer> velocity_;
};

}  // namespace examples
}  // namespace overlap

#endif  // OVERLAP_EXAMPLES_SGD_H_
