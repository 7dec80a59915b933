#include "core/layer_types.hpp"

#include "core/dnn_file.hpp"
#include "core/graph.hpp"
#include "core/weight_quant.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <cmath>
#include <numbers>
#include <limits>
#include <numeric>

namespace softneuro::core {

void fail_field(const Layer& l, const std::string& field, const std::string& msg) { throw Error(msg, {}, l.name, field); }

void expect_rank(const Layer& l, const Shape& s, int rank, const char* what) {
  if (s.rank() != rank)
    fail_field(l, what, fmt::format("{} has shape {}, expected rank {}", what, s.to_string(), rank));
}

std::vector<int64_t> ints_of_size(const Layer& l, const char* key, std::size_t n, std::vector<int64_t> fallback) {
  auto v = l.get_ints(key, std::move(fallback));
  if (v.size() != n) fail_field(l, key, fmt::format("expected {} values, got {}", n, v.size()));
  return v;
}

void check_optional_bias(const Layer& l, int64_t channels) {
  if (const Blob* b = l.find_weight("bias")) {
    if (b->shape().rank() != 1 || b->shape()[0] != channels)
      fail_field(l, "bias", fmt::format("bias has shape {}, expected [{}]", b->shape().to_string(), channels));
  }
}

/// A quantisation scale parameter: positive, finite, within [1e-30, 1e30].
static float quant_scale(const Layer& l, const char* field);

LinearAttentionGeometry linear_attention_geometry(const Layer& l, std::span<const Shape> in) {
  LinearAttentionGeometry g;
  g.hq = l.get_int("q_num_heads", 0);
  g.hkv = l.get_int("kv_num_heads", 0);
  if (g.hq < 1 || g.hkv < 1 || g.hq % g.hkv != 0)
    fail_field(l, "q_num_heads", fmt::format("q_num_heads {} must be a positive multiple of kv_num_heads {}", g.hq, g.hkv));
  const std::string rule = l.get_string("update_rule", "gated_delta");
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
    fail_field(l, "update_rule", fmt::format("unknown update_rule '{}' (linear, gated, delta, gated_delta)", rule));
  g.gated = rule == "gated" || rule == "gated_delta";
  g.delta = rule == "delta" || rule == "gated_delta";
  g.has_past = l.get_int("has_past", 0) != 0;
  const std::size_t want = 3 + g.has_past + g.gated + g.delta;
  if (in.size() != want)
    fail_field(l, "inputs", fmt::format("{} inputs; update_rule '{}'{} takes {}", in.size(), rule, g.has_past ? " with a past state" : "", want));
  const char* names[] = {"query", "key", "value"};
  for (int i = 0; i < 3; ++i)
    if (in[static_cast<std::size_t>(i)].rank() != 3) fail_field(l, names[i], fmt::format("{} {} is not rank 3 (batch, tokens, heads * size)", names[i], in[static_cast<std::size_t>(i)].to_string()));
  g.b = in[0][0];
  g.t = in[0][1];
  for (int i = 1; i < 3; ++i)
    if (in[static_cast<std::size_t>(i)][0] != g.b || in[static_cast<std::size_t>(i)][1] != g.t)
      fail_field(l, names[i], fmt::format("{} {} differs from the query {} in batch or tokens", names[i], in[static_cast<std::size_t>(i)].to_string(), in[0].to_string()));
  if (in[0][2] % g.hq != 0) fail_field(l, "query", fmt::format("query width {} is not a multiple of q_num_heads {}", in[0][2], g.hq));
  g.dk = in[0][2] / g.hq;
  if (in[1][2] != g.hkv * g.dk) fail_field(l, "key", fmt::format("key width {} is not kv_num_heads {} x {}", in[1][2], g.hkv, g.dk));
  if (in[2][2] % g.hkv != 0) fail_field(l, "value", fmt::format("value width {} is not a multiple of kv_num_heads {}", in[2][2], g.hkv));
  g.dv = in[2][2] / g.hkv;
  std::size_t k = 3;
  if (g.has_past && in[k++] != Shape{g.b, g.hkv, g.dk, g.dv})
    fail_field(l, "past_state", fmt::format("past_state {} is not [{}, {}, {}, {}]", in[k - 1].to_string(), g.b, g.hkv, g.dk, g.dv));
  if (g.gated) {
    const Shape& d = in[k++];
    if (d.rank() != 3 || d[0] != g.b || d[1] != g.t || (d[2] != g.hkv && d[2] != g.hkv * g.dk))
      fail_field(l, "decay", fmt::format("decay {} is not [{}, {}, {} or {}]", d.to_string(), g.b, g.t, g.hkv, g.hkv * g.dk));
    g.decay_per_key = d[2] == g.hkv * g.dk && g.dk > 1;  // (at dk 1 the two forms are one)
  }
  if (g.delta) {
    const Shape& bt = in[k++];
    if (bt.rank() != 3 || bt[0] != g.b || bt[1] != g.t || (bt[2] != g.hkv && bt[2] != 1))
      fail_field(l, "beta", fmt::format("beta {} is not [{}, {}, {} or 1]", bt.to_string(), g.b, g.t, g.hkv));
    g.beta_per_head = bt[2] == g.hkv;
  }
  return g;
}

namespace {

[[noreturn]] void fail(const Layer& l, const std::string& field, const std::string& msg) { fail_field(l, field, msg); }

const Shape& weight_shape(const Layer& l, const char* key) { return l.weight(key).shape(); }

std::vector<Shape> infer_conv2(const Layer& l, std::span<const Shape> in) {
  Window2d g = conv2_window(l, in[0]);
  fused_activation(l, true);
  return {Shape{g.n, g.oc, g.oh, g.ow}};
}

std::vector<Shape> infer_deform_conv(const Layer& l, std::span<const Shape> in) {
  const Window2d g = conv2_window(l, in[0]);
  const int64_t og = l.get_int("offset_group", 1);
  if (og < 1 || g.c % og != 0)
    fail(l, "offset_group", fmt::format("offset_group {} does not divide the input's {} channels", og, g.c));
  const Shape offset{g.n, og * 2 * g.kh * g.kw, g.oh, g.ow};
  if (in[1] != offset) fail(l, "offset", fmt::format("offset has shape {}, expected {}", in[1].to_string(), offset.to_string()));
  const Shape mask{g.n, og * g.kh * g.kw, g.oh, g.ow};
  if (in.size() > 2 && in[2] != mask) fail(l, "mask", fmt::format("mask has shape {}, expected {}", in[2].to_string(), mask.to_string()));
  return {Shape{g.n, g.oc, g.oh, g.ow}};
}

std::vector<Shape> infer_max_pool_indices(const Layer& l, std::span<const Shape> in) {
  if (l.get_string("mode", "max") != "max") fail(l, "mode", "max_pool_indices is of a max pool");
  const int64_t order = l.get_int("storage_order", 0);
  if (order != 0 && order != 1) fail(l, "storage_order", fmt::format("storage_order {} is not 0 or 1", order));
  if (in[0].numel() > int64_t{1} << 24)
    fail(l, "input", fmt::format("{} elements: indices beyond 2^24 are not exact in float32", in[0].numel()));
  Window2d g = pool2_window(l, in[0]);
  return {Shape{g.n, g.c, g.oh, g.ow}};
}

std::vector<Shape> infer_pool2(const Layer& l, std::span<const Shape> in) {
  auto mode = l.get_string("mode");
  if (mode != "max" && mode != "avg") fail(l, "mode", fmt::format("unknown pool mode '{}' (max|avg)", mode));
  Window2d g = pool2_window(l, in[0]);
  return {Shape{g.n, g.c, g.oh, g.ow}};
}

std::vector<Shape> infer_dense(const Layer& l, std::span<const Shape> in) {
  const Shape& x = in[0];
  if (x.rank() < 1) fail(l, "input", "dense needs an input of rank >= 1");
  const Shape& w = weight_shape(l, "weight");
  if (w.rank() != 2) fail(l, "weight", fmt::format("weight has shape {}, expected [O,K]", w.to_string()));
  if (w[1] != x[x.rank() - 1])
    fail(l, "weight", fmt::format("weight {} does not match input {} (last dim K)", w.to_string(), x.to_string()));
  check_optional_bias(l, w[0]);
  fused_activation(l, true, true);
  Shape out = x;
  out[out.rank() - 1] = w[0];
  return {out};
}

std::vector<Shape> infer_dynamic_quant_dense(const Layer& l, std::span<const Shape> in) {
  std::vector<Shape> out = infer_dense(l, in);
  if (!stored_as_int8(l.weight("weight")))
    fail(l, "weight", "dynamic_quant_dense needs a weight on an int8 grid (integers with a scale per output channel)");
  return out;
}

std::vector<Shape> infer_matmul(const Layer& l, std::span<const Shape> in) {
  Shape a = in[0], b = in[1];
  if (a.rank() < 1 || b.rank() < 1) fail(l, "input", "matmul needs inputs of rank >= 1");
  bool a_vec = a.rank() == 1, b_vec = b.rank() == 1;
  if (a_vec) a = Shape{1, a[0]};
  if (b_vec) b = Shape{b[0], 1};
  int64_t k1 = a[a.rank() - 1], k2 = b[b.rank() - 2];
  if (k1 != k2)
    fail(l, "input", fmt::format("matmul inner dims differ: {} x {}", in[0].to_string(), in[1].to_string()));
  Shape ab, bb;
  for (int i = 0; i < a.rank() - 2; ++i) ab.push_back(a[i]);
  for (int i = 0; i < b.rank() - 2; ++i) bb.push_back(b[i]);
  Shape out = broadcast_shapes(l, ab, bb);
  if (!a_vec) out.push_back(a[a.rank() - 2]);
  if (!b_vec) out.push_back(b[b.rank() - 1]);
  return {out};
}

std::vector<Shape> infer_batchnorm(const Layer& l, std::span<const Shape> in) {
  if (in[0].rank() < 2) fail(l, "input", "batchnorm needs an input [N,C,...]");
  int64_t c = in[0][1];
  for (const char* k : {"scale", "bias", "mean", "var"}) {
    const Shape& s = weight_shape(l, k);
    if (s.rank() != 1 || s[0] != c)
      fail(l, k, fmt::format("{} has shape {}, expected [{}]", k, s.to_string(), c));
  }
  if (l.get_float("epsilon", 1e-5) < 0) fail(l, "epsilon", "epsilon must be >= 0");
  return {in[0]};
}

std::vector<Shape> infer_same(const Layer&, std::span<const Shape> in) { return {in[0]}; }

std::vector<Shape> infer_clip(const Layer& l, std::span<const Shape> in) {
  double lo = l.get_float("min", -std::numeric_limits<double>::infinity());
  double hi = l.get_float("max", std::numeric_limits<double>::infinity());
  if (lo > hi) fail(l, "min", fmt::format("clip min {} > max {}", lo, hi));
  return {in[0]};
}

std::vector<Shape> infer_gelu(const Layer& l, std::span<const Shape> in) {
  auto a = l.get_string("approximate", "none");
  if (a != "none" && a != "tanh") fail(l, "approximate", fmt::format("unknown gelu approximation '{}'", a));
  return {in[0]};
}

std::vector<Shape> infer_leaky_relu(const Layer& l, std::span<const Shape> in) {
  if (!std::isfinite(l.get_float("alpha", 0.01))) fail(l, "alpha", "alpha must be finite");
  return {in[0]};
}

std::vector<Shape> infer_prelu(const Layer& l, std::span<const Shape> in) {
  // ONNX PRelu: slope broadcasts to the input (unidirectionally).
  const Shape& slope = weight_shape(l, "slope");
  bool fits = slope.rank() <= in[0].rank();
  for (int i = 1; fits && i <= slope.rank(); ++i)
    fits = slope[slope.rank() - i] == 1 || slope[slope.rank() - i] == in[0][in[0].rank() - i];
  if (!fits)
    fail(l, "slope", fmt::format("slope of shape {} does not broadcast to the input {}", slope.to_string(), in[0].to_string()));
  if (requantizes_as_tflite(l)) tflite_prelu_params(l);
  return {in[0]};
}

std::vector<Shape> infer_pow(const Layer& l, std::span<const Shape> in) {
  // pow(x, y) with NumPy broadcasting, or pow(x) with a constant `exponent`.
  if (in.size() == 2) {
    if (l.has("exponent")) fail(l, "exponent", "pow takes an exponent input or an exponent parameter, not both");
    return {broadcast_shapes(l, in[0], in[1])};
  }
  if (!l.has("exponent")) fail(l, "exponent", "pow with one input needs the exponent parameter");
  if (!std::isfinite(l.get_float("exponent"))) fail(l, "exponent", "the exponent must be finite");
  return {in[0]};
}

std::vector<Shape> infer_reduce(const Layer& l, std::span<const Shape> in) {
  static const char* const modes[] = {"mean", "sum", "max", "min", "l2", "prod"};
  const std::string mode = l.get_string("mode");
  if (std::find(std::begin(modes), std::end(modes), mode) == std::end(modes))
    fail(l, "mode", fmt::format("mode '{}' is not one of mean, sum, max, min, l2, prod", mode));
  const std::vector<bool> reduced = reduced_axes(l, in[0]);
  const bool keep = l.get_int("keepdims", 1) != 0;
  Shape out;
  for (int d = 0; d < in[0].rank(); ++d) {
    if (!reduced[static_cast<std::size_t>(d)]) out.push_back(in[0][d]);
    else if (keep) out.push_back(1);
  }
  return {out};
}

std::vector<Shape> infer_softmax(const Layer& l, std::span<const Shape> in) {
  normalize_axis(l, "axis", l.get_int("axis", -1), in[0].rank());
  return {in[0]};
}

std::vector<Shape> infer_attention(const Layer& l, std::span<const Shape> in) {
  const AttentionGeometry g = attention_geometry(l, in);
  return {Shape{g.out_shape[0], g.out_shape[1], g.out_shape[2], g.out_shape[3]}};
}

/// linear_attention: query [B, T, Hq*dk], key [B, T, Hkv*dk], value [B, T, Hkv*dv],
/// then past_state [B, Hkv, dk, dv] (has_past), decay (gated rules) and beta
/// (delta rules); outputs [B, T, Hq*dv] and the state.
std::vector<Shape> infer_linear_attention(const Layer& l, std::span<const Shape> in) {
  const LinearAttentionGeometry g = linear_attention_geometry(l, in);
  return {Shape{g.b, g.t, g.hq * g.dv}, Shape{g.b, g.hkv, g.dk, g.dv}};
}

/// The dims a layernorm or rms_norm normalises over (axis..rank-1), its scale
/// checked to hold one value for each of their positions.
Shape normalised_dims(const Layer& l, const Shape& in) {
  const int axis = normalize_axis(l, "axis", l.get_int("axis", -1), in.rank());
  Shape norm;
  for (int i = axis; i < in.rank(); ++i) norm.push_back(in[i]);
  const Shape& s = weight_shape(l, "scale");
  if (s.numel() != norm.numel())
    fail(l, "scale", fmt::format("scale has shape {}, expected {}", s.to_string(), norm.to_string()));
  return norm;
}

std::vector<Shape> infer_layernorm(const Layer& l, std::span<const Shape> in) {
  const Shape norm = normalised_dims(l, in[0]);
  if (const Blob* b = l.find_weight("bias"); b && b->shape().numel() != norm.numel())
    fail(l, "bias", fmt::format("bias has shape {}, expected {}", b->shape().to_string(), norm.to_string()));
  return {in[0]};
}

// rms_norm: y = x / sqrt(mean(x^2 over axis..rank-1) + epsilon) * scale (RMSNorm: LLaMA, Mistral, T5).
std::vector<Shape> infer_rms_norm(const Layer& l, std::span<const Shape> in) {
  normalised_dims(l, in[0]);
  const double eps = l.get_float("epsilon", 1e-6);
  if (!(eps >= 0) || !std::isfinite(eps)) fail(l, "epsilon", fmt::format("epsilon {} is not a non-negative number", eps));
  return {in[0]};
}

// rotary: y = x * cos + rotate_half(x) * sin over the last dim D (rotate_half:
// [-x2, x1] of its halves; transformers' rotary position embedding), cos and
// sin [.., D] broadcast onto x.
std::vector<Shape> infer_rotary(const Layer& l, std::span<const Shape> in) {
  const Shape& x = in[0];
  if (x.rank() < 1 || x[x.rank() - 1] % 2 != 0)
    fail(l, "input", fmt::format("input {} has no last dim of even size", x.to_string()));
  const char* names[] = {"cos", "sin"};
  for (int t = 1; t <= 2; ++t) {
    const Shape& c = in[static_cast<std::size_t>(t)];
    bool onto = c.rank() >= 1 && c.rank() <= x.rank() && c[c.rank() - 1] == x[x.rank() - 1];
    for (int d = 0; onto && d < c.rank(); ++d) onto = c[d] == 1 || c[d] == x[d + x.rank() - c.rank()];
    if (!onto)
      fail(l, names[t - 1], fmt::format("{} {} does not broadcast onto the input {} with its last dim", names[t - 1],
                                        c.to_string(), x.to_string()));
  }
  return {x};
}

std::vector<Shape> infer_group_norm(const Layer& l, std::span<const Shape> in) {
  if (in[0].rank() < 2) fail(l, "input", fmt::format("group_norm needs [N,C,...], got {}", in[0].to_string()));
  const int64_t c = in[0][1], groups = l.get_int("groups", 0);
  if (groups <= 0 || c % groups != 0) fail(l, "groups", fmt::format("{} groups do not divide {} channels", groups, c));
  const double eps = l.get_float("epsilon", 1e-5);
  if (!(eps >= 0) || !std::isfinite(eps)) fail(l, "epsilon", fmt::format("epsilon {} is not a non-negative number", eps));
  if (weight_shape(l, "scale") != Shape{c})
    fail(l, "scale", fmt::format("scale has shape {}, expected [{}]", weight_shape(l, "scale").to_string(), c));
  if (const Blob* b = l.find_weight("bias"); b && b->shape() != Shape{c})
    fail(l, "bias", fmt::format("bias has shape {}, expected [{}]", b->shape().to_string(), c));
  return {in[0]};
}

std::vector<Shape> infer_fake_quant(const Layer& l, std::span<const Shape> in) {
  fake_quant_params(l);
  return {in[0]};
}

std::vector<Shape> infer_dynamic_quantize(const Layer&, std::span<const Shape> in) {
  return {in[0], Shape{}, Shape{}};
}

std::vector<Shape> infer_compare(const Layer& l, std::span<const Shape> in) {
  static const char* const ops[] = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "and", "or", "xor"};
  const std::string op = l.get_string("op");
  const bool logical = l.type == "logical";
  const auto* first = logical ? std::begin(ops) + 6 : std::begin(ops);
  const auto* last = logical ? std::end(ops) : std::begin(ops) + 6;
  if (std::find(first, last, op) == last) fail(l, "op", fmt::format("{} has no op '{}'", l.type, op));
  return {broadcast_shapes(l, in[0], in[1])};
}

std::vector<Shape> infer_where(const Layer& l, std::span<const Shape> in) {
  return {broadcast_shapes(l, broadcast_shapes(l, in[0], in[1]), in[2])};
}

std::vector<Shape> infer_round(const Layer& l, std::span<const Shape> in) {
  const std::string mode = l.get_string("mode", "nearest_even");
  if (mode != "nearest_even" && mode != "floor" && mode != "ceil" && mode != "trunc")
    fail(l, "mode", fmt::format("mode '{}' is not nearest_even, floor, ceil or trunc", mode));
  return {in[0]};
}

std::vector<Shape> infer_einsum(const Layer& l, std::span<const Shape> in) {
  const EinsumSpec e = einsum_spec(l, in);
  Shape out;
  for (char c : e.output) out.push_back(e.sizes.at(c));
  return {out};
}

std::vector<Shape> infer_cast(const Layer& l, std::span<const Shape> in) {
  const std::string to = l.get_string("to");
  DType t = DType::float32;
  try {
    t = parse_dtype(to);
  } catch (const Error&) {
  }
  if (!is_narrow(t)) fail(l, "to", fmt::format("'{}' is not a narrow type (float8e4m3fn ... uint2)", to));
  const std::string mode = l.get_string("round_mode", "up");
  if (mode != "up" && mode != "down" && mode != "nearest")
    fail(l, "round_mode", fmt::format("round_mode '{}' is not up, down or nearest", mode));
  return {in[0]};
}

constexpr const char* kTrigOps[] = {"sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"};

std::vector<Shape> infer_trig(const Layer& l, std::span<const Shape> in) {
  const std::string op = l.get_string("op");
  if (std::find(std::begin(kTrigOps), std::end(kTrigOps), op) == std::end(kTrigOps))
    fail(l, "op", fmt::format("trig has no op '{}'", op));
  return {in[0]};
}

std::vector<Shape> infer_take(const Layer& l, std::span<const Shape> in) {
  const Blob& idx = l.weight("indices");
  if (idx.dtype() != DType::int64) fail(l, "indices", "indices must be int64");
  const int64_t n = in[0].numel();
  const int64_t* p = idx.data_as<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i)
    if (p[i] < 0 || p[i] >= n)
      fail(l, "indices", fmt::format("index {} is outside the input's {} values", p[i], n));
  return {idx.shape()};
}

