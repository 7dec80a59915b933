// cpu/eigen — dense (fully connected), lstm and gru on Eigen 3.4's GEMM/GEMV, split across
// our thread pool (Eigen's own OpenMP parallelism is off:
// EIGEN_DONT_PARALLELIZE). Built with -mavx2 -mfma, so it says unsupported on
// CPUs without AVX2+FMA.
//
// Y[R, O] = X[R, K] · Wᵀ + bias, then the fused activation (any), with R the
// product of the input's leading dimensions. Tasks are (row block x output
// column block); one row uses Eigen's GEMV (no packing), more rows Eigen's
// blocked GEMM, called with packing buffers carved from our workspace (one
// slot per thread) so that run() allocates nothing. Weights are used as they
// are (Eigen packs its blocks on the fly); nothing to prepare but the geometry.
#include "routines/cpu/f32_common.hpp"

#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

namespace softneuro {

// eigen_avx2.cpp (-mavx2 -mfma on x86-64; on aarch64 built for the baseline,
// Advanced SIMD); call only where eigen_usable().
namespace cpu::eigen_avx2 {
void blocking_sizes(int64_t& kc, int64_t& mc, int64_t& nc);
/// y[no] += W[no, k] (row-major) · x[k]
void gemv(const float* w, const float* x, float* y, int64_t no, int64_t k);
/// Y[nr, no] += X[nr, k] · W[no, k]ᵀ with Eigen's packing buffers block_a (kc*mc), block_b (kc*nc).
void gemm(int64_t nr, int64_t no, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
          int64_t ldy, float* block_a, float* block_b, int64_t kc, int64_t mc, int64_t nc);
}  // namespace cpu::eigen_avx2

namespace {
/// Whether this CPU runs eigen_avx2.cpp's code.
Support eigen_usable() {
#if defined(__x86_64__)
  if (!core::cpu_features().avx2_fma()) return Support::no("cpu/eigen is built for AVX2 + FMA");
#endif
  return Support::yes();
}
}  // namespace

namespace {

class PreparedEigen final : public PreparedRoutine {
 public:
  explicit PreparedEigen(const LayerInfo& info) {
    const Layer& layer = *info.layer;
    const Shape& in = info.input_shapes[0];
    k_ = in[in.rank() - 1];
    r_ = k_ ? in.numel() / k_ : 0;
    const Blob& w = layer.weight("weight");
    o_ = w.shape()[0];
    w_ = w;
    if (const Blob* b = layer.find_weight("bias")) bias_ = *b;
    act_ = core::fused_activation(layer, true, true);  // apply_activation applies act_scale/act_shift too
    slots_ = team_threads(info);
    // Tasks: column blocks first (every thread a share of the weights), rows when there are many.
    cb_ = std::max<int64_t>(1, std::min<int64_t>(slots_, (o_ + 15) / 16));
    rb_ = std::max<int64_t>(1, std::min<int64_t>(r_ / 16, slots_ / cb_));
    ocols_ = (o_ + cb_ - 1) / cb_;
    orows_ = (r_ + rb_ - 1) / rb_;
    if (r_ > 1) {
      // The row-major product runs as its transpose: "rows" = output columns, "cols" = rows of X.
      kc_ = k_;
      mc_ = ocols_;
      nc_ = orows_;
      cpu::eigen_avx2::blocking_sizes(kc_, mc_, nc_);
      slot_floats_ = (kc_ * mc_ + kc_ * nc_ + 64) / 16 * 16;
    }
  }
  std::size_t workspace_bytes() const override { return sizeof(float) * slot_floats_ * slots_; }

  void run(const RunArgs& args) override {
    const float* x = args.inputs[0]->data_as<float>();
    float* y = args.outputs[0]->data_as<float>();
    const float* w = w_.data_as<float>();
    const float* bias = bias_.numel() ? bias_.data_as<float>() : nullptr;
    float* ws = static_cast<float*>(args.workspace);
    cpu::for_each_task(args.pool, slots_, cb_ * rb_, [&](int64_t t, int slot) {
      const int64_t o0 = t % cb_ * ocols_, o1 = std::min(o_, o0 + ocols_);
      const int64_t r0 = t / cb_ * orows_, r1 = std::min(r_, r0 + orows_);
      if (o0 >= o1 || r0 >= r1) return;
      const int64_t no = o1 - o0, nr = r1 - r0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t o = o0; o < o1; ++o) y[r * o_ + o] = bias ? bias[o] : 0.0f;
      if (k_ > 0) {
        if (nr == 1) {
          cpu::eigen_avx2::gemv(w + o0 * k_, x + r0 * k_, y + r0 * o_ + o0, no, k_);
        } else {
          float* mine = ws + slot * slot_floats_;
          float* a = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(mine) + 63) & ~uintptr_t(63));
          cpu::eigen_avx2::gemm(nr, no, k_, x + r0 * k_, k_, w + o0 * k_, k_, y + r0 * o_ + o0, o_, a,
                                a + (kc_ * mc_ + 15) / 16 * 16, kc_, mc_, nc_);
        }
      }
      if (act_.kind != core::Activation::none)
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t o = o0; o < o1; ++o) y[r * o_ + o] = core::apply_activation(act_, y[r * o_ + o]);
    });
  }

 private:
  int64_t k_ = 0, r_ = 0, o_ = 0, cb_ = 1, rb_ = 1, ocols_ = 0, orows_ = 0;
  int64_t kc_ = 0, mc_ = 0, nc_ = 0;
  int64_t slot_floats_ = 0;
  int slots_ = 1;
  Blob w_, bias_;
  core::Activation act_;
};

