// cpu:qint8/qint8: int8 inference with our own AVX2 and AVX-VNNI kernels
// (qint8_kernels_avx2.cpp, qint8_kernels_vnni.cpp), in cpu:qint8 (nchw) and cpu:qint8:nhwc.
//
// Conventions (fixed for every qint8 routine of the project):
//  - activations: signed int8, asymmetric, per tensor, real = scale * (q - zero_point),
//    from the blob's calibrated QuantParams (LayerInfo::input_quant/output_quant);
//    a layer without calibration is refused ("not calibrated: run calibration first");
//  - weights stay float32 in the .dnn; prepare() quantises them per output
//    channel, symmetric: s_w[oc] = max|w[oc]| / 127, q = round(w / s_w) in [-127, 127];
//    bias -> int32 at s_in * s_w[oc];
//  - the int32 accumulator is requantised to the output's scale and zero point,
//    with the fused activation in the epilogue (relu/clip as clamps in the
//    quantised domain; hardswish/hardsigmoid on the real value before rounding).
//
// Arithmetic choice (see qint8_kernels.hpp): activations minus their zero point
// are widened to int16 and multiplied with int16 weights by vpmaddwd (pairs
// summed into int32). This is exact: the accumulators are the true integer
// dot products, weights keep all 8 bits, and nothing saturates (vpmaddubsw
// would need 7-bit weights or risk int16 saturation). Only the requantisation
// rounds (float multiply, round to nearest even): outputs are within one
// quantisation step of the exact real-valued result of the same quantised
// computation, and usually equal to it.
//
// With AVX-VNNI (checked at run time), routine parameter vnni=1 of conv2 and
// dense uses vpdpbusd on u8 activations (q + 128, the offset folded into the
// bias): also exact, with the same accumulators, four products per lane and
// instruction. The parameter is listed only where the CPU has AVX-VNNI; a file
// tuned elsewhere asking for it runs the AVX2 kernels (the same results) here.
// Without AVX-VNNI, routine parameter u8s8=1 uses vpmaddubsw on the same u8
// activations with weights quantised to 7 bits ([-63, 63], so no int16 pair sum
// saturates): about 1.6x the int16 kernel's products per second on Zen 3, at
// half the weight resolution; hybrid tuning's accuracy budget judges it.
//
// What each layer type supports:
//  conv2   any kernel/stride/pad/dilation, groups, dot products up to 32768
//          terms; im2col of a block of output pixels, GEMM tiles of 4 (AVX2,
//          u8s8) or 6 (VNNI) pixels x 16 output channels; AVX2 splits K above 1024 into
//          L1-sized chunks. Routine parameter "mb" (pixels per block; 0 or
//          absent: automatic) is honoured when a routine path sets it; the
//          tuner does not vary it. Depthwise (one input and one output channel
//          per group, up to 64 taps) runs its own kernel instead, vectors over
//          channels (NHWC inside): a rule, decided in prepare.
//  dense   the conv2 GEMM with rows as pixels (any rank in nchw; rank <= 2 in nhwc).
//  pool2   max and avg (count_include_pad, ceil_mode, global), requantising.
//  add     same-shape inputs with different scales, requantising.
//  mul     same shapes, or a per-channel gate [N or 1, C, 1, 1] (squeeze-excite).
//  concat  any axis, requantising each input to the output's scale.
//  split   any axis, requantising each output to its own scale.
//  relu, clip in the quantised domain (a requantisation with clamps).
//  hardsigmoid, hardswish, sigmoid, silu, tanh, gelu: a 256-entry table per layer
//          (the cpu/ref formula on every int8 value: bit-exact against the reference).
//  flatten, reshape, identity: copies (requantising when scales differ).
// nchw blobs are transposed to nhwc in the workspace where the kernels want channels last.
// Every routine needs AVX2 and FMA, checked at run time ("CPU lacks AVX2" otherwise);
// In the default order below the oneDNN int8 routines (the tuner decides; an
// uncalibrated net never considers them).
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/prepared_weights.hpp"
#include "core/weight_quant.hpp"
#include "routines/cpu/qint8_common.hpp"
#include "routines/cpu/qint8_kernels.hpp"
#include "routines/cpu/quant_params.hpp"

#include <softneuro/session.hpp>
#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <vector>

namespace softneuro {

bool qint8::avx2_usable() { return core::cpu_features().avx2_fma(); }

bool qint8::vnni_usable() { return core::cpu_features().avx2_fma() && core::cpu_features().avx_vnni; }

Support qint8::routine_support(const LayerInfo& info, const Schema& s) {
  if (!qint8::avx2_usable()) return Support::no("CPU lacks AVX2 (or FMA)");
  if (s.device != Device::cpu || s.dtype != DType::qint8 || !(s.layout == Layout::nchw || s.layout == Layout::nhwc))
    return Support::no(fmt::format("computes in cpu:qint8[:nhwc], not {}", s.to_string()));
  return cpu::calibrated(info);
}

/// The fused activation as an epilogue, or why it cannot be one.
/// An affine after the activation (act_scale, act_shift): scaled into
/// inv_out (or, linear, into the multipliers) and added as add_out; a relu or
/// clip, clamped in the quantised domain after it, clamps the affine's image
/// of its bounds.
Support qint8::activation_epilogue(const Layer& l, const cpu::TQ& out, Epilogue* ep) {
  // (Only conv2 and dense apply the affine: the add's epilogue is its clamp alone.)
  core::Activation a = core::fused_activation(l, l.type == "conv2" || l.type == "dense");
  Epilogue e;
  e.zp = out.zp;
  e.inv_out = a.scale / out.scale;
  e.add_out = a.shift / out.scale;
  e.act_scale = a.scale;
  switch (a.kind) {
    case core::Activation::none: break;
    case core::Activation::relu:
    case core::Activation::clip: {
      core::Activation bounds = a;
      if (a.affine()) {
        const float lo = a.kind == core::Activation::relu ? 0.0f : a.min;
        const float hi = a.kind == core::Activation::relu ? std::numeric_limits<float>::infinity() : a.max;
        const float at_lo = lo * a.scale + a.shift, at_hi = hi * a.scale + a.shift;
        bounds.kind = core::Activation::clip;
        bounds.min = std::min(at_lo, at_hi);
        bounds.max = std::max(at_lo, at_hi);
        if (a.scale == 0) bounds.min = bounds.max = a.shift;
      }
      const cpu::Int8Bounds b = cpu::int8_bounds(bounds, out);
      e.lo = b.lo;
      e.hi = b.hi;
      break;
    }
    case core::Activation::hardswish: e.act = Epilogue::hardswish; break;
    case core::Activation::hardsigmoid:
      e.act = Epilogue::hardsigmoid;
      e.alpha = a.alpha;
      e.beta = a.beta;
      break;
    case core::Activation::sigmoid: return Support::no("fused sigmoid has no qint8 epilogue");
    case core::Activation::silu: return Support::no("fused silu has no qint8 epilogue");
    case core::Activation::gelu:
    case core::Activation::gelu_tanh: return Support::no("fused gelu has no qint8 epilogue");
  }
  if (ep) *ep = e;
  return Support::yes();
}

Blob qint8::GemmWeights::save() const { return save_packed(*this); }

Blob qint8::save_packed(const GemmWeights& pw) {
  return core::pack_arrays({core::array_bytes(static_cast<const std::byte*>(pw.packed.data()), pw.packed.byte_size()),
                            core::array_bytes(pw.bias.data(), pw.bias.size()), core::array_bytes(pw.mult.data(), pw.mult.size()),
                            core::array_bytes(&pw.form, 1), core::array_bytes(pw.perm.data(), pw.perm.size()),
                            core::array_bytes(pw.fix_start.data(), pw.fix_start.size()),
                            core::array_bytes(pw.fixes.data(), pw.fixes.size())});
}

std::optional<qint8::GemmWeights> qint8::load_packed(const Blob& bytes, std::size_t lanes, int64_t k16) {
  // The weights', the pairing's and the fixes' sizes vary with the form: read from the bytes, then checked.
  const auto sizes = core::packed_array_sizes(bytes);
  const std::size_t blocks = lanes / 16;
  if (!sizes || sizes->size() != 7 || (*sizes)[6] % sizeof(pair_fix::PairFix) != 0 ||
      ((*sizes)[4] != 0 && (*sizes)[4] != blocks * static_cast<std::size_t>(k16)))
    return std::nullopt;
  const std::size_t nfix = (*sizes)[6] / sizeof(pair_fix::PairFix);
  auto a = core::unpack_arrays(bytes, {(*sizes)[0], lanes * sizeof(int32_t), lanes * sizeof(float), sizeof(GemmWeights::Form),
                                       (*sizes)[4], (blocks + 1) * sizeof(int32_t), (*sizes)[6]});
  if (!a) return std::nullopt;
  GemmWeights pw;
  pw.packed = Blob::view(core::owner_of(bytes), (*a)[0], Shape{static_cast<int64_t>((*sizes)[0])}, DType::quint8);
  pw.bias.resize(lanes);
  pw.mult.resize(lanes);
  pw.perm.resize((*sizes)[4]);
  pw.fix_start.resize(blocks + 1);
  pw.fixes.resize(nfix);
  std::memcpy(pw.bias.data(), (*a)[1], lanes * sizeof(int32_t));
  std::memcpy(pw.mult.data(), (*a)[2], lanes * sizeof(float));
  std::memcpy(&pw.form, (*a)[3], sizeof(GemmWeights::Form));
  if (!pw.perm.empty()) std::memcpy(pw.perm.data(), (*a)[4], pw.perm.size());
  std::memcpy(pw.fix_start.data(), (*a)[5], pw.fix_start.size() * sizeof(int32_t));
  if (nfix) std::memcpy(pw.fixes.data(), (*a)[6], nfix * sizeof(pair_fix::PairFix));
  // A file's pairing and fixes are checked, never trusted: a bad one means packed again.
  if (!pair_fix::pairing_valid(pw.perm) || !pair_fix::fixes_valid(pw.fix_start, pw.fixes, k16))
    return std::nullopt;
  return pw;
}

int32_t qint8::quantise_bias(float b, float s_in, float s_w) { return core::quantize_bias_value(b, double(s_in) * double(s_w)); }

/// In float, in this order: XNNPACK's (and so TensorFlow Lite's) requantisation
/// scale, so that products that tie in rounding round alike.
float qint8::output_multiplier(const Epilogue& ep, float s_in, float s_w, float s_out) {
  const float s = s_in * s_w;
  return ep.act != Epilogue::linear ? s : ep.act_scale == 1 ? s / s_out : s * ep.act_scale / s_out;
}

namespace {

using cpu::Int8Bounds;
using cpu::TQ;
using cpu::calibrated;
using cpu::in_q;
using cpu::int8_bounds;
using cpu::out_q;
using cpu::tensor_quant;

using core::Activation;
using core::Window2d;
using qint8::Epilogue;

constexpr Schema kNchw{Device::cpu, DType::qint8, Layout::nchw};
constexpr Schema kNhwc{Device::cpu, DType::qint8, Layout::nhwc};

std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }
int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

using qint8::routine_support;
using qint8::activation_epilogue;
using qint8::output_multiplier;
using qint8::quantise_bias;
using qint8::run_tasks;



/// [n][c][s] <-> [n][s][c] for int8, in tiles of 64 positions.
void transpose_to_nhwc(const int8_t* x, int8_t* y, int64_t n, int64_t c, int64_t s, ThreadPool* pool) {
  const int64_t tiles = ceil_div(s, 64);
  pool->parallel_for(n * tiles, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t img = t / tiles, s0 = (t % tiles) * 64, s1 = std::min(s, s0 + 64);
      const int8_t* xi = x + img * c * s;
      int8_t* yi = y + img * s * c;
      for (int64_t p = s0; p < s1; ++p)
        for (int64_t ch = 0; ch < c; ++ch) yi[p * c + ch] = xi[ch * s + p];
    }
  });
}
void transpose_to_nchw(const int8_t* x, int8_t* y, int64_t n, int64_t c, int64_t s, ThreadPool* pool) {
  const int64_t tiles = ceil_div(s, 64);
  pool->parallel_for(n * tiles, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t img = t / tiles, s0 = (t % tiles) * 64, s1 = std::min(s, s0 + 64);
      const int8_t* xi = x + img * s * c;
      int8_t* yi = y + img * c * s;
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t p = s0; p < s1; ++p) yi[ch * s + p] = xi[p * c + ch];
    }
  });
}

