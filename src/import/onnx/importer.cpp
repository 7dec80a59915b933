// ONNX import: The translator's scaffolding: the converter tables, reading the graph, topological order, constants and shape math, and import_onnx.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

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
      {"SkipLayerNormalization", &Importer::skip_layer_norm},
      {"SkipSimplifiedLayerNormalization", &Importer::skip_layer_norm},
      {"EmbedLayerNormalization", &Importer::embed_layer_norm},
      {"QEmbedLayerNormalization", &Importer::qembed_layer_norm},
      {"Attention", &Importer::contrib_attention},
      {"QAttention", &Importer::qattention},
      {"MultiHeadAttention", &Importer::multi_head_attention},
      {"BiasGelu", &Importer::contrib_activation},
      {"FastGelu", &Importer::contrib_activation},
      {"Gelu", &Importer::contrib_activation},
      {"QuickGelu", &Importer::contrib_activation},
      {"BiasAdd", &Importer::contrib_activation},
      {"FusedMatMul", &Importer::fused_matmul},
      {"RotaryEmbedding", &Importer::contrib_rotary},
      {"GroupQueryAttention", &Importer::group_query_attention},
      {"MatMulNBits", &Importer::matmul_nbits},
      {"GatherBlockQuantized", &Importer::gather_block_quantized},
      {"FusedConv", &Importer::fused_conv},
      {"FusedGemm", &Importer::fused_gemm},
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
      // ONNX Runtime's name for it, in the default domain (its transformer optimizer writes it).
      {"SimplifiedLayerNormalization", &Importer::rms_norm},
      {"Attention", &Importer::attention},
      {"LinearAttention", &Importer::linear_attention},
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
      {"SequenceEmpty", &Importer::sequence_op},
      {"SequenceConstruct", &Importer::sequence_op},
      {"SequenceInsert", &Importer::sequence_op},
      {"SequenceErase", &Importer::sequence_op},
      {"SequenceLength", &Importer::sequence_op},
      {"SequenceAt", &Importer::sequence_op},
      {"ConcatFromSequence", &Importer::sequence_op},
      {"SplitToSequence", &Importer::sequence_op},
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
      {"CausalConvWithState", &Importer::causal_conv_with_state},
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
      {"MaxUnpool", &Importer::max_unpool},
      {"TensorScatter", &Importer::tensor_scatter},
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
  // Those only MatMulNBits or GatherBlockQuantized read as codes or zero points stay bytes (contrib.cpp).
  std::unordered_map<std::string, bool> nbits_only;
  for (const auto& node : g_.node())
    for (int i = 0; i < node.input_size(); ++i) {
      auto [it, fresh] = nbits_only.emplace(node.input(i), true);
      const bool ms = node.domain() == "com.microsoft";
      it->second = it->second && ((ms && node.op_type() == "MatMulNBits" && (i == 1 || i == 3)) ||
                                  (ms && node.op_type() == "GatherBlockQuantized" && (i == 0 || i == 3)));
    }
  for (auto& t : *g_.mutable_initializer()) {
    if (t.name().empty()) throw Error("an initializer has no name", file_, {}, "initializer");
    const auto only = nbits_only.find(t.name());
    if (!constants_.emplace(t.name(), read_tensor(t, src_, {}, t.name(), only != nbits_only.end() && only->second)).second)
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
      for (const auto& d : tt.shape().dim()) shape.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
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
        const std::string param = d.has_dim_param() ? d.dim_param() : std::string();
        std::string text = param;
        if (read_as_ && read_as_->count(param)) text = read_as_->at(param);
        symbols.dims.push_back(parse_dim_param(text, fmt::format("{}[{}]", name, i)));
        symbols.dims.back().param = param;
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
  if (read_as_) symbols.read_as = *read_as_;
  if (symbols_out_) *symbols_out_ = symbols;
  mark_value_inputs();
}

