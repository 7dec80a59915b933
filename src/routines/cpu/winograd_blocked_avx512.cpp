// Blocked-layout Winograd kernels for avx512; see winograd_blocked.hpp.
// GCC 12 warns about the undefined vectors inside its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define SN_F32_AVX512 1
#include "routines/cpu/winograd_blocked_kernels.inl"
