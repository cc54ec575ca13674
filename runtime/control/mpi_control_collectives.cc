#include "runtime/control/mpi_control_collectives.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/mpi_executor.h"
#include "collectives/mpi_wait.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

absl::Status Failed(const char* call, int rc) {
  return absl::UnavailableError(absl::StrCat(call, ": ", MpiErrorString(rc)));
}

// Tests one MPI request; `call` names the MPI call in errors.
absl::StatusOr<bool> TestRequest(MPI_Request* request, const char* call) {
  int done = 0;
  const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return Failed(call, rc);
  return done != 0;
}

class SingleRequest : public ControlRequest {
 public:
  explicit SingleRequest(const char* call) : call_(call) {}
  MPI_Request* request() { return &request_; }
  absl::StatusOr<bool> Test() override { return TestRequest(&request_, call_); }

 private:
  const char* call_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// The lengths first (MPI_Igather), then the bytes (MPI_Igatherv), then split by rank.
class GatherRequest : public ControlRequest {
 public:
  GatherRequest(MPI_Comm comm, int rank, int size, std::string mine, std::vector<std::string>* all)
      : comm_(comm), rank_(rank), size_(size), mine_(std::move(mine)), all_(all) {}

  absl::Status Start() {
    length_ = static_cast<int>(mine_.size());
    if (rank_ == 0) lengths_.assign(static_cast<size_t>(size_), 0);
    const int rc =
        MPI_Igather(&length_, 1, MPI_INT, lengths_.data(), 1, MPI_INT, 0, comm_, &request_);
    return rc == MPI_SUCCESS ? absl::OkStatus() : Failed("MPI_Igather of the lengths", rc);
  }

  absl::StatusOr<bool> Test() override {
    if (done_) return true;
    absl::StatusOr<bool> done = TestRequest(
        &request_, bytes_phase_ ? "MPI_Igatherv of the bytes" : "MPI_Igather of the lengths");
    if (!done.ok() || !*done) return done;
    if (!bytes_phase_) {
      bytes_phase_ = true;
      std::vector<int> displs;
      if (rank_ == 0) {
        displs.assign(static_cast<size_t>(size_), 0);
        for (size_t r = 1; r < displs.size(); ++r) displs[r] = displs[r - 1] + lengths_[r - 1];
        bytes_.assign(static_cast<size_t>(displs.back()) + static_cast<size_t>(lengths_.back()),
                      '\0');
      }
      displs_ = std::move(displs);
      const int rc = MPI_Igatherv(mine_.data(), length_, MPI_BYTE, bytes_.data(), lengths_.data(),
                                  displs_.data(), MPI_BYTE, 0, comm_, &request_);
      if (rc != MPI_SUCCESS) return Failed("MPI_Igatherv of the bytes", rc);
      return false;
    }
    done_ = true;
    all_->clear();
    if (rank_ == 0) {
      all_->reserve(static_cast<size_t>(size_));
      for (size_t r = 0; r < lengths_.size(); ++r) {
        all_->push_back(
            bytes_.substr(static_cast<size_t>(displs_[r]), static_cast<size_t>(lengths_[r])));
      }
    }
    return true;
  }

 private:
  MPI_Comm comm_;
  const int rank_;
  const int size_;
  std::string mine_;
  std::vector<std::string>* all_;
  int length_ = 0;
  std::vector<int> lengths_, displs_;
  std::string bytes_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool bytes_phase_ = false;
  bool done_ = false;
};

// The length first, then the bytes: both MPI_Ibcast from rank 0.
class BroadcastRequest : public ControlRequest {
 public:
  BroadcastRequest(MPI_Comm comm, std::string* bytes) : comm_(comm), bytes_(bytes) {}

  absl::Status Start() {
    length_ = static_cast<int64_t>(bytes_->size());
    const int rc = MPI_Ibcast(&length_, 1, MPI_INT64_T, 0, comm_, &request_);
    return rc == MPI_SUCCESS ? absl::OkStatus() : Failed("MPI_Ibcast of the length", rc);
  }

