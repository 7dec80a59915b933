// The one test generator of the float32 and bfloat16 CPU routines (the qint8
// ones have theirs in test_qint8.cpp): every registered routine of each layer
// type runs every case below that it supports, at its default parameters and
// over its parameter space, in a one-layer net whose routine path pins it (so
// childnets and layouts run as in a real net), against cpu/ref. A routine
// registered tomorrow is tested by this file the day it is registered; one that
// supports no case here fails until a case is added. Family test files keep
// only their edge cases.
#include "core/cpu_features.hpp"
#include "core/executor.hpp"
#include "core/graph.hpp"
#include "core/model_impl.hpp"
#include "core/registry.hpp"
#include "routines/cpu/dynamic_int8_kernels.hpp"
#include "routines/f32_check.hpp"
#include "support/generated_cases.hpp"
#include "support/run_layer.hpp"

#include <softneuro/session.hpp>

#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace softneuro;
using test::f32::random_blob;

namespace {

using Ints = std::vector<int64_t>;
using Case = test::GeneratedCase;
using test::cases_for;
using test::generated;

Layer layer_of(const std::string& type, std::map<std::string, Attr> params, std::map<std::string, Blob> weights,
               int inputs = 1, int outputs = 1) {
  return test::make_layer(type, std::move(params), std::move(weights), inputs, outputs);
}

/// max |got - want| allowed, relative to max |want|, by dtype and algorithm.
double tolerance(const Schema& schema, DType precision, std::string_view algorithm, const RoutineParams& params) {
  if (schema.dtype == DType::bfloat16) return 3e-2;  // 8-bit mantissa inputs
#if defined(__x86_64__)
  // Without VNNI, int8_attention's queries and values take 7 bits (vpmaddubsw's pair sums).
  if (algorithm == "int8_attention" && !dynamic_int8::vnni512_usable()) return 4e-2;
#endif
  if (precision == DType::qint8) return 3e-2;         // int8 products inside (cpu/dynamic_int8)
  if (schema.dtype == DType::float16) return 1e-2;   // 11-bit mantissa, half-precision sums (aarch64's XNNPACK)
  if (algorithm == "winograd") return routine_param(params, "tile", 4) == 6 ? 2e-3 : 5e-4;  // Winograd transforms
  return 1e-4;
}

/// The parameter points to run: the routine's defaults, every choice of each
/// parameter with the others at their first choice, and the whole product
/// where it has at most 32 points.
std::vector<RoutineParams> parameter_points(const std::vector<RoutineParamSpec>& space) {
  std::vector<RoutineParams> points{{}};
  std::size_t product = 1;
  for (const auto& s : space) product *= std::max<std::size_t>(1, s.choices.size());
  if (product <= 32) {
    const auto all = param_combinations(space);
    points.insert(points.end(), all.begin(), all.end());
    return points;
  }
  for (std::size_t i = 0; i < space.size(); ++i)
    for (int64_t v : space[i].choices) {
      RoutineParams q;
      for (std::size_t j = 0; j < space.size(); ++j)
        if (!space[j].choices.empty()) q.emplace_back(space[j].name, j == i ? v : space[j].choices.front());
      points.push_back(std::move(q));
    }
  return points;
}

core::Graph one_layer_graph(const Case& c) {
  core::Graph g;
  g.name = "generated";
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    if (!(c.constant_second && i == 1)) g.inputs.push_back({c.layer.inputs[i], c.inputs[i].shape(), DType::float32});
  if (c.constant_second) {
    Layer k;
    k.name = c.layer.inputs[1] + "_constant";
    k.type = "constant";
    k.outputs = {c.layer.inputs[1]};
    k.weights["value"] = c.inputs[1];
    g.layers.push_back(std::move(k));
  }
  g.layers.push_back(c.layer);
  g.outputs = c.layer.outputs;
  return g;
}

/// Runs the case's net with `choice` pinned; false when the executor did not
/// run that routine (it refused the layer).
bool run_pinned(const Case& c, const core::RoutineChoice& choice, std::vector<Blob>& outputs) {
  core::Graph g = one_layer_graph(c);
  core::Tuning tuning;
  tuning.routine_path.routines = {choice};
  Model net = detail::make_model(std::move(g), tuning);
  bool ran = false;  // the layer on that routine, or a childnet's children (named layer/child)
  for (const auto& l : Session(net).layers())
    ran = ran || (l.name == c.layer.name && l.descriptor == choice.descriptor) || l.name.starts_with(c.layer.name + "/");
  if (!ran) return false;
  std::vector<NamedBlob> in;
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    if (!(c.constant_second && i == 1)) in.push_back({c.layer.inputs[i], c.inputs[i]});
  outputs.clear();
  for (auto& o : Session(net).run(in)) outputs.push_back(o.blob);
  return true;
}

}  // namespace

