#include "scheduler/cost_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/link_shares.h"

namespace overlap::sched {

const char* CollectiveName(Collective op) {
  switch (op) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllgather:
      return "allgather";
  }
  return "unknown";
}

const char* AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kLinear:
      return "linear";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kRecursiveDoubling:
      return "rd";
    case Algorithm::kHierarchical:
      return "hierarchical";
  }
  return "unknown";
}

absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name) {
  if (name == "linear") {
    return Algorithm::kLinear;
  }
  if (name == "ring") {
    return Algorithm::kRing;
  }
  if (name == "tree") {
    return Algorithm::kTree;
  }
  if (name == "rd" || name == "recursive-doubling") {
    return Algorithm::kRecursiveDoubling;
  }
  if (name == "hierarchical") {
    return Algorithm::kHierarchical;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown cost model '", name,
                   "'; valid: linear, ring, tree, rd (recursive-doubling), hierarchical"));
}

namespace {

// The segment collectives/segmented_allreduce.h and hierarchical_allreduce.h cut buffers into.
constexpr double kSegmentBytes = 8.0 * 1024 * 1024;

double PerByte(double bandwidth) { return std::isinf(bandwidth) ? 0 : 1 / bandwidth; }

}  // namespace

// The rates, and what the runtime's adaptive allreduce makes of them (cost_model.h, "Slow
// links"). WeightedSeconds and RingSeconds are linear in the bytes, so they are taken once, for
// one byte.
struct HostLinks {
  std::vector<double> rates;
  bool uneven = false;  // two rates differ
  double slowest = 0;
  bool weighted_pays = false;      // WeightedPays(rates)
  double weighted_s_per_byte = 0;  // WeightedSeconds(rates, LinkShares(rates), 1)
  double ring_s_per_byte = 0;      // RingSeconds(rates, 1)
};

namespace {

// The bandwidth term of an allreduce of `bytes` over uneven links, as the runtime runs it.
double UnevenAllreduceSeconds(const HostLinks& links, bool weighted, double bytes) {
  return bytes * (weighted ? links.weighted_s_per_byte : links.ring_s_per_byte);
}

// The pipelined three-phase allreduce of the hierarchical model (cost_model.h), whose cross-host
// phase runs at `bandwidth` (uniform) or over `uneven` links, weighted or not.
double HierarchicalAllreduceSeconds(const ChannelCost& c, double bandwidth, const HostLinks* uneven,
                                    bool weighted, double bytes) {
  const double r = std::max(1, c.ranks_per_host);
  const double h = std::max(1.0, c.workers / r);
  const double k = std::max(1.0, std::ceil(bytes / kSegmentBytes));
  const double s = bytes / k;
  const double local =
      (r - 1) * c.intra_latency_s + (r - 1) / r * s * PerByte(c.intra_bandwidth_bytes_per_s);
  const double cross =
      2 * (h - 1) * c.latency_s + (uneven != nullptr ? UnevenAllreduceSeconds(*uneven, weighted, s)
                                                     : 2 * (h - 1) / h * s * PerByte(bandwidth));
  return 2 * local + cross + (k - 1) * std::max(local, cross);
}

}  // namespace

const std::vector<double>& ChannelCost::host_bandwidth_bytes_per_s() const {
  static const std::vector<double> kNone;
  return host_links_ != nullptr ? host_links_->rates : kNone;
}

void ChannelCost::set_host_bandwidth_bytes_per_s(std::vector<double> rates) {
  if (rates.empty()) {
    host_links_ = nullptr;
    return;
  }
  auto links = std::make_shared<HostLinks>();
  links->uneven =
      std::adjacent_find(rates.begin(), rates.end(), std::not_equal_to<double>()) != rates.end();
  links->slowest = *std::min_element(rates.begin(), rates.end());
  links->weighted_pays = WeightedPays(rates);
  links->weighted_s_per_byte = WeightedSeconds(rates, LinkShares(rates), 1.0);
  links->ring_s_per_byte = RingSeconds(rates, 1.0);
  links->rates = std::move(rates);
  host_links_ = std::move(links);
}

int ChannelCost::hosts() const {
  switch (algorithm) {
    case Algorithm::kRing:
      return workers;
    case Algorithm::kHierarchical:
      return ranks_per_host > 0 ? workers / ranks_per_host : 0;
    default:
      return 0;
  }
}

bool ChannelCost::RunsWeighted(double bytes) const {
  return adaptive_allreduce && bytes >= static_cast<double>(kWeightedMinBytes) &&
         host_links_ != nullptr && host_links_->uneven && host_links_->weighted_pays;
}

