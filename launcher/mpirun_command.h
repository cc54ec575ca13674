// Turns validated options into the Open MPI mpirun command line. Pure: everything it depends on
// from the machine comes in through LaunchContext, so tests pin the exact command.
#ifndef OVERLAP_LAUNCHER_MPIRUN_COMMAND_H_
#define OVERLAP_LAUNCHER_MPIRUN_COMMAND_H_

#include <string>
#include <utility>
#include <vector>

#include "launcher/options.h"

namespace overlap::launcher {

// What the command depends on besides the options.
struct LaunchContext {
  // overlaprun's environment; OVERLAP_* variables in it are forwarded to every rank.
  std::vector<std::pair<std::string, std::string>> environment;
  // Open MPI refuses to run as root unless told; containers and CI run as root.
  bool running_as_root = false;
  // Absolute path of this overlaprun, which mpirun runs on every host as the rank wrapper.
  std::string self_path;
};

// The argv of mpirun, program last:
//   mpirun [--allow-run-as-root] -np N [-H h:s,...] --bind-to none --map-by slot [--oversubscribe]
//          [--mca plm_rsh_agent A] [--mca btl tcp,self] [--mca {btl,oob}_tcp_if_include I]
//          -x VAR... [mpi args] [self --rank-wrapper --] program args...
// Without hosts every rank runs here and --oversubscribe is always passed (see the .cc).
// Binding is off because on small machines (and with more ranks than cores) Open MPI's default
// core binding piles ranks onto the same core or refuses to start.
std::vector<std::string> BuildMpirunCommand(const LaunchOptions& options,
                                            const LaunchContext& context);

// The variables forwarded with -x, in order: the runtime options' OVERLAP_* values, OVERLAP_*
// variables from the environment that no option overrides, PATH, LD_LIBRARY_PATH and PYTHONPATH
// when set, then the user's -x entries. Each entry is "NAME" or "NAME=VALUE".
std::vector<std::string> ForwardedVariables(const LaunchOptions& options,
                                            const LaunchContext& context);

// The command as one shell-quoted line, for --dry-run and --verbose.
std::string ShellQuoted(const std::vector<std::string>& argv);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_MPIRUN_COMMAND_H_
