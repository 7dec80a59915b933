// cpu:qint8:nhwc/winograd: int8 3x3 convolutions (stride 1) by Winograd
// F(2x2, 3x3) in exact integer arithmetic: 16 products per 2x2 outputs where
// the GEMM routine (cpu:qint8/qint8) makes 36, on the same AVX2 vpmaddwd.
//
// Why it is exact (qint8_kernels.hpp): the input transform Bᵀ d B adds and
// subtracts int8 values minus their zero point (|v| <= 4 * 255, int16); the
// weight transform is scaled to integers, (2G) g (2G)ᵀ = 4 G g Gᵀ (|u| <= 9 *
// 127, int16); their int32 products, summed over the input channels, and the
// output transform Aᵀ m A (additions) give 4 times the convolution's exact
// integer dot products. int32 sums may wrap on the way: arithmetic modulo 2^32
// ends at the exact value as long as that fits, which 4 * 9 * C * 255 * 127
// does for C up to kMaxChannels. The bias, multipliers and requantisation are
// cpu:qint8/qint8's, so the outputs equal that routine's int16 kernel's bit for
// bit, for any 8-bit weights (a QDQ file's own grid included).
//
// Work: blocks of output tiles (2x2 pixels each) x chunks of 16-channel output
// blocks, taken dynamically. A block's input patches are transformed once into
// 16 matrices [tiles][C] (one per transform position), each multiplied by that
// position's packed weights [C][16] with the GEMM tile kernel, then each tile's
// 16 positions transformed back and requantised for 16 channels at a time.
#include "core/layer_types.hpp"
#include "core/prepared_weights.hpp"
#include "core/weight_quant.hpp"
#include "routines/cpu/qint8_common.hpp"

#include <softneuro/routine.hpp>
#include <softneuro/session.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace softneuro {
namespace {

using cpu::TQ;
using core::Window2d;
using qint8::Epilogue;

constexpr Schema kNhwc{Device::cpu, DType::qint8, Layout::nhwc};

/// Most input channels: 4 * 9 * C * 255 * 127 (4 times the largest dot product) fits int32.
constexpr int64_t kMaxChannels = 1800;

std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The transformed weights' sizes, from the weights [OC, C, 3, 3]: never the input's.
struct Transformed {
  int64_t oc = 0, c = 0, k2 = 0, ocb = 0, block_elems = 0;
  explicit Transformed(const Layer& l) {
    const Shape& w = l.weight("weight").shape();
    oc = w[0];
    c = w[1];
    k2 = ceil_div(c, 2);
    ocb = ceil_div(oc, qint8::kTileN);
    block_elems = k2 * 32;  // [k2][16 lanes][2] int16
  }
  std::size_t lanes() const { return static_cast<std::size_t>(ocb * 16); }
  std::size_t packed_bytes() const { return static_cast<std::size_t>(16 * ocb * block_elems * 2); }
};

/// The GEMM routine's per-channel int8 weights, then per (output, input)
/// channel U = (2G) g (2G)ᵀ, packed per transform position p as
/// [p][output block][input pair][16 lanes][2] int16; each output channel's
/// int32 bias and requantisation multiplier.
std::shared_ptr<const qint8::GemmWeights> transform_weights(const PackInfo& info) {
  const Layer& l = *info.layer;
  const Transformed t(l);
  Epilogue ep;
  qint8::activation_epilogue(l, cpu::out_q(info), &ep);
  const TQ in = cpu::in_q(info, 0), out = cpu::out_q(info);
  const Blob* b = l.find_weight("bias");
  const float* bias = b ? b->data_as<float>() : nullptr;
  const core::ChannelQuantized qw = core::channel_int8(l.weight("weight"), 127);
  auto pw = std::make_shared<qint8::GemmWeights>();
  pw->packed = Blob::allocate(Shape{static_cast<int64_t>(t.packed_bytes())}, DType::quint8);  // 64-byte aligned, zero-filled
  pw->bias.assign(t.lanes(), 0);
  pw->mult.assign(t.lanes(), 0.0f);
  pw->fix_start.assign(static_cast<std::size_t>(t.ocb + 1), 0);  // the int16 form: no pairs to fix
  auto* packed = static_cast<int16_t*>(pw->packed.data());
  static constexpr int G2[4][3] = {{2, 0, 0}, {1, 1, 1}, {1, -1, 1}, {0, 0, 2}};
  for (int64_t o = 0; o < t.oc; ++o) {
    const float sw = qw.scale[static_cast<std::size_t>(o)];
    pw->bias[static_cast<std::size_t>(o)] = bias ? qint8::quantise_bias(bias[o], in.scale, sw) : 0;
    pw->mult[static_cast<std::size_t>(o)] = qint8::output_multiplier(ep, in.scale, sw, out.scale);
    const int64_t jb = o / 16, lane = o % 16;
    for (int64_t ic = 0; ic < t.c; ++ic) {
      const int8_t* k = qw.q.data() + (o * t.c + ic) * 9;
      int32_t gt[4][3];  // (2G) g
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j) gt[i][j] = G2[i][0] * k[j] + G2[i][1] * k[3 + j] + G2[i][2] * k[6 + j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const int32_t u = gt[i][0] * G2[j][0] + gt[i][1] * G2[j][1] + gt[i][2] * G2[j][2];
          packed[((4 * i + j) * t.ocb + jb) * t.block_elems + (ic / 2) * 32 + lane * 2 + (ic & 1)] = static_cast<int16_t>(u);
        }
    }
  }
  return pw;
}

