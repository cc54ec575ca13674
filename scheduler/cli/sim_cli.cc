#include "scheduler/cli/sim_cli.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "scheduler/builtin.h"
#include "scheduler/profile.h"
#include "scheduler/simulator.h"

namespace overlap::sched {

const char* CliUsage() {
  return "usage: overlap-sim (--profile FILE | --model NAME) (--workers N | --sweep-workers "
         "4,8,...,2048) --planners LIST|all (--cost linear --alpha-us A --beta-us-per-mb B | "
         "--cost ring|tree|rd|hierarchical --latency-us L --bandwidth-gbit G [--ranks-per-host R "
         "[--intra-latency-us LI] [--intra-bandwidth-gbit GI] [--two-stage auto|on|off]]) "
         "[--staleness S] [--budget B] "
         "[--max-period P] [--channels K] [--compressor NAME [--compression-ratio R]] "
         "[--slow-link HOST:FRACTION]... [--adaptive-allreduce auto|off] [--looks-ahead on|off] "
         "[--json] "
         "[--timeline FILE] [--plan-json FILE]";
}

namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view cause) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", cause));
}

absl::StatusOr<double> NonNegative(absl::string_view flag, absl::string_view value) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < 0) {
    return FlagError(flag, absl::StrCat("expected a number >= 0, got '", value, "'"));
  }
  return v;
}

absl::StatusOr<int> IntAtLeast(absl::string_view flag, absl::string_view value, int min) {
  int v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < min) {
    return FlagError(flag, absl::StrCat("expected an integer >= ", min, ", got '", value, "'"));
  }
  return v;
}

absl::StatusOr<std::vector<int>> WorkerList(absl::string_view flag, absl::string_view value) {
  std::vector<std::string> parts = absl::StrSplit(value, ',');
  std::vector<int> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == "...") {
      if (out.size() < 2 || i + 2 != parts.size()) {
        return FlagError(flag, "'...' needs two values before it and one after (4,8,...,2048)");
      }
      auto last = IntAtLeast(flag, parts[i + 1], 1);
      if (!last.ok()) {
        return last.status();
      }
      const double ratio = static_cast<double>(out.back()) / out[out.size() - 2];
      if (!(ratio > 1)) {
        return FlagError(flag, "the series before '...' must grow");
      }
      for (double next = out.back() * ratio; std::llround(next) <= *last; next *= ratio) {
        out.push_back(static_cast<int>(std::llround(next)));
      }
      if (out.back() != *last) {
        out.push_back(*last);
      }
      break;
    }
    auto n = IntAtLeast(flag, parts[i], 1);
    if (!n.ok()) {
      return n.status();
    }
    out.push_back(*n);
  }
  return out;
}

// --slow-link HOST:FRACTION into `links`.
absl::Status AddSlowLink(absl::string_view flag, absl::string_view value,
                         std::map<int, double>* links) {
  const std::vector<absl::string_view> parts = absl::StrSplit(value, ':');
  int host = -1;
  double fraction = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &host) || host < 0 ||
      !absl::SimpleAtod(parts[1], &fraction) || !std::isfinite(fraction) || fraction <= 0 ||
      fraction > 1) {
    return FlagError(flag, absl::StrCat("expected HOST:FRACTION (a host from 0, a fraction of the "
                                        "bandwidth in (0, 1]), got '",
                                        value, "'"));
  }
  if (!links->emplace(host, fraction).second) {
    return FlagError(flag, absl::StrCat("host ", host, " given twice"));
  }
  return absl::OkStatus();
}

