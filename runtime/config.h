// Runtime configuration: defaults in one place, read from OVERLAP_* environment variables or set in
// code, validated before the runtime starts. What each variable accepts (range, values) is in the
// table of runtime/api/env_vars.h, shared with overlaprun; the ranges repeated below are its.
#ifndef OVERLAP_RUNTIME_CONFIG_H_
#define OVERLAP_RUNTIME_CONFIG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace overlap {

struct Config {
  // Ready allreduces with the same dtype, op and scaling are packed into one collective of at most
  // this many bytes. OVERLAP_FUSION_THRESHOLD (bytes, up to 1 TiB as every byte count); 0
  // disables fusion.
  int64_t fusion_threshold_bytes = int64_t{64} << 20;

  // An allreduce of one tensor of at least this many bytes is reduced in place on its own
  // instead of being copied into a fusion buffer: fusion saves per-collective latency, which a
  // large tensor barely pays, and costs two copies, which it pays in full.
  // OVERLAP_DIRECT_THRESHOLD (bytes); 0 fuses every tensor (Horovod's behaviour).
  int64_t direct_threshold_bytes = int64_t{1} << 20;

  // Collectives are spread over this many independent MPI communicators so that several can be in
  // flight at once. One link gains little from concurrent collectives (they split its bandwidth),
  // so the default is one; planners use more for separate links. OVERLAP_NUM_CHANNELS, 1..16.
  int num_channels = 1;

  // Allreduces of at least 64 KiB run in two levels: within each host, across hosts, within each
  // host again (collectives/hierarchical_allreduce.h), so that when L ranks share a host only
  // 1/L of each rank's buffer crosses the network. Needs the same number of ranks on every host
  // and more than one host and rank per host; otherwise the runtime stays flat and rank 0 says
  // why once. Every rank must set the same value. OVERLAP_HIERARCHICAL_ALLREDUCE, 0 or 1.
  int hierarchical_allreduce = 0;

  // Allreduces of at least 1 MiB shaped by measured link rates (collectives/link_adaptation.h):
  // "auto" probes each rank's link where links can differ (3 or more hosts, one rank per host,
  // or hierarchical allreduces) and gives a slow link a smaller share where that is predicted to
  // take under 0.75 of the ring's time (a late rank: where it saves a quarter of it); "on" always
  // runs the weighted allreduce; "off" never probes. Every rank must set the same value.
  // OVERLAP_ADAPTIVE_ALLREDUCE.
  std::string adaptive_allreduce = "auto";

  // Two-stage buckets in scheduled plans (scheduler/plan.h): where ranks share hosts (the same
  // number on each of two or more; OVERLAP_HOST_ID or the host names) and allreduces are not
  // hierarchical already, the runtime fits the two-stage allreduce's cost beside the flat one's
  // and the planners run a bucket two-stage where that is predicted cheaper ("auto"), every
  // uncompressed allreduce bucket ("on"), or none ("off"). Host tensors and CUDA tensors staged
  // through MPI; under NCCL the buckets run flat (NCCL's own algorithms follow the topology).
  // Every rank must set the same value. OVERLAP_TWO_STAGE.
  std::string two_stage = "auto";

  // The host this rank counts as for the hierarchical allreduce; empty: the MPI processor name
  // (the host name). For ranks in containers that share a machine but not a hostname, and for
  // tests. OVERLAP_HOST_ID.
  std::string host_id;

  // Warn when some ranks have submitted a tensor and others have not for this long, naming both
  // sets. OVERLAP_STALL_WARNING_S.
  double stall_warning_s = 60.0;

  // Fail the handles of a tensor that has been stalled this long, and stop the runtime when a
  // plan vote has waited this long for a rank's forward marker (PlanScheduler::CheckVoteWait,
  // which warns after stall_warning_s). OVERLAP_STALL_TIMEOUT_S; must be at least
  // stall_warning_s.
  double stall_timeout_s = 300.0;

