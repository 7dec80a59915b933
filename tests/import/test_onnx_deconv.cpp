// ONNX ConvTranspose into deconv2: strides, pads, dilations, output_padding,
// groups, output_shape and auto_pad; values from ONNX Runtime 1.32 (opset 13)
// for x = (arange(36) % 7 - 3) / 4 in [1,4,3,3], weight (arange % 5 - 2) / 3,
// bias arange(O) / 10 - 0.1.
#include "import/onnx_test_util.hpp"

#include <catch2/catch.hpp>

#include <functional>
#include <limits>
#include <numeric>

using namespace softneuro;
using namespace softneuro::test;

namespace {


Output run_case(const std::string& name, const std::vector<int64_t>& wshape, bool bias, const std::function<void(NodeRef&)>& attrs) {
  OnnxModel m(13);
  m.input("x", {1, 4, 3, 3}).output("y");
  const auto wn = static_cast<std::size_t>(std::accumulate(wshape.begin(), wshape.end(), int64_t{1}, std::multiplies<>()));
  m.init("w", wshape, pattern(wn, 5, 2, 3));
  std::vector<std::string> ins{"x", "w"};
  if (bias) {
    const int64_t oc = wshape[1] * (name == "group2" ? 2 : 1);
    std::vector<float> b(static_cast<std::size_t>(oc));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) / 10 - 0.1f;
    m.init("b", {oc}, b);
    ins.push_back("b");
  }
  NodeRef node = m.node("ConvTranspose", ins, {"y"}, name);
  attrs(node);
  return run_model(m, name + ".onnx", Shape{1, 4, 3, 3}, pattern(36, 7, 3, 4));
}

}  // namespace

