// cpu/vec — our own vectorised float32 routines for the layers of transformer
// blocks that are memory-bound: layernorm, softmax and gelu (AVX2+FMA and
// AVX-512 kernels in vec_kernels_*.cpp, picked at run time), and concat
// (memcpy, no ISA needed).
//
//  layernorm  cpu: any axis (the normalised dims axis..rank-1 are one
//             contiguous row per outer index); mean and variance in one pass.
//  group_norm cpu: [N,C,...], one task per (n, group): the group's planes are contiguous.
//  fake_quant cpu, cpu:float32:nhwc, nchw8c and nchw16c (elementwise): ONNX Runtime's quantise-dequantise;
//             cpu:qint8 and cpu:qint8:nhwc: between int8 blobs, by a 256-entry
//             table (a copy where it is the identity).
//  dynamic_quantize cpu: min/max in chunks across threads, then the values.
//  softmax    cpu: any axis, max-subtracted, vectorised exp: the last along
//             rows, a middle one with the positions after it as vector lanes.
//  gelu       cpu and cpu:float32:nhwc (elementwise, layout-agnostic): erf or
//             tanh form as the layer's `approximate` says.
//  concat     cpu (any axis) and cpu:float32:nhwc (any axis of a rank-4 blob,
//             mapped to its physical axis: channels are the innermost): the
//             output is split into equal element ranges across threads, each
//             copied with memcpy from the inputs that cover it.
//  split      the same backwards (input ranges copied to the outputs covering them).
//  reshape, flatten, identity: memcpy in equal ranges across threads.
//
// Routine parameter `vector_bits` (layernorm/softmax/gelu): 512 (AVX-512, where
// the CPU has avx512_core) or 256 (AVX2+FMA); the default is the widest. The
// CPU lacking AVX2+FMA makes them say unsupported. On aarch64: 128 (Advanced SIMD).
//
// Work is split with args.pool->parallel_for (rows for layernorm/softmax,
// elements for gelu and concat); run() allocates nothing.
//
// First in the default order (src/routines/default_order.cpp), above cpu/onednn
// and cpu:float32:nhwc/xnnpack, from bench/ops_bench on ViT-B/16 shapes (Xeon with AVX-512, 2 vCPUs at
// load 4-7, medians of 1 thread, us): layernorm [1,197,768] vec 17.6 (256-bit
// 22.2), onednn 19.8, ref 224; softmax [1,12,197,197] vec 172 (223), onednn
// 242, ref 4336; gelu erf [1,197,3072] vec 245 (332), onednn 260, ref 10454;
// gelu tanh vec 183 (253), onednn 235; concat [1,1,768]+[1,196,768] vec 10.4,
// ref 10.4, onednn 149; channel concat [1,128,28,28]+[1,32,28,28] vec 9.1,
// onednn 122 (nhwc: vec 10.5, onednn 14.5).
#include "routines/gather_table.hpp"
#include "routines/weight_checks.hpp"
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/weight_quant.hpp"
#include "routines/cpu/quant_params.hpp"
#include "routines/cpu/vec_kernels.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <type_traits>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace softneuro {
namespace {

namespace vk = cpu::vec;

int64_t prod(const Shape& s, int begin, int end) {
  int64_t p = 1;
  for (int d = begin; d < end; ++d) p *= s[d];
  return p;
}

/// Elements a task should have at least (about 16-64 KiB of traffic).
constexpr int64_t kGrainElems = 4096;

std::vector<int64_t> bits_choices() {
#if defined(__aarch64__)
  return {128};
#else
  if (core::cpu_features().avx512_core()) return {512, 256};
  return {256};
#endif
}

/// Why this CPU cannot run the vector kernels, or empty.
std::string vector_kernels_missing() {
#if defined(__x86_64__)
  if (!core::cpu_features().avx2_fma()) return "CPU lacks AVX2/FMA (cpu/vec needs them)";
  return {};
#elif defined(__aarch64__)
  return {};  // Advanced SIMD is aarch64's baseline
#else
  return "this build has no vector kernels for this processor";
#endif
}

const vk::Kernels& kernels_for(int64_t bits) {
#if defined(__x86_64__)
  if (bits == 512 && !core::cpu_features().avx512_core())
    throw Error("cpu/vec: vector_bits 512 needs AVX-512 (F/BW/VL/DQ), which this CPU lacks");
  if (bits == 512) return vk::avx512::kKernels;
  if (bits == 256) return vk::avx2::kKernels;
#elif defined(__aarch64__)
  if (bits == 128) return vk::neon::kKernels;
#endif
  throw Error(fmt::format("cpu/vec: vector_bits {} is not one of this processor's ({})", bits,
                          fmt::join(bits_choices(), ", ")));
}

}  // namespace

const cpu::vec::Kernels* cpu::vec::best_kernels() {
  if (!vector_kernels_missing().empty()) return nullptr;
  return &kernels_for(bits_choices().front());
}

namespace {

Support float_weights(const Layer& l, std::initializer_list<const char*> keys) {
  return routines::float_weights(l, keys, "cpu/vec");
}

/// The registered Routine for prepared class P, which provides
///   static constexpr std::string_view kType; static constexpr bool kSimd;
///   static std::vector<Schema> schemas();
///   static Support supports(const LayerInfo&, const Schema&);
///   P(const LayerInfo&, const Schema&, const vk::Kernels&)   (= prepare)
template <class P>
class Vec final : public Routine {
 public:
  std::string_view layer_type() const override { return P::kType; }
  std::string_view algorithm() const override { return "vec"; }
  std::vector<Schema> schemas() const override { return P::schemas(); }

  Support supports(const LayerInfo& info, const Schema& schema) const override {
    const auto ss = P::schemas();
    if (std::find(ss.begin(), ss.end(), schema) == ss.end())
      return Support::no(fmt::format("cpu/vec {} does not compute in {}", P::kType, schema.to_string()));
    if (P::kSimd)
      if (std::string why = vector_kernels_missing(); !why.empty()) return Support::no(why);
    if (!info.layer) return Support::no("no layer");
    for (const Shape& s : info.input_shapes)
      if (s.numel() == 0) return Support::no(fmt::format("an input {} is empty", s.to_string()));
    if (schema.layout == Layout::nhwc)
      for (const Shape& s : info.input_shapes)
        if (s.rank() != 4)
          return Support::no(fmt::format("nhwc layout needs rank-4 [N,C,H,W] blobs; an input is {}", s.to_string()));
    return P::supports(info, schema);
  }

  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    if (!P::kSimd) return {};
    return {{"vector_bits", bits_choices()}};
  }

  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& schema,
                                           const RoutineParams& params) const override {
    if constexpr (!P::kSimd) {  // copies (concat): no vector kernels, on any processor
      static const vk::Kernels none{};
      return std::make_unique<P>(info, schema, none);
    }
    if (std::string why = vector_kernels_missing(); !why.empty()) throw Error("cpu/vec: " + why);
    const int64_t bits = routine_param(params, "vector_bits", bits_choices().front());
    return std::make_unique<P>(info, schema, kernels_for(bits));
  }

  /// Where P computes by a 256-entry table (P::table_of): that table.
  bool int8_table(const LayerInfo& info, const Schema& schema, int8_t (&table)[256]) const override {
    if constexpr (requires { P::table_of(info, table); }) {
      if (!supports(info, schema)) return false;
      P::table_of(info, table);
      return true;
    }
    return false;
  }
};

const Schema kPlain{};
const Schema kNhwc{Device::cpu, DType::float32, Layout::nhwc};
const Schema kQPlain{Device::cpu, DType::qint8, Layout::nchw};
const Schema kQNhwc{Device::cpu, DType::qint8, Layout::nhwc};

