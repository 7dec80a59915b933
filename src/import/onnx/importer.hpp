// The ONNX importer's translator (Importer): one class, its converters in
// files by operator family (conv_pool.cpp, quantization.cpp, tensor.cpp, ...),
// its scaffolding in importer.cpp.
//
// The ONNX importer: ModelProto -> core::Graph -> graph passes -> Model.
//
// Translation goes node by node in topological order. Every ONNX tensor is
//  - a *constant*, known at import time: initializers, Constant nodes, and the
//    results of the nodes the importer computes itself. Those are shape
//    computations (Shape, Gather, Unsqueeze, Concat, Cast, Range, arithmetic...:
//    the chains exporters emit around Reshape, and index/mask computations),
//    and data movement of constants (Identity, Reshape, Transpose, Slice, ...),
//    so that a weight reached through an Identity or a Transpose is still a weight;
//  - or a *blob* computed at run time by a layer; its shape is inferred as the
//    layer is added (shapes are static), which is why Shape has a constant answer.
// Other layer types with constant inputs (Conv, Softmax, Relu, Pad, ...) become
// layers like any other; the fold_constants pass computes them once with the
// cpu/ref routines.
// A constant that a layer reads as an input gets one constant layer.
//
// Patterns fused before translation: the GELU that exporters spell
// x*0.5*(1+Erf(x/sqrt(2))) and its tanh form (GPT-2's), the LayerNormalization
// they decompose below opset 17, and HardSwish spelled x*clip(x+3,0,6)/6 (Paddle).
//
// An unsupported node does not stop the translation: it is recorded, its
// outputs are marked unavailable (nodes reading them are skipped silently),
// and at the end one Error lists every unsupported node.
#pragma once

#include "core/dnn_file.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/mapped_file.hpp"
#include "core/narrow_types.hpp"
#include "core/model_impl.hpp"
#include "core/weight_quant.hpp"
#include "import/dynamic_dims.hpp"
#include "import/graph_builder.hpp"
#include "import/onnx_tensor.hpp"
#include "import/pass_options.hpp"

#include <onnx/onnx_pb.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <deque>
#include <functional>
#include <limits>
#include <numbers>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <cstring>

#include "import/onnx_importer.hpp"

// The translator is internal to the library: none of its symbols is exported.
#pragma GCC visibility push(hidden)

namespace softneuro {
namespace onnx_import {

constexpr int kMinOpset = 11, kMaxOpset = 28;  // 28: the newest onnx 1.23 defines

/// Thrown by a converter for a node it cannot translate (recorded, not fatal at once).
struct Unsupported {
  std::string why;
};

// ---------------------------------------------------------------------------
// One ONNX node with typed attribute access.

class Node {
 public:
  Node(const onnx::NodeProto& p, std::string name, int opset, const std::string& file)
      : name(std::move(name)), opset(opset), p_(p), file_(file) {}

  const std::string name;  ///< for messages and the layer name
  const int opset;         ///< the model's opset for the node's domain
  const onnx::NodeProto& proto() const { return p_; }

  const std::string& op() const { return p_.op_type(); }
  int num_inputs() const { return p_.input_size(); }
  int num_outputs() const { return p_.output_size(); }
  /// Input / output k, empty when absent (ONNX marks skipped optional inputs with "").
  std::string in(int k) const { return k < p_.input_size() ? p_.input(k) : std::string(); }
  std::string out(int k) const { return k < p_.output_size() ? p_.output(k) : std::string(); }
  bool has_in(int k) const { return !in(k).empty(); }

  Error error(const std::string& msg, const std::string& field = {}) const { return Error(msg, file_, name, field); }

  const onnx::AttributeProto* attr(std::string_view key) const {
    for (const auto& a : p_.attribute())
      if (a.name() == key) return &a;
    return nullptr;
  }
  bool has(std::string_view key) const { return attr(key) != nullptr; }