std::vector<Shape> infer_gather(const Layer& l, std::span<const Shape> in) {
  // The table is input 0, or (one input: the indices) the weight "table".
  const Shape& x = in.size() == 2 ? in[0] : l.weight("table").shape();
  const Shape& indices = in.back();
  if (x.rank() == 0) fail(l, "input", "gather needs data of rank 1 or more");
  const int axis = normalize_axis(l, "axis", l.get_int("axis", 0), x.rank());
  Shape out;
  for (int d = 0; d < axis; ++d) out.push_back(x[d]);
  if (x.rank() - 1 + indices.rank() > Shape::max_rank)
    fail(l, "indices", fmt::format("data {} gathered by indices {} has too many dims", x.to_string(), indices.to_string()));
  for (int d = 0; d < indices.rank(); ++d) out.push_back(indices[d]);
  for (int d = axis + 1; d < x.rank(); ++d) out.push_back(x[d]);
  return {out};
}

std::vector<Shape> infer_gather_elements(const Layer& l, std::span<const Shape> in) {
  const Shape &x = in[0], &idx = in[1];
  if (x.rank() == 0 || idx.rank() != x.rank())
    fail(l, "indices", fmt::format("indices {} and data {} differ in rank", idx.to_string(), x.to_string()));
  const int axis = normalize_axis(l, "axis", l.get_int("axis", 0), x.rank());
  for (int d = 0; d < x.rank(); ++d)
    if (d != axis && idx[d] > x[d])
      fail(l, "indices", fmt::format("indices {} exceed data {} in dim {}", idx.to_string(), x.to_string(), d));
  return {idx};
}

std::vector<Shape> infer_gather_nd(const Layer& l, std::span<const Shape> in) {
  const Shape &x = in[0], &idx = in[1];
  const int64_t b = l.get_int("batch_dims", 0);
  if (idx.rank() < 1 || b < 0 || b >= std::min(idx.rank(), x.rank()))
    fail(l, "batch_dims", fmt::format("batch_dims {} for indices {} and data {}", b, idx.to_string(), x.to_string()));
  const int64_t k = idx[idx.rank() - 1];
  if (k < 1 || b + k > x.rank()) fail(l, "indices", fmt::format("index tuples of {} for data {}", k, x.to_string()));
  for (int d = 0; d < b; ++d)
    if (idx[d] != x[d]) fail(l, "indices", fmt::format("batch dims of indices {} and data {} differ", idx.to_string(), x.to_string()));
  Shape out;
  if (idx.rank() - 1 + x.rank() - (b + k) > Shape::max_rank) fail(l, "indices", "the output has too many dims");
  for (int d = 0; d < idx.rank() - 1; ++d) out.push_back(idx[d]);
  for (int d = static_cast<int>(b + k); d < x.rank(); ++d) out.push_back(x[d]);
  return {out};
}

