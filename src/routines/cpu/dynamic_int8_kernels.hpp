// Inner kernels of cpu/dynamic_int8 (src/routines/cpu/dynamic_int8.cpp),
// implemented in dynamic_int8_kernels_avx2.cpp (built with -mavx2 -mfma) and
// dynamic_int8_kernels_avx512vnni.cpp; callers check avx2_usable() and
// vnni512_usable() first. Plain types only in this interface.
//
// Arithmetic: an activation row r is quantised at run time to int16 values
// u = round(x / s_r), s_r = max|x_r| / 255 (nine bits: vpmaddwd takes any
// int16); weights per output channel to int8 w = round(W / s_w) in
// [-127, 127], stored as int8 and widened on load (a quarter of float32's
// bytes: a decode step's dense layers stream their weights once). vpmaddwd
// sums products in pairs into int32 exactly: |u0*w0 + u1*w1| <= 64770, so K up
// to kMaxK keeps every accumulator exact. y = acc * s_r * s_w + bias.
#pragma once

#include "routines/cpu/pair_fix.hpp"

#include <cstdint>

namespace softneuro::dynamic_int8 {

/// Whether this CPU runs the kernels (defined in dynamic_int8.cpp: the
/// compiler may use AVX2 anywhere in the kernels' file, the check included).
bool avx2_usable();

/// Whether this CPU runs the AVX512-VNNI kernel (AVX-512 F/BW/VL/DQ and VNNI).
bool vnni512_usable();

/// Output channels per packed weight block: [k2][16][2] int8, 32 bytes per K pair.
inline constexpr int kBlockN = 16;
/// Most rows of a tile: 4 rows x 16 columns are 8 ymm accumulators.
inline constexpr int kTileM = 4;
/// The longest K whose int32 accumulators stay exact (65536 pairs of 64770 overflow).
inline constexpr int64_t kMaxK = 65536;
/// The largest |u| of a quantised activation.
inline constexpr float kActMax = 255.0f;

/// Row r < m of x (`ldx` floats apart, k values) to u (ldu int16 apart, k
/// values then zeros to an even count) and its scale s[r] (0 for a row of
/// zeros). False where a row holds NaN or infinity (nothing defined to round).
bool quantize_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int16_t* u, int64_t ldu, float* s);

/// y[r][j] = float(sum_k u[r][k] * w[k][j]) * xs[r] * ws[j] + bias[j] for
/// r < mr (1..kTileM) and j < nvalid (1..16); row r of y at y + r * ldy.
/// w: one packed block, k2 K pairs; ws, bias: 16 values (bias may be null).
void gemm_tile(int mr, const int16_t* u, int64_t ldu, const int8_t* w, int64_t k2, const float* xs, const float* ws,
               const float* bias, float* y, int64_t ldy, int nvalid);

// The u8s8 form (routine parameter u8s8=1): vpmaddubsw takes twice the
// products per instruction of vpmaddwd, exact while every pair sum fits int16:
// activations as u8 per row (q = round(x / s) + zp in [0, 255]), weights on
// 7 bits ([-63, 63]: 2 * 255 * 63 = 32130). y = (acc - zp * colsum) * s * s_w + bias.
/// Weights of the u8s8 form: [k4][16][4] int8, 64 bytes per K quad.
inline constexpr int kU8s8Qmax = 63;

/// Row r < m of x to u8 values q in [0, top] (ldq bytes apart, k values then
/// zeros to a multiple of 4), its scale s[r] and zero point zp[r] (the range
/// holds 0). False where a row holds NaN or infinity.
bool quantize_rows_u8(const float* x, int64_t m, int64_t k, int64_t ldx, uint8_t* q, int64_t ldq, float* s, int32_t* zp,
                      int top = 255);

/// dynamic_quant_dense's 8-bit weights without VNNI: pairs made safe in K's
/// own order, what was cut added back by the tile (pair_fix.hpp).
using PairFix = pair_fix::PairFix;

