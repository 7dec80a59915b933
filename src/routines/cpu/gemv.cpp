// cpu/gemv — a dense layer of at most kMaxRows input rows (a decode step's
// [1, 1, K]) as matrix-vector products: y = W·x + bias, activation. Such a
// layer reads every weight once and does two flops with it, so its speed is
// the memory's: the weight rows are split over the threads in blocks and
// streamed once each (vec kernel gemv: four rows at a time against every input
// row). GEMM routines block for reuse there is not; oneDNN's reached 12.6 GB/s
// on GPT-2's LM head where this streams at 19-22 (Xeon, 2 threads).
#include "routines/cpu/f32_common.hpp"
#include "routines/cpu/vec_kernels.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <memory>

namespace softneuro {
namespace {

constexpr int64_t kMaxRows = 4;
constexpr int64_t kBlockRows = 64;  ///< weight rows per task

class Prepared final : public PreparedRoutine {
 public:
  explicit Prepared(const LayerInfo& info) : v_(cpu::vec::best_kernels()) {
    const Layer& layer = *info.layer;
    const Shape& in = info.input_shapes[0];
    k_ = in[in.rank() - 1];
    m_ = k_ ? in.numel() / k_ : 0;
    w_ = layer.weight("weight");
    o_ = w_.shape()[0];
    if (const Blob* b = layer.find_weight("bias")) bias_ = *b;
    act_ = core::fused_activation(layer, true, true);
  }

  void run(const RunArgs& args) override {
    const float* x = args.inputs[0]->data_as<float>();
    float* y = args.outputs[0]->data_as<float>();
    const float* w = w_.data_as<float>();
    const float* bias = bias_.numel() ? bias_.data_as<float>() : nullptr;
    const int64_t blocks = (o_ + kBlockRows - 1) / kBlockRows;
    args.pool->parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
      const int64_t o0 = b0 * kBlockRows, o1 = std::min(o_, b1 * kBlockRows);
      v_->gemv(w + o0 * k_, o1 - o0, k_, x, m_, y + o0, o_);
      if (!bias && act_.kind == core::Activation::none && !act_.affine()) return;
      for (int64_t i = 0; i < m_; ++i) {
        float* row = y + i * o_;
        if (bias)
          for (int64_t o = o0; o < o1; ++o) row[o] += bias[o];
        if (act_.kind != core::Activation::none || act_.affine()) cpu::activate_row(act_, *v_, row + o0, o1 - o0);
      }
    });
  }

 private:
  const cpu::vec::Kernels* v_;
  int64_t k_ = 0, m_ = 0, o_ = 0;
  Blob w_, bias_;
  core::Activation act_;
};

class Gemv final : public Routine {
 public:
  std::string_view layer_type() const override { return "dense"; }
  std::string_view algorithm() const override { return "gemv"; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == Schema{})) return Support::no("cpu/gemv computes in cpu (plain float32)");
    if (!cpu::vec::best_kernels()) return Support::no("cpu/gemv needs AVX2+FMA, AVX-512 or Advanced SIMD");
    if (!info.layer || info.layer->inputs.size() != 1) return Support::no("dense needs one input");
    if (Support s = routines::float_weights(*info.layer, {"weight", "bias"}, "cpu/gemv"); !s) return s;
    if (Support s = cpu::check_dense(info, "cpu/gemv"); !s) return s;
    const Shape& in = info.input_shapes[0];
    if (in.numel() / in[in.rank() - 1] > kMaxRows)
      return Support::no(fmt::format("cpu/gemv takes at most {} rows (a GEMM reuses the weights beyond)", kMaxRows));
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    return std::make_unique<Prepared>(info);
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(Gemv);

}  // namespace softneuro
