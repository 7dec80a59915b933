// softneuro/net.hpp — load, save and run a net.
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/calibrate.hpp>
#include <softneuro/session.hpp>
#include <softneuro/tune.hpp>

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace softneuro {

namespace detail {
struct NetImpl;
}

/// A model and one session of it, for the simple case (and the tuner and
/// calibration, which change the model): load, run, tune, save. Its session is
/// prepared at the first run() or layers(). Move-only. Not safe to use from two
/// threads at once: for concurrent runs, take model() and one Session per thread.
class Net {
 public:
  /// Model::load: reads and checks a .dnn file; prepares nothing yet.
  static Net load(const std::string& path);
  /// The model as it is now (a snapshot: a later tune() or calibrate() changes
  /// this net, not models taken before).
  Model model() const;
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
  /// fingerprint. Throws softneuro::Error when no path exists. Defined in the
  /// tuner's library (CMake softneuro::tune): an app that only runs tuned
  /// models links the runtime alone.
  TuneReport tune(const TuneOptions& options = {});

  /// Measures the range of every blob on calibration inputs (float32, with
  /// the reference routines) and stores each blob's int8 quantisation in the
  /// net (save() keeps it), so qint8 routines become candidates. Replaces any
  /// earlier calibration. Throws softneuro::Error on mismatched inputs.
  /// Defined in the tuner's library (softneuro::tune), as tune() is.
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
  /// How OpenMP threads waited while the tuned path was measured (see
  /// openmp_wait()); empty when untuned or not recorded.
  std::string tuned_openmp_wait() const;
  /// Model::tuned_shapes.
  std::vector<std::map<std::string, Shape>> tuned_shapes() const;
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
/// Throws softneuro::Error (field "threads") where that many threads cannot
/// start at once in this process.
void set_num_threads(int threads);
int num_threads();

/// How the idle threads of the library's team (libgomp's, shared with oneDNN
/// and XNNPACK) wait between parallel regions: "passive" (they sleep at once),
/// "spin=N" (N spins, then sleep) or "active". libgomp reads it once, when it
/// loads, from OMP_WAIT_POLICY and GOMP_SPINCOUNT (default spin=300000): set
/// those in the environment the process starts with. A tuned routine path
/// stores the wait it was measured under, and Net::load warns where the
/// process waits otherwise (a path measured with sleeping threads can lose
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

}  // namespace softneuro
