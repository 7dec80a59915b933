// The cpu/ref routines against small hand-computed cases. Expected values are
// literal numbers worked out by hand (or well-known constants such as
// erf(1/sqrt 2)), never a second implementation: these routines are the
// oracle every other routine is tested against.
#include <catch2/catch.hpp>

#include "core/layer_types.hpp"
#include "core/registry.hpp"
#include "support/run_layer.hpp"

#include <softneuro/error.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace softneuro;
using softneuro::test::make_blob;
using softneuro::test::make_layer;
using softneuro::test::run_layer;
using softneuro::test::values;
using Ints = std::vector<int64_t>;
using Floats = std::vector<float>;

namespace {

/// Elements equal within an absolute margin (default 1e-5) plus Approx's relative epsilon.
void check_close(const Floats& actual, const Floats& expected, double margin = 1e-5) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO("element " << i);
    CHECK(actual[i] == Approx(expected[i]).margin(margin));
  }
}

/// Runs a single-output layer and checks shape and values.
void check_layer(const Layer& l, const std::vector<Blob>& in, const Shape& shape, const Floats& expected,
                 double margin = 1e-5) {
  auto out = run_layer(l, in);
  REQUIRE(out.size() == 1);
  CHECK(out[0].shape() == shape);
  check_close(values(out[0]), expected, margin);
}

Blob B(const Shape& s, const Floats& v) { return make_blob(s, v); }

// 3x3 image 1..9 and a 2x2 kernel [1 2; 3 4], used by several conv cases.
Blob image3x3() { return B({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}); }
Blob kernel2x2() { return B({1, 1, 2, 2}, {1, 2, 3, 4}); }
// 4x4 image 1..16
Blob image4x4(float sign = 1) {
  Floats v;
  for (int i = 1; i <= 16; ++i) v.push_back(sign * float(i));
  return B({1, 1, 4, 4}, v);
}

}  // namespace

TEST_CASE("cpu/ref: every layer type has a reference routine", "[ref]") {
  for (const auto& t : core::layer_types()) {
    if (t.name.starts_with("test_")) continue;  // registered by test_basics.cpp
    if (t.plan_time) continue;                  // evaluated by core::specialize, never run
    INFO(t.name);
    Schema s;
    CHECK(core::RoutineRegistry::instance().find(t.name, "cpu/ref", &s) != nullptr);
    CHECK(s == Schema{});
  }
}

