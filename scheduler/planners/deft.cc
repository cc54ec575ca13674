// DeFT, our formulation (DESIGN section 6; planner.h states the algorithm).
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "scheduler/planner.h"
#include "scheduler/planners/common.h"
#include "scheduler/simulator.h"

namespace overlap::sched {
namespace {

using internal::Piece;

struct Item {
  std::vector<Piece> pieces;
  int64_t bytes = 0;
  int channel = 0;
  double ready_ms = 0;
  double first_use_ms = 0;
};

// Items: tensors in ready order, large ones split and small consecutive ones fused to
// `item_bytes`; each on the channel where it would finish first in a ready-order list schedule.
std::vector<Item> MakeItems(const Profile& profile, const CostModel& cost, int64_t item_bytes) {
  std::vector<Piece> pieces;
  for (int t : internal::ReadyOrder(profile)) {
    for (const Piece& p : internal::CutTensor(profile, t, item_bytes)) {
      pieces.push_back(p);
    }
  }
  std::vector<Item> items;
  std::vector<double> free(cost.channels.size(), 0);
  for (auto& group : internal::FuseConsecutive(pieces, item_bytes)) {
    Item item;
    item.pieces = std::move(group);
    for (const Piece& p : item.pieces) {
      item.bytes += p.bytes;
    }
    item.ready_ms = internal::ReadyMs(profile, item.pieces);
    item.first_use_ms = internal::FirstUseMs(profile, item.pieces);
    double best_end = std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < free.size(); ++c) {
      const double end =
          std::max(free[c], item.ready_ms) +
          cost.Ms(static_cast<int>(c), Collective::kAllreduce, static_cast<double>(item.bytes));
      if (end < best_end) {
        best_end = end;
        item.channel = static_cast<int>(c);
      }
    }
    free[item.channel] = best_end;
    items.push_back(std::move(item));
  }
  return items;
}

// The deadline (first use) order of the items on each channel when sent by a priority scheduler
// that picks the earliest deadline among released items whenever the channel is idle.
std::vector<size_t> EdfOrder(const Profile& profile, const CostModel& cost,
                             const std::vector<Item>& items) {
  std::vector<size_t> order;
  for (size_t c = 0; c < cost.channels.size(); ++c) {
    std::vector<Bucket> buckets;
    std::vector<double> priority;
    std::vector<size_t> item_of;
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].channel != static_cast<int>(c)) {
        continue;
      }
      buckets.push_back(internal::MakeBucket(profile, items[i].pieces, Collective::kAllreduce, 0,
                                             Window::kBackward));
      priority.push_back(items[i].first_use_ms * 1e6 + static_cast<double>(i) * 1e-3);
      item_of.push_back(i);
    }
    const CostModel this_channel{{cost.channels[c]}};
    for (size_t k : internal::PriorityOrder(profile, this_channel, buckets, priority, 1)) {
      order.push_back(item_of[k]);
    }
  }
  return order;
}

struct Assignment {
  std::vector<int> delay;      // per item
  std::vector<int> period;     // per item
  bool delayed_first = false;  // delayed items at the start of the next cycle (lag = delay)
};

Plan BuildPlan(const Profile& profile, const std::vector<Item>& items,
               const std::vector<size_t>& order, const Assignment& a, int staleness) {
  Plan plan = internal::NewPlan("deft", profile, staleness);
  plan.layerwise_update = true;
  std::vector<Bucket> now, later;
  std::vector<int> phase_counter(64, 0);
  for (size_t i : order) {
    const Item& item = items[i];
    Bucket b = internal::MakeBucket(profile, item.pieces, Collective::kAllreduce, item.channel,
                                    a.delay[i] > 0 ? Window::kNextForward : Window::kBackward);
    b.delay = a.delay[i];
    b.period = a.period[i];
    b.phase = phase_counter[std::min(b.period, 63)]++ % b.period;  // stagger equal periods
    const double share = static_cast<double>(b.bytes) / static_cast<double>(profile.total_bytes);
    plan.budget_used += share * (b.delay + b.period - 1);
    if (b.delay > 0 && a.delayed_first) {
      b.lag = b.delay;
      later.push_back(std::move(b));
    } else {
      now.push_back(std::move(b));
    }
  }
  // delayed_first: the previous iterations' delayed buckets open the cycle (they are ready at
  // its start), then this iteration's buckets in deadline order.
  plan.buckets = std::move(later);
  for (Bucket& b : now) {
    plan.buckets.push_back(std::move(b));
  }
  return plan;
}

struct Candidate {
  Plan plan;
  double ms = std::numeric_limits<double>::infinity();
};

void Consider(const Profile& profile, const CostModel& cost, Plan plan, Candidate* best) {
  const double ms = internal::SimulatedMs(profile, plan, cost);
  if (ms < best->ms * (1 - 1e-9)) {
    best->ms = ms;
    best->plan = std::move(plan);
  }
}

}  // namespace

