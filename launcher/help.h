// overlaprun --help: every option with an example.
#ifndef OVERLAP_LAUNCHER_HELP_H_
#define OVERLAP_LAUNCHER_HELP_H_

#include <string>

namespace overlap::launcher {

std::string HelpText();

}  // namespace overlap::launcher

#endif  // OVERLAP_LAUNCHER_HELP_H_
