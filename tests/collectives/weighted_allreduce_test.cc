// The weighted allreduce (collectives/weighted_allreduce.h) called directly, and the MPI
// executor's adaptive allreduces around it (collectives/link_adaptation.h): exact sums for shares
// that are equal, uneven, zero for some ranks and whole on one; every dtype; counts that do not
// divide and buffers of several segments; random values summed in rank order, bit for bit, on
// every rank; the probe's rates, the same on every rank; a hierarchical allreduce whose cross-host
// phase is weighted (pretend hosts of 2 ranks); and auto leaving one host's ranks alone.
#include "collectives/weighted_allreduce.h"

#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "absl/time/clock.h"
#include "collectives/link_probe.h"
#include "collectives/link_shares.h"
#include "collectives/mpi_executor.h"
#include "collectives/segmented_allreduce.h"
#include "numeric/half.h"
#include "tests/collectives/mpi_world.h"

namespace overlap {
namespace {

using testing::Rank;
using testing::RunToEnd;
using testing::Size;

// Shares that every rank builds alike.
std::vector<std::vector<double>> ShareSets() {
  const size_t n = static_cast<size_t>(Size());
  std::vector<std::vector<double>> sets;
  sets.push_back(std::vector<double>(n, 1.0 / static_cast<double>(n)));
  std::vector<double> slow_last(n, 1.0);
  slow_last.back() = 0;  // the last rank owns nothing
  sets.push_back(slow_last);
  std::vector<double> all_on_first(n, 0.0);
  all_on_first.front() = 1;
  sets.push_back(all_on_first);
  std::vector<double> uneven(n);
  for (size_t i = 0; i < n; ++i) uneven[i] = 1.0 + static_cast<double>(i * i);
  sets.push_back(uneven);
  return sets;
}

float Value(int q, int64_t i) { return static_cast<float>((q + 1) * (i % 89 + 1)); }

std::vector<float> Input(int64_t count) {
  std::vector<float> data(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) data[static_cast<size_t>(i)] = Value(Rank(), i);
  return data;
}

int64_t WrongSums(const std::vector<float>& data) {
  int64_t wrong = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    float sum = 0;
    for (int q = 0; q < Size(); ++q) sum += Value(q, static_cast<int64_t>(i));
    if (data[i] != sum) ++wrong;
  }
  return wrong;
}

// Whether every rank holds the same bytes.
bool SameOnEveryRank(const void* data, size_t bytes) {
  std::vector<char> first(bytes);
  if (bytes > 0) std::memcpy(first.data(), data, bytes);
  MPI_Bcast(first.data(), static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
  int same = bytes == 0 || std::memcmp(first.data(), data, bytes) == 0 ? 1 : 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

TEST_CASE("a weighted allreduce sums every element, whatever the shares and the count") {
  const int tags[2] = {21, 22};
  const int64_t segment = static_cast<int64_t>(WeightedAllreduce::kSegmentBytes / 4);
  for (const std::vector<double>& shares : ShareSets()) {
    for (const int64_t count : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1000003},
                                segment + 7, 3 * segment + 1}) {
      INFO("count " << count << ", shares of the last rank " << shares.back());
      std::vector<float> data = Input(count);
      absl::StatusOr<std::unique_ptr<WeightedAllreduce>> work = WeightedAllreduce::Start(
          MPI_COMM_WORLD, tags, data.data(), count, MPI_FLOAT, 4, MPI_SUM, shares);
      REQUIRE(work.ok());
      RunToEnd(**work);
      CHECK(WrongSums(data) == 0);
    }
  }
}

TEST_CASE("random values are summed in rank order, and every rank gets the same bits") {
  const int tags[2] = {23, 24};
  const int64_t count = 300007;
  std::vector<float> mine(static_cast<size_t>(count));
  std::vector<std::vector<float>> all(static_cast<size_t>(Size()));
  for (int q = 0; q < Size(); ++q) {
    std::mt19937 rng(static_cast<unsigned>(100 + q));
    std::normal_distribution<float> normal(0, 1);
    for (float& v : all[static_cast<size_t>(q)] = std::vector<float>(mine.size())) v = normal(rng);
  }
  for (const std::vector<double>& shares : ShareSets()) {
    mine = all[static_cast<size_t>(Rank())];
    absl::StatusOr<std::unique_ptr<WeightedAllreduce>> work = WeightedAllreduce::Start(
        MPI_COMM_WORLD, tags, mine.data(), count, MPI_FLOAT, 4, MPI_SUM, shares);
    REQUIRE(work.ok());
    RunToEnd(**work);
    int64_t differ = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      float sum = 0;
      for (int q = 0; q < Size(); ++q) sum += all[static_cast<size_t>(q)][i];
      if (std::memcmp(&sum, &mine[i], 4) != 0) ++differ;
    }
    CHECK(differ == 0);
    CHECK(SameOnEveryRank(mine.data(), mine.size() * 4));
  }
}

