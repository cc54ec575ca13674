// DeFT, our formulation (planner.h states the algorithm; deft_knapsack.h the knapsack model).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "scheduler/planner.h"
#include "scheduler/planners/common.h"
#include "scheduler/planners/deft_knapsack.h"
#include "scheduler/simulator.h"

namespace overlap::sched {
namespace {

using internal::KnapsackChoice;
using internal::KnapsackInstance;
using internal::KnapsackItem;
using internal::KnapsackSolution;
using internal::Piece;

// Delays above this add nothing the model or the simulator can use, only cost.
constexpr int kMaxDelay = 4;
// Instances this small are solved exactly.
constexpr size_t kExactItems = 6;
// Budgets are spent in these steps, so that a larger budget keeps every plan a smaller one had.
constexpr double kBudgetSteps[] = {0, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 16};

// The items of one candidate: groups of pieces, one bucket each.
using ItemSet = std::vector<std::vector<Piece>>;

// Cuts every group where TensorInfo::may_delay changes, so that no item mixes tensors a plan may
// delay with ones the step reads at once: a metric fused into a gradient bucket would otherwise
// either be delayed with it or hold the whole bucket to no delay.
ItemSet SplitByMayDelay(const Profile& profile, const ItemSet& set) {
  ItemSet out;
  for (const std::vector<Piece>& group : set) {
    for (size_t i = 0; i < group.size(); ++i) {
      const bool may_delay = profile.tensors[group[i].tensor].may_delay;
      if (i == 0 || may_delay != profile.tensors[group[i - 1].tensor].may_delay) out.emplace_back();
      out.back().push_back(group[i]);
    }
  }
  return out;
}

ItemSet FixedSizeItems(const Profile& profile, int64_t item_bytes) {
  std::vector<Piece> pieces;
  for (int t : internal::ReadyOrder(profile)) {
    for (const Piece& p : internal::CutTensor(profile, t, item_bytes)) pieces.push_back(p);
  }
  return SplitByMayDelay(profile, internal::FuseConsecutive(pieces, item_bytes));
}

// MG-WFBP's optimal merge of consecutive gradients, as items.
ItemSet MergedItems(const Profile& profile, const CostModel& cost) {
  ItemSet items;
  absl::StatusOr<Plan> merged = PlanMgwfbp(profile, cost, {});
  if (!merged.ok()) return items;
  for (const Bucket& b : merged->buckets) {
    std::vector<Piece> group;
    for (const TensorSlice& s : b.slices) {
      const int64_t elem = static_cast<int64_t>(DataTypeSize(profile.tensors[s.tensor].dtype));
      group.push_back(Piece{s.tensor, s.offset, s.count, s.count * elem});
    }
    items.push_back(std::move(group));
  }
  return SplitByMayDelay(profile, items);
}

KnapsackInstance MakeInstance(const Profile& profile, const CostModel& cost, const ItemSet& set) {
  KnapsackInstance in;
  in.backward_ms = profile.backward_ms;
  in.compute_ms = profile.compute_ms();
  in.channels = static_cast<int>(cost.channels.size());
  for (const std::vector<Piece>& group : set) {
    KnapsackItem item;
    int64_t bytes = 0;
    for (const Piece& p : group) {
      bytes += p.bytes;
      item.may_delay = item.may_delay && profile.tensors[p.tensor].may_delay;
    }
    item.release_ms = internal::ReadyMs(profile, group);
    item.deadline_ms = profile.backward_ms + internal::FirstUseMs(profile, group);
    item.share = static_cast<double>(bytes) / static_cast<double>(profile.total_bytes);
    for (int c = 0; c < in.channels; ++c) {
      item.weight_ms.push_back(cost.Ms(c, Collective::kAllreduce, static_cast<double>(bytes)));
    }
    in.items.push_back(std::move(item));
  }
  return in;
}

// Plan order per channel: the synchronous items (windows 0 and 1) in the order a dispatcher that
// never idles while an item is released sends them: window 0 first, by release, then window 1 by
// deadline (a fixed deadline order would hold the channel for an item not yet released). Then
// the delayed items by deadline (lag 0: they follow this step's synchronous traffic; putting them
// at the head of the next cycle instead, lag = delay, simulated the same on every bundled model).
std::vector<size_t> ChannelOrder(const KnapsackInstance& in,
                                 const std::vector<KnapsackChoice>& choices, int channel) {
  std::vector<size_t> sync, delayed;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].channel != channel) continue;
    (choices[i].window <= 1 ? sync : delayed).push_back(i);
  }
  auto deadline = [&](size_t a, size_t b) {
    return std::make_pair(in.items[a].deadline_ms, a) < std::make_pair(in.items[b].deadline_ms, b);
  };
  std::sort(delayed.begin(), delayed.end(), deadline);
  std::vector<size_t> order;
  std::vector<bool> sent(choices.size(), false);
  double now = 0;
  for (size_t k = 0; k < sync.size(); ++k) {
    size_t pick = choices.size();
    double next_release = std::numeric_limits<double>::infinity();
    for (size_t i : sync) {
      if (sent[i]) continue;
      const KnapsackItem& item = in.items[i];
      if (item.release_ms > now) {
        next_release = std::min(next_release, item.release_ms);
        continue;
      }
      auto key = [&](size_t j) {
        return choices[j].window == 0 ? std::make_tuple(0, in.items[j].release_ms, j)
                                       : std::make_tuple(1, in.items[j].deadline_ms, j);
      };
      if (pick == choices.size() || key(i) < key(pick)) pick = i;
    }
    if (pick == choices.size()) {
      now = next_release;
      --k;
      continue;
    }
    sent[pick] = true;
    order.push_back(pick);
    now += in.items[pick].weight_ms[static_cast<size_t>(channel)];
  }
  order.insert(order.end(), delayed.begin(), delayed.end());
  return order;
}

