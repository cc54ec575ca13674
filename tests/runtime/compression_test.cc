// Compressed allreduce through the runtime on 2 and 4 ranks equals the decompress-then-sum
// reference that this test computes with the compression library for every rank; mismatched
// settings fail on every rank.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "numeric/half.h"
#include "compression/compressor.h"
#include "runtime/planes/compression_stage.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

std::vector<float> Gradient(int rank, int step, size_t tensor, size_t n) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * rank + 10 * step + tensor));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> g(n);
  for (float& x : g) x = dist(rng);
  return g;
}

// Sums payloads element-wise in the compressor's payload dtype (fp32 accumulate, one rounding).
std::vector<uint8_t> SumPayloads(const std::vector<std::vector<uint8_t>>& payloads,
                                 DataType dtype) {
  std::vector<uint8_t> sum(payloads[0].size());
  const size_t elem = DataTypeSize(dtype);
  for (size_t i = 0; i < sum.size() / elem; ++i) {
    float acc = 0;
    for (const auto& p : payloads) {
      if (dtype == DataType::kFloat32) {
        float v;
        std::memcpy(&v, &p[i * 4], 4);
        acc += v;
      } else {
        uint16_t h;
        std::memcpy(&h, &p[i * 2], 2);
        acc += dtype == DataType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
      }
    }
    if (dtype == DataType::kFloat32) {
      std::memcpy(&sum[i * 4], &acc, 4);
    } else {
      const uint16_t h = dtype == DataType::kFloat16 ? FloatToHalf(acc) : FloatToBFloat16(acc);
      std::memcpy(&sum[i * 2], &h, 2);
    }
  }
  return sum;
}

// One tensor's decoded sum for every rank, as the executor's loop in compressor.h describes.
class Reference {
 public:
  Reference(const std::string& spec, int64_t id, size_t n, int size)
      : c_(compress::MakeCompressor(spec).value()), id_(id), n_(n) {
    for (int r = 0; r < size; ++r)
      states_.push_back(std::make_unique<compress::ResidualState>(id, n));
  }

  std::vector<float> Step(const std::vector<std::vector<float>>& grads, int64_t step) {
    const size_t cap = c_->MaxPayloadBytes(n_).value();
    std::vector<std::vector<uint8_t>> payloads(grads.size(), std::vector<uint8_t>(cap));
    std::vector<size_t> bytes(grads.size());
    for (size_t r = 0; r < grads.size(); ++r) {
      bytes[r] = c_->Compress(grads[r], *states_[r], step, absl::MakeSpan(payloads[r])).value();
    }
    for (int round = 1; round < c_->rounds(); ++round) {
      std::vector<uint8_t> reduced = SumPayloads(Trim(payloads, bytes), c_->payload_dtype());
      for (size_t r = 0; r < grads.size(); ++r) {
        std::vector<uint8_t> next(cap);
        bytes[r] = c_->NextRound(round, reduced, *states_[r], step, absl::MakeSpan(next)).value();
        payloads[r] = next;
      }
    }
    std::vector<float> out(n_, 0.0f), discard(n_);
    if (c_->combine() == compress::Combine::kAllgather) {
      for (size_t r = 0; r < grads.size(); ++r) {
        REQUIRE(c_->DecompressAdd(absl::MakeConstSpan(payloads[r]).subspan(0, bytes[r]),
                                  *states_[0], step, absl::MakeSpan(out))
                    .ok());
      }
      return out;
    }
    const std::vector<uint8_t> sum = SumPayloads(Trim(payloads, bytes), c_->payload_dtype());
    for (size_t r = 0; r < grads.size();
         ++r) {  // every rank's state takes the decode (PowerSGD's Q)
      REQUIRE(c_->Decompress(sum, *states_[r], step, absl::MakeSpan(r == 0 ? out : discard)).ok());
    }
    return out;
  }

  double tolerance() const {
    const DataType d = c_->payload_dtype();
    return d == DataType::kFloat16 ? 1e-2 : d == DataType::kBFloat16 ? 8e-2 : 1e-4;
  }

 private:
  static std::vector<std::vector<uint8_t>> Trim(std::vector<std::vector<uint8_t>> p,
                                                const std::vector<size_t>& b) {
    for (size_t r = 0; r < p.size(); ++r) p[r].resize(b[r]);
    return p;
  }

  std::unique_ptr<compress::Compressor> c_;
  int64_t id_;
  size_t n_;
  std::vector<std::unique_ptr<compress::ResidualState>> states_;
};

