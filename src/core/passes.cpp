#include "core/passes.hpp"

#include "core/aligned_memory.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/weight_quant.hpp"
#include "core/registry.hpp"
#include "core/tensor_math.hpp"
#include "core/thread_pool.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

namespace softneuro::core {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

void erase_flagged(Graph& g, const std::vector<bool>& removed) {
  std::size_t w = 0;
  for (std::size_t i = 0; i < g.layers.size(); ++i)
    if (!removed[i]) {
      if (w != i) g.layers[w] = std::move(g.layers[i]);
      ++w;
    }
  g.layers.resize(w);
}

namespace {

/// Every read of blob `from` becomes a read of `to`.
void rename_reads(Graph& g, const std::string& from, const std::string& to) {
  for (auto& l : g.layers)
    for (auto& in : l.inputs)
      if (in == from) in = to;
}

/// A float32 CPU blob in plain layout: what the passes compute on.
bool plain_float(const Blob& b) {
  return b.dtype() == DType::float32 && b.layout() == Layout::nchw && b.device() == Device::cpu &&
         (b.numel() == 0 || b.data() != nullptr);
}

bool is_conv_or_dense(const Layer& l) { return l.type == "conv2" || l.type == "dense"; }
/// A layer with a weight per output channel, a bias and a fused activation
/// that every routine of it applies: conv2, dense and deconv2 (a detector's
/// upsampling head: ConvTranspose, then its bias, batchnorm and relu or sigmoid).
bool has_channel_epilogue(const Layer& l) { return is_conv_or_dense(l) || l.type == "deconv2"; }
/// A producer that can take a fused activation of this kind: conv2, dense and
/// deconv2 take all; add takes relu and clip (every add routine applies them).
bool takes_activation(const Layer& p, const std::string& act) {
  return has_channel_epilogue(p) || p.type == "dynamic_quant_dense" || (p.type == "add" && (act == "relu" || act == "clip"));
}
bool has_no_activation(const Layer& l) { return l.get_string("act", "none") == "none"; }

/// What absorb_into_producers tells a rule about the graph.
struct Context {
  const std::map<std::string, Shape>& shapes;
  const std::unordered_map<std::string, const Blob*>& constants;  ///< outputs of constant layers
};

/// The rule of one "producer absorbs its consumer" pass: given the layer P
/// producing input `input` of consumer C, either changes P so that it computes
/// C's output too (and returns true), or leaves P untouched (returns false).
using AbsorbRule = std::function<bool(Layer& producer, const Layer& consumer, std::size_t input, const Context&)>;

/// The shared skeleton of fold_batchnorm, fold_bias_add and fuse_activations:
/// for each layer of `consumer_type`, when one of its inputs is produced by a
/// single-output layer, read by nothing else and not a net output, `rule` may
/// absorb the consumer into the producer; the producer then writes the
/// consumer's output and the consumer goes. One sweep in topological order
/// handles chains (conv2 -> batchnorm -> relu) since the producer map is kept current.
/// Who makes each blob, how many layers read it, the constant layers' values
/// and the net's outputs, of a graph in topological order.
struct GraphIndex {
  std::unordered_map<std::string, std::size_t> producer;
  std::unordered_map<std::string, int> reads;
  std::unordered_map<std::string, const Blob*> constants;
  std::set<std::string> net_outputs;
  explicit GraphIndex(const Graph& g) : net_outputs(g.outputs.begin(), g.outputs.end()) {
    for (std::size_t i = 0; i < g.layers.size(); ++i) {
      const Layer& l = g.layers[i];
      for (const auto& o : l.outputs) producer[o] = i;
      for (const auto& in : l.inputs) ++reads[in];
      if (l.type == "constant" && l.outputs.size() == 1)
        if (const Blob* v = l.find_weight("value")) constants[l.outputs[0]] = v;
    }
  }
};

int absorb_into_producers(Graph& g, std::string_view consumer_type, const AbsorbRule& rule) {
  sort_topologically(g);
  const auto shapes = infer_shapes(g);
  GraphIndex index(g);
  const Context ctx{shapes, index.constants};

  std::vector<bool> removed(g.layers.size());
  int count = 0;
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    const Layer& c = g.layers[i];
    if (c.type != consumer_type || c.outputs.size() != 1) continue;
    for (std::size_t k = 0; k < c.inputs.size(); ++k) {
      const std::string& x = c.inputs[k];
      auto it = index.producer.find(x);
      if (it == index.producer.end() || index.reads[x] != 1 || index.net_outputs.count(x)) continue;
      Layer& p = g.layers[it->second];
      if (p.outputs.size() != 1 || !rule(p, c, k, ctx)) continue;
      p.outputs[0] = c.outputs[0];
      index.producer[c.outputs[0]] = it->second;
      removed[i] = true;
      ++count;
      break;
    }
  }
  erase_flagged(g, removed);
  return count;
}

/// Output channels of a conv2/dense (the first dim of its weight) or a
/// deconv2 (weight [C, O/group, KH, KW], ONNX's ConvTranspose).
int64_t output_channels(const Layer& l) {
  const Shape& w = l.weight("weight").shape();
  return l.type == "deconv2" ? w[1] * l.get_int("group", 1) : w[0];
}

/// Layer `l`'s weight with each output channel's values multiplied by its
/// factor: a conv2/dense's rows; a deconv2's [C, O/group, KH, KW] per group,
/// output channel g * O/group + o.
Blob scale_output_channels(const Layer& l, const std::vector<double>& factors) {
  const Blob& w = l.weight("weight");
  Blob out = Blob::allocate(w.shape());
  const float* src = w.data_as<float>();
  float* dst = out.data_as<float>();
  const int64_t channels = static_cast<int64_t>(factors.size());
  if (l.type != "deconv2") {
    const int64_t per = w.numel() / channels;
    for (int64_t r = 0; r < channels; ++r)
      for (int64_t j = 0; j < per; ++j) dst[r * per + j] = static_cast<float>(src[r * per + j] * factors[static_cast<std::size_t>(r)]);
    return out;
  }
  const int64_t c = w.shape()[0], ocg = w.shape()[1], taps = w.numel() / (c * ocg);
  const int64_t icg = c / l.get_int("group", 1);
  for (int64_t i = 0; i < c; ++i)
    for (int64_t o = 0; o < ocg; ++o) {
      const double f = factors[static_cast<std::size_t>(i / icg * ocg + o)];
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t at = (i * ocg + o) * taps + t;
        dst[at] = static_cast<float>(src[at] * f);
      }
    }
  return out;
}

/// The layer's bias as doubles (zeros when it has none).
std::vector<double> bias_of(const Layer& l) {
  std::vector<double> b(static_cast<std::size_t>(output_channels(l)), 0.0);
  if (const Blob* bias = l.find_weight("bias"))
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = bias->data_as<float>()[i];
  return b;
}

void set_bias(Layer& l, const std::vector<double>& b) {
  Blob out = Blob::allocate(Shape{static_cast<int64_t>(b.size())});
  for (std::size_t i = 0; i < b.size(); ++i) out.data_as<float>()[i] = static_cast<float>(b[i]);
  l.weights["bias"] = out;
}

bool weights_plain(const Layer& l) {
  for (const auto& [k, b] : l.weights)
    if (!plain_float(b)) return false;
  return true;
}

}  // namespace

std::vector<Blob> evaluate_layer(const Layer& l, const std::vector<Blob>& inputs) {
  LayerInfo info;
  info.layer = &l;
  for (const Blob& b : inputs) info.input_shapes.push_back(b.shape());
  info.output_shapes = infer_layer_shapes(l, info.input_shapes);
  // The reference routine where one computes it (exact: index arithmetic
  // truncated later must not move by an approximation), else the default; for
  // large results (folded weights, not index math) the default, which is fast.
  const auto& registry = RoutineRegistry::instance();
  int64_t values = 0;
  for (const Shape& s : info.output_shapes) values += s.numel();
  Schema ref_schema;
  const Routine* ref = values <= (int64_t{1} << 20) ? registry.find(l.type, "cpu/ref", &ref_schema) : nullptr;
  const Candidate c = ref && ref->supports(info, ref_schema) ? Candidate{ref, ref_schema, "cpu/ref", Support::yes()}
                                                            : registry.default_choice(info, Schema{});
  std::unique_ptr<PreparedRoutine> prepared = c.routine->prepare(info, c.schema, {});
  std::vector<Blob> outputs;
  for (const Shape& s : info.output_shapes) outputs.push_back(Blob::allocate(s));
  const std::size_t ws = prepared->workspace_bytes();
  std::unique_ptr<void, void (*)(void*)> workspace(ws ? allocate_aligned((ws + 63) / 64 * 64) : nullptr,
                                                   std::free);
  if (ws && !workspace) throw Error(fmt::format("out of memory for a {}-byte workspace", ws), {}, l.name);
  std::vector<const Blob*> in_ptrs;
  for (const Blob& b : inputs) in_ptrs.push_back(&b);
  std::vector<Blob*> out_ptrs;
  for (Blob& b : outputs) out_ptrs.push_back(&b);
  RunArgs args;
  args.inputs = in_ptrs;
  args.outputs = out_ptrs;
  args.workspace = workspace.get();
  args.pool = &global_pool();
  std::vector<Shape> actual = info.output_shapes;  // a value-shaped layer's are known once it has run
  args.output_shapes = actual.data();
  prepared->run(args);
  for (std::size_t k = 0; k < outputs.size(); ++k) outputs[k].reshape(actual[k]);
  return outputs;
}


