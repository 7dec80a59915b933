// The table a gather layer reads rows of (cpu/ref and cpu/vec): its input 0,
// or its weight "table" where the importer kept one, in float32 or in the
// integers the model quantised it to (ONNX Runtime's quantize_dynamic writes
// int8 rows gathered, then dequantised): int8/uint8 values as they are,
// qint8/quint8 with one scale and zero point, rows dequantised as they are read
// ((q - zero point) * scale, as DequantizeLinear computes it).
#pragma once

#include "core/weight_quant.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>

namespace softneuro::routines {

/// Index `v` (a whole number held as a float) into a dim of `len`, negative
/// from the end; an Error naming the layer where it is no index into the dim.
/// Whether v is a whole index in [-len, len).
inline bool valid_index(float v, int64_t len) {
  const double d = v;
  return d >= -static_cast<double>(len) && d < static_cast<double>(len) && d == std::floor(d);
}

inline int64_t checked_index(float v, int64_t len, const std::string& layer) {
  const double d = v;
  if (!valid_index(v, len))
    throw Error(fmt::format("index {} is out of range for a dim of {} (indices lie in [-{}, {}))", d, len, len, len), {},
                layer, "indices");
  return static_cast<int64_t>(d < 0 ? d + static_cast<double>(len) : d);
}

struct GatherTable {
  const void* weight = nullptr;  ///< the weight's values; nullptr: the table is input 0
  DType dtype = DType::float32;
  float scale = 1, zero_point = 0;
  Shape shape;
  /// A table in blocks along its last dim (an LLM's 4-bit embedding, ONNX
  /// Runtime's GatherBlockQuantized): a scale and zero point per block of
  /// `block` values of a row of `row` values; block 0: one scale.
  int64_t block = 0, row = 0, blocks = 0;
  const float* scales = nullptr;
  const int32_t* zero_points = nullptr;  ///< nullptr: zeros

  /// Whether `who` (a descriptor) reads this layer's table: input 0, or a
  /// weight of the dtypes above, quantised per tensor.
  static Support check(const LayerInfo& info, std::string_view who) {
    const Blob* t = info.layer->find_weight("table");
    if (info.input_shapes.size() == 2) return Support::yes();
    if (!t) return Support::no("no table: neither two inputs nor a weight 'table'");
    if (t->device() != Device::cpu || t->layout() != Layout::nchw || (t->numel() > 0 && !t->data()))
      return Support::no("weight 'table' is not a plain CPU blob with memory");
    const DType d = t->dtype();
    if (d != DType::float32 && d != DType::int8 && d != DType::uint8 && d != DType::qint8 && d != DType::quint8)
      return Support::no(fmt::format("weight 'table' is {}; {} reads float32, int8 or uint8 tables", to_string(d), who));
    if (d == DType::qint8 || d == DType::quint8) {
      const QuantParams& q = t->quant();
      const bool blocks = q.block_size > 0 && q.axis == t->shape().rank() - 1;
      if (blocks) {
        try {
          core::check_weight_quant(*t, "table");
        } catch (const Error& e) {
          return Support::no(fmt::format("weight 'table': {}", e.message()));
        }
      } else if (q.scales.size() != 1 || q.zero_points.size() > 1 || !core::quant_scale_in_range(q.scales[0])) {
        return Support::no(fmt::format("{} reads a table quantised per tensor (one scale in [1e-30, 1e30]) or in blocks "
                                       "along its last dim", who));
      }
    }
    return Support::yes();
  }

  explicit GatherTable(const LayerInfo& info) : shape(info.input_shapes[0]) {
    if (info.input_shapes.size() == 2) return;
    const Blob& t = info.layer->weight("table");
    weight = t.data();
    dtype = t.dtype();
    shape = t.shape();
    const QuantParams& q = t.quant();
    if (q.block_size > 0 && shape.rank() >= 1) {
      block = q.block_size;
      row = shape[shape.rank() - 1];
      blocks = row == 0 ? 0 : (row - 1) / block + 1;
      scales = q.scales.data();
      zero_points = q.zero_points.empty() ? nullptr : q.zero_points.data();
      return;
    }
    if (!q.scales.empty()) scale = q.scales[0];
    if (!q.zero_points.empty()) zero_point = static_cast<float>(q.zero_points[0]);
  }

  bool is_signed() const { return dtype == DType::int8 || dtype == DType::qint8; }
  bool bytes() const { return dtype != DType::float32; }

  /// `n` values from element `at` of the table into `y`, as float32 (`input0`:
  /// the layer's input 0, read where the table is no weight).
  template <class DequantizeBytes>
  void copy(const Blob* input0, int64_t at, int64_t n, float* y, DequantizeBytes&& dequantize) const {
    if (!weight) {
      std::memcpy(y, input0->data_as<float>() + at, static_cast<std::size_t>(n) * sizeof(float));
    } else if (!bytes()) {
      std::memcpy(y, static_cast<const float*>(weight) + at, static_cast<std::size_t>(n) * sizeof(float));
    } else if (block == 0) {
      dequantize(static_cast<const uint8_t*>(weight) + at, is_signed(), y, n, scale, zero_point);
    } else {  // a piece per block: its own scale and zero point
      for (int64_t i = at, end = at + n; i < end;) {
        const int64_t r = i / row, c = i % row, piece = std::min({end - i, block - c % block, row - c});
        const int64_t b = r * blocks + c / block;
        dequantize(static_cast<const uint8_t*>(weight) + i, is_signed(), y + (i - at), piece, scales[b],
                   zero_points ? static_cast<float>(zero_points[b]) : 0.0f);
        i += piece;
      }
    }
  }
};

/// (q - zero_point) * scale for n bytes (int8 where is_signed, else uint8): the
/// scalar form cpu/ref uses; cpu/vec has its vectorised kernel.
inline void dequantize_bytes(const uint8_t* q, bool is_signed, float* y, int64_t n, float scale, float zero_point) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = is_signed ? static_cast<float>(static_cast<int8_t>(q[i])) : static_cast<float>(q[i]);
    y[i] = (v - zero_point) * scale;
  }
}

}  // namespace softneuro::routines
