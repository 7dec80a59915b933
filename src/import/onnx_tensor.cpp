#include "import/onnx_tensor.hpp"

#include "core/narrow_types.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>

namespace softneuro::onnx_import {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 40;  // far beyond any real tensor; guards overflow

float bfloat_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

bool is_floating(int type) {
  using T = onnx::TensorProto;
  const auto narrow = narrow_dtype(type);
  return type == T::FLOAT || type == T::FLOAT16 || type == T::BFLOAT16 || type == T::DOUBLE ||
         (narrow && !is_integer(*narrow));
}

/// Bits per element of a narrow type (8 for the float8 kinds, 4 or 2 packed), else 0.
int narrow_bits_per_element(int type) {
  switch (type) {
    case kFloat8E4M3FN: case kFloat8E4M3FNUZ: case kFloat8E5M2: case kFloat8E5M2FNUZ: case kFloat8E8M0: return 8;
    case kInt4: case kUInt4: case kFloat4E2M1: return 4;
    case kInt2: case kUInt2: return 2;
    default: return 0;
  }
}

/// Bytes per element of an ONNX type in raw_data, 0 for types we do not read.
std::size_t raw_size(int type) {
  using T = onnx::TensorProto;
  switch (type) {
    case T::FLOAT: case T::INT32: case T::UINT32: return 4;
    case T::UINT8: case T::INT8: case T::BOOL: return 1;
    case T::UINT16: case T::INT16: case T::FLOAT16: case T::BFLOAT16: return 2;
    case T::INT64: case T::UINT64: case T::DOUBLE: return 8;
    default: return 0;
  }
}

/// Value i of little-endian raw bytes of `type`, as double (floats) or int64.
template <class Out>
Out raw_value(const unsigned char* p, int type) {
  using T = onnx::TensorProto;
  auto load = [&](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (type) {
    case T::FLOAT: return static_cast<Out>(load(float{}));
    case T::DOUBLE: return static_cast<Out>(load(double{}));
    case T::FLOAT16: return static_cast<Out>(core::half_to_float(load(uint16_t{})));
    case T::BFLOAT16: return static_cast<Out>(bfloat_to_float(load(uint16_t{})));
    case T::INT8: return static_cast<Out>(load(int8_t{}));
    case T::UINT8: case T::BOOL: return static_cast<Out>(load(uint8_t{}));
    case T::INT16: return static_cast<Out>(load(int16_t{}));
    case T::UINT16: return static_cast<Out>(load(uint16_t{}));
    case T::INT32: return static_cast<Out>(load(int32_t{}));
    case T::UINT32: return static_cast<Out>(load(uint32_t{}));
    case T::INT64: return static_cast<Out>(load(int64_t{}));
    case T::UINT64: return static_cast<Out>(load(uint64_t{}));
    default: return Out{};
  }
}

/// Where a tensor's external data lies: its file, resolved, and the offset
/// of its `bytes` bytes there, every path and size checked.
struct ExternalSpan {
  std::filesystem::path path;
  uint64_t offset = 0;
};
ExternalSpan external_span(const onnx::TensorProto& t, const TensorSource& src, std::size_t bytes, const std::string& node,
                           const std::string& field) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = std::stoll(kv.value());
      else if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      throw Error(fmt::format("external data {} '{}' is not a number", kv.key(), kv.value()), src.file, node, field);
    }
  }
  if (location.empty()) throw Error("external data without a location", src.file, node, field);
  // The data must lie beside the model: no absolute paths, no way out of its folder.
  std::filesystem::path rel(location);
  if (rel.is_absolute() || std::any_of(rel.begin(), rel.end(), [](const auto& p) { return p == ".."; }))
    throw Error(fmt::format("external data location '{}' leaves the model's folder", location), src.file, node, field);
  std::error_code ec;
  // Symlinks resolved: the file itself must lie in the model's folder, and be a regular file (a FIFO would block).
  const std::filesystem::path dir = std::filesystem::canonical(src.dir.empty() ? "." : src.dir, ec);
  if (ec) throw Error(fmt::format("cannot resolve the model's folder '{}': {}", src.dir, ec.message()), src.file, node, field);
  const std::filesystem::path path = std::filesystem::canonical(dir / rel, ec);
  if (ec) throw Error(fmt::format("cannot read external data '{}': {}", (dir / rel).string(), ec.message()), src.file, node, field);
  if (std::mismatch(dir.begin(), dir.end(), path.begin(), path.end()).first != dir.end())
    throw Error(fmt::format("external data location '{}' resolves to '{}', which leaves the model's folder", location,
                            path.string()),
                src.file, node, field);
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(fmt::format("external data '{}' is not a regular file", path.string()), src.file, node, field);
  const auto file_size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(fmt::format("cannot read external data '{}': {}", path.string(), ec.message()), src.file, node, field);
  if (length < 0) length = static_cast<int64_t>(bytes);
  if (offset < 0 || static_cast<std::size_t>(length) != bytes ||
      static_cast<uint64_t>(offset) + static_cast<uint64_t>(length) > file_size)
    throw Error(fmt::format("external data '{}' (offset {}, length {}) does not hold the {} bytes of the tensor "
                            "(the file has {})", location, offset, length, bytes, file_size),
                src.file, node, field);
  return {path, static_cast<uint64_t>(offset)};
}

