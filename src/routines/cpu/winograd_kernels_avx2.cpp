// Winograd kernels for AVX2 + FMA (see winograd_kernels.inl).
#define WG_NS avx2
#define WG_LANES 8
#define WG_ROWS 6
#define WG_VECS 2
#include "routines/cpu/winograd_kernels.inl"
