// cpu/dynamic_int8: the arithmetic it defines (rows quantised at run time,
// int8 weights per channel, exact int32 sums), and what its reduced
// precision means for defaults, candidates and the accuracy check.
#include "core/cpu_features.hpp"
#include "core/model_impl.hpp"
#include "core/plan.hpp"
#include "core/prepared_weights.hpp"
#include "core/registry.hpp"
#include "core/weight_quant.hpp"
#include "routines/cpu/dynamic_int8_kernels.hpp"
#include "profiler/accuracy.hpp"
#include "profiler/unit_profile.hpp"
#include "routines/f32_check.hpp"
#include "routines/row_int8_check.hpp"
#include "support/run_layer.hpp"
#include "support/tuning.hpp"

#include <softneuro/session.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace softneuro;
using test::f32::random_blob;

namespace {

/// Whether cpu/dynamic_int8 runs its AVX512-VNNI form here (it is built for x86 only).
bool vnni512() {
#if defined(__x86_64__)
  return dynamic_int8::vnni512_usable();
#else
  return false;
#endif
}

Layer dense(const Blob& w, const Blob* bias, const std::string& act = "none") {
  std::map<std::string, Blob> weights{{"weight", w}};
  if (bias) weights["bias"] = *bias;
  return test::make_layer("dense", {{"act", act}}, weights);
}

/// Each row on its own grid of max |x| / 255, the weights per channel on int8, the sums exact.
std::vector<double> expected(const Blob& x, const Blob& w, const Blob* bias, int64_t m, int64_t k, int64_t n) {
  return test::row_int8_dense(x, w, bias, m, k, n, 255.0f);
}

/// The u8s8 form: each row on a u8 grid of its range (with zero), the weights
/// on 7 bits, or 8 where AVX512-VNNI runs the form.
std::vector<double> expected_u8s8(const Blob& x, const Blob& w, const Blob* bias, int64_t m, int64_t k, int64_t n) {
  const core::ChannelQuantized q = core::channel_int8(w, vnni512() ? 127 : 63);
  std::vector<double> y(static_cast<std::size_t>(m * n));
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x.data_as<float>() + r * k;
    float mn = 0, mx = 0;
    for (int64_t i = 0; i < k; ++i) mn = std::min(mn, xr[i]), mx = std::max(mx, xr[i]);
    const float s = (mx - mn) / 255.0f, inv = mx > mn ? 255.0f / (mx - mn) : 0.0f;
    const auto z = static_cast<int64_t>(std::nearbyint(-mn * inv));
    for (int64_t o = 0; o < n; ++o) {
      int64_t acc = 0;
      for (int64_t i = 0; i < k; ++i) {
        const int64_t u = std::clamp<int64_t>(static_cast<int64_t>(std::nearbyint(xr[i] * inv)) + z, 0, 255);
        acc += (u - z) * q.q[static_cast<std::size_t>(o * k + i)];
      }
      y[static_cast<std::size_t>(r * n + o)] =
          static_cast<double>(acc) * s * q.scale[static_cast<std::size_t>(o)] + (bias ? bias->data_as<float>()[o] : 0.0);
    }
  }
  return y;
}

/// A net of one dense layer "fc": x [2, 64] -> y [2, 32].
core::Graph fc_graph(std::mt19937& rng) {
  core::Graph g;
  g.name = "fc";
  g.inputs = {{"x", Shape{2, 64}, DType::float32}};
  Layer fc = dense(random_blob({32, 64}, rng), nullptr);
  fc.name = "fc";
  fc.inputs = {"x"};
  fc.outputs = {"y"};
  g.layers = {fc};
  g.outputs = {"y"};
  return g;
}

std::vector<float> run_form(const Layer& l, const Blob& x, int64_t u8s8) {
  LayerInfo info;
  info.layer = &l;
  info.input_shapes = {x.shape()};
  info.output_shapes = core::infer_layer_shapes(l, info.input_shapes);
  Schema schema;
  const Routine* r = core::RoutineRegistry::instance().find("dense", "cpu/dynamic_int8", &schema);
  REQUIRE(r);
  auto prepared = r->prepare(info, schema, {{"u8s8", u8s8}});
  return test::values(test::run_prepared(*prepared, {x}, info.output_shapes, schema)[0]);
}

}  // namespace

