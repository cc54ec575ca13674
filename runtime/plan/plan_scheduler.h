// Plan scheduler: turns measured steps into a scheduled plan that every rank adopts at the same
// step (DESIGN section 3, step 4).
//
// Driven by the forward markers of the step API, which every rank reaches in the same order:
//  1. At the attempt step (first: OVERLAP_PLAN_AFTER_STEPS + OVERLAP_PROFILE_STEPS + 2), once this
//     rank has nothing in flight (or after a short drain limit), every rank votes with one small
//     allreduce whether it is quiescent and has a steady profile. If all agree, the link cost is
//     fitted (sched::FitLinear) to the allreduces the runtime ran, each at its fastest rank's time,
//     with a short probe of a few sizes only when those cover fewer than three sizes, or of two
//     small sizes when none was below 64 KiB (they pin the per-collective latency), and always
//     a back-to-back 4 MiB one (the sustained bandwidth floors the slope), then the smallest
//     again (the quieter of its two times floors the latency); no probe is larger
//     than the step's gradient bytes (or 1 MiB), the largest bucket a plan makes; rank 0's
//     fit is broadcast. Rank 0 starts the planner (sched::MakePlan, the code the simulator runs)
//     and the simulator's prediction on a thread of its own; training goes on meanwhile.
//  2. Two steps later (the adopt step), after the same quiescence vote, rank 0 broadcasts
//     Plan::Serialize() with the prediction; every rank decodes it and checks
//     it against its own agreed tensors (ScheduledPlan), and every rank's verdict is gathered, so a
//     plan is adopted by all ranks or by none, and every rank logs each refusing rank's reason.
// The coordinator holds later submissions back while a step's vote or exchange runs: the
// switch happens with nothing in flight on any rank. A vote that finds a rank busy is retried at
// the next step; one that finds a profile not yet steady, OVERLAP_PROFILE_STEPS + 1 steps later.
// A plan that rank 0 could not make, or that some rank refused, is not retried; a dropped plan
// is measured and made anew.
//  2b. auto's trials (OVERLAP_AUTO_TRIALS = N > 1): rank 0 also makes auto's runners-up, the
//     synchronous plans simulated within 15% of the best and distinct in their buckets (up to N
//     in all, and only when the best is synchronous too: replacing a delayed plan would discard
//     its held results). Each runs TrialSteps() steps; at its end, after a quiescence vote that
//     also asks every rank for a measured median wall step, the slowest rank's counts, and the
//     next candidate is adopted as above. After the last, the fastest measured one is adopted
//     again unless it is the one in force. A trial whose steps are still unmeasured on some rank
//     2 x TrialSteps() steps later ends the trials, keeping the plan in force. The simulator
//     ranks; the measurement decides, since the model misses costs (copies, CPU contention)
//     that differ between plans by a few percent.
//     The plan that ran before (the observed plan, or negotiation) is one of the plans measured:
//     at the attempt step every rank agrees on the slowest rank's median wall step under it,
//     and when the best candidate is synchronous the trials run even for one candidate. If
//     none of them beat it, every rank drops the plan at the trials' end (TakeDropWish), learns
//     the observed plan again and keeps it for the rest of the run ("auto:observed"); no
//     planning follows. So auto never keeps a plan measured slower than the one it started
//     from (within the noise of two medians).
//  3. Drift (OVERLAP_REPLAN_DRIFT > 0): every max(10, 2 x OVERLAP_PROFILE_STEPS + 2) steps after
//     adoption (times the back-off), every rank votes (without draining) whether its measured
//     step (the step profiler's median compute windows) drifted from the first such measurement
//     under the plan, as runtime/plan/drift_policy.h defines it: by more than that fraction, more
//     than twice the steps' spread and OVERLAP_REPLAN_MIN_MS. If any rank's did, twice in a row
//     (the second check comes OVERLAP_PROFILE_STEPS + 1 steps after the first, on fresh steps),
//     then rank 0 first plans again from the step measured under the plan in force, with the
//     link fit kept (nothing is dropped or probed meanwhile), and two steps later (the re-plan
//     check, a vote that drains nothing) every rank learns whether that made the plan in force
//     again (under auto: among the candidates its trials would measure), or a plan the
//     simulator, on the drifted profile, gives a step less than OVERLAP_REPLAN_MIN_GAIN (5%)
//     shorter than the plan in force's: then the plan in force stays, the checks take the
//     drifted step as their new baseline and back off (twice as far apart, up to 64 times).
//     Otherwise (or where no fit is kept yet), at the next step, after the same quiescence vote
//     as an adoption, every rank drops the plan (TakeDropWish), and it is measured and made
//     anew; when that new plan is the dropped one again, the checks back off too. A drop costs
//     the steps until the next adoption (under auto, its trials too) and, under a delayed plan,
//     redoes its held steps synchronously: on a 2-core machine whose compute windows wander
//     with its load, most drifts made the same plan again, or one whose buckets had moved a
//     little.
//
// Threading: the coordinator thread, except that the planner runs on a thread of its own.
#ifndef OVERLAP_RUNTIME_PLAN_PLAN_SCHEDULER_H_
#define OVERLAP_RUNTIME_PLAN_PLAN_SCHEDULER_H_

