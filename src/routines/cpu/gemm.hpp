// Internal float32 GEMM of our CPU routines (cpu/im2col, cpu/gemm1x1, and any
// routine that wants one: Winograd's wgconv, ...):
//
//   C[M,N] (+)= A[M,K] · B[K,N], then per element: + bias, activation
//
// with both operands in *packed panels* (BLIS style) and an MR x NR register
// tile computed by a per-ISA micro-kernel (gemm_kernels_avx2.cpp, built with
// -mavx2 -mfma; gemm_kernels_avx512.cpp, built with -mavx512f/bw/vl/dq;
// gemm_kernels_neon.cpp on aarch64). Chosen at run time from
// core::cpu_features(); there is no scalar kernel.
//
// Packed layouts (K split into blocks of at most kc; every block is stored
// whole before the next):
//   A: for each K block [k0, k0+kcb): for each panel of MR rows:
//        [kcb][MR] floats (rows past M are zero)        — offset k0*Mp + p*kcb*MR
//   B: for each K block: for each panel of NR columns:
//        [kcb][NR] floats (columns past N are zero)     — offset k0*Np + q*kcb*NR
// with Mp = M rounded up to MR, Np = N rounded up to NR. Pack weights once
// (in prepare) and activations per run into the workspace. Keep packed B
// 64-byte aligned (cpu::AlignedFloats in f32_common.hpp, or a workspace offset
// that is a multiple of 16 floats): the kernels load its rows as whole vectors
// and a split cache line costs 10-20%. Packed A is only broadcast from.
//
// Threads: gemm() splits C into blocks of about 96 rows x 256 columns over the
// pool; gemm_block() is the single-threaded piece for callers that make their
// own tasks (im2col.cpp packs B per task into a per-thread workspace slot).
//
// Usage:
//   const gemm::Kernel& k = gemm::best_kernel();       // nullptr-free; check gemm::available()
//   std::vector<float> pa(gemm::packed_a_size(k, M, K)); gemm::pack_a(k, M, K, kc, A, lda, false, pa.data());
//   gemm::pack_b(k, K, N, kc, B, ldb, false, pb);       // into the workspace
//   gemm::Epilogue ep; ep.bias_m = bias; ep.act = gemm::Act::relu;
//   gemm::gemm(k, pool, M, N, K, kc, pa.data(), pb, C, ldc, ep);
#pragma once

#include <softneuro/routine.hpp>

#include <cstddef>
#include <cstdint>

namespace softneuro::cpu::gemm {

/// Fused activation applied after the bias (same semantics as core::apply_activation).
enum class Act : int32_t { none = 0, relu = 1, clip = 2, hardswish = 3, hardsigmoid = 4, silu = 5, sigmoid = 6 };

/// What happens to a finished tile.
struct Epilogue {
  const float* bias_m = nullptr;  ///< one per row of C (e.g. output channels of nchw conv), or null
  const float* bias_n = nullptr;  ///< one per column of C (e.g. nhwc / dense outputs), or null
  Act act = Act::none;
  float lo = 0, hi = 0;           ///< clip bounds
  float alpha = 0, beta = 0;      ///< hardsigmoid
  bool accumulate = false;        ///< C += A·B (bias/activation still applied once, at the end)
  /// After the activation: y * scale + shift (act_scale, act_shift), where
  /// `affine`; only the kernels of routines whose supports() accept it
  /// (check_activation(layer, true)) apply it.
  bool affine = false;
  float scale = 1, shift = 0;
  /// What every assembly tile's own epilogue computes (bias, then relu or a
  /// clip, no affine): other epilogues run in C over the tile's sums (the
  /// AVX-512 direct tiles also take hardswish and the affine: asm_row).
  bool clamps_only() const { return !affine && (act == Act::none || act == Act::relu || act == Act::clip); }
};

/// The micro-kernel of one ISA: C[MR,NR] (row stride ldc) = (load_c ? C : 0)
/// + sum over kc of a[k][MR] ⊗ b[k][NR]; when `last`, + bias and activation.
/// bias_m points at the tile's MR row biases, bias_n at its NR column biases.
using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool load_c,
                             bool last, const float* bias_m, const float* bias_n, const Epilogue& ep);

