// cpu/eigen — dense (fully connected) on Eigen 3.4's GEMM/GEMV, split across
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
#include <cstdint>
#include <memory>
#include <vector>

namespace softneuro {

// eigen_avx2.cpp (-mavx2 -mfma); call only where core::cpu_features().avx2_fma().
namespace cpu::eigen_avx2 {
void blocking_sizes(int64_t& kc, int64_t& mc, int64_t& nc);
/// y[no] += W[no, k] (row-major) · x[k]
void gemv(const float* w, const float* x, float* y, int64_t no, int64_t k);
/// Y[nr, no] += X[nr, k] · W[no, k]ᵀ with Eigen's packing buffers block_a (kc*mc), block_b (kc*nc).
void gemm(int64_t nr, int64_t no, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
          int64_t ldy, float* block_a, float* block_b, int64_t kc, int64_t mc, int64_t nc);
}  // namespace cpu::eigen_avx2

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
    act_ = core::fused_activation(layer);
    slots_ = cpu::workspace_slots();
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
    if (!core::cpu_features().avx2_fma()) return Support::no("cpu/eigen is built for AVX2 + FMA");
    if (!info.layer || info.input_shapes.size() != 1 || info.input_shapes[0].rank() < 1)
      return Support::no("dense needs an input [..., K]");
    if (Support s = cpu::float_weights(*info.layer, {"weight", "bias"}, "cpu/eigen"); !s) return s;
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

}  // namespace
}  // namespace softneuro