/// Reads `bytes` bytes of external data at `span` into `out`.
void read_span(const ExternalSpan& span, std::size_t bytes, char* out, const TensorSource& src, const std::string& node,
               const std::string& field) {
  std::ifstream in(span.path, std::ios::binary);
  if (!in.seekg(static_cast<std::streamoff>(span.offset)) || !in.read(out, static_cast<std::streamsize>(bytes)))
    throw Error(fmt::format("cannot read external data '{}'", span.path.string()), src.file, node, field);
}

/// The external data at `span` in its file's mapping (TensorSource::mapped),
/// or null where the file changed size since its checks or cannot be mapped.
const unsigned char* mapped_span(const ExternalSpan& span, std::size_t bytes, const TensorSource& src,
                                 std::shared_ptr<const void>& owner) {
  auto& files = *src.mapped;
  auto it = files.find(span.path.string());
  if (it == files.end()) {
    try {
      it = files.emplace(span.path.string(), core::map_file(span.path.string(), true)).first;
    } catch (const Error&) {
      return nullptr;  // (read the usual way: its error names the tensor)
    }
  }
  if (span.offset + bytes > it->second.size) return nullptr;
  owner = it->second.owner;
  return it->second.data + span.offset;
}

/// Reads `bytes` bytes of external data into `out`, checking the path and every size.
void read_external(const onnx::TensorProto& t, const TensorSource& src, std::size_t bytes, std::string& out,
                   const std::string& node, const std::string& field) {
  const ExternalSpan span = external_span(t, src, bytes, node, field);
  out.resize(bytes);
  read_span(span, bytes, out.data(), src, node, field);
}

/// A tensor of a narrow type (float8, float4, int4, int2): elements of `bits`
/// bits, packed from each byte's low bits up, in raw data or int32_data (one
/// per float8 element, one per packed byte otherwise). Floats as float32, integers as int64.
Blob read_narrow(const onnx::TensorProto& t, const TensorSource& src, const std::string& node, const std::string& field,
                 const Shape& shape, int bits) {
  auto fail = [&](const std::string& msg) -> Error { return Error(msg, src.file, node, field); };
  const DType narrow = *narrow_dtype(t.data_type());
  const auto count = static_cast<std::size_t>(shape.numel());
  const std::size_t bytes = (count * static_cast<std::size_t>(bits) + 7) / 8;
  std::string held;
  const std::string* packed = &held;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    read_external(t, src, bytes, held, node, field);
  } else if (!t.raw_data().empty() || count == 0) {
    packed = &t.raw_data();
    if (packed->size() != bytes)
      throw fail(fmt::format("tensor '{}' {} holds {} bytes of data, expected {}", t.name(), shape.to_string(),
                             packed->size(), bytes));
  } else {
    if (static_cast<std::size_t>(t.int32_data_size()) != bytes)
      throw fail(fmt::format("tensor '{}' {} holds {} values, expected {}", t.name(), shape.to_string(),
                             t.int32_data_size(), bytes));
    held.resize(bytes);
    for (std::size_t i = 0; i < bytes; ++i) held[i] = static_cast<char>(t.int32_data(static_cast<int>(i)) & 0xff);
  }
  Blob out = uninitialized_blob(shape, is_integer(narrow) ? DType::int64 : DType::float32);
  const auto* p = reinterpret_cast<const unsigned char*>(packed->data());
  const std::size_t per_byte = static_cast<std::size_t>(8 / bits);
  const unsigned mask = (1u << bits) - 1;
  for (std::size_t i = 0; i < count; ++i) {
    const auto b = static_cast<uint8_t>((p[i / per_byte] >> (bits * static_cast<int>(i % per_byte))) & mask);
    const float v = narrow_value(narrow, b);
    if (out.dtype() == DType::int64) out.data_as<int64_t>()[i] = static_cast<int64_t>(v);
    else out.data_as<float>()[i] = v;
  }
  return out;
}

}  // namespace

