#include "runtime/negotiation/negotiator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/negotiation/matcher.h"
#include "runtime/negotiation/rank_bits.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// Word 0 of the round vector. Every flag is phrased so that the bitwise AND over ranks answers
// the question the round needs: "true on every rank".
constexpr uint64_t kNoUncached = 1;     // cleared by a rank with requests the cache lacks
constexpr uint64_t kShutdown = 2;       // set by a rank that is shutting down
// Cleared by rank 0 to collect per-rank ready lists, and by a rank that is shutting down: rank 0
// must learn which ranks those are.
constexpr uint64_t kNoStallGather = 4;
constexpr uint64_t kNoBroadcast = 8;    // cleared by rank 0 when it has responses to send
constexpr uint64_t kNoUnfreeze = 16;    // cleared by a rank that asks to drop the frozen plan
constexpr uint64_t kNoPlanReport = 32;  // cleared by a rank that wants every rank's launch count
constexpr uint64_t kNoShutdown = 64;    // cleared by a rank that is shutting down

constexpr uint64_t kNothingMoreBit = uint64_t{1} << 63;  // in a reported launch count

std::string Seconds(absl::Duration d) { return absl::StrCat(absl::ToInt64Seconds(d), " s"); }

}  // namespace

Negotiator::Negotiator(std::unique_ptr<ControlCollectives> control, const Config& config,
                       std::vector<std::string> hosts, std::function<absl::Status()> check_peers)
    : control_(std::move(control)),
      config_(config),
      check_peers_(std::move(check_peers)),
      hosts_(std::move(hosts)),
      rank_(control_->rank()),
      size_(control_->size()) {
  joined_.assign(static_cast<size_t>(size_), false);
  shut_down_.assign(static_cast<size_t>(size_), false);
}

absl::Status Negotiator::Run(
    const std::function<absl::StatusOr<std::unique_ptr<ControlRequest>>()>& start,
    const char* what) {
  return RunControl(
      start, absl::Seconds(config_.collective_timeout_s),
      absl::StrCat("rank ", rank_, ": negotiation (", what, ", OVERLAP_COLLECTIVE_TIMEOUT_S)"),
      check_peers_);
}

std::shared_ptr<const Response> Negotiator::CachedResponse(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= cache_.size() || !cache_[id].valid) return nullptr;
  return cache_[static_cast<size_t>(id)].response;
}

int32_t Negotiator::CachedId(const std::string& name) const {
  auto it = cache_ids_.find(name);
  return it == cache_ids_.end() ? -1 : it->second;
}

const Request* Negotiator::CachedLocalRequest(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= cache_.size() || !cache_[id].valid) return nullptr;
  return &cache_[static_cast<size_t>(id)].local;
}

std::vector<uint64_t> Negotiator::ReadyBits(const PendingTable& pending, bool joined,
                                            const absl::flat_hash_set<int32_t>* planned_ids) const {
  std::vector<uint64_t> bits(Words(cache_.size()), 0);
  for (const auto& [name, op] : pending) {
    if (op.cache_id >= 0) SetBit(&bits, static_cast<size_t>(op.cache_id));
  }
  if (joined) {  // a joined rank stands ready for every allreduce, with zeros
    for (size_t id = 0; id < cache_.size(); ++id) {
      const bool planned =
          planned_ids != nullptr && planned_ids->contains(static_cast<int32_t>(id));
      if (cache_[id].valid && cache_[id].response->request.kind == OpKind::kAllreduce && !planned) {
        SetBit(&bits, id);
      }
    }
  }
  return bits;
}

