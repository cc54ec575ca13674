// A model's training step, emulated from a bundled profile, run through the runtime: measured
// step time against the scheduler's prediction and against the ideal.
//
//   overlaprun -np 4 bazel-bin/bench/model_step --model resnet50 [--steps 20] [--link-rate 1gbit]
//       [--time-scale X] [--bytes-scale X] [--target-step-ms 1000] [--max-warmup-steps 60]
//       [--straggler RANK:FRACTION] [--hiccups RANK]
//
// --straggler 2:0.3 makes rank 2's backward 30% slower than the others'; --hiccups 2 gives rank
// 2 one pause of 50-200 ms (uniform, a fixed seed) at a random layer of every backward: the
// persistent and the random straggler of tools/hetero_bench.sh.
// The program is the GPU training loop with the GPU taken out. Every layer of the profile
// (scheduler/builtin.h, or --profile FILE) sleeps its forward and backward time times the time
// scale, so the CPU stays free for the runtime as it would be while a GPU computes. Each layer's
// gradients are real float32 buffers (the profile's element counts times the bytes scale, at least
// one element), averaged in place by overlap::Allreduce under the tensor's name right when the
// layer's backward ends. Update semantics follow the plan in force, as the simulator models them
// (scheduler/plan.h): with no scheduled plan, or one with layerwise_update, the handles of a
// layer are waited for just before its forward in the next step, and that layer's share of the
// optimizer step (update_ms x its fraction of the gradient bytes) runs there; with a plan without
// layerwise_update (wfbp, fusion, mgwfbp) every handle is waited for after backward and then the
// whole update runs (Horovod, MG-WFBP). The step markers (StartForward, StartBackward,
// StartUpdate) are called every step; StartUpdate comes right after backward in both modes.
//
// Sleeps follow a virtual compute clock: each sleep ends at the previous end plus its duration,
// so oversleeping does not accumulate; the clock moves to the present only after a wait that
// blocked (the stream stalled on communication) and at each forward.
//
// The run: warm-up steps until the plan is adopted on every rank (OVERLAP_PLANNER=observed:
// until a plan is frozen, Stats().plans_frozen > 0; any other planner: Stats().plan_adopted_step
// >= 0) and has stayed unchanged for --settle-steps steps (no re-plan, no drop), agreed through a
// MIN allreduce through overlap, waited for a step later, so that every rank stops at the same
// step; it gives up after --max-warmup-steps. Then --steps measured steps; "plan_held" in the
// output says whether the plan stayed in force, unchanged, on every rank throughout them. step_ms
// is the median over the measured steps of the slowest rank's time between consecutive StartForward
// calls. Rank 0 prints one JSON line (fields in docs/benchmarks.md).
//
// Scaling (docs/benchmarks.md, "Emulated models on the namespace cluster"). The reference is N =
// --ref-workers (16) workers on links of R_ref = --ref-rate (10 Gbit/s), where communication
// over computation is c_ref = 2(N-1)/N x B / R_ref / C, with B the profile's gradient bytes and
// C its forward + backward + update. Here n ranks on links of R = --link-rate, with time scale
// ts and bytes scale s, have c = 2(n-1)/n x s B / R / (ts C). Equal ratios give
//
//   s = ts x [2(N-1)/N] / [2(n-1)/n] x R / R_ref
//
// (N = 16, n = 4, R_ref = 10 Gbit/s: s = ts x R / (1 GB/s); at R = 1 Gbit/s, s = ts / 8).
// That is --bytes-scale's default. --time-scale defaults to the value that makes the
// ideal step max(ts C, 2(n-1)/n s B / R) = ts x max(C, 2(N-1)/N B / R_ref) equal --target-step-ms.
#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/job.h"
#include "runtime/overlap.h"
#include "scheduler/builtin.h"
#include "scheduler/profile.h"

