// softneuro/routine.hpp — the routine-author API.
//
// A *layer* says what to compute; a *routine* says how, for one layer type and
// one or more schemas. Routines register themselves (SOFTNEURO_REGISTER_ROUTINE)
// or arrive in a plugin (SOFTNEURO_PLUGIN); the registry answers which routines
// implement a layer for a schema, and the executor prepares the chosen one once
// and runs it many times. This header is all a routine or plugin author needs.
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/error.hpp>
#include <softneuro/layer.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace softneuro {

namespace core {
class RoutineRegistry;  // internal: the routines a plan chooses from
}

/// Bumped whenever this header changes in a way that breaks compiled plugins.
inline constexpr uint32_t abi_version = 18;  // 18: Routine::costly_prepare

// ---------------------------------------------------------------------------
// Schemas

/// platform:dtype[:layout], e.g. "cpu", "cpu:qint8", "cpu:float32:nhwc", "cuda:float16".
struct Schema {
  Device device = Device::cpu;
  DType dtype = DType::float32;
  Layout layout = Layout::nchw;

  /// Throws softneuro::Error naming the text when it is not a schema.
  static Schema parse(std::string_view text);
  /// Canonical text: trailing defaults dropped ("cpu", "cpu:qint8", "cpu:float32:nhwc").
  std::string to_string() const;
  /// Whether this is the schema `pattern` names ("cpu:qint8"), or one a glob
  /// over the full form device:dtype:layout matches ("cpu:float32:*").
  /// Throws softneuro::Error where a pattern without * ? [ is not a schema.
  bool matches(std::string_view pattern) const;
  bool operator==(const Schema&) const = default;
};

/// What a routine derives from its weights in prepare (packed, reordered,
/// transformed, quantised), shared by every session of a model: eight sessions
/// must not hold eight copies. The store is scoped to one layer, routine,
/// routine parameters, shapes and quantisation, so a key need only tell apart
/// one routine's own objects ("weights", "bias"). Safe from several threads.
class SharedWeights {
 public:
  virtual ~SharedWeights() = default;
  /// The object stored under `key`, built by `make()` (returning a T) on first
  /// use; kept while any prepared routine holds it.
  template <class T, class F>
  std::shared_ptr<const T> get(std::string_view key, F&& make) {
    return std::static_pointer_cast<const T>(
        get_or_make(key, [&]() -> std::shared_ptr<const void> { return std::make_shared<const T>(make()); }));
  }
  /// As get(), and the object is saved in a tuned .dnn file (its prepared
  /// weights) and read back from it, so that a session of the file builds
  /// nothing: `save(const T&)` gives its bytes (a 1-D uint8 Blob; kept beyond
  /// this call, so it captures by value), `load(const Blob& bytes)` a
  /// std::optional<T> made from them (it may view them: they live as long as
  /// the object; nothing where they do not fit what prepare computes, and the
  /// object is built again). The key must say everything the bytes depend on
  /// beyond the layer, routine, parameters, shapes and quantisation.
  template <class T, class Make, class Save, class Load>
  std::shared_ptr<const T> prepared(std::string_view key, Make&& make, Save save, Load&& load) {
    return std::static_pointer_cast<const T>(get_or_make_saved(
        key, [&]() -> std::shared_ptr<const void> { return std::make_shared<const T>(make()); },
        [save](const void* p) { return save(*static_cast<const T*>(p)); },
        [&load](const Blob& bytes) -> std::shared_ptr<const void> {
          std::optional<T> t = load(bytes);
          if (!t) return nullptr;
          return std::make_shared<const T>(std::move(*t));
        }));
  }

 protected:
  virtual std::shared_ptr<const void> get_or_make(std::string_view key,
                                                  const std::function<std::shared_ptr<const void>()>& make) = 0;
  /// get_or_make, with how the object is saved and loaded (a store that saves nothing ignores them).
  virtual std::shared_ptr<const void> get_or_make_saved(std::string_view key,
                                                        const std::function<std::shared_ptr<const void>()>& make,
                                                        const std::function<Blob(const void*)>& save,
                                                        const std::function<std::shared_ptr<const void>(const Blob&)>& load) {
    (void)save, (void)load;
    return get_or_make(key, make);
  }
};

