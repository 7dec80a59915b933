// Winograd kernels for AVX-512 (see winograd_kernels.inl).
#define WG_NS avx512
#define WG_LANES 16
#define WG_ROWS 6
#define WG_VECS 4
#include "routines/cpu/winograd_kernels.inl"
