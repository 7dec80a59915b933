// softneuro/blob.hpp — n-dimensional tensors: shape, dtype, layout, device.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace softneuro {

/// Element type of a blob. qint8/quint8 carry scale and zero point (QuantParams).
/// float64 and the plain integer types (int8 ... uint64, boolean: one byte,
/// 0 or 1) are those of a model's typed inputs and outputs (token ids, masks,
/// indices): routines compute in float32, float16, bfloat16 or the quantised
/// types, and a session converts a typed input or output at the net's edge,
/// refusing a value that does not convert exactly (docs/api.md).
/// The narrow types (ONNX's float8 kinds, float8e8m0, float4e2m1, int4, uint4,
/// int2, uint2) are edge types too, one element per byte as ml_dtypes holds
/// them: the value's bits in the byte's low bits (int4 -1 is 0x0f).
enum class DType : uint8_t {
  float32 = 0, float16, bfloat16, qint8, quint8, int32, int64,
  float64, int8, uint8, int16, uint16, uint32, uint64, boolean,
  float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz, float8e8m0, float4e2m1, int4, uint4, int2, uint2,
  /// The codes of a blockwise-quantised weight [N, K] (QuantParams::block_size),
  /// 0 to 15, two a byte: 4-bit LLM weights in their files' bytes (a byte a code
  /// doubles what a decode step reads). K is a multiple of 32; each row's
  /// codes in groups of 32, byte j of a group's 16 holding code j in its low
  /// bits and code j + 16 in its high bits (both halves unpack with a mask and
  /// a shift, in order). Not an edge type.
  quint4
};
/// The last DType (file readers check codes against it).
inline constexpr DType kLastDType = DType::quint4;
/// Whether this is one of the narrow types (float8*, float4e2m1, int4, uint4, int2, uint2).
constexpr bool is_narrow(DType d) noexcept { return d >= DType::float8e4m3fn && d <= DType::uint2; }
/// Whether values of this type are integers (the plain integer types, int4 ... uint2 and boolean).
constexpr bool is_integer(DType d) noexcept {
  return d == DType::int32 || d == DType::int64 || d == DType::int8 || d == DType::uint8 || d == DType::int16 ||
         d == DType::uint16 || d == DType::uint32 || d == DType::uint64 || d == DType::boolean ||
         (d >= DType::int4 && d <= DType::uint2);
}
/// Whether a net's input or output of this type is converted at its edge into
/// float32 (and back), by adapt cpu/io_cast: float64, the integer and the narrow types.
constexpr bool is_edge_type(DType d) noexcept { return d == DType::float64 || is_integer(d) || is_narrow(d); }

/// Physical arrangement of a blob's elements. Shapes are always logical
/// (N, C, H, W, ... for images); the layout says how they lie in memory.
///  - nchw: row-major in logical order (also what non-image blobs use);
///  - nhwc: channels last;
///  - nchw8c / nchw16c: channel blocks of 8/16 innermost, C padded up (oneDNN's nChw8c).
enum class Layout : uint8_t { nchw = 0, nhwc, nchw8c, nchw16c };
/// Channels per block of a blocked layout (8, 16); 0 for nchw and nhwc.
constexpr int64_t channel_block(Layout l) noexcept {
  return l == Layout::nchw8c ? 8 : l == Layout::nchw16c ? 16 : 0;
}

enum class Device : uint8_t { cpu = 0, cuda };

std::string_view to_string(DType);
std::string_view to_string(Layout);
std::string_view to_string(Device);
/// Parses "float32", "qint8", ... ; throws softneuro::Error on an unknown name.
DType parse_dtype(std::string_view);
Layout parse_layout(std::string_view);
Device parse_device(std::string_view);
/// Bytes per element (1 for the quantised and the narrow types; quint4 packs two
/// a byte: storage_bytes counts its bytes).
std::size_t dtype_size(DType);
/// A narrow type's element (its byte) as float32, which holds every such value exactly.
float narrow_value(DType type, uint8_t bits);
/// x as a narrow type's byte, as ONNX's Cast makes it (saturating): nearest
/// even for the floats, toward zero and wrapped for int4 ... uint2, float8e8m0
/// rounded up to a power of two. Throws softneuro::Error for other types.
uint8_t narrow_bits(DType type, float x);