namespace overlap {
namespace bench {
namespace {

struct StepOptions {
  std::string model = "resnet50";
  std::string profile_path;  // a profile JSON file instead of a bundled model
  int steps = 20;            // measured steps
  int settle_steps = 3;      // steps the adopted plan must hold before measuring
  int max_warmup_steps = 60;
  double time_scale = 0;   // 0: from target_step_ms
  double bytes_scale = 0;  // 0: from the scaling formula
  double target_step_ms = 1000;
  std::string link_rate = "1gbit";
  double link_bytes_per_s = 1.25e8;
  int ref_workers = 16;
  double ref_bytes_per_s = 1.25e9;  // 10 Gbit/s
  bool trace = false;               // rank 0 prints the runtime's plan state after every step
  int straggler_rank = -1;          // --straggler: this rank's backward is slower
  double straggler_fraction = 0;    // by this fraction
  int hiccup_rank = -1;             // --hiccups
};

// Every failure ends the whole job: a rank that stopped would leave the others waiting.
constexpr char kProgram[] = "bench/model_step";

[[noreturn]] void Die(const std::string& message) { AbortJob(kProgram, message); }
void Check(const absl::Status& status) { CheckOrAbort(kProgram, status); }

// A tc-style rate ("1gbit", "500mbit", "800kbit", "1000000bit" or plain bits/s) in bytes/s.
absl::StatusOr<double> ParseRate(const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  const size_t digits = lower.find_first_not_of("0123456789.");
  const std::string number = lower.substr(0, digits);
  const std::string unit = digits == std::string::npos ? "" : lower.substr(digits);
  double value = 0;
  double multiplier = 0;
  if (unit.empty() || unit == "bit") multiplier = 1;
  if (unit == "kbit") multiplier = 1e3;
  if (unit == "mbit") multiplier = 1e6;
  if (unit == "gbit") multiplier = 1e9;
  if (!absl::SimpleAtod(number, &value) || value <= 0 || multiplier == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a rate like 1gbit, 500mbit or 800kbit"));
  }
  return value * multiplier / 8;
}

absl::StatusOr<StepOptions> ParseFlags(int argc, char** argv) {
  StepOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat("flag ", arg, " needs a value"));
      return std::string(argv[++i]);
    };
    auto next_int = [&](int min, int* out) -> absl::Status {
      absl::StatusOr<std::string> v = next();
      if (!v.ok() || !absl::SimpleAtoi(*v, out) || *out < min) {
        return absl::InvalidArgumentError(absl::StrCat("flag ", arg, " needs an integer >= ", min));
      }
      return absl::OkStatus();
    };
    auto next_positive = [&](double* out) -> absl::Status {
      absl::StatusOr<std::string> v = next();
      if (!v.ok() || !absl::SimpleAtod(*v, out) || !(*out > 0) || !std::isfinite(*out)) {
        return absl::InvalidArgumentError(absl::StrCat("flag ", arg, " needs a number > 0"));
      }
      return absl::OkStatus();
    };
    auto next_rate = [&](double* out, std::string* text) -> absl::Status {
      absl::StatusOr<std::string> v = next();
      if (!v.ok()) return v.status();
      absl::StatusOr<double> rate = ParseRate(*v);
      if (!rate.ok())
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", arg, ": ", rate.status().message()));
      *out = *rate;
      if (text != nullptr) *text = *v;
      return absl::OkStatus();
    };
    absl::Status status;
    if (arg == "--model" || arg == "--profile") {
      absl::StatusOr<std::string> v = next();
      status = v.status();
      if (v.ok()) (arg == "--model" ? options.model : options.profile_path) = *v;
    } else if (arg == "--trace") {
      options.trace = true;
    } else if (arg == "--steps") {
      status = next_int(1, &options.steps);
    } else if (arg == "--settle-steps") {
      status = next_int(0, &options.settle_steps);
    } else if (arg == "--max-warmup-steps") {
      status = next_int(1, &options.max_warmup_steps);
    } else if (arg == "--time-scale") {
      status = next_positive(&options.time_scale);
    } else if (arg == "--bytes-scale") {
      status = next_positive(&options.bytes_scale);
    } else if (arg == "--target-step-ms") {
      status = next_positive(&options.target_step_ms);
    } else if (arg == "--link-rate") {
      status = next_rate(&options.link_bytes_per_s, &options.link_rate);
    } else if (arg == "--ref-rate") {
      status = next_rate(&options.ref_bytes_per_s, nullptr);
    } else if (arg == "--ref-workers") {
      status = next_int(2, &options.ref_workers);
    } else if (arg == "--straggler") {
      absl::StatusOr<std::string> v = next();
      const size_t colon = v.ok() ? v->find(':') : std::string::npos;
      if (colon == std::string::npos ||
          !absl::SimpleAtoi(v->substr(0, colon), &options.straggler_rank) ||
          options.straggler_rank < 0 ||
          !absl::SimpleAtod(v->substr(colon + 1), &options.straggler_fraction) ||
          !(options.straggler_fraction > 0) || options.straggler_fraction > 10) {
        status = absl::InvalidArgumentError(
            "flag --straggler needs RANK:FRACTION, e.g. 2:0.3 (rank 2's backward 30% slower)");
      }
    } else if (arg == "--hiccups") {
      status = next_int(0, &options.hiccup_rank);
    } else {
      status = absl::InvalidArgumentError(absl::StrCat(
          "unknown argument ", argv[i],
          " (flags: --model NAME | --profile FILE, --steps N, --settle-steps N, "
          "--max-warmup-steps N, --time-scale X, --bytes-scale X, --target-step-ms MS, "
          "--link-rate RATE, --ref-workers N, --ref-rate RATE, --straggler RANK:FRACTION, "
          "--hiccups RANK, --trace)"));
    }
    if (!status.ok()) {
      return status;
    }
  }
  return options;
}

