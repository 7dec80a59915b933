// softneuro/npy.hpp — NumPy .npy files in and out, how scripts talk to softneuro.
#pragma once

#include <softneuro/blob.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace softneuro {

/// Reads a .npy file (little-endian float16/32/64, the integer types, bool, C
/// order; ml_dtypes' bfloat16 as 2-byte voids). ml_dtypes' narrow types (float8,
/// float4, int4, int2) save as 1-byte voids that do not say which: such a file
/// is read as `narrow_type` when given (a model input's DType), else refused.
/// Throws softneuro::Error naming the file on anything else.
Blob load_npy(const std::string& path, std::optional<DType> narrow_type = std::nullopt);
/// Reads a .npz archive (np.savez or np.savez_compressed): one array per
/// member, named as the member without ".npy", in archive order.
std::vector<NamedBlob> load_npz(const std::string& path);
/// Samples of a model's inputs from a folder, for calibration and validation,
/// one sample per file, sorted by name: a `.npy` file binds a model with a
/// single input; a `.npz` binds every input by member name (np.savez(f, x=...,
/// y=...)), and must name each input and nothing else. Each input's values
/// have its dtype in `input_dtypes` (parallel to `input_names`; empty: float32
/// for all): token ids as the model's int64, an image as float32.
/// Other files are skipped; a folder with none, a wrong dtype or member, or
/// more than `max_samples` files is an Error naming the folder or file.
std::vector<std::vector<NamedBlob>> load_samples(const std::string& dir, const std::vector<std::string>& input_names,
                                                 std::size_t max_samples = 4096, const std::vector<DType>& input_dtypes = {});
/// Writes a blob (nchw layout) as .npy, atomically (temporary file, then rename).
void save_npy(const std::string& path, const Blob& blob);
/// Writes blobs as one .npz archive (stored members, as np.savez), atomically.
void save_npz(const std::string& path, std::span<const NamedBlob> arrays);

}  // namespace softneuro
