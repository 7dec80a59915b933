// cpu/vec kernels for aarch64 Advanced SIMD (its baseline: no flags); see vec_kernels.hpp.
#define SN_VEC_NEON 1
#include "routines/cpu/vec_kernels.inl"
