// AVX2 + FMA kernels of cpu/dynamic_int8; see dynamic_int8_kernels.hpp. Built
// with -mavx2 -mfma (CMakeLists.txt): nothing here may instantiate inline
// functions or templates shared with other files (the linker could keep this
// file's AVX2 copy for every caller); only intrinsics, in an anonymous namespace.
#include "routines/cpu/dynamic_int8_kernels.hpp"
#include "routines/cpu/u8_quads_asm.inl"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace softneuro::dynamic_int8 {
namespace {

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

/// clamp(nearbyint(v / s) + z, 0, 255) of 8 values (DynamicQuantizeLinear's
/// grid) as int32; a NaN or infinity among them is noted in `bad`.
inline __m256i tensor_grid8(__m256 v, __m256 s, __m256 z, __m256& bad) {
  bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));
  const __m256 t = _mm256_round_ps(_mm256_div_ps(v, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_add_ps(t, z), _mm256_setzero_ps()), _mm256_set1_ps(255.0f)));
}

/// A tile row's 16 outputs (columns 0-7, 8-15), the first `nvalid` of them.
inline void store16(float* out, __m256 y0, __m256 y1, int nvalid) {
  if (nvalid == 16) {
    _mm256_storeu_ps(out, y0);
    _mm256_storeu_ps(out + 8, y1);
    return;
  }
  alignas(32) float t[16];
  _mm256_store_ps(t, y0);
  _mm256_store_ps(t + 8, y1);
  for (int j = 0; j < nvalid; ++j) out[j] = t[j];
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
    store16(y + r * ldy, y0, y1, nvalid);
  }
}

template <int MR>
void tile_u8s8(const uint8_t* q, int64_t ldq, const int8_t* w, int64_t k4, const float* xs, const int32_t* zp,
               const int32_t* colsum, const float* ws, const float* bias, float* y, int64_t ldy, int nvalid,
               const PairFix* fixes, int64_t nfix) {
  __m256i c0[MR], c1[MR];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) c0[r] = c1[r] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (MR == 4) u8_quads_4rows(reinterpret_cast<const char*>(q), ldq, reinterpret_cast<const char*>(w), k4, c0, c1);
  else
  for (int64_t k = 0; k < k4; ++k) {
    // 16 columns x a K quad: columns 0-7 in the first 32 bytes, 8-15 in the next.
    const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + k * 64));
    const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + k * 64 + 32));
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      int32_t quad;
      std::memcpy(&quad, q + r * ldq + 4 * k, 4);
      const __m256i a = _mm256_set1_epi32(quad);
      c0[r] = _mm256_add_epi32(c0[r], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b0), ones));
      c1[r] = _mm256_add_epi32(c1[r], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b1), ones));
    }
  }
  add_fixes<MR>(c0, c1, q, ldq, fixes, nfix);
  const __m256 ws0 = _mm256_loadu_ps(ws), ws1 = _mm256_loadu_ps(ws + 8);
  const __m256i cs0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(colsum));
  const __m256i cs1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(colsum + 8));
  const __m256 b0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  const __m256 b1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
    const __m256i z = _mm256_set1_epi32(zp[r]);
    const __m256 s = _mm256_set1_ps(xs[r]);
    const __m256i a0 = _mm256_sub_epi32(c0[r], _mm256_mullo_epi32(z, cs0));
    const __m256i a1 = _mm256_sub_epi32(c1[r], _mm256_mullo_epi32(z, cs1));
    const __m256 y0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0), _mm256_mul_ps(ws0, s), b0);
    const __m256 y1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1), _mm256_mul_ps(ws1, s), b1);
    store16(y + r * ldy, y0, y1, nvalid);
  }
}

}  // namespace

bool quantize_rows_u8(const float* x, int64_t m, int64_t k, int64_t ldx, uint8_t* q, int64_t ldq, float* s, int32_t* zp) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * ldx;
    uint8_t* qr = q + r * ldq;
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
      const __m256 v = _mm256_loadu_ps(xr + i);
      lo = _mm256_min_ps(lo, v);
      hi = _mm256_max_ps(hi, v);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));
    }
    alignas(32) float l8[8], h8[8];
    _mm256_store_ps(l8, lo);
    _mm256_store_ps(h8, hi);
    float mn = 0, mx = 0;
    for (int j = 0; j < 8; ++j) mn = l8[j] < mn ? l8[j] : mn, mx = h8[j] > mx ? h8[j] : mx;
    bool finite = _mm256_movemask_ps(bad) == 0;
    for (; i < k; ++i) {
      const float v = xr[i];
      finite = finite && v - v == 0;
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
    }
    if (!finite || !(mx - mn <= 3.4e38f)) return false;
    const int64_t kp = (k + 3) & ~int64_t(3);
    if (mx == mn) {  // all zeros
      s[r] = 0;
      zp[r] = 0;
      std::memset(qr, 0, static_cast<std::size_t>(kp));
      continue;
    }
    const float scale = (mx - mn) / 255.0f, inv = 255.0f / (mx - mn);
    const int32_t z = _mm_cvtss_si32(_mm_set_ss(-mn * inv));  // in [0, 255]: mn <= 0 <= mx
    s[r] = scale;
    zp[r] = z;
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i vz = _mm256_set1_epi32(z);
    for (i = 0; i + 32 <= k; i += 32) {
      __m256i v[4];
      for (int j = 0; j < 4; ++j)
        v[j] = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xr + i + 8 * j), vinv)), vz);
      // Saturating packs keep [0, 255]; each pack interleaves 128-bit halves, undone by the permutes.
      const __m256i w01 = _mm256_packs_epi32(v[0], v[1]), w23 = _mm256_packs_epi32(v[2], v[3]);
      const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qr + i), b);
    }
    for (; i < k; ++i) {
      const int32_t v = _mm_cvtss_si32(_mm_set_ss(xr[i] * inv)) + z;
      qr[i] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    for (; i < kp; ++i) qr[i] = 0;
  }
  return true;
}