std::string Negotiator::EncodeGather(PendingTable* pending, bool include_ready,
                                     const std::vector<uint64_t>& bits,
                                     bool shutting_down) const {
  ByteWriter out;
  std::vector<PendingOp*> unsent;
  for (auto& [name, op] : *pending) {
    if (op.cache_id < 0 && !op.sent) unsent.push_back(&op);
  }
  out.PutI64(static_cast<int64_t>(unsent.size()));
  for (PendingOp* op : unsent) {
    EncodeRequest(op->request, &out);
    op->sent = true;
  }
  std::vector<int64_t> ready;
  if (include_ready) {
    for (size_t id = 0; id < cache_.size(); ++id) {
      if (TestBit(bits, id)) ready.push_back(static_cast<int64_t>(id));
    }
  }
  out.PutI64s(ready);
  out.PutI64(shutting_down ? 1 : 0);
  return std::move(out.bytes());
}

absl::Status Negotiator::AbsorbGather(const std::string& bytes, int from,
                                      std::vector<int32_t>* evictions) {
  ByteReader in(bytes);
  int64_t count = 0;
  absl::Status s = in.GetI64(&count);
  if (!s.ok()) return s;
  const absl::Time now = absl::Now();
  for (int64_t i = 0; i < count; ++i) {
    Request request;
    s = DecodeRequest(&in, &request);
    if (!s.ok()) return s;
    if (request.kind == OpKind::kJoin) {
      joined_[static_cast<size_t>(from)] = true;
      for (auto& [id, stall] : cached_stalls_) stall.join_checked = false;
    }
    // A name the cache knows, sent whole, means this rank's request changed: every rank must
    // send it whole again so that rank 0 can compare them.
    auto cached = cache_ids_.find(request.name);
    if (cached != cache_ids_.end() &&
        std::find(evictions->begin(), evictions->end(), cached->second) == evictions->end()) {
      evictions->push_back(cached->second);
    }
    auto [it, inserted] = table_.try_emplace(request.name);
    if (inserted) {
      it->second.requests.resize(static_cast<size_t>(size_));
      it->second.first_seen = now;
      table_order_.push_back(request.name);
    }
    it->second.requests[static_cast<size_t>(from)] = std::move(request);
  }
  std::vector<int64_t> ready;
  s = in.GetI64s(&ready);
  if (!s.ok()) return s;
  // Every id, not only known stalls: a stall first seen in this round needs its ranks too, to
  // tell whether a shut-down rank lacks it. InspectStalls drops the ids ready everywhere.
  for (int64_t id : ready) {
    cached_stalls_.try_emplace(static_cast<int32_t>(id), CachedStall{now, false, {}, false})
        .first->second.ready_ranks.push_back(from);
  }
  int64_t shutting_down = 0;
  s = in.GetI64(&shutting_down);
  if (!s.ok()) return s;
  if (shutting_down != 0) shut_down_[static_cast<size_t>(from)] = true;
  return absl::OkStatus();
}

void Negotiator::MatchTable(std::vector<Response>* responses) {
  std::vector<std::string> still_waiting;
  for (const std::string& name : table_order_) {
    auto it = table_.find(name);
    if (it == table_.end()) continue;  // failed by the stall inspector
    const TableEntry& entry = it->second;
    OpKind kind = OpKind::kAllreduce;
    for (const auto& r : entry.requests) {
      if (r.has_value()) kind = r->kind;
    }
    bool complete = true;
    std::vector<const Request*> requests;
    for (int r = 0; r < size_; ++r) {
      const auto& request = entry.requests[static_cast<size_t>(r)];
      if (!request.has_value() && (kind == OpKind::kJoin || !joined_[static_cast<size_t>(r)])) {
        complete = false;
        break;
      }
      requests.push_back(request.has_value() ? &*request : nullptr);
    }
    if (!complete) {
      still_waiting.push_back(name);
      continue;
    }
    Response response = MatchRequests(requests);
    if (response.error.empty() && kind != OpKind::kJoin) {
      response.cache_id = static_cast<int32_t>(
          cache_.size() + static_cast<size_t>(std::count_if(
                              responses->begin(), responses->end(), [](const Response& r) {
                                return r.cache_id >= 0 && r.error.empty();
                              })));
    }
    if (kind == OpKind::kJoin) joined_.assign(static_cast<size_t>(size_), false);
    responses->push_back(std::move(response));
    table_.erase(it);
  }
  table_order_ = std::move(still_waiting);
}

