// Rank 0's control plane on the namespace cluster with a stranger from another host ahead of the
// ranks (tests/cluster/control_stranger_test.sh). Rank 0 publishes its control address in
// DIR/contact as soon as it listens and waits for DIR/strangers_in, which the stranger writes
// once its connections are in rank 0's backlog; only then do the ranks learn the address. The
// plane must come up with every rank, carry signals both ways, and the job's allreduce must give
// the right values. Prints "control_stranger: ok" on rank 0 on success; exits 1 otherwise.
//   control_stranger DIR
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/control/control_plane.h"
#include "runtime/overlap.h"

namespace {

bool Fail(int rank, const std::string& why) {
  std::fprintf(stderr, "control_stranger: rank %d: FAIL: %s\n", rank, why.c_str());
  return false;
}

// Rank 0 lets the stranger in first: publishes `contact`, waits up to 60 s for its word.
void LetStrangerIn(const std::string& dir, const std::string& contact) {
  {
    std::ofstream out(dir + "/contact.tmp");
    out << contact << "\n";
  }
  std::rename((dir + "/contact.tmp").c_str(), (dir + "/contact").c_str());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (access((dir + "/strangers_in").c_str(), F_OK) != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
}

bool Signals(overlap::ControlPlane& plane, int rank, int size) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  int seen = 0;
  if (rank == 0 && !plane.AnnounceRound().ok()) return Fail(rank, "AnnounceRound");
  while (seen < (rank == 0 ? size - 1 : 1) && absl::Now() < deadline) {
    absl::StatusOr<overlap::ControlEvents> events = plane.Wait(absl::Seconds(1), -1);
    if (!events.ok()) return Fail(rank, std::string(events.status().message()));
    seen += rank == 0 ? events->round_requests : events->rounds_announced;
  }
  if (rank != 0 && (seen != 1 || !plane.RequestRound().ok())) return Fail(rank, "no round");
  if (rank == 0 && seen != size - 1) return Fail(rank, absl::StrCat(seen, " requests"));
  plane.ExpectClose();
  if (rank == 0) {
    plane.ReleasePeers();
    plane.AwaitPeersClosed(absl::Seconds(20));
  } else {
    plane.AwaitRelease(absl::Seconds(20));
  }
  return true;
}

bool Run(const std::string& dir) {
  int rank = 0, size = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<std::string> hosts(static_cast<size_t>(size), "cluster host");
  std::function<void(const std::string&)> hook;
  if (rank == 0) hook = [&dir](const std::string& contact) { LetStrangerIn(dir, contact); };
  absl::StatusOr<std::unique_ptr<overlap::ControlPlane>> plane =
      overlap::ControlPlane::Connect(comm, hosts, absl::Seconds(90), absl::Seconds(30), hook);
  if (!plane.ok()) return Fail(rank, std::string(plane.status().message()));
  if (!Signals(**plane, rank, size)) return false;
  plane->reset();
  MPI_Comm_free(&comm);

  std::vector<float> x(4096);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((rank + 1) * i);
  absl::StatusOr<overlap::Handle> handle =
      overlap::Allreduce("after.stranger", overlap::MakeTensor(x.data(), {4096}),
                         overlap::MakeTensor(x.data(), {4096}), {overlap::ReduceOp::kSum});
  if (!handle.ok()) return Fail(rank, std::string(handle.status().message()));
  const absl::Status waited = handle->Wait(absl::Seconds(60));
  if (!waited.ok()) return Fail(rank, std::string(waited.message()));
  const float ranks = static_cast<float>(size) * static_cast<float>(size + 1) / 2;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != ranks * static_cast<float>(i)) {
      return Fail(rank, absl::StrCat("element ", i, " is ", x[i], ", not ", ranks * i));
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  bool ok = argc == 2 || Fail(rank, "usage: control_stranger DIR");
  const absl::Status init = overlap::Init();
  ok = ok && (init.ok() || Fail(rank, std::string(init.message())));
  ok = ok && Run(argv[1]);
  if (init.ok()) {
    const absl::Status down = overlap::Shutdown();
    ok = ok && (down.ok() || Fail(rank, std::string(down.message())));
  }
  int local = ok ? 0 : 1, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any == 0) std::printf("control_stranger: ok\n");
  MPI_Finalize();
  return any;
}
