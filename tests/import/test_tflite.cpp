// The TensorFlow Lite importer: .tflite files written here with flatc's
// builders, imported, run, and compared with the operators computed in NHWC
// by the plain loops below (TFLite's definitions: SAME padding, OHWI and
// [1,KH,KW,C*M] filters, per-channel int8 weights); and bad files refused
// with errors naming the file, the operator and the field.
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/model_impl.hpp"
#include "core/registry.hpp"
#include "import/onnx_test_util.hpp"

#include <softneuro/import.hpp>

#include <tflite_generated.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sys/resource.h>
#include <random>

using namespace softneuro;
using namespace softneuro::test;
namespace fb = softneuro::tflite_fb;

namespace {

enum : int8_t { F32 = 0, F16 = 1, I32 = 2, I8 = 9 };

/// A tensor's quantisation as a .tflite file gives it.
struct Quant {
  std::vector<float> scales;
  std::vector<int64_t> zero_points;
  int dim = 0;
};

/// Writes a one-subgraph .tflite model.
class TfliteModel {
 public:
  TfliteModel() { buffers_.push_back(fb::CreateBuffer(b_)); }

  /// A tensor; `data` (raw little-endian bytes) makes it a constant.
  int tensor(const std::string& name, const std::vector<int32_t>& shape, int8_t type = F32,
             const std::vector<uint8_t>& data = {}, const Quant& q = {},
             flatbuffers::Offset<fb::SparsityParameters> sparsity = 0) {
    uint32_t buffer = 0;
    if (!data.empty()) {
      buffers_.push_back(fb::CreateBufferDirect(b_, &data));
      buffer = static_cast<uint32_t>(buffers_.size() - 1);
    }
    flatbuffers::Offset<fb::QuantizationParameters> qp = 0;
    if (!q.scales.empty()) qp = fb::CreateQuantizationParametersDirect(b_, nullptr, nullptr, &q.scales, &q.zero_points,
                                                                      fb::QuantizationDetails::NONE, 0, q.dim);
    tensors_.push_back(fb::CreateTensorDirect(b_, &shape, type, buffer, name.c_str(), qp, false, sparsity));
    return static_cast<int>(tensors_.size() - 1);
  }
  /// A constant with a buffer of no bytes (a tensor of zero elements).
  int empty_constant(const std::string& name, const std::vector<int32_t>& shape) {
    const std::vector<uint8_t> none;
    buffers_.push_back(fb::CreateBufferDirect(b_, &none));
    tensors_.push_back(fb::CreateTensorDirect(b_, &shape, F32, static_cast<uint32_t>(buffers_.size() - 1), name.c_str()));
    return static_cast<int>(tensors_.size() - 1);
  }
  int floats(const std::string& name, const std::vector<int32_t>& shape, const std::vector<float>& v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return tensor(name, shape, F32, bytes);
  }
  int int32s(const std::string& name, const std::vector<int32_t>& shape, const std::vector<int32_t>& v, const Quant& q = {}) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return tensor(name, shape, I32, bytes, q);
  }
  int int8s(const std::string& name, const std::vector<int32_t>& shape, const std::vector<int8_t>& v, const Quant& q) {
    std::vector<uint8_t> bytes(v.size());
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return tensor(name, shape, I8, bytes, q);
  }

  /// An operator: a builtin code, or a custom one by name.
  void op(int code, std::vector<int32_t> inputs, std::vector<int32_t> outputs,
          fb::BuiltinOptions type = fb::BuiltinOptions::NONE, flatbuffers::Offset<void> options = 0,
          const std::string& custom = {}, const std::vector<uint8_t>& custom_options = {}) {
    const std::string key = custom.empty() ? std::to_string(code) : custom;
    auto it = codes_.find(key);
    if (it == codes_.end()) {
      codes_list_.push_back(fb::CreateOperatorCodeDirect(b_, static_cast<int8_t>(std::min(code, 127)),
                                                         custom.empty() ? nullptr : custom.c_str(), 1, code));
      it = codes_.emplace(key, static_cast<uint32_t>(codes_list_.size() - 1)).first;
    }
    ops_.push_back(fb::CreateOperatorDirect(b_, it->second, &inputs, &outputs, type, options,
                                            custom_options.empty() ? nullptr : &custom_options));
  }
  flatbuffers::FlatBufferBuilder& b() { return b_; }

  std::string save(const std::string& file, std::vector<int32_t> inputs, std::vector<int32_t> outputs) {
    auto sg = fb::CreateSubGraphDirect(b_, &tensors_, &inputs, &outputs, &ops_, "main");
    std::vector<flatbuffers::Offset<fb::SubGraph>> sgs{sg};
    auto model = fb::CreateModelDirect(b_, 3, &codes_list_, &sgs, "test", &buffers_);
    fb::FinishModelBuffer(b_, model);
    const std::string path = test_dir() + "/" + file;
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b_.GetBufferPointer()), b_.GetSize());
    return path;
  }

 private:
  flatbuffers::FlatBufferBuilder b_;
  std::vector<flatbuffers::Offset<fb::Buffer>> buffers_;
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors_;
  std::vector<flatbuffers::Offset<fb::Operator>> ops_;
  std::vector<flatbuffers::Offset<fb::OperatorCode>> codes_list_;
  std::map<std::string, uint32_t> codes_;
};

