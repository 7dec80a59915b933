// resize: cpu/ref and cpu/resample against ONNX Runtime 1.32's Resize (values
// computed once with it, opset 18, on the input below), and against each other
// over many shapes and modes.
#include "core/layer_types.hpp"
#include "support/layout_convert.hpp"
#include "support/run_layer.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <random>

using namespace softneuro;
using namespace softneuro::test;

namespace {

struct OrtCase {
  const char* name;
  const char* mode;
  const char* transform;
  const char* rounding;
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  std::vector<double> roi;
  float extrapolation;
  Shape out;
  std::vector<float> expected;
};

// x = (arange(12) * 1.5 - 4)^2 / 10, shape [1,1,3,4]. (tf_crop_and_resize resizes
// both axes: ONNX Runtime copies an axis of scale 1 as it is, ignoring its roi,
// where the ONNX formula, which we follow, crops it too.)
const std::vector<float> kX = {1.6f, 0.625f, 0.1f, 0.025f, 0.40000001f, 1.225f, 2.5f, 4.2249999f, 6.4000001f, 9.0249996f, 12.1f, 15.625f};

const std::vector<OrtCase> kCases = {
{"nearest_asym_floor_x2", "nearest", "asymmetric", "floor", {1,1,2,2}, {}, {}, 0.0f, Shape{1,1,6,8},
     {1.6f, 1.6f, 0.625f, 0.625f, 0.1f, 0.1f, 0.025f, 0.025f, 1.6f, 1.6f, 0.625f, 0.625f, 0.1f, 0.1f, 0.025f, 0.025f, 0.40000001f, 0.40000001f, 1.225f, 1.225f, 2.5f, 2.5f, 4.2249999f, 4.2249999f, 0.40000001f, 0.40000001f, 1.225f, 1.225f, 2.5f, 2.5f, 4.2249999f, 4.2249999f, 6.4000001f, 6.4000001f, 9.0249996f, 9.0249996f, 12.1f, 12.1f, 15.625f, 15.625f, 6.4000001f, 6.4000001f, 9.0249996f, 9.0249996f, 12.1f, 12.1f, 15.625f, 15.625f}},
    {"nearest_half_pixel_rpf", "nearest", "half_pixel", "round_prefer_floor", {1,1,1.5,0.75}, {}, {}, 0.0f, Shape{1,1,4,3},
     {1.6f, 0.625f, 0.025f, 1.6f, 0.625f, 0.025f, 0.40000001f, 1.225f, 4.2249999f, 6.4000001f, 9.0249996f, 15.625f}},
    {"nearest_align_rpc", "nearest", "align_corners", "round_prefer_ceil", {}, {1,1,5,7}, {}, 0.0f, Shape{1,1,5,7},
     {1.6f, 0.625f, 0.625f, 0.1f, 0.1f, 0.025f, 0.025f, 0.40000001f, 1.225f, 1.225f, 2.5f, 2.5f, 4.2249999f, 4.2249999f, 0.40000001f, 1.225f, 1.225f, 2.5f, 2.5f, 4.2249999f, 4.2249999f, 6.4000001f, 9.0249996f, 9.0249996f, 12.1f, 12.1f, 15.625f, 15.625f, 6.4000001f, 9.0249996f, 9.0249996f, 12.1f, 12.1f, 15.625f, 15.625f}},
    {"nearest_tfnn_ceil", "nearest", "tf_half_pixel_for_nn", "ceil", {1,1,2,1.5}, {}, {}, 0.0f, Shape{1,1,6,6},
     {1.225f, 1.225f, 2.5f, 4.2249999f, 4.2249999f, 4.2249999f, 1.225f, 1.225f, 2.5f, 4.2249999f, 4.2249999f, 4.2249999f, 9.0249996f, 9.0249996f, 12.1f, 15.625f, 15.625f, 15.625f, 9.0249996f, 9.0249996f, 12.1f, 15.625f, 15.625f, 15.625f, 9.0249996f, 9.0249996f, 12.1f, 15.625f, 15.625f, 15.625f, 9.0249996f, 9.0249996f, 12.1f, 15.625f, 15.625f, 15.625f}},
    {"linear_half_pixel", "linear", "half_pixel", "round_prefer_floor", {1,1,2,2}, {}, {}, 0.0f, Shape{1,1,6,8},
     {1.6f, 1.35625f, 0.86874998f, 0.49375001f, 0.23125f, 0.081250004f, 0.043750003f, 0.025f, 1.3000001f, 1.1687502f, 0.90625f, 0.75625002f, 0.71875f, 0.79375005f, 0.98124993f, 1.075f, 0.70000005f, 0.79375005f, 0.98125005f, 1.28125f, 1.69375f, 2.21875f, 2.8562498f, 3.1749997f, 1.9000001f, 2.21875f, 2.8562498f, 3.6062498f, 4.46875f, 5.4437504f, 6.53125f, 7.0749998f, 4.9000001f, 5.4437499f, 6.53125f, 7.7312503f, 9.0437498f, 10.46875f, 12.00625f, 12.775f, 6.4000001f, 7.0562506f, 8.3687496f, 9.7937498f, 11.331251f, 12.981251f, 14.74375f, 15.625f}},
    {"linear_align_sizes", "linear", "align_corners", "round_prefer_floor", {}, {1,1,4,7}, {}, 0.0f, Shape{1,1,4,7},
     {1.6f, 1.1125f, 0.625f, 0.36250001f, 0.1f, 0.0625f, 0.025f, 0.79999995f, 0.91250002f, 1.0250001f, 1.3625001f, 1.7f, 2.2625f, 2.8249998f, 2.4000003f, 3.1125002f, 3.8250003f, 4.7625003f, 5.7000003f, 6.8625002f, 8.0250006f, 6.4000001f, 7.7124996f, 9.0249996f, 10.5625f, 12.1f, 13.8625f, 15.625f}},
    {"linear_pytorch_down", "linear", "pytorch_half_pixel", "round_prefer_floor", {1,1,0.5,0.5}, {}, {}, 0.0f, Shape{1,1,1,2},
     {1.1125f, 0.0625f}},
    {"linear_asym", "linear", "asymmetric", "round_prefer_floor", {1,1,1.7,2.5}, {}, {}, 0.0f, Shape{1,1,5,10},
     {1.6f, 1.21f, 0.81999999f, 0.51999998f, 0.31f, 0.1f, 0.069999993f, 0.040000007f, 0.025f, 0.025f, 0.89411771f, 0.92764711f, 0.96117646f, 1.0847058f, 1.2982352f, 1.5117646f, 1.9052941f, 2.2988234f, 2.4955878f, 2.4955878f, 1.4588232f, 1.9158819f, 2.3729405f, 2.9199994f, 3.5570583f, 4.1941166f, 5.0111761f, 5.8282347f, 6.236764f, 6.236764f, 4.9882345f, 5.8688231f, 6.7494106f, 7.7199993f, 8.7805872f, 9.841176f, 11.081764f, 12.322351f, 12.942646f, 12.942646f, 6.4000001f, 7.4499998f, 8.5f, 9.6399994f, 10.870001f, 12.1f, 13.510001f, 14.92f, 15.625f, 15.625f}},
    {"linear_crop", "linear", "tf_crop_and_resize", "round_prefer_floor", {}, {1,1,4,5}, {0,0,-0.2,0.1,1,1,0.9,1.3}, 7.5f, Shape{1,1,4,5},
     {7.5f, 7.5f, 7.5f, 7.5f, 7.5f, 1.0875f, 0.84000003f, 0.95249999f, 1.4249998f, 7.5f, 1.0835004f, 2.0240006f, 3.3245006f, 4.9850001f, 7.5f, 5.8795004f, 8.0080004f, 10.496501f, 13.345f, 7.5f}},
    {"nearest_hps", "nearest", "half_pixel_symmetric", "round_prefer_floor", {1,1,1.6,2.3}, {}, {}, 0.0f, Shape{1,1,4,9},
     {1.6f, 1.6f, 0.625f, 0.625f, 0.625f, 0.1f, 0.1f, 0.025f, 0.025f, 0.40000001f, 0.40000001f, 1.225f, 1.225f, 1.225f, 2.5f, 2.5f, 4.2249999f, 4.2249999f, 0.40000001f, 0.40000001f, 1.225f, 1.225f, 1.225f, 2.5f, 2.5f, 4.2249999f, 4.2249999f, 6.4000001f, 6.4000001f, 9.0249996f, 9.0249996f, 9.0249996f, 12.1f, 12.1f, 15.625f, 15.625f}},
    {"linear_hps", "linear", "half_pixel_symmetric", "round_prefer_floor", {1,1,1.6,2.3}, {}, {}, 0.0f, Shape{1,1,4,9},
     {1.525f, 1.35625f, 0.98124999f, 0.63559783f, 0.45625004f, 0.2769022f, 0.26385877f, 0.28016314f, 0.28750008f, 0.77499998f, 0.82635868f, 0.94048917f, 1.0839673f, 1.39375f, 1.7035326f, 2.1796198f, 2.6850545f, 2.9124999f, 2.2750001f, 2.5464673f, 3.1497283f, 3.782337f, 4.5812502f, 5.3801632f, 6.3453808f, 7.3399458f, 7.7874999f, 6.0250001f, 6.5165763f, 7.6089673f, 8.7307062f, 10.01875f, 11.306793f, 12.761141f, 14.244838f, 14.9125f}},
};

Layer resize_layer(const std::string& mode, const std::string& transform, const std::string& rounding,
                   const std::vector<double>& scales, const std::vector<int64_t>& sizes,
                   const std::vector<double>& roi = {}, float extrapolation = 0) {
  std::map<std::string, Attr> p{{"mode", mode}, {"coordinate_transformation_mode", transform}, {"nearest_mode", rounding}};
  if (!sizes.empty()) p["sizes"] = sizes;
  else p["scales"] = scales;
  if (!roi.empty()) {
    p["roi"] = roi;
    p["extrapolation_value"] = double(extrapolation);
  }
  return make_layer("resize", p);
}

}  // namespace