void Negotiator::InspectStalls(const std::vector<uint64_t>& all, const std::vector<uint64_t>& any,
                               bool gathered, bool may_fail, std::vector<Response>* responses) {
  const absl::Time now = absl::Now();
  const absl::Duration warning = absl::Seconds(config_.stall_warning_s);
  const absl::Duration timeout = absl::Seconds(config_.stall_timeout_s);
  auto report = [&](const Request& request, const std::vector<int>& have, absl::Duration age,
                    bool fail, int32_t cache_id, const std::string& hint = "") {
    const std::vector<int> missing = OtherRanks(have);
    const std::string text =
        absl::StrCat(OpKindName(request.kind), " '", request.name, "': submitted by ranks ",
                     RankList(have, hosts_), " but not by ranks ", RankList(missing, hosts_),
                     " for ", Seconds(age), hint);
    if (!fail) {
      spdlog::warn("overlap: rank 0: stall: {} (fails after OVERLAP_STALL_TIMEOUT_S={})", text,
                   config_.stall_timeout_s);
      return;
    }
    Response response;
    response.name = request.name;
    response.request = request;
    response.cache_id = cache_id;
    const std::vector<int> gone = ShutDownAmong(missing, request.kind);
    response.error =
        gone.empty()
            ? absl::StrCat("stalled: ", text, ", past OVERLAP_STALL_TIMEOUT_S=",
                           config_.stall_timeout_s)
            : absl::StrCat("cannot complete: ", OpKindName(request.kind), " '", request.name,
                           "': submitted by ranks ", RankList(have, hosts_), " ",
                           MissingBecauseShutDown(missing, gone, hosts_, "submit"));
    spdlog::error("overlap: rank 0: {}", response.error);
    responses->push_back(std::move(response));
  };
  // An operation a shut-down rank lacks can never complete: fail it now (Horovod fails every
  // pending operation once a rank shuts down), not after stall_timeout_s.
  auto hopeless = [&](const Request& request, const std::vector<int>& have) {
    return gathered && may_fail && !ShutDownAmong(OtherRanks(have), request.kind).empty();
  };

  // Cached operations: ready somewhere (any) but not everywhere (all).
  for (size_t id = 0; id < cache_.size(); ++id) {
    const bool partial = TestBit(any, id) && !TestBit(all, id) && cache_[id].valid;
    if (partial) {
      cached_stalls_.try_emplace(static_cast<int32_t>(id), CachedStall{now, false, {}, false});
    } else {
      cached_stalls_.erase(static_cast<int32_t>(id));
    }
  }
  for (auto it = cached_stalls_.begin(); it != cached_stalls_.end();) {
    CachedStall& stall = it->second;
    const absl::Duration age = now - stall.first_seen;
    const Request& request = cache_[static_cast<size_t>(it->first)].response->request;
    if ((gathered && may_fail && age >= timeout) || hopeless(request, stall.ready_ranks)) {
      report(request, stall.ready_ranks, age, /*fail=*/true, it->first);
      cached_stalls_.erase(it++);
      continue;
    }
    if (gathered && age >= warning && !stall.warned) {
      report(request, stall.ready_ranks, age, /*fail=*/false, -1);
      stall.warned = true;
    }
    ++it;
  }

  // Operations first seen whole and still missing from some ranks. The hints of the entries
  // reported this round are worked out before any entry is failed and erased, so both sides of a
  // renamed tensor get theirs.
  auto reported_now = [&](const TableEntry& entry) {
    const absl::Duration age = now - entry.first_seen;
    const Request* request = nullptr;
    const std::vector<int> have = SubmittedBy(entry, &request);
    return (may_fail && age >= timeout) || (age >= warning && !entry.warned) ||
           hopeless(*request, have);
  };
  absl::flat_hash_map<std::string, std::string> hints;
  for (const auto& [name, entry] : table_) {
    if (reported_now(entry)) hints[name] = RenamedTensorHint(name);
  }
  for (auto it = table_.begin(); it != table_.end();) {
    TableEntry& entry = it->second;
    const absl::Duration age = now - entry.first_seen;
    const Request* request = nullptr;
    const std::vector<int> have = SubmittedBy(entry, &request);
    if ((may_fail && age >= timeout) || hopeless(*request, have)) {
      report(*request, have, age, /*fail=*/true, -1, hints[it->first]);
      // The ranks whose Join failed are no longer joined: they submit again.
      if (request->kind == OpKind::kJoin) joined_.assign(static_cast<size_t>(size_), false);
      table_.erase(it++);
      continue;
    }
    if (age >= warning && !entry.warned) {
      report(*request, have, age, /*fail=*/false, -1, hints[it->first]);
      entry.warned = true;
    }
    ++it;
  }
}

