// This process's place in MPI_COMM_WORLD, for the executor tests that run below the runtime.
#ifndef OVERLAP_TESTS_COLLECTIVES_MPI_WORLD_H_
#define OVERLAP_TESTS_COLLECTIVES_MPI_WORLD_H_

#include <mpi.h>

namespace overlap::testing {

inline int Rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int Size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

}  // namespace overlap::testing

#endif  // OVERLAP_TESTS_COLLECTIVES_MPI_WORLD_H_
