// cpu/winograd (Winograd F(m,3) childnet: wgenc -> wgconv -> wgdec) against cpu/ref
// conv2, run the way a net runs it: a one-layer net whose routine path names
// cpu/winograd with its tile and each child's routine, so the executor's childnet
// expansion is what is tested. Randomised shapes: pads 0-2 per side, odd sizes,
// batch 1 and 4, channel counts that are not multiples of the vector width,
// bias or none, fused activations.
//
// Tolerance: max |got - ref| <= tol * max |ref| per output, where tol grows with
// the tile (the transforms' coefficients, up to 2^5 and 1/2^5 for F(6,3), cost
// precision in float32):
//   F(2,3): 1e-5    F(4,3): 1e-4    F(6,3): 1e-3
#include "support/tuning.hpp"
#include "core/cpu_features.hpp"
#include "core/model_impl.hpp"
#include "core/registry.hpp"
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/session.hpp>
#include <softneuro/tune.hpp>
#include <softneuro/routine.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace softneuro;

namespace {

double tolerance(int64_t m) { return m == 2 ? 1e-5 : m == 4 ? 1e-4 : 1e-3; }

Blob random_blob(const Shape& s, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  Blob b = Blob::allocate(s);
  for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = d(rng);
  return b;
}

struct ConvCase {
  int64_t n, c, h, w, k;
  std::vector<int64_t> pads;
  bool bias;
  std::string act;
};

core::Graph conv_graph(const ConvCase& cc, std::mt19937& rng) {
  core::Graph g;
  g.name = "wg";
  g.inputs = {{"x", Shape{cc.n, cc.c, cc.h, cc.w}, DType::float32}};
  Layer l;
  l.name = "conv";
  l.type = "conv2";
  l.inputs = {"x"};
  l.outputs = {"y"};
  l.params["pads"] = cc.pads;
  l.params["act"] = cc.act;
  if (cc.act == "clip") l.params["act_min"] = -0.5, l.params["act_max"] = 0.5;
  l.weights["weight"] = random_blob(Shape{cc.k, cc.c, 3, 3}, rng, 0.5f);
  if (cc.bias) l.weights["bias"] = random_blob(Shape{cc.k}, rng);
  g.layers = {l};
  g.outputs = {"y"};
  return g;
}

std::vector<float> run(core::Graph g, const Blob& x, std::vector<core::RoutineChoice> path = {}) {
  core::Tuning tuning;
  tuning.routine_path.routines = std::move(path);
  Model net = detail::make_model(std::move(g), std::move(tuning));
  std::vector<NamedBlob> in{{"x", x}};
  return test::values(Session(net).run(in)[0].blob);
}

core::RoutineChoice wg_choice(int64_t m, const std::string& child_desc, const RoutineParams& child_params = {}) {
  core::RoutineChoice rc{"conv", "cpu/winograd", {{"tile", m}}, 0, 0, {}};
  if (!child_desc.empty())
    for (const char* c : {"wgenc", "wgconv", "wgdec"})
      rc.children.push_back({std::string("conv/") + c, child_desc, child_params, 0, 0, {}});
  return rc;
}

double max_err(const std::vector<float>& got, const std::vector<float>& want, double* scale) {
  double e = 0, s = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    e = std::max(e, std::abs(double(got[i]) - want[i]));
    s = std::max(s, std::abs(double(want[i])));
    if (std::isnan(got[i])) e = INFINITY;
  }
  *scale = s;
  return e;
}

}  // namespace

