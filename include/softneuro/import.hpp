// softneuro/import.hpp — ONNX and TensorFlow Lite models into Models.
//
// import_onnx is in library softneuro::onnx (it brings protobuf and Debian's
// libonnx along privately), import_tflite in softneuro::tflite (FlatBuffers
// only); apps that only load and run .dnn files link softneuro::softneuro alone.
//
//   softneuro::Model model = softneuro::import_onnx("resnet50.onnx");
//   model.save("resnet50.dnn");
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/session.hpp>

#include <map>
#include <string>

namespace softneuro {

/// What import_onnx and import_tflite do beyond translating operators into layers.
struct ImportOptions {
  /// Shapes of net inputs, by name: a dim given here fixes a symbolic (e.g.
  /// "batch") or unknown dim of the ONNX shape; -1 leaves it symbolic. An entry
  /// must agree with every fixed dim of the ONNX shape. Symbolic dims stay
  /// dynamic (TensorInfo::dynamic_dims: sessions take any size there) where the
  /// model runs at any size of them: values the model computes from shapes are
  /// computed again at each new input shape (shape_math layers), and the
  /// importer imports again with each dim at other sizes (skipping sizes the
  /// model refuses) and keeps it where every remaining difference is a reshape
  /// target it can express; otherwise the dim stays at its default with a
  /// warning naming the layer. Default sizes: 1 for a leading dim, 64 for others.
  std::map<std::string, Shape> input_shapes;

  /// Graph passes, run in this order after the translation (all on by default).
  /// Each keeps the net's outputs the same (up to float rounding).
  bool remove_identities = true;      ///< Identity and Dropout disappear
  bool fold_constants = true;         ///< layers of constants only are computed once (and quantize_dynamic's
                                      ///< dequantisation folded into a gather's table or a dense layer)
  bool fold_pads = true;              ///< a pad of zeros on H and W into the conv2 that reads it
  bool fold_batchnorm = true;         ///< batchnorm into the preceding conv2/dense weights
  bool fold_scale_mul = true;         ///< mul by a per-channel (or single) constant into conv2/dense weights
  bool fold_bias_add = true;          ///< add of a per-channel (or single) constant into conv2/dense bias
  bool fold_input_affine = true;      ///< mul/add of a per-input-channel constant into the conv2/dense reading it
  bool fuse_self_gating = true;       ///< mul(x, hardsigmoid(x)) into hardswish, mul(x, sigmoid(x)) into silu
  bool fuse_activations = true;       ///< relu/clip/hardswish/hardsigmoid/sigmoid into conv2/dense; relu/clip into add
  bool fuse_output_affine = true;     ///< mul/add of a single constant after a conv2/dense's fused activation into it
  bool fuse_attention = true;         ///< matmul-softmax-matmul (scaled, masked, transposes around) into one attention layer
  bool merge_duplicates = true;       ///< layers computing the same thing from the same inputs: one is kept
  bool eliminate_dead_layers = true;  ///< layers no output depends on