// ---------------------------------------------------------------------------

/// gather (an embedding lookup): rows of the table (input 0, or the weight
/// "table" in float32 or int8/uint8 dequantised by the vector kernel) at
/// run-time indices along the axis, each index checked first.
struct Gather final : PreparedRoutine {
  static constexpr std::string_view kType = "gather";
  static constexpr bool kSimd = true;
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo& info, const Schema&) { return routines::GatherTable::check(info, "cpu/vec"); }

  const vk::Kernels& k;
  routines::GatherTable table;
  int64_t outer = 1, len = 1, inner = 1, count;
  std::string name;
  std::vector<int64_t> at;
  Gather(const LayerInfo& info, const Schema&, const vk::Kernels& kernels)
      : k(kernels), table(info), count(info.input_shapes.back().numel()), name(info.layer->name) {
    const Shape& s = table.shape;
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", 0), s.rank());
    outer = prod(s, 0, axis);
    len = s[axis];
    inner = prod(s, axis + 1, s.rank());
    at.resize(static_cast<std::size_t>(count));
  }
  void run(const RunArgs& a) override {
    const Blob* data = a.inputs.size() == 2 ? a.inputs[0] : nullptr;
    const float* idx = a.inputs.back()->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    for (int64_t i = 0; i < count; ++i) at[static_cast<std::size_t>(i)] = routines::checked_index(idx[i], len, name);
    a.pool->parallel_for(outer * count, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, inner)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / count, i = r % count;
        table.copy(data, (o * len + at[static_cast<std::size_t>(i)]) * inner, inner, y + r * inner, k.dequantize_bytes);
      }
    });
  }
};

struct Layernorm final : PreparedRoutine {
  static constexpr std::string_view kType = "layernorm";
  static constexpr bool kSimd = true;
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo& info, const Schema&) {
    return float_weights(*info.layer, {"scale", "bias"});
  }

  const vk::Kernels& k;
  int64_t outer, inner;
  float eps;
  Blob scale, bias;
  Layernorm(const LayerInfo& info, const Schema&, const vk::Kernels& kernels)
      : k(kernels), eps(static_cast<float>(info.layer->get_float("epsilon", 1e-5))),
        scale(info.layer->weight("scale")) {
    const Shape& s = info.input_shapes[0];
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), s.rank());
    outer = prod(s, 0, axis);
    inner = prod(s, axis, s.rank());
    if (const Blob* b = info.layer->find_weight("bias")) bias = *b;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const float* sc = scale.data_as<float>();
    const float* bi = bias.numel() ? bias.data_as<float>() : nullptr;
    a.pool->parallel_for(outer, std::max<int64_t>(1, kGrainElems / inner), [&](int64_t b, int64_t e) {
      k.layernorm_rows(x + b * inner, y + b * inner, e - b, inner, sc, bi, eps);
    });
  }
};

/// rms_norm: rows of the normalised dims, the sum of squares in two vector accumulators.
struct RmsNorm final : PreparedRoutine {
  static constexpr std::string_view kType = "rms_norm";
  static constexpr bool kSimd = true;
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo& info, const Schema&) { return float_weights(*info.layer, {"scale"}); }

  const vk::Kernels& k;
  int64_t outer, inner;
  float eps;
  Blob scale;
  RmsNorm(const LayerInfo& info, const Schema&, const vk::Kernels& kernels)
      : k(kernels), eps(static_cast<float>(info.layer->get_float("epsilon", 1e-6))), scale(info.layer->weight("scale")) {
    const Shape& s = info.input_shapes[0];
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), s.rank());
    outer = prod(s, 0, axis);
    inner = prod(s, axis, s.rank());
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(outer, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, inner)), [&](int64_t b, int64_t e) {
      k.rms_norm_rows(x + b * inner, y + b * inner, e - b, inner, scale.data_as<float>(), eps);
    });
  }
};

struct GroupNorm final : PreparedRoutine {
  static constexpr std::string_view kType = "group_norm";
  static constexpr bool kSimd = true;
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo& info, const Schema&) {
    return float_weights(*info.layer, {"scale", "bias"});
  }

  const vk::Kernels& k;
  int64_t n, c, groups, spatial;
  float eps;
  Blob scale, bias;
  GroupNorm(const LayerInfo& info, const Schema&, const vk::Kernels& kernels)
      : k(kernels), eps(static_cast<float>(info.layer->get_float("epsilon", 1e-5))),
        scale(info.layer->weight("scale")) {
    const Shape& s = info.input_shapes[0];
    n = s[0];
    c = s[1];
    groups = info.layer->get_int("groups");
    spatial = prod(s, 2, s.rank());
    if (const Blob* b = info.layer->find_weight("bias")) bias = *b;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const float* sc = scale.data_as<float>();
    const float* bi = bias.numel() ? bias.data_as<float>() : nullptr;
    const int64_t per = c / groups, len = per * spatial;
    a.pool->parallel_for(n * groups, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, len)), [&](int64_t b, int64_t e) {
      for (int64_t ng = b; ng < e; ++ng) {
        const int64_t c0 = ng % groups * per;
        k.group_norm(x + ng * len, y + ng * len, per, spatial, sc + c0, bi ? bi + c0 : nullptr, eps);
      }
    });
  }
};

/// Elementwise, so in any layout: in nchw8c/nchw16c over the padded channels
/// too (zero padding stays zero: 0 is on every quantisation's grid), so a QDQ
/// model's Q/DQ steps between float layers in a blocked layout need no reorders.
struct FakeQuantVec final : PreparedRoutine {
  static constexpr std::string_view kType = "fake_quant";
  static constexpr bool kSimd = true;
  static std::vector<Schema> schemas() {
    return {kPlain, kNhwc, {Device::cpu, DType::float32, Layout::nchw8c}, {Device::cpu, DType::float32, Layout::nchw16c}};
  }
  static Support supports(const LayerInfo& info, const Schema& schema) {
    if (block_of(schema.layout) && info.input_shapes[0].rank() != 4) return Support::no("blocked layouts hold rank-4 blobs");
    return Support::yes();
  }
  static int64_t block_of(Layout l) { return l == Layout::nchw8c ? 8 : l == Layout::nchw16c ? 16 : 0; }
  /// Elements in memory: with a blocked layout's padded channels.
  static int64_t stored(const Shape& s, Layout l) {
    const int64_t b = block_of(l);
    return b ? s[0] * (s[1] + b - 1) / b * b * s[2] * s[3] : s.numel();
  }

  const vk::Kernels& k;
  core::FakeQuant q;
  int64_t n;
  FakeQuantVec(const LayerInfo& info, const Schema& schema, const vk::Kernels& kernels)
      : k(kernels), q(core::fake_quant_params(*info.layer)), n(stored(info.input_shapes[0], schema.layout)) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, kGrainElems, [&](int64_t b, int64_t e) {
      if (q.requantize) {  // TensorFlow Lite's integer arithmetic, value by value
        for (int64_t i = b; i < e; ++i) y[i] = q.apply(x[i]);
        return;
      }
      k.quantize(x + b, y + b, e - b, q.scale, static_cast<float>(q.zero_point), static_cast<float>(q.qmin),
                 static_cast<float>(q.qmax), true);
    });
  }
};

