// AVX2 + FMA kernels of cpu/dynamic_int8; see dynamic_int8_kernels.hpp. Built
// with -mavx2 -mfma (CMakeLists.txt): nothing here may instantiate inline
// functions or templates shared with other files (the linker could keep this
// file's AVX2 copy for every caller); only intrinsics, in an anonymous namespace.
#include "routines/cpu/dynamic_int8_kernels.hpp"

#include <immintrin.h>

#include <cstring>

namespace softneuro::dynamic_int8 {
namespace {

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

template <int MR>
void tile(const int16_t* u, int64_t ldu, const int8_t* w, int64_t k2, const float* xs, const float* ws,
          const float* bias, float* y, int64_t ldy, int nvalid) {
  __m256i c0[MR], c1[MR];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) c0[r] = c1[r] = _mm256_setzero_si256();
  for (int64_t k = 0; k < k2; ++k) {
    // 16 columns x a K pair: bytes (c0k0, c0k1, c1k0, ...): widened, columns 0-7 and 8-15.
    const __m256i b0 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(w + k * 32)));
    const __m256i b1 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(w + k * 32 + 16)));
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, u + r * ldu + 2 * k, 4);
      const __m256i a = _mm256_set1_epi32(pair);
      c0[r] = _mm256_add_epi32(c0[r], _mm256_madd_epi16(a, b0));
      c1[r] = _mm256_add_epi32(c1[r], _mm256_madd_epi16(a, b1));
    }
  }
  const __m256 ws0 = _mm256_loadu_ps(ws), ws1 = _mm256_loadu_ps(ws + 8);
  const __m256 b0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  const __m256 b1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
    const __m256 s = _mm256_set1_ps(xs[r]);
    const __m256 y0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c0[r]), _mm256_mul_ps(ws0, s), b0);
    const __m256 y1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c1[r]), _mm256_mul_ps(ws1, s), b1);
    float* out = y + r * ldy;
    if (nvalid == 16) {
      _mm256_storeu_ps(out, y0);
      _mm256_storeu_ps(out + 8, y1);
    } else {
      alignas(32) float t[16];
      _mm256_store_ps(t, y0);
      _mm256_store_ps(t + 8, y1);
      for (int j = 0; j < nvalid; ++j) out[j] = t[j];
    }
  }
}

}  // namespace

bool quantize_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int16_t* u, int64_t ldu, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * ldx;
    int16_t* ur = u + r * ldu;
    __m256 mx = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(xr + i)));
    float amax = hmax(mx);
    bool finite = true;
    for (; i < k; ++i) {
      const float a = xr[i] < 0 ? -xr[i] : xr[i];
      amax = a > amax ? a : amax;
      finite = finite && a == a;
    }
    // max_ps drops a NaN operand: check the row's values themselves once (a NaN
    // or an infinity makes x - x nonzero or NaN).
    __m256 bad = _mm256_setzero_ps();
    for (i = 0; i + 8 <= k; i += 8) {
      const __m256 v = _mm256_loadu_ps(xr + i);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));
    }
    if (!finite || _mm256_movemask_ps(bad) != 0 || !(amax <= 3.4e38f)) return false;
    const int64_t kp = (k + 1) & ~int64_t(1);
    if (amax == 0) {
      s[r] = 0;
      std::memset(ur, 0, static_cast<std::size_t>(kp) * sizeof(int16_t));
      continue;
    }
    s[r] = amax / kActMax;
    const __m256 inv = _mm256_set1_ps(kActMax / amax);
    for (i = 0; i + 16 <= k; i += 16) {
      // Round to nearest even, as the scalar tail's nearbyint; |x * inv| <= 255.
      const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xr + i), inv));
      const __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xr + i + 8), inv));
      // packs interleaves 128-bit halves: put them back in order.
      const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ur + i), p);
    }
    const float invs = kActMax / amax;
    for (; i < k; ++i) ur[i] = static_cast<int16_t>(_mm_cvtss_si32(_mm_set_ss(xr[i] * invs)));
    if (kp > k) ur[k] = 0;
  }
  return true;
}

void gemm_tile(int mr, const int16_t* u, int64_t ldu, const int8_t* w, int64_t k2, const float* xs, const float* ws,
               const float* bias, float* y, int64_t ldy, int nvalid) {
  switch (mr) {
    case 1: return tile<1>(u, ldu, w, k2, xs, ws, bias, y, ldy, nvalid);
    case 2: return tile<2>(u, ldu, w, k2, xs, ws, bias, y, ldy, nvalid);
    case 3: return tile<3>(u, ldu, w, k2, xs, ws, bias, y, ldy, nvalid);
    default: return tile<4>(u, ldu, w, k2, xs, ws, bias, y, ldy, nvalid);
  }
}

}  // namespace softneuro::dynamic_int8
