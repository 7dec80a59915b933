// cpu/nbits_dense — a dense layer whose weight the model holds blockwise
// quantised (core::block_quantized: the 2-, 4- and 8-bit weights of LLM files,
// ONNX Runtime's MatMulNBits), computed from the codes as stored (4-bit ones two
// a byte: an eighth of float32's memory, and of the bytes a decode step
// streams, which bounds its time). The model's own
// arithmetic in float32 (W = (q - z) * s per block), never reduced precision
// unless the file permits it (MatMulNBits's accuracy_level 4: int8 activations).
//  - up to kMaxRows input rows (a decode step): the rows kernel
//    (nbits_dense_kernels.hpp) over blocks of weight rows per thread;
//  - more (a prompt): per task a slice of output columns is dequantised into
//    the packed B of the float32 GEMM (gemm.hpp) and multiplied there;
//  - at accuracy_level 4: each row quantised to int8 per block, as ONNX
//    Runtime's CompInt8 does, and multiplied from the codes: a decode step by
//    the rows kernel (each thread's weight rows stay in L2 while the rows of x
//    pass them); a prompt of kPanelRows rows or more, any length, by the strip
//    kernels (AVX2, AVX-512 VNNI: strips of weight rows transposed in registers
//    against several rows of x, sums scaled once per block); without them up
//    to kMaxInt8Rows rows.
#include "core/cpu_features.hpp"
#include "core/weight_quant.hpp"
#include "routines/cpu/f32_common.hpp"
#include "routines/cpu/nbits_dense_kernels.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

