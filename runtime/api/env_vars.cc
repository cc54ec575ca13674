#include "runtime/api/env_vars.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace overlap::env {
namespace {

// Byte counts stop at 1 TiB: far above any useful bucket, and the MiB options cannot overflow.
constexpr double kMaxBytes = 1099511627776.0;
constexpr double kMiB = 1048576.0;

// Builds one table entry, so that each reads as a sentence and no field is left to chance.
class Def {
 public:
  constexpr Def(const char* name, Kind kind, Reader reader = Reader::kRuntime) {
    var_.name = name;
    var_.kind = kind;
    var_.reader = reader;
  }
  constexpr Def& Range(double min, double max, const char* unit) {
    var_.min = min;
    var_.max = max;
    var_.unit = unit;
    return *this;
  }
  constexpr Def& AboveMin() {
    var_.min_exclusive = true;
    return *this;
  }
  constexpr Def& OrMinusOne() {
    var_.minus_one_allowed = true;
    return *this;
  }
  constexpr Def& Values(const char* values) {
    var_.values = values;
    return *this;
  }
  constexpr Def& Note(const char* note) {
    var_.note = note;
    return *this;
  }
  constexpr Def& Default(const char* value) {
    var_.default_value = value;
    return *this;
  }
  constexpr Def& Describe(const char* description) {
    var_.description = description;
    return *this;
  }
  constexpr Def& Option(const char* flag, const char* value, const char* help) {
    var_.flag.name = flag;
    var_.flag.value = value;
    var_.flag.help = help;
    return *this;
  }
  // The option takes MiB; the variable holds bytes.
  constexpr Def& InMiB() {
    var_.flag.scale = kMiB;
    var_.flag.unit = "MiB";
    return *this;
  }
  constexpr Var Build() const { return var_; }