#include <mpi.h>

#include <array>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/executor.h"
#include "runtime/config.h"
#include "runtime/plan/drift_policy.h"
#include "runtime/plan/executable_plan.h"
#include "runtime/plan/step_profiler.h"
#include "scheduler/cost_model.h"
#include "scheduler/plan.h"
#include "scheduler/simulator.h"

namespace overlap {

// What the scheduler reports (RuntimeStats).
struct ScheduleInfo {
  std::string planner;  // of the adopted plan
  int64_t buckets = 0;
  int64_t compressed_buckets = 0;  // RuntimeStats::plan_compressed_buckets
  int64_t two_stage_buckets = 0;   // RuntimeStats::plan_two_stage_buckets
  double predicted_step_ms = 0;
  int64_t adopted_step = -1;
  int64_t adopted = 0;
  int64_t refused = 0;
  bool layerwise_update = false;
  double mean_staleness = 0;  // RuntimeStats::plan_mean_staleness
  int64_t update_cycle = 1;   // RuntimeStats::plan_update_cycle
  double alpha_us = 0, beta_us_per_mb = 0;
  // The two-stage allreduce's fitted line; 0 where the plan's executor offers no two-stage form.
  double two_stage_alpha_us = 0, two_stage_beta_us_per_mb = 0;
  // Plannings that probed the links and fitted their cost, and those that kept the last fit
  // because the collectives measured since still agreed with it (RuntimeStats::link_cost_fits,
  // link_cost_reuses).
  int64_t cost_fits = 0, cost_reuses = 0;
  int64_t drifts_kept = 0;  // RuntimeStats::plan_drifts_kept
  // auto's trials: each tried plan's measured step ("auto:dear 545.7 ms, ..."), and whether
  // more are to come (the plan in force may still change).
  std::string trials;
  bool trials_pending = false;
};

class PlanScheduler {
 public:
  // The agreed operation behind each of `names` that this rank knows.
  using TableFn = std::function<absl::flat_hash_map<std::string, PlanEntry>(
      const std::vector<std::string>& names)>;

  // This rank's recent allreduces (bytes, seconds from start to completion), oldest first, in
  // the same sequence on every rank.
  using TimingsFn = std::function<std::vector<sched::CostSample>()>;

  // `comm` (owned) carries the votes and the broadcast; `probe` the cost probe; `timings` the
  // collectives the runtime ran. `check_peers` ends a wait early with a lost peer's error.
  PlanScheduler(const Config& config, int rank, int size, MPI_Comm comm,
                std::unique_ptr<Executor> probe, StepProfiler* profiler, TimingsFn timings,
                std::function<absl::Status()> check_peers);
  ~PlanScheduler();

  // A forward marker reached the coordinator, in submission order.
  void OnStep(int64_t step);
  // A vote or exchange is in progress: submissions after the marker must wait.
  bool busy() const { return stage_ != Stage::kIdle; }
  // This rank voted quiescent and the vote is still out: rank 0 must start no negotiation round
  // until it is in. If every rank voted quiescent, each runs the stage's blocking collectives (the
  // probe, the plan's broadcast, a trial's measurement) the moment it sees the vote, and one that
  // sees it first would wait there for a peer held in a round, which waits for it in turn. No
  // rank needs a round to reach the vote meanwhile: what a quiescent rank submitted before its
  // marker is done, so its peers' matching submissions were agreed already.
  bool holds_rounds() const { return stage_ == Stage::kVote && voted_quiescent_; }

  // Advances the stage. `quiescent`: nothing of this rank's is submitted and unfinished.
  // Returns a plan when every rank has just agreed to adopt it (all ranks at the same call), or
  // an error when a peer is lost or a quiescent vote outlasts OVERLAP_STALL_TIMEOUT_S
  // (CheckVoteWait): the runtime cannot go on.
  absl::StatusOr<std::optional<ExecutablePlan>> Progress(bool quiescent, const TableFn& table);

