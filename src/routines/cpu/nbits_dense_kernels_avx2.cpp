// cpu/nbits_dense's row kernel in AVX2+FMA (nbits_dense_kernels.hpp): eight
// codes widened to int32, converted and multiplied into the rows of x; per
// block the sums are scaled into each (weight row, x row) total.
// Built with -mavx2 -mfma: only intrinsics and this file's own helpers, in an
// anonymous namespace (no std:: templates another file could link to this copy of).
#define SN_F32_AVX512 0
#include "routines/cpu/f32_simd.hpp"
#include "routines/cpu/nbits_dense_kernels.hpp"

#include <immintrin.h>

#include <cstring>
#include <type_traits>

namespace softneuro::cpu::nbits {
namespace {

using avx2::vhsum;
inline int64_t least(int64_t a, int64_t b) { return a < b ? a : b; }

/// The low 8 bytes of c, codes, as floats.
template <bool Signed>
inline __m256 bytes8(__m128i c) {
  if constexpr (Signed) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c));
  } else {
    // 2^23 + q as float bits, less 2^23: q exactly, an integer OR and a float
    // subtract in place of the convert (Zen 1 converts on one pipe only).
    const __m256i magic = _mm256_set1_epi32(0x4B000000);
    return _mm256_sub_ps(_mm256_castsi256_ps(_mm256_or_si256(_mm256_cvtepu8_epi32(c), magic)), _mm256_castsi256_ps(magic));
  }
}

/// Bytes of packed codes (quint4: in each group of 32, byte j holds codes j
/// and j + 16) shifted right by `shift` bits (0: the low halves, 4: the high)
/// and masked: the codes as a byte each, in order.
inline __m128i nibbles(__m128i bytes, __m128i shift) {
  return _mm_and_si128(_mm_srl_epi16(bytes, shift), _mm_set1_epi8(0x0F));
}
/// The shift that brings code kk to a byte's low bits.
inline __m128i nibble_shift(int64_t kk) { return _mm_cvtsi32_si128(kk % 32 < 16 ? 0 : 4); }

/// The codes of a weight row: one per byte, or (Packed) two.
template <bool Packed>
inline const uint8_t* row_codes(const Weights& w, int64_t o) {
  return w.codes + (Packed ? o * w.k / 2 : o * w.k);
}

/// Codes kk .. kk + 7 of a row (kk a multiple of 8) as floats.
template <bool Signed, bool Packed>
inline __m256 codes8(const uint8_t* row, int64_t kk) {
  if constexpr (Packed) {
    const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + kk / 32 * 16 + kk % 16));
    return bytes8<false>(nibbles(c, nibble_shift(kk)));
  } else {
    return bytes8<Signed>(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + kk)));
  }
}

template <bool Signed, bool Packed>
inline float code(const uint8_t* row, int64_t kk) {
  if constexpr (Packed) return static_cast<float>((row[kk / 32 * 16 + kk % 16] >> (kk % 32 < 16 ? 0 : 4)) & 15);
  return Signed ? static_cast<float>(static_cast<int8_t>(row[kk])) : static_cast<float>(row[kk]);
}

