// cuda:float32 / cuda:float16 routines "kernel": our own CUDA kernels
// (kernels.cu) for the elementwise activations, broadcasting arithmetic,
// pooling, depthwise convolution, batchnorm, softmax, layernorm, attention,
// gather (embedding lookups), concat/split (strided copies), transpose and the
// plain copies (reshape, flatten, identity).
// Layout-agnostic ones also run in nhwc. Weights are uploaded as float32 in
// prepare(); run() only queues work on the backend's stream.
//
// Structure as cpu/ref: each layer type has a prepared class P with
//   static constexpr std::string_view kType;     the layer type
//   static constexpr bool kNhwc;                 also computes in nhwc
//   static Support supports(const LayerInfo&, const Schema&);
//   P(const LayerInfo&, const Schema&);          = prepare()
//   void run(const RunArgs&);                    queues kernels, no allocation
// and Kernel<P> is the registered Routine.
#include "core/layer_types.hpp"
#include "routines/cuda/common.hpp"
#include "routines/gather_table.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace softneuro::cuda {
namespace {

int64_t prod(const Shape& s, int begin, int end) {
  int64_t p = 1;
  for (int d = begin; d < end; ++d) p *= s[d];
  return p;
}

struct KernelPrepared : Prepared {
  static Support supports(const LayerInfo&, const Schema&) { return Support::yes(); }
};

template <class P>
class Kernel final : public Routine {
 public:
  std::string_view layer_type() const override { return P::kType; }
  std::string_view algorithm() const override { return "kernel"; }
  std::vector<Schema> schemas() const override {
    std::vector<Schema> out;
    for (DType t : {DType::float32, DType::float16}) {
      out.push_back(Schema{Device::cuda, t, Layout::nchw});
      if (P::kNhwc) out.push_back(Schema{Device::cuda, t, Layout::nhwc});
    }
    return out;
  }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (Support s = schema_support(schema, P::kNhwc); !s) return s;
    if (!info.layer) return Support::no("no layer");
    return P::supports(info, schema);
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& schema,
                                           const RoutineParams&) const override {
    if (Support s = supports(info, schema); !s)
      throw Error(fmt::format("{} cannot run this layer: {}", make_descriptor(schema, "kernel"), s.reason), {},
                  info.layer ? info.layer->name : std::string(), "routine");
    return std::make_unique<P>(info, schema);
  }
};

// ---------------------------------------------------------------------------
// Elementwise activations (any layout).

template <class Op>
struct Unary final : KernelPrepared {
  static constexpr std::string_view kType = Op::kType;
  static constexpr bool kNhwc = true;
  kern::ActParams act;
  kern::Elem t;
  int64_t n;
  Unary(const LayerInfo& info, const Schema& s)
      : act(Op::params(*info.layer)), t(elem(s.dtype)), n(info.input_shapes[0].numel()) {}
  void run(const RunArgs& a) override {
    check(kern::unary(t, act, a.inputs[0]->data(), a.outputs[0]->data(), n, stream()), "unary kernel");
  }
};

struct ReluOp {
  static constexpr std::string_view kType = "relu";
  static kern::ActParams params(const Layer&) { return {kern::Act::relu, 0, 0}; }
};
struct ClipOp {
  static constexpr std::string_view kType = "clip";
  static kern::ActParams params(const Layer& l) {
    return {kern::Act::clip, static_cast<float>(l.get_float("min", -std::numeric_limits<double>::infinity())),
            static_cast<float>(l.get_float("max", std::numeric_limits<double>::infinity()))};
  }
};
struct HardswishOp {
  static constexpr std::string_view kType = "hardswish";
  static kern::ActParams params(const Layer&) { return {kern::Act::hardswish, 0, 0}; }
};
struct HardsigmoidOp {
  static constexpr std::string_view kType = "hardsigmoid";
  static kern::ActParams params(const Layer& l) {
    return {kern::Act::hardsigmoid, static_cast<float>(l.get_float("alpha", 0.2)),
            static_cast<float>(l.get_float("beta", 0.5))};
  }
};
struct SigmoidOp {
  static constexpr std::string_view kType = "sigmoid";
  static kern::ActParams params(const Layer&) { return {kern::Act::sigmoid, 0, 0}; }
};
struct TanhOp {
  static constexpr std::string_view kType = "tanh";
  static kern::ActParams params(const Layer&) { return {kern::Act::tanh, 0, 0}; }
};
struct GeluOp {
  static constexpr std::string_view kType = "gelu";
  static kern::ActParams params(const Layer& l) {
    return {l.get_string("approximate", "none") == "tanh" ? kern::Act::gelu_tanh : kern::Act::gelu, 0, 0};
  }
};

