// cpu/int8_attention — the attention layer (core/layer_types.hpp) in float32
// that multiplies in int8, with cpu/dynamic_int8's kernels
// (dynamic_int8_kernels.hpp): per batch and head, each key row quantised to
// int8 (its own scale) and each value channel too, packed once as the kernels'
// weight blocks; per block of query rows, the rows as u8 (a scale and zero
// point each), S = Q·Kᵀ in exact int32 sums scaled back to float32, each row
// scaled, masked and exponentiated in float32 (attention_blocks.hpp), the
// exponentials (in [0, 1], 1 at the row's largest) as u8 on a grid of 1/255,
// then O = P·V, each row divided by its sum. On AVX512-VNNI (vpdpbusd) every
// operand keeps 8 bits; on AVX2 (vpmaddubsw, whose pair sums saturate at
// int16) the queries and the values take 7. Twice to four times the products per instruction
// of float32 FMAs: Whisper's 1,500-frame attention is most of its encoder.
// Reduced precision (qint8): a candidate where the tuning allows qint8, held
// to the accuracy budget. Rows whose inputs hold NaN or infinity run in
// float32 (cpu/gemm_attention's GEMM and kernels), as softmax computes them.
//
// Routine parameter m_block: query rows per block (their float32 scores stay
// in L2 at long key counts with the smaller choices).
#include "routines/cpu/attention_blocks.hpp"
#include "routines/cpu/dynamic_int8_kernels.hpp"

#include "core/cpu_features.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

// The kernels are x86-64's (CMakeLists.txt): elsewhere this routine is not registered.
#if defined(__x86_64__)

namespace softneuro {
namespace {

namespace d8 = dynamic_int8;
using core::AttentionGeometry;
using cpu::gemm::round_up;

constexpr int64_t kBlockN = d8::kBlockN;
constexpr int64_t kGroupN = kBlockN * d8::kTileBlocksVnni;  // columns of one kernel call

/// Operands packed as the VNNI kernel's weight blocks: n columns (keys for
/// Q·Kᵀ, value channels for P·V) over a depth (features, keys) of `quads`
/// groups of 4, int8 per column with its scale and integer sum, zeros past the end.
struct Operand {
  int64_t n = 0, quads = 0, blocks = 0, block_bytes = 0;
  int8_t* w = nullptr;
  float* scale = nullptr;
  int32_t* sum = nullptr;

  static Operand layout(int64_t n, int64_t depth) {
    Operand o;
    o.n = n;
    o.quads = (depth + 3) / 4;
    o.blocks = (n + kBlockN - 1) / kBlockN;
    o.block_bytes = o.quads * 4 * kBlockN;
    return o;
  }
  int64_t lanes() const { return round_up(blocks * kBlockN, kGroupN); }
  int64_t bytes() const { return round_up(blocks * block_bytes, 64) + lanes() * 8; }
  void place(std::byte* at) {
    w = reinterpret_cast<int8_t*>(at);
    scale = reinterpret_cast<float*>(at + round_up(blocks * block_bytes, 64));
    sum = reinterpret_cast<int32_t*>(scale + lanes());
  }
  /// Zeros past the last column, where the packing writes nothing.
  void clear() {
    std::memset(w, 0, static_cast<std::size_t>(blocks * block_bytes));
    std::fill(scale, scale + lanes(), 0.0f);
    std::fill(sum, sum + lanes(), 0);
  }
};

Support usable() {
  if (!d8::avx2_usable()) return Support::no("cpu/int8_attention needs AVX2 and FMA");
  return Support::yes();
}

class Prepared final : public PreparedRoutine {
 public:
  Prepared(const LayerInfo& info, int64_t m_block)
      : g_(core::attention_geometry(*info.layer, info.input_shapes)),
        v_(cpu::vec::best_kernels()),
        k_(cpu::gemm::best_kernel()),
        vnni_(d8::vnni512_usable()),
        q_top_(vnni_ ? 255 : 127),
        v_qmax_(vnni_ ? d8::kVnniQmax : d8::kU8s8Qmax) {
    mb_ = std::max<int64_t>(1, std::min(m_block, g_.sq));
    slots_ = team_threads(info);
    keys_ = Operand::layout(g_.sk, g_.d);
    values_ = Operand::layout(g_.dv, g_.sk);
    ldq_ = round_up(g_.d, 4);
    ldp_ = round_up(g_.sk, 4);
    ld_s_ = round_up(g_.sk, 16);
    // The float32 operands of a head or block holding NaN or infinity, packed for the GEMM.
    kc_d_ = std::max<int64_t>(1, std::min<int64_t>(g_.d, cpu::gemm::default_kc(*k_)));
    pk_ = round_up(cpu::gemm::packed_b_size(*k_, g_.d, g_.sk), 16);
    pq_ = round_up(cpu::gemm::packed_a_size(*k_, mb_, g_.d), 16);
    slot_bytes_ = keys_.bytes() + values_.bytes() + round_up(mb_ * ldq_, 64) + round_up(mb_ * ldp_, 64) +
                  4 * round_up(mb_ * ld_s_, 16) + 4 * 4 * round_up(mb_, 16) + 4 * (pk_ + pq_);
    chunks_ = cpu::attention::query_chunks(g_, mb_, slots_);
  }
  std::size_t workspace_bytes() const override { return static_cast<std::size_t>(slot_bytes_ * slots_); }