std::vector<Shape> infer_arg_reduce(const Layer& l, std::span<const Shape> in) {
  const std::string mode = l.get_string("mode", "max");
  if (mode != "max" && mode != "min") fail(l, "mode", fmt::format("mode '{}' is not max or min", mode));
  if (in[0].rank() == 0) fail(l, "input", "arg_reduce needs an input of rank 1 or more");
  const int axis = normalize_axis(l, "axis", l.get_int("axis", 0), in[0].rank());
  if (in[0][axis] == 0) fail(l, "axis", fmt::format("axis {} of {} is empty: no index to give", axis, in[0].to_string()));
  Shape out;
  for (int d = 0; d < in[0].rank(); ++d)
    if (d != axis) out.push_back(in[0][d]);
    else if (l.get_int("keepdims", 1)) out.push_back(1);
  return {out};
}

std::vector<Shape> infer_divmod(const Layer& l, std::span<const Shape> in) {
  const std::string op = l.get_string("op");
  if (op != "quotient" && op != "mod" && op != "fmod") fail(l, "op", fmt::format("divmod has no op '{}' (quotient, mod, fmod)", op));
  return {broadcast_shapes(l, in[0], in[1])};
}

std::vector<Shape> infer_bitwise(const Layer& l, std::span<const Shape> in) {
  static const char* const ops[] = {"and", "or", "xor", "shift_left", "shift_right"};
  const std::string op = l.get_string("op");
  if (std::find(std::begin(ops), std::end(ops), op) == std::end(ops))
    fail(l, "op", fmt::format("bitwise has no op '{}' (and, or, xor, shift_left, shift_right)", op));
  const int64_t bits = l.get_int("bits", 0);
  if (bits != 8 && bits != 16 && bits != 32 && bits != 64) fail(l, "bits", fmt::format("bits {} is not 8, 16, 32 or 64", bits));
  return {broadcast_shapes(l, in[0], in[1])};
}

std::vector<Shape> infer_cumulative(const Layer& l, std::span<const Shape> in) {
  const std::string op = l.get_string("op", "sum");
  if (op != "sum" && op != "prod") fail(l, "op", fmt::format("cumulative has no op '{}' (sum, prod)", op));
  if (in[0].rank() == 0) fail(l, "input", "cumulative needs an input of rank 1 or more");
  normalize_axis(l, "axis", l.get_int("axis", 0), in[0].rank());
  return {in[0]};
}

bool top_k_at_run(const Layer& l) { return l.inputs.size() == 2 && l.get_int("k_at_run", 0) != 0; }

std::vector<Shape> infer_top_k(const Layer& l, std::span<const Shape> in) {
  if (in[0].rank() == 0) fail(l, "input", "top_k needs an input of rank 1 or more");
  const int axis = normalize_axis(l, "axis", l.get_int("axis", -1), in[0].rank());
  if (top_k_at_run(l)) {  // the most it can take: the whole axis
    if (in[1].numel() != 1) fail(l, "k", fmt::format("k {} is not one value", in[1].to_string()));
    return {in[0], in[0]};
  }
  const int64_t k = l.get_int("k");
  if (k < 0 || k > in[0][axis])
    fail(l, "k", fmt::format("k {} is outside 0..{} (axis {} of {})", k, in[0][axis], axis, in[0].to_string()));
  Shape out = in[0];
  out[axis] = k;
  return {out, out};
}

std::vector<Shape> infer_non_max_suppression(const Layer& l, std::span<const Shape> in) {
  const Shape& boxes = in[0];
  const Shape& scores = in[1];
  if (boxes.rank() != 3 || boxes[2] != 4) fail(l, "boxes", fmt::format("boxes {} are not [batch, boxes, 4]", boxes.to_string()));
  if (scores.rank() != 3 || scores[0] != boxes[0] || scores[2] != boxes[1])
    fail(l, "scores", fmt::format("scores {} are not [batch, classes, boxes] for boxes {}", scores.to_string(), boxes.to_string()));
  const int64_t most = l.get_int("max_output_boxes_per_class", 0);
  if (most < 0) fail(l, "max_output_boxes_per_class", fmt::format("{} is negative", most));
  const int64_t center = l.get_int("center_point_box", 0);
  if (center != 0 && center != 1) fail(l, "center_point_box", fmt::format("{} is not 0 or 1", center));
  const double iou = l.get_float("iou_threshold", 0.0);
  if (!(iou >= 0 && iou <= 1)) fail(l, "iou_threshold", fmt::format("{} is outside [0, 1]", iou));
  return {Shape{boxes[0] * scores[1] * std::min(most, boxes[1]), 3}};
}

std::vector<Shape> infer_scatter_elements(const Layer& l, std::span<const Shape> in) {
  if (in[1] != in[2]) fail(l, "updates", fmt::format("updates {} do not match indices {}", in[2].to_string(), in[1].to_string()));
  if (in[1].rank() != in[0].rank()) fail(l, "indices", fmt::format("indices {} do not have data {}'s rank", in[1].to_string(), in[0].to_string()));
  if (in[0].rank() == 0) fail(l, "data", "data of rank 0 has no axis");
  const int axis = normalize_axis(l, "axis", l.get_int("axis", 0), in[0].rank());
  for (int d = 0; d < in[0].rank(); ++d)
    if (d != axis && in[1][d] > in[0][d])
      fail(l, "indices", fmt::format("indices {} exceed data {} in dim {}", in[1].to_string(), in[0].to_string(), d));
  const std::string r = l.get_string("reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    fail(l, "reduction", fmt::format("reduction '{}' is not none, add, mul, max or min", r));
  return {in[0]};
}

std::vector<Shape> infer_scatter_nd(const Layer& l, std::span<const Shape> in) {
  // indices [..., k] of k-tuples into data's first k dims; updates [..., data dims after k].
  if (in[1].rank() < 1) fail(l, "indices", "indices need at least one dim");
  const int64_t k = in[1][in[1].rank() - 1];
  if (k < 1 || k > in[0].rank())
    fail(l, "indices", fmt::format("index tuples of {} for data {}", k, in[0].to_string()));
  Shape want;
  for (int d = 0; d + 1 < in[1].rank(); ++d) want.push_back(in[1][d]);
  for (int d = static_cast<int>(k); d < in[0].rank(); ++d) want.push_back(in[0][d]);
  if (in[2] != want) fail(l, "updates", fmt::format("updates {} are not {}", in[2].to_string(), want.to_string()));
  const std::string r = l.get_string("reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    fail(l, "reduction", fmt::format("reduction '{}' is not none, add, mul, max or min", r));
  return {in[0]};
}

std::vector<Shape> infer_slice(const Layer& l, std::span<const Shape> in) {
  const auto starts = l.get_ints("starts"), ends = l.get_ints("ends"), axes = l.get_ints("axes");
  const auto steps = l.get_ints("steps", std::vector<int64_t>(starts.size(), 1));
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail(l, "starts", "starts, ends, axes and steps differ in length");
  Shape out = in[0];
  std::vector<bool> seen(static_cast<std::size_t>(in[0].rank()), false);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= in[0].rank() || seen[static_cast<std::size_t>(axes[i])])
      fail(l, "axes", fmt::format("axis {} is not a dim of {} or is repeated", axes[i], in[0].to_string()));
    seen[static_cast<std::size_t>(axes[i])] = true;
    if (steps[i] == 0) fail(l, "steps", "step 0");
    const SliceRange r = slice_range(starts[i], ends[i], steps[i], in[0][static_cast<int>(axes[i])]);
    out[static_cast<int>(axes[i])] = r.count;
  }
  return {out};
}

std::vector<Shape> infer_branch(const Layer& l, std::span<const Shape> in) {
  return {l.get_int("probe", 1) != 0 ? in[1] : in[2]};
}

std::vector<Shape> infer_choose(const Layer& l, std::span<const Shape> in) {
  if (in[0].numel() != 1) fail(l, "condition", fmt::format("condition {} is not one value", in[0].to_string()));
  if (in[1].rank() != in[2].rank())
    fail(l, "inputs", fmt::format("the choices {} and {} differ in rank", in[1].to_string(), in[2].to_string()));
  Shape out = in[1];
  for (int d = 0; d < out.rank(); ++d) out[d] = std::max(in[1][d], in[2][d]);
  return {out};
}

bool loop_value_shaped(const Layer& l) { return l.get_int("scan_outputs", 0) > 0; }

std::vector<Shape> infer_loop(const Layer& l, std::span<const Shape> in) {
  // A body may hold loops of its own: a file nesting them without end must be an Error, not a stack overflow.
  constexpr int kMostNested = 16;
  thread_local int nested = 0;
  if (nested >= kMostNested) fail(l, "body", fmt::format("loops nested more than {} deep", kMostNested));
  struct Depth {
    Depth() { ++nested; }
    ~Depth() { --nested; }
  } depth;
  const LoopPorts p = loop_ports(l, in.size());
  const Graph body = loop_body(l);
  const std::size_t state = in.size() - p.first_carried;  // carried and outer values
  if (body.inputs.size() != 2 + state || body.outputs.size() != 1 + p.carried + p.scan_outputs)
    fail(l, "body", fmt::format("the body takes {} inputs and gives {} outputs; the loop passes {} and reads {}",
                                body.inputs.size(), body.outputs.size(), 2 + state, 1 + p.carried + p.scan_outputs));
  if (in[0].numel() != 1) fail(l, "cond", fmt::format("cond {} is not one value", in[0].to_string()));
  if (p.trip_count_input && in[1].numel() != 1) fail(l, "trip_count", fmt::format("M {} is not one value", in[1].to_string()));
  std::map<std::string, Shape> at{{body.inputs[0].name, Shape{}}, {body.inputs[1].name, Shape{}}};
  int64_t trips = l.get_int("trip_count", -1);
  for (std::size_t j = 0; j < state; ++j) {
    Shape s = in[p.first_carried + j];
    if (j >= p.carried && j < p.carried + p.scan_inputs) {  // a slice of it per iteration
      if (s.rank() < 1) fail(l, "scan_inputs", fmt::format("scan input {} is a scalar", j - p.carried));
      if (j > p.carried && s[0] != trips)
        fail(l, "scan_inputs", fmt::format("scan input {} has {} slices, scan input 0 {}", j - p.carried, s[0], trips));
      trips = s[0];
      s = Shape(std::vector<int64_t>(s.begin() + 1, s.end()));
    }
    at[body.inputs[2 + j].name] = s;
  }
  std::map<std::string, Shape> shapes;
  try {
    shapes = infer_shapes(body, at);
  } catch (const Error& e) {
    fail(l, "body", fmt::format("in its body{}: {}", e.layer().empty() ? "" : ", layer '" + e.layer() + "'", e.message()));
  }
  std::vector<Shape> out;
  for (std::size_t j = 0; j < p.carried; ++j) {
    const Shape& after = shapes.at(body.outputs[1 + j]);
    if (after != in[p.first_carried + j])
      fail(l, "body", fmt::format("loop-carried value {} changes shape from {} to {} in an iteration (only state "
                                  "that keeps its shape is supported)", j, in[p.first_carried + j].to_string(), after.to_string()));
    out.push_back(after);
  }
  for (std::size_t j = 0; j < p.scan_outputs; ++j) {
    if (trips < 0)
      fail(l, "trip_count", "a loop with scan outputs needs its trip count (M) when it is planned: a constant or a "
                             "value computed from shapes, not one computed at run time");
    const Shape& each = shapes.at(body.outputs[1 + p.carried + j]);
    if (each.rank() + 1 > Shape::max_rank) fail(l, "body", fmt::format("scan output {} has rank {}", j, each.rank()));
    std::vector<int64_t> dims{trips};
    dims.insert(dims.end(), each.begin(), each.end());
    out.push_back(Shape(dims));
  }
  return out;
}

std::vector<Shape> infer_non_zero(const Layer&, std::span<const Shape> in) {
  return {Shape{std::max(1, in[0].rank()), in[0].numel()}};
}

std::vector<Shape> infer_col2im(const Layer& l, std::span<const Shape> in) {
  const auto image = l.get_ints("image_shape"), block = l.get_ints("block_shape");
  const std::size_t r = image.size();
  if (r < 1 || r + 2 > static_cast<std::size_t>(Shape::max_rank) || block.size() != r)
    fail(l, "block_shape", fmt::format("image_shape and block_shape have {} and {} dims", r, block.size()));
  const Shape& x = in[0];
  if (x.rank() != 3) fail(l, "input", fmt::format("input {} is not [N, C * block, L]", x.to_string()));
  const auto n = col2im_positions(l, r);
  int64_t blocks = 1, positions = 1;
  for (std::size_t d = 0; d < r; ++d) blocks *= block[d], positions *= n[d];
  if (x[1] % blocks != 0) fail(l, "input", fmt::format("{} columns are not a multiple of the block's {}", x[1], blocks));
  if (x[2] != positions) fail(l, "input", fmt::format("{} positions, the geometry gives {}", x[2], positions));
  Shape out{x[0], x[1] / blocks};
  for (auto d : image) out.push_back(d);
  return {out};
}

