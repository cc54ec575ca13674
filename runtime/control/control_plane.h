// A star of TCP connections between rank 0 and every other rank, which only the job's own ranks
// can join (see Connect).
//
// MPI cannot wait on anything but its own requests, so a coordinator that must sleep until either
// local work arrives or a peer starts a negotiation round cannot block in MPI. This plane carries
// one-byte signals instead, over sockets the coordinator can poll() together with its own
// eventfd: a worker asks rank 0 for a round ('W'), rank 0 announces each round to every worker
// ('R'). It also notices a peer that died: its connection closes, and the coordinator fails at
// once instead of waiting for a collective timeout. And a peer whose host or network stopped
// answering: keepalive probes and TCP_USER_TIMEOUT close its connection after `peer_timeout`,
// and the error names that peer, where a stuck MPI collective could name no one.
//
// Threading: used by the coordinator thread only.
#ifndef OVERLAP_RUNTIME_CONTROL_CONTROL_PLANE_H_
#define OVERLAP_RUNTIME_CONTROL_CONTROL_PLANE_H_

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace overlap {

struct ControlEvents {
  int rounds_announced = 0;  // workers: 'R' signals received
  int round_requests = 0;    // rank 0: how many workers sent 'W'
  bool local_ready = false;  // the extra fd became readable
};

class ControlPlane {
 public:
  // Collective over `comm`: rank 0 draws the job's secret and broadcasts it over `comm`, listens
  // on an ephemeral port of each address its ranks reach it by (control_addresses.h: loopback
  // when every rank shares its host) and broadcasts them; the others connect and prove they are
  // ranks of this job (control_handshake.h). A connection that cannot prove it is refused, logged
  // with its address, and holds no rank's slot. `hosts[r]` names rank r's host in messages.
  // Unavailable, naming the ranks that did not connect, after `timeout`. A connection whose peer
  // does not answer for `peer_timeout` (at least 1 s) fails as "lost the control connection to
  // rank R (host H): no answer for ...: the host or its network is down". `on_listen`, for tests,
  // runs on rank 0 with the published "address:port,..." as soon as the sockets listen, before
  // any other rank learns them.
  //
  // Why the secret goes over MPI and not through overlaprun's environment: MPI's traffic stays
  // among the job's ranks, so one mechanism serves overlaprun and plain mpirun alike, and the
  // secret never sits in an environment other processes of the user can read.
  static absl::StatusOr<std::unique_ptr<ControlPlane>> Connect(
      MPI_Comm comm, std::vector<std::string> hosts, absl::Duration timeout,
      absl::Duration peer_timeout,
      const std::function<void(const std::string&)>& on_listen = nullptr);
  ~ControlPlane();

  // Worker: asks rank 0 to start a round.
  absl::Status RequestRound();
  // Rank 0: tells every worker that a round starts now.
  absl::Status AnnounceRound();

  // Waits up to `timeout` (zero: just look) for signals or for `extra_fd` to become readable,
  // and consumes the signals that arrived. Unavailable, naming the peer and its host, when a
  // connection closed unexpectedly.
  absl::StatusOr<ControlEvents> Wait(absl::Duration timeout, int extra_fd);

  // After this, closed connections are expected (an orderly shutdown) and not errors.
  void ExpectClose() { closing_ = true; }

  // Orderly shutdown. Rank 0 has finished its last round: it tells every worker it may close
  // (ReleasePeers), then waits until every worker has closed its connection, or `timeout` passes
  // (AwaitPeersClosed), so that no worker still finishing its last round sees rank 0 vanish. A
  // worker waits for that word, or for rank 0's connection to close, or for `timeout`
  // (AwaitRelease) before closing its own: a collective can end on one rank before another, and
  // rank 0 still inside the last round would take a worker's early close for a crash. The word
  // may arrive while the worker's coordinator is still in its last Wait, which keeps it for
  // AwaitRelease (both run on one thread at a time: Shutdown joins the coordinator first).
  void ReleasePeers();
  void AwaitPeersClosed(absl::Duration timeout);
  void AwaitRelease(absl::Duration timeout);

 private:
  ControlPlane(int rank, std::vector<std::string> hosts, absl::Duration peer_timeout)
      : rank_(rank), hosts_(std::move(hosts)), peer_timeout_(peer_timeout) {}
  absl::Status SendByte(int fd, char byte, int peer);
  std::string Peer(int rank) const;
  // The error for a connection to `peer` that closed (`error` 0) or failed with errno `error`.
  absl::Status LostPeer(int peer, int error) const;

  const int rank_;
  const std::vector<std::string> hosts_;
  const absl::Duration peer_timeout_;
  // Rank 0: fds_[r] is the connection to rank r (fds_[0] unused). Workers: fds_[0] is rank 0.
  std::vector<int> fds_;
  bool closing_ = false;
  bool released_ = false;  // workers: rank 0's release ('X') has arrived
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONTROL_CONTROL_PLANE_H_
