// Adapt routines between float32 and qint8 on the CPU, in nchw and nhwc:
//   "<cpu:qint8[:nhwc]>/quantize"     float32 -> qint8   q = clamp(round(x / scale) + zp, -128, 127)
//   "<cpu[:float32:nhwc]>/dequantize" qint8 -> float32   x = scale * (q - zp)
//   "<cpu:qint8[:nhwc]>/reorder"      qint8 nchw <-> nhwc (the blob keeps its quantisation)
// Each converts the layout in the same pass when the two schemas' layouts
// differ. The quantisation is the blob's calibrated one (per tensor), from
// LayerInfo (input_quant, which the executor sets to the blob's); a blob
// without calibration is refused. Rounding is to nearest even (x * (1/scale)
// then the CPU's rounding), identical in the AVX2 and scalar paths.
//
// Blobs of rank >= 3 are seen as [N, C, S] (S: product of the spatial dims),
// as the layout adapts do; for rank <= 2 the layouts coincide.
#include "core/cpu_features.hpp"
#include <softneuro/routine.hpp>

#include <fmt/format.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

namespace softneuro {
namespace {

#if defined(__x86_64__)
bool cpu_has_avx2() {
  return core::cpu_features().avx2_fma();
}
#endif

struct Nc {
  int64_t n = 1, c = 1, s = 1;
  explicit Nc(const Shape& shape) {
    if (shape.rank() < 2) {
      s = shape.numel();
      return;
    }
    n = shape[0];
    c = shape[1];
    for (int i = 2; i < shape.rank(); ++i) s *= shape[i];
  }
};

// ---------------------------------------------------------------------------
// Element kernels. The scalar ones define the result; the AVX2 ones match them bit for bit.

inline int8_t quantize_one(float x, float inv, int32_t zp) {
  float v = x * inv;
  if (!(v >= -65536.0f)) v = -65536.0f;  // NaN and -inf too
  if (v > 65536.0f) v = 65536.0f;
  int32_t q = static_cast<int32_t>(std::nearbyint(v)) + zp;
  return static_cast<int8_t>(std::clamp(q, -128, 127));
}
inline float dequantize_one(int8_t q, float scale, int32_t zp) {
  return scale * static_cast<float>(static_cast<int32_t>(q) - zp);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"), always_inline)) inline __m256i quantize8(const float* p, __m256 vinv, __m256i vzp) {
  __m256 v = _mm256_mul_ps(_mm256_loadu_ps(p), vinv);
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-65536.0f)), _mm256_set1_ps(65536.0f));  // maxps(NaN, lo) = lo, like the scalar path
  return _mm256_add_epi32(_mm256_cvtps_epi32(v), vzp);
}

__attribute__((target("avx2,fma"))) void quantize_avx2(const float* x, int8_t* y, int64_t n, float inv, int32_t zp) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i vzp = _mm256_set1_epi32(zp);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a = quantize8(x + i, vinv, vzp), b = quantize8(x + i + 8, vinv, vzp), c = quantize8(x + i + 16, vinv, vzp),
            d = quantize8(x + i + 24, vinv, vzp);
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);  // per 128-bit lane
    __m256i r = _mm256_packs_epi16(ab, cd);
    r = _mm256_permutevar8x32_epi32(r, perm);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), r);
  }
  for (; i < n; ++i) y[i] = quantize_one(x[i], inv, zp);
}

__attribute__((target("avx2,fma"))) void dequantize_avx2(const int8_t* x, float* y, int64_t n, float scale, int32_t zp) {
  const __m256 vs = _mm256_set1_ps(scale);
  const __m256i vzp = _mm256_set1_epi32(zp);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + i));
    __m256i v = _mm256_sub_epi32(_mm256_cvtepi8_epi32(b), vzp);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(v)));
  }
  for (; i < n; ++i) y[i] = dequantize_one(x[i], scale, zp);
}

