// AVX2 + FMA kernels of the cpu:qint8 "avx2" routines; see qint8_kernels.hpp.
// This is the only file built with -mavx2 -mfma (CMakeLists.txt). It must not
// instantiate inline functions or templates shared with other files (std::min,
// std::vector, ...): the linker could keep this file's AVX2 copy for everyone,
// and a CPU without AVX2 would then crash far from here. Everything but the
// exported kernels is in an anonymous namespace, and only intrinsics are used
// (and the inline assembly of u8_quads_asm.inl).
#include "routines/cpu/qint8_kernels.hpp"
#include "routines/cpu/qint8_epilogue.inl"
#include "routines/cpu/u8_quads_asm.inl"

#include <immintrin.h>

#include <cstring>
#include <type_traits>

namespace softneuro::qint8 {
namespace {

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/// One K step of a GEMM tile: 4 bytes of each activation row (an int16 pair or
/// a u8 quad) against 64 bytes of packed weights (16 lanes), into int32 lanes.
struct Int16Pairs {  // vpmaddwd: exact for any 8-bit weights
  static __m256i dot(__m256i a, __m256i b) { return _mm256_madd_epi16(a, b); }
};
/// vpmaddubsw (u8 x s8 pairs into int16, saturating) then vpmaddwd by ones
/// (pairs of those into int32): four products per int32 lane in two
/// instructions, half the multiplies per product of Int16Pairs. Exact while
/// every pair sum fits int16: weights within [-63, 63] (the caller's 7-bit
/// quantisation) give |u0*w0 + u1*w1| <= 2 * 255 * 63 = 32130.
struct U8S8Quads {
  static __m256i dot(__m256i a, __m256i b) { return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)); }
};

/// C[r][j] (r < MR, j < 16) = sum over `ksteps` steps of Step::dot, then the
/// epilogue. u: rows `ldu` bytes apart; v: 64 bytes per step (64-byte aligned).
template <class Step, int MR>
void tile(const char* u, int64_t ldu, const char* v, int64_t ksteps, const Epilogue& ep, int8_t* dst, int64_t ldd,
          int nvalid, const pair_fix::PairFix* fixes, int64_t nfix) {
  __m256i c0[MR], c1[MR];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) c0[r] = c1[r] = _mm256_setzero_si256();
  if constexpr (std::is_same_v<Step, U8S8Quads> && MR == 4) u8_quads_4rows(u, ldu, v, ksteps, c0, c1);
  else if constexpr (std::is_same_v<Step, Int16Pairs> && MR == 4) i16_pairs_4rows(u, ldu, v, ksteps, c0, c1);
  else
  for (int64_t k = 0; k < ksteps; ++k) {
    const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + k * 64));
    const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + k * 64 + 32));
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      int32_t four;
      std::memcpy(&four, u + r * ldu + 4 * k, 4);
      const __m256i a = _mm256_set1_epi32(four);
      c0[r] = _mm256_add_epi32(c0[r], Step::dot(a, b0));
      c1[r] = _mm256_add_epi32(c1[r], Step::dot(a, b1));
    }
  }
  add_fixes<MR>(c0, c1, reinterpret_cast<const uint8_t*>(u), ldu, fixes, nfix);
  const __m256i bias0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias));
  const __m256i bias1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias + 8));
  const __m256 m0 = _mm256_loadu_ps(ep.mult), m1 = _mm256_loadu_ps(ep.mult + 8);
  if (ep.act == Epilogue::linear && ep.add_out == 0) {
    // The common case with its constants in registers: at small K (MobileNetV2's
    // 16-channel expansions) the epilogue took more of a tile than its products.
    const Rounding q(ep);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
      store16(q.linear(_mm256_add_epi32(c0[r], bias0), m0), q.linear(_mm256_add_epi32(c1[r], bias1), m1), dst + r * ldd,
              nvalid);
    return;
  }
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
    store16(requant8(_mm256_add_epi32(c0[r], bias0), m0, ep), requant8(_mm256_add_epi32(c1[r], bias1), m1, ep),
            dst + r * ldd, nvalid);
}

