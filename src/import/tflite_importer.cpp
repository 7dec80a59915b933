// The TensorFlow Lite importer: a .tflite file (FlatBuffers, checked by the
// verifier flatc generates from schemas/tflite.fbs) -> core::Graph -> graph
// passes -> Model.
//
// TFLite's activations are NHWC; our layers compute images NCHW. Every rank-4
// tensor is therefore held in one or both of two forms: as the file has it
// (`tf`) or with its last axis moved to position 1 (`nchw`). Convolutions,
// pools, resizes and per-channel ops read the nchw form, reshapes and
// transposes the tf one; elementwise ops take whichever their inputs hold.
// The form a reader needs is made once, on first use, by a transpose (or a
// reshape where only size-1 dims move). Constant weights are turned into our
// layouts here, once. The net keeps the file's interface: its inputs and
// outputs are the file's tensors, NHWC, with their names.
//
// A quantised tensor (int8/uint8 with scale and zero point) is held as its
// real values: the op computes in real numbers and a fake_quant layer rounds
// the result onto the tensor's grid, as the ONNX importer does for QDQ models;
// the untuned default then runs those layers on qint8 routines with the file's
// scales (core::layers_quantised_by_model). Quantised weights are dequantised
// here and stay marked as the file's int8 grid where symmetric.
//
// An unsupported operator does not stop the translation: it is recorded, its
// outputs marked unavailable, and one Error at the end names every one.
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/mapped_file.hpp"
#include "core/model_impl.hpp"
#include "core/narrow_types.hpp"
#include "core/tensor_math.hpp"
#include "core/weight_quant.hpp"
#include "import/graph_builder.hpp"
#include "import/pass_options.hpp"

#include <softneuro/import.hpp>

#include <flatbuffers/flatbuffers.h>
#include <tflite_generated.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>


namespace softneuro {
namespace tflite_import {
namespace {

namespace fb = softneuro::tflite_fb;

// TensorFlow Lite's BuiltinOperator names, by code (for errors and dispatch).
constexpr const char* kOpNames[] = {
    "ADD", "AVERAGE_POOL_2D", "CONCATENATION", "CONV_2D", "DEPTHWISE_CONV_2D", "DEPTH_TO_SPACE", "DEQUANTIZE",
    "EMBEDDING_LOOKUP", "FLOOR", "FULLY_CONNECTED", "HASHTABLE_LOOKUP", "L2_NORMALIZATION", "L2_POOL_2D",
    "LOCAL_RESPONSE_NORMALIZATION", "LOGISTIC", "LSH_PROJECTION", "LSTM", "MAX_POOL_2D", "MUL", "RELU",
    "RELU_N1_TO_1", "RELU6", "RESHAPE", "RESIZE_BILINEAR", "RNN", "SOFTMAX", "SPACE_TO_DEPTH", "SVDF", "TANH",
    "CONCAT_EMBEDDINGS", "SKIP_GRAM", "CALL", "CUSTOM", "EMBEDDING_LOOKUP_SPARSE", "PAD",
    "UNIDIRECTIONAL_SEQUENCE_RNN", "GATHER", "BATCH_TO_SPACE_ND", "SPACE_TO_BATCH_ND", "TRANSPOSE", "MEAN", "SUB",
    "DIV", "SQUEEZE", "UNIDIRECTIONAL_SEQUENCE_LSTM", "STRIDED_SLICE", "BIDIRECTIONAL_SEQUENCE_RNN", "EXP", "TOPK_V2",
    "SPLIT", "LOG_SOFTMAX", "DELEGATE", "BIDIRECTIONAL_SEQUENCE_LSTM", "CAST", "PRELU", "MAXIMUM", "ARG_MAX",
    "MINIMUM", "LESS", "NEG", "PADV2", "GREATER", "GREATER_EQUAL", "LESS_EQUAL", "SELECT", "SLICE", "SIN",
    "TRANSPOSE_CONV", "SPARSE_TO_DENSE", "TILE", "EXPAND_DIMS", "EQUAL", "NOT_EQUAL", "LOG", "SUM", "SQRT", "RSQRT",
    "SHAPE", "POW", "ARG_MIN", "FAKE_QUANT", "REDUCE_PROD", "REDUCE_MAX", "PACK", "LOGICAL_OR", "ONE_HOT",
    "LOGICAL_AND", "LOGICAL_NOT", "UNPACK", "REDUCE_MIN", "FLOOR_DIV", "REDUCE_ANY", "SQUARE", "ZEROS_LIKE", "FILL",
    "FLOOR_MOD", "RANGE", "RESIZE_NEAREST_NEIGHBOR", "LEAKY_RELU", "SQUARED_DIFFERENCE", "MIRROR_PAD", "ABS",
    "SPLIT_V", "UNIQUE", "CEIL", "REVERSE_V2", "ADD_N", "GATHER_ND", "COS", "WHERE", "RANK", "ELU",
    "REVERSE_SEQUENCE", "MATRIX_DIAG", "QUANTIZE", "MATRIX_SET_DIAG", "ROUND", "HARD_SWISH", "IF", "WHILE",
    "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5", "SCATTER_ND", "SELECT_V2", "DENSIFY", "SEGMENT_SUM",
    "BATCH_MATMUL", "PLACEHOLDER_FOR_GREATER_OP_CODES", "CUMSUM", "CALL_ONCE", "BROADCAST_TO", "RFFT2D", "CONV_3D",
    "IMAG", "REAL", "COMPLEX_ABS", "HASHTABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT", "HASHTABLE_SIZE", "REDUCE_ALL",
    "CONV_3D_TRANSPOSE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "BROADCAST_ARGS",
    "RANDOM_STANDARD_NORMAL", "BUCKETIZE", "RANDOM_UNIFORM", "MULTINOMIAL", "GELU", "DYNAMIC_UPDATE_SLICE",
    "RELU_0_TO_1", "UNSORTED_SEGMENT_PROD", "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_SUM", "ATAN2",
    "UNSORTED_SEGMENT_MIN", "SIGN", "BITCAST", "BITWISE_XOR", "RIGHT_SHIFT"};
constexpr int kNumOpNames = static_cast<int>(sizeof(kOpNames) / sizeof(kOpNames[0]));

std::string op_name(int code) {
  return code >= 0 && code < kNumOpNames ? kOpNames[code] : fmt::format("builtin operator {}", code);
}

enum Code : int {
  ADD = 0, AVERAGE_POOL_2D = 1, CONCATENATION = 2, CONV_2D = 3, DEPTHWISE_CONV_2D = 4, DEPTH_TO_SPACE = 5,
  DEQUANTIZE = 6, FULLY_CONNECTED = 9, LOGISTIC = 14, MAX_POOL_2D = 17, MUL = 18, RELU = 19, RELU_N1_TO_1 = 20,
  RELU6 = 21, RESHAPE = 22, RESIZE_BILINEAR = 23, SOFTMAX = 25, SPACE_TO_DEPTH = 26, TANH = 28, CUSTOM = 32,
  PAD = 34, TRANSPOSE = 39, MEAN = 40, SUB = 41, DIV = 42, SQUEEZE = 43, STRIDED_SLICE = 45, EXP = 47, SPLIT = 49,
  PRELU = 54, MAXIMUM = 55, MINIMUM = 57, NEG = 59, PADV2 = 60, SLICE = 65, TRANSPOSE_CONV = 67, EXPAND_DIMS = 70,
  LOG = 73, SUM = 74, SQRT = 75, RSQRT = 76, POW = 78, REDUCE_PROD = 81, REDUCE_MAX = 82, PACK = 83,
  UNPACK = 88, REDUCE_MIN = 89, SQUARE = 92, RESIZE_NEAREST_NEIGHBOR = 97, LEAKY_RELU = 98,
  SQUARED_DIFFERENCE = 99, MIRROR_PAD = 100, ABS = 101, SPLIT_V = 102, QUANTIZE = 114, HARD_SWISH = 117,
  DENSIFY = 124, BATCH_MATMUL = 126, GELU = 150,
};

// TensorType values.
enum TType : int8_t { F32 = 0, F16 = 1, I32 = 2, U8 = 3, I64 = 4, STR = 5, BOOL = 6, I16 = 7, I8 = 9, F64 = 10 };

std::string type_name(int t) {
  static const char* names[] = {"FLOAT32", "FLOAT16", "INT32", "UINT8", "INT64", "STRING", "BOOL", "INT16",
                                "COMPLEX64", "INT8", "FLOAT64", "COMPLEX128", "UINT64", "RESOURCE", "VARIANT",
                                "UINT32", "UINT16", "INT4", "BFLOAT16"};
  return t >= 0 && t < 19 ? names[t] : fmt::format("type {}", t);
}

struct Unsupported {
  std::string why;
};

// NHWC <-> NCHW.
const std::vector<int64_t> kToNchw = {0, 3, 1, 2};
const std::vector<int64_t> kToNhwc = {0, 2, 3, 1};
/// The nchw position of TFLite axis a of a rank-4 tensor.
int nchw_axis(int a) { return a == 0 ? 0 : a == 3 ? 1 : a + 1; }

Shape permuted(const Shape& s, const std::vector<int64_t>& perm) {
  std::vector<int64_t> d;
  for (int64_t p : perm) d.push_back(s[static_cast<int>(p)]);
  return Shape(d);
}

/// Whether moving the channel axis of this NHWC/NCHW shape keeps the element
/// order (one channel, or one position): then a reshape converts the forms.
bool order_free(const Shape& nhwc) { return nhwc[3] == 1 || nhwc[1] * nhwc[2] == 1; }

/// A tensor's quantisation as the file gives it.
struct QInfo {
  std::vector<float> scales;
  std::vector<int64_t> zero_points;
  int dim = 0;
  bool present() const { return !scales.empty(); }
};

/// A layer's 8-bit integer range (qmin, qmax): uint8's or int8's.
void set_integer_range(Layer& l, bool u8) {
  l.params["qmin"] = int64_t{u8 ? 0 : -128};
  l.params["qmax"] = int64_t{u8 ? 255 : 127};
}

/// What the importer holds of one TFLite tensor.
struct Held {
  std::string tf, nchw;  ///< run-time blobs in each form ("" where not made)
  bool available = true; ///< false: made by an unsupported operator
};

class Importer : private import::GraphBuilder {
 public:
  Importer(const core::MappedFile& file, const std::string& path, const ImportOptions& options)
      : file_(file), path_(path), options_(options) {}
  core::Graph run();

 private:
  const core::MappedFile& file_;
  std::string path_;
  const ImportOptions& options_;
  const fb::Model* model_ = nullptr;
  const fb::SubGraph* g_ = nullptr;
  std::vector<Held> held_;
  std::map<int, Blob> constants_;  ///< float32 values in the file's layout
  /// The fake_quant layers' outputs: their input and parameters.
  std::map<std::string, std::pair<std::string, std::map<std::string, Attr>>> fake_quant_of_;
  std::vector<std::string> unsupported_;
  // The operator being translated.
  const fb::Operator* op_ = nullptr;
  int code_ = 0;
  std::string layer_;  ///< base name of its layers

  // --- the file
  const fb::Tensor& tensor(int t) const;
  std::string tensor_name(int t) const;
  Shape tf_shape(int t) const;
  int ttype(int t) const { return tensor(t).type(); }
  QInfo qinfo(int t) const;
  /// An int8 or uint8 net input's or output's quantisation, its zero points within the type.
  QInfo edge_qinfo(int t) const;
  bool quantized_activation(int t) const;
  std::span<const uint8_t> buffer(int t) const;
  Blob read_constant(int t) const;
  std::vector<int64_t> ints(int t, const char* field) const;
  /// A sparse constant's stored values spread over its dense shape.
  /// Where each stored value of sparse tensor `t` lies in its dense form (flat
  /// indices), the whole encoding checked before anything of the dense size
  /// is allocated.
  std::vector<int64_t> sparse_positions(int t, const fb::SparsityParameters& sp, std::size_t stored) const;

  // --- operator inputs and outputs
  int tensor_index(int t) const;
  int in(int k) const;           ///< a tensor index (an input left out is an Error)
  int optional_in(int k) const;  ///< -1 where left out or past the inputs (k >= 3: optional)
  int out(int k) const;
  int num_in() const { return op_->inputs() ? static_cast<int>(op_->inputs()->size()) : 0; }
  int num_out() const { return op_->outputs() ? static_cast<int>(op_->outputs()->size()) : 0; }
  Error error(const std::string& message, const std::string& field) const {
    return Error(message, path_, layer_, field);
  }
  const Blob* constant(int t) const {
    auto c = constants_.find(t);
    return c == constants_.end() ? nullptr : &c->second;
  }
  const Blob& require_constant(int k, const char* field) const;
  template <class T> const T* options() const;

