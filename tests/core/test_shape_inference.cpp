// Shape inference of every layer type (src/core/layer_types.cpp): a consistent
// case or more for each, and inconsistent ones that must throw softneuro::Error
// naming the layer and the field at fault.
#include <catch2/catch.hpp>

#include <limits>

#include "core/dnn_file.hpp"
#include "core/graph.hpp"
#include "core/layer_types.hpp"
#include "core/tensor_math.hpp"
#include "support/run_layer.hpp"

#include <softneuro/error.hpp>

#include <set>
#include <string>
#include <vector>

namespace Catch {
template <>
struct StringMaker<softneuro::Shape> {
  static std::string convert(const softneuro::Shape& s) { return s.to_string(); }
};
}  // namespace Catch

using namespace softneuro;
using softneuro::test::make_layer;
using Ints = std::vector<int64_t>;
using Shapes = std::vector<Shape>;

namespace {

Shapes infer(const Layer& l, const Shapes& in) { return core::infer_layer_shapes(l, in); }

Blob w(const Shape& s) { return Blob::allocate(s); }

/// A layer named "bad_layer" (the name errors must carry).
Layer L(std::string type, std::map<std::string, Attr> params = {}, std::map<std::string, Blob> weights = {},
        int num_inputs = 1, int num_outputs = 1) {
  return make_layer(std::move(type), std::move(params), std::move(weights), num_inputs, num_outputs, "bad_layer");
}

/// Shape inference must throw an Error naming the layer and `field`.
void expect_error(const Layer& l, const Shapes& in, const std::string& field) {
  INFO("layer type " << l.type << ", expected error on field '" << field << "'");
  bool thrown = false;
  try {
    infer(l, in);
  } catch (const Error& e) {
    thrown = true;
    INFO("what(): " << e.what());
    CHECK(e.layer() == "bad_layer");
    CHECK(e.field() == field);
  }
  CHECK(thrown);
}

}  // namespace

TEST_CASE("shape inference: conv2", "[core][shape]") {
  auto conv = [](std::map<std::string, Attr> p, Shape wshape, bool bias = false, int64_t bias_len = 0) {
    std::map<std::string, Blob> ws{{"weight", w(wshape)}};
    if (bias) ws["bias"] = w(Shape{bias_len});
    return L("conv2", std::move(p), std::move(ws));
  };
  CHECK(infer(conv({}, {4, 3, 3, 3}), {{1, 3, 8, 8}}) == Shapes{{1, 4, 6, 6}});
  CHECK(infer(conv({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}, {4, 3, 3, 3}), {{2, 3, 8, 8}}) ==
        Shapes{{2, 4, 4, 4}});
  // asymmetric pads and strides: h: (7+0+1-2)/3+1 = 3, w: (5+2+0-2)/1+1 = 6
  CHECK(infer(conv({{"strides", Ints{3, 1}}, {"pads", Ints{0, 2, 1, 0}}}, {1, 1, 2, 2}), {{1, 1, 7, 5}}) ==
        Shapes{{1, 1, 3, 6}});
  // groups and dilations: effective kernel 5, 5x5 -> 1x1
  CHECK(infer(conv({{"group", 2}, {"dilations", Ints{2, 2}}}, {6, 2, 3, 3}, true, 6), {{1, 4, 5, 5}}) ==
        Shapes{{1, 6, 1, 1}});
  // depthwise
  CHECK(infer(conv({{"group", 8}, {"pads", Ints{1, 1, 1, 1}}, {"act", "relu"}}, {8, 1, 3, 3}), {{1, 8, 9, 9}}) ==
        Shapes{{1, 8, 9, 9}});

  expect_error(conv({}, {4, 2, 3, 3}), {{1, 3, 8, 8}}, "weight");                       // channels
  expect_error(conv({}, {4, 3, 3}), {{1, 3, 8, 8}}, "weight");                          // weight rank
  expect_error(conv({{"group", 2}}, {4, 1, 3, 3}), {{1, 3, 8, 8}}, "group");            // 2 does not divide 3
  expect_error(conv({{"group", 0}}, {4, 3, 3, 3}), {{1, 3, 8, 8}}, "group");
  expect_error(conv({}, {4, 3, 3, 3}, true, 5), {{1, 3, 8, 8}}, "bias");
  expect_error(conv({}, {4, 3, 9, 9}), {{1, 3, 8, 8}}, "kernel");                       // larger than input
  expect_error(conv({{"strides", Ints{0, 1}}}, {4, 3, 3, 3}), {{1, 3, 8, 8}}, "strides");
  expect_error(conv({{"strides", Ints{1, 1, 1}}}, {4, 3, 3, 3}), {{1, 3, 8, 8}}, "strides");
  expect_error(conv({{"pads", Ints{1, 1}}}, {4, 3, 3, 3}), {{1, 3, 8, 8}}, "pads");
  expect_error(conv({{"pads", Ints{-1, 0, 0, 0}}}, {4, 3, 3, 3}), {{1, 3, 8, 8}}, "pads");
  expect_error(conv({{"dilations", Ints{0, 1}}}, {4, 3, 3, 3}), {{1, 3, 8, 8}}, "dilations");
  expect_error(conv({{"act", "swish"}}, {4, 3, 3, 3}), {{1, 3, 8, 8}}, "act");
  expect_error(conv({{"act", "clip"}, {"act_min", 6.0}, {"act_max", 0.0}}, {4, 3, 3, 3}), {{1, 3, 8, 8}}, "act_min");
  expect_error(conv({}, {4, 3, 3, 3}), {{3, 8, 8}}, "input");                           // rank 3
  expect_error(L("conv2"), {{1, 3, 8, 8}}, "weight");                                  // missing weight
  expect_error(conv({}, {4, 3, 3, 3}), {{1, 3, 8, 8}, {1, 3, 8, 8}}, "inputs");          // two inputs
}

TEST_CASE("shape inference: Winograd sub-layers", "[core][shape]") {
  // 3x3 conv of [2,5,7,9] with pads 1: out 7x9; tile 4: 2x3 tiles per image, 12 tiles -> 16.
  CHECK(infer(L("wgenc", {{"tile", int64_t{4}}, {"pads", Ints{1, 1, 1, 1}}}), {Shape{2, 5, 7, 9}}) == Shapes{Shape{36, 5, 16}});
  CHECK(infer(L("wgenc", {{"tile", int64_t{2}}}), {Shape{1, 3, 6, 6}}) == Shapes{Shape{16, 3, 16}});
  CHECK(infer(L("wgconv", {}, {{"weight", w(Shape{36, 5, 8})}}), {Shape{36, 5, 16}}) == Shapes{Shape{36, 8, 16}});
  CHECK(infer(L("wgdec", {{"tile", int64_t{4}}, {"out_shape", Ints{2, 8, 7, 9}}}), {Shape{36, 8, 16}}) ==
        Shapes{Shape{2, 8, 7, 9}});
  expect_error(L("wgenc", {{"tile", int64_t{3}}}), {Shape{1, 3, 6, 6}}, "tile");
  expect_error(L("wgconv", {}, {{"weight", w(Shape{36, 4, 8})}}), {Shape{36, 5, 16}}, "weight");
  expect_error(L("wgdec", {{"tile", int64_t{4}}, {"out_shape", Ints{2, 8, 7, 9}}}), {Shape{36, 8, 32}}, "input");
  // The blocked variants: 4-d, tiles unpadded (12).
  CHECK(infer(L("wgencb", {{"tile", int64_t{4}}, {"pads", Ints{1, 1, 1, 1}}}), {Shape{2, 5, 7, 9}}) ==
        Shapes{Shape{36, 5, 12, 1}});
  CHECK(infer(L("wgconvb", {}, {{"weight", w(Shape{36, 5, 8})}}), {Shape{36, 5, 12, 1}}) == Shapes{Shape{36, 8, 12, 1}});
  CHECK(infer(L("wgdecb", {{"tile", int64_t{4}}, {"out_shape", Ints{2, 8, 7, 9}}}), {Shape{36, 8, 12, 1}}) ==
        Shapes{Shape{2, 8, 7, 9}});
  expect_error(L("wgconvb", {}, {{"weight", w(Shape{36, 4, 8})}}), {Shape{36, 5, 12, 1}}, "weight");
  expect_error(L("wgdecb", {{"tile", int64_t{4}}, {"out_shape", Ints{2, 8, 7, 9}}}), {Shape{36, 8, 16, 1}}, "input");
}