// Inputs whose values set sizes (a window's size, Range's bounds,
// ConstantOfShape's shape, the trip count of a Loop with scan outputs), read
// directly or through the arithmetic that shape computations do: held as
// values known when a session plans (size_dependent, at their default value
// here), so that those nodes become shape_math and the session plans per
// value (core::value_inputs). Other inputs are never read so: a plan per value
// of a position id would be a plan per step.
void Importer::mark_value_inputs() {
  static const std::map<std::string, std::vector<int>> sets_sizes = {
      {"Range", {0, 1, 2}}, {"ConstantOfShape", {0}}, {"HannWindow", {0}}, {"HammingWindow", {0}},
      {"BlackmanWindow", {0}}, {"Loop", {0}}};
  // In a loop's body, also a Slice's bounds (the iteration number picking a
  // row): the body plans per iteration there, as the shapes may change.
  static const std::map<std::string, std::vector<int>> sets_sizes_in_body = {{"Slice", {1, 2}}};
  static const std::set<std::string> passes_on = {"Identity", "Cast", "Add", "Sub", "Mul", "Div", "Ceil", "Floor", "Max", "Relu",
                                                  "Min", "Neg", "Abs", "Squeeze", "Unsqueeze", "Concat", "Reshape"};
  std::map<std::string, std::set<std::string>> from;  // a tensor: the small inputs it is computed from
  for (const auto& in : graph_.inputs)
    if (in.dynamic_dims.empty() && in.shape.rank() <= 1 && in.shape.numel() <= 64) from[in.name] = {in.name};
  if (from.empty()) return;
  std::set<std::string> marked;
  for (const auto& p : g_.node()) {
    const std::vector<int>* reads = nullptr;
    if (auto r = sets_sizes.find(p.op_type()); r != sets_sizes.end()) reads = &r->second;
    else if (auto b = sets_sizes_in_body.find(p.op_type()); body_ && b != sets_sizes_in_body.end()) reads = &b->second;
    const bool loop_scans = p.op_type() == "Loop" && p.output_size() > p.input_size() - 2;
    if (reads && (p.op_type() != "Loop" || loop_scans))
      for (int k : *reads)
        if (k < p.input_size())
          if (auto f = from.find(p.input(k)); f != from.end()) marked.insert(f->second.begin(), f->second.end());
    if (passes_on.count(p.op_type()) && p.output_size() == 1) {
      std::set<std::string> all;
      for (const auto& i : p.input())
        if (auto f = from.find(i); f != from.end()) all.insert(f->second.begin(), f->second.end());
      if (!all.empty()) from[p.output(0)] = std::move(all);
    }
  }
  for (const auto& in : graph_.inputs)
    if (marked.count(in.name)) {
      constants_[in.name] = core::value_default(in);
      Layer planned;  // read by the plan as it is: no layer computes it
      planned.type = "input";
      shape_math_.emplace(in.name, std::move(planned));
      shape_math_added_.insert(in.name);
    }
}

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

void Importer::reshape_to(const Node& n, const std::string& x, const Shape& shape, const std::string& y) {
  if (const Blob* c = constant(x)) {
    constants_[y] = reshaped(*c, shape);
    return;
  }
  std::map<std::string, Attr> p{{"shape", shape.to_vector()}};
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) p["allowzero"] = int64_t{1};  // a 0 is a 0, not a copy
  add_unary(n, "reshape", as_blob(n, x), y, std::move(p));
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
      {"Sqrt", UnaryOp::sqrt}, {"Floor", UnaryOp::floor}, {"Ceil", UnaryOp::ceil}, {"Relu", UnaryOp::relu}};
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

