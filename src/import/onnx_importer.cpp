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
#include "import/onnx_importer.hpp"

#include "core/dnn_file.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/mapped_file.hpp"
#include "core/narrow_types.hpp"
#include "core/model_impl.hpp"
#include "core/weight_quant.hpp"
#include "import/dynamic_dims.hpp"
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

namespace softneuro {
namespace onnx_import {
namespace {

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

bool near(double a, double b) { return std::abs(a - b) <= 1e-4 * std::max(1.0, std::abs(b)); }

// ---------------------------------------------------------------------------
// A fused pattern: several nodes that become one layer.

struct Fused {
  enum Kind { gelu, gelu_tanh, layernorm, hardswish } kind;
  std::vector<int> members;  ///< node indices
  std::string x, y;          ///< input and output tensors
  std::vector<int64_t> axes; ///< layernorm: the reduced axes
  double epsilon = 0;
  std::string scale, bias;   ///< layernorm: constant tensors, empty when absent
  int last() const { return *std::max_element(members.begin(), members.end()); }
};

// ---------------------------------------------------------------------------

class Importer {
 public:
  /// `symbol_sizes`: the sizes named symbolic dims take while translating
  /// (default: 1 for a name some input has as its leading dim, 64 for others);
  /// `symbols`, where given, receives the inputs' symbolic dims and sizes.
  Importer(onnx::ModelProto& model, const std::string& file, const ImportOptions& options,
           const std::map<std::string, int64_t>* symbol_sizes = nullptr, InputSymbols* symbols = nullptr)
      : model_(model), g_(*model.mutable_graph()), file_(file), options_(options), symbol_sizes_(symbol_sizes),
        symbols_out_(symbols) {
    src_.file = file;
    const auto dir = std::filesystem::path(file).parent_path();
    src_.dir = (dir.empty() ? std::filesystem::path(".") : dir).string();
  }

  core::Graph run();

 private:
  using Converter = void (Importer::*)(const Node&);
  static const std::unordered_map<std::string, Converter>& converters();
  /// ONNX Runtime's quantised operators (domain com.microsoft), as its
  /// quantize_static writes a QOperator model.
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
  bool size_dependent(const std::string& name) const { return shape_math_.count(name) != 0; }
  /// After node n computed constants from size-dependent ones: the shape_math
  /// layer computing each output at any size (false: n's op has none, its
  /// outputs keep their value at the import size).
  bool record_shape_math(const Node& n);
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

  // --- names
  std::string fresh_blob(const std::string& base);
  std::string fresh_layer(const std::string& base, bool node_layer = true);

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
  /// Infers the layer's output shapes and appends it to the graph.
  void add(Layer l);
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
  void loop(const Node&);
  void scan(const Node&);
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
  /// `int32`: the zero point may be int32 (a DequantizeLinear of a constant bias).
  QParams qparams(const Node& n, int scale_k, int zp_k, const char* what, bool int32 = false);
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
  TensorSource src_;
  std::map<std::string, int> opsets_;  // domain -> version

  core::Graph graph_;
  std::vector<const onnx::NodeProto*> nodes_;       // topological order
  std::unordered_map<std::string, int> producers_;  // tensor -> node index
  std::unordered_map<std::string, std::vector<int>> consumers_;
  std::unordered_set<std::string> graph_outputs_;
  std::unordered_map<std::string, Blob> constants_;
  std::unordered_map<std::string, int> onnx_types_;   // initializers and Constant outputs: their ONNX element type
  /// Tensors computed at run time that hold other values than float ones
  /// (typed graph inputs, casts, comparisons): their ONNX element type. They
  /// are float32 inside, exact (a session's edges refuse what is not).
  std::unordered_map<std::string, int> value_types_;
  /// Tensors held as the real values of a quantised tensor (QuantizeLinear, QLinearConv, ...): their quantisation.
  std::unordered_map<std::string, core::FakeQuant> quantized_;
  /// DynamicQuantizeLinear's integer outputs (held as floats): their scale and zero point blobs.
  std::unordered_map<std::string, std::pair<std::string, std::string>> int_valued_;
  std::unordered_map<std::string, Shape> shapes_;     // blobs computed at run time (and materialized constants)
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
  // Blobs whose size depends on values (after a NonMaxSuppression, NonZero or
  // an If computed at run time): their shapes at import are capacities, so
  // converters give them layers that take their size when a session plans.
  std::unordered_set<std::string> value_sized_;
  bool value_sized(const std::string& name) const { return value_sized_.count(name) != 0; }
  std::unordered_set<std::string> taken_blobs_, taken_layers_, node_names_;
  std::unordered_set<std::string> unavailable_;       // outputs of unsupported nodes
  std::vector<std::string> unsupported_;              // one line per unsupported node
  std::vector<Fused> fused_;
  std::vector<int> fused_of_;                         // node -> index into fused_, or -1
  std::vector<bool> done_;                            // node already translated
};

const std::unordered_map<std::string, Importer::Converter>& Importer::ms_converters() {
  static const std::unordered_map<std::string, Converter> table = {
      {"QuantizeLinear", &Importer::quantize_linear},
      {"DequantizeLinear", &Importer::dequantize_linear},
      {"QLinearAdd", &Importer::qlinear_binary},
      {"QLinearMul", &Importer::qlinear_binary},
      {"QLinearSigmoid", &Importer::qlinear_unary},
      {"QLinearSoftmax", &Importer::qlinear_softmax},
      {"QLinearLeakyRelu", &Importer::qlinear_unary},
      {"QLinearGlobalAveragePool", &Importer::qlinear_global_pool},
      {"QLinearConcat", &Importer::qlinear_concat},
      {"QGemm", &Importer::qgemm},
  };
  return table;
}

const std::unordered_map<std::string, Importer::Converter>& Importer::converters() {
  static const std::unordered_map<std::string, Converter> table = {
      {"Conv", &Importer::conv},
      {"Gemm", &Importer::gemm},
      {"MatMul", &Importer::matmul},
      {"Einsum", &Importer::einsum},
      {"Relu", &Importer::unary},
      {"Sigmoid", &Importer::unary},
      {"Tanh", &Importer::unary},
      {"HardSwish", &Importer::unary},
      {"HardSigmoid", &Importer::unary},
      {"Gelu", &Importer::unary},
      {"Abs", &Importer::unary},
      {"Neg", &Importer::unary},
      {"Sqrt", &Importer::unary},
      {"Exp", &Importer::unary},
      {"Log", &Importer::unary},
      {"Erf", &Importer::unary},
      {"Reciprocal", &Importer::unary},
      {"LeakyRelu", &Importer::unary},
      {"Mish", &Importer::unary},
      {"Sin", &Importer::unary},
      {"Cos", &Importer::unary},
      {"Tan", &Importer::unary},
      {"Asin", &Importer::unary},
      {"Acos", &Importer::unary},
      {"Atan", &Importer::unary},
      {"Sinh", &Importer::unary},
      {"Cosh", &Importer::unary},
      {"Asinh", &Importer::unary},
      {"Acosh", &Importer::unary},
      {"Atanh", &Importer::unary},
      {"PRelu", &Importer::prelu},
      {"Clip", &Importer::clip},
      {"Add", &Importer::binary_op},
      {"Sub", &Importer::binary_op},
      {"Mul", &Importer::binary_op},
      {"Div", &Importer::binary_op},
      {"Pow", &Importer::pow},
      {"MaxPool", &Importer::pool},
      {"AveragePool", &Importer::pool},
      {"GlobalAveragePool", &Importer::global_pool},
      {"GlobalMaxPool", &Importer::global_pool},
      {"ReduceMean", &Importer::reduce},
      {"ReduceMax", &Importer::reduce},
      {"ReduceMin", &Importer::reduce},
      {"ReduceSum", &Importer::reduce},
      {"ReduceL2", &Importer::reduce},
      {"ReduceSumSquare", &Importer::reduce},
      {"ReduceL1", &Importer::reduce},
      {"ReduceLogSum", &Importer::reduce},
      {"ReduceLogSumExp", &Importer::reduce},
      {"LogSoftmax", &Importer::log_softmax},
      {"RMSNormalization", &Importer::rms_norm},
      {"Attention", &Importer::attention},
      {"RotaryEmbedding", &Importer::rotary_embedding},
      {"Sum", &Importer::sum_mean},
      {"Max", &Importer::sum_mean},
      {"Min", &Importer::sum_mean},
      {"Mean", &Importer::sum_mean},
      {"Softsign", &Importer::softsign},
      {"Softplus", &Importer::elu_softplus},
      {"Elu", &Importer::elu_softplus},
      {"Selu", &Importer::elu_softplus},
      {"CastLike", &Importer::cast_like},
      {"BatchNormalization", &Importer::batchnorm},
      {"Softmax", &Importer::softmax},
      {"LayerNormalization", &Importer::layernorm},
      {"Identity", &Importer::identity},
      {"If", &Importer::if_op},
      {"Loop", &Importer::loop},
      {"Scan", &Importer::scan},
      {"Dropout", &Importer::identity},
      {"Cast", &Importer::cast},
      {"Flatten", &Importer::flatten},
      {"Reshape", &Importer::reshape},
      {"Squeeze", &Importer::squeeze},
      {"Unsqueeze", &Importer::squeeze},
      {"Concat", &Importer::concat},
      {"Split", &Importer::split},
      {"Slice", &Importer::slice},
      {"Gather", &Importer::gather},
      {"Transpose", &Importer::transpose},
      {"Pad", &Importer::pad},
      {"Resize", &Importer::resize},
      {"ConvTranspose", &Importer::conv_transpose},
      {"LSTM", &Importer::rnn},
      {"QuantizeLinear", &Importer::quantize_linear},
      {"DequantizeLinear", &Importer::dequantize_linear},
      {"QLinearConv", &Importer::qlinear_conv},
      {"QLinearMatMul", &Importer::qlinear_matmul},
      {"DynamicQuantizeLinear", &Importer::dynamic_quantize_linear},
      {"ConvInteger", &Importer::conv_integer},
      {"MatMulInteger", &Importer::matmul_integer},
      {"InstanceNormalization", &Importer::group_norm},
      {"GroupNormalization", &Importer::group_norm},
      {"Tile", &Importer::tile},
      {"GRU", &Importer::rnn},
      {"RNN", &Importer::rnn},
      {"Expand", &Importer::expand},
      {"Constant", &Importer::constant_node},
      {"Shape", &Importer::shape},
      {"Size", &Importer::size},
      {"ConstantOfShape", &Importer::constant_of_shape},
      {"Range", &Importer::range},
      {"Equal", &Importer::compare},
      {"Less", &Importer::compare},
      {"Greater", &Importer::compare},
      {"LessOrEqual", &Importer::compare},
      {"GreaterOrEqual", &Importer::compare},
      {"And", &Importer::logical},
      {"Or", &Importer::logical},
      {"Xor", &Importer::logical},
      {"Not", &Importer::logical},
      {"Where", &Importer::where_op},
      {"Floor", &Importer::rounding},
      {"Ceil", &Importer::rounding},
      {"Round", &Importer::rounding},
      {"IsNaN", &Importer::is_nan_inf},
      {"IsInf", &Importer::is_nan_inf},
      {"ArgMax", &Importer::arg_reduce},
      {"GatherElements", &Importer::gather_elements},
      {"Trilu", &Importer::trilu},
      {"ArgMin", &Importer::arg_reduce},
      {"NegativeLogLikelihoodLoss", &Importer::nll_loss},
      {"BitwiseAnd", &Importer::bitwise},
      {"BitwiseOr", &Importer::bitwise},
      {"BitwiseXor", &Importer::bitwise},
      {"BitwiseNot", &Importer::bitwise},
      {"BitShift", &Importer::bitwise},
      {"CumSum", &Importer::cumulative},
      {"CumProd", &Importer::cumulative},
      {"TopK", &Importer::top_k},
      {"NonMaxSuppression", &Importer::non_max_suppression},
      {"NonZero", &Importer::non_zero},
      {"Unique", &Importer::unique},
      {"DFT", &Importer::dft},
      {"STFT", &Importer::stft},
      {"DeformConv", &Importer::deform_conv},
      {"Col2Im", &Importer::col2im},
      {"HannWindow", &Importer::window},
      {"HammingWindow", &Importer::window},
      {"BlackmanWindow", &Importer::window},
      {"RoiAlign", &Importer::roi_align},
      {"Hardmax", &Importer::hardmax},
      {"ThresholdedRelu", &Importer::thresholded_relu},
      {"Celu", &Importer::celu},
      {"Swish", &Importer::swish},
      {"SwiGLU", &Importer::swiglu},
      {"Sign", &Importer::sign},
      {"MeanVarianceNormalization", &Importer::mean_variance_normalization},
      {"LpNormalization", &Importer::lp_normalization},
      {"SpaceToDepth", &Importer::space_depth},
      {"DepthToSpace", &Importer::space_depth},
      {"Shrink", &Importer::shrink},
      {"ReduceProd", &Importer::reduce},
      {"LpPool", &Importer::lp_pool},
      {"SoftmaxCrossEntropyLoss", &Importer::softmax_cross_entropy},
      // Computed at import when their inputs are constants (index and mask arithmetic).
      {"Mod", &Importer::mod_op},
      {"ScatterND", &Importer::scatter},
      {"ScatterElements", &Importer::scatter},
      {"GatherND", &Importer::gather_nd},
      {"OneHot", &Importer::one_hot},
      {"EyeLike", &Importer::eye_like},
      {"CenterCropPad", &Importer::center_crop_pad},
      {"GridSample", &Importer::grid_sample},
      {"AffineGrid", &Importer::affine_grid},
      {"LRN", &Importer::lrn},
      {"Compress", &Importer::compress},
      {"ReverseSequence", &Importer::reverse_sequence},
  };
  return table;
}

// ---------------------------------------------------------------------------
// Set-up

void Importer::read_opsets() {
  for (const auto& o : model_.opset_import()) opsets_[o.domain() == "ai.onnx" ? "" : o.domain()] = static_cast<int>(o.version());
  auto it = opsets_.find("");
  if (it == opsets_.end()) throw Error("the model imports no opset of the default ONNX domain", file_, {}, "opset_import");
  if (it->second < kMinOpset || it->second > kMaxOpset)
    throw Error(fmt::format("opset {} is outside the supported range {}..{} (re-export the model with "
                            "opset_version between them)", it->second, kMinOpset, kMaxOpset),
                file_, {}, "opset_import");
}

void Importer::read_initializers() {
  for (auto& t : *g_.mutable_initializer()) {
    if (t.name().empty()) throw Error("an initializer has no name", file_, {}, "initializer");
    if (!constants_.emplace(t.name(), read_tensor(t, src_, {}, t.name())).second)
      throw Error(fmt::format("initializer '{}' appears twice", t.name()), file_, {}, "initializer");
    onnx_types_[t.name()] = t.data_type();
    // The blob holds a copy now: free the model's bytes early (large models).
    std::string().swap(*t.mutable_raw_data());
  }
}

void Importer::read_inputs() {
  std::set<std::string> seen;
  InputSymbols symbols;
  for (const auto& in : g_.input()) {
    const std::string& name = in.name();
    if (name.empty()) throw Error("a graph input has no name", file_, {}, "input");
    // Old exporters list initializers among the inputs too: those stay constants.
    if (constants_.count(name)) continue;
    if (!seen.insert(name).second) throw Error(fmt::format("graph input '{}' appears twice", name), file_, {}, name);
    if (!in.type().has_tensor_type()) throw Error("graph input is not a tensor", file_, {}, name);
    const auto& tt = in.type().tensor_type();
    const std::optional<DType> dtype = edge_dtype(tt.elem_type());
    if (!dtype)
      throw Error(fmt::format("graph input has element type {}; nets take float16/32/64, integer and bool inputs",
                              onnx_type_name(tt.elem_type())),
                  file_, {}, name);
    if (*dtype == DType::float64)
      core::warn("{}: input '{}' is float64; the net computes in float32 (a session narrows it, refusing values beyond "
                 "float32's range)", file_, name);
    if (*dtype != DType::float32) value_types_[name] = tt.elem_type();
    auto given = options_.input_shapes.find(name);
    if (!tt.has_shape() && given == options_.input_shapes.end())
      throw Error("graph input has no shape; give one in ImportOptions::input_shapes (--input-shape)", file_, {}, name);
    Shape shape;
    if (tt.has_shape()) {
      if (tt.shape().dim_size() > Shape::max_rank) throw Error("graph input has too many dims", file_, {}, name);
      for (const auto& d : tt.shape().dim()) shape.push_back(d.has_dim_value() && d.dim_value() > 0 ? d.dim_value() : -1);
    }
    if (given != options_.input_shapes.end()) {
      // A given dim fixes a symbolic one; a given -1 leaves it symbolic.
      const Shape& s = given->second;
      bool fits = !tt.has_shape() || s.rank() == shape.rank();
      for (int i = 0; fits && i < shape.rank(); ++i) fits = shape[i] < 0 || s[i] < 0 || shape[i] == s[i];
      for (int i = 0; fits && i < s.rank(); ++i) fits = s[i] > 0 || s[i] == -1;
      if (!fits)
        throw Error(fmt::format("the given shape {} does not fit the model's {}", s.to_string(), shape.to_string()), file_, {}, name);
      if (!tt.has_shape()) shape = s;
      for (int i = 0; i < shape.rank(); ++i)
        if (s[i] > 0) shape[i] = s[i];
    }
    // Symbolic dims stay dynamic (import_onnx checks which really can vary),
    // each a sum of named sizes (dims naming one size vary together).
    TensorInfo info{name, shape, *dtype, {}};
    for (int i = 0; i < shape.rank(); ++i)
      if (shape[i] < 0) {
        const auto& d = tt.shape().dim(i);
        symbols.dims.push_back(parse_dim_param(d.has_dim_param() ? d.dim_param() : std::string(),
                                               fmt::format("{}[{}]", name, i)));
        symbols.dims.back().input = name;
        symbols.dims.back().dim = i;
        info.dynamic_dims.push_back(i);
        symbolic_inputs_ = true;
      }
    graph_.inputs.push_back(std::move(info));
  }
  for (const auto& given : options_.input_shapes)
    if (std::none_of(graph_.inputs.begin(), graph_.inputs.end(), [&](const TensorInfo& t) { return t.name == given.first; }))
      throw Error("the model has no input of this name (given a shape)", file_, {}, given.first);
  // The size each name takes: the caller's, else 1 for a name that is some
  // input's leading dim by itself (a batch), else 64.
  for (const auto& d : symbols.dims)
    for (const auto& [sym, k] : d.terms) symbols.sizes.emplace(sym, 64);
  for (const auto& d : symbols.dims)
    if (d.dim == 0 && d.terms.size() == 1 && d.terms.begin()->second == 1 && d.offset == 0) symbols.sizes[d.terms.begin()->first] = 1;
  if (symbol_sizes_)
    for (auto& [sym, size] : symbols.sizes)
      if (auto it = symbol_sizes_->find(sym); it != symbol_sizes_->end()) size = it->second;
  for (const auto& d : symbols.dims) {
    auto& in = *std::find_if(graph_.inputs.begin(), graph_.inputs.end(), [&](const TensorInfo& t) { return t.name == d.input; });
    const int64_t size = d.size_at(symbols.sizes);
    if (size <= 0)
      throw Error(fmt::format("dim {} is {} where its names take the sizes tried ({})", d.dim, size,
                              fmt::join(symbols.sizes, ", ")), file_, {}, d.input);
    in.shape[d.dim] = size;
  }
  for (const auto& in : graph_.inputs) shapes_[in.name] = in.shape;
  if (symbols_out_) *symbols_out_ = symbols;
}

namespace {

/// The subgraphs a node holds (If's branches; Loop's and Scan's bodies).
std::vector<const onnx::GraphProto*> subgraphs(const onnx::NodeProto& p) {
  std::vector<const onnx::GraphProto*> out;
  for (const auto& a : p.attribute()) {
    if (a.has_g()) out.push_back(&a.g());
    for (const auto& g : a.graphs()) out.push_back(&g);
  }
  return out;
}

/// The names a node's subgraphs read from the scopes around them (their
/// implicit inputs), and every name they produce.
void subgraph_names(const onnx::NodeProto& p, std::set<std::string>& reads, std::set<std::string>& produced) {
  for (const onnx::GraphProto* g : subgraphs(p)) {
    std::set<std::string> own;
    for (const auto& t : g->initializer()) own.insert(t.name());
    for (const auto& i : g->input()) own.insert(i.name());
    for (const auto& node : g->node())
      for (const auto& o : node.output()) own.insert(o);
    std::set<std::string> inner_reads;
    for (const auto& node : g->node()) {
      for (const auto& i : node.input()) inner_reads.insert(i);
      subgraph_names(node, inner_reads, own);
    }
    for (const auto& o : g->output()) inner_reads.insert(o.name());
    for (const auto& r : inner_reads)
      if (!r.empty() && !own.count(r)) reads.insert(r);
    produced.insert(own.begin(), own.end());
  }
}

}  // namespace

/// Sorts the nodes topologically (ONNX asks exporters to, not every one does)
/// and checks that every tensor is produced once and every input exists.
/// A node with subgraphs depends on the names they read from outside too.
void Importer::order_nodes() {
  const int n = g_.node_size();
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < n; ++i)
    for (const auto& o : g_.node(i).output()) {
      if (o.empty()) continue;
      if (constants_.count(o) || shapes_.count(o) || !producer.emplace(o, i).second)
        throw Error(fmt::format("tensor '{}' is produced twice", o), file_, g_.node(i).name(), "output");
    }
  std::vector<int> indegree(static_cast<std::size_t>(n));
  std::vector<std::vector<int>> next(static_cast<std::size_t>(n));
  std::set<std::string> subgraph_produced;
  for (int i = 0; i < n; ++i) {
    std::set<std::string> outer;
    subgraph_names(g_.node(i), outer, subgraph_produced);
    std::vector<std::string> reads(g_.node(i).input().begin(), g_.node(i).input().end());
    reads.insert(reads.end(), outer.begin(), outer.end());
    for (const auto& in : reads) {
      if (in.empty() || constants_.count(in) || shapes_.count(in)) continue;
      auto it = producer.find(in);
      if (it == producer.end())
        throw Error(fmt::format("input '{}' is produced by no node, initializer or graph input", in), file_,
                    g_.node(i).name(), "input");
      ++indegree[static_cast<std::size_t>(i)];
      next[static_cast<std::size_t>(it->second)].push_back(i);
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;  // stable: file order where possible
  for (int i = 0; i < n; ++i)
    if (indegree[static_cast<std::size_t>(i)] == 0) ready.push(i);
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    nodes_.push_back(&g_.node(i));
    for (int j : next[static_cast<std::size_t>(i)])
      if (--indegree[static_cast<std::size_t>(j)] == 0) ready.push(j);
  }
  if (static_cast<int>(nodes_.size()) != n) throw Error("the graph has a cycle", file_, {}, "node");

  for (int i = 0; i < n; ++i) {
    const auto& p = *nodes_[static_cast<std::size_t>(i)];
    for (const auto& o : p.output())
      if (!o.empty()) producers_[o] = i;
    for (const auto& in : p.input())
      if (!in.empty()) consumers_[in].push_back(i);
  }
  for (const auto& o : g_.output()) {
    if (o.name().empty()) throw Error("a graph output has no name", file_, {}, "output");
    graph_outputs_.insert(o.name());
  }
  for (int i = 0; i < n; ++i) node_names_.insert(node(i).name);
  // Every name in the model is taken, so names the importer makes up never clash.
  for (const auto& [k, v] : constants_) taken_blobs_.insert(k);
  for (const auto& [k, v] : shapes_) taken_blobs_.insert(k);
  for (const auto& [k, v] : producers_) taken_blobs_.insert(k);
  taken_blobs_.insert(subgraph_produced.begin(), subgraph_produced.end());
}

Node Importer::node(int i) const {
  const auto& p = at(i);
  auto it = opsets_.find(p.domain() == "ai.onnx" ? "" : p.domain());
  std::string name = p.name().empty() ? fmt::format("{}_{}", p.op_type(), i) : p.name();
  return Node(p, std::move(name), it == opsets_.end() ? 0 : it->second, file_);
}

std::string Importer::fresh_blob(const std::string& base) {
  std::string name = base;
  for (int k = 1; !taken_blobs_.insert(name).second; ++k) name = fmt::format("{}_{}", base, k);
  return name;
}

std::string Importer::fresh_layer(const std::string& base, bool node_layer) {
  // A layer named after a node keeps the node's name; others (constants) avoid every node's name.
  auto free = [&](const std::string& n) { return !taken_layers_.count(n) && (node_layer || !node_names_.count(n)); };
  std::string name = base;
  for (int k = 1; !free(name); ++k) name = fmt::format("{}_{}", base, k);
  taken_layers_.insert(name);
  return name;
}

std::string Importer::as_blob(const Node& n, const std::string& name) {
  if (shapes_.count(name)) return name;
  if (!constant(name)) throw n.error(fmt::format("tensor '{}' is not computed before this node", name), "input");
  materialize(name);
  return name;
}

void Importer::materialize(const std::string& name) {
  if (size_dependent(name)) {
    plan_value(name);
    return;
  }
  // First use of a constant as a blob: it gets a constant layer (float32, what layers read).
  const Blob* c = constant(name);
  Layer l;
  l.type = "constant";
  l.name = fresh_layer(name, false);
  l.outputs = {name};
  l.weights["value"] = to_float(*c);
  add(std::move(l));
}

std::string Importer::add_constant(const std::string& base, const Blob& value) {
  std::string name = fresh_blob(base);
  constants_[name] = value;
  return name;
}

void Importer::add(Layer l) {
  std::vector<Shape> ins;
  for (const auto& i : l.inputs) ins.push_back(shapes_.at(i));
  std::vector<Shape> outs = core::infer_layer_shapes(l, ins);
  for (std::size_t k = 0; k < outs.size(); ++k) shapes_[l.outputs[k]] = outs[k];
  graph_.layers.push_back(std::move(l));
}

void Importer::reshape_to(const Node& n, const std::string& x, const Shape& shape, const std::string& y) {
  if (const Blob* c = constant(x)) {
    constants_[y] = reshaped(*c, shape);
    return;
  }
  add_unary(n, "reshape", as_blob(n, x), y, {{"shape", shape.to_vector()}});
}

void Importer::slice_blob(const Node& n, const std::string& x, int axis, int64_t begin, int64_t end,
                          const std::string& y) {
  const int64_t dim = shape_of(n, x)[axis];
  if (begin == 0 && end == dim) {
    add_unary(n, "identity", as_blob(n, x), y);
    return;
  }
  // split into [0,begin) [begin,end) [end,dim), leaving out empty parts.
  std::vector<int64_t> sizes;
  std::vector<std::string> outs;
  if (begin > 0) {
    sizes.push_back(begin);
    outs.push_back(fresh_blob(y + "/before"));
  }
  sizes.push_back(end - begin);
  outs.push_back(y);
  if (end < dim) {
    sizes.push_back(dim - end);
    outs.push_back(fresh_blob(y + "/after"));
  }
  Layer l = make("split", n.name, {as_blob(n, x)}, outs);
  l.params["axis"] = int64_t{axis};
  l.params["split"] = sizes;
  add(std::move(l));
}

// ---------------------------------------------------------------------------
// Patterns

void Importer::find_patterns() {
  fused_of_.assign(nodes_.size(), -1);
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    if (fused_of_[static_cast<std::size_t>(i)] >= 0) continue;
    std::optional<Fused> f;
    if (is(i, "Erf")) f = match_gelu(i);
    else if (is(i, "Tanh")) f = match_gelu_tanh(i);
    else if (is(i, "ReduceMean")) f = match_layernorm(i);
    else if (is(i, "Clip")) f = match_hardswish(i);
    if (!f) continue;
    bool free = std::all_of(f->members.begin(), f->members.end(), [&](int m) { return fused_of_[static_cast<std::size_t>(m)] < 0; });
    if (!free) continue;
    for (int m : f->members) fused_of_[static_cast<std::size_t>(m)] = static_cast<int>(fused_.size());
    fused_.push_back(std::move(*f));
  }
}

/// x*0.5*(1+Erf(x/sqrt(2))) in the orders exporters write it:
///   Mul(Mul(x, 1+erf), 0.5)   (PyTorch),  Mul(Mul(x, 0.5), 1+erf)  (x*0.5*(...)),
///   Mul(x, Mul(1+erf, 0.5)),  with x/sqrt(2) as Div(x, 1.414..) or Mul(x, 0.707..).
std::optional<Fused> Importer::match_gelu(int e) {
  const std::string h = at(e).input_size() == 1 ? input_of(e, 0) : std::string();
  const int d = producer(h);
  if (sole_consumer(h) != e || at(e).output_size() != 1) return std::nullopt;
  std::string x;
  if (is(d, "Div") && at(d).input_size() == 2 && scalar(input_of(d, 1)) && near(*scalar(input_of(d, 1)), std::sqrt(2.0)))
    x = input_of(d, 0);
  else if (is(d, "Mul") && at(d).input_size() == 2)
    for (int k = 0; k < 2; ++k)
      if (auto v = scalar(input_of(d, k)); v && near(*v, 1 / std::sqrt(2.0))) x = input_of(d, 1 - k);
  if (x.empty()) return std::nullopt;

  Fused f{Fused::gelu, {d, e}, x, {}, {}, 0, {}, {}};
  if (!match_gelu_tail(output_of(e, 0), f)) return std::nullopt;
  return f;
}

/// The end both GELU forms share, from `t` (Erf's or Tanh's output): Add(t, 1),
/// then times x and 0.5 in the orders exporters write, Mul(Mul(x, 1+t), 0.5),
/// Mul(x, Mul(1+t, 0.5)) or Mul(Mul(x, 0.5), 1+t) (GPT-2's). Adds those nodes
/// to f.members and sets f.y; false where they are not there.
bool Importer::match_gelu_tail(const std::string& t, Fused& f) const {
  const std::string& x = f.x;
  const int a = sole_consumer(t);
  if (!is(a, "Add")) return false;
  auto one = scalar(other_input(a, t));
  if (!one || !near(*one, 1.0)) return false;
  const std::string ao = output_of(a, 0);
  const int m1 = sole_consumer(ao);
  if (!is(m1, "Mul")) return false;
  const std::string other = other_input(m1, ao);
  auto is_half = [&](const std::string& h) { auto v = scalar(h); return v && near(*v, 0.5); };
  f.members.insert(f.members.end(), {a, m1});
  if (other == x || is_half(other)) {  // Mul(Mul(x, 1+t), 0.5) or Mul(x, Mul(1+t, 0.5))
    const int m2 = sole_consumer(output_of(m1, 0));
    if (!is(m2, "Mul")) return false;
    const std::string rest = other_input(m2, output_of(m1, 0));
    if (other == x ? !is_half(rest) : rest != x) return false;
    f.members.push_back(m2);
    f.y = output_of(m2, 0);
  } else {  // Mul(Mul(x, 0.5), 1+t)
    const int hx = producer(other);
    if (!is(hx, "Mul") || sole_consumer(other) != m1 || !is_half(other_input(hx, x))) return false;
    f.members.push_back(hx);
    f.y = output_of(m1, 0);
  }
  return true;
}

/// GELU's tanh form, 0.5*x*(1+Tanh(sqrt(2/pi)*(x+0.044715*x^3))) (GPT-2's
/// "gelu_new", 8 nodes a block), with x^3 as Pow(x, 3) or Mul(Mul(x, x), x) and
/// the factors in either order; the outer product in the orders match_gelu takes.
std::optional<Fused> Importer::match_gelu_tanh(int t) {
  if (at(t).input_size() != 1 || at(t).output_size() != 1) return std::nullopt;
  auto scalar_near = [&](const std::string& name, double v) { auto s = scalar(name); return s && near(*s, v); };
  // Mul(inner, sqrt(2/pi)) -> Tanh
  const std::string k_out = input_of(t, 0);
  const int k = producer(k_out);
  if (!is(k, "Mul") || at(k).input_size() != 2 || sole_consumer(k_out) != t) return std::nullopt;
  std::string inner;
  for (int j = 0; j < 2; ++j)
    if (scalar_near(input_of(k, j), std::sqrt(2.0 / 3.14159265358979323846))) inner = input_of(k, 1 - j);
  // Add(x, Mul(cube, 0.044715))
  const int a0 = producer(inner);
  if (inner.empty() || !is(a0, "Add") || at(a0).input_size() != 2 || sole_consumer(inner) != k) return std::nullopt;
  std::vector<int> members = {a0, k, t};
  std::string x;
  for (int j = 0; j < 2 && x.empty(); ++j) {
    const std::string m_out = input_of(a0, j), cand = input_of(a0, 1 - j);
    const int m = producer(m_out);
    if (!is(m, "Mul") || at(m).input_size() != 2 || sole_consumer(m_out) != a0) continue;
    for (int i = 0; i < 2 && x.empty(); ++i) {
      if (!scalar_near(input_of(m, i), 0.044715)) continue;
      const std::string cube = input_of(m, 1 - i);
      const int c = producer(cube);
      if (sole_consumer(cube) != m) continue;
      if (is(c, "Pow") && at(c).input_size() == 2 && input_of(c, 0) == cand && scalar_near(input_of(c, 1), 3.0)) {
        members.insert(members.end(), {m, c});
        x = cand;
      } else if (is(c, "Mul") && at(c).input_size() == 2) {  // Mul(Mul(x, x), x) in either order
        for (int q = 0; q < 2 && x.empty(); ++q) {
          const std::string sq = input_of(c, q);
          const int s2 = producer(sq);
          if (input_of(c, 1 - q) == cand && is(s2, "Mul") && sole_consumer(sq) == c && input_of(s2, 0) == cand &&
              input_of(s2, 1) == cand) {
            members.insert(members.end(), {m, c, s2});
            x = cand;
          }
        }
      }
    }
  }
  if (x.empty()) return std::nullopt;
  Fused f{Fused::gelu_tanh, members, x, {}, {}, 0, {}, {}};
  if (!match_gelu_tail(output_of(t, 0), f)) return std::nullopt;
  return f;
}

/// x * clip(x + 3, 0, 6) / 6 as Paddle and older exporters spell HardSwish:
///   Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)  or  Mul(..., 1/6),  or the division
///   before the product: Mul(x, Div(Clip(Add(x, 3), 0, 6), 6)).
/// One hardswish layer, which fuses into the convolution before it (the
/// PP-OCRv4 recogniser has 28: 84 elementwise layers fewer).
std::optional<Fused> Importer::match_hardswish(int c) {
  const Node clip = node(c);
  auto bound = [&](int k, const char* attr) -> std::optional<double> {
    if (at(c).input_size() > k && !input_of(c, k).empty()) return scalar(input_of(c, k));
    if (clip.has(attr)) return clip.get_float(attr);
    return std::nullopt;
  };
  const auto lo = bound(1, "min"), hi = bound(2, "max");
  if (!lo || !hi || *lo != 0.0 || !near(*hi, 6.0) || at(c).output_size() != 1) return std::nullopt;
  const std::string shifted = input_of(c, 0);
  const int a = producer(shifted);
  if (!is(a, "Add") || at(a).input_size() != 2 || sole_consumer(shifted) != c) return std::nullopt;
  std::string x;
  for (int k = 0; k < 2; ++k)
    if (auto v = scalar(input_of(a, k)); v && near(*v, 3.0)) x = input_of(a, 1 - k);
  if (x.empty()) return std::nullopt;
  // Division by 6 (or product with 1/6) of `t`, its sole reader: that node, or -1.
  auto sixth = [&](const std::string& t) {
    const int d = sole_consumer(t);
    if (is(d, "Div") && at(d).input_size() == 2 && input_of(d, 0) == t) {
      if (auto v = scalar(input_of(d, 1)); v && near(*v, 6.0)) return d;
    } else if (is(d, "Mul") && at(d).input_size() == 2) {
      if (auto v = scalar(other_input(d, t)); v && near(*v, 1.0 / 6.0)) return d;
    }
    return -1;
  };
  const std::string clipped = output_of(c, 0);
  const int m = sole_consumer(clipped);
  if (is(m, "Mul") && at(m).input_size() == 2 && other_input(m, clipped) == x) {  // (x * clip) / 6
    const int d = sixth(output_of(m, 0));
    if (d < 0) return std::nullopt;
    return Fused{Fused::hardswish, {a, c, m, d}, x, output_of(d, 0), {}, 0, {}, {}};
  }
  const int d = sixth(clipped);  // x * (clip / 6)
  if (d < 0) return std::nullopt;
  const int m2 = sole_consumer(output_of(d, 0));
  if (!is(m2, "Mul") || at(m2).input_size() != 2 || other_input(m2, output_of(d, 0)) != x) return std::nullopt;
  return Fused{Fused::hardswish, {a, c, d, m2}, x, output_of(m2, 0), {}, 0, {}, {}};
}

/// The LayerNormalization exporters emit below opset 17:
///   m = ReduceMean(x); d = x - m; v = ReduceMean(Pow(d, 2)); y = d / Sqrt(v + eps)
///   [y = y * scale] [y = y + bias]   (scale and bias constants).
std::optional<Fused> Importer::match_layernorm(int r1) {
  auto axes_of = [&](int r) -> std::optional<std::vector<int64_t>> {
    const Node n = node(r);
    if (n.get_int("keepdims", 1) != 1 || n.num_inputs() != 1) return std::nullopt;
    auto axes = n.get_ints("axes", std::vector<int64_t>{});
    if (axes.empty()) return std::nullopt;
    return axes;
  };
  const auto axes = axes_of(r1);
  if (!axes) return std::nullopt;
  const std::string x = input_of(r1, 0), mean = output_of(r1, 0);
  const int s = sole_consumer(mean);
  if (!is(s, "Sub") || input_of(s, 0) != x || input_of(s, 1) != mean) return std::nullopt;
  const std::string d = output_of(s, 0);
  auto dc = consumers_.find(d);
  if (dc == consumers_.end() || dc->second.size() != 2 || graph_outputs_.count(d)) return std::nullopt;
  int p = -1, dv = -1;
  for (int c : dc->second) {
    if (is(c, "Pow") && input_of(c, 0) == d) p = c;
    if (is(c, "Div") && input_of(c, 0) == d) dv = c;
  }
  if (p < 0 || dv < 0) return std::nullopt;
  auto two = scalar(at(p).input_size() == 2 ? input_of(p, 1) : std::string());
  if (!two || *two != 2.0) return std::nullopt;
  const int r2 = sole_consumer(output_of(p, 0));
  if (!is(r2, "ReduceMean") || axes_of(r2) != axes) return std::nullopt;
  const int ad = sole_consumer(output_of(r2, 0));
  if (!is(ad, "Add")) return std::nullopt;
  auto eps = scalar(other_input(ad, output_of(r2, 0)));
  if (!eps) return std::nullopt;
  const int sq = sole_consumer(output_of(ad, 0));
  if (!is(sq, "Sqrt") || sole_consumer(output_of(sq, 0)) != dv || input_of(dv, 1) != output_of(sq, 0)) return std::nullopt;

  Fused f{Fused::layernorm, {r1, s, p, r2, ad, sq, dv}, x, output_of(dv, 0), *axes, *eps, {}, {}};
  // Optional affine part: a Mul and an Add by constants.
  if (int mu = sole_consumer(f.y); is(mu, "Mul")) {
    std::string c = other_input(mu, f.y);
    if (!c.empty() && constant(c)) {
      f.members.push_back(mu);
      f.scale = c;
      f.y = output_of(mu, 0);
    }
  }
  if (int ab = sole_consumer(f.y); is(ab, "Add")) {
    std::string c = other_input(ab, f.y);
    if (!c.empty() && constant(c)) {
      f.members.push_back(ab);
      f.bias = c;
      f.y = output_of(ab, 0);
    }
  }
  return f;
}

void Importer::emit_fused(const Fused& f) {
  const Node n = node(f.last());
  if (f.kind == Fused::gelu || f.kind == Fused::gelu_tanh) {
    add_unary(n, "gelu", as_blob(n, f.x), f.y, {{"approximate", std::string(f.kind == Fused::gelu ? "none" : "tanh")}});
    return;
  }
  if (f.kind == Fused::hardswish) {
    add_unary(n, "hardswish", as_blob(n, f.x), f.y);
    return;
  }
  const Shape xs = shape_of(n, f.x);
  const int rank = xs.rank();
  std::vector<int64_t> axes = f.axes;
  for (auto& a : axes) {
    if (a < -rank || a >= rank) throw n.error(fmt::format("axis {} out of range for rank {}", a, rank), "axes");
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int64_t>(axes.size() - i))
      throw Unsupported{"the decomposed LayerNormalization reduces axes that are not the last ones"};
  const int axis = static_cast<int>(axes[0]);
  Shape norm;
  for (int i = axis; i < rank; ++i) norm.push_back(xs[i]);
  // scale/bias fold into the layer when they only vary over the normalised dims.
  auto per_norm = [&](const std::string& t) -> std::optional<Blob> {
    const Blob& c = *constant(t);
    if (c.shape().rank() > rank) return std::nullopt;
    for (int d = 0; d < c.shape().rank(); ++d)
      if (d + rank - c.shape().rank() < axis && c.shape()[d] != 1) return std::nullopt;
    try {
      Blob e = expanded(to_float(c), norm);
      if (e.shape() != norm) return std::nullopt;
      return e;
    } catch (const Error&) {
      return std::nullopt;
    }
  };
  const Blob ones = expanded(float_blob({}, {1.0f}), norm);
  std::optional<Blob> scale = f.scale.empty() ? std::optional<Blob>(ones) : per_norm(f.scale);
  const bool mul_after = !scale;  // a scale that does not fold stays a mul layer...
  std::optional<Blob> bias = f.bias.empty() || mul_after ? std::nullopt : per_norm(f.bias);
  const bool add_after = !f.bias.empty() && !bias;  // ...and so does the bias after it
  const std::string ln_out = mul_after || add_after ? fresh_blob(f.y + "/norm") : f.y;
  Layer l = make("layernorm", n.name, {as_blob(n, f.x)}, {ln_out});
  l.params["axis"] = int64_t{axis};
  l.params["epsilon"] = f.epsilon;
  l.weights["scale"] = scale ? *scale : ones;
  if (bias) l.weights["bias"] = *bias;
  add(std::move(l));
  std::string cur = ln_out;
  if (mul_after) {
    const std::string next = add_after ? fresh_blob(f.y + "/scaled") : f.y;
    add(make("mul", n.name + "/scale", {cur, as_blob(n, f.scale)}, {next}));
    cur = next;
  }
  if (add_after) add(make("add", n.name + "/bias", {cur, as_blob(n, f.bias)}, {f.y}));
}

// ---------------------------------------------------------------------------
// Converters

std::vector<int64_t> Importer::window_pads(const Node& n, const Shape& x, const std::vector<int64_t>& kernel,
                                           const std::vector<int64_t>& strides,
                                           const std::vector<int64_t>& dilations) const {
  const std::string mode = n.get_string("auto_pad", "NOTSET");
  const std::size_t spatial = kernel.size();
  if (mode == "NOTSET") {
    // ONNX [h_begin, w_begin, h_end, w_end] = ours (and [d_begin, h_begin, w_begin, d_end, ...] in 3-D)
    auto pads = n.get_ints_n("pads", 2 * spatial, std::vector<int64_t>(2 * spatial, 0));
    for (auto p : pads)
      if (p < 0) throw n.error("negative pads", "pads");
    return pads;
  }
  if (mode == "VALID") return std::vector<int64_t>(2 * spatial, 0);
  if (mode != "SAME_UPPER" && mode != "SAME_LOWER") throw n.error(fmt::format("unknown auto_pad '{}'", mode), "auto_pad");
  // SAME: output = ceil(input / stride); the odd pad goes at the end (UPPER) or the beginning (LOWER).
  std::vector<int64_t> pads(2 * spatial);
  for (std::size_t i = 0; i < spatial; ++i) {
    const int64_t in = x[2 + static_cast<int>(i)], s = strides[i];
    const int64_t k = (kernel[i] - 1) * dilations[i] + 1;
    const int64_t out = (in + s - 1) / s;
    const int64_t total = std::max<int64_t>(0, (out - 1) * s + k - in);
    const int64_t small = total / 2, large = total - small;
    pads[i] = mode == "SAME_UPPER" ? small : large;
    pads[i + spatial] = mode == "SAME_UPPER" ? large : small;
  }
  return pads;
}

namespace {

/// The window attributes Conv and ConvTranspose share, checked against the weight.
struct ConvAttrs {
  std::vector<int64_t> kernel, strides, dilations;
};

ConvAttrs conv_attrs(const Node& n, const Shape& xs, const Blob& w) {
  if (xs.rank() != 4 || w.shape().rank() != 4)
    throw Unsupported{fmt::format("only 2-D {} (input {}, weight {})", n.op() == "ConvTranspose" ? "transposed convolutions" : "convolutions",
                                  xs.to_string(), w.shape().to_string())};
  ConvAttrs a;
  a.kernel = n.get_ints_n("kernel_shape", 2, {w.shape()[2], w.shape()[3]});
  if (a.kernel[0] != w.shape()[2] || a.kernel[1] != w.shape()[3])
    throw n.error(fmt::format("kernel_shape [{}] differs from the weight's {}", fmt::join(a.kernel, ","), w.shape().to_string()), "kernel_shape");
  a.strides = n.get_ints_n("strides", 2, {1, 1});
  a.dilations = n.get_ints_n("dilations", 2, {1, 1});
  return a;
}

}  // namespace

void Importer::as_2d(const Node& n, Converter convert) {
  onnx::NodeProto p = n.proto();
  const Shape xs = shape_of(n, n.in(0));
  const std::string x2 = fresh_blob(n.in(0) + "/2d");
  if (const Blob* c = constant(n.in(0))) constants_[x2] = reshaped(*c, Shape{xs[0], xs[1], 1, xs[2]});
  else add_unary(n, "reshape", input(n, 0), x2, {{"shape", std::vector<int64_t>{xs[0], xs[1], 1, xs[2]}}}, "to_2d");
  p.set_input(0, x2);
  if (n.op() == "Conv" || n.op() == "ConvTranspose") {
    const Blob& w = require_constant(n, 1, "W");
    if (w.shape().rank() != 3) throw n.error(fmt::format("weight {} of a 1-D {} is not 3-D", w.shape().to_string(), n.op()), "W");
    const std::string w2 = fresh_blob(n.in(1) + "/2d");
    constants_[w2] = reshaped(w, Shape{w.shape()[0], w.shape()[1], 1, w.shape()[2]});
    if (auto t = onnx_types_.find(n.in(1)); t != onnx_types_.end()) onnx_types_[w2] = t->second;
    p.set_input(1, w2);
  }
  for (auto& a : *p.mutable_attribute()) {
    if (a.type() != onnx::AttributeProto::INTS) continue;
    std::vector<int64_t> v(a.ints().begin(), a.ints().end());
    const std::string& key = a.name();
    if (key == "kernel_shape" || key == "dilations" || key == "strides") v.insert(v.begin(), 1);
    else if (key == "pads" && v.size() == 2) v = {0, v[0], 0, v[1]};
    else if (key == "output_padding") v.insert(v.begin(), 0);
    else if (key == "output_shape") v.insert(v.begin(), 1);
    else continue;
    a.clear_ints();
    for (int64_t e : v) a.add_ints(e);
  }
  std::vector<std::string> outs;
  for (int k = 0; k < p.output_size(); ++k) {
    outs.push_back(p.output(k));
    if (!p.output(k).empty()) p.set_output(k, fresh_blob(p.output(k) + "/2d"));
  }
  const Node n2(p, n.name, n.opset, file_);
  (this->*convert)(n2);
  for (int k = 0; k < p.output_size(); ++k) {
    if (outs[static_cast<std::size_t>(k)].empty() || !shapes_.count(p.output(k))) continue;
    Shape ys = shape_of(n2, p.output(k));
    add_unary(n, "reshape", p.output(k), outs[static_cast<std::size_t>(k)], {{"shape", std::vector<int64_t>{ys[0], ys[1], ys[3]}}},
              k == 0 ? "to_1d" : fmt::format("to_1d_{}", k));
  }
}

void Importer::conv(const Node& n) {
  const Blob& w = require_constant(n, 1, "W");
  Layer l = conv2_layer(n, n.name, input(n, 0), n.out(0), to_float(w));
  if (n.has_in(2)) l.weights["bias"] = to_float(require_constant(n, 2, "B"));
  add(std::move(l));
}

Layer Importer::conv2_layer(const Node& n, const std::string& name, const std::string& x, const std::string& y, Blob w) {
  const Shape xs = shape_of(n, n.in(0));
  const auto [kernel, strides, dilations] = conv_attrs(n, xs, w);
  Layer l = make("conv2", name, {x}, {y});
  l.params["strides"] = strides;
  l.params["dilations"] = dilations;
  l.params["group"] = n.get_int("group", 1);
  l.params["pads"] = window_pads(n, xs, kernel, strides, dilations);
  l.weights["weight"] = std::move(w);
  return l;
}

// DeformConv (2-D): conv2's geometry, each tap shifted by its offset (layer deform_conv).
void Importer::deform_conv(const Node& n) {
  Layer l = conv2_layer(n, n.name, input(n, 0), n.out(0), to_float(require_constant(n, 1, "W")));
  l.type = "deform_conv";
  l.inputs.push_back(input(n, 2));
  if (n.has_in(3)) l.weights["bias"] = to_float(require_constant(n, 3, "B"));
  if (n.has_in(4)) l.inputs.push_back(input(n, 4));
  l.params["offset_group"] = n.get_int("offset_group", 1);
  add(std::move(l));
}

// ConvTranspose (2-D): weight [C, O/group, KH, KW]; pads from pads, auto_pad or output_shape.
void Importer::conv_transpose(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const Blob& w = require_constant(n, 1, "W");
  const auto [kernel, strides, dilations] = conv_attrs(n, xs, w);
  auto output_padding = n.get_ints_n("output_padding", 2, {0, 0});
  std::vector<int64_t> pads = n.get_ints_n("pads", 4, {0, 0, 0, 0});
  const std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  const bool given_shape = n.has("output_shape");
  if (given_shape || (auto_pad != "NOTSET" && auto_pad != "VALID")) {
    // The ONNX rule: total padding = stride*(in-1) + output_padding + (k-1)*d + 1 - out,
    // split evenly, the odd one at the end for SAME_UPPER and at the begin otherwise.
    std::vector<int64_t> out(2);
    if (given_shape) {
      out = n.get_ints("output_shape");
      if (out.size() == 4) out = {out[2], out[3]};
      if (out.size() != 2) throw n.error("expected 2 (or 4) dims", "output_shape");
    } else {
      out = {xs[2] * strides[0], xs[3] * strides[1]};
    }
    for (int i = 0; i < 2; ++i) {
      const auto iu = static_cast<std::size_t>(i);
      int64_t total = strides[iu] * (xs[2 + i] - 1) + output_padding[iu] + (kernel[iu] - 1) * dilations[iu] + 1 - out[iu];
      if (total < 0) {  // a larger output than the kernel covers: output_padding makes up the rest
        output_padding[iu] -= total;
        total = 0;
      }
      pads[iu] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[iu + 2] = total - pads[iu];
    }
  } else if (auto_pad == "VALID") {
    pads = {0, 0, 0, 0};
  }
  Layer l = make("deconv2", n.name, {input(n, 0)}, {n.out(0)});
  l.weights["weight"] = to_float(w);
  if (n.has_in(2)) l.weights["bias"] = to_float(require_constant(n, 2, "B"));
  l.params["strides"] = strides;
  l.params["dilations"] = dilations;
  l.params["group"] = n.get_int("group", 1);
  l.params["pads"] = pads;
  if (output_padding != std::vector<int64_t>{0, 0}) l.params["output_padding"] = output_padding;
  add(std::move(l));
}

// LSTM and GRU: weights W, R, B, P become the layer's; initial states stay
// inputs (constants get their constant layers); sequence_lens must cover every
// sequence whole (a constant equal to the sequence length), as exporters write it.
void Importer::rnn(const Node& n) {
  const bool lstm = n.op() == "LSTM", simple = n.op() == "RNN";
  const int gates = lstm ? 4 : simple ? 1 : 3;
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 3) throw n.error(fmt::format("X must be rank 3, it is {}", xs.to_string()), "X");
  const int64_t layout = n.opset >= 14 ? n.get_int("layout", 0) : 0;
  if (layout != 0 && layout != 1) throw n.error(fmt::format("layout {} is not 0 or 1", layout), "layout");
  const int64_t seq = layout ? xs[1] : xs[0];
  const std::string direction = n.get_string("direction", "forward");
  const Blob& w = require_constant(n, 1, "W");
  const int64_t hidden = n.get_int("hidden_size", w.shape().rank() == 3 ? w.shape()[1] / gates : 0);
  // Only the default activations: sigmoid for the gates, tanh elsewhere.
  if (n.has("activations")) {
    const auto* a = n.attr("activations");
    const std::vector<std::string> plain = lstm     ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                           : simple ? std::vector<std::string>{"Tanh"}
                                                    : std::vector<std::string>{"Sigmoid", "Tanh"};
    for (int i = 0; i < a->strings_size(); ++i)
      if (a->strings(i) != plain[static_cast<std::size_t>(i) % plain.size()])
        throw Unsupported{fmt::format("{} with activation {} (only {} are supported)", n.op(), a->strings(i),
                                      fmt::join(plain, ", "))};
  }
  if (n.has_in(4)) {
    const Blob* lens = constant(n.in(4));
    if (!lens) throw Unsupported{fmt::format("{} with sequence_lens computed at run time", n.op())};
    for (int64_t v : to_ints(*lens))
      if (v != seq)
        throw Unsupported{fmt::format("{} with sequence_lens {} shorter than the sequence ({}): padded batches", n.op(), v, seq)};
  }
  std::vector<std::string> inputs{input(n, 0)};
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t batch = layout ? xs[0] : xs[1];
  const Shape state = layout ? Shape{batch, dirs, hidden} : Shape{dirs, batch, hidden};
  auto zeros = [&](const std::string& what) {
    return as_blob(n, add_constant(n.name + "/" + what, float_blob(state, std::vector<float>(static_cast<std::size_t>(state.numel()), 0.0f))));
  };
  const bool has_c = lstm && n.has_in(6);
  if (n.has_in(5) || has_c) inputs.push_back(n.has_in(5) ? input(n, 5) : zeros("initial_h"));
  if (has_c) inputs.push_back(input(n, 6));
  std::vector<std::string> outputs;
  for (int k = 0; k < (lstm ? 3 : 2); ++k) outputs.push_back(output(n, k));
  Layer l = make(lstm ? "lstm" : simple ? "rnn" : "gru", n.name, std::move(inputs), std::move(outputs));
  l.weights["W"] = to_float(w);
  l.weights["R"] = to_float(require_constant(n, 2, "R"));
  if (n.has_in(3)) l.weights["B"] = to_float(require_constant(n, 3, "B"));
  if (lstm && n.has_in(7)) l.weights["P"] = to_float(require_constant(n, 7, "P"));
  l.params["hidden_size"] = hidden;
  l.params["direction"] = direction;
  if (layout) l.params["layout"] = layout;
  if (n.has("clip")) l.params["clip"] = n.get_float("clip");
  if (lstm && n.get_int("input_forget", 0) != 0) l.params["input_forget"] = int64_t{1};
  if (!lstm && !simple && n.get_int("linear_before_reset", 0) != 0) l.params["linear_before_reset"] = int64_t{1};
  add(std::move(l));
}

// InstanceNormalization (a group per channel) and GroupNormalization (opset 18:
// scale and bias per group, given to each of the group's channels).
void Importer::group_norm(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() < 3) throw n.error(fmt::format("input must be [N,C,...] with positions, it is {}", xs.to_string()), "input");
  const int64_t c = xs[1];
  const bool instance = n.op() == "InstanceNormalization";
  const int64_t groups = instance ? c : n.get_int("num_groups");
  if (groups <= 0 || c % groups != 0) throw n.error(fmt::format("{} groups do not divide {} channels", groups, c), "num_groups");
  auto per_channel = [&](int k, const char* field) {
    Blob v = to_float(require_constant(n, k, field));
    if (v.numel() == c) return reshaped(v, Shape{c});
    if (!instance && v.numel() == groups) {  // opset 18's per-group form
      std::vector<float> out(static_cast<std::size_t>(c));
      for (int64_t ch = 0; ch < c; ++ch) out[static_cast<std::size_t>(ch)] = v.data_as<float>()[ch / (c / groups)];
      return float_blob(Shape{c}, out);
    }
    throw n.error(fmt::format("{} has {} values for {} channels in {} groups", field, v.numel(), c, groups), field);
  };
  Layer l = make("group_norm", n.name, {input(n, 0)}, {n.out(0)});
  l.params["groups"] = groups;
  l.params["epsilon"] = n.get_float("epsilon", 1e-5);
  l.weights["scale"] = per_channel(1, "scale");
  l.weights["bias"] = per_channel(2, instance ? "B" : "bias");
  add(std::move(l));
}

