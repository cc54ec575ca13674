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

// Megabytes on the command line, bytes in OVERLAP_FUSION_THRESHOLD (MiB, as Horovod's option).
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

absl::StatusOr<std::string> ChannelCount(absl::string_view flag, absl::string_view value) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 1 || n > 16) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "' is not in 1..16"));
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

absl::StatusOr<std::string> PlanAfterSteps(absl::string_view flag, absl::string_view value) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 0 || n > 1000) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "' is not in 0..1000"));
  }
  return std::string(value);
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
     "run collectives on N independent communicators (1..16)", ChannelCount},
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
     "communication planner (wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft, auto); "
     "reserved: the runtime warns that it ignores it until planners are wired in",
     NonEmpty},
    {"--compression", "OVERLAP_COMPRESSION", "SPEC",
     "compressor for allreduces that do not name one, e.g. fp16 or topk:ratio=0.01 (none: off)",
     NonEmpty},
    {"--cycle-time-ms", "OVERLAP_CYCLE_TIME_MS", "MS",
     "start a negotiation round at most MS ms after the first rank has new work (0..1000), so "
     "tensors submitted close together fuse",
     CycleTime},
    {"--plan-after-steps", "OVERLAP_PLAN_AFTER_STEPS", "N",
     "freeze a plan after N identical steps and stop negotiating them (0..1000; 0: never)",
     PlanAfterSteps},
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
