// TensorFlow Lite's integer arithmetic (core/fixed_point.hpp and the layers
// marked requantize = tflite): values worked out by hand from gemmlowp's and
// XNNPACK's definitions, at the ties where rounding the real value (half to
// even, as fake_quant does) gives another integer. python/tests/test_tflite_int8.py
// checks whole files against the interpreter itself.
#include "core/cpu_features.hpp"
#include "core/fixed_point.hpp"
#include "core/layer_types.hpp"
#include "support/run_layer.hpp"

#include <catch2/catch.hpp>

using namespace softneuro;
using namespace softneuro::test;

namespace {
/// The routines to check: cpu/ref, and cpu/vec where this CPU (or its ISA cap) runs it.
std::vector<const char*> ref_and_vec() {
  if (core::cpu_features().avx2_fma() || core::cpu_features().neon) return {"cpu/ref", "cpu/vec"};
  return {"cpu/ref"};
}
}  // namespace

TEST_CASE("TFLite's fixed-point multipliers: QuantizeMultiplier and its double rounding", "[fixed_point]") {
  using core::fixed_point_multiplier;
  using core::multiply;
  CHECK(fixed_point_multiplier(0.5).significand == (1 << 30));
  CHECK(fixed_point_multiplier(0.5).exponent == 0);
  CHECK(fixed_point_multiplier(1.0).exponent == 1);
  CHECK(fixed_point_multiplier(0.75).significand == 3 << 29);
  CHECK(fixed_point_multiplier(0.0).significand == 0);
  CHECK(fixed_point_multiplier(1e-12).significand == 0);  // below 2^-32: zero
  const auto half = fixed_point_multiplier(0.5), quarter = fixed_point_multiplier(0.25);
  CHECK(multiply(5, half) == 3);     // 2.5: half away from zero
  CHECK(multiply(-5, half) == -2);   // -2.5: the nudge rounds toward +inf here
  CHECK(multiply(-3, half) == -1);   // -1.5
  CHECK(multiply(5, quarter) == 2);  // 1.25: rounded twice (2.5 -> 3, then 1.5 -> 2)
  CHECK(multiply(-5, quarter) == -1);
  CHECK(multiply(100, fixed_point_multiplier(0.3)) == 30);
  CHECK(multiply(7, fixed_point_multiplier(3.0)) == 21);  // a positive exponent shifts left first
  CHECK(core::fixed_point_in_range(1e9));
  CHECK_FALSE(core::fixed_point_in_range(1e10));
  CHECK_FALSE(core::fixed_point_in_range(0.0));
}

TEST_CASE("fake_quant requantize = tflite maps integers through the multiplier, in cpu/ref and cpu/vec", "[fixed_point]") {
  // input grid 0.5, output grid 1 (int8, zero point 0): levels 5, -3, -5, 3 times 0.5.
  const Layer l = make_layer("fake_quant", {{"scale", 1.0}, {"zero_point", int64_t{0}}, {"qmin", int64_t{-128}},
                                            {"qmax", int64_t{127}}, {"requantize", std::string("tflite")},
                                            {"input_scale", 0.5}});
  const Blob x = make_blob(Shape{4}, {2.5f, -1.5f, -2.5f, 1.5f});
  for (const char* d : ref_and_vec()) {
    INFO(d);
    CHECK(values(run_layer(l, {x}, d)[0]) == std::vector<float>{3, -1, -2, 2});  // rounding the reals: 2, -2, -2, 2
  }
  Layer far = l;
  far.params["input_scale"] = 1e10;  // a multiplier of 1e10 does not fit the fixed-point form
  CHECK_THROWS_WITH(run_layer(far, {x}), Catch::Contains("input_scale"));
}

