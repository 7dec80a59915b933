// Winograd F(m,3) kernels behind cpu/winograd's children (src/routines/cpu/winograd.cpp):
// the transform matrices, and per-ISA kernels (winograd_kernels_avx2.cpp,
// winograd_kernels_avx512.cpp: the same code, winograd_kernels.inl, compiled
// with each ISA's flags; callers check core::cpu_features() first).
//
// Layouts (the wg* layer types, src/routines/cpu/winograd.cpp): V [P][C][Tp], M [P][K][Tp], P = (m+2)^2,
// tiles t = (n*TY + ty)*TX + tx, Tp a multiple of 16. Kernels vectorise over
// tiles (contiguous in V and M), so encode/decode need no transposes and the
// GEMM's columns are tiles.
#pragma once

#include "core/layer_types.hpp"
#include "routines/cpu/f32_common.hpp"

#include <softneuro/routine.hpp>

#include <array>
#include <cstdint>

namespace softneuro::wg {

/// Tiling of a Winograd F(m,3) convolution with output N x OH x OW (wgenc/wgconv/wgdec).
struct WinogradTiles {
  int64_t m, p;          ///< output tile size, transformed positions (m+2)^2
  int64_t n, oh, ow;     ///< batch and output size
  int64_t ty, tx;        ///< tiles per column and row
  int64_t t, tp;         ///< tiles in all, padded to a multiple of 16
};
inline WinogradTiles winograd_tiles(int64_t m, int64_t n, int64_t oh, int64_t ow) {
  WinogradTiles t{m, (m + 2) * (m + 2), n, oh, ow, (oh + m - 1) / m, (ow + m - 1) / m, 0, 0};
  t.t = n * t.ty * t.tx;
  t.tp = (t.t + 15) / 16 * 16;
  return t;
}

// ---------------------------------------------------------------------------
// Transform matrices, built at compile time by Toom-Cook: points 0, ±1, ±2, ±1/2
// (as many as needed) and infinity. With V the (m+2)x(m+2) evaluation matrix of
// polynomials of degree m+1 (rows [1, a, a^2, ...], infinity [0, ..., 0, 1]),
// linear convolution is c = V^-1 (E_m a . E_3 g); correlation is its transpose:
// y = A^T [(G g) . (B^T d)] with A^T = E_m^T, G = E_3, B^T = V^-T.

template <int M>
struct Matrices {
  static constexpr int A = M + 2;
  std::array<std::array<double, A>, A> bt{};  ///< B^T: [A][A]
  std::array<std::array<double, 3>, A> g{};   ///< G:   [A][3]
  std::array<std::array<double, A>, M> at{};  ///< A^T: [M][A]
};

template <int M>
constexpr Matrices<M> make_matrices() {
  constexpr int A = M + 2;
  const double pts[] = {0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5};
  Matrices<M> r;
  double v[A][A] = {}, inv[A][A] = {};
  for (int j = 0; j < A; ++j) {
    double p = 1;
    for (int k = 0; k < A; ++k) {
      v[j][k] = j == A - 1 ? (k == A - 1 ? 1.0 : 0.0) : p;
      if (j < A - 1) p *= pts[j];
    }
    inv[j][j] = 1;
  }
  // Gauss-Jordan with partial pivoting: inv = V^-1.
  for (int col = 0; col < A; ++col) {
    int piv = col;
    for (int i = col + 1; i < A; ++i)
      if ((v[i][col] < 0 ? -v[i][col] : v[i][col]) > (v[piv][col] < 0 ? -v[piv][col] : v[piv][col])) piv = i;
    for (int k = 0; k < A; ++k) {
      double t = v[col][k]; v[col][k] = v[piv][k]; v[piv][k] = t;
      t = inv[col][k]; inv[col][k] = inv[piv][k]; inv[piv][k] = t;
    }
    const double d = v[col][col];
    for (int k = 0; k < A; ++k) v[col][k] /= d, inv[col][k] /= d;
    for (int i = 0; i < A; ++i) {
      if (i == col) continue;
      const double f = v[i][col];
      for (int k = 0; k < A; ++k) v[i][k] -= f * v[col][k], inv[i][k] -= f * inv[col][k];
    }
  }
  for (int i = 0; i < A; ++i)
    for (int j = 0; j < A; ++j) r.bt[i][j] = inv[j][i];
  for (int j = 0; j < A; ++j) {
    double p = 1;
    for (int k = 0; k < 3; ++k) {
      r.g[j][k] = j == A - 1 ? (k == 2 ? 1.0 : 0.0) : p;
      if (j < A - 1) p *= pts[j];
    }
    double q = 1;
    for (int i = 0; i < M; ++i) {
      r.at[i][j] = j == A - 1 ? (i == M - 1 ? 1.0 : 0.0) : q;
      if (j < A - 1) q *= pts[j];
    }
  }
  return r;
}

// ---------------------------------------------------------------------------
// Kernels

/// Geometry shared by the three children.
struct Geometry {
  WinogradTiles t;
  int64_t c = 0, h = 0, w = 0;  ///< encode: input channels and size
  int64_t pt = 0, pl = 0;       ///< encode: top and left pads
  int64_t k = 0;                ///< output channels (wgconv, wgdec)
};

/// Decode epilogue: bias (nullptr: none) and the fused activation.
struct Epilogue {
  const float* bias = nullptr;
  core::Activation act;
};

/// Output channels per panel of PackedU (WG_ROWS of every ISA's kernels).
inline constexpr int kPackedRows = 6;

/// U [P][C][K] packed for the GEMM kernel of an ISA: per position, panels of
/// `rows` output channels, [K/rows][C][rows], zero-padded.
struct PackedU {
  int rows = 0;
  int64_t panels = 0;
  cpu::AlignedFloats data;  ///< [P][panels][C][rows], 64-byte aligned
};

namespace avx2 {
void encode(int m, const Geometry& g, const float* x, float* v, ThreadPool& pool);
void decode(int m, const Geometry& g, const Epilogue& e, const float* mm, float* y, ThreadPool& pool);
PackedU pack(const float* u, int64_t p, int64_t c, int64_t k);
void gemm(const PackedU& u, int64_t p, int64_t c, int64_t k, int64_t tp, const float* v, float* mm, ThreadPool& pool);
}  // namespace avx2
namespace avx512 {
void encode(int m, const Geometry& g, const float* x, float* v, ThreadPool& pool);
void decode(int m, const Geometry& g, const Epilogue& e, const float* mm, float* y, ThreadPool& pool);
PackedU pack(const float* u, int64_t p, int64_t c, int64_t k);
void gemm(const PackedU& u, int64_t p, int64_t c, int64_t k, int64_t tp, const float* v, float* mm, ThreadPool& pool);
}  // namespace avx512

}  // namespace softneuro::wg
