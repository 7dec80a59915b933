// The arithmetic the dense routines that quantise each input row when they run
// define (cpu/dynamic_int8, tile_dense): each row on its own symmetric grid of
// max |x| / levels, the weights per channel on int8, the products summed exactly.
#pragma once

#include "core/weight_quant.hpp"

#include <softneuro/blob.hpp>

#include <algorithm>
#include <cmath>
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

}  // namespace softneuro::test
