#include "core/weight_quant.hpp"

#include <softneuro/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace softneuro::core {

namespace {
/// Whether channel `v` of `k` values lies on the grid of step `s` within [-qmax, qmax].
bool on_grid(const float* v, int64_t k, float s, int qmax) {
  if (!quant_scale_in_range(s)) return false;
  for (int64_t i = 0; i < k; ++i) {
    const float q = std::nearbyint(v[i] / s);
    if (!std::isfinite(v[i]) || std::fabs(q) > static_cast<float>(qmax) || std::fabs(q * s - v[i]) > 1e-6f * std::fabs(v[i]))
      return false;
  }
  return true;
}
}  // namespace

const std::vector<float>* int8_grid_scales(const Blob& w, int64_t channels) {
  return stored_as_int8(w) && w.shape()[0] == channels ? &w.quant().scales : nullptr;
}

ChannelQuantized quantize_per_channel(const float* w, int64_t channels, int64_t k, int qmax, const std::vector<float>* grid) {
  ChannelQuantized r;
  r.q.resize(static_cast<std::size_t>(channels * k));
  r.scale.resize(static_cast<std::size_t>(channels));
  if (grid && static_cast<int64_t>(grid->size()) != channels) grid = nullptr;
  for (int64_t o = 0; o < channels; ++o) {
    if (grid && on_grid(w + o * k, k, (*grid)[static_cast<std::size_t>(o)], qmax)) {
      const float s = (*grid)[static_cast<std::size_t>(o)];
      r.scale[static_cast<std::size_t>(o)] = s;
      for (int64_t i = 0; i < k; ++i) r.q[static_cast<std::size_t>(o * k + i)] = static_cast<int8_t>(std::nearbyint(w[o * k + i] / s));
      continue;
    }
    float mx = 0;
    for (int64_t i = 0; i < k; ++i) {
      const float v = w[o * k + i];
      if (!std::isfinite(v))
        throw Error(fmt::format("weight value {} (output channel {}) has no int8 representation; run this layer in float",
                                v, o), {}, {}, "weight");
      mx = std::max(mx, std::fabs(v));
    }
    const float s_max = mx / static_cast<float>(qmax);
    if (s_max > 1e30f)
      throw Error(fmt::format("weight value {} (output channel {}) needs a scale above 1e30; run this layer in float",
                              mx, o), {}, {}, "weight");
    // A channel all zeros, or too small for a scale in range (|w| < 1.27e-28,
    // where mx / 127 may even underflow to 0), quantises to zeros at scale 1.
    const float s = quant_scale_in_range(s_max) ? s_max : 1.0f;
    r.scale[static_cast<std::size_t>(o)] = s;
    for (int64_t i = 0; i < k; ++i)
      r.q[static_cast<std::size_t>(o * k + i)] = static_cast<int8_t>(std::clamp(std::nearbyint(w[o * k + i] / s), -static_cast<float>(qmax), static_cast<float>(qmax)));
  }
  return r;
}

int32_t quantize_bias_value(float bias, double step) {
  const double v = std::nearbyint(double(bias) / step);
  if (!std::isfinite(bias) || std::isnan(v))
    throw Error(fmt::format("bias value {} has no int32 representation at step {}; run this layer in float", bias, step),
                {}, {}, "bias");
  return static_cast<int32_t>(std::clamp(v, -1073741824.0, 1073741824.0));
}

