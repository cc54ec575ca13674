// overlaprun: starts a data-parallel job with mpirun and stops all of it when any rank fails.
// See docs/launcher.md and `overlaprun --help`.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "launcher/elastic_launch.h"
#include "launcher/help.h"
#include "launcher/mpirun_command.h"
#include "launcher/parse_args.h"
#include "launcher/preflight.h"
#include "launcher/rank_wrapper.h"
#include "launcher/reachability.h"
#include "launcher/run_job.h"
#include "launcher/validate.h"

extern char** environ;

namespace overlap::launcher {
namespace {

// Launch refused: bad arguments or a failed check. Distinct from any rank's own status.
constexpr int kRefused = 2;

int Refuse(const absl::Status& status) {
  std::fprintf(stderr, "overlaprun: %s\n", std::string(status.message()).c_str());
  return kRefused;
}

LaunchContext CurrentContext() {
  LaunchContext context;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq != std::string::npos) {
      context.environment.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
    }
  }
  context.running_as_root = geteuid() == 0;
  char self[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  context.self_path = n > 0 ? std::string(self, static_cast<size_t>(n)) : "overlaprun";
  return context;
}

// For the elastic driver: the launch was refused before mpirun started, blaming the host that did
// not answer when there is one (run_job.h writes the report of a job that ran).
void WriteRefusalReport(const std::string& path, const absl::Status& status) {
  const auto host = status.GetPayload(kUnreachableHostPayload);
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "{\"status\": %d, \"refused\": true, \"blamed_host\": \"%s\"}\n", kRefused,
                 host ? absl::CEscape(std::string(*host)).c_str() : "");
    std::fclose(f);
  }
}

// Replaces this process with the elastic driver (elastic_launch.h); returns only when it cannot.
int RunElasticDriver(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& arg : command) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  std::fflush(stdout);
  execvp(argv[0], argv.data());
  std::fprintf(stderr,
               "overlaprun: elastic mode runs its driver with %s (python -m "
               "overlap.elastic_driver), which could not start: %s; set OVERLAP_ELASTIC_PYTHON "
               "to a Python that has the overlap package\n",
               argv[0], std::strerror(errno));
  return 1;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<ParsedCommand> parsed = ParseArgs(args);
  if (!parsed.ok()) {
    return Refuse(parsed.status());
  }
  const LaunchOptions& options = parsed->options;
  switch (parsed->mode) {
    case ParsedCommand::Mode::kHelp:
      std::fputs(HelpText().c_str(), stdout);
      return 0;
    case ParsedCommand::Mode::kRankWrapper:
      return RunRankWrapper(options.program, options.peer_grace_s);
    case ParsedCommand::Mode::kLaunch:
      break;
  }
  if (absl::Status s = Validate(options); !s.ok()) {
    return Refuse(s);
  }
  if (options.elastic.enabled) {
    return RunElasticDriver(ElasticDriverCommand(options, CurrentContext()));
  }
  const std::vector<std::string> command = BuildMpirunCommand(options, CurrentContext());
  if (options.dry_run) {
    std::printf("%s\n", ShellQuoted(command).c_str());
    return 0;
  }
  if (absl::Status s = Preflight(options); !s.ok()) {
    if (!options.failure_report.empty()) {
      WriteRefusalReport(options.failure_report, s);
    }
    return Refuse(s);
  }
  if (options.verbose) {
    std::fprintf(stderr, "overlaprun: %s\n", ShellQuoted(command).c_str());
  }
  std::fflush(stdout);
  return RunJob(command, options);
}

}  // namespace
}  // namespace overlap::launcher

int main(int argc, char** argv) { return overlap::launcher::Main(argc, argv); }