 private:
  Var var_;
};

constexpr Var kVars[] = {
    // overlap::Config (runtime/config.h), in overlaprun --help's order.
    Def("OVERLAP_FUSION_THRESHOLD", Kind::kInt)
        .Range(0, kMaxBytes, "a byte count")
        .Default("67108864")
        .Describe("bytes per fused allreduce; 0 disables fusion")
        .Option("--fusion-threshold-mb", "MB",
                "pack ready tensors into collectives of at most MB MiB (0 disables fusion)")
        .InMiB()
        .Build(),
    Def("OVERLAP_DIRECT_THRESHOLD", Kind::kInt)
        .Range(0, kMaxBytes, "a byte count")
        .Default("1048576")
        .Describe("a single tensor at least this large (bytes) is reduced in place, unfused; "
                  "0 fuses every tensor")
        .Build(),
    Def("OVERLAP_NUM_CHANNELS", Kind::kInt)
        .Range(1, 16, "an integer")
        .Default("1")
        .Describe("independent communicators collectives run on")
        .Option("--num-channels", "N", "run collectives on N independent communicators (1..16)")
        .Build(),
    Def("OVERLAP_HIERARCHICAL_ALLREDUCE", Kind::kInt)
        .Range(0, 1, "an integer")
        .Default("0")
        .Describe(
            "1: allreduces of 64 KiB and more run within each host, across hosts, within each "
            "host again; needs the same number of ranks on every host (docs/tuning.md)")
        .Option("--hierarchical-allreduce", "0|1",
                "1: reduce within each host, then across hosts, then share within each host, so "
                "that 1/L of the data per rank crosses the network (L ranks per host)")
        .Build(),
    Def("OVERLAP_ADAPTIVE_ALLREDUCE", Kind::kEnum)
        .Values("auto, on, off")
        .Default("auto")
        .Describe(
            "allreduces of 1 MiB and more around a slow link: auto measures each host's link (3 "
            "or more hosts) and gives a slow one a smaller share of the buffer where that pays; "
            "on always, off never (docs/tuning.md)")
        .Option("--adaptive-allreduce", "auto|on|off",
                "measure each host's link and give a slow one less of every large allreduce "
                "(auto: where that pays)")
        .Build(),
    Def("OVERLAP_TWO_STAGE", Kind::kEnum)
        .Values("auto, on, off")
        .Default("auto")
        .Describe(
            "where ranks share hosts: scheduled plans run a bucket's allreduce within each host, "
            "across hosts, within each host again where the fitted costs say that is faster "
            "(auto), for every bucket (on), or never (off) (docs/tuning.md)")
        .Option("--two-stage", "auto|on|off",
                "let scheduled plans run buckets in two link classes, within and across hosts "
                "(auto: where the fitted costs say it pays)")
        .Build(),
    Def("OVERLAP_HOST_ID", Kind::kString)
        .Describe("the host this rank counts as for the hierarchical allreduce and two-stage "
                  "buckets; unset: its host name")
        .Build(),
    Def("OVERLAP_TIMELINE", Kind::kPath)
        .Describe("Chrome trace of every tensor's life; rank r > 0 writes `<path>.rank<r>`; empty: "
                  "off")
        .Option("--timeline", "FILE",
                "write a Chrome trace of every tensor's life to FILE (open it in Perfetto)")
        .Build(),
    Def("OVERLAP_LOG_LEVEL", Kind::kEnum)
        .Values("trace, debug, info, warn, error, critical, off")
        .Default("warn")
        .Describe("the runtime's log level (spdlog)")
        .Option("--log-level", "LEVEL",
                "runtime log level: trace, debug, info, warn, error, critical or off")
        .Build(),
    Def("OVERLAP_STALL_WARNING_S", Kind::kDouble)
        .Range(0, 1e7, "seconds")
        .AboveMin()
        .Default("60")
        .Describe("warn, naming the ranks, about a tensor some ranks have submitted and others "
                  "not, and about a plan vote still waiting for a rank's forward marker")
        .Option("--stall-warning", "SECONDS",
                "warn, naming the ranks, when a tensor is ready on some ranks but not others this "
                "long")
        .Build(),
    Def("OVERLAP_STALL_TIMEOUT_S", Kind::kDouble)
        .Range(0, 1e7, "seconds")
        .AboveMin()
        .Default("300")
        .Describe(
            "fail the handles of a tensor stalled this long, and the job when a plan vote waits "
            "this long for a rank's forward marker; at least OVERLAP_STALL_WARNING_S")
        .Option("--stall-timeout", "SECONDS",
                "fail the job when a tensor stays stalled this long (at least --stall-warning)")
        .Build(),
    Def("OVERLAP_COLLECTIVE_TIMEOUT_S", Kind::kDouble)
        .Range(0, 1e7, "seconds")
        .AboveMin()
        .Default("300")
        .Describe("a negotiation round or collective this old means a lost peer: the runtime stops")
        .Option("--collective-timeout", "SECONDS",
                "fail the job when a collective has not completed after this long (dead peer or "
                "network)")
        .Build(),
    Def("OVERLAP_START_TIMEOUT_S", Kind::kDouble)
        .Range(0, 1e7, "seconds")
        .AboveMin()
        .Default("60")
        .Describe("every rank must connect its control socket in Init within this; overlaprun "
                  "--start-timeout sets it")
        .Build(),
    Def("OVERLAP_PLANNER", Kind::kEnum)
        .Values("observed, wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft, auto")
        .Default("observed")
        .Describe("observed freezes the step negotiation observed; the others are scheduler "
                  "planners and need the step markers (docs/scheduler.md)")
        .Option("--planner", "NAME",
                "communication planner: observed (the default) freezes the step that negotiation "
                "observed; wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft or auto plan "
                "from measured steps and need the program to call "
                "overlap::StartForward/StartBackward/StartUpdate every step")
        .Build(),
    Def("OVERLAP_COMPRESSION", Kind::kString)
        .Default("none")
        .Describe("compressor for float32 sum/average allreduces that do not name one, e.g. fp16, "
                  "topk:ratio=0.01 (docs/compression.md)")
        .Option("--compression", "SPEC",
                "compressor for allreduces that do not name one, e.g. fp16 or topk:ratio=0.01 "
                "(none: off)")
        .Build(),
    Def("OVERLAP_EXECUTOR", Kind::kEnum)
        .Values("auto, nccl, mpi")
        .Default("auto")
        .Describe("what moves CUDA tensors: auto is NCCL when every rank has its own GPU, else MPI "
                  "through pinned host memory (docs/gpu.md)")
        .Build(),
    Def("OVERLAP_COORDINATOR_WAIT", Kind::kEnum)
        .Values("spin, nap, auto")
        .Default("spin")
        .Describe("how the coordinator waits while its collectives run and nothing finished for 1 "
                  "ms: spin calls MPI in a loop, yielding the core; nap sleeps 1 ms between calls "
                  "(woken at once by new work); auto naps while the host's load average is at "
                  "least its CPU count (ranks outnumber cores), else spins; overlap.tensorflow's "
                  "init() asks for auto unless this is set")
        .Build(),
    Def("OVERLAP_CYCLE_TIME_MS", Kind::kDouble)
        .Range(0, 1000, "milliseconds")
        .Default("0.5")
        .Describe("longest wait for the other ranks' work before a negotiation round; 0 starts "
                  "one at once")
        .Option("--cycle-time-ms", "MS",
                "start a negotiation round at most MS ms after the first rank has new work "
                "(0..1000), so tensors submitted close together fuse")
        .Build(),
    Def("OVERLAP_PLAN_AFTER_STEPS", Kind::kInt)
        .Range(0, 1000, "an integer")
        .Default("3")
        .Describe("identical steps before a plan freezes; 0 negotiates every operation")
        .Option("--plan-after-steps", "N",
                "freeze a plan after N identical steps and stop negotiating them (0..1000; 0: "
                "never)")
        .Build(),
    Def("OVERLAP_PLAN_CHECK_WINDOW", Kind::kInt)
        .Range(1, 64, "an integer")
        .Default("4")
        .Describe("planned units that may run ahead of their consistency checks; the same on "
                  "every rank (docs/tuning.md)")
        .Option("--plan-check-window", "N",
                "let N planned units run ahead of their consistency checks (1..64)")
        .Build(),
    Def("OVERLAP_PROFILE_STEPS", Kind::kInt)
        .Range(1, 1000, "an integer")
        .Default("5")
        .Describe("steps measured (median) before a scheduler planner plans")
        .Option("--profile-steps", "N",
                "measure N steps (median) before a scheduler planner makes its plan (1..1000)")
        .Build(),
    Def("OVERLAP_STALENESS", Kind::kInt)
        .Range(0, 16, "an integer")
        .Default("0")
        .Describe("deft: the largest delay, in steps, of any bucket's update")
        .Option("--staleness", "S",
                "deft: the largest delay, in steps, any bucket's update may get (0..16, default 0)")
        .Build(),
    Def("OVERLAP_MAX_PERIOD", Kind::kInt)
        .Range(1, 64, "an integer")
        .Default("1")
        .Describe("deft: the largest update period, in steps; 1 updates every step")
        .Option("--max-period", "P",
                "deft: the largest update period, in steps, it may give a bucket (1..64; default "
                "1, every step)")
        .Build(),
    Def("OVERLAP_BUDGET", Kind::kDouble)
        .Range(0, 1e6, "a number")
        .OrMinusOne()
        .Note("-1: max(staleness, (max_period - 1) / 2)")
        .Default("0")
        .Describe("deft: the convergence budget, the byte-weighted mean number of steps a "
                  "gradient may arrive late; 0 keeps the plan synchronous; overlap.torch's and "
                  "overlap.tensorflow's init() default it to -1, under their look-ahead "
                  "(measured: docs/time_to_accuracy.md, \"Convergence budget\")")
        .Option("--budget", "B",
                "deft: the convergence budget, the byte-weighted mean number of steps a gradient "
                "may arrive late, a number in [0, 1e6] (default 0: synchronous), or -1 for "
                "max(--staleness, (--max-period - 1) / 2)")
        .Build(),
    Def("OVERLAP_PARTITION_BYTES", Kind::kInt)
        .Range(0, kMaxBytes, "a byte count")
        .Note("0 tunes it")
        .Default("0")
        .Describe("bytescheduler: the partition size")
        .Option("--partition-mb", "MB",
                "bytescheduler: the partition size in MiB (0, the default, tunes it by simulation)")
        .InMiB()
        .Build(),
    Def("OVERLAP_CREDIT_BYTES", Kind::kInt)
        .Range(0, kMaxBytes, "a byte count")
        .Note("0 tunes it")
        .Default("0")
        .Describe("bytescheduler: the credit (bytes in flight)")
        .Option("--credit-mb", "MB",
                "bytescheduler: the credit (bytes in flight) in MiB (0, the default, tunes it by "
                "simulation)")
        .InMiB()
        .Build(),
    Def("OVERLAP_AUTO_TRIALS", Kind::kInt)
        .Range(1, 8, "an integer")
        .Default("3")
        .Describe("auto: how many of the best-simulated synchronous plans run for a few steps each "
                  "before the fastest measured one is kept, or the observed plan where it was "
                  "measured faster than all of them; 1 trusts the simulator")
        .Option("--auto-trials", "N",
                "auto: try the N best-simulated synchronous plans on live steps and keep the "
                "fastest, or the observed plan where that was faster (1..8, default 3; 1: the "
                "simulator's choice)")
        .Build(),
    Def("OVERLAP_REPLAN_DRIFT", Kind::kDouble)
        .Range(0, 10, "a fraction")
        .Note("0 never re-plans on drift")
        .Default("0.25")
        .Describe("re-plan when the measured step drifts from its first measurement under the "
                  "plan by more than this fraction (and by more than twice the steps' spread and "
                  "OVERLAP_REPLAN_MIN_MS), at two checks in a row")
        .Option("--replan-drift", "F",
                "re-plan when the step time drifts from the planned one by more than this "
                "fraction (0..10, default 0.25; 0: never)")
        .Build(),
    Def("OVERLAP_REPLAN_MIN_MS", Kind::kDouble)
        .Range(0, 1e6, "milliseconds")
        .Default("5")
        .Describe("the least drift of the measured step, in ms, that re-plans: a smaller change "
                  "cannot win back the unplanned steps a re-plan costs")
        .Option("--replan-min-ms", "MS",
                "re-plan on a drift of at least this many ms only (default 5)")
        .Build(),
    Def("OVERLAP_REPLAN_MIN_GAIN", Kind::kDouble)
        .Range(0, 100, "a fraction")
        .Note("0: only a plan made again exactly stays")
        .Default("0.05")
        .Describe("after a drift, the plan made from the drifted steps replaces the plan in "
                  "force only if the simulator gives it a step at least this fraction shorter "
                  "than the plan in force's on the drifted profile; otherwise the plan stays")
        .Option("--replan-min-gain", "F",
                "after a drift, replace the plan only if the new one is simulated at least this "
                "fraction faster (default 0.05)")
        .Build(),
    Def("OVERLAP_DEVICE_BUCKET_US", Kind::kDouble)
        .Range(0, 1e6, "microseconds")
        .Default("200")
        .Describe("what a plan's bucket costs the coordinator beyond its collective when the "
                  "gradients are on a GPU (about 0.2 ms on an H200), added to the fitted latency "
                  "the planners cut buckets by")
        .Build(),

    // Read outside the runtime; listed so that it does not warn about them.
    Def("OVERLAP_LIBRARY", Kind::kPath, Reader::kPython)
        .Describe("liboverlap.so for the Python package to load instead of its own "
                  "(overlap/_core.py)")
        .Build(),
    Def("OVERLAP_TF_OPS_LIBRARY", Kind::kPath, Reader::kPython)
        .Describe("overlap.tensorflow's op library to load instead of finding or compiling one")
        .Build(),
    Def("OVERLAP_LAUNCHER", Kind::kPath, Reader::kPython)
        .Describe("the overlaprun that overlap.run starts, instead of the package's own or the "
                  "one on PATH (overlap/runner.py)")
        .Build(),
    Def("OVERLAP_RUN_DRIVER", Kind::kString, Reader::kPython)
        .Describe("set by overlap.run for its ranks: the driver's addresses and port")
        .Build(),
    Def("OVERLAP_RUN_KEY", Kind::kString, Reader::kPython)
        .Describe("set by overlap.run for its ranks: the key that signs their messages")
        .Build(),
    Def("OVERLAP_ELASTIC_PYTHON", Kind::kPath, Reader::kPython)
        .Describe("the Python that runs overlaprun's elastic driver (default python3; the "
                  "pip-installed overlaprun sets its own)")
        .Build(),
    Def("OVERLAP_ELASTIC_DRIVER", Kind::kString, Reader::kPython)
        .Describe("set by the elastic driver for its ranks: the driver's addresses and port")
        .Build(),
    Def("OVERLAP_ELASTIC_KEY", Kind::kString, Reader::kPython)
        .Describe("set by the elastic driver for its ranks: the key that signs their messages")
        .Build(),
    Def("OVERLAP_ELASTIC_GENERATION", Kind::kString, Reader::kPython)
        .Describe("set by the elastic driver for its ranks: which launch of the job this is")
        .Build(),
    Def("OVERLAP_ELASTIC_STATE_DIR", Kind::kPath, Reader::kPython)
        .Default("/dev/shm/overlap-elastic-JOB, else /tmp/...")
        .Describe("where an elastic job's ranks keep their last commit, one file per host, for "
                  "the next generation to resume from")
        .Build(),
    Def("OVERLAP_TF_OPS_CACHE", Kind::kPath, Reader::kPython)
        .Default("$XDG_CACHE_HOME/overlap/tf_ops")
        .Describe("where overlap.tensorflow compiles its op library")
        .Build(),
    Def("OVERLAP_CUDA_HOME", Kind::kPath, Reader::kBuild)
        .Default("/usr/local/cuda")
        .Describe("the CUDA toolkit (with NCCL) the build uses; none builds without CUDA")
        .Build(),
    Def("OVERLAP_PYTHON", Kind::kPath, Reader::kTest)
        .Describe("the Python interpreter the Python and package tests run")
        .Build(),
    Def("OVERLAP_REQUIRE_GPU", Kind::kEnum, Reader::kTest)
        .Values("0, 1")
        .Default("0")
        .Describe("1: the GPU tests fail instead of skipping where no GPU is usable "
                  "(tests/gpu/gpu_gate.h)")
        .Build(),
    Def("OVERLAP_TEST_CORRUPT_PLAN", Kind::kEnum, Reader::kTest)
        .Values("slice, tensor, version, truncate")
        .Describe("test builds only (tests/runtime/plan_hooks_from_env.cc): rank 0 damages the "
                  "plan it broadcasts, to test the refusal")
        .Build(),
    Def("OVERLAP_TEST_PLAN_SCHEDULE", Kind::kString, Reader::kTest)
        .Describe("test builds only (tests/runtime/plan_hooks_from_env.cc): \"delay,period\" for "
                  "every allreduce bucket of rank 0's plan")
        .Build(),
    Def("OVERLAP_TEST_ROUND_IN_VOTE", Kind::kDouble, Reader::kTest)
        .Range(0, 60000, "milliseconds")
        .Describe("test builds only (tests/runtime/plan_hooks_from_env.cc): every rank asks for "
                  "a negotiation round when it starts a plan vote it voted quiescent in, rank 0 "
                  "after waiting this long")
        .Build(),
    Def("OVERLAP_TEST_RANKS_PER_HOST", Kind::kString, Reader::kTest)
        .Describe("k: tests/mpi_catch_main.cc puts every k consecutive ranks on a pretend host "
                  "(OVERLAP_HOST_ID) before Init")
        .Build(),
    Def("OVERLAP_TEST_PROXY_STAGED", Kind::kString, Reader::kTest)
        .Describe("any value: the tests' proxy device (tests/fakes/proxy_device.cc) runs its "
                  "collectives through the MPI executor staged through host memory, as ranks "
                  "sharing a GPU do, instead of a stream-ordered one")
        .Build(),
    Def("OVERLAP_TEST_EXPECT_PLAN_BUCKETS", Kind::kString, Reader::kTest)
        .Describe("n or >=n: tests/runtime/scheduled_test.cc requires the adopted plan to have "
                  "n buckets, or at least n")
        .Build(),
    Def("OVERLAP_TEST_DRIFT", Kind::kString, Reader::kTest)
        .Describe("any value: tests/runtime/scheduled_test.cc slows its step down to test "
                  "re-planning")
        .Build(),
    Def("OVERLAP_TEST_SLOW_TRIALS", Kind::kString, Reader::kTest)
        .Describe("any value: tests/runtime/scheduled_test.cc slows the steps of auto's later "
                  "trials, so that the first candidate must be adopted again")
        .Build(),
    Def("OVERLAP_TEST_UNSTEADY_TRIALS", Kind::kString, Reader::kTest)
        .Describe("any value: tests/runtime/scheduled_test.cc breaks every step's markers "
                  "during auto's trials, so that they end unmeasured")
        .Build(),
    Def("OVERLAP_TEST_STUCK_AT_STEP", Kind::kString, Reader::kTest)
        .Describe("a step: tests/runtime/scheduled_test.cc's rank 1 waits before that step's "
                  "forward marker on an allreduce rank 0 never submits, while rank 0 votes")
        .Build(),
    Def("OVERLAP_TEST_EXPECT_EXECUTOR", Kind::kString, Reader::kTest)
        .Describe("the executor tests/gpu/device_runtime_test.cc expects the runtime to choose")
        .Build(),
    Def("OVERLAP_TEST_EXPECT_ERROR", Kind::kString, Reader::kTest)
        .Describe("the Init error tests/gpu/device_runtime_test.cc expects")
        .Build(),
    Def("OVERLAP_TEST_TIMEOUT_S", Kind::kDouble, Reader::kTest)
        .Range(0, 1e7, "seconds")
        .AboveMin()
        .Default("120")
        .Describe("the watchdog of each overlap.torch and overlap.tensorflow test "
                  "(tests/python_util/overlap_pytest.py)")
        .Build(),
    Def("OVERLAP_TEST_LOG_DIR", Kind::kPath, Reader::kTest)
        .Describe("where tests/python_util/run_pytest.sh has each rank write its log")
        .Build(),
};

// 1e7 rather than 10000000, as people write such bounds; integers below a million as they are.
std::string FormatBound(double x) {
  if (x == std::floor(x) && std::fabs(x) >= 1e6) {
    const int exponent = static_cast<int>(std::lround(std::log10(std::fabs(x))));
    if (std::pow(10.0, exponent) == std::fabs(x)) {
      return absl::StrCat(x < 0 ? "-" : "", "1e", exponent);
    }
  }
  if (x == std::floor(x) && std::fabs(x) < 9e15) return absl::StrCat(static_cast<int64_t>(x));
  return absl::StrCat(x);
}

// What `var` accepts, without its note, with bounds divided by `scale` and named `unit`.
std::string RangeText(const Var& var, double scale, const char* unit) {
  const std::string lo = FormatBound(var.min / scale);
  const std::string hi = FormatBound(var.max / scale);
  std::string range = var.kind == Kind::kInt && scale == 1
                          ? absl::StrCat(lo, "..", hi)
                          : absl::StrCat(var.min_exclusive ? "(" : "[", lo, ", ", hi, "]");
  std::string text = absl::StrCat(unit, " in ", range);
  if (var.minus_one_allowed) text = absl::StrCat("-1 or ", text);
  return text;
}

std::string WithNote(const Var& var, std::string text) {
  if (*var.note != '\0') absl::StrAppend(&text, " (", var.note, ")");
  return text;
}

// `label` is "NAME=" for a variable and "--flag " for an option.
absl::Status Invalid(absl::string_view label, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(label, "'", value, "' is not valid: expected ", want));
}