TEST_CASE("cpu/dynamic_int8 computes dense as its int8 arithmetic defines, and near float32", "[routines][dynamic_int8]") {
  if (!core::cpu_features().avx2_fma()) return;  // says unsupported there (test_every_routine)
  std::mt19937 rng(7);
  struct Dims {
    int64_t m, k, n;
  };
  // (VNNI tiles: 6 rows x 4 blocks of 16 columns; 130 and 200 columns end in part-filled groups.)
  for (Dims d : {Dims{1, 1, 1}, Dims{1, 768, 50}, Dims{3, 7, 16}, Dims{4, 64, 33}, Dims{5, 129, 17}, Dims{17, 300, 40},
                 Dims{64, 96, 31}, Dims{13, 200, 130}, Dims{7, 64, 64}, Dims{2, 36, 200}}) {
    for (int64_t u8s8 : {0, 1})
    for (bool with_bias : {false, true}) {
      INFO("m " << d.m << " k " << d.k << " n " << d.n << (with_bias ? " with bias" : "") << " u8s8 " << u8s8);
      const Blob x = random_blob({d.m, d.k}, rng, -2.f, 3.f);
      const Blob w = random_blob({d.n, d.k}, rng, -0.5f, 0.5f);
      const Blob b = random_blob({d.n}, rng);
      const Layer l = dense(w, with_bias ? &b : nullptr);
      const auto got = run_form(l, x, u8s8);
      const auto want = u8s8 ? expected_u8s8(x, w, with_bias ? &b : nullptr, d.m, d.k, d.n)
                             : expected(x, w, with_bias ? &b : nullptr, d.m, d.k, d.n);
      const auto exact = test::values(test::run_layer(l, {x}, "cpu/ref")[0]);
      REQUIRE(got.size() == want.size());
      double scale = 0, err = 0, err_float = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::fabs(want[i]));
        err = std::max(err, std::fabs(got[i] - want[i]));
        err_float = std::max(err_float, std::fabs(static_cast<double>(got[i]) - exact[i]));
      }
      CHECK(err <= 1e-5 * scale + 1e-6);        // the int8 arithmetic, to float32 rounding
      CHECK(err_float <= (u8s8 ? 2e-2 : 1e-2) * scale + 1e-5);  // and within a percent or two of float32
    }
  }
  SECTION("a fused activation, a row of zeros, and a row holding NaN") {
    const Blob w = random_blob({20, 40}, rng, -0.5f, 0.5f);
    Blob x = random_blob({3, 40}, rng);
    for (int64_t i = 0; i < 40; ++i) x.data_as<float>()[40 + i] = 0;
    const Layer relu = dense(w, nullptr, "relu");
    const auto got = test::values(test::run_layer(relu, {x}, "cpu/dynamic_int8")[0]);
    for (float v : got) CHECK(v >= 0);
    for (int j = 0; j < 20; ++j) CHECK(got[static_cast<std::size_t>(20 + j)] == 0);
    x.data_as<float>()[5] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t u8s8 : {0, 1}) {
      const auto with_nan = run_form(dense(w, nullptr), x, u8s8);
      for (int j = 0; j < 20; ++j) CHECK(std::isnan(with_nan[static_cast<std::size_t>(j)]));  // as float32 has it
      for (int j = 40; j < 60; ++j) CHECK(std::isfinite(with_nan[static_cast<std::size_t>(j)]));
      const auto zeros = run_form(dense(w, nullptr), Blob::allocate(Shape{2, 40}), u8s8);  // zero-filled
      for (float v : zeros) CHECK(v == 0);
    }
  }
}

TEST_CASE("cpu/dynamic_int8: rows holding NaN or infinity come out as float32 has them, the others near float32",
          "[routines][dynamic_int8]") {
  if (!core::cpu_features().avx2_fma()) return;
  std::mt19937 rng(8);
  const int64_t k = 300, n = 200;
  const test::NonFiniteCase c = test::non_finite_case(k, n, rng);
  const Blob b = random_blob({n}, rng);
  const Layer l = dense(c.w, &b);
  const auto ref = test::values(test::run_layer(l, {c.x}, "cpu/ref")[0]);
  // The finite rows (0, 2, 5) as the routine computes them alone: on int8, not
  // in scalar float32 over every product (a layer holding one NaN took 900x
  // its time: BERT's 768 -> 3072 at 128 rows 0.45 -> 387 ms).
  Blob finite = Blob::allocate(Shape{3, k}, DType::float32);
  for (int r : {0, 2, 5})
    std::memcpy(finite.data_as<float>() + (r == 0 ? 0 : r == 2 ? 1 : 2) * k, c.x.data_as<float>() + r * k, 4 * k);
  for (int64_t u8s8 : {0, 1}) {
    INFO("u8s8 " << u8s8);
    const auto got = run_form(l, c.x, u8s8);
    CHECK(test::same_non_finite(got, ref));
    const auto alone = run_form(l, finite, u8s8);
    double scale = 0, err = 0;
    int row = 0;
    for (int r : {0, 2, 5}) {
      for (int64_t o = 0; o < n; ++o) {
        const auto i = static_cast<std::size_t>(r * n + o);
        CHECK(got[i] == alone[static_cast<std::size_t>(row * n + o)]);
        scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
        err = std::max(err, std::fabs(static_cast<double>(got[i]) - ref[i]));
      }
      ++row;
    }
    CHECK(err <= 2e-2 * scale);
  }
}

