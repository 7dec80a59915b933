// The Winograd kernels, included once per ISA by winograd_kernels_<isa>.cpp with
//   WG_NS     the namespace (avx2, avx512)
//   WG_LANES  floats per vector (8, 16)
//   WG_ROWS   output channels per GEMM micro-kernel (broadcast operands)
//   WG_VECS   tile vectors per GEMM micro-kernel (loaded operands)
// and compiled with that ISA's flags (-ffp-contract=fast: a*b+c is one FMA).
// Encode and decode are plain loops over tiles that the compiler vectorises;
// the transform coefficients are compile-time constants, so zeros and ones
// cost nothing. The GEMM is a register-blocked micro-kernel written with GCC
// vector extensions: WG_ROWS x WG_VECS accumulators, broadcasts of U, loads of V.
#include "routines/cpu/winograd_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace softneuro::wg::WG_NS {
namespace {

constexpr int kTileBlock = 32;  // tiles of one row transformed together

template <int M>
inline constexpr Matrices<M> kMat = make_matrices<M>();

template <int M>
void encode_m(const Geometry& g, const float* x, float* v, ThreadPool& pool) {
  constexpr int A = M + 2;
  constexpr auto mat = kMat<M>;
  const auto& t = g.t;
  const int64_t pstride = g.c * t.tp;
  const int64_t rows = t.n * g.c * t.ty;
  pool.parallel_for(rows, 1, [&](int64_t b0, int64_t b1) {
    alignas(64) float d[A][A][kTileBlock];
    alignas(64) float s[A][A][kTileBlock];
    for (int64_t r = b0; r < b1; ++r) {
      const int64_t ty = r % t.ty, c = (r / t.ty) % g.c, n = r / (t.ty * g.c);
      const float* xc = x + (n * g.c + c) * g.h * g.w;
      const int64_t tbase = (n * t.ty + ty) * t.tx;
      for (int64_t tx0 = 0; tx0 < t.tx; tx0 += kTileBlock) {
        const int nb = static_cast<int>(std::min<int64_t>(kTileBlock, t.tx - tx0));
        for (int a = 0; a < A; ++a) {
          const int64_t row = ty * M + a - g.pt;
          if (row < 0 || row >= g.h) {
            for (int b = 0; b < A; ++b)
              for (int i = 0; i < nb; ++i) d[a][b][i] = 0.0f;
            continue;
          }
          const float* xr = xc + row * g.w;
          const int64_t col0 = tx0 * M - g.pl;
          if (col0 >= 0 && col0 + (nb - 1) * M + A <= g.w) {
            for (int i = 0; i < nb; ++i)
              for (int b = 0; b < A; ++b) d[a][b][i] = xr[col0 + i * M + b];
          } else {
            for (int i = 0; i < nb; ++i)
              for (int b = 0; b < A; ++b) {
                const int64_t col = col0 + i * M + b;
                d[a][b][i] = col >= 0 && col < g.w ? xr[col] : 0.0f;
              }
          }
        }
        // s = B^T d (over a), then V = s B (over b).
#pragma GCC unroll 8
        for (int i = 0; i < A; ++i)
#pragma GCC unroll 8
          for (int b = 0; b < A; ++b) {
            float* out = s[i][b];
            for (int q = 0; q < nb; ++q) {
              float acc = 0.0f;
#pragma GCC unroll 8
              for (int a = 0; a < A; ++a)
                if (mat.bt[i][a] != 0.0) acc += static_cast<float>(mat.bt[i][a]) * d[a][b][q];
              out[q] = acc;
            }
          }
#pragma GCC unroll 8
        for (int i = 0; i < A; ++i)
#pragma GCC unroll 8
          for (int j = 0; j < A; ++j) {
            float* out = v + (i * A + j) * pstride + c * t.tp + tbase + tx0;
            for (int q = 0; q < nb; ++q) {
              float acc = 0.0f;
#pragma GCC unroll 8
              for (int b = 0; b < A; ++b)
                if (mat.bt[j][b] != 0.0) acc += s[i][b][q] * static_cast<float>(mat.bt[j][b]);
              out[q] = acc;
            }
          }
      }
    }
  });
  // Padding tiles are zero, so the GEMM reads numbers there.
  if (t.tp > t.t)
    for (int64_t pc = 0; pc < t.p * g.c; ++pc) std::memset(v + pc * t.tp + t.t, 0, sizeof(float) * static_cast<std::size_t>(t.tp - t.t));
}

template <int M>
void decode_m(const Geometry& g, const Epilogue& e, const float* mm, float* y, ThreadPool& pool) {
  constexpr int A = M + 2;
  constexpr auto mat = kMat<M>;
  const auto& t = g.t;
  const int64_t pstride = g.k * t.tp;
  const int64_t rows = t.n * g.k * t.ty;
  const auto kind = e.act.kind;
  pool.parallel_for(rows, 1, [&](int64_t b0, int64_t b1) {
    alignas(64) float s[M][A][kTileBlock];
    alignas(64) float o[M][M][kTileBlock];
    for (int64_t r = b0; r < b1; ++r) {
      const int64_t ty = r % t.ty, k = (r / t.ty) % g.k, n = r / (t.ty * g.k);
      const float bias = e.bias ? e.bias[k] : 0.0f;
      float* yk = y + (n * g.k + k) * t.oh * t.ow;
      const int64_t tbase = (n * t.ty + ty) * t.tx;
      for (int64_t tx0 = 0; tx0 < t.tx; tx0 += kTileBlock) {
        const int nb = static_cast<int>(std::min<int64_t>(kTileBlock, t.tx - tx0));
        const float* src = mm + k * t.tp + tbase + tx0;
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
          for (int b = 0; b < A; ++b) {
            float* out = s[i][b];
            for (int q = 0; q < nb; ++q) {
              float acc = 0.0f;
#pragma GCC unroll 8
              for (int a = 0; a < A; ++a)
                if (mat.at[i][a] != 0.0) acc += static_cast<float>(mat.at[i][a]) * src[(a * A + b) * pstride + q];
              out[q] = acc;
            }
          }
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
          for (int j = 0; j < M; ++j) {
            float* out = o[i][j];
            for (int q = 0; q < nb; ++q) {
              float acc = bias;
#pragma GCC unroll 8
              for (int b = 0; b < A; ++b)
                if (mat.at[j][b] != 0.0) acc += s[i][b][q] * static_cast<float>(mat.at[j][b]);
              out[q] = acc;
            }
          }
        // Scatter into the output rows, clipped to OH x OW, with the activation.
        for (int i = 0; i < M; ++i) {
          const int64_t row = ty * M + i;
          if (row >= t.oh) break;
          float* yr = yk + row * t.ow + tx0 * M;
          const int64_t cols = std::min<int64_t>(static_cast<int64_t>(nb) * M, t.ow - tx0 * M);
          if (kind == core::Activation::none) {
            for (int64_t cidx = 0; cidx < cols; ++cidx) yr[cidx] = o[i][cidx % M][cidx / M];
          } else if (kind == core::Activation::relu) {
            for (int64_t cidx = 0; cidx < cols; ++cidx) yr[cidx] = std::max(0.0f, o[i][cidx % M][cidx / M]);
          } else {
            for (int64_t cidx = 0; cidx < cols; ++cidx) yr[cidx] = core::apply_activation(e.act, o[i][cidx % M][cidx / M]);
          }
        }
      }
    }
  });
}

// --- GEMM: M[p][k][t] = sum_c U[p][c][k] V[p][c][t] ---------------------------

typedef float vf __attribute__((vector_size(WG_LANES * 4)));
typedef float vfu __attribute__((vector_size(WG_LANES * 4), aligned(4)));

template <int R, int NV>
inline void micro(const float* __restrict u, const float* __restrict v, int64_t ldv, float* __restrict out, int64_t ldo,
                  int64_t c, int rows) {
  vf acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[r][j] = vf{};
  for (int64_t ci = 0; ci < c; ++ci) {
    vf b[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) b[j] = *reinterpret_cast<const vfu*>(v + ci * ldv + j * WG_LANES);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const vf a = vf{} + u[ci * R + r];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] += a * b[j];
    }
  }
  if (rows == R) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) *reinterpret_cast<vfu*>(out + r * ldo + j * WG_LANES) = acc[r][j];
  } else {
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < NV; ++j) *reinterpret_cast<vfu*>(out + r * ldo + j * WG_LANES) = acc[r][j];
  }
}

