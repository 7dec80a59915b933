// The CPU check in front of the per-ISA blocked Winograd kernels
// (winograd_blocked.hpp): here, in a file built without ISA flags, so that no
// AVX2 or AVX-512 instruction runs before it.
#include "routines/cpu/winograd_blocked.hpp"

#include "core/cpu_features.hpp"

namespace softneuro::wg::blocked {

// The per-ISA files are built for x86-64 only: elsewhere (aarch64) there are no kernels.
#if defined(__x86_64__)
const Kernels* kernels_avx2() { return core::cpu_features().avx2_fma() ? unchecked_kernels_avx2() : nullptr; }

const Kernels* kernels_avx512() { return core::cpu_features().avx512_core() ? unchecked_kernels_avx512() : nullptr; }
#else
const Kernels* kernels_avx2() { return nullptr; }
const Kernels* kernels_avx512() { return nullptr; }
#endif

}  // namespace softneuro::wg::blocked
