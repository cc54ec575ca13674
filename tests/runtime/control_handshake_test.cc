// The control plane's admission of ranks (runtime/control/control_handshake.h), with fake peers over
// loopback: ranks with the job's secret get in; a bare rank number (the old handshake), garbage,
// a wrong secret, a replayed answer, a second connection of a rank and a rank out of range are
// refused, each logged once with its address; a silent stranger holds up no one.
#include "runtime/control/control_handshake.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace overlap {
namespace {

JobSecret TestSecret(uint8_t seed) {
  JobSecret secret;
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(seed + i);
  return secret;
}

// A non-blocking listening socket on 127.0.0.1; its port in *port.
int Listener(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  REQUIRE(listen(fd, 64) == 0);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  *port = ntohs(sa.sin_port);
  return fd;
}

// A connection to 127.0.0.1:port, or -1. No Catch assertions here or in anything a test's own
// threads call: Catch's assertion macros are not thread-safe; the threads report back instead.
int Dial(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// "127.0.0.1:port" of our end: how rank 0 names this peer.
std::string Name(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return absl::StrCat("127.0.0.1:", ntohs(sa.sin_port));
}

bool ReadN(int fd, void* out, size_t size) {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, 10000) != 1) return false;
    const ssize_t n = read(fd, p, size);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// What a stranger sees after its answer: true when rank 0 closed the connection without
// admitting it.
bool ClosedOnUs(int fd) {
  char byte = 0;
  pollfd pfd{fd, POLLIN, 0};
  return poll(&pfd, 1, 10000) == 1 && read(fd, &byte, 1) == 0;
}

std::array<uint8_t, 36> Challenge(int fd) {
  std::array<uint8_t, 36> challenge{};
  REQUIRE(ReadN(fd, challenge.data(), challenge.size()));
  CHECK(std::memcmp(challenge.data(), "OVLC", 4) == 0);
  return challenge;
}

TEST_CASE("the MAC binds the secret, the nonce and the rank") {
  const JobSecret secret = TestSecret(1);
  HandshakeNonce nonce{}, other_nonce{};
  other_nonce[0] = 1;
  CHECK(HandshakeMac(secret, nonce, 1) == HandshakeMac(secret, nonce, 1));
  CHECK(HandshakeMac(secret, nonce, 1) != HandshakeMac(secret, nonce, 2));
  CHECK(HandshakeMac(secret, nonce, 1) != HandshakeMac(secret, other_nonce, 1));
  CHECK(HandshakeMac(secret, nonce, 1) != HandshakeMac(TestSecret(2), nonce, 1));
}

TEST_CASE("random draws differ") {
  absl::StatusOr<std::array<uint8_t, 32>> a = RandomBytes32(), b = RandomBytes32();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a != *b);
}

TEST_CASE("ranks with the job's secret are admitted, each on its own connection") {
  const JobSecret secret = TestSecret(7);
  int port = 0;
  const int listener = Listener(&port);
  std::vector<absl::Status> answered(3);
  std::vector<int> client(3, -1);
  std::vector<int> tagged(3, 0);  // not vector<bool>: its bits share words across threads
  std::vector<std::thread> ranks;
  for (int r = 2; r >= 1; --r) {  // out of order: the rank in the answer decides the slot
    ranks.emplace_back([&, r] {
      client[r] = Dial(port);
      answered[r] = AnswerChallenge(client[r], secret, r, absl::Seconds(10));
      const char tag = static_cast<char>('0' + r);
      tagged[r] = write(client[r], &tag, 1) == 1 ? 1 : 0;
    });
  }
  HandshakeServer server(secret, 3, absl::Seconds(5));
  std::vector<int> admitted = server.AcceptRanks({listener}, absl::Now() + absl::Seconds(20));
  for (std::thread& t : ranks) t.join();
  REQUIRE(admitted.size() == 3);
  CHECK(admitted[0] == -1);
  for (int r = 1; r <= 2; ++r) {
    CHECK(answered[r].ok());
    CHECK(tagged[r] == 1);
    REQUIRE(admitted[r] >= 0);
    char tag = 0;
    REQUIRE(ReadN(admitted[r], &tag, 1));
    CHECK(tag == '0' + r);
    close(admitted[r]);
    close(client[r]);
  }
  CHECK(server.refusals().empty());
  close(listener);
}

TEST_CASE("a silent stranger connected first holds up no rank and is refused on return") {
  const JobSecret secret = TestSecret(9);
  int port = 0;
  const int listener = Listener(&port);
  const int stranger = Dial(port);
  REQUIRE(stranger >= 0);
  absl::Status rank1_answered;
  std::thread rank1([&] {
    absl::SleepFor(absl::Milliseconds(200));  // after the stranger, for sure
    const int fd = Dial(port);
    rank1_answered = AnswerChallenge(fd, secret, 1, absl::Seconds(10));
    close(fd);
  });
  HandshakeServer server(secret, 2, absl::Seconds(30));
  const absl::Time start = absl::Now();
  std::vector<int> admitted = server.AcceptRanks({listener}, start + absl::Seconds(60));
  rank1.join();
  CHECK(rank1_answered.ok());
  CHECK(absl::Now() - start < absl::Seconds(10));  // not the stranger's 30 s
  REQUIRE(admitted.size() == 2);
  CHECK(admitted[1] >= 0);
  REQUIRE(server.refusals().size() == 1);
  CHECK(server.refusals()[0].peer == Name(stranger));
  CHECK_THAT(server.refusals()[0].reason, Catch::Contains("every rank had connected"));
  Challenge(stranger);
  CHECK(ClosedOnUs(stranger));
  close(admitted[1]);
  close(stranger);
  close(listener);
}