/// gemm_tile and gemm_tile_u8s8: row counts 1..4 as template arguments.
template <class Step>
void tile_rows(int mr, const char* u, int64_t ldu, const char* v, int64_t ksteps, const Epilogue& ep, int8_t* dst,
               int64_t ldd, int nvalid, const pair_fix::PairFix* fixes = nullptr, int64_t nfix = 0) {
  switch (mr) {
    case 1: return tile<Step, 1>(u, ldu, v, ksteps, ep, dst, ldd, nvalid, fixes, nfix);
    case 2: return tile<Step, 2>(u, ldu, v, ksteps, ep, dst, ldd, nvalid, fixes, nfix);
    case 3: return tile<Step, 3>(u, ldu, v, ksteps, ep, dst, ldd, nvalid, fixes, nfix);
    default: return tile<Step, 4>(u, ldu, v, ksteps, ep, dst, ldd, nvalid, fixes, nfix);
  }
}

template <int MR>
void tile_partial(const int16_t* u, int64_t ldu, const int16_t* v, int64_t k2, int32_t* acc, bool first) {
  __m256i c0[MR], c1[MR];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
    c0[r] = first ? _mm256_setzero_si256() : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + r * 16));
    c1[r] = first ? _mm256_setzero_si256() : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + r * 16 + 8));
  }
  for (int64_t k = 0; k < k2; ++k) {
    const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + k * 32));
    const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + k * 32 + 16));
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, u + r * ldu + 2 * k, 4);
      const __m256i a = _mm256_set1_epi32(pair);
      c0[r] = _mm256_add_epi32(c0[r], _mm256_madd_epi16(a, b0));
      c1[r] = _mm256_add_epi32(c1[r], _mm256_madd_epi16(a, b1));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * 16), c0[r]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * 16 + 8), c1[r]);
  }
}

/// 16 int8 (the first n, the rest 0) as 16 int16.
inline __m256i load16(const int8_t* p, int64_t n) {
  if (n >= 16) return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  alignas(16) int8_t tmp[16] = {};
  std::memcpy(tmp, p, static_cast<std::size_t>(n));
  return _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
}
/// The same minus zp.
inline __m256i load16_minus(const int8_t* p, int64_t n, __m256i zp) { return _mm256_sub_epi16(load16(p, n), zp); }

inline int32_t round_clamp(float f) {
  f = f < -kClampF ? -kClampF : f > kClampF ? kClampF : f;
  return _mm_cvtss_si32(_mm_set_ss(f));  // round to nearest even, as vcvtps2dq
}
inline int32_t clamp32(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : v > hi ? hi : v; }

}  // namespace

void gemm_tile(int mr, const int16_t* u, int64_t ldu, const int16_t* v, int64_t k2, const Epilogue& ep, int8_t* dst,
               int64_t ldd, int nvalid) {
  static_assert(kTileM == 4);
  tile_rows<Int16Pairs>(mr, reinterpret_cast<const char*>(u), ldu * 2, reinterpret_cast<const char*>(v), k2, ep, dst, ldd,
                        nvalid);
}

void gemm_tile_partial(int mr, const int16_t* u, int64_t ldu, const int16_t* v, int64_t k2, int32_t* acc, bool first) {
  switch (mr) {
    case 1: return tile_partial<1>(u, ldu, v, k2, acc, first);
    case 2: return tile_partial<2>(u, ldu, v, k2, acc, first);
    case 3: return tile_partial<3>(u, ldu, v, k2, acc, first);
    default: return tile_partial<4>(u, ldu, v, k2, acc, first);
  }
}

void gemm_tile_u8s8(int mr, const uint8_t* u, int64_t ldu, const int8_t* v, int64_t k4, const Epilogue& ep, int8_t* dst,
                    int64_t ldd, int nvalid, const pair_fix::PairFix* fixes, int64_t nfix) {
  static_assert(kTileMU8S8 == 4);
  tile_rows<U8S8Quads>(mr, reinterpret_cast<const char*>(u), ldu, reinterpret_cast<const char*>(v), k4, ep, dst, ldd, nvalid,
                       fixes, nfix);
}