  // --- graph building (fresh names, shapes: GraphBuilder's)
  Layer make(const std::string& type, std::vector<std::string> inputs, std::vector<std::string> outputs);
  /// GraphBuilder::add, its errors naming the file and the operator.
  void add(Layer l);
  std::string unary_layer(const std::string& type, const std::string& x, std::map<std::string, Attr> params = {},
                          const char* suffix = nullptr);
  std::string constant_blob(const Blob& value, const std::string& base);
  /// The constant of a graph edge's quantisation, one value per channel
  /// (`per_channel(c)`), shaped to broadcast over tensor `t`'s shape along the
  /// quantised dim; a scalar where the tensor has one scale. Null where every
  /// value is `skip` (no layer needed).
  std::string edge_constant(int t, const QInfo& q, const std::function<float(std::size_t)>& per_channel, float skip,
                            const std::string& base);
  bool rank4(int t) const { return tf_shape(t).rank() == 4; }
  bool holds_nchw(int t) const { return !held_[static_cast<std::size_t>(t)].nchw.empty(); }
  std::string tf(int t);
  std::string nchw(int t);
  /// Blob x (of the NHWC shape `nhwc`) in the other form.
  std::string convert_form(const std::string& x, const Shape& nhwc, bool to_nchw, const std::string& name);
  /// `y`, made from `x` by a form change (reshape, transpose), behind the
  /// fake_quant `x` came from where `x` is quantised: an int8 layer then reads
  /// a Q/DQ step's output directly. (`made` changes the form of what it is given.)
  template <class Made>
  std::string after_form_change(const std::string& x, Made&& made);
  /// Tensor t broadcast to rank 4 in nchw form (a lower-rank operand beside an image).
  std::string nchw_broadcast(int t);
  /// Blob name for operator output t: the op writes there, finish() completes it.
  std::string target(int t);
  void finish(int t, const std::string& blob, bool is_nchw, int same_grid_as = -1);
  void activation(int t, std::string x, bool is_nchw, int fused);
  /// Output 0 as x (rank 4 held nchw where is_nchw) reshaped to the file's shape, in the file's order.
  void finish_reshaped(std::string x, bool is_nchw);

  // --- operators
  void convert();
  void conv2d();
  void transpose_conv();
  void transpose_conv_bias();
  void transposed_conv(int x, int filter, int bias, bool same, int64_t sh, int64_t sw, int fused);
  void fully_connected();
  void pool();
  void binary();
  void unary();
  void prelu();
  void reduce();
  void reshape();
  void concat();
  void pad();
  void resize();
  void softmax();
  void split();
  void slice();
  void transpose();
  void dequantize();
  void quantize();
  void depth_space();
  void batch_matmul();
  void pack();