int remove_identities(Graph& g) {
  sort_topologically(g);
  int count = 0;
  for (std::size_t i = 0; i < g.layers.size();) {
    const Layer& l = g.layers[i];
    if (l.type != "identity" || l.inputs.size() != 1 || l.outputs.size() != 1) {
      ++i;
      continue;
    }
    const std::string in = l.inputs[0], out = l.outputs[0];
    if (!contains(g.outputs, out)) {
      g.layers.erase(g.layers.begin() + static_cast<std::ptrdiff_t>(i));
      rename_reads(g, out, in);
      ++count;
      continue;
    }
    // `out` leaves the net, so its name must stay: the producer of `in`
    // writes `out` directly, unless `in` is a net input or output itself.
    Layer* p = nullptr;
    for (auto& other : g.layers)
      if (contains(other.outputs, in)) p = &other;
    if (p && !contains(g.outputs, in)) {
      std::replace(p->outputs.begin(), p->outputs.end(), in, out);
      g.layers.erase(g.layers.begin() + static_cast<std::ptrdiff_t>(i));
      rename_reads(g, in, out);
      ++count;
      continue;
    }
    ++i;
  }
  sort_topologically(g);  // a renamed producer may now come after its readers' old position
  return count;
}

int fold_constants(Graph& g) {
  sort_topologically(g);
  std::unordered_map<std::string, Blob> constants;
  for (const auto& l : g.layers)
    if (l.type == "constant" && l.outputs.size() == 1)
      if (const Blob* v = l.find_weight("value"); v && plain_float(*v)) constants[l.outputs[0]] = *v;

  std::vector<Layer> extra;  // constant layers for the 2nd, 3rd... output of folded layers
  std::set<std::string> names;
  for (const auto& l : g.layers) names.insert(l.name);
  int count = 0;
  for (auto& l : g.layers) {
    if (l.type == "constant" || l.inputs.empty()) continue;
    std::vector<Blob> inputs;
    for (const auto& in : l.inputs) {
      auto it = constants.find(in);
      if (it == constants.end()) break;
      inputs.push_back(it->second);
    }
    if (inputs.size() != l.inputs.size()) continue;
    std::vector<Blob> outputs;
    try {
      outputs = evaluate_layer(l, inputs);
    } catch (const std::exception& e) {
      // No routine computes it here (or it is invalid): it stays a layer and
      // the net's own build reports real errors.
      debug("fold_constants: layer '{}' not folded: {}", l.name, e.what());
      continue;
    }
    const std::vector<std::string> outs = l.outputs;
    for (std::size_t k = 0; k < outs.size(); ++k) {
      Layer c;
      c.type = "constant";
      c.outputs = {outs[k]};
      c.weights["value"] = outputs[k];
      constants[outs[k]] = outputs[k];
      if (k == 0) {
        c.name = l.name;
        l = std::move(c);
      } else {
        c.name = fmt::format("{}:{}", l.name, k);
        while (!names.insert(c.name).second) c.name += "_";
        extra.push_back(std::move(c));
      }
    }
    ++count;
  }
  for (auto& c : extra) g.layers.push_back(std::move(c));
  sort_topologically(g);
  return count;
}

int fold_batchnorm(Graph& g) {
  return absorb_into_producers(g, "batchnorm", [](Layer& p, const Layer& bn, std::size_t, const Context& ctx) {
    if (!has_channel_epilogue(p) || !has_no_activation(p) || !weights_plain(p) || !weights_plain(bn)) return false;
    // batchnorm normalises dim 1: a dense output's channels only when it is [N,O].
    if (p.type == "dense" && ctx.shapes.at(p.outputs[0]).rank() != 2) return false;
    const int64_t channels = output_channels(p);
    const float* scale = bn.weight("scale").data_as<float>();
    const float* shift = bn.weight("bias").data_as<float>();
    const float* mean = bn.weight("mean").data_as<float>();
    const float* var = bn.weight("var").data_as<float>();
    const double eps = bn.get_float("epsilon", 1e-5);
    std::vector<double> factor(static_cast<std::size_t>(channels));
    std::vector<double> bias = bias_of(p);
    for (std::size_t c = 0; c < factor.size(); ++c) {
      factor[c] = double(scale[c]) / std::sqrt(double(var[c]) + eps);
      bias[c] = (bias[c] - mean[c]) * factor[c] + shift[c];
    }
    p.weights["weight"] = scale_output_channels(p, factor);
    set_bias(p, bias);
    return true;
  });
}

/// The values of constant `c` along dim `channel_dim` of a blob of shape `y`
/// that it broadcasts onto without growing it: one per channel (its other dims
/// 1) or one in all, then repeated. Nothing otherwise, or where one is not finite.
std::optional<std::vector<double>> per_channel_values(const Blob& c, const Shape& y, int channel_dim) {
  if (c.shape().rank() > y.rank() || channel_dim < 0 || channel_dim >= y.rank()) return std::nullopt;
  const int64_t channels = y[channel_dim];
  if (c.numel() != channels && c.numel() != 1) return std::nullopt;
  for (int d = 0; d < c.shape().rank(); ++d)
    if (c.shape()[d] != 1 && d + y.rank() - c.shape().rank() != channel_dim) return std::nullopt;
  std::vector<double> v(static_cast<std::size_t>(channels));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = c.data_as<float>()[c.numel() == 1 ? 0 : i];
    if (!std::isfinite(v[i])) return std::nullopt;
  }
  return v;
}

/// The values, one per output channel of conv2/dense `p`, of the constant that
/// elementwise layer `op` (an add or mul of two inputs, input `input` being
/// p's output) applies to it: a constant of one value per output channel
/// ([O] or [1,..,1,O] for dense, [O,1,1] or [1,O,1,1] for conv2) or of one
/// value ([1], [1,1,1,1], a scalar). Nothing where p cannot absorb `op`: p has
/// a fused activation, `op` has one (it is then no bias or scale), the
/// constant grows p's output by broadcasting, or a value is not finite.
std::optional<std::vector<double>> per_channel_constant(const Layer& p, const Layer& op, std::size_t input,
                                                        const Context& ctx) {
  if (!has_channel_epilogue(p) || !has_no_activation(p) || !has_no_activation(op) || !weights_plain(p) ||
      op.inputs.size() != 2)
    return std::nullopt;
  auto cit = ctx.constants.find(op.inputs[1 - input]);
  if (cit == ctx.constants.end() || !plain_float(*cit->second)) return std::nullopt;
  const Shape& y = ctx.shapes.at(op.inputs[input]);
  if (ctx.shapes.at(op.outputs[0]) != y || y.rank() < 1) return std::nullopt;
  auto v = per_channel_values(*cit->second, y, p.type == "dense" ? y.rank() - 1 : 1);
  if (v && static_cast<int64_t>(v->size()) != output_channels(p)) return std::nullopt;
  return v;
}

int fold_bias_add(Graph& g) {
  return absorb_into_producers(g, "add", [](Layer& p, const Layer& add, std::size_t input, const Context& ctx) {
    const auto c = per_channel_constant(p, add, input, ctx);
    if (!c) return false;
    std::vector<double> bias = bias_of(p);
    for (std::size_t i = 0; i < bias.size(); ++i) bias[i] += (*c)[i];
    set_bias(p, bias);
    return true;
  });
}

int fold_dequantized_gather(Graph& g) {
  // The one value of the constant the consumer's other input holds, or nothing.
  auto scalar = [](const Layer& c, std::size_t input, const Context& ctx) -> std::optional<double> {
    if (c.inputs.size() != 2 || !has_no_activation(c)) return std::nullopt;
    auto it = ctx.constants.find(c.inputs[1 - input]);
    if (it == ctx.constants.end() || it->second->numel() != 1 || it->second->dtype() != DType::float32 ||
        !it->second->data())
      return std::nullopt;
    const double v = it->second->data_as<float>()[0];
    if (!std::isfinite(v)) return std::nullopt;
    return v;
  };
  auto integer_table = [](const Layer& p) -> const Blob* {
    const Blob* t = p.type == "gather" && p.inputs.size() == 1 ? p.find_weight("table") : nullptr;
    return t && t->data() ? t : nullptr;
  };
  // gather -> sub(zero point): the int8/uint8 table becomes qint8/quint8 of scale 1 and that zero point.
  int n = absorb_into_producers(g, "sub", [&](Layer& p, const Layer& sub, std::size_t input, const Context& ctx) {
    const Blob* t = integer_table(p);
    if (!t || input != 0 || (t->dtype() != DType::int8 && t->dtype() != DType::uint8)) return false;
    const auto zp = scalar(sub, input, ctx);
    const bool is_signed = t->dtype() == DType::int8;
    if (!zp || *zp != std::floor(*zp) || *zp < (is_signed ? -128 : 0) || *zp > (is_signed ? 127 : 255)) return false;
    Blob q = Blob::allocate(t->shape(), is_signed ? DType::qint8 : DType::quint8);
    std::memcpy(q.data(), t->data(), t->byte_size());
    q.quant() = QuantParams{{1.0f}, {static_cast<int32_t>(*zp)}, -1};
    p.weights["table"] = std::move(q);
    return true;
  });
  // gather -> mul(scale), the table's scale still 1: (q - zp) * scale, as DequantizeLinear rounds it.
  n += absorb_into_producers(g, "mul", [&](Layer& p, const Layer& mul, std::size_t input, const Context& ctx) {
    const Blob* t = integer_table(p);
    if (!t || (t->dtype() != DType::qint8 && t->dtype() != DType::quint8) || t->quant().scales != std::vector<float>{1.0f})
      return false;
    const auto s = scalar(mul, input, ctx);
    if (!s || !quant_scale_in_range(*s)) return false;
    Blob q = *t;  // (the memory this pass allocated above, shared)
    q.quant().scales = {static_cast<float>(*s)};
    p.weights["table"] = std::move(q);
    return true;
  });
  return n;
}