/// What a routine derives from a layer's weights for every input shape
/// (packed, transformed, quantised weights): Routine::pack makes it once per
/// model, and every session and shape of the model shares it.
class PackedWeights {
 public:
  virtual ~PackedWeights() = default;
  /// Its bytes for a tuned .dnn file (a 1-D uint8 Blob), which Routine::unpack
  /// reads back; an empty Blob: not stored (a session of the file packs again).
  virtual Blob save() const { return {}; }
};

/// What Routine::pack sees of a layer: its weights and attributes and its
/// blobs' quantisation, never a shape, so what it derives serves every input
/// shape a session meets.
struct PackInfo {
  const Layer* layer = nullptr;
  std::vector<QuantParams> input_quant;   ///< empty unless calibrated
  std::vector<QuantParams> output_quant;  ///< empty unless calibrated
  /// The memory limit of the session that packs first (0: none): packing
  /// checks what it allocates against it (check_prepare_bytes).
  std::size_t memory_limit = 0;
};

/// What a routine sees of a layer when it decides, prepares and runs: the layer
/// and the shapes (and, for quantised schemas, quantisation) of its blobs.
struct LayerInfo {
  const Layer* layer = nullptr;
  std::vector<Shape> input_shapes;
  std::vector<Shape> output_shapes;
  std::vector<QuantParams> input_quant;   ///< empty unless calibrated
  std::vector<QuantParams> output_quant;  ///< empty unless calibrated
  /// In prepare: the model's store of derived weights (nullptr: build your own).
  SharedWeights* shared = nullptr;
  /// In prepare: the session's memory limit in bytes (0: none). A routine whose
  /// own tables grow with the shapes checks them against it before allocating
  /// (check_prepare_bytes), as the executor checks blobs and workspaces.
  std::size_t memory_limit = 0;
  /// NaN (and inf) may reach this layer: a run's input holds one, or a layer
  /// before it can make one from finite values (Div, Log, Sqrt...). Its result
  /// must then be ONNX's (NaN stays NaN through relu, clip...): a routine whose
  /// fast form loses NaN computes the exact one, or refuses. Otherwise a routine
  /// may take the fast form.
  bool keep_nan = false;
  /// In prepare: the threads the step will run on (the session's team), for
  /// what a routine sizes per thread (workspace slots, OpenMP's team). The
  /// plan always sets it; 0 (a LayerInfo made by hand): the library's count.
  int threads = 0;
  /// The routines the plan chooses from (its frozen registry), for a built-in
  /// routine that composes others (a chain of adapts); nullptr (a LayerInfo
  /// made by hand): the process's. Plugins leave it alone.
  const core::RoutineRegistry* routines = nullptr;
};

/// The threads to size per-thread state for in prepare: info.threads, or the
/// library's count where a LayerInfo made by hand leaves it 0.
int team_threads(const LayerInfo& info);

/// Throws Error naming the layer and field `memory_limit` where `bytes` that
/// prepare is about to allocate for `what` exceed info.memory_limit.
void check_prepare_bytes(const LayerInfo& info, std::size_t bytes, std::string_view what);
/// The same for what pack() allocates.
void check_prepare_bytes(const PackInfo& info, std::size_t bytes, std::string_view what);

/// `make()` (a T) from the model's shared store where `info` has one, else a copy of one's own.
template <class T, class F>
std::shared_ptr<const T> shared_weights(const LayerInfo& info, std::string_view key, F&& make) {
  if (info.shared) return info.shared->get<T>(key, std::forward<F>(make));
  return std::make_shared<const T>(make());
}

