// cpu/vec kernels for AVX-512F/BW/VL/DQ (built with those flags); see vec_kernels.hpp.
// GCC 12 warns about the undefined vectors inside its own AVX-512 intrinsics (GCC PR 105593).
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define SN_VEC_AVX512 1
#include "routines/cpu/vec_kernels.inl"
