// cpu:float32:nhwc/depthwise, cpu:float32:nchw16c/depthwise and
// cpu:float32:nchw8c/depthwise — depthwise conv2 (group = C = OC), 3x3 and
// 5x5 kernels, any stride, padding and dilation, bias, fused activation and
// the affine after it (act_scale, act_shift: PP-LCNetV3's) in the kernel.
//
// cpu:bfloat16:nhwc/depthwise: the same block kernels on bfloat16 values (the
// weights, sums and epilogue in float32), channels in whole vectors, column
// stride 1 or 2 (any row stride), no dilation: no casts around the layer
// between bfloat16 ones.
// On AVX-512 it takes 32 channels at once: 64 bytes of input are the even
// channels' floats by a shift and the odd ones' by a mask (16 channels took
// a shuffle and a shift), each input column widened once per row of taps
// for every pixel it reaches; weights and bias are packed in that even/odd
// order (16 channels left over take the 16-channel kernel).
//
// Vectors run along channels: nchw16c uses the AVX-512 kernels (V = 16),
// nchw8c the AVX2 ones (V = 8), nhwc the widest the CPU has (channel tail
// masked). Strides 1/2 and no dilation (MobileNets, PP-OCR): blocks of output
// rows of one channel vector, interior pixels several at a time unguarded,
// edge pixels checking each tap; tasks (image, channel block, row block), in
// nhwc over whole vectors, a partial last one by rows. Otherwise per output
// row: interior pixels (every tap inside the image) several at a time, border
// pixels checking each tap; tasks (image, channel block, row), or (image, row)
// for nhwc. Weights are packed once as [C/V][KH*KW][V]. One parameter, in
// nhwc on the row blocks: `split`, whether the threads take channels or rows
// (which one reads its input from its own core's cache depends on the layer
// before: the tuner measures both in the net).
#include "routines/cpu/conv_kernels.hpp"
#include "routines/cpu/f32_common.hpp"

#include "core/layer_types.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace softneuro {
namespace {

using core::Window2d;
namespace conv = cpu::conv;

const conv::Kernels* kernels_for(Layout l) {
  if (l == Layout::nchw16c) return conv::kernels_avx512();
  if (l == Layout::nchw8c) return conv::kernels_avx2();
  if (const conv::Kernels* k = conv::kernels_avx512()) return k;
  return conv::kernels_avx2();
}

/// The weights [C, 1, KH, KW] as [C / V][tap][V] (zero-padded channels): the
/// kernels' vector width and the weights' shape, never the input's size.
std::size_t packed_floats_of(const Layer& layer, int64_t v) {
  const Shape& w = layer.weight("weight").shape();
  return static_cast<std::size_t>((w[0] + v - 1) / v * w[2] * w[3] * v);
}

/// Whether the 32-channel kernel takes channel c's group (even_odd_32, a whole group of 32).
bool in_group_of_32(int64_t c, int64_t channels, bool even_odd_32) { return even_odd_32 && c / 32 * 32 + 32 <= channels; }

/// Channel c's place among the 32 of its group where in_group_of_32: the even
/// channels first, then the odd ones; else c.
int64_t packed_lane(int64_t c, int64_t channels, bool even_odd_32) {
  return in_group_of_32(c, channels, even_odd_32) ? c / 32 * 32 + c % 2 * 16 + c % 32 / 2 : c;
}

/// As packed_floats_of says; a group of 32 channels the 32-channel kernel
/// takes (even_odd_32) as [group][tap][32] in packed_lane's order.
std::shared_ptr<const PackedWeights> pack_depthwise(const Layer& layer, int64_t v, bool even_odd_32) {
  const Shape& s = layer.weight("weight").shape();
  const int64_t channels = s[0], taps = s[2] * s[3];
  const float* w = layer.weight("weight").data_as<float>();
  return cpu::pack_floats(packed_floats_of(layer, v), [&](float* packed) {
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t lane = packed_lane(c, channels, even_odd_32);
      const int64_t width = in_group_of_32(c, channels, even_odd_32) ? 32 : v;  // its group, or its vector
      for (int64_t t = 0; t < taps; ++t) packed[(lane / width * taps + t) * width + lane % width] = w[c * taps + t];
    }
  });
}

/// Whether cpu:bfloat16:nhwc/depthwise runs whole groups of 32 channels on `k`.
bool bf16_32_kernels(const conv::Kernels& k) { return k.depthwise_block_nhwc_bf16_32[0][0] != nullptr; }

