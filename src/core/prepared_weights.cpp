#include "core/prepared_weights.hpp"

#include "core/device.hpp"
#include "source_digest.hpp"  // generated

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

namespace softneuro::core {

namespace {
constexpr std::size_t kAlign = 64;
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Blob pack_arrays(std::initializer_list<std::span<const std::byte>> arrays) {
  std::size_t total = align_up(sizeof(uint64_t) * (1 + arrays.size()));
  for (const auto& a : arrays) total += align_up(a.size());
  Blob out = Blob::allocate(Shape{static_cast<int64_t>(total)}, DType::uint8);
  std::byte* p = static_cast<std::byte*>(out.data());
  std::memset(p, 0, total);
  uint64_t count = arrays.size();
  std::memcpy(p, &count, sizeof count);
  std::size_t i = 1, at = align_up(sizeof(uint64_t) * (1 + arrays.size()));
  for (const auto& a : arrays) {
    const uint64_t n = a.size();
    std::memcpy(p + sizeof(uint64_t) * i++, &n, sizeof n);
    if (n) std::memcpy(p + at, a.data(), n);
    at += align_up(n);
  }
  return out;
}

std::optional<std::vector<const std::byte*>> unpack_arrays(const Blob& bytes, std::initializer_list<std::size_t> sizes) {
  const std::size_t total = static_cast<std::size_t>(bytes.byte_size());
  const std::size_t header = align_up(sizeof(uint64_t) * (1 + sizes.size()));
  const auto* p = static_cast<const std::byte*>(bytes.data());
  if (!p || total < header || reinterpret_cast<std::uintptr_t>(p) % kAlign != 0) return std::nullopt;
  uint64_t count = 0;
  std::memcpy(&count, p, sizeof count);
  if (count != sizes.size()) return std::nullopt;
  std::vector<const std::byte*> out;
  std::size_t i = 1, at = header;
  for (std::size_t want : sizes) {
    uint64_t n = 0;
    std::memcpy(&n, p + sizeof(uint64_t) * i++, sizeof n);
    if (n != want || align_up(want) > total - at) return std::nullopt;
    out.push_back(p + at);
    at += align_up(want);
  }
  if (at != total) return std::nullopt;
  return out;
}

std::optional<std::vector<std::size_t>> packed_array_sizes(const Blob& bytes) {
  const std::size_t total = static_cast<std::size_t>(bytes.byte_size());
  const auto* p = static_cast<const std::byte*>(bytes.data());
  uint64_t count = 0;
  if (!p || total < sizeof count) return std::nullopt;
  std::memcpy(&count, p, sizeof count);
  if (count > (total - sizeof count) / sizeof(uint64_t)) return std::nullopt;
  std::vector<std::size_t> sizes(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    uint64_t n = 0;
    std::memcpy(&n, p + sizeof(uint64_t) * (i + 1), sizeof n);
    if (n > total) return std::nullopt;
    sizes[i] = static_cast<std::size_t>(n);
  }
  return sizes;
}

const char* source_digest() { return SOFTNEURO_SOURCE_DIGEST; }

std::string prepared_weights_tag() {
  // The fingerprint without its core count ("... | N cpus").
  std::string isa = device_fingerprint();
  if (auto bar = isa.rfind(" | "); bar != std::string::npos && isa.find(" cpus", bar) != std::string::npos)
    isa.resize(bar);
  if (auto bar = isa.find(" | "); bar != std::string::npos) isa = isa.substr(bar + 3);  // the CPU's name neither
  return fmt::format("libsoftneuro {}+{} | {}", SOFTNEURO_VERSION, source_digest(), isa);
}

Blob save_float_blob(const Blob& b) {
  return pack_arrays({array_bytes(b.data_as<float>(), static_cast<std::size_t>(b.numel()))});
}

std::optional<Blob> load_float_blob(const Blob& bytes, const Shape& shape) {
  auto arrays = unpack_arrays(bytes, {static_cast<std::size_t>(shape.numel()) * sizeof(float)});
  if (!arrays) return std::nullopt;
  return Blob::view(owner_of(bytes), (*arrays)[0], shape, DType::float32);
}

}  // namespace softneuro::core
