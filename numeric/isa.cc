#include "numeric/cpu_kernels.h"

#include <cpuid.h>

namespace overlap {
namespace numeric {
namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang before 15 does not know "f16c" as a feature name
// for __builtin_cpu_supports, and the fuzzers and sanitizer builds use clang.
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

}  // namespace

Isa BestIsa() {
  static const Isa best = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c()
               ? Isa::kAvx2
               : Isa::kScalar;
  }();
  return best;
}

const char* IsaName(Isa isa) { return isa == Isa::kAvx2 ? "avx2" : "scalar"; }

}  // namespace numeric
}  // namespace overlap
