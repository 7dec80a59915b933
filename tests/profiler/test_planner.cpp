// The planner: a blob several layers read is converted once (its shared copy is
// a node of the cost graph), the path read back names every adapt with the
// schema it converts from, and the executor runs exactly those conversions.
#include "core/cpu_features.hpp"
#include "core/model_impl.hpp"
#include "core/registry.hpp"
#include "profiler/planner.hpp"
#include "profiler/profile_cache.hpp"
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/session.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

using namespace softneuro;

namespace {

// x -> r0 -> b; b -> r1 -> y1; b -> r2 -> y2 (b read twice).
core::Graph fork_graph() {
  core::Graph g;
  g.name = "fork";
  g.inputs = {{"x", Shape{1, 16, 8, 8}, DType::float32, {}}};
  auto relu = [](std::string name, std::string in, std::string out) {
    Layer l;
    l.name = std::move(name);
    l.type = "relu";
    l.inputs = {std::move(in)};
    l.outputs = {std::move(out)};
    return l;
  };
  g.layers = {relu("r0", "x", "b"), relu("r1", "b", "y1"), relu("r2", "b", "y2")};
  g.outputs = {"y1", "y2"};
  return g;
}

/// Whether oneDNN runs fork_graph's relu in nchw8c here (the tests' blocked schema).
/// Debian's aarch64 oneDNN has only reference code for it without SVE, which the routine refuses.
bool blocked_relu_runs() {
  Layer l;
  l.name = "r";
  l.type = "relu";
  LayerInfo info;
  info.layer = &l;
  info.input_shapes = {Shape{1, 16, 8, 8}};
  info.output_shapes = info.input_shapes;
  Schema schema;
  const Routine* r = core::RoutineRegistry::instance().find("relu", "cpu:float32:nchw8c/onednn", &schema);
  return r && r->supports(info, schema).ok;
}

/// Keeps only the layer's candidates in `schema` that are no childnets.
void only(profiler::LayerProfile& p, const Schema& schema) {
  std::vector<profiler::Measured> keep;
  for (const auto& m : p.measured)
    if (m.cand.schema == schema && m.children.empty()) keep.push_back(m);
  REQUIRE(!keep.empty());
  p.measured = std::move(keep);
}

/// profiles[0] and [1] priced: the pair's two candidates `members` ms each
/// apart, every other candidate `others`, the pair `as_one` as one step.
void price_pair(std::vector<profiler::LayerProfile>& profiles, const profiler::FusedPair& pair, double members,
                double others, double as_one) {
  for (auto& m : profiles[0].measured)
    m.unit_ms = m.cand.descriptor == pair.previous_descriptor && m.params == pair.previous_params ? members : others;
  for (auto& m : profiles[1].measured) m.unit_ms = m.cand.descriptor == pair.descriptor && m.params == pair.params ? members : others;
  profiles[1].fused_with_previous = {pair};
  profiles[1].fused_with_previous[0].unit_ms = as_one;
}

/// fork_graph unit-profiled, r0 kept to plain nchw candidates and r1, r2 to nchw8c ones.
struct ForkProfiles {
  std::shared_ptr<detail::WorkingModel> net = detail::WorkingModel::build(fork_graph());
  TuneOptions opt = [] {
    TuneOptions o;
    o.cache_dir = "-";
    o.unit_budget_ms = 0.2;
    return o;
  }();
  profiler::Profiler prof{*net, opt, profiler::Rules{}, "test", [](const char*, int, int, const std::string&) {}};
  std::vector<profiler::LayerProfile> profiles = prof.unit_profile();
  const Schema plain = Schema::parse("cpu:float32:nchw"), blocked = Schema::parse("cpu:float32:nchw8c");
  ForkProfiles() {
    REQUIRE(profiles.size() == 3);
    only(profiles[0], plain);
    only(profiles[1], blocked);
    only(profiles[2], blocked);
  }
};

}  // namespace

TEST_CASE("a candidate measured only alone is priced by its routine's slowdown in the net, not another's",
          "[tune][planner]") {
  // Three dense layers; routine A (oneDNN's int8, say) runs 1.7x its unit time
  // in the net, B (tile_dense) 1.1x. Layers 1 and 2 ran A in context; B was
  // measured in context in layer 0 only. Layer 2's weights come from memory: A
  // there ran 4x.
  std::vector<Layer> layers(3);
  std::vector<profiler::LayerProfile> profiles(3);
  auto candidate = [](const char* descriptor, double unit, double in_net) {
    profiler::Measured m;
    m.cand.descriptor = descriptor;
    m.unit_ms = unit;
    m.integrated_ms = in_net;
    return m;
  };
  for (int i = 0; i < 3; ++i) {
    layers[static_cast<std::size_t>(i)].name = "d" + std::to_string(i);
    layers[static_cast<std::size_t>(i)].type = "dense";
    profiles[static_cast<std::size_t>(i)].layer = &layers[static_cast<std::size_t>(i)];
  }
  profiles[0].measured = {candidate("A", 1.0, 1.7), candidate("B", 1.2, 1.32)};
  profiles[1].measured = {candidate("A", 1.0, 1.7), candidate("B", 1.2, 0), candidate("C", 1.1, 0)};
  profiles[2].measured = {candidate("A", 1.0, 4.0), candidate("B", 1.2, 0)};
  profiler::update_context_ratios(profiles);
  // Layer 1: B at its own 1.1x (A's 1.7 here scaled by B's 1.1 over A's 1.7),
  // 1.32 ms against A's 1.7; C, never measured in context, at the layer's 1.7x.
  CHECK(profiles[1].cost(profiles[1].measured[1], true) == Approx(1.32));
  CHECK(profiles[1].cost(profiles[1].measured[0], true) == Approx(1.7));
  CHECK(profiles[1].cost(profiles[1].measured[2], true) == Approx(1.1 * 1.7));
  // Layer 2 keeps its own slowdown: B at 4 x 1.1 / 1.7, not B's 1.1 alone.
  CHECK(profiles[2].cost(profiles[2].measured[1], true) == Approx(1.2 * 4.0 * 1.1 / 1.7));
  // Unit costs are unit costs.
  CHECK(profiles[1].cost(profiles[1].measured[1], false) == Approx(1.2));
  // Another layer type's slowdowns do not price B.
  layers[0].type = "conv2";
  profiler::update_context_ratios(profiles);
  CHECK(profiles[1].cost(profiles[1].measured[1], true) == Approx(1.2 * 1.7));
}

