// Childnet routines: the executor expands them into child steps whose routines
// come from the routine path (by child layer name) or the default choice; the
// child choices survive a .dnn round trip; prepare_childnet runs one standalone.
#include "core/childnet.hpp"
#include "core/dnn_file.hpp"
#include "core/model_impl.hpp"
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/session.hpp>
#include <softneuro/routine.hpp>

#include <catch2/catch.hpp>

#include <functional>

#include <random>

using namespace softneuro;

namespace {

/// relu as a childnet: identity -> relu (a test of the mechanism only; never a default).
class ReluChildnet final : public core::ChildnetRoutine {
 public:
  std::string_view layer_type() const override { return "relu"; }
  std::string_view algorithm() const override { return "test_childnet"; }
  Support supports(const LayerInfo&, const Schema&) const override { return Support::yes(); }
  std::optional<Childnet> childnet(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    const Layer& l = *info.layer;
    Childnet cn;
    Layer a;
    a.name = l.name + "/a";
    a.type = "identity";
    a.inputs = {"x"};
    a.outputs = {"t"};
    Layer b;
    b.name = l.name + "/b";
    b.type = "relu";
    b.inputs = {"t"};
    b.outputs = {"y"};
    cn.layers = {a, b};
    cn.schemas = {Schema{}, Schema{}};
    cn.inputs = {"x"};
    cn.outputs = {"y"};
    return cn;
  }
};
/// The process's routines and ReluChildnet, which only this file's models see.
std::shared_ptr<const core::RoutineRegistry> routines() {
  static const auto registry = test::registry_with(std::make_unique<ReluChildnet>());
  return registry;
}

std::vector<float> run_net(const Model& net) {
  std::vector<NamedBlob> inputs;
  for (const auto& t : net.inputs()) {
    Blob b = Blob::allocate(t.shape);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(-1, 1);
    for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = d(rng);
    inputs.push_back({t.name, b});
  }
  auto outs = Session(net).run(inputs);
  return test::values(outs[0].blob);
}

}  // namespace

TEST_CASE("a childnet routine expands into its child steps", "[childnet]") {
  auto g = test::chain_graph(3);
  core::Tuning tuning;
  Model plain = detail::make_model(g, tuning, {}, routines());
  auto want = run_net(plain);
  tuning.routine_path.routines.push_back({"l1", "cpu/test_childnet", {}, 0, 0, {}});
  Model net = detail::make_model(g, tuning, {}, routines());
  std::vector<std::string> names;
  for (const auto& l : Session(net).layers()) names.push_back(l.name);
  CHECK(std::find(names.begin(), names.end(), "l1/a") != names.end());
  CHECK(std::find(names.begin(), names.end(), "l1/b") != names.end());
  CHECK(std::find(names.begin(), names.end(), "l1") == names.end());
  CHECK(run_net(net) == want);

  SECTION("a child's routine comes from the parent's child choices") {
    tuning.routine_path.routines.back().children = {{"l1/b", "cpu/ref", {}, 0.5, 0, {}}};
    Model tuned = detail::make_model(g, tuning, {}, routines());
    for (const auto& l : Session(tuned).layers()) {
      if (l.name == "l1/b") {
        CHECK(l.tuned);
        CHECK(l.descriptor == "cpu/ref");
      }
      if (l.name == "l1/a") CHECK_FALSE(l.tuned);
    }
    CHECK(run_net(tuned) == want);
  }
  SECTION("a child choice that does not exist falls back to the default") {
    tuning.routine_path.routines.back().children = {{"l1/b", "cpu/not_in_this_build", {}, 0, 0, {}}};
    Model tuned = detail::make_model(g, tuning, {}, routines());
    CHECK(run_net(tuned) == want);
  }
}

