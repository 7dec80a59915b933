// cpu/nbits_dense's int8 kernel (MatMulNBits's accuracy_level 4) on AVX-512
// VNNI (nbits_dense_kernels.hpp): 4-bit codes, two a byte, against rows of x
// quantised to int8 per block. One vpdpbusd multiplies 64 codes (unsigned, at
// most 15) by 64 values of x (signed) into 16 int32 lanes, exact; the lanes are
// scaled in float32 and accumulated there, summed once at the end. The AVX2
// kernel takes two vpmaddubsw, an add and a vpmaddwd for the same 64 codes on
// half the width.
// Built with AVX-512 F/BW/VL/DQ + VNNI: only intrinsics and this file's own
// helpers, in an anonymous namespace.
#include "routines/cpu/nbits_dense_kernels.hpp"

#include <immintrin.h>

#include <cstring>
#include <type_traits>

namespace softneuro::cpu::nbits {
namespace {

constexpr int64_t kAhead = 8;  // weight rows ahead, into L2 (as the AVX2 kernel: short rows of many streams)

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

/// A block pair's two scales (blocks of 32) spread to the lanes vpdpbusd sums
/// each block's products into: lanes 0-3 and 8-11 the first, 4-7 and 12-15 the
/// second (the codes' order below).
inline __m512 pair_scales(const float* at) {
  const __m512i index = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
  return _mm512_permutexvar_ps(index, _mm512_castpd_ps(_mm512_set1_pd(*reinterpret_cast<const double*>(at))));
}

/// R weight rows from o against MX rows of x: packed codes in blocks of 32
/// (Block32) or of a multiple of 64. Two groups of 32 codes (32 bytes) at a
/// time: their low nibbles are codes 0-15 of both groups, the high ones codes
/// 16-31, so the 32 bytes broadcast to both halves of a register, the upper
/// half shifted by 4, and one AND give [g0 0-15, g1 0-15, g0 16-31, g1 16-31];
/// x's 128-bit quarters are put in that order once per pass, shared by the R
/// rows. The zero points' term, sum_b s z xs xsum, in its own pass.
template <int R, int MX, bool Block32>
void int8_tile(const Weights& w, int64_t o, const int8_t* xq, int64_t ldq, const float* xs, const int32_t* xsum,
               float* y, int64_t ldy) {
  const int64_t k = w.k, nb = w.blocks, groups = k / 32, pairs = groups / 2;
  const __m512i low = _mm512_set1_epi8(0x0F), upper = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
  const uint8_t* q[R];
  const float* s[R];
  __m512 acc[MX * R];  // [m * R + r]
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    q[r] = w.codes + (o + r) * (k / 2);
    s[r] = w.scale + (o + r) * nb;
#pragma GCC unroll 4
    for (int m = 0; m < MX; ++m) acc[m * R + r] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t blk = Block32 ? 2 * p : 64 * p / w.block;
    __m512i xv[MX];
    __m512 xsv[MX];
#pragma GCC unroll 4
    for (int m = 0; m < MX; ++m) {
      const __m512i a = _mm512_loadu_si512(xq + m * ldq + 64 * p);
      xv[m] = _mm512_shuffle_i64x2(a, a, _MM_SHUFFLE(3, 1, 2, 0));
      xsv[m] = Block32 ? pair_scales(xs + m * nb + blk) : _mm512_set1_ps(xs[m * nb + blk]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (p % 2 == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(q[r] + kAhead * (k / 2) + 32 * p), _MM_HINT_T1);
        if (p % 8 == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(s[r] + kAhead * nb + 2 * p), _MM_HINT_T1);
          if (w.zero_bytes) {
            if (p % 32 == 0) _mm_prefetch(reinterpret_cast<const char*>(w.zero_bytes + (o + r + kAhead) * nb + 2 * p), _MM_HINT_T1);
          } else if (w.zero && !w.uniform_zero) {
            _mm_prefetch(reinterpret_cast<const char*>(w.zero + (o + r + kAhead) * nb + 2 * p), _MM_HINT_T1);
          }
        }
      }
      const __m512i c = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r] + 32 * p)));
      const __m512i codes = _mm512_and_si512(_mm512_srlv_epi64(c, upper), low);
      const __m512 sv = Block32 ? pair_scales(s[r] + blk) : _mm512_set1_ps(s[r][blk]);
