#include "runtime/plan/plan_scheduler.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "collectives/mpi_executor.h"
#include "collectives/mpi_wait.h"
#include "runtime/plan/plan_test_hooks.h"
#include "runtime/planes/compression_stage.h"
#include "scheduler/planner.h"
#include "scheduler/simulator.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// How long a rank waits for its own work to finish before voting "not quiescent".
constexpr absl::Duration kDrainLimit = absl::Seconds(2);

}  // namespace

PlanScheduler::PlanScheduler(const Config& config, int rank, int size, MPI_Comm comm,
                             std::unique_ptr<Executor> probe, StepProfiler* profiler,
                             TimingsFn timings, std::function<absl::Status()> check_peers)
    : config_(config),
      rank_(rank),
      size_(size),
      comm_(comm),
      probe_(std::move(probe)),
      profiler_(profiler),
      timings_(std::move(timings)),
      check_peers_(std::move(check_peers)),
      next_attempt_(config.plan_after_steps + config.profile_steps + 2),
      drift_(config.replan_drift, config.replan_min_ms,
             std::max<int64_t>(10, 2 * static_cast<int64_t>(config.profile_steps) + 2),
             config.profile_steps + 1) {
  // Bounds that the default budget keeps unused would otherwise pass unnoticed.
  if (rank_ == 0 && config_.planner == "deft" && config_.budget == 0 &&
      (config_.staleness > 0 || config_.max_period > 1)) {
    spdlog::warn(
        "overlap: OVERLAP_STALENESS={} and OVERLAP_MAX_PERIOD={} let deft delay updates, but "
        "its convergence budget OVERLAP_BUDGET is 0 (the C++ default: without a look-ahead "
        "correction every delay deft chose cost accuracy, docs/time_to_accuracy.md), so its "
        "plans stay synchronous; set OVERLAP_BUDGET (the mean steps a gradient byte may arrive "
        "late, e.g. 0.25, or -1 for max(staleness, (max_period - 1) / 2)) to let it use them",
        config_.staleness, config_.max_period);
  }
}

PlanScheduler::~PlanScheduler() {
  if (planner_.joinable()) planner_.join();
  if (comm_ != MPI_COMM_NULL) {
    absl::Status s =
        MpiCheck(MPI_Comm_free(&comm_),
                 absl::StrCat("rank ", rank_, ": MPI_Comm_free (the plan communicator)"));
    if (!s.ok()) spdlog::warn("overlap: {}", std::string(s.message()));
  }
}

ScheduleInfo PlanScheduler::info() const {
  absl::MutexLock lock(&mu_);
  return info_;
}

std::shared_ptr<const std::vector<sched::SimEvent>> PlanScheduler::predicted_step() const {
  absl::MutexLock lock(&mu_);
  return predicted_step_;
}

void PlanScheduler::OnStep(int64_t step) {
  step_ = step;
  if (given_up_) return;
  if (kept_observed_) {
    // The observed plan auto kept has its drift checks, and nothing else, scheduled.
    if (step < next_drift_check_) return;
    drift_check_ = true;
  } else if (step == adopt_step_) {
    adopting_ = true;
  } else if (adopt_step_ < 0 && step >= next_attempt_) {
    adopting_ = false;
  } else if (step == drop_step_) {
    dropping_ = true;
  } else if (step == replan_check_step_) {
    replan_check_ = true;
  } else if (step == trial_end_step_) {
    trial_check_ = true;
  } else if (step >= next_drift_check_) {
    drift_check_ = true;
  } else {
    return;
  }
  stage_ = Stage::kDrain;
  drain_since_ = absl::Now();
}

void PlanScheduler::OnPlanDropped(int64_t step) {
  next_drift_check_ = std::numeric_limits<int64_t>::max();
  drop_step_ = replan_check_step_ = -1;
  drift_check_ = dropping_ = replan_check_ = false;
  ForgetTrials();
  if (given_up_) return;
  if (kept_observed_) {
    // The last candidate went for the observed plan, learned again from here: its steps are the
    // drift checks' baseline.
    profiler_->Reset();
    drift_.OnAdopted();
    ScheduleDriftCheck();
    return;
  }
  PlanAgainFrom(step);
}