int fuse_dynamic_quant_dense(Graph& g) {
  sort_topologically(g);
  const auto shapes = infer_shapes(g);
  GraphIndex index(g);
  auto made_by = [&](const std::string& blob, std::string_view type) -> const Layer* {
    auto it = index.producer.find(blob);
    const Layer* l = it == index.producer.end() ? nullptr : &g.layers[it->second];
    return l && l->type == type && has_no_activation(*l) ? l : nullptr;
  };
  std::vector<bool> removed(g.layers.size());
  int count = 0;
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    const Layer& f = g.layers[i];  // mul(dense's integer sums, s * s_w)
    if (f.type != "mul" || f.inputs.size() != 2 || f.outputs.size() != 1 || !has_no_activation(f)) continue;
    for (std::size_t side = 0; side < 2; ++side) {
      const std::string& sums = f.inputs[side];
      const Layer* e = made_by(sums, "dense");
      const Layer* scales = made_by(f.inputs[1 - side], "mul");
      if (!e || !scales || e->inputs.size() != 1 || e->find_weight("bias") || index.reads[sums] != 1 ||
          index.net_outputs.count(sums) || shapes.at(f.outputs[0]) != shapes.at(sums))
        continue;
      const Layer* centred = made_by(e->inputs[0], "sub");  // q - zero point
      const Layer* d = centred && centred->inputs.size() == 2 ? made_by(centred->inputs[0], "dynamic_quantize") : nullptr;
      if (!d || d->outputs.size() != 3 || centred->inputs[0] != d->outputs[0] || centred->inputs[1] != d->outputs[2] ||
          scales->inputs.size() != 2)
        continue;
      // s * s_w: the run-time scale times the weight's constant one (per tensor or per output channel).
      const int at = scales->inputs[0] == d->outputs[1] ? 0 : scales->inputs[1] == d->outputs[1] ? 1 : -1;
      auto c = at < 0 ? index.constants.end() : index.constants.find(scales->inputs[static_cast<std::size_t>(1 - at)]);
      if (c == index.constants.end() || !plain_float(*c->second)) continue;
      const Shape& y = shapes.at(sums);
      const auto ws = per_channel_values(*c->second, y, y.rank() - 1);
      const Blob w = float_weight(e->weight("weight"));
      if (!ws || static_cast<int64_t>(ws->size()) != w.shape()[0] ||
          !std::all_of(ws->begin(), ws->end(), [](double v) { return quant_scale_in_range(v); }))
        continue;
      // The weight's integers (MatMulInteger's B less its zero point) as int8 with those scales.
      const float* wv = w.data_as<float>();
      if (!std::all_of(wv, wv + w.numel(), [](float v) { return v == std::nearbyint(v) && std::abs(v) <= 127; }))
        continue;
      Blob q = Blob::allocate(w.shape(), DType::qint8);
      std::transform(wv, wv + w.numel(), q.data_as<int8_t>(), [](float v) { return static_cast<int8_t>(v); });
      q.quant() = QuantParams{std::vector<float>(ws->begin(), ws->end()), {}, 0};
      Layer fused;
      fused.type = "dynamic_quant_dense";
      fused.name = e->name;
      fused.inputs = {d->inputs[0]};
      fused.outputs = f.outputs;
      fused.weights["weight"] = std::move(q);
      const std::size_t at_e = index.producer.at(sums);
      --index.reads[e->inputs[0]];
      ++index.reads[d->inputs[0]];
      g.layers[at_e] = std::move(fused);
      index.producer[f.outputs[0]] = at_e;
      removed[i] = true;
      ++count;
      break;
    }
  }
  erase_flagged(g, removed);
  // Then its bias, an add of one constant per output channel.
  count += absorb_into_producers(g, "add", [](Layer& p, const Layer& add, std::size_t input, const Context& ctx) {
    if (p.type != "dynamic_quant_dense" || add.inputs.size() != 2 || !has_no_activation(add)) return false;
    auto c = ctx.constants.find(add.inputs[1 - input]);
    if (c == ctx.constants.end() || !plain_float(*c->second)) return false;
    const Shape& y = ctx.shapes.at(add.inputs[input]);
    if (ctx.shapes.at(add.outputs[0]) != y) return false;
    const auto v = per_channel_values(*c->second, y, y.rank() - 1);
    if (!v || static_cast<int64_t>(v->size()) != output_channels(p)) return false;
    std::vector<double> bias = bias_of(p);
    for (std::size_t k = 0; k < bias.size(); ++k) bias[k] += (*v)[k];
    set_bias(p, bias);
    return true;
  });
  return count;
}

int fold_scale_mul(Graph& g) {
  return absorb_into_producers(g, "mul", [](Layer& p, const Layer& mul, std::size_t input, const Context& ctx) {
    const auto c = per_channel_constant(p, mul, input, ctx);
    if (!c) return false;
    std::vector<double> bias = bias_of(p);
    for (std::size_t i = 0; i < bias.size(); ++i) bias[i] *= (*c)[i];
    p.weights["weight"] = scale_output_channels(p, *c);
    if (p.find_weight("bias")) set_bias(p, bias);
    return true;
  });
}

int fuse_self_gating(Graph& g) {
  return absorb_into_producers(g, "mul", [](Layer& p, const Layer& mul, std::size_t input, const Context& ctx) {
    if ((p.type != "hardsigmoid" && p.type != "sigmoid") || p.inputs.size() != 1 || mul.inputs.size() != 2) return false;
    const std::string& x = mul.inputs[1 - input];
    if (p.inputs[0] != x) return false;
    // ONNX HardSigmoid's defaults are alpha 0.2, beta 0.5; hardswish needs 1/6.
    if (p.type == "hardsigmoid" &&
        (std::abs(p.get_float("alpha", 0.2) - 1.0 / 6.0) > 1e-6 || std::abs(p.get_float("beta", 0.5) - 0.5) > 1e-6))
      return false;
    if (ctx.shapes.at(mul.outputs[0]) != ctx.shapes.at(x)) return false;
    p.type = p.type == "sigmoid" ? "silu" : "hardswish";
    p.params.erase("alpha");
    p.params.erase("beta");
    return true;
  });
}

namespace {
/// dense -> reshape -> gelu (GPT-2's Gemm on [tokens, hidden], then back to
/// [batch, tokens, 4*hidden]) as dense(gelu) -> reshape: the gelu is elementwise.
int gelu_through_reshape(Graph& g) {
  sort_topologically(g);
  GraphIndex index(g);
  auto sole = [&](const std::string& blob) -> Layer* {
    auto p = index.producer.find(blob);
    if (p == index.producer.end() || index.reads[blob] != 1 || index.net_outputs.count(blob)) return nullptr;
    Layer& l = g.layers[p->second];
    return l.outputs.size() == 1 ? &l : nullptr;
  };
  std::vector<bool> removed(g.layers.size());
  int count = 0;
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    const Layer& c = g.layers[i];
    if (c.type != "gelu" || c.inputs.size() != 1 || c.outputs.size() != 1) continue;
    Layer* r = sole(c.inputs[0]);
    if (!r || r->type != "reshape" || r->inputs.empty()) continue;
    Layer* d = sole(r->inputs[0]);
    if (!d || d->type != "dense" || !has_no_activation(*d)) continue;
    d->params["act"] = std::string("gelu");
    if (const auto form = c.get_string("approximate", "none"); form != "none") d->params["act_approximate"] = form;
    r->outputs[0] = c.outputs[0];
    removed[i] = true;
    ++count;
  }
  erase_flagged(g, removed);
  return count;
}
}  // namespace

