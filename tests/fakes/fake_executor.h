// A fake world of N simulated ranks in one process, with one Executor per rank, so that the data
// plane (and anything else that drives collectives/executor.h) is tested without mpirun.
//
// A collective on a channel completes once every rank has started its k-th collective on that
// channel; the rank whose Start completes the set computes the real result into every rank's
// buffers (allreduce sum/min/max/product, allgatherv, broadcast, reduce-scatter, alltoallv,
// barrier, on every DataType; float16 and bfloat16 are reduced through float, rounded after each
// rank as the MPI executor's operators do). Until then every rank's Work reports "not done", so
// buffers must stay valid as the Executor contract already requires.
//
// What the real runtime guarantees, the fake checks: every rank must start the same kind, dtype,
// count, op, root and per-rank counts at the same place in a channel's sequence. Otherwise the
// Work of every rank in that collective fails with Internal naming the channel, the collective's
// index, both ranks and what differs; no buffer is written.
//
// Fault injection: FailCollective makes the k-th collective of a channel fail with a given
// status (on every rank, or on one rank while the others complete); HoldCollective makes it
// never complete, for timeout tests. started() records every Start, for assertions on fusion,
// channels and order.
//
// Threading: the world and its executors are thread-safe (one mutex), so ranks may be driven
// round-robin from one thread or from one thread per rank. Executors and Works keep the world's
// state alive; they may outlive the FakeWorld object.
#ifndef OVERLAP_TESTS_FAKES_FAKE_EXECUTOR_H_
#define OVERLAP_TESTS_FAKES_FAKE_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "collectives/dtype.h"
#include "collectives/executor.h"

namespace overlap {
namespace fake {

// One Start call, as recorded by the world.
struct StartedCollective {
  int rank = 0;
  int channel = 0;
  int64_t index = 0;  // its place in the channel's sequence on this rank, from 0
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int64_t count = 0;
  int root = 0;
  int64_t bytes = 0;  // what this rank sends: the buffer, its allgather part, its alltoall rows
};

class FakeWorld {
 public:
  // `size` ranks, each executor with `num_channels` channels.
  explicit FakeWorld(int size, int num_channels = 1);
  ~FakeWorld();
  FakeWorld(const FakeWorld&) = delete;
  FakeWorld& operator=(const FakeWorld&) = delete;

  int size() const;
  int num_channels() const;

  // Rank `rank`'s executor (name "fake"). Call once per rank; a second executor for the same rank
  // would share its channel sequences.
  std::unique_ptr<Executor> CreateExecutor(int rank);

  // Executors that say they are Executor::stream_ordered() (as NCCL's), so that the data plane
  // pipelines its buckets. The fake has no stream: host copies queued after a collective run at
  // once, before it completes. Meaningful on one rank, where a collective completes at its Start,
  // and for bookkeeping (how many buckets start, in which order, what a held one does).
  void SetStreamOrdered(bool stream_ordered);

  // The `index`-th collective (from 0) on `channel` fails with `status`: on every rank, or, with
  // `rank`, on that rank only while the others complete normally. Must be set before the
  // collective completes.
  void FailCollective(int channel, int64_t index, absl::Status status,
                      std::optional<int> rank = std::nullopt);
  // The `index`-th collective on `channel` never completes: every rank's Work stays "not done".
  void HoldCollective(int channel, int64_t index);

  // Every Start so far, in call order (all ranks), or one rank's.
  std::vector<StartedCollective> started() const;
  std::vector<StartedCollective> started(int rank) const;
  // Ranks whose executor was aborted (Executor::Abort).
  std::vector<int> aborted() const;

  struct State;  // shared with the executors and their Works

 private:
  std::shared_ptr<State> state_;
};

}  // namespace fake
}  // namespace overlap

#endif  // OVERLAP_TESTS_FAKES_FAKE_EXECUTOR_H_