  void run(const RunArgs& a) override {
    const float* q = a.inputs[0]->data_as<float>();
    const float* k = a.inputs[1]->data_as<float>();
    const float* v = a.inputs[2]->data_as<float>();
    const float* mask = g_.has_mask ? a.inputs[3]->data_as<float>() : nullptr;
    float* out = a.outputs[0]->data_as<float>();
    auto* ws = static_cast<std::byte*>(a.workspace);
    const int64_t blocks = (g_.sq + mb_ - 1) / mb_;
    cpu::for_each_task(a.pool, slots_, g_.b * g_.h * chunks_, [&](int64_t t, int slot) {
      const int64_t chunk = t % chunks_, h = t / chunks_ % g_.h, b = t / chunks_ / g_.h;
      std::byte* at = ws + slot * slot_bytes_;
      Operand keys = keys_, values = values_;
      keys.place(at);
      at += keys.bytes();
      values.place(at);
      at += values.bytes();
      auto* qu = reinterpret_cast<uint8_t*>(at);
      at += round_up(mb_ * ldq_, 64);
      auto* pu = reinterpret_cast<uint8_t*>(at);
      at += round_up(mb_ * ldp_, 64);
      auto* s = reinterpret_cast<float*>(at);
      float* qs = s + round_up(mb_ * ld_s_, 16);
      float* ps = qs + round_up(mb_, 16);
      auto* qz = reinterpret_cast<int32_t*>(ps + round_up(mb_, 16));
      auto* pz = qz + round_up(mb_, 16);
      float* pk = reinterpret_cast<float*>(pz + round_up(mb_, 16));
      float* pq = pk + pk_;
      bool keys_packed = false;  // pk: K in float32, packed where a block first needs it
      const float* kh = k + g_.k_at(b, h);
      const float* vh = v + g_.v_at(b, h);
      // K's keys over the features (either way it is stored), V's channels over the keys.
      keys.clear();
      values.clear();
      const bool finite =
          (g_.k[3] == 1
               ? d8::pack_rows_int8(kh, g_.sk, g_.d, g_.k[2], keys.w, keys.block_bytes, keys.scale, keys.sum, d8::kVnniQmax)
               : d8::pack_columns_int8(kh, g_.d, g_.sk, g_.k[3], keys.w, keys.block_bytes, keys.scale, keys.sum,
                                       d8::kVnniQmax)) &&
          d8::pack_columns_int8(vh, g_.sk, g_.dv, g_.v[2], values.w, values.block_bytes, values.scale, values.sum, v_qmax_);
      const int64_t per = (blocks + chunks_ - 1) / chunks_;
      for (int64_t blk = chunk * per; blk < std::min(blocks, (chunk + 1) * per); ++blk) {
        const int64_t i0 = blk * mb_, rows = std::min(mb_, g_.sq - i0);
        const float* qb = q + b * g_.q[0] + h * g_.q[1] + i0 * g_.q[2];
        float* o = out + b * g_.out[0] + h * g_.out[1] + i0 * g_.out[2];
        if (finite && d8::quantize_rows_u8(qb, rows, g_.d, g_.q[2], qu, ldq_, qs, qz, q_top_)) {
          products(rows, qu, ldq_, keys, qs, qz, s, ld_s_);
        } else {  // in float32 on the packed GEMM (scalar loops took 190 ms for one of Whisper's heads)
          if (!keys_packed) cpu::attention::pack_keys(*k_, g_, k, b, h, kc_d_, pk);
          keys_packed = true;
          cpu::gemm::pack_a(*k_, rows, g_.d, kc_d_, qb, g_.q[2], false, pq);
          cpu::gemm::gemm_block(*k_, rows, g_.sk, g_.d, kc_d_, pq, pk, s, ld_s_, cpu::gemm::Epilogue{}, 0, rows, 0, g_.sk);
        }
        for (int64_t r = 0; r < rows; ++r) qs[r] = cpu::attention::softmax_row(g_, *v_, s + r * ld_s_, mask, b, h, i0 + r);
        // The exponentials (in [0, 1]) on a u8 grid of 1/255, zero point 0;
        // each row's 1/sum (qs, from softmax_row) folded into its scale.
        if (finite && d8::quantize_unit_rows(s, rows, g_.sk, ld_s_, pu, ldp_)) {
          for (int64_t r = 0; r < rows; ++r) ps[r] = qs[r] / 255.0f, pz[r] = 0;
          products(rows, pu, ldp_, values, ps, pz, o, g_.out[2]);
        } else {
          cpu::attention::outputs_of(g_, *v_, s, ld_s_, rows, vh, qs, o);
        }
      }
    });
  }

