// Adapt routines that change a float32 blob's layout on the CPU:
// nchw <-> nhwc <-> nchw8c <-> nchw16c, any pair in one pass; and float32
// nchw to bfloat16 nhwc in one pass ("cpu:bfloat16:nhwc/reorder", AVX-512
// BW), the first step of a bfloat16 CNN: the reorder and the cast it
// replaces (a chain) wrote and read the float32 nhwc image between them
// (MobileNetV2's input: 0.056 ms).
//
// An adapt is a routine of layer type "adapt" whose layer carries the schemas
// `from` and `to`; its descriptor is the target schema + "/reorder", e.g.
// "cpu:float32:nchw8c/reorder". The executor inserts one on every edge whose
// producer and consumer schemas differ.
//
// Blobs of rank >= 2 are seen as [N, C, S] with S the product of the spatial
// dims; blocked layouts pad C up to the block and keep the padding zero.
#include "adapt/cast.hpp"
#include "core/cpu_features.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#if defined(__SSE__) || defined(_M_X64)
#include <xmmintrin.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 warns about the undefined vectors inside its own AVX-512 intrinsics (GCC PR 105593).
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace softneuro {
namespace {

const Layout kLayouts[] = {Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c};

// Offset of logical element (n, c, s) in a blob of [N, C, S] in `layout`.
struct Addressing {
  Layout layout;
  int64_t C, S, block, cb;  // cb: channel blocks
  Addressing(Layout l, int64_t c, int64_t s) : layout(l), C(c), S(s), block(channel_block(l)), cb(block ? (c + block - 1) / block : 0) {}
  int64_t offset(int64_t n, int64_t c, int64_t s) const {
    switch (layout) {
      case Layout::nchw: return (n * C + c) * S + s;
      case Layout::nhwc: return (n * S + s) * C + c;
      default: return ((n * cb + c / block) * S + s) * block + c % block;
    }
  }
  int64_t per_image() const { return block ? cb * block * S : C * S; }
};

// y[c * ys + r] = x[r * xs + c] for rows x cols values: a channel block's
// rows to its panel of positions x lanes, or back. 4x4 transposes in
// registers where SSE is: a value at a time, nchw -> nchw8c ran at 1 GB/s
// (ResNet50's first activation 4.7 ms on a Zen 1), a tenth of a plain
// transpose's rate.
void transpose(const float* x, int64_t xs, float* y, int64_t ys, int64_t rows, int64_t cols) {
  int64_t c = 0;
#if defined(__SSE__) || defined(_M_X64)
  for (; c + 4 <= cols; c += 4) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      __m128 r0 = _mm_loadu_ps(x + r * xs + c), r1 = _mm_loadu_ps(x + (r + 1) * xs + c);
      __m128 r2 = _mm_loadu_ps(x + (r + 2) * xs + c), r3 = _mm_loadu_ps(x + (r + 3) * xs + c);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(y + c * ys + r, r0);
      _mm_storeu_ps(y + (c + 1) * ys + r, r1);
      _mm_storeu_ps(y + (c + 2) * ys + r, r2);
      _mm_storeu_ps(y + (c + 3) * ys + r, r3);
    }
    for (int64_t q = c; q < c + 4; ++q)
      for (int64_t k = r; k < rows; ++k) y[q * ys + k] = x[k * xs + q];
  }
#endif
  for (; c < cols; ++c)
    for (int64_t k = 0; k < rows; ++k) y[c * ys + k] = x[k * xs + c];
}

/// nchw -> nhwc of float32 [N, C, S] through a stack tile of 32 positions x
/// 32 channels per task, so that both sides are read and written in rows:
/// store(row, out_offset, count) writes one tile row (count channels of one
/// position, at element offset out_offset of the nhwc output).
template <class Store>
void tiles_to_nhwc(ThreadPool* pool, const float* x, int64_t n, int64_t c, int64_t s, Store store) {
  constexpr int64_t T = 32;
  const int64_t stiles = (s + T - 1) / T;
  pool->parallel_for(n * stiles, 1, [&](int64_t b, int64_t e) {
    alignas(64) float tile[T * T];
    for (int64_t t = b; t < e; ++t) {
      const int64_t img = t / stiles, s0 = (t % stiles) * T, sw = std::min(s, s0 + T) - s0;
      const float* xi = x + img * c * s;
      for (int64_t c0 = 0; c0 < c; c0 += T) {
        const int64_t cw = std::min(c, c0 + T) - c0;
        for (int64_t ch = 0; ch < cw; ++ch)
          for (int64_t p = 0; p < sw; ++p) tile[p * T + ch] = xi[(c0 + ch) * s + s0 + p];
        for (int64_t p = 0; p < sw; ++p) store(tile + p * T, (img * s + s0 + p) * c + c0, cw);
      }
    }
  });
}

