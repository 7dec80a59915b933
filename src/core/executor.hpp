// The executor: routines chosen and prepared once, blobs planned into one
// arena by liveness, and a run loop that allocates nothing.
#pragma once

#include "core/device_hooks.hpp"
#include "core/graph.hpp"
#include "core/memory_plan.hpp"
#include "core/registry.hpp"
#include "core/weight_store.hpp"

#include <softneuro/session.hpp>

#include <map>
#include <set>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace softneuro::core {

/// The name of the adapt step converting slot `from` (a blob, or "blob@schema":
/// its shared copy in that schema) to `to` for `consumer` ("": the shared copy
/// itself, read by several layers).
std::string adapt_step_name(const std::string& from, const std::string& consumer, const Schema& to);

/// One prepared layer (or inserted adapt) in execution order.
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
  Candidate routine;
  RoutineParams params;
  bool tuned = false;
  double predicted_ms = 0;
  double measured_ms = 0;    ///< in-net time the tuner measured for the chosen path (0: none)
  std::string fused_into;    ///< the step that computes this one too (Routine::prepare_with_previous); this one runs nothing
  bool view = false;         ///< its output shares its input's memory (PreparedRoutine::output_is_input): it runs nothing
  LayerInfo info;
  std::unique_ptr<ScopedWeights> shared_weights;  ///< info.shared: the model's store, scoped to this step
  std::unique_ptr<PreparedRoutine> prepared;
  std::vector<int> input_blobs, output_blobs;  ///< indices into the blob table
  std::vector<const Blob*> inputs;             ///< filled once; spans of RunArgs
  std::vector<Blob*> outputs;
  std::size_t workspace_offset = 0;
  std::size_t workspace_bytes = 0;
  Device workspace_device = Device::cpu;
};

/// Whether `layer` can make NaN from finite values: Div (0 / 0) unless its
/// divisor is a constant without zeros, Pow unless its exponent is constant
/// and integral, Sqrt, Log, Mod and the inverse trigonometric functions
/// outside their domains. `constant_second`: its second input where that is a
/// constant. (Overflow past float32's range, inf - inf inside a convolution,
/// is not counted.)
bool makes_nan(const Layer& layer, const Blob* constant_second);
/// The layers of `graph` (topologically sorted) that a NaN-making layer's
/// result reaches, those layers included: their LayerInfo::keep_nan (the
/// tuner reads it from the executor's plan).
std::set<std::string> layers_nan_may_reach(const Graph& graph);
/// The layers a model quantised itself (ONNX QDQ or QOperator, held as
/// fake_quant layers) whose every run-time input a fake_quant layer makes and
/// whose output only fake_quant layers of its recorded quantisation read:
/// each conv2 and dense (its weight on the model's int8 grid) and matmul; the
/// adds, muls, table activations, pools and concats joined to those through
/// fake_quant layers; and the fake_quant layers next to all of them. The
/// untuned default runs them on qint8 routines with the model's own scales,
/// as its author asked.
std::set<std::string> layers_quantised_by_model(const Graph& graph);
/// Whether `path` computes any layer below float32 (qint8, float16, bfloat16;
/// a routine's dtype is its descriptor's schema's), but for the layers of
/// `model_int8` in qint8: with the model's own scales they compute the model.
bool computes_below_float32(const RoutinePath& path, const std::set<std::string>& model_int8);

/// The CPU arena the executors of one session share: a session runs one of
/// them at a time, so it needs the largest of their plans, not their sum (four
/// input shapes cost one arena). Grows to the largest plan asked for; an
/// executor rebinds its blobs to it at every run.
class HostArena {
 public:
  /// Makes room for `bytes`; returns false where memory ran out.
  bool reserve(std::size_t bytes);
  char* base() const { return static_cast<char*>(memory_.get()); }
  std::size_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<void> memory_;
  std::size_t bytes_ = 0;
};

