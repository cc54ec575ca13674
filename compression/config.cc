// CompressorConfig text form and the default multi-round hook.
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compression/compressor.h"

namespace overlap {
namespace compress {

absl::StatusOr<CompressorConfig> CompressorConfig::Parse(absl::string_view spec) {
  spec = absl::StripAsciiWhitespace(spec);
  CompressorConfig config;
  std::pair<absl::string_view, absl::string_view> name_and_params =
      absl::StrSplit(spec, absl::MaxSplits(':', 1));
  config.name = std::string(absl::StripAsciiWhitespace(name_and_params.first));
  if (config.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compressor spec '", spec, "' has no compressor name (e.g. 'topk:ratio=0.01')"));
  }
  if (name_and_params.second.empty()) return config;
  for (absl::string_view item : absl::StrSplit(name_and_params.second, ',')) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("compressor spec '", spec, "': parameter '", item, "' is not key=value"));
    }
    std::string key(absl::StripAsciiWhitespace(item.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(item.substr(eq + 1)));
    if (key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("compressor spec '", spec, "': parameter '", item, "' has an empty key"));
    }
    if (!config.params.emplace(key, value).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("compressor spec '", spec, "': parameter '", key, "' is given twice"));
    }
  }
  return config;
}

std::string CompressorConfig::ToString() const {
  std::string out = name;
  const char* sep = ":";
  for (const auto& [key, value] : params) {
    absl::StrAppend(&out, sep, key, "=", value);
    sep = ",";
  }
  return out;
}

absl::StatusOr<size_t> Compressor::NextRound(int round, absl::Span<const uint8_t>, ResidualState&,
                                             int64_t, absl::Span<uint8_t>) const {
  return absl::FailedPreconditionError(absl::StrCat("compressor '", config().name, "' has ",
                                                    rounds(), " round(s); NextRound(", round,
                                                    ") is not defined for it"));
}

}  // namespace compress
}  // namespace overlap