void permute_rows(int mr, const uint8_t* u, int64_t ldu, const uint8_t* perm, int64_t k16, uint8_t* dst) {
  int64_t k = 0;
  for (; k + 32 <= k16; k += 32) {  // vpshufb permutes within each 16-byte half: two groups at once
    const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(perm + k));
    for (int r = 0; r < mr; ++r)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + r * k16 + k),
                          _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + r * ldu + k)), p));
  }
  if (k < k16) {
    const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(perm + k));
    for (int r = 0; r < mr; ++r)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + r * k16 + k),
                       _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u + r * ldu + k)), p));
  }
}

void to_u8(const int8_t* x, uint8_t* y, int64_t n) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), flip));
  for (; i + 16 <= n; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)), _mm256_castsi256_si128(flip)));
  for (; i < n; ++i) y[i] = static_cast<uint8_t>(x[i] ^ 0x80);
}

void to_u8_32(const int8_t* x, uint8_t* y) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)),
                                                                      _mm256_set1_epi8(static_cast<char>(0x80))));
}

void widen16(const int8_t* x, int16_t* y, int32_t zp) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y),
                      _mm256_sub_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))),
                                       _mm256_set1_epi16(static_cast<int16_t>(zp))));
}

void gemm_epilogue(int mr, const int32_t* acc, const Epilogue& ep, int8_t* dst, int64_t ldd, int nvalid) {
  const __m256i bias0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias));
  const __m256i bias1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias + 8));
  const __m256 m0 = _mm256_loadu_ps(ep.mult), m1 = _mm256_loadu_ps(ep.mult + 8);
  for (int r = 0; r < mr; ++r) {
    const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + r * 16));
    const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + r * 16 + 8));
    store16(requant8(_mm256_add_epi32(c0, bias0), m0, ep), requant8(_mm256_add_epi32(c1, bias1), m1, ep), dst + r * ldd, nvalid);
  }
}

void widen(const int8_t* x, int16_t* y, int64_t n, int32_t zp) {
  const __m256i vzp = _mm256_set1_epi16(static_cast<int16_t>(zp));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm256_sub_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))), vzp));
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm_sub_epi16(_mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + i))), _mm256_castsi256_si128(vzp)));
  for (; i < n; ++i) y[i] = static_cast<int16_t>(x[i] - zp);
}

void winograd_input(const int8_t* const* taps, int64_t c, int32_t zp, int16_t* v, int64_t ldp) {
  const __m256i vzp = _mm256_set1_epi16(static_cast<int16_t>(zp));
  for (int64_t cb = 0; cb < c; cb += 16) {
    const int64_t n = min64(16, c - cb);
    __m256i d[16];
    for (int t = 0; t < 16; ++t) d[t] = taps[t] ? load16_minus(taps[t] + cb, n, vzp) : _mm256_setzero_si256();
    // Bᵀ d over the rows (Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]), then the same over the columns.
    __m256i t[16];
    for (int j = 0; j < 4; ++j) {
      t[j] = _mm256_sub_epi16(d[j], d[8 + j]);
      t[4 + j] = _mm256_add_epi16(d[4 + j], d[8 + j]);
      t[8 + j] = _mm256_sub_epi16(d[8 + j], d[4 + j]);
      t[12 + j] = _mm256_sub_epi16(d[4 + j], d[12 + j]);
    }
    for (int i = 0; i < 4; ++i) {
      const __m256i* r = t + 4 * i;
      const __m256i out[4] = {_mm256_sub_epi16(r[0], r[2]), _mm256_add_epi16(r[1], r[2]), _mm256_sub_epi16(r[2], r[1]),
                              _mm256_sub_epi16(r[1], r[3])};
      for (int j = 0; j < 4; ++j) {
        int16_t* dst = v + (4 * i + j) * ldp + cb;
        if (n == 16) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), out[j]);
        } else {
          alignas(32) int16_t tmp[16];
          _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), out[j]);
          std::memcpy(dst, tmp, static_cast<std::size_t>(n) * sizeof(int16_t));
        }
      }
    }
  }
}