void PlanScheduler::PlanAgainFrom(int64_t step) {
  profiler_->Reset();
  next_attempt_ = step + config_.profile_steps + 2;
  absl::MutexLock lock(&mu_);
  ReportNoScheduledPlan("");
  info_.trials.clear();
}

void PlanScheduler::ReportNoScheduledPlan(const std::string& planner) {
  info_.planner = planner;
  info_.buckets = info_.compressed_buckets = info_.two_stage_buckets = 0;
  info_.predicted_step_ms = 0;
  info_.layerwise_update = false;
  info_.mean_staleness = 0;
  info_.update_cycle = 1;
  info_.trials_pending = false;
  predicted_step_.reset();
}

void PlanScheduler::ForgetTrials() {
  trials_ = 0;
  trial_ = -1;
  trial_ms_.clear();
  trial_end_step_ = trial_give_up_step_ = -1;
  trial_check_ = settling_ = compare_observed_ = false;
  chosen_ = 0;
}

StepWindow PlanScheduler::MeasuredWindow() const {
  if (profiler_->steady_steps() < config_.profile_steps) return {};
  return {profiler_->median_step_ms(), profiler_->step_ms_spread()};
}

void PlanScheduler::ScheduleDriftCheck() {
  next_drift_check_ =
      drift_.enabled() ? step_ + drift_.NextCheckIn() : std::numeric_limits<int64_t>::max();
}

bool PlanScheduler::TakeRoundWish() {
  const bool wanted = round_wanted_;
  round_wanted_ = false;
  return wanted;
}

const char* PlanScheduler::TakeDropWish() {
  const char* why = drop_wanted_;
  drop_wanted_ = nullptr;
  return why;
}

absl::Status PlanScheduler::Wait(int started, const char* call, MPI_Request* request,
                                 const char* what) {
  absl::Status s = MpiCheck(started, absl::StrCat("rank ", rank_, ": ", call, " (", what, ")"));
  if (!s.ok()) return s;
  return WaitWithDeadline(request, absl::Seconds(config_.collective_timeout_s),
                          absl::StrCat("rank ", rank_, ": ", what), check_peers_);
}