TEST_CASE("shape inference: dense", "[core][shape]") {
  auto dense = [](Shape wshape, int64_t bias_len = -1) {
    std::map<std::string, Blob> ws{{"weight", w(wshape)}};
    if (bias_len >= 0) ws["bias"] = w(Shape{bias_len});
    return L("dense", {}, std::move(ws));
  };
  CHECK(infer(dense({4, 3}), {{2, 3}}) == Shapes{{2, 4}});
  CHECK(infer(dense({4, 3}, 4), {{2, 5, 3}}) == Shapes{{2, 5, 4}});
  CHECK(infer(dense({4, 3}), {{3}}) == Shapes{{4}});
  expect_error(dense({4, 2}), {{2, 3}}, "weight");
  expect_error(dense({4, 3, 1}), {{2, 3}}, "weight");
  expect_error(dense({4, 3}, 3), {{2, 3}}, "bias");
  expect_error(dense({4, 3}), {Shape{}}, "input");
}

TEST_CASE("shape inference: dynamic_quant_dense", "[core][shape]") {
  auto layer = [](Shape wshape, bool on_grid, std::map<std::string, Attr> p = {}) {
    Blob weight = w(wshape);
    if (on_grid) weight.quant() = QuantParams{std::vector<float>(static_cast<std::size_t>(wshape[0]), 0.5f), {}, 0};
    return L("dynamic_quant_dense", std::move(p), {{"weight", weight}});
  };
  CHECK(infer(layer({4, 3}, true), {{2, 5, 3}}) == Shapes{{2, 5, 4}});
  expect_error(layer({4, 3}, false), {{2, 3}}, "weight");  // not on an int8 grid
  expect_error(layer({4, 2}, true), {{2, 3}}, "weight");
  CHECK(infer(layer({4, 3}, true, {{"act", std::string("gelu")}}), {{2, 3}}) == Shapes{{2, 4}});
  expect_error(layer({4, 3}, true, {{"act", std::string("nonsense")}}), {{2, 3}}, "act");
}

TEST_CASE("shape inference: matmul", "[core][shape]") {
  Layer mm = L("matmul", {}, {}, 2);
  CHECK(infer(mm, {{3, 4}, {4, 5}}) == Shapes{{3, 5}});
  CHECK(infer(mm, {{2, 3, 4}, {4, 5}}) == Shapes{{2, 3, 5}});
  CHECK(infer(mm, {{2, 1, 3, 4}, {5, 4, 6}}) == Shapes{{2, 5, 3, 6}});
  CHECK(infer(mm, {{4}, {4, 5}}) == Shapes{{5}});
  CHECK(infer(mm, {{2, 3, 4}, {4}}) == Shapes{{2, 3}});
  CHECK(infer(mm, {{4}, {4}}) == Shapes{Shape{}});
  CHECK(infer(mm, {{4}, {2, 4, 5}}) == Shapes{{2, 5}});
  expect_error(mm, {{3, 4}, {5, 6}}, "input");
  expect_error(mm, {{2, 3, 4}, {3, 4, 5}}, "input");  // batch 2 vs 3
  expect_error(mm, {Shape{}, {4, 5}}, "input");
  expect_error(mm, {{3, 4}}, "inputs");
}

