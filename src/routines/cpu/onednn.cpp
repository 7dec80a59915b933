// cpu/onednn — routines wrapping oneDNN 2.6 (Debian's libdnnl, the 2.x API:
// operation descriptor → primitive descriptor → primitive), in float32, and in
// bfloat16 (cpu:bfloat16[:layout]/onednn, conv2/dense/pool2/activations/add/
// mul/concat) only where the CPU has AVX-512 BF16 or AMX-BF16: elsewhere those
// refuse ("CPU lacks bfloat16 instructions") rather than run emulated or
// reference code. bf16 activations; weights reordered to bf16 once in prepare;
// accumulation, bias and post-ops in float32. (qint8: onednn_int8.cpp.)
//
// One routine per (layer type, schema): the activation layout is fixed by the
// schema (cpu → plain row-major, cpu:float32:nhwc → nhwc, cpu:float32:nchw8c →
// nChw8c, cpu:float32:nchw16c → nChw16c, the latter only where oneDNN can use
// AVX-512); weights take the layout oneDNN picks (format_tag::any) and are
// reordered once in prepare.
//
// Structure: each operation is a struct Op with
//   static constexpr std::string_view kType;                    the layer type
//   static Support check(const LayerInfo&, Form);               cheap checks, with the reason
//   static Plan plan(const LayerInfo&, Form, bool prepare);     the primitive descriptor and its arguments
// (Form: the layout and the activations' data type) and Onednn<Op, Layout,
// DType> turns it into the registered Routine. supports() also
// builds the primitive descriptor, so it says no (with oneDNN's words) where
// oneDNN cannot create one, and where oneDNN would only run its slow reference
// implementation ("ref:any").
//
// Runs allocate nothing of ours: the primitives, their memory objects, the
// stream and the exec-argument arrays are made in prepare; scratchpads are
// "user" mode and, with any temporaries, come from the executor's workspace;
// run() only sets data handles (when they changed) and executes through the C
// API. oneDNN itself still allocates inside dnnl_primitive_execute (it copies
// the arguments into a std::unordered_map, and builds its scratchpad grantor):
// measured 6 operator-new calls of 8-104 bytes per convolution execute. The
// public API has no way around that.
//
// Threads: oneDNN here runs on OpenMP (libgomp). A thread-count hook sets
// OpenMP's count, and every prepare/run makes the calling thread's OpenMP
// setting match (omp_set_num_threads is per calling thread in libgomp). A
// primitive keeps the thread count it was created with, so a count changed
// after prepare reaches oneDNN routines only when they are prepared again.
// libgomp reads its wait policy (OMP_WAIT_POLICY, GOMP_SPINCOUNT) once, when it
// is loaded, before any code of ours runs, so it cannot be changed from here.
#include "routines/weight_checks.hpp"
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/thread_pool.hpp"
#include "routines/cpu/onednn_common.hpp"

#include <softneuro/routine.hpp>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace softneuro {
namespace {

using core::Activation;
using core::Window2d;
using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using namespace onednn_common;  // engine, threads, post-ops, Plan, Prepared (shared with the int8/bf16 routines)

// ---------------------------------------------------------------------------
// Memory descriptors in a schema's layout and data type

/// What a routine plans for: its blobs' layout and its activations' data
/// type (float32, or bf16 for the cpu:bfloat16 routines). Passed to every
/// check and plan; it reads as its layout where only that matters.
struct Form {
  Layout layout;
  dt act;
  operator Layout() const { return layout; }
};

dims to_dims(const Shape& s) { return dims(s.begin(), s.end()); }

/// The descriptor of an activation blob of `shape` in `layout` (rank 4 unless plain).
dnnl::memory::desc act_md(const Shape& shape, Form form) {
  switch (form.layout) {
    case Layout::nhwc: return {to_dims(shape), form.act, tag::nhwc};
    case Layout::nchw8c: return {to_dims(shape), form.act, tag::nChw8c};
    case Layout::nchw16c: return {to_dims(shape), form.act, tag::nChw16c};
    case Layout::nchw: break;
  }
  dims strides(shape.size());
  dnnl::memory::dim st = 1;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    strides[static_cast<std::size_t>(d)] = st;
    st *= shape[d];
  }
  return {to_dims(shape), form.act, strides};
}

/// A plain row-major descriptor for a weight of `d` dims.
dnnl::memory::desc plain_md(const dims& d, dt type = dt::f32) {
  dims strides(d.size());
  dnnl::memory::dim st = 1;
  for (std::size_t i = d.size(); i-- > 0;) {
    strides[i] = st;
    st *= d[i];
  }
  return {d, type, strides};
}

Support rank4_unless_plain(const Shape& s, Layout layout, std::string_view what) {
  if (layout != Layout::nchw && s.rank() != 4)
    return Support::no(fmt::format("{} layout needs rank-4 [N,C,H,W] blobs; {} is {}", to_string(layout), what,
                                   s.to_string()));
  if (s.rank() < 1 || s.rank() > DNNL_MAX_NDIMS)
    return Support::no(fmt::format("{} has rank {}; oneDNN takes 1..{}", what, s.rank(), DNNL_MAX_NDIMS));
  if (s.numel() == 0) return Support::no(fmt::format("{} {} is empty", what, s.to_string()));
  return Support::yes();
}

Support float_weights(const Layer& l, std::initializer_list<const char*> keys) {
  return routines::float_weights(l, keys, "cpu/onednn");
}


/// Appends `a` to `ops` and notes on `p` what must run after the primitive
/// over output `out` in `l`: where NaN may reach the layer (`info.keep_nan`),
/// the activations oneDNN drops NaN in (onednn_common::drops_nan). Elsewhere,
/// and in the bfloat16 routines, oneDNN's fused form.
void fuse_activation(dnnl::post_ops& ops, Plan& p, const Activation& a, const LayerInfo& info, const Shape& out,
                     Form l) {
  p.after = append_activation(ops, a, info.keep_nan && l.act == dt::f32);
  p.after_shape = out;
  p.after_layout = l;
}

/// The registered Routine for operation Op in one layout and data type
/// (float32, or bfloat16: activations bf16, weights reordered to bf16 in
/// prepare, accumulation and bias in float32, post-ops on float32 values).
template <class Op, Layout L, DType D = DType::float32>
class Onednn final : public Routine {
 public:
  bool costly_prepare() const override { return true; }  // (a oneDNN primitive per shape)
  static constexpr Schema kSchema{Device::cpu, D, L};
  static constexpr dt kDt = D == DType::bfloat16 ? dt::bf16 : dt::f32;
  static constexpr Form kForm{L, kDt};

