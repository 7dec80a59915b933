// cpu/gemm_attention — the attention layer (core/layer_types.hpp) on our packed
// float32 GEMM (gemm.hpp): per batch and head, K packed once as the B operand;
// per block of m_block query rows, S = Q·Kᵀ into a [rows, Sk] buffer, each row
// scaled, biased by the mask and exponentiated (vec kernel exp_row), then
// O = P·V with P read in place (vec kernel rows_times: packing P cost 14% of
// Whisper's encoder) straight into the output (any of the layer's perms with
// the feature dim innermost), each row divided by its sum at the end. The score
// matrix never exists beyond one query block. Tasks: (batch, head, query
// chunk), the chunks only where heads are fewer than threads.
//
// Routine parameter m_block: query rows per block (the [m_block, Sk] scores
// stay in L2 at long key counts with the smaller choices).
#include "routines/cpu/attention_blocks.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace softneuro {
namespace {

namespace gemm = cpu::gemm;
using core::AttentionGeometry;

class Prepared final : public PreparedRoutine {
 public:
  Prepared(const LayerInfo& info, int64_t m_block)
      : g_(core::attention_geometry(*info.layer, info.input_shapes)), k_(gemm::best_kernel()),
        v_(cpu::vec::best_kernels()) {
    mb_ = std::max<int64_t>(1, std::min(m_block, g_.sq));
    kc_d_ = std::max<int64_t>(1, std::min<int64_t>(g_.d, gemm::default_kc(*k_)));
    slots_ = team_threads(info);
    auto r16 = [](int64_t f) { return gemm::round_up(f, 16); };
    pk_ = r16(gemm::packed_b_size(*k_, g_.d, g_.sk));
    pq_ = r16(gemm::packed_a_size(*k_, mb_, g_.d));
    ld_s_ = r16(g_.sk);
    s_ = r16(mb_ * ld_s_);
    slot_floats_ = pk_ + pq_ + s_ + r16(mb_);
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
      float* inv = s + s_;
      cpu::attention::pack_keys(*k_, g_, k, b, h, kc_d_, pk);
      const float* vh = v + g_.v_at(b, h);
      const int64_t per = (blocks + chunks_ - 1) / chunks_;
      for (int64_t blk = chunk * per; blk < std::min(blocks, (chunk + 1) * per); ++blk) {
        const int64_t i0 = blk * mb_, rows = std::min(mb_, g_.sq - i0);
        gemm::pack_a(*k_, rows, g_.d, kc_d_, q + b * g_.q[0] + h * g_.q[1] + i0 * g_.q[2], g_.q[2], false, pq);
        gemm::gemm_block(*k_, rows, g_.sk, g_.d, kc_d_, pq, pk, s, ld_s_, gemm::Epilogue{}, 0, rows, 0, g_.sk);
        for (int64_t r = 0; r < rows; ++r) inv[r] = cpu::attention::softmax_row(g_, *v_, s + r * ld_s_, mask, b, h, i0 + r);
        float* o = out + b * g_.out[0] + h * g_.out[1] + i0 * g_.out[2];
        cpu::attention::outputs_of(g_, *v_, s, ld_s_, rows, vh, inv, o);
      }
    });
  }

 private:
  AttentionGeometry g_;
  const gemm::Kernel* k_;
  const cpu::vec::Kernels* v_;
  int64_t mb_ = 1, kc_d_ = 1, chunks_ = 1;
  int64_t pk_ = 0, pq_ = 0, ld_s_ = 0, s_ = 0, slot_floats_ = 0;
  int slots_ = 1;
};

class GemmAttention final : public Routine {
 public:
  std::string_view layer_type() const override { return "attention"; }
  std::string_view algorithm() const override { return "gemm_attention"; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    return cpu::attention::supports(info, schema, "cpu/gemm_attention");
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {{"m_block", {64, 16, 32, 128}}};
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&,
                                           const RoutineParams& params) const override {
    return std::make_unique<Prepared>(info, routine_param(params, "m_block", 64));
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(GemmAttention);

}  // namespace softneuro