// Tile: a constant is tiled at import; a blob becomes a concat of its copies
// along each tiled axis (repeats must be constant).
void Importer::tile(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const auto repeats = constant_ints(n, 1, "repeats");
  if (static_cast<int>(repeats.size()) != xs.rank())
    throw n.error(fmt::format("{} repeats for a rank-{} input", repeats.size(), xs.rank()), "repeats");
  int64_t total = 1;
  for (int64_t r : repeats) {
    if (r < 1) throw n.error(fmt::format("repeat {} is not a positive count", r), "repeats");
    if (r > 4096 || (total *= r) > 4096) throw Unsupported{fmt::format("Tile by {} in all (at most 4096 copies)", total)};
  }
  if (const Blob* cst = constant(n.in(0))) {
    try {
      check_folded_growth(Shape{cst->numel() * total}, cst->dtype(), cst->byte_size());
    } catch (const Error& e) {
      throw n.error(e.message(), "repeats");
    }
    Blob cur = *cst;
    for (int axis = 0; axis < xs.rank(); ++axis)
      if (repeats[static_cast<std::size_t>(axis)] > 1)
        cur = concatenated(std::vector<Blob>(static_cast<std::size_t>(repeats[static_cast<std::size_t>(axis)]), cur), axis);
    constants_[n.out(0)] = cur;
    return;
  }
  std::string cur = input(n, 0);
  int last = -1;
  for (int axis = 0; axis < xs.rank(); ++axis)
    if (repeats[static_cast<std::size_t>(axis)] > 1) last = axis;
  if (last < 0) return add_unary(n, "identity", cur, n.out(0));
  for (int axis = 0; axis <= last; ++axis) {
    const int64_t r = repeats[static_cast<std::size_t>(axis)];
    if (r == 1) continue;
    const std::string next = axis == last ? n.out(0) : fresh_blob(fmt::format("{}/tile{}", n.out(0), axis));
    Layer l = make("concat", fmt::format("{}/axis{}", n.name, axis), std::vector<std::string>(static_cast<std::size_t>(r), cur), {next});
    l.params["axis"] = int64_t{axis};
    add(std::move(l));
    cur = next;
  }
}

// ---------------------------------------------------------------------------
// Quantised ONNX. A quantised tensor is held as its real values (a float blob
// made by a fake_quant layer, whose quantisation the qint8 routines then use:
// core::record_model_quantisation), so QDQ pairs, QLinearConv and QLinearMatMul compute
// what ONNX Runtime computes, and tuning with qint8 schemas runs them on our
// int8 routines with the model's own scales. Quantised weights are dequantised
// at import. DynamicQuantizeLinear's integers are held as floats with their
// run-time scale and zero point; ConvInteger and MatMulInteger subtract the
// zero points and run as float convolutions and products (exact integers).

Importer::QParams Importer::qparams(const Node& n, int scale_k, int zp_k, const char* what, bool int32) {
  QParams q;
  for (double v : to_doubles(require_constant(n, scale_k, "scale"))) {
    if (!core::quant_scale_in_range(v))
      throw n.error(fmt::format("{} scale {} lies outside [1e-30, 1e30]", what, v), "scale");
    q.scales.push_back(static_cast<float>(v));
  }
  if (q.scales.empty()) throw n.error(fmt::format("{} has no scale", what), "scale");
  int type = onnx::TensorProto::UINT8;
  if (n.has_in(zp_k)) {
    q.zero_points = constant_ints(n, zp_k, "zero_point");
    auto t = onnx_types_.find(n.in(zp_k));
    if (t != onnx_types_.end()) type = t->second;
  }
  q.type = type;
  if (type == onnx::TensorProto::INT8) {
    q.qmin = -128;
    q.qmax = 127;
  } else if (type == onnx::TensorProto::UINT16) {
    q.qmax = 65535;
  } else if (type == onnx::TensorProto::INT16) {
    q.qmin = -32768;
    q.qmax = 32767;
  } else if (int32 && type == onnx::TensorProto::INT32) {
    q.qmin = std::numeric_limits<int32_t>::min();
    q.qmax = std::numeric_limits<int32_t>::max();
  } else if (narrow_dtype(type)) {
    set_narrow_type(q, type);
  } else if (type != onnx::TensorProto::UINT8) {
    throw Unsupported{fmt::format("{} with {} zero points (uint8, int8, uint16 and int16 are supported)", n.op(),
                                  onnx_type_name(type))};
  }
  if (q.zero_points.empty()) q.zero_points.assign(q.scales.size(), 0);
  if (q.float_type && std::any_of(q.zero_points.begin(), q.zero_points.end(), [](int64_t z) { return z != 0; }))
    throw n.error(fmt::format("a {} zero point must be 0", onnx_type_name(type)), "zero_point");
  q.saturate = n.get_int("saturate", 1) != 0;
  if (q.zero_points.size() != q.scales.size())
    throw n.error(fmt::format("{} zero points for {} scales", q.zero_points.size(), q.scales.size()), "zero_point");
  for (int64_t z : q.zero_points)
    if (z < q.qmin || z > q.qmax) throw n.error(fmt::format("zero point {} outside [{}, {}]", z, q.qmin, q.qmax), "zero_point");
  return q;
}

// int4 ... uint2: their integer range; float8, float4e2m1: values rounded onto the type.
void Importer::set_narrow_type(QParams& q, int type) {
  q.type = type;
  const DType narrow = *narrow_dtype(type);
  if (is_integer(narrow)) std::tie(q.qmin, q.qmax) = core::narrow_integer_range(narrow);
  else q.float_type = narrow;
}

core::FakeQuant Importer::per_tensor(const Node& n, const QParams& q, const char* what) const {
  if (q.float_type)
    throw Unsupported{fmt::format("{} with {} {} inside the net (integer quantisation only; float8 at graph outputs)", n.op(),
                                  onnx_type_name(q.type), what)};
  if (q.qmax - q.qmin > 255)
    throw Unsupported{fmt::format("{} with {} {} inside the net (8-bit quantisation; 16-bit at graph inputs and outputs)", n.op(),
                                  onnx_type_name(q.type), what)};
  if (q.scales.size() != 1)
    throw Unsupported{fmt::format("{} with {} quantised per axis ({} scales): activations are quantised per tensor", n.op(), what, q.scales.size())};
  core::FakeQuant f;
  f.scale = q.scales[0];
  f.zero_point = static_cast<int32_t>(q.zero_points[0]);
  f.qmin = static_cast<int32_t>(q.qmin);
  f.qmax = static_cast<int32_t>(q.qmax);
  return f;
}

void Importer::add_fake_quant(const Node& n, const std::string& x, const std::string& y, const core::FakeQuant& q) {
  Layer l = make("fake_quant", y == n.out(0) ? n.name : n.name + "/quantize", {x}, {y});
  l.params["scale"] = static_cast<double>(q.scale);
  l.params["zero_point"] = int64_t{q.zero_point};
  l.params["qmin"] = int64_t{q.qmin};
  l.params["qmax"] = int64_t{q.qmax};
  add(std::move(l));
  quantized_[y] = q;
}

void Importer::mark_int8_grid(Blob& w, const QParams& q, int axis, const std::string& source) const {
  // A symmetric int8 weight quantised per output channel (axis 0) or per
  // tensor: its values stay marked as the file's int8 grid (core::stored_as_int8),
  // so the .dnn stores them as int8 and no routine rounds them onto another grid.
  const auto t = onnx_types_.find(source);
  if (t == onnx_types_.end() || t->second != onnx::TensorProto::INT8 || w.shape().rank() < 1 || w.shape()[0] < 1) return;
  if (std::any_of(q.zero_points.begin(), q.zero_points.end(), [](int64_t z) { return z != 0; })) return;
  const int64_t channels = w.shape()[0];
  std::vector<float> scales;
  if (q.scales.size() == 1) scales.assign(static_cast<std::size_t>(channels), q.scales[0]);
  else if ((axis == 0 || axis == -w.shape().rank()) && static_cast<int64_t>(q.scales.size()) == channels) scales = q.scales;
  else return;
  if (!std::all_of(scales.begin(), scales.end(), [](float s) { return core::quant_scale_in_range(s); })) return;
  w.quant().scales = std::move(scales);
  w.quant().zero_points.clear();
  w.quant().axis = 0;
}

Blob Importer::dequantized(const Node& n, const Blob& v, const QParams& q, int axis, const char* what) const {
  const Shape& s = v.shape();
  if (q.scales.empty() || q.zero_points.size() != q.scales.size())
    throw n.error(fmt::format("{} has {} scales and {} zero points", what, q.scales.size(), q.zero_points.size()),
                  "zero_point");
  const std::vector<double> values = to_doubles(v);
  Blob out = Blob::allocate(s);
  int64_t inner = 1, dim = 1;
  if (q.scales.size() > 1) {
    if (axis < 0) axis += s.rank();
    if (axis < 0 || axis >= s.rank() || s[axis] != static_cast<int64_t>(q.scales.size()))
      throw n.error(fmt::format("{} scales along axis {} of {} {}", q.scales.size(), axis, what, s.to_string()), "axis");
    dim = s[axis];
    for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  }
  float* o = out.data_as<float>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto c = static_cast<std::size_t>(q.scales.size() > 1 ? static_cast<int64_t>(i) / inner % dim : 0);
    o[i] = static_cast<float>(values[i] - static_cast<double>(q.zero_points[c])) * q.scales[c];
  }
  return out;
}

void Importer::quantize_linear(const Node& n) {
  if (n.get_int("block_size", 0) != 0) throw Unsupported{"QuantizeLinear with block_size (blocked quantisation)"};
  QParams q = qparams(n, 1, 2, "y");
  if (!n.has_in(2) && n.has("output_dtype")) {  // opset 21: the type without a zero point
    const auto t = n.get_int("output_dtype");
    if (t == onnx::TensorProto::INT8) q.qmin = -128, q.qmax = 127;
    else if (t == onnx::TensorProto::UINT16) q.qmax = 65535;
    else if (t == onnx::TensorProto::INT16) q.qmin = -32768, q.qmax = 32767;
    else if (narrow_dtype(static_cast<int>(t))) set_narrow_type(q, static_cast<int>(t));
    else if (t != onnx::TensorProto::UINT8)
      throw Unsupported{fmt::format("QuantizeLinear to {} (uint8, int8, uint16, int16, int4, uint4, int2, uint2, float8 and "
                                    "float4e2m1 are supported)",
                                    onnx_type_name(t))};
    q.type = static_cast<int>(t);
  }
  const int axis = static_cast<int>(n.get_int("axis", 1));
  if (const Blob* c = constant(n.in(0))) {
    // A constant: quantised now, held as its real values.
    const Shape& s = c->shape();
    Blob out = Blob::allocate(s);
    const std::vector<double> v = to_doubles(*c);
    int64_t inner = 1, dim = 1;
    int ax = axis < 0 ? axis + s.rank() : axis;
    if (q.scales.size() > 1) {
      if (ax < 0 || ax >= s.rank() || s[ax] != static_cast<int64_t>(q.scales.size())) throw n.error("scales do not match the axis", "axis");
      dim = s[ax];
      for (int d = ax + 1; d < s.rank(); ++d) inner *= s[d];
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto ch = static_cast<std::size_t>(q.scales.size() > 1 ? static_cast<int64_t>(i) / inner % dim : 0);
      if (q.float_type) {  // rounded onto the float type (as its values: it is an output, or dequantised next)
        out.data_as<float>()[i] = core::narrowed(*q.float_type, static_cast<float>(v[i]) / q.scales[ch], q.saturate,
                                                 core::ScaleRounding::up);
        continue;
      }
      core::FakeQuant f;
      f.scale = q.scales[ch];
      f.zero_point = static_cast<int32_t>(q.zero_points[ch]);
      f.qmin = static_cast<int32_t>(q.qmin);
      f.qmax = static_cast<int32_t>(q.qmax);
      out.data_as<float>()[i] = f.apply(static_cast<float>(v[i]));
    }
    constants_[n.out(0)] = out;
    if (q.scales.size() == 1 && q.qmax - q.qmin <= 255 && !q.float_type) quantized_[n.out(0)] = per_tensor(n, q, "y");
    return;
  }
  quantized_output(n, input(n, 0), q, axis);
}

std::string Importer::along_axis(const Node& n, const std::string& name, const std::vector<float>& values, int axis, int rank) {
  if (values.size() == 1) return scalar_constant(n, name, values[0]);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) throw n.error(fmt::format("axis {} out of range for rank {}", axis, rank), "axis");
  Shape s{static_cast<int64_t>(values.size())};
  for (int d = axis + 1; d < rank; ++d) s.push_back(1);
  return as_blob(n, add_constant(name, float_blob(s, values)));
}

std::string Importer::real_values(const Node& n, int k, const QParams& q, int axis, const char* what) {
  const std::string& x = n.in(k);
  if (auto it = quantized_.find(x); it != quantized_.end()) {
    // Held as real values: this operator must read its integers at the quantisation they have.
    if (q.scales.size() == 1 && q.zero_points.size() == 1 &&
        (q.scales[0] != it->second.scale || q.zero_points[0] != it->second.zero_point))
      throw Unsupported{fmt::format("{} reads {} '{}' at scale {} and zero point {}; it was quantised with {} and {}", n.op(),
                                    what, x, q.scales[0], q.zero_points[0], it->second.scale, it->second.zero_point)};
    return input(n, k);
  }
  if (const Blob* c = constant(x)) return as_blob(n, add_constant(fmt::format("{}/{}_real", n.out(0), what), dequantized(n, *c, q, axis, what)));
  const int t = elem_type(x);
  if (t != onnx::TensorProto::UINT8 && t != onnx::TensorProto::INT8 && t != onnx::TensorProto::UINT16 &&
      t != onnx::TensorProto::INT16 && t != onnx::TensorProto::INT32 && !narrow_dtype(t))
    throw Unsupported{fmt::format("{} of a {} '{}' that is neither quantised by a QuantizeLinear nor integer-typed", n.op(), what, x)};
  const int rank = shape_of(n, x).rank();
  std::vector<float> zp(q.zero_points.begin(), q.zero_points.end());
  const std::string centred = fresh_blob(fmt::format("{}/{}_centred", n.out(0), what)),
                    real = fresh_blob(fmt::format("{}/{}_real", n.out(0), what));
  add(make("sub", fmt::format("{}/{}_zero_point", n.name, what), {input(n, k), along_axis(n, centred + "/zp", zp, axis, rank)},
           {centred}));
  add(make("mul", fmt::format("{}/{}_scale", n.name, what), {centred, along_axis(n, real + "/scale", q.scales, axis, rank)}, {real}));
  return real;
}

void Importer::quantized_output(const Node& n, const std::string& real, const QParams& q, int axis) {
  const std::string y = n.out(0);
  if (q.float_type) {  // float8, float4e2m1: x / scale rounded onto the type
    const std::string scaled = fresh_blob(y + "/scaled");
    add(make("div", n.name + "/scale", {real, along_axis(n, y + "/scale", q.scales, axis, shape_of(n, real).rank())}, {scaled}));
    add_cast(n, scaled, y, *q.float_type, q.saturate, "up", "cast");
    return;
  }
  if (!is_graph_output(y)) return add_fake_quant(n, real, y, per_tensor(n, q, "y"));
  // The integers themselves: saturate(round_half_even(x / scale) + zero point).
  const int rank = shape_of(n, real).rank();
  std::vector<float> zp(q.zero_points.begin(), q.zero_points.end());
  const std::string scaled = fresh_blob(y + "/scaled"), rounded = fresh_blob(y + "/rounded"), shifted = fresh_blob(y + "/shifted");
  add(make("div", n.name + "/scale", {real, along_axis(n, y + "/scale", q.scales, axis, rank)}, {scaled}));
  add_unary(n, "round", scaled, rounded, {{"mode", std::string("nearest_even")}}, "round");
  add(make("add", n.name + "/zero_point", {rounded, along_axis(n, y + "/zero_point", zp, axis, rank)}, {shifted}));
  add_unary(n, "clip", shifted, y, {{"min", static_cast<double>(q.qmin)}, {"max", static_cast<double>(q.qmax)}});
  value_types_[y] = q.type;
}

void Importer::dequantize_linear(const Node& n) {
  if (n.get_int("block_size", 0) != 0) throw Unsupported{"DequantizeLinear with block_size (blocked quantisation)"};
  const std::string& x = n.in(0);
  const int axis = static_cast<int>(n.get_int("axis", 1));
  if (auto it = quantized_.find(x); it != quantized_.end()) {
    // Already held as real values: the dequantisation must be the quantisation's.
    const QParams q = qparams(n, 1, 2, "x");
    const core::FakeQuant f = per_tensor(n, q, "x");
    if (f.scale != it->second.scale || f.zero_point != it->second.zero_point)
      throw Unsupported{fmt::format("DequantizeLinear with scale {} and zero point {} of '{}', quantised with {} and {}", f.scale,
                                    f.zero_point, x, it->second.scale, it->second.zero_point)};
    if (const Blob* c = constant(x)) {
      constants_[n.out(0)] = *c;
      return;
    }
    return add_unary(n, "identity", input(n, 0), n.out(0));
  }
  if (const Blob* c = constant(x)) {  // quantised weights, biases
    if (c->dtype() == DType::float32) throw n.error("a float constant is not quantised", "x");
    QParams q = qparams(n, 1, 2, "x", true);
    if (!n.has_in(2)) {  // no zero point: the range from x's own type
      auto t = onnx_types_.find(x);
      if (t != onnx_types_.end() && t->second == onnx::TensorProto::INT8) q.qmin = -128, q.qmax = 127;
    }
    Blob w = dequantized(n, *c, q, axis, "x");
    mark_int8_grid(w, q, axis, x);
    constants_[n.out(0)] = std::move(w);
    return;
  }
  if (auto it = int_valued_.find(x); it != int_valued_.end()) {
    // DynamicQuantizeLinear's integers: (x - zero_point) * scale, with the node's own scale and zero point.
    std::string centred = fresh_blob(n.out(0) + "/centred");
    add(make("sub", n.name + "/zero_point", {input(n, 0), input(n, 2)}, {centred}));
    add(make("mul", n.name, {centred, input(n, 1)}, {n.out(0)}));
    return;
  }
  // Integers computed at run time (an integer graph input, a quantising graph step).
  QParams q = qparams(n, 1, 2, "x", true);
  if (!n.has_in(2)) q.zero_points.assign(q.scales.size(), 0);
  add_unary(n, "identity", real_values(n, 0, q, axis, "x"), n.out(0));
}

void Importer::qlinear_conv(const Node& n) {
  const QParams xq = qparams(n, 1, 2, "x"), wq = qparams(n, 4, 5, "w"), yq = qparams(n, 6, 7, "y");
  if (xq.scales.size() != 1) throw Unsupported{"QLinearConv with x quantised per axis"};
  const Blob& w_int = require_constant(n, 3, "w");
  Blob w = dequantized(n, w_int, wq, 0, "w");
  mark_int8_grid(w, wq, 0, n.in(3));
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  Layer l = conv2_layer(n, n.name + "/conv", real_values(n, 0, xq, 1, "x"), tmp, w);
  if (n.has_in(8)) {  // int32 bias at scale x_scale * w_scale (per output channel)
    const std::vector<double> b = to_doubles(require_constant(n, 8, "B"));
    const int64_t oc = w.shape()[0];
    if (static_cast<int64_t>(b.size()) != oc) throw n.error(fmt::format("{} bias values for {} output channels", b.size(), oc), "B");
    std::vector<float> bias(b.size());
    for (std::size_t c = 0; c < b.size(); ++c)
      bias[c] = static_cast<float>(b[c] * static_cast<double>(xq.scales[0]) * static_cast<double>(wq.scales[wq.scales.size() > 1 ? c : 0]));
    l.weights["bias"] = float_blob(Shape{oc}, bias);
  }
  add(std::move(l));
  quantized_output(n, tmp, yq, 1);
}

