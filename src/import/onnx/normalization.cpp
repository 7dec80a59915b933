// ONNX import: BatchNormalization, LayerNormalization, RMSNormalization, GroupNormalization, LRN and the other normalisations.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

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

// RMSNormalization (opset 23) and ONNX Runtime's SimplifiedLayerNormalization:
// x / sqrt(mean(x^2 over axis..) + epsilon) * scale, one rms_norm layer.
void Importer::rms_norm(const Node& n) {
  if (n.num_outputs() > 1 && used(n.out(1)))  // (SimplifiedLayerNormalization's)
    throw Unsupported{fmt::format("{}'s inv_std_var output", n.op())};
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  const int axis = normalized_axis(n, n.get_int("axis", -1), rank, "axis");
  Shape norm;
  for (int i = axis; i < rank; ++i) norm.push_back(xs[i]);
  Blob scale;
  try {
    scale = expanded(to_float(require_constant(n, 1, "scale")), norm);
  } catch (const Error& e) {
    throw n.error(e.message(), "scale");
  }
  const double eps = n.get_float("epsilon", 1e-5);
  if (!(eps >= 0) || !std::isfinite(eps)) throw n.error(fmt::format("epsilon {} is not a non-negative number", eps), "epsilon");
  Layer l = make("rms_norm", n.name, {input(n, 0)}, {n.out(0)});
  l.params["axis"] = int64_t{axis};
  l.params["epsilon"] = eps;
  l.weights["scale"] = scale;
  add(std::move(l));
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

}  // namespace onnx_import
}  // namespace softneuro
