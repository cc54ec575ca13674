// Whether this host's CPUs are oversubscribed, for the coordinator's wait while collectives are in
// flight (OVERLAP_COORDINATOR_WAIT, runtime/config.h).
//
// MPI's non-blocking collectives advance only inside MPI calls, so the coordinator keeps calling
// MPI while its collectives run, yielding the core between calls. Where every rank has a core of
// its own that costs nothing, and the tightest loop moves data fastest. Where ranks and their
// compute threads outnumber the cores, each spinning coordinator takes a share of a core from
// compute: on 4 TensorFlow ranks over 2 cores (the namespace cluster) the four coordinators used
// about one core between them, and bert-base's emulated step ran at 1064 ms against 725 ms with
// short naps. Open MPI makes the same call for its own blocking waits (mpi_yield_when_idle when a
// node is oversubscribed); a host's rank count cannot tell here, since the emulated hosts share
// one kernel's cores, so the load does. The check is used only when asked for ("auto"): on real
// CPU compute a napping coordinator woke late to short collectives and the step got slower
// (docs/tuning.md), so spinning stays the default.
//
// Oversubscribed means the 1-minute load average (threads running or waiting for a CPU,
// /proc/loadavg) is at least the number of CPUs this process may run on (sched_getaffinity). A
// spinning coordinator counts towards that load itself, as it should: it is what competes.
// Threading: one thread (the coordinator) calls Oversubscribed.
#ifndef OVERLAP_RUNTIME_CONTROL_HOST_LOAD_H_
#define OVERLAP_RUNTIME_CONTROL_HOST_LOAD_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace overlap {

// The 1-minute load average in /proc/loadavg's text ("0.52 0.58 0.59 1/467 12345"); nullopt
// when it does not start with a number.
std::optional<double> ParseLoadAverage(absl::string_view loadavg);

// The CPUs this process may run on (at least 1).
int UsableCpus();

class HostLoad {
 public:
  // Reads `loadavg_path` (/proc/loadavg) at most once per `refresh`; `cpus` as UsableCpus().
  explicit HostLoad(std::string loadavg_path = "/proc/loadavg", int cpus = UsableCpus(),
                    absl::Duration refresh = absl::Seconds(1))
      : path_(std::move(loadavg_path)), cpus_(cpus), refresh_(refresh) {}

  // The last reading's verdict, read again when `refresh` has passed since it. False when the file
  // cannot be read or parsed (nothing known: spin, as without this check).
  bool Oversubscribed(absl::Time now);

 private:
  const std::string path_;
  const int cpus_;
  const absl::Duration refresh_;
  absl::Time next_read_ = absl::InfinitePast();
  bool oversubscribed_ = false;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONTROL_HOST_LOAD_H_