  int64_t get_int(const char* key, std::optional<int64_t> fallback = {}) const {
    const auto* a = attr(key);
    if (!a) return value_or_missing(key, fallback);
    if (a->type() != onnx::AttributeProto::INT) throw error("expected an integer attribute", key);
    return a->i();
  }
  double get_float(const char* key, std::optional<double> fallback = {}) const {
    const auto* a = attr(key);
    if (!a) return value_or_missing(key, fallback);
    if (a->type() == onnx::AttributeProto::FLOAT) return a->f();
    if (a->type() == onnx::AttributeProto::INT) return static_cast<double>(a->i());
    throw error("expected a float attribute", key);
  }
  std::string get_string(const char* key, std::optional<std::string> fallback = {}) const {
    const auto* a = attr(key);
    if (!a) return value_or_missing(key, fallback);
    if (a->type() != onnx::AttributeProto::STRING) throw error("expected a string attribute", key);
    return a->s();
  }
  std::vector<int64_t> get_ints(const char* key, std::optional<std::vector<int64_t>> fallback = {}) const {
    const auto* a = attr(key);
    if (!a) return value_or_missing(key, fallback);
    if (a->type() != onnx::AttributeProto::INTS) throw error("expected a list of integers", key);
    return {a->ints().begin(), a->ints().end()};
  }
  std::vector<double> get_floats(const char* key, std::optional<std::vector<double>> fallback = {}) const {
    const auto* a = attr(key);
    if (!a) return value_or_missing(key, fallback);
    if (a->type() != onnx::AttributeProto::FLOATS) throw error("expected a list of floats", key);
    return {a->floats().begin(), a->floats().end()};
  }
  /// A list attribute that must have `n` entries (the rank of a window).
  std::vector<int64_t> get_ints_n(const char* key, std::size_t n, std::vector<int64_t> fallback) const {
    auto v = get_ints(key, fallback);
    if (v.size() != n) throw error(fmt::format("expected {} values, got {}", n, v.size()), key);
    return v;
  }

 private:
  template <class T>
  T value_or_missing(const char* key, const std::optional<T>& fallback) const {
    if (!fallback) throw error(fmt::format("required attribute of {} missing", op()), key);
    return *fallback;
  }
  const onnx::NodeProto& p_;
  const std::string& file_;
};

inline bool near(double a, double b) { return std::abs(a - b) <= 1e-4 * std::max(1.0, std::abs(b)); }

/// The window of HannWindow, HammingWindow or BlackmanWindow (core::window_values' kind).
inline std::string window_kind(const std::string& op) {
  return op == "HannWindow" ? "hann" : op == "HammingWindow" ? "hamming" : "blackman";
}
/// Whether an ONNX element type is a floating-point one (a window's output_datatype).
inline bool floating_type(int type) {
  return type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::DOUBLE || type == onnx::TensorProto::FLOAT16 ||
         type == onnx::TensorProto::BFLOAT16;
}

/// The subgraphs a node holds (If's branches; Loop's and Scan's bodies).
std::vector<const onnx::GraphProto*> subgraphs(const onnx::NodeProto& p);
/// The names a node's subgraphs read from the scopes around them (their
/// implicit inputs), and every name they produce.
void subgraph_names(const onnx::NodeProto& p, std::set<std::string>& reads, std::set<std::string>& produced);

// ---------------------------------------------------------------------------
// A fused pattern: several nodes that become one layer.

struct Fused {
  enum Kind { gelu, gelu_tanh, layernorm, hardswish, rms_norm } kind;
  std::vector<int> members;  ///< node indices
  std::string x, y;          ///< input and output tensors
  std::vector<int64_t> axes; ///< layernorm: the reduced axes
  double epsilon = 0;
  std::string scale, bias;   ///< layernorm: constant tensors, empty when absent
  int last() const { return *std::max_element(members.begin(), members.end()); }
};

// ---------------------------------------------------------------------------

class Importer : private import::GraphBuilder {
 public:
  /// `symbol_sizes`: the sizes named symbolic dims take while translating
  /// (default: 1 for a name some input has as its leading dim, 64 for others);
  /// `symbols`, where given, receives the inputs' symbolic dims and sizes.
  Importer(onnx::ModelProto& model, const std::string& file, const ImportOptions& options,
           const std::map<std::string, int64_t>* symbol_sizes = nullptr, InputSymbols* symbols = nullptr,
           const std::map<std::string, std::string>* read_as = nullptr, bool map_weights = false)
      : model_(model), g_(*model.mutable_graph()), file_(file), options_(options), symbol_sizes_(symbol_sizes),
        symbols_out_(symbols), read_as_(read_as) {
    src_.file = file;
    if (map_weights) src_.mapped = std::make_shared<std::map<std::string, core::MappedFile>>();
    const auto dir = std::filesystem::path(file).parent_path();
    src_.dir = (dir.empty() ? std::filesystem::path(".") : dir).string();
  }

  core::Graph run();

 private:
  using Converter = void (Importer::*)(const Node&);
  static const std::unordered_map<std::string, Converter>& converters();
  /// ONNX Runtime's operators (domain com.microsoft): the quantised ones its
  /// quantize_static writes in a QOperator model, the transformer ones its
  /// transformer optimizer writes.
  static const std::unordered_map<std::string, Converter>& ms_converters();

  // --- set-up
  void read_opsets();
  void read_initializers();
  void read_inputs();
  void order_nodes();
  Node node(int i) const;
  void convert(int i);
  void finish_outputs();