// ---------------------------------------------------------------------------
// add, sub, mul, div with NumPy broadcasting, in either layout; add's fused
// activation. compare and logical (1 or 0) and where likewise.

/// NumPy broadcasting of up to three inputs onto `out` stored in `layout`: the
/// output's dims in memory order, with each input's strides (sa, sb, sc; 0 where broadcast).
kern::Strided broadcast_strides(const Shape& out, std::initializer_list<const Shape*> ins, Layout layout) {
  kern::Strided st;
  const int rank = out.rank();
  const auto p = physical_order(rank, layout);
  st.rank = rank;
  int64_t* strides[3] = {st.sa, st.sb, st.sc};
  int k = 0;
  for (const Shape* in : ins) {
    const auto l = logical_strides(*in, layout);
    for (int j = 0; j < rank; ++j) {
      const int d = p[static_cast<std::size_t>(j)];
      const int di = d - (rank - in->rank());
      strides[k][j] = (di >= 0 && (*in)[di] != 1) ? l[static_cast<std::size_t>(di)] : 0;
    }
    ++k;
  }
  for (int j = 0; j < rank; ++j) st.dims[j] = out[p[static_cast<std::size_t>(j)]];
  return st;
}

/// The strided kernels index at most Strided::max_rank dims.
Support strided_rank(const LayerInfo& info) {
  if (info.output_shapes[0].rank() > kern::Strided::max_rank)
    return Support::no(fmt::format("rank {} is above {}", info.output_shapes[0].rank(), kern::Strided::max_rank));
  return Support::yes();
}

/// The kernel's operation of a layer: fixed (add..div), or its "op" (compare, logical).
template <kern::BinOp Op>
struct FixedOp {
  static std::optional<kern::BinOp> of(const Layer&) { return Op; }
};
struct CompareOp {
  static std::optional<kern::BinOp> of(const Layer& l) {
    const std::string o = l.get_string("op", "");
    using B = kern::BinOp;
    if (o == "equal") return B::eq;
    if (o == "not_equal") return B::ne;
    if (o == "less") return B::lt;
    if (o == "less_equal") return B::le;
    if (o == "greater") return B::gt;
    if (o == "greater_equal") return B::ge;
    return std::nullopt;
  }
};
struct LogicalOp {
  static std::optional<kern::BinOp> of(const Layer& l) {
    const std::string o = l.get_string("op", "");
    if (o == "and") return kern::BinOp::land;
    if (o == "or") return kern::BinOp::lor;
    if (o == "xor") return kern::BinOp::lxor;
    return std::nullopt;
  }
};

template <class OpOf, const char* Name>
struct Binary final : KernelPrepared {
  static constexpr std::string_view kType = Name;
  static constexpr bool kNhwc = true;
  kern::Elem t;
  kern::BinOp op;
  int64_t n;
  bool same;
  kern::Strided st;
  kern::ActParams act;
  static Support supports(const LayerInfo& info, const Schema&) {
    if (Support s = strided_rank(info); !s) return s;
    if (core::requantizes_as_tflite(*info.layer))
      return Support::no("TensorFlow Lite's int8 add rounds with fixed-point multipliers; this one sums in float");
    if (!OpOf::of(*info.layer)) return Support::no(fmt::format("unknown op '{}'", info.layer->get_string("op", "")));
    return Support::yes();
  }
  Binary(const LayerInfo& info, const Schema& s)
      : t(elem(s.dtype)), op(*OpOf::of(*info.layer)), act(act_params(core::fused_activation(*info.layer))) {
    const Shape& out = info.output_shapes[0];
    n = out.numel();
    same = info.input_shapes[0] == out && info.input_shapes[1] == out;
    st = broadcast_strides(out, {&info.input_shapes[0], &info.input_shapes[1]}, s.layout);
  }
  void run(const RunArgs& a) override {
    check(kern::binary(t, op, a.inputs[0]->data(), a.inputs[1]->data(), a.outputs[0]->data(), n, st, same, act, stream()),
          "binary kernel");
  }
};
constexpr char kAdd[] = "add", kSub[] = "sub", kMul[] = "mul", kDiv[] = "div", kCompare[] = "compare",
               kLogical[] = "logical";