// Bytes each rank sends (and receives) in a ring allreduce, per byte of the tensor: 2(n-1)/n.
double RingFactor(int ranks) { return ranks > 1 ? 2.0 * (ranks - 1) / ranks : 0.0; }

struct Scaling {
  double time_scale = 1;
  double bytes_scale = 1;
  double backward_factor = 1;  // this rank's backward times this (--straggler)
  bool hiccups = false;        // this rank pauses once per backward (--hiccups)
};

// The formula in the header comment: same communication/computation ratio as the reference.
Scaling ChooseScaling(const StepOptions& options, const sched::Profile& profile, int ranks) {
  const double ref_comm_ms =
      RingFactor(options.ref_workers) * profile.total_bytes / options.ref_bytes_per_s * 1e3;
  Scaling scaling;
  scaling.time_scale = options.time_scale > 0
                           ? options.time_scale
                           : options.target_step_ms / std::max(profile.compute_ms(), ref_comm_ms);
  const double ring_ratio = ranks > 1 ? RingFactor(options.ref_workers) / RingFactor(ranks) : 1.0;
  scaling.bytes_scale =
      options.bytes_scale > 0
          ? options.bytes_scale
          : scaling.time_scale * ring_ratio * options.link_bytes_per_s / options.ref_bytes_per_s;
  return scaling;
}

// Sleeps on a virtual clock: a run of sleeps ends at the sum of their durations, whatever each
// one overslept. Sync() moves the clock to now when the stream really stalled.
class ComputeClock {
 public:
  void Sync() { t_ = std::max(t_, absl::Now()); }
  void Run(double ms) {
    if (ms <= 0) return;
    t_ += absl::Microseconds(ms * 1e3);
    const absl::Duration left = t_ - absl::Now();
    if (left > absl::ZeroDuration()) absl::SleepFor(left);
  }

 private:
  absl::Time t_ = absl::InfinitePast();
};

// The emulated model: the profile, scaled durations, gradient buffers and their handles.
class EmulatedModel {
 public:
  EmulatedModel(sched::Profile profile, Scaling scaling)
      : profile_(std::move(profile)), scaling_(scaling) {
    const float start = static_cast<float>(Rank() + 1);
    for (const sched::TensorInfo& t : profile_.tensors) {
      const double elements = static_cast<double>(t.bytes) / DataTypeSize(t.dtype);
      const int64_t count = std::max<int64_t>(1, std::llround(elements * scaling_.bytes_scale));
      grads_.emplace_back(count, start);
      outputs_.emplace_back(count, 0.0f);
      bytes_ += count * static_cast<int64_t>(sizeof(float));
    }
    handles_.resize(grads_.size());
    updated_.assign(grads_.size(), true);
    pending_.assign(grads_.size(), false);
    for (const sched::LayerInfo& layer : profile_.layers) {
      int64_t layer_bytes = 0;
      for (int t : layer.tensors) layer_bytes += profile_.tensors[t].bytes;
      layer_update_ms_.push_back(profile_.update_ms * layer_bytes / profile_.total_bytes);
    }
  }

  const sched::Profile& profile() const { return profile_; }
  int64_t bytes() const { return bytes_; }
  size_t tensors() const { return grads_.size(); }
  double compute_ms() const { return profile_.compute_ms() * scaling_.time_scale; }