#pragma GCC unroll 4
      for (int m = 0; m < MX; ++m) {
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, xv[m]);
        acc[m * R + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sv, xsv[m]), acc[m * R + r]);
      }
    }
  }
  if (groups % 2) {  // a last group alone: codes 0-15 and 16-31 in order, x as it is
    const int64_t g = groups - 1, blk = 32 * g / w.block;
    const __m256i low8 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[r] + 16 * g));
      const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(c, 4), c), low8);
#pragma GCC unroll 4
      for (int m = 0; m < MX; ++m) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + m * ldq + 32 * g));
        const __m256 d = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), codes, xv));
        const __m256 t = _mm256_mul_ps(d, _mm256_set1_ps(s[r][blk] * xs[m * nb + blk]));
        acc[m * R + r] = _mm512_add_ps(acc[m * R + r], _mm512_zextps256_ps512(t));
      }
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MX; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float* out = y + m * ldy + o + r;
      if (!w.zero) {
        *out = hsum(acc[m * R + r]);
        continue;
      }
      // sum_b s xs z xsum: the scales are in L1 (just read); z one value, bytes, or int32.
      const int32_t* z = w.zero + (o + r) * nb;
      const uint8_t* zb = w.zero_bytes ? w.zero_bytes + (o + r) * nb : nullptr;
      const float* xsm = xs + m * nb;
      const int32_t* xsumm = xsum + m * nb;
      const __m512i z0 = _mm512_set1_epi32(w.zero[0]);
      __m512 zt = _mm512_setzero_ps();
      int64_t b = 0;
      for (; b + 16 <= nb; b += 16) {
        const __m512i zv = w.uniform_zero ? z0
                           : zb ? _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zb + b)))
                                : _mm512_loadu_si512(z + b);
        const __m512i zx = _mm512_mullo_epi32(zv, _mm512_loadu_si512(xsumm + b));
        zt = _mm512_fmadd_ps(_mm512_cvtepi32_ps(zx), _mm512_mul_ps(_mm512_loadu_ps(s[r] + b), _mm512_loadu_ps(xsm + b)), zt);
      }
      float tail = 0;
      for (; b < nb; ++b) tail += s[r][b] * xsm[b] * static_cast<float>((w.uniform_zero ? w.zero[0] : z[b]) * xsumm[b]);
      *out = hsum(_mm512_sub_ps(acc[m * R + r], zt)) - tail;
    }
}

template <int MX, bool Block32>
void int8_tile_rows(const Weights& w, int64_t o0, int64_t o1, const int8_t* xq, int64_t ldq, const float* xs,
                    const int32_t* xsum, float* y, int64_t ldy) {
  constexpr int R = MX >= 4 ? 2 : 4;  // R x MX accumulators beside x's MX rows and their scales
  int64_t o = o0;
  for (; o + R <= o1; o += R) int8_tile<R, MX, Block32>(w, o, xq, ldq, xs, xsum, y, ldy);
  for (; o < o1; ++o) int8_tile<1, MX, Block32>(w, o, xq, ldq, xs, xsum, y, ldy);
}

template <bool Block32>
void int8_rows_blocks(const Weights& w, int64_t o0, int64_t o1, const int8_t* xq, int64_t ldq, const float* xs,
                      const int32_t* xsum, int64_t rows, float* y, int64_t ldy) {
  const int64_t nb = w.blocks;
  // Four rows of x per pass over the weights (each weight row unpacked once
  // for the four), then two, then one.
  int64_t m = 0;
  for (; m + 4 <= rows; m += 4)
    int8_tile_rows<4, Block32>(w, o0, o1, xq + m * ldq, ldq, xs + m * nb, xsum + m * nb, y + m * ldy, ldy);
  if (m + 2 <= rows) {
    int8_tile_rows<2, Block32>(w, o0, o1, xq + m * ldq, ldq, xs + m * nb, xsum + m * nb, y + m * ldy, ldy);
    m += 2;
  }
  if (m < rows) int8_tile_rows<1, Block32>(w, o0, o1, xq + m * ldq, ldq, xs + m * nb, xsum + m * nb, y + m * ldy, ldy);
}