TEST_CASE("the planner converts a blob several layers read once, and the executor follows the path", "[tune][planner]") {
  if (!blocked_relu_runs()) {
    WARN("no nchw8c relu runs on this CPU: not checked");
    return;
  }
  ForkProfiles f;
  auto& [net, opt, prof, profiles, plain, blocked] = f;

  profiler::Plan plan = profiler::build_plan(*net, profiles, prof, false);
  // 3 layers, x and the two outputs fixed, b's shared copy.
  CHECK(plan.graph.num_nodes() == 7);
  const dprs::Solution sol = dprs::solve(plan.graph);
  REQUIRE(sol.feasible);
  const profiler::PlannedPath planned = profiler::read_path(plan, sol, profiles, false, "here");
  // The cost graph itself counts b's conversion once: nothing left to deduplicate.
  CHECK(planned.predicted_ms == Approx(sol.total));

  std::multiset<std::string> conversions;
  for (const auto& a : planned.path.adapts) {
    conversions.insert(a.blob + ":" + a.consumer + ":" + a.to_schema);
    UNSCOPED_INFO(a.blob << " " << a.consumer << " " << a.from_schema << " -> " << a.to_schema);
  }
  CHECK(conversions.count("b::cpu:float32:nchw8c") == 1);      // the shared copy
  CHECK(conversions.count("y1:output:" + Schema{}.to_string()) == 1);
  CHECK(conversions.count("y2:output:" + Schema{}.to_string()) == 1);
  CHECK(planned.path.adapts.size() == 3);

  // The executor runs exactly the path's conversions, with the path's routines.
  // (The path beside the graph: nothing of the graph is copied.)
  core::Executor exec(core::build_plan(net->graph, net->tuning, net->shapes, &planned.path, net->plan_options(false)));
  std::vector<std::string> adapt_steps;
  for (const auto& step : exec.steps())
    if (step->layer->type == "adapt") {
      adapt_steps.push_back(step->name);
      UNSCOPED_INFO(step->name);
      CHECK(step->tuned);
    }
  CHECK(adapt_steps.size() == 3);
  CHECK(std::count(adapt_steps.begin(), adapt_steps.end(), "adapt:b@cpu:float32:nchw8c") == 1);

  // And computes what the untuned net computes.
  core::Tuning tuning;
  tuning.routine_path = planned.path;
  Model tuned = detail::make_model(net->graph, tuning), plain_net = detail::make_model(fork_graph());
  std::vector<NamedBlob> in{{"x", test::iota_blob(Shape{1, 16, 8, 8}, 0.01f, -0.5f)}};
  auto a = Session(tuned).run(in), b = Session(plain_net).run(in);
  for (std::size_t k = 0; k < a.size(); ++k) CHECK(test::values(a[k].blob) == test::values(b[k].blob));
}

TEST_CASE("integrated planning prices an adapt by its time measured in the net", "[tune][planner]") {
  if (!blocked_relu_runs()) {
    WARN("no nchw8c relu runs on this CPU: not checked");
    return;
  }
  ForkProfiles f;
  // References, not a structured binding: clang 14 does not let a lambda capture one (C++20).
  auto& net = f.net;
  auto& prof = f.prof;
  auto& profiles = f.profiles;
  const Schema& plain = f.plain;
  const Schema& blocked = f.blocked;
  // The cost graph's price of b's shared copy from plain to blocked.
  auto shared_copy_ms = [&](bool integrated) {
    const profiler::Plan plan = profiler::build_plan(*net, profiles, prof, integrated);
    const auto index = [&](const Schema& s) {
      return static_cast<int>(std::find(plan.schemas.begin(), plan.schemas.end(), s) - plan.schemas.begin());
    };
    const int S = plan.graph.num_schemas;
    for (std::size_t e = 0; e < plan.edges.size(); ++e)
      if (plan.edges[e].blob == "b" && plan.edges[e].consumer.empty())
        return plan.graph.edges[e].adapt[static_cast<std::size_t>(index(plain) * S + index(blocked))];
    FAIL("no shared copy of b");
    return 0.0;
  };
  const double unit = shared_copy_ms(false);
  REQUIRE(unit < profiler::kInf);
  prof.record_adapt_in_context("b", "", plain, blocked, unit + 7.0);
  CHECK(shared_copy_ms(true) == Approx(unit + 7.0));
  CHECK(shared_copy_ms(false) == Approx(unit));  // unit planning keeps the unit time
}

