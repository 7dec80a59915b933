// cpu:qint8/onednn and cpu:qint8:nhwc/onednn — int8 routines wrapping oneDNN
// 2.6 (s8 activations × s8 weights → s32, requantised to s8 in the primitive's
// epilogue), for conv2 (depthwise and grouped included), dense, pool2 (max, avg,
// global), add and concat.
//
// The project's qint8 conventions (see qint8.cpp) hold unchanged:
//  - activations: signed int8, asymmetric, per tensor (LayerInfo::input_quant /
//    output_quant); uncalibrated layers are refused;
//  - weights: float32 in the .dnn, quantised here in prepare per output channel,
//    symmetric, s_w[oc] = max|w[oc]| / 127, q = round(w / s_w) in [-127, 127],
//    reordered once into the layout oneDNN picks; bias → int32 at s_in·s_w[oc];
//  - requantisation in float: oneDNN 2.x computes
//        dst = saturate_s8(round(post_ops(scale[oc] · (acc_s32 + bias_s32))) + zp_dst)
//    (the round an explicit post-op: oneDNN adds zp_dst in float otherwise)
//    with scale[oc] = s_in·s_w[oc] / s_out in float, XNNPACK's order: TensorFlow
//    Lite's int8 results bit for bit (relu and clip are post-ops on that
//    value, in output units); hardswish/hardsigmoid/sigmoid need the real
//    value, so for them scale[oc] = s_in·s_w[oc] and a linear post-op divides
//    by s_out afterwards.
//
// Zero points (what oneDNN 2.6 accepts on x64, checked on AMX and AVX-512 VNNI):
//  - conv2: a runtime src zero point (DNNL_ARG_ATTR_ZERO_POINTS) where padding
//    reads the input: the kernels compensate for padding themselves, so an
//    asymmetric input with padding stays exact; without padding it is folded
//    into the bias as in dense, and the dst zero point is a post-op after the
//    rounding (zero-point attributes keep oneDNN 2.6 off its brgemm kernels).
//    Output scales must be constants (runtime output scales are refused for
//    int8 convolution), fine: quantisation is fixed at prepare.
//  - dense (inner product): no zero points at all. The src zero point is
//    folded into the int32 bias exactly (no padding: bias' = bias − z_in·Σ_k w_q);
//    the dst zero point is a linear post-op (+z_out) before rounding, which
//    equals adding it after rounding except for exact .5 ties.
//  - pool2: avg pooling rounds once, after a linear post-op (s_in/s_out,
//    z_out − z_in·s_in/s_out); max pooling runs s8 → s8 (exact), then, where
//    the output's quantisation differs, a requantising reorder (monotonic, so
//    the max commutes with it). oneDNN pads avg windows with q = 0, which is
//    real −s·z: count_include_pad with padding and z_in ≠ 0 is refused.
//  - add: binary with per-source scales s_a/s_out, s_b/s_out and a linear
//    post-op adding z_out − (s_a·z_a + s_b·z_b)/s_out.
//  - concat: one concat primitive (a copy); inputs quantised differently from
//    the output are first requantised by a reorder into a workspace temporary
//    (2.6's reorder silently drops zero points when writing into a part of a
//    larger tensor, so not directly into the output).
//
// Layouts: int8 oneDNN wants channels last. In cpu:qint8:nhwc the blobs are
// read as they are; in cpu:qint8 (nchw) a conv2 whose nchw primitive would be
// oneDNN's reference code reorders its input and output through nhwc
// temporaries in the workspace.
//
// On CPUs without AVX-512 VNNI (AVX2 only, e.g. Zen 3) oneDNN 2.6's int8
// convolution and inner product use vpmaddubsw and halve the weights inside
// (scale_adjust 0.5, against int16 saturation): 7-bit weights, off the
// project's 8-bit convention by up to two output steps (measured with
// DNNL_MAX_CPU_ISA=AVX2). conv2 and dense refuse there ("needs VNNI"; our
// exact AVX2 routines run instead); pool2, add and concat have no weights and
// run on AVX2 too.
//
// Ranked above our AVX2 qint8 routines in src/routines/default_order.cpp:
// measured faster on the AMX machine for conv2/dense (bench/quant_agreement.py);
// only matters for forced qint8 schemas, the tuner decides by measurement.
//
// Engine, threads, scratchpad and the allocation-free run are shared with the
// float32 routines (onednn_common.hpp).
#include "routines/cpu/onednn_common.hpp"
#include "routines/cpu/quant_params.hpp"

#include "core/layer_types.hpp"
#include "core/weight_quant.hpp"

#include <softneuro/routine.hpp>

#include <oneapi/dnnl/dnnl.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace softneuro {
namespace {

using cpu::Int8Bounds;
using cpu::TQ;
using cpu::calibrated;
using cpu::in_q;
using cpu::int8_bounds;
using cpu::out_q;
using cpu::tensor_quant;

using namespace onednn_common;
using core::Activation;
using core::Window2d;

[[maybe_unused]] const bool g_hook = onednn_common::g_hook_registered;

// ---------------------------------------------------------------------------
// Quantisation parameters





/// Per-output-channel symmetric int8 weights (the project's convention), [oc][k].
struct QuantWeights {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int64_t> row_sum;  ///< Σ_k q[oc][k]
};

QuantWeights quantize_weights(const Blob& w, int64_t oc) {
  const int64_t k = w.numel() / oc;
  core::ChannelQuantized q = core::channel_int8(w);
  QuantWeights r{std::move(q.q), std::move(q.scale), std::vector<int64_t>(static_cast<std::size_t>(oc), 0)};
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t i = 0; i < k; ++i) r.row_sum[static_cast<std::size_t>(o)] += r.q[static_cast<std::size_t>(o * k + i)];
  return r;
}