int fuse_activations(Graph& g) {
  int count = gelu_through_reshape(g);
  // gelu into dense layers only (a transformer's feed-forward; dynamic_quant_dense
  // too), whose routines opt in to it (core::fused_activation's with_gelu).
  for (const char* type : {"relu", "clip", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu"}) {
    count += absorb_into_producers(g, type, [](Layer& p, const Layer& act, std::size_t, const Context&) {
      if (!takes_activation(p, act.type) || !has_no_activation(p)) return false;
      if (act.type == "gelu" && p.type != "dense" && p.type != "dynamic_quant_dense") return false;
      p.params["act"] = act.type;
      if (act.type == "gelu") {
        if (const auto form = act.get_string("approximate", "none"); form != "none") p.params["act_approximate"] = form;
      } else if (act.type == "clip") {
        if (act.has("min")) p.params["act_min"] = act.get_float("min");
        if (act.has("max")) p.params["act_max"] = act.get_float("max");
      } else if (act.type == "hardsigmoid") {
        p.params["act_alpha"] = act.get_float("alpha", 0.2);
        p.params["act_beta"] = act.get_float("beta", 0.5);
      }
      return true;
    });
  }
  return count;
}

int eliminate_dead_layers(Graph& g) {
  sort_topologically(g);
  std::set<std::string> live(g.outputs.begin(), g.outputs.end());
  std::vector<bool> removed(g.layers.size());
  int count = 0;
  for (std::size_t i = g.layers.size(); i-- > 0;) {
    const Layer& l = g.layers[i];
    bool needed = std::any_of(l.outputs.begin(), l.outputs.end(), [&](const auto& o) { return live.count(o) != 0; });
    if (!needed) {
      removed[i] = true;
      ++count;
      continue;
    }
    live.insert(l.inputs.begin(), l.inputs.end());
  }
  erase_flagged(g, removed);
  return count;
}

int fuse_output_affine(Graph& g) {
  // conv2/dense(act) -> mul(c) -> add(d): act_scale c, act_shift d (y * c + d after the activation).
  auto rule = [](Layer& p, const Layer& op, std::size_t input, const Context& ctx) {
    if (!is_conv_or_dense(p) || has_no_activation(p) || !has_no_activation(op) || op.inputs.size() != 2) return false;
    auto cit = ctx.constants.find(op.inputs[1 - input]);
    if (cit == ctx.constants.end() || !plain_float(*cit->second) || cit->second->numel() != 1) return false;
    const Shape& y = ctx.shapes.at(op.inputs[input]);
    if (ctx.shapes.at(op.outputs[0]) != y || cit->second->shape().rank() > y.rank()) return false;
    const double v = cit->second->data_as<float>()[0];
    double scale = p.get_float("act_scale", 1.0), shift = p.get_float("act_shift", 0.0);
    if (op.type == "mul") scale *= v, shift *= v;
    else shift += v;
    if (!std::isfinite(scale) || !std::isfinite(shift)) return false;
    p.params["act_scale"] = scale;
    p.params["act_shift"] = shift;
    return true;
  };
  int total = 0;
  for (int n = 1; n > 0; total += n) n = absorb_into_producers(g, "mul", rule) + absorb_into_producers(g, "add", rule);
  return total;
}

int fold_input_affine(Graph& g) {
  // The conv2/dense takes its producer's place, as in fold_pads. A chain
  // mul -> add -> conv2 folds one step per sweep: sweeps until none folds.
  auto rule = [](Layer& p, const Layer& c, std::size_t input, const Context& ctx) {
    if (input != 0 || (p.type != "add" && p.type != "mul") || p.inputs.size() != 2 || !has_no_activation(p) ||
        !weights_plain(c) || !c.find_weight("weight"))
      return false;
    const int k = ctx.constants.count(p.inputs[1]) ? 1 : ctx.constants.count(p.inputs[0]) ? 0 : -1;
    if (k < 0 || !plain_float(*ctx.constants.at(p.inputs[static_cast<std::size_t>(k)]))) return false;
    const std::string& x = p.inputs[static_cast<std::size_t>(1 - k)];
    const Shape& xs = ctx.shapes.at(x);
    if (ctx.shapes.at(p.outputs[0]) != xs || xs.rank() < 1) return false;
    if (c.type == "conv2" && xs.rank() != 4) return false;
    // One value per input channel (dim 1 of a conv2's [N,C,H,W], a dense's last dim), or one in all.
    const auto values = per_channel_values(*ctx.constants.at(p.inputs[static_cast<std::size_t>(k)]), xs,
                                           c.type == "conv2" ? 1 : xs.rank() - 1);
    if (!values) return false;
    const std::vector<double>& val = *values;
    const int64_t channels = static_cast<int64_t>(val.size());
    const Blob& w = c.weight("weight");
    const int64_t group = c.type == "conv2" ? c.get_int("group", 1) : 1;
    if (w.shape().rank() != (c.type == "conv2" ? 4 : 2) || group < 1) return false;
    const int64_t oc = w.shape()[0], icg = w.shape()[1], taps = c.type == "conv2" ? w.shape()[2] * w.shape()[3] : 1;
    if (icg * group != channels || oc % group != 0) return false;
    // x + d reaches a padded conv2's border as d, where the fold would give 0.
    if (p.type == "add" && c.type == "conv2")
      for (int64_t pad : c.get_ints("pads", {0, 0, 0, 0}))
        if (pad != 0) return false;
    Layer folded = c;
    const float* src = w.data_as<float>();
    auto in_channel = [&](int64_t o, int64_t i) { return static_cast<std::size_t>(o / (oc / group) * icg + i); };
    if (p.type == "mul") {  // W[o][i] * c[i]: zeros of the padding stay zeros
      Blob scaled = Blob::allocate(w.shape());
      float* dst = scaled.data_as<float>();
      for (int64_t o = 0; o < oc; ++o)
        for (int64_t i = 0; i < icg; ++i)
          for (int64_t t = 0; t < taps; ++t)
            dst[(o * icg + i) * taps + t] = static_cast<float>(src[(o * icg + i) * taps + t] * val[in_channel(o, i)]);
      folded.weights["weight"] = scaled;
    } else {  // bias[o] + sum over W[o][i][t] * d[i]
      std::vector<double> bias = bias_of(c);
      for (int64_t o = 0; o < oc; ++o)
        for (int64_t i = 0; i < icg; ++i)
          for (int64_t t = 0; t < taps; ++t)
            bias[static_cast<std::size_t>(o)] += double(src[(o * icg + i) * taps + t]) * val[in_channel(o, i)];
      set_bias(folded, bias);
    }
    folded.inputs[0] = x;
    p = std::move(folded);
    return true;
  };
  int total = 0;
  for (const char* type : {"conv2", "dense"})
    for (int n = 1; n > 0; total += n) {
      n = absorb_into_producers(g, type, rule);
      sort_topologically(g);
    }
  return total;
}

int fold_pads(Graph& g) {
  // The conv2 takes its producer's place: a pad of zeros on H and W becomes the
  // conv2 reading the pad's input with the pads added (sorted again after: the
  // conv2's other inputs may come after the pad).
  const int count = absorb_into_producers(g, "conv2", [](Layer& p, const Layer& c, std::size_t input, const Context&) {
    if (input != 0 || p.type != "pad" || p.inputs.size() != 1 || p.get_string("mode", "constant") != "constant" ||
        p.get_float("value", 0.0) != 0.0)
      return false;
    const auto pads = p.get_ints("pads");
    if (pads.size() != 8 || pads[0] || pads[1] || pads[4] || pads[5]) return false;  // only H and W
    auto cp = c.get_ints("pads", {0, 0, 0, 0});
    if (cp.size() != 4) return false;
    // conv2 pads [top, left, bottom, right]; pad's [begin N,C,H,W, end N,C,H,W].
    cp[0] += pads[2], cp[1] += pads[3], cp[2] += pads[6], cp[3] += pads[7];
    Layer conv = c;
    conv.params["pads"] = cp;
    conv.inputs[0] = p.inputs[0];
    p = std::move(conv);
    return true;
  });
  sort_topologically(g);
  return count;
}

int broadcast_scalar_operands(Graph& g) {
  sort_topologically(g);
  const auto shapes = infer_shapes(g);
  std::unordered_map<std::string, const Layer*> constants;
  for (const Layer& l : g.layers)
    if (l.type == "constant" && l.outputs.size() == 1 && l.find_weight("value")) constants[l.outputs[0]] = &l;
  static const std::set<std::string> kBinary = {"add", "mul", "sub", "div"};
  std::map<std::pair<std::string, int>, std::string> made;  // (constant blob, rank) -> its reshaped twin
  std::vector<Layer> added;
  int count = 0;
  for (Layer& l : g.layers) {
    if (!kBinary.count(l.type) || l.inputs.size() != 2 || l.outputs.size() != 1) continue;
    const int rank = shapes.at(l.outputs[0]).rank();
    if (rank < 3) continue;  // layouts other than the plain one need rank 4 (and 3 for nhwc); lower ranks gain nothing
    for (std::string& in : l.inputs) {
      auto c = constants.find(in);
      if (c == constants.end()) continue;
      const Blob& v = c->second->weight("value");
      if (v.numel() != 1 || v.shape().rank() >= rank || !plain_float(v)) continue;
      auto [it, fresh] = made.try_emplace({in, rank});
      if (fresh) {
        Layer k = *c->second;
        k.name = fmt::format("{}/rank{}", c->second->name, rank);
        k.outputs = {fmt::format("{}/rank{}", in, rank)};
        k.weights["value"] = reshaped(v, Shape(std::vector<int64_t>(static_cast<std::size_t>(rank), 1)));
        it->second = k.outputs[0];
        added.push_back(std::move(k));
      }
      in = it->second;
      ++count;
    }
  }
  for (Layer& k : added) g.layers.push_back(std::move(k));
  sort_topologically(g);
  return count;
}

namespace {

/// What fuse_attention reads of the graph: producers, readers, constants, shapes.
/// Shape readers of `blob` are to read `source` instead: shape(blob) = shape
/// of transpose(source, perm), its first two dims then one where `merge`
/// (blob [b*h,s,d] of a source [b,h,s,d]: the merge_heads of a shape_math).
struct Reroute {
  std::string blob, source;
  std::vector<int64_t> perm;
  bool merge = false;
};

struct AttentionMatcher {
  Graph& g;
  std::map<std::string, Shape> shapes;
  std::unordered_map<std::string, std::size_t> producer;
  std::unordered_map<std::string, std::vector<std::size_t>> readers;
  std::unordered_map<std::string, const Blob*> constants;
  std::set<std::string> net_outputs;
  std::vector<bool> taken;  ///< layers already part of a fused attention

  explicit AttentionMatcher(Graph& graph) : g(graph), shapes(infer_shapes(graph)) {
    for (std::size_t i = 0; i < g.layers.size(); ++i) {
      const Layer& l = g.layers[i];
      for (const auto& o : l.outputs) producer[o] = i;
      for (const auto& in : l.inputs)
        if (auto& r = readers[in]; r.empty() || r.back() != i) r.push_back(i);  // a layer reading a blob twice once
      if (l.type == "constant" && l.outputs.size() == 1)
        if (const Blob* v = l.find_weight("value"); v && plain_float(*v)) constants[l.outputs[0]] = v;
    }
    net_outputs.insert(g.outputs.begin(), g.outputs.end());
    taken.assign(g.layers.size(), false);
  }

  /// A shape_math layer reading only its input's shape (op shape or size).
  bool reads_shape(std::size_t i) const {
    const Layer& l = g.layers[i];
    if (l.type != "shape_math" || l.inputs.size() != 1) return false;
    const std::string op = l.get_string("op", "");
    return op == "shape" || op == "size";
  }
  /// The layers reading `blob`'s values (not only its shape).
  std::vector<std::size_t> data_readers(const std::string& blob) const {
    std::vector<std::size_t> out;
    if (auto r = readers.find(blob); r != readers.end())
      for (std::size_t i : r->second)
        if (!reads_shape(i)) out.push_back(i);
    return out;
  }
  /// The layer producing `blob` where only `reader` reads its values and it leaves no net output.
  const Layer* sole_producer(const std::string& blob, std::size_t reader) const {
    auto p = producer.find(blob);
    if (p == producer.end() || data_readers(blob) != std::vector<std::size_t>{reader} || net_outputs.count(blob) ||
        taken[p->second])
      return nullptr;
    const Layer& l = g.layers[p->second];
    return l.outputs.size() == 1 ? &l : nullptr;
  }
  std::size_t index(const Layer& l) const { return static_cast<std::size_t>(&l - g.layers.data()); }
  const Shape& shape(const std::string& b) const { return shapes.at(b); }

  /// The one finite value of a constant operand, or nothing.
  std::optional<double> scalar(const std::string& blob) const {
    auto it = constants.find(blob);
    if (it == constants.end() || it->second->numel() != 1) return std::nullopt;
    const double v = it->second->data_as<float>()[0];
    return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
  }
  /// mul/div of `l`'s output by a constant scalar: the factor and the other input.
  std::optional<std::pair<double, std::string>> scaling(const Layer& l) const {
    if ((l.type != "mul" && l.type != "div") || l.inputs.size() != 2 || !has_no_activation(l)) return std::nullopt;
    if (shape(l.outputs[0]) != shape(l.inputs[0]) && shape(l.outputs[0]) != shape(l.inputs[1])) return std::nullopt;
    for (int side = 0; side < 2; ++side) {
      if (l.type == "div" && side == 0) continue;  // c / x is no scaling
      if (auto c = scalar(l.inputs[side])) {
        if (l.type == "div" && *c == 0) return std::nullopt;
        if (shape(l.outputs[0]) != shape(l.inputs[1 - side])) return std::nullopt;
        return std::pair{l.type == "div" ? 1.0 / *c : *c, l.inputs[1 - side]};
      }
    }
    return std::nullopt;
  }

  /// A reshape merging batch and heads, [b,h,s,d] -> [b*h,s,d] (the
  /// TorchScript exports of transformers 4.x: Whisper, BART, Marian): its input.
  std::optional<std::string> merged_heads(const Layer& l) const {
    if (l.type != "reshape" || l.inputs.empty() || l.outputs.size() != 1) return std::nullopt;
    const Shape& in = shape(l.inputs[0]);
    const Shape& out = shape(l.outputs[0]);
    if (in.rank() != 4 || out.rank() != 3 || out[0] != in[0] * in[1] || out[1] != in[2] || out[2] != in[3])
      return std::nullopt;
    return l.inputs[0];
  }
  /// A reshape splitting them again, [b*h,s,d] -> [b,h,s,d].
  bool splits_heads(const Layer& l) const {
    if (l.type != "reshape" || l.inputs.empty() || l.outputs.size() != 1) return false;
    const Shape& in = shape(l.inputs[0]);
    const Shape& out = shape(l.outputs[0]);
    return in.rank() == 3 && out.rank() == 4 && in[0] == out[0] * out[1] && in[1] == out[2] && in[2] == out[3];
  }

  /// where(cond, scores, c) or where(cond, c, scores) with c a constant of at
  /// most -1e30 (-inf, or float's lowest as transformers 4.x writes GPT-2's
  /// causal mask and DistilBERT's masked_fill). The same as adding
  /// where(cond, 0, c) (or where(cond, c, 0)) to the scores: a kept score is
  /// exact, a dropped one is c plus a score (c itself) or -inf, 0 after softmax.
  struct WhereMask {
    std::string cond, lowest;
    int scores = 1;  ///< the where's input holding the scores (1 or 2)
  };
  std::optional<WhereMask> masking_where(const Layer& l) const {
    if (l.type != "where" || l.inputs.size() != 3 || l.outputs.size() != 1) return std::nullopt;
    for (int scores : {1, 2}) {
      auto c = constants.find(l.inputs[3 - scores]);
      if (c == constants.end() || c->second->numel() != 1 || !(c->second->data_as<float>()[0] <= -1e30f)) continue;
      if (shape(l.outputs[0]) != shape(l.inputs[scores]) || shape(l.inputs[0]).rank() > shape(l.inputs[scores]).rank())
        return std::nullopt;
      return WhereMask{l.inputs[0], l.inputs[3 - scores], scores};
    }
    return std::nullopt;
  }
  /// compare(add(x, zeros), c) with the zeros made at run time
  /// (constant_of_shape of 0: an expand) and c one constant value: the same
  /// compare of x, a new layer named after the compare, broadcast later.
  std::optional<Layer> unexpanded_compare(const std::string& blob) const {
    auto made = [&](const std::string& b) -> const Layer* {
      auto p = producer.find(b);
      return p == producer.end() ? nullptr : &g.layers[p->second];
    };
    const Layer* cmp = made(blob);
    if (!cmp || cmp->type != "compare" || cmp->inputs.size() != 2 || cmp->outputs.size() != 1) return std::nullopt;
    auto c = constants.find(cmp->inputs[1]);
    if (c == constants.end() || c->second->numel() != 1) return std::nullopt;
    const Layer* ex = made(cmp->inputs[0]);
    if (!ex || ex->type != "add" || ex->inputs.size() != 2 || !has_no_activation(*ex)) return std::nullopt;
    for (int side = 0; side < 2; ++side) {
      const Layer* z = made(ex->inputs[side]);
      if (!z || z->type != "shape_math" || z->get_string("op", "") != "constant_of_shape") continue;
      const Blob* v = z->find_weight("value");
      if (!v || v->numel() != 1 || !plain_float(*v) || v->data_as<float>()[0] != 0.0f) continue;
      const std::string& x = ex->inputs[1 - side];
      if (shape(x).rank() > shape(cmp->outputs[0]).rank()) return std::nullopt;
      Layer small = *cmp;
      small.name = cmp->name + "/unexpanded";
      small.inputs[0] = x;
      small.outputs = {small.name};
      return small;
    }
    return std::nullopt;
  }

  /// mul/div of the scores by a one-value blob computed at run time (GPT-2's
  /// 1 / sqrt(head_dim) from the values' shape): the op and the blob.
  std::optional<std::pair<std::string, std::string>> runtime_scaling(const Layer& l) const {
    if ((l.type != "mul" && l.type != "div") || l.inputs.size() != 2 || !has_no_activation(l)) return std::nullopt;
    const std::string& c = l.inputs[1];
    if (constants.count(c) || shape(c).numel() != 1 || shape(l.outputs[0]) != shape(l.inputs[0])) return std::nullopt;
    return std::pair{l.type, c};
  }

  /// An operand of a matmul of attention (read by layer `reader`): scalings
  /// (where `scale` is given) and at most one rank-4 transpose in front of it
  /// are absorbed; a rank-3 operand (`merged`: batch and heads in one dim)
  /// first through scalings, at most one rank-3 transpose of its last two dims
  /// and the reshape that merged them (no other form: false). Sets the source
  /// blob and its perm.
  bool operand(std::string blob, std::size_t reader, bool merged, double* scale, std::string& source,
               std::vector<int64_t>& perm, std::vector<std::size_t>& absorbed, std::vector<Reroute>& reroutes) const {
    perm = {0, 1, 2, 3};
    auto compose = [&](const std::vector<int64_t>& tp) {
      std::vector<int64_t> composed(4);
      for (int i = 0; i < 4; ++i) composed[i] = tp[perm[i]];
      perm = composed;
    };
    for (bool transposed = false; merged;) {
      const Layer* p = sole_producer(blob, reader);
      if (!p) return false;
      reader = index(*p);
      if (auto s = scale ? scaling(*p) : std::nullopt) {
        *scale *= s->first;
        reroutes.push_back({blob, s->second, {0, 1, 2}});
        blob = s->second;
      } else if (!transposed && p->type == "transpose" && p->inputs.size() == 1 && shape(p->inputs[0]).rank() == 3) {
        const auto tp = p->get_ints("perm", {2, 1, 0});
        if (tp.size() != 3 || tp[0] != 0) return false;
        compose({0, 1, tp[1] + 1, tp[2] + 1});
        transposed = true;
        reroutes.push_back({blob, p->inputs[0], tp});
        blob = p->inputs[0];
      } else if (auto src = merged_heads(*p)) {
        reroutes.push_back({blob, *src, {0, 1, 2, 3}, true});
        blob = *src;
        merged = false;
      } else {
        return false;
      }
      absorbed.push_back(reader);
    }
    bool transposed = false;
    while (const Layer* p = sole_producer(blob, reader)) {
      if (auto s = scale ? scaling(*p) : std::nullopt) {
        *scale *= s->first;
        reroutes.push_back({blob, s->second, {0, 1, 2, 3}});
        blob = s->second;
      } else if (!transposed && p->type == "transpose" && p->inputs.size() == 1 && shape(p->inputs[0]).rank() == 4) {
        const auto tp = p->get_ints("perm", {3, 2, 1, 0});
        if (tp.size() != 4) break;
        // Scalings read before the transpose keep the canonical order: compose.
        compose(tp);
        transposed = true;
        reroutes.push_back({blob, p->inputs[0], tp});
        blob = p->inputs[0];
      } else {
        break;
      }
      reader = index(*p);
      absorbed.push_back(reader);
    }
    source = blob;
    return true;
  }

  /// The attention ending at softmax layer `si`, or nothing; `absorbed` gets the layers it replaces.
  /// `extra`: layers to add before it (a where-mask as an additive one, a
  /// run-time scaling of Q, the scores' shape); `scores_readers`: the shape
  /// readers of the scores, to read `extra`'s scores shape instead.
  std::optional<Layer> match(std::size_t si, std::vector<std::size_t>& absorbed, std::vector<Reroute>& reroutes,
                             std::vector<Layer>& extra, std::vector<std::size_t>& scores_readers) const {
    const Layer& sm = g.layers[si];
    if (sm.type != "softmax" || sm.inputs.size() != 1 || sm.outputs.size() != 1) return std::nullopt;
    const Shape& ss = shape(sm.inputs[0]);
    const int64_t axis = sm.get_int("axis", -1);
    if ((ss.rank() != 4 && ss.rank() != 3) || (axis != -1 && axis != ss.rank() - 1)) return std::nullopt;
    absorbed = {si};
    double scale = 1;
    std::string mask;
    std::string x = sm.inputs[0];
    std::size_t reader = si;
    // softmax(scale * (Q Kᵀ) + mask): the add, then scalings, then the matmul.
    // With batch and heads merged (rank 3), the mask may be added between a
    // split and a merge of them (BART's encoder).
    const Layer* p = sole_producer(x, reader);
    if (p && merged_heads(*p)) {
      const Layer* add = sole_producer(p->inputs[0], index(*p));
      if (!add || add->type != "add") return std::nullopt;
      reader = index(*p);
      absorbed.push_back(reader);
      x = p->inputs[0];
      p = add;
    }
    // Scalings, a split of merged heads, a where-mask and a run-time scaling
    // (one each) in front of the scores matmul.
    // The scores' blob such a step reads, or nothing for any other layer.
    auto scores_input = [&](const Layer& l) -> std::optional<std::string> {
      if (auto s = scaling(l)) return s->second;
      if (splits_heads(l) || runtime_scaling(l)) return l.inputs[0];
      if (auto w = masking_where(l)) return l.inputs[w->scores];
      return std::nullopt;
    };
    std::optional<WhereMask> where_mask;
    std::optional<std::pair<std::string, std::string>> runtime_scale;
    if (p && p->type == "add" && p->inputs.size() == 2 && has_no_activation(*p)) {
      int scores_side = -1;
      for (int side = 0; side < 2 && scores_side < 0; ++side) {
        const Layer* q = sole_producer(p->inputs[side], index(*p));
        for (auto in = q ? scores_input(*q) : std::nullopt; in; in = q ? scores_input(*q) : std::nullopt)
          q = sole_producer(*in, index(*q));
        if (q && q->type == "matmul" && shape(p->inputs[side]) == shape(p->outputs[0])) scores_side = side;
      }
      if (scores_side < 0) return std::nullopt;
      mask = p->inputs[1 - scores_side];
      // A mask added to merged scores broadcasts over batch and heads alike only below rank 3.
      if (shape(p->outputs[0]).rank() == 3 && shape(mask).rank() > 2) return std::nullopt;
      x = p->inputs[scores_side];
      reader = index(*p);
      absorbed.push_back(reader);
      p = sole_producer(x, reader);
    }
    for (auto in = p ? scores_input(*p) : std::nullopt; in; in = p ? scores_input(*p) : std::nullopt) {
      if (auto s = scaling(*p)) {
        scale *= s->first;
      } else if (auto w = masking_where(*p)) {
        if (where_mask) return std::nullopt;
        where_mask = w;
      } else if (auto r = runtime_scaling(*p)) {
        if (runtime_scale) return std::nullopt;
        runtime_scale = r;
      }
      reader = index(*p);
      absorbed.push_back(reader);
      x = *in;
      p = sole_producer(x, reader);
    }
    if (!p || p->type != "matmul" || p->inputs.size() != 2) return std::nullopt;
    const int rank = shape(p->inputs[0]).rank();
    if (rank != ss.rank() || shape(p->inputs[1]).rank() != rank) return std::nullopt;
    const bool merged = rank == 3;
    const std::size_t m1 = index(*p);
    absorbed.push_back(m1);
    std::string q, k, v;
    std::vector<int64_t> q_perm, kt_perm, v_perm, out_perm{0, 1, 2, 3};
    reroutes.clear();
    if (!operand(p->inputs[0], m1, merged, &scale, q, q_perm, absorbed, reroutes) ||
        !operand(p->inputs[1], m1, merged, &scale, k, kt_perm, absorbed, reroutes))
      return std::nullopt;
    const std::vector<int64_t> k_perm{kt_perm[0], kt_perm[1], kt_perm[3], kt_perm[2]};
    // The probabilities: straight into the second matmul, or through the NaN guard.
    std::string probs = sm.outputs[0];
    bool zero_rows = false;
    auto rit = readers.find(probs);
    if (rit == readers.end() || net_outputs.count(probs)) return std::nullopt;
    if (data_readers(probs).size() == 2) {
      const Layer* cmp = nullptr;
      const Layer* where = nullptr;
      for (std::size_t r : data_readers(probs)) {
        const Layer& l = g.layers[r];
        if (l.type == "compare" && l.get_string("op", "") == "not_equal" && l.inputs.size() == 2 &&
            l.inputs[0] == probs && l.inputs[1] == probs)
          cmp = &l;
        else if (l.type == "where")
          where = &l;
      }
      if (!cmp || !where || where->inputs.size() != 3 || where->inputs[0] != cmp->outputs[0] ||
          where->inputs[2] != probs || !sole_producer(cmp->outputs[0], index(*where)) ||
          scalar(where->inputs[1]) != std::optional<double>(0.0) || shape(where->outputs[0]) != shape(probs) ||
          net_outputs.count(where->outputs[0]) || taken[index(*cmp)] || taken[index(*where)])
        return std::nullopt;
      absorbed.push_back(index(*cmp));
      absorbed.push_back(index(*where));
      probs = where->outputs[0];
      zero_rows = true;
    }
    const auto prob_readers = data_readers(probs);
    if (prob_readers.size() != 1) return std::nullopt;
    const Layer& m2 = g.layers[prob_readers[0]];
    if (m2.type != "matmul" || m2.inputs.size() != 2 || m2.inputs[0] != probs || taken[index(m2)] ||
        shape(m2.inputs[1]).rank() != rank)
      return std::nullopt;
    absorbed.push_back(index(m2));
    if (!operand(m2.inputs[1], index(m2), merged, nullptr, v, v_perm, absorbed, reroutes)) return std::nullopt;
    std::string out = m2.outputs[0];
    if (merged) {  // the heads split again: [b*h,sq,dv] -> [b,h,sq,dv]
      const auto split = data_readers(out);
      if (net_outputs.count(out) || split.size() != 1 || taken[split[0]] || !splits_heads(g.layers[split[0]]))
        return std::nullopt;
      absorbed.push_back(split[0]);
      out = g.layers[split[0]].outputs[0];
    }
    const auto out_readers = data_readers(out);
    if (!net_outputs.count(out) && out_readers.size() == 1) {
      const Layer& t = g.layers[out_readers[0]];
      if (t.type == "transpose" && t.get_ints("perm", {}).size() == 4 && !taken[index(t)]) {
        out_perm = t.get_ints("perm", {});
        std::vector<int64_t> inverse(4);
        for (int i = 0; i < 4; ++i) inverse[out_perm[i]] = i;
        reroutes.push_back({out, t.outputs[0], inverse});
        out = t.outputs[0];
        absorbed.push_back(index(t));
      }
    }
    // A blob that goes must have no shape reader left without a source. The
    // scores' whole shape (DistilBERT expands its mask to it) is Q's first
    // three dims and K's key count: readers of it read that (scores_shape).
    scores_readers.clear();
    for (std::size_t j : absorbed)
      for (const auto& o : g.layers[j].outputs) {
        if (o == out) continue;
        auto r = readers.find(o);
        if (r == readers.end() || std::none_of(r->second.begin(), r->second.end(), [&](std::size_t i) { return reads_shape(i); }))
          continue;
        if (std::any_of(reroutes.begin(), reroutes.end(), [&](const Reroute& x) { return x.blob == o; })) continue;
        if (merged || shape(o) != ss) return std::nullopt;
        for (std::size_t i : r->second) {
          const Layer& reader = g.layers[i];
          if (!reads_shape(i)) continue;
          if (reader.get_string("op", "") != "shape" || reader.has("start") || reader.has("end") || reader.has("perm"))
            return std::nullopt;
          scores_readers.push_back(i);
        }
      }
    // The where-mask as an additive one (beside the model's), the run-time
    // scaling on Q: (Q / c)·Kᵀ = (Q·Kᵀ) / c.
    extra.clear();
    std::map<std::string, Shape> made_shapes;  // of the blobs the extra layers make
    auto fresh = [&](const std::string& what) { return fmt::format("{}/{}", sm.name, what); };
    if (where_mask) {
      // A cond compared after an expand to the scores' shape (DistilBERT's
      // mask == 0, expanded, cast to bool) is compared before it: the mask
      // broadcasts in the attention, and a [b,h,sq,sk] where per layer cost
      // more than the attention (cpu/ref: 1.9 ms each at 12 x 128 x 128).
      std::string cond = where_mask->cond;
      Shape cond_shape = shape(cond);
      if (auto small = unexpanded_compare(cond)) {
        cond_shape = shape(small->inputs[0]);
        cond = small->outputs[0];
        extra.push_back(std::move(*small));
      }
      Layer zero;
      zero.type = "constant";
      zero.name = fresh("mask_zero");
      zero.outputs = {zero.name};
      zero.weights["value"] = Blob::allocate(Shape{}, DType::float32);  // zero-filled
      Layer w;
      w.type = "where";
      w.name = fresh("where_mask");
      w.inputs = {cond, zero.outputs[0], where_mask->lowest};
      if (where_mask->scores == 2) std::swap(w.inputs[1], w.inputs[2]);
      w.outputs = {w.name};
      std::string additive = w.outputs[0];
      made_shapes[additive] = cond_shape;
      extra.push_back(std::move(zero));
      extra.push_back(std::move(w));
      if (!mask.empty()) {
        Layer sum;
        sum.type = "add";
        sum.name = fresh("mask_sum");
        sum.inputs = {additive, mask};
        sum.outputs = {sum.name};
        made_shapes[sum.outputs[0]] = broadcast(made_shapes.at(additive), shape(mask));
        additive = sum.outputs[0];
        extra.push_back(std::move(sum));
      }
      mask = additive;
    }
    if (!scores_readers.empty()) {
      Layer qs, ks, cat;
      qs.type = ks.type = cat.type = "shape_math";
      qs.name = fresh("q_dims");
      qs.inputs = {q};
      qs.params = {{"op", std::string("shape")}, {"perm", q_perm}, {"start", int64_t{0}}, {"end", int64_t{3}}};
      ks.name = fresh("key_count");
      ks.inputs = {k};
      ks.params = {{"op", std::string("shape")}, {"perm", k_perm}, {"start", int64_t{2}}, {"end", int64_t{3}}};
      cat.name = fresh("scores_shape");
      cat.inputs = {qs.name, ks.name};
      cat.params = {{"op", std::string("concat")}, {"axis", int64_t{0}}};
      qs.outputs = {qs.name};
      ks.outputs = {ks.name};
      cat.outputs = {cat.name};
      extra.push_back(std::move(qs));
      extra.push_back(std::move(ks));
      extra.push_back(std::move(cat));
    }
    if (runtime_scale) {
      Layer sq;
      sq.type = runtime_scale->first;
      sq.name = fresh("q_scaled");
      sq.inputs = {q, runtime_scale->second};
      sq.outputs = {sq.name};
      made_shapes[sq.outputs[0]] = shape(q);
      q = sq.outputs[0];
      extra.push_back(std::move(sq));
    }
    Layer a;
    a.type = "attention";
    a.name = sm.name;
    a.inputs = {q, k, v};
    if (!mask.empty()) a.inputs.push_back(mask);
    a.outputs = {out};
    a.params["scale"] = scale;
    a.params["q_perm"] = q_perm;
    a.params["k_perm"] = k_perm;
    a.params["v_perm"] = v_perm;
    a.params["out_perm"] = out_perm;
    if (zero_rows) a.params["masked_rows"] = std::string("zero");
    // Only where it computes what the layers did at these shapes.
    try {
      std::vector<Shape> in;
      for (const auto& i : a.inputs) {
        if (auto made = made_shapes.find(i); made != made_shapes.end()) in.push_back(made->second);
        else in.push_back(shape(i));
      }
      const AttentionGeometry geo = attention_geometry(a, in);
      if (Shape{geo.out_shape[0], geo.out_shape[1], geo.out_shape[2], geo.out_shape[3]} != shape(out))
        return std::nullopt;
      if ((ss.rank() == 4 ? Shape{geo.b, geo.h, geo.sq, geo.sk} : Shape{geo.b * geo.h, geo.sq, geo.sk}) != ss)
        return std::nullopt;
    } catch (const Error&) {
      return std::nullopt;
    }
    return a;
  }
};

}  // namespace

int fuse_attention(Graph& g) {
  sort_topologically(g);
  AttentionMatcher m(g);
  std::vector<bool> removed(g.layers.size());
  std::vector<Layer> added;
  int fused = 0;
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    std::vector<std::size_t> absorbed;
    std::vector<Reroute> reroutes;
    std::vector<Layer> extra;
    std::vector<std::size_t> scores_readers;
    auto a = m.match(i, absorbed, reroutes, extra, scores_readers);
    if (!a) continue;
    bool clash = false;
    for (std::size_t j : absorbed) clash |= m.taken[j];
    if (clash) continue;
    for (std::size_t j : absorbed) m.taken[j] = removed[j] = true;
    for (std::size_t j : scores_readers) {
      Layer& l = g.layers[j];
      l.inputs = {fmt::format("{}/scores_shape", a->name)};
      l.params = {{"op", std::string("identity")}};
    }
    // In the order recorded (from the matmuls outwards), so chains compose.
    for (const Reroute& r : reroutes)
      for (std::size_t j = 0; j < g.layers.size(); ++j) {
        Layer& l = g.layers[j];
        if (!m.reads_shape(j) || l.inputs[0] != r.blob) continue;
        l.inputs[0] = r.source;
        if (l.get_string("op", "") == "size") continue;
        const std::size_t rank = r.merge ? 3 : r.perm.size();  // the blob's
        std::vector<int64_t> identity(rank);
        std::iota(identity.begin(), identity.end(), 0);
        const auto old = l.get_ints("perm", identity);
        if (old.size() != rank) continue;
        if (r.merge) {  // the reader's perm keeps the merged dim first: the rank-3 transposes absorbed do
          l.params["perm"] = std::vector<int64_t>{0, 1, old[1] + 1, old[2] + 1};
          l.params["merge_heads"] = int64_t{1};
          continue;
        }
        std::vector<int64_t> composed(rank);
        for (std::size_t k = 0; k < rank; ++k) composed[k] = r.perm[static_cast<std::size_t>(old[k])];
        l.params["perm"] = composed;
      }
    for (Layer& l : extra) added.push_back(std::move(l));
    added.push_back(std::move(*a));
    ++fused;
  }
  erase_flagged(g, removed);
  for (Layer& l : added) g.layers.push_back(std::move(l));
  sort_topologically(g);
  return fused;
}

