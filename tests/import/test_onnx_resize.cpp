// ONNX Resize into the resize layer: scales or sizes, roi for tf_crop_and_resize,
// opsets 11 and 13; values from ONNX Runtime 1.32 (see tests/routines/test_resample.cpp).
#include "import/onnx_test_util.hpp"

#include <catch2/catch.hpp>

#include <limits>

using namespace softneuro;
using namespace softneuro::test;

namespace {
const std::vector<float> kX = {1.6f, 0.625f, 0.1f, 0.025f, 0.40000001f, 1.225f, 2.5f, 4.2249999f, 6.4000001f, 9.0249996f, 12.1f, 15.625f};
}

TEST_CASE("Resize: scales (opset 11, empty roi) and sizes (opset 13) import and match ONNX Runtime", "[onnx][resize]") {
  {
    OnnxModel m(11);
    m.input("x", {1, 1, 3, 4}).output("y");
    m.init("roi", {0}, {}).init("scales", {4}, {1, 1, 2, 2});
    m.node("Resize", {"x", "roi", "scales"}, {"y"}).s("mode", "nearest").s("coordinate_transformation_mode", "asymmetric").s("nearest_mode", "floor");
    Output y = run_model(m, "resize_nearest.onnx", Shape{1, 1, 3, 4}, kX);
    CHECK(y.shape == Shape{1, 1, 6, 8});
    const std::vector<float> want = {1.6f, 1.6f, 0.625f, 0.625f, 0.1f, 0.1f, 0.025f, 0.025f, 1.6f, 1.6f, 0.625f, 0.625f, 0.1f, 0.1f, 0.025f, 0.025f, 0.40000001f, 0.40000001f, 1.225f, 1.225f, 2.5f, 2.5f, 4.2249999f, 4.2249999f, 0.40000001f, 0.40000001f, 1.225f, 1.225f, 2.5f, 2.5f, 4.2249999f, 4.2249999f, 6.4000001f, 6.4000001f, 9.0249996f, 9.0249996f, 12.1f, 12.1f, 15.625f, 15.625f, 6.4000001f, 6.4000001f, 9.0249996f, 9.0249996f, 12.1f, 12.1f, 15.625f, 15.625f};
    CHECK(max_abs_diff(y.values, want) < 1e-6);
  }
  {
    OnnxModel m(13);
    m.input("x", {1, 1, 3, 4}).output("y");
    m.init_ints("sizes", {4}, {1, 1, 4, 7});
    m.node("Resize", {"x", "", "", "sizes"}, {"y"}).s("mode", "linear").s("coordinate_transformation_mode", "align_corners");
    Output y = run_model(m, "resize_linear.onnx", Shape{1, 1, 3, 4}, kX);
    CHECK(y.shape == Shape{1, 1, 4, 7});
    const std::vector<float> want = {1.6f, 1.1125f, 0.625f, 0.36250001f, 0.1f, 0.0625f, 0.025f, 0.79999995f, 0.91250002f, 1.0250001f, 1.3625001f, 1.7f, 2.2625f, 2.8249998f, 2.4000003f, 3.1125002f, 3.8250003f, 4.7625003f, 5.7000003f, 6.8625002f, 8.0250006f, 6.4000001f, 7.7124996f, 9.0249996f, 10.5625f, 12.1f, 13.8625f, 15.625f};
    CHECK(max_abs_diff(y.values, want) < 1e-5);
  }
  {
    OnnxModel m(13);
    m.input("x", {1, 1, 3, 4}).output("y");
    m.init("roi", {8}, {0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f}).init_ints("sizes", {4}, {1, 1, 4, 5});
    m.node("Resize", {"x", "roi", "", "sizes"}, {"y"}).s("mode", "linear").s("coordinate_transformation_mode", "tf_crop_and_resize").f("extrapolation_value", 7.5f);
    Output y = run_model(m, "resize_crop.onnx", Shape{1, 1, 3, 4}, kX);
    const std::vector<float> want = {7.5f, 7.5f, 7.5f, 7.5f, 7.5f, 1.0875f, 0.84000003f, 0.95249999f, 1.4249998f, 7.5f, 1.0835004f, 2.0240006f, 3.3245006f, 4.9850001f, 7.5f, 5.8795004f, 8.0080004f, 10.496501f, 13.345f, 7.5f};
    CHECK(max_abs_diff(y.values, want) < 1e-5);
  }
}

