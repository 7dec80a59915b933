// Cache eviction for the benchmarks' --cold runs (conv_bench, ops_bench).
#pragma once

#include <softneuro/session.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>

namespace softneuro::bench {

/// Evicts the caches by reading a buffer larger than the last-level cache,
/// then reads `x` back in. In a net a layer's input was just written by the
/// layer before it, but its weights were last read a whole inference ago:
/// they come from DRAM (ResNet50: 100 MB of them), and its output lands in
/// memory no cache holds.
inline void evict_caches(const Blob& x) {
  static const std::size_t floats = (std::size_t(512) << 20) / sizeof(float);
  static std::unique_ptr<float[]> big = [] {
    std::unique_ptr<float[]> b(new float[floats]);
    std::fill(b.get(), b.get() + floats, 1.0f);
    return b;
  }();
  float sum = 0;
  for (std::size_t i = 0; i < floats; i += 16) sum += big[i];
  const float* xp = static_cast<const float*>(x.data());
  for (std::size_t i = 0, n = x.byte_size() / sizeof(float); i < n; i += 16) sum += xp[i];
  static volatile float sink;
  sink = sum;
}

}  // namespace softneuro::bench