/// Weights per output channel, symmetric (the project's convention, core/weight_quant.hpp).
using QuantWeights = core::ChannelQuantized;

// ---------------------------------------------------------------------------
// conv2 (and dense): im2col blocks x packed weights, 4x16 GEMM tiles.

/// K pairs per chunk of the K-blocked AVX2 GEMM (16 KiB of weights per output-channel block).
constexpr int64_t kKChunk = 256;

/// The GEMM kernel of conv2 and dense (routine parameters vnni and u8s8).
enum class GemmKernel : int32_t {
  int16 = 0,  ///< AVX2 vpmaddwd on int16 activations and 8-bit weights (exact)
  vnni = 1,   ///< AVX-VNNI vpdpbusd on u8 activations and 8-bit weights (exact)
  u8s8 = 2,   ///< AVX2 vpmaddubsw on u8 activations and 7-bit weights (exact for those)
  /// AVX2 vpmaddubsw on u8 activations and 8-bit weights, paired and fixed
  /// (pair_fix.hpp): exact. What packing makes of int16 where VNNI is not
  /// usable and the fixes are few; never a routine parameter.
  u8_pairs = 3,
};
/// The weight range of a kernel (Routine::weight_qmax).
constexpr int kernel_qmax(GemmKernel k) { return k == GemmKernel::u8s8 ? 63 : 127; }

/// What a GEMM's packed weights depend on: the weights' shape and groups
/// (never the input's size) and the kernel.
struct GemmShape {
  int64_t oc = 0, icg = 0, kh = 1, kw = 1, group = 1;
  GemmKernel kernel = GemmKernel::int16;
  bool u8() const { return kernel != GemmKernel::int16; }  ///< u8 activations, K in quads
  int64_t ocg() const { return oc / group; }
  int64_t k() const { return kh * kw * icg; }
  /// K as packed: pairs, quads, or (u8_pairs) whole groups of 16 (the pairing's).
  int64_t kpad() const { return kernel == GemmKernel::u8_pairs ? round_up(k(), 16) : round_up(k(), u8() ? 4 : 2); }
  int64_t ksteps() const { return kpad() / (u8() ? 4 : 2); }
  int64_t ocb() const { return ceil_div(ocg(), qint8::kTileN); }
  int64_t blocks() const { return group * ocb(); }
  int64_t block_bytes() const { return ksteps() * 64; }  ///< 16 lanes x (2 int16 or 4 int8) a K step
  std::size_t packed_bytes() const { return static_cast<std::size_t>(blocks() * block_bytes()); }
  std::size_t lanes() const { return static_cast<std::size_t>(blocks() * 16); }
};

/// The weights w ([oc][icg][kh][kw] float32) in K order (ki, kj, ic),
/// quantised per output channel, packed [group][ocb][ksteps][16][kstep]
/// (int16 pairs for int16, int8 quads for the u8 kernels), with each output
/// channel's int32 bias (bias may be null) and requantisation multiplier.
/// int16 becomes u8_pairs where VNNI is not usable and at most one weight in
/// pair_fix::kMaxFixShare needs a fix.
std::shared_ptr<const qint8::GemmWeights> pack_gemm(GemmShape s, const Blob& w, const float* bias, const Epilogue& ep,
                                                    TQ in, TQ out) {
  const int64_t icg = s.icg, ocg = s.ocg(), k = s.k(), ocb = s.ocb();
  auto pw = std::make_shared<qint8::GemmWeights>();
  pw->form.vnni_cpu = qint8::vnni_usable() ? 1 : 0;
  // Quantised per output channel (which the order within one does not change), then into K order.
  QuantWeights qw = core::channel_int8(w, kernel_qmax(s.kernel));
  {
    std::vector<int8_t> wk(qw.q.size());
    for (int64_t o = 0; o < s.oc; ++o)
      for (int64_t ic = 0; ic < icg; ++ic)
        for (int64_t ki = 0; ki < s.kh; ++ki)
          for (int64_t kj = 0; kj < s.kw; ++kj)
            wk[static_cast<std::size_t>(o * k + (ki * s.kw + kj) * icg + ic)] =
                qw.q[static_cast<std::size_t>(((o * icg + ic) * s.kh + ki) * s.kw + kj)];
    qw.q = std::move(wk);
  }
  // Each block's weights in the order its kernel reads them: K order, or paired (u8_pairs).
  std::vector<int8_t> paired;
  pw->fix_start.assign(static_cast<std::size_t>(s.blocks() + 1), 0);
  if (s.kernel == GemmKernel::int16 && !pw->form.vnni_cpu) {
    const int64_t k16 = round_up(k, 16);
    paired.assign(static_cast<std::size_t>(s.blocks() * 16 * k16), 0);
    pw->perm.assign(static_cast<std::size_t>(s.blocks() * k16), 0);
    for (int64_t grp = 0; grp < s.group; ++grp)
      for (int64_t jb = 0; jb < ocb; ++jb) {
        const int64_t blk = grp * ocb + jb;
        const int lanes = static_cast<int>(std::min<int64_t>(16, ocg - jb * 16));
        pair_fix::pair_block(qw.q.data() + (grp * ocg + jb * 16) * k, k, lanes, k, paired.data() + blk * 16 * k16,
                             pw->perm.data() + blk * k16, pw->fixes);
        pw->fix_start[static_cast<std::size_t>(blk + 1)] = static_cast<int32_t>(pw->fixes.size());
      }
    if (pair_fix::few_fixes(pw->fixes.size(), s.oc * k)) {
      s.kernel = GemmKernel::u8_pairs;
    } else {
      paired.clear();
      pw->perm.clear();
      pw->fixes.clear();
      std::fill(pw->fix_start.begin(), pw->fix_start.end(), 0);
    }
  }
  pw->form.kernel = static_cast<int32_t>(s.kernel);
  const bool u8 = s.u8();
  const int64_t block_bytes = s.block_bytes(), kpad = s.kpad();
  pw->packed = Blob::allocate(Shape{static_cast<int64_t>(s.packed_bytes())}, DType::quint8);  // 64-byte aligned, zero-filled
  pw->bias.assign(s.lanes(), 0);
  pw->mult.assign(s.lanes(), 0.0f);
  for (int64_t grp = 0; grp < s.group; ++grp)
    for (int64_t jb = 0; jb < ocb; ++jb)
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t ocl = jb * 16 + lane;
        if (ocl >= ocg) continue;
        const int64_t o = grp * ocg + ocl;
        const std::size_t slot = static_cast<std::size_t>((grp * ocb + jb) * 16 + lane);
        const float sw = qw.scale[static_cast<std::size_t>(o)];
        const int8_t* wq = qw.q.data() + o * k;
        int64_t wsum = 0;
        for (int64_t kk = 0; kk < k; ++kk) wsum += wq[kk];
        pw->bias[slot] = (bias ? quantise_bias(bias[o], in.scale, sw) : 0) -
                         (u8 ? static_cast<int32_t>((128 + in.zp) * wsum) : 0);  // u8 = q + 128: remove (128 + zp) * sum(w)
        pw->mult[slot] = output_multiplier(ep, in.scale, sw, out.scale);
        char* vb = static_cast<char*>(pw->packed.data()) + (grp * ocb + jb) * block_bytes;
        if (!paired.empty()) wq = paired.data() + ((grp * ocb + jb) * 16 + lane) * kpad;
        for (int64_t kk = 0; kk < (paired.empty() ? k : kpad); ++kk) {
          if (u8) reinterpret_cast<int8_t*>(vb)[(kk / 4) * 64 + lane * 4 + (kk & 3)] = wq[kk];
          else reinterpret_cast<int16_t*>(vb)[(kk / 2) * 32 + lane * 2 + (kk & 1)] = wq[kk];
        }
      }
  return pw;
}

/// The kernels a packing for `asked` (the routine parameters') may hold on this CPU.
bool form_fits(const qint8::GemmWeights::Form& f, GemmKernel asked) {
  const bool vnni_cpu = qint8::vnni_usable();
  if (f.kernel == static_cast<int32_t>(asked)) return asked != GemmKernel::int16 || f.vnni_cpu == (vnni_cpu ? 1 : 0);
  return asked == GemmKernel::int16 && f.kernel == static_cast<int32_t>(GemmKernel::u8_pairs) && !vnni_cpu;
}

/// A file's packing for `s`: nothing where it was made for another form or
/// CPU (packed again) or does not fit the layer.
std::shared_ptr<const qint8::GemmWeights> unpack_gemm(const Blob& bytes, GemmShape s) {
  auto pw = qint8::load_packed(bytes, s.lanes(), round_up(s.k(), 16));
  if (!pw || !form_fits(pw->form, s.kernel)) return nullptr;
  s.kernel = static_cast<GemmKernel>(pw->form.kernel);
  const bool pairs = s.kernel == GemmKernel::u8_pairs;
  if (pw->packed.byte_size() != s.packed_bytes() || pw->perm.size() != static_cast<std::size_t>(pairs ? s.blocks() * s.kpad() : 0) ||
      (!pairs && !pw->fixes.empty()))
    return nullptr;
  return std::make_shared<const qint8::GemmWeights>(std::move(*pw));
}

