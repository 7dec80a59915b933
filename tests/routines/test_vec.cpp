// cpu/vec routines (src/routines/cpu/vec.cpp) against the cpu/ref oracle:
// every registered vec routine of layernorm, softmax, gelu, concat, split and
// the copies, in each of its schemas and each `vector_bits` choice this CPU
// offers (AVX2 and, where present, AVX-512; Advanced SIMD on aarch64), on randomised shapes (odd sizes, batch 1 and 4).
// Tolerance (tests/routines/f32_check.hpp): max |got - ref| <= 1e-4 * max |ref|
// + 1e-5. Routines the CPU cannot run (no AVX2/FMA) are skipped with a warning.
#include "routines/f32_check.hpp"
#include "routines/cpu/vec_kernels.hpp"

#include "core/cpu_features.hpp"

#include <softneuro/session.hpp>

#include <cmath>
#include <limits>
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

using namespace softneuro;
using namespace softneuro::test::f32;

namespace {

std::vector<std::string> vec_routines(std::string_view type) {
  std::vector<std::string> out;
  for (const std::string& d : registered_routines(type))
    if (d.size() > 4 && d.compare(d.size() - 4, 4, "/vec") == 0) out.push_back(d);
  return out;
}

/// The routine parameter combinations to test: every vector_bits choice offered.
std::vector<RoutineParams> param_sets(const Layer& layer, const std::vector<Blob>& inputs, const std::string& d) {
  LayerInfo info;
  info.layer = &layer;
  for (const Blob& b : inputs) info.input_shapes.push_back(b.shape());
  info.output_shapes = core::infer_layer_shapes(layer, info.input_shapes);
  Schema schema;
  const Routine* r = core::RoutineRegistry::instance().find(layer.type, d, &schema);
  REQUIRE(r);
  std::vector<RoutineParams> out;
  for (const RoutineParamSpec& p : r->param_space(info, schema))
    for (int64_t c : p.choices) out.push_back({{p.name, c}});
  if (out.empty()) out.push_back({});
  return out;
}

/// Runs one case with every parameter set; counts supported runs.
struct Runner {
  explicit Runner(std::string d) : descriptor(std::move(d)) {}
  std::string descriptor;
  int supported = 0, skipped_isa = 0;
  std::string last_reason;
  void run(const Layer& layer, const std::vector<Blob>& inputs) {
    for (const RoutineParams& p : param_sets(layer, inputs, descriptor)) {
      INFO(descriptor << (p.empty() ? "" : " vector_bits=" + std::to_string(p[0].second)));
      std::string why;
      if (check_case(layer, inputs, descriptor, p, &why)) {
        ++supported;
      } else if (isa_missing(why)) {
        ++skipped_isa;
      } else {
        last_reason = why;
      }
    }
  }
  void check() const {
    if (supported == 0 && skipped_isa > 0) {
      WARN(descriptor << " skipped: the CPU lacks AVX2/FMA");
      return;
    }
    INFO(descriptor << ": a refusal: " << last_reason);
    CHECK(supported > 0);
  }
};

}  // namespace

TEST_CASE("vec layernorm matches cpu/ref", "[vec][layernorm]") {
  const std::string descriptor = GENERATE(from_range(vec_routines("layernorm")));
  std::mt19937 rng(41);
  Runner runner{descriptor};
  const std::pair<Shape, int64_t> cases[] = {{Shape{1, 7, 33}, -1}, {Shape{4, 5, 17}, -1}, {Shape{4, 3, 5, 7}, 1},
                                             {Shape{1, 197, 768}, -1}, {Shape{3, 11}, -1},  {Shape{2, 6, 9}, 1},
                                             {Shape{4, 9, 5}, 2},      {Shape{1, 3, 1}, -1}, {Shape{2, 40}, -1}};
  int t = 0;
  for (const auto& [s, axis] : cases) {
    Shape norm;
    const int a = static_cast<int>(axis < 0 ? axis + s.rank() : axis);
    for (int d = a; d < s.rank(); ++d) norm.push_back(s[d]);
    std::map<std::string, Blob> w{{"scale", random_blob(norm, rng, 0.5f, 1.5f)}};
    if (t % 2 == 0) w["bias"] = random_blob(norm, rng);
    Layer l = test::make_layer("layernorm", {{"axis", axis}, {"epsilon", t == 4 ? 1e-3 : 1e-5}}, w);
    // Case 8: a large mean against a small spread (the one-pass variance's cancellation).
    const float lo = t == 8 ? 100.0f : -3.0f, hi = t == 8 ? 101.0f : 2.0f;
    INFO("shape " << s.to_string() << " axis " << axis);
    runner.run(l, {random_blob(s, rng, lo, hi)});
    ++t;
  }
  runner.check();
}

