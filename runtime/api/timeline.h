// Chrome trace (Perfetto-viewable) of what the runtime did with each tensor.
//
// Each tensor gets its own track named after it; each channel gets a track for its collectives.
// Events are complete spans ("ph":"X") in microseconds since the runtime started. The file is a
// valid JSON array once Close() ran; Perfetto also accepts an unterminated array, so a crashed
// run still leaves a readable trace.
//
// Threading: all methods may be called from any thread.
#ifndef OVERLAP_RUNTIME_API_TIMELINE_H_
#define OVERLAP_RUNTIME_API_TIMELINE_H_

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace overlap {

class Timeline {
 public:
  Timeline() = default;
  ~Timeline();

  // Starts writing to `path` (closing the file written so far, if any); rank 0 writes `path` itself and rank r > 0 writes "<path>.rank<r>"
  // so that ranks sharing a file system do not overwrite each other. Unavailable on open failure.
  absl::Status Open(const std::string& path, int rank);
  bool enabled() const { return open_.load(std::memory_order_relaxed); }

  // A span [start, end) named `what` on the track of `track` (a tensor name, "channel N" or
  // "compute").
  void Span(const std::string& track, const char* what, absl::Time start, absl::Time end);

  // A span of the simulator's prediction, on `track` of a second process ("rank R predicted"),
  // so that Perfetto shows the predicted step above the measured one.
  void Predicted(const std::string& track, const std::string& what, absl::Time start,
                 absl::Time end);

  // Flushes and terminates the JSON array.
  void Close();

 private:
  // Process ids in the trace: the rank's measured events, and its predicted ones.
  int MeasuredPid() const { return rank_; }
  int PredictedPid() const { return kPredictedPidBase + rank_; }
  static constexpr int kPredictedPidBase = 100000;
  int TrackId(absl::flat_hash_map<std::string, int>* tracks, int pid, const std::string& track)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Write(int pid, int tid, const std::string& what, absl::Time start, absl::Time end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::atomic<bool> open_{false};  // file_ != nullptr, readable without the lock
  int rank_ = 0;
  absl::Time origin_;
  absl::flat_hash_map<std::string, int> tracks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> predicted_tracks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_API_TIMELINE_H_
