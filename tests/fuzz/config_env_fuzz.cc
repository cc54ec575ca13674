// Fuzzes Config::FromEnvironment and Config::Validate: every OVERLAP_* variable a user or a
// launcher sets. Each input line "NAME=VALUE" sets OVERLAP_NAME to VALUE for one call; the
// variables are cleared again afterwards.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "runtime/config.h"
#include "spdlog/spdlog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  spdlog::set_level(spdlog::level::off);  // unknown variables only warn
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> names;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    std::string name = "OVERLAP_" + std::string(line.substr(0, eq));
    const std::string value(line.substr(eq + 1));
    // setenv refuses '=' in names and the C strings end at NUL.
    if (name.find('\0') != std::string::npos || value.find('\0') != std::string::npos) continue;
    if (setenv(name.c_str(), value.c_str(), 1) == 0) names.push_back(std::move(name));
  }
  absl::StatusOr<overlap::Config> config = overlap::Config::FromEnvironment();
  if (config.ok()) (void)config->Validate();
  for (const std::string& name : names) unsetenv(name.c_str());
  return 0;
}