using Add = Binary<FixedOp<kern::BinOp::add>, kAdd>;
using Sub = Binary<FixedOp<kern::BinOp::sub>, kSub>;
using Mul = Binary<FixedOp<kern::BinOp::mul>, kMul>;
using Div = Binary<FixedOp<kern::BinOp::div>, kDiv>;
using Compare = Binary<CompareOp, kCompare>;
using Logical = Binary<LogicalOp, kLogical>;

struct Where final : KernelPrepared {
  static constexpr std::string_view kType = "where";
  static constexpr bool kNhwc = true;
  kern::Elem t;
  int64_t n;
  kern::Strided st;
  static Support supports(const LayerInfo& info, const Schema&) { return strided_rank(info); }
  Where(const LayerInfo& info, const Schema& s) : t(elem(s.dtype)), n(info.output_shapes[0].numel()) {
    st = broadcast_strides(info.output_shapes[0], {&info.input_shapes[0], &info.input_shapes[1], &info.input_shapes[2]},
                           s.layout);
  }
  void run(const RunArgs& a) override {
    check(kern::where(t, a.inputs[0]->data(), a.inputs[1]->data(), a.inputs[2]->data(), a.outputs[0]->data(), n, st,
                      stream()),
          "where kernel");
  }
};

// ---------------------------------------------------------------------------
// pool2 (max/avg, pads, strides, dilations, ceil mode, count_include_pad, global).

struct Pool2 final : KernelPrepared {
  static constexpr std::string_view kType = "pool2";
  static constexpr bool kNhwc = true;
  kern::Window g;
  bool is_max, include_pad, nhwc;
  kern::Elem t;
  Pool2(const LayerInfo& info, const Schema& s)
      : g(window(core::pool2_window(*info.layer, info.input_shapes[0]))),
        is_max(info.layer->get_string("mode") == "max"),
        include_pad(info.layer->get_int("count_include_pad", 0) != 0),
        nhwc(s.layout == Layout::nhwc),
        t(elem(s.dtype)) {}
  void run(const RunArgs& a) override {
    check(kern::pool2(t, is_max, include_pad, g, nhwc, a.inputs[0]->data(), a.outputs[0]->data(), stream()),
          "pool2 kernel");
  }
};

// ---------------------------------------------------------------------------
// conv2, depthwise only (group == input channels; any channel multiplier):
// direct, with bias and the fused activation; pads may be asymmetric.

struct Depthwise final : KernelPrepared {
  static constexpr std::string_view kType = "conv2";
  static constexpr bool kNhwc = true;
  kern::Window g;
  kern::ActParams act;
  bool nhwc;
  kern::Elem t;
  DeviceBuffer w, bias;
  static Support supports(const LayerInfo& info, const Schema&) {
    if (info.input_shapes[0].rank() != 4) return Support::no("input is not [N,C,H,W]");
    core::Window2d g = core::conv2_window(*info.layer, info.input_shapes[0]);
    if (g.group != g.c)
      return Support::no(fmt::format("depthwise only (group {} != input channels {})", g.group, g.c));
    return float_weights(*info.layer, {"weight", "bias"});
  }
  Depthwise(const LayerInfo& info, const Schema& s)
      : g(window(core::conv2_window(*info.layer, info.input_shapes[0]))),
        act(act_params(core::fused_activation(*info.layer, /*with_affine=*/true))),
        nhwc(s.layout == Layout::nhwc),
        t(elem(s.dtype)) {
    const Blob& wb = info.layer->weight("weight");
    w = upload_floats(wb.data_as<float>(), static_cast<std::size_t>(wb.numel()), DType::float32);
    if (const Blob* b = info.layer->find_weight("bias"))
      bias = upload_floats(b->data_as<float>(), static_cast<std::size_t>(b->numel()), DType::float32);
  }
  void run(const RunArgs& a) override {
    check(kern::depthwise(t, g, nhwc, a.inputs[0]->data(), w.as<float>(), bias.as<float>(), act, a.outputs[0]->data(),
                          stream()),
          "depthwise conv2 kernel");
  }
};