std::vector<int> Negotiator::SubmittedBy(const TableEntry& entry, const Request** request) const {
  std::vector<int> ranks;
  for (int r = 0; r < size_; ++r) {
    if (entry.requests[static_cast<size_t>(r)].has_value()) {
      ranks.push_back(r);
      *request = &*entry.requests[static_cast<size_t>(r)];
    }
  }
  return ranks;
}

std::vector<int> Negotiator::ShutDownAmong(const std::vector<int>& missing, OpKind kind) const {
  std::vector<int> gone;
  for (int r : missing) {
    // A joined rank stands in with zeros for allreduces; it need not submit them.
    const bool stands_in = kind != OpKind::kJoin && joined_[static_cast<size_t>(r)];
    if (shut_down_[static_cast<size_t>(r)] && !stands_in) gone.push_back(r);
  }
  return gone;
}

std::vector<int> Negotiator::OtherRanks(const std::vector<int>& ranks) const {
  std::vector<int> others;
  for (int r = 0; r < size_; ++r) {
    if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) others.push_back(r);
  }
  return others;
}

std::string Negotiator::RenamedTensorHint(const std::string& name) const {
  const Request* mine = nullptr;
  const std::vector<int> missing = OtherRanks(SubmittedBy(table_.at(name), &mine));
  for (const auto& [other_name, other] : table_) {
    const Request* theirs = nullptr;
    // The other tensor comes from exactly the ranks that lack this one.
    if (other_name == name || SubmittedBy(other, &theirs) != missing || theirs == nullptr ||
        theirs->kind != mine->kind || theirs->tensors != mine->tensors) {
      continue;
    }
    return absl::StrCat("; ranks ", RankList(missing, hosts_), " submitted ",
                        OpKindName(theirs->kind), " '", other_name,
                        "' of the same dtype and shape instead: the ranks may name one tensor "
                        "differently (names must match on every rank; Keras numbers unnamed "
                        "layers per process)");
  }
  return "";
}

std::vector<int> Negotiator::JoinedRanks() const {
  std::vector<int> ranks;
  for (int r = 0; r < size_; ++r) {
    if (joined_[static_cast<size_t>(r)]) ranks.push_back(r);
  }
  return ranks;
}

