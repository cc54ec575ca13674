#include "tests/fakes/fake_executor.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "numeric/half.h"

namespace overlap {
namespace fake {

// One collective: the k-th on a channel, as every rank started it.
struct Slot {
  explicit Slot(int size)
      : args(static_cast<size_t>(size)), rank_failure(static_cast<size_t>(size)) {}
  std::vector<std::optional<CollectiveArgs>> args;  // by rank, once started
  int started = 0;
  bool complete = false;
  absl::Status failure;                    // every rank's outcome when not ok
  std::vector<absl::Status> rank_failure;  // one rank's outcome when not ok
};

struct FakeWorld::State {
  State(int size, int num_channels)
      : size(size),
        num_channels(num_channels),
        slots(static_cast<size_t>(num_channels)),
        next_index(static_cast<size_t>(size),
                   std::vector<int64_t>(static_cast<size_t>(num_channels))),
        aborted(static_cast<size_t>(size), false) {}

  struct Fault {
    absl::Status status;
    std::optional<int> rank;
  };

  absl::Mutex mu;
  std::atomic<bool> stream_ordered{false};
  const int size;
  const int num_channels;
  std::vector<std::map<int64_t, std::shared_ptr<Slot>>> slots ABSL_GUARDED_BY(mu);
  std::vector<std::vector<int64_t>> next_index ABSL_GUARDED_BY(mu);  // [rank][channel]
  std::map<std::pair<int, int64_t>, std::vector<Fault>> faults ABSL_GUARDED_BY(mu);
  std::set<std::pair<int, int64_t>> holds ABSL_GUARDED_BY(mu);
  std::vector<StartedCollective> started ABSL_GUARDED_BY(mu);
  std::vector<bool> aborted ABSL_GUARDED_BY(mu);
};

namespace {

size_t Bytes(DataType dtype, int64_t elements) {
  return static_cast<size_t>(elements) * DataTypeSize(dtype);
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t n = 0;
  for (int64_t x : v) n += x;
  return n;
}

std::string Counts(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

// What every rank must agree on, as text: two ranks mismatch when their signatures differ.
std::string Signature(const CollectiveArgs& a) {
  const std::string head = absl::StrCat(CollectiveKindName(a.kind), " ", DataTypeName(a.dtype));
  switch (a.kind) {
    case CollectiveKind::kAllreduce:
      return absl::StrCat(head, " ", ReduceOpName(a.op), " of ", a.count, " elements");
    case CollectiveKind::kBroadcast:
      return absl::StrCat(head, " of ", a.count, " elements from root ", a.root);
    case CollectiveKind::kAllgatherv:
      return absl::StrCat(head, " with counts ", Counts(a.recv_counts));
    case CollectiveKind::kReduceScatter:
      return absl::StrCat(head, " ", ReduceOpName(a.op), " of ", a.count, " elements into ",
                          Counts(a.recv_counts));
    case CollectiveKind::kAlltoallv:
      return head;  // the counts are checked pairwise once every rank is in
    case CollectiveKind::kBarrier:
      return CollectiveKindName(a.kind);
  }
  return head;
}

absl::Status CheckVectors(const CollectiveArgs& a, int size, bool send_too) {
  const size_t n = static_cast<size_t>(size);
  if (a.recv_counts.size() != n || a.recv_displs.size() != n ||
      (send_too && (a.send_counts.size() != n || a.send_displs.size() != n))) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(a.kind),
                                                   ": per-rank counts and displacements must have ",
                                                   size, " entries"));
  }
  return absl::OkStatus();
}

// The backend's own argument checks, as the MPI and NCCL executors make them.
absl::Status Validate(const CollectiveArgs& a, int channel, int size, int num_channels) {
  if (channel < 0 || channel >= num_channels) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel ", channel, " outside [0, ", num_channels, ")"));
  }
  if (absl::Status s = ValidateDataType(a.dtype); !s.ok()) return s;
  if (a.count < 0) return absl::InvalidArgumentError(absl::StrCat("negative count ", a.count));
  const bool reduces =
      a.kind == CollectiveKind::kAllreduce || a.kind == CollectiveKind::kReduceScatter;
  if (reduces && a.op == ReduceOp::kAverage) {
    return absl::InvalidArgumentError(
        "average reaches the executor: the runtime must turn it into a sum and a scale");
  }
  if (reduces) {
    if (absl::Status s = ValidateReduceOp(a.op); !s.ok()) return s;
  }
  switch (a.kind) {
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kBarrier:
      return absl::OkStatus();
    case CollectiveKind::kBroadcast:
      if (a.root < 0 || a.root >= size) {
        return absl::InvalidArgumentError(
            absl::StrCat("broadcast root ", a.root, " outside [0, ", size, ")"));
      }
      return absl::OkStatus();
    case CollectiveKind::kAllgatherv:
      return CheckVectors(a, size, false);
    case CollectiveKind::kReduceScatter:
      if (a.recv_counts.size() != static_cast<size_t>(size) || Sum(a.recv_counts) != a.count) {
        return absl::InvalidArgumentError(
            absl::StrCat("reduce-scatter of ", a.count, " elements into ", Counts(a.recv_counts),
                         ": needs one count per rank (", size, ") adding up to the input"));
      }
      return absl::OkStatus();
    case CollectiveKind::kAlltoallv:
      return CheckVectors(a, size, true);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown collective kind ", static_cast<int>(a.kind)));
}

int64_t SentBytes(const CollectiveArgs& a, int rank) {
  switch (a.kind) {
    case CollectiveKind::kAllgatherv:
      return static_cast<int64_t>(Bytes(a.dtype, a.recv_counts[static_cast<size_t>(rank)]));
    case CollectiveKind::kAlltoallv:
      return static_cast<int64_t>(Bytes(a.dtype, Sum(a.send_counts)));
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return static_cast<int64_t>(Bytes(a.dtype, a.count));
  }
}

template <typename T>
T Combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return static_cast<T>(a * b);
    default:
      return static_cast<T>(a + b);
  }
}

