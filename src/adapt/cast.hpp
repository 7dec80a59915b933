// The float32 <-> float16/bfloat16 conversion of the cast adapts
// (src/adapt/cast.cpp), for other adapts that convert as they move values.
// Internal to src/adapt.
#pragma once

#include <softneuro/blob.hpp>

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace softneuro::adapt {

/// y[i] = x[i] converted, i < n: float32 to float16 or bfloat16 (round to
/// nearest even; NaN stays a quiet NaN; float16 overflows to infinity and
/// keeps subnormals), or float16/bfloat16 to float32.
void cast_values(DType from, DType to, const void* x, void* y, int64_t n);

/// float32 to bfloat16: round to nearest even, NaN quieted.
inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#if defined(__x86_64__)
/// f32_to_bf16 of 16 floats (their bits); call only where the CPU has AVX-512 BW.
__attribute__((target("avx512f,avx512bw"))) inline __m256i f32x16_to_bf16(__m512i v) {
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i rounded = _mm512_add_epi32(
      v, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(1))));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_mask_or_epi32(rounded, nan, v, _mm512_set1_epi32(0x400000)), 16));
}
#endif

}  // namespace softneuro::adapt
