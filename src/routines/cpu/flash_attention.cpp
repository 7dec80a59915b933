// cpu/flash_attention — the attention layer (core/layer_types.hpp) with an
// online softmax over blocks of keys (FlashAttention's schedule on a CPU):
// per batch and head K is packed once as GEMM B panels; per block of 64
// queries, each block of key_block keys gives S = Q·Kᵀ (packed GEMM) into a
// [64, key_block] buffer that stays in L1/L2, its rows are exponentiated
// against the block's max (vec kernel exp_row) and P·V is added into the
// output rows (vec kernel rows_times), earlier sums rescaled where a block
// raises a row's max. The score matrix never exists beyond one block; each
// row is divided by its sum at the end. Rows whose every key is masked (or
// whose scores hold NaN or +inf) are computed as softmax computes them: NaN,
// or 0 under masked_rows = zero.
//
// Routine parameter key_block: keys per block (the scores' block is
// 64 x key_block floats).
#include "routines/cpu/attention_blocks.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

namespace softneuro {
namespace {

namespace gemm = cpu::gemm;
using core::AttentionGeometry;

constexpr int64_t kQueryBlock = 64;

class Prepared final : public PreparedRoutine {
 public:
  Prepared(const LayerInfo& info, int64_t key_block)
      : g_(core::attention_geometry(*info.layer, info.input_shapes)), k_(gemm::best_kernel()),
        v_(cpu::vec::best_kernels()) {
    mb_ = std::max<int64_t>(1, std::min(kQueryBlock, g_.sq));
    // Key blocks start at multiples of the kernel's NR: a block is then a packed B of its own.
    nb_ = gemm::round_up(std::max<int64_t>(k_->nr, std::min(key_block, g_.sk)), k_->nr);
    slots_ = team_threads(info);
    auto r16 = [](int64_t f) { return gemm::round_up(f, 16); };
    pk_ = r16(gemm::packed_b_size(*k_, g_.d, g_.sk));
    pq_ = r16(gemm::packed_a_size(*k_, mb_, g_.d));
    s_ = r16(mb_ * nb_);
    slot_floats_ = pk_ + pq_ + s_ + 3 * r16(mb_);
    chunks_ = cpu::attention::query_chunks(g_, mb_, slots_);
  }
  std::size_t workspace_bytes() const override { return sizeof(float) * slot_floats_ * slots_; }

  void run(const RunArgs& a) override {
    const float* q = a.inputs[0]->data_as<float>();
    const float* k = a.inputs[1]->data_as<float>();
    const float* v = a.inputs[2]->data_as<float>();
    const float* mask = g_.has_mask ? a.inputs[3]->data_as<float>() : nullptr;
    float* out = a.outputs[0]->data_as<float>();
    float* ws = static_cast<float*>(a.workspace);
    const int64_t blocks = (g_.sq + mb_ - 1) / mb_;
    cpu::for_each_task(a.pool, slots_, g_.b * g_.h * chunks_, [&](int64_t t, int slot) {
      const int64_t chunk = t % chunks_, h = t / chunks_ % g_.h, b = t / chunks_ / g_.h;
      float* pk = ws + slot * slot_floats_;
      float* pq = pk + pk_;
      float* s = pq + pq_;
      float* row_max = s + s_;
      float* row_sum = row_max + gemm::round_up(mb_, 16);
      float* row_bad = row_sum + gemm::round_up(mb_, 16);  // 1: NaN or +inf met
      cpu::attention::pack_keys(*k_, g_, k, b, h, g_.d, pk);  // one K block: a key block is a packed B of its own
      const float* vh = v + g_.v_at(b, h);
      const int64_t per = (blocks + chunks_ - 1) / chunks_;
      for (int64_t blk = chunk * per; blk < std::min(blocks, (chunk + 1) * per); ++blk) {
        const int64_t i0 = blk * mb_, rows = std::min(mb_, g_.sq - i0);
        gemm::pack_a(*k_, rows, g_.d, g_.d, q + b * g_.q[0] + h * g_.q[1] + i0 * g_.q[2], g_.q[2], false, pq);
        float* o = out + b * g_.out[0] + h * g_.out[1] + i0 * g_.out[2];
        std::fill(row_max, row_max + rows, -std::numeric_limits<float>::infinity());
        std::fill(row_sum, row_sum + rows, 0.0f);
        std::fill(row_bad, row_bad + rows, 0.0f);
        // Keys past the last visible one of the block's last row are hidden from all its rows.
        const int64_t keys = g_.visible(i0 + rows - 1);
        bool started = false;
        for (int64_t j0 = 0; j0 < keys; j0 += nb_) {
          const int64_t nbj = std::min(nb_, keys - j0);
          gemm::gemm_block(*k_, rows, nbj, g_.d, g_.d, pq, pk + (j0 / k_->nr) * g_.d * k_->nr, s, nb_, gemm::Epilogue{},
                           0, rows, 0, nbj);
          for (int64_t r = 0; r < rows; ++r) block_row(s + r * nb_, mask, b, h, i0 + r, j0, nbj, o + r * g_.out[2],
                                                     row_max[r], row_sum[r], row_bad[r], started);
          v_->rows_times(s, nb_, rows, vh + j0 * g_.v[2], g_.v[2], nbj, g_.dv, o, g_.out[2], started);
          started = true;
        }
        for (int64_t r = 0; r < rows; ++r) finish_row(o + r * g_.out[2], row_max[r], row_sum[r], row_bad[r], started);
      }
    });
  }