/// Whether the layer runs on the row-block kernels: 3x3/5x5 taps, column
/// stride 1 or 2, no dilation (MobileNets' and PP-OCR's depthwise layers); in
/// nhwc only for 5x5 at stride 1 over 4 vectors or more (PP-OCR's 240- and
/// 480-channel layers: 0.062 ms against the rows' 0.094; a pixel of fewer
/// channels shares its cache lines between the threads' vectors: MobileNetV2's
/// 32-channel layer took 0.134 ms against the rows' 0.069; 3x3 layers and
/// stride 2 measured no better than by rows), and in bfloat16 (whole vectors:
/// supports() checks) always, its row stride any (PP-OCR's [2, 1]).
bool uses_blocks(const Window2d& g, Layout layout, bool bf16, int64_t v) {
  if (!(g.dh == 1 && g.dw == 1 && (g.sw == 1 || g.sw == 2) && (g.sh == g.sw || bf16))) return false;
  return layout != Layout::nhwc || bf16 || (g.kh == 5 && g.sh == 1 && g.c / v >= 4);
}

class PreparedDepthwise final : public PreparedRoutine {
 public:
  PreparedDepthwise(const LayerInfo& info, Layout layout, DType dtype, const conv::Kernels& k,
                    std::shared_ptr<const PackedWeights> packed, const RoutineParams& params)
      : k_(k), layout_(layout), bf16_(dtype == DType::bfloat16) {
    const Layer& layer = *info.layer;
    g_ = core::conv2_window(layer, info.input_shapes[0]);
    v_ = k.vec;
    cb_ = (g_.c + v_ - 1) / v_;
    packed_ = cpu::packed_of(packed, packed_floats_of(layer, v_), info, "cpu/depthwise");
    const bool even_odd_32 = bf16_ && bf16_32_kernels(k);
    bias_.assign(static_cast<std::size_t>(cb_ * v_), 0.0f);
    if (const Blob* b = layer.find_weight("bias"))
      for (int64_t c = 0; c < g_.c; ++c) bias_[static_cast<std::size_t>(packed_lane(c, g_.c, even_odd_32))] = b->data_as<float>()[c];
    cpu::to_epilogue(core::fused_activation(layer, true), ep_);

    // The row-block kernels (in nhwc on whole channel vectors; a last
    // partial one by rows, masked), where they apply.
    const int ki = g_.kh == 5 ? 1 : 0, si = g_.sw == 2 ? 1 : 0;
    if (uses_blocks(g_, layout_, bf16_, v_)) {
      block_fn_ = bf16_                      ? k.depthwise_block_nhwc_bf16[ki][si]
                  : layout_ == Layout::nhwc ? k.depthwise_block_nhwc
                                            : k.depthwise_block[ki][si];
      full_cb_ = layout_ == Layout::nhwc ? g_.c / v_ : cb_;
      units_ = full_cb_;
      unit_ch_ = v_;
      if (even_odd_32) {
        block32_fn_ = k.depthwise_block_nhwc_bf16_32[ki][si];
        unit_ch_ = 32;
        units_ = (g_.c + 31) / 32;
      }
      // In nhwc the threads take channel units (split 0) or rows (split 1).
      // Which reads more of its input from its own core's cache depends on
      // how the layer before split its output: in PP-OCR's hybrid path after
      // oneDNN's 1x1 layers, rows at 128 channels of 12x160 (0.044 ms against
      // 0.076), channels at 480 of 6x80 (0.072 against 0.094), so the tuner
      // measures both in the net. Untuned: rows where a pixel is not whole
      // cache lines (bfloat16, 16 channels past a multiple of 32), which would
      // share lines between the two threads' units every pixel (144 channels
      // at 56x56: 0.048-0.071 ms against 0.082-0.092), else channels.
      by_rows_ = layout_ == Layout::nhwc &&
                 routine_param(params, "split", g_.c * (bf16_ ? 2 : 4) % 64 != 0 ? 1 : 0) == 1;
      // Rows per block: whole planes, split so that the layer has at least
      // 16 tasks (every thread gets some, the last ones stay short).
      const int64_t planes = g_.n * std::max<int64_t>(1, units_), want_blocks = (16 + planes - 1) / planes;
      rows_ = std::max<int64_t>(1, (g_.oh + want_blocks - 1) / want_blocks);
    }
  }

  void run(const RunArgs& args) override {
    if (bf16_) {
      run_blocks(args.pool, static_cast<const uint16_t*>(args.inputs[0]->data()),
                 static_cast<uint16_t*>(args.outputs[0]->data()));
      return;
    }
    const float* x = args.inputs[0]->data_as<float>();
    float* y = args.outputs[0]->data_as<float>();
    if (block_fn_ && full_cb_ > 0) run_blocks(args.pool, x, y);
    // By rows what the blocks left: every channel vector, or nhwc's partial last one.
    if (full_cb_ < cb_) run_rows(args.pool, x, y, full_cb_);
  }