void Importer::qlinear_matmul(const Node& n) {
  const QParams aq = qparams(n, 1, 2, "a"), bq = qparams(n, 4, 5, "b"), yq = qparams(n, 6, 7, "y");
  if (aq.scales.size() != 1) throw Unsupported{"QLinearMatMul with a quantised per axis"};
  const std::string a = real_values(n, 0, aq, 1, "a");
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  const Blob* b = constant(n.in(3));
  if (b && b->shape().rank() == 2) {
    // Per-column scales of B ([K, N]) lie along axis 1.
    Layer d = make("dense", n.name + "/matmul", {a}, {tmp});
    Blob w = transposed(dequantized(n, *b, bq, 1, "b"), {1, 0});
    mark_int8_grid(w, bq, 0, n.in(3));
    d.weights["weight"] = std::move(w);
    add(std::move(d));
  } else {
    if (bq.scales.size() != 1) throw Unsupported{"QLinearMatMul with a B quantised per axis that is not a 2-D constant"};
    add(make("matmul", n.name + "/matmul", {a, real_values(n, 3, bq, 1, "b")}, {tmp}));
  }
  quantized_output(n, tmp, yq, 1);
}

// ONNX Runtime's QOperator forms (com.microsoft): the operator on the real
// values, its output quantised as the node says.

void Importer::qlinear_binary(const Node& n) {  // QLinearAdd, QLinearMul
  const QParams aq = qparams(n, 1, 2, "A"), bq = qparams(n, 4, 5, "B"), cq = qparams(n, 6, 7, "C");
  const std::string a = real_values(n, 0, aq, 1, "A"), b = real_values(n, 3, bq, 1, "B");
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  add(make(n.op() == "QLinearAdd" ? "add" : "mul", n.name + "/real", {a, b}, {tmp}));
  quantized_output(n, tmp, cq, 1);
}

void Importer::qlinear_unary(const Node& n) {  // QLinearSigmoid, QLinearLeakyRelu
  const QParams xq = qparams(n, 1, 2, "X"), yq = qparams(n, 3, 4, "Y");
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  std::map<std::string, Attr> params;
  if (n.op() == "QLinearLeakyRelu") params["alpha"] = n.get_float("alpha", 0.01);
  add_unary(n, n.op() == "QLinearSigmoid" ? "sigmoid" : "leaky_relu", real_values(n, 0, xq, 1, "X"), tmp, std::move(params),
            "real");
  quantized_output(n, tmp, yq, 1);
}

void Importer::qlinear_softmax(const Node& n) {  // com.microsoft: X, X_scale, X_zp, Y_scale, Y_zp; axis, opset
  const QParams xq = qparams(n, 1, 2, "X"), yq = qparams(n, 3, 4, "Y");
  if (!n.has("opset")) throw n.error("QLinearSoftmax needs the opset of the Softmax it replaces", "opset");
  const int64_t opset = n.get_int("opset");
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  add_softmax(n, real_values(n, 0, xq, 1, "X"), tmp, opset, n.get_int("axis", -1));
  quantized_output(n, tmp, yq, 1);
}

void Importer::qlinear_global_pool(const Node& n) {
  if (n.get_int("channels_last", 0) != 0) throw Unsupported{"QLinearGlobalAveragePool with channels_last=1"};
  const QParams xq = qparams(n, 1, 2, "X"), yq = qparams(n, 3, 4, "Y");
  const std::string x = real_values(n, 0, xq, 1, "X");
  if (shape_of(n, x).rank() != 4) throw Unsupported{fmt::format("QLinearGlobalAveragePool of a rank-{} input", shape_of(n, x).rank())};
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  add_unary(n, "pool2", x, tmp, {{"mode", std::string("avg")}, {"global", int64_t{1}}}, "real");
  quantized_output(n, tmp, yq, 1);
}

void Importer::qlinear_concat(const Node& n) {
  // Y_scale, Y_zero_point, then (tensor, scale, zero point) per input.
  if (n.num_inputs() < 5 || (n.num_inputs() - 2) % 3 != 0)
    throw n.error(fmt::format("{} inputs: expected Y_scale, Y_zero_point and triples of tensor, scale, zero point",
                              n.num_inputs()),
                  "input");
  const QParams yq = qparams(n, 0, 1, "Y");
  std::vector<std::string> reals;
  for (int k = 2; k < n.num_inputs(); k += 3) reals.push_back(real_values(n, k, qparams(n, k + 1, k + 2, "input"), 1, "input"));
  const int rank = shape_of(n, reals[0]).rank();
  int64_t axis = n.get_int("axis");
  if (axis < -rank || axis >= rank) throw n.error(fmt::format("axis {} out of range for rank {}", axis, rank), "axis");
  if (axis < 0) axis += rank;
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  Layer l = make("concat", n.name + "/real", reals, {tmp});
  l.params["axis"] = axis;
  add(std::move(l));
  quantized_output(n, tmp, yq, 1);
}

void Importer::qgemm(const Node& n) {
  // Y = alpha * A' B' + C, C int32 at alpha * a_scale * b_scale; Y quantised where y_scale is given, else float.
  const QParams aq = qparams(n, 1, 2, "A"), bq = qparams(n, 4, 5, "B");
  if (n.get_int("transA", 0) != 0) throw Unsupported{"QGemm with transA"};
  if (aq.scales.size() != 1) throw Unsupported{"QGemm with A quantised per axis"};
  const std::string a = real_values(n, 0, aq, 1, "A");
  if (shape_of(n, a).rank() != 2) throw n.error(fmt::format("A is {}, not a matrix", shape_of(n, a).to_string()), "A");
  const Blob* b = constant(n.in(3));
  if (!b || b->shape().rank() != 2) throw Unsupported{"QGemm with a B that is not a constant matrix"};
  const bool trans_b = n.get_int("transB", 0) != 0;
  const double alpha = n.get_float("alpha", 1.0);
  // Per-column scales of B lie along its N axis: 1 as [K, N], 0 as [N, K].
  Blob w = dequantized(n, *b, bq, trans_b ? 0 : 1, "B");
  if (!trans_b) w = transposed(w, {1, 0});
  const int64_t oc = w.shape()[0];
  if (alpha == 1.0) mark_int8_grid(w, bq, 0, n.in(3));  // (scaled by alpha it is off the file's grid)
  else
    for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = static_cast<float>(w.data_as<float>()[i] * alpha);
  const bool quantised_y = n.has_in(7);
  const std::string y = quantised_y ? fresh_blob(n.out(0) + "/real") : n.out(0);
  Layer d = make("dense", quantised_y ? n.name + "/real" : n.name, {a}, {y});
  d.weights["weight"] = w;
  if (n.has_in(6)) {
    const std::vector<double> c = to_doubles(require_constant(n, 6, "C"));
    if (static_cast<int64_t>(c.size()) != oc && c.size() != 1)
      throw Unsupported{fmt::format("QGemm with a C of {} values for {} outputs (a row of N or a scalar)", c.size(), oc)};
    std::vector<float> bias(static_cast<std::size_t>(oc));
    for (int64_t j = 0; j < oc; ++j) {
      const double bs = bq.scales[bq.scales.size() > 1 ? static_cast<std::size_t>(j) : 0];
      bias[static_cast<std::size_t>(j)] =
          static_cast<float>(c[c.size() > 1 ? static_cast<std::size_t>(j) : 0] * alpha * aq.scales[0] * bs);
    }
    d.weights["bias"] = float_blob(Shape{oc}, bias);
  }
  add(std::move(d));
  if (quantised_y) quantized_output(n, y, qparams(n, 7, 8, "y"), 1);
}

void Importer::keep_quantisation(const Node& n) {
  static const std::unordered_set<std::string> moves = {"MaxPool",   "Flatten",      "Reshape",      "Squeeze", "Unsqueeze",
                                                        "Transpose", "DepthToSpace", "SpaceToDepth", "Identity",
                                                        "Split",     "Slice",        "Resize"};
  if (!moves.count(n.op()) || !n.has_in(0)) return;
  // A nearest resize moves values; a linear one computes new ones, which ONNX
  // Runtime rounds on the integers in its own way.
  if (n.op() == "Resize" && n.get_string("mode", "nearest") != "nearest") return;
  const auto q = quantized_.find(n.in(0));
  if (q == quantized_.end()) return;
  const core::FakeQuant fq = q->second;
  for (int k = 0; k < n.num_outputs(); ++k) {
    const std::string& y = n.out(k);
    if (y.empty() || constant(y) || quantized_.count(y) || is_graph_output(y) || !shapes_.count(y)) continue;
    auto producer = std::find_if(graph_.layers.rbegin(), graph_.layers.rend(), [&](const Layer& l) {
      return std::find(l.outputs.begin(), l.outputs.end(), y) != l.outputs.end();
    });
    if (producer == graph_.layers.rend()) continue;
    const std::string moved = fresh_blob(y + "/moved");
    std::replace(producer->outputs.begin(), producer->outputs.end(), y, moved);
    shapes_[moved] = shapes_.at(y);
    Layer l = make("fake_quant", n.num_outputs() == 1 ? n.name + "/quantize" : fmt::format("{}/quantize_{}", n.name, k), {moved}, {y});
    l.params["scale"] = static_cast<double>(fq.scale);
    l.params["zero_point"] = int64_t{fq.zero_point};
    l.params["qmin"] = int64_t{fq.qmin};
    l.params["qmax"] = int64_t{fq.qmax};
    graph_.layers.push_back(std::move(l));
    quantized_[y] = fq;
  }
}

void Importer::dynamic_quantize_linear(const Node& n) {
  if (const Blob* c = constant(n.in(0))) {
    // Of a constant (an exporter's weights): computed now, as the layer would.
    const Blob x = to_float(*c);
    const float* v = x.data_as<float>();
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < x.numel(); ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
    float scale, zp;
    core::dynamic_quant_params(lo, hi, scale, zp);
    Blob y = Blob::allocate(x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) y.data_as<float>()[i] = std::clamp(std::nearbyint(v[i] / scale) + zp, 0.0f, 255.0f);
    constants_[n.out(0)] = y;
    if (!n.out(1).empty()) constants_[n.out(1)] = float_blob({}, {scale});
    if (!n.out(2).empty()) constants_[n.out(2)] = int_blob({}, {static_cast<int64_t>(zp)});
    int_valued_[n.out(0)] = {n.out(1), n.out(2)};
    return;
  }
  std::vector<std::string> outs{output(n, 0), output(n, 1), output(n, 2)};
  add(make("dynamic_quantize", n.name, {input(n, 0)}, outs));
  int_valued_[outs[0]] = {outs[1], outs[2]};
}

void Importer::conv_integer(const Node& n) {
  if (!int_valued_.count(n.in(0)) && !integer_inputs(n))
    throw Unsupported{"ConvInteger of a tensor that is neither integer-typed nor made by a DynamicQuantizeLinear"};
  value_types_[n.out(0)] = onnx::TensorProto::INT32;
  QParams wq;
  wq.zero_points = n.has_in(3) ? constant_ints(n, 3, "w_zero_point") : std::vector<int64_t>{0};
  wq.scales.assign(wq.zero_points.size(), 1.0f);
  Blob w = dequantized(n, require_constant(n, 1, "w"), wq, 0, "w");  // w - w_zero_point, exact
  std::string x = input(n, 0);
  if (n.has_in(2)) {  // padding reads (x - x_zero_point) = 0, as ONNX Runtime pads with the zero point
    std::string centred = fresh_blob(n.out(0) + "/centred");
    add(make("sub", n.name + "/zero_point", {x, input(n, 2)}, {centred}));
    x = centred;
  }
  add(conv2_layer(n, n.name, x, n.out(0), std::move(w)));
}

void Importer::matmul_integer(const Node& n) {
  if (!int_valued_.count(n.in(0)) && !integer_inputs(n))
    throw Unsupported{"MatMulInteger of an A that is neither integer-typed nor made by a DynamicQuantizeLinear"};
  value_types_[n.out(0)] = onnx::TensorProto::INT32;
  const Blob* b = constant(n.in(1));
  if (!b || b->shape().rank() != 2) throw Unsupported{"MatMulInteger with a B that is not a 2-D constant"};
  QParams bq;
  bq.zero_points = n.has_in(3) ? constant_ints(n, 3, "b_zero_point") : std::vector<int64_t>{0};
  bq.scales.assign(bq.zero_points.size(), 1.0f);
  std::string a = input(n, 0);
  if (n.has_in(2)) {
    std::string centred = fresh_blob(n.out(0) + "/centred");
    add(make("sub", n.name + "/zero_point", {a, input(n, 2)}, {centred}));
    a = centred;
  }
  Layer d = make("dense", n.name, {a}, {n.out(0)});
  Blob w = transposed(dequantized(n, *b, bq, 1, "b"), {1, 0});  // B - b_zero_point, [N, K]
  // An int8 B without zero points (quantize_dynamic's symmetric weights): the
  // integers themselves, on a grid of scale 1, which the .dnn stores as int8.
  QParams unit = bq;
  unit.scales.assign(1, 1.0f);
  unit.zero_points.assign(1, 0);
  if (std::all_of(bq.zero_points.begin(), bq.zero_points.end(), [](int64_t z) { return z == 0; }))
    mark_int8_grid(w, unit, 0, n.in(1));
  d.weights["weight"] = std::move(w);
  add(std::move(d));
}

void Importer::gemm(const Node& n) {
  const double alpha = n.get_float("alpha", 1.0), beta = n.get_float("beta", 1.0);
  const bool trans_a = n.get_int("transA", 0) != 0, trans_b = n.get_int("transB", 0) != 0;
  if (shape_of(n, n.in(0)).rank() != 2 || shape_of(n, n.in(1)).rank() != 2) throw n.error("Gemm takes 2-D A and B", "input");
  std::string a = input(n, 0);
  if (trans_a) {
    std::string t = fresh_blob(n.out(0) + "/a_t");
    add_unary(n, "transpose", a, t, {{"perm", std::vector<int64_t>{1, 0}}}, "transpose_a");
    a = t;
  }
  const std::string y = n.out(0);
  const Blob* b = constant(n.in(1));
  const Blob* c = n.has_in(2) ? constant(n.in(2)) : nullptr;
  if (b) {
    // y = alpha * a * B' + beta * C as a dense layer: weight [N,K] = alpha * B' transposed.
    Blob w = trans_b ? to_float(*b) : transposed(to_float(*b), {1, 0});
    if (alpha != 1.0) w = binary(BinaryOp::mul, w, float_blob({}, {static_cast<float>(alpha)}));
    const int64_t nn = w.shape()[0];
    // C folds into the bias when it is one row ([N], [1,N], or a scalar).
    const bool row = c && c->shape().rank() <= 2 && (c->numel() == 1 || (c->numel() == nn && c->shape()[c->shape().rank() - 1] == nn));
    const bool add_after = n.has_in(2) && !row;
    Layer d = make("dense", n.name, {a}, {add_after ? fresh_blob(y + "/matmul") : y});
    d.weights["weight"] = w;
    if (row)  // [N], [1,N] or a scalar: broadcast to [1,N] at most, then [N]
      d.weights["bias"] = reshaped(expanded(binary(BinaryOp::mul, to_float(*c), float_blob({}, {static_cast<float>(beta)})), Shape{nn}), Shape{nn});
    const std::string product = d.outputs[0];
    add(std::move(d));
    if (!add_after) return;
    std::string cb = input(n, 2);
    if (beta != 1.0) {
      std::string scaled = fresh_blob(y + "/beta_c");
      Layer m = make("mul", n.name + "/beta", {cb, scalar_constant(n, y + "/beta", beta)}, {scaled});
      add(std::move(m));
      cb = scaled;
    }
    add(make("add", n.name + "/add_c", {product, cb}, {y}));
    return;
  }
  // B computed at run time: matmul, then the scalings and C as layers.
  std::string bb = input(n, 1);
  if (trans_b) {
    std::string t = fresh_blob(y + "/b_t");
    add_unary(n, "transpose", bb, t, {{"perm", std::vector<int64_t>{1, 0}}}, "transpose_b");
    bb = t;
  }
  std::string cur = (alpha != 1.0 || n.has_in(2)) ? fresh_blob(y + "/matmul") : y;
  add(make("matmul", n.name, {a, bb}, {cur}));
  if (alpha != 1.0) {
    std::string next = n.has_in(2) ? fresh_blob(y + "/alpha_ab") : y;
    add(make("mul", n.name + "/alpha", {cur, scalar_constant(n, y + "/alpha", alpha)}, {next}));
    cur = next;
  }
  if (n.has_in(2)) {
    std::string cb = input(n, 2);
    if (beta != 1.0) {
      std::string scaled = fresh_blob(y + "/beta_c");
      add(make("mul", n.name + "/beta", {cb, scalar_constant(n, y + "/beta", beta)}, {scaled}));
      cb = scaled;
    }
    add(make("add", n.name + "/add_c", {cur, cb}, {y}));
  }
}

void Importer::matmul(const Node& n) {
  const Blob* b = constant(n.in(1));
  // A constant 2-D right operand is a weight: dense computes [...,K] x [K,N] with weight [N,K].
  if (b && b->shape().rank() == 2 && !constant(n.in(0)) && shape_of(n, n.in(0)).rank() >= 1) {
    Layer d = make("dense", n.name, {input(n, 0)}, {n.out(0)});
    d.weights["weight"] = transposed(to_float(*b), {1, 0});
    add(std::move(d));
    return;
  }
  add(make("matmul", n.name, {input(n, 0), input(n, 1)}, {n.out(0)}));
}

void Importer::einsum(const Node& n) {
  // The batched matrix products attention blocks write as Einsum
  // ("bhid,bhjd->bhij", "...ij,...jk->...ik"): a matmul, with the operands'
  // last two dims swapped where the equation says so. Other equations: an einsum layer.
  std::string eq;
  for (char ch : n.get_string("equation"))
    if (ch != ' ') eq += ch;
  const auto comma = eq.find(','), arrow = eq.find("->");
  if (n.num_inputs() != 2 || comma == std::string::npos || arrow == std::string::npos || arrow < comma)
    return general_einsum(n, eq);
  std::string a = eq.substr(0, comma), b = eq.substr(comma + 1, arrow - comma - 1), c = eq.substr(arrow + 2);
  auto strip_ellipsis = [](std::string& t) {
    if (t.rfind("...", 0) != 0) return false;
    t = t.substr(3);
    return true;
  };
  const bool ea = strip_ellipsis(a), eb = strip_ellipsis(b), ec = strip_ellipsis(c);
  const std::size_t r = c.size();
  const bool shapes_fit = ea == eb && eb == ec && a.size() == r && b.size() == r && r >= 2 &&
                          a.compare(0, r - 2, c, 0, r - 2) == 0 && b.compare(0, r - 2, c, 0, r - 2) == 0;
  const std::string a2 = shapes_fit ? a.substr(r - 2) : "", b2 = shapes_fit ? b.substr(r - 2) : "", c2 = shapes_fit ? c.substr(r - 2) : "";
  // c2 = "ij": i from a2, j from b2, the contracted k in both and not in c2.
  const bool product = shapes_fit && a2[0] != a2[1] && b2[0] != b2[1] && c2[0] != c2[1] &&
                       a2.find(c2[0]) != std::string::npos && b2.find(c2[1]) != std::string::npos;
  const char k = product ? a2[a2[0] == c2[0] ? 1 : 0] : 0;
  if (!product || b2.find(k) == std::string::npos || c2.find(k) != std::string::npos) return general_einsum(n, eq);
  auto operand = [&](int idx, bool transpose, const char* which) {
    std::string x = input(n, idx);
    if (!transpose) return x;
    const auto rank = static_cast<std::size_t>(shape_of(n, x).rank());
    if (rank < 2) throw n.error("Einsum operand of rank < 2", "equation");
    std::vector<int64_t> swap_last(rank);
    std::iota(swap_last.begin(), swap_last.end(), 0);
    std::swap(swap_last[rank - 1], swap_last[rank - 2]);
    std::string t = fresh_blob(fmt::format("{}/{}_t", n.out(0), which));
    add_unary(n, "transpose", x, t, {{"perm", swap_last}}, std::string("transpose_") + which);
    return t;
  };
  const std::string lhs = operand(0, a2[1] != k, "a");  // wants [.., i, k]
  const std::string rhs = operand(1, b2[0] != k, "b");  // wants [.., k, j]
  add(make("matmul", n.name, {lhs, rhs}, {n.out(0)}));
}

// Any Einsum as an einsum layer (cpu/ref): the equation spelled out with
// letters only, ellipses as letters the equation does not use (right-aligned
// across the operands, as NumPy broadcasts them), an implicit output as NumPy
// makes it (the ellipsis, then the letters used once, in alphabetical order).
void Importer::general_einsum(const Node& n, const std::string& eq) {
  if (n.num_inputs() < 1 || n.num_inputs() > 8) throw Unsupported{fmt::format("Einsum of {} operands (1 to 8)", n.num_inputs())};
  const auto arrow = eq.find("->");
  std::vector<std::string> ops;
  std::string cur;
  for (char c : eq.substr(0, arrow) + ",") {
    if (c == ',') ops.push_back(cur), cur.clear();
    else cur += c;
  }
  if (static_cast<int>(ops.size()) != n.num_inputs())
    throw n.error(fmt::format("equation '{}' has {} operands for {} inputs", eq, ops.size(), n.num_inputs()), "equation");
  std::string spare;  // letters free for the ellipsis
  for (char c = 'A'; c <= 'Z'; ++c)
    if (eq.find(c) == std::string::npos) spare += c;
  int ellipsis_rank = 0;
  std::vector<int> op_ellipsis(ops.size(), -1);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const auto dots = ops[k].find("...");
    if (dots == std::string::npos) continue;
    const int rank = shape_of(n, n.in(static_cast<int>(k))).rank();
    const int named = static_cast<int>(ops[k].size()) - 3;
    if (rank < named) throw n.error(fmt::format("operand {} '{}' names more dims than its rank {}", k, ops[k], rank), "equation");
    op_ellipsis[k] = rank - named;
    ellipsis_rank = std::max(ellipsis_rank, rank - named);
  }
  if (ellipsis_rank > static_cast<int>(spare.size())) throw n.error("too many dims under '...'", "equation");
  const std::string all_dots = spare.substr(0, static_cast<std::size_t>(ellipsis_rank));
  for (std::size_t k = 0; k < ops.size(); ++k)
    if (op_ellipsis[k] >= 0)
      ops[k].replace(ops[k].find("..."), 3, all_dots.substr(all_dots.size() - static_cast<std::size_t>(op_ellipsis[k])));
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (const auto dots = out.find("..."); dots != std::string::npos) out.replace(dots, 3, all_dots);
  } else {
    std::map<char, int> uses;
    for (const auto& o : ops)
      for (char c : o) ++uses[c];
    out = all_dots;
    for (const auto& [c, count] : uses)  // map order: alphabetical (upper case first, as NumPy's)
      if (count == 1 && all_dots.find(c) == std::string::npos) out += c;
  }
  std::string spelled;
  for (std::size_t k = 0; k < ops.size(); ++k) spelled += (k ? "," : "") + ops[k];
  spelled += "->" + out;
  std::vector<std::string> inputs;
  for (int k = 0; k < n.num_inputs(); ++k) inputs.push_back(input(n, k));
  Layer l = make("einsum", n.name, inputs, {n.out(0)});
  l.params["equation"] = spelled;
  add(std::move(l));
}

void Importer::unary(const Node& n) {
  static const std::map<std::string, std::string> types = {
      {"Relu", "relu"}, {"Sigmoid", "sigmoid"}, {"Tanh", "tanh"}, {"HardSwish", "hardswish"},
      {"HardSigmoid", "hardsigmoid"}, {"Gelu", "gelu"}, {"Abs", "abs"}, {"Neg", "neg"}, {"Sqrt", "sqrt"},
      {"Exp", "exp"}, {"Log", "log"}, {"Erf", "erf"}, {"Reciprocal", "reciprocal"}, {"LeakyRelu", "leaky_relu"},
      {"Mish", "mish"}};
  // Index arithmetic on constants (shape subgraphs) is computed here, in its own dtype.
  if (constant(n.in(0)) && (n.op() == "Neg" || n.op() == "Abs" || n.op() == "Sqrt")) return constant_math(n);
  std::map<std::string, Attr> params;
  static const std::set<std::string> trig = {"Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"};
  if (trig.count(n.op())) {
    std::string op = n.op();
    op[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(op[0])));
    return add_unary(n, "trig", input(n, 0), n.out(0), {{"op", op}});
  }
  if (n.op() == "LeakyRelu") {
    params["alpha"] = n.get_float("alpha", 0.01);
  } else if (n.op() == "HardSigmoid") {
    params["alpha"] = n.get_float("alpha", 0.2);
    params["beta"] = n.get_float("beta", 0.5);
  } else if (n.op() == "Gelu") {
    params["approximate"] = n.get_string("approximate", "none");
  }
  add_unary(n, types.at(n.op()), input(n, 0), n.out(0), std::move(params));
}

void Importer::clip(const Node& n) {
  std::map<std::string, Attr> params;
  if (n.opset < 11) {
    if (n.has("min")) params["min"] = n.get_float("min");
    if (n.has("max")) params["max"] = n.get_float("max");
  } else {
    // Opset 11 made the bounds inputs (exporters pass Constant nodes or initializers).
    if (n.has_in(1)) params["min"] = constant_scalar(n, 1, "min");
    if (n.has_in(2)) params["max"] = constant_scalar(n, 2, "max");
  }
  // min > max: ONNX's min(max(x, min), max) is max everywhere, which clip(max, max) computes.
  if (params.count("min") && params.count("max") && std::get<double>(params["min"]) > std::get<double>(params["max"]))
    params["min"] = params["max"];
  add_unary(n, "clip", input(n, 0), n.out(0), std::move(params));
}

void Importer::binary_op(const Node& n) {
  static const std::map<std::string, std::pair<std::string, BinaryOp>> ops = {
      {"Add", {"add", BinaryOp::add}}, {"Sub", {"sub", BinaryOp::sub}},
      {"Mul", {"mul", BinaryOp::mul}}, {"Div", {"div", BinaryOp::div}}};
  const auto& [type, op] = ops.at(n.op());
  const Blob* a = constant(n.in(0));
  const Blob* b = constant(n.in(1));
  // Arithmetic on constants is computed now: shape arithmetic, and the index and
  // mask computations some exporters emit, whose results later nodes need as constants.
  if (a && b) {
    try {
      constants_[n.out(0)] = binary(op, *a, *b);
    } catch (const Error& e) {
      throw n.error(e.message(), "input");
    }
    return;
  }
  if (n.op() == "Div" && integer_inputs(n)) {  // integers divide toward zero
    Layer l = make("divmod", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
    l.params["op"] = std::string("quotient");
    add(std::move(l));
    return;
  }
  add(make(type, n.name, {input(n, 0), input(n, 1)}, {n.out(0)}));
}

bool Importer::integral_exponent(const Node& n) const {
  const Blob* e = n.has_in(1) ? constant(n.in(1)) : nullptr;
  if (!e) return false;
  for (double v : to_doubles(*e))
    if (!(v >= 0 && v == std::floor(v))) return false;
  return true;
}

void Importer::pow(const Node& n) {
  const Blob* e = constant(n.in(1));
  if (e && constant(n.in(0))) return constant_math(n);
  // An integer base to non-negative integral powers: integers again, the float
  // power rounded back onto them (an output refuses what float32 cannot hold).
  const bool integer_base = value_types_.count(n.in(0)) != 0 && integral_exponent(n);
  const std::string y = integer_base ? fresh_blob(n.out(0) + "/power") : n.out(0);
  if (!e || e->numel() != 1) {  // x ** y, y computed or not a scalar
    add(make("pow", n.name, {input(n, 0), input(n, 1)}, {y}));
  } else {
    const double v = to_doubles(*e)[0];
    if (!std::isfinite(v)) throw n.error(fmt::format("exponent {} is not finite", v), "Y");
    if (v == 1.0) add_unary(n, "identity", input(n, 0), y);
    else if (v == 2.0) add(make("mul", n.name, {input(n, 0), input(n, 0)}, {y}));  // one pass, any routine
    else add_unary(n, "pow", input(n, 0), y, {{"exponent", v}});
  }
  if (integer_base) add_unary(n, "round", y, n.out(0), {{"mode", std::string("nearest_even")}}, "round");
}

void Importer::prelu(const Node& n) {
  Layer l = make("prelu", n.name, {input(n, 0)}, {n.out(0)});
  l.weights["slope"] = to_float(require_constant(n, 1, "slope"));
  add(std::move(l));
}

void Importer::pool(const Node& n) {
  const bool is_max = n.op() == "MaxPool";
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 4 && xs.rank() != 5) throw Unsupported{fmt::format("only 1-D, 2-D and 3-D pooling (input {})", xs.to_string())};
  const bool indices = is_max && used(n.out(1));
  if (indices && xs.rank() != 4) throw Unsupported{"MaxPool's Indices output of a pooling other than 2-D"};
  if (xs.rank() == 5) return pool_3d(n, input(n, 0), n.out(0), is_max, n.get_int("count_include_pad", 0));
  const auto kernel = n.get_ints_n("kernel_shape", 2, {});
  const auto strides = n.get_ints_n("strides", 2, {1, 1});
  const auto dilations = n.get_ints_n("dilations", 2, {1, 1});
  Layer l = make("pool2", n.name, {input(n, 0)}, {n.out(0)});
  l.params["mode"] = std::string(is_max ? "max" : "avg");
  l.params["kernel"] = kernel;
  l.params["strides"] = strides;
  l.params["dilations"] = dilations;
  l.params["pads"] = window_pads(n, xs, kernel, strides, dilations);
  l.params["ceil_mode"] = n.get_int("ceil_mode", 0);
  if (!is_max) l.params["count_include_pad"] = n.get_int("count_include_pad", 0);
  if (indices) {  // the values by any pool2 routine, the indices beside them
    Layer at = l;
    at.type = "max_pool_indices";
    at.name = fresh_layer(n.name + "/indices");
    at.outputs = {n.out(1)};
    at.params.erase("mode");
    at.params["storage_order"] = n.get_int("storage_order", 0);
    add(std::move(at));
    value_types_[n.out(1)] = onnx::TensorProto::INT64;
  }
  add(std::move(l));
}

// 3-D max and average pooling as two 2-D poolings: over (H, W) of
// [N, C*D, H, W], then over D of [N, C, D, H'*W']. Both are separable: a max
// over a box is the max over D of the maxes over (H, W), and a box's count of
// taps (padding counted or not, clipped in ceil mode) is the product of the
// counts along each axis, so the mean of the means is the box's mean.
void Importer::pool_3d(const Node& n, const std::string& x, const std::string& y, bool is_max, int64_t count_include_pad) {
  const Shape xs = shape_of(n, x);
  const auto kernel = n.get_ints_n("kernel_shape", 3, {});
  const auto strides = n.get_ints_n("strides", 3, {1, 1, 1});
  const auto dilations = n.get_ints_n("dilations", 3, {1, 1, 1});
  for (std::size_t i = 0; i < 3; ++i)
    if (kernel[i] < 1 || strides[i] < 1 || dilations[i] < 1)
      throw n.error("kernel_shape, strides and dilations must be positive", "kernel_shape");
  const auto pads = window_pads(n, xs, kernel, strides, dilations);  // [d0, h0, w0, d1, h1, w1]
  const std::string flat = fresh_blob(y + "/hw_in"), hw = fresh_blob(y + "/hw"),
                    by_depth = fresh_blob(y + "/d_in"), d = fresh_blob(y + "/d");
  auto pool2 = [&](const std::string& suffix, const std::string& in, const std::string& out, int64_t kh, int64_t kw,
                   int64_t sh, int64_t sw, int64_t dh, int64_t dw, std::vector<int64_t> p) {
    Layer l = make("pool2", n.name + suffix, {in}, {out});
    l.params["mode"] = std::string(is_max ? "max" : "avg");
    l.params["kernel"] = std::vector<int64_t>{kh, kw};
    l.params["strides"] = std::vector<int64_t>{sh, sw};
    l.params["dilations"] = std::vector<int64_t>{dh, dw};
    l.params["pads"] = std::move(p);
    l.params["ceil_mode"] = n.get_int("ceil_mode", 0);
    if (!is_max) l.params["count_include_pad"] = count_include_pad;
    add(std::move(l));
  };
  add_unary(n, "reshape", x, flat, {{"shape", std::vector<int64_t>{xs[0], xs[1] * xs[2], xs[3], xs[4]}}}, "to_hw");
  pool2("/hw", flat, hw, kernel[1], kernel[2], strides[1], strides[2], dilations[1], dilations[2],
        {pads[1], pads[2], pads[4], pads[5]});
  const Shape hs = shape_of(n, hw);
  add_unary(n, "reshape", hw, by_depth, {{"shape", std::vector<int64_t>{xs[0], xs[1], xs[2], hs[2] * hs[3]}}}, "to_d");
  pool2("/d", by_depth, d, kernel[0], 1, strides[0], 1, dilations[0], 1, {pads[0], 0, pads[3], 0});
  const Shape ds = shape_of(n, d);
  add_unary(n, "reshape", d, y, {{"shape", std::vector<int64_t>{xs[0], xs[1], ds[2], hs[2], hs[3]}}}, "to_3d");
}

// LpPool: (sum of |x|^p over the window)^(1/p), the sum an average pooling
// that counts the padding, times the window's taps.
void Importer::lp_pool(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 4 && xs.rank() != 5) throw Unsupported{fmt::format("only 1-D, 2-D and 3-D pooling (input {})", xs.to_string())};
  const double p = static_cast<double>(n.get_int("p", 2));
  if (p < 1) throw n.error(fmt::format("p {} is below 1", p), "p");
  const std::size_t spatial = static_cast<std::size_t>(xs.rank() - 2);
  const auto kernel = n.get_ints_n("kernel_shape", spatial, {});
  const auto strides = n.get_ints_n("strides", spatial, std::vector<int64_t>(spatial, 1));
  const auto dilations = n.get_ints_n("dilations", spatial, std::vector<int64_t>(spatial, 1));
  int64_t taps = 1;
  for (int64_t k : kernel) taps *= k;
  const std::string y = n.out(0), a = fresh_blob(y + "/abs"), powered = fresh_blob(y + "/pow"), mean = fresh_blob(y + "/mean"),
                    sum = fresh_blob(y + "/sum");
  add_unary(n, "abs", input(n, 0), a, {}, "abs");
  if (p == 2) add(make("mul", n.name + "/pow", {a, a}, {powered}));
  else add_unary(n, "pow", a, powered, {{"exponent", p}}, "pow");
  if (spatial == 3) {
    pool_3d(n, powered, mean, /*is_max=*/false, /*count_include_pad=*/1);
  } else {
    Layer l = make("pool2", n.name + "/window", {powered}, {mean});
    l.params["mode"] = std::string("avg");
    l.params["kernel"] = kernel;
    l.params["strides"] = strides;
    l.params["dilations"] = dilations;
    l.params["pads"] = window_pads(n, xs, kernel, strides, dilations);
    l.params["ceil_mode"] = n.get_int("ceil_mode", 0);
    l.params["count_include_pad"] = int64_t{1};
    add(std::move(l));
  }
  add(make("mul", n.name + "/taps", {mean, scalar_constant(n, y + "/taps", static_cast<double>(taps))}, {sum}));
  if (p == 1) return add_unary(n, "identity", sum, y);
  if (p == 2) return add_unary(n, "sqrt", sum, y);
  add_unary(n, "pow", sum, y, {{"exponent", 1.0 / p}});
}

void Importer::global_pool(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() < 3) throw n.error(fmt::format("input {} has no spatial dims", xs.to_string()), "X");
  if (xs.rank() != 4) {  // 1-D, 3-D...: a reduction over every spatial dim
    std::vector<int64_t> axes(static_cast<std::size_t>(xs.rank() - 2));
    std::iota(axes.begin(), axes.end(), int64_t{2});
    add_unary(n, "reduce", input(n, 0), n.out(0),
              {{"mode", std::string(n.op() == "GlobalMaxPool" ? "max" : "mean")}, {"axes", axes}, {"keepdims", int64_t{1}}});
    return;
  }
  add_unary(n, "pool2", input(n, 0), n.out(0),
            {{"mode", std::string(n.op() == "GlobalMaxPool" ? "max" : "avg")}, {"global", int64_t{1}}});
}

void Importer::reduce(const Node& n) {
  // The last four as a sum with an elementwise step before or after it.
  static const std::map<std::string, std::string> modes = {
      {"ReduceMean", "mean"}, {"ReduceMax", "max"},    {"ReduceMin", "min"},       {"ReduceSum", "sum"},
      {"ReduceL2", "l2"},     {"ReduceL1", "sum"},     {"ReduceSumSquare", "sum"}, {"ReduceLogSum", "sum"},
      {"ReduceLogSumExp", "sum"}, {"ReduceProd", "prod"}};
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  // ReduceSum took its axes as an input from opset 13, the others from opset 18.
  const bool axes_input = n.opset >= (n.op() == "ReduceSum" ? 13 : 18);
  std::vector<int64_t> axes = axes_input ? (n.has_in(1) ? constant_ints(n, 1, "axes") : std::vector<int64_t>{})
                                         : n.get_ints("axes", std::vector<int64_t>{});
  if (axes.empty() && axes_input && n.get_int("noop_with_empty_axes", 0) != 0) {
    add_unary(n, "identity", input(n, 0), n.out(0));
    return;
  }
  for (auto& a : axes) {
    if (a < -rank || a >= rank) throw n.error(fmt::format("axis {} out of range for rank {}", a, rank), "axes");
    if (a < 0) a += rank;
  }
  const bool keep = n.get_int("keepdims", 1) != 0;
  const std::string mode = modes.at(n.op());
  std::sort(axes.begin(), axes.end());
  if (rank == 4 && axes == std::vector<int64_t>{2, 3} && keep && (mode == "mean" || mode == "max") &&
      (n.op() == "ReduceMean" || n.op() == "ReduceMax")) {
    add_unary(n, "pool2", input(n, 0), n.out(0), {{"mode", std::string(mode == "max" ? "max" : "avg")}, {"global", int64_t{1}}});
    return;
  }
  auto reduced = [&](const std::string& m, bool keepdims) {
    std::map<std::string, Attr> params{{"mode", m}, {"keepdims", int64_t{keepdims ? 1 : 0}}};
    if (!axes.empty()) params["axes"] = axes;
    return params;
  };
  const std::string& op = n.op();
  const std::string y = n.out(0);
  std::string x = input(n, 0);
  if (op == "ReduceSumSquare" || op == "ReduceL1") {
    const std::string pre = fresh_blob(y + (op == "ReduceL1" ? "/abs" : "/square"));
    if (op == "ReduceL1") add_unary(n, "abs", x, pre, {}, "abs");
    else add(make("mul", n.name + "/square", {x, x}, {pre}));
    x = pre;
  } else if (op == "ReduceLogSum") {
    const std::string sum = fresh_blob(y + "/sum");
    add_unary(n, "reduce", x, sum, reduced("sum", keep), "sum");
    add_unary(n, "log", sum, y);
    return;
  } else if (op == "ReduceLogSumExp") {
    // max + log(sum(exp(x - max))): no overflow for large x.
    const std::string m = fresh_blob(y + "/max"), t = fresh_blob(y + "/shifted"), e = fresh_blob(y + "/exp"),
                      sum = fresh_blob(y + "/sum"), l = fresh_blob(y + "/log");
    add_unary(n, "reduce", x, m, reduced("max", true), "max");
    add(make("sub", n.name + "/shift", {x, m}, {t}));
    add_unary(n, "exp", t, e, {}, "exp");
    add_unary(n, "reduce", e, sum, reduced("sum", true), "sum");
    add_unary(n, "log", sum, l, {}, "log");
    const std::string kept = keep ? y : fresh_blob(y + "/kept");
    add(make("add", keep ? n.name : n.name + "/add_max", {l, m}, {kept}));
    if (!keep) {
      Shape out;
      for (int d = 0; d < rank; ++d)
        if (!axes.empty() && !std::binary_search(axes.begin(), axes.end(), int64_t{d})) out.push_back(xs[d]);
      add_unary(n, "reshape", kept, y, {{"shape", out.to_vector()}});
    }
    return;
  }
  add_unary(n, "reduce", x, y, reduced(mode, keep));
}