std::vector<float> uniform_values(std::size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// TFLite's convolution in NHWC: filter [O,KH,KW,C/groups] (conv) or
/// [1,KH,KW,C*M] (depthwise), SAME or VALID padding, then an activation.
std::vector<float> conv_nhwc(const std::vector<float>& x, int n, int h, int w, int c, const std::vector<float>& f,
                             int oc, int kh, int kw, bool depthwise, const std::vector<float>& bias, int stride,
                             bool same, float lo, float hi, int& oh, int& ow) {
  oh = same ? (h + stride - 1) / stride : (h - kh) / stride + 1;
  ow = same ? (w + stride - 1) / stride : (w - kw) / stride + 1;
  const int pt = same ? std::max((oh - 1) * stride + kh - h, 0) / 2 : 0;
  const int pl = same ? std::max((ow - 1) * stride + kw - w, 0) / 2 : 0;
  const int cg = depthwise ? 1 : c;  // input channels per output channel's group
  std::vector<float> y(static_cast<std::size_t>(n * oh * ow * oc));
  for (int b = 0; b < n; ++b)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j)
        for (int o = 0; o < oc; ++o) {
          double acc = bias.empty() ? 0 : bias[static_cast<std::size_t>(o)];
          for (int u = 0; u < kh; ++u)
            for (int v = 0; v < kw; ++v) {
              const int yy = i * stride - pt + u, xx = j * stride - pl + v;
              if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
              for (int k = 0; k < cg; ++k) {
                const int ic = depthwise ? o / (oc / c) : k;
                const float wv = depthwise ? f[static_cast<std::size_t>((u * kw + v) * oc + o)]
                                           : f[static_cast<std::size_t>(((o * kh + u) * kw + v) * c + k)];
                acc += double(x[static_cast<std::size_t>(((b * h + yy) * w + xx) * c + ic)]) * wv;
              }
            }
          y[static_cast<std::size_t>(((b * oh + i) * ow + j) * oc + o)] = std::clamp(static_cast<float>(acc), lo, hi);
        }
  return y;
}

std::vector<float> run1(const Model& m, const std::string& input, const Shape& shape, const std::vector<float>& x,
                        const std::string& output = {}) {
  Session s(m);
  auto outs = s.run(std::vector<NamedBlob>{{input, make_input(shape, x)}});
  for (const auto& o : outs)
    if (output.empty() || o.name == output) {
      const float* p = o.blob.data_as<float>();
      return std::vector<float>(p, p + o.blob.shape().numel());
    }
  FAIL("no output " << output);
  return {};
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-4f) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(tol));
  }
}

flatbuffers::Offset<void> conv_options(flatbuffers::FlatBufferBuilder& b, bool same, int stride, int act) {
  return fb::CreateConv2DOptions(b, same ? 0 : 1, stride, stride, static_cast<int8_t>(act)).Union();
}

}  // namespace

TEST_CASE("TFLite convolutions, depthwise and a classifier head match NHWC arithmetic", "[tflite]") {
  // x [1,7,6,4] -> CONV_2D 3x3 stride 2 SAME RELU6 (8 channels) -> DEPTHWISE 3x3 VALID x2 -> MEAN [1,2] -> FC 5 -> SOFTMAX
  TfliteModel m;
  const auto wc = uniform_values(8 * 3 * 3 * 4, 1), bc = uniform_values(8, 2);
  const auto wd = uniform_values(3 * 3 * 16, 3), bd = uniform_values(16, 4);
  const auto wf = uniform_values(5 * 16, 5), bf = uniform_values(5, 6);
  const int x = m.tensor("image", {1, 7, 6, 4});
  const int c = m.tensor("conv", {1, 4, 3, 8});
  const int d = m.tensor("depthwise", {1, 2, 1, 16});
  const int mean = m.tensor("pooled", {1, 16});
  const int fc = m.tensor("logits", {1, 5});
  const int sm = m.tensor("probabilities", {1, 5});
  m.op(3, {x, m.floats("wc", {8, 3, 3, 4}, wc), m.floats("bc", {8}, bc)}, {c}, fb::BuiltinOptions::Conv2DOptions,
       conv_options(m.b(), true, 2, 3));
  m.op(4, {c, m.floats("wd", {1, 3, 3, 16}, wd), m.floats("bd", {16}, bd)}, {d},
       fb::BuiltinOptions::DepthwiseConv2DOptions, fb::CreateDepthwiseConv2DOptions(m.b(), 1, 1, 1, 2, 0).Union());
  m.op(40, {d, m.int32s("axes", {2}, {1, 2})}, {mean}, fb::BuiltinOptions::ReducerOptions,
       fb::CreateReducerOptions(m.b(), false).Union());
  m.op(9, {mean, m.floats("wf", {5, 16}, wf), m.floats("bf", {5}, bf)}, {fc}, fb::BuiltinOptions::FullyConnectedOptions,
       fb::CreateFullyConnectedOptions(m.b()).Union());
  m.op(25, {fc}, {sm}, fb::BuiltinOptions::SoftmaxOptions, fb::CreateSoftmaxOptions(m.b(), 1.0f).Union());
  const std::string path = m.save("classifier.tflite", {x}, {sm, c});
  const Model model = import_tflite(path);
  REQUIRE(model.inputs().size() == 1);
  CHECK(model.inputs()[0].name == "image");
  CHECK(model.inputs()[0].shape == Shape{1, 7, 6, 4});
  REQUIRE(model.outputs().size() == 2);
  CHECK(model.outputs()[0].name == "probabilities");
  CHECK(model.outputs()[1].name == "conv");  // held nchw inside, handed back NHWC under its own name
  CHECK(model.outputs()[1].shape == Shape{1, 4, 3, 8});

  const auto xv = uniform_values(7 * 6 * 4, 7, 0, 1);
  int oh = 0, ow = 0;
  const auto yc = conv_nhwc(xv, 1, 7, 6, 4, wc, 8, 3, 3, false, bc, 2, true, 0, 6, oh, ow);
  REQUIRE((oh == 4 && ow == 3));
  const auto yd = conv_nhwc(yc, 1, 4, 3, 8, wd, 16, 3, 3, true, bd, 1, false, -1e30f, 1e30f, oh, ow);
  REQUIRE((oh == 2 && ow == 1));
  std::vector<float> pooled(16), logits(5), probs(5);
  for (int ch = 0; ch < 16; ++ch) pooled[ch] = (yd[ch] + yd[16 + ch]) / 2;
  double sum = 0;
  for (int o = 0; o < 5; ++o) {
    double acc = bf[o];
    for (int k = 0; k < 16; ++k) acc += double(wf[o * 16 + k]) * pooled[k];
    logits[o] = static_cast<float>(acc);
  }
  const float top = *std::max_element(logits.begin(), logits.end());
  for (int o = 0; o < 5; ++o) sum += std::exp(logits[o] - top);
  for (int o = 0; o < 5; ++o) probs[o] = static_cast<float>(std::exp(logits[o] - top) / sum);
  check_close(run1(model, "image", Shape{1, 7, 6, 4}, xv, "probabilities"), probs, 1e-5f);
  check_close(run1(model, "image", Shape{1, 7, 6, 4}, xv, "conv"), yc);
}