  // Once when every rank has just agreed to drop the plan in force (the step drifted, or auto
  // measured the observed plan faster than every candidate): why, for the log; else null.
  const char* TakeDropWish();
  // True once when the test hook round_in_vote (plan_test_hooks.h) asked for a round.
  bool TakeRoundWish();

  // The plan in force was dropped (divergence, a changed step): plan again later.
  void OnPlanDropped(int64_t step);

  // Every rank has just adopted `plan` from a checkpoint (runtime/plan/plan_checkpoint.h), at the
  // same place among its submissions: it stays in force, as an adopted plan does (drift checks
  // included), and whatever planning or trials were under way are abandoned.
  void OnRestored(const ExecutablePlan& plan, double predicted_step_ms);

  ScheduleInfo info() const;

  // Rank 0, while a scheduled plan is in force: the simulator's spans of one steady step of it,
  // in ms from the step's forward (sched::SimResult::iteration_events); otherwise null.
  std::shared_ptr<const std::vector<sched::SimEvent>> predicted_step() const;

 private:
  enum class Stage { kIdle, kDrain, kVote };
  struct Candidate {    // a plan made by rank 0, ready to broadcast
    std::string bytes;  // Serialize()
    double predicted_ms = 0;
    std::vector<sched::SimEvent> predicted_step;
  };
  struct Outcome {  // rank 0's planner thread
    bool done = false;
    absl::Status status;
    // [0] is adopted first; auto's further trials follow (OVERLAP_AUTO_TRIALS).
    std::vector<Candidate> candidates;
    // At a re-plan check: the plan in force simulated on the same profile (bytes: its shape).
    std::optional<Candidate> in_force;
  };