// LogSoftmax as x - max - log(sum(exp(x - max))) along the axis (stable for
// any range); before opset 13 over the 2-D view [dims < axis, dims >= axis].
void Importer::log_softmax(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  int64_t axis = normalized_axis(n, n.get_int("axis", n.opset >= 13 ? -1 : 1), std::max(rank, 1), "axis");
  const std::string y = n.out(0);
  std::string x = input(n, 0);
  const bool flat = n.opset < 13 && axis != rank - 1;
  if (flat) {
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < rank; ++i) (i < axis ? outer : inner) *= xs[i];
    const std::string two_d = fresh_blob(y + "/2d");
    add_unary(n, "reshape", x, two_d, {{"shape", std::vector<int64_t>{outer, inner}}}, "to_2d");
    x = two_d;
    axis = 1;
  }
  const std::vector<int64_t> axes{axis};
  const std::string m = fresh_blob(y + "/max"), t = fresh_blob(y + "/shifted"), e = fresh_blob(y + "/exp"),
                    sum = fresh_blob(y + "/sum"), l = fresh_blob(y + "/log"), out = flat ? fresh_blob(y + "/2d_out") : y;
  add_unary(n, "reduce", x, m, {{"mode", std::string("max")}, {"axes", axes}, {"keepdims", int64_t{1}}}, "max");
  add(make("sub", n.name + "/shift", {x, m}, {t}));
  add_unary(n, "exp", t, e, {}, "exp");
  add_unary(n, "reduce", e, sum, {{"mode", std::string("sum")}, {"axes", axes}, {"keepdims", int64_t{1}}}, "sum");
  add_unary(n, "log", sum, l, {}, "log");
  add(make("sub", n.name, {t, l}, {out}));
  if (flat) add_unary(n, "reshape", out, y, {{"shape", xs.to_vector()}}, "from_2d");
}

// Sum, Mean, Max and Min of any number of inputs (broadcast): a chain of
// add/max/min layers, Mean's sum scaled by 1/n.
void Importer::sum_mean(const Node& n) {
  const int count = n.num_inputs();
  if (count < 1) throw n.error(fmt::format("{} needs at least one input", n.op()), "input");
  for (int k = 0; k < count; ++k)
    if (!n.has_in(k)) throw n.error(fmt::format("input {} is empty", k), "input");
  const bool mean = n.op() == "Mean";
  const std::string type = n.op() == "Max" ? "max" : n.op() == "Min" ? "min" : "add";
  const std::string y = n.out(0);
  std::string cur = input(n, 0);
  if (count == 1 && !mean) return add_unary(n, "identity", cur, y);
  for (int k = 1; k < count; ++k) {
    const bool last = k + 1 == count && !mean;
    const std::string next = last ? y : fresh_blob(fmt::format("{}/{}{}", y, type, k));
    add(make(type, last ? n.name : fmt::format("{}/{}{}", n.name, type, k), {cur, input(n, k)}, {next}));
    cur = next;
  }
  if (mean) {
    const std::string inv = scalar_constant(n, y + "/inv_count", 1.0 / count);
    add(make("mul", n.name, {cur, inv}, {y}));
  }
}

// Softplus as one softplus layer (log(1 + e^x) from log1p: a log of 1 + tiny
// loses the tiny part); Elu and Selu as [gamma *] (relu(x) + alpha * (exp(min(x, 0)) - 1)).
void Importer::elu_softplus(const Node& n) {
  const std::string x = input(n, 0), y = n.out(0);
  if (n.op() == "Softplus") return add_unary(n, "softplus", x, y);
  const std::string pos = fresh_blob(y + "/relu");
  add_unary(n, "relu", x, pos, {}, "relu");
  const std::string rest = fresh_blob(y + "/rest");
  const bool selu = n.op() == "Selu";
  const double alpha = n.get_float("alpha", selu ? 1.67326319217681884765625 : 1.0);
  const double gamma = selu ? n.get_float("gamma", 1.05070102214813232421875) : 1.0;
  const std::string neg = fresh_blob(y + "/negative"), e = fresh_blob(y + "/exp"), em1 = fresh_blob(y + "/exp_minus_one");
  add(make("min", n.name + "/negative", {x, scalar_constant(n, y + "/zero", 0.0)}, {neg}));
  add_unary(n, "exp", neg, e, {}, "exp");
  add(make("add", n.name + "/minus_one", {e, scalar_constant(n, y + "/minus_one", -1.0)}, {em1}));
  add(make("mul", n.name + "/alpha", {em1, scalar_constant(n, y + "/alpha", alpha)}, {rest}));
  if (!selu) return add(make("add", n.name, {pos, rest}, {y}));
  const std::string sum = fresh_blob(y + "/sum");
  add(make("add", n.name + "/sum", {pos, rest}, {sum}));
  add(make("mul", n.name, {sum, scalar_constant(n, y + "/gamma", gamma)}, {y}));
}

// Softsign: x / (1 + |x|).
void Importer::softsign(const Node& n) {
  const std::string x = input(n, 0), y = n.out(0);
  const std::string a = fresh_blob(y + "/abs"), d = fresh_blob(y + "/denominator");
  add_unary(n, "abs", x, a, {}, "abs");
  add(make("add", n.name + "/plus_one", {a, scalar_constant(n, y + "/one", 1.0)}, {d}));
  add(make("div", n.name, {x, d}, {y}));
}

// BatchNormalization in training mode: normalised by the batch's own statistics
// (mean and population variance over every axis but the channels); the running
// statistics are input * momentum + the batch's * (1 - momentum).
void Importer::batchnorm_training(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  if (rank < 2) throw n.error(fmt::format("X has shape {}, not [N, C, ...]", xs.to_string()), "X");
  std::vector<int64_t> axes;
  for (int d = 0; d < rank; ++d)
    if (d != 1) axes.push_back(d);
  std::vector<int64_t> per_channel(static_cast<std::size_t>(rank), 1);
  per_channel[1] = xs[1];
  const std::string x = input(n, 0), y = n.out(0);
  auto blob = [&](const char* what) { return fresh_blob(y + "/" + what); };
  auto binary = [&](const char* type, const std::string& a, const std::string& b, const std::string& out, const char* what) {
    add(make(type, n.name + "/" + what, {a, b}, {out}));
    return out;
  };
  auto channels = [&](int k, const char* what) {  // input k [C] as [1, C, 1, ...]
    const std::string v = blob(what);
    add_unary(n, "reshape", input(n, k), v, {{"shape", per_channel}}, what);
    return v;
  };
  const std::map<std::string, Attr> mean_params{{"mode", std::string("mean")}, {"axes", axes}, {"keepdims", int64_t{1}}};
  const std::string mean = blob("mean"), var = blob("var");
  add_unary(n, "reduce", x, mean, mean_params, "mean");
  const std::string d = binary("sub", x, mean, blob("centred"), "centred");
  const std::string sq = binary("mul", d, d, blob("squares"), "squares");
  add_unary(n, "reduce", sq, var, mean_params, "var");
  const std::string ve = binary("add", var, scalar_constant(n, y + "/epsilon", n.get_float("epsilon", 1e-5)), blob("var_eps"), "var_eps");
  const std::string sd = blob("std");
  add_unary(n, "sqrt", ve, sd, {}, "std");
  const std::string norm = binary("div", d, sd, blob("normalised"), "normalised");
  const std::string scaled = binary("mul", norm, channels(1, "scale"), blob("scaled"), "scaled");
  binary("add", scaled, channels(2, "B"), y, "shifted");
  const double momentum = n.get_float("momentum", 0.9);
  for (int k = 1; k < 3 && k < n.num_outputs(); ++k) {  // running_mean, running_var
    if (n.out(k).empty()) continue;
    const char* what = k == 1 ? "running_mean" : "running_var";
    const std::string batch = blob(what);
    add_unary(n, "reshape", k == 1 ? mean : var, batch, {{"shape", std::vector<int64_t>{xs[1]}}}, std::string(what) + "/batch");
    const std::string kept = binary("mul", input(n, 2 + k), scalar_constant(n, y + "/momentum", momentum), blob("kept"), "kept");
    const std::string added = binary("mul", batch, scalar_constant(n, y + "/rest", 1 - momentum), blob("added"), "added");
    binary("add", kept, added, n.out(k), what);
  }
}

void Importer::batchnorm(const Node& n) {
  if (n.get_int("training_mode", 0) != 0) return batchnorm_training(n);
  for (int k = 1; k < n.num_outputs(); ++k)
    if (used(n.out(k))) throw Unsupported{"BatchNormalization's running statistics outputs"};
  Layer l = make("batchnorm", n.name, {input(n, 0)}, {n.out(0)});
  l.weights["scale"] = to_float(require_constant(n, 1, "scale"));
  l.weights["bias"] = to_float(require_constant(n, 2, "B"));
  l.weights["mean"] = to_float(require_constant(n, 3, "input_mean"));
  l.weights["var"] = to_float(require_constant(n, 4, "input_var"));
  l.params["epsilon"] = n.get_float("epsilon", 1e-5);
  add(std::move(l));
}

void Importer::softmax(const Node& n) { add_softmax(n, input(n, 0), n.out(0), n.opset, n.get_int("axis", n.opset >= 13 ? -1 : 1)); }

void Importer::add_softmax(const Node& n, const std::string& x, const std::string& y, int64_t opset, int64_t axis) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  if (opset >= 13) {  // one axis, default the last
    add_unary(n, "softmax", x, y, {{"axis", axis}});
    return;
  }
  // Before opset 13: the input is seen as 2-D [prod(dims < axis), prod(dims >= axis)]
  // and softmax runs over the second dim; axis defaults to 1.
  axis = normalized_axis(n, axis, std::max(rank, 1), "axis");
  if (axis == rank - 1) {
    add_unary(n, "softmax", x, y, {{"axis", int64_t{-1}}});
    return;
  }
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < rank; ++i) (i < axis ? outer : inner) *= xs[i];
  const std::string flat = fresh_blob(y + "/2d"), soft = fresh_blob(y + "/softmax");
  add_unary(n, "reshape", x, flat, {{"shape", std::vector<int64_t>{outer, inner}}}, "to_2d");
  add_unary(n, "softmax", flat, soft, {{"axis", int64_t{-1}}});
  add_unary(n, "reshape", soft, y, {{"shape", xs.to_vector()}}, "from_2d");
}

void Importer::layernorm(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  const int axis = normalized_axis(n, n.get_int("axis", -1), rank, "axis");
  Shape norm;
  for (int i = axis; i < rank; ++i) norm.push_back(xs[i]);
  Layer l = make("layernorm", n.name, {input(n, 0)}, {n.out(0)});
  l.params["axis"] = int64_t{axis};
  l.params["epsilon"] = n.get_float("epsilon", 1e-5);
  try {  // Scale and B broadcast to the normalised shape
    l.weights["scale"] = expanded(to_float(require_constant(n, 1, "Scale")), norm);
    if (n.has_in(2)) l.weights["bias"] = expanded(to_float(require_constant(n, 2, "B")), norm);
  } catch (const Error& e) {
    throw n.error(e.message(), "Scale");
  }
  add(std::move(l));
  // Mean and InvStdDev (training graphs export them), where read: reduce steps of their own, keepdims.
  if (!(n.num_outputs() > 1 && used(n.out(1))) && !(n.num_outputs() > 2 && used(n.out(2)))) return;
  std::vector<int64_t> axes;
  for (int i = axis; i < rank; ++i) axes.push_back(i);
  auto mean_of = [&](const std::string& x, const std::string& y, const std::string& suffix) {
    add_unary(n, "reduce", x, y, {{"mode", std::string("mean")}, {"axes", axes}, {"keepdims", int64_t{1}}}, suffix);
  };
  const std::string base = n.out(0);
  const std::string mean = n.num_outputs() > 1 && used(n.out(1)) ? n.out(1) : fresh_blob(base + "/mean");
  mean_of(input(n, 0), mean, "mean");
  if (!(n.num_outputs() > 2 && used(n.out(2)))) return;
  const std::string centred = fresh_blob(base + "/centred"), squared = fresh_blob(base + "/squared"),
                    var = fresh_blob(base + "/var"), var_eps = fresh_blob(base + "/var_eps"), sd = fresh_blob(base + "/sd");
  add(make("sub", n.name + "/centre", {input(n, 0), mean}, {centred}));
  add(make("mul", n.name + "/square", {centred, centred}, {squared}));
  mean_of(squared, var, "var");
  add(make("add", n.name + "/epsilon",
           {var, scalar_constant(n, base + "/eps", n.get_float("epsilon", 1e-5))},
           {var_eps}));
  add_unary(n, "sqrt", var_eps, sd, {}, "sqrt");
  add_unary(n, "reciprocal", sd, n.out(2), {}, "inv_std");
}

// RMSNormalization (opset 23): x / sqrt(mean(x^2 over axis..) + epsilon) * scale, as steps.
void Importer::rms_norm(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  const int axis = normalized_axis(n, n.get_int("axis", -1), rank, "axis");
  std::vector<int64_t> axes;
  Shape norm;
  for (int i = axis; i < rank; ++i) axes.push_back(i), norm.push_back(xs[i]);
  Blob scale;
  try {
    scale = expanded(to_float(require_constant(n, 1, "scale")), norm);
  } catch (const Error& e) {
    throw n.error(e.message(), "scale");
  }
  const std::string y = n.out(0), x = input(n, 0);
  const std::string sq = fresh_blob(y + "/squared"), ms = fresh_blob(y + "/mean_square"), mse = fresh_blob(y + "/plus_eps"),
                    rms = fresh_blob(y + "/rms"), normed = fresh_blob(y + "/normalised");
  add(make("mul", n.name + "/square", {x, x}, {sq}));
  add_unary(n, "reduce", sq, ms, {{"mode", std::string("mean")}, {"axes", axes}, {"keepdims", int64_t{1}}}, "mean");
  add(make("add", n.name + "/epsilon",
           {ms, scalar_constant(n, y + "/eps", n.get_float("epsilon", 1e-5))},
           {mse}));
  add_unary(n, "sqrt", mse, rms, {}, "sqrt");
  add(make("div", n.name + "/normalise", {x, rms}, {normed}));
  add(make("mul", n.name, {normed, as_blob(n, add_constant(y + "/scale", scale))}, {y}));
}

// Attention (opset 23): softmax(Q Kᵀ * scale + mask [+ causal], softcapped) V,
// as transpose/matmul/softmax steps; 3-D inputs split into heads, K and V
// repeated for grouped-query heads. Not (refused by name): the KV cache
// (past/present), the QK output, nonpad_kv_seqlen, windows.
// Attention (opsets 23-24) as ONNX's reference computes it: KV cache
// (present = concat(past, K/V heads)), grouped-query heads, scores scaled,
// softcapped, then biased by the mask (padded with -inf to the keys), the
// causal triangle and sliding window (aligned to the end of the cache), the
// padding of nonpad_kv_seqlen; softmax, rows with no attendable key set to 0.
void Importer::attention(const Node& n) {
  const Shape qs = shape_of(n, n.in(0)), ks = shape_of(n, n.in(1)), vs = shape_of(n, n.in(2));
  if (qs.rank() != ks.rank() || qs.rank() != vs.rank() || (qs.rank() != 3 && qs.rank() != 4))
    throw n.error(fmt::format("Q, K and V must all be 3-D or all 4-D; they are {}, {}, {}", qs.to_string(), ks.to_string(),
                              vs.to_string()),
                  "Q");
  if (n.has_in(4) != n.has_in(5)) throw n.error("past_key and past_value come together", "past_key");
  if (n.has_in(4) && n.has_in(6)) throw n.error("nonpad_kv_seqlen cannot be combined with past_key", "nonpad_kv_seqlen");
  const std::string y = n.out(0);
  const bool three_d = qs.rank() == 3;
  const int64_t batch = qs[0];
  int64_t hq = three_d ? n.get_int("q_num_heads", 0) : qs[1];
  int64_t hkv = three_d ? n.get_int("kv_num_heads", 0) : ks[1];
  if (hq <= 0 || hkv <= 0) throw n.error("3-D Q, K and V need q_num_heads and kv_num_heads", "q_num_heads");
  if (hq % hkv != 0) throw n.error(fmt::format("{} query heads are not a multiple of {} key/value heads", hq, hkv), "kv_num_heads");
  if (three_d && (qs[2] % hq != 0 || ks[2] % hkv != 0 || vs[2] % hkv != 0))
    throw n.error("the hidden sizes do not split into the heads", "q_num_heads");
  const int64_t len = three_d ? qs[1] : qs[2], src = three_d ? ks[1] : ks[2];
  const int64_t d = three_d ? qs[2] / hq : qs[3], dv = three_d ? vs[2] / hkv : vs[3];
  // [B, L, H*D] -> [B, H, L, D]
  auto heads = [&](int k, int64_t h, int64_t seq, int64_t dim, const char* what) {
    if (!three_d) return input(n, k);
    const std::string split = fresh_blob(fmt::format("{}/{}_split", y, what)), t = fresh_blob(fmt::format("{}/{}_heads", y, what));
    add_unary(n, "reshape", input(n, k), split, {{"shape", std::vector<int64_t>{batch, seq, h, dim}}}, std::string(what) + "_split");
    add_unary(n, "transpose", split, t, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}, std::string(what) + "_heads");
    return t;
  };
  // Grouped-query attention: each key/value head serves hq / hkv query heads.
  auto repeated = [&](const std::string& x, int64_t seq, int64_t dim, const char* what) {
    const int64_t r = hq / hkv;
    if (r == 1) return x;
    const std::string five = fresh_blob(fmt::format("{}/{}_5d", y, what)), cat = fresh_blob(fmt::format("{}/{}_repeated", y, what)),
                      out = fresh_blob(fmt::format("{}/{}_groups", y, what));
    add_unary(n, "reshape", x, five, {{"shape", std::vector<int64_t>{batch, hkv, 1, seq, dim}}}, std::string(what) + "_5d");
    Layer c = make("concat", fmt::format("{}/{}_repeat", n.name, what), std::vector<std::string>(static_cast<std::size_t>(r), five), {cat});
    c.params["axis"] = int64_t{2};
    add(std::move(c));
    add_unary(n, "reshape", cat, out, {{"shape", std::vector<int64_t>{batch, hq, seq, dim}}}, std::string(what) + "_groups");
    return out;
  };
  // The cache: present = concat(past, new) along the sequence.
  int64_t past = 0;
  auto with_past = [&](const std::string& fresh, int k, int out_k, const char* what) {
    std::string present = fresh;
    if (n.has_in(k)) {
      const Shape ps = shape_of(n, n.in(k));
      if (ps.rank() != 4) throw n.error(fmt::format("{} {} is not 4-D [B, H, S, D]", what, ps.to_string()), what);
      past = ps[2];
      present = used(n.out(out_k)) ? n.out(out_k) : fresh_blob(fmt::format("{}/{}", y, what));
      Layer c = make("concat", fmt::format("{}/{}", n.name, what), {input(n, k), fresh}, {present});
      c.params["axis"] = int64_t{2};
      add(std::move(c));
    } else if (used(n.out(out_k))) {
      add_unary(n, "identity", fresh, n.out(out_k), {}, what);
    }
    return present;
  };
  const std::string q = heads(0, hq, len, d, "q");
  const std::string k_present = with_past(heads(1, hkv, src, d, "k"), 4, 1, "present_key");
  const std::string v_present = with_past(heads(2, hkv, src, dv, "v"), 5, 2, "present_value");
  const int64_t total = past + src;
  const std::string k = repeated(k_present, total, d, "k"), v = repeated(v_present, total, dv, "v");
  // The bias: the mask, and a constant [len, total] or [B, 1, len, total] of the causal, window and padding rules.
  const float ninf = -std::numeric_limits<float>::infinity();
  std::string bias;
  bool bias_constant = true;
  if (n.has_in(3)) {
    const Shape ms = shape_of(n, n.in(3));
    if (ms.rank() < 1 || ms[ms.rank() - 1] > total)
      throw n.error(fmt::format("attn_mask {} is longer than the {} keys", ms.to_string(), total), "attn_mask");
    const bool is_bool = elem_type(n.in(3)) == onnx::TensorProto::BOOL;
    if (const Blob* c = constant(n.in(3))) {
      const std::vector<double> m = to_doubles(*c);
      const int64_t w = ms[ms.rank() - 1], rows = ms.numel() / std::max<int64_t>(w, 1);
      Shape padded = ms;
      padded[ms.rank() - 1] = total;
      std::vector<float> b(static_cast<std::size_t>(rows * total), ninf);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < w; ++j) {
          const double v = m[static_cast<std::size_t>(r * w + j)];
          b[static_cast<std::size_t>(r * total + j)] = is_bool ? (v != 0 ? 0.0f : ninf) : static_cast<float>(v);
        }
      bias = as_blob(n, add_constant(y + "/mask_bias", float_blob(padded, b)));
    } else {
      bias_constant = false;
      bias = input(n, 3);
      if (is_bool) {
        const std::string additive = fresh_blob(y + "/mask_additive");
        add(make("where", n.name + "/mask_additive", {bias, scalar_constant(n, y + "/zero", 0.0), scalar_constant(n, y + "/ninf", ninf)},
                 {additive}));
        bias = additive;
      }
      if (ms[ms.rank() - 1] < total) {
        const std::string padded = fresh_blob(y + "/mask_padded");
        std::vector<int64_t> pads(static_cast<std::size_t>(2 * ms.rank()), 0);
        pads[static_cast<std::size_t>(2 * ms.rank() - 1)] = total - ms[ms.rank() - 1];
        add_unary(n, "pad", bias, padded, {{"pads", pads}, {"mode", std::string("constant")}, {"value", static_cast<double>(ninf)}},
                  "mask_pad");
        bias = padded;
      }
    }
  }
  const bool causal = n.get_int("is_causal", 0) != 0;
  const int64_t left = n.get_int("left_window_size", -1), right = n.get_int("right_window_size", -1);
  std::vector<int64_t> nonpad;
  if (n.has_in(6)) {
    const Blob* c = constant(n.in(6));
    if (!c) throw Unsupported{"Attention with nonpad_kv_seqlen computed at run time"};
    nonpad = to_ints(*c);
    if (static_cast<int64_t>(nonpad.size()) != batch)
      throw n.error(fmt::format("{} lengths for a batch of {}", nonpad.size(), batch), "nonpad_kv_seqlen");
  }
  // One attention layer where nothing needs the steps apart (softcap and the
  // QK output do); the causal triangle alone is its flag, not a constant.
  const bool one_layer = !(n.get_float("softcap", 0.0) > 0) && !used(n.out(3));
  // ONNX aligns the triangle to the cache's end (j <= i + past): the layer's
  // "start" without a cache, its "end" where the new keys are the queries' own.
  const bool causal_flag = one_layer && causal && left < 0 && right < 0 && nonpad.empty() && (past == 0 || src == len);
  if (!causal_flag && (causal || left >= 0 || right >= 0 || !nonpad.empty())) {
    const int64_t groups = nonpad.empty() ? 1 : batch;
    std::vector<float> rule(static_cast<std::size_t>(groups * len * total), 0.0f);
    for (int64_t b = 0; b < groups; ++b) {
      const int64_t offset = nonpad.empty() ? past : nonpad[static_cast<std::size_t>(b)] - len;
      for (int64_t i = 0; i < len; ++i)
        for (int64_t j = 0; j < total; ++j) {
          const int64_t diff = i + offset - j;
          const bool allowed = (!causal || diff >= 0) && (left < 0 || diff <= left) && (right < 0 || -diff <= right) &&
                               (nonpad.empty() || j < nonpad[static_cast<std::size_t>(b)]);
          if (!allowed) rule[static_cast<std::size_t>((b * len + i) * total + j)] = ninf;
        }
    }
    const Shape rs = nonpad.empty() ? Shape{len, total} : Shape{batch, 1, len, total};
    const std::string r = as_blob(n, add_constant(y + "/rule_bias", float_blob(rs, rule)));
    if (bias.empty()) {
      bias = r;
    } else {
      const std::string both = fresh_blob(y + "/bias");
      add(make("add", n.name + "/bias", {bias, r}, {both}));
      bias = both;
    }
  }
  // Rows whose bias is -inf everywhere attend to nothing: 0, not softmax's NaN
  // (the one layer's masked_rows = zero, else a guard after the softmax).
  bool guard = !bias.empty();
  if (guard && bias_constant) {
    guard = false;
    if (const Blob* c = constant(bias)) {
      const std::vector<double> b = to_doubles(*c);
      const int64_t w = c->shape()[c->shape().rank() - 1];
      for (std::size_t r = 0; r * static_cast<std::size_t>(w) < b.size() && !guard; ++r)
        guard = std::all_of(b.begin() + static_cast<std::ptrdiff_t>(r * w), b.begin() + static_cast<std::ptrdiff_t>((r + 1) * w),
                            [](double v) { return std::isinf(v) && v < 0; });
    } else {
      guard = true;  // a sum of constants, folded later: check at run time
    }
  }
  const double scale = n.has("scale") ? n.get_float("scale") : 1.0 / std::sqrt(static_cast<double>(d));
  const int64_t mode = n.get_int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) throw n.error(fmt::format("qk_matmul_output_mode {} is not 0..3", mode), "qk_matmul_output_mode");
  if (one_layer) {
    std::string qh = input(n, 0);
    std::vector<int64_t> q_perm{0, 1, 2, 3}, out_perm{0, 1, 2, 3};
    if (three_d) {  // [B, L, H*D] read as [B, L, H, D], heads second through the perm
      qh = fresh_blob(y + "/q_split");
      add_unary(n, "reshape", input(n, 0), qh, {{"shape", std::vector<int64_t>{batch, len, hq, d}}}, "q_split");
      q_perm = out_perm = {0, 2, 1, 3};
    }
    const std::string ctx = three_d ? fresh_blob(y + "/merged") : y;
    std::vector<std::string> ins{qh, k, v};
    if (!bias.empty()) ins.push_back(bias);
    Layer a = make("attention", n.name, ins, {ctx});
    a.params["scale"] = scale;
    a.params["q_perm"] = q_perm;
    a.params["out_perm"] = out_perm;
    if (causal_flag) {
      a.params["causal"] = int64_t{1};
      if (past == 0) a.params["causal_align"] = std::string("start");
    }
    if (guard) a.params["masked_rows"] = std::string("zero");
    add(std::move(a));
    if (three_d) add_unary(n, "reshape", ctx, y, {{"shape", std::vector<int64_t>{batch, len, hq * dv}}});
    return;
  }
  const std::string kt = fresh_blob(y + "/k_t"), qk = fresh_blob(y + "/qk");
  add_unary(n, "transpose", k, kt, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}}, "k_t");
  add(make("matmul", n.name + "/qk", {q, kt}, {qk}));
  std::string scores = fresh_blob(y + "/scaled");
  add(make("mul", n.name + "/scale", {qk, scalar_constant(n, y + "/scale", scale)}, {scores}));
  if (const double cap = n.get_float("softcap", 0.0); cap > 0) {  // before the bias: masked stays -inf
    const std::string a = fresh_blob(y + "/capped_in"), t = fresh_blob(y + "/capped_tanh"), out = fresh_blob(y + "/capped");
    add(make("mul", n.name + "/softcap_in", {scores, scalar_constant(n, y + "/inv_cap", 1 / cap)}, {a}));
    add_unary(n, "tanh", a, t, {}, "softcap_tanh");
    add(make("mul", n.name + "/softcap", {t, scalar_constant(n, y + "/cap", cap)}, {out}));
    scores = out;
  }
  const std::string qk_out = used(n.out(3)) ? n.out(3) : std::string();
  if (!qk_out.empty() && mode <= 1) add_unary(n, "identity", scores, qk_out, {}, "qk_matmul_output");
  if (!bias.empty()) {
    const std::string biased = fresh_blob(y + "/biased");
    add(make("add", n.name + "/mask", {scores, bias}, {biased}));
    scores = biased;
  }
  if (!qk_out.empty() && mode == 2) add_unary(n, "identity", scores, qk_out, {}, "qk_matmul_output");
  std::string probs = fresh_blob(y + "/probs");
  add_unary(n, "softmax", scores, probs, {{"axis", int64_t{-1}}}, "softmax");
  if (guard) {
    const std::string top = fresh_blob(y + "/bias_max"), live = fresh_blob(y + "/attendable"), kept = fresh_blob(y + "/probs_kept");
    add_unary(n, "reduce", bias, top, {{"mode", std::string("max")}, {"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}},
              "bias_max");
    Layer c = make("compare", n.name + "/attendable", {top, scalar_constant(n, y + "/ninf_row", ninf)}, {live});
    c.params["op"] = std::string("greater");
    add(std::move(c));
    add(make("where", n.name + "/guard", {live, probs, scalar_constant(n, y + "/zero_prob", 0.0)}, {kept}));
    probs = kept;
  }
  if (!qk_out.empty() && mode == 3) add_unary(n, "identity", probs, qk_out, {}, "qk_matmul_output");
  const std::string ctx = three_d ? fresh_blob(y + "/context") : y;
  add(make("matmul", three_d ? n.name + "/pv" : n.name, {probs, v}, {ctx}));
  if (three_d) {
    const std::string merged = fresh_blob(y + "/merged");
    add_unary(n, "transpose", ctx, merged, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}, "merge");
    add_unary(n, "reshape", merged, y, {{"shape", std::vector<int64_t>{batch, len, hq * dv}}});
  }
}

void Importer::identity(const Node& n) {
  if (n.op() == "Dropout") {
    if (used(n.out(1))) {  // nothing is dropped at inference: a mask of ones
      const Shape xs = shape_of(n, n.in(0));
      constants_[n.out(1)] = float_blob(xs, std::vector<float>(static_cast<std::size_t>(xs.numel()), 1.0f));
      onnx_types_[n.out(1)] = onnx::TensorProto::BOOL;
    }
    // Training mode drops values at random, unless the ratio is 0 (exporters emit
    // F.dropout(x, p=0.0, training=True) like that): then it is an identity too.
    // A training_mode computed at run time may be true: refused as that is
    // (it was an identity, whatever the value fed).
    const bool has_training = n.opset >= 12 && n.has_in(2);
    const Blob* training = has_training ? constant(n.in(2)) : nullptr;
    if (has_training && (!training || training->numel() != 1 || to_ints(*training)[0] != 0)) {
      const Blob* ratio = n.has_in(1) ? constant(n.in(1)) : nullptr;
      if (!ratio || ratio->numel() != 1 || to_doubles(*ratio)[0] != 0.0)
        throw Unsupported{training ? "Dropout in training mode with a ratio other than 0 (its drops are random)"
                                   : "Dropout whose training_mode is computed at run time, with a ratio other than 0 "
                                     "(in training mode its drops are random; a constant false is an identity)"};
    }
  }
  if (const Blob* c = constant(n.in(0))) {  // e.g. an Identity fed by an initializer: the same constant
    constants_[n.out(0)] = *c;
    return;
  }
  add_unary(n, "identity", input(n, 0), n.out(0));
}

// If with a condition known at import (a constant, or computed from
// constants and fixed shapes): the branch taken, its nodes imported in place,
// its outputs the If's. A condition computed at run time is refused.
// If: a condition known at import imports the branch taken in place. One
// computed at run time imports both branches and chooses each output (layer
// choose): both are computed, and the outputs of the one taken are kept,
// whatever their sizes (torchvision's NMS guard: empty boxes or the kept ones).
void Importer::if_op(const Node& n) {
  auto branch_of = [&](const char* name) {
    for (const auto& a : n.proto().attribute())
      if (a.name() == name && a.has_g()) return &a.g();
    throw n.error(fmt::format("If has no {}", name), name);
  };
  auto import_branch = [&](const onnx::GraphProto& branch, const char* name) {
    if (branch.output_size() != n.num_outputs())
      throw n.error(fmt::format("{} has {} outputs, the If {}", name, branch.output_size(), n.num_outputs()), name);
    for (const auto& t : branch.initializer()) {
      constants_[t.name()] = read_tensor(t, src_, n.name, name);
      onnx_types_[t.name()] = t.data_type();
    }
    for (const auto& p : branch.node()) {  // in their order: ONNX asks a subgraph's nodes to be sorted
      const int i = static_cast<int>(nodes_.size());
      nodes_.push_back(&p);
      done_.push_back(true);
      fused_of_.push_back(-1);
      for (const auto& o : p.output())
        if (!o.empty()) producers_[o] = i;
      convert(i);
    }
  };
  auto type_of = [&](const std::string& from) -> std::optional<int> {
    if (auto t = value_types_.find(from); t != value_types_.end()) return t->second;
    if (constant(from))
      if (auto t = onnx_types_.find(from); t != onnx_types_.end() && t->second != onnx::TensorProto::FLOAT) return t->second;
    return std::nullopt;
  };
  if (const Blob* cond = constant(n.in(0)); cond && !size_dependent(n.in(0))) {
    if (cond->numel() != 1) throw n.error(fmt::format("cond has {} elements, not one", cond->numel()), "cond");
    const char* taken = to_doubles(*cond)[0] != 0 ? "then_branch" : "else_branch";
    const onnx::GraphProto& branch = *branch_of(taken);
    import_branch(branch, taken);
    for (int k = 0; k < n.num_outputs(); ++k) {
      const std::string& from = branch.output(k).name();
      const std::string& to = n.out(k);
      if (to.empty()) continue;
      if (unavailable_.count(from)) {
        unavailable_.insert(to);
      } else if (const Blob* c = constant(from)) {
        constants_[to] = *c;
        if (auto t = onnx_types_.find(from); t != onnx_types_.end()) onnx_types_[to] = t->second;
      } else {
        add_unary(n, "identity", as_blob(n, from), to, {}, fmt::format("output{}", k));
        if (auto t = value_types_.find(from); t != value_types_.end()) value_types_[to] = t->second;
      }
    }
    return;
  }
  const onnx::GraphProto& then_branch = *branch_of("then_branch");
  const onnx::GraphProto& else_branch = *branch_of("else_branch");
  // An output wanted whose two sources were both converted (else it is unavailable too).
  auto both_available = [&](const std::string& to, const std::string& a, const std::string& b) {
    if (to.empty()) return false;
    if (!unavailable_.count(a) && !unavailable_.count(b)) return true;
    unavailable_.insert(to);
    return false;
  };
  import_branch(then_branch, "then_branch");
  import_branch(else_branch, "else_branch");
  if (const Blob* cond = constant(n.in(0))) {  // from shapes: the branch is taken when a session plans
    if (cond->numel() != 1) throw n.error(fmt::format("cond has {} elements, not one", cond->numel()), "cond");
    const bool probe = to_doubles(*cond)[0] != 0;
    const std::string c = plan_value(n.in(0));
    for (int k = 0; k < n.num_outputs(); ++k) {
      const std::string& to = n.out(k);
      const std::string& a = then_branch.output(k).name();
      const std::string& b = else_branch.output(k).name();
      if (!both_available(to, a, b)) continue;
      Layer l = make("branch", fmt::format("{}/output{}", n.name, k), {c, as_blob(n, a), as_blob(n, b)}, {to});
      l.params["probe"] = int64_t{probe};
      add(std::move(l));
      const auto t = type_of(probe ? a : b);
      if (t) value_types_[to] = *t;
      if (value_sized(a) || value_sized(b)) value_sized_.insert(to);
    }
    return;
  }
  const std::string cond = input(n, 0);
  for (int k = 0; k < n.num_outputs(); ++k) {
    const std::string& to = n.out(k);
    const std::string& a = then_branch.output(k).name();
    const std::string& b = else_branch.output(k).name();
    if (!both_available(to, a, b)) continue;
    const auto ta = type_of(a), tb = type_of(b);
    if (ta != tb && ta && tb)
      throw n.error(fmt::format("the branches' output {} differ in type", k), "then_branch");
    const std::string x = as_blob(n, a), y = as_blob(n, b);
    if (shape_of(n, x).rank() != shape_of(n, y).rank())
      throw Unsupported{fmt::format("If whose branches give output {} in ranks {} and {}", k, shape_of(n, x).rank(), shape_of(n, y).rank())};
    Layer l = make("choose", fmt::format("{}/output{}", n.name, k), {cond, x, y}, {to});
    add(std::move(l));
    if (ta || tb) value_types_[to] = ta ? *ta : *tb;
    value_sized_.insert(to);
  }
  symbolic_inputs_ = true;  // sizes after it are known at run time
}