TEST_CASE("shape inference: pool2", "[core][shape]") {
  auto pool = [](std::map<std::string, Attr> p) {
    if (!p.count("mode")) p["mode"] = "max";
    return L("pool2", std::move(p));
  };
  CHECK(infer(pool({{"kernel", Ints{2, 2}}, {"strides", Ints{2, 2}}}), {{1, 2, 5, 5}}) == Shapes{{1, 2, 2, 2}});
  CHECK(infer(pool({{"kernel", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"ceil_mode", 1}}), {{1, 2, 5, 5}}) ==
        Shapes{{1, 2, 3, 3}});
  // ceil_mode: (5+2-2)/2 rounds up to 3 -> 4 windows, but the 4th starts in the bottom pad and is dropped
  CHECK(infer(pool({{"kernel", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"ceil_mode", 1}}),
              {{1, 2, 5, 5}}) == Shapes{{1, 2, 3, 3}});
  CHECK(infer(pool({{"mode", "avg"}, {"kernel", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}), {{2, 3, 4, 6}}) ==
        Shapes{{2, 3, 4, 6}});
  CHECK(infer(pool({{"mode", "avg"}, {"global", 1}}), {{2, 3, 7, 5}}) == Shapes{{2, 3, 1, 1}});
  expect_error(pool({{"mode", "min"}, {"kernel", Ints{2, 2}}}), {{1, 2, 5, 5}}, "mode");
  expect_error(L("pool2", {{"kernel", Ints{2, 2}}}), {{1, 2, 5, 5}}, "mode");  // mode is required
  expect_error(pool({}), {{1, 2, 5, 5}}, "kernel");                             // kernel is required
  expect_error(pool({{"kernel", Ints{2, 2, 2}}}), {{1, 2, 5, 5}}, "kernel");
  expect_error(pool({{"kernel", Ints{6, 2}}}), {{1, 2, 5, 5}}, "kernel");
  expect_error(pool({{"kernel", Ints{2, 2}}}), {{2, 5, 5}}, "input");
}

TEST_CASE("shape inference: batchnorm", "[core][shape]") {
  auto bn = [](int64_t c_var, std::map<std::string, Attr> p = {}) {
    return L("batchnorm", std::move(p),
             {{"scale", w(Shape{3})}, {"bias", w(Shape{3})}, {"mean", w(Shape{3})}, {"var", w(Shape{c_var})}});
  };
  CHECK(infer(bn(3), {{2, 3, 4, 4}}) == Shapes{{2, 3, 4, 4}});
  CHECK(infer(bn(3), {{2, 3}}) == Shapes{{2, 3}});
  expect_error(bn(4), {{2, 3, 4, 4}}, "var");
  expect_error(bn(3), {{2, 4, 4, 4}}, "scale");
  expect_error(bn(3, {{"epsilon", -1.0}}), {{2, 3, 4, 4}}, "epsilon");
  expect_error(bn(3), {Shape{3}}, "input");
  expect_error(L("batchnorm", {}, {{"scale", w(Shape{3})}}), {{2, 3, 4, 4}}, "bias");  // missing weights
}

TEST_CASE("shape inference: unary elementwise layers", "[core][shape]") {
  for (const char* type : {"relu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "identity", "clip", "gelu", "abs", "neg",
                           "sqrt", "exp", "log", "erf", "reciprocal", "silu", "mish", "softplus", "leaky_relu"}) {
    INFO(type);
    Layer l = L(type);
    CHECK(infer(l, {{2, 3, 4}}) == Shapes{{2, 3, 4}});
    CHECK(infer(l, {Shape{}}) == Shapes{Shape{}});
    expect_error(l, {{2, 3}, {2, 3}}, "inputs");
    expect_error(l, {}, "inputs");
    expect_error(L(type, {}, {}, 1, 2), {{2, 3}}, "outputs");
  }
  CHECK(infer(L("clip", {{"min", 0.0}, {"max", 6.0}}), {{5}}) == Shapes{{5}});
  expect_error(L("clip", {{"min", 6.0}, {"max", 0.0}}), {{5}}, "min");
  expect_error(L("clip", {{"min", "zero"}}), {{5}}, "min");  // mistyped parameter
  CHECK(infer(L("gelu", {{"approximate", "tanh"}}), {{5}}) == Shapes{{5}});
  expect_error(L("gelu", {{"approximate", "sigmoid"}}), {{5}}, "approximate");
}

TEST_CASE("shape inference: prelu, pow, reduce", "[core][shape]") {
  CHECK(infer(L("prelu", {}, {{"slope", w({3, 1, 1})}}), {{2, 3, 4, 5}}) == Shapes{{2, 3, 4, 5}});
  CHECK(infer(L("prelu", {}, {{"slope", w({1})}}), {{7}}) == Shapes{{7}});
  expect_error(L("prelu", {}, {{"slope", w({4, 1, 1})}}), {{2, 3, 4, 5}}, "slope");
  expect_error(L("prelu", {}, {{"slope", w({2, 3, 4, 5, 1})}}), {{2, 3, 4, 5}}, "slope");  // would grow the output
  expect_error(L("prelu"), {{2, 3}}, "slope");

  CHECK(infer(L("pow", {{"exponent", 0.5}}), {{2, 3}}) == Shapes{{2, 3}});
  CHECK(infer(L("pow", {}, {}, 2), {{2, 3}, {3}}) == Shapes{{2, 3}});
  expect_error(L("pow"), {{2, 3}}, "exponent");
  expect_error(L("pow", {{"exponent", 2.0}}, {}, 2), {{2, 3}, {3}}, "exponent");
  expect_error(L("pow", {}, {}, 2), {{2, 3}, {4}}, "input");

  CHECK(infer(L("reduce", {{"mode", "mean"}, {"axes", Ints{2, 3}}}), {{1, 8, 4, 4}}) == Shapes{{1, 8, 1, 1}});
  CHECK(infer(L("reduce", {{"mode", "sum"}, {"axes", Ints{-1, 0}}, {"keepdims", int64_t{0}}}), {{2, 3, 4}}) == Shapes{{3}});
  CHECK(infer(L("reduce", {{"mode", "l2"}, {"keepdims", int64_t{0}}}), {{2, 3}}) == Shapes{Shape{}});
  CHECK(infer(L("reduce", {{"mode", "max"}}), {{2, 3}}) == Shapes{{1, 1}});
  expect_error(L("reduce", {{"mode", "median"}}), {{2, 3}}, "mode");
  expect_error(L("reduce"), {{2, 3}}, "mode");
  expect_error(L("reduce", {{"mode", "sum"}, {"axes", Ints{2}}}), {{2, 3}}, "axes");
  expect_error(L("reduce", {{"mode", "sum"}, {"axes", Ints{1, -1}}}), {{2, 3}}, "axes");  // twice
  CHECK(infer(L("reduce", {{"mode", "max"}, {"axes", Ints{1}}}), {{2, 0}}) == Shapes{{2, 1}});  // max of nothing: -inf
}

TEST_CASE("shape inference: softmax", "[core][shape]") {
  CHECK(infer(L("softmax"), {{2, 3}}) == Shapes{{2, 3}});
  CHECK(infer(L("softmax", {{"axis", 0}}), {{2, 3}}) == Shapes{{2, 3}});
  CHECK(infer(L("softmax", {{"axis", -2}}), {{2, 3}}) == Shapes{{2, 3}});
  expect_error(L("softmax", {{"axis", 2}}), {{2, 3}}, "axis");
  expect_error(L("softmax", {{"axis", -3}}), {{2, 3}}, "axis");
}

TEST_CASE("shape inference: layernorm", "[core][shape]") {
  CHECK(infer(L("layernorm", {}, {{"scale", w(Shape{4})}}), {{2, 3, 4}}) == Shapes{{2, 3, 4}});
  CHECK(infer(L("layernorm", {{"axis", -2}}, {{"scale", w(Shape{3, 4})}, {"bias", w(Shape{3, 4})}}), {{2, 3, 4}}) ==
        Shapes{{2, 3, 4}});
  expect_error(L("layernorm", {{"axis", 1}}, {{"scale", w(Shape{4})}}), {{2, 3, 4}}, "scale");
  expect_error(L("layernorm", {}, {{"scale", w(Shape{4})}, {"bias", w(Shape{3})}}), {{2, 3, 4}}, "bias");
  CHECK(infer(L("rms_norm", {}, {{"scale", w(Shape{4})}}), {{2, 3, 4}}) == Shapes{{2, 3, 4}});
  CHECK(infer(L("rotary", {}, {}, 3), {{2, 3, 5, 8}, {1, 1, 5, 8}, {5, 8}}) == Shapes{{2, 3, 5, 8}});
  expect_error(L("rotary", {}, {}, 3), {{2, 3, 5, 7}, {5, 7}, {5, 7}}, "input");  // an odd head
  expect_error(L("rotary", {}, {}, 3), {{2, 3, 5, 8}, {5, 4}, {5, 8}}, "cos");    // half a table
  expect_error(L("rotary", {}, {}, 3), {{2, 3, 5, 8}, {5, 8}, {2, 4, 5, 8}}, "sin");  // a table larger than x
  expect_error(L("rms_norm", {{"axis", 1}}, {{"scale", w(Shape{4})}}), {{2, 3, 4}}, "scale");
  expect_error(L("rms_norm", {{"epsilon", -1.0}}, {{"scale", w(Shape{4})}}), {{2, 3, 4}}, "epsilon");
  expect_error(L("layernorm", {{"axis", 3}}, {{"scale", w(Shape{4})}}), {{2, 3, 4}}, "axis");
  expect_error(L("layernorm"), {{2, 3, 4}}, "scale");
}

TEST_CASE("shape inference: attention (perms, broadcast heads, mask), errors naming the field", "[core][shape][attention]") {
  using Ints = std::vector<int64_t>;
  CHECK(infer(L("attention", {}, {}, 3), {{2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 4}}) == Shapes{{2, 3, 5, 4}});
  // [B,S,H,D] in, [B,S,H,Dv] out; Kᵀ stored; one key/value head; a 2-D mask.
  const Layer perms = L("attention", {{"q_perm", Ints{0, 2, 1, 3}}, {"k_perm", Ints{0, 1, 3, 2}}, {"out_perm", Ints{0, 2, 1, 3}}}, {}, 4);
  CHECK(infer(perms, {{1, 5, 3, 8}, {1, 1, 8, 7}, {1, 1, 7, 4}, {5, 7}}) == Shapes{{1, 5, 3, 4}});
  expect_error(perms, {{1, 5, 3, 8}, {1, 1, 8, 7}, {1, 1, 7, 4}, {5, 6}}, "mask");       // 6 keys against 7
  expect_error(perms, {{1, 5, 3, 8}, {1, 1, 8, 7}, {1, 1, 7, 4}, {2, 1, 5, 7}}, "mask");  // grows the batch
  expect_error(L("attention", {}, {}, 3), {{2, 3, 5, 8}, {2, 3, 7, 6}, {2, 3, 7, 4}}, "k");   // features differ
  expect_error(L("attention", {}, {}, 3), {{2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 6, 4}}, "v");   // positions differ
  expect_error(L("attention", {}, {}, 3), {{2, 3, 5, 8}, {2, 2, 7, 8}, {2, 3, 7, 4}}, "k");   // 2 heads for 3
  // Grouped-query heads: 2 key/value heads for 6 query heads, each read by 3.
  CHECK(infer(L("attention", {}, {}, 3), {{2, 6, 5, 8}, {2, 2, 7, 8}, {2, 2, 7, 4}}) == Shapes{{2, 6, 5, 4}});
  expect_error(L("attention", {}, {}, 3), {{2, 6, 5, 8}, {2, 4, 7, 8}, {2, 2, 7, 4}}, "k");   // 4 heads for 6
  expect_error(L("attention", {}, {}, 3), {{3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 4}}, "q");      // rank 3
  expect_error(L("attention", {{"q_perm", Ints{0, 1, 1, 3}}}, {}, 3), {{2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 4}}, "q_perm");
  expect_error(L("attention", {{"masked_rows", std::string("skip")}}, {}, 3), {{1, 1, 2, 2}, {1, 1, 2, 2}, {1, 1, 2, 2}},
               "masked_rows");
}

TEST_CASE("shape inference: binary broadcasting layers", "[core][shape]") {
  for (const char* type : {"add", "sub", "mul", "div", "max", "min"}) {
    INFO(type);
    Layer l = L(type, {}, {}, 2);
    CHECK(infer(l, {{2, 3}, {2, 3}}) == Shapes{{2, 3}});
    CHECK(infer(l, {{2, 3, 1}, {4}}) == Shapes{{2, 3, 4}});
    CHECK(infer(l, {{1, 3, 1}, {5, 1, 4}}) == Shapes{{5, 3, 4}});
    CHECK(infer(l, {Shape{}, {2, 2}}) == Shapes{{2, 2}});
    expect_error(l, {{3}, {4}}, "input");
    expect_error(l, {{2, 3}, {3, 3}}, "input");
    expect_error(l, {{3}}, "inputs");
  }
}

TEST_CASE("shape inference: concat", "[core][shape]") {
  CHECK(infer(L("concat", {{"axis", 1}}, {}, 2), {{1, 2, 3}, {1, 4, 3}}) == Shapes{{1, 6, 3}});
  CHECK(infer(L("concat", {{"axis", -1}}, {}, 3), {{2, 1}, {2, 2}, {2, 3}}) == Shapes{{2, 6}});
  CHECK(infer(L("concat", {{"axis", 0}}, {}, 1), {{2, 1}}) == Shapes{{2, 1}});
  expect_error(L("concat", {{"axis", 1}}, {}, 2), {{1, 2, 3}, {1, 2, 4}}, "input");
  expect_error(L("concat", {{"axis", 1}}, {}, 2), {{1, 2, 3}, {2, 3}}, "input");
  expect_error(L("concat", {}, {}, 2), {{1, 2}, {1, 2}}, "axis");  // axis is required
  expect_error(L("concat", {{"axis", 3}}, {}, 2), {{1, 2}, {1, 2}}, "axis");
  expect_error(L("concat", {{"axis", 0}}, {}, 0), {}, "inputs");
}

TEST_CASE("shape inference: split", "[core][shape]") {
  CHECK(infer(L("split", {{"axis", 1}}, {}, 1, 3), {{2, 6}}) == Shapes{{2, 2}, {2, 2}, {2, 2}});
  CHECK(infer(L("split", {{"split", Ints{1, 5}}}, {}, 1, 2), {{6, 2}}) == Shapes{{1, 2}, {5, 2}});
  CHECK(infer(L("split", {{"axis", -1}, {"split", Ints{2, 0, 1}}}, {}, 1, 3), {{4, 3}}) ==
        Shapes{{4, 2}, {4, 0}, {4, 1}});
  expect_error(L("split", {{"axis", 1}}, {}, 1, 4), {{2, 6}}, "split");
  expect_error(L("split", {{"split", Ints{1, 2}}}, {}, 1, 2), {{6, 2}}, "split");      // sum 3 != 6
  expect_error(L("split", {{"split", Ints{1, 2, 3}}}, {}, 1, 2), {{6, 2}}, "split");   // 3 sizes, 2 outputs
  expect_error(L("split", {{"split", Ints{-1, 7}}}, {}, 1, 2), {{6, 2}}, "split");
  expect_error(L("split", {{"axis", 2}}, {}, 1, 2), {{6, 2}}, "axis");
  expect_error(L("split", {}, {}, 1, 0), {{6, 2}}, "outputs");
}

TEST_CASE("shape inference: reshape", "[core][shape]") {
  CHECK(infer(L("reshape", {{"shape", Ints{0, -1}}}), {{2, 3, 4}}) == Shapes{{2, 12}});
  CHECK(infer(L("reshape", {{"shape", Ints{4, -1, 2}}}), {{2, 3, 4}}) == Shapes{{4, 3, 2}});
  CHECK(infer(L("reshape", {{"shape", Ints{24}}}), {{2, 3, 4}}) == Shapes{{24}});
  CHECK(infer(L("reshape", {{"shape", Ints{}}}), {{1, 1}}) == Shapes{Shape{}});
  expect_error(L("reshape", {{"shape", Ints{5, -1}}}), {{2, 3, 4}}, "shape");
  expect_error(L("reshape", {{"shape", Ints{-1, -1}}}), {{2, 3, 4}}, "shape");
  expect_error(L("reshape", {{"shape", Ints{2, 3}}}), {{2, 3, 4}}, "shape");
  expect_error(L("reshape", {{"shape", Ints{-2, 12}}}), {{2, 3, 4}}, "shape");
  expect_error(L("reshape", {{"shape", Ints{0, 0, 0, 0}}}), {{2, 3, 4}}, "shape");  // 0 past the rank
  expect_error(L("reshape"), {{2, 3, 4}}, "shape");
  // Dims whose product overflows int64 (fuzzing: signed overflow in a .dnn reshape).
  expect_error(L("reshape", {{"shape", Ints{6, 7020099168861421567}}}), {{2, 3, 4}}, "shape");
  expect_error(L("reshape", {{"shape", Ints{-1, 4611686018427387904, 4}}}), {{2, 3, 4}}, "shape");
  // copy_dims: dims copied from any input dim (dynamic shapes' squeezes).
  CHECK(infer(L("reshape", {{"shape", Ints{1, 1, -1}}, {"copy_dims", Ints{2, -1, -1}}}), {{2, 3, 4}}) == Shapes{{4, 1, 6}});
  CHECK(infer(L("reshape", {{"shape", Ints{1, 1}}, {"copy_dims", Ints{2, 0}}}), {{2, 1, 4}}) == Shapes{{4, 2}});
  expect_error(L("reshape", {{"shape", Ints{1, -1}}, {"copy_dims", Ints{3, -1}}}), {{2, 3, 4}}, "copy_dims");
  expect_error(L("reshape", {{"shape", Ints{1, -1}}, {"copy_dims", Ints{0}}}), {{2, 3, 4}}, "copy_dims");
}

TEST_CASE("shape inference: deconv2", "[core][shape]") {
  auto deconv = [](std::map<std::string, Attr> p, Shape wshape, int64_t bias_len = 0) {
    std::map<std::string, Blob> ws{{"weight", w(wshape)}};
    if (bias_len) ws["bias"] = w(Shape{bias_len});
    return L("deconv2", std::move(p), std::move(ws));
  };
  // OH = sh*(H-1) + oph + dh*(KH-1) + 1 - pt - pb
  CHECK(infer(deconv({{"strides", Ints{2, 2}}}, {3, 4, 2, 2}), {{1, 3, 5, 6}}) == Shapes{{1, 4, 10, 12}});
  CHECK(infer(deconv({{"strides", Ints{2, 3}}, {"pads", Ints{1, 0, 0, 2}}, {"dilations", Ints{2, 1}},
                      {"output_padding", Ints{1, 2}}},
                     {4, 3, 3, 2}, 3),
              {{1, 4, 3, 3}}) == Shapes{{1, 3, 9, 8}});
  CHECK(infer(deconv({{"group", int64_t{2}}}, {4, 3, 1, 1}), {{2, 4, 5, 5}}) == Shapes{{2, 6, 5, 5}});
  expect_error(deconv({}, {5, 3, 1, 1}), {{1, 4, 5, 5}}, "weight");
  expect_error(deconv({{"group", int64_t{3}}}, {4, 1, 1, 1}), {{1, 4, 5, 5}}, "group");
  expect_error(deconv({{"output_padding", Ints{1, 0}}}, {4, 3, 2, 2}), {{1, 4, 5, 5}}, "output_padding");
  expect_error(deconv({{"pads", Ints{2, 0, 2, 0}}}, {4, 3, 1, 1}), {{1, 4, 1, 5}}, "pads");
  expect_error(deconv({}, {4, 3, 2, 2}, 4), {{1, 4, 5, 5}}, "bias");
  expect_error(deconv({}, {4, 3, 2, 2}), {{4, 5, 5}}, "input");
}

TEST_CASE("shape inference: resize", "[core][shape]") {
  using Floats = std::vector<double>;
  CHECK(infer(L("resize", {{"scales", Floats{1, 1, 2, 2}}}), {{1, 3, 5, 7}}) == Shapes{{1, 3, 10, 14}});
  CHECK(infer(L("resize", {{"scales", Floats{1, 1, 0.5, 1.5}}}), {{1, 3, 5, 7}}) == Shapes{{1, 3, 2, 10}});  // floor
  CHECK(infer(L("resize", {{"sizes", Ints{1, 3, 4, 9}}}), {{1, 3, 5, 7}}) == Shapes{{1, 3, 4, 9}});
  expect_error(L("resize", {{"scales", Floats{1, 2, 2, 2}}}), {{1, 3, 5, 7}}, "scales");
  expect_error(L("resize", {{"sizes", Ints{2, 3, 4, 9}}}), {{1, 3, 5, 7}}, "sizes");
  expect_error(L("resize", {{"scales", Floats{1, 1, 2}}}), {{1, 3, 5, 7}}, "scales");
  expect_error(L("resize", {{"scales", Floats{1, 1, 0, 2}}}), {{1, 3, 5, 7}}, "scales");
  expect_error(L("resize", {{"scales", Floats{1, 1, 2, 2}}}), {{3, 5, 7}}, "input");
  expect_error(L("resize", {{"scales", Floats{1, 1, 2, 2}}, {"mode", std::string("area")}}), {{1, 3, 5, 7}}, "mode");
  expect_error(L("resize", {{"scales", Floats{1, 1, 2, 2}}, {"coordinate_transformation_mode", std::string("tf_crop_and_resize")}}),
               {{1, 3, 5, 7}}, "roi");
  expect_error(L("resize"), {{1, 3, 5, 7}}, "scales");
}

TEST_CASE("shape inference: flatten", "[core][shape]") {
  CHECK(infer(L("flatten"), {{2, 3, 4}}) == Shapes{{2, 12}});
  CHECK(infer(L("flatten", {{"axis", 2}}), {{2, 3, 4}}) == Shapes{{6, 4}});
  CHECK(infer(L("flatten", {{"axis", 0}}), {{2, 3, 4}}) == Shapes{{1, 24}});
  CHECK(infer(L("flatten", {{"axis", 3}}), {{2, 3, 4}}) == Shapes{{24, 1}});
  CHECK(infer(L("flatten", {{"axis", -1}}), {{2, 3, 4}}) == Shapes{{6, 4}});
  expect_error(L("flatten", {{"axis", 4}}), {{2, 3, 4}}, "axis");
  expect_error(L("flatten", {{"axis", -4}}), {{2, 3, 4}}, "axis");
}

TEST_CASE("shape inference: transpose", "[core][shape]") {
  CHECK(infer(L("transpose"), {{2, 3, 4}}) == Shapes{{4, 3, 2}});
  CHECK(infer(L("transpose", {{"perm", Ints{0, 2, 1}}}), {{2, 3, 4}}) == Shapes{{2, 4, 3}});
  CHECK(infer(L("transpose", {{"perm", Ints{0, 2, 3, 1}}}), {{1, 3, 5, 7}}) == Shapes{{1, 5, 7, 3}});
  expect_error(L("transpose", {{"perm", Ints{0, 0, 1}}}), {{2, 3, 4}}, "perm");
  expect_error(L("transpose", {{"perm", Ints{0, 1}}}), {{2, 3, 4}}, "perm");
  expect_error(L("transpose", {{"perm", Ints{0, 1, 3}}}), {{2, 3, 4}}, "perm");
}

TEST_CASE("shape inference: pad", "[core][shape]") {
  CHECK(infer(L("pad", {{"pads", Ints{1, 0, 2, 1}}}), {{2, 3}}) == Shapes{{5, 4}});
  CHECK(infer(L("pad", {{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}, {"mode", "reflect"}}), {{1, 2, 3, 3}}) ==
        Shapes{{1, 2, 5, 5}});
  CHECK(infer(L("pad", {{"pads", Ints{3, 3}}, {"mode", "edge"}}), {{1}}) == Shapes{{7}});
  expect_error(L("pad", {{"pads", Ints{1, 1}}}), {{2, 3}}, "pads");
  expect_error(L("pad", {{"pads", Ints{-1, 0, 0, 0}}}), {{2, 3}}, "pads");
  expect_error(L("pad", {{"pads", Ints{0, 3, 0, 0}}, {"mode", "reflect"}}), {{2, 3}}, "pads");
  expect_error(L("pad", {{"pads", Ints{1, 0, 0, 0}}, {"mode", "edge"}}), {{0, 3}}, "pads");
  CHECK(infer(L("pad", {{"pads", Ints{5, 0}}, {"mode", "wrap"}}), {{2}}) == Shapes{{7}});  // any number of turns
  expect_error(L("pad", {{"pads", Ints{1, 0, 0, 0}}, {"mode", "wrap"}}), {{0, 3}}, "pads");
  expect_error(L("pad", {{"pads", Ints{0, 0, 0, 0}}, {"mode", "circular"}}), {{2, 3}}, "mode");
  expect_error(L("pad"), {{2, 3}}, "pads");
}

TEST_CASE("shape inference: constant", "[core][shape]") {
  CHECK(infer(L("constant", {}, {{"value", w(Shape{2, 2})}}, 0), {}) == Shapes{{2, 2}});
  expect_error(L("constant", {}, {}, 0), {}, "value");
  expect_error(L("constant", {}, {{"value", w(Shape{2, 2})}}, 1), {{2, 2}}, "inputs");
}

TEST_CASE("shape inference: unknown type", "[core][shape]") {
  Layer l = make_layer("conv3", {}, {}, 1, 1, "bad_layer");
  expect_error(l, {{1}}, "type");
}

TEST_CASE("shape inference: lstm and gru", "[core][shape]") {
  auto lstm = [](std::map<std::string, Attr> p, int64_t dirs, int inputs = 1) {
    return L("lstm", std::move(p), {{"W", w(Shape{dirs, 16, 3})}, {"R", w(Shape{dirs, 16, 4})}}, inputs, 3);
  };
  CHECK(infer(lstm({{"hidden_size", int64_t{4}}}, 1), {{5, 2, 3}}) == Shapes{{5, 1, 2, 4}, {1, 2, 4}, {1, 2, 4}});
  CHECK(infer(lstm({{"hidden_size", int64_t{4}}, {"direction", "bidirectional"}, {"layout", int64_t{1}}}, 2), {{2, 5, 3}}) ==
        Shapes{{2, 5, 2, 4}, {2, 2, 4}, {2, 2, 4}});
  CHECK(infer(lstm({{"hidden_size", int64_t{4}}}, 1, 3), {{5, 2, 3}, {1, 2, 4}, {1, 2, 4}}).size() == 3);
  Layer gru = L("gru", {{"hidden_size", int64_t{4}}, {"direction", "reverse"}},
                {{"W", w(Shape{1, 12, 3})}, {"R", w(Shape{1, 12, 4})}, {"B", w(Shape{1, 24})}}, 1, 2);
  CHECK(infer(gru, {{7, 1, 3}}) == Shapes{{7, 1, 1, 4}, {1, 1, 4}});
  Layer rnn = L("rnn", {{"hidden_size", int64_t{4}}}, {{"W", w(Shape{1, 4, 3})}, {"R", w(Shape{1, 4, 4})}}, 1, 2);
  CHECK(infer(rnn, {{7, 2, 3}}) == Shapes{{7, 1, 2, 4}, {1, 2, 4}});
  expect_error(L("rnn", {{"hidden_size", int64_t{4}}}, {{"W", w(Shape{1, 16, 3})}, {"R", w(Shape{1, 4, 4})}}, 1, 2), {{7, 2, 3}}, "W");
  expect_error(lstm({{"hidden_size", int64_t{5}}}, 1), {{5, 2, 3}}, "W");        // W is [1,16,3], not [1,20,3]
  expect_error(lstm({{"hidden_size", int64_t{4}}}, 1), {{5, 2, 4}}, "W");        // input size 4, W's 3
  expect_error(lstm({{"hidden_size", int64_t{0}}}, 1), {{5, 2, 3}}, "hidden_size");
  expect_error(lstm({{"hidden_size", int64_t{4}}, {"direction", "sideways"}}, 1), {{5, 2, 3}}, "direction");
  expect_error(lstm({{"hidden_size", int64_t{4}}, {"clip", -1.0}}, 1), {{5, 2, 3}}, "clip");
  expect_error(lstm({{"hidden_size", int64_t{4}}}, 1), {{5, 3}}, "input");
  expect_error(lstm({{"hidden_size", int64_t{4}}}, 1, 2), {{5, 2, 3}, {1, 3, 4}}, "inputs");  // initial_h's batch
  expect_error(L("lstm", {{"hidden_size", int64_t{4}}}, {{"R", w(Shape{1, 16, 4})}}, 1, 3), {{5, 2, 3}}, "W");
  expect_error(L("lstm", {{"hidden_size", int64_t{4}}}, {{"W", w(Shape{1, 16, 3})}, {"R", w(Shape{1, 16, 4})}}, 1, 1),
               {{5, 2, 3}}, "outputs");
}

TEST_CASE("shape inference: group_norm", "[core][shape]") {
  auto gn = [](int64_t groups, int64_t c) {
    return L("group_norm", {{"groups", groups}}, {{"scale", w(Shape{c})}, {"bias", w(Shape{c})}});
  };
  CHECK(infer(gn(2, 4), {{1, 4, 5, 5}}) == Shapes{{1, 4, 5, 5}});
  CHECK(infer(gn(4, 4), {{2, 4, 7}}) == Shapes{{2, 4, 7}});
  expect_error(gn(3, 4), {{1, 4, 5, 5}}, "groups");
  expect_error(gn(0, 4), {{1, 4, 5, 5}}, "groups");
  expect_error(gn(2, 6), {{1, 4, 5, 5}}, "scale");
  expect_error(L("group_norm", {{"groups", int64_t{2}}, {"epsilon", -1.0}}, {{"scale", w(Shape{4})}}), {{1, 4, 2, 2}}, "epsilon");
  expect_error(gn(1, 4), {{4}}, "input");
}

TEST_CASE("shape inference: fake_quant and dynamic_quantize", "[core][shape]") {
  auto fq = [](double scale, int64_t zp, int64_t qmin, int64_t qmax) {
    return L("fake_quant", {{"scale", scale}, {"zero_point", zp}, {"qmin", qmin}, {"qmax", qmax}});
  };
  CHECK(infer(fq(0.1, 128, 0, 255), {{1, 3, 4}}) == Shapes{{1, 3, 4}});
  CHECK(infer(fq(0.1, -5, -128, 127), {{7}}) == Shapes{{7}});
  expect_error(fq(0.0, 0, 0, 255), {{7}}, "scale");
  expect_error(fq(-1.0, 0, 0, 255), {{7}}, "scale");
  expect_error(fq(0.1, 300, 0, 255), {{7}}, "zero_point");
  expect_error(fq(0.1, 0, 0, 127), {{7}}, "qmin");
  CHECK(infer(L("dynamic_quantize", {}, {}, 1, 3), {{2, 5}}) == Shapes{{2, 5}, {}, {}});
  expect_error(L("dynamic_quantize", {}, {}, 1, 1), {{2, 5}}, "outputs");
}

TEST_CASE("shape inference: compare, logical, where, round, arg_reduce", "[core][shape]") {
  auto op = [](const char* type, const char* o, int inputs = 2) { return L(type, {{"op", std::string(o)}}, {}, inputs); };
  CHECK(infer(op("compare", "less_equal"), {{2, 1, 4}, {3, 1}}) == Shapes{{2, 3, 4}});
  CHECK(infer(op("logical", "xor"), {{5}, {}}) == Shapes{{5}});
  expect_error(op("compare", "and"), {{2}, {2}}, "op");  // a logical op
  expect_error(op("logical", "less"), {{2}, {2}}, "op");
  expect_error(op("compare", "equal"), {{2}, {3}}, "input");
  CHECK(infer(L("where", {}, {}, 3), {{4, 1, 6}, {3, 6}, {4, 3, 1}}) == Shapes{{4, 3, 6}});
  expect_error(L("where", {}, {}, 3), {{4}, {3}, {4}}, "input");
  CHECK(infer(L("round", {{"mode", std::string("trunc")}}), {{3, 2}}) == Shapes{{3, 2}});
  expect_error(L("round", {{"mode", std::string("half_up")}}), {{3}}, "mode");
  CHECK(infer(L("cast", {{"to", std::string("float8e4m3fn")}}), {{3, 2}}) == Shapes{{3, 2}});
  CHECK(infer(L("einsum", {{"equation", std::string("ij,jk->ik")}}), {{2, 3}, {3, 4}}) == Shapes{{2, 4}});
  CHECK(infer(L("einsum", {{"equation", std::string("bij,j->bi")}}), {{1, 2, 3}, {3}}) == Shapes{{1, 2}});
  CHECK(infer(L("einsum", {{"equation", std::string("ab,ab->b")}}), {{1, 5}, {4, 5}}) == Shapes{{5}});  // a broadcasts
  expect_error(L("einsum", {{"equation", std::string("ij,jk->ik")}}), {{2, 3}, {4, 4}}, "equation");
  expect_error(L("einsum", {{"equation", std::string("ij->iz")}}), {{2, 3}}, "equation");
  expect_error(L("einsum", {{"equation", std::string("ij")}}), {{2, 3}}, "equation");
  expect_error(L("cast", {{"to", std::string("int8")}}), {{3}}, "to");
  expect_error(L("cast", {{"to", std::string("int4")}, {"round_mode", std::string("sideways")}}), {{3}}, "round_mode");
  auto arg = [](int64_t axis, int64_t keep) { return L("arg_reduce", {{"axis", axis}, {"keepdims", keep}}); };
  CHECK(infer(arg(1, 1), {{2, 5, 3}}) == Shapes{{2, 1, 3}});
  CHECK(infer(arg(-1, 0), {{2, 5, 3}}) == Shapes{{2, 5}});
  CHECK(infer(arg(0, 0), {{7}}) == Shapes{Shape{}});
  expect_error(arg(3, 1), {{2, 5, 3}}, "axis");
  expect_error(arg(1, 1), {{2, 0, 3}}, "axis");
  expect_error(L("arg_reduce", {{"mode", std::string("median")}}), {{2}}, "mode");
  expect_error(arg(0, 1), {Shape{}}, "input");
  CHECK(infer(L("trig", {{"op", std::string("atanh")}}), {{2, 3}}) == Shapes{{2, 3}});
  expect_error(L("trig", {{"op", std::string("sec")}}), {{2}}, "op");
  Blob idx = Blob::allocate(Shape{2, 2}, DType::int64);
  for (int i = 0; i < 4; ++i) idx.data_as<int64_t>()[i] = 5 - i;
  CHECK(infer(L("take", {}, {{"indices", idx}}), {{2, 3}}) == Shapes{{2, 2}});
  expect_error(L("take", {}, {{"indices", idx}}), {{5}}, "indices");  // index 5 of 5 values
  expect_error(L("take", {}, {{"indices", w(Shape{2})}}), {{5}}, "indices");  // float indices
  auto gather = [](int64_t axis) { return L("gather", {{"axis", axis}}, {}, 2); };
  CHECK(infer(gather(0), {{30, 8}, {1, 5}}) == Shapes{{1, 5, 8}});
  CHECK(infer(gather(-1), {{2, 3, 4}, Shape{}}) == Shapes{{2, 3}});
  CHECK(infer(gather(1), {{2, 3, 4}, {6}}) == Shapes{{2, 6, 4}});
  expect_error(gather(2), {{2, 3}, {1}}, "axis");
  expect_error(gather(0), {Shape{}, {1}}, "input");
  expect_error(gather(0), {{2, 2, 2, 2}, {2, 2, 2, 2, 2, 2}}, "indices");  // past the max rank
  auto ge = [](int64_t axis) { return L("gather_elements", {{"axis", axis}}, {}, 2); };
  CHECK(infer(ge(1), {{2, 4}, {2, 3}}) == Shapes{{2, 3}});
  expect_error(ge(1), {{2, 4}, {3}}, "indices");
  expect_error(ge(1), {{2, 4}, {3, 3}}, "indices");  // dim 0 beyond the data's
  auto gnd = [](int64_t b) { return L("gather_nd", {{"batch_dims", b}}, {}, 2); };
  CHECK(infer(gnd(0), {{4, 5, 6}, {3, 2}}) == Shapes{{3, 6}});
  CHECK(infer(gnd(1), {{2, 5, 6}, {2, 3, 1}}) == Shapes{{2, 3, 6}});
  expect_error(gnd(0), {{4, 5}, {3, 3}}, "indices");
  expect_error(gnd(1), {{2, 5}, {3, 1}}, "indices");
  expect_error(gnd(2), {{2, 5}, {2, 1}}, "batch_dims");
}

TEST_CASE("shape inference: divmod, bitwise, cumulative, top_k", "[core][shape]") {
  CHECK(infer(L("divmod", {{"op", std::string("mod")}}, {}, 2), {{2, 1}, {3}}) == Shapes{{2, 3}});
  expect_error(L("divmod", {{"op", std::string("rem")}}, {}, 2), {{2}, {2}}, "op");
  auto bw = [](const char* o, int64_t bits) { return L("bitwise", {{"op", std::string(o)}, {"bits", bits}}, {}, 2); };
  CHECK(infer(bw("shift_left", 8), {{4}, {1}}) == Shapes{{4}});
  expect_error(bw("shift_left", 12), {{4}, {1}}, "bits");
  expect_error(bw("nand", 8), {{4}, {1}}, "op");
  expect_error(bw("and", 8), {{4}, {3}}, "input");
  CHECK(infer(L("cumulative", {{"axis", int64_t{-1}}}), {{2, 3}}) == Shapes{{2, 3}});
  expect_error(L("cumulative", {{"axis", int64_t{2}}}), {{2, 3}}, "axis");
  expect_error(L("cumulative", {{"op", std::string("max")}}), {{2, 3}}, "op");
  auto top = [](int64_t k, int64_t axis) { return L("top_k", {{"k", k}, {"axis", axis}}, {}, 1, 2); };
  CHECK(infer(top(2, 1), {{3, 5, 4}}) == Shapes{{3, 2, 4}, {3, 2, 4}});
  CHECK(infer(top(0, -1), {{3}}) == Shapes{{0}, {0}});
  expect_error(top(6, 1), {{3, 5}}, "k");
  expect_error(top(1, 2), {{3, 5}}, "axis");
  CHECK(infer(L("reduce", {{"mode", std::string("prod")}, {"keepdims", int64_t{0}}}), {{3, 5}}) == Shapes{Shape{}});
  auto gs = [](const char* mode) { return L("grid_sample", {{"mode", std::string(mode)}}, {}, 2); };
  CHECK(infer(gs("cubic"), {{2, 3, 5, 6}, {2, 4, 7, 2}}) == Shapes{{2, 3, 4, 7}});
  CHECK(infer(gs("nearest"), {{1, 2, 3, 4, 5}, {1, 2, 2, 2, 3}}) == Shapes{{1, 2, 2, 2, 2}});
  expect_error(gs("linear"), {{2, 3, 5, 6}, {2, 4, 7, 3}}, "grid");
  expect_error(gs("linear"), {{2, 3, 5, 6}, {1, 4, 7, 2}}, "grid");
  expect_error(gs("area"), {{2, 3, 5, 6}, {2, 4, 7, 2}}, "mode");
}

TEST_CASE("shape inference: value-shaped layers give their capacity, roi_align", "[core][shape]") {
  auto nms = [](int64_t most, double iou, int64_t center) {
    return L("non_max_suppression", {{"max_output_boxes_per_class", most}, {"iou_threshold", iou}, {"center_point_box", center}}, {}, 2);
  };
  CHECK(infer(nms(3, 0.5, 0), {{2, 10, 4}, {2, 5, 10}}) == Shapes{{30, 3}});
  CHECK(infer(nms(int64_t{1} << 62, 0.5, 1), {{1, 10, 4}, {1, 5, 10}}) == Shapes{{50, 3}});  // at most every box
  CHECK(infer(nms(0, 0.5, 0), {{1, 10, 4}, {1, 5, 10}}) == Shapes{{0, 3}});
  expect_error(nms(3, 0.5, 0), {{1, 10, 5}, {1, 5, 10}}, "boxes");
  expect_error(nms(3, 0.5, 0), {{1, 10, 4}, {1, 5, 9}}, "scores");
  expect_error(nms(-1, 0.5, 0), {{1, 10, 4}, {1, 5, 10}}, "max_output_boxes_per_class");
  expect_error(nms(3, 1.5, 0), {{1, 10, 4}, {1, 5, 10}}, "iou_threshold");
  expect_error(nms(3, 0.5, 2), {{1, 10, 4}, {1, 5, 10}}, "center_point_box");
  CHECK(infer(L("non_zero"), {{3, 4}}) == Shapes{{2, 12}});
  CHECK(infer(L("non_zero"), {Shape{}}) == Shapes{{1, 1}});
  auto roi = [](const char* mode, int64_t oh) { return L("roi_align", {{"mode", std::string(mode)}, {"output_height", oh}, {"output_width", int64_t{2}}}, {}, 3); };
  CHECK(infer(roi("avg", 3), {{2, 8, 10, 12}, {5, 4}, {5}}) == Shapes{{5, 8, 3, 2}});
  expect_error(roi("mean", 3), {{2, 8, 10, 12}, {5, 4}, {5}}, "mode");
  expect_error(roi("max", 0), {{2, 8, 10, 12}, {5, 4}, {5}}, "output_height");
  expect_error(roi("max", 3), {{2, 8, 10, 12}, {5, 5}, {5}}, "rois");
  expect_error(roi("max", 3), {{2, 8, 10, 12}, {5, 4}, {4}}, "batch_indices");
  auto unique = [](std::map<std::string, Attr> p) { return L("unique", std::move(p), {}, 1, 4); };
  CHECK(infer(unique({}), {{3, 4}}) == Shapes{{12}, {12}, {12}, {12}});
  CHECK(infer(unique({{"axis", int64_t{-1}}}), {{3, 4}}) == Shapes{{3, 4}, {4}, {4}, {4}});
  expect_error(unique({{"axis", int64_t{2}}}), {{3, 4}}, "axis");
  auto dft = [](int64_t axis, int64_t length, int64_t inverse, int64_t onesided) {
    return L("dft", {{"axis", axis}, {"length", length}, {"inverse", inverse}, {"onesided", onesided}});
  };
  CHECK(infer(dft(1, 8, 0, 0), {{3, 5, 1}}) == Shapes{{3, 8, 2}});
  CHECK(infer(dft(1, 8, 0, 1), {{3, 5, 2}}) == Shapes{{3, 5, 2}});
  CHECK(infer(dft(-2, 8, 1, 1), {{3, 5, 2}}) == Shapes{{3, 8, 1}});
  expect_error(dft(2, 8, 0, 0), {{3, 5, 2}}, "axis");
  expect_error(dft(1, 8, 0, 0), {{3, 5, 3}}, "input");
  expect_error(dft(1, 0, 0, 0), {{3, 5, 2}}, "length");
  auto col2im = [](std::vector<int64_t> image, std::vector<int64_t> block, std::vector<int64_t> strides) {
    return L("col2im", {{"image_shape", image}, {"block_shape", block}, {"strides", strides}});
  };
  CHECK(infer(col2im({5, 5}, {1, 5}, {1, 1}), {{1, 5, 5}}) == Shapes{{1, 1, 5, 5}});
  CHECK(infer(col2im({6, 6}, {2, 2}, {2, 2}), {{2, 12, 9}}) == Shapes{{2, 3, 6, 6}});
  expect_error(col2im({6, 6}, {2, 2}, {2, 2}), {{2, 12, 8}}, "input");
  expect_error(col2im({6, 6}, {2, 2}, {0, 2}), {{2, 12, 9}}, "strides");
  expect_error(col2im({6, 6}, {7, 2}, {1, 1}), {{2, 14, 9}}, "block_shape");
  CHECK(infer(L("choose", {}, {}, 3), {{1}, {2, 7}, {5, 3}}) == Shapes{{5, 7}});
  expect_error(L("choose", {}, {}, 3), {{1}, {2, 7}, {5}}, "inputs");
  expect_error(L("choose", {}, {}, 3), {{2}, {2, 7}, {5, 3}}, "condition");
  CHECK(infer(L("branch", {{"probe", int64_t{0}}}, {}, 3), {{1}, {2, 7}, {5}}) == Shapes{{5}});
  CHECK(infer(L("branch", {{"probe", int64_t{1}}}, {}, 3), {{1}, {2, 7}, {5}}) == Shapes{{2, 7}});
  auto slice = [](std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes, std::vector<int64_t> steps) {
    return L("slice", {{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}});
  };
  CHECK(infer(slice({1, -1}, {100, -9}, {0, 2}, {2, -3}), {{7, 3, 8}}) == Shapes{{3, 3, 3}});
  CHECK(infer(slice({0}, {300}, {0}, {1}), {{0, 4}}) == Shapes{{0, 4}});  // an empty tensor's slice
  // Steps past the dim take one element, the extremes included (no overflow).
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  CHECK(infer(slice({2}, {big}, {0}, {big}), {{7, 3, 8}}) == Shapes{{1, 3, 8}});
  CHECK(infer(slice({-1}, {small}, {0}, {small}), {{7, 3, 8}}) == Shapes{{1, 3, 8}});
  expect_error(slice({0}, {1}, {3}, {1}), {{7, 3, 8}}, "axes");
  expect_error(slice({0}, {1}, {0}, {0}), {{7, 3, 8}}, "steps");
  auto scatter = [](const char* reduction) { return L("scatter_elements", {{"axis", int64_t{1}}, {"reduction", std::string(reduction)}}, {}, 3); };
  CHECK(infer(scatter("add"), {{3, 5}, {3, 4}, {3, 4}}) == Shapes{{3, 5}});
  expect_error(scatter("add"), {{3, 5}, {3, 4}, {3, 3}}, "updates");
  expect_error(scatter("add"), {{3, 5}, {4, 4}, {4, 4}}, "indices");
  expect_error(scatter("or"), {{3, 5}, {3, 4}, {3, 4}}, "reduction");
  auto scatter_nd = [](const char* reduction) { return L("scatter_nd", {{"reduction", std::string(reduction)}}, {}, 3); };
  CHECK(infer(scatter_nd("none"), {{4, 5, 6}, {3, 2}, {3, 6}}) == Shapes{{4, 5, 6}});
  CHECK(infer(scatter_nd("add"), {{4, 5}, {2, 3, 1}, {2, 3, 5}}) == Shapes{{4, 5}});
  expect_error(scatter_nd("none"), {{4, 5, 6}, {3, 2}, {3, 5}}, "updates");
  expect_error(scatter_nd("none"), {{4, 5, 6}, {3, 4}, {3}}, "indices");
  expect_error(scatter_nd("xor"), {{4, 5, 6}, {3, 2}, {3, 6}}, "reduction");
}

TEST_CASE("shape inference: shape_math values need the input shapes (core::specialize)", "[core][shape]") {
  expect_error(L("shape_math", {{"op", std::string("shape")}}), {{2, 5}}, "op");
}

TEST_CASE("shape inference: max_pool_indices is a max pool's shape, loop stacks its scan outputs", "[core][shape]") {
  auto indices = L("max_pool_indices", {{"kernel", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}}});
  CHECK(infer(indices, {{1, 4, 9, 9}}) == Shapes{{1, 4, 4, 4}});
  indices.params["storage_order"] = int64_t{2};
  expect_error(indices, {{1, 4, 9, 9}}, "storage_order");
  indices.params["storage_order"] = int64_t{0};
  expect_error(indices, {{1, 64, 1024, 1024}}, "input");  // indices beyond 2^24

  core::Graph body;  // [i, cond, x [2], w [2]] -> [cond, x + w, x + w again (stacked)]
  body.inputs = {{"i", Shape{}}, {"cond", Shape{}}, {"x", Shape{2}}, {"w", Shape{2}}};
  Layer c = L("identity"), add = L("add"), again = L("identity");
  c.name = "c", c.inputs = {"cond"}, c.outputs = {"cond_out"};
  add.name = "add", add.inputs = {"x", "w"}, add.outputs = {"x_out"};
  again.name = "again", again.inputs = {"x_out"}, again.outputs = {"scan"};
  body.layers = {c, add, again};
  body.outputs = {"cond_out", "x_out", "scan"};
  const auto bytes = core::serialize_dnn(body);
  Blob b = Blob::allocate(Shape{static_cast<int64_t>(bytes.size())}, DType::uint8);
  std::copy(bytes.begin(), bytes.end(), b.data_as<unsigned char>());
  Layer loop = L("loop", {{"carried", int64_t{1}}, {"scan_outputs", int64_t{1}}, {"trip_count", int64_t{5}}});
  loop.weights["body"] = b;
  loop.outputs = {"y", "scans"};
  CHECK(infer(loop, {{1}, {2}, {2}}) == Shapes{{2}, {5, 2}});
  expect_error(loop, {{1}, {3}, {2}}, "body");  // x [3] + w [2]: an error in the body, named as the loop's
  loop.params["trip_count"] = int64_t{-1};
  expect_error(loop, {{1}, {2}, {2}}, "trip_count");  // scan outputs need the trip count when planned
  loop.weights["body"] = core::float_blob(Shape{4}, {1, 2, 3, 4});
  expect_error(loop, {{1}, {2}, {2}}, "body");  // not the bytes of a graph
}