TEST_CASE("compressed allreduce equals the decompress-then-sum reference", "[compression]") {
  const int rank = Rank(), size = Size();
  const std::vector<size_t> sizes = {1000, 300};
  for (const char* spec : {"fp16", "bf16", "covap:R=4", "randomk:ratio=0.25", "topk:ratio=0.1",
                           "efsign", "powersgd:rank=2"}) {
    INFO(spec);
    std::vector<Reference> refs;
    for (size_t t = 0; t < sizes.size(); ++t) {
      const std::string name = absl::StrCat("comp.", spec, ".", t);
      refs.emplace_back(spec, CompressionTensorId(name, 0), sizes[t], size);
    }
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> mine(sizes.size());
      std::vector<Handle> handles;
      for (size_t t = 0; t < sizes.size(); ++t) {
        mine[t] = Gradient(rank, step, t, sizes[t]);
        AllreduceOptions options;
        options.op = ReduceOp::kSum;
        options.compression = spec;
        const Tensor tensor = MakeTensor(mine[t].data(), {static_cast<int64_t>(sizes[t])});
        absl::StatusOr<Handle> h =
            Allreduce(absl::StrCat("comp.", spec, ".", t), tensor, tensor, options);
        REQUIRE(h.ok());
        handles.push_back(*h);
      }
      for (const Handle& h : handles) {
        const absl::Status s = h.Wait(kWait);
        INFO(s.message());
        REQUIRE(s.ok());
      }
      for (size_t t = 0; t < sizes.size(); ++t) {
        std::vector<std::vector<float>> all;
        for (int r = 0; r < size; ++r) all.push_back(Gradient(r, step, t, sizes[t]));
        const std::vector<float> want = refs[t].Step(all, step);
        double scale = 1e-6, worst = 0;
        for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
        for (size_t i = 0; i < want.size(); ++i)
          worst = std::max(worst, std::fabs(mine[t][i] - want[i]) / scale);
        INFO("step " << step << " tensor " << t << " worst relative error " << worst);
        CHECK(worst <= refs[t].tolerance());
      }
    }
  }
}

TEST_CASE("different compressors on different ranks fail on every rank", "[compression]") {
  std::vector<float> x(64, 1.0f);
  AllreduceOptions options;
  options.compression = Rank() == 1 ? "topk:ratio=0.5" : "fp16";
  absl::StatusOr<Handle> h =
      Allreduce("comp.mismatch", MakeTensor(x.data(), {64}), MakeTensor(x.data(), {64}), options);
  REQUIRE(h.ok());
  const absl::Status s = h->Wait(kWait);
  INFO(s.message());
  CHECK(absl::StartsWith(
      s.message(),
      absl::StrCat("rank ", Rank(),
                   ": allreduce 'comp.mismatch': compression mismatch: rank 0 submitted fp16")));
  CHECK(absl::StrContains(s.message(), "rank 1 submitted topk:"));
}

TEST_CASE("bad compression settings are refused with the parameter named", "[compression]") {
  std::vector<float> x(64, 1.0f);
  std::vector<int32_t> ints(64, 1);
  AllreduceOptions options;
  options.compression = "zip";
  absl::StatusOr<Handle> h =
      Allreduce("comp.bad", MakeTensor(x.data(), {64}), MakeTensor(x.data(), {64}), options);
  REQUIRE(!h.ok());
  CHECK(absl::StrContains(h.status().message(), "zip"));
  options.compression = "covap:R=0";
  h = Allreduce("comp.bad", MakeTensor(x.data(), {64}), MakeTensor(x.data(), {64}), options);
  REQUIRE(!h.ok());
  CHECK(absl::StrContains(h.status().message(), "R"));
  options.compression = "fp16";
  h = Allreduce("comp.int", MakeTensor(ints.data(), {64}), MakeTensor(ints.data(), {64}), options);
  REQUIRE(!h.ok());
  CHECK(absl::StrContains(h.status().message(),
                          "needs float32 tensors and op sum or average, not int32"));
}

TEST_CASE("residuals survive a checkpoint round trip", "[compression]") {
  absl::StatusOr<std::string> saved = SaveCompressionState();
  REQUIRE(saved.ok());
  CHECK(saved->size() > 1000);  // the residuals of the tensors above
  CHECK(RestoreCompressionState(*saved).ok());
  absl::StatusOr<std::string> again = SaveCompressionState();
  REQUIRE(again.ok());
  CHECK(*again == *saved);
  const absl::Status bad = RestoreCompressionState("not a snapshot");
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(bad.message(), "not a compression snapshot"));
}

}  // namespace
}  // namespace overlap