/// R weight rows from o against M rows of x (R * M <= 4: 8 accumulators): the
/// forms beside four_rows_one_x (several rows of x, blocks not of whole 8s).
template <bool Signed, bool Packed, int R, int M>
void rows_at(const Weights& w, int64_t o, const float* x, const float* xsum, float* y, int64_t ldy) {
  __m256 total[R][M];
  float extra[R][M];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) {
      total[r][m] = _mm256_setzero_ps();
      extra[r][m] = 0;
    }
  const int64_t k = w.k;
  for (int64_t b = 0; b < w.blocks; ++b) {
    const int64_t k0 = b * w.block, k1 = least(k, k0 + w.block);
    __m256 acc[R][M];
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) acc[r][m] = _mm256_setzero_ps();
    int64_t kk = k0;
    for (; kk + 8 <= k1; kk += 8) {
      __m256 xv[M];
      for (int m = 0; m < M; ++m) xv[m] = _mm256_loadu_ps(x + m * k + kk);
      for (int r = 0; r < R; ++r) {
        const __m256 c = codes8<Signed, Packed>(row_codes<Packed>(w, o + r), kk);
        for (int m = 0; m < M; ++m) acc[r][m] = _mm256_fmadd_ps(c, xv[m], acc[r][m]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const std::size_t at = static_cast<std::size_t>((o + r) * w.blocks + b);
      const float s = w.scale[at], sz = w.zero ? s * static_cast<float>(w.zero[at]) : 0.0f;
      const __m256 sv = _mm256_set1_ps(s);
      for (int m = 0; m < M; ++m) {
        total[r][m] = _mm256_fmadd_ps(acc[r][m], sv, total[r][m]);
        float tail = 0;
        for (int64_t t = kk; t < k1; ++t) tail += code<Signed, Packed>(row_codes<Packed>(w, o + r), t) * x[m * k + t];
        extra[r][m] += s * tail - sz * xsum[m * w.blocks + b];
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) y[m * ldy + o + r] = vhsum(total[r][m]) + extra[r][m];
}

/// A decode step's case (one row of x, blocks of a multiple of 8 codes): four
/// weight rows in named registers, the block sums scaled into the totals
/// without a round trip through memory (the general form's arrays spilled
/// there: a third of its time). Full blocks in the loop, with nothing that
/// needs other registers; a short last block after it.
template <bool Signed, bool Packed, bool Zeros>
void four_rows_one_x(const Weights& w, int64_t o, const float* x, const float* xsum, float* y) {
  const int64_t k = w.k, block = w.block, nb = w.blocks, full = k / block, row = Packed ? k / 2 : k;
  const uint8_t *q0 = row_codes<Packed>(w, o), *q1 = q0 + row, *q2 = q1 + row, *q3 = q2 + row;
  const float *s0 = w.scale + o * nb, *s1 = s0 + nb, *s2 = s1 + nb, *s3 = s2 + nb;
  const int32_t* z0 = Zeros ? w.zero + o * nb : nullptr;
  __m256 t0 = _mm256_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;
  float e0 = 0, e1 = 0, e2 = 0, e3 = 0;
  for (int64_t b = 0; b < full; ++b) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    if constexpr (Packed) {  // 16 codes a row per step (blocks of whole 16s): one half of a group's 16 bytes
      for (int64_t kk = b * block, end = kk + block; kk < end; kk += 16) {
        const __m256 xl = _mm256_loadu_ps(x + kk), xh = _mm256_loadu_ps(x + kk + 8);
        const __m128i shift = nibble_shift(kk);
        auto step = [&](const uint8_t* q, __m256& a) {
          const __m128i c = nibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + kk / 32 * 16)), shift);
          a = _mm256_fmadd_ps(bytes8<false>(c), xl, a);
          a = _mm256_fmadd_ps(bytes8<false>(_mm_unpackhi_epi64(c, c)), xh, a);
        };
        step(q0, a0);
        step(q1, a1);
        step(q2, a2);
        step(q3, a3);
      }
    } else {
      for (int64_t kk = b * block, end = kk + block; kk < end; kk += 8) {
        const __m256 xv = _mm256_loadu_ps(x + kk);
        a0 = _mm256_fmadd_ps(codes8<Signed, false>(q0, kk), xv, a0);
        a1 = _mm256_fmadd_ps(codes8<Signed, false>(q1, kk), xv, a1);
        a2 = _mm256_fmadd_ps(codes8<Signed, false>(q2, kk), xv, a2);
        a3 = _mm256_fmadd_ps(codes8<Signed, false>(q3, kk), xv, a3);
      }
    }
    t0 = _mm256_fmadd_ps(a0, _mm256_broadcast_ss(s0 + b), t0);
    t1 = _mm256_fmadd_ps(a1, _mm256_broadcast_ss(s1 + b), t1);
    t2 = _mm256_fmadd_ps(a2, _mm256_broadcast_ss(s2 + b), t2);
    t3 = _mm256_fmadd_ps(a3, _mm256_broadcast_ss(s3 + b), t3);
    if constexpr (Zeros) {
      const float xs = xsum[b];
      e0 -= s0[b] * static_cast<float>(z0[b]) * xs;
      e1 -= s1[b] * static_cast<float>(z0[nb + b]) * xs;
      e2 -= s2[b] * static_cast<float>(z0[2 * nb + b]) * xs;
      e3 -= s3[b] * static_cast<float>(z0[3 * nb + b]) * xs;
    }
  }
  float r[4] = {vhsum(t0) + e0, vhsum(t1) + e1, vhsum(t2) + e2, vhsum(t3) + e3};
  if (full < nb) {  // the short last block
    const int64_t b = full;
    for (int i = 0; i < 4; ++i) {
      const uint8_t* q = row_codes<Packed>(w, o + i);
      float acc = 0;
      for (int64_t kk = b * block; kk < k; ++kk) acc += code<Signed, Packed>(q, kk) * x[kk];
      const auto at = static_cast<std::size_t>((o + i) * nb + b);
      r[i] += w.scale[at] * (acc - (Zeros ? static_cast<float>(w.zero[at]) : 0.0f) * xsum[b]);
    }
  }
  for (int i = 0; i < 4; ++i) y[o + i] = r[i];
}

