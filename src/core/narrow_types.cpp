#include "core/narrow_types.hpp"

#include <softneuro/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>

namespace softneuro::core {
namespace {

/// A small binary float: sign, exp_bits, man_bits, and where its specials lie.
struct FloatFormat {
  int exp_bits, man_bits, bias;
  enum Specials : uint8_t {
    ieee,  // top exponent: infinities (mantissa 0) and NaNs (float8e5m2)
    fn,    // no infinities; all bits but the sign set is NaN (float8e4m3fn)
    fnuz,  // no infinities, no -0: the sign bit alone is NaN (the *fnuz kinds)
    none,  // neither infinities nor NaN (float4e2m1)
  } specials;

  uint8_t sign_bit() const { return static_cast<uint8_t>(1u << (exp_bits + man_bits)); }
  uint8_t all_ones() const { return static_cast<uint8_t>(sign_bit() - 1); }
  /// The largest finite value's bits.
  uint8_t max_code() const {
    if (specials == fn) return static_cast<uint8_t>(all_ones() - 1);
    if (specials == ieee) return static_cast<uint8_t>((((1u << exp_bits) - 2) << man_bits) | ((1u << man_bits) - 1));
    return all_ones();
  }
  uint8_t nan_code(bool negative) const {
    switch (specials) {
      case ieee: return static_cast<uint8_t>((negative ? sign_bit() : 0) | (((1u << exp_bits) - 1) << man_bits) | (1u << (man_bits - 1)));
      case fn: return static_cast<uint8_t>((negative ? sign_bit() : 0) | all_ones());
      case fnuz: return sign_bit();
      default: return sign_bit();  // no NaN: -0, as ml_dtypes converts one
    }
  }
  float value(uint8_t bits) const {
    const uint8_t mag = bits & all_ones();
    const bool negative = (bits & sign_bit()) != 0;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    if (specials == fnuz && negative && mag == 0) return nan;
    if (specials == fn && mag == all_ones()) return negative ? -nan : nan;
    const int exp = mag >> man_bits, man = mag & ((1 << man_bits) - 1);
    if (specials == ieee && exp == (1 << exp_bits) - 1)
      return man ? (negative ? -nan : nan) : negative ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    const float v = exp == 0 ? std::ldexp(static_cast<float>(man), 1 - bias - man_bits)
                             : std::ldexp(static_cast<float>((1 << man_bits) + man), exp - bias - man_bits);
    return negative ? -v : v;
  }
};

const FloatFormat* float_format(DType t) {
  static constexpr FloatFormat e4m3fn{4, 3, 7, FloatFormat::fn}, e4m3fnuz{4, 3, 8, FloatFormat::fnuz},
      e5m2{5, 2, 15, FloatFormat::ieee}, e5m2fnuz{5, 2, 16, FloatFormat::fnuz}, e2m1{2, 1, 1, FloatFormat::none};
  switch (t) {
    case DType::float8e4m3fn: return &e4m3fn;
    case DType::float8e4m3fnuz: return &e4m3fnuz;
    case DType::float8e5m2: return &e5m2;
    case DType::float8e5m2fnuz: return &e5m2fnuz;
    case DType::float4e2m1: return &e2m1;
    default: return nullptr;
  }
}

/// Width and signedness of the narrow integer types (0 for the others).
int int_width(DType t, bool& is_signed) {
  is_signed = t == DType::int4 || t == DType::int2;
  return t == DType::int4 || t == DType::uint4 ? 4 : t == DType::int2 || t == DType::uint2 ? 2 : 0;
}

uint8_t float_bits(const FloatFormat& f, float x, bool saturate) {
  const bool negative = std::signbit(x);
  if (std::isnan(x)) return f.nan_code(negative);
  const uint8_t sign = negative ? f.sign_bit() : 0;
  const uint8_t max = f.max_code();
  auto overflow = [&]() -> uint8_t {
    if (saturate || f.specials == FloatFormat::none) return sign | max;
    if (f.specials == FloatFormat::ieee) return sign | static_cast<uint8_t>(((1u << f.exp_bits) - 1) << f.man_bits);
    return f.nan_code(negative);
  };
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return overflow();
  // Positive values grow with their bits: the largest code at or below a, then the nearer of it and the next
  // (past the largest finite value, one step beyond it stands for overflow); a tie goes to the even code.
  int lo = 0, hi = max;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (f.value(static_cast<uint8_t>(mid)) <= a) lo = mid;
    else hi = mid - 1;
  }
  const double below = f.value(static_cast<uint8_t>(lo));
  int code = lo;
  if (below != a) {
    const double above = lo < max ? f.value(static_cast<uint8_t>(lo + 1))
                                  : 2.0 * below - f.value(static_cast<uint8_t>(lo - 1));
    const double d_lo = a - below, d_hi = above - a;
    if (d_hi < d_lo || (d_hi == d_lo && lo % 2 == 1)) code = lo + 1;
  }
  if (code > max) return overflow();
  if (code == 0 && f.specials == FloatFormat::fnuz) return 0;  // no -0
  return sign | static_cast<uint8_t>(code);
}

/// ONNX's to_float8e8m0 (onnx.numpy_helper): the float32 exponent, rounded up by the dropped mantissa as asked.
uint8_t scale_bits(float x, bool saturate, ScaleRounding rounding) {
  const uint32_t f = std::bit_cast<uint32_t>(x);
  uint32_t exponent = (f >> 23) & 0xffu;
  if (exponent == 0xffu) return 0xff;  // NaN, infinities
  bool round_up = false;
  if (rounding == ScaleRounding::nearest) {
    const bool g = f & 0x400000u, r = f & 0x200000u, s = (f & 0x1fffffu) != 0, lsb = exponent > 0;
    round_up = g && (r || s || lsb);
  } else if (rounding == ScaleRounding::up) {
    round_up = (f & 0x7fffffu) != 0;
  }
  if (saturate && exponent == 0xfeu) round_up = false;  // not past the largest power
  return static_cast<uint8_t>(exponent + (round_up ? 1 : 0));
}

float value_of(DType type, uint8_t bits) {
  if (const FloatFormat* f = float_format(type)) return f->value(static_cast<uint8_t>(bits & (f->sign_bit() | f->all_ones())));
  if (type == DType::float8e8m0) return bits == 0xff ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, bits - 127);
  bool is_signed;
  const int w = int_width(type, is_signed);
  if (w == 0) throw Error(fmt::format("{} is not a narrow type", to_string(type)));
  const int v = bits & ((1 << w) - 1);
  return static_cast<float>(is_signed && v >= (1 << (w - 1)) ? v - (1 << w) : v);
}

}  // namespace

