// cpu:float32:nchw16c/direct, cpu:float32:nchw8c/direct: our direct convolution
// in the blocked layouts, on register tiles of output-channel blocks x output
// pixels (AVX-512 or AVX2 tiles in inline assembly from gen_direct_asm.py for
// strides 1 and 2, intrinsics otherwise); cpu:float32:nhwc/direct for first
// layers of at most 4 input channels. Weights packed once in prepare; tasks over
// (image, output-channel group, block of rows) on the library's pool. Groups: 1
// or whole blocks per group. Bias and fused activation in the epilogue.
// The layouts, the passes, every routine parameter and their measurements:
// docs/routines/direct.md.
#include "routines/cpu/conv_kernels.hpp"
#include "routines/cpu/f32_common.hpp"

#include "core/layer_types.hpp"
#include "core/prepared_weights.hpp"
#include "core/log.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <tuple>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace softneuro {
namespace {

using core::Window2d;
namespace conv = cpu::conv;

/// Any padding (the layers where input_mode's padded copy applies).
bool padded(const Window2d& g) { return g.pt > 0 || g.pb > 0 || g.pl > 0 || g.pr > 0; }

/// The kernel rows [kh0, kh1) inside the input rows [lo, hi) for both output
/// rows first and last (input row of output row r, kernel row k: r*sh - top + k*dh).
std::pair<int64_t, int64_t> kernel_rows(const Window2d& g, int64_t first, int64_t last, int64_t top, int64_t lo,
                                        int64_t hi) {
  const int64_t ih0 = first * g.sh - top, ih_last = last * g.sh - top;
  int64_t kh0 = 0, kh1 = g.kh;
  while (kh0 < kh1 && ih_last + kh0 * g.dh < lo) ++kh0;
  while (kh1 > kh0 && ih0 + (kh1 - 1) * g.dh >= hi) --kh1;
  return {kh0, kh1};
}

/// Whether the assembly tiles compute the edges of a row in place (no padded
/// copy): only its first and last columns may lie outside the input, per tap
/// (AsmTile's tap flags; pads of at most the stride, as 3x3 pad 1). Then so
/// does any tile within the row.
bool columns_in_place(const Window2d& g) {
  for (int64_t kw = 0; kw < g.kw; ++kw)
    if (conv::edge_tap_flags(kw * g.dw - g.pl, static_cast<int>(g.ow), static_cast<int>(g.sw), g.w) < 0) return false;
  return true;
}

/// Whether two-row tiles (rows of ow <= kMaxAsm2rW) read the input in place:
/// the columns in place, and the zeros of an edge column cover the second row's offset.
bool rows_in_place(const Window2d& g, int64_t v) {
  return columns_in_place(g) && g.sh * g.w * v + v <= conv::kAsmZeroFloats;
}

/// For each output row r but the last: whether rows r and r + 1 read the same
/// kernel rows of the input (without the padded copy, a two-row tile pairs only those).
std::vector<char> same_kernel_rows(const Window2d& g) {
  std::vector<char> same(static_cast<std::size_t>(std::max<int64_t>(g.oh - 1, 0)));
  for (int64_t r = 0; r + 1 < g.oh; ++r)
    same[static_cast<std::size_t>(r)] = kernel_rows(g, r, r, g.pt, 0, g.h) == kernel_rows(g, r + 1, r + 1, g.pt, 0, g.h);
  return same;
}

/// The padded copy's default (input_mode 1): the copy costs a pass over the input (7-9% of ResNet50's
/// stride-2 3x3 layers); it pays where the edges cannot run in place, and on
/// planes of two-row tiles where the in-place walk pairs fewer rows (a pair
/// needs rows seeing the same kernel rows: ResNet50's 512@7 pairs 2 of its 7
/// rows' 3 pairs; its 512 s2@14, 3 of 3). two_rows: the ISA has two-row tiles.
bool default_pad_copy(const Window2d& g, int64_t v, bool two_rows) {
  if (!padded(g)) return false;
  if (!columns_in_place(g)) return true;
  if (!two_rows || g.ow > conv::kMaxAsm2rW || g.oh < 2) return false;
  if (!rows_in_place(g, v)) return true;
  const std::vector<char> same = same_kernel_rows(g);
  int64_t pairs = 0;
  for (std::size_t r = 0; r < same.size(); r += same[r] ? 2 : 1) pairs += same[r];
  return pairs < g.oh / 2;
}

/// Whether `compact` applies: an unpadded 1x1 convolution at a stride > 1 over
/// inputs of more channels than the narrow kernels take (first layers).
bool compactable(const Window2d& g) {
  return g.kh == 1 && g.kw == 1 && !padded(g) && (g.sh > 1 || g.sw > 1) && g.c / g.group > conv::kNarrowPx;
}

/// compact's default: where the rows are short and leave a narrow last tile
/// (w: ow_tile's default) that the flat walk avoids. Measured (conv_bench
/// --params, ResNet50's strided 1x1 layers): AVX2 512->1024 s2@28 (rows of 14
/// in 6 + 6 + 2) 1.13-1.15 ms in place, 1.09-1.10 compact; 1024->2048 s2@14
/// (rows of 7) 1.75-1.83 -> 1.38-1.41; 256->512 s2@56 (rows of 28) 1.03-1.04 in
/// place, 1.08 compact (the copy's pass). AVX-512 (tiles of 14) likewise only at 7.
bool default_compact(const Window2d& g, int64_t v) {
  const int64_t w = v == 16 ? 14 : 6;
  return g.ow % w != 0 && g.ow < 3 * w;
}

/// Whether the spanned mode (input_mode 2) applies: split tiles (Kernels::asm_tile_split) of the
/// OCB index o for every even width of a plane in tiles of at most tw pixels,
/// a tile spanning two rows at most, the tiles' own epilogue (their
/// activations, whole output-channel blocks).
bool spannable(const Window2d& g, int64_t v, int tw, const conv::Kernels& k, int o, const cpu::gemm::Epilogue& ep) {
  const int64_t pixels = g.oh * g.ow, narrowest = pixels / ((pixels + tw - 1) / tw);
  return k.asm_split_max_w[o] >= tw && narrowest >= k.asm_split_min_w[o] && g.ow >= tw && (g.oc / g.group) % v == 0 &&
         ep.clamps_only();
}

/// The spanned mode's default: kernels of several taps whose rows end in a narrow tile
/// (w: the tile's width), short ones, where that tile is a large share of the
/// row and a padded copy costs little next to the weights (ResNet50's 3x3
/// layers at 7 and 14 pixels). 1x1 layers, walked flat already (or compact),
/// measured the same either way (AVX2, ResNet50's 1x1 layers, conv_bench
/// --params oc_block=2,ow_tile=6,input_mode=0/2: 2048->512@7 0.597 / 0.584 ms,
/// 512->2048@7 0.579 / 0.612, 128->512@28 0.635 / 0.667, 256->512 s2@56 in
/// place 1.376 / 1.294): the tuner tries both.
bool default_span(const Window2d& g, int w) { return g.kh * g.kw > 1 && g.ow % w != 0 && g.ow < 3 * w; }

/// w_prefetch's default (AVX2's tiles, Kernels::w_prefetch_choice): a prefetch per
/// channel step pays only where the weights stream from L3 into tiles that use
/// each vector a few times: a kernel of several taps over more weights than
/// two L2 caches hold (ResNet50's 3x3 512-channel layers, 9.4 MB: 512@7 1.14-1.21
/// ms with it, 1.25-1.33 without). Elsewhere it cost 5-8% (its 1x1 layers, even
/// 1024->2048 s2 with 8 MB; its 3x3 layers to 256 channels). A spanned plane's
/// split tiles prefetch the next pass's weights into L2 themselves (512@7 at
/// AVX2: 1.13-1.16 ms without the per-step prefetch, 1.18-1.27 with it).
bool default_w_prefetch(const Window2d& g, bool span) {
  const int64_t weight_bytes = g.kh * g.kw * (g.c / g.group) * g.oc * int64_t(sizeof(float));
  return !span && g.kh * g.kw > 1 && weight_bytes > (4 << 20);
}

/// oc_block as it runs: the largest of 4, 3, 2, 1 at most `want` that divides
/// the blocks per group and has tiles.
int effective_ocb(const conv::Kernels& k, int64_t blocks_per_group, int want) {
  for (int c : {4, 3, 2, 1})
    if (c <= want && blocks_per_group % c == 0)
      for (int t = 0; t < k.ntiles; ++t)
        if (k.tile_ocb[t] == c) return c;
  return 1;
}

/// The register tile of `ocb` blocks for ow_tile `want_w`: the widest at most
/// `want_w`, else the narrowest.
int effective_tile(const conv::Kernels& k, int ocb, int64_t want_w) {
  int best = -1;
  for (int t = 0; t < k.ntiles; ++t) {
    if (k.tile_ocb[t] != ocb) continue;
    const bool fits = k.tile_w[t] <= want_w;
    if (best < 0) best = t;
    else if (fits && (k.tile_w[best] > want_w || k.tile_w[t] > k.tile_w[best])) best = t;
    else if (!fits && k.tile_w[best] > want_w && k.tile_w[t] < k.tile_w[best]) best = t;
  }
  return best;
}

/// input_mode: how the assembly tiles read the input (one parameter, as the
/// choices are not independent: a spanned plane over a padded input needs the copy).
///   0 in place: edge tiles where the kernel leaves the input;
///   1 padded copy: a copy padded on every side, no edge tiles, every pair of
///     rows a two-row tile (a pass over the input per run);
///   2 spanned: the plane walked flat across its rows (split tiles), over the
///     padded copy of a padded input or in place over an unpadded one.
/// A mode that does not apply to the layer runs as the nearest one that does.
enum InputMode : int64_t { kInPlace = 0, kPaddedCopy = 1, kSpanned = 2 };

/// input_mode's default: spanned where default_span says so, else the padded
/// copy where default_pad_copy does. `can_span`: spannable at the default tiles.
int64_t default_input_mode(const Window2d& g, int64_t v, bool two_rows, bool can_span, int w) {
  if (can_span && default_span(g, w)) return kSpanned;
  return default_pad_copy(g, v, two_rows) ? kPaddedCopy : kInPlace;
}

const conv::Kernels* kernels_for(Layout l) {
  if (l == Layout::nhwc) return conv::kernels_avx512() ? conv::kernels_avx512() : conv::kernels_avx2();
  return l == Layout::nchw16c ? conv::kernels_avx512() : conv::kernels_avx2();
}

/// Floats of an nhwc edge tile's zero-padded patch (kh rows x the tile's input columns x C).
constexpr int64_t kPatchFloats = 4096;

/// How a layer's tiles run, decided once in prepare; each mode has its row function.
enum class Mode {
  first_asm,    ///< nhwc RGB first layer: the assembly first-layer tiles (first_asm_row)
  first_tiles,  ///< nhwc first layer: intrinsic tiles, edge tiles from a zero-padded patch (tile_row)
  narrow,       ///< blocked first layer: the narrow kernels over a compact padded copy (tile_row)
  asm_rows,     ///< blocked: the assembly tiles, a row, a pair of rows or a spanned run a call (asm_row)
  tiles,        ///< blocked: intrinsic tiles, pointwise or general with edge kernels (tile_row)
};

/// What the packed weights' layout depends on: the weights' shape
/// [OC, C/group, KH, KW], the groups, the vector width and the output-channel
/// blocks per tile (oc_block as it runs); never the input's size.
struct Packing {
  int64_t v = 0, group = 1, oc = 0, icg = 0, ocg = 0, taps = 0;
  int64_t ics = 0;   ///< input-channel slots per block (V, or C in nhwc)
  int64_t icbg = 0, ocbg = 0, ocb_total = 0;
  int ocb = 1;
  int64_t w_icb() const { return taps * ics * ocb * v; }  ///< floats per input block
  int64_t w_og() const { return icbg * w_icb(); }          ///< floats per group of ocb output blocks
  std::size_t weight_floats() const { return static_cast<std::size_t>(ocb_total / ocb * w_og()); }
  std::size_t bias_floats() const { return static_cast<std::size_t>(ocb_total * v); }
};

Packing packing_of(const Layer& layer, const conv::Kernels& k, bool nhwc, const RoutineParams& params) {
  const Shape& w = layer.weight("weight").shape();
  Packing p;
  p.v = k.vec;
  p.group = layer.get_int("group", 1);
  p.oc = w[0];
  p.icg = w[1];
  p.ocg = p.oc / p.group;
  p.taps = w[2] * w[3];
  p.ics = nhwc ? p.icg * p.group : p.v;
  p.icbg = (p.icg + p.v - 1) / p.v;
  p.ocbg = (p.ocg + p.v - 1) / p.v;
  p.ocb_total = (p.oc + p.v - 1) / p.v;
  p.ocb = effective_ocb(k, p.ocbg, static_cast<int>(routine_param(params, "oc_block", 2)));
  return p;
}

/// The weights as [og][icb][kh][kw][ic < ics][ocb][oc] (zero-padded channels),
/// the bias by blocks: one copy per model, for every shape (Direct::pack).
struct DirectPacked final : PackedWeights {
  cpu::AlignedFloats weight, bias;
  Blob save() const override {
    return core::pack_arrays({core::array_bytes(weight.data(), weight.size()), core::array_bytes(bias.data(), bias.size())});
  }
};

std::shared_ptr<const DirectPacked> pack_direct(const Layer& layer, const Packing& p) {
  const float* wd = layer.weight("weight").data_as<float>();
  const int64_t v = p.v, ocb = p.ocb, ics = p.ics, taps = p.taps, w_icb = p.w_icb(), w_og = p.w_og();
  auto pw = std::make_shared<DirectPacked>();
  pw->weight.assign(p.weight_floats(), 0.0f);
  for (int64_t og = 0; og < p.ocb_total / ocb; ++og)
    for (int64_t j = 0; j < ocb; ++j)
      for (int64_t oc = 0; oc < v; ++oc) {
        const int64_t ob = og * ocb + j;                     // global oc block
        const int64_t gi = p.group == 1 ? 0 : ob / p.ocbg;   // its group
        const int64_t o = p.group == 1 ? ob * v + oc : gi * p.ocg + (ob % p.ocbg) * v + oc;
        if ((p.group == 1 ? ob * v + oc : (ob % p.ocbg) * v + oc) >= p.ocg) continue;
        for (int64_t ib = 0; ib < p.icbg; ++ib)
          for (int64_t ic = 0; ic < ics; ++ic) {
            const int64_t i = ib * ics + ic;
            if (i >= p.icg) continue;
            for (int64_t t = 0; t < taps; ++t)
              pw->weight[og * w_og + ib * w_icb + t * (ics * ocb * v) + ic * ocb * v + j * v + oc] =
                  wd[(o * p.icg + i) * taps + t];
          }
      }
  pw->bias.assign(p.bias_floats(), 0.0f);
  if (const Blob* b = layer.find_weight("bias"))
    for (int64_t o = 0; o < p.oc; ++o) {
      // Output channel o sits at block (o / ocg) * ocbg + (o % ocg) / v, lane (o % ocg) % v.
      const int64_t gi = o / p.ocg, r = o % p.ocg;
      pw->bias[(gi * p.ocbg + r / v) * v + r % v] = b->data_as<float>()[o];
    }
  return pw;
}

std::shared_ptr<const DirectPacked> unpack_direct(const Blob& bytes, const Packing& p) {
  auto arrays = core::unpack_arrays(bytes, {p.weight_floats() * sizeof(float), p.bias_floats() * sizeof(float)});
  if (!arrays) return nullptr;
  auto pw = std::make_shared<DirectPacked>();
  pw->weight = cpu::AlignedFloats::view(core::owner_of(bytes), reinterpret_cast<const float*>((*arrays)[0]), p.weight_floats());
  pw->bias = cpu::AlignedFloats::view(core::owner_of(bytes), reinterpret_cast<const float*>((*arrays)[1]), p.bias_floats());
  return pw;
}

/// The layer's sizes as the kernels walk them, in blocks of V channels.
struct Geometry {
  Window2d g{};  ///< the window the tiles compute (compact: the stride-1 plane of the pixels read)
  int64_t v = 0;
  int64_t icg = 0, ocg = 0;              ///< channels per group
  int64_t icbg = 0, ocbg = 0;            ///< blocks per group
  int64_t icb_total = 0, ocb_total = 0;  ///< blocks of all groups (ocb_total = group * ocbg)
  int64_t ics = 0;                       ///< input-channel slots per block of the packed weights (V, or C in nhwc)
  int64_t w_icb = 0, w_og = 0;           ///< packed floats per input block, per group of ocb output blocks
  int64_t y_px = 0;                      ///< floats between output pixels (V blocked, OC in nhwc)
  int stride_idx = 1;                    ///< the kernel tables' stride index: 1 or 2 (0: any other)
};

/// The copy of the input that the narrow kernels, the padded copy and compact read.
struct InputCopy {
  bool used = false;
  bool compact = false;    ///< a strided 1x1 layer's pixels, copied into a stride-1 plane
  int64_t hp = 0, wp = 0;  ///< its rows and columns (the padding made explicit)
  int64_t px = 0;          ///< floats per pixel (the narrow kernels: conv::kNarrowPx)
  int64_t floats = 0;      ///< the copy's floats
  int64_t slack = 0;       ///< zeros after them, which a row's last tile reads past its end
  int64_t src_h = 0, src_w = 0, src_sh = 1, src_sw = 1;  ///< compact: the input's own rows, columns, strides
};

/// The assembly tiles' choices (Mode::asm_rows).
struct AsmOptions {
  bool pad_copy = false;    ///< they read a copy padded on every side (input_mode 1, or 2 over a padded input)
  bool span = false;        ///< planes walked flat across their rows (input_mode 2, AsmRow::span_ow)
  bool rows2 = false;       ///< two-row tiles for rows of <= kMaxAsm2rW pixels (pair_next)
  bool w_prefetch = true;   ///< the tiles prefetch their weights (w_prefetch)
  std::vector<char> pair_next;  ///< rows2: whether row r and r + 1 take a two-row tile
};

/// The first-layer assembly tiles' walk of a row (Mode::first_asm), the same for
/// every row: `full` tiles of the tile width, then `tail`'s widths (0: none); the
/// full tiles [run_lo, run_hi) read inside the input, one call of `run` (null:
/// none) where all kernel rows are read.
struct FirstRowPlan {
  int64_t full = 0, run_lo = 0, run_hi = 0;
  int tail[2] = {};
  conv::AsmFirstFn run = nullptr;
};

struct Config {
  int tile = 0;  ///< index into Kernels' tiles
  int ocb = 1, w = 1;
  int64_t icb = 0;
  int64_t ohb = 1;  ///< output rows per task
  bool rows_outer = false;  ///< tasks ordered by row block, then OC group (task_order 1)
  bool all_rows = false;    ///< oh_block 0
};

/// The input as a run's tiles read it: the layer's own, or the copy in the workspace.
struct Input {
  const float* x = nullptr;
  int64_t px = 0;                   ///< floats per pixel
  int64_t row_len = 0, plane_in = 0;
  int64_t top = 0, left = 0;        ///< padding before row and column 0 (none in a copy)
  int64_t h_in = 0, w_in = 0;       ///< rows and columns
};

/// What a run's walk over the output keeps for every row.
struct Walk {
  Input in;
  int tw = 0;             ///< pixels per tile
  bool flat = false;      ///< rows walked are runs of tw pixels across image rows (pointwise flat, spanned)
  int64_t pixels = 0;     ///< OH * OW
  int64_t oh_n = 0;       ///< rows walked
  int64_t ow_n = 0;       ///< pixels per row walked
  int64_t row_in = 0;     ///< floats between the input rows walked
  int64_t plane_out = 0;  ///< floats of one output channel block's plane
  int64_t y_ocb = 0;      ///< floats between output channel blocks
};

/// One call of a row function: a pass over input-channel blocks (t) for output
/// row oh (rows: 2 for a two-row tile; a flat walk: the rows [oh, oh_end) as one run).
struct Row {
  conv::DirectTile t;
  const float* x = nullptr;  ///< the input at the first kernel row read
  float* y = nullptr;        ///< the output at the row's first pixel
  int64_t oh = 0, oh_end = 0, rows = 1;
  int64_t kh0 = 0, kh1 = 0;  ///< the kernel rows inside the input
  int64_t row_w = 0;         ///< pixels in the row (a flat walk: the run's)
  int last_steps = 0;        ///< the last block's channels in steps of 4 (the assembly tiles)
};

class PreparedDirect final : public PreparedRoutine {
 public:
  /// residual_act: the convolution and the residual add after it as one step
  /// (DirectResidualAdd): its tiles start from the residual (input 1) and end
  /// with the add's activation, in place of the convolution's own (none).
  PreparedDirect(const LayerInfo& info, const conv::Kernels& k, Layout layout, const RoutineParams& params,
                 std::shared_ptr<const DirectPacked> packed, const core::Activation* residual_act = nullptr)
      : k_(k), weights_(std::move(packed)), residual_(residual_act != nullptr) {
    const Layer& layer = *info.layer;
    const bool nhwc = layout == Layout::nhwc;
    Window2d& g = geo_.g;
    g = core::conv2_window(layer, info.input_shapes[0]);
    geo_.v = k.vec;
    const int64_t v = k.vec;
    // compact: a strided 1x1 convolution reads a copy of just the pixels it
    // uses and then runs as a stride-1 one over that plane, walked flat (whole
    // tiles across its rows).
    copy_.compact = compactable(g) && routine_param(params, "compact", default_compact(g, v)) != 0;
    if (copy_.compact) {
      copy_.src_h = g.h;
      copy_.src_w = g.w;
      copy_.src_sh = g.sh;
      copy_.src_sw = g.sw;
      g.h = g.oh;
      g.w = g.ow;
      g.sh = g.sw = 1;
    }
    // The channels in blocks and the packed weights' layout: the pack's own (packing_of).
    const Packing packing = packing_of(layer, k, nhwc, params);
    if (!weights_ || weights_->weight.size() != packing.weight_floats() || weights_->bias.size() != packing.bias_floats())
      throw Error(fmt::format("cpu:float32:{}/direct: its packed weights do not fit this layer", to_string(layout)), {}, layer.name,
                  "weight");
    geo_.icg = packing.icg;
    geo_.ocg = packing.ocg;
    geo_.icbg = packing.icbg;
    geo_.ocbg = packing.ocbg;
    geo_.icb_total = (g.c + v - 1) / v;
    geo_.ocb_total = packing.ocb_total;  // = group * ocbg (whole blocks per group when group > 1)
    geo_.stride_idx = g.sw == 1 ? 1 : g.sw == 2 ? 2 : 0;
    geo_.ics = packing.ics;
    geo_.y_px = nhwc ? g.oc : v;
    geo_.w_icb = packing.w_icb();
    geo_.w_og = packing.w_og();

    // The tile: oc_block reduced to a divisor of the blocks per group (packing.ocb), then the widest tile <= ow_tile.
    const int64_t want_w = routine_param(params, "ow_tile", v == 16 ? 14 : 6);  // param_space's first choice
    const int ocb = packing.ocb;
    cfg_.tile = effective_tile(k, ocb, want_w);
    cfg_.ocb = ocb;
    cfg_.w = k.tile_w[cfg_.tile];
    const int64_t taps = g.kh * g.kw;
    int64_t icb = routine_param(params, "ic_block", 0);
    if (icb <= 0) icb = std::max<int64_t>(1, (32 * 1024) / (taps * v * ocb * v * 4));
    cfg_.icb = std::min(icb, geo_.icbg);
    const int64_t ohb = routine_param(params, "oh_block", 1);
    cfg_.ohb = ohb <= 0 ? g.oh : std::min<int64_t>(ohb, g.oh);
    cfg_.all_rows = ohb <= 0;
    cfg_.rows_outer = routine_param(params, "task_order", 0) != 0;
    cpu::to_epilogue(residual_act ? *residual_act : core::fused_activation(layer, true), ep_);

    const int oi = conv::ocb_index(ocb);
    mode_ = choose_mode(k, nhwc, oi);
    // An unpadded 1x1 convolution at stride 1: the output plane is the input's,
    // each walked flat, as one run of OH*OW pixels (tiles span image rows).
    flat_ = (mode_ == Mode::asm_rows || mode_ == Mode::tiles) && g.kh == 1 && g.kw == 1 && !padded(g) && g.sh == 1 &&
            g.sw == 1;
    tw_ = cfg_.w;
    if (mode_ == Mode::asm_rows || mode_ == Mode::first_asm) tw_ = static_cast<int>(std::min<int64_t>(want_w, k.asm_max_w[oi]));
    if (mode_ == Mode::asm_rows) choose_asm_options(k, params, oi, want_w);
    if (mode_ == Mode::first_asm) plan_first_row(oi);
    // The intrinsic tiles (first_tiles, narrow, tiles): pointwise kernels for an
    // unpadded 1x1 layer (every tap inside the input), else the general ones,
    // with edge kernels for tiles whose taps leave the input's columns.
    const bool pointwise = mode_ == Mode::tiles && g.kh == 1 && g.kw == 1 && !padded(g);
    const auto& fns = mode_ == Mode::first_tiles ? (g.c == 3 ? k.first_nhwc_rgb : k.first_nhwc)
                      : mode_ == Mode::narrow   ? k.narrow
                      : pointwise               ? k.pointwise
                                                : k.direct;
    tile_fn_ = fns[cfg_.tile][geo_.stride_idx];
    edge_fn_ = mode_ == Mode::tiles ? k.direct_edge[cfg_.tile][geo_.stride_idx] : tile_fn_;

    // The copy: the narrow kernels read a compact one with the padding made
    // explicit (kNarrowPx floats per pixel: 4x less to copy and to read than a
    // whole zero-padded vector), the assembly tiles a padded one where they
    // ask, compact the pixels a strided 1x1 layer reads. nhwc first layers read
    // their input in place (edge tiles from a zero-padded patch).
    copy_.used = mode_ == Mode::narrow || asm_.pad_copy || copy_.compact;
    if (copy_.used) {
      copy_.hp = g.h + g.pt + g.pb;
      copy_.wp = g.w + g.pl + g.pr;
      copy_.px = mode_ == Mode::narrow ? conv::kNarrowPx : v;
      // Reads of a tile past the row end (the last tile of a row) stay inside the buffer.
      copy_.slack = (int64_t(std::max(cfg_.w, tw_)) * g.sw + (g.kw - 1) * g.dw + 1) * copy_.px + copy_.wp * copy_.px;
      copy_.floats = g.n * geo_.icb_total * copy_.hp * copy_.wp * copy_.px;
    }
  }