// ---------------------------------------------------------------------------
// batchnorm: y = x * a[c] + b[c] with a = scale / sqrt(var + eps), b = bias - mean * a.

struct Batchnorm final : KernelPrepared {
  static constexpr std::string_view kType = "batchnorm";
  static constexpr bool kNhwc = true;
  int64_t n, c, inner;
  bool channels_last;
  kern::Elem t;
  DeviceBuffer scale, shift;
  static Support supports(const LayerInfo& info, const Schema&) {
    return float_weights(*info.layer, {"scale", "bias", "mean", "var"});
  }
  Batchnorm(const LayerInfo& info, const Schema& s) : t(elem(s.dtype)) {
    const Shape& x = info.input_shapes[0];
    n = x[0];
    c = x[1];
    inner = prod(x, 2, x.rank());
    channels_last = s.layout == Layout::nhwc && x.rank() >= 3;
    const Layer& l = *info.layer;
    const double eps = l.get_float("epsilon", 1e-5);
    auto sc = weight_values(l.weight("scale")), bi = weight_values(l.weight("bias"));
    auto mu = weight_values(l.weight("mean")), va = weight_values(l.weight("var"));
    std::vector<float> a(static_cast<std::size_t>(c)), b(static_cast<std::size_t>(c));
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double inv = 1.0 / std::sqrt(double(va[i]) + eps);
      a[i] = static_cast<float>(double(sc[i]) * inv);
      b[i] = static_cast<float>(double(bi[i]) - double(mu[i]) * double(sc[i]) * inv);
    }
    scale = upload_floats(a, DType::float32);
    shift = upload_floats(b, DType::float32);
  }
  void run(const RunArgs& a) override {
    check(kern::channel_affine(t, a.inputs[0]->data(), a.outputs[0]->data(), scale.as<float>(), shift.as<float>(), n,
                               c, inner, channels_last, {}, stream()),
          "batchnorm kernel");
  }
};

// ---------------------------------------------------------------------------
// softmax along one axis (in either layout: the axis is found in memory order).

struct Softmax final : KernelPrepared {
  static constexpr std::string_view kType = "softmax";
  static constexpr bool kNhwc = true;
  int64_t outer = 1, len = 1, inner = 1;
  kern::Elem t;
  Softmax(const LayerInfo& info, const Schema& s) : t(elem(s.dtype)) {
    const Shape& x = info.input_shapes[0];
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), x.rank());
    auto p = physical_order(x.rank(), s.layout);
    bool after = false;
    for (int d : p) {
      if (d == axis) {
        len = x[d];
        after = true;
      } else if (after) {
        inner *= x[d];
      } else {
        outer *= x[d];
      }
    }
  }
  void run(const RunArgs& a) override {
    check(kern::softmax(t, a.inputs[0]->data(), a.outputs[0]->data(), outer, len, inner, stream()), "softmax kernel");
  }
};

// ---------------------------------------------------------------------------
// layernorm over dims axis..rank-1 (nchw: those are contiguous rows).

