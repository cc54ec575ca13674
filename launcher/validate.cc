#include "launcher/validate.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "launcher/hosts.h"

namespace overlap::launcher {
namespace {

absl::Status CheckSlots(const LaunchOptions& o) {
  if (o.hosts.empty() || o.oversubscribe) {
    return absl::OkStatus();
  }
  const int slots = TotalSlots(o.hosts);
  if (o.num_ranks <= slots) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "-np ", o.num_ranks, " needs ", o.num_ranks, " slots but ",
      o.hosts_source == "-H" ? "-H " : absl::StrCat("hostfile ", o.hosts_source, " "),
      FormatHostList(o.hosts), " has ", slots, "; add hosts or slots, or pass --oversubscribe"));
}

absl::Status CheckStallTimes(const LaunchOptions& o) {
  auto warning = o.runtime_env.find("OVERLAP_STALL_WARNING_S");
  auto timeout = o.runtime_env.find("OVERLAP_STALL_TIMEOUT_S");
  if (warning == o.runtime_env.end() || timeout == o.runtime_env.end()) {
    return absl::OkStatus();
  }
  double w = 0, t = 0;
  if (absl::SimpleAtod(warning->second, &w) && absl::SimpleAtod(timeout->second, &t) && t < w) {
    return absl::InvalidArgumentError(absl::StrCat("--stall-timeout ", timeout->second,
                                                   " is below --stall-warning ", warning->second,
                                                   "; the warning must come first"));
  }
  return absl::OkStatus();
}

// The wrapper's grace must end before overlaprun gives up on mpirun, or every failure would read
// as a job mpirun could not stop.
absl::Status CheckGraces(const LaunchOptions& o) {
  if (o.wrap_ranks && o.peer_grace_s >= o.kill_grace_s) {
    return absl::InvalidArgumentError(absl::StrCat("--peer-grace ", o.peer_grace_s,
                                                   " must be below --kill-grace ", o.kill_grace_s));
  }
  return absl::OkStatus();
}

absl::Status CheckElastic(const LaunchOptions& o) {
  const ElasticOptions& e = o.elastic;
  if (o.num_ranks == 0) {
    return absl::InvalidArgumentError(
        "an elastic job needs -np N or --min-np N: how many ranks to start with");
  }
  if (e.max_ranks > 0 && e.min_ranks > e.max_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("--min-np ", e.min_ranks,
                                                   " is above --max-np ", e.max_ranks));
  }
  if (o.num_ranks < e.min_ranks || (e.max_ranks > 0 && o.num_ranks > e.max_ranks)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "-np ", o.num_ranks, " must lie between --min-np ", e.min_ranks, " and --max-np ",
        e.max_ranks > 0 ? absl::StrCat(e.max_ranks) : "(none)"));
  }
  if (!e.discovery_script.empty() && !o.hosts.empty()) {
    return absl::InvalidArgumentError(
        "give an elastic job's hosts with --host-discovery-script or with -H/--hostfile, not "
        "both");
  }
  if (e.discovery_script.empty() && o.hosts.empty()) {
    return absl::InvalidArgumentError(
        "an elastic job needs --host-discovery-script (a command printing the available "
        "hosts, one \"host:slots\" per line) or a fixed -H/--hostfile host list");
  }
  if (!o.hosts.empty() && !o.oversubscribe && TotalSlots(o.hosts) < e.min_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min-np ", e.min_ranks, " needs ", e.min_ranks, " slots but ",
                     FormatHostList(o.hosts), " has ", TotalSlots(o.hosts)));
  }
  if (o.program.empty()) {
    return absl::InvalidArgumentError(
        "no program given; usage: overlaprun --min-np N --host-discovery-script S [options] "
        "[--] program [args...]");
  }
  if (absl::Status s = CheckGraces(o); !s.ok()) {
    return s;
  }
  return CheckStallTimes(o);
}

}  // namespace

absl::Status Validate(const LaunchOptions& o) {
  if (o.elastic.enabled) {
    return CheckElastic(o);
  }
  if (o.num_ranks == 0) {
    return absl::InvalidArgumentError("-np N is required: how many ranks to start");
  }
  if (o.program.empty()) {
    return absl::InvalidArgumentError(
        "no program given; usage: overlaprun -np N [options] [--] program [args...]");
  }
  if (absl::Status s = CheckSlots(o); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckGraces(o); !s.ok()) {
    return s;
  }
  return CheckStallTimes(o);
}

}  // namespace overlap::launcher