class GemmConv final : public PreparedRoutine {
 public:
  /// nhwc_*: the blobs' layouts. `packed`: pack_gemm's for this layer (the
  /// model's: shared by every session and shape).
  GemmConv(const LayerInfo& info, const Window2d& g, const Epilogue& ep, TQ in, bool nhwc_in, bool nhwc_out, int64_t mb,
           GemmKernel kernel, std::shared_ptr<const qint8::GemmWeights> packed)
      : g_(g), ep_(ep), zp_in_(in.zp), nhwc_in_(nhwc_in), nhwc_out_(nhwc_out), weights_(std::move(packed)) {
    if (!weights_ || !form_fits(weights_->form, kernel))
      throw Error("cpu:qint8 GEMM: its packed weights were made for another kernel", {}, info.layer ? info.layer->name : "", "weight");
    kernel = kernel_ = static_cast<GemmKernel>(weights_->form.kernel);  // int16 may have become u8_pairs
    const bool u8 = kernel != GemmKernel::int16;  // u8 activations, K in quads
    icg_ = g.c / g.group;
    ocg_ = g.oc / g.group;
    k_ = g.kh * g.kw * icg_;
    const GemmShape shape{g.oc, icg_, g.kh, g.kw, g.group, kernel};
    ksteps_ = shape.ksteps();
    kpad_ = shape.kpad();
    es_ = u8 ? 1 : 2;
    tile_m_ = kernel == GemmKernel::vnni ? qint8::kTileMVnni : u8 ? qint8::kTileMU8S8 : qint8::kTileM;
    pad_u8_ = static_cast<uint8_t>(in.zp + 128);  // a real 0, as u8
    ocb_ = ceil_div(ocg_, qint8::kTileN);
    block_bytes_ = ksteps_ * 64;
    const bool pairs = kernel == GemmKernel::u8_pairs;
    if (weights_->packed.byte_size() != shape.packed_bytes() || weights_->bias.size() != shape.lanes() ||
        weights_->mult.size() != shape.lanes() || shape.block_bytes() != block_bytes_ ||
        weights_->fix_start.size() != static_cast<std::size_t>(shape.blocks() + 1) ||
        weights_->perm.size() != (pairs ? static_cast<std::size_t>(shape.blocks() * kpad_) : 0))
      throw Error("cpu:qint8 GEMM: its packed weights do not fit this layer", {}, info.layer ? info.layer->name : "", "weight");
    // Blocks whose pairing is not K's own order read their rows through it.
    permuted_.assign(static_cast<std::size_t>(shape.blocks()), 0);
    for (std::size_t i = 0; i < weights_->perm.size(); ++i)
      if (weights_->perm[i] != i % 16) permuted_[i / static_cast<std::size_t>(kpad_)] = 1;
    // Blocks of output pixels: about 96 KiB of rows, a multiple of the tile height.
    const int64_t P = g.oh * g.ow;
    if (mb <= 0) mb = std::clamp<int64_t>((96 * 1024) / (es_ * kpad_) / 12 * 12, 24, 240);
    // Enough tasks for the threads to balance (taken dynamically): smaller pixel
    // blocks first (no work is repeated), then output-channel chunks (each repeats the im2col).
    slots_ = team_threads(info);
    const int64_t want = slots_ == 1 ? 1 : 4 * slots_, outer = g.n * g.group;
    int64_t pb = ceil_div(P, mb);
    if (outer * pb < want) pb = std::max(pb, std::min(ceil_div(P, 16), ceil_div(want, outer)));
    mbe_ = ceil_div(P, pb);
    pblocks_ = ceil_div(P, mbe_);
    occ_ = outer * pblocks_ < want ? std::min(ocb_, ceil_div(want, outer * pblocks_)) : 1;
    jpc_ = ceil_div(ocb_, occ_);
    occ_ = ceil_div(ocb_, jpc_);
    contiguous_taps_ = g.group == 1 && g.dw == 1;
    // A 1x1 convolution at stride 1 without padding whose rows need no K padding:
    // a block of output pixels reads one contiguous run of the input.
    contiguous_rows_ = g.group == 1 && g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 &&
                       g.pb == 0 && g.pr == 0 && g.oh == g.h && g.ow == g.w && kpad_ == k_;
    ldu_ = kpad_ * es_;
    xbytes_ = nhwc_in_ ? 0 : align64(static_cast<std::size_t>(g.n * g.c * g.h * g.w));
    ubytes_ = align64(static_cast<std::size_t>(mbe_ * ldu_) + 64);
    obytes_ = nhwc_out_ ? 0 : align64(static_cast<std::size_t>(mbe_ * jpc_ * 16));
    rbytes_ = pairs ? align64(static_cast<std::size_t>(tile_m_ * kpad_)) : 0;  // a tile's rows in a block's pairing
    // Long dot products on AVX2: K chunks whose weight blocks stay in L1, int32 partial sums in the workspace.
    kc_ = kernel == GemmKernel::int16 && ksteps_ > 2 * kKChunk ? kKChunk : 0;
    abytes_ = kc_ ? align64(static_cast<std::size_t>(round_up(mbe_, tile_m_) * jpc_ * 16) * sizeof(int32_t)) : 0;
  }

  std::size_t workspace_bytes() const override {
    return xbytes_ + static_cast<std::size_t>(slots_) * slot_bytes();
  }
  std::size_t slot_bytes() const { return ubytes_ + obytes_ + abytes_ + rbytes_; }

  void run(const RunArgs& a) override {
    const int8_t* x = a.inputs[0]->data_as<int8_t>();
    int8_t* y = a.outputs[0]->data_as<int8_t>();
    char* ws = static_cast<char*>(a.workspace);
    if (!nhwc_in_) {
      transpose_to_nhwc(x, reinterpret_cast<int8_t*>(ws), g_.n, g_.c, g_.h * g_.w, a.pool);
      x = reinterpret_cast<const int8_t*>(ws);
    }
    const int64_t tasks = g_.n * g_.group * pblocks_ * occ_;
    run_tasks(a.pool, slots_, tasks, [&](int64_t t, int64_t slot) {
      char* mine = ws + xbytes_ + static_cast<std::size_t>(slot) * slot_bytes();
      task(t, x, y, mine, reinterpret_cast<int8_t*>(mine + ubytes_), reinterpret_cast<int32_t*>(mine + ubytes_ + obytes_),
           reinterpret_cast<uint8_t*>(mine + ubytes_ + obytes_ + abytes_));
    });
  }

 private:
  /// `count` activations (int8) -> the kernel's input format at dst.
  void convert(const int8_t* src, char* dst, int64_t count) const {
    if (kernel_ != GemmKernel::int16) qint8::to_u8(src, reinterpret_cast<uint8_t*>(dst), count);
    else qint8::widen(src, reinterpret_cast<int16_t*>(dst), count, zp_in_);
  }
  /// `count` activations of real value 0 (padding).
  void zero(char* dst, int64_t count) const {
    if (kernel_ != GemmKernel::int16) std::memset(dst, pad_u8_, static_cast<std::size_t>(count));
    else std::memset(dst, 0, static_cast<std::size_t>(count) * 2);
  }

