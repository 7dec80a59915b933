// Each supported ONNX operator (and its opset variants), imported and run on
// the cpu/ref routines, against values computed here by plain loops.
#include "import/onnx_test_util.hpp"

#include <softneuro/tune.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

using namespace softneuro;
using namespace softneuro::test;

namespace {

/// The session's steps that compute, adapts (layout changes around a routine in
/// another layout: XNNPACK's nhwc on aarch64) left out.
std::size_t computing_steps(const Session& s) {
  std::size_t n = 0;
  for (const LayerSummary& l : s.layers()) n += l.type != "adapt";
  return n;
}

constexpr double kTol = 1e-5;

/// Reference 2-D convolution, NCHW, pads {top, left, bottom, right}.
std::vector<float> ref_conv(const std::vector<float>& x, const Shape& xs, const std::vector<float>& w, const Shape& ws,
                            const std::vector<float>& b, std::array<int64_t, 2> s, std::array<int64_t, 4> p,
                            std::array<int64_t, 2> d, int64_t group, Shape* out_shape) {
  const int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], oc = ws[0], kh = ws[2], kw = ws[3];
  const int64_t oh = (h + p[0] + p[2] - d[0] * (kh - 1) - 1) / s[0] + 1;
  const int64_t ow = (wd + p[1] + p[3] - d[1] * (kw - 1) - 1) / s[1] + 1;
  *out_shape = Shape{n, oc, oh, ow};
  std::vector<float> y(static_cast<std::size_t>(n * oc * oh * ow));
  const int64_t icg = c / group, ocg = oc / group;
  for (int64_t in = 0; in < n; ++in)
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = b.empty() ? 0 : b[static_cast<std::size_t>(o)];
          for (int64_t ci = 0; ci < icg; ++ci)
            for (int64_t ki = 0; ki < kh; ++ki)
              for (int64_t kj = 0; kj < kw; ++kj) {
                const int64_t yy = i * s[0] - p[0] + ki * d[0], xx = j * s[1] - p[1] + kj * d[1];
                if (yy < 0 || yy >= h || xx < 0 || xx >= wd) continue;
                const int64_t cc = (o / ocg) * icg + ci;
                acc += double(x[static_cast<std::size_t>(((in * c + cc) * h + yy) * wd + xx)]) *
                       w[static_cast<std::size_t>(((o * icg + ci) * kh + ki) * kw + kj)];
              }
          y[static_cast<std::size_t>(((in * oc + o) * oh + i) * ow + j)] = static_cast<float>(acc);
        }
  return y;
}

template <class F>
std::vector<float> map_values(const std::vector<float>& x, F f) {
  std::vector<float> y(x.size());
  std::transform(x.begin(), x.end(), y.begin(), f);
  return y;
}

/// A model x -> OP -> y with the given extra inputs; returns the node for attributes.
NodeRef unary_model(OnnxModel& m, const std::string& op, const Shape& xs, std::vector<std::string> extra = {}) {
  m.input("x", xs.to_vector()).output("y");
  std::vector<std::string> ins{"x"};
  ins.insert(ins.end(), extra.begin(), extra.end());
  return m.node(op, ins, {"y"}, op);
}

}  // namespace

TEST_CASE("Conv: strides, asymmetric pads, dilations, bias", "[onnx][conv]") {
  const Shape xs{1, 2, 7, 6}, ws{3, 2, 3, 3};
  auto x = random_values(static_cast<std::size_t>(xs.numel()), 1);
  auto w = random_values(static_cast<std::size_t>(ws.numel()), 2);
  auto b = random_values(3, 3);
  OnnxModel m(13);
  m.init("W", ws.to_vector(), w).init("B", {3}, b);
  unary_model(m, "Conv", xs, {"W", "B"}).ints("strides", {2, 1}).ints("pads", {1, 0, 0, 2}).ints("dilations", {1, 2}).ints("kernel_shape", {3, 3});
  Output got = run_model(m, "conv.onnx", xs, x);
  Shape es;
  auto expected = ref_conv(x, xs, w, ws, b, {2, 1}, {1, 0, 0, 2}, {1, 2}, 1, &es);
  CHECK(got.shape == es);
  CHECK(max_abs_diff(got.values, expected) < kTol);
}

TEST_CASE("Conv: depthwise with auto_pad SAME_UPPER and SAME_LOWER", "[onnx][conv]") {
  const Shape xs{1, 4, 6, 6}, ws{4, 1, 2, 2};
  auto x = random_values(static_cast<std::size_t>(xs.numel()), 4);
  auto w = random_values(static_cast<std::size_t>(ws.numel()), 5);
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER"}) {
    OnnxModel m(11);
    m.init("W", ws.to_vector(), w);
    unary_model(m, "Conv", xs, {"W"}).i("group", 4).s("auto_pad", mode);
    Output got = run_model(m, "conv_same.onnx", xs, x);
    // kernel 2, stride 1: one pad in total, at the end (UPPER) or the beginning (LOWER).
    std::array<int64_t, 4> pads = std::string(mode) == "SAME_UPPER" ? std::array<int64_t, 4>{0, 0, 1, 1} : std::array<int64_t, 4>{1, 1, 0, 0};
    Shape es;
    auto expected = ref_conv(x, xs, w, ws, {}, {1, 1}, pads, {1, 1}, 4, &es);
    CHECK(got.shape == Shape{1, 4, 6, 6});
    CHECK(max_abs_diff(got.values, expected) < kTol);
  }
}

TEST_CASE("Conv weights through Identity of an initializer", "[onnx][conv][identity]") {
  // Exporters share weights as Identity(initializer): the weight must stay a constant.
  const Shape xs{1, 2, 4, 4}, ws{2, 2, 1, 1};
  auto x = random_values(32, 6);
  auto w = random_values(4, 7);
  OnnxModel m(13);
  m.init("W0", ws.to_vector(), w);
  m.input("x", xs.to_vector()).output("y");
  m.node("Identity", {"W0"}, {"W"});
  m.node("Conv", {"x", "W"}, {"y"});
  Output got = run_model(m, "conv_identity.onnx", xs, x);
  Shape es;
  CHECK(max_abs_diff(got.values, ref_conv(x, xs, w, ws, {}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, &es)) < kTol);
}

TEST_CASE("Gemm: transA/transB, alpha, beta, C as bias or full matrix, B at run time", "[onnx][gemm]") {
  const int64_t M = 3, K = 4, N = 5;
  auto a = random_values(M * K, 8), b = random_values(K * N, 9), c_row = random_values(N, 10), c_full = random_values(M * N, 11);
  auto expected = [&](const std::vector<float>& c, bool full, float alpha, float beta) {
    std::vector<float> y(M * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(a[i * K + k]) * b[k * N + j];
        y[i * N + j] = static_cast<float>(alpha * acc + beta * (full ? c[i * N + j] : c[j]));
      }
    return y;
  };
  SECTION("constant B (transposed), C one row: one dense layer") {
    std::vector<float> bt(K * N);  // B' stored [N,K]
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) bt[j * K + k] = b[k * N + j];
    OnnxModel m(13);
    m.init("B", {N, K}, bt).init("C", {N}, c_row);
    unary_model(m, "Gemm", Shape{M, K}, {"B", "C"}).i("transB", 1).f("alpha", 0.5f).f("beta", 2.0f);
    Model net = import_onnx(m.save("gemm1.onnx"));
    CHECK(count_layers(net, "dense") == 1);
    CHECK(computing_steps(Session(net)) == 1);
    auto got = run_net(net, {{"x", make_input(Shape{M, K}, a)}})[0];
    CHECK(max_abs_diff(got.values, expected(c_row, false, 0.5f, 2.0f)) < kTol);
  }
  SECTION("C one row of shape [1,N]: the dense layer's bias") {
    // Refused before ("bias has shape [1,5], expected [5]"; ONNX's test_gemm_default_vector_bias).
    OnnxModel m(13);
    m.init("B", {K, N}, b).init("C", {1, N}, c_row);
    unary_model(m, "Gemm", Shape{M, K}, {"B", "C"});
    Model net = import_onnx(m.save("gemm_row.onnx"));
    CHECK(count_layers(net, "dense") == 1);
    auto got = run_net(net, {{"x", make_input(Shape{M, K}, a)}})[0];
    CHECK(max_abs_diff(got.values, expected(c_row, false, 1.0f, 1.0f)) < kTol);
  }
  SECTION("transA, C a full matrix") {
    std::vector<float> at(M * K);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) at[k * M + i] = a[i * K + k];
    OnnxModel m(11);
    m.init("B", {K, N}, b).init("C", {M, N}, c_full);
    unary_model(m, "Gemm", Shape{K, M}, {"B", "C"}).i("transA", 1).f("beta", 0.25f);
    auto got = run_model(m, "gemm2.onnx", Shape{K, M}, at);
    CHECK(max_abs_diff(got.values, expected(c_full, true, 1.0f, 0.25f)) < kTol);
  }
  SECTION("B computed at run time") {
    OnnxModel m(13);
    m.input("x", {M, K}).input("b", {K, N}).init("C", {N}, c_row).output("y");
    m.node("Gemm", {"x", "b", "C"}, {"y"}).f("alpha", 2.0f);
    Model net = import_onnx(m.save("gemm3.onnx"));
    CHECK(count_layers(net, "matmul") == 1);
    auto got = run_net(net, {{"x", make_input(Shape{M, K}, a)}, {"b", make_input(Shape{K, N}, b)}})[0];
    CHECK(max_abs_diff(got.values, expected(c_row, false, 2.0f, 1.0f)) < kTol);
  }
}

TEST_CASE("MatMul: constant weight becomes dense, run-time operands a batched matmul", "[onnx][matmul]") {
  const int64_t B = 2, M = 3, K = 4, N = 2;
  auto a = random_values(B * M * K, 12), w = random_values(K * N, 13), b2 = random_values(B * K * N, 14);
  auto ref = [&](const std::vector<float>& rhs, bool batched) {
    std::vector<float> y(B * M * N);
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k) acc += double(a[(bb * M + i) * K + k]) * rhs[(batched ? bb * K * N : 0) + k * N + j];
          y[(bb * M + i) * N + j] = static_cast<float>(acc);
        }
    return y;
  };
  {
    OnnxModel m(13);
    m.init("W", {K, N}, w);
    unary_model(m, "MatMul", Shape{B, M, K}, {"W"});
    Model net = import_onnx(m.save("matmul1.onnx"));
    CHECK(count_layers(net, "dense") == 1);
    auto got = run_net(net, {{"x", make_input(Shape{B, M, K}, a)}})[0];
    CHECK(got.shape == Shape{B, M, N});
    CHECK(max_abs_diff(got.values, ref(w, false)) < kTol);
  }
  {
    OnnxModel m(13);
    m.input("x", {B, M, K}).input("w", {B, K, N}).output("y");
    m.node("MatMul", {"x", "w"}, {"y"});
    Model net = import_onnx(m.save("matmul2.onnx"));
    auto got = run_net(net, {{"x", make_input(Shape{B, M, K}, a)}, {"w", make_input(Shape{B, K, N}, b2)}})[0];
    CHECK(max_abs_diff(got.values, ref(b2, true)) < kTol);
  }
}

TEST_CASE("Einsum batched matrix products (attention) become matmul", "[onnx][matmul]") {
  const int64_t B = 2, I = 3, J = 4, D = 5;
  auto q = random_values(B * I * D, 34), k = random_values(B * J * D, 35);
  OnnxModel m(13);
  m.input("q", {B, I, D}).input("k", {B, J, D}).output("s").output("o");
  m.node("Einsum", {"q", "k"}, {"s"}).s("equation", "b i d, b j d -> b i j");  // q k^T
  m.node("Einsum", {"s", "k"}, {"o"}).s("equation", "...ij,...jd->...id");    // s k
  Model net = import_onnx(m.save("einsum.onnx"));
  auto outs = run_net(net, {{"q", make_input(Shape{B, I, D}, q)}, {"k", make_input(Shape{B, J, D}, k)}});
  REQUIRE(outs[0].shape == Shape{B, I, J});
  REQUIRE(outs[1].shape == Shape{B, I, D});
  std::vector<float> s(B * I * J), o(B * I * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t j = 0; j < J; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += double(q[(b * I + i) * D + d]) * k[(b * J + j) * D + d];
        s[(b * I + i) * J + j] = static_cast<float>(acc);
      }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < J; ++j) acc += double(s[(b * I + i) * J + j]) * k[(b * J + j) * D + d];
        o[(b * I + i) * D + d] = static_cast<float>(acc);
      }
  CHECK(max_abs_diff(outs[0].values, s) < kTol);
  CHECK(max_abs_diff(outs[1].values, o) < kTol);
  OnnxModel bad(13);
  bad.input("x", {3, 3}).output("y");
  bad.node("Einsum", {"x"}, {"y"}).s("equation", "ij->ik");  // k in no operand
  CHECK_THROWS_WITH(import_onnx(bad.save("einsum_bad.onnx")), Catch::Contains("output letter 'k'"));
}

TEST_CASE("Activations: Relu, Sigmoid, Tanh, HardSwish, HardSigmoid, Gelu", "[onnx][activation]") {
  const Shape xs{2, 8};
  std::vector<float> x = random_values(16, 15);
  for (auto& v : x) v *= 5;
  struct Case {
    const char* op;
    std::function<float(float)> f;
  };
  const Case cases[] = {
      {"Relu", [](float v) { return std::max(v, 0.0f); }},
      {"Sigmoid", [](float v) { return 1.0f / (1.0f + std::exp(-v)); }},
      {"Tanh", [](float v) { return std::tanh(v); }},
      {"HardSwish", [](float v) { return v * std::clamp(v + 3.0f, 0.0f, 6.0f) / 6.0f; }},
      {"HardSigmoid", [](float v) { return std::clamp(0.3f * v + 0.4f, 0.0f, 1.0f); }},
      {"Gelu", [](float v) { return 0.5f * v * (1.0f + std::erf(v / std::sqrt(2.0f))); }},
  };
  for (const auto& c : cases) {
    INFO(c.op);
    OnnxModel m(14);
    auto n = unary_model(m, c.op, xs);
    if (std::string(c.op) == "HardSigmoid") n.f("alpha", 0.3f).f("beta", 0.4f);
    auto got = run_model(m, std::string(c.op) + ".onnx", xs, x);
    std::vector<float> expected(x.size());
    std::transform(x.begin(), x.end(), expected.begin(), c.f);
    CHECK(max_abs_diff(got.values, expected) < kTol);
  }
}

TEST_CASE("Unary math and activations: Abs, Neg, Sqrt, Exp, Log, Erf, Reciprocal, LeakyRelu, PRelu", "[onnx][activation]") {
  const Shape xs{1, 3, 2, 2};
  std::vector<float> x = random_values(12, 31);
  std::vector<float> positive = x;
  for (auto& v : positive) v = std::fabs(v) + 0.25f;  // Sqrt, Log, Reciprocal
  struct Case {
    const char* op;
    bool positive_input;
    std::function<float(float)> f;
  };
  const Case cases[] = {
      {"Abs", false, [](float v) { return std::fabs(v); }},
      {"Neg", false, [](float v) { return -v; }},
      {"Sqrt", true, [](float v) { return std::sqrt(v); }},
      {"Exp", false, [](float v) { return std::exp(v); }},
      {"Log", true, [](float v) { return std::log(v); }},
      {"Erf", false, [](float v) { return std::erf(v); }},
      {"Reciprocal", true, [](float v) { return 1.0f / v; }},
      {"LeakyRelu", false, [](float v) { return v < 0 ? 0.2f * v : v; }},
  };
  for (const auto& c : cases) {
    INFO(c.op);
    OnnxModel m(13);
    auto n = unary_model(m, c.op, xs);
    if (std::string(c.op) == "LeakyRelu") n.f("alpha", 0.2f);
    const auto& in = c.positive_input ? positive : x;
    auto got = run_model(m, std::string(c.op) + ".onnx", xs, in);
    CHECK(max_abs_diff(got.values, map_values(in, c.f)) < kTol);
  }
  SECTION("PRelu with a per-channel slope") {
    OnnxModel m(13);
    m.init("slope", {3, 1, 1}, {0.1f, 0.5f, -1.0f});
    unary_model(m, "PRelu", xs, {"slope"});
    auto got = run_model(m, "prelu.onnx", xs, x);
    std::vector<float> want(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float slope = std::vector<float>{0.1f, 0.5f, -1.0f}[i / 4];
      want[i] = x[i] < 0 ? slope * x[i] : x[i];
    }
    CHECK(max_abs_diff(got.values, want) < kTol);
  }
}

TEST_CASE("Pow: squared as mul, a constant exponent, a run-time exponent", "[onnx][pow]") {
  const Shape xs{2, 5};
  std::vector<float> x = random_values(10, 32);
  for (auto& v : x) v = std::fabs(v) + 0.5f;
  for (float e : {2.0f, 0.5f, 3.0f}) {
    INFO("exponent " << e);
    OnnxModel m(13);
    m.init("e", {}, {e});
    unary_model(m, "Pow", xs, {"e"});
    auto got = run_model(m, "pow.onnx", xs, x);
    CHECK(max_abs_diff(got.values, map_values(x, [e](float v) { return std::pow(v, e); })) < kTol);
  }
  SECTION("exponent per column, computed at run time") {
    OnnxModel m(13);
    m.input("x", xs.to_vector()).output("y");
    m.init("k", {5}, {1, 2, 0.5f, -1, 3});
    m.node("Abs", {"x"}, {"e"});          // run-time values
    m.node("Mul", {"e", "k"}, {"e2"});
    m.node("Pow", {"x", "e2"}, {"y"});
    auto got = run_model(m, "pow_runtime.onnx", xs, x);
    std::vector<float> want(x.size());
    const float k[] = {1, 2, 0.5f, -1, 3};
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = std::pow(x[i], std::fabs(x[i]) * k[i % 5]);
    CHECK(max_abs_diff(got.values, want) < 1e-4);
  }
}

TEST_CASE("Clip: opset-13 bounds as inputs (initializer, Constant node, absent), opset-11 attributes-free", "[onnx][clip]") {
  const Shape xs{1, 10};
  std::vector<float> x = random_values(10, 16);
  for (auto& v : x) v *= 10;
  SECTION("min and max initializers (relu6)") {
    OnnxModel m(13);
    m.init("lo", {}, {0.0f}).init("hi", {}, {6.0f});
    unary_model(m, "Clip", xs, {"lo", "hi"});
    auto got = run_model(m, "clip1.onnx", xs, x);
    CHECK(max_abs_diff(got.values, map_values(x, [](float v) { return std::clamp(v, 0.0f, 6.0f); })) < kTol);
  }
  SECTION("max from a Constant node, min skipped with an empty name") {
    OnnxModel m(13);
    m.node("Constant", {}, {"hi"}).t("value", float_tensor({}, {2.5f}));
    unary_model(m, "Clip", xs, {"", "hi"});
    auto got = run_model(m, "clip2.onnx", xs, x);
    CHECK(max_abs_diff(got.values, map_values(x, [](float v) { return std::min(v, 2.5f); })) < kTol);
  }
  SECTION("min above max: every value is max (refused before: 'clip min 2 > max 1')") {
    OnnxModel m(13);
    m.init("lo", {}, {2.0f}).init("hi", {}, {1.0f});
    unary_model(m, "Clip", xs, {"lo", "hi"});
    auto got = run_model(m, "clip_inverted.onnx", xs, x);
    CHECK(max_abs_diff(got.values, std::vector<float>(x.size(), 1.0f)) < kTol);
  }
  SECTION("no bounds") {
    OnnxModel m(11);
    unary_model(m, "Clip", xs);
    auto got = run_model(m, "clip3.onnx", xs, x);
    CHECK(max_abs_diff(got.values, x) < kTol);
  }
}