std::optional<DType> narrow_dtype(int type) {
  switch (type) {
    case kFloat8E4M3FN: return DType::float8e4m3fn;
    case kFloat8E4M3FNUZ: return DType::float8e4m3fnuz;
    case kFloat8E5M2: return DType::float8e5m2;
    case kFloat8E5M2FNUZ: return DType::float8e5m2fnuz;
    case kFloat8E8M0: return DType::float8e8m0;
    case kFloat4E2M1: return DType::float4e2m1;
    case kInt4: return DType::int4;
    case kUInt4: return DType::uint4;
    case kInt2: return DType::int2;
    case kUInt2: return DType::uint2;
    default: return std::nullopt;
  }
}

std::string onnx_type_name(int type) {
  static const char* const narrow[] = {"FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",
                                       "INT4",         "FLOAT4E2M1",     "FLOAT8E8M0", "UINT2",          "INT2"};
  if (type >= kFloat8E4M3FN && type <= kInt2) return narrow[type - kFloat8E4M3FN];
  std::string name = onnx::TensorProto::DataType_IsValid(type)
                         ? onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(type))
                         : std::string();
  return name.empty() ? fmt::format("type {}", type) : name;
}

std::optional<DType> edge_dtype(int type) {
  using T = onnx::TensorProto;
  switch (type) {
    case T::FLOAT: return DType::float32;
    case T::FLOAT16: return DType::float16;
    case T::BFLOAT16: return DType::bfloat16;
    case T::DOUBLE: return DType::float64;
    case T::INT8: return DType::int8;
    case T::UINT8: return DType::uint8;
    case T::INT16: return DType::int16;
    case T::UINT16: return DType::uint16;
    case T::INT32: return DType::int32;
    case T::UINT32: return DType::uint32;
    case T::INT64: return DType::int64;
    case T::UINT64: return DType::uint64;
    case T::BOOL: return DType::boolean;
    default: return narrow_dtype(type);
  }
}

