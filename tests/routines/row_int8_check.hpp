// The arithmetic the dense routines that quantise each input row when they run
// define (cpu/dynamic_int8, tile_dense): each row on its own symmetric grid of
// max |x| / levels, the weights per channel on int8, the products summed exactly.
#pragma once

#include "core/weight_quant.hpp"

#include <softneuro/blob.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace softneuro::test {

/// y [m, n] of x [m, k] by w [n, k] (+ bias) in that arithmetic.
inline std::vector<double> row_int8_dense(const Blob& x, const Blob& w, const Blob* bias, int64_t m, int64_t k,
                                          int64_t n, float levels) {
  const core::ChannelQuantized q = core::channel_int8(w, 127);
  std::vector<double> y(static_cast<std::size_t>(m * n));
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x.data_as<float>() + r * k;
    float amax = 0;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(xr[i]));
    const float s = amax / levels, inv = amax > 0 ? levels / amax : 0.0f;
    for (int64_t o = 0; o < n; ++o) {
      int64_t acc = 0;
      for (int64_t i = 0; i < k; ++i)
        acc += static_cast<int64_t>(std::nearbyint(xr[i] * inv)) * q.q[static_cast<std::size_t>(o * k + i)];
      y[static_cast<std::size_t>(r * n + o)] =
          static_cast<double>(acc) * s * q.scale[static_cast<std::size_t>(o)] + (bias ? bias->data_as<float>()[o] : 0.0);
    }
  }
  return y;
}

/// Inputs for the rows those routines cannot quantise, beside rows they can:
/// x [6, k] with row 1 holding a NaN, row 3 a +inf and a -inf (at 1 and
/// k - 2), row 4 a +inf; w [n, k] away from 0 (|w| >= 0.05: no weight rounds
/// to 0 on int8, so its products with infinity keep float32's signs).
struct NonFiniteCase {
  Blob x, w;
};
inline NonFiniteCase non_finite_case(int64_t k, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> xd(-2.f, 3.f), wd(0.05f, 0.5f);
  std::bernoulli_distribution sign;
  NonFiniteCase c{Blob::allocate(Shape{6, k}, DType::float32), Blob::allocate(Shape{n, k}, DType::float32)};
  for (int64_t i = 0; i < 6 * k; ++i) c.x.data_as<float>()[i] = xd(rng);
  for (int64_t i = 0; i < n * k; ++i) c.w.data_as<float>()[i] = sign(rng) ? wd(rng) : -wd(rng);
  const float inf = std::numeric_limits<float>::infinity();
  float* x = c.x.data_as<float>();
  x[1 * k + 3] = std::numeric_limits<float>::quiet_NaN();
  x[3 * k + 1] = inf;
  x[3 * k + k - 2] = -inf;
  x[4 * k + k / 2] = inf;
  return c;
}
/// Where float32 (`ref`, cpu/ref on the case) is NaN or infinite, `got` is the
/// same (NaN, or infinity of that sign).
inline bool same_non_finite(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return false;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i]) != std::isnan(got[i])) return false;
    if (std::isinf(ref[i]) && got[i] != ref[i]) return false;
  }
  return true;
}

}  // namespace softneuro::test
