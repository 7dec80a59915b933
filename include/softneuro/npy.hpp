// softneuro/npy.hpp — NumPy .npy files in and out, how scripts talk to softneuro.
#pragma once

#include <softneuro/blob.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace softneuro {

/// Reads a .npy file (little-endian float32/float16/int8/uint8/int32/int64, C order).
/// Throws softneuro::Error naming the file on anything else.
Blob load_npy(const std::string& path);
/// Samples of a model's inputs from a folder, for calibration and validation:
/// every regular `.npy` file (sorted by name) is one sample of the model's
/// single input `input_name`, float32. Other files are skipped; a folder with
/// none, a file that is not float32, or `max_samples` exceeded is an Error
/// naming the folder or file.
std::vector<std::vector<NamedBlob>> load_samples(const std::string& dir, const std::string& input_name,
                                                 std::size_t max_samples = 4096);
/// Writes a blob (nchw layout) as .npy, atomically (temporary file, then rename).
void save_npy(const std::string& path, const Blob& blob);

}  // namespace softneuro
