// The net as data: layers, named inputs/outputs (Graph), and beside it what
// tuning adds (Tuning: routine paths, quantisation, prepared weights). A .dnn
// file holds both; the importer builds a graph (and a quantised model's own
// quantisation); graph passes rewrite graphs; plans read both.
#pragma once

#include <softneuro/session.hpp>
#include <softneuro/routine.hpp>

#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace softneuro::core {

/// The routine chosen for one layer. For a childnet routine, `children` holds
/// the choices of its child layers (named "<parent>/<child>"), recursively.
struct RoutineChoice {
  std::string layer;
  std::string descriptor;
  RoutineParams params;
  double predicted_ms = 0;
  double measured_ms = 0;
  std::vector<RoutineChoice> children;
  /// The child choice for child layer `layer`, or nullptr.
  const RoutineChoice* find_child(const std::string& layer) const;
};

/// An adapt routine on an edge: the blob `blob` as read by `consumer` is
/// converted from one schema to another by `steps` (adapt descriptors).
struct AdaptChoice {
  std::string blob;
  std::string consumer;
  std::string from_schema;
  std::string to_schema;
  std::vector<std::string> steps;
  double predicted_ms = 0;
  RoutineParams params;  ///< of the adapt routine (steps[0]), as the tuner measured it
};

/// One routine per layer plus the adapts it implies, and the device it was tuned on.
struct RoutinePath {
  std::string device_fingerprint;
  std::vector<RoutineChoice> routines;
  std::vector<AdaptChoice> adapts;
  /// softneuro::openmp_wait() when the path was measured (empty: not recorded).
  std::string openmp_wait;
  /// The net input shapes it was measured at (empty: the model's default shapes).
  std::map<std::string, Shape> input_shapes;
  /// How tune() checked its accuracy (absent: not recorded).
  std::optional<AccuracyCheck> accuracy;
  bool empty() const { return routines.empty(); }
  const RoutineChoice* find(const std::string& layer) const;
};

struct Graph {
  std::string name;
  std::vector<TensorInfo> inputs;
  std::vector<std::string> outputs;
  /// Outputs the net hands back in another dtype than float32 (typed outputs:
  /// indices, masks), converted at the net's edge; absent: float32.
  std::map<std::string, DType> output_dtypes;
  std::vector<Layer> layers;
  /// Keeps memory alive that weights view (e.g. a memory-mapped file).
  std::shared_ptr<const void> storage;

  const Layer* find_layer(const std::string& name) const;
};

/// What tuning and calibration add to a graph, kept beside it (layers named,
/// never copied): a plan reads the graph with one of these.
struct Tuning {
  RoutinePath routine_path;
  /// Routine paths tuned at other input shapes (tune --shapes), one per shape bucket.
  std::vector<RoutinePath> shape_paths;
  /// Quantisation of activation blobs, by blob name: calibrated, or a quantised
  /// model's own (core::quantise_by_model).
  std::map<std::string, QuantParams> blob_quant;
  /// Derived weights of the routine path, ready to use (packed, transformed,
  /// reordered), by the whole key of the model's weight store; used where
  /// `prepared_tag` is this library's prepared_weights_tag(). Empty: none.
  std::shared_ptr<const std::map<std::string, Blob>> prepared;
  std::string prepared_tag;

  /// The routine path to run at these input shapes (`graph`'s default shapes
  /// where a path names none): the one tuned at them, else the nearest (dims
  /// compared by ratio); `exact` says which.
  const RoutinePath& path_for(const Graph& graph, const std::map<std::string, Shape>& input_shapes, bool* exact) const;
};

/// A graph and its tuning, as a .dnn file holds them.
struct TunedGraph {
  Graph graph;
  Tuning tuning;
};

/// Checks the DAG: unique layer and blob names, every blob produced once
/// (by a layer or as a net input), every input read exists, no cycles, every
/// output produced. Returns layer indices in a topological order (stable:
/// the given order where it is already topological). Throws Error naming the layer.
std::vector<std::size_t> check_and_order(const Graph& graph);

/// Puts graph.layers in the order of check_and_order.
void sort_topologically(Graph& graph);

struct SpecializeState;  // core/shape_plan.hpp

/// Shape of every blob of a checked, sorted graph: net inputs and each layer's
/// outputs, via each layer type's shape inference. Throws Error naming the layer.
std::map<std::string, Shape> infer_shapes(const Graph& graph);
/// The same at other input shapes (every net input named in `input_shapes`).
/// A graph with shape computations is specialised at them to tell (specialize,
/// core/shape_plan.hpp): where `specialized` is given, it receives that graph
/// (a plan at these shapes is built from it: build_plan), else it is dropped;
/// `state` (if given) what specialize computed (core/shape_plan.hpp), and
/// `input_values` the values of the inputs that set shapes (value_inputs).
std::map<std::string, Shape> infer_shapes(const Graph& graph, const std::map<std::string, Shape>& input_shapes,
                                          Graph* specialized = nullptr, SpecializeState* state = nullptr,
                                          const std::map<std::string, Blob>* input_values = nullptr);
/// Throws Error (naming `layer` and `field`) where a shape has a negative dim,
/// or an element count that overflows or exceeds what any machine holds
/// (2^46), so that damaged files cannot make the planner wrap around.
void check_size(const Shape& s, const std::string& layer, const std::string& field);
/// Throws Error naming the input where `shape` is not one it takes: another
/// rank, or another size in a dim that is not dynamic.
void check_input_shape(const TensorInfo& input, const Shape& shape);

/// "strides=[1,1] group=1 weight:[64,3,7,7]" for inspect and error messages.
std::string describe_params(const Layer& layer);

/// A step's quantisation, as sessions and tuning reports name it: each input's,
/// then each output's, "-" where none; per tensor "scale/zero point", per axis
/// "axisA:N#DIGEST" (N channels, the digest of their scales and zero points).
/// Empty where no blob of the step is quantised.
std::string describe_quant(const std::vector<QuantParams>& inputs, const std::vector<QuantParams>& outputs);

}  // namespace softneuro::core