/// C[m, n] = A[m, k] · Bᵀ + bias_n, then the epilogue's activation, for few columns
/// (n <= kMaxNarrow): B as its n rows of k floats, row i of A at a + i * lda and of C
/// at c + i * ldc; each output a dot product across vector lanes. Where a product
/// has fewer columns than the register tile is wide (a transposed convolution to
/// one channel: 2 of 16), which would compute mostly padding.
using NarrowKernel = void (*)(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, float* c,
                              int64_t ldc, const float* bias_n, const Epilogue& ep);
inline constexpr int kMaxNarrow = 8;

struct Kernel {
  const char* isa = "";  ///< "avx2", "avx512" or "neon"
  int mr = 0, nr = 0;    ///< register tile
  int vec = 0;           ///< floats per vector register
  MicroKernel micro = nullptr;
  NarrowKernel narrow = nullptr;
};

/// The AVX2+FMA kernel (6x16) and the AVX-512 one (12x32); nullptr when the CPU lacks the ISA.
const Kernel* kernel_avx2();
const Kernel* kernel_avx512();
/// aarch64's Advanced SIMD kernel (8x12); nullptr on other processors.
const Kernel* kernel_neon();
/// The same, defined in the per-ISA files: call only once the CPU is known to
/// have the ISA. The check cannot live there: the compiler may use the ISA's
/// instructions anywhere in such a file, the check itself included.
const Kernel* unchecked_kernel_avx2();
const Kernel* unchecked_kernel_avx512();
const Kernel* unchecked_kernel_neon();
/// The widest kernel this CPU runs (AVX-512, else AVX2; Advanced SIMD on
/// aarch64), or nullptr (an x86 CPU without AVX2+FMA).
const Kernel* best_kernel();

/// Default K block: the B panel (kc x NR) and a few A panels stay in L1/L2.
inline int64_t default_kc(const Kernel&) { return 256; }

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
/// Floats of a packed A (M x K) and a packed B (K x N).
inline int64_t packed_a_size(const Kernel& k, int64_t m, int64_t kk) { return round_up(m, k.mr) * kk; }
inline int64_t packed_b_size(const Kernel& k, int64_t kk, int64_t n) { return kk * round_up(n, k.nr); }

/// Packs A (row-major M x K with row stride lda, or, when `trans`, stored K x M
/// with row stride lda, i.e. A[m][k] = a[k*lda + m]) into `out` (packed_a_size floats).
void pack_a(const Kernel& k, int64_t m, int64_t kk, int64_t kc, const float* a, int64_t lda, bool trans, float* out);
/// Packs B (row-major K x N with row stride ldb, or, when `trans`, stored N x K:
/// B[k][n] = b[n*ldb + k], e.g. dense weights [O,K]) into `out` (packed_b_size floats).
/// Columns [n0, n0+n) of a wider matrix: pass b offset by n0 (or n0*ldb when trans).
void pack_b(const Kernel& k, int64_t kk, int64_t n, int64_t kc, const float* b, int64_t ldb, bool trans, float* out);

/// Single-threaded: rows [m_begin, m_end) (multiples of MR except at M) and
/// columns [n_begin, n_end) (multiples of NR except at N) of C = A·B with epilogue.
/// pa/pb are the whole packed operands (M, N, K as packed). Tiles at the edges
/// go through a stack buffer; nothing is allocated.
void gemm_block(const Kernel& k, int64_t m, int64_t n, int64_t kk, int64_t kc, const float* pa, const float* pb,
                float* c, int64_t ldc, const Epilogue& ep, int64_t m_begin, int64_t m_end, int64_t n_begin,
                int64_t n_end);

/// The whole C, split into (row block x column block) tasks over `pool`
/// (serial when pool is null).
void gemm(const Kernel& k, ThreadPool* pool, int64_t m, int64_t n, int64_t kk, int64_t kc, const float* pa,
          const float* pb, float* c, int64_t ldc, const Epilogue& ep);

}  // namespace softneuro::cpu::gemm
