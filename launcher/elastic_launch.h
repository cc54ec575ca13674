// Elastic mode's hand-off: overlaprun parses and validates horovodrun's elastic flags like every
// other option, then runs the elastic driver, python/overlap/elastic_driver.py, which runs the job
// in generations: each one an ordinary overlaprun job (this binary again, without the elastic
// flags) on the hosts available then. docs/elastic.md describes the whole.
#ifndef OVERLAP_LAUNCHER_ELASTIC_LAUNCH_H_
#define OVERLAP_LAUNCHER_ELASTIC_LAUNCH_H_

#include <string>
#include <vector>

#include "launcher/mpirun_command.h"
#include "launcher/options.h"

namespace overlap::launcher {

// The driver's argv:
//   PYTHON -m overlap.elastic_driver --overlaprun SELF --min-np A --max-np B
//     (--discovery-script S | --hosts h:s,...) --slots-per-host K --reset-limit R
//     [--cooldown LOW HIGH] --elastic-timeout T [--dry-run]
//     --generation-args COUNT ARGS... -- PROGRAM ARGS...
// -np, --start-timeout and --verbose need no passing: -np only sets --min-np's default (every
// generation takes every usable slot up to B), and the others are in ARGS.
// PYTHON is $OVERLAP_ELASTIC_PYTHON from `context.environment` (set by the pip-installed
// overlaprun to its own interpreter), else python3. B is 0 and R is -1 when unbounded.
std::vector<std::string> ElasticDriverCommand(const LaunchOptions& options,
                                              const LaunchContext& context);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_ELASTIC_LAUNCH_H_