/// A layer's weight quantised once, on first use: the scales and the packed
/// weights are each derived from it where the model's store lacks them.
struct LazyQuant {
  const Blob& w;
  int64_t oc;
  std::optional<QuantWeights> q;
  const QuantWeights& get() {
    if (!q) q = quantize_weights(w, oc);
    return *q;
  }
};

/// What the epilogue and bias take of the int8 weights: the model's, shared by
/// every session and stored in a tuned file.
struct WeightScales {
  std::vector<float> scale;
  std::vector<int64_t> row_sum;
};

std::shared_ptr<const WeightScales> weight_scales(const LayerInfo& info, LazyQuant& quant) {
  const std::size_t n = static_cast<std::size_t>(quant.oc);
  return prepared_weights<WeightScales>(
      info, "int8.scales", [&] { return WeightScales{quant.get().scale, quant.get().row_sum}; },
      [](const WeightScales& s) {
        return core::pack_arrays({core::array_bytes(s.scale.data(), s.scale.size()), core::array_bytes(s.row_sum.data(), s.row_sum.size())});
      },
      [&](const Blob& b) -> std::optional<WeightScales> {
        auto a = core::unpack_arrays(b, {n * sizeof(float), n * sizeof(int64_t)});
        if (!a) return std::nullopt;
        WeightScales s;
        s.scale.resize(n);
        s.row_sum.resize(n);
        std::memcpy(s.scale.data(), (*a)[0], n * sizeof(float));
        std::memcpy(s.row_sum.data(), (*a)[1], n * sizeof(int64_t));
        for (float f : s.scale)
          if (!core::quant_scale_in_range(f)) return std::nullopt;
        return s;
      });
}

/// int32 bias at s_in·s_w[oc] (zeros without a bias weight), minus z_in·row_sum when folding a zero point.
std::vector<int32_t> quantize_bias(const Blob* bias, const WeightScales& qw, float s_in, int32_t fold_zp) {
  std::vector<int32_t> b(qw.scale.size(), 0);
  for (std::size_t o = 0; o < b.size(); ++o) {
    double v = 0;
    if (bias) v = core::quantize_bias_value(bias->data_as<float>()[o], double(s_in) * double(qw.scale[o]));
    v -= double(fold_zp) * double(qw.row_sum[o]);
    b[o] = static_cast<int32_t>(std::clamp(v, -2147483648.0, 2147483647.0));
  }
  return b;
}

// ---------------------------------------------------------------------------
// Memory descriptors

using Dims = dnnl::memory::dims;

Dims dims_of(const Shape& s) { return Dims(s.begin(), s.end()); }

dnnl::memory::desc plain(const Dims& d, dt type) {
  Dims strides(d.size());
  dnnl::memory::dim st = 1;
  for (std::size_t i = d.size(); i-- > 0;) {
    strides[i] = st;
    st *= d[i];
  }
  return {d, type, strides};
}

/// An activation of `shape` in `layout` (nhwc only for rank 4; lower ranks are plain in both).
dnnl::memory::desc act(const Shape& shape, Layout layout, dt type = dt::s8) {
  if (layout == Layout::nhwc && shape.rank() == 4) return {dims_of(shape), type, tag::nhwc};
  return plain(dims_of(shape), type);
}

Support layout_ok(const Shape& s, Layout layout, std::string_view what) {
  if (s.rank() < 1 || s.rank() > DNNL_MAX_NDIMS)
    return Support::no(fmt::format("{} has rank {}; oneDNN takes 1..{}", what, s.rank(), DNNL_MAX_NDIMS));
  if (s.numel() == 0) return Support::no(fmt::format("{} {} is empty", what, s.to_string()));
  if (layout == Layout::nhwc && s.rank() > 2 && s.rank() != 4)
    return Support::no(fmt::format("in nhwc, {} must have rank 4 or at most 2; {} has rank {}", what, s.to_string(), s.rank()));
  return Support::yes();
}

/// A fixed oneDNN memory holding `values` (copied; the memory owns its buffer).
template <class T>
dnnl::memory owned(const dnnl::memory::desc& md, const std::vector<T>& values) {
  dnnl::memory m(md, cpu_engine());
  std::memcpy(m.get_data_handle(), values.data(), values.size() * sizeof(T));
  return m;
}

/// The int8 weights of `w` ([oc][...], quantised per output channel; `dims`:
/// as oneDNN reads them, groups first) in the layout the primitive wants: the
/// model's (every session and shape shares them), held by the plan.
dnnl::memory shared_int8_weights(const LayerInfo& info, Plan& p, LazyQuant& quant, const dnnl::memory::dims& dims,
                                 const dnnl::memory::desc& want) {
  return prepared_memory(info, p.shared, "int8.weights", want,
                         [&] { return reorder_to(owned(plain(dims, dt::s8), quant.get().q), want); });
}

dnnl::memory zero_point_memory(int32_t zp) { return owned(dnnl::memory::desc({1}, dt::s32, tag::x), std::vector<int32_t>{zp}); }

dnnl::primitive_attr attr_base() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

