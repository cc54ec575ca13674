#include "launcher/help.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "launcher/runtime_flags.h"

namespace overlap::launcher {

std::string HelpText() {
  std::string text =
      R"(usage: overlaprun -np N [-H host:slots,... | --hostfile FILE] [options] [--] program [args...]

Starts N ranks of program with Open MPI's mpirun. When a rank fails, the whole job stops and
overlaprun prints the rank, its host and its exit status or signal, and exits with that status
(128 + signal for a signal). Before launching it checks the arguments, the program and that every
host answers, and refuses with one line and exit status 2 when something is wrong.

placement:
  -np N, -n N             number of ranks (required, at least 1)
  -H, --hosts LIST        hosts and slots, e.g. -H node1:4,node2:4 (slots default to 1);
                          without -H or --hostfile every rank runs on this machine
  --hostfile FILE         one host per line: "node1 slots=4", "node1:4" or "node1"; # comments
  --oversubscribe         allow more ranks than slots (more ranks than cores on one machine)
  --rsh-agent CMD         how mpirun starts daemons on other hosts (default: ssh, or
                          $OMPI_MCA_plm_rsh_agent); also used for the reachability check
  --network-interface IF  interfaces or CIDR subnets for MPI and Open MPI control traffic,
                          e.g. --network-interface eth0 or --network-interface 10.77.0.0/24
  --tcp-only              use only TCP between ranks (no shared memory), e.g. for emulated hosts
  --start-timeout SECONDS host checks and the start of every rank must finish within this
                          (default 30); when given it also bounds the runtime's Init
                          (OVERLAP_START_TIMEOUT_S), e.g. --start-timeout 60

environment:
  -x NAME | -x NAME=VALUE forward a variable to every rank (repeatable), e.g. -x OMP_NUM_THREADS=1
                          OVERLAP_* variables, PATH, LD_LIBRARY_PATH and PYTHONPATH are always
                          forwarded

runtime (each sets one OVERLAP_* variable in every rank):
)";
  for (const env::Var* var : RuntimeFlags()) {
    absl::StrAppendFormat(&text, "  %s %s\n        %s\n        (sets %s)\n", var->flag.name,
                          var->flag.value, var->flag.help, var->name);
  }
  absl::StrAppend(&text, R"(
failure handling:
  --kill-grace SECONDS    after a rank fails, mpirun gets this long to stop the others before
                          overlaprun terminates it (default 10)
  --peer-grace SECONDS    a failed rank's end is reported at once, but mpirun aborts the job
                          only this much later (or when it stops that rank), so the other
                          ranks' own errors reach the output (0..60, default 2; 0 at once)
  --host-timeout SECONDS  end the job, naming the host, when mpirun's daemon on a host has not
                          answered for about this long (TCP keepalive; default Open MPI's, about
                          8 minutes); set it below --collective-timeout
  --no-rank-wrapper       start ranks directly; failures are then reported by mpirun only

elastic (horovodrun's flags; any of them makes the job elastic, docs/elastic.md):
  --min-np, --min-num-proc N
                          train on at least N ranks; with fewer slots the job waits for hosts
                          (default: -np; -np defaults to it)
  --max-np, --max-num-proc N
                          never more than N ranks (default: every slot)
  --host-discovery-script CMD
                          prints the hosts available now, one "host" or "host:slots" per line;
                          run every second (or give a fixed -H/--hostfile instead)
  --slots-per-host N      slots of a host the script lists without a count (default 1)
  --reset-limit N         fail after N restarts (hosts lost or added; default: no limit)
  --blacklist-cooldown-range MIN MAX
                          a failed host returns after MIN..MAX seconds, longer each time
                          (default: never)
  --elastic-timeout SECONDS
                          fail when fewer than --min-np slots stay available this long (600)

mpirun:
  --dry-run               print the mpirun command and exit (elastic: the first generation's)
  -v, --verbose           print the mpirun command before running it
  --mpirun PATH           mpirun to use (default: mpirun from PATH)
  --mpi-args "ARGS"       extra mpirun arguments, e.g. --mpi-args "--mca btl_tcp_links 2"
  -h, --help              this text

Running as root adds --allow-run-as-root; ranks are not bound to cores (--bind-to none); without
-H or --hostfile, --oversubscribe is implied so N may exceed this machine's cores.

examples:
  overlaprun -np 4 ./train --epochs 3
  overlaprun -np 8 -H node1:4,node2:4 --network-interface eth0 ./train
  overlaprun -np 2 --hostfile hosts.txt --fusion-threshold-mb 32 --timeline /tmp/tl.json ./train
  overlaprun -np 4 --stall-warning 5 --stall-timeout 20 --log-level info ./train
  overlaprun -np 4 --planner auto --profile-steps 10 ./train
  overlaprun --dry-run -np 2 -x OMP_NUM_THREADS=1 ./train
  overlaprun --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh python train.py
  tools/cluster/cluster.sh exec overlaprun -np 4 --hostfile /tmp/overlap-cluster/hostfile --tcp-only ./train
)");
  return text;
}

}  // namespace overlap::launcher
