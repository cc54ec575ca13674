// PlanScheduler's link cost (runtime/plan/plan_scheduler.h): the collectives training ran, agreed
// across ranks, and short probes of the links, fitted into the cost model the planners plan with
// (sched::FitLinkCost); a fit that still describes the collectives measured since is kept.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "collectives/mpi_executor.h"
#include "collectives/mpi_wait.h"
#include "runtime/plan/plan_scheduler.h"
#include "runtime/plan/plan_test_hooks.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// The probe: a few sizes, each timed several times after a warm-up, on a quiet network.
constexpr int64_t kProbeSizes[] = {int64_t{4} << 10, int64_t{256} << 10, int64_t{1} << 20,
                                   int64_t{4} << 20, int64_t{16} << 20};
// Always probed, whatever training ran: a least-squares intercept through the training
// collectives is noise (bert-base's 25 MB buckets, and vgg16's small ones timed on the rank that
// started last, fitted a latency of 0, and the planners then cut 100-250 buckets that each paid
// 1-8 ms); the median 4 KiB allreduce floors it (sched::FitLinkCost).
constexpr int64_t kLatencySizes[] = {int64_t{4} << 10, int64_t{64} << 10};
// Reduce-scatter and allgather probes (dear, auto): sizes the ring reduce-scatter runs
// (MpiExecutor::kRingReduceScatterBytes and up), as DeAR's buckets are.
constexpr int64_t kHalvesSizes[] = {int64_t{64} << 10, int64_t{512} << 10, int64_t{2} << 20};
// Two-stage allreduces, where the probe executor offers them (ranks sharing hosts): from the
// size the hierarchical allreduce is worth trying at (MpiExecutor::kHierarchicalMinBytes) up,
// the smallest floors the line's intercept as the 4 KiB allreduce floors the flat one's.
constexpr int64_t kTwoStageSizes[] = {int64_t{64} << 10, int64_t{1} << 20, int64_t{4} << 20,
                                      int64_t{16} << 20};
// Always probed too, back to back: the link's sustained per-byte cost floors the fitted one
// (sched::FitLinkCost). Training collectives timed on the rank that started last ran partly
// before it started (its peers' first chunks were queued on the wire): on the namespace cluster
// they fitted 11.9 ms/MB where raw back-to-back rings sustain 12.5.
constexpr int64_t kSustainedBytes = int64_t{4} << 20;
// No probe is larger than the step's gradient bytes (the largest bucket any plan makes), or
// this when the step is smaller: sizes beyond it tell the fit nothing a plan uses, and they cost
// the most. On the 1.6 MB Fashion-MNIST CNN at 300 Mbit/s (bench/time_to_accuracy.sh) the cap
// cut the probes from 2.0-2.7 s to 1.2-1.9 s per planning; six 16 MiB allreduces, probed when
// training ran fewer than three sizes, would take about 4 s more at that rate.
constexpr int64_t kMinProbeCap = int64_t{1} << 20;
// Timed runs per size: the median of five, or of three from kLargeProbeBytes up, where one run
// lasts long enough that its time varies little and the runs cost the most (on the 1.6 MB
// Fashion-MNIST CNN at 300 Mbit/s, the 1.6 MB allreduces, reduce-scatters and allgathers were
// about 0.7 of the fit's 1.06 s).
constexpr int kProbeRepeats = 5;
constexpr int kLargeProbeRepeats = 3;
constexpr int64_t kLargeProbeBytes = int64_t{1} << 20;
// A fitted link cost is kept for a later planning while the training collectives' median time is
// within this factor of its prediction either way (sched::FitStillHolds). Training collectives,
// timed on the rank that started last, run about 5% under a fit floored by back-to-back probes;
// a link that lost a fifth of its rate or more is probed again.
constexpr double kHeldFitTolerance = 1.25;
// Where a fitted channel's two-stage allreduce is the cheaper form, for the log: "from N bytes",
// "below N bytes", "at every size" or "at no size". It is at m bytes when d_alpha < d_beta x m.
std::string TwoStageFromText(const sched::ChannelCost& c) {
  const double d_alpha = c.two_stage.alpha_s - c.alpha_s;
  const double d_beta = c.beta_s_per_byte - c.two_stage.beta_s_per_byte;
  if (d_beta > 0) {
    if (d_alpha <= 0) return "at every size";
    return absl::StrCat("from ", static_cast<int64_t>(std::ceil(d_alpha / d_beta)), " bytes");
  }
  if (d_alpha >= 0) return "at no size";
  if (d_beta == 0) return "at every size";
  return absl::StrCat("below ", static_cast<int64_t>(std::floor(d_alpha / d_beta)), " bytes");
}

