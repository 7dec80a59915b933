// ONNX import: the transformer operators of ONNX Runtime's com.microsoft
// domain, which its transformer optimizer (onnxruntime.transformers.optimizer,
// Optimum's --optimize) writes into BERT, GPT-2, ViT, T5, Whisper, CLIP and
// LLaMA files: SkipLayerNormalization, EmbedLayerNormalization, Attention,
// MultiHeadAttention, the GELU forms, FusedMatMul; FusedConv and FusedGemm
// (files ONNX Runtime saved optimized); and onnxruntime-genai's
// decoders: GroupQueryAttention, RotaryEmbedding, MatMulNBits (4-bit weights,
// dequantised here into float32). Each is converted as the
// standard operators it computes (nodes synthesized here, converted by their
// own converters): the passes then fuse them as they fuse a plain export's,
// constants fold and sizes stay symbolic the same way.
#include "import/onnx/importer.hpp"
#include "core/weight_quant.hpp"

namespace softneuro {
namespace onnx_import {

namespace {

using Attributes = std::function<void(onnx::NodeProto&)>;

Attributes int_attr(const char* name, int64_t v) {
  return [=](onnx::NodeProto& p) {
    auto* a = p.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  };
}

Attributes float_attr(const char* name, double v) {
  return [=](onnx::NodeProto& p) {
    auto* a = p.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(static_cast<float>(v));
  };
}

Attributes string_attr(const char* name, std::string v) {
  return [=](onnx::NodeProto& p) {
    auto* a = p.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  };
}

Attributes ints_attr(const char* name, std::vector<int64_t> v) {
  return [=](onnx::NodeProto& p) {
    auto* a = p.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  };
}

Attributes both(Attributes a, Attributes b) {
  return [=](onnx::NodeProto& p) {
    a(p);
    b(p);
  };
}

}  // namespace

// x (+ bias) + skip, then LayerNormalization or, Simplified, RMSNormalization
// over the last axis; output 3 is the sum (the next block's residual). The
// bias first, as a plain export adds it: it then folds into the dense layer
// before (ONNX Runtime adds x + skip + bias, a rounding apart).
void Importer::skip_layer_norm(const Node& n) {
  const bool simplified = n.op() == "SkipSimplifiedLayerNormalization";
  const int bias_k = simplified ? 3 : 4;
  if (simplified && n.num_outputs() > 2 && used(n.out(2)))
    throw Unsupported{"SkipSimplifiedLayerNormalization's inv_std_var output"};
  const std::string y = n.out(0);
  const std::string sum = n.num_outputs() > 3 && used(n.out(3)) ? n.out(3) : synthesized_value(y + "/input_skip_bias");
  std::string x = n.in(0);
  if (n.has_in(bias_k)) {
    x = synthesized_value(y + "/input_bias");
    convert_synthesized(n, "Add", {n.in(0), n.in(bias_k)}, {x});
  }
  convert_synthesized(n, "Add", {x, input_name(n, 1, "skip")}, {sum});
  const double eps = n.get_float("epsilon", 1e-12);
  if (simplified) {
    convert_synthesized(n, "RMSNormalization", {sum, n.in(2)}, {y}, both(float_attr("epsilon", eps), int_attr("axis", -1)));
    return;
  }
  std::vector<std::string> ins{sum, n.in(2)};
  if (n.has_in(3)) ins.push_back(n.in(3));
  std::vector<std::string> outs{y};
  for (int k = 1; k <= 2; ++k)
    if (n.num_outputs() > k && used(n.out(k))) {
      outs.resize(static_cast<std::size_t>(k));
      outs.push_back(n.out(k));
    }
  convert_synthesized(n, "LayerNormalization", ins, outs, both(float_attr("epsilon", eps), int_attr("axis", -1)));
}

// BiasGelu (A + bias, erf GELU), FastGelu ((x [+ bias]), tanh GELU), Gelu
// (erf), QuickGelu (x * sigmoid(alpha x)), BiasAdd (x + bias + skip).
void Importer::contrib_activation(const Node& n) {
  const std::string y = n.out(0);
  std::string x = n.in(0);
  const bool biased = n.op() == "BiasGelu" || n.op() == "BiasAdd" || (n.op() == "FastGelu" && n.has_in(1));
  if (biased) {
    const std::string b = n.op() == "BiasAdd" ? y : synthesized_value(y + "/biased");
    convert_synthesized(n, "Add", {x, input_name(n, 1, "bias")}, {b});
    if (n.op() == "BiasAdd") {
      convert_synthesized(n, "Add", {b, input_name(n, 2, "skip")}, {y});
      return;
    }
    x = b;
  }
  if (n.op() == "QuickGelu") return add_swish(n, as_blob(n, x), y, n.get_float("alpha", 1.702));
  convert_synthesized(n, "Gelu", {x}, {y}, string_attr("approximate", n.op() == "FastGelu" ? "tanh" : "none"));
}

// FusedMatMul: alpha * op(A) @ op(B), op transposing the last two axes where transA / transB.
void Importer::fused_matmul(const Node& n) {
  if (n.get_int("transBatchA", 0) || n.get_int("transBatchB", 0))
    throw Unsupported{"FusedMatMul with transBatchA or transBatchB"};
  auto operand = [&](int k, const char* trans) {
    if (!n.get_int(trans, 0)) return n.in(k);
    const int rank = shape_of(n, n.in(k)).rank();
    if (rank < 2) throw n.error(fmt::format("{} of a rank-{} operand", trans, rank), trans);
    std::vector<int64_t> perm(static_cast<std::size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[static_cast<std::size_t>(rank - 1)], perm[static_cast<std::size_t>(rank - 2)]);
    const std::string t = synthesized_value(n.out(0) + "/" + trans);
    convert_synthesized(n, "Transpose", {n.in(k)}, {t}, ints_attr("perm", perm));
    return t;
  };
  const std::string a = operand(0, "transA"), b = operand(1, "transB");
  const double alpha = n.get_float("alpha", 1.0);
  if (alpha == 1.0) {
    convert_synthesized(n, "MatMul", {a, b}, {n.out(0)});
    return;
  }
  const std::string product = synthesized_value(n.out(0) + "/product");
  convert_synthesized(n, "MatMul", {a, b}, {product});
  convert_synthesized(n, "Mul", {product, add_constant(n.out(0) + "/alpha", float_blob({}, {static_cast<float>(alpha)}))},
                      {n.out(0)});
}


// Token, position and segment embeddings summed, then LayerNormalization; the
// mask's count of ones per row as mask_index (zeros without a mask), as
// ONNX Runtime's kernel computes them.
void Importer::embed_layer_norm(const Node& n) {
  embedding_layer_norm(n, [&](int k) { return n.in(k); }, nullptr);
}

// QEmbedLayerNormalization (com.microsoft; quantize_dynamic after ONNX
// Runtime's transformer optimizer): EmbedLayerNormalization of quantised
// tables (word, position, segment, gamma, beta at inputs 2-6), table k's scale
// at input k + 6 and zero point at k + 11. The word table stays in its
// integers (a gather of them, then DequantizeLinear: fold_dequantized_gather
// keeps it int8); the small ones are dequantised once.
void Importer::qembed_layer_norm(const Node& n) {
  const std::string y = n.out(0);
  auto dequantized = [&](int k, const std::string& x, const std::string& out) {
    return convert_synthesized(n, "DequantizeLinear", {x, input_name(n, k + 6, "scale"), n.in(k + 11)}, {out});
  };
  std::map<int, std::string> float_inputs;
  for (int k : {3, 4, 5, 6})
    if (n.has_in(k)) float_inputs[k] = dequantized(k, n.in(k), synthesized_value(fmt::format("{}/table{}", y, k)));
  auto input = [&](int k) -> std::string {
    if (k == 8) return {};  // no position_ids
    if (auto it = float_inputs.find(k); it != float_inputs.end()) return it->second;
    return n.in(k);  // input_ids, segment_ids, the word table, mask
  };
  embedding_layer_norm(n, input, [&](const std::string& ids, const std::string& out) {
    const std::string rows = synthesized_value(out + "/quantised");
    convert_synthesized(n, "Gather", {input_name(n, 2, "word_embedding_quant"), ids}, {rows}, int_attr("axis", 0));
    dequantized(2, rows, out);
  });
}

// EmbedLayerNormalization's inputs as `input(k)` names them ("": absent);
// `gather_word` (where given) writes the word embeddings of the ids.
void Importer::embedding_layer_norm(const Node& n, const std::function<std::string(int)>& input,
                                    const std::function<void(const std::string&, const std::string&)>& gather_word) {
  auto has = [&](int k) { return !input(k).empty(); };
  auto named = [&](int k, const char* field) {
    if (!has(k)) throw n.error(fmt::format("{} is missing", field), field);
    return input(k);
  };
  const std::string y = n.out(0), ids = named(0, "input_ids");
  const Shape is = shape_of(n, ids);
  if (is.rank() != 2) throw n.error(fmt::format("input_ids {} is not [batch, sequence]", is.to_string()), "input_ids");
  if (has(1) != has(4))
    throw n.error("segment_ids and segment_embedding come together", has(1) ? "segment_embedding" : "segment_ids");
  const std::string word = synthesized_value(y + "/word");
  if (gather_word)
    gather_word(ids, word);
  else
    convert_synthesized(n, "Gather", {named(2, "word_embedding"), ids}, {word}, int_attr("axis", 0));
  const std::string pos = synthesized_value(y + "/position");
  const std::string table = named(3, "position_embedding");
  if (has(8)) {
    convert_synthesized(n, "Gather", {table, input(8)}, {pos}, int_attr("axis", 0));
  } else {  // positions 0 .. S-1: the table's first S rows
    const std::string len = synthesized_value(y + "/sequence_length");
    convert_synthesized(n, "Shape", {ids}, {len}, both(int_attr("start", 1), int_attr("end", 2)));
    convert_synthesized(n, "Slice", {table, int_constant(y + "/zero", Shape{1}, {0}), len, int_constant(y + "/axis0", Shape{1}, {0})},
                        {pos});
  }
  const bool segments = has(1);
  const std::string sum = n.num_outputs() > 2 && used(n.out(2)) ? n.out(2) : synthesized_value(y + "/embedding_sum");
  const std::string word_pos = segments ? synthesized_value(y + "/word_position") : sum;
  convert_synthesized(n, "Add", {word, pos}, {word_pos});
  if (segments) {
    const std::string seg = synthesized_value(y + "/segment");
    convert_synthesized(n, "Gather", {input(4), input(1)}, {seg}, int_attr("axis", 0));
    convert_synthesized(n, "Add", {word_pos, seg}, {sum});
  }
  convert_synthesized(n, "LayerNormalization", {sum, named(5, "gamma"), named(6, "beta")}, {y},
                      both(float_attr("epsilon", n.get_float("epsilon", 1e-12)), int_attr("axis", -1)));
  if (!(n.num_outputs() > 1 && used(n.out(1)))) return;
  const std::string mask_index = n.out(1);
  if (has(7)) {
    const std::string ones = synthesized_value(y + "/mask_ones"), counted = synthesized_value(y + "/mask_counted");
    convert_synthesized(n, "Equal", {input(7), int_constant(y + "/one", Shape{}, {1})}, {ones});
    convert_synthesized(n, "Cast", {ones}, {counted}, int_attr("to", onnx::TensorProto::INT32));
    axes_node(n, "ReduceSum", counted, {1}, mask_index, int_attr("keepdims", 0));
  } else {
    const std::string batch = synthesized_value(y + "/batch");
    convert_synthesized(n, "Shape", {ids}, {batch}, int_attr("end", 1));
    convert_synthesized(n, "ConstantOfShape", {batch}, {mask_index}, [](onnx::NodeProto& p) {
      auto* a = p.add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      a->mutable_t()->set_data_type(onnx::TensorProto::INT32);
      a->mutable_t()->add_dims(1);
      a->mutable_t()->add_int32_data(0);
    });
  }
}

// A com.microsoft attention mask (int32) as an additive bias broadcast to
// [B, N, S, T]: 0 where a key is attended, mask_filter_value where not.
// `keys`: a [T] tensor of key positions (for the 1-D forms). ONNX Runtime's
// forms: [B] key lengths, [2B] ends then starts, [3B+2] (its first B as
// lengths), [B, T] and [B, S, T] raw masks (> 0 attends); a [B, 1] or [1, 1]
// raw mask is a placeholder for none. "" where there is no mask.
std::string Importer::contrib_mask_bias(const Node& n, int k, int64_t batch, const std::function<std::string()>& keys,
                                        bool two_b) {
  if (!n.has_in(k)) return {};
  const std::string m = n.in(k), y = n.out(0);
  const Shape ms = shape_of(n, m);
  const double filter = n.get_float("mask_filter_value", -10000.0);
  std::string keep;  // bool, true where a key is attended
  int64_t lift = 0;  // leading axes to add for [B, N, S, T]
  if (ms.rank() == 1) {
    const int64_t size = ms[0];
    const bool lengths = size == batch || size == 3 * batch + 2, ends_starts = two_b && size == 2 * batch;
    if (!lengths && !ends_starts)
      throw n.error(fmt::format("a 1-D mask of {} for a batch of {} (lengths [B], ends and starts [2B]{})", size, batch,
                                two_b ? "" : " are not taken here"),
                    "mask_index");
    const std::string pos = synthesized_value(y + "/key_positions");
    axes_node(n, "Unsqueeze", keys(), {0}, pos);
    auto column = [&](int64_t from, const char* what) {  // mask[from : from + B] as [B, 1]
      std::string part = m;
      if (from != 0 || size != batch) {
        part = slice_node(n, m, 0, from, from + batch, synthesized_value(fmt::format("{}/mask_{}", y, what)));
      }
      const std::string col = synthesized_value(fmt::format("{}/mask_{}_column", y, what));
      axes_node(n, "Unsqueeze", part, {1}, col);
      return col;
    };
    keep = synthesized_value(y + "/before_end");
    convert_synthesized(n, "Less", {pos, column(0, "ends")}, {keep});
    if (ends_starts) {
      const std::string before = synthesized_value(y + "/before_start"), after = synthesized_value(y + "/from_start"),
                        both_ = synthesized_value(y + "/within");
      convert_synthesized(n, "Less", {pos, column(batch, "starts")}, {before});
      convert_synthesized(n, "Not", {before}, {after});
      convert_synthesized(n, "And", {keep, after}, {both_});
      keep = both_;
    }
    lift = 2;  // [B, T] -> [B, 1, 1, T]
  } else if (ms.rank() == 2 || ms.rank() == 3) {
    if (ms.rank() == 2 && ms[1] == 1) return {};  // ONNX Runtime's placeholder for no mask
    keep = synthesized_value(y + "/attended");
    convert_synthesized(n, "Greater", {m, int_constant(y + "/zero_mask", Shape{}, {0})}, {keep});
    lift = ms.rank() == 2 ? 2 : 1;
  } else {
    throw Unsupported{fmt::format("{} with a {}-D mask (ONNX Runtime's CPU kernels refuse it too)", n.op(), ms.rank())};
  }
  const std::string bias = synthesized_value(y + "/mask_bias");
  convert_synthesized(n, "Where", {keep, add_constant(y + "/attend", float_blob({}, {0.0f})),
                                   add_constant(y + "/mask_filter", float_blob({}, {static_cast<float>(filter)}))},
                      {bias});
  const std::string lifted = synthesized_value(y + "/mask_bias_4d");
  axes_node(n, "Unsqueeze", bias, lift == 2 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1}, lifted);
  return lifted;
}

std::string Importer::slice_node(const Node& n, const std::string& x, int64_t axis, int64_t from, int64_t to, const std::string& y,
                                 int64_t step) {
  const std::string base = n.out(0) + "/slice";
  return convert_synthesized(n, "Slice", {x, int_constant(base + "_from", Shape{1}, {from}), int_constant(base + "_to", Shape{1}, {to}),
                                          int_constant(base + "_axis", Shape{1}, {axis}), int_constant(base + "_step", Shape{1}, {step})},
                             {y});
}

std::string Importer::positions_along(const Node& n, const std::vector<std::pair<std::string, int>>& dims) {
  const std::string y = n.out(0);
  std::string total;
  for (const auto& [t, axis] : dims) {
    const std::string d = synthesized_value(y + "/key_count");
    convert_synthesized(n, "Shape", {t}, {d}, both(int_attr("start", axis), int_attr("end", axis + 1)));
    if (total.empty()) {
      total = d;
    } else {
      const std::string s = synthesized_value(y + "/key_total");
      convert_synthesized(n, "Add", {total, d}, {s});
      total = s;
    }
  }
  const std::string limit = synthesized_value(y + "/key_limit"), pos = synthesized_value(y + "/key_range");
  axes_node(n, "Squeeze", total, {0}, limit);
  convert_synthesized(n, "Range", {int_constant(y + "/range_start", Shape{}, {0}), limit, int_constant(y + "/range_step", Shape{}, {1})},
                      {pos});
  return pos;
}

std::string Importer::summed_bias(const Node& n, const std::string& mask, int bias_k) {
  if (bias_k < 0 || !n.has_in(bias_k)) return mask;
  if (mask.empty()) return n.in(bias_k);
  const std::string s = synthesized_value(n.out(0) + "/attention_bias");
  convert_synthesized(n, "Add", {mask, n.in(bias_k)}, {s});
  return s;
}

// Attention (com.microsoft): Q, K and V projected by the merged weights
// ([Q heads | K heads | V heads] columns), then attention as ONNX's Attention
// computes it (3-D, the heads split there), the past a [2, B, N, P, H] stack.
void Importer::contrib_attention(const Node& n) {
  if (n.has_in(6)) throw Unsupported{"Attention with past_present_share_buffer (a cache written in place)"};
  const std::string x = input_name(n, 0, "input"), y = n.out(0);
  const Blob* w = constant(n.in(1));
  const Blob wf = w ? to_float(*w) : Blob();
  std::string product;
  if (!w) {
    product = synthesized_value(y + "/qkv");
    convert_synthesized(n, "MatMul", {x, n.in(1)}, {product});
  }
  const Shape ws = shape_of(n, input_name(n, 1, "weights"));
  // Each projection a MatMul, as a plain export writes them (the passes make
  // each a dense layer); computed weights: one product, sliced.
  auto project = [&](const std::string& part, int64_t from, int64_t size, const std::string& raw) {
    if (!w) {
      slice_node(n, product, -1, from, from + size, raw);
      return;
    }
    std::vector<float> cols(static_cast<std::size_t>(ws[0] * size));
    const float* src = wf.data_as<float>();
    for (int64_t r = 0; r < ws[0]; ++r) std::copy(src + r * ws[1] + from, src + r * ws[1] + from + size, cols.begin() + r * size);
    convert_synthesized(n, "MatMul", {x, add_constant(fmt::format("{}/{}_weight", y, part), float_blob({ws[0], size}, cols))}, {raw});
  };
  projected_attention(n, AttentionPorts{}, project);
}

// QAttention (com.microsoft; ONNX Runtime's quantize_dynamic after its
// transformer optimizer): Attention whose input is quantised (a
// DynamicQuantizeLinear's integers, its scale and zero point as inputs) and
// whose weights are int8/uint8 with their scales: each projection a
// MatMulInteger, its sums times input_scale * weight_scale, as ONNX Runtime
// computes it (the passes make each one dynamic_quant_dense).
void Importer::qattention(const Node& n) {
  const std::string y = n.out(0);
  const Blob* w = constant(n.in(1));
  const auto type = onnx_types_.find(n.in(1));
  if (!w || type == onnx_types_.end() || (type->second != onnx::TensorProto::INT8 && type->second != onnx::TensorProto::UINT8))
    throw Unsupported{"QAttention with weights that are not an int8 or uint8 constant"};
  const Shape ws = w->shape();
  if (ws.rank() != 2) throw n.error(fmt::format("weight {} is not [input hidden, 3 x hidden]", ws.to_string()), "weight");
  // The integer columns [from, from + size) of a constant, its ONNX type kept.
  auto columns = [&](const std::string& c, const Blob& v, int64_t rows, int64_t from, int64_t size, const std::string& base) {
    const std::size_t bytes = dtype_size(v.dtype());
    const int64_t width = v.shape()[v.shape().rank() - 1];
    Blob out = Blob::allocate(rows > 1 ? Shape{rows, size} : Shape{size}, v.dtype());
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(out.data()) + static_cast<std::size_t>(r * size) * bytes,
                  static_cast<const char*>(v.data()) + static_cast<std::size_t>(r * width + from) * bytes,
                  static_cast<std::size_t>(size) * bytes);
    const std::string name = add_constant(base, out);
    if (auto t = onnx_types_.find(c); t != onnx_types_.end()) onnx_types_[name] = t->second;
    return name;
  };
  // A per-column scale or zero point ([3 x hidden]) sliced like the columns; one value as it is.
  auto part_of = [&](int k, const char* field, int64_t from, int64_t size) -> std::string {
    if (!n.has_in(k)) return {};
    const Blob* c = constant(n.in(k));
    if (!c) throw Unsupported{fmt::format("QAttention with a {} computed at run time", field)};
    if (c->numel() == 1) return n.in(k);
    if (c->shape() != Shape{ws[1]})
      throw n.error(fmt::format("{} {} is neither one value nor one per weight column ({})", field, c->shape().to_string(), ws[1]),
                    field);
    return columns(n.in(k), *c, 1, from, size, fmt::format("{}/{}_{}", y, field, from));
  };
  auto project = [&](const std::string& part, int64_t from, int64_t size, const std::string& raw) {
    const std::string b = columns(n.in(1), *w, ws[0], from, size, fmt::format("{}/{}_weight", y, part));
    const std::string sums = synthesized_value(raw + "/sums"), sums_f = synthesized_value(raw + "/sums_float"),
                      scale = synthesized_value(raw + "/scale");
    convert_synthesized(n, "MatMulInteger", {n.in(0), b, n.has_in(6) ? n.in(6) : std::string(), part_of(7, "weight_zero_point", from, size)},
                        {sums});
    convert_synthesized(n, "Cast", {sums}, {sums_f}, int_attr("to", onnx::TensorProto::FLOAT));
    convert_synthesized(n, "Mul", {input_name(n, 3, "input_scale"), part_of(4, "weight_scale", from, size)}, {scale});
    convert_synthesized(n, "Mul", {sums_f, scale}, {raw});
  };
  projected_attention(n, AttentionPorts{.mask = 5, .past = 8, .attention_bias = -1}, project);
}

