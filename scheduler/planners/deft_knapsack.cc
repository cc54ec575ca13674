// DeFT's multiple-knapsack problem (deft_knapsack.h states the model).
#include "scheduler/planners/deft_knapsack.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace overlap::sched::internal {
namespace {

constexpr double kRelTie = 1e-9;

// Items sorted once by release and by deadline (ties by index), so that evaluating a solution
// filters instead of sorting.
struct Orders {
  std::vector<int> by_release, by_deadline;
  explicit Orders(const KnapsackInstance& in) {
    const int n = static_cast<int>(in.items.size());
    by_release.resize(static_cast<size_t>(n));
    std::iota(by_release.begin(), by_release.end(), 0);
    by_deadline = by_release;
    std::stable_sort(by_release.begin(), by_release.end(), [&](int a, int b) {
      return in.items[static_cast<size_t>(a)].release_ms <
             in.items[static_cast<size_t>(b)].release_ms;
    });
    std::stable_sort(by_deadline.begin(), by_deadline.end(), [&](int a, int b) {
      return in.items[static_cast<size_t>(a)].deadline_ms <
             in.items[static_cast<size_t>(b)].deadline_ms;
    });
  }
};

struct Terms {
  double stall = 0;                  // worst lateness of a synchronous item, >= 0
  int stall_channel = 0;
  std::vector<double> load;          // per channel, per iteration
  double iteration_ms = 0;
};

// The objective's terms for the items with assigned[i] (all when `assigned` is empty). Adding an
// item never lowers a term: list schedules in a fixed order only get later, loads only grow.
Terms Evaluate(const KnapsackInstance& in, const Orders& orders,
               const std::vector<KnapsackChoice>& choices, const std::vector<bool>& assigned) {
  Terms t;
  t.load.assign(static_cast<size_t>(in.channels), 0);
  std::vector<double> free(static_cast<size_t>(in.channels), 0);
  auto take = [&](int i) { return assigned.empty() || assigned[static_cast<size_t>(i)]; };
  auto run = [&](int i) {
    const KnapsackItem& item = in.items[static_cast<size_t>(i)];
    const KnapsackChoice& c = choices[static_cast<size_t>(i)];
    double& f = free[static_cast<size_t>(c.channel)];
    f = std::max(f, item.release_ms) + item.weight_ms[static_cast<size_t>(c.channel)];
    if (f - item.deadline_ms > t.stall) {
      t.stall = f - item.deadline_ms;
      t.stall_channel = c.channel;
    }
  };
  for (int i : orders.by_release) {
    if (take(i) && choices[static_cast<size_t>(i)].window == 0) run(i);
  }
  for (int i : orders.by_deadline) {
    if (take(i) && choices[static_cast<size_t>(i)].window == 1) run(i);
  }
  for (size_t i = 0; i < in.items.size(); ++i) {
    if (!take(static_cast<int>(i))) continue;
    const KnapsackChoice& c = choices[i];
    t.load[static_cast<size_t>(c.channel)] +=
        in.items[i].weight_ms[static_cast<size_t>(c.channel)] / c.period;
  }
  t.iteration_ms = in.compute_ms + t.stall;
  for (double l : t.load) t.iteration_ms = std::max(t.iteration_ms, l);
  return t;
}

bool Better(double ms, double cost, const KnapsackSolution& best) {
  if (ms < best.iteration_ms * (1 - kRelTie)) return true;
  return ms <= best.iteration_ms * (1 + kRelTie) && cost < best.cost - 1e-12;
}

KnapsackSolution Worst() {
  KnapsackSolution s;
  s.iteration_ms = std::numeric_limits<double>::infinity();
  s.cost = std::numeric_limits<double>::infinity();
  return s;
}

// Every (channel, window, period) an item may take; `all_delays` lists windows 2 .. S + 1,
// otherwise only window 2 (delay 1).
std::vector<KnapsackChoice> Options(const KnapsackInstance& in, bool all_delays) {
  std::vector<KnapsackChoice> out;
  const int last_window = in.staleness == 0 ? 1 : (all_delays ? in.staleness + 1 : 2);
  for (int c = 0; c < in.channels; ++c) {
    for (int w = 0; w <= last_window; ++w) {
      for (int p : in.periods) out.push_back(KnapsackChoice{c, w, p});
    }
  }
  return out;
}

}  // namespace

bool Allowed(const KnapsackItem& item, const KnapsackChoice& choice) {
  return item.may_delay || (choice.window <= 1 && choice.period == 1);
}

double ItemCost(const KnapsackItem& item, const KnapsackChoice& choice) {
  return item.share * (choice.delay() + (choice.period - 1) / 2.0);
}

double KnapsackIterationMs(const KnapsackInstance& instance,
                           const std::vector<KnapsackChoice>& choices) {
  return Evaluate(instance, Orders(instance), choices, {}).iteration_ms;
}

KnapsackSolution SolveKnapsackBruteForce(const KnapsackInstance& in) {
  const Orders orders(in);
  const std::vector<KnapsackChoice> options = Options(in, /*all_delays=*/true);
  const size_t n = in.items.size();
  std::vector<size_t> digit(n, 0);
  std::vector<KnapsackChoice> choices(n);
  KnapsackSolution best = Worst();
  while (true) {
    double cost = 0;
    bool allowed = true;
    for (size_t i = 0; i < n; ++i) {
      choices[i] = options[digit[i]];
      cost += ItemCost(in.items[i], choices[i]);
      allowed = allowed && Allowed(in.items[i], choices[i]);
    }
    if (allowed && cost <= in.budget + 1e-12) {
      const double ms = Evaluate(in, orders, choices, {}).iteration_ms;
      if (Better(ms, cost, best)) best = KnapsackSolution{choices, ms, cost};
    }
    size_t k = 0;
    while (k < n && ++digit[k] == options.size()) digit[k++] = 0;
    if (k == n) break;
  }
  return best;
}