TEST_CASE("strangers are refused, each once with its reason, and take no slot") {
  const JobSecret secret = TestSecret(3);
  int port = 0;
  const int listener = Listener(&port);
  HandshakeServer server(secret, 3, absl::Seconds(1));
  std::vector<int> admitted;
  std::thread rank0(
      [&] { admitted = server.AcceptRanks({listener}, absl::Now() + absl::Seconds(30)); });
  std::map<std::string, std::string> expected;  // peer -> what its refusal says

  // The old handshake: a bare rank number, then silence.
  const int bare = Dial(port);
  const int32_t one = 1;
  REQUIRE(write(bare, &one, sizeof(one)) == sizeof(one));
  expected[Name(bare)] = "no full handshake answer within 1s (it sent 4 bytes)";

  // 36 bytes of garbage.
  const int garbage = Dial(port);
  Challenge(garbage);
  const std::string junk(36, 'x');
  REQUIRE(write(garbage, junk.data(), junk.size()) == 36);
  CHECK(ClosedOnUs(garbage));
  expected[Name(garbage)] = "wrong handshake MAC";

  // Another job's secret.
  const int other_job = Dial(port);
  CHECK_FALSE(AnswerChallenge(other_job, TestSecret(4), 1, absl::Seconds(10)).ok());
  expected[Name(other_job)] = "wrong handshake MAC for rank 1";

  // Rank 2's real handshake, relayed by an eavesdropper that keeps the answer...
  const int relayed = Dial(port);
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  absl::Status rank2_answered;
  std::thread rank2(
      [&] { rank2_answered = AnswerChallenge(pair[1], secret, 2, absl::Seconds(10)); });
  const std::array<uint8_t, 36> challenge = Challenge(relayed);
  REQUIRE(write(pair[0], challenge.data(), challenge.size()) == 36);
  std::array<uint8_t, 36> recorded{};
  REQUIRE(ReadN(pair[0], recorded.data(), recorded.size()));
  REQUIRE(write(relayed, recorded.data(), recorded.size()) == 36);
  char admission = 0;
  REQUIRE(ReadN(relayed, &admission, 1));
  CHECK(admission == 'A');
  REQUIRE(write(pair[0], &admission, 1) == 1);
  rank2.join();
  CHECK(rank2_answered.ok());
  // ...and replays it on a connection of its own.
  const int replay = Dial(port);
  Challenge(replay);
  REQUIRE(write(replay, recorded.data(), recorded.size()) == 36);
  CHECK(ClosedOnUs(replay));
  expected[Name(replay)] = "wrong handshake MAC for rank 2 (not this job's secret, or a replayed";

  // Rank 2 again, with the secret: its slot is taken.
  const int twice = Dial(port);
  CHECK_FALSE(AnswerChallenge(twice, secret, 2, absl::Seconds(10)).ok());
  expected[Name(twice)] = "rank 2 is already connected";

  // Ranks out of range, with the secret.
  const int seven = Dial(port);
  CHECK_FALSE(AnswerChallenge(seven, secret, 7, absl::Seconds(10)).ok());
  expected[Name(seven)] = "rank 7 is not a worker rank of a job of 3";
  const int zero = Dial(port);
  CHECK_FALSE(AnswerChallenge(zero, secret, 0, absl::Seconds(10)).ok());
  expected[Name(zero)] = "rank 0 is not a worker rank";

  // The bare rank number's handshake runs out; then rank 1 comes.
  absl::SleepFor(absl::Milliseconds(1500));
  const int rank1 = Dial(port);
  CHECK(AnswerChallenge(rank1, secret, 1, absl::Seconds(10)).ok());
  rank0.join();

  REQUIRE(admitted.size() == 3);
  CHECK(admitted[1] >= 0);
  CHECK(admitted[2] >= 0);
  std::map<std::string, int> seen;
  for (const Refusal& refusal : server.refusals()) {
    ++seen[refusal.peer];
    INFO(refusal.peer << ": " << refusal.reason);
    REQUIRE(expected.count(refusal.peer) == 1);
    CHECK_THAT(refusal.reason, Catch::Contains(expected[refusal.peer]));
  }
  CHECK(seen.size() == expected.size());
  for (const auto& [peer, count] : seen) CHECK(count == 1);
  for (int fd : {bare, garbage, other_job, relayed, replay, twice, seven, zero, rank1, pair[0],
                 pair[1], admitted[1], admitted[2], listener}) {
    close(fd);
  }
}

}  // namespace
}  // namespace overlap
