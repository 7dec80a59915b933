// cpu/vec kernels for AVX-512F/BW/VL/DQ (built with those flags); see vec_kernels.hpp.
#define SN_VEC_AVX512 1
#include "routines/cpu/vec_kernels.inl"
