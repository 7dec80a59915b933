// cpu/tile_dense and cpu:bfloat16/tile_dense (AMX-INT8): the arithmetic they
// define (each row quantised symmetrically to int8 at run time, int8 weights
// per channel, exact int32 sums), rows of zeros and NaN, and what reduced
// precision means for the untuned default.
#include "core/cpu_features.hpp"
#include "core/registry.hpp"
#include "core/layer_types.hpp"
#include "core/weight_quant.hpp"
#include "routines/f32_check.hpp"
#include "routines/row_int8_check.hpp"
#include "support/run_layer.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace softneuro;
using test::f32::random_blob;

namespace {

bool amx() {
  const core::CpuFeatures& f = core::cpu_features();
  return f.amx_int8 && f.amx_bf16 && f.avx512_bf16 && core::amx_tiles_permitted();
}

Layer dense(const Blob& w, const Blob* bias, const std::string& act = "none") {
  std::map<std::string, Blob> weights{{"weight", w}};
  if (bias) weights["bias"] = *bias;
  return test::make_layer("dense", {{"act", act}}, weights);
}

using test::f32::bf16_round;

/// Each row on its own grid of max |x| / 127, the weights per channel on int8, the sums exact.
std::vector<double> expected(const Blob& x, const Blob& w, const Blob* bias, int64_t m, int64_t k, int64_t n) {
  return test::row_int8_dense(x, w, bias, m, k, n, 127.0f);
}

/// `descriptor`'s routine for layer `l` on input `x` (its info and schema set), which supports it.
const Routine& supporting(const Layer& l, const Blob& x, const char* descriptor, LayerInfo& info, Schema& schema) {
  info.layer = &l;
  info.input_shapes = {x.shape()};
  info.output_shapes = core::infer_layer_shapes(l, info.input_shapes);
  const Routine* r = core::RoutineRegistry::instance().find(l.type, descriptor, &schema);
  REQUIRE(r);
  REQUIRE(r->supports(info, schema));
  return *r;
}

/// The layer on `descriptor`'s prepared routine; bfloat16 schemas get x rounded
/// to bfloat16 and give their outputs back as float32.
std::vector<float> run(const Layer& l, const Blob& x, const char* descriptor) {
  LayerInfo info;
  Schema schema;
  const Routine* r = &supporting(l, x, descriptor, info, schema);
  auto prepared = r->prepare(info, schema, {});
  if (schema.dtype != DType::bfloat16) return test::values(test::run_prepared(*prepared, {x}, info.output_shapes, schema)[0]);
  Blob h = Blob::allocate(x.shape(), DType::bfloat16);
  for (int64_t i = 0; i < x.shape().numel(); ++i) {
    const float v = bf16_round(x.data_as<float>()[i]);
    uint32_t u;
    std::memcpy(&u, &v, 4);
    h.data_as<uint16_t>()[i] = static_cast<uint16_t>(std::isnan(v) ? 0x7fc0u : u >> 16);
  }
  const Blob y = test::run_prepared(*prepared, {h}, info.output_shapes, schema)[0];
  std::vector<float> out(static_cast<std::size_t>(y.shape().numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const uint32_t u = static_cast<uint32_t>(y.data_as<uint16_t>()[i]) << 16;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

}  // namespace

TEST_CASE("tile_dense computes dense as its int8 arithmetic defines, in float32 and bfloat16", "[routines][tile_dense]") {
  if (!amx()) return;  // says unsupported there (test_every_routine)
  std::mt19937 rng(11);
  struct Dims {
    int64_t m, k, n;
  };
  for (Dims d : {Dims{1, 1, 1}, Dims{1, 768, 50}, Dims{5, 129, 17}, Dims{17, 300, 40}, Dims{33, 64, 32},
                 Dims{70, 200, 97}}) {
    for (bool with_bias : {false, true}) {
      INFO("m " << d.m << " k " << d.k << " n " << d.n << (with_bias ? " with bias" : ""));
      Blob x = random_blob({d.m, d.k}, rng, -2.f, 3.f);
      for (int64_t i = 0; i < x.shape().numel(); ++i) x.data_as<float>()[i] = bf16_round(x.data_as<float>()[i]);
      const Blob w = random_blob({d.n, d.k}, rng, -0.5f, 0.5f);
      const Blob b = random_blob({d.n}, rng);
      const Layer l = dense(w, with_bias ? &b : nullptr);
      const auto want = expected(x, w, with_bias ? &b : nullptr, d.m, d.k, d.n);
      const auto exact = test::values(test::run_layer(l, {x}, "cpu/ref")[0]);
      const auto f32 = run(l, x, "cpu/tile_dense");
      const auto bf16 = run(l, x, "cpu:bfloat16/tile_dense");
      REQUIRE(f32.size() == want.size());
      REQUIRE(bf16.size() == want.size());
      double scale = 0, err = 0, err_bf16 = 0, err_float = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::fabs(want[i]));
        err = std::max(err, std::fabs(f32[i] - want[i]));
        err_bf16 = std::max(err_bf16, std::fabs(bf16[i] - want[i]) / std::max(1.0, std::fabs(want[i])));
        err_float = std::max(err_float, std::fabs(static_cast<double>(f32[i]) - exact[i]));
      }
      CHECK(err <= 1e-5 * scale + 1e-6);   // the int8 arithmetic, to float32 rounding
      CHECK(err_bf16 <= 1.0 / 128);        // the same, rounded to bfloat16
      CHECK(err_float <= 2e-2 * scale + 1e-5);  // and within a percent or two of float32
    }
  }
  SECTION("a fused gelu, a row of zeros, and a row holding NaN") {
    const Blob w = random_blob({20, 40}, rng, -0.5f, 0.5f);
    const Blob b = random_blob({20}, rng);
    Blob x = random_blob({3, 40}, rng);
    for (int64_t i = 0; i < 40; ++i) x.data_as<float>()[40 + i] = 0;
    for (const char* d : {"cpu/tile_dense", "cpu:bfloat16/tile_dense"}) {
      INFO(d);
      const Layer gelu = dense(w, &b, "gelu");
      const auto got = run(gelu, x, d);
      const auto ref = test::values(test::run_layer(gelu, {x}, "cpu/ref")[0]);
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - ref[i]) <= 3e-2 * (1 + std::fabs(ref[i])));
      for (int j = 0; j < 20; ++j) CHECK(got[static_cast<std::size_t>(20 + j)] == Approx(ref[static_cast<std::size_t>(20 + j)]).epsilon(1e-2));  // the bias alone
      Blob nan = x.clone();
      nan.data_as<float>()[5] = std::numeric_limits<float>::quiet_NaN();
      const auto with_nan = run(dense(w, nullptr), nan, d);
      for (int j = 0; j < 20; ++j) CHECK(std::isnan(with_nan[static_cast<std::size_t>(j)]));  // as float32 has it
      for (int j = 40; j < 60; ++j) CHECK(std::isfinite(with_nan[static_cast<std::size_t>(j)]));
    }
  }
}

