// What stands behind softneuro::Model and Session; shared with the importer and the tuner.
#pragma once

#include "core/executor.hpp"
#include "core/graph.hpp"
#include "core/shape_plan.hpp"
#include "core/thread_pool.hpp"
#include "core/weight_store.hpp"

#include <softneuro/session.hpp>

#include <algorithm>
#include <list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace softneuro::detail {

struct ModelImpl;

/// One stage of a model whose tensor sizes depend on values (core/stages.hpp).
struct ModelStage {
  std::shared_ptr<const ModelImpl> model;
  std::vector<std::string> value_shaped;  ///< its outputs of value-dependent shape
};

/// A model: checked, sorted, shapes inferred; nothing prepared.
struct ModelImpl {
  core::Graph graph;
  /// What tuning added beside the graph (routine paths, quantisation, prepared weights).
  core::Tuning tuning;
  std::map<std::string, Shape> shapes;
  std::vector<TensorInfo> inputs, outputs;
  std::string file;  ///< where it was loaded from, for messages
  /// Derived weights, shared by every executor of this model.
  std::shared_ptr<core::WeightStore> weights = std::make_shared<core::WeightStore>();
  /// What planning reads of the whole graph (core::analyse), made once here
  /// for every plan of every session of it and the tuner's.
  std::shared_ptr<const core::GraphAnalyses> analyses;
  /// Where a layer's output shapes depend on values: the graph cut into stages
  /// a session runs in turn (core/stages.hpp; one or more). Empty otherwise.
  std::vector<ModelStage> stages;

  /// Checks the DAG, sorts it and infers shapes (a value-shaped layer's
  /// outputs: their capacity), and cuts it into stages where it must (unless
  /// `!split`: the graph of a stage). Errors name `file` (when not empty) and
  /// the layer at fault.
  void build(core::Graph g, core::Tuning t, const std::string& from, bool split = true);
  /// `stages` from the graph as it is (none where no layer is value-shaped).
  void cut_stages();
  /// The registry its sessions and tunings choose from (a test's own);
  /// nullptr: the process's.
  std::shared_ptr<const core::RoutineRegistry> registry;
  /// That registry as it is now, frozen (RoutineRegistry::snapshot()): what a
  /// session takes at its creation, and a tuning when it starts.
  std::shared_ptr<const core::RoutineRegistry> routines() const {
    return (registry ? *registry : core::RoutineRegistry::instance()).snapshot();
  }
  /// Options of a plan of it: its routines and, where `of_graph`, its store
  /// of derived weights and its analyses (else those of the plan's own: a
  /// graph derived from this one).
  core::PlanOptions plan_options(bool of_graph = true) const {
    core::PlanOptions o;
    if (of_graph) o.weights = weights, o.analyses = analyses;
    o.registry = routines();
    o.threads = core::global_pool().num_threads();  // the tuning's team: the calling thread's
    return o;
  }
};

/// What the library's own modules (tuner, importers, tests) reach behind a
/// Model, which apps cannot: its ModelImpl, and a Model made of one.
struct ModelAccess {
  static const ModelImpl& impl(const Model& m) { return *m.impl_; }
  static Model make(std::shared_ptr<const ModelImpl> impl) { return Model(std::move(impl)); }
};
inline const ModelImpl& impl_of(const Model& m) { return ModelAccess::impl(m); }

/// `graph` checked, sorted and its shapes inferred, as a Model (errors name
/// `file`), whose sessions and tunings choose from `registry` (nullptr: the
/// process's, ModelImpl::registry).
Model make_model(core::Graph graph, core::Tuning tuning = {}, const std::string& file = {},
                 std::shared_ptr<const core::RoutineRegistry> registry = nullptr);

/// Whether two sets of input shapes are in one shape bucket: the same ranks,
/// and every dim that differs rounds up to the same power of two (1, 2, 3-4,
/// 5-8, ..., 513-1024, ...).
bool same_shape_bucket(const std::map<std::string, Shape>& a, const std::map<std::string, Shape>& b);

