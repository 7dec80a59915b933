// Layout adapts: every pair round-trips exactly; the executor inserts them
// where a routine computes in another schema, and results do not change.
#include "core/cpu_features.hpp"
#include "core/model_impl.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/routine.hpp>

#include <catch2/catch.hpp>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <random>

using namespace softneuro;

namespace {

/// `in` through the adapt `descriptor` (its target schema), from `from`.
Blob adapt(const Blob& in, const Schema& from, const std::string& descriptor) {
  Layer l = test::make_layer("adapt", {{"from", from.to_string()}});
  Schema target;
  const Routine* r = core::RoutineRegistry::instance().find("adapt", descriptor, &target);
  REQUIRE(r);
  LayerInfo info{&l, {in.shape()}, {in.shape()}, {}, {}};
  const Support ok = r->supports(info, target);
  INFO(descriptor << ": " << ok.reason);
  REQUIRE(ok.ok);
  auto prepared = r->prepare(info, target, {});
  Blob out = Blob::allocate(in.shape(), target.dtype, target.layout);
  std::memset(out.data(), 0x5a, out.byte_size());  // a blocked layout's padding must be zeroed
  const Blob* ins[] = {&in};
  Blob* outs[] = {&out};
  prepared->run(RunArgs{ins, outs, nullptr, &core::global_pool()});
  return out;
}

Blob convert(const Blob& in, Layout from, Layout to) {
  return adapt(in, Schema{Device::cpu, DType::float32, from}, make_descriptor(Schema{Device::cpu, DType::float32, to}, "reorder"));
}

}  // namespace

TEST_CASE("layout adapts round-trip every pair exactly", "[adapt]") {
  const Layout layouts[] = {Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c};
  std::mt19937 rng(11);
  for (Shape s : {Shape{1, 3, 5, 7}, Shape{2, 8, 4, 4}, Shape{1, 17, 3, 2}, Shape{3, 20}, Shape{2, 9, 2, 3, 2},
                  Shape{2, 70, 6, 7}, Shape{1, 130, 1, 1},  // these two span several tiles
                  Shape{1, 3, 40, 30}, Shape{2, 5, 33, 20}}) {  // an image of few channels: several runs of positions
    Blob x = test::iota_blob(s, 0.25f, -3.0f);
    for (Layout a : layouts)
      for (Layout b : layouts) {
        if (a == b) continue;
        INFO(s.to_string() << " " << to_string(a) << " -> " << to_string(b));
        Blob in_a = a == Layout::nchw ? x : convert(x, Layout::nchw, a);
        Blob in_b = convert(in_a, a, b);
        if (int64_t blk = b == Layout::nchw8c ? 8 : b == Layout::nchw16c ? 16 : 0) {
          // Padded channels are zero.
          int64_t c = s[1], cb = (c + blk - 1) / blk, sp = s.numel() / s[0] / c;
          const float* p = in_b.data_as<float>();
          for (int64_t n = 0; n < s[0]; ++n)
            for (int64_t ch = c; ch < cb * blk; ++ch)
              for (int64_t k = 0; k < sp; ++k) CHECK(p[((n * cb + ch / blk) * sp + k) * blk + ch % blk] == 0.0f);
        }
        Blob back = b == Layout::nchw ? in_b : convert(in_b, b, Layout::nchw);
        CHECK(test::values(Blob::view(back.data(), s)) == test::values(x));
      }
  }
}


TEST_CASE("float32 nchw reaches bfloat16 nhwc in one pass, as a reorder and a cast give it", "[adapt]") {
  const Schema nchw{Device::cpu, DType::float32, Layout::nchw}, nhwc{Device::cpu, DType::float32, Layout::nhwc};
  const Schema bf16_nhwc{Device::cpu, DType::bfloat16, Layout::nhwc};
  const Routine* r = core::RoutineRegistry::instance().find("adapt", "cpu:bfloat16:nhwc/reorder", nullptr);
  REQUIRE(r);
  const core::CpuFeatures& f = core::cpu_features();
  const bool avx512bw = f.avx512f && f.avx512bw && f.avx512vl;
  for (Schema from : {nchw, nhwc}) {
    Layer lf = test::make_layer("adapt", {{"from", from.to_string()}});
    LayerInfo info{&lf, {Shape{1, 3, 5, 5}}, {Shape{1, 3, 5, 5}}, {}, {}};
    CHECK(r->supports(info, bf16_nhwc).ok == (from == nchw && avx512bw));
  }
  if (!avx512bw) {
    WARN("no AVX-512 BW: the chain of a reorder and a cast converts the image, nothing to compare");
    return;
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-300.0f, 300.0f);
  // Images of three channels (their own kernel), and other channel counts and ranks (tiles of 32 x 32).
  for (Shape s : {Shape{1, 3, 224, 224}, Shape{2, 3, 7, 9}, Shape{1, 3, 1, 1}, Shape{3, 3, 17, 31}, Shape{1, 64, 9, 11},
                  Shape{2, 37, 33, 5}, Shape{1, 1, 20, 20}, Shape{2, 70}, Shape{5}}) {
    Blob x = Blob::allocate(s, DType::float32, Layout::nchw);
    float* p = x.data_as<float>();
    for (int64_t i = 0; i < s.numel(); ++i) p[i] = u(rng);
    // Values whose rounding is special: ties (even and odd), NaN, infinities, subnormals, the largest finite.
    const float special[] = {1.00390625f, 1.01171875f, NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -3e-39f,
                             3.4028235e38f, 0.0f, -0.0f};
    for (std::size_t i = 0; i < std::size(special) && i < static_cast<std::size_t>(s.numel()); ++i)
      p[(i * 7919) % static_cast<std::size_t>(s.numel())] = special[i];
    INFO(s.to_string());
    const Blob one_pass = adapt(x, nchw, "cpu:bfloat16:nhwc/reorder");
    const Blob two = adapt(adapt(x, nchw, "cpu:float32:nhwc/reorder"), nhwc, "cpu:bfloat16:nhwc/cast");
    REQUIRE(one_pass.byte_size() == two.byte_size());
    CHECK(std::memcmp(one_pass.data(), two.data(), one_pass.byte_size()) == 0);
  }
}

