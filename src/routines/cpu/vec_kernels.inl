// The cpu/vec kernels (vec_kernels.hpp), written once over a small vector
// abstraction and built per ISA: include only from a file built with the ISA's
// flags, after defining SN_VEC_AVX512 to 1 (AVX-512F/BW/VL/DQ) or 0 (AVX2+FMA),
// or SN_VEC_NEON to 1 (aarch64's Advanced SIMD, its baseline: no flags).
// Everything is in namespace softneuro::cpu::vec::{avx2,avx512,neon}, so the
// builds never share a symbol.
#include "routines/cpu/vec_kernels.hpp"

#if SN_VEC_NEON
#include <arm_neon.h>
#else
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

#if SN_VEC_NEON
#define SN_VEC_NS neon
#elif SN_VEC_AVX512
#define SN_VEC_NS avx512
#else
#define SN_VEC_NS avx2
#endif

namespace softneuro::cpu::vec::SN_VEC_NS {
namespace {

#if SN_VEC_NEON
using vf = float32x4_t;
constexpr int kV = 4;
inline vf vset1(float x) { return vdupq_n_f32(x); }
inline vf vzero() { return vdupq_n_f32(0.0f); }
inline vf vload(const float* p) { return vld1q_f32(p); }
inline void vstore(float* p, vf v) { vst1q_f32(p, v); }
/// Lanes [0, n) of p, the others `fill`; n in 0..kV-1 (no masked loads: through a buffer).
inline vf vload_n(const float* p, int64_t n, float fill = 0.0f) {
  float b[kV] = {fill, fill, fill, fill};
  for (int64_t i = 0; i < n; ++i) b[i] = p[i];
  return vld1q_f32(b);
}
inline void vstore_n(float* p, vf v, int64_t n) {
  float b[kV];
  vst1q_f32(b, v);
  for (int64_t i = 0; i < n; ++i) p[i] = b[i];
}
inline vf vadd(vf a, vf b) { return vaddq_f32(a, b); }
inline vf vsub(vf a, vf b) { return vsubq_f32(a, b); }
inline vf vmul(vf a, vf b) { return vmulq_f32(a, b); }
inline vf vdiv(vf a, vf b) { return vdivq_f32(a, b); }
inline vf vfma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
inline vf vfnma(vf a, vf b, vf c) { return vfmsq_f32(c, a, b); }  // c - a*b
// FMAX/FMIN return NaN where either operand is NaN (x86's return the second): NaN propagates as there.
inline vf vmax(vf a, vf b) { return vmaxq_f32(a, b); }
inline vf vmin(vf a, vf b) { return vminq_f32(a, b); }
inline vf vabs(vf a) { return vabsq_f32(a); }
inline vf vround(vf a) { return vrndnq_f32(a); }  // to nearest, ties to even
inline vf vpow2i(vf n) {
  return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23));
}
/// a where x's sign bit is clear, b where it is set (as AVX2's blendv).
inline vf vselect_neg(vf x, vf a, vf b) {
  const uint32x4_t neg = vreinterpretq_u32_s32(vshrq_n_s32(vreinterpretq_s32_f32(x), 31));
  return vbslq_f32(neg, b, a);
}
inline float hsum(vf v) { return vaddvq_f32(v); }
inline float hmax(vf v) { return vmaxvq_f32(v); }
#elif SN_VEC_AVX512
using vf = __m512;
constexpr int kV = 16;
inline vf vset1(float x) { return _mm512_set1_ps(x); }
inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline __mmask16 kmask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }
/// Lanes [0, n) of p, the others `fill`; n in 0..kV-1.
inline vf vload_n(const float* p, int64_t n, float fill = 0.0f) {
  return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), kmask(n), p);
}
inline void vstore_n(float* p, vf v, int64_t n) { _mm512_mask_storeu_ps(p, kmask(n), v); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf vfnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a*b
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
inline vf vabs(vf a) { return _mm512_abs_ps(a); }
inline vf vround(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/// 2^n for integral n in [-126, 127] held as floats.
inline vf vpow2i(vf n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
/// a where x >= 0, b where x < 0.
inline vf vselect_neg(vf x, vf a, vf b) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, vzero(), _CMP_LT_OQ), a, b); }
inline float hsum(vf v) { return _mm512_reduce_add_ps(v); }
inline float hmax(vf v) { return _mm512_reduce_max_ps(v); }
#else
using vf = __m256;
constexpr int kV = 8;
inline vf vset1(float x) { return _mm256_set1_ps(x); }
inline vf vzero() { return _mm256_setzero_ps(); }
inline vf vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline __m256i lane_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline vf vload_n(const float* p, int64_t n, float fill = 0.0f) {
  const __m256i m = lane_mask(n);
  return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
inline void vstore_n(float* p, vf v, int64_t n) { _mm256_maskstore_ps(p, lane_mask(n), v); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf vfnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
inline vf vabs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
inline vf vround(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf vpow2i(vf n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline vf vselect_neg(vf x, vf a, vf b) { return _mm256_blendv_ps(a, b, x); }  // by x's sign bit
inline float hsum(vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax(vf v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

#include "routines/cpu/simd_exp.inl"

/// a / b exactly, and its approximate form (below).
inline vf vdiv_exact(vf a, vf b) { return vdiv(a, b); }

// The approximate forms, within 5e-5 max(1, |x|) in GELU, for routines whose
// own error dwarfs it (bfloat16 outputs round to 2e-3, int8 products): on
// AVX-512 without the division (vrcp14ps, 2^-14) and with a cheaper exp; 1.6x
// faster. Elsewhere the exact ones.
#if SN_VEC_AVX512
/// exp(x) within 7.5e-5: 2^u, u = x log2 e, 2^frac(u) by a degree-3
/// polynomial (vreduceps) times 2^floor(u) (vscalefps); x clamped as vexp's.
inline vf vexp_approx(vf x) {
  x = vmin(vset1(88.3f), vmax(vset1(-87.3f), x));  // x second: NaN stays NaN
  const vf u = vmul(x, vset1(1.44269504088896341f));
  const vf f = _mm512_reduce_ps(u, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  vf q = vfma(vset1(0.07802404f), f, vset1(0.22606708f));
  q = vfma(q, f, vset1(0.695834f));
  q = vfma(q, f, vset1(0.99992514f));
  return _mm512_scalef_ps(q, u);
}
inline vf vdiv_approx(vf a, vf b) { return vmul(a, _mm512_rcp14_ps(b)); }
#else
inline vf vexp_approx(vf x) { return vexp(x); }
inline vf vdiv_approx(vf a, vf b) { return vdiv(a, b); }
#endif

/// erfc(z) for z >= 0: t (a1 + t (a2 + ...)) exp(-z^2), t = 1 / (1 + p z)
/// (Abramowitz-Stegun 7.1.26, |error| <= 1.5e-7 with the exact Div and Exp).
template <vf (*Div)(vf, vf) = vdiv_exact, vf (*Exp)(vf) = vexp>
inline vf verfc_nonneg(vf z) {
  const vf t = Div(vset1(1.0f), vfma(z, vset1(0.3275911f), vset1(1.0f)));
  vf p = vset1(1.061405429f);
  p = vfma(p, t, vset1(-1.453152027f));
  p = vfma(p, t, vset1(1.421413741f));
  p = vfma(p, t, vset1(-0.284496736f));
  p = vfma(p, t, vset1(0.254829592f));
  return vmul(vmul(p, t), Exp(vmul(vsub(vzero(), z), z)));
}

/// gelu, erf form: 0.5 x (1 + erf(x/sqrt2)) = 0.5 x erfc(|z|) for x < 0 and
/// 0.5 x (2 - erfc(|z|)) otherwise (no cancellation for large negative x).
template <vf (*Div)(vf, vf) = vdiv_exact, vf (*Exp)(vf) = vexp>
inline vf vgelu_erf(vf x) {
  const vf q = verfc_nonneg<Div, Exp>(vmul(vabs(x), vset1(0.70710678118654752f)));
  const vf f = vselect_neg(x, vsub(vset1(2.0f), q), q);
  return vmul(vmul(vset1(0.5f), x), f);
}

/// erf(x) = sign(x) (1 - erfc(|x|)).
inline vf verf(vf x) {
  const vf e = vsub(vset1(1.0f), verfc_nonneg(vabs(x)));
  return vselect_neg(x, e, vsub(vzero(), e));
}

/// gelu, tanh form: 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
template <vf (*Div)(vf, vf) = vdiv_exact, vf (*Exp)(vf) = vexp>
inline vf vgelu_tanh(vf x) {
  const vf x2 = vmul(x, x);
  const vf u2 = vmul(vmul(x, vset1(-2.0f * 0.79788456080286536f)), vfma(x2, vset1(0.044715f), vset1(1.0f)));
  return Div(x, vadd(vset1(1.0f), Exp(u2)));
}

void rms_norm_rows(const float* x, float* y, int64_t rows, int64_t n, const float* scale, float eps) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * n;
    float* yr = y + row * n;
    vf q0 = vzero(), q1 = vzero();
    int64_t i = 0;
    for (; i + 2 * kV <= n; i += 2 * kV) {
      const vf a = vload(xr + i), b = vload(xr + i + kV);
      q0 = vfma(a, a, q0);
      q1 = vfma(b, b, q1);
    }
    for (; i + kV <= n; i += kV) {
      const vf a = vload(xr + i);
      q0 = vfma(a, a, q0);
    }
    if (i < n) {
      const vf a = vload_n(xr + i, n - i);  // missing lanes read as 0
      q1 = vfma(a, a, q1);
    }
    const vf inv = vset1(1.0f / std::sqrt(hsum(vadd(q0, q1)) / static_cast<float>(n) + eps));
    i = 0;
    for (; i + kV <= n; i += kV) vstore(yr + i, vmul(vmul(vload(xr + i), inv), vload(scale + i)));
    if (i < n) vstore_n(yr + i, vmul(vmul(vload_n(xr + i, n - i), inv), vload_n(scale + i, n - i)), n - i);
  }
}

void layernorm_rows(const float* x, float* y, int64_t rows, int64_t n, const float* scale, const float* bias,
                    float eps) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * n;
    float* yr = y + row * n;
    const vf k = vset1(xr[0]);
    vf s0 = vzero(), s1 = vzero(), q0 = vzero(), q1 = vzero();
    int64_t i = 0;
    for (; i + 2 * kV <= n; i += 2 * kV) {
      const vf d0 = vsub(vload(xr + i), k), d1 = vsub(vload(xr + i + kV), k);
      s0 = vadd(s0, d0);
      s1 = vadd(s1, d1);
      q0 = vfma(d0, d0, q0);
      q1 = vfma(d1, d1, q1);
    }
    for (; i + kV <= n; i += kV) {
      const vf d = vsub(vload(xr + i), k);
      s0 = vadd(s0, d);
      q0 = vfma(d, d, q0);
    }
    if (i < n) {
      const vf d = vsub(vload_n(xr + i, n - i, xr[0]), k);  // missing lanes read as the shift: d = 0
      s1 = vadd(s1, d);
      q1 = vfma(d, d, q1);
    }
    const float inv_n = 1.0f / static_cast<float>(n);
    const float md = hsum(vadd(s0, s1)) * inv_n;
    const float var = std::max(hsum(vadd(q0, q1)) * inv_n - md * md, 0.0f);
    const vf mean = vset1(xr[0] + md), inv = vset1(1.0f / std::sqrt(var + eps));
    i = 0;
    if (bias) {
      for (; i + kV <= n; i += kV)
        vstore(yr + i, vfma(vmul(vsub(vload(xr + i), mean), inv), vload(scale + i), vload(bias + i)));
      if (i < n)
        vstore_n(yr + i,
                 vfma(vmul(vsub(vload_n(xr + i, n - i), mean), inv), vload_n(scale + i, n - i),
                      vload_n(bias + i, n - i)),
                 n - i);
    } else {
      for (; i + kV <= n; i += kV) vstore(yr + i, vmul(vmul(vsub(vload(xr + i), mean), inv), vload(scale + i)));
      if (i < n)
        vstore_n(yr + i, vmul(vmul(vsub(vload_n(xr + i, n - i), mean), inv), vload_n(scale + i, n - i)), n - i);
    }
  }
}

void group_norm(const float* x, float* y, int64_t channels, int64_t spatial, const float* scale, const float* bias,
                float eps) {
  const int64_t n = channels * spatial;
  if (n == 0) return;
  const float shift = x[0];  // against cancellation, as layernorm_rows
  const vf k = vset1(shift);
  double sum = 0, sq = 0;
  for (int64_t ch = 0; ch < channels; ++ch) {
    const float* xr = x + ch * spatial;
    vf s0 = vzero(), s1 = vzero(), q0 = vzero(), q1 = vzero();
    int64_t i = 0;
    for (; i + 2 * kV <= spatial; i += 2 * kV) {
      const vf d0 = vsub(vload(xr + i), k), d1 = vsub(vload(xr + i + kV), k);
      s0 = vadd(s0, d0);
      s1 = vadd(s1, d1);
      q0 = vfma(d0, d0, q0);
      q1 = vfma(d1, d1, q1);
    }
    for (; i + kV <= spatial; i += kV) {
      const vf d = vsub(vload(xr + i), k);
      s0 = vadd(s0, d);
      q0 = vfma(d, d, q0);
    }
    if (i < spatial) {
      const vf d = vsub(vload_n(xr + i, spatial - i, shift), k);  // missing lanes read as the shift: d = 0
      s1 = vadd(s1, d);
      q1 = vfma(d, d, q1);
    }
    sum += hsum(vadd(s0, s1));
    sq += hsum(vadd(q0, q1));
  }
  const double md = sum / static_cast<double>(n);
  const double var = std::max(sq / static_cast<double>(n) - md * md, 0.0);
  const double mean = shift + md, inv = 1.0 / std::sqrt(var + eps);
  for (int64_t ch = 0; ch < channels; ++ch) {
    // y = x * a + b with a = inv * scale, b = bias - mean * a
    const float a = static_cast<float>(inv * scale[ch]);
    const float b = static_cast<float>((bias ? bias[ch] : 0.0) - mean * inv * scale[ch]);
    const float* xr = x + ch * spatial;
    float* yr = y + ch * spatial;
    const vf va = vset1(a), vb = vset1(b);
    int64_t i = 0;
    for (; i + kV <= spatial; i += kV) vstore(yr + i, vfma(vload(xr + i), va, vb));
    if (i < spatial) vstore_n(yr + i, vfma(vload_n(xr + i, spatial - i), va, vb), spatial - i);
  }
}

void quantize(const float* x, float* y, int64_t n, float scale, float zp, float qmin, float qmax, bool dequantize) {
  const vf s = vset1(scale), z = vset1(zp), lo = vset1(qmin), hi = vset1(qmax);
  auto q = [&](vf v) {
    const vf r = vmin(vmax(vadd(vround(vdiv(v, s)), z), lo), hi);
    return dequantize ? vmul(vsub(r, z), s) : r;
  };
  int64_t i = 0;
  for (; i + kV <= n; i += kV) vstore(y + i, q(vload(x + i)));
  if (i < n) vstore_n(y + i, q(vload_n(x + i, n - i)), n - i);
}

void min_max(const float* x, int64_t n, float* min, float* max) {
  vf lo = vset1(x[0]), hi = lo;
  int64_t i = 0;
  for (; i + kV <= n; i += kV) {
    const vf v = vload(x + i);
    lo = vmin(lo, v);
    hi = vmax(hi, v);
  }
  if (i < n) {
    const vf v = vload_n(x + i, n - i, x[0]);  // missing lanes read as x[0], already counted
    lo = vmin(lo, v);
    hi = vmax(hi, v);
  }
  *min = -hmax(vsub(vzero(), lo));
  *max = hmax(hi);
}

void softmax_rows(const float* x, float* y, int64_t rows, int64_t n) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * n;
    float* yr = y + row * n;
    vf m0 = vset1(-INFINITY), m1 = m0;
    int64_t i = 0;
    for (; i + 2 * kV <= n; i += 2 * kV) {
      m0 = vmax(m0, vload(xr + i));
      m1 = vmax(m1, vload(xr + i + kV));
    }
    for (; i + kV <= n; i += kV) m0 = vmax(m0, vload(xr + i));
    if (i < n) m1 = vmax(m1, vload_n(xr + i, n - i, -INFINITY));
    const vf mx = vset1(hmax(vmax(m0, m1)));
    vf s0 = vzero(), s1 = vzero();
    i = 0;
    for (; i + 2 * kV <= n; i += 2 * kV) {
      const vf e0 = vexp(vsub(vload(xr + i), mx)), e1 = vexp(vsub(vload(xr + i + kV), mx));
      vstore(yr + i, e0);
      vstore(yr + i + kV, e1);
      s0 = vadd(s0, e0);
      s1 = vadd(s1, e1);
    }
    for (; i + kV <= n; i += kV) {
      const vf e = vexp(vsub(vload(xr + i), mx));
      vstore(yr + i, e);
      s0 = vadd(s0, e);
    }
    if (i < n) {
      const vf e = vexp(vsub(vload_n(xr + i, n - i, -INFINITY), mx));  // missing lanes: exp(-inf) = 0 (clamped: ~1e-38)
      vstore_n(yr + i, e, n - i);
      vf keep = vload_n(yr + i, n - i);  // the stored lanes, the others 0
      s1 = vadd(s1, keep);
    }
    const vf inv = vset1(1.0f / hsum(vadd(s0, s1)));
    i = 0;
    for (; i + kV <= n; i += kV) vstore(yr + i, vmul(vload(yr + i), inv));
    if (i < n) vstore_n(yr + i, vmul(vload_n(yr + i, n - i), inv), n - i);
  }
}

void softmax_strided(const float* x, float* y, int64_t n, int64_t inner, int64_t begin, int64_t end) {
  // Lanes are `inner` positions side by side; the n values of one softmax are
  // `inner` apart. Three passes over the columns [begin, end) of the n rows.
  for (int64_t i = begin; i < end; i += kV) {
    const int64_t lanes = std::min<int64_t>(kV, end - i);
    auto load = [&](const float* p) { return lanes == kV ? vload(p) : vload_n(p, lanes, 0.0f); };
    auto store = [&](float* p, vf v) { lanes == kV ? vstore(p, v) : vstore_n(p, v, lanes); };
    vf mx = vset1(-INFINITY);
    for (int64_t k = 0; k < n; ++k) mx = vmax(load(x + k * inner + i), mx);  // NaN stays in x: exp makes it NaN below
    vf sum = vzero();
    for (int64_t k = 0; k < n; ++k) {
      const vf e = vexp(vsub(load(x + k * inner + i), mx));
      store(y + k * inner + i, e);
      sum = vadd(sum, e);
    }
    const vf inv = vdiv(vset1(1.0f), sum);
    for (int64_t k = 0; k < n; ++k) store(y + k * inner + i, vmul(load(y + k * inner + i), inv));
  }
}

template <vf (*F)(vf)>
void map(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 2 * kV <= n; i += 2 * kV) {
    const vf a = F(vload(x + i)), b = F(vload(x + i + kV));
    vstore(y + i, a);
    vstore(y + i + kV, b);
  }
  for (; i + kV <= n; i += kV) vstore(y + i, F(vload(x + i)));
  if (i < n) vstore_n(y + i, F(vload_n(x + i, n - i)), n - i);
}

