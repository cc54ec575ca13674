#include "launcher/runtime_flags.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace overlap::launcher {
namespace {

absl::StatusOr<double> NonNegative(absl::string_view flag, absl::string_view value) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", value, "' is not a non-negative number"));
  }
  return v;
}

// Megabytes (MiB, as Horovod's option) on the command line, bytes in the variable.
absl::StatusOr<std::string> MegabytesToBytes(absl::string_view flag, absl::string_view value) {
  absl::StatusOr<double> mb = NonNegative(flag, value);
  if (!mb.ok()) {
    return mb.status();
  }
  if (*mb > 1 << 20) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "' MB is too large"));
  }
  return absl::StrCat(static_cast<int64_t>(std::llround(*mb * 1024 * 1024)));
}

absl::StatusOr<std::string> PositiveSeconds(absl::string_view flag, absl::string_view value) {
  absl::StatusOr<double> s = NonNegative(flag, value);
  if (!s.ok()) {
    return s.status();
  }
  if (*s == 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " must be more than 0 seconds"));
  }
  return std::string(value);
}

// An integer in [kMin, kMax], passed on as given (the runtime reads it with the same parser).
template <int kMin, int kMax>
absl::StatusOr<std::string> IntInRange(absl::string_view flag, absl::string_view value) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < kMin || n > kMax) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", value, "' is not in ", kMin, "..", kMax));
  }
  return std::string(value);
}

absl::StatusOr<std::string> CycleTime(absl::string_view flag, absl::string_view value) {
  absl::StatusOr<double> ms = NonNegative(flag, value);
  if (!ms.ok()) return ms.status();
  if (*ms > 1000) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "' is not in 0..1000"));
  }
  return std::string(value);
}

// -1 (the default budget, max(--staleness, (--max-period - 1) / 2)) or a number in [0, 1e6], as
// runtime/config.cc.
absl::StatusOr<std::string> Budget(absl::string_view flag, absl::string_view value) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !(v == -1 || (v >= 0 && v <= 1e6))) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " '", value, "' is not -1 (the default) or a number in [0, 1e6]"));
  }
  return std::string(value);
}

absl::StatusOr<std::string> ReplanDrift(absl::string_view flag, absl::string_view value) {
  absl::StatusOr<double> drift = NonNegative(flag, value);
  if (!drift.ok()) return drift.status();
  if (*drift > 10) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "' is not in [0, 10]"));
  }
  return std::string(value);
}

// The names runtime/config.cc accepts for OVERLAP_PLANNER (the launcher does not link the
// runtime, so the list is repeated here; keep the two in step).
constexpr const char* kPlanners[] = {"observed", "wfbp", "fusion", "mgwfbp", "bytescheduler",
                                     "usbyte",   "dear", "deft",   "auto"};

absl::StatusOr<std::string> Planner(absl::string_view flag, absl::string_view value) {
  for (const char* planner : kPlanners) {
    if (value == planner) return std::string(value);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " '", value,
      "' is not one of observed, wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft, auto"));
}

absl::StatusOr<std::string> LogLevel(absl::string_view flag, absl::string_view value) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (value == level) {
      return std::string(value);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " '", value, "' is not one of trace, debug, info, warn, error, critical, off"));
}

absl::StatusOr<std::string> NonEmpty(absl::string_view flag, absl::string_view value) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
  }
  return std::string(value);
}

constexpr RuntimeFlag kFlags[] = {
    {"--fusion-threshold-mb", "OVERLAP_FUSION_THRESHOLD", "MB",
     "pack ready tensors into collectives of at most MB MiB (0 disables fusion)", MegabytesToBytes},
    {"--num-channels", "OVERLAP_NUM_CHANNELS", "N",
     "run collectives on N independent communicators (1..16)", IntInRange<1, 16>},
    {"--timeline", "OVERLAP_TIMELINE", "FILE",
     "write a Chrome trace of every tensor's life to FILE (open it in Perfetto)", NonEmpty},
    {"--log-level", "OVERLAP_LOG_LEVEL", "LEVEL",
     "runtime log level: trace, debug, info, warn, error, critical or off", LogLevel},
    {"--stall-warning", "OVERLAP_STALL_WARNING_S", "SECONDS",
     "warn, naming the ranks, when a tensor is ready on some ranks but not others this long",
     PositiveSeconds},
    {"--stall-timeout", "OVERLAP_STALL_TIMEOUT_S", "SECONDS",
     "fail the job when a tensor stays stalled this long (at least --stall-warning)",
     PositiveSeconds},
    {"--collective-timeout", "OVERLAP_COLLECTIVE_TIMEOUT_S", "SECONDS",
     "fail the job when a collective has not completed after this long (dead peer or network)",
     PositiveSeconds},
    {"--planner", "OVERLAP_PLANNER", "NAME",
     "communication planner: observed (the default) freezes the step that negotiation observed; "
     "wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft or auto plan from measured steps "
     "and need the program to call overlap::StartForward/StartBackward/StartUpdate every step",
     Planner},
    {"--compression", "OVERLAP_COMPRESSION", "SPEC",
     "compressor for allreduces that do not name one, e.g. fp16 or topk:ratio=0.01 (none: off)",
     NonEmpty},
    {"--cycle-time-ms", "OVERLAP_CYCLE_TIME_MS", "MS",
     "start a negotiation round at most MS ms after the first rank has new work (0..1000), so "
     "tensors submitted close together fuse",
     CycleTime},
    {"--plan-after-steps", "OVERLAP_PLAN_AFTER_STEPS", "N",
     "freeze a plan after N identical steps and stop negotiating them (0..1000; 0: never)",
     IntInRange<0, 1000>},
    {"--profile-steps", "OVERLAP_PROFILE_STEPS", "N",
     "measure N steps (median) before a scheduler planner makes its plan (1..1000)",
     IntInRange<1, 1000>},
    {"--staleness", "OVERLAP_STALENESS", "S",
     "deft: the largest delay, in steps, any bucket's update may get (0..16, default 0)",
     IntInRange<0, 16>},
    {"--max-period", "OVERLAP_MAX_PERIOD", "P",
     "deft: the largest update period, in steps, it may give a bucket (1..64; default 1, every "
     "step)",
     IntInRange<1, 64>},
    {"--budget", "OVERLAP_BUDGET", "B",
     "deft: the convergence budget, the byte-weighted mean number of steps a gradient may arrive "
     "late, a number in [0, 1e6], or -1 (the default) for max(--staleness, (--max-period - 1) / 2)",
     Budget},
    {"--partition-mb", "OVERLAP_PARTITION_BYTES", "MB",
     "bytescheduler: the partition size in MiB (0, the default, tunes it by simulation)",
     MegabytesToBytes},
    {"--credit-mb", "OVERLAP_CREDIT_BYTES", "MB",
     "bytescheduler: the credit (bytes in flight) in MiB (0, the default, tunes it by simulation)",
     MegabytesToBytes},
    {"--replan-drift", "OVERLAP_REPLAN_DRIFT", "F",
     "re-plan when the step time drifts from the planned one by more than this fraction "
     "(0..10, default 0.25; 0: never)",
     ReplanDrift},
};

}  // namespace

absl::Span<const RuntimeFlag> RuntimeFlags() { return kFlags; }

const RuntimeFlag* FindRuntimeFlag(absl::string_view flag) {
  for (const RuntimeFlag& f : kFlags) {
    if (flag == f.flag) {
      return &f;
    }
  }
  return nullptr;
}

}  // namespace overlap::launcher
