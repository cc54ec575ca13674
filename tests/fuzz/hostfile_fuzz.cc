// Fuzzes the launcher's host lists: hostfile text (Open MPI's syntax) and the -H syntax. The
// first byte picks which. A list that parses must print (FormatHostList) as -H text that parses
// to the same hosts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "launcher/hosts.h"

namespace {

bool Same(const std::vector<overlap::launcher::HostSlots>& a,
          const std::vector<overlap::launcher::HostSlots>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].host != b[i].host || a[i].slots != b[i].slots) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap::launcher;
  if (size < 1) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<std::vector<HostSlots>> hosts =
      data[0] % 2 == 0 ? ParseHostfile(text, "fuzz") : ParseHostList(text);
  if (!hosts.ok()) return 0;
  const int total = TotalSlots(*hosts);
  (void)HostOfRank(*hosts, 0);
  (void)HostOfRank(*hosts, total > 0 ? total - 1 : 0);
  absl::StatusOr<std::vector<HostSlots>> again = ParseHostList(FormatHostList(*hosts));
  if (!again.ok() || !Same(*hosts, *again)) std::abort();
  return 0;
}