template <typename T>
void CheckIntegerSum(MPI_Datatype type, const std::vector<double>& shares) {
  const int tags[2] = {25, 26};
  const int64_t count = 4099;
  std::vector<T> data(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) data[static_cast<size_t>(i)] = static_cast<T>(i % 5 + Rank());
  absl::StatusOr<std::unique_ptr<WeightedAllreduce>> work = WeightedAllreduce::Start(
      MPI_COMM_WORLD, tags, data.data(), count, type, sizeof(T), MPI_SUM, shares);
  REQUIRE(work.ok());
  RunToEnd(**work);
  int64_t wrong = 0;
  const int64_t ranks = Size() * (Size() - 1) / 2;
  for (int64_t i = 0; i < count; ++i) {
    if (data[static_cast<size_t>(i)] != static_cast<T>(Size() * (i % 5) + ranks)) ++wrong;
  }
  CHECK(wrong == 0);
}

TEST_CASE("every dtype, with the executor's reduction operations") {
  const std::vector<double> shares = ShareSets()[3];
  CheckIntegerSum<int8_t>(MPI_INT8_T, shares);
  CheckIntegerSum<uint8_t>(MPI_UINT8_T, shares);
  CheckIntegerSum<int32_t>(MPI_INT32_T, shares);
  CheckIntegerSum<int64_t>(MPI_INT64_T, shares);
  CheckIntegerSum<double>(MPI_DOUBLE, shares);
  CheckIntegerSum<float>(MPI_FLOAT, shares);
  const int tags[2] = {27, 28};
  for (const DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    INFO(DataTypeName(dtype));
    const int64_t count = 2053;
    std::vector<uint16_t> data(static_cast<size_t>(count));
    const bool fp16 = dtype == DataType::kFloat16;
    for (int64_t i = 0; i < count; ++i) {
      const float v = static_cast<float>(Rank() + 1 + i % 3);
      data[static_cast<size_t>(i)] = fp16 ? FloatToHalf(v) : FloatToBFloat16(v);
    }
    absl::StatusOr<MPI_Op> op = MpiReduceOp(dtype, ReduceOp::kSum);
    REQUIRE(op.ok());
    absl::StatusOr<std::unique_ptr<WeightedAllreduce>> work = WeightedAllreduce::Start(
        MPI_COMM_WORLD, tags, data.data(), count, MpiDataType(dtype), 2, *op, shares);
    REQUIRE(work.ok());
    RunToEnd(**work);
    int64_t wrong = 0;
    const float ranks = static_cast<float>(Size() * (Size() + 1) / 2);
    for (int64_t i = 0; i < count; ++i) {
      const uint16_t got = data[static_cast<size_t>(i)];
      const float value = fp16 ? HalfToFloat(got) : BFloat16ToFloat(got);
      if (value != ranks + static_cast<float>(Size() * (i % 3))) ++wrong;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("shares that do not match the rank count are refused") {
  const int tags[2] = {29, 30};
  std::vector<float> data(4);
  absl::StatusOr<std::unique_ptr<WeightedAllreduce>> work = WeightedAllreduce::Start(
      MPI_COMM_WORLD, tags, data.data(), 4, MPI_FLOAT, 4, MPI_SUM,
      std::vector<double>(static_cast<size_t>(Size() + 1), 1.0));
  REQUIRE_FALSE(work.ok());
  CHECK(work.status().message().find("shares for") != absl::string_view::npos);
}

TEST_CASE("the link probe gives every rank the same positive rates") {
  absl::StatusOr<std::unique_ptr<LinkProbe>> probe =
      LinkProbe::Start(MPI_COMM_WORLD, 31, size_t{1} << 20);
  REQUIRE(probe.ok());
  RunToEnd(**probe);
  const std::vector<double>& rates = (*probe)->rates();
  REQUIRE(rates.size() == static_cast<size_t>(Size()));
  for (double r : rates) CHECK(r > 0);
  CHECK(SameOnEveryRank(rates.data(), rates.size() * sizeof(double)));
  const std::vector<double>& flows = (*probe)->flows();
  for (int q = 0; q < Size(); ++q) CHECK(flows[static_cast<size_t>(q * Size() + q)] == 0);
}

struct Probes {
  std::vector<LinkReport> reports;
};

std::unique_ptr<MpiExecutor> AdaptiveExecutor(LinkAdaptation adaptation, int host, int hosts,
                                              Probes* probes, int64_t reprobe_every = 256,
                                              int64_t first_probe_after = 0,
                                              size_t probe_bytes = size_t{256} << 10) {
  MpiExecutorOptions options;
  options.first_probe_after = first_probe_after;
  options.num_channels = 2;
  options.host = host;
  options.hosts = hosts;
  options.adaptation = adaptation;
  options.reprobe_every = reprobe_every;
  options.probe_bytes = probe_bytes;
  options.on_probe = [probes](const LinkReport& report) { probes->reports.push_back(report); };
  absl::StatusOr<std::unique_ptr<MpiExecutor>> executor =
      MpiExecutor::Create(MPI_COMM_WORLD, options);
  REQUIRE(executor.ok());
  return std::move(*executor);
}

CollectiveArgs FloatSum(std::vector<float>& data) {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllreduce;
  args.dtype = DataType::kFloat32;
  args.op = ReduceOp::kSum;
  args.count = static_cast<int64_t>(data.size());
  args.recv = data.data();
  return args;
}

// One float sum of `count` elements on `channel` of `executor`, run to its end, checked exact.
void ExactSum(MpiExecutor& executor, int channel, int64_t count) {
  std::vector<float> data = Input(count);
  absl::StatusOr<std::unique_ptr<Work>> work = executor.Start(channel, FloatSum(data));
  REQUIRE(work.ok());
  RunToEnd(**work);
  CHECK(WrongSums(data) == 0);
}

TEST_CASE("adaptation on: a probe, then weighted allreduces, and a probe again when due") {
  Probes probes;
  std::unique_ptr<MpiExecutor> executor =
      AdaptiveExecutor(LinkAdaptation::kOn, /*host=*/-1, /*hosts=*/1, &probes,
                       /*reprobe_every=*/2);
  const int64_t large = static_cast<int64_t>(MpiExecutor::kAdaptiveMinBytes / 4) + 13;
  for (int i = 0; i < 4; ++i) ExactSum(*executor, 0, large);
  // Probes before the 1st and the 3rd; small allreduces and channel 1's are not counted.
  ExactSum(*executor, 0, 100);
  CHECK(executor->link_probes() == 2);
  CHECK(executor->weighted_allreduces() == 4);
  REQUIRE(probes.reports.size() == 2);
  const LinkReport& report = probes.reports.back();
  CHECK(report.channel == 0);
  CHECK_FALSE(report.cross_host);
  REQUIRE(report.shares.size() == static_cast<size_t>(Size()));
  CHECK(SameOnEveryRank(report.shares.data(), report.shares.size() * sizeof(double)));
  CHECK(report.seconds > 0);
}

TEST_CASE("a probe exchanges no more than its allreduce, unless it confirms a new verdict") {
  Probes probes;
  const size_t probe_bytes = size_t{4} << 20;
  std::unique_ptr<MpiExecutor> executor =
      AdaptiveExecutor(LinkAdaptation::kOn, /*host=*/-1, /*hosts=*/1, &probes,
                       /*reprobe_every=*/2, /*first_probe_after=*/0, probe_bytes);
  const int64_t count = static_cast<int64_t>(MpiExecutor::kAdaptiveMinBytes / 4) + 11;
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  for (int i = 0; i < 3; ++i) ExactSum(*executor, 0, count);
  REQUIRE(probes.reports.size() == 2);
  CHECK(probes.reports[0].bytes == bytes);
  // The second probe (before the 3rd allreduce) confirms the first one's verdict when that
  // verdict was new (weighting pays, where allreduces ran unweighted before), else it is the
  // probe due every 2.
  const bool confirms = WeightedPays(probes.reports[0].rates);
  CHECK(probes.reports[1].bytes == (confirms ? probe_bytes : bytes));
  // An allreduce larger than probe_bytes probes with probe_bytes.
  Probes large_probes;
  std::unique_ptr<MpiExecutor> large_executor =
      AdaptiveExecutor(LinkAdaptation::kOn, -1, 1, &large_probes, 2, 0, size_t{1} << 20);
  ExactSum(*large_executor, 0, 2 * count);
  REQUIRE(large_probes.reports.size() == 1);
  CHECK(large_probes.reports[0].bytes == (size_t{1} << 20));
}

TEST_CASE("a rank that starts its allreduces late gets no shard, and sums stay exact") {
  if (Size() < 3) {
    WARN("needs 3 ranks or more: with 2 there is no median to judge lateness by");
    return;
  }
  Probes probes;
  std::unique_ptr<MpiExecutor> executor =
      AdaptiveExecutor(LinkAdaptation::kOn, -1, Size(), &probes, /*reprobe_every=*/4);
  const int late = Size() - 1;
  const int64_t count = static_cast<int64_t>(MpiExecutor::kAdaptiveMinBytes / 4) + 5;
  for (int i = 0; i < 13; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (Rank() == late) absl::SleepFor(absl::Milliseconds(40));
    ExactSum(*executor, 0, count);
  }
  // Probes before the 1st (nothing timed yet), the 5th (a first verdict, not yet trusted), the
  // 9th and the 13th allreduce (the same verdict again).
  REQUIRE(probes.reports.size() == 4);
  CHECK(probes.reports[0].stragglers.empty());
  CHECK(probes.reports[1].stragglers.empty());
  for (size_t p = 2; p < 4; ++p) {
    const LinkReport& report = probes.reports[p];
    CHECK(report.stragglers == std::vector<int>{late});
    REQUIRE(report.shares.size() == static_cast<size_t>(Size()));
    CHECK(report.shares[static_cast<size_t>(late)] == 0);
  }
}

TEST_CASE("a first probe that finds no reason to weight is checked by a lateness check only") {
  if (Size() < 3) {
    WARN("needs 3 ranks or more: adaptation auto probes only among 3 hosts or more");
    return;
  }
  Probes probes;
  std::unique_ptr<MpiExecutor> executor =
      AdaptiveExecutor(LinkAdaptation::kAuto, -1, Size(), &probes, /*reprobe_every=*/12);
  const int64_t count = static_cast<int64_t>(MpiExecutor::kAdaptiveMinBytes / 4) + 7;
  for (int i = 0; i < 13; ++i) ExactSum(*executor, 0, count);
  // A rate probe before the 1st allreduce; between it and the 13th, one or two checks (before the
  // 5th, and the 9th if the 5th's lateness verdict was new); before the 13th the rate probe due
  // every 12. The check before the 5th measures rates again only if the first probe found that
  // weighting pays (a noisy reading of these equal links), since that verdict needs a second
  // probe, and from then on rates are due 12 after that one: past the 13th when that second probe
  // agreed (weighting pays twice in a row on a noisy, oversubscribed machine), so two reports.
  REQUIRE(probes.reports.size() >= 2);
  REQUIRE(probes.reports.size() <= 4);
  CHECK(probes.reports.front().rates_measured);
  const bool first_pays = WeightedPays(probes.reports.front().rates);
  CHECK(probes.reports[1].rates_measured == first_pays);
  if (!first_pays) {
    REQUIRE(probes.reports.size() >= 3);
    CHECK(probes.reports.back().rates_measured);
  } else if (probes.reports.size() == 2) {
    CHECK(WeightedPays(probes.reports[1].rates));
  }
  int64_t measured = 0;
  std::vector<double> standing;
  for (const LinkReport& report : probes.reports) {
    measured += report.rates_measured ? 1 : 0;
    REQUIRE(report.rates.size() == static_cast<size_t>(Size()));
    REQUIRE(report.waits.size() == static_cast<size_t>(Size()));
    if (report.rates_measured) {
      standing = report.rates;
    } else {
      // A check reports the standing rates and what it gathered, the same on every rank.
      CHECK(report.rates == standing);
      CHECK(SameOnEveryRank(report.waits.data(), report.waits.size() * sizeof(double)));
    }
  }
  CHECK(executor->link_probes() == measured);
  if (!first_pays) CHECK(measured == 2);
}

TEST_CASE("first_probe_after: the first probe waits for that many allreduces and judges lateness") {
  if (Size() < 3) {
    WARN("needs 3 ranks or more: adaptation auto probes only among 3 hosts or more");
    return;
  }
  Probes probes;
  std::unique_ptr<MpiExecutor> executor =
      AdaptiveExecutor(LinkAdaptation::kAuto, -1, Size(), &probes, /*reprobe_every=*/256,
                       /*first_probe_after=*/3);
  const int64_t count = static_cast<int64_t>(MpiExecutor::kAdaptiveMinBytes / 4) + 3;
  for (int i = 0; i < 4; ++i) {
    CHECK(probes.reports.empty());  // the probe, when due, runs as the 4th starts
    ExactSum(*executor, 0, count);
  }
  // Before the 4th: a rate probe, which also gathered the three allreduces' times.
  REQUIRE(probes.reports.size() == 1);
  CHECK(probes.reports[0].rates_measured);
  for (double wait : probes.reports[0].waits) CHECK(wait > 0);
  CHECK(executor->link_probes() == 1);
}

TEST_CASE("adaptation auto on one host probes nothing and runs as before") {
  Probes probes;
  std::unique_ptr<MpiExecutor> executor =
      AdaptiveExecutor(LinkAdaptation::kAuto, -1, /*hosts=*/1, &probes);
  ExactSum(*executor, 1, static_cast<int64_t>(MpiExecutor::kAdaptiveMinBytes / 4) + 1);
  CHECK(executor->link_probes() == 0);
  CHECK(probes.reports.empty());
}

TEST_CASE("a hierarchical allreduce weights its cross-host phase") {
  if (Size() % 2 != 0 || Size() < 4) {
    WARN("needs an even rank count of at least 4 for pretend hosts of 2 ranks");
    return;
  }
  Probes probes;
  std::unique_ptr<MpiExecutor> executor =
      AdaptiveExecutor(LinkAdaptation::kOn, Rank() / 2, Size() / 2, &probes);
  REQUIRE(executor->hierarchical());
  const int64_t segment = static_cast<int64_t>(SegmentedAllreduce::kSegmentBytes / 4);
  for (const int64_t count :
       {static_cast<int64_t>(MpiExecutor::kAdaptiveMinBytes / 4), 2 * segment + 3}) {
    ExactSum(*executor, 1, count);
  }
  REQUIRE(probes.reports.size() == 1);
  CHECK(probes.reports[0].cross_host);
  CHECK(probes.reports[0].rates.size() == static_cast<size_t>(Size() / 2));
  CHECK(executor->weighted_allreduces() == 2);
}

}  // namespace
}  // namespace overlap