TEST_CASE("ConvTranspose: imported as deconv2, matches ONNX Runtime", "[onnx][deconv]") {
  struct Case {
    const char* name;
    std::vector<int64_t> wshape;
    bool bias;
    std::function<void(NodeRef&)> attrs;
    Shape out;
    std::vector<float> want;
  };
  const std::vector<Case> cases = {
      {"plain_s2", {4, 2, 2, 2}, true, [](NodeRef& n) { n.ints("strides", {2, 2}); }, Shape{1, 2, 6, 6},
       {0.73333329f, -0.51666671f, -0.43333334f, 0.56666666f, -0.43333334f, 0.48333338f, -0.10000001f, -0.099999987f, 0.31666669f, 0.06666667f, 0.15000001f, 0.23333335f, 0.15000001f, 0.40000001f, 0.15000001f, 0.31666669f, -0.43333337f, -0.9333334f, -0.60000008f, -0.76666671f, -0.76666671f, -0.60000002f, 0.23333332f, 0.15000001f, -0.43333334f, -1.0166668f, 0.73333329f, -0.51666671f, -0.43333334f, 0.56666666f, 0.06666667f, 0.31666669f, -0.10000001f, -0.099999987f, 0.31666669f, 0.06666667f, -0.41666669f, 0.83333331f, -0.91666669f, -0.33333334f, -0.83333337f, -0.33333334f, -0.41666669f, -7.4505806e-09f, 0.66666669f, 0.41666669f, 0.58333337f, 0.25f, 0.41666666f, 0.25f, 0.5f, 0.25f, 0.58333331f, -0.33333337f, 0.5f, -0.50000006f, 0.41666669f, -0.66666669f, -0.83333337f, 0.33333331f, 0.66666669f, -0.33333334f, -0.41666669f, 0.83333331f, -0.91666669f, -0.33333334f, -0.91666675f, 0.16666667f, -0.41666669f, -7.4505806e-09f, 0.66666669f, 0.41666669f}},
      {"pads_dil_op", {4, 3, 3, 2}, true,
       [](NodeRef& n) { n.ints("strides", {2, 3}).ints("pads", {1, 0, 0, 2}).ints("dilations", {2, 1}).ints("output_padding", {1, 2}); },
       Shape{1, 3, 9, 8}, {-0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, 0.15000001f, 0.40000001f, -0.1f, 0.56666666f, 0.48333338f, -0.1f, -0.18333337f, -0.60000002f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -1.35f, -0.8500002f, -0.1f, -0.85000008f, -1.35f, -0.1f, -0.9333334f, 0.48333338f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, 0.48333332f, 0.56666666f, -0.1f, 0.40000001f, 0.15000001f, -0.1f, 0.89999998f, -0.26666671f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, 0.56666666f, -0.43333334f, -0.1f, -0.51666671f, 0.73333329f, -0.1f, -1.0166667f, -0.43333334f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, -0.1f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.5f, -0.91666675f, 0.0f, 0.58333337f, -1.5833334f, 0.0f, -0.5f, -0.50000006f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -0.75000018f, 0.16666663f, 0.0f, -1.25f, 1.1666667f, 0.0f, 0.58333337f, 1.5833334f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.66666669f, 1.1666667f, 0.0f, 0.25f, 0.0f, 0.0f, -0.1666667f, -1.75f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -0.33333334f, -0.91666675f, 0.0f, 0.83333331f, -0.41666669f, 0.0f, -0.33333334f, 0.66666669f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, -0.81666672f, 0.26666662f, 0.1f, -1.4833333f, -0.73333335f, 0.1f, -0.40000007f, 0.016666658f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.26666662f, 0.76666671f, 0.1f, 1.2666668f, 0.76666671f, 0.1f, 1.6833334f, 0.18333331f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 1.2666668f, -0.73333335f, 0.1f, 0.1f, 0.26666662f, 0.1f, -1.65f, 0.099999972f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, -0.81666672f, 0.26666668f, 0.1f, -0.31666669f, 0.099999994f, 0.1f, 0.76666671f, 0.51666671f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f}},
      {"group2", {4, 1, 3, 3}, false, [](NodeRef& n) { n.ints("strides", {1, 2}).i("group", 2).ints("pads", {1, 1, 1, 1}); },
       Shape{1, 2, 3, 5}, {-0.91666663f, 0.33333331f, -0.91666675f, -0.83333337f, 0.25f, 0.33333334f, 0.83333325f, 0.83333337f, 0.66666675f, 0.16666666f, 0.16666664f, -1.6666667f, -0.83333331f, 0.58333331f, -0.083333343f, -0.83333331f, 0.58333331f, -0.083333343f, 0.5f, 0.083333336f, 0.58333337f, -0.16666666f, -0.41666669f, 0.91666663f, -0.83333337f, 0.16666664f, -0.50000006f, 0.083333343f, 0.5f, 0.58333337f}},
      {"output_shape", {4, 2, 3, 3}, true, [](NodeRef& n) { n.ints("strides", {2, 2}).ints("output_shape", {7, 8}); },
       Shape{1, 2, 7, 8}, {0.73333329f, -0.51666671f, -0.43333334f, 0.56666666f, -0.016666658f, 0.48333338f, 0.15000001f, -0.1f, -0.099999987f, -0.51666671f, 0.89999998f, -1.0166667f, -0.1f, -0.9333334f, -0.43333334f, -0.1f, -0.26666668f, 0.40000001f, 0.31666663f, 0.73333335f, -0.34999996f, -0.6833334f, 0.5666666f, -0.1f, -0.76666671f, 0.31666666f, -0.34999999f, 0.40000001f, 0.40000001f, 0.48333332f, -0.43333337f, -0.1f, 0.066666655f, -1.5166668f, 0.65000004f, -1.1833334f, -1.7666668f, 0.89999998f, 0.56666666f, -0.1f, 0.31666669f, 0.56666666f, -0.43333331f, -0.51666671f, 0.89999998f, -1.0166667f, -0.43333334f, -0.1f, -1.0166668f, 0.06666667f, -0.1f, -0.10000001f, 0.56666666f, 0.31666669f, 0.06666667f, -0.1f, -0.41666669f, 0.83333331f, -1.3333334f, -0.33333334f, -0.16666669f, -0.33333334f, 0.58333337f, 0.0f, -7.4505806e-09f, 1.4901161e-08f, 0.0f, 0.16666667f, -0.66666669f, 0.33333334f, -0.83333337f, 0.0f, 1.25f, -0.16666669f, 0.66666663f, 0.91666669f, 1.0833333f, 0.25f, -0.58333337f, 0.0f, -0.50000006f, -0.66666669f, -0.25000003f, -0.5f, 0.83333331f, 0.25f, 0.58333331f, 0.0f, 0.91666669f, 0.16666666f, -1.5833335f, 1.25f, -2.3333335f, -1.1666667f, 1.0f, 0.0f, 0.16666667f, 0.41666669f, 0.66666669f, 1.4901161e-08f, 0.0f, 0.16666667f, -0.91666669f, 0.0f, -0.33333334f, -0.91666675f, 1.0f, -0.41666669f, -0.33333334f, 0.66666669f, 0.41666669f, 0.0f}},
      {"same_upper", {4, 2, 3, 2}, true, [](NodeRef& n) { n.ints("strides", {2, 2}).s("auto_pad", "SAME_UPPER"); },
       Shape{1, 2, 6, 6}, {0.31666669f, -0.10000002f, 0.81666666f, -0.26666668f, 0.73333335f, -0.43333334f, -0.099999994f, 0.31666669f, -0.51666671f, -0.76666671f, -0.34999999f, -0.6833334f, -1.35f, 0.98333335f, -0.26666665f, 1.3166667f, -0.34999996f, 0.48333338f, 0.40000007f, -0.60000002f, 0.56666666f, -0.51666671f, -0.43333331f, 0.73333335f, -1.0166667f, -0.9333334f, 0.066666685f, -0.60000002f, 1.15f, -0.85000002f, -0.26666668f, 0.81666672f, -0.099999994f, 0.31666669f, -0.51666671f, -0.76666671f, -1.4901161e-08f, 7.4505806e-09f, -0.16666667f, -0.41666669f, -0.33333334f, -0.25f, 0.41666669f, -0.83333331f, -0.66666669f, 0.33333334f, -0.58333337f, 0.33333334f, 1.0833334f, 0.50000006f, 1.4166667f, 0.5f, 0.58333337f, -0.66666663f, -0.5f, -0.25f, -0.41666669f, -0.25f, 0.83333337f, 0.33333337f, -0.83333337f, 0.5f, -0.5f, 0.5f, -0.75f, -0.66666669f, 0.91666675f, 0.33333334f, 0.41666669f, -0.83333331f, -0.66666669f, 0.33333334f}},
      {"same_lower", {4, 2, 3, 2}, true, [](NodeRef& n) { n.ints("strides", {2, 2}).s("auto_pad", "SAME_LOWER"); },
       Shape{1, 2, 6, 6}, {-0.099999994f, 0.31666669f, -0.51666671f, -0.76666671f, -0.34999999f, -0.6833334f, -1.35f, 0.98333335f, -0.26666665f, 1.3166667f, -0.34999996f, 0.48333338f, 0.40000007f, -0.60000002f, 0.56666666f, -0.51666671f, -0.43333331f, 0.73333335f, -1.0166667f, -0.9333334f, 0.066666685f, -0.60000002f, 1.15f, -0.85000002f, -0.26666668f, 0.81666672f, -0.099999994f, 0.31666669f, -0.51666671f, -0.76666671f, 0.23333335f, -0.76666671f, -0.93333334f, 0.31666669f, 0.23333335f, 0.81666666f, 0.41666669f, -0.83333331f, -0.66666669f, 0.33333334f, -0.58333337f, 0.33333334f, 1.0833334f, 0.50000006f, 1.4166667f, 0.5f, 0.58333337f, -0.66666663f, -0.5f, -0.25f, -0.41666669f, -0.25f, 0.83333337f, 0.33333337f, -0.83333337f, 0.5f, -0.5f, 0.5f, -0.75f, -0.66666669f, 0.91666675f, 0.33333334f, 0.41666669f, -0.83333331f, -0.66666669f, 0.33333334f, -0.66666669f, -0.41666669f, 0.41666669f, -1.4901161e-08f, 0.91666669f, -0.16666667f}},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    Output y = run_case(c.name, c.wshape, c.bias, c.attrs);
    CHECK(y.shape == c.out);
    CHECK(max_abs_diff(y.values, c.want) < 1e-5);
  }
}