namespace softneuro {
namespace {

namespace gemm = cpu::gemm;
using cpu::nbits::kMaxRows;
/// The most rows the int8 form takes without the strip kernels (no AVX2): beyond,
/// the float32 GEMM on dequantised panels.
constexpr int64_t kMaxInt8Rows = 64;

constexpr int64_t kBlockRows = 64;  ///< weight rows per task of the rows path
/// The fewest rows of x the panel kernel takes (fewer: the rows kernel, which
/// lays no panel out).
constexpr int64_t kPanelRows = 4;

/// Code kk of weight row o, as stored (the portable paths).
int32_t code_at(const cpu::nbits::Weights& w, int64_t o, int64_t kk) {
  if (w.packed) return core::quint4_code(w.codes + o * w.k / 2, kk);
  const uint8_t c = w.codes[o * w.k + kk];
  return w.is_signed ? int32_t{static_cast<int8_t>(c)} : int32_t{c};
}

void rows_portable(const cpu::nbits::Weights& w, int64_t o0, int64_t o1, const float* x, int64_t m, const float* xsum,
                   float* y, int64_t ldy) {
  for (int64_t o = o0; o < o1; ++o)
    for (int64_t r = 0; r < m; ++r) {
      double total = 0;
      for (int64_t b = 0; b < w.blocks; ++b) {
        const int64_t k0 = b * w.block, k1 = std::min(w.k, k0 + w.block);
        float acc = 0;
        for (int64_t k = k0; k < k1; ++k) acc += static_cast<float>(code_at(w, o, k)) * x[r * w.k + k];
        const std::size_t at = static_cast<std::size_t>(o * w.blocks + b);
        total += double(w.scale[at]) * (acc - (w.zero ? double(w.zero[at]) : 0.0) * xsum[r * w.blocks + b]);
      }
      y[r * ldy + o] = static_cast<float>(total);
    }
}

cpu::nbits::PanelKernel panel_kernel() {
#if defined(__x86_64__) || defined(_M_X64)
  if (core::cpu_features().avx2_fma()) return cpu::nbits::unchecked_panel_avx2();
#endif
  return nullptr;
}

}  // namespace

namespace cpu::nbits {
void quantize_row(const float* x, int64_t k, int64_t block, int8_t* xq, float* xs, int32_t* xsum) {
  for (int64_t b = 0, k0 = 0; k0 < k; ++b, k0 += block) {
    const int64_t k1 = std::min(k, k0 + block);
    float amax = 0;
    for (int64_t i = k0; i < k1; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;  // (as ONNX Runtime's QuantizeARow_CompInt8)
    int32_t sum = 0;
    for (int64_t i = k0; i < k1; ++i) {
      const auto q = static_cast<int8_t>(std::nearbyint(x[i] * inverse));  // round half to even
      xq[i] = q;
      sum += q;
    }
    xs[b] = amax / 127.0f;
    xsum[b] = sum;
  }
}
void panel_layout_x(const int8_t* xq, int64_t rows, int64_t ldq, int64_t k, int max_rows, int32_t* xi) {
  for_each_pass(rows, max_rows, [&](int64_t m0, int64_t mx) {
    int32_t* out = xi + m0 * (k / 4);
    for (int64_t g = 0; g < k / 32; ++g)
      for (int64_t j = 0; j < 8; ++j)
        for (int64_t m = 0; m < mx; ++m) std::memcpy(out + (g * 8 + j) * mx + m, xq + (m0 + m) * ldq + 32 * g + 4 * j, 4);
  });
}
}  // namespace cpu::nbits

namespace {

void int8_rows_portable(const cpu::nbits::Weights& w, int64_t o0, int64_t o1, const int8_t* xq, int64_t ldq,
                        const float* xs, const int32_t* xsum, int64_t rows, float* y, int64_t ldy) {
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t o = o0; o < o1; ++o) {
      const int8_t* xm = xq + m * ldq;
      float r = 0;
      for (int64_t b = 0; b < w.blocks; ++b) {
        int32_t acc = 0;
        for (int64_t kk = b * w.block, end = std::min(w.k, kk + w.block); kk < end; ++kk) acc += code_at(w, o, kk) * xm[kk];
        const auto at = static_cast<std::size_t>(o * w.blocks + b);
        const auto mb = static_cast<std::size_t>(m * w.blocks + b);
        r += w.scale[at] * xs[mb] * static_cast<float>(acc - (w.zero ? w.zero[at] * xsum[mb] : 0));
      }
      y[m * ldy + o] = r;
    }
}

cpu::nbits::Int8RowsKernel int8_rows_kernel(const cpu::nbits::Weights& w) {
#if defined(__x86_64__) || defined(_M_X64)
  const core::CpuFeatures& f = core::cpu_features();
  if (f.avx512_core() && f.avx512_vnni && w.packed && (w.block == 32 || w.block % 64 == 0))
    return cpu::nbits::unchecked_int8_rows_avx512vnni();
  if (f.avx2_fma()) return cpu::nbits::unchecked_int8_rows_avx2();
#endif
  return &int8_rows_portable;
}

/// The prompt kernel where the CPU has it (none: the rows kernels).
cpu::nbits::Int8PanelKernel int8_panel_kernel(const cpu::nbits::Weights& w) {
#if defined(__x86_64__) || defined(_M_X64)
  const core::CpuFeatures& f = core::cpu_features();
  if (!w.packed || w.block % 32 != 0) return {};
  if (f.avx512_core() && f.avx512_vnni) return cpu::nbits::unchecked_int8_panel_avx512vnni();
  if (f.avx2_fma()) return cpu::nbits::unchecked_int8_panel_avx2();
#endif
  (void)w;
  return {};
}

cpu::nbits::RowsKernel rows_kernel() {
#if defined(__x86_64__) || defined(_M_X64)
  if (core::cpu_features().avx2_fma()) return cpu::nbits::unchecked_rows_avx2();
#endif
  return &rows_portable;
}

class Prepared final : public PreparedRoutine {
 public:
  explicit Prepared(const LayerInfo& info)
      : v_(cpu::vec::best_kernels()), rows_(rows_kernel()), panel_(panel_kernel()), g_(gemm::best_kernel()) {
    const Layer& layer = *info.layer;
    const Shape& in = info.input_shapes[0];
    w_ = layer.weight("weight");
    const QuantParams& qp = std::as_const(w_).quant();  // (shared with the layer's, not copied)
    k_ = w_.shape()[1];
    m_ = k_ ? in.numel() / k_ : 0;
    n_ = w_.shape()[0];
    weights_.codes = w_.data_as<uint8_t>();
    weights_.is_signed = w_.dtype() == DType::qint8;
    weights_.packed = w_.dtype() == DType::quint4;
    weights_.n = n_;
    weights_.k = k_;
    weights_.block = qp.block_size;
    weights_.blocks = k_ == 0 ? 0 : (k_ - 1) / qp.block_size + 1;
    weights_.scale = qp.scales.data();  // (w_ holds them)
    weights_.zero = qp.zero_points.empty() ? nullptr : qp.zero_points.data();
    if (const Blob* b = layer.find_weight("bias")) bias_.assign(b->data_as<float>(), b->data_as<float>() + n_);
    act_ = core::fused_activation(layer, true, true);
    slots_ = team_threads(info);
    // The file's accuracy_level 4 (ONNX Runtime's CompInt8) for codes of at most
    // 4 bits: the rows quantised to int8 per block, as it computes.
    const bool level4 = layer.get_int("accuracy_level", 0) == 4 && !weights_.is_signed;
    // Prompts: the strip kernels, at any length (the cost per row of x stays
    // that of the products).
    if (level4 && m_ >= kPanelRows) prompt_ = int8_panel_kernel(weights_);
    int8_ = level4 && (m_ <= kMaxInt8Rows || prompt_.rows);
    use_gemm_ = !int8_ && m_ > kMaxRows && g_;
    if (int8_) int8_rows_ = int8_rows_kernel(weights_);
    if (int8_ && weights_.zero) {
      // A decode step streams its zero points too: one value where all agree, else bytes where they fit
      // (decided once per model: every plan of a decode loop prepares the layer again).
      zero_form_ = shared_weights<ZeroForm>(info, "nbits_dense/zero_form", [&] {
        const std::vector<int32_t>& z = qp.zero_points;
        ZeroForm f;
        f.uniform = std::all_of(z.begin(), z.end(), [&](int32_t v) { return v == z.front(); });
        if (!f.uniform && std::all_of(z.begin(), z.end(), [](int32_t v) { return v >= 0 && v <= 255; }))
          f.bytes.assign(z.begin(), z.end());
        return f;
      });
      weights_.uniform_zero = zero_form_->uniform;
      weights_.zero_bytes = zero_form_->bytes.empty() ? nullptr : zero_form_->bytes.data();
    }
    if (use_gemm_) {
      kc_ = gemm::default_kc(*g_);
      nc_ = 4 * g_->nr;
      pa_floats_ = gemm::round_up(gemm::packed_a_size(*g_, m_, k_), 16);
      slot_floats_ = gemm::round_up(gemm::packed_b_size(*g_, k_, nc_), 16);
    }
  }