// The slow links' hosts exist at every worker count.
absl::Status CheckSlowLinks(const CliOptions& o) {
  if (o.slow_links.empty()) return absl::OkStatus();
  if (o.cost != Algorithm::kRing && o.cost != Algorithm::kHierarchical) {
    return FlagError("--slow-link", absl::StrCat("only with --cost ring or hierarchical, not ",
                                                 AlgorithmName(o.cost)));
  }
  const int host = o.slow_links.rbegin()->first;
  for (int w : o.workers) {
    const int hosts = o.cost == Algorithm::kRing ? w : w / o.ranks_per_host;
    if (host >= hosts) {
      return FlagError("--slow-link",
                       absl::StrCat("host ", host, " is not among the ", hosts, " hosts of ", w,
                                    " workers (hosts count from 0)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CliOptions> ParseCliArgs(const std::vector<std::string>& args) {
  CliOptions o;
  bool have_cost = false, have_staleness = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--json") {
      o.json = true;
      continue;
    }
    static const char* kValued[] = {"--profile",
                                    "--model",
                                    "--workers",
                                    "--planners",
                                    "--cost",
                                    "--alpha-us",
                                    "--beta-us-per-mb",
                                    "--latency-us",
                                    "--bandwidth-gbit",
                                    "--staleness",
                                    "--timeline",
                                    "--plan-json",
                                    "--sweep-workers",
                                    "--budget",
                                    "--max-period",
                                    "--channels",
                                    "--compressor",
                                    "--compression-ratio",
                                    "--ranks-per-host",
                                    "--intra-latency-us",
                                    "--intra-bandwidth-gbit",
                                    "--slow-link",
                                    "--adaptive-allreduce",
                                    "--looks-ahead",
                                    "--two-stage"};
    if (std::find(std::begin(kValued), std::end(kValued), flag) == std::end(kValued)) {
      return FlagError(flag, "unknown flag (see --help)");
    }
    if (i + 1 >= args.size()) {
      return FlagError(flag, "missing value");
    }
    const std::string& v = args[++i];
    absl::Status st;
    auto set_num = [&](double* dst) {
      auto r = NonNegative(flag, v);
      if (r.ok()) {
        *dst = *r;
      }
      return r.status();
    };
    if (flag == "--profile") {
      o.profile_path = v;
    } else if (flag == "--model") {
      o.model = v;
    } else if (flag == "--workers" || flag == "--sweep-workers") {
      if (!o.workers.empty()) {
        return FlagError(flag, "--workers and --sweep-workers conflict");
      }
      auto w = flag == "--workers"
                   ? absl::StatusOr<std::vector<int>>([&]() -> absl::StatusOr<std::vector<int>> {
                       auto n = IntAtLeast(flag, v, 1);
                       if (!n.ok()) {
                         return n.status();
                       }
                       return std::vector<int>{*n};
                     }())
                   : WorkerList(flag, v);
      if (!w.ok()) {
        return w.status();
      }
      o.workers = *w;
    } else if (flag == "--planners") {
      if (v == "all") {
        o.planners = PlannerNames();
      } else {
        for (absl::string_view p : absl::StrSplit(v, ',')) {
          const auto& names = PlannerNames();
          if (std::find(names.begin(), names.end(), p) == names.end()) {
            return FlagError(flag, absl::StrCat("unknown planner '", p,
                                                "'; valid: ", absl::StrJoin(names, ", "), ", all"));
          }
          o.planners.emplace_back(p);
        }
      }
    } else if (flag == "--cost") {
      auto a = ParseAlgorithm(v);
      if (!a.ok()) {
        return FlagError(flag, a.status().message());
      }
      o.cost = *a;
      have_cost = true;
    } else if (flag == "--alpha-us") {
      st = set_num(&o.alpha_us);
    } else if (flag == "--beta-us-per-mb") {
      st = set_num(&o.beta_us_per_mb);
    } else if (flag == "--latency-us") {
      st = set_num(&o.latency_us);
    } else if (flag == "--bandwidth-gbit") {
      st = set_num(&o.bandwidth_gbit);
      if (st.ok() && o.bandwidth_gbit == 0) {
        st = FlagError(flag, "must be > 0");
      }
    } else if (flag == "--ranks-per-host") {
      auto r = IntAtLeast(flag, v, 1);
      if (!r.ok()) {
        return r.status();
      }
      o.ranks_per_host = *r;
    } else if (flag == "--intra-latency-us") {
      st = set_num(&o.intra_latency_us);
    } else if (flag == "--intra-bandwidth-gbit") {
      st = set_num(&o.intra_bandwidth_gbit);
      if (st.ok() && o.intra_bandwidth_gbit == 0) {
        st = FlagError(flag, "must be > 0");
      }
    } else if (flag == "--staleness") {
      auto s = IntAtLeast(flag, v, 0);
      if (!s.ok()) {
        return s.status();
      }
      o.planner_options.staleness = *s;
      have_staleness = true;
    } else if (flag == "--budget") {
      st = set_num(&o.planner_options.budget);
    } else if (flag == "--max-period") {
      auto p = IntAtLeast(flag, v, 1);
      if (!p.ok()) {
        return p.status();
      }
      o.planner_options.max_period = *p;
    } else if (flag == "--compressor") {
      o.planner_options.compressor = v;
    } else if (flag == "--compression-ratio") {
      st = set_num(&o.planner_options.compression_ratio);
    } else if (flag == "--channels") {
      auto k = IntAtLeast(flag, v, 1);
      if (!k.ok()) {
        return k.status();
      }
      if (*k > 16) {
        return FlagError(flag, "at most 16 links");
      }
      o.channels = *k;
    } else if (flag == "--slow-link") {
      st = AddSlowLink(flag, v, &o.slow_links);
    } else if (flag == "--adaptive-allreduce") {
      if (v != "auto" && v != "off") {
        return FlagError(flag, absl::StrCat("expected auto or off, got '", v, "'"));
      }
      o.adaptive_allreduce = v == "auto";
    } else if (flag == "--looks-ahead") {
      if (v != "on" && v != "off") {
        return FlagError(flag, absl::StrCat("expected on or off, got '", v, "'"));
      }
      o.looks_ahead = v == "on";
    } else if (flag == "--two-stage") {
      if (v != "auto" && v != "on" && v != "off") {
        return FlagError(flag, absl::StrCat("expected auto, on or off, got '", v, "'"));
      }
      o.two_stage = v;
      o.planner_options.two_stage_always = v == "on";
    } else if (flag == "--timeline") {
      o.timeline_path = v;
    } else if (flag == "--plan-json") {
      o.plan_path = v;
    }
    if (!st.ok()) {
      return st;
    }
  }
  (void)have_staleness;
  if (o.profile_path.empty() == o.model.empty()) {
    return FlagError("--profile/--model", "give exactly one of them");
  }
  if (o.workers.empty()) {
    return FlagError("--workers", "required (or --sweep-workers)");
  }
  if (o.planners.empty()) {
    return FlagError("--planners", "required");
  }
  if (!have_cost) {
    return FlagError("--cost", "required (linear, ring, tree, rd or hierarchical)");
  }
  if (o.cost == Algorithm::kHierarchical && o.ranks_per_host == 0) {
    return FlagError("--ranks-per-host", "required with --cost hierarchical");
  }
  if (o.ranks_per_host > 0 && o.cost != Algorithm::kHierarchical && o.cost != Algorithm::kRing) {
    return FlagError("--ranks-per-host", "only with --cost hierarchical or ring");
  }
  if (o.cost == Algorithm::kRing && o.ranks_per_host > 1 && !o.slow_links.empty()) {
    return FlagError("--slow-link",
                     "with --cost ring, only at one rank per host (use --cost hierarchical)");
  }
  for (int w : o.workers) {
    if (o.ranks_per_host > 0 && w % o.ranks_per_host != 0) {
      return FlagError(
          "--ranks-per-host",
          absl::StrCat(o.ranks_per_host, " ranks per host do not divide ", w, " workers"));
    }
  }
  absl::Status links = CheckSlowLinks(o);
  if (!links.ok()) {
    return links;
  }
  if (o.cost == Algorithm::kLinear) {
    if (o.alpha_us < 0 || o.beta_us_per_mb < 0) {
      return FlagError("--cost linear", "needs --alpha-us and --beta-us-per-mb");
    }
    if (o.latency_us >= 0 || o.bandwidth_gbit >= 0) {
      return FlagError("--cost linear",
                       "takes --alpha-us/--beta-us-per-mb, not "
                       "--latency-us/--bandwidth-gbit");
    }
  } else {
    if (o.latency_us < 0 || o.bandwidth_gbit <= 0) {
      return FlagError(absl::StrCat("--cost ", AlgorithmName(o.cost)),
                       "needs --latency-us and --bandwidth-gbit");
    }
    if (o.alpha_us >= 0 || o.beta_us_per_mb >= 0) {
      return FlagError(absl::StrCat("--cost ", AlgorithmName(o.cost)),
                       "takes --latency-us/--bandwidth-gbit, not --alpha-us/--beta-us-per-mb");
    }
  }
  return o;
}

namespace {

std::string OutputPath(const std::string& base, const std::string& planner, int workers,
                       bool many) {
  if (!many) {
    return base;
  }
  const size_t dot = base.rfind('.');
  const std::string suffix = absl::StrCat("-", planner, "-", workers);
  if (dot == std::string::npos || base.find('/', dot) != std::string::npos) {
    return base + suffix;
  }
  return base.substr(0, dot) + suffix + base.substr(dot);
}

}  // namespace

absl::Status RunCli(const CliOptions& o, std::ostream& out) {
  absl::StatusOr<Profile> profile =
      o.model.empty() ? LoadProfileJson(o.profile_path) : LoadBuiltinProfile(o.model);
  if (!profile.ok()) {
    return profile.status();
  }
  // As the adapters' default correction: delayed plans pay look-ahead's optimizer steps.
  if (o.looks_ahead) {
    for (TensorInfo& t : profile->tensors) t.looks_ahead = true;
  }
  const bool many = o.workers.size() * o.planners.size() > 1;
  for (int workers : o.workers) {
    CostModel cost =
        o.cost == Algorithm::kLinear ? CostModel::Linear(o.alpha_us, o.beta_us_per_mb)
        : o.cost == Algorithm::kHierarchical
            ? CostModel::Hierarchical(workers, o.ranks_per_host, o.latency_us, o.bandwidth_gbit,
                                      o.intra_latency_us, o.intra_bandwidth_gbit)
            : CostModel::Algorithmic(o.cost, workers, o.latency_us, o.bandwidth_gbit);
    if (o.cost == Algorithm::kRing && o.ranks_per_host > 1 && o.two_stage != "off") {
      // The flat ring over every rank, offering two-stage allreduces on the same links.
      cost = CostModel::Hierarchical(workers, o.ranks_per_host, o.latency_us, o.bandwidth_gbit,
                                     o.intra_latency_us, o.intra_bandwidth_gbit);
      cost.channels[0].algorithm = Algorithm::kRing;
    }
    ChannelCost& net = cost.channels[0];
    net.adaptive_allreduce = o.adaptive_allreduce;
    if (!o.slow_links.empty()) {
      std::vector<double> rates(static_cast<size_t>(net.hosts()), net.bandwidth_bytes_per_s);
      for (const auto& [host, fraction] : o.slow_links) {
        rates[static_cast<size_t>(host)] *= fraction;
      }
      net.set_host_bandwidth_bytes_per_s(std::move(rates));
    }
    for (int c = 1; c < o.channels; ++c) {
      cost.channels.push_back(cost.channels[0]);
      cost.channels.back().name = absl::StrCat("net", c);
    }
    // With K identical links the lower bound splits the fused collective evenly over them.
    const double fused_ms =
        cost.Ms(0, Collective::kAllreduce, static_cast<double>(profile->total_bytes) / o.channels);
    const double ideal_ms = std::max(profile->compute_ms(), fused_ms);
    // What synchronous plans can reach at best: the fused collective plus the compute that
    // no synchronous schedule overlaps (SynchronousBoundMs).
    const double sync_bound_ms = SynchronousBoundMs(*profile, fused_ms);
    for (const std::string& name : o.planners) {
      absl::StatusOr<Plan> plan = MakePlan(name, *profile, cost, o.planner_options);
      if (!plan.ok()) {
        return plan.status();
      }
      SimOptions sim_options;
      sim_options.record_trace = !o.timeline_path.empty();
      absl::StatusOr<SimResult> sim = Simulate(*profile, *plan, cost, sim_options);
      if (!sim.ok()) {
        return sim.status();
      }
      if (!o.timeline_path.empty()) {
        const std::string path = OutputPath(o.timeline_path, name, workers, many);
        std::ofstream trace(path);
        trace << sim->trace_json;
        if (!trace) {
          return absl::UnavailableError(absl::StrCat(path, ": cannot write timeline"));
        }
      }
      if (!o.plan_path.empty()) {
        const std::string path = OutputPath(o.plan_path, name, workers, many);
        std::ofstream plan_out(path);
        plan_out << plan->ToJson();
        if (!plan_out) {
          return absl::UnavailableError(absl::StrCat(path, ": cannot write plan"));
        }
      }
      const double efficiency = ideal_ms / sim->iteration_ms;
      const auto two_stage_buckets = std::count_if(plan->buckets.begin(), plan->buckets.end(),
                                                   [](const Bucket& b) { return b.two_stage; });
      if (o.json) {
        nlohmann::ordered_json line = {
            // keys in the documented order
            {"model", profile->model},
            {"workers", workers},
            {"planner", plan->planner},
            {"iter_ms", sim->iteration_ms},
            {"compute_ms", sim->compute_ms},
            {"comm_ms", sim->comm_ms},
            {"exposed_comm_ms", sim->exposed_comm_ms},
            {"ideal_ms", ideal_ms},
            {"efficiency", efficiency},
            {"buckets", plan->buckets.size()},
            {"max_delay", plan->MaxDelay()},
            {"budget_used", plan->budget_used},
            {"sync_bound_ms", sync_bound_ms},
            {"two_stage_buckets", two_stage_buckets},
        };
        out << line.dump() << "\n";
      } else {
        out << absl::StrFormat(
            "%-12s N=%-5d %-20s iter %9.2f ms  compute %8.2f  comm %9.2f  exposed %9.2f  "
            "ideal %9.2f  eff %.3f  sync-bound %9.2f  buckets %4zu  two-stage %4d  delay<=%d  "
            "budget %.2f  (%d iterations%s)\n",
            profile->model, workers, plan->planner, sim->iteration_ms, sim->compute_ms,
            sim->comm_ms, sim->exposed_comm_ms, ideal_ms, efficiency, sync_bound_ms,
            plan->buckets.size(), static_cast<int>(two_stage_buckets), plan->MaxDelay(),
            plan->budget_used, sim->iterations,
            sim->converged ? "" : ", not steady");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap::sched
