// Planned execution: DDP's frozen buckets, learned from negotiation.
//
// When negotiation has agreed the same set of allreduces for several steps (CycleDetector), every
// rank freezes that step, in the same order, as a plan of launch units (the first small, like
// DDP's first bucket, the rest up to kUnitBytes). From then on a rank starts unit k as soon as all
// of its tensors are submitted locally and unit k-1's check has completed - no negotiation round,
// no message to rank 0. Every rank starts the same units in the same order on communicators only
// the plan uses, so the collectives match.
//
// Consistency check: with each unit's collective, a small bitwise-OR allreduce on its own
// communicator tells every rank which of the unit's tensors some rank submitted differently from
// the plan (that rank contributes zeros for them, so the collective still matches) and which ranks
// have joined. Handles complete only once both are done. Tensors that diverged on any rank go back
// to negotiation on every rank - which agrees on the new request if every rank changed it alike,
// and otherwise fails it with the usual mismatch error naming each rank's request - and the plan
// is dropped. Since no rank starts unit k+1 before unit k's check is in, every rank drops the plan
// at the same unit.
//
// Join: a joined rank starts each next unit with zeros (and whatever it submitted before joining).
// When a unit's check shows every rank joined, that unit was all zeros, nobody starts another,
// and the plan restarts at unit 0 once the negotiated Join completes.
//
// Threading: the coordinator thread only.
#ifndef OVERLAP_RUNTIME_PLANNED_MODE_H_
#define OVERLAP_RUNTIME_PLANNED_MODE_H_

#include <mpi.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/executor.h"
#include "runtime/data_plane.h"
#include "runtime/launch_units.h"
#include "runtime/messages.h"
#include "runtime/pending_op.h"

namespace overlap {

class PlannedMode {
 public:
  // DDP's bucket sizes: a small first unit starts communication early in backward.
  static constexpr int64_t kFirstUnitBytes = int64_t{1} << 20;
  static constexpr int64_t kUnitBytes = int64_t{25} << 20;

  // `executor` and `check_comm` carry planned collectives and checks only. `complete` receives
  // every operation that finishes, with its outcome.
  // `hosts[r]` names rank r's host in messages.
  PlannedMode(std::unique_ptr<Executor> executor, MPI_Comm check_comm, const Config& config,
              int rank, int size, std::vector<std::string> hosts, Timeline* timeline,
              CompressionStage* compression, DataPlane::CompleteFn complete);
  ~PlannedMode();

  bool frozen() const { return frozen_; }

  // Adopts `entries` (one step, in order) as the plan. `already_agreed` holds cache ids that
  // negotiation has already agreed for the step in progress: the first pass skips them.
  // `step_time`: how long a step took while learning (sets the patience before asking to unfreeze).
  // `groups` as for MakeLaunchUnits.
  void Freeze(std::vector<PlanEntry> entries, const std::vector<int64_t>& groups,
              const absl::flat_hash_set<int32_t>& already_agreed, absl::Duration step_time);

  // Drops the plan. Returns the operations submitted for it and not started, for negotiation.
  // Started units run to completion.
  std::vector<PendingOp> Unfreeze();

  // True when the plan runs `name` (and the runtime must hand its submissions to Add).
  bool Owns(const std::string& name) const { return frozen_ && entry_of_.contains(name); }
  void Add(PendingOp op);

  // This rank has a Join pending (true) - it contributes zeros to every unit.
  void SetJoined(bool joined);
  // Negotiation agreed the Join. Returns it if it may complete now; otherwise keeps it until a
  // unit's check shows every rank joined.
  std::optional<PendingOp> JoinAgreed(PendingOp join);

  // Starts units, finishes checks and collectives. Operations that must be negotiated again are
  // appended to `renegotiate`. An error means the job cannot continue (a collective failed, or a
  // started unit stalled past OVERLAP_STALL_TIMEOUT_S: it cannot be withdrawn).
  absl::Status Progress(std::vector<PendingOp>* renegotiate);