  // --- tensors
  const Blob* constant(const std::string& name) const {
    auto it = constants_.find(name);
    return it == constants_.end() ? nullptr : &it->second;
  }
  const Blob& require_constant(const Node& n, int k, const char* field) const {
    if (!n.has_in(k)) throw n.error("required input missing", field);
    if (const Blob* c = constant(n.in(k))) return *c;
    throw Unsupported{fmt::format("input {} '{}' must be a constant (an initializer or computable at import), "
                                  "it is computed at run time", field, n.in(k))};
  }
  std::vector<int64_t> constant_ints(const Node& n, int k, const char* field) const {
    return to_ints(require_constant(n, k, field));
  }
  double constant_scalar(const Node& n, int k, const char* field) const {
    const Blob& b = require_constant(n, k, field);
    if (b.numel() != 1) throw n.error(fmt::format("expected one value, got shape {}", b.shape().to_string()), field);
    return to_doubles(b)[0];
  }
  /// The value of `name` if it is a one-element constant.
  std::optional<double> scalar(const std::string& name) const {
    const Blob* b = constant(name);
    if (!b || b->numel() != 1) return std::nullopt;
    return to_doubles(*b)[0];
  }
  Shape shape_of(const Node& n, const std::string& name) const {
    if (const Blob* c = constant(name)) return c->shape();
    auto it = shapes_.find(name);
    if (it == shapes_.end()) throw n.error(fmt::format("tensor '{}' is not computed before this node", name), "input");
    return it->second;
  }
  /// The blob of input k for a layer: a constant gets its constant layer here.
  std::string input(const Node& n, int k) {
    if (!n.has_in(k)) throw n.error(fmt::format("required input {} missing", k), "input");
    return as_blob(n, n.in(k));
  }
  std::string as_blob(const Node& n, const std::string& name);
  /// Gives the constant `name` its constant layer.
  void materialize(const std::string& name);
  void mark_value_inputs();
  bool size_dependent(const std::string& name) const { return shape_math_.count(name) != 0; }
  /// After node n computed constants from size-dependent ones: the shape_math
  /// layer computing each output at any size (false: n's op has none, its
  /// outputs keep their value at the import size).
  bool record_shape_math(const Node& n);
  bool record_split_shape_math(const Node& n);
  /// The node (all its inputs constants, some size-dependent) recorded as
  /// shape_math and its value computed now; false where it cannot be.
  bool fold_as_shape_math(const Node& n);
  /// The size-dependent constant `name` as a blob: its shape_math layers, added once.
  std::string plan_value(const std::string& name);
  /// A constant read by a shape_math layer: its constant layer, keeping its dtype.
  std::string value_blob(const std::string& name);
  /// A new constant tensor made by the importer (e.g. a scaled bias), as a blob.
  std::string add_constant(const std::string& base, const Blob& value);
  /// A float scalar the importer makes (an epsilon, a scale), as a blob named after `name`.
  std::string scalar_constant(const Node& n, const std::string& name, double value) {
    return as_blob(n, add_constant(name, float_blob({}, {static_cast<float>(value)})));
  }
  /// `axis` in [-rank, rank) made non-negative; an Error naming `field` outside.
  static int normalized_axis(const Node& n, int64_t axis, int rank, const char* field) {
    if (axis < -rank || axis >= rank)
      throw n.error(fmt::format("axis {} out of range for rank {}", axis, rank), field);
    return static_cast<int>(axis < 0 ? axis + rank : axis);
  }
  /// Output k of the node; a fresh name when ONNX leaves it unnamed.
  std::string output(const Node& n, int k) {
    std::string o = n.out(k);
    return o.empty() ? fresh_blob(fmt::format("{}/out{}", n.name, k)) : o;
  }
  bool used(const std::string& tensor) const {
    return !tensor.empty() && (consumers_.count(tensor) || graph_outputs_.count(tensor));
  }

  // --- names (fresh_blob: GraphBuilder's)
  /// A layer named after a node keeps the node's name; others (constants) avoid every node's name.
  std::string fresh_layer(const std::string& base, bool node_layer = true) {
    return GraphBuilder::fresh_layer(base, node_layer ? nullptr : &node_names_);
  }

  // --- layers
  Layer make(const std::string& type, const std::string& name, std::vector<std::string> inputs,
             std::vector<std::string> outputs) {
    Layer l;
    l.type = type;
    l.name = fresh_layer(name);
    l.inputs = std::move(inputs);
    l.outputs = std::move(outputs);
    return l;
  }
  /// Adds the one-input layer `type` from `x` into `y`.
  void add_unary(const Node& n, const std::string& type, const std::string& x, const std::string& y,
                 std::map<std::string, Attr> params = {}, const std::string& suffix = {}) {
    Layer l = make(type, suffix.empty() ? n.name : n.name + "/" + suffix, {x}, {y});
    l.params = std::move(params);
    add(std::move(l));
  }
  /// `x` with another shape: a constant stays one, a blob gets a reshape layer.
  void reshape_to(const Node& n, const std::string& x, const Shape& shape, const std::string& y);
  /// Elements [begin, end) of `x` along `axis` into `y`, with split layers (step 1).
  void slice_blob(const Node& n, const std::string& x, int axis, int64_t begin, int64_t end, const std::string& y);
  /// `count` elements of `x` along `axis` from `start`, every `step`-th, into `y`.
  /// x's elements at `idx` along `axis` (constant indices, in order) into y: slices of their runs, concatenated.
  void take(const Node& n, const std::string& x, int axis, const std::vector<int64_t>& idx, const std::string& y);
  void slice_strided(const Node& n, const std::string& x, int axis, int64_t start, int64_t count, int64_t step,
                     const std::string& y);

