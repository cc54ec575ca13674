// Typed, validated access to a CompressorConfig's parameters, shared by the compressor factories.
//
// Each getter records the key as known and writes the value actually used (the default when the
// key is absent) into canonical(), so the canonical config spells out every parameter and two
// ranks with different defaults still compare unequal. Finish() rejects keys nobody asked for.
#ifndef OVERLAP_COMPRESSION_PARAMS_H_
#define OVERLAP_COMPRESSION_PARAMS_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compression/compressor.h"

namespace overlap {
namespace compress {

class ParamReader {
 public:
  explicit ParamReader(const CompressorConfig& config);

  bool Has(absl::string_view key) const;
  // The raw text of `key`, if given; does not mark the key as known.
  std::optional<std::string> Raw(absl::string_view key) const;

  // InvalidArgument naming compressor, key and value when the value does not parse or lies
  // outside [lo, hi].
  absl::StatusOr<double> Double(absl::string_view key, double default_value, double lo, double hi);
  absl::StatusOr<int64_t> Int(absl::string_view key, int64_t default_value, int64_t lo, int64_t hi);
  // One of `allowed`.
  absl::StatusOr<std::string> Choice(absl::string_view key, absl::string_view default_value,
                                     std::initializer_list<absl::string_view> allowed);

  // Sparsifiers' size: either "k" (1..k_max elements) or "ratio" (default 0.01 of the tensor),
  // never both. Sets *k (0 when the ratio applies) and *ratio.
  absl::Status KOrRatio(int64_t k_max, int64_t* k, double* ratio);

  // Records a derived value in canonical() without reading it (covap R=auto -> R=3).
  void SetCanonical(absl::string_view key, std::string value);

  // InvalidArgument listing unknown keys and the accepted ones.
  absl::Status Finish() const;

  const CompressorConfig& canonical() const { return canonical_; }

  // "compressor 'topk': parameter 'ratio'" prefix for messages.
  std::string Where(absl::string_view key) const;

 private:
  const CompressorConfig& config_;
  CompressorConfig canonical_;
  std::set<std::string> known_;
};

}  // namespace compress
}  // namespace overlap

#endif  // OVERLAP_COMPRESSION_PARAMS_H_