void ChannelCost::DivideBandwidth(double factor) {
  bandwidth_bytes_per_s /= factor;
  std::vector<double> rates = host_bandwidth_bytes_per_s();
  for (double& rate : rates) rate /= factor;
  set_host_bandwidth_bytes_per_s(std::move(rates));
}

bool ChannelCost::OffersTwoStage() const {
  if (algorithm == Algorithm::kLinear) return two_stage.set();
  return algorithm == Algorithm::kRing && ranks_per_host > 1 && workers / ranks_per_host >= 2 &&
         intra_bandwidth_bytes_per_s > 0 && host_links_ == nullptr;
}

bool ChannelCost::TwoStagePays(double bytes) const {
  return OffersTwoStage() && FormSeconds(Collective::kAllreduce, bytes, true) <
                                 FlatSeconds(Collective::kAllreduce, bytes);
}

double ChannelCost::Seconds(Collective op, double bytes) const {
  const double flat = FlatSeconds(op, bytes);
  if (op != Collective::kAllreduce || !OffersTwoStage()) return flat;
  return std::min(flat, FormSeconds(op, bytes, true));
}

double ChannelCost::FormSeconds(Collective op, double bytes, bool two_stage_form) const {
  if (!two_stage_form || op != Collective::kAllreduce || !OffersTwoStage()) {
    return FlatSeconds(op, bytes);
  }
  if (algorithm == Algorithm::kLinear) {
    return two_stage.alpha_s + two_stage.beta_s_per_byte * bytes;
  }
  return HierarchicalAllreduceSeconds(*this, bandwidth_bytes_per_s, nullptr, false, bytes);
}

double ChannelCost::FlatSeconds(Collective op, double bytes) const {
  if (algorithm == Algorithm::kLinear) {
    const double full = alpha_s + beta_s_per_byte * bytes;
    if (op == Collective::kAllreduce) return full;
    const LinearTerm& own = op == Collective::kReduceScatter ? reduce_scatter : allgather;
    return own.set() ? own.alpha_s + own.beta_s_per_byte * bytes : full / 2;
  }
  const double n = workers;
  if (workers <= 1) {
    return 0;  // nothing to exchange
  }
  // Uneven host links (cost_model.h, "Slow links"); otherwise the ring's pace is every link's.
  const HostLinks* uneven =
      host_links_ != nullptr && host_links_->uneven ? host_links_.get() : nullptr;
  if (uneven != nullptr && algorithm == Algorithm::kRing && op == Collective::kAllreduce) {
    return 2 * (n - 1) * latency_s + UnevenAllreduceSeconds(*uneven, RunsWeighted(bytes), bytes);
  }
  const double bandwidth = host_links_ != nullptr ? host_links_->slowest : bandwidth_bytes_per_s;
  const double p = std::ceil(std::log2(n));
  const double per_byte = PerByte(bandwidth);
  const double m = bytes * per_byte;  // seconds to push the whole buffer once
  const double share = (n - 1) / n * m;
  switch (algorithm) {
    case Algorithm::kHierarchical:
      if (op == Collective::kAllreduce) {
        return HierarchicalAllreduceSeconds(*this, bandwidth, uneven, RunsWeighted(bytes), bytes);
      }
      return (n - 1) * latency_s + share;
    case Algorithm::kRing:
      return op == Collective::kAllreduce ? 2 * (n - 1) * latency_s + 2 * share
                                          : (n - 1) * latency_s + share;
    case Algorithm::kRecursiveDoubling:
      return op == Collective::kAllreduce ? p * (latency_s + m) : p * latency_s + share;
    case Algorithm::kTree:
      // Binomial tree: reduce p(L + m) then broadcast p(L + m). Reduce-scatter is the reduce
      // followed by a binomial scatter (p L + share); allgather a binomial gather of the shares
      // (p L + share) followed by the broadcast p(L + m).
      return op == Collective::kAllreduce ? 2 * p * (latency_s + m)
                                          : p * (latency_s + m) + p * latency_s + share;
    case Algorithm::kLinear:
      break;
  }
  return 0;
}