bool InRange(const Var& var, double value) {
  if (var.minus_one_allowed && value == -1) return true;
  const bool above_min = var.min_exclusive ? value > var.min : value >= var.min;
  return above_min && value <= var.max;  // false for NaN
}

bool IsOneOf(const Var& var, absl::string_view value) {
  for (absl::string_view v : absl::StrSplit(var.values, ", ")) {
    if (value == v) return true;
  }
  return false;
}

std::string VarLabel(const Var& var) { return absl::StrCat(var.name, "="); }

// `text` checked as `var`'s kind, the message starting with `label`.
absl::Status CheckAs(const Var& var, absl::string_view label, absl::string_view text) {
  switch (var.kind) {
    case Kind::kInt: {
      int64_t v = 0;
      if (absl::SimpleAtoi(text, &v) && InRange(var, static_cast<double>(v))) {
        return absl::OkStatus();
      }
      break;
    }
    case Kind::kDouble: {
      double v = 0;
      if (absl::SimpleAtod(text, &v) && InRange(var, v)) return absl::OkStatus();
      break;
    }
    case Kind::kEnum:
      if (IsOneOf(var, text)) return absl::OkStatus();
      break;
    case Kind::kString:
    case Kind::kPath:
      return absl::OkStatus();
  }
  return Invalid(label, text, Expected(var));
}

