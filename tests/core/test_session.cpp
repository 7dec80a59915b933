// Model and Session: loading prepares nothing; sessions of one model share
// derived weights and run concurrently with identical outputs.
#include "core/cpu_features.hpp"
#include "core/model_impl.hpp"
#include "core/plan.hpp"
#include "core/thread_pool.hpp"
#include "core/registry.hpp"
#include "core/layer_types.hpp"
#include "core/weight_store.hpp"
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/session.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include <unistd.h>

using namespace softneuro;

namespace {

std::vector<NamedBlob> random_inputs(const Model& model, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<NamedBlob> ins;
  for (const auto& t : model.inputs()) {
    Blob b = Blob::allocate(t.shape);
    for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = u(rng);
    ins.push_back({t.name, b});
  }
  return ins;
}

bool same(const std::vector<NamedBlob>& a, const std::vector<NamedBlob>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].blob.byte_size() != b[i].blob.byte_size() ||
        std::memcmp(a[i].blob.data(), b[i].blob.data(), a[i].blob.byte_size()) != 0)
      return false;
  return true;
}

}  // namespace

TEST_CASE("session: loading and inspecting a model prepares nothing", "[session]") {
  Model model = Model::load(SOFTNEURO_DEMO_MODEL);
  CHECK(!model.inputs().empty());
  CHECK(model.output_shape(model.outputs()[0].name) == model.outputs()[0].shape);
  CHECK(detail::impl_of(model).weights->built() == 0);
  Session s(model);
#if defined(__x86_64__)
  CHECK(detail::impl_of(model).weights->built() > 0);  // the demo's oneDNN convolutions reorder their weights
#endif
}

