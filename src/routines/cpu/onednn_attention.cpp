// cpu/onednn for the attention layer (core/layer_types.hpp): Q·Kᵀ and P·V as
// oneDNN matmuls, batched over batch and heads, the layer's operands read in
// place through their perms (strided descriptors); the softmax between them
// ours (attention_blocks.hpp's softmax_row: scale, mask, causal, masked rows).
// The scores exist for one block of query rows at a time, at most
// kScoreBytes. Beside cpu/gemm_attention and cpu/flash_attention (our packed
// GEMM, P·V read in place) it is the attention built on the GEMM routines:
// where oneDNN's GEMM outruns ours (AVX2 at 1,500 keys: Whisper's encoder) the
// tuner takes it.
//
// cpu:bfloat16/onednn (where the CPU has AVX-512 BF16 or AMX): Q, K, V, the
// mask and the output in bfloat16, both products on oneDNN's bf16 matmuls
// (AMX tiles where present) accumulating in float32; the scores and the softmax
// in float32, each row normalised, then reordered to bfloat16 for P·V.
#include "routines/cpu/attention_blocks.hpp"
#include "routines/cpu/onednn_common.hpp"

#include <softneuro/routine.hpp>

#include <oneapi/dnnl/dnnl.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <memory>
#include <type_traits>
#include <vector>

namespace softneuro {
namespace {

using namespace onednn_common;
using core::AttentionGeometry;

/// The scores of one block of query rows (every batch and head) at most.
constexpr int64_t kScoreBytes = int64_t{8} << 20;

using dt = dnnl::memory::data_type;

/// A descriptor of dims `d` with element strides `st` (a broadcast operand's
/// dim of one, stride 0, gets the stride past the others').
dnnl::memory::desc strided(const std::array<int64_t, 4>& d, std::array<int64_t, 4> st, dt type = dt::f32) {
  int64_t past = 1;
  for (int i = 0; i < 4; ++i) past = std::max(past, st[i] * d[i]);
  for (int i = 0; i < 4; ++i)
    if (st[i] == 0) st[i] = past;
  return {dnnl::memory::dims(d.begin(), d.end()), type, dnnl::memory::dims(st.begin(), st.end())};
}

/// C = A · B as one oneDNN matmul: input 0 is A, input 1 is B, output 0 is C.
Plan product(const dnnl::memory::desc& a, const dnnl::memory::desc& b, const dnnl::memory::desc& c) {
  const dnnl::matmul::desc d(a, b, c);
  return Plan::single(dnnl::matmul::primitive_desc(d, make_attr(), cpu_engine()),
                      {{DNNL_ARG_SRC, in0}, {DNNL_ARG_WEIGHTS, Mem{Mem::input, 1}}, {DNNL_ARG_DST, out0}});
}

/// The two products for blocks of `rows` query rows, the operands in `type`
/// (bf16: the float32 scores reordered to bf16 in the workspace before P·V).
struct Products {
  Plan qk, pv;
  Products(const AttentionGeometry& g, int64_t rows, dt type = dt::f32) {
    const int64_t kb = g.k[0] == 0 ? 1 : g.b, kh = g.k[1] == 0 ? 1 : g.h;
    const int64_t vb = g.v[0] == 0 ? 1 : g.b, vh = g.v[1] == 0 ? 1 : g.h;
    const std::array<int64_t, 4> dims{g.b, g.h, rows, g.sk}, dense{g.h * rows * g.sk, rows * g.sk, g.sk, 1};
    const dnnl::memory::desc scores = strided(dims, dense);
    qk = product(strided({g.b, g.h, rows, g.d}, g.q, type),
                 strided({kb, kh, g.d, g.sk}, {g.k[0], g.k[1], g.k[3], g.k[2]}, type), scores);
    const dnnl::memory::desc values = strided({vb, vh, g.sk, g.dv}, g.v, type);
    const dnnl::memory::desc out = strided({g.b, g.h, rows, g.dv}, g.out, type);
    if (type == dt::f32) {
      pv = product(scores, values, out);
      return;
    }
    const dnnl::memory::desc p = strided(dims, dense, type);
    pv.temps.push_back(p);
    const Mem p_mem{Mem::temp, 0};
    pv.steps.push_back({dnnl::reorder::primitive_desc(cpu_engine(), scores, cpu_engine(), p, make_attr()),
                        {{DNNL_ARG_FROM, in0}, {DNNL_ARG_TO, p_mem}}});
    pv.steps.push_back({dnnl::matmul::primitive_desc(dnnl::matmul::desc(p, values, out), make_attr(), cpu_engine()),
                        {{DNNL_ARG_SRC, p_mem}, {DNNL_ARG_WEIGHTS, Mem{Mem::input, 1}}, {DNNL_ARG_DST, out0}}});
  }
  bool reference() const { return !reference_impl(qk).empty() || !reference_impl(pv).empty(); }
};

int64_t block_rows(const AttentionGeometry& g) {
  return std::clamp<int64_t>(kScoreBytes / static_cast<int64_t>(sizeof(float)) / (g.b * g.h * g.sk), 1, g.sq);
}

template <bool Bf16>
class PreparedAttention final : public PreparedRoutine {
 public:
  static constexpr dt kType = Bf16 ? dt::bf16 : dt::f32;
  using Element = std::conditional_t<Bf16, uint16_t, float>;