namespace {
// A tanh computing in nhwc, put first in tanh's default order, so the default choice puts
// the layer in another layout and the executor must insert adapts around it.
class NhwcTanh final : public Routine {
 public:
  std::string_view layer_type() const override { return "tanh"; }
  std::string_view algorithm() const override { return "test_nhwc"; }
  std::vector<Schema> schemas() const override { return {Schema::parse("cpu:float32:nhwc")}; }
  Support supports(const LayerInfo&, const Schema&) const override { return Support::yes(); }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo&, const Schema&, const RoutineParams&) const override {
    struct P final : PreparedRoutine {
      void run(const RunArgs& a) override {
        const float* x = a.inputs[0]->data_as<float>();
        float* y = a.outputs[0]->data_as<float>();
        for (int64_t i = 0, n = a.inputs[0]->numel(); i < n; ++i) y[i] = std::tanh(x[i]);
      }
    };
    return std::make_unique<P>();
  }
};
}  // namespace

TEST_CASE("the executor inserts adapts where schemas differ, and results hold", "[adapt]") {
  auto g = test::chain_graph(10);  // has tanh layers between nchw layers
  Blob x = test::iota_blob({1, 4, 8, 8}, 0.01f, -1.0f);
  std::vector<NamedBlob> in{{"input", x}};
  auto want = test::values(Session(detail::make_model(g)).run(in)[0].blob);

  // Its own registry, tanh's default order rewritten in it: the process's, which
  // every other test's nets read, stays as it is (rewriting that once made
  // another test fail).
  auto registry = std::make_shared<core::RoutineRegistry>(core::RoutineRegistry::instance());
  registry->add(std::make_unique<NhwcTanh>(), "test");
  registry->set_default_order("tanh", {{"cpu:float32:nhwc/test_nhwc"}});
  Model net = detail::make_model(g, {}, {}, registry);
  CHECK(core::RoutineRegistry::instance().find("tanh", "cpu:float32:nhwc/test_nhwc", nullptr) == nullptr);
  int adapts = 0, nhwc = 0;
  const auto layers = Session(net).layers();
  const auto schema_of = [](const std::string& descriptor) { return descriptor.substr(0, descriptor.find('/')); };
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    adapts += l.type == "adapt";
    nhwc += l.descriptor == "cpu:float32:nhwc/test_nhwc";
    // Each tanh reads nhwc: from an adapt, or from a producer already in nhwc
    // (the default choice may put its neighbours there too, e.g. cpu:float32:nhwc/xnnpack).
    if (l.descriptor == "cpu:float32:nhwc/test_nhwc") {
      REQUIRE(i > 0);
      const auto& prev = layers[i - 1];
      INFO(prev.name << " " << prev.descriptor);
      CHECK((prev.type == "adapt" || schema_of(prev.descriptor) == "cpu:float32:nhwc"));
    }
  }
  CHECK(nhwc == 2);
  CHECK(adapts >= 2);  // at least into nhwc from the plain input, and out of it to the plain output
  auto got = test::values(Session(net).run(in)[0].blob);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
}