TEST_CASE("Window geometry beyond the limits is refused at import naming the field", "[onnx][limits]") {
  // Strides of 2^32 + 1 reached XNNPACK truncated to 32 bits (an assertion at
  // import); a dilation of INT64_MAX overflowed shape inference's arithmetic.
  auto conv = [](const std::string& op, const std::function<void(NodeRef&)>& attrs) {
    OnnxModel m(13);
    m.input("x", {1, 4, 3, 3}).output("y");
    std::vector<std::string> ins{"x"};
    if (op != "MaxPool") {
      m.init("w", {4, 4, 2, 2}, pattern(64, 5, 2, 3));
      ins.push_back("w");
    }
    NodeRef n = m.node(op, ins, {"y"}, "layer");
    attrs(n);
    return run_model(m, "limits.onnx", Shape{1, 4, 3, 3}, pattern(36, 7, 3, 4));
  };
  constexpr int64_t big = (int64_t{1} << 32) + 1, max = std::numeric_limits<int64_t>::max();
  for (const char* op : {"Conv", "ConvTranspose"}) {
    INFO(op);
    CHECK_THROWS_WITH(conv(op, [&](NodeRef& n) { n.ints("strides", {big, 1}); }),
                      Catch::Contains("strides") && Catch::Contains("65536") && Catch::Contains("4294967297"));
    CHECK_THROWS_WITH(conv(op, [&](NodeRef& n) { n.ints("dilations", {max, 1}); }), Catch::Contains("dilations"));
    CHECK_THROWS_WITH(conv(op, [&](NodeRef& n) { n.ints("pads", {max, 1, 1, 1}); }), Catch::Contains("pads"));
    CHECK_THROWS_WITH(conv(op, [&](NodeRef& n) { n.ints("strides", {0, 1}); }), Catch::Contains("strides"));
  }
  CHECK_THROWS_WITH(conv("MaxPool", [&](NodeRef& n) { n.ints("kernel_shape", {2, 2}).ints("strides", {big, 1}); }),
                    Catch::Contains("strides"));
  CHECK_THROWS_WITH(conv("MaxPool", [&](NodeRef& n) { n.ints("kernel_shape", {max, 2}); }), Catch::Contains("kernel"));
}