TEST_CASE("cpu/dynamic_int8's u8 weights packed for another CPU are packed again, not misread",
          "[routines][dynamic_int8]") {
  // A .dnn file keeps the packed weights; their range depends on the CPU (8
  // bits under VNNI, 7 where vpmaddubsw's pair sums must not saturate).
  if (!core::cpu_features().avx2_fma()) return;
  std::mt19937 rng(11);
  const Layer l = dense(random_blob({40, 64}, rng, -0.5f, 0.5f), nullptr);
  Schema schema;
  const Routine* r = core::RoutineRegistry::instance().find("dense", "cpu/dynamic_int8", &schema);
  REQUIRE(r);
  const PackInfo info{&l, {}, {}, 0};
  const RoutineParams u8{{"u8s8", 1}};
  const Blob saved = r->pack(info, schema, u8)->save();
  CHECK(r->unpack(saved, info, schema, u8));
  // The range is the fifth array's first value (40 channels: 3 blocks of 16 x
  // 64 K bytes, 48 lanes of scale, bias and column sums; then the form: range,
  // group, pair_safe; 4 fix starts, no fixes); the other CPU's makes unpack refuse.
  Blob other = saved.clone();
  const auto arrays = core::unpack_arrays(other, {3 * 16 * 64, 48 * 4, 48 * 4, 48 * 4, 12, 4 * 4, 0});
  REQUIRE(arrays);
  auto* qmax = reinterpret_cast<int32_t*>(const_cast<std::byte*>((*arrays)[4]));
  REQUIRE(*qmax == (vnni512() ? 127 : 63));
  *qmax = *qmax == 127 ? 63 : 127;
  CHECK_FALSE(r->unpack(other, info, schema, u8));
  // A file packed before the range was saved (four arrays): packed again too.
  CHECK_FALSE(r->unpack(Blob::allocate(Shape{16}, DType::quint8), info, schema, u8));
}

TEST_CASE("cpu/dynamic_int8 is reduced precision: never a default, a candidate only where qint8 is allowed",
          "[routines][dynamic_int8][tune]") {
  if (!core::cpu_features().avx2_fma()) return;
  auto& registry = core::RoutineRegistry::instance();
  CHECK(registry.precision("cpu/dynamic_int8") == DType::qint8);
  CHECK(registry.precision("cpu/onednn") == DType::float32);
  core::RoutinePath path;
  path.routines.push_back({"fc", "cpu/dynamic_int8", {}, 0, 0, {}});
  CHECK(core::computes_below_float32(path, {}, registry));
  CHECK(core::computes_below_float32(path, {"fc"}, registry));  // a model's own int8 layers are qint8 ones, not this

  std::mt19937 rng(3);
  const core::Graph g = fc_graph(rng);
  Model net = detail::make_model(g);
  for (const auto& l : Session(net).layers()) CHECK(l.descriptor != "cpu/dynamic_int8");  // the untuned default

  LayerInfo info;
  info.layer = &detail::impl_of(net).graph.layers[0];
  info.input_shapes = {Shape{2, 64}};
  info.output_shapes = {Shape{2, 32}};
  profiler::Rules float_only, hybrid;
  hybrid.schemas = {"cpu:float32:*", "cpu:qint8:*"};
  int seen = 0;
  for (const auto& c : registry.candidates(info))
    if (c.descriptor == "cpu/dynamic_int8") {
      ++seen;
      CHECK(c.support.ok);
      CHECK(c.precision() == DType::qint8);
      CHECK_FALSE(float_only.candidate_allowed(c));
      CHECK(hybrid.candidate_allowed(c));
    }
  CHECK(seen == 1);

  TuneOptions o;
  o.cache_dir = "-";
  o.unit_budget_ms = 0.5;
  o.integrated_runs = 2;
  o.pin = {{"fc", "cpu/dynamic_int8"}};
  SECTION("pinned in a float32 tuning: not a candidate, so the pin leaves the layer none") {
    CHECK_THROWS_WITH(tune(net, o), Catch::Contains("no routine can run this dense layer within the schemas and rules given"));
  }
  SECTION("pinned in a hybrid tuning: chosen, and the file says reduced precision") {
    o.schemas = {"cpu:float32:*", "cpu:qint8:*"};
    o.accuracy = "none";
    const Model t = tune(net, o);
    bool chosen = false;
    for (const auto& l : Session(t).layers()) chosen = chosen || l.descriptor == "cpu/dynamic_int8";
    CHECK(chosen);
    CHECK(t.accuracy_check().reduced_precision);
  }
}

