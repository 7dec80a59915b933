// The requantising epilogue shared by the per-ISA qint8 kernel files (each
// built for AVX2 or better). Internal linkage: every including file gets its
// own copy, compiled for its own ISA (no inline function shared across files).
#pragma once

#include "routines/cpu/qint8_kernels.hpp"

#include <immintrin.h>

#include <cstring>

namespace softneuro::qint8 {
namespace {

constexpr float kClampF = 1048576.0f;  // |value| bound before float -> int32 (no overflow)

/// The output's rounding: clamped before rounding to [lo - zp, hi - zp],
/// integers (rounding keeps it there, the same as clamping after, and the
/// conversion cannot overflow), then the zero point added. Its constants made
/// once, where a tile rounds many vectors.
struct Rounding {
  __m256 lo, hi;
  __m256i zp;
  explicit Rounding(const Epilogue& ep)
      : lo(_mm256_set1_ps(static_cast<float>(ep.lo - ep.zp))), hi(_mm256_set1_ps(static_cast<float>(ep.hi - ep.zp))),
        zp(_mm256_set1_epi32(ep.zp)) {}
  __m256i operator()(__m256 f) const { return _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(f, hi), lo)), zp); }
  /// A linear epilogue without add_out: requant8's whole work.
  __m256i linear(__m256i acc, __m256 mult) const { return (*this)(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), mult)); }
};

/// Requantises 8 int32 accumulators (bias included) with per-lane multipliers.
inline __m256i requant8(__m256i acc, __m256 mult, const Epilogue& ep) {
  __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), mult);
  if (ep.act == Epilogue::hardswish) {
    const __m256 r6 = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(f, _mm256_set1_ps(3.0f)), _mm256_setzero_ps()),
                                    _mm256_set1_ps(6.0f));
    f = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(f, r6), _mm256_set1_ps(1.0f / 6.0f)), _mm256_set1_ps(ep.inv_out));
  } else if (ep.act == Epilogue::hardsigmoid) {
    const __m256 h = _mm256_fmadd_ps(f, _mm256_set1_ps(ep.alpha), _mm256_set1_ps(ep.beta));
    f = _mm256_mul_ps(_mm256_min_ps(_mm256_max_ps(h, _mm256_setzero_ps()), _mm256_set1_ps(1.0f)), _mm256_set1_ps(ep.inv_out));
  }
  if (ep.add_out != 0) f = _mm256_add_ps(f, _mm256_set1_ps(ep.add_out));
  return Rounding(ep)(f);
}

/// 16 int32 in order (lo: 0-7, hi: 8-15) -> 16 int8 stored at dst (the first n).
inline void store16(__m256i lo, __m256i hi, int8_t* dst, int n) {
  __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xd8);
  __m128i b = _mm_packs_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
  if (n == 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), b);
  } else {
    alignas(16) int8_t tmp[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
    std::memcpy(dst, tmp, static_cast<std::size_t>(n));
  }
}

}  // namespace
}  // namespace softneuro::qint8
