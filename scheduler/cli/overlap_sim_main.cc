// overlap-sim: plan and simulate data-parallel training iterations (see cli/sim_cli.h).
// Exit status: 0 on success, 2 for bad arguments, 1 for any other failure; errors are one line
// on stderr.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "scheduler/cli/sim_cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("%s\n", overlap::sched::CliUsage());
      return 0;
    }
  }
  auto options = overlap::sched::ParseCliArgs(args);
  if (!options.ok()) {
    std::fprintf(stderr, "overlap-sim: error: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  absl::Status status = overlap::sched::RunCli(*options, std::cout);
  if (!status.ok()) {
    std::fprintf(stderr, "overlap-sim: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
