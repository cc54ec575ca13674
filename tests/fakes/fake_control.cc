#include "tests/fakes/fake_control.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace overlap {
namespace fake {

const char* ControlKindName(ControlKind kind) {
  switch (kind) {
    case ControlKind::kAnd:
      return "AND-allreduce";
    case ControlKind::kOr:
      return "OR-allreduce";
    case ControlKind::kAllgather:
      return "allgather";
    case ControlKind::kGather:
      return "gather";
    case ControlKind::kBroadcast:
      return "broadcast";
  }
  return "?";
}

namespace {

// One rank's part of a call: its kind and where its inputs and results are.
struct Part {
  ControlKind kind = ControlKind::kAnd;
  absl::Span<uint64_t> words;            // bitwise
  uint64_t mine = 0;                     // allgather
  std::vector<uint64_t>* all = nullptr;  // allgather
  std::string bytes;                     // gather: what this rank sends
  std::vector<std::string>* gathered = nullptr;
  std::string* broadcast = nullptr;
};

std::string Describe(const Part& part) {
  if (part.kind == ControlKind::kAnd || part.kind == ControlKind::kOr) {
    return absl::StrCat(ControlKindName(part.kind), " of ", part.words.size(), " words");
  }
  return ControlKindName(part.kind);
}

struct Call {
  std::vector<std::optional<Part>> parts;  // by rank
  int started = 0;
  bool done = false;
  absl::Status status;
};

}  // namespace

struct FakeControlWorld::State {
  explicit State(int n) : size(n), next(static_cast<size_t>(n), 0) {}

  // Runs the call once every rank has started it: checks that the parts agree, then writes every
  // rank's results.
  void Complete(int64_t index, Call* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (held.contains(index)) return;  // never done
    call->done = true;
    auto failure = failures.find(index);
    if (failure != failures.end()) {
      call->status = failure->second;
      return;
    }
    const Part& first = *call->parts[0];
    for (int r = 1; r < size; ++r) {
      const Part& part = *call->parts[static_cast<size_t>(r)];
      if (part.kind != first.kind || part.words.size() != first.words.size()) {
        call->status = absl::InternalError(
            absl::StrCat("fake control call ", index, ": rank 0 started ", Describe(first),
                         " but rank ", r, " started ", Describe(part)));
        return;
      }
    }
    switch (first.kind) {
      case ControlKind::kAnd:
      case ControlKind::kOr: {
        std::vector<uint64_t> result(first.words.begin(), first.words.end());
        for (int r = 1; r < size; ++r) {
          const absl::Span<uint64_t> words = call->parts[static_cast<size_t>(r)]->words;
          for (size_t w = 0; w < result.size(); ++w) {
            result[w] =
                first.kind == ControlKind::kAnd ? (result[w] & words[w]) : (result[w] | words[w]);
          }
        }
        for (auto& part : call->parts) std::copy(result.begin(), result.end(), part->words.begin());
        break;
      }
      case ControlKind::kAllgather:
        for (auto& part : call->parts) {
          for (int r = 0; r < size; ++r) {
            (*part->all)[static_cast<size_t>(r)] = call->parts[static_cast<size_t>(r)]->mine;
          }
        }
        break;
      case ControlKind::kGather: {
        std::vector<std::string>* root = call->parts[0]->gathered;
        root->clear();
        for (auto& part : call->parts) root->push_back(part->bytes);
        for (int r = 1; r < size; ++r) call->parts[static_cast<size_t>(r)]->gathered->clear();
        break;
      }
      case ControlKind::kBroadcast:
        for (int r = 1; r < size; ++r) {
          *call->parts[static_cast<size_t>(r)]->broadcast = *first.broadcast;
        }
        break;
    }
  }

  int64_t Start(int rank, Part part, int64_t recorded_size) {
    absl::MutexLock lock(&mu);
    const int64_t index = next[static_cast<size_t>(rank)]++;
    record.push_back(StartedControl{rank, index, part.kind, recorded_size});
    Call& call = calls[index];
    if (call.parts.empty()) call.parts.resize(static_cast<size_t>(size));
    call.parts[static_cast<size_t>(rank)] = std::move(part);
    if (++call.started == size) Complete(index, &call);
    return index;
  }

