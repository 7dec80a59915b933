// What cpu/im2col (im2col.cpp) shares with cpu/gemm1x1 (gemm1x1.cpp): conv2
// as GEMM on our packed float32 kernels (gemm.hpp).
#pragma once

#include "core/layer_types.hpp"
#include "routines/cpu/f32_common.hpp"
#include "routines/cpu/gemm.hpp"

#include <softneuro/routine.hpp>

#include <memory>
#include <string_view>
#include <vector>

namespace softneuro::cpu::conv_gemm {

/// 1x1, stride 1, no padding: the input itself is the GEMM's B (or A in nhwc).
bool is_pointwise(const core::Window2d& g);

/// Float32 in `layout`, a 4-d input, float weights, an activation the epilogue fuses.
Support common_checks(const LayerInfo& info, const Schema& schema, Layout layout, std::string_view who);

gemm::Epilogue make_epilogue(const Layer& layer);

/// The nchw GEMM convolution's weights packed as the GEMM's A (per group), from
/// the weights [OC, C/group, KH, KW] and the CPU's kernel: never the input's size.
std::shared_ptr<const PackedWeights> pack_nchw(const Layer& layer);
std::shared_ptr<const PackedWeights> unpack_nchw(const Blob& bytes, const Layer& layer);
/// The nchw GEMM convolution (im2col of `p_block` output pixels per task) over pack_nchw's weights.
std::unique_ptr<PreparedRoutine> plan_nchw(const LayerInfo& info, int64_t p_block, std::shared_ptr<const PackedWeights> packed);

/// cpu/im2col (any conv2) and cpu/gemm1x1 (pointwise only): one code, two
/// places in the default order (gemm1x1.cpp says why).
template <bool kPointwise>
class ConvGemmNchw final : public Routine {
 public:
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return kPointwise ? "gemm1x1" : "im2col"; }
  std::vector<Schema> schemas() const override { return {Schema{}}; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    const char* who = kPointwise ? "cpu/gemm1x1" : "cpu/im2col";
    if (Support s = common_checks(info, schema, Layout::nchw, who); !s) return s;
    const core::Window2d g = core::conv2_window(*info.layer, info.input_shapes[0]);
    if (kPointwise && !is_pointwise(g)) return Support::no("cpu/gemm1x1 takes 1x1 stride-1 unpadded convolutions");
    if (g.oh <= 0 || g.ow <= 0) return Support::no("empty output");
    return Support::yes();
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {{"p_block", {128, 256, 512, 1024}}};
  }
  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams&) const override {
    return pack_nchw(*info.layer);
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& info, const Schema&,
                                              const RoutineParams&) const override {
    return unpack_nchw(bytes, *info.layer);
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams& params,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    return plan_nchw(info, routine_param(params, "p_block", 256), std::move(packed));
  }
};

}  // namespace softneuro::cpu::conv_gemm
