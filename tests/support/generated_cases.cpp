// The generated cases of the routine tests (tests/routines/test_every_routine.cpp
// runs every CPU routine on them, tests/cuda/test_cuda_generated.cpp every CUDA
// routine): a few shapes and attribute sets per layer type, random values.
#include "support/generated_cases.hpp"
#include "core/dnn_file.hpp"
#include "core/graph.hpp"
#include "core/tensor_math.hpp"
#include "core/weight_quant.hpp"

#include "core/layer_types.hpp"
#include "routines/f32_check.hpp"
#include "support/run_layer.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <tuple>

namespace softneuro::test {
using f32::random_blob;

namespace {

using Ints = std::vector<int64_t>;

using Case = GeneratedCase;

Layer layer_of(const std::string& type, std::map<std::string, Attr> params, std::map<std::string, Blob> weights,
               int inputs = 1, int outputs = 1) {
  return test::make_layer(type, std::move(params), std::move(weights), inputs, outputs);
}

std::vector<Case> conv2_cases(std::mt19937& rng) {
  struct C {
    int64_t n, c, h, w, k, kh, kw, stride, dilation, group, pad;
    const char* act;
    double act_scale = 1, act_shift = 0;  // an affine after the activation (fuse_output_affine)
  };
  const C shapes[] = {
      {1, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, "none"},  {1, 3, 17, 19, 16, 3, 3, 2, 1, 1, 1, "relu"},
      {1, 32, 9, 9, 24, 1, 1, 1, 1, 1, 0, "clip"},    {1, 24, 10, 10, 40, 1, 1, 2, 1, 1, 0, "none"},
      {1, 32, 12, 12, 32, 3, 3, 1, 1, 32, 1, "relu"}, {1, 48, 11, 11, 48, 3, 3, 2, 1, 48, 1, "hardswish"},
      {2, 8, 8, 8, 12, 3, 3, 1, 2, 1, 2, "sigmoid"},  {1, 16, 7, 9, 16, 5, 5, 1, 1, 4, 2, "hardsigmoid"},
      {1, 20, 13, 13, 36, 3, 3, 1, 1, 1, 0, "none"},  {1, 64, 6, 6, 64, 3, 3, 1, 1, 1, 1, "relu"},
      {1, 16, 10, 10, 32, 3, 3, 1, 1, 1, 1, "silu"},  {1, 32, 8, 8, 16, 1, 1, 1, 1, 1, 0, "silu"},
      // PP-LCNetV3's: hardswish, then x * s + b; 20 channels leave a blocked layout's last block part empty.
      {1, 32, 12, 12, 32, 3, 3, 1, 1, 32, 1, "hardswish", 0.75, -0.25},
      {1, 16, 9, 9, 20, 1, 1, 1, 1, 1, 0, "relu", 1.5, 0.125},
      {1, 16, 10, 10, 24, 3, 3, 1, 1, 1, 1, "hardswish", 0.75, -0.25},  // Winograd's and direct's shape
      // Two images, odd sizes (border tiles), channels in whole vectors (channels-last Winograd).
      {2, 16, 9, 11, 32, 3, 3, 1, 1, 1, 1, "relu"},
  };
  std::vector<Case> out;
  for (const C& s : shapes) {
    std::map<std::string, Attr> p{{"strides", Ints{s.stride, s.stride}},
                                  {"pads", Ints{s.pad, s.pad, s.pad, s.pad}},
                                  {"dilations", Ints{s.dilation, s.dilation}},
                                  {"group", s.group},
                                  {"act", std::string(s.act)}};
    if (std::string(s.act) == "clip") p["act_min"] = 0.0, p["act_max"] = 0.5;
    if (s.act_scale != 1 || s.act_shift != 0) p["act_scale"] = s.act_scale, p["act_shift"] = s.act_shift;
    std::map<std::string, Blob> w{{"weight", random_blob({s.k, s.c / s.group, s.kh, s.kw}, rng, -0.3f, 0.3f)},
                                  {"bias", random_blob({s.k}, rng)}};
    out.push_back({fmt::format("{}x{}x{}x{} -> {} k{}x{} s{} d{} g{} p{} {}{}", s.n, s.c, s.h, s.w, s.k, s.kh, s.kw,
                               s.stride, s.dilation, s.group, s.pad, s.act,
                               s.act_scale != 1 || s.act_shift != 0 ? fmt::format(" * {} + {}", s.act_scale, s.act_shift) : ""),
                   layer_of("conv2", p, w), {random_blob({s.n, s.c, s.h, s.w}, rng)}});
  }
  return out;
}

std::vector<Case> deconv2_cases(std::mt19937& rng) {
  std::vector<Case> out;
  struct C {
    int64_t c, h, k, kernel, stride, pad, group, output_padding;
  };
  // Then a detector's upsampling head (its bias, batchnorm and relu or sigmoid folded in), one
  // output channel in a blocked layout's lanes, and 16 -> 32 channels without a bias: what
  // oneDNN's nChw8c runs on an AVX-512 CPU (the others refused there, naming why).
  for (const C& s : {C{16, 8, 8, 2, 2, 0, 1, 0}, C{8, 5, 12, 3, 2, 1, 1, 1}, C{12, 6, 12, 4, 2, 1, 4, 0},
                     C{24, 9, 24, 2, 2, 0, 1, 0}, C{24, 10, 1, 2, 2, 0, 1, 0}, C{16, 6, 32, 2, 2, 0, 1, 0}}) {
    const char* act = s.k == 24 ? "relu" : s.k == 1 ? "sigmoid" : "none";
    std::map<std::string, Attr> p{{"strides", Ints{s.stride, s.stride}}, {"pads", Ints{s.pad, s.pad, s.pad, s.pad}},
                                  {"group", s.group}, {"output_padding", Ints{s.output_padding, s.output_padding}},
                                  {"act", std::string(act)}};
    std::map<std::string, Blob> weights{{"weight", random_blob({s.c, s.k / s.group, s.kernel, s.kernel}, rng, -0.3f, 0.3f)}};
    const bool bias = s.k != 32;
    if (bias) weights["bias"] = random_blob({s.k}, rng);
    out.push_back({fmt::format("deconv {}x{} -> {} k{} s{} p{} g{} {}{}", s.c, s.h, s.k, s.kernel, s.stride, s.pad, s.group,
                               act, bias ? "" : " no bias"),
                   layer_of("deconv2", p, weights), {random_blob({1, s.c, s.h, s.h}, rng)}});
  }
  return out;
}

/// A blockwise weight [n, k] as LLM files hold it (core::block_quantized):
/// 4-bit codes one per byte with per-block scales and zero points, or signed
/// codes without zero points.
Blob block_weight(int64_t n, int64_t k, int64_t block, bool is_signed, std::mt19937& rng) {
  Blob w = Blob::allocate(Shape{n, k}, is_signed ? DType::qint8 : DType::quint8);
  std::uniform_int_distribution<int> code(is_signed ? -8 : 0, is_signed ? 7 : 15);
  for (int64_t i = 0; i < n * k; ++i) w.data_as<uint8_t>()[i] = static_cast<uint8_t>(code(rng));
  const int64_t blocks = (k + block - 1) / block;
  w.quant().axis = 1;
  w.quant().block_size = block;
  std::uniform_real_distribution<float> scale(0.005f, 0.05f);
  for (int64_t i = 0; i < n * blocks; ++i) {
    w.quant().scales.push_back(scale(rng));
    if (!is_signed) w.quant().zero_points.push_back(code(rng));
  }
  return w;
}

std::vector<Case> dense_cases(std::mt19937& rng) {
  std::vector<Case> out;
  // Blockwise 4-bit weights (an LLM's, cpu/nbits_dense): a decode step's one
  // row with K not a multiple of the block, a few rows, and a prompt's many
  // (dequantised into the GEMM's panels) with N past a register tile's edge.
  struct B {
    int64_t m, k, n, block;
    bool is_signed;
    const char* act;
  };
  for (const B& b : {B{1, 100, 37, 32, false, "none"}, B{3, 64, 20, 16, false, "relu"}, B{2, 48, 9, 16, true, "none"},
                     B{37, 96, 70, 32, true, "gelu"}, B{10, 80, 40, 16, false, "silu"},
                     B{6, 100, 21, 32, false, "none"}, B{1, 72, 13, 8, true, "none"}})
    out.push_back({fmt::format("dense [{},{}] x {} blockwise {}{} {}", b.m, b.k, b.n, b.block, b.is_signed ? " signed" : "", b.act),
                   layer_of("dense", {{"act", std::string(b.act)}},
                            {{"weight", block_weight(b.n, b.k, b.block, b.is_signed, rng)}, {"bias", random_blob({b.n}, rng)}}),
                   {random_blob({b.m, b.k}, rng)}});
  // The same as the model keeps 4-bit codes, two a byte (quint4, core::packed_codes4):
  // the decode kernel (blocks of 16, 32 and 64), blocks of 8 (the general
  // form), a few rows and a prompt's panels; int4's signed codes shifted onto 0..15.
  for (const B& b : {B{1, 160, 37, 32, false, "none"}, B{1, 128, 41, 16, false, "relu"}, B{3, 64, 20, 16, false, "none"},
                     B{37, 96, 70, 32, true, "gelu"}, B{1, 96, 13, 8, true, "none"}, B{4, 64, 9, 16, false, "silu"},
                     B{1, 320, 16, 64, false, "none"}}) {
    Blob w = block_weight(b.n, b.k, b.block, b.is_signed, rng);
    out.push_back({fmt::format("dense [{},{}] x {} blockwise {}{} two a byte {}", b.m, b.k, b.n, b.block, b.is_signed ? " signed" : "", b.act),
                   layer_of("dense", {{"act", std::string(b.act)}}, {{"weight", *core::packed_codes4(w)}, {"bias", random_blob({b.n}, rng)}}),
                   {random_blob({b.m, b.k}, rng)}});
  }
  // [3200, 256]: rows beyond every row blocking (Eigen's, the pool's tasks).
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 10}, {3, 37, 19}, {8, 128, 96}, {3200, 256, 40}})
    out.push_back({fmt::format("dense [{},{}] x {}", m, k, n),
                   layer_of("dense", {{"act", std::string(n == 19 ? "relu" : n == 96 ? "silu" : "none")}},
                            {{"weight", random_blob({n, k}, rng, -0.2f, 0.2f)}, {"bias", random_blob({n}, rng)}}),
                   {random_blob({m, k}, rng)}});
  // A transformer's [batch, tokens, hidden]: rows over the leading dims.
  out.push_back({"dense [2,5,24] x 12 relu",
                 layer_of("dense", {{"act", std::string("relu")}},
                          {{"weight", random_blob({12, 24}, rng, -0.2f, 0.2f)}, {"bias", random_blob({12}, rng)}}),
                 {random_blob({2, 5, 24}, rng)}});
  out.push_back({"dense [4,48] x 24 hardswish * 0.5 + 0.25",
                 layer_of("dense", {{"act", std::string("hardswish")}, {"act_scale", 0.5}, {"act_shift", 0.25}},
                          {{"weight", random_blob({24, 48}, rng, -0.2f, 0.2f)}, {"bias", random_blob({24}, rng)}}),
                 {random_blob({4, 48}, rng)}});
  // A transformer's feed-forward: gelu fused (fuse_activations), erf and tanh forms; a decode step's 2 rows.
  out.push_back({"dense [2,64] x 300 gelu",
                 layer_of("dense", {{"act", std::string("gelu")}},
                          {{"weight", random_blob({300, 64}, rng, -0.2f, 0.2f)}, {"bias", random_blob({300}, rng)}}),
                 {random_blob({2, 64}, rng, -3.f, 3.f)}});
  out.push_back({"dense [1,33,64] x 70 gelu tanh * 0.5 + 0.1",
                 layer_of("dense", {{"act", std::string("gelu")}, {"act_approximate", std::string("tanh")},
                                    {"act_scale", 0.5}, {"act_shift", 0.1}},
                          {{"weight", random_blob({70, 64}, rng, -0.2f, 0.2f)}, {"bias", random_blob({70}, rng)}}),
                 {random_blob({1, 33, 64}, rng, -3.f, 3.f)}});
  return out;
}