template <bool Signed, bool Packed>
void rows(const Weights& w, int64_t o0, int64_t o1, const float* x, int64_t m, const float* xsum, float* y, int64_t ldy) {
  int64_t o = o0;
  switch (m) {
    case 1:
      if (w.block % (Packed ? 16 : 8) == 0 && w.zero)
        for (; o + 4 <= o1; o += 4) four_rows_one_x<Signed, Packed, true>(w, o, x, xsum, y);
      else if (w.block % (Packed ? 16 : 8) == 0)
        for (; o + 4 <= o1; o += 4) four_rows_one_x<Signed, Packed, false>(w, o, x, xsum, y);
      for (; o < o1; ++o) rows_at<Signed, Packed, 1, 1>(w, o, x, xsum, y, ldy);
      break;
    case 2:
      for (; o + 2 <= o1; o += 2) rows_at<Signed, Packed, 2, 2>(w, o, x, xsum, y, ldy);
      for (; o < o1; ++o) rows_at<Signed, Packed, 1, 2>(w, o, x, xsum, y, ldy);
      break;
    case 3:
      for (; o < o1; ++o) rows_at<Signed, Packed, 1, 3>(w, o, x, xsum, y, ldy);
      break;
    default:
      for (; o < o1; ++o) rows_at<Signed, Packed, 1, 4>(w, o, x, xsum, y, ldy);
      break;
  }
}

void rows_any(const Weights& w, int64_t o0, int64_t o1, const float* x, int64_t m, const float* xsum, float* y, int64_t ldy) {
  if (w.packed) rows<false, true>(w, o0, o1, x, m, xsum, y, ldy);
  else if (w.is_signed) rows<true, false>(w, o0, o1, x, m, xsum, y, ldy);
  else rows<false, false>(w, o0, o1, x, m, xsum, y, ldy);
}