std::optional<Blob> on_int8_grid(const Blob& w, int qmax) {
  if (w.dtype() != DType::float32 || w.layout() != Layout::nchw || w.shape().rank() < 1 || w.shape()[0] < 1 || !w.data())
    return std::nullopt;
  const int64_t channels = w.shape()[0], k = w.numel() / channels;
  Blob out = Blob::allocate(w.shape());
  float* v = out.data_as<float>();
  std::vector<float> scales(static_cast<std::size_t>(channels));
  for (int64_t o = 0; o < channels; ++o) {
    const float* src = w.data_as<float>() + o * k;
    // The grid's values q * s give back q and s when quantised again only where
    // s is a fixed point of s -> fl(fl(qmax s) / qmax); a few steps find one.
    ChannelQuantized q;
    try {
      q = quantize_per_channel(src, 1, k, qmax);
    } catch (const Error&) {
      return std::nullopt;  // not finite, or beyond int8 weights' range: stored as float32
    }
    bool exact = false;
    for (int step = 0; step < 4 && !exact; ++step) {
      const float s = q.scale[0];
      for (int64_t i = 0; i < k; ++i) v[o * k + i] = static_cast<float>(q.q[static_cast<std::size_t>(i)]) * s;
      ChannelQuantized back = quantize_per_channel(v + o * k, 1, k, qmax);
      exact = back.scale[0] == s && back.q == q.q;
      q = std::move(back);
    }
    if (!exact) return std::nullopt;
    scales[static_cast<std::size_t>(o)] = q.scale[0];
  }
  out.quant().scales = std::move(scales);
  out.quant().axis = 0;
  return out;
}

namespace {
bool per_channel_symmetric(const Blob& w) {
  return w.quant().axis == 0 && w.shape().rank() >= 1 && static_cast<int64_t>(w.quant().scales.size()) == w.shape()[0] &&
         std::all_of(w.quant().zero_points.begin(), w.quant().zero_points.end(), [](int32_t z) { return z == 0; });
}
}  // namespace

bool stored_as_int8(const Blob& w) {
  return (w.dtype() == DType::float32 || w.dtype() == DType::qint8) && per_channel_symmetric(w);
}

bool int8_weight(const Blob& w) { return w.dtype() == DType::qint8 && per_channel_symmetric(w); }

Support int8_routine_weight(const Layer& l, const char* key, bool required) {
  const Blob* b = l.find_weight(key);
  if (!b) return required ? Support::no(fmt::format("weight '{}' is missing", key)) : Support::yes();
  if ((b->dtype() != DType::float32 && !(std::string_view(key) == "weight" && int8_weight(*b))) ||
      b->device() != Device::cpu || b->layout() != Layout::nchw)
    return Support::no(fmt::format("weight '{}' must be float32 (quantised in prepare) or int8 per output channel, on the CPU", key));
  if (b->numel() > 0 && !b->data()) return Support::no(fmt::format("weight '{}' has no data", key));
  return Support::yes();
}

Blob float_weight(const Blob& w) { return w.dtype() == DType::float32 ? w : dequantize_weight(w, "weight"); }

ChannelQuantized channel_int8(const Blob& w, int qmax) {
  const int64_t channels = w.shape().rank() ? w.shape()[0] : 1, k = channels ? w.numel() / channels : 0;
  if (!int8_weight(w) || !w.data()) {
    const Blob f = float_weight(w);
    return quantize_per_channel(f.data_as<float>(), channels, k, qmax, int8_grid_scales(f, channels));
  }
  const int8_t* q = w.data_as<int8_t>();
  // On its grid, as quantize_per_channel keeps a channel whose values are.
  const auto& scales = w.quant().scales;
  const bool fits = std::all_of(q, q + w.numel(), [&](int8_t v) { return v >= -qmax && v <= qmax; }) &&
                    std::all_of(scales.begin(), scales.end(), quant_scale_in_range);
  if (!fits) {  // onto the narrower grid, from the values
    const Blob f = dequantize_weight(w, "weight");
    return quantize_per_channel(f.data_as<float>(), channels, k, qmax, &f.quant().scales);
  }
  return ChannelQuantized{std::vector<int8_t>(q, q + w.numel()), scales};
}

namespace {
/// Scales a weight's quantisation needs: 1, the axis dim, or per block the
/// shape with the axis dim ceil(dim / block_size).
int64_t scale_count(const Shape& s, const QuantParams& qp) {
  if (qp.axis < 0) return 1;
  if (qp.block_size <= 0) return s[qp.axis];
  const int64_t dim = s[qp.axis], blocks = dim == 0 ? 0 : (dim - 1) / qp.block_size + 1;  // (no overflow at any block size)
  return s.numel() / std::max<int64_t>(dim, 1) * blocks;
}
}  // namespace