TEST_CASE("a path whose shared copy no longer applies converts directly", "[tune][planner]") {
  if (!blocked_relu_runs()) {
    WARN("no nchw8c relu runs on this CPU: not checked");
    return;
  }
  // The path says r1 converts b from a shared nhwc copy made from nchw16c, but
  // r0 runs in nchw here: the executor converts b for r1 directly.
  core::Graph g = fork_graph();
  core::Tuning tuning;
  core::RoutinePath path;
  path.routines = {{"r0", "cpu/ref", {}, 0, 0, {}}, {"r1", "cpu:float32:nchw8c/onednn", {}, 0, 0, {}}};
  path.adapts = {{"b", "", "cpu:float32:nchw16c", "cpu:float32:nhwc", {"cpu:float32:nhwc/reorder"}, 0, {}},
                 {"b", "r1", "cpu:float32:nhwc", "cpu:float32:nchw8c", {"cpu:float32:nchw8c/reorder"}, 0, {}}};
  tuning.routine_path = path;
  auto net = detail::WorkingModel::build(g, tuning);
  core::Executor exec(core::build_plan(net->graph, net->tuning, net->shapes, nullptr, net->plan_options(false)));
  int adapts = 0;
  for (const auto& step : exec.steps()) adapts += step->layer->type == "adapt";
  CHECK(adapts == 2);  // b for r1, y1 back to the net's schema
  Model tuned = detail::make_model(g, tuning), plain_net = detail::make_model(fork_graph());
  std::vector<NamedBlob> in{{"x", test::iota_blob(Shape{1, 16, 8, 8}, 0.01f, -0.5f)}};
  auto a = Session(tuned).run(in), b = Session(plain_net).run(in);
  for (std::size_t k = 0; k < a.size(); ++k) CHECK(test::values(a[k].blob) == test::values(b[k].blob));
}

TEST_CASE("the planner prices a constant's conversion at nothing: sessions convert it once", "[tune][planner][constant]") {
  core::Graph g;
  g.name = "scaled";
  const Shape shape{1, 16, 8, 8};
  g.inputs = {{"x", shape, DType::float32, {}}};
  Layer c;
  c.name = "c";
  c.type = "constant";
  c.outputs = {"cv"};
  c.weights["value"] = test::iota_blob(shape, 0.01f, -0.5f);
  Layer mul;
  mul.name = "mul";
  mul.type = "mul";
  mul.inputs = {"x", "cv"};
  mul.outputs = {"y"};
  g.layers = {c, mul};
  g.outputs = {"y"};
  auto net = detail::WorkingModel::build(g);
  TuneOptions opt;
  opt.cache_dir = "-";
  opt.unit_budget_ms = 0.2;
  profiler::Profiler prof(*net, opt, profiler::Rules{}, "test", [](const char*, int, int, const std::string&) {});
  auto profiles = prof.unit_profile();
  REQUIRE(profiles.size() == 1);
  const Schema blocked = Schema::parse("cpu:float32:nchw8c");
  bool blocked_mul = false;
  for (const auto& m : profiles[0].measured) blocked_mul = blocked_mul || (m.cand.schema == blocked && m.children.empty());
  if (!blocked_mul) {
    WARN("no nchw8c mul runs on this CPU: not checked");
    return;
  }
  only(profiles[0], blocked);
  const profiler::Plan plan = profiler::build_plan(*net, profiles, prof, false, /*step_ms=*/0.01);
  const dprs::Solution sol = dprs::solve(plan.graph);
  REQUIRE(sol.feasible);
  const profiler::PlannedPath planned = profiler::read_path(plan, sol, profiles, false, "here");
  int constant_adapts = 0;
  double others = 0;
  for (const auto& a : planned.path.adapts) {
    UNSCOPED_INFO(a.blob << " -> " << a.consumer << ": " << a.predicted_ms << " ms");
    if (a.blob == "cv") {
      ++constant_adapts;
      CHECK(a.predicted_ms == 0);
      CHECK(a.steps.size() == 1);  // a routine converts it
    } else {
      others += a.predicted_ms;
    }
  }
  CHECK(constant_adapts == 1);
  // The prediction is the layer and its step, x's and y's conversions (their steps' cost included): nothing for cv.
  CHECK(others > 0);
  CHECK(planned.predicted_ms == Approx(planned.path.routines[0].predicted_ms + 0.01 + others));
}

namespace {
// x -> 1x1 conv -> c; y = c + x: a convolution and the residual add after it.
core::Graph residual_graph() {
  core::Graph g;
  g.name = "residual";
  g.inputs = {{"x", Shape{1, 32, 14, 14}, DType::float32, {}}};
  Layer conv = test::make_layer("conv2", {}, {}, 1, 1, "conv");
  conv.inputs = {"x"};
  conv.outputs = {"c"};
  conv.weights = {{"weight", test::iota_blob(Shape{32, 32, 1, 1}, 0.001f, -0.5f)}, {"bias", test::iota_blob(Shape{32}, 0.01f, -0.1f)}};
  Layer add = test::make_layer("add", {}, {}, 2, 1, "add");
  add.inputs = {"c", "x"};
  add.outputs = {"y"};
  g.layers = {conv, add};
  g.outputs = {"y"};
  return g;
}

struct MeasuredPairs {
  std::vector<profiler::FusedPair> pairs;  ///< the add's, with the convolution before it
  int remeasured = 0;                      ///< Profiler::cache_remeasured()
};

// The fused pairs a profiler with `opt` measures on residual_graph(), its
// cache saved where `save`.
MeasuredPairs measure_pairs(detail::WorkingModel& net, const TuneOptions& opt, bool save = false) {
  profiler::Profiler prof(net, opt, profiler::Rules{}, "test", [](const char*, int, int, const std::string&) {});
  auto profiles = prof.unit_profile();
  prof.measure_fused_pairs(profiles);
  if (save) prof.save_cache();
  if (profiles.size() != 2) return {{}, prof.cache_remeasured()};
  return {profiles[1].fused_with_previous, prof.cache_remeasured()};
}
}  // namespace

