// Constants during ONNX import: tensors read from the model (inline or
// external data) and the small computations the importer does on them at
// import time (shape arithmetic and data movement, see onnx/importer.hpp).
//
// A constant is a Blob of dtype float32 (every floating ONNX type) or int64
// (every integer type and bool): two types are all shape computations need,
// and float32 is what layers read.
#pragma once

#include "core/mapped_file.hpp"
#include "core/tensor_math.hpp"

#include <softneuro/blob.hpp>
#include <softneuro/error.hpp>

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace softneuro::onnx_import {

/// Where tensors come from: the model file (for messages) and its folder (for external data).
struct TensorSource {
  std::string file;
  std::string dir;
  /// Where set, external data files are mapped (copy on write) and float32
  /// and byte tensors view their pages instead of being read: the dynamic-dim
  /// probes, which import the model again at other sizes and drop it
  /// (an LLM's weights read, copied and zeroed once per probe took most of
  /// its import). The mapped files, by resolved path.
  std::shared_ptr<std::map<std::string, core::MappedFile>> mapped;
};

/// ONNX's narrow element types (opsets 19 to 25), newer than the onnx library
/// some systems build with: their numbers.
enum OnnxNarrowType : int {
  kFloat8E4M3FN = 17, kFloat8E4M3FNUZ = 18, kFloat8E5M2 = 19, kFloat8E5M2FNUZ = 20, kUInt4 = 21, kInt4 = 22,
  kFloat4E2M1 = 23, kFloat8E8M0 = 24, kUInt2 = 25, kInt2 = 26
};
/// The DType of one of those, or nullopt.
std::optional<DType> narrow_dtype(int type);

/// An ONNX element type's name (FLOAT, INT64, FLOAT8E4M3FN, ...), or "type N".
std::string onnx_type_name(int type);
/// The DType a net input or output of this ONNX element type is handed over
/// in (float16/32/64, the integer types, bool, the narrow types), or nullopt.
std::optional<DType> edge_dtype(int type);

/// Reads a TensorProto into a float32 or int64 blob, checking every size
/// (int4, uint4 and float4e2m1 are packed two to a byte, int2 and uint2 four).
/// Errors name the file, `node` and `field`.
/// `bytes`: a UINT8 tensor stays a uint8 blob, one byte a value (the packed
/// 4-bit codes of an LLM's MatMulNBits: as int64 they would take 8x the file).
Blob read_tensor(const onnx::TensorProto& t, const TensorSource& src, const std::string& node,
                 const std::string& field, bool bytes = false);

// The tensor computations of constant folding are core's (core/tensor_math.hpp).
using core::int_blob;
using core::float_blob;
using core::to_ints;
using core::to_doubles;
using core::to_float;
using core::cast_to;
using core::reshaped;
using core::transposed;
using core::concatenated;
using core::gathered;
using core::SliceAxis;
using core::sliced;
using core::kMaxFoldedGrowthBytes;
using core::check_folded_growth;
using core::expanded;
using core::BinaryOp;
using core::binary;
using core::UnaryOp;
using core::unary;
using core::scattered;
using core::where;
using core::broadcast;
using core::uninitialized_blob;

}  // namespace softneuro::onnx_import