/// The 8x8 float transpose in registers: o[j][i] = r[i][j].
__attribute__((target("avx2,fma"), always_inline)) inline void transpose8x8(const __m256* r, __m256* o) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  o[0] = _mm256_permute2f128_ps(u0, u4, 0x20), o[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  o[2] = _mm256_permute2f128_ps(u2, u6, 0x20), o[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  o[4] = _mm256_permute2f128_ps(u0, u4, 0x31), o[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  o[6] = _mm256_permute2f128_ps(u2, u6, 0x31), o[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/// Dequantises positions [p0, p1) of one image's int8 nhwc values x (C channels, S positions) into float
/// nchw y: blocks of 8 positions x 8 channels converted in registers and transposed there (8x8 floats),
/// the edges one value at a time. The scalar gather into a tile it replaces took 3 times the dequantisation.
__attribute__((target("avx2,fma"))) void dequantize_to_nchw_avx2(const int8_t* x, float* y, int64_t C, int64_t S,
                                                                int64_t p0, int64_t p1, float scale, int32_t zp) {
  const __m256 vs = _mm256_set1_ps(scale);
  const __m256i vzp = _mm256_set1_epi32(zp);
  const int64_t c8 = C / 8 * 8;
  int64_t p = p0;
  for (; p + 8 <= p1; p += 8) {
    for (int64_t c = 0; c < c8; c += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {  // row i: position p + i, channels c..c+7
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + (p + i) * C + c));
        r[i] = _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepi8_epi32(b), vzp)));
      }
      __m256 o[8];  // rows become channels
      transpose8x8(r, o);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(y + (c + j) * S + p, o[j]);
    }
    for (int64_t c = c8; c < C; ++c)
      for (int64_t i = 0; i < 8; ++i) y[c * S + p + i] = dequantize_one(x[(p + i) * C + c], scale, zp);
  }
  for (; p < p1; ++p)
    for (int64_t c = 0; c < C; ++c) y[c * S + p] = dequantize_one(x[p * C + c], scale, zp);
}

/// The other way: positions [p0, p1) of one image's float nchw values x quantised into int8 nhwc y,
/// blocks of 8 channels x 8 positions transposed in registers, then quantised as quantize8 does.
__attribute__((target("avx2,fma"))) void quantize_to_nhwc_avx2(const float* x, int8_t* y, int64_t C, int64_t S,
                                                              int64_t p0, int64_t p1, float inv, int32_t zp) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i vzp = _mm256_set1_epi32(zp);
  const int64_t c8 = C / 8 * 8;
  int64_t p = p0;
  for (; p + 8 <= p1; p += 8) {
    for (int64_t c = 0; c < c8; c += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + (c + i) * S + p);  // row i: channel c + i
      __m256 t[8];
      transpose8x8(r, t);
      alignas(32) float o[8][8];  // o[j]: position p + j, channels c..c+7
      for (int j = 0; j < 8; ++j) _mm256_store_ps(o[j], t[j]);
      for (int j = 0; j < 8; j += 2) {  // two positions' 8 channels a pack
        const __m256i a = quantize8(o[j], vinv, vzp), b = quantize8(o[j + 1], vinv, vzp);
        const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);  // a0..7 b0..7 as int16
        const __m128i q = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(y + (p + j) * C + c), q);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(y + (p + j + 1) * C + c), _mm_unpackhi_epi64(q, q));
      }
    }
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t c = c8; c < C; ++c) y[(p + i) * C + c] = quantize_one(x[c * S + p + i], inv, zp);
  }
  for (; p < p1; ++p)
    for (int64_t c = 0; c < C; ++c) y[p * C + c] = quantize_one(x[c * S + p], inv, zp);
}

#endif

void quantize_run(const float* x, int8_t* y, int64_t n, float inv, int32_t zp) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return quantize_avx2(x, y, n, inv, zp);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = quantize_one(x[i], inv, zp);
}
void dequantize_run(const int8_t* x, float* y, int64_t n, float scale, int32_t zp) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return dequantize_avx2(x, y, n, scale, zp);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = dequantize_one(x[i], scale, zp);
}

// ---------------------------------------------------------------------------

enum class Op { quantize, dequantize, reorder };

class Convert final : public PreparedRoutine {
 public:
  Convert(Op op, const Shape& shape, Layout from, Layout to, float scale, int32_t zp)
      : op_(op), g_(shape), from_(from), to_(to), scale_(scale), inv_(1.0f / scale), zp_(zp) {
    if (shape.rank() < 3) from_ = to_ = Layout::nchw;  // the same memory order
  }
  void run(const RunArgs& a) override {
    const void* x = a.inputs[0]->data();
    void* y = a.outputs[0]->data();
    const int64_t per = g_.c * g_.s, total = g_.n * per;
    if (from_ == to_) {
      // Same layout: a flat elementwise pass in chunks.
      a.pool->parallel_for(total, 16384, [&](int64_t b, int64_t e) { flat(x, y, b, e - b); });
      return;
    }
    // nchw <-> nhwc: per image, tiles of 32 channels x 32 positions, gathered
    // transposed into a small stack tile, then converted row by row with the
    // vector kernels (a scalar convert-while-transposing ran at ~1 GB/s).
    switch (op_) {
      case Op::quantize:
#if defined(__x86_64__)
        if (to_ == Layout::nhwc && g_.c >= 8 && cpu_has_avx2())
          return position_blocks(a, [&](int64_t off, int64_t p0, int64_t p1) {
            quantize_to_nhwc_avx2(static_cast<const float*>(x) + off, static_cast<int8_t*>(y) + off, g_.c, g_.s, p0, p1, inv_, zp_);
          });
#endif
        return transpose<float, int8_t>(a, static_cast<const float*>(x), static_cast<int8_t*>(y));
      case Op::dequantize:
#if defined(__x86_64__)
        if (to_ != Layout::nhwc && g_.c >= 8 && cpu_has_avx2())
          return position_blocks(a, [&](int64_t off, int64_t p0, int64_t p1) {
            dequantize_to_nchw_avx2(static_cast<const int8_t*>(x) + off, static_cast<float*>(y) + off, g_.c, g_.s, p0, p1, scale_, zp_);
          });
#endif
        return transpose<int8_t, float>(a, static_cast<const int8_t*>(x), static_cast<float*>(y));
      case Op::reorder: return transpose<int8_t, int8_t>(a, static_cast<const int8_t*>(x), static_cast<int8_t*>(y));
    }
  }

