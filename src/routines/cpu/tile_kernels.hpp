// The AMX kernels (tile_kernels_amx.cpp) of cpu:bfloat16/tile_attention
// (bfloat16 operands, float32 accumulators) and cpu[:bfloat16]/tile_dense
// (int8 operands, int32 accumulators), in the layouts the tiles load. Call
// only where the CPU has AMX (BF16 and INT8) and AVX-512 BF16 and the process
// may use the tile registers (the routines check: core::amx_tiles_permitted).
// Internal to src/routines/cpu.
#pragma once

#include <cstdint>

namespace softneuro::cpu::tile {

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
/// Kᵀ, K packed by pack_keys; keys a multiple of 32. With row_max, each row's
/// largest score over its first max_keys keys too (read while in L1).
void scores(const uint16_t* q, int64_t d_pad, const uint16_t* k_packed, int64_t keys, float* s, int64_t lds,
            int64_t max_keys = 0, float* row_max = nullptr);
/// O[32, dv_pad] (row stride dv_pad) = P[32, keys] (bf16, row stride ldp) · V,
/// V packed by pack_values for keys_pad keys; keys a multiple of 32.
void values(const uint16_t* p, int64_t ldp, const uint16_t* v_packed, int64_t keys, int64_t keys_pad, int64_t dv_pad,
            float* o);

/// One query row's probabilities as the A operand of P·V: t = s[j] * scale +
/// (bias ? bias[j] : add) for j < n, p[j] = bf16(exp(t - max t)), exactly 0 where
/// exp underflows and for n <= j < n_pad; *max_out = max t. Returns the float32
/// sum of the exponentials, NaN where some t is NaN (the caller then computes
/// the row as softmax does). score_max: max s[j] over j < n where known (scores'
/// row_max), read instead of a pass over the row without a bias and with scale > 0.
float softmax_row(const float* s, const float* bias, float add, int64_t n, float scale, uint16_t* p, int64_t n_pad,
                  float* max_out, const float* score_max = nullptr);
/// y[i] = bf16(x[i]) rounded to nearest even, i < n; y[i] = 0 for n <= i < n_pad.
void to_bf16(const float* x, uint16_t* y, int64_t n, int64_t n_pad);
/// y[i] = bf16(x[i] * scale), i < n, at element stride `stride` of y.
void scaled_to_bf16(const float* x, float scale, uint16_t* y, int64_t stride, int64_t n);
/// y[i] = float(x[i]), i < n.
void from_bf16(const uint16_t* x, float* y, int64_t n);

/// The activations dense_panel applies itself (core::Activation's kinds of the
/// same names; NaN kept as core::apply_activation keeps it).
enum class Act { none, relu, clip, hardswish, hardsigmoid };

/// What dense_panel applies to each value after the sums: scaled back, the bias,
/// the activation, then * scale + shift.
struct Epilogue {
  Act act = Act::none;
  float p0 = 0, p1 = 0;  ///< clip's bounds; hardsigmoid's alpha and beta
  float scale = 1, shift = 0;
  /// Any other activation (gelu, silu, sigmoid: the routine's vec kernels),
  /// with the affine after it, instead of `act` and the affine here: called
  /// on a strip's float32 values at once.
  void (*activate)(const void* context, float* x, int64_t n) = nullptr;
  const void* context = nullptr;
};

/// Dense: k values per int8 tile row step.
constexpr int64_t kDepth = 64;
/// One activation row quantised symmetrically: q = round(x / s) in [-127, 127]
/// for the k values, 0 up to k_pad; the row in chunks of kDepth values, chunk
/// j at q + j * chunk_stride (kDepth: a plain row; 32 * kDepth: the row of a
/// packed strip). Returns s = max |x| / 127 (0 for a row of zeros), or NaN
/// where the row holds NaN or an infinity.
float quantize_row(const float* x, int64_t k, int8_t* q, int64_t k_pad, int64_t chunk_stride);
/// Rows [0, m) of one panel of 32 output columns (the first `cols` written), in
/// one pass: y[r][c] = e((A[r] · B[c]) * xs[r] * ws[c] + bias[c]), float32 or
/// bf16 (`bf16`) at row stride ldy; A the packed strips of 32 int8 rows
/// (quantize_row's chunk_stride 32 * kDepth: per step of kDepth, the 32 rows'
/// chunks one after another); B two column tile streams b0, b1 of k_pad / kDepth
/// tiles each (tile ks: element (r, n, t) = W[n][ks * 64 + 4r + t]); `scratch`
/// 2 * 32 * 32 int32 (3 * 32 * 32 with `activate`). Each strip's products start
/// before the previous strip's epilogue runs, so that the vector work overlaps the tiles'.
void dense_panel(const int8_t* a, int64_t m, int64_t k_pad, const int8_t* b0, const int8_t* b1, const float* xs,
                 const float* ws, const float* bias, int64_t cols, const Epilogue& e, void* y, int64_t ldy, bool bf16,
                 int32_t* scratch);

}  // namespace softneuro::cpu::tile