TEST_CASE("Add, Sub, Mul, Div with broadcast constants", "[onnx][binary]") {
  const Shape xs{2, 3, 4};
  auto x = random_values(24, 17), c = random_values(4, 18);
  for (auto& v : c) v += 2;  // no division by ~0
  const std::pair<const char*, float (*)(float, float)> ops[] = {
      {"Add", [](float a, float b) { return a + b; }}, {"Sub", [](float a, float b) { return a - b; }},
      {"Mul", [](float a, float b) { return a * b; }}, {"Div", [](float a, float b) { return a / b; }}};
  for (const auto& [op, f] : ops) {
    INFO(op);
    OnnxModel m(13);
    m.init("c", {4}, c);
    unary_model(m, op, xs, {"c"});
    auto got = run_model(m, std::string(op) + ".onnx", xs, x);
    std::vector<float> expected(24);
    for (std::size_t i = 0; i < 24; ++i) expected[i] = f(x[i], c[i % 4]);
    CHECK(max_abs_diff(got.values, expected) < kTol);
  }
}

TEST_CASE("Pooling: MaxPool ceil_mode with pads, AveragePool count_include_pad, global pools", "[onnx][pool]") {
  const Shape xs{1, 2, 5, 5};
  auto x = random_values(50, 19);
  auto at = [&](int64_t c, int64_t i, int64_t j) { return x[static_cast<std::size_t>((c * 5 + i) * 5 + j)]; };
  SECTION("MaxPool 2x2 stride 2 ceil_mode: 3x3 out, the last window cut") {
    OnnxModel m(13);
    unary_model(m, "MaxPool", xs).ints("kernel_shape", {2, 2}).ints("strides", {2, 2}).i("ceil_mode", 1);
    auto got = run_model(m, "maxpool.onnx", xs, x);
    REQUIRE(got.shape == Shape{1, 2, 3, 3});
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t a = 2 * i; a < std::min<int64_t>(2 * i + 2, 5); ++a)
            for (int64_t b = 2 * j; b < std::min<int64_t>(2 * j + 2, 5); ++b) mx = std::max(mx, at(c, a, b));
          CHECK(got.values[static_cast<std::size_t>((c * 3 + i) * 3 + j)] == mx);
        }
  }
  for (int include : {0, 1}) {
    OnnxModel m(13);
    unary_model(m, "AveragePool", xs).ints("kernel_shape", {3, 3}).ints("pads", {1, 1, 1, 1}).i("count_include_pad", include);
    auto got = run_model(m, "avgpool.onnx", xs, x);
    REQUIRE(got.shape == xs);
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          double sum = 0;
          int count = 0;
          for (int64_t a = i - 1; a <= i + 1; ++a)
            for (int64_t b = j - 1; b <= j + 1; ++b)
              if (a >= 0 && a < 5 && b >= 0 && b < 5) {
                sum += at(c, a, b);
                ++count;
              }
          CHECK(got.values[static_cast<std::size_t>((c * 5 + i) * 5 + j)] == Approx(sum / (include ? 9 : count)).margin(kTol));
        }
  }
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    OnnxModel m(13);
    unary_model(m, op, xs);
    auto got = run_model(m, "global.onnx", xs, x);
    REQUIRE(got.shape == Shape{1, 2, 1, 1});
    for (int64_t c = 0; c < 2; ++c) {
      auto first = x.begin() + c * 25, last = first + 25;
      float e = std::string(op) == "GlobalMaxPool" ? *std::max_element(first, last) : std::accumulate(first, last, 0.0f) / 25;
      CHECK(got.values[static_cast<std::size_t>(c)] == Approx(e).margin(kTol));
    }
  }
}

// Refused before ("only 2-D pooling"); now two 2-D poolings (over H and W, then D).
TEST_CASE("3-D MaxPool, AveragePool and LpPool: strides, dilations, pads, ceil mode, count_include_pad", "[onnx][pool]") {
  const Shape xs{1, 2, 5, 6, 7};
  auto x = random_values(static_cast<std::size_t>(xs.numel()), 23);
  auto at = [&](int64_t c, int64_t d, int64_t h, int64_t w) { return x[static_cast<std::size_t>(((c * 5 + d) * 6 + h) * 7 + w)]; };
  const std::vector<int64_t> k{2, 3, 2}, st{2, 1, 2}, dil{1, 2, 1}, pads{1, 1, 0, 0, 1, 1};
  for (const char* op : {"MaxPool", "AveragePool", "LpPool"})
    for (int ceil : {0, 1})
      for (int include : {0, 1}) {
        if (std::string(op) == "LpPool" && (ceil || !include)) continue;  // LpPool: no ceil_mode before opset 18, sums
        INFO(op << " ceil_mode " << ceil << " count_include_pad " << include);
        OnnxModel m(18);
        NodeRef node = unary_model(m, op, xs);
        node.ints("kernel_shape", k).ints("strides", st).ints("dilations", dil).ints("pads", pads);
        if (std::string(op) != "LpPool") node.i("ceil_mode", ceil);
        if (std::string(op) == "AveragePool") node.i("count_include_pad", include);
        auto got = run_model(m, "pool3d.onnx", xs, x);
        std::vector<int64_t> out(3);
        const int64_t in[3] = {5, 6, 7};
        for (int a = 0; a < 3; ++a) {
          const int64_t span = in[a] + pads[a] + pads[a + 3] - (k[a] - 1) * dil[a] - 1;
          out[a] = (ceil ? (span + st[a] - 1) / st[a] : span / st[a]) + 1;
          if (ceil && (out[a] - 1) * st[a] >= in[a] + pads[a]) --out[a];  // no window starting in the end padding
        }
        REQUIRE(got.shape == Shape{1, 2, out[0], out[1], out[2]});
        std::size_t i = 0;
        for (int64_t c = 0; c < 2; ++c)
          for (int64_t od = 0; od < out[0]; ++od)
            for (int64_t oh = 0; oh < out[1]; ++oh)
              for (int64_t ow = 0; ow < out[2]; ++ow, ++i) {
                double mx = -INFINITY, sum = 0, sum_sq = 0;
                int64_t valid = 0, padded = 1;
                const int64_t o[3] = {od, oh, ow};
                for (int a = 0; a < 3; ++a) {  // taps inside the padded input along each axis
                  int64_t n = 0;
                  for (int64_t t = 0; t < k[a]; ++t)
                    n += o[a] * st[a] - pads[a] + t * dil[a] < in[a] + pads[a + 3];
                  padded *= n;
                }
                for (int64_t a = 0; a < k[0]; ++a)
                  for (int64_t b = 0; b < k[1]; ++b)
                    for (int64_t e = 0; e < k[2]; ++e) {
                      const int64_t d = od * st[0] - pads[0] + a * dil[0], h = oh * st[1] - pads[1] + b * dil[1],
                                    w = ow * st[2] - pads[2] + e * dil[2];
                      if (d < 0 || d >= 5 || h < 0 || h >= 6 || w < 0 || w >= 7) continue;
                      mx = std::max(mx, double(at(c, d, h, w)));
                      sum += at(c, d, h, w);
                      sum_sq += double(at(c, d, h, w)) * at(c, d, h, w);
                      ++valid;
                    }
                const double want = std::string(op) == "MaxPool" ? mx
                                    : std::string(op) == "LpPool" ? std::sqrt(sum_sq)
                                                                  : sum / double(include ? padded : valid);
                CHECK(got.values[i] == Approx(want).margin(kTol));
              }
      }
}

// Refused before (an unsupported node); now a dense layer over theta with the
// constant homogeneous coordinates as its weight.
TEST_CASE("AffineGrid 2-D and 3-D, align_corners 0 and 1", "[onnx][grid]") {
  for (int spatial : {2, 3})
    for (int align : {0, 1}) {
      INFO(spatial << "-D, align_corners " << align);
      const std::vector<int64_t> size = spatial == 2 ? std::vector<int64_t>{2, 3, 4, 5} : std::vector<int64_t>{2, 3, 3, 4, 1};
      const Shape ts{2, spatial, spatial + 1};
      auto theta = random_values(static_cast<std::size_t>(ts.numel()), 29);
      OnnxModel m(20);
      m.init_ints("size", {static_cast<int64_t>(size.size())}, size);
      unary_model(m, "AffineGrid", ts, {"size"}).i("align_corners", align);
      auto got = run_model(m, "affine_grid.onnx", ts, theta);
      const int64_t d = spatial == 3 ? size[2] : 1, h = size[size.size() - 2], w = size[size.size() - 1];
      std::vector<int64_t> want_shape{2};
      if (spatial == 3) want_shape.push_back(d);
      want_shape.insert(want_shape.end(), {h, w, spatial});
      REQUIRE(got.shape == Shape(want_shape));
      auto coord = [&](int64_t i, int64_t len) {
        if (align) return len == 1 ? -1.0 : -1.0 + 2.0 * double(i) / double(len - 1);
        return (2.0 * double(i) + 1.0) / double(len) - 1.0;
      };
      std::size_t k = 0;
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t z = 0; z < d; ++z)
          for (int64_t y = 0; y < h; ++y)
            for (int64_t x = 0; x < w; ++x) {
              std::vector<double> point{coord(x, w), coord(y, h)};
              if (spatial == 3) point.push_back(coord(z, d));
              point.push_back(1.0);
              for (int64_t r = 0; r < spatial; ++r, ++k) {
                double want = 0;
                for (int64_t c = 0; c <= spatial; ++c)
                  want += theta[static_cast<std::size_t>((n * spatial + r) * (spatial + 1) + c)] * point[static_cast<std::size_t>(c)];
                CHECK(got.values[k] == Approx(want).margin(kTol));
              }
            }
    }
}

TEST_CASE("ReduceMean over spatial and trailing axes", "[onnx][reduce]") {
  const Shape xs{2, 3, 4};
  auto x = random_values(24, 20);
  OnnxModel m(13);
  unary_model(m, "ReduceMean", xs).ints("axes", {1, 2}).i("keepdims", 0);
  auto got = run_model(m, "reducemean.onnx", xs, x);
  REQUIRE(got.shape == Shape{2});
  for (int b = 0; b < 2; ++b)
    CHECK(got.values[static_cast<std::size_t>(b)] == Approx(std::accumulate(x.begin() + b * 12, x.begin() + b * 12 + 12, 0.0) / 12).margin(kTol));
}

TEST_CASE("ReduceSum (axes input), ReduceMin, ReduceL2 over any axes become the reduce layer", "[onnx][reduce]") {
  const Shape xs{2, 3, 4};
  auto x = random_values(24, 21);
  auto at = [&](int a, int b, int c) { return x[static_cast<std::size_t>((a * 3 + b) * 4 + c)]; };
  SECTION("ReduceSum over axes 0 and 2 (opset 13: axes as an input), keepdims") {
    OnnxModel m(13);
    m.init_ints("axes", {2}, {0, -1});
    unary_model(m, "ReduceSum", xs, {"axes"});
    auto got = run_model(m, "reducesum.onnx", xs, x);
    REQUIRE(got.shape == Shape{1, 3, 1});
    for (int b = 0; b < 3; ++b) {
      double sum = 0;
      for (int a = 0; a < 2; ++a)
        for (int c = 0; c < 4; ++c) sum += at(a, b, c);
      CHECK(got.values[static_cast<std::size_t>(b)] == Approx(sum).margin(kTol));
    }
  }
  SECTION("ReduceMin over axis 1, keepdims 0") {
    OnnxModel m(13);
    unary_model(m, "ReduceMin", xs).ints("axes", {1}).i("keepdims", 0);
    auto got = run_model(m, "reducemin.onnx", xs, x);
    REQUIRE(got.shape == Shape{2, 4});
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 4; ++c)
        CHECK(got.values[static_cast<std::size_t>(a * 4 + c)] == std::min({at(a, 0, c), at(a, 1, c), at(a, 2, c)}));
  }
  SECTION("ReduceL2 over every axis") {
    OnnxModel m(13);
    unary_model(m, "ReduceL2", xs).i("keepdims", 0);
    auto got = run_model(m, "reducel2.onnx", xs, x);
    double sq = 0;
    for (float v : x) sq += double(v) * v;
    REQUIRE(got.values.size() == 1);
    CHECK(got.values[0] == Approx(std::sqrt(sq)).margin(kTol));
  }
}

TEST_CASE("LogSoftmax, ReduceLogSumExp, ReduceLogSum, ReduceL1, ReduceSumSquare, Sum, Mean, Max, Min, Softsign, Softplus, Elu, Selu, CastLike",
          "[onnx][reduce]") {
  const Shape xs{2, 3, 4};
  auto x = random_values(24, 41);
  for (auto& v : x) v *= 30;  // exp(30 * 1) overflows nothing only where the max is subtracted first
  auto at = [&](int64_t a, int64_t b, int64_t c) { return double(x[static_cast<std::size_t>((a * 3 + b) * 4 + c)]); };
  SECTION("LogSoftmax over the last axis, stable for large inputs") {
    OnnxModel m(13);
    unary_model(m, "LogSoftmax", xs);
    auto got = run_model(m, "log_softmax.onnx", xs, x);
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b) {
        double mx = -1e300, sum = 0;
        for (int64_t c = 0; c < 4; ++c) mx = std::max(mx, at(a, b, c));
        for (int64_t c = 0; c < 4; ++c) sum += std::exp(at(a, b, c) - mx);
        for (int64_t c = 0; c < 4; ++c)
          CHECK(got.values[static_cast<std::size_t>((a * 3 + b) * 4 + c)] == Approx(at(a, b, c) - mx - std::log(sum)).margin(1e-4));
      }
  }
  for (int keep : {0, 1}) {
    INFO("keepdims " << keep);
    OnnxModel m(13);
    unary_model(m, "ReduceLogSumExp", xs).ints("axes", {1}).i("keepdims", keep);
    auto got = run_model(m, "reduce_log_sum_exp.onnx", xs, x);
    CHECK(got.shape == (keep ? Shape{2, 1, 4} : Shape{2, 4}));
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t c = 0; c < 4; ++c) {
        double mx = -1e300, sum = 0;
        for (int64_t b = 0; b < 3; ++b) mx = std::max(mx, at(a, b, c));
        for (int64_t b = 0; b < 3; ++b) sum += std::exp(at(a, b, c) - mx);
        CHECK(got.values[static_cast<std::size_t>(a * 4 + c)] == Approx(mx + std::log(sum)).margin(1e-4));
      }
  }
  SECTION("ReduceLogSum, ReduceL1, ReduceSumSquare over axis 2") {
    for (const char* op : {"ReduceLogSum", "ReduceL1", "ReduceSumSquare"}) {
      INFO(op);
      OnnxModel m(13);
      unary_model(m, op, xs).ints("axes", {2}).i("keepdims", 0);
      auto got = run_model(m, std::string(op) + ".onnx", xs, x);
      REQUIRE(got.shape == Shape{2, 3});
      for (int64_t a = 0; a < 2; ++a)
        for (int64_t b = 0; b < 3; ++b) {
          double sum = 0, l1 = 0, sq = 0;
          for (int64_t c = 0; c < 4; ++c) sum += at(a, b, c), l1 += std::fabs(at(a, b, c)), sq += at(a, b, c) * at(a, b, c);
          const double want = std::string(op) == "ReduceLogSum" ? std::log(sum) : std::string(op) == "ReduceL1" ? l1 : sq;
          const float g = got.values[static_cast<std::size_t>(a * 3 + b)];
          if (std::isnan(want)) CHECK(std::isnan(g));
          else CHECK(g == Approx(want).epsilon(1e-5));
        }
    }
  }
  SECTION("Sum and Mean of three inputs, broadcast; Softsign; CastLike to a float") {
    for (const std::string op : {"Sum", "Mean", "Max", "Min"}) {
      OnnxModel m(13);
      m.input("x", xs.to_vector()).output("y");
      m.init("b", {4}, {1, 2, 3, 4}).init("c", {3, 1}, {10, 20, 30});
      m.node(op, {"x", "b", "c"}, {"y"});
      auto got = run_model(m, op + ".onnx", xs, x);
      for (int64_t a = 0; a < 2; ++a)
        for (int64_t b = 0; b < 3; ++b)
          for (int64_t c = 0; c < 4; ++c) {
            const double u = at(a, b, c), v = double(c + 1), w = 10.0 * double(b + 1), sum = u + v + w;
            const double want = op == "Sum" ? sum : op == "Mean" ? sum / 3 : op == "Max" ? std::max({u, v, w}) : std::min({u, v, w});
            CHECK(got.values[static_cast<std::size_t>((a * 3 + b) * 4 + c)] == Approx(want).epsilon(1e-6));
          }
    }
    for (const std::string op : {"Softplus", "Elu", "Selu"}) {
      OnnxModel e(13);
      unary_model(e, op, xs);
      auto got = run_model(e, op + "_act.onnx", xs, x);  // x up to 30: exp(30) overflows no float, but exp(100) would
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double u = x[i];
        const double want = op == "Softplus" ? std::log1p(std::exp(-std::fabs(u))) + std::max(u, 0.0)
                            : op == "Elu"    ? (u > 0 ? u : std::expm1(u))
                                             : 1.0507009873554805 * (u > 0 ? u : 1.6732632423543772 * std::expm1(u));
        INFO(op << " of " << u);
        CHECK(got.values[i] == Approx(want).epsilon(1e-4).margin(1e-5));  // oneDNN's exp and log: about 1e-6 absolute
      }
    }
    {  // Softplus of large negative x is tiny, and relative accuracy holds there (a log of 1 + tiny lost 3%)
      OnnxModel e(13);
      const std::vector<float> neg = {-10, -12, -15, -20};
      unary_model(e, "Softplus", Shape{4});
      auto got = run_model(e, "softplus_tiny.onnx", Shape{4}, neg);
      for (std::size_t i = 0; i < neg.size(); ++i) CHECK(got.values[i] == Approx(std::log1p(std::exp(double(neg[i])))).epsilon(1e-5));
    }
    OnnxModel m(13);
    unary_model(m, "Softsign", xs);
    auto got = run_model(m, "softsign.onnx", xs, x);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(got.values[i] == Approx(x[i] / (1 + std::fabs(x[i]))));
    OnnxModel cl(15);
    cl.init("like", {1}, {0.0f});
    unary_model(cl, "CastLike", xs, {"like"});
    CHECK(max_abs_diff(run_model(cl, "castlike.onnx", xs, x).values, x) == 0);
  }
}

TEST_CASE("BatchNormalization, alone and after a conv (folded)", "[onnx][batchnorm]") {
  const Shape xs{1, 3, 4, 4};
  auto x = random_values(48, 21);
  std::vector<float> scale{1.5f, -0.5f, 2.0f}, bias{0.1f, 0.2f, -0.3f}, mean{0.05f, -0.1f, 0.2f}, var{0.5f, 1.5f, 0.25f};
  auto bn = [&](const std::vector<float>& in) {
    std::vector<float> y(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      std::size_t c = (i / 16) % 3;
      y[i] = static_cast<float>(scale[c] * (in[i] - mean[c]) / std::sqrt(var[c] + 1e-3) + bias[c]);
    }
    return y;
  };
  OnnxModel m(13);
  m.init("s", {3}, scale).init("b", {3}, bias).init("m", {3}, mean).init("v", {3}, var);
  unary_model(m, "BatchNormalization", xs, {"s", "b", "m", "v"}).f("epsilon", 1e-3f);
  CHECK(max_abs_diff(run_model(m, "bn.onnx", xs, x).values, bn(x)) < kTol);

  auto w = random_values(9, 22);
  OnnxModel m2(13);
  m2.init("W", {3, 3, 1, 1}, w).init("s", {3}, scale).init("b", {3}, bias).init("m", {3}, mean).init("v", {3}, var);
  m2.input("x", xs.to_vector()).output("y");
  m2.node("Conv", {"x", "W"}, {"c"});
  m2.node("BatchNormalization", {"c", "s", "b", "m", "v"}, {"y"}).f("epsilon", 1e-3f);
  Model net = import_onnx(m2.save("conv_bn.onnx"));
  CHECK(count_layers(net, "batchnorm") == 0);
  Shape es;
  auto conv = ref_conv(x, xs, w, Shape{3, 3, 1, 1}, {}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, &es);
  CHECK(max_abs_diff(run_net(net, {{"x", make_input(xs, x)}})[0].values, bn(conv)) < 1e-4);
}

