// The AMX kernels of cpu:bfloat16/tile_attention (tile_attention_amx.cpp):
// bfloat16 operands in the layouts the tiles load, float32 accumulators.
// Call only where the CPU has AMX-BF16 and AVX-512 BF16 and the process may
// use the tile registers (tile_attention.cpp checks both). Internal to
// src/routines/cpu.
#pragma once

#include <cstdint>

namespace softneuro::cpu::tile_attention {

/// Query rows per strip: two tiles of 16 rows.
constexpr int64_t kStripRows = 32;
/// Elements of one packed tile (16 rows of 64 bytes).
constexpr int64_t kTileElems = 512;

/// Loads this thread's tile configuration (every tile 16 rows of 64 bytes);
/// before the kernels below, on each thread that runs them.
void configure_tiles();
/// Releases the tile registers (the thread may run other AMX code after).
void release_tiles();

/// K [keys, d] (element strides key_stride, dim_stride) as the B operand of
/// Q·Kᵀ: tiles of 16 keys by 32 dims, tile (kb, s) at (kb * d_pad / 32 + s) * kTileElems,
/// pairs of dims side by side per key; keys past `keys` and dims past `d` are 0.
/// keys_pad and d_pad are multiples of 32.
void pack_keys(const uint16_t* k, int64_t key_stride, int64_t dim_stride, int64_t keys, int64_t d, int64_t keys_pad,
               int64_t d_pad, uint16_t* out);
/// V [keys, dv] as the B operand of P·V: tiles of 32 keys by 16 columns, tile
/// (g, ks) at (g * keys_pad / 32 + ks) * kTileElems, pairs of keys side by side
/// per column; zero past `keys` and `dv`. dv_pad is a multiple of 32.
void pack_values(const uint16_t* v, int64_t key_stride, int64_t col_stride, int64_t keys, int64_t dv, int64_t keys_pad,
                 int64_t dv_pad, uint16_t* out);

/// S[32, keys] (row stride lds floats) = Q[32, d_pad] (bf16, row stride d_pad) ·
/// Kᵀ, K packed by pack_keys; keys a multiple of 32.
void scores(const uint16_t* q, int64_t d_pad, const uint16_t* k_packed, int64_t keys, float* s, int64_t lds);
/// O[32, dv_pad] (row stride dv_pad) = P[32, keys] (bf16, row stride ldp) · V,
/// V packed by pack_values for keys_pad keys; keys a multiple of 32.
void values(const uint16_t* p, int64_t ldp, const uint16_t* v_packed, int64_t keys, int64_t keys_pad, int64_t dv_pad,
            float* o);

/// One query row's probabilities as the A operand of P·V: t = s[j] * scale +
/// (bias ? bias[j] : add) for j < n, p[j] = bf16(exp(t - max t)), exactly 0 where
/// exp underflows and for n <= j < n_pad; *max_out = max t. Returns the float32
/// sum of the exponentials, NaN where some t is NaN (the caller then computes
/// the row as softmax does).
float softmax_row(const float* s, const float* bias, float add, int64_t n, float scale, uint16_t* p, int64_t n_pad,
                  float* max_out);
/// y[i] = bf16(x[i]) rounded to nearest even, i < n; y[i] = 0 for n <= i < n_pad.
void to_bf16(const float* x, uint16_t* y, int64_t n, int64_t n_pad);
/// y[i] = bf16(x[i] * scale), i < n, at element stride `stride` of y.
void scaled_to_bf16(const float* x, float scale, uint16_t* y, int64_t stride, int64_t n);
/// y[i] = float(x[i]), i < n.
void from_bf16(const uint16_t* x, float* y, int64_t n);

}  // namespace softneuro::cpu::tile_attention
