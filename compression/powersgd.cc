// "powersgd": rank-r PowerSGD (Vogels et al. 2019) with error feedback and a warm-started Q.
//
// The n elements of v = grad + residual are laid out row-major as a rows x cols matrix M
// (cols = ceil(sqrt(n)), zero-padded). Two allreduce rounds per step:
//   round 0: P = M Q              (rows x r)  -> summed over ranks
//   round 1: P^ = orthonormal(sum P); Q_w = M^T P^  (cols x r) -> summed over ranks
// The decoded sum is P^ (sum Q)^T. Because P^ Q_w^T is linear in M, each rank's share of it is
// P^ Q_w^T, and its residual keeps M - P^ Q_w^T = (I - P^ P^T) M: the part of M outside the
// shared column space. Bound (tested): ||residual'|| <= ||v||, and share + residual' == v up to
// float rounding. Q starts from shared randomness (seed, tensor id) and afterwards is the
// previous step's summed Q (warm start), kept in the state's aux and saved with checkpoints.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "compression/compressor_base.h"
#include "compression/factories.h"
#include "compression/shared_random.h"

namespace overlap {
namespace compress {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;
using ConstMatrixMap = Eigen::Map<const Matrix>;

struct Shape {
  size_t rows, cols;
};

Shape ShapeOf(size_t n) {
  if (n == 0) return {0, 0};
  const size_t cols = static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  return {(n + cols - 1) / cols, cols};
}

// Modified Gram-Schmidt on the columns; a column with no new direction becomes zero, so a zero
// gradient decodes to zero instead of NaN.
void Orthonormalize(MatrixMap p) {
  for (Eigen::Index c = 0; c < p.cols(); ++c) {
    for (Eigen::Index prev = 0; prev < c; ++prev) {
      p.col(c) -= p.col(prev).dot(p.col(c)) * p.col(prev);
    }
    const float norm = p.col(c).norm();
    if (norm > 1e-30f && std::isfinite(norm)) {
      p.col(c) /= norm;
    } else {
      p.col(c).setZero();
    }
  }
}

class PowerSgdCompressor final : public CompressorBase {
 public:
  PowerSgdCompressor(CompressorConfig config, int rank, uint64_t seed)
      : CompressorBase(std::move(config)), rank_(rank), seed_(seed) {}

  Combine combine() const override { return Combine::kAllreduce; }
  DataType payload_dtype() const override { return DataType::kFloat32; }
  int rounds() const override { return 2; }

  absl::StatusOr<size_t> MaxPayloadBytes(size_t n) const override {
    const Shape s = ShapeOf(n);
    return std::max(s.rows, s.cols) * rank_ * sizeof(float);
  }

  absl::StatusOr<size_t> Compress(absl::Span<const float> grad, ResidualState& state, int64_t,
                                  absl::Span<uint8_t> payload) const override {
    const size_t n = grad.size();
    const Shape s = ShapeOf(n);
    const size_t bytes = s.rows * rank_ * sizeof(float);
    if (absl::Status st = CheckCompressArgs(n, state, payload, bytes); !st.ok()) return st;
    numeric::Add(grad, state.residual(), isa());
    std::vector<float>& scratch = state.scratch();
    scratch.assign(s.rows * s.cols + s.rows * rank_, 0.0f);
    std::copy_n(state.residual().data(), n, scratch.data());
    if (state.aux().size() != s.cols * rank_) InitialQ(state, s);
    MatrixMap p(reinterpret_cast<float*>(payload.data()), s.rows, rank_);
    p.noalias() = M(state, s) * Q(state.aux().data(), s);
    return bytes;
  }

