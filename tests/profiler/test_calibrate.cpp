// Net::calibrate(): every blob gets a quantisation whose range holds the
// values observed; .dnn files keep it; a net tuned with qint8 schemas runs
// and stays close to its float32 results.
#include "core/cpu_features.hpp"
#include "core/net_impl.hpp"
#include "profiler/calibrate.hpp"
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/net.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

using namespace softneuro;

namespace {

Blob normal_blob(const Shape& s, unsigned seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  Blob b = Blob::allocate(s);
  for (int64_t i = 0; i < s.numel(); ++i) b.data_as<float>()[i] = d(rng);
  return b;
}

Layer layer(std::string name, std::string type, std::vector<std::string> in, std::string out,
            std::map<std::string, Attr> params = {}, std::map<std::string, Blob> weights = {}) {
  Layer l;
  l.name = std::move(name);
  l.type = std::move(type);
  l.inputs = std::move(in);
  l.outputs = {std::move(out)};
  l.params = std::move(params);
  l.weights = std::move(weights);
  return l;
}

/// A small random conv net: conv3x3+relu, conv3x3 (stride 2), residual 1x1,
/// add, relu, max pool, depthwise, concat, global pool, dense, softmax.
core::Graph conv_net() {
  core::Graph g;
  g.name = "small-conv";
  g.inputs = {{"input", Shape{1, 8, 16, 16}, DType::float32}};
  unsigned seed = 100;
  auto conv = [&](const std::string& name, const std::string& in, int64_t cin, int64_t cout, int64_t k, int64_t stride,
                  int64_t group = 1, const std::string& act = "none") {
    float he = std::sqrt(2.0f / static_cast<float>(cin / group * k * k));
    std::map<std::string, Attr> p{{"strides", std::vector<int64_t>{stride, stride}},
                                  {"pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2}}, {"group", group}};
    if (act != "none") p["act"] = act;
    g.layers.push_back(layer(name, "conv2", {in}, name, p,
                             {{"weight", normal_blob(Shape{cout, cin / group, k, k}, seed++, he)}, {"bias", normal_blob(Shape{cout}, seed++, 0.1f)}}));
    return name;
  };
  auto a = conv("c1", "input", 8, 16, 3, 1, 1, "relu");
  auto b = conv("c2", a, 16, 16, 3, 2);
  auto r = conv("c3", a, 16, 16, 1, 2);
  g.layers.push_back(layer("sum", "add", {b, r}, "sum"));
  g.layers.push_back(layer("act", "relu", {"sum"}, "act"));
  g.layers.push_back(layer("pool", "pool2", {"act"}, "pool",
                           {{"mode", std::string("max")}, {"kernel", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}}));
  auto d = conv("dw", "pool", 16, 16, 3, 1, 16, "relu");
  g.layers.push_back(layer("cat", "concat", {"pool", d}, "cat", {{"axis", int64_t{1}}}));
  g.layers.push_back(layer("gap", "pool2", {"cat"}, "gap", {{"mode", std::string("avg")}, {"global", int64_t{1}}}));
  g.layers.push_back(layer("flat", "flatten", {"gap"}, "flat", {{"axis", int64_t{1}}}));
  g.layers.push_back(layer("fc", "dense", {"flat"}, "logits", {}, {{"weight", normal_blob(Shape{10, 32}, seed++, 0.3f)}, {"bias", normal_blob(Shape{10}, seed++, 0.1f)}}));
  g.outputs = {"logits"};
  return g;
}

std::vector<float> run_net(Net& net, const Blob& x) {
  return test::values(net.run(std::vector<NamedBlob>{{net.inputs()[0].name, x}})[0].blob);
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb + 1e-30);
}

/// Every blob's values, from a float32 run of `g` with every layer output made a net output.
std::map<std::string, Blob> all_blobs(core::Graph g, const Blob& x) {
  std::set<std::string> outs(g.outputs.begin(), g.outputs.end());
  for (const auto& l : g.layers)
    for (const auto& o : l.outputs)
      if (outs.insert(o).second) g.outputs.push_back(o);
  g.blob_quant.clear();
  Net net(detail::NetImpl::build(g));
  auto res = net.run(std::vector<NamedBlob>{{g.inputs[0].name, x}});
  std::map<std::string, Blob> m;
  for (auto& r : res) m[r.name] = r.blob;
  m[g.inputs[0].name] = x;
  return m;
}

TuneOptions quick(const std::string& name, std::vector<std::string> schemas) {
  TuneOptions o;
  o.cache_dir = test::temp_path(name);
  std::filesystem::remove_all(o.cache_dir);
  o.unit_budget_ms = 0.5;
  o.integrated_runs = 2;
  o.schemas = std::move(schemas);
  return o;
}

}  // namespace

TEST_CASE("quantisation of a range: includes zero, maps the ends to -128 and 127", "[calibrate]") {
  auto q = profiler::quant_from_range(-1.0, 3.0);
  REQUIRE(q.scales.size() == 1);
  CHECK(q.scales[0] == Approx(4.0 / 255));
  CHECK(q.zero_points[0] == -128 + 64);
  auto pos = profiler::quant_from_range(2.0, 5.0);  // widened to [0, 5]
  CHECK(pos.zero_points[0] == -128);
  CHECK(pos.scales[0] == Approx(5.0 / 255));
  auto neg = profiler::quant_from_range(-5.0, -1.0);  // widened to [-5, 0]
  CHECK(neg.zero_points[0] == 127);
  auto zero = profiler::quant_from_range(0.0, 0.0);  // max == min: a valid positive scale
  CHECK(zero.scales[0] > 0);
  CHECK(std::isfinite(zero.scales[0]));
}

TEST_CASE("calibration quantises every blob and its range holds the observed values", "[calibrate]") {
  core::Graph g = conv_net();
  Net net(detail::NetImpl::build(g));
  Blob x = normal_blob(Shape{1, 8, 16, 16}, 7);
  Blob x2 = normal_blob(Shape{1, 8, 16, 16}, 8, 2.0f);
  CalibrationOptions opt;
  opt.inputs = {{{"input", x}}, {{"input", x2}}};
  net.calibrate(opt);
  const auto& bq = net.impl().graph.blob_quant;
  auto blobs = all_blobs(g, x);
  auto blobs2 = all_blobs(g, x2);
  CHECK(bq.size() == blobs.size());
  for (const auto& [name, value] : blobs) {
    INFO(name);
    REQUIRE(bq.count(name));
    const QuantParams& q = bq.at(name);
    REQUIRE(q.scales.size() == 1);
    REQUIRE(q.zero_points.size() == 1);
    CHECK(q.axis == -1);
    const double lo = q.scales[0] * (-128 - q.zero_points[0]), hi = q.scales[0] * (127 - q.zero_points[0]);
    CHECK(lo <= 0.0);
    CHECK(hi >= 0.0);
    double mn = 0, mx = 0;
    for (const Blob* b : {&value, static_cast<const Blob*>(&blobs2.at(name))})
      for (int64_t i = 0; i < b->numel(); ++i) mn = std::min(mn, double(b->data_as<float>()[i])), mx = std::max(mx, double(b->data_as<float>()[i]));
    // A blob read only by relu layers starts at 0: its negative values all give 0 there.
    bool relu_only = true, read = false;
    for (const Layer& l : g.layers)
      if (std::find(l.inputs.begin(), l.inputs.end(), name) != l.inputs.end()) read = true, relu_only = relu_only && l.type == "relu";
    if (read && relu_only && std::find(g.outputs.begin(), g.outputs.end(), name) == g.outputs.end()) mn = 0;
    // The range holds every value (up to half a step of zero-point rounding) and is no wider than needed.
    CHECK(lo <= mn + q.scales[0] * 0.51);
    CHECK(hi >= mx - q.scales[0] * 0.51);
    CHECK(hi - lo <= (mx - mn) * 1.0001 + 1e-6);
  }

  // A percentile below 100 clips rare outliers: never a wider range.
  Net clipped(detail::NetImpl::build(g));
  opt.percentile = 99.0;
  clipped.calibrate(opt);
  for (const auto& [name, q] : clipped.impl().graph.blob_quant) CHECK(q.scales[0] <= bq.at(name).scales[0] * 1.0001);

  // Bad inputs are errors naming the input.
  Net other(detail::NetImpl::build(g));
  CalibrationOptions bad;
  bad.inputs = {{{"nope", x}}};
  CHECK_THROWS_AS(other.calibrate(bad), Error);
  bad.percentile = 0;
  CHECK_THROWS_AS(other.calibrate(bad), Error);
}

TEST_CASE("calibration survives a .dnn round trip and synthetic inputs are deterministic", "[calibrate]") {
  Net net(detail::NetImpl::build(conv_net()));
  net.calibrate();  // synthetic N(0,1) batches
  std::string path = test::temp_path("calibrated.dnn");
  net.save(path);
  Net loaded = Net::load(path);
  CHECK(loaded.impl().graph.blob_quant == net.impl().graph.blob_quant);
  Net again(detail::NetImpl::build(conv_net()));
  again.calibrate();
  CHECK(again.impl().graph.blob_quant == net.impl().graph.blob_quant);
}

TEST_CASE("a net tuned with qint8 schemas runs and stays close to float32", "[calibrate][tune][qint8]") {
  Blob x = normal_blob(Shape{1, 8, 16, 16}, 31);
  Net reference(detail::NetImpl::build(conv_net()));
  const auto want = run_net(reference, x);

  SECTION("hybrid: cpu and cpu:qint8") {
    Net net(detail::NetImpl::build(conv_net()));
    TuneReport r = net.tune(quick("calib-hybrid", {"cpu", "cpu:qint8"}));
    CHECK_FALSE(net.impl().graph.blob_quant.empty());  // calibrated on the way
    CHECK(r.measured_ms > 0);
    const auto got = run_net(net, x);
    CHECK(cosine(got, want) >= 0.99);
  }
  SECTION("qint8 only: layers without a qint8 routine fall back to float32") {
    Net net(detail::NetImpl::build(conv_net()));
    TuneOptions o = quick("calib-q8", {"cpu:qint8"});
    o.accuracy = "cosine:0.99";  // this random net's logits are close: argmax agreement is not the point here
    net.tune(o);
    int quantised = 0;
    for (const auto& l : net.layers())
      if (l.type != "adapt") quantised += l.descriptor.find("qint8") != std::string::npos;
    const auto got = run_net(net, x);
    INFO("qint8 layers: " << quantised);
    CHECK(cosine(got, want) >= 0.99);
    // Every layer type of this net has a qint8 routine, with AVX2 (cpu:qint8:nhwc/qint8).
    if (core::cpu_features().avx2_fma()) CHECK(quantised >= 8);
    std::string path = test::temp_path("q8.dnn");
    net.save(path);
    Net loaded = Net::load(path);
    const auto again = run_net(loaded, x);
    CHECK(again == got);
  }
}

// Before, hybrid tuning chose qint8 wherever it measured faster, whatever it
// did to the outputs (a trained OCR recogniser went from 19 of 20 lines to 0).
TEST_CASE("a qint8 path that misses the accuracy budget is never saved", "[calibrate][tune][accuracy]") {
  if (!core::cpu_features().avx2_fma()) return;  // no qint8 routine to pin
  Blob x = normal_blob(Shape{1, 8, 16, 16}, 31);
  Net reference(detail::NetImpl::build(conv_net()));
  const auto want = run_net(reference, x);
  SECTION("every layer pinned to qint8: no float32 path may replace it, so tuning refuses") {
    Net net(detail::NetImpl::build(conv_net()));
    TuneOptions o = quick("accuracy-pinned", {"cpu", "cpu:qint8", "cpu:qint8:nhwc"});
    o.pin = {{"c*", "cpu:qint8*"}, {"dw", "cpu:qint8*"}, {"fc", "cpu:qint8*"}};
    o.accuracy = "cosine:0.9999999";  // beyond what 8 bits can hold
    o.validation = {{{"input", x}}};
    CHECK_THROWS_WITH(net.tune(o), Catch::Contains("misses the accuracy budget cosine:0.9999999"));
  }
  SECTION("hybrid under an impossible budget keeps a float32 path and says so") {
    Net net(detail::NetImpl::build(conv_net()));
    TuneOptions o = quick("accuracy-hybrid", {"cpu", "cpu:qint8", "cpu:qint8:nhwc"});
    o.accuracy = "cosine:0.9999999";
    o.validation = {{{"input", x}}};
    TuneReport r = net.tune(o);
    CHECK(r.accuracy_budget == "cosine:0.9999999");
    for (const auto& l : net.layers()) CHECK(l.descriptor.find("qint8") == std::string::npos);
    if (r.accuracy >= 0) {  // DPRS chose some qint8 layer: measured, missed, replaced
      CHECK(r.accuracy_missed);
      CHECK(r.accuracy < 0.9999999);
      CHECK(r.to_text().find("missed, a float32 path is kept") != std::string::npos);
    }
    CHECK(cosine(run_net(net, x), want) >= 0.99999);
  }
  SECTION("a budget it meets keeps the measured value in the report") {
    Net net(detail::NetImpl::build(conv_net()));
    TuneOptions o = quick("accuracy-loose", {"cpu:qint8", "cpu:qint8:nhwc"});
    o.accuracy = "rel-l2:10";
    TuneReport r = net.tune(o);  // no validation samples: synthetic, with a warning
    CHECK(r.validation_synthetic);
    CHECK(r.accuracy >= 0);
    CHECK_FALSE(r.accuracy_missed);
  }
}

TEST_CASE("a budget between float32 and the unconstrained hybrid path is met by the search", "[calibrate][tune][accuracy]") {
  if (!core::cpu_features().avx2_fma()) return;
  Blob x = normal_blob(Shape{1, 8, 16, 16}, 32);
  std::vector<std::vector<NamedBlob>> val{{{"input", x}}, {{"input", normal_blob(Shape{1, 8, 16, 16}, 33)}}};
  Net reference(detail::NetImpl::build(conv_net()));
  // qint8 everywhere it can run: the most accuracy lost.
  Net q(detail::NetImpl::build(conv_net()));
  TuneOptions oq = quick("accuracy-search-q", {"cpu:qint8", "cpu:qint8:nhwc"});
  oq.accuracy = "cosine:0.5";
  oq.validation = val;
  TuneReport rq = q.tune(oq);
  REQUIRE(rq.accuracy > 0);
  const double budget = 1 - (1 - rq.accuracy) / 3;  // a third of that loss
  INFO("qint8-only cosine " << rq.accuracy << ", budget " << budget);
  Net net(detail::NetImpl::build(conv_net()));
  TuneOptions o = quick("accuracy-search", {"cpu", "cpu:qint8", "cpu:qint8:nhwc"});
  o.accuracy = fmt::format("cosine:{:.9f}", budget);
  o.validation = val;
  TuneReport r = net.tune(o);
  INFO(r.to_text());
  CHECK_FALSE(r.accuracy_missed);
  if (r.accuracy >= 0) CHECK(r.accuracy >= budget);
  // Measured here, outside the tuner: the saved path keeps the budget on the samples.
  double sum = 0;
  for (const auto& sample : val) sum += cosine(run_net(net, sample[0].blob), run_net(reference, sample[0].blob));
  CHECK(sum / static_cast<double>(val.size()) >= budget - 1e-6);
}

TEST_CASE("accuracy budgets are parsed strictly", "[accuracy]") {
  Net net(detail::NetImpl::build(conv_net()));
  for (const char* bad : {"top1", "top1:1.5", "cosine:0", "rel-l2:-1", "l1:0.5", "top1:0.9x", "top1:nan"}) {
    INFO(bad);
    TuneOptions o = quick("accuracy-parse", {"cpu", "cpu:qint8"});
    o.accuracy = bad;
    CHECK_THROWS_AS(net.tune(o), Error);
  }
}

TEST_CASE("a calibrated but untuned net computes in float32 on the CPU", "[calibrate]") {
  // qint8 routines once won the untuned default on calibrated nets (their
  // priority beat cpu/ref's), inserting quantise/dequantise adapts nobody asked for.
  // multi_io_graph has a flatten (float32: cpu/ref only) after a pool that oneDNN runs blocked.
  softneuro::Net net(softneuro::detail::NetImpl::build(softneuro::test::multi_io_graph()));
  net.calibrate();
  for (const auto& l : net.layers()) {
    INFO(l.name << " " << l.descriptor);
    CHECK(l.descriptor.find("qint8") == std::string::npos);
  }
}

TEST_CASE("the calibration cache returns the same quantisation and ignores a damaged file", "[calibrate]") {
  namespace fs = std::filesystem;
  const std::string dir = test::temp_path("calibration-cache");
  fs::remove_all(dir);
  Net fresh(detail::NetImpl::build(conv_net()));
  profiler::calibrate(fresh.impl(), {}, dir);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "calibration")) files.push_back(e.path());
  REQUIRE(files.size() == 1);

  Net cached(detail::NetImpl::build(conv_net()));
  profiler::calibrate(cached.impl(), {}, dir);
  CHECK(cached.impl().graph.blob_quant == fresh.impl().graph.blob_quant);

  // Other options (or another net) mean another key, never the cached answer.
  Net clipped(detail::NetImpl::build(conv_net()));
  CalibrationOptions p99;
  p99.percentile = 99.0;
  profiler::calibrate(clipped.impl(), p99, dir);
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(fs::path(dir) / "calibration")) ++count;
  CHECK(count == 2);

  // A flipped byte: warned about, calibrated again, same result.
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('#');
  }
  Net damaged(detail::NetImpl::build(conv_net()));
  profiler::calibrate(damaged.impl(), {}, dir);
  CHECK(damaged.impl().graph.blob_quant == fresh.impl().graph.blob_quant);
}