 private:
  /// y[r][c] for r < rows and every column c of `w`: u8 rows x w's int8 columns, scaled.
  void products(int64_t rows, const uint8_t* u, int64_t ldu, const Operand& w, const float* us, const int32_t* uz,
                float* y, int64_t ldy) const {
    if (!vnni_) {
      for (int64_t c0 = 0; c0 < w.n; c0 += kBlockN) {
        const int nvalid = static_cast<int>(std::min<int64_t>(kBlockN, w.n - c0));
        const int8_t* blk = w.w + (c0 / kBlockN) * w.block_bytes;
        for (int64_t r = 0; r < rows; r += d8::kTileM) {
          const int mr = static_cast<int>(std::min<int64_t>(d8::kTileM, rows - r));
          d8::gemm_tile_u8s8(mr, u + r * ldu, ldu, blk, w.quads, us + r, uz + r, w.sum + c0, w.scale + c0, nullptr,
                             y + r * ldy + c0, ldy, nvalid);
        }
      }
      return;
    }
    for (int64_t c0 = 0; c0 < w.n; c0 += kGroupN) {
      const int nb = static_cast<int>(std::min<int64_t>(d8::kTileBlocksVnni, w.blocks - c0 / kBlockN));
      const int nlast = static_cast<int>(std::min<int64_t>(kGroupN, w.n - c0) - (nb - 1) * kBlockN);
      for (int64_t r = 0; r < rows; r += d8::kTileMVnni) {
        const int mr = static_cast<int>(std::min<int64_t>(d8::kTileMVnni, rows - r));
        d8::gemm_tile_vnni(mr, nb, u + r * ldu, ldu, w.w + (c0 / kBlockN) * w.block_bytes, w.block_bytes, w.quads,
                           us + r, uz + r, w.sum + c0, w.scale + c0, nullptr, y + r * ldy + c0, ldy, nlast);
      }
    }
  }

  AttentionGeometry g_;
  const cpu::vec::Kernels* v_;
  const cpu::gemm::Kernel* k_;
  // vpdpbusd sums u8 x int8 products without saturation: 8 bits each side. vpmaddubsw's
  // pair sums saturate at int16: 7-bit queries against 8-bit keys, 8-bit exponentials
  // against 7-bit values (of the two splits the nearer to float32 on long attention).
  bool vnni_;
  int q_top_, v_qmax_;
  Operand keys_, values_;
  int64_t mb_ = 1, chunks_ = 1, ldq_ = 0, ldp_ = 0, ld_s_ = 0, slot_bytes_ = 0, kc_d_ = 1, pk_ = 0, pq_ = 0;
  int slots_ = 1;
};

class Int8Attention final : public Routine {
 public:
  std::string_view layer_type() const override { return "attention"; }
  std::string_view algorithm() const override { return "int8_attention"; }
  DType precision(const Schema&) const override { return DType::qint8; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (Support s = usable(); !s) return s;
    if (Support s = cpu::attention::supports(info, schema, "cpu/int8_attention"); !s) return s;
    const AttentionGeometry g = core::attention_geometry(*info.layer, info.input_shapes);
    if (g.d > d8::kMaxK || g.sk > d8::kMaxK)
      return Support::no(fmt::format("{} features or {} keys: over {}, the int32 sums of int8 products could overflow",
                                     g.d, g.sk, d8::kMaxK));
    return Support::yes();
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {{"m_block", {48, 24, 96}}};
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&,
                                           const RoutineParams& params) const override {
    return std::make_unique<Prepared>(info, routine_param(params, "m_block", 48));
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(Int8Attention);

}  // namespace softneuro

#endif