  /// With the residual: the add's output takes the residual's memory where
  /// nothing reads it after (the tiles accumulate onto it), else run() copies it.
  int output_accumulates() const override { return residual_ ? 1 : -1; }
  const std::shared_ptr<const DirectPacked>& weights() const { return weights_; }

  std::size_t workspace_bytes() const override {
    return copy_.used ? sizeof(float) * static_cast<std::size_t>(copy_.floats + copy_.slack) : 0;
  }

  void run(const RunArgs& args) override {
    const Walk wk = walk_of(args);
    switch (mode_) {
      case Mode::first_asm:
        walk(args, wk, [this](const Walk& w, const Row& r) { first_asm_row(w, r); });
        break;
      case Mode::asm_rows:
        walk(args, wk, [this](const Walk& w, const Row& r) { asm_row(w, r); });
        break;
      case Mode::first_tiles:
      case Mode::narrow:
      case Mode::tiles:
        walk(args, wk, [this](const Walk& w, const Row& r) { tile_row(w, r); });
        break;
    }
  }

 private:
  Mode choose_mode(const conv::Kernels& k, bool nhwc, int oi) const {
    const Window2d& g = geo_.g;
    if (nhwc)  // (first layers only, supports())
      return g.c == 3 && k.asm_first[oi][0][1] && (g.sw == 1 || g.sw == 2) && g.kh <= 64 && ep_.clamps_only()
                 ? Mode::first_asm  // (which apply bias and relu/clip themselves)
                 : Mode::first_tiles;
    if (g.group == 1 && geo_.icg <= conv::kNarrowPx) return Mode::narrow;
    // The assembly tiles (AVX-512, AVX2): strides 1 and 2, at most 64 taps, an edge
    // tile's padded copy of one ic block within conv::kAsmEdgeFloats.
    if (k.asm_row && k.asm_max_w[oi] > 0 && (g.sw == 1 || g.sw == 2) && g.kh * g.kw <= 64 &&
        g.kh * ((g.kw - 1) * g.dw + 1) * geo_.v <= conv::kAsmEdgeFloats)
      return Mode::asm_rows;
    return Mode::tiles;
  }