void Importer::projected_attention(const Node& n, const AttentionPorts& ports,
                                   const std::function<void(const std::string&, int64_t, int64_t, const std::string&)>& project) {
  if (n.get_int("do_rotary", 0)) throw Unsupported{"Attention with do_rotary (ONNX Runtime's CPU kernel refuses it too)"};
  if (n.get_int("past_present_share_buffer", 0))
    throw Unsupported{"Attention with past_present_share_buffer (a cache written in place)"};
  const std::string x = input_name(n, 0, "input"), y = n.out(0);
  const Shape xs = shape_of(n, x), ws = shape_of(n, input_name(n, 1, "weights"));
  if (xs.rank() != 3) throw n.error(fmt::format("input {} is not [batch, sequence, hidden]", xs.to_string()), "input");
  if (ws.rank() != 2 || ws[0] != xs[2])
    throw n.error(fmt::format("weights {} do not project an input of {}", ws.to_string(), xs.to_string()), "weights");
  const int64_t heads = n.get_int("num_heads");
  if (heads <= 0) throw n.error(fmt::format("num_heads {} is not positive", heads), "num_heads");
  std::vector<int64_t> sizes = n.get_ints("qkv_hidden_sizes", std::vector<int64_t>{});
  if (sizes.empty()) {
    if (ws[1] % 3 != 0) throw n.error(fmt::format("{} weight columns do not split into Q, K and V", ws[1]), "weights");
    sizes.assign(3, ws[1] / 3);
  }
  if (sizes.size() != 3 || sizes[0] != sizes[1] || sizes[0] + sizes[1] + sizes[2] != ws[1] ||
      std::any_of(sizes.begin(), sizes.end(), [&](int64_t s) { return s <= 0 || s % heads != 0; }))
    throw n.error(fmt::format("qkv_hidden_sizes [{}] do not split {} weight columns into {} heads", fmt::join(sizes, ", "),
                              ws[1], heads),
                  "qkv_hidden_sizes");
  if (n.has_in(2) && shape_of(n, n.in(2)) != Shape{ws[1]})
    throw n.error(fmt::format("bias {} is not [{}]", shape_of(n, n.in(2)).to_string(), ws[1]), "bias");
  const Blob* b = n.has_in(2) ? constant(n.in(2)) : nullptr;
  const Blob bf = b ? to_float(*b) : Blob();
  std::vector<std::string> qkv;
  int64_t from = 0;
  const char* names[] = {"q", "k", "v"};
  for (int p = 0; p < 3; ++p) {
    const int64_t size = sizes[static_cast<std::size_t>(p)];
    const std::string proj = synthesized_value(fmt::format("{}/{}", y, names[p]));
    std::string raw = n.has_in(2) ? synthesized_value(fmt::format("{}/{}_product", y, names[p])) : proj;
    project(names[p], from, size, raw);
    if (n.has_in(2)) {
      std::string bias_part;
      if (b) {
        const float* src = bf.data_as<float>();
        bias_part = add_constant(fmt::format("{}/{}_bias", y, names[p]), float_blob({size}, std::vector<float>(src + from, src + from + size)));
      } else {
        bias_part = slice_node(n, n.in(2), 0, from, from + size, synthesized_value(fmt::format("{}/{}_bias", y, names[p])));
      }
      convert_synthesized(n, "Add", {raw, bias_part}, {proj});
    }
    qkv.push_back(proj);
    from += size;
  }
  // The past: [2, B, N, P, H], keys then values.
  std::string past_k, past_v;
  if (n.has_in(ports.past)) {
    const Shape ps = shape_of(n, n.in(ports.past));
    if (ps.rank() != 5 || ps[0] != 2 || ps[2] != heads)
      throw n.error(fmt::format("past {} is not [2, batch, {} heads, past, head size]", ps.to_string(), heads), "past");
    if (sizes[1] != sizes[2]) throw n.error("a past needs K and V of one hidden size", "qkv_hidden_sizes");
    past_k = synthesized_value(y + "/past_key");
    past_v = synthesized_value(y + "/past_value");
    convert_synthesized(n, "Gather", {n.in(ports.past), int_constant(y + "/first", Shape{}, {0})}, {past_k}, int_attr("axis", 0));
    convert_synthesized(n, "Gather", {n.in(ports.past), int_constant(y + "/second", Shape{}, {1})}, {past_v}, int_attr("axis", 0));
  }
  const int64_t batch = xs[0];
  auto keys = [&] {
    std::vector<std::pair<std::string, int>> dims{{x, 1}};
    if (n.has_in(ports.past)) dims.emplace_back(n.in(ports.past), 3);
    return positions_along(n, dims);
  };
  const std::string bias = summed_bias(n, contrib_mask_bias(n, ports.mask, batch, keys, true), ports.attention_bias);
  const bool present = n.num_outputs() > 1 && used(n.out(1));
  const std::string present_k = present ? synthesized_value(y + "/present_key") : std::string(),
                    present_v = present ? synthesized_value(y + "/present_value") : std::string();
  const double scale = n.get_float("scale", 0.0);
  // ONNX Runtime's causal mask (j <= P + i where the query has several rows) is ONNX's is_causal.
  convert_synthesized(n, "Attention", {qkv[0], qkv[1], qkv[2], bias, past_k, past_v}, {y, present_k, present_v},
                      [&](onnx::NodeProto& p) {
                        int_attr("q_num_heads", heads)(p);
                        int_attr("kv_num_heads", heads)(p);
                        if (n.get_int("unidirectional", 0)) int_attr("is_causal", 1)(p);
                        if (scale != 0.0) float_attr("scale", scale)(p);
                      });
  if (!present) return;
  std::vector<std::string> stacked;
  for (const std::string& t : {present_k, present_v}) {
    stacked.push_back(synthesized_value(t + "/stacked"));
    axes_node(n, "Unsqueeze", t, {0}, stacked.back());
  }
  convert_synthesized(n, "Concat", stacked, {n.out(1)}, int_attr("axis", 0));
}

