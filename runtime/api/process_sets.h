// The process sets of a process beyond the global one (overlap.h, AddProcessSet).
//
// Every rank knows every set: its id and its global ranks, registered and removed by calls that
// every rank makes in the same order, so ids agree without being sent. A member of a set also
// holds the set's Runtime: a complete runtime over the set's sub-communicator (runtime.h). A
// non-member holds the id and ranks only, to refuse a submission to the set by name.
//
// Add and Remove first agree over all ranks (runtime/control/agreement.h) on what was asked and whether
// it is valid, so that every rank fails the same way or none does; the sub-communicator comes
// from MPI_Comm_create_group, collective over the members only.
//
// Threading: Add, Remove and ShutdownAll are collective and serialised against each other; Find
// and the queries may be called from any thread at any time.
#ifndef OVERLAP_RUNTIME_API_PROCESS_SETS_H_
#define OVERLAP_RUNTIME_API_PROCESS_SETS_H_

#include <mpi.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "runtime/config.h"
#include "runtime/api/runtime.h"

namespace overlap {

class ProcessSets {
 public:
  // Collective over MPI_COMM_WORLD (it duplicates it for its agreements). `config` is the global
  // runtime's: each set's runtime starts from it, and its start_timeout_s bounds every wait here.
  static absl::StatusOr<std::unique_ptr<ProcessSets>> Create(const Config& config, int rank,
                                                             int size);
  ~ProcessSets();

  // Registers a set of the global `ranks` (sorted, unique, in range, not the global set's, not
  // registered yet) and starts its runtime on its members. Returns its id, the same on every
  // rank: 1 for the first set, then one more for each set ever added. InvalidArgument, with the
  // same message on every rank, for invalid ranks or when ranks asked for different sets.
  absl::StatusOr<int> Add(const std::vector<int>& ranks);

  // Shuts the set's runtime down on its members (operations not submitted by every member fail)
  // and forgets the set. InvalidArgument, the same on every rank, for id 0, an unknown or removed
  // id, or when ranks asked to remove different sets.
  absl::Status Remove(int id);

  // Shuts every set's runtime down, in id order, and frees the registry's communicator: before
  // the global runtime shuts down. Returns the first error.
  absl::Status ShutdownAll();

  // Not collective: aborts every set's runtime on this rank (Runtime::Abort), keeping the
  // registry; a ShutdownAll afterwards returns at once.
  void AbortAll(const absl::Status& reason);

  // The runtime of set `id` on this rank, for submitting `what` (e.g. "allreduce 'w'").
  // InvalidArgument naming this rank, `what` and the cause: an id never registered, a removed
  // set, or a set this rank is not a member of (with the set's ranks).
  absl::StatusOr<std::shared_ptr<Runtime>> Find(int id, absl::string_view what) const;

  // The global ranks of set `id` (on every rank, member or not); NotFound for an unknown id.
  absl::StatusOr<std::vector<int>> Ranks(int id) const;
  // The ids of the registered sets, in increasing order (0, the global set, not included).
  std::vector<int> Ids() const;

 private:
  struct Entry {
    std::vector<int> ranks;
    std::shared_ptr<Runtime> runtime;  // null on non-members
  };

  ProcessSets(const Config& config, int rank, int size) : config_(config), rank_(rank), size_(size) {}
  // Why `ranks` cannot be added, or "" when they can.
  std::string Problem(const std::vector<int>& ranks) const;
  // Every rank's word; InvalidArgument "<call>: ..." when they differ, naming who said what.
  absl::Status AgreeOnRequest(const std::string& word, absl::string_view call);
  // Every rank's error, agreed: OK when no rank had one.
  absl::Status AgreeOnOutcome(const absl::Status& mine, absl::string_view call);
  absl::Duration limit() const { return absl::Seconds(config_.start_timeout_s); }

  const Config config_;
  const int rank_;
  const int size_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  absl::Mutex admin_mu_;  // held through Add, Remove and ShutdownAll
  int next_id_ = 1;       // under admin_mu_
  mutable absl::Mutex mu_;
  std::map<int, Entry> sets_ ABSL_GUARDED_BY(mu_);
  std::set<int> removed_ ABSL_GUARDED_BY(mu_);
};

// "[1, 2, 3]"
std::string RanksText(const std::vector<int>& ranks);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_API_PROCESS_SETS_H_
