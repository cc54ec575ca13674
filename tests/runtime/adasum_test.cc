// ReduceOp::kAdasum through the public API: tensors the data plane fuses into one bucket and a
// grouped allreduce each keep their own coefficients, next to sums in the same step; prescale
// and postscale; the same step repeated until the observed plan runs it; the refusals (integer
// dtypes, a reduce-scatter, a rank count that is not a power of two) at submission, and an op
// mismatch between ranks on every rank. References are computed on every rank from every rank's
// input (the pairing of collectives/adasum.h; the collective's own tests check it tightly).
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/overlap.h"

namespace overlap {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);

bool PowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Element i of rank r's input for the tensor numbered `seed`.
float Input(int seed, int rank, int64_t i) {
  return std::sin(0.7f * static_cast<float>(i + 1) * static_cast<float>(seed + 1) +
                  1.3f * static_cast<float>(rank));
}

std::vector<float> InputOf(int seed, int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = Input(seed, rank, i);
  return v;
}

// The pairwise combination over every rank, rounded to float32 after each level.
std::vector<double> Reference(int seed, int64_t n) {
  std::vector<std::vector<double>> v;
  for (int r = 0; r < Size(); ++r) {
    const std::vector<float> in = InputOf(seed, r, n);
    v.emplace_back(in.begin(), in.end());
  }
  for (size_t d = 1; d < v.size(); d *= 2) {
    for (size_t q = 0; q < v.size(); q += 2 * d) {
      std::vector<double>& a = v[q];
      const std::vector<double>& b = v[q + d];
      double dot = 0, aa = 0, bb = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        dot += a[i] * b[i];
        aa += a[i] * a[i];
        bb += b[i] * b[i];
      }
      const double ca = aa == 0 ? 1 : 1 - dot / (2 * aa), cb = bb == 0 ? 1 : 1 - dot / (2 * bb);
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(ca * a[i] + cb * b[i]);
    }
  }
  return v[0];
}

void CheckClose(const std::vector<float>& got, const std::vector<double>& want, double scale,
                const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - scale * want[i]));
  INFO(what << ": off by " << worst);
  CHECK(worst <= 1e-5 * std::max(1.0, std::fabs(scale)));
}

void WaitOk(const absl::StatusOr<Handle>& h) {
  REQUIRE(h.ok());
  const absl::Status s = h->Wait(kWait);
  INFO(s.message());
  REQUIRE(s.ok());
}

AllreduceOptions Adasum() {
  AllreduceOptions options;
  options.op = ReduceOp::kAdasum;
  return options;
}

TEST_CASE("adasum: fused, grouped and summed tensors of one step each get their own result") {
  if (!PowerOfTwo(Size())) return;
  const int rank = Rank();
  const std::vector<int64_t> sizes = {5, 1, 64, 300, 2};
  std::vector<std::vector<float>> adasum, sums;
  for (size_t t = 0; t < sizes.size(); ++t) {
    adasum.push_back(InputOf(static_cast<int>(t), rank, sizes[t]));
    sums.push_back(std::vector<float>(static_cast<size_t>(sizes[t]), rank + 1.0f));
  }
  std::vector<absl::StatusOr<Handle>> handles;
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  for (size_t t = 0; t < sizes.size(); ++t) {  // interleaved: sums must not join Adasum buckets
    const Tensor a = MakeTensor(adasum[t].data(), {sizes[t]});
    handles.push_back(Allreduce(absl::StrCat("step.adasum.", t), a, a, Adasum()));
    const Tensor s = MakeTensor(sums[t].data(), {sizes[t]});
    handles.push_back(Allreduce(absl::StrCat("step.sum.", t), s, s, sum));
  }
  std::vector<float> g0 = InputOf(10, rank, 17), g1 = InputOf(11, rank, 3);
  std::vector<Tensor> group = {MakeTensor(g0.data(), {17}), MakeTensor(g1.data(), {3})};
  handles.push_back(GroupedAllreduce({"step.group.0", "step.group.1"}, group, group, Adasum()));
  for (const absl::StatusOr<Handle>& h : handles) WaitOk(h);
  const float total = Size() * (Size() + 1) / 2.0f;
  for (size_t t = 0; t < sizes.size(); ++t) {
    CheckClose(adasum[t], Reference(static_cast<int>(t), sizes[t]), 1.0,
               absl::StrCat("tensor ", t));
    for (float v : sums[t]) CHECK(v == total);
  }
  CheckClose(g0, Reference(10, 17), 1.0, "group member 0");
  CheckClose(g1, Reference(11, 3), 1.0, "group member 1");
}