  void choose_asm_options(const conv::Kernels& k, const RoutineParams& params, int oi, int64_t want_w) {
    const Window2d& g = geo_.g;
    const int64_t v = geo_.v;
    // input_mode 2: the plane walked flat across its output rows (tiles across two
    // rows take the split tiles) over an input without edges: a padded copy, or
    // an unpadded input read in place.
    const bool can_span = spannable(g, v, tw_, k, oi, ep_);
    const int64_t mode = routine_param(params, "input_mode", default_input_mode(g, v, k.asm2r_ocb > 0, can_span, tw_));
    asm_.span = can_span && mode == kSpanned;
    // The padded copy: the tiles read a copy of the input padded on every side,
    // so no tile is an edge tile and every pair of rows can take a two-row
    // tile; it costs one pass over the input per run.
    asm_.pad_copy = padded(g) && mode != kInPlace;
    asm_.w_prefetch = !k.w_prefetch_choice || routine_param(params, "w_prefetch", default_w_prefetch(g, asm_.span)) != 0;
    // Two-row tiles (asm2r_ocb blocks x 2 rows of ow <= 7 pixels) when ow_tile asks for
    // both rows. Without the padded copy they need rows whose tile runs in place
    // (only its first and last columns outside the input), and only pairs of
    // rows that see the same kernel rows take them. (A flat plane is walked as
    // runs of pixels: no rows.)
    asm_.rows2 = cfg_.ocb == k.asm2r_ocb && !flat_ && !asm_.span && (asm_.pad_copy || rows_in_place(g, v)) &&
                 g.oh >= 2 && g.ow <= conv::kMaxAsm2rW && want_w >= 2 * g.ow;
    if (!asm_.rows2) return;
    cfg_.ohb += cfg_.ohb % 2;  // tasks of whole row pairs
    // Which rows pair with the next: any with the padded copy, else those seeing the same kernel rows.
    asm_.pair_next = asm_.pad_copy ? std::vector<char>(static_cast<std::size_t>(g.oh - 1), 1) : same_kernel_rows(g);
  }

