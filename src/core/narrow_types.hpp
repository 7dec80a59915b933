// The narrow number types (DType::float8e4m3fn ... uint2, ONNX's FLOAT8*,
// FLOAT4E2M1, INT4/UINT4, INT2/UINT2): one element per byte, its bits in the
// byte's low bits, as ml_dtypes holds them. Inside a net their values are
// float32 (every one is exact there); these convert between the two, as ONNX's
// Cast and its reference implementation do.
#pragma once

#include <softneuro/blob.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

namespace softneuro::core {

/// Whether `count` values of a floating-point `type` at `data` hold NaN or inf
/// (one pass, vectorised: the exponent bits all set); false for other types.
inline bool holds_non_finite(const void* data, std::size_t count, DType type) {
  auto any = [count](const auto* bits, auto exponent) {
    // An OR of the element type: GCC vectorises it (pcmpeq, por); a bool OR it left
    // scalar, 7% of a small int8 net's run on its float input.
    decltype(exponent) found = 0;
    for (std::size_t i = 0; i < count; ++i) found |= static_cast<decltype(exponent)>((bits[i] & exponent) == exponent);
    return found != 0;
  };
  switch (type) {
    case DType::float32: return any(static_cast<const uint32_t*>(data), uint32_t{0x7f800000});
    case DType::float64: return any(static_cast<const uint64_t*>(data), uint64_t{0x7ff0000000000000});
    case DType::float16: return any(static_cast<const uint16_t*>(data), uint16_t{0x7c00});
    case DType::bfloat16: return any(static_cast<const uint16_t*>(data), uint16_t{0x7f80});
    default: return false;
  }
}

/// How a value between two powers of two becomes a float8e8m0 (a power of two):
/// ONNX Cast's round_mode.
enum class ScaleRounding : uint8_t { up, down, nearest };
/// "up", "down", "nearest"; throws softneuro::Error on anything else.
ScaleRounding parse_scale_rounding(std::string_view);

// narrow_value(type, bits) is softneuro's (blob.hpp): bits above the type's width are ignored.

/// The bits of x in a narrow type, as ONNX's Cast makes them (softneuro::narrow_bits: saturate, rounding up):
///  - float8, float4e2m1: round to nearest even; beyond the largest finite
///    value (and infinities) the largest one when `saturate`, else infinity or
///    NaN as the type has them (float4e2m1 has neither and always saturates);
///    the fnuz kinds have no -0;
///  - float8e8m0: the power of two by `rounding` (sign dropped, 0 the smallest, 2^-127);
///  - int4 ... uint2: toward zero, then wrapped to the type's width (NaN and infinities 0).
uint8_t cast_bits(DType type, float x, bool saturate, ScaleRounding rounding);

/// x as the narrow type holds it: narrow_value(cast_bits(...)).
inline float narrowed(DType type, float x, bool saturate, ScaleRounding rounding) {
  return narrow_value(type, cast_bits(type, x, saturate, rounding));
}

/// An IEEE binary16 value (its bits) as a float32, exactly (subnormals, infinities, NaN).
float half_to_float(uint16_t bits);

/// The integers int4, uint4, int2 or uint2 holds: {lowest, highest}.
std::pair<int64_t, int64_t> narrow_integer_range(DType type);

/// Whether the narrow type holds x exactly (NaN where it has a NaN), and then its bits.
bool exact_narrow_bits(DType type, float x, uint8_t& bits);

}  // namespace softneuro::core