std::vector<Shape> infer_dft(const Layer& l, std::span<const Shape> in) {
  const Shape& x = in[0];
  if (x.rank() < 2 || (x[x.rank() - 1] != 1 && x[x.rank() - 1] != 2))
    fail(l, "input", fmt::format("input {} is not [..., 1 or 2] (real or complex)", x.to_string()));
  const int axis = normalize_axis(l, "axis", l.get_int("axis"), x.rank());
  if (axis == x.rank() - 1) fail(l, "axis", "the last dim holds the real and imaginary parts, not a signal");
  const int64_t n = l.get_int("length", x[axis]);
  if (n < 1 || n > (int64_t{1} << 24)) fail(l, "length", fmt::format("length {} is outside 1..2^24", n));
  const bool inverse = l.get_int("inverse", 0) != 0, onesided = l.get_int("onesided", 0) != 0;
  Shape out = x;
  out[axis] = onesided && !inverse ? n / 2 + 1 : n;
  out[x.rank() - 1] = onesided && inverse ? 1 : 2;
  return {out};
}

std::vector<Shape> infer_unique(const Layer& l, std::span<const Shape> in) {
  const Shape& x = in[0];
  if (!l.has("axis")) {
    const int64_t n = x.numel();
    return {Shape{n}, Shape{n}, Shape{n}, Shape{n}};
  }
  if (x.rank() == 0) fail(l, "axis", "an input of rank 0 has no axis");
  const int axis = normalize_axis(l, "axis", l.get_int("axis"), x.rank());
  const int64_t n = x[axis];
  return {x, Shape{n}, Shape{n}, Shape{n}};
}

std::vector<Shape> infer_roi_align(const Layer& l, std::span<const Shape> in) {
  const Shape& x = in[0];
  if (x.rank() != 4) fail(l, "input", fmt::format("input {} is not [N, C, H, W]", x.to_string()));
  if (in[1].rank() != 2 || in[1][1] != 4) fail(l, "rois", fmt::format("rois {} are not [R, 4]", in[1].to_string()));
  if (in[2].rank() != 1 || in[2][0] != in[1][0])
    fail(l, "batch_indices", fmt::format("batch_indices {} are not [{}]", in[2].to_string(), in[1][0]));
  const std::string mode = l.get_string("mode", "avg");
  if (mode != "avg" && mode != "max") fail(l, "mode", fmt::format("mode '{}' is not avg or max", mode));
  const std::string ct = l.get_string("coordinate_transformation_mode", "half_pixel");
  if (ct != "half_pixel" && ct != "output_half_pixel")
    fail(l, "coordinate_transformation_mode", fmt::format("'{}' is not half_pixel or output_half_pixel", ct));
  const int64_t oh = l.get_int("output_height", 1), ow = l.get_int("output_width", 1), sr = l.get_int("sampling_ratio", 0);
  if (oh < 1 || oh > kMaxWindowParam) fail(l, "output_height", fmt::format("{} is outside 1..{}", oh, kMaxWindowParam));
  if (ow < 1 || ow > kMaxWindowParam) fail(l, "output_width", fmt::format("{} is outside 1..{}", ow, kMaxWindowParam));
  if (sr < 0 || sr > kMaxWindowParam) fail(l, "sampling_ratio", fmt::format("{} is outside 0..{}", sr, kMaxWindowParam));
  const double scale = l.get_float("spatial_scale", 1.0);
  if (!(scale > 0) || !std::isfinite(scale)) fail(l, "spatial_scale", fmt::format("{} is not a positive number", scale));
  return {Shape{in[1][0], x[1], oh, ow}};
}

std::vector<Shape> infer_grid_sample(const Layer& l, std::span<const Shape> in) {
  const Shape& x = in[0];
  const Shape& g = in[1];
  const int r = x.rank() - 2;
  if (r < 1 || r > 3) fail(l, "input", fmt::format("input {} is not [N, C, spatial...] with 1 to 3 spatial dims", x.to_string()));
  if (g.rank() != r + 2 || g[0] != x[0] || g[g.rank() - 1] != r)
    fail(l, "grid", fmt::format("grid {} is not [N, out..., {}] for input {}", g.to_string(), r, x.to_string()));
  const std::string mode = l.get_string("mode", "linear"), pad = l.get_string("padding_mode", "zeros");
  if (mode != "linear" && mode != "nearest" && mode != "cubic") fail(l, "mode", fmt::format("mode '{}' is not linear, nearest or cubic", mode));
  if (pad != "zeros" && pad != "border" && pad != "reflection")
    fail(l, "padding_mode", fmt::format("padding_mode '{}' is not zeros, border or reflection", pad));
  Shape out{x[0], x[1]};
  for (int d = 1; d <= r; ++d) out.push_back(g[d]);
  return {out};
}

std::vector<Shape> infer_binary(const Layer& l, std::span<const Shape> in) {
  // add may carry a fused relu or clip (fuse_activations: ResNet's add -> relu);
  // the other binaries none, so no routine can skip one silently.
  const Activation a = fused_activation(l);
  if (a.kind != Activation::none && (l.type != "add" || (a.kind != Activation::relu && a.kind != Activation::clip)))
    fail(l, "act", fmt::format("{} takes no fused activation '{}' (add takes relu or clip)", l.type, l.get_string("act")));
  if (l.type == "add" && requantizes_as_tflite(l) && l.has("input_scales")) tflite_add_params(l);
  return {broadcast_shapes(l, in[0], in[1])};
}

std::vector<Shape> infer_concat(const Layer& l, std::span<const Shape> in) {
  int rank = in[0].rank();
  int axis = normalize_axis(l, "axis", l.get_int("axis"), rank);
  Shape out = in[0];
  for (std::size_t i = 1; i < in.size(); ++i) {
    if (in[i].rank() != rank) fail(l, "input", fmt::format("input {} has rank {}, expected {}", i, in[i].rank(), rank));
    for (int d = 0; d < rank; ++d) {
      if (d == axis) continue;
      if (in[i][d] != out[d])
        fail(l, "input", fmt::format("input {} has shape {}, incompatible with {} on axis {}", i,
                                     in[i].to_string(), in[0].to_string(), d));
    }
    out[axis] += in[i][axis];
  }
  return {out};
}

std::vector<Shape> infer_split(const Layer& l, std::span<const Shape> in) {
  int axis = normalize_axis(l, "axis", l.get_int("axis", 0), in[0].rank());
  auto n = static_cast<int64_t>(l.outputs.size());
  int64_t dim = in[0][axis];
  std::vector<int64_t> sizes = l.get_ints("split", {});
  if (sizes.empty()) {
    if (n == 0 || dim % n != 0)
      fail(l, "split", fmt::format("axis size {} does not split into {} equal parts", dim, n));
    sizes.assign(static_cast<std::size_t>(n), dim / n);
  }
  if (static_cast<int64_t>(sizes.size()) != n)
    fail(l, "split", fmt::format("{} sizes for {} outputs", sizes.size(), n));
  // One size may be -1: that part takes what the others leave (x[:, 1:] of a
  // dim that varies with the input).
  int64_t sum = 0;
  int rest = -1;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1 && rest < 0) {
      rest = static_cast<int>(i);
      continue;
    }
    if (sizes[i] < 0) fail(l, "split", sizes[i] == -1 ? "more than one size is -1" : "negative split size");
    if (sizes[i] > dim) fail(l, "split", fmt::format("size {} exceeds the axis size {}", sizes[i], dim));
    sum += sizes[i];
  }
  if (rest >= 0) {
    if (sum > dim) fail(l, "split", fmt::format("sizes sum to {} before the -1 part, axis size is {}", sum, dim));
    sizes[static_cast<std::size_t>(rest)] = dim - sum;
    sum = dim;
  }
  if (sum != dim) fail(l, "split", fmt::format("sizes sum to {}, axis size is {}", sum, dim));
  std::vector<Shape> out;
  for (auto s : sizes) {
    Shape o = in[0];
    o[axis] = s;
    out.push_back(o);
  }
  return out;
}

// shape: ONNX's target (0 copies the input dim at the same index, -1 is
// inferred); copy_dims (optional, one per output dim): an input dim index to
// copy, or -1 to take `shape` (lets a model with dynamic dims squeeze and
// unsqueeze them).
// shape_math values depend on the values of their inputs: core::specialize
// (core/shape_plan.hpp) computes them when the input shapes are known.
std::vector<Shape> infer_shape_math(const Layer& l, std::span<const Shape>) {
  fail(l, "op", "a shape_math layer is evaluated when the net's input shapes are known (core::specialize)");
}

std::vector<Shape> infer_reshape(const Layer& l, std::span<const Shape> in) {
  auto spec = l.get_ints("shape");
  const auto copy = l.get_ints("copy_dims", {});
  if (spec.size() > static_cast<std::size_t>(Shape::max_rank)) fail(l, "shape", "too many dims");
  if (!copy.empty() && copy.size() != spec.size()) fail(l, "copy_dims", "not one per output dim");
  Shape out;
  int infer_at = -1;
  int64_t known = 1;
  const bool allow_zero = l.get_int("allowzero", 0) != 0;  // ONNX's allowzero: a 0 is a 0, not the input's dim
  for (std::size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (!copy.empty() && copy[i] != -1) {
      if (copy[i] < 0 || copy[i] >= in[0].rank()) fail(l, "copy_dims", fmt::format("dim {} is not one of the input's", copy[i]));
      d = in[0][static_cast<int>(copy[i])];
    } else if (d == 0 && !allow_zero) {
      if (static_cast<int>(i) >= in[0].rank()) fail(l, "shape", "0 refers past the input's rank");
      d = in[0][static_cast<int>(i)];
    } else if (d == -1) {
      if (infer_at >= 0) fail(l, "shape", "more than one -1");
      infer_at = static_cast<int>(i);
      d = 1;
    } else if (d < 0) {
      fail(l, "shape", fmt::format("invalid dim {}", d));
    }
    out.push_back(d);
    if (static_cast<int>(i) != infer_at && __builtin_mul_overflow(known, d, &known))
      fail(l, "shape", fmt::format("the dims {} multiply beyond int64", out.to_string()));
  }
  int64_t total = in[0].numel();
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0)
      fail(l, "shape", fmt::format("cannot reshape {} into {}", in[0].to_string(), out.to_string()));
    out[infer_at] = total / known;
  }
  if (out.numel() != total)
    fail(l, "shape", fmt::format("cannot reshape {} ({} elements) into {}", in[0].to_string(), total, out.to_string()));
  return {out};
}

