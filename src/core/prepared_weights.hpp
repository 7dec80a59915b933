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

template <class T>
std::span<const std::byte> array_bytes(const T* p, std::size_t n) {
  return std::as_bytes(std::span<const T>(p, n));
}

/// What keeps a view of `bytes` alive.
inline std::shared_ptr<const void> owner_of(const Blob& bytes) { return std::make_shared<const Blob>(bytes); }

/// The tag a file's prepared weights carry and a loading library must match:
/// its version and the CPU extensions it computes with (the cap included).
/// Packings differ between these; not between core counts or CPU models.
std::string prepared_weights_tag();

/// shared_weights(info, key, make), and the object is stored in a tuned file:
/// `save(const T&)` gives its bytes (pack_arrays); `load(const Blob& bytes)`
/// gives a T reading them in place (std::optional<T>; nothing where they do
/// not fit what the routine reads). `save` is kept beyond this call: it must
/// capture by value.
template <class T, class Make, class Save, class Load>
std::shared_ptr<const T> prepared_weights(const LayerInfo& info, std::string_view key, Make&& make, Save save, Load&& load) {
  auto* scoped = dynamic_cast<ScopedWeights*>(info.shared);
  if (!scoped) return shared_weights<T>(info, key, std::forward<Make>(make));
  PreparedCodec codec{[save](const void* p) { return save(*static_cast<const T*>(p)); },
                      [&load](const Blob& bytes) -> std::shared_ptr<const void> {
                        std::optional<T> t = load(bytes);
                        if (!t) return nullptr;
                        return std::make_shared<const T>(std::move(*t));
                      }};
  return std::static_pointer_cast<const T>(scoped->get_or_make_prepared(
      key, [&]() -> std::shared_ptr<const void> { return std::make_shared<const T>(make()); }, codec));
}

/// A float32 Blob (a transformed weight) as prepared weights: its bytes, and
/// back as a view of the file's at `shape`.
Blob save_float_blob(const Blob& b);
std::optional<Blob> load_float_blob(const Blob& bytes, const Shape& shape);

}  // namespace softneuro::core
