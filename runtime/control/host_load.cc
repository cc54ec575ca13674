#include "runtime/control/host_load.h"

#include <sched.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace overlap {

std::optional<double> ParseLoadAverage(absl::string_view loadavg) {
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(loadavg), ' ', absl::SkipEmpty());
  double load = 0;
  if (fields.empty() || !absl::SimpleAtod(fields[0], &load) || !(load >= 0)) return std::nullopt;
  return load;
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return 1;
}

bool HostLoad::Oversubscribed(absl::Time now) {
  if (now < next_read_) return oversubscribed_;
  next_read_ = now + refresh_;
  std::ifstream file(path_);
  std::stringstream text;
  text << file.rdbuf();
  const std::optional<double> load = file ? ParseLoadAverage(text.str()) : std::nullopt;
  oversubscribed_ = load.has_value() && *load >= cpus_;
  return oversubscribed_;
}

}  // namespace overlap