  // A negotiation round or collective that has not completed after this long means a peer process
  // died or the network is gone: every pending handle fails and the runtime stops.
  // OVERLAP_COLLECTIVE_TIMEOUT_S.
  double collective_timeout_s = 300.0;

  // How the coordinator waits while its collectives are in flight and nothing has finished for a
  // millisecond (runtime/control/host_load.h): "spin" keeps calling MPI, yielding the core between
  // calls (the fastest progress where each rank has a core of its own); "nap" sleeps 1 ms
  // between calls, waking at once for new work; "auto" naps while the host is oversubscribed
  // (its load average at least its CPUs), else spins. OVERLAP_COORDINATOR_WAIT. "spin" is the
  // default: napping paid 1.3x on TensorFlow's emulated steps but cost 5-15% of the step on
  // real CPU compute under torch (docs/tuning.md, "Coordinator wait"); overlap.tensorflow's
  // init() asks for "auto" unless the variable is set (its graph executor's threads need the
  // cores).
  std::string coordinator_wait = "spin";

  // Rank 0 starts a negotiation round once every rank has new work, or this long after the
  // first one did, so that tensors submitted close together are negotiated and fused together.
  // OVERLAP_CYCLE_TIME_MS, 0..1000; 0 starts a round at once.
  double cycle_time_ms = 0.5;

  // Planned execution (DDP's frozen buckets): once the same set of allreduces has been agreed in
  // this many consecutive steps, every rank freezes that step as a plan and launches its buckets
  // in plan order without negotiation, checking consistency alongside each collective.
  // OVERLAP_PLAN_AFTER_STEPS, 0..1000; 0 keeps negotiating every operation (Horovod's behaviour).
  int plan_after_steps = 3;

  // Planned units that may run ahead of their consistency checks (runtime/planes/planned_mode.h):
  // a check waits in its link's queue behind the data, and with a window of one it gated every
  // later unit (bench/planned_checks: the p90 of a 30-bucket step 1.52x the unchecked one's with
  // 1, 1.27x with 4). Every rank must set the same value. OVERLAP_PLAN_CHECK_WINDOW, 1..64.
  int plan_check_window = 4;

  // Communication planner. "observed" freezes the step negotiation observed (DDP-style launch
  // units). Any other name is a scheduler planner (scheduler/planner.h): wfbp, fusion, mgwfbp,
  // bytescheduler, usbyte, dear, deft or auto. Those need the step markers (StartForward...):
  // the runtime measures profile_steps steps, fits the link cost, rank 0 plans and broadcasts
  // the plan, and every rank adopts it at the same step. OVERLAP_PLANNER.
  std::string planner = "observed";

  // Steps measured (median) before a scheduled plan is made. OVERLAP_PROFILE_STEPS, 1..1000.
  int profile_steps = 5;

  // Planner options (scheduler/planner.h PlannerOptions). OVERLAP_STALENESS (0..16; plans with
  // delays are refused until delayed updates exist), OVERLAP_MAX_PERIOD (1..64),
  // OVERLAP_BUDGET (in [0, 1e6], or -1 for the planner's bound max(staleness, (max_period - 1)
  // / 2); 0 by default: on the Fashion-MNIST sweep, docs/time_to_accuracy.md, every plan that
  // delayed anything lost more than 0.5 point, so delays are the user's choice),
  // OVERLAP_PARTITION_BYTES and OVERLAP_CREDIT_BYTES (ByteScheduler; 0 tunes them by simulation).
  int staleness = 0;
  int max_period = 1;
  double budget = 0;
  int64_t partition_bytes = 0;
  int64_t credit_bytes = 0;