  void task(int64_t t, const int8_t* x, int8_t* y, char* u, int8_t* otile, int32_t* acc, uint8_t* pair_rows) const {
    const int64_t occ = t % occ_;
    t /= occ_;
    const int64_t pb = t % pblocks_;
    t /= pblocks_;
    const int64_t grp = t % g_.group, n = t / g_.group;
    const int64_t P = g_.oh * g_.ow, p0 = pb * mbe_, p1 = std::min(P, p0 + mbe_), np = p1 - p0;
    if (np <= 0) return;
    const int8_t* x_end = x + g_.n * g_.h * g_.w * g_.c;
    const char* u_end = u + ubytes_;
    // im2col: one row of K activations (in the kernel's format) per output pixel.
    if (contiguous_rows_) convert(x + (n * P + p0) * g_.c, u, np * k_);  // (MobileNetV2's 1x1s: 240 calls in one)
    else for (int64_t p = p0; p < p1; ++p) {
      const int64_t oy = p / g_.ow, ox = p % g_.ow;
      char* row = u + (p - p0) * ldu_;
      for (int64_t ki = 0; ki < g_.kh; ++ki) {
        const int64_t iy = oy * g_.sh - g_.pt + ki * g_.dh;
        if (contiguous_taps_) {
          // One group, no horizontal dilation: the taps of a kernel row that lie
          // inside the input are one contiguous run of pixels (all channels).
          char* seg = row + ki * g_.kw * icg_ * es_;
          const int64_t ix0 = ox * g_.sw - g_.pl;
          const int64_t kj0 = iy < 0 || iy >= g_.h ? g_.kw : std::clamp<int64_t>(-ix0, 0, g_.kw);
          const int64_t kj1 = iy < 0 || iy >= g_.h ? g_.kw : std::clamp<int64_t>(g_.w - ix0, kj0, g_.kw);
          if (kj0 > 0) zero(seg, kj0 * icg_);
          if (kj1 > kj0) {
            const int8_t* src = x + ((n * g_.h + iy) * g_.w + ix0 + kj0) * g_.c;
            char* dst = seg + kj0 * icg_ * es_;
            const int64_t count = (kj1 - kj0) * icg_;
            // A short run (a stem's 3 channels: 21 bytes a 7x7 row) in one vector: the bytes past it
            // are written again by the next run, the padding or the next row, all after this one.
            if (count * es_ <= 32 && src + 32 <= x_end && dst + 32 <= u_end) {
              if (kernel_ != GemmKernel::int16) qint8::to_u8_32(src, reinterpret_cast<uint8_t*>(dst));
              else qint8::widen16(src, reinterpret_cast<int16_t*>(dst), zp_in_);
            } else {
              convert(src, dst, count);
            }
          }
          if (kj1 < g_.kw) zero(seg + kj1 * icg_ * es_, (g_.kw - kj1) * icg_);
          continue;
        }
        for (int64_t kj = 0; kj < g_.kw; ++kj) {
          const int64_t ix = ox * g_.sw - g_.pl + kj * g_.dw;
          char* dst = row + (ki * g_.kw + kj) * icg_ * es_;
          if (iy < 0 || iy >= g_.h || ix < 0 || ix >= g_.w) zero(dst, icg_);
          else convert(x + ((n * g_.h + iy) * g_.w + ix) * g_.c + grp * icg_, dst, icg_);
        }
      }
      if (kpad_ > k_) std::memset(row + k_ * es_, 0, static_cast<std::size_t>((kpad_ - k_) * es_));  // weights are 0 there
    }
    const int64_t jb0 = occ * jpc_, jb1 = std::min(ocb_, jb0 + jpc_);
    const int64_t ldo = jpc_ * 16;
    const int64_t mpad = round_up(np, tile_m_);
    // K-blocked: for each K chunk, every (output-channel block, row tile) adds its partial sums.
    for (int64_t k0 = 0; kc_ && k0 < ksteps_; k0 += kc_) {
      const int64_t kn = std::min(kc_, ksteps_ - k0);
      for (int64_t jb = jb0; jb < jb1; ++jb) {
        const char* v = static_cast<const char*>(weights_->packed.data()) + static_cast<int64_t>(grp * ocb_ + jb) * block_bytes_ + k0 * 64;
        for (int64_t r0 = 0; r0 < np; r0 += tile_m_) {
          const int mr = static_cast<int>(std::min<int64_t>(tile_m_, np - r0));
          qint8::gemm_tile_partial(mr, reinterpret_cast<const int16_t*>(u + r0 * ldu_) + 2 * k0, ldu_ / 2,
                                   reinterpret_cast<const int16_t*>(v), kn, acc + ((jb - jb0) * mpad + r0) * 16, k0 == 0);
        }
      }
    }
    for (int64_t jb = jb0; jb < jb1; ++jb) {
      Epilogue ep = ep_;
      const std::size_t blk = static_cast<std::size_t>(grp * ocb_ + jb);
      ep.bias = weights_->bias.data() + blk * 16;
      ep.mult = weights_->mult.data() + blk * 16;
      const char* v = static_cast<const char*>(weights_->packed.data()) + static_cast<int64_t>(blk) * block_bytes_;
      const int nvalid = static_cast<int>(std::min<int64_t>(16, ocg_ - jb * 16));
      for (int64_t r0 = 0; r0 < np; r0 += tile_m_) {
        const int mr = static_cast<int>(std::min<int64_t>(tile_m_, np - r0));
        int8_t* dst = nhwc_out_ ? y + (n * P + p0 + r0) * g_.oc + grp * ocg_ + jb * 16 : otile + r0 * ldo + (jb - jb0) * 16;
        const int64_t ldd = nhwc_out_ ? g_.oc : ldo;
        if (kc_)
          qint8::gemm_epilogue(mr, acc + ((jb - jb0) * mpad + r0) * 16, ep, dst, ldd, nvalid);
        else if (kernel_ == GemmKernel::vnni)
          qint8::gemm_tile_vnni(mr, reinterpret_cast<const uint8_t*>(u + r0 * ldu_), ldu_, reinterpret_cast<const int8_t*>(v),
                                ksteps_, ep, dst, ldd, nvalid);
        else if (kernel_ == GemmKernel::u8s8)
          qint8::gemm_tile_u8s8(mr, reinterpret_cast<const uint8_t*>(u + r0 * ldu_), ldu_, reinterpret_cast<const int8_t*>(v),
                                ksteps_, ep, dst, ldd, nvalid);
        else if (kernel_ == GemmKernel::u8_pairs) {
          const auto* rows = reinterpret_cast<const uint8_t*>(u + r0 * ldu_);
          int64_t ldr = ldu_;
          if (permuted_[blk]) {
            qint8::permute_rows(mr, rows, ldu_, weights_->perm.data() + blk * kpad_, kpad_, pair_rows);
            rows = pair_rows;
            ldr = kpad_;
          }
          const int32_t f0 = weights_->fix_start[blk], f1 = weights_->fix_start[blk + 1];
          qint8::gemm_tile_u8s8(mr, rows, ldr, reinterpret_cast<const int8_t*>(v), ksteps_, ep, dst, ldd, nvalid,
                                weights_->fixes.data() + f0, f1 - f0);
        }
        else
          qint8::gemm_tile(mr, reinterpret_cast<const int16_t*>(u + r0 * ldu_), ldu_ / 2, reinterpret_cast<const int16_t*>(v),
                           ksteps_, ep, dst, ldd, nvalid);
      }
    }
    if (!nhwc_out_)
      for (int64_t jb = jb0; jb < jb1; ++jb)
        for (int64_t lane = 0; lane < 16 && jb * 16 + lane < ocg_; ++lane) {
          int8_t* dst = y + (n * g_.oc + grp * ocg_ + jb * 16 + lane) * P + p0;
          const int8_t* src = otile + (jb - jb0) * 16 + lane;
          for (int64_t r = 0; r < np; ++r) dst[r] = src[r * ldo];
        }
  }

  Window2d g_;
  Epilogue ep_;
  int32_t zp_in_;
  bool nhwc_in_, nhwc_out_;
  GemmKernel kernel_;
  bool contiguous_taps_ = false, contiguous_rows_ = false;
  uint8_t pad_u8_ = 128;
  int64_t icg_, ocg_, k_, ksteps_ = 0, kpad_ = 0, es_ = 2, tile_m_ = 4, ocb_, block_bytes_ = 0, ldu_ = 0;
  int64_t mbe_ = 1, pblocks_ = 1, occ_ = 1, jpc_ = 1, slots_ = 1;
  std::shared_ptr<const qint8::GemmWeights> weights_;
  int64_t kc_ = 0;  ///< K chunk (pairs) of the K-blocked AVX2 path; 0: one pass
  std::size_t xbytes_ = 0, ubytes_ = 0, obytes_ = 0, abytes_ = 0, rbytes_ = 0;
  std::vector<uint8_t> permuted_;  ///< per block: whether its pairing permutes K (u8_pairs)
};

/// Longest dot product: 127 * 255 * K plus a bias of at most 2^30 stays inside int32.
constexpr int64_t kMaxK = 32768;

/// Whether the layer's weights are int8 values the model fixed (a QDQ file's,
/// or a tuning's) on a grid other than the 7-bit one (every output channel's
/// largest |q| exactly 63): 7-bit kernels would round them again, away from
/// what the file says.
bool fixed_grid_not_7bit(const Layer& layer) {
  const Blob* w = layer.find_weight("weight");
  if (!w || !w->data() || w->shape().rank() < 1 || w->shape()[0] < 1) return false;
  const bool raw = w->dtype() == DType::qint8;  // the file's int8 values themselves
  if (!raw && (w->dtype() != DType::float32 || !core::stored_as_int8(*w))) return false;
  const int64_t oc = w->shape()[0], k = w->numel() / oc;
  const auto& scales = w->quant().scales;
  // Each channel's largest magnitude first, divided by its scale once: every
  // session asks twice per layer (the path's parameters checked, then
  // prepared), and a division per weight took 15% of a hybrid ResNet50's
  // start (perf, load_bench).
  for (int64_t o = 0; o < oc; ++o) {
    const float s = scales.size() == static_cast<std::size_t>(oc) ? scales[static_cast<std::size_t>(o)] : scales.empty() ? 1.0f : scales[0];
    float top = 0;
    if (raw) {
      const int8_t* v = w->data_as<int8_t>() + o * k;
      int m = 0;
      for (int64_t i = 0; i < k; ++i) m = std::max(m, std::abs(static_cast<int>(v[i])));
      top = static_cast<float>(m);
    } else {
      const float* v = w->data_as<float>() + o * k;
      for (int64_t i = 0; i < k; ++i) top = std::max(top, std::fabs(v[i]));
      top = top == 0 ? 0.0f : std::max(0.0f, top / s);  // as the largest |w| / s (a scale <= 0 or NaN: none)
    }
    if (top != 0 && std::nearbyint(top) != 63.0f) return true;
  }
  return false;
}

/// conv2 and dense's routine parameters: vnni (0 or 1), listed only where the
/// CPU has AVX-VNNI (1 elsewhere runs the int16 kernels: the same results);
/// u8s8 (0 or 1), listed only where it does not: vpmaddubsw with 7-bit weights,
/// faster than int16 and not as exact (the tuner's accuracy budget decides);
/// never for int8 weights the model fixed on another grid. A file asking for u8s8 runs it
/// on any AVX2 CPU, so its outputs are as tuned.
std::vector<RoutineParamSpec> gemm_space(const Layer& layer) {
  if (qint8::vnni_usable()) return {{"vnni", {0, 1}}};
  if (fixed_grid_not_7bit(layer)) return {{"u8s8", {0}}};  // a path naming u8s8=0 stays valid
  return {{"u8s8", {0, 1}}};
}
GemmKernel gemm_kernel(const RoutineParams& params) {
  if (routine_param(params, "u8s8", 0) != 0) return GemmKernel::u8s8;
  if (routine_param(params, "vnni", 0) != 0 && qint8::vnni_usable()) return GemmKernel::vnni;
  return GemmKernel::int16;
}
int gemm_weight_qmax(const RoutineParams& params) { return kernel_qmax(gemm_kernel(params)); }

bool is_depthwise(const Window2d& g) { return g.group > 1 && g.c == g.group && g.oc == g.group; }

class DenseRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return "dense"; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  std::vector<RoutineParamSpec> param_space(const LayerInfo& info, const Schema&) const override { return gemm_space(*info.layer); }
  int weight_qmax(const RoutineParams& params) const override { return gemm_weight_qmax(params); }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (Support c = routine_support(info, s); !c) return c;
    const Layer& l = *info.layer;
    if (Support w = core::int8_routine_weight(l, "weight", true); !w) return w;
    if (Support b = core::int8_routine_weight(l, "bias", false); !b) return b;
    const Shape& x = info.input_shapes[0];
    if (x.rank() < 1) return Support::no("dense needs an input of rank >= 1");
    if (s == kNhwc && x.rank() > 2) return Support::no("in nhwc, dense reads rank <= 2 inputs (the rows must be contiguous)");
    if (l.weight("weight").shape().rank() != 2) return Support::no("dense weight must be [O, K]");
    if (x[x.rank() - 1] > kMaxK) return Support::no(fmt::format("a dot product of more than {} terms could overflow int32", kMaxK));
    return activation_epilogue(l, out_q(info), nullptr);
  }
  std::shared_ptr<const PackedWeights> pack(const PackInfo& p, const Schema&, const RoutineParams& params) const override {
    const Layer& l = *p.layer;
    const Blob& w = l.weight("weight");
    Epilogue ep;
    activation_epilogue(l, out_q(p), &ep);
    const Blob* b = l.find_weight("bias");
    return pack_gemm(shape_of(w, params), w, b ? b->data_as<float>() : nullptr, ep, in_q(p, 0), out_q(p));
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& p, const Schema&,
                                              const RoutineParams& params) const override {
    return unpack_gemm(bytes, shape_of(p.layer->weight("weight"), params));
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema& s, const RoutineParams& params,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("{} cannot run this dense: {}", make_descriptor(s, algorithm()), ok.reason));
    const Layer& l = *info.layer;
    const Shape& x = info.input_shapes[0];
    const Blob& w = l.weight("weight");
    Window2d g{};
    g.n = 1;
    g.c = x[x.rank() - 1];
    g.h = x.numel() / std::max<int64_t>(1, g.c);
    g.w = 1;
    g.oc = w.shape()[0];
    g.oh = g.h;
    g.ow = 1;
    g.kh = g.kw = g.sh = g.sw = g.dh = g.dw = 1;
    g.pt = g.pl = g.pb = g.pr = 0;
    g.group = 1;
    Epilogue ep;
    activation_epilogue(l, out_q(info), &ep);
    return std::make_unique<GemmConv>(info, g, ep, in_q(info, 0), true, true, routine_param(params, "mb", 0),
                                      gemm_kernel(params), std::dynamic_pointer_cast<const qint8::GemmWeights>(std::move(packed)));
  }

 private:
  /// The dense's weights [O, K] as a GEMM of 1x1 taps.
  static GemmShape shape_of(const Blob& w, const RoutineParams& params) {
    return GemmShape{w.shape()[0], w.shape()[1], 1, 1, 1, gemm_kernel(params)};
  }
};