// A oneDNN convolution and the residual add after it run as one step wherever
// a path picks both (the plan fuses them), but DPRS priced the two apart: the
// tuned ResNet50 took other convolutions before its 16 adds and ran 31-32 ms
// where the fused pairs run 26-27 (same run).
TEST_CASE("the planner prices two layers one routine computes as one step at that step's time", "[tune][planner]") {
  auto net = detail::WorkingModel::build(residual_graph());
  TuneOptions opt;
  opt.cache_dir = "-";
  opt.unit_budget_ms = 0.2;
  profiler::Profiler prof(*net, opt, profiler::Rules{}, "test", [](const char*, int, int, const std::string&) {});
  auto profiles = prof.unit_profile();
  REQUIRE(profiles.size() == 2);
  prof.measure_fused_pairs(profiles);
  if (profiles[1].fused_with_previous.empty()) {
    WARN("no routine runs a convolution and an add as one step on this CPU: not checked");
    return;
  }
  CHECK(profiles[0].fused_with_previous.empty());
  const profiler::FusedPair pair = profiles[1].fused_with_previous.front();
  INFO(pair.previous_descriptor << " + " << pair.descriptor);
  CHECK(pair.unit_ms > 0);
  CHECK(pair.unit_ms < profiler::kInf);
  // In the pair's schema: the pair's candidates 1 ms each apart, every other
  // candidate 0.5, the pair 0.6 as one step.
  for (auto& p : profiles) only(p, pair.schema);
  price_pair(profiles, pair, 1.0, 0.5, 0.6);

  const profiler::Plan plan = profiler::build_plan(*net, profiles, prof, false, /*step_ms=*/0.01);
  const dprs::Solution sol = dprs::solve(plan.graph);
  REQUIRE(sol.feasible);
  const profiler::PlannedPath planned = profiler::read_path(plan, sol, profiles, false, "here");
  CHECK(planned.path.routines[0].descriptor == pair.previous_descriptor);
  CHECK(planned.path.routines[0].params == pair.previous_params);
  CHECK(planned.path.routines[1].descriptor == pair.descriptor);
  CHECK(planned.path.routines[1].params == pair.params);
  CHECK(planned.path.routines[0].predicted_ms == 0);
  CHECK(planned.path.routines[1].predicted_ms == Approx(0.6));
  // One step: the pair and one dispatch, beside x's and y's conversions.
  double adapts = 0;
  for (const auto& a : planned.path.adapts) adapts += a.predicted_ms;
  CHECK(planned.predicted_ms == Approx(0.6 + 0.01 + adapts));

  // The plan runs the pair as one step, as priced.
  const core::Plan run = core::build_plan(net->graph, net->tuning, net->shapes, &planned.path);
  const core::Step* c = nullptr;
  for (const auto& s : run.steps)
    if (s->name == "conv") c = s.get();
  REQUIRE(c);
  CHECK(c->fused_into == "add");

  // Where the pair saves nothing, the layers' fastest candidates apart.
  profiles[1].fused_with_previous[0].unit_ms = 3.0;
  const profiler::Plan apart_plan = profiler::build_plan(*net, profiles, prof, false, 0.01);
  const profiler::PlannedPath apart = profiler::read_path(apart_plan, dprs::solve(apart_plan.graph), profiles, false, "here");
  if (profiles[0].measured.size() > 1)
    CHECK_FALSE((apart.path.routines[0].descriptor == pair.previous_descriptor &&
                 apart.path.routines[0].params == pair.previous_params));

  // The pair's candidates the fastest apart (0.5 each), but slower as the one
  // step the plan makes of them (3.0): DPRS priced them apart and a tuned
  // ResNet50 ran a 6 ms step it had priced at 0.7. Priced as the pair, the
  // next fastest two that run apart win (1.0 each).
  if (profiles[0].measured.size() < 2 || profiles[1].measured.size() < 2) return;
  price_pair(profiles, pair, 0.5, 1.0, 3.0);
  const profiler::Plan slow_plan = profiler::build_plan(*net, profiles, prof, false, 0.01);
  const profiler::PlannedPath slow = profiler::read_path(slow_plan, dprs::solve(slow_plan.graph), profiles, false, "here");
  const bool took_pair = slow.path.routines[0].descriptor == pair.previous_descriptor &&
                         slow.path.routines[0].params == pair.previous_params &&
                         slow.path.routines[1].descriptor == pair.descriptor && slow.path.routines[1].params == pair.params;
  CHECK_FALSE(took_pair);
  CHECK_FALSE(profiles[1].fused_pair(slow.picks[0], slow.picks[1]));
  double slow_adapts = 0;
  for (const auto& a : slow.path.adapts) slow_adapts += a.predicted_ms;
  CHECK(slow.predicted_ms == Approx(slow.path.routines[0].predicted_ms + slow.path.routines[1].predicted_ms + 0.02 + slow_adapts));
  CHECK(slow.predicted_ms < 3.0 + 0.01 + slow_adapts);
}

// A fused pair's cached time beside its members measured now (not cached, or
// spot-checked and found off) compares unevenly with them: measured again.
TEST_CASE("a fused pair's cached time is measured again where its members were measured now", "[tune][planner][cache]") {
  auto net = detail::WorkingModel::build(residual_graph());
  TuneOptions opt;
  opt.cache_dir = "-";
  opt.unit_budget_ms = 0.2;
  const MeasuredPairs first = measure_pairs(*net, opt);
  if (first.pairs.empty()) {
    WARN("no routine runs a convolution and an add as one step on this CPU: not checked");
    return;
  }
  // A cache holding only the pairs, each 1000 ms: their members are measured now.
  const std::string dir = test::temp_path("pair_cache");
  std::filesystem::remove_all(dir);
  {
    profiler::ProfileCache lie(dir);
    for (const auto& f : first.pairs) lie.put(f.cache_key, 1000.0);
    lie.save();
  }
  opt.cache_dir = dir;
  const MeasuredPairs again = measure_pairs(*net, opt);
  REQUIRE(!again.pairs.empty());
  // (Pairs are measured for each routine's fastest two parameter sets, which
  // the noise may pick differently this time: those the cache holds count.)
  int cached = 0;
  for (const auto& f : again.pairs) {
    INFO(f.previous_descriptor << " + " << f.descriptor);
    CHECK(f.unit_ms < 100.0);
    for (const auto& g : first.pairs) cached += g.cache_key == f.cache_key;
  }
  CHECK(cached > 0);
  CHECK(again.remeasured >= cached);
}