// The latency the fit is floored by, from the smallest allreduce probed first and again after
// the larger probes: the lower of the two medians. On a CPU-bound machine the first can run
// while the training processes compute beside the coordinators (they go on while the links are
// probed): on the time-to-accuracy LM, 4 KiB took 2-11 ms a run in 5 probes of 12 and 0.12-0.5
// ms in the others, and fits of 3-7 ms instead of 0.12-0.28 followed; the simulator then charged
// that to each of usbyte's 30 buckets (236 ms predicted against 127 measured). What such
// contention costs a step is in the step profiler's compute windows, measured under the plan;
// counted in the link too, it would be counted twice.
double QuieterLatency(double first_s, double again_s) { return std::min(first_s, again_s); }

// `sizes` up to `cap`, and `cap` itself in place of the sizes above it.
std::vector<int64_t> SizesUpTo(absl::Span<const int64_t> sizes, int64_t cap) {
  std::vector<int64_t> kept;
  for (int64_t size : sizes) {
    if (size <= cap) kept.push_back(size);
  }
  if (kept.size() < sizes.size() && (kept.empty() || kept.back() < cap)) kept.push_back(cap);
  return kept;
}

}  // namespace

absl::StatusOr<std::vector<sched::CostSample>> PlanScheduler::MeasuredSamples() {
  std::vector<sched::CostSample> local = timings_();
  int count = static_cast<int>(local.size());
  MPI_Request request;
  absl::Status s = Wait(StartIallreduce(MPI_IN_PLACE, &count, 1, MPI_INT, MPI_MIN, comm_, &request),
                        "MPI_Iallreduce", &request, "agreeing on the measured collectives");
  if (!s.ok()) return s;
  local.erase(local.begin(), local.end() - count);
  // Every rank ran the same collectives in the same order; the one that started each last
  // waited for nobody, so the smallest time is the collective's own.
  std::vector<double> seconds(local.size()), bytes(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    seconds[i] = local[i].seconds;
    bytes[i] = local[i].bytes;
  }
  if (count > 0) {
    const int rc =
        StartIallreduce(MPI_IN_PLACE, seconds.data(), count, MPI_DOUBLE, MPI_MIN, comm_, &request);
    s = Wait(rc, "MPI_Iallreduce", &request, "combining the measured collectives");
    if (!s.ok()) return s;
  }
  for (size_t i = 0; i < local.size(); ++i) local[i] = sched::CostSample{bytes[i], seconds[i]};
  return local;
}

void PlanScheduler::AddDeviceBucketCost(sched::CostModel* cost) const {
  if (config_.device_bucket_us <= 0 || !profiler_->saw_device_tensors()) return;
  const double extra = config_.device_bucket_us * 1e-6;
  for (sched::ChannelCost& channel : cost->channels) {
    channel.alpha_s += extra;
    for (sched::LinearTerm* term :
         {&channel.reduce_scatter, &channel.allgather, &channel.two_stage}) {
      if (term->set()) term->alpha_s += extra;
    }
  }
  spdlog::info(
      "overlap: rank {}: the step's gradients are on a GPU: the planners count {:.0f} us more per "
      "bucket (OVERLAP_DEVICE_BUCKET_US)",
      rank_, config_.device_bucket_us);
}

