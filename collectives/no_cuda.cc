// The CUDA half of buffer_ops.h where overlap is built without CUDA: no devices, and a reason.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/buffer_ops.h"
#include "collectives/buffer_ops_internal.h"

namespace overlap {
namespace {

constexpr char kNoCuda[] =
    "overlap was built without CUDA (no toolkit found at build time, or OVERLAP_CUDA_HOME=none)";

}  // namespace

absl::StatusOr<std::unique_ptr<BufferOps>> CreateCudaBufferOps(int index, void*) {
  return absl::UnavailableError(absl::StrCat("cuda:", index, ": ", kNoCuda));
}

int CudaDeviceCount() { return 0; }

bool BuiltWithCuda() { return false; }

std::string CudaUnavailableReason() { return kNoCuda; }

}  // namespace overlap
