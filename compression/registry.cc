// MakeCompressor: name -> factory, then the check that no parameter went unused.
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compression/compressor.h"
#include "compression/factories.h"
#include "compression/params.h"

namespace overlap {
namespace compress {
namespace {

struct Entry {
  const char* name;
  Factory factory;
};

constexpr Entry kCompressors[] = {
    {"none", MakeNone},     {"fp16", MakeFp16},         {"bf16", MakeBf16},
    {"topk", MakeTopK},     {"randomk", MakeRandomK},   {"covap", MakeCovap},
    {"efsign", MakeEfSign}, {"powersgd", MakePowerSgd},
};

}  // namespace

absl::StatusOr<std::unique_ptr<Compressor>> MakeCompressor(const CompressorConfig& config,
                                                           const CompressorContext& context) {
  for (const Entry& entry : kCompressors) {
    if (config.name != entry.name) continue;
    ParamReader params(config);
    absl::StatusOr<std::unique_ptr<Compressor>> compressor = entry.factory(params, context);
    if (!compressor.ok()) return compressor.status();
    if (absl::Status unused = params.Finish(); !unused.ok()) return unused;
    return compressor;
  }
  std::vector<std::string> names;
  for (const Entry& entry : kCompressors) names.push_back(entry.name);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compressor '", config.name, "'; known: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<std::unique_ptr<Compressor>> MakeCompressor(absl::string_view spec,
                                                           const CompressorContext& context) {
  absl::StatusOr<CompressorConfig> config = CompressorConfig::Parse(spec);
  if (!config.ok()) return config.status();
  return MakeCompressor(*config, context);
}

}  // namespace compress
}  // namespace overlap