absl::Status PlanScheduler::CheckVoteWait() {
  // A vote this rank was not quiescent in holds no round back, and the stall inspector still
  // sees whatever keeps a peer from its marker.
  if (!voted_quiescent_) return absl::OkStatus();
  const absl::Duration waited = absl::Now() - vote_since_;
  if (waited >= absl::Seconds(config_.stall_timeout_s)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", rank_, ": step ", step_, ": some rank did not reach step ", step_,
        "'s forward marker within ", config_.stall_timeout_s,
        " s of this rank's plan vote (OVERLAP_STALL_TIMEOUT_S; planner ", config_.planner,
        "). While the vote is out no negotiation round runs, so a rank that waits before its "
        "marker on an operation the others never submitted, or that ran fewer steps than the "
        "others, waits for good: every rank must submit the same operations between the same "
        "markers"));
  }
  if (!vote_warned_ && waited >= absl::Seconds(config_.stall_warning_s)) {
    vote_warned_ = true;
    spdlog::warn(
        "overlap: rank {}: step {}: the plan vote has waited {} s for every rank to reach step "
        "{}'s forward marker, and no negotiation round runs until it is in: a rank that waits "
        "before its marker on an operation the others never submitted, or that ran fewer "
        "steps, stops the job, which fails after OVERLAP_STALL_TIMEOUT_S={} s",
        rank_, step_, absl::ToInt64Seconds(waited), step_, config_.stall_timeout_s);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ExecutablePlan>> PlanScheduler::Progress(bool quiescent,
                                                                      const TableFn& table) {
  if (stage_ == Stage::kDrain) {
    // A drift check or a re-plan check only compares numbers: it holds nothing back for long.
    const bool checking = drift_check_ || replan_check_;
    if (!checking && !quiescent && absl::Now() - drain_since_ < kDrainLimit) {
      return std::nullopt;
    }
    votes_[0] = quiescent || checking ? 1 : 0;
    // A check votes without draining and runs nothing blocking after the vote.
    voted_quiescent_ = quiescent && !checking;
    votes_[1] = replan_check_  ? 1  // rank 0's own vote below
                : drift_check_ ? (drift_.Drifted(MeasuredWindow()) ? 0 : 1)
                : adopting_ || profiler_->steady_steps() >= config_.profile_steps ? 1
                                                                                  : 0;
    // A trial compares wall steps: a rank whose steps closed without one (markers out of order)
    // has nothing to compare yet.
    if (trial_check_ && profiler_->median_wall_ms() <= 0) votes_[1] = 0;
    votes_[2] = -static_cast<int>(step_);
    // A drift check also agrees on the job's wall step (the slowest rank's median, in us), which
    // judges whether a re-plan paid (drift_policy.h); a re-plan check on whether rank 0's
    // planning is done, and its prediction.
    votes_[3] = 0;
    if (drift_check_) {
      votes_[3] =
          -static_cast<int>(std::min(2e9, std::max(0.0, 1e3 * profiler_->median_wall_ms())));
    } else if (replan_check_ && rank_ == 0) {
      VoteOnReplanCheck();
    }
    // Open MPI's non-blocking allreduce algorithm is a process-wide setting: every rank must
    // select the same one for this call, whatever it ran last.
    const int rc =
        StartIallreduce(MPI_IN_PLACE, votes_, 4, MPI_INT, MPI_MIN, comm_, &vote_request_);
    absl::Status started =
        MpiCheck(rc, absl::StrCat("rank ", rank_, ": MPI_Iallreduce (starting the plan vote)"));
    if (!started.ok()) return started;
    stage_ = Stage::kVote;
    vote_since_ = absl::Now();
    vote_warned_ = false;
    const PlanTestHooks& hooks = InstalledPlanTestHooks();
    if (voted_quiescent_ && hooks.round_in_vote != nullptr && hooks.round_in_vote(rank_)) {
      round_wanted_ = true;
      return std::nullopt;  // the round comes before this rank looks at the vote
    }
  }
  if (stage_ != Stage::kVote) return std::nullopt;
  int done = 0;
  absl::Status voted = MpiCheck(MPI_Test(&vote_request_, &done, MPI_STATUS_IGNORE),
                                absl::StrCat("rank ", rank_, ": MPI_Test (the plan vote)"));
  if (!voted.ok()) return voted;
  if (!done) {
    absl::Status waited = CheckVoteWait();
    if (!waited.ok()) return waited;
    return std::nullopt;
  }
  stage_ = Stage::kIdle;
  // Every later stage is scheduled from this step, so it must be the same on every rank. A stage
  // normally starts at the same forward marker everywhere, but one scheduled from a drop at a
  // negotiation round (which markers do not line up with) may start a step apart; the largest
  // step, which no rank has passed (markers wait while a stage runs), realigns them.
  step_ = std::max<int64_t>(step_, -static_cast<int64_t>(votes_[2]));
  if (replan_check_) {
    replan_check_ = false;
    if (votes_[3] == -1) {  // rank 0's planning still runs
      replan_check_step_ = step_ + 1;
      return std::nullopt;
    }
    replan_check_step_ = -1;
    if (votes_[1] == 1) {
      // The drifted step is the plan's own now: the checks measure their baseline again, and
      // the plan's prediction is the one for the drifted step.
      drift_.OnAdopted();
      drift_.OnReplanned(/*changed=*/false);
      ScheduleDriftCheck();
      {
        absl::MutexLock lock(&mu_);
        ++info_.drifts_kept;
        const double predicted_ms = (-static_cast<double>(votes_[3]) - 2) / 1e3;
        if (predicted_ms > 0) info_.predicted_step_ms = predicted_ms;
        const Candidate* match = rank_ == 0 ? ReplanMatch() : nullptr;
        if (match != nullptr) {
          predicted_step_ =
              std::make_shared<const std::vector<sched::SimEvent>>(match->predicted_step);
        }
      }
      spdlog::info(
          "overlap: rank {}: step {}: planning from the drifted step made the plan in force "
          "again, or none worth a drop: it stays; drift checks now {} times further apart",
          rank_, step_, drift_.backoff());
    } else {
      spdlog::info(
          "overlap: rank {}: step {}: planning from the drifted step made another plan: the "
          "plan is dropped at the next step, to measure and plan again",
          rank_, step_);
      drop_step_ = step_ + 1;  // with nothing in flight on any rank, like an adoption
      replanning_after_drift_ = true;
    }
    return std::nullopt;
  }
  if (drift_check_) {
    drift_check_ = false;
    const StepWindow now = MeasuredWindow();
    const std::string explained = drift_.Explain(now);
    spdlog::debug("overlap: rank {}: step {}: drift check: {} ({} steady steps){}", rank_, step_,
                  explained, profiler_->steady_steps(),
                  votes_[1] == 0 ? "; some rank drifted" : "");
    const double job_wall_ms = -votes_[3] / 1e3;
    const bool judged = drift_.judging();
    const bool drifted = drift_.OnChecked(votes_[1] == 0, now, job_wall_ms);
    if (judged && drift_.backoff() > 1) {
      spdlog::info(
          "overlap: rank {}: step {}: re-planning after the drift did not pay (the new plan's "
          "step {:.1f} ms against the dropped plan's {:.1f} ms, the slowest rank's median); "
          "drift checks now {} times further apart",
          rank_, step_, job_wall_ms, drift_.drifted_wall_ms(), drift_.backoff());
    }
    if (drifted && kept_observed_) {
      spdlog::info(
          "overlap: rank {}: step {}: the measured step drifted on some rank at two checks in a "
          "row (here {}; OVERLAP_REPLAN_DRIFT={}, OVERLAP_REPLAN_MIN_MS={}) under the observed "
          "plan auto kept; planning again",
          rank_, step_, explained, config_.replan_drift, config_.replan_min_ms);
      kept_observed_ = false;
      replanning_after_drift_ = true;
      next_drift_check_ = std::numeric_limits<int64_t>::max();
      PlanAgainFrom(step_);
    } else if (drifted && last_fit_.has_value()) {
      spdlog::info(
          "overlap: rank {}: step {}: the measured step drifted on some rank at two checks in a "
          "row (here {}; OVERLAP_REPLAN_DRIFT={}, OVERLAP_REPLAN_MIN_MS={}); planning from it "
          "before dropping anything",
          rank_, step_, explained, config_.replan_drift, config_.replan_min_ms);
      StartReplanCheck();
    } else if (drifted) {
      spdlog::info(
          "overlap: rank {}: step {}: the measured step drifted on some rank at two checks in a "
          "row (here {}; OVERLAP_REPLAN_DRIFT={}, OVERLAP_REPLAN_MIN_MS={}); the plan is dropped "
          "at the next step, to plan again",
          rank_, step_, explained, config_.replan_drift, config_.replan_min_ms);
      drop_step_ = step_ + 1;  // with nothing in flight on any rank, like an adoption
      next_drift_check_ = std::numeric_limits<int64_t>::max();
      replanning_after_drift_ = true;
    } else {
      ScheduleDriftCheck();
    }
    return std::nullopt;
  }
  if (trial_check_) {
    trial_check_ = false;
    if (votes_[0] == 0 || votes_[1] == 0) {  // a rank busy, or too few steps measured yet
      if (step_ < trial_give_up_step_) {
        trial_end_step_ = step_ + 1;
        return std::nullopt;
      }
      // Steps that never settle (the tensor set keeps changing) cannot be compared: the plan in
      // force stays, and the trials end. Every rank saw the same votes.
      trial_end_step_ = -1;
      trials_ = 0;
      trial_ = -1;
      ScheduleDriftCheck();
      spdlog::info(
          "overlap: rank {}: step {}: auto's trials ended unmeasured (steps not steady); "
          "keeping the plan in force",
          rank_, step_);
      absl::MutexLock lock(&mu_);
      info_.trials_pending = false;
      return std::nullopt;
    }
    trial_end_step_ = -1;
    return EndTrial(table);
  }
  if (dropping_) {
    dropping_ = false;
    if (votes_[0] == 0) {
      drop_step_ = step_ + 1;  // a rank was busy: at the next step
    } else {
      drop_step_ = -1;
      drop_wanted_ = "the measured step drifted (OVERLAP_REPLAN_DRIFT); planning again";
    }
    return std::nullopt;
  }
  if (votes_[0] == 0) {
    // Some rank still had work in flight; try again at the next step (adopting) or later.
    spdlog::info("overlap: rank {}: step {}: a rank was busy; planning postponed", rank_, step_);
    if (adopting_) {
      adopt_step_ = step_ + 1;
    } else {
      next_attempt_ = step_ + 1;
    }
    return std::nullopt;
  }
  if (adopting_) {
    adopt_step_ = -1;
    return Exchange(table);
  }
  if (votes_[1] == 0) {
    next_attempt_ = step_ + config_.profile_steps + 1;
    spdlog::info("overlap: rank {}: step {}: the step profile is not steady yet on every rank",
                 rank_, step_);
    return std::nullopt;
  }
  // Every rank is quiet: measure what runs now, probe the network, then plan in the background.
  absl::Status measured = AgreeObservedStep();
  if (!measured.ok()) return measured;
  sched::CostModel cost;
  absl::Status probed = FitCost(&cost);
  if (!probed.ok()) return probed;
  AddDeviceBucketCost(&cost);
  adopt_step_ = step_ + 2;
  if (rank_ == 0) PlanFromMeasuredSteps(cost);
  return std::nullopt;
}

absl::Status PlanScheduler::AgreeObservedStep() {
  observed_ms_ = 0;
  if (config_.planner != "auto" || config_.auto_trials <= 1) return absl::OkStatus();
  // The largest median and the smallest, in one call: MAX of (ms, -ms).
  const double ms = profiler_->median_wall_ms();
  double both[2] = {ms, -ms};
  MPI_Request request;
  const int rc = StartIallreduce(MPI_IN_PLACE, both, 2, MPI_DOUBLE, MPI_MAX, comm_, &request);
  absl::Status s = Wait(rc, "MPI_Iallreduce", &request, "combining the observed plan's step times");
  if (!s.ok()) return s;
  if (-both[1] > 0) observed_ms_ = both[0];
  return absl::OkStatus();
}

void PlanScheduler::KeepObserved(double fastest_trial_ms) {
  trials_ = 0;
  trial_ = -1;
  compare_observed_ = false;
  kept_observed_ = true;
  if (replanning_after_drift_) {  // planned again after a drift, and kept the same plan
    replanning_after_drift_ = false;
    drift_.OnReplanned(/*changed=*/false);
  }
  drop_wanted_ =
      "auto measured the plan it started from faster than every plan it tried; keeping that";
  spdlog::info(
      "overlap: rank {}: step {}: the observed plan ({:.1f} ms per step) beat every plan auto "
      "tried (fastest {:.1f} ms): it is learned again and kept until its step drifts",
      rank_, step_, observed_ms_, fastest_trial_ms);
  absl::MutexLock lock(&mu_);
  ReportNoScheduledPlan("auto:observed");
  info_.adopted_step = step_;
}

absl::StatusOr<std::optional<ExecutablePlan>> PlanScheduler::EndTrial(const TableFn& table) {
  // Every rank's median step under this candidate, waits included; the slowest rank's is the
  // job's.
  double ms = profiler_->median_wall_ms();
  MPI_Request request;
  const int rc = StartIallreduce(MPI_IN_PLACE, &ms, 1, MPI_DOUBLE, MPI_MAX, comm_, &request);
  absl::Status s = Wait(rc, "MPI_Iallreduce", &request, "combining the trial's step times");
  if (!s.ok()) return s;
  trial_ms_.push_back(ms);
  std::string planner;
  {
    absl::MutexLock lock(&mu_);
    planner = info_.planner;
    absl::StrAppend(&info_.trials, info_.trials.empty() ? "" : ", ", planner, " ",
                    absl::StrFormat("%.1f", ms), " ms");
  }
  spdlog::info("overlap: rank {}: step {}: trial {} of {}: {} measured {:.1f} ms per step", rank_,
               step_, trial_ + 1, trials_, planner, ms);
  if (trial_ + 1 < trials_) {
    chosen_ = trial_ + 1;
  } else {
    chosen_ =
        static_cast<int>(std::min_element(trial_ms_.begin(), trial_ms_.end()) - trial_ms_.begin());
    const double fastest_ms = trial_ms_[static_cast<size_t>(chosen_)];
    if (compare_observed_ && observed_ms_ < fastest_ms) {
      KeepObserved(fastest_ms);
      return std::nullopt;
    }
    if (chosen_ == trial_) {  // the fastest is in force: keep it
      Settle(trial_shape_);
      absl::MutexLock lock(&mu_);
      info_.trials_pending = false;
      spdlog::info("overlap: rank {}: keeping {}, the fastest of the plans tried ({})", rank_,
                   planner, info_.trials);
      return std::nullopt;
    }
    settling_ = true;
  }
  return Exchange(table);
}

absl::StatusOr<std::optional<ExecutablePlan>> PlanScheduler::Exchange(const TableFn& table) {
  // Rank 0: [status code][predicted ms][candidates] then the message or the plan bytes.
  std::string bytes;
  double header[3] = {0, 0, 0};
  if (rank_ == 0) {
    if (planner_.joinable()) planner_.join();  // holds training only if planning is slower
    absl::MutexLock lock(&mu_);
    if (!outcome_.status.ok()) {
      header[0] = static_cast<double>(outcome_.status.code());
      bytes = std::string(outcome_.status.message());
    } else {
      const Candidate& c = outcome_.candidates[static_cast<size_t>(chosen_)];
      header[1] = c.predicted_ms;
      header[2] = static_cast<double>(outcome_.candidates.size());
      bytes = c.bytes;
    }
  }
  int64_t length = static_cast<int64_t>(bytes.size());
  MPI_Request request;
  absl::Status s = Wait(MPI_Ibcast(header, 3, MPI_DOUBLE, 0, comm_, &request), "MPI_Ibcast",
                        &request, "broadcasting the plan");
  if (s.ok()) {
    s = Wait(MPI_Ibcast(&length, 1, MPI_INT64_T, 0, comm_, &request), "MPI_Ibcast", &request,
             "broadcasting the plan");
  }
  if (!s.ok()) return s;
  bytes.resize(static_cast<size_t>(length));
  s = Wait(MPI_Ibcast(bytes.data(), static_cast<int>(length), MPI_CHAR, 0, comm_, &request),
           "MPI_Ibcast", &request, "broadcasting the plan");
  if (!s.ok()) return s;
  if (header[0] != 0) {
    given_up_ = true;
    spdlog::warn(
        "overlap: rank {}: rank 0 could not make a {} plan: {}; staying with the observed "
        "plan",
        rank_, config_.planner, bytes);
    return std::nullopt;
  }
  // Every rank checks the plan against its own tensors; all verdicts are gathered.
  std::string verdict;
  std::optional<ExecutablePlan> plan;
  std::string shape;  // PlanShape
  absl::StatusOr<sched::Plan> decoded = sched::Plan::Deserialize(bytes);
  if (!decoded.ok()) {
    verdict = std::string(decoded.status().message());
  } else {
    shape = PlanShape(bytes);
    std::vector<std::string> names;
    for (const sched::Bucket& b : decoded->buckets) {
      for (const sched::TensorSlice& slice : b.slices) names.push_back(slice.name);
    }
    absl::StatusOr<ExecutablePlan> executable =
        ScheduledPlan(*decoded, table(names), config_.num_channels);
    if (executable.ok()) {
      plan = *std::move(executable);
    } else {
      verdict = std::string(executable.status().message());
    }
  }
  if (!verdict.empty()) verdict = absl::StrCat("rank ", rank_, ": ", verdict);
  int mine = static_cast<int>(verdict.size());
  std::vector<int> lengths(static_cast<size_t>(size_));
  s = Wait(MPI_Iallgather(&mine, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_, &request),
           "MPI_Iallgather", &request, "gathering the plan verdicts");
  if (!s.ok()) return s;
  std::vector<int> displs(static_cast<size_t>(size_), 0);
  for (int r = 1; r < size_; ++r) displs[r] = displs[r - 1] + lengths[r - 1];
  std::string all(static_cast<size_t>(displs.back() + lengths.back()), '\0');
  s = Wait(MPI_Iallgatherv(verdict.data(), mine, MPI_CHAR, all.data(), lengths.data(),
                           displs.data(), MPI_CHAR, comm_, &request),
           "MPI_Iallgatherv", &request, "gathering the plan verdicts");
  if (!s.ok()) return s;
  if (!all.empty()) {
    std::vector<std::string> reasons;
    for (int r = 0; r < size_; ++r) {
      if (lengths[r] > 0) {
        reasons.push_back(
            all.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(lengths[r])));
      }
    }
    given_up_ = true;
    trials_ = 0;  // the plan in force, if any, stays
    trial_ = -1;
    spdlog::error("overlap: rank {}: the {} plan was refused, training continues without it: {}",
                  rank_, config_.planner, absl::StrJoin(reasons, "; "));
    absl::MutexLock lock(&mu_);
    ++info_.refused;
    info_.trials_pending = false;
    return std::nullopt;
  }
  next_attempt_ = std::numeric_limits<int64_t>::max();  // until the plan is dropped
  // The first drift check measures the step under the plan; later ones compare with it.
  drift_.OnAdopted();
  // auto's first candidate: the trials begin, against the observed plan's measured step too
  // where the candidate is synchronous (every rank decodes the same plan, so all agree).
  const bool compare = observed_ms_ > 0 && !Delayed(*decoded);
  if (trial_ < 0 && (header[2] > 1 || compare)) {
    trials_ = static_cast<int>(header[2]);
    trial_ms_.clear();
    compare_observed_ = compare;
    if (compare) {
      absl::MutexLock lock(&mu_);
      info_.trials = absl::StrFormat("auto:observed %.1f ms", observed_ms_);
    }
  }
  const bool trying = Trying() && !settling_;
  trial_shape_ = shape;
  if (trying) {
    trial_ = chosen_;
    trial_end_step_ = step_ + TrialSteps();
    trial_give_up_step_ = trial_end_step_ + 2 * TrialSteps();
    next_drift_check_ = std::numeric_limits<int64_t>::max();
    profiler_->Reset();  // the trial measures steps under this plan only
  } else {
    Settle(shape);
  }
  absl::MutexLock lock(&mu_);
  info_.trials_pending = trying;
  if (!trying && !info_.trials.empty()) {
    spdlog::info("overlap: rank {}: adopting {} again, the fastest of the plans tried ({})", rank_,
                 plan->source, info_.trials);
  }
  if (rank_ == 0) {
    predicted_step_ = std::make_shared<const std::vector<sched::SimEvent>>(
        outcome_.candidates[static_cast<size_t>(chosen_)].predicted_step);
  }
  RecordAdopted(*plan, header[1], "adopted");
  return plan;
}