absl::Status PlanScheduler::FitCost(sched::CostModel* cost) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<sched::CostSample>> measured = MeasuredSamples();
  if (!measured.ok()) return measured.status();
  std::vector<sched::CostSample> samples = *std::move(measured);
  // The samples are the same on every rank (MeasuredSamples), and so is last_fit_: every rank
  // takes the same branch, and none starts the probes' collectives alone.
  if (last_fit_.has_value()) {
    const std::optional<double> held = sched::FitStillHolds(samples, *last_fit_, kHeldFitTolerance);
    if (held.has_value()) {
      cost->channels = {*last_fit_};
      spdlog::info(
          "overlap: rank {}: kept the fitted link cost (alpha {:.1f} us, beta {:.3f} us/MB): the "
          "{} collectives measured since took {:.2f} of its prediction (median); nothing probed",
          rank_, last_fit_->alpha_s * 1e6, last_fit_->beta_s_per_byte * 1e12, samples.size(),
          *held);
      absl::MutexLock lock(&mu_);
      ++info_.cost_reuses;
      return absl::OkStatus();
    }
  }
  probes_in_fit_ = 0;
  std::vector<double> sizes;
  for (const sched::CostSample& c : samples) sizes.push_back(c.bytes);
  std::sort(sizes.begin(), sizes.end());
  const size_t distinct = std::unique(sizes.begin(), sizes.end()) - sizes.begin();
  const size_t from_training = samples.size();
  // The largest probe: the step's gradient bytes, the same on every rank (the largest rank's).
  int64_t cap = std::max(profiler_->step_bytes(), kMinProbeCap);
  MPI_Request agree;
  absl::Status agreed =
      Wait(StartIallreduce(MPI_IN_PLACE, &cap, 1, MPI_INT64_T, MPI_MAX, comm_, &agree),
           "MPI_Iallreduce", &agree, "agreeing on the largest probe");
  if (!agreed.ok()) return agreed;
  // The same samples on every rank, so every rank takes the same branch of these collectives.
  // Both probes start with the smallest size, whose time floors the fitted intercept.
  absl::Status probed =
      Probe(SizesUpTo(distinct < 3 ? absl::Span<const int64_t>(kProbeSizes) : kLatencySizes, cap),
            &samples);
  if (!probed.ok()) return probed;
  // A back-to-back probe of kSustainedBytes (or the cap), then the smallest size again: the
  // sustained slope, and the latency measured twice (QuieterLatency).
  std::vector<sched::CostSample> sustained;
  const int64_t sustained_bytes = std::min(kSustainedBytes, cap);
  probed = Probe(absl::Span<const int64_t>(&sustained_bytes, 1), &sustained);
  if (!probed.ok()) return probed;
  std::vector<sched::CostSample> again;
  probed = Probe(absl::Span<const int64_t>(&kLatencySizes[0], 1), &again);
  if (!probed.ok()) return probed;
  const double first_latency_s = samples[from_training].seconds;
  samples[from_training].seconds = QuieterLatency(first_latency_s, again[0].seconds);
  const sched::CostSample smallest = samples[from_training];
  const double min_beta = std::max(
      0.0, (sustained[0].seconds - smallest.seconds) / (sustained[0].bytes - smallest.bytes));
  absl::StatusOr<sched::ChannelCost> fitted =
      sched::FitLinkCost(samples, smallest.seconds, min_beta);
  if (!fitted.ok()) return fitted.status();
  // DeAR's halves get lines of their own: the runtime's reduce-scatter (a ring over
  // point-to-point) and allgather (libnbc's) need not cost half an allreduce each.
  if (config_.planner == "dear" || config_.planner == "auto") {
    for (const auto& [kind, term] :
         {std::pair{CollectiveKind::kReduceScatter, &fitted->reduce_scatter},
          std::pair{CollectiveKind::kAllgatherv, &fitted->allgather}}) {
      std::vector<sched::CostSample> kind_samples;
      absl::Status probed_kind = Probe(SizesUpTo(kHalvesSizes, cap), &kind_samples, kind);
      if (!probed_kind.ok()) return probed_kind;
      absl::StatusOr<sched::ChannelCost> line =
          sched::FitLinkCost(kind_samples, kind_samples.front().seconds);
      if (!line.ok()) return line.status();
      *term = sched::LinearTerm{line->alpha_s, line->beta_s_per_byte};
    }
  }
  // The two-stage allreduce's own line, where ranks share hosts (the same on every rank: the
  // executors split alike). Its samples stay out of the flat fit: the two forms move different
  // bytes through different links.
  if (probe_->offers_two_stage()) {
    std::vector<sched::CostSample> two_stage_samples;
    absl::Status probed_two_stage =
        Probe(SizesUpTo(kTwoStageSizes, std::max(cap, kTwoStageSizes[0])), &two_stage_samples,
              CollectiveKind::kAllreduce, /*two_stage=*/true);
    if (!probed_two_stage.ok()) return probed_two_stage;
    absl::StatusOr<sched::ChannelCost> line =
        sched::FitLinkCost(two_stage_samples, two_stage_samples.front().seconds);
    if (!line.ok()) return line.status();
    fitted->two_stage = sched::LinearTerm{line->alpha_s, line->beta_s_per_byte};
  }
  // Every rank uses rank 0's fit, so that the plan and the prediction agree everywhere.
  double ab[8] = {fitted->alpha_s,
                  fitted->beta_s_per_byte,
                  fitted->reduce_scatter.alpha_s,
                  fitted->reduce_scatter.beta_s_per_byte,
                  fitted->allgather.alpha_s,
                  fitted->allgather.beta_s_per_byte,
                  fitted->two_stage.alpha_s,
                  fitted->two_stage.beta_s_per_byte};
  MPI_Request request;
  absl::Status s = Wait(MPI_Ibcast(ab, 8, MPI_DOUBLE, 0, comm_, &request), "MPI_Ibcast", &request,
                        "broadcasting the fitted link cost");
  if (!s.ok()) return s;
  fitted->alpha_s = ab[0];
  fitted->beta_s_per_byte = ab[1];
  fitted->reduce_scatter = sched::LinearTerm{ab[2], ab[3]};
  fitted->allgather = sched::LinearTerm{ab[4], ab[5]};
  fitted->two_stage = sched::LinearTerm{ab[6], ab[7]};
  fitted->name = "net";
  cost->channels = {*fitted};
  last_fit_ = *fitted;
  spdlog::info(
      "overlap: rank {}: fitted link cost from {} collectives of training and {} probes of up to "
      "{} bytes in {:.0f} ms: alpha {:.1f} us, beta {:.3f} us/MB (sustained, back to back: "
      "{:.3f} us/MB; {} bytes took {:.1f} us, then {:.1f} us)",
      rank_, from_training, samples.size() - from_training + 2, cap,
      absl::ToDoubleMilliseconds(absl::Now() - start), ab[0] * 1e6, ab[1] * 1e12, min_beta * 1e12,
      kLatencySizes[0], first_latency_s * 1e6, again[0].seconds * 1e6);
  if (fitted->reduce_scatter.set()) {
    spdlog::info(
        "overlap: rank {}: fitted reduce-scatter: alpha {:.1f} us, beta {:.3f} us/MB; allgather: "
        "alpha {:.1f} us, beta {:.3f} us/MB (of the full tensor)",
        rank_, ab[2] * 1e6, ab[3] * 1e12, ab[4] * 1e6, ab[5] * 1e12);
  }
  if (fitted->two_stage.set()) {
    spdlog::info(
        "overlap: rank {}: fitted two-stage allreduce (within each host, across hosts, within "
        "each host): alpha {:.1f} us, beta {:.3f} us/MB; it is the cheaper form {}",
        rank_, ab[6] * 1e6, ab[7] * 1e12, TwoStageFromText(*fitted));
  }
  absl::MutexLock lock(&mu_);
  info_.alpha_us = ab[0] * 1e6;
  info_.beta_us_per_mb = ab[1] * 1e12;
  info_.two_stage_alpha_us = fitted->two_stage.set() ? ab[6] * 1e6 : 0;
  info_.two_stage_beta_us_per_mb = fitted->two_stage.set() ? ab[7] * 1e12 : 0;
  ++info_.cost_fits;
  return absl::OkStatus();
}