  PreparedAttention(const LayerInfo& info)
      : g_(core::attention_geometry(*info.layer, info.input_shapes)), v_(cpu::vec::best_kernels()) {
    match_threads(info);
    rows_ = block_rows(g_);
    Products full(g_, rows_, kType);
    full_qk_ = std::make_unique<Prepared>(std::move(full.qk));
    full_pv_ = std::make_unique<Prepared>(std::move(full.pv));
    if (const int64_t tail = g_.sq % rows_; tail > 0) {
      Products last(g_, tail, kType);
      tail_qk_ = std::make_unique<Prepared>(std::move(last.qk));
      tail_pv_ = std::make_unique<Prepared>(std::move(last.pv));
    }
    score_floats_ = (g_.b * g_.h * rows_ * g_.sk + 15) / 16 * 16;
    inv_floats_ = (g_.b * g_.h * rows_ + 15) / 16 * 16;
    if (Bf16 && g_.has_mask) {
      // The bf16 mask as float32 for the softmax, once per run (its elements in their order).
      const int64_t n = info.input_shapes[3].numel();
      mask_floats_ = (n + 15) / 16 * 16;
      const dnnl::memory::desc bf({n}, dt::bf16, dnnl::memory::format_tag::a), f({n}, dt::f32, dnnl::memory::format_tag::a);
      mask_ = std::make_unique<Prepared>(Plan::single(dnnl::reorder::primitive_desc(cpu_engine(), bf, cpu_engine(), f, make_attr()),
                                                      {{DNNL_ARG_FROM, in0}, {DNNL_ARG_TO, out0}}));
    }
    for (const auto* p : {full_qk_.get(), full_pv_.get(), tail_qk_.get(), tail_pv_.get(), mask_.get()})
      if (p) scratch_ = std::max(scratch_, p->workspace_bytes());
  }

  std::size_t workspace_bytes() const override {
    return sizeof(float) * static_cast<std::size_t>(score_floats_ + inv_floats_ + mask_floats_) + scratch_;
  }