TEST_CASE("shape inference: deform_conv is conv2's, its offset and mask one per tap and offset group", "[core][shape]") {
  Layer l = L("deform_conv", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"offset_group", int64_t{2}}},
              {{"weight", Blob::allocate(Shape{6, 4, 3, 3})}});
  l.inputs = {"x", "offset", "mask"};
  CHECK(infer(l, {{1, 4, 5, 7}, {1, 36, 5, 7}, {1, 18, 5, 7}}) == Shapes{{1, 6, 5, 7}});
  CHECK(infer(l, {{1, 4, 5, 7}, {1, 36, 5, 7}}) == Shapes{{1, 6, 5, 7}});
  expect_error(l, {{1, 4, 5, 7}, {1, 18, 5, 7}}, "offset");
  expect_error(l, {{1, 4, 5, 7}, {1, 36, 5, 7}, {1, 9, 5, 7}}, "mask");
  l.params["offset_group"] = int64_t{3};
  expect_error(l, {{1, 4, 5, 7}, {1, 54, 5, 7}}, "offset_group");
}

TEST_CASE("shape inference: linear_attention's output and state, which inputs its rule reads", "[core][shape]") {
  Layer l = L("linear_attention", {{"q_num_heads", int64_t{4}}, {"kv_num_heads", int64_t{2}}, {"update_rule", std::string("gated_delta")},
                                   {"has_past", int64_t{1}}}, {});
  l.inputs = {"q", "k", "v", "past", "decay", "beta"};
  l.outputs = {"y", "state"};
  const Shapes good{{2, 5, 12}, {2, 5, 6}, {2, 5, 4}, {2, 2, 3, 2}, {2, 5, 6}, {2, 5, 1}};
  CHECK(infer(l, good) == Shapes{{2, 5, 8}, {2, 2, 3, 2}});
  auto with = [&](std::size_t i, Shape s) {
    Shapes v = good;
    v[i] = std::move(s);
    return v;
  };
  expect_error(l, with(1, {2, 5, 4}), "key");            // not kv_num_heads * dk
  expect_error(l, with(2, {2, 4, 4}), "value");          // another token count
  expect_error(l, with(3, {2, 2, 3, 3}), "past_state");
  expect_error(l, with(4, {2, 5, 3}), "decay");          // neither per head (2) nor per key (6)
  expect_error(l, with(5, {2, 5, 3}), "beta");
  expect_error(l, Shapes{good[0], good[1], good[2]}, "inputs");  // the rule's decay and beta missing
  l.params["q_num_heads"] = int64_t{3};
  expect_error(l, good, "q_num_heads");  // not a multiple of the key/value heads
  l.params["q_num_heads"] = int64_t{4};
  l.params["update_rule"] = std::string("softmax");
  expect_error(l, good, "update_rule");
}