 private:
  void flat(const void* x, void* y, int64_t off, int64_t n) const {
    switch (op_) {
      case Op::quantize: quantize_run(static_cast<const float*>(x) + off, static_cast<int8_t*>(y) + off, n, inv_, zp_); break;
      case Op::dequantize: dequantize_run(static_cast<const int8_t*>(x) + off, static_cast<float*>(y) + off, n, scale_, zp_); break;
      case Op::reorder: std::memcpy(static_cast<int8_t*>(y) + off, static_cast<const int8_t*>(x) + off, static_cast<std::size_t>(n)); break;
    }
  }
  /// fn(offset of the image's values, p0, p1) over blocks of 256 positions of every image, in parallel.
  template <class F>
  void position_blocks(const RunArgs& a, F&& fn) const {
    const int64_t per_image = (g_.s + 255) / 256;
    a.pool->parallel_for(g_.n * per_image, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t img = t / per_image, p0 = t % per_image * 256;
        fn(img * g_.c * g_.s, p0, std::min(g_.s, p0 + 256));
      }
    });
  }
  template <class In, class Out>
  void transpose(const RunArgs& a, const In* x, Out* y) const {
    constexpr int64_t T = 32;
    const int64_t C = g_.c, S = g_.s, ct = (C + T - 1) / T, st = (S + T - 1) / T;
    const bool to_nhwc = to_ == Layout::nhwc;
    if (C <= kFewChannels) return transpose_few(a, x, y);
    a.pool->parallel_for(g_.n * st, 1, [&](int64_t b, int64_t e) {
      alignas(64) In tile[T * T];
      for (int64_t t = b; t < e; ++t) {
        const int64_t img = t / st, s0 = (t % st) * T, sw = std::min(S, s0 + T) - s0;
        const In* xi = x + img * C * S;
        Out* yi = y + img * C * S;
        for (int64_t cb = 0; cb < ct; ++cb) {
          const int64_t c0 = cb * T, cw = std::min(C, c0 + T) - c0;
          if (to_nhwc) {
            // rows: positions; each row holds cw channels, contiguous in y.
            for (int64_t c = 0; c < cw; ++c)
              for (int64_t p = 0; p < sw; ++p) tile[p * T + c] = xi[(c0 + c) * S + s0 + p];
            for (int64_t p = 0; p < sw; ++p) flat(tile + p * T, yi + (s0 + p) * C + c0, 0, cw);
          } else {
            // rows: channels; each row holds sw positions, contiguous in y.
            for (int64_t p = 0; p < sw; ++p)
              for (int64_t c = 0; c < cw; ++c) tile[c * T + p] = xi[(s0 + p) * C + c0 + c];
            for (int64_t c = 0; c < cw; ++c) flat(tile + c * T, yi + (c0 + c) * S + s0, 0, sw);
          }
        }
      }
    });
  }
  /// Few channels (an image's 3): each channel's run of positions converted
  /// with the vector kernels, then interleaved (tiles of 32 x 32 converted 3
  /// values per call: a 1x3x224x224 image took 0.57 ms, the convert 0.05).
  static constexpr int64_t kFewChannels = 8;
  template <class In, class Out>
  void transpose_few(const RunArgs& a, const In* x, Out* y) const {
    constexpr int64_t P = 512;
    const int64_t C = g_.c, S = g_.s, st = (S + P - 1) / P;
    const bool to_nhwc = to_ == Layout::nhwc;
    a.pool->parallel_for(g_.n * st, 1, [&](int64_t b, int64_t e) {
      alignas(64) In in_tile[kFewChannels * P];
      alignas(64) Out out_tile[kFewChannels * P];
      for (int64_t t = b; t < e; ++t) {
        const int64_t img = t / st, s0 = (t % st) * P, sw = std::min(S, s0 + P) - s0;
        const In* xi = x + img * C * S;
        Out* yi = y + img * C * S;
        if (to_nhwc) {
          for (int64_t c = 0; c < C; ++c) flat(xi + c * S + s0, out_tile + c * P, 0, sw);
          Out* yo = yi + s0 * C;
          if (C == 3) {  // an image: the channel count known to the compiler
            for (int64_t p = 0; p < sw; ++p)
              yo[3 * p] = out_tile[p], yo[3 * p + 1] = out_tile[P + p], yo[3 * p + 2] = out_tile[2 * P + p];
          } else {
            for (int64_t p = 0; p < sw; ++p)
              for (int64_t c = 0; c < C; ++c) yo[p * C + c] = out_tile[c * P + p];
          }
        } else {
          for (int64_t p = 0; p < sw; ++p)
            for (int64_t c = 0; c < C; ++c) in_tile[c * P + p] = xi[(s0 + p) * C + c];
          for (int64_t c = 0; c < C; ++c) flat(in_tile + c * P, yi + c * S + s0, 0, sw);
        }
      }
    });
  }
  Op op_;
  Nc g_;
  Layout from_, to_;
  float scale_, inv_;
  int32_t zp_;
};

