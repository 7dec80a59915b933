// GEMM micro-kernel for aarch64 Advanced SIMD (its baseline: no flags); see gemm.hpp.
#define SN_F32_NEON 1
#include "routines/cpu/gemm_kernels.inl"