std::vector<Case> matmul_cases(std::mt19937& rng) {
  return {{"matmul [2,5,7] x [7,3]", layer_of("matmul", {}, {}, 2), {random_blob({2, 5, 7}, rng), random_blob({7, 3}, rng)}},
          {"matmul [2,3,4,8] x [2,3,8,5]", layer_of("matmul", {}, {}, 2),
           {random_blob({2, 3, 4, 8}, rng), random_blob({2, 3, 8, 5}, rng)}},
          {"matmul [1,3000,256] x [256,24]", layer_of("matmul", {}, {}, 2),
           {random_blob({1, 3000, 256}, rng), random_blob({256, 24}, rng)}}};
}

std::vector<Case> pool2_cases(std::mt19937& rng) {
  std::vector<Case> out;
  auto add = [&](std::string what, std::map<std::string, Attr> p, Shape s) {
    out.push_back({std::move(what), layer_of("pool2", std::move(p), {}), {random_blob(s, rng)}});
  };
  add("max 3x3 s2 p1", {{"mode", std::string("max")}, {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}},
      {1, 24, 13, 13});
  add("avg 2x2 s2", {{"mode", std::string("avg")}, {"kernel", Ints{2, 2}}, {"strides", Ints{2, 2}}}, {1, 16, 8, 10});
  add("avg 3x3 s1 p1 ceil", {{"mode", std::string("avg")}, {"kernel", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}, {"ceil_mode", int64_t{1}}},
      {1, 20, 7, 7});
  add("avg 3x3 dilated 2 p2 count_include_pad", {{"mode", std::string("avg")}, {"kernel", Ints{3, 3}}, {"dilations", Ints{2, 2}},
                                               {"pads", Ints{2, 2, 2, 2}}, {"count_include_pad", int64_t{1}}},
      {1, 16, 9, 9});
  add("avg 2x3 dilated 2x1", {{"mode", std::string("avg")}, {"kernel", Ints{2, 3}}, {"dilations", Ints{2, 1}}}, {1, 8, 9, 10});
  add("global avg", {{"mode", std::string("avg")}, {"global", int64_t{1}}}, {2, 40, 7, 7});
  add("global max", {{"mode", std::string("max")}, {"global", int64_t{1}}}, {1, 17, 5, 6});
  return out;
}

std::vector<Case> unary_cases(const std::string& type, std::mt19937& rng) {
  std::vector<Case> out;
  std::vector<std::map<std::string, Attr>> params{{}};
  if (type == "clip") params = {{{"min", 0.0}, {"max", 6.0}}, {{"min", -0.5}, {"max", 0.5}}};
  if (type == "gelu") params = {{{"approximate", std::string("none")}}, {{"approximate", std::string("tanh")}}};
  if (type == "hardsigmoid") params = {{}, {{"alpha", 0.1}, {"beta", 0.3}}};
  if (type == "leaky_relu") params = {{}, {{"alpha", 0.3}}};
  if (type == "pow") params = {{{"exponent", 0.5}}, {{"exponent", 3.0}}};
  // Positive inputs where the function needs them (NaN is compared as a failure).
  const bool positive = type == "sqrt" || type == "log" || type == "reciprocal" || type == "pow";
  for (const auto& p : params)
    for (Shape s : {Shape{1, 16, 7, 7}, Shape{2, 19, 5, 3}, Shape{3, 40}})
      out.push_back({fmt::format("{} {}", type, s.to_string()), layer_of(type, p, {}),
                     {positive ? random_blob(s, rng, 0.25f, 4.f) : random_blob(s, rng, -4.f, 4.f)}});
  if (type == "pow")
    out.push_back({"pow x ** y", layer_of("pow", {}, {}, 2),
                   {random_blob({1, 8, 3, 3}, rng, 0.25f, 4.f), random_blob({1, 8, 1, 1}, rng, -2.f, 2.f)}});
  return out;
}

