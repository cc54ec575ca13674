// A fake control communicator of N simulated ranks in one process: one ControlCollectives
// (runtime/control/control_collectives.h) per rank, so that the negotiator and planned execution's checks
// run without mpirun.
//
// The ranks' calls form one sequence, as on one MPI communicator: the k-th call completes once
// every rank has started its k-th call; the rank whose Start completes the set computes every
// rank's results (bitwise AND/OR, allgather, gather at rank 0, broadcast from rank 0). Until then
// every rank's request reports "not done".
//
// What the runtime guarantees, the fake checks: every rank must start the same kind of call at the
// same place of the sequence, and bitwise calls the same op on as many words. Otherwise every
// rank's request fails with Internal naming the call's index, both ranks and what each started;
// no result is written.
//
// Fault injection: FailCall makes the k-th call fail with a given status on every rank;
// HoldCall makes it never complete (timeouts). started() records every Start.
//
// Threading: thread-safe (one mutex). The negotiator waits inside each round, so a test runs one
// thread per rank; planned checks are polled, so ranks may also be driven from one thread.
// Collectives objects and requests keep the world's state alive.
#ifndef OVERLAP_TESTS_FAKES_FAKE_CONTROL_H_
#define OVERLAP_TESTS_FAKES_FAKE_CONTROL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/control/control_collectives.h"

namespace overlap {
namespace fake {

enum class ControlKind { kAnd, kOr, kAllgather, kGather, kBroadcast };
const char* ControlKindName(ControlKind kind);

// One Start call, as recorded by the world.
struct StartedControl {
  int rank = 0;
  int64_t index = 0;  // its place in the sequence, from 0
  ControlKind kind = ControlKind::kAnd;
  int64_t size = 0;  // words (bitwise), bytes sent (gather; broadcast on rank 0), else 0
};

class FakeControlWorld {
 public:
  explicit FakeControlWorld(int size);
  ~FakeControlWorld();
  FakeControlWorld(const FakeControlWorld&) = delete;
  FakeControlWorld& operator=(const FakeControlWorld&) = delete;

  int size() const;

  // Rank `rank`'s collectives. Call once per rank.
  std::unique_ptr<ControlCollectives> Create(int rank);

  // The `index`-th call (from 0) fails on every rank with `status`. Set it before the call
  // completes.
  void FailCall(int64_t index, absl::Status status);
  // The `index`-th call never completes.
  void HoldCall(int64_t index);

  // Every Start so far, in call order (all ranks).
  std::vector<StartedControl> started() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace fake
}  // namespace overlap

#endif  // OVERLAP_TESTS_FAKES_FAKE_CONTROL_H_
