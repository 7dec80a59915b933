// ONNX import: If, Loop and Scan: their bodies as graphs of their own.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

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
    for (const auto& p : branch.node()) convert_node(p);  // in their order: ONNX asks a subgraph's nodes to be sorted
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
  nested.body_ = true;
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
  if (unroll_loop(n, body)) return;
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

}  // namespace onnx_import
}  // namespace softneuro