bool Importer::record_shape_math(const Node& n) {
  static const std::map<std::string, std::string> ops = {
      {"Shape", "shape"}, {"Size", "size"}, {"Identity", "identity"}, {"Gather", "gather"}, {"Concat", "concat"},
      {"Slice", "slice"}, {"Reshape", "reshape"}, {"Unsqueeze", "unsqueeze"}, {"Squeeze", "squeeze"},
      {"Flatten", "flatten"}, {"Transpose", "transpose"}, {"Expand", "expand"}, {"Tile", "tile"},
      {"ConstantOfShape", "constant_of_shape"}, {"Range", "range"}, {"Add", "add"}, {"Sub", "sub"},
      {"Mul", "mul"}, {"Div", "div"}, {"Pow", "pow"}, {"Equal", "equal"}, {"Less", "less"},
      {"Greater", "greater"}, {"And", "and"}, {"Or", "or"}, {"Not", "not"}, {"Neg", "neg"}, {"Abs", "abs"},
      {"Sqrt", "sqrt"}, {"Floor", "floor"}, {"Ceil", "ceil"}, {"Relu", "relu"}, {"Mod", "mod"}, {"Where", "where"},
      {"ScatterND", "scatter_nd"}, {"Cast", "cast"}, {"QuantizeLinear", "fake_quant"}, {"DequantizeLinear", "identity"},
      {"Min", "min"}, {"Max", "max"}, {"ReduceMin", "reduce_min"}, {"ReduceMax", "reduce_max"},
      {"HannWindow", "window"}, {"HammingWindow", "window"}, {"BlackmanWindow", "window"}, {"Trilu", "trilu"},
      {"EyeLike", "eye_like"}};
  if (n.op() == "Split") return record_split_shape_math(n);
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
  } else if (o == "window") {
    l.params["kind"] = window_kind(n.op());
    l.params["periodic"] = n.get_int("periodic", 1);
    l.params["integer"] = int64_t{!floating_type(static_cast<int>(n.get_int("output_datatype", onnx::TensorProto::FLOAT)))};
  } else if (o == "trilu") {
    l.params["upper"] = n.get_int("upper", 1);
  } else if (o == "eye_like") {  // (XLNet's -eye(seq) of its mask)
    l.params["k"] = n.get_int("k", 0);
    l.params["integer"] = int64_t{constant(n.out(0)) && constant(n.out(0))->dtype() == DType::int64};
  } else if (o == "cast") {
    l.params["to"] = std::string(constant(n.out(0))->dtype() == DType::int64 ? "int64" : "float32");
  }
  for (const auto& i : inputs)
    if (i.empty() || (!constant(i) && !shapes_.count(i))) return false;
  l.inputs = std::move(inputs);
  shape_math_.emplace(n.out(0), std::move(l));
  return true;
}