// ---------------------------------------------------------------------------
// Depthwise conv2: vectors over channels, tap pairs by vpmaddwd.

constexpr int kMaxTaps = 64;

class DepthwiseConv final : public PreparedRoutine {
 public:
  DepthwiseConv(const Window2d& g, const Blob& weight, const float* bias, const Epilogue& ep, TQ in, TQ out, bool nhwc)
      : g_(g), ep_(ep), nhwc_(nhwc) {
    taps_ = static_cast<int>(g.kh * g.kw);
    cpad_ = round_up(g.c, 16);
    QuantWeights qw = core::channel_int8(weight);
    const int64_t pairs = ceil_div(taps_, 2);
    packed_ = Blob::allocate(Shape{pairs * cpad_ * 2 * 2}, DType::quint8);
    auto* v = static_cast<int16_t*>(packed_.data());
    bias_.assign(static_cast<std::size_t>(cpad_), 0);
    mult_.assign(static_cast<std::size_t>(cpad_), 0.0f);
    for (int64_t ch = 0; ch < g.c; ++ch) {
      const int pi = qint8::dw_pack_index(static_cast<int>(ch));
      const float sw = qw.scale[static_cast<std::size_t>(ch)];
      int32_t wsum = 0;
      for (int t = 0; t < taps_; ++t) {
        v[((t / 2) * cpad_ + pi) * 2 + (t & 1)] = qw.q[static_cast<std::size_t>(ch * taps_ + t)];
        wsum += qw.q[static_cast<std::size_t>(ch * taps_ + t)];
      }
      // The kernel reads the int8 values as they are (padding: the zero point): take zp * sum(w) off here.
      bias_[static_cast<std::size_t>(pi)] = (bias ? quantise_bias(bias[ch], in.scale, sw) : 0) - in.zp * wsum;
      mult_[static_cast<std::size_t>(pi)] = output_multiplier(ep, in.scale, sw, out.scale);
    }
    zero_row_.assign(static_cast<std::size_t>(cpad_), static_cast<int8_t>(in.zp));
    ep_.bias = bias_.data();
    ep_.mult = mult_.data();
    in_bytes_ = nhwc ? 0 : align64(static_cast<std::size_t>(g.n * g.c * g.h * g.w));
    out_bytes_ = nhwc ? 0 : align64(static_cast<std::size_t>(g.n * g.c * g.oh * g.ow));
  }
  std::size_t workspace_bytes() const override { return in_bytes_ + out_bytes_; }
  void run(const RunArgs& a) override {
    const int8_t* x = a.inputs[0]->data_as<int8_t>();
    int8_t* y = a.outputs[0]->data_as<int8_t>();
    char* ws = static_cast<char*>(a.workspace);
    int8_t* yn = y;
    if (!nhwc_) {
      transpose_to_nhwc(x, reinterpret_cast<int8_t*>(ws), g_.n, g_.c, g_.h * g_.w, a.pool);
      x = reinterpret_cast<const int8_t*>(ws);
      yn = reinterpret_cast<int8_t*>(ws + in_bytes_);
    }
    // Output pixels whose taps all lie inside the row: [ox0, ox1), one kernel call per row.
    const int64_t reach = (g_.kw - 1) * g_.dw;
    const int64_t ox0 = std::min(g_.ow, ceil_div(g_.pl, g_.sw));
    const int64_t ox1 = g_.w - 1 - reach + g_.pl < 0 ? ox0 : std::clamp((g_.w - 1 - reach + g_.pl) / g_.sw + 1, ox0, g_.ow);
    const auto* w = static_cast<const int16_t*>(packed_.data());
    a.pool->parallel_for(g_.n * g_.oh, 1, [&](int64_t b, int64_t e) {
      const int8_t* taps[kMaxTaps];
      int64_t steps[kMaxTaps];
      for (int64_t row = b; row < e; ++row) {
        const int64_t n = row / g_.oh, oy = row % g_.oh;
        int8_t* out = yn + (n * g_.oh + oy) * g_.ow * g_.c;
        // Taps at output pixel ox; padding reads the zero-point row.
        auto set_taps = [&](int64_t ox) {
          for (int64_t ki = 0; ki < g_.kh; ++ki) {
            const int64_t iy = oy * g_.sh - g_.pt + ki * g_.dh;
            for (int64_t kj = 0; kj < g_.kw; ++kj) {
              const int64_t ix = ox * g_.sw - g_.pl + kj * g_.dw, t = ki * g_.kw + kj;
              const bool inside = iy >= 0 && iy < g_.h && ix >= 0 && ix < g_.w;
              taps[t] = inside ? x + ((n * g_.h + iy) * g_.w + ix) * g_.c : zero_row_.data();
              steps[t] = inside ? g_.sw * g_.c : 0;  // along the row while ix stays inside
            }
          }
        };
        for (int64_t ox = 0; ox < g_.ow; ++ox) {
          if (ox == ox0 && ox1 > ox0) {
            set_taps(ox0);
            qint8::depthwise_pixels(taps, steps, taps_, ox1 - ox0, g_.c, cpad_, w, ep_, out + ox0 * g_.c, g_.c);
            ox = ox1 - 1;
            continue;
          }
          set_taps(ox);
          qint8::depthwise_pixels(taps, steps, taps_, 1, g_.c, cpad_, w, ep_, out + ox * g_.c, g_.c);
        }
      }
    });
    if (!nhwc_) transpose_to_nchw(yn, y, g_.n, g_.c, g_.oh * g_.ow, a.pool);
  }

 private:
  Window2d g_;
  Epilogue ep_;
  bool nhwc_;
  int taps_ = 0;
  int64_t cpad_ = 0;
  Blob packed_;
  std::vector<int32_t> bias_;
  std::vector<float> mult_;
  std::vector<int8_t> zero_row_;  ///< cpad values of the input's zero point: a padded tap's
  std::size_t in_bytes_ = 0, out_bytes_ = 0;
};

Support depthwise_support(const LayerInfo& info, const Window2d& g) {
  if (g.kh * g.kw > kMaxTaps) return Support::no(fmt::format("depthwise kernel of {} taps; at most {}", g.kh * g.kw, kMaxTaps));
  return activation_epilogue(*info.layer, out_q(info), nullptr);
}

Support gemm_support(const LayerInfo& info, const Window2d& g) {
  if (g.kh * g.kw * (g.c / g.group) > kMaxK) return Support::no(fmt::format("a dot product of more than {} terms could overflow int32", kMaxK));
  return activation_epilogue(*info.layer, out_q(info), nullptr);
}

/// conv2: depthwise on its own kernel, everything else on the GEMM (a rule).
class ConvRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (Support c = routine_support(info, s); !c) return c;
    const Layer& l = *info.layer;
    if (Support w = core::int8_routine_weight(l, "weight", true); !w) return w;
    if (Support b = core::int8_routine_weight(l, "bias", false); !b) return b;
    if (info.input_shapes[0].rank() != 4) return Support::no("conv2 input must be 4-D");
    Window2d g = core::conv2_window(l, info.input_shapes[0]);
    return is_depthwise(g) ? depthwise_support(info, g) : gemm_support(info, g);
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo& info, const Schema&) const override {
    if (info.input_shapes.empty() || info.input_shapes[0].rank() != 4) return {};
    if (is_depthwise(core::conv2_window(*info.layer, info.input_shapes[0]))) return {};
    return gemm_space(*info.layer);
  }
  int weight_qmax(const RoutineParams& params) const override { return gemm_weight_qmax(params); }
  /// GEMM convolutions pack; depthwise ones (DepthwiseConv) pack nothing.
  std::shared_ptr<const PackedWeights> pack(const PackInfo& p, const Schema&, const RoutineParams& params) const override {
    const Layer& l = *p.layer;
    const std::optional<GemmShape> shape = gemm_shape_of(l, params);
    if (!shape) return nullptr;
    Epilogue ep;
    activation_epilogue(l, out_q(p), &ep);
    const Blob* b = l.find_weight("bias");
    return pack_gemm(*shape, l.weight("weight"), b ? b->data_as<float>() : nullptr, ep, in_q(p, 0), out_q(p));
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& p, const Schema&,
                                              const RoutineParams& params) const override {
    const std::optional<GemmShape> shape = gemm_shape_of(*p.layer, params);
    return shape ? unpack_gemm(bytes, *shape) : nullptr;
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema& s, const RoutineParams& params,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("{} cannot run this conv2: {}", make_descriptor(s, algorithm()), ok.reason));
    const Layer& l = *info.layer;
    Window2d g = core::conv2_window(l, info.input_shapes[0]);
    Epilogue ep;
    activation_epilogue(l, out_q(info), &ep);
    const Blob* b = l.find_weight("bias");
    const bool nhwc = s == kNhwc;
    if (is_depthwise(g))
      return std::make_unique<DepthwiseConv>(g, l.weight("weight"), b ? b->data_as<float>() : nullptr, ep,
                                             in_q(info, 0), out_q(info), nhwc);
    return std::make_unique<GemmConv>(info, g, ep, in_q(info, 0), nhwc, nhwc, routine_param(params, "mb", 0),
                                      gemm_kernel(params), std::dynamic_pointer_cast<const qint8::GemmWeights>(std::move(packed)));
  }

 private:
  /// The convolution as a GEMM from its weights [OC, C/group, KH, KW] and
  /// groups; nothing for a depthwise one (one input and output channel a group).
  static std::optional<GemmShape> gemm_shape_of(const Layer& l, const RoutineParams& params) {
    const Shape& w = l.weight("weight").shape();
    const int64_t group = l.get_int("group", 1);
    if (group > 1 && w[1] == 1 && w[0] == group) return std::nullopt;
    return GemmShape{w[0], w[1], w[2], w[3], group, gemm_kernel(params)};
  }
};

