#include "bench/job.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "runtime/overlap.h"

namespace overlap::bench {

void AbortJob(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: rank %d: %s\n", program, Rank(), message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

void CheckOrAbort(const char* program, const absl::Status& status) {
  if (!status.ok()) AbortJob(program, status.ToString());
}

int FinishJob(const char* program, int exit_code) {
  CheckOrAbort(program, Shutdown());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  return exit_code;
}

}  // namespace overlap::bench
