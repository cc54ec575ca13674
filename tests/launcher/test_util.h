// Helpers shared by the launcher tests: scripts written to the test's temporary folder, and
// options parsed from a command line that must be valid.
#ifndef OVERLAP_TESTS_LAUNCHER_TEST_UTIL_H_
#define OVERLAP_TESTS_LAUNCHER_TEST_UTIL_H_

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/parse_args.h"

namespace overlap::launcher::testing {

inline std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// Writes a /bin/sh script named `name` with `body` into TempDir(); returns its path.
inline std::string WriteScript(const std::string& name, const std::string& body,
                               mode_t mode = 0755) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), mode);
  return path;
}

inline LaunchOptions Options(std::vector<std::string> args) {
  auto parsed = ParseArgs(args);
  REQUIRE(parsed.ok());
  return parsed->options;
}

}  // namespace overlap::launcher::testing

#endif  // OVERLAP_TESTS_LAUNCHER_TEST_UTIL_H_