/// A model's executors by input shapes: one per shape seen, the least recently
/// used dropped first beyond `capacity`. Shape inference, preparation and the
/// memory plan run once per new shape, never per run. Once `capacity` shapes
/// are kept, a new shape in the bucket of a kept one (same_shape_bucket)
/// re-binds that one's plan (Executor::rebind) instead of building another:
/// a decode loop meeting a new cache length at every step builds a plan per
/// bucket, not per length.
class ShapedExecutors {
 public:
  /// `registry`: the routines every plan chooses from (nullptr: the model's,
  /// ModelImpl::routines()). `stage`: the executors of a later stage of a
  /// model (ModelImpl::stages), which meets new shapes at most runs: a new
  /// plan is noted at debug level.
  ShapedExecutors(const ModelImpl& model, const SessionOptions& options,
                  std::shared_ptr<const core::RoutineRegistry> registry = nullptr, bool stage = false);
  /// The executor of these input shapes (net inputs by name; missing: the
  /// default shape) and values of the inputs that set shapes (core::value_inputs,
  /// as core::shape_value gives them; missing: core::value_default). Throws
  /// Error naming the input whose shape the model does not take.
  /// keep_nan: the plan in which every layer keeps NaN as ONNX does
  /// (LayerInfo::keep_nan), for inputs holding NaN or inf; a key of the cache
  /// beside the shapes (at most `capacity` plans of each kind are kept).
  core::Executor& at(const std::map<std::string, Shape>& input_shapes,
                     const std::map<std::string, Blob>& input_values = {}, bool keep_nan = false);
  /// The executor of the shapes of these input blobs; where a floating-point
  /// input holds NaN or inf, the NaN-keeping plan of those shapes.
  core::Executor& for_inputs(std::span<const NamedBlob> inputs);
  /// Runs the inputs on `chosen` (what for_inputs gave for them); where its
  /// uploads found NaN or inf in an input for_inputs did not scan
  /// (Executor::saw_non_finite), again on the NaN-keeping plan. With
  /// `step_ms`, the step times of the executor that ran last (resized to its
  /// steps). Returns that executor.
  core::Executor& run(core::Executor& chosen, std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs,
                      std::vector<double>* step_ms = nullptr);
  /// The executor used last (prepared at the default shapes where none was).
  core::Executor& current();
  /// Blob shapes of the executor used last.
  const std::map<std::string, Shape>& current_shapes();
  /// Bytes of the CPU arena its executors share (the largest plan among them).
  std::size_t host_arena_bytes() const { return host_arena_->bytes(); }
  /// Plans built, and plans re-bound to another shape of their bucket, so far.
  std::size_t plans_built() const { return plans_built_; }
  std::size_t plans_rebound() const { return plans_rebound_; }

 private:
  struct Entry {
    std::map<std::string, Shape> inputs;
    std::map<std::string, Blob> values;   ///< of the inputs that set shapes (value_inputs_)
    bool keep_nan = false;                ///< the plan for inputs holding NaN or inf
    std::map<std::string, Shape> shapes;  ///< every blob's, as the executor was planned
    std::unique_ptr<core::Executor> executor;
    const core::RoutinePath* path = nullptr;  ///< the routine path it runs (path_for)
    /// What specialising the model at `inputs` computed (a model with shape
    /// computations), so that a re-bind evaluates only what changes.
    std::unique_ptr<core::SpecializeState> specialized;
  };
  /// The NaN-keeping plan of the front entry's shapes and values.
  core::Executor& keeping_nan_front();
  const ModelImpl& model_;
  /// The net inputs whose values set shapes: part of an executor's key.
  std::vector<std::string> value_inputs_;
  /// The routines every plan of it chooses from, frozen at its creation.
  std::shared_ptr<const core::RoutineRegistry> registry_;
  bool stage_;
  std::size_t capacity_;
  std::vector<std::string> schemas_;
  std::size_t memory_limit_;  ///< of each executor's arena (SessionOptions::memory_limit, resolved)
  int threads_;               ///< SessionOptions::threads (0: the library's when a plan is built)
  /// The session's device queues (a CUDA stream and library handles), shared by its executors.
  std::shared_ptr<core::DeviceQueues> queues_ = core::DeviceQueues::create();
  /// One CPU arena for all its executors: they run one at a time.
  std::shared_ptr<core::HostArena> host_arena_ = std::make_shared<core::HostArena>();
  std::list<Entry> entries_;  ///< most recently used first
  std::size_t plans_built_ = 0, plans_rebound_ = 0;
};