// Buckets that share a tensor, transitively, get one schedule: the largest delay and period among
// them and one phase. A program learns per tensor whether a step brought an update (the adapters
// skip the optimizer for a tensor without one); a tensor whose slices had different phases or
// delays would be updated in part, with zeros where its other slices were not due, and momentum
// or Adam would then move those elements too.
void ShareTensorSchedules(Plan* plan, const std::vector<double>& weight_ms) {
  std::vector<size_t> parent(plan->buckets.size());
  std::iota(parent.begin(), parent.end(), size_t{0});
  auto root = [&](size_t b) {
    while (parent[b] != b) b = parent[b] = parent[parent[b]];
    return b;
  };
  std::map<int, size_t> first_bucket_of;  // tensor -> a bucket holding one of its slices
  for (size_t b = 0; b < plan->buckets.size(); ++b) {
    for (const TensorSlice& s : plan->buckets[b].slices) {
      auto [it, inserted] = first_bucket_of.emplace(s.tensor, b);
      if (!inserted) parent[root(b)] = root(it->second);
    }
  }
  std::map<size_t, std::pair<int, int>> shared;  // root -> (delay, period)
  for (size_t b = 0; b < plan->buckets.size(); ++b) {
    auto& [delay, period] = shared.try_emplace(root(b), 0, 1).first->second;
    delay = std::max(delay, plan->buckets[b].delay);
    period = std::max(period, plan->buckets[b].period);
  }
  // Equal periods get staggered phases, each group taking the phase with the least traffic so far.
  std::map<std::pair<int, int>, std::vector<double>> phase_load;  // (channel, period) -> per phase
  std::map<size_t, int> phase_of;                                 // root -> phase
  for (size_t b = 0; b < plan->buckets.size(); ++b) {
    Bucket& bucket = plan->buckets[b];
    const auto [delay, period] = shared[root(b)];
    bucket.delay = delay;
    bucket.period = period;
    auto [it, inserted] = phase_of.emplace(root(b), 0);
    std::vector<double>& load = phase_load[{bucket.channel, period}];
    load.resize(static_cast<size_t>(period), 0);
    if (inserted) {
      it->second = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    }
    bucket.phase = it->second;
    load[static_cast<size_t>(bucket.phase)] += weight_ms[b];
  }
}

Plan BuildPlan(const Profile& profile, const ItemSet& set, const KnapsackInstance& in,
               const std::vector<KnapsackChoice>& choices, int staleness) {
  Plan plan = internal::NewPlan("deft", profile, staleness);
  plan.layerwise_update = true;
  std::vector<double> weight_ms;  // per bucket, on its channel
  for (int channel = 0; channel < in.channels; ++channel) {
    for (size_t i : ChannelOrder(in, choices, channel)) {
      const KnapsackChoice& c = choices[i];
      Bucket b = internal::MakeBucket(profile, set[i], Collective::kAllreduce, c.channel,
                                      c.window == 0 ? Window::kBackward : Window::kNextForward);
      b.delay = c.delay();
      b.period = c.period;
      weight_ms.push_back(in.items[i].weight_ms[static_cast<size_t>(c.channel)]);
      plan.buckets.push_back(std::move(b));
    }
  }
  ShareTensorSchedules(&plan, weight_ms);
  // The budget the plan uses once shared (a delay or period may have grown).
  for (const Bucket& b : plan.buckets) {
    plan.budget_used += static_cast<double>(b.bytes) / static_cast<double>(profile.total_bytes) *
                        (b.delay + (b.period - 1) / 2.0);
  }
  return plan;
}

using PlannerFn = absl::StatusOr<Plan> (*)(const Profile&, const CostModel&, const PlannerOptions&);

struct Candidate {
  const ItemSet* set;
  const KnapsackInstance* instance;
  std::vector<KnapsackChoice> choices;
};

}  // namespace