void gelu(const float* x, float* y, int64_t n, bool tanh_form) {
  if (tanh_form)
    map<vgelu_tanh<>>(x, y, n);
  else
    map<vgelu_erf<>>(x, y, n);
}

void gelu_approx(const float* x, float* y, int64_t n, bool tanh_form) {
  if (tanh_form)
    map<vgelu_tanh<vdiv_approx, vexp_approx>>(x, y, n);
  else
    map<vgelu_erf<vdiv_approx, vexp_approx>>(x, y, n);
}

void erf(const float* x, float* y, int64_t n) { map<verf>(x, y, n); }

/// x / (1 + exp(-x)): large negative x gives x / (1 + 2^127) -> -0, NaN stays NaN.
inline vf vsilu(vf x) { return vdiv(x, vadd(vset1(1.0f), vexp(vsub(vzero(), x)))); }
void silu(const float* x, float* y, int64_t n) { map<vsilu>(x, y, n); }

void lookup(const int8_t* x, int8_t* y, int64_t n, const int8_t* table) {
  int64_t i = 0;
#if SN_VEC_NEON
  // 16 bytes at a time through the table's four 64-byte quarters: TBL gives 0
  // for an index past its quarter, TBX keeps what is there.
  const uint8x16x4_t t0 = vld1q_u8_x4(reinterpret_cast<const uint8_t*>(table));
  const uint8x16x4_t t1 = vld1q_u8_x4(reinterpret_cast<const uint8_t*>(table) + 64);
  const uint8x16x4_t t2 = vld1q_u8_x4(reinterpret_cast<const uint8_t*>(table) + 128);
  const uint8x16x4_t t3 = vld1q_u8_x4(reinterpret_cast<const uint8_t*>(table) + 192);
  const uint8x16_t quarter = vdupq_n_u8(64);
  for (; i + 16 <= n; i += 16) {
    uint8x16_t idx = vld1q_u8(reinterpret_cast<const uint8_t*>(x + i));
    uint8x16_t r = vqtbl4q_u8(t0, idx);
    idx = vsubq_u8(idx, quarter);
    r = vqtbx4q_u8(r, t1, idx);
    idx = vsubq_u8(idx, quarter);
    r = vqtbx4q_u8(r, t2, idx);
    idx = vsubq_u8(idx, quarter);
    r = vqtbx4q_u8(r, t3, idx);
    vst1q_u8(reinterpret_cast<uint8_t*>(y + i), r);
  }
#endif
  for (; i < n; ++i) y[i] = table[static_cast<uint8_t>(x[i])];
}

