// Adasum: the adaptive summation of gradients (Maleki et al., "Scaling Distributed Training with
// Adaptive Summation", MLSys 2021), as an allreduce over MPI point-to-point messages.
//
// Two vectors combine as
//   adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b,
// where a vector of zero norm takes the coefficient 1 (it adds nothing, and the other is kept
// whole). Orthogonal gradients are summed, parallel ones averaged. On n = 2^k ranks the result
// is the pairwise combination, level by level: at level l, the vector of the ranks whose bit l is
// 0 (a) with the vector of their partners, rank ^ 2^l (b).
//
// The algorithm halves the vector and doubles the distance at each level: a rank exchanges the
// half it gives up with its partner, so each holds both vectors' values on its own half; the
// dot product and squared norms over that half are summed over the 2^(l+1) ranks whose halves
// together cover the level's vectors (recursive doubling of 3 fp64 scalars per tensor, so every
// rank of the group gets the same bits); each rank combines its half. After k levels, the halves
// are gathered back in the reverse order, so every rank holds the whole result, each element
// computed by one rank only. A level's halves split [lo, hi) at lo + (hi - lo) / 2; the rank whose
// bit l is 0 keeps the lower half.
//
// The buffer may pack several tensors one after another (`segments`): each has its own dot
// product and norms, hence its own coefficients, wherever the halving cuts it. Arithmetic is in
// fp64 for every floating-point dtype; values between levels and the messages keep the buffer's
// dtype (fp16/bf16 round to nearest even at each level).
//
// Messages use `tag` on `comm`: two Adasum allreduces in flight on one communicator need
// different tags. Abandoned mid-collective (the job is failing), the receive is cancelled and
// the send released for MPI to finish; the buffers it may still touch are leaked on purpose.
// Threading: one thread calls Test.
#ifndef OVERLAP_COLLECTIVES_ADASUM_H_
#define OVERLAP_COLLECTIVES_ADASUM_H_

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/dtype.h"
#include "collectives/executor.h"

namespace overlap {

class AdasumAllreduce : public Work {
 public:
  // Starts the first level on `buffer` (`count` elements of `dtype`, reduced in place; it stays
  // alive until Test returns true). `segments`: the element counts of the tensors packed in the
  // buffer, in order, summing to `count`; empty means one tensor. InvalidArgument, on every rank
  // alike, when AdasumSupports (dtype.h) refuses the communicator's size or `dtype`, or the
  // segments do not add up.
  static absl::StatusOr<std::unique_ptr<AdasumAllreduce>> Start(MPI_Comm comm, int tag,
                                                                void* buffer, int64_t count,
                                                                DataType dtype,
                                                                std::vector<int64_t> segments);
  ~AdasumAllreduce() override;

  // True once every rank's whole result is in the buffer. Never blocks.
  absl::StatusOr<bool> Test() override;

 private:
  struct Range {
    int64_t lo = 0, hi = 0;
    int64_t count() const { return hi - lo; }
  };
  // One exchange with one partner: a half of the vector (level l), a group's scalars (level l,
  // recursive-doubling distance 2^j), or a gathered half (level l, in reverse).
  struct Step {
    enum Kind { kHalves, kScalars, kGather } kind;
    int level;
    int j;
  };

  AdasumAllreduce() = default;
  absl::Status Post(const Step& step);
  void Arrived(const Step& step);
  absl::Status Exchange(int partner, void* into, int64_t recv_count, const void* from,
                        int64_t send_count, MPI_Datatype type);
  // Dot product and squared norms per segment over the kept half, into scalars_.
  void Partials(int level);
  // The kept half becomes the adaptive combination of both vectors on it.
  void Combine(int level);
  // Whether this rank's vector is `a` (the lower group's) at `level`.
  bool HoldsA(int level) const { return ((rank_ >> level) & 1) == 0; }
  // Calls visit(t, count, mine, theirs) for each segment t that overlaps the kept half, with
  // that overlap's element count and its start in this rank's buffer and in the partner's half.
  template <typename Visit>
  void ForEachSegmentOfHalf(Visit visit) const;
  uint8_t* At(int64_t element) const {
    return buffer_ + static_cast<size_t>(element) * elem_bytes_;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int tag_ = 0;
  int rank_ = 0;
  int size_ = 1;
  uint8_t* buffer_ = nullptr;
  DataType dtype_ = DataType::kFloat32;
  size_t elem_bytes_ = 0;
  std::vector<int64_t> segment_starts_;  // segments + 1 boundaries, from 0 to count
  std::vector<Step> steps_;
  size_t next_ = 0;  // the step in flight
  Range current_;
  std::vector<Range> parents_;  // per level: the range it halved
  // The partner's values on the kept half.
  std::vector<uint8_t> theirs_;
  // Per segment: dot, |a|^2, |b|^2; and what the partner of a scalar step sent.
  std::vector<double> scalars_, incoming_;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_ADASUM_H_