TEST_CASE("prelu requantize = tflite is TFLite's integer PRELU in cpu/ref and cpu/vec", "[fixed_point]") {
  // input grid 0.5, alpha grid 0.25 (slope 1.0: 4 steps), output grid 1 (int8, zero point 0):
  // x = 2.5 (5 steps) -> 5 * 0.5 = 2.5 -> 3; x = -2.5 (-5 steps) -> -5 * 4 * 0.125 = -2.5 -> -3;
  // x = -1 (-2 steps) -> -1; the reals rounded half to even: 2, -2, -1.
  const Layer l = make_layer("prelu", {{"requantize", std::string("tflite")}, {"input_scale", 0.5}, {"alpha_scale", 0.25},
                                       {"output_scale", 1.0}, {"output_zero_point", int64_t{0}}},
                             {{"slope", make_blob(Shape{1}, {1.0f})}});
  const Blob x = make_blob(Shape{1, 1, 1, 3}, {2.5f, -2.5f, -1.0f});
  for (const char* d : ref_and_vec()) {
    INFO(d);
    CHECK(values(run_layer(l, {x}, d)[0]) == std::vector<float>{3, -3, -1});
  }
  // Routines that compute it in float refuse it.
  CHECK_THROWS_WITH(run_layer(l, {x}, "cpu/onednn"), Catch::Contains("fixed-point"));
}

TEST_CASE("add requantize = tflite is XNNPACK's int8 add in cpu/ref, float adds refuse it", "[fixed_point]") {
  // both inputs on grid 0.5, output grid 1: multipliers 2^20, shift 21, rounding half up.
  const Layer l = make_layer("add", {{"requantize", std::string("tflite")}, {"input_scales", std::vector<double>{0.5, 0.5}},
                                     {"output_scale", 1.0}, {"output_zero_point", int64_t{0}}}, {}, 2);
  const Blob a = make_blob(Shape{3}, {1.5f, -1.5f, -0.5f}), b = make_blob(Shape{3}, {1.0f, -1.0f, -1.0f});
  CHECK(values(run_layer(l, {a, b})[0]) == std::vector<float>{3, -2, -1});  // 2.5, -2.5, -1.5; half to even: 2, -2, -2
  CHECK_THROWS_WITH(run_layer(l, {a, b}, "cpu/onednn"), Catch::Contains("fixed-point"));
  Layer out_of_range = l;
  out_of_range.params["output_scale"] = 1e-6;  // ratios of 5e5: outside XNNPACK's [2^-10, 2^8)
  CHECK_THROWS_WITH(run_layer(out_of_range, {a, b}), Catch::Contains("input_scales"));
}

TEST_CASE("resize requantize = tflite blends integers with XNNPACK's 11-bit weights in cpu/ref", "[fixed_point]") {
  // asymmetric (TFLite's legacy mode) 1x2 -> 1x4 on grid 1: columns 0, 0.5, 1, 1.5 of the input.
  const Layer l = make_layer("resize", {{"sizes", std::vector<int64_t>{1, 1, 1, 4}}, {"mode", std::string("linear")},
                                        {"coordinate_transformation_mode", std::string("asymmetric")},
                                        {"requantize", std::string("tflite")}, {"scale", 1.0}});
  CHECK(values(run_layer(l, {make_blob(Shape{1, 1, 1, 2}, {0, 1})})[0]) == std::vector<float>{0, 1, 1, 1});  // 0.5 -> 1
  CHECK(values(run_layer(l, {make_blob(Shape{1, 1, 1, 2}, {2, 3})})[0]) == std::vector<float>{2, 3, 3, 3});  // 2.5 -> 3
  const auto half = core::tflite_resize_axis(
      make_layer("resize", {{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("half_pixel")}}), 2, 4);
  CHECK(half.lo == std::vector<int64_t>{0, 0, 0, 1});
  CHECK(half.hi == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(half.weight == std::vector<int32_t>{0, 512, 1536, 0});
  CHECK_THROWS_WITH(run_layer(l, {make_blob(Shape{1, 1, 1, 2}, {0, 1})}, "cpu/resample"), Catch::Contains("11-bit"));
}
