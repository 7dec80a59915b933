// Small tensor computations on float32 and int64 blobs, in plain loops: the
// importer's constant folding and the shape computations a session evaluates
// when it meets new input shapes (shape_math layers, core/shape_plan.hpp).
// Every function returns a new blob (or a view with another shape); errors name
// no layer: the caller adds it.
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/error.hpp>

#include <cstdint>
#include <vector>

namespace softneuro::core {

/// A 64-byte aligned blob left uninitialised (Blob::allocate zero-fills).
Blob uninitialized_blob(const Shape& shape, DType dtype);

/// A blob of ints / floats with the given shape.
Blob int_blob(const Shape& shape, const std::vector<int64_t>& values);
Blob float_blob(const Shape& shape, const std::vector<float>& values);

/// The values of a float32 or int64 blob as int64 (floats truncated) / double.
std::vector<int64_t> to_ints(const Blob& b);
std::vector<double> to_doubles(const Blob& b);
/// The blob as float32 (a copy when it is int64).
Blob to_float(const Blob& b);
/// The blob converted to float32 or int64.
Blob cast_to(const Blob& b, DType dtype);

Blob reshaped(const Blob& b, const Shape& shape);  ///< same values, other shape (shares memory)
Blob transposed(const Blob& b, const std::vector<int64_t>& perm);
Blob concatenated(const std::vector<Blob>& parts, int axis);
/// data.take(indices, axis) (NumPy), negative indices counted from the end.
Blob gathered(const Blob& data, const Blob& indices, int axis);
/// One axis: elements start, start+step, ... before end (already clamped, ONNX Slice rules).
struct SliceAxis {
  int axis;
  int64_t start, end, step;
};
Blob sliced(const Blob& data, const std::vector<SliceAxis>& axes);
/// NumPy broadcast of `b` to `shape`.
/// Constants folded at import may grow past their inputs' bytes only up to
/// this (a 167-byte file's ConstantOfShape [8192,8192] made a 256 MiB model).
inline constexpr std::size_t kMaxFoldedGrowthBytes = std::size_t{64} << 20;
/// Throws Error where a folded constant of `shape` and `dtype`, made from
/// `from_bytes` bytes of constants, grows past kMaxFoldedGrowthBytes.
void check_folded_growth(const Shape& shape, DType dtype, std::size_t from_bytes);

Blob expanded(const Blob& b, const Shape& shape);
enum class BinaryOp { add, sub, mul, div, mod, fmod, pow, min, max, equal, less, greater, logical_and, logical_or };
/// Elementwise with NumPy broadcasting; int64 when both are int64, and for the
/// comparisons and logic (0/1). mod: the sign of the divisor (ONNX Mod fmod=0); fmod: C's.
Blob binary(BinaryOp op, const Blob& a, const Blob& b);
enum class UnaryOp { neg, abs, sqrt, floor, ceil, logical_not, relu };
Blob unary(UnaryOp op, const Blob& a);
/// ONNX ScatterND (no reduction): data with the slices at `indices` replaced by `updates`.
Blob scattered(const Blob& data, const Blob& indices, const Blob& updates);
/// ONNX Range: start, start + delta, ... before limit (one-element blobs), in
/// int64 exactly where start is int64, else in double stored as float32.
/// Throws Error for delta 0 or more than `max_count` elements.
Blob arange(const Blob& start, const Blob& limit, const Blob& delta, int64_t max_count);
/// ONNX's HannWindow, HammingWindow and BlackmanWindow (`kind`: hann, hamming,
/// blackman) of `size` values (0..2^24), periodic or symmetric, computed in
/// double: float32, or int64 truncated (an integer output_datatype, as numpy's
/// astype). Throws Error (field "size") outside that range.
Blob window_values(std::string_view kind, int64_t size, bool periodic, bool integer);
/// cond ? a : b, broadcast.
Blob where(const Blob& cond, const Blob& a, const Blob& b);
/// ONNX Trilu: `x` (rank 2 or more) with the elements outside the upper
/// (j - i >= k) or lower (j - i <= k) triangle of its last two dims zeroed.
Blob triangle(const Blob& x, int64_t k, bool upper);
/// A matrix of `shape` (2-D) with ones on diagonal k (ONNX EyeLike), zeros elsewhere.
Blob eye(const Shape& shape, int64_t k, DType dtype);

/// NumPy broadcast of two shapes; throws Error (no layer) when they do not broadcast.
Shape broadcast(const Shape& a, const Shape& b);

}  // namespace softneuro::core
