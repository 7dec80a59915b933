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

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

static_assert(WG_ROWS == softneuro::wg::kPackedRows, "PackedU's panel height is one for every ISA");

namespace softneuro::wg::WG_NS {
namespace {

constexpr int kL = 16;  // tiles transformed together: Tp is a multiple of 16

template <int M>
inline constexpr Matrices<M> kMat = make_matrices<M>();

/// The batch, row and column of tile `tile`'s top-left output pixel.
struct TilePos {
  int64_t n, row, col;
};
inline TilePos tile_pos(const wg::WinogradTiles& t, int64_t tile, int m) {
  const int64_t tx = tile % t.tx, rest = tile / t.tx;
  return {rest / t.ty, (rest % t.ty) * m, tx * m};
}
/// The next tile's position.
inline void step(const wg::WinogradTiles& t, TilePos& p, int m) {
  p.col += m;
  if (p.col < t.tx * m) return;
  p.col = 0;
  p.row += m;
  if (p.row < t.ty * m) return;
  p.row = 0;
  ++p.n;
}

template <int M>
void encode_m(const Geometry& g, const float* x, float* v, ThreadPool& pool) {
  constexpr int A = M + 2;
  constexpr auto mat = kMat<M>;
  const auto& t = g.t;
  const int64_t pstride = g.c * t.tp, nblk = t.tp / kL;
  pool.parallel_for(g.c * nblk, 4, [&](int64_t b0, int64_t b1) {
    alignas(64) float d[A][A][kL];
    alignas(64) float s[A][A][kL];
    for (int64_t idx = b0; idx < b1; ++idx) {
      const int64_t c = idx / nblk, t0 = (idx % nblk) * kL;
      // Gather the 16 tiles' input patches (zero outside the padded input).
      TilePos tp = tile_pos(t, std::min(t0, t.t - 1), M);  // then stepped, no divisions
      for (int q = 0; q < kL; ++q) {
        if (t0 + q >= t.t) {
          for (int a = 0; a < A; ++a)
            for (int b = 0; b < A; ++b) d[a][b][q] = 0.0f;
          continue;
        }
        if (q > 0) step(t, tp, M);
        const int64_t r0 = tp.row - g.pt, c0 = tp.col - g.pl;
        const float* xc = x + (tp.n * g.c + c) * g.h * g.w;
        if (r0 >= 0 && c0 >= 0 && r0 + A <= g.h && c0 + A <= g.w) {
#pragma GCC unroll 8
          for (int a = 0; a < A; ++a)
#pragma GCC unroll 8
            for (int b = 0; b < A; ++b) d[a][b][q] = xc[(r0 + a) * g.w + c0 + b];
        } else {
          for (int a = 0; a < A; ++a)
            for (int b = 0; b < A; ++b) {
              const int64_t r = r0 + a, col = c0 + b;
              d[a][b][q] = r >= 0 && r < g.h && col >= 0 && col < g.w ? xc[r * g.w + col] : 0.0f;
            }
        }
      }
      // s = B^T d (over a), then V = s B (over b); 16 tiles per vector op.
#pragma GCC unroll 8
      for (int i = 0; i < A; ++i)
#pragma GCC unroll 8
        for (int b = 0; b < A; ++b) {
          float acc[kL] = {};
#pragma GCC unroll 8
          for (int a = 0; a < A; ++a) {
            if (mat.bt[i][a] == 0.0) continue;
            const float f = static_cast<float>(mat.bt[i][a]);
            for (int q = 0; q < kL; ++q) acc[q] += f * d[a][b][q];
          }
          for (int q = 0; q < kL; ++q) s[i][b][q] = acc[q];
        }
#pragma GCC unroll 8
      for (int i = 0; i < A; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < A; ++j) {
          float acc[kL] = {};
#pragma GCC unroll 8
          for (int b = 0; b < A; ++b) {
            if (mat.bt[j][b] == 0.0) continue;
            const float f = static_cast<float>(mat.bt[j][b]);
            for (int q = 0; q < kL; ++q) acc[q] += f * s[i][b][q];
          }
          float* out = v + (i * A + j) * pstride + c * t.tp + t0;
          for (int q = 0; q < kL; ++q) out[q] = acc[q];
        }
    }
  });
}

template <int M>
void decode_m(const Geometry& g, const Epilogue& e, const float* mm, float* y, ThreadPool& pool) {
  constexpr int A = M + 2;
  constexpr auto mat = kMat<M>;
  const auto& t = g.t;
  const int64_t pstride = g.k * t.tp, nblk = t.tp / kL;
  const auto kind = e.act.kind;
  pool.parallel_for(g.k * nblk, 4, [&](int64_t b0, int64_t b1) {
    alignas(64) float s[M][A][kL];
    alignas(64) float o[M][M][kL];
    for (int64_t idx = b0; idx < b1; ++idx) {
      const int64_t k = idx / nblk, t0 = (idx % nblk) * kL;
      if (t0 >= t.t) continue;
      const float bias = e.bias ? e.bias[k] : 0.0f;
      const float* src = mm + k * t.tp + t0;
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
        for (int b = 0; b < A; ++b) {
          float acc[kL] = {};
#pragma GCC unroll 8
          for (int a = 0; a < A; ++a) {
            if (mat.at[i][a] == 0.0) continue;
            const float f = static_cast<float>(mat.at[i][a]);
            const float* row = src + (a * A + b) * pstride;
            for (int q = 0; q < kL; ++q) acc[q] += f * row[q];
          }
          for (int q = 0; q < kL; ++q) s[i][b][q] = acc[q];
        }
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < M; ++j) {
          float acc[kL];
          for (int q = 0; q < kL; ++q) acc[q] = bias;
#pragma GCC unroll 8
          for (int b = 0; b < A; ++b) {
            if (mat.at[j][b] == 0.0) continue;
            const float f = static_cast<float>(mat.at[j][b]);
            for (int q = 0; q < kL; ++q) acc[q] += f * s[i][b][q];
          }
          if (kind == core::Activation::relu)
            for (int q = 0; q < kL; ++q) acc[q] = acc[q] < 0.0f ? 0.0f : acc[q];  // NaN stays NaN
          for (int q = 0; q < kL; ++q) o[i][j][q] = acc[q];
        }
      // Scatter the 16 tiles into the output, clipped to OH x OW.
      const bool other_act = kind != core::Activation::none && kind != core::Activation::relu;
      TilePos tp = tile_pos(t, t0, M);  // then stepped, no divisions
      for (int q = 0; q < kL && t0 + q < t.t; ++q) {
        if (q > 0) step(t, tp, M);
        float* yk = y + (tp.n * g.k + k) * t.oh * t.ow;
        const int rows = static_cast<int>(std::min<int64_t>(M, t.oh - tp.row));
        const int cols = static_cast<int>(std::min<int64_t>(M, t.ow - tp.col));
        if (rows == M && cols == M && !other_act) {
          float* yq = yk + tp.row * t.ow + tp.col;
#pragma GCC unroll 8
          for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
            for (int j = 0; j < M; ++j) yq[i * t.ow + j] = o[i][j][q];
          continue;
        }
        for (int i = 0; i < rows; ++i) {
          float* yr = yk + (tp.row + i) * t.ow + tp.col;
          if (other_act)
            for (int j = 0; j < cols; ++j) yr[j] = core::apply_activation(e.act, o[i][j][q]);
          else
            for (int j = 0; j < cols; ++j) yr[j] = o[i][j][q];
        }
      }
    }
  });
}

// --- GEMM: M[p][k][t] = sum_c U[p][c][k] V[p][c][t] ---------------------------

typedef float vf __attribute__((vector_size(WG_LANES * 4)));
typedef float vfu __attribute__((vector_size(WG_LANES * 4), aligned(4)));

inline vf bcast(const float* p) {
#if WG_LANES == 16
  return _mm512_set1_ps(*p);
#else
  return _mm256_set1_ps(*p);
#endif
}

/// PG panels of WG_ROWS output channels (panel stride `ps`) x NV vectors of tiles.
template <int PG, int NV>
inline void micro(const float* __restrict u, int64_t ps, const float* __restrict v, int64_t ldv, float* __restrict out,
                  int64_t ldo, int64_t c, int rows) {
  constexpr int R = WG_ROWS;
  vf acc[PG * R][NV];
#pragma GCC unroll 32
  for (int r = 0; r < PG * R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[r][j] = vf{};
  for (int64_t ci = 0; ci < c; ++ci) {
    vf b[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) b[j] = *reinterpret_cast<const vfu*>(v + ci * ldv + j * WG_LANES);
#pragma GCC unroll 4
    for (int pg = 0; pg < PG; ++pg)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const vf a = bcast(u + pg * ps + ci * R + r);
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[pg * R + r][j] += a * b[j];
      }
  }
  if (rows == PG * R) {
#pragma GCC unroll 32
    for (int r = 0; r < PG * R; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) *reinterpret_cast<vfu*>(out + r * ldo + j * WG_LANES) = acc[r][j];
  } else {
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < NV; ++j) *reinterpret_cast<vfu*>(out + r * ldo + j * WG_LANES) = acc[r][j];
  }
}

