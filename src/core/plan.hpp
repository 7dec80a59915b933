// The plan: what a session runs at one set of input shapes, decided before
// anything is prepared. Its steps in execution order (each layer's routine
// and parameters, the adapts between schemas, childnet routines' children,
// every step's LayerInfo), the blob table and the net's edges. The executor
// prepares and runs a plan; the tuner reads the same plan (each layer's
// LayerInfo, the untuned default path), so what it prices is what runs.
#pragma once

#include "core/graph.hpp"
#include "core/registry.hpp"
#include "core/weight_store.hpp"

#include <softneuro/routine.hpp>

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace softneuro::core {

/// The name of the adapt step converting slot `from` (a blob, or "blob@schema":
/// its shared copy in that schema) to `to` for `consumer` ("": the shared copy
/// itself, read by several layers).
std::string adapt_step_name(const std::string& from, const std::string& consumer, const Schema& to);

/// One layer (or inserted adapt) in execution order; the executor prepares it.
struct Step {
  std::string name;          ///< layer name, or "adapt:<blob>-><consumer>"
  std::string parent;        ///< for a childnet's child: the layer whose routine it implements
  std::string adapt_consumer;  ///< of an adapt step: the layer reading its output ("output": the net; "": shared by several)
  const Layer* layer = nullptr;
  Layer adapt_layer;         ///< the synthetic layer of an adapt step
  /// The layer with float32 weights where the graph's holds an int8 one
  /// (core::int8_weight) and the routine is not a built-in qint8 one: `layer`
  /// and info.layer point at it. Shared by the model's sessions.
  std::shared_ptr<const Layer> float_layer;
  /// Of a step fused with the one before across a fake_quant that restates
  /// that one's output (fuse_pairs): its layer reading that output by the
  /// previous layer's name, as Routine::fuses_previous matches them; info.layer
  /// points at it.
  std::shared_ptr<const Layer> pair_layer;
  Candidate routine;
  RoutineParams params;
  bool tuned = false;
  double predicted_ms = 0;
  double measured_ms = 0;    ///< in-net time the tuner measured for the chosen path (0: none)
  std::string fused_into;    ///< the step that computes this one too (the plan's fusion); this one runs nothing
  bool fuses = false;        ///< its prepared routine computes other steps too (those fused into it)
  /// The plan's fusion, which the executor prepares: this step and the one
  /// before it as one (Routine::fuses_previous, prepare_with_previous)...
  bool fuses_previous = false;
  std::size_t fused_previous_step = 0;  ///< with fuses_previous: the index of the step it computes
  /// ...or this two-input step with input `gated` computed from the other by
  /// `table`, which the steps `chain` (one-input table steps, first applied
  /// first) compose (Routine::int8_table, gates_by_table).
  struct Gate {
    std::size_t gated = 0;
    std::array<int8_t, 256> table{};
    std::vector<int> chain;  ///< step indices
  };
  std::optional<Gate> gate;
  bool view = false;         ///< its output shares its input's memory (PreparedRoutine::output_is_input): it runs nothing
  bool slices = false;       ///< a view step whose concat inputs or split outputs live in their whole's memory
  LayerInfo info;
  std::unique_ptr<ScopedWeights> shared_weights;  ///< info.shared: the model's store, scoped to this step
  std::unique_ptr<PreparedRoutine> prepared;      ///< by the executor
  std::vector<int> input_blobs, output_blobs;  ///< indices into the blob table
  std::vector<const Blob*> inputs;             ///< filled once; spans of RunArgs
  std::vector<Blob*> outputs;
  std::size_t workspace_offset = 0;
  std::size_t workspace_bytes = 0;
  Device workspace_device = Device::cpu;
  /// A value-shaped layer's step (LayerType::value_shaped): its outputs' actual
  /// shapes in the last run (the capacities before any). Empty elsewhere.
  std::vector<Shape> value_shapes;
};

enum class BlobKind { net_input, constant, planned, unwritten /* between two fused steps */ };

/// A blob of the plan: where it lives and when.
struct BlobSlot {
  std::string name;
  std::string blob;  ///< the graph blob whose value it holds (an adapted copy: its source's); "": a child's own
  BlobKind kind = BlobKind::planned;
  Schema schema;
  int first = 0, last = 0;  ///< lifetime in steps
  int request = -1;         ///< index into its device's memory plan
  int alias = -1;           ///< the planned blob whose memory it shares (a view step's output, a concat's input, a split's output)
  std::size_t alias_offset = 0;  ///< where in that blob's memory, in bytes
};

/// What planning reads of a whole graph: computed once per graph, not per plan.
struct GraphAnalyses {
  std::set<std::string> nan_may_reach;       ///< layers_nan_may_reach
  std::set<std::string> quantised_by_model;  ///< layers_quantised_by_model
};
/// Of `graph` with its blobs quantised as `quant` (Tuning::blob_quant).
GraphAnalyses analyse(const Graph& graph, const std::map<std::string, QuantParams>& quant);

struct PlanOptions {
  /// Net inputs arrive and outputs leave in it (a childnet routine prepared on
  /// its own: its parent's schema; a net: the default one).
  Schema io_schema;
  /// The model's store of derived weights (shared by its sessions), where
  /// childnets derive theirs and int8 weights get their float32 copies.
  std::shared_ptr<WeightStore> weights;
  /// Schema::matches patterns (empty: any): where a tuned routine computes in
  /// another schema, the default choice among these runs the layer instead.
  std::vector<std::string> schemas;
  /// The most bytes the arenas may take (0: none); a single blob of more
  /// values, or the blobs alive at one layer, are refused while planning.
  std::size_t memory_limit = 0;
  /// Every layer keeps NaN as ONNX does (LayerInfo::keep_nan), for inputs that
  /// hold NaN or inf; otherwise only the layers a NaN-making layer feeds do.
  bool keep_nan = false;
  /// The threads the session runs on (LayerInfo::threads): sessions and the
  /// tuner always give it; 0 (PlanOptions made by hand): the calling
  /// thread's team (a session's own count, else the library's), which the
  /// plan's options then hold.
  int threads = 0;
  /// The given graph's analyses (a session's, made once); nullptr, or a graph
  /// specialised at these shapes (another graph): computed while planning.
  std::shared_ptr<const GraphAnalyses> analyses;
  /// The routines to choose from (a frozen RoutineRegistry::snapshot(): the
  /// session's or the tuning's); nullptr: the process's as it is now. Steps'
  /// routines stay alive as long as the plan holds it.
  std::shared_ptr<const RoutineRegistry> registry;
};

/// The synthetic layer of an adapt: `input` converted from `from` to `to` into `output`.
Layer adapt_layer(std::string name, std::string input, std::string output, const Schema& from, const Schema& to);
/// What an adapt of a blob of `shape` and quantisation `quant` is told: as its
/// plan step is, and as the tuner measures it (the threads, routines and
/// memory limit of `options`, which give both: a plan's, or a model's
/// plan_options()).
LayerInfo adapt_info(const Layer& adapt, const Shape& shape, const QuantParams& quant, const PlanOptions& options);

struct Plan {
  PlanOptions options;
  std::unique_ptr<Graph> specialized;  ///< the graph at these shapes where it has shape_math layers
  const Graph* graph = nullptr;        ///< specialized, or the graph given
  std::vector<BlobSlot> slots;
  std::vector<Blob> blobs;  ///< views without memory, one per slot; never resized once built: steps point into it
  std::vector<std::unique_ptr<Step>> steps;
  /// A constant's copy in another schema (a blocked layout, a device): an adapt
  /// the executor runs once, from slot `from` into constant slot `to`.
  struct ConstantAdapt {
    std::unique_ptr<Step> step;
    int from = 0, to = 0;
  };
  std::vector<ConstantAdapt> constant_adapts;
  std::map<std::string, LayerInfo> layer_infos;  ///< layer_info()
  std::vector<std::unique_ptr<Childnet>> childnets;  ///< own the child layers steps point to
  std::vector<int> net_inputs, net_outputs;

  /// What every routine of a net layer is told about it here (shapes,
  /// quantisation, keep_nan; no weight store): as its step got it, or its
  /// childnet's parent; nullptr for a constant or an unknown name.
  const LayerInfo* layer_info(const std::string& layer) const {
    auto it = layer_infos.find(layer);
    return it == layer_infos.end() ? nullptr : &it->second;
  }
};

/// Chooses every layer's routine (`path`'s where it applies here, default:
/// the tuning's; else the default choice), the adapts where schemas differ
/// and childnet routines' children, at the net input shapes `shapes` (every
/// blob's shape), the blobs quantised as `tuning` says. Prepares nothing.
/// Throws Error naming the layer at fault.
Plan build_plan(const Graph& graph, const Tuning& tuning, const std::map<std::string, Shape>& shapes,
                const RoutinePath* path = nullptr, PlanOptions options = {});
/// The same from a graph already specialised at these shapes (infer_shapes
/// gives it): a model with shape computations is not specialised twice for
/// each new shape (a decode step at each new cache length paid it twice).
Plan build_plan(std::unique_ptr<Graph> specialized, const Tuning& tuning, const std::map<std::string, Shape>& shapes,
                const RoutinePath& path, PlanOptions options = {});

// Analyses of a graph the plan is built from.

/// Whether `layer` can make NaN from finite values: Div (0 / 0) unless its
/// divisor is a constant without zeros, Pow unless its exponent is constant
/// and integral, Sqrt, Log, Mod and the inverse trigonometric functions
/// outside their domains. `constant_second`: its second input where that is a
/// constant. (Overflow past float32's range, inf - inf inside a convolution,
/// is not counted.)
bool makes_nan(const Layer& layer, const Blob* constant_second);
/// The layers of `graph` (topologically sorted) that a NaN-making layer's
/// result reaches, those layers included: their LayerInfo::keep_nan.
std::set<std::string> layers_nan_may_reach(const Graph& graph);
/// The layers a model quantised itself (ONNX QDQ or QOperator, held as
/// fake_quant layers) whose every run-time input a fake_quant layer makes and
/// whose output only fake_quant layers of its recorded quantisation read:
/// each conv2 and dense (its weight on the model's int8 grid) and matmul; the
/// adds, muls, table activations, pools and concats joined to those through
/// fake_quant layers; and the fake_quant layers next to all of them. The
/// untuned default runs them on qint8 routines with the model's own scales,
/// as its author asked.
std::set<std::string> layers_quantised_by_model(const Graph& graph, const std::map<std::string, QuantParams>& quant);
/// Whether `path` computes any layer below float32 (qint8, float16, bfloat16;
/// a routine's dtype is the one its descriptor computes at,
/// RoutineRegistry::precision in `registry`), but for the layers of
/// `model_int8` in qint8: with the model's own scales they compute the model.
bool computes_below_float32(const RoutinePath& path, const std::set<std::string>& model_int8,
                            const RoutineRegistry& registry);

}  // namespace softneuro::core