  /// first_asm_row's tiling, the same for every row. A remainder with fewer
  /// accumulators than hide the FMA latency (2 ports x 4 cycles) shares the
  /// last full tile's pixels (VGG16's 224 = 37 x 6 + 2 -> 36 x 6 + 4 + 4).
  void plan_first_row(int oi) {
    const Window2d& g = geo_.g;
    const int tw = tw_;
    const int64_t rem = g.ow % tw;
    first_.full = g.ow / tw;
    first_.tail[0] = static_cast<int>(rem);
    if (first_.full > 0 && rem > 0 && cfg_.ocb * rem < 8) {
      --first_.full;
      first_.tail[0] = static_cast<int>((tw + rem + 1) / 2);
      first_.tail[1] = static_cast<int>((tw + rem) / 2);
    }
    // The full tiles inside the input's columns are consecutive: one run per row.
    while (first_.run_lo < first_.full && !first_inner(first_.run_lo * tw, tw)) ++first_.run_lo;
    first_.run_hi = first_.run_lo;
    while (first_.run_hi < first_.full && first_inner(first_.run_hi * tw, tw)) ++first_.run_hi;
    if (g.kh == 3 && g.kw == 3) first_.run = k_.asm_first_run[oi][g.sw - 1][tw];
  }

  /// The input copied into the workspace as copy_ describes it (rows of the
  /// padding made explicit, or compact's pixels), slack zeros after it.
  const float* copy_input(const RunArgs& args) const {
    const Window2d& g = geo_.g;
    const int64_t v = geo_.v;
    const float* x = args.inputs[0]->data_as<float>();
    float* xp = static_cast<float*>(args.workspace);
    const int64_t rows = g.n * geo_.icb_total * copy_.hp, row_in = g.w * v, px = copy_.px, row_len = copy_.wp * copy_.px;
    auto pad_rows = [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t ih = r % copy_.hp - g.pt, plane = r / copy_.hp;
        float* d = xp + r * row_len;
        if (copy_.compact) {  // the pixels of input row ih * sh a strided 1x1 convolution reads
          const float* from = x + ((plane * copy_.src_h + ih * copy_.src_sh) * copy_.src_w) * v;
          for (int64_t iw = 0; iw < g.w; ++iw) std::memcpy(d + iw * v, from + iw * copy_.src_sw * v, sizeof(float) * v);
          continue;
        }
        if (ih < 0 || ih >= g.h) {
          std::memset(d, 0, sizeof(float) * row_len);
          continue;
        }
        std::memset(d, 0, sizeof(float) * g.pl * px);
        const float* from = x + (plane * g.h + ih) * row_in;
        float* dp = d + g.pl * px;
        if (px == v)
          std::memcpy(dp, from, sizeof(float) * row_in);
        else
          for (int64_t iw = 0; iw < g.w; ++iw)
            for (int64_t c = 0; c < px; ++c) dp[iw * px + c] = c < geo_.icg ? from[iw * v + c] : 0.0f;
        std::memset(d + (g.pl + g.w) * px, 0, sizeof(float) * g.pr * px);
      }
    };
    if (args.pool) args.pool->parallel_for(rows, 16, pad_rows);
    else pad_rows(0, rows);
    std::memset(xp + copy_.floats, 0, sizeof(float) * copy_.slack);
    return xp;
  }