  std::string_view layer_type() const override { return Op::kType; }
  std::string_view algorithm() const override { return "onednn"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }

  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == kSchema))
      return Support::no(fmt::format("this routine computes in {}, not {}", kSchema.to_string(), schema.to_string()));
    if (L == Layout::nchw16c && !has_avx512())
      return Support::no(fmt::format("nchw16c needs AVX-512; oneDNN's ISA on this CPU is {}",
                                     isa_name(onednn_isa())));
    if (D == DType::bfloat16 && !has_bf16())
      return Support::no("CPU lacks bfloat16 instructions (AVX-512 BF16 or AMX-BF16)");
    if (!info.layer) return Support::no("no layer");
        try {
      Support s = Op::check(info, kForm);
      if (!s) return s;
      match_threads(info);
      const Plan p = Op::plan(info, kForm, false);
      if (std::string_view impl = reference_impl(p); Op::kRefuseReference && !impl.empty())
        return Support::no(fmt::format("oneDNN has only its reference implementation ({}) for this", impl));
      return Support::yes();
    } catch (const dnnl::error& e) {
      return Support::no(fmt::format("oneDNN 2.6 cannot create it: {}", e.what()));
    } catch (const Error& e) {
      return Support::no(e.what());
    }
  }

  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&,
                                           const RoutineParams&) const override {
    if (D == DType::bfloat16 && !has_bf16())
      throw Error("cpu:bfloat16/onednn: CPU lacks bfloat16 instructions (AVX-512 BF16 or AMX-BF16)");
        try {
      match_threads(info);
      note_wait_policy();
      Plan plan = Op::plan(info, kForm, true);
      if (core::log_enabled(core::LogLevel::debug)) {
        std::string impls;
        for (const auto& s : plan.steps) impls += (impls.empty() ? "" : " + ") + std::string(s.pd.impl_info_str());
        core::debug("layer '{}': {}/onednn runs oneDNN {}", info.layer->name, kSchema.to_string(), impls);
      }
      auto prepared = std::make_unique<Prepared>(std::move(plan));
      prepared->set_replan([info] {
                return Op::plan(info, kForm, true);
      });
      return prepared;
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("{}/onednn: oneDNN failed: {}", kSchema.to_string(), e.what()));
    }
  }

  bool fuses_previous(const LayerInfo& previous, const Routine& previous_routine, const RoutineParams&,
                      const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    if constexpr (requires { Op::plan_with_previous(previous, info, kForm, kForm, true, false); }) {
      const std::optional<Form> previous_form = pairs_with(previous, previous_routine);
      if (!previous_form) return false;
      match_threads(info);
      return plans_pair([&] {
        return Op::plan_with_previous(previous, info, *previous_form, kForm, previous.layer->type == "adapt", false);
      });
    } else {
      return false;
    }
  }

  std::unique_ptr<PreparedRoutine> prepare_with_previous(const LayerInfo& previous, const Routine& previous_routine,
                                                         const RoutineParams&, const LayerInfo& info, const Schema&,
                                                         const RoutineParams&) const override {
    if constexpr (requires { Op::plan_with_previous(previous, info, kForm, kForm, true, true); }) {
      const std::optional<Form> previous_form = pairs_with(previous, previous_routine);
      if (!previous_form) return nullptr;
      match_threads(info);
      return prepare_pair(previous, info, kSchema,
                          [previous, info, adapt = previous.layer->type == "adapt", form = *previous_form] {
                            return Op::plan_with_previous(previous, info, form, kForm, adapt, true);
                          });
    } else {
      return nullptr;
    }
  }

 private:
  /// The form `previous` computes in where it pairs with this layer: a layer
  /// before it on this very routine (same operation, layout, data type), or
  /// the adapt that brought its input into this layout; an add, a oneDNN
  /// convolution in its layout, in its data type or (a float32 add) in
  /// bfloat16 or qint8 (s8), whose output it then writes in float32 (a hybrid
  /// path's residual: no cast or dequantisation between them).
  std::optional<Form> pairs_with(const LayerInfo& previous, const Routine& previous_routine) const {
    if (!previous.layer) return std::nullopt;
    if (Op::kType == "add") {
      const auto ss = previous_routine.schemas();
      if (previous.layer->type != "conv2" || previous_routine.layer_type() != "conv2" ||
          previous_routine.algorithm() != "onednn" || ss.size() != 1)
        return std::nullopt;
      const Schema& s = ss[0];
      if (s == kSchema) return kForm;
      if (s.device != Device::cpu || s.layout != L || D != DType::float32) return std::nullopt;
      if (s.dtype == DType::bfloat16) return Form{L, dt::bf16};
      if (s.dtype == DType::qint8 && (L == Layout::nhwc || L == Layout::nchw)) return Form{L, dt::s8};
      return std::nullopt;
    }
    if (D != DType::float32) return std::nullopt;
    if (previous.layer->type == "adapt" || &previous_routine == this) return kForm;
    return std::nullopt;
  }
};


// ---------------------------------------------------------------------------
// conv2: groups (depthwise included), strides, dilations, asymmetric pads,
// bias, fused activation as post-ops.

struct Conv2 {
  static constexpr std::string_view kType = "conv2";
  static constexpr bool kRefuseReference = true;

  /// conv2's and deconv2's: an image input and float32 weights.
  static Support check(const LayerInfo& info, Form l) {
    if (Support s = rank4_unless_plain(info.input_shapes[0], l, "the input"); !s) return s;
    if (info.input_shapes[0].rank() != 4) return Support::no(fmt::format("{} needs an input [N,C,H,W]", info.layer->type));
    return float_weights(*info.layer, {"weight", "bias"});
  }

  /// `plain_input`: the input arrives plain (an adapt to `l` taken in: plan_with_previous).
  /// `residual_add`: an add after it (its LayerInfo) whose other operand is
  /// input 1 of the fused step: a sum post-op onto the output, which starts
  /// as that operand, then the add's activation; `out_act`: the output's
  /// data type where it is not the input's (the add's).
  static Plan plan(const LayerInfo& info, Form l, bool prepare, bool plain_input = false,
                   const LayerInfo* residual_add = nullptr, dt out_act = dt::undef) {
    const Form o{l.layout, out_act == dt::undef ? l.act : out_act};
    const Layer& layer = *info.layer;
    const Window2d g = core::conv2_window(layer, info.input_shapes[0]);
    const Activation act = core::fused_activation(layer, true);
    // A shift would reach a blocked layout's padded channel lanes, which stay zero.
    if (act.shift != 0 && l != Layout::nchw && l != Layout::nhwc && g.oc % 16 != 0)
      throw Error("act_shift on a blocked layout whose channels do not fill its blocks");
    const Blob& w = layer.weight("weight");
    const Blob* bias = layer.find_weight("bias");

    const dims wd = g.group > 1 ? dims{g.group, g.oc / g.group, g.c / g.group, g.kh, g.kw}
                                : dims{g.oc, g.c, g.kh, g.kw};
    const dnnl::memory::desc w_any(wd, l.act, tag::any);
    const dnnl::memory::desc b_md = bias ? dnnl::memory::desc({g.oc}, dt::f32, tag::x) : dnnl::memory::desc();
    Plan p;
    dnnl::post_ops ops;
    fuse_activation(ops, p, act, info, info.output_shapes[0], o);
    if (residual_add) {
      // (An activation run after the steps would come after the sum: not this.)
      if (p.after.kind != Activation::none) throw Error("the convolution's activation runs after it");
      ops.append_sum(1.0f);
      fuse_activation(ops, p, core::fused_activation(*residual_add->layer), *residual_add, info.output_shapes[0], o);
      if (p.after.kind != Activation::none) throw Error("the add's activation runs after it");
      p.accumulate = 1;
    }
    auto make_pd = [&](const dnnl::memory::desc& src) {
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                        src, w_any, b_md, act_md(info.output_shapes[0], o), {g.sh, g.sw},
                                        {g.dh - 1, g.dw - 1}, {g.pt, g.pl}, {g.pb, g.pr});
      return dnnl::convolution_forward::primitive_desc(d, make_attr(&ops), cpu_engine());
    };
    const Shape& in = info.input_shapes[0];
    dnnl::convolution_forward::primitive_desc pd = make_pd(act_md(in, plain_input ? Form{Layout::nchw, l.act} : l));

