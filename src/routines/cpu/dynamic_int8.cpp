// cpu/dynamic_int8 — a dense layer in float32 that multiplies in int8: each
// activation row quantised when the layer runs (its own scale, nine bits),
// the weights once per output channel (int8, packed in blocks of 16 channels),
// products summed exactly in int32 and scaled back to float32 (kernels:
// dynamic_int8_kernels.hpp). What a transformer's dense layers need where
// static int8 fails them (activations whose range moves with every input),
// and a decode step's dense layers, which stream their weights: a quarter of
// float32's bytes. Two forms (parameter u8s8): exact int16 products, or u8
// activations against 7-bit weights at twice the products per instruction
// (against 8-bit weights, four times, where AVX512-VNNI's vpdpbusd runs them).
// Reduced precision (Routine::precision: qint8): a candidate
// only where the tuning allows qint8, held to the accuracy budget, never an
// untuned default.
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/prepared_weights.hpp"
#include "core/weight_quant.hpp"
#include "routines/cpu/dynamic_int8_kernels.hpp"
#include "routines/cpu/f32_common.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <cstring>
#include <memory>
#include <vector>

namespace softneuro {

bool dynamic_int8::avx2_usable() { return core::cpu_features().avx2_fma(); }
bool dynamic_int8::vnni512_usable() {
  const core::CpuFeatures& f = core::cpu_features();
  return f.avx2_fma() && f.avx512_core() && f.avx512_vnni;
}

namespace {

using dynamic_int8::kBlockN;
using dynamic_int8::kTileM;

/// The weights' integer range: 8 bits, but 7 for the u8 form without VNNI
/// (vpmaddubsw's pair sums saturate at int16). A rule of this CPU: a packing
/// made for another (a .dnn file's) is made again where it differs.
int32_t form_qmax(bool u8s8) {
  return u8s8 && !dynamic_int8::vnni512_usable() ? dynamic_int8::kU8s8Qmax : 127;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Where the packed weights put each value: blocks of 16 output channels,
/// each [k2][16][2] int8 (the int16 form) or [k4][16][4] int8 (u8s8). From
/// the weights' [N, K] and the form, never the input's size.
struct WeightPanels {
  int64_t n = 0, k = 0;
  int64_t group = 2;  ///< K values a weight lane holds per step
  int64_t steps = 0, block_bytes = 0, blocks = 0;
  WeightPanels(int64_t n_, int64_t k_, bool u8s8)
      : n(n_), k(k_), group(u8s8 ? 4 : 2), steps(ceil_div(k, group)), block_bytes(steps * group * kBlockN),
        blocks(ceil_div(n, kBlockN)) {}
  int64_t offset(int64_t o, int64_t kk) const {
    return (o / kBlockN) * block_bytes + (kk / group) * group * kBlockN + (o % kBlockN) * group + kk % group;
  }
  std::size_t packed_bytes() const { return static_cast<std::size_t>(blocks * block_bytes); }
  std::size_t lanes() const { return static_cast<std::size_t>(blocks * kBlockN); }
};

/// How the weights were packed: what a packing made for another CPU or form is told by.
struct PackForm {
  int32_t qmax = 127;     ///< the integers' range, form_qmax()
  int32_t group = 2;      ///< WeightPanels::group: 2 the int16 form, 4 the u8 one
  int32_t pair_safe = 0;  ///< 8-bit u8 weights without VNNI: pairs cut safe and their fixes (PairFix)
  bool operator==(const PackForm&) const = default;
};

/// The weights as the kernels read them (WeightPanels); per channel its
/// scale, bias and (u8s8) the sum of its integers, zeros past the last channel.
struct Packed final : PackedWeights {
  Blob w;                      ///< blocks * block_bytes, 64-byte aligned
  std::vector<float> scale;    ///< blocks * 16
  std::vector<float> bias;     ///< blocks * 16
  std::vector<int32_t> colsum; ///< blocks * 16 (u8s8): the sums of the integers before any cut
  PackForm form;
  std::vector<int32_t> fix_start;              ///< blocks + 1: block b's fixes are [fix_start[b], fix_start[b + 1])
  std::vector<dynamic_int8::PairFix> fixes;    ///< pair_safe's, by block
  Blob save() const override {
    return core::pack_arrays({core::array_bytes(static_cast<const std::byte*>(w.data()), w.byte_size()),
                              core::array_bytes(scale.data(), scale.size()), core::array_bytes(bias.data(), bias.size()),
                              core::array_bytes(colsum.data(), colsum.size()), core::array_bytes(&form, 1),
                              core::array_bytes(fix_start.data(), fix_start.size()),
                              core::array_bytes(fixes.data(), fixes.size())});
  }
};

/// Makes each K pair (k even, k + 1) of every channel safe in the packing
/// (pair_fix::make_pair_safe) and records what was cut as fixes.
void make_pairs_safe(Packed& p, const WeightPanels& wp, const int8_t* q) {
  auto* dst = static_cast<int8_t*>(p.w.data());
  p.fix_start.assign(static_cast<std::size_t>(wp.blocks + 1), 0);
  for (int64_t o = 0; o < wp.n; ++o) {
    const int8_t* src = q + o * wp.k;
    for (int64_t kk = 0; kk < wp.k; kk += 2) {
      int32_t w[2] = {src[kk], kk + 1 < wp.k ? src[kk + 1] : 0}, d[2];
      pair_fix::make_pair_safe(w[0], w[1], d[0], d[1]);
      for (int64_t j = 0; j < 2 && kk + j < wp.k; ++j) {
        if (!d[j]) continue;
        dst[wp.offset(o, kk + j)] = static_cast<int8_t>(w[j]);
        p.fixes.push_back({static_cast<int32_t>(kk + j), static_cast<int16_t>(o % kBlockN), static_cast<int16_t>(d[j])});
      }
    }
    p.fix_start[static_cast<std::size_t>(o / kBlockN + 1)] = static_cast<int32_t>(p.fixes.size());
  }
  for (std::size_t b = 1; b < p.fix_start.size(); ++b) p.fix_start[b] = std::max(p.fix_start[b], p.fix_start[b - 1]);
}

WeightPanels panels_of(const Layer& layer, bool u8s8) {
  const Shape& w = layer.weight("weight").shape();
  return WeightPanels(w[0], w[1], u8s8);
}

/// `qmax`: the weights' integer range (form_qmax(u8s8) for a dense layer);
/// `pair_safe`: make_pairs_safe (8-bit weights in the u8 form without VNNI).
std::shared_ptr<Packed> pack_dynamic(const PackInfo& info, bool u8s8, int32_t qmax, bool pair_safe = false) {
  const Layer& layer = *info.layer;
  const WeightPanels wp = panels_of(layer, u8s8);
  const std::size_t lanes = wp.lanes();
  check_prepare_bytes(info, wp.packed_bytes() + 3 * lanes * sizeof(float), "its int8 weights");
  const core::ChannelQuantized q = core::channel_int8(layer.weight("weight"), qmax);
  const Blob* bias = layer.find_weight("bias");
  auto p = std::make_shared<Packed>();
  p->form = {qmax, static_cast<int32_t>(wp.group), pair_safe ? 1 : 0};
  p->w = Blob::allocate(Shape{static_cast<int64_t>(wp.packed_bytes())}, DType::quint8);  // zero-filled
  p->scale.assign(lanes, 0.0f);
  p->bias.assign(lanes, 0.0f);
  p->colsum.assign(lanes, 0);
  const Blob b = bias ? core::float_weight(*bias) : Blob();
  auto* dst = static_cast<int8_t*>(p->w.data());
  for (int64_t o = 0; o < wp.n; ++o) {
    const auto c = static_cast<std::size_t>(o);
    p->scale[c] = q.scale[c];
    if (bias) p->bias[c] = b.data_as<float>()[o];
    const int8_t* src = q.q.data() + o * wp.k;
    for (int64_t kk = 0; kk < wp.k; ++kk) {
      dst[wp.offset(o, kk)] = src[kk];
      p->colsum[c] += src[kk];
    }
  }
  if (pair_safe)
    make_pairs_safe(*p, wp, q.q.data());
  else
    p->fix_start.assign(static_cast<std::size_t>(wp.blocks + 1), 0);
  return p;
}

std::shared_ptr<const Packed> unpack_dynamic(const Blob& bytes, const PackInfo& info, bool u8s8, int32_t qmax,
                                             bool pair_safe = false) {
  const WeightPanels wp = panels_of(*info.layer, u8s8);
  const std::size_t packed_bytes = wp.packed_bytes(), lanes = wp.lanes();
  const auto sizes = core::packed_array_sizes(bytes);
  const auto starts = static_cast<std::size_t>(wp.blocks + 1);
  if (!sizes || sizes->size() != 7 || (*sizes)[6] % sizeof(dynamic_int8::PairFix) != 0 ||
      (*sizes)[6] / sizeof(dynamic_int8::PairFix) > static_cast<std::size_t>(wp.n * wp.k))
    return nullptr;
  const std::size_t nfix = (*sizes)[6] / sizeof(dynamic_int8::PairFix);
  auto a = core::unpack_arrays(bytes, {packed_bytes, lanes * sizeof(float), lanes * sizeof(float), lanes * sizeof(int32_t),
                                       sizeof(PackForm), starts * sizeof(int32_t), nfix * sizeof(dynamic_int8::PairFix)});
  if (!a) return nullptr;
  auto p = std::make_shared<Packed>();
  std::memcpy(&p->form, (*a)[4], sizeof(PackForm));
  // Packed for a CPU with(out) VNNI or in the other form: packed again.
  if (!(p->form == PackForm{qmax, static_cast<int32_t>(wp.group), pair_safe ? 1 : 0})) return nullptr;
  p->fix_start.resize(starts);
  p->fixes.resize(nfix);
  std::memcpy(p->fix_start.data(), (*a)[5], starts * sizeof(int32_t));
  if (nfix) std::memcpy(p->fixes.data(), (*a)[6], nfix * sizeof(dynamic_int8::PairFix));
  // Fixes in range and in order: a file's bytes are checked, never trusted.
  if (!pair_fix::fixes_valid(p->fix_start, p->fixes, wp.k)) return nullptr;
  p->w = Blob::view(core::owner_of(bytes), (*a)[0], Shape{static_cast<int64_t>(packed_bytes)}, DType::quint8);
  p->scale.resize(lanes);
  p->bias.resize(lanes);
  p->colsum.resize(lanes);
  std::memcpy(p->scale.data(), (*a)[1], lanes * sizeof(float));
  std::memcpy(p->bias.data(), (*a)[2], lanes * sizeof(float));
  std::memcpy(p->colsum.data(), (*a)[3], lanes * sizeof(int32_t));
  return p;
}

/// `per_tensor`: dynamic_quant_dense (core/layer_types.hpp), the model's own
/// arithmetic (ONNX Runtime's quantize_dynamic), exact: one scale and zero
/// point for the whole input as DynamicQuantizeLinear gives them, u8 where
/// AVX512-VNNI runs the form, else u8 with safe pairs (make_pairs_safe) or
/// int16 values q - zp, as the packing says; an input holding NaN
/// or infinity gives NaN. Otherwise each row on its own grid.
class Prepared final : public PreparedRoutine {
 public:
  Prepared(const LayerInfo& info, bool u8s8, std::shared_ptr<const Packed> packed, bool per_tensor = false)
      : u8s8_(u8s8), per_tensor_(per_tensor), packed_(std::move(packed)) {
    const Layer& layer = *info.layer;
    const Shape& in = info.input_shapes[0];
    k_ = in[in.rank() - 1];
    m_ = k_ ? in.numel() / k_ : 0;
    const WeightPanels wp = panels_of(layer, u8s8);
    n_ = wp.n;
    group_ = wp.group;
    steps_ = wp.steps;
    ldu_ = steps_ * group_;
    block_bytes_ = wp.block_bytes;
    blocks_ = wp.blocks;
    act_ = core::fused_activation(layer, true, true);
    if (!packed_ || wp.k != k_ || packed_->w.byte_size() != wp.packed_bytes() || packed_->scale.size() != wp.lanes() ||
        packed_->form.qmax != (per_tensor ? 127 : form_qmax(u8s8)) || packed_->form.group != wp.group ||
        packed_->fix_start.size() != static_cast<std::size_t>(wp.blocks + 1))
      throw Error("cpu/dynamic_int8: its packed weights do not fit this layer", {}, layer.name, "weight");
    vnni_ = u8s8 && !packed_->form.pair_safe && packed_->form.qmax == dynamic_int8::kVnniQmax;
  }

  std::size_t workspace_bytes() const override {
    const std::size_t values = static_cast<std::size_t>(m_ * ldu_) * (u8s8_ ? sizeof(uint8_t) : sizeof(int16_t));
    return (values + 63) / 64 * 64 + static_cast<std::size_t>(m_) * (sizeof(float) + sizeof(int32_t)) + 64;
  }

  void run(const RunArgs& args) override {
    if (m_ == 0 || n_ == 0) return;
    const float* x = args.inputs[0]->data_as<float>();
    float* y = args.outputs[0]->data_as<float>();
    const std::size_t values = static_cast<std::size_t>(m_ * ldu_) * (u8s8_ ? sizeof(uint8_t) : sizeof(int16_t));
    auto* base = static_cast<char*>(args.workspace);
    auto* xs = reinterpret_cast<float*>(base + (values + 63) / 64 * 64);
    auto* zp = reinterpret_cast<int32_t*>(xs + m_);
    auto* u = reinterpret_cast<int16_t*>(base);
    auto* q = reinterpret_cast<uint8_t*>(base);
    const bool finite = per_tensor_ ? quantize_tensor(x, q, u, xs, zp, args) : quantize_rows(x, q, u, xs, zp, args);
    if (!finite && per_tensor_) {  // no scale to quantise by
      std::fill_n(y, m_ * n_, std::numeric_limits<float>::quiet_NaN());
      return;
    }
    // Rows holding NaN or infinity (xs NaN) run on int8 with the others, then
    // are computed again as float32 has them (non_finite_rows).
    if (!finite) quantize_rows_one_by_one(x, q, u, xs, zp, args);
    run_int8(q, u, xs, zp, y, args);
    if (!finite) non_finite_rows(x, xs, y, args);
  }

 private:
  void run_int8(const uint8_t* q, const int16_t* u, const float* xs, const int32_t* zp, float* y,
                const RunArgs& args) const {
    const Packed& p = *packed_;
    const auto* w = static_cast<const int8_t*>(p.w.data());
    if (vnni_) return run_vnni(q, xs, zp, y, args);
    // Column blocks over the threads; each streams its block's weights once
    // and keeps them in cache over every row tile.
    args.pool->parallel_for(blocks_, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int nvalid = static_cast<int>(std::min<int64_t>(kBlockN, n_ - blk * kBlockN));
        const std::size_t lane0 = static_cast<std::size_t>(blk * kBlockN);
        const int8_t* wb = w + blk * block_bytes_;
        for (int64_t r = 0; r < m_; r += kTileM) {
          const int mr = static_cast<int>(std::min<int64_t>(kTileM, m_ - r));
          float* yr = y + r * n_ + blk * kBlockN;
          const auto b = static_cast<std::size_t>(blk);
          if (u8s8_)
            dynamic_int8::gemm_tile_u8s8(mr, q + r * ldu_, ldu_, wb, steps_, xs + r, zp + r, p.colsum.data() + lane0,
                                         p.scale.data() + lane0, p.bias.data() + lane0, yr, n_, nvalid,
                                         p.fixes.data() + p.fix_start[b], p.fix_start[b + 1] - p.fix_start[b]);
          else
            dynamic_int8::gemm_tile(mr, u + r * ldu_, ldu_, wb, steps_, xs + r, p.scale.data() + lane0,
                                    p.bias.data() + lane0, yr, n_, nvalid);
        }
        if (act_.kind == core::Activation::none && !act_.affine()) continue;
        for (int64_t r = 0; r < m_; ++r) cpu::activate_row(act_, *v_, y + r * n_ + blk * kBlockN, nvalid, approx_gelu());
      }
    });
  }