  /// The input a run's tiles read: the layer's own, or (copy_) the copy made
  /// in the workspace now; and the walk over the output rows.
  Walk walk_of(const RunArgs& args) const {
    const Window2d& g = geo_.g;
    const int64_t v = geo_.v;
    const bool nhwc = mode_ == Mode::first_asm || mode_ == Mode::first_tiles;
    const float* x = args.inputs[0]->data_as<float>();
    Walk wk;
    Input& in = wk.in;
    in.x = x;
    in.px = nhwc ? g.c : v;
    in.row_len = g.w * in.px;
    in.plane_in = g.h * in.row_len;
    in.top = g.pt;
    in.left = g.pl;
    in.h_in = g.h;
    in.w_in = g.w;
    if (copy_.used) {
      in.x = copy_input(args);
      in.px = copy_.px;
      in.row_len = copy_.wp * copy_.px;
      in.plane_in = copy_.hp * in.row_len;
      in.top = in.left = 0;
      in.h_in = copy_.hp;
      in.w_in = copy_.wp;
    }
    // A flat plane is walked as "rows" of tw pixels, so tiles span image rows (a
    // 7x7 plane takes 14-pixel tiles) and only the plane's last tile is partial;
    // so is a spanned one (input_mode 2), whose rows in the input stay apart.
    wk.tw = tw_;
    wk.flat = flat_ || asm_.span;
    wk.pixels = g.oh * g.ow;
    wk.oh_n = wk.flat ? (wk.pixels + tw_ - 1) / tw_ : g.oh;
    wk.ow_n = wk.flat ? tw_ : g.ow;
    wk.row_in = flat_ && !asm_.span ? tw_ * v : in.row_len;
    // Output: oc blocks y_ocb apart, pixels y_px apart; blocked [n][ocb][OH][OW][V], nhwc [n][OH][OW][OC].
    wk.plane_out = g.oh * g.ow * v;
    wk.y_ocb = nhwc ? v : wk.plane_out;
    return wk;
  }

  /// Tasks over (image, group of ocb output blocks, block of rows) on the pool;
  /// in each, the input-channel passes outermost (a pass's weights are reused
  /// by every row of the task), then its rows, each one call of row_fn.
  template <class RowFn>
  void walk(const RunArgs& args, const Walk& wk, const RowFn& row_fn) const {
    const Window2d& g = geo_.g;
    const int64_t v = geo_.v;
    const bool nhwc = mode_ == Mode::first_asm || mode_ == Mode::first_tiles;
    const int ocb = cfg_.ocb;
    float* y = args.outputs[0]->data_as<float>();
    // Rows holding input: kernel rows outside them are skipped (the padded copy's
    // zero rows too, except where a two-row tile's other row needs that kernel row).
    const int64_t h_walk = flat_ ? wk.oh_n : wk.in.h_in;
    const int64_t in_lo = asm_.pad_copy ? g.pt : 0, in_hi = asm_.pad_copy ? g.pt + g.h : h_walk;
    // task_order 1 with oh_block 0: a block of rows per thread, each for every OC group.
    int64_t ohb = cfg_.ohb;
    if (cfg_.rows_outer && cfg_.all_rows) {
      const int64_t threads = args.pool ? args.pool->num_threads() : 1;
      ohb = (wk.oh_n + threads - 1) / threads;
      if (asm_.rows2) ohb += ohb % 2;
    }
    const int64_t ogs = geo_.ocb_total / ocb, rbs = (wk.oh_n + ohb - 1) / ohb, items = g.n * ogs * rbs;
    alignas(64) static const float zeros[16] = {};
    // The residual: the rows' sums start from it (in y already where it is y's memory).
    const float* res = residual_ ? args.inputs[1]->data_as<float>() : nullptr;
    if (res == y) res = nullptr;
    auto body = [&](int64_t b, int64_t e) {
      for (int64_t it = b; it < e; ++it) {
        const int64_t rb = cfg_.rows_outer ? it / ogs % rbs : it % rbs;
        const int64_t og = cfg_.rows_outer ? it % ogs : it / rbs % ogs, n = it / rbs / ogs;
        const int64_t oh_begin = rb * ohb, oh_end = std::min(wk.oh_n, oh_begin + ohb);
        const int64_t ob0 = og * ocb;
        const int64_t gi = g.group == 1 ? 0 : ob0 / geo_.ocbg;
        const int64_t icb0 = g.group == 1 ? 0 : gi * geo_.icbg;
        Row r;
        conv::DirectTile& t = r.t;
        t.valid_last = static_cast<int>(v);
        if (g.group == 1) t.valid_last = static_cast<int>(std::min<int64_t>(v, g.oc - (ob0 + ocb - 1) * v));
        t.x_icb = wk.in.plane_in;
        t.x_row = wk.row_in;
        t.w_icb = geo_.w_icb;
        t.kw = static_cast<int>(g.kw);
        t.dh = static_cast<int>(g.dh);
        t.dw = static_cast<int>(g.dw);
        t.sw = static_cast<int>(g.sw);
        t.bias = weights_->bias.data() + ob0 * v;
        t.ic_valid = static_cast<int>(geo_.icg);  // read by the narrow kernels only
        t.x_px = wk.in.px;
        t.y_px = geo_.y_px;
        t.zeros = zeros;
        r.oh_end = oh_end;
        for (int64_t ic0 = 0; ic0 < geo_.icbg; ic0 += cfg_.icb) {
          t.icbs = std::min(cfg_.icb, geo_.icbg - ic0);
          t.load_y = ic0 > 0 || residual_;
          t.last = ic0 + cfg_.icb >= geo_.icbg;
          t.w = weights_->weight.data() + og * geo_.w_og + ic0 * geo_.w_icb;
          // Channels of the last block, in steps of 4 (only the pass holding it).
          r.last_steps = t.last ? static_cast<int>((geo_.icg - (geo_.icbg - 1) * v + 3) / 4) : static_cast<int>(v / 4);
          // Pairs first, then single rows: a pass's first call reads its weights from
          // L3 on layers with many channels, and a pair gives each weight twice the
          // FMAs of a row (ResNet50's 512 s2@14: its top row, 2 of 3 kernel rows, took
          // as long as a pair when it came first).
          for (int sweep = asm_.rows2 ? 0 : 1; sweep < 2; ++sweep) {
            // Flat: the task's rows walked are one run of pixels (one call of the row function).
            for (int64_t oh = oh_begin, rows = 1; oh < oh_end; oh += wk.flat ? oh_end - oh_begin : rows) {
              rows = asm_.rows2 && oh + 1 < oh_end && asm_.pair_next[static_cast<std::size_t>(oh)] ? 2 : 1;
              if ((rows == 2) != (sweep == 0)) continue;
              // Kernel rows inside the input: [kh0, kh1) (of either row of a pair).
              // (A spanned run: all of them, its input without edges.)
              const int64_t ih0 = asm_.span ? 0 : oh * g.sh - wk.in.top;
              const auto [kh0, kh1] = asm_.span ? std::pair<int64_t, int64_t>{0, g.kh}
                                                : kernel_rows(g, oh, oh + rows - 1, wk.in.top, in_lo, in_hi);
              r.oh = oh;
              r.rows = rows;
              r.kh0 = kh0;
              r.kh1 = kh1;
              t.kh0 = static_cast<int>(kh0);
              t.kh = static_cast<int>(kh1);
              const int64_t ih_first = kh0 < kh1 ? ih0 + kh0 * g.dh : 0;  // never read when no row is inside
              r.x = wk.in.x + (n * geo_.icb_total + icb0 + ic0) * wk.in.plane_in + ih_first * wk.row_in;
              r.y = nhwc ? y + (n * g.oh + oh) * g.ow * geo_.y_px + ob0 * v
                         : y + (n * geo_.ocb_total + ob0) * wk.plane_out + (asm_.span ? 0 : oh * wk.ow_n * v);
              // Flat: the run ends at the plane's end (the last tile may be partial; past it, zeros).
              r.row_w = wk.flat ? std::min<int64_t>((oh_end - oh) * wk.tw, wk.pixels - oh * wk.tw) : wk.ow_n;
              t.w_in = flat_ ? r.row_w : wk.in.w_in;
              if (res && ic0 == 0) {  // (blocked layouts only: the rows' pixels, each oc block's)
                const int64_t p0 = wk.flat ? oh * wk.tw : oh * g.ow, np = wk.flat ? r.row_w : rows * g.ow;
                for (int j = 0; j < ocb; ++j) {
                  const int64_t at = (n * geo_.ocb_total + ob0 + j) * wk.plane_out + p0 * v;
                  std::memcpy(y + at, res + at, sizeof(float) * static_cast<std::size_t>(np * v));
                }
              }
              row_fn(wk, r);
            }
          }
        }
      }
    };
    if (args.pool) args.pool->parallel_for(items, 1, body);
    else body(0, items);
  }