core::Graph Importer::body_graph(const Node& n, onnx::GraphProto body, const std::vector<BodyInput>& ins,
                                 std::vector<std::string>& outer, std::vector<int>& output_types) {
  // Each dim symbolic where the model has symbolic dims, at its size here.
  std::map<std::string, int64_t> sizes;
  auto declare = [&](const BodyInput& in) {
    auto* v = body.add_input();
    v->set_name(in.name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(in.type);
    auto* shape = tt->mutable_shape();
    for (int d = 0; d < in.shape.rank(); ++d) {
      auto* dim = shape->add_dim();
      if (symbolic_inputs_) {
        const std::string sym = fmt::format("body{}d{}", body.input_size(), d);
        dim->set_dim_param(sym);
        sizes[sym] = in.shape[d];
      } else {
        dim->set_dim_value(in.shape[d]);
      }
    }
  };
  body.clear_input();
  for (const auto& in : ins) declare(in);
  // Outputs: each a node's (ONNX lets a body hand back an input, a value from
  // outside, or one name twice; a net's outputs are its layers' own).
  std::set<std::string> made, seen;
  for (const auto& node : body.node())
    for (const auto& o : node.output()) made.insert(o);
  output_types.clear();
  for (int k = 0; k < body.output_size(); ++k) {
    auto* o = body.mutable_output(k);
    const int t = o->type().has_tensor_type() ? o->type().tensor_type().elem_type() : 0;
    output_types.push_back(t ? t : static_cast<int>(onnx::TensorProto::FLOAT));
    if (made.count(o->name()) && seen.insert(o->name()).second) continue;
    auto* id = body.add_node();
    id->set_op_type("Identity");
    id->set_name(fmt::format("{}/body_output{}", n.name, k));
    id->add_input(o->name());
    const std::string fresh = fmt::format("{}/body_output{}", n.name, k);
    id->add_output(fresh);
    o->set_name(fresh);
    seen.insert(fresh);
  }
  onnx::NodeProto holder;
  auto* attr = holder.add_attribute();
  attr->set_name("body");
  attr->set_type(onnx::AttributeProto::GRAPH);
  *attr->mutable_g() = body;
  std::set<std::string> reads, produced;
  subgraph_names(holder, reads, produced);
  std::vector<std::pair<std::string, Blob>> copied;
  outer.clear();
  for (const auto& r : reads) {
    if (unavailable_.count(r)) throw Unsupported{fmt::format("its body reads '{}', which is not translated", r)};
    if (const Blob* c = constant(r); c && !size_dependent(r)) {
      copied.emplace_back(r, *c);
      continue;
    }
    const std::string blob = size_dependent(r) ? plan_value(r) : as_blob(n, r);
    declare({r, onnx_type_of(r), shape_of(n, blob)});
    outer.push_back(blob);
  }
  onnx::ModelProto m;
  m.set_ir_version(model_.ir_version());
  *m.mutable_opset_import() = model_.opset_import();
  *m.mutable_functions() = model_.functions();
  *m.mutable_graph() = std::move(body);
  ImportOptions options = options_;
  options.input_shapes.clear();
  Importer nested(m, file_, options, &sizes, nullptr);
  for (const auto& [name, value] : copied) {
    nested.constants_[name] = value;
    if (auto t = onnx_types_.find(name); t != onnx_types_.end()) nested.onnx_types_[name] = t->second;
  }
  core::Graph g;
  try {
    g = nested.run();
    core::optimize(g, import::pass_options(options_));
  } catch (const Error& e) {
    throw Unsupported{fmt::format("its body: {}", e.message())};
  }
  if (g.inputs.size() != ins.size() + outer.size())
    throw Unsupported{fmt::format("its body has {} inputs once translated, {} expected", g.inputs.size(), ins.size() + outer.size())};
  for (auto& t : g.inputs) t.dtype = DType::float32;
  g.output_dtypes.clear();
  return g;
}

void Importer::add_loop(const std::string& name, std::vector<std::string> inputs,
                        std::vector<std::string> outputs, std::map<std::string, Attr> params, const core::Graph& body,
                        const std::vector<int>& output_types) {
  const auto bytes = core::serialize_dnn(body);
  Blob b = Blob::allocate(Shape{static_cast<int64_t>(bytes.size())}, DType::uint8);
  std::memcpy(b.data(), bytes.data(), bytes.size());
  Layer l = make("loop", name, std::move(inputs), outputs);
  l.params = std::move(params);
  l.weights["body"] = std::move(b);
  const bool scans = l.get_int("scan_outputs", 0) > 0;
  const std::size_t carried = static_cast<std::size_t>(l.get_int("carried", 0));
  add(std::move(l));
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    if (k + 1 < output_types.size() && output_types[k + 1] != onnx::TensorProto::FLOAT) value_types_[outputs[k]] = output_types[k + 1];
    if (scans && k >= carried) value_sized_.insert(outputs[k]);
  }
  if (scans) symbolic_inputs_ = true;  // the scan outputs' sizes are known at run time
}

// Loop: the body a graph of its own run per iteration (layer loop): M and cond
// at run time, carried values fed back, scan outputs stacked.
void Importer::loop(const Node& n) {
  const auto* a = n.attr("body");
  if (!a || !a->has_g()) throw n.error("Loop has no body", "body");
  const onnx::GraphProto& body = a->g();
  const int carried = n.num_inputs() - 2;
  if (carried < 0) throw n.error("Loop takes M, cond and the carried values", "input");
  const int scans = n.num_outputs() - carried;
  if (scans < 0) throw n.error(fmt::format("Loop has {} outputs for {} carried values", n.num_outputs(), carried), "output");
  if (body.input_size() != 2 + carried || body.output_size() != 1 + carried + scans)
    throw n.error(fmt::format("the body takes {} inputs and gives {} outputs; the Loop passes {} and reads {}", body.input_size(),
                              body.output_size(), 2 + carried, 1 + carried + scans), "body");
  constexpr int64_t kMostScanTrips = int64_t{1} << 24;
  auto value_blob_of = [&](const std::string& x) { return size_dependent(x) ? plan_value(x) : as_blob(n, x); };
  std::map<std::string, Attr> params{{"carried", int64_t{carried}}, {"scan_outputs", int64_t{scans}}};
  std::vector<std::string> inputs;
  if (!n.has_in(1)) inputs.push_back(scalar_constant(n, n.name + "/cond", 1.0));
  else inputs.push_back(value_blob_of(n.in(1)));
  if (n.has_in(0)) {
    const Blob* m = constant(n.in(0));
    if (m && m->numel() != 1) throw n.error(fmt::format("M has shape {}, not one value", m->shape().to_string()), "M");
    if (m && !size_dependent(n.in(0))) {
      const int64_t trips = std::max<int64_t>(0, to_ints(*m)[0]);
      if (scans && trips > kMostScanTrips)
        throw Unsupported{fmt::format("Loop with scan outputs and trip count M {} (a while loop): the size of its outputs "
                                      "is known only after it ran", trips)};
      params["trip_count"] = trips;
    } else if (m) {
      params["m_input"] = int64_t{1};  // computed from shapes: read when a session plans
      params["trip_count"] = std::max<int64_t>(0, to_ints(*m)[0]);  // (its value at the sizes here)
      inputs.push_back(plan_value(n.in(0)));
    } else {
      if (scans)
        throw Unsupported{"Loop with scan outputs whose trip count M is computed at run time: the size of its outputs "
                          "would be known only after it ran"};
      params["m_input"] = int64_t{2};
      inputs.push_back(input(n, 0));
    }
  } else if (scans) {
    throw Unsupported{"Loop with scan outputs and no trip count M: the size of its outputs is known only after it ran"};
  }
  std::vector<BodyInput> ins{{body.input(0).name(), onnx::TensorProto::INT64, Shape{}},
                             {body.input(1).name(), onnx::TensorProto::BOOL, Shape{}}};
  for (int k = 0; k < carried; ++k) {
    if (!n.has_in(2 + k)) throw n.error(fmt::format("carried value {} is missing", k), "input");
    const std::string x = value_blob_of(n.in(2 + k));
    ins.push_back({body.input(2 + k).name(), onnx_type_of(n.in(2 + k)), shape_of(n, x)});
    inputs.push_back(x);
  }
  std::vector<std::string> outer;
  std::vector<int> types;
  const core::Graph g = body_graph(n, body, ins, outer, types);
  inputs.insert(inputs.end(), outer.begin(), outer.end());
  std::vector<std::string> outputs;
  for (int k = 0; k < n.num_outputs(); ++k) outputs.push_back(output(n, k));
  add_loop(n.name, std::move(inputs), std::move(outputs), std::move(params), g, types);
}

// Scan (opset 9 on): a loop over slices of its scan inputs (each with its scan
// axis moved first and reversed where read from the end; the loop hands the
// body one slice per iteration, the trip count their length); each scan output
// stacked, then reversed or moved to its axis.
void Importer::scan(const Node& n) {
  if (n.opset < 9) throw Unsupported{"Scan of opset 8 (a batch axis and sequence_lens)"};
  const auto* a = n.attr("body");
  if (!a || !a->has_g()) throw n.error("Scan has no body", "body");
  const onnx::GraphProto& body = a->g();
  const int64_t m = n.get_int("num_scan_inputs");
  const int states = n.num_inputs() - static_cast<int>(m);
  if (m < 1 || states < 0) throw n.error(fmt::format("{} scan inputs of {} inputs", m, n.num_inputs()), "num_scan_inputs");
  const int scans = n.num_outputs() - states;
  if (scans < 0) throw n.error(fmt::format("Scan has {} outputs for {} states", n.num_outputs(), states), "output");
  if (body.input_size() != states + m || body.output_size() != states + scans)
    throw n.error(fmt::format("the body takes {} inputs and gives {} outputs; the Scan passes {} and reads {}",
                              body.input_size(), body.output_size(), states + m, states + scans), "body");
  const auto in_axes = n.get_ints("scan_input_axes", std::vector<int64_t>(static_cast<std::size_t>(m), 0));
  const auto in_dirs = n.get_ints("scan_input_directions", std::vector<int64_t>(static_cast<std::size_t>(m), 0));
  const auto out_axes = n.get_ints("scan_output_axes", std::vector<int64_t>(static_cast<std::size_t>(scans), 0));
  const auto out_dirs = n.get_ints("scan_output_directions", std::vector<int64_t>(static_cast<std::size_t>(scans), 0));
  if (in_axes.size() != static_cast<std::size_t>(m) || in_dirs.size() != static_cast<std::size_t>(m))
    throw n.error("scan_input_axes and scan_input_directions need one entry per scan input", "scan_input_axes");
  if (out_axes.size() != static_cast<std::size_t>(scans) || out_dirs.size() != static_cast<std::size_t>(scans))
    throw n.error("scan_output_axes and scan_output_directions need one entry per scan output", "scan_output_axes");

  auto value_blob_of = [&](const std::string& x) { return size_dependent(x) ? plan_value(x) : as_blob(n, x); };
  onnx::GraphProto b = body;
  const std::string cond = "softneuro.scan.cond";
  std::vector<BodyInput> ins{{"softneuro.scan.iteration", onnx::TensorProto::INT64, Shape{}}, {cond, onnx::TensorProto::BOOL, Shape{}}};
  std::vector<std::string> inputs{scalar_constant(n, n.name + "/cond", 1.0)};
  std::vector<std::string> carried_in;
  for (int k = 0; k < states; ++k) {
    const std::string x = value_blob_of(n.in(k));
    ins.push_back({body.input(k).name(), onnx_type_of(n.in(k)), shape_of(n, x)});
    carried_in.push_back(x);
  }
  // Each scan input with its scan axis first (a transpose) and in the order
  // read (a reversing slice): the loop hands the body one slice per iteration.
  int64_t length = -1;
  std::vector<std::string> fulls;
  for (int64_t j = 0; j < m; ++j) {
    const int k = states + static_cast<int>(j);
    std::string x = value_blob_of(n.in(k));
    const Shape xs = shape_of(n, x);
    const int axis = normalized_axis(n, in_axes[static_cast<std::size_t>(j)], xs.rank(), "scan_input_axes");
    if (length >= 0 && xs[axis] != length)
      throw n.error(fmt::format("scan input {} has {} slices along its axis, scan input 0 {}", j, xs[axis], length), "input");
    length = xs[axis];
    if (axis != 0) {
      std::vector<int64_t> perm{axis};
      for (int d = 0; d < xs.rank(); ++d)
        if (d != axis) perm.push_back(d);
      const std::string t = fresh_blob(fmt::format("{}/input{}/axis_first", n.name, j));
      add_unary(n, "transpose", x, t, {{"perm", perm}}, fmt::format("input{}_axis_first", j));
      x = t;
    }
    if (in_dirs[static_cast<std::size_t>(j)] != 0) {
      const std::string r = fresh_blob(fmt::format("{}/input{}/reversed", n.name, j));
      add_unary(n, "slice", x, r,
                {{"starts", std::vector<int64_t>{-1}}, {"ends", std::vector<int64_t>{std::numeric_limits<int64_t>::min()}},
                 {"axes", std::vector<int64_t>{0}}, {"steps", std::vector<int64_t>{-1}}},
                fmt::format("input{}_reversed", j));
      x = r;
    }
    Shape slice = shape_of(n, x);
    ins.push_back({body.input(k).name(), onnx_type_of(n.in(k)), Shape(std::vector<int64_t>(slice.begin() + 1, slice.end()))});
    fulls.push_back(x);
  }
  {  // the body's condition: always true
    auto* id = b.add_node();
    id->set_op_type("Identity");
    id->set_name("softneuro.scan.cond_out");
    id->add_input(cond);
    id->add_output("softneuro.scan.cond_out");
  }
  b.clear_output();
  b.add_output()->set_name("softneuro.scan.cond_out");
  for (const auto& o : body.output()) *b.add_output() = o;

  std::map<std::string, Attr> params{{"carried", int64_t{states}}, {"scan_outputs", int64_t{scans}},
                                     {"scan_inputs", int64_t{m}}};  // (the trip count: their length)
  inputs.insert(inputs.end(), carried_in.begin(), carried_in.end());
  inputs.insert(inputs.end(), fulls.begin(), fulls.end());
  std::vector<std::string> outer;
  std::vector<int> types;
  const core::Graph g = body_graph(n, std::move(b), ins, outer, types);
  inputs.insert(inputs.end(), outer.begin(), outer.end());
  std::vector<std::string> outputs;
  for (int k = 0; k < states; ++k) outputs.push_back(output(n, k));
  // Each scan output stacked along a new first axis, then reversed or moved.
  std::vector<std::pair<std::string, int>> placed;  // (stacked blob, scan output k)
  for (int k = 0; k < scans; ++k) {
    const bool plain = out_dirs[static_cast<std::size_t>(k)] == 0 && out_axes[static_cast<std::size_t>(k)] == 0;
    outputs.push_back(plain ? output(n, states + k) : fresh_blob(fmt::format("{}/stacked{}", n.name, k)));
    if (!plain) placed.emplace_back(outputs.back(), k);
  }
  add_loop(n.name, std::move(inputs), outputs, std::move(params), g, types);
  for (auto& [stacked, k] : placed) {
    std::string x = stacked;
    const std::string y = output(n, states + k);
    const int rank = shape_of(n, x).rank();
    const int axis = normalized_axis(n, out_axes[static_cast<std::size_t>(k)], rank, "scan_output_axes");
    if (out_dirs[static_cast<std::size_t>(k)] != 0) {
      const std::string r = axis == 0 ? y : fresh_blob(y + "/reversed");
      add_unary(n, "slice", x, r,
                {{"starts", std::vector<int64_t>{-1}}, {"ends", std::vector<int64_t>{std::numeric_limits<int64_t>::min()}},
                 {"axes", std::vector<int64_t>{0}}, {"steps", std::vector<int64_t>{-1}}},
                fmt::format("reverse{}", k));
      x = r;
    }
    if (axis != 0) {
      std::vector<int64_t> perm;
      for (int d = 1; d <= axis; ++d) perm.push_back(d);
      perm.push_back(0);
      for (int d = axis + 1; d < rank; ++d) perm.push_back(d);
      add_unary(n, "transpose", x, y, {{"perm", perm}}, fmt::format("axis{}", k));
    }
    if (auto t = value_types_.find(stacked); t != value_types_.end()) value_types_[y] = t->second;
    value_sized_.insert(y);
  }
}

void Importer::cast(const Node& n) { cast_to_type(n, static_cast<int>(n.get_int("to"))); }

// CastLike: Cast to the element type of its second input (a tensor computed at
// run time is float32 here).
void Importer::cast_like(const Node& n) {
  if (!n.has_in(1)) throw n.error("CastLike needs its target_type input", "target_type");
  auto t = onnx_types_.find(n.in(1));
  cast_to_type(n, t != onnx_types_.end() ? t->second : static_cast<int>(onnx::TensorProto::FLOAT));
}

void Importer::cast_to_type(const Node& n, int to) {
  using T = onnx::TensorProto;
  if (const auto narrow = narrow_dtype(to)) return cast_to_narrow(n, *narrow, to);
  const bool to_floating = to == T::FLOAT || to == T::FLOAT16 || to == T::DOUBLE || to == T::BFLOAT16;
  const bool to_integer = to == T::BOOL || to == T::INT8 || to == T::UINT8 || to == T::INT16 || to == T::UINT16 ||
                          to == T::INT32 || to == T::UINT32 || to == T::INT64 || to == T::UINT64;
  if (!to_floating && !to_integer)  // strings, complex
    throw Unsupported{fmt::format("Cast to {}", onnx_type_name(to))};
  if (const Blob* c = constant(n.in(0))) {
    constants_[n.out(0)] = cast_to(*c, to_floating ? DType::float32 : DType::int64);
    return;
  }
  if (to == T::BOOL) {  // x != 0
    Layer l = make("compare", n.name, {input(n, 0), scalar_constant(n, n.out(0) + "/zero", 0.0)}, {n.out(0)});
    l.params["op"] = std::string("not_equal");
    add(std::move(l));
    value_types_[n.out(0)] = to;
    return;
  }
  if (!to_floating && !value_types_.count(n.in(0))) {
    // Floats to an integer type: toward zero, as C converts (ONNX leaves values
    // the type cannot hold undefined; a session refuses them at an output).
    add_unary(n, "round", input(n, 0), n.out(0), {{"mode", std::string("trunc")}});
    value_types_[n.out(0)] = to;
    return;
  }
  if (!to_floating) {
    // An integer tensor into a type that holds all its values (int32 -> int64,
    // uint8 -> int16, ...) is the same numbers.
    auto from = value_types_.find(n.in(0));
    auto range = [](int type) -> std::pair<double, double> {
      switch (type) {
        case T::BOOL: return {0, 1};
        case T::INT8: return {-128, 127};
        case T::UINT8: return {0, 255};
        case T::INT16: return {-32768, 32767};
        case T::UINT16: return {0, 65535};
        case T::INT32: return {-2147483648.0, 2147483647.0};
        case T::UINT32: return {0, 4294967295.0};
        case T::INT64: return {-9.2e18, 9.2e18};
        case T::UINT64: return {0, 1.8e19};
        default:
          if (const auto d = narrow_dtype(type); d && is_integer(*d)) {
            const auto [lo, hi] = core::narrow_integer_range(*d);
            return {static_cast<double>(lo), static_cast<double>(hi)};
          }
          return {1, 0};
      }
    };
    // Run-time integers are float32 inside, exact within +-2^24 (a session
    // refuses others at the edge): a narrowing cast whose type holds every such
    // value of the source (int64 -> int32: RoBERTa's position ids) is the same numbers.
    constexpr double kExact = 16777216.0;
    const double lo = from == value_types_.end() ? 0 : std::max(range(from->second).first, -kExact);
    const double hi = from == value_types_.end() ? 0 : std::min(range(from->second).second, kExact);
    if (from == value_types_.end() || to == T::BOOL || lo < range(to).first || hi > range(to).second)
      throw Unsupported{"Cast of a run-time tensor to a non-float type"};
    add_unary(n, "identity", input(n, 0), n.out(0));
    value_types_[n.out(0)] = to;
    return;
  }
  add_unary(n, "identity", input(n, 0), n.out(0));  // run-time tensors are float32 already
}

// Cast to float8, float4e2m1, int4 ... uint2: the values rounded (or wrapped)
// onto the type's, held in float32 (a cast layer; at import for a constant).
void Importer::cast_to_narrow(const Node& n, DType to, int onnx_type) {
  const bool saturate = n.get_int("saturate", 1) != 0;
  const std::string round_mode = n.get_string("round_mode", "up");
  core::ScaleRounding rounding;
  try {
    rounding = core::parse_scale_rounding(round_mode);
  } catch (const Error& e) {
    throw n.error(e.message(), "round_mode");
  }
  if (const Blob* c = constant(n.in(0))) {
    const std::vector<double> v = to_doubles(*c);
    Blob out = uninitialized_blob(c->shape(), is_integer(to) ? DType::int64 : DType::float32);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const float y = core::narrowed(to, static_cast<float>(v[i]), saturate, rounding);
      if (is_integer(to)) out.data_as<int64_t>()[i] = static_cast<int64_t>(y);
      else out.data_as<float>()[i] = y;
    }
    constants_[n.out(0)] = out;
    return;
  }
  add_cast(n, input(n, 0), n.out(0), to, saturate, round_mode);
  if (is_integer(to)) value_types_[n.out(0)] = onnx_type;
}

void Importer::flatten(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  int64_t axis = n.get_int("axis", 1);
  if (axis < 0) axis += xs.rank();
  if (axis < 0 || axis > xs.rank()) throw n.error(fmt::format("axis out of range for rank {}", xs.rank()), "axis");
  int64_t a = 1, b = 1;
  for (int i = 0; i < xs.rank(); ++i) (i < axis ? a : b) *= xs[i];
  if (constant(n.in(0))) return reshape_to(n, n.in(0), Shape{a, b}, n.out(0));
  add_unary(n, "flatten", input(n, 0), n.out(0), {{"axis", axis}});
}

void Importer::reshape(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const auto spec = constant_ints(n, 1, "shape");
  const bool allow_zero = n.get_int("allowzero", 0) != 0;
  if (spec.size() > static_cast<std::size_t>(Shape::max_rank)) throw n.error("too many dims", "shape");
  // ONNX semantics resolved here: 0 copies the input dim (unless allowzero), -1 is inferred.
  Shape out;
  int infer = -1;
  int64_t known = 1;
  for (std::size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allow_zero) {
      if (static_cast<int>(i) >= xs.rank()) throw n.error("0 refers past the input's rank", "shape");
      d = xs[static_cast<int>(i)];
    } else if (d == -1) {
      if (infer >= 0) throw n.error("more than one -1", "shape");
      infer = static_cast<int>(i);
      d = 1;
    } else if (d < 0) {
      throw n.error(fmt::format("invalid dim {}", d), "shape");
    }
    out.push_back(d);
    if (static_cast<int>(i) != infer && __builtin_mul_overflow(known, d, &known))
      throw n.error(fmt::format("the dims [{}] multiply beyond int64", fmt::join(spec, ",")), "shape");
  }
  if (infer >= 0) {
    if (known == 0 || xs.numel() % known) throw n.error(fmt::format("cannot reshape {} into [{}]", xs.to_string(), fmt::join(spec, ",")), "shape");
    out[infer] = xs.numel() / known;
  }
  if (out.numel() != xs.numel())
    throw n.error(fmt::format("cannot reshape {} into {}", xs.to_string(), out.to_string()), "shape");
  if (value_sized(n.in(0)) && !size_dependent(n.in(1))) {  // ONNX's 0 and -1 resolved when planned
    Layer l = make("reshape", n.name, {input(n, 0)}, {n.out(0)});
    l.params["shape"] = spec;
    if (allow_zero) l.params["allowzero"] = int64_t{1};
    return add(std::move(l));
  }
  if (size_dependent(n.in(1)) && !constant(n.in(0))) {  // the target is computed at every size
    Layer l = make("reshape", n.name, {input(n, 0), plan_value(n.in(1))}, {n.out(0)});
    l.params["shape"] = out.to_vector();
    if (allow_zero) l.params["allowzero"] = int64_t{1};
    return add(std::move(l));
  }
  reshape_to(n, n.in(0), out, n.out(0));
}

void Importer::squeeze(const Node& n) {
  const bool unsqueeze = n.op() == "Unsqueeze";
  const Shape xs = shape_of(n, n.in(0));
  // Opset 13 moved axes from an attribute to an input.
  std::vector<int64_t> axes;
  if (n.opset >= 13) {
    if (n.has_in(1)) axes = constant_ints(n, 1, "axes");
  } else {
    axes = n.get_ints("axes", std::vector<int64_t>{});
  }
  const int out_rank = unsqueeze ? xs.rank() + static_cast<int>(axes.size()) : xs.rank();
  if (unsqueeze && (axes.empty() || out_rank > Shape::max_rank)) throw n.error("invalid axes", "axes");
  std::vector<bool> marked(static_cast<std::size_t>(out_rank));
  for (auto a : axes) {
    if (a < -out_rank || a >= out_rank) throw n.error(fmt::format("axis {} out of range", a), "axes");
    marked[static_cast<std::size_t>(a < 0 ? a + out_rank : a)] = true;
  }
  Shape out;
  std::vector<int64_t> copy;  // the input dim each output dim is (-1: an inserted 1)
  if (unsqueeze) {
    for (int i = 0, j = 0; i < out_rank; ++i) {
      const bool inserted = marked[static_cast<std::size_t>(i)];
      copy.push_back(inserted ? -1 : j);
      out.push_back(inserted ? 1 : xs[j++]);
    }
  } else {
    if (axes.empty() && value_sized(n.in(0))) throw Unsupported{"Squeeze without axes of a tensor whose size is known at run time"};
    for (int i = 0; i < xs.rank(); ++i) {
      const bool drop = axes.empty() ? xs[i] == 1 : marked[static_cast<std::size_t>(i)];
      if (drop && xs[i] != 1 && !value_sized(n.in(0))) throw n.error(fmt::format("cannot squeeze dim {} of size {}", i, xs[i]), "axes");
      if (!drop) out.push_back(xs[i]), copy.push_back(i);
    }
  }
  if (value_sized(n.in(0))) {  // the dims copied when planned
    Layer l = make("reshape", n.name, {input(n, 0)}, {n.out(0)});
    std::vector<int64_t> spec(copy.size(), 1);
    l.params["shape"] = spec;
    l.params["copy_dims"] = copy;
    return add(std::move(l));
  }
  reshape_to(n, n.in(0), out, n.out(0));
}

void Importer::concat(const Node& n) {
  const int64_t axis_attr = n.get_int("axis");
  std::vector<const Blob*> parts;
  for (int k = 0; k < n.num_inputs(); ++k) parts.push_back(constant(n.in(k)));
  const int rank = shape_of(n, n.in(0)).rank();
  if (axis_attr < -rank || axis_attr >= rank) throw n.error(fmt::format("axis {} out of range for rank {}", axis_attr, rank), "axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  if (std::all_of(parts.begin(), parts.end(), [](const Blob* b) { return b != nullptr; })) {
    const bool ints = std::all_of(parts.begin(), parts.end(), [](const Blob* b) { return b->dtype() == DType::int64; });
    std::vector<Blob> blobs;
    for (const Blob* b : parts) blobs.push_back(cast_to(*b, ints ? DType::int64 : DType::float32));
    try {
      constants_[n.out(0)] = concatenated(blobs, axis);
    } catch (const Error& e) {
      throw n.error(e.message(), "input");
    }
    return;
  }
  std::vector<std::string> inputs;
  for (int k = 0; k < n.num_inputs(); ++k)
    if (!(parts[static_cast<std::size_t>(k)] && parts[static_cast<std::size_t>(k)]->numel() == 0)) inputs.push_back(input(n, k));
  Layer l = make("concat", n.name, inputs, {n.out(0)});
  l.params["axis"] = int64_t{axis};
  add(std::move(l));
}

void Importer::split(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int64_t axis_attr = n.get_int("axis", 0);
  if (axis_attr < -xs.rank() || axis_attr >= xs.rank()) throw n.error("axis out of range", "axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + xs.rank() : axis_attr);
  // Opset 13 moved the sizes from an attribute to an input; without them the parts are equal.
  std::vector<int64_t> sizes = n.opset >= 13 ? (n.has_in(1) ? constant_ints(n, 1, "split") : std::vector<int64_t>{})
                                             : n.get_ints("split", std::vector<int64_t>{});
  const int parts = n.num_outputs();
  if (sizes.empty() && n.opset >= 18 && n.has("num_outputs")) {
    // Opset 18: num_outputs chunks of ceil(dim / num_outputs), the last one smaller.
    const int64_t num = n.get_int("num_outputs");
    if (num != parts) throw n.error(fmt::format("num_outputs {} for {} outputs", num, parts), "num_outputs");
    const int64_t chunk = (xs[axis] + num - 1) / std::max<int64_t>(1, num);
    for (int64_t k = 0; k < num; ++k) sizes.push_back(std::max<int64_t>(0, std::min(chunk, xs[axis] - k * chunk)));
  }
  if (sizes.empty()) {
    if (parts == 0 || xs[axis] % parts) throw n.error(fmt::format("dim {} does not split into {} equal parts", xs[axis], parts), "split");
    sizes.assign(static_cast<std::size_t>(parts), xs[axis] / parts);
  }
  if (static_cast<int>(sizes.size()) != parts) throw n.error(fmt::format("{} sizes for {} outputs", sizes.size(), parts), "split");
  if (const Blob* c = constant(n.in(0))) {
    int64_t begin = 0;
    for (int k = 0; k < parts; ++k) {
      const int64_t size = sizes[static_cast<std::size_t>(k)];
      if (size < 0 || begin + size > xs[axis]) throw n.error("split sizes exceed the dim", "split");
      if (!n.out(k).empty()) constants_[n.out(k)] = sliced(*c, {{axis, begin, begin + size, 1}});
      begin += size;
    }
    return;
  }
  std::vector<std::string> outs;
  for (int k = 0; k < parts; ++k) outs.push_back(output(n, k));
  Layer l = make("split", n.name, {input(n, 0)}, outs);
  l.params["axis"] = int64_t{axis};
  l.params["split"] = sizes;
  add(std::move(l));
}

void Importer::slice(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  const auto starts = constant_ints(n, 1, "starts"), ends = constant_ints(n, 2, "ends");
  std::vector<int64_t> axes, steps;
  if (n.has_in(3)) axes = constant_ints(n, 3, "axes");
  else for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (n.has_in(4)) steps = constant_ints(n, 4, "steps");
  else steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    throw n.error("starts, ends, axes and steps differ in length", "starts");
  std::vector<SliceAxis> spec;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    int64_t a = axes[i];
    if (a < -rank || a >= rank) throw n.error(fmt::format("axis {} out of range for rank {}", a, rank), "axes");
    if (a < 0) a += rank;
    const int64_t step = steps[i];
    if (step == 0) throw n.error("step 0", "steps");
    const core::SliceRange r = core::slice_range(starts[i], ends[i], step, xs[static_cast<int>(a)]);  // ONNX's clamping
    const int64_t last = r.start + (r.count ? r.count - 1 : 0) * step;  // (within the dim: no overflow)
    spec.push_back({static_cast<int>(a), r.start, r.count == 0 ? r.start : step > 0 ? last + 1 : last - 1, step});
  }
  if (const Blob* c = constant(n.in(0))) {
    constants_[n.out(0)] = sliced(*c, spec);
    return;
  }
  if (value_sized(n.in(0))) {  // clamped to the dims when planned
    std::vector<int64_t> norm_axes;
    for (const auto& c : spec) norm_axes.push_back(c.axis);
    Layer l = make("slice", n.name, {input(n, 0)}, {n.out(0)});
    l.params = {{"starts", starts}, {"ends", ends}, {"axes", norm_axes}, {"steps", steps}};
    return add(std::move(l));
  }
  // At run time: split layers, one cut per sliced axis (see slice_blob and slice_strided).
  std::string cur = n.in(0);
  std::vector<SliceAxis> cuts;
  for (const auto& s : spec) {
    if (s.step > 0 ? s.end <= s.start : s.end >= s.start) throw Unsupported{"Slice of a run-time tensor to nothing"};
    if (s.start != 0 || s.end != xs[s.axis] || s.step != 1) cuts.push_back(s);
  }
  if (cuts.empty()) return add_unary(n, "identity", input(n, 0), n.out(0));
  for (std::size_t i = 0; i < cuts.size(); ++i) {
    const auto& c = cuts[i];
    const std::string next = i + 1 == cuts.size() ? n.out(0) : fresh_blob(fmt::format("{}/axis{}", n.out(0), c.axis));
    if (c.step < 0) {  // going backwards (x[::-1]): the elements taken one by one, in that order
      std::vector<int64_t> idx;
      for (int64_t k = c.start; k > c.end; k += c.step) idx.push_back(k);
      take(n, cur, c.axis, idx, next);
    } else if (c.step == 1) slice_blob(n, cur, c.axis, c.start, c.end, next);
    else slice_strided(n, cur, c.axis, c.start, (c.end - c.start + c.step - 1) / c.step, c.step, next);
    cur = next;
  }
}

void Importer::take(const Node& n, const std::string& x, int axis, const std::vector<int64_t>& idx, const std::string& y) {
  // The runs of consecutive indices sliced and concatenated along the axis.
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t i : idx) {
    if (!runs.empty() && runs.back().second == i) ++runs.back().second;
    else runs.push_back({i, i + 1});
  }
  constexpr std::size_t kMaxRuns = 256;
  if (idx.empty() || runs.size() > kMaxRuns)
    throw Unsupported{fmt::format("{} of a run-time tensor taking {} indices in {} runs (at most {})", n.op(), idx.size(),
                                  runs.size(), kMaxRuns)};
  if (runs.size() == 1) return slice_blob(n, x, axis, runs[0].first, runs[0].second, y);
  std::vector<std::string> parts;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    parts.push_back(fresh_blob(fmt::format("{}/run{}", y, r)));
    slice_blob(n, x, axis, runs[r].first, runs[r].second, parts.back());
  }
  Layer c = make("concat", fresh_blob(n.name + "/join"), parts, {y});
  c.params["axis"] = int64_t{axis};
  add(std::move(c));
}

void Importer::slice_strided(const Node& n, const std::string& x, int axis, int64_t start, int64_t count, int64_t step,
                             const std::string& y) {
  // Every step-th element (x[..., 1::2] in patch merging): a run of count*step
  // elements seen as [count, step], of which one column is kept. The run starts
  // j <= start % step before `start`, wherever it fits in the dim.
  const Shape xs = shape_of(n, x);
  const int64_t dim = xs[axis];
  int64_t j = 0;
  while (j < step && j <= start && start - j + count * step > dim) ++j;
  if (j == step || j > start || xs.rank() + 1 > Shape::max_rank)
    throw Unsupported{fmt::format("Slice of a run-time tensor with step {} that does not tile the dim", step)};
  const int64_t base = start - j;
  const std::string run = fresh_blob(y + "/run"), grid = fresh_blob(y + "/grid"), column = fresh_blob(y + "/column");
  slice_blob(n, x, axis, base, base + count * step, run);
  std::vector<int64_t> grid_shape, out_shape = xs.to_vector();
  for (int d = 0; d < xs.rank(); ++d) {
    if (d == axis) {
      grid_shape.push_back(count);
      grid_shape.push_back(step);
    } else {
      grid_shape.push_back(xs[d]);
    }
  }
  out_shape[static_cast<std::size_t>(axis)] = count;
  add_unary(n, "reshape", run, grid, {{"shape", grid_shape}}, "grid");
  slice_blob(n, grid, axis + 1, j, j + 1, column);
  add_unary(n, "reshape", column, y, {{"shape", out_shape}}, "strided");
}

void Importer::gather(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int64_t axis_attr = n.get_int("axis", 0);
  if (axis_attr < -xs.rank() || axis_attr >= xs.rank()) throw n.error("axis out of range", "axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + xs.rank() : axis_attr);
  const Blob* indices = constant(n.in(1));
  if (!indices || (size_dependent(n.in(1)) && !constant(n.in(0))) || value_sized(n.in(0))) {
    // Run-time indices (token ids into an embedding table), or data whose size is
    // known at run time: a gather layer, which checks each index (negative ones from the end).
    const Blob* table = constant(n.in(0));
    const int table_type = table ? elem_type(n.in(0)) : -1;
    const bool integer_table = table_type == onnx::TensorProto::INT8 || table_type == onnx::TensorProto::UINT8;
    // An integer table (ONNX Runtime's quantize_dynamic: int8 rows gathered,
    // then DequantizeLinear) stays a weight in its integers; the pass
    // fold_dequantized_gather gives it the scale and zero point after it.
    std::vector<std::string> inputs;
    if (!integer_table) inputs.push_back(input(n, 0));
    inputs.push_back(input(n, 1));
    Layer l = make("gather", n.name, std::move(inputs), {n.out(0)});
    if (integer_table) {
      // (Read as int64 values: held in their own type, a byte each.)
      const bool is_signed = table_type == onnx::TensorProto::INT8;
      Blob bytes = Blob::allocate(table->shape(), is_signed ? DType::int8 : DType::uint8);
      const std::vector<int64_t> v = to_ints(*table);
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] < (is_signed ? -128 : 0) || v[i] > (is_signed ? 127 : 255))
          throw n.error(fmt::format("value {} lies outside the table's type", v[i]), "data");
        if (is_signed) bytes.data_as<int8_t>()[i] = static_cast<int8_t>(v[i]);
        else bytes.data_as<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
      }
      l.weights["table"] = std::move(bytes);
      value_types_[n.out(0)] = table_type;
    }
    l.params["axis"] = int64_t{axis};
    add(std::move(l));
    return;
  }
  if (const Blob* data = constant(n.in(0))) {
    try {
      constants_[n.out(0)] = gathered(*data, *indices, axis);
    } catch (const Error& e) {
      throw n.error(e.message(), "indices");
    }
    return;
  }
  // Run-time data: a constant index (x[:, 0]) or a run of consecutive ones is a slice.
  std::vector<int64_t> idx = to_ints(*indices);
  const int64_t dim = xs[axis];
  for (auto& i : idx) {
    if (i < -dim || i >= dim) throw n.error(fmt::format("index {} out of range for a dim of {}", i, dim), "indices");
    if (i < 0) i += dim;
  }
  const bool scalar_index = indices->shape().rank() == 0;
  bool run = !idx.empty() && indices->shape().rank() <= 1;
  for (std::size_t i = 1; run && i < idx.size(); ++i) run = idx[i] == idx[i - 1] + 1;
  if (!run) {
    // Any other constant indices: taken along the axis, then the indices' shape put in its place.
    const std::string joined = fresh_blob(n.out(0) + "/joined");
    take(n, n.in(0), axis, idx, joined);
    Shape out;
    for (int d = 0; d < axis; ++d) out.push_back(xs[d]);
    for (int d = 0; d < indices->shape().rank(); ++d) out.push_back(indices->shape()[d]);
    for (int d = axis + 1; d < xs.rank(); ++d) out.push_back(xs[d]);
    if (out.rank() > Shape::max_rank) throw n.error(fmt::format("the output has rank {}", out.rank()), "indices");
    add_unary(n, "reshape", joined, n.out(0), {{"shape", out.to_vector()}}, "index_shape");
    return;
  }
  const int64_t begin = idx.front(), end = idx.back() + 1;
  if (!scalar_index) return slice_blob(n, n.in(0), axis, begin, end, n.out(0));
  const std::string part = fresh_blob(n.out(0) + "/slice");
  slice_blob(n, n.in(0), axis, begin, end, part);
  Shape out;
  for (int d = 0; d < xs.rank(); ++d)
    if (d != axis) out.push_back(xs[d]);
  add_unary(n, "reshape", part, n.out(0), {{"shape", out.to_vector()}}, "drop_axis");
}