  // --- patterns
  void find_patterns();
  std::optional<Fused> match_gelu(int erf);
  std::optional<Fused> match_gelu_tanh(int tanh);
  bool match_gelu_tail(const std::string& t, Fused& f) const;
  std::optional<Fused> match_hardswish(int clip);
  std::optional<Fused> match_layernorm(int reduce);
  std::optional<Fused> match_rms_norm(int reduce);
  int producer(const std::string& t) const {
    auto it = producers_.find(t);
    return it == producers_.end() ? -1 : it->second;
  }
  /// The one node reading `t`, when exactly one does and `t` is no graph output; else -1.
  int sole_consumer(const std::string& t) const {
    auto it = consumers_.find(t);
    if (it == consumers_.end() || it->second.size() != 1 || graph_outputs_.count(t)) return -1;
    return it->second[0];
  }
  bool is(int i, const char* op) const { return i >= 0 && nodes_[static_cast<std::size_t>(i)]->op_type() == op; }
  const onnx::NodeProto& at(int i) const { return *nodes_[static_cast<std::size_t>(i)]; }
  /// Node i's k-th input or output name; empty where it has none (the pattern
  /// matchers look at nodes no check has seen yet).
  std::string input_of(int i, int k) const { return k < at(i).input_size() ? at(i).input(k) : std::string(); }
  std::string output_of(int i, int k) const { return k < at(i).output_size() ? at(i).output(k) : std::string(); }
  /// For a two-input node reading `t`, its other input; empty otherwise.
  std::string other_input(int i, const std::string& t) const {
    const auto& p = at(i);
    if (p.input_size() != 2) return {};
    if (p.input(0) == t) return p.input(1);
    if (p.input(1) == t) return p.input(0);
    return {};
  }
  void emit_fused(const Fused& f);
  void emit_norm_moved(const Fused& f, const Node& n, const Shape& xs, const std::vector<int64_t>& axes);