  /// Mode::asm_rows: the row (a pair, a spanned run) in the assembly tiles' row driver.
  void asm_row(const Walk& wk, const Row& row) const {
    const Window2d& g = geo_.g;
    const conv::DirectTile& t = row.t;
    conv::AsmRow r;
    r.x = row.x;
    r.w = t.w + row.kh0 * g.kw * (geo_.v * cfg_.ocb * geo_.v);
    r.y = row.y;
    r.icbs = t.icbs;
    r.x_icb = wk.in.plane_in;
    r.x_row = wk.row_in;
    r.w_icb = geo_.w_icb;
    r.y_ocb = wk.plane_out;
    r.ow = row.row_w;
    r.w_in = t.w_in;
    r.ocb = cfg_.ocb;
    r.tw = wk.tw;
    r.kh_n = static_cast<int>(row.kh1 - row.kh0);
    r.kw = t.kw;
    r.dh = t.dh;
    r.dw = t.dw;
    r.sw = t.sw;
    r.pl = static_cast<int>(wk.in.left);
    r.load_y = t.load_y;
    r.last = t.last;
    r.bias = t.bias;
    r.valid_last = t.valid_last;
    r.last_steps = row.last_steps;
    r.rows = static_cast<int>(row.rows);
    r.w_prefetch = asm_.w_prefetch;
    r.x_row2 = g.sh * wk.row_in;
    r.y_row = wk.ow_n * geo_.v;
    r.span_ow = asm_.span ? g.ow : 0;
    r.span_px = wk.pixels;
    r.span_tiles = wk.oh_n;
    r.tile0 = row.oh;
    r.tile1 = row.oh_end;
    k_.asm_row(r, ep_);
  }

  /// Mode::first_tiles, narrow, tiles: the row in intrinsic tiles of tw pixels,
  /// edge kernels (nhwc: a zero-padded patch) where a tile's taps leave the
  /// input's columns, the row's narrower last tile through a stack tile.
  void tile_row(const Walk& wk, const Row& row) const {
    const Window2d& g = geo_.g;
    const int64_t v = geo_.v, tw = wk.tw, y_px = geo_.y_px;
    const int ocb = cfg_.ocb;
    alignas(64) float tmp[4 * 32 * 16];
    alignas(64) float patch[kPatchFloats];  // nhwc: an edge tile's input, zero-padded
    conv::DirectTile t = row.t;
    for (int64_t ow0 = 0; ow0 < row.row_w; ow0 += tw) {
      const int64_t col0 = ow0 * g.sw - wk.in.left;
      t.col0 = col0;
      t.x = row.x + col0 * wk.in.px;
      t.x_row = wk.row_in;  // an nhwc edge tile's patch changes these
      t.dh = static_cast<int>(g.dh);
      const int64_t wcur = std::min<int64_t>(tw, row.row_w - ow0);
      // Any tap of the tile's tw pixels outside the input's columns?
      const bool edge = col0 < 0 || (ow0 + tw - 1) * g.sw - wk.in.left + (g.kw - 1) * g.dw >= t.w_in;
      const conv::DirectFn f = edge ? edge_fn_ : tile_fn_;
      if (mode_ == Mode::first_tiles && edge) {
        const int64_t span = (tw - 1) * g.sw + g.kw;
        fill_patch(row.x, wk.row_in, static_cast<int>(row.kh1 - row.kh0), col0, span, patch);
        t.x = patch;
        t.x_row = span * g.c;
        t.dh = 1;
      }
      if (wcur == tw) {
        t.y = row.y + ow0 * y_px;
        t.y_ocb = wk.y_ocb;
        t.y_px = y_px;
        f(t, ep_);
        continue;
      }
      // The row's last, narrower tile: through a stack tile ([ocb][tw][V]).
      t.y = tmp;
      t.y_ocb = tw * v;
      t.y_px = v;
      auto copy = [&](bool out) {
        for (int j = 0; j < ocb; ++j)
          for (int64_t i = 0; i < wcur; ++i) {
            float* yp = row.y + j * wk.y_ocb + (ow0 + i) * y_px;
            float* tp = tmp + (j * tw + i) * v;
            std::memcpy(out ? yp : tp, out ? tp : yp, sizeof(float) * v);
          }
      };
      if (t.load_y) copy(false);
      f(t, ep_);
      copy(true);
    }
  }

  /// nhwc: an edge tile's input as a zero-padded patch [rows][span][C]: the
  /// columns [col0, col0 + span) of `rows` kernel rows from x (rows dh apart,
  /// row_in floats each), zeros outside the input.
  void fill_patch(const float* x, int64_t row_in, int rows, int64_t col0, int64_t span, float* patch) const {
    // nhwc: a row's pixels are contiguous, so per row zeros | a copy | zeros.
    const Window2d& g = geo_.g;
    const int64_t c = g.c;
    const int64_t lo = std::clamp<int64_t>(-col0, 0, span), hi = std::clamp<int64_t>(g.w - col0, lo, span);
    for (int r = 0; r < rows; ++r) {
      const float* from = x + r * g.dh * row_in + (col0 + lo) * c;
      float* to = patch + r * span * c;
      std::fill(to, to + lo * c, 0.0f);
      std::copy(from, from + (hi - lo) * c, to + lo * c);
      std::fill(to + hi * c, to + span * c, 0.0f);
    }
  }

  /// Whether a first-layer tile of wcur pixels from output column ow0 reads only
  /// columns inside the input (else an edge tile: a zero-padded patch).
  bool first_inner(int64_t ow0, int wcur) const {
    const Window2d& g = geo_.g;
    const int64_t col0 = ow0 * g.sw - g.pl;
    return col0 >= 0 && col0 + (wcur - 1) * g.sw + g.kw <= g.w;
  }

