// cpu/int8_attention: near float32 on an encoder's long attention, float32's
// NaN and infinity where the inputs hold them, and reduced precision (never a
// default). The generated cases (test_every_routine.cpp) check every form of
// the layer against cpu/ref within the qint8 tolerance.
#include "core/registry.hpp"
#include "routines/cpu/dynamic_int8_kernels.hpp"
#include "routines/f32_check.hpp"
#include "support/run_layer.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

using namespace softneuro;
using test::f32::random_blob;

namespace {

bool usable() {
#if defined(__x86_64__)
  return dynamic_int8::avx2_usable();
#else
  return false;  // cpu/int8_attention is built for x86 only
#endif
}

/// max |a - b| / max |b| and the cosine of the two.
std::pair<double, double> compare(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0, ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    ab += static_cast<double>(a[i]) * b[i], aa += static_cast<double>(a[i]) * a[i], bb += static_cast<double>(b[i]) * b[i];
  }
  return {err / scale, ab / std::sqrt(aa * bb)};
}

}  // namespace

TEST_CASE("cpu/int8_attention is near float32 on an encoder's long attention", "[routines][int8_attention]") {
  if (!usable()) return;  // says unsupported there (test_every_routine)
  std::mt19937 rng(17);
  // Whisper's shape at a third of its frames, read as the exporter writes it ([B,S,H,D] through perms).
  const Layer l = test::make_layer("attention",
                                   {{"q_perm", std::vector<int64_t>{0, 2, 1, 3}},
                                    {"k_perm", std::vector<int64_t>{0, 2, 1, 3}},
                                    {"v_perm", std::vector<int64_t>{0, 2, 1, 3}},
                                    {"out_perm", std::vector<int64_t>{0, 2, 1, 3}}},
                                   {}, 3);
  const std::vector<Blob> in{random_blob({1, 500, 6, 64}, rng, -2.f, 2.f), random_blob({1, 500, 6, 64}, rng, -2.f, 2.f),
                             random_blob({1, 500, 6, 64}, rng)};
  const auto got = test::values(test::run_layer(l, in, "cpu/int8_attention")[0]);
  const auto want = test::values(test::run_layer(l, in, "cpu/ref")[0]);
  const auto [err, cosine] = compare(got, want);
  CHECK(err < 4e-2);  // (measured 3.0e-2 and 0.99987 with VNNI; 3.2e-2 and 0.99981 on AVX2, 7-bit queries and values)
  CHECK(cosine > 0.9997);
}

TEST_CASE("cpu/int8_attention keeps float32's NaN and infinity where its inputs hold them", "[routines][int8_attention]") {
  if (!usable()) return;
  std::mt19937 rng(5);
  const Layer l = test::make_layer("attention", {}, {}, 3);
  for (int which = 0; which < 3; ++which) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      INFO("input " << which << " holds " << bad);
      std::vector<Blob> in{random_blob({1, 2, 20, 16}, rng), random_blob({1, 2, 30, 16}, rng),
                           random_blob({1, 2, 30, 16}, rng)};
      in[static_cast<std::size_t>(which)].data_as<float>()[3] = bad;  // head 0: query row 0, key 0 or value 0
      const auto got = test::values(test::run_layer(l, in, "cpu/int8_attention")[0]);
      const auto want = test::values(test::run_layer(l, in, "cpu/ref")[0]);
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("output " << i);
        CHECK(std::isnan(got[i]) == std::isnan(want[i]));
        CHECK(std::isinf(got[i]) == std::isinf(want[i]));
        if (std::isfinite(want[i])) CHECK(std::fabs(got[i] - want[i]) <= 3e-2 * (1 + std::fabs(want[i])));
      }
    }
  }
}

TEST_CASE("cpu/int8_attention is reduced precision", "[routines][int8_attention]") {
#if !defined(__x86_64__)
  return;  // built for x86 only
#endif
  CHECK(core::RoutineRegistry::instance().precision("cpu/int8_attention") == DType::qint8);
}