/// TensorFlow Lite's int8 add held as real values (requantize = tflite,
/// core::TfliteAdd) of two inputs of one shape, elementwise in any layout (the
/// blocked layouts' padded channels: 0 + 0 stays 0). The float adds refuse such
/// a layer; this is its fast path where no int8 routine reads it (a channel
/// pad beside it keeps the add in float).
struct TfliteAddVec final : PreparedRoutine {
  static constexpr std::string_view kType = "add";
  static constexpr bool kSimd = false;
  static std::vector<Schema> schemas() { return FakeQuantVec::schemas(); }
  static Support supports(const LayerInfo& info, const Schema& schema) {
    const Layer& l = *info.layer;
    if (!core::requantizes_as_tflite(l) || !l.has("input_scales"))
      return Support::no("computes TensorFlow Lite's int8 add only (requantize = tflite); the float adds compute the rest");
    if (info.input_shapes[0] != info.input_shapes[1]) return Support::no("inputs of one shape only");
    const core::Activation a = core::fused_activation(l);
    using K = core::Activation;
    if (a.kind != K::none && a.kind != K::relu && a.kind != K::clip) return Support::no("a fused relu or clip only");
    return FakeQuantVec::supports(info, schema);
  }

  core::TfliteAdd p;
  float lo = -INFINITY, hi = INFINITY;  // the fused relu or clip
  int64_t n;
  TfliteAddVec(const LayerInfo& info, const Schema& schema, const vk::Kernels&)
      : p(core::tflite_add_params(*info.layer)), n(FakeQuantVec::stored(info.input_shapes[0], schema.layout)) {
    const core::Activation act = core::fused_activation(*info.layer);
    if (act.kind == core::Activation::relu) lo = 0;
    if (act.kind == core::Activation::clip) lo = act.min, hi = act.max;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* y = a.inputs[1]->data_as<float>();
    float* z = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, kGrainElems, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        z[i] = std::clamp(p.apply(x[i], y[i]), lo, hi);
    });
  }
};

/// fake_quant between int8 blobs (a QDQ model's Q/DQ steps beside its int8
/// layers): each int8 value's result in a 256-entry table built as cpu/ref
/// computes it (cpu::int8_table); where the blobs carry the layer's own
/// quantisation the table is the identity, and the step is nothing (the
/// output takes the input's memory) or a copy.
struct FakeQuantInt8 final : PreparedRoutine {
  static constexpr std::string_view kType = "fake_quant";
  static constexpr bool kSimd = true;
  static std::vector<Schema> schemas() { return {kQPlain, kQNhwc}; }
  static Support supports(const LayerInfo& info, const Schema&) { return cpu::calibrated(info); }

  const vk::Kernels& k;
  int64_t n;
  int8_t table[256];
  bool identity;
  static void table_of(const LayerInfo& info, int8_t (&table)[256]) {
    const core::FakeQuant q = core::fake_quant_params(*info.layer);
    cpu::int8_table(table, cpu::in_q(info), cpu::out_q(info), [&](float v) { return q.apply(v); });
  }
  FakeQuantInt8(const LayerInfo& info, const Schema&, const vk::Kernels& kernels)
      : k(kernels), n(info.input_shapes[0].numel()) {
    table_of(info, table);
    identity = core::int8_table_identity(table);
  }
  bool output_is_input() const override { return identity; }
  void run(const RunArgs& a) override {
    const int8_t* x = a.inputs[0]->data_as<int8_t>();
    int8_t* y = a.outputs[0]->data_as<int8_t>();
    if (identity) {
      if (x != y) std::memcpy(y, x, static_cast<std::size_t>(n));
      return;
    }
    a.pool->parallel_for(n, 16384, [&](int64_t b, int64_t e) { k.lookup(x + b, y + b, e - b, table); });
  }
};

struct DynamicQuantizeVec final : PreparedRoutine {
  static constexpr std::string_view kType = "dynamic_quantize";
  static constexpr bool kSimd = true;
  static constexpr int64_t kChunks = 64;  // min/max partials, one slot each: no allocation at run time
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo&, const Schema&) { return Support::yes(); }

  const vk::Kernels& k;
  int64_t n;
  float lo[kChunks], hi[kChunks];
  DynamicQuantizeVec(const LayerInfo& info, const Schema&, const vk::Kernels& kernels)
      : k(kernels), n(info.input_shapes[0].numel()) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const int64_t chunks = std::clamp<int64_t>(n / kGrainElems, 1, kChunks), per = (n + chunks - 1) / chunks;
    a.pool->parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        const int64_t s = c * per, t = std::min(n, s + per);
        lo[c] = hi[c] = 0;
        if (s < t) k.min_max(x + s, t - s, &lo[c], &hi[c]);
      }
    });
    float mn = 0, mx = 0;
    for (int64_t c = 0; c < chunks; ++c) mn = std::min(mn, lo[c]), mx = std::max(mx, hi[c]);
    float scale, zp;
    core::dynamic_quant_params(mn, mx, scale, zp);
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, kGrainElems, [&](int64_t b, int64_t e) { k.quantize(x + b, y + b, e - b, scale, zp, 0.0f, 255.0f, false); });
    *a.outputs[1]->data_as<float>() = scale;
    *a.outputs[2]->data_as<float>() = zp;
  }
};

struct Softmax final : PreparedRoutine {
  static constexpr std::string_view kType = "softmax";
  static constexpr bool kSimd = true;
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo& info, const Schema&) {
    const Shape& s = info.input_shapes[0];
    core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), s.rank());
    return Support::yes();
  }

  const vk::Kernels& k;
  int64_t outer = 1, n = 1, inner = 1;  ///< [outer, n, inner] around the axis
  Softmax(const LayerInfo& info, const Schema&, const vk::Kernels& kernels) : k(kernels) {
    const Shape& s = info.input_shapes[0];
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), s.rank());
    for (int d = 0; d < axis; ++d) outer *= s[d];
    n = s[axis];
    for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    if (inner == 1) {
      a.pool->parallel_for(outer, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
        k.softmax_rows(x + b * n, y + b * n, e - b, n);
      });
      return;
    }
    // A middle axis: tasks of 64 columns of one [n, inner] slab, inner positions as vector lanes.
    constexpr int64_t kColumns = 64;
    const int64_t per_slab = (inner + kColumns - 1) / kColumns;
    a.pool->parallel_for(outer * per_slab, std::max<int64_t>(1, kGrainElems / (kColumns * std::max<int64_t>(1, n))),
                         [&](int64_t b, int64_t e) {
                           for (int64_t t = b; t < e; ++t) {
                             const int64_t o = t / per_slab, c = (t % per_slab) * kColumns;
                             k.softmax_strided(x + o * n * inner, y + o * n * inner, n, inner, c,
                                               std::min(inner, c + kColumns));
                           }
                         });
  }
};

/// One input, same shape out, element by element with a kernel of the set.
template <class K>
struct Elementwise final : PreparedRoutine {
  static constexpr std::string_view kType = K::kType;
  static constexpr bool kSimd = true;
  static std::vector<Schema> schemas() { return {kPlain, kNhwc}; }
  static Support supports(const LayerInfo&, const Schema&) { return Support::yes(); }

  const vk::Kernels& k;
  K op;
  int64_t n;
  Elementwise(const LayerInfo& info, const Schema& schema, const vk::Kernels& kernels) : k(kernels), op(*info.layer) {
    n = static_cast<int64_t>(storage_bytes(info.input_shapes[0], DType::float32, schema.layout) / sizeof(float));
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for((n + 15) / 16, kGrainElems / 16, [&](int64_t b, int64_t e) {
      const int64_t lo = b * 16, hi = std::min(n, e * 16);
      op(k, x + lo, y + lo, hi - lo);
    });
  }
};