TEST_CASE("resize: cpu/ref and cpu/resample match ONNX Runtime", "[resize]") {
  const Blob x = make_blob(Shape{1, 1, 3, 4}, kX);
  for (const auto& c : kCases)
    for (const char* descriptor : {"cpu/ref", "cpu/resample"}) {
      INFO(c.name << " " << descriptor);
      Layer l = resize_layer(c.mode, c.transform, c.rounding, c.scales, c.sizes, c.roi, c.extrapolation);
      auto y = run_layer(l, {x}, descriptor);
      REQUIRE(y[0].shape() == c.out);
      auto got = values(y[0]);
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(c.expected[i]).margin(1e-5));
    }
}

TEST_CASE("resize: cpu/resample matches cpu/ref over modes, scales and sizes", "[resize]") {
  std::mt19937 rng(3);
  const char* modes[] = {"nearest", "linear"};
  const char* transforms[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                               "asymmetric", "tf_half_pixel_for_nn"};
  const char* roundings[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  const std::vector<std::vector<double>> scales = {{1, 1, 2, 2}, {1, 1, 0.5, 0.5}, {1, 1, 1.3, 2.7}, {1, 1, 3, 1}, {1, 1, 0.34, 1.9}};
  for (const auto* mode : modes)
    for (const auto* t : transforms)
      for (const auto* r : roundings)
        for (const auto& s : scales) {
          const Shape in{2, 3, 7, 9};
          Blob x = iota_blob(in, 0.01f, -1.0f);
          INFO(mode << " " << t << " " << r << " scales " << s[2] << "," << s[3]);
          Layer l = resize_layer(mode, t, r, s, {});
          auto a = values(run_layer(l, {x}, "cpu/ref")[0]);
          auto b = values(run_layer(l, {x}, "cpu/resample")[0]);
          REQUIRE(a.size() == b.size());
          for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == Approx(a[i]).margin(1e-5));
        }
  // Sizes instead of scales, and bad parameters.
  Blob x = iota_blob(Shape{1, 2, 5, 6});
  auto y = run_layer(resize_layer("linear", "align_corners", "floor", {}, {1, 2, 11, 3}), {x}, "cpu/resample");
  CHECK(y[0].shape() == Shape{1, 2, 11, 3});
  CHECK_THROWS_WITH(run_layer(resize_layer("area", "half_pixel", "floor", {1, 1, 2, 2}, {}), {x}), Catch::Contains("area"));
  // cubic: cpu/ref computes it, cpu/resample says no rather than resampling linearly
  CHECK(run_layer(resize_layer("cubic", "half_pixel", "floor", {1, 1, 2, 2}, {}), {x}, "cpu/ref")[0].shape() == Shape{1, 2, 10, 12});
  CHECK_THROWS_WITH(run_layer(resize_layer("cubic", "half_pixel", "floor", {1, 1, 2, 2}, {}), {x}, "cpu/resample"), Catch::Contains("cubic"));
  CHECK_THROWS_WITH(run_layer(resize_layer("nearest", "sideways", "floor", {1, 1, 2, 2}, {}), {x}), Catch::Contains("sideways"));
  CHECK_THROWS_WITH(run_layer(resize_layer("nearest", "asymmetric", "floor", {1, 2, 2, 2}, {}), {x}), Catch::Contains("batch or channel"));
  CHECK_THROWS_WITH(run_layer(resize_layer("nearest", "asymmetric", "floor", {1, 1, 0.1, 2}, {}), {x}), Catch::Contains("empty"));
  CHECK_THROWS_WITH(run_layer(resize_layer("nearest", "asymmetric", "floor", {1, 1, -2, 2}, {}), {x}), Catch::Contains("positive"));
}

