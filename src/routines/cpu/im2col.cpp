// cpu/im2col and cpu/gemm1x1 — conv2 as GEMM on our packed float32 kernels
// (gemm.hpp: AVX-512 12x32 or AVX2 6x16 register tiles, chosen at run time).
//
//   cpu/im2col               nchw, any kernel/stride/pad/dilation/groups: per
//                            (image, group, block of output pixels) the input
//                            patches are written straight into packed-B panels
//                            in the workspace, then Y_g[OCg, P] = W_g · Col.
//   cpu/gemm1x1              nchw, 1x1 stride 1 pad 0: the same GEMM with the
//                            input itself as B (packed per pixel block, no im2col).
//   cpu:float32:nhwc/gemm1x1 nhwc, 1x1 stride 1 pad 0: Y[HW, OCg] = X[HW, Cg] · W_gᵀ
//                            (weights packed once as B; input rows packed per task).
//
// Weights are packed once in prepare; bias and fused activation (all but sigmoid)
// are applied by the GEMM epilogue. Routine parameters:
//   p_block (nchw): output pixels per task (the packed-B block; rounded to NR),
//   m_block (nhwc): pixel rows per task.
// Work is split into tasks over (image, group, pixel block[, channel block]),
// run on the library's pool with one workspace slot per thread.
#include "routines/cpu/f32_common.hpp"
#include "routines/cpu/gemm.hpp"

