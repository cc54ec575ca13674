// One factory per compressor, each defined in the compressor's own file; MakeCompressor
// (registry.cc) dispatches on the name. Internal to compression/.
#ifndef OVERLAP_COMPRESSION_FACTORIES_H_
#define OVERLAP_COMPRESSION_FACTORIES_H_

#include <memory>

#include "absl/status/statusor.h"
#include "compression/compressor.h"
#include "compression/params.h"

namespace overlap {
namespace compress {

using Factory = absl::StatusOr<std::unique_ptr<Compressor>> (*)(ParamReader& params,
                                                                const CompressorContext& context);

absl::StatusOr<std::unique_ptr<Compressor>> MakeNone(ParamReader&, const CompressorContext&);
absl::StatusOr<std::unique_ptr<Compressor>> MakeFp16(ParamReader&, const CompressorContext&);
absl::StatusOr<std::unique_ptr<Compressor>> MakeBf16(ParamReader&, const CompressorContext&);
absl::StatusOr<std::unique_ptr<Compressor>> MakeTopK(ParamReader&, const CompressorContext&);
absl::StatusOr<std::unique_ptr<Compressor>> MakeRandomK(ParamReader&, const CompressorContext&);
absl::StatusOr<std::unique_ptr<Compressor>> MakeCovap(ParamReader&, const CompressorContext&);
absl::StatusOr<std::unique_ptr<Compressor>> MakeEfSign(ParamReader&, const CompressorContext&);
absl::StatusOr<std::unique_ptr<Compressor>> MakePowerSgd(ParamReader&, const CompressorContext&);

}  // namespace compress
}  // namespace overlap

#endif  // OVERLAP_COMPRESSION_FACTORIES_H_