  // One training step; returns when it started (its StartForward). `global_update`: wait for
  // every gradient after backward and run the whole update there, else layer by layer.
  absl::Time Step(bool global_update) {
    const absl::Time start = absl::Now();
    Check(StartForward());
    clock_.Sync();
    const double ts = scaling_.time_scale;
    for (size_t l = 0; l < profile_.layers.size(); ++l) {
      for (int t : profile_.layers[l].tensors) WaitFor(t);
      if (update_owed_) clock_.Run(layer_update_ms_[l] * ts);
      clock_.Run(profile_.layers[l].forward_ms * ts);
    }
    Check(StartBackward());
    // Where this step's hiccup falls, and how long it is; drawn on every rank alike.
    const size_t hiccup_layer = hiccup_rng_() % profile_.layers.size();
    const double hiccup_ms = 50.0 + static_cast<double>(hiccup_rng_() % 151);
    for (size_t l = profile_.layers.size(); l-- > 0;) {
      clock_.Run(profile_.layers[l].backward_ms * ts * scaling_.backward_factor);
      if (scaling_.hiccups && l == hiccup_layer) clock_.Run(hiccup_ms);
      for (int t : profile_.layers[l].tensors) Submit(t);
    }
    Check(StartUpdate());
    if (global_update) {
      WaitForAll();
      clock_.Run(profile_.update_ms * ts);
    }
    update_owed_ = !global_update;
    return start;
  }

  void WaitForAll() {
    for (size_t t = 0; t < grads_.size(); ++t) WaitFor(static_cast<int>(t));
  }

  // Every rank submits rank + 1 in every element at every step, so each result must be the
  // average (n + 1) / 2 exactly; a fast wrong answer is not a result. Under a delayed plan
  // (deft with staleness > 0) each slice of a result with an update holds k steps' averages,
  // k (n + 1) / 2 for a whole k in 0..64 (its residual of skipped steps, or nothing due for that
  // slice this step), and a result without an update is zeros.
  void Verify(bool delayed_plan) const {
    const float want = (Size() + 1) / 2.0f;
    for (size_t t = 0; t < outputs_.size(); ++t) {
      const std::vector<float>& g = outputs_[t];
      for (size_t i : {size_t{0}, g.size() / 2, g.size() - 1}) {
        const float steps = g[i] / want;
        const bool whole = steps == std::floor(steps) && steps >= 0 && steps <= 64;
        const bool right = !delayed_plan ? g[i] == want : updated_[t] ? whole : g[i] == 0.0f;
        if (!right) {
          Die(absl::StrCat("gradient '", profile_.tensors[t].name, "' holds ", g[i], " at element ",
                           i,
                           !delayed_plan ? ", expected the average "
                           : updated_[t] ? ", expected a whole multiple of the average "
                                         : ", expected zeros (no update this step), not ",
                           want));
        }
      }
    }
  }

 private:
  void Submit(int t) {
    std::vector<float>& g = grads_[t];
    const int64_t n = static_cast<int64_t>(g.size());
    AllreduceOptions gradient;  // a delayed plan may deliver it late
    gradient.plan_may_delay = true;
    absl::StatusOr<Handle> handle = Allreduce(profile_.tensors[t].name, MakeTensor(g.data(), {n}),
                                              MakeTensor(outputs_[t].data(), {n}), gradient);
    if (!handle.ok()) Die(handle.status().ToString());
    handles_[t] = *handle;
    pending_[t] = true;
  }

  void WaitFor(int t) {
    if (!pending_[t]) return;
    const bool stalled = !handles_[t].Poll();
    Check(handles_[t].Wait());
    updated_[t] = handles_[t].has_update();
    pending_[t] = false;
    if (stalled) clock_.Sync();
  }

  const sched::Profile profile_;
  const Scaling scaling_;
  std::vector<std::vector<float>> grads_;    // per profile tensor
  std::vector<std::vector<float>> outputs_;  // the averaged gradients, per profile tensor
  std::vector<Handle> handles_;
  std::vector<bool> pending_;
  std::vector<bool> updated_;            // the last result held an update (has_update())
  std::vector<double> layer_update_ms_;  // unscaled
  int64_t bytes_ = 0;
  bool update_owed_ = false;  // the last step's update runs layer by layer in this forward
  ComputeClock clock_;
  std::mt19937 hiccup_rng_{20261202};
};