class Executor {
 public:
  /// Chooses routines (the graph's routine path where valid, the default
  /// choice otherwise), inserts adapts where schemas differ, prepares every
  /// routine and plans memory. Throws Error naming the layer at fault.
  /// Net inputs arrive and outputs leave in `io_schema` (a childnet routine
  /// prepared on its own: its parent's schema; a net: the default one).
  /// Routines derive their packed weights through `weights` (a model's store,
  /// shared by its sessions) where given.
  /// `path`: the routine path to follow (default: the graph's). `schemas`
  /// (Schema::matches patterns; empty: any): where a tuned routine computes in
  /// another schema, the default choice among these runs the layer instead.
  /// `memory_limit` (0: none): the most bytes the arenas may take, checked
  /// once memory is planned and before any is allocated; a single blob of more
  /// values than that is refused before any routine is prepared.
  /// `keep_nan`: every layer keeps NaN as ONNX does (LayerInfo::keep_nan), for
  /// inputs that hold NaN or inf; otherwise only the layers a NaN-making layer
  /// (makes_nan) feeds do.
  /// `queues`: the session's device queues (core/device_hooks.hpp), bound while
  /// this executor prepares and runs; nullptr: whichever the calling thread has
  /// bound (a childnet's: its parent's; elsewhere each device's default queue).
  /// `host_arena`: the session's shared CPU arena (nullptr: one of its own),
  /// used where every step runs on the CPU (a device graph records host
  /// addresses, so an executor with device steps keeps its own).
  Executor(const Graph& graph, const std::map<std::string, Shape>& shapes, const Schema& io_schema = Schema{},
           std::shared_ptr<WeightStore> weights = nullptr, const RoutinePath* path = nullptr,
           std::vector<std::string> schemas = {}, std::size_t memory_limit = 0, bool keep_nan = false,
           std::shared_ptr<DeviceQueues> queues = nullptr, std::shared_ptr<HostArena> host_arena = nullptr);

  /// The plan alone: the steps a session would run `path` with (routines as
  /// the full constructor chooses them, adapts, childnets' children, every
  /// step's LayerInfo: shapes, quantisation, keep_nan), with nothing prepared,
  /// fused or allocated; run() refuses. What the tuner reads the executor's
  /// decisions from instead of re-deriving them.
  struct PlanOnly {};
  /// `weights`: the model's store, where a childnet's children derive weights (Winograd's transformed ones).
  Executor(PlanOnly, const Graph& graph, const std::map<std::string, Shape>& shapes, const RoutinePath* path = nullptr,
           std::shared_ptr<WeightStore> weights = nullptr, std::vector<std::string> schemas = {});
  bool plan_only() const { return plan_only_; }
  /// What every routine of a net layer is told about it here (shapes,
  /// quantisation, keep_nan; no weight store): as its step got it, or its
  /// childnet's parent; nullptr for a constant or an unknown name.
  const LayerInfo* layer_info(const std::string& layer) const {
    auto it = layer_infos_.find(layer);
    return it == layer_infos_.end() ? nullptr : &it->second;
  }

  /// Runs every step. With `step_ms` (steps().size() entries), also stores
  /// each step's wall time in milliseconds (integrated profiling).
  void run(std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs, double* step_ms = nullptr);

  const std::vector<std::unique_ptr<Step>>& steps() const { return steps_; }
  /// Whether some of its memory is on a device other than the CPU.
  bool uses_device() const {
    for (const auto& a : arenas_)
      if (a.device != Device::cpu) return true;
    return false;
  }
  /// Bytes of all arenas (host and devices).
  std::size_t arena_bytes() const;
  std::size_t unplanned_bytes() const { return unplanned_bytes_; }

