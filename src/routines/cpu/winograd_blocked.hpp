// Winograd F(m,3) in the blocked layouts (cpu:float32:nchw16c/winograd with AVX-512,
// cpu:float32:nchw8c/winograd with AVX2): the children wgencb -> wgconvb -> wgdecb
// of src/routines/cpu/winograd.cpp. Every value is a vector of V channels, so
// the transforms are plain vector arithmetic (no gathers) and nothing around
// the layer changes layout. Blobs, in the blocked layout of V channels:
//   x [N, C, H, W]   V [P, C, T, 1]   M [P, K, T, 1]   y [N, K, OH, OW]
// (P = (m+2)^2 positions, T tiles t = (n*TY + ty)*TX + tx, unpadded), i.e. V is
// [P][C/V][T][V] in memory and each GEMM M[p] = V[p] U[p] has tiles as rows.
// Kernels in winograd_blocked_kernels.inl, built per ISA (winograd_blocked_avx2.cpp,
// winograd_blocked_avx512.cpp); callers check the CPU through kernels_*().
#pragma once

#include "routines/cpu/f32_common.hpp"
#include "routines/cpu/gemm.hpp"
#include "routines/cpu/winograd_kernels.hpp"

#include <cstdint>

namespace softneuro::wg::blocked {

/// U [P][C][K] packed for the GEMM of one ISA: per position, groups of `nk`
/// output-channel vectors (the last group may have fewer), each [C padded to
/// V][vectors][V] (the vectors one input channel multiplies are adjacent),
/// zero-padded. 64-byte aligned: a vector of U never splits a cache line.
struct PackedU {
  int64_t kb = 0, cpad = 0;
  int nk = 1;
  cpu::AlignedFloats data;
};

struct Kernels {
  int vec = 0;  ///< channels per vector, the layout's block
  /// channels_last: x is NHWC instead of blocked; V is the same.
  void (*encode)(int m, const Geometry& g, const float* x, float* v, ThreadPool& pool, bool channels_last) = nullptr;
  /// t: the tiles (GEMM rows) the packing is for (the group size may depend on it).
  PackedU (*pack)(const float* u, int64_t p, int64_t c, int64_t k, int64_t t) = nullptr;
  /// The output-channel vectors pack() groups for t tiles: packings for two t with one group are the same.
  int (*group)(int64_t t) = nullptr;
  void (*gemm)(const PackedU& u, int64_t p, int64_t c, int64_t t, const float* v, float* mm, ThreadPool& pool) = nullptr;
  /// bias: K padded to whole vectors (zeros past K), or null. channels_last:
  /// y is NHWC instead of blocked.
  void (*decode)(int m, const Geometry& g, const cpu::gemm::Epilogue& e, const float* bias, const float* mm, float* y,
                 ThreadPool& pool, bool channels_last) = nullptr;
};

/// The AVX-512 (V = 16) and AVX2 (V = 8) kernels; nullptr when the CPU lacks the ISA.
const Kernels* kernels_avx512();
const Kernels* kernels_avx2();
/// The same, defined in the per-ISA files: call only once the CPU is known to
/// have the ISA (the compiler may use its instructions anywhere in those files).
const Kernels* unchecked_kernels_avx512();
const Kernels* unchecked_kernels_avx2();

}  // namespace softneuro::wg::blocked