struct Layernorm final : KernelPrepared {
  static constexpr std::string_view kType = "layernorm";
  static constexpr bool kNhwc = false;
  int64_t outer, inner;
  float eps;
  kern::Elem t;
  DeviceBuffer scale, bias;
  static Support supports(const LayerInfo& info, const Schema&) { return float_weights(*info.layer, {"scale", "bias"}); }
  Layernorm(const LayerInfo& info, const Schema& s)
      : eps(static_cast<float>(info.layer->get_float("epsilon", 1e-5))), t(elem(s.dtype)) {
    const Shape& x = info.input_shapes[0];
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), x.rank());
    outer = prod(x, 0, axis);
    inner = prod(x, axis, x.rank());
    const Blob& sc = info.layer->weight("scale");
    scale = upload_floats(sc.data_as<float>(), static_cast<std::size_t>(sc.numel()), DType::float32);
    if (const Blob* b = info.layer->find_weight("bias"))
      bias = upload_floats(b->data_as<float>(), static_cast<std::size_t>(b->numel()), DType::float32);
  }
  void run(const RunArgs& a) override {
    check(kern::layernorm(t, a.inputs[0]->data(), a.outputs[0]->data(), scale.as<float>(), bias.as<float>(), outer,
                          inner, eps, stream()),
          "layernorm kernel");
  }
};

// ---------------------------------------------------------------------------
// attention (core::attention_geometry, semantics of cpu/ref): one launch of
// the flash-attention kernel (kernels.cu); q, k, v, the mask and the output
// in the schema's dtype, float32 arithmetic inside. Any strides (perms, Kᵀ
// stored, shared key/value heads, a broadcast mask).

struct Attention final : KernelPrepared {
  static constexpr std::string_view kType = "attention";
  static constexpr bool kNhwc = false;
  kern::Attention g;
  bool has_mask;
  kern::Elem t;
  static Support supports(const LayerInfo& info, const Schema&) {
    const core::AttentionGeometry a = core::attention_geometry(*info.layer, info.input_shapes);
    if (a.grouped()) return Support::no("the kernel takes as many key/value heads as query heads, or one");
    if (a.d > kern::kAttentionMaxHeadDim || a.dv > kern::kAttentionMaxHeadDim)
      return Support::no(fmt::format("heads of {} key and {} value features: the kernel stages at most {} in shared memory",
                                     a.d, a.dv, kern::kAttentionMaxHeadDim));
    if (a.b * a.h > std::numeric_limits<int32_t>::max())
      return Support::no(fmt::format("{} batch x head pairs: one block row each, at most 2^31 - 1", a.b * a.h));
    return Support::yes();
  }
  Attention(const LayerInfo& info, const Schema& s) : t(elem(s.dtype)) {
    const core::AttentionGeometry a = core::attention_geometry(*info.layer, info.input_shapes);
    g.b = a.b, g.h = a.h, g.sq = a.sq, g.sk = a.sk, g.d = a.d, g.dv = a.dv;
    for (int i = 0; i < 4; ++i) {
      g.q[i] = a.q[static_cast<std::size_t>(i)];
      g.k[i] = a.k[static_cast<std::size_t>(i)];
      g.v[i] = a.v[static_cast<std::size_t>(i)];
      g.out[i] = a.out[static_cast<std::size_t>(i)];
      g.mask[i] = a.mask[static_cast<std::size_t>(i)];
    }
    g.causal = a.causal;
    g.causal_offset = a.causal_offset;
    g.zero_masked_rows = a.zero_masked_rows;
    g.scale = a.scale;
    has_mask = a.has_mask;
  }
  void run(const RunArgs& a) override {
    check(kern::attention(t, g, a.inputs[0]->data(), a.inputs[1]->data(), a.inputs[2]->data(),
                          has_mask ? a.inputs[3]->data() : nullptr, a.outputs[0]->data(), stream()),
          "attention kernel");
  }
};

// ---------------------------------------------------------------------------
// gather (an embedding lookup): rows of the table, input 0 or the weight
// "table" (float32, or int8/uint8 per tensor dequantised once here as
// cpu/ref dequantises each row: routines::GatherTable), uploaded in the
// schema's dtype. The indices arrive as the schema's floats (an int64 net
// input is made float32 by io_cast, then moved by the transfer); float16
// holds whole numbers exactly only up to 2048, so cuda:float16 refuses longer
// axes. An index that is no whole number in [-len, len) gives a row of NaN
// where cpu/ref raises an Error: a kernel cannot raise one.