Blob read_tensor(const onnx::TensorProto& t, const TensorSource& src, const std::string& node,
                 const std::string& field, bool bytes) {
  auto fail = [&](const std::string& msg) -> Error { return Error(msg, src.file, node, field); };
  if (t.dims_size() > Shape::max_rank)
    throw fail(fmt::format("tensor '{}' has rank {}, at most {} is supported", t.name(), t.dims_size(), Shape::max_rank));
  Shape shape;
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) throw fail(fmt::format("tensor '{}' has a negative dim {}", t.name(), d));
    shape.push_back(d);
    if (d > 0 && n > kMaxElements / d) throw fail(fmt::format("tensor '{}' is too large", t.name()));
    n *= d;
  }
  const int type = t.data_type();
  if (const int bits = narrow_bits_per_element(type)) return read_narrow(t, src, node, field, shape, bits);
  const std::size_t esize = raw_size(type);
  if (esize == 0)
    throw fail(fmt::format("tensor '{}' has data type {}, which the importer does not read", t.name(),
                           onnx_type_name(type)));
  bytes = bytes && type == onnx::TensorProto::UINT8;
  const DType dtype = bytes ? DType::uint8 : is_floating(type) ? DType::float32 : DType::int64;
  const auto count = static_cast<std::size_t>(n);

  // Where the values are, and whether there are as many as the dims say:
  // checked before allocating, so absurd dims never allocate.
  using T = onnx::TensorProto;
  const bool as_stored = type == T::FLOAT || bytes;  // its bytes are the blob's
  std::string external;
  const char* raw = nullptr;
  if (t.data_location() == T::EXTERNAL) {
    const ExternalSpan span = external_span(t, src, count * esize, node, field);
    std::shared_ptr<const void> owner;
    const unsigned char* mapped = src.mapped && count ? mapped_span(span, count * esize, src, owner) : nullptr;
    if (mapped && as_stored && reinterpret_cast<std::uintptr_t>(mapped) % esize == 0)
      return Blob::view(std::move(owner), mapped, shape, dtype);
    if (mapped) {
      raw = reinterpret_cast<const char*>(mapped);
    } else if (as_stored) {  // read straight into the blob
      Blob out = uninitialized_blob(shape, dtype);
      if (count) read_span(span, count * esize, static_cast<char*>(out.data()), src, node, field);
      return out;
    } else {
      external.resize(count * esize);
      read_span(span, count * esize, external.data(), src, node, field);
      raw = external.data();
    }
  } else if (!t.raw_data().empty() || count == 0) {
    raw = t.raw_data().data();
    if (t.raw_data().size() != count * esize)
      throw fail(fmt::format("tensor '{}' {} holds {} bytes of data, expected {}", t.name(), shape.to_string(),
                             t.raw_data().size(), count * esize));
  } else {
    const int have = type == T::FLOAT ? t.float_data_size()
                     : type == T::DOUBLE ? t.double_data_size()
                     : type == T::INT64 ? t.int64_data_size()
                     : type == T::UINT32 || type == T::UINT64 ? t.uint64_data_size()
                     : t.int32_data_size();  // the small integer types, bool and the 16-bit floats
    if (static_cast<std::size_t>(have) != count)
      throw fail(fmt::format("tensor '{}' {} holds {} values, expected {}", t.name(), shape.to_string(), have, count));
  }

  Blob out = uninitialized_blob(shape, dtype);  // every element is written below
  // float64 values held in float32: a finite one beyond float32's range is an
  // error, not an infinity the model never had.
  auto narrowed = [&](double v, std::size_t i) {
    const auto f = static_cast<float>(v);
    if (std::isinf(f) && std::isfinite(v))
      throw fail(fmt::format("tensor '{}' holds the float64 value {} (element {}), beyond float32's range", t.name(), v, i));
    return f;
  };
  if (raw && type == T::DOUBLE) {
    const auto* p = reinterpret_cast<const unsigned char*>(raw);
    for (std::size_t i = 0; i < count; ++i) out.data_as<float>()[i] = narrowed(raw_value<double>(p + i * esize, type), i);
    return out;
  }
  if (bytes) {
    if (raw && count) std::memcpy(out.data(), raw, count);
    if (!raw)
      for (std::size_t i = 0; i < count; ++i) out.data_as<uint8_t>()[i] = static_cast<uint8_t>(t.int32_data(static_cast<int>(i)));
    return out;
  }
  if (raw) {
    const auto* p = reinterpret_cast<const unsigned char*>(raw);
    if (type == T::FLOAT) {
      if (count) std::memcpy(out.data(), p, count * 4);  // the common case, in one copy
    } else if (dtype == DType::float32) {
      for (std::size_t i = 0; i < count; ++i) out.data_as<float>()[i] = raw_value<float>(p + i * esize, type);
    } else {
      for (std::size_t i = 0; i < count; ++i) out.data_as<int64_t>()[i] = raw_value<int64_t>(p + i * esize, type);
    }
    return out;
  }
  switch (type) {
    case T::FLOAT:
      std::copy(t.float_data().begin(), t.float_data().end(), out.data_as<float>());
      break;
    case T::DOUBLE:
      for (std::size_t i = 0; i < count; ++i) out.data_as<float>()[i] = narrowed(t.double_data(static_cast<int>(i)), i);
      break;
    case T::FLOAT16: case T::BFLOAT16:
      for (std::size_t i = 0; i < count; ++i) {
        auto bits = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
        out.data_as<float>()[i] = type == T::FLOAT16 ? core::half_to_float(bits) : bfloat_to_float(bits);
      }
      break;
    case T::INT64:
      std::copy(t.int64_data().begin(), t.int64_data().end(), out.data_as<int64_t>());
      break;
    case T::UINT32: case T::UINT64:
      for (std::size_t i = 0; i < count; ++i) out.data_as<int64_t>()[i] = static_cast<int64_t>(t.uint64_data(static_cast<int>(i)));
      break;
    default:  // the small integer types and bool, one per int32
      std::copy(t.int32_data().begin(), t.int32_data().end(), out.data_as<int64_t>());
      break;
  }
  return out;
}

}  // namespace softneuro::onnx_import