/// Every panel of U over NV vectors of tile columns starting at `t`: panel
/// groups sized so the accumulators fill the register file.
template <int NV>
inline void columns(const float* up, int64_t panels, int64_t c, int64_t k, const float* vp, float* mp, int64_t tp, int64_t t) {
  constexpr int kAcc = WG_LANES == 16 ? 24 : 12;
  constexpr int PG = std::max(1, kAcc / (WG_ROWS * NV));
  const int64_t ps = c * WG_ROWS;
  int64_t panel = 0;
  for (; panel + PG <= panels; panel += PG) {
    const int rows = static_cast<int>(std::min<int64_t>(PG * WG_ROWS, k - panel * WG_ROWS));
    micro<PG, NV>(up + panel * ps, ps, vp + t, tp, mp + panel * WG_ROWS * tp + t, tp, c, rows);
  }
  for (; panel < panels; ++panel) {
    const int rows = static_cast<int>(std::min<int64_t>(WG_ROWS, k - panel * WG_ROWS));
    micro<1, NV>(up + panel * ps, ps, vp + t, tp, mp + panel * WG_ROWS * tp + t, tp, c, rows);
  }
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
  // while the panels of U stream over it.
  const int64_t block = std::max<int64_t>(kCols, std::min<int64_t>(tp, (int64_t{96} * 1024 / 4 / std::max<int64_t>(c, 1)) / kCols * kCols));
  const int64_t nblocks = (tp + block - 1) / block;
  pool.parallel_for(p * nblocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t task = b0; task < b1; ++task) {
      const int64_t pi = task / nblocks, t0 = (task % nblocks) * block, t1 = std::min(tp, t0 + block);
      const float* vp = v + pi * c * tp;
      float* mp = mm + pi * k * tp;
      const float* up = u.data.data() + pi * u.panels * c * WG_ROWS;
      int64_t t = t0;
      for (; t + kCols <= t1; t += kCols) columns<WG_VECS>(up, u.panels, c, k, vp, mp, tp, t);
      // Tails (Tp is a multiple of 16): fewer vectors, more panels at once.
#if WG_LANES == 16
      if (t + 32 <= t1) columns<2>(up, u.panels, c, k, vp, mp, tp, t), t += 32;
#endif
      for (; t + WG_LANES <= t1; t += WG_LANES) columns<1>(up, u.panels, c, k, vp, mp, tp, t);
    }
  });
}

}  // namespace softneuro::wg::WG_NS