// Cached pairs beside cached members were reused unchecked: a pair's time from
// another machine state (here 1000 ms) decided the fusion unseen. They are
// spot-checked by routine pair and schema, as childnet children are.
TEST_CASE("cached fused pairs beside cached members are spot-checked and measured again where they lie",
          "[tune][planner][cache]") {
  auto net = detail::WorkingModel::build(residual_graph());
  const std::string dir = test::temp_path("pair_spot_cache");
  std::filesystem::remove_all(dir);
  TuneOptions opt;
  opt.cache_dir = dir;
  opt.unit_budget_ms = 0.2;
  const MeasuredPairs first = measure_pairs(*net, opt, /*save=*/true);
  if (first.pairs.empty()) {
    WARN("no routine runs a convolution and an add as one step on this CPU: not checked");
    return;
  }
  {
    profiler::ProfileCache lie(dir);
    for (const auto& f : first.pairs) lie.put(f.cache_key, 1000.0, 0.0);
    lie.save();
  }
  const MeasuredPairs again = measure_pairs(*net, opt);
  REQUIRE(!again.pairs.empty());
  for (const auto& f : again.pairs) {
    INFO(f.previous_descriptor << " + " << f.descriptor);
    CHECK(f.unit_ms < 100.0);
  }
  std::filesystem::remove_all(dir);
}

// A hybrid path's bfloat16 convolution before a float32 residual add ran as
// three steps (the convolution, a cast of its output, the add): the add's
// routine computes the pair as one step across the two schemas, the
// convolution writing float32 onto the residual. Priced by DPRS as that step
// (no cast), planned so, computing the float32 net's values to bfloat16's precision.
TEST_CASE("a bfloat16 convolution and the float32 add after it are priced and run as one step, no cast between",
          "[tune][planner]") {
  if (!core::cpu_features().avx512_bf16) {
    WARN("no bfloat16 instructions on this CPU: not checked");
    return;
  }
  auto net = detail::WorkingModel::build(residual_graph());
  TuneOptions opt;
  opt.cache_dir = "-";
  opt.unit_budget_ms = 0.2;
  profiler::Rules rules;
  rules.schemas = {"cpu:float32:*", "cpu:bfloat16:*"};
  profiler::Profiler prof(*net, opt, rules, "test", [](const char*, int, int, const std::string&) {});
  auto profiles = prof.unit_profile();
  REQUIRE(profiles.size() == 2);
  prof.measure_fused_pairs(profiles);
  const Schema bf16{Device::cpu, DType::bfloat16, Layout::nchw16c}, f32{Device::cpu, DType::float32, Layout::nchw16c};
  const profiler::FusedPair* across = nullptr;
  for (const auto& f : profiles[1].fused_with_previous)
    if (f.previous_schema == bf16 && f.schema == f32) across = &f;
  REQUIRE(across);
  const profiler::FusedPair pair = *across;
  INFO(pair.previous_descriptor << " + " << pair.descriptor);
  CHECK(pair.unit_ms < profiler::kInf);

  // The convolution in bfloat16, the add in float32: 1 ms each apart, 0.6 as one step.
  only(profiles[0], bf16);
  only(profiles[1], f32);
  price_pair(profiles, pair, 1.0, 5.0, 0.6);
  const profiler::Plan plan = profiler::build_plan(*net, profiles, prof, false, /*step_ms=*/0.01);
  const dprs::Solution sol = dprs::solve(plan.graph);
  REQUIRE(sol.feasible);
  const profiler::PlannedPath planned = profiler::read_path(plan, sol, profiles, false, "here");
  CHECK(planned.path.routines[0].descriptor == pair.previous_descriptor);
  CHECK(planned.path.routines[1].descriptor == pair.descriptor);
  CHECK(planned.path.routines[0].predicted_ms == 0);
  CHECK(planned.path.routines[1].predicted_ms == Approx(0.6));
  // The cast of c the pair makes unneeded costs nothing; the others (x's, y's) what they cost.
  double adapts = 0;
  bool c_cast = false;
  for (const auto& a : planned.path.adapts) {
    adapts += a.predicted_ms;
    if (a.blob == "c") {
      c_cast = true;
      CHECK(a.predicted_ms == 0);
    }
  }
  CHECK(c_cast);
  CHECK(planned.predicted_ms == Approx(0.6 + 0.01 + adapts));

  // Slower as one step than two others apart: those two, the cast priced as
  // the cast. (A second candidate each where the schema has one: the same
  // routine under other parameters, which no measured pair names.)
  {
    for (auto& p : profiles)
      if (p.measured.size() < 2) {
        p.measured.push_back(p.measured.front());
        p.measured.back().params.push_back({"other", 1});
      }
    price_pair(profiles, pair, 0.5, 1.0, 3.0);
    const profiler::Plan slow_plan = profiler::build_plan(*net, profiles, prof, false, 0.01);
    const profiler::PlannedPath slow = profiler::read_path(slow_plan, dprs::solve(slow_plan.graph), profiles, false, "here");
    CHECK_FALSE(profiles[1].fused_pair(slow.picks[0], slow.picks[1]));
    double slow_adapts = 0;
    for (const auto& a : slow.path.adapts) {
      slow_adapts += a.predicted_ms;
      if (a.blob == "c") CHECK(a.predicted_ms < 0.5);
    }
    // (One of the pair's candidates with another of the next layer's is no pair: 0.5 + 1.0.)
    CHECK(slow.path.routines[0].predicted_ms + slow.path.routines[1].predicted_ms == Approx(1.5));
    CHECK(slow.predicted_ms == Approx(1.5 + 0.02 + slow_adapts));
  }

  // The plan runs the pair as one step, its cast computed by it too.
  core::Executor exec(core::build_plan(net->graph, net->tuning, net->shapes, &planned.path, net->plan_options(false)));
  int fused_steps = 0;
  for (const auto& s : exec.steps()) {
    UNSCOPED_INFO(s->name << " " << s->routine.descriptor << " fused into '" << s->fused_into << "'");
    if (s->name == "conv" || s->name.rfind("adapt:c", 0) == 0) fused_steps += s->fused_into == "add";
  }
  CHECK(fused_steps == 2);

  // Its values: the float32 net's, within bfloat16's rounding of x and the weights.
  core::Tuning tuning;
  tuning.routine_path = planned.path;
  Model tuned = detail::make_model(net->graph, tuning), plain_net = detail::make_model(residual_graph());
  std::vector<NamedBlob> in{{"x", test::iota_blob(Shape{1, 32, 14, 14}, 0.0007f, -2.0f)}};
  const auto got = test::values(Session(tuned).run(in)[0].blob), want = test::values(Session(plain_net).run(in)[0].blob);
  REQUIRE(got.size() == want.size());
  float scale = 0, worst = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    scale = std::max(scale, std::abs(want[k]));
    worst = std::max(worst, std::abs(got[k] - want[k]));
  }
  CHECK(worst <= 0.02f * scale);
  CHECK(worst > 0);  // computed in bfloat16 indeed
}