    // Blocked input with channels that do not fill a block (a first conv on RGB):
    // oneDNN's fast kernels read such inputs plain, so reorder it first (to the
    // workspace) when that turns a reference implementation into a JIT one.
    Mem src = in0;
    const bool blocked = l == Layout::nchw8c || l == Layout::nchw16c;
    if (!plain_input && blocked && g.group == 1 && is_reference(pd)) {
      auto plain = make_pd(act_md(in, {Layout::nchw, l.act}));
      if (!is_reference(plain)) {
        pd = plain;
        p.temps.push_back(act_md(in, {Layout::nchw, l.act}));
        src = Mem{Mem::temp, 0};
        dnnl::reorder::primitive_desc r(cpu_engine(), act_md(in, l), cpu_engine(), p.temps[0], make_attr());
        p.steps.push_back({r, {{DNNL_ARG_FROM, in0}, {DNNL_ARG_TO, src}}});
      }
    }
    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, out0}};
    if (prepare) bind_weights(info, p, args, w, wd, pd.weights_desc(), bias, b_md);
    p.steps.push_back({pd, std::move(args)});
    return p;
  }

  /// The weight (reordered once per model to `want`) and bias as fixed arguments of a convolution.
  static void bind_weights(const LayerInfo& info, Plan& p, std::vector<std::pair<int, Mem>>& args, const Blob& w,
                           const dims& wd, const dnnl::memory::desc& want, const Blob* bias,
                           const dnnl::memory::desc& b_md) {
    const dnnl::memory wm = shared_reorder(info, p.shared, "weight", weight_memory(plain_md(wd), w), want);
    args.push_back({DNNL_ARG_WEIGHTS, Mem{Mem::fixed, p.add_fixed(wm)}});
    p.keep.push_back(w);  // wm may be the weight itself when oneDNN takes it plain
    if (bias) {
      args.push_back({DNNL_ARG_BIAS, Mem{Mem::fixed, p.add_fixed(weight_memory(b_md, *bias))}});
      p.keep.push_back(*bias);
    }
  }

  /// A first convolution (fewer input channels than a block) reading the plain
  /// image its input adapt would have copied into the blocked layout: oneDNN's
  /// JIT kernels read such inputs plain anyway (plan() copies them back into
  /// the workspace), so the copy padded to 16 channels, 5.3x the image
  /// (MobileNetV2: 3.1 MiB, the session's largest blob), is never made.
  static std::optional<Plan> plan_from_plain(const LayerInfo& adapt, const LayerInfo& info, Form l, bool prepare) {
    if (l != Layout::nchw8c && l != Layout::nchw16c) return std::nullopt;
    if (!(Schema::parse(adapt.layer->get_string("from")) == Schema{})) return std::nullopt;
    const Shape& in = info.input_shapes[0];
    if (in.rank() != 4 || in[1] >= channel_block(l) || !check(info, l)) return std::nullopt;
    if (core::conv2_window(*info.layer, in).group != 1) return std::nullopt;
    Plan p = plan(info, l, prepare, true);
    if (!reference_impl(p).empty()) return std::nullopt;
    return p;
  }

  /// A 1x1 convolution and the 3x3 depthwise one reading its output, as one
  /// oneDNN primitive (post-op append_dw): its JIT kernel keeps a few rows of
  /// the 1x1 output per thread in the scratchpad instead of the whole tensor
  /// (MobileNetV2's 96x112x112 expansion, 4.6 MiB, was most of a session's
  /// arena). Same speed as the two apart (16->96@112 then 3x3 s2: 0.329 against
  /// 0.327 ms); nullopt where oneDNN would fuse only in its reference code.
  /// `prepare` false: whether they fuse, nothing bound (the plan's question).
  static std::optional<Plan> plan_with_previous(const LayerInfo& previous, const LayerInfo& next, Form previous_form,
                                                Form l, bool adapt, bool prepare) {
    if (previous_form.layout != l.layout || previous_form.act != l.act) return std::nullopt;
    if (adapt) return plan_from_plain(previous, next, l, prepare);
    const LayerInfo& info = previous;
    const Layer& pw = *info.layer;
    const Layer& dw = *next.layer;
    // Blocked layouts only: oneDNN 2.6's fused kernel in channels last (its JIT, not the reference code)
    // writes wrong values at AVX2 (a MobileNetV2 block 16->96 at 112, then 3x3 at stride 2: 37% off).
    if (pw.type != kType || (l != Layout::nchw8c && l != Layout::nchw16c) || info.input_shapes[0].rank() != 4)
      return std::nullopt;
    if (!check(info, l) || !check(next, l)) return std::nullopt;
    const Window2d a = core::conv2_window(pw, info.input_shapes[0]);
    const Window2d b = core::conv2_window(dw, next.input_shapes[0]);
    const bool pointwise = a.group == 1 && a.kh == 1 && a.kw == 1 && a.sh == 1 && a.sw == 1 && a.dh == 1 &&
                           a.dw == 1 && a.pt == 0 && a.pl == 0 && a.pb == 0 && a.pr == 0;
    const bool depthwise = b.group == b.c && b.oc == b.c && b.kh == 3 && b.kw == 3 && b.sh == b.sw &&
                           (b.sh == 1 || b.sh == 2) && b.dh == 1 && b.dw == 1 && b.pt == 1 && b.pl == 1;
    if (!pointwise || !depthwise) return std::nullopt;
    const Activation act = core::fused_activation(pw), dw_act = core::fused_activation(dw);
    const Blob& w = pw.weight("weight");
    const Blob* bias = pw.find_weight("bias");
    const Blob& dw_w = dw.weight("weight");
    const Blob* dw_bias = dw.find_weight("bias");
    const dims wd{a.oc, a.c, 1, 1};
    const dnnl::memory::desc b_md = bias ? dnnl::memory::desc({a.oc}, dt::f32, tag::x) : dnnl::memory::desc();
    // The pointwise activation runs inside the fused primitive: only where oneDNN keeps NaN in it.
    if (info.keep_nan && drops_nan(act)) return std::nullopt;
    Plan p;
    dnnl::post_ops ops;
    append_activation(ops, act, /*keep_nan=*/false);
    ops.append_dw(dt::f32, dw_bias ? dt::f32 : dt::undef, dt::f32, 3, b.sh, 1, 0, {});
    fuse_activation(ops, p, dw_act, next, next.output_shapes[0], l);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                      act_md(info.input_shapes[0], l), dnnl::memory::desc(wd, dt::f32, tag::any),
                                      b_md, act_md(info.output_shapes[0], l), {1, 1}, {0, 0}, {0, 0}, {0, 0});
    dnnl::convolution_forward::primitive_desc pd(d, make_attr(&ops), cpu_engine());
    if (is_reference(pd)) return std::nullopt;
    // oneDNN derives the depthwise output's size (its right padding) itself: it must be ours.
    if (pd.dst_desc() != act_md(next.output_shapes[0], l)) return std::nullopt;
    constexpr int kDwWeights = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, kDwBias = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS;
    const dnnl::memory::desc dwb_md({b.c}, dt::f32, tag::x);
    if (dw_bias && pd.query_md(dnnl::query::exec_arg_md, kDwBias) != dwb_md) return std::nullopt;
    if (!prepare) {
      p.steps.push_back({pd, {}});
      return p;
    }

    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}};
    bind_weights(info, p, args, w, wd, pd.weights_desc(), bias, b_md);
    const dnnl::memory dwm = shared_reorder(info, p.shared, "dw_weight", weight_memory(plain_md({b.c, 1, 1, 3, 3}), dw_w),
                                            pd.query_md(dnnl::query::exec_arg_md, kDwWeights));
    args.push_back({kDwWeights, Mem{Mem::fixed, p.add_fixed(dwm)}});
    p.keep.push_back(dw_w);
    if (dw_bias) {
      args.push_back({kDwBias, Mem{Mem::fixed, p.add_fixed(weight_memory(dwb_md, *dw_bias))}});
      p.keep.push_back(*dw_bias);
    }
    p.steps.push_back({pd, std::move(args)});
    return p;
  }
};

// ---------------------------------------------------------------------------
// deconv2: oneDNN's deconvolution (groups, strides, dilations, pads, bias,
// fused activation); output_padding by a smaller right padding.

struct Deconv2 {
  static constexpr std::string_view kType = "deconv2";
  static constexpr bool kRefuseReference = true;

  /// Whether the bias and activation can be a binary add after the deconvolution:
  /// oneDNN 2.6's binary post-op writes wrong values on a blocked layout whose
  /// channels leave the last block partly empty, and with AVX-512 past the
  /// output where they fill blocks of 8 but not of 16 (Binary's plan).
  static bool add_after_is_sound(const Shape& out, Form l) {
    const int64_t block = channel_block(l);
    return block == 0 || (out[1] % block == 0 && (block == 16 || !has_avx512() || out[1] % 16 == 0));
  }
  static bool has_epilogue(const Layer& layer) {
    return layer.find_weight("bias") || core::fused_activation(layer).kind != Activation::none;
  }

  static Support check(const LayerInfo& info, Form l) {
    if (Support s = Conv2::check(info, l); !s) return s;
    if (l.act == dt::f32 && has_epilogue(*info.layer) && !add_after_is_sound(info.output_shapes[0], l))
      return Support::no(fmt::format(
          "oneDNN 2.6 runs a deconvolution's bias and fused activation in reference code after it (5-40x "
          "slower), and {} output channels in blocks of {} leave a pass after it unsound: channels last or "
          "another routine",
          info.output_shapes[0][1], channel_block(l)));
    return Support::yes();
  }

