#include "pending.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace overlap_tf {
namespace {

struct Table {
  std::mutex mu;
  std::map<std::string, PendingReduction> parked;
  std::vector<PendingReduction> abandoned;  // until their allreduces end
};

Table& TheTable() {
  static Table* table = new Table();  // never destroyed: see pending.h
  return *table;
}

// Frees the abandoned reductions whose allreduces have ended. Called with table.mu held.
void Reap(Table& table) {
  std::vector<PendingReduction> running;
  for (PendingReduction& pending : table.abandoned) {
    if (overlap_handle_poll(pending.handle) == 1) {
      overlap_handle_free(pending.handle);
    } else {
      running.push_back(std::move(pending));
    }
  }
  table.abandoned = std::move(running);
}

}  // namespace

absl::Status Park(const std::string& name, PendingReduction pending) {
  Table& table = TheTable();
  std::lock_guard<std::mutex> lock(table.mu);
  Reap(table);
  auto [it, added] = table.parked.emplace(name, std::move(pending));
  if (!added) {
    return absl::FailedPreconditionError(
        "overlap: rank " + std::to_string(overlap_rank()) + ": gradient '" + name +
        "' was submitted again while the update of its previous submission was never applied "
        "(a step's apply() ran twice with no forward or apply_pending_updates() between)");
  }
  return absl::OkStatus();
}

std::optional<PendingReduction> Collect(const std::string& name) {
  Table& table = TheTable();
  std::lock_guard<std::mutex> lock(table.mu);
  auto it = table.parked.find(name);
  if (it == table.parked.end()) return std::nullopt;
  PendingReduction pending = std::move(it->second);
  table.parked.erase(it);
  return pending;
}

bool Abandon(const std::string& name) {
  Table& table = TheTable();
  std::lock_guard<std::mutex> lock(table.mu);
  auto it = table.parked.find(name);
  const bool parked = it != table.parked.end();
  if (parked) {
    table.abandoned.push_back(std::move(it->second));
    table.parked.erase(it);
  }
  Reap(table);  // this one too, if its allreduce has ended
  return parked;
}

bool IsParked(const std::string& name) {
  Table& table = TheTable();
  std::lock_guard<std::mutex> lock(table.mu);
  return table.parked.count(name) > 0;
}

int ParkedCount() {
  Table& table = TheTable();
  std::lock_guard<std::mutex> lock(table.mu);
  return static_cast<int>(table.parked.size());
}

}  // namespace overlap_tf

extern "C" int overlap_tf_is_parked(const char* name) {
  return name != nullptr && overlap_tf::IsParked(name) ? 1 : 0;
}

extern "C" int overlap_tf_abandon_parked(const char* name) {
  return name != nullptr && overlap_tf::Abandon(name) ? 1 : 0;
}

extern "C" int overlap_tf_parked_reductions(void) { return overlap_tf::ParkedCount(); }