class EigenDense final : public Routine {
 public:
  std::string_view layer_type() const override { return "dense"; }
  std::string_view algorithm() const override { return "eigen"; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == Schema{})) return Support::no("cpu/eigen computes in cpu (plain float32)");
    if (Support s = eigen_usable(); !s) return s;
    if (!info.layer || info.input_shapes.size() != 1 || info.input_shapes[0].rank() < 1)
      return Support::no("dense needs an input [..., K]");
    if (Support s = routines::float_weights(*info.layer, {"weight", "bias"}, "cpu/eigen"); !s) return s;
    const Blob& w = info.layer->weight("weight");
    const Shape& in = info.input_shapes[0];
    if (w.shape().rank() != 2 || w.shape()[1] != in[in.rank() - 1])
      return Support::no("weight must be [O, K] with K the input's last dimension");
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    return std::make_unique<PreparedEigen>(info);
  }
};

SOFTNEURO_REGISTER_ROUTINE(EigenDense);

// lstm and gru: the input projections of every time step in one GEMM
// (X · Wᵀ + biases, before the recurrence), then per step the recurrent GEMVs
// h · Rᵀ and the gates, split by blocks of hidden units (a unit's gates are
// rows of R that only its task reads), one join per step (gru with
// linear_before_reset = 0: two, its candidate needs every unit's reset gate).
class PreparedEigenRnn final : public PreparedRoutine {
 public:
  explicit PreparedEigenRnn(const LayerInfo& info) : g_(core::rnn_geometry(*info.layer, info.input_shapes)) {
    const Layer& l = *info.layer;
    G_ = g_.gates;
    H_ = g_.hidden;
    w_ = l.weight("W");
    r_ = l.weight("R");
    if (g_.has_peephole) p_ = l.weight("P");
    // Biases folded where they add before the recurrence: every gate's Wb + Rb,
    // except gru's candidate, whose Rbh belongs to its recurrent product.
    const int64_t GH = G_ * H_;
    bias_.assign(static_cast<std::size_t>(g_.directions * GH), 0.0f);
    rbh_.assign(static_cast<std::size_t>(g_.directions * H_), 0.0f);
    if (g_.has_bias) {
      const float* b = l.weight("B").data_as<float>();
      for (int d = 0; d < g_.directions; ++d)
        for (int64_t k = 0; k < GH; ++k) {
          const float wb = b[d * 2 * GH + k], rb = b[d * 2 * GH + GH + k];
          const bool candidate = G_ == 3 && k >= 2 * H_;
          bias_[static_cast<std::size_t>(d * GH + k)] = wb + (candidate ? 0.0f : rb);
          if (candidate) rbh_[static_cast<std::size_t>(d * H_ + k - 2 * H_)] = rb;
        }
    }
    slots_ = team_threads(info);
    rows_ = g_.seq * g_.batch;
    unit_blocks_ = std::max<int64_t>(1, std::min<int64_t>(slots_, (H_ + 15) / 16));
    units_ = (H_ + unit_blocks_ - 1) / unit_blocks_;
    row_blocks_ = std::max<int64_t>(1, std::min<int64_t>(slots_, rows_ / 16));
    task_rows_ = (rows_ + row_blocks_ - 1) / row_blocks_;
    // Eigen's blocking may shrink nc below a task's rows: its GEMM loops over
    // blocks of nc, so a task still covers all of task_rows_.
    kc_ = g_.input;
    mc_ = GH;
    nc_ = task_rows_;
    cpu::eigen_avx2::blocking_sizes(kc_, mc_, nc_);
    pack_floats_ = (kc_ * mc_ + kc_ * nc_ + 64) / 16 * 16;
    // Workspace: the projections, the pre-activations, two hidden states, the cell, gru's r ⊙ h; packing per slot.
    xw_ = 0;
    pre_ = xw_ + align(rows_ * GH);
    h0_ = pre_ + align(g_.batch * GH);
    h1_ = h0_ + align(g_.batch * H_);
    c_ = h1_ + align(g_.batch * H_);
    rh_ = c_ + align(g_.batch * H_);
    pack_ = rh_ + align(g_.batch * H_);
  }
  std::size_t workspace_bytes() const override {
    return sizeof(float) * static_cast<std::size_t>(pack_ + pack_floats_ * slots_ + 16);
  }