/// A model calibration and tuning change (quantisation, routine path, weights
/// on their int8 grid): the tuner's working copy, as a Model is immutable. It
/// runs nothing itself: the tuner plans and runs each path it measures
/// (core::build_plan) from its graph.
struct WorkingModel : ModelImpl {
  static std::unique_ptr<WorkingModel> build(core::Graph graph, core::Tuning tuning = {}, const std::string& file = {});
  /// A working copy of `model` (the graph's weights shared, not copied; so are
  /// its derived weights until the graph changes).
  static std::unique_ptr<WorkingModel> of(const ModelImpl& model);
  /// The model as it is now, as an immutable Model.
  Model to_model();
  /// After the graph changed (routine path, quantisation, weights): derived
  /// weights are no longer shared with earlier models, and the analyses are
  /// made again.
  void changed();
  /// Derives the weights of the routine path at each of its input shapes in a
  /// fresh store (sessions of `threads`), and keeps those a tuned file stores
  /// ready to use (tuning.prepared).
  void store_prepared_weights(int threads);
};

class SessionImpl {
 public:
  SessionImpl(const Model& model, const SessionOptions& options);
  Model model;
  SessionOptions options;
  /// The routines its plans choose from, frozen at its creation (every stage's).
  std::shared_ptr<const core::RoutineRegistry> registry;
  /// The model's executors, or its first stage's where it has stages.
  ShapedExecutors executors;
  /// A staged model's later stages (ModelImpl::stages[1...]).
  std::vector<std::unique_ptr<ShapedExecutors>> later_stages;
  /// A staged model's outputs' shapes in the last run.
  std::map<std::string, Shape> run_shapes;

  bool staged() const { return !detail::impl_of(model).stages.empty(); }
  /// The executor of these inputs' shapes (within the memory limit: the executor checks it).
  core::Executor& executor_for(std::span<const NamedBlob> inputs) { return executors.for_inputs(inputs); }
  /// Runs a staged model's stages in turn, each at the shapes the ones before
  /// produced; returns its outputs at their actual shapes. With `step_ms`, each
  /// stage's step times in turn (integrated profiling).
  std::vector<NamedBlob> run_stages(std::span<const NamedBlob> inputs, std::vector<double>* step_ms = nullptr);
  /// Each stage's executor used last (stage 0 first), where a staged model's
  /// later ones have run; the model's otherwise.
  std::vector<core::Executor*> current_executors();
  /// Blobs for run()'s convenience form to return, in outputs() order: memory
  /// of outputs it returned in the two runs before, where the caller has let go
  /// of every copy, else fresh memory. (Fresh memory each step cost a decode
  /// loop in Python 2 ms of 29: GPT-2's 9.4 MB of cache outputs zero-filled
  /// and faulted in each time.)
  std::vector<NamedBlob> output_blobs(const std::map<std::string, Shape>& shapes);

 private:
  struct HandedOut {
    std::shared_ptr<const void> memory;  ///< held by every blob over it too: unique once the caller let go
    std::size_t bytes = 0;
    uint64_t run = 0;  ///< the run that returned it last
  };
  std::vector<HandedOut> handed_out_;
  uint64_t runs_ = 0;
};

}  // namespace softneuro::detail
