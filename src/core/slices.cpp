#include "core/slices.hpp"

#include "core/layer_types.hpp"

namespace softneuro::core {

std::vector<std::size_t> contiguous_slices(const Shape& whole, int axis, std::span<const int64_t> sizes,
                                           const Schema& schema) {
  if (schema.device != Device::cpu || schema.dtype == DType::qint8 || schema.dtype == DType::quint8) return {};
  const int rank = whole.rank();
  if (axis < 0 || axis >= rank || sizes.empty()) return {};
  const std::size_t elem = dtype_size(schema.dtype);
  if (elem == 0) return {};  // sub-byte types
  // The dims in memory order and the axis's place among them; bytes per unit of the axis.
  std::vector<int64_t> mem;
  int at = axis;
  int64_t unit = 1;  // elements per step along the axis
  if (schema.layout == Layout::nchw) {
    mem.assign(whole.begin(), whole.end());
  } else if (schema.layout == Layout::nhwc) {
    if (rank < 3) return {};
    mem.push_back(whole[0]);
    for (int d = 2; d < rank; ++d) mem.push_back(whole[d]);
    mem.push_back(whole[1]);
    at = axis == 0 ? 0 : axis == 1 ? rank - 1 : axis - 1;
  } else {
    const int64_t block = channel_block(schema.layout);
    if (rank != 4 || axis != 1 || whole[0] != 1 || block == 0) return {};
    for (int64_t s : sizes)
      if (s % block != 0) return {};
    return [&] {
      std::vector<std::size_t> offsets;
      std::size_t at_byte = 0;
      const auto per_channel = static_cast<std::size_t>(whole[2] * whole[3]) * elem;
      for (int64_t s : sizes) {
        const std::size_t bytes = static_cast<std::size_t>(s) * per_channel;
        if (at_byte % 64 != 0 || bytes % 64 != 0) return std::vector<std::size_t>{};
        offsets.push_back(at_byte);
        at_byte += bytes;
      }
      return offsets;
    }();
  }
  for (int d = 0; d < at; ++d)
    if (mem[static_cast<std::size_t>(d)] != 1) return {};
  for (int d = at + 1; d < rank; ++d) unit *= mem[static_cast<std::size_t>(d)];
  std::vector<std::size_t> offsets;
  std::size_t at_byte = 0;
  for (int64_t s : sizes) {
    const std::size_t bytes = static_cast<std::size_t>(s * unit) * elem;
    if (at_byte % 64 != 0 || bytes % 64 != 0) return {};
    offsets.push_back(at_byte);
    at_byte += bytes;
  }
  return offsets;
}

std::optional<SliceCut> slice_cut(const Layer& layer, std::span<const Shape> inputs, std::span<const Shape> outputs) {
  SliceCut cut;
  if (layer.type == "concat" && !inputs.empty() && outputs.size() == 1) {
    cut.whole = outputs[0];
    cut.axis = normalize_axis(layer, "axis", layer.get_int("axis"), cut.whole.rank());
    for (const Shape& s : inputs) cut.sizes.push_back(s[cut.axis]);
  } else if (layer.type == "split" && inputs.size() == 1 && !outputs.empty()) {
    cut.whole = inputs[0];
    cut.axis = normalize_axis(layer, "axis", layer.get_int("axis", 0), cut.whole.rank());
    for (const Shape& s : outputs) cut.sizes.push_back(s[cut.axis]);
  } else {
    return std::nullopt;
  }
  return cut;
}

}  // namespace softneuro::core
