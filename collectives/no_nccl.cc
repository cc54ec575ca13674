// CreateNcclExecutor where overlap is built without CUDA (third_party/cuda).
#include "collectives/nccl_executor.h"

namespace overlap {

absl::StatusOr<std::unique_ptr<Executor>> CreateNcclExecutor(MPI_Comm, int, int) {
  return absl::UnavailableError(
      "NCCL is not available: overlap was built without CUDA (no toolkit found at build time, "
      "or OVERLAP_CUDA_HOME=none)");
}

int NcclVersion() { return 0; }

}  // namespace overlap