/// Rows r[0..7] (8 floats each) transposed into out + i * ld, i < 8.
inline void store_transposed(__m256 r0, __m256 r1, __m256 r2, __m256 r3, __m256 r4, __m256 r5, __m256 r6, __m256 r7,
                             float* out, int64_t ld) {
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
               t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE), u2 = _mm256_shuffle_ps(t1, t3, 0x44),
               u3 = _mm256_shuffle_ps(t1, t3, 0xEE), u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
               u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(out + 0 * ld, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(out + 1 * ld, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(out + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(out + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(out + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(out + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(out + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(out + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

template <bool Signed, bool Packed>
void panel(const Weights& w, int64_t o, int64_t rows, int64_t k0, int64_t kc, float* out, int64_t ld) {
  const int64_t end = k0 + kc;
  for (int64_t kk = k0; kk < end; kk += 8) {
    const int64_t b = kk / w.block, n = least(8, end - kk);
    __m256 v[16];
    for (int64_t r = 0; r < 16; ++r) {
      if (r >= rows) {
        v[r] = _mm256_setzero_ps();
        continue;
      }
      const std::size_t at = static_cast<std::size_t>((o + r) * w.blocks + b);
      const __m256 z = _mm256_set1_ps(w.zero ? static_cast<float>(w.zero[at]) : 0.0f);
      __m256 c;
      if (n == 8) {
        c = codes8<Signed, Packed>(row_codes<Packed>(w, o + r), kk);
      } else {  // the last codes of a row
        alignas(32) float tail[8] = {};
        for (int64_t i = 0; i < n; ++i) tail[i] = code<Signed, Packed>(row_codes<Packed>(w, o + r), kk + i);
        c = _mm256_load_ps(tail);
      }
      v[r] = _mm256_mul_ps(_mm256_sub_ps(c, z), _mm256_set1_ps(w.scale[at]));  // (q - z) * s, as the model has it
    }
    float* dst = out + (kk - k0) * ld;
    if (n == 8) {
      store_transposed(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], dst, ld);
      store_transposed(v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15], dst + 8, ld);
    } else {
      alignas(32) float t[16][8];
      for (int r = 0; r < 16; ++r) _mm256_store_ps(t[r], v[r]);
      for (int64_t i = 0; i < n; ++i)
        for (int r = 0; r < 16; ++r) dst[i * ld + r] = t[r][i];
    }
  }
}

void panel_any(const Weights& w, int64_t o, int64_t rows, int64_t k0, int64_t kc, float* out, int64_t ld) {
  if (w.packed) panel<false, true>(w, o, rows, k0, kc, out, ld);
  else if (w.is_signed) panel<true, false>(w, o, rows, k0, kc, out, ld);
  else panel<false, false>(w, o, rows, k0, kc, out, ld);
}

/// The 8 lanes of each of a[0..7] summed: lane j of the result is a[j]'s sum.
inline __m256i lane_sums8(const __m256i* a) {
  const __m256i h01 = _mm256_hadd_epi32(a[0], a[1]), h23 = _mm256_hadd_epi32(a[2], a[3]),
                h45 = _mm256_hadd_epi32(a[4], a[5]), h67 = _mm256_hadd_epi32(a[6], a[7]);
  const __m256i h0123 = _mm256_hadd_epi32(h01, h23), h4567 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20), _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

/// One weight row against one int8 row of x. Eight blocks at a time: per 32
/// codes one vpmaddubsw (codes unsigned, at most 15: pair sums within int16)
/// and one vpmaddwd into int32, exact; the eight block sums gathered into one
/// vector and scaled there, zero points' term too (per block alone, the
/// scaling cost more than the products: blocks of 32 are one step each).
template <bool Packed>
float int8_row(const Weights& w, int64_t o, const int8_t* xq, const float* xs, const int32_t* xsum) {
  const int64_t k = w.k, block = w.block, nb = w.blocks, full = block % 32 == 0 ? k / block : 0, groups = full / 8;
  const uint8_t* q = row_codes<Packed>(w, o);
  const float* s = w.scale + o * nb;
  const int32_t* z = w.zero ? w.zero + o * nb : nullptr;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 total = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i a[8];
    for (int j = 0; j < 8; ++j) {
      a[j] = _mm256_setzero_si256();
      for (int64_t kk = (g * 8 + j) * block, end = kk + block; kk < end; kk += 32) {
        __m256i c;
        if constexpr (Packed) {  // a group's 16 bytes: its low halves codes 0..15, its high ones 16..31
          const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + kk / 2));
          c = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(p, 4), p), _mm256_set1_epi8(0x0F));
        } else {
          c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + kk));
        }
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + kk));
        a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(_mm256_maddubs_epi16(c, xv), ones));
      }
    }
    __m256i sums = lane_sums8(a);
    if (z)
      sums = _mm256_sub_epi32(sums, _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(z + g * 8)),
                                                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xsum + g * 8))));
    const __m256 f = _mm256_mul_ps(_mm256_loadu_ps(s + g * 8), _mm256_loadu_ps(xs + g * 8));
    total = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), f, total);
  }
  float r = vhsum(total);
  for (int64_t b = groups * 8; b < nb; ++b) {  // the blocks past the last eight, or not of whole 32s
    int32_t acc = 0;
    for (int64_t kk = b * block, end = least(k, kk + block); kk < end; ++kk)
      acc += static_cast<int32_t>(code<false, Packed>(q, kk)) * xq[kk];
    r += s[b] * xs[b] * static_cast<float>(acc - (z ? z[b] * xsum[b] : 0));
  }
  return r;
}

