#include "scheduler/cluster/cluster_cli.h"

#include <cmath>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "scheduler/builtin.h"
#include "scheduler/cluster/cluster_sim.h"
#include "scheduler/cluster/iteration_model.h"

namespace overlap::sched::cluster {

const char* ClusterCliUsage() {
  return "usage: overlap-cluster-sim (--preset paper [--jobs N] [--seed S] | --trace FILE) "
         "[--placement LIST|all] [--communication LIST|all] [--planner NAME] [--staleness S] "
         "[--eta E] [--link-utilization U] [--servers N] [--gpus-per-server G] [--nic-gbit B] "
         "[--intra-gbit B] [--mean-interarrival-s X] [--min-iterations I] [--max-iterations I] "
         "[--json] [--timeline FILE] [--write-trace FILE]";
}

namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view cause) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", cause));
}

absl::StatusOr<double> Number(absl::string_view flag, absl::string_view value, bool positive) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < 0 || (positive && v == 0)) {
    return FlagError(
        flag, absl::StrCat("expected a number ", positive ? "> 0" : ">= 0", ", got '", value, "'"));
  }
  return v;
}

absl::StatusOr<int64_t> Integer(absl::string_view flag, absl::string_view value, int64_t min) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < min) {
    return FlagError(flag, absl::StrCat("expected an integer >= ", min, ", got '", value, "'"));
  }
  return v;
}

std::vector<std::string> AllPlacements() { return {"first-fit", "lwf-1", "lwf-2", "lwf-4"}; }

absl::Status ParsePolicies(const std::string& value, ClusterCliOptions& o, bool placement) {
  std::vector<std::string> names = value == "all"
                                       ? (placement ? AllPlacements() : CommPolicyNames())
                                       : std::vector<std::string>(absl::StrSplit(value, ','));
  for (const std::string& name : names) {
    if (placement) {
      auto p = ParsePlacement(name);
      if (!p.ok()) {
        return FlagError("--placement", p.status().message());
      }
      o.placements.push_back(*p);
    } else {
      auto c = ParseCommPolicy(name);
      if (!c.ok()) {
        return FlagError("--communication", c.status().message());
      }
      o.communications.push_back(*c);
    }
  }
  return absl::OkStatus();
}

// Applies one "--flag value" pair.
absl::Status Apply(const std::string& flag, const std::string& value, ClusterCliOptions& o) {
  auto set_int = [&](int64_t min, auto& field) -> absl::Status {
    auto v = Integer(flag, value, min);
    if (!v.ok()) {
      return v.status();
    }
    if (*v > (int64_t{1} << 30)) {
      return FlagError(flag, absl::StrCat("too large: ", value));
    }
    field = static_cast<std::remove_reference_t<decltype(field)>>(*v);
    return absl::OkStatus();
  };
  auto set_num = [&](bool positive, double& field) -> absl::Status {
    auto v = Number(flag, value, positive);
    if (!v.ok()) {
      return v.status();
    }
    field = *v;
    return absl::OkStatus();
  };
  if (flag == "--preset") {
    if (value != "paper") {
      return FlagError(flag, absl::StrCat("unknown preset '", value, "' (expected paper)"));
    }
    o.preset = value;
  } else if (flag == "--trace") {
    o.trace_path = value;
  } else if (flag == "--jobs") {
    return set_int(1, o.generator.jobs);
  } else if (flag == "--seed") {
    uint64_t seed = 0;
    if (!absl::SimpleAtoi(value, &seed)) {
      return FlagError(flag, absl::StrCat("expected an unsigned integer, got '", value, "'"));
    }
    o.generator.seed = seed;
  } else if (flag == "--placement") {
    return ParsePolicies(value, o, true);
  } else if (flag == "--communication") {
    return ParsePolicies(value, o, false);
  } else if (flag == "--planner") {
    const auto& names = PlannerNames();
    if (std::find(names.begin(), names.end(), value) == names.end()) {
      return FlagError(flag, absl::StrCat("unknown planner '", value, "'"));
    }
    o.planner = value;
  } else if (flag == "--staleness") {
    return set_int(0, o.planner_options.staleness);
  } else if (flag == "--eta") {
    return set_num(false, o.spec.contention.eta);
  } else if (flag == "--link-utilization") {
    double u = 0;
    if (!absl::SimpleAtod(value, &u) || !std::isfinite(u) || u <= 0 || u > 1) {
      return FlagError(flag, absl::StrCat("expected a number in (0, 1], got '", value, "'"));
    }
    o.spec.contention.link_utilization = u;
  } else if (flag == "--servers") {
    return set_int(1, o.spec.servers);
  } else if (flag == "--gpus-per-server") {
    return set_int(1, o.spec.gpus_per_server);
  } else if (flag == "--nic-gbit") {
    return set_num(true, o.spec.nic_gbit);
  } else if (flag == "--intra-gbit") {
    return set_num(true, o.spec.intra_gbit);
  } else if (flag == "--mean-interarrival-s") {
    return set_num(false, o.generator.mean_interarrival_s);
  } else if (flag == "--min-iterations") {
    return set_int(1, o.generator.min_iterations);
  } else if (flag == "--max-iterations") {
    return set_int(1, o.generator.max_iterations);
  } else if (flag == "--timeline") {
    o.timeline_path = value;
  } else if (flag == "--write-trace") {
    o.write_trace_path = value;
  } else {
    return FlagError(flag, "unknown flag");
  }
  return absl::OkStatus();
}

