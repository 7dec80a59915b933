// Direct and depthwise convolution kernels, one build per ISA (included by
// conv_kernels_avx2.cpp and conv_kernels_avx512.cpp after defining
// SN_F32_AVX512). See conv_kernels.hpp.
#include "routines/cpu/conv_kernels.hpp"
#include "routines/cpu/f32_simd.hpp"

#include <cassert>
#include <cstring>
#include <limits>

namespace softneuro::cpu::SN_F32_NS {
namespace {

using conv::DirectTile;
using conv::DepthwiseRow;

/// A tile's accumulators at the start: the sums so far in y (a later ic pass) or zero.
/// ypx: floats between output pixels.
template <int OCB, int W>
__attribute__((always_inline)) inline void tile_begin(vf (&acc)[OCB][W], const DirectTile& t, int64_t ypx = kV) {
  if (t.load_y) {
#pragma GCC unroll 4
    for (int j = 0; j < OCB; ++j)
#pragma GCC unroll 32
      for (int i = 0; i < W; ++i) acc[j][i] = vload(t.y + j * t.y_ocb + i * ypx);
  } else {
#pragma GCC unroll 4
    for (int j = 0; j < OCB; ++j)
#pragma GCC unroll 32
      for (int i = 0; i < W; ++i) acc[j][i] = vzero();
  }
}

/// A tile's accumulators into y; on the last pass with bias and activation,
/// the padded lanes of a partial last oc block written 0.
template <int OCB, int W>
__attribute__((always_inline)) inline void tile_end(vf (&acc)[OCB][W], const DirectTile& t, const gemm::Epilogue& ep,
                                                   int64_t ypx = kV) {
  if (t.last) {
    const VAct act(ep);
#pragma GCC unroll 4
    for (int j = 0; j < OCB; ++j) {
      const vf b = t.bias ? vload(t.bias + j * kV) : vzero();
      const bool mask = j == OCB - 1 && t.valid_last < kV;
#pragma GCC unroll 32
      for (int i = 0; i < W; ++i) {
        vf v = act(vadd(acc[j][i], b));
        if (mask) v = vkeep_n(v, t.valid_last);
        acc[j][i] = v;
      }
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < OCB; ++j)
#pragma GCC unroll 32
    for (int i = 0; i < W; ++i) vstore(t.y + j * t.y_ocb + i * ypx, acc[j][i]);
}

/// OCB x W accumulators; stride S (0: t.sw at run time). NARROW: one block
/// of fewer channels than a vector (a net's first layer, 3 channels), stored
/// conv::kNarrowPx floats per pixel; only t.ic_valid of them are read. EDGE:
/// some pixel's tap falls outside the input's columns [0, t.w_in) (a tile at
/// the left or right edge, or the row's last, narrower one): such taps read
/// t.zeros instead. Only the kernel rows [t.kh0, t.kh) are visited.
template <int OCB, int W, int S, bool NARROW, bool EDGE>
void direct_tile(const DirectTile& t, const gemm::Epilogue& ep) {
  const float* tx = t.x;
  vf acc[OCB][W];
  const int64_t ypx = NARROW ? t.y_px : kV;  // NARROW: also nhwc outputs
  tile_begin(acc, t, ypx);
  constexpr int64_t px = NARROW ? conv::kNarrowPx : kV;  // floats between input pixels
  const int64_t sw = S == 0 ? t.sw : S, sx = sw * px;
  for (int64_t icb = 0; icb < t.icbs; ++icb) {
    const float* xb = tx + icb * t.x_icb;
    const float* wb = t.w + icb * t.w_icb;
    for (int kh = t.kh0; kh < t.kh; ++kh)
      for (int kw = 0; kw < t.kw; ++kw) {
        const float* xp = xb + (kh - t.kh0) * t.dh * t.x_row + kw * t.dw * px;
        const float* wp = wb + (kh * t.kw + kw) * (kV * OCB * kV);
        // EDGE: each pixel's source for this tap, its column or the zeros.
        const float* src[EDGE ? W : 1];
        if constexpr (EDGE) {
          const int64_t c0 = t.col0 + kw * t.dw;
#pragma GCC unroll 32
          for (int i = 0; i < W; ++i) {
            const int64_t c = c0 + i * sw;
            src[i] = c >= 0 && c < t.w_in ? xp + i * sx : t.zeros;
          }
        }
        auto step = [&](int ic) __attribute__((always_inline)) {
          vf wv[OCB];
#pragma GCC unroll 4
          for (int j = 0; j < OCB; ++j) wv[j] = vload(wp + (ic * OCB + j) * kV);
#pragma GCC unroll 32
          for (int i = 0; i < W; ++i) {
            const vf xv = EDGE ? vbcast(src[i] + ic) : vbcast(xp + i * sx + ic);
#pragma GCC unroll 4
            for (int j = 0; j < OCB; ++j) acc[j][i] = vfma(xv, wv[j], acc[j][i]);
          }
        };
        if constexpr (NARROW) {
          switch (t.ic_valid) {  // unrolled per count: the loop overhead would show on 3 steps
            case 1: step(0); break;
            case 2: step(0); step(1); break;
            case 3: step(0); step(1); step(2); break;
            default: step(0); step(1); step(2); step(3); break;
          }
        } else {
          // The whole vector of input channels unrolled: the loop overhead per
          // tap would otherwise show (up to ~10% on the narrow tiles).
#pragma GCC unroll 16
          for (int ic = 0; ic < kV; ++ic) step(ic);
        }
      }
  }
  tile_end(acc, t, ep, ypx);
}

/// A 1x1 unpadded convolution's tile (pointwise): direct_tile without the tap
/// loop, one flat run over the input-channel blocks, and the next block's input
/// lines prefetched while this one is multiplied (the blocks are whole planes
/// apart: one stream per block, more than the hardware prefetcher follows).
template <int OCB, int W, int S>
void pointwise_tile(const DirectTile& t, const gemm::Epilogue& ep) {
  vf acc[OCB][W];
  tile_begin(acc, t);
  const int64_t sx = (S == 0 ? t.sw : S) * kV;
  const float* xb = t.x;
  const float* wp = t.w;
  for (int64_t icb = 0; icb < t.icbs; ++icb, xb += t.x_icb, wp += t.w_icb) {
    const float* xn = icb + 1 < t.icbs ? xb + t.x_icb : xb;
#pragma GCC unroll 16
    for (int ic = 0; ic < kV; ++ic) {
      if (ic < W) _mm_prefetch(reinterpret_cast<const char*>(xn + ic * sx), _MM_HINT_T0);
      if (ic == kV - 1)
        for (int i = kV; i < W; ++i) _mm_prefetch(reinterpret_cast<const char*>(xn + i * sx), _MM_HINT_T0);
      vf wv[OCB];
#pragma GCC unroll 4
      for (int j = 0; j < OCB; ++j) wv[j] = vload(wp + (ic * OCB + j) * kV);
#pragma GCC unroll 32
      for (int i = 0; i < W; ++i) {
        const vf xv = vbcast(xb + i * sx + ic);
#pragma GCC unroll 4
        for (int j = 0; j < OCB; ++j) acc[j][i] = vfma(xv, wv[j], acc[j][i]);
      }
    }
  }
  tile_end(acc, t, ep);
}

/// A first layer in nhwc (conv::Kernels::first_nhwc): t.x_px = C input
/// channels per pixel, read in place. With dilation 1 the KW*C floats a pixel
/// reads from one input row are contiguous, so the taps of a kernel row and the
/// channels fold into one loop of KW*C steps (weights packed [kh][kw][C][OCB][V]):
/// no per-tap loop overhead on 3-channel taps. No edge handling: the caller
/// gives edge tiles a zero-padded patch. Output pixels t.y_px floats apart.
/// C: the channels when known at compile time (3: RGB), 0 for t.x_px: with
/// run-time pixel strides GCC keeps a pointer per pixel and spills.
template <int OCB, int W, int S, int C>
void first_nhwc_tile(const DirectTile& t, const gemm::Epilogue& ep) {
  vf acc[OCB][W];
  tile_begin(acc, t, t.y_px);
  const int64_t c = C == 0 ? t.x_px : C;
  const int64_t sx = (S == 0 ? t.sw : S) * c;
  const int64_t steps = int64_t(t.kw) * c;
  for (int kh = t.kh0; kh < t.kh; ++kh) {
    const float* xp = t.x + (kh - t.kh0) * t.dh * t.x_row;
    const float* wp = t.w + kh * steps * (OCB * kV);
#pragma GCC unroll 3
    for (int64_t st = 0; st < steps; ++st) {
      vf wv[OCB];
#pragma GCC unroll 4
      for (int j = 0; j < OCB; ++j) wv[j] = vload(wp + (st * OCB + j) * kV);
#pragma GCC unroll 32
      for (int i = 0; i < W; ++i) {
        const vf xv = vbcast(xp + i * sx + st);
#pragma GCC unroll 4
        for (int j = 0; j < OCB; ++j) acc[j][i] = vfma(xv, wv[j], acc[j][i]);
      }
    }
  }
  tile_end(acc, t, ep, t.y_px);
}

// ---------------------------------------------------------------------------
// Depthwise: one output row of one channel vector.

/// How a channel vector is loaded and stored: kFull (all lanes valid), kKeep
/// (blocked layout, padded lanes written as zero), kMasked (nhwc tail).
enum DwMode { kFull, kKeep, kMasked };

template <int M>
inline vf dw_load(const DepthwiseRow& r, const float* p) {
  if constexpr (M == kMasked) return vload_n(p, r.valid);
  else return vload(p);
}

template <int M>
inline void dw_store(const DepthwiseRow& r, const VAct& act, vf bias, int64_t ow, vf acc) {
  vf v = act(vadd(acc, bias));
  float* p = r.y + ow * r.py;
  if constexpr (M == kMasked) vstore_n(p, v, r.valid);
  else if constexpr (M == kKeep) vstore(p, vkeep_n(v, r.valid));
  else vstore(p, v);
}

/// One output pixel with every bound checked.
template <int M>
inline vf dw_pixel(const DepthwiseRow& r, int64_t ow) {
  vf acc = vzero();
  for (int kh = 0; kh < r.kh; ++kh) {
    const int64_t ih = r.ih0 + kh * r.dh;
    if (ih < 0 || ih >= r.h) continue;
    for (int kw = 0; kw < r.kw; ++kw) {
      const int64_t iw = ow * r.sw - r.pl + kw * r.dw;
      if (iw < 0 || iw >= r.w_in) continue;
      acc = vfma(dw_load<M>(r, r.x + ih * r.rx + iw * r.px), vload(r.w + (kh * r.kw + kw) * kV), acc);
    }
  }
  return acc;
}

/// Pixels per step of the interior loop (independent accumulators).
#if SN_F32_AVX512
constexpr int kDwPix = 8;
#else
constexpr int kDwPix = 4;
#endif

/// Interior pixels (all taps in the row valid), kDwPix at a time; the valid KH rows found once.
template <int K, int M>
void dw_interior(const DepthwiseRow& r, const VAct& act, vf bias, int64_t lo, int64_t hi) {
  int khs = 0, khe = K;
  while (khs < K && r.ih0 + khs * r.dh < 0) ++khs;
  while (khe > khs && r.ih0 + (khe - 1) * r.dh >= r.h) --khe;
  vf wv[K * K];
#pragma GCC unroll 25
  for (int i = 0; i < K * K; ++i) wv[i] = vload(r.w + i * kV);
  const int64_t sx = r.sw * r.px;
  int64_t ow = lo;
  for (; ow + kDwPix <= hi; ow += kDwPix) {
    vf a[kDwPix];
#pragma GCC unroll 8
    for (int p = 0; p < kDwPix; ++p) a[p] = vzero();
    for (int kh = khs; kh < khe; ++kh) {
      const float* xr = r.x + (r.ih0 + kh * r.dh) * r.rx + (ow * r.sw - r.pl) * r.px;
#pragma GCC unroll 5
      for (int kw = 0; kw < K; ++kw) {
        const float* q = xr + kw * r.dw * r.px;
        const vf w = wv[kh * K + kw];
#pragma GCC unroll 8
        for (int p = 0; p < kDwPix; ++p) a[p] = vfma(dw_load<M>(r, q + p * sx), w, a[p]);
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < kDwPix; ++p) dw_store<M>(r, act, bias, ow + p, a[p]);
  }
  if (ow < hi) {
    // The last n < kDwPix interior pixels: the same independent chains, guarded.
    const int n = static_cast<int>(hi - ow);
    vf a[kDwPix];
#pragma GCC unroll 8
    for (int p = 0; p < kDwPix; ++p) a[p] = vzero();
    for (int kh = khs; kh < khe; ++kh) {
      const float* xr = r.x + (r.ih0 + kh * r.dh) * r.rx + (ow * r.sw - r.pl) * r.px;
#pragma GCC unroll 5
      for (int kw = 0; kw < K; ++kw) {
        const float* q = xr + kw * r.dw * r.px;
        const vf w = wv[kh * K + kw];
#pragma GCC unroll 8
        for (int p = 0; p < kDwPix; ++p)
          if (p < n) a[p] = vfma(dw_load<M>(r, q + p * sx), w, a[p]);
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < kDwPix; ++p)
      if (p < n) dw_store<M>(r, act, bias, ow + p, a[p]);
  }
}

template <int M>
void depthwise_row_mode(const DepthwiseRow& r, const gemm::Epilogue& ep) {
  const VAct act(ep);
  const vf bias = r.bias ? vload(r.bias) : vzero();
  // Interior: ow*sw - pl >= 0 and ow*sw - pl + (kw-1)*dw <= w_in - 1.
  int64_t lo = (r.pl + r.sw - 1) / r.sw;
  const int64_t last = r.w_in - 1 + r.pl - (r.kw - 1) * r.dw;
  int64_t hi = last < 0 ? 0 : last / r.sw + 1;
  hi = std::min(hi, r.ow);
  lo = std::min(lo, r.ow);
  if (hi < lo) hi = lo;
  for (int64_t ow = 0; ow < lo; ++ow) dw_store<M>(r, act, bias, ow, dw_pixel<M>(r, ow));
  if (r.kh == 3 && r.kw == 3) dw_interior<3, M>(r, act, bias, lo, hi);
  else if (r.kh == 5 && r.kw == 5) dw_interior<5, M>(r, act, bias, lo, hi);
  else
    for (int64_t ow = lo; ow < hi; ++ow) dw_store<M>(r, act, bias, ow, dw_pixel<M>(r, ow));
  for (int64_t ow = hi; ow < r.ow; ++ow) dw_store<M>(r, act, bias, ow, dw_pixel<M>(r, ow));
}

void depthwise_row(const DepthwiseRow& r, const gemm::Epilogue& ep) {
  if (r.valid >= kV) depthwise_row_mode<kFull>(r, ep);
  else if (r.masked) depthwise_row_mode<kMasked>(r, ep);
  else depthwise_row_mode<kKeep>(r, ep);
}

// ---------------------------------------------------------------------------
// Depthwise on a block of output rows of one channel vector (conv::DepthwiseBlock).

/// A vector of the block kernels' input or output: float32, or bfloat16 (its
/// bits as uint16_t; stored rounded to nearest even, NaN kept quiet, as the
/// casts round).
inline vf vload_x(const float* p) { return vload(p); }
inline void vstore_x(float* p, vf v) { vstore(p, v); }
#if SN_F32_AVX512
inline vf vload_x(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/// v rounded to bfloat16 in the upper 16 bits of each lane (nearest even, NaN
/// kept quiet); the lower bits are left over.
inline __m512i round_bf16_high(vf v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                         _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
}
inline void vstore_x(uint16_t* p, vf v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(round_bf16_high(v), 16)));
}
#else
inline vf vload_x(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline void vstore_x(uint16_t* p, vf v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i rounded = _mm256_add_epi32(
      u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
  const __m256i r = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan), 16);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}
#endif

/// The block kernels' weights: 3x3's nine vectors stay in registers for the
/// whole block; 5x5's 25 would not fit beside the sums and inputs (they spilled:
/// 42% of the FMA peak on a 240-channel layer), so each row's five are loaded
/// per step from L1 instead.
template <int K>
struct DwbWeights {
  vf wv[K == 3 ? 9 : 1];
  const float* w;
  explicit DwbWeights(const float* packed) : w(packed) {
    if constexpr (K == 3) {
#pragma GCC unroll 9
      for (int i = 0; i < 9; ++i) wv[i] = vload(packed + i * kV);
    }
  }
  vf at(int i) const {
    if constexpr (K == 3) return wv[i];
    else return vload(w + i * kV);
  }
};

/// P output pixels of one row at once (P independent sums over the K*K taps),
/// every column tap inside the image; rows outside it skipped unless ALL_ROWS.
/// x0: input at (row ih0, column ow*S - pl) of the first pixel; pixels px
/// floats apart in x, py in y (kV in a blocked layout, C in nhwc).
template <int K, int S, int P, bool ALL_ROWS, class T>
__attribute__((always_inline)) inline void dwb_pixels(const T* x0, int64_t row, int64_t px, int64_t py,
                                                      const bool* rv, const DwbWeights<K>& w, const VAct& act, vf bias,
                                                      int valid, T* yp) {
  vf a[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) a[p] = vzero();
#pragma GCC unroll 5
  for (int kh = 0; kh < K; ++kh) {
    if (!ALL_ROWS && !rv[kh]) continue;
    vf wk[K];
#pragma GCC unroll 5
    for (int kw = 0; kw < K; ++kw) wk[kw] = w.at(kh * K + kw);
    const T* xr = x0 + kh * row;
#pragma GCC unroll 5
    for (int kw = 0; kw < K; ++kw) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) a[p] = vfma(vload_x(xr + (kw + p * S) * px), wk[kw], a[p]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    vf v = act(vadd(a[p], bias));
    if (valid < kV) v = vkeep_n(v, valid);
    vstore_x(yp + p * py, v);
  }
}

/// One output pixel near the left or right edge: each tap's column checked.
template <int K, int S, class T>
__attribute__((always_inline)) inline void dwb_edge(const conv::DepthwiseBlock& b, const T* xrow, int64_t px,
                                                    const bool* rv, const DwbWeights<K>& w, const VAct& act, vf bias,
                                                    int64_t ow, T* yp) {
  vf a = vzero();
  const int64_t iw0 = ow * S - b.pl;
#pragma GCC unroll 5
  for (int kh = 0; kh < K; ++kh) {
    if (!rv[kh]) continue;
#pragma GCC unroll 5
    for (int kw = 0; kw < K; ++kw)
      if (iw0 + kw >= 0 && iw0 + kw < b.w_in) a = vfma(vload_x(xrow + (kh * b.w_in + iw0 + kw) * px), w.at(kh * K + kw), a);
  }
  vf v = act(vadd(a, bias));
  if (b.valid < kV) v = vkeep_n(v, b.valid);
  vstore_x(yp, v);
}

/// The interior pixels [lo, hi) of one output row: kDwPix at a time, then 4, 2, 1.
template <int K, int S, bool ALL_ROWS, class T>
__attribute__((always_inline)) inline void dwb_interior(const conv::DepthwiseBlock& b, const T* xrow, int64_t px,
                                                        int64_t py, const bool* rv, const DwbWeights<K>& w,
                                                        const VAct& act, vf bias, int64_t lo, int64_t hi, T* yr) {
  constexpr int P = kDwPix;
  const int64_t row = b.w_in * px;
  int64_t ow = lo;
  auto at = [&](int64_t o) { return xrow + (o * S - b.pl) * px; };
  for (; ow + P <= hi; ow += P) dwb_pixels<K, S, P, ALL_ROWS>(at(ow), row, px, py, rv, w, act, bias, b.valid, yr + ow * py);
  if constexpr (P > 4)
    if (ow + 4 <= hi) {
      dwb_pixels<K, S, 4, ALL_ROWS>(at(ow), row, px, py, rv, w, act, bias, b.valid, yr + ow * py);
      ow += 4;
    }
  if (ow + 2 <= hi) {
    dwb_pixels<K, S, 2, ALL_ROWS>(at(ow), row, px, py, rv, w, act, bias, b.valid, yr + ow * py);
    ow += 2;
  }
  if (ow < hi) dwb_pixels<K, S, 1, ALL_ROWS>(at(ow), row, px, py, rv, w, act, bias, b.valid, yr + ow * py);
}

/// STRIDED: pixels b.px / b.py values apart (nhwc); else kV (blocked layouts,
/// whose offsets stay constants the loads encode). T: the values' type, float
/// or bfloat16 (uint16_t bits).
template <int K, int S, bool STRIDED, class T = float>
void depthwise_block(const conv::DepthwiseBlock& b, const gemm::Epilogue& ep) {
  const int64_t px = STRIDED ? b.px : kV, py = STRIDED ? b.py : kV;
  const VAct act(ep);
  const vf bias = b.bias ? vload(b.bias) : vzero();
  const DwbWeights<K> w(b.w);
  // Interior columns: every tap inside, ow*S - pl >= 0 and ow*S - pl + K-1 <= w_in - 1.
  const int64_t lo = std::min<int64_t>(b.ow, (b.pl + S - 1) / S);
  const int64_t last = b.w_in - 1 + b.pl - (K - 1);
  const int64_t hi = std::max(lo, std::min<int64_t>(b.ow, last < 0 ? 0 : last / S + 1));
  for (int64_t oh = b.oh0; oh < b.oh1; ++oh) {
    const int64_t ih0 = oh * b.sh - b.pt;
    bool rv[K];
    bool all = true;
#pragma GCC unroll 5
    for (int kh = 0; kh < K; ++kh) all &= rv[kh] = ih0 + kh >= 0 && ih0 + kh < b.h;
    const T* xrow = static_cast<const T*>(b.x) + ih0 * b.w_in * px;  // row ih0 (only rows inside are read)
    T* yr = static_cast<T*>(b.y) + oh * b.ow * py;
    for (int64_t ow = 0; ow < lo; ++ow) dwb_edge<K, S>(b, xrow, px, rv, w, act, bias, ow, yr + ow * py);
    if (all) dwb_interior<K, S, true>(b, xrow, px, py, rv, w, act, bias, lo, hi, yr);
    else dwb_interior<K, S, false>(b, xrow, px, py, rv, w, act, bias, lo, hi, yr);
    for (int64_t ow = hi; ow < b.ow; ++ow) dwb_edge<K, S>(b, xrow, px, rv, w, act, bias, ow, yr + ow * py);
  }
}

#if SN_F32_AVX512
#include "routines/cpu/conv_kernels_bf16_32.inl"
#endif

// ---------------------------------------------------------------------------

template <int OCB, int W>
void add_tile(conv::Kernels& k) {
  const int t = k.ntiles++;
  if constexpr (W <= conv::kMaxAsmW) k.tile_of[conv::ocb_index(OCB)][W] = t;
  k.tile_ocb[t] = OCB;
  k.tile_w[t] = W;
  k.direct[t][0] = &direct_tile<OCB, W, 0, false, false>;
  k.direct[t][1] = &direct_tile<OCB, W, 1, false, false>;
  k.direct[t][2] = &direct_tile<OCB, W, 2, false, false>;
  k.direct_edge[t][0] = &direct_tile<OCB, W, 0, false, true>;
  k.direct_edge[t][1] = &direct_tile<OCB, W, 1, false, true>;
  k.direct_edge[t][2] = &direct_tile<OCB, W, 2, false, true>;
  k.narrow[t][0] = &direct_tile<OCB, W, 0, true, false>;
  k.narrow[t][1] = &direct_tile<OCB, W, 1, true, false>;
  k.narrow[t][2] = &direct_tile<OCB, W, 2, true, false>;
  k.first_nhwc[t][0] = &first_nhwc_tile<OCB, W, 0, 0>;
  k.first_nhwc[t][1] = &first_nhwc_tile<OCB, W, 1, 0>;
  k.first_nhwc[t][2] = &first_nhwc_tile<OCB, W, 2, 0>;
  k.first_nhwc_rgb[t][0] = &first_nhwc_tile<OCB, W, 0, 3>;
  k.first_nhwc_rgb[t][1] = &first_nhwc_tile<OCB, W, 1, 3>;
  k.first_nhwc_rgb[t][2] = &first_nhwc_tile<OCB, W, 2, 3>;
  k.pointwise[t][0] = &pointwise_tile<OCB, W, 0>;
  k.pointwise[t][1] = &pointwise_tile<OCB, W, 1>;
  k.pointwise[t][2] = &pointwise_tile<OCB, W, 2>;
}

using conv::AsmTile;
using conv::AsmFirstTile;
#if SN_F32_AVX512
#include "routines/cpu/direct_asm_avx512.inc"
#else
#include "routines/cpu/direct_asm_avx2.inc"
#endif

/// conv::AsmRow: the row in tiles of r.tw pixels (the last one narrower), each
/// an assembly tile. Bias and relu/clip are applied by the tile itself, which
/// reads and writes y; other activations, a partial last channel block (its
/// padded lanes written 0) and rows seeing no input go through a stack copy
/// and the C++ epilogue.
void asm_row(const conv::AsmRow& r, const gemm::Epilogue& ep) {
#if SN_F32_AVX512
  const conv::Kernels& k = *conv::unchecked_kernels_avx512();
#else
  const conv::Kernels& k = *conv::unchecked_kernels_avx2();
#endif
  const int oi = conv::ocb_index(r.ocb), si = r.sw - 1, pf = r.w_prefetch ? 1 : 0;
  alignas(64) float acc[conv::kMaxAsmW * kV];  // [ocb][rows][w]: at most 4 x 7, 3 x 8, 2 x 2 x 7, 1 x 28
  alignas(64) float pad[conv::kAsmEdgeFloats];
  alignas(64) static const float zeros[conv::kAsmZeroFloats] = {};
  int64_t taps[64], taps_pad[64], taps_edge[64];
  const int ntaps = r.kh_n * r.kw;  // the caller checks ntaps <= 64
  for (int kh = 0; kh < r.kh_n; ++kh)
    for (int kw = 0; kw < r.kw; ++kw)
      taps[kh * r.kw + kw] = (kh * r.dh * r.x_row + kw * r.dw * kV) * int64_t(sizeof(float));
  const bool clamp = ep.act == gemm::Act::relu || ep.act == gemm::Act::clip;
  // The tiles' own epilogue: bias, then relu or a clip; the AVX-512 tiles also
  // hardswish and the affine after it (PP-OCRv4's recogniser: every 1x1 layer;
  // in C, 6 such 240-channel 1x1 layers at 12x80 took 1.97-2.01 ms against
  // 1.77 with relu).
#if SN_F32_AVX512
  const bool asm_epilogue = clamp || ep.act == gemm::Act::none || ep.act == gemm::Act::hardswish;
#else
  const bool asm_epilogue = ep.clamps_only();
#endif
  const bool in_asm = ntaps > 0 && asm_epilogue && (!r.last || r.valid_last == kV);
  const int64_t last = in_asm && r.last
                           ? (ep.act == gemm::Act::relu ? 3 : clamp ? 2 : ep.act == gemm::Act::hardswish ? 4 : 1)
                           : 0;
  const VAct act(ep);
  // The row's tile description, filled once: a tile in place on y with the
  // tiles' own epilogue (in_asm); each tile sets its x and y, and what differs
  // for it (edge tiles, the stack copy, padded chunks). Short tiles (a 1x1
  // layer of 64 input channels: 64 channel steps) lost 15% to filling it per tile.
  AsmTile row_t;
  row_t.w = r.w;
  row_t.tap_x = taps;
  row_t.ntaps = ntaps;
  row_t.icbs = r.icbs;
  row_t.x_icb_bytes = r.x_icb * int64_t(sizeof(float));
  row_t.w_icb_bytes = r.w_icb * int64_t(sizeof(float));
  row_t.load = r.load_y;
  row_t.y_ocb_bytes = r.y_ocb * int64_t(sizeof(float));
  row_t.bias = r.bias;
  row_t.lo = ep.act == gemm::Act::relu ? 0.0f : ep.lo;
  row_t.hi = ep.act == gemm::Act::relu ? std::numeric_limits<float>::infinity() : ep.hi;
  row_t.last = last;
  row_t.affine = ep.affine;
  row_t.scale = ep.scale;
  row_t.shift = ep.shift;
  row_t.last_steps = r.last_steps;
  row_t.x_row2_bytes = r.x_row2 * int64_t(sizeof(float));
  row_t.y_row_bytes = r.y_row * int64_t(sizeof(float));
  row_t.zeros = zeros;
  if (r.span_ow > 0) {
    // A plane walked flat across its rows: each tile is the split tile whose
    // first `left` pixels end its row (all of them inside a row). Even widths:
    // ResNet50's 7x7 planes in 5 + 4 tiles of 6 and 5 pixels (49 steps of the
    // FMA ports) rather than 8 of 6 and one of 1 (2 FMAs per 4-cycle latency: 52).
    assert(in_asm && r.tw <= r.span_ow && r.tw <= k.asm_split_max_w[oi]);
    AsmTile t = row_t;
    t.x_row2_bytes = (r.x_row2 - r.span_ow * r.sw * kV) * int64_t(sizeof(float));
    // Tile after tile, the next pass's weights (right after this pass's: the
    // next ic pass, or the next OC group's first) prefetched a slice each; the
    // tiles past them prefetch their own weights (in cache: no traffic).
    const int64_t pass = r.icbs * r.w_icb, slice = r.icbs * ntaps * k.w_next_per_tap / int64_t(sizeof(float));
    int64_t next = pass;
    for (int64_t i = r.tile0; i < r.tile1; ++i, next += slice) {
      t.w_next = next < 2 * pass ? r.w + next : r.w;
      const int64_t p = i * r.span_px / r.span_tiles;
      const int w = static_cast<int>((i + 1) * r.span_px / r.span_tiles - p);
      const int64_t oy = p / r.span_ow, ox = p % r.span_ow, left = r.span_ow - ox;
      t.x = r.x + oy * r.x_row2 + ox * r.sw * kV;
      t.y = r.y + p * kV;
      k.asm_tile_split[pf][oi][si][w][std::min<int64_t>(left, w)](t);
    }
    return;
  }
  // A row without edge tiles whose epilogue the tiles apply (1x1 layers' flat
  // runs, padded copies, interior rows): only x and y per tile.
  if (in_asm && r.pl == 0 && (r.ow - 1) * r.sw + int64_t(r.kw - 1) * r.dw + 1 <= r.w_in) {
    AsmTile t = row_t;
    const int64_t whole = r.ow / r.tw * r.tw;
    const conv::AsmTileFn fn = r.rows == 2 ? k.asm_tile2r[pf][si][r.tw] : k.asm_tile[pf][oi][si][r.tw];
    for (int64_t ow0 = 0; ow0 < whole; ow0 += r.tw) {
      t.x = r.x + ow0 * r.sw * kV;
      t.y = r.y + ow0 * kV;
      fn(t);
    }
    if (whole < r.ow) {
      const int w = static_cast<int>(r.ow - whole);
      t.x = r.x + whole * r.sw * kV;
      t.y = r.y + whole * kV;
      (r.rows == 2 ? k.asm_tile2r[pf][si][w] : k.asm_tile[pf][oi][si][w])(t);
    }
    return;
  }
  for (int64_t ow0 = 0; ow0 < r.ow; ow0 += r.tw) {
    const int w = static_cast<int>(std::min<int64_t>(r.tw, r.ow - ow0));
    const int64_t col0 = ow0 * r.sw - r.pl;
    const int64_t span = int64_t(w - 1) * r.sw + int64_t(r.kw - 1) * r.dw + 1;  // input columns read
    const bool edge = col0 < 0 || col0 + span > r.w_in;
    // An edge tile runs in place when only its first and last columns leave the
    // input (pads of at most the stride, as 3x3 pad 1): those pixels read zeros
    // (AsmTile's tap flags), x stays at the row's column 0 (col0 goes into the offsets).
    bool in_place = edge && ntaps > 0 && (r.rows == 1 || r.x_row2 + kV <= conv::kAsmZeroFloats);
    for (int kw = 0; in_place && kw < r.kw; ++kw) {
      const int flags = conv::edge_tap_flags(col0 + int64_t(kw) * r.dw, w, r.sw, r.w_in);
      in_place = flags >= 0;
      for (int kh = 0; in_place && kh < r.kh_n; ++kh)
        taps_edge[kh * r.kw + kw] = (taps[kh * r.kw + kw] + col0 * kV * int64_t(sizeof(float))) | flags;
    }
    assert(r.rows == 1 || !edge || in_place);  // no intrinsic two-row edge tile: the caller checks
    if (edge && !in_place && ntaps > 0) {
      // The intrinsic edge kernel of the same shape reads zeros for the columns
      // outside (a zero-padded copy would be made for every tile of a small plane).
      if (const int it = k.tile_of[oi][w]; it >= 0) {
        alignas(64) static const float zeros[kV] = {};
        conv::DirectTile d;
        d.x = r.x + col0 * kV;
        d.w = r.w;
        d.y = r.y + ow0 * kV;
        d.icbs = r.icbs;
        d.x_icb = r.x_icb;
        d.x_row = r.x_row;
        d.w_icb = r.w_icb;
        d.y_ocb = r.y_ocb;
        d.kh0 = 0;  // x and w start at the first kernel row inside the input
        d.kh = r.kh_n;
        d.kw = r.kw;
        d.dh = r.dh;
        d.dw = r.dw;
        d.sw = r.sw;
        d.col0 = col0;
        d.w_in = r.w_in;
        d.zeros = zeros;
        d.load_y = r.load_y;
        d.last = r.last;
        d.bias = r.bias;
        d.valid_last = r.valid_last;
        k.direct_edge[it][si + 1](d, ep);
        continue;
      }
    }
    AsmTile t = row_t;
    // Pixel i of row q of oc block j in y, and in the stack copy acc.
    const int rows = r.rows;
    auto y_at = [&](int j, int q, int i) { return r.y + j * r.y_ocb + q * r.y_row + (ow0 + i) * kV; };
    auto acc_at = [&](int j, int q, int i) { return acc + ((j * rows + q) * w + i) * kV; };
    if (in_asm) {
      t.y = r.y + ow0 * kV;
    } else {
      t.y = acc;
      t.y_row_bytes = int64_t(w) * kV * int64_t(sizeof(float));
      t.y_ocb_bytes = rows * t.y_row_bytes;
      if (r.load_y || ntaps == 0)  // the sums so far (a later ic pass); zeros when no tap is inside
        for (int j = 0; j < r.ocb; ++j)
          for (int q = 0; q < rows; ++q)
            for (int i = 0; i < w; ++i) vstore(acc_at(j, q, i), r.load_y ? vload(y_at(j, q, i)) : vzero());
    }
    const conv::AsmTileFn fn = rows == 2 ? k.asm_tile2r[pf][si][w] : k.asm_tile[pf][oi][si][w];
    if (ntaps == 0) {
      // No kernel row inside the input (padding only): the sums stay as they are.
    } else if (!edge || in_place) {
      t.x = in_place ? r.x : r.x + col0 * kV;
      t.tap_x = in_place ? taps_edge : taps;
      fn(t);
    } else {
      // A zero-padded copy of the columns [col0, col0 + span) of the kh_n rows,
      // as many ic blocks at a time as fit.
      const int64_t block = int64_t(r.kh_n) * span * kV;
      const int64_t chunk = std::max<int64_t>(1, conv::kAsmEdgeFloats / block);
      for (int kh = 0; kh < r.kh_n; ++kh)
        for (int kw = 0; kw < r.kw; ++kw)
          taps_pad[kh * r.kw + kw] = (kh * span + kw * r.dw) * kV * int64_t(sizeof(float));
      t.tap_x = taps_pad;
      t.x = pad;
      t.x_icb_bytes = block * int64_t(sizeof(float));
      for (int64_t c0 = 0; c0 < r.icbs; c0 += chunk) {
        const int64_t cn = std::min(chunk, r.icbs - c0);
        for (int64_t c = 0; c < cn; ++c)
          for (int kh = 0; kh < r.kh_n; ++kh) {
            const float* src = r.x + (c0 + c) * r.x_icb + kh * r.dh * r.x_row;
            float* dst = pad + c * block + kh * span * kV;
            for (int64_t p = 0; p < span; ++p) {
              const int64_t col = col0 + p;
              vstore(dst + p * kV, col >= 0 && col < r.w_in ? vload(src + col * kV) : vzero());
            }
          }
        t.icbs = cn;
        t.w = r.w + c0 * r.w_icb;
        t.load = c0 > 0 || r.load_y;
        t.last = c0 + cn >= r.icbs ? last : 0;
        t.last_steps = c0 + cn >= r.icbs ? r.last_steps : kV / 4;
        fn(t);
      }
    }
    if (in_asm) continue;
    for (int j = 0; j < r.ocb; ++j) {
      const vf b = r.last && r.bias ? vload(r.bias + j * kV) : vzero();
      const bool mask = r.last && j == r.ocb - 1 && r.valid_last < kV;
      for (int q = 0; q < rows; ++q)
        for (int i = 0; i < w; ++i) {
          vf v = vload(acc_at(j, q, i));
          if (r.last) {
            v = act(vadd(v, b));
            if (mask) v = vkeep_n(v, r.valid_last);
          }
          vstore(y_at(j, q, i), v);
        }
    }
  }
}

conv::Kernels make_kernels() {
  conv::Kernels k;
  for (auto& row : k.tile_of)
    for (int& t : row) t = -1;
  k.vec = kV;
#if SN_F32_AVX512
  k.isa = "avx512";
  // 32 zmm: OCB*W accumulators + OCB weights (+ the broadcast, often folded into the FMA).
  add_tile<1, 14>(k);
  add_tile<1, 28>(k);
  add_tile<2, 7>(k);
  add_tile<2, 14>(k);
  add_tile<3, 8>(k);  // 9 blocks (144 channels) take no 2 or 4
  add_tile<4, 4>(k);
  add_tile<4, 6>(k);
  add_tile<4, 7>(k);
  fill_asm_tiles(k);
  k.asm_row = &asm_row;
#else
  k.isa = "avx2";
  // 16 ymm: OCB*W accumulators + OCB weights + the broadcast.
  add_tile<1, 6>(k);
  add_tile<1, 7>(k);
  add_tile<1, 12>(k);
  add_tile<1, 14>(k);
  add_tile<2, 4>(k);
  add_tile<2, 6>(k);
  add_tile<4, 2>(k);
  // The assembly tiles (4 x 3, 2 x 6, 1 x 14); the intrinsic ones above take
  // the edge tiles they cannot run in place and the layers they do not cover.
  fill_asm_tiles(k);
  k.asm_row = &asm_row;
#endif
  k.depthwise = &depthwise_row;
  k.depthwise_block[0][0] = &depthwise_block<3, 1, false>;
  k.depthwise_block[0][1] = &depthwise_block<3, 2, false>;
  k.depthwise_block[1][0] = &depthwise_block<5, 1, false>;
  k.depthwise_block[1][1] = &depthwise_block<5, 2, false>;
  k.depthwise_block_nhwc = &depthwise_block<5, 1, true>;
  k.depthwise_block_nhwc_bf16[0][0] = &depthwise_block<3, 1, true, uint16_t>;
  k.depthwise_block_nhwc_bf16[0][1] = &depthwise_block<3, 2, true, uint16_t>;
  k.depthwise_block_nhwc_bf16[1][0] = &depthwise_block<5, 1, true, uint16_t>;
  k.depthwise_block_nhwc_bf16[1][1] = &depthwise_block<5, 2, true, uint16_t>;
#if SN_F32_AVX512
  k.depthwise_block_nhwc_bf16_32[0][0] = &depthwise_block_bf16_32<3, 1>;
  k.depthwise_block_nhwc_bf16_32[0][1] = &depthwise_block_bf16_32<3, 2>;
  k.depthwise_block_nhwc_bf16_32[1][0] = &depthwise_block_bf16_32<5, 1>;
  k.depthwise_block_nhwc_bf16_32[1][1] = &depthwise_block_bf16_32<5, 2>;
#endif
  return k;
}

}  // namespace
}  // namespace softneuro::cpu::SN_F32_NS

namespace softneuro::cpu::conv {
#if SN_F32_AVX512
const Kernels* unchecked_kernels_avx512() {
  static const Kernels k = avx512::make_kernels();
  return &k;
}
#else
const Kernels* unchecked_kernels_avx2() {
  static const Kernels k = avx2::make_kernels();
  return &k;
}
#endif
}  // namespace softneuro::cpu::conv