TEST_CASE("adasum: prescale and postscale scale the result (Adasum is scale-equivariant)") {
  if (!PowerOfTwo(Size())) return;
  std::vector<float> in = InputOf(20, Rank(), 40), out(40);
  AllreduceOptions options = Adasum();
  options.prescale = 0.5;
  options.postscale = 3.0;
  WaitOk(Allreduce("scaled.adasum", MakeTensor(in.data(), {40}), MakeTensor(out.data(), {40}),
                   options));
  CheckClose(out, Reference(20, 40), 1.5, "scaled");
  CHECK(in == InputOf(20, Rank(), 40));  // out of place: the input is left alone
}

TEST_CASE("adasum: a repeated step runs on the observed plan with the same results") {
  if (!PowerOfTwo(Size())) return;
  const int64_t launches_before = Stats().planned_launches;
  for (int step = 0; step < 12; ++step) {
    std::vector<float> a = InputOf(30 + step, Rank(), 9), b = InputOf(60 + step, Rank(), 130);
    const absl::StatusOr<Handle> ha =
        Allreduce("plan.a", MakeTensor(a.data(), {9}), MakeTensor(a.data(), {9}), Adasum());
    const absl::StatusOr<Handle> hb =
        Allreduce("plan.b", MakeTensor(b.data(), {130}), MakeTensor(b.data(), {130}), Adasum());
    WaitOk(ha);
    WaitOk(hb);
    CheckClose(a, Reference(30 + step, 9), 1.0, absl::StrCat("step ", step, " a"));
    CheckClose(b, Reference(60 + step, 130), 1.0, absl::StrCat("step ", step, " b"));
  }
  CHECK(Stats().planned_launches > launches_before);
}

TEST_CASE("adasum: refusals at submission, and an op mismatch on every rank") {
  const std::string me = absl::StrCat("rank ", Rank(), ": ");
  std::vector<float> x(8, 1.0f);
  if (!PowerOfTwo(Size())) {
    const absl::StatusOr<Handle> h =
        Allreduce("odd.adasum", MakeTensor(x.data(), {8}), MakeTensor(x.data(), {8}), Adasum());
    REQUIRE(h.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(h.status().message()) ==
          absl::StrCat(me,
                       "allreduce 'odd.adasum': Adasum needs a power-of-two number of ranks, "
                       "and this job has ",
                       Size()));
    return;
  }
  std::vector<int32_t> ints(8, 1);
  const absl::StatusOr<Handle> integer =
      Allreduce("int.adasum", MakeTensor(ints.data(), {8}), MakeTensor(ints.data(), {8}), Adasum());
  REQUIRE(integer.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(integer.status().message()) ==
        me + "allreduce 'int.adasum': Adasum is defined for floating-point tensors (float16, "
             "bfloat16, float32, float64), not int32");
  ReduceScatterOptions scatter;
  scatter.op = ReduceOp::kAdasum;
  const absl::StatusOr<Handle> rs = ReduceScatter("rs.adasum", MakeTensor(x.data(), {8}), scatter);
  REQUIRE(rs.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(rs.status().message()) ==
        me + "reducescatter 'rs.adasum': Adasum is an allreduce only");
  AllreduceOptions mixed;
  mixed.op = Rank() == 1 ? ReduceOp::kAdasum : ReduceOp::kSum;
  const absl::StatusOr<Handle> h =
      Allreduce("mixed.adasum", MakeTensor(x.data(), {8}), MakeTensor(x.data(), {8}), mixed);
  REQUIRE(h.ok());
  const absl::Status s = h->Wait(kWait);
  INFO(s.message());
  CHECK(absl::StrContains(s.message(),
                          "allreduce 'mixed.adasum': reduce op mismatch: rank 0 "
                          "submitted sum, rank 1 submitted adasum"));
  std::vector<float> y(2, 1.0f);
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  WaitOk(Allreduce("after.adasum", MakeTensor(y.data(), {2}), MakeTensor(y.data(), {2}), sum));
  CHECK(y[0] == static_cast<float>(Size()));
}

}  // namespace
}  // namespace overlap