void Importer::transpose(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  std::vector<int64_t> reversed;
  for (int i = xs.rank() - 1; i >= 0; --i) reversed.push_back(i);
  const auto perm = n.get_ints("perm", reversed);
  if (const Blob* c = constant(n.in(0))) {
    try {
      constants_[n.out(0)] = transposed(*c, perm);
    } catch (const Error& e) {
      throw n.error(e.message(), "perm");
    }
    return;
  }
  add_unary(n, "transpose", input(n, 0), n.out(0), {{"perm", perm}});
}

void Importer::pad(const Node& n) {
  const std::string mode = n.get_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") throw Unsupported{fmt::format("Pad mode '{}'", mode)};
  auto pads = constant_ints(n, 1, "pads");
  if (n.has_in(3)) {  // opset 18: pads for these axes only, the others unpadded
    const int rank = shape_of(n, n.in(0)).rank();
    auto axes = constant_ints(n, 3, "axes");
    if (pads.size() != 2 * axes.size())
      throw n.error(fmt::format("{} pads for {} axes", pads.size(), axes.size()), "pads");
    std::vector<int64_t> full(static_cast<std::size_t>(2 * rank), 0);
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const int64_t a = normalized_axis(n, axes[i], rank, "axes");
      full[static_cast<std::size_t>(a)] = pads[i];
      full[static_cast<std::size_t>(a + rank)] = pads[i + axes.size()];
    }
    pads = std::move(full);
  }
  for (auto p : pads)
    if (p < 0) throw Unsupported{"Pad with negative pads (cropping)"};
  std::map<std::string, Attr> params{{"pads", pads}, {"mode", mode}};
  if (n.has_in(2)) params["value"] = constant_scalar(n, 2, "constant_value");
  add_unary(n, "pad", input(n, 0), n.out(0), std::move(params));
}

// Resize (opset 11+): inputs X, roi, scales, sizes (roi and scales optional from 13).
void Importer::resize(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  if (rank != 4) throw Unsupported{fmt::format("Resize of a rank-{} tensor (images [N,C,H,W] only)", rank)};
  const std::string mode = n.get_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic") throw Unsupported{fmt::format("Resize mode '{}'", mode)};
  const bool antialias = n.get_int("antialias", 0) != 0 && mode != "nearest";  // (nearest ignores it)
  if (mode == "linear" && !antialias && n.get_int("exclude_outside", 0) != 0)
    throw Unsupported{"linear Resize with exclude_outside (without antialias its two taps are inside)"};
  std::map<std::string, Attr> params{
      {"mode", mode},
      {"coordinate_transformation_mode", n.get_string("coordinate_transformation_mode", "half_pixel")},
      {"nearest_mode", n.get_string("nearest_mode", "round_prefer_floor")}};
  if (mode == "cubic") params["cubic_coeff_a"] = n.get_float("cubic_coeff_a", -0.75);
  if (mode == "cubic" || antialias) params["exclude_outside"] = n.get_int("exclude_outside", 0);
  if (antialias) params["antialias"] = int64_t{1};
  // axes: scales, sizes and roi name only these dims; the others keep their size.
  std::vector<int64_t> axes = n.get_ints("axes", std::vector<int64_t>{});
  for (auto& a : axes) a = normalized_axis(n, a, rank, "axes");
  if (axes.empty()) {
    axes.resize(static_cast<std::size_t>(rank));
    std::iota(axes.begin(), axes.end(), int64_t{0});
  }
  auto full = [&](const std::vector<double>& given, double fill, const char* field) {
    if (given.size() != axes.size())
      throw n.error(fmt::format("{} values for {} axes", given.size(), axes.size()), field);
    std::vector<double> out(static_cast<std::size_t>(rank), fill);
    for (std::size_t i = 0; i < axes.size(); ++i) out[static_cast<std::size_t>(axes[i])] = given[i];
    return out;
  };
  auto present = [&](int k) { return n.has_in(k) && shape_of(n, n.in(k)).numel() > 0; };
  if (present(3)) {
    std::vector<double> given;
    for (int64_t v : constant_ints(n, 3, "sizes")) given.push_back(static_cast<double>(v));
    const std::string policy = n.get_string("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") {  // one scale for every named axis: the largest that fits, or the smallest that covers
      if (policy != "not_larger" && policy != "not_smaller")
        throw n.error(fmt::format("keep_aspect_ratio_policy '{}' (stretch, not_larger, not_smaller)", policy), "keep_aspect_ratio_policy");
      double scale = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0;
      for (std::size_t i = 0; i < axes.size(); ++i) {
        const double r = given[i] / static_cast<double>(xs[static_cast<int>(axes[i])]);
        scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
      }
      for (std::size_t i = 0; i < axes.size(); ++i)
        given[i] = std::round(scale * static_cast<double>(xs[static_cast<int>(axes[i])]));  // half away from zero, as ONNX's reference
    }
    std::vector<double> in_dims;
    for (int d = 0; d < rank; ++d) in_dims.push_back(static_cast<double>(xs[d]));
    std::vector<double> sizes = full(given, 0, "sizes");
    std::vector<int64_t> out;
    for (int d = 0; d < rank; ++d)
      out.push_back(static_cast<int64_t>(std::find(axes.begin(), axes.end(), d) != axes.end() ? sizes[static_cast<std::size_t>(d)] : in_dims[static_cast<std::size_t>(d)]));
    params["sizes"] = out;
  } else if (present(2)) {
    params["scales"] = full(to_doubles(require_constant(n, 2, "scales")), 1.0, "scales");
  } else {
    throw n.error("neither scales nor sizes given", "scales");
  }
  if (std::get<std::string>(params["coordinate_transformation_mode"]) == "tf_crop_and_resize") {
    if (!present(1)) throw n.error("tf_crop_and_resize needs roi", "roi");
    const std::vector<double> roi = to_doubles(require_constant(n, 1, "roi"));
    if (roi.size() != 2 * axes.size()) throw n.error(fmt::format("roi has {} values for {} axes", roi.size(), axes.size()), "roi");
    const std::vector<double> starts = full({roi.begin(), roi.begin() + static_cast<std::ptrdiff_t>(axes.size())}, 0.0, "roi"),
                              ends = full({roi.begin() + static_cast<std::ptrdiff_t>(axes.size()), roi.end()}, 1.0, "roi");
    std::vector<double> all = starts;
    all.insert(all.end(), ends.begin(), ends.end());
    params["roi"] = all;
    params["extrapolation_value"] = n.get_float("extrapolation_value", 0.0);
  }
  add_unary(n, "resize", input(n, 0), n.out(0), std::move(params));
}

void Importer::expand(const Node& n) {
  const auto dims = constant_ints(n, 1, "shape");
  if (dims.size() > static_cast<std::size_t>(Shape::max_rank)) throw n.error("too many dims", "shape");
  Shape target(dims);
  Shape out;
  try {
    out = broadcast(shape_of(n, n.in(0)), target);
  } catch (const Error& e) {
    throw n.error(e.message(), "shape");
  }
  if (const Blob* c = constant(n.in(0))) {
    try {
      constants_[n.out(0)] = expanded(*c, out);
    } catch (const Error& e) {
      throw n.error(e.message(), "shape");
    }
    return;
  }
  // Broadcasting against zeros of the output's shape is an expand.
  try {
    check_folded_growth(out, DType::float32, 0);
  } catch (const Error& e) {
    throw n.error(e.message(), "shape");
  }
  // A target that follows the input sizes is an expand at every size, also
  // where it changes nothing at the import size (BERT's token-type ids to
  // [batch, sequence] at batch 1: an identity there, an expand at batch 2,
  // made the batch fixed).
  if (out == shape_of(n, n.in(0)) && !size_dependent(n.in(1))) return add_unary(n, "identity", input(n, 0), n.out(0));
  if (size_dependent(n.in(1))) {
    // A target that follows the input's size (a QOperator YOLOv8's anchor
    // grid, expanded on integers): its zeros are made at each size, as a
    // shape_math layer, not frozen at the import size.
    Layer z;
    z.type = "shape_math";
    z.name = fresh_layer(n.name + "/zeros", false);
    z.outputs = {fresh_blob(n.out(0) + "/zeros")};
    z.params["op"] = std::string("constant_of_shape");
    z.weights["value"] = float_blob({}, {0.0f});
    z.inputs = {plan_value(n.in(1))};
    shapes_[z.outputs[0]] = target;
    const std::string zeros = z.outputs[0];
    graph_.layers.push_back(std::move(z));
    add(make("add", n.name, {input(n, 0), zeros}, {n.out(0)}));
    return;
  }
  const std::string zeros = add_constant(n.out(0) + "/zeros", Blob::allocate(out));
  add(make("add", n.name, {input(n, 0), as_blob(n, zeros)}, {n.out(0)}));
}

void Importer::constant_node(const Node& n) {
  const std::string& y = n.out(0);
  if (const auto* a = n.attr("value")) {
    if (a->type() != onnx::AttributeProto::TENSOR) throw n.error("expected a tensor", "value");
    constants_[y] = read_tensor(a->t(), src_, n.name, "value");
    onnx_types_[y] = a->t().data_type();
  } else if (n.has("value_float")) {
    constants_[y] = float_blob({}, {static_cast<float>(n.get_float("value_float"))});
  } else if (const auto* fs = n.attr("value_floats")) {
    constants_[y] = float_blob(Shape{fs->floats_size()}, {fs->floats().begin(), fs->floats().end()});
  } else if (n.has("value_int")) {
    constants_[y] = int_blob({}, {n.get_int("value_int")});
  } else if (n.has("value_ints")) {
    auto v = n.get_ints("value_ints");
    constants_[y] = int_blob(Shape{static_cast<int64_t>(v.size())}, v);
  } else {
    throw Unsupported{"Constant of a sparse tensor or strings"};
  }
}

void Importer::shape(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  int64_t start = n.get_int("start", 0), end = n.get_int("end", rank);  // opset 15
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<int64_t> dims(xs.begin() + start, xs.begin() + end);
  constants_[n.out(0)] = int_blob(Shape{static_cast<int64_t>(dims.size())}, dims);
}

void Importer::size(const Node& n) { constants_[n.out(0)] = int_blob({}, {shape_of(n, n.in(0)).numel()}); }

void Importer::constant_of_shape(const Node& n) {
  const auto dims = constant_ints(n, 0, "input");
  if (dims.size() > static_cast<std::size_t>(Shape::max_rank)) throw n.error("too many dims", "input");
  for (auto d : dims)
    if (d < 0) throw n.error("negative dim", "input");
  Blob value = float_blob({}, {0.0f});
  if (const auto* a = n.attr("value")) {
    if (a->type() != onnx::AttributeProto::TENSOR) throw n.error("expected a tensor", "value");
    value = read_tensor(a->t(), src_, n.name, "value");
    if (value.numel() != 1) throw n.error("expected one value", "value");
  }
  try {
    constants_[n.out(0)] = expanded(reshaped(value, Shape{}), Shape(dims));
  } catch (const Error& e) {
    throw n.error(e.message(), "input");
  }
}

void Importer::range(const Node& n) {
  const Blob& s = require_constant(n, 0, "start");
  const Blob& l = require_constant(n, 1, "limit");
  const Blob& d = require_constant(n, 2, "delta");
  try {
    constants_[n.out(0)] = core::arange(s, l, d, int64_t{1} << 28);
  } catch (const Error& e) {
    throw n.error(e.message(), "limit");
  }
}

void Importer::equal(const Node& n) {
  const Blob& a = require_constant(n, 0, "A");
  const Blob& b = require_constant(n, 1, "B");
  try {
    constants_[n.out(0)] = binary(BinaryOp::equal, a, b);
  } catch (const Error& e) {
    throw n.error(e.message(), "input");
  }
}

void Importer::where_op(const Node& n) {
  if (!all_constant(n)) {
    add(make("where", n.name, {input(n, 0), input(n, 1), input(n, 2)}, {n.out(0)}));
    for (int k : {1, 2})  // the values' type, not the condition's
      if (auto t = value_types_.find(n.in(k)); t != value_types_.end()) value_types_[n.out(0)] = t->second;
      else if (auto c = onnx_types_.find(n.in(k)); c != onnx_types_.end() && edge_dtype(c->second) &&
                                                  is_integer(*edge_dtype(c->second)))
        value_types_[n.out(0)] = c->second;
    return;
  }
  const Blob& c = require_constant(n, 0, "condition");
  const Blob& a = require_constant(n, 1, "X");
  const Blob& b = require_constant(n, 2, "Y");
  try {
    constants_[n.out(0)] = where(c, a, b);
  } catch (const Error& e) {
    throw n.error(e.message(), "input");
  }
}

// Comparisons, logic and rounding: computed at import where every input is a
// constant (index and mask arithmetic), else layers whose results are 0/1
// (compare, logical) or whole numbers (round), held as floats and typed bool.
void Importer::compare(const Node& n) {
  static const std::map<std::string, std::string> ops = {{"Equal", "equal"},        {"Less", "less"},
                                                         {"Greater", "greater"},    {"LessOrEqual", "less_equal"},
                                                         {"GreaterOrEqual", "greater_equal"}};
  if (all_constant(n) && n.op() == "Equal") return equal(n);
  if (all_constant(n) && (n.op() == "Less" || n.op() == "Greater")) return constant_math(n);
  Layer l = make("compare", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
  l.params["op"] = ops.at(n.op());
  add(std::move(l));
  value_types_[n.out(0)] = onnx::TensorProto::BOOL;
}

// MeanVarianceNormalization: (x - mean) / (sqrt(mean((x - mean)^2)) + 1e-9)
// over `axes` (default 0, 2, 3), as the operator's function body adds the epsilon.
void Importer::mean_variance_normalization(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  std::vector<int64_t> axes = n.get_ints("axes", std::vector<int64_t>{0, 2, 3});
  for (auto& a : axes) a = normalized_axis(n, a, xs.rank(), "axes");
  const std::string x = input(n, 0), y = n.out(0), mean = fresh_blob(y + "/mean"), centred = fresh_blob(y + "/centred"),
                    squared = fresh_blob(y + "/squared"), variance = fresh_blob(y + "/variance"), std_dev = fresh_blob(y + "/std"),
                    guarded = fresh_blob(y + "/guarded");
  const std::map<std::string, Attr> reduce{{"mode", std::string("mean")}, {"axes", axes}, {"keepdims", int64_t{1}}};
  add_unary(n, "reduce", x, mean, reduce, "mean");
  add(make("sub", n.name + "/centre", {x, mean}, {centred}));
  add(make("mul", n.name + "/square", {centred, centred}, {squared}));
  add_unary(n, "reduce", squared, variance, reduce, "variance");
  add_unary(n, "sqrt", variance, std_dev, {}, "std");
  add(make("add", n.name + "/epsilon", {std_dev, scalar_constant(n, y + "/epsilon", 1e-9)}, {guarded}));
  add(make("div", n.name, {centred, guarded}, {y}));
}

// Sign: (x > 0) - (x < 0), and NaN where x is NaN (x == x false).
void Importer::sign(const Node& n) {
  const std::string x = input(n, 0), y = n.out(0), zero = scalar_constant(n, y + "/zero", 0.0);
  const std::string pos = fresh_blob(y + "/positive"), neg = fresh_blob(y + "/negative"), diff = fresh_blob(y + "/sign"),
                    number = fresh_blob(y + "/number");
  auto compare = [&](const std::string& a, const std::string& b, const char* op, const std::string& out) {
    Layer l = make("compare", fresh_blob(n.name + "/" + op), {a, b}, {out});
    l.params["op"] = std::string(op);
    add(std::move(l));
  };
  compare(x, zero, "greater", pos);
  compare(x, zero, "less", neg);
  add(make("sub", n.name + "/sub", {pos, neg}, {diff}));
  compare(x, x, "equal", number);
  add(make("where", n.name, {number, diff, x}, {y}));
}

void Importer::logical(const Node& n) {
  if (all_constant(n) && n.op() != "Xor") return constant_math(n);
  if (n.op() == "Not") {  // not x: x == 0
    Layer l = make("compare", n.name, {input(n, 0), scalar_constant(n, n.out(0) + "/zero", 0.0)}, {n.out(0)});
    l.params["op"] = std::string("equal");
    add(std::move(l));
  } else {
    Layer l = make("logical", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
    std::string op = n.op();
    std::transform(op.begin(), op.end(), op.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    l.params["op"] = op;
    add(std::move(l));
  }
  value_types_[n.out(0)] = onnx::TensorProto::BOOL;
}

void Importer::rounding(const Node& n) {
  if (all_constant(n) && n.op() != "Round") return constant_math(n);
  const std::string mode = n.op() == "Floor" ? "floor" : n.op() == "Ceil" ? "ceil" : "nearest_even";
  add_unary(n, "round", input(n, 0), n.out(0), {{"mode", mode}});
}

// IsNaN: x != x. IsInf: x (or |x|) == inf, the signs detect_positive/negative ask for.
void Importer::is_nan_inf(const Node& n) {
  const std::string x = input(n, 0);
  const double inf = std::numeric_limits<double>::infinity();
  std::string a = x, b = x, op = "not_equal";
  if (n.op() == "IsInf") {
    const bool pos = n.get_int("detect_positive", 1) != 0, neg = n.get_int("detect_negative", 1) != 0;
    op = "equal";
    if (pos && neg) {
      a = fresh_blob(n.out(0) + "/abs");
      add_unary(n, "abs", x, a, {}, "abs");
      b = scalar_constant(n, n.out(0) + "/inf", inf);
    } else {
      // One sign, or none: compared with NaN, nothing is equal.
      b = scalar_constant(n, n.out(0) + "/bound", pos ? inf : neg ? -inf : std::numeric_limits<double>::quiet_NaN());
    }
  }
  Layer l = make("compare", n.name, {a, b}, {n.out(0)});
  l.params["op"] = op;
  add(std::move(l));
  value_types_[n.out(0)] = onnx::TensorProto::BOOL;
}

namespace {
/// Row-major strides of a shape.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(static_cast<std::size_t>(s.rank()), 1);
  for (int d = s.rank() - 2; d >= 0; --d) st[static_cast<std::size_t>(d)] = st[static_cast<std::size_t>(d + 1)] * s[d + 1];
  return st;
}

/// GatherElements' and ScatterElements' rule: element i of `indices` (shape
/// `is`, data's rank) addresses data at its own coordinates, with the one along
/// `axis` replaced by its value (negative from the end). The data positions,
/// flattened; errors name the node's `indices`.
std::vector<int64_t> element_positions(const Node& n, const Shape& ds, const Shape& is, const std::vector<int64_t>& idx, int axis) {
  if (is.rank() != ds.rank() || ds.rank() == 0)
    throw n.error(fmt::format("indices {} and data {} differ in rank", is.to_string(), ds.to_string()), "indices");
  for (int d = 0; d < ds.rank(); ++d)
    if (d != axis && is[d] > ds[d])
      throw n.error(fmt::format("indices {} exceed data {} in dim {}", is.to_string(), ds.to_string(), d), "indices");
  const std::vector<int64_t> stride = strides_of(ds);
  std::vector<int64_t> flat(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    int64_t rest = static_cast<int64_t>(i), pos = 0;
    for (int d = is.rank() - 1; d >= 0; --d) {
      int64_t c = rest % is[d];
      rest /= is[d];
      if (d == axis) {
        c = idx[i] < 0 ? idx[i] + ds[axis] : idx[i];
        if (c < 0 || c >= ds[axis]) throw n.error(fmt::format("index {} out of range for a dim of {}", idx[i], ds[axis]), "indices");
      }
      pos += c * stride[static_cast<std::size_t>(d)];
    }
    flat[i] = pos;
  }
  return flat;
}
}  // namespace

// GatherElements with constant indices: each output value's position in the
// input, flattened, read by one take layer.
void Importer::gather_elements(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const Blob* indices = constant(n.in(1));
  if (!indices || size_dependent(n.in(1))) {
    Layer l = make("gather_elements", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
    l.params["axis"] = n.get_int("axis", 0);
    add(std::move(l));
    return;
  }
  const Shape is = indices->shape();
  if (is.rank() != xs.rank() || xs.rank() == 0)
    throw n.error(fmt::format("indices {} and data {} differ in rank", is.to_string(), xs.to_string()), "indices");
  const int axis = normalized_axis(n, n.get_int("axis", 0), xs.rank(), "axis");
  Layer l = make("take", n.name, {input(n, 0)}, {n.out(0)});
  l.weights["indices"] = int_blob(is, element_positions(n, xs, is, to_ints(*indices), axis));
  add(std::move(l));
}

// Trilu: the kept triangle of the last two dims (k diagonals above or below)
// chosen by a constant mask: where(mask, x, 0).
void Importer::trilu(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() < 2) throw n.error(fmt::format("input {} has fewer than 2 dims", xs.to_string()), "input");
  int64_t k = 0;
  if (n.has_in(1)) {
    const Blob* kb = constant(n.in(1));
    if (!kb || kb->numel() != 1) throw Unsupported{"Trilu with k computed at run time"};
    k = to_ints(*kb)[0];
  }
  const bool upper = n.get_int("upper", 1) != 0;
  const int64_t rows = xs[xs.rank() - 2], cols = xs[xs.rank() - 1];
  std::vector<float> mask(static_cast<std::size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) mask[static_cast<std::size_t>(i * cols + j)] = (upper ? j - i >= k : j - i <= k) ? 1.f : 0.f;
  const std::string m = as_blob(n, add_constant(n.out(0) + "/mask", float_blob(Shape{rows, cols}, mask)));
  add(make("where", n.name, {m, input(n, 0), scalar_constant(n, n.out(0) + "/zero", 0.0)}, {n.out(0)}));
}

// NegativeLogLikelihoodLoss with constant targets (and weights): each loss
// term reads one value of the input at a constant position (a take layer),
// scaled by a constant -weight[target] (0 where the target is ignore_index),
// then summed and divided by the weights' sum for reduction 'mean'. Inputs [N, C]
// or [N, C, d1, ...], targets [N] or [N, d1, ...].
void Importer::nll_of(const Node& n, const std::string& logp, const Shape& xs, const std::string& y) {
  if (xs.rank() < 2) throw n.error(fmt::format("input {} has fewer than 2 dims [N, C, ...]", xs.to_string()), "input");
  const Blob* target = constant(n.in(1));
  if (!target) throw Unsupported{fmt::format("{} with targets computed at run time", n.op())};
  const Shape ts = target->shape();
  Shape want;
  for (int d = 0; d < xs.rank(); ++d)
    if (d != 1) want.push_back(xs[d]);
  if (ts != want)
    throw n.error(fmt::format("target {} does not match input {} (expected {})", ts.to_string(), xs.to_string(), want.to_string()),
                  "target");
  const int64_t classes = xs[1];
  std::vector<double> weight;
  if (n.has_in(2)) {
    const Blob* w = constant(n.in(2));
    if (!w) throw Unsupported{fmt::format("{} with weights computed at run time", n.op())};
    if (w->shape() != Shape{classes})
      throw n.error(fmt::format("weight {} is not [C] = [{}]", w->shape().to_string(), classes), "weight");
    weight = core::to_doubles(*w);
  }
  const bool has_ignore = n.has("ignore_index");
  const int64_t ignore = n.get_int("ignore_index", 0);
  const std::string reduction = n.get_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    throw n.error(fmt::format("reduction '{}' (supported: none, sum, mean)", reduction), "reduction");
  const std::vector<int64_t> t = to_ints(*target);
  const int64_t inner = ts.rank() > 1 ? ts.numel() / ts[0] : 1;  // positions per sample
  std::vector<int64_t> flat(t.size(), 0);
  std::vector<float> coeff(t.size(), 0.f);
  double denominator = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (has_ignore && t[i] == ignore) continue;  // reads position 0, times 0
    if (t[i] < 0 || t[i] >= classes)
      throw n.error(fmt::format("target {} out of range for {} classes", t[i], classes), "target");
    const int64_t sample = static_cast<int64_t>(i) / inner, pos = static_cast<int64_t>(i) % inner;
    flat[i] = (sample * classes + t[i]) * inner + pos;
    const double w = weight.empty() ? 1.0 : weight[static_cast<std::size_t>(t[i])];
    coeff[i] = static_cast<float>(-w);
    denominator += w;
  }
  const std::string picked = fresh_blob(y + "/picked"), terms = reduction == "none" ? y : fresh_blob(y + "/terms");
  Layer take = make("take", n.name + "/take", {logp}, {picked});
  take.weights["indices"] = int_blob(ts, flat);
  add(std::move(take));
  add(make("mul", reduction == "none" ? n.name : n.name + "/weighted",
           {picked, as_blob(n, add_constant(y + "/coeff", float_blob(ts, coeff)))}, {terms}));
  if (reduction == "none") return;
  const std::string sum = reduction == "sum" ? y : fresh_blob(y + "/sum");
  add_unary(n, "reduce", terms, sum, {{"mode", std::string("sum")}, {"keepdims", int64_t{0}}}, reduction == "sum" ? "" : "sum");
  if (reduction == "mean")  // every target ignored: 0 / 0, NaN as ONNX's reference
    add(make("mul", n.name, {sum, scalar_constant(n, y + "/inv_weight", denominator == 0 ? std::numeric_limits<double>::infinity()
                                                                                        : 1.0 / denominator)},
             {y}));
}

void Importer::nll_loss(const Node& n) { nll_of(n, input(n, 0), shape_of(n, n.in(0)), n.out(0)); }

// SoftmaxCrossEntropyLoss: LogSoftmax over the classes (axis 1), then the
// negative log-likelihood; the optional second output is the log-probabilities.
void Importer::softmax_cross_entropy(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() < 2) throw n.error(fmt::format("input {} has fewer than 2 dims [N, C, ...]", xs.to_string()), "scores");
  const std::string y = n.out(0);
  const std::string logp = n.num_outputs() > 1 && !n.out(1).empty() ? n.out(1) : fresh_blob(y + "/log_prob");
  const std::string x = input(n, 0), m = fresh_blob(y + "/max"), t = fresh_blob(y + "/shifted"), e = fresh_blob(y + "/exp"),
                    sum = fresh_blob(y + "/sum"), l = fresh_blob(y + "/log");
  const std::vector<int64_t> axes{1};
  add_unary(n, "reduce", x, m, {{"mode", std::string("max")}, {"axes", axes}, {"keepdims", int64_t{1}}}, "max");
  add(make("sub", n.name + "/shift", {x, m}, {t}));
  add_unary(n, "exp", t, e, {}, "exp");
  add_unary(n, "reduce", e, sum, {{"mode", std::string("sum")}, {"axes", axes}, {"keepdims", int64_t{1}}}, "sum");
  add_unary(n, "log", sum, l, {}, "log");
  add(make("sub", n.name + "/log_softmax", {t, l}, {logp}));
  nll_of(n, logp, xs, y);
}

bool Importer::integer_inputs(const Node& n) const {
  namespace T = onnx;
  for (int k = 0; k < n.num_inputs(); ++k) {
    const int t = n.has_in(k) ? elem_type(n.in(k)) : -1;
    if (t == T::TensorProto::INT8 || t == T::TensorProto::UINT8 || t == T::TensorProto::INT16 || t == T::TensorProto::UINT16 ||
        t == T::TensorProto::INT32 || t == T::TensorProto::UINT32 || t == T::TensorProto::INT64 || t == T::TensorProto::UINT64)
      return true;
  }
  return false;
}

// Mod: the divisor's sign (fmod 0, NumPy's mod) or the dividend's (fmod 1, C's fmod).
void Importer::mod_op(const Node& n) {
  if (constant(n.in(0)) && constant(n.in(1))) return constant_math(n);
  const bool fmod = n.get_int("fmod", 0) != 0;
  Layer l = make("divmod", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
  l.params["op"] = std::string(fmod ? "fmod" : "mod");
  add(std::move(l));
}

// BitwiseAnd/Or/Xor/Not and BitShift on integer tensors: a bitwise layer
// working on the type's width (Not as xor with all ones).
void Importer::bitwise(const Node& n) {
  namespace T = onnx;
  int type = -1;
  for (int k = 0; k < n.num_inputs() && type < 0; ++k)
    if (n.has_in(k)) type = elem_type(n.in(k));
  static const std::map<int, std::pair<int64_t, bool>> widths = {
      {T::TensorProto::UINT8, {8, false}},  {T::TensorProto::INT8, {8, true}},   {T::TensorProto::UINT16, {16, false}},
      {T::TensorProto::INT16, {16, true}},  {T::TensorProto::UINT32, {32, false}}, {T::TensorProto::INT32, {32, true}},
      {T::TensorProto::UINT64, {64, false}}, {T::TensorProto::INT64, {64, true}}};
  auto w = widths.find(type);
  if (w == widths.end())
    throw n.error(fmt::format("{} of a {} tensor (supported: integer tensors)", n.op(), type < 0 ? std::string("FLOAT") : onnx_type_name(type)),
                  "input");
  std::string op;
  if (n.op() == "BitShift") {
    const std::string dir = n.get_string("direction");
    if (dir != "LEFT" && dir != "RIGHT") throw n.error(fmt::format("direction '{}' is not LEFT or RIGHT", dir), "direction");
    op = dir == "LEFT" ? "shift_left" : "shift_right";
  } else {
    op = n.op() == "BitwiseAnd" ? "and" : n.op() == "BitwiseOr" ? "or" : "xor";
  }
  const std::string b = n.op() == "BitwiseNot" ? scalar_constant(n, n.out(0) + "/all_ones", -1.0) : input(n, 1);
  Layer l = make("bitwise", n.name, {input(n, 0), b}, {n.out(0)});
  l.params["op"] = op;
  l.params["bits"] = w->second.first;
  l.params["signed"] = int64_t{w->second.second};
  add(std::move(l));
  value_types_[n.out(0)] = type;
}

void Importer::cumulative(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const Blob* axis = constant(n.in(1));
  if (!axis || axis->numel() != 1) throw Unsupported{fmt::format("{} with an axis computed at run time", n.op())};
  if (xs.rank() == 0) throw n.error("input of rank 0 has no axis", "x");
  add_unary(n, "cumulative", input(n, 0), n.out(0),
            {{"op", std::string(n.op() == "CumSum" ? "sum" : "prod")},
             {"axis", int64_t{normalized_axis(n, to_ints(*axis)[0], xs.rank(), "axis")}},
             {"exclusive", n.get_int("exclusive", 0)},
             {"reverse", n.get_int("reverse", 0)}});
}

void Importer::top_k(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const Blob* k = constant(n.in(1));
  if (xs.rank() == 0) throw n.error("input of rank 0 has no axis", "X");
  const int axis = normalized_axis(n, n.get_int("axis", -1), xs.rank(), "axis");
  if (!k) {  // K computed from values at run time: as many as it says (value-shaped)
    const std::string values = n.out(0).empty() ? fresh_blob(n.name + "/values") : n.out(0);
    const std::string indices = n.out(1).empty() ? fresh_blob(n.name + "/indices") : n.out(1);
    Layer l = make("top_k", n.name, {input(n, 0), input(n, 1)}, {values, indices});
    l.params = {{"k_at_run", int64_t{1}}, {"axis", int64_t{axis}}, {"largest", n.get_int("largest", 1)}};
    add(std::move(l));
    value_types_[indices] = onnx::TensorProto::INT64;
    value_sized_.insert(values);
    value_sized_.insert(indices);
    symbolic_inputs_ = true;
    return;
  }
  if (k->numel() != 1) throw n.error(fmt::format("K has {} values, not one", k->numel()), "K");
  const int64_t kv = to_ints(*k)[0];
  if (kv < 0 || kv > xs[axis]) throw n.error(fmt::format("K {} is outside 0..{}", kv, xs[axis]), "K");
  const std::string values = n.out(0).empty() ? fresh_blob(n.name + "/values") : n.out(0);
  const std::string indices = n.out(1).empty() ? fresh_blob(n.name + "/indices") : n.out(1);
  // K from the sizes of blobs (torchvision's min(limit, boxes found)): computed when a session plans.
  std::vector<std::string> ins = {input(n, 0)};
  if (size_dependent(n.in(1))) ins.push_back(plan_value(n.in(1)));
  Layer l = make("top_k", n.name, ins, {values, indices});
  l.params = {{"k", kv}, {"axis", int64_t{axis}}, {"largest", n.get_int("largest", 1)}};
  add(std::move(l));
  value_types_[indices] = onnx::TensorProto::INT64;
}

// NonMaxSuppression: its limit and thresholds are constants (the exporters
// write them so); the number of boxes kept is known only at run time
// (core/stages.hpp).
void Importer::non_max_suppression(const Node& n) {
  Layer l = make("non_max_suppression", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
  auto scalar = [&](int k, const char* field) -> std::optional<double> {
    if (!n.has_in(k)) return std::nullopt;
    const Blob& c = require_constant(n, k, field);
    if (c.numel() != 1) throw n.error(fmt::format("{} has {} values, not one", field, c.numel()), field);
    return to_doubles(c)[0];
  };
  const auto most = scalar(2, "max_output_boxes_per_class");
  // (a limit beyond the int64 range, e.g. 2^63 - 1 read through a double, means none)
  l.params["max_output_boxes_per_class"] =
      most ? (*most >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(*most)) : int64_t{0};
  if (const auto iou = scalar(3, "iou_threshold")) l.params["iou_threshold"] = *iou;
  if (const auto score = scalar(4, "score_threshold")) l.params["score_threshold"] = *score;
  l.params["center_point_box"] = n.get_int("center_point_box", 0);
  add(std::move(l));
  value_types_[n.out(0)] = onnx::TensorProto::INT64;
  symbolic_inputs_ = true;
  value_sized_.insert(n.out(0));
}

void Importer::non_zero(const Node& n) {
  add_unary(n, "non_zero", input(n, 0), n.out(0));
  value_types_[n.out(0)] = onnx::TensorProto::INT64;
  symbolic_inputs_ = true;
  value_sized_.insert(n.out(0));
}

// Unique: how many distinct values there are is known once it has run.
void Importer::unique(const Node& n) {
  std::vector<std::string> outs;
  for (int k = 0; k < 4; ++k) outs.push_back(k < n.num_outputs() && !n.out(k).empty() ? n.out(k) : fresh_blob(fmt::format("{}/unique{}", n.name, k)));
  Layer l = make("unique", n.name, {input(n, 0)}, outs);
  if (n.has("axis")) l.params["axis"] = n.get_int("axis");
  l.params["sorted"] = n.get_int("sorted", 1);
  add(std::move(l));
  for (int k = 0; k < 4; ++k) {
    if (k > 0) value_types_[outs[static_cast<std::size_t>(k)]] = onnx::TensorProto::INT64;
    value_sized_.insert(outs[static_cast<std::size_t>(k)]);
  }
  if (auto t = value_types_.find(n.in(0)); t != value_types_.end()) value_types_[outs[0]] = t->second;
  symbolic_inputs_ = true;
}

// DFT: the length and axis must be constants (opset 20 made the axis an input).
void Importer::dft(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  int64_t axis = n.opset >= 20 ? -2 : n.get_int("axis", 1);
  if (n.opset >= 20 && n.has_in(2)) {
    const Blob& a = require_constant(n, 2, "axis");
    if (a.numel() != 1) throw n.error(fmt::format("axis has {} values, not one", a.numel()), "axis");
    axis = to_ints(a)[0];
  }
  axis = normalized_axis(n, axis, xs.rank(), "axis");
  const bool inverse = n.get_int("inverse", 0) != 0, onesided = n.get_int("onesided", 0) != 0;
  int64_t length = inverse && onesided ? 2 * (xs[static_cast<int>(axis)] - 1) : xs[static_cast<int>(axis)];
  if (n.has_in(1)) {
    const Blob& d = require_constant(n, 1, "dft_length");
    if (d.numel() != 1) throw n.error(fmt::format("dft_length has {} values, not one", d.numel()), "dft_length");
    length = to_ints(d)[0];
  }
  add_unary(n, "dft", input(n, 0), n.out(0),
            {{"axis", axis}, {"length", length}, {"inverse", int64_t{inverse}}, {"onesided", int64_t{onesided}}});
}

// STFT: the frames gathered (a constant index table), each multiplied by the
// window, then a DFT along the frame of frame_length points: [batch, frames,
// bins, 2]. frame_step and frame_length must be constants.
void Importer::stft(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 3 || (xs[2] != 1 && xs[2] != 2))
    throw n.error(fmt::format("signal has shape {}, not [batch, length, 1 or 2]", xs.to_string()), "signal");
  const int64_t step = static_cast<int64_t>(constant_scalar(n, 1, "frame_step"));
  int64_t length = -1;
  if (n.has_in(3)) length = static_cast<int64_t>(constant_scalar(n, 3, "frame_length"));
  if (n.has_in(2)) {
    const Shape ws = shape_of(n, n.in(2));
    if (ws.rank() != 1) throw n.error(fmt::format("window has shape {}, not [frame_length]", ws.to_string()), "window");
    if (length >= 0 && ws[0] != length)
      throw n.error(fmt::format("window has {} values, frame_length is {}", ws[0], length), "window");
    length = ws[0];
  }
  if (length < 1) throw n.error("STFT needs frame_length or a window", "frame_length");
  if (step < 1) throw n.error(fmt::format("frame_step {} is not positive", step), "frame_step");
  if (length > xs[1]) throw n.error(fmt::format("frame_length {} exceeds the signal's {} samples", length, xs[1]), "frame_length");
  const int64_t frames = (xs[1] - length) / step + 1;
  if (frames * length > (int64_t{1} << 26)) throw n.error(fmt::format("{} frames of {} samples", frames, length), "frame_step");
  std::vector<int64_t> at;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t k = 0; k < length; ++k) at.push_back(f * step + k);
  const std::string y = n.out(0);
  const std::string positions = as_blob(n, add_constant(y + "/positions", int_blob(Shape{frames, length}, at)));
  std::string framed = fresh_blob(y + "/frames");
  Layer g = make("gather", n.name + "/frames", {input(n, 0), positions}, {framed});
  g.params["axis"] = int64_t{1};
  add(std::move(g));
  if (n.has_in(2)) {
    std::string w;
    if (const Blob* c = constant(n.in(2)))
      w = as_blob(n, add_constant(y + "/window", reshaped(to_float(*c), Shape{1, 1, length, 1})));
    else {
      w = fresh_blob(y + "/window");
      add_unary(n, "reshape", input(n, 2), w, {{"shape", std::vector<int64_t>{1, 1, length, 1}}}, "window");
    }
    const std::string windowed = fresh_blob(y + "/windowed");
    add(make("mul", n.name + "/windowed", {framed, w}, {windowed}));
    framed = windowed;
  }
  const bool onesided = n.get_int("onesided", 1) != 0;
  add_unary(n, "dft", framed, y, {{"axis", int64_t{2}}, {"length", length}, {"inverse", int64_t{0}}, {"onesided", int64_t{onesided}}});
}

