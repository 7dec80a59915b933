// TensorFlow Lite's integer requantisation (gemmlowp's fixed-point arithmetic):
// a real multiplier held as a Q31 significand and a power-of-two exponent, and
// applied with the interpreter's two roundings. Layers whose file defines their
// int8 result so (core::requantizes_as_tflite) compute it with these, bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace softneuro::core {

struct FixedPointMultiplier {
  int32_t significand = 0;  ///< Q31 in [2^30, 2^31); 0 for the multiplier 0
  int exponent = 0;         ///< the multiplier is significand * 2^(exponent - 31)
};

/// TFLite's QuantizeMultiplier: frexp, the significand rounded half away from
/// zero; a multiplier below 2^-32 is 0. Exponents above 31 are the caller's to
/// refuse (`fixed_point_in_range`).
inline FixedPointMultiplier fixed_point_multiplier(double m) {
  FixedPointMultiplier f;
  if (m == 0 || !std::isfinite(m)) return f;
  const double q = std::frexp(m, &f.exponent);
  auto fixed = static_cast<int64_t>(std::round(q * 2147483648.0));
  if (fixed == (int64_t{1} << 31)) fixed /= 2, ++f.exponent;
  if (f.exponent < -31) fixed = 0, f.exponent = 0;
  f.significand = static_cast<int32_t>(fixed);
  return f;
}

/// Whether `m` is a positive multiplier the fixed-point form holds (exponent <= 31).
inline bool fixed_point_in_range(double m) {
  int e = 0;
  return m > 0 && std::isfinite(m) && (std::frexp(m, &e), e <= 31);
}

/// The integer (less the zero point) of a real value that lies on the grid of
/// `scale`: within a rounding error of an integer, so rounding half away from
/// zero recovers it (inline: std::nearbyint is a libm call that keeps the FP
/// environment, 20x slower in an elementwise loop).
/// A float within a rounding error of an integer, as that integer.
inline int32_t nearest_integer(float v) { return static_cast<int32_t>(v + (v < 0 ? -0.5f : 0.5f)); }
inline int32_t grid_levels(float x, float scale) { return nearest_integer(x / scale); }

/// TFLite's MultiplyByQuantizedMultiplier: x shifted left by a positive
/// exponent (wrapping as the interpreter's int32 does), then
/// SaturatingRoundingDoublingHighMul and RoundingDivideByPOT.
inline int32_t multiply(int32_t x, FixedPointMultiplier m) {
  const int left = m.exponent > 0 ? m.exponent : 0, right = m.exponent > 0 ? 0 : -m.exponent;
  const auto a = static_cast<int32_t>(static_cast<uint32_t>(x) << (left & 31));
  int32_t high;
  if (a == std::numeric_limits<int32_t>::min() && m.significand == std::numeric_limits<int32_t>::min()) {
    high = std::numeric_limits<int32_t>::max();
  } else {
    const int64_t ab = int64_t{a} * m.significand;
    const int64_t nudge = ab >= 0 ? (int64_t{1} << 30) : 1 - (int64_t{1} << 30);
    high = static_cast<int32_t>((ab + nudge) / (int64_t{1} << 31));  // truncates toward zero, as C++ does
  }
  const auto mask = static_cast<int32_t>((int64_t{1} << right) - 1);
  const int32_t remainder = high & mask, threshold = (mask >> 1) + (high < 0 ? 1 : 0);
  return (high >> right) + (remainder > threshold ? 1 : 0);
}

}  // namespace softneuro::core