void Negotiator::RefuseDuringJoin(bool gathered, std::vector<Response>* responses) {
  const std::vector<int> joined = JoinedRanks();
  if (joined.empty()) return;
  auto refused = [&](const Request& request, const std::vector<int>& have) {
    if (request.kind == OpKind::kAllreduce || request.kind == OpKind::kJoin) return false;
    return std::any_of(joined.begin(), joined.end(), [&](int r) {
      return std::find(have.begin(), have.end(), r) == have.end();
    });
  };
  auto refuse = [&](const Request& request, int32_t cache_id) {
    Response response;
    response.name = request.name;
    response.request = request;
    response.cache_id = cache_id;
    response.error = absl::StrCat(OpKindName(request.kind), " '", request.name,
                                  "' cannot run while ranks ", RankList(joined, hosts_),
                                  " have joined; only allreduce may run during a join");
    spdlog::error("overlap: rank 0: {}", response.error);
    responses->push_back(std::move(response));
  };
  if (gathered) {
    for (auto it = cached_stalls_.begin(); it != cached_stalls_.end();) {
      const CacheEntry& entry = cache_[static_cast<size_t>(it->first)];
      if (entry.valid && refused(entry.response->request, it->second.ready_ranks)) {
        refuse(entry.response->request, it->first);
        cached_stalls_.erase(it++);
        continue;
      }
      ++it;
    }
  }
  for (auto it = table_.begin(); it != table_.end();) {
    const Request* request = nullptr;
    const std::vector<int> have = SubmittedBy(it->second, &request);
    if (refused(*request, have)) {
      refuse(*request, -1);
      table_.erase(it++);
      continue;
    }
    ++it;
  }
}

bool Negotiator::JoinCheckDue() const {
  if (std::none_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) return false;
  for (const auto& [id, stall] : cached_stalls_) {
    const CacheEntry& entry = cache_[static_cast<size_t>(id)];
    if (!stall.join_checked && entry.valid &&
        entry.response->request.kind != OpKind::kAllreduce) {
      return true;
    }
  }
  return false;
}

bool Negotiator::StallGatherDue() const {
  if (JoinCheckDue()) return true;
  const absl::Time now = absl::Now();
  for (const auto& [id, stall] : cached_stalls_) {
    const absl::Duration age = now - stall.first_seen;
    if ((!stall.warned && age >= absl::Seconds(config_.stall_warning_s)) ||
        age >= absl::Seconds(config_.stall_timeout_s)) {
      return true;
    }
  }
  return false;
}

void Negotiator::ForgetStalls(const absl::flat_hash_set<int32_t>& ids) {
  for (int32_t id : ids) cached_stalls_.erase(id);
}

absl::Time Negotiator::NextStallCheck() const {
  if (JoinCheckDue()) return absl::InfinitePast();
  absl::Time next = absl::InfiniteFuture();
  const absl::Duration warning = absl::Seconds(config_.stall_warning_s);
  const absl::Duration timeout = absl::Seconds(config_.stall_timeout_s);
  for (const auto& [id, stall] : cached_stalls_) {
    next = std::min(next, stall.first_seen + (stall.warned ? timeout : warning));
  }
  for (const auto& [name, entry] : table_) {
    next = std::min(next, entry.first_seen + (entry.warned ? timeout : warning));
  }
  return next;
}

void Negotiator::ApplyResponses(std::vector<int32_t> evictions, std::vector<Response> responses,
                                const std::vector<uint64_t>& all_ready, PendingTable* pending,
                                bool joined, RoundResult* result) {
  auto take = [&](const std::string& name) -> std::optional<PendingOp> {
    auto it = pending->find(name);
    if (it == pending->end()) return std::nullopt;
    std::optional<PendingOp> op(std::move(it->second));
    pending->erase(it);
    return op;
  };
  // Cached operations ready on every rank, in id order.
  for (size_t id = 0; id < cache_.size(); ++id) {
    if (!TestBit(all_ready, id) || !cache_[id].valid) continue;
    if (std::find(evictions.begin(), evictions.end(), static_cast<int32_t>(id)) !=
        evictions.end()) {
      continue;
    }
    const std::shared_ptr<const Response>& response = cache_[id].response;
    std::optional<PendingOp> op = take(response->name);
    if (!op.has_value() && !joined) continue;  // cannot happen: we set the bit ourselves
    result->ready.push_back(ReadyOp{response, std::move(op)});
  }
  result->evicted = !evictions.empty();
  for (int32_t id : evictions) {
    CacheEntry& entry = cache_[static_cast<size_t>(id)];
    entry.valid = false;
    cache_ids_.erase(entry.response->name);
    for (auto& [name, op] : *pending) {
      if (op.cache_id == id) {
        op.cache_id = -1;
        op.sent = false;
        result->resend = true;
      }
    }
  }
  for (Response& response : responses) {
    if (!response.error.empty()) {
      auto it = pending->find(response.name);
      const bool ours =
          it != pending->end() &&
          (response.cache_id >= 0 ? it->second.cache_id == response.cache_id : it->second.sent);
      if (ours) {
        result->failed.emplace_back(std::move(it->second), response.error);
        pending->erase(it);
      }
      continue;
    }
    std::optional<PendingOp> op = take(response.name);
    auto shared = std::make_shared<const Response>(std::move(response));
    if (shared->cache_id >= 0) {
      const size_t id = static_cast<size_t>(shared->cache_id);
      if (cache_.size() <= id) cache_.resize(id + 1);
      cache_[id] = CacheEntry{shared, op.has_value() ? op->request : Request{}, true};
      cache_ids_[shared->name] = shared->cache_id;
    }
    if (!op.has_value() && !joined) continue;
    result->ready.push_back(ReadyOp{shared, std::move(op)});
  }
}