  void read_inputs();
  void finish_outputs();
  void rename_blob(const std::string& from, const std::string& to);
  Blob weight_blob(int t, const std::vector<int64_t>& perm, bool per_channel_axis0);
};

// ---------------------------------------------------------------------------
// The file

const fb::Tensor& Importer::tensor(int t) const {
  const auto* ts = g_->tensors();
  if (!ts || t < 0 || t >= static_cast<int>(ts->size()) || !ts->Get(static_cast<unsigned>(t)))
    throw error(fmt::format("tensor index {} is outside the subgraph's {} tensors", t, ts ? ts->size() : 0), "inputs");
  return *ts->Get(static_cast<unsigned>(t));
}

std::string Importer::tensor_name(int t) const {
  const auto* n = tensor(t).name();
  return n && n->size() ? n->str() : fmt::format("tensor_{}", t);
}

Shape Importer::tf_shape(int t) const {
  const auto* s = tensor(t).shape();
  std::vector<int64_t> dims;
  if (s) {
    if (s->size() > static_cast<unsigned>(Shape::max_rank))
      throw error(fmt::format("tensor '{}' has rank {} (at most {})", tensor_name(t), s->size(), Shape::max_rank), "shape");
    for (int32_t d : *s) {
      if (d < 0)
        throw error(fmt::format("tensor '{}' has a dim of {} in its shape", tensor_name(t), d), "shape");
      dims.push_back(d);
    }
  }
  return Shape(dims);
}

QInfo Importer::qinfo(int t) const {
  QInfo q;
  const auto* qp = tensor(t).quantization();
  if (!qp || !qp->scale() || qp->scale()->size() == 0) return q;
  if (qp->details_type() != fb::QuantizationDetails::NONE)
    throw Unsupported{fmt::format("tensor '{}' has custom quantisation", tensor_name(t))};
  q.scales.assign(qp->scale()->begin(), qp->scale()->end());
  if (const auto* zp = qp->zero_point(); zp && zp->size()) {
    // FlatBuffers 2's verifier checks a vector's length alignment only: 8-byte
    // values at a 4-byte offset would be read misaligned.
    if (reinterpret_cast<std::uintptr_t>(zp->data()) % alignof(int64_t) != 0)
      throw error(fmt::format("tensor '{}': zero points at a misaligned offset (a damaged file)", tensor_name(t)), "quantization");
    q.zero_points.assign(zp->begin(), zp->end());
  }
  if (q.zero_points.empty()) q.zero_points.assign(q.scales.size(), 0);
  if (q.zero_points.size() != q.scales.size())
    throw error(fmt::format("tensor '{}' has {} scales and {} zero points", tensor_name(t), q.scales.size(),
                            q.zero_points.size()), "quantization");
  for (float s : q.scales)
    if (!(s > 0) || !std::isfinite(s))
      throw error(fmt::format("tensor '{}' has quantisation scale {}", tensor_name(t), s), "quantization");
  q.dim = qp->quantized_dimension();
  return q;
}

QInfo Importer::edge_qinfo(int t) const {
  QInfo q = qinfo(t);
  const bool is_signed = ttype(t) == I8;
  for (int64_t z : q.zero_points)
    if (z < (is_signed ? -128 : 0) || z > (is_signed ? 127 : 255))
      throw error(fmt::format("tensor '{}' ({}) has zero point {}, outside its type", tensor_name(t), is_signed ? "int8" : "uint8", z),
                  "quantization");
  return q;
}

bool Importer::quantized_activation(int t) const {
  const int ty = ttype(t);
  return (ty == I8 || ty == U8 || ty == I16) && qinfo(t).present();
}

std::span<const uint8_t> Importer::buffer(int t) const {
  const uint32_t b = tensor(t).buffer();
  const auto* bufs = model_->buffers();
  if (b == 0) return {};
  if (!bufs || b >= bufs->size() || !bufs->Get(b))
    throw error(fmt::format("tensor '{}' names buffer {} of {}", tensor_name(t), b, bufs ? bufs->size() : 0), "buffer");
  const fb::Buffer& buf = *bufs->Get(b);
  if (buf.offset() > 1) {  // data stored after the FlatBuffer (files over 2 GB)
    if (buf.offset() > file_.size || buf.size() > file_.size - buf.offset())
      throw error(fmt::format("tensor '{}': buffer {} lies at {}+{}, past the file's {} bytes", tensor_name(t), b,
                              buf.offset(), buf.size(), file_.size), "buffer");
    return {file_.data + buf.offset(), static_cast<std::size_t>(buf.size())};
  }
  if (!buf.data()) return {};
  return {buf.data()->data(), buf.data()->size()};
}

Blob Importer::read_constant(int t) const {
  const Shape s = tf_shape(t);
  const int ty = ttype(t);
  std::size_t elem = 0;
  switch (ty) {
    case F32: case I32: elem = 4; break;
    case F16: case I16: elem = 2; break;
    case I8: case U8: case BOOL: elem = 1; break;
    case I64: case F64: elem = 8; break;
    default: throw Unsupported{fmt::format("constant tensor '{}' of type {}", tensor_name(t), type_name(ty))};
  }
  const std::span<const uint8_t> bytes = buffer(t);
  const fb::SparsityParameters* sparse = tensor(t).sparsity();
  // A sparse constant stores its non-zero values only (DENSIFY makes it whole).
  const auto n = sparse ? bytes.size() / elem : static_cast<std::size_t>(s.numel());
  if (bytes.size() != n * elem)
    throw error(fmt::format("tensor '{}' {} {} needs {} bytes, its buffer holds {}", tensor_name(t), type_name(ty),
                            s.to_string(), n * elem, bytes.size()), "buffer");
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* p = bytes.data() + i * elem;
    switch (ty) {
      case F32: { float f; std::memcpy(&f, p, 4); v[i] = f; break; }
      case F64: { double f; std::memcpy(&f, p, 8); v[i] = f; break; }
      case F16: { uint16_t h; std::memcpy(&h, p, 2); v[i] = core::half_to_float(h); break; }
      case I32: { int32_t x; std::memcpy(&x, p, 4); v[i] = x; break; }
      case I64: { int64_t x; std::memcpy(&x, p, 8); v[i] = static_cast<double>(x); break; }
      case I16: { int16_t x; std::memcpy(&x, p, 2); v[i] = x; break; }
      case I8: v[i] = static_cast<int8_t>(*p); break;
      default: v[i] = *p; break;  // U8, BOOL
    }
  }
  // A sparse tensor's values go where its encoding puts them (checked first:
  // the dense form is allocated once, as float32, only for a valid encoding).
  const std::vector<int64_t> positions = sparse ? sparse_positions(t, *sparse, v.size()) : std::vector<int64_t>{};
  auto position = [&](std::size_t i) { return sparse ? positions[i] : static_cast<int64_t>(i); };
  const QInfo q = (ty == I8 || ty == U8 || ty == I16 || ty == I32 || ty == I64) ? qinfo(t) : QInfo{};
  Blob out = Blob::allocate(s);
  float* o = out.data_as<float>();
  if (!q.present()) {
    if (sparse) std::fill(o, o + s.numel(), 0.0f);
    for (std::size_t i = 0; i < v.size(); ++i) o[position(i)] = static_cast<float>(v[i]);
    return out;
  }
  // Dequantised along quantized_dimension (per channel) or per tensor.
  int64_t inner = 1, dim = 1;
  if (q.scales.size() > 1) {
    if (q.dim < 0 || q.dim >= s.rank() || s[q.dim] != static_cast<int64_t>(q.scales.size()))
      throw error(fmt::format("tensor '{}' {} has {} scales along dim {}", tensor_name(t), s.to_string(), q.scales.size(),
                              q.dim), "quantization");
    dim = s[q.dim];
    for (int d = q.dim + 1; d < s.rank(); ++d) inner *= s[d];
  }
  auto real = [&](double level, int64_t at) {
    const auto c = static_cast<std::size_t>(q.scales.size() > 1 ? at / inner % dim : 0);
    return static_cast<float>((level - static_cast<double>(q.zero_points[c])) * q.scales[c]);
  };
  if (sparse)  // the dense form's zeros are level 0
    for (int64_t at = 0; at < s.numel(); ++at) o[at] = real(0, at);
  for (std::size_t i = 0; i < v.size(); ++i) o[position(i)] = real(v[i], position(i));
  return out;
}

std::vector<int64_t> Importer::sparse_positions(int t, const fb::SparsityParameters& sp, std::size_t stored) const {
  const Shape s = tf_shape(t);
  const int n = s.rank();
  auto fail = [&](const std::string& why) { return error(fmt::format("sparse tensor '{}': {}", tensor_name(t), why), "sparsity"); };
  if (!sp.traversal_order() || !sp.dim_metadata()) throw fail("no traversal_order or dim_metadata");
  // The dense form (float32, allocated once the encoding is checked) is
  // bounded, as a file's few stored values cannot vouch for a shape of any size. Pruned
  // models keep 1 value in 2 to 1 in 100; 1 in 1,024 is allowed (and any
  // tensor up to 2^20 values). A 5 KB fuzzed file claimed 100 M values.
  constexpr int64_t kMaxDense = int64_t{1} << 28, kSmall = int64_t{1} << 20, kPerStored = 1024;
  if (s.numel() > kMaxDense) throw fail(fmt::format("a dense shape {} of more than 2^28 values", s.to_string()));
  if (s.numel() > kSmall && s.numel() / kPerStored > static_cast<int64_t>(stored))
    throw fail(fmt::format("a dense shape {} of {} values for {} stored: more than {} per stored value", s.to_string(),
                           s.numel(), stored, kPerStored));
  const int levels = static_cast<int>(sp.traversal_order()->size());
  const int k = sp.block_map() ? static_cast<int>(sp.block_map()->size()) : 0;
  if (levels != n + k || static_cast<int>(sp.dim_metadata()->size()) != levels)
    throw fail(fmt::format("{} traversal dims and {} metadata for rank {} with {} block dims", levels,
                           sp.dim_metadata()->size(), n, k));
  // Each traversal level's dim (0..n-1: the tensor's, n..n+k-1: block dims) and its size.
  std::vector<int> order(static_cast<std::size_t>(levels));
  std::vector<int64_t> block_size(static_cast<std::size_t>(k), 1), block_dim(static_cast<std::size_t>(k), 0);
  std::vector<bool> seen(static_cast<std::size_t>(levels), false);
  for (int l = 0; l < levels; ++l) {
    const int d = sp.traversal_order()->Get(static_cast<unsigned>(l));
    if (d < 0 || d >= levels || seen[static_cast<std::size_t>(d)]) throw fail("traversal_order is not a permutation");
    seen[static_cast<std::size_t>(d)] = true;
    order[static_cast<std::size_t>(l)] = d;
  }
  for (int j = 0; j < k; ++j) {
    const int d = sp.block_map()->Get(static_cast<unsigned>(j));
    if (d < 0 || d >= n) throw fail(fmt::format("block_map names dim {}", d));
    block_dim[static_cast<std::size_t>(j)] = d;
  }
  for (int l = 0; l < levels; ++l) {
    const int d = order[static_cast<std::size_t>(l)];
    if (d >= n) {
      const auto* m = sp.dim_metadata()->Get(static_cast<unsigned>(l));
      if (!m || m->format() != 0 || m->dense_size() < 1) throw fail("a block dim that is not dense");
      block_size[static_cast<std::size_t>(d - n)] = m->dense_size();
    }
  }
  std::vector<int64_t> blocked(static_cast<std::size_t>(n));  // the tensor's dims over its blocks
  for (int d = 0; d < n; ++d) blocked[static_cast<std::size_t>(d)] = s[d];
  for (int j = 0; j < k; ++j) {
    const auto d = static_cast<std::size_t>(block_dim[static_cast<std::size_t>(j)]);
    if (blocked[d] % block_size[static_cast<std::size_t>(j)] != 0) throw fail("a block size that does not divide its dim");
    blocked[d] /= block_size[static_cast<std::size_t>(j)];
  }
  auto index_vector = [&](fb::SparseIndexVector type, const void* v) -> std::vector<int64_t> {
    std::vector<int64_t> out;
    if (!v) throw fail("a compressed dim without segments or indices");
    if (type == fb::SparseIndexVector::Int32Vector && static_cast<const fb::Int32Vector*>(v)->values())
      for (int32_t x : *static_cast<const fb::Int32Vector*>(v)->values()) out.push_back(x);
    else if (type == fb::SparseIndexVector::Uint16Vector && static_cast<const fb::Uint16Vector*>(v)->values())
      for (uint16_t x : *static_cast<const fb::Uint16Vector*>(v)->values()) out.push_back(x);
    else if (type == fb::SparseIndexVector::Uint8Vector && static_cast<const fb::Uint8Vector*>(v)->values())
      for (uint8_t x : *static_cast<const fb::Uint8Vector*>(v)->values()) out.push_back(x);
    else throw fail("a compressed dim without segments or indices");
    return out;
  };
  struct Level { bool dense; int64_t size; std::vector<int64_t> segments, indices; };
  std::vector<Level> lv(static_cast<std::size_t>(levels));
  for (int l = 0; l < levels; ++l) {
    const auto* m = sp.dim_metadata()->Get(static_cast<unsigned>(l));
    if (!m) throw fail("missing dim_metadata");
    const int d = order[static_cast<std::size_t>(l)];
    Level& L = lv[static_cast<std::size_t>(l)];
    L.size = d < n ? blocked[static_cast<std::size_t>(d)] : block_size[static_cast<std::size_t>(d - n)];
    L.dense = m->format() == 0;
    if (!L.dense) {
      L.segments = index_vector(m->array_segments_type(), m->array_segments());
      L.indices = index_vector(m->array_indices_type(), m->array_indices());
    }
  }
  std::vector<int64_t> positions;
  positions.reserve(stored);
  std::vector<int64_t> at(static_cast<std::size_t>(levels), 0), idx(static_cast<std::size_t>(n), 0);
  // Depth-first over the levels, as the values are stored.
  auto visit = [&](auto&& self, int l, int64_t prev) -> void {
    if (l == levels) {
      std::fill(idx.begin(), idx.end(), 0);
      for (int q = 0; q < levels; ++q)
        if (order[static_cast<std::size_t>(q)] < n) idx[static_cast<std::size_t>(order[static_cast<std::size_t>(q)])] = at[static_cast<std::size_t>(q)];
      // Block dims refine their dim: index = block index * block size + offset in the block.
      for (int j = 0; j < k; ++j) {
        int q = 0;
        while (order[static_cast<std::size_t>(q)] != n + j) ++q;
        auto& i = idx[static_cast<std::size_t>(block_dim[static_cast<std::size_t>(j)])];
        i = i * block_size[static_cast<std::size_t>(j)] + at[static_cast<std::size_t>(q)];
      }
      int64_t flat = 0;
      for (int d = 0; d < n; ++d) {
        if (idx[static_cast<std::size_t>(d)] >= s[d]) throw fail("an index outside the tensor");
        flat = flat * s[d] + idx[static_cast<std::size_t>(d)];
      }
      if (positions.size() >= stored) throw fail(fmt::format("more positions than the {} values stored", stored));
      positions.push_back(flat);
      return;
    }
    const Level& L = lv[static_cast<std::size_t>(l)];
    if (L.dense) {
      for (int64_t i = 0; i < L.size; ++i) {
        at[static_cast<std::size_t>(l)] = i;
        self(self, l + 1, prev * L.size + i);
      }
      return;
    }
    if (prev < 0 || prev + 1 >= static_cast<int64_t>(L.segments.size())) throw fail("segments too short");
    const int64_t b = L.segments[static_cast<std::size_t>(prev)], e = L.segments[static_cast<std::size_t>(prev + 1)];
    if (b < 0 || b > e || e > static_cast<int64_t>(L.indices.size())) throw fail("segments outside the indices");
    for (int64_t i = b; i < e; ++i) {
      at[static_cast<std::size_t>(l)] = L.indices[static_cast<std::size_t>(i)];
      if (at[static_cast<std::size_t>(l)] < 0 || at[static_cast<std::size_t>(l)] >= L.size) throw fail("an index outside its dim");
      self(self, l + 1, i);
    }
  };
  visit(visit, 0, 0);
  if (positions.size() != stored) throw fail(fmt::format("{} values stored, {} positions", stored, positions.size()));
  return positions;
}

std::vector<int64_t> Importer::ints(int t, const char* field) const {
  const Blob* c = constant(t);
  if (!c) throw Unsupported{fmt::format("input '{}' ({}) computed at run time: it must be a constant", tensor_name(t), field)};
  std::vector<int64_t> out;
  for (double v : core::to_doubles(*c)) {
    // A float tensor (or garbage) read as integers: NaN or 1e30 has no int64.
    if (!(std::abs(v) <= 9.0e15) || v != std::trunc(v))
      throw error(fmt::format("input '{}' ({}) holds {}, not an integer", tensor_name(t), field, v), field);
    out.push_back(static_cast<int64_t>(v));
  }
  return out;
}

int Importer::tensor_index(int t) const {
  tensor(t);  // an index outside the subgraph is an Error
  return t;
}

int Importer::in(int k) const {
  const int t = optional_in(k);
  if (t < 0) throw error(fmt::format("{}'s input {} is left out (-1); it is needed", op_name(code_), k), "inputs");
  return t;
}

int Importer::optional_in(int k) const {
  if (k >= num_in()) {
    if (k < 3) throw error(fmt::format("{} has {} inputs, input {} is needed", op_name(code_), num_in(), k), "inputs");
    return -1;
  }
  const int t = op_->inputs()->Get(static_cast<unsigned>(k));
  return t < 0 ? -1 : tensor_index(t);
}

int Importer::out(int k) const {
  if (k >= num_out()) throw error(fmt::format("{} has {} outputs, output {} is needed", op_name(code_), num_out(), k), "outputs");
  return tensor_index(op_->outputs()->Get(static_cast<unsigned>(k)));
}

const Blob& Importer::require_constant(int k, const char* field) const {
  const Blob* c = constant(in(k));
  if (!c) throw Unsupported{fmt::format("{} with its {} computed at run time (a constant is needed)", op_name(code_), field)};
  return *c;
}

template <class T>
const T* Importer::options() const {
  const T* o = op_->builtin_options_as<T>();
  if (!o)
    throw error(fmt::format("{} has no {} (builtin_options type {})", op_name(code_), T::GetFullyQualifiedName(),
                            static_cast<int>(op_->builtin_options_type())), "builtin_options");
  return o;
}

// ---------------------------------------------------------------------------
// Graph building

Layer Importer::make(const std::string& type, std::vector<std::string> inputs, std::vector<std::string> outputs) {
  Layer l;
  l.type = type;
  l.name = fresh_layer(layer_);
  l.inputs = std::move(inputs);
  l.outputs = std::move(outputs);
  return l;
}

void Importer::add(Layer l) {
  try {
    GraphBuilder::add(std::move(l));
  } catch (const Error& e) {
    throw Error(e.message(), path_, layer_, e.field());
  }
}

std::string Importer::unary_layer(const std::string& type, const std::string& x, std::map<std::string, Attr> params,
                                  const char* suffix) {
  const std::string y = fresh_blob(fmt::format("{}/{}", x, suffix ? suffix : type.c_str()));
  Layer l = make(type, {x}, {y});
  l.params = std::move(params);
  add(std::move(l));
  return y;
}

std::string Importer::constant_blob(const Blob& value, const std::string& base) {
  const std::string y = fresh_blob(base);
  Layer l;
  l.type = "constant";
  l.name = fresh_layer(y);
  l.outputs = {y};
  l.weights["value"] = value;
  add(std::move(l));
  return y;
}

std::string Importer::tf(int t) {
  Held& h = held_[static_cast<std::size_t>(t)];
  if (!h.tf.empty()) return h.tf;
  if (const Blob* c = constant(t)) return h.tf = constant_blob(*c, tensor_name(t));
  if (h.nchw.empty()) throw error(fmt::format("tensor '{}' is read before any operator computes it", tensor_name(t)), "inputs");
  const std::string y = convert_form(h.nchw, tf_shape(t), false, tensor_name(t) + "/nhwc");
  held_[static_cast<std::size_t>(t)].tf = y;
  return y;
}

template <class Made>
std::string Importer::after_form_change(const std::string& x, Made&& made) {
  const auto q = fake_quant_of_.find(x);
  if (q == fake_quant_of_.end()) return made(x);
  const std::map<std::string, Attr> params = q->second.second;
  const std::string y = made(q->second.first);
  const std::string fq = fresh_blob(y + "/quantized");
  Layer l = make("fake_quant", {y}, {fq});
  l.params = params;
  add(std::move(l));
  fake_quant_of_[fq] = {y, params};
  return fq;
}

std::string Importer::convert_form(const std::string& x, const Shape& nhwc, bool to_nchw, const std::string& name) {
  const std::string saved = layer_;
  layer_ = name;
  const char* suffix = to_nchw ? "nchw" : "nhwc";
  const std::string y = after_form_change(x, [&](const std::string& src) {
    return order_free(nhwc)
               ? unary_layer("reshape", src, {{"shape", (to_nchw ? permuted(nhwc, kToNchw) : nhwc).to_vector()}}, suffix)
               : unary_layer("transpose", src, {{"perm", to_nchw ? kToNchw : kToNhwc}}, suffix);
  });
  layer_ = saved;
  return y;
}

std::string Importer::nchw(int t) {
  Held& h = held_[static_cast<std::size_t>(t)];
  if (!h.nchw.empty()) return h.nchw;
  const Shape s = tf_shape(t);
  if (s.rank() != 4) throw error(fmt::format("tensor '{}' {} is read as an image (rank 4 needed)", tensor_name(t), s.to_string()), "inputs");
  if (const Blob* c = constant(t)) return h.nchw = constant_blob(core::transposed(*c, kToNchw), tensor_name(t) + "/nchw");
  const std::string y = convert_form(tf(t), s, true, tensor_name(t) + "/nchw");
  held_[static_cast<std::size_t>(t)].nchw = y;
  return y;
}

std::string Importer::nchw_broadcast(int t) {
  const Shape s = tf_shape(t);
  if (s.rank() == 4) return nchw(t);
  if (s.rank() > 4) throw Unsupported{fmt::format("{} of a rank-{} tensor with an image", op_name(code_), s.rank())};
  std::vector<int64_t> d(static_cast<std::size_t>(4 - s.rank()), 1);
  for (int64_t v : s) d.push_back(v);
  const Shape s4(d), n4 = permuted(s4, kToNchw);
  if (const Blob* c = constant(t)) {
    if (c->shape().numel() == 1) return tf(t);  // a scalar broadcasts in either form
    return constant_blob(core::transposed(core::reshaped(*c, s4), kToNchw), tensor_name(t) + "/nchw");
  }
  const std::string x = unary_layer("reshape", tf(t), {{"shape", s4.to_vector()}}, "rank4");
  return order_free(s4) ? unary_layer("reshape", x, {{"shape", n4.to_vector()}}, "nchw")
                        : unary_layer("transpose", x, {{"perm", kToNchw}}, "nchw");
}

std::string Importer::target(int t) {
  const std::string name = tensor_name(t);
  return fresh_blob(quantized_activation(t) ? name + "/real" : name);
}

void Importer::finish(int t, const std::string& blob, bool is_nchw, int same_grid_as) {
  std::string y = blob;
  const Shape want = is_nchw ? permuted(tf_shape(t), kToNchw) : tf_shape(t);
  const Shape& got = shapes_.at(y);
  if (got != want && !(tensor(t).shape() == nullptr || tensor(t).shape()->size() == 0))
    throw error(fmt::format("the file gives tensor '{}' the shape {}, {} computes {}{}", tensor_name(t),
                            tf_shape(t).to_string(), op_name(code_), is_nchw ? permuted(got, kToNhwc).to_string() : got.to_string(),
                            is_nchw ? " (NHWC)" : ""), "shape");
  // An op that only moves or pads values (with real zeros) onto a tensor of
  // its input's quantisation leaves them on that grid: no rounding step (a
  // zero pad then folds into the convolution that reads it).
  const bool on_grid = same_grid_as >= 0 && quantized_activation(same_grid_as) && quantized_activation(t) &&
                       ttype(t) == ttype(same_grid_as) && qinfo(t).scales == qinfo(same_grid_as).scales &&
                       qinfo(t).zero_points == qinfo(same_grid_as).zero_points;
  if (quantized_activation(t) && !on_grid) {
    const QInfo q = qinfo(t);
    if (q.scales.size() != 1) throw Unsupported{fmt::format("activation '{}' quantised per channel", tensor_name(t))};
    if (!core::quant_scale_in_range(q.scales[0]))
      throw error(fmt::format("activation '{}' has quantisation scale {}", tensor_name(t), q.scales[0]), "quantization");
    if (ttype(t) == I16) throw Unsupported{fmt::format("int16 activation '{}' (8-bit quantisation only)", tensor_name(t))};
    const bool u8 = ttype(t) == U8;
    const std::string q_name = fresh_blob(tensor_name(t));
    Layer l = make("fake_quant", {y}, {q_name});
    l.params["scale"] = static_cast<double>(q.scales[0]);
    l.params["zero_point"] = q.zero_points[0];
    set_integer_range(l, u8);
    fake_quant_of_[q_name] = {y, l.params};
    add(std::move(l));
    y = q_name;
  }
  Held& h = held_[static_cast<std::size_t>(t)];
  (is_nchw ? h.nchw : h.tf) = y;
}

void Importer::finish_reshaped(std::string x, bool is_nchw) {
  if (is_nchw && !order_free(permuted(shapes_.at(x), kToNhwc))) x = unary_layer("transpose", x, {{"perm", kToNhwc}}, "nhwc");
  Layer l = make("reshape", {x}, {target(out(0))});
  l.params["shape"] = tf_shape(out(0)).to_vector();
  const std::string y = l.outputs[0];
  add(std::move(l));
  finish(out(0), y, false);
}

void Importer::activation(int t, std::string x, bool is_nchw, int fused) {
  switch (fused) {
    case 0: break;
    case 1: x = unary_layer("relu", x); break;
    case 2: x = unary_layer("clip", x, {{"min", -1.0}, {"max", 1.0}}); break;
    case 3: x = unary_layer("clip", x, {{"min", 0.0}, {"max", 6.0}}, "relu6"); break;
    case 4: x = unary_layer("tanh", x); break;
    default: throw Unsupported{fmt::format("{} with fused activation {} (NONE, RELU, RELU_N1_TO_1, RELU6, TANH)",
                                           op_name(code_), fused)};
  }
  finish(t, x, is_nchw);
}

// ---------------------------------------------------------------------------
// Operators

/// TFLite's SAME padding of one spatial dim: {before, after}.
std::pair<int64_t, int64_t> same_pads(int64_t in, int64_t k, int64_t s, int64_t d) {
  const int64_t out = (in + s - 1) / s;
  const int64_t total = std::max<int64_t>((out - 1) * s + (k - 1) * d + 1 - in, 0);
  return {total / 2, total - total / 2};
}

std::vector<int64_t> window_pads(int padding, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                                 int64_t dh, int64_t dw) {
  // Strides, dilations and kernel sizes of 1 to core::kMaxWindowParam (the
  // file's values, an int32 each: 0 divided, negatives wrapped).
  const std::pair<const char*, int64_t> checked[] = {{"stride_h", sh}, {"stride_w", sw}, {"dilation_h_factor", dh},
                                                     {"dilation_w_factor", dw}, {"filter_height", kh}, {"filter_width", kw}};
  for (const auto& [field, v] : checked)
    if (v < 1 || v > core::kMaxWindowParam)
      throw Error(fmt::format("{} is {} (1 to {})", field, v, core::kMaxWindowParam), {}, {}, field);
  if (padding != 0) return {0, 0, 0, 0};  // VALID
  auto [t, b] = same_pads(h, kh, sh, dh);
  auto [l, r] = same_pads(w, kw, sw, dw);
  return {t, l, b, r};
}

Blob Importer::weight_blob(int t, const std::vector<int64_t>& perm, bool per_channel_axis0) {
  const Blob* c = constant(t);
  if (!c) throw Unsupported{fmt::format("{} with run-time weights '{}'", op_name(code_), tensor_name(t))};
  Blob w = perm.empty() ? *c : core::transposed(*c, perm);
  // Symmetric int8 weights keep the file's grid (per output channel or per
  // tensor): the qint8 routines compute with the file's integers and scales.
  if (per_channel_axis0 && ttype(t) == I8) {
    const QInfo q = qinfo(t);
    const int64_t channels = w.shape()[0];
    const bool along_out = q.scales.size() == 1 ||
                           (static_cast<int64_t>(q.scales.size()) == channels && !perm.empty() && perm[0] == q.dim) ||
                           (static_cast<int64_t>(q.scales.size()) == channels && perm.empty() && q.dim == 0);
    const bool symmetric = std::all_of(q.zero_points.begin(), q.zero_points.end(), [](int64_t z) { return z == 0; });
    const bool usable = std::all_of(q.scales.begin(), q.scales.end(), [](float s) { return core::quant_scale_in_range(s); });
    if (q.present() && along_out && symmetric && usable) {
      std::vector<float> scales = q.scales;
      if (scales.size() == 1) scales.assign(static_cast<std::size_t>(channels), q.scales[0]);
      w.quant().scales = std::move(scales);
      w.quant().axis = 0;
    }
  }
  return w;
}

void Importer::conv2d() {
  // CONV_2D (filter OHWI, groups where the filter has fewer input channels)
  // and DEPTHWISE_CONV_2D (filter [1,KH,KW,C*M]: groups of one input channel).
  const bool dw = code_ == DEPTHWISE_CONV_2D;
  int8_t padding = 0, fused = 0;
  int64_t sh = 1, sw = 1, dh = 1, dwf = 1;
  if (dw) {
    const auto* o = options<fb::DepthwiseConv2DOptions>();
    padding = o->padding(), fused = o->fused_activation_function();
    sh = o->stride_h(), sw = o->stride_w(), dh = o->dilation_h_factor(), dwf = o->dilation_w_factor();
  } else {
    const auto* o = options<fb::Conv2DOptions>();
    padding = o->padding(), fused = o->fused_activation_function();
    sh = o->stride_h(), sw = o->stride_w(), dh = o->dilation_h_factor(), dwf = o->dilation_w_factor();
  }
  const int x = in(0);
  const Shape xs = tf_shape(x);
  if (xs.rank() != 4) throw error(fmt::format("input {} is not NHWC", xs.to_string()), "inputs");
  Blob w = weight_blob(in(1), dw ? std::vector<int64_t>{3, 0, 1, 2} : std::vector<int64_t>{0, 3, 1, 2}, true);
  const Shape& ws = w.shape();
  const bool fits = ws.rank() == 4 && ws[1] >= 1 && xs[3] >= 1 &&
                    (dw ? ws[1] == 1 && ws[0] % xs[3] == 0 : xs[3] % ws[1] == 0);
  if (!fits) throw error(fmt::format("filter {} for input channels {}", tf_shape(in(1)).to_string(), xs[3]), "filter");
  Layer l = make("conv2", {nchw(x)}, {target(out(0))});
  l.params["strides"] = std::vector<int64_t>{sh, sw};
  l.params["dilations"] = std::vector<int64_t>{dh, dwf};
  l.params["pads"] = window_pads(padding, xs[1], xs[2], ws[2], ws[3], sh, sw, dh, dwf);
  l.params["group"] = dw ? xs[3] : xs[3] / ws[1];
  l.weights["weight"] = std::move(w);
  if (num_in() > 2 && optional_in(2) >= 0) l.weights["bias"] = weight_blob(in(2), {}, false);
  const std::string y = l.outputs[0];
  add(std::move(l));
  activation(out(0), y, true, fused);
}

void Importer::transpose_conv() {
  const auto* o = options<fb::TransposeConvOptions>();
  transposed_conv(in(2), in(1), optional_in(3), o->padding() == 0, o->stride_h(), o->stride_w(),
                  o->fused_activation_function());
}

void Importer::transpose_conv_bias() {
  // MediaPipe's Convolution2DTransposeBias: inputs x, filter [O,KH,KW,I], bias;
  // custom_options a TfLiteTransposeConvParams: int32 padding (1 SAME, 2 VALID), stride_w, stride_h.
  const auto* c = op_->custom_options();
  if (!c || c->size() < 12) throw error(fmt::format("custom options of {} bytes (12 needed)", c ? c->size() : 0), "custom_options");
  int32_t p[3];
  std::memcpy(p, c->data(), sizeof p);
  if (p[0] != 1 && p[0] != 2) throw error(fmt::format("padding {} (1 SAME, 2 VALID)", p[0]), "custom_options");
  transposed_conv(in(0), in(1), num_in() > 2 ? optional_in(2) : -1, p[0] == 1, p[2], p[1], 0);
}

void Importer::transposed_conv(int x, int filter, int bias, bool same, int64_t sh, int64_t sw, int fused) {
  const Shape xs = tf_shape(x), ys = tf_shape(out(0));
  if (xs.rank() != 4 || ys.rank() != 4) throw error(fmt::format("input {} is not NHWC", xs.to_string()), "inputs");
  Blob w = weight_blob(filter, {3, 0, 1, 2}, false);  // [O,KH,KW,I] -> [I,O,KH,KW]
  const Shape& ws = w.shape();
  if (ws.rank() != 4 || ws[0] != xs[3] || ws[1] != ys[3])
    throw error(fmt::format("filter {} for input channels {}, output channels {}", tf_shape(filter).to_string(), xs[3], ys[3]), "filter");
  if (sh < 1 || sw < 1 || sh > core::kMaxWindowParam || sw > core::kMaxWindowParam)
    throw error(fmt::format("strides {}x{} (1 to {})", sh, sw, core::kMaxWindowParam), "stride_h");
  // TFLite pads as the forward convolution from the output to the input would;
  // what the full transposed convolution makes past the output is cut off
  // (pads) or, where it is short, made up by output_padding.
  std::vector<int64_t> pads(4), extra(2);
  for (int a = 0; a < 2; ++a) {
    const int64_t s = a ? sw : sh, k = ws[2 + a], i = xs[1 + a], want = ys[1 + a];
    const int64_t before = same ? same_pads(want, k, s, 1).first : 0;
    const int64_t full = (i - 1) * s + k;
    int64_t after = full - before - want;
    if (after < 0) {
      extra[static_cast<std::size_t>(a)] = -after;
      after = 0;
    }
    pads[static_cast<std::size_t>(a)] = before;
    pads[static_cast<std::size_t>(a + 2)] = after;
  }
  Layer l = make("deconv2", {nchw(x)}, {target(out(0))});
  l.params["strides"] = std::vector<int64_t>{sh, sw};
  l.params["pads"] = pads;
  if (extra[0] || extra[1]) l.params["output_padding"] = extra;
  l.weights["weight"] = std::move(w);
  if (bias >= 0) l.weights["bias"] = weight_blob(bias, {}, false);
  const std::string y = l.outputs[0];
  add(std::move(l));
  activation(out(0), y, true, fused);
}

void Importer::fully_connected() {
  const auto* o = options<fb::FullyConnectedOptions>();
  if (o->weights_format() != 0) throw Unsupported{"FULLY_CONNECTED with shuffled weights"};
  const int x = in(0);
  const Shape xs = tf_shape(x);
  Blob w = weight_blob(in(1), {}, true);
  if (w.shape().rank() != 2 || w.shape()[1] < 1 || xs.rank() < 1 || xs.numel() % w.shape()[1] != 0)  // [4,0]: no modulo by 0
    throw error(fmt::format("weights {} for input {}", w.shape().to_string(), xs.to_string()), "weights");
  const int64_t k = w.shape()[1];
  std::string xb = tf(x);
  if (!o->keep_num_dims() && !(xs.rank() == 2 && xs[1] == k))
    xb = after_form_change(xb, [&](const std::string& src) {
      return unary_layer("reshape", src, {{"shape", std::vector<int64_t>{xs.numel() / k, k}}}, "rows");
    });
  Layer l = make("dense", {xb}, {target(out(0))});
  l.weights["weight"] = std::move(w);
  if (num_in() > 2 && optional_in(2) >= 0) l.weights["bias"] = weight_blob(in(2), {}, false);
  const std::string y = l.outputs[0];
  add(std::move(l));
  activation(out(0), y, false, o->fused_activation_function());
}

void Importer::pool() {
  const auto* o = options<fb::Pool2DOptions>();
  const int x = in(0);
  const Shape xs = tf_shape(x);
  if (xs.rank() != 4) throw error(fmt::format("input {} is not NHWC", xs.to_string()), "inputs");
  Layer l = make("pool2", {nchw(x)}, {target(out(0))});
  const int64_t kh = o->filter_height(), kw = o->filter_width(), sh = o->stride_h(), sw = o->stride_w();
  l.params["mode"] = std::string(code_ == MAX_POOL_2D ? "max" : "avg");
  l.params["kernel"] = std::vector<int64_t>{kh, kw};
  l.params["strides"] = std::vector<int64_t>{sh, sw};
  l.params["pads"] = window_pads(o->padding(), xs[1], xs[2], kh, kw, sh, sw, 1, 1);
  const std::string y = l.outputs[0];
  add(std::move(l));
  activation(out(0), y, true, o->fused_activation_function());
}

void Importer::binary() {
  static const std::map<int, std::string> types = {{ADD, "add"}, {SUB, "sub"}, {MUL, "mul"}, {DIV, "div"},
                                                   {MAXIMUM, "max"}, {MINIMUM, "min"}, {POW, "pow"},
                                                   {SQUARED_DIFFERENCE, "sub"}};
  const int a = in(0), b = in(1);
  const bool image = std::max(tf_shape(a).rank(), tf_shape(b).rank()) == 4 &&
                     ((rank4(a) && !constant(a)) || (rank4(b) && !constant(b)));
  const std::string xa = image ? nchw_broadcast(a) : tf(a), xb = image ? nchw_broadcast(b) : tf(b);
  int fused = 0;
  if (code_ == ADD) fused = options<fb::AddOptions>()->fused_activation_function();
  if (code_ == SUB) fused = options<fb::SubOptions>()->fused_activation_function();
  if (code_ == MUL) fused = options<fb::MulOptions>()->fused_activation_function();
  if (code_ == DIV) fused = options<fb::DivOptions>()->fused_activation_function();
  std::string y = code_ == SQUARED_DIFFERENCE ? fresh_blob(tensor_name(out(0)) + "/difference") : target(out(0));
  Layer l = make(types.at(code_), {xa, xb}, {y});
  // An int8 ADD rounds as the interpreter's XNNPACK path does (core::TfliteAdd:
  // fixed-point multipliers of s_a/s_out and s_b/s_out), which routines
  // computing the sum in float do not: they refuse it (core::requantizes_as_tflite).
  // Outside XNNPACK's scale ratios the interpreter runs its own kernel, which is
  // not reproduced: the sum is then rounded from float.
  if (code_ == ADD && quantized_activation(out(0)) && quantized_activation(a) && quantized_activation(b) &&
      ttype(a) == ttype(out(0)) && ttype(b) == ttype(out(0)) && ttype(a) != I16) {
    const QInfo qa = qinfo(a), qb = qinfo(b), qy = qinfo(out(0));
    if (qa.scales.size() == 1 && qb.scales.size() == 1 && qy.scales.size() == 1 &&
        core::tflite_add_in_range(qa.scales[0], qb.scales[0], qy.scales[0])) {
      const bool u8 = ttype(a) == U8;
      l.params["requantize"] = std::string("tflite");
      l.params["input_scales"] = std::vector<double>{qa.scales[0], qb.scales[0]};
      l.params["output_scale"] = static_cast<double>(qy.scales[0]);
      l.params["output_zero_point"] = qy.zero_points[0];
      set_integer_range(l, u8);
    }
  }
  add(std::move(l));
  if (code_ == SQUARED_DIFFERENCE) {
    const std::string sq = target(out(0));
    add(make("mul", {y, y}, {sq}));
    y = sq;
  }
  activation(out(0), y, image, fused);
}

void Importer::unary() {
  const int x = in(0);
  const bool image = holds_nchw(x);
  const std::string xb = image ? nchw(x) : tf(x);
  const std::string y = target(out(0));
  Layer l;
  switch (code_) {
    case RELU: l = make("relu", {xb}, {y}); break;
    case RELU6: l = make("clip", {xb}, {y}); l.params = {{"min", 0.0}, {"max", 6.0}}; break;
    case RELU_N1_TO_1: l = make("clip", {xb}, {y}); l.params = {{"min", -1.0}, {"max", 1.0}}; break;
    case LOGISTIC: l = make("sigmoid", {xb}, {y}); break;
    case TANH: l = make("tanh", {xb}, {y}); break;
    case HARD_SWISH: l = make("hardswish", {xb}, {y}); break;
    case ABS: l = make("abs", {xb}, {y}); break;
    case NEG: l = make("neg", {xb}, {y}); break;
    case EXP: l = make("exp", {xb}, {y}); break;
    case LOG: l = make("log", {xb}, {y}); break;
    case SQRT: l = make("sqrt", {xb}, {y}); break;
    case SQUARE: l = make("mul", {xb, xb}, {y}); break;
    case RSQRT: l = make("reciprocal", {unary_layer("sqrt", xb)}, {y}); break;
    case LEAKY_RELU:
      l = make("leaky_relu", {xb}, {y});
      l.params["alpha"] = static_cast<double>(options<fb::LeakyReluOptions>()->alpha());
      break;
    case GELU:
      l = make("gelu", {xb}, {y});
      if (const auto* g = op_->builtin_options_as<fb::GeluOptions>(); g && g->approximate()) l.params["approximate"] = std::string("tanh");
      break;
    default: throw Unsupported{"no translation"};
  }
  add(std::move(l));
  finish(out(0), y, image);
}

void Importer::prelu() {
  const int x = in(0);
  const Blob& alpha = require_constant(1, "alpha");
  const bool image = rank4(x);
  Blob slope = alpha;
  if (image) {
    const Shape as = alpha.shape();
    if (as.rank() > 4) throw error(fmt::format("alpha {} for input {}", as.to_string(), tf_shape(x).to_string()), "alpha");
    std::vector<int64_t> d(static_cast<std::size_t>(4 - as.rank()), 1);
    for (int64_t v : as) d.push_back(v);
    slope = core::transposed(core::reshaped(alpha, Shape(d)), kToNchw);
  }
  Layer l = make("prelu", {image ? nchw(x) : tf(x)}, {target(out(0))});
  l.weights["slope"] = std::move(slope);
  // The interpreter's int8 PRELU is integer arithmetic (core::TflitePrelu): the
  // layer computes that, and the fake_quant after it changes nothing.
  const QInfo qa = qinfo(in(1));
  if (quantized_activation(x) && quantized_activation(out(0)) && ttype(x) == ttype(out(0)) && ttype(x) != I16 &&
      qa.scales.size() == 1 && qinfo(x).scales.size() == 1 && qinfo(out(0)).scales.size() == 1) {
    const QInfo qx = qinfo(x), qy = qinfo(out(0));
    const bool u8 = ttype(x) == U8;
    l.params["requantize"] = std::string("tflite");
    l.params["input_scale"] = static_cast<double>(qx.scales[0]);
    l.params["alpha_scale"] = static_cast<double>(qa.scales[0]);
    l.params["output_scale"] = static_cast<double>(qy.scales[0]);
    l.params["output_zero_point"] = qy.zero_points[0];
    set_integer_range(l, u8);
  }
  const std::string y = l.outputs[0];
  add(std::move(l));
  finish(out(0), y, image);
}

void Importer::reduce() {
  static const std::map<int, std::string> modes = {{MEAN, "mean"}, {SUM, "sum"}, {REDUCE_MAX, "max"},
                                                   {REDUCE_MIN, "min"}, {REDUCE_PROD, "prod"}};
  const int x = in(0);
  const Shape xs = tf_shape(x);
  const bool keep = options<fb::ReducerOptions>()->keep_dims();
  std::vector<int64_t> axes;
  for (int64_t a : ints(in(1), "axis")) {
    if (a < -xs.rank() || a >= xs.rank()) throw error(fmt::format("axis {} of a rank-{} input", a, xs.rank()), "axis");
    axes.push_back(a < 0 ? a + xs.rank() : a);
  }
  const bool image = xs.rank() == 4;
  if (image)
    for (auto& a : axes) a = nchw_axis(static_cast<int>(a));
  const std::string y = keep ? target(out(0)) : fresh_blob(tensor_name(out(0)) + "/kept");
  Layer l = make("reduce", {image ? nchw(x) : tf(x)}, {y});
  l.params["mode"] = modes.at(code_);
  l.params["axes"] = axes;
  l.params["keepdims"] = int64_t{1};
  add(std::move(l));
  if (keep) return finish(out(0), y, image);
  finish_reshaped(y, image);  // without keep_dims: the kept dims in the file's order
}

void Importer::reshape() {
  // RESHAPE, SQUEEZE, EXPAND_DIMS: the file gives the result's shape.
  const int x = in(0);
  const Shape ys = tf_shape(out(0));
  if (ys.numel() != tf_shape(x).numel())
    throw error(fmt::format("{} of {} into {}", op_name(code_), tf_shape(x).to_string(), ys.to_string()), "shape");
  if (const Blob* c = constant(x)) {
    if (!quantized_activation(out(0))) {
      constants_[out(0)] = core::reshaped(*c, ys);
      return;
    }
  }
  finish_reshaped(tf(x), false);
}

void Importer::concat() {
  const auto* o = options<fb::ConcatenationOptions>();
  const int r = tf_shape(out(0)).rank();
  int axis = o->axis();
  if (axis < -r || axis >= r) throw error(fmt::format("axis {} of rank {}", axis, r), "axis");
  if (axis < 0) axis += r;
  const bool image = r == 4;
  std::vector<std::string> xs;
  for (int k = 0; k < num_in(); ++k) xs.push_back(image ? nchw(in(k)) : tf(in(k)));
  Layer l = make("concat", xs, {target(out(0))});
  l.params["axis"] = int64_t{image ? nchw_axis(axis) : axis};
  const std::string y = l.outputs[0];
  add(std::move(l));
  activation(out(0), y, image, o->fused_activation_function());
}

void Importer::pad() {
  const int x = in(0);
  const int r = tf_shape(x).rank();
  const std::vector<int64_t> p = ints(in(1), "paddings");
  if (static_cast<int>(p.size()) != 2 * r) throw error(fmt::format("{} paddings for rank {}", p.size(), r), "paddings");
  const bool image = r == 4;
  std::vector<int64_t> pads(static_cast<std::size_t>(2 * r));
  for (int a = 0; a < r; ++a) {
    const int d = image ? nchw_axis(a) : a;
    if (p[static_cast<std::size_t>(2 * a)] < 0 || p[static_cast<std::size_t>(2 * a + 1)] < 0)
      throw Unsupported{"PAD with negative paddings"};
    pads[static_cast<std::size_t>(d)] = p[static_cast<std::size_t>(2 * a)];
    pads[static_cast<std::size_t>(d + r)] = p[static_cast<std::size_t>(2 * a + 1)];
  }
  Layer l = make("pad", {image ? nchw(x) : tf(x)}, {target(out(0))});
  l.params["pads"] = pads;
  if (code_ == MIRROR_PAD) {
    if (options<fb::MirrorPadOptions>()->mode() != 0) throw Unsupported{"MIRROR_PAD in SYMMETRIC mode (REFLECT only)"};
    l.params["mode"] = std::string("reflect");
  } else if (code_ == PADV2 && num_in() > 2 && optional_in(2) >= 0) {
    l.params["value"] = core::to_doubles(require_constant(2, "constant_values")).at(0);
  } else if (quantized_activation(x)) {
    // Quantised PAD fills with the zero point, whose real value is 0.
  }
  const std::string y = l.outputs[0];
  const bool zero_fill = code_ == PAD || (code_ == PADV2 && l.get_float("value", 0.0) == 0.0);
  // A zero pad of H and W only needs no rounding step after it: it folds into
  // the convolution that reads it. One of the channels (a residual's pad to
  // more channels) cannot fold: its fake_quant (exact) lets the pad and the add
  // reading it run on int8 routines (core::layers_quantised_by_model).
  const bool spatial = image && pads[0] == 0 && pads[1] == 0 && pads[static_cast<std::size_t>(r)] == 0 &&
                       pads[static_cast<std::size_t>(r + 1)] == 0;
  add(std::move(l));
  finish(out(0), y, image, zero_fill && spatial ? x : -1);
}

void Importer::resize() {
  const int x = in(0);
  const Shape xs = tf_shape(x);
  const std::vector<int64_t> size = ints(in(1), "size");
  if (xs.rank() != 4 || size.size() != 2 || size[0] < 1 || size[1] < 1)
    throw error(fmt::format("size [{}] for input {}", fmt::join(size, ","), xs.to_string()), "size");
  bool align = false, half = false;
  if (code_ == RESIZE_BILINEAR) {
    const auto* o = options<fb::ResizeBilinearOptions>();
    align = o->align_corners();
    half = o->half_pixel_centers();
  } else {
    const auto* o = options<fb::ResizeNearestNeighborOptions>();
    align = o->align_corners();
    half = o->half_pixel_centers();
  }
  if (align && half) throw Unsupported{fmt::format("{} with both align_corners and half_pixel_centers", op_name(code_))};
  Layer l = make("resize", {nchw(x)}, {target(out(0))});
  l.params["sizes"] = std::vector<int64_t>{xs[0], xs[3], size[0], size[1]};
  if (code_ == RESIZE_BILINEAR) {
    l.params["mode"] = std::string("linear");
    l.params["coordinate_transformation_mode"] = std::string(align ? "align_corners" : half ? "half_pixel" : "asymmetric");
    // An int8 bilinear resize on one grid blends integers with 11-bit weights
    // in the interpreter (XNNPACK's, core::tflite_bilinear), not rounded reals.
    const int o = out(0);
    if (quantized_activation(x) && quantized_activation(o) && ttype(x) == ttype(o) && ttype(x) != I16 &&
        qinfo(x).scales.size() == 1 && qinfo(x).scales == qinfo(o).scales && qinfo(x).zero_points == qinfo(o).zero_points) {
      l.params["requantize"] = std::string("tflite");
      l.params["scale"] = static_cast<double>(qinfo(x).scales[0]);
    }
  } else {
    // TFLite: floor((y + 0.5*half) * scale), or round half up with align_corners.
    l.params["mode"] = std::string("nearest");
    l.params["coordinate_transformation_mode"] = std::string(align ? "align_corners" : half ? "tf_half_pixel_for_nn" : "asymmetric");
    l.params["nearest_mode"] = std::string(align ? "round_prefer_ceil" : "floor");
  }
  const std::string y = l.outputs[0];
  add(std::move(l));
  finish(out(0), y, true);
}

void Importer::softmax() {
  const int x = in(0);
  const float beta = options<fb::SoftmaxOptions>()->beta();
  const bool image = holds_nchw(x) && rank4(x);
  std::string xb = image ? nchw(x) : tf(x);
  if (beta != 1.0f) {
    const std::string scaled = fresh_blob(xb + "/beta");
    add(make("mul", {xb, constant_blob(core::float_blob({}, {beta}), tensor_name(x) + "/beta")}, {scaled}));
    xb = scaled;
  }
  Layer l = make("softmax", {xb}, {target(out(0))});
  l.params["axis"] = int64_t{image ? 1 : -1};
  const std::string y = l.outputs[0];
  add(std::move(l));
  finish(out(0), y, image);
}

void Importer::split() {
  const bool v = code_ == SPLIT_V;
  const int x = v ? in(0) : in(1);
  const Shape xs = tf_shape(x);
  const std::vector<int64_t> ax = ints(v ? in(2) : in(0), "axis");
  if (ax.size() != 1 || ax[0] < -xs.rank() || ax[0] >= xs.rank()) throw error("axis out of range", "axis");
  const int axis = static_cast<int>(ax[0] < 0 ? ax[0] + xs.rank() : ax[0]);
  std::vector<int64_t> sizes;
  for (int k = 0; k < num_out(); ++k) sizes.push_back(tf_shape(out(k))[axis]);
  const bool image = xs.rank() == 4;
  std::vector<std::string> ys;
  for (int k = 0; k < num_out(); ++k) ys.push_back(target(out(k)));
  Layer l = make("split", {image ? nchw(x) : tf(x)}, ys);
  l.params["axis"] = int64_t{image ? nchw_axis(axis) : axis};
  l.params["split"] = sizes;
  add(std::move(l));
  for (int k = 0; k < num_out(); ++k) finish(out(k), ys[static_cast<std::size_t>(k)], image);
}

void Importer::slice() {
  // STRIDED_SLICE and SLICE: per axis a start, a count and a step.
  const int x = in(0);
  const Shape xs = tf_shape(x);
  const int r = xs.rank();
  std::vector<int64_t> begin = ints(in(1), "begin"), end, strides(static_cast<std::size_t>(r), 1);
  int begin_mask = 0, end_mask = 0, shrink = 0;
  // Checked before any value is read (an empty begin was read past its end).
  if (begin.size() != static_cast<std::size_t>(r)) throw error(fmt::format("begin has {} values for rank {}", begin.size(), r), "begin");
  if (code_ == SLICE) {
    const std::vector<int64_t> size = ints(in(2), "size");
    if (size.size() != static_cast<std::size_t>(r)) throw error("size has the wrong length", "size");
    for (int a = 0; a < r; ++a) end.push_back(size[static_cast<std::size_t>(a)] < 0 ? xs[a] : begin[static_cast<std::size_t>(a)] + size[static_cast<std::size_t>(a)]);
  } else {
    const auto* o = options<fb::StridedSliceOptions>();
    if (o->ellipsis_mask() || o->new_axis_mask()) throw Unsupported{"STRIDED_SLICE with ellipsis_mask or new_axis_mask"};
    end = ints(in(2), "end");
    strides = ints(in(3), "strides");
    begin_mask = o->begin_mask();
    end_mask = o->end_mask();
    shrink = o->shrink_axis_mask();
    if (o->offset())
      for (std::size_t a = 0; a < end.size() && a < begin.size(); ++a) end[a] += begin[a];
  }
  if (begin.size() != static_cast<std::size_t>(r) || end.size() != static_cast<std::size_t>(r) || strides.size() != static_cast<std::size_t>(r))
    throw error(fmt::format("begin, end and strides must have {} values", r), "begin");
  struct Axis { int64_t start, count, step; };
  std::vector<Axis> axes;
  bool whole = true, unit = true;
  for (int a = 0; a < r; ++a) {
    const auto i = static_cast<std::size_t>(a);
    const int64_t dim = xs[a], step = strides[i];
    if (step == 0) throw error("a stride of 0", "strides");
    auto clampi = [&](int64_t v, bool is_end) {
      if (v < 0) v += dim;
      return step > 0 ? std::clamp<int64_t>(v, 0, dim) : std::clamp<int64_t>(v, -1, dim - 1) + (is_end ? 0 : 0);
    };
    int64_t s = (begin_mask >> a) & 1 ? (step > 0 ? 0 : dim - 1) : clampi(begin[i], false);
    int64_t e = (end_mask >> a) & 1 ? (step > 0 ? dim : -1) : clampi(end[i], true);
    if ((shrink >> a) & 1) {
      s = begin[i] < 0 ? begin[i] + dim : begin[i];
      if (s < 0 || s >= dim) throw error(fmt::format("shrunk axis {} index {} outside {}", a, begin[i], dim), "begin");
      e = s + 1;
    }
    int64_t count = step > 0 ? (e > s ? (e - s + step - 1) / step : 0) : (s > e ? (s - e + (-step) - 1) / (-step) : 0);
    if ((shrink >> a) & 1) count = 1;
    axes.push_back({s, count, (shrink >> a) & 1 ? 1 : step});
    whole = whole && s == 0 && count == dim && axes.back().step == 1;
    unit = unit && axes.back().step == 1;
  }
  const bool image = r == 4 && holds_nchw(x);
  std::string cur = image ? nchw(x) : tf(x);
  if (!whole) {
    if (unit) {
      for (int a = 0; a < r; ++a) {
        const Axis& ax = axes[static_cast<std::size_t>(a)];
        const int d = image ? nchw_axis(a) : a;
        const int64_t dim = xs[a];
        if (ax.start == 0 && ax.count == dim) continue;
        std::vector<int64_t> sizes;
        std::vector<std::string> outs;
        if (ax.start > 0) sizes.push_back(ax.start), outs.push_back(fresh_blob(cur + "/before"));
        sizes.push_back(ax.count);
        outs.push_back(fresh_blob(cur + "/slice"));
        const std::string kept = outs.back();
        if (ax.start + ax.count < dim) sizes.push_back(dim - ax.start - ax.count), outs.push_back(fresh_blob(cur + "/after"));
        Layer l = make("split", {cur}, outs);
        l.params["axis"] = int64_t{d};
        l.params["split"] = sizes;
        add(std::move(l));
        cur = kept;
      }
    } else {
      // Other steps: the positions taken, in the layout held.
      Shape held_shape = shapes_.at(cur);
      std::vector<int64_t> out_dims, strides_held(static_cast<std::size_t>(r));
      int64_t stride = 1;
      for (int d = r - 1; d >= 0; --d) strides_held[static_cast<std::size_t>(d)] = stride, stride *= held_shape[d];
      std::vector<Axis> held_axes(static_cast<std::size_t>(r));
      for (int a = 0; a < r; ++a) held_axes[static_cast<std::size_t>(image ? nchw_axis(a) : a)] = axes[static_cast<std::size_t>(a)];
      constexpr int64_t kMaxTaken = int64_t{1} << 24;
      int64_t total = 1;
      for (const Axis& ax : held_axes) {
        out_dims.push_back(ax.count);
        if (ax.count > 0 && total > kMaxTaken / ax.count)
          throw Unsupported{fmt::format("STRIDED_SLICE with steps taking more than {} elements", kMaxTaken)};
        total *= ax.count;
      }
      std::vector<int64_t> pos(static_cast<std::size_t>(total));
      for (int64_t i = 0; i < total; ++i) {
        int64_t rem = i, p = 0;
        for (int d = r - 1; d >= 0; --d) {
          const Axis& ax = held_axes[static_cast<std::size_t>(d)];
          const int64_t k = rem % ax.count;
          rem /= ax.count;
          p += (ax.start + k * ax.step) * strides_held[static_cast<std::size_t>(d)];
        }
        pos[static_cast<std::size_t>(i)] = p;
      }
      const std::string y = fresh_blob(cur + "/strided");
      Layer l = make("take", {cur}, {y});
      l.weights["indices"] = core::int_blob(Shape(out_dims), pos);
      add(std::move(l));
      cur = y;
    }
  }
  const Shape ys = tf_shape(out(0));
  const bool same_rank = ys.rank() == r;
  if (same_rank) {
    const std::string y = target(out(0));
    add(make("identity", {cur}, {y}));
    return finish(out(0), y, image);
  }
  finish_reshaped(cur, image);  // shrunk axes: the file's order, then its shape
}

void Importer::transpose() {
  const int x = in(0);
  std::vector<int64_t> perm = ints(in(1), "perm");
  const int r = tf_shape(x).rank();
  if (static_cast<int>(perm.size()) != r) throw error(fmt::format("perm of {} values for rank {}", perm.size(), r), "perm");
  std::string xb;
  if (r == 4 && holds_nchw(x) && held_[static_cast<std::size_t>(x)].tf.empty()) {
    xb = nchw(x);  // compose: the file's axis p is held at nchw_axis(p)
    for (auto& p : perm) p = nchw_axis(static_cast<int>(p));
  } else {
    xb = tf(x);
  }
  Layer l = make("transpose", {xb}, {target(out(0))});
  l.params["perm"] = perm;
  const std::string y = l.outputs[0];
  add(std::move(l));
  finish(out(0), y, false);
}

void Importer::dequantize() {
  const int x = in(0);
  if (const Blob* c = constant(x)) {  // float16 or int8 weights
    constants_[out(0)] = *c;
    return;
  }
  // A run-time quantised tensor is held as its real values already.
  const bool image = holds_nchw(x);
  const std::string y = target(out(0));
  add(make("identity", {image ? nchw(x) : tf(x)}, {y}));
  finish(out(0), y, image);
}

void Importer::quantize() {
  const int x = in(0);
  if (!quantized_activation(out(0))) throw Unsupported{fmt::format("QUANTIZE to {}", type_name(ttype(out(0))))};
  const bool image = holds_nchw(x);
  const std::string xb = image ? nchw(x) : tf(x);
  const QInfo qx = qinfo(x), qy = qinfo(out(0));
  if (!quantized_activation(x) || ttype(x) == I16 || ttype(out(0)) == I16 || qx.scales.size() != 1 || qy.scales.size() != 1) {
    const std::string y = target(out(0));
    add(make("identity", {xb}, {y}));
    finish(out(0), y, image);  // the fake_quant onto the output's grid
    return;
  }
  // Between integer types the interpreter requantises with a fixed-point
  // multiplier (FakeQuant::requantize), not by rounding the real value.
  const bool u8 = ttype(out(0)) == U8;
  const std::string y = fresh_blob(tensor_name(out(0)));
  Layer l = make("fake_quant", {xb}, {y});
  l.params["scale"] = static_cast<double>(qy.scales[0]);
  l.params["zero_point"] = qy.zero_points[0];
  set_integer_range(l, u8);
  l.params["requantize"] = std::string("tflite");
  l.params["input_scale"] = static_cast<double>(qx.scales[0]);
  if (!core::fixed_point_in_range(static_cast<double>(qx.scales[0]) / static_cast<double>(qy.scales[0])))
    throw error(fmt::format("QUANTIZE from scale {} to {}: the multiplier is beyond 2^31", qx.scales[0], qy.scales[0]),
                "quantization");
  fake_quant_of_[y] = {xb, l.params};
  add(std::move(l));
  (image ? held_[static_cast<std::size_t>(out(0))].nchw : held_[static_cast<std::size_t>(out(0))].tf) = y;
}

void Importer::depth_space() {
  // In the file's layout: DEPTH_TO_SPACE [N,H,W,b*b*C] -> [N,H,W,b,b,C] -> [N,H,b,W,b,C] -> [N,H*b,W*b,C];
  // SPACE_TO_DEPTH the reverse.
  const int x = in(0);
  const Shape xs = tf_shape(x);
  const int64_t b = code_ == DEPTH_TO_SPACE ? options<fb::DepthToSpaceOptions>()->block_size()
                                            : options<fb::SpaceToDepthOptions>()->block_size();
  if (xs.rank() != 4 || b < 1) throw error(fmt::format("block size {} for {}", b, xs.to_string()), "block_size");
  const std::vector<int64_t> blocks = code_ == DEPTH_TO_SPACE
                                         ? std::vector<int64_t>{xs[0], xs[1], xs[2], b, b, xs[3] / (b * b)}
                                         : std::vector<int64_t>{xs[0], xs[1] / b, b, xs[2] / b, b, xs[3]};
  std::string cur = unary_layer("reshape", tf(x), {{"shape", blocks}}, "blocks");
  cur = unary_layer("transpose", cur, {{"perm", std::vector<int64_t>{0, 1, 3, 2, 4, 5}}}, "interleave");
  finish_reshaped(cur, false);
}

void Importer::batch_matmul() {
  const auto* o = options<fb::BatchMatMulOptions>();
  auto operand = [&](int k, bool adj) {
    std::string b = tf(in(k));
    const int r = tf_shape(in(k)).rank();
    if (adj && r < 2)  // the swap of the last two dims wrote outside a shorter permutation
      throw error(fmt::format("adj_{} on an operand of rank {} (it needs 2 or more)", k == 0 ? 'x' : 'y', r), k == 0 ? "adj_x" : "adj_y");
    if (adj) {
      std::vector<int64_t> perm(static_cast<std::size_t>(r));
      for (int i = 0; i < r; ++i) perm[static_cast<std::size_t>(i)] = i;
      std::swap(perm[static_cast<std::size_t>(r - 1)], perm[static_cast<std::size_t>(r - 2)]);
      b = unary_layer("transpose", b, {{"perm", perm}}, "adjoint");
    }
    return b;
  };
  const std::string a = operand(0, o->adj_x()), b = operand(1, o->adj_y());
  const std::string y = target(out(0));
  add(make("matmul", {a, b}, {y}));
  finish(out(0), y, false);
}

void Importer::pack() {
  const auto* o = options<fb::PackOptions>();
  const Shape ys = tf_shape(out(0));
  int axis = o->axis();
  if (axis < 0) axis += ys.rank();
  if (axis < 0 || axis >= ys.rank()) throw error(fmt::format("axis {} of rank {}", o->axis(), ys.rank()), "axis");
  std::vector<std::string> parts;
  for (int k = 0; k < num_in(); ++k) {
    std::vector<int64_t> d = tf_shape(in(k)).to_vector();
    if (static_cast<int>(d.size()) + 1 != ys.rank())  // the axis was checked against the output's rank only
      throw error(fmt::format("input {} has rank {}, the packed output {}", k, d.size(), ys.rank()), "values");
    d.insert(d.begin() + axis, 1);
    parts.push_back(unary_layer("reshape", tf(in(k)), {{"shape", d}}, "packed"));
  }
  Layer l = make("concat", parts, {target(out(0))});
  l.params["axis"] = int64_t{axis};
  const std::string y = l.outputs[0];
  add(std::move(l));
  finish(out(0), y, false);
}

void Importer::convert() {
  switch (code_) {
    case CONV_2D: case DEPTHWISE_CONV_2D: return conv2d();
    case TRANSPOSE_CONV: return transpose_conv();
    case FULLY_CONNECTED: return fully_connected();
    case AVERAGE_POOL_2D: case MAX_POOL_2D: return pool();
    case ADD: case SUB: case MUL: case DIV: case MAXIMUM: case MINIMUM: case POW: case SQUARED_DIFFERENCE: return binary();
    case RELU: case RELU6: case RELU_N1_TO_1: case LOGISTIC: case TANH: case HARD_SWISH: case ABS: case NEG: case EXP:
    case LOG: case SQRT: case RSQRT: case SQUARE: case LEAKY_RELU: case GELU: return unary();
    case PRELU: return prelu();
    case MEAN: case SUM: case REDUCE_MAX: case REDUCE_MIN: case REDUCE_PROD: return reduce();
    case RESHAPE: case SQUEEZE: case EXPAND_DIMS: return reshape();
    case CONCATENATION: return concat();
    case PAD: case PADV2: case MIRROR_PAD: return pad();
    case RESIZE_BILINEAR: case RESIZE_NEAREST_NEIGHBOR: return resize();
    case SOFTMAX: return softmax();
    case SPLIT: case SPLIT_V: return split();
    case STRIDED_SLICE: case SLICE: return slice();
    case TRANSPOSE: return transpose();
    case DEQUANTIZE: case DENSIFY: return dequantize();
    case QUANTIZE: return quantize();
    case DEPTH_TO_SPACE: case SPACE_TO_DEPTH: return depth_space();
    case BATCH_MATMUL: return batch_matmul();
    case PACK: return pack();
    default: throw Unsupported{"no translation"};
  }
}

// ---------------------------------------------------------------------------
// The net

void Importer::read_inputs() {
  std::set<int> inputs;
  if (g_->inputs())
    for (int t : *g_->inputs()) inputs.insert(t);
  const int n = g_->tensors() ? static_cast<int>(g_->tensors()->size()) : 0;
  held_.assign(static_cast<std::size_t>(n), Held{});
  // Constants: tensors with data that no operator writes.
  std::set<int> written;
  if (g_->operators())
    for (const auto* op : *g_->operators())
      if (op && op->outputs())
        for (int t : *op->outputs()) written.insert(t);
  for (int t = 0; t < n; ++t) {
    if (inputs.count(t) || written.count(t) || tensor(t).is_variable()) continue;
    if (buffer(t).empty() && tf_shape(t).numel() != 0) continue;
    try {
      constants_[t] = read_constant(t);
    } catch (const Unsupported& u) {
      unsupported_.push_back(u.why);
    }
  }
  for (int t : inputs) {
    tensor_index(t);
    const std::string name = tensor_name(t);
    layer_ = name;
    TensorInfo info;
    info.name = fresh_blob(name);
    info.shape = tf_shape(t);
    const int ty = ttype(t);
    Held& h = held_[static_cast<std::size_t>(t)];
    h.tf = info.name;
    shapes_[info.name] = info.shape;
    if (ty == F32) {
      info.dtype = DType::float32;
    } else if ((ty == I8 || ty == U8) && qinfo(t).present()) {
      // The file's integers at the edge; inside, their real values.
      const QInfo q = edge_qinfo(t);
      info.dtype = ty == I8 ? DType::int8 : DType::uint8;
      graph_.inputs.push_back(info);
      // Per channel where the file quantises it so (before, the first
      // channel's scale and zero point stood for every channel).
      std::string centred = info.name;
      const std::string zero = edge_constant(t, q, [&](std::size_t c) { return static_cast<float>(-q.zero_points[c]); }, 0.0f,
                                             name + "/zero_point");
      if (!zero.empty()) centred = fresh_blob(name + "/centred"), add(make("add", {info.name, zero}, {centred}));
      const std::string real = fresh_blob(name + "/real");
      add(make("mul", {centred, edge_constant(t, q, [&](std::size_t c) { return q.scales[c]; }, NAN, name + "/scale")}, {real}));
      h.tf = real;
      if (q.scales.size() == 1) {
        // On the input's own grid again (exact: each value is an integer
        // times the scale), so that the int8 layers reading it run on int8
        // routines (core::layers_quantised_by_model), as the interpreter does.
        const std::string on_grid = fresh_blob(name + "/quantized");
        Layer l = make("fake_quant", {real}, {on_grid});
        l.params["scale"] = static_cast<double>(q.scales[0]);
        l.params["zero_point"] = q.zero_points[0];
        set_integer_range(l, ty == U8);
        fake_quant_of_[on_grid] = {real, l.params};
        add(std::move(l));
        h.tf = on_grid;
      }
      continue;
    } else if (ty == I32 || ty == I64 || ty == BOOL || ty == U8 || ty == I8) {
      info.dtype = ty == I32 ? DType::int32 : ty == I64 ? DType::int64 : ty == BOOL ? DType::boolean : ty == U8 ? DType::uint8 : DType::int8;
    } else {
      throw Error(fmt::format("input '{}' has type {} (float32, int8/uint8 quantised, integer and bool inputs)", name, type_name(ty)),
                  path_, {}, "inputs");
    }
    graph_.inputs.push_back(info);
  }
}

std::string Importer::edge_constant(int t, const QInfo& q, const std::function<float(std::size_t)>& per_channel, float skip,
                                    const std::string& base) {
  std::vector<float> values(q.scales.size());
  for (std::size_t c = 0; c < values.size(); ++c) values[c] = per_channel(c);
  if (std::all_of(values.begin(), values.end(), [&](float v) { return v == skip; })) return {};
  if (values.size() == 1) return constant_blob(core::float_blob({}, values), base);
  const Shape s = tf_shape(t);
  if (q.dim < 0 || q.dim >= s.rank() || s[q.dim] != static_cast<int64_t>(values.size()))
    throw error(fmt::format("tensor '{}' {} has {} scales along dim {}", tensor_name(t), s.to_string(), values.size(), q.dim),
                "quantization");
  std::vector<int64_t> dims(static_cast<std::size_t>(s.rank()), 1);
  dims[static_cast<std::size_t>(q.dim)] = s[q.dim];
  return constant_blob(core::float_blob(Shape(dims), values), base);
}

void Importer::rename_blob(const std::string& from, const std::string& to) {
  for (auto& l : graph_.layers) {
    for (auto& i : l.inputs)
      if (i == from) i = to;
    for (auto& o : l.outputs)
      if (o == from) o = to;
  }
  if (auto it = shapes_.find(from); it != shapes_.end()) {
    shapes_[to] = it->second;
    shapes_.erase(from);
  }
  for (auto& h : held_) {
    if (h.nchw == from) h.nchw = to;
    if (h.tf == from) h.tf = to;
  }
  for (auto& [out, q] : fake_quant_of_)
    if (q.first == from) q.first = to;
  if (auto it = fake_quant_of_.find(from); it != fake_quant_of_.end()) {
    fake_quant_of_[to] = it->second;
    fake_quant_of_.erase(it);
  }
}

void Importer::finish_outputs() {
  if (!g_->outputs() || g_->outputs()->size() == 0) throw Error("the subgraph has no outputs", path_, {}, "outputs");
  std::set<std::string> names;
  for (int t : *g_->outputs()) {
    tensor_index(t);
    // Outputs are named by their tensors; a name an earlier output holds (two
    // tensors of one name, or one tensor listed twice) takes a suffix, so no
    // output is dropped or answered by another's values.
    std::string name = tensor_name(t);
    if (names.count(name)) {
      std::string unique = name;
      for (int k = 1; names.count(unique) || taken_blobs_.count(unique); ++k) unique = fmt::format("{}_{}", name, k);
      core::warn("{}: another output is named '{}' too: this one is output '{}'", path_, name, unique);
      name = unique;
    }
    layer_ = name;
    const Held& held = held_.at(static_cast<std::size_t>(t));
    if (!held.available) continue;
    // Held only as nchw: the file's form made from the value itself, not from
    // behind its fake_quant (after_form_change) as for a reader that computes:
    // its producer then writes only to a Q/DQ step, so stays on int8 routines.
    std::string y;
    if (held.tf.empty() && !held.nchw.empty() && !constant(t)) {
      const Shape s = tf_shape(t);
      y = order_free(s) ? unary_layer("reshape", held.nchw, {{"shape", s.to_vector()}}, "nhwc")
                        : unary_layer("transpose", held.nchw, {{"perm", kToNhwc}}, "nhwc");
    } else {
      y = tf(t);
    }
    const int ty = ttype(t);
    if ((ty == I8 || ty == U8) && qinfo(t).present()) {
      // Back to the file's integers: y / scale + zero point, rounded.
      const QInfo q = edge_qinfo(t);
      std::string v = fresh_blob(name + "/levels");
      add(make("mul", {y, edge_constant(t, q, [&](std::size_t c) { return 1.0f / q.scales[c]; }, NAN, name + "/inverse_scale")},
               {v}));
      const std::string zero = edge_constant(t, q, [&](std::size_t c) { return static_cast<float>(q.zero_points[c]); }, 0.0f,
                                             name + "/zero_point");
      if (!zero.empty()) {
        const std::string w = fresh_blob(name + "/shifted");
        add(make("add", {v, zero}, {w}));
        v = w;
      }
      y = unary_layer("round", v, {{"mode", std::string("nearest_even")}}, "integers");
      graph_.output_dtypes[name] = ty == I8 ? DType::int8 : DType::uint8;
    } else if (ty != F32) {
      if (ty == I32) graph_.output_dtypes[name] = DType::int32;
      else if (ty == I64) graph_.output_dtypes[name] = DType::int64;
      else if (ty == BOOL) graph_.output_dtypes[name] = DType::boolean;
      else throw Error(fmt::format("output '{}' has type {}", name, type_name(ty)), path_, {}, "outputs");
    }
    if (y != name) {
      // The net's output carries the file's tensor name: a blob inside that
      // holds it (the tensor's nchw form, its value before the integer
      // conversion) takes another.
      const bool is_input = std::any_of(graph_.inputs.begin(), graph_.inputs.end(),
                                        [&](const TensorInfo& i) { return i.name == name; });
      if (is_input) {
        names.insert(y);
        graph_.outputs.push_back(y);
        continue;
      }
      if (taken_blobs_.count(name)) rename_blob(name, fresh_blob(name + "/inner"));
      taken_blobs_.insert(name);
      add(make("identity", {y}, {name}));
      y = name;
    }
    names.insert(y);
    graph_.outputs.push_back(y);
  }
}

core::Graph Importer::run() {
  flatbuffers::Verifier::Options vo;
  vo.max_tables = 1u << 24;
  // Over 2 GB, the FlatBuffer is the file's start and buffers lie after it.
  const std::size_t fb_size = std::min<std::size_t>(file_.size, FLATBUFFERS_MAX_BUFFER_SIZE - 1);
  flatbuffers::Verifier verifier(file_.data, fb_size, vo);
  if (file_.size < 8 || !flatbuffers::BufferHasIdentifier(file_.data, fb::ModelIdentifier()))
    throw Error("not a TensorFlow Lite model: no \"TFL3\" identifier at byte 4", path_);
  if (!fb::VerifyModelBuffer(verifier))
    throw Error("malformed TensorFlow Lite model: the FlatBuffer verifier refuses it (truncated or corrupt)", path_);
  model_ = fb::GetModel(file_.data);
  if (model_->version() != 3) throw Error(fmt::format("schema version {} (3 is read)", model_->version()), path_, {}, "version");
  if (!model_->subgraphs() || model_->subgraphs()->size() == 0 || !model_->subgraphs()->Get(0))
    throw Error("the model has no subgraph", path_, {}, "subgraphs");
  g_ = model_->subgraphs()->Get(0);
  read_inputs();
  const auto* codes = model_->operator_codes();
  const int n_ops = g_->operators() ? static_cast<int>(g_->operators()->size()) : 0;
  int not_tried = 0;  // builtins reading what an unsupported operator makes
  for (int i = 0; i < n_ops; ++i) {
    op_ = g_->operators()->Get(static_cast<unsigned>(i));
    if (!op_) throw Error(fmt::format("operator {} is missing", i), path_, {}, "operators");
    if (!codes || op_->opcode_index() >= codes->size() || !codes->Get(op_->opcode_index()))
      throw Error(fmt::format("operator {} names operator code {} of {}", i, op_->opcode_index(), codes ? codes->size() : 0),
                  path_, {}, "opcode_index");
    const fb::OperatorCode& oc = *codes->Get(op_->opcode_index());
    code_ = std::max<int>(oc.deprecated_builtin_code(), oc.builtin_code());
    const std::string what = code_ == CUSTOM ? fmt::format("custom operator '{}'", oc.custom_code() ? oc.custom_code()->str() : "")
                                             : op_name(code_);
    layer_ = num_out() > 0 ? tensor_name(out(0)) : fmt::format("operator_{}", i);
    bool ready = true;
    for (int k = 0; k < num_in(); ++k) {
      const int t = op_->inputs()->Get(static_cast<unsigned>(k));
      if (t >= 0 && !held_[static_cast<std::size_t>(tensor_index(t))].available) ready = false;
    }
    auto mark_unavailable = [&] {
      for (int k = 0; k < num_out(); ++k) held_.at(static_cast<std::size_t>(out(k))).available = false;
    };
    const std::string custom = code_ == CUSTOM && oc.custom_code() ? oc.custom_code()->str() : "";
    const bool custom_unsupported = code_ == CUSTOM && custom != "Convolution2DTransposeBias";
    if (!ready) {
      mark_unavailable();
      // A custom operator is known unsupported whatever it reads: every one is
      // named. A builtin after an unsupported one cannot be tried: counted.
      if (custom_unsupported)
        unsupported_.push_back(fmt::format("operator {} ({}, output '{}'): custom operators are not translated (MediaPipe's "
                                           "Convolution2DTransposeBias is)",
                                           i, what, layer_));
      else
        ++not_tried;
      continue;
    }
    try {
      if (code_ == CUSTOM) {
        if (custom_unsupported)
          throw Unsupported{"custom operators are not translated (MediaPipe's Convolution2DTransposeBias is)"};
        transpose_conv_bias();
      } else {
        convert();
      }
    } catch (const Unsupported& u) {
      unsupported_.push_back(fmt::format("operator {} ({}, output '{}'): {}", i, what, layer_, u.why));
      mark_unavailable();
    } catch (const Error& e) {
      throw (e.file().empty() ? e.with_file(path_) : e).with_layer(layer_);
    }
  }
  if (unsupported_.empty()) finish_outputs();
  if (!unsupported_.empty())
    throw Error(fmt::format("{} unsupported operator{} (see softneuro/import.hpp for the TensorFlow Lite operators read):\n  {}{}",
                            unsupported_.size(), unsupported_.size() == 1 ? "" : "s", fmt::join(unsupported_, "\n  "),
                            not_tried ? fmt::format("\n  and {} builtin operator{} not tried: {} on what those compute",
                                                    not_tried, not_tried == 1 ? "" : "s", not_tried == 1 ? "it reads" : "they read")
                                      : ""),
                path_, {}, "operators");
  graph_.name = options_.name.empty() ? std::filesystem::path(path_).stem().string() : options_.name;
  return std::move(graph_);
}

}  // namespace
}  // namespace tflite_import

