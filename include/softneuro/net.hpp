// softneuro/net.hpp — load, save and run a net.
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/calibrate.hpp>
#include <softneuro/tune.hpp>

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace softneuro {

namespace detail {
struct NetImpl;
}

/// A net input or output: its name, logical shape and dtype.
struct TensorInfo {
  std::string name;
  Shape shape;
  DType dtype = DType::float32;
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
  bool tuned = false;      ///< whether the descriptor comes from a tuned routine path
  double predicted_ms = 0; ///< time the tuner predicted (0 when untuned)
  double measured_ms = 0;  ///< time the tuner measured in a whole-net run of the chosen path (0: none)
  /// Filled by layers(true): every registered routine of the layer's type, in
  /// every schema, with why it is not a candidate (empty reason: it is one).
  struct Candidate {
    std::string descriptor;
    bool supported = false;
    std::string reason;
  };
  std::vector<Candidate> candidates;
};

/// A net: a DAG of layers with named inputs and outputs, routines prepared,
/// memory planned. Move-only. Not safe to run from two threads at once.
class Net {
 public:
  /// Reads a .dnn file (memory-mapped; weights used in place), checks it fully
  /// (format version, checksum, every index and size) and prepares its routines.
  /// Throws softneuro::Error naming the file, layer and field at fault.
  static Net load(const std::string& path);
  /// Writes a .dnn file atomically: a temporary file renamed over `path`, so a
  /// failed save leaves any previous file intact.
  void save(const std::string& path) const;

  Net(Net&&) noexcept;
  Net& operator=(Net&&) noexcept;
  ~Net();

  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  /// Shape of the named input or output; throws softneuro::Error for an unknown name.
  Shape input_shape(const std::string& name) const;
  Shape output_shape(const std::string& name) const;

  /// Runs the net. Inputs are read in place (zero-copy); each output is written
  /// straight into the memory of the caller's blob of that name, which must
  /// have the output's shape. After the first call this performs no heap
  /// allocation. Throws softneuro::Error on a missing, unknown or mis-shaped blob.
  void run(std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs);
  /// Convenience form: returns freshly allocated outputs, in outputs() order.
  std::vector<NamedBlob> run(std::span<const NamedBlob> inputs);

  /// Measures the candidate routines of every layer on this device (unit
  /// profiling, then integrated profiling in whole-net runs), picks the
  /// fastest routine path with DPRS, adapts included, and keeps it in the
  /// net: run() uses it from now on and save() stores it with this device's
  /// fingerprint. Throws softneuro::Error when no path exists.
  TuneReport tune(const TuneOptions& options = {});

  /// Measures the range of every blob on calibration inputs (float32, with
  /// the reference routines) and stores each blob's int8 quantisation in the
  /// net (save() keeps it), so qint8 routines become candidates. Replaces any
  /// earlier calibration. Throws softneuro::Error on mismatched inputs.
  void calibrate(const CalibrationOptions& options = {});

  /// The layers in execution order with their chosen routines; with
  /// `explain`, also every routine considered and why it was or was not a candidate.
  std::vector<LayerSummary> layers(bool explain = false) const;
  /// Bytes of the planned arena shared by all intermediate blobs and
  /// workspaces, and the sum of those blobs' own sizes (what no plan would use).
  std::size_t planned_bytes() const;
  std::size_t unplanned_bytes() const;
  /// The device fingerprint a tuned path was made on, empty when untuned.
  std::string tuned_fingerprint() const;
  /// The name of the model (from the file).
  const std::string& name() const;

  /// For the library's own modules (importer, tuner); not for apps.
  explicit Net(std::unique_ptr<detail::NetImpl> impl);
  detail::NetImpl& impl() { return *impl_; }
  const detail::NetImpl& impl() const { return *impl_; }

 private:
  std::unique_ptr<detail::NetImpl> impl_;
};

/// Sets the number of threads of the library's one thread pool, and of every
/// library it wraps (so 1 really means one thread). Default: all cores.
void set_num_threads(int threads);
int num_threads();

/// Call first thing in main(): the OpenMP runtime under the thread pool
/// (libgomp) reads how idle threads wait once, when it loads, and the right way
/// depends on the machine. Unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set, or
/// a thread binding (OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY: a re-executed
/// program would inherit the one CPU libgomp bound the first one to),
/// re-executes the program once (same argv) with a short spin
/// (GOMP_SPINCOUNT=10000), or with OMP_WAIT_POLICY=passive when the 1-minute
/// load already fills every core. Returns only when it did not re-execute.
void choose_openmp_wait(char** argv);

/// The library's version, e.g. "0.1.0".
const char* version();

}  // namespace softneuro
