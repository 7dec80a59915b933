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

/// narrow() for N columns: each row's N dot products over k in vectors, summed across lanes.
template <int N>
void narrow_rows(int64_t m, int64_t kk, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                 const float* bias_n) {
  for (int64_t i = 0; i < m; ++i) {
    const float* ai = a + i * lda;
    vf acc[N];
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) acc[j] = vzero();
    int64_t t = 0;
    for (; t + kV <= kk; t += kV) {
      const vf x = vload(ai + t);
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) acc[j] = vfma(vload(b + j * kk + t), x, acc[j]);
    }
    if (t < kk) {
      const int rest = static_cast<int>(kk - t);
      const vf x = vload_n(ai + t, rest);
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) acc[j] = vfma(vload_n(b + j * kk + t, rest), x, acc[j]);
    }
    float* ci = c + i * ldc;
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) ci[j] = vhsum(acc[j]) + (bias_n ? bias_n[j] : 0.0f);
  }
}

void narrow(int64_t m, int64_t n, int64_t kk, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
            const float* bias_n, const gemm::Epilogue& ep) {
  switch (n) {
    case 1: narrow_rows<1>(m, kk, a, lda, b, c, ldc, bias_n); break;
    case 2: narrow_rows<2>(m, kk, a, lda, b, c, ldc, bias_n); break;
    case 3: narrow_rows<3>(m, kk, a, lda, b, c, ldc, bias_n); break;
    case 4: narrow_rows<4>(m, kk, a, lda, b, c, ldc, bias_n); break;
    case 5: narrow_rows<5>(m, kk, a, lda, b, c, ldc, bias_n); break;
    case 6: narrow_rows<6>(m, kk, a, lda, b, c, ldc, bias_n); break;
    case 7: narrow_rows<7>(m, kk, a, lda, b, c, ldc, bias_n); break;
    default: narrow_rows<8>(m, kk, a, lda, b, c, ldc, bias_n); break;
  }
  if (ep.act == gemm::Act::none) return;
  // The activation over the results, in vectors: one span where the rows are contiguous.
  const VAct act(ep);
  const int64_t span = ldc == n ? m * n : n, spans = ldc == n ? 1 : m;
  for (int64_t r = 0; r < spans; ++r) {
    float* p = c + r * ldc;
    int64_t j = 0;
    for (; j + kV <= span; j += kV) vstore(p + j, act(vload(p + j)));
    if (j < span) vstore_n(p + j, act(vload_n(p + j, static_cast<int>(span - j))), static_cast<int>(span - j));
  }
}

}  // namespace
}  // namespace softneuro::cpu::SN_F32_NS

namespace softneuro::cpu::gemm {

#if SN_F32_NEON
const Kernel* unchecked_kernel_neon() {
  static const Kernel k{"neon", neon::kMR, neon::kNR, neon::kV, &neon::micro, &neon::narrow};
  return &k;
}
#elif SN_F32_AVX512
const Kernel* unchecked_kernel_avx512() {
  static const Kernel k{"avx512", avx512::kMR, avx512::kNR, avx512::kV, &avx512::micro, &avx512::narrow};
  return &k;
}
#else
const Kernel* unchecked_kernel_avx2() {
  static const Kernel k{"avx2", avx2::kMR, avx2::kNR, avx2::kV, &avx2::micro, &avx2::narrow};
  return &k;
}
#endif

}  // namespace softneuro::cpu::gemm