std::vector<Case> binary_cases(const std::string& type, std::mt19937& rng) {
  std::vector<Case> out;
  const std::pair<Shape, Shape> shapes[] = {{{1, 16, 6, 6}, {1, 16, 6, 6}}, {{1, 24, 5, 7}, {1, 24, 1, 1}},
                                            {{2, 8, 4, 4}, {1, 8, 4, 4}}, {{3, 10}, {10}}};
  for (const auto& [a, b] : shapes) {
    Blob y = random_blob(b, rng, 0.5f, 2.0f);  // away from zero: div
    out.push_back({fmt::format("{} {} {}", type, a.to_string(), b.to_string()), layer_of(type, {}, {}, 2),
                   {random_blob(a, rng), y}});
  }
  // A constant divisor without zeros: no NaN made here (XNNPACK's div runs only so).
  if (type == "div")
    out.push_back({"div by a constant [1,16,6,6] [1,16,1,1]", layer_of(type, {}, {}, 2),
                   {random_blob({1, 16, 6, 6}, rng), random_blob({1, 16, 1, 1}, rng, 0.5f, 2.0f)}, true});
  if (type == "add") {
    out.push_back({"add relu", layer_of("add", {{"act", std::string("relu")}}, {}, 2),
                   {random_blob({1, 16, 6, 6}, rng), random_blob({1, 16, 6, 6}, rng)}});
    // TensorFlow Lite's int8 add in float (requantize = tflite): inputs on their int8 grids.
    auto on_grid = [&](float scale) {
      Blob b = random_blob({1, 16, 6, 6}, rng, -128 * scale, 127 * scale);
      float* x = b.data_as<float>();
      for (int64_t i = 0; i < b.numel(); ++i) x[i] = std::nearbyint(x[i] / scale) * scale;
      return b;
    };
    out.push_back({"add tflite int8", layer_of("add", {{"requantize", std::string("tflite")},
                                                       {"input_scales", std::vector<double>{0.05, 0.04}},
                                                       {"output_scale", 0.07},
                                                       {"output_zero_point", int64_t{-3}},
                                                       {"act", std::string("relu")}},
                                               {}, 2),
                   {on_grid(0.05f), on_grid(0.04f)}});
  }
  return out;
}

/// lstm (gates 4), gru (3) and rnn (1): directions, layouts, initial states, biases, peepholes, clip.
std::vector<Case> rnn_cases(const std::string& type, std::mt19937& rng) {
  const int64_t G = type == "lstm" ? 4 : type == "rnn" ? 1 : 3;
  struct C {
    int64_t seq, batch, input, hidden;
    const char* direction;
    int64_t layout;
    bool bias, states, extra;  // extra: lstm peepholes + clip, gru linear_before_reset
  };
  std::vector<Case> out;
  // The last two: sequence x batch beyond every row blocking of the routines
  // (Eigen's GEMM blocks a few hundred rows at this input size), as real readers run.
  for (const C& s : {C{5, 1, 8, 16, "forward", 0, true, false, false}, C{4, 2, 6, 20, "reverse", 0, true, true, true},
                     C{3, 3, 5, 7, "bidirectional", 1, false, true, false}, C{6, 1, 32, 40, "bidirectional", 0, true, false, true},
                     C{100, 32, 256, 24, "forward", 1, true, true, false}, C{3000, 1, 256, 16, "bidirectional", 0, true, false, false}}) {
    const int64_t D = std::string(s.direction) == "bidirectional" ? 2 : 1;
    std::map<std::string, Attr> p{{"hidden_size", s.hidden}, {"direction", std::string(s.direction)}, {"layout", s.layout}};
    std::map<std::string, Blob> w{{"W", random_blob({D, G * s.hidden, s.input}, rng, -0.4f, 0.4f)},
                                  {"R", random_blob({D, G * s.hidden, s.hidden}, rng, -0.4f, 0.4f)}};
    if (s.bias) w["B"] = random_blob({D, 2 * G * s.hidden}, rng, -0.3f, 0.3f);
    if (s.extra && G == 4) {
      w["P"] = random_blob({D, 3 * s.hidden}, rng, -0.3f, 0.3f);
      p["clip"] = 1.5;
    }
    if (s.extra && G == 3) p["linear_before_reset"] = int64_t{1};
    const Shape x = s.layout ? Shape{s.batch, s.seq, s.input} : Shape{s.seq, s.batch, s.input};
    const Shape state = s.layout ? Shape{s.batch, D, s.hidden} : Shape{D, s.batch, s.hidden};
    const int inputs = s.states ? (G == 4 ? 3 : 2) : 1;
    std::vector<Blob> in{random_blob(x, rng)};
    for (int k = 1; k < inputs; ++k) in.push_back(random_blob(state, rng, -0.5f, 0.5f));
    out.push_back({fmt::format("{} T{} B{} I{} H{} {} layout {}{}{}{}", type, s.seq, s.batch, s.input, s.hidden, s.direction,
                               s.layout, s.bias ? " bias" : "", s.states ? " initial states" : "", s.extra ? " extra" : ""),
                   layer_of(type, p, w, inputs, G == 4 ? 3 : 2), std::move(in)});
  }
  return out;
}

}  // namespace

