// bfloat16 depthwise on 32 channels at once, AVX-512 (conv::Kernels::
// depthwise_block_nhwc_bf16_32). Included inside conv_kernels.inl's namespace
// by the AVX-512 build (SN_BF16_NATIVE 0: outputs rounded by integer steps)
// and by conv_kernels_avx512bf16.cpp (SN_BF16_NATIVE 1: vcvtne2ps2bf16, for
// CPUs with AVX512_BF16).
#ifndef SN_BF16_NATIVE
#define SN_BF16_NATIVE 0
#endif

/// 32 bfloat16 channels as two float32 vectors, the even channels (0, 2, ..,
/// 30) and the odd ones: a shift and a mask of the same 64 bytes, where
/// widening 16 channels took a shuffle and a shift.
struct Bf16Pair {
  vf even, odd;
};
__attribute__((always_inline)) inline Bf16Pair load_bf16_32(const uint16_t* p) {
  const __m512i v = _mm512_loadu_si512(p);
  return {_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)),
          _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))))};
}
/// The even and odd channels' values back as 32 bfloat16 in channel order.
__attribute__((always_inline)) inline void store_bf16_32(uint16_t* p, vf even, vf odd) {
#if SN_BF16_NATIVE
  // [16 even | 16 odd] rounded by the CPU (vcvtne2ps2bf16: nearest even, NaN
  // quiet, as round_bf16_high), then interleaved: 2 instructions for 32 values
  // where the integer steps took 12 (0.118 -> 0.105 ms on PP-OCR's 240-channel layer).
  const __m512i packed = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even));
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  _mm512_storeu_si512(p, _mm512_permutexvar_epi16(order, packed));
#else
  const __m512i e = _mm512_srli_epi32(round_bf16_high(even), 16);
  const __m512i o = _mm512_and_si512(round_bf16_high(odd), _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  _mm512_storeu_si512(p, _mm512_or_si512(e, o));
#endif
}

/// P output pixels of one row, every column tap inside the image. Each input
/// column a row of taps reaches is widened once and feeds every pixel whose
/// taps cover it (P*S + K - S columns for P*K products, not P*K widenings).
/// w: [tap][16 even][16 odd] floats; x0, px, py as dwb_pixels'.
template <int K, int S, int P, bool ALL_ROWS>
__attribute__((always_inline)) inline void dw32_pixels(const uint16_t* x0, int64_t row, int64_t px, int64_t py,
                                                       const bool* rv, const float* w, const VAct& act,
                                                       const float* bias, uint16_t* yp) {
  vf ae[P], ao[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) ae[p] = ao[p] = vzero();
#pragma GCC unroll 5
  for (int kh = 0; kh < K; ++kh) {
    if (!ALL_ROWS && !rv[kh]) continue;
    vf we[K], wo[K];
#pragma GCC unroll 5
    for (int kw = 0; kw < K; ++kw) {
      we[kw] = vload(w + (kh * K + kw) * 32);
      wo[kw] = vload(w + (kh * K + kw) * 32 + 16);
    }
    const uint16_t* xr = x0 + kh * row;
#pragma GCC unroll 32
    for (int j = 0; j < (P - 1) * S + K; ++j) {
      const Bf16Pair v = load_bf16_32(xr + j * px);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const int kw = j - p * S;
        if (kw >= 0 && kw < K) {
          ae[p] = vfma(v.even, we[kw], ae[p]);
          ao[p] = vfma(v.odd, wo[kw], ao[p]);
        }
      }
    }
  }
  const vf be = bias ? vload(bias) : vzero(), bo = bias ? vload(bias + 16) : vzero();
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) store_bf16_32(yp + p * py, act(vadd(ae[p], be)), act(vadd(ao[p], bo)));
}

