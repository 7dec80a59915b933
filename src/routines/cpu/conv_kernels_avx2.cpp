// Direct and depthwise convolution kernels for avx2; see conv_kernels.hpp.
#define SN_F32_AVX512 0
#include "routines/cpu/conv_kernels.inl"