TEST_CASE("Resize: align_corners with scales maps through in * scale, not the rounded output size", "[onnx][resize]") {
  // ONNX's test_resize_downsample_scales_linear_align_corners: [1,1,2,4] scaled
  // by 0.6 is [1,1,1,2]; its second pixel samples 1 * 3 / (2.4 - 1) = 2.142857
  // (the rounded size's 3 / (2 - 1) gave the last pixel, 4).
  OnnxModel m(13);
  m.input("x", {1, 1, 2, 4}).output("y");
  m.init("scales", {4}, {1, 1, 0.6f, 0.6f});
  m.node("Resize", {"x", "", "scales"}, {"y"}).s("mode", "linear").s("coordinate_transformation_mode", "align_corners");
  Output y = run_model(m, "resize_align_scales.onnx", Shape{1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(y.shape == Shape{1, 1, 1, 2});
  CHECK(max_abs_diff(y.values, {1.0f, 3.142857f}) < 1e-5);
}

TEST_CASE("Resize: crop boxes beyond any index and NaN read the extrapolation value or the edge", "[onnx][resize]") {
  // Fuzzing found it (fuzz/regressions/onnx_import/resize-roi-beyond-int64):
  // a source coordinate of 3e38 converted to an index (undefined behaviour).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const char* mode : {"nearest", "linear"}) {
    OnnxModel m(13);
    m.input("x", {1, 1, 3, 4}).output("y");
    m.init("roi", {8}, {0, 0, -0.2f, nan, 1, 1, 3e38f, 1.3f}).init_ints("sizes", {4}, {1, 1, 4, 5});
    m.node("Resize", {"x", "roi", "", "sizes"}, {"y"}).s("mode", mode).s("coordinate_transformation_mode", "tf_crop_and_resize").f("extrapolation_value", 7.5f);
    Output y = run_model(m, "resize_crop_huge.onnx", Shape{1, 1, 3, 4}, kX);
    // Every row's source lies outside the input (below 0, or beyond it).
    for (float v : y.values) CHECK(v == 7.5f);
  }
  {
    // NaN source coordinates (a NaN scale between roi bounds) read index 0.
    OnnxModel m(13);
    m.input("x", {1, 1, 3, 4}).output("y");
    m.init("roi", {8}, {0, 0, nan, 0, 1, 1, 1, 1}).init_ints("sizes", {4}, {1, 1, 4, 5});
    m.node("Resize", {"x", "roi", "", "sizes"}, {"y"}).s("mode", "nearest").s("coordinate_transformation_mode", "tf_crop_and_resize");
    Output y = run_model(m, "resize_crop_nan.onnx", Shape{1, 1, 3, 4}, kX);
    CHECK(y.values.size() == 20);
  }
}

TEST_CASE("Resize: what it cannot import is named in the unsupported-node error", "[onnx][resize]") {
  OnnxModel m(13);
  m.input("x", {1, 1, 3, 4}).output("y");
  m.init("scales", {4}, {1, 1, 2, 2});
  m.node("Resize", {"x", "", "scales"}, {"y"}, "up").s("mode", "linear").i("exclude_outside", 1);
  CHECK_THROWS_WITH(import_onnx(m.save("resize_exclude_outside.onnx")), Catch::Contains("'up'") && Catch::Contains("exclude_outside"));
}

TEST_CASE("Resize with antialias: downsampling stretches the kernel over in/out taps, weights normalised", "[onnx][resize]") {
  // Width 4 -> 2, half_pixel: source 0.5 and 2.5; the triangle stretched to
  // (-2, 2) weighs the 4 nearest taps 1/8, 3/8, 3/8, 1/8 (the edge repeats).
  OnnxModel m(18);
  m.input("x", {1, 1, 1, 4}).output("y").output("z");
  m.init_ints("sizes", {4}, {1, 1, 1, 2});
  m.node("Resize", {"x", "", "", "sizes"}, {"y"}).s("mode", "linear").i("antialias", 1);
  m.node("Resize", {"x", "", "", "sizes"}, {"z"}).s("mode", "linear").i("antialias", 1).i("exclude_outside", 1);
  Model net = import_onnx(m.save("resize_antialias.onnx"));
  auto out = run_net(net, {{"x", make_input(Shape{1, 1, 1, 4}, {1, 2, 3, 4})}});
  CHECK(max_abs_diff(out[0].values, {0.125f * 1 + 0.375f * 1 + 0.375f * 2 + 0.125f * 3, 0.125f * 2 + 0.375f * 3 + 0.375f * 4 + 0.125f * 4}) < 1e-6);
  // Taps outside the input weigh 0, the others renormalised: (3/8, 3/8, 1/8) / (7/8).
  CHECK(max_abs_diff(out[1].values, {(0.375f * 1 + 0.375f * 2 + 0.125f * 3) / 0.875f, (0.125f * 2 + 0.375f * 3 + 0.375f * 4) / 0.875f}) < 1e-6);
  for (const auto& l : Session(net).layers()) CHECK(l.descriptor == "cpu/ref");  // no other routine antialiases
}