TEST_CASE("TFLite layout-sensitive operators keep the file's axes", "[tflite]") {
  // x [1,4,5,3]: ADD of a [3] constant (broadcast over the channels), PAD, CONCATENATION on
  // the channel axis, STRIDED_SLICE with a step and a shrunk axis, RESHAPE, and a RESIZE_BILINEAR.
  TfliteModel m;
  const auto cv = uniform_values(3, 11);
  const int x = m.tensor("x", {1, 4, 5, 3});
  const int a = m.tensor("added", {1, 4, 5, 3});
  const int p = m.tensor("padded", {1, 5, 7, 3});
  const int cat = m.tensor("joined", {1, 5, 7, 6});
  const int s = m.tensor("sliced", {1, 3, 6});      // rows 0,2,4 of column 1
  const int r = m.tensor("flat", {1, 18});
  const int z = m.tensor("resized", {1, 8, 10, 3});
  m.op(0, {x, m.floats("c", {3}, cv)}, {a}, fb::BuiltinOptions::AddOptions, fb::CreateAddOptions(m.b(), 1).Union());
  m.op(34, {a, m.int32s("paddings", {4, 2}, {0, 0, 1, 0, 0, 2, 0, 0})}, {p});
  m.op(2, {p, p}, {cat}, fb::BuiltinOptions::ConcatenationOptions, fb::CreateConcatenationOptions(m.b(), -1).Union());
  m.op(45, {cat, m.int32s("begin", {4}, {0, 0, 1, 0}), m.int32s("end", {4}, {1, 5, 2, 6}), m.int32s("strides", {4}, {1, 2, 1, 1})},
       {s}, fb::BuiltinOptions::StridedSliceOptions, fb::CreateStridedSliceOptions(m.b(), 0, 0, 0, 0, 4).Union());
  m.op(22, {s, m.int32s("shape", {2}, {1, 18})}, {r});
  m.op(23, {x, m.int32s("size", {2}, {8, 10})}, {z}, fb::BuiltinOptions::ResizeBilinearOptions,
       fb::CreateResizeBilinearOptions(m.b(), false, true).Union());
  const Model model = import_tflite(m.save("layout.tflite", {x}, {r, z}));
  const auto xv = uniform_values(4 * 5 * 3, 12);
  auto at = [&](int i, int j, int k) { return xv[static_cast<std::size_t>((i * 5 + j) * 3 + k)]; };
  auto padded = [&](int i, int j, int k) { return i < 1 || j >= 5 ? 0.0f : std::max(at(i - 1, j, k) + cv[k], 0.0f); };
  std::vector<float> flat;
  for (int i = 0; i < 5; i += 2)
    for (int k = 0; k < 6; ++k) flat.push_back(padded(i, 1, k % 3));
  check_close(run1(model, "x", Shape{1, 4, 5, 3}, xv, "flat"), flat);
  // half_pixel_centers: source (y + 0.5) * in/out - 0.5, clamped at the edges.
  std::vector<float> resized;
  auto src = [](int o, int in, int out) { return std::clamp((o + 0.5) * in / out - 0.5, 0.0, double(in - 1)); };
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 10; ++j)
      for (int k = 0; k < 3; ++k) {
        const double sy = src(i, 4, 8), sx = src(j, 5, 10);
        const int y0 = int(sy), x0 = int(sx), y1 = std::min(y0 + 1, 3), x1 = std::min(x0 + 1, 4);
        const double fy = sy - y0, fx = sx - x0;
        resized.push_back(static_cast<float>((at(y0, x0, k) * (1 - fx) + at(y0, x1, k) * fx) * (1 - fy) +
                                             (at(y1, x0, k) * (1 - fx) + at(y1, x1, k) * fx) * fy));
      }
  check_close(run1(model, "x", Shape{1, 4, 5, 3}, xv, "resized"), resized, 1e-5f);
}

TEST_CASE("TFLite float16 weights behind DEQUANTIZE, PRELU and TRANSPOSE_CONV", "[tflite]") {
  // x [1,3,3,2] -> TRANSPOSE_CONV (weights [4,3,3,2] as float16, stride 2, SAME, out [1,6,6,4]) -> PRELU ([1,1,4])
  TfliteModel m;
  auto half_bits = [](float f) {  // exact for the values below (multiples of 1/64 under 2)
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (f == 0) return uint16_t(0);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
    const int e = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
    return static_cast<uint16_t>(sign | (e << 10) | ((u >> 13) & 0x3ff));
  };
  std::vector<float> w(4 * 3 * 3 * 2);
  std::vector<uint8_t> wbytes;
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = static_cast<float>(static_cast<int>(i % 13) - 6) / 8.0f;
    const uint16_t h = half_bits(w[i]);
    wbytes.push_back(static_cast<uint8_t>(h & 0xff));
    wbytes.push_back(static_cast<uint8_t>(h >> 8));
  }
  const std::vector<float> alpha = {0.1f, 0.2f, 0.3f, 0.4f};
  const int x = m.tensor("x", {1, 3, 3, 2});
  const int wh = m.tensor("w_half", {4, 3, 3, 2}, F16, wbytes);
  const int wf = m.tensor("w", {4, 3, 3, 2});
  const int t = m.tensor("up", {1, 6, 6, 4});
  const int y = m.tensor("y", {1, 6, 6, 4});
  m.op(6, {wh}, {wf});
  m.op(67, {m.int32s("out_shape", {4}, {1, 6, 6, 4}), wf, x}, {t}, fb::BuiltinOptions::TransposeConvOptions,
       fb::CreateTransposeConvOptions(m.b(), 0, 2, 2).Union());
  m.op(54, {t, m.floats("alpha", {1, 1, 4}, alpha)}, {y});
  const Model model = import_tflite(m.save("upsample.tflite", {x}, {y}));
  const auto xv = uniform_values(3 * 3 * 2, 21);
  // TFLite's transpose conv: SAME pads as the forward conv from 6 to 3 (total max((3-1)*2+3-6,0) = 1, before 0).
  std::vector<double> acc(6 * 6 * 4, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int u = 0; u < 3; ++u)
        for (int v = 0; v < 3; ++v) {
          const int oy = i * 2 + u, ox = j * 2 + v;
          if (oy >= 6 || ox >= 6) continue;
          for (int o = 0; o < 4; ++o)
            for (int c = 0; c < 2; ++c)
              acc[static_cast<std::size_t>((oy * 6 + ox) * 4 + o)] +=
                  double(xv[static_cast<std::size_t>((i * 3 + j) * 2 + c)]) * w[static_cast<std::size_t>(((o * 3 + u) * 3 + v) * 2 + c)];
        }
  std::vector<float> want(acc.size());
  for (std::size_t i = 0; i < acc.size(); ++i) want[i] = static_cast<float>(acc[i] < 0 ? acc[i] * alpha[i % 4] : acc[i]);
  check_close(run1(model, "x", Shape{1, 3, 3, 2}, xv), want, 1e-5f);
}

