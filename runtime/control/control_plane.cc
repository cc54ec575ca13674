#include "runtime/control/control_plane.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collectives/mpi_wait.h"
#include "runtime/control/control_addresses.h"
#include "runtime/control/control_handshake.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// How long one connection may take to answer rank 0's challenge. A rank answers at once; a
// stranger that stays silent is dropped after this, and the other handshakes go on meanwhile.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

int PollMillis(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  // Round up so that a short positive timeout does not become a busy loop.
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))));
}

// Signals go out at once (no Nagle), and a peer whose host or network stops answering closes the
// connection with ETIMEDOUT after `peer_timeout`: keepalive probes the idle connection a few
// times within it, and TCP_USER_TIMEOUT bounds both the probes and any unacknowledged signal.
void Tune(int fd, absl::Duration peer_timeout) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  const int64_t ms = std::max<int64_t>(1000, absl::ToInt64Milliseconds(peer_timeout));
  const int probe_s = static_cast<int>(std::max<int64_t>(1, ms / 4000));
  const int probes = static_cast<int>(std::max<int64_t>(4, ms / 1000 / probe_s + 1));
  const unsigned int user_timeout_ms = static_cast<unsigned int>(ms);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof(probe_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof(probe_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

// Connects with a deadline; returns -1 on failure.
int ConnectTo(const std::string& address, int port, absl::Duration timeout,
              absl::Duration peer_timeout) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    if (poll(&p, 1, PollMillis(timeout)) == 1 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
      rc = 0;
    }
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  Tune(fd, peer_timeout);
  return fd;
}

// Gathers one string from every rank at rank 0 (entry r from rank r); other ranks get {}.
absl::StatusOr<std::vector<std::string>> GatherAtRoot(MPI_Comm comm, int rank, int size,
                                                      const std::string& mine) {
  const std::string what = absl::StrCat("rank ", rank, ": MPI_Gather of the control addresses");
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  absl::Status s =
      MpiCheck(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm), what);
  if (!s.ok()) return s;
  std::string all;
  if (rank == 0) {
    size_t total = 0;
    for (size_t r = 0; r < lengths.size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += static_cast<size_t>(lengths[r]);
    }
    all.resize(total);
  }
  s = MpiCheck(MPI_Gatherv(mine.data(), length, MPI_CHAR, &all[0], lengths.data(), offsets.data(),
                           MPI_CHAR, 0, comm),
               what);
  if (!s.ok()) return s;
  std::vector<std::string> out;
  for (int r = 0; rank == 0 && r < size; ++r) out.push_back(all.substr(offsets[r], lengths[r]));
  return out;
}

// Rank 0: a listening socket on each of `addresses` (an ephemeral port each), appended to
// `listeners`; returns "address:port,..." for those that opened, "" when none did.
std::string Listen(const std::vector<Interface>& addresses, int backlog,
                   std::vector<int>& listeners) {
  std::vector<std::string> contact;
  for (const Interface& address : addresses) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(address.address);
    socklen_t len = sizeof(sa);
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
        listen(fd, backlog) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
      listeners.push_back(fd);
      contact.push_back(absl::StrCat(address.Text(), ":", ntohs(sa.sin_port)));
    } else {
      spdlog::warn("overlap: rank 0 cannot listen for control connections on {}: {}",
                   address.Text(), std::strerror(errno));
      if (fd >= 0) close(fd);
    }
  }
  return absl::StrJoin(contact, ",");
}

}  // namespace

std::string ControlPlane::Peer(int rank) const {
  const std::string& host = hosts_[static_cast<size_t>(rank)];
  return absl::StrCat("rank ", rank, " (host ", host, ")");
}

absl::Status ControlPlane::LostPeer(int peer, int error) const {
  std::string why;
  if (error == 0) {
    why = "the process exited or shut down early";
  } else if (error == ETIMEDOUT) {
    // The wording is overlaprun's cue to blame the host (launcher/failure_log.h).
    why = absl::StrCat("no answer for ", absl::FormatDuration(peer_timeout_),
                       ": the host or its network is down (", std::strerror(error), ")");
  } else {
    why = std::strerror(error);
  }
  return absl::UnavailableError(
      absl::StrCat("rank ", rank_, ": lost the control connection to ", Peer(peer), ": ", why));
}

