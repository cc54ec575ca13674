#include "collectives/nccl_executor.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/buffer_ops.h"

namespace overlap {

struct NcclExecutor::Channel {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;  // one int for barriers
};

namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::UnavailableError(
      absl::StrCat(what, ": CUDA error ", static_cast<int>(e), ": ", cudaGetErrorString(e)));
}

absl::Status NcclError(ncclResult_t r, const char* what) {
  return absl::UnavailableError(
      absl::StrCat(what, ": NCCL error ", static_cast<int>(r), ": ", ncclGetErrorString(r)));
}

ncclDataType_t NcclType(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
  }
  return ncclFloat32;
}

absl::StatusOr<ncclRedOp_t> NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kAdasum:
      return absl::InvalidArgumentError(
          "Adasum has no NCCL operation: for CUDA tensors set OVERLAP_EXECUTOR=mpi, which runs it "
          "on host copies (staged through pinned memory)");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("reduce op ", ReduceOpName(op), " has no NCCL operation"));
  }
}

// Reads the channel's communicator at every Test, since Abort() may have released it.
class NcclWork : public Work {
 public:
  NcclWork(const ncclComm_t* comm, cudaEvent_t event) : comm_(comm), event_(event) {}
  ~NcclWork() override { cudaEventDestroy(event_); }

  absl::StatusOr<bool> Test() override {
    if (*comm_ == nullptr) return absl::AbortedError("NCCL communicator aborted");
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(*comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) return NcclError(async, "collective");
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    return CudaError(e, "collective");
  }

 private:
  const ncclComm_t* comm_;
  cudaEvent_t event_;
};

const char* At(const void* base, int64_t elements, DataType dtype) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(DataTypeSize(dtype));
}

// "host/pci-bus-id" of `device`, so that ranks sharing a GPU find each other.
std::string GpuIdentity(int device) {
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) != cudaSuccess) {
    std::snprintf(bus, sizeof(bus), "device-%d", device);
  }
  return absl::StrCat(host, "/", bus);
}

// The ranks that share a GPU with another rank, as "ranks 0,1 share GPU host/0000:19:00.0"; ""
// when every rank has a GPU of its own. Collective over `comm`.
std::string SharedGpus(MPI_Comm comm, int size, int device) {
  constexpr int kWidth = 128;
  char mine[kWidth] = {0};
  const std::string identity = GpuIdentity(device);
  std::strncpy(mine, identity.c_str(), kWidth - 1);
  std::vector<char> all(static_cast<size_t>(kWidth) * static_cast<size_t>(size));
  MPI_Allgather(mine, kWidth, MPI_CHAR, all.data(), kWidth, MPI_CHAR, comm);
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < size; ++r) {
    ranks_of[std::string(&all[static_cast<size_t>(r) * kWidth])].push_back(r);
  }
  std::vector<std::string> shared;
  for (const auto& [gpu, ranks] : ranks_of) {
    if (ranks.size() > 1) {
      shared.push_back(absl::StrCat("ranks ", absl::StrJoin(ranks, ","), " share GPU ", gpu));
    }
  }
  return absl::StrJoin(shared, "; ");
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclExecutor>> NcclExecutor::Create(MPI_Comm comm, int device,
                                                                   int num_channels) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Every rank must learn whether every other rank has a GPU before any NCCL call, or the ranks
  // with one would wait in ncclCommInitRank for the ranks without.
  int usable = device >= 0 && device < CudaDeviceCount() ? 1 : 0, all_usable = 0;
  MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, comm);
  if (!all_usable) {
    return absl::UnavailableError(absl::StrCat("rank ", rank, ": NCCL executor needs CUDA device ",
                                               device, " on every rank; ", CudaDeviceCount(),
                                               " visible here"));
  }
  const std::string shared = SharedGpus(comm, size, device);
  if (!shared.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, ": NCCL cannot run two ranks on one GPU (", shared,
        "); give each rank its own GPU, or set OVERLAP_EXECUTOR=mpi to stage through host memory"));
  }
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
  std::unique_ptr<NcclExecutor> executor(new NcclExecutor(rank, size, device));
  for (int c = 0; c < num_channels; ++c) {
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm);
    auto channel = std::make_unique<Channel>();
    e = cudaStreamCreateWithFlags(&channel->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return CudaError(e, "cudaStreamCreate");
    e = cudaMalloc(&channel->scratch, sizeof(int32_t));
    if (e != cudaSuccess) return CudaError(e, "cudaMalloc");
    const ncclResult_t r = ncclCommInitRank(&channel->comm, size, id, rank);
    if (r != ncclSuccess) return NcclError(r, "ncclCommInitRank");
    executor->channels_.push_back(std::move(channel));
  }
  return executor;
}

NcclExecutor::NcclExecutor(int rank, int size, int device)
    : rank_(rank), size_(size), device_(device) {}