// ---------------------------------------------------------------------------
// pool2: max (then requantised; requantisation is monotonic) and avg (int32 sums).

class Pool final : public PreparedRoutine {
 public:
  Pool(const Window2d& g, bool is_max, bool include_pad, TQ in, TQ out, bool nhwc, int64_t slots)
      : g_(g), max_(is_max), include_pad_(include_pad), in_(in), out_(out), nhwc_(nhwc) {
    m_ = static_cast<float>(double(in.scale) / double(out.scale));
    slots_ = slots;
    slot_bytes_ = align64(static_cast<std::size_t>(g.c) * sizeof(int32_t));
  }
  std::size_t workspace_bytes() const override { return nhwc_ ? static_cast<std::size_t>(slots_) * slot_bytes_ : 0; }
  void run(const RunArgs& a) override {
    const int8_t* x = a.inputs[0]->data_as<int8_t>();
    int8_t* y = a.outputs[0]->data_as<int8_t>();
    if (!nhwc_) return run_nchw(x, y, a.pool);
    char* ws = static_cast<char*>(a.workspace);
    run_tasks(a.pool, slots_, g_.n * g_.oh, [&](int64_t row, int64_t slot) {
      char* scratch = ws + static_cast<std::size_t>(slot) * slot_bytes_;
      const int64_t n = row / g_.oh, oy = row % g_.oh;
      for (int64_t ox = 0; ox < g_.ow; ++ox) {
        int8_t* dst = y + ((n * g_.oh + oy) * g_.ow + ox) * g_.c;
        int64_t inside = 0, padded = 0;
        auto* acc8 = reinterpret_cast<int8_t*>(scratch);
        auto* acc32 = reinterpret_cast<int32_t*>(scratch);
        if (max_) std::memset(acc8, -128, static_cast<std::size_t>(g_.c));
        else std::memset(acc32, 0, static_cast<std::size_t>(g_.c) * sizeof(int32_t));
        for (int64_t ki = 0; ki < g_.kh; ++ki) {
          const int64_t iy = oy * g_.sh - g_.pt + ki * g_.dh;
          for (int64_t kj = 0; kj < g_.kw; ++kj) {
            const int64_t ix = ox * g_.sw - g_.pl + kj * g_.dw;
            if (iy >= -g_.pt && iy < g_.h + g_.pb && ix >= -g_.pl && ix < g_.w + g_.pr) ++padded;
            if (iy < 0 || iy >= g_.h || ix < 0 || ix >= g_.w) continue;
            ++inside;
            const int8_t* src = x + ((n * g_.h + iy) * g_.w + ix) * g_.c;
            if (max_) qint8::max_s8(acc8, src, g_.c);
            else qint8::sum_s8(acc32, src, g_.c);
          }
        }
        if (max_) {
          if (inside == 0) std::memset(dst, -128, static_cast<std::size_t>(g_.c));  // -inf
          else qint8::requant(acc8, dst, g_.c, in_.zp, m_, out_.zp, -128, 127);
        } else {
          const int64_t div = include_pad_ ? padded : inside;
          const float m = div ? static_cast<float>(double(in_.scale) / (double(out_.scale) * double(div))) : 0.0f;
          qint8::sum_requant(acc32, dst, g_.c, static_cast<int32_t>(inside * in_.zp), m, out_.zp);
        }
      }
    });
  }

 private:
  void run_nchw(const int8_t* x, int8_t* y, ThreadPool* pool) const {
    if (g_.oh == 1 && g_.ow == 1 && g_.kh == g_.h && g_.kw == g_.w && g_.pt == 0 && g_.pl == 0) {
      // One window over each whole plane (global pooling): vector reductions.
      const int64_t plane = g_.h * g_.w;
      const float m = static_cast<float>(double(in_.scale) / (double(out_.scale) * double(plane)));  // every tap is inside
      pool->parallel_for(g_.n * g_.c, 16, [&](int64_t b, int64_t e) {
        for (int64_t nc = b; nc < e; ++nc) {
          const int8_t* xp = x + nc * plane;
          y[nc] = max_ ? qint8::requant_one(qint8::max_all_s8(xp, plane) - in_.zp, m_, out_.zp, -128, 127)
                       : qint8::requant_one(qint8::sum_all_s8(xp, plane) - static_cast<int32_t>(plane) * in_.zp, m, out_.zp, -128, 127);
        }
      });
      return;
    }
    pool->parallel_for(g_.n * g_.c, 1, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int8_t* xp = x + nc * g_.h * g_.w;
        int8_t* yp = y + nc * g_.oh * g_.ow;
        for (int64_t oy = 0; oy < g_.oh; ++oy)
          for (int64_t ox = 0; ox < g_.ow; ++ox) {
            int32_t mx = -128, sum = 0;
            int64_t inside = 0, padded = 0;
            for (int64_t ki = 0; ki < g_.kh; ++ki) {
              const int64_t iy = oy * g_.sh - g_.pt + ki * g_.dh;
              for (int64_t kj = 0; kj < g_.kw; ++kj) {
                const int64_t ix = ox * g_.sw - g_.pl + kj * g_.dw;
                if (iy >= -g_.pt && iy < g_.h + g_.pb && ix >= -g_.pl && ix < g_.w + g_.pr) ++padded;
                if (iy < 0 || iy >= g_.h || ix < 0 || ix >= g_.w) continue;
                ++inside;
                const int32_t v = xp[iy * g_.w + ix];
                mx = std::max(mx, v);
                sum += v;
              }
            }
            int8_t& out = yp[oy * g_.ow + ox];
            if (max_) {
              out = inside ? qint8::requant_one(mx - in_.zp, m_, out_.zp, -128, 127) : int8_t{-128};
            } else {
              const int64_t div = include_pad_ ? padded : inside;
              const float m = div ? static_cast<float>(double(in_.scale) / (double(out_.scale) * double(div))) : 0.0f;
              out = qint8::requant_one(sum - static_cast<int32_t>(inside) * in_.zp, m, out_.zp, -128, 127);
            }
          }
      }
    });
  }

  Window2d g_;
  bool max_, include_pad_;
  TQ in_, out_;
  bool nhwc_;
  float m_ = 1;
  int64_t slots_ = 1;
  std::size_t slot_bytes_ = 0;
};

class PoolRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return "pool2"; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (Support c = routine_support(info, s); !c) return c;
    const std::string mode = info.layer->get_string("mode", "");
    if (mode != "max" && mode != "avg") return Support::no(fmt::format("pool mode '{}' (max and avg only)", mode));
    if (info.input_shapes[0].rank() != 4) return Support::no("pool2 input must be 4-D");
    Window2d g = core::pool2_window(*info.layer, info.input_shapes[0]);
    if (g.kh * g.kw > (int64_t{1} << 23)) return Support::no("window too large for int32 sums");
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& s, const RoutineParams&) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("cpu:qint8/qint8 cannot run this pool2: {}", ok.reason));
    const Layer& l = *info.layer;
    return std::make_unique<Pool>(core::pool2_window(l, info.input_shapes[0]), l.get_string("mode") == "max",
                                  l.get_int("count_include_pad", 0) != 0, in_q(info, 0), out_q(info), s == kNhwc,
                                  team_threads(info));
  }
};

// ---------------------------------------------------------------------------
// add: same shapes, each input requantised to the output scale (one fma);
// a fused relu or clip is the clamp of the requantised sum.

class Add final : public PreparedRoutine {
 public:
  Add(int64_t n, TQ a, TQ b, TQ y, int lo, int hi) : n_(n), a_(a), b_(b), y_(y), lo_(lo), hi_(hi) {
    ma_ = static_cast<float>(double(a.scale) / double(y.scale));
    mb_ = static_cast<float>(double(b.scale) / double(y.scale));
  }
  void run(const RunArgs& args) override {
    const int8_t* a = args.inputs[0]->data_as<int8_t>();
    const int8_t* b = args.inputs[1]->data_as<int8_t>();
    int8_t* y = args.outputs[0]->data_as<int8_t>();
    args.pool->parallel_for(ceil_div(n_, 64), 256, [&](int64_t lo, int64_t hi) {
      const int64_t s = lo * 64, e = std::min(n_, hi * 64);
      qint8::add_requant(a + s, b + s, y + s, e - s, a_.zp, ma_, b_.zp, mb_, y_.zp, lo_, hi_);
    });
  }

 private:
  int64_t n_;
  TQ a_, b_, y_;
  int lo_, hi_;
  float ma_ = 1, mb_ = 1;
};

class AddRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return "add"; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (Support c = routine_support(info, s); !c) return c;
    if (info.input_shapes[0] != info.input_shapes[1] || info.input_shapes[0] != info.output_shapes[0])
      return Support::no(fmt::format("inputs {} and {} differ: no broadcasting in qint8 add",
                                     info.input_shapes[0].to_string(), info.input_shapes[1].to_string()));
    if (core::requantizes_as_tflite(*info.layer))
      return Support::no("a TensorFlow Lite int8 add rounds with fixed-point multipliers; this routine sums in float");
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& s, const RoutineParams&) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("cpu:qint8/qint8 cannot run this add: {}", ok.reason));
    Epilogue ep;  // relu/clip (the only activations add takes): the clamp bounds
    if (Support ok = activation_epilogue(*info.layer, out_q(info), &ep); !ok)
      throw Error(fmt::format("cpu:qint8/qint8 cannot run this add: {}", ok.reason));
    return std::make_unique<Add>(info.output_shapes[0].numel(), in_q(info, 0), in_q(info, 1), out_q(info), ep.lo, ep.hi);
  }
};

/// A 256-entry table applied to every element (indexed by the byte as uint8_t).
class Lut final : public PreparedRoutine {
 public:
  Lut(int64_t n, const int8_t* table) : n_(n) {
    std::memcpy(table_, table, 256);
    identity_ = core::int8_table_identity(table_);
  }
  bool output_is_input() const override { return identity_; }
  void run(const RunArgs& a) override {
    const int8_t* x = a.inputs[0]->data_as<int8_t>();
    int8_t* y = a.outputs[0]->data_as<int8_t>();
    if (identity_) {  // an imported QDQ model's fake_quant between int8 layers: a copy (the table: 1 ns a byte)
      if (x != y) std::memmove(y, x, static_cast<std::size_t>(n_));
      return;
    }
    const bool simd = qint8::avx2_usable();
    a.pool->parallel_for(n_, 16384, [&](int64_t b, int64_t e) {
      if (simd) return qint8::lookup(x + b, y + b, e - b, table_);
      for (int64_t i = b; i < e; ++i) y[i] = table_[static_cast<uint8_t>(x[i])];
    });
  }