/// A requantising reorder from `from` (quantisation a) to `to` (quantisation b):
/// q_b = round(s_a/s_b · (q_a − z_a)) + z_b. Zero points as fixed memories.
void add_requant_reorder(Plan& p, const dnnl::memory::desc& from_md, Mem from, const dnnl::memory::desc& to_md, Mem to,
                         TQ a, TQ b, bool prepare) {
  dnnl::primitive_attr attr = attr_base();
  attr.set_output_scales(0, {a.scale / b.scale});
  if (a.zp) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  if (b.zp) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::reorder::primitive_desc r(cpu_engine(), from_md, cpu_engine(), to_md, attr);
  std::vector<std::pair<int, Mem>> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  if (prepare) {
    if (a.zp) args.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_FROM, Mem{Mem::fixed, p.add_fixed(zero_point_memory(a.zp))}});
    if (b.zp) args.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_TO, Mem{Mem::fixed, p.add_fixed(zero_point_memory(b.zp))}});
  }
  p.steps.push_back({r, std::move(args)});
}

// ---------------------------------------------------------------------------
// Requantising epilogue of conv2/dense: output scales per channel and post-ops.

struct Epilogue {
  std::vector<float> scales;  ///< per output channel, applied to acc + bias
  dnnl::post_ops ops;
};

Support epilogue_ok(const Layer& l) {
  (void)core::fused_activation(l);  // throws on an unknown activation
  return Support::yes();
}

/// `dst_zp_as_post_op`: add z_out by a linear post-op (inner product has no dst zero points).
Epilogue make_epilogue(const Layer& l, const std::vector<float>& w_scales, TQ in, TQ out, bool dst_zp_as_post_op) {
  const Activation a = core::fused_activation(l);
  const bool real_valued = a.kind != Activation::none && a.kind != Activation::relu && a.kind != Activation::clip;
  Epilogue e;
  e.scales.resize(w_scales.size());
  for (std::size_t o = 0; o < e.scales.size(); ++o) {
    // In float, in this order: XNNPACK's (and so TensorFlow Lite's) requantisation
    // scale, so that products that tie in rounding round alike.
    const float s = in.scale * w_scales[o];
    e.scales[o] = real_valued ? s : s / out.scale;
  }
  const float inv = 1.0f / out.scale;
  switch (a.kind) {
    case Activation::none: break;
    case Activation::relu: e.ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
    case Activation::clip: {
      const float lo = std::isfinite(a.min) ? a.min * inv : std::numeric_limits<float>::lowest();
      const float hi = std::isfinite(a.max) ? a.max * inv : std::numeric_limits<float>::max();
      e.ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, lo, hi);
      break;
    }
    case Activation::hardsigmoid: {
      // clip(alpha·x + beta, 0, 1) / s_out in two post-ops, the division (and
      // the zero point, when added here) folded in. (Linear, clip, linear — three
      // eltwise post-ops — gave wrong results in oneDNN 2.6's int8 kernels.)
      const float z = dst_zp_as_post_op ? static_cast<float>(out.zp) : 0.0f;
      e.ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, a.alpha * inv, a.beta * inv + z);
      e.ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, z, inv + z);
      return e;
    }
    default:
      append_activation(e.ops, a, /*keep_nan=*/false);  // int8 data holds no NaN
      break;
  }
  const float shift = dst_zp_as_post_op ? static_cast<float>(out.zp) : 0.0f;
  if (real_valued) {
    e.ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, inv, shift);
    return e;
  }
  // Rounded before the zero point is added: oneDNN adds it in float, where
  // x + z can round onto a .5 tie that x alone was not (x = 7.4999995, z = -128:
  // -120 instead of -121). Rounded first, x + z is exact: XNNPACK's and
  // TensorFlow Lite's result (their fp32 requantisation rounds, then adds z).
  if (out.zp != 0) e.ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_round, 0.0f, 0.0f);
  if (shift != 0.0f) e.ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f, shift);
  return e;
}

/// Whether oneDNN's int8 kernels multiply on AMX tiles here.
bool has_amx_int8() {
  static const bool yes = onednn_isa_has(dnnl_cpu_isa_avx512_core_amx);
  return yes;
}

/// Whether oneDNN's int8 kernels multiply with VNNI (or AMX) here, i.e. keep all 8 weight bits.
Support int8_weights_exact() {
#if !defined(__x86_64__)
  return Support::yes();  // the halving is x86's (u8s8 without VNNI); reference code is refused elsewhere
#endif
  static const bool yes = onednn_isa_has(dnnl_cpu_isa_avx512_core_vnni);
  if (yes) return Support::yes();
  return Support::no(fmt::format("CPU lacks AVX-512 VNNI: without it oneDNN 2.6 halves int8 weights (7 bits); oneDNN's ISA here is {}",
                                 isa_name(onednn_isa())));
}

// ---------------------------------------------------------------------------
// The registered routine: Op as in onednn.cpp (kType, check, plan).

template <class Op, Layout L>
class OnednnQ final : public Routine {
 public:
  bool costly_prepare() const override { return true; }  // (a oneDNN primitive per shape)
  static constexpr Schema kSchema{Device::cpu, DType::qint8, L};