  static Plan plan(const LayerInfo& info, Form l, bool prepare) {
    const Layer& layer = *info.layer;
    const core::Deconv2Window g = core::deconv2_window(layer, info.input_shapes[0]);
    const Activation act = core::fused_activation(layer);
    const Blob& w = layer.weight("weight");
    const Blob* bias = layer.find_weight("bias");
    const dnnl::memory::dim icg = g.c / g.group, ocg = g.oc / g.group;
    // oneDNN's logical weights are [G,] O/G, C/G, KH, KW; ours (ONNX's) are stored [G, C/G, O/G, KH, KW].
    const dims wd = g.group > 1 ? dims{g.group, ocg, icg, g.kh, g.kw} : dims{g.oc, g.c, g.kh, g.kw};
    const dims user_strides = g.group > 1 ? dims{icg * ocg * g.kh * g.kw, g.kh * g.kw, ocg * g.kh * g.kw, g.kw, 1}
                                          : dims{g.kh * g.kw, ocg * g.kh * g.kw, g.kw, 1};
    const dnnl::memory::desc w_any(wd, l.act, tag::any);
    const Shape& out = info.output_shapes[0];
    // oneDNN 2.6's deconvolution (its reference wrapper around the backward-data
    // convolution, whatever the ISA) applies a bias and post-ops in scalar code
    // after it (ops_bench, Zen 1: 2x2 stride 2, 24 -> 24 at 160, 2 ms plain, 10
    // with a bias, 82 with a relu; 4x4 stride 2, 64 -> 32 at 40, 1.5, 2.1 and
    // 8.6 ms): they are a binary add after it instead, one jit pass (1.5 ms with the relu).
    const bool after = l.act == dt::f32 && has_epilogue(layer) && add_after_is_sound(out, l);
    const dnnl::memory::desc b_md = bias && !after ? dnnl::memory::desc({g.oc}, dt::f32, tag::x) : dnnl::memory::desc();
    Plan p;
    dnnl::post_ops ops;
    fuse_activation(ops, p, act, info, out, l);
    dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                        act_md(info.input_shapes[0], l), w_any, b_md, act_md(out, l),
                                        {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.pt, g.pl}, {g.pb - g.oph, g.pr - g.opw});
    dnnl::deconvolution_forward::primitive_desc pd(d, make_attr(after ? nullptr : &ops), cpu_engine());
    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}};
    std::optional<dnnl::binary::primitive_desc> add;
    std::vector<std::pair<int, Mem>> add_args{{DNNL_ARG_SRC_0, out0}, {DNNL_ARG_DST, out0}};
    // The bias [1, OC, 1, 1] in the output's layout (oneDNN's binary takes only its reference code for
    // mixed ones); with whole channel blocks its values lie in channel order in every layout.
    const dnnl::memory::desc per_channel = act_md(Shape{1, g.oc, 1, 1}, l);
    if (after) {
      add.emplace(dnnl::binary::desc(dnnl::algorithm::binary_add, act_md(out, l), per_channel, act_md(out, l)),
                  make_attr(&ops), cpu_engine());
    }
    if (prepare) {
      const dnnl::memory::desc user(wd, dt::f32, user_strides);
      const dnnl::memory wm = shared_reorder(info, p.shared, "weight", weight_memory(user, w), pd.weights_desc());
      args.push_back({DNNL_ARG_WEIGHTS, Mem{Mem::fixed, p.add_fixed(wm)}});
      p.keep.push_back(w);
      if (after) {
        dnnl::memory b(per_channel, cpu_engine());  // owns its memory: zeros where the layer has no bias
        float* bp = static_cast<float*>(b.get_data_handle());
        for (int64_t c = 0; c < g.oc; ++c) bp[c] = bias ? bias->data_as<float>()[c] : 0.0f;
        add_args.push_back({DNNL_ARG_SRC_1, Mem{Mem::fixed, p.add_fixed(b)}});
      } else if (bias) {
        args.push_back({DNNL_ARG_BIAS, Mem{Mem::fixed, p.add_fixed(weight_memory(b_md, *bias))}});
        p.keep.push_back(*bias);
      }
    }
    p.steps.push_back({pd, std::move(args)});
    if (add) p.steps.push_back({*add, std::move(add_args)});
    return p;
  }

};

// ---------------------------------------------------------------------------
// dense: a matmul [N,K] x [K,O] (the weights [O,K] read transposed, reordered
// once to the layout oneDNN picks) with bias and fused activation. The input
// is plain, so its leading dims are the rows of one [N,K] matrix (a
// transformer's [batch, tokens, hidden] is N = batch x tokens). Not the inner
// product primitive: whole ViT-B/16 runs took 167-186 ms against its 198-242
// (Whisper's encoder 211-230 against 232-234, BERT and DistilBERT even).

struct Dense {
  static constexpr std::string_view kType = "dense";
  static constexpr bool kRefuseReference = true;

  static Support check(const LayerInfo& info, Form) {
    const Shape& s = info.input_shapes[0];
    if (s.rank() < 2)
      return Support::no(fmt::format("cpu/onednn dense takes an input [..., N, K]; {} has rank {}", s.to_string(),
                                     s.rank()));
    if (s.numel() == 0) return Support::no("the input is empty");
    return float_weights(*info.layer, {"weight", "bias"});
  }

  static Plan plan(const LayerInfo& info, Form f, bool prepare) {
    const Layer& layer = *info.layer;
    const Blob& w = layer.weight("weight");
    const Blob* bias = layer.find_weight("bias");
    const Shape& x = info.input_shapes[0];
    const int64_t k = x[x.rank() - 1], n = x.numel() / k, o = w.shape()[0];
    const dnnl::memory::desc bias_md = bias ? dnnl::memory::desc({1, o}, dt::f32, tag::ab) : dnnl::memory::desc();
    Plan p;
    dnnl::post_ops ops;
    fuse_activation(ops, p, core::fused_activation(layer, true, true), info, Shape{n, o}, {Layout::nchw, f.act});
    auto make_pd = [&](tag weights) {
      dnnl::matmul::desc d(act_md(Shape{n, k}, {Layout::nchw, f.act}), dnnl::memory::desc({k, o}, f.act, weights),
                           bias_md, act_md(Shape{n, o}, {Layout::nchw, f.act}));
      return dnnl::matmul::primitive_desc(d, make_attr(&ops), cpu_engine());
    };
    // Where oneDNN has no blocked weight format for this CPU (its GEMM-based
    // matmul: AVX2 in oneDNN 2.6), it asks for plain [K,O] weights; its GEMM
    // reads them transposed, as the model stores them ([O,K]), at 163-173
    // GFLOP/s on Zen 3 against 79-143 for [K,O] (BERT's and ViT's dense
    // layers, 2 threads: bench/ops_bench --type dense).
    dnnl::matmul::primitive_desc pd = make_pd(tag::any);
    if (pd.weights_desc() == dnnl::memory::desc({k, o}, f.act, tag::ab)) pd = make_pd(tag::ba);
    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}};
    if (prepare) {
      const dnnl::memory wm = shared_reorder(info, p.shared, "weight_kn", weight_memory(dnnl::memory::desc({k, o}, dt::f32, tag::ba), w), pd.weights_desc());
      args.push_back({DNNL_ARG_WEIGHTS, Mem{Mem::fixed, p.add_fixed(wm)}});
      p.keep.push_back(w);
      if (bias) {
        args.push_back({DNNL_ARG_BIAS, Mem{Mem::fixed, p.add_fixed(weight_memory(bias_md, *bias))}});
        p.keep.push_back(*bias);
      }
    }
    p.steps.push_back({pd, std::move(args)});
    return p;
  }

};

// ---------------------------------------------------------------------------
// pool2: max, avg (excluding or including padding), global; dilations; ceil
// mode by widening the bottom/right padding to what the last window needs.

struct Pool2 {
  static constexpr std::string_view kType = "pool2";
  static constexpr bool kRefuseReference = true;

  /// Bottom (or right) padding oneDNN needs so that its floor formula gives `out`.
  static int64_t padding_r(int64_t in, int64_t pad_l, int64_t pad_r, int64_t k, int64_t s, int64_t d, int64_t out) {
    const int64_t ext = (k - 1) * d + 1;
    return std::max(pad_r, (out - 1) * s + ext - in - pad_l);
  }
  /// Whether some window along one axis covers padding only.
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

