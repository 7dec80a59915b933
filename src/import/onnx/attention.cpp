// ONNX import: Attention (ONNX and com.microsoft) and RotaryEmbedding.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

// Attention (opset 23): softmax(Q Kᵀ * scale + mask [+ causal], softcapped) V,
// as transpose/matmul/softmax steps; 3-D inputs split into heads, K and V
// repeated for grouped-query heads. Not (refused by name): the KV cache
// (past/present), the QK output, nonpad_kv_seqlen, windows.
// Attention (opsets 23-24) as ONNX's reference computes it: KV cache
// (present = concat(past, K/V heads)), grouped-query heads, scores scaled,
// softcapped, then biased by the mask (padded with -inf to the keys), the
// causal triangle and sliding window (aligned to the end of the cache), the
// padding of nonpad_kv_seqlen; softmax, rows with no attendable key set to 0.
// LinearAttention (opset 27: Gated DeltaNet, RWKV-style and Mamba-2 linear
// attention): one layer, linear_attention (docs/layer-types.md), the inputs
// it reads in order (query, key, value, then past_state, decay, beta where
// given). Which of decay and beta a rule takes is checked here, by name.
void Importer::linear_attention(const Node& n) {
  const std::string rule = n.get_string("update_rule", "gated_delta");
  const bool gated = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
  if (!gated && !delta && rule != "linear")
    throw n.error(fmt::format("unknown update_rule '{}' (linear, gated, delta, gated_delta)", rule), "update_rule");
  if (gated != n.has_in(4))
    throw n.error(fmt::format("update_rule '{}' {} a decay input", rule, gated ? "needs" : "takes no"), "decay");
  if (delta != n.has_in(5))
    throw n.error(fmt::format("update_rule '{}' {} a beta input", rule, delta ? "needs" : "takes no"), "beta");
  Layer l = make("linear_attention", n.name, {input(n, 0), input(n, 1), input(n, 2)}, {n.out(0)});
  for (int k = 3; k <= 5; ++k)
    if (n.has_in(k)) l.inputs.push_back(input(n, k));
  // present_state: the layer always computes it; unnamed, a blob of its own.
  l.outputs.push_back(n.num_outputs() > 1 && !n.out(1).empty() ? n.out(1) : fresh_blob(n.out(0) + "/present_state"));
  l.params["q_num_heads"] = n.get_int("q_num_heads");
  l.params["kv_num_heads"] = n.get_int("kv_num_heads");
  l.params["update_rule"] = rule;
  l.params["has_past"] = int64_t{n.has_in(3)};
  if (n.has("scale")) l.params["scale"] = n.get_float("scale");
  add(std::move(l));
}

/// Attention's attn_mask (input 3) as an additive bias over `total` keys
/// ("" where there is none): a constant one (bool masks as 0 / -inf, padded
/// with -inf to every key), or layers computing it at run time (*bias_constant false).
std::string Importer::attention_mask(const Node& n, int64_t total, bool* bias_constant) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::string y = n.out(0);
  std::string bias;
  *bias_constant = true;
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
      *bias_constant = false;
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
  return bias;
}

