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

}  // namespace

absl::Status Validate(const LaunchOptions& o) {
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
  return CheckStallTimes(o);
}

}  // namespace overlap::launcher