  void run(const RunArgs& a) override {
    const Element* q = a.inputs[0]->data_as<Element>();
    Element* out = a.outputs[0]->data_as<Element>();
    float* scores = static_cast<float*>(a.workspace);
    float* inv = scores + score_floats_;
    float* mask_f32 = inv + inv_floats_;
    void* scratch = mask_f32 + mask_floats_;
    const float* mask = nullptr;
    if (g_.has_mask && Bf16) {
      Blob m = Blob::view(mask_f32, Shape{1});
      const Blob* in[] = {a.inputs[3]};
      Blob* o[] = {&m};
      mask_->run(RunArgs{in, o, scratch, a.pool});
      mask = mask_f32;
    } else if (g_.has_mask) {
      mask = a.inputs[3]->data_as<float>();
    }
    Blob keys = Blob::view(const_cast<void*>(a.inputs[1]->data()), Shape{1});
    Blob values = Blob::view(const_cast<void*>(a.inputs[2]->data()), Shape{1});
    Blob score_blob = Blob::view(scores, Shape{1});
    for (int64_t i0 = 0; i0 < g_.sq; i0 += rows_) {
      const int64_t rows = std::min(rows_, g_.sq - i0);
      Prepared& qk = rows == rows_ ? *full_qk_ : *tail_qk_;
      Prepared& pv = rows == rows_ ? *full_pv_ : *tail_pv_;
      Blob queries = Blob::view(const_cast<Element*>(q + i0 * g_.q[2]), Shape{1});
      Blob block_out = Blob::view(out + i0 * g_.out[2], Shape{1});
      const Blob* qk_in[] = {&queries, &keys};
      Blob* qk_out[] = {&score_blob};
      qk.run(RunArgs{qk_in, qk_out, scratch, a.pool});
      // Row t of the block's scores: batch b, head h, query i0 + r.
      struct Row {
        int64_t b, h, r;
      };
      auto row = [&](int64_t t) { return Row{t / rows / g_.h, t / rows % g_.h, t % rows}; };
      const int64_t n = g_.b * g_.h * rows;
      a.pool->parallel_for(n, 8, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const Row x = row(t);
          inv[t] = cpu::attention::softmax_row(g_, *v_, scores + t * g_.sk, mask, x.b, x.h, i0 + x.r);
          if (Bf16) {  // normalised before its bf16 rounding; P·V writes bf16
            // A masked key's exponential (about 1e-38) becomes 0, not a
            // subnormal: those took microcode assists in every pass after
            // (BERT with a padded mask: 6.2 ms of attention against 2.5).
            float* s = scores + t * g_.sk;
            const float by = inv[t];
            for (int64_t j = 0; j < g_.sk; ++j) {
              const float x = s[j], y = std::max(x, 1e-30f) * by;
              s[j] = x > 1e-30f ? y : 0.0f;
            }
            inv[t] = 1.0f;
          }
        }
      });
      const Blob* pv_in[] = {&score_blob, &values};
      Blob* pv_out[] = {&block_out};
      pv.run(RunArgs{pv_in, pv_out, scratch, a.pool});
      // Rows left unnormalised by softmax_row: their outputs divided by the sum.
      a.pool->parallel_for(n, 64, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          if (inv[t] == 1.0f) continue;
          const Row x = row(t);
          if constexpr (!Bf16) {
            float* o = out + x.b * g_.out[0] + x.h * g_.out[1] + (i0 + x.r) * g_.out[2];
            for (int64_t e = 0; e < g_.dv; ++e) o[e * g_.out[3]] *= inv[t];
          }
        }
      });
    }
  }

 private:
  AttentionGeometry g_;
  const cpu::vec::Kernels* v_;
  int64_t rows_ = 1, score_floats_ = 0, inv_floats_ = 0, mask_floats_ = 0;
  std::size_t scratch_ = 0;
  std::unique_ptr<Prepared> full_qk_, full_pv_, tail_qk_, tail_pv_, mask_;
};

template <DType D>
class OnednnAttention final : public Routine {
 public:
  bool costly_prepare() const override { return true; }  // (a oneDNN primitive per shape)
  static constexpr bool kBf16 = D == DType::bfloat16;
  static constexpr Schema kSchema{Device::cpu, D, Layout::nchw};
  std::string_view layer_type() const override { return "attention"; }
  std::string_view algorithm() const override { return "onednn"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == kSchema)) return Support::no(fmt::format("{}/onednn attention computes in {}", kSchema.to_string(), kSchema.to_string()));
    if (!cpu::vec::best_kernels()) return Support::no("cpu/onednn attention's softmax needs AVX2+FMA, AVX-512 or Advanced SIMD");
    if (kBf16 && !has_bf16()) return Support::no("CPU lacks bfloat16 instructions (AVX-512 BF16 or AMX-BF16)");
    try {
      const AttentionGeometry g = core::attention_geometry(*info.layer, info.input_shapes);
      if (g.sk == 0 || g.d == 0 || g.sq == 0) return Support::no("cpu/onednn attention needs queries, keys and features");
      if (g.grouped()) return Support::no("cpu/onednn attention's matmuls take as many key/value heads as query heads, or one");
      match_threads(info);
      const int64_t rows = block_rows(g);
      const dt type = kBf16 ? dt::bf16 : dt::f32;
      if (Products(g, rows, type).reference() || (g.sq % rows && Products(g, g.sq % rows, type).reference()))
        return Support::no("oneDNN has only its reference matmul for these operands");
    } catch (const dnnl::error& e) {
      return Support::no(fmt::format("oneDNN 2.6 cannot create its matmuls: {}", e.what()));
    } catch (const Error& e) {
      return Support::no(e.what());
    }
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    if (kBf16 && !has_bf16()) throw Error("cpu:bfloat16/onednn attention: CPU lacks bfloat16 instructions");
    return std::make_unique<PreparedAttention<kBf16>>(info);
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(OnednnAttention<DType::float32>);
SOFTNEURO_REGISTER_ROUTINE(OnednnAttention<DType::bfloat16>);

}  // namespace softneuro