TEST_CASE("cpu/winograd matches cpu/ref conv2 for every tile and child routine", "[winograd][routines]") {
  std::mt19937 rng(2024);
  std::vector<ConvCase> cases = {
      {1, 3, 8, 8, 5, {1, 1, 1, 1}, true, "none"},
      {1, 17, 13, 11, 19, {1, 1, 1, 1}, true, "relu"},
      {4, 5, 7, 9, 16, {0, 0, 0, 0}, false, "none"},
      {4, 13, 5, 15, 7, {2, 0, 1, 2}, true, "clip"},
      {1, 1, 3, 3, 1, {0, 0, 0, 0}, false, "none"},
      {1, 33, 16, 16, 40, {1, 1, 1, 1}, true, "relu"},
  };
  for (int r = 0; r < 6; ++r) {
    std::uniform_int_distribution<int64_t> size(3, 19), ch(1, 37), pad(0, 2), batch(0, 1);
    cases.push_back({batch(rng) ? 4 : 1, ch(rng), size(rng), size(rng), ch(rng), {pad(rng), pad(rng), pad(rng), pad(rng)},
                     r % 2 == 0, r % 3 == 0 ? "relu" : "none"});
  }
  REQUIRE(registered_routines("wgconv").size() >= 2);
  const bool has_avx512 = core::cpu_features().avx512_core() && core::cpu_features().fma;
  for (const auto& cc : cases) {
    auto g = conv_graph(cc, rng);
    core::Tuning tuning;
    Blob x = random_blob(Shape{cc.n, cc.c, cc.h, cc.w}, rng);
    auto want = run(g, x, {{"conv", "cpu/ref", {}, 0, 0, {}}});
    for (int64_t m : {2, 4, 6}) {
      for (int variant = 0; variant < 4; ++variant) {
        // the reference children, the AVX2 and the AVX-512 kernels, the default
        const std::string child = variant == 0 ? "cpu/ref" : variant == 3 ? "" : "cpu/winograd";
        const RoutineParams params = variant == 1 ? RoutineParams{{"avx512", 0}}
                                           : variant == 2 ? RoutineParams{{"avx512", 1}}
                                                          : RoutineParams{};
        if (variant == 2 && !has_avx512) {
          WARN("skipped the AVX-512 children: this CPU lacks AVX-512");
          continue;
        }
        INFO("n=" << cc.n << " c=" << cc.c << " h=" << cc.h << " w=" << cc.w << " k=" << cc.k << " pads=" << cc.pads[0]
                  << cc.pads[1] << cc.pads[2] << cc.pads[3] << " act=" << cc.act << " tile=" << m << " children="
                  << (child.empty() ? "default" : child) << " variant=" << variant);
        auto path = wg_choice(m, child, params);
        tuning.routine_path.routines = {path};
        Model net = detail::make_model(g, tuning);
        bool ran_child = child.empty();
        for (const auto& l : Session(net).layers())
          if (l.name == "conv/wgconv") ran_child = ran_child || l.descriptor == child;
        if (!ran_child) {
          WARN("skipped " << child << ": this CPU lacks its instruction set");
          continue;
        }
        std::vector<NamedBlob> in{{"x", x}};
        auto got = test::values(Session(net).run(in)[0].blob);
        REQUIRE(got.size() == want.size());
        double scale = 0, err = max_err(got, want, &scale);
        CHECK(err <= tolerance(m) * scale + 1e-6);
      }
    }
  }
}

