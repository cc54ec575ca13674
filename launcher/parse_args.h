// The overlaprun command line. Parsing only reads the arguments (and a hostfile when one is named);
// it checks syntax, not whether the options make a runnable job: that is validate.h.
#ifndef OVERLAP_LAUNCHER_PARSE_ARGS_H_
#define OVERLAP_LAUNCHER_PARSE_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "launcher/options.h"

namespace overlap::launcher {

struct ParsedCommand {
  enum class Mode {
    kLaunch,       // run (or with --dry-run print) a job
    kHelp,         // print --help
    kRankWrapper,  // internal: run one rank's program and report how it ended (rank_wrapper.h)
  };
  Mode mode = Mode::kLaunch;
  LaunchOptions options;
};

// Parses the arguments after argv[0]. Options take their value as the next argument or after '=';
// the program starts at "--" or at the first argument that is not an option. InvalidArgument
// naming the option for an unknown option, a missing value, or a value that does not parse.
absl::StatusOr<ParsedCommand> ParseArgs(absl::Span<const std::string> args);

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_PARSE_ARGS_H_