void int8_rows(const Weights& w, int64_t o0, int64_t o1, const int8_t* xq, int64_t ldq, const float* xs,
               const int32_t* xsum, int64_t rows, float* y, int64_t ldy) {
  if (w.block == 32) int8_rows_blocks<true>(w, o0, o1, xq, ldq, xs, xsum, rows, y, ldy);
  else int8_rows_blocks<false>(w, o0, o1, xq, ldq, xs, xsum, rows, y, ldy);
}

// ---------------------------------------------------------------------------
// Prompts (many rows of x): per strip of 16 weight rows, each group's 16 bytes
// of codes of the 16 rows transposed by dwords into four registers (dword q of
// every row: rows L, L + 4, L + 8, L + 12 in 128-bit lane L, an order the
// strip's scales are gathered in and its sums put back from), shared by up to
// 8 rows of x. A dword of packed codes holds codes j..j+3 in its low nibbles
// and j+16..j+19 in its high ones, so one AND and one shift give two operands
// of vpdpbusd, each against four consecutive values of x broadcast. Per block,
// the int32 sums of each row of x are scaled into float32 once (against once
// per 64 codes in the row kernel).

constexpr int kStripMx = 8;  ///< rows of x per pass (16 accumulators beside the operands)

/// The lane of each row (and back): lane l holds row (l / 4) + 4 (l % 4).
inline __m512i lane_rows() { return _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); }

/// MX rows of x (codes as panel_layout_x lays them out; scales and code sums per block, ld ldb) against
/// the strip of 16 weight rows from row0, `stride` bytes apart (past the
/// strip's n rows, zeros: their lanes are not stored), prefetching the strip
/// at `next` (null: none): y[m][i] for i < n. sp: the strip's
/// scales per block (16 each, in lane order), zp: its zero points as floats
/// (null: none).
template <int MX>
void strip_tile(const uint8_t* row0, int64_t stride, const uint8_t* next, const float* sp, const float* zp,
                int64_t groups, int64_t per_block, int64_t nb, const int32_t* xi, const float* xs, int64_t ldb,
                const int32_t* xsum, float* y, int64_t ldy, int n) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 accf[MX];
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m) accf[m] = _mm512_setzero_ps();
  for (int64_t b = 0, g0 = 0; b < nb; ++b, g0 += per_block) {
    __m512i acc[MX];
#pragma GCC unroll 8
    for (int m = 0; m < MX; ++m) acc[m] = _mm512_setzero_si512();
    const int64_t g1 = g0 + per_block < groups ? g0 + per_block : groups;
    for (int64_t g = g0; g < g1; ++g) {
      if (next && g % 4 == 0)  // the next strip's lines at this place: 16 rows of short streams
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) _mm_prefetch(reinterpret_cast<const char*>(next + i * stride + 16 * g), _MM_HINT_T1);
      __m512i r4[4];  // rows 4i .. 4i + 3, a 128-bit lane each
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const uint8_t* p = row0 + 4 * i * stride + 16 * g;
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + stride)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * stride)), 2);
        r4[i] = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 3 * stride)), 3);
      }
      const __m512i t0 = _mm512_unpacklo_epi32(r4[0], r4[1]), t1 = _mm512_unpackhi_epi32(r4[0], r4[1]);
      const __m512i t2 = _mm512_unpacklo_epi32(r4[2], r4[3]), t3 = _mm512_unpackhi_epi32(r4[2], r4[3]);
      const __m512i v[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                            _mm512_unpackhi_epi64(t1, t3)};
      const int32_t* xg = xi + g * 8 * MX;  // dword j of the group of each row of x: xg[j * MX + m]
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        const __m512i lo = _mm512_and_si512(v[q], low), hi = _mm512_and_si512(_mm512_srli_epi16(v[q], 4), low);
#pragma GCC unroll 8
        for (int m = 0; m < MX; ++m) {
          acc[m] = _mm512_dpbusd_epi32(acc[m], lo, _mm512_set1_epi32(xg[q * MX + m]));
          acc[m] = _mm512_dpbusd_epi32(acc[m], hi, _mm512_set1_epi32(xg[(4 + q) * MX + m]));
        }
      }
    }
    const __m512 ws = _mm512_loadu_ps(sp + b * 16);