  /// Mode::first_asm: one output row of an nhwc RGB first layer in assembly
  /// tiles, as plan_first_row planned them: the row's x at the first kernel row
  /// read, kernel rows read kh1 - kh0; edge tiles read a zero-padded patch. A
  /// row reading all 3 rows of a 3x3 kernel takes its inner tiles in one run.
  void first_asm_row(const Walk& wk, const Row& row) const {
    const Window2d& g = geo_.g;
    const int oi = conv::ocb_index(cfg_.ocb), si = static_cast<int>(g.sw) - 1, tw = tw_;
    const int kh_n = static_cast<int>(row.kh1 - row.kh0);
    const int64_t c = 3, y_px = geo_.y_px, row_in = wk.row_in;
    const float* x = row.x;
    const float* bias = row.t.bias;
    float* y = row.y;
    alignas(64) float patch[kPatchFloats];
    int64_t rows[64], rows_patch[64];
    for (int r = 0; r < kh_n; ++r) rows[r] = r * g.dh * row_in * int64_t(sizeof(float));
    conv::AsmFirstTile a;
    a.w = row.t.w + row.kh0 * g.kw * (3 * cfg_.ocb * geo_.v);
    a.rows = kh_n;
    a.kw = g.kw;
    a.y_px_bytes = y_px * int64_t(sizeof(float));
    a.bias = bias;
    a.last = ep_.act == cpu::gemm::Act::none ? 1 : ep_.act == cpu::gemm::Act::relu ? 3 : 2;
    a.lo = ep_.act == cpu::gemm::Act::relu ? 0.0f : ep_.lo;
    a.hi = ep_.act == cpu::gemm::Act::relu ? std::numeric_limits<float>::infinity() : ep_.hi;
    // Tiles from output column ow0 (count: a run's, of tw pixels; else one of wcur).
    auto tiles = [&](int64_t ow0, int wcur, int64_t count, conv::AsmFirstFn fn) {
      const int64_t col0 = ow0 * g.sw - g.pl, span = (wcur - 1) * g.sw + g.kw;
      a.y = y + ow0 * y_px;
      a.tiles = count;
      if (kh_n == 0) {  // no kernel row inside the input: the bias (and activation) alone
        for (int64_t i = 0; i < wcur; ++i)
          for (int64_t o = 0; o < cfg_.ocb * geo_.v; ++o)
            a.y[i * y_px + o] = a.last == 1 ? bias[o] : std::clamp(bias[o], a.lo, a.hi);
        return;
      }
      if (first_inner(ow0, wcur)) {
        a.x = x + col0 * c;
        a.row_x = rows;
      } else {
        fill_patch(x, row_in, kh_n, col0, span, patch);
        for (int r = 0; r < kh_n; ++r) rows_patch[r] = r * span * c * int64_t(sizeof(float));
        a.x = patch;
        a.row_x = rows_patch;
      }
      fn(a);
    };
    // Full tiles: those before the run, the run, those after (without a run, all one by one).
    const bool run = first_.run && kh_n == 3 && first_.run_hi > first_.run_lo;
    const int64_t lo = run ? first_.run_lo : first_.full, hi = run ? first_.run_hi : first_.full;
    for (int64_t i = 0; i < lo; ++i) tiles(i * tw, tw, 1, k_.asm_first[oi][si][tw]);
    if (run) tiles(lo * tw, tw, hi - lo, first_.run);
    for (int64_t i = hi; i < first_.full; ++i) tiles(i * tw, tw, 1, k_.asm_first[oi][si][tw]);
    int64_t ow0 = first_.full * tw;
    for (int part : first_.tail)
      if (part > 0) {
        tiles(ow0, part, 1, k_.asm_first[oi][si][part]);
        ow0 += part;
      }
  }

  const conv::Kernels& k_;
  Mode mode_ = Mode::tiles;
  Geometry geo_;
  Config cfg_;
  InputCopy copy_;
  AsmOptions asm_;
  FirstRowPlan first_;
  int tw_ = 0;         ///< pixels per tile (the assembly tiles: at most ow_tile; else cfg_.w)
  bool flat_ = false;  ///< an unpadded 1x1 layer at stride 1: planes walked as runs of pixels
  conv::DirectFn tile_fn_ = nullptr, edge_fn_ = nullptr;  ///< the intrinsic tiles (first_tiles, narrow, tiles)
  std::shared_ptr<const DirectPacked> weights_;
  cpu::gemm::Epilogue ep_;
  bool residual_ = false;  ///< input 1 is a residual the output starts from
};

template <Layout L>
class Direct final : public Routine {
 public:
  static constexpr Schema kSchema{Device::cpu, DType::float32, L};
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return "direct"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }

  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == kSchema)) return Support::no(fmt::format("cpu/direct computes in {}", kSchema.to_string()));
    const conv::Kernels* k = kernels_for(L);
    if (!k)
      return Support::no(L == Layout::nchw16c ? "nchw16c/direct needs AVX-512 (F, BW, VL, DQ)"
                         : L == Layout::nchw8c ? "nchw8c/direct needs AVX2 + FMA"
                                               : "nhwc/direct needs AVX2 + FMA or AVX-512");
    if (!info.layer || info.input_shapes.size() != 1 || info.input_shapes[0].rank() != 4)
      return Support::no("conv2 needs an input [N,C,H,W]");
    if (Support s = routines::float_weights(*info.layer, {"weight", "bias"}, "cpu/direct"); !s) return s;
    if (Support s = cpu::check_activation(*info.layer, true); !s) return s;
    const Window2d g = core::conv2_window(*info.layer, info.input_shapes[0]);
    const int64_t v = k->vec;
    if (g.group > 1 && ((g.c / g.group) % v != 0 || (g.oc / g.group) % v != 0))
      return Support::no(fmt::format("groups need whole blocks of {} channels per group", v));
    if (L == Layout::nhwc) {
      if (g.group != 1 || g.c > conv::kNarrowPx || g.oc % k->vec != 0 || g.dw != 1)
        return Support::no(fmt::format("nhwc/direct computes first layers only: group 1, at most {} input channels, "
                                       "output channels a multiple of {}, column dilation 1 (nchw16c/direct "
                                       "computes the others)", conv::kNarrowPx, k->vec));
      int max_w = 0;
      for (int t = 0; t < k->ntiles; ++t) max_w = std::max(max_w, k->tile_w[t]);
      if (g.kh * ((max_w - 1) * g.sw + g.kw) * g.c > kPatchFloats)
        return Support::no(fmt::format("nhwc/direct: a {}x{} kernel at stride {} reads more than an edge tile's "
                                       "patch of {} floats", g.kh, g.kw, g.sw, kPatchFloats));
    }
    if (g.oh <= 0 || g.ow <= 0) return Support::no("empty output");
    return Support::yes();
  }

  std::vector<RoutineParamSpec> param_space(const LayerInfo& info, const Schema&) const override {
    // The first choice of each is the profiler's starting point (it then varies
    // one parameter at a time): 2 x 14 tiles (AVX2: 2 x 6) over all input channels, all rows per task.
    const conv::Kernels* k = kernels_for(L);
    // ow_tile 6 on AVX-512: the 4 x 6 tile keeps all four weight vectors in
    // registers (4 x 7 takes one from memory per FMA); with its narrower last tile
    // it still ran 4-11% faster than 4 x 7 on ResNet50's 3x3 layers of 14-56 pixel
    // rows. On AVX2 (16 ymm) 6 is the 2 x 6 tile, 4 x 3 and 1 x 14 the others.
    std::vector<RoutineParamSpec> space{{"oc_block", {2, 4, 1}},
                                        {"ow_tile", k && k->vec == 16 ? std::vector<int64_t>{14, 6, 7, 28}
                                                                      : std::vector<int64_t>{6, 4, 7, 14}},
                                        {"ic_block", {1024, 0}},
                                        {"oh_block", {0, 4, 1}},
                                        {"task_order", {0, 1}}};
    const Window2d g = info.layer && info.input_shapes.size() == 1 && info.input_shapes[0].rank() == 4
                           ? core::conv2_window(*info.layer, info.input_shapes[0])
                           : Window2d{};
    // Only choices that run differently here: an oc_block that reduces to the
    // blocks of an earlier one goes (AVX-512, MobileNetV2's 144 channels, 9
    // blocks: 2 ran 1 block, as 1 does), and an ow_tile deciding what an
    // earlier one decides.
    if (k && g.kh > 0 && g.group > 0) {
      const int64_t blocks = (g.oc / g.group + k->vec - 1) / k->vec;
      std::vector<int64_t> ocbs, seen;
      for (int64_t c : space[0].choices) {
        const int e = effective_ocb(*k, blocks, static_cast<int>(c));
        if (std::find(seen.begin(), seen.end(), e) == seen.end()) seen.push_back(e), ocbs.push_back(c);
      }
      space[0].choices = ocbs;
      const int ocb = effective_ocb(*k, blocks, static_cast<int>(ocbs[0]));
      const int64_t asm_max = k->asm_row ? k->asm_max_w[conv::ocb_index(ocb)] : 0;
      // (What ow_tile decides: the tile, the assembly width, whether two rows fit.)
      std::vector<int64_t> widths;
      std::vector<std::tuple<int, int64_t, bool>> runs;
      for (int64_t w : space[1].choices) {
        const std::tuple<int, int64_t, bool> r{effective_tile(*k, ocb, w), std::min(w, asm_max), w >= 2 * g.ow};
        if (std::find(runs.begin(), runs.end(), r) == runs.end()) runs.push_back(r), widths.push_back(w);
      }
      space[1].choices = widths;
    }
    if (k && k->asm_row && L != Layout::nhwc) {
      // compact, input_mode and w_prefetch are named at every shape, with one
      // choice where only one applies: a path tuned at another shape (a dynamic
      // model run at a size it was not tuned at) keeps this routine, its value
      // dropped for the default, instead of refusing it as a parameter it lacks.
      if (compactable(g)) {
        const int64_t c = default_compact(g, k->vec);
        space.push_back({"compact", {c, 1 - c}});
      } else {
        space.push_back({"compact", {0}});
      }
      // input_mode: the modes that apply (spanned where the first choice's
      // tiles, oc_block's and ow_tile's first, have split forms), the default first.
      cpu::gemm::Epilogue ep;
      if (info.layer) cpu::to_epilogue(core::fused_activation(*info.layer, true), ep);
      const int ocb = static_cast<int>(space[0].choices[0]), tw = static_cast<int>(space[1].choices[0]);
      const bool can_span = info.layer && g.kh > 0 && spannable(g, k->vec, tw, *k, conv::ocb_index(ocb), ep);
      const int64_t mode = default_input_mode(g, k->vec, k->asm2r_ocb > 0, can_span, tw);
      std::vector<int64_t> modes{mode};
      for (int64_t m : {kInPlace, kPaddedCopy, kSpanned})
        if (m != mode && (m != kPaddedCopy || padded(g)) && (m != kSpanned || can_span)) modes.push_back(m);
      space.push_back({"input_mode", modes});
      if (k->w_prefetch_choice) {
        const int64_t pf = g.kh > 0 && default_w_prefetch(g, mode == kSpanned);
        space.push_back({"w_prefetch", g.kh > 0 ? std::vector<int64_t>{pf, 1 - pf} : std::vector<int64_t>{pf}});
      }
    }
    return space;
  }

  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams& params) const override {
    return pack_direct(*info.layer, packing_of(*info.layer, kernels(), L == Layout::nhwc, params));
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& info, const Schema&,
                                              const RoutineParams& params) const override {
    return unpack_direct(bytes, packing_of(*info.layer, kernels(), L == Layout::nhwc, params));
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams& params,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    return std::make_unique<PreparedDirect>(info, kernels(), L, params,
                                            std::dynamic_pointer_cast<const DirectPacked>(std::move(packed)));
  }

 private:
  static const conv::Kernels& kernels() {
    const conv::Kernels* k = kernels_for(L);
    if (!k) throw Error(fmt::format("{}/direct: the CPU lacks the ISA", kSchema.to_string()));
    return *k;
  }

};