TEST_CASE("MediaPipe's custom Convolution2DTransposeBias is a transposed convolution with a bias", "[tflite]") {
  // x [1,2,3,2] -> the custom op (VALID, stride 2, filter [3,2,2,2], bias [3]) -> y [1,4,6,3]
  TfliteModel m;
  const auto w = uniform_values(3 * 2 * 2 * 2, 41), bias = uniform_values(3, 42);
  const int x = m.tensor("x", {1, 2, 3, 2});
  const int y = m.tensor("y", {1, 4, 6, 3});
  const int32_t params[3] = {2, 2, 2};  // padding VALID, stride_w, stride_h
  std::vector<uint8_t> opts(sizeof params);
  std::memcpy(opts.data(), params, sizeof params);
  m.op(32, {x, m.floats("w", {3, 2, 2, 2}, w), m.floats("bias", {3}, bias)}, {y}, fb::BuiltinOptions::NONE, 0,
       "Convolution2DTransposeBias", opts);
  const Model model = import_tflite(m.save("transpose_conv_bias.tflite", {x}, {y}));
  const auto xv = uniform_values(2 * 3 * 2, 43);
  std::vector<float> want(4 * 6 * 3);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j)
      for (int o = 0; o < 3; ++o) {
        double acc = bias[o];
        for (int c = 0; c < 2; ++c)  // each output pixel has one source: stride 2 = kernel 2
          acc += double(xv[static_cast<std::size_t>(((i / 2) * 3 + j / 2) * 2 + c)]) *
                 w[static_cast<std::size_t>(((o * 2 + i % 2) * 2 + j % 2) * 2 + c)];
        want[static_cast<std::size_t>((i * 6 + j) * 3 + o)] = static_cast<float>(acc);
      }
  check_close(run1(model, "x", Shape{1, 2, 3, 2}, xv), want, 1e-5f);
}

TEST_CASE("A TFLite int8 model computes the file's integer arithmetic and runs untuned on int8 routines", "[tflite][quant]") {
  // x float [1,5,5,3] -> QUANTIZE (0.02, -10) -> CONV_2D int8 per-channel weights, int32 bias, SAME, RELU
  // -> int8 (0.03, -128) -> DEQUANTIZE
  TfliteModel m;
  const std::vector<float> ws = {0.05f, 0.04f, 0.03f, 0.06f};
  std::vector<int8_t> wq(4 * 3 * 3 * 3);
  for (std::size_t i = 0; i < wq.size(); ++i) wq[i] = static_cast<int8_t>(static_cast<int>(i * 7 % 23) - 11);
  const std::vector<int32_t> bq = {100, -50, 0, 25};
  std::vector<float> bs;
  for (float s : ws) bs.push_back(s * 0.02f);
  const int x = m.tensor("x", {1, 5, 5, 3});
  const int xq = m.tensor("x_int8", {1, 5, 5, 3}, I8, {}, {{0.02f}, {-10}});
  const int y = m.tensor("y_int8", {1, 5, 5, 4}, I8, {}, {{0.03f}, {-128}});
  const int yf = m.tensor("y", {1, 5, 5, 4});
  m.op(114, {x}, {xq});
  m.op(3, {xq, m.int8s("w", {4, 3, 3, 3}, wq, {ws, {0, 0, 0, 0}, 0}), m.int32s("b", {4}, bq, {bs, {0, 0, 0, 0}, 0})}, {y},
       fb::BuiltinOptions::Conv2DOptions, conv_options(m.b(), true, 1, 1));
  m.op(6, {y}, {yf});
  const Model model = import_tflite(m.save("int8_conv.tflite", {x}, {yf}));
  const auto xv = uniform_values(5 * 5 * 3, 31, -1.5f, 1.5f);
  // The file's arithmetic: integers in, int32 accumulation, rounded to the output's grid.
  std::vector<float> xr(xv.size()), wr(wq.size());
  for (std::size_t i = 0; i < xv.size(); ++i)
    xr[i] = (std::clamp(std::nearbyint(xv[i] / 0.02f) - 10.0f, -128.0f, 127.0f) + 10.0f) * 0.02f;
  for (std::size_t i = 0; i < wq.size(); ++i) wr[i] = wq[i] * ws[i / 27];
  std::vector<float> br;
  for (int o = 0; o < 4; ++o) br.push_back(static_cast<float>(bq[o] * double(bs[o])));
  int oh = 0, ow = 0;
  const auto real = conv_nhwc(xr, 1, 5, 5, 3, wr, 4, 3, 3, false, br, 1, true, 0, 1e30f, oh, ow);
  std::vector<float> want;
  for (float r : real) want.push_back((std::clamp(std::nearbyint(r / 0.03f) - 128.0f, -128.0f, 127.0f) + 128.0f) * 0.03f);
  const auto got = run1(model, "x", Shape{1, 5, 5, 3}, xv);
  REQUIRE(got.size() == want.size());
  int off_by_step = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << " real " << real[i]);
    CHECK(std::fabs(got[i] - want[i]) <= 0.03f + 1e-5f);  // a rounding tie at most
    off_by_step += std::fabs(got[i] - want[i]) > 1e-5f;
  }
  CHECK(off_by_step <= 2);
  if (!core::cpu_features().avx2_fma() && !core::cpu_features().neon) return;  // no int8 routines
  int int8 = 0;
  for (const auto& l : Session(model).layers()) {
    INFO(l.name << " " << l.type << " " << l.descriptor);
    if (l.type == "conv2") CHECK(l.descriptor.starts_with("cpu:qint8"));
    int8 += l.descriptor.starts_with("cpu:qint8");
  }
  CHECK(int8 >= 2);
}

