#include "scheduler/measured_profile.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace overlap::sched {

absl::StatusOr<Profile> ProfileFromMeasurements(const IterationMeasurement& m) {
  auto finite = [](double v) { return std::isfinite(v) && v >= 0; };
  if (!finite(m.forward_ms) || !finite(m.backward_ms) || !finite(m.update_ms) ||
      !finite(m.optimizer_ms)) {
    return absl::InvalidArgumentError(absl::StrCat("measured profile '", m.model,
                                                   "': forward, backward, update and optimizer "
                                                   "ms must be >= 0"));
  }
  // Sums of the same times taken in a different order may differ in the last bit.
  auto within = [](double v, double limit) { return v <= limit + 1e-9 * std::max(1.0, limit); };
  for (const TensorMeasurement& t : m.tensors) {
    const std::string where =
        absl::StrCat("measured profile '", m.model, "' tensor '", t.name, "'");
    if (!finite(t.ready_ms) || !within(t.ready_ms, m.backward_ms)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ready_ms ", t.ready_ms, " outside [0, backward_ms ", m.backward_ms, "]"));
    }
    if (!finite(t.first_use_ms) || !within(t.first_use_ms, m.forward_ms)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": first_use_ms ", t.first_use_ms, " outside [0, forward_ms ", m.forward_ms, "]"));
    }
  }
  std::vector<size_t> order(m.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return m.tensors[a].first_use_ms < m.tensors[b].first_use_ms;
  });
  // Group by first use: each group is a layer.
  std::vector<std::vector<size_t>> groups;
  for (size_t i : order) {
    if (groups.empty() ||
        m.tensors[groups.back().front()].first_use_ms != m.tensors[i].first_use_ms) {
      groups.emplace_back();
    }
    groups.back().push_back(i);
  }
  const size_t n = groups.size();
  // ready[l]: when layer l's backward ends; non-increasing in l (later layers finish earlier).
  std::vector<double> ready(n, 0);
  for (size_t l = n; l-- > 0;) {
    for (size_t i : groups[l]) {
      ready[l] = std::max(ready[l], std::min(m.tensors[i].ready_ms, m.backward_ms));
    }
    if (l + 1 < n) {
      ready[l] = std::max(ready[l], ready[l + 1]);
    }
  }
  Profile p;
  p.model = m.model;
  p.update_ms = m.update_ms;
  p.optimizer_ms = m.optimizer_ms;
  auto use_of = [&](size_t l) {
    return l < n ? std::min(m.tensors[groups[l].front()].first_use_ms, m.forward_ms) : m.forward_ms;
  };
  const double first_use0 = use_of(0);
  const double ready0 = n == 0 ? 0 : ready[0];
  // The leading layer holds the forward time before the first parameter is read and the
  // backward time after the last gradient is ready (input layers, loss of data parallelism).
  if (first_use0 > 0 || m.backward_ms > ready0) {
    p.AddLayer("(no parameters)", first_use0, m.backward_ms - ready0, {});
  }
  for (size_t l = 0; l < n; ++l) {
    const double use = use_of(l);
    const double next_use = use_of(l + 1);
    const double backward = ready[l] - (l + 1 < n ? ready[l + 1] : 0.0);
    std::vector<std::pair<std::string, int64_t>> tensors;
    for (size_t i : groups[l]) {
      tensors.emplace_back(m.tensors[i].name, m.tensors[i].bytes);
    }
    const size_t first = p.tensors.size();
    p.AddLayer(absl::StrCat("layer", l), next_use - use, backward, tensors);
    for (size_t k = 0; k < groups[l].size(); ++k) {
      p.tensors[first + k].dtype = m.tensors[groups[l][k]].dtype;
      p.tensors[first + k].may_delay = m.tensors[groups[l][k]].may_delay;
      p.tensors[first + k].looks_ahead = m.tensors[groups[l][k]].looks_ahead;
    }
  }
  absl::Status status = p.Finalize();
  if (!status.ok()) {
    return status;
  }
  return p;
}

}  // namespace overlap::sched