TEST_CASE("every float32, bfloat16 and float16 CPU routine matches cpu/ref on every generated case it supports", "[routines][generator]") {
  std::mt19937 rng(20261123);
  const core::CpuFeatures& cpu = core::cpu_features();
  const bool every_isa = !core::cpu_features_capped() && cpu.avx512_core() && cpu.avx512_bf16 && cpu.avx512_vnni;
  for (const auto& type_info : core::layer_types()) {
    const std::string type(type_info.name);
    if (!generated(type)) continue;
    const std::vector<Case> cases = cases_for(type, rng);
    INFO("layer type " << type);
    REQUIRE_FALSE(cases.empty());  // a new layer type needs cases above
    for (const std::string& descriptor : registered_routines(type)) {
      Schema schema;
      const Routine* routine = core::RoutineRegistry::instance().find(type, descriptor, &schema);
      REQUIRE(routine);
      if (schema.device != Device::cpu ||
          (schema.dtype != DType::float32 && schema.dtype != DType::bfloat16 && schema.dtype != DType::float16))
        continue;
      if (descriptor == "cpu/ref" || descriptor.find("/test_") != std::string::npos) continue;  // the tests' own
      INFO("routine " << descriptor);
      int ran = 0;
      std::string refusals;
      for (const Case& c : cases) {
        INFO("case " << c.what);
        LayerInfo info;
        info.layer = &c.layer;
        for (const Blob& b : c.inputs) info.input_shapes.push_back(b.shape());
        info.keep_nan = core::makes_nan(c.layer, c.constant_second ? &c.inputs[1] : nullptr);  // as the executor has it
        info.output_shapes = core::infer_layer_shapes(c.layer, info.input_shapes);
        if (Support s = routine->supports(info, schema); !s) {
          refusals += fmt::format("\n  {}: {}", c.what, s.reason);
          continue;
        }
        std::vector<Blob> want;
        REQUIRE(run_pinned(c, {c.layer.name, "cpu/ref", {}, 0, 0, {}}, want));
        for (const RoutineParams& params : parameter_points(routine->param_space(info, schema))) {
          std::string point;
          for (const auto& [k, v] : params) point += fmt::format(" {}={}", k, v);
          INFO("parameters" << (point.empty() ? " (defaults)" : point));
          std::vector<Blob> got;
          REQUIRE(run_pinned(c, {c.layer.name, descriptor, params, 0, 0, {}}, got));
          REQUIRE(got.size() == want.size());
          const double tol = tolerance(schema, routine->precision(schema), routine->algorithm(), params);
          for (std::size_t o = 0; o < got.size(); ++o) {
            const auto g = test::values(got[o]), w = test::values(want[o]);
            REQUIRE(g.size() == w.size());
            double scale = 0, err = 0;
            for (std::size_t i = 0; i < w.size(); ++i) {
              scale = std::max(scale, std::fabs(static_cast<double>(w[i])));
              const double d = std::fabs(static_cast<double>(g[i]) - w[i]);
              err = std::isnan(d) ? INFINITY : std::max(err, d);
            }
            INFO("output " << o << ": max |diff| " << err << ", max |ref| " << scale);
            CHECK(err <= tol * scale + 1e-5);
          }
        }
        ++ran;
      }
      // On a CPU with every instruction set our routines use (AVX-512 with BF16
      // and VNNI, uncapped; AMX for the AMX routines), every routine must run some case; elsewhere a
      // routine may refuse them all for want of instructions.
      // XNNPACK's float16 routines where the CPU has fp16 arithmetic (aarch64) likewise.
      // The AMX routines where the CPU has AMX.
      const bool amx_only = routine->algorithm().starts_with("tile_");  // tile_attention, tile_dense
      if (ran == 0 && ((every_isa && (!amx_only || cpu.amx_bf16)) || (schema.dtype == DType::float16 && cpu.fp16_arith)))
        FAIL_CHECK("no generated case is supported by " << descriptor << ": add one to tests/routines/test_every_routine.cpp"
                                                         << refusals);
      else if (ran == 0)
        WARN(descriptor << " runs no case on this CPU:" << refusals);
    }
  }
}

