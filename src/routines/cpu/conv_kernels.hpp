// Per-ISA inner kernels of our direct (direct.cpp) and depthwise
// (depthwise.cpp) float32 convolutions, in blocked layouts. Implemented in
// conv_kernels.inl, built twice: conv_kernels_avx2.cpp (-mavx2 -mfma, vectors
// of 8: nchw8c) and conv_kernels_avx512.cpp (AVX-512 F/BW/VL/DQ, vectors of 16:
// nchw16c). Plain types only; callers check the CPU first (kernels_for()).
#pragma once

#include "routines/cpu/gemm.hpp"

#include <cstddef>
#include <cstdint>

namespace softneuro::cpu::conv {

/// One register tile of the direct convolution: OCB output-channel blocks x W
/// output pixels of one output row, over `icbs` input-channel blocks.
///   x: input at (first ic block, the row of kernel row kh0, column col0), i.e.
///      row oh*sh - pad_top + kh0*dh, column ow0*sw - pad_left (which may lie
///      outside the input: the edge kernels then read zeros for it);
///      layout [icb][H][W][V] (the narrow kernels: a padded copy [H+pads][W+pads][kNarrowPx];
///      first_nhwc: the nhwc input, pixels x_px floats apart),
///      x_icb and x_row floats apart.
///   w: packed weights of this OCB group at its first ic block, layout
///      [icb][kh][kw][V ic][OCB][V oc], w_icb floats between ic blocks.
///   y: output at (first oc block, oh, ow0), layout [ocb][OH][OW][V], y_ocb apart
///      (the narrow kernels: pixels y_px apart, so also nhwc: y_ocb = V, y_px = OC).
struct DirectTile {
  const float* x = nullptr;
  const float* w = nullptr;
  float* y = nullptr;
  int64_t icbs = 0, x_icb = 0, x_row = 0, w_icb = 0, y_ocb = 0;
  int kh = 1, kw = 1, dh = 1, dw = 1, sw = 1;
  int kh0 = 0;                  ///< first kernel row inside the input (kh: one past the last)
  int64_t col0 = 0, w_in = 0;   ///< edge kernels: input column of pixel 0 at kw 0, input width
  const float* zeros = nullptr; ///< edge kernels: V zero floats, read for taps outside the input
  bool load_y = false;  ///< accumulate onto y (a later ic pass)
  bool last = false;    ///< apply bias + activation and zero the padded channels
  const float* bias = nullptr;  ///< OCB*V biases (zero-padded), or null
  int valid_last = 0;           ///< valid lanes of the tile's last oc block (V when full)
  int ic_valid = 0;  ///< narrow kernels: the input's channels (1..kNarrowPx)
  int64_t x_px = 0;  ///< first_nhwc: floats between input pixels (C)
  int64_t y_px = 0;  ///< narrow and first_nhwc: floats between output pixels (V blocked, OC in nhwc)
};

/// One register tile in assembly (AVX-512 or AVX2, gen_direct_asm.py): OCB output-channel
/// blocks x W output pixels accumulated over `icbs` input-channel blocks and `ntaps` taps
/// (B = the vector's bytes: 64, or 32 on AVX2).
///   y:     the tile's output: pixel i of oc block j at y + j*y_ocb_bytes + i*B bytes;
///          read first when `load` (the sums so far), written at the end;
///   x:     input of pixel 0 at the first ic block; tap t reads x + tap_x[t] bytes,
///          pixel i stride*B bytes further on; x_icb_bytes between ic blocks;
///   w:     packed weights [icb][tap][V ic][OCB][V oc] of the taps in tap_x order,
///          w_icb_bytes between ic blocks;
///   last:  0 raw sums; 1 + bias (OCB*V floats); 2 + bias, then clamped to [lo, hi];
///          3 + bias, then max(lo) only (relu);
///   last_steps: the last ic block's channels / 4, rounded up (1..V/4; its weights
///          still take V slots per tap: the rest are skipped);
///   x_row2_bytes, y_row_bytes: a two-row tile (asm_tile2r) also computes the W
///          pixels of the next output row: its input x_row2_bytes after the
///          first's, its output y_row_bytes after (accumulators [OCB][2][W]);
///          a split tile (asm_tile_split, split k) reads its pixels k.. x_row2_bytes
///          further than pixel k's place in a straight row (the next row's start);
///   tap flags: the low 2 bits of tap_x[t] (offsets are whole floats) say which
///          columns of tap t lie outside the input: 1 the first (of a tile of
///          one pixel: that pixel), 2 the last. Those pixels read `zeros`
///          instead, which then holds at least x_row2_bytes + B bytes of zeros.
/// The field order is the generator's (F_* offsets): keep both in step.
struct AsmTile {
  float* y = nullptr;
  const float* x = nullptr;
  const float* w = nullptr;
  const int64_t* tap_x = nullptr;
  int64_t ntaps = 0, icbs = 0, x_icb_bytes = 0, w_icb_bytes = 0;
  int64_t load = 0;
  int64_t y_ocb_bytes = 0;
  const float* bias = nullptr;
  float lo = 0, hi = 0;
  int64_t last = 0;
  int64_t last_steps = 4;
  int64_t x_row2_bytes = 0, y_row_bytes = 0;
  const float* zeros = nullptr;  ///< read only by taps with flags
  /// Split tiles: each tap prefetches Kernels::w_next_per_tap bytes from here on into L2
  /// (the next pass's weights; AsmRow spreads them over a pass's tiles).
  const float* w_next = nullptr;
  /// AVX-512 tiles' epilogue (last 4): hardswish's constants, as VAct uses them.
  float hs_add = 3.0f, hs_max = 6.0f, hs_mul = 1.0f / 6.0f;
  /// AVX-512 tiles: after the activation, y * scale + shift where `affine`.
  float scale = 1, shift = 0;
  int64_t affine = 0;
};
static_assert(offsetof(AsmTile, load) == 64 && offsetof(AsmTile, y_ocb_bytes) == 72 && offsetof(AsmTile, bias) == 80 &&
                  offsetof(AsmTile, lo) == 88 && offsetof(AsmTile, hi) == 92 && offsetof(AsmTile, last) == 96 &&
                  offsetof(AsmTile, last_steps) == 104 && offsetof(AsmTile, x_row2_bytes) == 112 &&
                  offsetof(AsmTile, y_row_bytes) == 120 && offsetof(AsmTile, zeros) == 128 &&
                  offsetof(AsmTile, w_next) == 136 && offsetof(AsmTile, hs_add) == 144 && offsetof(AsmTile, hs_max) == 148 &&
                  offsetof(AsmTile, hs_mul) == 152 && offsetof(AsmTile, scale) == 156 && offsetof(AsmTile, shift) == 160 &&
                  offsetof(AsmTile, affine) == 168,
              "gen_direct_asm.py reads AsmTile by offset");
using AsmTileFn = void (*)(const AsmTile&);

/// A first layer's register tile in assembly (AVX-512 or AVX2): nhwc, 3 input channels
/// read in place, dilation 1 (gen_direct_asm.py, first_fn). OCB blocks x W pixels.
///   y:     pixel i's OCB blocks at y + i*y_px_bytes (adjacent, a vector apart);
///   x:     input of pixel 0; kernel row r reads x + row_x[r] bytes, its kw*3 floats contiguous;
///   w:     packed weights [row][kw][3][OCB][V] from the first row read;
///   tiles: Kernels::asm_first_run only: that many tiles along the row, the next
///          one's input W*stride pixels further, its output W pixels (rows, kw: 3);
///   last:  1, 2 or 3 as AsmTile's (the bias always added).
struct AsmFirstTile {
  float* y = nullptr;
  const float* x = nullptr;
  const float* w = nullptr;
  const int64_t* row_x = nullptr;
  int64_t rows = 0, kw = 0, y_px_bytes = 0, tiles = 1;
  const float* bias = nullptr;
  float lo = 0, hi = 0;
  int64_t last = 0;
};
static_assert(offsetof(AsmFirstTile, rows) == 32 && offsetof(AsmFirstTile, kw) == 40 &&
                  offsetof(AsmFirstTile, y_px_bytes) == 48 && offsetof(AsmFirstTile, tiles) == 56 &&
                  offsetof(AsmFirstTile, bias) == 64 && offsetof(AsmFirstTile, lo) == 72 &&
                  offsetof(AsmFirstTile, hi) == 76 && offsetof(AsmFirstTile, last) == 80,
              "gen_direct_asm.py reads AsmFirstTile by offset");
using AsmFirstFn = void (*)(const AsmFirstTile&);
/// Most output-channel blocks of a tile, and a tile's index by its OCB in the
/// per-OCB tables of Kernels (asm_tile, asm_first, asm_max_w, tile_of).
constexpr int kMaxOcb = 4;
constexpr int ocb_index(int ocb) { return ocb - 1; }
/// Widest assembly tile of any OCB (the accumulator buffer's size).
constexpr int kMaxAsmW = 28;
/// Widest row of a two-row assembly tile (AVX-512 OCB 2: 2 x 2 x 7 accumulators; AVX2 OCB 1).
constexpr int kMaxAsm2rW = 7;
/// Widest split tile (Kernels::asm_tile_split).
constexpr int kMaxSplitW = 6;

/// One output row (or, for a flat 1x1 plane, one run of pixels) of the direct
/// convolution in assembly tiles, over one input-channel pass (AVX-512, AVX2).
///   x: input at (the pass's first ic block, the row of kernel row kh0, column 0),
///      [icb][rows][w_in][V], x_icb / x_row floats apart;
///   w: packed weights of the OC group at the pass's first ic block and tap kh0*kw;
///   y: output at (first oc block, the row, column 0), y_ocb floats between oc blocks.
/// Tiles whose taps reach outside the input's columns read a zero-padded copy.
struct AsmRow {
  const float* x = nullptr;
  const float* w = nullptr;
  float* y = nullptr;
  int64_t icbs = 0, x_icb = 0, x_row = 0, w_icb = 0, y_ocb = 0;
  int64_t ow = 0, w_in = 0;  ///< output pixels of the row; input columns
  int ocb = 1, tw = 1;       ///< oc blocks per tile (1, 2, 4); pixels per tile
  int kh_n = 1, kw = 1, dh = 1, dw = 1, sw = 1, pl = 0;  ///< kh_n: kernel rows inside the input
  bool load_y = false, last = false;
  const float* bias = nullptr;
  int valid_last = 0;
  int last_steps = 4;  ///< the pass's last ic block's channels / 4, rounded up (AsmTile)
  /// 2: two output rows at once (ocb Kernels::asm2r_ocb, ow <= kMaxAsm2rW, an input without
  /// edges): the second row's input x_row2 floats after the first's, its output y_row.
  int rows = 1;
  int64_t x_row2 = 0, y_row = 0;
  bool w_prefetch = true;  ///< the tiles prefetch their weights (Kernels::asm_tile's p)
  /// span_ow > 0: a plane of span_px pixels in output rows of span_ow, walked flat
  /// across its rows in span_tiles tiles of as even widths as whole pixels allow
  /// (tile i: pixels [i * span_px / span_tiles, (i + 1) * span_px / span_tiles),
  /// at most tw); the run is tiles [tile0, tile1). The input has no edges (a padded
  /// copy, or no padding): x at its row 0, column 0 (the pass's first ic block),
  /// x_row2 floats between the input of two output rows; y at the plane's pixel 0.
  /// Every tile is a split tile (Kernels::asm_tile_split, k: its pixels left in its
  /// row, at most all; tw <= span_ow, tw <= asm_split_max_w), which also prefetches
  /// a slice of the next pass's weights. The tiles' own epilogue only (the caller checks).
  int64_t span_ow = 0, span_px = 0, span_tiles = 0, tile0 = 0, tile1 = 0;
};
using AsmRowFn = void (*)(const AsmRow&, const gemm::Epilogue&);
/// Floats of the zero-padded copy an edge tile reads (per ic block at least
/// kh_n rows x ((kw-1)*dw + 1) pixels must fit, else the layer takes the other kernels).
constexpr int64_t kAsmEdgeFloats = 8192;
/// Floats of zeros the tap flags of an edge tile point at (AsmTile::zeros): a
/// two-row tile reads them x_row2 floats further too.
constexpr int64_t kAsmZeroFloats = 4096;
/// AsmTile's tap flags for the columns c0 + i * s (i < w) of one tap in an
/// input of w_in columns: 0 all inside, 1 the first outside (a tile of one
/// pixel: it), 2 the last, 3 both; -1 when another column is outside (the tile
/// then cannot run in place).
inline int edge_tap_flags(int64_t c0, int w, int s, int64_t w_in) {
  auto out = [&](int64_t c) { return c < 0 || c >= w_in; };
  if (w == 1) return out(c0) ? 1 : 0;
  if (w > 2 && (out(c0 + s) || out(c0 + int64_t(w - 2) * s))) return -1;  // the columns ascend
  return (out(c0) ? 1 : 0) | (out(c0 + int64_t(w - 1) * s) ? 2 : 0);
}

/// Floats per pixel of the padded input of the narrow kernels (inputs of at
/// most this many channels: a net's first layer), instead of a whole vector.
constexpr int kNarrowPx = 4;
using DirectFn = void (*)(const DirectTile&, const gemm::Epilogue&);

/// One output row of a depthwise convolution over one channel vector.
///   x: input of this channel vector at row 0 (pixels px floats apart, rows rx apart),
///   w: KH*KW weight vectors (V floats each), bias: V floats or null,
///   y: output row (pixels py apart). Channels past `valid` are zero in the
///   output (blocked) or not written (masked, nhwc).
struct DepthwiseRow {
  const float* x = nullptr;
  const float* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t h = 0, w_in = 0, px = 0, rx = 0, py = 0, ow = 0;
  int64_t ih0 = 0;  ///< oh*sh - pad_top
  int kh = 3, kw = 3, sh = 1, sw = 1, dh = 1, dw = 1, pl = 0;
  int valid = 0;       ///< valid channels of this vector (V when full)
  bool masked = false; ///< nhwc tail: load/store only `valid` lanes
};
using DepthwiseFn = void (*)(const DepthwiseRow&, const gemm::Epilogue&);

/// Output rows [oh0, oh1) of one channel vector of a depthwise convolution,
/// dilation 1, square K x K taps, column stride S (kernels for K 3, 5 and S
/// 1, 2), row stride `sh` (any): 3x3's weight vectors stay in registers for the whole
/// block; interior pixels several at a time with no bound checks, edge pixels
/// checking each tap.
///   x: the channel vector's first input pixel, y: its first output pixel; pixels
///   V floats apart in a blocked layout ([H][W][V] planes); in nhwc
///   (depthwise_block_nhwc) px (x) and py (y), C (whole vectors only: every
///   lane is loaded and stored);
///   w: K*K weight vectors, bias: V floats or null.
struct DepthwiseBlock {
  const void* x = nullptr;  ///< float, or bfloat16 bits (depthwise_block_nhwc_bf16)
  const float* w = nullptr;
  const float* bias = nullptr;
  void* y = nullptr;
  int64_t h = 0, w_in = 0, ow = 0, oh0 = 0, oh1 = 0;
  int64_t px = 0, py = 0;
  int pt = 0, pl = 0;
  int sh = 1;     ///< the row stride
  int valid = 0;  ///< valid channels of this vector; lanes past it are written 0
};
using DepthwiseBlockFn = void (*)(const DepthwiseBlock&, const gemm::Epilogue&);

/// The direct kernels of one ISA: tile shapes (oc blocks, pixels) they are
/// instantiated for, for strides 1, 2 and any (runtime).
struct Kernels {
  const char* isa = "";
  int vec = 0;
  static constexpr int kMaxTiles = 8;
  int ntiles = 0;
  int tile_ocb[kMaxTiles] = {}, tile_w[kMaxTiles] = {};
  /// direct[t][s]: tile t, stride s = 0 (any), 1, 2.
  DirectFn direct[kMaxTiles][3] = {};
  /// direct_edge[t][s]: the same for tiles with taps outside the input's columns.
  DirectFn direct_edge[kMaxTiles][3] = {};
  /// narrow[t][s]: the same for inputs of at most kNarrowPx channels, whose
  /// padded copy holds kNarrowPx floats per pixel (DirectTile::ic_valid read).
  DirectFn narrow[kMaxTiles][3] = {};
  /// first_nhwc[t][s]: a first layer in nhwc, read in place (x_px = C), dilation 1:
  /// weights [kh][kw][C][OCB][V]; edge tiles need a zero-padded patch (no checks).
  DirectFn first_nhwc[kMaxTiles][3] = {};
  /// first_nhwc_rgb[t][s]: the same for C = 3 (strides known at compile time).
  DirectFn first_nhwc_rgb[kMaxTiles][3] = {};
  /// pointwise[t][s]: the same for 1x1 unpadded convolutions (kh0 = 0, kh = kw = 1, never an edge).
  DirectFn pointwise[kMaxTiles][3] = {};
  // The assembly tables below are filled by the code gen_direct_asm.py writes
  // (build/generated/asm/routines/cpu/direct_asm_{avx512,avx2}.inc), one line per
  // entry naming its function: asm_tile_<OCB>x<W>_s<stride>[_split<k>][_l2] (_l2:
  // without the per-step weight prefetch, p = 0), asm_tile2r_..., asm_first_...,
  // asm_first_run_...; e.g. asm_tile[1][3][0][6] = &asm_tile_4x6_s1.
  /// asm_tile[p][o][s][w]: p = 1 each channel step prefetches its weights ahead
  /// (streamed weights), 0 not (weights that stay in cache; AVX2 only, see
  /// w_prefetch_choice); OCB = o + 1 (1 to 4, see ocb_index), stride 1, 2 (s = 0, 1),
  /// w = 1..asm_max_w[o] pixels; null where not built.
  AsmTileFn asm_tile[2][kMaxOcb][2][kMaxAsmW + 1] = {};
  int asm_max_w[kMaxOcb] = {};
  /// asm_tile2r[p][s][w]: two-row tiles, OCB = asm2r_ocb, w = 1..kMaxAsm2rW pixels per row;
  /// they read an input without edges (AsmRow::rows).
  AsmTileFn asm_tile2r[2][2][kMaxAsm2rW + 1] = {};  ///< [p][s][w], p as in asm_tile
  /// Whether asm_tile[0] differs from asm_tile[1] (AVX2); on AVX-512 both are
  /// the prefetching tiles, which measured the same either way.
  bool w_prefetch_choice = false;
  int asm2r_ocb = 0;  ///< 2 on AVX-512, 1 on AVX2 (16 registers); 0: none
  /// asm_tile_split[p][o][s][w][k]: a tile of w pixels whose first k (1..w; w: all)
  /// end an output row and the rest start the next (AsmTile's x_row2_bytes,
  /// AsmRow::span_ow), its taps prefetching AsmTile::w_next; p, o, s as in
  /// asm_tile, w from asm_split_min_w[o] to asm_split_max_w[o] (0: none for that OCB).
  AsmTileFn asm_tile_split[2][kMaxOcb][2][kMaxSplitW + 1][kMaxSplitW + 1] = {};
  int asm_split_max_w[kMaxOcb] = {}, asm_split_min_w[kMaxOcb] = {};
  int64_t w_next_per_tap = 0;  ///< bytes each tap of a split tile prefetches at AsmTile::w_next
  /// asm_first[o][s][w]: the first-layer tiles (AsmFirstTile), indexed as asm_tile.
  AsmFirstFn asm_first[kMaxOcb][2][kMaxAsmW + 1] = {};
  /// asm_first_run[o][s][w]: a run of AsmFirstTile::tiles such tiles of a 3x3 kernel
  /// (3 rows read), its 27 channel steps unrolled; built for ow_tile's choices
  /// only (gen_direct_asm.py FIRST_RUN_W), null for other widths.
  AsmFirstFn asm_first_run[kMaxOcb][2][kMaxAsmW + 1] = {};
  /// tile_of[o][w]: the intrinsic tile of OCB (o as in asm_tile) x w pixels, -1 when none.
  int tile_of[kMaxOcb][kMaxAsmW + 1] = {};
  AsmRowFn asm_row = nullptr;  ///< null where the tiles are not built
  DepthwiseFn depthwise = nullptr;
  /// depthwise_block[k][s]: k = 0 for 3x3, 1 for 5x5; s = 0 for stride 1, 1 for stride 2.
  DepthwiseBlockFn depthwise_block[2][2] = {};
  /// 5x5, stride 1, pixels DepthwiseBlock::px / py apart (nhwc).
  DepthwiseBlockFn depthwise_block_nhwc = nullptr;
  /// The same in bfloat16 (x and y; weights, sums and the epilogue in
  /// float32), [k][s] as depthwise_block's.
  DepthwiseBlockFn depthwise_block_nhwc_bf16[2][2] = {};
  /// The same on 32 channels (AVX-512; null elsewhere), each 32 channels'
  /// weights [tap][16 even channels][16 odd ones] and bias [even][odd] floats:
  /// 64 bytes of input widen into the even and odd channels' vectors by a
  /// shift and a mask, and each input column widens once for the pixels it reaches.
  DepthwiseBlockFn depthwise_block_nhwc_bf16_32[2][2] = {};
};

/// The AVX2 (V=8) and AVX-512 (V=16) kernels; nullptr when the CPU lacks the ISA.
const Kernels* kernels_avx2();
const Kernels* kernels_avx512();
/// The same, defined in the per-ISA files: call only once the CPU is known to
/// have the ISA (the compiler may use its instructions anywhere in those files).
const Kernels* unchecked_kernels_avx2();
const Kernels* unchecked_kernels_avx512();
/// Sets k's kernels that have an AVX512_BF16 build to it (conv_kernels_avx512bf16.cpp).
void unchecked_native_bf16_kernels(Kernels& k);

}  // namespace softneuro::cpu::conv
