// Models whose tensor sizes depend on values: NonMaxSuppression keeps as many
// boxes as the scores allow, NonZero finds as many indices as there are. Such
// a layer (LayerType::value_shaped) is planned at its outputs' capacity; the
// layers that read those outputs cannot be planned before it has run. The
// graph is cut into stages: stage 0 is everything that needs no such output;
// stage k+1 the layers that read one written in stage k. A session runs the
// stages in turn, each planned (and cached) at the actual shapes the stages
// before it produced, so the post-processing after a detector's NMS plans at
// the number of boxes kept, and the backbone before it is planned once.
#pragma once

#include "core/graph.hpp"

#include <map>
#include <string>
#include <vector>

namespace softneuro::core {

/// Whether a layer of the graph is value-shaped.
bool has_value_shaped(const Graph& graph);

/// One stage: a graph of its own whose inputs are the net inputs and earlier
/// stages' blobs it reads (those at their capacity shapes, every dim dynamic),
/// and whose outputs are its blobs that later stages read or the net returns.
/// Plan-time layers (shape computations) and constants are copied into every
/// stage that reads them. It keeps the model's routine path, quantisation and
/// prepared weights (layer names are the model's).
struct Stage {
  Graph graph;
  /// Its outputs a value-shaped layer writes: after a run they hold the actual
  /// shape (Executor::value_shape), the capacity's first elements.
  std::vector<std::string> value_shaped;
};

/// The stages of a sorted graph with a value-shaped layer, `shapes` every
/// blob's shape at the default input shapes (value-shaped outputs: their capacity).
std::vector<Stage> split_stages(const Graph& graph, const std::map<std::string, Shape>& shapes);

}  // namespace softneuro::core
