// Runtime's measured compression parameters: covap's R=auto (compression/covap.h) takes the
// interval that lets communication hide behind computation, from the ratio of the two measured on
// this job's own steps.
//
// Every rank must compress a tensor with the same parameters, so the ratio is agreed. Once some
// allreduce has asked for covap:R=auto (OVERLAP_COMPRESSION, or its own options), at the same
// forward markers on every rank (the first after OVERLAP_PLAN_AFTER_STEPS + OVERLAP_PROFILE_STEPS
// + 2 steps, then every OVERLAP_PROFILE_STEPS + 1 until it is known), each rank measures the
// network's busy time per step (runtime/plan/comm_meter.h) over its compute time (the step profiler's
// median windows), and one allreduce takes the largest. Allreduces submitted after the marker on
// every rank use it; those before ran with R=1, exact and uncompressed, so the measurement sees
// the full communication. Every rank runs the same program, so every rank has submitted its first
// such allreduce before the same marker; a rank that has not (a program that compresses on some
// ranks only) leaves the others' agreement to fail by the stall timeout, naming
// 'overlap.comm_compute_ratio'.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/covap.h"
#include "runtime/api/runtime.h"
#include "spdlog/spdlog.h"

namespace overlap {
namespace {

// Before the ratio is agreed: so small a ratio that covap's R is 1.
constexpr double kUnmeasuredRatio = 1e-9;
// Tries without a measured ratio on any rank before a warning says why.
constexpr int kTriesBeforeWarning = 3;

}  // namespace

absl::StatusOr<std::string> Runtime::ResolveDerived(const std::string& canonical) {
  measures_comm_ratio_.store(true);
  const double ratio = agreed_comm_ratio_.load();
  return CompressionStage::Resolve(canonical,
                                   compress::CompressorContext{ratio > 0 ? ratio : kUnmeasuredRatio});
}

absl::Status Runtime::AgreeCommRatio(int64_t step) {
  if (agreed_comm_ratio_.load() > 0 || step < next_ratio_step_) return absl::OkStatus();
  next_ratio_step_ = step + config_.profile_steps + 1;
  ++ratio_attempts_;
  const double compute_ms =
      profiler_->steady_steps() >= config_.profile_steps ? profiler_->median_step_ms() : 0;
  const double comm_ms = comm_meter_->busy_ms_per_step();
  double ratio = compute_ms > 0 ? comm_ms / compute_ms : 0;
  AllreduceOptions options;
  options.op = ReduceOp::kMax;
  options.compression = "none";
  Tensor tensor = MakeTensor(&ratio, {1});
  absl::StatusOr<Handle> handle =
      Enqueue(AllreduceOp("overlap.comm_compute_ratio", tensor, tensor, options), nullptr);
  absl::Status s =
      handle.ok()
          ? handle->Wait(absl::Seconds(config_.stall_timeout_s + config_.collective_timeout_s))
          : handle.status();
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("rank ", rank_, ": step ", step,
                                               ": agreeing on the communication/computation "
                                               "ratio (OVERLAP_COMPRESSION=",
                                               config_.compression, "): ", s.message()));
  }
  if (ratio <= 0) {
    if (ratio_attempts_ == kTriesBeforeWarning && rank_ == 0) {
      spdlog::warn(
          "overlap: rank {}: step {}: OVERLAP_COMPRESSION={} needs the measured "
          "communication/computation ratio, and no rank has measured one yet (it needs the step "
          "markers: overlap::StartForward/StartBackward/StartUpdate, or the adapters' "
          "DistributedOptimizer); until then every step runs uncompressed",
          rank_, step, config_.compression);
    }
    return absl::OkStatus();
  }
  agreed_comm_ratio_.store(ratio);
  absl::StatusOr<int> interval = compress::CovapIntervalForRatio(ratio);
  spdlog::info(
      "overlap: rank {}: step {}: measured communication/computation ratio {:.2f} (the largest "
      "of every rank's; here {:.1f} ms of network per {:.1f} ms of compute): covap's R=auto is "
      "{} from now on",
      rank_, step, ratio, comm_ms, compute_ms, interval.ok() ? *interval : 0);
  return absl::OkStatus();
}

}  // namespace overlap