struct GeluK {
  static constexpr std::string_view kType = "gelu";
  bool tanh_form;
  explicit GeluK(const Layer& l) : tanh_form(l.get_string("approximate", "none") == "tanh") {}
  void operator()(const vk::Kernels& k, const float* x, float* y, int64_t n) const { k.gelu(x, y, n, tanh_form); }
};

struct ErfK {
  static constexpr std::string_view kType = "erf";
  explicit ErfK(const Layer&) {}
  void operator()(const vk::Kernels& k, const float* x, float* y, int64_t n) const { k.erf(x, y, n); }
};

// transpose: the output walked row by row (its last dim), each row copied from
// the input as one run where the last dim stays last, else gathered at its
// stride; dims that stay adjacent merged first. (cpu/ref computes every
// element's offset by division: YOLOv8's head transpose took 0.46 ms there.)
struct Transpose final : PreparedRoutine {
  static constexpr std::string_view kType = "transpose";
  static constexpr bool kSimd = false;
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo& info, const Schema&) {
    if (info.input_shapes[0].rank() > kMaxRank) return Support::no(fmt::format("rank above {}", kMaxRank));
    return Support::yes();
  }
  static constexpr int kMaxRank = 8;

  int rank = 0;                                          // after merging, the row dim excluded
  int64_t dims[kMaxRank] = {}, strides[kMaxRank] = {};  // output dims, their input strides
  int64_t rows = 1, row_len = 1, row_stride = 1;
  Transpose(const LayerInfo& info, const Schema&, const vk::Kernels&) {
    const Shape& s = info.input_shapes[0];
    const int r = s.rank();
    std::vector<int64_t> def(static_cast<std::size_t>(r));
    for (int i = 0; i < r; ++i) def[static_cast<std::size_t>(i)] = r - 1 - i;
    const auto perm = info.layer->get_ints("perm", def);
    std::vector<int64_t> in_stride(static_cast<std::size_t>(r), 1);
    for (int d = r - 2; d >= 0; --d) in_stride[static_cast<std::size_t>(d)] = in_stride[static_cast<std::size_t>(d) + 1] * s[d + 1];
    // Output dims with their input strides; size-1 dims dropped; a dim merged
    // into the one before it where the two are adjacent in the input too.
    std::vector<std::pair<int64_t, int64_t>> kept;
    for (int d = 0; d < r; ++d) {
      const auto p = static_cast<std::size_t>(perm[static_cast<std::size_t>(d)]);
      const int64_t n = s[static_cast<int>(p)], st = in_stride[p];
      if (n == 1) continue;
      if (!kept.empty() && kept.back().second == n * st)
        kept.back() = {kept.back().first * n, st};
      else
        kept.push_back({n, st});
    }
    if (kept.empty()) kept.push_back({1, 1});
    row_len = kept.back().first;
    row_stride = kept.back().second;
    kept.pop_back();
    rank = static_cast<int>(kept.size());
    for (int d = 0; d < rank; ++d) {
      dims[d] = kept[static_cast<std::size_t>(d)].first;
      strides[d] = kept[static_cast<std::size_t>(d)].second;
      rows *= dims[d];
    }
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(rows, std::max<int64_t>(1, kGrainElems / row_len), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t rem = row, off = 0;
        for (int d = rank - 1; d >= 0; --d) {
          off += (rem % dims[d]) * strides[d];
          rem /= dims[d];
        }
        const float* src = x + off;
        float* dst = y + row * row_len;
        if (row_stride == 1) {
          std::memcpy(dst, src, static_cast<std::size_t>(row_len) * sizeof(float));
        } else {
          for (int64_t i = 0; i < row_len; ++i) dst[i] = src[i * row_stride];
        }
      }
    });
  }
};

/// concat and split: the whole blob (concat's output, split's input), in its
/// physical order, is `outer` rows of `row` elements, each the parts' rows of
/// chunks[i] elements one after the other (starts[i]: where part i begins).
struct PartsOfRows {
  int64_t outer = 1, row = 1;
  std::vector<int64_t> chunks, starts;
  PartsOfRows(const Layer& layer, int64_t default_axis, Shape whole, std::vector<Shape> parts, Layout layout) {
    int axis = core::normalize_axis(layer, "axis", layer.get_int("axis", default_axis), whole.rank());
    if (layout == Layout::nhwc) {  // physical order N,H,W,C
      auto phys = [](const Shape& x) { return Shape{x[0], x[2], x[3], x[1]}; };
      whole = phys(whole);
      for (Shape& x : parts) x = phys(x);
      constexpr int kPhysAxis[4] = {0, 3, 1, 2};
      axis = kPhysAxis[axis];
    }
    outer = prod(whole, 0, axis);
    row = prod(whole, axis, whole.rank());
    int64_t at = 0;
    for (const Shape& x : parts) {
      chunks.push_back(prod(x, axis, x.rank()));
      starts.push_back(at);
      at += chunks.back();
    }
  }
  /// Elements [b, e) of the whole blob, row by row, part by part: copy(part,
  /// offset in the whole blob, offset in the part, count).
  template <class F>
  void for_each_run(int64_t b, int64_t e, F&& copy) const {
    for (int64_t o = b / row; o * row < e; ++o) {
      const int64_t row_lo = std::max(b - o * row, int64_t{0});
      const int64_t row_hi = std::min(e - o * row, row);
      for (std::size_t i = 0; i < chunks.size(); ++i) {
        const int64_t lo = std::max(row_lo, starts[i]), hi = std::min(row_hi, starts[i] + chunks[i]);
        if (lo < hi) copy(i, o * row + lo, o * chunks[i] + (lo - starts[i]), static_cast<std::size_t>(hi - lo));
      }
    }
  }
};

/// concat (any axis; in nhwc, any axis of a rank-4 blob, mapped to its physical
/// axis): threads take equal element ranges of the output, each copied with
/// memcpy from the inputs that cover it.
struct Concat final : PreparedRoutine {
  static constexpr std::string_view kType = "concat";
  static constexpr bool kSimd = false;
  static std::vector<Schema> schemas() { return {kPlain, kNhwc}; }
  static Support supports(const LayerInfo& info, const Schema&) {
    for (const Shape& s : info.input_shapes)
      if (s.numel() == 0) return Support::no("an input is empty");
    return Support::yes();
  }

  PartsOfRows parts;
  Concat(const LayerInfo& info, const Schema& schema, const vk::Kernels&)
      : parts(*info.layer, info.layer->get_int("axis"), info.output_shapes[0],
              {info.input_shapes.begin(), info.input_shapes.end()}, schema.layout) {}
  void run(const RunArgs& a) override {
    float* y = a.outputs[0]->data_as<float>();
    // At least 1 MiB per task: ops_bench's 600 KiB concats took 10.4 us on one
    // thread and 13.7 us split across two (256 KiB grain, loaded machine).
    a.pool->parallel_for(parts.outer * parts.row, int64_t{1} << 18, [&](int64_t b, int64_t e) {
      parts.for_each_run(b, e, [&](std::size_t i, int64_t whole_at, int64_t part_at, std::size_t n) {
        std::memcpy(y + whole_at, a.inputs[i]->data_as<float>() + part_at, sizeof(float) * n);
      });
    });
  }
};

/// split: concat backwards; threads take equal element ranges of the input.
struct Split final : PreparedRoutine {
  static constexpr std::string_view kType = "split";
  static constexpr bool kSimd = false;
  static std::vector<Schema> schemas() { return {kPlain, kNhwc}; }
  static Support supports(const LayerInfo& info, const Schema&) {
    for (const Shape& s : info.output_shapes)
      if (s.numel() == 0) return Support::no("an output is empty");
    return Support::yes();
  }

