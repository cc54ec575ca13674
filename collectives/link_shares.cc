// Link shares (link_shares.h states the model).
#include "collectives/link_shares.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace overlap {
namespace {

bool Usable(double rate) { return std::isfinite(rate) && rate > 0; }

// `rates` with unusable entries replaced by the lowest usable one (1 when none is).
std::vector<double> Cleaned(absl::Span<const double> rates) {
  double lowest = 0;
  for (double r : rates) {
    if (Usable(r) && (lowest == 0 || r < lowest)) lowest = r;
  }
  if (lowest == 0) lowest = 1;
  std::vector<double> out(rates.begin(), rates.end());
  for (double& r : out) {
    if (!Usable(r)) r = lowest;
  }
  return out;
}

}  // namespace

std::vector<double> LinkShares(absl::Span<const double> rates, absl::Span<const int> stragglers) {
  const size_t n = rates.size();
  if (n == 0) return {};
  if (n <= 2) return std::vector<double>(n, 1.0 / static_cast<double>(n));
  std::vector<double> b = Cleaned(rates);
  // A rate far below every other leaves a straggler dry in the water-filling below.
  const double floor = *std::min_element(b.begin(), b.end()) * 1e-9;
  if (stragglers.size() < n) {
    for (int s : stragglers) {
      if (s >= 0 && static_cast<size_t>(s) < n) b[static_cast<size_t>(s)] = floor;
    }
  }
  std::vector<double> sorted = b;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  // With the k fastest ranks holding shards (m = 1): sum over them of (T B_i - 1) = n - 2, so
  // T = (n - 2 + k) / (their rate sum). The largest k whose slowest member still gets a
  // positive shard is the water level.
  const double extra = static_cast<double>(n - 2);
  double level = 0, rate_sum = 0;
  for (size_t k = 1; k <= n; ++k) {
    rate_sum += sorted[k - 1];
    const double t = (extra + static_cast<double>(k)) / rate_sum;
    if (t * sorted[k - 1] - 1 <= 0) break;
    level = t;
  }
  std::vector<double> shares(n, 0.0);
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    shares[i] = std::max(0.0, level * b[i] - 1) / extra;
    total += shares[i];
  }
  for (double& s : shares) s /= total;  // exact sum 1 against rounding
  return shares;
}

std::vector<int64_t> SplitByShares(absl::Span<const double> shares, int64_t count) {
  const size_t n = shares.size();
  std::vector<int64_t> counts(n, 0);
  if (n == 0 || count <= 0) return counts;
  double total = 0;
  for (double s : shares) total += std::max(0.0, s);
  std::vector<double> remainder(n, 0.0);
  int64_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = total > 0 ? std::max(0.0, shares[i]) / total * static_cast<double>(count)
                                   : static_cast<double>(count) / static_cast<double>(n);
    counts[i] = std::min(count - given, static_cast<int64_t>(std::floor(exact)));
    remainder[i] = exact - static_cast<double>(counts[i]);
    given += counts[i];
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t k = 0; given < count; k = (k + 1) % n, ++given) ++counts[order[k]];
  return counts;
}

double WeightedSeconds(absl::Span<const double> rates, absl::Span<const double> shares,
                       double bytes) {
  const std::vector<double> b = Cleaned(rates);
  const double n = static_cast<double>(b.size());
  double worst = 0;
  for (size_t i = 0; i < b.size() && i < shares.size(); ++i) {
    worst = std::max(worst, bytes * (1 + (n - 2) * shares[i]) / b[i]);
  }
  return worst;
}

double RingSeconds(absl::Span<const double> rates, double bytes) {
  if (rates.size() < 2) return 0;
  const std::vector<double> b = Cleaned(rates);
  const double n = static_cast<double>(b.size());
  return 2 * (n - 1) / n * bytes / *std::min_element(b.begin(), b.end());
}

std::vector<int> Stragglers(absl::Span<const double> waits) {
  std::vector<double> sorted;
  for (double w : waits) {
    if (w > 0 && std::isfinite(w)) sorted.push_back(w);
  }
  if (sorted.size() != waits.size() || sorted.size() < 3) return {};
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double margin = std::max(kLateMinSeconds, kLateFraction * median);
  std::vector<int> late;
  for (size_t i = 0; i < waits.size(); ++i) {
    if (waits[i] <= median - margin) late.push_back(static_cast<int>(i));
  }
  // More than half late means the "median" is itself a straggler's: no verdict.
  if (late.size() * 2 >= waits.size()) return {};
  return late;
}

bool StragglerPays(absl::Span<const double> rates, absl::Span<const int> stragglers,
                   double lateness_s, double bytes) {
  if (rates.size() < 3 || stragglers.empty()) return false;
  const std::vector<double> b = Cleaned(rates);
  const std::vector<double> shares = LinkShares(rates, stragglers);
  double weighted = WeightedSeconds(rates, shares, bytes);
  for (int s : stragglers) {
    if (s >= 0 && static_cast<size_t>(s) < b.size()) {
      weighted = std::max(weighted, lateness_s + bytes / b[static_cast<size_t>(s)]);
    }
  }
  const double ring = RingSeconds(rates, bytes);
  return lateness_s + ring - weighted >= (1 - kWeightedPaysBelow) * ring;
}

bool WeightedPays(absl::Span<const double> rates) {
  if (rates.size() < 3) return false;
  const std::vector<double> shares = LinkShares(rates);
  return WeightedSeconds(rates, shares, 1.0) <= kWeightedPaysBelow * RingSeconds(rates, 1.0);
}

}  // namespace overlap