  absl::StatusOr<bool> Test(int64_t index) {
    absl::MutexLock lock(&mu);
    const Call& call = calls[index];
    if (!call.done) return false;
    if (!call.status.ok()) return call.status;
    return true;
  }

  const int size;
  absl::Mutex mu;
  std::vector<int64_t> next ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<int64_t, Call> calls ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<int64_t, absl::Status> failures ABSL_GUARDED_BY(mu);
  absl::flat_hash_set<int64_t> held ABSL_GUARDED_BY(mu);
  std::vector<StartedControl> record ABSL_GUARDED_BY(mu);
};

namespace {

class FakeRequest : public ControlRequest {
 public:
  FakeRequest(std::shared_ptr<FakeControlWorld::State> state, int64_t index)
      : state_(std::move(state)), index_(index) {}
  absl::StatusOr<bool> Test() override { return state_->Test(index_); }

 private:
  std::shared_ptr<FakeControlWorld::State> state_;
  const int64_t index_;
};

class FakeCollectives : public ControlCollectives {
 public:
  FakeCollectives(std::shared_ptr<FakeControlWorld::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return state_->size; }

  absl::StatusOr<std::unique_ptr<ControlRequest>> StartBitwise(
      BitOp op, absl::Span<uint64_t> words) override {
    Part part;
    part.kind = op == BitOp::kAnd ? ControlKind::kAnd : ControlKind::kOr;
    part.words = words;
    return Started(state_->Start(rank_, std::move(part), static_cast<int64_t>(words.size())));
  }
  absl::StatusOr<std::unique_ptr<ControlRequest>> StartAllgather(
      uint64_t mine, std::vector<uint64_t>* all) override {
    all->assign(static_cast<size_t>(state_->size), 0);
    Part part;
    part.kind = ControlKind::kAllgather;
    part.mine = mine;
    part.all = all;
    return Started(state_->Start(rank_, std::move(part), 0));
  }
  absl::StatusOr<std::unique_ptr<ControlRequest>> StartGather(
      std::string mine, std::vector<std::string>* all) override {
    Part part;
    part.kind = ControlKind::kGather;
    const int64_t bytes = static_cast<int64_t>(mine.size());
    part.bytes = std::move(mine);
    part.gathered = all;
    return Started(state_->Start(rank_, std::move(part), bytes));
  }
  absl::StatusOr<std::unique_ptr<ControlRequest>> StartBroadcast(std::string* bytes) override {
    Part part;
    part.kind = ControlKind::kBroadcast;
    part.broadcast = bytes;
    return Started(state_->Start(rank_, std::move(part),
                                 rank_ == 0 ? static_cast<int64_t>(bytes->size()) : 0));
  }

 private:
  std::unique_ptr<ControlRequest> Started(int64_t index) {
    return std::make_unique<FakeRequest>(state_, index);
  }

  std::shared_ptr<FakeControlWorld::State> state_;
  const int rank_;
};

}  // namespace

FakeControlWorld::FakeControlWorld(int size) : state_(std::make_shared<State>(size)) {}
FakeControlWorld::~FakeControlWorld() = default;

int FakeControlWorld::size() const { return state_->size; }

std::unique_ptr<ControlCollectives> FakeControlWorld::Create(int rank) {
  return std::make_unique<FakeCollectives>(state_, rank);
}

void FakeControlWorld::FailCall(int64_t index, absl::Status status) {
  absl::MutexLock lock(&state_->mu);
  state_->failures[index] = std::move(status);
}

void FakeControlWorld::HoldCall(int64_t index) {
  absl::MutexLock lock(&state_->mu);
  state_->held.insert(index);
}

std::vector<StartedControl> FakeControlWorld::started() const {
  absl::MutexLock lock(&state_->mu);
  return state_->record;
}

}  // namespace fake
}  // namespace overlap
