// Device-side helpers shared by our .cu files: element loads and stores in
// float32 arithmetic, launch geometry, activations, block reductions.
#pragma once

#include "routines/cuda/kernels.hpp"

#include <cuda_fp16.h>

#include <cstdint>

namespace softneuro::cuda::kern {

__device__ __forceinline__ float ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void st(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n elements.
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > (1 << 20)) b = 1 << 20;
  return static_cast<unsigned>(b);
}

#define SOFTNEURO_GRID_LOOP(i, n)                                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

/// x clamped to [lo, hi], NaN kept (fminf/fmaxf would return the bound for it,
/// and a NaN input must give NaN as cpu/ref does: LayerInfo::keep_nan).
__device__ __forceinline__ float clamp_keep_nan(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

__device__ __forceinline__ float activation_only(const ActParams& a, float x) {
  switch (a.kind) {
    case Act::none: return x;
    case Act::relu: return x < 0.f ? 0.f : x;
    case Act::clip: return clamp_keep_nan(x, a.a, a.b);
    case Act::hardswish: return x * clamp_keep_nan(x + 3.f, 0.f, 6.f) / 6.f;
    case Act::hardsigmoid: return clamp_keep_nan(a.a * x + a.b, 0.f, 1.f);
    case Act::sigmoid: return 1.f / (1.f + expf(-x));
    case Act::silu: return x / (1.f + expf(-x));
    case Act::tanh: return tanhf(x);
    case Act::gelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case Act::gelu_tanh: return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  }
  return x;
}
/// The activation, then the affine after it where there is one.
__device__ __forceinline__ float activate(const ActParams& a, float x) {
  const float y = activation_only(a, x);
  return a.affine ? y * a.scale + a.shift : y;
}

/// Sum (or max) over a block of blockDim.x threads (a multiple of 32, at most 1024).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <bool Max>
__device__ float block_reduce(float v) {
  __shared__ float part[32];
  __shared__ float result;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = Max ? warp_max(v) : warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    float w = lane < warps ? part[lane] : (Max ? -INFINITY : 0.f);
    w = Max ? warp_max(w) : warp_sum(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

}  // namespace softneuro::cuda::kern
