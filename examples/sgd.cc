#include "examples/sgd.h"

#include <cmath>

namespace overlap {
namespace examples {

template <typename Scalar>
MomentumSgd<Scalar>::MomentumSgd(const std::vector<DenseLayer<Scalar>>& params,
                                 Scalar learning_rate, Scalar momentum, int steps_per_update)
    : learning_rate_(learning_rate), momentum_(momentum), steps_per_update_(steps_per_update) {
  for (const DenseLayer<Scalar>& p : params) {
    velocity_.push_back({Matrix<Scalar>::Zero(p.weight.rows(), p.weight.cols()),
                         Vector<Scalar>::Zero(p.bias.size())});
  }
}

namespace {
bool Applies(const UpdateMask& apply, size_t tensor) { return apply.empty() || apply[tensor]; }
}  // namespace

template <typename Scalar>
void MomentumSgd<Scalar>::Step(const std::vector<DenseLayer<Scalar>>& grads,
                               std::vector<DenseLayer<Scalar>>& params, const UpdateMask& apply) {
  // p steps of v = m v + g / p, x -= lr v, in closed form: the parameter moves by
  // lr (carry v_old + spread g / p) and v becomes m^p v_old + (1 + m + .. + m^(p-1)) g / p.
  // With p = 1: carry = m, spread = 1, the textbook step.
  const int p = steps_per_update_;
  const double m = momentum_;
  double carry = 0, spread = 0, keep = 1, sum_powers = 0;  // sum_powers = 1 + m + .. + m^(i-1)
  for (int i = 1; i <= p; ++i) {
    sum_powers += keep;
    keep *= m;
    carry += keep;
    spread += sum_powers;
  }
  const Scalar c = static_cast<Scalar>(carry), s = static_cast<Scalar>(spread / p),
               k = static_cast<Scalar>(keep), a = static_cast<Scalar>(sum_powers / p);
  auto update = [&](auto& param, const auto& grad, auto& v) {
    if (p == 1) {
      v = momentum_ * v + grad;
      param -= learning_rate_ * v;
    } else {
      param -= learning_rate_ * (c * v + s * grad);
      v = k * v + a * grad;
    }
  };
  for (size_t l = 0; l < params.size(); ++l) {
    if (Applies(apply, 2 * l)) update(params[l].weight, grads[l].weight, velocity_[l].weight);
    if (Applies(apply, 2 * l + 1)) update(params[l].bias, grads[l].bias, velocity_[l].bias);
  }
}

template <typename Scalar>
Adam<Scalar>::Adam(const std::vector<DenseLayer<Scalar>>& params, Scalar learning_rate,
                   Scalar beta1, Scalar weight_decay, bool decay_without_update)
    : learning_rate_(learning_rate),
      beta1_(beta1),
      weight_decay_(weight_decay),
      decay_without_update_(decay_without_update),
      steps_(2 * params.size(), 0) {
  for (const DenseLayer<Scalar>& p : params) {
    const DenseLayer<Scalar> zero{Matrix<Scalar>::Zero(p.weight.rows(), p.weight.cols()),
                                  Vector<Scalar>::Zero(p.bias.size())};
    m_.push_back(zero);
    v_.push_back(zero);
  }
}

template <typename Scalar>
void Adam<Scalar>::Step(const std::vector<DenseLayer<Scalar>>& grads,
                        std::vector<DenseLayer<Scalar>>& params, const UpdateMask& apply) {
  const Scalar b1 = beta1_, b2 = Scalar(0.999), eps = Scalar(1e-8);
  const Scalar keep = 1 - learning_rate_ * weight_decay_;
  auto update = [&](auto& param, const auto& grad, auto& m, auto& v, int64_t& t) {
    if (weight_decay_ != 0) {
      param *= keep;
    }
    ++t;
    m = b1 * m + (1 - b1) * grad;
    v = b2 * v + (1 - b2) * grad.cwiseProduct(grad);
    const Scalar c1 = 1 - static_cast<Scalar>(std::pow(double{b1}, static_cast<double>(t)));
    const Scalar c2 = 1 - static_cast<Scalar>(std::pow(double{b2}, static_cast<double>(t)));
    param.array() -= learning_rate_ * (m.array() / c1) / ((v.array() / c2).sqrt() + eps);
  };
  for (size_t l = 0; l < params.size(); ++l) {
    if (Applies(apply, 2 * l)) {
      update(params[l].weight, grads[l].weight, m_[l].weight, v_[l].weight, steps_[2 * l]);
    } else if (decay_without_update_ && weight_decay_ != 0) {
      params[l].weight *= keep;
    }
    if (Applies(apply, 2 * l + 1)) {
      update(params[l].bias, grads[l].bias, m_[l].bias, v_[l].bias, steps_[2 * l + 1]);
    } else if (decay_without_update_ && weight_decay_ != 0) {
      params[l].bias *= keep;
    }
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
template class Adam<float>;
template class Adam<double>;
template class LocalMomentum<float>;
template class LocalMomentum<double>;

}  // namespace examples
}  // namespace overlap
