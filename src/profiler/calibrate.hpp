// Calibration: the body of Net::calibrate(), also used by Net::tune() when a
// qint8 schema is considered and the net has no calibration yet.
#pragma once

#include "core/net_impl.hpp"

#include <softneuro/calibrate.hpp>

#include <string>
#include <vector>

namespace softneuro::profiler {

/// Runs the float32 net with its default routines on the calibration inputs,
/// sets net.graph.blob_quant for every blob (net inputs, constants and every
/// layer output) and rebuilds net.executor so its blobs carry the quantisation.
/// With a `cache_dir` ("" or "-": none) the result is read from / kept in
/// cache_dir/calibration/, keyed by the net's layers, weights and the options.
void calibrate(detail::NetImpl& net, const CalibrationOptions& options, const std::string& cache_dir);

/// `batches` batches of seeded N(0,1) values for every net input (the same on
/// every call; batch k from seed `first` + k: calibration starts at 0).
std::vector<std::vector<NamedBlob>> synthetic_inputs(const detail::NetImpl& net, int batches, unsigned first = 0);

/// The asymmetric int8 quantisation of the range [lo, hi] (widened to include 0):
/// scale = (hi - lo) / 255, zero_point = round(-128 - lo / scale) in [-128, 127].
QuantParams quant_from_range(double lo, double hi);

}  // namespace softneuro::profiler