/// shared_weights(), and the object is stored in a tuned file (SharedWeights::prepared).
template <class T, class Make, class Save, class Load>
std::shared_ptr<const T> prepared_weights(const LayerInfo& info, std::string_view key, Make&& make, Save save, Load&& load) {
  if (info.shared) return info.shared->prepared<T>(key, std::forward<Make>(make), std::move(save), std::forward<Load>(load));
  return std::make_shared<const T>(make());
}

// ---------------------------------------------------------------------------
// Threads

/// The library's one thread pool. Routines split their work with parallel_for;
/// it never allocates, so it is safe inside Session::run.
class ThreadPool {
 public:
  virtual ~ThreadPool() = default;
  virtual int num_threads() const noexcept = 0;
  /// Calls fn(begin, end) over [0, n) in chunks of at least `grain`, on all threads.
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run_chunks(n, grain, [](void* ctx, int64_t b, int64_t e) { (*static_cast<Fn*>(ctx))(b, e); },
               const_cast<void*>(static_cast<const void*>(&fn)));
  }

 protected:
  virtual void run_chunks(int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t),
                          void* ctx) = 0;
};

// ---------------------------------------------------------------------------
// Routines

/// A routine's answer to "can you compute this layer for this schema": yes, or
/// no with the reason (shown by verbose modes for every routine considered).
struct Support {
  bool ok = false;
  std::string reason;
  static Support yes() { return {true, {}}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const noexcept { return ok; }
};

/// One tunable routine parameter and its choices (tile size, cache block, ...).
struct RoutineParamSpec {
  std::string name;
  std::vector<int64_t> choices;
};
/// Chosen values, one per RoutineParamSpec, in the routine's order.
using RoutineParams = std::vector<std::pair<std::string, int64_t>>;

/// The value of `key` in `params`, or `fallback`.
int64_t routine_param(const RoutineParams& params, std::string_view key, int64_t fallback);

/// Every combination of a parameter space's choices (its cross product; the
/// first parameter varies slowest). A space without parameters gives one empty
/// combination: the routine's defaults.
std::vector<RoutineParams> param_combinations(const std::vector<RoutineParamSpec>& space);

/// What a prepared routine gets on every run. Input and output blobs carry
/// their memory; `workspace` is scratch of workspace_bytes() planned by the executor.
struct RunArgs {
  std::span<const Blob* const> inputs;
  std::span<Blob* const> outputs;
  void* workspace = nullptr;
  ThreadPool* pool = nullptr;
  /// For a layer whose output shapes depend on its input values (the built-in
  /// non_max_suppression, non_zero, unique and choose, docs/layer-types.md): one per output, where run() stores each
  /// output's actual shape (its blob holds the capacity); other routines leave it.
  /// Null where the caller does not ask.
  Shape* output_shapes = nullptr;
};

/// A routine prepared for one layer: weights packed, shapes fixed. run() must
/// not allocate memory; it computes outputs from inputs.
class PreparedRoutine {
 public:
  virtual ~PreparedRoutine() = default;
  /// Scratch memory run() needs; the executor plans it with the blobs.
  virtual std::size_t workspace_bytes() const { return 0; }
  /// Where the workspace lives (a CUDA routine wants device memory).
  virtual Device workspace_device() const { return Device::cpu; }
  virtual void run(const RunArgs& args) = 0;
  /// True where output 0 holds input 0's bytes unchanged (a reshape, an
  /// identity quantisation step): the executor may then give the output the
  /// input's memory and run nothing. run() must still copy where they differ.
  virtual bool output_is_input() const { return false; }
  /// The input output 0 starts from (a residual a fused convolution adds its
  /// result to), or -1: the executor gives the output that input's memory
  /// where nothing reads the input after this step, and run() copies the
  /// input into the output where their memory differs.
  virtual int output_accumulates() const { return -1; }
  /// This two-input step where input `gated` is table[input 1 - gated],
  /// element by element and of the same shape: a one-input step reading
  /// input 1 - gated that computes the same bytes, or null where it cannot.
  /// Called where the plan chose it (Routine::gates_by_table).
  virtual std::unique_ptr<PreparedRoutine> gated_by_table(std::size_t gated, const int8_t* table) const {
    (void)gated, (void)table;
    return nullptr;
  }
  /// True where run() checks input 0 for NaN and inf as it copies it (a
  /// device upload, in the same pass as its copy into staging memory). A
  /// session then does not scan a net input that only such steps read; it
  /// asks saw_non_finite() after the run instead, and runs the inputs again
  /// on the plan that keeps NaN (LayerInfo::keep_nan) where one was found.
  virtual bool checks_non_finite() const { return false; }
  /// After a run (its device work finished): whether the values of input 0
  /// that run() checked held NaN or inf.
  virtual bool saw_non_finite() const { return false; }
};

/// A routine implemented as a small net of sub-layers (SoftNeuro's childnets,
/// e.g. dense = reshape -> conv2 -> reshape; Winograd conv2 = wgenc -> wgconv ->
/// wgdec). The executor expands it into one step per child at prepare time;
/// each child's routine is chosen like a layer's (the routine path names it by
/// the child's layer name, else the default choice in the child's schema), and
/// the blobs between children are planned with the net's other blobs.
struct Childnet {
  /// The child layers in execution order, with their own weights (e.g. a
  /// transformed kernel, computed once when the childnet is built). Names are
  /// "<parent>/<child>" (e.g. "conv1/wgconv"); they key the children's choices.
  std::vector<Layer> layers;
  /// The schema each child computes in by default (one per layer).
  std::vector<Schema> schemas;
  /// The names under which the children read the parent's inputs (one per parent input).
  std::vector<std::string> inputs;
  /// The child blobs that are the parent's outputs (one per parent output).
  /// Every other blob a child writes is internal to the childnet.
  std::vector<std::string> outputs;
};

/// How to compute one layer type, for the schemas it lists. Identified by its
/// descriptor "schema/algorithm" (e.g. "cpu/ref", "cpu:qint8/onednn").
class Routine {
 public:
  virtual ~Routine() = default;
  /// The layer type this routine computes ("conv2", ...).
  virtual std::string_view layer_type() const = 0;
  /// The algorithm part of the descriptor ("ref", "wg", "onednn", ...).
  virtual std::string_view algorithm() const = 0;
  /// Schemas this routine computes in; each gives one descriptor.
  virtual std::vector<Schema> schemas() const { return {Schema{}}; }
  /// The dtype this routine computes at in `schema`: the schema's own, or a
  /// lower one where it quantises inside (cpu/dynamic_int8 reads and writes
  /// float32 and multiplies int8). Such a routine is reduced precision like a
  /// qint8 schema: never an untuned default, a tuning candidate only where a
  /// schema of that dtype is allowed, and held to the accuracy budget.
  virtual DType precision(const Schema& schema) const { return schema.dtype; }
  /// Whether preparing it costs far more than running a layer of a few hundred
  /// values (oneDNN creates a primitive: 25-160 us). The untuned default passes
  /// such a routine over for a tiny layer that another supports in the same
  /// schema: a decode loop prepares its index arithmetic again at every step.
  virtual bool costly_prepare() const { return false; }
  /// Whether the routine can compute this layer in this schema, with the reason when not.
  virtual Support supports(const LayerInfo& layer, const Schema& schema) const = 0;
  /// Tunable parameters for this layer; empty when there is nothing to tune.
  virtual std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const {
    return {};
  }
  /// For a routine computing conv2/dense in qint8: the symmetric range its
  /// weights are quantised to per output channel with these parameters (q in
  /// [-qmax, qmax], the project's convention 127; 63 where a kernel needs 7-bit
  /// weights). Tuning stores such a layer's weights on that grid.
  virtual int weight_qmax(const RoutineParams&) const { return 127; }
  /// A routine that derives weights splits its one-time work in two:
  ///  - pack(): what the layer's weights give it whatever the shapes (packed,
  ///    transformed, quantised), made once per model: the model's store keeps
  ///    it by layer, descriptor, parameters and quantisation (the routine
  ///    names no key) and stores it in tuned files (PackedWeights::save, unpack);
  ///  - plan(): per input shape, the prepared routine over what pack() made.
  /// The default prepare() does both. A routine that packs nothing may
  /// override prepare() alone.
  virtual std::shared_ptr<const PackedWeights> pack(const PackInfo&, const Schema&, const RoutineParams&) const {
    return nullptr;
  }
  /// pack()'s object from the bytes its save() gave, or nullptr where they do
  /// not fit what plan() reads (another build's packing: it packs again).
  virtual std::shared_ptr<const PackedWeights> unpack(const Blob&, const PackInfo&, const Schema&,
                                                      const RoutineParams&) const {
    return nullptr;
  }
  /// The prepared routine at the shapes of `layer`, over `packed` (what pack()
  /// made: nullptr where it makes nothing). Throws softneuro::Error when impossible.
  virtual std::unique_ptr<PreparedRoutine> plan(const LayerInfo& layer, const Schema& schema, const RoutineParams& params,
                                                std::shared_ptr<const PackedWeights> packed) const;
  /// One-time work for a layer at its shapes. The default: pack() through the
  /// model's store (layer.shared; its own copy without one), then plan().
  /// Throws softneuro::Error when impossible.
  virtual std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& layer, const Schema& schema,
                                                   const RoutineParams& params) const;
  /// A childnet routine returns its children here (and nullopt otherwise);
  /// the executor then runs the children instead of calling prepare(). Throws
  /// softneuro::Error when the childnet cannot be built with these parameters.
  virtual std::optional<Childnet> childnet(const LayerInfo&, const Schema&, const RoutineParams&) const {
    return std::nullopt;
  }
  /// Computes `previous` (a layer, or an adapt, run with `previous_routine` and
  /// `previous_params`) and `layer` as one step, where `layer` reads
  /// `previous`'s one output (and maybe other blobs) and is its only reader: the blob between them
  /// is never written whole and needs no memory (after a 1x1 convolution,
  /// oneDNN's fused depthwise one keeps MobileNet's expanded tensor to a few
  /// rows; a first convolution reads the plain image, not a copy padded to 16
  /// channels). The step reads `previous`'s inputs, then `layer`'s other
  /// inputs (a residual add's second operand), and writes `layer`'s outputs.
  /// nullptr (the default): each runs on its own.
  /// Called where the plan chose it (fuses_previous); nullptr there makes the
  /// two run apart after all.
  virtual std::unique_ptr<PreparedRoutine> prepare_with_previous(const LayerInfo& previous,
                                                                 const Routine& previous_routine,
                                                                 const RoutineParams& previous_params,
                                                                 const LayerInfo& layer, const Schema& schema,
                                                                 const RoutineParams& params) const {
    (void)previous, (void)previous_routine, (void)previous_params, (void)layer, (void)schema, (void)params;
    return nullptr;
  }
  /// Whether prepare_with_previous() computes these two as one step: decided
  /// when a session plans, before anything is prepared (nothing packed), so the
  /// plan the tuner reads holds the fusion. False (the default): apart.
  virtual bool fuses_previous(const LayerInfo& previous, const Routine& previous_routine,
                              const RoutineParams& previous_params, const LayerInfo& layer, const Schema& schema,
                              const RoutineParams& params) const {
    (void)previous, (void)previous_routine, (void)previous_params, (void)layer, (void)schema, (void)params;
    return false;
  }
  /// Where this layer, prepared, applies a 256-entry table to its one qint8
  /// input element by element (indexed by the byte as uint8_t): true, and the
  /// table in `table`. A plan folds such steps into a binary step reading both
  /// their input and their result (gates_by_table): YOLOv8's int8 SiLU,
  /// x * sigmoid(x), as one table.
  virtual bool int8_table(const LayerInfo& layer, const Schema& schema, int8_t (&table)[256]) const {
    (void)layer, (void)schema, (void)table;
    return false;
  }
  /// Whether this two-input layer, prepared, can take input `gated` as a
  /// table of the other input (PreparedRoutine::gated_by_table).
  virtual bool gates_by_table(const LayerInfo& layer, const Schema& schema, std::size_t gated) const {
    (void)layer, (void)schema, (void)gated;
    return false;
  }
};

