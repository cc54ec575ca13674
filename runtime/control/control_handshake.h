// The control plane's admission check (control_plane.h): a connection to rank 0's control socket
// must prove that it comes from a rank of this job before it takes that rank's slot.
//
// Every job has a random 32-byte secret that only its ranks know (rank 0 draws it and broadcasts
// it over MPI, control_plane.cc). On each connection rank 0 sends a fresh random nonce; the
// client answers with its rank and HMAC-SHA256(secret, nonce || rank || kHandshakeContext); rank
// 0 checks the MAC in constant time and answers one byte, 'A', when it admits the rank. A
// recorded answer is worth nothing on another connection (its nonce differs), a bare rank number
// (the handshake before this one) is refused, and a peer that says nothing is dropped after the
// handshake timeout, while the other handshakes go on: it never holds a rank's slot or the
// accept loop.
//
//   rank 0 -> client: "OVLC" nonce[32]
//   client -> rank 0: rank (int32, big-endian) mac[32]
//   rank 0 -> client: 'A'                 (or the connection closes: refused)
//
// Threading: a HandshakeServer is used by one thread; the free functions are thread-safe.
#ifndef OVERLAP_RUNTIME_CONTROL_CONTROL_HANDSHAKE_H_
#define OVERLAP_RUNTIME_CONTROL_CONTROL_HANDSHAKE_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "runtime/control/hmac_sha256.h"

namespace overlap {

using JobSecret = std::array<uint8_t, 32>;
using HandshakeNonce = std::array<uint8_t, 32>;

// Bound into every MAC, so that a MAC made for another purpose with the same secret (the
// Python driver's, say) is never a valid answer here.
inline constexpr char kHandshakeContext[] = "overlap control plane handshake v1";

// 32 bytes from the kernel's random source (getrandom). Unavailable when it fails.
absl::StatusOr<std::array<uint8_t, 32>> RandomBytes32();

// The answer `rank` gives to `nonce`.
Sha256Digest HandshakeMac(const JobSecret& secret, const HandshakeNonce& nonce, int32_t rank);

// Client side, on a connected blocking socket: reads the challenge, answers as `rank`, and waits
// for the admission byte, all within `timeout`. Unavailable, saying which step failed, when the
// peer is not a control socket of this protocol, refuses the answer or stays silent.
absl::Status AnswerChallenge(int fd, const JobSecret& secret, int rank, absl::Duration timeout);

// Who was turned away, and why: what rank 0 logs and the tests check.
struct Refusal {
  std::string peer;    // "address:port"
  std::string reason;  // e.g. "a wrong handshake MAC (not this job's secret, or a replay)"
};

// Rank 0's side: admits ranks 1..size-1 from connections accepted on the listening sockets.
class HandshakeServer {
 public:
  // `handshake_timeout` bounds how long one connection may take to answer its challenge.
  HandshakeServer(const JobSecret& secret, int size, absl::Duration handshake_timeout);
  ~HandshakeServer();  // closes the connections still in a handshake

  // Accepts on `listeners` (non-blocking or not) until every rank 1..size-1 is admitted or
  // `deadline` passes. Returns the admitted connections, index = rank (entry 0 and the ranks
  // that did not get in are -1); the caller owns them. Each refused connection, including those
  // still in a handshake on return, is closed, kept in refusals(), and logged once as a warning
  // naming its address and port (after 10 from one address, the rest are only counted, in one
  // line on return).
  std::vector<int> AcceptRanks(absl::Span<const int> listeners, absl::Time deadline);

  const std::vector<Refusal>& refusals() const { return refusals_; }

 private:
  struct Pending {
    int fd = -1;
    std::string peer;
    HandshakeNonce nonce{};
    absl::Time deadline;
    std::array<uint8_t, 36> answer{};
    size_t received = 0;
  };

  void Accept(int listener);
  // Reads what `pending` sent; admits it into `admitted` or refuses it (closing its fd) once its
  // answer is complete or it closed.
  void Read(Pending& pending, std::vector<int>& admitted);
  void Refuse(Pending& pending, const std::string& reason);

  const JobSecret secret_;
  const int size_;
  const absl::Duration handshake_timeout_;
  std::vector<Pending> pending_;
  std::vector<Refusal> refusals_;
  std::map<std::string, int> refused_by_address_;  // address (no port) -> refusals
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONTROL_CONTROL_HANDSHAKE_H_