struct Gather final : KernelPrepared {
  static constexpr std::string_view kType = "gather";
  static constexpr bool kNhwc = false;
  static constexpr int64_t kHalfExactIntegers = 2048;
  kern::Elem t;
  int64_t outer = 1, len = 1, inner = 1, count;
  bool from_weight;
  DeviceBuffer table;  // the weight table, where there is one
  static int64_t axis_len(const LayerInfo& info, const Shape& table) {
    return table[core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", 0), table.rank())];
  }
  static Support supports(const LayerInfo& info, const Schema& s) {
    if (Support ok = routines::GatherTable::check(info, "cuda/kernel"); !ok) return ok;
    const int64_t n = axis_len(info, routines::GatherTable(info).shape);
    if (s.dtype == DType::float16 && n > kHalfExactIntegers)
      return Support::no(fmt::format("an axis of {} entries: indices arrive as float16, which holds whole numbers "
                                     "exactly only up to {} (cuda/kernel in float32 takes it)",
                                     n, kHalfExactIntegers));
    return Support::yes();
  }
  Gather(const LayerInfo& info, const Schema& s) : t(elem(s.dtype)), count(info.input_shapes.back().numel()) {
    const routines::GatherTable data(info);
    const Shape& shape = data.shape;
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", 0), shape.rank());
    outer = prod(shape, 0, axis);
    len = shape[axis];
    inner = prod(shape, axis + 1, shape.rank());
    from_weight = info.input_shapes.size() == 1;  // no data input: the weight "table"
    if (from_weight) {
      std::vector<float> values(static_cast<std::size_t>(shape.numel()));
      data.copy(nullptr, 0, shape.numel(), values.data(), routines::dequantize_bytes);
      table = upload_floats(values, s.dtype);
    }
  }
  void run(const RunArgs& a) override {
    const void* rows = from_weight ? table.get() : a.inputs[0]->data();
    check(kern::gather_rows(t, rows, a.inputs.back()->data(), a.outputs[0]->data(), outer, len, inner, count, stream()),
          "gather kernel");
  }
};

// ---------------------------------------------------------------------------
// concat / split along an axis: per outer index, contiguous chunks in memory
// order, copied as 2D (pitched) device-to-device copies.

struct AxisChunks {
  int64_t outer = 1;              // product of the memory-order dims before the axis
  std::vector<int64_t> chunks;    // per part: bytes of its axis slab
  int64_t whole = 0;              // bytes of the whole slab
};
AxisChunks axis_chunks(const Layer& l, const Shape& whole, const std::vector<Shape>& parts, int64_t axis_param,
                       Layout layout, std::size_t elem_size) {
  AxisChunks c;
  const int axis = core::normalize_axis(l, "axis", axis_param, whole.rank());
  auto p = physical_order(whole.rank(), layout);
  std::size_t k = 0;
  while (p[k] != axis) c.outer *= whole[p[k++]];
  auto slab = [&](const Shape& s) {
    int64_t v = 1;
    for (std::size_t j = k; j < p.size(); ++j) v *= s[p[j]];
    return v * static_cast<int64_t>(elem_size);
  };
  c.whole = slab(whole);
  for (const Shape& s : parts) c.chunks.push_back(slab(s));
  return c;
}

void copy_2d(void* dst, int64_t dpitch, const void* src, int64_t spitch, int64_t width, int64_t height) {
  if (width == 0 || height == 0) return;
  if (height == 1 || (width == dpitch && width == spitch)) {
    check(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(width * height), cudaMemcpyDeviceToDevice, stream()),
          "cudaMemcpyAsync");
    return;
  }
  check(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(dpitch), src, static_cast<std::size_t>(spitch),
                          static_cast<std::size_t>(width), static_cast<std::size_t>(height), cudaMemcpyDeviceToDevice,
                          stream()),
        "cudaMemcpy2DAsync");
}

struct Concat final : KernelPrepared {
  static constexpr std::string_view kType = "concat";
  static constexpr bool kNhwc = true;
  AxisChunks c;
  Concat(const LayerInfo& info, const Schema& s)
      : c(axis_chunks(*info.layer, info.output_shapes[0], info.input_shapes, info.layer->get_int("axis"), s.layout,
                      elem_bytes(s.dtype))) {}
  void run(const RunArgs& a) override {
    auto* y = static_cast<char*>(a.outputs[0]->data());
    int64_t off = 0;
    for (std::size_t i = 0; i < c.chunks.size(); ++i) {
      copy_2d(y + off, c.whole, a.inputs[i]->data(), c.chunks[i], c.chunks[i], c.outer);
      off += c.chunks[i];
    }
  }
};