TEST_CASE("cpu:float32:nchw16c/winograd and nchw8c/winograd (blocked children) match cpu/ref conv2", "[winograd][routines]") {
  std::mt19937 rng(2025);
  std::vector<ConvCase> cases = {
      {1, 3, 8, 8, 5, {1, 1, 1, 1}, true, "none"},
      {1, 17, 13, 11, 19, {1, 1, 1, 1}, true, "relu"},
      {4, 5, 7, 9, 16, {0, 0, 0, 0}, false, "none"},
      {4, 13, 5, 15, 7, {2, 0, 1, 2}, true, "clip"},
      {1, 1, 3, 3, 1, {0, 0, 0, 0}, false, "hardswish"},
      {1, 33, 16, 16, 40, {1, 1, 1, 1}, true, "relu"},
      {1, 64, 14, 14, 72, {1, 1, 1, 1}, true, "hardsigmoid"},  // whole vectors, a partial last one
  };
  for (int r = 0; r < 6; ++r) {
    std::uniform_int_distribution<int64_t> size(3, 19), ch(1, 37), pad(0, 2), batch(0, 1);
    cases.push_back({batch(rng) ? 4 : 1, ch(rng), size(rng), size(rng), ch(rng), {pad(rng), pad(rng), pad(rng), pad(rng)},
                     r % 2 == 0, r % 3 == 0 ? "relu" : "none"});
  }
  for (const std::string desc : {"cpu:float32:nchw16c/winograd", "cpu:float32:nchw8c/winograd"}) {
    Schema schema;
    const Routine* parent = core::RoutineRegistry::instance().find("conv2", desc, &schema);
    REQUIRE(parent);
    for (const auto& cc : cases) {
      auto g = conv_graph(cc, rng);
      core::Tuning tuning;
      Blob x = random_blob(Shape{cc.n, cc.c, cc.h, cc.w}, rng);
      auto want = run(g, x, {{"conv", "cpu/ref", {}, 0, 0, {}}});
      for (int64_t m : {2, 4, 6}) {
        INFO(desc << " n=" << cc.n << " c=" << cc.c << " h=" << cc.h << " w=" << cc.w << " k=" << cc.k << " pads="
                  << cc.pads[0] << cc.pads[1] << cc.pads[2] << cc.pads[3] << " act=" << cc.act << " tile=" << m);
        LayerInfo info{&g.layers[0], {Shape{cc.n, cc.c, cc.h, cc.w}}, {}, {}, {}};
        if (Support ok = parent->supports(info, schema); !ok) {
          REQUIRE(ok.reason.find("needs") != std::string::npos);  // only the ISA may be missing
          WARN("skipped " << desc << ": " << ok.reason);
          break;
        }
        tuning.routine_path.routines = {{"conv", desc, {{"tile", m}}, 0, 0, {}}};
        Model net = detail::make_model(g, tuning);
        std::vector<std::string> types;
        for (const auto& l : Session(net).layers())
          if (l.type != "adapt") types.push_back(l.type);
        CHECK(types == std::vector<std::string>{"wgencb", "wgconvb", "wgdecb"});
        std::vector<NamedBlob> in{{"x", x}};
        auto got = test::values(Session(net).run(in)[0].blob);
        REQUIRE(got.size() == want.size());
        double scale = 0, err = max_err(got, want, &scale);
        CHECK(err <= tolerance(m) * scale + 1e-6);
      }
    }
  }
}

TEST_CASE("a net whose routine path chooses cpu/winograd tile 4 runs its children and matches", "[winograd][net]") {
  std::mt19937 rng(7);
  ConvCase cc{1, 16, 14, 14, 24, {1, 1, 1, 1}, true, "relu"};
  auto g = conv_graph(cc, rng);
  core::Tuning tuning;
  Blob x = random_blob(Shape{1, 16, 14, 14}, rng);
  auto want = run(g, x, {{"conv", "cpu/ref", {}, 0, 0, {}}});
  tuning.routine_path.routines = {wg_choice(4, "")};
  Model net = detail::make_model(g, tuning);
  std::vector<std::string> names;
  for (const auto& l : Session(net).layers()) names.push_back(l.name + ":" + l.type);
  CHECK(names == std::vector<std::string>{"conv/wgenc:wgenc", "conv/wgconv:wgconv", "conv/wgdec:wgdec"});
  std::vector<NamedBlob> in{{"x", x}};
  auto got = test::values(Session(net).run(in)[0].blob);
  double scale = 0, err = max_err(got, want, &scale);
  CHECK(err <= tolerance(4) * scale);
  // The second run allocates nothing new and gives the same numbers.
  CHECK(test::values(Session(net).run(in)[0].blob) == got);
}

// A child's derived weights were scoped by the child's name, descriptor and
// parameters only: the wgconv child of tile 4 and of tile 2 (other weights U
// under one name) shared one pack in the model's store, and the second plan
// read the first's panels (the tuner's final runs measure such paths side by
// side; so does a model whose shape buckets tune different tiles).
TEST_CASE("the children of one layer at two tiles in one model each derive their own weights", "[winograd][net]") {
  if (!core::cpu_features().avx2_fma()) return;
  std::mt19937 rng(11);
  ConvCase cc{1, 16, 12, 12, 24, {1, 1, 1, 1}, true, "none"};
  auto g = conv_graph(cc, rng);
  g.inputs[0].dynamic_dims = {2, 3};
  core::Tuning tuning;
  tuning.routine_path.routines = {wg_choice(4, "cpu/winograd")};
  tuning.routine_path.input_shapes = {{"x", Shape{1, 16, 12, 12}}};
  core::RoutinePath bucket;
  bucket.routines = {wg_choice(2, "cpu/winograd")};
  bucket.input_shapes = {{"x", Shape{1, 16, 40, 40}}};
  tuning.shape_paths = {bucket};
  const Model net = detail::make_model(g, tuning);
  Session session(net);
  for (const Shape& s : {Shape{1, 16, 12, 12}, Shape{1, 16, 40, 40}, Shape{1, 16, 12, 12}}) {
    INFO(s.to_string());
    const Blob x = random_blob(s, rng);
    auto ref = g;
    ref.inputs[0].shape = s;
    const auto want = run(ref, x, {{"conv", "cpu/ref", {}, 0, 0, {}}});
    std::vector<NamedBlob> in{{"x", x}};
    const auto got = test::values(session.run(in)[0].blob);
    double scale = 0;
    const double err = max_err(got, want, &scale);
    CHECK(err <= tolerance(4) * scale);
  }
}