  static Support check(const LayerInfo& info, Form l) {
    if (Support s = rank4_unless_plain(info.input_shapes[0], l, "the input"); !s) return s;
    if (info.input_shapes[0].rank() != 4) return Support::no("pool2 needs an input [N,C,H,W]");
    const Layer& layer = *info.layer;
    const Window2d g = core::pool2_window(layer, info.input_shapes[0]);
    if (empty_window(g.h, g.pt, g.kh, g.sh, g.dh, g.oh) || empty_window(g.w, g.pl, g.kw, g.sw, g.dw, g.ow))
      return Support::no("a window covers only padding (cpu/ref gives -inf or 0 there; oneDNN does not)");
    const bool include_pad = layer.get_string("mode") == "avg" && layer.get_int("count_include_pad", 0) != 0;
    if (include_pad && (padding_r(g.h, g.pt, g.pb, g.kh, g.sh, g.dh, g.oh) > g.pb ||
                        padding_r(g.w, g.pl, g.pr, g.kw, g.sw, g.dw, g.ow) > g.pr))
      return Support::no("ceil_mode windows hang past the padding and count_include_pad=1: oneDNN would count "
                         "the overhang, cpu/ref does not");
    return Support::yes();
  }

  static Plan plan(const LayerInfo& info, Form l, bool) {
    const Layer& layer = *info.layer;
    const Window2d g = core::pool2_window(layer, info.input_shapes[0]);
    const bool is_max = layer.get_string("mode") == "max";
    const bool include_pad = layer.get_int("count_include_pad", 0) != 0;
    const auto alg = is_max ? dnnl::algorithm::pooling_max
                     : include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                   : dnnl::algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_v2_forward::desc d(
        dnnl::prop_kind::forward_inference, alg, act_md(info.input_shapes[0], l), act_md(info.output_shapes[0], l),
        {g.sh, g.sw}, {g.kh, g.kw}, {g.dh - 1, g.dw - 1}, {g.pt, g.pl},
        {padding_r(g.h, g.pt, g.pb, g.kh, g.sh, g.dh, g.oh), padding_r(g.w, g.pl, g.pr, g.kw, g.sw, g.dw, g.ow)});
    return Plan::single(dnnl::pooling_v2_forward::primitive_desc(d, make_attr(), cpu_engine()),
                        {{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}});
  }

};

// ---------------------------------------------------------------------------
// Elementwise activations: one input, same shape out.

/// A string usable as a template argument (a layer type name).
template <std::size_t N>
struct FixedName {
  char s[N];
  constexpr FixedName(const char (&str)[N]) { std::copy_n(str, N, s); }
  constexpr operator std::string_view() const { return {s, N - 1}; }
};

struct Eltwise {
  dnnl::algorithm alg;
  float alpha = 0, beta = 0;
  bool then_clip01 = false;  ///< hardsigmoid: linear, then clip to [0,1]
};

template <class K>
struct Unary {
  static constexpr std::string_view kType = K::kType;
  static constexpr bool kRefuseReference = true;

  static Support check(const LayerInfo& info, Form l) {
    if constexpr (requires { K::check(info); })
      if (Support s = K::check(info); !s) return s;
    return rank4_unless_plain(info.input_shapes[0], l, "the input");
  }

  static Plan plan(const LayerInfo& info, Form l, bool) {
    if constexpr (requires { K::activation(*info.layer); }) {
      // relu, clip, hardsigmoid: oneDNN drops NaN in them (drops_nan); where NaN may come, our pass computes them.
      if (info.keep_nan && l.act == dt::f32) {
        Plan p;
        p.after = K::activation(*info.layer);
        p.after_shape = info.input_shapes[0];
        p.after_layout = l;
        return p;
      }
    }
    const Eltwise e = K::get(*info.layer);
    const dnnl::memory::desc md = act_md(info.input_shapes[0], l);
    dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, e.alg, md, e.alpha, e.beta);
    Plan p = Plan::single(dnnl::eltwise_forward::primitive_desc(d, make_attr(), cpu_engine()),
                          {{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}});
    if (e.then_clip01) {
      // As a post-op of an eltwise, oneDNN 2.6 runs its reference code: a second pass, in place, instead.
      dnnl::eltwise_forward::desc clip(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_clip, md, 0.0f, 1.0f);
      p.steps.push_back({dnnl::eltwise_forward::primitive_desc(clip, make_attr(), cpu_engine()),
                         {{DNNL_ARG_SRC, out0}, {DNNL_ARG_DST, out0}}});
    }
    return p;
  }

};

struct ReluK {
  static constexpr std::string_view kType = "relu";
  static Eltwise get(const Layer&) { return {dnnl::algorithm::eltwise_relu}; }
  static Activation activation(const Layer&) { return {Activation::relu}; }
};
struct ClipK {
  static constexpr std::string_view kType = "clip";
  static Eltwise get(const Layer& l) {
    const Activation a = activation(l);
    return {dnnl::algorithm::eltwise_clip, a.min, a.max};
  }
  static Activation activation(const Layer& l) {
    Activation a{Activation::clip};
    a.min = static_cast<float>(l.get_float("min", -std::numeric_limits<double>::infinity()));
    a.max = static_cast<float>(l.get_float("max", std::numeric_limits<double>::infinity()));
    return a;
  }
};
struct HardswishK {
  static constexpr std::string_view kType = "hardswish";
  static Eltwise get(const Layer&) { return {dnnl::algorithm::eltwise_hardswish}; }
};
struct HardsigmoidK {
  static constexpr std::string_view kType = "hardsigmoid";
  static Eltwise get(const Layer& l) {
    const Activation a = activation(l);
    return {dnnl::algorithm::eltwise_linear, a.alpha, a.beta, true};
  }
  static Activation activation(const Layer& l) {
    Activation a{Activation::hardsigmoid};
    a.alpha = static_cast<float>(l.get_float("alpha", 0.2));
    a.beta = static_cast<float>(l.get_float("beta", 0.5));
    return a;
  }
};
struct SigmoidK {
  static constexpr std::string_view kType = "sigmoid";
  static Eltwise get(const Layer&) { return {dnnl::algorithm::eltwise_logistic}; }
};
struct TanhK {
  static constexpr std::string_view kType = "tanh";
  static Eltwise get(const Layer&) { return {dnnl::algorithm::eltwise_tanh}; }
};
struct GeluK {
  static constexpr std::string_view kType = "gelu";
  static Eltwise get(const Layer& l) {
    return {l.get_string("approximate", "none") == "tanh" ? dnnl::algorithm::eltwise_gelu_tanh
                                                          : dnnl::algorithm::eltwise_gelu_erf};
  }
};

template <FixedName Name, dnnl::algorithm A, int Alpha = 0, int Beta = 0>
struct SimpleK {
  static constexpr std::string_view kType = Name;
  static Eltwise get(const Layer&) { return {A, static_cast<float>(Alpha), static_cast<float>(Beta)}; }
};
using AbsK = SimpleK<"abs", dnnl::algorithm::eltwise_abs>;
using NegK = SimpleK<"neg", dnnl::algorithm::eltwise_linear, -1, 0>;
using SqrtK = SimpleK<"sqrt", dnnl::algorithm::eltwise_sqrt>;
using ExpK = SimpleK<"exp", dnnl::algorithm::eltwise_exp>;
using LogK = SimpleK<"log", dnnl::algorithm::eltwise_log>;
using ReciprocalK = SimpleK<"reciprocal", dnnl::algorithm::eltwise_pow, 1, -1>;
using SiluK = SimpleK<"silu", dnnl::algorithm::eltwise_swish, 1>;
using MishK = SimpleK<"mish", dnnl::algorithm::eltwise_mish>;
struct LeakyReluK {
  static constexpr std::string_view kType = "leaky_relu";
  static Support check(const LayerInfo& info) {
#if defined(__aarch64__)
    // Its aarch64 jit computes min(x, 0)·alpha + max(x, 0) with FMINNM/FMAXNM,
    // which return the number for NaN: 0 where ONNX keeps NaN.
    if (info.keep_nan) return Support::no("NaN may reach this layer, and oneDNN 2.6's aarch64 leaky_relu gives 0 for it");
#else
    (void)info;
#endif
    return Support::yes();
  }
  static Eltwise get(const Layer& l) {
    return {dnnl::algorithm::eltwise_relu, static_cast<float>(l.get_float("alpha", 0.01))};
  }
};
/// pow with a constant exponent (x ** y with y an input has no oneDNN eltwise).
struct PowK {
  static constexpr std::string_view kType = "pow";
  static Support check(const LayerInfo& info) {
    if (info.input_shapes.size() != 1) return Support::no("computes x ** exponent with a constant exponent, not x ** y");
    return Support::yes();
  }
  static Eltwise get(const Layer& l) {
    return {dnnl::algorithm::eltwise_pow, 1.0f, static_cast<float>(l.get_float("exponent"))};
  }
};