bool plain_layout(Layout l) { return l == Layout::nchw || l == Layout::nhwc; }

/// The blob's per-tensor quantisation, or why it cannot be used.
Support blob_quant(const LayerInfo& info, float* scale, int32_t* zp) {
  const QuantParams* q = !info.input_quant.empty() && !info.input_quant[0].empty() ? &info.input_quant[0]
                         : !info.output_quant.empty() && !info.output_quant[0].empty() ? &info.output_quant[0]
                                                                                         : nullptr;
  if (!q) return Support::no("not calibrated: run calibration first");
  if (q->scales.size() != 1 || q->axis != -1) return Support::no("per-channel quantisation of activations is not supported");
  if (!(q->scales[0] > 0) || !std::isfinite(q->scales[0])) return Support::no("the blob's scale is not a positive number");
  *scale = q->scales[0];
  *zp = q->zero_points.empty() ? 0 : q->zero_points[0];
  if (*zp < -128 || *zp > 127) return Support::no(fmt::format("zero point {} is outside int8", *zp));
  return Support::yes();
}

template <Op kOp>
class QuantAdapt final : public Routine {
  static constexpr DType kFrom = kOp == Op::quantize ? DType::float32 : DType::qint8;
  static constexpr DType kTo = kOp == Op::dequantize ? DType::float32 : DType::qint8;

 public:
  std::string_view layer_type() const override { return "adapt"; }
  std::string_view algorithm() const override {
    return kOp == Op::quantize ? "quantize" : kOp == Op::dequantize ? "dequantize" : "reorder";
  }
  std::vector<Schema> schemas() const override {
    return {Schema{Device::cpu, kTo, Layout::nchw}, Schema{Device::cpu, kTo, Layout::nhwc}};
  }
  Support supports(const LayerInfo& info, const Schema& to) const override {
    Schema from = Schema::parse(info.layer->get_string("from"));
    if (from.device != Device::cpu || from.dtype != kFrom || !plain_layout(from.layout))
      return Support::no(fmt::format("converts from {} in nchw or nhwc on the CPU, not from {}", to_string(kFrom),
                                     from.to_string()));
    if (to.device != Device::cpu || to.dtype != kTo || !plain_layout(to.layout))
      return Support::no(fmt::format("converts to {} in nchw or nhwc", to_string(kTo)));
    if (kOp == Op::reorder && from.layout == to.layout) return Support::no("nothing to convert");
    float scale;
    int32_t zp;
    if (kOp != Op::reorder) {
      Support q = blob_quant(info, &scale, &zp);
      if (!q) return q;
    }
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& to, const RoutineParams&) const override {
    Support ok = supports(info, to);
    if (!ok) throw Error(fmt::format("{} cannot convert: {}", make_descriptor(to, algorithm()), ok.reason));
    float scale = 1;
    int32_t zp = 0;
    if (kOp != Op::reorder) blob_quant(info, &scale, &zp);
    return std::make_unique<Convert>(kOp, info.input_shapes.at(0), Schema::parse(info.layer->get_string("from")).layout,
                                     to.layout, scale, zp);
  }
};

SOFTNEURO_REGISTER_ROUTINE(QuantAdapt<Op::quantize>);
SOFTNEURO_REGISTER_ROUTINE(QuantAdapt<Op::dequantize>);
SOFTNEURO_REGISTER_ROUTINE(QuantAdapt<Op::reorder>);

}  // namespace
}  // namespace softneuro