std::string PlannerName() {
  const char* env = std::getenv("OVERLAP_PLANNER");
  return env == nullptr || *env == '\0' ? "observed" : env;
}

// OVERLAP_MAX_PERIOD, 1 when unset.
int MaxPeriod() {
  const char* period = std::getenv("OVERLAP_MAX_PERIOD");
  return period == nullptr ? 1 : std::max(1, std::atoi(period));
}

// The planner as the JSON line names it: deft with staleness bound N > 0 is "deft-sN".
// deft's staleness bound (OVERLAP_STALENESS); 0 for the other planners.
int Staleness() {
  const char* staleness = std::getenv("OVERLAP_STALENESS");
  if (PlannerName() != "deft" || staleness == nullptr) return 0;
  return std::max(0, std::atoi(staleness));
}

// OVERLAP_COMPRESSION, "none" when unset.
std::string Compression() {
  const char* compression = std::getenv("OVERLAP_COMPRESSION");
  return compression == nullptr || *compression == '\0' ? "none" : compression;
}

// OVERLAP_TWO_STAGE as set (the runtime's default, "auto", when unset).
std::string TwoStage() {
  const char* two_stage = std::getenv("OVERLAP_TWO_STAGE");
  return two_stage == nullptr || *two_stage == '\0' ? "auto" : two_stage;
}

// "deft-s1", and "+fp16" after it under OVERLAP_COMPRESSION=fp16.
std::string PlannerLabel() {
  std::string label = PlannerName();
  if (Staleness() > 0) absl::StrAppend(&label, "-s", Staleness());
  if (Compression() != "none") absl::StrAppend(&label, "+", Compression());
  return label;
}

// A scheduled plan has buckets; none is in force before adoption, after a drop, or where auto
// kept the observed plan ("auto:observed").
bool ScheduledPlanInForce(const RuntimeStats& stats) { return stats.plan_buckets > 0; }