class WinogradConv final : public PreparedRoutine {
 public:
  WinogradConv(const LayerInfo& info, const Window2d& g, const Epilogue& ep, TQ in,
               std::shared_ptr<const qint8::GemmWeights> packed)
      : g_(g), ep_(ep), zp_in_(in.zp), weights_(std::move(packed)) {
    const Transformed t(*info.layer);
    k2_ = t.k2;
    ldv_ = 2 * k2_;
    ocb_ = t.ocb;
    block_elems_ = t.block_elems;
    if (!weights_ || t.c != g.c || weights_->packed.byte_size() != t.packed_bytes() || weights_->bias.size() != t.lanes())
      throw Error("cpu:qint8:nhwc/winograd: its packed weights do not fit this layer", {}, info.layer->name, "weight");
    // Blocks of tiles: the 16 transformed matrices of a block about 96 KiB (L2),
    // at least 16 tiles: each position's packed weights (C * 32 bytes per 16
    // output channels) are read once per block, and at 7x7 with 512 channels
    // blocks of 4 tiles read 16.8 MB of them per run against 8.4 for one block.
    // Threads then share a block's output channels.
    const int64_t tiles = g.n * ceil_div(g.oh, 2) * ceil_div(g.ow, 2);
    tb_ = std::min(std::clamp<int64_t>((96 * 1024) / (16 * ldv_ * 2) / 4 * 4, 16, 64), ceil_div(tiles, 4) * 4);
    slots_ = team_threads(info);
    const int64_t want = slots_ == 1 ? 1 : 4 * slots_;
    tblocks_ = ceil_div(tiles, tb_);
    occ_ = tblocks_ < want ? std::min(ocb_, ceil_div(want, tblocks_)) : 1;
    jpc_ = ceil_div(ocb_, occ_);
    occ_ = ceil_div(ocb_, jpc_);
    vbytes_ = align64(static_cast<std::size_t>(16 * tb_ * ldv_) * sizeof(int16_t));
    mbytes_ = align64(static_cast<std::size_t>(16 * tb_ * 16) * sizeof(int32_t));
  }

  std::size_t workspace_bytes() const override { return static_cast<std::size_t>(slots_) * (vbytes_ + mbytes_); }

  void run(const RunArgs& a) override {
    const int8_t* x = a.inputs[0]->data_as<int8_t>();
    int8_t* y = a.outputs[0]->data_as<int8_t>();
    char* ws = static_cast<char*>(a.workspace);
    qint8::run_tasks(a.pool, slots_, tblocks_ * occ_, [&](int64_t t, int64_t slot) {
      char* mine = ws + static_cast<std::size_t>(slot) * (vbytes_ + mbytes_);
      task(t / occ_, t % occ_, x, y, reinterpret_cast<int16_t*>(mine), reinterpret_cast<int32_t*>(mine + vbytes_));
    });
  }