std::vector<Shape> infer_flatten(const Layer& l, std::span<const Shape> in) {
  int rank = in[0].rank();
  int64_t axis = l.get_int("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) fail(l, "axis", fmt::format("axis {} out of range for rank {}", axis, rank));
  int64_t a = 1, b = 1;
  for (int i = 0; i < rank; ++i) (i < axis ? a : b) *= in[0][i];
  return {Shape{a, b}};
}

std::vector<Shape> infer_transpose(const Layer& l, std::span<const Shape> in) {
  int rank = in[0].rank();
  std::vector<int64_t> def(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) def[static_cast<std::size_t>(i)] = rank - 1 - i;
  auto perm = l.get_ints("perm", def);
  if (static_cast<int>(perm.size()) != rank) fail(l, "perm", fmt::format("perm has {} entries for rank {}", perm.size(), rank));
  std::vector<bool> seen(static_cast<std::size_t>(rank));
  Shape out;
  for (auto p : perm) {
    if (p < 0 || p >= rank || seen[static_cast<std::size_t>(p)]) fail(l, "perm", "not a permutation");
    seen[static_cast<std::size_t>(p)] = true;
    out.push_back(in[0][static_cast<int>(p)]);
  }
  return {out};
}

std::vector<Shape> infer_pad(const Layer& l, std::span<const Shape> in) {
  int rank = in[0].rank();
  auto pads = l.get_ints("pads");
  if (static_cast<int>(pads.size()) != 2 * rank)
    fail(l, "pads", fmt::format("{} pads for rank {} (need {})", pads.size(), rank, 2 * rank));
  auto mode = l.get_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    fail(l, "mode", fmt::format("unknown pad mode '{}'", mode));
  Shape out = in[0];
  for (int i = 0; i < rank; ++i) {
    int64_t b = pads[static_cast<std::size_t>(i)], e = pads[static_cast<std::size_t>(i + rank)];
    if (b < 0 || e < 0) fail(l, "pads", "negative pads are not supported");
    if (mode == "reflect" && (b >= in[0][i] || e >= in[0][i]))
      fail(l, "pads", "reflect pads must be smaller than the dim");
    if ((mode == "edge" || mode == "wrap") && in[0][i] == 0 && (b || e))
      fail(l, "pads", fmt::format("{} pad of an empty dim", mode));
    out[i] += b + e;
  }
  return {out};
}

std::vector<Shape> infer_deconv2(const Layer& l, std::span<const Shape> in) {
  const Deconv2Window g = deconv2_window(l, in[0]);
  fused_activation(l);
  return {Shape{g.n, g.oc, g.oh, g.ow}};
}

std::vector<Shape> infer_resize(const Layer& l, std::span<const Shape> in) {
  expect_rank(l, in[0], 4);
  Shape out = in[0];
  if (l.has("sizes")) {
    auto sizes = ints_of_size(l, "sizes", 4, {});
    for (int d = 0; d < 4; ++d) {
      if (sizes[static_cast<std::size_t>(d)] <= 0) fail(l, "sizes", "sizes must be positive");
      out[d] = sizes[static_cast<std::size_t>(d)];
    }
  } else {
    auto scales = l.get_floats("scales");
    if (scales.size() != 4) fail(l, "scales", fmt::format("expected 4 values, got {}", scales.size()));
    for (int d = 0; d < 4; ++d) {
      const double sc = scales[static_cast<std::size_t>(d)];
      if (!(sc > 0) || !std::isfinite(sc) || sc > 1e6) fail(l, "scales", fmt::format("scale {} is not a positive factor", sc));
      out[d] = static_cast<int64_t>(std::floor(static_cast<double>(in[0][d]) * sc));
      if (out[d] <= 0) fail(l, "scales", fmt::format("scale {} makes dim {} of {} empty", sc, d, in[0].to_string()));
    }
  }
  if (out[0] != in[0][0] || out[1] != in[0][1])
    fail(l, l.has("sizes") ? "sizes" : "scales", "resize changes the batch or channel dim; it resizes H and W only");
  resize_geometry(l, in[0], out);  // checks the modes
  if (requantizes_as_tflite(l)) {
    quant_scale(l, "scale");
    check_tflite_resize(l, in[0][2], out[2]);  // (the taps are the routine's to build, within its memory limit)
    check_tflite_resize(l, in[0][3], out[3]);
  }
  return {out};
}

std::vector<Shape> infer_rnn(const Layer& l, std::span<const Shape> in) {
  const RnnGeometry g = rnn_geometry(l, in);
  const int64_t T = g.seq, B = g.batch, D = g.directions, H = g.hidden;
  Shape y = g.batch_first ? Shape{B, T, D, H} : Shape{T, D, B, H};
  Shape state = g.batch_first ? Shape{B, D, H} : Shape{D, B, H};
  if (l.type != "lstm") return {y, state};
  return {y, state, state};
}

std::vector<Shape> infer_constant(const Layer& l, std::span<const Shape>) {
  return {l.weight("value").shape()};
}

const LayerType kBuiltinTypes[] = {
    {"conv2", 1, 1, infer_conv2},        {"dense", 1, 1, infer_dense},
    {"matmul", 2, 2, infer_matmul},      {"pool2", 1, 1, infer_pool2},
    {"dynamic_quant_dense", 1, 1, infer_dynamic_quant_dense, 1, false, false, nullptr, true},
    {"batchnorm", 1, 1, infer_batchnorm},{"relu", 1, 1, infer_same},
    {"clip", 1, 1, infer_clip},          {"hardswish", 1, 1, infer_same},
    {"hardsigmoid", 1, 1, infer_same},   {"sigmoid", 1, 1, infer_same},
    {"tanh", 1, 1, infer_same},          {"gelu", 1, 1, infer_gelu},
    {"softmax", 1, 1, infer_softmax},    {"layernorm", 1, 1, infer_layernorm},
    {"rms_norm", 1, 1, infer_rms_norm},
    {"rotary", 3, 3, infer_rotary},
    {"attention", 3, 4, infer_attention},
    {"linear_attention", 3, 6, infer_linear_attention, 2},
    {"add", 2, 2, infer_binary},         {"sub", 2, 2, infer_binary},
    {"mul", 2, 2, infer_binary},         {"div", 2, 2, infer_binary},
    {"max", 2, 2, infer_binary},         {"min", 2, 2, infer_binary},
    {"concat", 1, -1, infer_concat},     {"split", 1, 1, infer_split, 0},
    {"reshape", 1, 2, infer_reshape},    {"flatten", 1, 1, infer_flatten},
    {"transpose", 1, 1, infer_transpose},{"pad", 1, 2, infer_pad},  // (input 2: the pads, computed when planned)
    
    {"identity", 1, 1, infer_same},      {"constant", 0, 0, infer_constant},
    {"resize", 1, 1, infer_resize},     {"deconv2", 1, 1, infer_deconv2},
    {"abs", 1, 1, infer_same},           {"neg", 1, 1, infer_same},
    {"sqrt", 1, 1, infer_same},          {"exp", 1, 1, infer_same},
    {"log", 1, 1, infer_same},           {"erf", 1, 1, infer_same},
    {"reciprocal", 1, 1, infer_same},    {"silu", 1, 1, infer_same},
    {"mish", 1, 1, infer_same},          {"softplus", 1, 1, infer_same},          {"leaky_relu", 1, 1, infer_leaky_relu},
    {"prelu", 1, 1, infer_prelu},        {"pow", 1, 2, infer_pow},
    {"reduce", 1, 1, infer_reduce},
    {"compare", 2, 2, infer_compare},    {"logical", 2, 2, infer_compare},
    {"where", 3, 3, infer_where},        {"round", 1, 1, infer_round},
    {"cast", 1, 1, infer_cast},          {"einsum", 1, 8, infer_einsum},
    {"arg_reduce", 1, 1, infer_arg_reduce}, {"trig", 1, 1, infer_trig},
    {"take", 1, 1, infer_take},
    {"gather", 1, 2, infer_gather},      {"gather_elements", 2, 2, infer_gather_elements},
    {"gather_nd", 2, 2, infer_gather_nd},
    {"divmod", 2, 2, infer_divmod},      {"bitwise", 2, 2, infer_bitwise},
    {"cumulative", 1, 1, infer_cumulative}, {"top_k", 1, 2, infer_top_k, 2, false, false, top_k_at_run},
    {"grid_sample", 2, 2, infer_grid_sample},
    {"lstm", 1, 3, infer_rnn, 3},         {"gru", 1, 2, infer_rnn, 2},
    {"rnn", 1, 2, infer_rnn, 2},
    {"group_norm", 1, 1, infer_group_norm},
    {"fake_quant", 1, 1, infer_fake_quant},
    {"dynamic_quantize", 1, 1, infer_dynamic_quantize, 3},
    {"shape_math", 1, -1, infer_shape_math, 1, true},
    {"non_max_suppression", 2, 2, infer_non_max_suppression, 1, false, true},
    {"non_zero", 1, 1, infer_non_zero, 1, false, true},
    {"choose", 3, 3, infer_choose, 1, false, true},
    {"slice", 1, 2, infer_slice},  // (input 2: the starts and ends, computed when planned; see shape_plan)
    {"scatter_elements", 3, 3, infer_scatter_elements}, {"scatter_nd", 3, 3, infer_scatter_nd},
    {"branch", 3, 3, infer_branch, 1, true},
    {"roi_align", 3, 3, infer_roi_align},
    {"unique", 1, 1, infer_unique, 4, false, true},
    {"dft", 1, 1, infer_dft},
    {"col2im", 1, 1, infer_col2im},
    {"loop", 1, -1, infer_loop, 0, false, false, loop_value_shaped},
    {"max_pool_indices", 1, 1, infer_max_pool_indices},
    {"deform_conv", 2, 3, infer_deform_conv},
};

}  // namespace

EinsumSpec einsum_spec(const Layer& l, std::span<const Shape> in) {
  const std::string eq = l.get_string("equation");
  EinsumSpec e;
  const auto arrow = eq.find("->");
  if (arrow == std::string::npos) fail(l, "equation", fmt::format("equation '{}' has no '->'", eq));
  e.output = eq.substr(arrow + 2);
  std::string operand;
  for (char c : eq.substr(0, arrow) + ",") {
    if (c == ',') {
      e.operands.push_back(operand);
      operand.clear();
    } else {
      operand += c;
    }
  }
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (e.operands.size() != in.size())
    fail(l, "equation", fmt::format("equation '{}' has {} operands for {} inputs", eq, e.operands.size(), in.size()));
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::string& op = e.operands[k];
    if (static_cast<int>(op.size()) != in[k].rank())
      fail(l, "equation", fmt::format("operand {} '{}' names {} dims of an input of shape {}", k, op, op.size(), in[k].to_string()));
    for (int d = 0; d < in[k].rank(); ++d) {
      if (!letter(op[static_cast<std::size_t>(d)])) fail(l, "equation", fmt::format("equation '{}' has a character other than letters", eq));
      int64_t& size = e.sizes.try_emplace(op[static_cast<std::size_t>(d)], 1).first->second;
      const int64_t dim = in[k][d];
      if (dim != 1 && size != 1 && dim != size)
        fail(l, "equation", fmt::format("'{}' is {} in one operand and {} in another", op[static_cast<std::size_t>(d)], size, dim));
      if (dim != 1) size = dim;
    }
  }
  for (std::size_t i = 0; i < e.output.size(); ++i) {
    const char c = e.output[i];
    if (!e.sizes.count(c)) fail(l, "equation", fmt::format("output letter '{}' is in no operand", c));
    if (e.output.find(c) != i) fail(l, "equation", fmt::format("output letter '{}' appears twice", c));
  }
  if (e.output.size() > static_cast<std::size_t>(Shape::max_rank)) fail(l, "equation", "the output has too many dims");
  return e;
}

double ResizeAxis::source(int64_t x) const {
  const double xr = static_cast<double>(x), len_in = static_cast<double>(in), len_out = static_cast<double>(out);
  switch (transform) {
    case half_pixel: return (xr + 0.5) / scale - 0.5;
    case half_pixel_symmetric: {
      const double adjustment = len_out / (scale * len_in);
      return len_in / 2 * (1 - adjustment) + (xr + 0.5) / scale - 0.5;
    }
    case pytorch_half_pixel: return out > 1 ? (xr + 0.5) / scale - 0.5 : 0.0;
    case align_corners: {
      // ONNX (its reference, ONNX Runtime) maps through in * scale, not the
      // rounded output size: a 0.6 scale of 4 pixels samples 3/1.4 apart.
      const double resized = scale * len_in;
      return out > 1 && resized != 1.0 ? xr * (len_in - 1) / (resized - 1) : 0.0;
    }
    case asymmetric: return xr / scale;
    case tf_half_pixel_for_nn: return (xr + 0.5) / scale;
    case tf_crop_and_resize:
      return out > 1 ? roi_start * (len_in - 1) + xr * (roi_end - roi_start) * (len_in - 1) / (len_out - 1)
                     : 0.5 * (roi_start + roi_end) * (len_in - 1);
  }
  return 0;
}

int64_t ResizeAxis::nearest(double src) const {
  double r;
  switch (rounding) {
    case floor: r = std::floor(src); break;
    case ceil: r = std::ceil(src); break;
    case round_prefer_ceil: r = std::floor(src + 0.5); break;
    default: r = src - std::floor(src) == 0.5 ? std::floor(src) : std::round(src); break;
  }
  return static_cast<int64_t>(clamped(r));  // in floating point: r may be beyond int64, or NaN
}