 private:
  int64_t n_;
  int8_t table_[256];
  bool identity_ = false;
};

// ---------------------------------------------------------------------------
// mul: same shapes, or one input broadcast per channel ([N or 1, C, 1, 1], the
// squeeze-excite gate): y = s_a s_b (a - za)(b - zb) / s_y, requantised.

class Mul final : public PreparedRoutine {
 public:
  Mul(const LayerInfo& info, bool nhwc) : nhwc_(nhwc) {
    const Shape& a = info.input_shapes[0];
    const Shape& b = info.input_shapes[1];
    big_ = a == info.output_shapes[0] ? 0 : 1;  // the input with the output's shape
    const TQ qa = in_q(info, 0), qb = in_q(info, 1);
    q_big_ = big_ == 0 ? qa : qb;
    q_small_ = big_ == 0 ? qb : qa;
    y_ = out_q(info);
    m_ = static_cast<float>(double(qa.scale) * double(qb.scale) / double(y_.scale));
    const Shape& out = info.output_shapes[0];
    n_ = out.numel();
    broadcast_ = a != b;
    if (broadcast_) {
      batch_ = out[0];
      c_ = out[1];
      plane_ = out.numel() / (out[0] * out[1]);
      small_batch_ = (big_ == 0 ? b : a)[0];
      per_channel_.resize(static_cast<std::size_t>(batch_ * c_));
    }
  }
  /// x * table[x] (YOLOv8's SiLU: x times its sigmoid's table) by the same
  /// arithmetic run() uses, for every int8 x: one table.
  std::unique_ptr<PreparedRoutine> gated_by_table(std::size_t gated, const int8_t* table) const override {
    if (broadcast_ || gated > 1) return nullptr;
    alignas(64) int8_t x[256], g[256], y[256];
    for (int u = 0; u < 256; ++u) x[u] = static_cast<int8_t>(static_cast<uint8_t>(u)), g[u] = table[u];
    // Input 0 is run()'s first operand (big_ is 0 for same shapes).
    qint8::mul_requant(gated == 0 ? g : x, gated == 0 ? x : g, y, 256, q_big_.zp, q_small_.zp, m_, y_.zp);
    return std::make_unique<Lut>(n_, y);
  }
  void run(const RunArgs& args) override {
    const int8_t* big = args.inputs[static_cast<std::size_t>(big_)]->data_as<int8_t>();
    const int8_t* small = args.inputs[static_cast<std::size_t>(1 - big_)]->data_as<int8_t>();
    int8_t* y = args.outputs[0]->data_as<int8_t>();
    if (!broadcast_) {
      args.pool->parallel_for(ceil_div(n_, 64), 256, [&](int64_t b, int64_t e) {
        const int64_t s = b * 64, t = std::min(n_, e * 64);
        qint8::mul_requant(big + s, small + s, y + s, t - s, q_big_.zp, q_small_.zp, m_, y_.zp);
      });
      return;
    }
    // One multiplier per (image, channel): m * (gate - zero point).
    for (int64_t i = 0; i < batch_ * c_; ++i) {
      const int64_t img = small_batch_ == 1 ? 0 : i / c_, ch = i % c_;
      per_channel_[static_cast<std::size_t>(i)] = m_ * static_cast<float>(small[img * c_ + ch] - q_small_.zp);
    }
    const float* f = per_channel_.data();
    if (!nhwc_) {
      args.pool->parallel_for(batch_ * c_, 4, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          qint8::requant(big + i * plane_, y + i * plane_, plane_, q_big_.zp, f[i], y_.zp, -128, 127);
      });
    } else {
      args.pool->parallel_for(batch_ * plane_, 16, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p)
          qint8::requant_each(big + p * c_, y + p * c_, c_, q_big_.zp, f + (p / plane_) * c_, y_.zp);
      });
    }
  }

 private:
  bool nhwc_, broadcast_ = false;
  int big_ = 0;
  TQ q_big_, q_small_, y_;
  float m_ = 1;
  int64_t n_ = 0, batch_ = 1, c_ = 1, plane_ = 1, small_batch_ = 1;
  std::vector<float> per_channel_;  // sized in prepare; run() only writes it
};

class MulRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return "mul"; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (Support c = routine_support(info, s); !c) return c;
    const Shape& a = info.input_shapes[0];
    const Shape& b = info.input_shapes[1];
    const Shape& out = info.output_shapes[0];
    if (a == b) return Support::yes();
    // One input [N or 1, C, 1, ...] against the other of the output's shape.
    const Shape& big = a == out ? a : b;
    const Shape& small = a == out ? b : a;
    if (big != out || out.rank() < 3 || small.rank() != out.rank())
      return Support::no(fmt::format("broadcasts only a per-channel gate, not {} x {}", a.to_string(), b.to_string()));
    bool gate = (small[0] == 1 || small[0] == out[0]) && small[1] == out[1];
    for (int d = 2; d < out.rank(); ++d) gate = gate && small[d] == 1;
    if (!gate) return Support::no(fmt::format("broadcasts only a per-channel gate [N,C,1,1], not {}", small.to_string()));
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& s, const RoutineParams&) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("cpu:qint8/qint8 cannot run this mul: {}", ok.reason));
    return std::make_unique<Mul>(info, s == kNhwc);
  }
  /// Mul::gated_by_table: inputs of one shape.
  bool gates_by_table(const LayerInfo& info, const Schema& s, std::size_t gated) const override {
    return gated < 2 && info.input_shapes.size() == 2 && info.input_shapes[0] == info.input_shapes[1] && supports(info, s);
  }
};

// ---------------------------------------------------------------------------
// Elementwise requantisation: relu, clip (clamps in the quantised domain) and copies.

class Requant final : public PreparedRoutine {
 public:
  Requant(int64_t n, TQ x, TQ y, int32_t lo, int32_t hi) : n_(n), x_(x), y_(y), lo_(lo), hi_(hi) {
    m_ = static_cast<float>(double(x.scale) / double(y.scale));
    identity_ = x.scale == y.scale && x.zp == y.zp && lo == -128 && hi == 127;
  }
  bool output_is_input() const override { return identity_; }
  void run(const RunArgs& a) override {
    const int8_t* x = a.inputs[0]->data_as<int8_t>();
    int8_t* y = a.outputs[0]->data_as<int8_t>();
    if (identity_) {
      if (x != y) std::memmove(y, x, static_cast<std::size_t>(n_));
      return;
    }
    a.pool->parallel_for(ceil_div(n_, 64), 256, [&](int64_t b, int64_t e) {
      const int64_t s = b * 64, t = std::min(n_, e * 64);
      qint8::requant(x + s, y + s, t - s, x_.zp, m_, y_.zp, lo_, hi_);
    });
  }

 private:
  int64_t n_;
  TQ x_, y_;
  int32_t lo_, hi_;
  float m_ = 1;
  bool identity_ = false;
};

/// relu / clip: y = quantise_out(act(dequantise_in(x))) = requantisation clamped to act's bounds.
template <bool kClip>
class ActRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return kClip ? "clip" : "relu"; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override { return routine_support(info, s); }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& s, const RoutineParams&) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("cpu:qint8/qint8 cannot run this {}: {}", layer_type(), ok.reason));
    const TQ y = out_q(info);
    core::Activation act;  // the layer as the activation it would be if fused
    act.kind = kClip ? core::Activation::clip : core::Activation::relu;
    act.min = static_cast<float>(info.layer->get_float("min", -std::numeric_limits<double>::infinity()));
    act.max = static_cast<float>(info.layer->get_float("max", std::numeric_limits<double>::infinity()));
    const Int8Bounds b = int8_bounds(act, y);
    return std::make_unique<Requant>(info.input_shapes[0].numel(), in_q(info, 0), y, b.lo, b.hi);
  }
};

// ---------------------------------------------------------------------------
// Other unary activations by a 256-entry table: every int8 input value maps to
// quantise_out(f(dequantise_in(q))), with f computed exactly as cpu/ref does,
// so the results equal the reference's bit for bit.

class LutRoutine : public Routine {
 public:
  explicit LutRoutine(std::string_view type) : type_(type) {}
  std::string_view layer_type() const override { return type_; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override { return routine_support(info, s); }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& s, const RoutineParams&) const override {
    int8_t table[256];
    if (!int8_table(info, s, table)) throw Error(fmt::format("cpu:qint8/qint8 cannot run this {}: {}", type_, supports(info, s).reason));
    return std::make_unique<Lut>(info.input_shapes[0].numel(), table);
  }
  bool int8_table(const LayerInfo& info, const Schema& s, int8_t (&table)[256]) const override {
    if (!supports(info, s)) return false;
    const Layer& l = *info.layer;
    const TQ x = in_q(info, 0), y = out_q(info);
    // The formulas of cpu/ref (src/routines/cpu/ref.cpp), in the same precision.
    if (type_ == "hardsigmoid") {
      const double alpha = l.get_float("alpha", 0.2), beta = l.get_float("beta", 0.5);
      cpu::int8_table(table, x, y, [&](float v) { return static_cast<float>(std::min(std::max(alpha * double(v) + beta, 0.0), 1.0)); });
    } else if (type_ == "hardswish") {
      cpu::int8_table(table, x, y, [](float v) {
        const double r6 = std::min(std::max(double(v) + 3.0, 0.0), 6.0);
        return static_cast<float>(double(v) * r6 / 6.0);
      });
    } else if (type_ == "sigmoid") {
      cpu::int8_table(table, x, y, [](float v) { return static_cast<float>(1.0 / (1.0 + std::exp(-double(v)))); });
    } else if (type_ == "silu") {
      cpu::int8_table(table, x, y, [](float v) { return static_cast<float>(double(v) / (1.0 + std::exp(-double(v)))); });
    } else if (type_ == "tanh") {
      cpu::int8_table(table, x, y, [](float v) { return static_cast<float>(std::tanh(double(v))); });
    } else {  // gelu
      const bool tanh_approx = l.get_string("approximate", "none") == "tanh";
      cpu::int8_table(table, x, y, [&](float v) {
        const double d = v;
        if (tanh_approx) {
          const double k = std::sqrt(2.0 / 3.14159265358979323846);
          return static_cast<float>(0.5 * d * (1.0 + std::tanh(k * (d + 0.044715 * d * d * d))));
        }
        return static_cast<float>(0.5 * d * (1.0 + std::erf(d / std::sqrt(2.0))));
      });
    }
    return true;
  }

 private:
  std::string_view type_;
};