template <int NV>
void micro_n(const float* u, const float* v, int64_t ldv, float* out, int64_t ldo, int64_t c, int rows) {
  micro<WG_ROWS, NV>(u, v, ldv, out, ldo, c, rows);
}

}  // namespace

void encode(int m, const Geometry& g, const float* x, float* v, ThreadPool& pool) {
  switch (m) {
    case 2: return encode_m<2>(g, x, v, pool);
    case 4: return encode_m<4>(g, x, v, pool);
    default: return encode_m<6>(g, x, v, pool);
  }
}

void decode(int m, const Geometry& g, const Epilogue& e, const float* mm, float* y, ThreadPool& pool) {
  switch (m) {
    case 2: return decode_m<2>(g, e, mm, y, pool);
    case 4: return decode_m<4>(g, e, mm, y, pool);
    default: return decode_m<6>(g, e, mm, y, pool);
  }
}

PackedU pack(const float* u, int64_t p, int64_t c, int64_t k) {
  PackedU pk;
  pk.rows = WG_ROWS;
  pk.panels = (k + WG_ROWS - 1) / WG_ROWS;
  pk.data.assign(static_cast<std::size_t>(p * pk.panels * c * WG_ROWS), 0.0f);
  for (int64_t pi = 0; pi < p; ++pi)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t ki = 0; ki < k; ++ki)
        pk.data[static_cast<std::size_t>(((pi * pk.panels + ki / WG_ROWS) * c + ci) * WG_ROWS + ki % WG_ROWS)] =
            u[(pi * c + ci) * k + ki];
  return pk;
}