// MultiHeadAttention (com.microsoft): separate Q, K and V ([B, S, D]) with an
// optional merged bias and cache, or K and V already in heads ([B, N, L, H],
// a cross-attention cache: only Q's bias applies); attention as ONNX's
// Attention computes it. The packed forms are refused, as ONNX Runtime's CPU does.
void Importer::multi_head_attention(const Node& n) {
  const std::string y = n.out(0), q_in = input_name(n, 0, "query");
  const Shape qs = shape_of(n, q_in);
  if (!n.has_in(1) || !n.has_in(2))
    throw Unsupported{"MultiHeadAttention with packed Q, K and V (ONNX Runtime's CPU kernel refuses it too)"};
  if (n.has_in(8) || n.has_in(9)) throw Unsupported{"MultiHeadAttention with a shared buffer or beam-search cache indirection"};
  if (qs.rank() != 3) throw n.error(fmt::format("query {} is not [batch, sequence, hidden]", qs.to_string()), "query");
  const Shape ks = shape_of(n, n.in(1)), vs = shape_of(n, n.in(2));
  const int64_t heads = n.get_int("num_heads");
  if (heads <= 0 || qs[2] % heads != 0)
    throw n.error(fmt::format("num_heads {} does not divide the query's {}", heads, qs[2]), "num_heads");
  const bool in_heads = ks.rank() == 4;
  if (in_heads ? (vs != ks || ks[1] != heads) : (ks.rank() != 3 || vs.rank() != 3 || ks[2] != qs[2] || vs[2] % heads != 0))
    throw n.error(fmt::format("key {} and value {} are neither [B, L, D] nor [B, {}, L, H] for a query of {}", ks.to_string(),
                              vs.to_string(), heads, qs.to_string()),
                  "key");
  if (in_heads && (n.has_in(6) || n.has_in(7))) throw n.error("a past with key and value in heads", "past_key");
  if (n.has_in(6) != n.has_in(7)) throw n.error("past_key and past_value come together", "past_key");
  const int64_t d = qs[2], dv = in_heads ? ks[1] * ks[3] : vs[2];
  // The bias [D + D + Dv]: Q's part always, K's and V's where they are not in heads.
  std::vector<std::string> qkv{q_in, n.in(1), n.in(2)};
  if (n.has_in(3)) {
    const Shape bs = shape_of(n, n.in(3));
    if (bs.rank() != 1 || bs[0] != 2 * d + (in_heads ? bs[0] - 2 * d : dv))
      throw n.error(fmt::format("bias {} is not [{}]", bs.to_string(), 2 * d + dv), "bias");
    const int64_t begin[] = {0, d, 2 * d}, size[] = {d, d, dv};
    for (int p = 0; p < (in_heads ? 1 : 3); ++p) {
      const std::string part = slice_node(n, n.in(3), 0, begin[p], begin[p] + size[p], synthesized_value(fmt::format("{}/bias{}", y, p))),
                        biased = synthesized_value(fmt::format("{}/biased{}", y, p));
      convert_synthesized(n, "Add", {qkv[static_cast<std::size_t>(p)], part}, {biased});
      qkv[static_cast<std::size_t>(p)] = biased;
    }
  }
  const bool causal = n.get_int("unidirectional", 0) != 0;
  const int64_t len = qs[1], src = in_heads ? ks[2] : ks[1];
  if (causal && (in_heads || len != src))
    throw Unsupported{"MultiHeadAttention unidirectional across query and key lengths that differ"};
  auto keys = [&] {
    std::vector<std::pair<std::string, int>> dims{{n.in(1), in_heads ? 2 : 1}};
    if (n.has_in(6)) dims.emplace_back(n.in(6), 2);
    return positions_along(n, dims);
  };
  const std::string bias = summed_bias(n, contrib_mask_bias(n, 4, qs[0], keys, false), 5);
  const bool qk = n.num_outputs() > 3 && used(n.out(3));
  auto attributes = [&](onnx::NodeProto& p) {
    int_attr("q_num_heads", heads)(p);
    int_attr("kv_num_heads", heads)(p);
    if (causal) int_attr("is_causal", 1)(p);
    if (const double s = n.get_float("scale", 0.0); s != 0.0) float_attr("scale", s)(p);
    if (qk) int_attr("qk_matmul_output_mode", 2)(p);  // scaled, bias and mask added: ONNX Runtime's qk
  };
  auto out = [&](int k) { return n.num_outputs() > k && used(n.out(k)) ? n.out(k) : std::string(); };
  if (!in_heads) {
    convert_synthesized(n, "Attention", {qkv[0], qkv[1], qkv[2], bias, n.has_in(6) ? n.in(6) : "", n.has_in(7) ? n.in(7) : ""},
                        {y, out(1), out(2), out(3)}, attributes);
    return;
  }
  // K and V in heads: Q to [B, N, S, H] and the result back to [B, S, Dv].
  const std::string q_split = synthesized_value(y + "/q_split"), q_heads = synthesized_value(y + "/q_heads"),
                    ctx = synthesized_value(y + "/context"), merged = synthesized_value(y + "/merged");
  convert_synthesized(n, "Reshape", {qkv[0], int_constant(y + "/q_shape", Shape{4}, {0, 0, heads, d / heads})}, {q_split});
  convert_synthesized(n, "Transpose", {q_split}, {q_heads}, ints_attr("perm", {0, 2, 1, 3}));
  convert_synthesized(n, "Attention", {q_heads, qkv[1], qkv[2], bias}, {ctx, "", "", out(3)}, attributes);
  convert_synthesized(n, "Transpose", {ctx}, {merged}, ints_attr("perm", {0, 2, 1, 3}));
  convert_synthesized(n, "Reshape", {merged, int_constant(y + "/y_shape", Shape{3}, {0, 0, dv})}, {y});
  for (int k = 1; k <= 2; ++k)
    if (!out(k).empty()) convert_synthesized(n, "Identity", {n.in(k)}, {out(k)});
}