TEST_CASE("the executor takes an edge's adapt from the routine path and shows its times", "[adapt]") {
  auto g = test::chain_graph(4);
  core::Tuning tuning;
  const Layer& first = g.layers.front();
  const Layer& second = g.layers[1];
  // Run the first layer in nchw8c, the second in nhwc: one adapt between them.
  // (Without AVX2 oneDNN has only reference code for nchw8c and refuses it:
  // then the first layer runs cpu/ref, in plain nchw.)
  Schema blocked{Device::cpu, DType::float32, Layout::nchw8c};
  tuning.routine_path.device_fingerprint = "test";
  auto pick = [&](const Layer& l, Layout layout) {
    const std::string d = Schema{Device::cpu, DType::float32, layout}.to_string() + "/onednn";
    auto all = registered_routines(l.type);
    return std::find(all.begin(), all.end(), d) != all.end() ? d : std::string();
  };
  std::string d1 = pick(first, Layout::nchw8c), d2 = pick(second, Layout::nhwc);
  REQUIRE(!d1.empty());  // oneDNN routines exist for every layout
  REQUIRE(!d2.empty());
  {
    Schema s;
    const Routine* r = core::RoutineRegistry::instance().find(first.type, d1, &s);
    REQUIRE(r);
    if (!r->supports(LayerInfo{&first, {g.inputs[0].shape}, {g.inputs[0].shape}}, s).ok) {  // 3x3 pad 1: same shape
      d1 = "cpu/ref";
      blocked = Schema{};
    }
  }
  tuning.routine_path.routines.push_back({first.name, d1, {}, 0.5, 0.6});
  tuning.routine_path.routines.push_back({second.name, d2, {}, 0.25, 0.3});
  tuning.routine_path.adapts.push_back({first.outputs[0], second.name, blocked.to_string(), "cpu:float32:nhwc",
                                   {"cpu:float32:nhwc/reorder"}, 0.125});
  Model net = detail::make_model(g, tuning);
  bool found = false;
  for (const auto& l : Session(net).layers()) {
    if (l.name == first.name) {
      CHECK(l.predicted_ms == 0.5);
      CHECK(l.measured_ms == 0.6);
    }
    if (l.type == "adapt" && l.inputs[0] == first.outputs[0]) {
      found = true;
      CHECK(l.descriptor == "cpu:float32:nhwc/reorder");
      CHECK(l.tuned);
      CHECK(l.predicted_ms == 0.125);
    }
  }
  CHECK(found);
  // A parameter the tuned adapt does not have (a crafted file) never reaches
  // its prepare(): the default adapt converts the blob.
  tuning.routine_path.adapts[0].params = {{"via", 7}};
  Model crafted = detail::make_model(g, tuning);
  found = false;
  for (const auto& l : Session(crafted).layers())
    if (l.type == "adapt" && l.inputs[0] == first.outputs[0]) {
      found = true;
      CHECK_FALSE(l.tuned);
      CHECK(l.routine_params.empty());
    }
  CHECK(found);
}

// A childnet's first child reads the layer's input: the adapt into it is the
// one the tuner priced for the layer (consumer: the layer), not the default
// (a hybrid YOLOv8n ran a reorder into a Winograd child that no priced adapt named).
TEST_CASE("the adapt into a childnet's child is the one the path names for its layer", "[adapt]") {
  core::Graph g;
  core::Tuning tuning;
  g.name = "relu-winograd";
  g.inputs = {{"input", Shape{1, 8, 8, 8}, DType::float32, {}}};
  g.layers.push_back(test::layer("act", "relu", {"input"}, {"r"}));
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 0.3f);
  Blob w = Blob::allocate(Shape{8, 8, 3, 3});
  for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = d(rng);
  g.layers.push_back(test::layer("conv", "conv2", {"r"}, {"out"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}, {{"weight", w}}));
  g.outputs = {"out"};
  const std::string wino = "cpu:float32:nchw8c/winograd";
  {
    Schema s;
    const Routine* r = core::RoutineRegistry::instance().find("conv2", wino, &s);
    if (!r || !r->supports(LayerInfo{&g.layers[1], {Shape{1, 8, 8, 8}}, {Shape{1, 8, 8, 8}}}, s).ok) {
      SUCCEED("no blocked Winograd here");
      return;
    }
  }
  tuning.routine_path.device_fingerprint = "test";
  tuning.routine_path.routines.push_back({"act", "cpu/ref", {}, 0.1, 0.1});
  tuning.routine_path.routines.push_back({"conv", wino, {{"tile", 2}}, 0.5, 0.6});
  tuning.routine_path.adapts.push_back({"r", "conv", "cpu", "cpu:float32:nchw8c", {"cpu:float32:nchw8c/reorder"}, 0.125});
  Model net = detail::make_model(g, tuning);
  int adapts_of_r = 0;
  for (const auto& l : Session(net).layers())
    if (l.type == "adapt" && l.inputs[0] == "r") {
      ++adapts_of_r;
      CHECK(l.descriptor == "cpu:float32:nchw8c/reorder");
      CHECK(l.tuned);
      CHECK(l.predicted_ms == 0.125);
    }
  CHECK(adapts_of_r == 1);
}