std::vector<Case> cases_for(const std::string& type, std::mt19937& rng) {
  if (type == "lstm" || type == "gru" || type == "rnn") return rnn_cases(type, rng);
  if (type == "fake_quant") {
    std::vector<Case> out;
    for (auto [scale, zp, qmin, qmax] : {std::tuple<double, int64_t, int64_t, int64_t>{0.05, 100, 0, 255}, {0.1, -3, -128, 127}}) {
      out.push_back({fmt::format("fake_quant scale {} zero point {} [{}, {}]", scale, zp, qmin, qmax),
                     layer_of("fake_quant", {{"scale", scale}, {"zero_point", zp}, {"qmin", qmin}, {"qmax", qmax}}, {}),
                     {random_blob({1, 8, 5, 7}, rng, -8.0f, 8.0f)}});
    }
    return out;
  }
  if (type == "dynamic_quantize") {
    std::vector<Case> out;
    for (const Shape& shape : {Shape{2, 3, 7, 7}, Shape{1, 5000}})
      out.push_back({fmt::format("dynamic_quantize {}", shape.to_string()), layer_of("dynamic_quantize", {}, {}, 1, 3),
                     {random_blob(shape, rng, -3.0f, 5.0f)}});
    out.push_back({"dynamic_quantize, all positive", layer_of("dynamic_quantize", {}, {}, 1, 3), {random_blob({300}, rng, 1.0f, 2.0f)}});
    return out;
  }
  if (type == "dynamic_quant_dense") {
    // A generator of its own: the other types' cases keep their values.
    std::mt19937 own(106);
    std::mt19937& rng = own;
    // The weight's integers on a grid of one scale per output channel (quantize_dynamic's int8 B).
    auto on_grid = [&](int64_t n, int64_t k) {
      Blob q = Blob::allocate(Shape{n, k}, DType::qint8);
      std::uniform_int_distribution<int> v(-127, 127);
      for (int64_t i = 0; i < n * k; ++i) q.data_as<int8_t>()[i] = static_cast<int8_t>(v(rng));
      std::vector<float> scales(static_cast<std::size_t>(n));
      for (auto& s : scales) s = std::uniform_real_distribution<float>(0.002f, 0.03f)(rng);
      q.quant() = QuantParams{scales, {}, 0};
      return q;
    };
    std::vector<Case> out;
    out.push_back({"dynamic_quant_dense [2,7,37] -> 20, bias", layer_of("dynamic_quant_dense", {}, {{"weight", on_grid(20, 37)}, {"bias", random_blob({20}, rng)}}),
                   {random_blob({2, 7, 37}, rng, -2.0f, 3.0f)}});
    out.push_back({"dynamic_quant_dense [13,64] -> 70, all positive", layer_of("dynamic_quant_dense", {}, {{"weight", on_grid(70, 64)}}),
                   {random_blob({13, 64}, rng, 0.5f, 2.0f)}});
    out.push_back({"dynamic_quant_dense [9,40] -> 33, gelu",
                   layer_of("dynamic_quant_dense", {{"act", std::string("gelu")}}, {{"weight", on_grid(33, 40)}, {"bias", random_blob({33}, rng)}}),
                   {random_blob({9, 40}, rng, -2.0f, 2.0f)}});
    return out;
  }
  if (type == "group_norm") {
    std::vector<Case> out;
    for (auto [shape, groups] : {std::pair<Shape, int64_t>{{1, 8, 5, 7}, 2}, {{2, 6, 9, 9}, 6}, {{1, 32, 33}, 8}, {{1, 4, 70, 70}, 1}}) {
      const int64_t c = shape[1];
      out.push_back({fmt::format("group_norm {} groups {}", shape.to_string(), groups),
                     layer_of("group_norm", {{"groups", groups}, {"epsilon", 1e-5}},
                              {{"scale", random_blob({c}, rng)}, {"bias", random_blob({c}, rng)}}),
                     {random_blob(shape, rng, -2.0f, 3.0f)}});
    }
    return out;
  }
  if (type == "conv2") return conv2_cases(rng);
  if (type == "deconv2") return deconv2_cases(rng);
  if (type == "dense") return dense_cases(rng);
  if (type == "matmul") return matmul_cases(rng);
  if (type == "pool2") return pool2_cases(rng);
  if (type == "batchnorm") {
    std::vector<Case> out;
    for (int64_t c : {16, 19}) {
      std::map<std::string, Blob> w{{"scale", random_blob({c}, rng)}, {"bias", random_blob({c}, rng)},
                                    {"mean", random_blob({c}, rng)}, {"var", random_blob({c}, rng, 0.5f, 2.f)}};
      out.push_back({fmt::format("batchnorm c={}", c), layer_of("batchnorm", {{"epsilon", 1e-5}}, w),
                     {random_blob({1, c, 5, 6}, rng)}});
    }
    return out;
  }
  for (const char* t : {"relu", "clip", "hardswish", "hardsigmoid", "sigmoid", "tanh", "gelu", "identity", "abs", "neg",
                        "sqrt", "exp", "log", "erf", "reciprocal", "silu", "mish", "softplus", "leaky_relu", "pow"})
    if (type == t) return unary_cases(type, rng);
  if (type == "prelu")
    return {{"prelu per channel", layer_of("prelu", {}, {{"slope", random_blob({16, 1, 1}, rng)}}), {random_blob({1, 16, 5, 5}, rng)}},
            {"prelu scalar", layer_of("prelu", {}, {{"slope", random_blob({1}, rng)}}), {random_blob({2, 7}, rng)}},
            {"prelu [1,C,1,1] batch 2", layer_of("prelu", {}, {{"slope", random_blob({1, 12, 1, 1}, rng)}}), {random_blob({2, 12, 3, 9}, rng)}},
            {"prelu per row (not channels)", layer_of("prelu", {}, {{"slope", random_blob({5, 1}, rng)}}), {random_blob({1, 3, 5, 4}, rng)}}};
  if (type == "reduce") {
    std::vector<Case> out;
    for (const char* mode : {"mean", "sum", "max", "min", "l2"})
      for (const auto& [axes, keep] : {std::pair<Ints, int64_t>{{2, 3}, 1}, {{1}, 0}, {{0, 2}, 1}, {{-1}, 0}, {{}, 0}}) {
        std::map<std::string, Attr> p{{"mode", std::string(mode)}, {"keepdims", keep}};
        if (!axes.empty()) p["axes"] = axes;
        out.push_back({fmt::format("reduce {} axes [{}] keepdims {}", mode, fmt::join(axes, ","), keep), layer_of("reduce", p, {}),
                       {random_blob({2, 5, 4, 6}, rng)}});
      }
    return out;
  }
  for (const char* t : {"add", "sub", "mul", "div", "max", "min"})
    if (type == t) return binary_cases(type, rng);
  if (type == "compare" || type == "logical") {
    std::vector<Case> out;
    const std::vector<std::string> ops = type == "compare"
        ? std::vector<std::string>{"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}
        : std::vector<std::string>{"and", "or", "xor"};
    for (const auto& op : ops) {
      // Small integers (0..2): equal values and zeros occur.
      Blob a = random_blob({2, 8, 5}, rng, 0.f, 3.f), b = random_blob({8, 1}, rng, 0.f, 3.f);
      for (Blob* x : {&a, &b})
        for (int64_t i = 0; i < x->numel(); ++i) x->data_as<float>()[i] = std::floor(x->data_as<float>()[i]);
      out.push_back({fmt::format("{} {}", type, op), layer_of(type, {{"op", op}}, {}, 2), {a, b}});
    }
    // A transformer's mask logic: a [B,1,1,S] padding mask against a [1,1,S,1]
    // column (the causal compare), and a 4-D pair sharing no merged dims.
    auto integers = [&](Shape shape) {
      Blob x = random_blob(std::move(shape), rng, 0.f, 3.f);
      for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::floor(x.data_as<float>()[i]);
      return x;
    };
    const std::string op = type == "compare" ? "less_equal" : "and";
    out.push_back({fmt::format("{} {} mask [2,1,1,16] x [1,1,16,1]", type, op), layer_of(type, {{"op", op}}, {}, 2),
                   {integers({2, 1, 1, 16}), integers({1, 1, 16, 1})}});
    out.push_back({fmt::format("{} {} [2,3,4,5] x [2,1,4,1]", type, op), layer_of(type, {{"op", op}}, {}, 2),
                   {integers({2, 3, 4, 5}), integers({2, 1, 4, 1})}});
    return out;
  }
  if (type == "take") {
    Blob idx = Blob::allocate(Shape{3, 4}, DType::int64);
    for (int64_t i = 0; i < 12; ++i) idx.data_as<int64_t>()[i] = (i * 7) % 30;
    return {{"take", layer_of("take", {}, {{"indices", idx}}), {random_blob({5, 6}, rng)}}};
  }
  if (type == "gather" || type == "gather_elements" || type == "gather_nd") {
    // Whole-number indices, some negative (from the end).
    auto indices = [](const Shape& s, int64_t len) {
      Blob idx = Blob::allocate(s);
      for (int64_t i = 0; i < s.numel(); ++i) idx.data_as<float>()[i] = static_cast<float>((i * 7) % (2 * len) - len);
      return idx;
    };
    if (type == "gather") {
      // The table as a weight: float32, and int8/uint8 quantised per tensor
      // (ONNX Runtime's quantize_dynamic embeddings, rows dequantised as read).
      auto bytes = [&](DType d, int32_t zp) {
        Blob t = Blob::allocate(Shape{30, 37}, d);
        for (int64_t i = 0; i < t.numel(); ++i) t.data_as<uint8_t>()[i] = static_cast<uint8_t>((i * 89 + 7) % 256);
        t.quant() = QuantParams{{0.031f}, {zp}, -1};
        return t;
      };
      return {{"gather rows (embedding)", layer_of("gather", {{"axis", int64_t{0}}}, {}, 2), {random_blob({30, 16}, rng), indices({1, 9}, 30)}},
              {"gather axis 1", layer_of("gather", {{"axis", int64_t{1}}}, {}, 2), {random_blob({2, 5, 3}, rng), indices({4}, 5)}},
              {"gather rows of a weight table", layer_of("gather", {{"axis", int64_t{0}}}, {{"table", random_blob({30, 16}, rng)}}),
               {indices({2, 7}, 30)}},
              {"gather rows of an int8 table", layer_of("gather", {{"axis", int64_t{0}}}, {{"table", bytes(DType::qint8, -5)}}),
               {indices({3, 11}, 30)}},
              {"gather rows of a uint8 table", layer_of("gather", {{"axis", int64_t{0}}}, {{"table", bytes(DType::quint8, 128)}}),
               {indices({1, 13}, 30)}}};
    }
    if (type == "gather_nd")
      return {{"gather_nd pairs", layer_of("gather_nd", {}, {}, 2), {random_blob({4, 5, 6}, rng), indices({3, 2}, 4)}},
              {"gather_nd batch_dims 1", layer_of("gather_nd", {{"batch_dims", int64_t{1}}}, {}, 2),
               {random_blob({2, 5, 6}, rng), indices({2, 3, 1}, 5)}}};
    return {{"gather_elements axis 1", layer_of("gather_elements", {{"axis", int64_t{1}}}, {}, 2),
             {random_blob({3, 6}, rng), indices({3, 4}, 6)}}};
  }
  if (type == "divmod" || type == "bitwise") {
    std::vector<Case> out;
    const std::vector<std::string> ops = type == "divmod" ? std::vector<std::string>{"quotient", "mod", "fmod"}
                                                          : std::vector<std::string>{"and", "or", "xor", "shift_left", "shift_right"};
    for (const auto& op : ops) {
      // Integers: -50..50 divided by 1..9 (no zero), shifted by 0..9.
      Blob a = random_blob({2, 8, 5}, rng, -50.f, 50.f), b = random_blob({8, 1}, rng, 1.f, 10.f);
      for (Blob* x : {&a, &b})
        for (int64_t i = 0; i < x->numel(); ++i) x->data_as<float>()[i] = std::floor(x->data_as<float>()[i]);
      std::map<std::string, Attr> p{{"op", op}};
      if (type == "bitwise") p["bits"] = int64_t{16}, p["signed"] = int64_t{1};
      out.push_back({fmt::format("{} {}", type, op), layer_of(type, p, {}, 2), {a, b}});
    }
    return out;
  }
  if (type == "cumulative")
    return {{"cumulative sum axis 1", layer_of("cumulative", {{"op", std::string("sum")}, {"axis", int64_t{1}}}, {}), {random_blob({3, 9, 4}, rng)}},
            {"cumulative prod reverse exclusive", layer_of("cumulative", {{"op", std::string("prod")}, {"axis", int64_t{-1}},
                                                                          {"exclusive", int64_t{1}}, {"reverse", int64_t{1}}}, {}),
             {random_blob({3, 9, 4}, rng)}}};
  if (type == "grid_sample") {
    std::vector<Case> out;
    for (const char* mode : {"linear", "nearest", "cubic"})
      for (const char* pad : {"zeros", "border", "reflection"})
        out.push_back({fmt::format("grid_sample {} {}", mode, pad),
                       layer_of("grid_sample", {{"mode", std::string(mode)}, {"padding_mode", std::string(pad)}}, {}, 2),
                       {random_blob({2, 3, 6, 7}, rng), random_blob({2, 5, 4, 2}, rng, -1.3f, 1.3f)}});
    return out;
  }
  if (type == "non_max_suppression") {
    std::map<std::string, Attr> p{{"max_output_boxes_per_class", int64_t{5}}, {"iou_threshold", 0.4}, {"score_threshold", 0.3}};
    return {{"non_max_suppression corners", layer_of(type, p, {}, 2), {random_blob({2, 20, 4}, rng, 0.f, 10.f), random_blob({2, 3, 20}, rng, 0.f, 1.f)}}};
  }
  if (type == "non_zero") {
    Blob x = random_blob({3, 7, 5}, rng, -1.f, 2.f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::floor(x.data_as<float>()[i]);
    return {{"non_zero of a third", layer_of(type, {}, {}), {x}}};
  }
  if (type == "roi_align") {
    Blob batch = random_blob({4}, rng, 0.f, 2.f);
    for (int64_t i = 0; i < batch.numel(); ++i) batch.data_as<float>()[i] = std::floor(batch.data_as<float>()[i]);
    std::vector<Case> out;
    for (const char* mode : {"avg", "max"})
      out.push_back({fmt::format("roi_align {}", mode),
                     layer_of(type, {{"mode", std::string(mode)}, {"output_height", int64_t{3}}, {"output_width", int64_t{2}},
                                     {"spatial_scale", 0.5}}, {}, 3),
                     {random_blob({2, 3, 10, 12}, rng), random_blob({4, 4}, rng, 0.f, 20.f), batch}});
    return out;
  }
  if (type == "slice") {
    using Ints = std::vector<int64_t>;
    return {{"slice steps and negatives", layer_of(type, {{"starts", Ints{1, -1}}, {"ends", Ints{100, -9}},
                                                         {"axes", Ints{0, 2}}, {"steps", Ints{2, -3}}}, {}),
             {random_blob({7, 3, 8}, rng)}},
            // Steps of 1 (cpu/vec's memcpy runs): rotary's halves, a middle block, a whole copy.
            {"slice the last half", layer_of(type, {{"starts", Ints{5}}, {"ends", Ints{INT64_MAX}}, {"axes", Ints{3}}, {"steps", Ints{1}}}, {}),
             {random_blob({1, 3, 7, 10}, rng)}},
            {"slice a middle block", layer_of(type, {{"starts", Ints{1, -4}}, {"ends", Ints{3, -1}}, {"axes", Ints{1, 2}}}, {}),
             {random_blob({2, 4, 9, 5}, rng)}},
            {"slice all of it", layer_of(type, {{"starts", Ints{0}}, {"ends", Ints{50}}, {"axes", Ints{0}}}, {}),
             {random_blob({3, 4}, rng)}},
            // Positive steps (cpu/vec's runs of the whole inner dims, or one element at a time).
            {"slice every second row of an odd count", layer_of(type, {{"starts", Ints{0}}, {"ends", Ints{INT64_MAX}}, {"axes", Ints{1}}, {"steps", Ints{2}}}, {}),
             {random_blob({2, 7, 6}, rng)}},
            {"slice with a step on the last dim", layer_of(type, {{"starts", Ints{1, 1}}, {"ends", Ints{5, 9}}, {"axes", Ints{1, 2}}, {"steps", Ints{3, 2}}}, {}),
             {random_blob({2, 5, 9}, rng)}}};
  }
  if (type == "rotary")  // cos and sin broadcast over heads (and batch), a head of 6
    return {{"rotary [2,3,5,8], tables [1,1,5,8]", layer_of(type, {}, {}, 3),
             {random_blob({2, 3, 5, 8}, rng), random_blob({1, 1, 5, 8}, rng), random_blob({1, 1, 5, 8}, rng)}},
            {"rotary [2,4,6], tables [2,1,6] and [4,6]", layer_of(type, {}, {}, 3),
             {random_blob({2, 4, 6}, rng), random_blob({2, 1, 6}, rng), random_blob({4, 6}, rng)}}};
  if (type == "scatter_elements") {
    std::vector<Case> out;
    for (const char* reduction : {"none", "add", "max"}) {
      Blob idx = random_blob({3, 4}, rng, -5.f, 5.f);
      for (int64_t i = 0; i < idx.numel(); ++i) idx.data_as<float>()[i] = std::floor(idx.data_as<float>()[i]);
      out.push_back({fmt::format("scatter_elements {}", reduction),
                     layer_of(type, {{"axis", int64_t{1}}, {"reduction", std::string(reduction)}}, {}, 3),
                     {random_blob({3, 5}, rng), idx, random_blob({3, 4}, rng)}});
    }
    return out;
  }
  if (type == "scatter_nd") {  // pairs into [4,5,6] (slices of 6), some negative and repeated
    std::vector<Case> out;
    for (const char* reduction : {"none", "add", "min"}) {
      Blob idx = Blob::allocate(Shape{3, 2});
      const float pairs[] = {1, -2, 3, 0, -3, 3};
      std::copy(pairs, pairs + 6, idx.data_as<float>());
      out.push_back({fmt::format("scatter_nd {}", reduction), layer_of(type, {{"reduction", std::string(reduction)}}, {}, 3),
                     {random_blob({4, 5, 6}, rng), idx, random_blob({3, 6}, rng)}});
    }
    return out;
  }
  if (type == "unique") {
    Blob x = random_blob({4, 6}, rng, 0.f, 3.f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::floor(x.data_as<float>()[i]);
    return {{"unique sorted", layer_of(type, {}, {}, 1, 4), {x}},
            {"unique slices unsorted", layer_of(type, {{"axis", int64_t{1}}, {"sorted", int64_t{0}}}, {}, 1, 4), {x}}};
  }
  if (type == "dft")
    return {{"dft complex, padded", layer_of(type, {{"axis", int64_t{1}}, {"length", int64_t{9}}}, {}), {random_blob({2, 6, 3, 2}, rng)}},
            {"dft inverse one-sided", layer_of(type, {{"axis", int64_t{1}}, {"length", int64_t{8}}, {"inverse", int64_t{1}}, {"onesided", int64_t{1}}}, {}),
             {random_blob({2, 5, 2}, rng)}}};
  if (type == "col2im")
    return {{"col2im strided, padded, dilated", layer_of(type, {{"image_shape", std::vector<int64_t>{7, 6}}, {"block_shape", std::vector<int64_t>{2, 3}},
                                                              {"strides", std::vector<int64_t>{2, 1}}, {"pads", std::vector<int64_t>{1, 0, 0, 1}},
                                                              {"dilations", std::vector<int64_t>{2, 1}}}, {}),
             {random_blob({2, 18, 15}, rng)}}};
  if (type == "deform_conv")
    return {{"deform_conv 3x3 padded, 2 groups, 2 offset groups, masked",
             layer_of(type, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"group", int64_t{2}}, {"offset_group", int64_t{2}}},
                      {{"weight", random_blob({6, 2, 3, 3}, rng)}, {"bias", random_blob({6}, rng)}}, 3),
             {random_blob({1, 4, 5, 6}, rng), random_blob({1, 36, 5, 6}, rng, -2.f, 2.f), random_blob({1, 18, 5, 6}, rng, 0.f, 1.f)}}};
  if (type == "linear_attention") {
    // [B=2, T=3]: 4 query heads on 2 key/value heads, dk 3, dv 2.
    auto qkv = [&] {
      return std::vector<Blob>{random_blob({2, 3, 12}, rng), random_blob({2, 3, 6}, rng), random_blob({2, 3, 4}, rng)};
    };
    std::vector<Blob> gd = qkv();
    gd.push_back(random_blob({2, 2, 3, 2}, rng));          // past_state
    gd.push_back(random_blob({2, 3, 6}, rng, -1.f, 0.f));  // decay per key (log space)
    gd.push_back(random_blob({2, 3, 2}, rng, 0.f, 1.f));   // beta per head
    std::vector<Blob> gated = qkv();
    gated.push_back(random_blob({2, 3, 2}, rng, -1.f, 0.f));  // decay per head
    return {{"linear_attention gated_delta, past, grouped heads",
             layer_of(type, {{"q_num_heads", int64_t{4}}, {"kv_num_heads", int64_t{2}}, {"update_rule", std::string("gated_delta")},
                             {"has_past", int64_t{1}}}, {}, 6, 2),
             gd},
            {"linear_attention gated, no past, scale 0.5",
             layer_of(type, {{"q_num_heads", int64_t{4}}, {"kv_num_heads", int64_t{2}}, {"update_rule", std::string("gated")},
                             {"scale", 0.5}}, {}, 4, 2),
             gated},
            {"linear_attention linear", layer_of(type, {{"q_num_heads", int64_t{4}}, {"kv_num_heads", int64_t{2}}, {"update_rule", std::string("linear")}}, {}, 3, 2),
             qkv()}};
  }
  if (type == "max_pool_indices") {
    Blob x = random_blob({2, 3, 7, 6}, rng, 0.f, 4.f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::floor(x.data_as<float>()[i]);  // ties
    return {{"max_pool_indices 3x3 stride 2, padded", layer_of(type, {{"kernel", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                                                                       {"pads", std::vector<int64_t>{1, 1, 1, 1}}}, {}), {x}},
            {"max_pool_indices column-major, dilated", layer_of(type, {{"kernel", std::vector<int64_t>{2, 2}}, {"dilations", std::vector<int64_t>{2, 1}},
                                                                        {"storage_order", int64_t{1}}}, {}), {x}}};
  }
  if (type == "loop") {
    // body: x' = x + w (w read from outside), each iteration's x' * x' stacked.
    core::Graph body;
    body.inputs = {{"i", Shape{}}, {"cond", Shape{}}, {"x", Shape{2, 3}}, {"w", Shape{2, 3}}};
    body.layers = {layer_of("identity", {}, {}), layer_of("add", {}, {}, 2), layer_of("mul", {}, {}, 2)};
    body.layers[0].name = "c", body.layers[0].inputs = {"cond"}, body.layers[0].outputs = {"cond_out"};
    body.layers[1].name = "step", body.layers[1].inputs = {"x", "w"}, body.layers[1].outputs = {"x_out"};
    body.layers[2].name = "square", body.layers[2].inputs = {"x_out", "x_out"}, body.layers[2].outputs = {"scan"};
    body.outputs = {"cond_out", "x_out", "scan"};
    const auto bytes = core::serialize_dnn(body);
    Blob b = Blob::allocate(Shape{static_cast<int64_t>(bytes.size())}, DType::uint8);
    std::copy(bytes.begin(), bytes.end(), b.data_as<unsigned char>());
    return {{"loop of 3 iterations, a carried value and a scan output",
             layer_of(type, {{"carried", int64_t{1}}, {"scan_outputs", int64_t{1}}, {"trip_count", int64_t{3}}}, {{"body", b}}, 3, 2),
             {core::float_blob(Shape{}, {1.0f}), random_blob({2, 3}, rng), random_blob({2, 3}, rng)}}};
  }
  if (type == "choose")
    return {{"choose the second", layer_of(type, {}, {}, 3), {core::float_blob(Shape{1}, {0.0f}), random_blob({2, 3}, rng), random_blob({4, 2}, rng)}}};
  if (type == "top_k")
    return {{"top_k 3 of 9", layer_of("top_k", {{"k", int64_t{3}}, {"axis", int64_t{1}}}, {}, 1, 2), {random_blob({4, 9, 5}, rng)}},
            {"top_k smallest", layer_of("top_k", {{"k", int64_t{2}}, {"largest", int64_t{0}}}, {}, 1, 2), {random_blob({6, 7}, rng)}}};
  if (type == "trig") {
    std::vector<Case> out;
    for (const char* op : {"sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"}) {
      const std::string o(op);
      const float lo = o == "acosh" ? 1.f : -0.99f, hi = o == "acosh" ? 5.f : 0.99f;
      out.push_back({"trig " + o, layer_of("trig", {{"op", o}}, {}), {random_blob({3, 17}, rng, lo, hi)}});
    }
    return out;
  }
  if (type == "where") {
    Blob c = random_blob({4, 1, 6}, rng, -1.f, 1.f);
    for (int64_t i = 0; i < c.numel(); ++i) c.data_as<float>()[i] = c.data_as<float>()[i] > 0 ? 1.f : 0.f;
    // The attention mask's: where(mask [B,1,S,S], 0, -inf-like [1]) and a scalar condition.
    Blob m = random_blob({2, 1, 8, 8}, rng, -1.f, 1.f);
    for (int64_t i = 0; i < m.numel(); ++i) m.data_as<float>()[i] = m.data_as<float>()[i] > 0 ? 1.f : 0.f;
    Blob one = Blob::allocate(Shape{1});
    one.data_as<float>()[0] = 1.f;
    return {{"where broadcast", layer_of("where", {}, {}, 3), {c, random_blob({3, 6}, rng), random_blob({4, 3, 1}, rng)}},
            {"where mask [2,1,8,8], [1], [1]", layer_of("where", {}, {}, 3),
             {m, random_blob({1}, rng), random_blob({1}, rng, -1e4f, -1e3f)}},
            {"where scalar condition", layer_of("where", {}, {}, 3), {one, random_blob({2, 5}, rng), random_blob({2, 5}, rng)}}};
  }
  if (type == "round") {
    std::vector<Case> out;
    for (const char* mode : {"nearest_even", "floor", "ceil", "trunc"}) {
      Blob x = random_blob({3, 41}, rng, -5.f, 5.f);
      for (int64_t i = 0; i < 8; ++i) x.data_as<float>()[i] = 0.5f * static_cast<float>(i - 4);  // ties
      out.push_back({fmt::format("round {}", mode), layer_of("round", {{"mode", std::string(mode)}}, {}), {x}});
    }
    return out;
  }
  if (type == "einsum") {
    return {{"einsum abc->cb", layer_of("einsum", {{"equation", std::string("abc->cb")}}, {}), {random_blob({2, 3, 5}, rng)}},
            {"einsum diagonal", layer_of("einsum", {{"equation", std::string("aii->ai")}}, {}), {random_blob({2, 4, 4}, rng)}},
            {"einsum two operands, broadcast", layer_of("einsum", {{"equation", std::string("abk,bk->ab")}}, {}, 2),
             {random_blob({3, 1, 6}, rng), random_blob({4, 6}, rng)}}};
  }
  if (type == "cast") {
    std::vector<Case> out;
    for (const char* to : {"float8e4m3fn", "float8e5m2fnuz", "float4e2m1", "int4", "float8e8m0"})
      for (int64_t saturate : {1, 0}) {
        Blob x = random_blob({3, 41}, rng, -600.f, 600.f);
        for (int64_t i = 0; i < 8; ++i) x.data_as<float>()[i] = 0.25f * static_cast<float>(i - 4);  // ties
        out.push_back({fmt::format("cast {} saturate {}", to, saturate),
                       layer_of("cast", {{"to", std::string(to)}, {"saturate", saturate}}, {}), {x}});
      }
    return out;
  }
  if (type == "arg_reduce") {
    std::vector<Case> out;
    for (const char* mode : {"max", "min"})
      for (int64_t axis : {0, 1, -1})
        for (int64_t last : {0, 1}) {
          Blob x = random_blob({3, 7, 5}, rng, 0.f, 3.f);  // ties: floors of 0..3
          for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::floor(x.data_as<float>()[i]);
          out.push_back({fmt::format("arg_reduce {} axis {} last {}", mode, axis, last),
                         layer_of("arg_reduce", {{"mode", std::string(mode)}, {"axis", axis}, {"select_last_index", last},
                                                 {"keepdims", int64_t{axis == 1}}}, {}),
                         {x}});
        }
    return out;
  }
  if (type == "softmax")
    return {{"softmax last", layer_of("softmax", {{"axis", int64_t{-1}}}, {}), {random_blob({2, 12, 37}, rng, -5.f, 5.f)}},
            {"softmax channels", layer_of("softmax", {{"axis", int64_t{1}}}, {}), {random_blob({1, 10, 3, 3}, rng, -5.f, 5.f)}},
            // YOLOv8's DFL: 16 bins along a middle axis, many positions after it (a lane tail too).
            {"softmax middle axis", layer_of("softmax", {{"axis", int64_t{1}}}, {}),
             {random_blob({2, 16, 4, 83}, rng, -8.f, 8.f)}},
            {"softmax first axis", layer_of("softmax", {{"axis", int64_t{0}}}, {}), {random_blob({5, 3, 7}, rng, -5.f, 5.f)}}};
  if (type == "attention") {
    std::vector<Case> out;
    const float ninf = -std::numeric_limits<float>::infinity();
    // Canonical [B,H,S,D] inputs, no mask, the default scale.
    out.push_back({"attention bhsd", layer_of("attention", {}, {}, 3),
                   {random_blob({2, 3, 17, 16}, rng), random_blob({2, 3, 29, 16}, rng), random_blob({2, 3, 29, 8}, rng)}});
    // As the exporters write BERT: [B,S,H,D] read through perms, out [B,S,H,Dv], a padding mask
    // [B,1,1,Sk] (-inf and a large negative), the NaN guard.
    {
      Blob mask = random_blob({1, 1, 1, 40}, rng, -1.f, 1.f);
      for (int j = 30; j < 40; ++j) mask.data_as<float>()[j] = j % 2 ? ninf : -1e9f;
      out.push_back({"attention bshd, padding mask",
                     layer_of("attention", {{"q_perm", Ints{0, 2, 1, 3}}, {"k_perm", Ints{0, 2, 1, 3}}, {"v_perm", Ints{0, 2, 1, 3}},
                                            {"out_perm", Ints{0, 2, 1, 3}}, {"scale", 0.125}, {"masked_rows", std::string("zero")}},
                              {}, 4),
                     {random_blob({1, 33, 4, 16}, rng), random_blob({1, 40, 4, 16}, rng), random_blob({1, 40, 4, 20}, rng), mask}});
    }
    // Kᵀ stored [B,1,D,Sk] (one key/value head for all query heads), causal, a 2-D mask.
    out.push_back({"attention k transposed, causal, shared heads",
                   layer_of("attention", {{"k_perm", Ints{0, 1, 3, 2}}, {"causal", int64_t{1}}}, {}, 4),
                   {random_blob({1, 4, 9, 32}, rng), random_blob({1, 1, 32, 12}, rng), random_blob({1, 1, 12, 32}, rng),
                    random_blob({9, 12}, rng)}});
    // A row of every key masked (0 under masked_rows = zero); one query, many keys (a decode step).
    {
      Blob mask = random_blob({1, 1, 5, 7}, rng);
      for (int j = 0; j < 7; ++j) mask.data_as<float>()[2 * 7 + j] = ninf;
      out.push_back({"attention masked row", layer_of("attention", {{"masked_rows", std::string("zero")}}, {}, 4),
                     {random_blob({2, 2, 5, 8}, rng), random_blob({2, 2, 7, 8}, rng), random_blob({2, 2, 7, 8}, rng), mask}});
    }
    out.push_back({"attention decode step", layer_of("attention", {{"scale", 0.3}}, {}, 3),
                   {random_blob({1, 12, 1, 64}, rng), random_blob({1, 12, 130, 64}, rng), random_blob({1, 12, 130, 64}, rng)}});
    // Causal with fewer keys than queries: the first rows see no key (0 with masked_rows = zero).
    out.push_back({"attention causal, rows without keys",
                   layer_of("attention", {{"causal", int64_t{1}}, {"masked_rows", std::string("zero")}}, {}, 3),
                   {random_blob({1, 2, 6, 8}, rng), random_blob({1, 2, 4, 8}, rng), random_blob({1, 2, 4, 8}, rng)}});
    // Many key blocks (cpu/flash_attention's online softmax: a row's max rises block by block), a
    // causal triangle over them, a full mask with -inf spans; an encoder's square case.
    {
      Blob mask = random_blob({70, 600}, rng, -2.f, 2.f);
      for (int i = 0; i < 70; ++i)
        for (int j = 100; j < 400; ++j)
          if (i % 3 == 0) mask.data_as<float>()[i * 600 + j] = ninf;
      out.push_back({"attention long, causal, masked spans", layer_of("attention", {{"causal", int64_t{1}}, {"scale", 0.9}}, {}, 4),
                     {random_blob({1, 2, 70, 16}, rng, -2.f, 2.f), random_blob({1, 2, 600, 16}, rng, -2.f, 2.f),
                      random_blob({1, 2, 600, 16}, rng), mask}});
    }
    out.push_back({"attention square 300", layer_of("attention", {}, {}, 3),
                   {random_blob({1, 3, 300, 24}, rng, -3.f, 3.f), random_blob({1, 3, 300, 24}, rng, -3.f, 3.f),
                    random_blob({1, 3, 300, 24}, rng)}});
    // Features past one 32-deep tile step and values past one 32-wide column pair, neither a
    // multiple of 32; a strip's tail of queries, keys past a 32-key block (cpu:bfloat16/tile_attention).
    out.push_back({"attention wide heads", layer_of("attention", {{"scale", 0.1}}, {}, 3),
                   {random_blob({1, 2, 45, 80}, rng), random_blob({1, 2, 70, 80}, rng), random_blob({1, 2, 70, 72}, rng)}});
    // Grouped-query heads (LLaMA, Mistral): 6 query heads over 2 key/value heads, read through
    // BERT's perms, causal; and a decode step over 4 of 12.
    out.push_back({"attention grouped heads, bshd, causal",
                   layer_of("attention", {{"q_perm", Ints{0, 2, 1, 3}}, {"k_perm", Ints{0, 2, 1, 3}}, {"v_perm", Ints{0, 2, 1, 3}},
                                          {"out_perm", Ints{0, 2, 1, 3}}, {"causal", int64_t{1}}},
                            {}, 3),
                   {random_blob({1, 21, 6, 16}, rng), random_blob({1, 21, 2, 16}, rng), random_blob({1, 21, 2, 16}, rng)}});
    out.push_back({"attention grouped heads, decode step", layer_of("attention", {}, {}, 3),
                   {random_blob({1, 12, 1, 32}, rng), random_blob({1, 4, 90, 32}, rng), random_blob({1, 4, 90, 32}, rng)}});
    // ONNX Attention's triangle without a cache: aligned to the first key, more keys than queries.
    out.push_back({"attention causal from the start", layer_of("attention", {{"causal", int64_t{1}}, {"causal_align", std::string("start")}}, {}, 3),
                   {random_blob({1, 2, 4, 8}, rng), random_blob({1, 2, 6, 8}, rng), random_blob({1, 2, 6, 8}, rng)}});
    return out;
  }
  if (type == "rms_norm")  // a row of whole vectors and one with a tail
    return {{"rms_norm [2,9,48]", layer_of("rms_norm", {{"axis", int64_t{-1}}, {"epsilon", 1e-6}}, {{"scale", random_blob({48}, rng)}}),
             {random_blob({2, 9, 48}, rng)}},
            {"rms_norm [3,37] eps 0.5", layer_of("rms_norm", {{"epsilon", 0.5}}, {{"scale", random_blob({37}, rng)}}),
             {random_blob({3, 37}, rng)}}};
  if (type == "layernorm")
    return {{"layernorm [2,9,48]", layer_of("layernorm", {{"axis", int64_t{-1}}}, {{"scale", random_blob({48}, rng)}, {"bias", random_blob({48}, rng)}}),
             {random_blob({2, 9, 48}, rng)}}};
  if (type == "concat")
    return {{"concat channels", layer_of("concat", {{"axis", int64_t{1}}}, {}, 3),
             {random_blob({1, 16, 5, 5}, rng), random_blob({1, 8, 5, 5}, rng), random_blob({1, 13, 5, 5}, rng)}},
            {"concat last", layer_of("concat", {{"axis", int64_t{-1}}}, {}, 2), {random_blob({1, 6, 32}, rng), random_blob({1, 6, 17}, rng)}}};
  if (type == "split")
    return {{"split channels", layer_of("split", {{"axis", int64_t{1}}, {"split", Ints{8, 5, 3}}}, {}, 1, 3),
             {random_blob({1, 16, 4, 4}, rng)}}};
  if (type == "reshape")
    return {{"reshape", layer_of("reshape", {{"shape", Ints{0, -1}}}, {}), {random_blob({2, 3, 4, 5}, rng)}}};
  if (type == "flatten") return {{"flatten", layer_of("flatten", {}, {}), {random_blob({2, 16, 3, 3}, rng)}}};
  if (type == "transpose") {
    // The last dim moved (gathered at a stride) or kept (runs copied); adjacent
    // dims merged; size-1 dims; the default perm (reversed); rank 5.
    std::vector<Case> out;
    out.push_back({"transpose [0,2,3,1]", layer_of("transpose", {{"perm", Ints{0, 2, 3, 1}}}, {}), {random_blob({1, 6, 4, 5}, rng)}});
    out.push_back({"transpose [0,2,1,3] (YOLOv8's head)", layer_of("transpose", {{"perm", Ints{0, 2, 1, 3}}}, {}),
                   {random_blob({1, 4, 16, 21}, rng)}});
    out.push_back({"transpose [1,0,2,3] of size-1 dims", layer_of("transpose", {{"perm", Ints{1, 0, 2, 3}}}, {}),
                   {random_blob({1, 3, 1, 7}, rng)}});
    out.push_back({"transpose reversed", layer_of("transpose", {}, {}), {random_blob({3, 5, 2}, rng)}});
    out.push_back({"transpose [2,0,1,4,3] rank 5", layer_of("transpose", {{"perm", Ints{2, 0, 1, 4, 3}}}, {}),
                   {random_blob({2, 3, 4, 5, 6}, rng)}});
    return out;
  }
  if (type == "pad")
    return {{"pad reflect", layer_of("pad", {{"pads", Ints{0, 0, 1, 2, 0, 0, 2, 1}}, {"mode", std::string("reflect")}}, {}),
             {random_blob({1, 3, 5, 5}, rng)}},
            // channel padding (MediaPipe's residual blocks), spatial padding with a value
            {"pad channels", layer_of("pad", {{"pads", Ints{0, 0, 0, 0, 0, 4, 0, 0}}}, {}), {random_blob({1, 6, 5, 7}, rng)}},
            {"pad constant", layer_of("pad", {{"pads", Ints{1, 0, 2, 1, 0, 2, 1, 3}}, {"value", 0.5}}, {}),
             {random_blob({2, 3, 4, 5}, rng)}},
            {"pad edge", layer_of("pad", {{"pads", Ints{0, 1, 3, 0, 0, 0, 0, 2}}, {"mode", std::string("edge")}}, {}),
             {random_blob({1, 2, 3, 4}, rng)}},
            {"pad wrap", layer_of("pad", {{"pads", Ints{0, 0, 5, 1, 0, 0, 0, 6}}, {"mode", std::string("wrap")}}, {}),
             {random_blob({1, 2, 3, 4}, rng)}},
            {"pad rank 3", layer_of("pad", {{"pads", Ints{1, 0, 2, 0, 3, 1}}}, {}), {random_blob({2, 3, 4}, rng)}}};
  if (type == "resize") {
    std::vector<Case> out;
    for (const char* mode : {"nearest", "linear"})
      for (const char* t : {"half_pixel", "align_corners", "asymmetric"})
        out.push_back({fmt::format("resize {} {}", mode, t),
                       layer_of("resize", {{"mode", std::string(mode)}, {"coordinate_transformation_mode", std::string(t)},
                                           {"scales", std::vector<double>{1, 1, 2, 1.5}}}, {}),
                       {random_blob({1, 8, 6, 7}, rng)}});
    // Sizes: the scale is out/in exactly (XNNPACK's sampling), channels last in memory.
    for (const char* t : {"half_pixel", "asymmetric"})
      out.push_back({fmt::format("resize linear {} sizes", t),
                     layer_of("resize", {{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string(t)},
                                         {"sizes", std::vector<int64_t>{2, 5, 9, 4}}}, {}),
                     {random_blob({2, 5, 6, 7}, rng)}});
    return out;
  }
  return {};
}

bool generated(std::string_view type) {
  const core::LayerType* t = core::find_layer_type(type);
  return type != "constant" && !type.starts_with("wg") && !type.starts_with("test_") && !(t && t->plan_time);
}

}  // namespace softneuro::test