  // --- converters (one per ONNX operator family)
  void conv(const Node&);
  /// A conv2 layer x -> y of a Conv-like node (Conv, QLinearConv, ConvInteger) with float weights `w`:
  /// strides, dilations, group and pads from the node's attributes.
  Layer conv2_layer(const Node& n, const std::string& name, const std::string& x, const std::string& y, Blob w);
  void gemm(const Node&);
  void matmul(const Node&);
  void einsum(const Node&);
  void unary(const Node&);
  void clip(const Node&);
  void binary_op(const Node&);
  void pow(const Node&);
  void pool(const Node&);
  void global_pool(const Node&);
  void reduce(const Node&);
  void log_softmax(const Node&);
  void rms_norm(const Node&);
  void attention(const Node&);
  std::string attention_mask(const Node& n, int64_t total, bool* bias_constant);
  /// What attention() hands the step-by-step form.
  struct AttentionSteps {
    std::string q, k, v, bias, y;
    bool guard = false, three_d = false;
    double scale = 1;
    int64_t mode = 0, batch = 0, len = 0, hq = 0, dv = 0;
  };
  void attention_steps(const Node& n, const AttentionSteps& a);
  void linear_attention(const Node&);
  void sum_mean(const Node&);
  void softsign(const Node&);
  void elu_softplus(const Node&);
  void cast_like(const Node&);
  void cast_to_type(const Node& n, int to);
  void cast_to_narrow(const Node& n, DType to, int onnx_type);
  /// A cast layer: x as the narrow type `to` holds it.
  void add_cast(const Node& n, const std::string& x, const std::string& y, DType to, bool saturate,
                const std::string& round_mode, const std::string& suffix = {}) {
    add_unary(n, "cast", x, y, {{"to", std::string(to_string(to))}, {"saturate", int64_t{saturate}}, {"round_mode", round_mode}},
              suffix);
  }
  void batchnorm(const Node&);
  void softmax(const Node&);
  /// Softmax of `x` into `y` as ONNX's Softmax of opset `opset` computes it
  /// (before 13: over the dims from `axis` on, seen as one).
  void add_softmax(const Node& n, const std::string& x, const std::string& y, int64_t opset, int64_t axis);
  void layernorm(const Node&);
  void identity(const Node&);
  void general_einsum(const Node& n, const std::string& equation);
  /// Whether Pow's exponent is a constant of non-negative integers.
  bool integral_exponent(const Node& n) const;
  void if_op(const Node&);
  void batchnorm_training(const Node&);
  void stft(const Node&);
  void deform_conv(const Node&);
  void causal_conv_with_state(const Node&);
  void loop(const Node&);
  void scan(const Node&);
  /// Sequence operators (sequence.cpp): a sequence is the list of its
  /// elements' names, known at import.
  void sequence_op(const Node&);
  /// A Loop over a constant trip count carrying a sequence, its body converted
  /// once per iteration; false where the Loop carries no sequence.
  bool unroll_loop(const Node& n, const onnx::GraphProto& body);
  const std::vector<std::string>& sequence_of(const Node& n, int k);
  /// Input k of n: a constant position in a sequence of `size` (from the end
  /// where negative; `insert` allows the end itself).
  int64_t sequence_position(const Node& n, int k, std::size_t size, bool insert);
  /// ONNX Runtime's transformer operators (contrib.cpp), as the standard operators they compute.
  void skip_layer_norm(const Node&);
  void embed_layer_norm(const Node&);
  void qembed_layer_norm(const Node&);
  void embedding_layer_norm(const Node& n, const std::function<std::string(int)>& input,
                            const std::function<void(const std::string&, const std::string&)>& gather_word);
  void contrib_attention(const Node&);
  void qattention(const Node&);
  /// Where an Attention-like com.microsoft node has its inputs (-1: none).
  struct AttentionPorts {
    int mask = 3, past = 4, attention_bias = 5;
  };
  /// Attention of Q, K and V as `project(part, first column, columns, output)`
  /// writes each ("q", "k", "v"; the bias added after), then contrib_attention's mask, past and present.
  void projected_attention(const Node& n, const AttentionPorts& ports,
                           const std::function<void(const std::string&, int64_t, int64_t, const std::string&)>& project);
  void multi_head_attention(const Node&);
  void contrib_activation(const Node&);
  void fused_matmul(const Node&);
  void contrib_rotary(const Node&);
  void group_query_attention(const Node&);
  void matmul_nbits(const Node&);
  void gather_block_quantized(const Node&);
  void fused_conv(const Node&);
  void fused_gemm(const Node&);
  /// FusedConv's and FusedGemm's activation `act` with its float parameters, x into y.
  void fused_activation(const Node& n, const std::string& act, const std::vector<double>& params, const std::string& x,
                        const std::string& y);
  /// x [B, S, heads, H] rotated by the cos/sin cache rows at `pos` ([B or 1, S]): its first rd features.
  std::string rotated(const Node& n, const std::string& x, const std::string& pos, const std::string& cos_cache,
                      const std::string& sin_cache, int64_t rd, int64_t h, bool interleaved, const std::string& what);
  /// Input k of a com.microsoft attention node, its int32 mask, as an additive
  /// bias for [B, N, S, T] ("" for none); `keys` makes the [T] key positions.
  std::string contrib_mask_bias(const Node& n, int k, int64_t batch, const std::function<std::string()>& keys, bool two_b);
  /// Positions 0 .. T-1 (int64, computed from sizes), T the sum of the sizes of the (tensor, axis) pairs.
  std::string positions_along(const Node& n, const std::vector<std::pair<std::string, int>>& dims);
  /// A synthesized Slice of x's [from, to) along `axis` (every `step`-th) into y; y.
  std::string slice_node(const Node& n, const std::string& x, int64_t axis, int64_t from, int64_t to, const std::string& y,
                         int64_t step = 1);
  /// A mask's bias plus input bias_k (an attention_bias) where the node has it.
  std::string summed_bias(const Node& n, const std::string& mask, int bias_k);
  /// `op` (Unsqueeze, Squeeze, ReduceSum) synthesized over `axes`, given as an input or an attribute as the opset asks.
  std::string axes_node(const Node& from, const std::string& op, const std::string& x, std::vector<int64_t> axes,
                        const std::string& y, std::function<void(onnx::NodeProto&)> more = {});
  /// An int64 constant the importer makes, as a name synthesized nodes read.
  std::string int_constant(const std::string& base, const Shape& shape, const std::vector<int64_t>& values);
  /// A fresh name for a value between synthesized nodes (its converter makes it: used() holds).
  std::string synthesized_value(const std::string& base);
  /// Input k of n by name; an Error naming `field` where the node lacks it.
  std::string input_name(const Node& n, int k, const char* field) const {
    if (!n.has_in(k)) throw n.error("required input missing", field);
    return n.in(k);
  }
  /// A node made here (op on `inputs`, giving `outputs`, on behalf of `from`)
  /// converted as if the file held it; its first output.
  std::string convert_synthesized(const Node& from, const std::string& op, std::vector<std::string> inputs,
                                  std::vector<std::string> outputs,
                                  const std::function<void(onnx::NodeProto&)>& attributes = {});
  /// A node the file's graph does not list (a branch's, an unrolled body's,
  /// one made here): appended to the nodes and converted now.
  void convert_node(const onnx::NodeProto& p);
  int default_opset() const {
    auto it = opsets_.find("");
    return it == opsets_.end() ? 0 : it->second;
  }
  /// A body input of a Loop or Scan: its name in the body, ONNX type and shape.
  struct BodyInput {
    std::string name;
    int type;
    Shape shape;
  };
  /// A Loop's body as a graph of its own (a nested import): its inputs `ins`
  /// ([iteration, cond, carried..., read...]), then the values it reads from the
  /// scopes around it, constants copied in and the others appended to its
  /// inputs and to `outer` (their blobs here). `output_types` receives each
  /// body output's ONNX type. Inside, every value is float32, as here.
  core::Graph body_graph(const Node& n, onnx::GraphProto body, const std::vector<BodyInput>& ins,
                         std::vector<std::string>& outer, std::vector<int>& output_types);
  /// Adds the loop layer for a Loop or Scan (docs/layer-types.md, "loop").
  void add_loop(const std::string& name, std::vector<std::string> inputs, std::vector<std::string> outputs,
                std::map<std::string, Attr> params, const core::Graph& body, const std::vector<int>& output_types);
  /// The ONNX element type of a tensor here (FLOAT for float values).
  int onnx_type_of(const std::string& name) const {
    if (auto t = value_types_.find(name); t != value_types_.end()) return t->second;
    if (constant(name))
      if (auto t = onnx_types_.find(name); t != onnx_types_.end()) return t->second;
    return onnx::TensorProto::FLOAT;
  }
  void cast(const Node&);
  void flatten(const Node&);
  void reshape(const Node&);
  void squeeze(const Node&);
  void concat(const Node&);
  void split(const Node&);
  void slice(const Node&);
  void gather(const Node&);
  void transpose(const Node&);
  void pad(const Node&);
  void resize(const Node&);
  void conv_transpose(const Node&);
  void conv_transpose_nd(const Node&);
  void rnn(const Node&);
  void quantize_linear(const Node&);
  void dequantize_linear(const Node&);
  void qlinear_conv(const Node&);
  void qlinear_matmul(const Node&);
  void qlinear_binary(const Node&);
  void qlinear_unary(const Node&);
  void qlinear_softmax(const Node&);
  void qlinear_global_pool(const Node&);
  void qlinear_concat(const Node&);
  void qgemm(const Node&);
  /// After an operator that only moves or selects values (MaxPool, Flatten,
  /// Reshape, ...) of a quantised tensor: its outputs lie on the same grid,
  /// so each is quantised so again (an exact fake_quant), and later quantised
  /// operators read them as the tensor they are.
  void keep_quantisation(const Node&);
  void dynamic_quantize_linear(const Node&);
  void conv_integer(const Node&);
  void matmul_integer(const Node&);
  /// Scale and zero point of a quantisation (inputs scale_k and zp_k), the range from the zero point's type.
  void runtime_quantize(const Node& n);
  struct QParams {
    std::vector<float> scales;
    std::vector<int64_t> zero_points;
    int64_t qmin = 0, qmax = 255;
    int type = onnx::TensorProto::UINT8;  ///< the integers' ONNX type
    /// A float8 or float4e2m1 type: values rounded onto it (zero points 0, qmin/qmax unused).
    std::optional<DType> float_type;
    bool saturate = true;  ///< QuantizeLinear's saturate (float8)
  };
  /// Whether `name` is an output of the ONNX graph.
  bool is_graph_output(const std::string& name) const { return graph_outputs_.count(name) != 0; }
  /// A 1-D window operator (Conv, ConvTranspose, pooling on [N, C, L]) run as
  /// its 2-D form on [N, C, 1, L]: input, weight and attributes lifted, output reshaped back.
  void as_2d(const Node& n, Converter convert);
  /// The real values of input k of a quantised operator: a QuantizeLinear's
  /// (held as real values), or integers computed at run time, (x - zero point) * scale.
  std::string real_values(const Node& n, int k, const QParams& q, int axis, const char* what);
  /// Output 0 of a quantising operator from its real values: integers where it
  /// is a graph output (the ONNX type's values), else real values on the grid.
  void quantized_output(const Node& n, const std::string& real, const QParams& q, int axis);
  /// A per-axis constant [C, 1, ...] (or a scalar) lined up with axis `axis` of a rank-`rank` tensor.
  std::string along_axis(const Node& n, const std::string& name, const std::vector<float>& values, int axis, int rank);
  /// Blocked quantisation (opset 21's block_size): q's scales and zero points
  /// (shaped like x, its axis in blocks of `block`) repeated over their blocks,
  /// one per element of x; the scale's shape checked, the field named.
  struct Blocked {
    std::vector<float> scales, zero_points;
  };
  Blocked blocked(const Node& n, const QParams& q, const Shape& xs, int axis, int64_t block) const;
  void blocked_quantize(const Node& n, int64_t block);
  QParams quantize_params(const Node& n);
  void add_integers(const Node& n, const std::string& real, const std::string& scale, const std::string& zero_point,
                    const QParams& q);
  void blocked_dequantize(const Node& n, int64_t block);
  /// `int32`: the zero point may be int32 (a DequantizeLinear of a constant bias).
  /// `blocks`: a blocked DequantizeLinear's, whose scales may be 0 or negative
  /// (ONNX Runtime's symmetric 4-bit weights: a block's largest value over -8).
  QParams qparams(const Node& n, int scale_k, int zp_k, const char* what, bool int32 = false, bool blocks = false);
  /// A per-tensor QParams as a fake_quant layer's parameters.
  core::FakeQuant per_tensor(const Node& n, const QParams& q, const char* what) const;
  static void set_narrow_type(QParams& q, int type);
  /// Adds the fake_quant layer x -> y; y then holds a quantised tensor as its real values.
  void add_fake_quant(const Node& n, const std::string& x, const std::string& y, const core::FakeQuant& q);
  /// An integer constant (or a float one holding integers) as real values: (v - zp) * scale, per `axis` where several.
  Blob dequantized(const Node& n, const Blob& v, const QParams& q, int axis, const char* what) const;
  /// Marks a dequantised int8 weight (`source`'s values) with its scales as the file's int8 grid, where it is one.
  void mark_int8_grid(Blob& w, const QParams& q, int axis, const std::string& source) const;
  void group_norm(const Node&);
  void tile(const Node&);
  void expand(const Node&);
  void constant_node(const Node&);
  void shape(const Node&);
  void size(const Node&);
  void constant_of_shape(const Node&);
  void range(const Node&);
  void equal(const Node&);
  void where_op(const Node&);
  void prelu(const Node&);
  void constant_math(const Node&);
  void compare(const Node&);
  void logical(const Node&);
  void rounding(const Node&);
  void is_nan_inf(const Node&);
  void arg_reduce(const Node&);
  void gather_elements(const Node&);
  void trilu(const Node&);
  void nll_loss(const Node&);
  void mod_op(const Node&);
  void bitwise(const Node&);
  void cumulative(const Node&);
  void top_k(const Node&);
  void non_max_suppression(const Node&);
  void non_zero(const Node&);
  void unique(const Node&);
  void dft(const Node&);
  void window(const Node&);
  void col2im(const Node&);
  void roi_align(const Node&);
  void hardmax(const Node&);
  void thresholded_relu(const Node&);
  void celu(const Node&);
  void swish(const Node&);
  void lp_normalization(const Node&);
  void space_depth(const Node&);
  void shrink(const Node&);
  void lp_pool(const Node&);
  void max_unpool(const Node&);
  void tensor_scatter(const Node&);
  /// Max or average pooling of a 5-D `x` into `y` with `n`'s window attributes.
  void pool_3d(const Node& n, const std::string& x, const std::string& y, bool is_max, int64_t count_include_pad);
  void scatter(const Node&);
  void gather_nd(const Node&);
  void one_hot(const Node&);
  void eye_like(const Node&);
  void center_crop_pad(const Node&);
  void grid_sample(const Node&);
  void affine_grid(const Node&);
  void swiglu(const Node&);
  void sign(const Node&);
  void mean_variance_normalization(const Node&);
  /// x * sigmoid(alpha * x) into y (silu where alpha is 1).
  void add_swish(const Node& n, const std::string& x, const std::string& y, double alpha);
  void rotary_embedding(const Node&);
  void lrn(const Node&);
  void compress(const Node&);
  void reverse_sequence(const Node&);
  /// y = take of [a flattened, b flattened] at constant positions, shaped `shape`
  /// (positions from numel(a) on read b): a gather from two sources.
  void take_from_two(const Node& n, const std::string& a, const std::string& b, const std::string& y, const Shape& shape,
                     const std::vector<int64_t>& positions);
  /// A take of x's values at constant flat positions, shaped `shape`.
  void take_positions(const Node& n, const std::string& y, const Shape& shape, const std::vector<int64_t>& positions);
  /// The ONNX element type of tensor `name` (run-time typed, or a constant's), -1 where float32 or unknown.
  int elem_type(const std::string& name) const {
    if (auto t = value_types_.find(name); t != value_types_.end()) return t->second;
    if (constant(name))
      if (auto t = onnx_types_.find(name); t != onnx_types_.end()) return t->second;
    return -1;
  }
  /// Whether any input of n is integer-typed (bool not counted).
  bool integer_inputs(const Node& n) const;
  void softmax_cross_entropy(const Node&);
  void nll_of(const Node& n, const std::string& logp, const Shape& xs, const std::string& y);
  /// Whether every input the node has is a constant (its result is one too).
  bool all_constant(const Node& n) const {
    for (int k = 0; k < n.num_inputs(); ++k)
      if (n.has_in(k) && !constant(n.in(k))) return false;
    return true;
  }
  /// Whether an operator's result on integer values held as floats is its integer result.
  static bool keeps_integers(const std::string& op);
  /// After node n, whose inputs are all constants, added layers from index
  /// `first` on: computes them now with the reference routines and makes n's
  /// outputs constants (folding by rule, whatever the operator), unless they
  /// grow past the folded-constant cap or no routine computes them here.
  void fold_node(const Node& n, std::size_t first);