void check_tflite_resize(const Layer& l, int64_t in, int64_t out) {
  const std::string mode = l.get_string("coordinate_transformation_mode", "half_pixel");
  if (l.get_string("mode", "nearest") != "linear" || (mode != "half_pixel" && mode != "align_corners" && mode != "asymmetric"))
    fail(l, "requantize", "TensorFlow Lite's int8 resize is bilinear, half_pixel, align_corners or asymmetric");
  if (in < 1 || out < 1 || in >= (int64_t{1} << 24) || out >= (int64_t{1} << 24))
    fail(l, "sizes", fmt::format("sizes {} -> {} (int8 resize: 1 to 2^24)", in, out));
}

TfliteResizeAxis tflite_resize_axis(const Layer& l, int64_t in, int64_t out) {
  check_tflite_resize(l, in, out);
  const std::string mode = l.get_string("coordinate_transformation_mode", "half_pixel");
  const bool align = mode == "align_corners", half = mode == "half_pixel";
  const int64_t adjust = align && out != 1 ? 1 : 0;
  const float scale = static_cast<float>(in - adjust) / static_cast<float>(out - adjust);
  const float offset = half ? 0.5f * scale - 0.5f : 0.0f;
  TfliteResizeAxis a;
  for (int64_t i = 0; i < out; ++i) {
    float src = static_cast<float>(i) * scale + offset;
    if (half) src = std::min(std::max(src, 0.0f), static_cast<float>(in - 1));
    const auto lo = static_cast<int64_t>(src);
    a.lo.push_back(lo);
    a.hi.push_back(std::min(lo + 1, in - 1));
    a.weight.push_back(static_cast<int32_t>(std::lrint((src - static_cast<float>(lo)) * 2048.0f)));
  }
  return a;
}

ResizeGeometry resize_geometry(const Layer& l, const Shape& input, const Shape& output) {
  ResizeGeometry g;
  const std::string mode = l.get_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    fail(l, "mode", fmt::format("mode '{}' is not nearest, linear or cubic", mode));
  g.linear = mode == "linear";
  g.cubic = mode == "cubic";
  g.cubic_a = l.get_float("cubic_coeff_a", -0.75);
  g.exclude_outside = l.get_int("exclude_outside", 0) != 0;
  g.antialias = l.get_int("antialias", 0) != 0 && mode != "nearest";
  g.extrapolation_value = static_cast<float>(l.get_float("extrapolation_value", 0.0));
  static const std::pair<const char*, ResizeAxis::Transform> transforms[] = {
      {"half_pixel", ResizeAxis::half_pixel}, {"half_pixel_symmetric", ResizeAxis::half_pixel_symmetric},
      {"pytorch_half_pixel", ResizeAxis::pytorch_half_pixel}, {"align_corners", ResizeAxis::align_corners},
      {"asymmetric", ResizeAxis::asymmetric}, {"tf_half_pixel_for_nn", ResizeAxis::tf_half_pixel_for_nn},
      {"tf_crop_and_resize", ResizeAxis::tf_crop_and_resize}};
  static const std::pair<const char*, ResizeAxis::Rounding> roundings[] = {
      {"round_prefer_floor", ResizeAxis::round_prefer_floor}, {"round_prefer_ceil", ResizeAxis::round_prefer_ceil},
      {"floor", ResizeAxis::floor}, {"ceil", ResizeAxis::ceil}};
  const std::string t = l.get_string("coordinate_transformation_mode", "half_pixel");
  const std::string r = l.get_string("nearest_mode", "round_prefer_floor");
  auto transform = std::find_if(std::begin(transforms), std::end(transforms), [&](const auto& p) { return t == p.first; });
  auto rounding = std::find_if(std::begin(roundings), std::end(roundings), [&](const auto& p) { return r == p.first; });
  if (transform == std::end(transforms)) fail(l, "coordinate_transformation_mode", fmt::format("unknown mode '{}'", t));
  if (rounding == std::end(roundings)) fail(l, "nearest_mode", fmt::format("unknown mode '{}'", r));
  std::vector<double> roi;
  if (transform->second == ResizeAxis::tf_crop_and_resize) {
    roi = l.get_floats("roi");
    if (roi.size() != 8) fail(l, "roi", fmt::format("expected 8 values (4 starts, 4 ends), got {}", roi.size()));
  }
  const auto scales = l.get_floats("scales", {});
  for (int d : {2, 3}) {
    ResizeAxis& a = d == 2 ? g.h : g.w;
    a.transform = transform->second;
    a.rounding = rounding->second;
    a.in = input[d];
    a.out = output[d];
    a.scale = l.has("sizes") || scales.size() != 4 ? static_cast<double>(a.out) / static_cast<double>(a.in)
                                                   : scales[static_cast<std::size_t>(d)];
    if (!roi.empty()) {
      a.roi_start = roi[static_cast<std::size_t>(d)];
      a.roi_end = roi[static_cast<std::size_t>(d + 4)];
    }
  }
  return g;
}

RnnGeometry rnn_geometry(const Layer& l, std::span<const Shape> in) {
  RnnGeometry g;
  g.gates = l.type == "gru" ? 3 : l.type == "rnn" ? 1 : 4;
  if (in.empty()) fail(l, "inputs", "needs the input sequence");
  expect_rank(l, in[0], 3);
  g.batch_first = l.get_int("layout", 0) != 0;
  g.seq = g.batch_first ? in[0][1] : in[0][0];
  g.batch = g.batch_first ? in[0][0] : in[0][1];
  g.input = in[0][2];
  g.hidden = l.get_int("hidden_size", 0);
  if (g.hidden <= 0 || g.hidden > (int64_t{1} << 24)) fail(l, "hidden_size", fmt::format("hidden_size {} is not a positive size", g.hidden));
  const std::string dir = l.get_string("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    fail(l, "direction", fmt::format("direction '{}' is not forward, reverse or bidirectional", dir));
  g.directions = dir == "bidirectional" ? 2 : 1;
  g.reverse = dir == "reverse";
  g.clip = static_cast<float>(l.get_float("clip", 0.0));
  if (!(g.clip >= 0) || !std::isfinite(g.clip)) fail(l, "clip", fmt::format("clip {} is not a non-negative bound", g.clip));
  g.linear_before_reset = l.type == "gru" && l.get_int("linear_before_reset", 0) != 0;
  g.input_forget = l.type == "lstm" && l.get_int("input_forget", 0) != 0;
  const int64_t D = g.directions, H = g.hidden, G = g.gates;
  auto expect_weight = [&](const char* key, Shape want, bool required) {
    const Blob* w = l.find_weight(key);
    if (!w) {
      if (required) fail(l, key, fmt::format("weight '{}' is missing", key));
      return false;
    }
    if (w->shape() != want) fail(l, key, fmt::format("weight '{}' is {}, expected {}", key, w->shape().to_string(), want.to_string()));
    return true;
  };
  expect_weight("W", Shape{D, G * H, g.input}, true);
  expect_weight("R", Shape{D, G * H, H}, true);
  g.has_bias = expect_weight("B", Shape{D, 2 * G * H}, false);
  g.has_peephole = l.type == "lstm" && expect_weight("P", Shape{D, 3 * H}, false);
  const Shape state = g.batch_first ? Shape{g.batch, D, H} : Shape{D, g.batch, H};
  const int max_inputs = l.type == "lstm" ? 3 : 2;
  if (static_cast<int>(in.size()) > max_inputs) fail(l, "inputs", fmt::format("{} takes at most {} inputs", l.type, max_inputs));
  for (std::size_t k = 1; k < in.size(); ++k)
    if (in[k] != state)
      fail(l, "inputs", fmt::format("initial {} state is {}, expected {}", k == 1 ? "hidden" : "cell", in[k].to_string(), state.to_string()));
  g.has_initial_h = in.size() > 1;
  g.has_initial_c = in.size() > 2;
  return g;
}

/// An 8-bit grid's range (qmin, qmax: uint8's or int8's; absent: from
/// `default_qmin`) and its zero point (the field `zero_point_field`) within it.
static void integer_grid(const Layer& l, const char* zero_point_field, int64_t default_qmin, int32_t& zero_point,
                         int32_t& qmin, int32_t& qmax) {
  const int64_t lo = l.get_int("qmin", default_qmin), hi = l.get_int("qmax", default_qmin + 255);
  if (!((lo == 0 && hi == 255) || (lo == -128 && hi == 127)))
    fail(l, "qmin", fmt::format("range [{}, {}] is neither uint8's [0, 255] nor int8's [-128, 127]", lo, hi));
  const int64_t zp = l.get_int(zero_point_field, 0);
  if (zp < lo || zp > hi) fail(l, zero_point_field, fmt::format("zero point {} lies outside [{}, {}]", zp, lo, hi));
  zero_point = static_cast<int32_t>(zp);
  qmin = static_cast<int32_t>(lo);
  qmax = static_cast<int32_t>(hi);
}

static float quant_scale(const Layer& l, const char* field) {
  const double scale = l.get_float(field, 0.0);
  if (!(scale > 0) || !std::isfinite(scale) || scale > 1e30 || scale < 1e-30)
    fail(l, field, fmt::format("{} {} is not a positive finite number", field, scale));
  return static_cast<float>(scale);
}

FakeQuant fake_quant_params(const Layer& l) {
  FakeQuant q;
  q.scale = quant_scale(l, "scale");
  integer_grid(l, "zero_point", 0, q.zero_point, q.qmin, q.qmax);
  if (requantizes_as_tflite(l)) {
    q.requantize = true;
    q.input_scale = quant_scale(l, "input_scale");
    // As the interpreter: the two float scales' quotient in double.
    const double m = static_cast<double>(q.input_scale) / static_cast<double>(q.scale);
    if (!fixed_point_in_range(m))
      fail(l, "input_scale", fmt::format("requantisation multiplier {} (input_scale / scale) is beyond 2^31", m));
    q.multiplier = fixed_point_multiplier(m);
  }
  return q;
}

bool tflite_add_in_range(float a_scale, float b_scale, float output_scale) {
  const float ra = a_scale / output_scale, rb = b_scale / output_scale;
  auto in_range = [](float r) { return r >= 0x1.0p-10f && r < 0x1.0p+8f; };
  return in_range(ra) && in_range(rb);
}

TfliteAdd tflite_add_params(const Layer& l) {
  TfliteAdd p;
  const std::vector<double> scales = l.get_floats("input_scales");
  if (scales.size() != 2 || !std::all_of(scales.begin(), scales.end(), [](double v) { return v >= 1e-30 && v <= 1e30; }))
    fail(l, "input_scales", "two positive finite scales expected");
  p.a_scale = static_cast<float>(scales[0]);
  p.b_scale = static_cast<float>(scales[1]);
  p.a_inverse = 1.0f / p.a_scale;
  p.b_inverse = 1.0f / p.b_scale;
  p.output_scale = quant_scale(l, "output_scale");
  integer_grid(l, "output_zero_point", -128, p.output_zero_point, p.qmin, p.qmax);
  if (!tflite_add_in_range(p.a_scale, p.b_scale, p.output_scale))
    fail(l, "input_scales", "the scale ratios lie outside XNNPACK's [2^-10, 2^8)");
  // XNNPACK's parameters: the larger ratio's multiplier in [2^20, 2^21).
  const float ra = p.a_scale / p.output_scale, rb = p.b_scale / p.output_scale;
  int e = 0;
  std::frexp(std::max(ra, rb), &e);  // max = m * 2^e, m in [0.5, 1): its floor(log2) is e - 1
  p.shift = 20 - (e - 1);
  p.a_multiplier = static_cast<int32_t>(std::lrint(std::ldexp(ra, p.shift)));
  p.b_multiplier = static_cast<int32_t>(std::lrint(std::ldexp(rb, p.shift)));
  return p;
}

TflitePrelu tflite_prelu_params(const Layer& l) {
  TflitePrelu p;
  p.input_scale = quant_scale(l, "input_scale");
  p.alpha_scale = quant_scale(l, "alpha_scale");
  p.output_scale = quant_scale(l, "output_scale");
  integer_grid(l, "output_zero_point", -128, p.output_zero_point, p.qmin, p.qmax);
  // In float, as the interpreter's PRELU computes them (its other kernels use double).
  const float positive = p.input_scale / p.output_scale, negative = p.input_scale * p.alpha_scale / p.output_scale;
  if (!fixed_point_in_range(positive) || !fixed_point_in_range(negative))
    fail(l, "output_scale", fmt::format("multipliers {} and {} of the scales are not both in (0, 2^31)", positive, negative));
  p.positive = fixed_point_multiplier(positive);
  p.negative = fixed_point_multiplier(negative);
  return p;
}

QuantParams FakeQuant::as_int8() const {
  QuantParams p;
  p.scales = {scale};
  p.zero_points = {zero_point - (qmin == 0 ? 128 : 0)};  // uint8 q is int8 q + 128: the same real values
  return p;
}

void dynamic_quant_params(float min, float max, float& scale, float& zero_point) {
  min = std::min(min, 0.0f);
  max = std::max(max, 0.0f);
  scale = max == min ? 1.0f : (max - min) / 255.0f;
  zero_point = std::nearbyint(std::clamp(-min / scale, 0.0f, 255.0f));
}

// The built-in types, then those registered (a deque: pointers to its
// elements stay valid while plugins add more).
struct LayerTypeTable {
  std::shared_mutex mutex;
  std::deque<LayerType> types{std::begin(kBuiltinTypes), std::end(kBuiltinTypes)};
  std::deque<std::string> names;  // the registered types' names, which their string_views view
  static LayerTypeTable& instance() {
    static LayerTypeTable table;
    return table;
  }
};

SliceRange slice_range(int64_t start, int64_t end, int64_t step, int64_t dim) {
  // ONNX clamping: negatives count from the end, then into [0, dim] ([-1, dim-1] going backwards).
  if (start < 0) start = std::max(start, -dim) + dim;
  if (end < 0) end = std::max(end, -dim - 1) + dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
  }
  // (no overflow for any step, INT64_MIN included: one element where the step passes the dim)
  const int64_t span = step > 0 ? end - start : start - end;
  const int64_t size = step > 0 ? step : step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step;
  return {start, span <= 0 ? 0 : 1 + (span - 1) / size};
}