bool block_quantized(const Blob& w) {
  const QuantParams& qp = w.quant();
  const Shape& s = w.shape();
  return s.rank() == 2 && (w.dtype() == DType::quint8 || w.dtype() == DType::qint8 || (w.dtype() == DType::quint4 && s[1] % 32 == 0)) &&
         qp.block_size > 0 && qp.axis == 1 && static_cast<int64_t>(qp.scales.size()) == scale_count(s, qp) &&
         (qp.zero_points.empty() || qp.zero_points.size() == qp.scales.size());
}

std::optional<Blob> packed_codes4(const Blob& w) {
  if (w.dtype() == DType::quint4 || !block_quantized(w) || w.shape()[1] % 32 != 0 || !w.data()) return std::nullopt;
  const bool is_signed = w.dtype() == DType::qint8;
  const int shift = is_signed ? 8 : 0;  // int4's -8..7 as 0..15, zero points likewise
  const auto* q = w.data_as<uint8_t>();
  const int64_t n = w.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int v = is_signed ? int{static_cast<int8_t>(q[i])} + shift : int{q[i]};
    if (v < 0 || v > 15) return std::nullopt;
  }
  const QuantParams& qp = w.quant();
  std::vector<int32_t> zeros = qp.zero_points;
  if (is_signed && zeros.empty()) zeros.assign(qp.scales.size(), 0);
  for (int32_t& z : zeros) z += shift;
  Blob out = Blob::allocate(w.shape(), DType::quint4);
  auto* p = out.data_as<uint8_t>();
  auto value = [&](int64_t i) { return static_cast<unsigned>(is_signed ? static_cast<int8_t>(q[i]) + shift : q[i]); };
  for (int64_t g = 0; g < n; g += 32)  // (quint4's groups: byte j holds codes j and j + 16)
    for (int64_t j = 0; j < 16; ++j) p[g / 2 + j] = static_cast<uint8_t>(value(g + j) | (value(g + j + 16) << 4));
  QuantParams& o = out.quant();
  o = qp;
  o.zero_points = std::move(zeros);
  return out;
}

void check_weight_quant(const Blob& q, const std::string& field) {
  const QuantParams& qp = q.quant();
  const Shape& s = q.shape();
  const bool per_axis = qp.axis >= 0;
  if (per_axis && qp.axis >= s.rank()) throw Error(fmt::format("quantisation axis {} of a rank-{} weight", qp.axis, s.rank()), {}, {}, field);
  if (q.dtype() == DType::quint4 && (qp.block_size <= 0 || s.rank() != 2 || s[1] % 32 != 0))
    throw Error(fmt::format("4-bit codes {} are not a blockwise weight [N, K] with K a multiple of 32", s.to_string()), {}, {},
                field + ".block_size");
  if (qp.block_size < 0 || (qp.block_size > 0 && !per_axis))
    throw Error(fmt::format("block size {} on axis {}", qp.block_size, qp.axis), {}, {}, field + ".block_size");
  const int64_t slices = scale_count(s, qp);
  if (static_cast<int64_t>(qp.scales.size()) != slices)
    throw Error(fmt::format("{} scales for {} {}", qp.scales.size(), slices, qp.block_size ? "blocks" : "slices"), {}, {},
                field + ".scales");
  if (!qp.zero_points.empty() && qp.zero_points.size() != qp.scales.size())
    throw Error(fmt::format("{} zero points for {} scales", qp.zero_points.size(), qp.scales.size()), {}, {}, field + ".zero_points");
  const int32_t lo = q.dtype() == DType::qint8 ? -128 : 0, hi = q.dtype() == DType::qint8 ? 127 : q.dtype() == DType::quint4 ? 15 : 255;
  for (std::size_t i = 0; i < qp.scales.size(); ++i) {
    // A block's scale may be 0 (a block of zeros) or negative (ONNX Runtime's
    // symmetric 4-bit codes: its largest value over -8); an int8 weight's not.
    const bool block_scale = qp.block_size > 0 && std::isfinite(qp.scales[i]) && std::fabs(qp.scales[i]) <= 1e30f;
    if (!block_scale && !quant_scale_in_range(qp.scales[i]))
      throw Error(fmt::format("scale {} of slice {} lies outside [1e-30, 1e30]", qp.scales[i], i), {}, {}, field + ".scales");
    if (!qp.zero_points.empty() && (qp.zero_points[i] < lo || qp.zero_points[i] > hi))
      throw Error(fmt::format("zero point {} of slice {} lies outside {}", qp.zero_points[i], i, to_string(q.dtype())), {}, {},
                  field + ".zero_points");
  }
}

