// ONNX import: sequences (SequenceEmpty, SequenceConstruct, SplitToSequence,
// SequenceAt, SequenceInsert, SequenceErase, SequenceLength,
// ConcatFromSequence) whose structure is known at import, and the Loops that
// build them over a constant trip count, unrolled. A sequence is the list of
// its tensors' names: each an ordinary value (a constant, a size-dependent
// value or a run-time blob), so what is done to an element is done by the
// converter of the op that does it (Split, Identity, Unsqueeze, Concat).
// TorchScript exports torch.repeat_interleave over a symbolic dim (GPT-J's
// rotary tables) as such a Loop.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

namespace {
/// The most iterations a Loop is unrolled into (its body converted per iteration).
constexpr int64_t kMostUnrolledTrips = 256;
}  // namespace

const std::vector<std::string>& Importer::sequence_of(const Node& n, int k) {
  const auto s = sequences_.find(n.in(k));
  if (s == sequences_.end())
    throw Unsupported{fmt::format("{} of a sequence whose elements are not known at import", n.op())};
  return s->second;
}

int64_t Importer::sequence_position(const Node& n, int k, std::size_t size, bool insert) {
  const Blob* p = constant(n.in(k));
  if (!p || size_dependent(n.in(k)) || p->numel() != 1)
    throw Unsupported{fmt::format("{} at a position computed at run time", n.op())};
  int64_t at = to_ints(*p)[0];
  const auto len = static_cast<int64_t>(size);
  if (at < 0) at += len;
  if (at < 0 || at > len || (!insert && at == len))
    throw n.error(fmt::format("position {} is outside a sequence of {}", to_ints(*p)[0], len), "position");
  return at;
}

std::string Importer::convert_synthesized(const Node& from, const std::string& op, std::vector<std::string> inputs,
                                          std::vector<std::string> outputs,
                                          const std::function<void(onnx::NodeProto&)>& attributes) {
  onnx::NodeProto& p = synthesized_.emplace_back();
  p.set_op_type(op);
  p.set_name(fmt::format("{}/{}{}", from.name, op, synthesized_.size()));
  for (auto& i : inputs) p.add_input(i);
  for (auto& o : outputs) p.add_output(o);
  if (attributes) attributes(p);
  convert_node(p);
  for (const auto& o : p.output())
    if (unavailable_.count(o))
      throw Unsupported{fmt::format("{}'s {} of its elements: {}", from.op(), op,
                                    unsupported_.empty() ? std::string("not converted") : unsupported_.back())};
  return p.output(0);
}

void Importer::convert_node(const onnx::NodeProto& p) {
  const int i = static_cast<int>(nodes_.size());
  nodes_.push_back(&p);
  done_.push_back(true);
  fused_of_.push_back(-1);
  for (const auto& o : p.output())
    if (!o.empty()) producers_[o] = i;
  convert(i);
}

std::string Importer::axes_node(const Node& from, const std::string& op, const std::string& x, std::vector<int64_t> axes,
                                const std::string& y, std::function<void(onnx::NodeProto&)> more) {
  if (default_opset() >= 13) {
    const std::string a = int_constant(from.name + "/axes", Shape{static_cast<int64_t>(axes.size())}, axes);
    return convert_synthesized(from, op, {x, a}, {y}, more);
  }
  return convert_synthesized(from, op, {x}, {y}, [&](onnx::NodeProto& q) {
    auto* attr = q.add_attribute();
    attr->set_name("axes");
    attr->set_type(onnx::AttributeProto::INTS);
    for (int64_t a : axes) attr->add_ints(a);
    if (more) more(q);
  });
}

std::string Importer::int_constant(const std::string& base, const Shape& shape, const std::vector<int64_t>& values) {
  const std::string c = add_constant(base, int_blob(shape, values));
  onnx_types_[c] = onnx::TensorProto::INT64;
  return c;
}

std::string Importer::synthesized_value(const std::string& base) {
  const std::string v = fresh_blob(base);
  consumers_[v];  // read by a node made here: converters make it (used() is true)
  return v;
}

