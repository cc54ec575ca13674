// ControlCollectives (runtime/control/control_collectives.h) on an MPI communicator: MPI_Iallreduce with
// MPI_BAND or MPI_BOR, MPI_Iallgather, MPI_Igather + MPI_Igatherv, MPI_Ibcast of the length then of
// the bytes. A failed call's error names the MPI call and MPI's error text; the communicator
// should have MPI_ERRORS_RETURN, or MPI aborts the job instead.
//
// Threading: one thread at a time per object. Bitwise allreduces start through StartIallreduce
// (collectives/mpi_executor.h), so that they may start while other threads start Iallreduces
// on other communicators.
#ifndef OVERLAP_RUNTIME_CONTROL_MPI_CONTROL_COLLECTIVES_H_
#define OVERLAP_RUNTIME_CONTROL_MPI_CONTROL_COLLECTIVES_H_

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/control/control_collectives.h"

namespace overlap {

class MpiControlCollectives : public ControlCollectives {
 public:
  enum class Ownership { kBorrowed, kOwned };

  // `comm`'s rank and size are this rank's place. An owned communicator is freed (a failure is
  // logged) when the object is destroyed.
  MpiControlCollectives(MPI_Comm comm, int rank, int size, Ownership ownership);
  ~MpiControlCollectives() override;
  MpiControlCollectives(const MpiControlCollectives&) = delete;
  MpiControlCollectives& operator=(const MpiControlCollectives&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<std::unique_ptr<ControlRequest>> StartBitwise(BitOp op,
                                                               absl::Span<uint64_t> words) override;
  absl::StatusOr<std::unique_ptr<ControlRequest>> StartAllgather(
      uint64_t mine, std::vector<uint64_t>* all) override;
  absl::StatusOr<std::unique_ptr<ControlRequest>> StartGather(
      std::string mine, std::vector<std::string>* all) override;
  absl::StatusOr<std::unique_ptr<ControlRequest>> StartBroadcast(std::string* bytes) override;

 private:
  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const Ownership ownership_;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONTROL_MPI_CONTROL_COLLECTIVES_H_
