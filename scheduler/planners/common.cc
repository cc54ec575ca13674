#include "scheduler/planners/common.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "scheduler/simulator.h"

namespace overlap::sched::internal {

std::vector<int> ReadyOrder(const Profile& profile) {
  std::vector<int> order(profile.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = static_cast<int>(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const TensorInfo& ta = profile.tensors[a];
    const TensorInfo& tb = profile.tensors[b];
    if (ta.ready_ms != tb.ready_ms) {
      return ta.ready_ms < tb.ready_ms;
    }
    if (ta.layer != tb.layer) {
      return ta.layer > tb.layer;
    }
    return a > b;
  });
  return order;
}

std::vector<Piece> CutTensor(const Profile& profile, int tensor, int64_t max_bytes) {
  const TensorInfo& t = profile.tensors[tensor];
  const int64_t elem = static_cast<int64_t>(DataTypeSize(t.dtype));
  const int64_t per_piece = std::max<int64_t>(1, max_bytes / elem);
  std::vector<Piece> pieces;
  for (int64_t off = 0; off < t.count(); off += per_piece) {
    const int64_t n = std::min(per_piece, t.count() - off);
    pieces.push_back({tensor, off, n, n * elem});
  }
  return pieces;
}

std::vector<Piece> WholeTensors(const Profile& profile, const std::vector<int>& order) {
  std::vector<Piece> pieces;
  for (int t : order) {
    pieces.push_back({t, 0, profile.tensors[t].count(), profile.tensors[t].bytes});
  }
  return pieces;
}

std::vector<std::vector<Piece>> FuseConsecutive(const std::vector<Piece>& pieces,
                                                int64_t max_bytes) {
  std::vector<std::vector<Piece>> groups;
  int64_t bytes = 0;
  for (const Piece& p : pieces) {
    if (groups.empty() || bytes + p.bytes > max_bytes) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(p);
    bytes += p.bytes;
  }
  return groups;
}

Bucket MakeBucket(const Profile& profile, const std::vector<Piece>& pieces, Collective op,
                  int channel, Window window) {
  Bucket b;
  b.op = op;
  b.channel = channel;
  b.window = window;
  for (const Piece& p : pieces) {
    b.slices.push_back({p.tensor, profile.tensors[p.tensor].name, p.offset, p.count});
    b.bytes += p.bytes;
  }
  return b;
}

double ReadyMs(const Profile& profile, const std::vector<Piece>& pieces) {
  double r = 0;
  for (const Piece& p : pieces) {
    r = std::max(r, profile.tensors[p.tensor].ready_ms);
  }
  return r;
}

double FirstUseMs(const Profile& profile, const std::vector<Piece>& pieces) {
  double f = std::numeric_limits<double>::infinity();
  for (const Piece& p : pieces) {
    f = std::min(f, profile.tensors[p.tensor].first_use_ms);
  }
  return f;
}

Plan NewPlan(const char* planner, const Profile& profile, int staleness) {
  Plan plan;
  plan.planner = planner;
  plan.model = profile.model;
  plan.staleness = staleness;
  return plan;
}

double SimulatedMs(const Profile& profile, const Plan& plan, const CostModel& cost) {
  absl::StatusOr<SimResult> r = Simulate(profile, plan, cost);
  if (!r.ok()) {
    return std::numeric_limits<double>::infinity();
  }
  return r->iteration_ms;
}

namespace {

double BucketReadyMs(const Profile& profile, const Bucket& b) {
  double r = 0;
  for (const TensorSlice& s : b.slices) {
    r = std::max(r, profile.tensors[s.tensor].ready_ms);
  }
  return r;
}

}  // namespace

std::vector<size_t> PriorityOrder(const Profile& profile, const CostModel& cost,
                                  const std::vector<Bucket>& buckets,
                                  const std::vector<double>& priority, int64_t credit_bytes) {
  const size_t n = buckets.size();
  std::vector<double> ready(n);
  for (size_t i = 0; i < n; ++i) {
    ready[i] = BucketReadyMs(profile, buckets[i]);
  }
  std::vector<bool> taken(n, false);
  std::vector<size_t> order;
  // Queue on the channel: (index, end time). Bytes in the queue = not yet finished.
  std::vector<std::pair<size_t, double>> queued;
  double now = 0, channel_free = 0;
  while (order.size() < n) {
    // Drop finished transfers.
    queued.erase(std::remove_if(queued.begin(), queued.end(),
                                [&](const auto& q) { return q.second <= now; }),
                 queued.end());
    int64_t in_flight = 0;
    for (const auto& q : queued) {
      in_flight += buckets[q.first].bytes;
    }
    size_t best = n;
    if (in_flight < credit_bytes || queued.empty()) {
      for (size_t i = 0; i < n; ++i) {
        if (taken[i] || ready[i] > now) {
          continue;
        }
        if (best == n || priority[i] < priority[best] ||
            (priority[i] == priority[best] && ready[i] < ready[best])) {
          best = i;
        }
      }
    }
    if (best < n) {
      taken[best] = true;
      order.push_back(best);
      const double start = std::max(channel_free, now);
      channel_free = start + cost.Ms(0, buckets[best].op, static_cast<double>(buckets[best].bytes));
      queued.emplace_back(best, channel_free);
      continue;
    }
    // Nothing to queue now: advance to the next finish or the next release.
    double next = std::numeric_limits<double>::infinity();
    for (const auto& q : queued) {
      next = std::min(next, q.second);
    }
    for (size_t i = 0; i < n; ++i) {
      if (!taken[i] && ready[i] > now) {
        next = std::min(next, ready[i]);
      }
    }
    if (!std::isfinite(next)) {
      break;  // cannot happen: some bucket is untaken and unreleased
    }
    now = next;
  }
  return order;
}

}  // namespace overlap::sched::internal