// HannWindow, HammingWindow, BlackmanWindow of a constant size: computed now
// (ONNX's reference formulas, in double), a constant like any other.
void Importer::window(const Node& n) {
  const Blob* size_blob = constant(n.in(0));
  if (!size_blob || size_dependent(n.in(0)))
    throw Unsupported{fmt::format("{} with a size computed at run time (a constant size is computed at import)", n.op())};
  if (size_blob->numel() != 1) throw n.error(fmt::format("size has {} values, not one", size_blob->numel()), "size");
  const int64_t size = to_ints(*size_blob)[0];
  if (size < 0 || size > (int64_t{1} << 24)) throw n.error(fmt::format("size {} is outside 0..2^24", size), "size");
  const double last = n.get_int("periodic", 1) ? static_cast<double>(size) : static_cast<double>(size - 1);
  const int type = static_cast<int>(n.get_int("output_datatype", onnx::TensorProto::FLOAT));
  std::vector<float> w(static_cast<std::size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const double t = 2 * std::numbers::pi * static_cast<double>(i) / last;
    double v = n.op() == "HannWindow"      ? std::pow(std::sin(std::numbers::pi * static_cast<double>(i) / last), 2)
               : n.op() == "HammingWindow" ? 25.0 / 46.0 - (1 - 25.0 / 46.0) * std::cos(t)
                                           : 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2 * t);
    w[static_cast<std::size_t>(i)] = static_cast<float>(v);
  }
  Blob out = float_blob(Shape{size}, w);
  if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::DOUBLE && type != onnx::TensorProto::FLOAT16 &&
      type != onnx::TensorProto::BFLOAT16) {
    std::vector<int64_t> ints;
    for (float f : w) ints.push_back(static_cast<int64_t>(f));  // (as numpy's astype truncates)
    out = int_blob(Shape{size}, ints);
  }
  constants_[n.out(0)] = std::move(out);
  onnx_types_[n.out(0)] = type;
}

// Col2Im: the image and block shapes must be constants.
void Importer::col2im(const Node& n) {
  const auto image = constant_ints(n, 1, "image_shape"), block = constant_ints(n, 2, "block_shape");
  std::map<std::string, Attr> p = {{"image_shape", image}, {"block_shape", block}};
  for (const char* a : {"dilations", "strides", "pads"})
    if (n.has(a)) p[a] = n.get_ints(a);
  add_unary(n, "col2im", input(n, 0), n.out(0), std::move(p));
}

// RoiAlign: opset 16 added coordinate_transformation_mode (half_pixel by
// default); before it, every RoiAlign computed output_half_pixel.
void Importer::roi_align(const Node& n) {
  Layer l = make("roi_align", n.name, {input(n, 0), input(n, 1), input(n, 2)}, {n.out(0)});
  l.params = {{"mode", n.get_string("mode", "avg")},
              {"output_height", n.get_int("output_height", 1)},
              {"output_width", n.get_int("output_width", 1)},
              {"sampling_ratio", n.get_int("sampling_ratio", 0)},
              {"spatial_scale", n.get_float("spatial_scale", 1.0)},
              {"coordinate_transformation_mode",
               n.opset >= 16 ? n.get_string("coordinate_transformation_mode", "half_pixel") : std::string("output_half_pixel")}};
  add(std::move(l));
}

// Hardmax: 1 at the first maximum along the axis, 0 elsewhere: the arg max
// compared with the positions along the axis. Before opset 13 over the 2-D view.
void Importer::hardmax(const Node& n) {
  Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  if (rank == 0) throw n.error("input of rank 0 has no axis", "input");
  int axis = normalized_axis(n, n.get_int("axis", n.opset >= 13 ? -1 : 1), rank, "axis");
  const std::string y = n.out(0);
  std::string x = input(n, 0);
  const bool flat = n.opset < 13 && axis != rank - 1;
  Shape view = xs;
  if (flat) {
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < rank; ++i) (i < axis ? outer : inner) *= xs[i];
    view = Shape{outer, inner};
    const std::string two_d = fresh_blob(y + "/2d");
    add_unary(n, "reshape", x, two_d, {{"shape", view.to_vector()}}, "to_2d");
    x = two_d;
    axis = 1;
  }
  const std::string arg = fresh_blob(y + "/argmax"), out = flat ? fresh_blob(y + "/2d_out") : y;
  add_unary(n, "arg_reduce", x, arg, {{"axis", int64_t{axis}}, {"keepdims", int64_t{1}}, {"mode", std::string("max")}}, "argmax");
  Shape iota_shape;
  for (int d = axis; d < view.rank(); ++d) iota_shape.push_back(d == axis ? view[d] : 1);
  std::vector<float> iota(static_cast<std::size_t>(view[axis]));
  std::iota(iota.begin(), iota.end(), 0.f);
  Layer l = make("compare", flat ? n.name + "/onehot" : n.name,
                 {arg, as_blob(n, add_constant(y + "/positions", float_blob(iota_shape, iota)))}, {out});
  l.params["op"] = std::string("equal");
  add(std::move(l));
  if (flat) add_unary(n, "reshape", out, y, {{"shape", xs.to_vector()}}, "from_2d");
}

void Importer::thresholded_relu(const Node& n) {
  const std::string x = input(n, 0), y = n.out(0), above = fresh_blob(y + "/above");
  Layer c = make("compare", n.name + "/above", {x, scalar_constant(n, y + "/alpha", n.get_float("alpha", 1.0))}, {above});
  c.params["op"] = std::string("greater");
  add(std::move(c));
  add(make("where", n.name, {above, x, scalar_constant(n, y + "/zero", 0.0)}, {y}));
}

// Celu as relu(x) + min(0, alpha * (exp(x / alpha) - 1)).
void Importer::celu(const Node& n) {
  const double alpha = n.get_float("alpha", 1.0);
  if (alpha == 0) throw n.error("alpha is 0", "alpha");
  const std::string x = input(n, 0), y = n.out(0);
  const std::string pos = fresh_blob(y + "/relu"), scaled = fresh_blob(y + "/scaled"), e = fresh_blob(y + "/exp"),
                    em1 = fresh_blob(y + "/exp_minus_one"), neg = fresh_blob(y + "/neg"), negmin = fresh_blob(y + "/neg_part");
  add_unary(n, "relu", x, pos, {}, "relu");
  add(make("mul", n.name + "/scale", {x, scalar_constant(n, y + "/inv_alpha", 1.0 / alpha)}, {scaled}));
  add_unary(n, "exp", scaled, e, {}, "exp");
  add(make("sub", n.name + "/minus_one", {e, scalar_constant(n, y + "/one", 1.0)}, {em1}));
  add(make("mul", n.name + "/times_alpha", {em1, scalar_constant(n, y + "/alpha", alpha)}, {neg}));
  add(make("min", n.name + "/min", {neg, scalar_constant(n, y + "/zero", 0.0)}, {negmin}));
  add(make("add", n.name, {pos, negmin}, {y}));
}

// Swish: x * sigmoid(alpha * x) (silu where alpha is 1).
void Importer::swish(const Node& n) { add_swish(n, input(n, 0), n.out(0), n.get_float("alpha", 1.0)); }

void Importer::add_swish(const Node& n, const std::string& x, const std::string& y, double alpha) {
  if (alpha == 1.0) return add_unary(n, "silu", x, y);
  const std::string ax = fresh_blob(y + "/scaled"), s = fresh_blob(y + "/sigmoid");
  add(make("mul", n.name + "/scale", {x, scalar_constant(n, y + "/alpha", alpha)}, {ax}));
  add_unary(n, "sigmoid", ax, s, {}, "sigmoid");
  add(make("mul", n.name + "/swish", {x, s}, {y}));
}

// SwiGLU (opset 28): Swish_alpha(A) * B, A and B of one shape (no broadcasting).
void Importer::swiglu(const Node& n) {
  const Shape as = shape_of(n, n.in(0)), bs = shape_of(n, n.in(1));
  if (as != bs) throw n.error(fmt::format("A {} and B {} differ in shape (SwiGLU does not broadcast)", as.to_string(), bs.to_string()), "B");
  const std::string gate = fresh_blob(n.out(0) + "/gate");
  add_swish(n, input(n, 0), gate, n.get_float("alpha", 1.0));
  add(make("mul", n.name, {gate, input(n, 1)}, {n.out(0)}));
}

// LpNormalization: x / ||x||_p along the axis (p 1 or 2), 0 where the norm is 0.
void Importer::lp_normalization(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() == 0) throw n.error("input of rank 0 has no axis", "input");
  const int axis = normalized_axis(n, n.get_int("axis", -1), xs.rank(), "axis");
  const int64_t p = n.get_int("p", 2);
  if (p != 1 && p != 2) throw n.error(fmt::format("p {} (supported: 1, 2)", p), "p");
  const std::string x = input(n, 0), y = n.out(0);
  const std::string norm = fresh_blob(y + "/norm"), q = fresh_blob(y + "/quotient"), zero_norm = fresh_blob(y + "/zero_norm");
  std::string src = x;
  if (p == 1) {
    src = fresh_blob(y + "/abs");
    add_unary(n, "abs", x, src, {}, "abs");
  }
  add_unary(n, "reduce", src, norm,
            {{"mode", std::string(p == 1 ? "sum" : "l2")}, {"axes", std::vector<int64_t>{axis}}, {"keepdims", int64_t{1}}}, "norm");
  add(make("div", n.name + "/divide", {x, norm}, {q}));
  const std::string zero = scalar_constant(n, y + "/zero", 0.0);
  Layer c = make("compare", n.name + "/zero_norm", {norm, zero}, {zero_norm});
  c.params["op"] = std::string("equal");
  add(std::move(c));
  add(make("where", n.name, {zero_norm, zero, q}, {y}));
}

// SpaceToDepth and DepthToSpace (DCR or CRD) as reshape, transpose, reshape.
void Importer::space_depth(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 4) throw n.error(fmt::format("input {} is not 4-D [N, C, H, W]", xs.to_string()), "input");
  const int64_t b = n.get_int("blocksize");
  if (b < 1) throw n.error(fmt::format("blocksize {} is below 1", b), "blocksize");
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  std::vector<int64_t> split, perm, out;
  if (n.op() == "SpaceToDepth") {
    if (H % b || W % b) throw n.error(fmt::format("input {} is not divisible by blocksize {}", xs.to_string(), b), "blocksize");
    split = {N, C, H / b, b, W / b, b};
    const std::string mode = n.get_string("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") throw n.error(fmt::format("mode '{}' is not DCR or CRD", mode), "mode");
    perm = mode == "DCR" ? std::vector<int64_t>{0, 3, 5, 1, 2, 4} : std::vector<int64_t>{0, 1, 3, 5, 2, 4};
    out = {N, C * b * b, H / b, W / b};
  } else {
    if (C % (b * b)) throw n.error(fmt::format("channels {} are not divisible by blocksize^2 {}", C, b * b), "blocksize");
    const std::string mode = n.get_string("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") throw n.error(fmt::format("mode '{}' is not DCR or CRD", mode), "mode");
    if (mode == "DCR") {
      split = {N, b, b, C / (b * b), H, W};
      perm = {0, 3, 4, 1, 5, 2};
    } else {
      split = {N, C / (b * b), b, b, H, W};
      perm = {0, 1, 4, 2, 5, 3};
    }
    out = {N, C / (b * b), H * b, W * b};
  }
  const std::string y = n.out(0), a = fresh_blob(y + "/blocks"), t = fresh_blob(y + "/moved");
  add_unary(n, "reshape", input(n, 0), a, {{"shape", split}}, "blocks");
  add_unary(n, "transpose", a, t, {{"perm", perm}}, "move");
  add_unary(n, "reshape", t, y, {{"shape", out}});
}

// Shrink: x + bias below -lambd, x - bias above lambd, 0 between.
void Importer::shrink(const Node& n) {
  const double lambd = n.get_float("lambd", 0.5), bias = n.get_float("bias", 0.0);
  const std::string x = input(n, 0), y = n.out(0);
  const std::string below = fresh_blob(y + "/below"), above = fresh_blob(y + "/above"), up = fresh_blob(y + "/plus_bias"),
                    down = fresh_blob(y + "/minus_bias"), upper = fresh_blob(y + "/upper");
  Layer lo = make("compare", n.name + "/below", {x, scalar_constant(n, y + "/neg_lambd", -lambd)}, {below});
  lo.params["op"] = std::string("less");
  add(std::move(lo));
  Layer hi = make("compare", n.name + "/above", {x, scalar_constant(n, y + "/lambd", lambd)}, {above});
  hi.params["op"] = std::string("greater");
  add(std::move(hi));
  add(make("add", n.name + "/plus_bias", {x, scalar_constant(n, y + "/bias", bias)}, {up}));
  add(make("sub", n.name + "/minus_bias", {x, scalar_constant(n, y + "/bias2", bias)}, {down}));
  add(make("where", n.name + "/upper", {above, down, scalar_constant(n, y + "/zero", 0.0)}, {upper}));
  add(make("where", n.name, {below, up, upper}, {y}));
}

// ScatterND and ScatterElements with constant indices. Each update lands at a
// data position computed now. Without a reduction the output takes from
// [data, updates] flattened (a take layer; later updates win), or, with
// constant updates, where(mask, updates, data); with a reduction and constant
// updates, data op U where U folds the updates per position (the op's identity elsewhere).
void Importer::scatter(const Node& n) {
  if (all_constant(n) && n.op() == "ScatterND") return constant_math(n);
  const Shape ds = shape_of(n, n.in(0));
  const Blob* indices = constant(n.in(1));
  if (n.op() == "ScatterElements" && (!indices || value_sized(n.in(0)) || value_sized(n.in(2)))) {
    // Indices computed at run time (torchvision's RoI levels merged): a layer that checks each.
    Layer l = make("scatter_elements", n.name, {input(n, 0), input(n, 1), input(n, 2)}, {n.out(0)});
    l.params["axis"] = n.get_int("axis", 0);
    l.params["reduction"] = n.get_string("reduction", "none");
    return add(std::move(l));
  }
  if (!indices) throw Unsupported{fmt::format("{} with indices computed at run time", n.op())};
  const Shape is = indices->shape(), us = shape_of(n, n.in(2));
  const std::vector<int64_t> idx = to_ints(*indices), dst = strides_of(ds);
  std::vector<int64_t> target;  // data position of each update element
  if (n.op() == "ScatterElements") {
    const int axis = normalized_axis(n, n.get_int("axis", 0), std::max(ds.rank(), 1), "axis");
    if (is != us || is.rank() != ds.rank())
      throw n.error(fmt::format("indices {} and updates {} must match and have data {}'s rank", is.to_string(), us.to_string(),
                                ds.to_string()), "indices");
    target = element_positions(n, ds, is, idx, axis);
  } else {
    if (is.rank() < 1) throw n.error("indices need at least one dim", "indices");
    const int64_t k = is[is.rank() - 1];
    if (k < 1 || k > ds.rank()) throw n.error(fmt::format("index tuples of {} for data {}", k, ds.to_string()), "indices");
    Shape want;
    for (int d = 0; d < is.rank() - 1; ++d) want.push_back(is[d]);
    int64_t slice = 1;
    for (int d = static_cast<int>(k); d < ds.rank(); ++d) want.push_back(ds[d]), slice *= ds[d];
    if (us != want) throw n.error(fmt::format("updates {} are not {}", us.to_string(), want.to_string()), "updates");
    for (std::size_t t = 0; t * static_cast<std::size_t>(k) < idx.size(); ++t) {
      int64_t base = 0;
      for (int64_t j = 0; j < k; ++j) {
        int64_t c = idx[t * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)];
        const int64_t dim = ds[static_cast<int>(j)];
        if (c < 0) c += dim;
        if (c < 0 || c >= dim) throw n.error(fmt::format("index {} out of range for a dim of {}", c, dim), "indices");
        base += c * dst[static_cast<std::size_t>(j)];
      }
      for (int64_t e = 0; e < slice; ++e) target.push_back(base + e);
    }
  }
  const std::string reduction = n.get_string("reduction", "none");
  const int64_t total = ds.numel();
  const std::string y = n.out(0);
  if (const Blob* u = constant(n.in(2))) {
    const std::vector<double> uv = to_doubles(*u);
    const double inf = std::numeric_limits<double>::infinity();
    const double identity = reduction == "mul" ? 1.0 : reduction == "max" ? -inf : reduction == "min" ? inf : 0.0;
    if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" && reduction != "min")
      throw n.error(fmt::format("reduction '{}' (supported: none, add, mul, max, min)", reduction), "reduction");
    std::vector<double> folded(static_cast<std::size_t>(total), identity);
    std::vector<float> mask(static_cast<std::size_t>(total), 0.f);
    for (std::size_t i = 0; i < target.size(); ++i) {
      double& f = folded[static_cast<std::size_t>(target[i])];
      const double v = uv[i];
      f = reduction == "add" ? f + v : reduction == "mul" ? f * v : reduction == "max" ? std::max(f, v)
        : reduction == "min" ? std::min(f, v) : v;
      mask[static_cast<std::size_t>(target[i])] = 1.f;
    }
    const std::string values = as_blob(n, add_constant(y + "/updates", float_blob(ds, std::vector<float>(folded.begin(), folded.end()))));
    if (reduction == "none") {
      add(make("where", n.name, {as_blob(n, add_constant(y + "/mask", float_blob(ds, mask))), values, input(n, 0)}, {y}));
      return;
    }
    static const std::map<std::string, std::string> ops = {{"add", "add"}, {"mul", "mul"}, {"max", "max"}, {"min", "min"}};
    add(make(ops.at(reduction), n.name, {input(n, 0), values}, {y}));
    return;
  }
  if (reduction != "none") throw Unsupported{fmt::format("{} with a reduction of updates computed at run time", n.op())};
  std::vector<int64_t> source(static_cast<std::size_t>(total));
  std::iota(source.begin(), source.end(), int64_t{0});
  for (std::size_t i = 0; i < target.size(); ++i) source[static_cast<std::size_t>(target[i])] = total + static_cast<int64_t>(i);
  take_from_two(n, input(n, 0), input(n, 2), y, ds, source);
}

void Importer::take_from_two(const Node& n, const std::string& a, const std::string& b, const std::string& y, const Shape& shape,
                             const std::vector<int64_t>& positions) {
  const std::string af = fresh_blob(y + "/first_flat"), bf = fresh_blob(y + "/second_flat"), both = fresh_blob(y + "/both");
  add_unary(n, "reshape", a, af, {{"shape", std::vector<int64_t>{shape_of(n, a).numel()}}}, "first_flat");
  add_unary(n, "reshape", b, bf, {{"shape", std::vector<int64_t>{shape_of(n, b).numel()}}}, "second_flat");
  Layer c = make("concat", n.name + "/both", {af, bf}, {both});
  c.params["axis"] = int64_t{0};
  add(std::move(c));
  Layer t = make("take", n.name, {both}, {y});
  t.weights["indices"] = int_blob(shape, positions);
  add(std::move(t));
}

// GatherND with constant indices: the data positions of every output value, one take.
void Importer::gather_nd(const Node& n) {
  const Shape ds = shape_of(n, n.in(0));
  const Blob* indices = constant(n.in(1));
  if (!indices || size_dependent(n.in(1))) {  // indices computed at run time (or from the input sizes)
    Layer l = make("gather_nd", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
    l.params["batch_dims"] = n.get_int("batch_dims", 0);
    add(std::move(l));
    return;
  }
  const Shape is = indices->shape();
  const int64_t b = n.get_int("batch_dims", 0);
  if (is.rank() < 1 || b < 0 || b >= std::min(is.rank(), ds.rank()))
    throw n.error(fmt::format("batch_dims {} for indices {} and data {}", b, is.to_string(), ds.to_string()), "batch_dims");
  const int64_t k = is[is.rank() - 1];
  if (k < 1 || b + k > ds.rank()) throw n.error(fmt::format("index tuples of {} for data {}", k, ds.to_string()), "indices");
  for (int d = 0; d < b; ++d)
    if (is[d] != ds[d]) throw n.error(fmt::format("batch dims of indices {} and data {} differ", is.to_string(), ds.to_string()), "indices");
  Shape out;
  for (int d = 0; d < is.rank() - 1; ++d) out.push_back(is[d]);
  int64_t slice = 1;
  for (int d = static_cast<int>(b + k); d < ds.rank(); ++d) out.push_back(ds[d]), slice *= ds[d];
  int64_t batch = 1;
  for (int d = 0; d < b; ++d) batch *= ds[d];
  const std::vector<int64_t> idx = to_ints(*indices), dst = strides_of(ds);
  const int64_t tuples = static_cast<int64_t>(idx.size()) / k, per_batch = tuples / batch, batch_stride = b ? dst[static_cast<std::size_t>(b - 1)] : 0;
  std::vector<int64_t> flat;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t base = (t / per_batch) * batch_stride;
    for (int64_t j = 0; j < k; ++j) {
      int64_t c = idx[static_cast<std::size_t>(t * k + j)];
      const int64_t dim = ds[static_cast<int>(b + j)];
      if (c < 0) c += dim;
      if (c < 0 || c >= dim) throw n.error(fmt::format("index {} out of range for a dim of {}", c, dim), "indices");
      base += c * dst[static_cast<std::size_t>(b + j)];
    }
    for (int64_t e = 0; e < slice; ++e) flat.push_back(base + e);
  }
  Layer l = make("take", n.name, {input(n, 0)}, {n.out(0)});
  l.weights["indices"] = int_blob(out, flat);
  add(std::move(l));
}

// OneHot: (indices == position along the new axis) as a mask, then
// where(mask, on, off); negative indices count from depth's end.
void Importer::one_hot(const Node& n) {
  const Shape is = shape_of(n, n.in(0));
  const Blob* depth_b = constant(n.in(1));
  const Blob* values = constant(n.in(2));
  if (!depth_b || depth_b->numel() != 1 || !values || values->numel() != 2)
    throw Unsupported{"OneHot with depth or values computed at run time"};
  const double depth_d = to_doubles(*depth_b)[0];
  if (!(depth_d >= 1) || depth_d > 1e7) throw n.error(fmt::format("depth {} outside 1..1e7", depth_d), "depth");
  const auto depth = static_cast<int64_t>(depth_d);
  const int rank = is.rank() + 1;
  const int axis = normalized_axis(n, n.get_int("axis", -1), rank, "axis");
  const std::string y = n.out(0), x = fresh_blob(y + "/indices"), pos = fresh_blob(y + "/positive"), neg = fresh_blob(y + "/negative"),
                    mask = fresh_blob(y + "/mask");
  Shape xs;
  for (int d = 0; d < is.rank(); ++d) {
    if (d == axis) xs.push_back(1);
    xs.push_back(is[d]);
  }
  if (axis == is.rank()) xs.push_back(1);
  if (constant(n.in(0))) constants_[x] = reshaped(*constant(n.in(0)), xs);
  else add_unary(n, "reshape", input(n, 0), x, {{"shape", xs.to_vector()}}, "indices");
  Shape ps{depth};
  for (int d = axis + 1; d < rank; ++d) ps.push_back(1);
  std::vector<float> p(static_cast<std::size_t>(depth)), q(static_cast<std::size_t>(depth));
  for (int64_t i = 0; i < depth; ++i) p[static_cast<std::size_t>(i)] = static_cast<float>(i), q[static_cast<std::size_t>(i)] = static_cast<float>(i - depth);
  for (auto [out, vals, what] : {std::tuple{pos, &p, "positive"}, std::tuple{neg, &q, "negative"}}) {
    Layer c = make("compare", fmt::format("{}/{}", n.name, what), {as_blob(n, x), as_blob(n, add_constant(fmt::format("{}/{}_positions", y, what), float_blob(ps, *vals)))}, {out});
    c.params["op"] = std::string("equal");
    add(std::move(c));
  }
  Layer o = make("logical", n.name + "/either", {pos, neg}, {mask});
  o.params["op"] = std::string("or");
  add(std::move(o));
  const std::vector<double> v = to_doubles(*values);
  add(make("where", n.name, {mask, scalar_constant(n, y + "/on", v[1]), scalar_constant(n, y + "/off", v[0])}, {y}));
  if (auto t = onnx_types_.find(n.in(2)); t != onnx_types_.end() && t->second != onnx::TensorProto::FLOAT) value_types_[y] = t->second;
}

// EyeLike: a constant of the input's (static) shape, ones on diagonal k.
void Importer::eye_like(const Node& n) {
  const Shape s = shape_of(n, n.in(0));
  if (s.rank() != 2) throw n.error(fmt::format("input {} is not 2-D", s.to_string()), "input");
  const int64_t k = n.get_int("k", 0);
  std::vector<float> v(static_cast<std::size_t>(s.numel()), 0.f);
  for (int64_t i = 0; i < s[0]; ++i)
    if (i + k >= 0 && i + k < s[1]) v[static_cast<std::size_t>(i * s[1] + i + k)] = 1.f;
  constants_[n.out(0)] = float_blob(s, v);
}

void Importer::take_positions(const Node& n, const std::string& y, const Shape& shape, const std::vector<int64_t>& positions) {
  if (const Blob* c = constant(n.in(0))) {
    const std::vector<double> v = to_doubles(*c);
    std::vector<float> out;
    for (int64_t p : positions) out.push_back(static_cast<float>(v[static_cast<std::size_t>(p)]));
    constants_[y] = float_blob(shape, out);
    return;
  }
  Layer l = make("take", n.name, {input(n, 0)}, {y});
  l.weights["indices"] = int_blob(shape, positions);
  add(std::move(l));
}

// CenterCropPad: each named axis cropped or zero-padded about its centre to the size given.
void Importer::center_crop_pad(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const std::vector<int64_t> target = constant_ints(n, 1, "shape");
  std::vector<int64_t> axes = n.get_ints("axes", std::vector<int64_t>{});
  for (auto& a : axes) a = normalized_axis(n, a, xs.rank(), "axes");
  if (axes.empty())
    for (int d = 0; d < xs.rank(); ++d) axes.push_back(d);
  if (target.size() != axes.size()) throw n.error(fmt::format("{} sizes for {} axes", target.size(), axes.size()), "shape");
  Shape out = xs;
  std::vector<int64_t> offset(static_cast<std::size_t>(xs.rank()), 0);  // output index - input index, per dim
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const int a = static_cast<int>(axes[i]);
    if (target[i] < 0 || target[i] > (int64_t{1} << 31)) throw n.error(fmt::format("size {} outside 0..2^31", target[i]), "shape");
    out[a] = target[i];
    offset[static_cast<std::size_t>(a)] = target[i] >= xs[a] ? (target[i] - xs[a]) / 2 : -((xs[a] - target[i]) / 2);
  }
  // Every output position reads an input position or a zero: the input and one zero, taken.
  double points = 1;
  for (int d = 0; d < out.rank(); ++d) points *= static_cast<double>(out[d]);
  if (points > double(int64_t{1} << 40)) throw n.error(fmt::format("output {} is too large", out.to_string()), "shape");
  try {
    check_folded_growth(out, DType::int64, static_cast<std::size_t>(xs.numel()) * sizeof(float));  // the positions table
  } catch (const Error& e) {
    throw n.error(e.message(), "shape");
  }
  const int64_t total = xs.numel();
  std::vector<int64_t> positions(static_cast<std::size_t>(out.numel()));
  const std::vector<int64_t> in_strides = strides_of(xs);
  for (int64_t o = 0; o < out.numel(); ++o) {
    int64_t rest = o, pos = 0;
    bool inside = true;
    for (int d = out.rank() - 1; d >= 0; --d) {
      const int64_t c = rest % out[d] - offset[static_cast<std::size_t>(d)];
      rest /= out[d];
      inside = inside && c >= 0 && c < xs[d];
      pos += c * in_strides[static_cast<std::size_t>(d)];
    }
    positions[static_cast<std::size_t>(o)] = inside ? pos : total;
  }
  const std::string zero = as_blob(n, add_constant(n.out(0) + "/zero", float_blob(Shape{1}, {0.0f})));
  take_from_two(n, input(n, 0), zero, n.out(0), out, positions);
}

// Compress with a constant condition: the kept slices along the axis (or of the flattened input).
void Importer::compress(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const Blob* cond = constant(n.in(1));
  if (!cond) throw Unsupported{"Compress with a condition computed at run time"};
  const std::vector<int64_t> keep = to_ints(*cond);
  std::vector<int64_t> positions;
  Shape out;
  if (!n.has("axis")) {
    for (std::size_t i = 0; i < keep.size() && static_cast<int64_t>(i) < xs.numel(); ++i)
      if (keep[i]) positions.push_back(static_cast<int64_t>(i));
    out = Shape{static_cast<int64_t>(positions.size())};
  } else {
    const int axis = normalized_axis(n, n.get_int("axis"), xs.rank(), "axis");
    std::vector<int64_t> kept;
    for (std::size_t i = 0; i < keep.size() && static_cast<int64_t>(i) < xs[axis]; ++i)
      if (keep[i]) kept.push_back(static_cast<int64_t>(i));
    out = xs;
    out[axis] = static_cast<int64_t>(kept.size());
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < xs.rank(); ++d) (d < axis ? outer : d > axis ? inner : outer) *= d == axis ? 1 : xs[d];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k : kept)
        for (int64_t i = 0; i < inner; ++i) positions.push_back((o * xs[axis] + k) * inner + i);
  }
  if (positions.empty()) throw Unsupported{"Compress that keeps nothing (an empty tensor)"};
  take_positions(n, n.out(0), out, positions);
}

// ReverseSequence with constant lengths: the first len[b] steps of each batch entry reversed.
void Importer::reverse_sequence(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() < 2) throw n.error(fmt::format("input {} has fewer than 2 dims", xs.to_string()), "input");
  const Blob* lens_b = constant(n.in(1));
  if (!lens_b) throw Unsupported{"ReverseSequence with lengths computed at run time"};
  const std::vector<int64_t> lens = to_ints(*lens_b);
  const int batch_axis = static_cast<int>(n.get_int("batch_axis", 1)), time_axis = static_cast<int>(n.get_int("time_axis", 0));
  if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0)))
    throw n.error("batch_axis and time_axis must be 0 and 1", "batch_axis");
  if (static_cast<int64_t>(lens.size()) != xs[batch_axis])
    throw n.error(fmt::format("{} lengths for a batch of {}", lens.size(), xs[batch_axis]), "sequence_lens");
  int64_t inner = 1;
  for (int d = 2; d < xs.rank(); ++d) inner *= xs[d];
  std::vector<int64_t> positions(static_cast<std::size_t>(xs.numel()));
  for (int64_t i0 = 0; i0 < xs[0]; ++i0)
    for (int64_t i1 = 0; i1 < xs[1]; ++i1) {
      const int64_t b = batch_axis == 0 ? i0 : i1, t = batch_axis == 0 ? i1 : i0, len = lens[static_cast<std::size_t>(b)];
      if (len < 0 || len > xs[time_axis]) throw n.error(fmt::format("length {} outside 0..{}", len, xs[time_axis]), "sequence_lens");
      const int64_t src_t = t < len ? len - 1 - t : t;
      const int64_t s0 = batch_axis == 0 ? i0 : src_t, s1 = batch_axis == 0 ? src_t : i1;
      for (int64_t e = 0; e < inner; ++e)
        positions[static_cast<std::size_t>((i0 * xs[1] + i1) * inner + e)] = (s0 * xs[1] + s1) * inner + e;
    }
  take_positions(n, n.out(0), xs, positions);
}

// LRN: x / (bias + alpha / size * sum of x^2 over the size channels around)^beta,
// the sum an average pooling along the channels of [N, 1, C, positions] that counts the padding.
void Importer::lrn(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() < 3) throw n.error(fmt::format("input {} is not [N, C, ...]", xs.to_string()), "X");
  const int64_t size = n.get_int("size");
  if (size < 1 || size > xs[1] * 2 + 1) throw n.error(fmt::format("size {} outside 1..2C+1", size), "size");
  const double alpha = n.get_float("alpha", 1e-4), beta = n.get_float("beta", 0.75), bias = n.get_float("bias", 1.0);
  int64_t positions = 1;
  for (int d = 2; d < xs.rank(); ++d) positions *= xs[d];
  const std::string x = input(n, 0), y = n.out(0), sq = fresh_blob(y + "/square"), col = fresh_blob(y + "/channels"),
                    avg = fresh_blob(y + "/window_mean"), back = fresh_blob(y + "/window_mean_nchw"), scaled = fresh_blob(y + "/scaled"),
                    shifted = fresh_blob(y + "/plus_bias"), factor = fresh_blob(y + "/factor");
  add(make("mul", n.name + "/square", {x, x}, {sq}));
  add_unary(n, "reshape", sq, col, {{"shape", std::vector<int64_t>{xs[0], 1, xs[1], positions}}}, "channels");
  Layer p = make("pool2", n.name + "/window", {col}, {avg});
  p.params = {{"mode", std::string("avg")}, {"kernel", std::vector<int64_t>{size, 1}}, {"strides", std::vector<int64_t>{1, 1}},
              {"pads", std::vector<int64_t>{(size - 1) / 2, 0, size / 2, 0}}, {"count_include_pad", int64_t{1}}};
  add(std::move(p));
  add_unary(n, "reshape", avg, back, {{"shape", xs.to_vector()}}, "back");
  add(make("mul", n.name + "/alpha", {back, scalar_constant(n, y + "/alpha", alpha)}, {scaled}));  // alpha/size * sum
  add(make("add", n.name + "/bias", {scaled, scalar_constant(n, y + "/bias", bias)}, {shifted}));
  add_unary(n, "pow", shifted, factor, {{"exponent", -beta}}, "pow");
  add(make("mul", n.name, {x, factor}, {y}));
}

// AffineGrid: each output point is theta times the point's homogeneous
// normalised coordinates (x, y[, z], 1). Those form a constant [P, S+1]
// matrix for the constant size, so the grid is a dense layer over theta
// ([N, S, S+1] -> [N, S, P]) transposed to [N, P, S] and shaped [N, (D,) H, W, S].
void Importer::affine_grid(const Node& n) {
  const std::vector<int64_t> size = constant_ints(n, 1, "size");
  if (size.size() != 4 && size.size() != 5) throw n.error(fmt::format("size has {} values; 4 (2-D) or 5 (3-D) are read", size.size()), "size");
  const int64_t spatial = static_cast<int64_t>(size.size()) - 2;
  const Shape ts = shape_of(n, n.in(0));
  if (ts.rank() != 3 || ts[1] != spatial || ts[2] != spatial + 1 || ts[0] != size[0])
    throw n.error(fmt::format("theta {} for size [{}]: [N, {}, {}] expected", ts.to_string(), fmt::join(size, ","), spatial, spatial + 1), "theta");
  for (std::size_t i = 2; i < size.size(); ++i)
    if (size[i] < 1) throw n.error(fmt::format("size [{}] has a dim below 1", fmt::join(size, ",")), "size");
  const bool align = n.get_int("align_corners", 0) != 0;
  auto coord = [&](int64_t i, int64_t len) {
    if (align) return len == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1);
    return (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len) - 1.0;
  };
  const int64_t d = spatial == 3 ? size[2] : 1, h = size[size.size() - 2], w = size[size.size() - 1];
  const int64_t points = d * h * w;
  if (points > (int64_t{1} << 26)) throw n.error(fmt::format("size [{}] makes a grid of {} points", fmt::join(size, ","), points), "size");
  std::vector<float> base;
  base.reserve(static_cast<std::size_t>(points * (spatial + 1)));
  for (int64_t z = 0; z < d; ++z)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        base.push_back(static_cast<float>(coord(x, w)));
        base.push_back(static_cast<float>(coord(y, h)));
        if (spatial == 3) base.push_back(static_cast<float>(coord(z, d)));
        base.push_back(1.0f);
      }
  const std::string out = n.out(0), per_axis = fresh_blob(out + "/per_axis"), per_point = fresh_blob(out + "/per_point");
  Layer dense = make("dense", n.name, {input(n, 0)}, {per_axis});
  dense.weights["weight"] = float_blob(Shape{points, spatial + 1}, std::move(base));
  add(std::move(dense));
  add_unary(n, "transpose", per_axis, per_point, {{"perm", std::vector<int64_t>{0, 2, 1}}}, "points_first");
  std::vector<int64_t> grid{size[0]};
  if (spatial == 3) grid.push_back(d);
  grid.insert(grid.end(), {h, w, spatial});
  add_unary(n, "reshape", per_point, out, {{"shape", grid}}, "to_grid");
}

