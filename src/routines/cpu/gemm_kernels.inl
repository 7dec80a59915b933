// The GEMM micro-kernel, one build per ISA (included by gemm_kernels_avx2.cpp
// and gemm_kernels_avx512.cpp after defining SN_F32_AVX512, gemm_kernels_neon.cpp
// after defining SN_F32_NEON). See gemm.hpp.
#include "routines/cpu/f32_simd.hpp"

namespace softneuro::cpu::SN_F32_NS {
namespace {

/// MR rows x NV vectors: AVX-512 12 x 2 (24 accumulators of 32), AVX2 6 x 2 (12
/// of 16), Advanced SIMD 8 x 3 (24 of 32: 8 x 12 floats).
#if SN_F32_NEON
constexpr int kMR = 8;
constexpr int kNV = 3;
#elif SN_F32_AVX512
constexpr int kMR = 12;
constexpr int kNV = 2;
#else
constexpr int kMR = 6;
constexpr int kNV = 2;
#endif
constexpr int kNR = kNV * kV;

void micro(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c, int64_t ldc,
           bool load_c, bool last, const float* bias_m, const float* bias_n, const gemm::Epilogue& ep) {
  vf acc[kMR][kNV];
  if (load_c) {
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < kNV; ++j) acc[i][j] = vload(c + i * ldc + j * kV);
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < kNV; ++j) acc[i][j] = vzero();
  }
  for (int64_t k = 0; k < kc; ++k) {
    vf bv[kNV];
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) bv[j] = vload(b + j * kV);
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i) {
      const vf av = vbcast(a + i);
#pragma GCC unroll 4
      for (int j = 0; j < kNV; ++j) acc[i][j] = vfma(av, bv[j], acc[i][j]);
    }
    a += kMR;
    b += kNR;
  }
  if (last) {
    const VAct act(ep);
    vf bn[kNV];
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) bn[j] = bias_n ? vload(bias_n + j * kV) : vzero();
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i) {
      const vf bm = bias_m ? vbcast(bias_m + i) : vzero();
#pragma GCC unroll 4
      for (int j = 0; j < kNV; ++j) acc[i][j] = act(vadd(vadd(acc[i][j], bm), bn[j]));
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) vstore(c + i * ldc + j * kV, acc[i][j]);
}

}  // namespace
}  // namespace softneuro::cpu::SN_F32_NS

namespace softneuro::cpu::gemm {

#if SN_F32_NEON
const Kernel* unchecked_kernel_neon() {
  static const Kernel k{"neon", neon::kMR, neon::kNR, neon::kV, &neon::micro};
  return &k;
}
#elif SN_F32_AVX512
const Kernel* unchecked_kernel_avx512() {
  static const Kernel k{"avx512", avx512::kMR, avx512::kNR, avx512::kV, &avx512::micro};
  return &k;
}
#else
const Kernel* unchecked_kernel_avx2() {
  static const Kernel k{"avx2", avx2::kMR, avx2::kNR, avx2::kV, &avx2::micro};
  return &k;
}
#endif

}  // namespace softneuro::cpu::gemm