#if defined(__x86_64__)
/// Pixels [s0, s1) of one image [3, S] float32 -> [S, 3] bfloat16: 16 pixels
/// a step, each channel converted as the cast adapt converts it, the three
/// interleaved by one two-source word permute per 32 outputs.
__attribute__((target("avx512f,avx512bw"))) void image3_to_bf16_nhwc(const float* x, int64_t s, uint16_t* y, int64_t s0,
                                                                    int64_t s1) {
  // Output word j (pixel j / 3, channel j % 3) from word (j % 3) * 16 + j / 3
  // of [channel 0 | channel 1 | channel 2] (the third in the second source).
  struct alignas(64) Index {
    uint16_t w[64] = {};
    constexpr Index() {
      for (int j = 0; j < 48; ++j) w[j] = static_cast<uint16_t>((j % 3) * 16 + j / 3);
    }
  };
  static constexpr Index index;
  const __m512i idx_lo = _mm512_load_si512(index.w), idx_hi = _mm512_load_si512(index.w + 32);
  int64_t p = s0;
  for (; p + 16 <= s1; p += 16) {
    const __m256i c0 = adapt::f32x16_to_bf16(_mm512_loadu_si512(x + p));
    const __m256i c1 = adapt::f32x16_to_bf16(_mm512_loadu_si512(x + s + p));
    const __m256i c2 = adapt::f32x16_to_bf16(_mm512_loadu_si512(x + 2 * s + p));
    const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1), b = _mm512_castsi256_si512(c2);
    _mm512_storeu_si512(y + 3 * p, _mm512_permutex2var_epi16(a, idx_lo, b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + 3 * p + 32),
                        _mm512_castsi512_si256(_mm512_permutex2var_epi16(a, idx_hi, b)));
  }
  for (; p < s1; ++p)
    for (int64_t ch = 0; ch < 3; ++ch) y[3 * p + ch] = adapt::f32_to_bf16(x[ch * s + p]);
}
#endif

/// Whether this CPU runs image3_to_bf16_nhwc.
bool fused_image_cast() {
#if defined(__x86_64__)
  return core::cpu_features().avx512f && core::cpu_features().avx512bw && core::cpu_features().avx512vl;
#else
  return false;
#endif
}