 private:
  /// Tasks (image, channel unit, block of rows_ output rows), or (image, block,
  /// unit) where by_rows_ (the parameter `split`, prepare()); a unit is a
  /// vector, or 32 channels (block32_fn_; 16 left over take block_fn_); in
  /// nhwc whole vectors only.
  template <class T>
  void run_blocks(ThreadPool* pool, const T* x, T* y) const {
    const bool nhwc = layout_ == Layout::nhwc;
    const int64_t v = v_, taps = g_.kh * g_.kw, blocks = (g_.oh + rows_ - 1) / rows_, items = g_.n * units_ * blocks;
    auto body = [&](int64_t b, int64_t e) {
      conv::DepthwiseBlock d;
      d.h = g_.h;
      d.w_in = g_.w;
      d.ow = g_.ow;
      d.pt = static_cast<int>(g_.pt);
      d.pl = static_cast<int>(g_.pl);
      d.sh = static_cast<int>(g_.sh);
      d.px = d.py = nhwc ? g_.c : v;
      for (int64_t it = b; it < e; ++it) {
        const int64_t rb = by_rows_ ? it / units_ % blocks : it % blocks, u = by_rows_ ? it % units_ : it / blocks % units_;
        const int64_t n = it / blocks / units_, c0 = u * unit_ch_;
        d.x = x + (nhwc ? n * g_.h * g_.w * g_.c + c0 : (n * cb_ + u) * g_.h * g_.w * v);
        d.y = y + (nhwc ? n * g_.oh * g_.ow * g_.c + c0 : (n * cb_ + u) * g_.oh * g_.ow * v);
        d.w = packed_->data() + c0 * taps;
        d.bias = bias_.data() + c0;
        d.valid = static_cast<int>(std::min<int64_t>(v, g_.c - c0));
        d.oh0 = rb * rows_;
        d.oh1 = std::min(g_.oh, d.oh0 + rows_);
        (block32_fn_ && g_.c - c0 >= 32 ? block32_fn_ : block_fn_)(d, ep_);
      }
    };
    if (pool) pool->parallel_for(items, 1, body);
    else body(0, items);
  }

  conv::DepthwiseRow row_base() const {
    conv::DepthwiseRow r;
    r.h = g_.h;
    r.w_in = g_.w;
    r.ow = g_.ow;
    r.kh = static_cast<int>(g_.kh);
    r.kw = static_cast<int>(g_.kw);
    r.sh = static_cast<int>(g_.sh);
    r.sw = static_cast<int>(g_.sw);
    r.dh = static_cast<int>(g_.dh);
    r.dw = static_cast<int>(g_.dw);
    r.pl = static_cast<int>(g_.pl);
    return r;
  }

  /// By output row: in nhwc tasks (image, row), its channel vectors from
  /// `first_cb` on (the last masked); in a blocked layout (image, channel
  /// block, row).
  void run_rows(ThreadPool* pool, const float* x, float* y, int64_t first_cb) const {
    const bool nhwc = layout_ == Layout::nhwc;
    const int64_t v = v_, taps = g_.kh * g_.kw, items = g_.n * (nhwc ? 1 : cb_) * g_.oh;
    auto body = [&](int64_t b, int64_t e) {
      conv::DepthwiseRow r = row_base();
      r.px = r.py = nhwc ? g_.c : v;
      r.rx = g_.w * r.px;
      for (int64_t it = b; it < e; ++it) {
        const int64_t oh = it % g_.oh, rest = it / g_.oh;
        const int64_t n = nhwc ? rest : rest / cb_, cb0 = nhwc ? first_cb : rest % cb_, cb1 = nhwc ? cb_ : cb0 + 1;
        r.ih0 = oh * g_.sh - g_.pt;
        for (int64_t cb = cb0; cb < cb1; ++cb) {
          r.x = x + (nhwc ? n * g_.h * g_.w * g_.c + cb * v : (n * cb_ + cb) * g_.h * g_.w * v);
          r.y = y + (nhwc ? (n * g_.oh + oh) * g_.ow * g_.c + cb * v : ((n * cb_ + cb) * g_.oh + oh) * g_.ow * v);
          r.w = packed_->data() + cb * taps * v;
          r.bias = bias_.data() + cb * v;
          r.valid = static_cast<int>(std::min<int64_t>(v, g_.c - cb * v));
          r.masked = nhwc && r.valid < v;  // (a blocked layout's padded lanes are written 0)
          k_.depthwise(r, ep_);
        }
      }
    };
    if (pool) pool->parallel_for(items, nhwc ? 1 : 4, body);
    else body(0, items);
  }