// ---------------------------------------------------------------------------
// reduce: mean, sum, l2, prod over any axes (plain layout; oneDNN's
// reduction keeps the reduced dims as 1, which has our keepdims=0 layout too).

struct Reduce {
  static constexpr std::string_view kType = "reduce";
  static constexpr bool kRefuseReference = true;

  static Support check(const LayerInfo& info, Form l) {
    if (l != Layout::nchw) return Support::no("reduces in the plain layout only");
    const std::string mode = info.layer->get_string("mode");
    // oneDNN's max starts from the lowest finite float and drops NaN: a row of
    // -inf (a fully masked attention row) gave -3.4e38, not -inf.
    if (mode != "mean" && mode != "sum" && mode != "l2" && mode != "prod")
      return Support::no(fmt::format("oneDNN's {} reduction loses -inf and NaN", mode));
    return rank4_unless_plain(info.input_shapes[0], l, "the input");
  }

  static Plan plan(const LayerInfo& info, Form l, bool) {
    const Shape& in = info.input_shapes[0];
    const std::vector<bool> reduced = core::reduced_axes(*info.layer, in);
    Shape kept = in;
    for (int d = 0; d < in.rank(); ++d)
      if (reduced[static_cast<std::size_t>(d)]) kept[d] = 1;
    const std::string mode = info.layer->get_string("mode");
    const dnnl::algorithm alg = mode == "mean" ? dnnl::algorithm::reduction_mean
                                : mode == "sum" ? dnnl::algorithm::reduction_sum
                                : mode == "max" ? dnnl::algorithm::reduction_max
                                : mode == "min" ? dnnl::algorithm::reduction_min
                                : mode == "prod" ? dnnl::algorithm::reduction_mul
                                                 : dnnl::algorithm::reduction_norm_lp_sum;
    dnnl::reduction::desc d(alg, act_md(in, l), act_md(kept, l), mode == "l2" ? 2.0f : 0.0f, 0.0f);
    return Plan::single(dnnl::reduction::primitive_desc(d, make_attr(), cpu_engine()),
                        {{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}});
  }
};

// ---------------------------------------------------------------------------
// add, mul, sub, div: same shapes, or one input broadcast (oneDNN broadcasts
// only its second source, so a broadcast first input of add or mul is
// swapped; sub and div, which do not commute, need the first one whole).

template <class K>
struct Binary {
  static constexpr std::string_view kType = K::kType;
  static constexpr bool kRefuseReference = true;

  /// Index of the input that has the output's shape (-1: neither).
  static int full_input(const LayerInfo& info) {
    if (info.input_shapes[0] == info.output_shapes[0]) return 0;
    if (info.input_shapes[1] == info.output_shapes[0]) return 1;
    return -1;
  }

  static Support check(const LayerInfo& info, Form l) {
    if (core::requantizes_as_tflite(*info.layer))
      return Support::no("TensorFlow Lite's int8 add rounds with fixed-point multipliers; this one sums in float");
    for (int i = 0; i < 2; ++i) {
      const Shape& s = info.input_shapes[static_cast<std::size_t>(i)];
      // A scalar (x / 2) broadcasts as [1, ..., 1] in the plain layout.
      if (s.rank() == 0 && l == Layout::nchw && info.output_shapes[0].rank() >= 1) continue;
      if (Support ok = rank4_unless_plain(s, l, i ? "the second input" : "the first input"); !ok) return ok;
    }
    if (full_input(info) < 0)
      return Support::no(fmt::format("both inputs {} and {} broadcast; oneDNN's binary broadcasts only one",
                                     info.input_shapes[0].to_string(), info.input_shapes[1].to_string()));
    if (!K::kCommutes && full_input(info) != 0)
      return Support::no(fmt::format("the first input {} broadcasts to {}; oneDNN broadcasts only the second, and {} "
                                     "does not commute",
                                     info.input_shapes[0].to_string(), info.output_shapes[0].to_string(), K::kType));
    return Support::yes();
  }

  static Plan plan(const LayerInfo& info, Form l, bool) {
    const int full = full_input(info), other = 1 - full;
    const Shape& out = info.output_shapes[0];
    Shape small;  // the other input with leading 1s up to the output's rank
    const Shape& o = info.input_shapes[static_cast<std::size_t>(other)];
    for (int d = 0; d < out.rank() - o.rank(); ++d) small.push_back(1);
    for (int64_t v : o) small.push_back(v);
    dnnl::binary::desc d(K::kAlg, act_md(out, l), act_md(small, l), act_md(out, l));
    // add's fused relu/clip: a post-op. oneDNN 2.6's binary with an eltwise
    // post-op writes wrong values on a blocked layout whose channels do not fill
    // the last block (jit:uni, nChw8c with 2 or 12 channels), and on AVX-512
    // writes past the output where they fill blocks of 8 but not of 16 (nChw8c,
    // 24 channels at 64x64): there it is a second pass, in place.
    const Activation act = core::fused_activation(*info.layer);
    const int64_t block = channel_block(l);
    const bool post_op = block == 0 || out.rank() < 2 || out[1] % std::max<int64_t>(block, 16) == 0;
    Plan p;
    dnnl::post_ops ops;
    const bool pass = info.keep_nan && l.act == dt::f32 && drops_nan(act);  // our pass after it
    if (post_op || pass) fuse_activation(ops, p, act, info, out, l);
    p.steps.push_back({dnnl::binary::primitive_desc(d, make_attr(&ops), cpu_engine()),
                       {{DNNL_ARG_SRC_0, Mem{Mem::input, full}}, {DNNL_ARG_SRC_1, Mem{Mem::input, other}},
                        {DNNL_ARG_DST, out0}}});
    if (!post_op && !pass && act.kind != Activation::none) {
      const bool relu = act.kind == Activation::relu;
      dnnl::eltwise_forward::desc e(dnnl::prop_kind::forward_inference,
                                    relu ? dnnl::algorithm::eltwise_relu : dnnl::algorithm::eltwise_clip, act_md(out, l),
                                    relu ? 0.0f : act.min, relu ? 0.0f : act.max);
      p.steps.push_back({dnnl::eltwise_forward::primitive_desc(e, make_attr(), cpu_engine()), {{DNNL_ARG_SRC, out0}, {DNNL_ARG_DST, out0}}});
    }
    return p;
  }

  /// add: a convolution on this schema whose output is one operand, the other
  /// of the same shape, as one convolution adding its result onto the other
  /// (a sum post-op, then the add's activation: oneDNN keeps its brgconv
  /// kernels with it, not with a binary post-op). The fused step reads the
  /// convolution's input, then the other operand (input 1), whose memory the
  /// executor gives the output where nothing reads it after (ResNet's blocks).
  /// The convolution computes in `previous_form` (bfloat16 before a float32
  /// add: its output and the sum in float32).
  static std::optional<Plan> plan_with_previous(const LayerInfo& previous, const LayerInfo& info, Form previous_form,
                                                Form l, bool adapt, bool prepare) {
    if constexpr (K::kAlg != dnnl::algorithm::binary_add) {
      return std::nullopt;
    } else {
      if (adapt || previous.layer->type != "conv2" || previous.input_shapes.size() != 1) return std::nullopt;
      if (info.input_shapes.size() != 2 || info.input_shapes[0] != info.input_shapes[1] ||
          info.input_shapes[0] != info.output_shapes[0] || core::requantizes_as_tflite(*info.layer))
        return std::nullopt;
      if (previous_form.act == dt::s8) return onednn_common::int8_conv_sum(previous, info, l.layout, prepare);
      if (!Conv2::check(previous, previous_form)) return std::nullopt;
      try {
        Plan p = Conv2::plan(previous, previous_form, prepare, false, &info, l.act);
        if (p.steps.size() != 1 || is_reference(p.steps[0].pd)) return std::nullopt;
        return p;
      } catch (const Error&) {
        return std::nullopt;
      }
    }
  }
};

