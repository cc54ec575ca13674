#include "scheduler/cluster/iteration_model.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "scheduler/builtin.h"
#include "scheduler/simulator.h"

namespace overlap::sched::cluster {

namespace {

// Every collective `factor` times slower: latency and per-byte cost both scaled.
CostModel Slower(const CostModel& cost, double factor) {
  CostModel out = cost;
  for (ChannelCost& c : out.channels) {
    c.alpha_s *= factor;
    c.beta_s_per_byte *= factor;
    for (LinearTerm* term : {&c.reduce_scatter, &c.allgather, &c.two_stage}) {
      if (!term->set()) continue;
      term->alpha_s *= factor;
      term->beta_s_per_byte *= factor;
    }
    c.latency_s *= factor;
    c.DivideBandwidth(factor);
  }
  return out;
}

absl::Status Named(const absl::Status& status, const std::string& planner,
                   const std::string& model) {
  return absl::Status(status.code(), absl::StrCat("planner ", planner, " on model ", model, ": ",
                                                  status.message()));
}

}  // namespace

absl::StatusOr<IterationModel> FitIterationModel(const Profile& profile, const std::string& planner,
                                                 const CostModel& cost,
                                                 const PlannerOptions& options) {
  auto plan = MakePlan(planner, profile, cost, options);
  if (!plan.ok()) {
    return Named(plan.status(), planner, profile.model);
  }
  auto solo = Simulate(profile, *plan, cost);
  if (!solo.ok()) {
    return Named(solo.status(), planner, profile.model);
  }
  auto twice = Simulate(profile, *plan, Slower(cost, 2));
  if (!twice.ok()) {
    return Named(twice.status(), planner, profile.model);
  }
  IterationModel m;
  m.compute_ms = solo->compute_ms;
  m.iteration_ms = solo->iteration_ms;
  m.comm_ms = solo->comm_ms;
  double first_start = std::numeric_limits<double>::infinity();
  for (const BucketTiming& b : solo->buckets) {
    if (b.end_ms > b.start_ms) {  // skipped buckets (update periods) carry no times
      first_start = std::min(first_start, b.start_ms);
    }
  }
  if (!(first_start < std::numeric_limits<double>::infinity())) {
    first_start = profile.backward_ms;
  }
  // Bucket times count from the start of backward; the release counts from forward's start.
  m.release_ms = std::clamp(profile.forward_ms + first_start, 0.0, m.iteration_ms);
  // The fit; clamped so that alone the transfer never lengthens the iteration (it cannot: a
  // collective twice as slow adds at most comm_ms), and so that the next compute waits at least
  // for the transfer to start (the overlap is a suffix of the transfer).
  m.tail_ms = twice->iteration_ms - m.release_ms - 2 * m.comm_ms;
  m.tail_ms = std::min(m.tail_ms, m.iteration_ms - m.release_ms - m.comm_ms);
  m.tail_ms = std::max(m.tail_ms, -m.comm_ms);
  return m;
}

absl::StatusOr<IterationModel> IterationModelCache::Get(const std::string& model,
                                                        const std::string& planner, int workers,
                                                        bool spans_servers) {
  auto key = std::make_tuple(model, planner, workers, spans_servers);
  auto hit = models_.find(key);
  if (hit != models_.end()) {
    return hit->second;
  }
  auto profile = profiles_.find(model);
  if (profile == profiles_.end()) {
    auto loaded = LoadBuiltinProfile(model);
    if (!loaded.ok()) {
      return loaded.status();
    }
    profile = profiles_.emplace(model, std::move(*loaded)).first;
  }
  IterationModel m;
  if (workers <= 1) {
    m.compute_ms = profile->second.compute_ms();
    m.iteration_ms = m.compute_ms;
  } else {
    auto fitted = FitIterationModel(profile->second, planner, spec_.JobCost(workers, spans_servers),
                                    options_);
    if (!fitted.ok()) {
      return fitted.status();
    }
    m = *fitted;
  }
  models_.emplace(key, m);
  return m;
}

}  // namespace overlap::sched::cluster