TEST_CASE("vec softmax matches cpu/ref on every axis", "[vec][softmax]") {
  const std::string descriptor = GENERATE(from_range(vec_routines("softmax")));
  std::mt19937 rng(43);
  Runner runner{descriptor};
  for (const Shape& s : {Shape{1, 1000}, Shape{4, 37}, Shape{2, 5, 3, 4}, Shape{1, 12, 197, 197}, Shape{4, 3, 13},
                         Shape{7}, Shape{3, 1}, Shape{2, 3, 16}}) {
    Layer l = test::make_layer("softmax", {{"axis", int64_t{-1}}});
    INFO("shape " << s.to_string());
    runner.run(l, {random_blob(s, rng, -20.0f, 20.0f)});
  }
  // Middle and first axes: the positions after the axis are the vector lanes (tails, one lane, many).
  for (const auto& [s, axis] : std::vector<std::pair<Shape, int64_t>>{
           {Shape{2, 5, 3}, 1}, {Shape{1, 16, 4, 8400}, 1}, {Shape{1, 16, 4, 83}, 1}, {Shape{5, 3, 7}, 0},
           {Shape{3, 4, 1, 2}, 1}, {Shape{2, 7, 33}, -2}, {Shape{1, 1, 17}, 1}}) {
    Layer l = test::make_layer("softmax", {{"axis", axis}});
    INFO("shape " << s.to_string() << " axis " << axis);
    runner.run(l, {random_blob(s, rng, -20.0f, 20.0f)});
  }
  runner.check();
}

TEST_CASE("vec gelu matches cpu/ref (erf and tanh forms)", "[vec][gelu]") {
  const std::string descriptor = GENERATE(from_range(vec_routines("gelu")));
  std::mt19937 rng(47);
  Runner runner{descriptor};
  for (int t = 0; t < 8; ++t) {
    std::map<std::string, Attr> p;
    if (t % 2) p["approximate"] = std::string("tanh");
    Layer l = test::make_layer("gelu", p);
    const Shape s = t == 6 ? Shape{1, 197, 3072}
                           : Shape{t % 4 < 2 ? 1 : 4, pick(rng, 1, 21), pick(rng, 1, 9), pick(rng, 1, 13)};
    INFO("shape " << s.to_string() << " form " << (t % 2 ? "tanh" : "erf"));
    const bool nhwc = descriptor.find("nhwc") != std::string::npos;
    if (nhwc && s.rank() != 4) continue;
    runner.run(l, {random_blob(s, rng, -8.0f, 8.0f)});
  }
  runner.check();
}

TEST_CASE("the vec kernels' approximate GELU stays within 5e-5 of GELU, NaN and infinity kept", "[vec][gelu]") {
  // tile_dense and dynamic_int8 take it (no division, a cheaper exp: 1.6x
  // faster on AVX-512): their int8 products (and bfloat16 outputs) err far more.
  for (const cpu::vec::Kernels* k : {cpu::vec::best_kernels()}) {
    if (!k) return;
    std::vector<float> x;
    for (int i = -20000; i <= 20000; ++i) x.push_back(static_cast<float>(i) * 6e-4f);  // [-12, 12]
    for (float v : {1e-30f, -1e-30f, 0.0f, -0.0f, 40.0f, -40.0f, 1e30f, -1e30f}) x.push_back(v);
    for (bool tanh_form : {false, true}) {
      INFO((tanh_form ? "tanh" : "erf") << " form");
      std::vector<float> fast(x.size()), exact(x.size());
      k->gelu_approx(x.data(), fast.data(), static_cast<int64_t>(x.size()), tanh_form);
      k->gelu(x.data(), exact.data(), static_cast<int64_t>(x.size()), tanh_form);
      double worst = 0;
      for (std::size_t i = 0; i < x.size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(fast[i]) - exact[i]) / std::max(1.0, std::fabs(double(x[i]))));
      CHECK(worst <= 5e-5);  // (measured 2.8e-5 erf, 4.1e-5 tanh on AVX-512)
      const float special[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()};
      float out[2];
      k->gelu_approx(special, out, 2, tanh_form);
      CHECK(std::isnan(out[0]));
      CHECK(out[1] == std::numeric_limits<float>::infinity());
    }
  }
}

