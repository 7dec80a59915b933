// Models and sessions: DAG checks, the executor's memory plan, zero-copy and allocation-free runs.
#include "core/dnn_file.hpp"
#include "core/memory_plan.hpp"
#include "core/model_impl.hpp"
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/session.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>

using namespace softneuro;

// Counts heap allocations of the whole process while enabled.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  auto al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
// Every delete frees with free(): all the news above allocate with malloc/aligned_alloc.
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

Model build(core::Graph g, core::Tuning tuning = {}) { return detail::make_model(std::move(g), std::move(tuning)); }

std::string error_layer(core::Graph g) {
  try {
    build(std::move(g));
  } catch (const Error& e) {
    return e.layer().empty() ? "<none>: " + std::string(e.what()) : e.layer();
  }
  return "<accepted>";
}

Blob random_input(const Shape& s, unsigned seed) {
  Blob b = Blob::allocate(s);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = d(rng);
  return b;
}

}  // namespace

TEST_CASE("DAG errors name the layer at fault", "[net]") {
  SECTION("cycle") {
    auto g = test::chain_graph(4);
    g.layers[1].inputs = {"b2"};  // l1 reads l2's output, l2 reads l1's
    CHECK(error_layer(g) == "l1");
  }
  SECTION("dangling edge") {
    auto g = test::chain_graph(4);
    g.layers[2].inputs = {"nowhere"};
    CHECK(error_layer(g) == "l2");
  }
  SECTION("duplicate layer name") {
    auto g = test::chain_graph(4);
    g.layers[3].name = "l1";
    CHECK(error_layer(g) == "l1");
  }
  SECTION("a blob produced twice") {
    auto g = test::chain_graph(4);
    g.layers[2].outputs = {"b0"};
    CHECK(error_layer(g) == "l2");
  }
  SECTION("inconsistent shapes") {
    auto g = test::chain_graph(4);
    g.layers[0].weights["weight"] = Blob::allocate(Shape{4, 3, 3, 3});
    CHECK(error_layer(g) == "l0");
  }
  SECTION("unknown layer type") {
    auto g = test::chain_graph(4);
    g.layers[2].type = "frobnicate";
    CHECK(error_layer(g) == "l2");
  }
  SECTION("missing output") {
    auto g = test::chain_graph(4);
    g.outputs = {"nope"};
    CHECK_THAT(error_layer(g), Catch::Contains("nope"));
  }
}

TEST_CASE("layers given out of order are sorted topologically", "[net]") {
  auto g = test::chain_graph(5);
  std::reverse(g.layers.begin(), g.layers.end());
  Model net = build(g);
  std::vector<std::string> names;
  for (const auto& l : Session(net).layers())
    if (l.type != "adapt") names.push_back(l.name);
  CHECK(names == std::vector<std::string>{"l0", "l1", "l2", "l3", "l4"});
}

TEST_CASE("the memory plan of a 10-layer chain reuses buffers", "[net]") {
  auto g = test::chain_graph(10);
  core::Tuning tuning;
  for (const auto& l : g.layers) tuning.routine_path.routines.push_back({l.name, "cpu/ref", {}, 0, 0});  // nchw throughout
  Model net = build(g, tuning);
  INFO("planned " << Session(net).planned_bytes() << " of " << Session(net).unplanned_bytes());
  CHECK(Session(net).planned_bytes() < Session(net).unplanned_bytes());
  // A chain needs two live blobs at a time (plus alignment), not ten.
  CHECK(Session(net).planned_bytes() <= 2 * 1 * 4 * 8 * 8 * sizeof(float) + 128);
}

TEST_CASE("memory plans never overlap live buffers", "[net]") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<core::BufferRequest> req;
    int n = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      int a = static_cast<int>(rng() % 20), b = a + static_cast<int>(rng() % 6);
      req.push_back({rng() % 5000, a, b});
    }
    auto plan = core::plan_memory(req);
    for (int i = 0; i < n; ++i) {
      auto& ri = req[static_cast<std::size_t>(i)];
      CHECK(plan.offsets[static_cast<std::size_t>(i)] % 64 == 0);
      CHECK(plan.offsets[static_cast<std::size_t>(i)] + ri.bytes <= plan.arena_bytes);
      for (int j = i + 1; j < n; ++j) {
        auto& rj = req[static_cast<std::size_t>(j)];
        if (ri.last < rj.first || rj.last < ri.first || !ri.bytes || !rj.bytes) continue;
        auto ai = plan.offsets[static_cast<std::size_t>(i)], aj = plan.offsets[static_cast<std::size_t>(j)];
        CHECK((ai + ri.bytes <= aj || aj + rj.bytes <= ai));
      }
    }
  }
}