TEST_CASE("a path measured on the first samples only scores what a validator of those samples scores",
          "[tune][accuracy]") {
  // The tuner measures each layer's sensitivity on the first 16 validation
  // samples (Validator::measure's max_samples) and validates paths on all.
  if (!core::cpu_features().avx2_fma()) return;
  std::mt19937 rng(5);
  const core::Graph g = fc_graph(rng);
  const auto net = detail::WorkingModel::build(g);
  std::vector<std::vector<NamedBlob>> samples;
  for (int k = 0; k < 6; ++k) samples.push_back({{"x", random_blob({2, 64}, rng, -3.f, 3.f)}});
  core::RoutinePath path;
  path.routines.push_back({"fc", "cpu/dynamic_int8", {}, 0, 0, {}});
  const profiler::AccuracyBudget budget = profiler::parse_accuracy("cosine:0.999");
  const profiler::Validator all(*net, samples, budget);
  const profiler::Validator first(*net, {samples.begin(), samples.begin() + 2}, budget);
  double cos_all = 0, cos_first = 0, cos_two = 0;
  const double two = all.measure(path, &cos_two, 2);
  CHECK(two == first.measure(path, &cos_first));
  CHECK(cos_two == cos_first);
  CHECK(all.measure(path, &cos_all) == all.measure(path, nullptr, 100));  // more than there are: all of them
  CHECK(two < 1.0);  // int8 products: below float32's 1
}

TEST_CASE("a path's validation stops once the samples left cannot bring it within the budget", "[tune][accuracy]") {
  // The tuner's budget search validates many paths that miss; ResNet50's
  // spent 43 s running every validation sample through each.
  if (!core::cpu_features().avx2_fma()) return;
  std::mt19937 rng(5);
  const core::Graph g = fc_graph(rng);
  const auto net = detail::WorkingModel::build(g);
  std::vector<std::vector<NamedBlob>> samples;
  for (int k = 0; k < 12; ++k) samples.push_back({{"x", random_blob({2, 64}, rng, -3.f, 3.f)}});
  core::RoutinePath path;
  path.routines.push_back({"fc", "cpu/dynamic_int8", {}, 0, 0, {}});
  for (const char* text : {"cosine:1", "rel-l2:0.0000001", "top1:1"}) {
    INFO(text);
    const profiler::Validator v(*net, samples, profiler::parse_accuracy(text));
    const double exact = v.measure(path);
    std::size_t stopped = 0;
    const double bound = v.measure(path, nullptr, std::numeric_limits<std::size_t>::max(), &stopped);
    if (v.budget().met_by(exact)) {  // (top1 may agree on every sample)
      CHECK(stopped == 0);
      CHECK(bound == exact);
      continue;
    }
    CHECK(stopped >= 1);
    CHECK(stopped < samples.size());
    CHECK_FALSE(v.budget().met_by(bound));
    // The best the samples left could have given: never worse than the exact value.
    if (v.budget().metric == profiler::AccuracyBudget::Metric::rel_l2) CHECK(bound <= exact);
    else CHECK(bound >= exact);
  }
  // A budget the path meets: every sample runs, the value is exact.
  const profiler::Validator loose(*net, samples, profiler::parse_accuracy("cosine:0.9"));
  std::size_t stopped = 7;
  CHECK(loose.measure(path, nullptr, std::numeric_limits<std::size_t>::max(), &stopped) == loose.measure(path));
  CHECK(stopped == 0);
}