TEST_CASE("session: a model loaded from memory runs as the file does", "[session]") {
  std::ifstream f(SOFTNEURO_DEMO_MODEL, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(!bytes.empty());
  Model from_file = Model::load(SOFTNEURO_DEMO_MODEL);
  Model from_memory = Model::load_bytes(bytes.data(), bytes.size(), "demo.dnn");
  auto in = random_inputs(from_file, 7);
  CHECK(same(Session(from_file).run(in), Session(from_memory).run(in)));
  // The model owns a copy: the caller's bytes may go.
  std::vector<char> scratch = bytes;
  Model copied = Model::load_bytes(scratch.data(), scratch.size());
  std::fill(scratch.begin(), scratch.end(), 0);
  CHECK(same(Session(from_file).run(in), Session(copied).run(in)));
  // Bad bytes: an Error naming what stands for the file.
  try {
    Model::load_bytes(bytes.data(), 100, "asset:model.dnn");
    FAIL("a truncated model loaded");
  } catch (const Error& e) {
    CHECK(e.file() == "asset:model.dnn");
  }
  CHECK_THROWS_AS(Model::load_bytes(nullptr, 10), Error);
  CHECK_THROWS_AS(Model::load_bytes(nullptr, 0), Error);
}

TEST_CASE("session: sessions of one model share derived weights", "[session]") {
  Model model = Model::load(SOFTNEURO_DEMO_MODEL);
  Session first(model);
  const uint64_t built = detail::impl_of(model).weights->built();
#if !defined(__x86_64__)
  // On aarch64 XNNPACK runs the demo's convolutions: it packs their weights inside its own
  // operators, once per session (docs/arm.md); no routine there derives them in the model's store.
  if (built == 0) {
    WARN("no routine of the demo derives weights in the model's store on this processor");
    return;
  }
#endif
  REQUIRE(built > 0);
  {
    Session second(model), third(model);
    CHECK(detail::impl_of(model).weights->built() == built);  // nothing packed again
    auto in = random_inputs(model, 1);
    CHECK(same(first.run(in), second.run(in)));
  }
  // With every session gone, the model holds no derived weights; a new session builds them again.
  Session s(Model::load(SOFTNEURO_DEMO_MODEL));
  CHECK(detail::impl_of(s.model()).weights->built() == built);
}

TEST_CASE("session: sessions of one model run concurrently with identical outputs", "[session][threads][concurrency]") {
  Model model = Model::load(SOFTNEURO_DEMO_MODEL);
  constexpr int kSessions = 4, kRuns = 25;
  std::vector<std::vector<NamedBlob>> inputs, expected;
  {
    Session one(model, SessionOptions{1});
    for (int k = 0; k < kRuns; ++k) {
      inputs.push_back(random_inputs(model, static_cast<unsigned>(k)));
      expected.push_back(one.run(inputs.back()));
    }
  }
  std::vector<int> wrong(kSessions, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kSessions; ++t)
    threads.emplace_back([&, t] {
      Session s(model, SessionOptions{1});
      for (int k = 0; k < kRuns; ++k) {
        const int i = (k + t * 7) % kRuns;  // sessions at different inputs at any moment
        wrong[static_cast<std::size_t>(t)] += !same(s.run(inputs[static_cast<std::size_t>(i)]), expected[static_cast<std::size_t>(i)]);
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kSessions; ++t) CHECK(wrong[static_cast<std::size_t>(t)] == 0);
}

TEST_CASE("session: a session at two threads matches one at one thread", "[session][threads]") {
  Model model = Model::load(SOFTNEURO_DEMO_MODEL);
  auto in = random_inputs(model, 3);
  Session one(model, SessionOptions{1}), two(model, SessionOptions{2});
  auto a = one.run(in), b = two.run(in);
  REQUIRE(a.size() == b.size());
  const float* x = a[0].blob.data_as<float>();
  const float* y = b[0].blob.data_as<float>();
  for (int64_t i = 0; i < a[0].blob.numel(); ++i) CHECK(std::abs(x[i] - y[i]) <= 1e-4f * (1 + std::abs(x[i])));
}

TEST_CASE("session: run() reuses the memory of outputs the caller let go of, never of ones it holds", "[session]") {
  // A decode loop's pattern: a step's outputs are the next step's inputs,
  // let go of after it.
  Model model = Model::load(SOFTNEURO_DEMO_MODEL);
  const auto in1 = random_inputs(model, 5), in2 = random_inputs(model, 6);
  Session s(model);
  auto a = s.run(in1);
  const Blob want1 = a[0].blob.clone();
  const void* first = a[0].blob.data();
  // Held: the next run writes elsewhere, and `a` keeps its values.
  auto b = s.run(in2);
  const Blob want2 = b[0].blob.clone();
  CHECK(b[0].blob.data() != first);
  CHECK(std::memcmp(a[0].blob.data(), want1.data(), want1.byte_size()) == 0);
  // Let go of: its memory is taken again, and holds the new run's values.
  a.clear();
  auto c = s.run(in2);
  CHECK(c[0].blob.data() == first);
  CHECK(std::memcmp(c[0].blob.data(), want2.data(), want2.byte_size()) == 0);
  // A copy of a blob holds its memory as the blob does.
  const Blob kept = b[0].blob;
  b.clear();
  auto d = s.run(in1);
  CHECK(d[0].blob.data() != kept.data());
  CHECK(std::memcmp(kept.data(), want2.data(), want2.byte_size()) == 0);
  CHECK(std::memcmp(d[0].blob.data(), want1.data(), want1.byte_size()) == 0);
}

TEST_CASE("session: bad options are clear errors", "[session]") {
  Model model = Model::load(SOFTNEURO_DEMO_MODEL);
  try {
    Session s(model, SessionOptions{0, 64});
    FAIL("a 64-byte memory limit was accepted");
  } catch (const Error& e) {
    CHECK(e.field() == "memory_limit");
    CHECK(std::string(e.what()).find("memory limit") != std::string::npos);
  }
  CHECK_THROWS_AS(Session(model, SessionOptions{-1}), Error);

  // By default the limit is derived from the machine: a file whose shapes ask
  // for an arena larger than the physical memory is refused before allocating.
  Layer relu;
  relu.name = "act";
  relu.type = "relu";
  relu.inputs = {"x"};
  relu.outputs = {"y"};
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const int64_t floats = static_cast<int64_t>(pages) * page / 4 + 1;  // the output alone: more than all memory
  Model huge = Model::build("huge", {{"x", Shape{1, floats}, DType::float32}}, {relu}, {"y"});
  try {
    Session s(huge);
    FAIL("an arena larger than the machine's memory was planned");
  } catch (const Error& e) {
    CHECK(e.field() == "memory_limit");
  }

  // A blob larger than the limit is refused at its layer, before the layer's
  // routine is prepared (XNNPACK's prepare ran once on scratch buffers of the
  // blobs' size: a fuzzed .dnn made it allocate 2 GiB under a 256 MiB limit).
  Model big = Model::build("big", {{"x", Shape{1, 1 << 20}, DType::float32}}, {relu}, {"y"});
  try {
    Session s(big, SessionOptions{1, std::size_t{1} << 19});
    FAIL("a blob larger than the memory limit was accepted");
  } catch (const Error& e) {
    CHECK(e.field() == "memory_limit");
    CHECK(e.layer().empty());  // the net input: no layer
    CHECK(std::string(e.what()).find("'x'") != std::string::npos);
  }
  Layer cat;
  cat.name = "cat";
  cat.type = "concat";
  cat.inputs = {"x", "x", "x", "x", "x"};  // 5 values per input value, past the input's 4 bytes
  cat.outputs = {"y"};
  cat.params["axis"] = int64_t{1};
  Model wide = Model::build("wide", {{"x", Shape{1, 1 << 16}, DType::float32}}, {cat}, {"y"});
  try {
    Session s(wide, SessionOptions{1, 300000});
    FAIL("a blob larger than the memory limit was accepted");
  } catch (const Error& e) {
    CHECK(e.field() == "memory_limit");
    CHECK(e.layer() == "cat");
  }

  // Blobs that fit one by one but not together are refused at the first layer
  // that needs them at once, before its routine is prepared (the arena's check
  // came only after every layer had been prepared).
  auto unary = [](std::string name, std::string type, std::string in, std::string out) {
    Layer l;
    l.name = std::move(name);
    l.type = std::move(type);
    l.inputs = {std::move(in)};
    l.outputs = {std::move(out)};
    return l;
  };
  Layer sum;
  sum.name = "sum";
  sum.type = "add";
  sum.inputs = {"a", "b"};
  sum.outputs = {"c"};
  Model together = Model::build("together", {{"x", Shape{1, 1 << 16}, DType::float32}},
                                {unary("first", "relu", "x", "a"), unary("second", "sigmoid", "a", "b"), sum,
                                 unary("last", "tanh", "c", "y")},
                                {"y"});
  try {
    Session s(together, SessionOptions{1, 550000});  // a, b: 256 KiB each, and c: over
    FAIL("blobs that do not fit together were accepted");
  } catch (const Error& e) {
    CHECK(e.field() == "memory_limit");
    CHECK(e.layer() == "sum");
  }

  // A routine's own tables count too: cpu/resample's index tables for an
  // output [1,1,2^22,1] take 168 MB, its blob 16 MB (prepared before: the
  // tables of [1,1,2^31,1] asked for 86 GB under any limit).
  Layer up;
  up.name = "up";
  up.type = "resize";
  up.inputs = {"x"};
  up.outputs = {"y"};
  up.params["sizes"] = std::vector<int64_t>{1, 1, int64_t{1} << 22, 1};
  Model tall = Model::build("tall", {{"x", Shape{1, 1, 2, 1}, DType::float32}}, {up}, {"y"});
  try {
    Session s(tall, SessionOptions{1, std::size_t{64} << 20});
    FAIL("resize tables larger than the memory limit were allocated");
  } catch (const Error& e) {
    CHECK(e.field() == "memory_limit");
    CHECK(e.layer() == "up");
    CHECK(std::string(e.what()).find("tables") != std::string::npos);
  }
}

TEST_CASE("session: schemas restrict the routines a session runs, tuned ones included", "[session]") {
  Model net = Model::load(SOFTNEURO_DEMO_MODEL);
  // A routine path that runs the first layer outside plain "cpu", where a routine can.
  std::string layer, descriptor;
  for (const auto& l : Session(net).layers(true)) {
    if (l.type == "adapt") continue;
    for (const auto& c : l.candidates)
      if (c.supported && c.descriptor.rfind("cpu/", 0) != 0 && c.descriptor.rfind("cpu:float32", 0) == 0) {
        layer = l.name;
        descriptor = c.descriptor;
        break;
      }
    if (!layer.empty()) break;
  }
  REQUIRE(!layer.empty());
  core::Graph g = detail::impl_of(net).graph;
  core::Tuning tuning;
  tuning.routine_path.routines = {{layer, descriptor, {}, 0.1, 0}};
  Model model = detail::make_model(std::move(g), tuning);

  auto descriptor_of = [&](const Session& s) {
    for (const auto& l : s.layers())
      if (l.name == layer) return std::make_pair(l.descriptor, l.tuned);
    return std::make_pair(std::string(), false);
  };
  Session tuned(model);
  CHECK(descriptor_of(tuned) == std::make_pair(descriptor, true));

  SessionOptions o;
  o.schemas = {"cpu"};
  Session plain(model, o);
  CHECK(descriptor_of(plain).first.rfind("cpu/", 0) == 0);
  CHECK(!descriptor_of(plain).second);
  for (const auto& l : plain.layers())
    if (l.type != "adapt") CHECK(l.descriptor.rfind("cpu/", 0) == 0);
  auto in = random_inputs(model, 4);
  auto a = plain.run(in), b = tuned.run(in);
  const float* x = a[0].blob.data_as<float>();
  const float* y = b[0].blob.data_as<float>();
  for (int64_t i = 0; i < a[0].blob.numel(); ++i) CHECK(std::abs(x[i] - y[i]) <= 1e-4f * (1 + std::abs(x[i])));

  o.schemas = {"cpu:float33"};
  CHECK_THROWS_WITH(Session(model, o), Catch::Contains("float33"));
  o.schemas = {"gpu9:*"};  // a glob no routine's schema matches
  CHECK_THROWS_WITH(Session(model, o), Catch::Contains("session's schemas"));
}

TEST_CASE("session: Model::build makes a model from layers in code, checked like a file", "[session]") {
  Layer dense;
  dense.name = "fc";
  dense.type = "dense";
  dense.inputs = {"x"};
  dense.outputs = {"h"};
  Blob w = Blob::allocate({2, 3});
  const float wv[] = {1, 0, 0, 0, 1, 1};
  std::memcpy(w.data(), wv, sizeof wv);
  dense.weights["weight"] = w;
  Layer relu;
  relu.name = "act";
  relu.type = "relu";
  relu.inputs = {"h"};
  relu.outputs = {"y"};
  // Given out of order: build sorts them.
  Model model = Model::build("tiny", {{"x", Shape{1, 3}, DType::float32}}, {relu, dense}, {"y"});
  CHECK(model.name() == "tiny");
  CHECK(model.output_shape("y") == Shape{1, 2});
  Session session(model);
  Blob x = Blob::allocate({1, 3});
  const float xv[] = {-2, 3, 4};
  std::memcpy(x.data(), xv, sizeof xv);
  std::vector<NamedBlob> ins{{"x", x}};
  auto outs = session.run(ins);
  CHECK(outs.at(0).blob.data_as<float>()[0] == 0.f);  // relu(-2)
  CHECK(outs.at(0).blob.data_as<float>()[1] == 7.f);

  // A round trip through a file keeps it.
  // Per process: the ASan stage runs this suite natively and capped at AVX2 side by side.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("softneuro_model_build_test." + std::to_string(::getpid()) + ".dnn")).string();
  model.save(path);
  CHECK(Model::load(path).output_shape("y") == Shape{1, 2});
  std::remove(path.c_str());

  // Errors name the layer and field.
  relu.inputs = {"missing"};
  CHECK_THROWS_WITH(Model::build("bad", {{"x", Shape{1, 3}, DType::float32}}, {dense, relu}, {"y"}),
                    Catch::Contains("act") && Catch::Contains("missing"));
  dense.weights["weight"] = Blob::allocate({2, 4});
  CHECK_THROWS_WITH(Model::build("bad", {{"x", Shape{1, 3}, DType::float32}}, {dense}, {"h"}),
                    Catch::Contains("fc") && Catch::Contains("weight"));
}

namespace {

Layer conv_layer(const std::string& name, const std::string& in, const std::string& out, int64_t ic, int64_t oc,
                 int64_t k, int64_t stride, int64_t group, std::mt19937& rng) {
  Layer l;
  l.name = name;
  l.type = "conv2";
  l.inputs = {in};
  l.outputs = {out};
  l.params["strides"] = std::vector<int64_t>{stride, stride};
  l.params["pads"] = std::vector<int64_t>(4, k / 2);
  l.params["group"] = group;
  l.params["act"] = std::string("clip");
  l.params["act_min"] = 0.0;
  l.params["act_max"] = 6.0;
  std::normal_distribution<float> n(0.f, 1.f / std::sqrt(static_cast<float>(ic / group * k * k)));
  Blob w = Blob::allocate({oc, ic / group, k, k}), b = Blob::allocate({oc});
  for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = n(rng);
  for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = 0.1f * n(rng);
  l.weights["weight"] = w;
  l.weights["bias"] = b;
  return l;
}

/// `reference` with every layer pinned to `descriptor` (layer `tuned`'s parameters `params`).
Model pinned_to(const Model& reference, const std::string& descriptor, const std::string& tuned = {},
                const RoutineParams& params = {}) {
  core::Graph g = detail::impl_of(reference).graph;
  core::Tuning tuning;
  for (const auto& l : g.layers)
    tuning.routine_path.routines.push_back({l.name, descriptor, l.name == tuned ? params : RoutineParams{}, 0, 0, {}});
  return detail::make_model(std::move(g), tuning);
}

/// Each output of `got` within tol x max |want| (+ 1e-6) of `want`'s.
void check_outputs(const std::vector<NamedBlob>& got, const std::vector<NamedBlob>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    float scale = 0, err = 0;
    for (int64_t i = 0; i < want[k].blob.numel(); ++i) {
      scale = std::max(scale, std::abs(want[k].blob.data_as<float>()[i]));
      err = std::max(err, std::abs(got[k].blob.data_as<float>()[i] - want[k].blob.data_as<float>()[i]));
    }
    INFO("output " << got[k].name);
    CHECK(scale > 0);
    CHECK(err <= tol * scale + 1e-6);
  }
}

}  // namespace

TEST_CASE("session: a routine computes the step before it too, and the blob between them takes no memory",
          "[session][fusion]") {
  // A MobileNetV2 block's start: an RGB stem, a 1x1 expansion, a 3x3 depthwise
  // convolution at stride 2. The untuned default runs them on oneDNN in a
  // blocked layout, where the stem reads the plain image instead of its copy
  // padded to a whole block, and the depthwise convolution takes in the
  // expansion (oneDNN fuses it where the expanded tensor exceeds twice the L2
  // caches of the team: one thread here, the size from this machine's L2).
  const long l2 = std::max(256L * 1024, sysconf(_SC_LEVEL2_CACHE_SIZE));
  const int64_t c = 96;
  int64_t hw = 16;
  while (c * hw * hw * 4 < 3 * l2) hw += 16;
  std::mt19937 rng(7);
  std::vector<Layer> layers{conv_layer("stem", "x", "s", 3, 16, 3, 1, 1, rng),
                            conv_layer("expand", "s", "e", 16, c, 1, 1, 1, rng),
                            conv_layer("depthwise", "e", "y", c, c, 3, 2, c, rng)};
  const std::vector<TensorInfo> inputs{{"x", Shape{1, 3, hw, hw}, DType::float32}};
  SessionOptions one_thread{1};
  SessionOptions plain = one_thread;
  plain.schemas = {"cpu"};  // oneDNN and our routines in plain nchw: nothing to fuse
  auto check_close = [](const std::vector<NamedBlob>& a, const std::vector<NamedBlob>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      REQUIRE(a[k].blob.numel() == b[k].blob.numel());
      int wrong = 0;
      for (int64_t i = 0; i < a[k].blob.numel(); ++i) {
        const float x = a[k].blob.data_as<float>()[i], y = b[k].blob.data_as<float>()[i];
        wrong += std::abs(x - y) > 1e-4f * (1 + std::abs(x));
      }
      CHECK(wrong == 0);
    }
  };

  Model model = Model::build("block", inputs, layers, {"y"});
  Session fused(model, one_thread), apart(model, plain);
  std::map<std::string, std::string> fused_into;
  std::string stem_routine;
  for (const auto& l : fused.layers()) {
    fused_into[l.name] = l.fused_into;
    if (l.name == "stem") stem_routine = l.descriptor;
  }
  auto in = random_inputs(model, 3);
  check_close(fused.run(in), apart.run(in));
  if (stem_routine.find("nchw16c/onednn") != std::string::npos || stem_routine.find("nchw8c/onednn") != std::string::npos) {
    CHECK(fused_into["expand"] == "depthwise");
    CHECK(fused_into["adapt:x->stem"] == "stem");
    // The plan chose the fusion before anything was prepared (what the tuner reads).
    {
      const core::SessionThreads threads(1);
      const auto& impl = detail::impl_of(model);
      const core::Plan plan = core::build_plan(impl.graph, impl.tuning, impl.shapes, nullptr, core::PlanOptions{.weights = impl.weights});
      std::map<std::string, const core::Step*> planned;
      for (const auto& st : plan.steps) planned[st->name] = st.get();
      REQUIRE(planned.count("depthwise"));
      CHECK(planned.at("expand")->fused_into == "depthwise");
      CHECK(planned.at("depthwise")->fuses_previous);
      CHECK(planned.at("adapt:x->stem")->fused_into == "stem");
      for (const auto& st : plan.steps) CHECK(st->prepared == nullptr);
    }
    // The stem's output and the depthwise output are all there is (plus oneDNN's few rows).
    const auto expanded = static_cast<std::size_t>(c * hw * hw * 4);
    CHECK(fused.planned_bytes() < expanded);
    CHECK(apart.planned_bytes() > expanded);
  } else {
    WARN("the stem runs on " << stem_routine << ": no blocked oneDNN path here to fuse");
  }

  // In every activation layout the session may choose, the block computes what plain nchw does: a tuned
  // MobileNetV2 in channels last (its expansion and stride-2 depthwise fused by oneDNN 2.6 at AVX2) was
  // 37% off.
  for (const char* layout : {"cpu:float32:nhwc", "cpu:float32:nchw8c", "cpu:float32:nchw16c"}) {
    SessionOptions in_layout = one_thread;
    in_layout.schemas = {layout};
    std::optional<Session> s;
    try {
      s.emplace(model, in_layout);
    } catch (const Error& e) {
      WARN(layout << ": " << e.what());  // nchw16c without AVX-512
      continue;
    }
    INFO(layout);
    check_close(s->run(in), apart.run(in));
  }

  // Where the expansion is also a net output, it is written: nothing fused there.
  Model both = Model::build("block", inputs, layers, {"y", "e"});
  Session fused_both(both, one_thread), apart_both(both, plain);
  for (const auto& l : fused_both.layers())
    if (l.name == "expand") CHECK(l.fused_into.empty());
  check_close(fused_both.run(in), apart_both.run(in));
}

TEST_CASE("session: a oneDNN convolution adds its result onto a residual in place", "[session][fusion]") {
  // ResNet's block end: conv -> add(., residual) -> relu as one oneDNN
  // convolution with a sum post-op (9% of ResNet50's time in bfloat16 on an AMX
  // Xeon). The output takes the residual's memory where nothing reads it after;
  // where something does (or it is a net input, or the convolution's own input),
  // the residual is copied into the output first.
  std::mt19937 rng(11);
  Layer c1 = conv_layer("c1", "x", "r", 16, 16, 3, 1, 1, rng);
  Layer c2 = conv_layer("c2", "r", "z", 16, 16, 1, 1, 1, rng);
  c2.params.erase("act");  // the last convolution of a block has none
  Layer sum;
  sum.name = "sum";
  sum.type = "add";
  sum.inputs = {"z", "r"};
  sum.outputs = {"y"};
  sum.params["act"] = std::string("relu");
  Layer on_input = c2;  // conv(x) + x: the residual is the net input and the convolution's input
  on_input.inputs = {"x"};
  Layer sum_input = sum;
  sum_input.inputs = {"z", "x"};
  const std::vector<TensorInfo> inputs{{"x", Shape{1, 16, 12, 12}, DType::float32}};
  struct Case {
    const char* what;
    std::vector<Layer> layers;
    std::vector<std::string> outputs;
  };
  const Case cases[] = {{"residual read by the add last (in place)", {c1, c2, sum}, {"y"}},
                        {"residual also a net output (copied)", {c1, c2, sum}, {"y", "r"}},
                        {"residual the net input (copied)", {on_input, sum_input}, {"y"}}};
  for (const char* schema : {"cpu:float32:nhwc", "cpu:float32:nchw16c", "cpu:bfloat16:nhwc"}) {
    const std::string descriptor = std::string(schema) + "/onednn";
    for (const Case& c : cases) {
      INFO(descriptor << ": " << c.what);
      Model reference = Model::build("block", inputs, c.layers, c.outputs);
      Session fused(pinned_to(reference, descriptor), SessionOptions{1});
      std::map<std::string, std::string> ran, fused_into;
      for (const auto& l : fused.layers()) ran[l.name] = l.descriptor, fused_into[l.name] = l.fused_into;
      if (ran["c2"] != descriptor || ran["sum"] != descriptor) {
        WARN(descriptor << " does not run here");
        continue;
      }
      CHECK(fused_into["c2"] == "sum");
      SessionOptions plain{1};
      plain.schemas = {"cpu"};
      Session apart(reference, plain);
      const auto in = random_inputs(reference, 5);
      for (int run = 0; run < 2; ++run)  // twice: the in-place memory holds the last result
        check_outputs(fused.run(in), apart.run(in), std::string(schema).find("bfloat16") != std::string::npos ? 3e-2 : 1e-4);
    }
  }
}

TEST_CASE("session: our direct convolution starts from the residual it adds", "[session][fusion]") {
  // ResNet50's float32 path ran its 16 residual adds as steps of their own after
  // cpu/direct's convolutions (1.7 ms of 22.6: the add reads both blobs and
  // writes a third). The add's cpu/direct routine computes the pair as one step:
  // the tiles start from the residual and end with the add's activation.
  struct Case {
    const char* what;
    int64_t c = 16, k = 1, stride = 1;
    RoutineParams params;         // the convolution's
    const char* act = "relu";     // the add's
    bool residual_output = false; // the residual also a net output: copied, not written onto
    bool conv_act = false;        // the convolution has an activation of its own: apart
  };
  const Case cases[] = {
      {"1x1 of the residual itself (copied)"},
      {"3x3, 24 channels (padded block), no activation", 24, 3, 1, {}, ""},
      {"1x1 over 48 channels in 3 input passes, clip", 48, 1, 1, {{"ic_block", 1}}, "clip"},
      {"1x1 at stride 2 (compact) onto a downsampled residual (in place)", 32, 1, 2, {{"compact", 1}}},
      {"1x1 at stride 2 in place of compact, no activation", 32, 1, 2, {{"compact", 0}}, ""},
      {"3x3 at stride 2, spanned rows", 16, 3, 2, {{"input_mode", 2}}},
      {"residual also a net output", 16, 1, 1, {}, "relu", true},
      {"the convolution's own activation: the add alone", 24, 1, 1, {}, "relu", false, true},
  };
  for (const char* layout : {"nchw16c", "nchw8c"}) {
    const std::string descriptor = fmt::format("cpu:float32:{}/direct", layout);
    for (const Case& c : cases) {
      INFO(descriptor << ": " << c.what);
      std::mt19937 rng(23);
      // x -> c1 -> r; r -> down (1x1 at the stride) -> d; r -> c2 -> z; y = act(z + d)
      std::vector<Layer> layers{conv_layer("c1", "x", "r", 8, c.c, 3, 1, 1, rng)};
      std::string residual = "r";
      if (c.stride > 1) {
        layers.push_back(conv_layer("down", "r", "d", c.c, c.c, 1, c.stride, 1, rng));
        residual = "d";
      }
      Layer c2 = conv_layer("c2", "r", "z", c.c, c.c, c.k, c.stride, 1, rng);
      if (!c.conv_act) c2.params.erase("act");
      layers.push_back(c2);
      Layer sum;
      sum.name = "sum";
      sum.type = "add";
      sum.inputs = {"z", residual};
      sum.outputs = {"y"};
      if (*c.act) sum.params["act"] = std::string(c.act);
      if (std::string(c.act) == "clip") sum.params["act_min"] = 0.25, sum.params["act_max"] = 1.5;
      layers.push_back(sum);
      std::vector<std::string> outputs{"y"};
      if (c.residual_output) outputs.push_back(residual);
      Model reference = Model::build("block", {{"x", Shape{1, 8, 14, 14}, DType::float32}}, layers, outputs);
      Session fused(pinned_to(reference, descriptor, "c2", c.params), SessionOptions{2});
      std::map<std::string, std::string> ran, fused_into;
      for (const auto& l : fused.layers()) ran[l.name] = l.descriptor, fused_into[l.name] = l.fused_into;
      if (ran["c2"] != descriptor || ran["sum"] != descriptor) {
        WARN(descriptor << " does not run here");
        continue;
      }
      CHECK(fused_into["c2"] == (c.conv_act ? "" : "sum"));
      SessionOptions plain{1};
      plain.schemas = {"cpu"};
      Session apart(reference, plain);
      for (int run = 0; run < 2; ++run) {  // twice: the in-place memory holds the last result
        const auto in = random_inputs(reference, 5 + run);
        check_outputs(fused.run(in), apart.run(in), 1e-5);
      }
    }
  }
}

TEST_CASE("session: routine parameters outside the routine's space never reach it", "[session][verifier]") {
  // A file's parameters reach prepare() only where the routine offers them: a
  // crafted block size of 0x3000... wrapped a workspace size to 0. A parameter
  // the routine lacks makes the default choice run the layer; a value outside
  // its choices runs the routine with its default.
  Model net = Model::load(SOFTNEURO_DEMO_MODEL);
  std::string layer;
  for (const auto& l : Session(net).layers(true))
    if (l.type == "conv2")
      for (const auto& c : l.candidates)
        if (c.supported && c.descriptor == "cpu/winograd") layer = l.name;
  REQUIRE(!layer.empty());
  Model untuned = net;
  auto in = random_inputs(untuned, 9);
  const auto expected = Session(untuned).run(in);
  for (const RoutineParams& params : {RoutineParams{{"m_block", int64_t{0x3000000000}}}, RoutineParams{{"tile", 3}},
                                      RoutineParams{{"tile", 4}}}) {
    core::Graph g = detail::impl_of(net).graph;
    core::Tuning tuning;
    tuning.routine_path.routines = {{layer, "cpu/winograd", params, 0.1, 0}};
    Model model = detail::make_model(std::move(g), tuning);
    Session s(model);
    bool tuned = false;  // Winograd's childnet runs as child steps "<layer>/wgenc", ...
    for (const auto& l : s.layers()) tuned = tuned || l.name.rfind(layer + "/", 0) == 0;
    CHECK(tuned == (params[0].first == "tile"));
    auto got = s.run(in);
    const float* x = expected[0].blob.data_as<float>();
    const float* y = got[0].blob.data_as<float>();
    for (int64_t i = 0; i < expected[0].blob.numel(); ++i) REQUIRE(std::abs(x[i] - y[i]) <= 1e-3f * (1 + std::abs(x[i])));
  }
}

TEST_CASE("session: over hundreds of input shapes the shared weights held stay bounded", "[session][memory]") {
  // Every shape's derived weights stayed in the model's weight store as an
  // expired entry (its key, with the shapes): memory grew with each shape met.
  using Ints = std::vector<int64_t>;
  std::mt19937 rng(51);
  std::uniform_real_distribution<float> u(-0.2f, 0.2f);
  auto blob = [&](Shape s) {
    Blob b = Blob::allocate(s);
    for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = u(rng);
    return b;
  };
  std::vector<Layer> layers;
  for (int k = 0; k < 3; ++k) {
    Layer l;
    l.name = "c" + std::to_string(k);
    l.type = "conv2";
    l.inputs = {k == 0 ? "x" : "h" + std::to_string(k - 1)};
    l.outputs = {k == 2 ? "y" : "h" + std::to_string(k)};
    l.params = {{"pads", Ints{1, 1, 1, 1}}, {"act", std::string("relu")}};
    l.weights = {{"weight", blob({8, k == 0 ? 3 : 8, 3, 3})}, {"bias", blob({8})}};
    layers.push_back(l);
  }
  Model model = Model::build("shapes", {{"x", Shape{1, 3, 8, 8}, DType::float32, {2, 3}}}, layers, {"y"});
  SessionOptions options;
  options.threads = 1;
  options.shape_cache = 2;
  Session session(model, options);
  std::size_t early = 0;
  for (int k = 0; k < 400; ++k) {
    std::vector<NamedBlob> in{{"x", blob({1, 3, 4 + k % 20, 4 + k / 20})}};
    session.run(in);
    if (k == 3) early = detail::impl_of(model).weights->entries();
  }
  INFO("weight store entries after 4 shapes: " << early << ", after 400: " << detail::impl_of(model).weights->entries());
  CHECK(detail::impl_of(model).weights->entries() <= 2 * std::max<std::size_t>(early, 64));  // swept as it doubles
}

// Derived weights depend on a layer's weights, not on the input size: packed
// once per model, whatever the shapes and sessions (before, every shape a
// session met and every session packed the direct convolution's and
// Winograd's weights again: ResNet50 float32-tuned, 378 MiB for one session
// and 1,153 MiB for four).
TEST_CASE("session: derived weights are packed once per model, for every shape and session", "[session]") {
  if (!core::cpu_features().avx2_fma()) return;  // the routines pinned below need AVX2
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 0.3f);
  auto conv = [&](const std::string& name, const std::string& in, const std::string& out, int64_t c, int64_t oc) {
    Layer l;
    l.type = "conv2";
    l.name = name;
    l.inputs = {in};
    l.outputs = {out};
    l.params["pads"] = std::vector<int64_t>{1, 1, 1, 1};
    Blob w = Blob::allocate(Shape{oc, c, 3, 3});
    for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = nd(rng);
    l.weights["weight"] = w;
    return l;
  };
  core::Graph g;
  core::Tuning tuning;
  g.name = "packed_once";
  g.inputs = {{"x", Shape{1, 8, 12, 12}, DType::float32, {2, 3}}};
  g.outputs = {"y"};
  g.layers = {conv("direct", "x", "a", 8, 16), conv("winograd_blocked", "a", "b", 16, 16), conv("winograd", "b", "y", 16, 8)};
  for (const auto& [layer, desc] : std::vector<std::pair<std::string, std::string>>{
           {"direct", "cpu:float32:nchw8c/direct"}, {"winograd_blocked", "cpu:float32:nchw8c/winograd"},
           {"winograd", "cpu/winograd"}})
    tuning.routine_path.routines.push_back({layer, desc, {}, 0, 0, {}});
  Model model = detail::make_model(std::move(g), tuning);
  auto input = [&](int64_t h, int64_t w) {
    Blob b = Blob::allocate(Shape{1, 8, h, w});
    for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = nd(rng);
    return std::vector<NamedBlob>{{"x", b}};
  };
  Session first(model);
  std::map<std::string, std::string> ran;
  for (const auto& l : first.layers()) ran[l.name.substr(0, l.name.find('/'))] = l.descriptor;  // a childnet's children: their parent
  CHECK(ran["direct"] == "cpu:float32:nchw8c/direct");
  CHECK(ran["winograd_blocked"] == "cpu:float32:nchw8c/winograd");
  CHECK(ran["winograd"] == "cpu/winograd");
  auto at12 = input(12, 12);
  const auto want = first.run(at12);
  const uint64_t built = detail::impl_of(model).weights->built();
  REQUIRE(built > 0);
  first.run(input(20, 9));
  first.run(input(7, 30));
  CHECK(detail::impl_of(model).weights->built() == built);  // other shapes: nothing packed again
  Session second(model);
  CHECK(same(second.run(at12), want));
  CHECK(detail::impl_of(model).weights->built() == built);  // another session: nothing packed again
}

