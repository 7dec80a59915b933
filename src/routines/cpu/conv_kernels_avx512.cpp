// Direct and depthwise convolution kernels for avx512; see conv_kernels.hpp.
// GCC 12 warns about the undefined vectors inside its own AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define SN_F32_AVX512 1
#include "routines/cpu/conv_kernels.inl"