  PartsOfRows parts;
  Split(const LayerInfo& info, const Schema& schema, const vk::Kernels&)
      : parts(*info.layer, 0, info.input_shapes[0], {info.output_shapes.begin(), info.output_shapes.end()},
              schema.layout) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    a.pool->parallel_for(parts.outer * parts.row, int64_t{1} << 18, [&](int64_t b, int64_t e) {
      parts.for_each_run(b, e, [&](std::size_t i, int64_t whole_at, int64_t part_at, std::size_t n) {
        std::memcpy(a.outputs[i]->data_as<float>() + part_at, x + whole_at, sizeof(float) * n);
      });
    });
  }
};

/// pad (constant, reflect, edge, wrap; plain, or nhwc for a rank-4 blob): each
/// output row (the last physical dim) reads one input row, chosen per outer
/// dim as cpu/ref maps a position, or is the value where an outer dim falls
/// in constant padding; within the row the input's run is one memcpy and the
/// padding on each side is mapped once in prepare. (cpu/ref computed every
/// element's position by division: MediaPipe's channel pads took 60% of a
/// face detector's time.)
template <class T>
struct PadT final : PreparedRoutine {
  static constexpr std::string_view kType = "pad";
  static constexpr bool kSimd = false;
  static constexpr bool kInt8 = std::is_same_v<T, int8_t>;
  static std::vector<Schema> schemas() {
    if constexpr (kInt8) return {kQPlain, kQNhwc};
    return {kPlain, kNhwc};
  }
  static Support supports(const LayerInfo& info, const Schema&) {
    const std::string m = info.layer->get_string("mode", "constant");
    if (m != "constant" && m != "reflect" && m != "edge" && m != "wrap") return Support::no("mode " + m);
    if (info.input_shapes[0].rank() > kMaxRank) return Support::no(fmt::format("rank above {}", kMaxRank));
    if constexpr (kInt8) {
      // Moving int8 values is exact where in and out share one quantisation and the fill is on its grid.
      if (Support c = cpu::calibrated(info); !c) return c;
      const QuantParams& qi = info.input_quant[0];
      const QuantParams& qo = info.output_quant[0];
      if (qi.scales.size() != 1 || qi.scales != qo.scales || qi.zero_points != qo.zero_points)
        return Support::no("in qint8 the input and output need one quantisation (per tensor)");
      if (m == "constant" && !fill_level(info)) return Support::no("the constant value is not on the int8 grid");
    }
    return Support::yes();
  }
  /// The int8 value of the constant fill (real `value` on the output's grid), if it lies on it.
  static std::optional<int8_t> fill_level(const LayerInfo& info) {
    const QuantParams& q = info.output_quant[0];
    const double v = info.layer->get_float("value", 0.0) / q.scales[0];
    const double level = std::nearbyint(v) + q.zero_points[0];
    if (std::abs(v - std::nearbyint(v)) > 1e-3 || level < -128 || level > 127) return std::nullopt;
    return static_cast<int8_t>(level);
  }
  static constexpr int kMaxRank = 8;
  enum Mode { constant, reflect, edge, wrap } mode = constant;
  int rank = 0;  // physical dims, the row (last) included
  int64_t out_dims[kMaxRank] = {}, in_dims[kMaxRank] = {}, before[kMaxRank] = {}, in_stride[kMaxRank] = {};
  int64_t rows = 1;
  T value = 0;
  std::vector<int64_t> row_src;  // per output column: input column, or -1 (the value)
  int64_t run_at = 0, run_len = 0;  // the output columns that are the input row, in order (pads are >= 0)

  /// The input index output index o of a dim reads (-1: constant padding).
  int64_t source(int64_t o, int d) const {
    int64_t c = o - before[d];
    const int64_t len = in_dims[d];
    if (c >= 0 && c < len) return c;
    if (mode == constant) return -1;
    if (mode == edge) return c < 0 ? 0 : len - 1;
    if (mode == wrap) return ((c % len) + len) % len;
    return c < 0 ? -c : 2 * (len - 1) - c;  // reflect: pads < len (checked by shape inference)
  }

  PadT(const LayerInfo& info, const Schema& schema, const vk::Kernels&) {
    const Layer& l = *info.layer;
    const std::string m = l.get_string("mode", "constant");
    mode = m == "reflect" ? reflect : m == "edge" ? edge : m == "wrap" ? wrap : constant;
    if constexpr (kInt8) {
      if (mode == constant) value = *fill_level(info);
    } else {
      value = static_cast<float>(l.get_float("value", 0.0));
    }
    Shape in = info.input_shapes[0], out = info.output_shapes[0];
    const auto pads = l.get_ints("pads");
    std::vector<int64_t> b(pads.begin(), pads.begin() + in.rank());
    if (schema.layout == Layout::nhwc) {  // physical order N,H,W,C
      in = Shape{in[0], in[2], in[3], in[1]};
      out = Shape{out[0], out[2], out[3], out[1]};
      b = {b[0], b[2], b[3], b[1]};
    }
    rank = in.rank();
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      in_dims[d] = in[d];
      out_dims[d] = out[d];
      before[d] = b[static_cast<std::size_t>(d)];
      in_stride[d] = stride;
      stride *= in[d];
    }
    for (int d = 0; d + 1 < rank; ++d) rows *= out_dims[d];
    const int last = rank - 1;
    for (int64_t o = 0; o < out_dims[last]; ++o) row_src.push_back(source(o, last));
    run_at = before[last];
    run_len = in_dims[last];
  }
  void run(const RunArgs& a) override {
    const T* x = a.inputs[0]->data_as<T>();
    T* y = a.outputs[0]->data_as<T>();
    const int last = rank - 1;
    const int64_t row_len = out_dims[last];
    a.pool->parallel_for(rows, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(row_len, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T* dst = y + r * row_len;
        int64_t rem = r, off = 0;
        bool outside = false;
        for (int d = last - 1; d >= 0; --d) {
          const int64_t c = source(rem % out_dims[d], d);
          rem /= out_dims[d];
          if (c < 0) {
            outside = true;
            break;
          }
          off += c * in_stride[d];
        }
        if (outside) {
          std::fill(dst, dst + row_len, value);
          continue;
        }
        const T* src = x + off;
        for (int64_t o = 0; o < run_at; ++o) dst[o] = row_src[static_cast<std::size_t>(o)] < 0 ? value : src[row_src[static_cast<std::size_t>(o)]];
        std::memcpy(dst + run_at, src, sizeof(T) * static_cast<std::size_t>(run_len));
        for (int64_t o = run_at + run_len; o < row_len; ++o)
          dst[o] = row_src[static_cast<std::size_t>(o)] < 0 ? value : src[row_src[static_cast<std::size_t>(o)]];
      }
    });
  }
};

