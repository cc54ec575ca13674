#include "collectives/mpi_executor.h"

#include <algorithm>
#include <climits>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/half.h"

namespace overlap {
namespace {

// fp16/bf16 reduction kernels for MPI_Op_create: widen to fp32, combine, round back.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), typename Combine>
void ReduceHalf(const void* in, void* inout, int len, Combine combine) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < len; ++i) b[i] = FromFloat(combine(ToFloat(a[i]), ToFloat(b[i])));
}

struct Sum {
  float operator()(float a, float b) const { return a + b; }
};
struct Prod {
  float operator()(float a, float b) const { return a * b; }
};
struct Min {
  float operator()(float a, float b) const { return std::min(a, b); }
};
struct Max {
  float operator()(float a, float b) const { return std::max(a, b); }
};

template <typename Combine>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceHalf<HalfToFloat, FloatToHalf>(in, inout, *len, Combine());
}
template <typename Combine>
void BFloat16Op(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceHalf<BFloat16ToFloat, FloatToBFloat16>(in, inout, *len, Combine());
}

// User-defined ops live as long as MPI does; created once, after MPI_Init, on first use.
struct HalfOps {
  MPI_Op fp16[4];
  MPI_Op bf16[4];
  HalfOps() {
    MPI_User_function* fp16_fns[4] = {HalfOp<Sum>, HalfOp<Min>, HalfOp<Max>, HalfOp<Prod>};
    MPI_User_function* bf16_fns[4] = {BFloat16Op<Sum>, BFloat16Op<Min>, BFloat16Op<Max>,
                                      BFloat16Op<Prod>};
    for (int i = 0; i < 4; ++i) {
      MPI_Op_create(fp16_fns[i], /*commute=*/1, &fp16[i]);
      MPI_Op_create(bf16_fns[i], /*commute=*/1, &bf16[i]);
    }
  }
};

int HalfOpIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return 0;
    case ReduceOp::kMin:
      return 1;
    case ReduceOp::kMax:
      return 2;
    case ReduceOp::kProduct:
      return 3;
    default:
      return -1;
  }
}

class MpiWork : public Work {
 public:
  MpiWork() = default;
  MPI_Request* request() { return &request_; }
  // Buffers MPI reads from while the request is in flight.
  std::vector<int> counts[4];

  absl::StatusOr<bool> Test() override {
    int done = 0;
    const int rc = MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return absl::InternalError(MpiErrorString(rc));
    return done != 0;
  }

 private:
  MPI_Request request_ = MPI_REQUEST_NULL;
};

absl::Status ToInts(const std::vector<int64_t>& in, const char* what, std::vector<int>* out) {
  out->resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] < 0 || in[i] > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "[", i, "] = ", in[i], " elements is outside what MPI can address (0..", INT_MAX,
          "); split the tensor"));
    }
    (*out)[i] = static_cast<int>(in[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ToInt(int64_t count) {
  if (count < 0 || count > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " elements is outside what one MPI call can address (0..", INT_MAX,
                     "); split the tensor"));
  }
  return static_cast<int>(count);
}

}  // namespace

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

MPI_Datatype MpiDataType(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return MPI_UINT16_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

absl::StatusOr<MPI_Op> MpiReduceOp(DataType dtype, ReduceOp op) {
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
    const int index = HalfOpIndex(op);
    if (index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce op ", ReduceOpName(op), " has no MPI operation"));
    }
    static const HalfOps* ops = new HalfOps();
    return dtype == DataType::kFloat16 ? ops->fp16[index] : ops->bf16[index];
  }
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("reduce op ", ReduceOpName(op), " has no MPI operation"));
  }
}