 private:
  void task(int64_t block, int64_t chunk, const int8_t* x, int8_t* y, int16_t* v, int32_t* m) const {
    const int64_t th = ceil_div(g_.oh, 2), tw = ceil_div(g_.ow, 2), tiles = g_.n * th * tw;
    const int64_t t0 = block * tb_, nt = std::min(tb_, tiles - t0);
    const int64_t ldp = tb_ * ldv_;  // between transform positions in v
    for (int64_t i = 0; i < nt; ++i) {
      const int64_t tile = t0 + i, n = tile / (th * tw), ty = tile / tw % th, tx = tile % tw;
      const int8_t* taps[16];
      for (int r = 0; r < 4; ++r)
        for (int s = 0; s < 4; ++s) {
          const int64_t iy = 2 * ty - g_.pt + r, ix = 2 * tx - g_.pl + s;
          taps[4 * r + s] = iy < 0 || iy >= g_.h || ix < 0 || ix >= g_.w ? nullptr : x + ((n * g_.h + iy) * g_.w + ix) * g_.c;
        }
      qint8::winograd_input(taps, g_.c, zp_in_, v + i * ldv_, ldp);
      if (ldv_ > g_.c)  // the odd channel count's pad pair: the weights there are 0, the activations must be finite
        for (int p = 0; p < 16; ++p) v[p * ldp + i * ldv_ + g_.c] = 0;
    }
    const auto* packed = static_cast<const int16_t*>(weights_->packed.data());
    const int64_t jb0 = chunk * jpc_, jb1 = std::min(ocb_, jb0 + jpc_);
    for (int64_t jb = jb0; jb < jb1; ++jb) {
      for (int p = 0; p < 16; ++p)
        for (int64_t r0 = 0; r0 < nt; r0 += qint8::kTileM) {
          const int mr = static_cast<int>(std::min<int64_t>(qint8::kTileM, nt - r0));
          qint8::gemm_tile_partial(mr, v + p * ldp + r0 * ldv_, ldv_, packed + (p * ocb_ + jb) * block_elems_, k2_,
                                   m + (p * tb_ + r0) * 16, true);
        }
      Epilogue ep = ep_;
      ep.bias = weights_->bias.data() + jb * 16;
      ep.mult = weights_->mult.data() + jb * 16;
      const int nvalid = static_cast<int>(std::min<int64_t>(16, g_.oc - jb * 16));
      for (int64_t i = 0; i < nt; ++i) {
        const int64_t tile = t0 + i, n = tile / (th * tw), ty = tile / tw % th, tx = tile % tw;
        int8_t* dst[4];
        for (int q = 0; q < 4; ++q) {
          const int64_t oy = 2 * ty + q / 2, ox = 2 * tx + q % 2;
          dst[q] = oy < g_.oh && ox < g_.ow ? y + ((n * g_.oh + oy) * g_.ow + ox) * g_.oc + jb * 16 : nullptr;
        }
        qint8::winograd_output(m + i * 16, tb_ * 16, ep, dst, nvalid);
      }
    }
  }

  Window2d g_;
  Epilogue ep_;
  int32_t zp_in_;
  int64_t k2_ = 0, ldv_ = 0, ocb_ = 0, block_elems_ = 0;
  int64_t tb_ = 4, tblocks_ = 1, occ_ = 1, jpc_ = 1, slots_ = 1;
  std::size_t vbytes_ = 0, mbytes_ = 0;
  std::shared_ptr<const qint8::GemmWeights> weights_;
};

class WinogradRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return "winograd"; }
  std::vector<Schema> schemas() const override { return {kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (s != kNhwc) return Support::no(fmt::format("computes in cpu:qint8:nhwc, not {}", s.to_string()));
    if (Support c = qint8::routine_support(info, s); !c) return c;
    const Layer& l = *info.layer;
    if (Support w = core::int8_routine_weight(l, "weight", true); !w) return w;
    if (Support b = core::int8_routine_weight(l, "bias", false); !b) return b;
    if (info.input_shapes[0].rank() != 4) return Support::no("conv2 input must be 4-D");
    const Window2d g = core::conv2_window(l, info.input_shapes[0]);
    if (g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.dh != 1 || g.dw != 1 || g.group != 1)
      return Support::no("Winograd F(2x2, 3x3) computes 3x3 kernels, stride 1, no dilation, one group");
    if (g.c > kMaxChannels)
      return Support::no(fmt::format("{} input channels: above {} its int32 sums could overflow", g.c, kMaxChannels));
    return qint8::activation_epilogue(l, cpu::out_q(info), nullptr);
  }
  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams&) const override {
    return transform_weights(info);
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& info, const Schema&,
                                              const RoutineParams&) const override {
    const Transformed t(*info.layer);
    auto pw = qint8::load_packed(bytes, t.lanes(), 0);
    if (!pw || pw->packed.byte_size() != t.packed_bytes() || !(pw->form == qint8::GemmWeights::Form{}) || !pw->perm.empty())
      return nullptr;
    return std::make_shared<const qint8::GemmWeights>(std::move(*pw));
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema& s, const RoutineParams&,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("cpu:qint8:nhwc/winograd cannot run this conv2: {}", ok.reason));
    const Layer& l = *info.layer;
    Epilogue ep;
    qint8::activation_epilogue(l, cpu::out_q(info), &ep);
    return std::make_unique<WinogradConv>(info, core::conv2_window(l, info.input_shapes[0]), ep, cpu::in_q(info, 0),
                                          std::dynamic_pointer_cast<const qint8::GemmWeights>(std::move(packed)));
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(WinogradRoutine);

}  // namespace softneuro
