#include "runtime/api/process_sets.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/mpi_executor.h"
#include "collectives/mpi_wait.h"
#include "runtime/control/agreement.h"

namespace overlap {
namespace {

// The communicator of `ranks` (global ranks, valid), on a member: collective over the members
// of `world` that `ranks` names, and only them.
absl::StatusOr<MPI_Comm> SubCommunicator(MPI_Comm world, int rank, int id,
                                         const std::vector<int>& ranks) {
  const std::string what = absl::StrCat("rank ", rank, ": AddProcessSet(", RanksText(ranks),
                                        "): the communicator of process set ", id, ": ");
  MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  absl::Status s = MpiCheck(MPI_Comm_group(world, &world_group), what + "MPI_Comm_group");
  if (s.ok()) {
    s = MpiCheck(MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group),
                 what + "MPI_Group_incl");
  }
  // The set's id is the tag: sets made one after another never match each other's messages.
  if (s.ok()) s = MpiCheck(MPI_Comm_create_group(world, group, id, &comm), what + "MPI_Comm_create_group");
  if (group != MPI_GROUP_NULL) (void)MPI_Group_free(&group);
  if (world_group != MPI_GROUP_NULL) (void)MPI_Group_free(&world_group);
  if (!s.ok()) return s;
  return comm;
}

}  // namespace

std::string RanksText(const std::vector<int>& ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ", "), "]");
}

absl::StatusOr<std::unique_ptr<ProcessSets>> ProcessSets::Create(const Config& config, int rank,
                                                                 int size) {
  std::unique_ptr<ProcessSets> sets(new ProcessSets(config, rank, size));
  const std::string what = absl::StrCat("rank ", rank, ": the process-set communicator: ");
  absl::Status s = MpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &sets->comm_), what + "MPI_Comm_dup");
  if (s.ok()) {
    s = MpiCheck(MPI_Comm_set_errhandler(sets->comm_, MPI_ERRORS_RETURN),
                 what + "MPI_Comm_set_errhandler");
  }
  if (!s.ok()) return s;
  return sets;
}

ProcessSets::~ProcessSets() = default;

std::string ProcessSets::Problem(const std::vector<int>& ranks) const {
  if (ranks.empty()) return "a process set needs at least one rank";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size_) {
      return absl::StrCat("rank ", ranks[i], " is out of range (the job has ranks 0..", size_ - 1,
                          ")");
    }
    if (i > 0 && ranks[i] == ranks[i - 1]) return absl::StrCat("rank ", ranks[i], " is listed twice");
    if (i > 0 && ranks[i] < ranks[i - 1]) {
      return absl::StrCat("the ranks must be in increasing order (", ranks[i - 1], " comes before ",
                          ranks[i], ")");
    }
  }
  if (static_cast<int>(ranks.size()) == size_) {
    return "these are all the ranks, which the global process set 0 already has";
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [id, entry] : sets_) {
    if (entry.ranks == ranks) return absl::StrCat("process set ", id, " already has these ranks");
  }
  return "";
}

absl::Status ProcessSets::AgreeOnRequest(const std::string& word, absl::string_view call) {
  absl::StatusOr<std::vector<std::string>> words =
      AllgatherStrings(comm_, rank_, size_, word, limit(), call, "OVERLAP_START_TIMEOUT_S");
  if (!words.ok()) return words.status();
  // Who asked for what, in order of first appearance.
  std::vector<std::pair<std::string, std::vector<int>>> asked;
  for (int r = 0; r < size_; ++r) {
    auto it = std::find_if(asked.begin(), asked.end(),
                           [&](const auto& a) { return a.first == (*words)[r]; });
    if (it == asked.end()) {
      asked.push_back({(*words)[r], {r}});
    } else {
      it->second.push_back(r);
    }
  }
  if (asked.size() == 1) return absl::OkStatus();
  std::vector<std::string> parts;
  for (const auto& [what, who] : asked) {
    parts.push_back(absl::StrCat(who.size() == 1 ? "rank " : "ranks ", absl::StrJoin(who, ", "),
                                 " asked for ", what));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      call, ": every rank must make the same call, in the same order: ",
      absl::StrJoin(parts, "; ")));
}

absl::Status ProcessSets::AgreeOnOutcome(const absl::Status& mine, absl::string_view call) {
  absl::StatusOr<std::vector<std::string>> words = AllgatherStrings(
      comm_, rank_, size_, mine.ok() ? "" : std::string(mine.message()), limit(), call,
      "OVERLAP_START_TIMEOUT_S");
  if (!words.ok()) return words.status();
  std::vector<std::string> reasons;
  for (std::string& word : *words) {
    if (!word.empty()) reasons.push_back(std::move(word));
  }
  if (reasons.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(call, " failed: ", absl::StrJoin(reasons, "; ")));
}