  /// gelu_approx where the int8 products are our reduced precision (per row: its
  /// error dwarfs 5e-5); a quantised model's own arithmetic (per tensor, ONNX
  /// Runtime's quantize_dynamic) keeps the exact GELU after it.
  bool approx_gelu() const { return !per_tensor_; }

  /// After quantize_rows found a row it cannot quantise (the kernels stop at
  /// the first): every row on its own; those holding NaN or infinity get a NaN
  /// scale (their products computed again after) and zeros.
  void quantize_rows_one_by_one(const float* x, uint8_t* q, int16_t* u, float* xs, int32_t* zp,
                                const RunArgs& args) const {
    args.pool->parallel_for(m_, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * k_;
        const bool ok = u8s8_ ? dynamic_int8::quantize_rows_u8(xr, 1, k_, k_, q + r * ldu_, ldu_, xs + r, zp + r)
                              : dynamic_int8::quantize_rows(xr, 1, k_, k_, u + r * ldu_, ldu_, xs + r);
        if (ok) continue;
        if (u8s8_) std::memset(q + r * ldu_, 0, static_cast<std::size_t>(ldu_));
        else std::memset(u + r * ldu_, 0, sizeof(int16_t) * static_cast<std::size_t>(ldu_));
        xs[r] = std::numeric_limits<float>::quiet_NaN();
        zp[r] = 0;
      }
    });
  }

  /// The rows holding NaN or infinity (xs NaN) in float32 with the dequantised
  /// weights, as cpu::non_finite_row computes them: NaN everywhere, or the
  /// infinities' products alone.
  void non_finite_rows(const float* x, const float* xs, float* y, const RunArgs& args) const {
    const Packed& p = *packed_;
    const auto* w = static_cast<const int8_t*>(p.w.data());
    auto weight = [&](int64_t kk, int64_t o) { return static_cast<float>(w[offset(o, kk)]); };
    args.pool->parallel_for(m_, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        if (!std::isnan(xs[r])) continue;
        const float* xr = x + r * k_;
        float* yr = y + r * n_;
        cpu::non_finite_row(k_, n_, [&](int64_t kk) { return xr[kk]; }, weight, yr);
        for (int64_t o = 0; o < n_; ++o) {
          const auto c = static_cast<std::size_t>(o);
          yr[o] = core::apply_activation(act_, yr[o] * p.scale[c] + p.bias[c]);
        }
      }
    });
  }

  /// Each row on its own grid (xs, zp per row), rows in chunks of whole tiles.
  /// False where the input holds NaN or infinity.
  bool quantize_rows(const float* x, uint8_t* q, int16_t* u, float* xs, int32_t* zp, const RunArgs& args) const {
    std::atomic<bool> finite{true};
    args.pool->parallel_for(ceil_div(m_, kTileM), 1, [&](int64_t t0, int64_t t1) {
      const int64_t r0 = t0 * kTileM, r1 = std::min(m_, t1 * kTileM);
      const bool ok = u8s8_ ? dynamic_int8::quantize_rows_u8(x + r0 * k_, r1 - r0, k_, k_, q + r0 * ldu_, ldu_, xs + r0, zp + r0)
                            : dynamic_int8::quantize_rows(x + r0 * k_, r1 - r0, k_, k_, u + r0 * ldu_, ldu_, xs + r0);
      if (!ok) finite.store(false, std::memory_order_relaxed);
    });
    return finite.load();
  }

  /// One scale and zero point for the whole input (DynamicQuantizeLinear's), every row's.
  bool quantize_tensor(const float* x, uint8_t* q, int16_t* u, float* xs, int32_t* zp, const RunArgs& args) const {
    constexpr int64_t kChunks = 64;  // min/max partials, one slot each
    const int64_t total = m_ * k_;
    const int64_t chunks = std::clamp<int64_t>(total / 16384, 1, kChunks), per = ceil_div(total, chunks);
    float lo[kChunks], hi[kChunks];
    args.pool->parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t b = c * per, e = std::min(total, b + per);
        lo[c] = hi[c] = 0;
        if (b < e) v_->min_max(x + b, e - b, &lo[c], &hi[c]);
      }
    });
    float mn = 0, mx = 0;
    for (int64_t c = 0; c < chunks; ++c) mn = std::min(mn, lo[c]), mx = std::max(mx, hi[c]);
    if (!std::isfinite(mn) || !std::isfinite(mx)) return false;
    float scale = 1, zp_value = 0;
    core::dynamic_quant_params(mn, mx, scale, zp_value);
    const auto z = static_cast<int32_t>(zp_value);
    std::fill_n(xs, m_, scale);
    std::fill_n(zp, m_, z);
    std::atomic<bool> finite{true};  // (min and max pass over NaN)
    args.pool->parallel_for(ceil_div(m_, kTileM), 1, [&](int64_t t0, int64_t t1) {
      const int64_t r0 = t0 * kTileM, r1 = std::min(m_, t1 * kTileM);
      const float* xr = x + r0 * k_;
      const bool ok = !u8s8_ ? dynamic_int8::quantize_tensor(xr, r1 - r0, k_, k_, u + r0 * ldu_, ldu_, scale, z)
                      : vnni_ ? dynamic_int8::quantize_tensor_u8(xr, r1 - r0, k_, k_, q + r0 * ldu_, ldu_, scale, z)
                              : dynamic_int8::quantize_tensor_u8_avx2(xr, r1 - r0, k_, k_, q + r0 * ldu_, ldu_, scale, z);
      if (!ok) finite.store(false, std::memory_order_relaxed);
    });
    return finite.load();
  }

  /// The u8 form on AVX512-VNNI: tiles of 6 rows x 64 columns (4 blocks), the
  /// threads over groups of 4 blocks, each group's weights kept in cache
  /// over every row tile.
  void run_vnni(const uint8_t* q, const float* xs, const int32_t* zp, float* y, const RunArgs& args) const {
    using dynamic_int8::kTileBlocksVnni;
    using dynamic_int8::kTileMVnni;
    const Packed& p = *packed_;
    const auto* w = static_cast<const int8_t*>(p.w.data());
    const int64_t groups = ceil_div(blocks_, kTileBlocksVnni);
    args.pool->parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t blk = g * kTileBlocksVnni, col = blk * kBlockN;
        const int nb = static_cast<int>(std::min<int64_t>(kTileBlocksVnni, blocks_ - blk));
        const int64_t ncols = std::min<int64_t>(nb * kBlockN, n_ - col);
        const int nlast = static_cast<int>(ncols - (nb - 1) * kBlockN);
        const auto lane0 = static_cast<std::size_t>(col);
        for (int64_t r = 0; r < m_; r += kTileMVnni) {
          const int mr = static_cast<int>(std::min<int64_t>(kTileMVnni, m_ - r));
          dynamic_int8::gemm_tile_vnni(mr, nb, q + r * ldu_, ldu_, w + blk * block_bytes_, block_bytes_, steps_, xs + r,
                                       zp + r, p.colsum.data() + lane0, p.scale.data() + lane0, p.bias.data() + lane0,
                                       y + r * n_ + col, n_, nlast);
        }
        if (act_.kind == core::Activation::none && !act_.affine()) continue;
        for (int64_t r = 0; r < m_; ++r) cpu::activate_row(act_, *v_, y + r * n_ + col, ncols, approx_gelu());
      }
    });
  }

  /// Where weight (channel o, k) lies in the packing.
  int64_t offset(int64_t o, int64_t kk) const {
    return (o / kBlockN) * block_bytes_ + (kk / group_) * group_ * kBlockN + (o % kBlockN) * group_ + kk % group_;
  }

  bool u8s8_ = false, per_tensor_ = false, vnni_ = false;
  int64_t k_ = 0, m_ = 0, n_ = 0, group_ = 2, steps_ = 0, ldu_ = 0, block_bytes_ = 0, blocks_ = 0;
  core::Activation act_;
  const cpu::vec::Kernels* v_ = cpu::vec::best_kernels();
  std::shared_ptr<const Packed> packed_;
};