/// Memory of a device other than the CPU, provided by its backend (e.g. CUDA)
/// when the device is present, so the executor can plan device blobs like
/// host ones: one arena per device, allocated once.
struct DeviceMemory {
  void* (*allocate)(std::size_t bytes) = nullptr;  ///< nullptr on failure
  void (*release)(void* ptr) = nullptr;
  /// Waits until the work queued by routines on this device is done.
  void (*synchronize)() = nullptr;
};
/// Registers the memory of `device` (called by the backend when it finds one).
void register_device_memory(Device device, const DeviceMemory& memory);
/// The registered memory of `device`, or nullptr when the device is unavailable.
const DeviceMemory* device_memory(Device device);

/// "schema/algorithm"
std::string make_descriptor(const Schema& schema, std::string_view algorithm);

/// Adds a routine to the library's one registry. A routine whose descriptor
/// and layer type are already registered is refused with an Error.
void register_routine(std::unique_ptr<Routine> routine);

/// Output shapes of a layer from its input shapes; throws softneuro::Error
/// naming the layer and field when they are inconsistent.
using ShapeInference = std::vector<Shape> (*)(const Layer& layer, std::span<const Shape> inputs);

/// A layer type a routine family or plugin adds beside the built-in ones
/// (docs/layer-types.md), e.g. the sub-layers of its childnets.
struct LayerTypeSpec {
  std::string name;
  int min_inputs = 1;
  int max_inputs = 1;  ///< -1: any number
  ShapeInference infer = nullptr;
};