/// fake_quant by the same table: quantise_out(FakeQuant::apply(dequantise_in(q))),
/// exact for any input and output quantisation (an imported QDQ model's blobs
/// carry the layer's own: then the table is the identity).
class FakeQuantRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return "fake_quant"; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override { return routine_support(info, s); }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& s, const RoutineParams&) const override {
    int8_t table[256];
    if (!int8_table(info, s, table))
      throw Error(fmt::format("cpu:qint8/qint8 cannot run this fake_quant: {}", supports(info, s).reason));
    return std::make_unique<Lut>(info.input_shapes[0].numel(), table);
  }
  bool int8_table(const LayerInfo& info, const Schema& s, int8_t (&table)[256]) const override {
    if (!supports(info, s)) return false;
    const core::FakeQuant q = core::fake_quant_params(*info.layer);
    cpu::int8_table(table, in_q(info, 0), out_q(info), [&](float v) { return q.apply(v); });
    return true;
  }
};

struct HardsigmoidLut : LutRoutine { HardsigmoidLut() : LutRoutine("hardsigmoid") {} };
struct HardswishLut : LutRoutine { HardswishLut() : LutRoutine("hardswish") {} };
struct SigmoidLut : LutRoutine { SigmoidLut() : LutRoutine("sigmoid") {} };
struct SiluLut : LutRoutine { SiluLut() : LutRoutine("silu") {} };
struct TanhLut : LutRoutine { TanhLut() : LutRoutine("tanh") {} };
struct GeluLut : LutRoutine { GeluLut() : LutRoutine("gelu") {} };

/// Whether a blob of `shape` lies in the same memory order in nchw and nhwc.
bool layout_trivial(const Shape& s) {
  if (s.rank() < 3) return true;
  int64_t sp = 1;
  for (int i = 2; i < s.rank(); ++i) sp *= s[i];
  return sp == 1 || s[1] == 1;
}

class CopyRoutine : public Routine {
 public:
  explicit CopyRoutine(std::string_view type) : type_(type) {}
  std::string_view layer_type() const override { return type_; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (Support c = routine_support(info, s); !c) return c;
    const bool same_shape = info.input_shapes[0] == info.output_shapes[0];
    if (s == kNhwc && !same_shape && !(layout_trivial(info.input_shapes[0]) && layout_trivial(info.output_shapes[0])))
      return Support::no("in nhwc the element order changes; computed in cpu:qint8 (nchw)");
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& s, const RoutineParams&) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("cpu:qint8/qint8 cannot run this {}: {}", type_, ok.reason));
    return std::make_unique<Requant>(info.input_shapes[0].numel(), in_q(info, 0), out_q(info), -128, 127);
  }

 private:
  std::string_view type_;
};

// ---------------------------------------------------------------------------
// concat and split along any axis: per outer index, each part's chunk copied
// or requantised.

/// A blob seen as [outer, chunk] around `axis`: nhwc puts logical dim 1 last
/// (rank >= 3), so the physical axis and the chunk follow the memory order.
struct AxisChunks {
  std::vector<int> order;  ///< logical dims in memory order
  int physical_axis = 0;
  int64_t outer = 1;
  /// Elements of `s` (a part, same rank) from the axis on: one chunk per outer index.
  int64_t chunk(const Shape& s) const {
    int64_t c = 1;
    for (std::size_t i = static_cast<std::size_t>(physical_axis); i < order.size(); ++i) c *= s[order[i]];
    return c;
  }
};

AxisChunks axis_chunks(const Layer& l, const Shape& whole, const Schema& s, int64_t default_axis) {
  const int rank = whole.rank();
  const int axis = core::normalize_axis(l, "axis", l.get_int("axis", default_axis), rank);
  AxisChunks a;
  for (int d = 0; d < rank; ++d) a.order.push_back(d);
  if (s == kNhwc && rank >= 3) {
    a.order.erase(a.order.begin() + 1);
    a.order.push_back(1);
  }
  a.physical_axis = static_cast<int>(std::find(a.order.begin(), a.order.end(), axis) - a.order.begin());
  for (int i = 0; i < a.physical_axis; ++i) a.outer *= whole[a.order[static_cast<std::size_t>(i)]];
  return a;
}

/// One input of a concat, or one output of a split: its chunk, where it lies
/// in the whole blob's chunk, and the requantisation between them.
struct ChunkPart {
  int64_t chunk, offset;
  int32_t zp;  ///< the source's zero point
  float m;     ///< source scale / destination scale
  bool same;   ///< the same quantisation: a copy
};

ChunkPart chunk_part(int64_t chunk, int64_t offset, const TQ& from, const TQ& to) {
  return {chunk, offset, from.zp, static_cast<float>(double(from.scale) / double(to.scale)),
          from.scale == to.scale && from.zp == to.zp};
}

void move_chunk(const ChunkPart& p, const int8_t* src, int8_t* dst, int32_t dst_zp) {
  if (p.same) std::memcpy(dst, src, static_cast<std::size_t>(p.chunk));
  else qint8::requant(src, dst, p.chunk, p.zp, p.m, dst_zp, -128, 127);
}

class Concat final : public PreparedRoutine {
 public:
  Concat(const LayerInfo& info, const Schema& s) {
    const AxisChunks a = axis_chunks(*info.layer, info.output_shapes[0], s, 0);
    outer_ = a.outer;
    const TQ y = out_q(info);
    for (std::size_t k = 0; k < info.input_shapes.size(); ++k) {
      parts_.push_back(chunk_part(a.chunk(info.input_shapes[k]), out_chunk_, in_q(info, k), y));
      out_chunk_ += parts_.back().chunk;
    }
    zy_ = y.zp;
  }
  void run(const RunArgs& a) override {
    int8_t* y = a.outputs[0]->data_as<int8_t>();
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out_chunk_));
    a.pool->parallel_for(outer_, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o)
        for (std::size_t k = 0; k < parts_.size(); ++k) {
          const ChunkPart& p = parts_[k];
          move_chunk(p, a.inputs[k]->data_as<int8_t>() + o * p.chunk, y + o * out_chunk_ + p.offset, zy_);
        }
    });
  }

 private:
  std::vector<ChunkPart> parts_;
  int64_t outer_ = 1, out_chunk_ = 0;
  int32_t zy_ = 0;
};

/// YOLOv8's C2f blocks split a convolution's int8 output in two: kept int8,
/// rather than a dequantise, a float split and two quantisations.
class Split final : public PreparedRoutine {
 public:
  Split(const LayerInfo& info, const Schema& s) {
    const AxisChunks a = axis_chunks(*info.layer, info.input_shapes[0], s, 0);
    outer_ = a.outer;
    in_chunk_ = a.chunk(info.input_shapes[0]);
    const TQ x = in_q(info);
    int64_t offset = 0;
    for (std::size_t k = 0; k < info.output_shapes.size(); ++k) {
      const TQ y = out_q(info, k);
      parts_.push_back(chunk_part(a.chunk(info.output_shapes[k]), offset, x, y));
      zy_.push_back(y.zp);
      offset += parts_.back().chunk;
    }
  }
  void run(const RunArgs& a) override {
    const int8_t* x = a.inputs[0]->data_as<int8_t>();
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in_chunk_));
    a.pool->parallel_for(outer_, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o)
        for (std::size_t k = 0; k < parts_.size(); ++k) {
          const ChunkPart& p = parts_[k];
          move_chunk(p, x + o * in_chunk_ + p.offset, a.outputs[k]->data_as<int8_t>() + o * p.chunk, zy_[k]);
        }
    });
  }

 private:
  std::vector<ChunkPart> parts_;
  std::vector<int32_t> zy_;
  int64_t outer_ = 1, in_chunk_ = 0;
};

class SplitRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return "split"; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override { return routine_support(info, s); }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& s, const RoutineParams&) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("cpu:qint8/qint8 cannot run this split: {}", ok.reason));
    return std::make_unique<Split>(info, s);
  }
};

class ConcatRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return "concat"; }
  std::string_view algorithm() const override { return "qint8"; }
  std::vector<Schema> schemas() const override { return {kNchw, kNhwc}; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (Support c = routine_support(info, s); !c) return c;
    if (!info.layer->has("axis")) return Support::no("concat needs an axis");
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& s, const RoutineParams&) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("cpu:qint8/qint8 cannot run this concat: {}", ok.reason));
    return std::make_unique<Concat>(info, s);
  }
};

struct FlattenCopy : CopyRoutine { FlattenCopy() : CopyRoutine("flatten") {} };
struct ReshapeCopy : CopyRoutine { ReshapeCopy() : CopyRoutine("reshape") {} };
struct IdentityCopy : CopyRoutine { IdentityCopy() : CopyRoutine("identity") {} };

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(ConvRoutine);
SOFTNEURO_REGISTER_ROUTINE(DenseRoutine);
SOFTNEURO_REGISTER_ROUTINE(PoolRoutine);
SOFTNEURO_REGISTER_ROUTINE(AddRoutine);
SOFTNEURO_REGISTER_ROUTINE(MulRoutine);
SOFTNEURO_REGISTER_ROUTINE(ConcatRoutine);
SOFTNEURO_REGISTER_ROUTINE(SplitRoutine);
SOFTNEURO_REGISTER_ROUTINE(ActRoutine<false>);
SOFTNEURO_REGISTER_ROUTINE(ActRoutine<true>);
SOFTNEURO_REGISTER_ROUTINE(HardsigmoidLut);
SOFTNEURO_REGISTER_ROUTINE(HardswishLut);
SOFTNEURO_REGISTER_ROUTINE(SigmoidLut);
SOFTNEURO_REGISTER_ROUTINE(SiluLut);
SOFTNEURO_REGISTER_ROUTINE(TanhLut);
SOFTNEURO_REGISTER_ROUTINE(GeluLut);
SOFTNEURO_REGISTER_ROUTINE(FlattenCopy);
SOFTNEURO_REGISTER_ROUTINE(ReshapeCopy);
SOFTNEURO_REGISTER_ROUTINE(IdentityCopy);
SOFTNEURO_REGISTER_ROUTINE(FakeQuantRoutine);

// Names before the family took its file's name (avx2dw: depthwise conv2, now a rule).
namespace {
const struct DescriptorAliases {
  DescriptorAliases() {
    for (const char* schema : {"cpu:qint8", "cpu:qint8:nhwc"}) {
      const std::string s(schema);
      register_descriptor_alias(s + "/avx2", s + "/qint8");
      register_descriptor_alias(s + "/avxvnni", s + "/qint8", {{"vnni", 1}});
      register_descriptor_alias(s + "/avx2dw", s + "/qint8");
    }
  }
} descriptor_aliases;
}  // namespace

}  // namespace softneuro