namespace {

// The host rates' own checks (CostModel::Validate names the channel).
absl::Status ValidateHostRates(const ChannelCost& c) {
  const std::vector<double>& rates = c.host_bandwidth_bytes_per_s();
  if (rates.empty()) return absl::OkStatus();
  if (c.hosts() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("host link rates apply to ring and hierarchical channels only, not ",
                     AlgorithmName(c.algorithm)));
  }
  if (rates.size() != static_cast<size_t>(c.hosts())) {
    return absl::InvalidArgumentError(
        absl::StrCat(rates.size(), " host link rates for ", c.hosts(), " hosts"));
  }
  for (size_t h = 0; h < rates.size(); ++h) {
    if (!std::isfinite(rates[h]) || rates[h] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host ", h, " link rate must be a finite number > 0 bytes/s, got ", rates[h]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

CostModel CostModel::Linear(double alpha_us, double beta_us_per_mb) {
  ChannelCost c;
  c.algorithm = Algorithm::kLinear;
  c.alpha_s = alpha_us * 1e-6;
  c.beta_s_per_byte = beta_us_per_mb * 1e-6 / 1e6;
  return CostModel{{c}};
}

CostModel CostModel::Algorithmic(Algorithm algorithm, int workers, double latency_us,
                                 double bandwidth_gbit) {
  ChannelCost c;
  c.algorithm = algorithm;
  c.workers = workers;
  c.latency_s = latency_us * 1e-6;
  c.bandwidth_bytes_per_s = bandwidth_gbit * 1e9 / 8;
  return CostModel{{c}};
}

CostModel CostModel::Hierarchical(int workers, int ranks_per_host, double latency_us,
                                  double bandwidth_gbit, double intra_latency_us,
                                  double intra_bandwidth_gbit) {
  CostModel model = Algorithmic(Algorithm::kHierarchical, workers, latency_us, bandwidth_gbit);
  ChannelCost& c = model.channels[0];
  c.ranks_per_host = ranks_per_host;
  c.intra_latency_s = intra_latency_us * 1e-6;
  c.intra_bandwidth_bytes_per_s = intra_bandwidth_gbit * 1e9 / 8;
  return model;
}

CostModel CostModel::WithWorkers(int workers) const {
  CostModel copy = *this;
  for (ChannelCost& c : copy.channels) {
    c.workers = workers;
    if (!c.host_bandwidth_bytes_per_s().empty()) {
      std::vector<double> rates = c.host_bandwidth_bytes_per_s();
      rates.resize(static_cast<size_t>(std::max(0, c.hosts())), c.bandwidth_bytes_per_s);
      c.set_host_bandwidth_bytes_per_s(std::move(rates));
    }
  }
  return copy;
}

absl::Status CostModel::Validate() const {
  if (channels.empty()) {
    return absl::InvalidArgumentError("cost model has no channel");
  }
  for (size_t i = 0; i < channels.size(); ++i) {
    const ChannelCost& c = channels[i];
    auto bad = [&](const char* field, double v) {
      return absl::InvalidArgumentError(absl::StrCat("cost model channel ", i, " '", c.name,
                                                     "': ", field, " must be >= 0, got ", v));
    };
    auto ok = [](double v) { return !std::isnan(v) && v >= 0; };
    if (!ok(c.alpha_s) || std::isinf(c.alpha_s)) {
      return bad("alpha", c.alpha_s);
    }
    if (!ok(c.beta_s_per_byte) || std::isinf(c.beta_s_per_byte)) {
      return bad("beta", c.beta_s_per_byte);
    }
    if (!ok(c.latency_s) || std::isinf(c.latency_s)) {
      return bad("latency", c.latency_s);
    }
    for (const auto& [term, what] :
         {std::pair{&c.reduce_scatter, "reduce_scatter"}, std::pair{&c.allgather, "allgather"},
          std::pair{&c.two_stage, "two_stage"}}) {
      if (!term->set()) continue;
      if (std::isinf(term->alpha_s)) {
        return bad(absl::StrCat(what, " alpha").c_str(), term->alpha_s);
      }
      if (!ok(term->beta_s_per_byte) || std::isinf(term->beta_s_per_byte)) {
        return bad(absl::StrCat(what, " beta").c_str(), term->beta_s_per_byte);
      }
    }
    if (c.algorithm != Algorithm::kLinear && !(c.bandwidth_bytes_per_s > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost model channel ", i, " '", c.name, "': bandwidth must be > 0"));
    }
    if (c.workers < 1) {
      return absl::InvalidArgumentError(absl::StrCat("cost model channel ", i, " '", c.name,
                                                     "': workers must be >= 1, got ", c.workers));
    }
    if (c.algorithm == Algorithm::kHierarchical ||
        (c.algorithm == Algorithm::kRing && c.ranks_per_host != 1)) {
      if (c.ranks_per_host < 1 || c.workers % c.ranks_per_host != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("cost model channel ", i, " '", c.name, "': ", c.ranks_per_host,
                         " ranks per host do not divide ", c.workers, " workers"));
      }
      if (!ok(c.intra_latency_s) || std::isinf(c.intra_latency_s)) {
        return bad("intra-host latency", c.intra_latency_s);
      }
      if (!(c.intra_bandwidth_bytes_per_s > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("cost model channel ", i, " '", c.name,
                                                       "': intra-host bandwidth must be > 0"));
      }
    }
    if (c.algorithm == Algorithm::kRing && c.ranks_per_host > 1 &&
        !c.host_bandwidth_bytes_per_s().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost model channel ", i, " '", c.name,
                       "': host link rates need one rank per host on a ring channel (",
                       c.ranks_per_host, " given); use a hierarchical channel"));
    }
    absl::Status rates = ValidateHostRates(c);
    if (!rates.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost model channel ", i, " '", c.name, "': ", rates.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ChannelCost> FitLinear(absl::Span<const CostSample> samples) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(samples.size());
  for (const CostSample& s : samples) {
    if (!std::isfinite(s.bytes) || !std::isfinite(s.seconds) || s.bytes < 0 || s.seconds < 0) {
      return absl::InvalidArgumentError(absl::StrCat("FitLinear: sample (", s.bytes, " bytes, ",
                                                     s.seconds, " s) is not finite and >= 0"));
    }
    sx += s.bytes;
    sy += s.seconds;
    sxx += s.bytes * s.bytes;
    sxy += s.bytes * s.seconds;
  }
  const double denom = n * sxx - sx * sx;
  if (samples.size() < 2 || !(denom > 1e-12 * n * sxx)) {
    return absl::InvalidArgumentError(
        "FitLinear: need samples of at least two distinct sizes to fit alpha and beta");
  }
  ChannelCost c;
  c.name = "fitted";
  c.algorithm = Algorithm::kLinear;
  c.beta_s_per_byte = (n * sxy - sx * sy) / denom;
  c.alpha_s = (sy - c.beta_s_per_byte * sx) / n;
  if (c.alpha_s < 0) {
    c.alpha_s = 0;
    c.beta_s_per_byte = sxy / sxx;
  }
  if (c.beta_s_per_byte < 0) {  // time falls with size: only noise, keep the mean as alpha
    c.beta_s_per_byte = 0;
    c.alpha_s = sy / n;
  }
  return c;
}

absl::StatusOr<ChannelCost> FitLinkCost(absl::Span<const CostSample> samples, double min_alpha_s,
                                        double min_beta_s_per_byte) {
  absl::StatusOr<ChannelCost> fitted = FitLinear(samples);
  if (!fitted.ok()) return fitted.status();
  double fastest = samples.front().seconds;
  double largest_bytes = 0, largest_seconds = 0;
  for (const CostSample& s : samples) {
    fastest = std::min(fastest, s.seconds);
    if (s.bytes > largest_bytes) {
      largest_bytes = s.bytes;
      largest_seconds = s.seconds;
    }
  }
  const double floor = std::isfinite(min_alpha_s) ? std::max(0.0, min_alpha_s) : 0.0;
  const double alpha = std::max(std::min(fitted->alpha_s, fastest), floor);
  if (alpha != fitted->alpha_s) {
    double num = 0, den = 0;
    for (const CostSample& s : samples) {
      num += s.bytes * (s.seconds - alpha);
      den += s.bytes * s.bytes;
    }
    fitted->alpha_s = alpha;
    fitted->beta_s_per_byte = den > 0 ? std::max(0.0, num / den) : 0;
  }
  if (fitted->beta_s_per_byte <= 0 && largest_bytes > 0) {
    // Noise swamped the sizes (a loaded machine): a bandwidth-only bound from the largest sample
    // keeps the planners from believing that bytes are free.
    fitted->beta_s_per_byte = largest_seconds > fitted->alpha_s
                                  ? (largest_seconds - fitted->alpha_s) / largest_bytes
                                  : largest_seconds / largest_bytes;
  }
  if (std::isfinite(min_beta_s_per_byte)) {
    fitted->beta_s_per_byte = std::max(fitted->beta_s_per_byte, min_beta_s_per_byte);
  }
  return fitted;
}

std::optional<double> FitStillHolds(absl::Span<const CostSample> samples, const ChannelCost& fit,
                                    double tolerance) {
  if (samples.size() < kMinSamplesForHeldFit || tolerance < 1) return std::nullopt;
  std::vector<double> ratios;
  for (const CostSample& sample : samples) {
    const double predicted = fit.Seconds(Collective::kAllreduce, sample.bytes);
    if (!(predicted > 0) || !std::isfinite(sample.seconds)) return std::nullopt;
    ratios.push_back(sample.seconds / predicted);
  }
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  const double median = ratios[ratios.size() / 2];
  if (median < 1 / tolerance || median > tolerance) return std::nullopt;
  return median;
}

}  // namespace overlap::sched