  std::size_t workspace_bytes() const override {
    if (use_gemm_) return sizeof(float) * static_cast<std::size_t>(pa_floats_ + slot_floats_ * slots_);
    if (prompt_.rows)  // xq, xs, xsum, x laid out, a scratch per thread
      return static_cast<std::size_t>(m_ * (gemm::round_up(k_, 64) + 8 * weights_.blocks + k_) +
                                      slots_ * gemm::round_up(cpu::nbits::panel_scratch_bytes(weights_), 64));
    if (int8_) return static_cast<std::size_t>(m_ * (gemm::round_up(k_, 64) + 8 * weights_.blocks));  // xq, xs, xsum
    return sizeof(float) * static_cast<std::size_t>(std::min(m_, kMaxRows) * weights_.blocks);
  }

  void run(const RunArgs& args) override {
    const float* x = args.inputs[0]->data_as<float>();
    float* y = args.outputs[0]->data_as<float>();
    float* ws = static_cast<float*>(args.workspace);
    if (use_gemm_) return run_gemm(x, y, ws, args.pool);
    if (int8_) {
      const int64_t ldq = gemm::round_up(k_, 64), nb = weights_.blocks;
      auto* xq = static_cast<int8_t*>(args.workspace);
      auto* xs = reinterpret_cast<float*>(xq + m_ * ldq);
      auto* xsum = reinterpret_cast<int32_t*>(xs + m_ * nb);
      for (int64_t r = 0; r < m_; ++r) cpu::nbits::quantize_row(x + r * k_, k_, weights_.block, xq + r * ldq, xs + r * nb, xsum + r * nb);
      if (prompt_.rows) {
        auto* xi = reinterpret_cast<int32_t*>(xsum + m_ * nb);
        uint8_t* scratch = reinterpret_cast<uint8_t*>(xi + m_ * (k_ / 4));
        const int64_t scratch_bytes = gemm::round_up(cpu::nbits::panel_scratch_bytes(weights_), 64);
        cpu::nbits::panel_layout_x(xq, m_, ldq, k_, prompt_.max_rows, xi);
        const int64_t tasks = (n_ + kBlockRows - 1) / kBlockRows;
        cpu::for_each_task(args.pool, slots_, tasks, [&](int64_t t, int slot) {
          const int64_t o0 = t * kBlockRows, o1 = std::min(n_, o0 + kBlockRows);
          prompt_.rows(weights_, o0, o1, xi, xs, xsum, m_, y, n_, scratch + slot * scratch_bytes);
          finish(y, m_, o0, o1);
        });
        return;
      }
      over_weight_rows(args.pool, [&](int64_t o0, int64_t o1) {
        int8_rows_(weights_, o0, o1, xq, ldq, xs, xsum, m_, y, n_);
        finish(y, m_, o0, o1);
      });
      return;
    }
    for (int64_t r0 = 0; r0 < m_; r0 += kMaxRows) run_rows(x + r0 * k_, std::min(kMaxRows, m_ - r0), y + r0 * n_, ws, args.pool);
  }

