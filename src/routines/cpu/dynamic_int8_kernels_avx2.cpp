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

/// The first `count` (may be 8 or more) of 8 floats at p, zeros past them; nothing past them is read.
inline __m256 load_first8(const float* p, int64_t count) {
  if (count >= 8) return _mm256_loadu_ps(p);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(count)), lane));
}

/// Lanes whose value is NaN or infinity.
inline __m256 non_finite(__m256 v) { return _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ); }

/// 16 int32 (a: 0-7, b: 8-15) to 16 int8 in order, saturating.
inline __m128i to_i8x16(__m256i a, __m256i b) {
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);  // packs interleaves 128-bit halves
  return _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

inline int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

bool quantize_rows_u8(const float* x, int64_t m, int64_t k, int64_t ldx, uint8_t* q, int64_t ldq, float* s, int32_t* zp, int top) {
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
    const float scale = (mx - mn) / static_cast<float>(top), inv = static_cast<float>(top) / (mx - mn);
    const int32_t z = _mm_cvtss_si32(_mm_set_ss(-mn * inv));  // in [0, top]: mn <= 0 <= mx
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

bool pack_rows_int8(const float* x, int64_t n, int64_t depth, int64_t ldx, int8_t* w, int64_t block_bytes, float* scale,
                    int32_t* sum, int qmax) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t c = 0; c < n; ++c) {
    const float* row = x + c * ldx;
    __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int64_t t = 0; t < depth; t += 8) {
      const __m256 v = load_first8(row + t, depth - t);
      bad = _mm256_or_ps(bad, non_finite(v));
      mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v));
    }
    if (_mm256_movemask_ps(bad) != 0) return false;
    const float amax = hmax(mx);
    scale[c] = amax / static_cast<float>(qmax);
    sum[c] = 0;
    if (amax == 0) continue;  // zeros, as w already holds
    const __m256 inv = _mm256_set1_ps(static_cast<float>(qmax) / amax);
    int8_t* col = w + (c / kBlockN) * block_bytes + (c % kBlockN) * 4;
    __m256i total = _mm256_setzero_si256();
    for (int64_t t = 0; t < depth; t += 16) {
      const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(load_first8(row + t, depth - t), inv));
      const __m256i i1 = depth - t > 8 ? _mm256_cvtps_epi32(_mm256_mul_ps(load_first8(row + t + 8, depth - t - 8), inv))
                                       : _mm256_setzero_si256();
      total = _mm256_add_epi32(total, _mm256_add_epi32(i0, i1));
      alignas(16) int32_t quads[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(quads), to_i8x16(i0, i1));
      const int64_t nq = std::min<int64_t>(4, (depth - t + 3) / 4);
      for (int64_t j = 0; j < nq; ++j) std::memcpy(col + (t / 4 + j) * 4 * kBlockN, &quads[j], 4);
    }
    sum[c] = hsum(total);
  }
  return true;
}

