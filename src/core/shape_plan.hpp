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
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace softneuro::core {

/// True where the graph has a shape_math layer or a reshape reading its target.
bool has_shape_math(const Graph& graph);

/// The net inputs whose values set shapes: read by a shape computation for
/// their values (Range's bounds, a window's size, ConstantOfShape's shape), as
/// a reshape target, a trip count or a branch condition. A session plans per
/// value of these, as per input shape (their default plan: value_default).
std::vector<std::string> value_inputs(const Graph& graph);
/// What the shape computations read of such an input given `value`: its
/// values as int64 (integers, bools) or float32. Throws Error naming the input
/// where it is not in host memory or too large to be a shape.
Blob shape_value(const std::string& input, const Blob& value);
/// Whether `kept` (shape_value's form) is what shape_value gives of `given`,
/// allocating nothing (a session's check at each run).
bool same_shape_value(const Blob& kept, const Blob& given);
/// The value planned for where none is given (a session's first plan, the
/// model's default shapes): ones, an int64 or float32 blob of the input's
/// default shape.
Blob value_default(const TensorInfo& input);

/// What specialize() computed at one set of input shapes, kept to compute
/// another's incrementally (respecialize): every blob's shape, the values of
/// shape computations and constants, and which layers it folded. Its keys view
/// the graph's own strings: valid while that graph lives, unchanged.
struct SpecializeState {
  std::unordered_map<std::string_view, Shape> shapes;
  std::unordered_map<std::string_view, Blob> values;
  std::unordered_set<std::string_view> sized;  ///< values that depend on the input shapes
  std::vector<char> folded;                    ///< per layer of the graph: computed at the shapes, not run
  std::unordered_set<std::string_view> read_as_data;  ///< blobs a layer reads as data (not only shape_math)
};

/// The graph at these input shapes (every net input named), with `shapes` (if
/// given) set to the shape of every blob, and `state` (if given) what it
/// computed. Errors name the layer and the input shapes it fails at.
/// `input_values`: those of value_inputs (by name, shape_value's form); where
/// one is not given, value_default's.
Graph specialize(const Graph& graph, const std::map<std::string, Shape>& input_shapes,
                 std::map<std::string, Shape>* shapes = nullptr, SpecializeState* state = nullptr,
                 const std::map<std::string, Blob>* input_values = nullptr);

/// What differs between the graph specialised at a state's input shapes and at
/// new ones (respecialize).
struct SpecializeChanges {
  std::vector<std::string_view> blobs;             ///< whose shape changed
  std::map<std::string, Blob> constants;           ///< constant layers (by name) whose value may have changed
  std::map<std::string, std::map<std::string, Attr>> params;  ///< layers (by name) whose parameters may have changed
};

/// The changes from the graph specialised at `state`'s input shapes to the
/// graph at `input_shapes`, `state` moved there: only the layers reading a
/// blob whose shape or value changed are evaluated again (a decode step at a
/// new cache length evaluates its attention's few, not the whole graph's
/// shape computations). Nothing, and `state` unusable, where the graph folds
/// otherwise there or a layer fails there (specialize then says why).
std::optional<SpecializeChanges> respecialize(const Graph& graph, const std::map<std::string, Shape>& input_shapes,
                                              SpecializeState& state);

/// One shape_math layer's value from its inputs' values (`values[k]` empty
/// where input k is a blob computed at run time) and shapes. Throws Error
/// naming the layer and the field.
Blob evaluate_shape_math(const Layer& layer, std::span<const Blob> values, std::span<const Shape> shapes);

}  // namespace softneuro::core