// A dynamic model tuned at one size runs at others on the same path. The direct
// convolution named input_mode only where two modes applied: YOLOv8n tuned at
// 320x320 (a 1x1 layer at 10x10, spanned) fell back to the default choice at
// 64x64 (2x2) with a warning, as if the file named a parameter it lacks.
TEST_CASE("session: a path tuned at one input size keeps its routines at another", "[session]") {
  if (!core::cpu_features().avx2_fma()) return;  // the routine pinned below needs AVX2
  const std::string desc = "cpu:float32:nchw8c/direct";
  Schema schema;
  const Routine* r = core::RoutineRegistry::instance().find("conv2", desc, &schema);
  REQUIRE(r);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.f, 0.3f);
  Layer l;
  l.type = "conv2";
  l.name = "pointwise";
  l.inputs = {"x"};
  l.outputs = {"y"};
  Blob w = Blob::allocate(Shape{64, 64, 1, 1});
  for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = nd(rng);
  l.weights["weight"] = w;
  auto modes_at = [&](int64_t hw) {
    LayerInfo info;
    info.layer = &l;
    info.input_shapes = {Shape{1, 64, hw, hw}};
    info.output_shapes = core::infer_layer_shapes(l, info.input_shapes);
    for (const auto& p : r->param_space(info, schema))
      if (p.name == "input_mode") return p.choices;
    return std::vector<int64_t>{};
  };
  const std::vector<int64_t> tuned_at = modes_at(10), run_at = modes_at(2);
  REQUIRE(std::find(tuned_at.begin(), tuned_at.end(), 2) != tuned_at.end());  // spanned applies at 10x10
  REQUIRE(std::find(run_at.begin(), run_at.end(), 2) == run_at.end());        // not at 2x2
  core::Graph g;
  core::Tuning tuning;
  g.name = "tuned_elsewhere";
  g.inputs = {{"x", Shape{1, 64, 10, 10}, DType::float32, {2, 3}}};
  g.outputs = {"y"};
  g.layers = {l};
  Model untuned = detail::make_model(g, tuning);
  tuning.routine_path.routines.push_back({"pointwise", desc, {{"input_mode", 2}}, 0, 0, {}});
  Model model = detail::make_model(std::move(g), tuning);
  Blob x = Blob::allocate(Shape{1, 64, 2, 2});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = nd(rng);
  const std::vector<NamedBlob> in{{"x", x}};
  Session s(model);
  const auto got = s.run(in);
  const auto want = Session(untuned).run(in);
  for (const auto& step : s.layers())
    if (step.name == "pointwise") CHECK(step.descriptor == desc);
  const float* a = got[0].blob.data_as<float>();
  const float* b = want[0].blob.data_as<float>();
  for (int64_t i = 0; i < want[0].blob.numel(); ++i) REQUIRE(std::abs(a[i] - b[i]) <= 1e-4f * (1 + std::abs(b[i])));
}

