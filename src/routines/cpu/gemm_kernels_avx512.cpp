// GEMM micro-kernel for AVX-512 F/BW/VL/DQ (built with -mavx512f -mavx512bw -mavx512vl -mavx512dq); see gemm.hpp.
// GCC 12 warns about the undefined vectors inside its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define SN_F32_AVX512 1
#include "routines/cpu/gemm_kernels.inl"
