// Negotiation: which submitted operations are ready on every rank, agreed in rounds.
//
// A round is collective over the control collectives (runtime/control/control_collectives.h: MPI in the
// runtime, an in-process fake in tests). Every rank contributes a bit vector with
// one bit per cached operation it has pending, and one bitwise-AND allreduce tells all ranks which
// cached operations are ready everywhere (Horovod's response cache). Only when some rank has an
// operation the cache does not know (first sight, changed shape) do the ranks also gather those
// requests at rank 0, which checks that they agree (runtime/negotiation/matcher.h), assigns cache ids, and
// broadcasts the responses. Steady-state training therefore costs one small allreduce per round.
//
// Rank 0 is also the stall inspector: it warns, naming the ranks that have and have not submitted,
// when an operation is ready on some ranks but not others for stall_warning_s, and fails it after
// stall_timeout_s. A rank that has called Shutdown will submit nothing more, so an operation it
// lacks fails at once, naming it (a rank whose program ended early, by sys.exit say, while the
// others wait on it: as under Horovod, they fail instead of waiting out the timeouts). Likewise
// an operation other than allreduce that a joined rank lacks fails on every rank that submitted
// it as soon as rank 0 knows of both, whatever its name on the other ranks (automatic names,
// numbered per process, differ once some ranks have joined).
//
// Threading: the coordinator thread only.
#ifndef OVERLAP_RUNTIME_NEGOTIATION_NEGOTIATOR_H_
#define OVERLAP_RUNTIME_NEGOTIATION_NEGOTIATOR_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/config.h"
#include "runtime/control/control_collectives.h"
#include "runtime/negotiation/messages.h"
#include "runtime/api/pending_op.h"

namespace overlap {

// An operation every rank agreed to run now. `op` is empty on a rank that has joined and only
// contributes zeros.
struct ReadyOp {
  std::shared_ptr<const Response> response;
  std::optional<PendingOp> op;
};

// Agreed operations on host tensors and on CUDA tensors, each in the agreed order: the two go to
// different data planes.
struct ReadyByDevice {
  std::vector<ReadyOp> host, cuda;
};
ReadyByDevice SplitByDevice(std::vector<ReadyOp> ready);

// What planned execution (runtime/planes/planned_mode.h) adds to a round.
struct PlanVote {
  uint64_t launches = 0;        // planned collectives this rank has started so far
  bool wants_unfreeze = false;  // this rank is blocked on the plan and asks to drop it
  bool wants_report = false;    // a planned unit waits on peers: gather every rank's count
  // This rank has shut down and will start no planned collective again (nothing runs, and the
  // next unit lacks tensors it will never get): reported with the count.
  bool starts_nothing_more = false;
  // Cache ids the plan runs: a joined rank must not announce them here.
  const absl::flat_hash_set<int32_t>* planned_ids = nullptr;
};

struct RoundResult {
  std::vector<ReadyOp> ready;                             // in the same order on every rank
  std::vector<std::pair<PendingOp, std::string>> failed;  // with the error text
  bool all_shutting_down = false;
  bool any_shutting_down = false;  // some rank has called Shutdown and has nothing left to run
  bool resend = false;             // some pending operations must be sent again next round
  bool evicted = false;            // cache ids were invalidated
  // The planned-launch count, when every rank reported the same one: then no planned collective
  // is started on some ranks and not others, and the plan may be changed.
  std::optional<uint64_t> agreed_launches;
  bool unfreeze_wanted = false;         // some rank asked to drop the plan
  std::vector<uint64_t> launch_counts;  // by rank, when some rank asked for a report
  std::vector<bool> starts_nothing_more;  // by rank, with launch_counts
};

class Negotiator {
 public:
  // `control` carries rounds only; its rank and size are this rank's place. `hosts[r]` names
  // rank r's host in messages. `check_peers` runs while a round waits and ends it with its error
  // (a lost peer), instead of waiting for collective_timeout_s.
  Negotiator(std::unique_ptr<ControlCollectives> control, const Config& config,
             std::vector<std::string> hosts, std::function<absl::Status()> check_peers);

  // Runs one round. Moves operations that became ready or failed out of `pending`. `joined`:
  // this rank has called Join and contributes zeros to every allreduce. DeadlineExceeded or
  // Unavailable, naming the round, when a peer does not take part within collective_timeout_s;
  // Unavailable naming the rank, the round's step and the failed call when a collective fails.
  absl::StatusOr<RoundResult> RunRound(PendingTable* pending, bool joined, bool shutting_down,
                                       const PlanVote& vote = PlanVote());

