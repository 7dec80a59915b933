#include "core/stages.hpp"

#include "core/layer_types.hpp"

#include <softneuro/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace softneuro::core {

namespace {
const LayerType* type_of(const Layer& l) { return find_layer_type(l.type); }
bool value_shaped(const Layer& l) { return is_value_shaped(l); }
/// Computed when a stage is planned, from shapes and constants: copied into each stage reading it.
bool copied(const Layer& l) {
  const LayerType* t = type_of(l);
  return l.inputs.empty() || (t && t->plan_time);
}
}  // namespace

bool has_value_shaped(const Graph& g) { return std::any_of(g.layers.begin(), g.layers.end(), value_shaped); }

std::vector<Stage> split_stages(const Graph& g, const std::map<std::string, Shape>& shapes) {
  // The stage where each blob can first be read: net inputs 0, a layer's
  // outputs its own stage, a value-shaped layer's the next.
  std::unordered_map<std::string, int> ready;
  std::unordered_map<std::string, std::size_t> producer;
  for (const auto& in : g.inputs) ready[in.name] = 0;
  std::vector<int> stage_of(g.layers.size(), 0);
  int stages = 1;
  for (std::size_t i = 0; i < g.layers.size(); ++i) {
    const Layer& l = g.layers[i];
    int s = 0;
    for (const auto& in : l.inputs) {
      auto it = ready.find(in);
      if (it == ready.end()) throw Error(fmt::format("input '{}' is not computed before this layer", in), {}, l.name, "inputs");
      s = std::max(s, it->second);
    }
    stage_of[i] = s;
    stages = std::max(stages, s + 1);
    for (const auto& out : l.outputs) {
      ready[out] = s + (value_shaped(l) ? 1 : 0);
      producer[out] = i;
    }
  }
  std::set<std::string> net_outputs(g.outputs.begin(), g.outputs.end());
  // Each stage's layers (by index, in graph order): its own, the copied layers
  // they read (transitively), and the copied layers the net returns from it.
  std::vector<std::vector<char>> member(static_cast<std::size_t>(stages), std::vector<char>(g.layers.size(), 0));
  for (int k = 0; k < stages; ++k) {
    auto& in_k = member[static_cast<std::size_t>(k)];
    std::vector<std::size_t> todo;
    for (std::size_t i = 0; i < g.layers.size(); ++i) {
      const Layer& l = g.layers[i];
      const bool returned = std::any_of(l.outputs.begin(), l.outputs.end(), [&](const std::string& o) { return net_outputs.count(o) != 0; });
      if (stage_of[i] == k && (!copied(l) || returned)) in_k[i] = 1, todo.push_back(i);
    }
    while (!todo.empty()) {
      const Layer& l = g.layers[todo.back()];
      todo.pop_back();
      for (const auto& in : l.inputs) {
        auto p = producer.find(in);
        if (p == producer.end() || in_k[p->second] || !copied(g.layers[p->second])) continue;
        in_k[p->second] = 1;
        todo.push_back(p->second);
      }
    }
  }
  // What each stage reads from outside it, and so what each must hand on.
  std::vector<std::vector<std::string>> reads(static_cast<std::size_t>(stages));
  std::unordered_set<std::string> read_later;  // blobs some stage reads from an earlier one
  for (int k = 0; k < stages; ++k) {
    const auto& in_k = member[static_cast<std::size_t>(k)];
    std::unordered_set<std::string> made, seen;
    for (std::size_t i = 0; i < g.layers.size(); ++i)
      if (in_k[i])
        for (const auto& o : g.layers[i].outputs) made.insert(o);
    for (const auto& in : g.inputs) {
      bool read = false;
      for (std::size_t i = 0; i < g.layers.size() && !read; ++i)
        read = in_k[i] && std::find(g.layers[i].inputs.begin(), g.layers[i].inputs.end(), in.name) != g.layers[i].inputs.end();
      if (read || k == 0) reads[static_cast<std::size_t>(k)].push_back(in.name), seen.insert(in.name);
    }
    for (std::size_t i = 0; i < g.layers.size(); ++i) {
      if (!in_k[i]) continue;
      for (const auto& in : g.layers[i].inputs)
        if (!made.count(in) && seen.insert(in).second) {
          reads[static_cast<std::size_t>(k)].push_back(in);
          read_later.insert(in);
        }
    }
  }
  std::vector<Stage> out(static_cast<std::size_t>(stages));
  for (int k = 0; k < stages; ++k) {
    Stage& st = out[static_cast<std::size_t>(k)];
    Graph& sg = st.graph;
    const auto& in_k = member[static_cast<std::size_t>(k)];
    sg.name = stages == 1 ? g.name : fmt::format("{} (stage {})", g.name, k);
    for (const auto& name : reads[static_cast<std::size_t>(k)]) {
      auto net = std::find_if(g.inputs.begin(), g.inputs.end(), [&](const TensorInfo& t) { return t.name == name; });
      if (net != g.inputs.end()) {
        sg.inputs.push_back(*net);
        continue;
      }
      TensorInfo t{name, shapes.at(name), DType::float32, {}};
      for (int d = 0; d < t.shape.rank(); ++d) t.dynamic_dims.push_back(d);
      sg.inputs.push_back(std::move(t));
    }
    std::unordered_set<std::string> own;  // outputs of the stage's own (not copied) layers, and returned copies
    for (std::size_t i = 0; i < g.layers.size(); ++i) {
      if (!in_k[i]) continue;
      const Layer& l = g.layers[i];
      sg.layers.push_back(l);
      if (stage_of[i] == k)
        for (const auto& o : l.outputs) {
          if (copied(l) && !net_outputs.count(o)) continue;
          own.insert(o);
          if (value_shaped(l)) st.value_shaped.push_back(o);
        }
    }
    for (const auto& o : g.outputs)
      if (own.count(o)) sg.outputs.push_back(o);
    for (std::size_t i = 0; i < g.layers.size(); ++i)
      if (in_k[i] && stage_of[i] == k)
        for (const auto& o : g.layers[i].outputs)
          if (own.count(o) && read_later.count(o) && !net_outputs.count(o)) sg.outputs.push_back(o);
    for (const auto& [blob, dtype] : g.output_dtypes)
      if (own.count(blob) && net_outputs.count(blob)) sg.output_dtypes[blob] = dtype;
    sg.storage = g.storage;  // (the stages share the model's tuning: layers keep their names)
  }
  return out;
}

}  // namespace softneuro::core