ScaleRounding parse_scale_rounding(std::string_view s) {
  if (s == "up") return ScaleRounding::up;
  if (s == "down") return ScaleRounding::down;
  if (s == "nearest") return ScaleRounding::nearest;
  throw Error(fmt::format("round_mode '{}' is not up, down or nearest", s), {}, {}, "round_mode");
}

uint8_t cast_bits(DType type, float x, bool saturate, ScaleRounding rounding) {
  if (const FloatFormat* f = float_format(type)) return float_bits(*f, x, saturate);
  if (type == DType::float8e8m0) return scale_bits(x, saturate, rounding);
  bool is_signed;
  const int w = int_width(type, is_signed);
  if (w == 0) throw Error(fmt::format("{} is not a narrow type", to_string(type)));
  if (!std::isfinite(x)) return 0;
  double m = std::fmod(std::trunc(static_cast<double>(x)), static_cast<double>(1 << w));
  if (m < 0) m += 1 << w;
  return static_cast<uint8_t>(m);
}

std::pair<int64_t, int64_t> narrow_integer_range(DType type) {
  bool is_signed;
  const int w = int_width(type, is_signed);
  if (w == 0) throw Error(fmt::format("{} is not a narrow integer type", to_string(type)));
  return is_signed ? std::pair<int64_t, int64_t>{-(int64_t{1} << (w - 1)), (int64_t{1} << (w - 1)) - 1}
                   : std::pair<int64_t, int64_t>{0, (int64_t{1} << w) - 1};
}

bool exact_narrow_bits(DType type, float x, uint8_t& bits) {
  if (std::isnan(x)) {
    const FloatFormat* f = float_format(type);
    if (!(type == DType::float8e8m0 || (f && f->specials != FloatFormat::none))) return false;
    bits = cast_bits(type, x, true, ScaleRounding::up);
    return true;
  }
  bits = cast_bits(type, x, false, ScaleRounding::down);
  return narrow_value(type, bits) == x;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  uint32_t bits = exp == 31 ? sign | 0x7f800000u | (man << 13)  // inf / nan
                            : sign | ((exp + 112) << 23) | (man << 13);
  return std::bit_cast<float>(bits);
}

}  // namespace softneuro::core

namespace softneuro {

float narrow_value(DType type, uint8_t bits) { return core::value_of(type, bits); }
uint8_t narrow_bits(DType type, float x) { return core::cast_bits(type, x, true, core::ScaleRounding::up); }

}  // namespace softneuro