  /// The net's name; empty: the ONNX graph's name, else the file's stem.
  std::string name;
};

/// Reads an ONNX model (opsets 11 to 28, initializers inline or in external
/// data files beside it), translates it into layers, runs the graph passes the
/// options enable, and returns the model (to save(), tune() or run in a Session).
///
/// Supported operators (default domain): Conv (2-D), ConvTranspose (2-D: groups,
/// strides, dilations, pads, output_padding, output_shape, auto_pad), Gemm, MatMul, Einsum
/// (any equation; batched matrix products as matmul), Relu, Clip, HardSwish, HardSigmoid, Sigmoid,
/// Tanh, Gelu, Add, Sub, Mul, Div, Pow (squares), GlobalAveragePool,
/// GlobalMaxPool, AveragePool, MaxPool (1-D to 3-D; ceil_mode, asymmetric pads, auto_pad; Indices), MaxUnpool,
/// ReduceMean/ReduceMax (contiguous axes), Flatten, Reshape, Squeeze,
/// Unsqueeze, Concat, Split, Slice (any steps; backwards: at most 256 elements), Gather (constant indices),
/// Transpose, Pad, Expand, Resize (nearest with every nearest_mode, linear;
/// every coordinate_transformation_mode; scales or sizes), BatchNormalization, Softmax (both the opset < 13 and
/// the >= 13 meaning of axis), LayerNormalization, Constant, Identity,
/// Dropout, Cast and CastLike (to every numeric type, float8, float4e2m1, int4
/// and int2 included), QuantizeLinear/DequantizeLinear, If (a condition known
/// at import: the branch taken is imported in place; from shapes: taken when
/// planned; at run time: both computed, one chosen), Loop and Scan (the body a
/// graph of its own, run per iteration), NonMaxSuppression, NonZero, Unique,
/// TopK, RoiAlign, DeformConv, DFT, STFT, TensorScatter, and more: docs/importing.md lists
/// every operator with what it supports. ONNX Runtime's quantised
/// operators (domain com.microsoft, as its QOperator quantize_static writes):
/// QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
/// QLinearGlobalAveragePool, QLinearConcat, QGemm, QuantizeLinear and DequantizeLinear. Computed during import when their inputs are constants:
/// Shape, Size, Gather, Unsqueeze, Concat, Cast, Range, ConstantOfShape,
/// Equal, Where, Mod, Less, Greater, And, Or, Not, Neg, Abs, Sqrt, Floor,
/// Ceil, ScatterND and the arithmetic above (the shape, index and mask
/// computations exporters emit). Erf is supported inside the GELU pattern
/// x*0.5*(1+Erf(x/sqrt(2))), fused into one gelu layer; a lone Erf is not.
/// The LayerNormalization exporters decompose below opset 17 (ReduceMean,
/// Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) is fused back into one layer.
/// Initializers listed among the graph inputs (old exporters) stay constants.
///
/// Throws softneuro::Error naming the file, the ONNX node and the field at
/// fault. A model with unsupported nodes is refused with one error listing
/// every one of them (name, op type, opset). A malformed or truncated file is
/// an error, never a crash.
Model import_onnx(const std::string& path, const ImportOptions& options = {});

/// Reads a TensorFlow Lite model (.tflite, schema version 3: the FlatBuffer
/// verifier checks it first; buffers inside the FlatBuffer or after it, as
/// files over 2 GB keep them), translates its first subgraph into layers, runs
/// the graph passes the options enable, and returns the model. The net keeps
/// the file's interface: inputs and outputs by their tensor names, images
/// NHWC, at the shapes the file gives (`input_shapes` may only repeat them).
/// Inside, images compute NCHW: weights are turned into our layouts once here,
/// and a transpose is added only where an operator reads the other form.
///
/// Builtin operators: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED
/// (with keep_num_dims), ADD, SUB, MUL, DIV (fused activations: RELU,
/// RELU_N1_TO_1, RELU6, TANH), MAXIMUM, MINIMUM, POW, SQUARED_DIFFERENCE,
/// AVERAGE_POOL_2D, MAX_POOL_2D, MEAN, SUM, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD,
/// RESHAPE, SQUEEZE, EXPAND_DIMS, CONCATENATION, PACK, PAD, PADV2, MIRROR_PAD
/// (REFLECT), RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR (align_corners or
/// half_pixel_centers), SOFTMAX (beta), LOGISTIC, TANH, HARD_SWISH, GELU, PRELU,
/// LEAKY_RELU, RELU, RELU6, RELU_N1_TO_1, ABS, NEG, EXP, LOG, SQRT, RSQRT, SQUARE,
/// SPLIT, SPLIT_V, STRIDED_SLICE (no ellipsis or new axes), SLICE, TRANSPOSE,
/// DEPTH_TO_SPACE, SPACE_TO_DEPTH, BATCH_MATMUL, DEQUANTIZE (float16 and int8
/// weights), DENSIFY (sparse constants, densified here) and QUANTIZE; and
/// MediaPipe's custom Convolution2DTransposeBias. Shapes, axes, paddings and
/// sizes must be constants.
///
/// Quantised models (int8 or uint8 tensors with a scale and zero point, weights
/// per tensor or per channel): each quantised tensor is held as its real
/// values, rounded onto its grid by a fake_quant layer, and the untuned default
/// runs the quantised layers on our int8 routines with the file's scales, as for
/// ONNX QDQ models. int8/uint8 net inputs and outputs stay integers at the edge.
///
/// Throws softneuro::Error naming the file, the operator (by its first output
/// tensor) and the field at fault. A model with unsupported operators, builtin
/// or custom, is refused with one error listing every one of them.
Model import_tflite(const std::string& path, const ImportOptions& options = {});

}  // namespace softneuro