TEST_CASE("vec concat matches cpu/ref (channels and other axes)", "[vec][concat]") {
  const std::string descriptor = GENERATE(from_range(vec_routines("concat")));
  std::mt19937 rng(53);
  Runner runner{descriptor};
  for (int t = 0; t < 10; ++t) {
    const int64_t axis = t < 5 ? 1 : std::vector<int64_t>{0, 2, 3, -1, 1}[static_cast<std::size_t>(t - 5)];
    const int inputs = 1 + t % 3;
    const int64_t n = t % 2 ? 4 : 1;
    const int64_t h = t == 9 ? 33 : pick(rng, 1, 7), w = t == 9 ? 35 : pick(rng, 1, 7);
    std::vector<Blob> in;
    for (int i = 0; i < inputs; ++i) {
      Shape s{n, t == 9 ? 64 : pick(rng, 1, 13), h, w};
      if (axis != 1) {
        s[1] = 5;
        s[axis < 0 ? 3 : static_cast<std::size_t>(axis)] = pick(rng, 1, 6);
      }
      in.push_back(random_blob(s, rng));
    }
    Layer l = test::make_layer("concat", {{"axis", axis}}, {}, inputs);
    INFO("case " << t << " axis " << axis << " inputs " << inputs);
    runner.run(l, in);
  }
  // Plain layout, rank 3 (transformer tokens: class token + patches).
  if (descriptor.find("nhwc") == std::string::npos) {
    Layer l = test::make_layer("concat", {{"axis", int64_t{1}}}, {}, 2);
    runner.run(l, {random_blob({4, 1, 37}, rng), random_blob({4, 19, 37}, rng)});
  }
  runner.check();
}

TEST_CASE("vec split matches cpu/ref (channels and other axes, unequal parts)", "[vec][split]") {
  const std::string descriptor = GENERATE(from_range(vec_routines("split")));
  std::mt19937 rng(67);
  Runner runner{descriptor};
  for (int t = 0; t < 10; ++t) {
    const int64_t axis = t < 5 ? 1 : std::vector<int64_t>{0, 2, 3, -1, 1}[static_cast<std::size_t>(t - 5)];
    const int outputs = 1 + t % 3;
    const int64_t n = t % 2 ? 4 : 1;
    // t == 9: YOLOv8's C2f split (64 channels in halves) at a size the threads share.
    Shape s{n, t == 9 ? 64 : 5, t == 9 ? 80 : pick(rng, 1, 7), t == 9 ? 80 : pick(rng, 1, 7)};
    const auto a = static_cast<std::size_t>(axis < 0 ? 3 : axis);
    std::vector<int64_t> parts;
    int64_t total = 0;
    for (int i = 0; i < outputs; ++i) {
      parts.push_back(t == 9 ? 32 : pick(rng, 1, 6));
      total += parts.back();
    }
    s[a] = total;
    Layer l = test::make_layer("split", {{"axis", axis}, {"split", parts}}, {}, 1, outputs);
    INFO("case " << t << " axis " << axis << " outputs " << outputs);
    runner.run(l, {random_blob(s, rng)});
  }
  if (descriptor.find("nhwc") == std::string::npos) {  // plain layout, rank 3
    Layer l = test::make_layer("split", {{"axis", int64_t{2}}, {"split", std::vector<int64_t>{16, 21}}}, {}, 1, 2);
    runner.run(l, {random_blob({2, 7, 37}, rng)});
  }
  runner.check();
}

