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