/// prelu with one slope per channel (or one for all), plain or nhwc: a plane
/// of one slope at a time, or rows of C slopes; the loop is left to the
/// compiler's vectoriser (memory-bound). oneDNN's prelu took 0.3 of 0.86 ms of
/// MediaPipe's face landmarker tuned.
struct Prelu final : PreparedRoutine {
  static constexpr std::string_view kType = "prelu";
  static constexpr bool kSimd = false;
  static std::vector<Schema> schemas() {
    return {kPlain, kNhwc, {Device::cpu, DType::float32, Layout::nchw8c}, {Device::cpu, DType::float32, Layout::nchw16c}};
  }
  /// The channel count the slope varies along (1: one slope), or 0 where it varies otherwise.
  static int64_t slope_channels(const LayerInfo& info) {
    const Shape& x = info.input_shapes[0];
    const Blob* w = info.layer->find_weight("slope");
    if (!w || w->dtype() != DType::float32 || w->layout() != Layout::nchw || !w->data()) return 0;
    const Shape& s = w->shape();
    if (s.numel() == 1) return 1;
    if (x.rank() < 2 || s.rank() > x.rank()) return 0;
    // Right-aligned to x: every dim 1 but x's dim 1, which is C.
    const int off = x.rank() - s.rank();
    for (int d = 0; d < s.rank(); ++d)
      if (s[d] != 1 && !(d + off == 1 && s[d] == x[1])) return 0;
    return x[1];
  }
  static Support supports(const LayerInfo& info, const Schema& schema) {
    if (slope_channels(info) == 0) return Support::no("the slope varies along other dims than the channels");
    if (block_of(schema.layout) && info.input_shapes[0].rank() != 4)
      return Support::no("blocked layouts hold rank-4 blobs");
    return Support::yes();
  }
  static int64_t block_of(Layout l) { return l == Layout::nchw8c ? 8 : l == Layout::nchw16c ? 16 : 0; }

  /// x < 0 ? s*x : x without a branch (signs of activations are a coin toss:
  /// the branch cost 0.28 ms on a 147k-element blob); NaN stays NaN.
  static float leaky(float x, float s) { return std::max(x, 0.0f) + s * std::min(x, 0.0f); }

  bool nhwc = false;
  int64_t channels = 1, outer = 1, inner = 1;  // plain: [outer, channels, inner]; nhwc: [outer*inner, channels]
  std::vector<float> slope;  // requantize = tflite: the alphas' integers (less their zero point)
  int64_t block = 0;  // nchw8c/16c: [N, C/block, H, W, block], slopes padded with 0 (padded channels stay 0)
  bool tflite = false;
  core::TflitePrelu tp;
  Prelu(const LayerInfo& info, const Schema& schema, const vk::Kernels&) {
    const Shape& x = info.input_shapes[0];
    channels = slope_channels(info);
    const Blob& w = info.layer->weight("slope");
    slope.assign(w.data_as<float>(), w.data_as<float>() + channels);
    if ((tflite = core::requantizes_as_tflite(*info.layer))) {
      tp = core::tflite_prelu_params(*info.layer);
      for (float& v : slope) v = static_cast<float>(tp.alpha_levels(v));
    }
    nhwc = schema.layout == Layout::nhwc;
    block = block_of(schema.layout);
    if (block) {
      const int64_t c = x[1], blocks = (c + block - 1) / block;
      std::vector<float> padded(static_cast<std::size_t>(blocks * block), 0.0f);
      for (int64_t k = 0; k < c; ++k) padded[static_cast<std::size_t>(k)] = channels == 1 ? slope[0] : slope[static_cast<std::size_t>(k)];
      slope = std::move(padded);
      outer = x[0] * blocks;
      inner = x[2] * x[3];
      return;
    }
    if (channels == 1) {
      outer = x.numel();
    } else {
      outer = x[0];
      for (int d = 2; d < x.rank(); ++d) inner *= x[d];
    }
  }
  void run(const RunArgs& a) override {
    if (tflite) {
      run_with(a, [this](float x, float levels) { return tp.apply(x, static_cast<int32_t>(levels)); });
    } else {
      run_with(a, leaky);
    }
  }
  /// y = f(x, slope) over the layout's channel structure.
  template <class F>
  void run_with(const RunArgs& a, F f) {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const float* s = slope.data();
    const int64_t c = channels;
    if (block) {  // planes of [H*W, block]; plane p's slopes at (p % blocks) * block
      const int64_t blocks = static_cast<int64_t>(slope.size()) / block, plane = inner * block;
      a.pool->parallel_for(outer, std::max<int64_t>(1, kGrainElems * 4 / plane), [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          const float* sp = s + (p % blocks) * block;
          const float* xi = x + p * plane;
          float* yi = y + p * plane;
          for (int64_t q = 0; q < inner; ++q)
            for (int64_t j = 0; j < block; ++j) yi[q * block + j] = f(xi[q * block + j], sp[j]);
        }
      });
      return;
    }
    if (nhwc || c == 1) {  // rows of c slopes (c = 1: one long row of one slope)
      const int64_t rows = c == 1 ? 1 : outer * inner, len = c == 1 ? outer : c;
      a.pool->parallel_for(rows * len, kGrainElems * 4, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e;) {
          const int64_t k0 = i % len, n = std::min(e - i, len - k0);
          const float* xi = x + i;
          float* yi = y + i;
          const float* si = c == 1 ? nullptr : s + k0;
          if (si)
            for (int64_t k = 0; k < n; ++k) yi[k] = f(xi[k], si[k]);
          else
            for (int64_t k = 0; k < n; ++k) yi[k] = f(xi[k], s[0]);
          i += n;
        }
      });
      return;
    }
    a.pool->parallel_for(outer * c, std::max<int64_t>(1, kGrainElems * 4 / inner), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const float sv = s[p % c];
        const float* xi = x + p * inner;
        float* yi = y + p * inner;
        for (int64_t k = 0; k < inner; ++k) yi[k] = f(xi[k], sv);
      }
    });
  }
};

// ---------------------------------------------------------------------------
// compare, logical and where (a transformer's attention-mask logic), NumPy
// broadcast walked in runs: the output's dims merged where every input steps
// through them alike, so each run is as long as it can be and each input
// steps 0 or 1 element in it. cpu/ref computes an index per element.

/// Up to three inputs broadcast onto `out`, as runs of run_len elements.
struct BroadcastRuns {
  static constexpr int kMaxInputs = 3;
  int inputs = 0, rank = 0;  ///< of the merged dims (the last is the run)
  std::vector<int64_t> dims;
  std::vector<int64_t> strides[kMaxInputs];  ///< per merged dim, in elements (0: broadcast)
  int64_t runs = 1, run_len = 1;
  int64_t step[kMaxInputs] = {};  ///< each input's step within a run: 0 or 1

  BroadcastRuns(const Shape& out, std::initializer_list<Shape> ins) : inputs(static_cast<int>(ins.size())) {
    const int r = out.rank();
    std::vector<std::vector<int64_t>> st;
    for (const Shape& in : ins) {  // contiguous strides, right-aligned; 0 where broadcast
      std::vector<int64_t> v(static_cast<std::size_t>(r), 0);
      int64_t e = 1;
      for (int d = in.rank() - 1; d >= 0; --d) {
        const int od = d + r - in.rank();
        v[static_cast<std::size_t>(od)] = in[d] == 1 ? 0 : e;
        e *= in[d];
      }
      st.push_back(std::move(v));
    }
    // Merge dim d into the merged dim after it where every input steps alike (innermost first).
    std::vector<int64_t> md;
    std::vector<std::vector<int64_t>> ms(st.size());
    for (int d = r - 1; d >= 0; --d) {
      const int64_t n = out[d];
      if (n == 1) continue;
      bool merge = !md.empty();
      for (std::size_t k = 0; merge && k < st.size(); ++k) {
        const int64_t inner_stride = ms[k].back(), inner_n = md.back();
        const int64_t sd = st[k][static_cast<std::size_t>(d)];
        merge = (sd == 0 && inner_stride == 0) || (sd != 0 && sd == inner_stride * inner_n);
      }
      if (merge) {
        md.back() *= n;
        continue;
      }
      md.push_back(n);
      for (std::size_t k = 0; k < st.size(); ++k) ms[k].push_back(st[k][static_cast<std::size_t>(d)]);
    }
    if (md.empty()) {  // a single element
      md.push_back(1);
      for (auto& m : ms) m.push_back(0);
    }
    rank = static_cast<int>(md.size());
    dims.assign(md.rbegin(), md.rend());
    for (std::size_t k = 0; k < ms.size(); ++k) strides[k].assign(ms[k].rbegin(), ms[k].rend());
    run_len = dims.back();
    for (int d = 0; d + 1 < rank; ++d) runs *= dims[static_cast<std::size_t>(d)];
    for (int k = 0; k < inputs; ++k) step[k] = strides[k].back() ? 1 : 0;  // contiguous inner strides are 1
  }
  /// Each input's first element of run `run`.
  void start(int64_t run, int64_t (&at)[kMaxInputs]) const {
    for (int k = 0; k < inputs; ++k) at[k] = 0;
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t n = dims[static_cast<std::size_t>(d)], i = run % n;
      run /= n;
      for (int k = 0; k < inputs; ++k) at[k] += i * strides[k][static_cast<std::size_t>(d)];
    }
  }
  /// f(first output element, each input's first element) for every run, over the pool.
  template <class F>
  void for_runs(ThreadPool* pool, F&& f) const {
    pool->parallel_for(runs, std::max<int64_t>(1, kGrainElems / run_len), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t at[kMaxInputs];
        start(r, at);
        f(r * run_len, at);
      }
    });
  }
};

