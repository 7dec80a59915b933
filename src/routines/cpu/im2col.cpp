// cpu/im2col — conv2 as GEMM on our packed float32 kernels (gemm.hpp: AVX-512
// 12x32 or AVX2 6x16 register tiles, chosen at run time), nchw, any
// kernel/stride/pad/dilation/groups: per (image, group, block of output pixels)
// the input patches are written straight into packed-B panels in the
// workspace, then Y_g[OCg, P] = W_g · Col (a 1x1 stride-1 unpadded conv packs
// the input itself). Weights are packed once in prepare; bias and fused
// activation (all but sigmoid) are applied by the GEMM epilogue. Routine
// parameter p_block: output pixels per task (the packed-B block; rounded to NR).
// Work is split into tasks over (image, group, pixel block[, channel block]),
// run on the library's pool with one workspace slot per thread.
// cpu/gemm1x1 (gemm1x1.cpp) runs the same code on pointwise convolutions only.
#include "routines/cpu/im2col.hpp"

#include "core/layer_types.hpp"
#include "core/log.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace softneuro::cpu::conv_gemm {

using core::Window2d;
using cpu::gemm::Kernel;

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
  if (Support s = routines::float_weights(*info.layer, {"weight", "bias"}, who); !s) return s;
  return cpu::check_activation(*info.layer);
}

gemm::Epilogue make_epilogue(const Layer& layer) {
  gemm::Epilogue ep;
  cpu::to_epilogue(core::fused_activation(layer), ep);
  return ep;
}

namespace {

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


/// The GEMM's A from the weights: per group, OC/group rows of K = C/group * KH * KW.
struct PackedA {
  const Kernel* k = gemm::best_kernel();
  int64_t group = 1, ocg = 0, kk = 0, kc = 0, size = 0;  ///< size: floats per group
  explicit PackedA(const Layer& layer) {
    const Shape& w = layer.weight("weight").shape();
    group = layer.get_int("group", 1);
    ocg = w[0] / group;
    kk = w[1] * w[2] * w[3];
    kc = gemm::default_kc(*k);
    size = gemm::packed_a_size(*k, ocg, kk);
  }
  std::size_t floats() const { return static_cast<std::size_t>(size * group); }
};

class PreparedNchw final : public PreparedRoutine {
 public:
  PreparedNchw(const LayerInfo& info, int64_t p_block, std::shared_ptr<const PackedWeights> packed) {
    const Layer& layer = *info.layer;
    g_ = core::conv2_window(layer, info.input_shapes[0]);
    const PackedA a(layer);
    k_ = a.k;
    ocg_ = a.ocg;
    kk_ = a.kk;
    kc_ = a.kc;
    const int64_t p = g_.oh * g_.ow;
    pb_ = std::min(gemm::round_up(p, k_->nr), std::max<int64_t>(k_->nr, gemm::round_up(p_block, k_->nr)));
    packed_ = cpu::packed_of(packed, a.floats(), info, "cpu/im2col");
    pa_size_ = a.size;
    if (const Blob* b = layer.find_weight("bias")) bias_.assign(b->data_as<float>(), b->data_as<float>() + g_.oc);
    ep_ = make_epilogue(layer);
    slots_ = team_threads(info);
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
      gemm::gemm_block(*k_, ocg_, ncols, kk_, kc_, packed_->data() + gi * pa_size_, buf,
                       y + (n * g_.oc + gi * ocg_) * p + p0, p, ep, m0, m1, 0, ncols);
    });
  }

 private:
  Window2d g_{};
  const Kernel* k_ = nullptr;
  int64_t ocg_ = 0, kk_ = 0, kc_ = 0, pb_ = 0, pa_size_ = 0, slot_floats_ = 0;
  int slots_ = 1;
  std::shared_ptr<const cpu::AlignedFloats> packed_;
  std::vector<float> bias_;
  gemm::Epilogue ep_;
};

}  // namespace

std::shared_ptr<const PackedWeights> pack_nchw(const Layer& layer) {
  const PackedA a(layer);
  const float* w = layer.weight("weight").data_as<float>();
  return cpu::pack_floats(a.floats(), [&](float* packed) {
    for (int64_t gi = 0; gi < a.group; ++gi)
      gemm::pack_a(*a.k, a.ocg, a.kk, a.kc, w + gi * a.ocg * a.kk, a.kk, false, packed + gi * a.size);
  });
}

std::shared_ptr<const PackedWeights> unpack_nchw(const Blob& bytes, const Layer& layer) {
  return cpu::unpack_floats(bytes, PackedA(layer).floats());
}

std::unique_ptr<PreparedRoutine> plan_nchw(const LayerInfo& info, int64_t p_block, std::shared_ptr<const PackedWeights> packed) {
  return std::make_unique<PreparedNchw>(info, p_block, std::move(packed));
}

}  // namespace softneuro::cpu::conv_gemm

namespace softneuro {
namespace {

using namespace cpu::conv_gemm;

SOFTNEURO_REGISTER_ROUTINE(ConvGemmNchw<false>);

}  // namespace
}  // namespace softneuro