// Plain loops the compiler vectorises with this file's ISA flags (widening
// byte -> int32 -> float conversions); the subtraction and product as
// DequantizeLinear computes them, in float.
void dequantize_bytes(const uint8_t* q, bool is_signed, float* y, int64_t n, float scale, float zero_point) {
  if (is_signed) {
    const auto* s = reinterpret_cast<const int8_t*>(q);
    for (int64_t i = 0; i < n; ++i) y[i] = (static_cast<float>(s[i]) - zero_point) * scale;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (static_cast<float>(q[i]) - zero_point) * scale;
  }
}

// An attention row: t = s * scale + (bias ? bias[j] : add), its max m, then
// s = exp(t - m); returns the sum (float vectors). Normalising is the caller's.
float exp_row(float* s, const float* bias, float add, int64_t n, float scale, float* max_out) {
  const vf vs = vset1(scale), va = vset1(add);
  vf m0 = vset1(-INFINITY);
  int64_t i = 0;
  if (bias) {
    for (; i + kV <= n; i += kV) {
      const vf t = vfma(vload(s + i), vs, vload(bias + i));
      vstore(s + i, t);
      m0 = vmax(m0, t);
    }
    if (i < n) vstore_n(s + i, vfma(vload_n(s + i, n - i), vs, vload_n(bias + i, n - i)), n - i);
  } else {
    for (; i + kV <= n; i += kV) {
      const vf t = vfma(vload(s + i), vs, va);
      vstore(s + i, t);
      m0 = vmax(m0, t);
    }
    if (i < n) vstore_n(s + i, vfma(vload_n(s + i, n - i), vs, va), n - i);
  }
  if (i < n) m0 = vmax(m0, vload_n(s + i, n - i, -INFINITY));
  const float m = hmax(m0);
  *max_out = m;
  const vf mx = vset1(m);
  vf s0 = vzero();
  i = 0;
  for (; i + kV <= n; i += kV) {
    const vf e = vexp(vsub(vload(s + i), mx));
    vstore(s + i, e);
    s0 = vadd(s0, e);
  }
  if (i < n) {
    vstore_n(s + i, vexp(vsub(vload_n(s + i, n - i, -INFINITY), mx)), n - i);
    s0 = vadd(s0, vload_n(s + i, n - i));
  }
  return hsum(s0);
}

