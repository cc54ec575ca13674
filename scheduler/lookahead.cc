#include "scheduler/lookahead.h"

#include <algorithm>
#include <array>

namespace overlap::sched {
namespace {

int Mod(int a, int b) { return ((a % b) + b) % b; }

}  // namespace

int PendingPasses(int pass, int delay, int period, int phase) {
  // Pass c's update comes in the step of pass c + delay, after that pass's forward.
  const int newest_applied = pass - 1 - delay;
  if (newest_applied < 0) return 0;
  const int last = newest_applied - Mod(newest_applied - phase, period);
  return last >= 0 ? pass - 1 - last : 0;
}

int CarriedPasses(int pass, int period, int phase) {
  if (pass < 0 || Mod(pass - phase, period) != 0) return 0;
  return pass + 1 < period ? pass + 1 : period;
}

int LookAheadSteps(int pass, int delay, int period, int phase) {
  const int pending = PendingPasses(pass, delay, period, phase);
  const int before = PendingPasses(pass - 1, delay, period, phase);
  // Under a period, a pass that no update reached continues from the last pass's point.
  const bool continues = period > 1 && before > 0 && pending == before + 1;
  const int scratch = continues ? 1 : pending;
  // The update applied before this forward carries pass - 1 - delay's gradients.
  const int carried = CarriedPasses(pass - 1 - delay, period, phase);
  return scratch + (carried > 1 ? carried - 1 : 0);
}

LookAheadCost::LookAheadCost(const Profile& profile, const Plan& plan)
    : by_layer_(profile.layers.size()) {
  const double step_ms = profile.optimizer_ms > 0 ? profile.optimizer_ms : profile.update_ms;
  if (step_ms <= 0 || profile.total_bytes <= 0) return;
  constexpr int kUnset = -1, kMixed = -2;
  std::vector<std::array<int, 3>> schedule(profile.tensors.size(), {kUnset, 1, 0});
  for (const Bucket& b : plan.buckets) {
    if (b.op == Collective::kReduceScatter) continue;  // its allgather applies it
    for (const TensorSlice& s : b.slices) {
      if (s.tensor < 0 || s.tensor >= static_cast<int>(schedule.size())) continue;
      std::array<int, 3>& known = schedule[s.tensor];
      const std::array<int, 3> mine = {b.delay, b.period, b.phase};
      if (known[0] == kUnset) {
        known = mine;
      } else if (known != mine) {
        known[0] = kMixed;  // predicted by the adapters, not looked ahead
      }
    }
  }
  for (size_t t = 0; t < profile.tensors.size(); ++t) {
    const auto [delay, period, phase] = schedule[t];
    if (!profile.tensors[t].looks_ahead || delay < 0 || (delay == 0 && period == 1)) continue;
    const double share = static_cast<double>(profile.tensors[t].bytes) /
                         static_cast<double>(profile.total_bytes);
    by_layer_[profile.tensors[t].layer].push_back({step_ms * share, delay, period, phase});
    empty_ = false;
  }
}

double LookAheadCost::Ms(int layer, int pass) const {
  double ms = 0;
  for (const Tensor& t : by_layer_[layer]) {
    ms += t.step_ms * LookAheadSteps(pass, t.delay, t.period, t.phase);
  }
  return ms;
}

double TakeOutLookAhead(const Plan& plan, Profile* profile) {
  const LookAheadCost cost(*profile, plan);
  if (cost.empty()) return 0;
  const std::vector<double> mean = cost.MeanMsByLayer();
  double taken = 0;
  for (size_t l = 0; l < mean.size(); ++l) {
    const double cut = std::min(mean[l], profile->layers[l].forward_ms);
    profile->layers[l].forward_ms -= cut;
    taken += cut;
  }
  // Only forward times went down, to no less than 0: what Finalize checks still holds.
  (void)profile->Finalize();
  return taken;
}

std::vector<double> LookAheadCost::MeanMsByLayer() const {
  std::vector<double> mean(by_layer_.size(), 0);
  for (size_t l = 0; l < by_layer_.size(); ++l) {
    for (const Tensor& t : by_layer_[l]) {
      // Past its first update and the one after, the counts repeat every period.
      const int from = 2 * (t.delay + t.period) + 2;
      int steps = 0;
      for (int n = from; n < from + t.period; ++n) {
        steps += LookAheadSteps(n, t.delay, t.period, t.phase);
      }
      mean[l] += t.step_ms * steps / t.period;
    }
  }
  return mean;
}

}  // namespace overlap::sched