void winograd_output(const int32_t* m, int64_t ldp, const Epilogue& ep, int8_t* const* dst, int nvalid) {
  __m256i y[2][4];  // [half of the 16 lanes][output 2r + s]
  for (int h = 0; h < 2; ++h) {
    __m256i mm[16];
    for (int p = 0; p < 16; ++p) mm[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + p * ldp + 8 * h));
    // Aᵀ m over the rows (Aᵀ = [1 1 1 0; 0 1 -1 -1]), then over the columns.
    __m256i s[2][4];
    for (int j = 0; j < 4; ++j) {
      s[0][j] = _mm256_add_epi32(_mm256_add_epi32(mm[j], mm[4 + j]), mm[8 + j]);
      s[1][j] = _mm256_sub_epi32(_mm256_sub_epi32(mm[4 + j], mm[8 + j]), mm[12 + j]);
    }
    for (int r = 0; r < 2; ++r) {
      y[h][2 * r] = _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(s[r][0], s[r][1]), s[r][2]), 2);
      y[h][2 * r + 1] = _mm256_srai_epi32(_mm256_sub_epi32(_mm256_sub_epi32(s[r][1], s[r][2]), s[r][3]), 2);
    }
  }
  const __m256i bias0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias));
  const __m256i bias1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias + 8));
  const __m256 m0 = _mm256_loadu_ps(ep.mult), m1 = _mm256_loadu_ps(ep.mult + 8);
  for (int q = 0; q < 4; ++q)
    if (dst[q])
      store16(requant8(_mm256_add_epi32(y[0][q], bias0), m0, ep), requant8(_mm256_add_epi32(y[1][q], bias1), m1, ep),
              dst[q], nvalid);
}

int dw_pack_index(int ch) {
  const int b = ch & ~15, c = ch & 15;
  const int p = c < 4 ? c : c < 8 ? c + 4 : c < 12 ? c - 4 : c;
  return b + p;
}

namespace {

/// depthwise_pixels with the tap count a constant where NT > 0 (3x3: the loop unrolled).
template <int NT>
void dw_pixels(const int8_t* const* taps, const int64_t* steps, int nt, int64_t npix, int64_t c, int64_t cpad,
               const int16_t* w, const Epilogue& ep, int8_t* dst, int64_t dst_step) {
  const int ntaps = NT > 0 ? NT : nt;
  for (int64_t cb = 0; cb < cpad && cb < c; cb += 16) {
    const int64_t n = min64(16, c - cb);
    // acc0 holds channels 0-3 | 8-11, acc1 4-7 | 12-15 (bias and multipliers are packed alike).
    const __m256i bias0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias + cb));
    const __m256i bias1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias + cb + 8));
    const __m256 m0 = _mm256_loadu_ps(ep.mult + cb), m1 = _mm256_loadu_ps(ep.mult + cb + 8);
    const int16_t* wc = w + cb * 2;
    for (int64_t p = 0; p < npix; ++p) {
      __m256i acc0 = bias0, acc1 = bias1;
      for (int t = 0; t < ntaps; t += 2) {
        const __m256i xa = load16(taps[t] + p * steps[t] + cb, n);
        const __m256i xb = t + 1 < ntaps ? load16(taps[t + 1] + p * steps[t + 1] + cb, n) : _mm256_setzero_si256();
        const int16_t* wp = wc + (t / 2) * cpad * 2;
        acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_unpacklo_epi16(xa, xb),
                                                        _mm256_load_si256(reinterpret_cast<const __m256i*>(wp))));
        acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_unpackhi_epi16(xa, xb),
                                                        _mm256_load_si256(reinterpret_cast<const __m256i*>(wp + 16))));
      }
      const __m256i pk = _mm256_packs_epi32(requant8(acc0, m0, ep), requant8(acc1, m1, ep));  // channels 0-7 | 8-15
      const __m128i b = _mm_packs_epi16(_mm256_castsi256_si128(pk), _mm256_extracti128_si256(pk, 1));
      int8_t* d = dst + p * dst_step + cb;
      if (n == 16) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d), b);
      } else {
        alignas(16) int8_t tmp[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
        std::memcpy(d, tmp, static_cast<std::size_t>(n));
      }
    }
  }
}

}  // namespace