namespace {

/// Whether `blob` is zeros: a constant of zeros, or a shape_math
/// constant_of_shape of 0 (an Expand's zeros at a size-dependent target).
bool zeros_blob(const Graph& g, const std::unordered_map<std::string, std::size_t>& producer, const std::string& blob) {
  auto p = producer.find(blob);
  if (p == producer.end()) return false;
  const Layer& l = g.layers[p->second];
  const Blob* v = l.find_weight("value");
  const bool fill = l.type == "shape_math" && l.get_string("op", "") == "constant_of_shape";
  if (!v || !(l.type == "constant" || fill) || v->dtype() != DType::float32 || v->numel() > (int64_t{1} << 24)) return false;
  const float* x = v->data_as<float>();
  return std::all_of(x, x + v->numel(), [](float f) { return f == 0.0f; });
}

/// The blob attention `a` could read as input t (1: K, 2: V) with fewer
/// heads, where that input repeats each head of it `group` times in a row
/// (transformers' repeat_kv: unsqueeze, expand, reshape; or a concat of
/// copies): empty where it does not.
std::string repeated_heads_source(const Graph& g, const std::map<std::string, Shape>& shapes,
                                  const std::unordered_map<std::string, std::size_t>& producer, const Layer& a, int t) {
  auto layer_of = [&](const std::string& blob) -> const Layer* {
    auto p = producer.find(blob);
    return p == producer.end() ? nullptr : &g.layers[p->second];
  };
  auto shape_of = [&](const std::string& blob) -> const Shape* {
    auto it = shapes.find(blob);
    return it == shapes.end() ? nullptr : &it->second;
  };
  const Layer* r = layer_of(a.inputs[static_cast<std::size_t>(t)]);
  if (!r || r->type != "reshape" || r->inputs.empty()) return {};
  const std::vector<int64_t> perm = a.get_ints(t == 1 ? "k_perm" : "v_perm", {0, 1, 2, 3});
  if (perm.size() != 4 || perm[1] < 0 || perm[1] > 3) return {};
  const int hd = static_cast<int>(perm[1]);  // the heads' dim of the input
  const Shape* rs = shape_of(r->outputs[0]);
  const Shape* es = shape_of(r->inputs[0]);
  if (!rs || !es || rs->rank() != 4 || es->rank() != 5) return {};
  // [.., hkv, group, ..] -> [.., hkv * group, ..] at the heads' dim
  for (int d = 0; d < 5; ++d) {
    if (d == hd || d == hd + 1) continue;
    if ((*es)[d] != (*rs)[d < hd ? d : d - 1]) return {};
  }
  const int64_t hkv = (*es)[hd], group = (*es)[hd + 1];
  if (group < 2 || hkv * group != (*rs)[hd]) return {};
  const Layer* e = layer_of(r->inputs[0]);
  if (!e || e->outputs.size() != 1) return {};
  std::string unsqueezed;
  if (e->type == "add" && e->inputs.size() == 2 && has_no_activation(*e)) {
    for (int side = 0; side < 2; ++side)
      if (zeros_blob(g, producer, e->inputs[static_cast<std::size_t>(side)])) unsqueezed = e->inputs[static_cast<std::size_t>(1 - side)];
  } else if (e->type == "concat" && static_cast<int64_t>(e->inputs.size()) == group && e->get_int("axis", 0) == hd + 1 &&
             std::all_of(e->inputs.begin(), e->inputs.end(), [&](const std::string& i) { return i == e->inputs[0]; })) {
    unsqueezed = e->inputs[0];
  }
  const Shape* us = unsqueezed.empty() ? nullptr : shape_of(unsqueezed);
  if (!us || us->rank() != 5 || (*us)[hd + 1] != 1) return {};
  for (int d = 0; d < 5; ++d)
    if (d != hd + 1 && (*us)[d] != (*es)[d]) return {};
  const Layer* u = layer_of(unsqueezed);
  if (!u || u->type != "reshape" || u->inputs.empty()) return {};
  const Shape* ks = shape_of(u->inputs[0]);
  if (!ks || ks->rank() != 4) return {};
  for (int d = 0; d < 4; ++d)
    if ((*ks)[d] != (*us)[d <= hd ? d : d + 1]) return {};
  return u->inputs[0];
}

}  // namespace

