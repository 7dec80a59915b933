// cpu/nbits_dense's row kernel in AVX2+FMA (nbits_dense_kernels.hpp): eight
// codes widened to int32, converted and multiplied into the rows of x; per
// block the sums are scaled into each (weight row, x row) total.
#include "routines/cpu/nbits_dense_kernels.hpp"

#include <immintrin.h>

#include <algorithm>

namespace softneuro::cpu::nbits {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <bool Signed>
inline __m256 codes8(const uint8_t* p) {
  const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(Signed ? _mm256_cvtepi8_epi32(c) : _mm256_cvtepu8_epi32(c));
}

template <bool Signed>
inline float code(const uint8_t* p) {
  return Signed ? static_cast<float>(static_cast<int8_t>(*p)) : static_cast<float>(*p);
}

/// R weight rows from o against M rows of x (R * M <= 4: 8 accumulators).
template <bool Signed, int R, int M>
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
    const int64_t k0 = b * w.block, k1 = std::min(k, k0 + w.block);
    __m256 acc[R][M];
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) acc[r][m] = _mm256_setzero_ps();
    int64_t kk = k0;
    for (; kk + 8 <= k1; kk += 8) {
      __m256 xv[M];
      for (int m = 0; m < M; ++m) xv[m] = _mm256_loadu_ps(x + m * k + kk);
      for (int r = 0; r < R; ++r) {
        const __m256 c = codes8<Signed>(w.codes + (o + r) * k + kk);
        for (int m = 0; m < M; ++m) acc[r][m] = _mm256_fmadd_ps(c, xv[m], acc[r][m]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const std::size_t at = static_cast<std::size_t>((o + r) * w.blocks + b);
      const float s = w.scale[at], sz = w.scaled_zero[at];
      const __m256 sv = _mm256_set1_ps(s);
      for (int m = 0; m < M; ++m) {
        total[r][m] = _mm256_fmadd_ps(acc[r][m], sv, total[r][m]);
        float tail = 0;
        for (int64_t t = kk; t < k1; ++t) tail += code<Signed>(w.codes + (o + r) * k + t) * x[m * k + t];
        extra[r][m] += s * tail - sz * xsum[m * w.blocks + b];
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) y[m * ldy + o + r] = hsum(total[r][m]) + extra[r][m];
}

template <bool Signed>
void rows(const Weights& w, int64_t o0, int64_t o1, const float* x, int64_t m, const float* xsum, float* y, int64_t ldy) {
  int64_t o = o0;
  switch (m) {
    case 1:
      for (; o + 4 <= o1; o += 4) rows_at<Signed, 4, 1>(w, o, x, xsum, y, ldy);
      for (; o < o1; ++o) rows_at<Signed, 1, 1>(w, o, x, xsum, y, ldy);
      break;
    case 2:
      for (; o + 2 <= o1; o += 2) rows_at<Signed, 2, 2>(w, o, x, xsum, y, ldy);
      for (; o < o1; ++o) rows_at<Signed, 1, 2>(w, o, x, xsum, y, ldy);
      break;
    case 3:
      for (; o < o1; ++o) rows_at<Signed, 1, 3>(w, o, x, xsum, y, ldy);
      break;
    default:
      for (; o < o1; ++o) rows_at<Signed, 1, 4>(w, o, x, xsum, y, ldy);
      break;
  }
}

void rows_any(const Weights& w, int64_t o0, int64_t o1, const float* x, int64_t m, const float* xsum, float* y, int64_t ldy) {
  if (w.is_signed) rows<true>(w, o0, o1, x, m, xsum, y, ldy);
  else rows<false>(w, o0, o1, x, m, xsum, y, ldy);
}

}  // namespace

RowsKernel unchecked_rows_avx2() { return &rows_any; }

}  // namespace softneuro::cpu::nbits