  std::vector<int64_t> window_pads(const Node& n, const Shape& x, const std::vector<int64_t>& kernel,
                                   const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations) const;

  onnx::ModelProto& model_;
  onnx::GraphProto& g_;
  const std::string file_;
  const ImportOptions& options_;
  const std::map<std::string, int64_t>* symbol_sizes_;
  InputSymbols* symbols_out_;
  const std::map<std::string, std::string>* read_as_;
  TensorSource src_;
  std::map<std::string, int> opsets_;  // domain -> version

  std::vector<const onnx::NodeProto*> nodes_;       // topological order
  std::unordered_map<std::string, int> producers_;  // tensor -> node index
  std::unordered_map<std::string, std::vector<int>> consumers_;
  std::unordered_set<std::string> graph_outputs_;
  std::unordered_map<std::string, Blob> constants_;
  /// The codes behind a constant that a blocked DequantizeLinear made from
  /// 8-bit or narrower integers, with their per-block quantisation: a MatMul
  /// reading that constant keeps them as a blockwise weight (core::block_quantized).
  std::unordered_map<std::string, Blob> blocked_codes_;
  static std::optional<Blob> blockwise_weight(const Blob& codes);
  std::unordered_map<std::string, int> onnx_types_;   // initializers and Constant outputs: their ONNX element type
  /// Tensors computed at run time that hold other values than float ones
  /// (typed graph inputs, casts, comparisons): their ONNX element type. They
  /// are float32 inside, exact (a session's edges refuse what is not).
  std::unordered_map<std::string, int> value_types_;
  /// Tensors held as the real values of a quantised tensor (QuantizeLinear, QLinearConv, ...): their quantisation.
  std::unordered_map<std::string, core::FakeQuant> quantized_;
  /// DynamicQuantizeLinear's integer outputs (held as floats): their scale and zero point blobs.
  std::unordered_map<std::string, std::pair<std::string, std::string>> int_valued_;
  /// Constants that depend on the size of a symbolic input dim: their value at
  /// the import size is in constants_, and the shape_math layer computing them
  /// at any size here, added to the graph where a layer reads them (plan_value).
  std::unordered_map<std::string, Layer> shape_math_;
  std::unordered_set<std::string> shape_math_added_;
  std::unordered_map<std::string, std::string> value_blobs_;  // constant -> its constant layer as a shape_math input
  // Some input dim is symbolic, or a layer's output size depends on values
  // (NonMaxSuppression, NonZero): Shape and Size of blobs computed at run time
  // are then computed when a session plans (shape_math), not at import.
  bool symbolic_inputs_ = false;
  bool body_ = false;  ///< translating a Loop's or Scan's body (body_graph)
  // Blobs whose size depends on values (after a NonMaxSuppression, NonZero or
  // an If computed at run time): their shapes at import are capacities, so
  // converters give them layers that take their size when a session plans.
  std::unordered_set<std::string> value_sized_;
  bool value_sized(const std::string& name) const { return value_sized_.count(name) != 0; }
  std::unordered_set<std::string> node_names_;
  std::unordered_set<std::string> unavailable_;       // outputs of unsupported nodes
  std::vector<std::string> unsupported_;              // one line per unsupported node
  std::vector<Fused> fused_;
  std::vector<int> fused_of_;                         // node -> index into fused_, or -1
  std::vector<bool> done_;                            // node already translated
  std::unordered_map<std::string, std::vector<std::string>> sequences_;  // sequence -> its elements
  std::deque<onnx::NodeProto> synthesized_;           // nodes made here (unrolled loop bodies, sequence steps)
};

}  // namespace onnx_import
}  // namespace softneuro

#pragma GCC visibility pop