// A Split of a size-dependent value (CodeGen's sin/cos table gathered at the
// positions, split in halves): each part a shape_math slice at the offsets it
// has at the import size. A part whose offsets follow the sizes differs at the
// second import size, so that dim stays fixed with the import's warning.
bool Importer::record_split_shape_math(const Node& n) {
  const Blob* x = n.has_in(0) ? constant(n.in(0)) : nullptr;
  if (!x) return false;
  const int rank = x->shape().rank();
  int64_t axis = n.get_int("axis", 0);
  if (axis < -rank || axis >= rank) return false;
  if (axis < 0) axis += rank;
  int64_t start = 0;
  std::vector<std::pair<std::string, Layer>> parts;
  for (int k = 0; k < n.num_outputs(); ++k) {
    const Blob* part = constant(n.out(k));
    if (n.out(k).empty() || !part) return false;
    const int64_t end = start + part->shape()[static_cast<int>(axis)];
    Layer l;
    l.type = "shape_math";
    l.name = fresh_layer(fmt::format("{}/shape_math_{}", n.name, k), false);
    l.outputs = {n.out(k)};
    l.params["op"] = std::string("slice");
    auto ints = [&](int64_t v, const char* what) {
      return add_constant(fmt::format("{}/{}_{}", n.name, what, k), int_blob(Shape{1}, {v}));
    };
    l.inputs = {n.in(0), ints(start, "starts"), ints(end, "ends"), ints(axis, "axes")};
    parts.emplace_back(n.out(k), std::move(l));
    start = end;
  }
  for (auto& [name, l] : parts) shape_math_.emplace(name, std::move(l));
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
      "ScatterElements", "MaxUnpool", "TensorScatter"};
  // ONNX Runtime's transformer operators: their integer inputs are token ids and masks.
  // QAttention's input is a DynamicQuantizeLinear's integers, which it dequantises.
  static const std::unordered_set<std::string> contrib_float = {"EmbedLayerNormalization", "Attention", "MultiHeadAttention",
                                                                   "QAttention", "QEmbedLayerNormalization",
                                                                   "GroupQueryAttention", "RotaryEmbedding", "MatMulNBits",
                                                                   "GatherBlockQuantized"};
  const bool ms = n.proto().domain() == "com.microsoft";
  const int typed_inputs = ms && contrib_float.count(n.op()) ? 0
                           : typed_by_data.count(n.op()) ? std::min(1, n.num_inputs())
                                                         : n.num_inputs();
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
    static const std::unordered_set<std::string> windowed = {"Conv", "ConvTranspose", "ConvInteger", "MaxPool", "AveragePool",
                                                               "LpPool"};
    // Min and max of sizes (torchvision's min(limit, boxes found)) and a
    // triangle of a mask of the input's size (Mistral's sliding window), whose
    // converters make layers: computed as shape_math now, and again when a
    // session plans.
    static const std::unordered_set<std::string> planned_ops = {"Min", "Max", "ReduceMin", "ReduceMax", "Trilu"};
    if (size_dependent_inputs && all_constant(n) && planned_ops.count(n.op()) && fold_as_shape_math(n)) {}
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
      "ReverseSequence", "If", "NonZero", "Unique", "QuantizeLinear",
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
                         const std::map<std::string, int64_t>* symbol_sizes, InputSymbols* symbols,
                         const std::map<std::string, std::string>* read_as, bool map_weights) {
  try {
    auto model = std::make_unique<onnx::ModelProto>();
    parse_file(path, *model);
    if (!model->has_graph()) throw Error("not an ONNX model: it holds no graph", path, {}, "graph");
    Importer importer(*model, path, options, symbol_sizes, symbols, read_as, map_weights);
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
                             const std::map<std::string, int64_t>* symbol_sizes = nullptr, InputSymbols* symbols = nullptr,
                             const std::map<std::string, std::string>* read_as = nullptr, bool map_weights = false) {
  core::Graph graph = import_graph(path, options, symbol_sizes, symbols, read_as, map_weights);
  try {
    core::optimize(graph, import::pass_options(options));
  } catch (const Error& e) {
    throw e.file().empty() ? e.with_file(path) : e;
  }
  return graph;
}

/// The first import: at the default sizes of the symbolic dims, else (a graph
/// valid only for some sizes, such as a recogniser whose height must pool to
/// one row, or a waveform that a stack of strided convolutions shortens) at
/// the first of a few common sizes that every non-batch name takes, else with
/// a dim named "past + 1" read as past plus another name, else with one
/// leading name other than the batch at a few sizes (and such readings).
core::Graph import_first(const std::string& path, const ImportOptions& options, InputSymbols& symbols) {
  try {
    return import_optimized(path, options, nullptr, &symbols);
  } catch (const Error& first) {
    if (symbols.sizes.empty()) throw;
    for (int64_t size : {32, 48, 16, 96, 128, 224, 256, 320, 8, 512, 1024, 4096, 16000}) {
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
    // (Not for unsupported operators: they are so at any size.)
    if (first.field() == "op_type") throw;
    // A dim named "past + 1" beside another input's "sequence": Optimum
    // names its decoders' attention masks after the decode step, where the
    // graph takes past + sequence. Where the names do not translate, each
    // such + 1 read as one other name (a size that is 1 in that step).
    std::vector<std::map<std::string, std::string>> readings{{}};
    for (const SymbolicDim& d : symbols.dims) {
      if (d.offset != 1 || d.terms.empty()) continue;
      std::string text;
      for (const auto& [name, k] : d.terms) text += fmt::format("{}{}*{}", text.empty() ? "" : "+", k, name);
      for (const auto& [other, size] : symbols.sizes)
        if (!d.terms.count(other) && size != 1) readings.push_back({{d.param, fmt::format("{}+{}", text, other)}});
    }
    auto import_read_as = [&](const std::map<std::string, std::string>& read_as, const std::map<std::string, int64_t>* sizes,
                       const std::string& how) -> std::optional<core::Graph> {
      try {
        InputSymbols tried;
        core::Graph g = import_optimized(path, options, sizes, &tried, &read_as);
        for (const auto& [param, as] : read_as)
          core::info("{}: the dim named '{}' read as {}: the model does not translate with + 1", path, param, as);
        if (!how.empty()) core::info("{}: the model does not translate {} ({})", path, how, first.message());
        symbols = std::move(tried);
        return g;
      } catch (const Error&) {
        return std::nullopt;
      }
    };
    for (std::size_t r = 1; r < readings.size(); ++r)
      if (auto g = import_read_as(readings[r], nullptr, "")) return std::move(*g);
    // A leading dim that is not a batch (Bloom's and Falcon's caches are
    // [batch * heads, ...]): each such name alone at a few sizes; the batch
    // (the first input's leading dim) stays 1.
    const std::string batch = symbols.dims.empty() || symbols.dims[0].dim != 0 || symbols.dims[0].terms.size() != 1
                                  ? std::string()
                                  : symbols.dims[0].terms.begin()->first;
    for (const auto& read_as : readings)
      for (const auto& [name, base] : symbols.sizes) {
        if (base != 1 || name == batch) continue;
        for (int64_t size : {2, 4, 8, 12, 16, 3, 6, 24, 32, 64}) {
          std::map<std::string, int64_t> sizes = symbols.sizes;
          sizes[name] = size;
          if (auto g = import_read_as(read_as, &sizes, fmt::format("with '{}' at 1; it takes {} instead", name, size))) return std::move(*g);
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
  SizeSpecs specs;
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
          probe = import_optimized(path, options, &at, nullptr, &symbols.read_as, true);
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
    // One warning per name (a decoder's cache names its head dim in every past input: 64 of them).
    std::vector<std::string> where;
    int64_t stays = base;
    for (const auto& d : symbols.dims)
      if (d.terms.count(name)) {
        where.push_back(fmt::format("'{}' dim {}", d.input, d.dim));
        stays = d.size_at(symbols.sizes);
      }
    if (where.empty()) continue;
    const std::size_t shown = std::min<std::size_t>(where.size(), 3);
    core::warn("{}: input{} {}{} {} symbolic ({}), but the model runs at one size of it only, {} (at {}={}: {}); "
               "it stays {} (give another with --input-shape)",
               path, where.size() > 1 ? "s" : "", fmt::join(where.begin(), where.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
               where.size() > shown ? fmt::format(" and {} more", where.size() - shown) : "", where.size() > 1 ? "are" : "is", name,
               base, name, tried, why, stays);
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
  // A quantised model's own quantisation (its Q/DQ steps) travels beside the graph.
  core::Tuning own;
  own.blob_quant = core::model_quantisation(graph);
  Model model = detail::make_model(std::move(graph), std::move(own), path);
  core::info("{}: read, translated and optimized in {:.1f} ms, dynamic dims checked in {:.1f} ms, model built in {:.1f} ms",
             path, ms(t0, t1), ms(t1, t2), ms(t2, clock::now()));
  return model;
}

}  // namespace softneuro
