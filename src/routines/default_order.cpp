// The untuned default routine choice: one ordered list per layer type, the
// one place it is decided (like oneDNN's implementation lists). Each line is a
// tier, best first. The default runs a layer with the first routine of the
// first tier that supports it, except that within that tier a routine
// computing in the schema the layer's input already has is taken first (it
// saves an adapt), so chains of layers stay in one layout. Schemas other than
// float32 on the CPU matter only among themselves: a tuned path that needs a
// default in cpu:qint8 or cuda takes that schema's first supported routine.
// Routines not listed (new ones, plugins') come after the list: the tuner
// measures every routine whatever its place here. `softneuro inspect --verbose`
// shows each layer's candidates in this order with every refusal.
//
// Why this order: oneDNN's blocked layouts first for convolutions and what
// follows them (fastest untuned on AVX2 and AVX-512, bench/conv_bench), our
// vectorised kernels where they beat oneDNN (cpu/vec: gelu, softmax, layernorm,
// concat), XNNPACK for channels-last sub and div, our own convolution
// kernels and Winograd after them (each wins only on some shapes: the tuner
// picks them there), int8 routines by the same rule, the cpu/ref oracle last.
#include <softneuro/routine.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace softneuro {
namespace {

struct LayerOrder {
  const char* layer_type;
  std::vector<std::vector<std::string>> tiers;
};

// relu, clip, hardswish, hardsigmoid, sigmoid, mul
const std::vector<std::vector<std::string>> kActivation = {
    {"cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn", "cpu:bfloat16:nchw8c/onednn", "cpu:bfloat16:nchw16c/onednn", "cpu:float32:nhwc/onednn", "cpu:bfloat16:nhwc/onednn", "cpu:float32:nhwc/xnnpack", "cpu/onednn", "cpu:bfloat16/onednn"},
    {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8"},
    {"cpu/ref"},
    {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"},
};

// sub, div
// sub, div: XNNPACK's for channels last and where oneDNN cannot (a broadcast
// first input), oneDNN's where the input already is blocked or plain.
const std::vector<std::vector<std::string>> kSubDiv = {
    {"cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn", "cpu:float32:nhwc/xnnpack", "cpu:float32:nhwc/onednn", "cpu/onednn"},
    {"cpu/ref"},
    {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"},
};

// reshape, flatten, identity
const std::vector<std::vector<std::string>> kCopy = {
    {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8"},
    {"cpu/vec"},
    {"cpu/ref"},
    {"cuda/kernel", "cuda:float16/kernel"},
};

// constant
const std::vector<std::vector<std::string>> kReferenceOnly = {
    {"cpu/ref"},
};

// wgencb, wgconvb, wgdecb
const std::vector<std::vector<std::string>> kWinogradBlocked = {
    {"cpu/ref", "cpu:float32:nchw16c/winograd", "cpu:float32:nchw8c/winograd"},
};

// wgenc, wgconv, wgdec
const std::vector<std::vector<std::string>> kWinograd = {
    {"cpu/winograd"},
    {"cpu/ref"},
};

// abs, neg, sqrt, exp, log, reciprocal, silu, mish, leaky_relu, pow
// (oneDNN in every layout: they follow their input)
const std::vector<std::vector<std::string>> kOnednnEltwise = {
    {"cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn", "cpu:float32:nhwc/onednn", "cpu/onednn"},
    {"cpu/ref"},
};

const LayerOrder kDefaultOrder[] = {
    {"conv2",
     {
      {"cpu:float32:nchw16c/onednn", "cpu:bfloat16:nchw16c/onednn", "cpu:float32:nchw8c/onednn"},
      {"cpu/gemm1x1", "cpu/onednn", "cpu:bfloat16/onednn"},
      {"cpu:float32:nhwc/onednn", "cpu:bfloat16:nhwc/onednn", "cpu:float32:nhwc/xnnpack"},
      {"cpu/winograd", "cpu:float32:nchw16c/winograd", "cpu:float32:nchw8c/winograd", "cpu:float32:nhwc/winograd"},
      {"cpu/im2col", "cpu:float32:nhwc/gemm1x1", "cpu:float32:nchw16c/direct", "cpu:float32:nchw8c/direct", "cpu:float32:nhwc/direct", "cpu:float32:nhwc/depthwise", "cpu:float32:nchw16c/depthwise", "cpu:float32:nchw8c/depthwise"},
      {"cpu:float32:nhwc/split_affine", "cpu/split_affine"},  // where none above applies act_scale/act_shift
      {"cpu:qint8/onednn", "cpu:qint8:nhwc/onednn"},
      // Winograd first: exact (the GEMM's outputs bit for bit), 1.4-2.1x its int16 kernel on ResNet50's 3x3 layers (Zen 3).
      {"cpu:qint8:nhwc/winograd", "cpu:qint8/qint8", "cpu:qint8:nhwc/qint8", "cpu:qint8:nhwc/xnnpack"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel", "cuda/cudnn", "cuda:float32:nhwc/cudnn", "cuda:float16/cudnn", "cuda:float16:nhwc/cudnn"},
     }},
    {"dense",
     {
      {"cpu/nbits_dense", "cpu/gemv", "cpu/onednn", "cpu:bfloat16/onednn"},
      {"cpu:float32:nhwc/xnnpack"},
      {"cpu/eigen"},
      {"cpu/split_affine"},
      {"cpu:qint8/onednn", "cpu:qint8:nhwc/onednn"},
      {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8", "cpu:qint8:nhwc/xnnpack"},
      {"cpu/ref", "cpu/conv"},
      {"cuda/cublas", "cuda:float16/cublas", "cuda/cublaslt", "cuda:float16/cublaslt"},
     }},
    {"matmul",
     {
      {"cpu/onednn"},
      {"cpu/ref"},
      {"cuda/cublas", "cuda:float16/cublas"},
     }},
    {"pool2",
     {
      {"cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn", "cpu:bfloat16:nchw16c/onednn", "cpu:float32:nhwc/onednn", "cpu:bfloat16:nhwc/onednn", "cpu:float32:nhwc/xnnpack", "cpu/onednn", "cpu:bfloat16/onednn"},
      {"cpu:qint8/onednn", "cpu:qint8:nhwc/onednn"},
      {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8", "cpu:qint8:nhwc/xnnpack"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"},
     }},
    {"batchnorm",
     {
      {"cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn", "cpu:float32:nhwc/onednn", "cpu/onednn"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"},
     }},
    {"relu", kActivation},
    {"clip", kActivation},
    {"hardswish", kActivation},
    {"hardsigmoid", kActivation},
    {"sigmoid", kActivation},
    {"tanh",
     {
      {"cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn", "cpu:bfloat16:nchw8c/onednn", "cpu:bfloat16:nchw16c/onednn", "cpu:float32:nhwc/onednn", "cpu:bfloat16:nhwc/onednn", "cpu/onednn", "cpu:bfloat16/onednn"},
      {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"},
     }},
    {"gelu",
     {
      {"cpu/vec", "cpu:float32:nhwc/vec", "cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn", "cpu:bfloat16:nchw8c/onednn", "cpu:bfloat16:nchw16c/onednn", "cpu:float32:nhwc/onednn", "cpu:bfloat16:nhwc/onednn", "cpu/onednn", "cpu:bfloat16/onednn"},
      {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"},
     }},
    {"softmax",
     {
      {"cpu/vec", "cpu:float32:nhwc/xnnpack", "cpu/onednn"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"},
     }},
    {"attention",
     {
      {"cpu/gemm_attention", "cpu/flash_attention", "cpu/onednn", "cpu:bfloat16/tile_attention", "cpu:bfloat16/onednn"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float16/kernel"},
     }},
    {"compare", {{"cpu/vec"}, {"cpu/ref"}, {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"}}},
    {"logical", {{"cpu/vec"}, {"cpu/ref"}, {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"}}},
    {"where", {{"cpu/vec"}, {"cpu/ref"}, {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"}}},
    {"gather",
     {
      {"cpu/vec"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float16/kernel"},
     }},
    {"layernorm",
     {
      {"cpu/vec", "cpu/onednn"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float16/kernel"},
     }},
    {"rms_norm", {{"cpu/vec"}, {"cpu/ref"}}},
    {"rotary", {{"cpu/vec"}, {"cpu/ref"}}},
    {"slice", {{"cpu/vec"}, {"cpu/ref"}}},
    {"add",
     {
      {"cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn", "cpu:bfloat16:nchw8c/onednn", "cpu:bfloat16:nchw16c/onednn", "cpu:float32:nhwc/onednn", "cpu:bfloat16:nhwc/onednn", "cpu:float32:nhwc/xnnpack", "cpu/onednn", "cpu:bfloat16/onednn",
       "cpu/vec", "cpu:float32:nhwc/vec", "cpu:float32:nchw8c/vec", "cpu:float32:nchw16c/vec"},
      {"cpu:qint8/onednn", "cpu:qint8:nhwc/onednn"},
      {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8", "cpu:qint8:nhwc/xnnpack"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"},
     }},
    {"sub", kSubDiv},
    {"mul", kActivation},
    {"div", kSubDiv},
    {"max", {{"cpu/ref"}}},
    {"min", {{"cpu/ref"}}},
    {"concat",
     {
      {"cpu/vec", "cpu:float32:nhwc/vec", "cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn", "cpu:bfloat16:nchw8c/onednn", "cpu:bfloat16:nchw16c/onednn", "cpu:float32:nhwc/onednn", "cpu:bfloat16:nhwc/onednn", "cpu/onednn", "cpu:bfloat16/onednn"},
      {"cpu:qint8/onednn", "cpu:qint8:nhwc/onednn"},
      {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"},
     }},
    {"split",
     {
      {"cpu/vec", "cpu:float32:nhwc/vec"},
      {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float32:nhwc/kernel", "cuda:float16/kernel", "cuda:float16:nhwc/kernel"},
     }},
    {"reshape", kCopy},
    {"flatten", kCopy},
    {"identity", kCopy},
    {"transpose",
     {
      {"cpu/vec"},
      {"cpu/ref"},
      {"cuda/kernel", "cuda:float16/kernel"},
     }},
    {"resize",
     {
      {"cpu/resample", "cpu:float32:nhwc/xnnpack", "cpu:float32:nhwc/resample"},
      {"cpu:qint8/resample", "cpu:qint8:nhwc/resample", "cpu:qint8:nhwc/xnnpack"},
      {"cpu/ref"},
     }},
    {"deconv2",
     {
      {"cpu:float32:nchw16c/onednn", "cpu:float32:nchw8c/onednn", "cpu:float32:nhwc/pixel_shuffle"},
      {"cpu/onednn", "cpu:float32:nhwc/onednn", "cpu:float32:nhwc/xnnpack"},
      {"cpu/ref"},
     }},
    {"pad",
     {
      {"cpu/vec", "cpu:float32:nhwc/vec"},
      {"cpu:qint8/vec", "cpu:qint8:nhwc/vec"},
      {"cpu/ref"},
     }},
    {"constant", kReferenceOnly},
    {"wgencb", kWinogradBlocked},
    {"wgconvb", kWinogradBlocked},
    {"wgdecb", kWinogradBlocked},
    {"wgenc", kWinograd},
    {"wgconv", kWinograd},
    {"wgdec", kWinograd},
    {"adapt",
     {
      {"cpu/transfer", "cpu:float32:nhwc/transfer", "cpu:float16/transfer", "cpu:float16:nhwc/transfer", "cpu/reorder", "cpu:float32:nhwc/reorder", "cpu:float32:nchw8c/reorder", "cpu:float32:nchw16c/reorder", "cpu:qint8/quantize", "cpu:qint8:nhwc/quantize", "cpu/dequantize", "cpu:float32:nhwc/dequantize", "cpu:qint8/reorder", "cpu:qint8:nhwc/reorder", "cpu/cast", "cpu:float32:nhwc/cast", "cpu:float32:nchw8c/cast", "cpu:float32:nchw16c/cast", "cpu:float16/cast", "cpu:float16:nhwc/cast", "cpu:float16:nchw8c/cast", "cpu:float16:nchw16c/cast", "cpu:bfloat16/cast", "cpu:bfloat16:nhwc/cast", "cpu:bfloat16:nchw8c/cast", "cpu:bfloat16:nchw16c/cast", "cpu/chain", "cpu:float32:nhwc/chain", "cpu:float32:nchw8c/chain", "cpu:float32:nchw16c/chain", "cpu:qint8/chain", "cpu:qint8:nhwc/chain", "cpu:qint8:nchw8c/chain", "cpu:qint8:nchw16c/chain", "cpu:float16/chain", "cpu:float16:nhwc/chain", "cpu:float16:nchw8c/chain", "cpu:float16:nchw16c/chain", "cpu:bfloat16/chain", "cpu:bfloat16:nhwc/chain", "cpu:bfloat16:nchw8c/chain", "cpu:bfloat16:nchw16c/chain"},
      {"cuda/transfer", "cuda:float32:nhwc/transfer", "cuda:float16/transfer", "cuda:float16:nhwc/transfer", "cuda/convert", "cuda:float32:nhwc/convert", "cuda:float16/convert", "cuda:float16:nhwc/convert"},
     }},

    {"abs", kOnednnEltwise},
    {"neg", kOnednnEltwise},
    {"sqrt", kOnednnEltwise},
    {"exp", kOnednnEltwise},
    {"log", kOnednnEltwise},
    {"reciprocal", kOnednnEltwise},
    {"silu",
     {
      {"cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn", "cpu:float32:nhwc/onednn", "cpu/onednn"},
      {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8"},
      {"cpu/ref"},
     }},
    {"mish", kOnednnEltwise},
    {"leaky_relu", kOnednnEltwise},
    {"pow", kOnednnEltwise},
    {"erf", {{"cpu/vec", "cpu:float32:nhwc/vec"}, {"cpu/ref"}}},
    {"prelu",
     {
      {"cpu:float32:nchw16c/vec", "cpu:float32:nchw8c/vec", "cpu:float32:nhwc/vec", "cpu/vec"},
      {"cpu:float32:nhwc/onednn", "cpu/onednn"},
      {"cpu/ref"},
     }},
    {"reduce", {{"cpu/onednn"}, {"cpu/ref"}}},
    {"lstm", {{"cpu/eigen"}, {"cpu/ref"}}},
    {"gru", {{"cpu/eigen"}, {"cpu/ref"}}},
    {"group_norm", {{"cpu/vec"}, {"cpu/ref"}}},
    {"fake_quant", {{"cpu/vec", "cpu:float32:nhwc/vec", "cpu:float32:nchw8c/vec", "cpu:float32:nchw16c/vec"}, {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8", "cpu:qint8/vec", "cpu:qint8:nhwc/vec"}, {"cpu/ref"}}},
    {"dynamic_quantize", {{"cpu/vec"}, {"cpu/ref"}}},
    {"dynamic_quant_dense", {{"cpu/dynamic_int8"}, {"cpu/ref"}}},
};

/// On aarch64, XNNPACK's routines lead, float32 and int8: oneDNN 2.6's aarch64
/// build has reference implementations only for much of what it runs jit code
/// for on x86 (docs/arm.md), and our own int8 kernels are x86's: the qint8
/// family, the int8 Winograd, cpu/dynamic_int8 and the AMX routines (tile_*) are not built there,
/// and their entries go. Elsewhere the list as is.
std::vector<std::vector<std::string>> for_this_processor(const std::vector<std::vector<std::string>>& tiers) {
#if defined(__aarch64__)
  const std::string f32 = "cpu:float32:nhwc/xnnpack", int8 = "cpu:qint8:nhwc/xnnpack";
  auto lists = [](const std::vector<std::string>& tier, const std::string& d) {
    return std::find(tier.begin(), tier.end(), d) != tier.end();
  };
  bool int8_pending = std::any_of(tiers.begin(), tiers.end(), [&](const auto& t) { return lists(t, int8); });
  std::vector<std::vector<std::string>> out{{}};
  for (const auto& tier : tiers) {
    std::vector<std::string> rest;
    bool int8_tier = lists(tier, int8);
    for (const auto& d : tier) {
      int8_tier = int8_tier || d.rfind("cpu:qint8", 0) == 0;
      if (d.ends_with("/qint8") || d == "cpu:qint8:nhwc/winograd" || d == "cpu/dynamic_int8" ||
          d.find("/tile_") != std::string::npos)
        continue;  // (qint8.cpp, winograd_qint8.cpp, dynamic_int8.cpp, tile_*.cpp: x86 only)
      if (d == f32) out[0].push_back(d);
      else if (d != int8) rest.push_back(d);
    }
    if (int8_tier && int8_pending) {  // a tier of its own before the first one of int8 routines
      out.push_back({int8});
      int8_pending = false;
    }
    if (!rest.empty()) out.push_back(std::move(rest));
  }
  if (out[0].empty()) out.erase(out.begin());
  return out;
#else
  return tiers;
#endif
}

struct Registration {
  Registration() {
    for (const auto& o : kDefaultOrder) set_default_order(o.layer_type, for_this_processor(o.tiers));
  }
};
const Registration registration;

}  // namespace
}  // namespace softneuro