 private:
  void finish(float* y, int64_t rows, int64_t o0, int64_t o1) const {
    for (int64_t r = 0; r < rows; ++r) {
      float* row = y + r * n_;
      if (!bias_.empty())
        for (int64_t o = o0; o < o1; ++o) row[o] += bias_[static_cast<std::size_t>(o)];
      if (act_.kind == core::Activation::none && !act_.affine()) continue;
      if (v_) {
        cpu::activate_row(act_, *v_, row + o0, o1 - o0);
      } else {
        for (int64_t o = o0; o < o1; ++o) row[o] = core::apply_activation(act_, row[o]);
        if (act_.affine() && (act_.kind == core::Activation::gelu || act_.kind == core::Activation::gelu_tanh))
          for (int64_t o = o0; o < o1; ++o) row[o] = row[o] * act_.scale + act_.shift;
      }
    }
  }

  void run_rows(const float* x, int64_t rows, float* y, float* xsum, ThreadPool* pool) const {
    const int64_t blocks = weights_.blocks;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t k0 = b * weights_.block, k1 = std::min(k_, k0 + weights_.block);
        float s = 0;
        for (int64_t k = k0; k < k1; ++k) s += x[r * k_ + k];
        xsum[r * blocks + b] = s;
      }
    over_weight_rows(pool, [&](int64_t o0, int64_t o1) {
      rows_(weights_, o0, o1, x, rows, xsum, y, n_);
      finish(y, rows, o0, o1);
    });
  }

  /// body(o0, o1) over the weight rows in blocks of kBlockRows, on the pool.
  template <class F>
  void over_weight_rows(ThreadPool* pool, F&& body) const {
    const int64_t tasks = (n_ + kBlockRows - 1) / kBlockRows;
    auto blocks = [&](int64_t t0, int64_t t1) { body(t0 * kBlockRows, std::min(n_, t1 * kBlockRows)); };
    if (pool) pool->parallel_for(tasks, 1, blocks);
    else blocks(0, tasks);
  }

  /// Columns [n0, n0 + cols) of Wᵀ (K x N) as gemm::pack_b lays them out.
  void dequantize_panel(int64_t n0, int64_t cols, float* out) const {
    const int64_t nr = g_->nr, np = gemm::round_up(cols, nr), blocks = weights_.blocks, bs = weights_.block;
    for (int64_t k0 = 0; k0 < k_; k0 += kc_) {
      const int64_t kcb = std::min(kc_, k_ - k0);
      float* block = out + k0 * np;
      for (int64_t p = 0; p < np; p += nr) {
        float* panel = block + p * kcb;
        if (panel_ && nr % 16 == 0 && bs % 8 == 0 && kc_ % 8 == 0) {  // 16 columns at a time, vectorised
          for (int64_t c = 0; c < nr; c += 16)
            panel_(weights_, n0 + p + c, std::clamp<int64_t>(cols - p - c, 0, 16), k0, kcb, panel + c, nr);
          continue;
        }
        for (int64_t j = 0; j < nr; ++j) {
          const int64_t o = n0 + p + j;
          if (p + j >= cols) {
            for (int64_t kk = 0; kk < kcb; ++kk) panel[kk * nr + j] = 0;
            continue;
          }
          for (int64_t kk = k0; kk < k0 + kcb;) {  // (q - z) * s as the model defines it
            const std::size_t at = static_cast<std::size_t>(o * blocks + kk / bs);
            const float s = weights_.scale[at], z = weights_.zero ? static_cast<float>(weights_.zero[at]) : 0.0f;
            for (const int64_t end = std::min(k0 + kcb, (kk / bs + 1) * bs); kk < end; ++kk)
              panel[(kk - k0) * nr + j] = (static_cast<float>(code_at(weights_, o, kk)) - z) * s;
          }
        }
      }
    }
  }

