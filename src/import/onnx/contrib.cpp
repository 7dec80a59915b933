// ONNX import: the transformer operators of ONNX Runtime's com.microsoft
// domain, which its transformer optimizer (onnxruntime.transformers.optimizer,
// Optimum's --optimize) writes into BERT, GPT-2, ViT, T5, Whisper, CLIP and
// LLaMA files: SkipLayerNormalization, EmbedLayerNormalization, Attention,
// MultiHeadAttention, the GELU forms, FusedMatMul. Each is converted as the
// standard operators it computes (nodes synthesized here, converted by their
// own converters): the passes then fuse them as they fuse a plain export's,
// constants fold and sizes stay symbolic the same way.
#include "import/onnx/importer.hpp"

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
  const std::string y = n.out(0), ids = input_name(n, 0, "input_ids");
  const Shape is = shape_of(n, ids);
  if (is.rank() != 2) throw n.error(fmt::format("input_ids {} is not [batch, sequence]", is.to_string()), "input_ids");
  if (n.has_in(1) != n.has_in(4))
    throw n.error("segment_ids and segment_embedding come together", n.has_in(1) ? "segment_embedding" : "segment_ids");
  const std::string word = synthesized_value(y + "/word");
  convert_synthesized(n, "Gather", {input_name(n, 2, "word_embedding"), ids}, {word}, int_attr("axis", 0));
  const std::string pos = synthesized_value(y + "/position");
  const std::string table = input_name(n, 3, "position_embedding");
  if (n.has_in(8)) {
    convert_synthesized(n, "Gather", {table, n.in(8)}, {pos}, int_attr("axis", 0));
  } else {  // positions 0 .. S-1: the table's first S rows
    const std::string len = synthesized_value(y + "/sequence_length");
    convert_synthesized(n, "Shape", {ids}, {len}, both(int_attr("start", 1), int_attr("end", 2)));
    convert_synthesized(n, "Slice", {table, int_constant(y + "/zero", Shape{1}, {0}), len, int_constant(y + "/axis0", Shape{1}, {0})},
                        {pos});
  }
  const bool segments = n.has_in(1);
  const std::string sum = n.num_outputs() > 2 && used(n.out(2)) ? n.out(2) : synthesized_value(y + "/embedding_sum");
  const std::string word_pos = segments ? synthesized_value(y + "/word_position") : sum;
  convert_synthesized(n, "Add", {word, pos}, {word_pos});
  if (segments) {
    const std::string seg = synthesized_value(y + "/segment");
    convert_synthesized(n, "Gather", {n.in(4), n.in(1)}, {seg}, int_attr("axis", 0));
    convert_synthesized(n, "Add", {word_pos, seg}, {sum});
  }
  convert_synthesized(n, "LayerNormalization", {sum, input_name(n, 5, "gamma"), input_name(n, 6, "beta")}, {y},
                      both(float_attr("epsilon", n.get_float("epsilon", 1e-12)), int_attr("axis", -1)));
  if (!(n.num_outputs() > 1 && used(n.out(1)))) return;
  const std::string mask_index = n.out(1);
  if (n.has_in(7)) {
    const std::string ones = synthesized_value(y + "/mask_ones"), counted = synthesized_value(y + "/mask_counted");
    convert_synthesized(n, "Equal", {n.in(7), int_constant(y + "/one", Shape{}, {1})}, {ones});
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
        part = synthesized_value(fmt::format("{}/mask_{}", y, what));
        convert_synthesized(n, "Slice", {m, int_constant(y + "/from", Shape{1}, {from}), int_constant(y + "/to", Shape{1}, {from + batch}),
                                         int_constant(y + "/axis0", Shape{1}, {0})},
                            {part});
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

std::string Importer::key_positions(const Node& n, const std::vector<std::pair<std::string, int>>& dims) {
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
  if (!n.has_in(bias_k)) return mask;
  if (mask.empty()) return n.in(bias_k);
  const std::string s = synthesized_value(n.out(0) + "/attention_bias");
  convert_synthesized(n, "Add", {mask, n.in(bias_k)}, {s});
  return s;
}

// Attention (com.microsoft): Q, K and V projected by the merged weights
// ([Q heads | K heads | V heads] columns), then attention as ONNX's Attention
// computes it (3-D, the heads split there), the past a [2, B, N, P, H] stack.
void Importer::contrib_attention(const Node& n) {
  if (n.get_int("do_rotary", 0)) throw Unsupported{"Attention with do_rotary (ONNX Runtime's CPU kernel refuses it too)"};
  if (n.get_int("past_present_share_buffer", 0) || n.has_in(6))
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
  // Each projection a MatMul and an Add, as a plain export writes them (the
  // passes make each a dense layer); computed weights: one product, sliced.
  const Blob* w = constant(n.in(1));
  const Blob* b = n.has_in(2) ? constant(n.in(2)) : nullptr;
  std::string product;
  if (!w) {
    product = synthesized_value(y + "/qkv");
    convert_synthesized(n, "MatMul", {x, n.in(1)}, {product});
  }
  std::vector<std::string> qkv;
  int64_t from = 0;
  const char* names[] = {"q", "k", "v"};
  for (int p = 0; p < 3; ++p) {
    const int64_t size = sizes[static_cast<std::size_t>(p)];
    const std::string proj = synthesized_value(fmt::format("{}/{}", y, names[p]));
    std::string raw = n.has_in(2) ? synthesized_value(fmt::format("{}/{}_product", y, names[p])) : proj;
    if (w) {
      const Blob wf = to_float(*w);
      std::vector<float> part(static_cast<std::size_t>(ws[0] * size));
      const float* src = wf.data_as<float>();
      for (int64_t r = 0; r < ws[0]; ++r)
        std::copy(src + r * ws[1] + from, src + r * ws[1] + from + size, part.begin() + r * size);
      convert_synthesized(n, "MatMul", {x, add_constant(fmt::format("{}/{}_weight", y, names[p]), float_blob({ws[0], size}, part))}, {raw});
    } else {
      convert_synthesized(n, "Slice", {product, int_constant(y + "/from", Shape{1}, {from}), int_constant(y + "/to", Shape{1}, {from + size}),
                                       int_constant(y + "/last_axis", Shape{1}, {-1})},
                          {raw});
    }
    if (n.has_in(2)) {
      std::string bias_part;
      if (b) {
        const Blob bf = to_float(*b);
        const float* src = bf.data_as<float>();
        bias_part = add_constant(fmt::format("{}/{}_bias", y, names[p]), float_blob({size}, std::vector<float>(src + from, src + from + size)));
      } else {
        bias_part = synthesized_value(fmt::format("{}/{}_bias", y, names[p]));
        convert_synthesized(n, "Slice", {n.in(2), int_constant(y + "/from", Shape{1}, {from}), int_constant(y + "/to", Shape{1}, {from + size}),
                                         int_constant(y + "/axis0", Shape{1}, {0})},
                            {bias_part});
      }
      convert_synthesized(n, "Add", {raw, bias_part}, {proj});
    }
    qkv.push_back(proj);
    from += size;
  }
  // The past: [2, B, N, P, H], keys then values.
  std::string past_k, past_v;
  if (n.has_in(4)) {
    const Shape ps = shape_of(n, n.in(4));
    if (ps.rank() != 5 || ps[0] != 2 || ps[2] != heads)
      throw n.error(fmt::format("past {} is not [2, batch, {} heads, past, head size]", ps.to_string(), heads), "past");
    if (sizes[1] != sizes[2]) throw n.error("a past needs K and V of one hidden size", "qkv_hidden_sizes");
    past_k = synthesized_value(y + "/past_key");
    past_v = synthesized_value(y + "/past_value");
    convert_synthesized(n, "Gather", {n.in(4), int_constant(y + "/first", Shape{}, {0})}, {past_k}, int_attr("axis", 0));
    convert_synthesized(n, "Gather", {n.in(4), int_constant(y + "/second", Shape{}, {1})}, {past_v}, int_attr("axis", 0));
  }
  const int64_t batch = xs[0];
  auto keys = [&] {
    std::vector<std::pair<std::string, int>> dims{{x, 1}};
    if (n.has_in(4)) dims.emplace_back(n.in(4), 3);
    return key_positions(n, dims);
  };
  const std::string bias = summed_bias(n, contrib_mask_bias(n, 3, batch, keys, true), 5);
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
      const std::string part = synthesized_value(fmt::format("{}/bias{}", y, p)), biased = synthesized_value(fmt::format("{}/biased{}", y, p));
      convert_synthesized(n, "Slice", {n.in(3), int_constant(y + "/from", Shape{1}, {begin[p]}),
                                       int_constant(y + "/to", Shape{1}, {begin[p] + size[p]}), int_constant(y + "/axis0", Shape{1}, {0})},
                          {part});
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
    return key_positions(n, dims);
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

}  // namespace onnx_import
}  // namespace softneuro
