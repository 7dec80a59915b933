// The per-tensor int8 quantisation of activation blobs, as every qint8 routine
// family reads it from LayerInfo (our AVX2/VNNI kernels, oneDNN int8, XNNPACK).
// Internal to src/routines/cpu.
#pragma once

#include "core/layer_types.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace softneuro::cpu {

/// Per-tensor quantisation of one blob.
struct TQ {
  float scale = 1;
  int32_t zp = 0;
};

/// Blob i's per-tensor quantisation, or why it cannot be used.
inline Support tensor_quant(const std::vector<QuantParams>& qs, std::size_t i, const char* what, TQ* out) {
  if (i >= qs.size() || qs[i].empty()) return Support::no("not calibrated: run calibration first");
  const QuantParams& q = qs[i];
  if (q.scales.size() != 1 || q.axis != -1)
    return Support::no(fmt::format("{} {} is quantised per channel; activations must be per tensor", what, i));
  if (!(q.scales[0] > 0) || !std::isfinite(q.scales[0]))
    return Support::no(fmt::format("{} {} has scale {}, not a positive number", what, i, q.scales[0]));
  const int32_t zp = q.zero_points.empty() ? 0 : q.zero_points[0];
  if (zp < -128 || zp > 127) return Support::no(fmt::format("{} {} has zero point {} outside int8", what, i, zp));
  if (out) *out = TQ{q.scales[0], zp};
  return Support::yes();
}

/// Every input and output of the layer has a usable per-tensor quantisation.
inline Support calibrated(const LayerInfo& info) {
  for (std::size_t i = 0; i < info.input_shapes.size(); ++i)
    if (Support q = tensor_quant(info.input_quant, i, "input", nullptr); !q) return q;
  for (std::size_t i = 0; i < info.output_shapes.size(); ++i)
    if (Support q = tensor_quant(info.output_quant, i, "output", nullptr); !q) return q;
  return Support::yes();
}

/// Input i's / output i's quantisation (after supports() said yes); of a
/// LayerInfo, or of the PackInfo a routine packs with.
template <class Info>
TQ in_q(const Info& info, std::size_t i = 0) {
  TQ t;
  tensor_quant(info.input_quant, i, "input", &t);
  return t;
}
template <class Info>
TQ out_q(const Info& info, std::size_t i = 0) {
  TQ t;
  tensor_quant(info.output_quant, i, "output", &t);
  return t;
}

/// A fused relu or clip as bounds on the quantised output q = round(v / s) + z,
/// saturated to int8: clamping q to them gives what dequantise -> activation ->
/// quantise gives. [-128, 127] for no activation (and the others, which are no clamp).
struct Int8Bounds {
  int lo = -128, hi = 127;
};
inline Int8Bounds int8_bounds(const core::Activation& a, const TQ& out) {
  auto q = [&](float v) { return static_cast<int>(std::clamp(std::nearbyint(double(v) / out.scale) + out.zp, -128.0, 127.0)); };
  Int8Bounds b;
  if (a.kind == core::Activation::relu) b.lo = out.zp;
  if (a.kind == core::Activation::clip) {
    if (std::isfinite(a.min)) b.lo = q(a.min);
    if (std::isfinite(a.max)) b.hi = q(a.max);
  }
  return b;
}

/// The 256-entry table of a unary int8 -> int8 function: every int8 value q of
/// the input maps to quantise_out(f(dequantise_in(q))) (round half to even,
/// saturated; NaN to -128), f computed as cpu/ref computes it, so a lookup
/// equals the reference bit for bit.
template <class F>
void int8_table(int8_t* table, TQ x, TQ y, F f) {
  for (int q = -128; q < 128; ++q) {
    const float real = x.scale * static_cast<float>(q - x.zp);
    const float v = f(real);
    const double r = std::nearbyint(double(v) / double(y.scale)) + y.zp;
    table[static_cast<uint8_t>(static_cast<int8_t>(q))] = static_cast<int8_t>(std::clamp(std::isfinite(r) ? r : -128.0, -128.0, 127.0));
  }
}


}  // namespace softneuro::cpu