TEST_CASE("session: run_timed times each step of layers() and computes what run does", "[session]") {
  Model model = Model::load(SOFTNEURO_DEMO_MODEL);
  Session s(model);
  const auto ins = random_inputs(model, 3);
  const auto expected = s.run(ins);
  auto outs = s.run(ins);
  std::fill_n(static_cast<char*>(outs[0].blob.data()), outs[0].blob.byte_size(), 0);
  const std::vector<double> ms = s.run_timed(ins, outs);
  CHECK(same(outs, expected));
  const auto layers = s.layers();
  REQUIRE(ms.size() == layers.size());
  double total = 0;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    CHECK(ms[i] >= 0);
    total += ms[i];
  }
  CHECK(total > 0);
}

TEST_CASE("session: the executors of its input shapes share one CPU arena, the largest plan", "[session][memory]") {
  // Four shapes held four arenas (ResNet50: 248 MiB resident after one shape,
  // 306 MiB after four); a session runs one shape at a time, so one arena of
  // the largest plan serves them all, rebound at each run.
  const Model model = detail::make_model(test::chain_graph(6));
  auto graph = detail::impl_of(model).graph;
  graph.inputs[0].dynamic_dims = {0, 2, 3};
  const Model dynamic = detail::make_model(std::move(graph));
  detail::ShapedExecutors shaped(detail::impl_of(dynamic), SessionOptions{});
  std::size_t largest = 0, sum = 0;
  std::mt19937 rng(9);
  std::vector<std::pair<std::vector<NamedBlob>, std::vector<float>>> runs;
  for (const Shape& s : {Shape{1, 4, 8, 8}, Shape{2, 4, 16, 12}, Shape{1, 4, 6, 20}}) {
    core::Executor& e = shaped.at({{"input", s}});
    largest = std::max(largest, e.arena_bytes());
    sum += e.arena_bytes();
    Blob x = Blob::allocate(s);
    std::normal_distribution<float> nd;
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = nd(rng);
    std::vector<NamedBlob> in{{"input", x}};
    // The reference: a session of its own at this shape.
    runs.emplace_back(in, test::values(Session(dynamic).run(in)[0].blob));
  }
  CHECK(shaped.host_arena_bytes() >= largest);
  CHECK(shaped.host_arena_bytes() < sum);
  // Every shape again, in another order, after the arena grew: same outputs.
  for (int k : {2, 0, 1, 0, 2}) {
    auto& [in, want] = runs[static_cast<std::size_t>(k)];
    core::Executor& e = shaped.for_inputs(in);
    std::vector<NamedBlob> out{{"out", Blob::allocate(shaped.current_shapes().at("out"))}};
    e.run(in, out);
    CHECK(test::values(out[0].blob) == want);
  }
}