namespace {

// Open MPI's non-blocking allreduce defaults to a binomial tree for few ranks, which moves large
// buffers at a third to a half of the blocking MPI_Allreduce's bandwidth on the same ranks;
// Rabenseifner's reduce-scatter + allgather (libnbc algorithm 3) matches or beats it at every
// size we measured (docs/benchmarks.md). Only the default ("ignore" = 0) is replaced, so a
// user's OMPI_MCA_coll_libnbc_iallreduce_algorithm wins. Other MPIs lack the variable: no-op.
void PreferBandwidthOptimalIallreduce() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return;
  int index = -1;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) == MPI_SUCCESS) {
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      int value = 0;
      if (MPI_T_cvar_read(handle, &value) == MPI_SUCCESS && value == 0) {
        const int rabenseifner = 3;
        MPI_T_cvar_write(handle, &rabenseifner);
      }
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiExecutor>> MpiExecutor::Create(MPI_Comm comm, int num_channels) {
  PreferBandwidthOptimalIallreduce();
  if (num_channels < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_channels = ", num_channels, " < 1"));
  }
  std::vector<MPI_Comm> comms(static_cast<size_t>(num_channels), MPI_COMM_NULL);
  for (MPI_Comm& channel_comm : comms) {
    const int rc = MPI_Comm_dup(comm, &channel_comm);
    if (rc != MPI_SUCCESS) {
      return absl::InternalError(absl::StrCat("MPI_Comm_dup failed: ", MpiErrorString(rc)));
    }
    // Errors come back as codes that we turn into Status instead of aborting the job.
    MPI_Comm_set_errhandler(channel_comm, MPI_ERRORS_RETURN);
  }
  return std::unique_ptr<MpiExecutor>(new MpiExecutor(std::move(comms)));
}

MpiExecutor::~MpiExecutor() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm& comm : comms_) MPI_Comm_free(&comm);
}

absl::StatusOr<std::unique_ptr<Work>> MpiExecutor::Start(int channel, const CollectiveArgs& a) {
  if (channel < 0 || channel >= num_channels()) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel ", channel, " out of range [0, ", num_channels(), ")"));
  }
  MPI_Comm comm = comms_[static_cast<size_t>(channel)];
  const MPI_Datatype type = MpiDataType(a.dtype);
  auto work = std::make_unique<MpiWork>();
  MPI_Request* req = work->request();
  const void* send = a.send == nullptr ? MPI_IN_PLACE : a.send;
  int rc = MPI_SUCCESS;
  switch (a.kind) {
    case CollectiveKind::kAllreduce: {
      absl::StatusOr<int> count = ToInt(a.count);
      if (!count.ok()) return count.status();
      absl::StatusOr<MPI_Op> op = MpiReduceOp(a.dtype, a.op);
      if (!op.ok()) return op.status();
      rc = MPI_Iallreduce(send, a.recv, *count, type, *op, comm, req);
      break;
    }
    case CollectiveKind::kBroadcast: {
      absl::StatusOr<int> count = ToInt(a.count);
      if (!count.ok()) return count.status();
      rc = MPI_Ibcast(a.recv, *count, type, a.root, comm, req);
      break;
    }
    case CollectiveKind::kAllgatherv: {
      std::vector<int>& counts = work->counts[0];
      std::vector<int>& displs = work->counts[1];
      absl::Status s = ToInts(a.recv_counts, "recv_counts", &counts);
      if (s.ok()) s = ToInts(a.recv_displs, "recv_displs", &displs);
      if (!s.ok()) return s;
      int rank = 0;
      MPI_Comm_rank(comm, &rank);
      rc = MPI_Iallgatherv(a.send, counts[static_cast<size_t>(rank)], type, a.recv, counts.data(),
                           displs.data(), type, comm, req);
      break;
    }
    case CollectiveKind::kReduceScatter: {
      std::vector<int>& counts = work->counts[0];
      absl::Status s = ToInts(a.recv_counts, "recv_counts", &counts);
      if (!s.ok()) return s;
      absl::StatusOr<MPI_Op> op = MpiReduceOp(a.dtype, a.op);
      if (!op.ok()) return op.status();
      rc = MPI_Ireduce_scatter(a.send, a.recv, counts.data(), type, *op, comm, req);
      break;
    }
    case CollectiveKind::kAlltoallv: {
      absl::Status s = ToInts(a.send_counts, "send_counts", &work->counts[0]);
      if (s.ok()) s = ToInts(a.send_displs, "send_displs", &work->counts[1]);
      if (s.ok()) s = ToInts(a.recv_counts, "recv_counts", &work->counts[2]);
      if (s.ok()) s = ToInts(a.recv_displs, "recv_displs", &work->counts[3]);
      if (!s.ok()) return s;
      rc = MPI_Ialltoallv(a.send, work->counts[0].data(), work->counts[1].data(), type, a.recv,
                          work->counts[2].data(), work->counts[3].data(), type, comm, req);
      break;
    }
    case CollectiveKind::kBarrier:
      rc = MPI_Ibarrier(comm, req);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown collective kind ", static_cast<int>(a.kind)));
  }
  if (rc != MPI_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("MPI ", CollectiveKindName(a.kind), " failed to start: ", MpiErrorString(rc)));
  }
  return std::unique_ptr<Work>(std::move(work));
}

}  // namespace overlap