// Likewise a qint8 convolution before a float32 add: its int8 products scaled
// to real values and summed onto the residual in float32, no dequantising
// adapt and no rounding to the convolution's output scale between them.
TEST_CASE("a qint8 convolution and the float32 add after it run as one step, no dequantisation between", "[planner][qint8]") {
  core::Tuning tuning;
  tuning.blob_quant["x"] = QuantParams{{2.0f / 255}, {0}, -1};
  tuning.blob_quant["c"] = QuantParams{{0.08f}, {3}, -1};
  auto run = [&](const char* add_routine) {
    tuning.routine_path.routines = {{"conv", "cpu:qint8:nhwc/onednn", {}, 0, 0}, {"add", add_routine, {}, 0, 0}};
    Session s(detail::make_model(residual_graph(), tuning));
    std::map<std::string, LayerSummary> by_name;
    for (const auto& l : s.layers()) by_name[l.name] = l;
    std::vector<NamedBlob> in{{"x", test::iota_blob(Shape{1, 32, 14, 14}, 0.0003f, -0.95f)}};
    return std::make_pair(by_name, test::values(s.run(in)[0].blob));
  };
  const auto [layers, fused] = run("cpu:float32:nhwc/onednn");
  if (layers.at("conv").descriptor != "cpu:qint8:nhwc/onednn") {
    WARN("oneDNN's int8 convolution does not run on this CPU (no VNNI): not checked");
    return;
  }
  CHECK(layers.at("conv").fused_into == "add");
  int fused_adapts = 0;
  for (const auto& [name, l] : layers) fused_adapts += l.type == "adapt" && l.fused_into == "add" && name.find(":c") != std::string::npos;
  CHECK(fused_adapts == 1);
  // Against float32, and against the two apart (dequantised between, cpu/ref's add).
  std::vector<NamedBlob> in{{"x", test::iota_blob(Shape{1, 32, 14, 14}, 0.0003f, -0.95f)}};
  const auto want = test::values(Session(detail::make_model(residual_graph())).run(in)[0].blob);
  const auto [apart_layers, apart] = run("cpu/ref");
  CHECK(apart_layers.at("conv").fused_into.empty());
  REQUIRE(fused.size() == want.size());
  float worst = 0, worst_apart = 0;
  for (std::size_t k = 0; k < want.size(); ++k) {
    worst = std::max(worst, std::abs(fused[k] - want[k]));
    worst_apart = std::max(worst_apart, std::abs(apart[k] - want[k]));
  }
  // The input's and weights' rounding alone; apart, the output's (0.08 / 2) too.
  CHECK(worst < 0.06f);
  CHECK(worst <= worst_apart + 1e-5f);
}