// y[i * ldy + r] = w[r] · x[i] (rows of k floats), r < rows, i < m: four weight
// rows at a time against each input row, so each weight is read from memory once.
void gemv(const float* w, int64_t rows, int64_t k, const float* x, int64_t m, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* w0 = w + r * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * k;
      vf a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
      int64_t j = 0;
      for (; j + kV <= k; j += kV) {
        const vf xv = vload(xi + j);
        a0 = vfma(vload(w0 + j), xv, a0);
        a1 = vfma(vload(w0 + k + j), xv, a1);
        a2 = vfma(vload(w0 + 2 * k + j), xv, a2);
        a3 = vfma(vload(w0 + 3 * k + j), xv, a3);
      }
      if (j < k) {
        const vf xv = vload_n(xi + j, k - j);
        a0 = vfma(vload_n(w0 + j, k - j), xv, a0);
        a1 = vfma(vload_n(w0 + k + j, k - j), xv, a1);
        a2 = vfma(vload_n(w0 + 2 * k + j, k - j), xv, a2);
        a3 = vfma(vload_n(w0 + 3 * k + j, k - j), xv, a3);
      }
      float* yi = y + i * ldy + r;
      yi[0] = hsum(a0);
      yi[1] = hsum(a1);
      yi[2] = hsum(a2);
      yi[3] = hsum(a3);
    }
  }
  for (; r < rows; ++r)
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * k;
      const float* wr = w + r * k;
      vf a = vzero();
      int64_t j = 0;
      for (; j + kV <= k; j += kV) a = vfma(vload(wr + j), vload(xi + j), a);
      if (j < k) a = vfma(vload_n(wr + j, k - j), vload_n(xi + j, k - j), a);
      y[i * ldy + r] = hsum(a);
    }
}