  std::string_view layer_type() const override { return Op::kType; }
  std::string_view algorithm() const override { return "onednn"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }

  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == kSchema))
      return Support::no(fmt::format("this routine computes in {}, not {}", kSchema.to_string(), schema.to_string()));
    if (Op::kHasWeights)
      if (Support s = int8_weights_exact(); !s) return s;
    if (!info.layer) return Support::no("no layer");
    if (Support s = calibrated(info); !s) return s;
    try {
      for (std::size_t i = 0; i < info.input_shapes.size(); ++i)
        if (Support s = layout_ok(info.input_shapes[i], L, "an input"); !s) return s;
      if (Support s = layout_ok(info.output_shapes[0], L, "the output"); !s) return s;
      if (Support s = Op::check(info, L); !s) return s;
      match_threads(info);
      const Plan p = Op::plan(info, L, false);
      if (std::string_view impl = reference_impl(p); Op::kRefuseReference && !impl.empty())
        return Support::no(fmt::format("oneDNN has only its reference implementation ({}) for this", impl));
      return Support::yes();
    } catch (const dnnl::error& e) {
      return Support::no(fmt::format("oneDNN 2.6 cannot create it: {}", e.what()));
    } catch (const Error& e) {
      return Support::no(e.what());
    }
  }

  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    try {
      match_threads(info);
      note_wait_policy();
      Plan plan = Op::plan(info, L, true);
      if (core::log_enabled(core::LogLevel::debug)) {
        std::string impls;
        for (const auto& s : plan.steps) impls += (impls.empty() ? "" : " + ") + std::string(s.pd.impl_info_str());
        core::debug("layer '{}': {}/onednn runs oneDNN {}", info.layer->name, kSchema.to_string(), impls);
      }
      auto prepared = std::make_unique<Prepared>(std::move(plan));
      prepared->set_replan([info] { return Op::plan(info, L, true); });
      return prepared;
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("{}/onednn: oneDNN failed: {}", kSchema.to_string(), e.what()));
    }
  }

  bool fuses_previous(const LayerInfo& previous, const Routine& previous_routine, const RoutineParams&,
                      const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    if constexpr (requires { Op::plan_with_previous(previous, info, L, false); }) {
      if (!pairs_with(previous, previous_routine)) return false;
      match_threads(info);
      return plans_pair([&] { return Op::plan_with_previous(previous, info, L, false); });
    } else {
      return false;
    }
  }

  std::unique_ptr<PreparedRoutine> prepare_with_previous(const LayerInfo& previous, const Routine& previous_routine,
                                                         const RoutineParams&, const LayerInfo& info, const Schema&,
                                                         const RoutineParams&) const override {
    if constexpr (requires { Op::plan_with_previous(previous, info, L, true); }) {
      if (!pairs_with(previous, previous_routine)) return nullptr;
      match_threads(info);
      return prepare_pair(previous, info, kSchema, [previous, info] { return Op::plan_with_previous(previous, info, L, true); });
    } else {
      return nullptr;
    }
  }

 private:
  /// A convolution before it on oneDNN's int8 routine in this layout.
  bool pairs_with(const LayerInfo& previous, const Routine& previous_routine) const {
    const auto ss = previous_routine.schemas();
    return previous.layer && previous.layer->type == "conv2" && previous_routine.layer_type() == "conv2" &&
           previous_routine.algorithm() == "onednn" && ss.size() == 1 && ss[0] == kSchema;
  }
};

// ---------------------------------------------------------------------------
// conv2

struct Conv2 {
  static constexpr std::string_view kType = "conv2";
  static constexpr bool kRefuseReference = true;
  static constexpr bool kHasWeights = true;

  static Support check(const LayerInfo& info, Layout) {
    if (info.input_shapes[0].rank() != 4) return Support::no("conv2 needs an input [N,C,H,W]");
    if (Support s = core::int8_routine_weight(*info.layer, "weight", true); !s) return s;
    if (Support s = core::int8_routine_weight(*info.layer, "bias", false); !s) return s;
    const Window2d g = core::conv2_window(*info.layer, info.input_shapes[0]);
    if (g.kh * g.kw * (g.c / g.group) > (int64_t{1} << 16))
      return Support::no("a dot product of more than 65536 int8 terms could overflow int32");
    return epilogue_ok(*info.layer);
  }

