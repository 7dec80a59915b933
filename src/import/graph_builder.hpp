// What both importers (ONNX, TensorFlow Lite) build a graph with: names no
// blob or layer has yet, and layers appended with their outputs' shapes
// inferred from their inputs'. Each importer translates its format's operators
// into calls of these.
#pragma once

#include "core/graph.hpp"
#include "core/layer_types.hpp"

#include <fmt/format.h>

#include <string>
#include <unordered_map>
#include <unordered_set>

namespace softneuro::import {

class GraphBuilder {
 protected:
  /// `base`, or base_1, base_2... where a blob already has that name; taken from now on.
  std::string fresh_blob(const std::string& base) {
    std::string name = base;
    for (int k = 1; !taken_blobs_.insert(name).second; ++k) name = fmt::format("{}_{}", base, k);
    return name;
  }
  /// The same for layers; a new layer also avoids the names in `also_taken` (nullptr: none).
  std::string fresh_layer(const std::string& base, const std::unordered_set<std::string>* also_taken = nullptr) {
    auto free = [&](const std::string& n) { return !taken_layers_.count(n) && (!also_taken || !also_taken->count(n)); };
    std::string name = base;
    for (int k = 1; !free(name); ++k) name = fmt::format("{}_{}", base, k);
    taken_layers_.insert(name);
    return name;
  }
  /// Appends `l` to the graph and records its outputs' shapes, inferred from
  /// its inputs' (every input's shape known); throws what shape inference throws.
  void add(Layer l) {
    std::vector<Shape> ins;
    for (const auto& i : l.inputs) ins.push_back(shapes_.at(i));
    const std::vector<Shape> outs = core::infer_layer_shapes(l, ins);
    for (std::size_t k = 0; k < outs.size(); ++k) shapes_[l.outputs[k]] = outs[k];
    graph_.layers.push_back(std::move(l));
  }

  core::Graph graph_;
  std::unordered_map<std::string, Shape> shapes_;  ///< every blob computed so far
  std::unordered_set<std::string> taken_blobs_, taken_layers_;
};

}  // namespace softneuro::import
