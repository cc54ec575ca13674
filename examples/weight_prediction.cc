#include "examples/weight_prediction.h"

namespace overlap {
namespace examples {

int UpdatesBeforeApplied(int64_t step, int tensor, int delay, int period) {
  const int64_t phase = tensor % period;
  // c: the first step >= `step` in which the tensor communicates; its result is applied by the
  // optimizer step of step c + delay. Steps j update the tensor when j - delay communicated.
  const int64_t communicates = step + ((phase - step) % period + period) % period;
  int updates = 0;
  for (int64_t j = step; j < communicates + delay; ++j) {
    updates += (j >= delay && (j - delay) % period == phase) ? 1 : 0;
  }
  return updates;
}

template <typename Scalar>
WeightPrediction<Scalar>::WeightPrediction(const std::vector<DenseLayer<Scalar>>& params)
    : saved_(params) {
  for (const DenseLayer<Scalar>& p : params) {
    last_update_.push_back({Matrix<Scalar>::Zero(p.weight.rows(), p.weight.cols()),
                            Vector<Scalar>::Zero(p.bias.size())});
  }
}

template <typename Scalar>
void WeightPrediction<Scalar>::Shift(int64_t step, int delay, int period,
                                     std::vector<DenseLayer<Scalar>>& params) {
  saved_ = params;
  for (size_t l = 0; l < params.size(); ++l) {
    const int tensor = 2 * static_cast<int>(l);
    const Scalar ahead_w = static_cast<Scalar>(UpdatesBeforeApplied(step, tensor, delay, period));
    const Scalar ahead_b =
        static_cast<Scalar>(UpdatesBeforeApplied(step, tensor + 1, delay, period));
    if (ahead_w != 0) params[l].weight += ahead_w * last_update_[l].weight;
    if (ahead_b != 0) params[l].bias += ahead_b * last_update_[l].bias;
  }
}

template <typename Scalar>
void WeightPrediction<Scalar>::Restore(std::vector<DenseLayer<Scalar>>& params) const {
  params = saved_;
}

template <typename Scalar>
void WeightPrediction<Scalar>::Record(const std::vector<DenseLayer<Scalar>>& params,
                                      const UpdateMask& apply) {
  for (size_t l = 0; l < params.size(); ++l) {
    if (apply.empty() || apply[2 * l]) last_update_[l].weight = params[l].weight - saved_[l].weight;
    if (apply.empty() || apply[2 * l + 1]) last_update_[l].bias = params[l].bias - saved_[l].bias;
  }
}

template class WeightPrediction<float>;
template class WeightPrediction<double>;

}  // namespace examples
}  // namespace overlap