TEST_CASE("a .dnn save/load round trip keeps cpu/winograd's child choices", "[winograd][dnn]") {
  std::mt19937 rng(11);
  ConvCase cc{1, 8, 9, 9, 8, {1, 1, 1, 1}, false, "none"};
  auto g = conv_graph(cc, rng);
  core::Tuning tuning;
  tuning.routine_path.routines = {wg_choice(6, "cpu/ref")};
  tuning.routine_path.routines[0].children[1].predicted_ms = 0.25;
  Model net = detail::make_model(g, tuning);
  const std::string path = test::temp_path("wg_roundtrip.dnn");
  net.save(path);
  Model back = Model::load(path);
  std::vector<std::string> desc;
  for (const auto& l : Session(back).layers()) {
    desc.push_back(l.name + "=" + l.descriptor);
    CHECK(l.tuned);
  }
  CHECK(desc == std::vector<std::string>{"conv/wgenc=cpu/ref", "conv/wgconv=cpu/ref", "conv/wgdec=cpu/ref"});
  Blob x = random_blob(Shape{1, 8, 9, 9}, rng);
  std::vector<NamedBlob> in{{"x", x}};
  CHECK(test::values(Session(back).run(in)[0].blob) == test::values(Session(net).run(in)[0].blob));
  std::remove(path.c_str());
}

// The family took its file's name (cpu/wg -> cpu/winograd, the children's
// cpu/avx2 and cpu/avx512 -> cpu/winograd with parameter avx512): tuned files
// written before keep their choices instead of falling back to the default.
TEST_CASE("a .dnn written with the old Winograd names loads onto cpu/winograd", "[winograd][dnn]") {
  std::mt19937 rng(12);
  ConvCase cc{1, 8, 9, 9, 8, {1, 1, 1, 1}, true, "relu"};
  auto g = conv_graph(cc, rng);
  core::Tuning tuning;
  core::RoutineChoice rc{"conv", "cpu/wg", {{"tile", 4}}, 0, 0, {}};
  for (const char* c : {"wgenc", "wgconv", "wgdec"})
    rc.children.push_back({std::string("conv/") + c, c == std::string("wgconv") ? "cpu/avx512" : "cpu/avx2", {}, 0, 0, {}});
  tuning.routine_path.routines = {rc};
  const std::string path = test::temp_path("wg_old_names.dnn");
  detail::make_model(g, tuning).save(path);  // written as given: the old names
  Model back = Model::load(path);
  std::vector<std::string> desc;
  for (const auto& l : Session(back).layers()) desc.push_back(l.name + "=" + l.descriptor + " " + l.routine_params);
  // Without AVX-512, avx512=... is outside the children's parameter space: the
  // default choice runs the layer (a file's parameters never reach prepare unchecked).
  if (core::cpu_features().avx512_core())
    CHECK(desc == std::vector<std::string>{"conv/wgenc=cpu/winograd avx512=0", "conv/wgconv=cpu/winograd avx512=1",
                                           "conv/wgdec=cpu/winograd avx512=0"});
  else
    for (const auto& l : Session(back).layers()) CHECK(!l.tuned);
  Blob x = random_blob(Shape{1, 8, 9, 9}, rng);
  double scale = 0;
  auto want = run(g, x, {{"conv", "cpu/ref", {}, 0, 0, {}}});
  std::vector<NamedBlob> in{{"x", x}};
  const double err = max_err(test::values(Session(back).run(in)[0].blob), want, &scale);
  CHECK(err <= tolerance(4) * scale);
  std::remove(path.c_str());
}