TEST_CASE("Constants folded at import grow to 64 MiB at most", "[onnx][limits]") {
  // A 167-byte file's ConstantOfShape [8192,8192] became a 256 MiB model.
  auto model = [](const std::string& op, const std::vector<int64_t>& dims) {
    OnnxModel m(13);
    m.input("x", {1, 4}).output("y");
    m.init_ints("dims", {static_cast<int64_t>(dims.size())}, dims);
    if (op == "ConstantOfShape") {
      m.node("ConstantOfShape", {"dims"}, {"c"}, "big");
      m.node("Add", {"x", "c"}, {"y"}, "add");
    } else if (op == "ExpandConstant") {
      m.init("one", {1}, {1.0f});
      m.node("Expand", {"one", "dims"}, {"c"}, "big");
      m.node("Add", {"x", "c"}, {"y"}, "add");
    } else {
      m.node("Expand", {"x", "dims"}, {"y"}, "big");
    }
    return run_model(m, "folded.onnx", Shape{1, 4}, {1, 2, 3, 4});
  };
  for (const char* op : {"ConstantOfShape", "ExpandConstant", "ExpandInput"}) {
    INFO(op);
    CHECK_THROWS_WITH(model(op, {8192, 8192, 4}), Catch::Contains("big") && Catch::Contains("64 MiB"));
    CHECK(model(op, {2, 3, 4}).shape == Shape{2, 3, 4});
  }
}