// x [B, S, heads, H] rotated by the cos/sin rows of `pos` ([B or 1, S]):
// its first rd features in halves (or, interleaved, in even/odd pairs), the
// rest as they are, as ONNX Runtime's rotary kernels compute.
std::string Importer::rotated(const Node& n, const std::string& x, const std::string& pos, const std::string& cos_cache,
                              const std::string& sin_cache, int64_t rd, int64_t h, bool interleaved, const std::string& what) {
  const std::string y = n.out(0) + "/" + what;
  auto v = [&](const std::string& tag) { return synthesized_value(y + "/" + tag); };
  auto slice = [&](const std::string& t, int64_t from, int64_t to, int64_t step, const std::string& tag) {
    return slice_node(n, t, 3, from, to, v(tag), step);
  };
  auto table = [&](const std::string& cache, const std::string& tag) {  // [B, S, rd/2] -> [B, S, 1, rd/2]
    const std::string rows = v(tag + "_rows"), lifted = v(tag);
    convert_synthesized(n, "Gather", {cache, pos}, {rows}, int_attr("axis", 0));
    axes_node(n, "Unsqueeze", rows, {2}, lifted);
    return lifted;
  };
  const std::string c = table(cos_cache, "cos"), sn = table(sin_cache, "sin");
  if (!interleaved && rd == h) {
    // Every feature rotated by halves: one rotary layer (x [.., D], cos and sin
    // [.., D] as each half's table twice) in place of 8 slices, products and sums.
    const std::string cf = v("cos_full"), sf = v("sin_full"), out = v("rotated");
    convert_synthesized(n, "Concat", {c, c}, {cf}, int_attr("axis", 3));
    convert_synthesized(n, "Concat", {sn, sn}, {sf}, int_attr("axis", 3));
    add(make("rotary", y, {as_blob(n, x), as_blob(n, cf), as_blob(n, sf)}, {out}));
    return out;
  }
  const std::string a = interleaved ? slice(x, 0, rd, 2, "even") : slice(x, 0, rd / 2, 1, "first_half");
  const std::string b = interleaved ? slice(x, 1, rd, 2, "odd") : slice(x, rd / 2, rd, 1, "second_half");
  auto combine = [&](const std::string& p, const std::string& q, const char* op, const std::string& tag) {
    const std::string pc = v(tag + "_c"), qs = v(tag + "_s"), out = v(tag);
    convert_synthesized(n, "Mul", {p, c}, {pc});
    convert_synthesized(n, "Mul", {q, sn}, {qs});
    convert_synthesized(n, op, {pc, qs}, {out});
    return out;
  };
  const std::string ra = combine(a, b, "Sub", "rotated_a"), rb = combine(b, a, "Add", "rotated_b");
  std::string rot;
  if (interleaved) {  // [.., rd/2] pairs back to even/odd positions
    const std::string ea = v("even_lifted"), ob = v("odd_lifted"), pairs = v("pairs");
    axes_node(n, "Unsqueeze", ra, {4}, ea);
    axes_node(n, "Unsqueeze", rb, {4}, ob);
    convert_synthesized(n, "Concat", {ea, ob}, {pairs}, int_attr("axis", 4));
    rot = v("interleaved");
    convert_synthesized(n, "Reshape", {pairs, int_constant(y + "/pairs_shape", Shape{4}, {0, 0, 0, rd})}, {rot});
  }
  std::vector<std::string> parts = interleaved ? std::vector<std::string>{rot} : std::vector<std::string>{ra, rb};
  if (rd < h) parts.push_back(slice(x, rd, h, 1, "pass"));
  if (parts.size() == 1) return parts[0];
  const std::string out = v("rotated");
  convert_synthesized(n, "Concat", parts, {out}, int_attr("axis", 3));
  return out;
}