// RotaryEmbedding (opset 23) with constant caches and position ids: the
// [B, S, R/2] cosines and sines gathered here, then x1 * cos - x2 * sin and
// x1 * sin + x2 * cos of the rotated part's halves (or its even and odd
// elements, interleaved), put back in place; the rest of each head untouched.
// 4-D input [B, H, S, D], or 3-D [B, S, H*D] with num_heads.
void Importer::rotary_embedding(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 3 && xs.rank() != 4) throw n.error(fmt::format("input {} is not 3-D or 4-D", xs.to_string()), "X");
  const Blob* cos_in = constant(n.in(1));
  const Blob* sin_in = constant(n.in(2));
  if (!cos_in || !sin_in) throw Unsupported{"RotaryEmbedding with caches computed at run time"};
  const Blob cos_cache = to_float(*cos_in), sin_cache = to_float(*sin_in);
  const int64_t batch = xs[0], seq = xs.rank() == 4 ? xs[2] : xs[1];
  int64_t heads = xs.rank() == 4 ? xs[1] : n.get_int("num_heads", 0);
  if (heads < 1 || (xs.rank() == 3 && xs[2] % heads != 0))
    throw n.error(fmt::format("num_heads {} does not divide the hidden size of input {}", heads, xs.to_string()), "num_heads");
  const int64_t head = xs.rank() == 4 ? xs[3] : xs[2] / heads;
  const int64_t rot = n.get_int("rotary_embedding_dim", 0) == 0 ? head : n.get_int("rotary_embedding_dim", 0);
  if (rot < 2 || rot % 2 || rot > head) throw n.error(fmt::format("rotary_embedding_dim {} for heads of {}", rot, head), "rotary_embedding_dim");
  const int64_t half = rot / 2;
  const bool interleaved = n.get_int("interleaved", 0) != 0;
  // The [B, S, half] cosines and sines: the caches indexed by the position ids, or the caches themselves.
  Shape table{batch, seq, half};
  std::vector<float> cos(static_cast<std::size_t>(table.numel())), sin(cos.size());
  const Shape cs = cos_cache.shape();
  if (cs != sin_cache.shape() || cs.rank() < 2 || cs[cs.rank() - 1] != half)
    throw n.error(fmt::format("caches {} and {}: their last dim must be rotary_embedding_dim / 2 = {}", cs.to_string(),
                              sin_cache.shape().to_string(), half), "cos_cache");
  if (n.has_in(3)) {
    const Blob* ids_in = constant(n.in(3));
    if (!ids_in) throw Unsupported{"RotaryEmbedding with position ids computed at run time"};
    const std::vector<int64_t> ids = to_ints(*ids_in);
    if (cs.rank() != 2 || static_cast<int64_t>(ids.size()) != batch * seq)
      throw n.error(fmt::format("position ids {} and cache {} for input {}", ids_in->shape().to_string(), cs.to_string(), xs.to_string()), "position_ids");
    for (std::size_t p = 0; p < ids.size(); ++p) {
      if (ids[p] < 0 || ids[p] >= cs[0]) throw n.error(fmt::format("position id {} outside the cache's {} positions", ids[p], cs[0]), "position_ids");
      for (int64_t j = 0; j < half; ++j) {
        cos[p * static_cast<std::size_t>(half) + static_cast<std::size_t>(j)] = cos_cache.data_as<float>()[ids[p] * half + j];
        sin[p * static_cast<std::size_t>(half) + static_cast<std::size_t>(j)] = sin_cache.data_as<float>()[ids[p] * half + j];
      }
    }
  } else {
    if (cs != table) throw n.error(fmt::format("caches {} without position ids: [{}, {}, {}] expected", cs.to_string(), batch, seq, half), "cos_cache");
    std::copy_n(cos_cache.data_as<float>(), cos.size(), cos.begin());
    std::copy_n(sin_cache.data_as<float>(), sin.size(), sin.begin());
  }
  // Work on [B, H, S, D] (4-D input) or [B, S, H, D] (3-D): the tables broadcast over the heads' axis.
  const std::string y = n.out(0);
  std::string x = input(n, 0);
  Shape work = xs;
  Shape table_shape{batch, 1, seq, half};
  if (xs.rank() == 3) {
    work = Shape{batch, seq, heads, head};
    table_shape = Shape{batch, seq, 1, half};
    const std::string r = fresh_blob(y + "/heads");
    add_unary(n, "reshape", x, r, {{"shape", work.to_vector()}}, "heads");
    x = r;
  }
  auto constant_blob = [&](const char* what, std::vector<float> v) {
    return as_blob(n, add_constant(y + "/" + what, float_blob(table_shape, std::move(v))));
  };
  const std::string c = constant_blob("cos", std::move(cos)), s = constant_blob("sin", std::move(sin));
  std::string rotated = x, rest;
  if (rot < head) {
    rotated = fresh_blob(y + "/rotated_in");
    rest = fresh_blob(y + "/rest");
    slice_blob(n, x, 3, 0, rot, rotated);
    slice_blob(n, x, 3, rot, head, rest);
  }
  std::string x1 = fresh_blob(y + "/x1"), x2 = fresh_blob(y + "/x2");
  Shape pairs = work;
  pairs[3] = half;
  if (interleaved) {  // even and odd elements: [.., R] as [.., R/2, 2], one column each
    Shape grid = work;
    grid[3] = half;
    grid.push_back(2);
    const std::string g = fresh_blob(y + "/pairs"), e = fresh_blob(y + "/even"), o = fresh_blob(y + "/odd");
    add_unary(n, "reshape", rotated, g, {{"shape", grid.to_vector()}}, "pairs");
    slice_blob(n, g, 4, 0, 1, e);
    slice_blob(n, g, 4, 1, 2, o);
    add_unary(n, "reshape", e, x1, {{"shape", pairs.to_vector()}}, "even");
    add_unary(n, "reshape", o, x2, {{"shape", pairs.to_vector()}}, "odd");
  } else {
    slice_blob(n, rotated, 3, 0, half, x1);
    slice_blob(n, rotated, 3, half, rot, x2);
  }
  auto binary = [&](const char* op, const std::string& a, const std::string& b, const char* what) {
    const std::string out = fresh_blob(y + "/" + what);
    add(make(op, n.name + "/" + what, {a, b}, {out}));
    return out;
  };
  const std::string real = binary("sub", binary("mul", x1, c, "x1cos"), binary("mul", x2, s, "x2sin"), "real");
  const std::string imag = binary("add", binary("mul", x1, s, "x1sin"), binary("mul", x2, c, "x2cos"), "imag");
  std::string out = fresh_blob(y + "/rotated");
  if (interleaved) {
    Shape column = pairs;
    column.push_back(1);
    Shape grid = pairs;
    grid.push_back(2);
    const std::string rc = fresh_blob(y + "/real_col"), ic = fresh_blob(y + "/imag_col"), joined = fresh_blob(y + "/joined");
    add_unary(n, "reshape", real, rc, {{"shape", column.to_vector()}}, "real_col");
    add_unary(n, "reshape", imag, ic, {{"shape", column.to_vector()}}, "imag_col");
    Layer cat = make("concat", n.name + "/interleave", {rc, ic}, {joined});
    cat.params["axis"] = int64_t{4};
    add(std::move(cat));
    Shape back = work;
    back[3] = rot;
    add_unary(n, "reshape", joined, out, {{"shape", back.to_vector()}}, "interleaved");
  } else {
    Layer cat = make("concat", n.name + "/halves", {real, imag}, {out});
    cat.params["axis"] = int64_t{3};
    add(std::move(cat));
  }
  if (rot < head) {
    const std::string whole = fresh_blob(y + "/whole");
    Layer cat = make("concat", n.name + "/rest", {out, rest}, {whole});
    cat.params["axis"] = int64_t{3};
    add(std::move(cat));
    out = whole;
  }
  if (xs.rank() == 3) add_unary(n, "reshape", out, y, {{"shape", xs.to_vector()}}, "hidden");
  else add_unary(n, "identity", out, y);
}

void Importer::grid_sample(const Node& n) {
  std::string mode = n.get_string("mode", n.opset >= 20 ? "linear" : "bilinear");
  if (mode == "bilinear") mode = "linear";  // opset 16's names
  if (mode == "bicubic") mode = "cubic";
  Layer l = make("grid_sample", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
  l.params = {{"mode", mode}, {"padding_mode", n.get_string("padding_mode", "zeros")}, {"align_corners", n.get_int("align_corners", 0)}};
  add(std::move(l));
}

void Importer::arg_reduce(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() == 0) throw n.error("input of rank 0 has no axis", "input");
  const int axis = normalized_axis(n, n.get_int("axis", 0), xs.rank(), "axis");
  add_unary(n, "arg_reduce", input(n, 0), n.out(0),
            {{"axis", int64_t{axis}}, {"keepdims", n.get_int("keepdims", 1)},
             {"select_last_index", n.get_int("select_last_index", 0)},
             {"mode", std::string(n.op() == "ArgMax" ? "max" : "min")}});
  value_types_[n.out(0)] = onnx::TensorProto::INT64;
}

void Importer::constant_math(const Node& n) {
  std::vector<const Blob*> in;
  for (int k = 0; k < n.num_inputs(); ++k) {
    if (!constant(n.in(k))) throw Unsupported{fmt::format("{} of a tensor computed at run time", n.op())};
    in.push_back(constant(n.in(k)));
  }
  static const std::map<std::string, BinaryOp> binary_ops = {
      {"Pow", BinaryOp::pow}, {"Less", BinaryOp::less}, {"Greater", BinaryOp::greater},
      {"And", BinaryOp::logical_and}, {"Or", BinaryOp::logical_or}};
  static const std::map<std::string, UnaryOp> unary_ops = {
      {"Not", UnaryOp::logical_not}, {"Neg", UnaryOp::neg}, {"Abs", UnaryOp::abs},
      {"Sqrt", UnaryOp::sqrt}, {"Floor", UnaryOp::floor}, {"Ceil", UnaryOp::ceil}};
  const std::size_t want = n.op() == "ScatterND" ? 3 : unary_ops.count(n.op()) ? 1 : 2;
  if (in.size() != want) throw n.error(fmt::format("{} takes {} inputs", n.op(), want), "input");
  try {
    if (n.op() == "Mod") {
      constants_[n.out(0)] = binary(n.get_int("fmod", 0) ? BinaryOp::fmod : BinaryOp::mod, *in[0], *in[1]);
    } else if (n.op() == "ScatterND") {
      if (n.get_string("reduction", "none") != "none") throw Unsupported{"ScatterND with a reduction"};
      constants_[n.out(0)] = scattered(*in[0], *in[1], *in[2]);
    } else if (auto b = binary_ops.find(n.op()); b != binary_ops.end()) {
      constants_[n.out(0)] = binary(b->second, *in[0], *in[1]);
    } else {
      constants_[n.out(0)] = onnx_import::unary(unary_ops.at(n.op()), *in[0]);
    }
  } catch (const Error& e) {
    throw n.error(e.message(), "input");
  }
}

// ---------------------------------------------------------------------------
// Size-dependent constants

bool Importer::record_shape_math(const Node& n) {
  static const std::map<std::string, std::string> ops = {
      {"Shape", "shape"}, {"Size", "size"}, {"Identity", "identity"}, {"Gather", "gather"}, {"Concat", "concat"},
      {"Slice", "slice"}, {"Reshape", "reshape"}, {"Unsqueeze", "unsqueeze"}, {"Squeeze", "squeeze"},
      {"Flatten", "flatten"}, {"Transpose", "transpose"}, {"Expand", "expand"}, {"Tile", "tile"},
      {"ConstantOfShape", "constant_of_shape"}, {"Range", "range"}, {"Add", "add"}, {"Sub", "sub"},
      {"Mul", "mul"}, {"Div", "div"}, {"Pow", "pow"}, {"Equal", "equal"}, {"Less", "less"},
      {"Greater", "greater"}, {"And", "and"}, {"Or", "or"}, {"Not", "not"}, {"Neg", "neg"}, {"Abs", "abs"},
      {"Sqrt", "sqrt"}, {"Floor", "floor"}, {"Ceil", "ceil"}, {"Mod", "mod"}, {"Where", "where"},
      {"ScatterND", "scatter_nd"}, {"Cast", "cast"}, {"QuantizeLinear", "fake_quant"}, {"DequantizeLinear", "identity"},
      {"Min", "min"}, {"Max", "max"}, {"ReduceMin", "reduce_min"}, {"ReduceMax", "reduce_max"}};
  auto op = ops.find(n.op());
  if (op == ops.end() || n.num_outputs() != 1) return false;
  Layer l;
  l.type = "shape_math";
  l.name = fresh_layer(n.name + "/shape_math", false);
  l.outputs = {n.out(0)};
  l.params["op"] = op->second;
  std::vector<std::string> inputs;
  for (int k = 0; k < n.num_inputs(); ++k) inputs.push_back(n.in(k));
  auto ints_input = [&](const std::vector<int64_t>& v, const char* what) {
    return add_constant(n.name + "/" + what, int_blob(Shape{static_cast<int64_t>(v.size())}, v));
  };
  const std::string& o = op->second;
  if (o == "shape") {
    if (n.has("start")) l.params["start"] = n.get_int("start");
    if (n.has("end")) l.params["end"] = n.get_int("end");
  } else if (o == "identity") {
    // DequantizeLinear of a value held as its real values (a QuantizeLinear's);
    // of integers (a quantised embedding's rows gathered by positions), per tensor.
    if (n.op() == "DequantizeLinear" && !quantized_.count(n.in(0))) {
      const QParams q = qparams(n, 1, 2, "x", true);
      if (q.scales.size() != 1 || q.zero_points.size() > 1 || q.float_type) return false;
      l.params["op"] = std::string("dequantize");
      l.params["scale"] = static_cast<double>(q.scales[0]);
      l.params["zero_point"] = q.zero_points.empty() ? int64_t{0} : int64_t{q.zero_points[0]};
    }
    inputs.resize(1);
  } else if (o == "fake_quant") {
    // QuantizeLinear of a size-dependent value (YOLOv8's anchor grid, quantised
    // by quantize_static): held as its real values, as quantize_linear holds it.
    const auto q = quantized_.find(n.out(0));
    if (q == quantized_.end()) return false;  // per axis, wider than 8 bits, or a float type
    l.params["scale"] = static_cast<double>(q->second.scale);
    l.params["zero_point"] = int64_t{q->second.zero_point};
    l.params["qmin"] = int64_t{q->second.qmin};
    l.params["qmax"] = int64_t{q->second.qmax};
    inputs.resize(1);
  } else if (o == "gather" || o == "concat" || o == "flatten") {
    l.params["axis"] = n.get_int("axis", o == "flatten" ? 1 : 0);
    if (o == "concat") inputs.erase(std::remove(inputs.begin(), inputs.end(), std::string()), inputs.end());
  } else if (o == "slice" && n.opset < 10) {
    const auto starts = n.get_ints("starts"), ends = n.get_ints("ends");
    std::vector<int64_t> axes(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
    inputs = {n.in(0), ints_input(starts, "starts"), ints_input(ends, "ends"), ints_input(n.get_ints("axes", axes), "axes")};
  } else if (o == "slice") {
    for (int k = 3; k < 5 && k < static_cast<int>(inputs.size()); ++k)
      if (inputs[static_cast<std::size_t>(k)].empty()) return false;
  } else if (o == "reshape") {
    if (n.get_int("allowzero", 0)) l.params["allowzero"] = int64_t{1};
  } else if (o == "unsqueeze" || o == "squeeze") {
    if (n.has("axes")) l.params["axes"] = n.get_ints("axes");
    else if (n.has_in(1)) {
      if (size_dependent(n.in(1)) || !constant(n.in(1))) return false;
      l.params["axes"] = to_ints(*constant(n.in(1)));
    } else if (o == "unsqueeze") return false;
    inputs.resize(1);
  } else if (o == "transpose") {
    if (n.has("perm")) l.params["perm"] = n.get_ints("perm");
  } else if (o == "constant_of_shape") {
    Blob value = float_blob({}, {0.0f});
    if (const auto* a = n.attr("value")) value = read_tensor(a->t(), src_, n.name, "value");
    l.weights["value"] = value;
  } else if (o == "min" || o == "max") {
    if (inputs.size() != 2) return false;  // (two operands; ONNX's variadic form otherwise)
  } else if (o == "reduce_min" || o == "reduce_max") {
    if (n.get_int("noop_with_empty_axes", 0)) return false;
    l.params["keepdims"] = n.get_int("keepdims", 1);
    if (n.has("axes")) {
      l.params["axes"] = n.get_ints("axes");
    } else if (n.has_in(1)) {
      if (size_dependent(n.in(1)) || !constant(n.in(1))) return false;
      l.params["axes"] = to_ints(*constant(n.in(1)));
    }
    inputs.resize(1);
  } else if (o == "mod") {
    if (n.get_int("fmod", 0)) l.params["op"] = std::string("fmod");
  } else if (o == "cast") {
    l.params["to"] = std::string(constant(n.out(0))->dtype() == DType::int64 ? "int64" : "float32");
  }
  for (const auto& i : inputs)
    if (i.empty() || (!constant(i) && !shapes_.count(i))) return false;
  l.inputs = std::move(inputs);
  shape_math_.emplace(n.out(0), std::move(l));
  return true;
}

bool Importer::fold_as_shape_math(const Node& n) {
  if (!record_shape_math(n)) return false;
  const Layer& l = shape_math_.at(n.out(0));
  std::vector<Blob> values;
  std::vector<Shape> shapes;
  for (const auto& i : l.inputs) {
    values.push_back(*constant(i));
    shapes.push_back(values.back().shape());
  }
  Blob v = core::evaluate_shape_math(l, values, shapes);
  onnx_types_[n.out(0)] = v.dtype() == DType::int64 ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT;
  constants_[n.out(0)] = std::move(v);
  return true;
}

std::string Importer::plan_value(const std::string& name) {
  if (shape_math_added_.count(name)) return name;
  Layer l = shape_math_.at(name);
  for (auto& i : l.inputs) i = size_dependent(i) ? plan_value(i) : constant(i) ? value_blob(i) : i;
  shapes_[name] = constants_.at(name).shape();
  shape_math_added_.insert(name);
  graph_.layers.push_back(std::move(l));
  return name;
}

std::string Importer::value_blob(const std::string& name) {
  if (auto it = value_blobs_.find(name); it != value_blobs_.end()) return it->second;
  Layer l;
  l.type = "constant";
  l.name = fresh_layer(name + "/value", false);
  l.outputs = {fresh_blob(name + "/value")};
  l.weights["value"] = *constant(name);
  value_blobs_[name] = l.outputs[0];
  graph_.layers.push_back(std::move(l));
  return value_blobs_[name];
}

void Importer::convert(int i) {
  const Node n = node(i);
  auto record = [&](const std::string& why) {
    unsupported_.push_back(fmt::format("node '{}' ({}{}, opset {}){}{}", n.name, n.proto().domain().empty() ? "" : n.proto().domain() + ".",
                                       n.op(), n.opset, why.empty() ? "" : ": ", why));
    for (const auto& o : n.proto().output()) unavailable_.insert(o);
  };
  const bool default_domain = n.proto().domain().empty() || n.proto().domain() == "ai.onnx";
  const auto& table = n.proto().domain() == "com.microsoft" ? ms_converters() : converters();
  auto conv_it = table.find(n.op());
  if ((!default_domain && n.proto().domain() != "com.microsoft") || conv_it == table.end())
    return record("unsupported operator");
  for (const auto& in : n.proto().input())
    if (unavailable_.count(in)) {  // downstream of an unsupported node: nothing more to say
      for (const auto& o : n.proto().output()) unavailable_.insert(o);
      return;
    }
  // LSTM and GRU may omit Y (the sequence) and keep Y_h; every other node's first output is required.
  const bool first_optional = n.op() == "LSTM" || n.op() == "GRU" || n.op() == "RNN";
  bool any_output = false;
  for (int k = 0; k < n.num_outputs(); ++k) any_output = any_output || !n.out(k).empty();
  if (!any_output || (!first_optional && n.out(0).empty())) throw n.error("node has no output", "output");
  // Shape of a blob whose size follows a symbolic input dim, and computations
  // on such shapes, are kept as shape_math layers (core/shape_plan.hpp).
  bool size_dependent_inputs =
      symbolic_inputs_ && (n.op() == "Shape" || n.op() == "Size") && n.has_in(0) && !constant(n.in(0));
  for (int k = 0; k < n.num_inputs(); ++k) size_dependent_inputs = size_dependent_inputs || size_dependent(n.in(k));
  // Integer and bool tensors computed at run time are float32 inside (exact up
  // to 2^24): operators whose result is the same in exact float arithmetic carry
  // their type on; the others are refused rather than computed as floats (an
  // integer Div would not truncate).
  int typed = -1;
  // Operators whose output has their data's type, whatever their other inputs
  // (indices, shapes, a mask) hold.
  static const std::unordered_set<std::string> typed_by_data = {
      "Gather", "GatherElements", "GatherND", "Reshape", "Expand", "Tile", "Slice", "Squeeze", "Unsqueeze", "Pad",
      "Attention", "Resize", "TopK", "Trilu", "Compress", "ReverseSequence", "CenterCropPad", "RoiAlign",
      "ScatterElements"};
  const int typed_inputs = typed_by_data.count(n.op()) ? std::min(1, n.num_inputs()) : n.num_inputs();
  for (int k = 0; k < typed_inputs; ++k)
    if (n.has_in(k) && !constant(n.in(k)))
      if (auto t = value_types_.find(n.in(k)); t != value_types_.end()) typed = t->second;
  // float16 and bfloat16 values are exact in float32: computing in float32 and
  // rounding at the output is as accurate as the types' own arithmetic, or more.
  // So are the narrow floats (float8, float4e2m1), which ONNX only casts and
  // (de)quantises. float64 is computed in float32 throughout, as the import's
  // warning on a float64 input says, by every operator alike.
  if (typed == onnx::TensorProto::FLOAT16 || typed == onnx::TensorProto::BFLOAT16 || typed == onnx::TensorProto::DOUBLE ||
      (narrow_dtype(typed) && !is_integer(*narrow_dtype(typed))))
    typed = -1;
  if (typed >= 0 && !keeps_integers(n.op()) && !(n.op() == "Pow" && integral_exponent(n)))
    return record(fmt::format("{} of a {} tensor computed at run time (integer tensors are float32 inside, and this "
                              "operator's result would differ)", n.op(), onnx_type_name(typed)));
  const bool foldable = options_.fold_constants && !size_dependent_inputs && n.num_inputs() > 0 && all_constant(n);
  const std::size_t first_layer = graph_.layers.size();
  try {
    static const std::unordered_set<std::string> windowed = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool"};
    // Min and max of sizes (torchvision's min(limit, boxes found)), whose converters
    // make layers: computed as shape_math now, and again when a session plans.
    static const std::unordered_set<std::string> shape_min_max = {"Min", "Max", "ReduceMin", "ReduceMax"};
    if (size_dependent_inputs && all_constant(n) && shape_min_max.count(n.op()) && fold_as_shape_math(n)) {}
    else if (windowed.count(n.op()) && n.has_in(0) && shape_of(n, n.in(0)).rank() == 3) as_2d(n, conv_it->second);
    else (this->*(conv_it->second))(n);
    if (foldable) fold_node(n, first_layer);
    for (int k = 0; k < n.num_inputs(); ++k)
      if (n.has_in(k) && value_sized(n.in(k)))
        for (int o = 0; o < n.num_outputs(); ++o)
          if (!n.out(o).empty() && !constant(n.out(o))) value_sized_.insert(n.out(o));
    keep_quantisation(n);
    if (size_dependent_inputs && constant(n.out(0))) record_shape_math(n);
    static const std::unordered_set<std::string> own_types = {"Cast", "CastLike", "Where", "If", "DequantizeLinear", "QLinearConv",
                                                              "QLinearMatMul", "ConvInteger", "MatMulInteger", "OneHot",
                                                              "NonZero", "NonMaxSuppression", "Unique", "Loop", "Scan"};
    if (typed >= 0 && !own_types.count(n.op()))
      for (int k = 0; k < n.num_outputs(); ++k)
        if (!n.out(k).empty() && !constant(n.out(k))) value_types_.emplace(n.out(k), typed);
  } catch (const Unsupported& u) {
    record(u.why);
  } catch (const Error& e) {
    throw e.with_layer(n.name).with_file(file_);
  }
}

void Importer::fold_node(const Node& n, std::size_t first) {
  bool wanted = false;
  for (int k = 0; k < n.num_outputs(); ++k) wanted = wanted || (!n.out(k).empty() && !constant(n.out(k)));
  if (!wanted || first >= graph_.layers.size()) return;
  // The added layers run in order on the constants' values (as float32, what layers read).
  std::unordered_map<std::string, Blob> values;
  std::size_t input_bytes = 0;
  for (std::size_t i = first; i < graph_.layers.size(); ++i) {
    const Layer& l = graph_.layers[i];
    std::vector<Blob> ins;
    for (const auto& in : l.inputs) {
      if (auto v = values.find(in); v != values.end()) ins.push_back(v->second);
      else if (const Blob* c = constant(in); c && !size_dependent(in)) ins.push_back(to_float(*c));
      else return;  // reads a blob computed at run time
      input_bytes += ins.back().byte_size();
    }
    std::vector<Blob> outs;
    try {
      outs = l.type == "constant" ? std::vector<Blob>{to_float(l.weight("value"))} : core::evaluate_layer(l, ins);
      for (const Blob& o : outs) check_folded_growth(o.shape(), o.dtype(), input_bytes);
    } catch (const std::exception& e) {
      core::debug("{}: node '{}' ({}) not folded at import: {}", file_, n.name, n.op(), e.what());
      return;  // stays layers: no routine computes it here, or it is too large
    }
    for (std::size_t k = 0; k < outs.size() && k < l.outputs.size(); ++k) values[l.outputs[k]] = std::move(outs[k]);
  }
  for (int k = 0; k < n.num_outputs(); ++k)
    if (!n.out(k).empty() && !constant(n.out(k)) && !values.count(n.out(k))) return;
  // The result's type: booleans and indices are integers, as is what an
  // integer-keeping operator computes from integer data; the rest float32.
  static const std::unordered_set<std::string> logic = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And",
                                                        "Or", "Xor", "Not", "IsNaN", "IsInf"};
  auto integer_output = [&](int k) {
    if (logic.count(n.op()) || n.op() == "ArgMax" || n.op() == "ArgMin" || (n.op() == "TopK" && k == 1) ||
        n.op() == "NonMaxSuppression" || n.op() == "NonZero" || (n.op() == "Unique" && k > 0))
      return true;
    const Blob* data = n.has_in(0) ? constant(n.in(0)) : nullptr;
    return data && data->dtype() == DType::int64 && keeps_integers(n.op());
  };
  for (int k = 0; k < n.num_outputs(); ++k) {
    const std::string& o = n.out(k);
    if (o.empty() || constant(o)) continue;
    Blob v = values.at(o);
    if (integer_output(k)) {
      std::vector<int64_t> ints(static_cast<std::size_t>(v.numel()));
      const float* f = v.data_as<float>();
      for (std::size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int64_t>(std::llround(f[i]));
      v = int_blob(v.shape(), ints);
      onnx_types_[o] = logic.count(n.op()) ? onnx::TensorProto::BOOL : onnx::TensorProto::INT64;
    } else {
      onnx_types_[o] = onnx::TensorProto::FLOAT;
    }
    constants_[o] = std::move(v);
  }
  // The layers computed go; the constants they read stay (later nodes may read them as blobs).
  for (std::size_t i = first; i < graph_.layers.size(); ++i)
    if (graph_.layers[i].type != "constant")
      for (const auto& o : graph_.layers[i].outputs) shapes_.erase(o);
  graph_.layers.erase(std::remove_if(graph_.layers.begin() + static_cast<std::ptrdiff_t>(first), graph_.layers.end(),
                                     [](const Layer& l) { return l.type != "constant"; }),
                      graph_.layers.end());
}

bool Importer::keeps_integers(const std::string& op) {
  static const std::unordered_set<std::string> ops = {
      "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Gather",
      "Expand",   "Tile",    "Pad",     "Add",     "Sub",       "Mul",       "Neg",    "Abs",   "Max",   "Min",
      "Sum",      "Relu",    "Clip",    "ReduceSum", "ReduceMax", "ReduceMin", "MaxPool", "Cast", "CastLike",
      "Shape",    "Size",    "Dropout", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
      "Xor",      "Not",     "Where",   "Sign",  "Floor", "Ceil", "Round", "IsNaN", "IsInf", "ArgMax", "ArgMin",
      "GatherElements", "Trilu", "Div", "Mod", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "BitShift",
      "CumSum", "CumProd", "TopK", "ReduceProd", "SpaceToDepth", "DepthToSpace", "DequantizeLinear", "QLinearConv",
      "QLinearMatMul", "ConvInteger", "MatMulInteger", "ScatterND", "ScatterElements", "GatherND", "EyeLike", "OneHot", "CenterCropPad", "Compress",
      "ReverseSequence", "If", "NonZero", "Unique",
      "Loop", "Scan"};  // (a body checks its own operators on the types it is given)
  return ops.count(op) != 0;
}

void Importer::finish_outputs() {
  for (const auto& o : g_.output()) {
    const std::string& name = o.name();
    if (unavailable_.count(name)) continue;  // already reported
    if (std::any_of(graph_.inputs.begin(), graph_.inputs.end(), [&](const TensorInfo& t) { return t.name == name; }))
      throw Error("a graph output that is a graph input is not supported", file_, {}, name);
    if (!shapes_.count(name)) {
      if (!constant(name)) throw Error("graph output is produced by no node", file_, {}, name);
      materialize(name);  // a constant output: its constant layer
    }
    graph_.outputs.push_back(name);
    // A typed output (indices, a mask) leaves the net in its ONNX type.
    if (o.type().has_tensor_type() && o.type().tensor_type().elem_type() != onnx::TensorProto::UNDEFINED) {
      const int type = o.type().tensor_type().elem_type();
      const std::optional<DType> dtype = edge_dtype(type);
      if (!dtype)
        throw Error(fmt::format("graph output has element type {}; nets hand back float16/32/64, integer and bool outputs",
                                onnx_type_name(type)),
                    file_, {}, name);
      if (*dtype != DType::float32) graph_.output_dtypes[name] = *dtype;
    }
  }
}

core::Graph Importer::run() {
  read_opsets();
  read_initializers();
  read_inputs();
  order_nodes();
  done_.assign(nodes_.size(), false);
  // Constant nodes first (they read nothing): the patterns look at their values.
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i)
    if (is(i, "Constant")) {
      convert(i);
      done_[static_cast<std::size_t>(i)] = true;
    }
  find_patterns();
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    if (done_[static_cast<std::size_t>(i)]) continue;
    if (int f = fused_of_[static_cast<std::size_t>(i)]; f >= 0) {
      const Fused& fu = fused_[static_cast<std::size_t>(f)];
      if (i != fu.last()) continue;  // the fused layer is added at its last node
      const Node n = node(i);
      if (unavailable_.count(fu.x)) {
        unavailable_.insert(fu.y);
        continue;
      }
      try {
        emit_fused(fu);
      } catch (const Unsupported& u) {
        unsupported_.push_back(fmt::format("node '{}' ({}, opset {}): {}", n.name, n.op(), n.opset, u.why));
        unavailable_.insert(fu.y);
      } catch (const Error& e) {
        throw e.with_layer(n.name).with_file(file_);
      }
      continue;
    }
    convert(i);
  }
  finish_outputs();
  if (!unsupported_.empty()) {
    throw Error(fmt::format("{} unsupported node{} (supported: opsets {}..{}; see softneuro/import.hpp):\n  {}",
                            unsupported_.size(), unsupported_.size() == 1 ? "" : "s", kMinOpset, kMaxOpset,
                            fmt::join(unsupported_, "\n  ")),
                file_, {}, "op_type");
  }
  graph_.name = options_.name.empty() ? (g_.name().empty() ? std::filesystem::path(file_).stem().string() : g_.name())
                                      : options_.name;
  return std::move(graph_);
}

}  // namespace

/// Parses the file straight from a read-only memory map: no copy of the bytes
/// on the heap (the initializers alone can be hundreds of MB).
void parse_file(const std::string& path, onnx::ModelProto& model) {
  const core::MappedFile m = core::map_file(path);
  if (m.size > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw Error("the file is larger than the 2 GB a protobuf message can hold (store weights as external data)", path);
  if (!model.ParseFromArray(m.data, static_cast<int>(m.size)))
    throw Error("not an ONNX model: the protobuf message does not parse (truncated or another format)", path);
}

core::Graph import_graph(const std::string& path, const ImportOptions& options,
                         const std::map<std::string, int64_t>* symbol_sizes, InputSymbols* symbols) {
  try {
    auto model = std::make_unique<onnx::ModelProto>();
    parse_file(path, *model);
    if (!model->has_graph()) throw Error("not an ONNX model: it holds no graph", path, {}, "graph");
    Importer importer(*model, path, options, symbol_sizes, symbols);
    return importer.run();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error("out of memory while importing", path);
  } catch (const std::exception& e) {
    throw Error(fmt::format("import failed: {}", e.what()), path);
  }
}


}  // namespace onnx_import

namespace onnx_import {
namespace {

core::Graph import_optimized(const std::string& path, const ImportOptions& options,
                             const std::map<std::string, int64_t>* symbol_sizes = nullptr, InputSymbols* symbols = nullptr) {
  core::Graph graph = import_graph(path, options, symbol_sizes, symbols);
  try {
    core::optimize(graph, import::pass_options(options));
  } catch (const Error& e) {
    throw e.file().empty() ? e.with_file(path) : e;
  }
  core::record_model_quantisation(graph);
  return graph;
}

/// The first import: at the default sizes of the symbolic dims, else (a graph
/// valid only for some sizes, such as a recogniser whose height must pool to
/// one row) at the first of a few common sizes that every non-batch name takes.
core::Graph import_first(const std::string& path, const ImportOptions& options, InputSymbols& symbols) {
  try {
    return import_optimized(path, options, nullptr, &symbols);
  } catch (const Error& first) {
    if (symbols.sizes.empty()) throw;
    for (int64_t size : {32, 48, 16, 96, 128, 224, 256, 320, 8, 512}) {
      std::map<std::string, int64_t> sizes = symbols.sizes;
      bool any = false;
      for (auto& [name, s] : sizes)
        if (s != 1) s = size, any = true;
      if (!any) break;
      try {
        InputSymbols tried;
        core::Graph g = import_optimized(path, options, &sizes, &tried);
        core::info("{}: the model does not translate with its symbolic dims at 64 ({}); they take {} instead", path,
                   first.message(), size);
        symbols = std::move(tried);
        return g;
      } catch (const Error&) {
      }
    }
    throw;
  }
}

/// Imports the model again with each named size of the symbolic dims at other
/// values, one name at a time (every dim naming it varies with it); keeps the
/// names whose every effect `generalize` expresses, and fixes the dims of the
/// others at their default size (with a warning naming the input, the dim and
/// the layer that needs it).
void keep_dynamic_dims(core::Graph& graph, const std::string& path, const ImportOptions& options,
                       const InputSymbols& symbols) {
  std::vector<BlobShapes> sizes;
  ReshapeSpecs specs;
  std::set<std::string> fixed, done;
  for (const auto& [name, base] : symbols.sizes) {
    if (done.count(name)) continue;
    if (sizes.empty()) sizes.push_back(core::infer_shapes(graph));
    // A model need not run at every size (a recogniser whose height pools
    // to one row): a size it refuses is tried no further, the next one is.
    // A graph that differs at a size it runs at fixes the dims.
    const std::vector<int64_t> probes =
        base == 1 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{base + base / 2, base - base / 4, base * 2};
    std::map<std::string, int64_t> at = symbols.sizes;
    int64_t tried = base;  // the size that failed first
    auto try_names = [&](const std::vector<std::string>& names) {
      std::string why;
      for (int64_t size : probes) {
        for (const auto& n : names) at[n] = size;
        if (why.empty()) tried = size;
        core::Graph probe;
        try {
          probe = import_optimized(path, options, &at);
        } catch (const Error& e) {
          if (why.empty()) why = e.message();
          continue;
        }
        return generalize(graph, probe, sizes, specs);
      }
      return why;
    };
    std::string why = try_names({name});
    const int64_t tried_alone = tried;
    if (!why.empty()) {
      // Exporters may name one size twice (torch.export's batch of each
      // input, s72 and s43): the names of the same default size not yet
      // tried, varied together with this one.
      std::vector<std::string> group{name};
      for (const auto& [other, size] : symbols.sizes)
        if (other != name && size == base && !done.count(other)) group.push_back(other);
      at = symbols.sizes;
      if (group.size() > 1 && try_names(group).empty()) {
        why.clear();
        done.insert(group.begin(), group.end());
        core::info("{}: symbolic dims named {} vary together", path, fmt::join(group, ", "));
      }
      tried = tried_alone;
    }
    done.insert(name);
    if (why.empty()) continue;
    fixed.insert(name);
    for (const auto& d : symbols.dims)
      if (d.terms.count(name))
        core::warn("{}: input '{}' dim {} is symbolic ({}), but the model runs at one size of it only, {} (at {}={}: {}); "
                   "it stays {} (give another with --input-shape)",
                   path, d.input, d.dim, name, base, name, tried, why, d.size_at(symbols.sizes));
  }
  for (auto& in : graph.inputs) {
    std::vector<int> kept;
    for (int dim : in.dynamic_dims) {
      bool free = true;
      for (const auto& d : symbols.dims)
        if (d.input == in.name && d.dim == dim)
          for (const auto& [name, k] : d.terms) free = free && !fixed.count(name);
      if (free) kept.push_back(dim);
    }
    in.dynamic_dims = std::move(kept);
  }
  for (const auto& [i, spec] : specs) spec.apply(graph.layers[i]);
}

}  // namespace
}  // namespace onnx_import

Model import_onnx(const std::string& path, const ImportOptions& options) {
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  const auto t0 = clock::now();
  onnx_import::InputSymbols symbols;
  core::Graph graph = onnx_import::import_first(path, options, symbols);
  const auto t1 = clock::now();
  onnx_import::keep_dynamic_dims(graph, path, options, symbols);
  const auto t2 = clock::now();
  for (const auto& in : graph.inputs)
    if (!in.dynamic_dims.empty())
      core::info("{}: input '{}' takes any size in dims [{}] (default shape {})", path, in.name,
                 fmt::join(in.dynamic_dims, ","), in.shape.to_string());
  Model model = detail::make_model(std::move(graph), path);
  core::info("{}: read, translated and optimized in {:.1f} ms, dynamic dims checked in {:.1f} ms, model built in {:.1f} ms",
             path, ms(t0, t1), ms(t1, t2), ms(t2, clock::now()));
  return model;
}

}  // namespace softneuro