  absl::StatusOr<size_t> NextRound(int round, absl::Span<const uint8_t> reduced,
                                   ResidualState& state, int64_t step,
                                   absl::Span<uint8_t> payload) const override {
    if (round != 1) return Compressor::NextRound(round, reduced, state, step, payload);
    const size_t n = state.size();
    const Shape s = ShapeOf(n);
    const size_t bytes = s.cols * rank_ * sizeof(float);
    if (absl::Status st = CheckCompressArgs(n, state, payload, bytes); !st.ok()) return st;
    if (reduced.size() < s.rows * rank_ * sizeof(float) ||
        state.scratch().size() != s.rows * s.cols + s.rows * rank_) {
      return absl::FailedPreconditionError(
          absl::StrCat(Who(state), ": NextRound(1) needs this step's Compress and the summed P of ",
                       s.rows * rank_ * sizeof(float), " bytes"));
    }
    MatrixMap p_hat = PHat(state, s);
    p_hat = ConstMatrixMap(reinterpret_cast<const float*>(reduced.data()), s.rows, rank_);
    Orthonormalize(p_hat);
    MatrixMap q_local(reinterpret_cast<float*>(payload.data()), s.cols, rank_);
    MatrixMap m = M(state, s);
    q_local.noalias() = m.transpose() * p_hat;
    m.noalias() -= p_hat * q_local.transpose();  // M becomes this rank's residual
    std::copy_n(m.data(), n, state.residual().data());
    return bytes;
  }

  absl::Status Decompress(absl::Span<const uint8_t> payload, ResidualState& state, int64_t step,
                          absl::Span<float> out) const override {
    std::fill(out.begin(), out.end(), 0.0f);
    if (absl::Status st = DecompressAdd(payload, state, step, out); !st.ok()) return st;
    const Shape s = ShapeOf(state.size());
    const float* q = reinterpret_cast<const float*>(payload.data());
    state.aux().assign(q, q + s.cols * rank_);  // warm start for the next step
    return absl::OkStatus();
  }

  absl::Status DecompressAdd(absl::Span<const uint8_t> payload, const ResidualState& state, int64_t,
                             absl::Span<float> out) const override {
    const size_t n = out.size();
    const Shape s = ShapeOf(n);
    if (absl::Status st = CheckDecompressArgs(n, state, payload, s.cols * rank_ * sizeof(float));
        !st.ok()) {
      return st;
    }
    if (state.scratch().size() != s.rows * s.cols + s.rows * rank_) {
      return absl::FailedPreconditionError(
          absl::StrCat(Who(state), ": decompress needs this step's P from NextRound(1)"));
    }
    ConstMatrixMap p_hat(state.scratch().data() + s.rows * s.cols, s.rows, rank_);
    ConstMatrixMap q(reinterpret_cast<const float*>(payload.data()), s.cols, rank_);
    const Matrix q_t = q.transpose();
    Eigen::Matrix<float, 1, Eigen::Dynamic> row(s.cols);
    for (size_t i = 0; i < s.rows; ++i) {
      const size_t len = std::min(s.cols, n - i * s.cols);
      row.noalias() = p_hat.row(i) * q_t;
      Eigen::Map<Eigen::Matrix<float, 1, Eigen::Dynamic>>(out.data() + i * s.cols, len) +=
          row.head(len);
    }
    return absl::OkStatus();
  }

 private:
  static MatrixMap M(ResidualState& state, Shape s) {
    return MatrixMap(state.scratch().data(), s.rows, s.cols);
  }
  MatrixMap PHat(ResidualState& state, Shape s) const {
    return MatrixMap(state.scratch().data() + s.rows * s.cols, s.rows, rank_);
  }
  ConstMatrixMap Q(const float* data, Shape s) const { return ConstMatrixMap(data, s.cols, rank_); }

  void InitialQ(ResidualState& state, Shape s) const {
    const uint64_t key = StreamKey(seed_, state.tensor_id(), -1);
    state.aux().resize(s.cols * rank_);
    for (size_t i = 0; i < state.aux().size(); ++i) state.aux()[i] = SignedUnit(Mix64(key + i));
  }

  int rank_;
  uint64_t seed_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Compressor>> MakePowerSgd(ParamReader& params,
                                                         const CompressorContext&) {
  absl::StatusOr<int64_t> rank = params.Int("rank", 4, 1, 1024);
  if (!rank.ok()) return rank.status();
  absl::StatusOr<int64_t> seed = params.Int("seed", 0, 0, INT64_MAX);
  if (!seed.ok()) return seed.status();
  return std::make_unique<PowerSgdCompressor>(params.canonical(), static_cast<int>(*rank),
                                              static_cast<uint64_t>(*seed));
}

}  // namespace compress
}  // namespace overlap