void PlanScheduler::Settle(const std::string& shape) {
  trials_ = 0;
  trial_ = -1;
  settling_ = false;
  if (replanning_after_drift_) {
    replanning_after_drift_ = false;
    const bool changed = shape != plan_shape_;
    drift_.OnReplanned(changed);
    if (!changed) {
      spdlog::info(
          "overlap: rank {}: step {}: re-planning after the drift made the same plan again; "
          "drift checks now {} times further apart",
          rank_, step_, drift_.backoff());
    }
  }
  plan_shape_ = shape;
  ScheduleDriftCheck();
}

void PlanScheduler::OnRestored(const ExecutablePlan& plan, double predicted_step_ms) {
  // The coordinator reaches the restore only between stages, so no vote is in progress.
  adopt_step_ = -1;
  adopting_ = false;
  next_attempt_ = std::numeric_limits<int64_t>::max();  // until the plan is dropped
  drop_step_ = replan_check_step_ = -1;
  drift_check_ = dropping_ = replan_check_ = false;
  drop_wanted_ = nullptr;
  kept_observed_ = false;  // the restored plan is in force, with its drift checks
  drift_.OnAdopted();
  replanning_after_drift_ = false;
  plan_shape_.clear();
  ScheduleDriftCheck();
  ForgetTrials();
  profiler_->Reset();  // drift is measured under this plan
  absl::MutexLock lock(&mu_);
  info_.trials.clear();
  info_.trials_pending = false;
  predicted_step_.reset();  // no simulation of it in this process
  RecordAdopted(plan, predicted_step_ms, "resumed from a checkpoint");
}