int fuse_rotary(Graph& g) {
  const std::map<std::string, Shape> shapes = infer_shapes(g);
  GraphIndex index(g);
  auto made_by = [&](const std::string& blob, const char* type) -> Layer* {
    auto p = index.producer.find(blob);
    if (p == index.producer.end() || g.layers[p->second].type != type) return nullptr;
    return &g.layers[p->second];
  };
  auto plain = [](const Layer& l) { return l.get_string("act", "none") == "none" && !l.params.count("act_scale"); };
  std::vector<bool> removed(g.layers.size());
  int count = 0;
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    Layer& add = g.layers[i];
    if (add.type != "add" || add.inputs.size() != 2 || !plain(add) || removed[i]) continue;
    // add(mul(x, cos), mul(concat(neg(x2), x1), sin)), the muls in either order
    for (int side = 0; side < 2; ++side) {
      Layer* direct = made_by(add.inputs[static_cast<std::size_t>(side)], "mul");
      Layer* turned = made_by(add.inputs[static_cast<std::size_t>(1 - side)], "mul");
      if (!direct || !turned || direct == turned || !plain(*direct) || !plain(*turned)) continue;
      Layer* cat = nullptr;
      std::string sin;
      for (int k = 0; k < 2 && !cat; ++k)
        if ((cat = made_by(turned->inputs[static_cast<std::size_t>(k)], "concat"))) sin = turned->inputs[static_cast<std::size_t>(1 - k)];
      if (!cat || cat->inputs.size() != 2) continue;
      Layer* neg = made_by(cat->inputs[0], "neg");
      if (!neg) continue;
      // The halves: one split, or two slices x[..., :D/2] and x[..., D/2:] (bounds computed from shapes).
      std::vector<Layer*> cut;
      std::string x;
      if (Layer* split = made_by(neg->inputs[0], "split")) {
        if (split->outputs.size() != 2 || split->outputs[1] != neg->inputs[0] || split->outputs[0] != cat->inputs[1]) continue;
        x = split->inputs[0];
        cut = {split};
      } else {
        Layer* high = made_by(neg->inputs[0], "slice");
        Layer* low = made_by(cat->inputs[1], "slice");
        if (!high || !low || high->inputs[0] != low->inputs[0]) continue;
        x = low->inputs[0];
        cut = {low, high};
      }
      const Shape& xs = shapes.at(x);
      if (xs.rank() < 1 || xs[xs.rank() - 1] % 2 != 0) continue;
      const int last = xs.rank() - 1;
      const int64_t half = xs[last] / 2;
      auto halves = [&]() {
        if (cut.size() == 1)
          return normalize_axis(*cut[0], "axis", cut[0]->get_int("axis", 0), xs.rank()) == last &&
                 shapes.at(cut[0]->outputs[0])[last] == half;
        for (int k = 0; k < 2; ++k) {  // low from 0, high from half, each half long, on the last axis alone
          const Layer& c = *cut[static_cast<std::size_t>(k)];
          const auto axes = c.get_ints("axes", {}), starts = c.get_ints("starts", {}), ends = c.get_ints("ends", {});
          const auto steps = c.get_ints("steps", std::vector<int64_t>(axes.size(), 1));
          if (axes.size() != 1 || starts.size() != 1 || ends.size() != 1 || steps.size() != 1 || steps[0] != 1 ||
              (axes[0] != last && axes[0] != -1) || shapes.at(c.outputs[0])[last] != half ||
              slice_range(starts[0], ends[0], 1, xs[last]).start != (k == 0 ? 0 : half))
            return false;
        }
        return true;
      };
      if (!halves() || normalize_axis(*cat, "axis", cat->get_int("axis", 0), xs.rank()) != last) continue;
      std::string cos;
      for (int k = 0; k < 2; ++k)
        if (direct->inputs[static_cast<std::size_t>(k)] == x) cos = direct->inputs[static_cast<std::size_t>(1 - k)];
      if (cos.empty() || shapes.at(add.outputs[0]) != xs) continue;
      // Every blob in between read only here.
      std::vector<std::string> inner = {direct->outputs[0], turned->outputs[0], cat->outputs[0], neg->outputs[0]};
      for (const Layer* c : cut) inner.insert(inner.end(), c->outputs.begin(), c->outputs.end());
      if (std::any_of(inner.begin(), inner.end(), [&](const std::string& b) { return index.reads[b] != 1 || index.net_outputs.count(b); })) continue;
      Layer r;
      r.type = "rotary";
      r.name = add.name;
      r.inputs = {x, cos, sin};
      r.outputs = add.outputs;
      try {
        if (infer_layer_shapes(r, std::vector<Shape>{xs, shapes.at(cos), shapes.at(sin)}) != std::vector<Shape>{xs}) continue;
      } catch (const Error&) {
        continue;  // cos or sin of another form
      }
      for (const Layer* l : {direct, turned, cat, neg}) removed[static_cast<std::size_t>(l - g.layers.data())] = true;
      for (const Layer* l : cut) removed[static_cast<std::size_t>(l - g.layers.data())] = true;
      add = std::move(r);
      ++count;
      break;
    }
  }
  erase_flagged(g, removed);
  return count;
}

