#include "launcher/preflight.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "launcher/reachability.h"

namespace overlap::launcher {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

absl::StatusOr<std::string> ResolveProgram(const std::string& program,
                                           const std::string& path_env) {
  if (program.find('/') != std::string::npos) {
    struct stat st {};
    if (stat(program.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat("program '", program, "' does not exist"));
    }
    if (!IsExecutableFile(program)) {
      return absl::PermissionDeniedError(
          absl::StrCat("program '", program, "' is not an executable file"));
    }
    return program;
  }
  for (absl::string_view dir : absl::StrSplit(path_env, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", program);
    if (IsExecutableFile(candidate)) {
      return candidate;
    }
  }
  return absl::NotFoundError(absl::StrCat("program '", program, "' is not found in PATH"));
}

absl::Status Preflight(const LaunchOptions& options) {
  const char* path = getenv("PATH");
  absl::StatusOr<std::string> program = ResolveProgram(options.program[0], path ? path : "");
  if (!program.ok()) {
    return program.status();
  }
  if (!ResolveProgram(options.mpirun, path ? path : "").ok()) {
    return absl::NotFoundError(absl::StrCat("mpirun '", options.mpirun,
                                            "' is not found or not executable; install Open MPI "
                                            "(openmpi-bin) or pass --mpirun PATH"));
  }
  auto timeline = options.runtime_env.find("OVERLAP_TIMELINE");
  if (timeline != options.runtime_env.end()) {
    std::string dir = timeline->second.substr(0, timeline->second.rfind('/') + 1);
    struct stat st {};
    if (!dir.empty() && (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) {
      return absl::NotFoundError(
          absl::StrCat("--timeline ", timeline->second, ": directory ", dir, " does not exist"));
    }
  }
  return CheckHostsReachable(options);
}

}  // namespace overlap::launcher