absl::StatusOr<int> ProcessSets::Add(const std::vector<int>& ranks) {
  absl::MutexLock admin(&admin_mu_);
  const std::string call = absl::StrCat("AddProcessSet(", RanksText(ranks), ")");
  absl::Status agreed = AgreeOnRequest(RanksText(ranks), "AddProcessSet");
  if (!agreed.ok()) return agreed;
  // Every rank asked for the same ranks and knows the same sets: the same verdict everywhere.
  const std::string problem = Problem(ranks);
  if (!problem.empty()) return absl::InvalidArgumentError(absl::StrCat(call, ": ", problem));
  const int id = next_id_++;
  // From the first set on, several coordinator threads start Iallreduces at once: the process-wide
  // algorithm setting must stop changing with each call, on every rank from the same point.
  PinIallreduceAlgorithm();
  std::shared_ptr<Runtime> runtime;
  absl::Status started = absl::OkStatus();
  if (std::binary_search(ranks.begin(), ranks.end(), rank_)) {
    absl::StatusOr<MPI_Comm> comm = SubCommunicator(comm_, rank_, id, ranks);
    if (comm.ok()) {
      absl::StatusOr<std::unique_ptr<Runtime>> rt =
          Runtime::StartProcessSet(*comm, id, ranks, config_);
      (void)MPI_Comm_free(&*comm);  // the runtime keeps a duplicate
      if (rt.ok()) {
        runtime = std::move(*rt);
      } else {
        started = rt.status();
      }
    } else {
      started = comm.status();
    }
  }
  absl::Status outcome = AgreeOnOutcome(started, call);
  if (!outcome.ok()) {
    if (runtime != nullptr) (void)runtime->Shutdown();
    return outcome;
  }
  absl::MutexLock lock(&mu_);
  sets_[id] = Entry{ranks, std::move(runtime)};
  return id;
}

absl::Status ProcessSets::Remove(int id) {
  absl::MutexLock admin(&admin_mu_);
  const std::string call = absl::StrCat("RemoveProcessSet(", id, ")");
  absl::Status agreed = AgreeOnRequest(absl::StrCat("process set ", id), "RemoveProcessSet");
  if (!agreed.ok()) return agreed;
  Entry entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = sets_.find(id);
    if (it == sets_.end()) {
      if (id == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(call, ": the global process set 0 cannot be removed"));
      }
      if (removed_.count(id) > 0) {
        return absl::InvalidArgumentError(absl::StrCat(call, ": process set ", id,
                                                       " was removed already"));
      }
      std::vector<int> ids;
      for (const auto& [known, unused] : sets_) ids.push_back(known);
      return absl::InvalidArgumentError(
          absl::StrCat(call, ": process set ", id, " is not registered (registered: 0",
                       ids.empty() ? "" : ", ", absl::StrJoin(ids, ", "), ")"));
    }
    // From here submissions to the set fail as removed, on every rank.
    entry = std::move(it->second);
    sets_.erase(it);
    removed_.insert(id);
  }
  absl::Status stopped = entry.runtime != nullptr ? entry.runtime->Shutdown() : absl::OkStatus();
  return AgreeOnOutcome(stopped, call);
}

void ProcessSets::AbortAll(const absl::Status& reason) {
  std::vector<std::shared_ptr<Runtime>> runtimes;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, entry] : sets_) {
      if (entry.runtime != nullptr) runtimes.push_back(entry.runtime);
    }
  }
  for (const std::shared_ptr<Runtime>& runtime : runtimes) runtime->Abort(reason);
}

absl::Status ProcessSets::ShutdownAll() {
  absl::MutexLock admin(&admin_mu_);
  std::map<int, Entry> sets;
  {
    absl::MutexLock lock(&mu_);
    sets.swap(sets_);
    for (const auto& [id, unused] : sets) removed_.insert(id);
  }
  // Each set's shutdown is collective over its members; every rank goes in id order, so no two
  // members wait for each other in different sets. Every set hears first that this rank is
  // leaving, so members waiting on it elsewhere fail instead of waiting for it here.
  for (auto& [id, entry] : sets) {
    if (entry.runtime != nullptr) entry.runtime->RequestShutdown();
  }
  absl::Status first = absl::OkStatus();
  for (auto& [id, entry] : sets) {
    if (entry.runtime == nullptr) continue;
    absl::Status s = entry.runtime->Shutdown();
    if (!s.ok() && first.ok()) first = s;
  }
  if (comm_ != MPI_COMM_NULL) {
    absl::Status s = MpiCheck(
        MPI_Comm_free(&comm_),
        absl::StrCat("rank ", rank_, ": Shutdown: MPI_Comm_free of the process-set communicator"));
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

absl::StatusOr<std::shared_ptr<Runtime>> ProcessSets::Find(int id, absl::string_view what) const {
  const std::string here = absl::StrCat("rank ", rank_, ": ", what, ": ");
  absl::MutexLock lock(&mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    if (removed_.count(id) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(here, "process set ", id, " was removed (RemoveProcessSet)"));
    }
    std::vector<int> ids = {0};
    for (const auto& [known, unused] : sets_) ids.push_back(known);
    return absl::InvalidArgumentError(absl::StrCat(here, "process set ", id,
                                                   " is not registered (registered: ",
                                                   absl::StrJoin(ids, ", "), ")"));
  }
  if (it->second.runtime == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(here, "rank ", rank_,
                                                   " is not a member of process set ", id,
                                                   " (ranks ", RanksText(it->second.ranks), ")"));
  }
  return it->second.runtime;
}

absl::StatusOr<std::vector<int>> ProcessSets::Ranks(int id) const {
  absl::MutexLock lock(&mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    return absl::NotFoundError(absl::StrCat("rank ", rank_, ": process set ", id,
                                            removed_.count(id) > 0 ? " was removed"
                                                                  : " is not registered"));
  }
  return it->second.ranks;
}

std::vector<int> ProcessSets::Ids() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> ids;
  for (const auto& [id, unused] : sets_) ids.push_back(id);
  return ids;
}

}  // namespace overlap