void gemm(const PackedU& u, int64_t p, int64_t c, int64_t k, int64_t tp, const float* v, float* mm, ThreadPool& pool) {
  constexpr int64_t kCols = WG_LANES * WG_VECS;
  // Tasks: (position, block of tile columns); the V block (C x cols) stays in L2
  // while every panel of U streams over it from L1.
  const int64_t block = std::max<int64_t>(kCols, std::min<int64_t>(tp, (int64_t{96} * 1024 / 4 / std::max<int64_t>(c, 1)) / kCols * kCols));
  const int64_t nblocks = (tp + block - 1) / block;
  pool.parallel_for(p * nblocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t task = b0; task < b1; ++task) {
      const int64_t pi = task / nblocks, t0 = (task % nblocks) * block, t1 = std::min(tp, t0 + block);
      const float* vp = v + pi * c * tp;
      float* mp = mm + pi * k * tp;
      for (int64_t panel = 0; panel < u.panels; ++panel) {
        const float* up = u.data.data() + (pi * u.panels + panel) * c * WG_ROWS;
        const int rows = static_cast<int>(std::min<int64_t>(WG_ROWS, k - panel * WG_ROWS));
        float* out = mp + panel * WG_ROWS * tp;
        int64_t t = t0;
        for (; t + kCols <= t1; t += kCols) micro_n<WG_VECS>(up, vp + t, tp, out + t, tp, c, rows);
        for (; t + WG_LANES <= t1; t += WG_LANES) micro<WG_ROWS, 1>(up, vp + t, tp, out + t, tp, c, rows);
      }
    }
  });
}

}  // namespace softneuro::wg::WG_NS