Model import_tflite(const std::string& path, const ImportOptions& options) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  core::Graph graph;
  try {
    const core::MappedFile file = core::map_file(path);
    tflite_import::Importer importer(file, path, options);
    graph = importer.run();
  } catch (const Error&) {
    throw;
  } catch (const tflite_import::Unsupported& u) {  // outside any operator: an input's or output's tensor
    throw Error(fmt::format("unsupported: {}", u.why), path);
  } catch (const std::bad_alloc&) {
    throw Error("out of memory while importing", path);
  } catch (const std::exception& e) {
    throw Error(fmt::format("import failed: {}", e.what()), path);
  }
  for (const auto& entry : options.input_shapes) {
    const std::string& name = entry.first;
    const Shape& shape = entry.second;
    auto it = std::find_if(graph.inputs.begin(), graph.inputs.end(), [&](const TensorInfo& t) { return t.name == name; });
    if (it == graph.inputs.end()) throw Error(fmt::format("--input-shape names '{}', which is not an input", name), path, {}, "inputs");
    if (it->shape != shape)
      throw Error(fmt::format("input '{}' is {} in the file; TensorFlow Lite models import at the shapes they were converted with",
                              name, it->shape.to_string()), path, {}, "inputs");
  }
  try {
    core::optimize(graph, import::pass_options(options));
  } catch (const Error& e) {
    throw e.file().empty() ? e.with_file(path) : e;
  }
  core::Tuning own;  // its int8 tensors' quantisation
  own.blob_quant = core::model_quantisation(graph);
  Model model = detail::make_model(std::move(graph), std::move(own), path);
  core::info("{}: read, translated and optimized in {:.1f} ms", path,
             std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  return model;
}

}  // namespace softneuro