  /// `residual_add`: an add after it whose other operand is input 1 of the
  /// step. A float32 add (`residual` -1, int8_conv_sum): the output in
  /// float32, real values (no output quantisation), summed onto that operand,
  /// then the add's activation. A qint8 add (`residual` the add's input that
  /// operand is): the sum in the add's output units, that operand's zero point
  /// taken off, the add's activation, quantised to the add's output once (the
  /// convolution's own output is never rounded to its scale).
  static Plan plan(const LayerInfo& info, Layout l, bool prepare, const LayerInfo* residual_add = nullptr,
                   int residual = -1) {
    const Layer& layer = *info.layer;
    const Shape& in = info.input_shapes[0];
    const Shape& out = info.output_shapes[0];
    const Window2d g = core::conv2_window(layer, in);
    const bool quantised_sum = residual_add && residual >= 0;
    const TQ qi = in_q(info, 0);
    const TQ qo = !residual_add ? out_q(info) : quantised_sum ? out_q(*residual_add) : TQ{1.0f, 0};
    const Blob& w = layer.weight("weight");
    const Blob* bias = layer.find_weight("bias");
    // Weights are quantised in prepare only; supports() builds the primitive with
    // placeholder scales (their values do not change oneDNN's choice).
    LazyQuant quant{w, g.oc, std::nullopt};
    const auto qw = prepare ? weight_scales(info, quant) : nullptr;
    // A quantised sum's zero point is added after it.
    Epilogue ep = make_epilogue(layer, prepare ? qw->scale : std::vector<float>(static_cast<std::size_t>(g.oc), 1.0f), qi,
                                quantised_sum ? TQ{qo.scale, 0} : qo, true);
    Plan p;
    const dt out_dt = residual_add && !quantised_sum ? dt::f32 : dt::s8;
    if (quantised_sum) {
      const TQ qr = in_q(*residual_add, static_cast<std::size_t>(residual));
      ep.ops.append_sum(qr.scale / qo.scale, qr.zp, dt::s8);
      const Activation a = core::fused_activation(*residual_add->layer);
      if (a.kind != Activation::none && a.kind != Activation::relu && a.kind != Activation::clip)
        throw Error("the add's activation is no clamp in int8");
      // Clamped before the zero point is added, then rounded (as make_epilogue rounds).
      if (a.kind != Activation::none) {
        const Int8Bounds b = int8_bounds(a, qo);
        ep.ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, static_cast<float>(b.lo - qo.zp),
                              static_cast<float>(b.hi - qo.zp));
      }
      if (qo.zp != 0) {
        ep.ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_round, 0.0f, 0.0f);
        ep.ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f, static_cast<float>(qo.zp));
      }
      p.accumulate = 1;
    } else if (residual_add) {
      // Real values (scale s_in·s_w, out scale 1): the conv's activation as it is, the sum, the add's.
      ep.ops = dnnl::post_ops();
      append_activation(ep.ops, core::fused_activation(layer), false);
      ep.ops.append_sum(1.0f);
      const Activation a = core::fused_activation(*residual_add->layer);
      if (residual_add->keep_nan && drops_nan(a)) throw Error("the add's activation would drop NaN");
      append_activation(ep.ops, a, false);
      p.accumulate = 1;
    }

    // Zero points as attributes take oneDNN 2.6 off its brgemm convolutions
    // (AMX, 1x1 16->96 at 112x112: 0.100 ms without, 0.185 with either; 384->64
    // at 14x14 0.004 against 0.041): the dst zero point is a post-op (above),
    // and where no padding reads the input its zero point is folded into the
    // bias, exactly (bias' = bias - z_in * sum of the weights, as in dense).
    // ONNX Runtime's QDQ files hold u8 activations: zero points everywhere.
    // (Without AMX a relu's output into a 1x1 layer of 128 output channels or
    // more is flipped to u8 instead, below: 10-15% faster there than s8.)
    const bool padded = g.pt || g.pl || g.pb || g.pr;
    const bool pointwise_pays = g.group == 1 && g.kh * g.kw == 1 && g.oc >= 128 && !has_amx_int8();
    const bool fold_src_zp = qi.zp != 0 && !padded && !(qi.zp == -128 && pointwise_pays);
    const Dims wd = g.group > 1 ? Dims{g.group, g.oc / g.group, g.c / g.group, g.kh, g.kw} : Dims{g.oc, g.c, g.kh, g.kw};
    const dnnl::memory::desc b_md = bias || fold_src_zp ? dnnl::memory::desc({g.oc}, dt::s32, tag::x) : dnnl::memory::desc();
    // `unsigned_src`: input 0 read as u8 with no zero point (its sign bits
    // flipped first), exact where its zero point is -128.
    auto make_pd = [&](Layout act_layout, bool unsigned_src = false) {
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                        act(in, act_layout, unsigned_src ? dt::u8 : dt::s8),
                                        dnnl::memory::desc(wd, dt::s8, tag::any), b_md,
                                        act(out, act_layout, out_dt), {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.pt, g.pl},
                                        {g.pb, g.pr});
      dnnl::primitive_attr attr = attr_base();
      attr.set_output_scales(1 << 1, ep.scales);
      if (qi.zp && !unsigned_src && !fold_src_zp) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      attr.set_post_ops(ep.ops);
      return dnnl::convolution_forward::primitive_desc(d, attr, cpu_engine());
    };
    dnnl::convolution_forward::primitive_desc pd = make_pd(l);
    if (qw) p.shared.push_back(qw);  // kept, so that a tuned file stores it
    Mem src = in0, dst = out0;
    bool unsigned_src = false;
    // A relu's output (zero point -128) is u8 with no zero point but for its
    // sign bits, and oneDNN 2.6 convolves u8 without zero points with its
    // brgemm kernels where s8 with them gets its older jit_int8 one: ResNet50's
    // 3x3 convolutions on AVX-512 VNNI 0.15-0.21 ms against 0.29-0.36, the flip
    // 0.005-0.06 ms. 1x1 ones are brgemm either way; on AVX-512 VNNI u8
    // without the zero point's compensation is 10-20% faster: worth the flip (a
    // byte of input per output channel's MAC) from 128 output channels
    // (ResNet50's: 0.81-0.93x with it; with 64, 1.02-1.06x); on AMX, s8 with
    // the zero point folded is faster still. Depthwise ones are
    // jit_uni_x8s8s32x either way, u8 faster where the flip is no larger than
    // the output (stride 1: MobileNetV2's 0.79-0.96x; stride 2: 1.02-1.13x).
    const bool grouped_pays = g.group > 1 && g.kh * g.kw > 1 && g.sh == 1 && g.sw == 1;
    const bool dense_pays = g.group == 1 && g.kh * g.kw > 1 && !is_brgemm(pd);
    if (qi.zp == -128 && !fold_src_zp && l == Layout::nhwc && (pointwise_pays || grouped_pays || dense_pays)) {
      dnnl::convolution_forward::primitive_desc u8 = make_pd(l, true);
      if (g.group > 1 ? !is_reference(u8) : is_brgemm(u8)) {
        pd = u8;
        unsigned_src = true;
        p.temps.push_back(act(in, l, dt::u8));
        p.unsigned_input = static_cast<int>(p.temps.size()) - 1;
        src = Mem{Mem::temp, p.unsigned_input};
      }
    }
    if (l == Layout::nchw && is_reference(pd) && !residual_add) {
      // nchw int8 is oneDNN's reference code: go through nhwc temporaries.
      dnnl::convolution_forward::primitive_desc nhwc = make_pd(Layout::nhwc);
      if (!is_reference(nhwc)) {
        pd = nhwc;
        p.temps = {act(in, Layout::nhwc), act(out, Layout::nhwc)};
        src = Mem{Mem::temp, 0};
        dst = Mem{Mem::temp, 1};
        p.steps.push_back({dnnl::reorder::primitive_desc(cpu_engine(), act(in, l), cpu_engine(), p.temps[0], attr_base()),
                           {{DNNL_ARG_FROM, in0}, {DNNL_ARG_TO, src}}});
      }
    }
    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
    if (prepare) {
      const dnnl::memory wm = shared_int8_weights(info, p, quant, wd, pd.weights_desc());
      args.push_back({DNNL_ARG_WEIGHTS, Mem{Mem::fixed, p.add_fixed(wm)}});
      if (bias || fold_src_zp)
        args.push_back({DNNL_ARG_BIAS, Mem{Mem::fixed, p.add_fixed(owned(b_md, quantize_bias(bias, *qw, qi.scale, fold_src_zp ? qi.zp : 0)))}});
      if (qi.zp && !unsigned_src && !fold_src_zp)
        args.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, Mem{Mem::fixed, p.add_fixed(zero_point_memory(qi.zp))}});
    }
    p.steps.push_back({pd, std::move(args)});
    if (dst == Mem{Mem::temp, 1})
      p.steps.push_back({dnnl::reorder::primitive_desc(cpu_engine(), p.temps[1], cpu_engine(), act(out, l), attr_base()),
                         {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, out0}}});
    return p;
  }

};

