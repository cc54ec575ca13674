// The link probe (link_probe.h states the measurement).
#include "collectives/link_probe.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/mpi_wait.h"

namespace overlap {

absl::StatusOr<std::unique_ptr<LinkProbe>> LinkProbe::Start(MPI_Comm comm, int tag, size_t bytes,
                                                            double wait) {
  std::unique_ptr<LinkProbe> probe(new LinkProbe());
  absl::Status s = MpiCheck(MPI_Comm_rank(comm, &probe->rank_), "link probe: MPI_Comm_rank");
  if (s.ok()) s = MpiCheck(MPI_Comm_size(comm, &probe->size_), "link probe: MPI_Comm_size");
  if (!s.ok()) return s;
  if (bytes > (size_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("link probe of ", bytes, " bytes"));
  }
  probe->comm_ = comm;
  probe->tag_ = tag;
  probe->bytes_ = bytes;
  probe->my_flows_.reset(new double[static_cast<size_t>(probe->size_) + 1]());
  probe->my_flows_[static_cast<size_t>(probe->size_)] = wait;
  if (probe->size_ == 1) {
    probe->waits_.assign(1, wait);
    probe->Finish();
    return probe;
  }
  if (bytes == 0) {  // a lateness check: the gather alone
    s = probe->StartGather();
    if (!s.ok()) return s;
    return probe;
  }
  // Contents do not matter; zeros keep memory checkers quiet.
  probe->out_.reset(new char[bytes]());
  probe->in_.reset(new char[bytes]);
  s = MpiCheck(MPI_Ibarrier(comm, &probe->requests_[0]), "link probe: MPI_Ibarrier");
  if (!s.ok()) return s;
  return probe;
}

LinkProbe::~LinkProbe() {
  if (phase_ == Phase::kDone) return;
  // Abandoned (the job is failing): an exchange's receive is cancelled and its requests freed;
  // the barrier's or the gather's request is left to MPI, since a non-blocking collective's may be
  // neither freed nor cancelled (MPI 3.1, 5.12; Open MPI aborts the process). The buffers are
  // leaked rather than freed under MPI.
  if (phase_ == Phase::kExchange) {
    if (requests_[0] != MPI_REQUEST_NULL) MPI_Cancel(&requests_[0]);
    for (MPI_Request& r : requests_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
  }
  (void)out_.release();
  (void)in_.release();
  (void)gathered_.release();
  (void)my_flows_.release();
}

absl::Status LinkProbe::StartRound() {
  const int to = (rank_ + round_) % size_;
  const int from = (rank_ - round_ + size_) % size_;
  const int count = static_cast<int>(bytes_);
  round_start_ = absl::Now();
  received_ = false;
  absl::Status s = MpiCheck(MPI_Irecv(in_.get(), count, MPI_BYTE, from, tag_, comm_, &requests_[0]),
                            absl::StrCat("link probe: MPI_Irecv from rank ", from));
  if (!s.ok()) return s;
  return MpiCheck(MPI_Isend(out_.get(), count, MPI_BYTE, to, tag_, comm_, &requests_[1]),
                  absl::StrCat("link probe: MPI_Isend to rank ", to));
}

absl::Status LinkProbe::StartGather() {
  gathered_.reset(new double[static_cast<size_t>(size_) * static_cast<size_t>(size_ + 1)]);
  absl::Status s = MpiCheck(MPI_Iallgather(my_flows_.get(), size_ + 1, MPI_DOUBLE, gathered_.get(),
                                           size_ + 1, MPI_DOUBLE, comm_, &requests_[0]),
                            "link probe: MPI_Iallgather of the measured flows");
  if (s.ok()) phase_ = Phase::kGather;
  return s;
}

void LinkProbe::Finish() {
  const size_t n = static_cast<size_t>(size_);
  if (gathered_ != nullptr) {
    if (bytes_ > 0) flows_.assign(n * n, 0.0);
    waits_.assign(n, 0.0);
    for (size_t dst = 0; dst < n; ++dst) {
      const double* row = gathered_.get() + dst * (n + 1);
      if (bytes_ > 0) std::copy(row, row + n, flows_.begin() + static_cast<std::ptrdiff_t>(dst * n));
      waits_[dst] = row[n];
    }
  }
  if (bytes_ > 0) rates_.assign(n, 0.0);
  for (size_t dst = 0; dst < n && !flows_.empty(); ++dst) {
    for (size_t src = 0; src < n; ++src) {
      const double flow = flows_[dst * n + src];
      rates_[dst] = std::max(rates_[dst], flow);
      rates_[src] = std::max(rates_[src], flow);
    }
  }
  phase_ = Phase::kDone;
}

absl::StatusOr<bool> LinkProbe::Test() {
  while (true) {
    switch (phase_) {
      case Phase::kDone:
        return true;
      case Phase::kBarrier: {
        int done = 0;
        absl::Status s = MpiCheck(MPI_Test(&requests_[0], &done, MPI_STATUS_IGNORE),
                                  "link probe: MPI_Test of the barrier");
        if (!s.ok()) return s;
        if (!done) return false;
        s = StartRound();
        if (!s.ok()) return s;
        phase_ = Phase::kExchange;
        break;
      }
      case Phase::kExchange: {
        // The receive is timed on its own: the send's end says nothing about this rank's inflow.
        if (!received_) {
          int done = 0;
          absl::Status s = MpiCheck(MPI_Test(&requests_[0], &done, MPI_STATUS_IGNORE),
                                    "link probe: MPI_Test of a receive");
          if (!s.ok()) return s;
          if (!done) return false;
          const double seconds = std::max(1e-9, absl::ToDoubleSeconds(absl::Now() - round_start_));
          my_flows_[static_cast<size_t>((rank_ - round_ + size_) % size_)] =
              static_cast<double>(bytes_) / seconds;
          received_ = true;
        }
        int done = 0;
        absl::Status s = MpiCheck(MPI_Test(&requests_[1], &done, MPI_STATUS_IGNORE),
                                  "link probe: MPI_Test of a send");
        if (!s.ok()) return s;
        if (!done) return false;
        if (++round_ < size_) {
          s = MpiCheck(MPI_Ibarrier(comm_, &requests_[0]), "link probe: MPI_Ibarrier");
          if (!s.ok()) return s;
          phase_ = Phase::kBarrier;
          break;
        }
        s = StartGather();
        if (!s.ok()) return s;
        break;
      }
      case Phase::kGather: {
        int done = 0;
        absl::Status s = MpiCheck(MPI_Test(&requests_[0], &done, MPI_STATUS_IGNORE),
                                  "link probe: MPI_Test of the gather");
        if (!s.ok()) return s;
        if (!done) return false;
        Finish();
        return true;
      }
    }
  }
}

}  // namespace overlap