// The scheduler settled on a plan: one it adopted, or auto's verdict to keep the observed plan
// (a dropped plan clears the planner's name).
bool Adopted(const std::string& planner, const RuntimeStats& stats) {
  if (planner == "observed") return stats.plans_frozen > 0;
  return !stats.planner.empty() && stats.plan_adopted_step >= 0;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::string JsonNumber(double value, bool present, int digits = 3) {
  return present && std::isfinite(value) ? absl::StrFormat("%.*f", digits, value) : "null";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// What identifies the plan in force; a change means the runtime adopted, re-planned or dropped.
struct PlanSignature {
  std::string planner;
  int64_t adopted_step = -1, scheduled = 0, frozen = 0, dropped = 0;
  explicit PlanSignature(const RuntimeStats& s)
      : planner(s.planner),
        adopted_step(s.plan_adopted_step),
        scheduled(s.plans_scheduled),
        frozen(s.plans_frozen),
        dropped(s.plans_dropped) {}
  bool operator==(const PlanSignature& o) const {
    return planner == o.planner && adopted_step == o.adopted_step && scheduled == o.scheduled &&
           frozen == o.frozen && dropped == o.dropped;
  }
};

bool GlobalUpdate(const RuntimeStats& stats) {
  return ScheduledPlanInForce(stats) && !stats.plan_layerwise_update;
}

// --trace: one line per step on rank 0, for seeing what the runtime did when.
void TraceStep(const StepOptions& options, const char* phase, int step, absl::Time start,
               bool global_update) {
  if (!options.trace || Rank() != 0) return;
  const RuntimeStats s = Stats();
  std::fprintf(stderr,
               "model_step: %s step %d (runtime step %lld): %.1f ms, update %s; planner '%s' "
               "adopted at %lld, %lld buckets, predicted %.1f ms, scheduled %lld, frozen %lld, "
               "dropped %lld, refused %lld\n",
               phase, step, static_cast<long long>(s.steps),
               absl::ToDoubleMilliseconds(absl::Now() - start),
               global_update ? "global" : "layerwise", s.planner.c_str(),
               static_cast<long long>(s.plan_adopted_step), static_cast<long long>(s.plan_buckets),
               s.predicted_step_ms, static_cast<long long>(s.plans_scheduled),
               static_cast<long long>(s.plans_frozen), static_cast<long long>(s.plans_dropped),
               static_cast<long long>(s.plans_refused));
}

// A MIN over ranks of one int per step, through overlap itself, waited for one step later so that
// no step waits for the others. (A raw MPI_Iallreduce here would run whichever libnbc algorithm
// the runtime selected last on this rank, which can differ between ranks: docs/architecture.md,
// "Open MPI tuning".) The measured steps keep submitting it after the warm-up: the observed plan
// learned during the warm-up holds it, and a plan tensor that stops coming leaves the plan blocked
// until its patience (a second) runs out and the plan is dropped and learned again.
class StepVote {
 public:
  // Waits for the previous step's vote; returns its minimum over ranks (-1 before the first).
  int32_t Collect() {
    if (!pending_.has_value()) return -1;
    Check(pending_->Wait(absl::Seconds(300)));
    pending_.reset();
    return value_;
  }
  void Submit(int32_t value) {
    value_ = value;
    const Tensor t = MakeTensor(&value_, {1});
    AllreduceOptions min;
    min.op = ReduceOp::kMin;
    absl::StatusOr<Handle> h = Allreduce("model_step.settled", t, t, min);
    Check(h.status());
    pending_ = *h;
  }

 private:
  std::optional<Handle> pending_;
  int32_t value_ = 0;  // in flight while pending_ is set
};

// Warm-up until every rank has had the plan in force, unchanged, for settle_steps steps (a
// runtime may re-plan once it measures steps under its first plan), every rank leaving after the
// same step. Returns false after max_warmup_steps.
bool WarmUp(EmulatedModel& model, const std::string& planner, const StepOptions& options,
            StepVote& vote, int* steps_run) {
  PlanSignature last(Stats());
  int unchanged = 0;  // steps the signature has held
  for (int step = 0; step < options.max_warmup_steps; ++step) {
    const bool global_update = GlobalUpdate(Stats());
    const absl::Time start = model.Step(global_update);
    TraceStep(options, "warm-up", step, start, global_update);
    *steps_run = step + 1;
    const bool settled_before = vote.Collect() == 1;
    const RuntimeStats stats = Stats();
    const PlanSignature now(stats);
    unchanged = now == last ? unchanged + 1 : 0;
    last = now;
    const bool settled =
        Adopted(planner, stats) && !stats.plan_trials_pending && unchanged >= options.settle_steps;
    // Submitted even on the way out, as every measured step does, so the plan's step stays.
    vote.Submit(settled ? 1 : 0);
    if (settled_before) return true;
  }
  vote.Collect();
  return false;
}

int Main(int argc, char** argv) {
  // The runtime's threads and this thread's own MPI calls run concurrently.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    Die("MPI does not provide MPI_THREAD_MULTIPLE");
  }
  absl::StatusOr<StepOptions> options = ParseFlags(argc, argv);
  if (!options.ok()) {
    Die(std::string(options.status().message()));
  }
  absl::StatusOr<sched::Profile> profile = options->profile_path.empty()
                                               ? sched::LoadBuiltinProfile(options->model)
                                               : sched::LoadProfileJson(options->profile_path);
  if (!profile.ok()) {
    Die(std::string(profile.status().message()));
  }
  Check(Init());
  const std::string planner = PlannerName();
  const int n = Size();
  Scaling scaling = ChooseScaling(*options, *profile, n);
  if (Rank() == options->straggler_rank) scaling.backward_factor += options->straggler_fraction;
  scaling.hiccups = Rank() == options->hiccup_rank;
  EmulatedModel model(*profile, scaling);
  const double comm_bound_ms = RingFactor(n) * model.bytes() / options->link_bytes_per_s * 1e3;
  const double ideal_ms = std::max(model.compute_ms(), comm_bound_ms);
  // What a synchronous plan can reach at best (sched::SynchronousBoundMs on the scaled profile,
  // the ring bound as the link's time): ideal_ms plus the compute that no synchronous schedule
  // overlaps. Still a lower bound on tbf-capped links: the nominal rate also carries every
  // frame's headers (1514 bytes on the wire per 1448 of payload), which outweighs what tbf's burst
  // gives back after the link idled once a step's traffic takes over ~230 ms at 1 Gbit/s.
  const double sync_bound_ms =
      sched::SynchronousBoundMs(model.profile(), comm_bound_ms / scaling.time_scale) *
      scaling.time_scale;
  if (Rank() == 0) {
    std::fprintf(stderr,
                 "model_step: %s, %d ranks, planner %s: time scale %.4g, bytes scale %.4g "
                 "(%zu tensors, %.1f MB); compute %.1f ms/step, ring bound %.1f ms at %s; ideal "
                 "%.1f ms; synchronous bound %.1f ms\n",
                 model.profile().model.c_str(), n, planner.c_str(), scaling.time_scale,
                 scaling.bytes_scale, model.tensors(), model.bytes() / 1e6, model.compute_ms(),
                 comm_bound_ms, options->link_rate.c_str(), ideal_ms, sync_bound_ms);
  }

  int warmup_steps = 0;
  StepVote vote;
  if (!WarmUp(model, planner, *options, vote, &warmup_steps)) {
    model.WaitForAll();
    const RuntimeStats stats = Stats();
    if (Rank() == 0) {
      std::fprintf(
          stderr,
          "bench/model_step: planner '%s' put no plan in force on every rank within %d "
          "steps (--max-warmup-steps); rank 0: planner '%s', plan_adopted_step %lld, "
          "plans_frozen %lld, plans_scheduled %lld, plans_refused %lld, plans_dropped "
          "%lld, steps %lld. Check OVERLAP_PLANNER and that this runtime implements "
          "the planner.\n",
          planner.c_str(), options->max_warmup_steps, stats.planner.c_str(),
          static_cast<long long>(stats.plan_adopted_step),
          static_cast<long long>(stats.plans_frozen), static_cast<long long>(stats.plans_scheduled),
          static_cast<long long>(stats.plans_refused), static_cast<long long>(stats.plans_dropped),
          static_cast<long long>(stats.steps));
    }
    return FinishJob(kProgram, 3);
  }

  // Measured: steps + 1 forward starts bound `steps` step times. plan_held: the plan in force
  // and the update semantics stayed the same on every rank throughout.
  std::vector<double> starts;
  const RuntimeStats at_start = Stats();
  const PlanSignature signature(at_start);
  const bool global_update = GlobalUpdate(at_start);
  int held = 1;
  for (int step = 0; step <= options->steps; ++step) {
    const RuntimeStats now = Stats();
    if (!(PlanSignature(now) == signature) || GlobalUpdate(now) != global_update) held = 0;
    const absl::Time start = model.Step(GlobalUpdate(now));
    TraceStep(*options, "measured", step, start, GlobalUpdate(now));
    starts.push_back(absl::ToUnixMicros(start) / 1e3);
    vote.Collect();
    vote.Submit(1);
  }
  vote.Collect();
  model.WaitForAll();
  const RuntimeStats stats = Stats();
  if (!(PlanSignature(stats) == signature)) held = 0;
  int plan_held = 0;
  MPI_Allreduce(&held, &plan_held, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  // Delays and update periods are not bound by sync_bound_ms.
  const bool synchronous = Staleness() == 0 && MaxPeriod() <= 1;
  if (Compression() == "none") model.Verify(/*delayed_plan=*/!synchronous);

  std::vector<double> local(options->steps);
  for (int i = 0; i < options->steps; ++i) local[i] = starts[i + 1] - starts[i];
  std::vector<double> slowest(options->steps);
  MPI_Allreduce(local.data(), slowest.data(), options->steps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double step_ms = Median(slowest);
  const double mean_ms =
      std::accumulate(slowest.begin(), slowest.end(), 0.0) / static_cast<double>(slowest.size());
  // The simulator predicts the mean step over whole update cycles (scheduler/simulator.h): under
  // update periods short and long steps alternate, and a median step is one of the two. The
  // prediction is compared with the median, over the measured steps, of the mean of each window
  // of one cycle: the median step for a plan without periods, and as robust as it to a stalled
  // step otherwise.
  const size_t cycle = static_cast<size_t>(
      std::clamp<int64_t>(stats.plan_update_cycle, 1, static_cast<int64_t>(slowest.size())));
  std::vector<double> cycle_means;
  for (size_t i = 0; i + cycle <= slowest.size(); ++i) {
    cycle_means.push_back(std::accumulate(slowest.begin() + static_cast<ptrdiff_t>(i),
                                          slowest.begin() + static_cast<ptrdiff_t>(i + cycle),
                                          0.0) /
                          static_cast<double>(cycle));
  }
  const double compared_ms = Median(cycle_means);
  const bool scheduled = planner != "observed";
  const double sim_ms = stats.predicted_step_ms;
  const bool has_sim = scheduled && sim_ms > 0;
  if (Rank() == 0 && !plan_held) {
    std::fprintf(stderr,
                 "model_step: warning: the plan changed during the measured steps (re-planned, "
                 "dropped or a new update mode on some rank); rank 0 ends with planner '%s', "
                 "plans_scheduled %lld, plans_dropped %lld\n",
                 stats.planner.c_str(), static_cast<long long>(stats.plans_scheduled),
                 static_cast<long long>(stats.plans_dropped));
  }
  if (Rank() == 0) {
    std::printf(
        "{\"model\":%s,\"planner\":%s,\"step_ms\":%.3f,\"sim_step_ms\":%s,\"sim_error\":%s,"
        "\"update_cycle\":%zu,\"ideal_ms\":%.3f,\"efficiency\":%.4f,\"buckets\":%lld,\"plan\":%s,"
        "\"update\":%s,\"plan_held\":%s,\"ranks\":%d,\"steps\":%d,\"warmup_steps\":%d,"
        "\"adopted_step\":%lld,\"plans_scheduled\":%lld,\"plans_dropped\":%lld,"
        "\"step_ms_min\":%.3f,\"step_ms_max\":%.3f,\"step_ms_mean\":%.3f,\"compute_ms\":%.3f,"
        "\"comm_bound_ms\":%.3f,"
        "\"grad_bytes\":%lld,\"time_scale\":%.6g,\"bytes_scale\":%.6g,\"link_rate\":%s,"
        "\"fitted_alpha_us\":%s,\"fitted_beta_us_per_mb\":%s,\"trials\":%s,"
        "\"sync_bound_ms\":%.3f,\"sync_efficiency\":%s,\"weighted_allreduces\":%lld,"
        "\"link_rates\":%s,\"compression\":%s,\"plan_compressed_buckets\":%lld,"
        "\"two_stage\":%s,\"plan_two_stage_buckets\":%lld,\"fitted_two_stage_beta_us_per_mb\":%s}\n",
        JsonString(model.profile().model).c_str(), JsonString(PlannerLabel()).c_str(), step_ms,
        JsonNumber(sim_ms, has_sim).c_str(),
        JsonNumber((sim_ms - compared_ms) / compared_ms, has_sim, 4).c_str(), cycle, ideal_ms,
        ideal_ms / step_ms, static_cast<long long>(stats.plan_buckets),
        JsonString(stats.planner).c_str(), global_update ? "\"global\"" : "\"layerwise\"",
        plan_held ? "true" : "false", n, options->steps, warmup_steps,
        static_cast<long long>(stats.plan_adopted_step),
        static_cast<long long>(stats.plans_scheduled), static_cast<long long>(stats.plans_dropped),
        *std::min_element(slowest.begin(), slowest.end()),
        *std::max_element(slowest.begin(), slowest.end()), mean_ms, model.compute_ms(),
        comm_bound_ms, static_cast<long long>(model.bytes()), scaling.time_scale,
        scaling.bytes_scale, JsonString(options->link_rate).c_str(),
        JsonNumber(stats.fitted_alpha_us, scheduled).c_str(),
        JsonNumber(stats.fitted_beta_us_per_mb, scheduled).c_str(),
        JsonString(stats.plan_trials).c_str(), sync_bound_ms,
        JsonNumber(sync_bound_ms / step_ms, synchronous, 4).c_str(),
        static_cast<long long>(stats.weighted_allreduces), JsonString(stats.link_rates).c_str(),
        JsonString(Compression()).c_str(), static_cast<long long>(stats.plan_compressed_buckets),
        JsonString(TwoStage()).c_str(), static_cast<long long>(stats.plan_two_stage_buckets),
        JsonNumber(stats.fitted_two_stage_beta_us_per_mb,
                   scheduled && stats.fitted_two_stage_beta_us_per_mb > 0)
            .c_str());
    std::fflush(stdout);
  }
  return FinishJob(kProgram, 0);
}

}  // namespace
}  // namespace bench
}  // namespace overlap

int main(int argc, char** argv) { return overlap::bench::Main(argc, argv); }