struct Split final : KernelPrepared {
  static constexpr std::string_view kType = "split";
  static constexpr bool kNhwc = true;
  AxisChunks c;
  Split(const LayerInfo& info, const Schema& s)
      : c(axis_chunks(*info.layer, info.input_shapes[0], info.output_shapes, info.layer->get_int("axis", 0), s.layout,
                      elem_bytes(s.dtype))) {}
  void run(const RunArgs& a) override {
    const auto* x = static_cast<const char*>(a.inputs[0]->data());
    int64_t off = 0;
    for (std::size_t i = 0; i < c.chunks.size(); ++i) {
      copy_2d(a.outputs[i]->data(), c.chunks[i], x + off, c.whole, c.chunks[i], c.outer);
      off += c.chunks[i];
    }
  }
};

// ---------------------------------------------------------------------------
// transpose (nchw: logical order is memory order).

struct Transpose final : KernelPrepared {
  static constexpr std::string_view kType = "transpose";
  static constexpr bool kNhwc = false;
  kern::Strided st;
  int64_t n;
  kern::Elem t;
  static Support supports(const LayerInfo& info, const Schema&) {
    if (info.input_shapes[0].rank() > kern::Strided::max_rank) return Support::no("rank above 8");
    return Support::yes();
  }
  Transpose(const LayerInfo& info, const Schema& s) : n(info.input_shapes[0].numel()), t(elem(s.dtype)) {
    const Shape& x = info.input_shapes[0];
    const int rank = x.rank();
    std::vector<int64_t> def(static_cast<std::size_t>(rank));
    for (int i = 0; i < rank; ++i) def[static_cast<std::size_t>(i)] = rank - 1 - i;
    auto perm = info.layer->get_ints("perm", def);
    auto strides = logical_strides(x, Layout::nchw);
    st.rank = rank;
    for (int d = 0; d < rank; ++d) {
      st.dims[d] = info.output_shapes[0][d];
      st.sa[d] = strides[static_cast<std::size_t>(perm[static_cast<std::size_t>(d)])];
    }
  }
  void run(const RunArgs& a) override {
    check(kern::strided_copy(t, a.inputs[0]->data(), a.outputs[0]->data(), n, st, stream()), "transpose kernel");
  }
};

// ---------------------------------------------------------------------------
// reshape, flatten, identity: the same elements in the same (nchw) order.

template <const char* Name>
struct Copy final : KernelPrepared {
  static constexpr std::string_view kType = Name;
  static constexpr bool kNhwc = false;
  std::size_t bytes;
  Copy(const LayerInfo& info, const Schema& s)
      : bytes(static_cast<std::size_t>(info.input_shapes[0].numel()) * elem_bytes(s.dtype)) {}
  void run(const RunArgs& a) override {
    if (bytes && a.inputs[0]->data() != a.outputs[0]->data())
      check(cudaMemcpyAsync(a.outputs[0]->data(), a.inputs[0]->data(), bytes, cudaMemcpyDeviceToDevice, stream()),
            "cudaMemcpyAsync");
  }
};
constexpr char kReshape[] = "reshape", kFlatten[] = "flatten", kIdentity[] = "identity";

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(Kernel<Unary<ReluOp>>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Unary<ClipOp>>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Unary<HardswishOp>>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Unary<HardsigmoidOp>>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Unary<SigmoidOp>>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Unary<TanhOp>>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Unary<GeluOp>>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Add>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Sub>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Mul>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Div>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Compare>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Logical>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Where>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Pool2>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Depthwise>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Batchnorm>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Softmax>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Layernorm>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Attention>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Gather>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Concat>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Split>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Transpose>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Copy<kReshape>>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Copy<kFlatten>>);
SOFTNEURO_REGISTER_ROUTINE(Kernel<Copy<kIdentity>>);

}  // namespace softneuro::cuda