// One block of rows_times: rows i..i+ri (ri <= R) by NC vectors of columns
// (the last `tail` lanes wide where tail > 0), accumulators in registers.
template <int R, int NC, bool kTail>
void rows_times_block(const float* p, int64_t ldp, int64_t ri, const float* v, int64_t ldv, int64_t n, float* o,
                      int64_t ldo, int64_t tail, bool accumulate) {
  vf acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c)
      acc[r][c] = accumulate && r < ri ? ((kTail && c == NC - 1) ? vload_n(o + r * ldo + c * kV, tail) : vload(o + r * ldo + c * kV))
                                       : vzero();
  const float* pr[R];
  for (int r = 0; r < R; ++r) pr[r] = p + std::min<int64_t>(r, ri - 1) * ldp;
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v + j * ldv;
    vf vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = (kTail && c == NC - 1) ? vload_n(vj + c * kV, tail) : vload(vj + c * kV);
    for (int r = 0; r < R; ++r) {
      const vf b = vset1(pr[r][j]);
      for (int c = 0; c < NC; ++c) acc[r][c] = vfma(b, vv[c], acc[r][c]);
    }
  }
  for (int64_t r = 0; r < ri; ++r)
    for (int c = 0; c < NC; ++c) {
      float* out = o + r * ldo + c * kV;
      if (kTail && c == NC - 1) vstore_n(out, acc[r][c], tail);
      else vstore(out, acc[r][c]);
    }
}