  absl::StatusOr<bool> Test() override {
    if (done_) return true;
    absl::StatusOr<bool> done = TestRequest(
        &request_, bytes_phase_ ? "MPI_Ibcast of the bytes" : "MPI_Ibcast of the length");
    if (!done.ok() || !*done) return done;
    if (!bytes_phase_) {
      bytes_phase_ = true;
      bytes_->resize(static_cast<size_t>(length_));
      const int rc =
          MPI_Ibcast(bytes_->data(), static_cast<int>(length_), MPI_BYTE, 0, comm_, &request_);
      if (rc != MPI_SUCCESS) return Failed("MPI_Ibcast of the bytes", rc);
      return false;
    }
    done_ = true;
    return true;
  }

 private:
  MPI_Comm comm_;
  std::string* bytes_;
  int64_t length_ = 0;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool bytes_phase_ = false;
  bool done_ = false;
};

}  // namespace

MpiControlCollectives::MpiControlCollectives(MPI_Comm comm, int rank, int size, Ownership ownership)
    : comm_(comm), rank_(rank), size_(size), ownership_(ownership) {}

MpiControlCollectives::~MpiControlCollectives() {
  if (ownership_ != Ownership::kOwned || comm_ == MPI_COMM_NULL) return;
  absl::Status s =
      MpiCheck(MPI_Comm_free(&comm_),
               absl::StrCat("rank ", rank_, ": MPI_Comm_free of a control communicator"));
  if (!s.ok()) spdlog::warn("overlap: {}", std::string(s.message()));
}

absl::StatusOr<std::unique_ptr<ControlRequest>> MpiControlCollectives::StartBitwise(
    BitOp op, absl::Span<uint64_t> words) {
  auto request = std::make_unique<SingleRequest>("MPI_Iallreduce");
  const int rc =
      StartIallreduce(MPI_IN_PLACE, words.data(), static_cast<int>(words.size()), MPI_UINT64_T,
                      op == BitOp::kAnd ? MPI_BAND : MPI_BOR, comm_, request->request());
  if (rc != MPI_SUCCESS) return Failed("MPI_Iallreduce", rc);
  return request;
}

absl::StatusOr<std::unique_ptr<ControlRequest>> MpiControlCollectives::StartAllgather(
    uint64_t mine, std::vector<uint64_t>* all) {
  all->assign(static_cast<size_t>(size_), 0);
  // MPI reads the send word when the collective runs, not when it starts: it lives in the request.
  class AllgatherRequest : public SingleRequest {
   public:
    explicit AllgatherRequest(uint64_t mine) : SingleRequest("MPI_Iallgather"), mine_(mine) {}
    const uint64_t* mine() const { return &mine_; }

   private:
    const uint64_t mine_;
  };
  auto request = std::make_unique<AllgatherRequest>(mine);
  const int rc = MPI_Iallgather(request->mine(), 1, MPI_UINT64_T, all->data(), 1, MPI_UINT64_T,
                                comm_, request->request());
  if (rc != MPI_SUCCESS) return Failed("MPI_Iallgather", rc);
  return request;
}

absl::StatusOr<std::unique_ptr<ControlRequest>> MpiControlCollectives::StartGather(
    std::string mine, std::vector<std::string>* all) {
  auto request = std::make_unique<GatherRequest>(comm_, rank_, size_, std::move(mine), all);
  absl::Status s = request->Start();
  if (!s.ok()) return s;
  return request;
}

absl::StatusOr<std::unique_ptr<ControlRequest>> MpiControlCollectives::StartBroadcast(
    std::string* bytes) {
  auto request = std::make_unique<BroadcastRequest>(comm_, bytes);
  absl::Status s = request->Start();
  if (!s.ok()) return s;
  return request;
}

}  // namespace overlap