std::string PairPath(const std::string& path, const std::string& suffix) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) {
    return path + suffix;
  }
  return path.substr(0, dot) + suffix + path.substr(dot);
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot write"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterCliOptions> ParseClusterCliArgs(const std::vector<std::string>& args) {
  ClusterCliOptions o;
  bool seen_jobs = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--json") {
      o.json = true;
      continue;
    }
    if (flag.rfind("--", 0) != 0) {
      return FlagError(flag, "unexpected argument");
    }
    if (i + 1 >= args.size()) {
      return FlagError(flag, flag == "--jobs" || flag == "--trace" || flag == "--preset" ||
                                     flag == "--placement" || flag == "--communication"
                                 ? "missing value"
                                 : "missing value (or unknown flag)");
    }
    seen_jobs = seen_jobs || flag == "--jobs";
    absl::Status status = Apply(flag, args[++i], o);
    if (!status.ok()) {
      return status;
    }
  }
  if (o.preset.empty() == o.trace_path.empty()) {
    return FlagError("--preset/--trace", "give exactly one of --preset paper and --trace FILE");
  }
  if (!o.trace_path.empty() && seen_jobs) {
    return FlagError("--jobs", "only with --preset (a trace has its own jobs)");
  }
  if (o.generator.max_iterations < o.generator.min_iterations) {
    return FlagError("--max-iterations", "must be >= --min-iterations");
  }
  if (o.placements.empty()) {
    for (const std::string& name : AllPlacements()) {
      o.placements.push_back(*ParsePlacement(name));
    }
  }
  if (o.communications.empty()) {
    for (const std::string& name : CommPolicyNames()) {
      o.communications.push_back(*ParseCommPolicy(name));
    }
  }
  absl::Status spec = o.spec.Validate();
  if (!spec.ok()) {
    return FlagError("cluster", spec.message());
  }
  return o;
}

absl::Status RunClusterCli(const ClusterCliOptions& o, std::ostream& out) {
  absl::StatusOr<Trace> trace =
      o.trace_path.empty() ? GenerateTrace(o.generator) : LoadTraceJson(o.trace_path);
  if (!trace.ok()) {
    return trace.status();
  }
  absl::Status valid = ValidateTrace(*trace, o.spec.gpus(), BuiltinModelNames(), PlannerNames(),
                                     o.trace_path.empty() ? "generated trace" : o.trace_path);
  if (!valid.ok()) {
    return valid;
  }
  if (!o.write_trace_path.empty()) {
    absl::Status w = WriteFile(o.write_trace_path, trace->ToJson());
    if (!w.ok()) {
      return w;
    }
  }
  IterationModelCache cache(o.spec, o.planner_options);
  IterationModelFn model_fn = [&](const TraceJob& job, bool spans) {
    return cache.Get(job.model, job.planner.empty() ? o.planner : job.planner, job.workers, spans);
  };
  const bool several = o.placements.size() * o.communications.size() > 1;
  for (const PlacementPolicy& placement : o.placements) {
    for (const CommPolicy& comm : o.communications) {
      ClusterSimOptions sim;
      sim.placement = placement;
      sim.communication = comm;
      sim.record_timeline = !o.timeline_path.empty();
      auto r = SimulateCluster(*trace, o.spec, sim, model_fn);
      if (!r.ok()) {
        return r.status();
      }
      if (sim.record_timeline) {
        const std::string path =
            several ? PairPath(o.timeline_path, absl::StrCat("-", placement.Name(), "-", comm.name))
                    : o.timeline_path;
        absl::Status w = WriteFile(path, r->timeline_json);
        if (!w.ok()) {
          return w;
        }
      }
      if (o.json) {
        nlohmann::ordered_json line = {{"placement", placement.Name()},
                                       {"communication", comm.name},
                                       {"avg_jct_s", r->avg_jct_s},
                                       {"median_jct_s", r->median_jct_s},
                                       {"p95_jct_s", r->p95_jct_s},
                                       {"makespan_s", r->makespan_s},
                                       {"gpu_util", r->gpu_util},
                                       {"jobs", r->jobs.size()},
                                       {"planner", o.planner},
                                       {"staleness", o.planner_options.staleness},
                                       {"eta", o.spec.contention.eta},
                                       {"link_utilization", o.spec.contention.link_utilization},
                                       {"transfers", r->transfers},
                                       {"shared_transfers", r->shared_transfers},
                                       {"max_nic_sharing", r->max_nic_sharing}};
        if (!o.preset.empty()) {
          line["seed"] = o.generator.seed;
          line["mean_interarrival_s"] = o.generator.mean_interarrival_s;
        }
        out << line.dump() << "\n";
      } else {
        out << absl::StrFormat(
            "%-10s %-9s avg JCT %9.1f s  median %9.1f s  p95 %9.1f s  makespan %9.1f s  "
            "GPU util %.3f  shared %d/%d\n",
            placement.Name(), comm.name, r->avg_jct_s, r->median_jct_s, r->p95_jct_s, r->makespan_s,
            r->gpu_util, r->shared_transfers, r->transfers);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace overlap::sched::cluster