// ---------------------------------------------------------------------------
// dense: inner product on [M,K] (leading dims flattened in plain layout).

struct Dense {
  static constexpr std::string_view kType = "dense";
  static constexpr bool kRefuseReference = true;
  static constexpr bool kHasWeights = true;

  static Support check(const LayerInfo& info, Layout l) {
    if (Support s = core::int8_routine_weight(*info.layer, "weight", true); !s) return s;
    if (Support s = core::int8_routine_weight(*info.layer, "bias", false); !s) return s;
    if (info.layer->weight("weight").shape().rank() != 2) return Support::no("dense weight must be [O, K]");
    if (l == Layout::nhwc && info.input_shapes[0].rank() > 2)
      return Support::no("in nhwc, dense reads rank <= 2 inputs (the rows must be contiguous)");
    if (info.input_shapes[0][info.input_shapes[0].rank() - 1] > (int64_t{1} << 16))
      return Support::no("a dot product of more than 65536 int8 terms could overflow int32");
    return epilogue_ok(*info.layer);
  }

  static Plan plan(const LayerInfo& info, Layout, bool prepare) {
    const Layer& layer = *info.layer;
    const Shape& x = info.input_shapes[0];
    const Blob& w = layer.weight("weight");
    const int64_t k = x[x.rank() - 1], o = w.shape()[0], m = x.numel() / k;
    const TQ qi = in_q(info, 0), qo = out_q(info);
    LazyQuant quant{w, o, std::nullopt};
    const auto qw = prepare ? weight_scales(info, quant) : nullptr;
    Epilogue ep = make_epilogue(layer, prepare ? qw->scale : std::vector<float>(static_cast<std::size_t>(o), 1.0f), qi, qo, true);
    const dnnl::memory::desc b_md({o}, dt::s32, tag::x);
    dnnl::inner_product_forward::desc d(dnnl::prop_kind::forward_inference, plain({m, k}, dt::s8),
                                        dnnl::memory::desc({o, k}, dt::s8, tag::any), b_md, plain({m, o}, dt::s8));
    dnnl::primitive_attr attr = attr_base();
    attr.set_output_scales(1 << 1, ep.scales);
    attr.set_post_ops(ep.ops);
    dnnl::inner_product_forward::primitive_desc pd(d, attr, cpu_engine());
    Plan p;
    if (qw) p.shared.push_back(qw);  // kept, so that a tuned file stores it
    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}};
    if (prepare) {
      const dnnl::memory wm = shared_int8_weights(info, p, quant, {o, k}, pd.weights_desc());
      args.push_back({DNNL_ARG_WEIGHTS, Mem{Mem::fixed, p.add_fixed(wm)}});
      // The src zero point folded into the bias (exact: no padding in a dense layer).
      args.push_back({DNNL_ARG_BIAS, Mem{Mem::fixed, p.add_fixed(owned(b_md, quantize_bias(layer.find_weight("bias"), *qw, qi.scale, qi.zp)))}});
    }
    p.steps.push_back({pd, std::move(args)});
    return p;
  }

};

// ---------------------------------------------------------------------------
// pool2: max and avg (exclude/include padding, ceil mode, global).

struct Pool2 {
  static constexpr std::string_view kType = "pool2";
  static constexpr bool kRefuseReference = true;
  static constexpr bool kHasWeights = false;

  static int64_t padding_r(int64_t in, int64_t pad_l, int64_t pad_r, int64_t k, int64_t s, int64_t d, int64_t out) {
    return std::max(pad_r, (out - 1) * s + (k - 1) * d + 1 - in - pad_l);
  }
  static bool empty_window(int64_t in, int64_t pad_l, int64_t k, int64_t s, int64_t d, int64_t out) {
    for (int64_t o = 0; o < out; ++o) {
      bool any = false;
      for (int64_t t = 0; t < k && !any; ++t) {
        const int64_t i = o * s - pad_l + t * d;
        any = i >= 0 && i < in;
      }
      if (!any) return true;
    }
    return false;
  }

