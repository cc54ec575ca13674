// overlap-sim's argument parsing and run loop, as a library so tests can drive it.
//
// overlap-sim (--profile FILE | --model NAME) (--workers N | --sweep-workers LIST)
//             --planners LIST|all
//             (--cost linear --alpha-us A --beta-us-per-mb B |
//              --cost ring|tree|rd --latency-us L --bandwidth-gbit G |
//              --cost hierarchical --latency-us L --bandwidth-gbit G --ranks-per-host R
//                [--intra-latency-us LI] [--intra-bandwidth-gbit GI])
//             [--channels K] [--staleness S] [--budget B] [--max-period P] [--json]
//             [--timeline FILE]
//             [--compressor NAME [--compression-ratio R]]
//             [--slow-link HOST:FRACTION]... [--adaptive-allreduce auto|off]
// --cost hierarchical: hosts of R ranks sharing one NIC (L, G), their ranks linked at LI (default
// 1 us) and GI (default 100 Gbit/s); allreduces run as OVERLAP_HIERARCHICAL_ALLREDUCE does
// (scheduler/cost_model.h). R must divide every worker count.
// --channels K gives every worker K identical links (multi-rail); only deft uses more than one.
// --plan-json FILE writes each plan as JSON; with several planners or worker counts, FILE (and
// the --timeline FILE) get "-<planner>-<workers>" before the extension.
// --slow-link HOST:FRACTION (repeatable; --cost ring or hierarchical) runs host HOST's link at
// FRACTION (0 < FRACTION <= 1) of --bandwidth-gbit. Hosts count from 0; a ring has one rank per
// host, a hierarchical channel N / R hosts. Allreduces then cost what the runtime's adaptive
// allreduce runs (scheduler/cost_model.h, "Slow links"); --adaptive-allreduce off models
// OVERLAP_ADAPTIVE_ALLREDUCE=off, always the ring at the slowest link (default auto).
// --compressor compresses every bucket (PlannerOptions::compressor says which and how much).
// LIST is comma-separated; a worker list may use "a,b,...,z" for the geometric series a, b,
// b*b/a, ... up to z (e.g. 4,8,...,2048).
#ifndef OVERLAP_SCHEDULER_CLI_SIM_CLI_H_
#define OVERLAP_SCHEDULER_CLI_SIM_CLI_H_

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cost_model.h"
#include "scheduler/planner.h"

namespace overlap::sched {

struct CliOptions {
  std::string profile_path;  // exactly one of profile_path and model is set
  std::string model;
  std::vector<int> workers;
  std::vector<std::string> planners;
  Algorithm cost = Algorithm::kRing;
  double alpha_us = -1, beta_us_per_mb = -1;
  double latency_us = -1, bandwidth_gbit = -1;
  // --cost hierarchical (every allreduce in three phases), or ring (allreduce buckets may run
  // two-stage: cost_model.h, "Two-stage allreduces"); 0: one rank per host.
  int ranks_per_host = 0;
  // --two-stage auto|on|off, with --cost ring --ranks-per-host: two-stage buckets where they pay,
  // every allreduce bucket, or none (the flat ring alone, as before the form existed).
  std::string two_stage = "auto";
  double intra_latency_us = 1, intra_bandwidth_gbit = 100;
  int channels = 1;
  std::map<int, double> slow_links;  // --slow-link: host -> fraction of the bandwidth
  bool adaptive_allreduce = true;    // --adaptive-allreduce auto (true) or off
  bool looks_ahead = false;          // --looks-ahead on: every tensor's optimizer looks ahead
  PlannerOptions planner_options;
  bool json = false;
  std::string timeline_path;
  std::string plan_path;  // --plan-json: Plan::ToJson() of each plan
};

// InvalidArgument naming the flag and the problem: unknown flag, missing value, value not a
// number or out of range, missing required flag, conflicting flags, unknown planner.
absl::StatusOr<CliOptions> ParseCliArgs(const std::vector<std::string>& args);

// Loads the profile, then for each worker count and planner plans, simulates and writes one line
// to `out` (JSON with --json). Returns the first error (unreadable or malformed profile, planner
// or simulation failure, timeline not writable).
absl::Status RunCli(const CliOptions& options, std::ostream& out);

// Usage text for --help and errors.
const char* CliUsage();

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_CLI_SIM_CLI_H_