TEST_CASE("Softmax: opset 11 coerces to 2-D at axis, opset 13 normalises one axis", "[onnx][softmax]") {
  const Shape xs{2, 3, 4};
  auto x = random_values(24, 23);
  auto softmax_groups = [&](int64_t groups, int64_t len, int64_t inner) {
    std::vector<float> y(x.size());
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t in = 0; in < inner; ++in) {
        double sum = 0;
        for (int64_t k = 0; k < len; ++k) sum += std::exp(double(x[static_cast<std::size_t>((g * len + k) * inner + in)]));
        for (int64_t k = 0; k < len; ++k) {
          auto i = static_cast<std::size_t>((g * len + k) * inner + in);
          y[i] = static_cast<float>(std::exp(double(x[i])) / sum);
        }
      }
    return y;
  };
  OnnxModel m11(11);
  unary_model(m11, "Softmax", xs).i("axis", 1);  // over the 12 values of each batch row
  CHECK(max_abs_diff(run_model(m11, "softmax11.onnx", xs, x).values, softmax_groups(2, 12, 1)) < kTol);
  OnnxModel m11d(11);
  unary_model(m11d, "Softmax", xs);  // default axis 1 too
  CHECK(max_abs_diff(run_model(m11d, "softmax11d.onnx", xs, x).values, softmax_groups(2, 12, 1)) < kTol);
  OnnxModel m13(13);
  unary_model(m13, "Softmax", xs).i("axis", 1);  // over the 3 values of dim 1
  CHECK(max_abs_diff(run_model(m13, "softmax13.onnx", xs, x).values, softmax_groups(2, 3, 4)) < kTol);
  OnnxModel m13d(13);
  unary_model(m13d, "Softmax", xs);  // default: the last axis
  CHECK(max_abs_diff(run_model(m13d, "softmax13d.onnx", xs, x).values, softmax_groups(6, 4, 1)) < kTol);
}

namespace {
std::vector<float> ref_layernorm(const std::vector<float>& x, int64_t rows, int64_t len, const std::vector<float>& g,
                                 const std::vector<float>& b, double eps) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < len; ++i) mean += x[static_cast<std::size_t>(r * len + i)];
    mean /= double(len);
    for (int64_t i = 0; i < len; ++i) var += std::pow(x[static_cast<std::size_t>(r * len + i)] - mean, 2);
    var /= double(len);
    for (int64_t i = 0; i < len; ++i) {
      auto k = static_cast<std::size_t>(r * len + i);
      y[k] = static_cast<float>((x[k] - mean) / std::sqrt(var + eps) * g[static_cast<std::size_t>(i)] + b[static_cast<std::size_t>(i)]);
    }
  }
  return y;
}
}  // namespace

TEST_CASE("LayerNormalization (opset 17) and the pattern exporters decompose it into (opset 13)", "[onnx][layernorm]") {
  const Shape xs{2, 3, 8};
  auto x = random_values(48, 24), g = random_values(8, 25), b = random_values(8, 26);
  auto expected = ref_layernorm(x, 6, 8, g, b, 1e-5);
  {
    OnnxModel m(17);
    m.init("g", {8}, g).init("b", {8}, b);
    unary_model(m, "LayerNormalization", xs, {"g", "b"}).i("axis", -1);
    CHECK(max_abs_diff(run_model(m, "ln17.onnx", xs, x).values, expected) < 1e-4);
  }
  {
    OnnxModel m(13);
    m.init("g", {8}, g).init("b", {8}, b).init("two", {}, {2.0f}).init("eps", {}, {1e-5f});
    m.input("x", xs.to_vector()).output("y");
    m.node("ReduceMean", {"x"}, {"mean"}).ints("axes", {-1});
    m.node("Sub", {"x", "mean"}, {"d"});
    m.node("Pow", {"d", "two"}, {"sq"});
    m.node("ReduceMean", {"sq"}, {"var"}).ints("axes", {-1});
    m.node("Add", {"var", "eps"}, {"ve"});
    m.node("Sqrt", {"ve"}, {"sd"});
    m.node("Div", {"d", "sd"}, {"n"});
    m.node("Mul", {"n", "g"}, {"ng"});
    m.node("Add", {"ng", "b"}, {"y"});
    Model net = import_onnx(m.save("ln13.onnx"));
    CHECK(computing_steps(Session(net)) == 1);
    CHECK(count_layers(net, "layernorm") == 1);
    CHECK(max_abs_diff(run_net(net, {{"x", make_input(xs, x)}})[0].values, expected) < 1e-4);
  }
}

TEST_CASE("a decomposed LayerNormalization over the channels of NCHW (ConvNeXt's channels-first norm)", "[onnx][layernorm]") {
  // Refused before ("reduces axes that are not the last ones"): a tiny
  // ConvNeXt from transformers did not import.
  const Shape xs{2, 6, 3, 4};
  const auto x = random_values(144, 31), g = random_values(6, 32), b = random_values(6, 33);
  OnnxModel m(13);
  m.init("g", {6, 1, 1}, g).init("b", {6, 1, 1}, b).init("two", {}, {2.0f}).init("eps", {}, {1e-6f});
  m.input("x", xs.to_vector()).output("y");
  m.node("ReduceMean", {"x"}, {"mean"}).ints("axes", {1});
  m.node("Sub", {"x", "mean"}, {"d"});
  m.node("Pow", {"d", "two"}, {"sq"});
  m.node("ReduceMean", {"sq"}, {"var"}).ints("axes", {1});
  m.node("Add", {"var", "eps"}, {"ve"});
  m.node("Sqrt", {"ve"}, {"sd"});
  m.node("Div", {"d", "sd"}, {"n"});
  m.node("Mul", {"g", "n"}, {"ng"});
  m.node("Add", {"ng", "b"}, {"y"});
  Model net = import_onnx(m.save("ln_channels_first.onnx"));
  CHECK(count_layers(net, "layernorm") == 1);
  // The reference over the channels: positions as rows of 6 values.
  std::vector<float> rows(x.size()), ones(6, 1.0f), zeros(6, 0.0f);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 6; ++c)
      for (int64_t p = 0; p < 12; ++p) rows[static_cast<std::size_t>((n * 12 + p) * 6 + c)] = x[static_cast<std::size_t>((n * 6 + c) * 12 + p)];
  const auto normed = ref_layernorm(rows, 24, 6, ones, zeros, 1e-6);
  std::vector<float> expected(x.size());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 6; ++c)
      for (int64_t p = 0; p < 12; ++p)
        expected[static_cast<std::size_t>((n * 6 + c) * 12 + p)] =
            normed[static_cast<std::size_t>((n * 12 + p) * 6 + c)] * g[static_cast<std::size_t>(c)] + b[static_cast<std::size_t>(c)];
  CHECK(max_abs_diff(run_net(net, {{"x", make_input(xs, x)}})[0].values, expected) < 1e-4);
}

TEST_CASE("RMSNorm as transformers' exports write it becomes one rms_norm layer", "[onnx][layernorm]") {
  // LLaMA's: x * (1 / sqrt(mean(x^2) + eps)), cast to float, times the weight;
  // T5's other order (weight first) and x / sqrt(...) without a weight.
  const Shape xs{2, 3, 8};
  const auto x = random_values(48, 41), g = random_values(8, 42);
  auto reference = [&](bool weighted, double eps) {
    std::vector<float> y(x.size());
    for (std::size_t r = 0; r < 6; ++r) {
      double ms = 0;
      for (std::size_t i = 0; i < 8; ++i) ms += double(x[r * 8 + i]) * x[r * 8 + i];
      const double inv = 1 / std::sqrt(ms / 8 + eps);
      for (std::size_t i = 0; i < 8; ++i) y[r * 8 + i] = static_cast<float>(x[r * 8 + i] * inv * (weighted ? g[i] : 1.0f));
    }
    return y;
  };
  SECTION("LLaMA: Pow, ReduceMean, Add, Sqrt, Div(1, .), Mul, Cast, Mul(weight, .)") {
    OnnxModel m(13);
    m.init("g", {8}, g).init("two", {}, {2.0f}).init("eps", {}, {1e-6f}).init("one", {}, {1.0f});
    m.input("x", xs.to_vector()).output("y");
    m.node("Pow", {"x", "two"}, {"sq"});
    m.node("ReduceMean", {"sq"}, {"ms"}).ints("axes", {-1});
    m.node("Add", {"ms", "eps"}, {"mse"});
    m.node("Sqrt", {"mse"}, {"rms"});
    m.node("Div", {"one", "rms"}, {"inv"});
    m.node("Mul", {"x", "inv"}, {"n"});
    m.node("Cast", {"n"}, {"nf"}).i("to", 1);
    m.node("Mul", {"g", "nf"}, {"y"});
    Model net = import_onnx(m.save("rms_llama.onnx"));
    CHECK(count_layers(net, "rms_norm") == 1);
    CHECK(computing_steps(Session(net)) == 1);
    CHECK(max_abs_diff(run_net(net, {{"x", make_input(xs, x)}})[0].values, reference(true, 1e-6)) < 1e-5);
  }
  SECTION("x / sqrt(mean(x * x) + eps), no weight") {
    OnnxModel m(13);
    m.init("eps", {}, {0.25f});
    m.input("x", xs.to_vector()).output("y");
    m.node("Mul", {"x", "x"}, {"sq"});
    m.node("ReduceMean", {"sq"}, {"ms"}).ints("axes", {2});
    m.node("Add", {"ms", "eps"}, {"mse"});
    m.node("Sqrt", {"mse"}, {"rms"});
    m.node("Div", {"x", "rms"}, {"y"});
    Model net = import_onnx(m.save("rms_div.onnx"));
    CHECK(count_layers(net, "rms_norm") == 1);
    CHECK(max_abs_diff(run_net(net, {{"x", make_input(xs, x)}})[0].values, reference(false, 0.25)) < 1e-5);
  }
}

TEST_CASE("LayerNormalization's Mean and InvStdDev outputs, and RMSNormalization (opset 23)", "[onnx][layernorm]") {
  const Shape xs{2, 3, 8};
  auto x = random_values(48, 43);
  std::vector<float> scale(8);
  for (int i = 0; i < 8; ++i) scale[static_cast<std::size_t>(i)] = 0.5f + 0.1f * float(i);
  auto row = [&](int64_t r) { return std::vector<double>(x.begin() + r * 8, x.begin() + (r + 1) * 8); };
  {
    OnnxModel m(17);
    m.input("x", xs.to_vector()).output("y").output("mean").output("inv_std");
    m.init("scale", {8}, scale);
    m.node("LayerNormalization", {"x", "scale"}, {"y", "mean", "inv_std"}).i("axis", -1).f("epsilon", 1e-5f);
    Model net = import_onnx(m.save("layernorm_stats.onnx"));
    auto out = run_net(net, {{"x", make_input(xs, x)}});
    REQUIRE(out.size() == 3);
    CHECK(out[1].shape == Shape{2, 3, 1});
    for (int64_t r = 0; r < 6; ++r) {
      const auto v = row(r);
      double mean = 0, var = 0;
      for (double e : v) mean += e / 8;
      for (double e : v) var += (e - mean) * (e - mean) / 8;
      CHECK(out[1].values[static_cast<std::size_t>(r)] == Approx(mean).margin(1e-6));
      CHECK(out[2].values[static_cast<std::size_t>(r)] == Approx(1 / std::sqrt(var + 1e-5)).epsilon(1e-5));
      CHECK(out[0].values[static_cast<std::size_t>(r * 8)] == Approx((v[0] - mean) / std::sqrt(var + 1e-5) * scale[0]).margin(1e-5));
    }
  }
  OnnxModel m(23);
  m.input("x", xs.to_vector()).output("y");
  m.init("scale", {8}, scale);
  m.node("RMSNormalization", {"x", "scale"}, {"y"}).i("axis", -1).f("epsilon", 1e-5f);
  auto got = run_model(m, "rms_norm.onnx", xs, x);
  for (int64_t r = 0; r < 6; ++r) {
    const auto v = row(r);
    double ms = 0;
    for (double e : v) ms += e * e / 8;
    for (int64_t i = 0; i < 8; ++i)
      CHECK(got.values[static_cast<std::size_t>(r * 8 + i)] ==
            Approx(v[static_cast<std::size_t>(i)] / std::sqrt(ms + 1e-5) * scale[static_cast<std::size_t>(i)]).margin(1e-5));
  }
}

// Refused before (an unsupported operator).
TEST_CASE("MeanVarianceNormalization over the default and given axes", "[onnx][mvn]") {
  const Shape xs{2, 3, 4, 5};
  auto x = random_values(static_cast<std::size_t>(xs.numel()), 61);
  for (bool given : {false, true}) {
    INFO("axes " << (given ? "[1, 3]" : "default [0, 2, 3]"));
    OnnxModel m(13);
    NodeRef node = unary_model(m, "MeanVarianceNormalization", xs);
    if (given) node.ints("axes", {1, -1});
    auto got = run_model(m, "mvn.onnx", xs, x);
    REQUIRE(got.shape == xs);
    auto index = [&](int64_t a, int64_t b, int64_t c, int64_t d) { return static_cast<std::size_t>(((a * 3 + b) * 4 + c) * 5 + d); };
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t c = 0; c < 4; ++c)
          for (int64_t d = 0; d < 5; ++d) {
            double sum = 0, sq = 0;
            int count = 0;
            for (int64_t a2 = 0; a2 < 2; ++a2)
              for (int64_t b2 = 0; b2 < 3; ++b2)
                for (int64_t c2 = 0; c2 < 4; ++c2)
                  for (int64_t d2 = 0; d2 < 5; ++d2) {
                    const bool same = given ? (a2 == a && c2 == c) : b2 == b;  // the axes kept
                    if (!same) continue;
                    sum += x[index(a2, b2, c2, d2)];
                    sq += double(x[index(a2, b2, c2, d2)]) * x[index(a2, b2, c2, d2)];
                    ++count;
                  }
            const double mean = sum / count, sd = std::sqrt(std::max(0.0, sq / count - mean * mean));
            CHECK(got.values[index(a, b, c, d)] == Approx((x[index(a, b, c, d)] - mean) / (sd + 1e-9)).margin(1e-4));
          }
  }
}

// Both refused before (unsupported operators).
TEST_CASE("SwiGLU (opset 28) and Sign (NaN, zeros and infinities)", "[onnx][swiglu]") {
  const Shape xs{2, 3, 4};
  auto a = random_values(24, 51), b = random_values(24, 52);
  for (double alpha : {1.0, 1.702}) {
    OnnxModel m(28);
    m.init("B", xs.to_vector(), b);
    unary_model(m, "SwiGLU", xs, {"B"}).f("alpha", static_cast<float>(alpha));
    auto got = run_model(m, "swiglu.onnx", xs, a);
    REQUIRE(got.shape == xs);
    for (std::size_t i = 0; i < a.size(); ++i)
      CHECK(got.values[i] == Approx(a[i] / (1 + std::exp(-alpha * a[i])) * b[i]).margin(kTol));
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{-2.5f, -0.0f, 0.0f, 3.0f, inf, -inf, nan, 1e-30f};
  OnnxModel m(13);
  unary_model(m, "Sign", Shape{8});
  auto got = run_model(m, "sign.onnx", Shape{8}, x);
  const std::vector<float> want{-1, 0, 0, 1, 1, -1, nan, 1};
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(want[i])) CHECK(std::isnan(got.values[i]));
    else CHECK(got.values[i] == want[i]);
  }
}

// Refused before (an unsupported operator).
TEST_CASE("RotaryEmbedding (opset 23): halves and interleaved, partial rotation, position ids, 3-D input", "[onnx][rope]") {
  const int64_t B = 2, H = 2, S = 3, D = 8, positions = 5;
  for (int layout : {3, 4})
    for (int interleaved : {0, 1})
      for (int64_t rot : {int64_t{0}, int64_t{4}}) {
        INFO(layout << "-D input, interleaved " << interleaved << ", rotary_embedding_dim " << rot);
        const int64_t r = rot ? rot : D, half = r / 2;
        const Shape xs = layout == 4 ? Shape{B, H, S, D} : Shape{B, S, H * D};
        auto x = random_values(static_cast<std::size_t>(xs.numel()), 41);
        auto cos = random_values(static_cast<std::size_t>(positions * half), 42), sin = random_values(cos.size(), 43);
        const std::vector<int64_t> ids{4, 0, 2, 1, 3, 3};  // [B, S]
        OnnxModel m(23);
        m.init("cos", {positions, half}, cos).init("sin", {positions, half}, sin).init_ints("ids", {B, S}, ids);
        NodeRef node = unary_model(m, "RotaryEmbedding", xs, {"cos", "sin", "ids"});
        node.i("interleaved", interleaved).i("rotary_embedding_dim", rot);
        if (layout == 3) node.i("num_heads", H);
        auto got = run_model(m, "rope.onnx", xs, x);
        REQUIRE(got.shape == xs);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < S; ++t) {
              auto at = [&](int64_t d) {  // the flat index of element d of head h at step t
                return static_cast<std::size_t>(layout == 4 ? ((b * H + h) * S + t) * D + d : (b * S + t) * H * D + h * D + d);
              };
              const int64_t p = ids[static_cast<std::size_t>(b * S + t)];
              for (int64_t j = 0; j < half; ++j) {
                const int64_t i1 = interleaved ? 2 * j : j, i2 = interleaved ? 2 * j + 1 : j + half;
                const double c = cos[static_cast<std::size_t>(p * half + j)], s = sin[static_cast<std::size_t>(p * half + j)];
                CHECK(got.values[at(i1)] == Approx(c * x[at(i1)] - s * x[at(i2)]).margin(kTol));
                CHECK(got.values[at(i2)] == Approx(s * x[at(i1)] + c * x[at(i2)]).margin(kTol));
              }
              for (int64_t d = r; d < D; ++d) CHECK(got.values[at(d)] == x[at(d)]);
            }
      }
}