/// One oneDNN binary operation: the layer type, its algorithm, whether it commutes.
template <FixedName Type, dnnl::algorithm Alg, bool Commutes>
struct BinaryKind {
  static constexpr std::string_view kType = Type;
  static constexpr dnnl::algorithm kAlg = Alg;
  static constexpr bool kCommutes = Commutes;
};
using AddK = BinaryKind<"add", dnnl::algorithm::binary_add, true>;
using MulK = BinaryKind<"mul", dnnl::algorithm::binary_mul, true>;
using SubK = BinaryKind<"sub", dnnl::algorithm::binary_sub, false>;
using DivK = BinaryKind<"div", dnnl::algorithm::binary_div, false>;

// ---------------------------------------------------------------------------
// batchnorm (inference): global statistics, scale and shift.

struct Batchnorm {
  static constexpr std::string_view kType = "batchnorm";
  static constexpr bool kRefuseReference = true;

  static Support check(const LayerInfo& info, Form l) {
    if (Support s = rank4_unless_plain(info.input_shapes[0], l, "the input"); !s) return s;
    if (info.input_shapes[0].rank() < 2 || info.input_shapes[0].rank() > 5)
      return Support::no("oneDNN's batch normalization takes [N,C], [N,C,W], [N,C,H,W] or [N,C,D,H,W]");
    return float_weights(*info.layer, {"scale", "bias", "mean", "var"});
  }

  static Plan plan(const LayerInfo& info, Form l, bool prepare) {
    const Layer& layer = *info.layer;
    const float eps = static_cast<float>(layer.get_float("epsilon", 1e-5));
    const auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                       dnnl::normalization_flags::use_shift;
    dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference,
                                              act_md(info.input_shapes[0], l), eps, flags);
    Plan p;
    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}};
    if (prepare) {
      const dnnl::memory::desc c_md({info.input_shapes[0][1]}, dt::f32, tag::x);
      const std::pair<int, const char*> ws[] = {
          {DNNL_ARG_MEAN, "mean"}, {DNNL_ARG_VARIANCE, "var"}, {DNNL_ARG_SCALE, "scale"}, {DNNL_ARG_SHIFT, "bias"}};
      for (auto [arg, key] : ws) {
        const Blob& b = layer.weight(key);
        args.push_back({arg, Mem{Mem::fixed, p.add_fixed(weight_memory(c_md, b))}});
        p.keep.push_back(b);
      }
    }
    p.steps.push_back({dnnl::batch_normalization_forward::primitive_desc(d, make_attr(), cpu_engine()), std::move(args)});
    return p;
  }

};

// ---------------------------------------------------------------------------
// prelu: the slope weight broadcast to the input (as plain weights with the
// input's rank; where oneDNN takes that only with its reference code, it says no).

struct Prelu {
  static constexpr std::string_view kType = "prelu";
  static constexpr bool kRefuseReference = true;

  static Support check(const LayerInfo& info, Form l) {
    if (core::requantizes_as_tflite(*info.layer))
      return Support::no("TensorFlow Lite's int8 PRELU rounds with fixed-point multipliers; oneDNN's is float");
    if (Support s = rank4_unless_plain(info.input_shapes[0], l, "the input"); !s) return s;
    return float_weights(*info.layer, {"slope"});
  }

  static Plan plan(const LayerInfo& info, Form l, bool prepare) {
    const Shape& x = info.input_shapes[0];
    const Blob& slope = info.layer->weight("slope");
    dims wd(static_cast<std::size_t>(x.rank()), 1);
    for (int i = 0; i < slope.shape().rank(); ++i)
      wd[static_cast<std::size_t>(x.rank() - slope.shape().rank() + i)] = slope.shape()[i];
    dnnl::prelu_forward::desc d(dnnl::prop_kind::forward_inference, act_md(x, l), plain_md(wd));
    Plan p;
    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}};
    if (prepare) {
      args.push_back({DNNL_ARG_WEIGHTS, Mem{Mem::fixed, p.add_fixed(weight_memory(plain_md(wd), slope))}});
      p.keep.push_back(slope);
    }
    p.steps.push_back({dnnl::prelu_forward::primitive_desc(d, make_attr(), cpu_engine()), std::move(args)});
    return p;
  }
};

// ---------------------------------------------------------------------------
// concat: any axis in plain layout, channels (axis 1) in the others.

struct Concat {
  static constexpr std::string_view kType = "concat";
  // oneDNN's "ref:any" concat is a reorder per input into views of the output: fine.
  static constexpr bool kRefuseReference = false;

  static Support check(const LayerInfo& info, Form l) {
    for (const Shape& s : info.input_shapes)
      if (Support r = rank4_unless_plain(s, l, "an input"); !r) return r;
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis"),
                                          info.output_shapes[0].rank());
    if (l != Layout::nchw && axis != 1)
      return Support::no(fmt::format("in {} cpu/onednn concatenates channels (axis 1) only, not axis {}",
                                     to_string(l), axis));
    return Support::yes();
  }

  static Plan plan(const LayerInfo& info, Form l, bool) {
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis"),
                                          info.output_shapes[0].rank());
    std::vector<dnnl::memory::desc> srcs;
    for (const Shape& s : info.input_shapes) srcs.push_back(act_md(s, l));
    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_DST, out0}};
    for (std::size_t i = 0; i < srcs.size(); ++i)
      args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), Mem{Mem::input, static_cast<int>(i)}});
    return Plan::single(
        dnnl::concat::primitive_desc(act_md(info.output_shapes[0], l), axis, srcs, cpu_engine(), make_attr()),
        std::move(args));
  }

};

// ---------------------------------------------------------------------------
// softmax along any axis (plain layout).

struct Softmax {
  static constexpr std::string_view kType = "softmax";
  static constexpr bool kRefuseReference = true;

  static Support check(const LayerInfo& info, Form l) {
    return rank4_unless_plain(info.input_shapes[0], l, "the input");
  }

  static Plan plan(const LayerInfo& info, Form l, bool) {
    const Shape& s = info.input_shapes[0];
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), s.rank());
    dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, act_md(s, l), axis);
    return Plan::single(dnnl::softmax_forward::primitive_desc(d, make_attr(), cpu_engine()),
                        {{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}});
  }

};

// ---------------------------------------------------------------------------
// layernorm: y = (x - mean) / sqrt(var + eps) * scale + bias over dims
// axis..rank-1 (core/layer_types.hpp), as oneDNN's layer normalisation over
// the last dim of a 2-D view [outer, inner], any axis. Plain layout only: in
// nhwc the normalised dims of axis 1 ([C,H,W]) are contiguous but in H,W,C
// order (scale would need permuting), and axes 2 and 3 are strided; our layer
// has no channels-only form (ConvNeXt's LayerNorm2d imports as transpose +
// layernorm). Scale is required, bias optional (use_scale, use_shift); mean
// and variance are computed per run.

struct Layernorm {
  static constexpr std::string_view kType = "layernorm";
  static constexpr bool kRefuseReference = true;