template <typename T>
void ReducePlain(ReduceOp op, void* inout, const void* in, int64_t n) {
  T* acc = static_cast<T*>(inout);
  const T* x = static_cast<const T*>(in);
  for (int64_t i = 0; i < n; ++i) acc[i] = Combine(op, acc[i], x[i]);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ReduceHalf(ReduceOp op, void* inout, const void* in, int64_t n) {
  uint16_t* acc = static_cast<uint16_t*>(inout);
  const uint16_t* x = static_cast<const uint16_t*>(in);
  for (int64_t i = 0; i < n; ++i) acc[i] = FromFloat(Combine(op, ToFloat(acc[i]), ToFloat(x[i])));
}

// inout[i] = op(inout[i], in[i]) for n elements of `dtype`.
void Reduce(DataType dtype, ReduceOp op, void* inout, const void* in, int64_t n) {
  switch (dtype) {
    case DataType::kUint8:
      return ReducePlain<uint8_t>(op, inout, in, n);
    case DataType::kInt8:
      return ReducePlain<int8_t>(op, inout, in, n);
    case DataType::kInt32:
      return ReducePlain<int32_t>(op, inout, in, n);
    case DataType::kInt64:
      return ReducePlain<int64_t>(op, inout, in, n);
    case DataType::kFloat16:
      return ReduceHalf<HalfToFloat, FloatToHalf>(op, inout, in, n);
    case DataType::kBFloat16:
      return ReduceHalf<BFloat16ToFloat, FloatToBFloat16>(op, inout, in, n);
    case DataType::kFloat32:
      return ReducePlain<float>(op, inout, in, n);
    case DataType::kFloat64:
      return ReducePlain<double>(op, inout, in, n);
  }
}

using Buffer = std::vector<uint8_t>;

const uint8_t* At(const void* base, DataType dtype, int64_t elements) {
  return static_cast<const uint8_t*>(base) + Bytes(dtype, elements);
}
uint8_t* At(void* base, DataType dtype, int64_t elements) {
  return static_cast<uint8_t*>(base) + Bytes(dtype, elements);
}

// The reduction over every rank of `count` elements at element `offset` of each input.
Buffer ReduceAll(const std::vector<const CollectiveArgs*>& args, int64_t offset, int64_t count) {
  const CollectiveArgs& first = *args[0];
  Buffer acc(Bytes(first.dtype, count));
  auto input = [&](const CollectiveArgs* a) {
    return At(a->send != nullptr ? a->send : a->recv, a->dtype, offset);
  };
  if (!acc.empty()) std::memcpy(acc.data(), input(args[0]), acc.size());
  for (size_t r = 1; r < args.size(); ++r) {
    Reduce(first.dtype, first.op, acc.data(), input(args[r]), count);
  }
  return acc;
}

void Put(void* dst, const Buffer& bytes) {
  if (!bytes.empty()) std::memcpy(dst, bytes.data(), bytes.size());
}

// Every input is read before any output is written: in-place buffers are both.
absl::Status Compute(const std::vector<const CollectiveArgs*>& args) {
  const CollectiveArgs& first = *args[0];
  const DataType dtype = first.dtype;
  const size_t size = args.size();
  switch (first.kind) {
    case CollectiveKind::kBarrier:
      return absl::OkStatus();
    case CollectiveKind::kAllreduce: {
      const Buffer result = ReduceAll(args, 0, first.count);
      for (const CollectiveArgs* a : args) Put(a->recv, result);
      return absl::OkStatus();
    }
    case CollectiveKind::kBroadcast: {
      const CollectiveArgs& root = *args[static_cast<size_t>(first.root)];
      const uint8_t* src =
          static_cast<const uint8_t*>(root.send != nullptr ? root.send : root.recv);
      const Buffer data(src, src + Bytes(dtype, first.count));
      for (const CollectiveArgs* a : args) Put(a->recv, data);
      return absl::OkStatus();
    }
    case CollectiveKind::kAllgatherv: {
      std::vector<Buffer> parts;
      for (size_t r = 0; r < size; ++r) {
        const CollectiveArgs& a = *args[r];
        const uint8_t* src = a.send != nullptr ? static_cast<const uint8_t*>(a.send)
                                               : At(a.recv, dtype, a.recv_displs[r]);
        parts.emplace_back(src, src + Bytes(dtype, a.recv_counts[r]));
      }
      for (const CollectiveArgs* a : args) {
        for (size_t r = 0; r < size; ++r) Put(At(a->recv, dtype, a->recv_displs[r]), parts[r]);
      }
      return absl::OkStatus();
    }
    case CollectiveKind::kReduceScatter: {
      std::vector<Buffer> parts;
      int64_t offset = 0;
      for (size_t q = 0; q < size; ++q) {
        parts.push_back(ReduceAll(args, offset, first.recv_counts[q]));
        offset += first.recv_counts[q];
      }
      for (size_t q = 0; q < size; ++q) Put(args[q]->recv, parts[q]);
      return absl::OkStatus();
    }
    case CollectiveKind::kAlltoallv: {
      for (size_t s = 0; s < size; ++s) {
        for (size_t q = 0; q < size; ++q) {
          if (args[s]->send_counts[q] != args[q]->recv_counts[s]) {
            return absl::InternalError(
                absl::StrCat("alltoallv: rank ", s, " sends ", args[s]->send_counts[q],
                             " elements to rank ", q, ", which expects ", args[q]->recv_counts[s]));
          }
        }
      }
      std::vector<std::vector<Buffer>> parts(size);  // [sender][receiver]
      for (size_t s = 0; s < size; ++s) {
        const CollectiveArgs& a = *args[s];
        for (size_t q = 0; q < size; ++q) {
          const uint8_t* src = At(a.send, dtype, a.send_displs[q]);
          parts[s].emplace_back(src, src + Bytes(dtype, a.send_counts[q]));
        }
      }
      for (size_t q = 0; q < size; ++q) {
        for (size_t s = 0; s < size; ++s) {
          Put(At(args[q]->recv, dtype, args[q]->recv_displs[s]), parts[s][q]);
        }
      }
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown collective kind");
}

class FakeWork : public Work {
 public:
  FakeWork(std::shared_ptr<FakeWorld::State> state, std::shared_ptr<Slot> slot, int rank)
      : state_(std::move(state)), slot_(std::move(slot)), rank_(rank) {}

  absl::StatusOr<bool> Test() override {
    absl::MutexLock lock(&state_->mu);
    if (!slot_->failure.ok()) return slot_->failure;
    const absl::Status& mine = slot_->rank_failure[static_cast<size_t>(rank_)];
    if (!mine.ok()) return mine;
    if (slot_->complete) return true;
    if (state_->aborted[static_cast<size_t>(rank_)]) {
      return absl::AbortedError(absl::StrCat("rank ", rank_, "'s fake executor was aborted"));
    }
    return false;
  }

 private:
  const std::shared_ptr<FakeWorld::State> state_;
  const std::shared_ptr<Slot> slot_;
  const int rank_;
};

class FakeExecutor : public Executor {
 public:
  FakeExecutor(std::shared_ptr<FakeWorld::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  const char* name() const override { return "fake"; }
  int num_channels() const override { return state_->num_channels; }
  bool stream_ordered() const override { return state_->stream_ordered.load(); }

  absl::StatusOr<std::unique_ptr<Work>> Start(int channel, const CollectiveArgs& args) override {
    if (absl::Status s = Validate(args, channel, state_->size, state_->num_channels); !s.ok()) {
      return s;
    }
    absl::MutexLock lock(&state_->mu);
    if (state_->aborted[static_cast<size_t>(rank_)]) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank_, "'s fake executor was aborted: no Start may follow"));
    }
    const int64_t index =
        state_->next_index[static_cast<size_t>(rank_)][static_cast<size_t>(channel)]++;
    state_->started.push_back(StartedCollective{rank_, channel, index, args.kind, args.dtype,
                                                args.op, args.count, args.root,
                                                SentBytes(args, rank_)});
    std::shared_ptr<Slot>& slot = state_->slots[static_cast<size_t>(channel)][index];
    if (slot == nullptr) slot = std::make_shared<Slot>(state_->size);
    slot->args[static_cast<size_t>(rank_)] = args;
    ++slot->started;
    CheckAgreement(channel, index, slot.get());
    if (slot->started == state_->size && !slot->complete) Complete(channel, index, slot.get());
    return std::unique_ptr<Work>(new FakeWork(state_, slot, rank_));
  }

  void Abort() override {
    absl::MutexLock lock(&state_->mu);
    state_->aborted[static_cast<size_t>(rank_)] = true;
  }

 private:
  // Compares this rank's arguments with the lowest rank's that started the same collective.
  void CheckAgreement(int channel, int64_t index, Slot* slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    if (slot->complete) return;
    const std::string mine = Signature(*slot->args[static_cast<size_t>(rank_)]);
    for (int r = 0; r < state_->size; ++r) {
      const std::optional<CollectiveArgs>& other = slot->args[static_cast<size_t>(r)];
      if (r == rank_ || !other.has_value()) continue;
      const std::string theirs = Signature(*other);
      if (theirs == mine) return;
      slot->failure = absl::InternalError(absl::StrCat(
          "fake executor: ranks disagree on collective #", index, " of channel ", channel,
          ": rank ", r, " started ", theirs, ", rank ", rank_, " started ", mine));
      slot->complete = true;
      return;
    }
  }

  void Complete(int channel, int64_t index, Slot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    const std::pair<int, int64_t> key(channel, index);
    if (state_->holds.count(key) != 0) return;
    for (const FakeWorld::State::Fault& fault : FaultsOf(key)) {
      if (!fault.rank.has_value()) {
        slot->failure = fault.status;
        slot->complete = true;
        return;
      }
      if (*fault.rank >= 0 && *fault.rank < state_->size) {
        slot->rank_failure[static_cast<size_t>(*fault.rank)] = fault.status;
      }
    }
    std::vector<const CollectiveArgs*> args;
    for (const std::optional<CollectiveArgs>& a : slot->args) args.push_back(&*a);
    absl::Status s = Compute(args);
    if (!s.ok()) {
      slot->failure =
          absl::Status(s.code(), absl::StrCat("fake executor: collective #", index, " of channel ",
                                              channel, ": ", s.message()));
    }
    slot->complete = true;
  }

  std::vector<FakeWorld::State::Fault> FaultsOf(const std::pair<int, int64_t>& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    auto it = state_->faults.find(key);
    return it == state_->faults.end() ? std::vector<FakeWorld::State::Fault>() : it->second;
  }

  const std::shared_ptr<FakeWorld::State> state_;
  const int rank_;
};

}  // namespace