TEST_CASE("NaN propagates through every float32 activation routine, standalone and fused, as ONNX Runtime's do",
          "[routines][nan]") {
  // cpu/ref's relu, our GEMM/direct/Winograd epilogues and exp turned NaN into 0 or a bound (an
  // all-NaN image gave a uniform distribution); so did oneDNN's relu, clip and hardsigmoid,
  // standalone and fused into its convolutions, dense layers and adds, in every layout, and
  // XNNPACK's clamped float32 operators (NaN inputs now run the session's exact plan).
  std::mt19937 rng(51);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto with_nans = [&](Shape s) {
    Blob b = random_blob(s, rng, -4.f, 4.f);
    for (int64_t i = 0; i < b.numel(); i += 3) b.data_as<float>()[i] = nan;
    return b;
  };
  std::vector<Case> cases;
  for (const char* t : {"relu", "clip", "leaky_relu", "hardswish", "hardsigmoid", "sigmoid", "tanh", "silu", "gelu", "mish", "prelu"}) {
    std::map<std::string, Attr> p;
    std::map<std::string, Blob> w;
    if (std::string(t) == "clip") p = {{"min", 0.0}, {"max", 6.0}};
    if (std::string(t) == "prelu") w = {{"slope", random_blob({16, 1, 1}, rng)}};
    for (Shape s : {Shape{1, 16, 7, 7}, Shape{1, 16, 64, 33}})
      cases.push_back({fmt::format("{} {}", t, s.to_string()), layer_of(t, p, w), {with_nans(s)}});
  }
  for (const char* act : {"none", "relu", "clip", "silu", "hardsigmoid"}) {
    std::map<std::string, Attr> p{{"pads", Ints{1, 1, 1, 1}}, {"act", std::string(act)}};
    if (std::string(act) == "clip") p["act_min"] = 0.0, p["act_max"] = 6.0;
    cases.push_back({fmt::format("conv2 3x3 act {}", act),
                     layer_of("conv2", p, {{"weight", random_blob({16, 16, 3, 3}, rng, -0.3f, 0.3f)}, {"bias", random_blob({16}, rng)}}),
                     {with_nans({1, 16, 10, 10})}});
    // 20 output channels: blocked layouts pad them, and the padding must stay zero.
    std::map<std::string, Attr> one = p;
    one.erase("pads");
    cases.push_back({fmt::format("conv2 1x1 16->20 act {}", act),
                     layer_of("conv2", one, {{"weight", random_blob({20, 16, 1, 1}, rng, -0.3f, 0.3f)}, {"bias", random_blob({20}, rng)}}),
                     {with_nans({1, 16, 9, 9})}});
    std::map<std::string, Attr> dw = p;
    dw["group"] = int64_t{16};
    cases.push_back({fmt::format("conv2 depthwise 3x3 act {}", act),
                     layer_of("conv2", dw, {{"weight", random_blob({16, 1, 3, 3}, rng, -0.3f, 0.3f)}, {"bias", random_blob({16}, rng)}}),
                     {with_nans({1, 16, 12, 12})}});
    cases.push_back({fmt::format("dense act {}", act),
                     layer_of("dense", {{"act", std::string(act)}}, {{"weight", random_blob({24, 40}, rng, -0.3f, 0.3f)}}),
                     {with_nans({3, 40})}});
  }
  for (const char* t : {"add", "mul", "div"})
    for (const char* act : {"none", "relu", "clip"}) {
      if (std::string(t) != "add" && std::string(act) != "none") continue;  // add alone takes a fused activation
      std::map<std::string, Attr> p{{"act", std::string(act)}};
      if (std::string(act) == "clip") p["act_min"] = 0.0, p["act_max"] = 6.0;
      cases.push_back({fmt::format("{} act {}", t, act), layer_of(t, p, {}, 2),
                       {with_nans({1, 16, 9, 9}), random_blob({1, 16, 9, 9}, rng, 0.5f, 2.f)}});
    }
  cases.push_back({"pool2 average 3x3", layer_of("pool2", {{"mode", std::string("avg")}, {"kernel", Ints{3, 3}}}, {}),
                   {with_nans({1, 16, 9, 9})}});
  for (const Case& c : cases) {
    INFO("case " << c.what);
    std::vector<Blob> want;
    REQUIRE(run_pinned(c, {c.layer.name, "cpu/ref", {}, 0, 0, {}}, want));
    const auto w = test::values(want[0]);
    REQUIRE(std::count_if(w.begin(), w.end(), [](float v) { return std::isnan(v); }) > 0);
    for (const std::string& descriptor : registered_routines(c.layer.type)) {
      Schema schema;
      const Routine* routine = core::RoutineRegistry::instance().find(c.layer.type, descriptor, &schema);
      if (!routine || schema.device != Device::cpu || schema.dtype != DType::float32 || descriptor == "cpu/ref" ||
          descriptor.find("/test_") != std::string::npos)
        continue;
      LayerInfo info;
      info.layer = &c.layer;
      for (const Blob& b : c.inputs) info.input_shapes.push_back(b.shape());
      info.keep_nan = core::makes_nan(c.layer, nullptr);  // the Div cases: NaN made from their finite inputs
      info.output_shapes = core::infer_layer_shapes(c.layer, info.input_shapes);
      if (!routine->supports(info, schema)) continue;
      INFO("routine " << descriptor);
      std::vector<Blob> got;
      REQUIRE(run_pinned(c, {c.layer.name, descriptor, {}, 0, 0, {}}, got));
      const auto g = test::values(got[0]);
      REQUIRE(g.size() == w.size());
      std::size_t lost = 0;
      for (std::size_t i = 0; i < w.size(); ++i) lost += std::isnan(w[i]) && !std::isnan(g[i]);
      CHECK(lost == 0);
    }
  }
}