// RotaryEmbedding (com.microsoft): x [B, S, hidden] or [B, N, S, H]; position
// ids [B, S], or one offset (positions offset .. offset + S - 1); cos and sin
// caches [positions, rd / 2], rd the rotated features of each head.
void Importer::contrib_rotary(const Node& n) {
  const std::string x = input_name(n, 0, "input"), y = n.out(0);
  const Shape xs = shape_of(n, x), cs = shape_of(n, input_name(n, 2, "cos_cache")), ps = shape_of(n, input_name(n, 1, "position_ids"));
  if (xs.rank() != 3 && xs.rank() != 4) throw n.error(fmt::format("input {} is neither 3-D nor 4-D", xs.to_string()), "input");
  if (cs.rank() != 2 || shape_of(n, input_name(n, 3, "sin_cache")) != cs)
    throw n.error(fmt::format("cos_cache {} and sin_cache {} are not one [positions, rd / 2]", cs.to_string(),
                              shape_of(n, n.in(3)).to_string()),
                  "cos_cache");
  const bool four = xs.rank() == 4;
  const int64_t hidden = four ? xs[1] * xs[3] : xs[2];
  const int64_t dim = n.get_int("rotary_embedding_dim", 0), heads_attr = n.get_int("num_heads", 0);
  const int64_t h = four ? xs[3] : dim > 0 ? (heads_attr > 0 ? hidden / heads_attr : 0) : 2 * cs[1];
  const int64_t rd = dim > 0 ? dim : 2 * cs[1];
  if (h <= 0 || hidden % h != 0 || rd > h || rd % 2 != 0 || rd / 2 != cs[1])
    throw n.error(fmt::format("the caches {} rotate {} of heads of {} in a hidden size of {}", cs.to_string(), rd, h, hidden),
                  "rotary_embedding_dim");
  const int64_t heads = hidden / h;
  // [B, S, heads, H]
  const std::string x4 = synthesized_value(y + "/x4");
  if (four) convert_synthesized(n, "Transpose", {x}, {x4}, ints_attr("perm", {0, 2, 1, 3}));
  else convert_synthesized(n, "Reshape", {x, int_constant(y + "/split_shape", Shape{4}, {0, 0, heads, h})}, {x4});
  std::string pos = n.in(1);
  if (ps.numel() == 1 && ps.rank() <= 1) {  // an offset: offset + [0 .. S)
    const std::string r = positions_along(n, {{x, four ? 2 : 1}}), row = synthesized_value(y + "/positions_row");
    axes_node(n, "Unsqueeze", r, {0}, row);
    pos = synthesized_value(y + "/positions");
    convert_synthesized(n, "Add", {row, n.in(1)}, {pos});
  } else if (ps.rank() != 2) {
    throw n.error(fmt::format("position_ids {} are neither one offset nor [batch, sequence]", ps.to_string()), "position_ids");
  }
  const std::string r = rotated(n, x4, pos, n.in(2), n.in(3), rd, h, n.get_int("interleaved", 0) != 0, "rotary");
  if (four) convert_synthesized(n, "Transpose", {r}, {y}, ints_attr("perm", {0, 2, 1, 3}));
  else convert_synthesized(n, "Reshape", {r, int_constant(y + "/merge_shape", Shape{3}, {0, 0, hidden})}, {y});
}