#pragma GCC unroll 8
    for (int m = 0; m < MX; ++m) {
      __m512 t = _mm512_cvtepi32_ps(acc[m]);
      if (zp) t = _mm512_fnmadd_ps(_mm512_loadu_ps(zp + b * 16), _mm512_set1_ps(static_cast<float>(xsum[m * ldb + b])), t);
      accf[m] = _mm512_fmadd_ps(t, _mm512_mul_ps(ws, _mm512_set1_ps(xs[m * ldb + b])), accf[m]);
    }
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << n) - 1);
  const __m512i back = lane_rows();  // (the permutation is its own inverse)
#pragma GCC unroll 8
  for (int m = 0; m < MX; ++m) _mm512_mask_storeu_ps(y + m * ldy, keep, _mm512_permutexvar_ps(back, accf[m]));
}

void int8_panel_rows(const Weights& w, int64_t o0, int64_t o1, const int32_t* xi, const float* xs,
                     const int32_t* xsum, int64_t rows, float* y, int64_t ldy, uint8_t* scratch) {
  const int64_t groups = w.k / 32, nb = w.blocks, per_block = w.block / 32;
  const int64_t stride = w.k / 2;
  float* sp = reinterpret_cast<float*>(scratch);
  float* zp = w.zero ? sp + nb * 16 : nullptr;
  uint8_t* tail = scratch + panel_scratch_bytes(w) - 16 * stride;
  const __m512i at = _mm512_mullo_epi32(lane_rows(), _mm512_set1_epi32(static_cast<int>(nb)));
  for (int64_t o = o0; o < o1; o += 16) {
    const int n = static_cast<int>(o1 - o < 16 ? o1 - o : 16);
    const uint8_t* row0 = w.codes + o * stride;
    if (n < 16) {  // a last strip of fewer rows: copied, the rest zeros (their lanes are not stored)
      std::memcpy(tail, row0, static_cast<std::size_t>(n * stride));
      std::memset(tail + n * stride, 0, static_cast<std::size_t>((16 - n) * stride));
      row0 = tail;
    }
    const uint8_t* next = o + 32 <= o1 ? w.codes + (o + 16) * stride : nullptr;
    // The strip's scales and zero points per block, in lane order (gathered: rows nb apart).
    const __mmask16 valid = _mm512_cmplt_epi32_mask(lane_rows(), _mm512_set1_epi32(n));
    for (int64_t b = 0; b < nb; ++b) {
      _mm512_storeu_ps(sp + b * 16, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, at, w.scale + o * nb + b, 4));
      if (zp)
        _mm512_storeu_ps(zp + b * 16, w.uniform_zero ? _mm512_set1_ps(static_cast<float>(w.zero[0]))
                                                     : _mm512_cvtepi32_ps(_mm512_mask_i32gather_epi32(
                                                           _mm512_setzero_si512(), valid, at, w.zero + o * nb + b, 4)));
    }
    for_each_pass(rows, kStripMx, [&](int64_t m, int64_t mx) {
      auto tile = [&](auto c) {
        strip_tile<decltype(c)::value>(row0, stride, m == 0 ? next : nullptr, sp, zp, groups, per_block, nb,
                                       xi + m * (w.k / 4), xs + m * nb, nb, xsum + m * nb, y + m * ldy + o, ldy, n);
      };
      if (mx == 8) tile(std::integral_constant<int, 8>{});
      else if (mx == 4) tile(std::integral_constant<int, 4>{});
      else if (mx == 2) tile(std::integral_constant<int, 2>{});
      else tile(std::integral_constant<int, 1>{});
    });
  }
}

}  // namespace

Int8RowsKernel unchecked_int8_rows_avx512vnni() { return &int8_rows; }
Int8PanelKernel unchecked_int8_panel_avx512vnni() { return {kStripMx, &int8_panel_rows}; }

}  // namespace softneuro::cpu::nbits