const char* ReaderName(Reader reader) {
  switch (reader) {
    case Reader::kRuntime:
      return "runtime";
    case Reader::kPython:
      return "Python package";
    case Reader::kBuild:
      return "build";
    case Reader::kTest:
      return "tests only";
  }
  return "";
}

// Markdown table cells may not hold '|'.
std::string Cell(absl::string_view text) { return absl::StrReplaceAll(text, {{"|", "\\|"}}); }

}  // namespace

absl::Span<const Var> Vars() { return kVars; }

const Var* Find(absl::string_view name) {
  for (const Var& var : kVars) {
    if (name == var.name) return &var;
  }
  return nullptr;
}

const Var* FindByFlag(absl::string_view flag) {
  for (const Var& var : kVars) {
    if (var.flag.name != nullptr && flag == var.flag.name) return &var;
  }
  return nullptr;
}

std::string Expected(const Var& var) {
  switch (var.kind) {
    case Kind::kInt:
    case Kind::kDouble:
      return WithNote(var, RangeText(var, 1, var.unit));
    case Kind::kEnum:
      return WithNote(var, absl::StrCat("one of ", var.values));
    case Kind::kString:
      return WithNote(var, "text");
    case Kind::kPath:
      return WithNote(var, "a path");
  }
  return "";
}