Blob dequantize_weight(const Blob& q, const std::string& field) {
  check_weight_quant(q, field);
  const QuantParams& qp = q.quant();
  const Shape& s = q.shape();
  const bool per_axis = qp.axis >= 0;
  const int64_t slices = per_axis ? s[qp.axis] : 1;
  Blob out = Blob::allocate(s);
  // Slice k of axis a: index = (outer * slices + k) * inner + i.
  int64_t inner = 1;
  if (per_axis)
    for (int d = qp.axis + 1; d < s.rank(); ++d) inner *= s[d];
  float* v = out.data_as<float>();
  auto code = [&](int64_t i) {
    if (q.dtype() == DType::quint4) return quint4_code(q.data_as<uint8_t>(), i);
    return q.dtype() == DType::qint8 ? int32_t{q.data_as<int8_t>()[i]} : int32_t{q.data_as<uint8_t>()[i]};
  };
  if (qp.block_size > 0) {  // scale [outer, a / block_size, i]
    const int64_t blocks = slices == 0 ? 0 : (slices - 1) / qp.block_size + 1, outer = slices ? q.numel() / (slices * inner) : 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t a = 0; a < slices; ++a)
        for (int64_t i = 0; i < inner; ++i) {
          const auto k = static_cast<std::size_t>((o * blocks + a / qp.block_size) * inner + i);
          const int64_t at = (o * slices + a) * inner + i;
          v[at] = static_cast<float>(code(at) - (qp.zero_points.empty() ? 0 : qp.zero_points[k])) * qp.scales[k];
        }
    return out;  // (no scales: a float32 weight's scales say it lies on an int8 grid)
  }
  // Runs of `inner` values share a slice: one loop per run, which the compiler
  // vectorises (a load of a tuned int8 ResNet50 spent 100 ms here per value).
  const int64_t n = q.numel(), run = per_axis ? inner : std::max<int64_t>(n, 1);
  for (int64_t at = 0, r = 0; at < n; at += run, ++r) {
    const std::size_t k = per_axis ? static_cast<std::size_t>(r % slices) : 0;
    const float s = qp.scales[k];
    const int32_t z = qp.zero_points.empty() ? 0 : qp.zero_points[k];
    const int64_t end = std::min(n, at + run);
    if (q.dtype() == DType::qint8) {
      const int8_t* src = q.data_as<int8_t>();
      for (int64_t i = at; i < end; ++i) v[i] = static_cast<float>(src[i] - z) * s;
    } else {
      const uint8_t* src = q.data_as<uint8_t>();
      for (int64_t i = at; i < end; ++i) v[i] = static_cast<float>(src[i] - z) * s;
    }
  }
  out.quant() = qp;
  return out;
}

std::optional<Blob> int8_storage(const Blob& w) {
  if (w.dtype() != DType::float32 || !stored_as_int8(w) || !w.data()) return std::nullopt;
  const int64_t channels = w.shape()[0], k = channels ? w.numel() / channels : 0;
  Blob q = Blob::allocate(w.shape(), DType::qint8);
  for (int64_t o = 0; o < channels; ++o) {
    const float s = w.quant().scales[static_cast<std::size_t>(o)];
    for (int64_t i = 0; i < k; ++i) {
      const float v = w.data_as<float>()[o * k + i];
      const float r = std::nearbyint(v / s);
      if (!(r >= -127 && r <= 127) || r * s != v) return std::nullopt;  // not on the grid: keep float32
      q.data_as<int8_t>()[o * k + i] = static_cast<int8_t>(r);
    }
  }
  q.quant().scales = w.quant().scales;
  q.quant().axis = 0;
  return q;
}

}  // namespace softneuro::core