/// A logical shape of at most Shape::max_rank dimensions, stored inline so that
/// copying one never allocates.
class Shape {
 public:
  static constexpr int max_rank = 8;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const noexcept { return rank_; }
  std::size_t size() const noexcept { return static_cast<std::size_t>(rank_); }
  int64_t operator[](int i) const noexcept { return dims_[static_cast<std::size_t>(i)]; }
  int64_t& operator[](int i) noexcept { return dims_[static_cast<std::size_t>(i)]; }
  const int64_t* begin() const noexcept { return dims_.data(); }
  const int64_t* end() const noexcept { return dims_.data() + rank_; }
  /// Number of elements (1 for a scalar of rank 0).
  /// The product of the dims; INT64_MAX where it overflows (never wraps).
  int64_t numel() const noexcept;
  void push_back(int64_t d);
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }
  /// "[1,3,224,224]"
  std::string to_string() const;
  bool operator==(const Shape& o) const noexcept;
  bool operator!=(const Shape& o) const noexcept { return !(*this == o); }

 private:
  std::array<int64_t, max_rank> dims_{};
  int rank_ = 0;
};

/// Scale and zero point of a quantised blob: one value per tensor, one per
/// channel along `axis` (per-channel weights), or, with `block_size`, one per
/// block of that many values along `axis` (ONNX's blocked quantisation, 4-bit
/// LLM weights): the scales then have the blob's shape with dim `axis`
/// ceil(dim / block_size), row-major.
struct QuantParams {
  std::vector<float> scales;
  std::vector<int32_t> zero_points;
  int axis = -1;           ///< -1: per tensor
  int64_t block_size = 0;  ///< 0: per tensor or per channel
  bool empty() const noexcept { return scales.empty(); }
  bool operator==(const QuantParams&) const = default;
};

/// A tensor: a shape, a dtype, a layout, a device, and memory that it either
/// owns (Blob::allocate) or merely views (Blob::view, zero-copy over caller
/// memory that must outlive every use of the blob). Copies share memory.
class Blob {
 public:
  Blob() = default;

  /// Allocates zero-filled, 64-byte aligned CPU memory for the shape.
  static Blob allocate(const Shape& shape, DType dtype = DType::float32,
                       Layout layout = Layout::nchw);
  /// Views memory owned by the caller; nothing is copied.
  static Blob view(void* data, const Shape& shape, DType dtype = DType::float32,
                   Layout layout = Layout::nchw, Device device = Device::cpu);
  /// Views memory kept alive by `owner` (e.g. a memory-mapped file).
  static Blob view(std::shared_ptr<const void> owner, const void* data, const Shape& shape,
                   DType dtype, Layout layout = Layout::nchw, Device device = Device::cpu);

  /// True for a default-constructed blob (no memory).
  bool empty() const noexcept { return data_ == nullptr; }
  const Shape& shape() const noexcept { return shape_; }
  DType dtype() const noexcept { return dtype_; }
  Layout layout() const noexcept { return layout_; }
  Device device() const noexcept { return device_; }
  int64_t numel() const noexcept { return shape_.numel(); }
  /// Bytes the elements take in memory in this blob's layout (blocked layouts pad C).
  std::size_t byte_size() const noexcept;

  void* data() noexcept { return data_; }
  const void* data() const noexcept { return data_; }
  template <class T> T* data_as() noexcept { return static_cast<T*>(data_); }
  template <class T> const T* data_as() const noexcept { return static_cast<const T*>(data_); }

  /// The quantisation, shared by copies of this blob until one changes it:
  /// the mutable form gives this blob its own first (an LLM's blockwise
  /// scales are hundreds of MB, and graphs are copied per plan).
  QuantParams& quant();
  const QuantParams& quant() const noexcept { return quant_ ? *quant_ : kNoQuant; }

  /// Points this blob at other memory, keeping shape/dtype/layout (no allocation).
  void rebind(void* data) noexcept { data_ = data; }
  /// Changes the shape without touching memory (caller guarantees it fits).
  void reshape(const Shape& s) noexcept { shape_ = s; }
  /// A deep copy into freshly allocated memory.
  Blob clone() const;

 private:
  std::shared_ptr<const void> owner_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::float32;
  Layout layout_ = Layout::nchw;
  Device device_ = Device::cpu;
  std::shared_ptr<QuantParams> quant_;  ///< null: none
  static const QuantParams kNoQuant;  // (defined once in blob.cpp: per-ISA files define no inline symbols)
};

/// Bytes needed for `shape` of `dtype` in `layout`; the largest size_t where
/// that overflows (never a wrapped, small value).
std::size_t storage_bytes(const Shape& shape, DType dtype, Layout layout) noexcept;

/// A blob with the name of the net input or output it binds to.
struct NamedBlob {
  std::string name;
  Blob blob;
};

}  // namespace softneuro
