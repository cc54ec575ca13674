#include "runtime/control/control_handshake.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

constexpr char kMagic[4] = {'O', 'V', 'L', 'C'};
constexpr char kAdmitted = 'A';
// Connections in a handshake at once; beyond this the oldest is dropped, so a flood of silent
// strangers costs file descriptors for at most one handshake timeout.
constexpr size_t kMaxPending = 64;
// Refusals logged one by one per address; a flood from one address is summed up after these.
constexpr int kLoggedPerAddress = 10;

int PollMillis(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))));
}

absl::Span<const uint8_t> Bytes(const void* data, size_t size) {
  return absl::MakeConstSpan(static_cast<const uint8_t*>(data), size);
}

// Reads exactly `size` bytes before `deadline`; false on a close, an error or the deadline.
bool ReadAll(int fd, void* out, size_t size, absl::Time deadline) {
  auto* p = static_cast<uint8_t*>(out);
  while (size > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, PollMillis(deadline - absl::Now()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready != 1) return false;
    const ssize_t n = recv(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool SendAll(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    // MSG_DONTWAIT: a fresh connection's send buffer has room for these few bytes; a peer that
    // does not take them is not one of ours and must not block rank 0.
    const ssize_t n = send(fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::string PeerAddress(const sockaddr_in& sa) {
  char text[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &sa.sin_addr, text, sizeof(text));
  return absl::StrCat(text, ":", ntohs(sa.sin_port));
}

}  // namespace

absl::StatusOr<std::array<uint8_t, 32>> RandomBytes32() {
  std::array<uint8_t, 32> out;
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = getrandom(out.data() + got, out.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat("getrandom failed: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return out;
}

Sha256Digest HandshakeMac(const JobSecret& secret, const HandshakeNonce& nonce, int32_t rank) {
  const uint32_t wire_rank = htonl(static_cast<uint32_t>(rank));
  return HmacSha256(secret, {nonce, Bytes(&wire_rank, sizeof(wire_rank)),
                             Bytes(kHandshakeContext, sizeof(kHandshakeContext) - 1)});
}

absl::Status AnswerChallenge(int fd, const JobSecret& secret, int rank, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::array<uint8_t, 36> challenge;
  if (!ReadAll(fd, challenge.data(), challenge.size(), deadline)) {
    return absl::UnavailableError("no handshake challenge from the control socket");
  }
  if (std::memcmp(challenge.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::UnavailableError("the control socket's challenge is not overlap's");
  }
  HandshakeNonce nonce;
  std::memcpy(nonce.data(), challenge.data() + sizeof(kMagic), nonce.size());
  std::array<uint8_t, 36> answer;
  const uint32_t wire_rank = htonl(static_cast<uint32_t>(rank));
  std::memcpy(answer.data(), &wire_rank, sizeof(wire_rank));
  const Sha256Digest mac = HandshakeMac(secret, nonce, rank);
  std::memcpy(answer.data() + sizeof(wire_rank), mac.data(), mac.size());
  if (!SendAll(fd, answer.data(), answer.size())) {
    return absl::UnavailableError(
        absl::StrCat("could not send the handshake answer: ", std::strerror(errno)));
  }
  char admitted = 0;
  if (!ReadAll(fd, &admitted, 1, deadline) || admitted != kAdmitted) {
    return absl::UnavailableError(
        "rank 0 refused the handshake (another process answered as this rank, or the secret "
        "differs)");
  }
  return absl::OkStatus();
}

HandshakeServer::HandshakeServer(const JobSecret& secret, int size,
                                 absl::Duration handshake_timeout)
    : secret_(secret), size_(size), handshake_timeout_(handshake_timeout) {}

HandshakeServer::~HandshakeServer() {
  for (Pending& p : pending_) close(p.fd);
}

void HandshakeServer::Refuse(Pending& pending, const std::string& reason) {
  close(pending.fd);
  pending.fd = -1;
  refusals_.push_back(Refusal{pending.peer, reason});
  const std::string address = pending.peer.substr(0, pending.peer.rfind(':'));
  if (++refused_by_address_[address] <= kLoggedPerAddress) {
    spdlog::warn("overlap: rank 0 refused a control connection from {}: {}", pending.peer, reason);
  }
}

void HandshakeServer::Accept(int listener) {
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  const int fd =
      accept4(listener, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  if (pending_.size() >= kMaxPending) {
    Refuse(pending_.front(), "dropped: too many connections in a handshake at once");
    pending_.erase(pending_.begin());
  }
  Pending p;
  p.fd = fd;
  p.peer = PeerAddress(sa);
  p.deadline = absl::Now() + handshake_timeout_;
  absl::StatusOr<std::array<uint8_t, 32>> nonce = RandomBytes32();
  if (!nonce.ok()) {
    Refuse(p, absl::StrCat("no nonce for it: ", nonce.status().message()));
    return;
  }
  p.nonce = *nonce;
  std::array<uint8_t, 36> challenge;
  std::memcpy(challenge.data(), kMagic, sizeof(kMagic));
  std::memcpy(challenge.data() + sizeof(kMagic), p.nonce.data(), p.nonce.size());
  if (!SendAll(fd, challenge.data(), challenge.size())) {
    Refuse(p, "the challenge could not be sent");
    return;
  }
  pending_.push_back(std::move(p));
}

void HandshakeServer::Read(Pending& pending, std::vector<int>& admitted) {
  const ssize_t n = recv(pending.fd, pending.answer.data() + pending.received,
                         pending.answer.size() - pending.received, MSG_DONTWAIT);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    Refuse(pending, absl::StrCat("it closed the connection after ", pending.received,
                                 " bytes, before a full handshake answer"));
    return;
  }
  pending.received += static_cast<size_t>(n);
  if (pending.received < pending.answer.size()) return;
  uint32_t wire_rank = 0;
  std::memcpy(&wire_rank, pending.answer.data(), sizeof(wire_rank));
  const int32_t rank = static_cast<int32_t>(ntohl(wire_rank));
  const Sha256Digest expected = HandshakeMac(secret_, pending.nonce, rank);
  if (!MacEqual(expected, absl::MakeConstSpan(pending.answer).subspan(sizeof(wire_rank)))) {
    Refuse(pending, absl::StrCat("a wrong handshake MAC for rank ", rank,
                                 " (not this job's secret, or a replayed answer)"));
    return;
  }
  // A correct MAC with a bad rank means a rank of this job misbehaves: refused all the same.
  if (rank <= 0 || rank >= size_) {
    Refuse(pending, absl::StrCat("rank ", rank, " is not a worker rank of a job of ", size_));
    return;
  }
  if (admitted[static_cast<size_t>(rank)] >= 0) {
    Refuse(pending, absl::StrCat("rank ", rank, " is already connected"));
    return;
  }
  if (!SendAll(pending.fd, &kAdmitted, 1)) {
    Refuse(pending, "the admission could not be sent");
    return;
  }
  const int flags = fcntl(pending.fd, F_GETFL);
  fcntl(pending.fd, F_SETFL, flags & ~O_NONBLOCK);
  admitted[static_cast<size_t>(rank)] = pending.fd;
  pending.fd = -1;
}

std::vector<int> HandshakeServer::AcceptRanks(absl::Span<const int> listeners,
                                              absl::Time deadline) {
  std::vector<int> admitted(static_cast<size_t>(size_), -1);
  int missing = size_ - 1;
  while (missing > 0) {
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    for (Pending& p : pending_) {
      if (p.deadline <= now) {
        Refuse(p, absl::StrCat("no full handshake answer within ",
                               absl::FormatDuration(handshake_timeout_), " (it sent ", p.received,
                               " bytes)"));
      }
    }
    pending_.erase(
        std::remove_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.fd < 0; }),
        pending_.end());
    absl::Time wake = deadline;
    std::vector<pollfd> polls;
    for (int listener : listeners) polls.push_back(pollfd{listener, POLLIN, 0});
    for (const Pending& p : pending_) {
      polls.push_back(pollfd{p.fd, POLLIN, 0});
      wake = std::min(wake, p.deadline);
    }
    const int ready = poll(polls.data(), polls.size(), PollMillis(wake - now));
    if (ready <= 0) continue;  // EINTR or a timeout: the top of the loop sorts it out
    // Handshakes first: accepting may drop the oldest pending connection.
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (polls[listeners.size() + i].revents == 0) continue;
      Read(pending_[i], admitted);
    }
    missing = static_cast<int>(std::count(admitted.begin() + 1, admitted.end(), -1));
    pending_.erase(
        std::remove_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.fd < 0; }),
        pending_.end());
    for (size_t i = 0; i < listeners.size(); ++i) {
      if (polls[i].revents != 0) Accept(listeners[i]);
    }
  }
  // Those still in a handshake are not ranks (every rank got in, or it is too late for them).
  for (Pending& p : pending_) {
    Refuse(p, absl::StrCat(missing == 0 ? "every rank had connected" : "the start timeout passed",
                           " while it was in a handshake (it had sent ", p.received, " bytes)"));
  }
  pending_.clear();
  for (const auto& [address, count] : refused_by_address_) {
    if (count > kLoggedPerAddress) {
      spdlog::warn(
          "overlap: rank 0 refused {} control connections from {} in all (the first {} "
          "logged above)",
          count, address, kLoggedPerAddress);
    }
  }
  return admitted;
}

}  // namespace overlap
