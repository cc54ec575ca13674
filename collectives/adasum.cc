// Adasum's vector-halving, distance-doubling allreduce (adasum.h states the algorithm).
#include "collectives/adasum.h"

#include <algorithm>
#include <climits>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "numeric/half.h"
#include "collectives/mpi_executor.h"
#include "collectives/mpi_wait.h"

namespace overlap {
namespace {

// How each floating-point dtype is read into fp64 and written back.
struct F32 {
  using T = float;
  static double Get(T v) { return v; }
  static T Put(double v) { return static_cast<T>(v); }
};
struct F64 {
  using T = double;
  static double Get(T v) { return v; }
  static T Put(double v) { return v; }
};
struct F16 {
  using T = uint16_t;
  static double Get(T v) { return HalfToFloat(v); }
  static T Put(double v) { return FloatToHalf(static_cast<float>(v)); }
};
struct BF16 {
  using T = uint16_t;
  static double Get(T v) { return BFloat16ToFloat(v); }
  static T Put(double v) { return FloatToBFloat16(static_cast<float>(v)); }
};

// Calls fn(Traits{}) for `dtype`, one of the floating-point types.
template <typename Fn>
void WithTraits(DataType dtype, Fn fn) {
  switch (dtype) {
    case DataType::kFloat16:
      return fn(F16{});
    case DataType::kBFloat16:
      return fn(BF16{});
    case DataType::kFloat64:
      return fn(F64{});
    default:
      return fn(F32{});
  }
}

// Adds dot(a, b), |a|^2 and |b|^2 over n elements to out[0..2].
template <typename Traits>
void AddPartials(const void* a_bytes, const void* b_bytes, int64_t n, double* out) {
  using T = typename Traits::T;
  const T* a = static_cast<const T*>(a_bytes);
  const T* b = static_cast<const T*>(b_bytes);
  double dot = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = Traits::Get(a[i]), y = Traits::Get(b[i]);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  out[0] += dot;
  out[1] += aa;
  out[2] += bb;
}

// mine[i] = ca * a[i] + cb * b[i], where `mine` is a or b as `mine_is_a` says.
template <typename Traits>
void CombineInto(void* mine_bytes, const void* theirs_bytes, int64_t n, bool mine_is_a, double ca,
                 double cb) {
  using T = typename Traits::T;
  T* mine = static_cast<T*>(mine_bytes);
  const T* theirs = static_cast<const T*>(theirs_bytes);
  const double c_mine = mine_is_a ? ca : cb, c_theirs = mine_is_a ? cb : ca;
  for (int64_t i = 0; i < n; ++i) {
    mine[i] = Traits::Put(c_mine * Traits::Get(mine[i]) + c_theirs * Traits::Get(theirs[i]));
  }
}

// The coefficient of a vector of squared norm `self` against one it has dot product `dot` with.
double Coefficient(double dot, double self) { return self == 0 ? 1.0 : 1.0 - dot / (2 * self); }

}  // namespace

absl::StatusOr<std::unique_ptr<AdasumAllreduce>> AdasumAllreduce::Start(
    MPI_Comm comm, int tag, void* buffer, int64_t count, DataType dtype,
    std::vector<int64_t> segments) {
  std::unique_ptr<AdasumAllreduce> w(new AdasumAllreduce());
  absl::Status s = MpiCheck(MPI_Comm_rank(comm, &w->rank_), "Adasum: MPI_Comm_rank");
  if (s.ok()) s = MpiCheck(MPI_Comm_size(comm, &w->size_), "Adasum: MPI_Comm_size");
  if (s.ok()) s = AdasumSupports(w->size_, dtype);
  if (!s.ok()) return s;
  if (count < 0 || (count + 1) / 2 > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Adasum of ", count, " elements: a half must fit one MPI message (", INT_MAX, ")"));
  }
  if (segments.empty()) segments.push_back(count);
  w->segment_starts_.assign(1, 0);
  for (int64_t n : segments) {
    if (n < 0) return absl::InvalidArgumentError("Adasum: a negative segment");
    w->segment_starts_.push_back(w->segment_starts_.back() + n);
  }
  if (w->segment_starts_.back() != count) {
    return absl::InvalidArgumentError(absl::StrCat("Adasum: the segments add up to ",
                                                   w->segment_starts_.back(), ", not ", count));
  }
  w->comm_ = comm;
  w->tag_ = tag;
  w->buffer_ = static_cast<uint8_t*>(buffer);
  w->dtype_ = dtype;
  w->elem_bytes_ = DataTypeSize(dtype);
  w->current_ = Range{0, count};
  if (count == 0) return w;  // every rank agrees on the count: nothing to exchange
  int levels = 0;
  while ((1 << levels) < w->size_) ++levels;
  for (int l = 0; l < levels; ++l) {
    w->steps_.push_back(Step{Step::kHalves, l, 0});
    for (int j = 0; j <= l; ++j) w->steps_.push_back(Step{Step::kScalars, l, j});
  }
  for (int l = levels - 1; l >= 0; --l) w->steps_.push_back(Step{Step::kGather, l, 0});
  w->parents_.resize(static_cast<size_t>(levels));
  w->theirs_.resize(static_cast<size_t>((count + 1) / 2) * w->elem_bytes_);
  w->scalars_.resize(3 * segments.size());
  w->incoming_.resize(3 * segments.size());
  if (!w->steps_.empty()) {
    s = w->Post(w->steps_.front());
    if (!s.ok()) return s;
  }
  return w;
}

AdasumAllreduce::~AdasumAllreduce() {
  const bool pending = requests_[0] != MPI_REQUEST_NULL || requests_[1] != MPI_REQUEST_NULL;
  if (requests_[0] != MPI_REQUEST_NULL) {
    MPI_Cancel(&requests_[0]);
    MPI_Request_free(&requests_[0]);
  }
  if (requests_[1] != MPI_REQUEST_NULL) MPI_Request_free(&requests_[1]);
  if (!pending) return;
  // MPI may still read or write these after the requests were released (ring_reduce_scatter.cc
  // does the same for its partial sums).
  (void)new (std::nothrow) std::vector<uint8_t>(std::move(theirs_));
  (void)new (std::nothrow) std::vector<double>(std::move(scalars_));
  (void)new (std::nothrow) std::vector<double>(std::move(incoming_));
}

absl::Status AdasumAllreduce::Exchange(int partner, void* into, int64_t recv_count,
                                       const void* from, int64_t send_count, MPI_Datatype type) {
  absl::Status s = MpiCheck(
      MPI_Irecv(into, static_cast<int>(recv_count), type, partner, tag_, comm_, &requests_[0]),
      absl::StrCat("rank ", rank_, ": Adasum: MPI_Irecv from ", partner));
  if (!s.ok()) return s;
  return MpiCheck(
      MPI_Isend(from, static_cast<int>(send_count), type, partner, tag_, comm_, &requests_[1]),
      absl::StrCat("rank ", rank_, ": Adasum: MPI_Isend to ", partner));
}

absl::Status AdasumAllreduce::Post(const Step& step) {
  const MPI_Datatype type = MpiDataType(dtype_);
  switch (step.kind) {
    case Step::kHalves: {
      const int partner = rank_ ^ (1 << step.level);
      const Range whole = current_;
      const int64_t mid = whole.lo + whole.count() / 2;
      const Range lower{whole.lo, mid}, upper{mid, whole.hi};
      const Range kept = HoldsA(step.level) ? lower : upper;
      const Range given = HoldsA(step.level) ? upper : lower;
      parents_[static_cast<size_t>(step.level)] = whole;
      current_ = kept;
      return Exchange(partner, theirs_.data(), kept.count(), At(given.lo), given.count(), type);
    }
    case Step::kScalars:
      return Exchange(rank_ ^ (1 << step.j), incoming_.data(),
                      static_cast<int64_t>(incoming_.size()), scalars_.data(),
                      static_cast<int64_t>(scalars_.size()), MPI_DOUBLE);
    case Step::kGather: {
      const Range parent = parents_[static_cast<size_t>(step.level)];
      const Range other =
          current_.lo == parent.lo ? Range{current_.hi, parent.hi} : Range{parent.lo, current_.lo};
      return Exchange(rank_ ^ (1 << step.level), At(other.lo), other.count(), At(current_.lo),
                      current_.count(), type);
    }
  }
  return absl::InternalError("Adasum: unknown step");
}

template <typename Visit>
void AdasumAllreduce::ForEachSegmentOfHalf(Visit visit) const {
  for (size_t t = 0; t + 1 < segment_starts_.size(); ++t) {
    const int64_t lo = std::max(segment_starts_[t], current_.lo);
    const int64_t hi = std::min(segment_starts_[t + 1], current_.hi);
    if (lo >= hi) continue;
    visit(t, hi - lo, At(lo), theirs_.data() + static_cast<size_t>(lo - current_.lo) * elem_bytes_);
  }
}

void AdasumAllreduce::Partials(int level) {
  std::fill(scalars_.begin(), scalars_.end(), 0.0);
  const bool holds_a = HoldsA(level);
  WithTraits(dtype_, [&](auto traits) {
    using Traits = decltype(traits);
    ForEachSegmentOfHalf([&](size_t t, int64_t count, const void* mine, const void* theirs) {
      AddPartials<Traits>(holds_a ? mine : theirs, holds_a ? theirs : mine, count,
                          &scalars_[3 * t]);
    });
  });
}

void AdasumAllreduce::Combine(int level) {
  const bool holds_a = HoldsA(level);
  WithTraits(dtype_, [&](auto traits) {
    using Traits = decltype(traits);
    ForEachSegmentOfHalf([&](size_t t, int64_t count, uint8_t* mine, const uint8_t* theirs) {
      const double dot = scalars_[3 * t], aa = scalars_[3 * t + 1], bb = scalars_[3 * t + 2];
      CombineInto<Traits>(mine, theirs, count, holds_a, Coefficient(dot, aa), Coefficient(dot, bb));
    });
  });
}

void AdasumAllreduce::Arrived(const Step& step) {
  switch (step.kind) {
    case Step::kHalves:
      Partials(step.level);
      break;
    case Step::kScalars:
      // a + b is b + a in IEEE arithmetic, so both partners hold the same bits afterwards.
      for (size_t i = 0; i < scalars_.size(); ++i) scalars_[i] += incoming_[i];
      if (step.j == step.level) Combine(step.level);
      break;
    case Step::kGather:
      current_ = parents_[static_cast<size_t>(step.level)];
      break;
  }
}

absl::StatusOr<bool> AdasumAllreduce::Test() {
  if (next_ == steps_.size()) return true;
  int done = 0;
  const int rc = MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS) {
    return MpiCheck(rc, absl::StrCat("rank ", rank_, ": Adasum: MPI_Testall"));
  }
  if (!done) return false;
  Arrived(steps_[next_]);
  if (++next_ == steps_.size()) return true;
  absl::Status s = Post(steps_[next_]);
  if (!s.ok()) return s;
  return false;
}

}  // namespace overlap
