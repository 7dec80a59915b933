// Calibration: the body of calibrate(), also used by tune() when a
// qint8 schema is considered and the net has no calibration yet.
#pragma once

#include "core/model_impl.hpp"

#include <softneuro/calibrate.hpp>

#include <functional>
#include <map>
#include <random>
#include <optional>
#include <string>
#include <vector>

namespace softneuro::profiler {

/// What calibration measured: every blob's quantisation (net inputs,
/// constants and every layer output) under each of CalibrationOptions::methods,
/// in that order, and the mean of every input channel of each conv2 and dense
/// layer's input blob (axis 1; a dense layer's last axis), for bias correction.
struct Calibration {
  std::vector<std::map<std::string, QuantParams>> quants;
  std::map<std::string, std::vector<double>> channel_means;
  /// Each input's net outputs as the float32 default computed them, in the
  /// graph's output order: a validator's references on those samples without
  /// running them again. Empty where the calibration was read from the cache,
  /// an output is not float32, or they would take over kKeptOutputBytes.
  std::vector<std::vector<NamedBlob>> outputs;
};

/// Runs the float32 net with its default routines on the calibration inputs;
/// sets net.tuning.blob_quant to the first method's quantisation and marks the
/// net changed (prepared again). With a `cache_dir` ("" or "-": none) the result
/// is read from / kept in cache_dir/calibration/, keyed by the net's layers,
/// weights and the options.
Calibration calibrate(detail::WorkingModel& net, const CalibrationOptions& options, const std::string& cache_dir);
/// What a calibration depends on (the layers' types, wiring, parameters and
/// weight bytes, the input shapes, the options and inputs given), as a digest.
std::string calibration_key(const detail::WorkingModel& net, const CalibrationOptions& options);

/// A cached calibration file with `methods` range methods; nothing where it is
/// missing or damaged (warned: a checksum mismatch, another version, a scale
/// not finite and positive, a zero point outside int8, a method without records).
std::optional<Calibration> load_calibration(const std::string& path, std::size_t methods);

/// Bias correction (Nagel et al., data-free quantisation): `grid` (the int8
/// grid of conv2/dense layer `l`'s float32 weight) shifts each output channel's
/// mean by sum_k (grid - w)[o, k] * E[x_k]; the bias that cancels it.
/// `means`: the layer input's channel means (Calibration::channel_means).
Blob corrected_bias(const Layer& l, const Blob& grid, const std::vector<double>& means);

/// A synthetic value for net input `t` of `graph`: float inputs from `real`
/// (one draw per value), integer and boolean inputs in their valid range:
/// indices into a table (token ids, positions; followed through layers that
/// only move values to a gather) below the table's size, any other integer
/// input (a mask, a count) 1.
Blob synthetic_input(const TensorInfo& t, const core::Graph& graph, std::mt19937& rng,
                     const std::function<float(std::mt19937&)>& real);

/// `batches` batches of seeded N(0,1) values for every net input (the same on
/// every call; batch k from seed `first` + k: calibration starts at 0).
std::vector<std::vector<NamedBlob>> synthetic_inputs(const detail::WorkingModel& net, int batches, unsigned first = 0);

/// The asymmetric int8 quantisation of the range [lo, hi] (widened to include 0):
/// scale = (hi - lo) / 255, zero_point = round(-128 - lo / scale) in [-128, 127].
QuantParams quant_from_range(double lo, double hi);

/// `graph` to run on the default float32 routines with every value a layer
/// computes made a net output (not constants' or net inputs'), each as the
/// float32 the layers compute: a run leaves them all in the caller's memory.
core::Graph every_value_out(const core::Graph& graph);

}  // namespace softneuro::profiler
