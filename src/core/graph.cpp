#include "core/graph.hpp"

#include "core/hash.hpp"
#include "core/layer_types.hpp"
#include "core/shape_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <queue>
#include <set>
#include <unordered_map>

namespace softneuro::core {

const RoutineChoice* RoutinePath::find(const std::string& layer) const {
  for (const auto& r : routines)
    if (r.layer == layer) return &r;
  return nullptr;
}

const RoutineChoice* RoutineChoice::find_child(const std::string& l) const {
  for (const auto& c : children)
    if (c.layer == l) return &c;
  return nullptr;
}

const Layer* Graph::find_layer(const std::string& n) const {
  for (const auto& l : layers)
    if (l.name == n) return &l;
  return nullptr;
}

std::vector<std::size_t> check_and_order(const Graph& g) {
  // Who produces each blob: -1 for a net input.
  std::unordered_map<std::string, long> producer;
  for (const auto& in : g.inputs) {
    if (in.name.empty()) throw Error("a net input has an empty name", {}, {}, "inputs");
    if (!producer.emplace(in.name, -1).second)
      throw Error(fmt::format("duplicate net input '{}'", in.name), {}, {}, "inputs");
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    const Layer& l = g.layers[i];
    if (l.name.empty()) throw Error(fmt::format("layer #{} has an empty name", i), {}, {}, "name");
    if (!names.insert(l.name).second) throw Error("duplicate layer name", {}, l.name, "name");
    for (const auto& o : l.outputs) {
      if (o.empty()) throw Error("an output blob has an empty name", {}, l.name, "outputs");
      auto [it, fresh] = producer.emplace(o, static_cast<long>(i));
      if (!fresh)
        throw Error(fmt::format("blob '{}' is produced twice (also by {})", o,
                                it->second < 0 ? std::string("the net input") : "layer '" + g.layers[static_cast<std::size_t>(it->second)].name + "'"),
                    {}, l.name, "outputs");
    }
  }
  // Kahn's algorithm; ready layers taken in their given order (stable).
  std::vector<std::size_t> indegree(g.layers.size());
  std::vector<std::vector<std::size_t>> consumers(g.layers.size());
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    for (const auto& in : g.layers[i].inputs) {
      auto it = producer.find(in);
      if (it == producer.end())
        throw Error(fmt::format("input blob '{}' is produced by no layer and is not a net input", in), {},
                    g.layers[i].name, "inputs");
      if (it->second >= 0) {
        ++indegree[i];
        consumers[static_cast<std::size_t>(it->second)].push_back(i);
      }
    }
  }
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < g.layers.size(); ++i)
    if (indegree[i] == 0) ready.push(i);
  std::vector<std::size_t> order;
  while (!ready.empty()) {
    std::size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (auto c : consumers[i])
      if (--indegree[c] == 0) ready.push(c);
  }
  if (order.size() != g.layers.size()) {
    for (std::size_t i = 0; i < g.layers.size(); ++i)
      if (indegree[i] != 0) throw Error("the net has a cycle through this layer", {}, g.layers[i].name, "inputs");
  }
  if (g.outputs.empty()) throw Error("the net has no outputs", {}, {}, "outputs");
  std::set<std::string> outs;
  for (const auto& o : g.outputs) {
    if (!producer.count(o)) throw Error(fmt::format("net output '{}' is produced by no layer", o), {}, {}, "outputs");
    if (!outs.insert(o).second) throw Error(fmt::format("duplicate net output '{}'", o), {}, {}, "outputs");
  }
  return order;
}

void sort_topologically(Graph& g) {
  auto order = check_and_order(g);
  std::vector<Layer> sorted;
  sorted.reserve(order.size());
  for (auto i : order) sorted.push_back(std::move(g.layers[i]));
  g.layers = std::move(sorted);
}

void check_size(const Shape& s, const std::string& layer, const std::string& field) {
  constexpr int64_t kMax = int64_t{1} << 46;
  int64_t n = 1;
  for (auto d : s) {
    if (d < 0) throw Error(fmt::format("negative dim in {}", s.to_string()), {}, layer, field);
    if (d != 0 && n > kMax / d) throw Error(fmt::format("shape {} is too large", s.to_string()), {}, layer, field);
    n *= d;
  }
}

std::map<std::string, Shape> infer_shapes(const Graph& g) {
  std::map<std::string, Shape> inputs;
  for (const auto& in : g.inputs) inputs[in.name] = in.shape;
  return infer_shapes(g, inputs);
}

