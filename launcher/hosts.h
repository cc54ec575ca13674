// Host lists: the -H syntax "host[:slots],..." and hostfiles in Open MPI's syntax.
#ifndef OVERLAP_LAUNCHER_HOSTS_H_
#define OVERLAP_LAUNCHER_HOSTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "launcher/options.h"

namespace overlap::launcher {

// Parses "h1:2,h2,h3:4" (slots default to 1). InvalidArgument naming the entry when a host is
// empty or has a character other than letters, digits, '.', '-' and '_', a slot count is not a
// positive integer, or a host appears twice.
absl::StatusOr<std::vector<HostSlots>> ParseHostList(absl::string_view list);

// Parses hostfile text: one host per line as "host", "host slots=N" or "host:N"; '#' starts a
// comment; max_slots=N is accepted and ignored. Host names and slot counts are checked as for
// ParseHostList. `source` names the file in errors, which give the line number and the offending
// text. An empty host list is an error too.
absl::StatusOr<std::vector<HostSlots>> ParseHostfile(absl::string_view text,
                                                     absl::string_view source);

// Reads and parses the file at `path`; NotFound naming the path when it cannot be read.
absl::StatusOr<std::vector<HostSlots>> ReadHostfile(const std::string& path);

// Total slots over all hosts, capped at INT_MAX.
int TotalSlots(const std::vector<HostSlots>& hosts);

// The host mpirun places `rank` on with --map-by slot: hosts in order, each filled to its slots.
// Empty when the rank lies beyond the slots (oversubscribed placement is mpirun's choice).
std::string HostOfRank(const std::vector<HostSlots>& hosts, int rank);

// "h1:2,h2:1": the form mpirun's -H takes and messages show.
std::string FormatHostList(const std::vector<HostSlots>& hosts);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_HOSTS_H_
