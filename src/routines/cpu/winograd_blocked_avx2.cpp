// Blocked-layout Winograd kernels for avx2; see winograd_blocked.hpp.
#define SN_F32_AVX512 0
#include "routines/cpu/winograd_blocked_kernels.inl"