/// R weight rows from o, packed codes (two a byte) in blocks of 32 (Block32) or of a
/// multiple of 64, against one int8 row of x. Two groups of 32 codes (32 bytes) at a
/// time, as the packing lays them out: their low nibbles are codes 0-15 of both
/// groups, their high ones codes 16-31, so one AND and one shift unpack 64 codes,
/// and x's halves are swapped to match (two lane permutes, shared by the R rows).
/// Per pair, vpmaddubsw (codes at most 15: pair sums within int16), the two
/// products added in int16, vpmaddwd into int32: four lanes per group, scaled in
/// float32 and accumulated there, summed once at the end (no per-block
/// reduction). The zero points' term, sum_b s z xs xsum, in its own pass.
constexpr int64_t kAhead = 8;  // weight rows ahead, into L2 (T0, into L1: the miss buffers fill, a 2048 x 5632 step from memory 0.39 ms against 0.23)

template <int R, int MX, bool Block32>
void int8_pairs(const Weights& w, int64_t o, const int8_t* xq, int64_t ldq, const float* xs, const int32_t* xsum,
                float* y, int64_t ldy) {
  const int64_t k = w.k, nb = w.blocks, groups = k / 32, pairs = groups / 2;
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const __m256i halves = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);  // [v0 x 4 | v1 x 4] from (v0, v1)
  const uint8_t* q[R];
  const float* s[R];
  __m256 acc[MX * R];  // [m * R + r] (flat: GCC keeps it in registers)
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    q[r] = w.codes + (o + r) * (k / 2);
    s[r] = w.scale + (o + r) * nb;
#pragma GCC unroll 2
    for (int m = 0; m < MX; ++m) acc[m * R + r] = _mm256_setzero_ps();
  }
  // x's rows in named registers (arrays of them went to the stack: 0.34 -> 0.46 ms a step).
  auto x_pair = [&](int m, int64_t p, int64_t blk, __m256i& lo, __m256i& hi, __m256& scale) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + m * ldq + 64 * p));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + m * ldq + 64 * p + 32));
    lo = _mm256_permute2x128_si256(a, b, 0x20), hi = _mm256_permute2x128_si256(a, b, 0x31);
    const float* xsm = xs + m * nb;
    scale = Block32 ? _mm256_permutevar_ps(_mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(xsm + blk))), halves)
                    : _mm256_set1_ps(xsm[blk]);
  };
  auto dot = [&](__m256i lo, __m256i hi, __m256i xlo, __m256i xhi) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi)), ones));
  };
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t blk = Block32 ? 2 * p : 64 * p / w.block;
    __m256i xlo0, xhi0, xlo1 = _mm256_setzero_si256(), xhi1 = _mm256_setzero_si256();
    __m256 xsv0, xsv1 = _mm256_setzero_ps();
    x_pair(0, p, blk, xlo0, xhi0, xsv0);
    if constexpr (MX == 2) x_pair(1, p, blk, xlo1, xhi1, xsv1);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (p % 2 == 0) {  // the next rows' line at this place: short rows of many streams defeat the hardware's prefetch
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
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r] + 32 * p));
      const __m256i lo = _mm256_and_si256(c, low), hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low);
      const __m256 sv = Block32 ? _mm256_permutevar_ps(_mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(s[r] + blk))), halves)
                                : _mm256_set1_ps(s[r][blk]);
      acc[r] = _mm256_fmadd_ps(dot(lo, hi, xlo0, xhi0), _mm256_mul_ps(sv, xsv0), acc[r]);
      if constexpr (MX == 2) acc[R + r] = _mm256_fmadd_ps(dot(lo, hi, xlo1, xhi1), _mm256_mul_ps(sv, xsv1), acc[R + r]);
    }
  }
  if (groups % 2) {  // a last group alone: codes 0-15 and 16-31 in order, x as it is
    const int64_t g = groups - 1, blk = 32 * g / w.block;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[r] + 16 * g));
      const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(c, 4), c), low);