// The executor and our own routines allocate nothing per run. Wrapped oneDNN
// primitives do (dnnl_primitive_execute copies its arguments into a map: six
// small allocations per call, no public way around it), so these tests pin
// every layer to our routines; README says so.
Model pinned_to_ours(core::Graph g) {
  core::Tuning tuning;
  for (const auto& l : g.layers)
    if (l.type != "constant") tuning.routine_path.routines.push_back({l.name, "cpu/ref", {}, 0, 0});
  return detail::make_model(std::move(g), std::move(tuning));
}

/// Heap allocations of a session's second run.
int64_t allocations_of_second_run(const Model& model, std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs) {
  Session session(model);
  session.run(inputs, outputs);
  g_allocations = 0;
  g_counting = true;
  session.run(inputs, outputs);
  g_counting = false;
  return g_allocations.load();
}

TEST_CASE("Session::run allocates nothing on its second call", "[net]") {
  for (auto g : {test::chain_graph(10), test::multi_io_graph()}) {
    Model net = pinned_to_ours(g);
    std::vector<NamedBlob> inputs, outputs;
    unsigned seed = 0;
    for (const auto& t : net.inputs()) inputs.push_back({t.name, random_input(t.shape, seed++)});
    for (const auto& t : net.outputs()) outputs.push_back({t.name, Blob::allocate(t.shape)});
    CHECK(allocations_of_second_run(net, inputs, outputs) == 0);
  }
}

TEST_CASE("a net with childnet routines (cpu/winograd, cpu/conv) allocates nothing on its second call", "[net][childnet]") {
  core::Graph g;
  core::Tuning tuning;
  g.inputs = {{"x", Shape{1, 8, 10, 10}, DType::float32}};
  Layer conv;
  conv.name = "conv";
  conv.type = "conv2";
  conv.inputs = {"x"};
  conv.outputs = {"c"};
  conv.params["pads"] = std::vector<int64_t>{1, 1, 1, 1};
  conv.weights["weight"] = random_input(Shape{8, 8, 3, 3}, 3);
  conv.weights["bias"] = random_input(Shape{8}, 4);
  Layer dense;
  dense.name = "dense";
  dense.type = "dense";
  dense.inputs = {"c"};
  dense.outputs = {"y"};
  dense.weights["weight"] = random_input(Shape{5, 10}, 5);
  g.layers = {conv, dense};
  g.outputs = {"y"};
  tuning.routine_path.routines = {{"conv", "cpu/winograd", {{"tile", 4}}, 0, 0, {}}, {"dense", "cpu/conv", {}, 0, 0, {{"dense/conv", "cpu/ref", {}, 0, 0, {}}}}};  // oneDNN allocates (see above): our routines only
  Model net = build(g, tuning);
  std::vector<NamedBlob> inputs{{"x", random_input(Shape{1, 8, 10, 10}, 1)}};
  std::vector<NamedBlob> outputs{{"y", Blob::allocate(Shape{1, 8, 10, 5})}};
  CHECK(allocations_of_second_run(net, inputs, outputs) == 0);
}

TEST_CASE("the demo model runs without allocating after its first call", "[net]") {
  set_num_threads(2);
  Model net = pinned_to_ours(core::read_dnn(SOFTNEURO_DEMO_MODEL).graph);
  std::vector<NamedBlob> inputs{{"input", random_input(net.input_shape("input"), 1)}};
  std::vector<NamedBlob> outputs{{"probabilities", Blob::allocate(net.output_shape("probabilities"))}};
  CHECK(allocations_of_second_run(net, inputs, outputs) == 0);
}