TEST_CASE("ConvTranspose in 3-D: strides, pads, dilations, output_padding and bias against its definition", "[onnx][deconv]") {
  // y[m, o] = b[m] + sum over c, i, k with o = i * s + k * d - pad_begin of x[c, i] * w[c, m, k].
  const std::vector<int64_t> xs = {1, 3, 2, 3, 4}, ws = {3, 2, 2, 3, 2};
  const std::vector<int64_t> s = {2, 1, 2}, d = {1, 2, 1}, pads = {1, 0, 0, 0, 1, 1}, op = {1, 0, 1};
  const auto x = pattern(3 * 2 * 3 * 4, 7, 3, 4), w = pattern(3 * 2 * 2 * 3 * 2, 5, 2, 3);
  const std::vector<float> b = {0.5f, -0.25f};
  OnnxModel m(13);
  m.input("x", xs).output("y");
  m.init("w", ws, w).init("b", {2}, b);
  m.node("ConvTranspose", {"x", "w", "b"}, {"y"}).ints("strides", s).ints("dilations", d).ints("pads", pads).ints("output_padding", op);
  const Output out = run_model(m, "deconv3d.onnx", Shape(xs), x);
  std::vector<int64_t> o(3);
  for (int i = 0; i < 3; ++i)
    o[static_cast<std::size_t>(i)] = s[static_cast<std::size_t>(i)] * (xs[static_cast<std::size_t>(i) + 2] - 1) + op[static_cast<std::size_t>(i)] +
                                     (ws[static_cast<std::size_t>(i) + 2] - 1) * d[static_cast<std::size_t>(i)] + 1 -
                                     pads[static_cast<std::size_t>(i)] - pads[static_cast<std::size_t>(i) + 3];
  REQUIRE(out.shape == Shape{1, 2, o[0], o[1], o[2]});
  std::vector<double> want(static_cast<std::size_t>(2 * o[0] * o[1] * o[2]));
  for (int64_t mo = 0; mo < 2; ++mo)
    for (int64_t p = 0; p < o[0] * o[1] * o[2]; ++p) want[static_cast<std::size_t>(mo * o[0] * o[1] * o[2] + p)] = b[static_cast<std::size_t>(mo)];
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t mo = 0; mo < 2; ++mo)
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 3; ++i1) for (int64_t i2 = 0; i2 < 4; ++i2)
        for (int64_t k0 = 0; k0 < 2; ++k0) for (int64_t k1 = 0; k1 < 3; ++k1) for (int64_t k2 = 0; k2 < 2; ++k2) {
          const int64_t a = i0 * s[0] + k0 * d[0] - pads[0], bb = i1 * s[1] + k1 * d[1] - pads[1], cc = i2 * s[2] + k2 * d[2] - pads[2];
          if (a < 0 || a >= o[0] || bb < 0 || bb >= o[1] || cc < 0 || cc >= o[2]) continue;
          want[static_cast<std::size_t>(((mo * o[0] + a) * o[1] + bb) * o[2] + cc)] +=
              static_cast<double>(x[static_cast<std::size_t>(((c * 2 + i0) * 3 + i1) * 4 + i2)]) *
              w[static_cast<std::size_t>((((c * 2 + mo) * 2 + k0) * 3 + k1) * 2 + k2)];
        }
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(out.values[i] == Approx(want[i]).margin(1e-4));
}