/// One output pixel near the left or right edge: each tap's column checked.
template <int K, int S>
__attribute__((always_inline)) inline void dw32_edge(const conv::DepthwiseBlock& b, const uint16_t* xrow, int64_t px,
                                                     const bool* rv, const VAct& act, int64_t ow, uint16_t* yp) {
  vf ae = vzero(), ao = vzero();
  const int64_t iw0 = ow * S - b.pl;
#pragma GCC unroll 5
  for (int kh = 0; kh < K; ++kh) {
    if (!rv[kh]) continue;
#pragma GCC unroll 5
    for (int kw = 0; kw < K; ++kw)
      if (iw0 + kw >= 0 && iw0 + kw < b.w_in) {
        const Bf16Pair v = load_bf16_32(xrow + (kh * b.w_in + iw0 + kw) * px);
        ae = vfma(v.even, vload(b.w + (kh * K + kw) * 32), ae);
        ao = vfma(v.odd, vload(b.w + (kh * K + kw) * 32 + 16), ao);
      }
  }
  const vf be = b.bias ? vload(b.bias) : vzero(), bo = b.bias ? vload(b.bias + 16) : vzero();
  store_bf16_32(yp, act(vadd(ae, be)), act(vadd(ao, bo)));
}

template <int K, int S, bool ALL_ROWS>
__attribute__((always_inline)) inline void dw32_interior(const conv::DepthwiseBlock& b, const uint16_t* xrow,
                                                         const bool* rv, const VAct& act, int64_t lo, int64_t hi,
                                                         uint16_t* yr) {
  const int64_t px = b.px, py = b.py, row = b.w_in * px;
  auto at = [&](int64_t o) { return xrow + (o * S - b.pl) * px; };
  int64_t ow = lo;
  // 5x5: 6 pixels a run (12 sums, 10 weight vectors, the widened pair): 8
  // measured 5-8% slower (0.121-0.125 ms against 0.113-0.120 at one thread,
  // PP-OCR's 240-channel layer).
  constexpr int kRun = K == 5 ? 6 : 8;
  for (; ow + kRun <= hi; ow += kRun)
    dw32_pixels<K, S, kRun, ALL_ROWS>(at(ow), row, px, py, rv, b.w, act, b.bias, yr + ow * py);
  if (ow + 4 <= hi) {
    dw32_pixels<K, S, 4, ALL_ROWS>(at(ow), row, px, py, rv, b.w, act, b.bias, yr + ow * py);
    ow += 4;
  }
  if (ow + 2 <= hi) {
    dw32_pixels<K, S, 2, ALL_ROWS>(at(ow), row, px, py, rv, b.w, act, b.bias, yr + ow * py);
    ow += 2;
  }
  if (ow < hi) dw32_pixels<K, S, 1, ALL_ROWS>(at(ow), row, px, py, rv, b.w, act, b.bias, yr + ow * py);
}

/// conv::DepthwiseBlock over 32 bfloat16 channels in nhwc (pixels b.px / b.py
/// values apart); weights and bias in depthwise_block_nhwc_bf16_32's order.
template <int K, int S>
void depthwise_block_bf16_32(const conv::DepthwiseBlock& b, const gemm::Epilogue& ep) {
  const VAct act(ep);
  const int64_t lo = std::min<int64_t>(b.ow, (b.pl + S - 1) / S);
  const int64_t last = b.w_in - 1 + b.pl - (K - 1);
  const int64_t hi = std::max(lo, std::min<int64_t>(b.ow, last < 0 ? 0 : last / S + 1));
  for (int64_t oh = b.oh0; oh < b.oh1; ++oh) {
    const int64_t ih0 = oh * b.sh - b.pt;
    bool rv[K];
    bool all = true;
#pragma GCC unroll 5
    for (int kh = 0; kh < K; ++kh) all &= rv[kh] = ih0 + kh >= 0 && ih0 + kh < b.h;
    const uint16_t* xrow = static_cast<const uint16_t*>(b.x) + ih0 * b.w_in * b.px;  // only rows inside are read
    uint16_t* yr = static_cast<uint16_t*>(b.y) + oh * b.ow * b.py;
    for (int64_t ow = 0; ow < lo; ++ow) dw32_edge<K, S>(b, xrow, b.px, rv, act, ow, yr + ow * b.py);
    if (all) dw32_interior<K, S, true>(b, xrow, rv, act, lo, hi, yr);
    else dw32_interior<K, S, false>(b, xrow, rv, act, lo, hi, yr);
    for (int64_t ow = hi; ow < b.ow; ++ow) dw32_edge<K, S>(b, xrow, b.px, rv, act, ow, yr + ow * b.py);
  }
}
