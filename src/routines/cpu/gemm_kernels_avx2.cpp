// GEMM micro-kernel for AVX2 + FMA (built with -mavx2 -mfma); see gemm.hpp.
#define SN_F32_AVX512 0
#include "routines/cpu/gemm_kernels.inl"