TEST_CASE("A TFLite int8 ADD rounds as the interpreter's XNNPACK path: fixed point, on XNNPACK's int8 add", "[tflite][quant]") {
  // x float [1,4,4,8] -> QUANTIZE (0.02, 5); c float -> QUANTIZE (0.03, -7); ADD (RELU) -> int8 (0.04, -128) -> DEQUANTIZE.
  // The interpreter sums int8 inputs with fixed-point multipliers; oneDNN's and
  // our int8 adds sum in float and round elsewhere on rare ties (a TFLite int8
  // ResNet50 ended 2 steps off the interpreter; now bit for bit).
  TfliteModel m;
  const int x = m.tensor("x", {1, 4, 4, 8}), c = m.tensor("c", {1, 4, 4, 8});
  const int xq = m.tensor("x_int8", {1, 4, 4, 8}, I8, {}, {{0.02f}, {5}});
  const int cq = m.tensor("c_int8", {1, 4, 4, 8}, I8, {}, {{0.03f}, {-7}});
  const int y = m.tensor("y_int8", {1, 4, 4, 8}, I8, {}, {{0.04f}, {-128}});
  const int yf = m.tensor("y", {1, 4, 4, 8});
  m.op(114, {x}, {xq});
  m.op(114, {c}, {cq});
  m.op(0, {xq, cq}, {y}, fb::BuiltinOptions::AddOptions, fb::CreateAddOptions(m.b(), 1).Union());  // RELU
  m.op(6, {y}, {yf});
  const Model model = import_tflite(m.save("int8_add.tflite", {x, c}, {yf}));
  const Layer* add = nullptr;
  for (const Layer& l : detail::impl_of(model).graph.layers)
    if (l.type == "add") add = &l;
  REQUIRE(add);
  CHECK(core::requantizes_as_tflite(*add));
  // Routines that sum in float refuse it, naming why.
  LayerInfo info;
  info.layer = add;
  info.input_shapes = {Shape{1, 8, 4, 4}, Shape{1, 8, 4, 4}};
  info.output_shapes = {Shape{1, 8, 4, 4}};
  info.input_quant = {QuantParams{{0.02f}, {5}, -1}, QuantParams{{0.03f}, {-7}, -1}};
  info.output_quant = {QuantParams{{0.04f}, {-128}, -1}};
  for (const char* descriptor : {"cpu:qint8:nhwc/onednn", "cpu:qint8:nhwc/qint8"}) {
    Schema schema;
    const Routine* r = core::RoutineRegistry::instance().find("add", descriptor, &schema);
    if (!r) continue;  // not built here (aarch64: no x86 qint8 family)
    const Support s = r->supports(info, schema);
    INFO(descriptor);
    CHECK_FALSE(s);
    if (s.reason.find("CPU lacks") == std::string::npos)  // (below AVX2 it runs nothing at all)
      CHECK_THAT(s.reason, Catch::Contains("fixed-point"));
  }
  // XNNPACK's int8 add computes it (where XNNPACK runs: not under an ISA cap);
  // in an int8 chain the default then takes it (a TFLite int8 ResNet50's 16 adds).
  Schema schema;
  const Routine* xnn = core::RoutineRegistry::instance().find("add", "cpu:qint8:nhwc/xnnpack", &schema);
  REQUIRE(xnn);
  const Support s = xnn->supports(info, schema);
  if (!s) CHECK_THAT(s.reason, Catch::Contains("XNNPACK") || Catch::Contains("SOFTNEURO_MAX_CPU_ISA"));
}

TEST_CASE("TFLite int8 inputs and outputs stay integers at the net's edge", "[tflite][quant]") {
  TfliteModel m;
  const int x = m.tensor("x", {1, 4}, I8, {}, {{0.5f}, {3}});
  const int y = m.tensor("y", {1, 4}, I8, {}, {{0.25f}, {-2}});
  m.op(19, {x}, {y});  // RELU
  const Model model = import_tflite(m.save("int8_edges.tflite", {x}, {y}));
  REQUIRE(model.inputs()[0].dtype == DType::int8);
  REQUIRE(model.outputs()[0].dtype == DType::int8);
  Blob in = Blob::allocate(Shape{1, 4}, DType::int8);
  const int8_t xv[4] = {-128, 0, 5, 127};
  std::memcpy(in.data(), xv, 4);
  Session s(model);
  const auto out = s.run(std::vector<NamedBlob>{{"x", in}});
  REQUIRE(out[0].blob.dtype() == DType::int8);
  const int8_t* y8 = out[0].blob.data_as<int8_t>();
  // real x = (q - 3) * 0.5: -65.5, -1.5, 1, 62; relu; onto (0.25, -2): 0 -> -2, 1 -> 2, 62 -> 246 clamps to 127.
  CHECK(int(y8[0]) == -2);
  CHECK(int(y8[1]) == -2);
  CHECK(int(y8[2]) == 2);
  CHECK(int(y8[3]) == 127);
}

// Before, the first channel's scale and zero point stood for the whole tensor
// (off by up to 139 against LiteRT).
TEST_CASE("TFLite int8 inputs quantised per channel use each channel's scale and zero point", "[tflite][quant]") {
  // (Activations are quantised per tensor, so an edge quantised per channel is
  // a graph input read as its real values.)
  TfliteModel m;
  const int x = m.tensor("x", {1, 2, 3}, I8, {}, {{0.5f, 1.0f, 2.0f}, {0, 10, -5}, 2});
  const int y = m.tensor("y", {1, 2, 3});
  m.op(19, {x}, {y});  // RELU, to float32
  const Model model = import_tflite(m.save("int8_per_channel_input.tflite", {x}, {y}));
  Blob in = Blob::allocate(Shape{1, 2, 3}, DType::int8);
  const int8_t xv[6] = {4, 20, -1, -6, 12, 10};
  std::memcpy(in.data(), xv, 6);
  Session s(model);
  const auto out = s.run(std::vector<NamedBlob>{{"x", in}});
  const float* yv = static_cast<const float*>(out[0].blob.data());
  const float sx[3] = {0.5f, 1.0f, 2.0f};
  const int zx[3] = {0, 10, -5};
  for (int i = 0; i < 6; ++i) {
    INFO("element " << i);
    CHECK(yv[i] == std::max(0.0f, static_cast<float>(xv[i] - zx[i % 3]) * sx[i % 3]));
  }
}

