// The CPU check in front of the per-ISA convolution kernels (conv_kernels.hpp):
// here, in a file built without ISA flags, so that no AVX2 or AVX-512
// instruction runs before it.
#include "routines/cpu/conv_kernels.hpp"

#include "core/cpu_features.hpp"

namespace softneuro::cpu::conv {

// The per-ISA files are built for x86-64 only: elsewhere (aarch64) there are no kernels.
#if defined(__x86_64__)
const Kernels* kernels_avx2() { return core::cpu_features().avx2_fma() ? unchecked_kernels_avx2() : nullptr; }

const Kernels* kernels_avx512() {
  const core::CpuFeatures& f = core::cpu_features();
  if (!f.avx512_core()) return nullptr;
  if (!f.avx512_bf16) return unchecked_kernels_avx512();
  static const Kernels with_bf16 = [] {
    Kernels k = *unchecked_kernels_avx512();
    unchecked_native_bf16_kernels(k);
    return k;
  }();
  return &with_bf16;
}
#else
const Kernels* kernels_avx2() { return nullptr; }
const Kernels* kernels_avx512() { return nullptr; }
#endif

}  // namespace softneuro::cpu::conv
