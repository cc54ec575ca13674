// Learns a training step from the agreed sequence of allreduces, for planned execution.
//
// Negotiation hands every rank the same sequence of agreed operations, so a detector fed that
// sequence reaches the same decision at the same point on every rank without communicating.
// A step ends where an id comes back. After `steps_needed` steps, the ids present in every one of
// the last `steps_needed` steps form the learned step; ids that come only now and then (a loss
// reduced every tenth step, a layer used on some steps) stay negotiated. The order inside a step
// may vary (rounds agree ids in cache-id order, and how ids fall into rounds depends on timing),
// and the first step seen may start anywhere in the program's own step: a plan is a cycle, so
// only the set and, for the first pass after freezing, the ids already agreed since the step
// began (current()) matter.
#ifndef OVERLAP_RUNTIME_PLAN_CYCLE_DETECTOR_H_
#define OVERLAP_RUNTIME_PLAN_CYCLE_DETECTOR_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"

namespace overlap {

struct LearnedStep {
  std::vector<int32_t> ids;  // in the order of the last step
  // Per id, this rank's PendingOp::observed for it in the last step: ids with different counts
  // must not wait for each other in a plan, since the program saw an operation finish between
  // submitting them and may have needed it to go on.
  std::vector<uint64_t> observed;
  // Per id, the negotiation round that agreed it in the last step: ids agreed together were
  // ready together, a natural unit.
  std::vector<int64_t> rounds;
  // The agreed planned-launch count was the same at the start of the first of the repeated steps
  // and now: no planned collective ran meanwhile, so a plan in force is not in use.
  bool launches_unchanged = false;
  absl::Duration step_time;  // between the last two step starts, on this rank's clock
};

class CycleDetector {
 public:
  explicit CycleDetector(int steps_needed) : steps_needed_(steps_needed) {}

  // Feeds one agreed cached allreduce id. `observed` is this rank's PendingOp::observed for it
  // (nullopt on a joined rank, which submitted nothing: then that of the id before).
  // `agreed_launches` is the planned-launch count when every rank reported the same one in the
  // round that agreed `id`, nullopt otherwise. Returns the learned step each time a step closes
  // once `steps_needed` steps have been seen (nullopt while no id is common to all of them).
  std::optional<LearnedStep> Observe(int32_t id, std::optional<uint64_t> observed,
                                     std::optional<uint64_t> agreed_launches);

  // Marks the end of one round's ids.
  void EndRound() { ++round_; }

  // Ids agreed since the last step started (the step in progress).
  const std::vector<int32_t>& current() const { return current_; }

  // Forgets everything (cache ids were invalidated, or a plan was adopted or dropped).
  void Reset();

 private:
  const int steps_needed_;
  std::vector<int32_t> current_;
  std::vector<uint64_t> current_observed_;
  std::vector<int64_t> current_rounds_;
  int64_t round_ = 0;
  absl::flat_hash_set<int32_t> current_set_;
  // The last steps_needed_ closed steps, oldest first, with the launch count at their start.
  struct ClosedStep {
    absl::flat_hash_set<int32_t> ids;
    std::optional<uint64_t> start;
  };
  std::deque<ClosedStep> recent_;
  std::optional<uint64_t> current_start_;
  absl::Time current_started_at_ = absl::InfinitePast();
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_CYCLE_DETECTOR_H_