void Importer::sequence_op(const Node& n) {
  const std::string& op = n.op();
  if (op == "SequenceEmpty") {
    sequences_[n.out(0)] = {};
  } else if (op == "SequenceConstruct") {
    std::vector<std::string> items;
    for (int k = 0; k < n.num_inputs(); ++k) items.push_back(n.in(k));
    sequences_[n.out(0)] = std::move(items);
  } else if (op == "SequenceInsert") {
    std::vector<std::string> items = sequence_of(n, 0);
    const int64_t at = n.has_in(2) ? sequence_position(n, 2, items.size(), true) : static_cast<int64_t>(items.size());
    items.insert(items.begin() + at, n.in(1));
    sequences_[n.out(0)] = std::move(items);
  } else if (op == "SequenceErase") {
    std::vector<std::string> items = sequence_of(n, 0);
    if (items.empty()) throw n.error("erasing from an empty sequence", "input_sequence");
    const int64_t at = n.has_in(1) ? sequence_position(n, 1, items.size(), false) : static_cast<int64_t>(items.size()) - 1;
    items.erase(items.begin() + at);
    sequences_[n.out(0)] = std::move(items);
  } else if (op == "SequenceLength") {
    constants_[n.out(0)] = int_blob(Shape{}, {static_cast<int64_t>(sequence_of(n, 0).size())});
    onnx_types_[n.out(0)] = onnx::TensorProto::INT64;
  } else if (op == "SequenceAt") {
    const std::vector<std::string>& items = sequence_of(n, 0);
    convert_synthesized(n, "Identity", {items[static_cast<std::size_t>(sequence_position(n, 1, items.size(), false))]},
                        {n.out(0)});
  } else if (op == "ConcatFromSequence") {
    const std::vector<std::string>& items = sequence_of(n, 0);
    if (items.empty()) throw n.error("concatenating an empty sequence", "input_sequence");
    const int64_t axis = n.get_int("axis");
    std::vector<std::string> parts = items;
    if (n.get_int("new_axis", 0)) {  // each element gains the axis first (as a stack)
      const int rank = shape_of(n, items[0]).rank() + 1;
      const int64_t a = normalized_axis(n, axis, rank, "axis");
      for (auto& p : parts) p = axes_node(n, "Unsqueeze", p, {a}, fresh_blob(p + "/unsqueezed"));
    }
    convert_synthesized(n, "Concat", parts, {n.out(0)}, [&](onnx::NodeProto& q) {
      auto* attr = q.add_attribute();
      attr->set_name("axis");
      attr->set_type(onnx::AttributeProto::INT);
      attr->set_i(axis);
    });
  } else if (op == "SplitToSequence") {
    const Shape xs = shape_of(n, n.in(0));
    const int64_t axis = normalized_axis(n, n.get_int("axis", 0), xs.rank(), "axis");
    const int64_t dim = xs[static_cast<int>(axis)];
    std::vector<int64_t> sizes;
    const bool given = n.has_in(1);
    if (given) {  // (sizes computed from the input's are taken at their values here, as a Loop's count)
      const Blob* s = constant(n.in(1));
      if (!s) throw Unsupported{"SplitToSequence with split sizes computed at run time"};
      const std::vector<int64_t> v = to_ints(*s);
      if (s->shape().rank() == 0) {  // chunks of this size, the last one shorter
        if (v[0] < 1) throw n.error(fmt::format("split {} is not a positive size", v[0]), "split");
        for (int64_t at = 0; at < dim; at += v[0]) sizes.push_back(std::min(v[0], dim - at));
      } else {
        sizes = v;
      }
    } else {
      sizes.assign(static_cast<std::size_t>(dim), 1);
    }
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) throw n.error(fmt::format("split size {} is negative", s), "split");
      total += s;
    }
    if (total != dim) throw n.error(fmt::format("split sizes add to {}, not the dim's {}", total, dim), "split");
    if (static_cast<int64_t>(sizes.size()) > kMostUnrolledTrips)
      throw Unsupported{fmt::format("SplitToSequence into {} tensors (at most {})", sizes.size(), kMostUnrolledTrips)};
    std::vector<std::string> parts;
    for (std::size_t k = 0; k < sizes.size(); ++k) parts.push_back(fresh_blob(fmt::format("{}/{}", n.out(0), k)));
    if (sizes.size() == 1) {
      convert_synthesized(n, "Identity", {n.in(0)}, {parts[0]});
    } else {
      const std::string split = add_constant(n.name + "/split", int_blob(Shape{static_cast<int64_t>(sizes.size())}, sizes));
      onnx_types_[split] = onnx::TensorProto::INT64;
      auto axis_attr = [&](onnx::NodeProto& q) {
        auto* attr = q.add_attribute();
        attr->set_name("axis");
        attr->set_type(onnx::AttributeProto::INT);
        attr->set_i(axis);
        if (default_opset() < 13) {
          auto* s = q.add_attribute();
          s->set_name("split");
          s->set_type(onnx::AttributeProto::INTS);
          for (int64_t v : sizes) s->add_ints(v);
        }
      };
      convert_synthesized(n, "Split", default_opset() >= 13 ? std::vector<std::string>{n.in(0), split}
                                                             : std::vector<std::string>{n.in(0)},
                          parts, axis_attr);
    }
    if (!given && n.get_int("keepdims", 1) == 0) {  // each part loses the axis
      for (auto& p : parts) p = axes_node(n, "Squeeze", p, {axis}, fresh_blob(p + "/squeezed"));
    }
    sequences_[n.out(0)] = std::move(parts);
  } else {
    throw Unsupported{"sequence operator"};
  }
}