/// As gemm_tile, over k4 K quads of u8 rows and a u8s8 weight block, with
/// each row's zero point times the block's column sums (colsum) taken off
/// and the block's nfix fixes added (none for 7-bit weights).
void gemm_tile_u8s8(int mr, const uint8_t* q, int64_t ldq, const int8_t* w, int64_t k4, const float* xs,
                    const int32_t* zp, const int32_t* colsum, const float* ws, const float* bias, float* y, int64_t ldy,
                    int nvalid, const PairFix* fixes = nullptr, int64_t nfix = 0);

// Where AVX512-VNNI is usable the u8 form's weights keep 8 bits ([-127, 127]):
// vpdpbusd sums its products in int32 without saturation (exact for K <= kMaxK).
inline constexpr int kVnniQmax = 127;
/// Rows and 16-column weight blocks of a VNNI tile: 6 x 4 zmm accumulators.
inline constexpr int kTileMVnni = 6;
inline constexpr int kTileBlocksVnni = 4;

/// As gemm_tile_u8s8 over mr (1..kTileMVnni) rows and nb (1..kTileBlocksVnni)
/// adjacent weight blocks, block_bytes apart, with 8-bit weights; colsum, ws
/// and bias hold nb * 16 values; the last block's first nlast (1..16) columns
/// are written, the others' all 16.
void gemm_tile_vnni(int mr, int nb, const uint8_t* q, int64_t ldq, const int8_t* w, int64_t block_bytes, int64_t k4,
                    const float* xs, const int32_t* zp, const int32_t* colsum, const float* ws, const float* bias,
                    float* y, int64_t ldy, int nlast);

// dynamic_quant_dense (ONNX Runtime's quantize_dynamic): one scale and zero
// point for the whole input, q = clamp(nearbyint(x / scale) + zp, 0, 255)
// (a division, as ONNX Runtime rounds), the rows then multiplied exactly.
/// Rows of x to u8 q (ldq bytes apart, zeros to a multiple of 4), for
/// gemm_tile_vnni. False where a value is NaN or infinite.
bool quantize_tensor_u8(const float* x, int64_t m, int64_t k, int64_t ldx, uint8_t* q, int64_t ldq, float scale,
                        int32_t zp);
/// quantize_tensor_u8 for gemm_tile_u8s8 on AVX2 (the same values).
bool quantize_tensor_u8_avx2(const float* x, int64_t m, int64_t k, int64_t ldx, uint8_t* q, int64_t ldq, float scale,
                             int32_t zp);
/// The same as int16 values q - zp (ldu apart, zeros to an even count), for gemm_tile.
bool quantize_tensor(const float* x, int64_t m, int64_t k, int64_t ldx, int16_t* u, int64_t ldu, float scale,
                     int32_t zp);

// Operands of cpu/int8_attention in the u8s8 and VNNI weight blocks ([k4][16][4]
// int8 per 16 columns, block_bytes apart, zeroed beforehand): int8 per column
// in [-qmax, qmax] (kVnniQmax for vpdpbusd, kU8s8Qmax for vpmaddubsw) with
// scale[c] = max |column| / qmax and sum[c] its integers' sum. AVX2 (the
// packing is O(keys x features), beside the products' O(queries x keys x features)).
// False where a value is NaN or infinite.
/// Column c = row c of x (n rows of depth floats, ldx apart: the keys).
bool pack_rows_int8(const float* x, int64_t n, int64_t depth, int64_t ldx, int8_t* w, int64_t block_bytes, float* scale,
                    int32_t* sum, int qmax);
/// Column c = column c of x (depth rows of n floats, ldx apart: the values' channels).
bool pack_columns_int8(const float* x, int64_t depth, int64_t n, int64_t ldx, int8_t* w, int64_t block_bytes,
                       float* scale, int32_t* sum, int qmax);
/// Rows of values in [0, 1] (p, ldp apart) to u8 round(p * 255), zeros to a
/// multiple of 4 (q, ldq apart). False where a row holds NaN.
bool quantize_unit_rows(const float* p, int64_t rows, int64_t n, int64_t ldp, uint8_t* q, int64_t ldq);

}  // namespace softneuro::dynamic_int8