  // The link cost: fitted to the collectives the runtime ran while profiling (each one's time on
  // the rank that started it last, which waited for nobody), topped up by a probe of five sizes
  // when they cover fewer than three, else of 4 and 64 KiB; a back-to-back 4 MiB probe's slope
  // floors the fitted slope (sustained bandwidth); the 4 KiB probe's median time, the lower of
  // two probes (the first, and one after the others: QuieterLatency), floors the intercept
  // (sched::FitLinkCost). Under dear and auto, reduce-scatters and allgathers of
  // 64 KiB to 2 MiB are probed and fitted too (ChannelCost::reduce_scatter, allgather). Sizes
  // above the step's gradient bytes (at least 1 MiB) are probed at that size instead. A
  // planning after the first keeps the last fit, probing nothing, when the collectives measured
  // since agree with it within kHeldFitTolerance (sched::FitStillHolds): a drift in the compute
  // windows is no reason to measure unchanged links again (about 1 s at 300 Mbit/s on 4 hosts).
  absl::Status FitCost(sched::CostModel* cost);
  // Where the step's gradients are on a GPU, adds OVERLAP_DEVICE_BUCKET_US to every fitted
  // latency of `cost` (what a bucket costs the coordinator beyond its collective); the fit kept
  // for the next planning stays the link's alone.
  void AddDeviceBucketCost(sched::CostModel* cost) const;
  // No trials under way or to come (a plan dropped, or one restored from a checkpoint).
  void ForgetTrials();
  // A drift was agreed under a scheduled plan: rank 0 plans from the steps measured under it
  // with the kept link fit, and the re-plan check at replan_check_step_ tells every rank
  // whether the plan would change (the header comment, step 3).
  void StartReplanCheck();
  // No trials (left): the plan of `shape` (PlanShape) is the one in force, whether adopted now or
  // kept as the fastest trial; after a drop for a drift, the drift policy learns whether
  // re-planning changed the plan. Then the drift checks start.
  void Settle(const std::string& shape);
  // Rank 0, at the re-plan check: votes [3] -1 while its planning runs, else [1] whether the
  // plan in force stays (ReplanMatch) and [3] -(2 + its simulated step on the drifted profile
  // in us, 0 if it goes).
  void VoteOnReplanCheck();
  // Rank 0: plans in the background from the last steady steps (StartPlanning) with `cost`; a
  // profile it cannot make becomes the planning's outcome, an error. `in_force`: the plan in
  // force (its PlanShape) at a re-plan check, simulated on the same profile; "" otherwise.
  void PlanFromMeasuredSteps(const sched::CostModel& cost, const std::string& in_force = "");
  // A plan with delayed updates or update periods: replacing it would discard the results it
  // holds.
  static bool Delayed(const sched::Plan& plan);
  // `plan` as a candidate: its simulated step (0 where the simulator refuses it) and that step's
  // spans, drawn beside the measured steps in the timeline; `bytes` is the caller's.
  static Candidate Simulated(const sched::Profile& profile, const sched::Plan& plan,
                             const sched::CostModel& cost);
  // The shortest simulated step among `candidates` (infinity where none was simulated).
  static double BestPredictedMs(const std::vector<Candidate>& candidates);
  // What tells two serialized plans apart: not the model's name or the budget spent ("" for
  // bytes that do not decode).
  static std::string PlanShape(const std::string& bytes);
  // At the re-plan check: the plan in force, with its simulated step on the drifted profile,
  // where it stays: a candidate made is that plan (under auto: one of them), or no candidate
  // is simulated OVERLAP_REPLAN_MIN_GAIN shorter than it. Null where it goes. Callers hold mu_.
  const Candidate* ReplanMatch() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With no scheduled plan in force (one dropped, or auto's kept observed plan drifted): measure
  // the steps afresh and plan at the attempt OVERLAP_PROFILE_STEPS + 2 steps after `step`.
  void PlanAgainFrom(int64_t step);
  // Stats() reports no scheduled plan in force (planner `planner`: "" after a drop,
  // "auto:observed" when auto keeps the observed plan): no buckets, prediction or staleness, one
  // step per update cycle, updates after the whole backward. Callers hold mu_.
  void ReportNoScheduledPlan(const std::string& planner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // This rank's latest steps, for the drift policy.
  StepWindow MeasuredWindow() const;
  // Schedules the next drift check, if the policy is on.
  void ScheduleDriftCheck();
  absl::StatusOr<std::vector<sched::CostSample>> MeasuredSamples();
  // Times collectives of `kind` (allreduce, reduce-scatter or allgatherv; with `two_stage`, a
  // two-stage allreduce) over each of `sizes` bytes (the median of a few runs) on the probe
  // executor.
  absl::Status Probe(absl::Span<const int64_t> sizes, std::vector<sched::CostSample>* samples,
                     CollectiveKind kind = CollectiveKind::kAllreduce, bool two_stage = false);
  void StartPlanning(sched::Profile profile, sched::CostModel cost, std::string in_force = "");
  // Rank 0's planner thread: the candidates (MakeCandidates) and, where `in_force` (a plan's
  // PlanShape) is given, that plan simulated on the same profile.
  Outcome MakeOutcome(const sched::Profile& profile, const sched::CostModel& cost,
                      const std::string& in_force) const;
  // The plans to adopt, best first (more than one only for auto's trials), each simulated.
  absl::StatusOr<std::vector<Candidate>> MakeCandidates(const sched::Profile& profile,
                                                        const sched::CostModel& cost) const;
  // Steps a trial runs: a step or two to settle, then OVERLAP_PROFILE_STEPS measured.
  int64_t TrialSteps() const { return config_.profile_steps + 3; }
  // auto's trials are under way or to come: several candidates, or one to measure against the
  // observed plan.
  bool Trying() const { return trials_ > 1 || (trials_ == 1 && compare_observed_); }
  // The attempt step, every rank: the slowest rank's median wall step under the plan in force
  // (not a scheduled one), which auto's trials are measured against; 0 where some rank has
  // none.
  absl::Status AgreeObservedStep();
  // The trials' end found the observed plan fastest: every rank drops the candidate in force
  // (TakeDropWish) and keeps the observed plan, with drift checks only: a drift plans again.
  void KeepObserved(double fastest_trial_ms);
  // A trial ended (every rank, after its vote): records every rank's slowest measured step and
  // moves on to the next candidate, or settles on the fastest.
  absl::StatusOr<std::optional<ExecutablePlan>> EndTrial(const TableFn& table);
  absl::StatusOr<std::optional<ExecutablePlan>> Exchange(const TableFn& table);
  // What info() reports of a plan just adopted, and the log line saying so.
  void RecordAdopted(const ExecutablePlan& plan, double predicted_step_ms, const std::string& how)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A vote this rank voted quiescent in that is still out after OVERLAP_STALL_WARNING_S is
  // warned about, and fails after OVERLAP_STALL_TIMEOUT_S: rank 0 holds every negotiation round
  // meanwhile (holds_rounds), so the stall inspector cannot see what keeps a peer from its
  // marker, and nothing else would end the wait.
  absl::Status CheckVoteWait();
  // Checks `started`, the return code of `call` that started `request`, then waits for it.
  absl::Status Wait(int started, const char* call, MPI_Request* request, const char* what);

  const Config config_;
  const int rank_;
  const int size_;
  MPI_Comm comm_;
  std::unique_ptr<Executor> probe_;
  // Which collective kinds (CollectiveKind's values; kTwoStageWarmSlot for the two-stage
  // allreduce) probe_ has run once untimed (Probe).
  static constexpr size_t kTwoStageWarmSlot = 7;
  std::array<bool, 8> probe_warmed_{};
  // The sizes probed so far in the fit under way (for the test hook probe_stall_s).
  int probes_in_fit_ = 0;
  // The last fitted link cost, alike on every rank (rank 0's, broadcast); unset before the first.
  std::optional<sched::ChannelCost> last_fit_;
  StepProfiler* const profiler_;
  const TimingsFn timings_;
  const std::function<absl::Status()> check_peers_;

  Stage stage_ = Stage::kIdle;
  bool adopting_ = false;  // the stage is an adopt step, not an attempt
  int64_t step_ = 0;
  int64_t next_attempt_;
  int64_t adopt_step_ = -1;
  int64_t next_drift_check_ = std::numeric_limits<int64_t>::max();
  bool drift_check_ = false;           // the stage is a drift check, not an attempt or an adoption
  int64_t drop_step_ = -1;             // drift agreed: the step at which every rank drops the plan
  bool dropping_ = false;              // the stage is that drop's quiescence vote
  int64_t replan_check_step_ = -1;     // StartReplanCheck: the step of its vote
  bool replan_check_ = false;          // the stage is that vote
  const char* drop_wanted_ = nullptr;  // TakeDropWish's answer
  DriftPolicy drift_;
  // The plan in force, as the planner made it (Plan::Serialize without its model name and budget
  // spent), and whether it was dropped for a drift: the next plan tells whether re-planning paid.
  std::string plan_shape_;
  std::string trial_shape_;  // PlanShape of the plan adopted last (a trial's, under auto)
  bool replanning_after_drift_ = false;
  bool given_up_ = false;
  // auto kept the observed plan (KeepObserved): nothing is planned until its step drifts
  // (OVERLAP_REPLAN_DRIFT), which plans again, trials and all.
  bool kept_observed_ = false;
  // The slowest rank's median wall step before the plan (AgreeObservedStep), and whether the
  // trials under way compare with it.
  double observed_ms_ = 0;
  bool compare_observed_ = false;
  // auto's trials, alike on every rank: the candidates rank 0 announced (0: no trials), the one
  // in force, each tried one's measured step, and the step at which the current trial ends.
  int trials_ = 0;
  int trial_ = -1;
  std::vector<double> trial_ms_;
  int64_t trial_end_step_ = -1;
  int64_t trial_give_up_step_ = -1;  // a trial whose steps are still not steady here ends them
  bool trial_check_ = false;         // the stage is a trial's end
  int chosen_ = 0;                   // the candidate the next Exchange adopts
  bool settling_ = false;            // that Exchange re-adopts the fastest tried one
  absl::Time drain_since_;
  // [0] quiescent, [1] steady (or not drifted; at a re-plan check, rank 0: the same plan), [2]
  // minus this rank's step, [3] at a drift check minus its median wall step in us (at a re-plan
  // check, rank 0's VoteOnReplanCheck): combined by MIN, [2] gives every rank the largest step,
  // from which the next stage is scheduled (see Progress), [3] the job's wall step (or rank 0's
  // planning state and prediction).
  int votes_[4] = {0, 0, 0, 0};
  // This rank voted quiescent in the vote out (a drift check's forced 1 aside); kept apart from
  // votes_, which is MPI's while the vote runs.
  bool voted_quiescent_ = false;
  absl::Time vote_since_;      // when this rank started the vote out
  bool vote_warned_ = false;   // CheckVoteWait has warned about it
  bool round_wanted_ = false;  // TakeRoundWish
  MPI_Request vote_request_ = MPI_REQUEST_NULL;

  std::thread planner_;
  mutable absl::Mutex mu_;
  Outcome outcome_ ABSL_GUARDED_BY(mu_);
  ScheduleInfo info_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::vector<sched::SimEvent>> predicted_step_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_PLAN_SCHEDULER_H_