const RoutinePath& Tuning::path_for(const Graph& g, const std::map<std::string, Shape>& inputs, bool* exact) const {
  auto shapes_of = [&](const RoutinePath& p) {
    if (!p.input_shapes.empty()) return p.input_shapes;
    std::map<std::string, Shape> d;
    for (const auto& in : g.inputs) d[in.name] = in.shape;
    return d;
  };
  auto distance = [&](const std::map<std::string, Shape>& at) {
    double d = 0;
    for (const auto& [name, s] : inputs) {
      auto it = at.find(name);
      if (it == at.end() || it->second.rank() != s.rank()) return std::numeric_limits<double>::infinity();
      for (int i = 0; i < s.rank(); ++i)
        d += std::abs(std::log(static_cast<double>(s[i]) / static_cast<double>(std::max<int64_t>(1, it->second[i]))));
    }
    return d;
  };
  const RoutinePath* best = &routine_path;
  double best_d = distance(shapes_of(routine_path));
  for (const auto& p : shape_paths)
    if (double d = distance(shapes_of(p)); d < best_d) best = &p, best_d = d;
  if (exact) *exact = best_d == 0;
  return *best;
}

void check_input_shape(const TensorInfo& in, const Shape& s) {
  bool fits = s.rank() == in.shape.rank();
  for (int i = 0; fits && i < s.rank(); ++i)
    fits = s[i] == in.shape[i] ||
           (s[i] >= 0 && std::find(in.dynamic_dims.begin(), in.dynamic_dims.end(), i) != in.dynamic_dims.end());
  if (fits) return;
  std::string want = "[";
  for (int i = 0; i < in.shape.rank(); ++i) {
    const bool dynamic = std::find(in.dynamic_dims.begin(), in.dynamic_dims.end(), i) != in.dynamic_dims.end();
    want += fmt::format("{}{}", i ? "," : "", dynamic ? std::string("?") : std::to_string(in.shape[i]));
  }
  throw Error(fmt::format("input '{}' has shape {}; the model takes {} (? : any size)", in.name, s.to_string(), want + "]"),
              {}, {}, in.name);
}

std::map<std::string, Shape> infer_shapes(const Graph& g, const std::map<std::string, Shape>& input_shapes,
                                          Graph* specialized, SpecializeState* state,
                                          const std::map<std::string, Blob>* input_values) {
  std::map<std::string, Shape> shapes;
  for (const auto& in : g.inputs) {
    auto given = input_shapes.find(in.name);
    if (given == input_shapes.end()) throw Error(fmt::format("no shape for net input '{}'", in.name), {}, {}, in.name);
    const Shape& s = given->second;
    for (auto d : s)
      if (d < 0) throw Error(fmt::format("net input '{}' has a negative dim in {}", in.name, s.to_string()), {}, {}, "inputs");
    check_size(s, {}, "inputs." + in.name);
    shapes[in.name] = s;
  }
  if (has_shape_math(g)) {  // values computed from shapes: evaluated at these shapes
    const auto inputs = shapes;
    Graph at = specialize(g, inputs, &shapes, state, input_values);
    if (specialized) *specialized = std::move(at);
    for (const auto& [blob, s] : shapes) check_size(s, {}, blob);
    return shapes;
  }
  std::vector<Shape> ins;
  for (const auto& l : g.layers) {
    ins.clear();
    for (const auto& i : l.inputs) {
      auto it = shapes.find(i);
      if (it == shapes.end()) throw Error(fmt::format("input '{}' is not computed before this layer", i), {}, l.name, "inputs");
      ins.push_back(it->second);
    }
    auto outs = infer_layer_shapes(l, ins);
    for (std::size_t k = 0; k < outs.size(); ++k) {
      check_size(outs[k], l.name, "outputs");
      shapes[l.outputs[k]] = outs[k];
    }
  }
  return shapes;
}

std::string describe_quant(const std::vector<QuantParams>& inputs, const std::vector<QuantParams>& outputs) {
  auto one = [](const QuantParams& q) -> std::string {
    if (q.empty()) return "-";
    if (q.axis < 0 && q.scales.size() == 1)
      return fmt::format("{:.9g}/{}", q.scales[0], q.zero_points.empty() ? 0 : q.zero_points[0]);
    const uint64_t h = xxh64(q.scales.data(), q.scales.size() * sizeof(float),
                             xxh64(q.zero_points.data(), q.zero_points.size() * sizeof(int32_t)));
    return fmt::format("axis{}:{}#{:08x}", q.axis, q.scales.size(), static_cast<uint32_t>(h));
  };
  const bool any = std::any_of(inputs.begin(), inputs.end(), [](const QuantParams& q) { return !q.empty(); }) ||
                   std::any_of(outputs.begin(), outputs.end(), [](const QuantParams& q) { return !q.empty(); });
  if (!any) return {};
  std::vector<std::string> in, out;
  for (const auto& q : inputs) in.push_back(one(q));
  for (const auto& q : outputs) out.push_back(one(q));
  return fmt::format("in {} out {}", fmt::join(in, ","), fmt::join(out, ","));
}

std::string describe_params(const Layer& l) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : l.params) {
    std::visit(
        [&, &k = k](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>)
            parts.push_back(fmt::format("{}=[{}]", k, fmt::join(x, ",")));
          else
            parts.push_back(fmt::format("{}={}", k, x));
        },
        v);
  }
  for (const auto& [k, b] : l.weights) parts.push_back(fmt::format("{}:{}{}", k, b.shape().to_string(), b.dtype() == DType::float32 ? "" : fmt::format(":{}", to_string(b.dtype()))));
  return fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace softneuro::core
