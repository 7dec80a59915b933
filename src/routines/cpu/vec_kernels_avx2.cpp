// cpu/vec kernels for AVX2 + FMA (built with -mavx2 -mfma); see vec_kernels.hpp.
#define SN_VEC_AVX512 0
#include "routines/cpu/vec_kernels.inl"