/// Col2Im's geometry: the number of block positions along each spatial dim.
std::vector<int64_t> col2im_positions(const Layer& l, std::size_t r) {
  const auto image = l.get_ints("image_shape"), block = l.get_ints("block_shape");
  const auto dil = ints_of_size(l, "dilations", r, std::vector<int64_t>(r, 1));
  const auto stride = ints_of_size(l, "strides", r, std::vector<int64_t>(r, 1));
  const auto pads = ints_of_size(l, "pads", 2 * r, std::vector<int64_t>(2 * r, 0));
  std::vector<int64_t> n(r);
  for (std::size_t d = 0; d < r; ++d) {
    if (image[d] < 1 || image[d] > kMaxSpatial) fail(l, "image_shape", fmt::format("dim {} is outside 1..{}", image[d], kMaxSpatial));
    if (block[d] < 1 || block[d] > kMaxWindowParam) fail(l, "block_shape", fmt::format("dim {} is outside 1..{}", block[d], kMaxWindowParam));
    if (dil[d] < 1 || dil[d] > kMaxWindowParam) fail(l, "dilations", fmt::format("{} is outside 1..{}", dil[d], kMaxWindowParam));
    if (stride[d] < 1 || stride[d] > kMaxWindowParam) fail(l, "strides", fmt::format("{} is outside 1..{}", stride[d], kMaxWindowParam));
    if (pads[d] < 0 || pads[d + r] < 0 || pads[d] > kMaxWindowParam || pads[d + r] > kMaxWindowParam)
      fail(l, "pads", "a pad is outside 0..65536");
    const int64_t span = image[d] + pads[d] + pads[d + r] - dil[d] * (block[d] - 1) - 1;
    if (span < 0) fail(l, "block_shape", fmt::format("the block does not fit the padded image in dim {}", d));
    n[d] = span / stride[d] + 1;
  }
  return n;
}

LoopPorts loop_ports(const Layer& l, std::size_t inputs) {
  LoopPorts p;
  p.trip_count_input = l.get_int("m_input", 0) != 0;
  p.first_carried = p.trip_count_input ? 2 : 1;
  const int64_t carried = l.get_int("carried", 0), scans = l.get_int("scan_outputs", 0);
  if (carried < 0 || static_cast<std::size_t>(carried) > inputs - std::min(inputs, p.first_carried))
    fail(l, "carried", fmt::format("{} carried values, {} inputs", carried, inputs));
  if (scans < 0 || scans > 4096) fail(l, "scan_outputs", fmt::format("{} scan outputs", scans));
  if (inputs < p.first_carried) fail(l, "inputs", fmt::format("{} inputs, at least {}", inputs, p.first_carried));
  p.carried = static_cast<std::size_t>(carried);
  p.scan_outputs = static_cast<std::size_t>(scans);
  const int64_t sliced = l.get_int("scan_inputs", 0);
  if (sliced < 0 || static_cast<std::size_t>(sliced) > inputs - p.first_carried - p.carried)
    fail(l, "scan_inputs", fmt::format("{} scan inputs after {} carried values of {} inputs", sliced, carried, inputs));
  p.scan_inputs = static_cast<std::size_t>(sliced);
  return p;
}

Graph loop_body(const Layer& l) {
  const Blob& bytes = l.weight("body");
  if (bytes.dtype() != DType::uint8) fail(l, "body", "the body is not the bytes of a .dnn graph (uint8)");
  Graph body;
  try {
    body = read_dnn_bytes(bytes.data(), bytes.byte_size(), l.name + "/body").graph;
    sort_topologically(body);
  } catch (const Error& e) {
    fail(l, "body", e.message());
  }
  return body;
}

bool has_integer_weight(const Layer& layer) {
  const LayerType* t = find_layer_type(layer.type);
  return t && t->integer_weight;
}

bool is_value_shaped(const Layer& layer) {
  const LayerType* t = find_layer_type(layer.type);
  return t && (t->value_shaped || (t->value_shaped_when && t->value_shaped_when(layer)));
}

const LayerType* find_layer_type(std::string_view name) {
  auto& table = LayerTypeTable::instance();
  std::shared_lock lock(table.mutex);
  for (const auto& t : table.types)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<LayerType> layer_types() {
  auto& table = LayerTypeTable::instance();
  std::shared_lock lock(table.mutex);
  return {table.types.begin(), table.types.end()};
}

}  // namespace softneuro::core

namespace softneuro {

void register_layer_type(const LayerTypeSpec& spec) {
  if (spec.name.empty()) throw Error("register_layer_type: the type has no name");
  if (!spec.infer) throw Error(fmt::format("register_layer_type: layer type '{}' has no shape inference", spec.name));
  if (spec.min_inputs < 0 || (spec.max_inputs >= 0 && spec.max_inputs < spec.min_inputs))
    throw Error(fmt::format("register_layer_type: layer type '{}' takes {} to {} inputs", spec.name, spec.min_inputs,
                            spec.max_inputs));
  auto& table = core::LayerTypeTable::instance();
  std::unique_lock lock(table.mutex);
  for (const auto& t : table.types)
    if (t.name == spec.name) throw Error(fmt::format("register_layer_type: layer type '{}' is already registered", spec.name));
  table.names.push_back(spec.name);
  table.types.push_back({table.names.back(), spec.min_inputs, spec.max_inputs, spec.infer});
}

}  // namespace softneuro

