// cpu:float32:nhwc/pixel_shuffle — a transposed convolution whose kernel equals
// its stride (no padding, dilation, groups or output_padding): each input pixel
// writes its own kh x kw patch of outputs, so the layer is a 1x1 convolution to
// OC*kh*kw channels followed by a pixel shuffle (depth to space). Segmentation
// decoders (U-Net) and PP-OCRv4's detector head upsample this way.
//
// Channels last, for each input row y and kernel row i, output row sh*y + i is
//   C[x, (j, oc)] = X_y[x, c] · B_i[c, (j, oc)]     (B_i[c, (j, oc)] = W[c, oc, i, j])
// in place: row x's kw*OC outputs are contiguous in the output, so the GEMM
// (gemm.hpp) writes them with ldc = kw*OC, bias and activation in its epilogue.
// Where kw*OC is at most gemm::kMaxNarrow (a head to one channel: 2 columns,
// where the register tile is 16 wide), each output is a dot product across
// vector lanes instead (gemm::Kernel::narrow), written in place the same way:
// a rule decided from the shapes, not a routine parameter.
#include "routines/cpu/f32_common.hpp"
#include "routines/cpu/gemm.hpp"
#include "routines/weight_checks.hpp"

#include "core/layer_types.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace softneuro {
namespace {

namespace gemm = cpu::gemm;
constexpr std::string_view kWho = "cpu:float32:nhwc/pixel_shuffle";

/// The packed weights' geometry: the layer's weight [C, OC, KH, KW] and the CPU's kernel (never the input's size).
struct Geometry {
  const gemm::Kernel* k = gemm::best_kernel();
  int64_t c = 0, oc = 0, kh = 1, kw = 1, s = 0, kc = 0;  ///< s: columns per kernel row, kw * oc
  bool narrow = false;                                  ///< s <= kMaxNarrow: dot products (Kernel::narrow)
  int64_t per_row = 0;                                  ///< floats of one kernel row's packed operand (16-aligned)
  explicit Geometry(const Layer& layer) {
    const Shape& w = layer.weight("weight").shape();
    c = w[0], oc = w[1], kh = w[2], kw = w[3];
    s = kw * oc;
    kc = gemm::default_kc(*k);
    narrow = s <= gemm::kMaxNarrow;
    per_row = gemm::round_up(narrow ? s * c : gemm::packed_b_size(*k, c, s), 16);
  }
  std::size_t floats() const { return static_cast<std::size_t>(per_row * kh); }
};

std::shared_ptr<const PackedWeights> pack_weights(const Layer& layer) {
  const Geometry g(layer);
  const float* w = layer.weight("weight").data_as<float>();
  return cpu::pack_floats(g.floats(), [&](float* packed) {
    // Kernel row i's matrix as [c][(j, oc)], packed as the GEMM's B, or as its rows [(j, oc)][c] for narrow().
    std::vector<float> m(static_cast<std::size_t>(g.c * g.s));
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t ci = 0; ci < g.c; ++ci)
        for (int64_t o = 0; o < g.oc; ++o)
          for (int64_t j = 0; j < g.kw; ++j) {
            const float v = w[((ci * g.oc + o) * g.kh + i) * g.kw + j];
            const int64_t col = j * g.oc + o;
            m[static_cast<std::size_t>(g.narrow ? col * g.c + ci : ci * g.s + col)] = v;
          }
      float* dst = packed + i * g.per_row;
      if (g.narrow) std::copy(m.begin(), m.end(), dst);
      else gemm::pack_b(*g.k, g.c, g.s, g.kc, m.data(), g.s, false, dst);
    }
  });
}

