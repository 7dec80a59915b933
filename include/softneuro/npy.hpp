// softneuro/npy.hpp — NumPy .npy files in and out, how scripts talk to softneuro.
#pragma once

#include <softneuro/blob.hpp>

#include <string>

namespace softneuro {

/// Reads a .npy file (little-endian float32/float16/int8/uint8/int32/int64, C order).
/// Throws softneuro::Error naming the file on anything else.
Blob load_npy(const std::string& path);
/// Writes a blob (nchw layout) as .npy, atomically (temporary file, then rename).
void save_npy(const std::string& path, const Blob& blob);

}  // namespace softneuro