TEST_CASE("session: a reshape runs nothing where its output can share its input's memory", "[session][views]") {
  // a -> reshape -> reshape back -> b, with a relu reading a's output after the
  // reshapes: the reshapes' outputs are a's memory, which lives until the relu.
  std::mt19937 rng(5);
  using Ints = std::vector<int64_t>;
  auto reshape = [](std::string name, std::string in, std::string out, Ints shape) {
    return test::layer(std::move(name), "reshape", {std::move(in)}, {std::move(out)}, {{"shape", std::move(shape)}});
  };
  auto relu = [](std::string name, std::string in, std::string out) {
    return test::layer(std::move(name), "relu", {std::move(in)}, {std::move(out)});
  };
  const Layer a = conv_layer("a", "x", "t1", 4, 8, 3, 1, 1, rng), b = conv_layer("b", "t3", "y", 8, 8, 3, 1, 1, rng);
  std::vector<Layer> layers{a, reshape("r1", "t1", "t2", {1, 8, 36}), reshape("r2", "t2", "t3", {1, 8, 6, 6}), b,
                            relu("c", "t1", "z")};
  const std::vector<TensorInfo> inputs{{"x", Shape{1, 4, 6, 6}, DType::float32}};
  SessionOptions plain;
  plain.schemas = {"cpu"};
  // One thread: the outputs of separate sessions are compared bit for bit, and
  // oneDNN's convolution sums in another order at another thread count (the
  // contention guard runs a region on one thread while other processes hold
  // the CPUs: CI failed so, with a busy machine, at line "memcmp(got[2]...").
  plain.threads = 1;
  // The same net without the reshapes (they give back the same tensor).
  Layer b_direct = b;
  b_direct.inputs = {"t1"};
  Session direct(Model::build("direct", inputs, {a, b_direct, relu("c", "t1", "z")}, {"y", "z"}), plain);
  const Model model = Model::build("views", inputs, layers, {"y", "z"});
  Session views(model, plain);
  std::map<std::string, bool> view;
  for (const auto& l : views.layers()) view[l.name] = l.view;
  CHECK(view["r1"]);  // cpu/vec's reshape, on every processor
  CHECK(view["r2"]);
  CHECK_FALSE(view["a"]);
  const auto in = random_inputs(model, 1);
  CHECK(same(views.run(in), direct.run(in)));
  CHECK(same(views.run(in), direct.run(in)));  // and again, the arena rebound

  // A net output or a net input is the caller's memory: copied there.
  const Model out_too = Model::build("views", inputs, layers, {"y", "z", "t2"});
  Session copies(out_too, plain);
  for (const auto& l : copies.layers())
    if (l.name == "r1") CHECK_FALSE(l.view);
  const auto got = copies.run(in);
  CHECK(same({got[0], got[1]}, direct.run(in)));
  const auto t1 = Session(Model::build("t1", inputs, {a}, {"t1"}), plain).run(in);
  REQUIRE(got[2].blob.byte_size() == t1[0].blob.byte_size());
  CHECK(std::memcmp(got[2].blob.data(), t1[0].blob.data(), t1[0].blob.byte_size()) == 0);
  Session from_input(Model::build("in", inputs, {reshape("r", "x", "f", {1, 144})}, {"f"}), plain);
  const auto f = from_input.run(in);
  CHECK(std::memcmp(f[0].blob.data(), in[0].blob.data(), in[0].blob.byte_size()) == 0);
}