absl::StatusOr<RoundResult> Negotiator::RunRound(PendingTable* pending, bool joined,
                                                 bool shutting_down, const PlanVote& vote) {
  bool has_uncached = false;
  for (auto& [name, op] : *pending) {
    if (op.cache_id >= 0 || op.sent) continue;
    auto it = cache_ids_.find(name);
    if (it != cache_ids_.end() && cache_[static_cast<size_t>(it->second)].local == op.request) {
      op.cache_id = it->second;
    } else {
      has_uncached = true;
    }
  }
  const std::vector<uint64_t> bits = ReadyBits(*pending, joined, vote.planned_ids);
  const size_t words = bits.size();
  // Flags, ready bits, their complement, then the planned-launch count and its complement: the
  // AND of a value and of its complement tell whether every rank sent the same value.
  std::vector<uint64_t> vec(1 + 2 * words + 2);
  vec[0] = (has_uncached ? 0 : kNoUncached) | (shutting_down ? kShutdown : kNoShutdown) |
           kNoStallGather | kNoBroadcast | (vote.wants_unfreeze ? 0 : kNoUnfreeze) |
           (vote.wants_report ? 0 : kNoPlanReport);
  vec[1 + 2 * words] = vote.launches;
  vec[2 + 2 * words] = ~vote.launches;
  if ((rank_ == 0 && StallGatherDue()) || shutting_down) vec[0] &= ~kNoStallGather;
  if (rank_ == 0 && NextStallCheck() <= absl::Now()) vec[0] &= ~kNoBroadcast;
  for (size_t w = 0; w < words; ++w) {
    vec[1 + w] = bits[w];
    vec[1 + words + w] = ~bits[w];
  }
  absl::Status s = Run([&] { return control_->StartBitwise(BitOp::kAnd, absl::MakeSpan(vec)); },
                       "AND-allreduce of the ready bits");
  if (!s.ok()) return s;
  const uint64_t flags = vec[0];
  std::vector<uint64_t> all(vec.begin() + 1, vec.begin() + 1 + static_cast<long>(words));
  std::vector<uint64_t> any(words);
  for (size_t w = 0; w < words; ++w) any[w] = ~vec[1 + words + w];

  RoundResult result;
  result.all_shutting_down = (flags & kShutdown) != 0;
  result.any_shutting_down = (flags & kNoShutdown) == 0;
  result.unfreeze_wanted = (flags & kNoUnfreeze) == 0;
  if (vec[1 + 2 * words] == ~vec[2 + 2 * words]) result.agreed_launches = vec[1 + 2 * words];
  if ((flags & kNoPlanReport) == 0) {
    // A count cannot reach 2^63: its top bit carries starts_nothing_more.
    const uint64_t mine = vote.launches | (vote.starts_nothing_more ? kNothingMoreBit : 0);
    s = Run([&] { return control_->StartAllgather(mine, &result.launch_counts); },
            "allgather of the planned launch counts");
    if (!s.ok()) return s;
    for (uint64_t& count : result.launch_counts) {
      result.starts_nothing_more.push_back((count & kNothingMoreBit) != 0);
      count &= ~kNothingMoreBit;
    }
  }
  const bool stall_gather = (flags & kNoStallGather) == 0;
  const bool gather = (flags & kNoUncached) == 0 || stall_gather;
  std::vector<int32_t> evictions;
  std::vector<Response> responses;
  if (gather) {
    if (rank_ == 0) {
      for (auto& [id, stall] : cached_stalls_) stall.ready_ranks.clear();
    }
    std::vector<std::string> gathered;
    s = Run(
        [&] {
          return control_->StartGather(EncodeGather(pending, stall_gather, bits, shutting_down),
                                       &gathered);
        },
        "gather of the requests");
    if (!s.ok()) return s;
    for (size_t r = 0; r < gathered.size(); ++r) {
      s = AbsorbGather(gathered[r], static_cast<int>(r), &evictions);
      if (!s.ok()) return s;
    }
    if (stall_gather) {
      for (auto& [id, stall] : cached_stalls_) stall.join_checked = true;
    }
  }
  if (gather || (flags & kNoBroadcast) == 0) {
    std::string bytes;
    if (rank_ == 0) {
      InspectStalls(all, any, stall_gather, /*may_fail=*/true, &responses);
      // After InspectStalls, which tracks every partial cached id anew: a refused one must leave
      // cached_stalls_ for good, or it would be join-checked again next round.
      RefuseDuringJoin(stall_gather, &responses);
      MatchTable(&responses);
      ByteWriter out;
      out.PutI64(static_cast<int64_t>(evictions.size()));
      for (int32_t id : evictions) out.PutI32(id);
      out.PutI64(static_cast<int64_t>(responses.size()));
      for (const Response& r : responses) EncodeResponse(r, &out);
      bytes = std::move(out.bytes());
    }
    s = Run([&] { return control_->StartBroadcast(&bytes); }, "broadcast of the responses");
    if (!s.ok()) return s;
    if (rank_ != 0) {
      ByteReader in(bytes);
      int64_t n = 0;
      s = in.GetI64(&n);
      for (int64_t i = 0; s.ok() && i < n; ++i) {
        int32_t id = 0;
        s = in.GetI32(&id);
        evictions.push_back(id);
      }
      if (s.ok()) s = in.GetI64(&n);
      for (int64_t i = 0; s.ok() && i < n; ++i) {
        Response r;
        s = DecodeResponse(&in, &r);
        responses.push_back(std::move(r));
      }
      if (!s.ok()) return s;
    }
  } else if (rank_ == 0) {
    // Only tracks and warns: a failure must reach every rank, so it waits for a round that
    // broadcasts (NextStallCheck makes the coordinator start one).
    InspectStalls(all, any, /*gathered=*/false, /*may_fail=*/false, &responses);
  }
  ApplyResponses(std::move(evictions), std::move(responses), all, pending, joined, &result);
  return result;
}

absl::Status Negotiator::OrAcrossRanks(std::vector<uint64_t>* bits) {
  if (bits->empty()) return absl::OkStatus();
  return Run([&] { return control_->StartBitwise(BitOp::kOr, absl::MakeSpan(*bits)); },
             "OR-allreduce of the plan's wait marks");
}

ReadyByDevice SplitByDevice(std::vector<ReadyOp> ready) {
  ReadyByDevice split;
  for (ReadyOp& r : ready) {
    (r.response->request.device == DeviceKind::kCuda ? split.cuda : split.host)
        .push_back(std::move(r));
  }
  return split;
}

}  // namespace overlap
