// Constants during ONNX import: tensors read from the model (inline or
// external data) and the small computations the importer does on them at
// import time (shape arithmetic and data movement, see onnx_importer.cpp).
//
// A constant is a Blob of dtype float32 (every floating ONNX type) or int64
// (every integer type and bool): two types are all shape computations need,
// and float32 is what layers read.
#pragma once

#include "core/tensor_math.hpp"

#include <softneuro/blob.hpp>
#include <softneuro/error.hpp>

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace softneuro::onnx_import {

/// Where tensors come from: the model file (for messages) and its folder (for external data).
struct TensorSource {
  std::string file;
  std::string dir;
};

/// An ONNX element type's name (FLOAT, INT64, ...), or "type N" for one newer
/// than the onnx library we build with (float8, int4, ... read blank there).
std::string onnx_type_name(int type);
/// The DType a net input or output of this ONNX element type is handed over
/// in (float16/32/64, the integer types, bool), or nullopt.
std::optional<DType> edge_dtype(int type);

/// Reads a TensorProto into a float32 or int64 blob, checking every size.
/// Errors name the file, `node` and `field`.
Blob read_tensor(const onnx::TensorProto& t, const TensorSource& src, const std::string& node,
                 const std::string& field);

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