void depthwise_pixels(const int8_t* const* taps, const int64_t* steps, int ntaps, int64_t npix, int64_t c, int64_t cpad,
                      const int16_t* w, const Epilogue& ep, int8_t* dst, int64_t dst_step) {
  if (ntaps == 9) return dw_pixels<9>(taps, steps, ntaps, npix, c, cpad, w, ep, dst, dst_step);
  dw_pixels<0>(taps, steps, ntaps, npix, c, cpad, w, ep, dst, dst_step);
}

int8_t requant_one(int32_t v, float m, int32_t zy, int32_t lo, int32_t hi) {
  return static_cast<int8_t>(clamp32(round_clamp(static_cast<float>(v) * m) + zy, lo, hi));
}

void requant(const int8_t* x, int8_t* y, int64_t n, int32_t zx, float m, int32_t zy, int32_t lo, int32_t hi) {
  const __m256i vzx = _mm256_set1_epi32(zx), vzy = _mm256_set1_epi32(zy), vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
  const __m256 vm = _mm256_set1_ps(m), cl = _mm256_set1_ps(kClampF);
  const __m256 ncl = _mm256_set1_ps(-kClampF);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  auto q8 = [&](const int8_t* p) {
    __m256i v = _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), vzx);
    __m256 f = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), vm), ncl), cl);
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(f), vzy);
    return _mm256_max_epi32(_mm256_min_epi32(q, vhi), vlo);
  };
  for (; i + 32 <= n; i += 32) {
    __m256i r = _mm256_packs_epi16(_mm256_packs_epi32(q8(x + i), q8(x + i + 8)), _mm256_packs_epi32(q8(x + i + 16), q8(x + i + 24)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_permutevar8x32_epi32(r, perm));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256i q = q8(x + i);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), _mm_packs_epi16(w, w));
  }
  for (; i < n; ++i) y[i] = requant_one(x[i] - zx, m, zy, lo, hi);
}

void lookup(const int8_t* x, int8_t* y, int64_t n, const int8_t* table) {
  __m256i rows[16];
  for (int g = 0; g < 16; ++g)
    rows[g] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table + 16 * g)));
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i lo = _mm256_and_si256(v, nibble);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
    __m256i r = _mm256_setzero_si256();
    for (int g = 0; g < 16; ++g)
      r = _mm256_or_si256(r, _mm256_and_si256(_mm256_shuffle_epi8(rows[g], lo), _mm256_cmpeq_epi8(hi, _mm256_set1_epi8(static_cast<char>(g)))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), r);
  }
  for (; i < n; ++i) y[i] = table[static_cast<uint8_t>(x[i])];
}

void add_requant(const int8_t* a, const int8_t* b, int8_t* y, int64_t n, int32_t za, float ma, int32_t zb, float mb,
                 int32_t zy, int32_t lo, int32_t hi) {
  const __m256i vza = _mm256_set1_epi32(za), vzb = _mm256_set1_epi32(zb), vzy = _mm256_set1_epi32(zy);
  const __m256i vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
  const __m256 vma = _mm256_set1_ps(ma), vmb = _mm256_set1_ps(mb), cl = _mm256_set1_ps(kClampF), ncl = _mm256_set1_ps(-kClampF);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  auto q8 = [&](int64_t i) {
    __m256 fa = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + i))), vza));
    __m256 fb = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + i))), vzb));
    __m256 f = _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(fa, vma, _mm256_mul_ps(fb, vmb)), ncl), cl);
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(f), vzy);
    return _mm256_max_epi32(_mm256_min_epi32(q, vhi), vlo);
  };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i r = _mm256_packs_epi16(_mm256_packs_epi32(q8(i), q8(i + 8)), _mm256_packs_epi32(q8(i + 16), q8(i + 24)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_permutevar8x32_epi32(r, perm));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256i q = q8(i);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), _mm_packs_epi16(w, w));
  }
  for (; i < n; ++i) {
    // The same operations as the vector lanes: one fma of the two scaled terms.
    const float fa = static_cast<float>(a[i] - za), fb = static_cast<float>(b[i] - zb);
    const __m128 f = _mm_fmadd_ss(_mm_set_ss(fa), _mm_set_ss(ma), _mm_set_ss(fb * mb));
    y[i] = static_cast<int8_t>(clamp32(round_clamp(_mm_cvtss_f32(f)) + zy, lo, hi));
  }
}

