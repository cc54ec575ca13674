// What every rank of a multi-rank test agrees on, so that loops end at the same step everywhere.
// A condition read from Stats() is published by each rank's coordinator when it gets there,
// which on a loaded machine can be a step later on one rank than on another; a loop ended by it
// runs different numbers of steps on different ranks, and the extra step's collectives never
// complete. Through MPI_COMM_WORLD, beside the runtime's own communicators.
#ifndef OVERLAP_TESTS_RUNTIME_AGREED_H_
#define OVERLAP_TESTS_RUNTIME_AGREED_H_

#include <mpi.h>

#include <cstdint>

namespace overlap::testing {

// The largest `local` over every rank (a step some rank saw, a flag some rank holds).
inline int64_t AgreedMax(int64_t local) {
  int64_t all = local;
  MPI_Allreduce(&local, &all, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return all;
}

}  // namespace overlap::testing

#endif  // OVERLAP_TESTS_RUNTIME_AGREED_H_