KnapsackSolution SolveKnapsackExact(const KnapsackInstance& in) {
  const Orders orders(in);
  const std::vector<KnapsackChoice> options = Options(in, /*all_delays=*/false);
  const size_t n = in.items.size();
  std::vector<KnapsackChoice> choices(n);
  std::vector<bool> assigned(n, false);
  KnapsackSolution best = Worst();
  // Depth-first over items in deadline order, so that tight items are decided first.
  auto dfs = [&](auto&& self, size_t depth, double cost) -> void {
    if (depth == n) {
      const double ms = Evaluate(in, orders, choices, {}).iteration_ms;
      if (Better(ms, cost, best)) best = KnapsackSolution{choices, ms, cost};
      return;
    }
    const size_t i = static_cast<size_t>(orders.by_deadline[depth]);
    assigned[i] = true;
    for (const KnapsackChoice& c : options) {
      const double next = cost + ItemCost(in.items[i], c);
      if (next > in.budget + 1e-12 || !Allowed(in.items[i], c)) continue;
      choices[i] = c;
      const double bound = Evaluate(in, orders, choices, assigned).iteration_ms;
      if (!Better(bound, next, best)) continue;  // no completion can win: terms only grow
      self(self, depth + 1, next);
    }
    assigned[i] = false;
  };
  dfs(dfs, 0, 0.0);
  return best;
}

void SolveKnapsackGreedy(const KnapsackInstance& in, int delay,
                         std::vector<KnapsackSolution>* trajectory) {
  const Orders orders(in);
  const size_t n = in.items.size();
  // Synchronous start: list-schedule in release order on the channel that finishes first.
  std::vector<KnapsackChoice> choices(n);
  std::vector<double> free(static_cast<size_t>(in.channels), 0);
  for (int i : orders.by_release) {
    const KnapsackItem& item = in.items[static_cast<size_t>(i)];
    int best_c = 0;
    double best_end = std::numeric_limits<double>::infinity();
    for (int c = 0; c < in.channels; ++c) {
      const double end = std::max(free[static_cast<size_t>(c)], item.release_ms) +
                         item.weight_ms[static_cast<size_t>(c)];
      if (end < best_end) {
        best_end = end;
        best_c = c;
      }
    }
    free[static_cast<size_t>(best_c)] = best_end;
    choices[static_cast<size_t>(i)] =
        KnapsackChoice{best_c, best_end <= in.backward_ms ? 0 : 1, 1};
  }
  // The alternative start, everything in deadline order, when it stalls less.
  std::vector<KnapsackChoice> edf = choices;
  for (KnapsackChoice& c : edf) c.window = 1;
  if (Evaluate(in, orders, edf, {}).iteration_ms < Evaluate(in, orders, choices, {}).iteration_ms) {
    choices = edf;
  }
  std::vector<size_t> level(n, 0);  // index into in.periods
  double cost = 0;
  Terms t = Evaluate(in, orders, choices, {});
  trajectory->push_back(KnapsackSolution{choices, t.iteration_ms, 0});
  const size_t max_moves = n * (in.periods.size() + 1);
  for (size_t move = 0; move < max_moves; ++move) {
    const auto busiest = std::max_element(t.load.begin(), t.load.end());
    const int channel = static_cast<int>(busiest - t.load.begin());
    size_t pick = n;
    if (*busiest > in.compute_ms + t.stall) {
      // Load binds: raise the period of the item on the busiest channel that frees the most
      // channel time per unit of convergence cost (small items first: the latency term).
      double best_ratio = 0;
      for (size_t i = 0; i < n; ++i) {
        if (choices[i].channel != channel || level[i] + 1 >= in.periods.size() ||
            !in.items[i].may_delay) {
          continue;
        }
        const double p = in.periods[level[i]], q = in.periods[level[i] + 1];
        const double w = in.items[i].weight_ms[static_cast<size_t>(channel)];
        const double ratio = w * (1 / p - 1 / q) / (in.items[i].share * (q - p) / 2 + 1e-300);
        if (ratio > best_ratio) {
          best_ratio = ratio;
          pick = i;
        }
      }
      if (pick == n) break;
      cost += in.items[pick].share * (in.periods[level[pick] + 1] - in.periods[level[pick]]) / 2;
      choices[pick].period = in.periods[++level[pick]];
    } else if (t.stall > 0 && delay > 0) {
      // The stall binds: delay the synchronous item with the earliest deadline on the channel
      // that stalls (front layers: ready last in backward, needed first in forward).
      for (int i : orders.by_deadline) {
        const KnapsackChoice& c = choices[static_cast<size_t>(i)];
        if (c.channel == t.stall_channel && c.window <= 1 &&
            in.items[static_cast<size_t>(i)].may_delay) {
          pick = static_cast<size_t>(i);
          break;
        }
      }
      if (pick == n) break;
      choices[pick].window = 1 + delay;
      cost += in.items[pick].share * delay;
    } else {
      break;  // nothing exposed, or nothing the options allow
    }
    t = Evaluate(in, orders, choices, {});
    trajectory->push_back(KnapsackSolution{choices, t.iteration_ms, cost});
  }
}

}  // namespace overlap::sched::internal
