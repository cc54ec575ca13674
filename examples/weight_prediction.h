// Weight prediction for delayed and periodic updates (docs/scheduler.md, "Accuracy").
//
// With delay d and period p (AllreduceOptions), the gradient a rank computes at step k reaches
// the parameters only at the optimizer step of step c + d, where c >= k is the tensor's next
// communicating step; by then the tensor has been updated a few more times, so the gradient was
// taken at parameters that are already out of date. Instead of correcting the stale gradient
// afterwards, this computes it where the parameters will be when it is applied: before forward,
// each tensor is moved ahead by (its updates still to come before this gradient's) x (its last
// update), the extrapolation SpecTrain and PipeMare use for pipeline staleness, here with the
// optimizer's own last step, so it serves SGD, Adam and AdamW alike. After backward the true
// parameters come back unchanged; only the point where the gradient is taken moves. Synchronous
// schedules (d = 0, p = 1) have nothing to come and are left exactly as they are.
//
// Per step:  Shift(step, params); forward; backward; Restore(params); optimizer step;
//            Record(params, apply).
// Memory: two copies of the parameters (the true ones while shifted, and the last updates).
#ifndef OVERLAP_EXAMPLES_WEIGHT_PREDICTION_H_
#define OVERLAP_EXAMPLES_WEIGHT_PREDICTION_H_

#include <cstdint>
#include <vector>

#include "examples/mlp.h"
#include "examples/sgd.h"

namespace overlap {
namespace examples {

// How many optimizer steps update tensor `tensor` (phase tensor % period) between the forward of
// step `step` and the optimizer step that applies that step's gradient (not counting that one).
int UpdatesBeforeApplied(int64_t step, int tensor, int delay, int period);

template <typename Scalar>
class WeightPrediction {
 public:
  explicit WeightPrediction(const std::vector<DenseLayer<Scalar>>& params);

  // Saves the parameters and moves each tensor to its predicted value, for the `step`-th
  // submission of gradients under delay `delay` and period `period` (0 and 1: no move).
  void Shift(int64_t step, int delay, int period, std::vector<DenseLayer<Scalar>>& params);
  // Puts back the parameters Shift saved.
  void Restore(std::vector<DenseLayer<Scalar>>& params) const;
  // After the optimizer step: remembers the step just taken by each tensor `apply` selects.
  void Record(const std::vector<DenseLayer<Scalar>>& params, const UpdateMask& apply);

 private:
  std::vector<DenseLayer<Scalar>> saved_;        // the parameters before this step's update
  std::vector<DenseLayer<Scalar>> last_update_;  // each tensor's last optimizer step
};

extern template class WeightPrediction<float>;
extern template class WeightPrediction<double>;

}  // namespace examples
}  // namespace overlap

#endif  // OVERLAP_EXAMPLES_WEIGHT_PREDICTION_H_
