// softneuro/calibrate.hpp — Net::calibrate(): the quantisation of every blob
// (scale and zero point) measured on calibration inputs, so qint8 routines can run.
#pragma once

#include <softneuro/blob.hpp>

#include <vector>

namespace softneuro {

/// How Net::calibrate() measures the range of every blob.
///
/// The float32 net runs with the reference routines (cpu/ref) on each batch;
/// every blob's range [lo, hi] (widened to include 0) gives an asymmetric
/// signed int8 quantisation: scale = (hi - lo) / 255,
/// zero_point = round(-128 - lo / scale), clamped to [-128, 127].
struct CalibrationOptions {
  /// Calibration batches: each one binds every net input by name. Empty:
  /// `synthetic_batches` batches of seeded N(0,1) values (fine for timing;
  /// representative inputs give better accuracy).
  std::vector<std::vector<NamedBlob>> inputs;
  int synthetic_batches = 8;
  /// 100: the range is the observed min/max. Below 100 (e.g. 99.99): the
  /// range is [(100-p)-th, p-th] percentile of each blob's values over all
  /// batches, which clips rare outliers (a second pass fills histograms).
  double percentile = 100;
};

}  // namespace softneuro