/// An add of two blobs of one shape in a blocked layout, then its activation:
/// the padded channels stay zero.
class PreparedBlockedAdd final : public PreparedRoutine {
 public:
  PreparedBlockedAdd(const LayerInfo& info, int64_t v)
      : act_(core::fused_activation(*info.layer)), v_(v) {
    const Shape& s = info.input_shapes[0];
    channels_ = s[1];
    blocks_ = s[0] * ((s[1] + v - 1) / v);
    cb_ = (s[1] + v - 1) / v;
    plane_ = s[2] * s[3];
  }
  void run(const RunArgs& args) override {
    const float* a = args.inputs[0]->data_as<float>();
    const float* b = args.inputs[1]->data_as<float>();
    float* y = args.outputs[0]->data_as<float>();
    const bool relu = act_.kind == core::Activation::relu && !act_.affine(), none = act_.kind == core::Activation::none;
    auto body = [&](int64_t first, int64_t end) {
      for (int64_t blk = first; blk < end; ++blk) {
        const int64_t at = blk * plane_ * v_, valid = std::min(v_, channels_ - blk % cb_ * v_);
        const float *pa = a + at, *pb = b + at;
        float* py = y + at;
        if (none)
          for (int64_t i = 0; i < plane_ * v_; ++i) py[i] = pa[i] + pb[i];
        else if (relu)
          for (int64_t i = 0; i < plane_ * v_; ++i) py[i] = std::max(pa[i] + pb[i], 0.0f);
        else
          for (int64_t i = 0; i < plane_ * v_; ++i) py[i] = core::apply_activation(act_, pa[i] + pb[i]);
        if (valid < v_)
          for (int64_t p = 0; p < plane_; ++p) std::fill(py + p * v_ + valid, py + (p + 1) * v_, 0.0f);
      }
    };
    if (args.pool) args.pool->parallel_for(blocks_, 1, body);
    else body(0, blocks_);
  }

 private:
  core::Activation act_;
  int64_t v_ = 0, channels_ = 0, blocks_ = 0, cb_ = 0, plane_ = 0;
};

/// cpu:float32:nchw16c/direct and nchw8c/direct for a residual add: the direct
/// convolution before it computes both as one step (its tiles start from the
/// residual and end with the add's activation: the convolution's output is never
/// written apart, nor read again by the add). Alone, an element-wise add.
template <Layout L>
class DirectResidualAdd final : public Routine {
 public:
  static constexpr Schema kSchema{Device::cpu, DType::float32, L};
  std::string_view layer_type() const override { return "add"; }
  std::string_view algorithm() const override { return "direct"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }

  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == kSchema)) return Support::no(fmt::format("cpu/direct computes in {}", kSchema.to_string()));
    if (!kernels_for(L)) return Support::no("the direct convolution's kernels need AVX-512 (nchw16c) or AVX2 + FMA (nchw8c)");
    if (!info.layer || info.input_shapes.size() != 2 || info.input_shapes[0].rank() != 4 ||
        info.input_shapes[0] != info.input_shapes[1])
      return Support::no("a residual add of two blobs [N,C,H,W] of one shape");
    if (core::requantizes_as_tflite(*info.layer))
      return Support::no("TensorFlow Lite's int8 add held as real values is cpu/vec's");
    return cpu::check_activation(*info.layer);
  }

  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    return std::make_unique<PreparedBlockedAdd>(info, kernels_for(L)->vec);
  }

  bool fuses_previous(const LayerInfo& previous, const Routine& previous_routine, const RoutineParams&,
                      const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    // The convolution on this routine's layout, without an activation of its own
    // (the add's ends the pair), its output the shape the add computes.
    if (!previous.layer || previous.layer->type != "conv2" || !dynamic_cast<const Direct<L>*>(&previous_routine) ||
        !info.layer || info.input_shapes.size() != 2 || previous.output_shapes.size() != 1 ||
        previous.output_shapes[0] != info.input_shapes[0] || !supports(info, kSchema))
      return false;
    const core::Activation own = core::fused_activation(*previous.layer, true);
    return own.kind == core::Activation::none && !own.affine() && cpu::check_activation(*info.layer);
  }

  std::unique_ptr<PreparedRoutine> prepare_with_previous(const LayerInfo& previous, const Routine& previous_routine,
                                                         const RoutineParams& previous_params, const LayerInfo& info,
                                                         const Schema& schema, const RoutineParams& params) const override {
    if (!fuses_previous(previous, previous_routine, previous_params, info, schema, params)) return nullptr;
    // The convolution's packed weights through the model's store (those a tuned file holds).
    std::unique_ptr<PreparedRoutine> alone = previous_routine.prepare(previous, kSchema, previous_params);
    const auto* direct = dynamic_cast<const PreparedDirect*>(alone.get());
    if (!direct) return nullptr;
    const core::Activation act = core::fused_activation(*info.layer);
    return std::make_unique<PreparedDirect>(previous, *kernels_for(L), L, previous_params, direct->weights(), &act);
  }
};

SOFTNEURO_REGISTER_ROUTINE(Direct<Layout::nchw16c>);
SOFTNEURO_REGISTER_ROUTINE(Direct<Layout::nchw8c>);
SOFTNEURO_REGISTER_ROUTINE(Direct<Layout::nhwc>);
SOFTNEURO_REGISTER_ROUTINE(DirectResidualAdd<Layout::nchw16c>);
SOFTNEURO_REGISTER_ROUTINE(DirectResidualAdd<Layout::nchw8c>);

}  // namespace
}  // namespace softneuro