namespace {
/// A two-layer net: y0 = conv2(x0 / x1, 1x1, act) with conv2 pinned to `conv_routine`.
Model div_then_conv(const std::string& conv_routine, const std::string& act, std::mt19937& rng) {
  core::Graph g;
  core::Tuning tuning;
  g.name = "div_conv";
  g.inputs = {{"x0", Shape{1, 8, 5, 5}, DType::float32}, {"x1", Shape{1, 8, 5, 5}, DType::float32}};
  Layer div = test::make_layer("div", {}, {}, 2, 1, "div");
  div.outputs = {"q"};
  std::map<std::string, Attr> p{{"act", act}};
  if (act == "clip") p["act_min"] = 0.0, p["act_max"] = 6.0;
  Layer conv = test::make_layer("conv2", p, {{"weight", random_blob({8, 8, 1, 1}, rng, -0.3f, 0.3f)}}, 1, 1, "conv");
  conv.inputs = {"q"};
  g.layers = {div, conv};
  g.outputs = {"y0"};
  tuning.routine_path.routines = {{"conv", conv_routine, {}, 0, 0, {}}};
  return detail::make_model(std::move(g), std::move(tuning));
}
}  // namespace

TEST_CASE("NaN made inside the net (0 / 0) stays NaN through oneDNN's fused relu and clip", "[routines][nan]") {
  // The inputs are finite, so only the layer's own knowledge that a Div before it may make NaN
  // (LayerInfo::keep_nan) keeps oneDNN's relu from turning it into 0.
  std::mt19937 rng(7);
  for (const char* act : {"relu", "clip"})
    for (const char* routine : {"cpu/onednn", "cpu:float32:nchw8c/onednn", "cpu:float32:nhwc/onednn"}) {
      INFO(routine << " act " << act);
      Model net = div_then_conv(routine, act, rng);
      bool pinned = false;
      for (const auto& l : Session(net).layers()) pinned = pinned || (l.name == "conv" && l.descriptor == routine);
#if !defined(__x86_64__)
      if (!pinned) continue;  // Debian's aarch64 oneDNN: no fast convolution without SVE, the routine refuses
#endif
      REQUIRE(pinned);
      Blob a = random_blob({1, 8, 5, 5}, rng, -2.f, 2.f), b = random_blob({1, 8, 5, 5}, rng, 0.5f, 2.f);
      a.data_as<float>()[6] = 0.0f, b.data_as<float>()[6] = 0.0f;  // channel 0, pixel 6: 0 / 0
      const std::vector<NamedBlob> in{{"x0", a}, {"x1", b}};
      const auto out = Session(net).run(in);
      const auto y = test::values(out[0].blob);
      int nan = 0;
      for (int c = 0; c < 8; ++c) nan += std::isnan(y[static_cast<std::size_t>(c * 25 + 6)]);
      CHECK(nan == 8);  // every output channel reads pixel 6 of channel 0
      CHECK(std::count_if(y.begin(), y.end(), [](float v) { return std::isnan(v); }) == 8);
    }
}