absl::StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Connect(
    MPI_Comm comm, std::vector<std::string> hosts, absl::Duration timeout,
    absl::Duration peer_timeout, const std::function<void(const std::string&)>& on_listen) {
  int rank = 0, size = 1;
  absl::Status s = MpiCheck(MPI_Comm_rank(comm, &rank), "control plane: MPI_Comm_rank");
  if (s.ok()) s = MpiCheck(MPI_Comm_size(comm, &size), "control plane: MPI_Comm_size");
  if (!s.ok()) return s;
  std::unique_ptr<ControlPlane> plane(new ControlPlane(rank, std::move(hosts), peer_timeout));
  const absl::Time deadline = absl::Now() + timeout;

  // Every rank's interfaces, so that rank 0 listens only where its ranks reach it.
  const std::vector<Interface> own = LocalInterfaces();
  absl::StatusOr<std::vector<std::string>> interfaces =
      GatherAtRoot(comm, rank, size, EncodeInterfaces(own));
  if (!interfaces.ok()) return interfaces.status();

  // The job's secret travels over MPI, which only the job's ranks take part in, before the
  // control socket opens. A zero secret with an empty contact below: rank 0 could not draw one.
  JobSecret secret{};
  if (rank == 0) {
    absl::StatusOr<std::array<uint8_t, 32>> drawn = RandomBytes32();
    if (drawn.ok()) {
      secret = *drawn;
    } else {
      spdlog::error("overlap: rank 0: no secret for the control plane: {}",
                    std::string(drawn.status().message()));
    }
  }
  s = MpiCheck(MPI_Bcast(secret.data(), static_cast<int>(secret.size()), MPI_BYTE, 0, comm),
               absl::StrCat("rank ", rank, ": MPI_Bcast of the control plane's secret"));
  if (!s.ok()) return s;

  // Rank 0 publishes "addr:port,addr:port,..."; a listen failure publishes "" so nobody waits.
  std::vector<int> listeners;
  std::string contact;
  if (rank == 0 && secret != JobSecret{}) {
    std::vector<std::vector<Interface>> remote;
    for (int r = 1; r < size; ++r) {
      const std::string& theirs = (*interfaces)[static_cast<size_t>(r)];
      if (plane->hosts_[static_cast<size_t>(r)] != plane->hosts_[0] || theirs != (*interfaces)[0]) {
        remote.push_back(DecodeInterfaces(theirs));
      }
    }
    contact = Listen(ChooseListenAddresses(own, remote), size + 16, listeners);
    if (on_listen && !contact.empty()) on_listen(contact);
  }
  const auto close_listeners = [&listeners] {
    for (int fd : listeners) close(fd);
  };
  int contact_size = static_cast<int>(contact.size());
  s = MpiCheck(MPI_Bcast(&contact_size, 1, MPI_INT, 0, comm),
               absl::StrCat("rank ", rank, ": MPI_Bcast of rank 0's control address length"));
  if (s.ok()) {
    contact.resize(static_cast<size_t>(contact_size));
    s = MpiCheck(MPI_Bcast(&contact[0], contact_size, MPI_CHAR, 0, comm),
                 absl::StrCat("rank ", rank, ": MPI_Bcast of rank 0's control address"));
  }
  if (!s.ok()) {
    close_listeners();
    return s;
  }
  if (contact.empty()) {
    close_listeners();
    return absl::UnavailableError(
        absl::StrCat("rank ", rank, ": rank 0 could not open its control socket"));
  }

  if (rank != 0) {
    int fd = -1;
    std::string refused;  // the last handshake failure, for the error
    const std::vector<std::string> endpoints = absl::StrSplit(contact, ',');
    while (fd < 0 && absl::Now() < deadline) {
      for (const std::string& endpoint : endpoints) {
        const size_t colon = endpoint.rfind(':');
        int port = 0;
        if (colon == std::string::npos || !absl::SimpleAtoi(endpoint.substr(colon + 1), &port)) {
          continue;
        }
        fd = ConnectTo(endpoint.substr(0, colon), port, absl::Seconds(2), peer_timeout);
        if (fd < 0) continue;
        // Another address of the same number (a container bridge on this host, say) may answer
        // something else: only rank 0's admission ends the search.
        const absl::Status admitted = AnswerChallenge(fd, secret, rank, absl::Seconds(10));
        if (admitted.ok()) break;
        refused = absl::StrCat(" (", endpoint, ": ", admitted.message(), ")");
        close(fd);
        fd = -1;
      }
      if (fd < 0) absl::SleepFor(absl::Milliseconds(100));
    }
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat("rank ", rank, ": could not connect to ",
                                                 plane->Peer(0), " at ", contact, " within ",
                                                 absl::FormatDuration(timeout), refused));
    }
    plane->fds_.push_back(fd);
    return plane;
  }

  HandshakeServer server(secret, size, kHandshakeTimeout);
  plane->fds_ = server.AcceptRanks(listeners, deadline);
  close_listeners();
  std::vector<std::string> missing;
  for (int r = 1; r < size; ++r) {
    const int fd = plane->fds_[static_cast<size_t>(r)];
    if (fd >= 0) {
      Tune(fd, peer_timeout);
    } else {
      missing.push_back(plane->Peer(r));
    }
  }
  if (!missing.empty()) {
    return absl::UnavailableError(absl::StrCat("rank 0: ", absl::StrJoin(missing, ", "),
                                               " did not connect its control socket within ",
                                               absl::FormatDuration(timeout)));
  }
  return plane;
}