 private:
  enum class BlobKind { net_input, constant, planned, unwritten /* between two fused steps */ };
  struct BlobSlot {
    std::string name;
    BlobKind kind = BlobKind::planned;
    Schema schema;
    int first = 0, last = 0;  ///< lifetime in steps
    int request = -1;         ///< index into its device's memory plan
    int alias = -1;           ///< the planned blob whose memory it shares (a view step's output, a concat's input, a split's output)
    std::size_t alias_offset = 0;  ///< where in that blob's memory, in bytes
  };
  /// One arena per device: the plan of the blobs and workspaces living there.
  struct Arena {
    Device device = Device::cpu;
    std::vector<BufferRequest> requests;
    MemoryPlan plan;
    std::shared_ptr<void> memory;
    std::shared_ptr<HostArena> shared;  ///< the session's, in place of `memory`
    char* base() const { return shared ? shared->base() : static_cast<char*>(memory.get()); }
  };
  Arena& arena(Device d);
  int add_blob(const std::string& name, BlobKind kind, const Shape& shape, const Schema& schema);
  /// The blob `slot` as a consumer in `want` sees it: itself, or an adapt step's output.
  int in_schema(int slot, const Schema& want, const std::string& consumer);
  /// An adapt step converting `slot` to `want` (once per slot and schema), with the tuned routine where it applies.
  int convert(int slot, const Schema& want, const std::string& consumer, const AdaptChoice* tuned);
  /// The routine path's adapt of `blob` read by `consumer` in schema `to` (nullptr: none).
  const AdaptChoice* tuned_adapt(const std::string& blob, const std::string& consumer, const Schema& to) const;
  /// Chooses, prepares and appends the step(s) of one layer reading `input_slots`:
  /// one step, or a childnet routine's child steps (recursively). Returns its output slots.
  std::vector<int> add_layer(const Layer& layer, const std::vector<int>& input_slots,
                             const std::vector<Shape>& output_shapes, const std::vector<QuantParams>& output_quant,
                             const RoutineChoice* choice, const Schema* child_schema, const std::string& parent);
  void bind_outputs_to_arena();
  /// Lets each layer's routine take in the step before it (Routine::prepare_with_previous) where the blob between them has no other use.
  void fuse_steps();
  /// A binary step whose one input is a chain of int8 tables of its other
  /// input (PreparedRoutine::int8_table, gated_by_table) becomes one table
  /// step; the chain runs nothing.
  void fuse_gates();
  /// Runs the adapt `step` once, from constant slot `from` into constant slot
  /// `to`, whose memory the executor then owns (constant_copies_).
  void convert_constant(Step& step, int from, int to);
  /// Concats whose inputs, and splits whose outputs, are contiguous byte ranges
  /// of their whole (core::contiguous_slices) between planned CPU blobs: the
  /// pieces live in the whole's memory and the step runs nothing.
  void share_slices();
  /// Steps whose output is their input's bytes (PreparedRoutine::output_is_input)
  /// between planned CPU blobs: the output shares the input's memory, whose
  /// lifetime grows to cover it, and the step runs nothing.
  void share_views();

  /// Gives `step` its view of the weight store before it is prepared.
  void share_weights(Step& step) const;
  /// `layer` with its int8 weights (core::int8_weight) as float32, made once per
  /// model; nullptr where it holds none.
  std::shared_ptr<const Layer> float_weights_of(const Layer& layer) const;

  Executor(const Graph& graph, const std::map<std::string, Shape>& shapes, const Schema& io_schema,
           std::shared_ptr<WeightStore> weights, const RoutinePath* path, std::vector<std::string> schemas,
           std::size_t memory_limit, bool keep_nan, std::shared_ptr<DeviceQueues> queues,
           std::shared_ptr<HostArena> host_arena, bool plan_only);

  /// First, so destroyed last: the prepared routines and the recording go before their queues.
  std::shared_ptr<DeviceQueues> queues_;
  bool plan_only_ = false;  ///< PlanOnly: steps chosen, nothing prepared
  std::unique_ptr<Graph> specialized_;  ///< the graph at these shapes where it has shape_math layers
  const Graph& graph_;
  const RoutinePath& path_;
  std::vector<std::string> schemas_;  ///< allowed schemas (empty: any)
  /// While building: "descriptor (why)" -> the layers whose tuned routine cannot run here.
  std::map<std::string, std::vector<std::string>> tuned_missing_;
  std::size_t memory_limit_ = 0;      ///< the session's (0: none), told to routines in prepare
  bool keep_nan_ = false;             ///< every layer keeps NaN (the constructor's `keep_nan`)
  bool layer_keep_nan_ = false;       ///< LayerInfo::keep_nan of the layer add_layer is adding
  bool layer_int8_ = false;           ///< the layer add_layer is adding defaults to qint8 (layers_quantised_by_model)
  bool allowed(const Schema& s) const;
  /// The schema of a net input or output of dtype `d`: the I/O schema, typed.
  Schema edge_schema(DType d) const { return Schema{io_schema_.device, d, io_schema_.layout}; }
  Schema io_schema_;
  std::shared_ptr<WeightStore> weights_;  ///< of the net inputs and outputs
  std::vector<BlobSlot> slots_;
  std::vector<Blob> blobs_;  ///< never resized after construction: steps point into it
  std::vector<std::unique_ptr<Step>> steps_;
  std::map<std::string, LayerInfo> layer_infos_;  ///< layer_info()
  std::map<std::pair<int, std::string>, int> adapted_;  ///< (slot, schema) -> adapted slot
  std::vector<std::shared_ptr<void>> constant_copies_;  ///< memory of constants converted once (convert_constant)
  std::vector<std::unique_ptr<Childnet>> childnets_;    ///< own the child layers steps point to
  std::vector<int> net_inputs_, net_outputs_;
  std::vector<Arena> arenas_;
  std::size_t unplanned_bytes_ = 0;
  DeviceGraphs device_graphs_;  ///< [device graphs] replays runs of device steps (core/device_hooks.hpp)
};

}  // namespace softneuro::core
