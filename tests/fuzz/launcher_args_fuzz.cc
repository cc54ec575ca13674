// Fuzzes overlaprun's command-line parser (launcher/parse_args.h). Arguments are the input split
// at newlines. Inputs that name a file under /dev, /proc or /sys are skipped: the parser reads a
// named hostfile whole, and reading /dev/zero never ends (hostfile text is fuzzed directly by
// hostfile_fuzz).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "launcher/parse_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (absl::StrContains(text, "/dev") || absl::StrContains(text, "/proc") ||
      absl::StrContains(text, "/sys")) {
    return 0;
  }
  std::vector<std::string> args = absl::StrSplit(text, '\n');
  (void)overlap::launcher::ParseArgs(args);
  return 0;
}