 private:
  /// One row's scores of the key block [j0, j0 + n) in place: exponentials on the
  /// row's running max, the running sum and the output row rescaled where the max rises.
  void block_row(float* s, const float* mask, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, float* o,
                 float& m, float& l, float& bad, bool started) const {
    const int64_t vis = std::clamp<int64_t>(g_.visible(i) - j0, 0, n);
    const float* bias;
    float add;
    cpu::attention::mask_row(g_, mask, b, h, i, j0, bias, add);
    float mb = -std::numeric_limits<float>::infinity();
    const float sum = vis > 0 ? v_->exp_row(s, bias, add, vis, g_.scale, &mb) : 0.0f;
    std::fill(s + vis, s + n, 0.0f);
    if (mb == -std::numeric_limits<float>::infinity()) {  // every key of the block masked: nothing added
      std::fill(s, s + vis, 0.0f);
      return;
    }
    if (!std::isfinite(mb) || !std::isfinite(sum)) bad = 1;
    if (mb > m) {  // earlier blocks were exponentiated against a smaller max
      const float alpha = std::exp(m - mb);
      if (started && alpha != 1.0f)
        for (int64_t e = 0; e < g_.dv; ++e) o[e] *= alpha;
      l = l * alpha + sum;
      m = mb;
    } else {
      const float beta = std::exp(mb - m);
      for (int64_t j = 0; j < vis; ++j) s[j] *= beta;
      l += sum * beta;
    }
  }

  /// Divides a row by its sum; a row that met no key, NaN or +inf as softmax gives it.
  void finish_row(float* o, float m, float l, float bad, bool started) const {
    if (started && bad == 0 && l > 0 && m > -std::numeric_limits<float>::infinity()) {
      const float inv = 1.0f / l;
      for (int64_t e = 0; e < g_.dv; ++e) o[e] *= inv;
      return;
    }
    // softmax's NaN for the row (every key -inf, or NaN/+inf scores); 0 under masked_rows = zero.
    const float fill = g_.zero_masked_rows ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    for (int64_t e = 0; e < g_.dv; ++e) o[e] = fill;
  }

  AttentionGeometry g_;
  const gemm::Kernel* k_;
  const cpu::vec::Kernels* v_;
  int64_t mb_ = 1, nb_ = 1, chunks_ = 1;
  int64_t pk_ = 0, pq_ = 0, s_ = 0, slot_floats_ = 0;
  int slots_ = 1;
};

class FlashAttention final : public Routine {
 public:
  std::string_view layer_type() const override { return "attention"; }
  std::string_view algorithm() const override { return "flash_attention"; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (Support s = cpu::attention::supports(info, schema, "cpu/flash_attention"); !s) return s;
    const int64_t d = core::attention_geometry(*info.layer, info.input_shapes).d, kc = gemm::default_kc(*gemm::best_kernel());
    if (d > kc) return Support::no(fmt::format("cpu/flash_attention takes up to {} features a head", kc));
    return Support::yes();
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {{"key_block", {256, 128, 512}}};
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&,
                                           const RoutineParams& params) const override {
    return std::make_unique<Prepared>(info, routine_param(params, "key_block", 256));
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(FlashAttention);

}  // namespace softneuro
