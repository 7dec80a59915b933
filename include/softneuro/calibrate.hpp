// softneuro/calibrate.hpp — calibrate(): the quantisation of every blob
// (scale and zero point) measured on calibration inputs, so qint8 routines can run.
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/session.hpp>

#include <cstdint>
#include <vector>

namespace softneuro {

/// How a blob's range is chosen from the values calibration saw.
enum class RangeMethod : uint8_t {
  minmax,      ///< the observed min and max
  percentile,  ///< the [(100-p)-th, p-th] percentiles (CalibrationOptions::percentile): rare outliers clipped
  mse,         ///< the clipping that minimises the expected squared error of quantising the values seen
  entropy,     ///< the clipping that minimises the KL divergence between the values seen and their quantised
               ///< histogram (TensorRT's entropy calibration)
};
const char* to_string(RangeMethod m);

/// How calibrate() measures the range of every blob.
///
/// The float32 net runs with its default routines on each batch; every blob's
/// range [lo, hi] (widened to include 0) gives an asymmetric signed int8
/// quantisation: scale = (hi - lo) / 255, zero_point = round(-128 - lo / scale),
/// clamped to [-128, 127].
struct CalibrationOptions {
  /// Calibration batches: each one binds every net input by name. Empty:
  /// `synthetic_batches` batches of seeded N(0,1) values (fine for timing;
  /// representative inputs give better accuracy).
  std::vector<std::vector<NamedBlob>> inputs;
  int synthetic_batches = 8;
  /// The range methods to try. calibrate() takes the first. tune()
  /// quantises with each, measures the path it chose with each on the
  /// validation samples (the accuracy budget's metric, then cosine; cosine
  /// where the budget is "none"), and keeps the best; its report names it.
  std::vector<RangeMethod> methods = {RangeMethod::minmax, RangeMethod::percentile, RangeMethod::mse, RangeMethod::entropy};
  /// The percentile method's p, in (50, 100].
  double percentile = 99.99;
};

/// Measures the range of every blob of `model` on calibration inputs (float32,
/// with the default routines) and returns the model with each blob's int8
/// quantisation stored (save() keeps it), so qint8 routines become candidates.
/// Replaces any earlier calibration, but for a quantised model's own
/// quantisation (its Q/DQ steps' scales), which its int8 layers keep
/// computing with; `model` itself is unchanged. Throws
/// softneuro::Error on mismatched inputs. In the tuner's library (softneuro::tune).
Model calibrate(const Model& model, const CalibrationOptions& options = {});

/// A seeded value for `input` of `model` (its shape fixed), as calibration and
/// tuning draw them without samples: float inputs N(0,1); integer inputs that
/// index a table (token ids, positions) uniform below the table's size, other
/// integer inputs (an attention mask, a count) 1. In the tuner's library.
Blob synthetic_input(const Model& model, const TensorInfo& input, unsigned seed = 0);
}  // namespace softneuro