TEST_CASE("Attention (opset 23): grouped heads, causal, with and without a KV cache, against a computed reference",
          "[onnx][attention]") {
  const int64_t B = 1, HQ = 4, HKV = 2, L = 3, S = 3, D = 2;
  auto q = random_values(static_cast<std::size_t>(B * HQ * L * D), 44);
  auto k = random_values(static_cast<std::size_t>(B * HKV * S * D), 45);
  auto v = random_values(static_cast<std::size_t>(B * HKV * S * D), 46);
  OnnxModel m(23);
  m.input("q", {B, HQ, L, D}).output("y");
  m.init("k", {B, HKV, S, D}, k).init("v", {B, HKV, S, D}, v);
  m.node("Attention", {"q", "k", "v"}, {"y"}, "attn").i("is_causal", 1);
  Model net = import_onnx(m.save("attention.onnx"));
  auto got = run_net(net, {{"q", make_input(Shape{B, HQ, L, D}, q)}})[0];
  REQUIRE(got.shape == Shape{B, HQ, L, D});
  for (int64_t h = 0; h < HQ; ++h) {
    const int64_t g = h / (HQ / HKV);
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> w(static_cast<std::size_t>(S));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < D; ++e) dot += double(q[static_cast<std::size_t>((h * L + i) * D + e)]) * k[static_cast<std::size_t>((g * S + j) * D + e)];
        w[static_cast<std::size_t>(j)] = dot / std::sqrt(double(D));
        mx = std::max(mx, w[static_cast<std::size_t>(j)]);
      }
      for (int64_t j = 0; j <= i; ++j) sum += w[static_cast<std::size_t>(j)] = std::exp(w[static_cast<std::size_t>(j)] - mx);
      for (int64_t e = 0; e < D; ++e) {
        double want = 0;
        for (int64_t j = 0; j <= i; ++j) want += w[static_cast<std::size_t>(j)] / sum * v[static_cast<std::size_t>((g * S + j) * D + e)];
        CHECK(got.values[static_cast<std::size_t>((h * L + i) * D + e)] == Approx(want).margin(1e-5));
      }
    }
  }
  // A KV cache of one past position: keys and values [past; new], the causal
  // triangle aligned to the end of the cache (query i sees keys 0..i+1), and
  // present_key handed back as concat(past, k).
  const std::vector<float> pk = {0.5f, -1.0f, 0.25f, 2.0f}, pv = {1.0f, 2.0f, -3.0f, 0.5f};
  OnnxModel cached(23);
  cached.input("q", {B, HQ, L, D}).output("y").output("present_key");
  cached.init("k", {B, HKV, S, D}, k).init("v", {B, HKV, S, D}, v).init("pk", {B, HKV, 1, D}, pk).init("pv", {B, HKV, 1, D}, pv);
  cached.node("Attention", {"q", "k", "v", "", "pk", "pv"}, {"y", "present_key"}, "attn_cached").i("is_causal", 1);
  Model cnet = import_onnx(cached.save("attention_cache.onnx"));
  auto outs = run_net(cnet, {{"q", make_input(Shape{B, HQ, L, D}, q)}});
  REQUIRE(outs.size() == 2);
  REQUIRE(outs[1].shape == Shape{B, HKV, S + 1, D});
  const int64_t T = S + 1;
  auto key = [&](int64_t g, int64_t j, int64_t e) { return j == 0 ? pk[static_cast<std::size_t>(g * D + e)] : k[static_cast<std::size_t>((g * S + j - 1) * D + e)]; };
  auto val = [&](int64_t g, int64_t j, int64_t e) { return j == 0 ? pv[static_cast<std::size_t>(g * D + e)] : v[static_cast<std::size_t>((g * S + j - 1) * D + e)]; };
  for (int64_t g = 0; g < HKV; ++g)
    for (int64_t j = 0; j < T; ++j)
      for (int64_t e = 0; e < D; ++e) CHECK(outs[1].values[static_cast<std::size_t>((g * T + j) * D + e)] == key(g, j, e));
  for (int64_t h = 0; h < HQ; ++h) {
    const int64_t g = h / (HQ / HKV);
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> w(static_cast<std::size_t>(T));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= i + 1; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < D; ++e) dot += double(q[static_cast<std::size_t>((h * L + i) * D + e)]) * key(g, j, e);
        w[static_cast<std::size_t>(j)] = dot / std::sqrt(double(D));
        mx = std::max(mx, w[static_cast<std::size_t>(j)]);
      }
      for (int64_t j = 0; j <= i + 1; ++j) sum += w[static_cast<std::size_t>(j)] = std::exp(w[static_cast<std::size_t>(j)] - mx);
      for (int64_t e = 0; e < D; ++e) {
        double want = 0;
        for (int64_t j = 0; j <= i + 1; ++j) want += w[static_cast<std::size_t>(j)] / sum * val(g, j, e);
        CHECK(outs[0].values[static_cast<std::size_t>((h * L + i) * D + e)] == Approx(want).margin(1e-5));
      }
    }
  }
}

TEST_CASE("GELU: the Erf pattern in its exported orders becomes one gelu layer", "[onnx][gelu]") {
  const Shape xs{2, 6};
  std::vector<float> x = random_values(12, 27);
  for (auto& v : x) v *= 3;
  auto expected = map_values(x, [](float v) { return static_cast<float>(0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))); });
  for (int variant = 0; variant < 3; ++variant) {
    INFO("variant " << variant);
    OnnxModel m(13);
    m.input("x", xs.to_vector()).output("y");
    m.node("Constant", {}, {"sqrt2"}).t("value", float_tensor({}, {1.4142135f}));
    m.init("one", {}, {1.0f}).init("half", {}, {0.5f});
    m.node("Div", {"x", "sqrt2"}, {"h"});
    m.node("Erf", {"h"}, {"e"});
    m.node("Add", {"one", "e"}, {"a"});
    if (variant == 0) {  // PyTorch: (x * (1 + erf)) * 0.5
      m.node("Mul", {"x", "a"}, {"m"});
      m.node("Mul", {"m", "half"}, {"y"});
    } else if (variant == 1) {  // x * 0.5 * (1 + erf)
      m.node("Mul", {"x", "half"}, {"xh"});
      m.node("Mul", {"xh", "a"}, {"y"});
    } else {  // x * ((1 + erf) * 0.5)
      m.node("Mul", {"a", "half"}, {"ah"});
      m.node("Mul", {"x", "ah"}, {"y"});
    }
    Model net = import_onnx(m.save("gelu.onnx"));
    CHECK(computing_steps(Session(net)) == 1);
    CHECK(count_layers(net, "gelu") == 1);
    CHECK(max_abs_diff(run_net(net, {{"x", make_input(xs, x)}})[0].values, expected) < kTol);
  }
}

TEST_CASE("GELU: the tanh form (GPT-2's) in its exported orders becomes one gelu layer", "[onnx][gelu]") {
  const Shape xs{2, 6};
  std::vector<float> x = random_values(12, 31);
  for (auto& v : x) v *= 3;
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  auto expected = map_values(x, [&](float v) {
    return static_cast<float>(0.5 * v * (1 + std::tanh(k * (v + 0.044715 * double(v) * v * v))));
  });
  for (int variant = 0; variant < 4; ++variant) {
    INFO("variant " << variant);
    OnnxModel m(13);
    m.input("x", xs.to_vector()).output("y");
    m.init("three", {}, {3.0f}).init("c", {}, {0.044715f}).init("k", {}, {static_cast<float>(k)});
    m.init("one", {}, {1.0f}).init("half", {}, {0.5f});
    if (variant == 3) {  // x^3 as x * x * x
      m.node("Mul", {"x", "x"}, {"sq"});
      m.node("Mul", {"sq", "x"}, {"cube"});
    } else {
      m.node("Pow", {"x", "three"}, {"cube"});
    }
    m.node("Mul", {variant == 1 ? "c" : "cube", variant == 1 ? "cube" : "c"}, {"cc"});
    m.node("Add", {"x", "cc"}, {"inner"});
    m.node("Mul", {"inner", "k"}, {"u"});
    m.node("Tanh", {"u"}, {"t"});
    m.node("Add", {"t", "one"}, {"a"});
    if (variant == 0 || variant == 3) {  // GPT-2: (x * 0.5) * (1 + tanh)
      m.node("Mul", {"x", "half"}, {"xh"});
      m.node("Mul", {"xh", "a"}, {"y"});
    } else if (variant == 1) {  // (x * (1 + tanh)) * 0.5
      m.node("Mul", {"x", "a"}, {"m"});
      m.node("Mul", {"m", "half"}, {"y"});
    } else {  // x * ((1 + tanh) * 0.5)
      m.node("Mul", {"a", "half"}, {"ah"});
      m.node("Mul", {"x", "ah"}, {"y"});
    }
    Model net = import_onnx(m.save("gelu_tanh.onnx"));
    CHECK(computing_steps(Session(net)) == 1);
    CHECK(count_layers(net, "gelu") == 1);
    CHECK(max_abs_diff(run_net(net, {{"x", make_input(xs, x)}})[0].values, expected) < kTol);
  }
  // The tanh of something else stays as it is.
  OnnxModel m(13);
  m.input("x", xs.to_vector()).output("y");
  m.init("k", {}, {0.5f}).init("one", {}, {1.0f});
  m.node("Mul", {"x", "k"}, {"u"});
  m.node("Tanh", {"u"}, {"t"});
  m.node("Add", {"t", "one"}, {"y"});
  Model net = import_onnx(m.save("not_gelu.onnx"));
  CHECK(count_layers(net, "gelu") == 0);
}

TEST_CASE("HardSwish spelled x*clip(x+3,0,6)/6 (Paddle) becomes one hardswish layer", "[onnx][hardswish]") {
  const Shape xs{2, 6};
  std::vector<float> x = random_values(12, 29);
  for (auto& v : x) v *= 5;
  auto expected = map_values(x, [](float v) { return v * std::min(std::max(v + 3.0f, 0.0f), 6.0f) / 6.0f; });
  for (int variant = 0; variant < 4; ++variant) {
    INFO("variant " << variant);
    OnnxModel m(13);
    m.input("x", xs.to_vector()).output("y");
    m.init("three", {}, {3.0f}).init("zero", {}, {0.0f}).init("six", {}, {6.0f}).init("sixth", {}, {1.0f / 6.0f});
    m.node("Add", {variant == 3 ? "three" : "x", variant == 3 ? "x" : "three"}, {"a"});
    m.node("Clip", {"a", "zero", "six"}, {"c"});
    if (variant == 0 || variant == 3) {  // Paddle: (x * clip) / 6
      m.node("Mul", {"x", "c"}, {"m"});
      m.node("Div", {"m", "six"}, {"y"});
    } else if (variant == 1) {  // (clip * x) * (1/6)
      m.node("Mul", {"c", "x"}, {"m"});
      m.node("Mul", {"sixth", "m"}, {"y"});
    } else {  // x * (clip / 6)
      m.node("Div", {"c", "six"}, {"d"});
      m.node("Mul", {"d", "x"}, {"y"});
    }
    Model net = import_onnx(m.save("hardswish.onnx"));
    CHECK(computing_steps(Session(net)) == 1);
    CHECK(count_layers(net, "hardswish") == 1);
    CHECK(max_abs_diff(run_net(net, {{"x", make_input(xs, x)}})[0].values, expected) < kTol);
  }
  // Not HardSwish: another bound, or the clip read elsewhere too: the nodes stay.
  for (int variant = 0; variant < 2; ++variant) {
    OnnxModel m(13);
    m.input("x", xs.to_vector()).output("y");
    m.init("three", {}, {3.0f}).init("zero", {}, {0.0f}).init("six", {}, {variant == 0 ? 5.0f : 6.0f});
    m.node("Add", {"x", "three"}, {"a"});
    m.node("Clip", {"a", "zero", "six"}, {"c"});
    m.node("Mul", {"x", "c"}, {"m"});
    m.node("Div", {"m", "six"}, {"q"});
    m.node("Add", {"q", variant == 1 ? "c" : "q"}, {"y"});
    Model net = import_onnx(m.save("not_hardswish.onnx"));
    CHECK(count_layers(net, "hardswish") == 0);
  }
}

TEST_CASE("GELU: a pattern whose nodes lack outputs or inputs is not matched, never read past them", "[onnx][gelu]") {
  // Fuzzing found it (fuzz/regressions/onnx_import/gelu-add-without-output):
  // the matcher read the Add's output 0, which it did not have.
  for (int variant = 0; variant < 2; ++variant) {
    INFO("variant " << variant);
    OnnxModel m(13);
    m.input("x", {2, 6}).output("y");
    m.init("sqrt2", {}, {1.4142135f}).init("one", {}, {1.0f});
    m.node("Div", {"x", "sqrt2"}, {"h"});
    m.node("Erf", {"h"}, {"e"});
    if (variant == 0)
      m.node("Add", {"one", "e"}, {});  // no output
    else
      m.node("Add", {"e"}, {"a"});  // one input
    m.node("Relu", {"x"}, {"y"});
    try {
      Model net = import_onnx(m.save("gelu_broken.onnx"));
      CHECK(count_layers(net, "gelu") == 0);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("Add"));
    }
  }
}

TEST_CASE("Shape/Gather/Unsqueeze/Concat chains around Reshape fold to constants", "[onnx][shape]") {
  const Shape xs{2, 3, 4};
  auto x = random_values(24, 28);
  OnnxModel m(13);
  m.input("x", xs.to_vector()).output("y");
  m.init_ints("i0", {}, {0}).init_ints("axes", {1}, {0}).init_ints("minus1", {1}, {-1});
  m.node("Shape", {"x"}, {"s"});
  m.node("Gather", {"s", "i0"}, {"batch"}).i("axis", 0);
  m.node("Unsqueeze", {"batch", "axes"}, {"b1"});
  m.node("Concat", {"b1", "minus1"}, {"target"}).i("axis", 0);
  m.node("Reshape", {"x", "target"}, {"y"});
  Model net = import_onnx(m.save("shape_chain.onnx"));
  CHECK(computing_steps(Session(net)) == 1);  // the reshape alone
  auto got = run_net(net, {{"x", make_input(xs, x)}})[0];
  CHECK(got.shape == Shape{2, 12});
  CHECK(got.values == x);
}

TEST_CASE("Layout operators: Flatten, Reshape 0/-1, Squeeze/Unsqueeze by opset, Transpose, Concat, Split, Pad", "[onnx][layout]") {
  const Shape xs{2, 3, 4};
  auto x = random_values(24, 29);
  auto value = [&](int64_t a, int64_t b, int64_t c) { return x[static_cast<std::size_t>((a * 3 + b) * 4 + c)]; };
  SECTION("Flatten axis 2") {
    OnnxModel m(13);
    unary_model(m, "Flatten", xs).i("axis", 2);
    auto got = run_model(m, "flatten.onnx", xs, x);
    CHECK(got.shape == Shape{6, 4});
    CHECK(got.values == x);
  }
  SECTION("Reshape with 0 and -1") {
    OnnxModel m(13);
    m.init_ints("shape", {3}, {0, -1, 2});
    unary_model(m, "Reshape", xs, {"shape"});
    CHECK(run_model(m, "reshape.onnx", xs, x).shape == Shape{2, 6, 2});
  }
  SECTION("Unsqueeze then Squeeze: axes attribute (opset 11) and input (opset 13)") {
    for (int opset : {11, 13}) {
      OnnxModel m(opset);
      m.input("x", xs.to_vector()).output("y");
      if (opset >= 13) {
        m.init_ints("ax", {2}, {0, -1});
        m.node("Unsqueeze", {"x", "ax"}, {"u"});
        m.init_ints("sx", {1}, {0});
        m.node("Squeeze", {"u", "sx"}, {"y"});
      } else {
        m.node("Unsqueeze", {"x"}, {"u"}).ints("axes", {0, -1});
        m.node("Squeeze", {"u"}, {"y"}).ints("axes", {0});
      }
      auto got = run_model(m, "squeeze.onnx", xs, x);
      CHECK(got.shape == Shape{2, 3, 4, 1});
      CHECK(got.values == x);
    }
  }
  SECTION("Transpose") {
    OnnxModel m(13);
    unary_model(m, "Transpose", xs).ints("perm", {2, 0, 1});
    auto got = run_model(m, "transpose.onnx", xs, x);
    REQUIRE(got.shape == Shape{4, 2, 3});
    CHECK(got.values[static_cast<std::size_t>((3 * 2 + 1) * 3 + 2)] == value(1, 2, 3));
  }
  SECTION("Concat of a run-time tensor and a constant") {
    OnnxModel m(13);
    m.init("c", {2, 1, 4}, std::vector<float>(8, 7.0f));
    unary_model(m, "Concat", xs, {"c"}).i("axis", -2);
    auto got = run_model(m, "concat.onnx", xs, x);
    REQUIRE(got.shape == Shape{2, 4, 4});
    CHECK(got.values[12] == 7.0f);
    CHECK(got.values[16] == value(1, 0, 0));
  }
  SECTION("Split: sizes as attribute (opset 11) and as input (opset 13)") {
    for (int opset : {11, 13}) {
      OnnxModel m(opset);
      m.input("x", xs.to_vector()).output("y").output("z");
      if (opset >= 13) {
        m.init_ints("sizes", {2}, {1, 3});
        m.node("Split", {"x", "sizes"}, {"y", "z"}).i("axis", 2);
      } else {
        m.node("Split", {"x"}, {"y", "z"}).i("axis", 2).ints("split", {1, 3});
      }
      Model net = import_onnx(m.save("split.onnx"));
      auto outs = run_net(net, {{"x", make_input(xs, x)}});
      CHECK(outs[0].shape == Shape{2, 3, 1});
      CHECK(outs[1].shape == Shape{2, 3, 3});
      CHECK(outs[1].values[0] == value(0, 0, 1));
    }
  }
  SECTION("Pad: constant value and reflect") {
    OnnxModel m(13);
    m.init_ints("pads", {6}, {0, 1, 0, 0, 0, 2}).init("v", {}, {-9.0f});
    unary_model(m, "Pad", xs, {"pads", "v"});
    auto got = run_model(m, "pad.onnx", xs, x);
    REQUIRE(got.shape == Shape{2, 4, 6});
    CHECK(got.values[0] == -9.0f);
    CHECK(got.values[6] == value(0, 0, 0));
    OnnxModel r(13);
    r.init_ints("pads", {6}, {0, 0, 1, 0, 0, 1});
    unary_model(r, "Pad", xs, {"pads"}).s("mode", "reflect");
    auto rg = run_model(r, "pad_reflect.onnx", xs, x);
    REQUIRE(rg.shape == Shape{2, 3, 6});
    CHECK(rg.values[0] == value(0, 0, 1));
  }
}

TEST_CASE("Slice and Gather of run-time tensors", "[onnx][slice]") {
  const Shape xs{2, 5, 6};
  auto x = random_values(60, 30);
  auto value = [&](int64_t a, int64_t b, int64_t c) { return x[static_cast<std::size_t>((a * 5 + b) * 6 + c)]; };
  SECTION("Slice over two axes with negative and clamped bounds") {
    OnnxModel m(13);
    m.init_ints("starts", {2}, {1, -4}).init_ints("ends", {2}, {4, 1000}).init_ints("axes", {2}, {1, -1});
    unary_model(m, "Slice", xs, {"starts", "ends", "axes"});
    auto got = run_model(m, "slice.onnx", xs, x);
    REQUIRE(got.shape == Shape{2, 3, 4});
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t c = 0; c < 4; ++c) CHECK(got.values[static_cast<std::size_t>((a * 3 + b) * 4 + c)] == value(a, b + 1, c + 2));
  }
  SECTION("Slice with step 2 (patch merging: x[:, 1::2, 0::2])") {
    OnnxModel m(13);
    m.init_ints("starts", {2}, {1, 0}).init_ints("ends", {2}, {5, 6}).init_ints("axes", {2}, {1, 2}).init_ints("steps", {2}, {2, 2});
    unary_model(m, "Slice", xs, {"starts", "ends", "axes", "steps"});
    auto got = run_model(m, "slice_step.onnx", xs, x);
    REQUIRE(got.shape == Shape{2, 2, 3});
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t c = 0; c < 3; ++c) CHECK(got.values[static_cast<std::size_t>((a * 2 + b) * 3 + c)] == value(a, 1 + 2 * b, 2 * c));
  }
  SECTION("Slice with a step that does not tile the dim (LeViT's x[:, ::2] of an odd count; refused before)") {
    OnnxModel m(13);
    m.init_ints("starts", {2}, {0, 1}).init_ints("ends", {2}, {5, 6}).init_ints("axes", {2}, {1, 2}).init_ints("steps", {2}, {2, 4});
    unary_model(m, "Slice", xs, {"starts", "ends", "axes", "steps"});
    auto got = run_model(m, "slice_step_odd.onnx", xs, x);
    REQUIRE(got.shape == Shape{2, 3, 2});
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t c = 0; c < 2; ++c) CHECK(got.values[static_cast<std::size_t>((a * 3 + b) * 2 + c)] == value(a, 2 * b, 1 + 4 * c));
  }
  SECTION("Slice going backwards (x[:, ::-1, 4:0:-2]; refused before)") {
    OnnxModel m(13);
    m.init_ints("starts", {2}, {-1, 4}).init_ints("ends", {2}, {INT64_MIN, 0}).init_ints("axes", {2}, {1, 2})
        .init_ints("steps", {2}, {-1, -2});
    unary_model(m, "Slice", xs, {"starts", "ends", "axes", "steps"});
    auto got = run_model(m, "slice_back.onnx", xs, x);
    REQUIRE(got.shape == Shape{2, 5, 2});
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 5; ++b)
        for (int64_t c = 0; c < 2; ++c) CHECK(got.values[static_cast<std::size_t>((a * 5 + b) * 2 + c)] == value(a, 4 - b, 4 - 2 * c));
  }
  SECTION("Gather with a scalar index drops the axis (x[:, 2])") {
    OnnxModel m(13);
    m.init_ints("i", {}, {-3});
    unary_model(m, "Gather", xs, {"i"}).i("axis", 1);
    auto got = run_model(m, "gather.onnx", xs, x);
    REQUIRE(got.shape == Shape{2, 6});
    CHECK(got.values[7] == value(1, 2, 1));
  }
  SECTION("Gather with any constant indices (refused before: not one or consecutive): runs sliced and joined") {
    OnnxModel m(13);
    m.init_ints("i", {2, 2}, {4, 0, 1, -1});  // a 2-D index list, out of order, a negative one
    unary_model(m, "Gather", xs, {"i"}).i("axis", 1);
    auto got = run_model(m, "gather_any.onnx", xs, x);
    REQUIRE(got.shape == Shape{2, 2, 2, 6});
    const int64_t idx[] = {4, 0, 1, 4};
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t c = 0; c < 6; ++c) CHECK(got.values[static_cast<std::size_t>((a * 4 + j) * 6 + c)] == value(a, idx[j], c));
  }
  SECTION("Pad with axes (opset 18; refused before)") {
    OnnxModel m(18);
    m.init_ints("pads", {2}, {1, 2}).init_ints("axes", {1}, {-1});
    unary_model(m, "Pad", xs, {"pads", "", "axes"});
    auto got = run_model(m, "pad_axes.onnx", xs, x);
    REQUIRE(got.shape == Shape{2, 5, 9});
    CHECK(got.values[0] == 0.0f);
    CHECK(got.values[1] == value(0, 0, 0));
    CHECK(got.values[8] == 0.0f);
  }
}

