// The control connections (runtime/control/control_plane.h): strangers that reach rank 0's control port
// before the ranks are refused, each logged once, and the plane and the job work on; and the
// shutdown handshake: a worker whose coordinator read rank 0's release in its last Wait must not
// wait for it again in AwaitRelease.
#include "runtime/control/control_plane.h"

#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "runtime/overlap.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// A stranger's connection to the first "address:port" of `contact`; "address:port" of its own
// end (how rank 0 names it) in *name.
int Dial(const std::string& contact, std::string* name) {
  const std::string first = std::vector<std::string>(absl::StrSplit(contact, ',')).front();
  const size_t colon = first.rfind(':');
  int port = 0;
  REQUIRE(absl::SimpleAtoi(first.substr(colon + 1), &port));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(inet_pton(AF_INET, first.substr(0, colon).c_str(), &sa.sin_addr) == 1);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &sa.sin_addr, text, sizeof(text));
  *name = absl::StrCat(text, ":", ntohs(sa.sin_port));
  return fd;
}

// Everything rank 0 sends a stranger before closing on it (the challenge, never an admission),
// within 30 s; "timeout" when it keeps the connection open.
std::string Drain(int fd) {
  std::string got;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) continue;
    char buffer[256];
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) return got;
    got.append(buffer, static_cast<size_t>(n));
  }
  return "timeout";
}

size_t Count(const std::string& text, const std::string& word) {
  size_t count = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++count;
  return count;
}

TEST_CASE("strangers at rank 0's control port before the ranks are refused, and the job goes on") {
  MPI_Comm comm = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_dup(MPI_COMM_WORLD, &comm) == MPI_SUCCESS);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);

  // Rank 0 lets them in first: their connections wait in its backlog before any rank learns the
  // port. (a) sends a bare rank number, the whole handshake before this one; (b) answers the
  // challenge with a well-formed answer for rank 1 whose MAC is not over this connection's nonce
  // (what replaying a recorded handshake sends); (c) says nothing.
  int bare = -1, replay = -1, silent = -1;
  std::string bare_name, replay_name, silent_name, replay_saw;
  std::thread replayer;
  const std::function<void(const std::string&)> strangers = [&](const std::string& contact) {
    // Every rank is on this machine: rank 0 listens on loopback, nowhere else.
    CHECK(contact.find(',') == std::string::npos);
    CHECK(contact.rfind("127.0.0.1:", 0) == 0);
    bare = Dial(contact, &bare_name);
    const int32_t one = 1;
    CHECK(write(bare, &one, sizeof(one)) == sizeof(one));
    replay = Dial(contact, &replay_name);
    silent = Dial(contact, &silent_name);
    replayer = std::thread([&] {
      char challenge[36];
      size_t got = 0;
      while (got < sizeof(challenge)) {
        const ssize_t n = read(replay, challenge + got, sizeof(challenge) - got);
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
      std::string answer(36, '\0');
      const uint32_t wire = htonl(1);
      std::memcpy(&answer[0], &wire, 4);
      std::memcpy(&answer[4], challenge + 4, 32);  // a MAC field that is no MAC of this nonce
      (void)!write(replay, answer.data(), answer.size());
      replay_saw = std::string(challenge, got) + Drain(replay);
    });
  };
  std::vector<std::string> hosts(static_cast<size_t>(size), "localhost");
  absl::StatusOr<std::unique_ptr<ControlPlane>> control =
      ControlPlane::Connect(comm, hosts, absl::Seconds(60), absl::Seconds(30),
                            rank == 0 ? strangers : std::function<void(const std::string&)>());
  REQUIRE(control.ok());
  if (rank == 0) {
    replayer.join();
    for (const auto& [fd, name] :
         {std::pair<int, std::string>{bare, bare_name}, {silent, silent_name}}) {
      const std::string saw = Drain(fd);
      INFO(name);
      CHECK(saw.size() == 36);  // the challenge, then the close: no admission
      CHECK(saw.substr(0, 4) == "OVLC");
      close(fd);
    }
    CHECK(replay_saw.size() == 36);
    close(replay);
    spdlog::default_logger()->flush();
    const std::string text = log.str();
    INFO(text);
    for (const std::string& name : {bare_name, replay_name, silent_name}) {
      CHECK(Count(text, absl::StrCat("refused a control connection from ", name, ":")) == 1);
    }
  }

  // Every worker's connection carries its signals both ways.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  if (rank == 0) {
    REQUIRE((*control)->AnnounceRound().ok());
    int requests = 0;
    while (requests < size - 1 && absl::Now() < deadline) {
      absl::StatusOr<ControlEvents> events = (*control)->Wait(absl::Seconds(1), -1);
      REQUIRE(events.ok());
      requests += events->round_requests;
    }
    CHECK(requests == size - 1);
  } else {
    int rounds = 0;
    while (rounds < 1 && absl::Now() < deadline) {
      absl::StatusOr<ControlEvents> events = (*control)->Wait(absl::Seconds(1), -1);
      REQUIRE(events.ok());
      rounds += events->rounds_announced;
    }
    CHECK(rounds == 1);
    REQUIRE((*control)->RequestRound().ok());
  }
  (*control)->ExpectClose();
  if (rank == 0) (*control)->ReleasePeers();
  if (rank == 0) {
    (*control)->AwaitPeersClosed(absl::Seconds(20));
  } else {
    (*control)->AwaitRelease(absl::Seconds(20));
  }
  control->reset();
  spdlog::default_logger()->sinks().pop_back();
  MPI_Comm_free(&comm);

  // And the job's collectives give the right values.
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rank + 1) * static_cast<float>(i);
  absl::StatusOr<Handle> handle = Allreduce("after.strangers", MakeTensor(x.data(), {1000}),
                                            MakeTensor(x.data(), {1000}), {ReduceOp::kSum});
  REQUIRE(handle.ok());
  REQUIRE(handle->Wait(absl::Seconds(60)).ok());
  const float ranks_sum = static_cast<float>(size) * static_cast<float>(size + 1) / 2;
  for (size_t i = 0; i < x.size(); ++i) {
    INFO(i);
    REQUIRE(x[i] == ranks_sum * static_cast<float>(i));
  }
}

TEST_CASE("a release read by the last Wait still ends AwaitRelease at once") {
  MPI_Comm comm = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_dup(MPI_COMM_WORLD, &comm) == MPI_SUCCESS);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<std::string> hosts(static_cast<size_t>(size), "localhost");
  absl::StatusOr<std::unique_ptr<ControlPlane>> control =
      ControlPlane::Connect(comm, hosts, absl::Seconds(30), absl::Seconds(30));
  REQUIRE(control.ok());
  (*control)->ExpectClose();
  if (rank == 0) (*control)->ReleasePeers();
  MPI_Barrier(comm);  // the release is on its way to every worker
  if (rank == 0) {
    (*control)->AwaitPeersClosed(absl::Seconds(20));
  } else {
    // The coordinator's last look at the control connection takes the release with it.
    absl::StatusOr<ControlEvents> events = (*control)->Wait(absl::Seconds(5), -1);
    REQUIRE(events.ok());
    CHECK(events->rounds_announced == 0);
    const absl::Time start = absl::Now();
    (*control)->AwaitRelease(absl::Seconds(20));
    CHECK(absl::Now() - start < absl::Seconds(2));
  }
  control->reset();
  MPI_Comm_free(&comm);
}

}  // namespace
}  // namespace overlap
