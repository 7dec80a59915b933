// ONNX import: Patterns fused before translation: GELU (erf and tanh forms), HardSwish, decomposed LayerNormalization.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

void Importer::find_patterns() {
  fused_of_.assign(nodes_.size(), -1);
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    if (fused_of_[static_cast<std::size_t>(i)] >= 0) continue;
    std::optional<Fused> f;
    if (is(i, "Erf")) f = match_gelu(i);
    else if (is(i, "Tanh")) f = match_gelu_tanh(i);
    else if (is(i, "ReduceMean")) {
      f = match_layernorm(i);
      if (!f) f = match_rms_norm(i);
    }
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

/// RMSNorm as exporters write it (LLaMA, Mistral, T5):
///   ms = ReduceMean(Pow(x, 2) or Mul(x, x)); r = Sqrt(ms + eps);
///   y = x / r, or x * (1 / r) (Div(1, r) or Reciprocal(r), either operand order)
///   [Cast to float] [y = y * scale] (a constant).
std::optional<Fused> Importer::match_rms_norm(int r) {
  const Node rn = node(r);
  if (rn.get_int("keepdims", 1) != 1) return std::nullopt;
  std::vector<int64_t> axes = rn.get_ints("axes", std::vector<int64_t>{});
  if (axes.empty() && at(r).input_size() == 2 && constant(input_of(r, 1))) axes = to_ints(*constant(input_of(r, 1)));
  if (axes.empty()) return std::nullopt;
  const int p = producer(input_of(r, 0));
  if (sole_consumer(input_of(r, 0)) != r || p < 0 || at(p).input_size() != 2) return std::nullopt;
  std::string x;
  if (is(p, "Pow") && scalar(input_of(p, 1)) == 2.0) x = input_of(p, 0);
  else if (is(p, "Mul") && input_of(p, 0) == input_of(p, 1)) x = input_of(p, 0);
  if (x.empty()) return std::nullopt;
  const int ad = sole_consumer(output_of(r, 0));
  if (!is(ad, "Add")) return std::nullopt;
  const auto eps = scalar(other_input(ad, output_of(r, 0)));
  if (!eps || *eps < 0) return std::nullopt;
  const int sq = sole_consumer(output_of(ad, 0));
  if (!is(sq, "Sqrt")) return std::nullopt;
  const std::string rms = output_of(sq, 0);
  const int d = sole_consumer(rms);
  Fused f{Fused::rms_norm, {p, r, ad, sq, d}, x, {}, axes, *eps, {}, {}};
  if (is(d, "Div") && input_of(d, 0) == x && input_of(d, 1) == rms) {
    f.y = output_of(d, 0);
  } else {
    const bool inverse = (is(d, "Div") && input_of(d, 1) == rms && scalar(input_of(d, 0)) == 1.0) || is(d, "Reciprocal");
    const int m = inverse ? sole_consumer(output_of(d, 0)) : -1;
    if (!is(m, "Mul") || other_input(m, output_of(d, 0)) != x) return std::nullopt;
    f.members.push_back(m);
    f.y = output_of(m, 0);
  }
  // (HF casts to float32 and back around the norm: a Cast to float is nothing here.)
  if (int c = sole_consumer(f.y); is(c, "Cast") && node(c).get_int("to", 0) == onnx::TensorProto::FLOAT) {
    if (int mu = sole_consumer(output_of(c, 0)); is(mu, "Mul") && constant(other_input(mu, output_of(c, 0)))) {
      f.members.push_back(c);
      f.y = output_of(c, 0);
    }
  }
  if (int mu = sole_consumer(f.y); is(mu, "Mul")) {
    const std::string c = other_input(mu, f.y);
    if (!c.empty() && constant(c)) {
      f.members.push_back(mu);
      f.scale = c;
      f.y = output_of(mu, 0);
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
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  bool trailing = true;
  for (std::size_t i = 0; i < axes.size(); ++i) trailing = trailing && axes[i] == rank - static_cast<int64_t>(axes.size() - i);
  if (!trailing) return emit_norm_moved(f, n, xs, axes);
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
  if (f.kind == Fused::rms_norm) {
    const std::string out = scale ? f.y : fresh_blob(f.y + "/norm");
    Layer l = make("rms_norm", n.name, {as_blob(n, f.x)}, {out});
    l.params["axis"] = int64_t{axis};
    l.params["epsilon"] = f.epsilon;
    l.weights["scale"] = scale ? *scale : ones;
    add(std::move(l));
    if (!scale) add(make("mul", n.name + "/scale", {out, as_blob(n, f.scale)}, {f.y}));
    return;
  }
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

/// A decomposed LayerNormalization or RMSNorm over axes that are not the last
/// ones (ConvNeXt's channels-first norm: x.mean(1) of NCHW): transposed so
/// that they are, normalised, transposed back; its scale and bias are layers after.
void Importer::emit_norm_moved(const Fused& f, const Node& n, const Shape& xs, const std::vector<int64_t>& axes) {
  const int rank = xs.rank();
  std::vector<int64_t> perm, inverse(static_cast<std::size_t>(rank));
  for (int d = 0; d < rank; ++d)
    if (!std::binary_search(axes.begin(), axes.end(), d)) perm.push_back(d);
  const int axis = static_cast<int>(perm.size());
  perm.insert(perm.end(), axes.begin(), axes.end());
  for (int d = 0; d < rank; ++d) inverse[static_cast<std::size_t>(perm[static_cast<std::size_t>(d)])] = d;
  Shape norm;
  for (int64_t a : axes) norm.push_back(xs[static_cast<int>(a)]);
  const std::string moved = fresh_blob(f.y + "/moved"), normed = fresh_blob(f.y + "/moved_norm");
  Layer to = make("transpose", n.name + "/to_last", {as_blob(n, f.x)}, {moved});
  to.params["perm"] = perm;
  add(std::move(to));
  Layer l = make(f.kind == Fused::rms_norm ? "rms_norm" : "layernorm", n.name, {moved}, {normed});
  l.params["axis"] = int64_t{axis};
  l.params["epsilon"] = f.epsilon;
  l.weights["scale"] = expanded(float_blob({}, {1.0f}), norm);
  add(std::move(l));
  std::string cur = f.scale.empty() && f.bias.empty() ? f.y : fresh_blob(f.y + "/norm");
  Layer back = make("transpose", n.name + "/back", {normed}, {cur});
  back.params["perm"] = inverse;
  add(std::move(back));
  if (!f.scale.empty()) {
    const std::string next = f.bias.empty() ? f.y : fresh_blob(f.y + "/scaled");
    add(make("mul", n.name + "/scale", {cur, as_blob(n, f.scale)}, {next}));
    cur = next;
  }
  if (!f.bias.empty()) add(make("add", n.name + "/bias", {cur, as_blob(n, f.bias)}, {f.y}));
}

}  // namespace onnx_import
}  // namespace softneuro