class DynamicQuantDense final : public Routine {
 public:
  std::string_view layer_type() const override { return "dynamic_quant_dense"; }
  std::string_view algorithm() const override { return "dynamic_int8"; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == Schema{})) return Support::no("cpu/dynamic_int8 computes in cpu (plain float32 in and out)");
    if (!dynamic_int8::avx2_usable()) return Support::no("cpu/dynamic_int8 needs AVX2 and FMA");
    if (!info.layer || info.layer->inputs.size() != 1) return Support::no("dynamic_quant_dense needs one input");
    if (Support s = core::int8_routine_weight(*info.layer, "weight", true); !s) return s;
    if (Support s = routines::float_weights(*info.layer, {"bias"}, "cpu/dynamic_int8"); !s) return s;
    const Shape& in = info.input_shapes[0];
    if (const int64_t k = in[in.rank() - 1]; k > dynamic_int8::kMaxK)
      return Support::no(fmt::format("K {} over {}: the int32 sums of int8 products could overflow", k, dynamic_int8::kMaxK));
    return Support::yes();
  }
  /// The u8 form: on 8 bits by vpdpbusd where AVX512-VNNI runs it, else by
  /// vpmaddubsw with the pairs made safe (make_pairs_safe) while their fixes
  /// stay few; past that the int16 form (a fix costs a product per row).
  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams&) const override {
    const bool vnni = dynamic_int8::vnni512_usable();
    auto p = pack_dynamic(info, true, 127, !vnni);
    const Shape& w = info.layer->weight("weight").shape();
    if (!pair_fix::few_fixes(p->fixes.size(), w.numel())) return pack_dynamic(info, false, 127);
    return p;
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& info, const Schema&,
                                              const RoutineParams&) const override {
    const bool vnni = dynamic_int8::vnni512_usable();
    if (auto p = unpack_dynamic(bytes, info, true, 127, !vnni)) return p;
    return vnni ? nullptr : unpack_dynamic(bytes, info, false, 127);
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams&,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    auto p = std::dynamic_pointer_cast<const Packed>(std::move(packed));
    const bool u8s8 = p && p->form.group == 4;
    return std::make_unique<Prepared>(info, u8s8, std::move(p), true);
  }
};

