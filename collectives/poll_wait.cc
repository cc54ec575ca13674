#include "collectives/poll_wait.h"

#include <sched.h>

#include "absl/strings/str_cat.h"

namespace overlap {

absl::Status PollWithDeadline(const std::function<absl::StatusOr<bool>()>& test,
                              absl::Duration limit, absl::string_view what,
                              const std::function<absl::Status()>& check) {
  const absl::Time start = absl::Now();
  absl::Time next_check = start + absl::Milliseconds(1);
  for (int spins = 0;; ++spins) {
    absl::StatusOr<bool> done = test();
    if (!done.ok()) {
      return absl::Status(done.status().code(),
                          absl::StrCat(what, " failed: ", done.status().message()));
    }
    if (*done) return absl::OkStatus();
    if (check != nullptr && spins % 64 == 0 && absl::Now() >= next_check) {
      absl::Status peers = check();
      if (!peers.ok()) return peers;
      next_check = absl::Now() + absl::Milliseconds(1);
    }
    if (spins < 2000) {
      sched_yield();
      continue;
    }
    // A peer is busy (copying a large bucket, say): stop burning the core it may need.
    absl::SleepFor(absl::Microseconds(50));
    if (spins % 256 == 0 && absl::Now() - start > limit) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not complete within ", absl::ToInt64Seconds(limit),
                       " s: a peer process is stuck, dead or not started, or the network is down"));
    }
  }
}

}  // namespace overlap