TEST_CASE("TFLite sparse constants behind DENSIFY: compressed rows and blocks", "[tflite]") {
  // w [3,4]: rows compressed (CSR over the last dim), as MediaPipe's sparse detectors store 1x1 filters;
  // and v [2,4] in 1x2 blocks of which only the non-zero ones are stored.
  const std::vector<float> w = {0, 1.5f, 0, -2, 0, 0, 0, 0, 3, 0, 0.25f, 0};
  const std::vector<float> v = {0, 0, 5, 6, 7, 8, 0, 0};
  TfliteModel m;
  auto bytes = [](const std::vector<float>& f) {
    std::vector<uint8_t> b(f.size() * 4);
    std::memcpy(b.data(), f.data(), b.size());
    return b;
  };
  auto& b = m.b();
  const std::vector<int32_t> segs = {0, 2, 2, 4}, idx = {1, 3, 0, 2}, order = {0, 1};
  std::vector<flatbuffers::Offset<fb::DimensionMetadata>> dims = {
      fb::CreateDimensionMetadata(b, 0, 3),
      fb::CreateDimensionMetadata(b, 1, 0, fb::SparseIndexVector::Int32Vector, fb::CreateInt32VectorDirect(b, &segs).Union(),
                                  fb::SparseIndexVector::Int32Vector, fb::CreateInt32VectorDirect(b, &idx).Union())};
  auto sparsity = fb::CreateSparsityParametersDirect(b, &order, nullptr, &dims);
  const std::vector<int32_t> bsegs = {0, 1, 2}, bidx = {1, 0}, border = {0, 1, 2}, bmap = {1};
  std::vector<flatbuffers::Offset<fb::DimensionMetadata>> bdims = {
      fb::CreateDimensionMetadata(b, 0, 2),
      fb::CreateDimensionMetadata(b, 1, 0, fb::SparseIndexVector::Int32Vector, fb::CreateInt32VectorDirect(b, &bsegs).Union(),
                                  fb::SparseIndexVector::Int32Vector, fb::CreateInt32VectorDirect(b, &bidx).Union()),
      fb::CreateDimensionMetadata(b, 0, 2)};
  auto bsparsity = fb::CreateSparsityParametersDirect(b, &border, &bmap, &bdims);
  const int x = m.tensor("x", {3, 4});
  const int ws = m.tensor("w_sparse", {3, 4}, F32, bytes({1.5f, -2, 3, 0.25f}), {}, sparsity);
  const int wd = m.tensor("w", {3, 4});
  const int y = m.tensor("y", {3, 4});
  const int x2 = m.tensor("x2", {2, 4});
  const int vs = m.tensor("v_sparse", {2, 4}, F32, bytes({5, 6, 7, 8}), {}, bsparsity);
  const int vd = m.tensor("v", {2, 4});
  const int y2 = m.tensor("y2", {2, 4});
  m.op(124, {ws}, {wd});
  m.op(0, {x, wd}, {y}, fb::BuiltinOptions::AddOptions, fb::CreateAddOptions(b).Union());
  m.op(124, {vs}, {vd});
  m.op(0, {x2, vd}, {y2}, fb::BuiltinOptions::AddOptions, fb::CreateAddOptions(b).Union());
  const Model model = import_tflite(m.save("sparse.tflite", {x, x2}, {y, y2}));

  // A few stored values cannot claim a dense form of any size (the tflite_import
  // fuzzer's file of 5 KB allocated 800 MB for one): refused before allocating.
  TfliteModel big;
  auto& bb = big.b();
  const std::vector<int32_t> one_seg = {0, 1}, one_idx = {0}, order2 = {0, 1};
  std::vector<flatbuffers::Offset<fb::DimensionMetadata>> big_dims = {
      fb::CreateDimensionMetadata(bb, 0, 1),
      fb::CreateDimensionMetadata(bb, 1, 0, fb::SparseIndexVector::Int32Vector, fb::CreateInt32VectorDirect(bb, &one_seg).Union(),
                                  fb::SparseIndexVector::Int32Vector, fb::CreateInt32VectorDirect(bb, &one_idx).Union())};
  auto big_sparsity = fb::CreateSparsityParametersDirect(bb, &order2, nullptr, &big_dims);
  const int bx = big.tensor("x", {1, 1 << 22});
  const int bs = big.tensor("w_sparse", {1, 1 << 22}, F32, bytes({1.0f}), {}, big_sparsity);
  const int bw = big.tensor("w", {1, 1 << 22});
  const int by = big.tensor("y", {1, 1 << 22});
  big.op(124, {bs}, {bw});
  big.op(0, {bx, bw}, {by}, fb::BuiltinOptions::AddOptions, fb::CreateAddOptions(bb).Union());
  try {
    import_tflite(big.save("sparse_big.tflite", {bx}, {by}));
    FAIL("imported");
  } catch (const Error& e) {
    CHECK(e.field() == "sparsity");
    CHECK_THAT(std::string(e.what()), Catch::Contains("more than 1024 per stored value"));
  }

  // A bad index at the very end is found before the dense form is allocated
  // (before, 2^26 doubles were: 512 MiB for a file of 768 KiB, then refused).
  {
    TfliteModel bad;
    auto& bd = bad.b();
    const int rows = 1 << 16, cols = 1 << 10;
    std::vector<int32_t> segments(rows + 1), indices(rows, 0);
    for (int r = 0; r <= rows; ++r) segments[static_cast<std::size_t>(r)] = r;
    indices.back() = cols;  // one past the last column
    std::vector<flatbuffers::Offset<fb::DimensionMetadata>> bad_dims = {
        fb::CreateDimensionMetadata(bd, 0, rows),
        fb::CreateDimensionMetadata(bd, 1, 0, fb::SparseIndexVector::Int32Vector,
                                    fb::CreateInt32VectorDirect(bd, &segments).Union(), fb::SparseIndexVector::Int32Vector,
                                    fb::CreateInt32VectorDirect(bd, &indices).Union())};
    auto bad_sparsity = fb::CreateSparsityParametersDirect(bd, &order2, nullptr, &bad_dims);
    const int qx = bad.tensor("x", {rows, cols});
    const int qs = bad.tensor("w_sparse", {rows, cols}, F32, bytes(std::vector<float>(rows, 1.0f)), {}, bad_sparsity);
    const int qw = bad.tensor("w", {rows, cols});
    const int qy = bad.tensor("y", {rows, cols});
    bad.op(124, {qs}, {qw});
    bad.op(0, {qx, qw}, {qy}, fb::BuiltinOptions::AddOptions, fb::CreateAddOptions(bd).Union());
    const std::string path = bad.save("sparse_bad_last.tflite", {qx}, {qy});
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    CHECK_THROWS_WITH(import_tflite(path), Catch::Contains("an index outside its dim"));
    getrusage(RUSAGE_SELF, &after);
    CHECK(after.ru_maxrss - before.ru_maxrss < 128 * 1024);  // KiB: far below the dense form's 256 MiB (float32)
  }

  Session s(model);
  const std::vector<float> zeros12(12, 0.0f), zeros8(8, 0.0f);
  const auto outs = s.run(std::vector<NamedBlob>{{"x", make_input(Shape{3, 4}, zeros12)}, {"x2", make_input(Shape{2, 4}, zeros8)}});
  REQUIRE(outs.size() == 2);
  for (const auto& o : outs) {
    INFO(o.name);
    const float* g = o.blob.data_as<float>();
    const std::vector<float>& want = o.name == "y" ? w : v;
    REQUIRE(o.blob.shape().numel() == static_cast<int64_t>(want.size()));
    check_close(std::vector<float>(g, g + want.size()), want, 0);
  }
}

