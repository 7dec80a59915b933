// AVX512-VNNI kernels of cpu/dynamic_int8's u8 form; see dynamic_int8_kernels.hpp.
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
// (CMakeLists.txt); callers check vnni512_usable() first. The rules of every
// per-ISA file: nothing but intrinsics and this file's own internal functions.
//
// vpdpbusd multiplies unsigned bytes by signed bytes and sums four products
// into each int32 lane without intermediate saturation, so the weights keep
// all 8 bits ([-127, 127]) where the AVX2 form's vpmaddubsw needs 7: exact
// while K * 255 * 127 fits int32 (kMaxK).
#include "routines/cpu/dynamic_int8_kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace softneuro::dynamic_int8 {
namespace {

template <int MR, int NB>
void tile(const uint8_t* q, int64_t ldq, const int8_t* w, int64_t block_bytes, int64_t k4, const float* xs,
          const int32_t* zp, const int32_t* colsum, const float* ws, const float* bias, float* y, int64_t ldy,
          int nlast) {
  __m512i c[MR][NB];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) c[r][j] = _mm512_setzero_si512();
  for (int64_t k = 0; k < k4; ++k) {
    // Each block's 16 columns x a K quad: 64 bytes.
    __m512i b[NB];
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) b[j] = _mm512_load_si512(w + j * block_bytes + k * 64);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      int32_t quad;
      std::memcpy(&quad, q + r * ldq + 4 * k, 4);
      const __m512i a = _mm512_set1_epi32(quad);
#pragma GCC unroll 4
      for (int j = 0; j < NB; ++j) c[r][j] = _mm512_dpbusd_epi32(c[r][j], a, b[j]);
    }
  }
  const __mmask16 last = static_cast<__mmask16>((1u << nlast) - 1u);
#pragma GCC unroll 4
  for (int j = 0; j < NB; ++j) {
    const __m512i cs = _mm512_loadu_si512(colsum + 16 * j);
    const __m512 wsj = _mm512_loadu_ps(ws + 16 * j);
    const __m512 bj = bias ? _mm512_loadu_ps(bias + 16 * j) : _mm512_setzero_ps();
    const __mmask16 m = j == NB - 1 ? last : static_cast<__mmask16>(0xFFFF);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512i acc = _mm512_sub_epi32(c[r][j], _mm512_mullo_epi32(_mm512_set1_epi32(zp[r]), cs));
      const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(wsj, _mm512_set1_ps(xs[r])), bj);
      _mm512_mask_storeu_ps(y + r * ldy + 16 * j, m, v);
    }
  }
}

template <int MR>
void tile_blocks(int nb, const uint8_t* q, int64_t ldq, const int8_t* w, int64_t block_bytes, int64_t k4,
                 const float* xs, const int32_t* zp, const int32_t* colsum, const float* ws, const float* bias, float* y,
                 int64_t ldy, int nlast) {
  switch (nb) {
    case 1: return tile<MR, 1>(q, ldq, w, block_bytes, k4, xs, zp, colsum, ws, bias, y, ldy, nlast);
    case 2: return tile<MR, 2>(q, ldq, w, block_bytes, k4, xs, zp, colsum, ws, bias, y, ldy, nlast);
    case 3: return tile<MR, 3>(q, ldq, w, block_bytes, k4, xs, zp, colsum, ws, bias, y, ldy, nlast);
    default: return tile<MR, 4>(q, ldq, w, block_bytes, k4, xs, zp, colsum, ws, bias, y, ldy, nlast);
  }
}

inline bool finite16(__m512 v) { return _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_NEQ_UQ) == 0; }

inline __mmask16 first(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

}  // namespace

bool pack_rows_int8(const float* x, int64_t n, int64_t depth, int64_t ldx, int8_t* w, int64_t block_bytes, float* scale,
                    int32_t* sum) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t c = 0; c < n; ++c) {
    const float* row = x + c * ldx;
    __m512 mx = _mm512_setzero_ps();
    bool ok = true;
    for (int64_t t = 0; t < depth; t += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(first(depth - t), row + t);
      ok = ok && finite16(v);
      mx = _mm512_max_ps(mx, _mm512_andnot_ps(sign, v));
    }
    if (!ok) return false;
    const float amax = _mm512_reduce_max_ps(mx);
    scale[c] = amax / 127.0f;
    sum[c] = 0;
    if (amax == 0) continue;  // zeros, as w already holds
    const __m512 inv = _mm512_set1_ps(127.0f / amax);
    int8_t* col = w + (c / kBlockN) * block_bytes + (c % kBlockN) * 4;
    __m512i total = _mm512_setzero_si512();
    for (int64_t t = 0; t < depth; t += 16) {
      const __m512i i = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(first(depth - t), row + t), inv));
      total = _mm512_add_epi32(total, i);
      alignas(16) int32_t quads[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(quads), _mm512_cvtsepi32_epi8(i));
      const int64_t nq = std::min<int64_t>(4, (depth - t + 3) / 4);
      for (int64_t j = 0; j < nq; ++j) std::memcpy(col + (t / 4 + j) * 4 * kBlockN, &quads[j], 4);
    }
    sum[c] = _mm512_reduce_add_epi32(total);
  }
  return true;
}