void mul_requant(const int8_t* a, const int8_t* b, int8_t* y, int64_t n, int32_t za, int32_t zb, float m, int32_t zy) {
  const __m256i vza = _mm256_set1_epi32(za), vzb = _mm256_set1_epi32(zb), vzy = _mm256_set1_epi32(zy);
  const __m256 vm = _mm256_set1_ps(m), cl = _mm256_set1_ps(kClampF), ncl = _mm256_set1_ps(-kClampF);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // (a - za) * (b - zb) is at most 65025 in magnitude: exact in int32 and in float.
    __m256i p = _mm256_mullo_epi32(_mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + i))), vza),
                                   _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + i))), vzb));
    __m256 f = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(p), vm), ncl), cl);
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(f), vzy);
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), _mm_packs_epi16(w, w));
  }
  for (; i < n; ++i) y[i] = requant_one((a[i] - za) * (b[i] - zb), m, zy, -128, 127);
}

void requant_each(const int8_t* x, int8_t* y, int64_t n, int32_t zx, const float* m, int32_t zy) {
  const __m256i vzx = _mm256_set1_epi32(zx), vzy = _mm256_set1_epi32(zy);
  const __m256 cl = _mm256_set1_ps(kClampF), ncl = _mm256_set1_ps(-kClampF);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i v = _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + i))), vzx);
    __m256 f = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_loadu_ps(m + i)), ncl), cl);
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(f), vzy);
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), _mm_packs_epi16(w, w));
  }
  for (; i < n; ++i) y[i] = requant_one(x[i] - zx, m[i], zy, -128, 127);
}

void max_s8(int8_t* acc, const int8_t* x, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + i), _mm256_max_epi8(a, b));
  }
  for (; i + 16 <= n; i += 16) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + i), _mm_max_epi8(a, b));
  }
  for (; i < n; ++i) acc[i] = acc[i] > x[i] ? acc[i] : x[i];
}

void sum_s8(int32_t* acc, const int8_t* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + i)));
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + i), _mm256_add_epi32(a, v));
  }
  for (; i < n; ++i) acc[i] += x[i];
}

int32_t sum_all_s8(const int8_t* x, int64_t n) {
  __m256i acc = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))), ones));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  s = _mm_hadd_epi32(s, s);
  s = _mm_hadd_epi32(s, s);
  int32_t total = _mm_cvtsi128_si32(s);
  for (; i < n; ++i) total += x[i];
  return total;
}

int8_t max_all_s8(const int8_t* x, int64_t n) {
  __m128i m = _mm_set1_epi8(-128);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm_max_epi8(m, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
  alignas(16) int8_t lanes[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes), m);
  int8_t best = -128;
  for (int k = 0; k < 16; ++k) best = lanes[k] > best ? lanes[k] : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

void sum_requant(const int32_t* acc, int8_t* y, int64_t n, int32_t bias, float m, int32_t zy) {
  const __m256i vb = _mm256_set1_epi32(bias), vzy = _mm256_set1_epi32(zy);
  const __m256 vm = _mm256_set1_ps(m), cl = _mm256_set1_ps(kClampF), ncl = _mm256_set1_ps(-kClampF);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i v = _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + i)), vb);
    __m256 f = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), vm), ncl), cl);
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(f), vzy);
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), _mm_packs_epi16(w, w));
  }
  for (; i < n; ++i) y[i] = requant_one(acc[i] - bias, m, zy, -128, 127);
}

}  // namespace softneuro::qint8