TEST_CASE("TFLite files that cannot import are refused with what and where", "[tflite][errors]") {
  SECTION("every unsupported operator, builtin or custom, in one error") {
    TfliteModel m;
    const int x = m.tensor("x", {1, 4});
    const int a = m.tensor("a", {1, 4});
    const int b = m.tensor("b", {1, 4});
    const int c = m.tensor("c", {1, 4});
    const int d = m.tensor("d", {1, 4});
    const int e2 = m.tensor("e", {1, 4});
    m.op(19, {x}, {a});                                                    // RELU: fine
    m.op(8, {a}, {b});                                                     // FLOOR: not translated
    m.op(32, {b}, {c}, fb::BuiltinOptions::NONE, 0, "MyCustomOp");         // custom, reading FLOOR's output
    m.op(32, {c}, {d}, fb::BuiltinOptions::NONE, 0, "OtherCustomOp");      // custom, reading the custom one's
    m.op(19, {d}, {e2});                                                   // RELU after them: not tried
    const std::string path = m.save("unsupported.tflite", {x}, {e2});
    try {
      import_tflite(path);
      FAIL("imported");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(e.file() == path);
      // Before, only FLOOR was named: operators reading an unsupported one's output were skipped without a word.
      CHECK(what.find("3 unsupported operators") != std::string::npos);
      CHECK(what.find("FLOOR") != std::string::npos);
      CHECK(what.find("custom operator 'MyCustomOp', output 'c'") != std::string::npos);
      CHECK(what.find("custom operator 'OtherCustomOp', output 'd'") != std::string::npos);
      CHECK(what.find("and 1 builtin operator not tried") != std::string::npos);
    }
    TfliteModel m2;
    const int x2 = m2.tensor("x", {1, 4});
    const int a2 = m2.tensor("a", {1, 4});
    const int b2 = m2.tensor("b", {1, 4});
    m2.op(8, {x2}, {a2});
    m2.op(32, {x2}, {b2}, fb::BuiltinOptions::NONE, 0, "MyCustomOp");
    try {
      import_tflite(m2.save("unsupported2.tflite", {x2}, {a2, b2}));
      FAIL("imported");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find("2 unsupported operators") != std::string::npos);
      CHECK(what.find("FLOOR, output 'a'") != std::string::npos);
      CHECK(what.find("custom operator 'MyCustomOp', output 'b'") != std::string::npos);
    }
  }
  SECTION("a truncated file, another format, a buffer out of range") {
    TfliteModel m;
    const int x = m.tensor("x", {1, 4});
    const int y = m.tensor("y", {1, 4});
    m.op(19, {x}, {y});
    const std::string path = m.save("ok.tflite", {x}, {y});
    std::ifstream f(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), {});
    const std::string cut = test_dir() + "/truncated.tflite";
    std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    CHECK_THROWS_WITH(import_tflite(cut), Catch::Contains("truncated.tflite") && Catch::Contains("verifier"));
    const std::string other = test_dir() + "/not_tflite.tflite";
    std::ofstream(other, std::ios::binary) << "this is not a model at all";
    CHECK_THROWS_WITH(import_tflite(other), Catch::Contains("not a TensorFlow Lite model"));
    CHECK_THROWS_WITH(import_tflite(test_dir() + "/missing.tflite"), Catch::Contains("cannot open"));

    TfliteModel bad;
    const int bx = bad.tensor("x", {1, 4});
    const int w = bad.tensor("w", {1, 4});  // no data: a constant must have some
    const int by = bad.tensor("y", {1, 4});
    bad.op(0, {bx, w}, {by}, fb::BuiltinOptions::AddOptions, fb::CreateAddOptions(bad.b()).Union());
    CHECK_THROWS_WITH(import_tflite(bad.save("no_data.tflite", {bx}, {by})),
                      Catch::Contains("'w' is read before any operator computes it"));
    TfliteModel short_buf;
    const int sx = short_buf.tensor("x", {1, 4});
    const int sw = short_buf.tensor("w", {1, 4}, F32, {1, 2, 3});  // 3 bytes for 4 floats
    const int sy = short_buf.tensor("y", {1, 4});
    short_buf.op(0, {sx, sw}, {sy}, fb::BuiltinOptions::AddOptions, fb::CreateAddOptions(short_buf.b()).Union());
    CHECK_THROWS_WITH(import_tflite(short_buf.save("short.tflite", {sx}, {sy})),
                      Catch::Contains("needs 16 bytes, its buffer holds 3"));
  }
  SECTION("int8 steps whose grids the interpreter's integer arithmetic cannot hold") {
    // QUANTIZE int8 -> int8 from scale 100 to 1e-8: a multiplier of 1e10, beyond the fixed-point form's 2^31.
    TfliteModel m;
    const int x = m.tensor("x", {1, 4}, I8, {}, {{100.0f}, {0}});
    const int y = m.tensor("y", {1, 4}, I8, {}, {{1e-8f}, {0}});
    m.op(114, {x}, {y});
    CHECK_THROWS_WITH(import_tflite(m.save("requant_far.tflite", {x}, {y})),
                      Catch::Contains("requant_far.tflite") && Catch::Contains("beyond 2^31") && Catch::Contains("quantization"));
    // An int8 ADD whose scale ratios lie outside XNNPACK's range imports, rounded from float (not marked).
    TfliteModel a;
    const int p = a.tensor("p", {1, 4}, I8, {}, {{1.0f}, {0}}), q = a.tensor("q", {1, 4}, I8, {}, {{1.0f}, {0}});
    const int s = a.tensor("s", {1, 4}, I8, {}, {{1e-4f}, {0}});
    a.op(0, {p, q}, {s}, fb::BuiltinOptions::AddOptions, fb::CreateAddOptions(a.b()).Union());
    const Model model = import_tflite(a.save("add_far.tflite", {p, q}, {s}));
    for (const Layer& l : detail::impl_of(model).graph.layers)
      if (l.type == "add") CHECK_FALSE(core::requantizes_as_tflite(l));
  }
  SECTION("a shape the file contradicts") {
    TfliteModel m;
    const int x = m.tensor("x", {1, 4, 4, 2});
    const int y = m.tensor("y", {1, 4, 4, 3});  // a RELU cannot change the channels
    m.op(19, {x}, {y});
    CHECK_THROWS_WITH(import_tflite(m.save("bad_shape.tflite", {x}, {y})), Catch::Contains("the file gives tensor 'y' the shape [1,4,4,3]"));
  }
}

