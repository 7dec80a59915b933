// One float32 vector type per ISA for the kernel files of our float32 routines
// (gemm_kernels_*.cpp, conv_kernels_*.cpp). Include only from a file built
// with the ISA's flags, after defining SN_F32_AVX512 to 1 (AVX-512F/BW/VL/DQ)
// or 0 (AVX2+FMA), or SN_F32_NEON to 1 (aarch64's Advanced SIMD, its baseline).
// Everything is in namespace softneuro::cpu::SN_F32_NS, so the builds never
// share a symbol.
#pragma once

#include "routines/cpu/gemm.hpp"

#if SN_F32_NEON
#include <arm_neon.h>
#else
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>

#if SN_F32_NEON
#define SN_F32_NS neon
#elif SN_F32_AVX512
#define SN_F32_NS avx512
#else
#define SN_F32_NS avx2
#endif

namespace softneuro::cpu::SN_F32_NS {

#if SN_F32_NEON
using vf = float32x4_t;
inline constexpr int kV = 4;
inline vf vzero() { return vdupq_n_f32(0.0f); }
inline vf vset1(float x) { return vdupq_n_f32(x); }
inline vf vbcast(const float* p) { return vld1q_dup_f32(p); }
inline vf vload(const float* p) { return vld1q_f32(p); }
inline void vstore(float* p, vf v) { vst1q_f32(p, v); }
inline vf vfma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
inline vf vadd(vf a, vf b) { return vaddq_f32(a, b); }
inline vf vmul(vf a, vf b) { return vmulq_f32(a, b); }
// FMAX/FMIN give NaN where either operand is NaN: NaN propagates, as the x86 forms arrange.
inline vf vmax(vf a, vf b) { return vmaxq_f32(a, b); }
inline vf vmin(vf a, vf b) { return vminq_f32(a, b); }
/// Lanes [0, n) of p (the rest read as zero); n in 0..kV (no masked loads: through a buffer).
inline vf vload_n(const float* p, int n) {
  float b[kV] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int i = 0; i < n; ++i) b[i] = p[i];
  return vld1q_f32(b);
}
inline void vstore_n(float* p, vf v, int n) {
  float b[kV];
  vst1q_f32(b, v);
  for (int i = 0; i < n; ++i) p[i] = b[i];
}
/// Lanes >= n set to zero.
inline vf vkeep_n(vf v, int n) {
  const int32x4_t lane = {0, 1, 2, 3};
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v), vcltq_s32(lane, vdupq_n_s32(n))));
}
inline vf vsub(vf a, vf b) { return vsubq_f32(a, b); }
inline vf vdiv(vf a, vf b) { return vdivq_f32(a, b); }
inline vf vfnma(vf a, vf b, vf c) { return vfmsq_f32(c, a, b); }  // c - a*b
inline vf vround(vf a) { return vrndnq_f32(a); }                    // to nearest, ties to even
inline float vhsum(vf v) { return vaddvq_f32(v); }
/// 2^n for integral n in [-126, 127] held as floats.
inline vf vpow2i(vf n) { return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23)); }
#elif SN_F32_AVX512
using vf = __m512;
inline constexpr int kV = 16;
inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vset1(float x) { return _mm512_set1_ps(x); }
inline vf vbcast(const float* p) { return _mm512_set1_ps(*p); }
inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
/// Lanes [0, n) of p (the rest read as zero); n in 0..kV.
inline vf vload_n(const float* p, int n) { return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p); }
inline void vstore_n(float* p, vf v, int n) { _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v); }
/// Lanes >= n set to zero.
inline vf vkeep_n(vf v, int n) { return _mm512_maskz_mov_ps(static_cast<__mmask16>((1u << n) - 1), v); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf vfnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a*b
inline float vhsum(vf v) { return _mm512_reduce_add_ps(v); }
inline vf vround(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf vpow2i(vf n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
#else
using vf = __m256;
inline constexpr int kV = 8;
inline vf vzero() { return _mm256_setzero_ps(); }
inline vf vset1(float x) { return _mm256_set1_ps(x); }
inline vf vbcast(const float* p) { return _mm256_broadcast_ss(p); }
inline vf vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
inline __m256i lane_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline vf vload_n(const float* p, int n) { return _mm256_maskload_ps(p, lane_mask(n)); }
inline void vstore_n(float* p, vf v, int n) { _mm256_maskstore_ps(p, lane_mask(n), v); }
inline vf vkeep_n(vf v, int n) { return _mm256_and_ps(v, _mm256_castsi256_ps(lane_mask(n))); }
inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf vfnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a*b
inline float vhsum(vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
inline vf vround(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf vpow2i(vf n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
#endif

#include "routines/cpu/simd_exp.inl"

/// The activation of an epilogue (and the affine after it, where the
/// epilogue has one), with its constants in registers.
struct VAct {
  gemm::Act act;
  bool affine;
  vf lo, hi, alpha, beta, scale, shift;
  explicit VAct(const gemm::Epilogue& e)
      : act(e.act), affine(e.affine), lo(vset1(e.lo)), hi(vset1(e.hi)), alpha(vset1(e.alpha)), beta(vset1(e.beta)),
        scale(vset1(e.scale)), shift(vset1(e.shift)) {}
  vf operator()(vf x) const {
    const vf y = activate(x);
    return affine ? vfma(y, scale, shift) : y;
  }
  vf activate(vf x) const {
    switch (act) {
      case gemm::Act::none: return x;
      // max/min return their second operand where either is NaN: x goes second, so NaN propagates.
      case gemm::Act::relu: return vmax(vzero(), x);
      case gemm::Act::clip: return vmin(hi, vmax(lo, x));
      case gemm::Act::hardswish:
        return vmul(x, vmul(vmin(vset1(6.0f), vmax(vzero(), vadd(x, vset1(3.0f)))), vset1(1.0f / 6.0f)));
      case gemm::Act::hardsigmoid: return vmin(vset1(1.0f), vmax(vzero(), vfma(alpha, x, beta)));
      // x / (1 + exp(-x)), 1 / (1 + exp(-x)): NaN stays NaN; large negative x gives -0 and 0.
      case gemm::Act::silu: return vdiv(x, vadd(vset1(1.0f), vexp(vsub(vzero(), x))));
      case gemm::Act::sigmoid: return vdiv(vset1(1.0f), vadd(vset1(1.0f), vexp(vsub(vzero(), x))));
    }
    return x;
  }
};

}  // namespace softneuro::cpu::SN_F32_NS
