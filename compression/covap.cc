// "covap": see covap.h. The payload is the float32 concatenation of this step's shards, so it
// sums directly in an allreduce (every rank sends the same shards in the same step).
#include "compression/covap.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "compression/compressor_base.h"
#include "compression/factories.h"

namespace overlap {
namespace compress {

absl::StatusOr<int> CovapIntervalForRatio(double comm_compute_ratio) {
  if (!(comm_compute_ratio > 0.0) || !std::isfinite(comm_compute_ratio)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "compressor 'covap': R=auto needs a measured communication/computation ratio, got ",
        comm_compute_ratio, "; profile a few steps first or set R explicitly"));
  }
  // The tolerance keeps a ratio of 2.0000001 (measurement noise) at R = 2.
  const double r = std::ceil(comm_compute_ratio - 1e-6);
  return static_cast<int>(std::clamp(r, 1.0, static_cast<double>(kMaxCovapInterval)));
}

float CovapAlpha(double alpha0, int64_t ramp_steps, int64_t step) {
  if (ramp_steps <= 0 || step >= ramp_steps) return 1.0f;
  return static_cast<float>(alpha0 + (1.0 - alpha0) *
                                         static_cast<double>(std::max<int64_t>(step, 0)) /
                                         static_cast<double>(ramp_steps));
}

namespace {

class CovapCompressor final : public CompressorBase {
 public:
  CovapCompressor(CompressorConfig config, int interval, double alpha0, int64_t ramp_steps,
                  int64_t shard)
      : CompressorBase(std::move(config)),
        interval_(interval),
        alpha0_(alpha0),
        ramp_steps_(ramp_steps),
        shard_(shard) {}

  Combine combine() const override { return Combine::kAllreduce; }
  DataType payload_dtype() const override { return DataType::kFloat32; }

  absl::StatusOr<size_t> MaxPayloadBytes(size_t n) const override {
    const size_t shard = ShardSize(n);
    if (shard == 0) return 0;
    const size_t shards = (n + shard - 1) / shard;
    const size_t most = (shards + interval_ - 1) / interval_;  // phase 0 has the most shards
    return std::min(n, most * shard) * sizeof(float);
  }

  absl::StatusOr<size_t> Compress(absl::Span<const float> grad, ResidualState& state, int64_t step,
                                  absl::Span<uint8_t> payload) const override {
    const size_t bytes = SentElements(grad.size(), step) * sizeof(float);
    if (absl::Status s = CheckCompressArgs(grad.size(), state, payload, bytes); !s.ok()) return s;
    const float alpha = CovapAlpha(alpha0_, ramp_steps_, step);
    absl::Span<float> r = state.residual();
    float* out = reinterpret_cast<float*>(payload.data());
    ForEachShard(grad.size(), step, [&](size_t begin, size_t len, bool sent) {
      if (sent) {
        numeric::SendWithResidual(grad.subspan(begin, len), r.subspan(begin, len), alpha,
                                  absl::MakeSpan(out, len), isa());
        out += len;
      } else {
        numeric::Add(grad.subspan(begin, len), r.subspan(begin, len), isa());
      }
    });
    return bytes;
  }

  absl::Status Decompress(absl::Span<const uint8_t> payload, ResidualState& state, int64_t step,
                          absl::Span<float> out) const override {
    return Decode(payload, state, step, out, /*add=*/false);
  }

  absl::Status DecompressAdd(absl::Span<const uint8_t> payload, const ResidualState& state,
                             int64_t step, absl::Span<float> out) const override {
    return Decode(payload, state, step, out, /*add=*/true);
  }

 private:
  size_t ShardSize(size_t n) const {
    if (shard_ > 0) return static_cast<size_t>(shard_);
    return (n + interval_ - 1) / interval_;
  }

  // f(begin, len, sent) for every shard in order.
  template <typename F>
  void ForEachShard(size_t n, int64_t step, F f) const {
    const size_t shard = ShardSize(n);
    if (shard == 0) return;
    const int64_t phase = step % interval_;
    size_t g = 0;
    for (size_t begin = 0; begin < n; begin += shard, ++g) {
      f(begin, std::min(shard, n - begin),
        (static_cast<int64_t>(g % interval_) + phase) % interval_ == 0);
    }
  }

  size_t SentElements(size_t n, int64_t step) const {
    size_t total = 0;
    ForEachShard(n, step, [&](size_t, size_t len, bool sent) { total += sent ? len : 0; });
    return total;
  }

  absl::Status Decode(absl::Span<const uint8_t> payload, const ResidualState& state, int64_t step,
                      absl::Span<float> out, bool add) const {
    const size_t bytes = SentElements(out.size(), step) * sizeof(float);
    if (absl::Status s = CheckDecompressArgs(out.size(), state, payload, bytes); !s.ok()) return s;
    const float* in = reinterpret_cast<const float*>(payload.data());
    ForEachShard(out.size(), step, [&](size_t begin, size_t len, bool sent) {
      absl::Span<float> dst = out.subspan(begin, len);
      if (sent) {
        if (add) {
          numeric::Add(absl::MakeConstSpan(in, len), dst, isa());
        } else {
          std::copy_n(in, len, dst.data());
        }
        in += len;
      } else if (!add) {
        std::fill(dst.begin(), dst.end(), 0.0f);
      }
    });
    return absl::OkStatus();
  }

  int interval_;
  double alpha0_;
  int64_t ramp_steps_;
  int64_t shard_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Compressor>> MakeCovap(ParamReader& params,
                                                      const CompressorContext& context) {
  int interval;
  if (params.Raw("R").value_or("auto") == "auto") {
    absl::StatusOr<int> derived = CovapIntervalForRatio(context.comm_compute_ratio);
    if (!derived.ok()) return derived.status();
    interval = *derived;
    params.SetCanonical("R", absl::StrCat(interval));
  } else {
    absl::StatusOr<int64_t> r = params.Int("R", 1, 1, 1 << 20);
    if (!r.ok()) return r.status();
    interval = static_cast<int>(*r);
  }
  absl::StatusOr<double> alpha0 = params.Double("alpha0", 0.5, 0.5, 1.0);
  if (!alpha0.ok()) return alpha0.status();
  absl::StatusOr<int64_t> ramp = params.Int("ramp_steps", 0, 0, INT64_MAX);
  if (!ramp.ok()) return ramp.status();
  absl::StatusOr<int64_t> shard = params.Int("shard", 0, 0, int64_t{1} << 40);
  if (!shard.ok()) return shard.status();
  return std::make_unique<CovapCompressor>(params.canonical(), interval, *alpha0, *ramp, *shard);
}

}  // namespace compress
}  // namespace overlap