TEST_CASE("child choices survive a .dnn round trip", "[childnet][dnn]") {
  auto g = test::chain_graph(3);
  core::Tuning tuning;
  core::RoutineChoice inner{"l1/b/x", "cpu/ref", {{"k", 3}}, 0.125, 0, {}};
  core::RoutineChoice child{"l1/b", "cpu/ref", {{"tile", 4}}, 0.25, 0.5, {inner}};
  tuning.routine_path.routines.push_back({"l1", "cpu/test_childnet", {}, 1.0, 2.0, {child, {"l1/a", "cpu/ref", {}, 0, 0, {}}}});
  auto bytes = core::serialize_dnn(g, tuning);
  auto back = core::read_dnn_bytes(bytes.data(), bytes.size(), "mem");
  REQUIRE(back.tuning.routine_path.routines.size() == 1);
  const auto& rc = back.tuning.routine_path.routines[0];
  REQUIRE(rc.children.size() == 2);
  CHECK(rc.children[0].layer == "l1/b");
  CHECK(rc.children[0].params == RoutineParams{{"tile", 4}});
  CHECK(rc.children[0].predicted_ms == 0.25);
  CHECK(rc.children[0].measured_ms == 0.5);
  REQUIRE(rc.children[0].children.size() == 1);
  CHECK(rc.children[0].children[0].layer == "l1/b/x");
  CHECK(rc.children[0].children[0].params == RoutineParams{{"k", 3}});
  CHECK(rc.children[1].layer == "l1/a");
  CHECK(rc.children[1].children.empty());
  // Byte-identical when written again, and the net runs with the choices (less
  // the parameters above, which cpu/ref does not have: outside its space they
  // would make the default choice run the layer).
  CHECK(core::serialize_dnn(back.graph, back.tuning) == bytes);
  std::function<void(core::RoutineChoice&)> strip = [&](core::RoutineChoice& c) {
    c.params.clear();
    for (auto& k : c.children) strip(k);
  };
  for (auto& c : back.tuning.routine_path.routines) strip(c);
  Model net = detail::make_model(std::move(back.graph), std::move(back.tuning), {}, routines());
  for (const auto& l : Session(net).layers())
    if (l.name == "l1/b") CHECK(l.tuned);
}

TEST_CASE("a childnet routine prepares and runs standalone", "[childnet]") {
  Layer l = test::make_layer("relu");
  Blob x = test::iota_blob(Shape{2, 3, 4}, 0.5f, -5.0f);
  auto want = test::values(test::run_layer(l, {x}, "cpu/ref")[0]);
  CHECK(test::values(test::run_layer(l, {x}, "cpu/test_childnet", routines().get())[0]) == want);
}

// The plan and the tuner each derived a child's shapes (the tuner without the
// parent's quantisation, threads' registry or checks); core::child_shapes is
// the one derivation both read.
TEST_CASE("a childnet's children's shapes and quantisation come from its parent, and bad childnets are refused", "[childnet]") {
  Layer parent = test::make_layer("relu", {}, {}, 1, 1, "p");
  QuantParams qin{{0.5f}, {3}, -1}, qout{{0.25f}, {-2}, -1};
  LayerInfo info{&parent, {Shape{1, 4, 5, 5}}, {Shape{1, 4, 5, 5}}, {qin}, {qout}};
  const Childnet cn = *ReluChildnet().childnet(info, Schema{}, {});  // x -> identity -> t -> relu -> y
  const auto shapes = core::child_shapes(cn, info);
  REQUIRE(shapes.size() == 2);
  CHECK(shapes[0].inputs == std::vector<Shape>{Shape{1, 4, 5, 5}});
  CHECK(shapes[0].input_quant[0].scales == qin.scales);      // reads the parent's input
  CHECK(shapes[0].output_quant[0].scales.empty());           // the childnet's own blob
  CHECK(shapes[1].input_quant[0].scales.empty());
  CHECK(shapes[1].output_quant[0].scales == qout.scales);    // writes the parent's output

  Childnet unread = cn;
  unread.layers[1].inputs = {"nowhere"};
  CHECK_THROWS_WITH(core::child_shapes(unread, info), Catch::Contains("reads blob 'nowhere'"));
  Childnet wrong_shape = cn;
  wrong_shape.layers[1].type = "flatten";
  CHECK_THROWS_WITH(core::child_shapes(wrong_shape, info), Catch::Contains("for the layer's output [1,4,5,5]"));
  Childnet inconsistent = cn;
  inconsistent.schemas.pop_back();
  CHECK_THROWS_WITH(core::child_shapes(inconsistent, info), Catch::Contains("inconsistent childnet"));
}