namespace softneuro::core {

std::vector<Shape> infer_layer_shapes(const Layer& layer, std::span<const Shape> inputs) {
  const LayerType* t = find_layer_type(layer.type);
  if (!t) throw Error(fmt::format("unknown layer type '{}'", layer.type), {}, layer.name, "type");
  auto n = static_cast<int>(inputs.size());
  if (n < t->min_inputs || (t->max_inputs >= 0 && n > t->max_inputs))
    throw Error(fmt::format("{} takes {}{} inputs, got {}", layer.type, t->min_inputs,
                            t->max_inputs == t->min_inputs ? "" : (t->max_inputs < 0 ? " or more" : fmt::format(" to {}", t->max_inputs)), n),
                {}, layer.name, "inputs");
  const std::size_t want_outputs = t->outputs > 0 ? static_cast<std::size_t>(t->outputs) : layer.outputs.size();
  if (layer.outputs.size() != want_outputs || want_outputs == 0)
    throw Error(fmt::format("{} has {} outputs, expected {}", layer.type, layer.outputs.size(),
                            t->outputs > 0 ? std::to_string(t->outputs) : std::string("at least 1")),
                {}, layer.name, "outputs");
  try {
    return t->infer(layer, inputs);
  } catch (const Error& e) {
    throw e.with_layer(layer.name);
  }
}

namespace {
/// Strides, dilations, pads and kernel sizes within [lo, kMaxWindowParam], the input's spatial size within kMaxSpatial.
void check_window_limits(const Layer& l, const Shape& x, const std::vector<int64_t>& strides,
                         const std::vector<int64_t>& pads, const std::vector<int64_t>& dilations, int64_t kh, int64_t kw,
                         const char* kernel_field, int64_t kernel_max = kMaxWindowParam) {
  auto within = [&](const std::vector<int64_t>& v, const char* field, int64_t lo, int64_t hi) {
    for (int64_t x : v)
      if (x < lo || x > hi) fail(l, field, fmt::format("{} must be between {} and {}, got {}", field, lo, hi, x));
  };
  within(strides, "strides", 1, kMaxWindowParam);
  within(dilations, "dilations", 1, kMaxWindowParam);
  within(pads, "pads", 0, kMaxWindowParam);
  within({kh, kw}, kernel_field, 1, kernel_max);
  if (x[2] > kMaxSpatial || x[3] > kMaxSpatial)
    fail(l, "inputs", fmt::format("input {} is larger than {} in height or width", x.to_string(), kMaxSpatial));
}

Window2d window_common(const Layer& l, const Shape& x, int64_t kh, int64_t kw, bool ceil_mode) {
  expect_rank(l, x, 4);
  Window2d g{};
  g.n = x[0]; g.c = x[1]; g.h = x[2]; g.w = x[3];
  g.kh = kh; g.kw = kw;
  auto s = ints_of_size(l, "strides", 2, {1, 1});
  auto p = ints_of_size(l, "pads", 4, {0, 0, 0, 0});
  auto d = ints_of_size(l, "dilations", 2, {1, 1});
  g.sh = s[0]; g.sw = s[1];
  g.pt = p[0]; g.pl = p[1]; g.pb = p[2]; g.pr = p[3];
  g.dh = d[0]; g.dw = d[1];
  // (A global pool's window is its whole input.)
  check_window_limits(l, x, s, p, d, kh, kw, l.type == "conv2" ? "weight" : "kernel",
                      l.get_int("global", 0) ? kMaxSpatial : kMaxWindowParam);
  int64_t eh = g.h + g.pt + g.pb - g.dh * (kh - 1) - 1;
  int64_t ew = g.w + g.pl + g.pr - g.dw * (kw - 1) - 1;
  if (eh < 0 || ew < 0)
    fail(l, "kernel", fmt::format("kernel {}x{} larger than padded input {}", kh, kw, x.to_string()));
  if (ceil_mode) {
    g.oh = (eh + g.sh - 1) / g.sh + 1;
    g.ow = (ew + g.sw - 1) / g.sw + 1;
    // A last window starting in the bottom/right padding is dropped (as ONNX/PyTorch do).
    if ((g.oh - 1) * g.sh >= g.h + g.pt) --g.oh;
    if ((g.ow - 1) * g.sw >= g.w + g.pl) --g.ow;
  } else {
    g.oh = eh / g.sh + 1;
    g.ow = ew / g.sw + 1;
    // A stride past the padded input gives one position whatever its value:
    // the shortest such stride, for every routine (oneDNN 2.6's AMX int8
    // convolution wrote out of bounds at a stride of 255 over 16 columns).
    if (g.oh == 1) g.sh = std::min(g.sh, eh + 1);
    if (g.ow == 1) g.sw = std::min(g.sw, ew + 1);
  }
  return g;
}
}  // namespace

Window2d conv2_window(const Layer& l, const Shape& x) {
  const Shape& w = weight_shape(l, "weight");
  if (w.rank() != 4) fail(l, "weight", fmt::format("weight has shape {}, expected [O,C/group,KH,KW]", w.to_string()));
  Window2d g = window_common(l, x, w[2], w[3], false);
  g.group = l.get_int("group", 1);
  g.oc = w[0];
  if (g.group < 1) fail(l, "group", "group must be >= 1");
  if (g.c % g.group != 0 || g.oc % g.group != 0)
    fail(l, "group", fmt::format("group {} does not divide input channels {} and output channels {}", g.group, g.c, g.oc));
  if (w[1] * g.group != g.c)
    fail(l, "weight", fmt::format("weight {} expects {} input channels, input {} has {}", w.to_string(),
                                  w[1] * g.group, x.to_string(), g.c));
  check_optional_bias(l, g.oc);
  return g;
}

Deconv2Window deconv2_window(const Layer& l, const Shape& x) {
  expect_rank(l, x, 4);
  const Shape& w = weight_shape(l, "weight");
  if (w.rank() != 4) fail(l, "weight", fmt::format("weight has shape {}, expected [C,O/group,KH,KW]", w.to_string()));
  Deconv2Window g{};
  g.n = x[0]; g.c = x[1]; g.h = x[2]; g.w = x[3];
  g.kh = w[2]; g.kw = w[3];
  auto s = ints_of_size(l, "strides", 2, {1, 1});
  auto p = ints_of_size(l, "pads", 4, {0, 0, 0, 0});
  auto d = ints_of_size(l, "dilations", 2, {1, 1});
  auto op = ints_of_size(l, "output_padding", 2, {0, 0});
  g.sh = s[0]; g.sw = s[1];
  g.pt = p[0]; g.pl = p[1]; g.pb = p[2]; g.pr = p[3];
  g.dh = d[0]; g.dw = d[1];
  g.oph = op[0]; g.opw = op[1];
  g.group = l.get_int("group", 1);
  check_window_limits(l, x, s, p, d, g.kh, g.kw, "weight");
  if (g.oph < 0 || g.opw < 0 || (g.oph >= g.sh && g.oph >= g.dh) || (g.opw >= g.sw && g.opw >= g.dw))
    fail(l, "output_padding", fmt::format("output_padding [{},{}] must be below the stride or the dilation", g.oph, g.opw));
  if (g.group < 1) fail(l, "group", "group must be >= 1");
  if (w[0] != g.c) fail(l, "weight", fmt::format("weight {} expects {} input channels, input {} has {}", w.to_string(), w[0], x.to_string(), g.c));
  if (g.c % g.group != 0) fail(l, "group", fmt::format("group {} does not divide input channels {}", g.group, g.c));
  g.oc = w[1] * g.group;
  g.oh = g.sh * (g.h - 1) + g.oph + g.dh * (g.kh - 1) + 1 - g.pt - g.pb;
  g.ow = g.sw * (g.w - 1) + g.opw + g.dw * (g.kw - 1) + 1 - g.pl - g.pr;
  if (g.oh < 1 || g.ow < 1) fail(l, "pads", fmt::format("pads leave an empty output for input {}", x.to_string()));
  check_optional_bias(l, g.oc);
  return g;
}

Window2d pool2_window(const Layer& l, const Shape& x) {
  expect_rank(l, x, 4);
  if (l.get_int("global", 0)) {
    Window2d g = window_common(l, x, x[2], x[3], false);
    g.oc = g.c;
    return g;
  }
  auto k = ints_of_size(l, "kernel", 2, {});
  Window2d g = window_common(l, x, k[0], k[1], l.get_int("ceil_mode", 0) != 0);
  g.oc = g.c;
  return g;
}

Activation fused_activation(const Layer& l, bool with_affine, bool with_gelu) {
  Activation a;
  a.scale = static_cast<float>(l.get_float("act_scale", 1.0));
  a.shift = static_cast<float>(l.get_float("act_shift", 0.0));
  if (!std::isfinite(a.scale) || !std::isfinite(a.shift)) fail(l, "act_scale", "act_scale and act_shift must be finite");
  if (a.affine() && !with_affine)
    fail(l, "act_scale", "this routine does not apply an affine after the fused activation");
  auto kind = l.get_string("act", "none");
  if (kind == "none") a.kind = Activation::none;
  else if (kind == "relu") a.kind = Activation::relu;
  else if (kind == "clip") {
    a.kind = Activation::clip;
    a.min = static_cast<float>(l.get_float("act_min", -std::numeric_limits<double>::infinity()));
    a.max = static_cast<float>(l.get_float("act_max", std::numeric_limits<double>::infinity()));
    if (a.min > a.max) fail(l, "act_min", "act_min > act_max");
  } else if (kind == "hardswish") a.kind = Activation::hardswish;
  else if (kind == "hardsigmoid") {
    a.kind = Activation::hardsigmoid;
    a.alpha = static_cast<float>(l.get_float("act_alpha", 0.2));
    a.beta = static_cast<float>(l.get_float("act_beta", 0.5));
  } else if (kind == "sigmoid") a.kind = Activation::sigmoid;
  else if (kind == "silu") a.kind = Activation::silu;
  else if (kind == "gelu") {
    const auto form = l.get_string("act_approximate", "none");
    if (form != "none" && form != "tanh") fail(l, "act_approximate", fmt::format("unknown gelu approximation '{}'", form));
    if (!with_gelu) fail(l, "act", fmt::format("a fused gelu is not applied here ({} layer; dense layers' float32 routines apply it)", l.type));
    a.kind = form == "tanh" ? Activation::gelu_tanh : Activation::gelu;
  } else fail(l, "act", fmt::format("unknown fused activation '{}'", kind));
  return a;
}

namespace {
float activation_alone(const Activation& a, float x) {
  switch (a.kind) {
    case Activation::none: return x;
    case Activation::relu: return x < 0 ? 0.0f : x;  // NaN stays NaN
    case Activation::clip: return std::min(std::max(x, a.min), a.max);
    case Activation::hardswish: return x * std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f;
    case Activation::hardsigmoid: return std::min(std::max(a.alpha * x + a.beta, 0.0f), 1.0f);
    case Activation::sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case Activation::silu: return x / (1.0f + std::exp(-x));
    case Activation::gelu: return static_cast<float>(0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))));
    case Activation::gelu_tanh: {
      const double v = x, k = std::sqrt(2.0 / std::numbers::pi);
      return static_cast<float>(0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))));
    }
  }
  return x;
}
}  // namespace

float apply_activation(const Activation& a, float x) {
  const float y = activation_alone(a, x);
  return a.affine() ? y * a.scale + a.shift : y;
}

Shape broadcast_shapes(const Layer& l, const Shape& a, const Shape& b) {
  int rank = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < rank; ++i) {
    int ia = i - (rank - a.rank()), ib = i - (rank - b.rank());
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      fail(l, "input", fmt::format("shapes {} and {} do not broadcast", a.to_string(), b.to_string()));
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

std::vector<bool> reduced_axes(const Layer& l, const Shape& input) {
  std::vector<bool> reduced(static_cast<std::size_t>(input.rank()), false);
  const auto axes = l.get_ints("axes", {});
  if (axes.empty()) reduced.assign(reduced.size(), true);  // ONNX: no axes reduces every axis
  for (int64_t a : axes) {
    const auto d = static_cast<std::size_t>(normalize_axis(l, "axes", a, input.rank()));
    if (reduced[d]) fail_field(l, "axes", fmt::format("axis {} is listed twice", a));
    reduced[d] = true;
  }
  return reduced;
}

int normalize_axis(const Layer& l, const char* field, int64_t axis, int rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) fail(l, field, fmt::format("axis {} out of range for rank {}", axis, rank));
  return static_cast<int>(a);
}

namespace {
std::array<int, 4> attention_perm(const Layer& l, const char* key) {
  const auto p = ints_of_size(l, key, 4, {0, 1, 2, 3});
  std::array<int, 4> out{};
  std::array<bool, 4> seen{};
  for (int i = 0; i < 4; ++i) {
    if (p[i] < 0 || p[i] > 3 || seen[p[i]]) fail_field(l, key, fmt::format("{} is not a permutation of 0..3", fmt::join(p, ",")));
    seen[p[i]] = true;
    out[i] = static_cast<int>(p[i]);
  }
  return out;
}

/// Row-major strides of a rank-4 shape.
std::array<int64_t, 4> strides4(const Shape& s) {
  std::array<int64_t, 4> st{};
  int64_t step = 1;
  for (int i = 3; i >= 0; --i) {
    st[i] = step;
    step *= s[i];
  }
  return st;
}
}  // namespace

AttentionGeometry attention_geometry(const Layer& l, std::span<const Shape> in) {
  if (in.size() < 3 || in.size() > 4) fail_field(l, "input", "attention takes q, k, v and an optional mask");
  const char* names[] = {"q", "k", "v"};
  const char* perms[] = {"q_perm", "k_perm", "v_perm"};
  std::array<std::array<int64_t, 4>, 3> dims{}, strides{};
  for (int t = 0; t < 3; ++t) {
    if (in[t].rank() != 4) fail_field(l, names[t], fmt::format("attention's {} must have rank 4, got {}", names[t], in[t].to_string()));
    const auto p = attention_perm(l, perms[t]);
    const auto st = strides4(in[t]);
    for (int i = 0; i < 4; ++i) {
      dims[t][i] = in[t][p[i]];
      strides[t][i] = st[p[i]];
    }
  }
  AttentionGeometry g;
  g.b = dims[0][0];
  g.h = dims[0][1];
  g.sq = dims[0][2];
  g.d = dims[0][3];
  g.sk = dims[1][2];
  g.dv = dims[2][3];
  g.q = strides[0];
  g.k = strides[1];
  g.v = strides[2];
  if (dims[1][3] != g.d)
    fail_field(l, "k", fmt::format("k's feature size {} differs from q's {}", dims[1][3], g.d));
  if (dims[2][2] != g.sk)
    fail_field(l, "v", fmt::format("v has {} positions, k {}", dims[2][2], g.sk));
  for (int t = 1; t < 3; ++t)
    for (int i = 0; i < 2; ++i) {
      if (dims[t][i] == dims[0][i]) continue;
      if (dims[t][i] == 1) {
        (t == 1 ? g.k : g.v)[i] = 0;
      } else if (i == 1 && dims[t][1] > 1 && g.h % dims[t][1] == 0) {
        (t == 1 ? g.k_group : g.v_group) = g.h / dims[t][1];
      } else {
        fail_field(l, names[t], fmt::format("{} {} does not broadcast to q {} (batch; heads: as many, one, or a divisor)",
                                            names[t], in[t].to_string(), in[0].to_string()));
      }
    }
  if (in.size() == 4) {
    const Shape& m = in[3];
    if (m.rank() > 4) fail_field(l, "mask", fmt::format("attention's mask has rank {} (at most 4)", m.rank()));
    const std::array<int64_t, 4> scores{g.b, g.h, g.sq, g.sk};
    int64_t step = 1;
    for (int i = 3; i >= 0; --i) {
      const int md = i - (4 - m.rank());
      const int64_t size = md >= 0 ? m[md] : 1;
      if (size != scores[i] && size != 1)
        fail_field(l, "mask", fmt::format("mask {} does not broadcast to the scores [{},{},{},{}]", m.to_string(), g.b, g.h, g.sq, g.sk));
      g.mask[i] = size == 1 ? 0 : step;
      step *= size;
    }
    g.has_mask = true;
  }
  const auto op = attention_perm(l, "out_perm");
  const std::array<int64_t, 4> canon{g.b, g.h, g.sq, g.dv};
  Shape out;
  for (int i = 0; i < 4; ++i) {
    g.out_shape[i] = canon[op[i]];
    out.push_back(canon[op[i]]);
  }
  const auto so = strides4(out);
  for (int i = 0; i < 4; ++i) g.out[op[i]] = so[i];
  g.scale = static_cast<float>(l.get_float("scale", 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(g.d, 1)))));
  if (!std::isfinite(g.scale)) fail_field(l, "scale", "attention's scale is not finite");
  g.causal = l.get_int("causal", 0) != 0;
  const std::string align = l.get_string("causal_align", "end");
  if (align != "end" && align != "start") fail_field(l, "causal_align", fmt::format("causal_align '{}' is not end or start", align));
  g.causal_offset = align == "end" ? g.sk - g.sq : 0;
  const std::string rows = l.get_string("masked_rows", "nan");
  if (rows != "nan" && rows != "zero") fail_field(l, "masked_rows", fmt::format("masked_rows '{}' is not nan or zero", rows));
  g.zero_masked_rows = rows == "zero";
  return g;
}

}  // namespace softneuro::core