// Two residual blocks as ONNX Runtime's quantize_static writes them: each
// convolution's output restated by a fake_quant (QuantizeLinear, the same
// quantisation: in int8 a view), the add reading that, its output restated
// again and read by the next block as its residual. The convolution and the
// add still run as one step, each summing onto its residual in place; the
// second block's residual is the first's restated output, whose memory is
// the first block's residual's (a view of an in-place output: before, the
// view kept the add's output as its root and the arena gave that memory away
// while the second block still read it).
namespace {
// Weights within +-0.01 (conv3's +-0.002) and biases within [-0.1, 0.2] keep
// every value within the quantisation ranges below (x in [-0.95, 0.93]).
core::Graph qdq_residual_graph() {
  core::Graph g;
  g.name = "qdq_residual";
  g.inputs = {{"x", Shape{1, 32, 14, 14}, DType::float32, {}}};
  auto conv = [](const char* name, const char* in, const char* out, int64_t c, int64_t oc, int64_t k = 1, float w = 0.01f) {
    Layer l = test::make_layer("conv2", {{"pads", std::vector<int64_t>(4, k / 2)}}, {}, 1, 1, name);
    l.inputs = {in};
    l.outputs = {out};
    const Shape shape{oc, c, k, k};
    l.weights = {{"weight", test::iota_blob(shape, 2 * w / static_cast<float>(shape.numel()), -w)},
                 {"bias", test::iota_blob(Shape{oc}, 0.3f / static_cast<float>(oc), -0.1f)}};
    return l;
  };
  auto restate = [](const char* name, const char* in, const char* out, float scale, int64_t zero_point) {
    Layer l = test::make_layer("fake_quant",
                               {{"scale", double(scale)}, {"zero_point", zero_point}, {"qmin", int64_t{0}}, {"qmax", int64_t{255}}},
                               {}, 1, 1, name);
    l.inputs = {in};
    l.outputs = {out};
    return l;
  };
  auto add = [](const char* name, const char* a, const char* b, const char* out) {
    Layer l = test::make_layer("add", {{"act", std::string("relu")}}, {}, 2, 1, name);
    l.inputs = {a, b};
    l.outputs = {out};
    return l;
  };
  // Each block two convolutions and its residual. The residuals have 64
  // channels, the input 32 and the blocks' middles 48: only the first
  // residual's memory can hold conv3's output, whose 3x3 window reads each
  // pixel's neighbours (were its input's memory given to its output, it would
  // read values it had overwritten).
  g.layers = {conv("conv0", "x", "r", 32, 64),
              conv("conv1a", "r", "h1", 64, 48), conv("conv1", "h1", "c1", 48, 64),
              restate("q1", "c1", "c1q", 1.0f / 255, 128), add("add1", "c1q", "r", "y1"),
              restate("qy1", "y1", "y1q", 1.0f / 255, 0),
              conv("conv2a", "y1q", "h2", 64, 48), conv("conv2", "h2", "c2", 48, 64),
              restate("q2", "c2", "c2q", 1.2f / 255, 128), add("add2", "c2q", "y1q", "y2"),
              restate("qy2", "y2", "y2q", 1.6f / 255, 0),
              conv("conv3", "y2q", "o1", 64, 64, 3, 0.002f), conv("conv4", "o1", "o", 64, 32)};
  g.outputs = {"o"};
  return g;
}
}  // namespace

TEST_CASE("a qint8 convolution and the add after it run as one step across a fake_quant restating its output", "[planner][qint8]") {
  core::Tuning tuning;
  // The int8 blobs' quantisation as the importer gives a QDQ file's (u8 zero point - 128).
  tuning.blob_quant["x"] = QuantParams{{2.0f / 255}, {0}, -1};
  tuning.blob_quant["r"] = QuantParams{{1.2f / 255}, {0}, -1};
  for (const char* b : {"h1", "h2"}) tuning.blob_quant[b] = QuantParams{{1.6f / 255}, {0}, -1};
  for (const char* b : {"c1", "c1q"}) tuning.blob_quant[b] = QuantParams{{1.0f / 255}, {0}, -1};
  for (const char* b : {"y1", "y1q"}) tuning.blob_quant[b] = QuantParams{{1.0f / 255}, {-128}, -1};
  for (const char* b : {"c2", "c2q"}) tuning.blob_quant[b] = QuantParams{{1.2f / 255}, {0}, -1};
  for (const char* b : {"y2", "y2q"}) tuning.blob_quant[b] = QuantParams{{1.6f / 255}, {-128}, -1};
  tuning.blob_quant["o1"] = QuantParams{{2.4f / 255}, {0}, -1};
  tuning.blob_quant["o"] = QuantParams{{1.0f / 255}, {0}, -1};
  const std::vector<NamedBlob> in{{"x", test::iota_blob(Shape{1, 32, 14, 14}, 0.0003f, -0.95f)}};
  auto run = [&](const char* add_routine, bool restated_out = false) {
    tuning.routine_path.routines.clear();
    for (const char* l : {"conv0", "conv1a", "conv1", "conv2a", "conv2", "conv3", "conv4"})
      tuning.routine_path.routines.push_back({l, "cpu:qint8:nhwc/onednn", {}, 0, 0});
    for (const char* l : {"q1", "qy1", "q2", "qy2"}) tuning.routine_path.routines.push_back({l, "cpu:qint8:nhwc/qint8", {}, 0, 0});
    for (const char* l : {"add1", "add2"}) tuning.routine_path.routines.push_back({l, add_routine, {}, 0, 0});
    SessionOptions options;
    options.threads = 2;
    core::Graph g = qdq_residual_graph();
    if (restated_out) g.outputs.push_back("c1q");
    Session s(detail::make_model(g, tuning), options);
    std::map<std::string, LayerSummary> by_name;
    for (const auto& l : s.layers()) by_name[l.name] = l;
    std::vector<float> first = test::values(s.run(in)[0].blob);
    CHECK(test::values(s.run(in)[0].blob) == first);  // the same again: nothing it still reads was overwritten
    return std::make_pair(by_name, first);
  };
  const auto [layers, fused] = run("cpu:qint8:nhwc/onednn");
  if (layers.at("conv1").descriptor != "cpu:qint8:nhwc/onednn") {
    WARN("oneDNN's int8 convolution does not run on this CPU (no VNNI): not checked");
    return;
  }
  CHECK(layers.at("conv1").fused_into == "add1");
  CHECK(layers.at("conv2").fused_into == "add2");
  CHECK(layers.at("q1").fused_into == "add1");
  {
    // Each block writes onto its residual, the second onto the first's (the
    // restated output's memory): every blob sharing memory names the blob that
    // owns it, which lives as long as they do.
    auto net = detail::WorkingModel::build(qdq_residual_graph(), tuning);
    core::Executor exec(core::build_plan(net->graph, net->tuning, net->shapes, nullptr, net->plan_options(false)));
    const auto& slots = exec.plan().slots;
    int shared = 0;
    for (const auto& s : slots) {
      if (s.alias < 0) continue;
      const auto& root = slots[static_cast<std::size_t>(s.alias)];
      INFO("blob '" << s.name << "' in the memory of '" << root.name << "'");
      CHECK(root.alias < 0);
      CHECK(root.last >= s.last);
      shared += s.name == "y2q" && root.name == "r";
    }
    CHECK(shared == 1);
  }
  const auto [apart_layers, apart] = run("cpu:qint8:nhwc/qint8");
  CHECK(apart_layers.at("conv1").fused_into.empty());
  // Against the model's own arithmetic (float32, each fake_quant rounding):
  // apart computes it but for int8 rounding on the way; fused, each sum rounds
  // once where the model rounds twice: as close on the whole.
  const auto want = test::values(Session(detail::make_model(qdq_residual_graph())).run(in)[0].blob);
  REQUIRE(fused.size() == want.size());
  REQUIRE(apart.size() == want.size());
  double error = 0, error_apart = 0;
  float worst = 0, worst_apart = 0;
  for (std::size_t k = 0; k < want.size(); ++k) {
    error += std::abs(fused[k] - want[k]);
    error_apart += std::abs(apart[k] - want[k]);
    worst = std::max(worst, std::abs(fused[k] - want[k]));
    worst_apart = std::max(worst_apart, std::abs(apart[k] - want[k]));
  }
  INFO("mean error fused " << error / want.size() << ", apart " << error_apart / want.size() << "; worst " << worst << ", "
                           << worst_apart);
  CHECK(error <= error_apart * 1.5);
  CHECK(worst <= worst_apart + 0.1f);
  // A fake_quant that changes the quantisation (c1 finer than c1q) computes
  // something: that pair runs apart, the other still as one.
  tuning.blob_quant["c1"] = QuantParams{{0.8f / 255}, {0}, -1};
  const auto [requant_layers, requant] = run("cpu:qint8:nhwc/onednn");
  CHECK(requant_layers.at("conv1").fused_into.empty());
  CHECK(requant_layers.at("q1").fused_into.empty());
  CHECK(requant_layers.at("conv2").fused_into == "add2");
  // A restated output the caller reads is written: that pair runs apart.
  tuning.blob_quant["c1"] = tuning.blob_quant["c1q"];
  const auto [out_layers, with_out] = run("cpu:qint8:nhwc/onednn", true);
  CHECK(out_layers.at("conv1").fused_into.empty());
  CHECK(out_layers.at("conv2").fused_into == "add2");
  REQUIRE(with_out.size() == fused.size());
  float gap = 0;  // (add1 rounds twice now: at most a step or two of the output)
  for (std::size_t k = 0; k < fused.size(); ++k) gap = std::max(gap, std::abs(with_out[k] - fused[k]));
  CHECK(gap <= 2.5f / 255);
}