  void run(const RunArgs& args) override {
    float* ws = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(args.workspace) + 63) & ~uintptr_t(63));
    const float* x = args.inputs[0]->data_as<float>();
    const float* init_h = g_.has_initial_h ? args.inputs[1]->data_as<float>() : nullptr;
    const float* init_c = g_.has_initial_c ? args.inputs[2]->data_as<float>() : nullptr;
    float* y = args.outputs[0]->data_as<float>();
    float* yh = args.outputs[1]->data_as<float>();
    float* yc = G_ == 4 ? args.outputs[2]->data_as<float>() : nullptr;
    const int64_t GH = G_ * H_, B = g_.batch, I = g_.input;
    float* xw = ws + xw_;
    float* pre = ws + pre_;
    float* c = ws + c_;
    float* rh = ws + rh_;
    for (int d = 0; d < g_.directions; ++d) {
      const float* W = w_.data_as<float>() + d * GH * I;
      const float* R = r_.data_as<float>() + d * GH * H_;
      const float* P = g_.has_peephole ? p_.data_as<float>() + d * 3 * H_ : nullptr;
      const float* bias = bias_.data() + d * GH;
      const float* rbh = rbh_.data() + d * H_;
      // X · Wᵀ + bias for every (t, b), rows in x's own order.
      cpu::for_each_task(args.pool, slots_, row_blocks_, [&](int64_t t, int slot) {
        const int64_t r0 = t * task_rows_, r1 = std::min(rows_, r0 + task_rows_);
        if (r0 >= r1) return;
        for (int64_t r = r0; r < r1; ++r) std::copy(bias, bias + GH, xw + r * GH);
        if (I == 0) return;
        if (r1 - r0 == 1) {
          cpu::eigen_avx2::gemv(W, x + r0 * I, xw + r0 * GH, GH, I);
        } else {
          float* a = ws + pack_ + slot * pack_floats_;
          cpu::eigen_avx2::gemm(r1 - r0, GH, I, x + r0 * I, I, W, I, xw + r0 * GH, GH, a, a + (kc_ * mc_ + 15) / 16 * 16,
                                kc_, mc_, nc_);
        }
      });
      float* h = ws + h0_;
      float* hn = ws + h1_;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H_; ++j) {
          h[b * H_ + j] = init_h ? init_h[g_.state_at(d, b) + j] : 0.0f;
          c[b * H_ + j] = init_c ? init_c[g_.state_at(d, b) + j] : 0.0f;
        }
      for (int64_t step = 0; step < g_.seq; ++step) {
        const int64_t t = g_.backwards(d) ? g_.seq - 1 - step : step;
        const bool two_phases = G_ == 3 && !g_.linear_before_reset;
        // Phase 1: pre = xw + h · Rᵀ for the unit block's gate rows (gru in two phases: z and r first).
        cpu::for_each_task(args.pool, slots_, unit_blocks_, [&](int64_t blk, int) {
          const int64_t j0 = blk * units_, j1 = std::min(H_, j0 + units_);
          if (j0 >= j1) return;
          const int gates = two_phases ? 2 : G_;
          for (int64_t b = 0; b < B; ++b) {
            const float* xwt = xw + g_.row(t, b) * GH;
            float* pb = pre + b * GH;
            for (int gi = 0; gi < G_; ++gi) std::copy(xwt + gi * H_ + j0, xwt + gi * H_ + j1, pb + gi * H_ + j0);
            // gru's candidate with linear_before_reset: h·Rh alone, r scales it with Rbh below.
            if (G_ == 3 && g_.linear_before_reset) std::fill(pb + 2 * H_ + j0, pb + 2 * H_ + j1, 0.0f);
            for (int gi = 0; gi < gates; ++gi)
              cpu::eigen_avx2::gemv(R + (gi * H_ + j0) * H_, h + b * H_, pb + gi * H_ + j0, j1 - j0, H_);
            if (G_ == 4) {
              lstm_units(pb, P, c + b * H_, hn + b * H_, j0, j1);
            } else if (!two_phases) {
              for (int64_t j = j0; j < j1; ++j) {
                const float z = sigmoid(clip(pb[j])), rr = sigmoid(clip(pb[H_ + j]));
                const float cand = std::tanh(clip(xwt[2 * H_ + j] + rr * (pb[2 * H_ + j] + rbh[j])));
                hn[b * H_ + j] = (1 - z) * cand + z * h[b * H_ + j];
              }
            } else {
              for (int64_t j = j0; j < j1; ++j) {
                pb[j] = sigmoid(clip(pb[j]));
                pb[H_ + j] = sigmoid(clip(pb[H_ + j]));
                rh[b * H_ + j] = pb[H_ + j] * h[b * H_ + j];
              }
            }
          }
        });
        if (two_phases)
          // Phase 2 (gru): the candidate from (r ⊙ h) · Rhᵀ, every unit's r known.
          cpu::for_each_task(args.pool, slots_, unit_blocks_, [&](int64_t blk, int) {
            const int64_t j0 = blk * units_, j1 = std::min(H_, j0 + units_);
            if (j0 >= j1) return;
            for (int64_t b = 0; b < B; ++b) {
              float* pb = pre + b * GH;
              cpu::eigen_avx2::gemv(R + (2 * H_ + j0) * H_, rh + b * H_, pb + 2 * H_ + j0, j1 - j0, H_);
              for (int64_t j = j0; j < j1; ++j) {
                const float z = pb[j];
                const float cand = std::tanh(clip(pb[2 * H_ + j] + rbh[j]));
                hn[b * H_ + j] = (1 - z) * cand + z * h[b * H_ + j];
              }
            }
          });
        std::swap(h, hn);
        for (int64_t b = 0; b < B; ++b) std::copy(h + b * H_, h + (b + 1) * H_, y + g_.y_at(t, d, b));
      }
      for (int64_t b = 0; b < B; ++b) {
        std::copy(h + b * H_, h + (b + 1) * H_, yh + g_.state_at(d, b));
        if (yc) std::copy(c + b * H_, c + (b + 1) * H_, yc + g_.state_at(d, b));
      }
    }
  }

 private:
  static int64_t align(int64_t floats) { return (floats + 15) / 16 * 16; }
  static float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
  float clip(float v) const { return g_.clip > 0 ? std::clamp(v, -g_.clip, g_.clip) : v; }
  /// LSTM gates (i, o, f, c) of units [j0, j1): c updated in place, the new h into hn.
  void lstm_units(const float* pb, const float* P, float* c, float* hn, int64_t j0, int64_t j1) const {
    for (int64_t j = j0; j < j1; ++j) {
      const float cp = c[j];
      const float i = sigmoid(clip(pb[j] + (P ? P[j] * cp : 0.0f)));
      const float f = g_.input_forget ? 1 - i : sigmoid(clip(pb[2 * H_ + j] + (P ? P[2 * H_ + j] * cp : 0.0f)));
      const float cc = std::tanh(clip(pb[3 * H_ + j]));
      c[j] = f * cp + i * cc;
      const float o = sigmoid(clip(pb[H_ + j] + (P ? P[H_ + j] * c[j] : 0.0f)));
      hn[j] = o * std::tanh(c[j]);
    }
  }

  core::RnnGeometry g_;
  int64_t G_ = 4, H_ = 0, rows_ = 0, unit_blocks_ = 1, units_ = 0, row_blocks_ = 1, task_rows_ = 0;
  int64_t kc_ = 0, mc_ = 0, nc_ = 0, pack_floats_ = 0;
  int64_t xw_ = 0, pre_ = 0, h0_ = 0, h1_ = 0, c_ = 0, rh_ = 0, pack_ = 0;  ///< workspace offsets (floats)
  int slots_ = 1;
  Blob w_, r_, p_;
  std::vector<float> bias_, rbh_;
};

template <int Gates>
class EigenRnn final : public Routine {
 public:
  std::string_view layer_type() const override { return Gates == 4 ? "lstm" : "gru"; }
  std::string_view algorithm() const override { return "eigen"; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == Schema{})) return Support::no("cpu/eigen computes in cpu (plain float32)");
    if (Support s = eigen_usable(); !s) return s;
    if (!info.layer) return Support::no("no layer");
    return routines::float_weights(*info.layer, {"W", "R", "B", "P"}, "cpu/eigen");
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    return std::make_unique<PreparedEigenRnn>(info);
  }
};

SOFTNEURO_REGISTER_ROUTINE(EigenRnn<4>);
SOFTNEURO_REGISTER_ROUTINE(EigenRnn<3>);

}  // namespace
}  // namespace softneuro