TEST_CASE("vec reshape, flatten and identity match cpu/ref", "[vec][copy]") {
  std::mt19937 rng(71);
  for (const char* type : {"reshape", "flatten", "identity"}) {
    Runner runner{"cpu/vec"};
    for (const Shape& s : {Shape{1, 3, 5, 7}, Shape{2, 300, 40, 30}}) {  // the second across threads
      const Layer l = std::string(type) == "reshape" ? test::make_layer(type, {{"shape", std::vector<int64_t>{s[0], -1}}})
                                                     : test::make_layer(type);
      INFO(type << " " << s.to_string());
      runner.run(l, {random_blob(s, rng)});
    }
    runner.check();
  }
}

TEST_CASE("vec routines agree with cpu/ref on one thread and on two", "[vec][threads]") {
  std::mt19937 rng(59);
  const int before = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    INFO("threads " << threads);
    std::map<std::string, Blob> w{{"scale", random_blob({768}, rng)}, {"bias", random_blob({768}, rng)}};
    Runner ln{"cpu/vec"}, sm{"cpu/vec"}, ge{"cpu/vec"}, ca{"cpu/vec"};
    ln.run(test::make_layer("layernorm", {}, w), {random_blob({1, 197, 768}, rng)});
    sm.run(test::make_layer("softmax"), {random_blob({1, 12, 19, 197}, rng, -10.0f, 10.0f)});
    ge.run(test::make_layer("gelu"), {random_blob({1, 197, 307}, rng, -5.0f, 5.0f)});
    ca.run(test::make_layer("concat", {{"axis", int64_t{1}}}, {}, 2),
           {random_blob({1, 64, 30, 30}, rng), random_blob({1, 33, 30, 30}, rng)});
    ln.check();
    sm.check();
    ge.check();
    ca.check();
  }
  set_num_threads(before);
}

TEST_CASE("vec routines outrank cpu/ref in the untuned default", "[vec]") {
  for (const char* type : {"layernorm", "softmax", "gelu", "concat", "split", "reshape", "flatten", "identity"}) {
    INFO(type);
    Schema schema;
    const Routine* ref = core::RoutineRegistry::instance().find(type, "cpu/ref", &schema);
    const Routine* vec = core::RoutineRegistry::instance().find(type, "cpu/vec", &schema);
    REQUIRE(ref);
    REQUIRE(vec);
    CHECK(core::RoutineRegistry::instance().default_rank(type, "cpu/vec") <
          core::RoutineRegistry::instance().default_rank(type, "cpu/ref"));
  }
}

TEST_CASE("the untuned default on ViT-B/16 shapes is the fastest measured routine (bench/ops_bench)", "[vec]") {
  if (!core::cpu_features().avx2_fma() && !core::cpu_features().neon) {
    WARN("cpu/vec needs AVX2/FMA (or aarch64's Advanced SIMD); not checked");
    return;
  }
  std::mt19937 rng(61);
  std::map<std::string, Blob> w{{"scale", random_blob({768}, rng)}, {"bias", random_blob({768}, rng)}};
  const struct {
    Layer layer;
    std::vector<Shape> in;
    const char* want;
  } cases[] = {
      {test::make_layer("layernorm", {}, w), {Shape{1, 197, 768}}, "cpu/vec"},
      {test::make_layer("softmax"), {Shape{1, 12, 197, 197}}, "cpu/vec"},
      {test::make_layer("gelu"), {Shape{1, 197, 3072}}, "cpu/vec"},
      {test::make_layer("concat", {{"axis", int64_t{1}}}, {}, 2), {Shape{1, 1, 768}, Shape{1, 196, 768}}, "cpu/vec"},
      {test::make_layer("matmul", {}, {}, 2), {Shape{12, 197, 64}, Shape{12, 64, 197}}, "cpu/onednn"},
  };
  for (const auto& c : cases) {
    LayerInfo info;
    info.layer = &c.layer;
    info.input_shapes = c.in;
    info.output_shapes = core::infer_layer_shapes(c.layer, c.in);
    INFO(c.layer.type);
    CHECK(core::RoutineRegistry::instance().default_choice(info, Schema{}).descriptor == c.want);
  }
}