/// Attention as its steps where one attention layer cannot compute it
/// (softcap; the QK product as an output): QKᵀ, scale, softcap, bias,
/// softmax, the all-masked rows' guard, PV, and the heads merged back.
void Importer::attention_steps(const Node& n, const AttentionSteps& a) {
  const std::string &q = a.q, &k = a.k, &v = a.v, &bias = a.bias, &y = a.y;
  const bool guard = a.guard, three_d = a.three_d;
  const double scale = a.scale;
  const int64_t mode = a.mode, batch = a.batch, len = a.len, hq = a.hq, dv = a.dv;
  const float ninf = -std::numeric_limits<float>::infinity();
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

namespace {

/// The rules of an Attention node a constant bias applies: causal (aligned to
/// the cache's end), a window either side, and each batch row's key length.
struct AttentionRules {
  bool causal = false;
  int64_t left = -1, right = -1;  ///< the window (-1: unbounded)
  int64_t past = 0;               ///< keys in the cache before the new ones
  std::vector<int64_t> nonpad;    ///< per batch row (empty: all keys)
};

/// The bias of `rules`: 0 where a query may attend a key, -inf elsewhere;
/// [len, total], or [batch, 1, len, total] where the key lengths differ per row.
std::vector<float> rule_bias(const AttentionRules& rules, int64_t batch, int64_t len, int64_t total) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t groups = rules.nonpad.empty() ? 1 : batch;
  std::vector<float> rule(static_cast<std::size_t>(groups * len * total), 0.0f);
  for (int64_t b = 0; b < groups; ++b) {
    const int64_t offset = rules.nonpad.empty() ? rules.past : rules.nonpad[static_cast<std::size_t>(b)] - len;
    for (int64_t i = 0; i < len; ++i)
      for (int64_t j = 0; j < total; ++j) {
        const int64_t diff = i + offset - j;
        const bool allowed = (!rules.causal || diff >= 0) && (rules.left < 0 || diff <= rules.left) &&
                             (rules.right < 0 || -diff <= rules.right) &&
                             (rules.nonpad.empty() || j < rules.nonpad[static_cast<std::size_t>(b)]);
        if (!allowed) rule[static_cast<std::size_t>((b * len + i) * total + j)] = ninf;
      }
  }
  return rule;
}

/// Whether a constant bias is -inf over a whole row of keys (a query that attends nothing).
bool masks_a_whole_row(const Blob& bias) {
  const std::vector<double> b = to_doubles(bias);
  const std::size_t w = static_cast<std::size_t>(bias.shape()[bias.shape().rank() - 1]);
  for (std::size_t r = 0; w > 0 && (r + 1) * w <= b.size(); ++r)
    if (std::all_of(b.begin() + static_cast<std::ptrdiff_t>(r * w), b.begin() + static_cast<std::ptrdiff_t>((r + 1) * w),
                    [](double v) { return std::isinf(v) && v < 0; }))
      return true;
  return false;
}

}  // namespace

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
  // One attention layer where nothing needs the steps apart (softcap and the QK output do).
  const bool one_layer = !(n.get_float("softcap", 0.0) > 0) && !used(n.out(3));
  // 3-D K and V neither cached, repeated for grouped heads nor outputs: the
  // layer reads them in place as [B, L, H, D] through its perms (no transposes).
  const bool kv_in_place = one_layer && three_d && !n.has_in(4) && hq == hkv && !used(n.out(1)) && !used(n.out(2));
  // [B, L, H*D] -> [B, L, H, D], then (heads) [B, H, L, D]
  auto split_heads = [&](int k, int64_t h, int64_t seq, int64_t dim, const char* what) {
    const std::string split = fresh_blob(fmt::format("{}/{}_split", y, what));
    add_unary(n, "reshape", input(n, k), split, {{"shape", std::vector<int64_t>{batch, seq, h, dim}}}, std::string(what) + "_split");
    return split;
  };
  auto heads = [&](int k, int64_t h, int64_t seq, int64_t dim, const char* what) {
    if (!three_d) return input(n, k);
    if (kv_in_place && k > 0) return split_heads(k, h, seq, dim, what);
    const std::string t = fresh_blob(fmt::format("{}/{}_heads", y, what));
    add_unary(n, "transpose", split_heads(k, h, seq, dim, what), t, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}},
              std::string(what) + "_heads");
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
  bool bias_constant = true;
  std::string bias = attention_mask(n, total, &bias_constant);
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
  // In one layer, the causal triangle alone is its flag, not a constant.
  // ONNX aligns the triangle to the cache's end (j <= i + past): the layer's
  // "start" without a cache, its "end" where the new keys are the queries' own.
  const bool causal_flag = one_layer && causal && left < 0 && right < 0 && nonpad.empty() && (past == 0 || src == len);
  if (!causal_flag && (causal || left >= 0 || right >= 0 || !nonpad.empty())) {
    const Shape rs = nonpad.empty() ? Shape{len, total} : Shape{batch, 1, len, total};
    const std::vector<float> rule = rule_bias(AttentionRules{causal, left, right, past, nonpad}, batch, len, total);
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
      guard = masks_a_whole_row(*c);
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
    if (kv_in_place) a.params["k_perm"] = a.params["v_perm"] = std::vector<int64_t>{0, 2, 1, 3};
    if (causal_flag) {
      a.params["causal"] = int64_t{1};
      if (past == 0) a.params["causal_align"] = std::string("start");
    }
    if (guard) a.params["masked_rows"] = std::string("zero");
    add(std::move(a));
    if (three_d) add_unary(n, "reshape", ctx, y, {{"shape", std::vector<int64_t>{batch, len, hq * dv}}});
    return;
  }
  attention_steps(n, AttentionSteps{q, k, v, bias, y, guard, three_d, scale, mode, batch, len, hq, dv});
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

}  // namespace onnx_import
}  // namespace softneuro