TEST_CASE("shape inference: loops nested without end in a hostile file are an error, not a stack overflow", "[core][shape][hostile]") {
  // Each body: [i, cond, x] -> [cond, x after the inner loop]; the innermost an identity.
  auto graph_bytes = [](const core::Graph& g) {
    const auto bytes = core::serialize_dnn(g);
    Blob b = Blob::allocate(Shape{static_cast<int64_t>(bytes.size())}, DType::uint8);
    std::copy(bytes.begin(), bytes.end(), b.data_as<unsigned char>());
    return b;
  };
  core::Graph body;
  body.inputs = {{"i", Shape{}}, {"cond", Shape{}}, {"x", Shape{2}}};
  Layer c = L("identity"), id = L("identity");
  c.name = "c", c.inputs = {"cond"}, c.outputs = {"cond_out"};
  id.name = "id", id.inputs = {"x"}, id.outputs = {"x_out"};
  body.layers = {c, id};
  body.outputs = {"cond_out", "x_out"};
  Layer loop = L("loop", {{"carried", int64_t{1}}, {"trip_count", int64_t{2}}});
  loop.inputs = {"cond", "x"};
  loop.outputs = {"x_out"};
  for (int depth = 1; depth <= 40; ++depth) {
    loop.weights["body"] = graph_bytes(body);
    if (depth == 3) CHECK(infer(loop, {{1}, {2}}) == Shapes{{2}});
    body.layers = {c, loop};
  }
  expect_error(loop, {{1}, {2}}, "body");
  try {
    infer(loop, {{1}, {2}});
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Catch::Contains("nested more than 16 deep"));
  }
}

