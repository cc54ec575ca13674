// What one overlaprun invocation asks for, after parsing and before any check against the machine.
// Defaults live here and nowhere else; parse_args.h fills it, validate.h checks it, preflight.h
// checks it against the hosts, mpirun_command.h turns it into an mpirun command line.
#ifndef OVERLAP_LAUNCHER_OPTIONS_H_
#define OVERLAP_LAUNCHER_OPTIONS_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace overlap::launcher {

// One host and how many ranks may be placed on it.
struct HostSlots {
  std::string host;
  int slots = 1;
};

// One -x entry: forward NAME with its value from overlaprun's environment, or set NAME=VALUE.
struct ForwardedVar {
  std::string name;
  std::optional<std::string> value;
};

// Elastic mode: horovodrun's elastic flags. The job runs in generations, each an ordinary
// overlaprun job on the hosts available then; python/overlap/elastic_driver.py runs them.
struct ElasticOptions {
  // Any elastic flag given (--min-np, --max-np, --host-discovery-script, ...).
  bool enabled = false;
  // Fewest ranks to train with; 0: -np. Below it the job waits (at most timeout_s) for hosts.
  int min_ranks = 0;
  // Most ranks; 0: as many as there are slots.
  int max_ranks = 0;
  // Command whose output lists the hosts available now, one "host" or "host:slots" per line.
  // Empty: the -H/--hostfile hosts are the only ones (a host that fails is blacklisted).
  std::string discovery_script;
  // Slots of a host the discovery output lists without a count; 0: 1.
  int slots_per_host = 0;
  // Most restarts (host lost, joined or failed) before the job fails; -1: no limit.
  int reset_limit = -1;
  // A failed host stays out for a time in [min, max] seconds, growing with each failure;
  // unset: for the rest of the job.
  std::optional<std::pair<int, int>> cooldown_s;
  // How long the job may wait for at least min_ranks slots before it fails.
  double timeout_s = 600;
};

// The wrapper's default peer grace; mpirun_command.cc passes --peer-grace only for another value.
inline constexpr double kDefaultPeerGraceS = 2.0;

struct LaunchOptions {
  // -np: number of ranks; 0 means "not given", which validation rejects.
  int num_ranks = 0;

  // -H or --hostfile, in order. Empty means every rank runs on this machine.
  std::vector<HostSlots> hosts;
  // Where `hosts` came from, for messages: "-H" or the hostfile path.
  std::string hosts_source;

  // Allow more ranks than slots (passes --oversubscribe to mpirun).
  bool oversubscribe = false;
  // Print the mpirun command and exit without checking hosts or launching.
  bool dry_run = false;
  // Print the mpirun command to stderr before running it.
  bool verbose = false;
  // Only TCP between ranks (btl tcp,self): what the namespace cluster and debugging need.
  bool tcp_only = false;
  // Wrap every rank in `overlaprun --rank-wrapper` so a failure names rank, host and status.
  bool wrap_ranks = true;

  // Interfaces or CIDR subnets for MPI traffic and Open MPI's own control traffic.
  std::string network_interface;
  // Program mpirun uses to start its daemons on other hosts; empty keeps Open MPI's (ssh).
  std::string rsh_agent;

  // -x entries in the order given.
  std::vector<ForwardedVar> forwarded;
  // OVERLAP_* variables set by runtime options such as --fusion-threshold-mb, already converted.
  std::map<std::string, std::string> runtime_env;

  // Bounds the host checks before launch, the time until every rank's program is running, and
  // (when given) the runtime's Init (OVERLAP_START_TIMEOUT_S).
  double start_timeout_s = 30.0;
  // After the first rank fails, mpirun gets this long to stop the others before overlaprun
  // terminates it: a host that vanished from the network can keep mpirun waiting forever.
  double kill_grace_s = 10.0;
  // After its program fails, a rank's wrapper reports the failure at once but ends (which makes
  // mpirun abort the job) only this long later, or when mpirun stops it: the other ranks, which
  // usually fail on their own within a second of a peer, get to print their own errors instead
  // of being killed mid-way. 0 ends at once. Below kill_grace_s.
  double peer_grace_s = kDefaultPeerGraceS;
  // When > 0 (at least 6), mpirun declares a host lost when its daemon there has not answered
  // for about this long (TCP keepalive on Open MPI's control connections, mpirun_command.cc), so
  // a host cut off from the network ends the job with its name. 0 keeps Open MPI's own (300 s
  // idle, then 9 probes 20 s apart: 8 minutes). Set it below the runtime's collective timeout.
  double host_timeout_s = 0;

  // The mpirun to run, and extra arguments passed to it verbatim before the program.
  std::string mpirun = "mpirun";
  std::vector<std::string> mpi_args;

  ElasticOptions elastic;
  // In elastic mode, the arguments as given less -np, -H/--hostfile, the elastic flags and the
  // program: what every generation's overlaprun is started with (the driver adds the rest).
  std::vector<std::string> generation_args;

  // Internal (the elastic driver's): write how the job ended, as JSON, to this file.
  std::string failure_report;

  // The program and its arguments.
  std::vector<std::string> program;
};

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_OPTIONS_H_
