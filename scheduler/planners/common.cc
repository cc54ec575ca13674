#include "scheduler/planners/common.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <tuple>

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

void MarkTwoStage(Plan* plan, const CostModel& cost, bool always) {
  for (Bucket& b : plan->buckets) {
    const ChannelCost& channel = cost.channels[static_cast<size_t>(b.channel)];
    b.two_stage = b.op == Collective::kAllreduce && b.compressor == "none" &&
                  channel.OffersTwoStage() &&
                  (always || channel.TwoStagePays(static_cast<double>(b.bytes)));
  }
}

double SimulatedMs(const Profile& profile, const Plan& plan, const CostModel& cost) {
  // Planners call this in their search loops: copy the plan to mark it only where a channel
  // offers the form at all.
  const bool forms = std::any_of(cost.channels.begin(), cost.channels.end(),
                                 [](const ChannelCost& c) { return c.OffersTwoStage(); });
  Plan marked;
  if (forms) {
    marked = plan;
    MarkTwoStage(&marked, cost, /*always=*/false);
  }
  absl::StatusOr<SimResult> r = Simulate(profile, forms ? marked : plan, cost);
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
  // Event-driven, O(n log n): deft seeds itself with this scheduler's plans on models of
  // thousands of partitions. Buckets are released in ready order into a heap keyed by
  // (priority, ready, index); the channel runs its queue in order, so queued transfers finish in
  // the order they were queued and the bytes in flight are a running sum.
  std::vector<size_t> by_ready(n);
  for (size_t i = 0; i < n; ++i) {
    by_ready[i] = i;
  }
  std::stable_sort(by_ready.begin(), by_ready.end(),
                   [&](size_t a, size_t b) { return ready[a] < ready[b]; });
  auto later = [&](size_t a, size_t b) {  // heap order: the smallest key on top
    return std::tie(priority[a], ready[a], a) > std::tie(priority[b], ready[b], b);
  };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> eligible(later);
  std::deque<std::pair<size_t, double>> queued;  // (index, end time), in end order
  std::vector<size_t> order;
  order.reserve(n);
  size_t released = 0;
  int64_t in_flight = 0;
  double now = 0, channel_free = 0;
  while (order.size() < n) {
    while (!queued.empty() && queued.front().second <= now) {
      in_flight -= buckets[queued.front().first].bytes;
      queued.pop_front();
    }
    while (released < n && ready[by_ready[released]] <= now) {
      eligible.push(by_ready[released++]);
    }
    if (!eligible.empty() && (in_flight < credit_bytes || queued.empty())) {
      const size_t best = eligible.top();
      eligible.pop();
      order.push_back(best);
      const double start = std::max(channel_free, now);
      channel_free = start + cost.Ms(0, buckets[best].op, static_cast<double>(buckets[best].bytes));
      queued.emplace_back(best, channel_free);
      in_flight += buckets[best].bytes;
      continue;
    }
    // Nothing to queue now: advance to the next finish or the next release.
    double next = std::numeric_limits<double>::infinity();
    if (!queued.empty()) {
      next = queued.front().second;
    }
    if (released < n) {
      next = std::min(next, ready[by_ready[released]]);
    }
    if (!std::isfinite(next)) {
      break;  // cannot happen: some bucket is untaken and unreleased
    }
    now = next;
  }
  return order;
}

}  // namespace overlap::sched::internal
