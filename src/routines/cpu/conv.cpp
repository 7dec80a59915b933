// cpu/conv — dense as a childnet (SoftNeuro Fig. 1a): reshape -> conv2 1x1 ->
// reshape, so dense rides on whichever conv2 routine the tuner finds fastest
// (each child's routine is chosen like a layer's: <layer>/conv is a conv2).
//   <layer>/reshape_in   x [..., K]   -> [rows, K, 1, 1]
//   <layer>/conv         conv2 1x1, weight [O, K, 1, 1], bias and fused activation as the dense
//   <layer>/reshape_out  [rows, O, 1, 1] -> [..., O]
// Last in the default order, after cpu/ref, so the untuned default never picks
// it; the tuner does where measured faster.
#include "core/childnet.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <cstring>

namespace softneuro {
namespace {

class DenseAsConv final : public core::ChildnetRoutine {
 public:
  std::string_view layer_type() const override { return "dense"; }
  std::string_view algorithm() const override { return "conv"; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (!(s == Schema{})) return Support::no("computes in cpu (float32 nchw) only");
    if (info.input_shapes.size() != 1 || info.input_shapes[0].rank() < 1) return Support::no("needs one input of rank >= 1");
    for (const char* key : {"weight", "bias"}) {
      const Blob* b = info.layer->find_weight(key);
      if (!b) continue;
      if (b->dtype() != DType::float32 || b->device() != Device::cpu || b->layout() != Layout::nchw || (b->numel() && !b->data()))
        return Support::no(fmt::format("weight '{}' must be plain float32 on the CPU", key));
    }
    if (!info.layer->find_weight("weight")) return Support::no("weight is missing");
    if (info.layer->get_string("act", "none") == "gelu") return Support::no("no conv2 routine applies a fused gelu");
    return Support::yes();
  }
  std::optional<Childnet> childnet(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    const Layer& l = *info.layer;
    const Shape& x = info.input_shapes[0];
    const Blob& w = l.weight("weight");
    const int64_t k = x[x.rank() - 1], o = w.shape()[0];
    int64_t rows = 1;
    for (int d = 0; d + 1 < x.rank(); ++d) rows *= x[d];
    Blob w4 = Blob::allocate(Shape{o, k, 1, 1});
    std::memcpy(w4.data(), w.data(), w.byte_size());

    Layer in;
    in.name = l.name + "/reshape_in";
    in.type = "reshape";
    in.inputs = {"x"};
    in.outputs = {"x4"};
    in.params["shape"] = std::vector<int64_t>{rows, k, 1, 1};
    Layer conv;
    conv.name = l.name + "/conv";
    conv.type = "conv2";
    conv.inputs = {"x4"};
    conv.outputs = {"y4"};
    conv.weights["weight"] = w4;
    if (const Blob* b = l.find_weight("bias")) conv.weights["bias"] = *b;
    for (const auto& [key, v] : l.params)
      if (key.rfind("act", 0) == 0) conv.params[key] = v;
    Layer out;
    out.name = l.name + "/reshape_out";
    out.type = "reshape";
    out.inputs = {"y4"};
    out.outputs = {"y"};
    std::vector<int64_t> shape;
    for (int d = 0; d + 1 < x.rank(); ++d) shape.push_back(x[d]);
    shape.push_back(o);
    out.params["shape"] = shape;

    Childnet cn;
    cn.layers = {std::move(in), std::move(conv), std::move(out)};
    cn.schemas = {Schema{}, Schema{}, Schema{}};
    cn.inputs = {"x"};
    cn.outputs = {"y"};
    return cn;
  }
};
SOFTNEURO_REGISTER_ROUTINE(DenseAsConv);

}  // namespace
}  // namespace softneuro
