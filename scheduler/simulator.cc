#include "scheduler/simulator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "scheduler/lookahead.h"

namespace overlap::sched {
namespace {

// Static facts about each bucket, derived once from the plan and profile.
struct BucketFacts {
  double duration_ms = 0;
  std::vector<int> layers;  // layers whose gradients it carries
  int source = -1;          // allgather: index of its reduce-scatter
};

struct TraceEvent {
  std::string name;
  std::string lane;
  int iteration;
  double start_ms, end_ms;
};

bool Active(const Bucket& b, int iteration) {
  return iteration >= 0 && iteration % b.period == b.phase;
}

}  // namespace

absl::StatusOr<SimResult> Simulate(const Profile& profile, const Plan& plan, const CostModel& cost,
                                   const SimOptions& options) {
  absl::Status valid = ValidatePlan(plan, profile, cost);
  if (!valid.ok()) {
    return valid;
  }
  const int nb = static_cast<int>(plan.buckets.size());
  const int nl = static_cast<int>(profile.layers.size());
  std::vector<BucketFacts> facts(nb);
  // The buckets that must be in before layer i's forward (or before the global update).
  std::vector<std::vector<int>> layer_deps(nl);
  std::map<std::vector<std::pair<int, int64_t>>, int> reduce_scatter_of;
  std::vector<double> layer_bytes(nl, 0);
  for (const TensorInfo& t : profile.tensors) {
    layer_bytes[t.layer] += static_cast<double>(t.bytes);
  }
  int hyper = 1;
  double comm_ms = 0;
  for (int b = 0; b < nb; ++b) {
    const Bucket& bucket = plan.buckets[b];
    facts[b].duration_ms = cost.FormMs(bucket.channel, bucket.op,
                                       static_cast<double>(bucket.bytes) * bucket.ratio,
                                       bucket.two_stage);
    comm_ms += facts[b].duration_ms / bucket.period;
    std::vector<std::pair<int, int64_t>> key;
    for (const TensorSlice& s : bucket.slices) {
      facts[b].layers.push_back(profile.tensors[s.tensor].layer);
      key.emplace_back(s.tensor, s.offset);
    }
    std::sort(facts[b].layers.begin(), facts[b].layers.end());
    facts[b].layers.erase(std::unique(facts[b].layers.begin(), facts[b].layers.end()),
                          facts[b].layers.end());
    if (bucket.op == Collective::kReduceScatter) {
      reduce_scatter_of[key] = b;
    }
    if (bucket.op == Collective::kAllgather) {
      facts[b].source = reduce_scatter_of[key];
    }
    if (bucket.op != Collective::kReduceScatter) {
      for (int l : facts[b].layers) {
        layer_deps[l].push_back(b);
      }
    }
    hyper = std::lcm(hyper, bucket.period);
    if (hyper > 1024) {
      return absl::InvalidArgumentError("update periods' hyperperiod exceeds 1024");
    }
  }
  const LookAheadCost lookahead(profile, plan);
  // A window of 6 hyperperiods averages out max-plus cycles of length 1, 2, 3 and 6.
  const int window = 6 * hyper;
  constexpr int kStableChecks = 3;
  const int max_delay = plan.MaxDelay();
  int max_lag = 0;
  for (const Bucket& b : plan.buckets) {
    max_lag = std::max(max_lag, b.lag);
  }
  const int iterations_cap = std::max(options.max_iterations, 4 * window + 4 * max_delay + 16);
  // end[b][j], start[b][j], ready[b][j]: instance of bucket b carrying iteration j's gradients.
  std::vector<std::vector<double>> start(nb), end(nb), ready(nb);
  std::vector<double> forward_start;
  std::vector<double> backward_start;
  std::vector<std::vector<double>> layer_ready_of;  // [iteration][layer]
  std::vector<double> channel_free(cost.channels.size(), 0);
  std::vector<TraceEvent> events;
  const bool trace = options.record_trace || options.record_iteration;
  double t = 0;
  SimResult result;
  result.compute_ms = profile.compute_ms();
  result.comm_ms = comm_ms;
  double last_estimate = -1;
  int stable = 0;
  std::vector<double> iteration_end;        // compute stream time after iteration k's update
  std::vector<std::vector<double>> states;  // steady-state signature per iteration
  int k = 0;
  auto due_end = [&](int b, int k_forward) {
    // Gradients of iteration j are applied before forward j + 1 + delay.
    const int j = k_forward - 1 - plan.buckets[b].delay;
    return Active(plan.buckets[b], j) ? end[b][j] : 0.0;
  };
  for (; k < iterations_cap; ++k) {
    for (int b = 0; b < nb; ++b) {
      start[b].push_back(0);
      end[b].push_back(0);
      ready[b].push_back(0);
    }
    // Forward of iteration k.
    forward_start.push_back(t);
    for (int l = 0; l < nl; ++l) {
      if (plan.layerwise_update) {
        double wait = t;
        for (int b : layer_deps[l]) {
          wait = std::max(wait, due_end(b, k));
        }
        t = wait;
        const double u = k == 0 ? 0 : profile.update_ms * layer_bytes[l] / profile.total_bytes;
        if (trace && u > 0) {
          events.push_back({"update " + profile.layers[l].name, "compute", k, t, t + u});
        }
        t += u;
      }
      const double ahead = lookahead.empty() ? 0 : lookahead.Ms(l, k);
      if (trace && ahead > 0) {
        events.push_back({"look-ahead " + profile.layers[l].name, "compute", k, t, t + ahead});
      }
      t += ahead;
      const double f = profile.layers[l].forward_ms;
      if (trace && f > 0) {
        events.push_back({"fwd " + profile.layers[l].name, "compute", k, t, t + f});
      }
      t += f;
    }
    // Backward; layer_ready[l] is when layer l's gradients of iteration k exist.
    backward_start.push_back(t);
    layer_ready_of.emplace_back(nl);
    std::vector<double>& layer_ready = layer_ready_of.back();
    for (int l = nl - 1; l >= 0; --l) {
      const double d = profile.layers[l].backward_ms;
      if (trace && d > 0) {
        events.push_back({"bwd " + profile.layers[l].name, "compute", k, t, t + d});
      }
      t += d;
      layer_ready[l] = t;
    }
    // Cycle k of every channel: buckets in plan order, carrying iteration k - lag.
    for (int b = 0; b < nb; ++b) {
      const Bucket& bucket = plan.buckets[b];
      const int j = k - bucket.lag;
      if (!Active(bucket, j)) {
        continue;
      }
      double r = 0;
      for (int l : facts[b].layers) {
        r = std::max(r, layer_ready_of[j][l]);
      }
      if (facts[b].source >= 0) {
        r = std::max(r, end[facts[b].source][j]);
      }
      const double s = std::max(channel_free[bucket.channel], r);
      ready[b][j] = r;
      start[b][j] = s;
      end[b][j] = s + facts[b].duration_ms;
      channel_free[bucket.channel] = end[b][j];
      if (trace) {
        events.push_back(
            {absl::StrCat(CollectiveName(bucket.op), " #", b, " (", bucket.bytes, " B)"),
             cost.channels[bucket.channel].name, j, s, end[b][j]});
      }
    }
    // Global optimizer step (Horovod/MG-WFBP): after backward, once every due bucket is in.
    if (!plan.layerwise_update) {
      double wait = t;
      for (int b = 0; b < nb; ++b) {
        if (plan.buckets[b].op == Collective::kReduceScatter) {
          continue;
        }
        wait = std::max(wait, due_end(b, k + 1));
      }
      t = wait;
      if (trace) {
        events.push_back({"update", "compute", k, t, t + profile.update_ms});
      }
      t += profile.update_ms;
    }
    // Steady state: everything the future depends on (channel free times, the bucket instances
    // later iterations wait for, recent backward starts), taken relative to now, repeats with
    // the window's period. The dynamics are then periodic from here on, so the windowed mean is
    // exact. Comparing the iteration time alone is not enough: a channel backlog can grow for
    // many iterations before it stalls the compute stream.
    // Times before `floor` (the earliest moment a future event can compare against: the oldest
    // pending gradient's backward start, or now) are all equivalent, so they are clamped; this
    // keeps an idle channel or a long-finished bucket from looking like a changing state.
    const double floor =
        max_lag == 0 ? t : std::min(t, backward_start[std::max(0, k + 1 - max_lag)]);
    auto relative = [&](double time) { return std::max(time, floor) - t; };
    std::vector<double> state;
    for (double f : channel_free) {
      state.push_back(relative(f));
    }
    for (int j = std::max(0, k - max_delay); j <= k; ++j) {
      state.push_back(backward_start[j] - t);
      for (int b = 0; b < nb; ++b) {
        // Instances of lagged buckets for the latest iterations have not run yet.
        if (Active(plan.buckets[b], j) && j <= k - plan.buckets[b].lag) {
          state.push_back(relative(end[b][j]));
        }
      }
    }
    iteration_end.push_back(t);
    states.push_back(std::move(state));
    if (k >= window) {
      const std::vector<double>& now = states[k];
      const std::vector<double>& then = states[k - window];
      bool same = now.size() == then.size();
      const double tol = options.relative_tolerance * std::max(1.0, t);
      for (size_t i = 0; same && i < now.size(); ++i) {
        same = std::fabs(now[i] - then[i]) <= tol;
      }
      stable = same ? stable + 1 : 0;
      last_estimate = (iteration_end[k] - iteration_end[k - window]) / window;
      states[k - window].clear();  // no longer needed
      if (stable >= kStableChecks) {
        ++k;
        break;
      }
    }
  }
  for (double ms : lookahead.MeanMsByLayer()) result.lookahead_ms += ms;
  result.compute_ms += result.lookahead_ms;
  result.iterations = k;
  result.converged = stable >= kStableChecks;
  result.iteration_ms = last_estimate >= 0 ? last_estimate : t / std::max(1, k);
  result.exposed_comm_ms = std::max(0.0, result.iteration_ms - result.compute_ms);
  // Per-bucket timings of an iteration whose every instance has run.
  const int j = std::max(0, k - 2 - max_delay - hyper);
  result.buckets.resize(nb);
  for (int b = 0; b < nb; ++b) {
    int jj = j;
    while (jj > 0 && !Active(plan.buckets[b], jj)) {
      --jj;
    }
    if (!Active(plan.buckets[b], jj)) {
      continue;
    }
    const double origin = backward_start[jj];
    result.buckets[b] = {ready[b][jj] - origin, start[b][jj] - origin, end[b][jj] - origin};
  }
  if (options.record_iteration && k >= 2) {
    const size_t i = static_cast<size_t>(std::clamp(k - 2 - max_delay, 0, k - 2));
    const double from = forward_start[i], to = forward_start[i + 1];
    for (const TraceEvent& e : events) {
      if (e.start_ms >= from && e.start_ms < to) {
        result.iteration_events.push_back({e.name, e.lane, e.start_ms - from, e.end_ms - from});
      }
    }
  }
  if (options.record_trace) {
    nlohmann::json out = nlohmann::json::array();
    const int first = std::max(0, k - options.trace_iterations - max_delay - 1);
    const int last = first + options.trace_iterations;
    std::map<std::string, int> lanes{{"compute", 0}};
    for (const ChannelCost& c : cost.channels) {
      lanes.emplace(c.name, static_cast<int>(lanes.size()));
    }
    for (const auto& [lane, tid] : lanes) {
      out.push_back({{"name", "thread_name"},
                     {"ph", "M"},
                     {"pid", 0},
                     {"tid", tid},
                     {"args", {{"name", lane}}}});
    }
    for (const TraceEvent& e : events) {
      if (e.iteration < first || e.iteration >= last) {
        continue;
      }
      out.push_back({{"name", e.name},
                     {"ph", "X"},
                     {"pid", 0},
                     {"tid", lanes[e.lane]},
                     {"ts", e.start_ms * 1e3},
                     {"dur", (e.end_ms - e.start_ms) * 1e3},
                     {"args", {{"iteration", e.iteration}}}});
    }
    result.trace_json = nlohmann::json({{"traceEvents", out}, {"displayTimeUnit", "ms"}}).dump();
  }
  return result;
}

}  // namespace overlap::sched
