// The fuzz targets: one function per reader of untrusted bytes, run by a
// libFuzzer harness (entry.cpp) and on the stored inputs of the crashes found
// (regressions.cpp, a test). Each ends in softneuro::Error or a normal return;
// anything else (another exception, a sanitizer report) is a bug.
#pragma once

#include <softneuro/session.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace softneuro::fuzz {

/// The .dnn loader: load, verify, prepare a session, run once.
int dnn_load(const uint8_t* data, std::size_t size);
/// The ONNX importer: import, prepare, run once.
int onnx_import(const uint8_t* data, std::size_t size);
/// The TensorFlow Lite importer: import, prepare, run once.
int tflite_import(const uint8_t* data, std::size_t size);
/// The .npy and .npz readers.
int npy_read(const uint8_t* data, std::size_t size);
/// The profile and calibration cache readers.
int cache_read(const uint8_t* data, std::size_t size);

/// Before the first target runs: one thread. (Mute the log, a warning per
/// damaged input, with SOFTNEURO_LOG=error in the environment: the library
/// reads it when it loads.)
void init();

/// A folder of this process's own (in $TMPDIR), made once.
const std::string& scratch_dir();
/// Writes `data` to `name` in the scratch folder; returns the path.
std::string write_scratch(const std::string& name, const uint8_t* data, std::size_t size);

/// Zero-filled inputs at the model's default shapes, or nothing where they
/// would exceed `max_elements` in all (the run is for the code, not the math).
std::vector<NamedBlob> small_inputs(const Model& model, std::size_t max_elements);
/// Prepares a one-thread session of `model` within a small memory budget and
/// runs it once on small_inputs(), where they and its planned blobs (4 MiB) are small.
void run_once(const Model& model);

}  // namespace softneuro::fuzz