absl::Status PlanScheduler::Probe(absl::Span<const int64_t> sizes,
                                  std::vector<sched::CostSample>* samples, CollectiveKind kind,
                                  bool two_stage) {
  const PlanTestHooks& hooks = InstalledPlanTestHooks();
  for (int64_t size : sizes) {
    const int probe = probes_in_fit_++;
    // A reduce-scatter's input and an allgather's output hold `size` bytes, in equal shares.
    const int64_t count = size / static_cast<int64_t>(sizeof(float));
    const int64_t share = count / size_;
    std::vector<float> buffer(static_cast<size_t>(count), 1.0f);
    std::vector<float> part(static_cast<size_t>(std::max<int64_t>(share, 1)), 1.0f);
    CollectiveArgs args;
    args.kind = kind;
    args.dtype = DataType::kFloat32;
    args.op = ReduceOp::kSum;
    args.two_stage = two_stage;
    if (kind == CollectiveKind::kAllreduce) {
      args.count = count;
      args.recv = buffer.data();
    } else {
      args.count = share * size_;
      args.recv_counts.assign(static_cast<size_t>(size_), share);
      for (int r = 0; r < size_; ++r) args.recv_displs.push_back(r * share);
      const bool scatter = kind == CollectiveKind::kReduceScatter;
      args.send = scatter ? buffer.data() : part.data();
      args.recv = scatter ? part.data() : buffer.data();
    }
    // An untimed first run of each kind on this executor (connections, libnbc's schedules); the
    // same sizes and kinds on every rank, so every rank runs the same number of collectives.
    const size_t slot = two_stage ? kTwoStageWarmSlot : static_cast<size_t>(kind);
    const bool warm_up = !probe_warmed_[slot];
    probe_warmed_[slot] = true;
    const int repeats = size >= kLargeProbeBytes ? kLargeProbeRepeats : kProbeRepeats;
    std::vector<double> times;
    for (int repeat = warm_up ? 0 : 1; repeat <= repeats; ++repeat) {
      const absl::Time start = absl::Now();
      absl::StatusOr<std::unique_ptr<Work>> work = probe_->Start(0, args);
      if (!work.ok()) return work.status();
      while (true) {
        absl::StatusOr<bool> finished = (*work)->Test();
        if (!finished.ok()) return finished.status();
        if (*finished) break;
        sched_yield();  // ranks may outnumber cores: let the peers run
        if (absl::Now() - start > absl::Seconds(config_.collective_timeout_s)) {
          return absl::DeadlineExceededError(
              absl::StrCat("rank ", rank_, ": the link probe (", CollectiveKindName(kind),
                           ") did not complete within ", config_.collective_timeout_s,
                           " s (OVERLAP_COLLECTIVE_TIMEOUT_S)"));
        }
      }
      if (hooks.probe_stall_s != nullptr && repeat > 0) {
        absl::SleepFor(absl::Seconds(hooks.probe_stall_s(size, probe)));
      }
      if (repeat > 0) times.push_back(absl::ToDoubleSeconds(absl::Now() - start));  // 0: warm-up
    }
    if (spdlog::should_log(spdlog::level::debug)) {
      std::vector<std::string> runs;
      for (double t : times) runs.push_back(absl::StrFormat("%.3f", t * 1e3));
      spdlog::debug("overlap: rank {}: probe {} of {} bytes{}: {} ms", rank_,
                    CollectiveKindName(kind), size, two_stage ? " (two-stage)" : "",
                    absl::StrJoin(runs, ", "));
    }
    // The median run: what a collective of this size costs during training, descheduling
    // included on a shared machine (the fastest run made the plans' many small buckets look free).
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    samples->push_back(sched::CostSample{static_cast<double>(size), times[times.size() / 2]});
  }
  return absl::OkStatus();
}

}  // namespace overlap
