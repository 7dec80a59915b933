// GEMM micro-kernel for AVX-512 F/BW/VL/DQ (built with -mavx512f -mavx512bw -mavx512vl -mavx512dq); see gemm.hpp.
// GCC 12 warns about the undefined vectors inside its own AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define SN_F32_AVX512 1
#include "routines/cpu/gemm_kernels.inl"