  static Support check(const LayerInfo& info, Layout) {
    if (info.input_shapes[0].rank() != 4) return Support::no("pool2 needs an input [N,C,H,W]");
    const Layer& layer = *info.layer;
    const std::string mode = layer.get_string("mode");
    if (mode != "max" && mode != "avg") return Support::no(fmt::format("pool mode '{}' (max and avg only)", mode));
    const Window2d g = core::pool2_window(layer, info.input_shapes[0]);
    if (empty_window(g.h, g.pt, g.kh, g.sh, g.dh, g.oh) || empty_window(g.w, g.pl, g.kw, g.sw, g.dw, g.ow))
      return Support::no("a window covers only padding");
    const bool include_pad = mode == "avg" && layer.get_int("count_include_pad", 0) != 0;
    const bool padded = g.pt || g.pl || g.pb || g.pr;
    if (include_pad && padded && in_q(info, 0).zp != 0)
      return Support::no("count_include_pad with padding and a nonzero input zero point: oneDNN pads with q = 0, not the real 0");
    if (include_pad && (padding_r(g.h, g.pt, g.pb, g.kh, g.sh, g.dh, g.oh) > g.pb ||
                        padding_r(g.w, g.pl, g.pr, g.kw, g.sw, g.dw, g.ow) > g.pr))
      return Support::no("ceil_mode windows hang past the padding and count_include_pad=1: oneDNN would count the overhang");
    return Support::yes();
  }

  static Plan plan(const LayerInfo& info, Layout l, bool prepare) {
    const Layer& layer = *info.layer;
    const Shape& in = info.input_shapes[0];
    const Shape& out = info.output_shapes[0];
    const Window2d g = core::pool2_window(layer, in);
    const bool is_max = layer.get_string("mode") == "max";
    const bool include_pad = layer.get_int("count_include_pad", 0) != 0;
    const TQ qi = in_q(info, 0), qo = out_q(info);
    const auto alg = is_max ? dnnl::algorithm::pooling_max
                     : include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                   : dnnl::algorithm::pooling_avg_exclude_padding;
    const bool requant = qi.scale != qo.scale || qi.zp != qo.zp;
    dnnl::primitive_attr attr = attr_base();
    if (!is_max && requant) {
      const double r = double(qi.scale) / double(qo.scale);
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, static_cast<float>(r),
                         static_cast<float>(double(qo.zp) - double(qi.zp) * r));
      attr.set_post_ops(ops);
    }
    auto make_pd = [&](Layout pl) {
      dnnl::pooling_v2_forward::desc d(
          dnnl::prop_kind::forward_inference, alg, act(in, pl), act(out, pl), {g.sh, g.sw}, {g.kh, g.kw},
          {g.dh - 1, g.dw - 1}, {g.pt, g.pl},
          {padding_r(g.h, g.pt, g.pb, g.kh, g.sh, g.dh, g.oh), padding_r(g.w, g.pl, g.pr, g.kw, g.sw, g.dw, g.ow)});
      return dnnl::pooling_v2_forward::primitive_desc(d, attr, cpu_engine());
    };
    dnnl::pooling_v2_forward::primitive_desc pd = make_pd(l);
    Layout pl = l;  // the layout the pooling runs in
    Plan p;
    Mem src = in0;
    if (l == Layout::nchw && is_reference(pd)) {  // nchw int8 pooling is reference code: through nhwc
      pd = make_pd(Layout::nhwc);
      pl = Layout::nhwc;
      p.temps.push_back(act(in, pl));
      src = Mem{Mem::temp, 0};
      p.steps.push_back({dnnl::reorder::primitive_desc(cpu_engine(), act(in, l), cpu_engine(), p.temps[0], attr_base()),
                         {{DNNL_ARG_FROM, in0}, {DNNL_ARG_TO, src}}});
    }
    const bool via_temp = (is_max && requant) || pl != l;
    Mem dst = out0;
    if (via_temp) {
      p.temps.push_back(act(out, pl));
      dst = Mem{Mem::temp, static_cast<int>(p.temps.size()) - 1};
    }
    p.steps.push_back({pd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}});
    if (is_max && requant)  // max commutes with the (increasing) requantisation
      add_requant_reorder(p, p.temps.back(), dst, act(out, l), out0, qi, qo, prepare);
    else if (via_temp)
      p.steps.push_back({dnnl::reorder::primitive_desc(cpu_engine(), p.temps.back(), cpu_engine(), act(out, l), attr_base()),
                         {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, out0}}});
    return p;
  }

};

// ---------------------------------------------------------------------------
// add: same shapes (no broadcasting), requantising; a fused relu or clip as a
// clip post-op in the output's quantised units.

struct Add {
  static constexpr std::string_view kType = "add";
  static constexpr bool kRefuseReference = true;
  static constexpr bool kHasWeights = false;

  static Support check(const LayerInfo& info, Layout) {
    if (info.input_shapes[0] != info.input_shapes[1])
      return Support::no(fmt::format("inputs {} and {} differ: no broadcasting in cpu:qint8/onednn add",
                                     info.input_shapes[0].to_string(), info.input_shapes[1].to_string()));
    if (core::requantizes_as_tflite(*info.layer))
      return Support::no("a TensorFlow Lite int8 add rounds with fixed-point multipliers; oneDNN's sums in float");
    return Support::yes();
  }