/// Adds a layer type. A name already taken, or no shape inference, is an Error.
void register_layer_type(const LayerTypeSpec& spec);

/// The untuned default's order for a layer type (src/routines/default_order.cpp
/// holds the built-in ones): tiers of descriptors, best first. The default runs
/// a layer with the first routine of the first tier that supports it, except
/// that within that tier a routine computing in the schema the layer's input
/// already has is taken first (it saves an adapt). Routines not listed come
/// after the list in the order they registered: the tuner measures them all.
/// A descriptor may be written "*/algorithm": that algorithm in every schema.
/// Replaces the type's earlier order.
void set_default_order(std::string_view layer_type, std::vector<std::vector<std::string>> tiers);

/// A descriptor a routine was once registered under, so routine paths in
/// older `.dnn` files keep their choices: at load, `old_descriptor` becomes
/// `new_descriptor` and gains `params` (the parameter the rename turned the
/// old name into, e.g. "cpu:qint8/avxvnni" -> "cpu:qint8/qint8" with vnni=1).
/// A descriptor that is registered, or already an alias, is an Error.
void register_descriptor_alias(std::string_view old_descriptor, std::string_view new_descriptor,
                               RoutineParams params = {});

/// Descriptors of every registered routine for `layer_type` (all types when empty), sorted.
std::vector<std::string> registered_routines(std::string_view layer_type = {});

namespace detail {
template <class R>
struct RoutineRegistration {
  RoutineRegistration() { register_routine(std::make_unique<R>()); }
};
}  // namespace detail

}  // namespace softneuro

#define SOFTNEURO_CONCAT_INNER(a, b) a##b
#define SOFTNEURO_CONCAT(a, b) SOFTNEURO_CONCAT_INNER(a, b)
/// Registers routine class R (default-constructible) when the library loads.
#define SOFTNEURO_REGISTER_ROUTINE(R)                                             \
  static const ::softneuro::detail::RoutineRegistration<R> SOFTNEURO_CONCAT( \
      softneuro_routine_registration_, __LINE__) {}
