// cpu:bfloat16/tile_attention — the attention layer (core/layer_types.hpp) on
// AMX tiles: per batch and head, K and V are packed once into the tiles'
// layouts (tile_kernels.hpp); per strip of 32 query rows, S = Q·Kᵀ
// (AMX, float32 accumulators) into a [32, Sk] buffer that stays in L2, each
// row scaled, masked and exponentiated in float32 straight into bfloat16
// (rows with NaN, +inf or no visible key as softmax computes them:
// attention_blocks.hpp), then O = P·V on the tiles and each row divided by
// its sum as it is rounded into the output.
// The score matrix never exists beyond one strip. Beside cpu:bfloat16/onednn
// (oneDNN 2.6's bf16 matmuls, 0.3-0.6 TFLOP/s on Q·Kᵀ with 64 features) for
// the tuner: these products run at 0.7-1.3 TFLOP/s a core (Whisper's shapes).
#include "routines/cpu/attention_blocks.hpp"
#include "routines/cpu/tile_kernels.hpp"

#include "core/cpu_features.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

// AMX is x86-64's: elsewhere the kernels are not built (CMakeLists.txt) and
// these routines are not registered.
#if defined(__x86_64__)

namespace softneuro {
namespace {

namespace tiles = cpu::tile;
using core::AttentionGeometry;
using cpu::gemm::round_up;

constexpr int64_t kRows = tiles::kStripRows;

Support usable() {
  const core::CpuFeatures& f = core::cpu_features();
  if (!(f.amx_tile && f.amx_bf16 && f.avx512_bf16 && f.avx512_core()))
    return Support::no("cpu:bfloat16/tile_attention needs AMX-BF16 and AVX-512 BF16");
  if (!core::amx_tiles_permitted()) return Support::no("the operating system refused this process the AMX tile state");
  if (!cpu::vec::best_kernels()) return Support::no("cpu:bfloat16/tile_attention's softmax needs AVX-512");
  return Support::yes();
}

/// Bytes rounded up to whole cache lines.
int64_t lines(int64_t bytes) { return round_up(bytes, 64); }

class Prepared final : public PreparedRoutine {
 public:
  explicit Prepared(const LayerInfo& info)
      : g_(core::attention_geometry(*info.layer, info.input_shapes)), v_(cpu::vec::best_kernels()) {
    slots_ = team_threads(info);
    keys_pad_ = round_up(g_.sk, 32);
    d_pad_ = round_up(g_.d, 32);
    dv_pad_ = round_up(g_.dv, 32);
    packed_k_ = lines(2 * keys_pad_ * d_pad_);
    packed_v_ = lines(2 * keys_pad_ * dv_pad_);
    queries_ = lines(2 * kRows * d_pad_);
    scores_ = lines(4 * kRows * keys_pad_);
    probs_ = lines(2 * kRows * keys_pad_);
    outs_ = lines(4 * kRows * dv_pad_);
    slot_bytes_ = packed_k_ + packed_v_ + queries_ + scores_ + probs_ + outs_ + lines(4 * kRows);
    mask_bytes_ = g_.has_mask ? lines(4 * info.input_shapes[3].numel()) : 0;
    chunks_ = cpu::attention::query_chunks(g_, kRows, slots_);
  }
  std::size_t workspace_bytes() const override { return static_cast<std::size_t>(mask_bytes_ + slot_bytes_ * slots_); }

