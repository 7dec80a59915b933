// ONNX import: Reductions along axes: Reduce*, Softmax, LogSoftmax, Hardmax, CumSum, TopK, ArgMax/ArgMin, Sum/Mean.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

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
  if ((mode == "max" || mode == "min") && elem_type(n.in(0)) == onnx::TensorProto::BOOL) {
    // Over an empty set max is -inf, min +inf, which as booleans read true;
    // ONNX gives the type's least (false) and greatest (true): clip to [0, 1].
    const std::string r = fresh_blob(y + "/reduced");
    add_unary(n, "reduce", x, r, reduced(mode, keep));
    add_unary(n, "clip", r, y, {{"min", 0.0}, {"max", 1.0}}, "bool");
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

}  // namespace onnx_import
}  // namespace softneuro
