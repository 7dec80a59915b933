// Blocked-layout Winograd kernels (see winograd_blocked.hpp), included once per
// ISA after defining SN_F32_AVX512, built with that ISA's flags and
// -ffp-contract=fast. Values are vectors of kV channels throughout; the
// transform coefficients are compile-time constants (zeros vanish, ones are adds).
#include "routines/cpu/f32_simd.hpp"
#include "routines/cpu/winograd_blocked.hpp"
#include "routines/cpu/conv_kernels.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

namespace softneuro::cpu::SN_F32_NS {
namespace {

namespace wgb = softneuro::wg::blocked;

template <int M>
inline constexpr wg::Matrices<M> kWgMat = wg::make_matrices<M>();
// B^T and A^T as objects of their own: a template argument may refer to a
// subobject in C++20, but clang before 16 (the fuzzing build) refuses it.
template <int M>
inline constexpr auto kWgBT = kWgMat<M>.bt;
template <int M>
inline constexpr auto kWgAT = kWgMat<M>.at;

/// f(std::integral_constant<int, 0>{}) ... f(<N-1>): loops whose indices are
/// compile-time constants, so every transform coefficient is one too.
template <int N, class F, int... I>
__attribute__((always_inline)) inline void static_for_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
__attribute__((always_inline)) inline void static_for(F&& f) {
  static_for_impl<N>(f, std::make_integer_sequence<int, N>{});
}

/// acc + C[I][J] * x for a coefficient of a compile-time matrix C (0: nothing,
/// +-1: add/sub). The coefficient is looked up here, not passed as a double
/// template argument: clang before 18 (the fuzzing build) has none.
template <const auto& C, int I, int J>
__attribute__((always_inline)) inline vf madd(vf acc, vf x) {
  constexpr double F = C[I][J];
  if constexpr (F == 0.0) return acc;
  else if constexpr (F == 1.0) return acc + x;
  else if constexpr (F == -1.0) return acc - x;
  else return acc + x * static_cast<float>(F);
}

/// out[i] = sum_a C[i][a] * in[a] for i < R, a < A, C a compile-time matrix.
template <int R, int A, const auto& C>
__attribute__((always_inline)) inline void combine(const vf* in, vf* out, vf init) {
  static_for<R>([&](auto i) __attribute__((always_inline)) {
    vf acc = init;
    static_for<A>([&](auto a) __attribute__((always_inline)) { acc = madd<C, i, a>(acc, in[a]); });
    out[i] = acc;
  });
}

/// The batch, row and column of tile `tile`'s top-left output pixel.
inline void tile_origin(const wg::WinogradTiles& t, int64_t tile, int m, int64_t& n, int64_t& row, int64_t& col) {
  col = tile % t.tx * m;
  const int64_t rest = tile / t.tx;
  row = rest % t.ty * m;
  n = rest / t.ty;
}

/// The size of the fewest equal parts of n that are at most `most` each.
inline int64_t equal_part(int64_t n, int64_t most) {
  const int64_t parts = (n + most - 1) / most;
  return (n + parts - 1) / parts;
}

// --- encode: V[p][cb][t] = (B^T d B)[p] of tile t's (m+2)^2 input pixels ------

/// Most tiles per encode task: 256 bytes (4 cache lines) of V per position.
constexpr int64_t kEncodeTiles = 64 / kV;

template <int M>
void encode_m(const wg::Geometry& g, const float* x, float* v, ThreadPool& pool, bool channels_last) {
  constexpr int A = M + 2;
  const auto& t = g.t;
  const int64_t cbs = (g.c + kV - 1) / kV, T = t.t, plane = g.h * g.w * kV;
  // x blocked: [N][C/kV][H][W][kV]; channels last: [N][H][W][C] (a last part block read masked).
  const int64_t image = channels_last ? g.h * g.w * g.c : cbs * plane, block = channels_last ? kV : plane,
                pixel = channels_last ? g.c : kV;
  // Runs of equal length (a plane of 9 tiles: 3 runs of 3 at AVX-512, not 4, 4, 1).
  const int64_t run = equal_part(T, kEncodeTiles), blocks = (T + run - 1) / run;
  // Staged in L1 (below) where a vector is half a cache line (AVX2), and for
  // F(2,3) at AVX-512, where it measured faster.
  constexpr bool kStageEncode = kV * 4 < 64 || M == 2;
  // Tasks: (channel block, run of tiles), the tiles' origins stepped along.
  // Staged, a task transforms them into `staged` (L1), then copies each
  // position's run out whole. Stored straight to V, a tile's (M+2)^2 vectors
  // go 4 KB-aliased into one L1 set wherever cbs * T * kV * 4 is a multiple of
  // 4 KB (most of ResNet50's and VGG16's layers); at AVX2 each line was then
  // evicted half-written and fetched again for the next tile. Encode alone,
  // 2 threads: AVX2 no shape slower (64@224 F(2,3) 4.0 -> 2.4 ms, 512@7 39 ->
  // 19 us); AVX-512 F(2,3) 128@112 1.13 -> 0.82 ms (small planes 2-6 us
  // slower), but staged F(4,3)/F(6,3) up to 28% slower on small planes.
  pool.parallel_for(cbs * blocks, 1, [&](int64_t b0, int64_t b1) {
    alignas(64) float staged[kStageEncode ? A * A : 1][kEncodeTiles * kV];
    const int64_t pstride = cbs * T * kV;  // floats between positions in V
    vf d[A][A], s[A][A];
    for (int64_t task = b0; task < b1; ++task) {
      const int64_t cb = task / blocks, tile0 = task % blocks * run;
      const int64_t nt = std::min(run, T - tile0);
      int64_t n, row, col;
      tile_origin(t, tile0, M, n, row, col);
      const float* xc0 = x + cb * block;
      const int cvalid = channels_last && cb == cbs - 1 ? static_cast<int>(g.c - cb * kV) : kV;
      auto load = [cvalid](const float* p) __attribute__((always_inline)) {
        return cvalid < kV ? vload_n(p, cvalid) : vload(p);
      };
      for (int64_t k = 0; k < nt; ++k) {
        const int64_t r0 = row - g.pt, c0 = col - g.pl;
        const float* xc = xc0 + n * image;
        if (r0 >= 0 && c0 >= 0 && r0 + A <= g.h && c0 + A <= g.w) {
          static_for<A>([&](auto a) __attribute__((always_inline)) {
            static_for<A>([&](auto b) __attribute__((always_inline)) { d[a][b] = load(xc + ((r0 + a) * g.w + c0 + b) * pixel); });
          });
        } else {  // a border tile: pixels outside the input are zeros
          const int64_t b_lo = std::max<int64_t>(0, -c0), b_hi = std::min<int64_t>(A, g.w - c0);
          static_for<A>([&](auto a) __attribute__((always_inline)) {
            const int64_t r = r0 + a;
            const bool row_in = r >= 0 && r < g.h;
            static_for<A>([&](auto b) __attribute__((always_inline)) {
              d[a][b] = row_in && b >= b_lo && b < b_hi ? load(xc + (r * g.w + c0 + b) * pixel) : vzero();
            });
          });
        }
        // s = B^T d (column by column), then V = s B (row by row: V[i] = B^T s[i]).
        static_for<A>([&](auto b) __attribute__((always_inline)) {
          vf colv[A], out[A];
          static_for<A>([&](auto a) __attribute__((always_inline)) { colv[a] = d[a][b]; });
          combine<A, A, kWgBT<M>>(colv, out, vzero());
          static_for<A>([&](auto i) __attribute__((always_inline)) { s[i][b] = out[i]; });
        });
        // Where V[p] of this tile goes: locals, which no vector store can alias.
        float* const dst = kStageEncode ? &staged[0][k * kV] : v + (cb * T + tile0 + k) * kV;
        const int64_t dst_p = kStageEncode ? kEncodeTiles * kV : pstride;
        static_for<A>([&](auto i) __attribute__((always_inline)) {
          vf out[A];
          combine<A, A, kWgBT<M>>(s[i], out, vzero());
          static_for<A>([&](auto j) __attribute__((always_inline)) { vstore(dst + (i * A + j) * dst_p, out[j]); });
        });
        // The next tile: along the row, then down, then the next image.
        if ((col += M) >= t.tx * M) {
          col = 0;
          if ((row += M) >= t.ty * M) row = 0, ++n;
        }
      }
      if constexpr (kStageEncode) {
        float* vt = v + (cb * T + tile0) * kV;
        for (int q = 0; q < A * A; ++q, vt += pstride)
          for (int64_t k = 0; k < nt * kV; k += kV) vstore(vt + k, vload(&staged[q][k]));
      }
    }
  });
}

// --- GEMM: M[p][kb][t] = sum_c V[p][c/kV][t][c%kV] * U[p][kb][c] --------------

/// Input-channel blocks per chunk of a GEMM over nk output-channel vectors:
/// the chunk's U panel (chunk x nk x kV x kV floats) within ~40 KiB, so it stays
/// in L1 while every row streams over it; chunks of equal size.
inline int64_t l1_chunk(int64_t cbs, int64_t nk) {
  return equal_part(cbs, std::max<int64_t>(1, (40 * 1024) / (kV * kV * nk * 4)));
}

#if !SN_F32_AVX512
// AVX2: an intrinsic micro-kernel (AVX-512 runs the direct convolution's
// assembly tiles: gemm_rows_asm below).
constexpr int kRT = 6, kNK = 2;  // 12 sums + 2 + 1 of 16 ymm

/// RT tiles (rows) x NK vectors of output channels over `cbs` input-channel
/// blocks, onto the sums already in mm when `load`.
///   v: V[p][cb 0][t0], v_cb floats between channel blocks; u: U's group at input channel 0
///   ([C][NK][kV]);
///   mm: M[p][kb0][t0], m_kb between kb.
template <int RT, int NK>
void gemm_micro(const float* v, int64_t v_cb, int64_t cbs, const float* u, float* mm, int64_t m_kb, bool load) {
  vf acc[RT][NK];
#pragma GCC unroll 8
  for (int r = 0; r < RT; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NK; ++j) acc[r][j] = load ? vload(mm + j * m_kb + r * kV) : vzero();
  for (int64_t cb = 0; cb < cbs; ++cb) {
    const float* vb = v + cb * v_cb;
    const float* ub = u + cb * kV * NK * kV;
#pragma GCC unroll 16
    for (int ci = 0; ci < kV; ++ci) {
      vf w[NK];
#pragma GCC unroll 4
      for (int j = 0; j < NK; ++j) w[j] = vload(ub + (ci * NK + j) * kV);
#pragma GCC unroll 8
      for (int r = 0; r < RT; ++r) {
        const vf xv = vbcast(vb + r * kV + ci);
#pragma GCC unroll 4
        for (int j = 0; j < NK; ++j) acc[r][j] = vfma(xv, w[j], acc[r][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < RT; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NK; ++j) vstore(mm + j * m_kb + r * kV, acc[r][j]);
}

/// The last rows (fewer than kRT) of a panel.
template <int NK, int R = kRT - 1>
void gemm_tail(int64_t rows, const float* v, int64_t v_cb, int64_t cbs, const float* u, float* mm, int64_t m_kb,
               bool load) {
  if constexpr (R >= 1) {
    if (rows == R) return gemm_micro<R, NK>(v, v_cb, cbs, u, mm, m_kb, load);
    gemm_tail<NK, R - 1>(rows, v, v_cb, cbs, u, mm, m_kb, load);
  }
}

/// Every row of M[p] for NK output-channel vectors: input channels in chunks
/// whose U panel (chunk x NK*kV floats) stays in L1 across all the rows.
template <int NK>
void gemm_rows(const float* v, int64_t v_cb, int64_t cbs, int64_t T, const float* u, float* mm, int64_t m_kb) {
  const int64_t chunk = l1_chunk(cbs, NK);
  for (int64_t cb0 = 0; cb0 < cbs; cb0 += chunk) {
    const int64_t n = std::min(chunk, cbs - cb0);
    const float* vc = v + cb0 * v_cb;
    const float* uc = u + cb0 * kV * NK * kV;
    int64_t t = 0;
    for (; t + kRT <= T; t += kRT) gemm_micro<kRT, NK>(vc + t * kV, v_cb, n, uc, mm + t * kV, m_kb, cb0 > 0);
    gemm_tail<NK>(T - t, vc + t * kV, v_cb, n, uc, mm + t * kV, m_kb, cb0 > 0);
  }
}

/// Every output-channel group of nk <= kNK vectors.
template <int NK = kNK>
void gemm_group(int64_t nk, const float* v, int64_t v_cb, int64_t cbs, int64_t T, const float* u, float* mm,
                int64_t m_kb) {
  if constexpr (NK >= 1) {
    if (nk == NK) return gemm_rows<NK>(v, v_cb, cbs, T, u, mm, m_kb);
    gemm_group<NK - 1>(nk, v, v_cb, cbs, T, u, mm, m_kb);
  }
}
#endif

/// Output-channel vectors per group for T rows. AVX-512: the assembly tiles of
/// 2 vectors take up to 14 rows (28 sums); fewer than 8 rows would leave too
/// few independent sums to cover the FMA latency, so those take 4 vectors.
/// 15 to 28 rows take 1 vector, all rows in one tile: each U value is then
/// read once, its stream spread over the whole GEMM, where 2 vectors in two
/// row tiles read U from L3 in the first and from L1 in the second (the
/// first waiting on L3). Measured on the GEMM alone, 2 threads, U from L3:
/// 512->512 F(2,3) at 7x7 (T 16) 0.60 -> 0.48 ms, F(4,3) at 14x14 (T 16)
/// 2.1-2.4 -> 1.8-1.9 ms, F(6,3) at 28x28 (T 25) 5.1 -> 4.0 ms; 256->256
/// F(4,3) at 14x14 0.38 -> 0.34 ms. Past 28 rows 2 vectors stay (T 49 and 196,
/// U in L2: 4-7% faster than 1 vector in two or more tiles).
#if SN_F32_AVX512
int group_vectors(int64_t T) { return T < 8 ? 4 : T <= 14 || T > 28 ? 2 : 1; }
#else
int group_vectors(int64_t) { return kNK; }
#endif

wgb::PackedU pack(const float* u, int64_t p, int64_t c, int64_t k, int64_t T) {
  wgb::PackedU pk;
  pk.kb = (k + kV - 1) / kV;
  pk.cpad = (c + kV - 1) / kV * kV;
  pk.nk = group_vectors(T);
  pk.data.assign(static_cast<std::size_t>(p * pk.kb * pk.cpad * kV), 0.0f);
  // Groups of nk output-channel vectors (the last may have fewer), each
  // [C][nk][kV]: the vectors one input channel multiplies are adjacent.
  for (int64_t pi = 0; pi < p; ++pi)
    for (int64_t kb0 = 0; kb0 < pk.kb; kb0 += pk.nk) {
      const int64_t nk = std::min<int64_t>(pk.nk, pk.kb - kb0);
      float* grp = pk.data.data() + (pi * pk.kb + kb0) * pk.cpad * kV;
      for (int64_t ci = 0; ci < c; ++ci)
        for (int64_t j = 0; j < nk; ++j)
          for (int64_t l = 0; l < kV; ++l) {
            const int64_t ki = (kb0 + j) * kV + l;
            if (ki < k) grp[(ci * nk + j) * kV + l] = u[(pi * c + ci) * k + ki];
          }
    }
  return pk;
}

/// Every row of M[p] for nk output-channel vectors on the direct convolution's
/// assembly tiles: M[p] = V[p] U[p] is a 1x1 convolution of T pixels in
/// nchw16c / nchw8c (V[p] is [C/V][T][V], the group's U [C][nk][V] its packed
/// weights, M[p] [K/V][T][V]). Those tiles ran the GEMMs of ResNet50's and
/// VGG16's 3x3 layers 3-10% faster at 2 threads, up to 15% at one, than the
/// AVX-512 8 x 3 intrinsic micro-kernel they replaced (GCC moved and spilled its
/// 24 sums). Rows in tiles of equal width; with more than one row tile, input
/// channels in chunks whose U panel stays in L1 across them.
void gemm_rows_asm(const conv::Kernels& ck, int nk, const float* v, int64_t c, int64_t T, const float* u, float* mm) {
  static constexpr int64_t kOneTap[1] = {0};
  const int64_t cbs = (c + kV - 1) / kV, v_cb = T * kV;
  const int64_t tw = equal_part(T, ck.asm_max_w[conv::ocb_index(nk)]);
  // One row tile reads each U value once: no panel to keep in L1, one chunk.
  const int64_t chunk = tw >= T ? cbs : l1_chunk(cbs, nk);
  // The last ic block's channels in steps of 4 (its padded channels are zeros in V and U).
  const int64_t last_steps = (c - (cbs - 1) * kV + 3) / 4;
  conv::AsmTile a;
  a.tap_x = kOneTap;
  a.ntaps = 1;
  a.x_icb_bytes = v_cb * 4;
  a.w_icb_bytes = kV * nk * kV * 4;
  a.y_ocb_bytes = T * kV * 4;
  const int oi = conv::ocb_index(nk);
  // Where the tiles have split forms (AVX2's 2 x W), their unsplit ones (all
  // pixels in one run) prefetch the next chunk's U into L2 (AsmTile::w_next:
  // the next group's at the last chunk), spread over the chunk's row tiles:
  // the first otherwise streams U from L3 at the rate it reads it. (One row
  // tile reads U once: its per-step prefetch then.)
  const bool spread = ck.asm_split_max_w[oi] >= tw && tw < T;
  const int64_t spread_min = ck.asm_split_min_w[oi];
  for (int64_t cb0 = 0; cb0 < cbs; cb0 += chunk) {
    a.icbs = std::min(chunk, cbs - cb0);
    a.load = cb0 > 0;
    a.last_steps = cb0 + a.icbs == cbs ? last_steps : 4;
    a.w = u + cb0 * kV * nk * kV;
    const int64_t panel = a.icbs * kV * nk * kV, slice = a.icbs * ck.w_next_per_tap / int64_t(sizeof(float));
    int64_t next = panel;
    for (int64_t t = 0; t < T; t += tw, next += slice) {
      const int64_t w = std::min(tw, T - t);
      a.x = v + cb0 * v_cb + t * kV;
      a.y = mm + t * kV;
      if (spread && w >= spread_min) {
        a.w_next = next < 2 * panel ? a.w + next : a.w;
        ck.asm_tile_split[0][oi][0][w][w](a);
      } else {
        ck.asm_tile[1][oi][0][w](a);
      }
    }
  }
}

/// AVX2: U streamed from L3 (more than the two cores' L2 hold) runs on the
/// assembly tiles, whose split forms spread its stream (gemm_rows_asm); U in
/// L2, on the intrinsic micro-kernel (inlined: less per tile). The
/// measurements behind the 4 MB threshold: docs/routines/winograd.md.
constexpr int64_t kAsmGemmBytes = 4 << 20;

void gemm(const wgb::PackedU& u, int64_t p, int64_t c, int64_t T, const float* v, float* mm, ThreadPool& pool) {
  const int64_t cbs = (c + kV - 1) / kV, kbs = u.kb, groups = (kbs + u.nk - 1) / u.nk;
  const int64_t v_cb = T * kV, u_kb = u.cpad * kV, m_kb = T * kV;
#if SN_F32_AVX512
  const conv::Kernels& ck = *conv::unchecked_kernels_avx512();
#else
  const conv::Kernels& ck = *conv::unchecked_kernels_avx2();
  const bool streamed = p * kbs * u_kb * int64_t(sizeof(float)) > kAsmGemmBytes;
#endif
  // Tasks: (position, group of output-channel vectors), each over every row of
  // M[p] (gemm_rows_asm / gemm_rows: how U is reused across the rows).
  pool.parallel_for(p * groups, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t task = b0; task < b1; ++task) {
      const int64_t pi = task / groups, kb0 = task % groups * u.nk, nk = std::min<int64_t>(u.nk, kbs - kb0);
      const float* vp = v + pi * cbs * v_cb;
      const float* up = u.data.data() + (pi * kbs + kb0) * u_kb;
      float* mp = mm + (pi * kbs + kb0) * m_kb;
#if SN_F32_AVX512
      gemm_rows_asm(ck, static_cast<int>(nk), vp, c, T, up, mp);
#else
      if (streamed) gemm_rows_asm(ck, static_cast<int>(nk), vp, c, T, up, mp);
      else gemm_group(nk, vp, v_cb, cbs, T, up, mp, m_kb);
#endif
    }
  });
}

// --- decode: y = act(A^T M A + bias), clipped to OH x OW -------------------------

template <int M>
void decode_m(const wg::Geometry& g, const gemm::Epilogue& ep, const float* bias, const float* mm, float* y,
              ThreadPool& pool, bool channels_last) {
  constexpr int A = M + 2;
  const auto& t = g.t;
  const int64_t kbs = (g.k + kV - 1) / kV, T = t.t, pstride = kbs * T * kV;
  // y blocked: [N][K/kV][OH][OW][kV]; channels last: [N][OH][OW][K] (a last part block stored masked).
  const int64_t image = channels_last ? t.oh * t.ow * g.k : kbs * t.oh * t.ow * kV,
                block = channels_last ? kV : t.oh * t.ow * kV, pixel = channels_last ? g.k : kV;
  const int valid_last = static_cast<int>(g.k - (kbs - 1) * kV);
  pool.parallel_for(kbs * T, 8, [&](int64_t b0, int64_t b1) {
    const VAct act(ep);
    vf s[M][A];
    for (int64_t idx = b0; idx < b1; ++idx) {
      const int64_t kb = idx / T, tile = idx % T;
      int64_t n, row, col;
      tile_origin(t, tile, M, n, row, col);
      const float* src = mm + (kb * T + tile) * kV;
      // s = A^T M (column by column), then o = s A (row by row: o[i] = A^T s[i]) + bias.
      static_for<A>([&](auto b) __attribute__((always_inline)) {
        vf col[A], out[M];
        static_for<A>([&](auto a) __attribute__((always_inline)) { col[a] = vload(src + (a * A + b) * pstride); });
        combine<M, A, kWgAT<M>>(col, out, vzero());
        static_for<M>([&](auto i) __attribute__((always_inline)) { s[i][b] = out[i]; });
      });
      const vf bv = bias ? vload(bias + kb * kV) : vzero();
      const int valid = kb == kbs - 1 ? valid_last : kV;
      const int64_t rows = std::min<int64_t>(M, t.oh - row), cols = std::min<int64_t>(M, t.ow - col);
      float* yk = y + n * image + kb * block + (row * t.ow + col) * pixel;
      static_for<M>([&](auto i) __attribute__((always_inline)) {
        if (i >= rows) return;
        vf out[M];
        combine<M, A, kWgAT<M>>(s[i], out, bv);
        for (int j = 0; j < M && j < cols; ++j) {
          vf o = act(out[j]);
          if (valid < kV && channels_last) {
            vstore_n(yk + (i * t.ow + j) * pixel, o, valid);
            continue;
          }
          if (valid < kV) o = vkeep_n(o, valid);
          vstore(yk + (i * t.ow + j) * pixel, o);
        }
      });
    }
  });
}

void encode(int m, const wg::Geometry& g, const float* x, float* v, ThreadPool& pool, bool channels_last) {
  switch (m) {
    case 2: return encode_m<2>(g, x, v, pool, channels_last);
    case 4: return encode_m<4>(g, x, v, pool, channels_last);
    default: return encode_m<6>(g, x, v, pool, channels_last);
  }
}

void decode(int m, const wg::Geometry& g, const gemm::Epilogue& e, const float* bias, const float* mm, float* y,
            ThreadPool& pool, bool channels_last) {
  switch (m) {
    case 2: return decode_m<2>(g, e, bias, mm, y, pool, channels_last);
    case 4: return decode_m<4>(g, e, bias, mm, y, pool, channels_last);
    default: return decode_m<6>(g, e, bias, mm, y, pool, channels_last);
  }
}

wgb::Kernels make_kernels() {
  wgb::Kernels k;
  k.vec = kV;
  k.encode = &encode;
  k.pack = &pack;
  k.group = &group_vectors;
  k.gemm = &gemm;
  k.decode = &decode;
  return k;
}

}  // namespace
}  // namespace softneuro::cpu::SN_F32_NS

namespace softneuro::wg::blocked {
#if SN_F32_AVX512
const Kernels* unchecked_kernels_avx512() {
  static const Kernels k = cpu::avx512::make_kernels();
  return &k;
}
#else
const Kernels* unchecked_kernels_avx2() {
  static const Kernels k = cpu::avx2::make_kernels();
  return &k;
}
#endif
}  // namespace softneuro::wg::blocked