// GroupQueryAttention (com.microsoft; onnxruntime-genai's decoders). Its
// cache is right-padded per batch row: seqlens_k[b] + 1 keys are valid after
// the step, so the row's past holds past_b = max(0, seqlens_k[b] + 1 - S)
// (0 in a first prompt, whose padded rows are written too), the present its
// past's first past_b rows, then the S new ones, then zeros, over
// max(total_sequence_length, P) rows; query s attends keys below
// min(past_b + s + 1, seqlens_k[b] + 1) (the last local_window_size of them).
// Rotary (do_rotary) at positions past_b + s (or position_ids: from the
// first one in a first prompt, as given later), on Q and the new K.
void Importer::group_query_attention(const Node& n) {
  if (n.get_int("smooth_softmax", -1) == 1 || n.has_in(11)) throw Unsupported{"GroupQueryAttention with a softmax sink"};
  for (int k : {12, 13, 14, 15, 16})
    if (n.has_in(k)) throw Unsupported{"GroupQueryAttention with a quantised cache, QK norms or query_seqlens"};
  if (n.get_int("qk_output", 0) != 0) throw Unsupported{"GroupQueryAttention's qk output"};
  if (n.get_int("sliding_window_cache", 0) != 0) throw Unsupported{"GroupQueryAttention with a sliding-window cache"};
  const std::string y = n.out(0);
  auto v = [&](const std::string& tag) { return synthesized_value(y + "/" + tag); };
  const int64_t heads = n.get_int("num_heads"), kv_heads = n.get_int("kv_num_heads");
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    throw n.error(fmt::format("num_heads {} is not a multiple of kv_num_heads {}", heads, kv_heads), "num_heads");
  const Shape qs = shape_of(n, input_name(n, 0, "query"));
  if (qs.rank() != 3) throw n.error(fmt::format("query {} is not [batch, sequence, hidden]", qs.to_string()), "query");
  const bool packed = !n.has_in(1);
  if (packed == n.has_in(2)) throw n.error("key and value come together", "key");
  const int64_t h = packed ? qs[2] / (heads + 2 * kv_heads) : qs[2] / heads;
  if (h <= 0 || (packed ? h * (heads + 2 * kv_heads) : h * heads) != qs[2])
    throw n.error(fmt::format("query {} does not split into {} heads", qs.to_string(), heads), "num_heads");
  // Q [B, S, N, H], K and V [B, S, Nkv, H]
  auto split = [&](const std::string& t, int64_t from, int64_t count, const std::string& tag) {
    std::string part = t;
    if (packed) {
      part = slice_node(n, t, 2, from * h, (from + count) * h, v(tag + "_packed"));
    } else if (shape_of(n, t).rank() != 3 || shape_of(n, t)[2] != count * h) {
      throw n.error(fmt::format("{} {} is not [batch, sequence, {}]", tag, shape_of(n, t).to_string(), count * h), tag);
    }
    const std::string four = v(tag + "_split");
    convert_synthesized(n, "Reshape", {part, int_constant(y + "/" + tag + "_shape", Shape{4}, {0, 0, count, h})}, {four});
    return four;
  };
  std::string q = split(n.in(0), 0, heads, "query");
  std::string k = split(packed ? n.in(0) : n.in(1), packed ? heads : 0, kv_heads, "key");
  const std::string vv = split(packed ? n.in(0) : n.in(2), packed ? heads + kv_heads : 0, kv_heads, "value");
  // Lengths: tot = seqlens_k + 1 keys after the step; past_b = max(0, tot - S).
  const std::string seqlens = input_name(n, 5, "seqlens_k"), total_in = input_name(n, 6, "total_sequence_length");
  if (!constant(total_in)) throw Unsupported{"GroupQueryAttention with a total_sequence_length computed at run time"};
  const std::string tot = v("valid_keys"), s_len = v("query_length"), s_scalar = v("query_length_scalar"), unclamped = v("past_unclamped"),
                    past_b = v("past_valid");
  convert_synthesized(n, "Add", {seqlens, int_constant(y + "/one", Shape{}, {1})}, {tot});
  convert_synthesized(n, "Shape", {n.in(0)}, {s_len}, both(int_attr("start", 1), int_attr("end", 2)));
  axes_node(n, "Squeeze", s_len, {0}, s_scalar);
  // total_sequence_length as an int64 scalar (one element, of any rank)
  const std::string total_scalar = v("total_scalar"), total64 = v("total_length");
  convert_synthesized(n, "Reshape", {total_in, int_constant(y + "/scalar_shape", Shape{0}, {})}, {total_scalar});
  convert_synthesized(n, "Cast", {total_scalar}, {total64}, int_attr("to", onnx::TensorProto::INT64));
  convert_synthesized(n, "Sub", {tot, s_scalar}, {unclamped});
  convert_synthesized(n, "Max", {unclamped, int_constant(y + "/zero", Shape{}, {0})}, {past_b});
  const std::string past_col = v("past_valid_column"), steps = positions_along(n, {{n.in(0), 1}}), steps_row = v("steps_row");
  axes_node(n, "Unsqueeze", past_b, {1}, past_col);
  axes_node(n, "Unsqueeze", steps, {0}, steps_row);
  if (n.get_int("do_rotary", 0)) {
    const Shape cs = shape_of(n, input_name(n, 7, "cos_cache"));
    if (cs.rank() != 2 || shape_of(n, input_name(n, 8, "sin_cache")) != cs || 2 * cs[1] > h)
      throw n.error(fmt::format("cos_cache {} does not rotate heads of {}", cs.to_string(), h), "cos_cache");
    std::string pos = v("positions");  // past_b + s
    convert_synthesized(n, "Add", {past_col, steps_row}, {pos});
    if (n.has_in(9)) {
      // position_ids [B, S]: a first prompt (S == total_sequence_length)
      // counts from its first id, a later step takes them as they are.
      const Shape ps = shape_of(n, n.in(9));
      if (ps.rank() != 2) throw n.error(fmt::format("position_ids {} are not [batch, sequence]", ps.to_string()), "position_ids");
      const std::string first_id = v("first_position"), counted = v("prompt_positions"), first_prompt = v("first_prompt"),
                        chosen = v("given_positions");
      convert_synthesized(n, "Slice", {n.in(9), int_constant(y + "/origin", Shape{2}, {0, 0}), int_constant(y + "/origin_end", Shape{2}, {1, 1}),
                                       int_constant(y + "/both_axes", Shape{2}, {0, 1})},
                          {first_id});
      convert_synthesized(n, "Add", {first_id, steps_row}, {counted});
      convert_synthesized(n, "Equal", {s_scalar, total64}, {first_prompt});
      convert_synthesized(n, "Where", {first_prompt, counted, n.in(9)}, {chosen});
      pos = chosen;
    }
    const bool interleaved = n.get_int("rotary_interleaved", 0) != 0;
    q = rotated(n, q, pos, n.in(7), n.in(8), 2 * cs[1], h, interleaved, "q_rotary");
    k = rotated(n, k, pos, n.in(7), n.in(8), 2 * cs[1], h, interleaved, "k_rotary");
  }
  auto heads_first = [&](const std::string& t, const std::string& tag) {  // [B, S, n, H] -> [B, n, S, H]
    const std::string out = v(tag);
    convert_synthesized(n, "Transpose", {t}, {out}, ints_attr("perm", {0, 2, 1, 3}));
    return out;
  };
  const std::string qh = heads_first(q, "q_heads"), kh = heads_first(k, "k_heads"), vh = heads_first(vv, "v_heads");
  // The present: [B, Nkv, Tp, H].
  auto out_or = [&](int k_out, const std::string& tag) { return n.num_outputs() > k_out && used(n.out(k_out)) ? n.out(k_out) : v(tag); };
  std::string present_k = out_or(1, "present_key"), present_v = out_or(2, "present_value");
  std::string keys;  // [Tp] key positions
  if (n.has_in(3) != n.has_in(4)) throw n.error("past_key and past_value come together", "past_key");
  if (!n.has_in(3)) {  // a first prompt: the new rows are the present
    convert_synthesized(n, "Identity", {kh}, {present_k});
    convert_synthesized(n, "Identity", {vh}, {present_v});
    keys = steps;  // (no past: the keys are the new rows)
  } else {
    const Shape pks = shape_of(n, n.in(3));
    if (pks.rank() != 4 || pks[1] != kv_heads || pks[3] != h || shape_of(n, n.in(4)) != pks)
      throw n.error(fmt::format("past_key {} and past_value {} are not [batch, {}, past, {}]", pks.to_string(),
                                shape_of(n, n.in(4)).to_string(), kv_heads, h),
                    "past_key");
    // Tp = max(total_sequence_length, P); row j of the present reads row
    // j of the past below past_b, then new row j - past_b (at P + j - past_b
    // of past and new concatenated), and is 0 from past_b + S on.
    const std::string p_len = v("past_length"), p_scalar = v("past_length_scalar"), tp = v("present_length");
    convert_synthesized(n, "Shape", {n.in(3)}, {p_len}, both(int_attr("start", 2), int_attr("end", 3)));
    axes_node(n, "Squeeze", p_len, {0}, p_scalar);
    convert_synthesized(n, "Max", {total64, p_scalar}, {tp});
    keys = v("present_rows");
    convert_synthesized(n, "Range", {int_constant(y + "/rows_start", Shape{}, {0}), tp, int_constant(y + "/rows_step", Shape{}, {1})}, {keys});
    const std::string rows = v("present_rows_2d"), in_past = v("from_past"), shifted = v("shifted"), from_new = v("from_new"),
                      source = v("source_row"), last = v("last_row"), clamped = v("source_clamped"), new_end = v("new_end"),
                      written = v("written"), src4 = v("source_4d"), valid4 = v("written_4d");
    axes_node(n, "Unsqueeze", keys, {0}, rows);
    convert_synthesized(n, "Less", {rows, past_col}, {in_past});
    convert_synthesized(n, "Sub", {rows, past_col}, {shifted});
    convert_synthesized(n, "Add", {shifted, p_scalar}, {from_new});
    convert_synthesized(n, "Where", {in_past, rows, from_new}, {source});
    const std::string ps_sum = v("past_plus_new");
    convert_synthesized(n, "Add", {p_scalar, s_scalar}, {ps_sum});
    convert_synthesized(n, "Sub", {ps_sum, int_constant(y + "/one_row", Shape{}, {1})}, {last});
    convert_synthesized(n, "Min", {source, last}, {clamped});
    const std::string new_end_col = v("new_end_column");
    convert_synthesized(n, "Add", {past_col, s_scalar}, {new_end_col});
    convert_synthesized(n, "Less", {rows, new_end_col}, {written});
    axes_node(n, "Unsqueeze", clamped, {1, 3}, src4);
    axes_node(n, "Unsqueeze", written, {1, 3}, valid4);
    // The source row of each present row, over [B, Nkv, Tp, H] (K and V alike).
    const std::string lead = v("present_lead"), tail_ = v("present_tail"), tp1 = v("present_tp"), shape = v("present_shape"),
                      index = v("present_index");
    convert_synthesized(n, "Shape", {n.in(3)}, {lead}, int_attr("end", 2));
    convert_synthesized(n, "Shape", {n.in(3)}, {tail_}, int_attr("start", 3));
    axes_node(n, "Unsqueeze", tp, {0}, tp1);
    convert_synthesized(n, "Concat", {lead, tp1, tail_}, {shape}, int_attr("axis", 0));
    convert_synthesized(n, "Expand", {src4, shape}, {index});
    auto present = [&](const std::string& past, const std::string& fresh, const std::string& out, const std::string& tag) {
      const std::string both_ = v(tag + "_concat"), gathered = v(tag + "_gathered");
      convert_synthesized(n, "Concat", {past, fresh}, {both_}, int_attr("axis", 2));
      convert_synthesized(n, "GatherElements", {both_, index}, {gathered}, int_attr("axis", 2));
      convert_synthesized(n, "Where", {valid4, gathered, add_constant(y + "/zero_value", float_blob({}, {0.0f}))}, {out});
    };
    present(n.in(3), kh, present_k, "present_key");
    present(n.in(4), vh, present_v, "present_value");
  }
  // The bias [B, 1, S, Tp]: 0 where query s attends key j, -inf elsewhere.
  const std::string tot_col = v("valid_keys_column"), keys3 = v("keys_3d");
  axes_node(n, "Unsqueeze", tot, {1}, tot_col);
  axes_node(n, "Unsqueeze", keys, {0, 1}, keys3);
  std::string allowed = v("attended");
  if (n.get_int("causal", 1)) {
    const std::string reach = v("reach"), reach1 = v("reach_plus_one"), cl = v("causal_length"), cl3 = v("causal_length_3d");
    convert_synthesized(n, "Add", {past_col, steps_row}, {reach});
    convert_synthesized(n, "Add", {reach, int_constant(y + "/one_key", Shape{}, {1})}, {reach1});
    convert_synthesized(n, "Min", {reach1, tot_col}, {cl});
    axes_node(n, "Unsqueeze", cl, {2}, cl3);
    convert_synthesized(n, "Less", {keys3, cl3}, {allowed});
    if (const int64_t w = n.get_int("local_window_size", -1); w >= 0) {
      const std::string start = v("window_start"), before = v("before_window"), inside = v("in_window"), both_ = v("attended_window");
      convert_synthesized(n, "Sub", {cl3, int_constant(y + "/window", Shape{}, {w})}, {start});
      convert_synthesized(n, "Less", {keys3, start}, {before});
      convert_synthesized(n, "Not", {before}, {inside});
      convert_synthesized(n, "And", {allowed, inside}, {both_});
      allowed = both_;
    }
  } else {
    if (n.get_int("local_window_size", -1) >= 0) throw n.error("local_window_size needs causal attention", "local_window_size");
    const std::string tot3 = v("valid_keys_3d");
    axes_node(n, "Unsqueeze", tot_col, {2}, tot3);
    convert_synthesized(n, "Less", {keys3, tot3}, {allowed});
  }
  const std::string bias3 = v("bias_3d"), bias4 = v("bias");
  convert_synthesized(n, "Where", {allowed, add_constant(y + "/attend", float_blob({}, {0.0f})),
                                   add_constant(y + "/masked", float_blob({}, {-std::numeric_limits<float>::infinity()}))},
                      {bias3});
  axes_node(n, "Unsqueeze", bias3, {1}, bias4);
  const std::string bias = summed_bias(n, bias4, 10);
  const std::string ctx = v("context"), merged = v("merged");
  convert_synthesized(n, "Attention", {qh, present_k, present_v, bias}, {ctx}, [&](onnx::NodeProto& p) {
    if (const double sc = n.get_float("scale", 0.0); sc != 0.0) float_attr("scale", sc)(p);
    if (const double cap = n.get_float("softcap", 0.0); cap > 0) float_attr("softcap", cap)(p);
  });
  convert_synthesized(n, "Transpose", {ctx}, {merged}, ints_attr("perm", {0, 2, 1, 3}));
  convert_synthesized(n, "Reshape", {merged, int_constant(y + "/y_shape", Shape{3}, {0, 0, heads * h})}, {y});
}