class Reorder final : public PreparedRoutine {
 public:
  Reorder(const Shape& shape, Layout from, Layout to, DType to_dtype = DType::float32) : to_dtype_(to_dtype) {
    n_ = shape.rank() >= 1 ? shape[0] : 1;
    c_ = shape.rank() >= 2 ? shape[1] : 1;
    s_ = 1;
    for (int i = 2; i < shape.rank(); ++i) s_ *= shape[i];
    if (shape.rank() < 2) { n_ = 1; c_ = 1; s_ = shape.numel(); }
    from_ = from;
    to_ = to;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    if (to_dtype_ == DType::bfloat16) return run_image_to_bf16(a, x);
    float* y = a.outputs[0]->data_as<float>();
    const Addressing src(from_, c_, s_), dst(to_, c_, s_);
    if ((src.block == 0) != (dst.block == 0) && c_ > 1) {
      // Blocked <-> nchw or nhwc.
      const Addressing& blocked = src.block ? src : dst;
      const int64_t blk = blocked.block, cb = blocked.cb, s = s_, c = c_;
      const bool to_blocked = dst.block != 0;
      if (from_ == Layout::nchw || to_ == Layout::nchw) {
        // A task per (image, channel block, run of positions), reading or
        // writing the block's rows as streams (a tile across every channel
        // touched a page per channel row: TLB misses).
        constexpr int64_t kRun = 256;
        const int64_t runs = (s + kRun - 1) / kRun;
        a.pool->parallel_for(n_ * cb * runs, 1, [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t) {
            const int64_t img = t / (cb * runs), k = t / runs % cb, s0 = t % runs * kRun, len = std::min(s, s0 + kRun) - s0;
            const int64_t lanes = std::min(blk, c - k * blk);
            const int64_t plain = (img * c + k * blk) * s + s0, panel = ((img * cb + k) * s + s0) * blk;
            if (to_blocked) {
              transpose(x + plain, s, y + panel, blk, lanes, len);
              if (lanes < blk)  // the last block's padding lanes
                for (int64_t p = 0; p < len; ++p) std::fill(y + panel + p * blk + lanes, y + panel + (p + 1) * blk, 0.0f);
            } else {
              transpose(x + panel, blk, y + plain, s, len, lanes);
            }
          }
        });
        return;
      }
      // nhwc: each position's channels of a block are contiguous on both
      // sides; a task per (image, run of positions), block after block.
      constexpr int64_t kRun = 16;
      const int64_t runs = (s + kRun - 1) / kRun;
      a.pool->parallel_for(n_ * runs, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t img = t / runs, s0 = t % runs * kRun, s1 = std::min(s, s0 + kRun);
          for (int64_t k = 0; k < cb; ++k) {
            const int64_t lanes = std::min(blk, c - k * blk);
            const std::size_t bytes = static_cast<std::size_t>(lanes) * sizeof(float);
            for (int64_t p = s0; p < s1; ++p) {
              const int64_t at = (img * s + p) * c + k * blk, panel = ((img * cb + k) * s + p) * blk;
              if (to_blocked) {
                std::memcpy(y + panel, x + at, bytes);
                std::fill(y + panel + lanes, y + panel + blk, 0.0f);
              } else {
                std::memcpy(y + at, x + panel, bytes);
              }
            }
          }
        }
      });
      return;
    }
    if (dst.block) std::memset(y, 0, static_cast<std::size_t>(n_ * dst.per_image()) * sizeof(float));  // zero the padding
    // Tiles of kTileS positions x kTileC channels, so that both the reads and
    // the strided writes of a transpose stay in L1 (a pass over whole channels
    // wrote nhwc at 0.5 GB/s: every store touched a line evicted since the last
    // channel). Parallel over (image, position tile).
    constexpr int64_t kTileS = 32, kTileC = 64;
    const int64_t n = n_, c = c_, s = s_, stiles = (s + kTileS - 1) / kTileS;
    const bool plain = (from_ == Layout::nchw && to_ == Layout::nhwc) || (from_ == Layout::nhwc && to_ == Layout::nchw);
    if (plain && s > 1 && c > 1 && c <= 8) {
      // A few channels (an RGB image): each position's channels written or
      // read together, runs of 512 positions a task (a 32x32 tile moved 12
      // bytes per memcpy: an NHWC image of 192x192x3 took 50 us).
      constexpr int64_t R = 512;
      const int64_t runs = (s + R - 1) / R;
      const bool to_nhwc = to_ == Layout::nhwc;
      a.pool->parallel_for(n * runs, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t img = t / runs, s0 = (t % runs) * R, s1 = std::min(s, s0 + R);
          const float* xi = x + img * c * s;
          float* yi = y + img * c * s;
          if (to_nhwc)
            for (int64_t p = s0; p < s1; ++p)
              for (int64_t ch = 0; ch < c; ++ch) yi[p * c + ch] = xi[ch * s + p];
          else
            for (int64_t ch = 0; ch < c; ++ch)
              for (int64_t p = s0; p < s1; ++p) yi[ch * s + p] = xi[p * c + ch];
        }
      });
      return;
    }
    if (plain && s > 1 && c > 1) {
      // nchw <-> nhwc: a transpose per image of [C, S] <-> [S, C] through a
      // stack tile, so that both sides are read and written in rows.
      if (to_ == Layout::nhwc) {
        tiles_to_nhwc(a.pool, x, n, c, s, [y](const float* row, int64_t at, int64_t count) {
          std::memcpy(y + at, row, static_cast<std::size_t>(count) * sizeof(float));
        });
        return;
      }
      constexpr int64_t T = 32;
      a.pool->parallel_for(n * stiles, 1, [&](int64_t b, int64_t e) {
        alignas(64) float tile[T * T];
        for (int64_t t = b; t < e; ++t) {
          const int64_t img = t / stiles, s0 = (t % stiles) * T, sw = std::min(s, s0 + T) - s0;
          const float* xi = x + img * c * s;
          float* yi = y + img * c * s;
          for (int64_t c0 = 0; c0 < c; c0 += T) {
            const int64_t cw = std::min(c, c0 + T) - c0;
            for (int64_t p = 0; p < sw; ++p)
              for (int64_t ch = 0; ch < cw; ++ch) tile[ch * T + p] = xi[(s0 + p) * c + c0 + ch];
            for (int64_t ch = 0; ch < cw; ++ch)
              std::memcpy(yi + (c0 + ch) * s + s0, tile + ch * T, static_cast<std::size_t>(sw) * sizeof(float));
          }
        }
      });
      return;
    }
    a.pool->parallel_for(n * stiles, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t img = t / stiles, s0 = (t % stiles) * kTileS, len = std::min(s, s0 + kTileS) - s0;
        for (int64_t c0 = 0; c0 < c; c0 += kTileC) {
          const int64_t c1 = std::min(c, c0 + kTileC);
          for (int64_t ch = c0; ch < c1; ++ch) {
            const int64_t si = src.offset(img, ch, s0), di = dst.offset(img, ch, s0);
            const int64_t sstep = src.offset(img, ch, s0 + 1) - si, dstep = dst.offset(img, ch, s0 + 1) - di;
            if (sstep == 1 && dstep == 1) {
              std::memcpy(y + di, x + si, static_cast<std::size_t>(len) * sizeof(float));
            } else {
              for (int64_t k = 0; k < len; ++k) y[di + k * dstep] = x[si + k * sstep];
            }
          }
        }
      }
    });
  }

 private:
  /// float32 nchw -> bfloat16 nhwc (where LayoutAdapt::supports found AVX-512 BW).
  void run_image_to_bf16(const RunArgs& a, const float* x) const {
#if defined(__x86_64__)
    auto* y = a.outputs[0]->data_as<uint16_t>();
    const int64_t n = n_, c = c_, s = s_;
    if (c == 3) {  // an RGB image: runs of 512 pixels a task
      constexpr int64_t R = 512;
      const int64_t runs = (s + R - 1) / R;
      a.pool->parallel_for(n * runs, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t img = t / runs, s0 = (t % runs) * R, s1 = std::min(s, s0 + R);
          image3_to_bf16_nhwc(x + img * 3 * s, s, y + img * 3 * s, s0, s1);
        }
      });
      return;
    }
    // Any other channel count: the float32 reorder's tiles, each row converted as it is stored.
    tiles_to_nhwc(a.pool, x, n, c, s, [y](const float* row, int64_t at, int64_t count) {
      adapt::cast_values(DType::float32, DType::bfloat16, row, y + at, count);
    });