TEST_CASE("a validation of every sample runs the least decided argmaxes first", "[tune][accuracy]") {
  // A path that misses a top1 budget flips the near ties first: run first,
  // they end a validation after a sample or two where in the given order it
  // ran until the first of them (ResNet50's misses on 300 calibration samples
  // ran 100-180 of them). The value of a path that meets it is the same.
  if (!core::cpu_features().avx2_fma()) return;
  core::Graph g;
  g.name = "identity";
  g.inputs = {{"x", Shape{2, 64}, DType::float32}};
  Blob eye = Blob::allocate(Shape{64, 64});
  for (int64_t i = 0; i < 64 * 64; ++i) eye.data_as<float>()[i] = i % 65 == 0 ? 1.0f : 0.0f;
  Layer fc = dense(eye, nullptr);
  fc.name = "fc";
  fc.inputs = {"x"};
  fc.outputs = {"y"};
  g.layers = {fc};
  g.outputs = {"y"};
  const auto net = detail::WorkingModel::build(g);
  std::mt19937 rng(3);
  auto sample = [&](bool near_tie) {
    Blob x = random_blob({2, 64}, rng, -0.3f, 0.3f);
    for (int r = 0; r < 2; ++r) {
      float* row = x.data_as<float>() + 64 * r;
      row[5] = 1.0f;  // the argmax
      if (near_tie) row[3] = 0.999f;  // on one step of the row's int8 grid with it: read as a tie, index 3 first
    }
    return std::vector<NamedBlob>{{"x", x}};
  };
  std::vector<std::vector<NamedBlob>> samples;
  for (int k = 0; k < 10; ++k) samples.push_back(sample(false));
  samples.push_back(sample(true));
  samples.push_back(sample(true));
  core::RoutinePath path;
  path.routines.push_back({"fc", "cpu/dynamic_int8", {}, 0, 0, {}});
  const profiler::Validator strict(*net, samples, profiler::parse_accuracy("top1:1"));
  const double exact = strict.measure(path);
  REQUIRE(exact < 1.0);  // the near ties flip
  std::size_t stopped = 0;
  CHECK_FALSE(strict.budget().met_by(strict.measure(path, nullptr, std::numeric_limits<std::size_t>::max(), &stopped)));
  CHECK(stopped == 1);
  // The first few samples (a sensitivity's) keep their order: none of them is a near tie.
  CHECK(strict.measure(path, nullptr, 10) == 1.0);
  // A budget it meets: every sample, whatever the order, the exact value.
  const profiler::Validator loose(*net, samples, profiler::parse_accuracy("top1:0.5"));
  CHECK(loose.measure(path, nullptr, std::numeric_limits<std::size_t>::max(), &stopped) == exact);
  CHECK(stopped == 0);
}

TEST_CASE("a layer's sensitivity measured from that layer on equals the whole net's measurement", "[tune][accuracy]") {
  // The tuner measures each layer's sensitivity (the net with that layer alone
  // below float32) from the layer on, reading the float32 values before it from
  // one kept run: ResNet50's 146 such measurements ran the whole net 2,336 times.
  if (!core::cpu_features().avx2_fma()) return;
  std::mt19937 rng(9);
  core::Graph g;
  g.name = "chain";
  g.inputs = {{"x", Shape{3, 64}, DType::float32}};
  auto fc = [&](const std::string& name, const std::string& in, const std::string& out) {
    Layer l = dense(random_blob({64, 64}, rng, -0.2f, 0.2f), nullptr);
    l.name = name;
    l.inputs = {in};
    l.outputs = {out};
    g.layers.push_back(std::move(l));
  };
  fc("fc0", "x", "h0");
  fc("fc1", "h0", "h1");
  Layer add = test::make_layer("add", {}, {}, 2, 1, "res");  // reads h0 from before fc2
  add.inputs = {"h1", "h0"};
  add.outputs = {"h2"};
  g.layers.push_back(add);
  fc("fc2", "h2", "y");
  g.outputs = {"y"};
  const auto net = detail::WorkingModel::build(g);
  std::vector<std::vector<NamedBlob>> samples;
  for (int k = 0; k < 5; ++k) samples.push_back({{"x", random_blob({3, 64}, rng, -2.f, 2.f)}});
  const profiler::Validator v(*net, samples, profiler::parse_accuracy("cosine:0.999"));
  for (std::size_t first = 0; first < g.layers.size(); ++first) {
    if (g.layers[first].type != "dense") continue;
    INFO(g.layers[first].name);
    core::RoutinePath alone;
    alone.routines.push_back({g.layers[first].name, "cpu/dynamic_int8", {}, 0, 0, {}});
    double whole_cos = 0, from_cos = 0;
    const double whole = v.measure(alone, &whole_cos, 4);
    const double from = v.measure_from(first, alone, &from_cos, 4);
    CHECK(whole < 1.0);  // the int8 products lose something
    CHECK(from == Approx(whole).margin(1e-6));
    CHECK(from_cos == Approx(whole_cos).margin(1e-6));
  }
}