absl::StatusOr<std::unique_ptr<Executor>> CreateNcclExecutor(MPI_Comm comm, int device,
                                                             int num_channels) {
  absl::StatusOr<std::unique_ptr<NcclExecutor>> executor =
      NcclExecutor::Create(comm, device, num_channels);
  if (!executor.ok()) return executor.status();
  return std::unique_ptr<Executor>(std::move(*executor));
}

void* NcclExecutor::channel_stream(int channel) const {
  return channels_[static_cast<size_t>(channel)]->stream;
}

void NcclExecutor::Abort() {
  for (auto& channel : channels_) {
    if (channel->comm != nullptr) ncclCommAbort(channel->comm);
    channel->comm = nullptr;
  }
}

NcclExecutor::~NcclExecutor() {
  for (auto& channel : channels_) {
    if (channel->comm != nullptr) ncclCommDestroy(channel->comm);
    if (channel->stream != nullptr) cudaStreamDestroy(channel->stream);
    if (channel->scratch != nullptr) cudaFree(channel->scratch);
  }
}

absl::StatusOr<std::unique_ptr<Work>> NcclExecutor::Start(int channel_index,
                                                          const CollectiveArgs& a) {
  if (channel_index < 0 || channel_index >= num_channels()) {
    return absl::InvalidArgumentError(absl::StrCat("channel ", channel_index, " out of range"));
  }
  Channel& ch = *channels_[static_cast<size_t>(channel_index)];
  if (ch.comm == nullptr) return absl::FailedPreconditionError("NCCL communicators were aborted");
  const ncclDataType_t type = NcclType(a.dtype);
  const void* send = a.send == nullptr ? a.recv : a.send;
  ncclResult_t r = ncclSuccess;
  switch (a.kind) {
    case CollectiveKind::kAllreduce: {
      absl::StatusOr<ncclRedOp_t> op = NcclOp(a.op);
      if (!op.ok()) return op.status();
      r = ncclAllReduce(send, a.recv, static_cast<size_t>(a.count), type, *op, ch.comm, ch.stream);
      break;
    }
    case CollectiveKind::kBroadcast:
      r = ncclBroadcast(a.recv, a.recv, static_cast<size_t>(a.count), type, a.root, ch.comm,
                        ch.stream);
      break;
    case CollectiveKind::kAllgatherv: {
      ncclGroupStart();
      for (int peer = 0; peer < size_; ++peer) {
        const size_t n = static_cast<size_t>(a.recv_counts[static_cast<size_t>(rank_)]);
        ncclSend(a.send, n, type, peer, ch.comm, ch.stream);
        ncclRecv(const_cast<char*>(At(a.recv, a.recv_displs[static_cast<size_t>(peer)], a.dtype)),
                 static_cast<size_t>(a.recv_counts[static_cast<size_t>(peer)]), type, peer, ch.comm,
                 ch.stream);
      }
      r = ncclGroupEnd();
      break;
    }
    case CollectiveKind::kReduceScatter: {
      absl::StatusOr<ncclRedOp_t> op = NcclOp(a.op);
      if (!op.ok()) return op.status();
      ncclGroupStart();
      int64_t offset = 0;
      for (int root = 0; root < size_; ++root) {
        const int64_t n = a.recv_counts[static_cast<size_t>(root)];
        ncclReduce(At(send, offset, a.dtype), a.recv, static_cast<size_t>(n), type, *op, root,
                   ch.comm, ch.stream);
        offset += n;
      }
      r = ncclGroupEnd();
      break;
    }
    case CollectiveKind::kAlltoallv: {
      ncclGroupStart();
      for (int peer = 0; peer < size_; ++peer) {
        const size_t p = static_cast<size_t>(peer);
        ncclSend(At(a.send, a.send_displs[p], a.dtype), static_cast<size_t>(a.send_counts[p]), type,
                 peer, ch.comm, ch.stream);
        ncclRecv(const_cast<char*>(At(a.recv, a.recv_displs[p], a.dtype)),
                 static_cast<size_t>(a.recv_counts[p]), type, peer, ch.comm, ch.stream);
      }
      r = ncclGroupEnd();
      break;
    }
    case CollectiveKind::kBarrier:
      r = ncclAllReduce(ch.scratch, ch.scratch, 1, ncclInt32, ncclSum, ch.comm, ch.stream);
      break;
  }
  if (r != ncclSuccess) return NcclError(r, CollectiveKindName(a.kind));
  cudaEvent_t event;
  cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (e != cudaSuccess) return CudaError(e, "cudaEventCreate");
  e = cudaEventRecord(event, ch.stream);
  if (e != cudaSuccess) {
    cudaEventDestroy(event);
    return CudaError(e, "cudaEventRecord");
  }
  return std::unique_ptr<Work>(new NcclWork(&ch.comm, event));
}

int NcclVersion() {
  int version = 0;
  return ncclGetVersion(&version) == ncclSuccess ? version : 0;
}

}  // namespace overlap