class DynamicInt8 final : public Routine {
 public:
  std::string_view layer_type() const override { return "dense"; }
  std::string_view algorithm() const override { return "dynamic_int8"; }
  DType precision(const Schema&) const override { return DType::qint8; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == Schema{})) return Support::no("cpu/dynamic_int8 computes in cpu (plain float32 in and out)");
    if (!dynamic_int8::avx2_usable()) return Support::no("cpu/dynamic_int8 needs AVX2 and FMA");
    if (!info.layer || info.layer->inputs.size() != 1) return Support::no("dense needs one input");
    if (Support s = core::int8_routine_weight(*info.layer, "weight", true); !s) return s;
    if (Support s = routines::float_weights(*info.layer, {"bias"}, "cpu/dynamic_int8"); !s) return s;
    if (Support s = cpu::check_dense(info, "cpu/dynamic_int8"); !s) return s;
    const Shape& in = info.input_shapes[0];
    if (const int64_t k = in[in.rank() - 1]; k > dynamic_int8::kMaxK)
      return Support::no(fmt::format("K {} over {}: the int32 sums of int8 products could overflow", k, dynamic_int8::kMaxK));
    return Support::yes();
  }
  /// u8s8: activations as u8 and weights on 7 bits, vpmaddubsw's twice the
  /// products per instruction (judged by the accuracy budget like every form);
  /// on 8 bits by vpdpbusd where AVX512-VNNI runs it (form_qmax).
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override { return {{"u8s8", {0, 1}}}; }
  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams& params) const override {
    const bool u8s8 = routine_param(params, "u8s8", 0) != 0;
    return pack_dynamic(info, u8s8, form_qmax(u8s8));
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& info, const Schema&,
                                              const RoutineParams& params) const override {
    const bool u8s8 = routine_param(params, "u8s8", 0) != 0;
    return unpack_dynamic(bytes, info, u8s8, form_qmax(u8s8));
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams& params,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    return std::make_unique<Prepared>(info, routine_param(params, "u8s8", 0) != 0,
                                      std::dynamic_pointer_cast<const Packed>(std::move(packed)));
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(DynamicInt8);
SOFTNEURO_REGISTER_ROUTINE(DynamicQuantDense);

}  // namespace softneuro
