// The plan controller: the life of the plan the runtime executes, from learning a step to dropping
// the plan, in one place (as DDP's Reducer keeps its buckets).
//
// It learns the step from negotiation's agreed operations (runtime/plan/cycle_detector.h) and, at an
// agreed round, freezes it into launch units (runtime/plan/launch_units.h: the observed plan). With a
// scheduler planner (OVERLAP_PLANNER) it hands the profiled steps to the plan scheduler
// (runtime/plan/plan_scheduler.h: votes, rank 0's plan broadcast, auto's trials, re-planning on
// drift) and adopts the plan every rank agreed on. It drops the plan in force when a rank is
// blocked on it (its program went on without a tensor the plan waits for, or waited past its
// patience: runtime/planes/planned_mode.h), a tensor was submitted differently from it, the
// measured step drifted, auto measured the observed plan faster than its candidates, or a new plan
// replaces it. It saves the scheduled plan in force for a checkpoint and adopts one restored from
// a checkpoint (runtime/plan/plan_checkpoint.h). It publishes the per-tensor schedule of the plan
// in force and the clock the adapters read it by (PlanSchedule, PlanClock: overlap.h).
//
// The Runtime routes operations and runs negotiation. It asks the controller whether the plan runs
// an operation (Owns), what the plan adds to the next round (Vote), and hands it each round's
// result (Learn, then OnRound) and the markers of forward steps (OnStep). The planned executor
// (runtime/planes/planned_mode.h) runs the plan in force; the controller decides what it runs. Where
// operations move between negotiation and the plan, the Runtime passes negotiation's table of this
// rank's pending operations: a new plan takes the submissions it runs out of it, and a dropped
// plan's operations go back into it as fresh submissions (then TakeHandedBack() is true once, and
// the next round must send them whole). The controller never calls the Runtime.
//
// A freeze, an adoption and a drop by agreement happen at the same agreed round (or, for scheduled
// plans, between the same two steps) on every rank; the collectives they run (the OR of the wait
// marks, the CUDA plane's set-up, the scheduler's votes) rely on that.
//
// Threading: the coordinator thread, except where a method says "any thread".
#ifndef OVERLAP_RUNTIME_PLAN_PLAN_CONTROLLER_H_
#define OVERLAP_RUNTIME_PLAN_PLAN_CONTROLLER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/config.h"
#include "runtime/plan/cycle_detector.h"
#include "runtime/plan/executable_plan.h"
#include "runtime/negotiation/negotiator.h"
#include "runtime/overlap.h"
#include "runtime/api/pending_op.h"
#include "runtime/planes/plan_delays.h"
#include "runtime/plan/plan_scheduler.h"
#include "runtime/planes/planned_mode.h"
#include "runtime/plan/step_profiler.h"

namespace overlap {

// A plan restored from a checkpoint (runtime/plan/plan_checkpoint.h), checked and on its way to the
// coordinator.
struct RestoredPlan {
  ExecutablePlan plan;
  PlanDelays::State state;
  double step_ms = 0;
  double predicted_step_ms = 0;
};

class PlanController {
 public:
  // `negotiator`, `planned` and `profiler` must outlive the controller. `scheduler` is null for
  // OVERLAP_PLANNER=observed (a process set's runtime included): then only observed plans freeze.
  PlanController(const Config& config, int rank, Negotiator* negotiator, PlannedMode* planned,
                 StepProfiler* profiler, std::unique_ptr<PlanScheduler> scheduler);

  // A scheduler planner makes this runtime's plans (its submissions are profiled, and forward
  // markers go to it).
  bool schedules() const { return scheduler_ != nullptr; }
  // True when the plan in force runs `name`: its submissions go to the planned executor.
  bool Owns(const std::string& name) const { return planned_->Owns(name); }
  // A scheduler stage (a vote, the plan's broadcast) is in progress: submissions after the forward
  // marker that started it must wait.
  bool busy() const { return scheduler_ != nullptr && scheduler_->busy(); }
  // Rank 0 must not start a negotiation round now (PlanScheduler::holds_rounds).
  bool holds_rounds() const { return scheduler_ != nullptr && scheduler_->holds_rounds(); }

  // The plan's part of the next round (runtime/negotiation/negotiator.h). `wants_report`: a planned unit waits
  // on its peers (gather every rank's launch count); `shutting_down`: this rank announces its
  // shutdown in this round.
  PlanVote Vote(bool wants_report, bool shutting_down) const;