FakeWorld::FakeWorld(int size, int num_channels)
    : state_(std::make_shared<State>(std::max(1, size), std::max(1, num_channels))) {}

FakeWorld::~FakeWorld() = default;

int FakeWorld::size() const { return state_->size; }
int FakeWorld::num_channels() const { return state_->num_channels; }

void FakeWorld::SetStreamOrdered(bool stream_ordered) {
  state_->stream_ordered.store(stream_ordered);
}

std::unique_ptr<Executor> FakeWorld::CreateExecutor(int rank) {
  return std::make_unique<FakeExecutor>(state_, rank);
}

void FakeWorld::FailCollective(int channel, int64_t index, absl::Status status,
                               std::optional<int> rank) {
  absl::MutexLock lock(&state_->mu);
  state_->faults[{channel, index}].push_back(State::Fault{std::move(status), rank});
}

void FakeWorld::HoldCollective(int channel, int64_t index) {
  absl::MutexLock lock(&state_->mu);
  state_->holds.insert({channel, index});
}

std::vector<StartedCollective> FakeWorld::started() const {
  absl::MutexLock lock(&state_->mu);
  return state_->started;
}

std::vector<StartedCollective> FakeWorld::started(int rank) const {
  absl::MutexLock lock(&state_->mu);
  std::vector<StartedCollective> mine;
  for (const StartedCollective& c : state_->started) {
    if (c.rank == rank) mine.push_back(c);
  }
  return mine;
}

std::vector<int> FakeWorld::aborted() const {
  absl::MutexLock lock(&state_->mu);
  std::vector<int> ranks;
  for (int r = 0; r < state_->size; ++r) {
    if (state_->aborted[static_cast<size_t>(r)]) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace fake
}  // namespace overlap
