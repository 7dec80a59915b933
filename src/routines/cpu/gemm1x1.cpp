// cpu/gemm1x1 and cpu:float32:nhwc/gemm1x1 — 1x1 stride-1 unpadded conv2 as
// one GEMM on our packed float32 kernels (gemm.hpp), no im2col:
//   cpu/gemm1x1               nchw: cpu/im2col's code with the input itself as B
//                             (packed per pixel block); a family of its own so
//                             the default order can rank it above oneDNN's
//                             nchw convolution (faster on every ResNet50 1x1
//                             stride-1 layer at 1 and 2 threads, 1.2-10x: oneDNN
//                             2.6 has no fast plain-layout 1x1 kernel), where
//                             cpu/im2col stays below (oneDNN wins some 3x3 layers).
//   cpu:float32:nhwc/gemm1x1  nhwc: Y[HW, OCg] = X[HW, Cg] · W_gᵀ (weights packed
//                             once as B; input rows packed per task).
// Routine parameters: p_block (nchw): output pixels per task; m_block (nhwc):
// pixel rows per task.
#include "routines/cpu/im2col.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace softneuro {
namespace {

using namespace cpu::conv_gemm;
using core::Window2d;
using cpu::gemm::Kernel;
namespace gemm = cpu::gemm;

/// The GEMM's B from the weights [OC, C/group, 1, 1]: per group, C/group x OC/group.
struct PackedB {
  const Kernel* k = gemm::best_kernel();
  int64_t group = 1, cg = 0, ocg = 0, kc = 0, size = 0;  ///< size: floats per group
  explicit PackedB(const Layer& layer) {
    const Shape& w = layer.weight("weight").shape();
    group = layer.get_int("group", 1);
    cg = w[1];
    ocg = w[0] / group;
    kc = gemm::default_kc(*k);
    size = gemm::packed_b_size(*k, cg, ocg);
  }
  std::size_t floats() const { return static_cast<std::size_t>(size * group); }
};

std::shared_ptr<const PackedWeights> pack_nhwc(const Layer& layer) {
  const PackedB b(layer);
  const float* w = layer.weight("weight").data_as<float>();
  return cpu::pack_floats(b.floats(), [&](float* packed) {
    for (int64_t gi = 0; gi < b.group; ++gi)
      gemm::pack_b(*b.k, b.cg, b.ocg, b.kc, w + gi * b.ocg * b.cg, b.cg, true, packed + gi * b.size);
  });
}

class PreparedNhwc final : public PreparedRoutine {
 public:
  PreparedNhwc(const LayerInfo& info, int64_t m_block, std::shared_ptr<const PackedWeights> packed) {
    const Layer& layer = *info.layer;
    g_ = core::conv2_window(layer, info.input_shapes[0]);
    const PackedB b(layer);
    k_ = b.k;
    cg_ = b.cg;
    ocg_ = b.ocg;
    kc_ = b.kc;
    mb_ = std::max<int64_t>(k_->mr, m_block / k_->mr * k_->mr);
    pb_size_ = b.size;
    packed_ = cpu::packed_of(packed, b.floats(), info, "cpu:float32:nhwc/gemm1x1");
    if (const Blob* b = layer.find_weight("bias")) bias_.assign(b->data_as<float>(), b->data_as<float>() + g_.oc);
    ep_ = make_epilogue(layer);
    slots_ = team_threads(info);
    slot_floats_ = gemm::round_up(gemm::packed_a_size(*k_, mb_, cg_), 16);
  }
  std::size_t workspace_bytes() const override { return sizeof(float) * slot_floats_ * slots_; }

  void run(const RunArgs& args) override {
    const float* x = args.inputs[0]->data_as<float>();
    float* y = args.outputs[0]->data_as<float>();
    float* ws = static_cast<float*>(args.workspace);
    const int64_t hw = g_.h * g_.w, mchunks = (hw + mb_ - 1) / mb_;
    cpu::for_each_task(args.pool, slots_, g_.n * g_.group * mchunks, [&](int64_t t, int slot) {
      const int64_t mc = t % mchunks, gi = t / mchunks % g_.group, n = t / mchunks / g_.group;
      const int64_t m0 = mc * mb_, rows = std::min(mb_, hw - m0);
      float* buf = ws + slot * slot_floats_;
      gemm::pack_a(*k_, rows, cg_, kc_, x + (n * hw + m0) * g_.c + gi * cg_, g_.c, false, buf);
      gemm::Epilogue ep = ep_;
      ep.bias_n = bias_.empty() ? nullptr : bias_.data() + gi * ocg_;
      gemm::gemm_block(*k_, rows, ocg_, cg_, kc_, buf, packed_->data() + gi * pb_size_,
                       y + (n * hw + m0) * g_.oc + gi * ocg_, g_.oc, ep, 0, rows, 0, ocg_);
    });
  }

 private:
  Window2d g_{};
  const Kernel* k_ = nullptr;
  int64_t cg_ = 0, ocg_ = 0, kc_ = 0, mb_ = 0, pb_size_ = 0, slot_floats_ = 0;
  int slots_ = 1;
  std::shared_ptr<const cpu::AlignedFloats> packed_;
  std::vector<float> bias_;
  gemm::Epilogue ep_;
};

class Gemm1x1Nhwc final : public Routine {
 public:
  static constexpr Schema kSchema{Device::cpu, DType::float32, Layout::nhwc};
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return "gemm1x1"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (Support s = common_checks(info, schema, Layout::nhwc, "cpu:float32:nhwc/gemm1x1"); !s) return s;
    if (!is_pointwise(core::conv2_window(*info.layer, info.input_shapes[0])))
      return Support::no("gemm1x1 takes 1x1 stride-1 unpadded convolutions");
    return Support::yes();
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {{"m_block", {48, 96, 192, 384}}};
  }
  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams&) const override {
    return pack_nhwc(*info.layer);
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& info, const Schema&,
                                              const RoutineParams&) const override {
    return cpu::unpack_floats(bytes, PackedB(*info.layer).floats());
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams& params,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    return std::make_unique<PreparedNhwc>(info, routine_param(params, "m_block", 96), std::move(packed));
  }
};

SOFTNEURO_REGISTER_ROUTINE(ConvGemmNchw<true>);
SOFTNEURO_REGISTER_ROUTINE(Gemm1x1Nhwc);

}  // namespace
}  // namespace softneuro