void PlanScheduler::RecordAdopted(const ExecutablePlan& plan, double predicted_step_ms,
                                  const std::string& how) {
  info_.planner = plan.source;
  info_.buckets = static_cast<int64_t>(plan.buckets.size());
  info_.compressed_buckets =
      std::count_if(plan.buckets.begin(), plan.buckets.end(),
                    [](const ExecBucket& b) { return b.compression != "none"; });
  info_.two_stage_buckets = std::count_if(plan.buckets.begin(), plan.buckets.end(),
                                          [](const ExecBucket& b) { return b.two_stage; });
  info_.predicted_step_ms = predicted_step_ms;
  info_.adopted_step = step_;
  info_.layerwise_update = plan.layerwise_update;
  ++info_.adopted;
  int delayed = 0, periodic = 0;
  double weighted = 0, elements = 0;
  int64_t cycle = 1;
  for (size_t k = 0; k < plan.buckets.size(); ++k) {
    const ExecBucket& b = plan.buckets[k];
    cycle = std::lcm(cycle, int64_t{std::max(1, b.period)});
    delayed += b.delay > 0 ? 1 : 0;
    periodic += b.period > 1 ? 1 : 0;
    int64_t count = 0;
    for (const ExecSlice& s : b.slices) count += s.count;
    // The plan itself, for reading a timeline against it (OVERLAP_LOG_LEVEL=debug).
    spdlog::debug(
        "overlap: rank {}: plan bucket {}: {} of {} slices, {} elements, channel {}, delay {}, "
        "period {}, phase {}{}",
        rank_, k, BucketKindName(b.kind), b.slices.size(), count, b.channel, b.delay, b.period,
        b.phase, b.two_stage ? ", two-stage" : "");
    // An allgather moves what its reduce-scatter already counted.
    if (b.kind == BucketKind::kAllgather) continue;
    weighted += static_cast<double>(count) * (b.delay + (b.period - 1) / 2.0);
    elements += static_cast<double>(count);
  }
  info_.mean_staleness = elements > 0 ? weighted / elements : 0;
  info_.update_cycle = cycle;
  spdlog::info(
      "overlap: rank {}: step {}: {} the {} plan ({} buckets, {} delayed, {} with an update "
      "period, {} two-stage; predicted step {:.1f} ms)",
      rank_, step_, how, plan.source, plan.buckets.size(), delayed, periodic,
      info_.two_stage_buckets, predicted_step_ms);
}

}  // namespace overlap