#else
    (void)a, (void)x;
    throw Error("cpu:bfloat16:nhwc/reorder runs on x86-64 with AVX-512 BW only");
#endif
  }

  int64_t n_, c_, s_;
  Layout from_, to_;
  DType to_dtype_;
};

class LayoutAdapt final : public Routine {
 public:
  std::string_view layer_type() const override { return "adapt"; }
  std::string_view algorithm() const override { return "reorder"; }
  std::vector<Schema> schemas() const override {
    std::vector<Schema> out;
    for (Layout l : kLayouts) out.push_back(Schema{Device::cpu, DType::float32, l});
    out.push_back(Schema{Device::cpu, DType::bfloat16, Layout::nhwc});
    return out;
  }
  Support supports(const LayerInfo& info, const Schema& to) const override {
    Schema from = Schema::parse(info.layer->get_string("from"));
    if (from.device != Device::cpu || from.dtype != DType::float32)
      return Support::no(fmt::format("converts float32 CPU layouts only, not from {}", from.to_string()));
    // (What supports reads of the blob is its rank at most: the chain of adapts caches its answers by it.)
    if (to.dtype == DType::bfloat16) {
      if (from.layout != Layout::nchw) return Support::no("to bfloat16: from float32 nchw only (else a reorder and a cast)");
      if (!fused_image_cast()) return Support::no("to bfloat16: needs AVX-512 BW");
      return Support::yes();
    }
    if (from.layout == to.layout) return Support::no("nothing to convert");
    const Shape& s = info.input_shapes.at(0);
    if ((channel_block(from.layout) || channel_block(to.layout)) && s.rank() < 2)
      return Support::no(fmt::format("blocked layouts need a channel dim; shape {}", s.to_string()));
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& to, const RoutineParams&) const override {
    const Support ok = supports(info, to);
    if (!ok) throw Error(fmt::format("{} cannot convert: {}", make_descriptor(to, "reorder"), ok.reason));
    return std::make_unique<Reorder>(info.input_shapes.at(0), Schema::parse(info.layer->get_string("from")).layout, to.layout,
                                     to.dtype);
  }
};

SOFTNEURO_REGISTER_ROUTINE(LayoutAdapt);

}  // namespace
}  // namespace softneuro