  static Plan plan(const LayerInfo& info, Layout l, bool) {
    const TQ a = in_q(info, 0), b = in_q(info, 1), o = out_q(info);
    const dnnl::memory::desc md = act(info.output_shapes[0], l);
    dnnl::binary::desc d(dnnl::algorithm::binary_add, md, md, md);
    dnnl::primitive_attr attr = attr_base();
    attr.set_scales(DNNL_ARG_SRC_0, 0, {a.scale / o.scale});
    attr.set_scales(DNNL_ARG_SRC_1, 0, {b.scale / o.scale});
    const double shift = double(o.zp) - (double(a.scale) * a.zp + double(b.scale) * b.zp) / double(o.scale);
    dnnl::post_ops ops;
    if (shift != 0) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f, static_cast<float>(shift));
    // The sum is now in the output's quantised units: relu/clip clamp it there.
    const Activation act = core::fused_activation(*info.layer);
    if (act.kind == Activation::relu || act.kind == Activation::clip) {
      const Int8Bounds q = int8_bounds(act, o);
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, static_cast<float>(q.lo), static_cast<float>(q.hi));
    }
    if (ops.len() > 0) attr.set_post_ops(ops);
    return Plan::single(dnnl::binary::primitive_desc(d, attr, cpu_engine()),
                        {{DNNL_ARG_SRC_0, in0}, {DNNL_ARG_SRC_1, Mem{Mem::input, 1}}, {DNNL_ARG_DST, out0}});
  }

  /// A convolution on this routine whose output is one operand, the other of
  /// the same shape, as one convolution summing onto the other (Conv2::plan's
  /// quantised residual add: oneDNN keeps its brgemm kernels with a sum
  /// post-op). The step reads the convolution's input, then the other operand.
  static std::optional<Plan> plan_with_previous(const LayerInfo& conv, const LayerInfo& info, Layout l, bool prepare) {
    if (conv.layer->type != "conv2" || conv.input_shapes.size() != 1 || conv.layer->outputs.size() != 1) return std::nullopt;
    if (info.input_shapes.size() != 2 || info.input_shapes[0] != info.output_shapes[0] || !check(info, l))
      return std::nullopt;
    const auto& ins = info.layer->inputs;
    const int mine = ins[0] == conv.layer->outputs[0] ? 0 : ins[1] == conv.layer->outputs[0] ? 1 : -1;
    if (mine < 0 || !calibrated(conv) || !calibrated(info) || !Conv2::check(conv, l)) return std::nullopt;
    try {
      Plan p = Conv2::plan(conv, l, prepare, &info, 1 - mine);
      if (p.steps.size() != 1 || is_reference(p.steps[0].pd)) return std::nullopt;
      return p;
    } catch (const Error&) {
      return std::nullopt;
    }
  }
};

// ---------------------------------------------------------------------------
// concat: channels (axis 1) in nhwc, any axis in plain layout.

struct Concat {
  static constexpr std::string_view kType = "concat";
  static constexpr bool kRefuseReference = false;  // oneDNN's "ref" concat is a reorder per input: fine
  static constexpr bool kHasWeights = false;

  static int axis(const LayerInfo& info) {
    return core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis"), info.output_shapes[0].rank());
  }

  static Support check(const LayerInfo& info, Layout l) {
    if (!info.layer->has("axis")) return Support::no("concat needs an axis");
    const int ax = axis(info);
    if (l == Layout::nhwc && info.output_shapes[0].rank() == 4 && ax != 1)
      return Support::no(fmt::format("in nhwc cpu:qint8/onednn concatenates channels (axis 1) only, not axis {}", ax));
    return Support::yes();
  }

  static Plan plan(const LayerInfo& info, Layout l, bool prepare) {
    const int ax = axis(info);
    const Shape& out = info.output_shapes[0];
    const TQ qo = out_q(info);
    // Inputs quantised differently from the output are requantised into dense
    // temporaries first (oneDNN 2.6's reorder ignores zero points when it writes
    // into a part of a larger tensor, so it cannot requantise into the output
    // directly), then one concat copies.
    Plan p;
    std::vector<dnnl::memory::desc> srcs;
    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_DST, out0}};
    for (std::size_t i = 0; i < info.input_shapes.size(); ++i) {
      const dnnl::memory::desc md = act(info.input_shapes[i], l);
      const TQ qi = in_q(info, i);
      Mem src{Mem::input, static_cast<int>(i)};
      if (qi.scale != qo.scale || qi.zp != qo.zp) {
        p.temps.push_back(md);
        const Mem t{Mem::temp, static_cast<int>(p.temps.size()) - 1};
        add_requant_reorder(p, md, src, md, t, qi, qo, prepare);
        src = t;
      }
      srcs.push_back(md);
      args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), src});
    }
    p.steps.push_back({dnnl::concat::primitive_desc(act(out, l), ax, srcs, cpu_engine(), attr_base()), std::move(args)});
    return p;
  }

};

// ---------------------------------------------------------------------------
// Registration

template <class Op>
void register_both() {
  register_routine(std::make_unique<OnednnQ<Op, Layout::nchw>>());
  register_routine(std::make_unique<OnednnQ<Op, Layout::nhwc>>());
}

const bool g_registered = [] {
  register_both<Conv2>();
  register_both<Dense>();
  register_both<Pool2>();
  register_both<Add>();
  register_both<Concat>();
  return true;
}();

}  // namespace

std::optional<onednn_common::Plan> onednn_common::int8_conv_sum(const LayerInfo& conv, const LayerInfo& add, Layout l,
                                                                 bool prepare) {
  if (conv.layer->type != "conv2" || conv.input_shapes.size() != 1 || !calibrated(conv)) return std::nullopt;
  if (!int8_weights_exact() || !Conv2::check(conv, l)) return std::nullopt;
  try {
    Plan p = Conv2::plan(conv, l, prepare, &add);
    if (p.steps.size() != 1 || is_reference(p.steps[0].pd)) return std::nullopt;
    return p;
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace softneuro