absl::StatusOr<Plan> PlanDeft(const Profile& profile, const CostModel& cost,
                              const PlannerOptions& options) {
  const int S = options.staleness;
  if (S < 0) return absl::InvalidArgumentError("deft: staleness must be >= 0");
  if (options.max_period < 1) return absl::InvalidArgumentError("deft: max_period must be >= 1");
  if (!(options.budget == -1 || options.budget >= 0) || !std::isfinite(options.budget)) {
    return absl::InvalidArgumentError(
        absl::StrCat("deft: budget must be >= 0 (or -1 for the default), got ", options.budget));
  }
  const double budget =
      options.budget < 0 ? std::max<double>(S, (options.max_period - 1) / 2.0) : options.budget;
  // Powers of two only, so that the cycle of phases stays short (lcm = the largest period).
  std::vector<int> periods = {1};
  while (periods.back() * 2 <= options.max_period) periods.push_back(periods.back() * 2);

  // Candidate item sets: fixed sizes (fine for reordering, coarse against per-collective
  // latency) and MG-WFBP's optimal merge.
  std::vector<ItemSet> sets;
  for (int64_t bytes : {int64_t{1} << 19, int64_t{2} << 20, int64_t{4} << 20, int64_t{16} << 20}) {
    // Fine items only where they stay few: the solver and the simulator are linear in them.
    if (bytes < profile.total_bytes && profile.total_bytes / bytes <= 256) {
      sets.push_back(FixedSizeItems(profile, bytes));
    }
  }
  sets.push_back(FixedSizeItems(profile, profile.total_bytes));
  sets.push_back(MergedItems(profile, cost));
  std::vector<KnapsackInstance> instances;
  for (const ItemSet& set : sets) instances.push_back(MakeInstance(profile, cost, set));

  // The candidates form a set that only grows with S, max_period and the budget: every smaller
  // staleness, every shorter list of periods and every budget step below the budget contributes
  // its own solutions. Simulating all of them and keeping the best makes the planner monotone.
  std::vector<Candidate> candidates;
  std::set<std::pair<size_t, std::vector<int>>> seen;
  auto add = [&](size_t s, const std::vector<KnapsackChoice>& choices) {
    std::vector<int> code;
    for (const KnapsackChoice& c : choices) {
      code.push_back((c.channel * 64 + c.window) * 64 + c.period);
    }
    if (seen.insert({s, code}).second) {
      candidates.push_back(Candidate{&sets[s], &instances[s], choices});
    }
  };
  for (size_t s = 0; s < sets.size(); ++s) {
    for (size_t np = 1; np <= periods.size(); ++np) {
      for (int delay = 0; delay <= std::min(S, kMaxDelay); ++delay) {
        KnapsackInstance in = instances[s];
        in.staleness = delay;
        in.periods.assign(periods.begin(), periods.begin() + static_cast<long>(np));
        in.budget = budget;
        if (in.items.size() <= kExactItems) {
          // Exact per budget step: the optimum within each step is a candidate.
          for (double step : kBudgetSteps) {
            if (step > budget + 1e-12) break;
            in.budget = step;
            const KnapsackSolution best = internal::SolveKnapsackExact(in);
            if (std::isfinite(best.iteration_ms)) add(s, best.choices);
          }
          continue;
        }
        std::vector<KnapsackSolution> trajectory;
        internal::SolveKnapsackGreedy(in, delay, &trajectory);
        if (!trajectory.empty()) add(s, trajectory.front().choices);
        for (double step : kBudgetSteps) {
          if (step > budget + 1e-12) break;
          const KnapsackSolution* best = nullptr;
          for (const KnapsackSolution& sol : trajectory) {
            if (sol.cost <= step + 1e-12 &&
                (best == nullptr || sol.iteration_ms < best->iteration_ms * (1 - 1e-9))) {
              best = &sol;
            }
          }
          if (best != nullptr) add(s, best->choices);
        }
      }
    }
  }

  Plan best_plan;
  double best_ms = std::numeric_limits<double>::infinity();
  for (const Candidate& c : candidates) {
    {
      Plan plan = BuildPlan(profile, *c.set, *c.instance, c.choices, S);
      if (plan.budget_used > budget + 1e-9) continue;  // sharing schedules overspent it
      const double ms = internal::SimulatedMs(profile, plan, cost);
      if (ms < best_ms * (1 - 1e-9) ||
          (ms <= best_ms * (1 + 1e-9) && plan.budget_used < best_plan.budget_used - 1e-12)) {
        best_ms = ms;
        best_plan = std::move(plan);
      }
    }
  }
  // The synchronous planners' plans are deft plans with no delay and period 1, so deft is never
  // worse than any of them. The knapsack's items cannot express all of them: DeAR's
  // reduce-scatter/all-gather split, nor ByteScheduler's priority order over unfused partitions,
  // which beat every item set here on some models of 0.7 to 1.2 GB (docs/scheduler.md). So every
  // one of the six is a seed, at every model size.
  const PlannerFn seeds[] = {PlanWfbp,          PlanFusion, PlanMgwfbp,
                             PlanByteScheduler, PlanUsByte, PlanDear};
  for (PlannerFn seed : seeds) {
    absl::StatusOr<Plan> plan = seed(profile, cost, options);
    if (!plan.ok()) continue;
    const double ms = internal::SimulatedMs(profile, *plan, cost);
    if (ms < best_ms * (1 - 1e-9)) {
      best_ms = ms;
      plan->planner = "deft";
      plan->staleness = S;
      best_plan = *std::move(plan);
    }
  }
  if (!std::isfinite(best_ms)) return absl::InternalError("deft: no candidate simulated");
  return best_plan;
}

}  // namespace overlap::sched