class Prepared final : public PreparedRoutine {
 public:
  Prepared(const LayerInfo& info, std::shared_ptr<const PackedWeights> packed) : geo_(*info.layer) {
    const Layer& layer = *info.layer;
    win_ = core::deconv2_window(layer, info.input_shapes[0]);
    packed_ = cpu::packed_of(packed, geo_.floats(), info, kWho);
    bias_.assign(static_cast<std::size_t>(geo_.s), 0.0f);
    if (const Blob* b = layer.find_weight("bias"))
      for (int64_t col = 0; col < geo_.s; ++col) bias_[static_cast<std::size_t>(col)] = b->data_as<float>()[col % geo_.oc];
    cpu::to_epilogue(core::fused_activation(layer), ep_);
    ep_.bias_n = bias_.data();
    slots_ = team_threads(info);
    slot_floats_ = geo_.narrow ? 0 : gemm::round_up(gemm::packed_a_size(*geo_.k, win_.w, geo_.c), 16);
  }
  std::size_t workspace_bytes() const override { return sizeof(float) * static_cast<std::size_t>(slot_floats_ * slots_); }

  void run(const RunArgs& args) override {
    const float* x = args.inputs[0]->data_as<float>();
    float* y = args.outputs[0]->data_as<float>();
    float* ws = static_cast<float*>(args.workspace);
    const gemm::Kernel& k = *geo_.k;
    const int64_t w = win_.w, c = geo_.c, s = geo_.s, ow = win_.ow;
    cpu::for_each_task(args.pool, slots_, win_.n * win_.h, [&](int64_t t, int slot) {
      const int64_t n = t / win_.h, row = t % win_.h;
      const float* xr = x + t * w * c;  // input row (n, row): w pixels of c channels
      float* buf = ws + slot * slot_floats_;
      if (!geo_.narrow) gemm::pack_a(k, w, c, geo_.kc, xr, c, false, buf);
      for (int64_t i = 0; i < geo_.kh; ++i) {
        float* out = y + (n * win_.oh + row * geo_.kh + i) * ow * geo_.oc;  // output row kh * row + i
        const float* b = packed_->data() + i * geo_.per_row;
        if (geo_.narrow) k.narrow(w, s, c, xr, c, b, out, s, bias_.data(), ep_);
        else gemm::gemm_block(k, w, s, c, geo_.kc, buf, b, out, s, ep_, 0, w, 0, s);
      }
    });
  }

 private:
  Geometry geo_;
  core::Deconv2Window win_{};
  std::shared_ptr<const cpu::AlignedFloats> packed_;
  std::vector<float> bias_;
  gemm::Epilogue ep_;
  int slots_ = 1;
  int64_t slot_floats_ = 0;
};

class PixelShuffle final : public Routine {
 public:
  static constexpr Schema kSchema{Device::cpu, DType::float32, Layout::nhwc};
  std::string_view layer_type() const override { return "deconv2"; }
  std::string_view algorithm() const override { return "pixel_shuffle"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == kSchema)) return Support::no(fmt::format("{} computes in {}", kWho, kSchema.to_string()));
    if (!gemm::best_kernel()) return Support::no("needs AVX2 + FMA");
    if (!info.layer || info.input_shapes.size() != 1 || info.input_shapes[0].rank() != 4)
      return Support::no("deconv2 needs an input [N,C,H,W]");
    if (Support s = routines::float_weights(*info.layer, {"weight", "bias"}, kWho); !s) return s;
    if (Support s = cpu::check_activation(*info.layer); !s) return s;
    const core::Deconv2Window g = core::deconv2_window(*info.layer, info.input_shapes[0]);
    if (g.kh != g.sh || g.kw != g.sw || g.pt || g.pb || g.pl || g.pr || g.dh != 1 || g.dw != 1 || g.oph || g.opw ||
        g.group != 1)
      return Support::no(fmt::format(
          "pixel_shuffle takes kernels equal to their strides without pads, dilation, groups or output_padding "
          "(kernel [{},{}], strides [{},{}])", g.kh, g.kw, g.sh, g.sw));
    if (g.n * g.h * g.w == 0 || g.oc == 0) return Support::no("empty output");
    return Support::yes();
  }
  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams&) const override {
    return pack_weights(*info.layer);
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& info, const Schema&,
                                              const RoutineParams&) const override {
    return cpu::unpack_floats(bytes, Geometry(*info.layer).floats());
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams&,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    return std::make_unique<Prepared>(info, std::move(packed));
  }
};

SOFTNEURO_REGISTER_ROUTINE(PixelShuffle);

}  // namespace
}  // namespace softneuro