TEST_CASE("resize: the NHWC routines (cpu/resample's, XNNPACK's bilinear) match cpu/ref", "[resize][xnnpack]") {
  const char* modes[] = {"nearest", "linear"};
  const char* transforms[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                              "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  // Scales whose output is in*scale exactly, and some that are not (XNNPACK samples at in/out).
  const std::vector<std::vector<double>> scales = {{1, 1, 2, 2}, {1, 1, 0.5, 0.5}, {1, 1, 1.3, 2.7}, {1, 1, 3, 1}};
  const std::vector<std::vector<int64_t>> sizes = {{2, 3, 11, 4}, {2, 3, 1, 13}, {2, 3, 1, 1}};
  int xnnpack_ran = 0;
  // XNNPACK stays out where it cannot run (an ISA cap that takes an extension away).
  bool xnnpack_here = true;
  try {
    run_layer(resize_layer("linear", "half_pixel", "floor", {}, {1, 1, 4, 4}),
              {test::to_layout(iota_blob(Shape{1, 1, 2, 2}), Layout::nhwc)}, "cpu:float32:nhwc/xnnpack");
  } catch (const Error& e) {
    WARN("XNNPACK's resize does not run here: " << e.what());
    xnnpack_here = false;
  }
  auto check = [&](const Layer& l, const std::string& what, bool exact_scale) {
    const Blob x = iota_blob(Shape{2, 3, 7, 9}, 0.01f, -1.0f);
    const auto want = values(run_layer(l, {x}, "cpu/ref")[0]);
    const core::ResizeGeometry g = core::resize_geometry(l, x.shape(), run_layer(l, {x}, "cpu/ref")[0].shape());
    for (const char* descriptor : {"cpu:float32:nhwc/resample", "cpu:float32:nhwc/xnnpack"}) {
      INFO(what << " " << descriptor);
      const bool xnnpack = std::string(descriptor).ends_with("xnnpack");
      if (xnnpack && !xnnpack_here) continue;
      using T = core::ResizeAxis;
      const T::Transform t = g.h.transform;
      const bool xnnpack_samples = g.linear && t != T::tf_half_pixel_for_nn && t != T::tf_crop_and_resize &&
                                   exact_scale &&  // align_corners too: ONNX maps through in * scale
                                   !(t == T::pytorch_half_pixel && (g.h.out == 1 || g.w.out == 1));
      std::vector<float> got;
      try {
        got = values(test::to_plain(run_layer(l, {test::to_layout(x, Layout::nhwc)}, descriptor)[0]));
      } catch (const Error& e) {
        INFO(e.what());
        CHECK((xnnpack && !xnnpack_samples));
        continue;
      }
      CHECK((!xnnpack || xnnpack_samples));
      xnnpack_ran += xnnpack;
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).margin(1e-5));
    }
  };
  for (const auto* mode : modes)
    for (const auto* t : transforms) {
      const std::vector<double> roi = std::string(t) == "tf_crop_and_resize" ? std::vector<double>{0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3}
                                                                             : std::vector<double>{};
      for (const auto& s : scales) {
        const double h = 7 * s[2], w = 9 * s[3];
        check(resize_layer(mode, t, "round_prefer_floor", s, {}, roi, 2.5f),
              fmt::format("{} {} scales {},{}", mode, t, s[2], s[3]), h == std::floor(h) && w == std::floor(w));
      }
      for (const auto& z : sizes)
        check(resize_layer(mode, t, "round_prefer_ceil", {}, z, roi, 2.5f), fmt::format("{} {} sizes {}x{}", mode, t, z[2], z[3]), true);
    }
  if (xnnpack_here) CHECK(xnnpack_ran >= 20);
}