absl::StatusOr<Plan> PlanDeft(const Profile& profile, const CostModel& cost,
                              const PlannerOptions& options) {
  const int S = options.staleness;
  if (S < 0) {
    return absl::InvalidArgumentError("deft: staleness must be >= 0");
  }
  if (options.max_period < 1) {
    return absl::InvalidArgumentError("deft: max_period must be >= 1");
  }
  const double budget = options.budget < 0 ? S : options.budget;
  Candidate best;
  // Item sizes: small items let the channel reorder finely; at large worker counts the per-
  // collective latency dominates and a single item (all gradients, delayed) is best.
  for (int64_t item_bytes : {int64_t{2'000'000}, int64_t{8'000'000}, int64_t{32'000'000},
                             int64_t{128'000'000}, profile.total_bytes}) {
    const std::vector<Item> items = MakeItems(profile, cost, item_bytes);
    const size_t n = items.size();
    const std::vector<size_t> order = EdfOrder(profile, cost, items);
    // Delay candidates: earliest deadline first (front layers wait longest for their gradients).
    std::vector<size_t> by_deadline(n);
    for (size_t i = 0; i < n; ++i) {
      by_deadline[i] = i;
    }
    std::stable_sort(by_deadline.begin(), by_deadline.end(), [&](size_t x, size_t y) {
      return items[x].first_use_ms < items[y].first_use_ms;
    });
    // Delay values to try: none without staleness; otherwise 1 (least stale) and S (most slack).
    std::vector<int> delay_values = {0};
    if (S >= 1) {
      delay_values = S == 1 ? std::vector<int>{1} : std::vector<int>{1, S};
    }
    for (bool delayed_first : {false, true}) {
      if (S == 0 && delayed_first) {
        break;  // nothing is delayed, so the variants coincide
      }
      for (int dv : delay_values) {
        // Largest prefix of by_deadline that the budget allows at delay dv.
        size_t max_m = 0;
        double spent = 0;
        while (dv > 0 && max_m < n) {
          const double share = static_cast<double>(items[by_deadline[max_m]].bytes) /
                               static_cast<double>(profile.total_bytes);
          if (spent + share * dv > budget + 1e-12) {
            break;
          }
          spent += share * dv;
          ++max_m;
        }
        auto plan_for = [&](size_t m) {
          Assignment a{std::vector<int>(n, 0), std::vector<int>(n, 1), delayed_first};
          for (size_t k = 0; k < m; ++k) {
            a.delay[by_deadline[k]] = dv;
          }
          return BuildPlan(profile, items, order, a, S);
        };
        const double full_ms = internal::SimulatedMs(profile, plan_for(max_m), cost);
        // Smallest m within 0.1% of delaying all that the budget allows: less staleness, same
        // speed. The iteration time is close to monotone in m, so bisection suffices.
        size_t lo = 0, hi = max_m;
        while (lo < hi) {
          const size_t mid = (lo + hi) / 2;
          if (internal::SimulatedMs(profile, plan_for(mid), cost) <= full_ms * 1.001) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        Plan plan = plan_for(lo);
        // Update periods when communication alone exceeds the compute time on a channel.
        if (options.max_period > 1) {
          std::vector<int> delay(n, 0);
          for (size_t k = 0; k < lo; ++k) {
            delay[by_deadline[k]] = dv;
          }
          Assignment a{delay, std::vector<int>(n, 1), delayed_first};
          double spent_now = plan.budget_used;
          for (size_t c = 0; c < cost.channels.size(); ++c) {
            double comm = 0;
            for (size_t i = 0; i < n; ++i) {
              if (items[i].channel == static_cast<int>(c)) {
                comm += cost.Ms(static_cast<int>(c), Collective::kAllreduce,
                                static_cast<double>(items[i].bytes));
              }
            }
            // Latest deadlines first: their staleness matters least for the next forward.
            for (size_t k = n; k-- > 0 && comm > profile.compute_ms();) {
              const size_t i = by_deadline[k];
              if (items[i].channel != static_cast<int>(c)) {
                continue;
              }
              const double share =
                  static_cast<double>(items[i].bytes) / static_cast<double>(profile.total_bytes);
              const int p = options.max_period;
              if (spent_now + share * (p - 1) > budget + 1e-12) {
                continue;
              }
              spent_now += share * (p - 1);
              a.period[i] = p;
              comm -= cost.Ms(static_cast<int>(c), Collective::kAllreduce,
                              static_cast<double>(items[i].bytes)) *
                      (1 - 1.0 / p);
            }
          }
          Consider(profile, cost, BuildPlan(profile, items, order, a, S), &best);
        }
        Consider(profile, cost, std::move(plan), &best);
      }
    }
  }
  if (!std::isfinite(best.ms)) {
    return absl::InternalError("deft: no candidate simulated");
  }
  return best.plan;
}

}  // namespace overlap::sched
