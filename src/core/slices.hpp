// Where a concat's inputs (a split's outputs) lie in their whole as one
// contiguous byte range each: then they can share the whole's memory and the
// concat or split copies nothing.
#pragma once

#include "core/graph.hpp"

#include <softneuro/blob.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace softneuro::core {

/// The byte offset of each piece of `whole` cut along `axis` into `sizes`, where
/// every piece is one contiguous range of the whole's storage in `schema`
/// (plain or channels-last with all dims before the axis in memory of size 1; a
/// blocked layout along whole channel blocks of one image) and every offset
/// and piece size is a multiple of 64 bytes, as the arena aligns blobs. Else
/// empty. Quantised dtypes are never sliced: their concat may requantise.
std::vector<std::size_t> contiguous_slices(const Shape& whole, int axis, std::span<const int64_t> sizes,
                                           const Schema& schema);

/// For a concat or split layer: its axis and piece sizes (a concat's from its
/// input shapes, a split's from its output shapes). Empty for other layers.
struct SliceCut {
  int axis = 0;
  Shape whole;
  std::vector<int64_t> sizes;
};
std::optional<SliceCut> slice_cut(const Layer& layer, std::span<const Shape> inputs, std::span<const Shape> outputs);

}  // namespace softneuro::core
