#include "compression/kernels/cpu.h"

namespace overlap {
namespace compress {
namespace kernels {

Isa BestIsa() {
  static const Isa best = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                   __builtin_cpu_supports("f16c")
               ? Isa::kAvx2
               : Isa::kScalar;
  }();
  return best;
}

const char* IsaName(Isa isa) { return isa == Isa::kAvx2 ? "avx2" : "scalar"; }

}  // namespace kernels
}  // namespace compress
}  // namespace overlap