// o[i * ldo + e] (+)= sum_j p[i * ldp + j] * v[j * ldv + e], i < rows, e < dv, j < n:
// P read in place (no packing), kRows of its rows against up to kCols vectors
// of V's row: the accumulators, V's vectors and a broadcast fit the registers
// (AVX2's 16: 6 x 2, as its GEMM's 6 x 16 tile; 4 x 4 spilled there and ran
// Whisper's attention products at 105 GFLOP/s against the GEMM's 170).
constexpr int kRows = kV == 8 ? 6 : 4;
constexpr int kCols = kV == 8 ? 2 : 4;
void rows_times(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t ldv, int64_t n, int64_t dv, float* o,
                int64_t ldo, bool accumulate) {
  for (int64_t e0 = 0; e0 < dv; e0 += kCols * kV) {
    const int64_t cols = std::min<int64_t>(kCols * kV, dv - e0);
    const int nc = static_cast<int>((cols + kV - 1) / kV);
    const int64_t tail = cols % kV;
    for (int64_t i = 0; i < rows; i += kRows) {
      const int64_t ri = std::min<int64_t>(kRows, rows - i);
      const float* pi = p + i * ldp;
      float* oi = o + i * ldo + e0;
      auto block = [&]<int NC, bool kTail>() {
        rows_times_block<kRows, NC, kTail>(pi, ldp, ri, v + e0, ldv, n, oi, ldo, tail, accumulate);
      };
      auto with_tail = [&]<bool kTail>() {
        switch (nc) {
          case 1: block.template operator()<1, kTail>(); break;
          case 2: block.template operator()<2, kTail>(); break;
          case 3: if constexpr (kCols >= 3) block.template operator()<3, kTail>(); break;
          default: if constexpr (kCols >= 4) block.template operator()<4, kTail>(); break;
        }
      };
      if (tail) with_tail.template operator()<true>();
      else with_tail.template operator()<false>();
    }
  }
}

}  // namespace

const Kernels kKernels{layernorm_rows,  rms_norm_rows,    softmax_rows, softmax_strided, gelu, gelu_approx, erf, group_norm, quantize,
                       min_max,         silu,             lookup,       dequantize_bytes, exp_row, gemv,     rows_times};

}  // namespace softneuro::cpu::vec::SN_VEC_NS