  // Feeds an agreed round's operations to the cycle detector, before they go to the data planes.
  // Returns the step learned when one closes. A Join agreed while a plan runs stays with the
  // planned executor until the plan has seen every rank join (its `op` is emptied here).
  std::optional<LearnedStep> Learn(RoundResult* round);
  // Then, at the same round on every rank: freezes the learned step, replaces the plan with it or
  // drops the plan, as the round allows. Collective (a freeze ORs the wait marks); an error there
  // is fatal to the runtime.
  absl::Status OnRound(const RoundResult& round, const std::optional<LearnedStep>& learned,
                       PendingTable* pending);
  // Drops the plan if a unit's check found a tensor submitted differently from it.
  void DropIfDiverged(PendingTable* pending);
  // Operations went back to `pending` since the last call: a round must send them whole.
  bool TakeHandedBack();
  // A test hook asked for a round (PlanScheduler::TakeRoundWish).
  bool TakeRoundWish() { return scheduler_ != nullptr && scheduler_->TakeRoundWish(); }

  // A forward marker (StartForward) reached the coordinator, in submission order (schedules()).
  void OnStep(int64_t step);
  // Scheduled plans: advances the scheduler's stage with this rank's state (`quiescent`: nothing
  // of this rank's is submitted and unfinished), adopts the plan every rank just agreed on, and
  // drops one whose step drifted. An error (a lost peer) is fatal to the runtime.
  absl::Status ProgressSchedule(bool quiescent, PendingTable* pending);

  // Checkpoints. The scheduled plan in force with its state between steps, encoded
  // (runtime/plan/plan_checkpoint.h); an empty string when none is in force; nullopt while its
  // buckets still run (ask again); FailedPrecondition, naming the rank, in the middle of a step.
  std::optional<absl::StatusOr<std::string>> Save() const;
  // Decodes and checks a saved plan. InvalidArgument for a damaged or unusable one;
  // FailedPrecondition when this runtime has no scheduler planner.
  absl::StatusOr<std::shared_ptr<RestoredPlan>> PrepareRestore(absl::string_view bytes) const;
  // Adopts a plan PrepareRestore returned, at the same place among the submissions on every rank,
  // and continues it from its saved state.
  void AdoptRestored(RestoredPlan restored, PendingTable* pending);

  // The per-tensor schedule of the plan in force (overlap.h, CurrentPlanSchedule); any thread.
  PlanSchedule schedule() const {
    absl::MutexLock lock(&schedule_mu_);
    return schedule_;
  }
  PlanClock clock() const {
    return PlanClock{schedule_generation_.load(std::memory_order_acquire),
                     steps_.load(std::memory_order_relaxed)};
  }
  // The program's step count, from its forward markers; any thread.
  void SetStep(int64_t step) { steps_.store(step, std::memory_order_relaxed); }
  int64_t steps() const { return steps_.load(std::memory_order_relaxed); }
  // Rank 0, while a scheduled plan is in force: the simulator's spans of one steady step of it
  // (PlanScheduler::predicted_step); otherwise null.
  std::shared_ptr<const std::vector<sched::SimEvent>> predicted_step() const {
    return scheduler_ != nullptr ? scheduler_->predicted_step() : nullptr;
  }
  // The plans frozen and dropped, the plan in force's size and the scheduler's report; any thread
  // but ReleaseScheduler's.
  void AddStats(RuntimeStats* stats) const;

  // Frees the scheduler and its communicators, before MPI_Finalize (Shutdown). The counters and
  // the published schedule stay readable.
  void ReleaseScheduler() { scheduler_.reset(); }

 private:
  // `relearn`: forget the steps seen so far (not when a new plan replaces the old one).
  void DropPlan(const char* why, PendingTable* pending, bool relearn = true);
  // `resume`: continue from a checkpoint's state instead of starting the plan afresh.
  void AdoptScheduled(ExecutablePlan plan, absl::Duration step_time, PendingTable* pending,
                      PlanDelays::State* resume = nullptr);
  // ReturnToNegotiation, noting that a round must send them.
  void HandBack(std::vector<PendingOp> ops, PendingTable* pending);

  const Config config_;
  const int rank_;
  Negotiator* const negotiator_;
  PlannedMode* const planned_;
  StepProfiler* const profiler_;
  CycleDetector detector_;
  std::unique_ptr<PlanScheduler> scheduler_;  // null for OVERLAP_PLANNER=observed
  bool scheduled_in_force_ = false;           // the frozen plan came from the scheduler
  int64_t last_marker_step_ = 0;              // the last forward marker taken in
  bool warned_no_markers_ = false;
  bool handed_back_ = false;
  // What CurrentPlanSchedule reports; written at adoption and drop.
  mutable absl::Mutex schedule_mu_;
  PlanSchedule schedule_ ABSL_GUARDED_BY(schedule_mu_);
  std::atomic<int64_t> schedule_generation_{0};  // schedule_.generation, read without the lock
  std::atomic<int64_t> steps_{0};
  // Written by the coordinator thread, read by AddStats.
  struct Counters {
    std::atomic<int64_t> frozen{0}, dropped{0}, tensors{0}, units{0};
  } counters_;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_PLAN_CONTROLLER_H_