  // Re-plan when the measured step (its compute windows) drifts from its first measurement under
  // the plan by more than this fraction, by more than twice the steps' spread, and by at least
  // replan_min_ms, at two checks in a row (runtime/plan/drift_policy.h).
  // OVERLAP_REPLAN_DRIFT, 0..10; 0 never re-plans on drift. OVERLAP_REPLAN_MIN_MS, 0..1e6.
  double replan_drift = 0.25;
  double replan_min_ms = 5;
  // After a drift, a plan made from the drifted steps replaces the plan in force only if the
  // simulator gives it a step at least this fraction shorter than the plan in force's on the
  // same drifted profile; otherwise the plan in force stays (a drop costs its held steps, a
  // new profiling and auto's trials). OVERLAP_REPLAN_MIN_GAIN, 0..100; 0: only a plan made
  // again exactly stays.
  double replan_min_gain = 0.05;

  // What each bucket of a plan costs the coordinator beyond its collective when the step's
  // gradients are on a GPU (an event wait, a copy kernel, a collective launch, a fence: about
  // 0.2 ms on an H200, docs/gpu.md), added to the fitted latency the planners plan with, so that
  // they do not cut a step into more buckets than that cost repays. OVERLAP_DEVICE_BUCKET_US,
  // 0..1e6.
  double device_bucket_us = 200;

  // auto: the number of its best-simulated synchronous candidates (within 15% of the best) that
  // each run a few steps before the fastest measured one is kept; 1 keeps the simulator's choice.
  // OVERLAP_AUTO_TRIALS, 1..8.
  int auto_trials = 3;

  // Seconds to wait for every rank to connect its control socket during Init.
  // OVERLAP_START_TIMEOUT_S.
  double start_timeout_s = 60.0;

  // Chrome trace of every tensor's negotiation, queueing, copies and collectives; empty disables.
  // OVERLAP_TIMELINE.
  std::string timeline_path;

  // Compressor for float32 sum/average allreduces that do not name one
  // (AllreduceOptions::compression), e.g. "fp16" or "topk:ratio=0.01"; other allreduces are
  // not compressed. OVERLAP_COMPRESSION; "none" sends gradients as they are.
  std::string compression = "none";

  // Which executor moves CUDA tensors (host tensors always use MPI). OVERLAP_EXECUTOR:
  //   auto  NCCL when overlap was built with CUDA and every rank has a GPU of its own; otherwise
  //         MPI through pinned host memory (ranks sharing one GPU, a build without NCCL);
  //   nccl  NCCL, or an error on every rank naming why it cannot run;
  //   mpi   MPI through pinned host memory.
  std::string executor = "auto";

  // trace, debug, info, warn, error, critical or off. OVERLAP_LOG_LEVEL.
  std::string log_level = "warn";

  // Reads every OVERLAP_* variable over the defaults above, each parsed and checked by the table
  // (runtime/api/env_vars.h), then Validate. A value that does not parse or is out of range gives
  // InvalidArgument naming the variable, the value and what it accepts. An OVERLAP_* variable the
  // table does not list is logged as a warning (probably misspelt) and ignored.
  // Horovod's HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME, HOROVOD_TIMELINE and
  // HOROVOD_HIERARCHICAL_ALLREDUCE are read as their OVERLAP_* counterparts when those are unset.
  //
  // `settings` are given in code (an adapter's init(planner="deft", staleness=1)), each by its
  // OVERLAP_* name with its value as text: read as that variable would be, over the environment
  // (and its Horovod alias). A name the table does not list as a runtime setting is
  // InvalidArgument naming it: a setting in code is never ignored.
  using Setting = std::pair<std::string, std::string>;
  static absl::StatusOr<Config> FromEnvironment(const std::vector<Setting>& settings = {});

  // Every runtime setting of the table by its OVERLAP_* name, with this configuration's value as
  // text that FromEnvironment reads back to the same value (the adapters read the configuration
  // the runtime runs with through it: overlap_config_json in runtime/c_api.h).
  std::vector<Setting> AsSettings() const;

  // InvalidArgument naming the variable, the value and what it accepts when a field is outside
  // the table's range, the stall timeout is below the stall warning, or the compression spec is
  // not one CompressionStage accepts.
  absl::Status Validate() const;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONFIG_H_