TEST_CASE("session: a constant read in another schema is converted once, when the session is made", "[session][constant]") {
  // A constant multiplier read by a layer computing in another layout (or on
  // a device): its converted copy is a constant too, made once, not an adapt
  // step of every run.
  const Shape shape{1, 16, 5, 5};
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.f, 1.f);
  Blob value = Blob::allocate(shape);
  for (int64_t i = 0; i < value.numel(); ++i) value.data_as<float>()[i] = n(rng);
  Layer c;
  c.name = "c";
  c.type = "constant";
  c.outputs = {"cv"};
  c.weights["value"] = value;
  Layer mul;
  mul.name = "mul";
  mul.type = "mul";
  mul.inputs = {"x", "cv"};
  mul.outputs = {"y"};
  const std::vector<TensorInfo> inputs{{"x", shape, DType::float32}};
  Model model = Model::build("scaled", inputs, {c, mul}, {"y"});
  SessionOptions channels_last{1};  // XNNPACK's or oneDNN's nhwc mul, on every CPU
  channels_last.schemas = {"cpu:float32:nhwc"};
  Session session(model, channels_last);
  std::string mul_routine;
  std::vector<std::string> steps;
  for (const auto& l : session.layers()) {
    steps.push_back(l.name);
    if (l.name == "mul") mul_routine = l.descriptor;
  }
  INFO("steps: " << fmt::format("{}", fmt::join(steps, ", ")) << "; mul runs " << mul_routine);
  REQUIRE(mul_routine.find("nhwc") != std::string::npos);
  for (const auto& s : steps) CHECK(s.find("adapt:cv") == std::string::npos);
  for (int round = 0; round < 3; ++round) {  // the copy outlives each run
    auto in = random_inputs(model, static_cast<unsigned>(round));
    const auto out = session.run(in);
    REQUIRE(out.size() == 1);
    const float* x = in[0].blob.data_as<float>();
    const float* y = out[0].blob.data_as<float>();
    int wrong = 0;
    for (int64_t i = 0; i < value.numel(); ++i) wrong += y[i] != x[i] * value.data_as<float>()[i];
    CHECK(wrong == 0);
  }
}

