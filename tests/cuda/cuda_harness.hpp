// Test harness for the CUDA backend: moves blobs between the CPU and the
// device with the library's own adapt routines, runs one layer through one
// CUDA routine, and compares against cpu/ref. Needs no CUDA headers: device
// memory comes from device_memory(Device::cuda).
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/routine.hpp>

#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace softneuro::cudatest {

/// A blob in `schema` with memory of its own (device memory for cuda schemas).
Blob allocate(const Shape& shape, const Schema& schema);
/// Waits for the device's queue.
void synchronize();

/// Converts `in` (in schema `from`) to schema `to` with the adapt routine the
/// executor would pick, and waits for it. Throws Error when none converts.
Blob adapt(const Blob& in, const Schema& from, const Schema& to);
/// The descriptor of that adapt routine.
std::string adapt_descriptor(const Shape& shape, const Schema& from, const Schema& to);

/// A float32 CPU blob with uniform values in [lo, hi).
Blob random_blob(const Shape& shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f);
/// The float32 values rounded to float16 and back (host-side reference rounding).
Blob round_to_half(const Blob& f32);
float round_to_half(float x);

/// Runs `layer` through the CUDA routine `descriptor` with `params`: float32
/// CPU nchw inputs are adapted to its schema, outputs come back float32 CPU
/// nchw. nullopt when prepare() refused these parameters for this shape
/// (an Error; its message in *why); a routine that does not support the layer
/// at all throws.
std::optional<std::vector<Blob>> run_on_device(const Layer& layer, const std::vector<Blob>& inputs,
                                               const std::string& descriptor, const RoutineParams& params = {},
                                               std::string* why = nullptr);

/// The schema of a registered descriptor.
Schema schema_of(const std::string& layer_type, const std::string& descriptor);
/// Every registered CUDA descriptor ("cuda...") for a layer type.
std::vector<std::string> cuda_descriptors(const std::string& layer_type);

struct Tolerance {
  double abs = 1e-5;  ///< times max(1, max |want|)
  double rel = 1e-4;
};
/// The tolerance for a schema's dtype: float32 tight (times `scale_up` for
/// long reductions and cuDNN's FFT/Winograd), float16 looser.
Tolerance tolerance_for(const Schema& schema, double scale_up = 1.0);

/// Checks got ~ want elementwise (same shapes); `what` names the case in failures.
/// Returns whether all matched.
bool close(const Blob& got, const Blob& want, const Tolerance& tol, const std::string& what);

/// The inputs as the routine's dtype sees them: float16 schemas round them.
std::vector<Blob> as_seen_by(const std::vector<Blob>& inputs, const Schema& schema);

/// Per CUDA descriptor: the (parameters, case) runs compared, and why the others were not.
struct RoutineTally {
  int runs = 0;
  std::string refusals;
};

/// Runs `layer` through every CUDA routine of its type (every schema each lists,
/// and every combination of its routine parameters) and compares with cpu/ref
/// on the same inputs. Returns how many (routine, parameter) runs were compared;
/// adds each descriptor's to `tally` where given.
int check_all_cuda_routines(const Layer& layer, const std::vector<Blob>& inputs, const std::string& what,
                            double scale_up = 1.0, std::map<std::string, RoutineTally>* tally = nullptr);

}  // namespace softneuro::cudatest
