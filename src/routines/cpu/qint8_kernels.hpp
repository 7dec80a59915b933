// Inner kernels of the cpu:qint8 "avx2" routines (src/routines/cpu/qint8.cpp).
// Implemented in qint8_kernels_avx2.cpp, the one file built with -mavx2 -mfma;
// callers check avx2_usable() first. Plain types only in this interface.
//
// Arithmetic: activations enter the kernels as int16 values (q - zero_point),
// in [-255, 255]; weights are int8 in [-127, 127] stored as int16. Products
// are summed in pairs by vpmaddwd into int32, which is exact (no int16
// saturation as with vpmaddubsw, so weights keep their full 8 bits): the
// int32 accumulators equal the mathematically exact integer dot products.
// Requantisation is in float: q = round_to_nearest_even(acc * multiplier) + zp.
#pragma once

#include "routines/cpu/pair_fix.hpp"

#include <cstdint>

namespace softneuro::qint8 {

/// Whether this CPU runs the AVX2 + FMA kernels. Defined in qint8.cpp, not in
/// the kernels' file: the compiler may use AVX2 anywhere there, the check included.
bool avx2_usable();

/// How a tile's int32 accumulators become int8 outputs.
struct Epilogue {
  enum Act : int32_t { linear = 0, hardswish = 1, hardsigmoid = 2 };
  const int32_t* bias = nullptr;  ///< 16 per tile (added to the accumulators)
  const float* mult = nullptr;    ///< 16: linear: s_in*s_w/s_out (x act_scale); otherwise s_in*s_w (the real value)
  float inv_out = 1;              ///< act_scale/s_out, applied after hardswish, hardsigmoid
  float add_out = 0;              ///< act_shift/s_out, added before rounding (an affine after the activation)
  float act_scale = 1;            ///< the affine's scale, folded into mult where the activation is linear (not read by kernels)
  float alpha = 0, beta = 0;      ///< hardsigmoid
  int32_t act = linear;
  int32_t zp = 0;                 ///< output zero point
  int32_t lo = -128, hi = 127;    ///< clamp in the quantised domain (fused relu/clip)
};

/// Number of output columns of a GEMM tile (and of a packed weight block).
inline constexpr int kTileN = 16;
/// Most rows of a GEMM tile: 4 rows x 16 columns keep the 8 accumulators, two
/// weight vectors, the broadcast and the product in the 16 ymm registers (6 rows spill).
inline constexpr int kTileM = 4;

/// C[r][j] = sum_k U[r][k] * V[k][j] for r < mr (1..kTileM), j < 16, then the
/// epilogue; row r's 16 outputs go to dst + r*ldd (the first `nvalid` of them).
/// U: int16 rows, `ldu` elements apart, K padded with zeros to 2*k2.
/// V: packed as [k2][16][2] int16 (64-byte aligned).
void gemm_tile(int mr, const int16_t* u, int64_t ldu, const int16_t* v, int64_t k2, const Epilogue& ep, int8_t* dst,
               int64_t ldd, int nvalid);

/// The K-blocked form of gemm_tile for long dot products (the weight block of a
/// K chunk stays in L1): acc (mr x 16 int32, row-major) += U x V over k2 pairs,
/// starting from zero when `first`; then gemm_epilogue turns acc into outputs.
void gemm_tile_partial(int mr, const int16_t* u, int64_t ldu, const int16_t* v, int64_t k2, int32_t* acc, bool first);
void gemm_epilogue(int mr, const int32_t* acc, const Epilogue& ep, int8_t* dst, int64_t ldd, int nvalid);

/// y[i] = x[i] - zp as int16.
void widen(const int8_t* x, int16_t* y, int64_t n, int32_t zp);
/// y[i] = x[i] + 128 as u8 (the VNNI and u8s8 kernels' activations).
void to_u8(const int8_t* x, uint8_t* y, int64_t n);
/// Short runs (a stem convolution's few channels per tap): widen and to_u8 of
/// one 32-byte vector, reading 16 (widen) or 32 bytes at x and writing 32 at y
/// whatever the run's length; the caller makes sure both lie in its buffers and
/// writes the bytes past the run again later.
void widen16(const int8_t* x, int16_t* y, int32_t zp);
void to_u8_32(const int8_t* x, uint8_t* y);

/// vpmaddubsw (AVX2, no VNNI needed): u8 x s8 pairs summed into int16, which
/// saturates unless each pair is safe: 7-bit weights ([-63, 63]: 2 * 255 * 63
/// fits int16), or 8-bit ones paired and fixed (pair_fix.hpp). Twice the
/// products per multiply instruction of gemm_tile.
inline constexpr int kTileMU8S8 = 4;
/// As gemm_tile_vnni (u8 rows, V packed [k4][16][4] int8, bias with the
/// (128 + zero_point) * sum(w) correction), V's pairs safe; then the block's
/// nfix fixes added to the int32 sums (fix.k: a position in the rows).
void gemm_tile_u8s8(int mr, const uint8_t* u, int64_t ldu, const int8_t* v, int64_t k4, const Epilogue& ep, int8_t* dst,
                    int64_t ldd, int nvalid, const pair_fix::PairFix* fixes = nullptr, int64_t nfix = 0);
/// dst (mr rows, k16 bytes each) = the rows of u (`ldu` apart) in a block's
/// pairing: position p of each group of 16 reads index perm[p] of that group.
void permute_rows(int mr, const uint8_t* u, int64_t ldu, const uint8_t* perm, int64_t k16, uint8_t* dst);

// AVX-VNNI (qint8_kernels_vnni.cpp, built with -mavxvnni): vpdpbusd, u8 x s8.
/// Whether this CPU runs the AVX-VNNI kernels (defined in qint8.cpp, like avx2_usable()).
bool vnni_usable();
/// Most rows of a VNNI GEMM tile (12 accumulators: vpdpbusd needs no product register).
inline constexpr int kTileMVnni = 6;
/// As gemm_tile, with U as u8 rows (q + 128, K padded with zeros to 4*k4) and
/// V packed as [k4][16][4] int8 (64-byte aligned); the caller's bias holds
/// -(128 + zero_point) * sum(w) so that the accumulators equal gemm_tile's.
void gemm_tile_vnni(int mr, const uint8_t* u, int64_t ldu, const int8_t* v, int64_t k4, const Epilogue& ep, int8_t* dst,
                    int64_t ldd, int nvalid);

/// Depthwise convolution of `npix` output pixels over all channels (NHWC):
/// pixel p's tap t reads the c int8 values at taps[t] + p * steps[t] (padding:
/// a row of the input's zero point, step 0), as they are (the caller's bias
/// holds -zero_point * sum(w)); w: packed weights [ceil(ntaps/2)][cpad][2]
/// int16 in the order of dw_pack_index; bias/mult per channel in the same
/// permuted order, cpad of them (cpad: multiple of 16). Pixel p's outputs go
/// to dst + p * dst_step.
void depthwise_pixels(const int8_t* const* taps, const int64_t* steps, int ntaps, int64_t npix, int64_t c, int64_t cpad,
                      const int16_t* w, const Epilogue& ep, int8_t* dst, int64_t dst_step);
/// Where channel `ch` of a tap pair lies in the depthwise packing (in int16 pairs within a 16-channel block).
int dw_pack_index(int ch);

/// Winograd F(2x2, 3x3) (cpu:qint8:nhwc/winograd), exact in integers: the
/// input transform Bᵀ d B has entries 0 and ±1 (|v| <= 4 * 255 on int8 minus
/// the zero point), the weight transform is scaled to integers, (2G) g (2G)ᵀ
/// (|u| <= 9 * 127), so the int32 products are exact and Aᵀ m A is 4 times the
/// convolution's exact dot products (int32 sums that wrap on the way end equal
/// to it while 4 * 9 * C * 255 * 127 fits int32).
/// Input transform of one 4x4 patch, channels last: taps[4 * i + j] is input
/// pixel (i, j)'s `c` channels (null: padding, a real 0). v[p * ldp + ch] (p < 16, ch < c) as int16.
void winograd_input(const int8_t* const* taps, int64_t c, int32_t zp, int16_t* v, int64_t ldp);
/// Output transform of one tile for 16 output channels: m[p * ldp + lane] (p < 16)
/// -> y = Aᵀ m A / 4, then the epilogue; output (r, s) of the 2x2 goes to dst[2r + s]
/// (null: outside the output), its first nvalid channels.
void winograd_output(const int32_t* m, int64_t ldp, const Epilogue& ep, int8_t* const* dst, int nvalid);

/// y = clamp(round(float(x - zx) * m) + zy, lo, hi), elementwise.
void requant(const int8_t* x, int8_t* y, int64_t n, int32_t zx, float m, int32_t zy, int32_t lo, int32_t hi);
/// y = clamp(round(float(a - za) * ma + float(b - zb) * mb) + zy, lo, hi), elementwise (fma).
void add_requant(const int8_t* a, const int8_t* b, int8_t* y, int64_t n, int32_t za, float ma, int32_t zb, float mb,
                 int32_t zy, int32_t lo, int32_t hi);
/// y = clamp(round(float(a - za) * float(b - zb) * m) + zy, -128, 127), elementwise.
void mul_requant(const int8_t* a, const int8_t* b, int8_t* y, int64_t n, int32_t za, int32_t zb, float m, int32_t zy);
/// y[i] = clamp(round(float(x[i] - zx) * m[i]) + zy, -128, 127): a multiplier per element (per channel).
void requant_each(const int8_t* x, int8_t* y, int64_t n, int32_t zx, const float* m, int32_t zy);
/// acc[i] = max(acc[i], x[i]).
void max_s8(int8_t* acc, const int8_t* x, int64_t n);
/// acc[i] += x[i] (int32 accumulators).
void sum_s8(int32_t* acc, const int8_t* x, int64_t n);
/// Sum and maximum of n int8 values.
int32_t sum_all_s8(const int8_t* x, int64_t n);
int8_t max_all_s8(const int8_t* x, int64_t n);
/// y[i] = clamp(round(float(acc[i] - count*zx) * m) + zy, -128, 127).
void sum_requant(const int32_t* acc, int8_t* y, int64_t n, int32_t bias, float m, int32_t zy);

/// y[i] = table[uint8(x[i])]: a 256-entry table (activations and requantisations
/// by table), 32 bytes at a time: 16 pshufb lookups of 16 entries, picked by the high nibble.
void lookup(const int8_t* x, int8_t* y, int64_t n, const int8_t* table);

/// Scalar definitions of the elementwise formulas above (tails and tests use them).
int8_t requant_one(int32_t v, float m, int32_t zy, int32_t lo, int32_t hi);

}  // namespace softneuro::qint8
