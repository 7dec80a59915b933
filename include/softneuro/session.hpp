// softneuro/session.hpp — a model, loaded once, and the sessions that run it.
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/layer.hpp>  // Layer, for Model::build

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace softneuro {

namespace detail {
struct ModelImpl;
struct ModelAccess;
class SessionImpl;
}

/// A net input or output: its name, logical shape and dtype.
struct TensorInfo {
  std::string name;
  /// An input's default shape (what a session prepares for at creation,
  /// unless the file was tuned at other shapes: then those, see
  /// Model::tuned_shapes), an output's shape at the default input shapes.
  Shape shape;
  DType dtype = DType::float32;
  /// An input's dims that may take any size at run (symbolic in the source
  /// model, e.g. batch or image width); the other dims must be as in `shape`.
  /// An output's dims whose size depends on the input values (the boxes a
  /// NonMaxSuppression keeps): `shape` gives the most they can hold.
  std::vector<int> dynamic_dims;
};

/// One layer as `softneuro inspect` shows it, with the routine that runs it.
struct LayerSummary {
  std::string name;
  std::string type;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<Shape> output_shapes;
  std::string params;      ///< "strides=[1,1] group=1 ..." (weights as "name:shape")
  std::string descriptor;  ///< the routine chosen to run it, e.g. "cpu/ref"
  std::string routine_params;  ///< "tile=4 ..." or empty
  /// Its blobs' quantisation: "in 0.0235/128 out 0.0117/0" (per axis
  /// "axis0:64#DIGEST", none "-"); empty where no blob of the step is quantised.
  std::string quant;
  bool tuned = false;      ///< whether the descriptor comes from a tuned routine path
  double predicted_ms = 0; ///< time the tuner predicted (0 when untuned)
  double measured_ms = 0;  ///< time the tuner measured in a whole-net run of the chosen path (0: none)
  /// The layer (or adapt) whose step computes this one too, so that the blob
  /// between them is never written (Routine::prepare_with_previous); empty: none.
  std::string fused_into;
  /// Runs nothing: its output shares its input's memory (a reshape, an
  /// identity quantisation step between int8 layers), or its pieces share
  /// their whole's (a concat's inputs lie in its output, a split's outputs in
  /// its input).
  bool view = false;
  /// Filled by layers(true): every registered routine of the layer's type, in
  /// every schema, in the untuned default's order (set_default_order), with
  /// why it is not a candidate (empty reason: it is one).
  struct Candidate {
    std::string descriptor;
    bool supported = false;
    std::string reason;
    int default_tier = -1;  ///< its tier in the default order (0: first); -1: not listed
  };
  std::vector<Candidate> candidates;
};

/// A loaded model: the layers, their weights (memory-mapped from the file) and
/// the tuned routine path. Immutable: every member is safe from any number of
/// threads at once. A cheap handle: copies share the model. Loading, inspecting
/// and saving prepare nothing; sessions do.
/// How the accuracy of a tuned routine path was checked (tune()'s accuracy
/// budget), as the .dnn file records it.
struct AccuracyCheck {
  /// Whether the path computes layers below float32 (qint8, float16,
  /// bfloat16), not counting the int8 layers of a model its author quantised.
  bool reduced_precision = false;
  /// The budget the path was held to ("top1:0.99", "seq:0.95", "ctc:0.95", "cosine:0.999",
  /// "rel-l2:0.02", a metric of the user's "NAME:MIN"); "none": reduced
  /// precision allowed unchecked (tune --accuracy none); empty: no budget (a
  /// float32 tuning, an untuned model, or a file tuned before records were kept).
  std::string budget;
  /// The user's samples the budget was measured on (0: never on real data).
  int samples = 0;
  /// The budget's metric of the path (-1: not measured).
  double measured = -1;
  /// Whether the file carries the record (false: untuned, or tuned before
  /// records were kept; reduced_precision is then read from the path).
  bool recorded = false;
  /// Whether the path's accuracy holds by check: it computes nothing below
  /// float32, or met its budget on real samples.
  bool checked() const { return !reduced_precision || (samples > 0 && !budget.empty() && budget != "none"); }
};

class Model {
 public:
  /// Reads a .dnn file (memory-mapped; weights used in place) and checks it
  /// fully (format version, checksum, every index and size). Throws
  /// softneuro::Error naming the file, layer and field at fault.
  static Model load(const std::string& path);
  /// Reads a .dnn file's bytes from memory (a model embedded in the app or
  /// read from an asset), copied into memory the model owns, and checks them
  /// as load() does; `name` stands for the file in error messages.
  static Model load_bytes(const void* data, std::size_t size, const std::string& name = "<memory>");
  /// Builds a model in code from layers of the documented layer types
  /// (docs/layer-types.md), e.g. a generated test model. The
  /// layers may come in any order; blobs are named by the layers' inputs and
  /// outputs. Checks the graph and infers every shape as load does; throws
  /// softneuro::Error naming the layer and field at fault.
  static Model build(std::string name, std::vector<TensorInfo> inputs, std::vector<Layer> layers,
                     std::vector<std::string> outputs);
  /// Writes a .dnn file atomically (a temporary file renamed over `path`).
  void save(const std::string& path) const;

  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  /// Shape of the named input or output; throws softneuro::Error for an unknown name.
  Shape input_shape(const std::string& name) const;
  Shape output_shape(const std::string& name) const;
  /// The device fingerprint a tuned path was made on, empty when untuned.
  std::string tuned_fingerprint() const;
  /// How OpenMP threads waited while the tuned path was measured (openmp_wait()).
  std::string tuned_openmp_wait() const;
  /// The input shapes of each tuned routine path (tune --shapes; empty: none
  /// or tuned at the default shapes only).
  std::vector<std::map<std::string, Shape>> tuned_shapes() const;
  /// How the tuned path's accuracy was checked (untuned: nothing reduced, no record).
  AccuracyCheck accuracy_check() const;
  const std::string& name() const;
  /// Bytes of the routine path's derived weights the file holds ready to use
  /// (TuneOptions::prepared_weights; 0: none), and whether sessions here read
  /// them: only a library of the same version on a CPU with the same
  /// extensions does; elsewhere they derive the weights as without them.
  std::size_t prepared_weight_bytes() const;
  bool prepared_weights_usable() const;

 private:
  friend struct detail::ModelAccess;  // the library's own modules (core/model_impl.hpp)
  explicit Model(std::shared_ptr<const detail::ModelImpl> impl);
  std::shared_ptr<const detail::ModelImpl> impl_;
};

/// How a session runs its model.
struct SessionOptions {
  /// Threads of this session's runs (0: the library's count, set_num_threads).
  /// Sessions run in several threads side by side, each with its own team.
  /// Keep the threads of all teams that run at once within the cores, counting
  /// a team any other thread of the app ran: where libgomp manages more threads
  /// than cores, its idle threads sleep at once instead of spinning (a session
  /// at 2 threads ran 2x slower beside the main thread's idle team on 2 cores).
  int threads = 0;
  /// The most bytes the session's planned arena (intermediate blobs and
  /// workspaces) may take at any input shape, checked before it is allocated:
  /// a larger plan is an Error naming `memory_limit` (at creation, reshape or
  /// run), as is a single input or intermediate blob larger than the limit
  /// (refused before any routine is prepared for it). 0: three quarters of
  /// the machine's physical memory (a file whose shapes ask for more is
  /// refused, not left to the system's out-of-memory killer); kNoMemoryLimit:
  /// none.
  std::size_t memory_limit = 0;
  static constexpr std::size_t kNoMemoryLimit = ~std::size_t{0};
  /// Schemas the session's routines may compute in: schemas ("cpu",
  /// "cpu:qint8") or globs over device:dtype:layout ("cpu:float32:*"), as
  /// TuneOptions::schemas. Where the model's tuned routine for a layer computes
  /// in another, the default choice among these runs it. Empty: the tuned
  /// path's schemas, and float32 on the CPU for the default choice.
  std::vector<std::string> schemas;
  /// Input shapes whose prepared state (routines, memory plan, arena) the
  /// session keeps, the least recently used dropped first (at least 1). Once
  /// it keeps that many, a new shape in the bucket of a kept one runs that
  /// one's plan (its routine choices; the steps whose shapes change prepared
  /// again): a bucket is a set of shapes whose dims, where they differ, round
  /// up to the same power of two (1, 2, 3-4, 5-8, ...). A decode loop that
  /// meets a new cache length at every step builds a plan per bucket, not per
  /// length (docs/memory.md).
  std::size_t shape_cache = 4;
};

/// The prepared run state of a model: routines prepared, memory planned, one
/// arena. Derived weights (packed, reordered, transformed) are the model's,
/// shared by all its sessions. run() is safe from one thread at a time per
/// session; sessions of one model run concurrently with identical outputs.
/// Keeps its model alive. Move-only.
class Session {
 public:
  explicit Session(const Model& model, const SessionOptions& options = {});
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  /// Runs the model. Inputs are read in place (zero-copy); each output is
  /// written straight into the memory of the caller's blob of that name, which
  /// must have output_shape() at these inputs' shapes. Inputs may take any size
  /// in their dynamic dims: a new shape is prepared once (shape inference,
  /// routines, memory plan) and kept, or runs a kept plan of its shape bucket
  /// (SessionOptions::shape_cache); runs at a shape kept perform no heap
  /// allocation of ours. Throws
  /// softneuro::Error on a missing, unknown or mis-shaped blob, naming it.
  /// A model whose sizes depend on values (NonMaxSuppression, NonZero: its
  /// outputs() list such dims as dynamic) runs in stages, each planned at the
  /// sizes the ones before produced; its outputs are copied into the caller's
  /// blobs where their shapes match, and otherwise replace them. An input
  /// whose value sets sizes (a window's size, Range's bounds given as inputs:
  /// docs/importing.md) is part of a plan's key like a shape: give it in host
  /// memory; outputs() give the shapes at ones.
  void run(std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs);
  /// Convenience form: returns the outputs, in outputs() order, in memory of
  /// their own: fresh, or that of outputs it returned in the two runs before
  /// once the caller holds no blob over it (a decode loop's step outputs, let
  /// go of after the next step read them, are not allocated again). Outputs
  /// the caller holds are never written again.
  std::vector<NamedBlob> run(std::span<const NamedBlob> inputs);
  /// As run(), and returns each step's wall time in milliseconds, in the
  /// order of layers() (adapts included; a step fused into the one before it
  /// takes 0). Each step waits for its work to finish (device queues
  /// included), so the sum may exceed a plain run's time. For per-layer
  /// comparisons (`softneuro run --steps`), not for serving.
  std::vector<double> run_timed(std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs);
  /// Prepares for these input shapes now (inputs not named: their default
  /// shape), so that the next run at them does no preparation, and makes them
  /// the shapes output_shape() answers for.
  void reshape(const std::map<std::string, Shape>& input_shapes);
  /// The named output's shape at the input shapes of the last run or reshape
  /// (at first: the default ones); for an output whose size depends on values,
  /// its shape in the last run (before any: its capacity, Model::outputs()).
  Shape output_shape(const std::string& name) const;

  const Model& model() const;
  /// The layers in execution order with their chosen routines; with `explain`,
  /// also every routine considered and why it was or was not a candidate.
  std::vector<LayerSummary> layers(bool explain = false) const;
  /// Bytes of the planned arena, and the sum of the planned blobs' own sizes.
  std::size_t planned_bytes() const;
  std::size_t unplanned_bytes() const;
  /// Plans this session built (one per input shape met, until shape_cache
  /// are kept; then one per new shape bucket) and plans it re-bound to
  /// another shape of their bucket.
  struct PlanCounts {
    std::size_t built = 0;
    std::size_t rebound = 0;
  };
  PlanCounts plan_counts() const;

 private:
  std::unique_ptr<detail::SessionImpl> impl_;
};

/// Sets the number of threads of the library's one thread pool, and of every
/// library it wraps (so 1 really means one thread). Default: all cores.
/// Throws softneuro::Error (field "threads") where that many threads cannot
/// start at once in this process.
void set_num_threads(int threads);

/// Loads the plugin at `path` (softneuro/plugin.hpp says how one is written)
/// and registers its routines. Throws softneuro::Error (naming the file) when
/// the file is not a loadable library, lacks the entry points, was built for
/// another ABI version, or registers a descriptor twice. Loading the same file
/// twice is a no-op.
void load_plugin(const std::string& path);
int num_threads();

/// How the idle threads of the library's team (libgomp's, shared with oneDNN
/// and XNNPACK) wait between parallel regions: "passive" (they sleep at once),
/// "spin=N" (N spins, then sleep) or "active". libgomp reads it once, when it
/// loads, from OMP_WAIT_POLICY and GOMP_SPINCOUNT (default spin=300000): set
/// those in the environment the process starts with. A tuned routine path
/// stores the wait it was measured under, and loading such a file warns where
/// the process waits otherwise (a path measured with sleeping threads can lose
/// where they spin, and the other way round).
std::string openmp_wait();

/// How many times so far the team ran on one thread for a while because other
/// processes held the CPUs (its workers started parallel regions milliseconds
/// late): spinning and waiting for descheduled workers cost more than the
/// second thread gave. The whole team is tried again after 0.1 s, waiting
/// twice as long each time it stalls again at once (up to 1.6 s).
/// SOFTNEURO_CONTENTION_GUARD=0 in the environment keeps the whole team always.
int64_t contention_shrinks();

/// The library's version, e.g. "0.1.0".
const char* version();

/// A digest of the sources this library was built from (its core, routines and
/// adapts), 16 hex digits. Builds of one version from different sources differ
/// here: a tuned file's prepared weights and the profile cache's timings are
/// kept per digest, never read by a build that packs or computes differently.
const char* source_digest();

/// What identifies this device to a tuned path: "CPU model | ISA extensions
/// routines dispatch on | logical CPUs", e.g. "AMD EPYC | avx2 fma f16c | 2 cpus".
/// A file tuned on an equal fingerprint (Model::tuned_fingerprint) runs here as
/// tuned: a fleet keeps one tuned .dnn per fingerprint (examples/serve).
std::string device_fingerprint();

}  // namespace softneuro