ControlPlane::~ControlPlane() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

absl::Status ControlPlane::SendByte(int fd, char byte, int peer) {
  if (fd < 0) return absl::OkStatus();
  while (true) {
    // MSG_NOSIGNAL: a peer that died turns into EPIPE and a clear error, not a SIGPIPE that
    // would kill this process without a word.
    if (send(fd, &byte, 1, MSG_NOSIGNAL) == 1) return absl::OkStatus();
    if (errno != EINTR) return LostPeer(peer, errno);
  }
}

void ControlPlane::AwaitPeersClosed(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::vector<pollfd> polls;
    std::vector<size_t> index;
    for (size_t i = rank_ == 0 ? 1 : 0; i < fds_.size(); ++i) {
      if (fds_[i] < 0) continue;
      polls.push_back(pollfd{fds_[i], POLLIN, 0});
      index.push_back(i);
    }
    if (polls.empty()) return;
    if (poll(polls.data(), polls.size(), PollMillis(deadline - absl::Now())) <= 0) return;
    for (size_t k = 0; k < polls.size(); ++k) {
      if (polls[k].revents == 0) continue;
      char buffer[256];
      if (read(polls[k].fd, buffer, sizeof(buffer)) <= 0) {  // closed; late signals are dropped
        close(fds_[index[k]]);
        fds_[index[k]] = -1;
      }
    }
  }
}

void ControlPlane::ReleasePeers() {
  for (size_t r = 1; r < fds_.size(); ++r) (void)SendByte(fds_[r], 'X', static_cast<int>(r));
}

void ControlPlane::AwaitRelease(absl::Duration timeout) {
  if (rank_ == 0 || released_ || fds_.empty() || fds_[0] < 0) return;
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    pollfd p{fds_[0], POLLIN, 0};
    if (poll(&p, 1, PollMillis(deadline - absl::Now())) <= 0) return;
    char buffer[256];
    const ssize_t n = read(fds_[0], buffer, sizeof(buffer));
    if (n <= 0) return;  // rank 0 is gone: nothing left to wait for
    for (ssize_t k = 0; k < n; ++k) {
      if (buffer[k] == 'X') return;  // earlier signals ('R') are stale by now
    }
  }
}

absl::Status ControlPlane::RequestRound() { return SendByte(fds_[0], 'W', 0); }

absl::Status ControlPlane::AnnounceRound() {
  for (size_t r = 1; r < fds_.size(); ++r) {
    absl::Status s = SendByte(fds_[r], 'R', static_cast<int>(r));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<ControlEvents> ControlPlane::Wait(absl::Duration timeout, int extra_fd) {
  std::vector<pollfd> polls;
  std::vector<int> peers;
  for (size_t i = 0; i < fds_.size(); ++i) {
    if (fds_[i] < 0) continue;
    polls.push_back(pollfd{fds_[i], POLLIN, 0});
    peers.push_back(static_cast<int>(i));
  }
  if (extra_fd >= 0) polls.push_back(pollfd{extra_fd, POLLIN, 0});
  ControlEvents events;
  int ready = poll(polls.data(), polls.size(), PollMillis(timeout));
  if (ready < 0 && errno != EINTR) return Errno("poll");
  for (size_t i = 0; ready > 0 && i < polls.size(); ++i) {
    if (polls[i].revents == 0) continue;
    if (polls[i].fd == extra_fd) {
      events.local_ready = true;
      continue;
    }
    char buffer[256];
    const ssize_t n = read(polls[i].fd, buffer, sizeof(buffer));
    if (n <= 0) {
      const size_t index = static_cast<size_t>(peers[i]);
      const int peer = rank_ == 0 ? peers[i] : 0;
      if (closing_) {
        close(fds_[index]);
        fds_[index] = -1;
        continue;
      }
      return LostPeer(peer, n == 0 ? 0 : errno);
    }
    bool asked = false;
    for (ssize_t k = 0; k < n; ++k) {
      if (buffer[k] == 'R') ++events.rounds_announced;
      asked = asked || buffer[k] == 'W';
      // Rank 0 released us while our coordinator was finishing: AwaitRelease must not wait for
      // a word already read (it waited out the whole timeout, 4 ranks, 3 channels, once).
      released_ = released_ || buffer[k] == 'X';
    }
    events.round_requests += asked ? 1 : 0;
  }
  return events;
}

}  // namespace overlap