// Before, a second output of a name another output held was dropped, and the
// first answered with the second's values.
TEST_CASE("TFLite outputs of one name are all kept, each with its own values", "[tflite]") {
  TfliteModel m;
  const int x = m.tensor("x", {1, 4});
  const int a = m.tensor("y", {1, 4});
  const int b = m.tensor("y", {1, 4});  // another tensor of the same name
  m.op(19, {x}, {a});                   // RELU
  m.op(18, {x, x}, {b}, fb::BuiltinOptions::MulOptions, fb::CreateMulOptions(m.b()).Union());  // x * x
  const Model model = import_tflite(m.save("same_names.tflite", {x}, {a, b, a}));
  REQUIRE(model.outputs().size() == 3);
  Session s(model);
  Blob in = Blob::allocate(Shape{1, 4});
  const float xs[4] = {-2, -1, 1, 3};
  std::memcpy(in.data(), xs, sizeof xs);
  const std::vector<NamedBlob> ins{{"x", in}};
  const std::vector<NamedBlob> out = s.run(ins);
  REQUIRE(out.size() == 3);
  CHECK(out[0].name == "y");
  CHECK(out[1].name != "y");
  CHECK(out[2].name != out[1].name);
  const float relu[4] = {0, 0, 1, 3}, square[4] = {4, 1, 1, 9};
  for (int i = 0; i < 4; ++i) {
    const auto at = [&](std::size_t k) { return static_cast<const float*>(out[k].blob.data())[i]; };
    CHECK(at(0) == relu[i]);
    CHECK(at(1) == square[i]);
    CHECK(at(2) == relu[i]);  // the first tensor, listed again
  }
}

TEST_CASE("Hand-made TFLite operators that LiteRT refuses are errors, never a crash", "[tflite][errors]") {
  SECTION("FULLY_CONNECTED with weights [4, 0] (a modulo by zero: SIGFPE)") {
    TfliteModel m;
    const int x = m.tensor("x", {1, 4});
    const int y = m.tensor("y", {1, 4});
    m.op(9, {x, m.empty_constant("w", {4, 0})}, {y}, fb::BuiltinOptions::FullyConnectedOptions,
         fb::CreateFullyConnectedOptions(m.b()).Union());
    CHECK_THROWS_WITH(import_tflite(m.save("fc_empty.tflite", {x}, {y})), Catch::Contains("weights"));
  }
  SECTION("BATCH_MATMUL with adj_x or adj_y on an operand of rank 0 or 1 (a write outside the permutation)") {
    for (const auto& [adj_x, rank] : std::vector<std::pair<bool, int>>{{true, 1}, {false, 1}, {true, 0}}) {
      INFO("adj_x " << adj_x << " rank " << rank);
      TfliteModel m;
      const std::vector<int32_t> short_shape = rank == 1 ? std::vector<int32_t>{4} : std::vector<int32_t>{};
      const int a = m.tensor("a", adj_x ? short_shape : std::vector<int32_t>{4, 4});
      const int b = m.tensor("b", adj_x ? std::vector<int32_t>{4, 4} : short_shape);
      const int y = m.tensor("y", {4, 4});
      m.op(126, {a, b}, {y}, fb::BuiltinOptions::BatchMatMulOptions, fb::CreateBatchMatMulOptions(m.b(), adj_x, !adj_x).Union());
      CHECK_THROWS_WITH(import_tflite(m.save("bmm_adj.tflite", {a, b}, {y})), Catch::Contains(adj_x ? "adj_x" : "adj_y"));
    }
  }
  SECTION("PACK whose axis is past an input's rank (checked against the output's only)") {
    TfliteModel m;
    const int a = m.tensor("a", {2});
    const int b = m.tensor("b", {2});
    const int y = m.tensor("y", {2, 2, 1, 1});
    m.op(83, {a, b}, {y}, fb::BuiltinOptions::PackOptions, fb::CreatePackOptions(m.b(), 2, 3).Union());
    CHECK_THROWS_WITH(import_tflite(m.save("pack_axis.tflite", {a, b}, {y})), Catch::Contains("rank"));
  }
  SECTION("SLICE with an empty begin (read before its length was checked)") {
    TfliteModel m;
    const int x = m.tensor("x", {2, 3});
    const int y = m.tensor("y", {1, 1});
    m.op(65, {x, m.tensor("begin", {0}, I32, {0}), m.int32s("size", {2}, {1, 1})}, {y});
    CHECK_THROWS_WITH(import_tflite(m.save("slice_empty.tflite", {x}, {y})), Catch::Contains("begin"));
  }
}
