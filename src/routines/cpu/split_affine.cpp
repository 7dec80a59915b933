// cpu/split_affine — a conv2 or dense whose fused activation has an affine
// after it (act_scale, act_shift: core::fuse_output_affine) as a childnet of
// two steps, so that any routine that fuses the activation computes it:
//   <layer>/compute   the layer without the affine
//   <layer>/affine    batchnorm with scale act_scale, bias act_shift, mean 0, var 1, epsilon 0
// oneDNN applies the affine as a post-op; where it cannot (aarch64's hardswish,
// NaN kept by a pass of its own) or is slower, the layer still runs on the
// routines that took it before the pass fused the mul and add, not cpu/ref.
#include "core/childnet.hpp"
#include "core/layer_types.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

namespace softneuro {
namespace {

constexpr Schema kNhwc{Device::cpu, DType::float32, Layout::nhwc};

template <const char* kType>
class SplitAffine final : public core::ChildnetRoutine {
 public:
  std::string_view layer_type() const override { return kType; }
  std::string_view algorithm() const override { return "split_affine"; }
  std::vector<Schema> schemas() const override {
    if (std::string_view(kType) == "conv2") return {Schema{}, kNhwc};
    return {Schema{}};
  }

  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (!(s == Schema{}) && !(s == kNhwc && std::string_view(kType) == "conv2"))
      return Support::no("computes in cpu (and a conv2 in cpu:float32:nhwc)");
    if (!info.layer || info.input_shapes.size() != 1 || info.output_shapes.size() != 1)
      return Support::no("needs a layer of one input and one output");
    try {  // the part before the affine keeps the activation: its routines take or refuse it
      if (!core::fused_activation(*info.layer, true, true).affine()) return Support::no("no affine after the activation to split off");
    } catch (const Error& e) {
      return Support::no(e.message());
    }
    if (info.output_shapes[0].rank() < 2) return Support::no("needs an output of rank >= 2 (the affine's channels are dim 1)");
    return Support::yes();
  }

  std::optional<Childnet> childnet(const LayerInfo& info, const Schema& s, const RoutineParams&) const override {
    const Layer& l = *info.layer;
    const core::Activation act = core::fused_activation(l, true, true);
    Layer compute = l;
    compute.name = l.name + "/compute";
    compute.params.erase("act_scale");
    compute.params.erase("act_shift");
    compute.inputs = {"x"};
    compute.outputs = {"z"};
    const int64_t c = info.output_shapes[0][1];
    auto filled = [c](float v) {
      Blob b = Blob::allocate(Shape{c});
      for (int64_t i = 0; i < c; ++i) b.data_as<float>()[i] = v;
      return b;
    };
    Layer affine;
    affine.name = l.name + "/affine";
    affine.type = "batchnorm";
    affine.inputs = {"z"};
    affine.outputs = {"y"};
    affine.params["epsilon"] = 0.0;  // (z - 0) / sqrt(1 + 0) * scale + shift: z * scale + shift
    affine.weights = {{"scale", filled(act.scale)}, {"bias", filled(act.shift)}, {"mean", filled(0)}, {"var", filled(1)}};
    return Childnet{{std::move(compute), std::move(affine)}, {s, s}, {"x"}, {"y"}};
  }

};

constexpr char kConv2[] = "conv2";
constexpr char kDense[] = "dense";
using SplitAffineConv2 = SplitAffine<kConv2>;
using SplitAffineDense = SplitAffine<kDense>;
SOFTNEURO_REGISTER_ROUTINE(SplitAffineConv2);
SOFTNEURO_REGISTER_ROUTINE(SplitAffineDense);

}  // namespace
}  // namespace softneuro