#pragma GCC unroll 2
      for (int m = 0; m < MX; ++m) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + m * ldq + 32 * g));
        const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(codes, xv), ones);
        acc[m * R + r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(s[r][blk] * xs[m * nb + blk]), acc[m * R + r]);
      }
    }
  }
  for (int m = 0; m < MX; ++m)
    for (int r = 0; r < R; ++r) {
      float* out = y + m * ldy + o + r;
      if (!w.zero) {
        *out = vhsum(acc[m * R + r]);
        continue;
      }
      // sum_b s xs z xsum: the scales are in L1 (just read); z one value, bytes, or int32.
      const int32_t* z = w.zero + (o + r) * nb;
      const uint8_t* zb = w.zero_bytes ? w.zero_bytes + (o + r) * nb : nullptr;
      const float* xsm = xs + m * nb;
      const int32_t* xsumm = xsum + m * nb;
      const __m256i z0 = _mm256_set1_epi32(w.zero[0]);
      int64_t b = 0;
      for (; b + 8 <= nb; b += 8) {
        const __m256i zv = w.uniform_zero ? z0
                           : zb ? _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zb + b)))
                                : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(z + b));
        const __m256i zx = _mm256_mullo_epi32(zv, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xsumm + b)));
        const __m256 f = _mm256_mul_ps(_mm256_loadu_ps(s[r] + b), _mm256_loadu_ps(xsm + b));
        acc[m * R + r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(zx), f, acc[m * R + r]);
      }
      float tail = 0;
      for (; b < nb; ++b) tail += s[r][b] * xsm[b] * static_cast<float>((w.uniform_zero ? w.zero[0] : z[b]) * xsumm[b]);
      *out = vhsum(acc[m * R + r]) - tail;
    }
}

template <int MX, bool Block32>
void int8_pair_rows(const Weights& w, int64_t o0, int64_t o1, const int8_t* xq, int64_t ldq, const float* xs,
                    const int32_t* xsum, float* y, int64_t ldy) {
  constexpr int R = MX == 2 ? 2 : 4;  // R x MX accumulators beside x's MX rows and the constants: 16 registers
  int64_t o = o0;
  for (; o + R <= o1; o += R) int8_pairs<R, MX, Block32>(w, o, xq, ldq, xs, xsum, y, ldy);
  for (; o < o1; ++o) int8_pairs<1, MX, Block32>(w, o, xq, ldq, xs, xsum, y, ldy);
}