bool pack_columns_int8(const float* x, int64_t depth, int64_t n, int64_t ldx, int8_t* w, int64_t block_bytes,
                       float* scale, int32_t* sum) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t c0 = 0; c0 < n; c0 += kBlockN) {
    const __mmask16 m = first(n - c0);
    __m512 mx = _mm512_setzero_ps();
    bool ok = true;
    for (int64_t t = 0; t < depth; ++t) {
      const __m512 v = _mm512_maskz_loadu_ps(m, x + t * ldx + c0);
      ok = ok && finite16(v);
      mx = _mm512_max_ps(mx, _mm512_andnot_ps(sign, v));
    }
    if (!ok) return false;
    _mm512_mask_storeu_ps(scale + c0, m, _mm512_div_ps(mx, _mm512_set1_ps(127.0f)));
    const __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(mx, _mm512_setzero_ps(), _CMP_GT_OQ),
                                           _mm512_set1_ps(127.0f), mx);  // 0 for a column of zeros
    int8_t* blk = w + (c0 / kBlockN) * block_bytes;
    __m512i total = _mm512_setzero_si512();
    for (int64_t t = 0; t < depth; t += 4) {
      // Four keys' 16 channels to the block's [channel][4 keys] bytes.
      __m128i r[4];
      for (int64_t i = 0; i < 4; ++i) {
        const __m512 v = t + i < depth ? _mm512_maskz_loadu_ps(m, x + (t + i) * ldx + c0) : _mm512_setzero_ps();
        const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));
        total = _mm512_add_epi32(total, q);
        r[i] = _mm512_cvtsepi32_epi8(q);
      }
      const __m128i lo01 = _mm_unpacklo_epi8(r[0], r[1]), hi01 = _mm_unpackhi_epi8(r[0], r[1]);
      const __m128i lo23 = _mm_unpacklo_epi8(r[2], r[3]), hi23 = _mm_unpackhi_epi8(r[2], r[3]);
      auto* out = reinterpret_cast<__m128i*>(blk + (t / 4) * 4 * kBlockN);
      _mm_storeu_si128(out, _mm_unpacklo_epi16(lo01, lo23));
      _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(lo01, lo23));
      _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(hi01, hi23));
      _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(hi01, hi23));
    }
    _mm512_mask_storeu_epi32(sum + c0, m, total);
  }
  return true;
}

bool quantize_tensor_u8(const float* x, int64_t m, int64_t k, int64_t ldx, uint8_t* q, int64_t ldq, float scale,
                        int32_t zp) {
  const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(static_cast<float>(zp));
  const __m512 lo = _mm512_setzero_ps(), hi = _mm512_set1_ps(255.0f);
  const int64_t padded = (k + 3) & ~int64_t(3);
  bool ok = true;
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * ldx;
    uint8_t* qr = q + r * ldq;
    for (int64_t j = 0; j < k; j += 16) {
      const __mmask16 mk = first(k - j);
      const __m512 v = _mm512_maskz_loadu_ps(mk, xr + j);
      ok = ok && finite16(v);
      const __m512 t = _mm512_roundscale_ps(_mm512_div_ps(v, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 c = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(t, z), lo), hi);
      _mm_mask_storeu_epi8(qr + j, mk, _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(c)));
    }
    for (int64_t j = k; j < padded; ++j) qr[j] = 0;
  }
  return ok;
}

bool quantize_unit_rows(const float* p, int64_t rows, int64_t n, int64_t ldp, uint8_t* q, int64_t ldq) {
  const __m512 k255 = _mm512_set1_ps(255.0f);
  const int64_t padded = (n + 3) & ~int64_t(3);
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * ldp;
    uint8_t* qr = q + r * ldq;
    bool ok = true;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = first(n - j);
      const __m512 v = _mm512_maskz_loadu_ps(m, pr + j);
      ok = ok && finite16(v);
      // [0, 1] to [0, 255], to nearest even; unsigned saturation keeps 255.
      _mm_mask_storeu_epi8(qr + j, m, _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v, k255))));
    }
    if (!ok) return false;
    for (int64_t j = n; j < padded; ++j) qr[j] = 0;
  }
  return true;
}

void gemm_tile_vnni(int mr, int nb, const uint8_t* q, int64_t ldq, const int8_t* w, int64_t block_bytes, int64_t k4,
                    const float* xs, const int32_t* zp, const int32_t* colsum, const float* ws, const float* bias,
                    float* y, int64_t ldy, int nlast) {
  static_assert(kTileMVnni == 6 && kTileBlocksVnni == 4);
  switch (mr) {
    case 1: return tile_blocks<1>(nb, q, ldq, w, block_bytes, k4, xs, zp, colsum, ws, bias, y, ldy, nlast);
    case 2: return tile_blocks<2>(nb, q, ldq, w, block_bytes, k4, xs, zp, colsum, ws, bias, y, ldy, nlast);
    case 3: return tile_blocks<3>(nb, q, ldq, w, block_bytes, k4, xs, zp, colsum, ws, bias, y, ldy, nlast);
    case 4: return tile_blocks<4>(nb, q, ldq, w, block_bytes, k4, xs, zp, colsum, ws, bias, y, ldy, nlast);
    case 5: return tile_blocks<5>(nb, q, ldq, w, block_bytes, k4, xs, zp, colsum, ws, bias, y, ldy, nlast);
    default: return tile_blocks<6>(nb, q, ldq, w, block_bytes, k4, xs, zp, colsum, ws, bias, y, ldy, nlast);
  }
}

}  // namespace softneuro::dynamic_int8