TEST_CASE("tile_dense is reduced precision: a candidate only where qint8 is allowed", "[routines][tile_dense]") {
  auto& registry = core::RoutineRegistry::instance();
  Schema schema;
  if (!registry.find("dense", "cpu/tile_dense", &schema)) return;  // not built (x86-64 only)
  CHECK(registry.precision("cpu/tile_dense") == DType::qint8);
  CHECK(registry.precision("cpu:bfloat16/tile_dense") == DType::qint8);
}

// split (the pointwise form): the threads take panels of output channels, or
// strips of pixels reading every panel; the values must not depend on it.
TEST_CASE("tile_dense on a pointwise convolution gives the same values whichever way its threads split", "[routines][tile_dense]") {
  if (!amx()) return;
  std::mt19937 rng(12);
  const int64_t c = 40, oc = 97, h = 3, w = 37;  // 111 pixels: three strips of 32 and a part
  Blob x = random_blob({1, c, h, w}, rng, -2.f, 3.f);
  for (int64_t i = 0; i < x.shape().numel(); ++i) x.data_as<float>()[i] = bf16_round(x.data_as<float>()[i]);
  const Layer l = test::make_layer("conv2", {{"act", std::string("relu")}},
                                   {{"weight", random_blob({oc, c, 1, 1}, rng, -0.5f, 0.5f)}, {"bias", random_blob({oc}, rng)}});
  LayerInfo info;
  Schema schema;
  const Routine* r = &supporting(l, x, "cpu:float32:nhwc/tile_dense", info, schema);
  const auto space = r->param_space(info, schema);
  REQUIRE(space.size() == 1);
  CHECK(space[0].name == "split");
  const auto want = test::values(test::run_layer(l, {x}, "cpu/ref")[0]);
  std::vector<std::vector<float>> got;
  for (int64_t split : {0, 1}) {
    auto prepared = r->prepare(info, schema, {{"split", split}});
    const Blob y = test::run_prepared(*prepared, {test::to_layout(x, Layout::nhwc)}, info.output_shapes, schema)[0];
    got.push_back(test::values(test::to_plain(y)));
  }
  REQUIRE(got[0].size() == want.size());
  CHECK(got[0] == got[1]);
  double scale = 0, err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    err = std::max(err, std::fabs(static_cast<double>(got[1][i]) - want[i]));
  }
  CHECK(err <= 2e-2 * scale + 1e-5);  // int8 products: within a percent or two of float32
}

TEST_CASE("tile_dense: rows holding NaN or infinity come out as float32 has them, the others as the tiles compute them",
          "[routines][tile_dense]") {
  if (!amx()) return;
  std::mt19937 rng(12);
  // 768 -> 3072 (BERT's intermediate dense): rows holding NaN were computed by every product of every row, one thread.
  const int64_t k = 768, n = 3072;
  const test::NonFiniteCase c = test::non_finite_case(k, n, rng);
  const Blob b = random_blob({n}, rng);
  const Layer l = dense(c.w, &b);
  const auto ref = test::values(test::run_layer(l, {c.x}, "cpu/ref")[0]);
  // The finite rows alone (0, 2, 5), as the same routine computes them without the others.
  Blob finite = Blob::allocate(Shape{3, k}, DType::float32);
  for (int r : {0, 2, 5})
    std::memcpy(finite.data_as<float>() + (r == 0 ? 0 : r == 2 ? 1 : 2) * k, c.x.data_as<float>() + r * k, 4 * k);
  for (const char* d : {"cpu/tile_dense", "cpu:bfloat16/tile_dense"}) {
    INFO(d);
    const auto got = run(l, c.x, d);
    CHECK(test::same_non_finite(got, ref));
    for (int64_t o = 0; o < n; ++o) {
      CHECK(std::isnan(got[static_cast<std::size_t>(1 * n + o)]));
      CHECK(std::isinf(got[static_cast<std::size_t>(4 * n + o)]));
    }
    const auto alone = run(l, finite, d);
    int row = 0;
    for (int r : {0, 2, 5}) {
      for (int64_t o = 0; o < n; ++o)
        CHECK(got[static_cast<std::size_t>(r * n + o)] == alone[static_cast<std::size_t>(row * n + o)]);
      ++row;
    }
  }
}
