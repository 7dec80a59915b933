#include <softneuro/blob.hpp>
#include <softneuro/error.hpp>

#include "core/aligned_memory.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>

namespace softneuro {

namespace {
constexpr std::string_view kDTypes[] = {"float32", "float16", "bfloat16", "qint8", "quint8", "int32",  "int64",  "float64",
                                        "int8",    "uint8",   "int16",    "uint16", "uint32", "uint64", "bool",
                                        "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float8e8m0",
                                        "float4e2m1", "int4", "uint4", "int2", "uint2", "quint4"};
static_assert(std::size(kDTypes) == static_cast<std::size_t>(kLastDType) + 1);
constexpr std::string_view kLayouts[] = {"nchw", "nhwc", "nchw8c", "nchw16c"};
constexpr std::string_view kDevices[] = {"cpu", "cuda"};

template <class E, std::size_t N>
E parse_enum(std::string_view s, const std::string_view (&names)[N], const char* what) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  throw Error(fmt::format("unknown {} '{}'", what, s), {}, {}, what);
}
}  // namespace

std::string_view to_string(DType d) { return kDTypes[static_cast<std::size_t>(d)]; }
std::string_view to_string(Layout l) { return kLayouts[static_cast<std::size_t>(l)]; }
std::string_view to_string(Device d) { return kDevices[static_cast<std::size_t>(d)]; }
DType parse_dtype(std::string_view s) { return parse_enum<DType>(s, kDTypes, "dtype"); }
Layout parse_layout(std::string_view s) { return parse_enum<Layout>(s, kLayouts, "layout"); }
Device parse_device(std::string_view s) { return parse_enum<Device>(s, kDevices, "device"); }

std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::float32: case DType::int32: case DType::uint32: return 4;
    case DType::float16: case DType::bfloat16: case DType::int16: case DType::uint16: return 2;
    case DType::qint8: case DType::quint8: case DType::int8: case DType::uint8: case DType::boolean: return 1;
    case DType::int64: case DType::uint64: case DType::float64: return 8;
    case DType::float8e4m3fn: case DType::float8e4m3fnuz: case DType::float8e5m2: case DType::float8e5m2fnuz:
    case DType::float8e8m0: case DType::float4e2m1: case DType::int4: case DType::uint4: case DType::int2:
    case DType::uint2: return 1;  // unpacked: one element per byte
    case DType::quint4: return 1;  // (two a byte: storage_bytes counts them)
  }
  return 0;
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  if (dims.size() > max_rank) throw Error(fmt::format("rank {} exceeds the maximum {}", dims.size(), max_rank));
  for (auto d : dims) dims_[static_cast<std::size_t>(rank_++)] = d;
}

Shape::Shape(const std::vector<int64_t>& dims) {
  if (dims.size() > max_rank) throw Error(fmt::format("rank {} exceeds the maximum {}", dims.size(), max_rank));
  for (auto d : dims) dims_[static_cast<std::size_t>(rank_++)] = d;
}

int64_t Shape::numel() const noexcept {
  int64_t n = 1;
  bool saturated = false;
  for (int i = 0; i < rank_; ++i) {
    const int64_t d = dims_[static_cast<std::size_t>(i)];
    if (d == 0) return 0;
    if (saturated || __builtin_mul_overflow(n, d, &n)) saturated = true;
  }
  return saturated ? std::numeric_limits<int64_t>::max() : n;
}

void Shape::push_back(int64_t d) {
  if (rank_ >= max_rank) throw Error(fmt::format("rank exceeds the maximum {}", max_rank));
  dims_[static_cast<std::size_t>(rank_++)] = d;
}

std::string Shape::to_string() const { return fmt::format("[{}]", fmt::join(begin(), end(), ",")); }

bool Shape::operator==(const Shape& o) const noexcept {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[static_cast<std::size_t>(i)] != o.dims_[static_cast<std::size_t>(i)]) return false;
  return true;
}

std::size_t storage_bytes(const Shape& s, DType dtype, Layout layout) noexcept {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  const int64_t numel = s.numel();
  if (numel < 0 || numel == std::numeric_limits<int64_t>::max()) return kMax;
  std::size_t n = static_cast<std::size_t>(numel);
  if (const int64_t b = channel_block(layout); b && s.rank() >= 2 && s[1] > 0) {
    const std::size_t padded = static_cast<std::size_t>((s[1] + b - 1) / b * b);
    if (__builtin_mul_overflow(n / static_cast<std::size_t>(s[1]), padded, &n)) return kMax;
  }
  if (dtype == DType::quint4) return n / 2 + n % 2;
  std::size_t bytes;
  return __builtin_mul_overflow(n, dtype_size(dtype), &bytes) ? kMax : bytes;
}

std::size_t Blob::byte_size() const noexcept { return storage_bytes(shape_, dtype_, layout_); }

Blob Blob::allocate(const Shape& shape, DType dtype, Layout layout) {
  for (auto d : shape)
    if (d < 0) throw Error(fmt::format("negative dim in shape {}", shape.to_string()));
  Blob b;
  b.shape_ = shape;
  b.dtype_ = dtype;
  b.layout_ = layout;
  if (b.byte_size() > std::numeric_limits<std::size_t>::max() / 2)
    throw Error(fmt::format("shape {} of {} is too large to allocate", shape.to_string(), to_string(dtype)));
  std::size_t bytes = (b.byte_size() + 63) / 64 * 64;
  void* p = core::allocate_aligned(bytes == 0 ? 64 : bytes);
  if (!p) throw Error(fmt::format("out of memory allocating {} bytes", bytes));
  std::memset(p, 0, bytes == 0 ? 64 : bytes);
  b.owner_ = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  b.data_ = p;
  return b;
}

Blob Blob::view(void* data, const Shape& shape, DType dtype, Layout layout, Device device) {
  Blob b;
  b.data_ = data;
  b.shape_ = shape;
  b.dtype_ = dtype;
  b.layout_ = layout;
  b.device_ = device;
  return b;
}

Blob Blob::view(std::shared_ptr<const void> owner, const void* data, const Shape& shape, DType dtype,
                Layout layout, Device device) {
  Blob b = view(const_cast<void*>(data), shape, dtype, layout, device);
  b.owner_ = std::move(owner);
  return b;
}

const QuantParams Blob::kNoQuant{};

QuantParams& Blob::quant() {
  if (!quant_) quant_ = std::make_shared<QuantParams>();
  else if (quant_.use_count() > 1) quant_ = std::make_shared<QuantParams>(*quant_);
  return *quant_;
}

Blob Blob::clone() const {
  if (device_ != Device::cpu) throw Error("clone of a non-CPU blob");
  Blob b = allocate(shape_, dtype_, layout_);
  if (data_ && byte_size()) std::memcpy(b.data_, data_, byte_size());
  b.quant_ = quant_;
  return b;
}

}  // namespace softneuro