absl::Status CheckInt(const Var& var, int64_t value) {
  if (InRange(var, static_cast<double>(value))) return absl::OkStatus();
  return Invalid(VarLabel(var), absl::StrCat(value), Expected(var));
}

absl::Status CheckDouble(const Var& var, double value) {
  if (InRange(var, value)) return absl::OkStatus();
  return Invalid(VarLabel(var), absl::StrCat(value), Expected(var));
}

absl::StatusOr<int64_t> ParseInt(const Var& var, absl::string_view text) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || !InRange(var, static_cast<double>(v))) {
    return Invalid(VarLabel(var), text, Expected(var));
  }
  return v;
}

absl::StatusOr<double> ParseDouble(const Var& var, absl::string_view text) {
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !InRange(var, v)) {
    return Invalid(VarLabel(var), text, Expected(var));
  }
  return v;
}

absl::Status Check(const Var& var, absl::string_view text) {
  return CheckAs(var, VarLabel(var), text);
}

absl::StatusOr<std::string> FlagToValue(const Var& var, absl::string_view value) {
  const std::string label = absl::StrCat(var.flag.name, " ");
  if ((var.kind == Kind::kString || var.kind == Kind::kPath) && value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(var.flag.name, " needs a value"));
  }
  if (var.flag.scale == 1) {
    absl::Status s = CheckAs(var, label, value);
    if (!s.ok()) return s;
    return std::string(value);  // the runtime parses it with the same parser
  }
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !InRange(var, v * var.flag.scale)) {
    return Invalid(label, value, WithNote(var, RangeText(var, var.flag.scale, var.flag.unit)));
  }
  return absl::StrCat(static_cast<int64_t>(std::llround(v * var.flag.scale)));
}

std::string MarkdownTable() {
  std::string out =
      "| variable | accepts | default | overlaprun | read by | meaning |\n"
      "|---|---|---|---|---|---|\n";
  for (const Var& var : kVars) {
    std::string option;
    if (var.flag.name != nullptr) {
      option = absl::StrCat("`", var.flag.name, " ", var.flag.value, "`");
      if (var.flag.unit != nullptr) absl::StrAppend(&option, " (", var.flag.unit, ")");
    }
    const std::string default_value =
        *var.default_value == '\0' ? "" : absl::StrCat("`", var.default_value, "`");
    absl::StrAppend(&out, "| `", var.name, "` | ", Cell(Expected(var)), " | ", Cell(default_value),
                    " | ", Cell(option), " | ", ReaderName(var.reader), " | ",
                    Cell(var.description), " |\n");
  }
  return out;
}

}  // namespace overlap::env