  // Collective like a round: every rank calls it at the same point of the agreed sequence (when
  // a plan freezes). ORs `bits` over the ranks in place; errors as RunRound's.
  absl::Status OrAcrossRanks(std::vector<uint64_t>* bits);

  // The agreed operation and this rank's own request behind cache id `id`; null when not valid.
  std::shared_ptr<const Response> CachedResponse(int32_t id) const;
  const Request* CachedLocalRequest(int32_t id) const;
  // The cache id agreed for `name`, or -1.
  int32_t CachedId(const std::string& name) const;

  // Stops tracking stalls of `ids` (they left negotiation for a plan).
  void ForgetStalls(const absl::flat_hash_set<int32_t>& ids);

  // Rank 0: when the stall inspector next needs a round even if nothing else happens.
  absl::Time NextStallCheck() const;

 private:
  struct CacheEntry {
    std::shared_ptr<const Response> response;
    Request local;  // what this rank submitted when the entry was made
    bool valid = false;
  };
  // Rank 0's record of requests not yet matched.
  struct TableEntry {
    std::vector<std::optional<Request>> requests;
    absl::Time first_seen;
    bool warned = false;
  };
  struct CachedStall {
    absl::Time first_seen;
    bool warned = false;
    std::vector<int> ready_ranks;  // filled by a stall gather
    // ready_ranks were gathered after the set of joined ranks last changed, so the join check
    // (RefuseDuringJoin) has seen this stall with its current ranks.
    bool join_checked = false;
  };

  // Starts one collective of the round and waits for it; errors name the rank and `what`.
  absl::Status Run(const std::function<absl::StatusOr<std::unique_ptr<ControlRequest>>()>& start,
                   const char* what);
  std::vector<uint64_t> ReadyBits(const PendingTable& pending, bool joined,
                                  const absl::flat_hash_set<int32_t>* planned_ids) const;
  std::string EncodeGather(PendingTable* pending, bool include_ready,
                           const std::vector<uint64_t>& bits, bool shutting_down) const;
  // Rank 0.
  absl::Status AbsorbGather(const std::string& bytes, int from, std::vector<int32_t>* evictions);
  void MatchTable(std::vector<Response>* responses);
  void InspectStalls(const std::vector<uint64_t>& all, const std::vector<uint64_t>& any,
                     bool gathered, bool may_fail, std::vector<Response>* responses);
  // For a stalled table entry: another stalled entry of the same kind, dtype and shape
  // submitted by exactly the ranks that lack `name` suggests the ranks name one tensor
  // differently;
  // the hint says so ("; ranks [..] submitted allreduce 'x' of the same dtype and shape
  // instead: ..."), else it is empty.
  std::string RenamedTensorHint(const std::string& name) const;
  // The ranks that submitted `entry` (and in *request the last one's request); the ranks not in
  // `ranks`.
  std::vector<int> SubmittedBy(const TableEntry& entry, const Request** request) const;
  std::vector<int> OtherRanks(const std::vector<int>& ranks) const;
  // The ranks in `missing` that have shut down and would have to submit an operation of `kind`.
  std::vector<int> ShutDownAmong(const std::vector<int>& missing, OpKind kind) const;
  bool StallGatherDue() const;
  // Rank 0, Horovod's rule that only allreduce may run while some ranks have joined: an
  // operation of another kind that a joined rank lacks can never run (the joined rank submits
  // nothing until its Join completes, and that needs every rank to join). Fails each such table
  // entry, and, when `gathered` (ready_ranks are current), each such cached stall, naming the
  // joined ranks. Without this the entry would wait out stall_timeout_s.
  void RefuseDuringJoin(bool gathered, std::vector<Response>* responses);
  // Rank 0: some rank has joined and a cached operation other than allreduce is pending on some
  // ranks but not yet join-checked: the next round must gather the ready lists.
  bool JoinCheckDue() const;
  std::vector<int> JoinedRanks() const;
  void ApplyResponses(std::vector<int32_t> evictions, std::vector<Response> responses,
                      const std::vector<uint64_t>& all_ready, PendingTable* pending, bool joined,
                      RoundResult* result);

  const std::unique_ptr<ControlCollectives> control_;
  const Config config_;
  const std::function<absl::Status()> check_peers_;
  const std::vector<std::string> hosts_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<CacheEntry> cache_;
  absl::flat_hash_map<std::string, int32_t> cache_ids_;
  // Rank 0 only.
  std::vector<std::string> table_order_;
  absl::flat_hash_map<std::string, TableEntry> table_;
  std::vector<bool> joined_;
  std::vector<bool> shut_down_;  // ranks whose gathers said they are shutting down
  absl::flat_hash_map<int32_t, CachedStall> cached_stalls_;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_NEGOTIATION_NEGOTIATOR_H_