void int8_rows(const Weights& w, int64_t o0, int64_t o1, const int8_t* xq, int64_t ldq, const float* xs,
               const int32_t* xsum, int64_t rows, float* y, int64_t ldy) {
  const int64_t nb = w.blocks;
  if (w.packed && (w.block == 32 || w.block % 64 == 0)) {
    // Two rows of x per pass over the weights (each unpacked once for both; four
    // were no faster: 4 x 2 tiles, prompts of 8-128 rows), then one.
    const bool b32 = w.block == 32;
    int64_t m = 0;
    for (; m + 2 <= rows; m += 2) {
      if (b32) int8_pair_rows<2, true>(w, o0, o1, xq + m * ldq, ldq, xs + m * nb, xsum + m * nb, y + m * ldy, ldy);
      else int8_pair_rows<2, false>(w, o0, o1, xq + m * ldq, ldq, xs + m * nb, xsum + m * nb, y + m * ldy, ldy);
    }
    if (m < rows) {
      if (b32) int8_pair_rows<1, true>(w, o0, o1, xq + m * ldq, ldq, xs + m * nb, xsum + m * nb, y + m * ldy, ldy);
      else int8_pair_rows<1, false>(w, o0, o1, xq + m * ldq, ldq, xs + m * nb, xsum + m * nb, y + m * ldy, ldy);
    }
    return;
  }
  for (int64_t m = 0; m < rows; ++m) {
    const int8_t* xm = xq + m * ldq;
    float* ym = y + m * ldy;
    if (w.packed)
      for (int64_t o = o0; o < o1; ++o) ym[o] = int8_row<true>(w, o, xm, xs + m * nb, xsum + m * nb);
    else
      for (int64_t o = o0; o < o1; ++o) ym[o] = int8_row<false>(w, o, xm, xs + m * nb, xsum + m * nb);
  }
}

// ---------------------------------------------------------------------------
// Prompts (4 rows of x or more): per strip of 8 weight rows, each group's 16
// bytes of the 8 rows transposed by dwords in registers (dword q of rows 0-7,
// in order), each dword's low and high nibbles two vpmaddubsw operands (codes
// j..j+3 and j+16..j+19 against x's values broadcast), the int16 pair sums of
// two dwords added (at most 8 x 15 x 127: within int16) and widened once by
// vpmaddwd, up to 4 rows of x per pass, the int32 sums scaled into float32 once
// per block (the pair kernel scales each product of 64 codes).

constexpr int kStripMx = 4;  ///< rows of x per pass (8 accumulators beside the operands: 16 registers)

/// MX rows of x (codes as panel_layout_x lays them out; scales and code sums per
/// block, ld ldb) against the strip of 8 weight rows from row0, `stride` bytes
/// apart (past the strip's n rows, zeros): y[m][i] for i < n. sp, zp: the
/// strip's scales and zero points (floats; null: none) per block, 8 each.
template <int MX>
void strip_tile(const uint8_t* row0, int64_t stride, const float* sp, const float* zp, int64_t groups, int64_t per_block,
                int64_t nb, const int32_t* xi, const float* xs, int64_t ldb, const int32_t* xsum, float* y, int64_t ldy,
                int n) {
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 accf[MX];
  for (int m = 0; m < MX; ++m) accf[m] = _mm256_setzero_ps();
  for (int64_t b = 0, g0 = 0; b < nb; ++b, g0 += per_block) {
    __m256i acc[MX];
    for (int m = 0; m < MX; ++m) acc[m] = _mm256_setzero_si256();
    const int64_t g1 = least(groups, g0 + per_block);
    for (int64_t g = g0; g < g1; ++g) {
      __m256i a[4];  // rows i (low lane) and i + 4 (high lane)
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i)
        a[i] = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row0 + (i + 4) * stride + 16 * g)),
                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(row0 + i * stride + 16 * g)));
      const __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
      const __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
      const __m256i v[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2), _mm256_unpacklo_epi64(t1, t3),
                            _mm256_unpackhi_epi64(t1, t3)};
      const int32_t* xg = xi + g * 8 * MX;  // dword j of the group of each row of x: xg[j * MX + m]