TEST_CASE("cpu/ref conv2", "[ref][conv2]") {
  SECTION("valid, stride 1") {
    check_layer(make_layer("conv2", {}, {{"weight", kernel2x2()}}), {image3x3()}, {1, 1, 2, 2}, {37, 47, 67, 77});
  }
  SECTION("stride 2, pad 1") {
    // windows start at -1 and 1 in each dim; padding contributes nothing
    check_layer(make_layer("conv2", {{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}, {{"weight", kernel2x2()}}),
                {image3x3()}, {1, 1, 2, 2}, {4, 18, 36, 77});
  }
  SECTION("asymmetric pads: top 0, left 1, bottom 1, right 0") {
    check_layer(make_layer("conv2", {{"pads", Ints{0, 1, 1, 0}}}, {{"weight", kernel2x2()}}), {image3x3()},
                {1, 1, 3, 3}, {18, 37, 47, 36, 67, 77, 14, 23, 26});
  }
  SECTION("dilation 2") {
    // taps at the four corners: 1*1 + 3*2 + 7*3 + 9*4
    check_layer(make_layer("conv2", {{"dilations", Ints{2, 2}}}, {{"weight", kernel2x2()}}), {image3x3()},
                {1, 1, 1, 1}, {64});
  }
  SECTION("two input channels, batch 2, clip activation") {
    // out0 = ch0 - ch1, out1 = 0.5 (ch0 + ch1); clip to [-3, 4.5]
    Blob x = B({2, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, /* n=1 */ 0, 0, 0, 0, 2, 2, 2, 2});
    Blob w = B({2, 2, 1, 1}, {1, -1, 0.5f, 0.5f});
    check_layer(make_layer("conv2", {{"act", "clip"}, {"act_min", -3.0}, {"act_max", 4.5}}, {{"weight", w}}), {x},
                {2, 2, 2, 2}, {-3, -3, -3, -3, 3, 4, 4.5f, 4.5f, -2, -2, -2, -2, 1, 1, 1, 1});
  }
  SECTION("groups = 2, two output channels per group") {
    Blob x = B({1, 2, 1, 2}, {1, 2, 10, 20});
    Blob w = B({4, 1, 1, 1}, {1, 2, 3, 4});
    check_layer(make_layer("conv2", {{"group", 2}}, {{"weight", w}}), {x}, {1, 4, 1, 2}, {1, 2, 2, 4, 30, 60, 40, 80});
  }
  SECTION("groups = 2 with a 2x2 kernel, bias and relu") {
    Blob x = B({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
    Blob w = B({2, 1, 2, 2}, {1, 1, 1, 1, 1, 0, 0, -1});
    check_layer(make_layer("conv2", {{"group", 2}}, {{"weight", w}}), {x}, {1, 2, 1, 1}, {10, -3});
    Blob b = B({2}, {0.5f, 1});
    check_layer(make_layer("conv2", {{"group", 2}, {"act", "relu"}}, {{"weight", w}, {"bias", b}}), {x},
                {1, 2, 1, 1}, {10.5f, 0});
  }
  SECTION("fused hardswish") {
    // 1x1 kernel of 1: hardswish(x) = x * clip(x+3, 0, 6) / 6
    Blob x = B({1, 1, 1, 4}, {-4, -1, 1, 4});
    check_layer(make_layer("conv2", {{"act", "hardswish"}}, {{"weight", B({1, 1, 1, 1}, {1})}}), {x}, {1, 1, 1, 4},
                {0, -1.0f / 3, 4.0f / 6, 4});
  }
  SECTION("refuses non-float32 weights") {
    Layer l = make_layer("conv2", {}, {{"weight", Blob::allocate({1, 1, 2, 2}, DType::float16)}});
    CHECK_THROWS_AS(run_layer(l, {image3x3()}), Error);
    LayerInfo info{&l, {{1, 1, 3, 3}}, {{1, 1, 2, 2}}, {}, {}};
    Schema s;
    const Routine* r = core::RoutineRegistry::instance().find("conv2", "cpu/ref", &s);
    REQUIRE(r);
    Support sup = r->supports(info, s);
    CHECK_FALSE(sup.ok);
    CHECK(sup.reason.find("weight") != std::string::npos);
    CHECK_FALSE(r->supports(info, Schema::parse("cpu:qint8")).ok);
  }
}

TEST_CASE("cpu/ref dense", "[ref][dense]") {
  Blob x = B({2, 3}, {1, 2, 3, 4, 5, 6});
  Blob w = B({2, 3}, {1, 0, -1, 0.5f, 0.5f, 0.5f});
  Blob b = B({2}, {1, -5});
  check_layer(make_layer("dense", {}, {{"weight", w}}), {x}, {2, 2}, {-2, 3, -2, 7.5f});
  check_layer(make_layer("dense", {}, {{"weight", w}, {"bias", b}}), {x}, {2, 2}, {-1, -2, -1, 2.5f});
  check_layer(make_layer("dense", {{"act", "relu"}}, {{"weight", w}, {"bias", b}}), {x}, {2, 2}, {0, 0, 0, 2.5f});
  // hardsigmoid(alpha 0.2, beta 0.5) of -1, -2, -1, 2.5
  check_layer(make_layer("dense", {{"act", "hardsigmoid"}}, {{"weight", w}, {"bias", b}}), {x}, {2, 2},
              {0.3f, 0.1f, 0.3f, 1.0f});
  // leading dims kept
  check_layer(make_layer("dense", {}, {{"weight", w}, {"bias", b}}), {B({1, 2, 3}, {1, 2, 3, 4, 5, 6})}, {1, 2, 2},
              {-1, -2, -1, 2.5f});
  // rank-1 input
  check_layer(make_layer("dense", {}, {{"weight", w}}), {B({3}, {1, 2, 3})}, {2}, {-2, 3});
  // fused sigmoid: sigmoid(0) = 0.5
  check_layer(make_layer("dense", {{"act", "sigmoid"}}, {{"weight", B({1, 2}, {1, -1})}}), {B({1, 2}, {3, 3})},
              {1, 1}, {0.5f});
}

TEST_CASE("cpu/ref matmul", "[ref][matmul]") {
  Layer mm = make_layer("matmul", {}, {}, 2);
  Blob b32 = B({3, 2}, {1, 2, 3, 4, 5, 6});
  SECTION("batched A, shared B") {
    Blob a = B({2, 2, 3}, {1, 2, 3, 4, 5, 6, /* batch 1 */ 1, 0, 0, 0, 1, 0});
    check_layer(mm, {a, b32}, {2, 2, 2}, {22, 28, 49, 64, 1, 2, 3, 4});
  }
  SECTION("broadcast batch dims [2,1] x [3]") {
    Blob a = B({2, 1, 1, 2}, {1, 2, 3, 4});
    Blob b = B({1, 3, 2, 1}, {1, 1, 1, -1, 0, 2});
    check_layer(mm, {a, b}, {2, 3, 1, 1}, {3, -1, 4, 7, -1, 8});
  }
  SECTION("both batched") {
    Blob a = B({2, 1, 2}, {1, 2, 3, 4});
    Blob b = B({2, 2, 1}, {1, 1, 2, -1});
    check_layer(mm, {a, b}, {2, 1, 1}, {3, 2});
  }
  SECTION("rank-1 operands") {
    check_layer(mm, {B({3}, {1, 2, 3}), b32}, {2}, {22, 28});
    check_layer(mm, {B({2, 3}, {1, 2, 3, 4, 5, 6}), B({3}, {1, 1, 1})}, {2}, {6, 15});
    check_layer(mm, {B({3}, {1, 2, 3}), B({3}, {4, 5, 6})}, Shape{}, {32});
    check_layer(mm, {B({2}, {1, -1}), B({2, 2, 1}, {5, 2, 1, 7})}, {2, 1}, {3, -6});
  }
}

TEST_CASE("cpu/ref pool2", "[ref][pool2]") {
  auto pool = [](const char* mode, std::map<std::string, Attr> p) {
    p["mode"] = mode;
    return make_layer("pool2", std::move(p));
  };
  SECTION("kernel 2 stride 2") {
    std::map<std::string, Attr> p{{"kernel", Ints{2, 2}}, {"strides", Ints{2, 2}}};
    check_layer(pool("max", p), {image4x4()}, {1, 1, 2, 2}, {6, 8, 14, 16});
    check_layer(pool("avg", p), {image4x4()}, {1, 1, 2, 2}, {3.5f, 5.5f, 11.5f, 13.5f});
  }
  SECTION("kernel 3 stride 2 pad 1: max ignores padding") {
    std::map<std::string, Attr> p{{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}};
    // all inputs negative: a padding zero would win if it were counted
    check_layer(pool("max", p), {image4x4(-1)}, {1, 1, 2, 2}, {-1, -2, -5, -6});
  }
  SECTION("kernel 3 stride 2 pad 1: avg with and without count_include_pad") {
    std::map<std::string, Attr> p{{"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}};
    // sums 14, 30, 57, 99 over 4, 6, 6, 9 inputs
    check_layer(pool("avg", p), {image4x4()}, {1, 1, 2, 2}, {3.5f, 5, 9.5f, 11});
    p["count_include_pad"] = 1;
    check_layer(pool("avg", p), {image4x4()}, {1, 1, 2, 2}, {14.0f / 9, 30.0f / 9, 57.0f / 9, 11});
  }
  SECTION("ceil_mode without pads") {
    std::map<std::string, Attr> p{{"kernel", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"ceil_mode", 1}};
    check_layer(pool("max", p), {image3x3()}, {1, 1, 2, 2}, {5, 6, 8, 9});
    check_layer(pool("avg", p), {image3x3()}, {1, 1, 2, 2}, {3, 4.5f, 7.5f, 9});
    p["count_include_pad"] = 1;  // no pads: the same divisors
    check_layer(pool("avg", p), {image3x3()}, {1, 1, 2, 2}, {3, 4.5f, 7.5f, 9});
  }
  SECTION("ceil_mode with pads: the last window overhangs the bottom/right pad") {
    // rows per window: {-1,0,1} {1,2,3} {3,4,5}; inputs {0,1} {1,2,3} {3}; inside padding {-1,0,1} {1,2,3} {3,4}
    std::map<std::string, Attr> p{
        {"kernel", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"ceil_mode", 1}};
    check_layer(pool("max", p), {image4x4()}, {1, 1, 3, 3}, {6, 8, 8, 14, 16, 16, 14, 16, 16});
    check_layer(pool("avg", p), {image4x4()}, {1, 1, 3, 3}, {3.5f, 5, 6, 9.5f, 11, 12, 13.5f, 15, 16});
    p["count_include_pad"] = 1;
    check_layer(pool("avg", p), {image4x4()}, {1, 1, 3, 3},
                {14.0f / 9, 30.0f / 9, 2, 57.0f / 9, 11, 6, 4.5f, 7.5f, 4});
  }
  SECTION("pads wider than the kernel, dilated windows reaching past the input") {
    Blob x = B({1, 1, 1, 3}, {1, 2, 3});
    // kernel 4 dilation 2 stride 3, pads 4 each side: columns {-4,-2,0,2} and {-1,1,3,5}
    std::map<std::string, Attr> p{
        {"kernel", Ints{1, 4}}, {"strides", Ints{1, 3}}, {"dilations", Ints{1, 2}}, {"pads", Ints{0, 4, 0, 4}}};
    check_layer(pool("max", p), {x}, {1, 1, 1, 2}, {3, 2});
    check_layer(pool("avg", p), {x}, {1, 1, 1, 2}, {2, 2});
    p["count_include_pad"] = 1;
    check_layer(pool("avg", p), {x}, {1, 1, 1, 2}, {1, 0.5f});
    // kernel 2, left pad 4: the first three windows read padding only
    std::map<std::string, Attr> q{{"kernel", Ints{1, 2}}, {"pads", Ints{0, 4, 0, 0}}};
    const float inf = std::numeric_limits<float>::infinity();
    check_layer(pool("max", q), {x}, {1, 1, 1, 6}, {-inf, -inf, -inf, 1, 2, 3});
    check_layer(pool("avg", q), {x}, {1, 1, 1, 6}, {0, 0, 0, 1, 1.5f, 2.5f});
    q["count_include_pad"] = 1;
    check_layer(pool("avg", q), {x}, {1, 1, 1, 6}, {0, 0, 0, 0.5f, 1.5f, 2.5f});
  }
  SECTION("global") {
    Blob x = B({1, 2, 2, 2}, {1, 2, 3, 4, -1, -2, -3, -10});
    check_layer(pool("avg", {{"global", 1}}), {x}, {1, 2, 1, 1}, {2.5f, -4});
    check_layer(pool("max", {{"global", 1}}), {x}, {1, 2, 1, 1}, {4, -1});
  }
  SECTION("batch and channels are independent") {
    Blob x = B({2, 2, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
    check_layer(pool("max", {{"kernel", Ints{1, 2}}}), {x}, {2, 2, 1, 1}, {2, 4, 6, 8});
  }
}

TEST_CASE("cpu/ref batchnorm", "[ref][batchnorm]") {
  Blob x = B({1, 2, 1, 2}, {1, 3, 2, 4});
  Layer l = make_layer("batchnorm", {{"epsilon", 0.0}},
                       {{"scale", B({2}, {2, 1})},
                        {"bias", B({2}, {0.5f, -1})},
                        {"mean", B({2}, {1, 2})},
                        {"var", B({2}, {4, 0.25f})}});
  // ch0: 2 (x-1)/2 + 0.5; ch1: (x-2)/0.5 - 1
  check_layer(l, {x}, {1, 2, 1, 2}, {0.5f, 2.5f, -1, 3});
  // rank 2
  check_layer(l, {B({2, 2}, {1, 2, 3, 4})}, {2, 2}, {0.5f, -1, 2.5f, 3});
}

TEST_CASE("cpu/ref unary elementwise", "[ref][elementwise]") {
  SECTION("relu") { check_layer(make_layer("relu"), {B({3}, {-1, 0, 2.5f})}, {3}, {0, 0, 2.5f}); }
  SECTION("clip") {
    check_layer(make_layer("clip", {{"min", 0.0}, {"max", 6.0}}), {B({3}, {-1, 3, 7})}, {3}, {0, 3, 6});
    check_layer(make_layer("clip", {{"max", 1}}), {B({3}, {-100, 0.5f, 7})}, {3}, {-100, 0.5f, 1});
    check_layer(make_layer("clip"), {B({2}, {-1e30f, 1e30f})}, {2}, {-1e30f, 1e30f});
  }
  SECTION("hardswish") {
    check_layer(make_layer("hardswish"), {B({5}, {-4, -1, 0, 1, 4})}, {5}, {0, -1.0f / 3, 0, 4.0f / 6, 4});
  }
  SECTION("hardsigmoid") {
    check_layer(make_layer("hardsigmoid"), {B({4}, {-3, 0, 1, 3})}, {4}, {0, 0.5f, 0.7f, 1});
    check_layer(make_layer("hardsigmoid", {{"alpha", 0.5}, {"beta", 0.0}}), {B({3}, {-1, 1, 4})}, {3}, {0, 0.5f, 1});
  }
  SECTION("sigmoid") {
    check_layer(make_layer("sigmoid"), {B({5}, {0, 1, -1, 100, -100})}, {5},
                {0.5f, 0.731058579f, 0.268941421f, 1, 0});
  }
  SECTION("tanh") {
    check_layer(make_layer("tanh"), {B({3}, {0, 1, -2})}, {3}, {0, 0.761594156f, -0.96402758f});
  }
  SECTION("gelu, erf") {
    // 0.5 x (1 + erf(x / sqrt 2))
    check_layer(make_layer("gelu"), {B({6}, {-3, -1, 0, 0.5f, 1, 2})}, {6},
                {-0.00404969409f, -0.158655254f, 0, 0.345731231f, 0.841344746f, 1.95449974f});
  }
  SECTION("gelu, tanh approximation") {
    check_layer(make_layer("gelu", {{"approximate", "tanh"}}), {B({6}, {-3, -1, 0, 0.5f, 1, 2})}, {6},
                {-0.00363739208f, -0.158808009f, 0, 0.34571401f, 0.841191991f, 1.95459769f});
  }
  SECTION("a large tensor is covered by every thread's chunk") {
    const int n = 100003;
    Floats x(n), expected(n);
    for (int i = 0; i < n; ++i) {
      x[static_cast<std::size_t>(i)] = float(i - n / 2);
      expected[static_cast<std::size_t>(i)] = i - n / 2 > 0 ? float(i - n / 2) : 0.0f;
    }
    auto out = run_layer(make_layer("relu"), {B({n}, x)});
    CHECK(values(out[0]) == expected);
  }
}

TEST_CASE("cpu/ref softmax", "[ref][softmax]") {
  check_layer(make_layer("softmax"), {B({3}, {0, 1, 2})}, {3}, {0.0900305732f, 0.244728471f, 0.665240956f});
  // numerically stable: a large common offset changes nothing
  check_layer(make_layer("softmax"), {B({2, 3}, {1000, 1001, 1002, -50, -49, -48})}, {2, 3},
              {0.0900305732f, 0.244728471f, 0.665240956f, 0.0900305732f, 0.244728471f, 0.665240956f});
  // axis 0: columns [0,0] and [1,3]
  check_layer(make_layer("softmax", {{"axis", 0}}), {B({2, 2}, {0, 1, 0, 3})}, {2, 2},
              {0.5f, 0.119202922f, 0.5f, 0.880797078f});
  // middle axis of [1,2,2]: pairs (0, ln 3) and (5, 5)
  check_layer(make_layer("softmax", {{"axis", 1}}), {B({1, 2, 2}, {0, 5, 1.09861229f, 5})}, {1, 2, 2},
              {0.25f, 0.5f, 0.75f, 0.5f});
  check_layer(make_layer("softmax", {{"axis", -2}}), {B({1, 2, 2}, {0, 5, 1.09861229f, 5})}, {1, 2, 2},
              {0.25f, 0.5f, 0.75f, 0.5f});
}

TEST_CASE("cpu/ref layernorm", "[ref][layernorm]") {
  // row [1,2,3,4]: mean 2.5, var 1.25; row [2,2,2,2]: all zero before scale/bias
  Blob x = B({2, 4}, {1, 2, 3, 4, 2, 2, 2, 2});
  check_layer(make_layer("layernorm", {}, {{"scale", B({4}, {1, 1, 1, 1})}}), {x}, {2, 4},
              {-1.34164079f, -0.447213595f, 0.447213595f, 1.34164079f, 0, 0, 0, 0});
  check_layer(make_layer("layernorm", {}, {{"scale", B({4}, {1, 1, 2, 2})}, {"bias", B({4}, {0, 0, 0, 1})}}), {x},
              {2, 4}, {-1.34164079f, -0.447213595f, 0.894427191f, 3.68328157f, 0, 0, 0, 1});
  // over the last two dims
  check_layer(make_layer("layernorm", {{"axis", -2}}, {{"scale", B({2, 2}, {1, 1, 1, 1})}}),
              {B({1, 2, 2}, {1, 2, 3, 4})}, {1, 2, 2}, {-1.34164079f, -0.447213595f, 0.447213595f, 1.34164079f});
  // epsilon matters: var 1, epsilon 3 -> divide by 2
  check_layer(make_layer("layernorm", {{"epsilon", 3.0}}, {{"scale", B({2}, {1, 1})}}), {B({1, 2}, {-1, 1})}, {1, 2},
              {-0.5f, 0.5f});
}

TEST_CASE("cpu/ref rms_norm", "[ref][layernorm]") {
  // row [1,2,3,4]: mean square 7.5; row [3,4]: 12.5 with epsilon 0 over the last dim of [2,2]
  check_layer(make_layer("rms_norm", {{"epsilon", 0.0}}, {{"scale", B({4}, {1, 1, 2, 1})}}), {B({1, 4}, {1, 2, 3, 4})}, {1, 4},
              {0.365148372f, 0.730296743f, 2.19089023f, 1.46059349f});
  // epsilon matters: mean square 1, epsilon 3 -> divide by 2
  check_layer(make_layer("rms_norm", {{"epsilon", 3.0}}, {{"scale", B({2}, {1, 1})}}), {B({1, 2}, {-1, 1})}, {1, 2}, {-0.5f, 0.5f});
}

TEST_CASE("cpu/ref binary broadcasting", "[ref][elementwise]") {
  SECTION("add [2,3] + [3]") {
    check_layer(make_layer("add", {}, {}, 2), {B({2, 3}, {1, 2, 3, 4, 5, 6}), B({3}, {10, 20, 30})}, {2, 3},
                {11, 22, 33, 14, 25, 36});
  }
  SECTION("sub [2,1] - [3]") {
    check_layer(make_layer("sub", {}, {}, 2), {B({2, 1}, {1, 2}), B({3}, {1, 2, 3})}, {2, 3}, {0, -1, -2, 1, 0, -1});
  }
  SECTION("mul scalar * [2,2], both orders") {
    check_layer(make_layer("mul", {}, {}, 2), {B(Shape{}, {3}), B({2, 2}, {1, 2, 3, 4})}, {2, 2}, {3, 6, 9, 12});
    check_layer(make_layer("mul", {}, {}, 2), {B({2, 2}, {1, 2, 3, 4}), B({1}, {-2})}, {2, 2}, {-2, -4, -6, -8});
  }
  SECTION("div [2,3] / [2,1]") {
    check_layer(make_layer("div", {}, {}, 2), {B({2, 3}, {2, 4, 6, 3, 6, 9}), B({2, 1}, {2, 3})}, {2, 3},
                {1, 2, 3, 1, 2, 3});
  }
  SECTION("both sides broadcast: [1,2,1] + [3,1,2]") {
    check_layer(make_layer("add", {}, {}, 2), {B({1, 2, 1}, {1, 2}), B({3, 1, 2}, {10, 20, 30, 40, 50, 60})},
                {3, 2, 2}, {11, 21, 12, 22, 31, 41, 32, 42, 51, 61, 52, 62});
  }
  SECTION("same shapes") {
    check_layer(make_layer("sub", {}, {}, 2), {B({2}, {5, 1}), B({2}, {2, 3})}, {2}, {3, -2});
  }
  SECTION("add with a fused relu, and clip") {
    check_layer(make_layer("add", {{"act", std::string("relu")}}, {}, 2), {B({4}, {1, -2, 3, -4}), B({4}, {1, 1, -5, 5})},
                {4}, {2, 0, 0, 1});
    check_layer(make_layer("add", {{"act", std::string("clip")}, {"act_min", -1.0}, {"act_max", 1.5}}, {}, 2),
                {B({4}, {1, -2, 3, -4}), B({4}, {1, 1, -5, 4.25f})}, {4}, {1.5f, -1, -1, 0.25f});
  }
}

TEST_CASE("cpu/ref concat", "[ref][concat]") {
  check_layer(make_layer("concat", {{"axis", 1}}, {}, 2), {B({2, 1}, {1, 2}), B({2, 2}, {3, 4, 5, 6})}, {2, 3},
              {1, 3, 4, 2, 5, 6});
  check_layer(make_layer("concat", {{"axis", 0}}, {}, 2), {B({1, 2}, {1, 2}), B({2, 2}, {3, 4, 5, 6})}, {3, 2},
              {1, 2, 3, 4, 5, 6});
  check_layer(make_layer("concat", {{"axis", -1}}, {}, 3), {B({2, 1}, {1, 2}), B({2, 1}, {3, 4}), B({2, 1}, {5, 6})},
              {2, 3}, {1, 3, 5, 2, 4, 6});
  // middle axis of rank 3
  check_layer(make_layer("concat", {{"axis", 1}}, {}, 2), {B({2, 1, 2}, {1, 2, 3, 4}), B({2, 1, 2}, {5, 6, 7, 8})},
              {2, 2, 2}, {1, 2, 5, 6, 3, 4, 7, 8});
}

TEST_CASE("cpu/ref split", "[ref][split]") {
  {
    auto out = run_layer(make_layer("split", {{"axis", 1}, {"split", Ints{1, 2}}}, {}, 1, 2),
                         {B({2, 3}, {1, 2, 3, 4, 5, 6})});
    REQUIRE(out.size() == 2);
    CHECK(out[0].shape() == Shape{2, 1});
    CHECK(out[1].shape() == Shape{2, 2});
    check_close(values(out[0]), {1, 4});
    check_close(values(out[1]), {2, 3, 5, 6});
  }
  {
    auto out = run_layer(make_layer("split", {}, {}, 1, 2), {B({4, 1}, {1, 2, 3, 4})});
    REQUIRE(out.size() == 2);
    check_close(values(out[0]), {1, 2});
    check_close(values(out[1]), {3, 4});
  }
  {
    auto out = run_layer(make_layer("split", {{"axis", -1}}, {}, 1, 3), {B({1, 2, 3}, {1, 2, 3, 4, 5, 6})});
    REQUIRE(out.size() == 3);
    check_close(values(out[0]), {1, 4});
    check_close(values(out[1]), {2, 5});
    check_close(values(out[2]), {3, 6});
  }
}

TEST_CASE("cpu/ref reshape, flatten, identity copy", "[ref][copy]") {
  Blob x = B({2, 3}, {1, 2, 3, 4, 5, 6});
  check_layer(make_layer("reshape", {{"shape", Ints{3, -1}}}), {x}, {3, 2}, {1, 2, 3, 4, 5, 6});
  check_layer(make_layer("flatten", {{"axis", 0}}), {x}, {1, 6}, {1, 2, 3, 4, 5, 6});
  auto out = run_layer(make_layer("identity"), {x});
  CHECK(out[0].data() != x.data());  // a copy, not an alias
  check_close(values(out[0]), {1, 2, 3, 4, 5, 6});
}

TEST_CASE("cpu/ref transpose", "[ref][transpose]") {
  check_layer(make_layer("transpose"), {B({2, 3}, {1, 2, 3, 4, 5, 6})}, {3, 2}, {1, 4, 2, 5, 3, 6});
  // out[i][j][k] = x[k][i][j] = 6k + 3i + j
  check_layer(make_layer("transpose", {{"perm", Ints{1, 2, 0}}}),
              {B({2, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})}, {2, 3, 2}, {0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11});
  // NCHW -> NHWC of a 1x2x1x2 tensor
  check_layer(make_layer("transpose", {{"perm", Ints{0, 2, 3, 1}}}), {B({1, 2, 1, 2}, {1, 2, 3, 4})}, {1, 1, 2, 2},
              {1, 3, 2, 4});
  check_layer(make_layer("transpose", {{"perm", Ints{0, 1}}}), {B({2, 2}, {1, 2, 3, 4})}, {2, 2}, {1, 2, 3, 4});
}

TEST_CASE("cpu/ref pad", "[ref][pad]") {
  Blob m = B({2, 3}, {1, 2, 3, 4, 5, 6});
  SECTION("constant") {
    check_layer(make_layer("pad", {{"pads", Ints{1, 0, 0, 1}}, {"value", 9.0}}), {B({2, 2}, {1, 2, 3, 4})}, {3, 3},
                {9, 9, 9, 1, 2, 9, 3, 4, 9});
    check_layer(make_layer("pad", {{"pads", Ints{1, 2}}}), {B({1}, {5})}, {4}, {0, 5, 0, 0});
  }
  SECTION("reflect") {
    check_layer(make_layer("pad", {{"pads", Ints{2, 1}}, {"mode", "reflect"}}), {B({4}, {1, 2, 3, 4})}, {7},
                {3, 2, 1, 2, 3, 4, 3});
    check_layer(make_layer("pad", {{"pads", Ints{1, 1, 1, 1}}, {"mode", "reflect"}}), {m}, {4, 5},
                {5, 4, 5, 6, 5, 2, 1, 2, 3, 2, 5, 4, 5, 6, 5, 2, 1, 2, 3, 2});
  }
  SECTION("edge") {
    check_layer(make_layer("pad", {{"pads", Ints{2, 1}}, {"mode", "edge"}}), {B({3}, {1, 2, 3})}, {6},
                {1, 1, 1, 2, 3, 3});
    check_layer(make_layer("pad", {{"pads", Ints{1, 1, 1, 1}}, {"mode", "edge"}}), {m}, {4, 5},
                {1, 1, 2, 3, 3, 1, 1, 2, 3, 3, 4, 4, 5, 6, 6, 4, 4, 5, 6, 6});
  }
  SECTION("wrap (circular), pads beyond the dim too") {
    check_layer(make_layer("pad", {{"pads", Ints{2, 1}}, {"mode", "wrap"}}), {B({3}, {1, 2, 3})}, {6},
                {2, 3, 1, 2, 3, 1});
    check_layer(make_layer("pad", {{"pads", Ints{4, 0}}, {"mode", "wrap"}}), {B({3}, {1, 2, 3})}, {7},
                {3, 1, 2, 3, 1, 2, 3});
    check_layer(make_layer("pad", {{"pads", Ints{1, 1, 0, 1}}, {"mode", "wrap"}}), {m}, {3, 5},
                {6, 4, 5, 6, 4, 3, 1, 2, 3, 1, 6, 4, 5, 6, 4});
  }
  SECTION("rank 3, one dim only") {
    check_layer(make_layer("pad", {{"pads", Ints{0, 0, 1, 0, 0, 1}}, {"mode", "edge"}}), {B({1, 1, 2}, {7, 8})},
                {1, 1, 4}, {7, 7, 8, 8});
  }
}

TEST_CASE("cpu/ref constant", "[ref][constant]") {
  Blob v = B({2}, {1.5f, -2});
  auto out = run_layer(make_layer("constant", {}, {{"value", v}}, 0), {});
  REQUIRE(out.size() == 1);
  CHECK(out[0].shape() == Shape{2});
  check_close(values(out[0]), {1.5f, -2});
  // an int32 constant is not for cpu/ref (float32 only)
  CHECK_THROWS_AS(run_layer(make_layer("constant", {}, {{"value", Blob::allocate({2}, DType::int32)}}, 0), {}),
                  Error);
}

TEST_CASE("cpu/ref compare, logical, where, round, arg_reduce", "[ref]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto op = [](const char* type, const char* o) { return make_layer(type, {{"op", std::string(o)}}, {}, 2); };
  const Blob a = B({4}, {1, 2, nan, -1}), b = B({1}, {1});
  check_layer(op("compare", "equal"), {a, b}, {4}, {1, 0, 0, 0});
  check_layer(op("compare", "not_equal"), {a, b}, {4}, {0, 1, 1, 1});
  check_layer(op("compare", "less"), {a, b}, {4}, {0, 0, 0, 1});
  check_layer(op("compare", "less_equal"), {a, b}, {4}, {1, 0, 0, 1});
  check_layer(op("compare", "greater"), {a, b}, {4}, {0, 1, 0, 0});
  check_layer(op("compare", "greater_equal"), {a, b}, {4}, {1, 1, 0, 0});
  const Blob p = B({4}, {0, 0, 2, -3}), q = B({4}, {0, 5, 0, 1});
  check_layer(op("logical", "and"), {p, q}, {4}, {0, 0, 0, 1});
  check_layer(op("logical", "or"), {p, q}, {4}, {0, 1, 1, 1});
  check_layer(op("logical", "xor"), {p, q}, {4}, {0, 1, 1, 0});
  // where: condition [2,1] against x [3] and y [2,3]
  check_layer(make_layer("where", {}, {}, 3), {B({2, 1}, {1, 0}), B({3}, {1, 2, 3}), B({2, 3}, {4, 5, 6, 7, 8, 9})}, {2, 3},
              {1, 2, 3, 7, 8, 9});
  const Blob r = B({6}, {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.7f});
  auto round = [](const char* mode) { return make_layer("round", {{"mode", std::string(mode)}}); };
  check_layer(round("nearest_even"), {r}, {6}, {-2, -2, 0, 0, 2, 3});
  check_layer(round("floor"), {r}, {6}, {-3, -2, -1, 0, 1, 2});
  check_layer(round("ceil"), {r}, {6}, {-2, -1, 0, 1, 2, 3});
  check_layer(round("trunc"), {r}, {6}, {-2, -1, 0, 0, 1, 2});
  // arg_reduce over [2,4]: first or last extreme, NaN counts as the extreme (NumPy)
  const Blob m = B({2, 4}, {3, 1, 3, 0, 2, nan, 5, nan});
  auto arg = [](const char* mode, int64_t axis, int64_t last, int64_t keep) {
    return make_layer("arg_reduce", {{"mode", std::string(mode)}, {"axis", axis}, {"select_last_index", last}, {"keepdims", keep}});
  };
  check_layer(arg("max", 1, 0, 1), {m}, {2, 1}, {0, 1});
  check_layer(arg("max", 1, 1, 0), {B({2, 4}, {3, 1, 3, 0, 2, 2, 5, 5})}, {2}, {2, 3});
  check_layer(arg("min", 1, 0, 0), {B({2, 4}, {3, 1, 3, 0, 2, 2, 5, 5})}, {2}, {3, 0});
  check_layer(arg("min", 0, 0, 0), {B({2, 4}, {3, 1, 3, 0, 2, 2, 5, 5})}, {4}, {1, 0, 0, 0});
  const Blob t = B({3}, {0.0f, 0.5f, -0.25f});
  auto trig = [](const char* o) { return make_layer("trig", {{"op", std::string(o)}}); };
  check_layer(trig("sin"), {t}, {3}, {0.0f, static_cast<float>(std::sin(0.5)), static_cast<float>(std::sin(-0.25))});
  check_layer(trig("acos"), {t}, {3}, {static_cast<float>(std::acos(0.0)), static_cast<float>(std::acos(0.5)), static_cast<float>(std::acos(-0.25))});
  Blob idx = Blob::allocate(Shape{4}, DType::int64);
  for (int i = 0; i < 4; ++i) idx.data_as<int64_t>()[i] = (3 * i + 1) % 6;
  check_layer(make_layer("take", {}, {{"indices", idx}}), {B({2, 3}, {10, 11, 12, 13, 14, 15})}, {4}, {11, 14, 11, 14});
  check_layer(trig("atanh"), {t}, {3}, {0.0f, static_cast<float>(std::atanh(0.5)), static_cast<float>(std::atanh(-0.25))});
}

TEST_CASE("cpu/ref divmod, bitwise, cumulative, top_k, reduce prod", "[ref]") {
  auto dm = [](const char* o) { return make_layer("divmod", {{"op", std::string(o)}}, {}, 2); };
  const Blob a = B({4}, {7, -7, 7, -7}), b = B({4}, {2, 2, -2, -2});
  check_layer(dm("quotient"), {a, b}, {4}, {3, -3, -3, 3});  // toward zero
  check_layer(dm("mod"), {a, b}, {4}, {1, 1, -1, -1});       // the divisor's sign
  check_layer(dm("fmod"), {a, b}, {4}, {1, -1, 1, -1});      // the dividend's sign
  check_layer(dm("mod"), {B({2}, {5.5f, -5.5f}), B({1}, {2})}, {2}, {1.5f, 0.5f});
  auto bw = [](const char* o, int64_t bits, int64_t is_signed) {
    return make_layer("bitwise", {{"op", std::string(o)}, {"bits", bits}, {"signed", is_signed}}, {}, 2);
  };
  const Blob x = B({3}, {12, 10, 255}), y = B({3}, {10, 6, 1});
  check_layer(bw("and", 8, 0), {x, y}, {3}, {8, 2, 1});
  check_layer(bw("or", 8, 0), {x, y}, {3}, {14, 14, 255});
  check_layer(bw("xor", 8, 0), {x, y}, {3}, {6, 12, 254});
  check_layer(bw("xor", 8, 0), {B({2}, {0, 200}), B({1}, {-1})}, {2}, {255, 55});  // not, unsigned
  check_layer(bw("xor", 32, 1), {B({2}, {0, -6}), B({1}, {-1})}, {2}, {-1, 5});     // not, signed
  check_layer(bw("shift_left", 8, 0), {B({3}, {200, 1, 3}), B({3}, {1, 7, 8})}, {3}, {144, 128, 0});  // wraps; >= width: 0
  check_layer(bw("shift_left", 8, 1), {B({2}, {64, -8}), B({2}, {1, 1})}, {2}, {-128, -16});
  // right shifts of signed values are arithmetic; out of range (>= width or negative): 0 or -1
  check_layer(bw("shift_right", 8, 1), {B({4}, {-8, -1, -8, 4}), B({4}, {1, 1, 9, -1})}, {4}, {-4, -1, -1, 0});
  check_layer(bw("shift_right", 16, 0), {B({2}, {65535, 16}), B({2}, {4, 16})}, {2}, {4095, 0});
  auto cum = [](const char* o, int64_t axis, int64_t exclusive, int64_t reverse) {
    return make_layer("cumulative", {{"op", std::string(o)}, {"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}});
  };
  const Blob c = B({2, 3}, {1, 2, 3, 4, 5, 6});
  check_layer(cum("sum", 1, 0, 0), {c}, {2, 3}, {1, 3, 6, 4, 9, 15});
  check_layer(cum("sum", 0, 0, 0), {c}, {2, 3}, {1, 2, 3, 5, 7, 9});
  check_layer(cum("sum", 1, 1, 0), {c}, {2, 3}, {0, 1, 3, 0, 4, 9});
  check_layer(cum("sum", 1, 0, 1), {c}, {2, 3}, {6, 5, 3, 15, 11, 6});
  check_layer(cum("prod", -1, 1, 1), {c}, {2, 3}, {6, 3, 1, 30, 6, 1});
  // top_k: ties keep the lower index first; NaN above every number
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto top = [](int64_t k, int64_t axis, int64_t largest) {
    return make_layer("top_k", {{"k", k}, {"axis", axis}, {"largest", largest}}, {}, 1, 2);
  };
  auto out = run_layer(top(2, 1, 1), {B({2, 4}, {1, 3, 3, 2, 5, nan, 0, 7})});
  REQUIRE(out.size() == 2);
  CHECK(out[0].shape() == Shape{2, 2});
  CHECK(values(out[1]) == Floats{1, 2, 1, 3});
  CHECK(values(out[0])[0] == 3);
  CHECK(std::isnan(values(out[0])[2]));
  CHECK(values(out[0])[3] == 7);
  out = run_layer(top(2, 0, 0), {B({3, 2}, {4, 1, 2, 1, 2, 0})});
  CHECK(values(out[0]) == Floats{2, 0, 2, 1});
  CHECK(values(out[1]) == Floats{1, 2, 2, 0});
  check_layer(make_layer("reduce", {{"mode", std::string("prod")}, {"axes", Ints{1}}, {"keepdims", int64_t{0}}}), {c}, {2},
              {6, 120});
}

TEST_CASE("cpu/ref resize cubic: Keys' convolution reproduces a linear ramp inside, exclude_outside renormalises at edges", "[ref]") {
  // 1 x 8 ramp 0..7, doubled in width (half_pixel): source x = (j + 0.5) / 2 - 0.5.
  // With a = -0.5 Keys' kernel reproduces polynomials up to degree 2 (ONNX's default -0.75 does not).
  Floats ramp;
  for (int i = 0; i < 8; ++i) ramp.push_back(static_cast<float>(i));
  auto layer = [](int64_t exclude) {
    return make_layer("resize", {{"mode", std::string("cubic")}, {"sizes", Ints{1, 1, 1, 16}}, {"exclude_outside", exclude},
                                 {"cubic_coeff_a", -0.5}});
  };
  auto out = run_layer(layer(0), {B({1, 1, 1, 8}, ramp)});
  REQUIRE(out.size() == 1);
  const Floats y = values(out[0]);
  REQUIRE(y.size() == 16);
  for (int j = 3; j <= 12; ++j) {  // every tap inside the input: the ramp itself
    INFO("output " << j);
    CHECK(y[static_cast<std::size_t>(j)] == Approx((j + 0.5) / 2 - 0.5).margin(1e-5));
  }
  // At the left edge the clamped taps bend the ramp; with exclude_outside the
  // outside taps drop out and the weights still sum to 1: a constant stays constant.
  const Floats flat(8, 3.0f);
  for (float v : values(run_layer(layer(1), {B({1, 1, 1, 8}, flat)})[0])) CHECK(v == Approx(3.0f));
  CHECK(y[0] != Approx(-0.25f).margin(1e-3));
}

TEST_CASE("cpu/ref grid_sample: corners, centres and padding modes", "[ref]") {
  // 2x2 input [[1, 2], [3, 4]]; grid points (x, y) in [-1, 1].
  const Blob x = B({1, 1, 2, 2}, {1, 2, 3, 4});
  auto gs = [](const char* mode, const char* pad, int64_t align) {
    return make_layer("grid_sample", {{"mode", std::string(mode)}, {"padding_mode", std::string(pad)}, {"align_corners", align}}, {}, 2);
  };
  const Blob corners = B({1, 1, 4, 2}, {-1, -1, 1, -1, -1, 1, 1, 1});
  check_layer(gs("linear", "zeros", 1), {x, corners}, {1, 1, 1, 4}, {1, 2, 3, 4});  // align_corners: the pixel centres
  check_layer(gs("linear", "zeros", 0), {x, corners}, {1, 1, 1, 4}, {0.25f, 0.5f, 0.75f, 1.0f});  // half outside: zeros
  check_layer(gs("linear", "border", 0), {x, corners}, {1, 1, 1, 4}, {1, 2, 3, 4});
  const Blob centre = B({1, 1, 1, 2}, {0, 0});
  check_layer(gs("linear", "zeros", 0), {x, centre}, {1, 1, 1, 1}, {2.5f});
  check_layer(gs("nearest", "zeros", 1), {x, B({1, 1, 1, 2}, {0.9f, -0.9f})}, {1, 1, 1, 1}, {2});
  // reflection: x = 2 (normalised) lies one pixel past the right edge and reflects back onto it
  check_layer(gs("nearest", "reflection", 1), {x, B({1, 1, 1, 2}, {3, -1})}, {1, 1, 1, 1}, {1});
}

TEST_CASE("cpu/ref rnn: h = tanh(x W' + h R' + Wb + Rb), forward and reverse", "[ref]") {
  // hidden 1, input 1: W = 0.5, R = -1, Wb + Rb = 0.25 + 0.25; x = [1, 2] (2 steps, batch 1).
  auto rnn = [](const char* dir) {
    return make_layer("rnn", {{"hidden_size", int64_t{1}}, {"direction", std::string(dir)}},
                      {{"W", B({1, 1, 1}, {0.5f})}, {"R", B({1, 1, 1}, {-1.0f})}, {"B", B({1, 2}, {0.25f, 0.25f})}}, 1, 2);
  };
  const double h1 = std::tanh(0.5 * 1 + 0.5), h2 = std::tanh(0.5 * 2 - h1 + 0.5);
  auto out = run_layer(rnn("forward"), {B({2, 1, 1}, {1, 2})});
  REQUIRE(out.size() == 2);
  check_close(values(out[0]), {static_cast<float>(h1), static_cast<float>(h2)});
  check_close(values(out[1]), {static_cast<float>(h2)});
  const double r1 = std::tanh(0.5 * 2 + 0.5), r2 = std::tanh(0.5 * 1 - r1 + 0.5);  // reverse: step 2 first
  out = run_layer(rnn("reverse"), {B({2, 1, 1}, {1, 2})});
  check_close(values(out[0]), {static_cast<float>(r2), static_cast<float>(r1)});
}