TEST_CASE("session: a concat's inputs and a split's outputs live in their whole's memory, and nothing is copied",
          "[session][slices]") {
  // YOLOv8's C2f block: y = cv1(x); a, b = split(y); c = m1(b); d = m2(c);
  // z = concat(a, b, c, d) -> cv2. In a plain layout a and b are y's halves
  // and y, c and d are z's quarters: the split and the concat run nothing.
  // Around it, concats that must copy: of a net input, of one blob twice, and
  // a net output read as a piece; b is read again after the concat.
  std::mt19937 rng(5);
  const Shape shape{1, 32, 4, 4};
  std::vector<Layer> layers{conv_layer("cv1", "x", "y", 32, 32, 1, 1, 1, rng)};
  Layer split;
  split.name = "split";
  split.type = "split";
  split.inputs = {"y"};
  split.outputs = {"a", "b"};
  split.params["axis"] = int64_t{1};
  split.params["split"] = std::vector<int64_t>{16, 16};
  layers.push_back(split);
  layers.push_back(conv_layer("m1", "b", "c", 16, 16, 3, 1, 1, rng));
  layers.push_back(conv_layer("m2", "c", "d", 16, 16, 3, 1, 1, rng));
  auto concat = [](std::string name, std::vector<std::string> in, std::string out) {
    Layer l;
    l.name = std::move(name);
    l.type = "concat";
    l.inputs = std::move(in);
    l.outputs = {std::move(out)};
    l.params["axis"] = int64_t{1};
    return l;
  };
  layers.push_back(concat("cat", {"a", "b", "c", "d"}, "z"));
  layers.push_back(conv_layer("cv2", "z", "w", 64, 32, 1, 1, 1, rng));
  layers.push_back(concat("with_input", {"w", "x"}, "wx"));
  layers.push_back(concat("twice", {"a", "a"}, "aa"));
  layers.push_back(conv_layer("late", "b", "e", 16, 16, 1, 1, 1, rng));
  layers.push_back(concat("with_output", {"e", "d"}, "ed"));
  const std::vector<std::string> outputs{"wx", "aa", "e", "ed"};
  Model model = Model::build("c2f", {{"x", shape, DType::float32}}, layers, outputs);

  // The reference: each layer by cpu/ref, in order.
  auto in = random_inputs(model, 9);
  std::map<std::string, Blob> ref{{"x", in[0].blob}};
  for (const Layer& l : layers) {
    std::vector<Blob> args;
    for (const auto& i : l.inputs) args.push_back(ref.at(i));
    auto outs = test::run_layer(l, args);
    for (std::size_t k = 0; k < outs.size(); ++k) ref[l.outputs[k]] = outs[k];
  }
  const std::vector<std::vector<std::string>> schema_sets{
      {"cpu"}, {"cpu:float32:nchw16c", "cpu"}, {"cpu:float32:nhwc", "cpu"}, {}};
  for (const auto& schemas : schema_sets) {
    SessionOptions options{1};
    options.schemas = schemas;
    Session session(model, options);
    std::map<std::string, bool> view;
    for (const auto& l : session.layers()) view[l.name] = l.view;
    INFO("schemas " << fmt::format("{}", fmt::join(schemas, ",")));
    if (schemas == std::vector<std::string>{"cpu"}) {
      CHECK(view["split"]);
      CHECK(view["cat"]);
      CHECK(!view["with_input"]);   // x is the caller's memory (in a blocked layout, its copy is ours)
      CHECK(!view["with_output"]);  // so is e
    }
    CHECK(!view["twice"]);
    for (int round = 0; round < 2; ++round) {
      const auto out = session.run(in);
      REQUIRE(out.size() == outputs.size());
      for (std::size_t k = 0; k < out.size(); ++k) {
        const Blob& want = ref.at(outputs[k]);
        REQUIRE(out[k].blob.numel() == want.numel());
        int wrong = 0;
        for (int64_t i = 0; i < want.numel(); ++i) {
          const float x = out[k].blob.data_as<float>()[i], y = want.data_as<float>()[i];
          wrong += !(std::abs(x - y) <= 1e-4f * (1 + std::abs(y)));
        }
        INFO("output " << outputs[k]);
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("the plan tells every step the threads it will run on", "[session][threads]") {
  // LayerInfo::threads: what routines size per-thread state for in prepare,
  // given by the plan (a session's count), not read from a thread-local.
  Model model = detail::make_model(test::multi_io_graph());
  const auto& impl = detail::impl_of(model);
  for (int threads : {1, 3}) {
    const core::Plan plan =
        core::build_plan(impl.graph, impl.tuning, impl.shapes, nullptr, core::PlanOptions{.weights = impl.weights, .threads = threads});
    for (const auto& st : plan.steps) CHECK(st->info.threads == threads);
    for (const auto& [name, info] : plan.layer_infos) CHECK(info.threads == threads);
  }
  {
    const core::SessionThreads team(2);  // a session's own count, read once by the plan
    const core::Plan plan = core::build_plan(impl.graph, impl.tuning, impl.shapes, nullptr, core::PlanOptions{.weights = impl.weights});
    for (const auto& st : plan.steps) CHECK(st->info.threads == 2);
  }
  LayerInfo by_hand;
  CHECK(team_threads(by_hand) == core::global_pool().num_threads());
}

namespace {
// test_checked_copy: y = x. "cpu/checking" copies as a device upload does,
// checking the values for NaN and inf in the same pass
// (PreparedRoutine::checks_non_finite), and like a fast routine loses NaN
// (writes 0 for it): it refuses layers NaN may reach. "cpu/exact" copies as is.
struct CheckedCopyRuns {
  int checking = 0, exact = 0;
};
CheckedCopyRuns g_checked_copy_runs;

class CheckedCopyPrepared final : public PreparedRoutine {
 public:
  explicit CheckedCopyPrepared(bool checking) : checking_(checking) {}
  bool checks_non_finite() const override { return checking_; }
  bool saw_non_finite() const override { return saw_; }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    saw_ = false;
    for (int64_t i = 0; i < a.inputs[0]->numel(); ++i) {
      const bool finite = std::isfinite(x[i]);
      saw_ = saw_ || !finite;
      y[i] = checking_ && std::isnan(x[i]) ? 0.0f : x[i];
    }
    ++(checking_ ? g_checked_copy_runs.checking : g_checked_copy_runs.exact);
  }

 private:
  bool checking_;
  bool saw_ = false;
};

class CheckedCopy final : public Routine {
 public:
  explicit CheckedCopy(bool checking) : checking_(checking) {}
  std::string_view layer_type() const override { return "test_checked_copy"; }
  std::string_view algorithm() const override { return checking_ ? "checking" : "exact"; }
  std::vector<Schema> schemas() const override { return {Schema{}}; }
  Support supports(const LayerInfo& info, const Schema&) const override {
    return checking_ && info.keep_nan ? Support::no("gives 0 for NaN") : Support::yes();
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo&, const Schema&, const RoutineParams&) const override {
    return std::make_unique<CheckedCopyPrepared>(checking_);
  }

 private:
  bool checking_;
};
std::vector<Shape> same_shape(const Layer&, std::span<const Shape> in) { return {in[0]}; }
}  // namespace

TEST_CASE("an input only checking steps read is not scanned before the run, NaN they find runs it again on the exact plan",
          "[session]") {
  static const bool registered = (register_layer_type({"test_checked_copy", 1, 1, same_shape}), true);
  (void)registered;
  auto registry = test::registry_with(std::make_unique<CheckedCopy>(true), std::make_unique<CheckedCopy>(false));
  registry->set_default_order("test_checked_copy", {{"cpu/checking"}, {"cpu/exact"}});
  Layer copy;
  copy.name = "copy";
  copy.type = "test_checked_copy";
  copy.inputs = {"x"};
  copy.outputs = {"y"};
  core::Graph g;
  g.name = "checked";
  g.inputs = {{"x", Shape{1, 4}, DType::float32, {}}};
  g.layers = {copy};
  g.outputs = {"y"};
  Model model = detail::make_model(std::move(g), {}, {}, registry);
  Session session(model);
  Blob x = Blob::allocate({1, 4});
  float* xv = x.data_as<float>();
  xv[0] = 1, xv[1] = 2, xv[2] = -3, xv[3] = 4;
  std::vector<NamedBlob> ins{{"x", x}};
  g_checked_copy_runs = {};
  auto outs = session.run(ins);
  CHECK(outs.at(0).blob.data_as<float>()[2] == -3.0f);
  CHECK(g_checked_copy_runs.checking == 1);
  CHECK(g_checked_copy_runs.exact == 0);

  // NaN: the fast plan runs first (nothing scanned it), its copy finds NaN, the exact plan runs again.
  xv[1] = std::numeric_limits<float>::quiet_NaN();
  session.run(ins, outs);
  CHECK(std::isnan(outs.at(0).blob.data_as<float>()[1]));
  CHECK(outs.at(0).blob.data_as<float>()[3] == 4.0f);
  CHECK(g_checked_copy_runs.checking == 2);
  CHECK(g_checked_copy_runs.exact == 1);
  // The NaN-keeping plan is one of the session's plans, keyed beside the
  // shapes: layers() names what ran last (it named the fast plan's routine).
  REQUIRE(session.layers().size() == 1);
  CHECK(session.layers()[0].descriptor == "cpu/exact");
  // Step times (run_timed) come from the plan that ran last.
  const std::vector<double> ms = session.run_timed(ins, outs);
  CHECK(ms.size() == 1);
  CHECK(std::isnan(outs.at(0).blob.data_as<float>()[1]));

  // Finite again: the fast plan alone.
  xv[1] = 2;
  g_checked_copy_runs = {};
  session.run(ins, outs);
  CHECK(outs.at(0).blob.data_as<float>()[1] == 2.0f);
  CHECK(g_checked_copy_runs.checking == 1);
  CHECK(g_checked_copy_runs.exact == 0);
  CHECK(session.layers()[0].descriptor == "cpu/checking");
}

namespace {
/// y = x + w[0], packing "w + 0" once per model: counts its packs and plans.
struct PackCounts {
  int packs = 0, plans = 0;
};
PackCounts g_pack_counts;
struct AddedValue final : PackedWeights {
  float value = 0;
};
class PackingAdd final : public Routine {
 public:
  std::string_view layer_type() const override { return "test_packed_add"; }
  std::string_view algorithm() const override { return "packing"; }
  std::vector<Schema> schemas() const override { return {Schema{}}; }
  Support supports(const LayerInfo&, const Schema&) const override { return Support::yes(); }
  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams&) const override {
    ++g_pack_counts.packs;
    auto v = std::make_shared<AddedValue>();
    v->value = info.layer->weight("w").data_as<float>()[0];
    return v;
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams&,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    ++g_pack_counts.plans;
    struct Run final : PreparedRoutine {
      std::shared_ptr<const AddedValue> v;
      void run(const RunArgs& a) override {
        const float* x = a.inputs[0]->data_as<float>();
        float* y = a.outputs[0]->data_as<float>();
        for (int64_t i = 0; i < a.inputs[0]->numel(); ++i) y[i] = x[i] + v->value;
      }
    };
    REQUIRE(info.input_shapes.size() == 1);  // plan() sees the shapes; pack() (PackInfo) cannot
    auto run = std::make_unique<Run>();
    run->v = std::static_pointer_cast<const AddedValue>(std::move(packed));
    return run;
  }
};
}  // namespace

TEST_CASE("a routine packs once per model, and every session and input shape plans over that one packing", "[session][prepared]") {
  static const bool registered = (register_layer_type({"test_packed_add", 1, 1, same_shape}), true);
  (void)registered;
  Layer add;
  add.name = "add";
  add.type = "test_packed_add";
  add.inputs = {"x"};
  add.outputs = {"y"};
  add.weights["w"] = Blob::allocate({1});
  add.weights["w"].data_as<float>()[0] = 2.5f;
  core::Graph g;
  g.name = "packed";
  g.inputs = {{"x", Shape{1, 4}, DType::float32, {}}};
  g.inputs[0].dynamic_dims = {1};
  g.layers = {add};
  g.outputs = {"y"};
  const Model model = detail::make_model(std::move(g), {}, {}, test::registry_with(std::make_unique<PackingAdd>()));
  g_pack_counts = {};
  Session a(model), b(model);
  for (int64_t n : {4, 7}) {
    Blob x = Blob::allocate({1, n});
    for (int64_t i = 0; i < n; ++i) x.data_as<float>()[i] = static_cast<float>(i);
    for (Session* s : {&a, &b}) {
      const auto y = test::values(s->run(std::vector<NamedBlob>{{"x", x}})[0].blob);
      REQUIRE(y.size() == static_cast<std::size_t>(n));
      CHECK(y.back() == static_cast<float>(n - 1) + 2.5f);
    }
  }
  CHECK(g_pack_counts.packs == 1);  // two sessions, two shapes: one packing
  CHECK(g_pack_counts.plans == 4);
}

TEST_CASE("a model's graph is analysed once, and every plan of every session at any shape reads that analysis", "[session]") {
  const Model model = detail::make_model(test::chain_graph(3));
  auto graph = detail::impl_of(model).graph;
  graph.inputs[0].dynamic_dims = {0, 2, 3};
  const Model dynamic = detail::make_model(std::move(graph));
  const core::GraphAnalyses* analysed = detail::impl_of(dynamic).analyses.get();
  REQUIRE(analysed);
  for (int session = 0; session < 2; ++session) {
    detail::ShapedExecutors shaped(detail::impl_of(dynamic), SessionOptions{.shape_cache = 4});
    for (const Shape& s : {Shape{1, 4, 8, 8}, Shape{2, 4, 16, 12}, Shape{1, 4, 6, 20}}) {
      const core::Executor& e = shaped.at({{"input", s}});
      CHECK(e.plan().options.analyses.get() == analysed);  // layers_nan_may_reach and the model's int8 layers, once
    }
    CHECK(shaped.plans_built() == 3);
  }
  // The tuner's plans of the model read it too.
  CHECK(detail::impl_of(dynamic).plan_options().analyses.get() == analysed);
}

namespace {
/// relu under another name, registered after sessions exist.
class LateRelu final : public Routine {
 public:
  std::string_view layer_type() const override { return "relu"; }
  std::string_view algorithm() const override { return "test_late"; }
  std::vector<Schema> schemas() const override { return {Schema{}}; }
  Support supports(const LayerInfo&, const Schema&) const override { return Support::yes(); }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo&, const Schema&, const RoutineParams&) const override {
    struct P final : PreparedRoutine {
      void run(const RunArgs& a) override {
        const float* x = a.inputs[0]->data_as<float>();
        float* y = a.outputs[0]->data_as<float>();
        for (int64_t i = 0, n = a.inputs[0]->numel(); i < n; ++i) y[i] = std::max(x[i], 0.0f);
      }
    };
    return std::make_unique<P>();
  }
};
}  // namespace

// Plans read the registry explicitly (PlanOptions::registry), a session's frozen
// at its creation: a routine registered later never changes the routines of a
// session already running, even at a shape it plans anew.
TEST_CASE("a session chooses from the routines registered when it was created, at every shape it plans", "[session][registry]") {
  core::Graph g;
  g.name = "late";
  g.inputs = {{"x", Shape{1, 8}, DType::float32, {1}}};
  g.layers = {test::layer("act", "relu", {"x"}, {"y"})};
  g.outputs = {"y"};
  auto registry = test::registry_with();
  const Model model = detail::make_model(std::move(g), {}, {}, registry);
  auto descriptor = [](Session& s, int64_t n) {
    Blob x = test::iota_blob({1, n}, 1.0f, -4.0f);
    const auto y = s.run(std::vector<NamedBlob>{{"x", x}});
    CHECK(test::values(y[0].blob)[0] == 0.0f);
    return s.layers()[0].descriptor;
  };
  Session before(model);
  const std::string first = descriptor(before, 8);
  CHECK(first != "cpu/test_late");

  registry->add(std::make_unique<LateRelu>(), "test");
  registry->set_default_order("relu", {{"cpu/test_late"}});
  Session after(model);
  CHECK(descriptor(after, 8) == "cpu/test_late");
  CHECK(descriptor(before, 12) == first);  // a new plan, from the routines the session started with
  CHECK(descriptor(before, 8) == first);
  // The process's registry never saw the test's routine.
  CHECK(core::RoutineRegistry::instance().find("relu", "cpu/test_late", nullptr) == nullptr);
  CHECK(detail::impl_of(model).routines() == registry->snapshot());  // one frozen copy until it changes
}

// A plan's LayerInfo::threads came from the calling thread's team where the
// session's own count was not handed to it: a plan built outside a run (the
// session's layers(), a new shape met there) was sized for whatever team that
// thread had.
TEST_CASE("every plan of a session is sized for the session's threads, whatever team the thread building it runs",
          "[session][threads]") {
  auto graph = test::chain_graph(3);
  graph.inputs[0].dynamic_dims = {2, 3};
  const Model model = detail::make_model(std::move(graph));
  core::SessionThreads elsewhere(1);  // a team of one on this thread
  detail::ShapedExecutors shaped(detail::impl_of(model), SessionOptions{.threads = 2});
  for (const Shape& s : {Shape{1, 4, 8, 8}, Shape{1, 4, 12, 6}}) {
    const core::Executor& e = shaped.at({{"input", s}});
    CHECK(e.plan().options.threads == 2);
    for (const auto& step : e.steps()) CHECK(step->info.threads == 2);
  }
  // The library's count where the session names none.
  detail::ShapedExecutors library(detail::impl_of(model), SessionOptions{});
  CHECK(library.at({{"input", Shape{1, 4, 8, 8}}}).plan().options.threads == core::library_threads());
}

namespace {
// An add that says it computes the step before it too, but cannot prepare the pair.
class RefusesPair final : public Routine {
 public:
  std::string_view layer_type() const override { return "add"; }
  std::string_view algorithm() const override { return "refuses_pair"; }
  std::vector<Schema> schemas() const override { return {Schema{}}; }
  Support supports(const LayerInfo& info, const Schema&) const override {
    return info.input_shapes.size() == 2 && info.input_shapes[0] == info.input_shapes[1] ? Support::yes()
                                                                                        : Support::no("same shapes only");
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo&, const Schema&, const RoutineParams&) const override {
    struct Run final : PreparedRoutine {
      void run(const RunArgs& a) override {
        const float *x = a.inputs[0]->data_as<float>(), *y = a.inputs[1]->data_as<float>();
        float* z = a.outputs[0]->data_as<float>();
        for (int64_t i = 0; i < a.inputs[0]->numel(); ++i) z[i] = x[i] + y[i];
      }
    };
    return std::make_unique<Run>();
  }
  bool fuses_previous(const LayerInfo&, const Routine&, const RoutineParams&, const LayerInfo&, const Schema&,
                      const RoutineParams&) const override {
    return true;
  }
};
}  // namespace

// The plan fuses a step with the next layer's across the adapt of its output
// (another schema: a bfloat16 convolution and a float32 add); where the routine
// then cannot prepare them as one, the three steps run apart, adapt included.
TEST_CASE("a pair planned across an adapt that cannot be prepared as one runs apart, the adapt too", "[session]") {
  const auto relus = registered_routines("relu");
  if (std::find(relus.begin(), relus.end(), std::string("cpu:float32:nchw8c/onednn")) == relus.end()) return;
  core::Graph g;
  g.name = "pair_fallback";
  g.inputs = {{"x", Shape{1, 16, 6, 6}, DType::float32}};
  Layer relu = test::make_layer("relu", {}, {}, 1, 1, "r");
  relu.inputs = {"x"};
  relu.outputs = {"rx"};
  Layer add = test::make_layer("add", {}, {}, 2, 1, "a");
  add.inputs = {"rx", "x"};
  add.outputs = {"y"};
  g.layers = {relu, add};
  g.outputs = {"y"};
  core::Tuning tuning;
  tuning.routine_path.routines = {{"r", "cpu:float32:nchw8c/onednn", {}, 0, 0}, {"a", "cpu/refuses_pair", {}, 0, 0}};
  const Model model = detail::make_model(g, tuning, {}, test::registry_with(std::make_unique<RefusesPair>()));
  const auto& impl = detail::impl_of(model);
  const core::Plan plan = core::build_plan(impl.graph, impl.tuning, impl.shapes, nullptr, impl.plan_options());
  std::map<std::string, const core::Step*> planned;
  for (const auto& st : plan.steps) {
    UNSCOPED_INFO(st->name << " " << st->routine.descriptor);
    planned[st->name] = st.get();
  }
  REQUIRE(planned.count("r"));
  if (planned.at("r")->routine.descriptor != "cpu:float32:nchw8c/onednn") return;  // oneDNN's reference code here
  CHECK(planned.at("r")->fused_into == "a");
  CHECK(planned.at("adapt:rx->a")->fused_into == "a");
  CHECK(planned.at("a")->fuses_previous);

  Session s(model);
  for (const auto& l : s.layers()) {
    INFO(l.name);
    CHECK(l.fused_into.empty());
  }
  const Blob x = test::iota_blob(Shape{1, 16, 6, 6}, 0.01f, -2.0f);
  const auto y = test::values(s.run(std::vector<NamedBlob>{{"x", x}})[0].blob);
  const auto xs = test::values(x);
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(y[i] == std::max(0.0f, xs[i]) + xs[i]);
}