  // A unit's check found a diverged tensor: the runtime must Unfreeze now.
  bool must_unfreeze() const { return must_unfreeze_; }
  // Blocked on the plan for longer than the patience: ask (in a round) to drop it. True once per
  // patience interval, so that the caller asks for a round each time.
  bool TakeUnfreezeWish();
  bool wants_unfreeze() const { return wants_unfreeze_; }

  // A started unit has waited on its peers long enough to ask, in a round, which ranks have
  // started it (at the stall warning, at the stall timeout, and every so often in between so that
  // an unreachable peer ends the round with OVERLAP_COLLECTIVE_TIMEOUT_S). True once per probe.
  bool TakeReportWish();
  // Every rank's launch count, from that round: warns or fails naming the ranks.
  void OnReport(const std::vector<uint64_t>& counts);

  // Nothing started and unfinished.
  bool idle() const { return launches_.empty() && plane_.idle(); }
  uint64_t launches() const { return launch_count_; }
  const absl::flat_hash_set<int32_t>& planned_ids() const { return planned_ids_; }
  // When Progress must run again even if nothing happens (stall warnings, patience).
  absl::Time NextDeadline() const;
  // Names of tensors in started, unfinished units (for errors at shutdown).
  std::string DescribeStarted() const;

  // Fails every held operation; hands back the submitted, unstarted ones.
  std::vector<PendingOp> FailAll(const absl::Status& status);

 private:
  enum class JoinState { kNone, kJoined, kAllJoined };
  struct Launch {
    int unit = 0;
    std::vector<std::shared_ptr<const Response>> responses;  // the unit's entries, this pass
    std::vector<uint64_t> check;                             // [diverged entries][joined ranks]
    MPI_Request request = MPI_REQUEST_NULL;
    bool checked = false;
    std::vector<bool> diverged;                 // by entry, once checked
    absl::flat_hash_set<std::string> expected;  // names whose collective has not finished
    std::vector<std::pair<PendingOp, absl::Status>> done;
    std::vector<PendingOp> diverged_here;  // submitted differently here: sent as zeros
    uint64_t number = 0;                   // this launch's place in the sequence, from 1
    absl::Time started;
    absl::Time checked_at;  // every rank has started it from here on
    absl::Time next_probe;
    bool warned = false;
  };

  bool CanLaunch() const;
  absl::Status LaunchNext();
  void OnChecked(Launch* launch);
  void Finish(Launch* launch, std::vector<PendingOp>* renegotiate);
  void OnDataDone(PendingOp& op, const absl::Status& status);
  std::string UnitNames(const std::vector<std::shared_ptr<const Response>>& responses) const;
  void Advance();

  const Config config_;
  const int rank_;
  const int size_;
  const std::vector<std::string> hosts_;
  Timeline* const timeline_;
  const DataPlane::CompleteFn complete_;
  std::unique_ptr<Executor> executor_;
  MPI_Comm check_comm_;
  DataPlane plane_;

  bool frozen_ = false;
  std::vector<PlanEntry> entries_;
  std::vector<std::vector<int>> units_;
  absl::flat_hash_map<std::string, int> entry_of_;
  absl::flat_hash_set<int32_t> planned_ids_;
  absl::flat_hash_set<int32_t> skip_;  // first pass only
  int next_unit_ = 0;
  absl::flat_hash_map<int, PendingOp> waiting_;  // by entry: submitted, not started
  std::deque<Launch> launches_;
  uint64_t launch_count_ = 0;
  bool must_unfreeze_ = false;
  absl::Status stalled_;  // set by OnReport: the job cannot continue
  JoinState join_ = JoinState::kNone;
  std::optional<PendingOp> held_join_;

  absl::Duration patience_ = absl::Seconds(1);
  absl::Time blocked_since_ = absl::InfiniteFuture();
  bool blocked_warned_ = false;
  bool wants_unfreeze_ = false;
  absl::Time last_wish_ = absl::InfinitePast();
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_PLANNED_MODE_H_