TEST_CASE("cpu/winograd says no to what it cannot compute", "[winograd]") {
  std::mt19937 rng(3);
  auto check_no = [&](std::map<std::string, Attr> params, Shape w) {
    Layer l = test::make_layer("conv2", params, {{"weight", random_blob(w, rng)}});
    LayerInfo info{&l, {Shape{1, 4, 10, 10}}, {}, {}, {}};
    Schema s;
    const Routine* r = core::RoutineRegistry::instance().find("conv2", "cpu/winograd", &s);
    REQUIRE(r);
    CHECK_FALSE(r->supports(info, s).ok);
  };
  check_no({{"strides", std::vector<int64_t>{2, 2}}}, Shape{4, 4, 3, 3});
  check_no({{"dilations", std::vector<int64_t>{2, 2}}}, Shape{4, 4, 3, 3});
  check_no({}, Shape{4, 4, 5, 5});
  check_no({{"group", int64_t{2}}}, Shape{4, 2, 3, 3});
}

TEST_CASE("cpu/conv: dense as reshape -> conv2 1x1 -> reshape matches cpu/ref", "[childnet][dense]") {
  std::mt19937 rng(5);
  for (const Shape& xs : {Shape{3, 17}, Shape{1, 64}, Shape{2, 3, 9}, Shape{5}}) {
    for (bool bias : {false, true}) {
      const int64_t k = xs[xs.rank() - 1], o = 13;
      std::map<std::string, Blob> weights{{"weight", random_blob(Shape{o, k}, rng)}};
      if (bias) weights["bias"] = random_blob(Shape{o}, rng);
      Layer l = test::make_layer("dense", {{"act", std::string("relu")}}, weights);
      Blob x = random_blob(xs, rng);
      auto want = test::values(test::run_layer(l, {x}, "cpu/ref")[0]);
      // Standalone (prepare_childnet) and inside a net, with the conv child on cpu/ref.
      auto got = test::values(test::run_layer(l, {x}, "cpu/conv")[0]);
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-5));
      core::Graph g;
      core::Tuning tuning;
      g.inputs = {{"x0", xs, DType::float32}};
      g.layers = {l};
      g.outputs = {"y0"};
      tuning.routine_path.routines = {{"L", "cpu/conv", {}, 0, 0, {{"L/conv", "cpu/ref", {}, 0, 0, {}}}}};
      Model net = detail::make_model(g, tuning);
      std::vector<std::string> names;
      for (const auto& s : Session(net).layers()) names.push_back(s.name + "=" + s.descriptor);
      CHECK(names[1] == "L/conv=cpu/ref");
      std::vector<NamedBlob> in{{"x0", x}};
      auto in_net = test::values(Session(net).run(in)[0].blob);
      for (std::size_t i = 0; i < want.size(); ++i) CHECK(in_net[i] == Approx(want[i]).epsilon(1e-5).margin(1e-5));
    }
  }
}

TEST_CASE("tuning a cpu/winograd candidate solves its children and records their choices", "[winograd][tune]") {
  std::mt19937 rng(13);
  ConvCase cc{1, 16, 14, 14, 16, {1, 1, 1, 1}, true, "relu"};
  auto g = conv_graph(cc, rng);
  Blob x = random_blob(Shape{1, 16, 14, 14}, rng);
  auto want = run(g, x, {{"conv", "cpu/ref", {}, 0, 0, {}}});
  Model net = detail::make_model(g);
  TuneOptions o;
  o.cache_dir = "-";
  o.unit_budget_ms = 0.5;
  o.integrated_runs = 2;
  o.pin = {{"conv", "cpu/winograd"}};
  tune_and_keep(net, o);
  std::vector<std::string> names;
  for (const auto& l : Session(net).layers()) {
    names.push_back(l.name);
    CHECK(l.tuned);
  }
  CHECK(names == std::vector<std::string>{"conv/wgenc", "conv/wgconv", "conv/wgdec"});
  std::vector<NamedBlob> in{{"x", x}};
  auto got = test::values(Session(net).run(in)[0].blob);
  double scale = 0, err = max_err(got, want, &scale);
  CHECK(err <= tolerance(6) * scale);
  // The child choices are in the saved path.
  const std::string path = test::temp_path("wg_tuned.dnn");
  net.save(path);
  Model back = Model::load(path);
  auto a = Session(net).layers(), b = Session(back).layers();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].descriptor == b[i].descriptor);
    CHECK(b[i].tuned);
  }
  std::remove(path.c_str());
}