/// z = op(x, y) over a run, each input stepping 0 or 1 (four loops the compiler vectorises).
template <class Op>
void binary_run(const Op& op, const float* x, int64_t sx, const float* y, int64_t sy, float* z, int64_t n) {
  if (sx && sy) for (int64_t i = 0; i < n; ++i) z[i] = op(x[i], y[i]);
  else if (sx) for (int64_t i = 0; i < n; ++i) z[i] = op(x[i], y[0]);
  else if (sy) for (int64_t i = 0; i < n; ++i) z[i] = op(x[0], y[i]);
  else for (int64_t i = 0; i < n; ++i) z[i] = op(x[0], y[0]);
}

template <class Op>
struct PredicateVec final : PreparedRoutine {
  static constexpr std::string_view kType = Op::kType;
  static constexpr bool kSimd = false;
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo& info, const Schema&) {
    if (!Op::known(info.layer->get_string("op", "")))
      return Support::no(fmt::format("unknown op '{}'", info.layer->get_string("op", "")));
    return Support::yes();
  }
  Op op;
  BroadcastRuns bc;
  PredicateVec(const LayerInfo& info, const Schema&, const vk::Kernels&)
      : op(info.layer->get_string("op", "")), bc(info.output_shapes[0], {info.input_shapes[0], info.input_shapes[1]}) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* y = a.inputs[1]->data_as<float>();
    float* z = a.outputs[0]->data_as<float>();
    bc.for_runs(a.pool, [&](int64_t o, const int64_t (&at)[BroadcastRuns::kMaxInputs]) {
      op.run(x + at[0], bc.step[0], y + at[1], bc.step[1], z + o, bc.run_len);
    });
  }
};

/// compare: 1 or 0, as C++ compares floats (NaN: only not_equal holds), as cpu/ref.
struct CompareRuns {
  static constexpr std::string_view kType = "compare";
  enum { eq, ne, lt, le, gt, ge } op;
  static bool known(const std::string& o) {
    return o == "equal" || o == "not_equal" || o == "less" || o == "less_equal" || o == "greater" || o == "greater_equal";
  }
  explicit CompareRuns(const std::string& o)
      : op(o == "equal" ? eq : o == "not_equal" ? ne : o == "less" ? lt : o == "less_equal" ? le : o == "greater" ? gt : ge) {}
  void run(const float* x, int64_t sx, const float* y, int64_t sy, float* z, int64_t n) const {
    auto f = [](bool b) { return b ? 1.0f : 0.0f; };
    switch (op) {
      case eq: binary_run([&](float a, float b) { return f(a == b); }, x, sx, y, sy, z, n); break;
      case ne: binary_run([&](float a, float b) { return f(a != b); }, x, sx, y, sy, z, n); break;
      case lt: binary_run([&](float a, float b) { return f(a < b); }, x, sx, y, sy, z, n); break;
      case le: binary_run([&](float a, float b) { return f(a <= b); }, x, sx, y, sy, z, n); break;
      case gt: binary_run([&](float a, float b) { return f(a > b); }, x, sx, y, sy, z, n); break;
      case ge: binary_run([&](float a, float b) { return f(a >= b); }, x, sx, y, sy, z, n); break;
    }
  }
};

/// logical: and, or, xor of nonzero (NaN counts as true), 1 or 0, as cpu/ref.
struct LogicalRuns {
  static constexpr std::string_view kType = "logical";
  enum { land, lor, lxor } op;
  static bool known(const std::string& o) { return o == "and" || o == "or" || o == "xor"; }
  explicit LogicalRuns(const std::string& o) : op(o == "and" ? land : o == "or" ? lor : lxor) {}
  void run(const float* x, int64_t sx, const float* y, int64_t sy, float* z, int64_t n) const {
    auto f = [](bool b) { return b ? 1.0f : 0.0f; };
    switch (op) {
      case land: binary_run([&](float a, float b) { return f(a != 0 && b != 0); }, x, sx, y, sy, z, n); break;
      case lor: binary_run([&](float a, float b) { return f(a != 0 || b != 0); }, x, sx, y, sy, z, n); break;
      case lxor: binary_run([&](float a, float b) { return f((a != 0) != (b != 0)); }, x, sx, y, sy, z, n); break;
    }
  }
};

/// where: condition != 0 ? x : y, the three broadcast (NaN condition: x), as cpu/ref.
struct WhereVec final : PreparedRoutine {
  static constexpr std::string_view kType = "where";
  static constexpr bool kSimd = false;
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo&, const Schema&) { return Support::yes(); }
  BroadcastRuns bc;
  WhereVec(const LayerInfo& info, const Schema&, const vk::Kernels&)
      : bc(info.output_shapes[0], {info.input_shapes[0], info.input_shapes[1], info.input_shapes[2]}) {}
  void run(const RunArgs& a) override {
    const float* c = a.inputs[0]->data_as<float>();
    const float* x = a.inputs[1]->data_as<float>();
    const float* y = a.inputs[2]->data_as<float>();
    float* z = a.outputs[0]->data_as<float>();
    bc.for_runs(a.pool, [&](int64_t o, const int64_t (&at)[BroadcastRuns::kMaxInputs]) {
      const float* cr = c + at[0];
      const float* xr = x + at[1];
      const float* yr = y + at[2];
      const int64_t sc = bc.step[0], sx = bc.step[1], sy = bc.step[2];
      float* zr = z + o;
      for (int64_t i = 0; i < bc.run_len; ++i) zr[i] = cr[i * sc] != 0 ? xr[i * sx] : yr[i * sy];
    });
  }
};