TEST_CASE("A NaN pixel makes a convolutional net's outputs NaN, as in ONNX Runtime, finite inputs keep the fast plan",
          "[routines][nan]") {
  // MobileNetV2's shape of the problem: convolutions with fused clip(0, 6) on oneDNN, then a global
  // average. One NaN pixel gave finite outputs (oneDNN's clip turned the NaN into 0).
  std::mt19937 rng(11);
  core::Graph g;
  g.name = "nan_pixel";
  g.inputs = {{"x", Shape{1, 3, 16, 16}, DType::float32}};
  Layer c1 = test::make_layer("conv2", {{"pads", Ints{1, 1, 1, 1}}, {"act", std::string("clip")}, {"act_min", 0.0}, {"act_max", 6.0}},
                              {{"weight", random_blob({16, 3, 3, 3}, rng, -0.3f, 0.3f)}, {"bias", random_blob({16}, rng)}}, 1, 1, "c1");
  c1.inputs = {"x"};
  c1.outputs = {"h"};
  Layer c2 = test::make_layer("conv2", {{"act", std::string("relu")}},
                              {{"weight", random_blob({8, 16, 1, 1}, rng, -0.3f, 0.3f)}}, 1, 1, "c2");
  c2.inputs = {"h"};
  c2.outputs = {"h2"};
  Layer pool = test::make_layer("pool2", {{"mode", std::string("avg")}, {"kernel", Ints{16, 16}}}, {}, 1, 1, "pool");
  pool.inputs = {"h2"};
  pool.outputs = {"y"};
  g.layers = {c1, c2, pool};
  g.outputs = {"y"};
  for (const char* routine : {"cpu:float32:nchw8c/onednn", "cpu:float32:nhwc/xnnpack"}) {
    INFO(routine);
    core::Graph pinned = g;
    core::Tuning pinned_tuning;
    pinned_tuning.routine_path.routines = {{"c1", routine, {}, 0, 0, {}}, {"c2", routine, {}, 0, 0, {}}};
    Model model = detail::make_model(std::move(pinned), pinned_tuning);
    Session session(model);
    Blob x = random_blob({1, 3, 16, 16}, rng, 0.f, 1.f);
    const auto finite = test::values(session.run(std::vector<NamedBlob>{{"x", x}})[0].blob);
    for (float v : finite) REQUIRE(std::isfinite(v));
    x.data_as<float>()[3 * 16 + 5] = std::numeric_limits<float>::quiet_NaN();
    const auto with_nan = test::values(session.run(std::vector<NamedBlob>{{"x", x}})[0].blob);
    for (float v : with_nan) CHECK(std::isnan(v));
    x.data_as<float>()[3 * 16 + 5] = 0.5f;
    const auto again = test::values(session.run(std::vector<NamedBlob>{{"x", x}})[0].blob);
    for (float v : again) CHECK(std::isfinite(v));
  }
}