TEST_CASE("range methods tied on the validation samples: meeting the budget on the calibration samples decides first",
          "[tune][accuracy]") {
  std::mt19937 rng(7);
  const auto net = detail::WorkingModel::build(fc_graph(rng));
  const profiler::Validator v(*net, {{{"x", random_blob({2, 64}, rng, -3.f, 3.f)}}}, profiler::parse_accuracy("top1:0.9"));
  using S = profiler::RangeMethodScore;
  auto score = [](double value, double confirmed, bool preferred, double cosine) {
    S s;
    s.value = value, s.confirmed = confirmed, s.preferred = preferred, s.cosine = cosine;
    return s;
  };
  // The validation value first, whatever else.
  CHECK(profiler::better_range_method(v, score(0.97, 0.5, false, 0.1), score(0.95, 1.0, true, 1.0)));
  // Tied there: the one meeting the budget on the calibration samples, over the earlier choice and the cosine.
  CHECK(profiler::better_range_method(v, score(1.0, 0.92, false, 0.1), score(1.0, 0.85, true, 1.0)));
  CHECK_FALSE(profiler::better_range_method(v, score(1.0, 0.85, true, 1.0), score(1.0, 0.92, false, 0.1)));
  // Both meet it there: a closer value alone does not outweigh the earlier choice.
  CHECK(profiler::better_range_method(v, score(1.0, 0.91, true, 0.1), score(1.0, 0.99, false, 1.0)));
  // Both miss it there, or it was not measured: the earlier choice, then the cosine.
  CHECK(profiler::better_range_method(v, score(1.0, 0.5, true, 0.1), score(1.0, 0.8, false, 1.0)));
  CHECK(profiler::better_range_method(v, score(1.0, NAN, false, 0.9), score(1.0, NAN, false, 0.8)));
  CHECK(profiler::ties_on_validation(v, 1.0, 1.0));
  CHECK_FALSE(profiler::ties_on_validation(v, 1.0, 0.99));
}

namespace {

/// A dynamic_quant_dense layer: weight [n, k] of int8 `w` with a scale per
/// output channel, and a bias.
Layer quant_dense(const std::vector<int8_t>& w, int64_t n, int64_t k, std::vector<float> scales, const Blob* bias) {
  Blob q = Blob::allocate(Shape{n, k}, DType::qint8);
  std::copy(w.begin(), w.end(), q.data_as<int8_t>());
  q.quant() = QuantParams{std::move(scales), {}, 0};
  std::map<std::string, Blob> weights{{"weight", q}};
  if (bias) weights["bias"] = *bias;
  return test::make_layer("dynamic_quant_dense", {}, weights);
}

/// cpu/dynamic_int8's packing of a dynamic_quant_dense layer, saved: its
/// arrays (weights, scales, biases, column sums, form, fix starts, fixes) and
/// its form (range, group, pair_safe).
struct SavedPacking {
  Blob bytes;
  std::vector<std::size_t> sizes;
  std::vector<const std::byte*> arrays;
  int32_t form[3] = {};
};

const Routine* quant_dense_routine(Schema& schema) {
  return core::RoutineRegistry::instance().find("dynamic_quant_dense", "cpu/dynamic_int8", &schema);
}

SavedPacking saved_packing(const Layer& l) {
  Schema schema;
  const Routine* r = quant_dense_routine(schema);
  REQUIRE(r);
  SavedPacking p{r->pack(PackInfo{&l, {}, {}, 0}, schema, {})->save()};
  const auto sizes = core::packed_array_sizes(p.bytes);
  REQUIRE(sizes);
  REQUIRE(sizes->size() == 7);
  p.sizes = *sizes;
  const auto& z = p.sizes;
  const auto arrays = core::unpack_arrays(p.bytes, {z[0], z[1], z[2], z[3], z[4], z[5], z[6]});
  REQUIRE(arrays);
  REQUIRE(z[4] == sizeof p.form);
  p.arrays = *arrays;
  std::memcpy(p.form, p.arrays[4], sizeof p.form);
  return p;
}

std::vector<std::string> quant_dense_routines() {
  std::vector<std::string> d{"cpu/ref"};
  if (core::cpu_features().avx2_fma()) d.push_back("cpu/dynamic_int8");
  return d;
}

}  // namespace