int share_kv_heads(Graph& g) {
  const std::map<std::string, Shape> shapes = infer_shapes(g);
  const GraphIndex index(g);
  int count = 0;
  for (Layer& a : g.layers) {
    if (a.type != "attention") continue;
    for (int t = 1; t <= 2; ++t) {
      const std::string source = repeated_heads_source(g, shapes, index.producer, a, t);
      if (source.empty()) continue;
      Layer grouped = a;
      grouped.inputs[static_cast<std::size_t>(t)] = source;
      std::vector<Shape> in;
      for (const auto& i : grouped.inputs) in.push_back(shapes.at(i));
      try {  // (the same output: checked, not assumed)
        if (infer_layer_shapes(grouped, in) != std::vector<Shape>{shapes.at(a.outputs[0])}) continue;
      } catch (const Error&) {
        continue;
      }
      a.inputs[static_cast<std::size_t>(t)] = source;
      ++count;
    }
  }
  return count;
}

int merge_duplicates(Graph& g) {
  sort_topologically(g);
  // Same weights: the same memory, or equal bytes, shape, dtype, layout and quantisation.
  auto same_weights = [](const Layer& a, const Layer& b) {
    if (a.weights.size() != b.weights.size()) return false;
    for (const auto& [key, wa] : a.weights) {
      auto it = b.weights.find(key);
      if (it == b.weights.end()) return false;
      const Blob& wb = it->second;
      if (wa.shape() != wb.shape() || wa.dtype() != wb.dtype() || wa.layout() != wb.layout() ||
          wa.device() != wb.device() || !(wa.quant() == wb.quant()))
        return false;
      if (wa.data() == wb.data()) continue;
      if (!wa.data() || !wb.data() || wa.byte_size() != wb.byte_size() ||
          std::memcmp(wa.data(), wb.data(), wa.byte_size()) != 0)
        return false;
    }
    return true;
  };
  const std::set<std::string> net_outputs(g.outputs.begin(), g.outputs.end());
  std::unordered_map<std::string, std::vector<std::size_t>> seen;  // signature -> kept layers
  std::unordered_map<std::string, std::string> renamed;            // a dropped output -> the kept one
  std::vector<bool> removed(g.layers.size());
  int count = 0;
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    Layer& l = g.layers[i];
    for (auto& in : l.inputs)
      if (auto r = renamed.find(in); r != renamed.end()) in = r->second;
    if (std::any_of(l.outputs.begin(), l.outputs.end(), [&](const std::string& o) { return net_outputs.count(o) != 0; }))
      continue;
    const std::string sig = fmt::format("{}|{}|{}|{}", l.type, fmt::join(l.inputs, ","), l.outputs.size(), describe_params(l));
    auto& kept = seen[sig];
    const Layer* twin = nullptr;
    for (std::size_t k : kept)
      if (same_weights(g.layers[k], l)) twin = &g.layers[k];
    if (!twin) {
      kept.push_back(i);
      continue;
    }
    for (std::size_t o = 0; o < l.outputs.size(); ++o) renamed[l.outputs[o]] = twin->outputs[o];
    removed[i] = true;
    ++count;
  }
  erase_flagged(g, removed);
  return count;
}

