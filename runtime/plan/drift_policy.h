// Drift policy: when the step measured under a plan has changed enough, and for long enough, to
// be worth planning again.
//
// A plan is made for the step its profile measured. When the step changes for good (a new phase
// of training, a slower neighbour on the host), the plan may no longer fit, and dropping it to
// plan again pays. A re-plan also costs: the steps until the next plan is adopted run unplanned,
// and a delayed plan's held results are reduced again synchronously. On a short step, jitter alone
// moves the median by a quarter (1.2 ms against 1.6 ms), and a policy that trusts one relative
// threshold re-plans every few dozen steps. So a drift counts only when the median step of the
// latest window moved from the baseline (the first window measured under the plan)
//  - by more than `relative` of the baseline (OVERLAP_REPLAN_DRIFT),
//  - by more than twice the steps' interquartile spread, at the baseline or now (outside the noise),
//  - by at least `min_ms` (OVERLAP_REPLAN_MIN_MS: a change that small cannot win back a re-plan),
// and some rank finds it at two checks in a row. Checks come every `interval` steps, the
// confirming one `confirm_interval` after the first. A re-plan that did not pay doubles the
// interval, up to kMaxBackoff times; one that paid brings it back. A re-plan did not pay when the
// planner made the plan it dropped, or when the new plan's wall step (the job's: the slowest
// rank's median, at the first check under it) is not shorter than the dropped plan's (the lower
// of its wall step at its own first check and at the drift: a slow spell that passes by itself
// is not the re-plan's doing) by kPaidFraction of it and by `min_ms`. Without that measure, a 2-core machine whose compute
// times wander with its load dropped deft's delayed plan 16 times in 936 steps (the
// Fashion-MNIST CNN of bench/time_to_accuracy.sh), each re-plan a slightly different plan (from
// slightly different fitted link costs) that ran no faster.
//
// Pure bookkeeping, no MPI: the plan scheduler feeds it the agreed outcome of each check.
#ifndef OVERLAP_RUNTIME_PLAN_DRIFT_POLICY_H_
#define OVERLAP_RUNTIME_PLAN_DRIFT_POLICY_H_

#include <cstdint>
#include <string>

namespace overlap {

// The steps of one measurement window (runtime/plan/step_profiler.h).
struct StepWindow {
  double median_ms = 0;
  double spread_ms = 0;  // interquartile range
};

class DriftPolicy {
 public:
  static constexpr int kMaxBackoff = 64;
  // A re-plan pays when it shortens the job's wall step by at least this share (and min_ms).
  static constexpr double kPaidFraction = 0.05;

  // relative <= 0 disables the policy: Drifted is never true.
  DriftPolicy(double relative, double min_ms, int64_t interval, int64_t confirm_interval);

  bool enabled() const { return relative_ > 0; }

  // A plan was adopted or restored: the next check measures its baseline.
  void OnAdopted();

  // This rank's verdict on `now`: false while no baseline is measured.
  bool Drifted(const StepWindow& now) const;

  // The agreed outcome of a check (some rank drifted) and the job's median wall step at it, the
  // same on every rank (0: not measured). Takes `now` as the baseline at the first check under a
  // plan, and there judges a changed re-plan (OnReplanned) against the drift it answered. True
  // when the plan should be dropped: the second drift in a row.
  bool OnChecked(bool some_rank_drifted, const StepWindow& now, double job_wall_ms = 0);

  // Steps from a check to the next one.
  int64_t NextCheckIn() const;

  // A plan adopted after a drift's drop: `changed` when it differs from the dropped one. The same
  // plan doubles the interval at once; a changed one is judged at its first check (OnChecked).
  void OnReplanned(bool changed);

  int backoff() const { return backoff_; }
  // A changed re-plan's first check is still to come.
  bool judging() const { return judging_; }
  // The dropped plan's wall step that the re-plan is judged against (0: not measured).
  double drifted_wall_ms() const { return drifted_wall_ms_; }
  const StepWindow& baseline() const { return baseline_; }
  bool has_baseline() const { return has_baseline_; }
  // Why `now` is or is not a drift, for the log: "moved 0.4 ms of 1.2 ms; needs 5.0 ms".
  std::string Explain(const StepWindow& now) const;

 private:
  // How far the median must move from the baseline to count.
  double Threshold(const StepWindow& now) const;

  const double relative_;
  const double min_ms_;
  const int64_t interval_;
  const int64_t confirm_interval_;
  StepWindow baseline_;
  bool has_baseline_ = false;
  int drifted_checks_ = 0;  // agreed drifts in a row
  int backoff_ = 1;
  double drifted_wall_ms_ = 0;   // the dropped plan's wall step a re-plan must beat
  bool judging_ = false;         // a changed re-plan waits for its first check's verdict
  bool first_check_ = false;     // the plan's first check is still to come
  double baseline_wall_ms_ = 0;  // the job's wall step at the plan's first check
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLAN_DRIFT_POLICY_H_
