// DeFT's multiple-knapsack problem: which compute window, channel, delay and update period each
// communication item gets. Internal to scheduler/; docs/scheduler.md states the formulation and
// where it departs from the paper.
//
// Knapsacks are (window, channel) pairs. Window 0 is the backward of step t; window 1 + d is the
// forward of step t + 1 + d, so an item placed there is applied with delay d (0 <= d <= S). Items
// are buckets with a weight per channel (their modelled communication time), a release (their
// gradient's ready time in the backward) and a deadline (their first use in the next forward).
// In steady state every forward is forward t + 1 of one step and forward t + 1 + d of earlier
// ones, so the forward knapsacks of one channel share the forward's capacity, and what no window
// holds lengthens the iteration. The objective is therefore the iteration time of the cyclic
// schedule each channel runs, in plan order:
//   - items of window 0 in release order, then items of window 1 in deadline order, each
//     starting when released and the channel is free; an item finishing after its deadline
//     stalls the next forward by the excess (the worst excess over all channels is the stall);
//   - delayed items (window >= 2) have at least a whole iteration of slack and only take
//     capacity: a channel's load per iteration, sum of weight / period, bounds the iteration;
//   iteration = max(compute + stall, max over channels of load).
// Capacities are soft: exceeding one lengthens the iteration, which is what is minimised. Items
// with a period p > 1 communicate in one step out of p; they count in full in the stall (their
// active step) and by weight / p in the load.
//
// Convergence cost of an item: share x (delay + (period - 1) / 2), the mean number of steps by
// which its gradient bytes reach the parameters late (a period-p bucket's gradient waits 0 to
// p - 1 steps, (p - 1) / 2 on average). A solution's cost, summed over items, is at most the
// budget.
#ifndef OVERLAP_SCHEDULER_PLANNERS_DEFT_KNAPSACK_H_
#define OVERLAP_SCHEDULER_PLANNERS_DEFT_KNAPSACK_H_

#include <vector>

namespace overlap::sched::internal {

struct KnapsackItem {
  double release_ms = 0;           // gradient ready, from the start of backward
  double deadline_ms = 0;          // first use in the next forward, from the start of backward
  double share = 0;                // fraction of the gradient bytes
  std::vector<double> weight_ms;   // communication time on each channel
  // False for an item holding a tensor the step reads at once (TensorInfo::may_delay): it takes
  // window 0 or 1 and period 1 only.
  bool may_delay = true;
};

struct KnapsackInstance {
  double backward_ms = 0;
  double compute_ms = 0;  // forward + backward + update: the iteration with nothing exposed
  int channels = 1;
  int staleness = 0;      // S: windows 0 .. S + 1
  std::vector<int> periods = {1};  // the periods an item may get, ascending, starting at 1
  double budget = 0;
  std::vector<KnapsackItem> items;
};

struct KnapsackChoice {
  int channel = 0;
  int window = 0;  // 0: backward of t; 1 + d: forward of t + 1 + d
  int period = 1;
  int delay() const { return window > 1 ? window - 1 : 0; }
};

struct KnapsackSolution {
  std::vector<KnapsackChoice> choices;  // per item
  double iteration_ms = 0;
  double cost = 0;  // convergence budget used
};

// Whether `item` may take `choice` (a delay or a period needs item.may_delay).
bool Allowed(const KnapsackItem& item, const KnapsackChoice& choice);

// The convergence cost of one item with `choice`.
double ItemCost(const KnapsackItem& item, const KnapsackChoice& choice);

// The modelled iteration time of `choices` (one per item; the objective above).
double KnapsackIterationMs(const KnapsackInstance& instance,
                           const std::vector<KnapsackChoice>& choices);

// Optimal solutions: the smallest iteration time within the budget, ties broken by the smallest
// cost (within 1e-9 relative). Both enumerate; the exact solver prunes (branch and bound, using
// that a partial assignment's modelled time is a lower bound for all its completions, and that a
// delay above 1 never shortens the modelled time) and so handles a few more items.
KnapsackSolution SolveKnapsackExact(const KnapsackInstance& instance);
KnapsackSolution SolveKnapsackBruteForce(const KnapsackInstance& instance);

// Greedy for large instances: starts from a synchronous assignment (channel by earliest finish
// in release order, window 0 where the item ends before backward does, otherwise window 1, in
// deadline order) and repeatedly spends budget on whichever term binds the iteration time: the
// load of the busiest channel (raising the next period of the items moving most time per unit of
// cost) or the stall (delaying by `delay` the items with the earliest deadlines). Every state
// it passes through is a solution; `trajectory` receives them in order of increasing cost, so a
// caller can pick, for any budget, the last one within it.
void SolveKnapsackGreedy(const KnapsackInstance& instance, int delay,
                         std::vector<KnapsackSolution>* trajectory);

}  // namespace overlap::sched::internal

#endif  // OVERLAP_SCHEDULER_PLANNERS_DEFT_KNAPSACK_H_