std::map<std::string, QuantParams> model_quantisation(const Graph& graph) {
  std::map<std::string, QuantParams> out;
  for (const auto& l : graph.layers)
    if (l.type == "fake_quant") {
      const FakeQuant f = fake_quant_params(l);
      const QuantParams q = f.as_int8();
      out[l.outputs[0]] = q;
      // A requantisation's input lies on another grid: its producer's to record.
      if (!f.requantize) out.emplace(l.inputs[0], q);
    }
  return out;
}

void optimize(Graph& g, const PassOptions& o) {
  struct Step {
    bool on;
    const char* name;
    int (*pass)(Graph&);
  };
  const Step steps[] = {
      {o.remove_identities, "remove_identities", remove_identities},
      {o.fold_constants, "fold_constants", fold_constants},
      {o.fold_dequantized_gather, "fold_dequantized_gather", fold_dequantized_gather},
      {o.fuse_dynamic_quant_dense, "fuse_dynamic_quant_dense", fuse_dynamic_quant_dense},
      {o.fold_pads, "fold_pads", fold_pads},
      {o.fold_batchnorm, "fold_batchnorm", fold_batchnorm},
      {o.fold_scale_mul, "fold_scale_mul", fold_scale_mul},
      {o.fold_bias_add, "fold_bias_add", fold_bias_add},
      // A batchnorm after a bias exported as an add (ConvTranspose -> add -> batchnorm) folds once the add has.
      {o.fold_batchnorm, "fold_batchnorm", fold_batchnorm},
      {o.fold_input_affine, "fold_input_affine", fold_input_affine},
      {o.fuse_self_gating, "fuse_self_gating", fuse_self_gating},
      {o.fuse_activations, "fuse_activations", fuse_activations},
      {o.fuse_output_affine, "fuse_output_affine", fuse_output_affine},
      {o.fuse_rotary, "fuse_rotary", fuse_rotary},
      {o.fuse_attention, "fuse_attention", fuse_attention},
      {o.fuse_attention, "share_kv_heads", share_kv_heads},
      {o.merge_duplicates, "merge_duplicates", merge_duplicates},
      {o.broadcast_scalar_operands, "broadcast_scalar_operands", broadcast_scalar_operands},
      {o.eliminate_dead_layers, "eliminate_dead_layers", eliminate_dead_layers},
  };
  for (const auto& s : steps) {
    if (!s.on) continue;
    int n = s.pass(g);
    info("{}: {} rewrites, {} layers left", s.name, n, g.layers.size());
  }
}

}  // namespace softneuro::core