// A hybrid ResNet's bottleneck ends in a qint8 convolution and a qint8 add
// with relu: three steps' traffic (the convolution's output written, read
// back with the residual) as one oneDNN convolution summing onto the residual.
TEST_CASE("a qint8 convolution and the qint8 add after it run as one step, rounded once", "[planner][qint8]") {
  for (const int conv_operand : {0, 1}) {
    core::Graph g = residual_graph();
    g.layers[1].params["act"] = std::string("relu");
    if (conv_operand == 1) g.layers[1].inputs = {"x", "c"};
    core::Tuning tuning;
    tuning.blob_quant["x"] = QuantParams{{2.0f / 255}, {3}, -1};
    tuning.blob_quant["c"] = QuantParams{{0.013f}, {-7}, -1};
    tuning.blob_quant["y"] = QuantParams{{0.02f}, {-128}, -1};
    auto run = [&](const char* add_routine) {
      tuning.routine_path.routines = {{"conv", "cpu:qint8:nhwc/onednn", {}, 0, 0}, {"add", add_routine, {}, 0, 0}};
      Session s(detail::make_model(g, tuning));
      std::map<std::string, LayerSummary> by_name;
      for (const auto& l : s.layers()) by_name[l.name] = l;
      std::vector<NamedBlob> in{{"x", test::iota_blob(Shape{1, 32, 14, 14}, 0.0003f, -0.95f)}};
      return std::make_pair(by_name, test::values(s.run(in)[0].blob));
    };
    const auto [layers, fused] = run("cpu:qint8:nhwc/onednn");
    if (layers.at("conv").descriptor != "cpu:qint8:nhwc/onednn") {
      WARN("oneDNN's int8 convolution does not run on this CPU (no VNNI): not checked");
      return;
    }
    INFO("the convolution's output is the add's input " << conv_operand);
    CHECK(layers.at("conv").fused_into == "add");
    const auto [apart_layers, apart] = run("cpu:qint8:nhwc/qint8");
    CHECK(apart_layers.at("conv").fused_into.empty());
    std::vector<NamedBlob> in{{"x", test::iota_blob(Shape{1, 32, 14, 14}, 0.0003f, -0.95f)}};
    const auto want = test::values(Session(detail::make_model(g)).run(in)[0].blob);
    REQUIRE(fused.size() == want.size());
    float worst = 0, worst_apart = 0, apart_gap = 0;
    double error = 0, error_apart = 0;
    for (std::size_t k = 0; k < want.size(); ++k) {
      worst = std::max(worst, std::abs(fused[k] - want[k]));
      worst_apart = std::max(worst_apart, std::abs(apart[k] - want[k]));
      apart_gap = std::max(apart_gap, std::abs(fused[k] - apart[k]));
      error += std::abs(fused[k] - want[k]);
      error_apart += std::abs(apart[k] - want[k]);
    }
    // Apart, the convolution's output is rounded to its scale (0.013 / 2) before
    // the sum is to the output's (0.02 / 2): at most one output step between them.
    CHECK(apart_gap <= 0.02f * 1.001f);
    // Closer to float32 on the whole; an element's rounding may land either way.
    CHECK(error < error_apart);
    CHECK(worst <= worst_apart + 0.02f / 2);
  }
}
