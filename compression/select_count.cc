#include <algorithm>
#include <cmath>

#include "compression/compressor_base.h"

namespace overlap {
namespace compress {

absl::StatusOr<size_t> SelectCount(const Compressor& c, int64_t tensor_id, size_t n, int64_t k,
                                   double ratio) {
  if (n == 0) return 0;
  if (k > 0) {
    if (static_cast<uint64_t>(k) > n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "compressor '", c.config().name, "': parameter 'k' = ", k, " is out of range for ",
          tensor_id >= 0 ? absl::StrCat("tensor ", tensor_id) : std::string("a tensor"), " of ", n,
          " elements (need 1 <= k <= ", n, ")"));
    }
    return static_cast<size_t>(k);
  }
  const double wanted = std::round(ratio * static_cast<double>(n));
  return std::min<size_t>(n, std::max<size_t>(1, static_cast<size_t>(wanted)));
}

}  // namespace compress
}  // namespace overlap