bool pack_columns_int8(const float* x, int64_t depth, int64_t n, int64_t ldx, int8_t* w, int64_t block_bytes,
                       float* scale, int32_t* sum, int qmax) {
  const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps(), q = _mm256_set1_ps(static_cast<float>(qmax));
  for (int64_t c0 = 0; c0 < n; c0 += kBlockN) {
    const int64_t nc = std::min<int64_t>(kBlockN, n - c0);
    __m256 mx0 = zero, mx1 = zero, bad = zero;
    for (int64_t t = 0; t < depth; ++t) {
      const __m256 v0 = load_first8(x + t * ldx + c0, nc), v1 = nc > 8 ? load_first8(x + t * ldx + c0 + 8, nc - 8) : zero;
      bad = _mm256_or_ps(bad, _mm256_or_ps(non_finite(v0), non_finite(v1)));
      mx0 = _mm256_max_ps(mx0, _mm256_andnot_ps(sign, v0));
      mx1 = _mm256_max_ps(mx1, _mm256_andnot_ps(sign, v1));
    }
    if (_mm256_movemask_ps(bad) != 0) return false;
    alignas(32) float sc[16];
    _mm256_store_ps(sc, _mm256_div_ps(mx0, q));
    _mm256_store_ps(sc + 8, _mm256_div_ps(mx1, q));
    std::memcpy(scale + c0, sc, static_cast<std::size_t>(nc) * sizeof(float));
    // 0 for a column of zeros (the division's NaN masked off).
    const __m256 inv0 = _mm256_and_ps(_mm256_cmp_ps(mx0, zero, _CMP_GT_OQ), _mm256_div_ps(q, mx0));
    const __m256 inv1 = _mm256_and_ps(_mm256_cmp_ps(mx1, zero, _CMP_GT_OQ), _mm256_div_ps(q, mx1));
    int8_t* blk = w + (c0 / kBlockN) * block_bytes;
    __m256i total0 = _mm256_setzero_si256(), total1 = _mm256_setzero_si256();
    for (int64_t t = 0; t < depth; t += 4) {
      // Four keys' 16 channels to the block's [channel][4 keys] bytes.
      __m128i r[4];
      for (int64_t i = 0; i < 4; ++i) {
        __m256i q0 = _mm256_setzero_si256(), q1 = _mm256_setzero_si256();
        if (t + i < depth) {
          const float* at = x + (t + i) * ldx + c0;
          q0 = _mm256_cvtps_epi32(_mm256_mul_ps(load_first8(at, nc), inv0));
          if (nc > 8) q1 = _mm256_cvtps_epi32(_mm256_mul_ps(load_first8(at + 8, nc - 8), inv1));
        }
        total0 = _mm256_add_epi32(total0, q0);
        total1 = _mm256_add_epi32(total1, q1);
        r[i] = to_i8x16(q0, q1);
      }
      const __m128i lo01 = _mm_unpacklo_epi8(r[0], r[1]), hi01 = _mm_unpackhi_epi8(r[0], r[1]);
      const __m128i lo23 = _mm_unpacklo_epi8(r[2], r[3]), hi23 = _mm_unpackhi_epi8(r[2], r[3]);
      auto* out = reinterpret_cast<__m128i*>(blk + (t / 4) * 4 * kBlockN);
      _mm_storeu_si128(out, _mm_unpacklo_epi16(lo01, lo23));
      _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(lo01, lo23));
      _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(hi01, hi23));
      _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(hi01, hi23));
    }
    alignas(32) int32_t tot[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(tot), total0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(tot + 8), total1);
    std::memcpy(sum + c0, tot, static_cast<std::size_t>(nc) * sizeof(int32_t));
  }
  return true;
}

bool quantize_unit_rows(const float* p, int64_t rows, int64_t n, int64_t ldp, uint8_t* q, int64_t ldq) {
  const __m256 k255 = _mm256_set1_ps(255.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int64_t padded = (n + 3) & ~int64_t(3);
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * ldp;
    uint8_t* qr = q + r * ldq;
    __m256 bad = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
      __m256i v[4];
      for (int i = 0; i < 4; ++i) {
        const __m256 f = _mm256_loadu_ps(pr + j + 8 * i);
        bad = _mm256_or_ps(bad, non_finite(f));
        v[i] = _mm256_cvtps_epi32(_mm256_mul_ps(f, k255));  // to nearest even
      }
      // Saturating packs keep 255; each pack interleaves 128-bit halves, undone by the permute.
      const __m256i b = _mm256_permutevar8x32_epi32(
          _mm256_packus_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3])), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qr + j), b);
    }
    for (; j < n; ++j) {
      const float v = pr[j];
      if (!(v - v == 0)) return false;
      const int32_t i = _mm_cvtss_si32(_mm_set_ss(v * 255.0f));
      qr[j] = static_cast<uint8_t>(i < 0 ? 0 : i > 255 ? 255 : i);
    }
    if (_mm256_movemask_ps(bad) != 0) return false;
    for (; j < padded; ++j) qr[j] = 0;
  }
  return true;
}

}  // namespace softneuro::dynamic_int8
