// overlap-cluster-sim: many training jobs on one simulated cluster (see cluster_cli.h).
// Exit status: 0 on success, 2 for bad arguments, 1 for any other failure (a bad trace
// included); errors are one line on stderr.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "scheduler/cluster/cluster_cli.h"

int main(int argc, char** argv) {
  using overlap::sched::cluster::ClusterCliUsage;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("%s\n", ClusterCliUsage());
      return 0;
    }
  }
  auto options = overlap::sched::cluster::ParseClusterCliArgs(args);
  if (!options.ok()) {
    std::fprintf(stderr, "overlap-cluster-sim: error: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  absl::Status status = overlap::sched::cluster::RunClusterCli(*options, std::cout);
  if (!status.ok()) {
    std::fprintf(stderr, "overlap-cluster-sim: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