TEST_CASE("NaN may reach the layers a NaN-making layer feeds, Pow to an integral power and Div by non-zero constants make none",
          "[routines][nan]") {
  // Pow was marked whatever its exponent: x ** 2 or x ** 3 (GELU's tanh form) made every layer after it take the
  // slower NaN-keeping forms.
  auto layer = [](std::string name, std::string type, std::vector<std::string> in, std::map<std::string, Attr> p = {},
                  std::map<std::string, Blob> w = {}) {
    Layer l = test::make_layer(std::move(type), std::move(p), std::move(w), 0, 0, name);
    l.inputs = std::move(in);
    l.outputs = {name};
    return l;
  };
  auto constant = [&](std::string name, std::vector<float> v) {
    Blob b = Blob::allocate({static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), b.data_as<float>());
    return layer(std::move(name), "constant", {}, {}, {{"value", b}});
  };
  core::Graph g;
  g.inputs = {{"x", Shape{4}, DType::float32}, {"y", Shape{4}, DType::float32}};
  g.layers = {layer("square", "pow", {"x"}, {{"exponent", 2.0}}),
              layer("after_square", "relu", {"square"}),
              layer("root", "pow", {"x"}, {{"exponent", 0.5}}),
              layer("after_root", "relu", {"root"}),
              constant("three", {3.f}),
              layer("cube", "pow", {"x", "three"}),
              constant("halves", {2.f, 0.5f, 1.f, 1.f}),
              layer("mixed", "pow", {"x", "halves"}),
              constant("nonzero", {2.f, -1.f, 4.f, 0.5f}),
              layer("scaled", "div", {"x", "nonzero"}),
              constant("zeros", {2.f, 0.f, 1.f, 1.f}),
              layer("by_zero", "div", {"x", "zeros"}),
              layer("by_input", "div", {"x", "y"}),
              layer("sum", "add", {"by_input", "scaled"}),
              layer("after_sum", "relu", {"sum"})};
  const std::set<std::string> reached = core::layers_nan_may_reach(g);
  CHECK(reached == std::set<std::string>{"root", "after_root", "mixed", "by_zero", "by_input", "sum", "after_sum"});
}

TEST_CASE("every entry of the default orders names a registered routine of its layer type", "[routines]") {
  // An entry naming no routine (a typo, a renamed routine) was ranked last in
  // silence: the layer's default then fell to the next tier. (Test layer types
  // of other test cases, "test_*", register their own.)
  std::vector<std::string> unknown;
  for (const auto& u : core::RoutineRegistry::instance().unknown_in_default_order())
    if (!u.starts_with("test_")) unknown.push_back(u);
  INFO(fmt::format("{}", fmt::join(unknown, "\n")));
  CHECK(unknown.empty());
}

TEST_CASE("cpu:bfloat16/tile_attention keeps float32's NaN and infinity where its inputs hold them", "[routines][nan]") {
  // Its softmax finds a NaN or infinity through the row's sum (the row maxima it takes from the
  // scores' tiles skip nothing it needs), then computes that row as softmax does.
  const core::CpuFeatures& f = core::cpu_features();
  if (!(f.amx_bf16 && f.avx512_bf16 && core::amx_tiles_permitted())) return;
  std::mt19937 rng(6);
  for (bool masked : {false, true})
    for (int which = 0; which < 3; ++which)
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()}) {
        INFO("input " << which << " holds " << bad << (masked ? ", a mask row added" : ""));
        Case c{"nan", layer_of("attention", {}, {}, masked ? 4 : 3),
               {random_blob({1, 2, 40, 16}, rng), random_blob({1, 2, 70, 16}, rng), random_blob({1, 2, 70, 16}, rng)}};
        if (masked) c.inputs.push_back(random_blob({1, 1, 40, 70}, rng));
        c.inputs[static_cast<std::size_t>(which)].data_as<float>()[35] = bad;  // head 0: query 2, key 2 or value 2
        std::vector<Blob> got, want;
        REQUIRE(run_pinned(c, {c.layer.name, "cpu/ref", {}, 0, 0, {}}, want));
        REQUIRE(run_pinned(c, {c.layer.name, "cpu:bfloat16/tile_attention", {}, 0, 0, {}}, got));
        const auto g = test::values(got[0]), w = test::values(want[0]);
        REQUIRE(g.size() == w.size());
        for (std::size_t i = 0; i < w.size(); ++i) {
          INFO("output " << i);
          CHECK(std::isnan(g[i]) == std::isnan(w[i]));
          CHECK(std::isinf(g[i]) == std::isinf(w[i]));
          if (std::isfinite(w[i])) CHECK(std::fabs(g[i] - w[i]) <= 3e-2 * (1 + std::fabs(w[i])));
        }
      }
}