namespace {
/// Value `i` of an integer constant: its bytes where the importer kept them so
/// (read_initializers: MatMulNBits's and GatherBlockQuantized's codes), else its int64s.
int64_t integer_at(const Blob& b, int64_t i) {
  return b.dtype() == DType::uint8 ? int64_t{b.data_as<uint8_t>()[i]} : b.data_as<int64_t>()[i];
}
/// Code `index` of row `row` of codes packed `bits` to a byte, low bits first,
/// rows `row_bytes` apart: MatMulNBits's and GatherBlockQuantized's layout.
int64_t packed_code(const Blob& packed, int64_t row_bytes, int64_t row, int64_t index, int64_t bits) {
  const int64_t bit = index * bits;
  return (integer_at(packed, row * row_bytes + bit / 8) >> (bit % 8)) & ((int64_t{1} << bits) - 1);
}
/// The first `count` codes of each of `rows` rows of `packed` (as packed_code)
/// into `out`, a byte each, rows `count` apart: an LLM's weights unpacked at
/// import in one pass over its bytes (per code through packed_code, a 1B-parameter
/// model took seconds, and each dynamic-dim probe imports it again).
void unpack_codes(const Blob& packed, int64_t row_bytes, int64_t rows, int64_t count, int64_t bits, uint8_t* out) {
  if (packed.dtype() != DType::uint8) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < count; ++k) out[r * count + k] = static_cast<uint8_t>(packed_code(packed, row_bytes, r, k, bits));
    return;
  }
  const auto per_byte = static_cast<int>(8 / bits);
  const auto mask = static_cast<unsigned>((1 << bits) - 1);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = packed.data_as<uint8_t>() + r * row_bytes;
    uint8_t* dst = out + r * count;
    if (bits == 8) {
      std::memcpy(dst, src, static_cast<std::size_t>(count));
      continue;
    }
    const int64_t whole = count / per_byte;
    if (bits == 4) {  // (the common case, in a loop the compiler vectorises)
      for (int64_t b = 0; b < whole; ++b) {
        dst[2 * b] = static_cast<uint8_t>(src[b] & 15);
        dst[2 * b + 1] = static_cast<uint8_t>(src[b] >> 4);
      }
    } else {
      for (int64_t b = 0; b < whole; ++b) {
        unsigned v = src[b];
        for (int j = 0; j < per_byte; ++j, v >>= bits) dst[b * per_byte + j] = static_cast<uint8_t>(v & mask);
      }
    }
    for (int64_t k = whole * per_byte; k < count; ++k)
      dst[k] = static_cast<uint8_t>((src[k / per_byte] >> (bits * (k % per_byte))) & mask);
  }
}
}  // namespace

// MatMulNBits: A @ Wᵀ (+ bias), W [N, K] blockwise quantised to `bits` bits
// (codes packed low bits first), W = (code - zero point) * scale per block of
// block_size along K; the zero points packed likewise (default 2^(bits-1))
// or real. Kept blockwise, 2- and 4-bit codes two a byte (quint4: an eighth of
// float32's memory), 8-bit ones a byte each; with g_idx or real zero points
// dequantised into a float32 weight.
void Importer::matmul_nbits(const Node& n) {
  const int64_t K = n.get_int("K"), N = n.get_int("N"), bits = n.get_int("bits", 4), block = n.get_int("block_size");
  if (bits != 2 && bits != 4 && bits != 8) throw n.error(fmt::format("bits {} is not 2, 4 or 8", bits), "bits");
  if (block < 16 || (block & (block - 1)) != 0) throw n.error(fmt::format("block_size {} is not a power of 2 of 16 or more", block), "block_size");
  if (K <= 0 || N <= 0) throw n.error(fmt::format("K {} and N {} must be positive", K, N), "K");
  const int64_t blocks = (K + block - 1) / block, blob = block * bits / 8;
  const Blob& codes = require_constant(n, 1, "B");
  if (codes.numel() != N * blocks * blob)
    throw n.error(fmt::format("B {} does not hold [{}, {}, {}] bytes", codes.shape().to_string(), N, blocks, blob), "B");
  const std::vector<double> scales = to_doubles(require_constant(n, 2, "scales"));
  if (static_cast<int64_t>(scales.size()) != N * blocks)
    throw n.error(fmt::format("{} scales for [{}, {}] blocks", scales.size(), N, blocks), "scales");
  auto code = [&](const Blob& packed, int64_t row_bytes, int64_t row, int64_t index) {
    return packed_code(packed, row_bytes, row, index, bits);
  };
  if (codes.dtype() != DType::uint8 && codes.dtype() != DType::int64) throw n.error("B must hold uint8 codes", "B");
  const Blob& bytes = codes;
  // Zero point of (row, block): packed codes, real values, or the midpoint.
  std::function<double(int64_t, int64_t)> zero = [&](int64_t, int64_t) { return static_cast<double>(int64_t{1} << (bits - 1)); };
  const Blob* zp_codes = nullptr;
  std::vector<double> zp_real;
  const int64_t zp_row = (blocks * bits + 7) / 8;
  if (n.has_in(3)) {
    const Blob& z = require_constant(n, 3, "zero_points");
    if (elem_type(n.in(3)) == onnx::TensorProto::UINT8) {
      if (n.has_in(4)) throw Unsupported{"MatMulNBits with g_idx and packed zero points (ONNX Runtime ignores such zero points)"};
      if (z.numel() != N * zp_row) throw n.error(fmt::format("{} zero point bytes for {} rows of {} blocks", z.numel(), N, blocks), "zero_points");
      if (z.dtype() != DType::uint8 && z.dtype() != DType::int64) throw n.error("zero_points must hold uint8 codes", "zero_points");
      zp_codes = &z;
      zero = [&](int64_t r, int64_t b) { return static_cast<double>(code(*zp_codes, zp_row, r, b)); };
    } else {
      zp_real = to_doubles(z);
      if (static_cast<int64_t>(zp_real.size()) != N * blocks)
        throw n.error(fmt::format("{} zero points for [{}, {}] blocks", zp_real.size(), N, blocks), "zero_points");
      zero = [&](int64_t r, int64_t b) { return zp_real[static_cast<std::size_t>(r * blocks + b)]; };
    }
  }
  std::vector<int64_t> group;  // block of each k (g_idx), else k / block
  if (n.has_in(4)) {
    group = to_ints(require_constant(n, 4, "g_idx"));
    if (static_cast<int64_t>(group.size()) < K) throw n.error(fmt::format("{} g_idx entries for K {}", group.size(), K), "g_idx");
    for (int64_t g : group)
      if (g < 0 || g >= blocks) throw n.error(fmt::format("g_idx entry {} is not a block of {}", g, blocks), "g_idx");
  }
  // Without g_idx and with integer zero points, the weight stays blockwise:
  // its codes with their scales and zero points (core::block_quantized),
  // which cpu/nbits_dense computes with as they are.
  if (group.empty() && zp_real.empty() && !constant(n.in(0))) {
    Blob w = core::uninitialized_blob(Shape{N, K}, DType::quint8);
    unpack_codes(bytes, blocks * blob, N, K, bits, w.data_as<uint8_t>());
    QuantParams& qp = w.quant();
    qp.axis = 1;
    qp.block_size = block;
    qp.scales.resize(static_cast<std::size_t>(N * blocks));
    qp.zero_points.resize(qp.scales.size());
    for (int64_t r = 0; r < N; ++r)
      for (int64_t b = 0; b < blocks; ++b) {
        const auto at = static_cast<std::size_t>(r * blocks + b);
        qp.scales[at] = static_cast<float>(scales[at]);
        qp.zero_points[at] = static_cast<int32_t>(zero(r, b));
      }
    try {
      core::check_weight_quant(w, "scales");
    } catch (const Error& e) {
      throw n.error(e.message(), e.field());
    }
    if (auto packed = core::packed_codes4(w)) w = std::move(*packed);  // 2- and 4-bit codes two a byte (quint4's order)
    const Blob* bias = n.has_in(5) ? constant(n.in(5)) : nullptr;
    const bool bias_row = bias && bias->numel() == N;
    Layer d = make("dense", n.name, {input(n, 0)}, {n.has_in(5) && !bias_row ? synthesized_value(n.out(0) + "/product") : n.out(0)});
    d.weights["weight"] = std::move(w);
    if (bias_row) d.weights["bias"] = reshaped(to_float(*bias), Shape{N});
    // accuracy_level 4: the file lets the activations be int8 (ONNX Runtime quantises
    // them per block); cpu/nbits_dense does so in decode steps for codes of <= 4 bits.
    if (n.get_int("accuracy_level", 0) == 4 && bits <= 4) d.params["accuracy_level"] = int64_t{4};
    const std::string product = d.outputs[0];
    add(std::move(d));
    if (n.has_in(5) && !bias_row) convert_synthesized(n, "Add", {product, n.in(5)}, {n.out(0)});
    return;
  }
  std::vector<float> w(static_cast<std::size_t>(K * N));  // [K, N]
  for (int64_t r = 0; r < N; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t b = group.empty() ? k / block : group[static_cast<std::size_t>(k)];
      const double q = static_cast<double>(code(bytes, blocks * blob, r, k));
      w[static_cast<std::size_t>(k * N + r)] =
          static_cast<float>((q - zero(r, b)) * scales[static_cast<std::size_t>(r * blocks + b)]);
    }
  core::info("{}: MatMulNBits '{}' ({}-bit, {} x {}) held as float32 weights", file_, n.name, bits, K, N);
  const std::string weight = add_constant(n.name + "/weight", float_blob({K, N}, w));
  if (!n.has_in(5)) {
    convert_synthesized(n, "MatMul", {input_name(n, 0, "A"), weight}, {n.out(0)});
    return;
  }
  const std::string product = synthesized_value(n.out(0) + "/product");
  convert_synthesized(n, "MatMul", {input_name(n, 0, "A"), weight}, {product});
  convert_synthesized(n, "Add", {product, n.in(5)}, {n.out(0)});
}