  const conv::Kernels& k_;
  Layout layout_;
  bool bf16_ = false;  ///< values in bfloat16 (nhwc, the block kernels only)
  Window2d g_{};
  int64_t v_ = 0, cb_ = 0;
  std::shared_ptr<const cpu::AlignedFloats> packed_;
  cpu::AlignedFloats bias_;
  cpu::gemm::Epilogue ep_;
  conv::DepthwiseBlockFn block_fn_ = nullptr;  ///< the row-block kernel, when it applies
  conv::DepthwiseBlockFn block32_fn_ = nullptr;  ///< bfloat16 on 32 channels (AVX-512), when it applies
  int64_t full_cb_ = 0;                        ///< channel vectors it takes (nhwc: the whole ones)
  int64_t units_ = 0, unit_ch_ = 0;            ///< its tasks' channel units, and channels per unit
  bool by_rows_ = false;                       ///< tasks in order of rows, not of units
  int64_t rows_ = 1;                           ///< output rows per block
};

template <Layout L, DType D = DType::float32>
class Depthwise final : public Routine {
 public:
  static constexpr Schema kSchema{Device::cpu, D, L};
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return "depthwise"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }

  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == kSchema)) return Support::no(fmt::format("cpu/depthwise computes in {}", kSchema.to_string()));
    if (!kernels_for(L))
      return Support::no(L == Layout::nchw16c ? "nchw16c/depthwise needs AVX-512 (F, BW, VL, DQ)"
                                              : "depthwise needs AVX2 + FMA");
    if (!info.layer || info.input_shapes.size() != 1 || info.input_shapes[0].rank() != 4)
      return Support::no("conv2 needs an input [N,C,H,W]");
    if (Support s = routines::float_weights(*info.layer, {"weight", "bias"}, "cpu/depthwise"); !s) return s;
    if (Support s = cpu::check_activation(*info.layer, true); !s) return s;
    const Window2d g = core::conv2_window(*info.layer, info.input_shapes[0]);
    if (!(g.group == g.c && g.oc == g.c)) return Support::no("not a depthwise convolution (group = C = OC)");
    if (!(g.kh == g.kw && (g.kh == 3 || g.kh == 5))) return Support::no("depthwise kernels are 3x3 or 5x5");
    if (g.oh <= 0 || g.ow <= 0) return Support::no("empty output");
    if constexpr (D == DType::bfloat16) {
      if (!(g.dh == 1 && g.dw == 1 && (g.sw == 1 || g.sw == 2)))
        return Support::no("bfloat16 depthwise: column stride 1 or 2, no dilation");
      if (g.c % kernels().vec != 0)
        return Support::no(fmt::format("bfloat16 depthwise: channels in whole vectors of {}", kernels().vec));
    }
    return Support::yes();
  }

  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams&) const override {
    return pack_depthwise(*info.layer, kernels().vec, D == DType::bfloat16 && bf16_32_kernels(kernels()));
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& info, const Schema&,
                                              const RoutineParams&) const override {
    return cpu::unpack_floats(bytes, packed_floats_of(*info.layer, kernels().vec));
  }
  /// split (nhwc, the row-block kernels): 0 the threads take channel units, 1 rows.
  std::vector<RoutineParamSpec> param_space(const LayerInfo& info, const Schema& schema) const override {
    if (L != Layout::nhwc || !supports(info, schema)) return {};
    if (!uses_blocks(core::conv2_window(*info.layer, info.input_shapes[0]), L, D == DType::bfloat16, kernels().vec))
      return {};
    return {{"split", {0, 1}}};
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams& params,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    return std::make_unique<PreparedDepthwise>(info, L, D, kernels(), std::move(packed), params);
  }

 private:
  static const conv::Kernels& kernels() {
    const conv::Kernels* k = kernels_for(L);
    if (!k) throw Error(fmt::format("{}/depthwise: the CPU lacks the ISA", kSchema.to_string()));
    return *k;
  }

};

SOFTNEURO_REGISTER_ROUTINE(Depthwise<Layout::nhwc>);
SOFTNEURO_REGISTER_ROUTINE(Depthwise<Layout::nchw16c>);
SOFTNEURO_REGISTER_ROUTINE(Depthwise<Layout::nchw8c>);
// Between bfloat16 layers (AMX's), no casts around a float32 depthwise layer:
// PP-OCR's hybrid path spent 0.48 of 3.1 ms in them.
using DepthwiseBf16 = Depthwise<Layout::nhwc, DType::bfloat16>;
SOFTNEURO_REGISTER_ROUTINE(DepthwiseBf16);

}  // namespace
}  // namespace softneuro