bool Importer::unroll_loop(const Node& n, const onnx::GraphProto& body) {
  const int carried = n.num_inputs() - 2;
  bool any_sequence = false;
  for (int k = 0; k < carried; ++k) any_sequence = any_sequence || (n.has_in(2 + k) && sequences_.count(n.in(2 + k)));
  if (!any_sequence || !n.has_in(0)) return false;
  // (A count computed from sizes is unrolled at its value here; where it
  // changes with them, so does the graph, and the import keeps those dims
  // fixed, with its warning.)
  const Blob* m = constant(n.in(0));
  if (!m || m->numel() != 1) return false;
  int64_t trips = std::max<int64_t>(0, to_ints(*m)[0]);
  if (trips > kMostUnrolledTrips)
    throw Unsupported{fmt::format("Loop building a sequence over {} iterations (at most {} unrolled)", trips, kMostUnrolledTrips)};
  if (n.has_in(1)) {
    const Blob* cond = constant(n.in(1));
    if (!cond || size_dependent(n.in(1)) || cond->numel() != 1)
      throw Unsupported{"Loop building a sequence with a condition computed at run time"};
    if (to_ints(*cond)[0] == 0) trips = 0;  // no iteration: the carried values as they came in
  }
  for (const auto& p : body.node())
    for (const auto& a : p.attribute())
      if (a.has_g() || a.graphs_size()) throw Unsupported{"Loop building a sequence with a subgraph in its body"};
  const int scans = n.num_outputs() - carried;
  std::vector<std::string> current;
  for (int k = 0; k < carried; ++k) current.push_back(n.in(2 + k));
  std::vector<std::vector<std::string>> scanned(static_cast<std::size_t>(std::max(0, scans)));
  for (int64_t it = 0; it < trips; ++it) {
    // The body's own names, renamed per iteration; names from outside stay.
    std::unordered_map<std::string, std::string> names;
    auto local = [&](const std::string& x) {
      auto [e, fresh] = names.emplace(x, std::string());
      if (fresh) e->second = fresh_blob(fmt::format("{}@{}", x, it));
      return e->second;
    };
    const std::string iteration = local(body.input(0).name()), cond = local(body.input(1).name());
    constants_[iteration] = int_blob(Shape{}, {it});
    onnx_types_[iteration] = onnx::TensorProto::INT64;
    constants_[cond] = int_blob(Shape{}, {1});
    onnx_types_[cond] = onnx::TensorProto::BOOL;
    // The body reads the carried values themselves, tensors and sequences alike.
    for (int k = 0; k < carried; ++k) names[body.input(2 + k).name()] = current[static_cast<std::size_t>(k)];
    for (const auto& t : body.initializer()) {
      const std::string x = local(t.name());
      constants_[x] = read_tensor(t, src_, n.name, "body");
      onnx_types_[x] = t.data_type();
    }
    for (const auto& p : body.node()) {
      onnx::NodeProto& q = synthesized_.emplace_back(p);
      q.set_name(fmt::format("{}@{}", p.name().empty() ? p.op_type() : p.name(), it));
      for (int k = 0; k < q.input_size(); ++k)
        if (!q.input(k).empty() && names.count(q.input(k))) q.set_input(k, names.at(q.input(k)));
      for (int k = 0; k < q.output_size(); ++k)
        if (!q.output(k).empty()) q.set_output(k, local(q.output(k)));
      convert_node(q);
    }
    auto out = [&](int k) {
      const std::string& name = body.output(k).name();
      return names.count(name) ? names.at(name) : name;
    };
    const std::string again = out(0);
    if (unavailable_.count(again)) throw Unsupported{"Loop body not converted"};
    const Blob* c = constant(again);
    if (!c || size_dependent(again) || c->numel() != 1)
      throw Unsupported{"Loop building a sequence whose body computes its condition at run time"};
    for (int k = 0; k < carried; ++k) current[static_cast<std::size_t>(k)] = out(1 + k);
    for (int s = 0; s < scans; ++s) scanned[static_cast<std::size_t>(s)].push_back(out(1 + carried + s));
    if (to_ints(*c)[0] == 0) break;
  }
  for (int k = 0; k < carried && k < n.num_outputs(); ++k) {
    if (n.out(k).empty()) continue;
    const std::string& x = current[static_cast<std::size_t>(k)];
    if (unavailable_.count(x)) throw Unsupported{"Loop body not converted"};
    if (sequences_.count(x)) sequences_[n.out(k)] = sequences_.at(x);
    else convert_synthesized(n, "Identity", {x}, {n.out(k)});
  }
  for (int s = 0; s < scans; ++s) {  // each iteration's value stacked along a new first axis
    const std::string y = n.out(carried + s);
    if (y.empty()) continue;
    std::vector<std::string>& values = scanned[static_cast<std::size_t>(s)];
    if (values.empty()) throw Unsupported{"Loop with scan outputs and no iteration"};
    for (auto& v : values) v = axes_node(n, "Unsqueeze", v, {0}, fresh_blob(v + "/stacked"));
    convert_synthesized(n, "Concat", values, {y}, [](onnx::NodeProto& q) {
      auto* attr = q.add_attribute();
      attr->set_name("axis");
      attr->set_type(onnx::AttributeProto::INT);
      attr->set_i(0);
    });
  }
  return true;
}

}  // namespace onnx_import
}  // namespace softneuro
