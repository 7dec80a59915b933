// Shape computations kept in the graph. Models compute reshape targets, anchor
// grids and masks from the shapes of their tensors (ONNX's Shape -> Gather ->
// Concat -> Reshape chains); folded at one input size they would freeze it.
// Instead they stay `shape_math` layers: small int64/float32 computations on
// the shapes and values of blobs, evaluated when a session meets new input
// shapes. A reshape may take its target from one (input 1, ONNX semantics:
// 0 copies the input dim unless allowzero, -1 infers), and any layer may read
// one as a constant input.
//
// specialize() evaluates them at given input shapes and returns the graph that
// is planned and run at those shapes: no shape_math layer, reshape targets
// resolved, values read by other layers turned into constant layers.
#pragma once

#include "core/graph.hpp"

#include <map>
#include <span>
#include <string>

namespace softneuro::core {

/// True where the graph has a shape_math layer or a reshape reading its target.
bool has_shape_math(const Graph& graph);

/// The graph at these input shapes (every net input named), with `shapes` (if
/// given) set to the shape of every blob. Errors name the layer and the input
/// shapes it fails at.
Graph specialize(const Graph& graph, const std::map<std::string, Shape>& input_shapes,
                 std::map<std::string, Shape>* shapes = nullptr);

/// One shape_math layer's value from its inputs' values (`values[k]` empty
/// where input k is a blob computed at run time) and shapes. Throws Error
/// naming the layer and the field.
Blob evaluate_shape_math(const Layer& layer, std::span<const Blob> values, std::span<const Shape> shapes);

}  // namespace softneuro::core