#pragma GCC unroll 2
      for (int q = 0; q < 4; q += 2) {
        const __m256i lo0 = _mm256_and_si256(v[q], low), hi0 = _mm256_and_si256(_mm256_srli_epi16(v[q], 4), low);
        const __m256i lo1 = _mm256_and_si256(v[q + 1], low), hi1 = _mm256_and_si256(_mm256_srli_epi16(v[q + 1], 4), low);
#pragma GCC unroll 4
        for (int m = 0; m < MX; ++m) {
          __m256i p = _mm256_maddubs_epi16(lo0, _mm256_set1_epi32(xg[q * MX + m]));
          p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi0, _mm256_set1_epi32(xg[(4 + q) * MX + m])));
          p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo1, _mm256_set1_epi32(xg[(q + 1) * MX + m])));
          p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi1, _mm256_set1_epi32(xg[(5 + q) * MX + m])));
          acc[m] = _mm256_add_epi32(acc[m], _mm256_madd_epi16(p, ones));
        }
      }
    }
    const __m256 ws = _mm256_loadu_ps(sp + b * 8);
    for (int m = 0; m < MX; ++m) {
      __m256 t = _mm256_cvtepi32_ps(acc[m]);
      if (zp) t = _mm256_fnmadd_ps(_mm256_loadu_ps(zp + b * 8), _mm256_set1_ps(static_cast<float>(xsum[m * ldb + b])), t);
      accf[m] = _mm256_fmadd_ps(t, _mm256_mul_ps(ws, _mm256_set1_ps(xs[m * ldb + b])), accf[m]);
    }
  }
  const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int m = 0; m < MX; ++m) _mm256_maskstore_ps(y + m * ldy, keep, accf[m]);
}

void panel_rows(const Weights& w, int64_t o0, int64_t o1, const int32_t* xi, const float* xs, const int32_t* xsum,
                int64_t rows, float* y, int64_t ldy, uint8_t* scratch) {
  const int64_t groups = w.k / 32, nb = w.blocks, per_block = w.block / 32, stride = w.k / 2;
  float* sp = reinterpret_cast<float*>(scratch);
  float* zp = w.zero ? sp + nb * 8 : nullptr;
  uint8_t* tail = scratch + panel_scratch_bytes(w) - 16 * stride;
  for (int64_t o = o0; o < o1; o += 8) {
    const int n = static_cast<int>(least(o1 - o, 8));
    const uint8_t* row0 = w.codes + o * stride;
    if (n < 8) {  // a last strip of fewer rows: copied, the rest zeros (their lanes are not stored)
      std::memcpy(tail, row0, static_cast<std::size_t>(n * stride));
      std::memset(tail + n * stride, 0, static_cast<std::size_t>((8 - n) * stride));
      row0 = tail;
    }
    // The strip's scales and zero points per block, its rows side by side.
    for (int64_t b = 0; b < nb; ++b)
      for (int i = 0; i < 8; ++i) {
        const int64_t at = (o + (i < n ? i : 0)) * nb + b;
        sp[b * 8 + i] = i < n ? w.scale[at] : 0.0f;
        if (zp) zp[b * 8 + i] = static_cast<float>(w.uniform_zero ? w.zero[0] : w.zero[at]);
      }
    for_each_pass(rows, kStripMx, [&](int64_t m, int64_t mx) {
      auto tile = [&](auto c) {
        strip_tile<decltype(c)::value>(row0, stride, sp, zp, groups, per_block, nb, xi + m * (w.k / 4), xs + m * nb, nb,
                                       xsum + m * nb, y + m * ldy + o, ldy, n);
      };
      if (mx == 4) tile(std::integral_constant<int, 4>{});
      else if (mx == 2) tile(std::integral_constant<int, 2>{});
      else tile(std::integral_constant<int, 1>{});
    });
  }
}

}  // namespace

RowsKernel unchecked_rows_avx2() { return &rows_any; }
Int8PanelKernel unchecked_int8_panel_avx2() { return {kStripMx, &panel_rows}; }
Int8RowsKernel unchecked_int8_rows_avx2() { return &int8_rows; }
PanelKernel unchecked_panel_avx2() { return &panel_any; }

}  // namespace softneuro::cpu::nbits