void gemm_tile_u8s8(int mr, const uint8_t* q, int64_t ldq, const int8_t* w, int64_t k4, const float* xs,
                    const int32_t* zp, const int32_t* colsum, const float* ws, const float* bias, float* y, int64_t ldy,
                    int nvalid, const PairFix* fixes, int64_t nfix) {
  switch (mr) {
    case 1: return tile_u8s8<1>(q, ldq, w, k4, xs, zp, colsum, ws, bias, y, ldy, nvalid, fixes, nfix);
    case 2: return tile_u8s8<2>(q, ldq, w, k4, xs, zp, colsum, ws, bias, y, ldy, nvalid, fixes, nfix);
    case 3: return tile_u8s8<3>(q, ldq, w, k4, xs, zp, colsum, ws, bias, y, ldy, nvalid, fixes, nfix);
    default: return tile_u8s8<4>(q, ldq, w, k4, xs, zp, colsum, ws, bias, y, ldy, nvalid, fixes, nfix);
  }
}

bool quantize_tensor_u8_avx2(const float* x, int64_t m, int64_t k, int64_t ldx, uint8_t* q, int64_t ldq, float scale,
                             int32_t zp) {
  const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(static_cast<float>(zp));
  const int64_t padded = (k + 3) & ~int64_t(3);
  __m256 bad = _mm256_setzero_ps();
  bool finite = true;
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * ldx;
    uint8_t* qr = q + r * ldq;
    int64_t i = 0;
    for (; i + 32 <= k; i += 32) {
      __m256i v[4];
      for (int j = 0; j < 4; ++j) v[j] = tensor_grid8(_mm256_loadu_ps(xr + i + 8 * j), s, z, bad);
      // Each pack interleaves 128-bit halves, undone by the permute.
      const __m256i w01 = _mm256_packs_epi32(v[0], v[1]), w23 = _mm256_packs_epi32(v[2], v[3]);
      const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qr + i), b);
    }
    for (; i < k; ++i) {
      const float v = xr[i];
      if (!(v - v == 0)) finite = false;
      const float t = std::nearbyint(v / scale) + static_cast<float>(zp);
      qr[i] = finite ? static_cast<uint8_t>(std::min(std::max(t, 0.0f), 255.0f)) : 0;
    }
    for (; i < padded; ++i) qr[i] = 0;
  }
  return finite && _mm256_movemask_ps(bad) == 0;
}

bool quantize_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int16_t* u, int64_t ldu, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * ldx;
    int16_t* ur = u + r * ldu;
    // max_ps drops a NaN operand: the same pass checks the values themselves
    // (a NaN or an infinity makes x - x nonzero or NaN).
    __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
      const __m256 v = _mm256_loadu_ps(xr + i);
      mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v));
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));
    }
    float amax = hmax(mx);
    bool finite = _mm256_movemask_ps(bad) == 0;
    for (; i < k; ++i) {
      const float a = xr[i] < 0 ? -xr[i] : xr[i];
      amax = a > amax ? a : amax;
      finite = finite && xr[i] - xr[i] == 0;
    }
    if (!finite || !(amax <= 3.4e38f)) return false;
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

bool quantize_tensor(const float* x, int64_t m, int64_t k, int64_t ldx, int16_t* u, int64_t ldu, float scale,
                     int32_t zp) {
  const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(static_cast<float>(zp));
  const __m256i zi = _mm256_set1_epi32(zp);
  __m256 bad = _mm256_setzero_ps();
  bool finite = true;
  // clamp(nearbyint(x / scale) + zp, 0, 255) - zp, in [-255, 255].
  auto one = [&](float v) {
    if (!(v - v == 0)) return finite = false, int16_t{0};
    const float t = std::nearbyint(v / scale) + static_cast<float>(zp);
    return static_cast<int16_t>(static_cast<int32_t>(std::min(std::max(t, 0.0f), 255.0f)) - zp);
  };
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * ldx;
    int16_t* ur = u + r * ldu;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      __m256i q[2];
      for (int h = 0; h < 2; ++h) q[h] = _mm256_sub_epi32(tensor_grid8(_mm256_loadu_ps(xr + i + 8 * h), s, z, bad), zi);
      // packs interleaves 128-bit halves: put them back in order.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ur + i), _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8));
    }
    for (; i < k; ++i) ur[i] = one(xr[i]);
    if (((k + 1) & ~int64_t(1)) > k) ur[k] = 0;
  }
  return finite && _mm256_movemask_ps(bad) == 0;
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