  void run(const RunArgs& a) override {
    const uint16_t* q = a.inputs[0]->data_as<uint16_t>();
    const uint16_t* k = a.inputs[1]->data_as<uint16_t>();
    const uint16_t* v = a.inputs[2]->data_as<uint16_t>();
    uint16_t* out = a.outputs[0]->data_as<uint16_t>();
    char* ws = static_cast<char*>(a.workspace);
    const float* mask = nullptr;
    if (g_.has_mask) {  // the softmax adds it in float32
      float* m = reinterpret_cast<float*>(ws);
      tiles::from_bf16(a.inputs[3]->data_as<uint16_t>(), m, a.inputs[3]->shape().numel());
      mask = m;
    }
    const int64_t strips = (g_.sq + kRows - 1) / kRows, per = (strips + chunks_ - 1) / chunks_;
    cpu::for_each_task(a.pool, slots_, g_.b * g_.h * chunks_, [&](int64_t t, int slot) {
      const int64_t chunk = t % chunks_, h = t / chunks_ % g_.h, b = t / chunks_ / g_.h;
      char* base = ws + mask_bytes_ + slot * slot_bytes_;
      auto* pk = reinterpret_cast<uint16_t*>(base);
      auto* pv = reinterpret_cast<uint16_t*>(base + packed_k_);
      auto* qs = reinterpret_cast<uint16_t*>(base + packed_k_ + packed_v_);
      auto* s = reinterpret_cast<float*>(base + packed_k_ + packed_v_ + queries_);
      auto* p = reinterpret_cast<uint16_t*>(base + packed_k_ + packed_v_ + queries_ + scores_);
      auto* o = reinterpret_cast<float*>(base + packed_k_ + packed_v_ + queries_ + scores_ + probs_);
      auto* inv = reinterpret_cast<float*>(base + packed_k_ + packed_v_ + queries_ + scores_ + probs_ + outs_);
      float row_max[kRows];
      tiles::configure_tiles();
      tiles::pack_keys(k + g_.k_at(b, h), g_.k[2], g_.k[3], g_.sk, g_.d, keys_pad_, d_pad_, pk);
      tiles::pack_values(v + g_.v_at(b, h), g_.v[2], g_.v[3], g_.sk, g_.dv, keys_pad_, dv_pad_, pv);
      for (int64_t strip = chunk * per; strip < std::min(strips, (chunk + 1) * per); ++strip) {
        const int64_t i0 = strip * kRows, rows = std::min(kRows, g_.sq - i0);
        load_queries(q + b * g_.q[0] + h * g_.q[1] + i0 * g_.q[2], rows, qs);
        // Keys past the last visible one of the strip's last row are hidden from all its rows.
        const int64_t keys = round_up(g_.visible(i0 + rows - 1), 32);
        // Without a mask or a causal triangle every row sees every key: the row maxima come with the scores.
        const bool plain = !mask && !g_.causal;
        tiles::scores(qs, d_pad_, pk, keys, s, keys_pad_, g_.sk, plain ? row_max : nullptr);
        for (int64_t r = 0; r < kRows; ++r) {
          if (r < rows) {
            inv[r] = probabilities(s + r * keys_pad_, mask, b, h, i0 + r, p + r * keys_pad_, keys,
                                   plain ? row_max + r : nullptr);
          } else {
            std::memset(p + r * keys_pad_, 0, sizeof(uint16_t) * keys);
          }
        }
        tiles::values(p, keys_pad_, pv, keys, keys_pad_, dv_pad_, o);
        for (int64_t r = 0; r < rows; ++r) {
          uint16_t* y = out + b * g_.out[0] + h * g_.out[1] + (i0 + r) * g_.out[2];
          if (g_.visible(i0 + r) == 0) {  // no key at all: softmax's NaN row (0 under masked_rows = zero)
            const float fill = g_.zero_masked_rows ? 0.0f : std::numeric_limits<float>::quiet_NaN();
            for (int64_t e = 0; e < dv_pad_; ++e) o[r * dv_pad_ + e] = fill;
          }
          tiles::scaled_to_bf16(o + r * dv_pad_, inv[r], y, g_.out[3], g_.dv);
        }
      }
      tiles::release_tiles();
    });
  }

 private:
  /// Query row i's scores (s) as bf16 probabilities p[0, keys) for P·V; returns
  /// what the row's output is multiplied by (1/sum, or 1 where p is normalised).
  float probabilities(float* s, const float* mask, int64_t b, int64_t h, int64_t i, uint16_t* p, int64_t keys,
                      const float* score_max) const {
    const int64_t n = g_.visible(i);
    const float* bias;
    float add, m = 0;
    cpu::attention::mask_row(g_, mask, b, h, i, 0, bias, add);
    const float sum = n > 0 ? tiles::softmax_row(s, bias, add, n, g_.scale, p, keys, &m, score_max) : 0.0f;
    if (n > 0 && std::isfinite(m) && std::isfinite(sum) && sum > 0) return 1.0f / sum;
    // NaN or +inf among the scores, or every key masked: the row as softmax computes it.
    const float inv = cpu::attention::softmax_row(g_, *v_, s, mask, b, h, i);
    tiles::to_bf16(s, p, std::min(keys, g_.sk), keys);
    return inv;
  }

  /// The strip's query rows as the A operand: [32, d_pad], zero past the rows and features.
  void load_queries(const uint16_t* q, int64_t rows, uint16_t* qs) const {
    std::memset(qs, 0, sizeof(uint16_t) * kRows * d_pad_);
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* x = q + r * g_.q[2];
      uint16_t* y = qs + r * d_pad_;
      if (g_.q[3] == 1) std::memcpy(y, x, sizeof(uint16_t) * g_.d);
      else
        for (int64_t e = 0; e < g_.d; ++e) y[e] = x[e * g_.q[3]];
    }
  }

  AttentionGeometry g_;
  const cpu::vec::Kernels* v_;
  int slots_ = 1;
  int64_t keys_pad_ = 32, d_pad_ = 32, dv_pad_ = 32, chunks_ = 1;
  int64_t packed_k_ = 0, packed_v_ = 0, queries_ = 0, scores_ = 0, probs_ = 0, outs_ = 0, slot_bytes_ = 0,
          mask_bytes_ = 0;
};

class TileAttention final : public Routine {
 public:
  static constexpr Schema kSchema{Device::cpu, DType::bfloat16, Layout::nchw};
  std::string_view layer_type() const override { return "attention"; }
  std::string_view algorithm() const override { return "tile_attention"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == kSchema)) return Support::no("cpu:bfloat16/tile_attention computes in cpu:bfloat16:nchw");
    if (Support s = usable(); !s) return s;
    const AttentionGeometry g = core::attention_geometry(*info.layer, info.input_shapes);
    if (g.sk == 0 || g.d == 0 || g.sq == 0) return Support::no("cpu:bfloat16/tile_attention needs queries, keys and features");
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    if (Support s = usable(); !s) throw Error(fmt::format("cpu:bfloat16/tile_attention: {}", s.reason));
    return std::make_unique<Prepared>(info);
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(TileAttention);

}  // namespace softneuro

#endif  // defined(__x86_64__)
