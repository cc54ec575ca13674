#include "runtime/planes/device_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/mpi_executor.h"
#include "collectives/mpi_wait.h"
#include "collectives/nccl_executor.h"
#include "collectives/staging_executor.h"

namespace overlap {
namespace {

// CUDA: NCCL unless OVERLAP_EXECUTOR=mpi or NCCL refuses (ranks sharing a GPU, a build without
// NCCL), then MPI staged through pinned host memory.
class CudaBackend : public DeviceBackend {
 public:
  int DeviceCount() const override { return CudaDeviceCount(); }
  std::string UnavailableReason() const override { return CudaUnavailableReason(); }
  absl::StatusOr<std::unique_ptr<BufferOps>> CreateBufferOps(Device device,
                                                             void* stream) const override {
    return overlap::CreateBufferOps(device, stream);
  }
  absl::StatusOr<std::unique_ptr<Executor>> CreateExecutor(MPI_Comm comm, int rank, int device,
                                                           const Config& config,
                                                           const HostSplit& split,
                                                           std::string* note) const override {
    if (config.executor != "mpi") {
      MPI_Comm dup;
      absl::Status s = MpiCheck(MPI_Comm_dup(comm, &dup),
                                absl::StrCat("rank ", rank, ": MPI_Comm_dup for NCCL's setup"));
      if (!s.ok()) return s;
      absl::StatusOr<std::unique_ptr<Executor>> nccl =
          CreateNcclExecutor(dup, device, config.num_channels);
      // NCCL keeps no reference to it once its communicators exist.
      s = MpiCheck(MPI_Comm_free(&dup),
                   absl::StrCat("rank ", rank, ": MPI_Comm_free after NCCL's setup"));
      if (!s.ok()) return s;
      if (nccl.ok()) return nccl;
      if (config.executor == "nccl") {
        return absl::Status(nccl.status().code(),
                            absl::StrCat("OVERLAP_EXECUTOR=nccl: ", nccl.status().message()));
      }
      *note = std::string(nccl.status().message());
    }
    MpiExecutorOptions options;
    options.num_channels = config.num_channels;
    options.host = split.host;
    options.hierarchical = split.hierarchical;
    absl::StatusOr<std::unique_ptr<MpiExecutor>> mpi = MpiExecutor::Create(comm, options);
    if (!mpi.ok()) return mpi.status();
    absl::StatusOr<std::unique_ptr<StagingExecutor>> staged =
        StagingExecutor::Create(std::move(*mpi), Device::Cuda(device), rank);
    if (!staged.ok()) return staged.status();
    return std::unique_ptr<Executor>(std::move(*staged));
  }
};

// The installed backend; CUDA's until a test installs another (and for the life of the process).
std::unique_ptr<DeviceBackend>& Installed() {
  static auto* backend = new std::unique_ptr<DeviceBackend>(std::make_unique<CudaBackend>());
  return *backend;
}

}  // namespace

const DeviceBackend& Devices() { return *Installed(); }

void InstallDeviceBackendForTesting(std::unique_ptr<DeviceBackend> backend) {
  Installed() = backend != nullptr ? std::move(backend) : std::make_unique<CudaBackend>();
}

}  // namespace overlap