// GatherBlockQuantized: a Gather along gather_axis of data quantised in blocks
// of block_size along quantize_axis, each element (q - z) * s of its block. uint8
// data holds `bits` codes a byte, low bits first, in its last dim (the quantize
// axis), zero points packed likewise, default 2^(bits-1) (MatMulNBits's
// convention); int4/uint4 data its values, zero points default 0. An LLM's
// embedding (gather axis 0, blocks along the last dim) stays blockwise: a gather
// layer whose table is the codes a byte each with their scales (the rows
// dequantised as they are read). Other axes: the table dequantised at import.
// (ONNX Runtime gives zeros for an index out of range; a gather refuses it.)
void Importer::gather_block_quantized(const Node& n) {
  const Blob& data = require_constant(n, 0, "data");
  const int data_type = elem_type(n.in(0));
  const bool packed = data_type == onnx::TensorProto::UINT8;
  if (!packed && data_type != kInt4 && data_type != kUInt4)
    throw Unsupported{fmt::format("GatherBlockQuantized of {} data (uint8, int4 and uint4 are supported)", onnx_type_name(data_type))};
  const int64_t bits = packed ? n.get_int("bits", 4) : 4, block = n.get_int("block_size", 128);
  if (bits != 2 && bits != 4 && bits != 8) throw n.error(fmt::format("bits {} is not 2, 4 or 8", bits), "bits");
  if (block < 16 || (block & (block - 1)) != 0) throw n.error(fmt::format("block_size {} is not a power of 2 of 16 or more", block), "block_size");
  const Shape ds = data.shape();
  const int rank = ds.rank();
  if (rank < 1) throw n.error("data is a scalar", "data");
  auto axis_of = [&](const char* name, int64_t fallback) {
    int64_t a = n.get_int(name, fallback);
    if (a < 0) a += rank;
    if (a < 0 || a >= rank) throw n.error(fmt::format("{} out of range for rank {}", name, rank), name);
    return static_cast<int>(a);
  };
  const int gather_axis = axis_of("gather_axis", 0), quantize_axis = axis_of("quantize_axis", 1);
  if (gather_axis == quantize_axis) throw n.error("gather_axis and quantize_axis are the same", "quantize_axis");
  if (packed && (gather_axis != 0 || quantize_axis != rank - 1))
    throw n.error("uint8 data is gathered along axis 0 and quantised along its last", "quantize_axis");
  const int64_t per_byte = packed ? 8 / bits : 1;
  Shape vs = ds;  // the values' shape
  vs[rank - 1] = packed ? ds[rank - 1] * per_byte : ds[rank - 1];
  const int64_t qdim = vs[quantize_axis], blocks = (qdim + block - 1) / block;
  Shape ss = vs;
  ss[quantize_axis] = blocks;
  const Blob& scale_blob = require_constant(n, 2, "scales");
  if (scale_blob.shape() != ss)
    throw n.error(fmt::format("scales {} are not the data {} in blocks of {}: {}", scale_blob.shape().to_string(),
                              vs.to_string(), block, ss.to_string()), "scales");
  const std::vector<double> scales = to_doubles(scale_blob);
  const int64_t count = vs.numel();
  // Value i of `b` (row-major over `shape`), unpacked where packed.
  auto value = [&](const Blob& b, const Shape& shape, int64_t i) -> int64_t {
    if (!packed) return integer_at(b, i);
    const int64_t last = shape[rank - 1];
    return packed_code(b, (last * bits + 7) / 8, i / last, i % last, bits);
  };
  if (packed && data.dtype() != DType::uint8 && data.dtype() != DType::int64) throw n.error("data must hold uint8 codes", "data");
  const bool is_signed = data_type == kInt4;
  const Blob* zp = n.has_in(3) ? &require_constant(n, 3, "zero_points") : nullptr;
  if (zp && (packed ? zp->shape().rank() != rank || zp->numel() != ss.numel() / blocks * ((blocks * bits + 7) / 8) || quantize_axis != rank - 1
                    : zp->shape() != ss))
    throw n.error(fmt::format("zero_points {} do not fit the scales {}", zp->shape().to_string(), ss.to_string()), "zero_points");
  auto zero = [&](int64_t k) -> int64_t {
    if (!zp) return packed ? int64_t{1} << (bits - 1) : 0;
    return value(*zp, ss, k);
  };
  // Scale k of value i: its block along the quantize axis.
  int64_t inner = 1;
  for (int d = quantize_axis + 1; d < rank; ++d) inner *= vs[d];
  auto scale_index = [&](int64_t i) { return (i / (qdim * inner) * blocks + i / inner % qdim / block) * inner + i % inner; };
  const std::string y = n.out(0);
  if (gather_axis == 0 && quantize_axis == rank - 1) {
    Blob table = core::uninitialized_blob(vs, is_signed ? DType::qint8 : DType::quint8);
    if (packed) {
      const int64_t last = vs[rank - 1];
      unpack_codes(data, ds[rank - 1], count / last, last, bits, table.data_as<uint8_t>());
    } else {
      for (int64_t i = 0; i < count; ++i) table.data_as<uint8_t>()[i] = static_cast<uint8_t>(value(data, ds, i) & 0xFF);
    }
    QuantParams& q = table.quant();
    q.axis = rank - 1;
    q.block_size = block;
    q.scales.assign(scales.begin(), scales.end());
    if (zp || packed)
      for (int64_t k = 0; k < ss.numel(); ++k) q.zero_points.push_back(static_cast<int32_t>(zero(k)));
    try {
      core::check_weight_quant(table, "scales");
    } catch (const Error& e) {
      throw n.error(e.message(), e.field());
    }
    Layer l = make("gather", n.name, {input(n, 1)}, {y});
    l.weights["table"] = std::move(table);
    l.params["axis"] = int64_t{0};
    add(std::move(l));
    return;
  }
  std::vector<float> real(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const auto k = scale_index(i);
    real[static_cast<std::size_t>(i)] = static_cast<float>(static_cast<double>(value(data, ds, i) - zero(k)) * scales[static_cast<std::size_t>(k)]);
  }
  convert_synthesized(n, "Gather", {add_constant(y + "/table", float_blob(vs, real)), n.in(1)}, {y}, int_attr("axis", gather_axis));
}

// The activation of ONNX Runtime's FusedConv and FusedGemm on x into y
// (Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid: its MLAS activations),
// `params` its floats (alpha; min and max; alpha and beta).
void Importer::fused_activation(const Node& n, const std::string& act, const std::vector<double>& params, const std::string& x,
                                const std::string& y) {
  auto param = [&](std::size_t k, double fallback) { return k < params.size() ? params[k] : fallback; };
  if (act == "Relu" || act == "Tanh" || act == "Sigmoid") {
    convert_synthesized(n, act, {x}, {y});
  } else if (act == "LeakyRelu") {
    convert_synthesized(n, act, {x}, {y}, float_attr("alpha", param(0, 0.01)));
  } else if (act == "HardSigmoid") {
    convert_synthesized(n, act, {x}, {y}, both(float_attr("alpha", param(0, 0.2)), float_attr("beta", param(1, 0.5))));
  } else if (act == "Clip") {
    const double lo = param(0, -std::numeric_limits<float>::max()), hi = param(1, std::numeric_limits<float>::max());
    const std::string y_ = n.out(0);
    // (bounds as inputs from opset 11, as attributes before: the synthesized node carries both)
    convert_synthesized(n, "Clip", {x, add_constant(y_ + "/clip_min", float_blob({}, {static_cast<float>(lo)})),
                                    add_constant(y_ + "/clip_max", float_blob({}, {static_cast<float>(hi)}))},
                        {y}, both(float_attr("min", lo), float_attr("max", hi)));
  } else {
    throw Unsupported{fmt::format("{} with activation '{}'", n.op(), act)};
  }
}

// FusedConv (ONNX Runtime's saved optimized files): Conv, plus Z where given,
// then its activation.
void Importer::fused_conv(const Node& n) {
  const std::string act = n.get_string("activation", "");
  const std::vector<double> params = n.get_floats("activation_params", std::vector<double>{});
  const std::string y = n.out(0);
  std::vector<std::string> ins{input_name(n, 0, "X"), input_name(n, 1, "W")};
  if (n.has_in(2)) ins.push_back(n.in(2));
  const std::string conv = act.empty() && !n.has_in(3) ? y : synthesized_value(y + "/conv");
  convert_synthesized(n, "Conv", ins, {conv}, [&](onnx::NodeProto& p) {
    for (const auto& a : n.proto().attribute())
      if (a.name() != "activation" && a.name() != "activation_params") *p.add_attribute() = a;
  });
  std::string x = conv;
  if (n.has_in(3)) {
    x = act.empty() ? y : synthesized_value(y + "/sum");
    convert_synthesized(n, "Add", {conv, n.in(3)}, {x});
  }
  if (!act.empty()) fused_activation(n, act, params, x, y);
}

// FusedGemm: Gemm, then its activation (activation_alpha, _beta as its floats).
void Importer::fused_gemm(const Node& n) {
  const std::string act = n.get_string("activation", ""), y = n.out(0);
  std::vector<std::string> ins{input_name(n, 0, "A"), input_name(n, 1, "B")};
  if (n.has_in(2)) ins.push_back(n.in(2));
  const std::string product = act.empty() ? y : synthesized_value(y + "/gemm");
  convert_synthesized(n, "Gemm", ins, {product}, [&](onnx::NodeProto& p) {
    for (const auto& a : n.proto().attribute())
      if (a.name().rfind("activation", 0) != 0) *p.add_attribute() = a;
  });
  if (act.empty()) return;
  std::vector<double> params;
  if (n.has("activation_alpha")) params.push_back(n.get_float("activation_alpha"));
  if (n.has("activation_beta")) params.push_back(n.get_float("activation_beta"));
  fused_activation(n, act, params, product, y);
}

}  // namespace onnx_import
}  // namespace softneuro
