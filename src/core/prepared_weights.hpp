// Derived weights a tuned .dnn stores ready to use (its prepared weights): a
// routine says how its object is saved as bytes and read back from a view of
// them, so a session of the file packs and transforms no weight.
#pragma once

#include "core/weight_store.hpp"

#include <softneuro/routine.hpp>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace softneuro::core {

/// Arrays laid end to end after a header of their sizes, each 64-byte aligned:
/// the bytes of a derived weight (a 1-D uint8 Blob).
Blob pack_arrays(std::initializer_list<std::span<const std::byte>> arrays);
/// The arrays of pack_arrays' bytes, which must have exactly the sizes given
/// (in bytes), else nothing: bytes of another packing are never read.
std::optional<std::vector<const std::byte*>> unpack_arrays(const Blob& bytes, std::initializer_list<std::size_t> sizes);

/// The sizes (in bytes) of the arrays pack_arrays stored in `bytes`, for a
/// packing whose last array's length varies; nothing where the header does not hold.
std::optional<std::vector<std::size_t>> packed_array_sizes(const Blob& bytes);

template <class T>
std::span<const std::byte> array_bytes(const T* p, std::size_t n) {
  return std::as_bytes(std::span<const T>(p, n));
}

/// What keeps a view of `bytes` alive.
inline std::shared_ptr<const void> owner_of(const Blob& bytes) { return std::make_shared<const Blob>(bytes); }

/// The digest of the sources this library was built from (SOFTNEURO_SOURCE_DIGEST,
/// cmake/source_digest.cmake): 16 hex digits.
const char* source_digest();

/// The tag a file's prepared weights carry and a loading library must match:
/// its version, the digest of its sources (a packing may change within a
/// version) and the CPU extensions it computes with (the cap included).
/// Packings differ between these; not between core counts or CPU models.
std::string prepared_weights_tag();

/// A float32 Blob (a transformed weight) as prepared weights: its bytes, and
/// back as a view of the file's at `shape`.
Blob save_float_blob(const Blob& b);
std::optional<Blob> load_float_blob(const Blob& bytes, const Shape& shape);

}  // namespace softneuro::core
