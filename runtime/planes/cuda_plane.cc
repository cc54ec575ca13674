#include "runtime/planes/cuda_plane.h"

#include <mpi.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/mpi_wait.h"
#include "runtime/planes/device_backend.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// Whether every rank can run CUDA at all; decided together so that all ranks take one path.
absl::StatusOr<bool> EveryRankHasCuda(MPI_Comm comm, int rank, int device) {
  int mine = device >= 0 && device < Devices().DeviceCount() ? 1 : 0, all = 0;
  absl::Status s = MpiCheck(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm),
                            absl::StrCat("rank ", rank, ": MPI_Allreduce of the CUDA check"));
  if (!s.ok()) return s;
  return all == 1;
}

}  // namespace

CudaPlane::CudaPlane(MPI_Comm comm, PlaneContext context, std::function<int()> default_device,
                     HostSplit split)
    : comm_(comm),
      config_(std::move(context.config)),
      rank_(context.rank),
      size_(context.size),
      default_device_(std::move(default_device)),
      split_(split),
      timeline_(context.timeline),
      compression_(context.compression),
      complete_(std::move(context.complete)),
      comm_meter_(context.comm_meter) {}

CudaPlane::~CudaPlane() {
  // Residuals on the device are freed on the executor's streams: while those still exist.
  if (compression_ != nullptr) compression_->ReleaseDeviceState();
  plane_.reset();  // its buffers and streams before the executor's
  executor_.reset();
}

absl::Status CudaPlane::SetUp(int device) {
  device_ = Device::Cuda(device);
  absl::StatusOr<bool> every_rank_has_cuda = EveryRankHasCuda(comm_, rank_, device);
  if (!every_rank_has_cuda.ok()) return every_rank_has_cuda.status();
  if (!*every_rank_has_cuda) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_, ": CUDA tensors need a usable GPU on every rank; here cuda:", device,
        " is not usable (", Devices().DeviceCount(), " visible",
        Devices().UnavailableReason().empty() ? "" : ": " + Devices().UnavailableReason(), ")"));
  }
  std::string nccl_refusal;
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      Devices().CreateExecutor(comm_, rank_, device, config_, split_, &nccl_refusal);
  if (!executor.ok()) return executor.status();
  executor_ = *std::move(executor);
  if (!nccl_refusal.empty() && rank_ == 0) {
    spdlog::warn("overlap: CUDA tensors go through MPI with host staging: {}", nccl_refusal);
  }
  absl::StatusOr<std::unique_ptr<DataPlane>> plane =
      DataPlane::OnDevice(Device::Cuda(device), executor_.get(),
                          PlaneContext{config_, rank_, size_, timeline_, compression_, complete_,
                                       comm_meter_},
                          "cuda ");
  if (!plane.ok()) return plane.status();
  plane_ = std::move(*plane);
  spdlog::info("overlap: rank {} moves CUDA tensors on cuda:{} with {}{}", rank_, device,
               executor_->name(),
               split_.host < 0         ? ""
               : split_.hierarchical ? ", hierarchical allreduce"
                                     : ", two-stage buckets");
  if (split_.host >= 0 && split_.hierarchical && std::string(executor_->name()) == "nccl" &&
      rank_ == 0) {
    spdlog::info(
        "overlap: CUDA tensors on NCCL reduce flat under the hierarchical allreduce: "
        "NCCL's rings and trees already keep each host's traffic on its own links");
  }
  return absl::OkStatus();
}

absl::Status CudaPlane::SetUpOnce() { return SetUpOnce(default_device_()); }

absl::Status CudaPlane::SetUpOnce(int device) {
  if (!set_up_) {
    set_up_ = true;
    setup_error_ = SetUp(device);
  }
  return setup_error_;
}

void CudaPlane::Submit(std::vector<ReadyOp> ready) {
  if (ready.empty()) return;
  if (!set_up_) {
    int device = -1;
    for (const ReadyOp& r : ready) {
      if (r.op.has_value() && !r.op->inputs.empty()) {
        device = r.op->inputs[0].device.index;
        break;
      }
    }
    // Its error fails the operations below.
    (void)(device >= 0 ? SetUpOnce(device) : SetUpOnce());
  }
  if (plane_ == nullptr) {
    for (ReadyOp& r : ready) {
      if (r.op.has_value()) complete_(*r.op, setup_error_);
    }
    return;
  }
  plane_->Submit(std::move(ready));
}

absl::Status CudaPlane::Progress() {
  return plane_ == nullptr ? absl::OkStatus() : plane_->Progress();
}

bool CudaPlane::idle() const { return plane_ == nullptr || plane_->idle(); }

void CudaPlane::FailAll(const absl::Status& status) {
  if (plane_ != nullptr) plane_->FailAll(status);
}

void CudaPlane::Abort() {
  if (executor_ != nullptr) executor_->Abort();
}

Device CudaPlane::device() const { return device_; }

std::string CudaPlane::executor_name() const {
  return executor_ == nullptr ? "" : executor_->name();
}

}  // namespace overlap