TEST_CASE("outputs are written into the caller's memory, inputs read in place", "[net]") {
  Model net = build(test::multi_io_graph());
  std::vector<float> a(96), b(96), logits(5, -7.0f), r(64, -7.0f);
  for (int i = 0; i < 96; ++i) { a[static_cast<std::size_t>(i)] = static_cast<float>(i % 7) - 3; b[static_cast<std::size_t>(i)] = 0.5f; }
  std::vector<NamedBlob> inputs{{"a", Blob::view(a.data(), {1, 6, 4, 4})}, {"b", Blob::view(b.data(), {1, 6, 4, 4})}};
  std::vector<NamedBlob> outputs{{"logits", Blob::view(logits.data(), {1, 5})}, {"r", Blob::view(r.data(), {1, 4, 4, 4})}};
  Session(net).run(inputs, outputs);
  // r = relu((a + b)[:, 2:6])
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 16; ++i) {
      float s = a[static_cast<std::size_t>((c + 2) * 16 + i)] + 0.5f;
      CHECK(r[static_cast<std::size_t>(c * 16 + i)] == Approx(s > 0 ? s : 0));
    }
  // logits equal the same computation done layer by layer with cpu/ref.
  auto g = test::multi_io_graph();
  auto sum = test::run_layer(g.layers[0], {inputs[0].blob, inputs[1].blob})[0];
  auto parts = test::run_layer(g.layers[1], {sum});
  auto act = test::run_layer(g.layers[2], {parts[1]})[0];
  auto cat = test::run_layer(g.layers[3], {parts[0], act, inputs[0].blob})[0];
  auto pool = test::run_layer(g.layers[4], {cat})[0];
  auto flat = test::run_layer(g.layers[5], {pool})[0];
  auto want = test::values(test::run_layer(g.layers[6], {flat})[0]);
  for (int i = 0; i < 5; ++i) CHECK(logits[static_cast<std::size_t>(i)] == Approx(want[static_cast<std::size_t>(i)]));
}

TEST_CASE("run rejects missing, unknown and mis-shaped blobs", "[net]") {
  Model net = build(test::multi_io_graph());
  Blob a = random_input({1, 6, 4, 4}, 1), b = random_input({1, 6, 4, 4}, 2);
  std::vector<NamedBlob> only_a{{"a", a}};
  CHECK_THROWS_WITH(Session(net).run(only_a), Catch::Contains("'b' is missing"));
  std::vector<NamedBlob> unknown{{"a", a}, {"b", b}, {"c", a}};
  CHECK_THROWS_WITH(Session(net).run(unknown), Catch::Contains("no input named 'c'"));
  std::vector<NamedBlob> wrong{{"a", a}, {"b", random_input({1, 6, 4, 5}, 3)}};
  CHECK_THROWS_WITH(Session(net).run(wrong), Catch::Contains("shape [1,6,4,5]"));
  std::vector<NamedBlob> ok{{"a", a}, {"b", b}};
  std::vector<NamedBlob> bad_out{{"logits", Blob::allocate({1, 4})}};
  CHECK_THROWS_AS(Session(net).run(ok, bad_out), Error);
  CHECK(Session(net).run(ok).size() == 2);
}

TEST_CASE("a tuned routine that does not exist here falls back to the default", "[net]") {
  auto g = test::chain_graph(3);
  core::Tuning tuning;
  std::string default_choice;
  for (const auto& l : Session(build(g)).layers())
    if (l.name == "l1") default_choice = l.descriptor;
  tuning.routine_path.routines.push_back({"l1", "cpu/not_in_this_build", {}, 0, 0});
  Model net = build(g, tuning);
  for (const auto& l : Session(net).layers())
    if (l.name == "l1") {
      CHECK(l.descriptor == default_choice);
      CHECK_FALSE(l.tuned);
    }
}

TEST_CASE("results do not depend on the thread count", "[net]") {
  std::vector<float> first;
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    Model net = Model::load(SOFTNEURO_DEMO_MODEL);
    std::vector<NamedBlob> inputs{{"input", random_input(net.input_shape("input"), 9)}};
    auto out = test::values(Session(net).run(inputs)[0].blob);
    if (first.empty()) first = out;
    else CHECK(out == first);
  }
  set_num_threads(0);
}