/// slice with positive steps (ONNX Slice clamped when planned): the output's
/// rows of its innermost dims that stay whole, each one memcpy from where the
/// slice starts (one element at a time where the last dim has a step). (cpu/ref
/// computed every element's position: rotary embeddings' halves x[..., :D/2]
/// at every layer of a decoder, Funnel's and Swin's x[:, ::2].)
struct SliceVec final : PreparedRoutine {
  static constexpr std::string_view kType = "slice";
  static constexpr bool kSimd = false;
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo& info, const Schema&) {
    if (info.layer->inputs.size() != 1) return Support::no("its bounds are taken when planned");
    for (int64_t s : info.layer->get_ints("steps", {}))
      if (s < 1) return Support::no("a step going backwards");
    if (info.input_shapes[0].rank() > Shape::max_rank) return Support::no(fmt::format("rank above {}", Shape::max_rank));
    return Support::yes();
  }
  Shape out;
  int rank = 0;
  int64_t run_len = 1, rows = 1, offset = 0;  ///< elements copied at once, how many such, the first's offset in x
  int64_t in_stride[Shape::max_rank] = {};    ///< x elements between consecutive outputs along each dim
  SliceVec(const LayerInfo& info, const Schema&, const vk::Kernels&) : out(info.output_shapes[0]), rank(out.rank()) {
    const Shape& in = info.input_shapes[0];
    int64_t first[Shape::max_rank] = {}, step[Shape::max_rank];
    std::fill(step, step + Shape::max_rank, int64_t{1});
    const Layer& l = *info.layer;
    const auto starts = l.get_ints("starts"), ends = l.get_ints("ends"), axes = l.get_ints("axes");
    const auto steps = l.get_ints("steps", std::vector<int64_t>(starts.size(), 1));
    for (std::size_t i = 0; i < starts.size(); ++i) {
      const int a = static_cast<int>(axes[i]);
      step[a] = steps[i];
      first[a] = core::slice_range(starts[i], ends[i], steps[i], in[a]).start;
    }
    int64_t e = 1;
    for (int d = rank - 1; d >= 0; --d) {
      in_stride[d] = e * step[d];
      offset += first[d] * e;
      e *= in[d];
    }
    // The innermost dims the slice keeps whole (and the first it cuts, where
    // its step is 1) are one run.
    int d = rank - 1;
    while (d >= 0 && out[d] == in[d] && step[d] == 1) run_len *= out[d--];
    if (d >= 0 && step[d] == 1) run_len *= out[d--];
    rank = d + 1;  // the outer dims walked row by row
    rows = run_len ? out.numel() / run_len : 0;
  }
  void run_rows(const float* x, float* y, int64_t b, int64_t e) const {
    for (int64_t r = b; r < e; ++r) {
      int64_t rest = r, at = offset;
      for (int d = rank - 1; d >= 0; --d) {
        at += (rest % out[d]) * in_stride[d];
        rest /= out[d];
      }
      if (run_len == 1) y[r] = x[at];
      else std::memcpy(y + r * run_len, x + at, sizeof(float) * static_cast<std::size_t>(run_len));
    }
  }
  void run(const RunArgs& a) override {
    if (rows == 0) return;
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(rows, std::max<int64_t>(1, kGrainElems / std::max<int64_t>(run_len, 1)),
                         [&](int64_t b, int64_t e) { run_rows(x, y, b, e); });
  }
};

/// rotary: rows of the last dim D, cos and sin rows found by broadcasting the
/// outer dims (BroadcastRuns over the shapes without their last dim).
struct RotaryVec final : PreparedRoutine {
  static constexpr std::string_view kType = "rotary";
  static constexpr bool kSimd = false;
  static std::vector<Schema> schemas() { return {kPlain}; }
  static Support supports(const LayerInfo&, const Schema&) { return Support::yes(); }
  static Shape outer(const Shape& s) {
    Shape o;
    for (int i = 0; i + 1 < s.rank(); ++i) o.push_back(s[i]);
    return o;
  }
  int64_t d, h;
  BroadcastRuns bc;
  RotaryVec(const LayerInfo& info, const Schema&, const vk::Kernels&)
      : d(info.input_shapes[0][info.input_shapes[0].rank() - 1]), h(d / 2),
        bc(outer(info.input_shapes[0]), {outer(info.input_shapes[0]), outer(info.input_shapes[1]), outer(info.input_shapes[2])}) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* c = a.inputs[1]->data_as<float>();
    const float* s = a.inputs[2]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(bc.runs, std::max<int64_t>(1, kGrainElems / (bc.run_len * std::max<int64_t>(d, 1))), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t at[BroadcastRuns::kMaxInputs];
        bc.start(r, at);
        for (int64_t i = 0; i < bc.run_len; ++i) {
          const float* xr = x + (at[0] + i * bc.step[0]) * d;
          const float* cr = c + (at[1] + i * bc.step[1]) * d;
          const float* sr = s + (at[2] + i * bc.step[2]) * d;
          float* yr = y + (r * bc.run_len + i) * d;
          for (int64_t j = 0; j < h; ++j) yr[j] = xr[j] * cr[j] - xr[j + h] * sr[j];
          for (int64_t j = 0; j < h; ++j) yr[j + h] = xr[j + h] * cr[j + h] + xr[j] * sr[j + h];
        }
      }
    });
  }
};

/// reshape, flatten, identity: the same elements in the same order, in float32
/// or bfloat16 (a transformer's head reshapes between bfloat16 denses and
/// attention stay bfloat16: no casts around them). The executor gives the
/// output the input's memory where it can; elsewhere (a net input or output)
/// they are copied in equal ranges across threads.
template <const char* Name>
struct Copy final : PreparedRoutine {
  static constexpr std::string_view kType = Name;
  static constexpr bool kSimd = false;
  static std::vector<Schema> schemas() { return {kPlain, Schema{Device::cpu, DType::bfloat16, Layout::nchw}}; }
  static Support supports(const LayerInfo&, const Schema&) { return Support::yes(); }

  std::size_t bytes;
  Copy(const LayerInfo& info, const Schema& schema, const vk::Kernels&)
      : bytes(static_cast<std::size_t>(info.input_shapes[0].numel()) * dtype_size(schema.dtype)) {}
  bool output_is_input() const override { return true; }
  void run(const RunArgs& a) override {
    const auto* x = static_cast<const char*>(a.inputs[0]->data());
    auto* y = static_cast<char*>(a.outputs[0]->data());
    if (x == y) return;
    a.pool->parallel_for(static_cast<int64_t>(bytes), int64_t{1} << 20, [&](int64_t b, int64_t e) {
      std::memcpy(y + b, x + b, static_cast<std::size_t>(e - b));
    });
  }
};
constexpr char kReshape[] = "reshape", kFlatten[] = "flatten", kIdentity[] = "identity";

SOFTNEURO_REGISTER_ROUTINE(Vec<Gather>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Layernorm>);
SOFTNEURO_REGISTER_ROUTINE(Vec<RmsNorm>);
SOFTNEURO_REGISTER_ROUTINE(Vec<RotaryVec>);
SOFTNEURO_REGISTER_ROUTINE(Vec<SliceVec>);
SOFTNEURO_REGISTER_ROUTINE(Vec<GroupNorm>);
SOFTNEURO_REGISTER_ROUTINE(Vec<FakeQuantVec>);
SOFTNEURO_REGISTER_ROUTINE(Vec<TfliteAddVec>);
SOFTNEURO_REGISTER_ROUTINE(Vec<FakeQuantInt8>);
SOFTNEURO_REGISTER_ROUTINE(Vec<DynamicQuantizeVec>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Softmax>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Elementwise<GeluK>>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Elementwise<ErfK>>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Concat>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Transpose>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Split>);
SOFTNEURO_REGISTER_ROUTINE(Vec<PadT<float>>);
SOFTNEURO_REGISTER_ROUTINE(Vec<PadT<int8_t>>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Prelu>);
SOFTNEURO_REGISTER_ROUTINE(Vec<PredicateVec<CompareRuns>>);
SOFTNEURO_REGISTER_ROUTINE(Vec<PredicateVec<LogicalRuns>>);
SOFTNEURO_REGISTER_ROUTINE(Vec<WhereVec>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Copy<kReshape>>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Copy<kFlatten>>);
SOFTNEURO_REGISTER_ROUTINE(Vec<Copy<kIdentity>>);

}  // namespace
}  // namespace softneuro