  /// The [outer, inner] view: the normalised dims axis..rank-1 are the inner one.
  static void view(const LayerInfo& info, int64_t& outer, int64_t& inner) {
    const Shape& s = info.input_shapes[0];
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), s.rank());
    outer = inner = 1;
    for (int d = 0; d < s.rank(); ++d) (d < axis ? outer : inner) *= s[d];
  }

  static Support check(const LayerInfo& info, Form l) {
    if (Support s = rank4_unless_plain(info.input_shapes[0], l, "the input"); !s) return s;
    return float_weights(*info.layer, {"scale", "bias"});
  }

  static Plan plan(const LayerInfo& info, Form f, bool prepare) {
    const Layer& layer = *info.layer;
    int64_t outer = 0, inner = 0;
    view(info, outer, inner);
    const Blob* bias = layer.find_weight("bias");
    const float eps = static_cast<float>(layer.get_float("epsilon", 1e-5));
    auto flags = dnnl::normalization_flags::use_scale;
    if (bias) flags = flags | dnnl::normalization_flags::use_shift;
    const dnnl::memory::desc md({outer, inner}, f.act, tag::ab);
    dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, md, eps, flags);
    dnnl::layer_normalization_forward::primitive_desc pd(d, make_attr(), cpu_engine());
    Plan p;
    std::vector<std::pair<int, Mem>> args{{DNNL_ARG_SRC, in0}, {DNNL_ARG_DST, out0}};
    // Statistics, where this implementation wants them as arguments: temporaries.
    for (int arg : {DNNL_ARG_MEAN, DNNL_ARG_VARIANCE}) {
      const dnnl::memory::desc st = pd.query_md(dnnl::query::exec_arg_md, arg);
      if (st.get_size() == 0) continue;
      p.temps.push_back(st);
      args.push_back({arg, Mem{Mem::temp, static_cast<int>(p.temps.size()) - 1}});
    }
    if (prepare) {
      const dnnl::memory::desc c_md({inner}, dt::f32, tag::x);
      const Blob& scale = layer.weight("scale");
      args.push_back({DNNL_ARG_SCALE, Mem{Mem::fixed, p.add_fixed(weight_memory(c_md, scale))}});
      p.keep.push_back(scale);
      if (bias) {
        args.push_back({DNNL_ARG_SHIFT, Mem{Mem::fixed, p.add_fixed(weight_memory(c_md, *bias))}});
        p.keep.push_back(*bias);
      }
    }
    p.steps.push_back({pd, std::move(args)});
    return p;
  }

  // bench/ops_bench [1,197,768]: 19.8 us against cpu/ref 224 and cpu/vec 17.6 (1 thread).
};

// ---------------------------------------------------------------------------
// matmul: NumPy semantics (core/layer_types.hpp): a rank-1 left operand is
// [1,K], a rank-1 right one [K,1]; batch dims broadcast, which oneDNN's matmul
// does when both operands have the same rank (leading 1s added here) and each
// batch dim agrees or is 1. Both operands are inputs (our matmul layer has no
// weights and no bias), so nothing is reordered in prepare: plain row-major.

struct Matmul {
  static constexpr std::string_view kType = "matmul";
  static constexpr bool kRefuseReference = true;

  /// A, B and C as oneDNN dims of one rank (>= 2).
  static void operands(const LayerInfo& info, dims& a, dims& b, dims& c) {
    Shape sa = info.input_shapes[0], sb = info.input_shapes[1];
    if (sa.rank() == 1) sa = Shape{1, sa[0]};
    if (sb.rank() == 1) sb = Shape{sb[0], 1};
    const int r = std::max(sa.rank(), sb.rank());
    a.assign(static_cast<std::size_t>(r - sa.rank()), 1);
    b.assign(static_cast<std::size_t>(r - sb.rank()), 1);
    for (int64_t v : sa) a.push_back(v);
    for (int64_t v : sb) b.push_back(v);
    c.resize(static_cast<std::size_t>(r));
    for (int d = 0; d < r - 2; ++d) {
      const auto i = static_cast<std::size_t>(d);
      c[i] = a[i] == 1 ? b[i] : a[i];
    }
    c[static_cast<std::size_t>(r - 2)] = a[static_cast<std::size_t>(r - 2)];
    c[static_cast<std::size_t>(r - 1)] = b[static_cast<std::size_t>(r - 1)];
  }

  static Support check(const LayerInfo& info, Form) {
    for (int i = 0; i < 2; ++i) {
      const Shape& s = info.input_shapes[static_cast<std::size_t>(i)];
      if (s.numel() == 0) return Support::no(fmt::format("input {} {} is empty", i, s.to_string()));
      if (s.rank() > DNNL_MAX_NDIMS)
        return Support::no(fmt::format("input {} has rank {}; oneDNN takes up to {}", i, s.rank(), DNNL_MAX_NDIMS));
    }
    return Support::yes();
  }

  static Plan plan(const LayerInfo& info, Form f, bool) {
    dims a, b, c;
    operands(info, a, b, c);
    dnnl::matmul::desc d(plain_md(a, f.act), plain_md(b, f.act), plain_md(c, f.act));
    return Plan::single(dnnl::matmul::primitive_desc(d, make_attr(), cpu_engine()),
                        {{DNNL_ARG_SRC, in0}, {DNNL_ARG_WEIGHTS, Mem{Mem::input, 1}}, {DNNL_ARG_DST, out0}});
  }

  // bench/ops_bench, 1 thread: [12,197,64]x[12,64,197] 335 us, [12,197,197]x[12,197,64]
  // 276 us, against cpu/ref 25 ms (the only other float32 CPU matmul).
};

// ---------------------------------------------------------------------------
// Registration: every operation in each of its layouts.

template <class Op, Layout... Ls>
void register_layouts() {
  (register_routine(std::make_unique<Onednn<Op, Ls>>()), ...);
}

template <class Op, Layout... Ls>
void register_bf16() {
  if constexpr (sizeof...(Ls) == 0)
    register_bf16<Op, Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c>();
  else
    (register_routine(std::make_unique<Onednn<Op, Ls, DType::bfloat16>>()), ...);
}

template <class Op>
void register_all_layouts() {
  register_layouts<Op, Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c>();
}

const bool g_registered = [] {
  register_all_layouts<Conv2>();
  register_all_layouts<Deconv2>();
  register_layouts<Dense, Layout::nchw>();
  register_all_layouts<Pool2>();
  register_all_layouts<Unary<ReluK>>();
  register_all_layouts<Unary<ClipK>>();
  register_all_layouts<Unary<HardswishK>>();
  register_all_layouts<Unary<HardsigmoidK>>();
  register_all_layouts<Unary<SigmoidK>>();
  register_all_layouts<Unary<TanhK>>();
  register_all_layouts<Unary<GeluK>>();
  register_all_layouts<Unary<AbsK>>();
  register_all_layouts<Unary<NegK>>();
  register_all_layouts<Unary<SqrtK>>();
  register_all_layouts<Unary<ExpK>>();
  register_all_layouts<Unary<LogK>>();
  register_all_layouts<Unary<ReciprocalK>>();
  register_all_layouts<Unary<SiluK>>();
  register_all_layouts<Unary<MishK>>();
  register_all_layouts<Unary<LeakyReluK>>();
  register_all_layouts<Unary<PowK>>();
  register_layouts<Reduce, Layout::nchw>();
  register_layouts<Prelu, Layout::nchw, Layout::nhwc>();  // blocked: oneDNN 2.6 has only its reference code
  register_all_layouts<Binary<AddK>>();
  register_all_layouts<Binary<MulK>>();
  register_all_layouts<Binary<SubK>>();
  register_all_layouts<Binary<DivK>>();
  register_all_layouts<Batchnorm>();
  register_all_layouts<Concat>();
  register_layouts<Softmax, Layout::nchw>();
  register_layouts<Layernorm, Layout::nchw>();
  register_layouts<Matmul, Layout::nchw>();
  // bfloat16 (where the CPU has the instructions): the compute-heavy and the
  // common elementwise layers, in every layout.
  register_bf16<Conv2, Layout::nchw, Layout::nhwc, Layout::nchw16c>();  // nChw8c bf16 convolution is reference code
  register_bf16<Dense, Layout::nchw>();
  register_bf16<Pool2, Layout::nchw, Layout::nhwc, Layout::nchw16c>();  // nChw8c bf16 pooling is reference code
  register_bf16<Unary<ReluK>>();
  register_bf16<Unary<ClipK>>();
  register_bf16<Unary<HardswishK>>();
  register_bf16<Unary<HardsigmoidK>>();
  register_bf16<Unary<SigmoidK>>();
  register_bf16<Unary<TanhK>>();
  register_bf16<Unary<GeluK>>();
  register_bf16<Binary<AddK>>();
  register_bf16<Binary<MulK>>();
  register_bf16<Concat>();
  register_bf16<Layernorm, Layout::nchw>();  // a transformer's: between bfloat16 denses, no casts around it
  register_bf16<Matmul, Layout::nchw>();
  return true;
}();

}  // namespace
}  // namespace softneuro