  void run_gemm(const float* x, float* y, float* ws, ThreadPool* pool) const {
    float* pa = ws;
    gemm::pack_a(*g_, m_, k_, kc_, x, k_, false, pa);
    const int64_t tasks = (n_ + nc_ - 1) / nc_;
    cpu::for_each_task(pool, slots_, tasks, [&](int64_t t, int slot) {
      const int64_t n0 = t * nc_, cols = std::min(nc_, n_ - n0);
      float* pb = ws + pa_floats_ + slot * slot_floats_;
      dequantize_panel(n0, cols, pb);
      gemm::Epilogue ep;
      gemm::gemm_block(*g_, m_, cols, k_, kc_, pa, pb, y + n0, n_, ep, 0, m_, 0, cols);
      finish(y, m_, n0, n0 + cols);
    });
  }

  const cpu::vec::Kernels* v_;
  cpu::nbits::RowsKernel rows_;
  cpu::nbits::PanelKernel panel_;  ///< nullptr: the portable loop
  const gemm::Kernel* g_;
  Blob w_;
  cpu::nbits::Weights weights_;
  struct ZeroForm {
    bool uniform = false;
    std::vector<uint8_t> bytes;  // (empty: not every one fits a byte, or uniform)
  };
  std::shared_ptr<const ZeroForm> zero_form_;  // weights_.uniform_zero, zero_bytes
  std::vector<float> bias_;
  core::Activation act_;
  int64_t k_ = 0, m_ = 0, n_ = 0, kc_ = 0, nc_ = 0, pa_floats_ = 0, slot_floats_ = 0;
  int slots_ = 1;
  bool use_gemm_ = false;
  bool int8_ = false;  ///< activations quantised per block (the file's accuracy_level 4)
  cpu::nbits::Int8RowsKernel int8_rows_ = nullptr;
  cpu::nbits::Int8PanelKernel prompt_;  ///< prompts' kernel (rows null: none)
};

class NbitsDense final : public Routine {
 public:
  std::string_view layer_type() const override { return "dense"; }
  std::string_view algorithm() const override { return "nbits_dense"; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == Schema{})) return Support::no("cpu/nbits_dense computes in cpu (plain float32)");
    if (!info.layer || info.layer->inputs.size() != 1) return Support::no("dense needs one input");
    const Blob* w = info.layer->find_weight("weight");
    if (!w || !core::block_quantized(*w))
      return Support::no("cpu/nbits_dense reads blockwise quantised weights (4-bit LLM weights) only");
    if (w->device() != Device::cpu || w->layout() != Layout::nchw || (w->numel() > 0 && !w->data()))
      return Support::no("the weight must be plain on the CPU, with memory");
    if (Support s = routines::float_weights(*info.layer, {"bias"}, "cpu/nbits_dense"); !s) return s;
    if (const Blob* b = info.layer->find_weight("bias"); b && b->numel() != w->shape()[0])
      return Support::no(fmt::format("bias of {} values for {} outputs", b->numel(), w->shape()[0]));
    return cpu::check_dense(info, "cpu/nbits_dense");  // [..., K] against [N, K], the fused activation
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    return std::make_unique<Prepared>(info);  // (reads the weight, its scales and zero points as stored: nothing to pack)
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(NbitsDense);

}  // namespace softneuro