TEST_CASE("dynamic_quant_dense computes ONNX Runtime's quantize_dynamic arithmetic", "[routines][dynamic_int8]") {
  // x's range [-1, 2]: scale 3/255, zero point 85; q - 85 = [-85, 42, 170]
  // (0.5 / s = 42.5 rounds to even); sums 509 and -470.
  const std::vector<float> xv{-1.0f, 0.5f, 2.0f};
  Blob x = Blob::allocate(Shape{1, 3});
  std::copy(xv.begin(), xv.end(), x.data_as<float>());
  Blob b = Blob::allocate(Shape{2});
  b.data_as<float>()[0] = 0.1f;
  b.data_as<float>()[1] = 0.0f;
  const Layer l = quant_dense({1, 2, 3, -4, 5, -6}, 2, 3, {0.5f, 0.25f}, &b);
  const float s = 3.0f / 255.0f;
  for (const std::string& d : quant_dense_routines()) {
    INFO(d);
    const auto y = test::values(test::run_layer(l, {x}, d)[0]);
    REQUIRE(y.size() == 2);
    CHECK(y[0] == std::fma(509.0f, 0.5f * s, 0.1f));
    CHECK(y[1] == -470.0f * (0.25f * s));
  }
}

TEST_CASE("dynamic_quant_dense: cpu/dynamic_int8 gives cpu/ref's values bit for bit", "[routines][dynamic_int8]") {
  if (!core::cpu_features().avx2_fma()) return;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> wd(-127, 127);
  struct Case {
    Shape x;
    int64_t n;
    float lo, hi;  ///< the input's range: mixed, positive (zero point 0), negative (255), zeros (scale 1)
  };
  for (const Case& c : {Case{{1, 1}, 1, -1.f, 1.f}, Case{{3, 37}, 20, -2.f, 3.f}, Case{{2, 5, 40}, 24, 0.5f, 4.f},
                        Case{{13, 200}, 130, -3.f, -0.25f}, Case{{7, 64}, 64, 0.f, 0.f}, Case{{1, 128, 96}, 33, -1.f, 1.f}}) {
    const int64_t k = c.x[c.x.rank() - 1];
    std::vector<int8_t> w(static_cast<std::size_t>(c.n * k));
    for (auto& v : w) v = static_cast<int8_t>(wd(rng));
    std::vector<float> scales(static_cast<std::size_t>(c.n));
    for (auto& v : scales) v = std::uniform_real_distribution<float>(0.001f, 0.05f)(rng);
    const Blob b = random_blob({c.n}, rng);
    const Blob x = c.lo == c.hi ? Blob::allocate(c.x) : random_blob(c.x, rng, c.lo, c.hi);  // allocate: zeros
    for (bool with_bias : {false, true}) {
      INFO("x " << c.x.to_string() << " n " << c.n << (with_bias ? " with bias" : ""));
      const Layer l = quant_dense(w, c.n, k, scales, with_bias ? &b : nullptr);
      const auto want = test::values(test::run_layer(l, {x}, "cpu/ref")[0]);
      const auto got = test::values(test::run_layer(l, {x}, "cpu/dynamic_int8")[0]);
      REQUIRE(got.size() == want.size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
      CHECK(differ == 0);
    }
  }
  SECTION("an input holding NaN or infinity gives NaN everywhere") {
    const Layer l = quant_dense(std::vector<int8_t>(12, 3), 3, 4, {0.1f, 0.1f, 0.1f}, nullptr);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      Blob x = random_blob({2, 4}, rng);
      x.data_as<float>()[5] = bad;
      for (const std::string& d : quant_dense_routines()) {
        INFO(d << " " << bad);
        for (float v : test::values(test::run_layer(l, {x}, d)[0])) CHECK(std::isnan(v));
      }
    }
  }
}