#include "core/layer_types.hpp"
#include "core/log.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace softneuro {
namespace {

using core::Window2d;
using cpu::gemm::Kernel;
namespace gemm = cpu::gemm;

bool is_pointwise(const Window2d& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 && g.pb == 0 && g.pr == 0 &&
         g.oh == g.h && g.ow == g.w;
}

Support common_checks(const LayerInfo& info, const Schema& schema, Layout layout, std::string_view who) {
  if (!(schema == Schema{Device::cpu, DType::float32, layout}))
    return Support::no(fmt::format("{} computes in {}", who, Schema{Device::cpu, DType::float32, layout}.to_string()));
  if (!gemm::best_kernel()) return Support::no("needs AVX2 + FMA");
  if (!info.layer || info.input_shapes.size() != 1 || info.input_shapes[0].rank() != 4)
    return Support::no("conv2 needs an input [N,C,H,W]");
  if (Support s = cpu::float_weights(*info.layer, {"weight", "bias"}, who); !s) return s;
  return cpu::check_activation(*info.layer);
}

gemm::Epilogue make_epilogue(const Layer& layer) {
  gemm::Epilogue ep;
  cpu::to_epilogue(core::fused_activation(layer), ep);
  return ep;
}

/// Writes columns [p0, p0+ncols) of the im2col matrix of one image and group
/// (rows k = (ic, kh, kw), K = Cg*KH*KW) as packed-B panels into `buf`.
void im2col_pack(const Kernel& k, const Window2d& g, const float* x, int64_t kk, int64_t kc, int64_t p0,
                 int64_t ncols, float* buf) {
  const int nr = k.nr;
  const int64_t np = gemm::round_up(ncols, nr), taps = g.kh * g.kw;
  if (is_pointwise(g)) {
    gemm::pack_b(k, kk, ncols, kc, x + p0, g.h * g.w, false, buf);
    return;
  }
  for (int64_t r = 0; r < kk; ++r) {
    const int64_t ic = r / taps, kh = r % taps / g.kw, kw = r % g.kw;
    const int64_t k0 = r / kc * kc, kcb = std::min(kc, kk - k0);
    float* base = buf + k0 * np + (r - k0) * nr;
    const float* xc = x + ic * g.h * g.w;
    for (int64_t q = 0; q < np / nr; ++q) {
      float* d = base + q * kcb * nr;
      const int64_t pa = p0 + q * nr, cnt = std::min<int64_t>(nr, p0 + ncols - pa);
      int64_t oh = pa / g.ow, ow = pa % g.ow;
      if (g.sw == 1 && ow + cnt <= g.ow) {
        const int64_t ih = oh * g.sh - g.pt + kh * g.dh, iw0 = ow - g.pl + kw * g.dw;
        if (ih >= 0 && ih < g.h && iw0 >= 0 && iw0 + cnt <= g.w) {
          std::memcpy(d, xc + ih * g.w + iw0, sizeof(float) * cnt);
          for (int64_t j = cnt; j < nr; ++j) d[j] = 0.0f;
          continue;
        }
      }
      for (int64_t j = 0; j < nr; ++j) {
        float v = 0.0f;
        if (j < cnt) {
          const int64_t ih = oh * g.sh - g.pt + kh * g.dh, iw = ow * g.sw - g.pl + kw * g.dw;
          if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) v = xc[ih * g.w + iw];
          if (++ow == g.ow) {
            ow = 0;
            ++oh;
          }
        }
        d[j] = v;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// nchw: cpu/im2col and cpu/gemm1x1

class PreparedNchw final : public PreparedRoutine {
 public:
  PreparedNchw(const LayerInfo& info, int64_t p_block) {
    const Layer& layer = *info.layer;
    g_ = core::conv2_window(layer, info.input_shapes[0]);
    k_ = gemm::best_kernel();
    ocg_ = g_.oc / g_.group;
    kk_ = g_.c / g_.group * g_.kh * g_.kw;
    kc_ = gemm::default_kc(*k_);
    const int64_t p = g_.oh * g_.ow;
    pb_ = std::min(gemm::round_up(p, k_->nr), std::max<int64_t>(k_->nr, gemm::round_up(p_block, k_->nr)));
    const Blob& w = layer.weight("weight");
    const int64_t pa_size = gemm::packed_a_size(*k_, ocg_, kk_);
    packed_.assign(static_cast<std::size_t>(pa_size * g_.group), 0.0f);
    for (int64_t gi = 0; gi < g_.group; ++gi)
      gemm::pack_a(*k_, ocg_, kk_, kc_, w.data_as<float>() + gi * ocg_ * kk_, kk_, false,
                   packed_.data() + gi * pa_size);
    pa_size_ = pa_size;
    if (const Blob* b = layer.find_weight("bias")) bias_.assign(b->data_as<float>(), b->data_as<float>() + g_.oc);
    ep_ = make_epilogue(layer);
    slots_ = cpu::workspace_slots();
    slot_floats_ = gemm::round_up(kk_ * pb_, 16);
  }
  std::size_t workspace_bytes() const override { return sizeof(float) * slot_floats_ * slots_; }

  void run(const RunArgs& args) override {
    const float* x = args.inputs[0]->data_as<float>();
    float* y = args.outputs[0]->data_as<float>();
    float* ws = static_cast<float*>(args.workspace);
    const int64_t p = g_.oh * g_.ow, pchunks = (p + pb_ - 1) / pb_;
    const int64_t base_tasks = g_.n * g_.group * pchunks;
    const int threads = args.pool ? args.pool->num_threads() : 1;
    // Too few pixel blocks for the threads: also split the output channels.
    const int64_t mpanels = gemm::round_up(ocg_, k_->mr) / k_->mr;
    const int64_t msplit = base_tasks >= threads ? 1 : std::min<int64_t>(mpanels, (threads + base_tasks - 1) / base_tasks);
    const int64_t mstep = (mpanels + msplit - 1) / msplit * k_->mr;
    cpu::for_each_task(args.pool, slots_, base_tasks * msplit, [&](int64_t t, int slot) {
      const int64_t ms = t % msplit, pc = t / msplit % pchunks, gi = t / msplit / pchunks % g_.group,
                    n = t / msplit / pchunks / g_.group;
      const int64_t p0 = pc * pb_, ncols = std::min(pb_, p - p0);
      const int64_t m0 = ms * mstep, m1 = std::min(ocg_, m0 + mstep);
      if (m0 >= m1) return;
      float* buf = ws + slot * slot_floats_;
      im2col_pack(*k_, g_, x + (n * g_.c + gi * (g_.c / g_.group)) * g_.h * g_.w, kk_, kc_, p0, ncols, buf);
      gemm::Epilogue ep = ep_;
      ep.bias_m = bias_.empty() ? nullptr : bias_.data() + gi * ocg_;
      gemm::gemm_block(*k_, ocg_, ncols, kk_, kc_, packed_.data() + gi * pa_size_, buf,
                       y + (n * g_.oc + gi * ocg_) * p + p0, p, ep, m0, m1, 0, ncols);
    });
  }

 private:
  Window2d g_{};
  const Kernel* k_ = nullptr;
  int64_t ocg_ = 0, kk_ = 0, kc_ = 0, pb_ = 0, pa_size_ = 0, slot_floats_ = 0;
  int slots_ = 1;
  cpu::AlignedFloats packed_;
  std::vector<float> bias_;
  gemm::Epilogue ep_;
};

template <bool kPointwise>
class ConvGemmNchw final : public Routine {
 public:
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return kPointwise ? "gemm1x1" : "im2col"; }
  std::vector<Schema> schemas() const override { return {Schema{}}; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    const char* who = kPointwise ? "cpu/gemm1x1" : "cpu/im2col";
    if (Support s = common_checks(info, schema, Layout::nchw, who); !s) return s;
    const Window2d g = core::conv2_window(*info.layer, info.input_shapes[0]);
    if (kPointwise && !is_pointwise(g)) return Support::no("cpu/gemm1x1 takes 1x1 stride-1 unpadded convolutions");
    if (g.oh <= 0 || g.ow <= 0) return Support::no("empty output");
    return Support::yes();
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {{"p_block", {128, 256, 512, 1024}}};
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&,
                                           const RoutineParams& params) const override {
    return std::make_unique<PreparedNchw>(info, routine_param(params, "p_block", 256));
  }
  /// cpu/gemm1x1 ranks above cpu/onednn's nchw convolution (90): conv_bench
  /// measured it faster on every ResNet50 1x1 stride-1 layer at 1 and 2 threads
  /// (1.2-10x; oneDNN 2.6 has no fast plain-layout 1x1 kernel). cpu/im2col
  /// stays below: oneDNN wins some 3x3 layers.
};

// ---------------------------------------------------------------------------
// nhwc: cpu:float32:nhwc/gemm1x1

class PreparedNhwc final : public PreparedRoutine {
 public:
  PreparedNhwc(const LayerInfo& info, int64_t m_block) {
    const Layer& layer = *info.layer;
    g_ = core::conv2_window(layer, info.input_shapes[0]);
    k_ = gemm::best_kernel();
    cg_ = g_.c / g_.group;
    ocg_ = g_.oc / g_.group;
    kc_ = gemm::default_kc(*k_);
    mb_ = std::max<int64_t>(k_->mr, m_block / k_->mr * k_->mr);
    const Blob& w = layer.weight("weight");
    pb_size_ = gemm::packed_b_size(*k_, cg_, ocg_);
    packed_.assign(static_cast<std::size_t>(pb_size_ * g_.group), 0.0f);
    for (int64_t gi = 0; gi < g_.group; ++gi)
      gemm::pack_b(*k_, cg_, ocg_, kc_, w.data_as<float>() + gi * ocg_ * cg_, cg_, true, packed_.data() + gi * pb_size_);
    if (const Blob* b = layer.find_weight("bias")) bias_.assign(b->data_as<float>(), b->data_as<float>() + g_.oc);
    ep_ = make_epilogue(layer);
    slots_ = cpu::workspace_slots();
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
      gemm::gemm_block(*k_, rows, ocg_, cg_, kc_, buf, packed_.data() + gi * pb_size_,
                       y + (n * hw + m0) * g_.oc + gi * ocg_, g_.oc, ep, 0, rows, 0, ocg_);
    });
  }

 private:
  Window2d g_{};
  const Kernel* k_ = nullptr;
  int64_t cg_ = 0, ocg_ = 0, kc_ = 0, mb_ = 0, pb_size_ = 0, slot_floats_ = 0;
  int slots_ = 1;
  cpu::AlignedFloats packed_;
  std::vector<float> bias_;
  gemm::Epilogue ep_;
};

class ConvGemmNhwc final : public Routine {
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
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&,
                                           const RoutineParams& params) const override {
    return std::make_unique<PreparedNhwc>(info, routine_param(params, "m_block", 96));
  }
};

SOFTNEURO_REGISTER_ROUTINE(ConvGemmNchw<false>);
SOFTNEURO_REGISTER_ROUTINE(ConvGemmNchw<true>);
SOFTNEURO_REGISTER_ROUTINE(ConvGemmNhwc);

}  // namespace
}  // namespace softneuro