TEST_CASE("Constant node attributes, Dropout, Expand, Cast", "[onnx][constant]") {
  const Shape xs{2, 3};
  auto x = random_values(6, 31);
  OnnxModel m(13);
  m.input("x", xs.to_vector()).output("y");
  m.node("Constant", {}, {"c"}).t("value", float_tensor({3}, {1, 2, 3}));
  m.node("Constant", {}, {"shape"}).ints("value_ints", {2, 3});
  m.node("Expand", {"c", "shape"}, {"ce"});  // constant, computed at import
  m.node("Dropout", {"x"}, {"xd"});
  m.node("Cast", {"xd"}, {"xc"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Add", {"xc", "ce"}, {"y"});
  auto got = run_model(m, "constants.onnx", xs, x);
  for (std::size_t i = 0; i < 6; ++i) CHECK(got.values[i] == Approx(x[i] + float(i % 3 + 1)));
}

TEST_CASE("A float constant cast to an integer it has none of is an error naming the node", "[onnx][constant]") {
  // Fuzzing found it (fuzz/regressions/onnx_import): a float constant of
  // 2.9e23 read as int64 (undefined behaviour, then any shape).
  for (float v : {1e30f, -1e30f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    OnnxModel m(13);
    m.input("x", {1, 4}).output("y");
    m.init("s", {2}, {1, v});
    m.node("Cast", {"s"}, {"si"}, "to_int").i("to", onnx::TensorProto::INT64);
    m.node("Reshape", {"x", "si"}, {"y"});
    CHECK_THROWS_WITH(import_onnx(m.save("cast_huge.onnx")),
                      Catch::Contains("has no int64 value") && Catch::Contains("to_int"));
  }
}

TEST_CASE("A float64 constant beyond float32's range is an error naming the tensor, not an infinity", "[onnx][constant]") {
  for (bool raw : {false, true}) {
    OnnxModel m(13);
    m.input("x", {2}).output("y");
    onnx::TensorProto* t = m.graph().add_initializer();
    t->set_name("big");
    t->set_data_type(onnx::TensorProto::DOUBLE);
    t->add_dims(2);
    const double values[] = {1.5, 1e300};
    if (raw) {
      t->set_raw_data(std::string(reinterpret_cast<const char*>(values), sizeof values));
    } else {
      for (double v : values) t->add_double_data(v);
    }
    m.node("Add", {"x", "big"}, {"y"});
    CHECK_THROWS_WITH(import_onnx(m.save("double_big.onnx")), Catch::Contains("'big'") && Catch::Contains("1e+300") &&
                                                                  Catch::Contains("beyond float32's range"));
  }
  // Infinities and values in range are read as they are.
  OnnxModel m(13);
  m.input("x", {2}).output("y");
  onnx::TensorProto* t = m.graph().add_initializer();
  t->set_name("fine");
  t->set_data_type(onnx::TensorProto::DOUBLE);
  t->add_dims(2);
  t->add_double_data(-2.5);
  t->add_double_data(-std::numeric_limits<double>::infinity());
  m.node("Add", {"x", "fine"}, {"y"});
  Model net = import_onnx(m.save("double_fine.onnx"));
  auto got = run_net(net, {{"x", make_input(Shape{2}, {1, 1})}})[0];
  CHECK(got.values[0] == -1.5f);
  CHECK(std::isinf(got.values[1]));
}

TEST_CASE("Reshape dims whose product overflows int64 are an error naming the node", "[onnx][constant]") {
  // Fuzzing found it (fuzz/regressions/onnx_import/reshape-dims-overflow).
  OnnxModel m(13);
  m.input("x", {2, 3, 4}).output("y");
  m.init_ints("shape", {3}, {-1, int64_t{1} << 42, int64_t{1} << 22});
  m.node("Reshape", {"x", "shape"}, {"y"}, "big_reshape");
  CHECK_THROWS_WITH(import_onnx(m.save("reshape_overflow.onnx")),
                    Catch::Contains("multiply beyond int64") && Catch::Contains("big_reshape"));
}

TEST_CASE("int64 arithmetic on constants is checked: overflow is an error naming the node, never a trap", "[onnx][constant]") {
  // INT64_MIN / -1 killed the importer with SIGFPE (only a zero divisor was checked).
  const int64_t min = std::numeric_limits<int64_t>::min(), max = std::numeric_limits<int64_t>::max();
  struct C {
    const char* op;
    int64_t a, b;
  };
  for (const C& c : {C{"Div", min, -1}, C{"Mul", max, 2}, C{"Add", max, 1}, C{"Sub", min, 1}, C{"Pow", 3, 40}}) {
    INFO(c.op);
    OnnxModel m(13);
    m.input("x", {1, 4}).output("y");
    m.init_ints("a", {}, {c.a}).init_ints("b", {}, {c.b}).init_ints("rest", {1}, {-1});
    m.node(c.op, {"a", "b"}, {"ab"}, "int_math");
    m.node("Unsqueeze", {"ab", "zero"}, {"ab1"});
    m.init_ints("zero", {1}, {0});
    m.node("Concat", {"rest", "ab1"}, {"shape"}).i("axis", 0);
    m.node("Reshape", {"x", "shape"}, {"y"});
    CHECK_THROWS_WITH(import_onnx(m.save("int_overflow.onnx")), Catch::Contains("overflow") && Catch::Contains("int_math"));
  }
  {
    OnnxModel m(13);
    m.input("x", {1, 4}).output("y");
    m.init_ints("a", {1}, {min});
    m.node("Neg", {"a"}, {"y0"}, "negate");
    m.node("Reshape", {"x", "y0"}, {"y"});
    CHECK_THROWS_WITH(import_onnx(m.save("int_neg.onnx")), Catch::Contains("overflow") && Catch::Contains("negate"));
  }
  {
    // Range near INT64_MAX in int64 exactly (through double, start and limit were both 2^63: no element).
    OnnxModel m(11);
    m.input("x", {4}).output("y");
    m.init_ints("start", {}, {max - 5}).init_ints("limit", {}, {max}).init_ints("delta", {}, {4});
    m.init_ints("offset", {2}, {max - 6, max - 5});
    m.node("Range", {"start", "limit", "delta"}, {"r"}, "range_near_max");  // [max-5, max-1]
    m.node("Sub", {"r", "offset"}, {"shape"});                             // [1, 4]
    m.node("Reshape", {"x", "shape"}, {"y"});
    CHECK(import_onnx(m.save("int_range.onnx")).output_shape("y") == Shape{1, 4});
  }
  // Mod by -1 is 0 for every dividend, INT64_MIN included (the spec's definition; the hardware traps).
  OnnxModel m(13);
  m.input("x", {4}).output("y");
  m.init_ints("a", {2}, {min, 7}).init_ints("b", {}, {-1}).init_ints("dims", {2}, {1, 4});
  m.node("Mod", {"a", "b"}, {"zeros"});
  m.node("Add", {"zeros", "dims"}, {"shape"});
  m.node("Reshape", {"x", "shape"}, {"y"});
  Model net = import_onnx(m.save("int_mod.onnx"));
  CHECK(net.output_shape("y") == Shape{1, 4});
}

TEST_CASE("Arithmetic on constants is computed at import, other layers of constants by fold_constants", "[onnx][fold]") {
  const Shape xs{1, 4};
  auto x = random_values(4, 32);
  OnnxModel m(13);
  m.init("a", {4}, {1, 2, 3, 4}).init("b", {}, {0.5f});
  m.input("x", xs.to_vector()).output("y");
  m.node("Mul", {"a", "b"}, {"ab"});     // computed by the importer
  m.node("Tanh", {"ab"}, {"t"});         // a layer of a constant: the pass folds it
  m.node("Add", {"x", "t"}, {"y"});
  Model net = import_onnx(m.save("fold.onnx"));
  CHECK(computing_steps(Session(net)) == 1);  // the add alone
  auto got = run_net(net, {{"x", make_input(xs, x)}})[0];
  for (std::size_t i = 0; i < 4; ++i) CHECK(got.values[i] == Approx(x[i] + std::tanh(0.5f * float(i + 1))));
  ImportOptions no_fold;
  no_fold.fold_constants = false;
  Model unfolded = import_onnx(m.save("fold.onnx"), no_fold);
  CHECK(count_layers(unfolded, "tanh") == 1);
  CHECK(count_layers(unfolded, "mul") == 0);
  CHECK(max_abs_diff(run_net(unfolded, {{"x", make_input(xs, x)}})[0].values, got.values) < 1e-6);
}

TEST_CASE("Index and mask arithmetic on constants is computed at import", "[onnx][constant]") {
  // A Swin-like attention mask: ScatterND into zeros, Mod, Equal, Where, Not, Pow, Dropout(p=0, training).
  const Shape xs{2, 3};
  auto x = random_values(6, 33);
  OnnxModel m(13);
  m.input("x", xs.to_vector()).output("y");
  m.init_ints("shape", {2}, {2, 3}).init_ints("idx", {2, 2}, {0, 1, 1, 2}).init("upd", {2}, {5, 7});
  m.init_ints("seven", {}, {7}).init_ints("three", {}, {3}).init("zero", {}, {0.0f}).init("two", {}, {2.0f});
  m.node("ConstantOfShape", {"shape"}, {"zeros"}).t("value", float_tensor({1}, {0.0f}));
  m.node("ScatterND", {"zeros", "idx", "upd"}, {"mask"});          // [[0,5,0],[0,0,7]]
  m.node("Mod", {"seven", "three"}, {"one_i"});                      // 1
  m.node("Cast", {"one_i"}, {"one"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Equal", {"mask", "zero"}, {"is_zero"});
  m.node("Not", {"is_zero"}, {"set"});
  m.node("Pow", {"two", "one"}, {"two_again"});                      // 2
  m.node("Where", {"set", "two_again", "mask"}, {"bias"});           // [[0,2,0],[0,0,2]]
  m.init("ratio", {}, {0.0f});
  m.init_ints("training", {}, {1});
  m.node("Dropout", {"x", "ratio", "training"}, {"xd"});
  m.node("Add", {"xd", "bias"}, {"y"});
  Model net = import_onnx(m.save("mask.onnx"));
  CHECK(computing_steps(Session(net)) == 1);
  auto got = run_net(net, {{"x", make_input(xs, x)}})[0];
  const float bias[] = {0, 2, 0, 0, 0, 2};
  for (std::size_t i = 0; i < 6; ++i) CHECK(got.values[i] == Approx(x[i] + bias[i]));
}

TEST_CASE("Input shapes: symbolic dims default to 1 or come from the options", "[onnx][inputs]") {
  OnnxModel m(13);
  unary_model(m, "Relu", Shape{-1, 3});  // symbolic batch
  std::string path = m.save("symbolic.onnx");
  CHECK(import_onnx(path).input_shape("x") == Shape{1, 3});
  ImportOptions o;
  o.input_shapes["x"] = Shape{4, 3};
  CHECK(import_onnx(path, o).input_shape("x") == Shape{4, 3});
  o.input_shapes["x"] = Shape{4, 5};
  CHECK_THROWS_AS(import_onnx(path, o), Error);
  ImportOptions unknown;
  unknown.input_shapes["nope"] = Shape{1};
  CHECK_THROWS_WITH(import_onnx(path, unknown), Catch::Contains("nope"));
}

TEST_CASE("If with a condition known at import runs its branch in place, one computed at run time chooses", "[onnx][if]") {
  // cond = (2 == 3), computed at import: the else branch, which reads the outer 'r' and has an initializer.
  auto branch = [](const std::string& name, const std::string& op, float k) {
    OnnxModel b(13);
    b.init(name + "_k", {}, {k});
    b.node(op, {"r", name + "_k"}, {name + "_out"}, name + "_node");
    b.output(name + "_out");
    onnx::GraphProto g = b.graph();
    g.set_name(name);
    return g;
  };
  OnnxModel m(13);
  m.input("x", {4}).output("y");
  m.node("Relu", {"x"}, {"r"});
  m.init_ints("two", {}, {2}).init_ints("three", {}, {3});
  m.node("Equal", {"two", "three"}, {"cond"});
  m.node("If", {"cond"}, {"picked"}, "choose").g("then_branch", branch("then", "Add", 100)).g("else_branch", branch("else", "Mul", 3));
  m.node("Neg", {"picked"}, {"y"});
  Output out = run_model(m, "if_const.onnx", Shape{4}, {-1, 0, 1, 2});
  CHECK(out.values == std::vector<float>{0, 0, -3, -6});

  // The condition a graph input (refused before): both branches run, the taken one's output is kept.
  OnnxModel d(13);
  d.input("x", {4}).typed_input("c", onnx::TensorProto::BOOL, {1}).output("y");
  d.node("Relu", {"x"}, {"r"});
  d.node("If", {"c"}, {"y"}, "choose_at_run_time").g("then_branch", branch("then", "Add", 100)).g("else_branch", branch("else", "Mul", 3));
  Model net = import_onnx(d.save("if_runtime.onnx"));
  auto run = [&](bool c) {
    Blob cond = Blob::allocate(Shape{1}, DType::boolean);
    cond.data_as<uint8_t>()[0] = c;
    return run_net(net, {{"x", make_input(Shape{4}, {-1, 0, 1, 2})}, {"c", cond}})[0].values;
  };
  CHECK(run(true) == std::vector<float>{100, 100, 101, 102});
  CHECK(run(false) == std::vector<float>{0, 0, 3, 6});
  CHECK(run(true) == std::vector<float>{100, 100, 101, 102});
}

TEST_CASE("If whose branches give other sizes: from shapes, the branch is taken when planned, from values, chosen at run", "[onnx][if]") {
  // y = the rows' sums [3] where x has one column, else x [3, cols] (torchvision's RoI
  // pooling guard squeezes a column alike): another rank per branch.
  auto squeeze_branch = [](bool squeeze) {
    OnnxModel b(13);
    if (squeeze) {
      b.init_ints("axis1", {1}, {1});
      b.node("ReduceSum", {"x", "axis1"}, {"sq"}).i("keepdims", 0);
      b.output("sq");
    } else {
      b.node("Identity", {"x"}, {"same"});
      b.output("same");
    }
    onnx::GraphProto g = b.graph();
    g.set_name(squeeze ? "then" : "else");
    return g;
  };
  OnnxModel m(13);
  m.input("x", {3, -1}).output("y");
  m.node("Shape", {"x"}, {"s"});
  m.init_ints("one_index", {}, {1}).init_ints("one", {}, {1});
  m.node("Gather", {"s", "one_index"}, {"cols"});
  m.node("Equal", {"cols", "one"}, {"cond"});
  m.node("If", {"cond"}, {"y"}, "guard").g("then_branch", squeeze_branch(true)).g("else_branch", squeeze_branch(false));
  Model net = import_onnx(m.save("if_shapes.onnx"));
  auto out = run_net(net, {{"x", make_input(Shape{3, 1}, {1, 2, 3})}});
  CHECK(out[0].shape == Shape{3});
  CHECK(out[0].values == std::vector<float>{1, 2, 3});
  out = run_net(net, {{"x", make_input(Shape{3, 2}, {1, 2, 3, 4, 5, 6})}});
  CHECK(out[0].shape == Shape{3, 2});
  CHECK(out[0].values == std::vector<float>{1, 2, 3, 4, 5, 6});
  out = run_net(net, {{"x", make_input(Shape{3, 1}, {7, 8, 9})}});
  CHECK(out[0].shape == Shape{3});

  // A condition from values, branches of one rank and other sizes: y = x > 0 somewhere ? x : x[:1].
  OnnxModel v(13);
  v.input("x", {4}).output("y");
  v.init("zero", {}, {0.0f});
  v.node("Greater", {"x", "zero"}, {"pos"});
  v.node("Cast", {"pos"}, {"posf"}).i("to", onnx::TensorProto::FLOAT);
  v.node("ReduceMax", {"posf"}, {"any"}).i("keepdims", 0);
  v.node("Cast", {"any"}, {"c"}).i("to", onnx::TensorProto::BOOL);
  OnnxModel whole(13), first(13);
  whole.node("Identity", {"x"}, {"w"});
  whole.output("w");
  first.init_ints("s0", {1}, {0}).init_ints("s1", {1}, {1});
  first.node("Slice", {"x", "s0", "s1"}, {"f"});
  first.output("f");
  v.node("If", {"c"}, {"y"}, "by_value").g("then_branch", whole.graph()).g("else_branch", first.graph());
  Model byv = import_onnx(v.save("if_values.onnx"));
  CHECK_FALSE(byv.outputs()[0].dynamic_dims.empty());  // its size depends on values
  auto a = run_net(byv, {{"x", make_input(Shape{4}, {-1, 2, -3, 4})}});
  CHECK(a[0].shape == Shape{4});
  auto b = run_net(byv, {{"x", make_input(Shape{4}, {-1, -2, -3, -4})}});
  CHECK(b[0].shape == Shape{1});
  CHECK(b[0].values == std::vector<float>{-1});
}

TEST_CASE("Zero-size dims: a session runs empty tensors (reductions give their identity, a convolution of batch 0)", "[onnx][empty]") {
  OnnxModel m(18);
  m.input("x", {2, -1, 4}).input("img", {-1, 3, 8, 8}).output("mx").output("mn").output("sum").output("conv");
  m.init_ints("axes", {1}, {1});
  m.node("ReduceMax", {"x", "axes"}, {"mx"});
  m.node("ReduceMin", {"x", "axes"}, {"mn"});
  m.node("ReduceSum", {"x", "axes"}, {"sum"});
  m.init("w", {4, 3, 3, 3}, pattern(108, 7, 3.0f, 5.0f));
  m.node("Conv", {"img", "w"}, {"conv"}).ints("kernel_shape", {3, 3});
  Model net = import_onnx(m.save("empty.onnx"));
  auto run = [&](int64_t len, int64_t batch) {
    return run_net(net, {{"x", make_input(Shape{2, len, 4}, std::vector<float>(static_cast<std::size_t>(8 * len), 1.5f))},
                         {"img", make_input(Shape{batch, 3, 8, 8}, std::vector<float>(static_cast<std::size_t>(192 * batch), 0.5f))}});
  };
  auto out = run(0, 0);  // refused before: "the model takes [2,?,4]"
  REQUIRE(out[0].shape == Shape{2, 1, 4});
  CHECK(out[0].values == std::vector<float>(8, -INFINITY));
  CHECK(out[1].values == std::vector<float>(8, INFINITY));
  CHECK(out[2].values == std::vector<float>(8, 0.0f));
  CHECK(out[3].shape == Shape{0, 4, 6, 6});
  out = run(3, 2);  // and the same session at a size with elements again
  CHECK(out[0].values == std::vector<float>(8, 1.5f));
  CHECK(out[2].values == std::vector<float>(8, 4.5f));
  CHECK(out[3].shape == Shape{2, 4, 6, 6});
}

TEST_CASE("Pow of an integer tensor to integral powers stays exact and integer-typed", "[onnx][typed]") {
  OnnxModel m(15);
  m.typed_input("x", onnx::TensorProto::INT64, {3}).typed_output("y", onnx::TensorProto::INT64);
  m.init("e", {3}, {4, 5, 6});
  m.node("Pow", {"x", "e"}, {"y"});  // refused before: Pow of an INT64 tensor
  Model net = import_onnx(m.save("int_pow.onnx"));
  Blob x = Blob::allocate(Shape{3}, DType::int64);
  for (int i = 0; i < 3; ++i) x.data_as<int64_t>()[i] = i + 1;
  auto out = Session(net).run(std::vector<NamedBlob>{{"x", x}});
  REQUIRE(out[0].blob.dtype() == DType::int64);
  CHECK(std::vector<int64_t>(out[0].blob.data_as<int64_t>(), out[0].blob.data_as<int64_t>() + 3) == std::vector<int64_t>{1, 32, 729});
  // A fractional exponent is still refused for an integer base.
  OnnxModel f(15);
  f.typed_input("x", onnx::TensorProto::INT64, {3}).typed_output("y", onnx::TensorProto::INT64);
  f.init("e", {3}, {0.5f, 1, 2});
  f.node("Pow", {"x", "e"}, {"y"}, "root");
  CHECK_THROWS_WITH(import_onnx(f.save("int_root.onnx")), Catch::Contains("root") && Catch::Contains("INT64"));
}

TEST_CASE("float64 tensors pass every operator, computed in float32 as the import warns", "[onnx][typed]") {
  OnnxModel m(18);
  m.typed_input("x", onnx::TensorProto::DOUBLE, {2, 3}).typed_output("y", onnx::TensorProto::DOUBLE);
  m.init_ints("axes", {1}, {1});
  m.node("ReduceLogSumExp", {"x", "axes"}, {"y"});  // refused before: not an operator integers pass
  Model net = import_onnx(m.save("double_lse.onnx"));
  Blob x = Blob::allocate(Shape{2, 3}, DType::float64);
  for (int i = 0; i < 6; ++i) x.data_as<double>()[i] = 0.5 * i;
  auto out = Session(net).run(std::vector<NamedBlob>{{"x", x}});
  REQUIRE(out[0].blob.dtype() == DType::float64);
  for (int r = 0; r < 2; ++r) {
    double want = 0;
    for (int c = 0; c < 3; ++c) want += std::exp(0.5 * (r * 3 + c));
    CHECK(out[0].blob.data_as<double>()[r] == Approx(std::log(want)).epsilon(1e-6));
  }
}

TEST_CASE("Einsum: any equation (transpose, sums, diagonals, implicit outputs, ellipses) against a direct computation", "[onnx][einsum]") {
  const std::vector<float> x = pattern(24, 7, 3.0f, 2.0f);  // [2, 3, 4]
  auto einsum = [&](const std::string& eq, const Shape& x_shape) {
    OnnxModel m(13);
    m.input("x", x_shape.to_vector()).output("y");
    m.node("Einsum", {"x"}, {"y"}).s("equation", eq);
    return run_model(m, "einsum.onnx", x_shape, std::vector<float>(x.begin(), x.begin() + x_shape.numel()));
  };
  auto at = [&](int a, int b, int c) { return x[static_cast<std::size_t>((a * 3 + b) * 4 + c)]; };
  Output t = einsum("abc->cab", Shape{2, 3, 4});
  CHECK(t.shape == Shape{4, 2, 3});
  CHECK(t.values[(3 * 2 + 1) * 3 + 2] == at(1, 2, 3));
  Output s = einsum("abc->b", Shape{2, 3, 4});  // sums over a and c
  REQUIRE(s.shape == Shape{3});
  for (int b = 0; b < 3; ++b) {
    float want = 0;
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 4; ++c) want += at(a, b, c);
    CHECK(s.values[static_cast<std::size_t>(b)] == Approx(want));
  }
  Output implicit = einsum("cb a", Shape{2, 3, 4});  // implicit: "abc" (alphabetical), spaces ignored
  CHECK(implicit.shape == Shape{4, 3, 2});
  CHECK(implicit.values[(3 * 3 + 2) * 2 + 1] == at(1, 2, 3));
  Output diag = einsum("...ii->...i", Shape{2, 3, 3});  // the batch's diagonals
  REQUIRE(diag.shape == Shape{2, 3});
  for (int a = 0; a < 2; ++a)
    for (int i = 0; i < 3; ++i) CHECK(diag.values[static_cast<std::size_t>(a * 3 + i)] == x[static_cast<std::size_t>(a * 9 + i * 4)]);
  Output trace = einsum("ii", Shape{3, 3});  // implicit: a scalar, the trace
  CHECK(trace.shape == Shape{});
  CHECK(trace.values[0] == Approx(x[0] + x[4] + x[8]));
  // The batched matrix products stay matmul layers.
  OnnxModel mm(13);
  mm.input("x", {2, 3, 4}).output("y");
  mm.init("w", {2, 4, 5}, pattern(40, 5, 2.0f, 3.0f));
  mm.node("Einsum", {"x", "w"}, {"y"}).s("equation", "bij,bjk->bik");
  Model net = import_onnx(mm.save("einsum_matmul.onnx"));
  CHECK(count_layers(net, "matmul") == 1);
  CHECK(count_layers(net, "einsum") == 0);
}

TEST_CASE("Narrow types: float8 and int4 at the edges, Cast and QuantizeLinear onto them, packed initializers", "[onnx][typed]") {
  using T = onnx::TensorProto;
  constexpr int kFloat8E4M3FN = 17, kInt4 = 22;
  OnnxModel m(21);
  m.input("x", {6}).typed_input("w", kInt4, {4});
  m.node("Cast", {"x"}, {"f8"}).i("to", kFloat8E4M3FN);  // saturating
  m.init("half", {}, {0.5f});
  m.init_typed("minus_one", kInt4, {}, {0x0f});  // int32_data holds the packed byte
  m.node("QuantizeLinear", {"x", "half", "minus_one"}, {"q4"});
  m.init("two", {}, {2.0f});
  m.init_typed("one", kInt4, {}, {1});
  m.node("DequantizeLinear", {"w", "two", "one"}, {"dq"});
  auto* k = m.graph().add_initializer();  // int4 [3] in raw data: 1, 2 | -1, two to a byte from the low bits
  k->set_name("k");
  k->set_data_type(kInt4);
  k->add_dims(3);
  k->set_raw_data(std::string("\x21\x0f", 2));
  m.node("Cast", {"k"}, {"kf"}).i("to", T::FLOAT);
  m.typed_output("f8", kFloat8E4M3FN).typed_output("q4", kInt4).output("dq").output("kf");
  Model net = import_onnx(m.save("narrow_edges.onnx"));
  const std::string dnn = test_dir() + "/narrow_edges.dnn";
  net.save(dnn);
  Model model = Model::load(dnn);
  REQUIRE(model.inputs().size() == 2);
  CHECK(model.inputs()[1].dtype == DType::int4);
  CHECK(model.outputs()[0].dtype == DType::float8e4m3fn);
  CHECK(model.outputs()[1].dtype == DType::int4);
  Blob x = make_input(Shape{6}, {0.3f, 1e6f, -3.3f, 460.0f, 0.0f, -INFINITY});
  Blob w = Blob::allocate(Shape{4}, DType::int4);
  const uint8_t w_bits[] = {0x0f, 0x07, 0x08, 0x01};  // -1, 7, -8, 1
  std::memcpy(w.data(), w_bits, 4);
  Session s(model);
  auto out = s.run(std::vector<NamedBlob>{{"x", x}, {"w", w}});
  auto values = [](const Blob& b) {
    std::vector<float> v;
    for (int64_t i = 0; i < b.numel(); ++i) v.push_back(narrow_value(b.dtype(), b.data_as<uint8_t>()[i]));
    return v;
  };
  REQUIRE(out[0].blob.dtype() == DType::float8e4m3fn);
  CHECK(values(out[0].blob) == std::vector<float>{0.3125f, 448, -3.25f, 448, 0, -448});
  // round(x / 0.5) - 1, clipped to [-8, 7]
  REQUIRE(out[1].blob.dtype() == DType::int4);
  CHECK(values(out[1].blob) == std::vector<float>{0, 7, -8, 7, -1, -8});
  const Blob& dq = out[2].blob;
  CHECK(std::vector<float>(dq.data_as<float>(), dq.data_as<float>() + 4) == std::vector<float>{-4, 12, -18, 0});
  const Blob& kf = out[3].blob;
  CHECK(std::vector<float>(kf.data_as<float>(), kf.data_as<float>() + 3) == std::vector<float>{1, 2, -1});

  // A packed initializer short of bytes is an error naming it.
  k->set_raw_data(std::string("\x21", 1));
  CHECK_THROWS_WITH(import_onnx(m.save("narrow_short.onnx")), Catch::Contains("'k'"));
}

TEST_CASE("Typed graph inputs and outputs: integers, bool and float64 at the edges, exact or an error", "[onnx][typed]") {
  using T = onnx::TensorProto;
  // int64 ids + a constant, passed on as int64; a bool mask cast to float; float64 values.
  OnnxModel m(13);
  m.typed_input("ids", T::INT64, {2, 3}).typed_input("mask", T::BOOL, {2, 3}).typed_input("v", T::DOUBLE, {2, 3});
  m.init_ints("one", {1}, {1});
  m.node("Add", {"ids", "one"}, {"next"});
  m.node("Cast", {"mask"}, {"maskf"}).i("to", T::FLOAT);
  m.node("Cast", {"v"}, {"vf"}).i("to", T::FLOAT);
  m.node("Mul", {"vf", "maskf"}, {"masked"});
  m.typed_output("next", T::INT64).output("masked");
  const std::string path = m.save("typed_edges.onnx");
  Model net = import_onnx(path);
  const std::string dnn = test_dir() + "/typed_edges.dnn";
  net.save(dnn);
  Model model = Model::load(dnn);  // the edges' dtypes survive the file
  REQUIRE(model.inputs().size() == 3);
  CHECK(model.inputs()[0].dtype == DType::int64);
  CHECK(model.inputs()[1].dtype == DType::boolean);
  CHECK(model.inputs()[2].dtype == DType::float64);
  CHECK(model.outputs()[0].dtype == DType::int64);
  CHECK(model.outputs()[1].dtype == DType::float32);
  Blob ids = Blob::allocate(Shape{2, 3}, DType::int64), mask = Blob::allocate(Shape{2, 3}, DType::boolean),
       v = Blob::allocate(Shape{2, 3}, DType::float64);
  for (int i = 0; i < 6; ++i) {
    ids.data_as<int64_t>()[i] = 1000 * i - 2000;
    mask.data_as<uint8_t>()[i] = i % 2;
    v.data_as<double>()[i] = 0.25 * i;
  }
  Session s(model);
  auto out = s.run(std::vector<NamedBlob>{{"ids", ids}, {"mask", mask}, {"v", v}});
  REQUIRE(out[0].blob.dtype() == DType::int64);
  for (int i = 0; i < 6; ++i) {
    CHECK(out[0].blob.data_as<int64_t>()[i] == 1000 * i - 1999);
    CHECK(out[1].blob.data_as<float>()[i] == (i % 2 ? 0.25f * static_cast<float>(i) : 0.0f));
  }
  // An id float32 cannot hold exactly is refused, naming the input.
  ids.data_as<int64_t>()[4] = (int64_t{1} << 24) + 1;
  try {
    s.run(std::vector<NamedBlob>{{"ids", ids}, {"mask", mask}, {"v", v}});
    FAIL("an inexact int64 input was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("16777217") != std::string::npos);
    CHECK(e.field() == "ids");
  }
  // The input of the wrong dtype: a clear error.
  CHECK_THROWS_WITH(s.run(std::vector<NamedBlob>{{"ids", Blob::allocate(Shape{2, 3})}, {"mask", mask}, {"v", v}}),
                    Catch::Contains("must be cpu:int64"));

  // Integer Div of run-time tensors truncates toward zero (a float division would not).
  OnnxModel d(13);
  d.typed_input("a", T::INT64, {4});
  d.init_ints("two", {1}, {2});
  d.node("Div", {"a", "two"}, {"q"}, "halve");
  d.typed_output("q", T::INT64);
  Model halve = import_onnx(d.save("typed_div.onnx"));
  halve.save(test_dir() + "/typed_div.dnn");
  Session hs(Model::load(test_dir() + "/typed_div.dnn"));
  Blob a = Blob::allocate(Shape{4}, DType::int64);
  const int64_t av[] = {-7, 7, 5, -1};
  std::copy(std::begin(av), std::end(av), a.data_as<int64_t>());
  auto q = hs.run(std::vector<NamedBlob>{{"a", a}});
  REQUIRE(q[0].blob.dtype() == DType::int64);
  CHECK(std::vector<int64_t>(q[0].blob.data_as<int64_t>(), q[0].blob.data_as<int64_t>() + 4) == std::vector<int64_t>{-3, 3, 2, 0});
  // Operators whose float result is not the integer one are refused, naming the node.
  OnnxModel e(13);
  e.typed_input("a", T::INT64, {4});
  e.node("Softmax", {"a"}, {"p"}, "soft");
  e.typed_output("p", T::INT64);
  CHECK_THROWS_WITH(import_onnx(e.save("typed_softmax.onnx")), Catch::Contains("soft") && Catch::Contains("INT64"));
}

TEST_CASE("1-D Conv, ConvTranspose and pooling run as their 2-D forms on [N, C, 1, L]", "[onnx][conv]") {
  // Each 1-D model against the same operator written in 2-D over [N, C, 1, L].
  const std::vector<float> x = pattern(2 * 3 * 11, 7, 3, 2);
  const std::vector<float> w = pattern(4 * 3 * 3, 5, 2, 3);
  auto model = [&](bool two_d, const std::string& op) {
    OnnxModel m(13);
    m.input("x", two_d ? std::vector<int64_t>{2, 3, 1, 11} : std::vector<int64_t>{2, 3, 11}).output("y");
    auto lift = [&](std::vector<int64_t> v, int64_t first) {
      if (two_d) v.insert(v.begin(), first);
      return v;
    };
    if (op == "Conv") {
      m.init("w", two_d ? std::vector<int64_t>{4, 3, 1, 3} : std::vector<int64_t>{4, 3, 3}, w);
      m.node("Conv", {"x", "w"}, {"y"}).ints("strides", lift({2}, 1)).ints("dilations", lift({2}, 1))
          .ints("pads", two_d ? std::vector<int64_t>{0, 1, 0, 2} : std::vector<int64_t>{1, 2});
    } else if (op == "ConvTranspose") {
      m.init("w", two_d ? std::vector<int64_t>{3, 4, 1, 3} : std::vector<int64_t>{3, 4, 3}, w);
      m.node("ConvTranspose", {"x", "w"}, {"y"}).ints("strides", lift({2}, 1)).ints("output_padding", lift({1}, 0));
    } else {
      m.node(op, {"x"}, {"y"}).ints("kernel_shape", lift({3}, 1)).ints("strides", lift({2}, 1))
          .ints("pads", two_d ? std::vector<int64_t>{0, 1, 0, 1} : std::vector<int64_t>{1, 1});
    }
    return m;
  };
  for (const std::string op : {"Conv", "ConvTranspose", "MaxPool", "AveragePool"}) {
    INFO(op);
    auto one = run_model(model(false, op), "one_d_" + op + ".onnx", Shape{2, 3, 11}, x);
    auto two = run_model(model(true, op), "two_d_" + op + ".onnx", Shape{2, 3, 1, 11}, x);
    REQUIRE(one.shape.rank() == 3);
    CHECK(one.shape == Shape{two.shape[0], two.shape[1], two.shape[3]});
    CHECK(one.values == two.values);
  }
}

TEST_CASE("ScatterND and ScatterElements with constant indices: run-time updates, constant ones, reductions", "[onnx][scatter]") {
  auto run2 = [](OnnxModel& m, const std::string& file, const std::vector<NamedBlob>& in) {
    Model net = import_onnx(m.save(file + ".onnx"));
    net.save(test_dir() + "/" + file + ".dnn");
    Session s(Model::load(test_dir() + "/" + file + ".dnn"));
    auto out = s.run(in);
    const float* v = out[0].blob.data_as<float>();
    return std::vector<float>(v, v + out[0].blob.numel());
  };
  auto blob = [](const Shape& shape, std::vector<float> v) {
    Blob b = Blob::allocate(shape);
    std::copy(v.begin(), v.end(), b.data_as<float>());
    return b;
  };
  const Blob x = blob(Shape{4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  {  // rows 2 and 0 replaced by updates computed at run time
    OnnxModel m(16);
    m.input("x", {4, 2}).input("u", {2, 2}).output("y");
    m.init_ints("i", {2, 1}, {2, 0});
    m.node("ScatterND", {"x", "i", "u"}, {"y"});
    CHECK(run2(m, "scatter_nd_runtime", {{"x", x}, {"u", blob(Shape{2, 2}, {-1, -2, -3, -4})}}) ==
          std::vector<float>{-3, -4, 3, 4, -1, -2, 7, 8});
  }
  {  // elements along axis 1, a repeated position: the later update wins
    OnnxModel m(16);
    m.input("x", {4, 2}).input("u", {1, 2}).output("y");
    m.init_ints("i", {1, 2}, {1, 1});
    m.node("ScatterElements", {"x", "i", "u"}, {"y"}).i("axis", 1);
    CHECK(run2(m, "scatter_elements_runtime", {{"x", x}, {"u", blob(Shape{1, 2}, {10, 20})}}) ==
          std::vector<float>{1, 20, 3, 4, 5, 6, 7, 8});
  }
  {  // constant updates added, a repeated row added twice
    OnnxModel m(16);
    m.input("x", {4, 2}).output("y");
    m.init_ints("i", {3, 1}, {1, 1, 3});
    m.init("u", {3, 2}, {10, 10, 100, 100, 1, 1});
    m.node("ScatterND", {"x", "i", "u"}, {"y"}).s("reduction", "add");
    CHECK(run2(m, "scatter_nd_add", {{"x", x}}) == std::vector<float>{1, 2, 113, 114, 5, 6, 8, 9});
  }
}

TEST_CASE("ScatterND with indices computed at run time (refused before): written, reduced, each index checked", "[onnx][scatter]") {
  auto blob = [](const Shape& shape, std::vector<float> v) {
    Blob b = Blob::allocate(shape);
    std::copy(v.begin(), v.end(), b.data_as<float>());
    return b;
  };
  auto ints = [](const Shape& shape, std::vector<int64_t> v) {
    Blob b = Blob::allocate(shape, DType::int64);
    std::copy(v.begin(), v.end(), b.data_as<int64_t>());
    return b;
  };
  const Blob x = blob(Shape{4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  for (const std::string reduction : {"none", "add", "max"}) {
    INFO(reduction);
    OnnxModel m(18);
    m.input("x", {4, 2}).typed_input("i", onnx::TensorProto::INT64, {3, 1}).input("u", {3, 2}).output("y");
    m.node("ScatterND", {"x", "i", "u"}, {"y"}, "scatter").s("reduction", reduction);
    Model net = import_onnx(m.save("scatter_nd_indices_" + reduction + ".onnx"));
    Session session(net);
    // rows 3, -3 (row 1) and 3 again: without a reduction the later update wins
    auto y = session.run(std::vector<NamedBlob>{{"x", x}, {"i", ints(Shape{3, 1}, {3, -3, 3})}, {"u", blob(Shape{3, 2}, {10, 20, -1, 9, 30, 1})}});
    const float* v = y[0].blob.data_as<float>();
    const std::vector<float> got(v, v + 8);
    const std::vector<float> want = reduction == "none" ? std::vector<float>{1, 2, -1, 9, 5, 6, 30, 1}
                                    : reduction == "add" ? std::vector<float>{1, 2, 2, 13, 5, 6, 47, 29}
                                                         : std::vector<float>{1, 2, 3, 9, 5, 6, 30, 20};
    CHECK(got == want);
    CHECK_THROWS_WITH(session.run(std::vector<NamedBlob>{{"x", x}, {"i", ints(Shape{3, 1}, {0, 4, 1})}, {"u", blob(Shape{3, 2}, {0, 0, 0, 0, 0, 0})}}),
                      Catch::Contains("scatter") && Catch::Contains("4"));
    if (reduction == "add") {  // tuning times it on indices within the data (random ones were refused)
      TuneOptions o;
      o.cache_dir = "-";
      o.unit_budget_ms = 1;
      o.integrated_runs = 2;
      const Model tuned = tune(net, o);
      auto again = Session(tuned).run(std::vector<NamedBlob>{{"x", x}, {"i", ints(Shape{3, 1}, {3, -3, 3})}, {"u", blob(Shape{3, 2}, {10, 20, -1, 9, 30, 1})}});
      CHECK(std::vector<float>(again[0].blob.data_as<float>(), again[0].blob.data_as<float>() + 8) == want);
    }
  }
}

TEST_CASE("ReduceMax and ReduceMin keep -inf, inf and NaN, computed at run time or folded", "[onnx][reduce]") {
  // oneDNN's max reduction gave -3.4e38 for a row of -inf (a fully masked attention row).
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-inf, -inf, 1, -inf, nan, 2, inf, 3};
  for (const std::string op : {"ReduceMax", "ReduceMin"}) {
    INFO(op);
    OnnxModel m(13);
    m.input("x", {4, 2}).output("y");
    m.node(op, {"x"}, {"y"}).ints("axes", {1}).i("keepdims", 0);
    auto y = run_model(m, "reduce_inf_" + op + ".onnx", Shape{4, 2}, x);
    REQUIRE(y.values.size() == 4);
    CHECK(y.values[0] == -inf);
    CHECK(y.values[1] == (op == "ReduceMax" ? 1.0f : -inf));
    CHECK(std::isnan(y.values[2]));
    CHECK(y.values[3] == (op == "ReduceMax" ? inf : 3.0f));
  }
}

TEST_CASE("CenterCropPad: a huge target size is a clear error naming the node, not an allocation", "[onnx][hostile]") {
  OnnxModel m(18);
  m.input("x", {2, 3}).output("y");
  m.init_ints("s", {2}, {1 << 30, 1 << 30});
  m.node("CenterCropPad", {"x", "s"}, {"y"}, "crop");
  CHECK_THROWS_WITH(import_onnx(m.save("crop_huge.onnx")), Catch::Contains("crop") && Catch::Contains("shape"));
  OnnxModel ok(18);
  ok.input("x", {2, 3}).output("y");
  ok.init_ints("s", {2}, {4, 1});
  ok.node("CenterCropPad", {"x", "s"}, {"y"}, "crop");
  auto y = run_model(ok, "crop_ok.onnx", Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(y.shape == Shape{4, 1});
  CHECK(y.values == std::vector<float>{0, 2, 5, 0});  // rows padded by one each side, the middle column kept
}

TEST_CASE("A detector's post-processing: NMS, then gathers, squeezes, slices and a TopK sized by the boxes kept", "[onnx][nms]") {
  OnnxModel m(13);
  m.input("boxes", {1, -1, 4}).input("scores", {1, 2, -1}).output("picked").output("top");
  m.init_ints("most", {1}, {3}).init("iou", {1}, {0.5f}).init("threshold", {1}, {0.1f});
  m.node("NonMaxSuppression", {"boxes", "scores", "most", "iou", "threshold"}, {"kept"});
  m.init_ints("two", {}, {2}).init_ints("zero_axis", {1}, {0});
  m.node("Gather", {"kept", "two"}, {"box_index"}).i("axis", 1);
  m.node("Squeeze", {"boxes", "zero_axis"}, {"rows"});
  m.node("Gather", {"rows", "box_index"}, {"picked"});
  // The kept boxes' classes, largest first, at most 5: K = min(5, boxes kept).
  m.init_ints("s1", {1}, {1}).init_ints("s2", {1}, {2}).init_ints("one_axis", {1}, {1});
  m.node("Slice", {"kept", "s1", "s2", "one_axis"}, {"class_column"});
  m.node("Squeeze", {"class_column", "one_axis"}, {"classes"});
  m.node("Cast", {"classes"}, {"classes_f"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Shape", {"classes"}, {"count"});
  m.init_ints("five", {1}, {5});
  m.node("Concat", {"five", "count"}, {"limits"}).i("axis", 0);
  m.node("ReduceMin", {"limits"}, {"k"}).i("keepdims", 1);
  m.node("TopK", {"classes_f", "k"}, {"top", "top_index"});
  Model net = import_onnx(m.save("nms_tail.onnx"));
  const std::vector<float> boxes = {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 2, 1, 3, 0, 4, 1, 5, 0, 6, 1, 7};
  auto run = [&](const std::vector<float>& scores) {
    const int64_t n = static_cast<int64_t>(scores.size()) / 2;
    return run_net(net, {{"boxes", make_input(Shape{1, n, 4}, std::vector<float>(boxes.begin(), boxes.begin() + 4 * n))},
                         {"scores", make_input(Shape{1, 2, n}, scores)}});
  };
  // Class 0 keeps boxes 0, 2, 4 (box 1 overlaps box 0); class 1 boxes 4, 3, 1 by score.
  auto out = run({0.9f, 0.8f, 0.7f, 0.05f, 0.6f, 0.1f, 0.2f, 0.05f, 0.6f, 0.65f});
  REQUIRE(out[0].shape == Shape{6, 4});
  for (int j = 0; j < 4; ++j) CHECK(out[0].values[static_cast<std::size_t>(4 + j)] == boxes[static_cast<std::size_t>(8 + j)]);
  CHECK(out[1].values == std::vector<float>{1, 1, 1, 0, 0});
  // Two kept: K = 2.
  out = run({0.9f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.3f});
  REQUIRE(out[0].shape == Shape{2, 4});
  CHECK(out[1].values == std::vector<float>{1, 0});
  // None kept, with another box count.
  out = run({0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  CHECK(out[0].shape == Shape{0, 4});
  CHECK(out[1].shape == Shape{0});
}

TEST_CASE("TopK with K computed from values at run time returns K of them", "[onnx][topk]") {
  // K = the number of set flags: the largest K values of x.
  OnnxModel m(13);
  m.input("x", {6}).typed_input("flags", onnx::TensorProto::BOOL, {6}).output("values").typed_output("indices", onnx::TensorProto::INT64);
  m.node("Cast", {"flags"}, {"ones"}).i("to", onnx::TensorProto::INT64);
  m.node("ReduceSum", {"ones"}, {"k"}).i("keepdims", 1);
  m.node("TopK", {"x", "k"}, {"values", "indices"});
  Model net = import_onnx(m.save("topk_run_k.onnx"));
  Session session(net);
  auto run = [&](std::vector<uint8_t> f) {
    Blob flags = Blob::allocate(Shape{6}, DType::boolean);
    std::copy(f.begin(), f.end(), flags.data_as<uint8_t>());
    return session.run(std::vector<NamedBlob>{{"x", make_input(Shape{6}, {3, 9, 1, 7, 5, 8})}, {"flags", flags}});
  };
  auto out = run({1, 0, 1, 0, 1, 0});
  REQUIRE(out[0].blob.shape() == Shape{3});
  CHECK(std::vector<float>(out[0].blob.data_as<float>(), out[0].blob.data_as<float>() + 3) == std::vector<float>{9, 8, 7});
  CHECK(out[1].blob.dtype() == DType::int64);
  CHECK(std::vector<int64_t>(out[1].blob.data_as<int64_t>(), out[1].blob.data_as<int64_t>() + 3) == std::vector<int64_t>{1, 5, 3});
  out = run({0, 0, 0, 0, 0, 0});
  CHECK(out[0].blob.shape() == Shape{0});
  out = run({1, 1, 1, 1, 1, 1});
  CHECK(out[0].blob.shape() == Shape{6});
}

TEST_CASE("Window functions of a constant size are computed at import, DFT of a windowed frame", "[onnx][signal]") {
  // y = DFT(x * HannWindow(8)) along the frame: an STFT's one frame, as audio front ends compute it.
  OnnxModel m(17);
  m.input("x", {1, 8, 1}).output("y").output("hamming").output("blackman");
  m.init_ints("eight", {}, {8});
  m.node("HannWindow", {"eight"}, {"hann"});
  m.node("HammingWindow", {"eight"}, {"hamming"}).i("periodic", 0);
  m.node("BlackmanWindow", {"eight"}, {"blackman"});
  m.init_ints("frame_shape", {3}, {1, 8, 1});
  m.node("Reshape", {"hann", "frame_shape"}, {"hann3"});
  m.node("Mul", {"x", "hann3"}, {"windowed"});
  m.node("DFT", {"windowed"}, {"y"}).i("axis", 1).i("onesided", 1);
  Model net = import_onnx(m.save("stft_frame.onnx"));
  const std::vector<float> x = {1, 2, 3, 4, 3, 2, 1, 0};
  auto out = run_net(net, {{"x", make_input(Shape{1, 8, 1}, x)}});
  REQUIRE(out[0].shape == Shape{1, 5, 2});
  const double pi = std::numbers::pi;
  for (int k = 0; k < 5; ++k) {
    double re = 0, im = 0;
    for (int t = 0; t < 8; ++t) {
      const double w = std::pow(std::sin(pi * t / 8), 2);
      re += x[static_cast<std::size_t>(t)] * w * std::cos(-2 * pi * k * t / 8);
      im += x[static_cast<std::size_t>(t)] * w * std::sin(-2 * pi * k * t / 8);
    }
    CHECK(out[0].values[static_cast<std::size_t>(2 * k)] == Approx(re).margin(1e-5));
    CHECK(out[0].values[static_cast<std::size_t>(2 * k + 1)] == Approx(im).margin(1e-5));
  }
  for (int t = 0; t < 8; ++t) {
    CHECK(out[1].values[static_cast<std::size_t>(t)] == Approx(25.0 / 46 - 21.0 / 46 * std::cos(2 * pi * t / 7)).margin(1e-6));
    CHECK(out[2].values[static_cast<std::size_t>(t)] == Approx(0.42 - 0.5 * std::cos(2 * pi * t / 8) + 0.08 * std::cos(4 * pi * t / 8)).margin(1e-6));
  }
}

TEST_CASE("A 0 a graph input declares is a zero-size dim, Reshape with allowzero keeps a 0", "[onnx][shape]") {
  // It was read as a symbolic dim, probed at 64: the run at 0 was refused.
  OnnxModel m(14);
  m.input("x", {0, 3, 4}).output("y").output("t");
  m.init_ints("dims", {3}, {3, 4, 0});
  m.node("Reshape", {"x", "dims"}, {"y"}).i("allowzero", 1);
  m.init_ints("k", {}, {1});
  m.node("Transpose", {"x"}, {"xt"}).ints("perm", {1, 0, 2});
  m.node("Trilu", {"xt", "k"}, {"t"});
  Model net = import_onnx(m.save("zero_dims.onnx"));
  REQUIRE(net.inputs()[0].shape == Shape{0, 3, 4});
  CHECK(net.inputs()[0].dynamic_dims.empty());
  auto out = Session(net).run(std::vector<NamedBlob>{{"x", make_input(Shape{0, 3, 4}, {})}});
  CHECK(out[0].blob.shape() == Shape{3, 4, 0});
  CHECK(out[1].blob.shape() == Shape{3, 0, 4});
}

TEST_CASE("Inputs that set sizes: a session plans per value", "[onnx][signal][shape]") {
  // A window's size, Range's start and ConstantOfShape's shape given as inputs.
  // Range's start reaches it through Sub, Div and Ceil first (its expanded
  // form's arithmetic); `bias` is a scalar input read as data only: no plan per value.
  OnnxModel m(17);
  m.typed_input("n", onnx::TensorProto::INT64, {}).input("start", {}).typed_input("dims", onnx::TensorProto::INT64, {2});
  m.input("bias", {}).output("w").output("r").output("c").output("count").output("b");
  m.init("limit", {}, {5.0f}).init("delta", {}, {0.5f});
  m.node("HannWindow", {"n"}, {"w"});
  m.node("Range", {"start", "limit", "delta"}, {"r"});
  m.node("Sub", {"limit", "start"}, {"span"});
  m.node("Div", {"span", "delta"}, {"steps"});
  m.node("Ceil", {"steps"}, {"count"});
  m.node("ConstantOfShape", {"dims"}, {"c"}).t("value", float_tensor({1}, {7.0f}));
  m.node("Add", {"bias", "limit"}, {"b"});
  Model net = import_onnx(m.save("value_inputs.onnx"));
  Session session(net);
  auto run = [&](int64_t n, float start, std::vector<int64_t> dims, float bias) {
    Blob nb = Blob::allocate(Shape{}, DType::int64), db = Blob::allocate(Shape{2}, DType::int64);
    nb.data_as<int64_t>()[0] = n;
    std::copy(dims.begin(), dims.end(), db.data_as<int64_t>());
    return session.run(std::vector<NamedBlob>{{"n", nb}, {"start", make_input(Shape{}, {start})}, {"dims", db},
                                              {"bias", make_input(Shape{}, {bias})}});
  };
  auto check = [&](int64_t n, float start, std::vector<int64_t> dims) {
    auto out = run(n, start, dims, 0.25f);
    REQUIRE(out[0].blob.shape() == Shape{n});
    for (int64_t i = 0; i < n; ++i)
      CHECK(out[0].blob.data_as<float>()[i] == Approx(std::pow(std::sin(std::numbers::pi * i / n), 2)).margin(1e-6));
    const auto count = static_cast<int64_t>(std::ceil((5.0 - start) / 0.5));
    REQUIRE(out[1].blob.shape() == Shape{count});
    for (int64_t i = 0; i < count; ++i) CHECK(out[1].blob.data_as<float>()[i] == Approx(start + 0.5 * i));
    CHECK(out[3].blob.data_as<float>()[0] == static_cast<float>(count));
    REQUIRE(out[2].blob.shape() == Shape(dims));
    for (int64_t i = 0; i < out[2].blob.numel(); ++i) CHECK(out[2].blob.data_as<float>()[i] == 7.0f);
  };
  check(8, 1.0f, {2, 3});
  check(3, 4.0f, {1, 5});
  check(8, 1.0f, {2, 3});
  CHECK(session.plan_counts().built == 3);  // the session's first, at the default values (ones), and one per value met
  // The data-only scalar changes no plan.
  for (float bias : {1.0f, 2.0f, 3.0f}) CHECK(run(8, 1.0f, {2, 3}, bias)[4].blob.data_as<float>()[0] == 5.0f + bias);
  CHECK(session.plan_counts().built == 3);
  // A size beyond what a window may have: an error naming the field.
  try {
    run(int64_t{1} << 30, 1.0f, {2, 3}, 0.0f);
    FAIL("a window of 2^30 values was planned");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("size") != std::string::npos);
  }
}

TEST_CASE("MaxPool's Indices: the flat index of each window's first largest value, row- or column-major", "[onnx][pool]") {
  // x [1,2,2,3]; 2x2 windows, stride 1, padded by 1 at the top and left: the padding is never picked.
  const std::vector<float> x = {5, 1, 5, 2, 7, 7, /* channel 1 */ -1, -3, -2, -4, -1, -6};
  for (int64_t order : {0, 1}) {
    OnnxModel m(12);
    m.input("x", {1, 2, 2, 3}).output("y").typed_output("i", onnx::TensorProto::INT64);
    m.node("MaxPool", {"x"}, {"y", "i"}).ints("kernel_shape", {2, 2}).ints("pads", {1, 1, 0, 0}).i("storage_order", order);
    Model net = import_onnx(m.save("maxpool_indices" + std::to_string(order) + ".onnx"));
    auto out = Session(net).run(std::vector<NamedBlob>{{"x", make_input(Shape{1, 2, 2, 3}, x)}});
    REQUIRE(out[1].blob.shape() == Shape{1, 2, 2, 3});
    REQUIRE(out[1].blob.dtype() == DType::int64);
    std::vector<int64_t> want;
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t oh = 0; oh < 2; ++oh)
        for (int64_t ow = 0; ow < 3; ++ow) {
          int64_t bh = -1, bw = -1;
          for (int64_t h = oh - 1; h <= oh; ++h)
            for (int64_t w = ow - 1; w <= ow; ++w)
              if (h >= 0 && w >= 0 && (bh < 0 || x[static_cast<std::size_t>((c * 2 + h) * 3 + w)] > x[static_cast<std::size_t>((c * 2 + bh) * 3 + bw)]))
                bh = h, bw = w;
          want.push_back(c * 6 + (order ? bw * 2 + bh : bh * 3 + bw));
        }
    CHECK(std::vector<int64_t>(out[1].blob.data_as<int64_t>(), out[1].blob.data_as<int64_t>() + 12) == want);
  }
}

TEST_CASE("MaxUnpool puts each value back where MaxPool's Indices found it, zeros elsewhere", "[onnx][pool]") {
  // SegNet's encoder-decoder: MaxPool with Indices, then MaxUnpool of the
  // pooled values (indices computed at run time), its size given or inferred.
  const std::vector<float> x = {1, 9, 2, 3, /**/ 4, 5, 8, 6, /**/ 7, 0, 1, 1, /**/ 2, 3, 1, 4,
                                /* channel 1 */ -1, -2, -3, -4, -5, -6, -7, -8, -9, -1, -2, -3, -4, -5, -6, -7};
  for (bool sized : {false, true}) {
    OnnxModel m(12);
    m.input("x", {1, 2, 4, 4}).output("y");
    m.node("MaxPool", {"x"}, {"p", "i"}).ints("kernel_shape", {2, 2}).ints("strides", {2, 2});
    std::vector<std::string> ins = {"p", "i"};
    if (sized) {
      m.init_ints("shape", {4}, {1, 2, 5, 6});
      ins.push_back("shape");
    }
    m.node("MaxUnpool", ins, {"y"}).ints("kernel_shape", {2, 2}).ints("strides", {2, 2});
    Model net = import_onnx(m.save(sized ? "maxunpool_sized.onnx" : "maxunpool.onnx"));
    auto out = run_net(net, {{"x", make_input(Shape{1, 2, 4, 4}, x)}});
    const int64_t h = sized ? 5 : 4, w = sized ? 6 : 4;
    REQUIRE(out[0].shape == Shape{1, 2, h, w});
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t r = 0; r < h; ++r)
        for (int64_t q = 0; q < w; ++q) {
          float want = 0;
          if (r < 4 && q < 4) {
            // The window's largest value, where it lies.
            const int64_t br = r / 2 * 2, bq = q / 2 * 2;
            int64_t at = -1;
            for (int64_t a = br; a < br + 2; ++a)
              for (int64_t b = bq; b < bq + 2; ++b)
                if (at < 0 || x[static_cast<std::size_t>(c * 16 + a * 4 + b)] > x[static_cast<std::size_t>(at)]) at = c * 16 + a * 4 + b;
            if (at == c * 16 + r * 4 + q) want = x[static_cast<std::size_t>(at)];
          }
          INFO(c << " " << r << " " << q);
          CHECK(out[0].values[static_cast<std::size_t>((c * h + r) * w + q)] == want);
        }
  }
  // A smaller output_shape than the unpooled size is an error naming the field.
  OnnxModel bad(12);
  bad.input("x", {1, 1, 2, 2}).input("i", {1, 1, 2, 2}).output("y");
  bad.init_ints("shape", {4}, {1, 1, 3, 3});
  bad.node("MaxUnpool", {"x", "i", "shape"}, {"y"}).ints("kernel_shape", {2, 2}).ints("strides", {2, 2});
  CHECK_THROWS_WITH(import_onnx(bad.save("maxunpool_small.onnx")), Catch::Contains("output_shape"));
}

TEST_CASE("TensorScatter writes each batch row's update into the cache at write indices fed at run time", "[onnx][scatter]") {
  // A KV cache [batch 2, heads 1, max 4, dim 3], one or two new positions per row.
  for (const std::string mode : {"linear", "circular"}) {
    const int64_t seq = 2;
    OnnxModel m(24);
    m.input("past", {2, 1, 4, 3}).input("update", {2, 1, seq, 3});
    m.typed_input("at", onnx::TensorProto::INT64, {2}).output("present");
    m.node("TensorScatter", {"past", "update", "at"}, {"present"}).s("mode", mode);
    Model net = import_onnx(m.save("tensor_scatter_" + mode + ".onnx"));
    std::vector<float> past(24), update(12);
    for (std::size_t i = 0; i < past.size(); ++i) past[i] = static_cast<float>(i);
    for (std::size_t i = 0; i < update.size(); ++i) update[i] = -1.f - static_cast<float>(i);
    const std::vector<int64_t> at = {1, mode == "circular" ? 3 : 2};
    Blob at_blob = Blob::allocate(Shape{2}, DType::int64);
    for (int i = 0; i < 2; ++i) at_blob.data_as<int64_t>()[i] = at[static_cast<std::size_t>(i)];
    auto out = Session(net).run(std::vector<NamedBlob>{
        {"past", make_input(Shape{2, 1, 4, 3}, past)}, {"update", make_input(Shape{2, 1, seq, 3}, update)}, {"at", at_blob}});
    std::vector<float> want = past;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t d = 0; d < 3; ++d) {
          const int64_t pos = (at[static_cast<std::size_t>(b)] + s) % 4;
          want[static_cast<std::size_t>((b * 4 + pos) * 3 + d)] = update[static_cast<std::size_t>((b * seq + s) * 3 + d)];
        }
    INFO(mode);
    REQUIRE(out[0].blob.shape() == Shape{2, 1, 4, 3});
    CHECK(std::vector<float>(out[0].blob.data_as<float>(), out[0].blob.data_as<float>() + 24) == want);
    if (mode == "linear") {
      // Past the end in linear mode: an error naming the scatter, not a write elsewhere.
      at_blob.data_as<int64_t>()[1] = 3;
      CHECK_THROWS_AS(Session(net).run(std::vector<NamedBlob>{{"past", make_input(Shape{2, 1, 4, 3}, past)},
                                                              {"update", make_input(Shape{2, 1, seq, 3}, update)},
                                                              {"at", at_blob}}),
                      Error);
    }
  }
  // Constant write indices past the end: refused at import, naming the field.
  OnnxModel bad(24);
  bad.input("past", {1, 4, 3}).input("update", {1, 2, 3}).output("present");
  bad.init_ints("at", {1}, {3});
  bad.node("TensorScatter", {"past", "update", "at"}, {"present"});
  CHECK_THROWS_WITH(import_onnx(bad.save("tensor_scatter_bad.onnx")), Catch::Contains("write_indices"));
}

TEST_CASE("Slice of a run-time tensor to nothing gives an empty tensor", "[onnx][slice]") {
  OnnxModel m(13);
  m.input("x", {4, 3}).output("y");
  m.init_ints("starts", {1}, {10});
  m.init_ints("ends", {1}, {20});
  m.init_ints("axes", {1}, {0});
  m.node("Relu", {"x"}, {"r"});
  m.node("Slice", {"r", "starts", "ends", "axes"}, {"y"});
  Model net = import_onnx(m.save("slice_to_nothing.onnx"));
  auto out = run_net(net, {{"x", make_input(Shape{4, 3}, std::vector<float>(12, 1.f))}});
  CHECK(out[0].shape == Shape{0, 3});
}

TEST_CASE("STFT: frames of a signal windowed and transformed, one-sided", "[onnx][signal]") {
  OnnxModel m(17);
  m.input("x", {1, 10, 1}).output("y");
  m.init_ints("step", {}, {3});
  const std::vector<float> window = {0.5f, 1, 1, 0.5f};
  m.init("window", {4}, window);
  m.node("STFT", {"x", "step", "window"}, {"y"});
  Model net = import_onnx(m.save("stft.onnx"));
  const std::vector<float> x = {1, -2, 3, 0.5f, 4, -1, 2, 2, -3, 1};
  auto out = run_net(net, {{"x", make_input(Shape{1, 10, 1}, x)}});
  REQUIRE(out[0].shape == Shape{1, 3, 3, 2});  // (10 - 4) / 3 + 1 frames, 4 / 2 + 1 bins
  const double pi = std::numbers::pi;
  for (int f = 0; f < 3; ++f)
    for (int k = 0; k < 3; ++k) {
      double re = 0, im = 0;
      for (int t = 0; t < 4; ++t) {
        const double v = x[static_cast<std::size_t>(3 * f + t)] * window[static_cast<std::size_t>(t)];
        re += v * std::cos(-2 * pi * k * t / 4);
        im += v * std::sin(-2 * pi * k * t / 4);
      }
      CHECK(out[0].values[static_cast<std::size_t>((f * 3 + k) * 2)] == Approx(re).margin(1e-5));
      CHECK(out[0].values[static_cast<std::size_t>((f * 3 + k) * 2 + 1)] == Approx(im).margin(1e-5));
    }
}

TEST_CASE("Dropout whose training_mode is fed at run time is refused, not run as an identity", "[onnx][constant]") {
  OnnxModel m(13);
  m.input("x", {2, 3}).typed_input("training", onnx::TensorProto::BOOL, {}).output("y");
  m.init("ratio", {}, {0.5f});
  m.node("Dropout", {"x", "ratio", "training"}, {"y"}, "drop");
  CHECK_THROWS_WITH(import_onnx(m.save("dropout_run_time_training.onnx")),
                    Catch::Contains("'drop'") && Catch::Contains("training_mode is computed at run time"));
}

TEST_CASE("DeformConv: zero offsets and a mask of ones are Conv, an offset of one row reads the next row", "[onnx][deform]") {
  OnnxModel m(19);
  m.input("x", {1, 2, 4, 5}).input("offset", {1, 18, 4, 5}).output("y").output("ref").output("shifted");
  const std::vector<float> w = pattern(2 * 2 * 3 * 3, 7, 3, 5);
  m.init("W", {2, 2, 3, 3}, w).init("B", {2}, {0.5f, -1});
  m.init("down", {1, 18, 4, 5}, [] {  // every tap moved one row down: h offset 1, w offset 0
    std::vector<float> v(18 * 20, 0.0f);
    for (int t = 0; t < 9; ++t) std::fill_n(v.begin() + (2 * t) * 20, 20, 1.0f);
    return v;
  }());
  m.node("DeformConv", {"x", "W", "offset", "B"}, {"y"}).ints("pads", {1, 1, 1, 1});
  m.node("Conv", {"x", "W", "B"}, {"ref"}).ints("pads", {1, 1, 1, 1});
  m.node("DeformConv", {"x", "W", "down", "B"}, {"shifted"}).ints("pads", {1, 1, 1, 1});
  Model net = import_onnx(m.save("deform_conv.onnx"));
  const std::vector<float> x = pattern(40, 11, 5, 3);
  auto out = run_net(net, {{"x", make_input(Shape{1, 2, 4, 5}, x)}, {"offset", make_input(Shape{1, 18, 4, 5}, std::vector<float>(360, 0.0f))}});
  CHECK(max_abs_diff(out[0].values, out[1].values) < 1e-5);
  // Shifted one row down: the conv of x moved up a row (row 0 aside: its top taps read x's row 0, not padding).
  std::vector<float> x_up(40, 0.0f);  // x moved up a row: row r holds x's row r + 1
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < 3; ++r)
      for (int k = 0; k < 5; ++k) x_up[static_cast<std::size_t>((c * 4 + r) * 5 + k)] = x[static_cast<std::size_t>((c * 4 + r + 1) * 5 + k)];
  auto moved = run_net(net, {{"x", make_input(Shape{1, 2, 4, 5}, x_up)}, {"offset", make_input(Shape{1, 18, 4, 5}, std::vector<float>(360, 0.0f))}});
  for (int c = 0; c < 2; ++c)
    for (int r = 1; r < 4; ++r)
      for (int k = 0; k < 5; ++k) {
        const std::size_t at = static_cast<std::size_t>((c * 4 + r) * 5 + k);
        CHECK(out[2].values[at] == Approx(moved[1].values[at]).margin(1e-5));
      }
  // Offsets of NaN, inf or far outside read nothing (the fuzzer's case: no index made from them): the bias alone.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -3e38f, 1e30f}) {
    auto far = run_net(net, {{"x", make_input(Shape{1, 2, 4, 5}, x)}, {"offset", make_input(Shape{1, 18, 4, 5}, std::vector<float>(360, bad))}});
    for (std::size_t i = 0; i < 40; ++i) CHECK(far[0].values[i] == (i < 20 ? 0.5f : -1.0f));
  }
}

TEST_CASE("CausalConvWithState: a decode step at a time with the state carried equals the whole sequence", "[onnx][conv]") {
  // Mamba's streaming convolution: past_state a run-time input, a bias, SiLU.
  const int64_t c = 3, k = 3, len = 6;
  const std::vector<float> w = pattern(static_cast<std::size_t>(c * k), 5, 3, 4), b{0.25f, -0.5f, 0.1f};
  auto model = [&](int64_t steps, const std::string& file) {
    OnnxModel m(27);
    m.input("x", {1, c, steps}).input("past", {1, c, k - 1}).output("y").output("present");
    m.init("W", {c, 1, k}, w).init("B", {c}, b);
    m.node("CausalConvWithState", {"x", "W", "B", "past"}, {"y", "present"}).s("activation", "silu");
    return import_onnx(m.save(file));
  };
  const Model whole = model(len, "causal_conv_whole.onnx"), step = model(2, "causal_conv_step.onnx");
  const std::vector<float> x = pattern(static_cast<std::size_t>(c * len), 7, 5, 3);
  auto all = run_net(whole, {{"x", make_input(Shape{1, c, len}, x)}, {"past", make_input(Shape{1, c, k - 1}, std::vector<float>(c * (k - 1), 0.0f))}});
  // The formula: y[ch][t] = silu(b[ch] + sum_j w[ch][j] * padded[ch][t + j]), padded = k - 1 zeros, then x.
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t t = 0; t < len; ++t) {
      double acc = b[static_cast<std::size_t>(ch)];
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = t + j - (k - 1);
        if (at >= 0) acc += w[static_cast<std::size_t>(ch * k + j)] * x[static_cast<std::size_t>(ch * len + at)];
      }
      CHECK(all[0].values[static_cast<std::size_t>(ch * len + t)] == Approx(acc / (1 + std::exp(-acc))).margin(1e-5));
    }
  std::vector<float> state(static_cast<std::size_t>(c * (k - 1)), 0.0f);
  for (int64_t t0 = 0; t0 < len; t0 += 2) {
    std::vector<float> chunk;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t t = t0; t < t0 + 2; ++t) chunk.push_back(x[static_cast<std::size_t>(ch * len + t)]);
    auto out = run_net(step, {{"x", make_input(Shape{1, c, 2}, chunk)}, {"past", make_input(Shape{1, c, k - 1}, state)}});
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t t = 0; t < 2; ++t)
        CHECK(out[0].values[static_cast<std::size_t>(ch * 2 + t)] == Approx(all[0].values[static_cast<std::size_t>(ch * len + t0 + t)]).margin(1e-6));
    state = out[1].values;
  }
  CHECK(max_abs_diff(state, all[1].values) == 0);  // the last k - 1 inputs
}

TEST_CASE("LinearAttention: a prefill equals its tokens one decode step at a time, bad shapes name the field", "[onnx][attention]") {
  // Gated DeltaNet's form with grouped-query heads (4 query heads on 2 key/value
  // heads), every input fed at run time as a model's are: per-key decay, per-head beta.
  const int64_t t = 3, hq = 4, hkv = 2, dk = 3, dv = 2;
  auto model = [&](int64_t tokens, const std::string& file) {
    OnnxModel m(27);
    m.input("q", {1, tokens, hq * dk}).input("k", {1, tokens, hkv * dk}).input("v", {1, tokens, hkv * dv});
    m.input("past", {1, hkv, dk, dv}).input("decay", {1, tokens, hkv * dk}).input("beta", {1, tokens, hkv});
    m.output("y").output("present");
    m.node("LinearAttention", {"q", "k", "v", "past", "decay", "beta"}, {"y", "present"})
        .i("q_num_heads", hq).i("kv_num_heads", hkv).s("update_rule", "gated_delta");
    return import_onnx(m.save(file));
  };
  const Model prefill = model(t, "linear_attention_prefill.onnx"), step = model(1, "linear_attention_step.onnx");
  const std::vector<float> q = pattern(t * hq * dk, 5, 3, 4), k = pattern(t * hkv * dk, 7, 5, 3), v = pattern(t * hkv * dv, 3, 2, 5);
  std::vector<float> decay = pattern(t * hkv * dk, 11, 3, 7), beta = pattern(t * hkv, 13, 4, 3);
  for (auto& g : decay) g = -std::abs(g);      // log-space decay: exp(g) <= 1
  for (auto& b : beta) b = 0.5f + 0.25f * b;  // an update rate
  const std::vector<float> past = pattern(hkv * dk * dv, 17, 5, 2);
  auto slice = [](const std::vector<float>& x, int64_t tok, int64_t width) {
    return std::vector<float>(x.begin() + tok * width, x.begin() + (tok + 1) * width);
  };
  auto all = run_net(prefill, {{"q", make_input(Shape{1, t, hq * dk}, q)}, {"k", make_input(Shape{1, t, hkv * dk}, k)},
                               {"v", make_input(Shape{1, t, hkv * dv}, v)}, {"past", make_input(Shape{1, hkv, dk, dv}, past)},
                               {"decay", make_input(Shape{1, t, hkv * dk}, decay)}, {"beta", make_input(Shape{1, t, hkv}, beta)}});
  REQUIRE(all[0].values.size() == static_cast<std::size_t>(t * hq * dv));
  std::vector<float> state = past;
  for (int64_t tok = 0; tok < t; ++tok) {
    auto out = run_net(step, {{"q", make_input(Shape{1, 1, hq * dk}, slice(q, tok, hq * dk))},
                              {"k", make_input(Shape{1, 1, hkv * dk}, slice(k, tok, hkv * dk))},
                              {"v", make_input(Shape{1, 1, hkv * dv}, slice(v, tok, hkv * dv))},
                              {"past", make_input(Shape{1, hkv, dk, dv}, state)},
                              {"decay", make_input(Shape{1, 1, hkv * dk}, slice(decay, tok, hkv * dk))},
                              {"beta", make_input(Shape{1, 1, hkv}, slice(beta, tok, hkv))}});
    CHECK(max_abs_diff(out[0].values, slice(all[0].values, tok, hq * dv)) < 1e-6);
    state = out[1].values;
  }
  CHECK(max_abs_diff(state, all[1].values) < 1e-6);
  // One token by hand, the "linear" rule from a zero state: S = k ⊗ v, o = scale qᵀ S, scale 1/sqrt(dk).
  {
    OnnxModel m(27);
    m.input("q", {1, 1, 2}).output("y");
    m.init("k", {1, 1, 2}, {1, 2}).init("v", {1, 1, 1}, {3});
    m.node("LinearAttention", {"q", "k", "v"}, {"y"}).i("q_num_heads", 1).i("kv_num_heads", 1).s("update_rule", "linear");
    auto out = run_net(import_onnx(m.save("linear_attention_one.onnx")), {{"q", make_input(Shape{1, 1, 2}, {0.5f, -1})}});
    CHECK(out[0].values[0] == Approx((0.5 * 1 * 3 + -1 * 2 * 3) / std::sqrt(2.0)).margin(1e-6));
  }
  // A decay the rule does not take, and a key whose width is not kv_num_heads * dk.
  OnnxModel bad(27);
  bad.input("q", {1, 2, 6}).output("y").init("k", {1, 2, 6}, pattern(12, 3, 2, 1)).init("v", {1, 2, 2}, pattern(4, 3, 2, 1));
  bad.init("g", {1, 2, 2}, pattern(4, 3, 2, 1));
  bad.node("LinearAttention", {"q", "k", "v", "", "g"}, {"y"}, "la").i("q_num_heads", 2).i("kv_num_heads", 2).s("update_rule", "linear");
  CHECK_THROWS_WITH(import_onnx(bad.save("linear_attention_bad_decay.onnx")), Catch::Contains("'la'") && Catch::Contains("takes no"));
  OnnxModel wide(27);
  wide.input("q", {1, 2, 6}).output("y").init("k", {1, 2, 4}, pattern(8, 3, 2, 1)).init("v", {1, 2, 2}, pattern(4, 3, 2, 1));
  wide.node("LinearAttention", {"q", "k", "v"}, {"y"}, "la").i("q_num_heads", 2).i("kv_num_heads", 2).s("update_rule", "linear");
  CHECK_THROWS_WITH(import_onnx(wide.save("linear_attention_bad_key.onnx")), Catch::Contains("key width 4"));
}

TEST_CASE("ReduceMax/ReduceMin of booleans over an empty set give false/true, the type's least and greatest",
          "[onnx][reduce]") {
  // ONNX's test_reduce_max_empty_set_bool: -inf (max of nothing) read as a boolean was true.
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    INFO(op);
    OnnxModel m(18);
    m.input("x", {2, 0, 4}).output("y");
    m.init_ints("axes", {1}, {1});
    m.node("Cast", {"x"}, {"b"}).i("to", onnx::TensorProto::BOOL);
    m.node(op, {"b", "axes"}, {"r"}).i("keepdims", 1);
    m.node("Cast", {"r"}, {"y"}).i("to", onnx::TensorProto::FLOAT);
    Output y = run_model(m, std::string("reduce_empty_bool_") + op + ".onnx", Shape{2, 0, 4}, {});
    CHECK(y.shape == Shape{2, 1, 4});
    const float want = std::string(op) == "ReduceMax" ? 0.0f : 1.0f;
    CHECK(std::all_of(y.values.begin(), y.values.end(), [&](float v) { return v == want; }));
    CHECK(y.values.size() == 8);
  }
}