TEST_CASE("dynamic_quant_dense without VNNI: vpmaddubsw on 8-bit weights, pairs that could saturate fixed exactly",
          "[routines][dynamic_int8]") {
  // Same-sign weight pairs past 128 in magnitude (127 + 127; -127 - 2) would
  // saturate vpmaddubsw's int16 pair sums at u8 values near 255: the larger of
  // each is cut to 128 minus the other and the cut added back (PairFix). Small weights elsewhere, as in a
  // trained layer, so the fixes stay few and the u8 form is kept.
  if (!core::cpu_features().avx2_fma()) return;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-40, 40);
  struct Case {
    Shape x;
    int64_t n;
  };
  for (const Case& c : {Case{{5, 200}, 40}, Case{{130, 96}, 33}, Case{{4, 255}, 20}}) {
    const int64_t k = c.x[c.x.rank() - 1];
    std::vector<int8_t> w(static_cast<std::size_t>(c.n * k));
    for (auto& v : w) v = static_cast<int8_t>(small(rng));
    // Pairs (k even, k + 1) over the limit, one at the last odd K (its partner is padding), and two at it.
    const int last = static_cast<int>((k - 1) & ~int64_t(1));
    const std::vector<std::array<int, 4>> pairs{{0, 0, 127, 127},  {1, 2, -127, -127}, {7, 4, 127, 100},
                                                {static_cast<int>(c.n - 1), 0, -2, -127},
                                                {3, 2, 64, 64},    {5, 0, 65, 64},     {2, last, 127, 127}};
    for (const auto& [o, kk, w0, w1] : pairs) {
      w[static_cast<std::size_t>(o * k + kk)] = static_cast<int8_t>(w0);
      if (kk + 1 < k) w[static_cast<std::size_t>(o * k + kk + 1)] = static_cast<int8_t>(w1);
    }
    std::vector<float> scales(static_cast<std::size_t>(c.n), 0.01f);
    const Blob b = random_blob({c.n}, rng);
    // Inputs at the range's ends put u8 values of 255 (and 0) under the big pairs.
    Blob x = random_blob(c.x, rng, -1.0f, 1.0f);
    float* xv = x.data_as<float>();
    for (int64_t i = 0; i < x.shape().numel(); i += 3) xv[i] = i % 2 ? -1.0f : 3.0f;
    const Layer l = quant_dense(w, c.n, k, scales, &b);
    INFO("x " << c.x.to_string() << " n " << c.n);
    const auto want = test::values(test::run_layer(l, {x}, "cpu/ref")[0]);
    const auto got = test::values(test::run_layer(l, {x}, "cpu/dynamic_int8")[0]);
    REQUIRE(got.size() == want.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
    CHECK(differ == 0);
    if (vnni512()) continue;
    // The packing: the u8 form with safe pairs and one fix per unsafe pair.
    const SavedPacking p = saved_packing(l);
    CHECK(p.form[0] == 127);
    CHECK(p.form[1] == 4);
    CHECK(p.form[2] == 1);
    // 127,127 / -127,-127 / 127,100 / -2,-127 / 65,64 / and 127,127 at the last pair unless its partner is padding.
    const std::size_t unsafe = k % 2 ? 5 : 6;
    CHECK(p.sizes[6] == unsafe * sizeof(dynamic_int8::PairFix));
    Schema schema;
    CHECK(quant_dense_routine(schema)->unpack(p.bytes, PackInfo{&l, {}, {}, 0}, schema, {}));
  }
  SECTION("weights whose pairs mostly need fixes: the int16 form") {
    std::vector<int8_t> w(32 * 64, 120);
    const Layer l = quant_dense(w, 32, 64, std::vector<float>(32, 0.01f), nullptr);
    const Blob x = random_blob({3, 64}, rng, -1.0f, 2.0f);
    CHECK(test::values(test::run_layer(l, {x}, "cpu/dynamic_int8")[0]) ==
          test::values(test::run_layer(l, {x}, "cpu/ref")[0]));
    if (vnni512()) return;
    const SavedPacking p = saved_packing(l);
    CHECK(p.form[1] == 2);
    CHECK(p.sizes[6] == 0);
  }
  SECTION("a packing whose fixes are out of range is packed again, never read") {
    std::vector<int8_t> w(16 * 512, 3);
    w[0] = w[1] = 127;
    const Layer l = quant_dense(w, 16, 512, std::vector<float>(16, 0.01f), nullptr);
    if (vnni512()) return;
    const SavedPacking p = saved_packing(l);
    REQUIRE(p.sizes[6] == sizeof(dynamic_int8::PairFix));
    Schema schema;
    const Routine* r = quant_dense_routine(schema);
    const PackInfo info{&l, {}, {}, 0};
    REQUIRE(r->unpack(p.bytes, info, schema, {}));
    Blob bad = p.bytes.clone();
    auto* fix = reinterpret_cast<dynamic_int8::PairFix*>(static_cast<std::byte*>(bad.data()) +
                                                         (p.arrays[6] - static_cast<const std::byte*>(p.bytes.data())));
    fix->k = 512;  // past K
    CHECK_FALSE(r->unpack(bad, info, schema, {}));
  }
}