// A layer type added to layer_types.cpp needs its cases above, then its name here.
TEST_CASE("shape inference: every layer type is covered", "[core][shape]") {
  const std::set<std::string> tested = {
      "conv2", "dense", "matmul", "pool2", "batchnorm", "relu", "clip", "hardswish", "hardsigmoid",
      "sigmoid", "tanh", "gelu", "softmax", "layernorm", "rms_norm", "rotary", "attention", "add", "sub", "mul", "div", "max", "min", "concat",
      "split", "reshape", "flatten", "transpose", "pad", "identity", "constant", "wgenc", "wgconv", "wgdec",
      "wgencb", "wgconvb", "wgdecb", "resize", "deconv2", "abs", "neg", "sqrt", "exp", "log", "erf",
      "reciprocal", "silu", "mish", "softplus", "leaky_relu", "prelu", "pow", "reduce", "lstm", "gru", "rnn", "group_norm", "fake_quant", "dynamic_quantize", "dynamic_quant_dense",
      "shape_math", "compare", "logical", "where", "round", "cast", "einsum", "arg_reduce", "trig", "take", "gather", "gather_elements", "gather_nd", "divmod", "bitwise", "cumulative", "top_k", "grid_sample",
      "non_max_suppression", "non_zero", "roi_align", "choose", "branch", "slice", "scatter_elements", "scatter_nd", "unique", "dft", "col2im", "loop", "max_pool_indices", "deform_conv", "linear_attention"};
  for (const auto& t : core::layer_types()) {
    if (t.name.starts_with("test_")) continue;  // registered by test_basics.cpp
    INFO(t.name);
    CHECK(tested.count(std::string(t.name)) == 1);
  }
}
