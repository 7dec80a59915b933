// Inner kernel of cpu/nbits_dense (src/routines/cpu/nbits_dense.cpp): a few
// activation rows against blockwise-quantised weight rows, the decode step of
// an LLM whose file holds 4-bit weights. The AVX2 form is in
// nbits_dense_kernels_avx2.cpp (built with -mavx2 -mfma; callers check the CPU
// first), the portable one in nbits_dense.cpp. Plain types only here.
//
// Arithmetic: W[o][k] = (q[o][k] - z[o][b]) * s[o][b], b = k / block, so
//   y[m][o] = sum_b s[o][b] * (sum_{k in b} q[o][k] x[m][k] - z[o][b] * xsum[m][b])
// with xsum[m][b] the sum of row m's x over block b: one convert and one FMA
// per code, the zero point once per block.
#pragma once

#include <cstdint>

namespace softneuro::cpu::nbits {

/// The most activation rows the row kernel takes at once.
inline constexpr int64_t kMaxRows = 4;

/// The weights as stored: codes [n][k] (one per byte, int8 where `is_signed`,
/// else uint8; or `packed`: 0 to 15, two per byte as DType::quint4 lays them
/// out, k a multiple of 32), per block of `block` along k a scale and a zero point (none:
/// zeros), [n][blocks].
struct Weights {
  const uint8_t* codes = nullptr;
  bool is_signed = false;
  bool packed = false;
  int64_t n = 0, k = 0, block = 0, blocks = 0;
  const float* scale = nullptr;
  const int32_t* zero = nullptr;
  /// For the int8 kernel (a decode step streams what it reads): the zero points
  /// as bytes (a quarter of the bytes; null where one is outside [0, 255]),
  /// or `uniform_zero` where every block has the same one (a symmetric file's
  /// default: nothing to stream).
  const uint8_t* zero_bytes = nullptr;
  bool uniform_zero = false;
};

/// y[m][o] for m < rows (<= kMaxRows) and o in [o0, o1) as above, no bias: x
/// row m at x + m * k, its block sums at xsum + m * blocks, y row m at y + m * ldy.
using RowsKernel = void (*)(const Weights& w, int64_t o0, int64_t o1, const float* x, int64_t rows, const float* xsum,
                            float* y, int64_t ldy);

/// The AVX2+FMA kernel (defined in the AVX2 file: call only on a CPU that has it).
RowsKernel unchecked_rows_avx2();

// The int8 form, where the file asks for it (MatMulNBits's accuracy_level 4,
// codes of at most 4 bits): each block of a row of x quantised to int8 as
// ONNX Runtime's CompInt8 does (scale amax / 127, codes round-half-even of
// x * 127 / amax), then per block an exact integer sum of codes times x codes:
//   y[o] = sum_b s[o][b] * xs[b] * (sum_{k in b} q[o][k] xq[k] - z[o][b] * xsum[b])
// with xsum[b] the sum of the block's x codes.

/// One row of x (k values) per block of `block`: codes xq, scales xs, code sums xsum.
void quantize_row(const float* x, int64_t k, int64_t block, int8_t* xq, float* xs, int32_t* xsum);
/// y[m][o] for m < rows and o in [o0, o1) from quantised rows of x (no bias):
/// row m's codes at xq + m * ldq, its scales and code sums at xs, xsum + m *
/// blocks, y row m at y + m * ldy. Codes at most 15.
using Int8RowsKernel = void (*)(const Weights& w, int64_t o0, int64_t o1, const int8_t* xq, int64_t ldq, const float* xs,
                                const int32_t* xsum, int64_t rows, float* y, int64_t ldy);
Int8RowsKernel unchecked_int8_rows_avx2();
/// The AVX-512 VNNI kernel, for packed codes (two a byte) in blocks of 32 or of a
/// multiple of 64 (defined in its own file: call only on a CPU that has it).
Int8RowsKernel unchecked_int8_rows_avx512vnni();

/// Prompts in int8 (packed codes, blocks a multiple of 32): `rows` computes
/// y[m][o] for m < rows, o in [o0, o1) as Int8RowsKernel does, each strip of
/// weight rows read once for up to `max_rows` rows of x, laid out by
/// panel_layout_x; `scratch` (panel_scratch_bytes(w) bytes) its own.
struct Int8PanelKernel {
  int max_rows = 0;
  void (*rows)(const Weights& w, int64_t o0, int64_t o1, const int32_t* xi, const float* xs, const int32_t* xsum,
               int64_t rows, float* y, int64_t ldy, uint8_t* scratch) = nullptr;
};
/// The quantised rows of x as the strip kernels read them (k / 4 dwords a row,
/// at xi): in passes of `max_rows` rows, then of halves (a pass of mx rows from
/// m0 at xi + m0 * k / 4: per group of 32 its 8 dwords of the mx rows, dword j of
/// row m at j * mx + m).
void panel_layout_x(const int8_t* xq, int64_t rows, int64_t ldq, int64_t k, int max_rows, int32_t* xi);
/// The passes panel_layout_x lays out: mx rows from m0, for each.
template <class F>
void for_each_pass(int64_t rows, int max_rows, F&& pass) {
  for (int64_t m0 = 0; m0 < rows;) {
    int64_t mx = max_rows;
    while (mx > rows - m0) mx /= 2;
    pass(m0, mx);
    m0 += mx;
  }
}
Int8PanelKernel unchecked_int8_panel_avx512vnni();
/// The same in AVX2 (vpmaddubsw, strips of 8 weight rows, up to 4 rows of x a pass).
Int8PanelKernel unchecked_int8_panel_avx2();
/// Scratch a thread of the panel kernel needs: a strip's scales and zero points
/// per block, and a last strip's codes padded to 16 rows.
inline int64_t panel_scratch_bytes(const Weights& w) { return w.blocks * 16 * 4 * 2 + 16 * (w.k / 2); }

/// Weight rows [o, o + rows) (rows <= 16) at k in [k0, k0 + kc) as float32
/// values (q - z) * s, transposed: out[(k - k0) * ld + j] for j < 16, zeros
/// for j >= rows (a GEMM's packed B panel from the codes). Needs block and k0
/// multiples of 8 and k0 + kc <= k; kc a multiple of 8 or reaching k.
using PanelKernel = void (*)(const Weights& w, int64_t o, int64_t rows, int64_t k0, int64_t kc, float* out, int64_t ld);
PanelKernel unchecked_panel_avx2();

}  // namespace softneuro::cpu::nbits
