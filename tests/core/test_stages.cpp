// Models whose sizes depend on values (core/stages.hpp): a NonMaxSuppression
// keeps as many boxes as the scores allow, and the layers after it are planned
// at that number, run after run, in a session and after a .dnn round trip.
#include "core/stages.hpp"
#include "core/tensor_math.hpp"
#include "support/graphs.hpp"

#include <softneuro/session.hpp>
#include <softneuro/tune.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <limits>

using namespace softneuro;

namespace {

Layer layer(std::string type, std::string name, std::vector<std::string> in, std::string out,
            std::map<std::string, Attr> params = {}, std::map<std::string, Blob> weights = {}) {
  Layer l;
  l.type = std::move(type);
  l.name = std::move(name);
  l.inputs = std::move(in);
  l.outputs = {std::move(out)};
  l.params = std::move(params);
  l.weights = std::move(weights);
  return l;
}

/// boxes [1,N,4] and scores [1,2,N] (N any) -> kept = NMS rows [K,3], picked =
/// the kept boxes [K,4] (a gather planned at K), count = K + 0.5 (a value
/// computed from the shape of a value-shaped output).
std::vector<Layer> tail_layers() {
  std::map<std::string, Attr> nms = {{"max_output_boxes_per_class", int64_t{3}},
                                     {"iou_threshold", 0.5},
                                     {"score_threshold", 0.1}};
  std::vector<Layer> layers = {
      layer("non_max_suppression", "nms", {"boxes", "scores"}, "kept", nms),
      layer("constant", "col", {}, "col", {}, {{"value", core::float_blob(Shape{}, {2.0f})}}),
      layer("gather", "box_index", {"kept", "col"}, "index", {{"axis", int64_t{1}}}),
      layer("reshape", "rows", {"boxes"}, "rows", {{"shape", std::vector<int64_t>{-1, 4}}}),
      layer("gather", "pick", {"rows", "index"}, "picked", {{"axis", int64_t{0}}}),
      layer("shape_math", "k", {"kept"}, "k", {{"op", std::string("shape")}, {"start", int64_t{0}}, {"end", int64_t{1}}}),
      layer("shape_math", "kf", {"k"}, "kf", {{"op", std::string("cast")}, {"to", std::string("float32")}}),
      layer("constant", "half", {}, "half", {}, {{"value", core::float_blob(Shape{1}, {0.5f})}}),
      layer("add", "count", {"kf", "half"}, "count"),
  };
  return layers;
}

Model detector_tail() {
  TensorInfo boxes{"boxes", Shape{1, 5, 4}, DType::float32, {1}};
  TensorInfo scores{"scores", Shape{1, 2, 5}, DType::float32, {2}};
  return Model::build("tail", {boxes, scores}, tail_layers(), {"kept", "picked", "count"});
}

const std::vector<float> kBoxes = {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 2, 1, 3, 0, 4, 1, 5, 0, 6, 1, 7};

std::vector<NamedBlob> inputs(const std::vector<float>& scores) {
  const int64_t n = static_cast<int64_t>(scores.size()) / 2;
  return {{"boxes", core::float_blob(Shape{1, n, 4}, std::vector<float>(kBoxes.begin(), kBoxes.begin() + 4 * n))},
          {"scores", core::float_blob(Shape{1, 2, n}, scores)}};
}

const Blob& named(const std::vector<NamedBlob>& out, const std::string& name) {
  for (const auto& o : out)
    if (o.name == name) return o.blob;
  FAIL("no output " << name);
  throw 0;
}

/// Runs and checks the kept rows (batch 0), the picked boxes and the count.
void check(Session& session, const std::vector<float>& scores, const std::vector<std::pair<int, int>>& want) {
  auto out = session.run(inputs(scores));
  const auto k = static_cast<int64_t>(want.size());
  const Blob& kept = named(out, "kept");
  REQUIRE(kept.shape() == Shape{k, 3});
  REQUIRE(named(out, "picked").shape() == Shape{k, 4});
  CHECK(session.output_shape("picked") == Shape{k, 4});
  for (int64_t r = 0; r < k; ++r) {
    INFO("row " << r);
    CHECK(kept.data_as<float>()[3 * r] == 0);
    CHECK(kept.data_as<float>()[3 * r + 1] == static_cast<float>(want[static_cast<std::size_t>(r)].first));
    CHECK(kept.data_as<float>()[3 * r + 2] == static_cast<float>(want[static_cast<std::size_t>(r)].second));
    for (int j = 0; j < 4; ++j)
      CHECK(named(out, "picked").data_as<float>()[4 * r + j] == kBoxes[static_cast<std::size_t>(4 * want[static_cast<std::size_t>(r)].second + j)]);
  }
  CHECK(named(out, "count").data_as<float>()[0] == static_cast<float>(k) + 0.5f);
}

}  // namespace

TEST_CASE("stages: the layers after a NonMaxSuppression are planned at the boxes it keeps", "[core][stages]") {
  Model model = detector_tail();
  // Outputs sized by values say so: every dim dynamic, the shape their capacity.
  for (const auto& o : model.outputs()) CHECK_FALSE(o.dynamic_dims.empty());
  CHECK(model.output_shape("kept") == Shape{6, 3});  // 1 batch x 2 classes x 3 boxes
  Session session(model);
  // Class 0: box 1 overlaps box 0 (IoU 0.82), box 3 is under the threshold; class 1 by score.
  const std::vector<float> scores = {0.9f, 0.8f, 0.7f, 0.05f, 0.6f, 0.1f, 0.2f, 0.05f, 0.6f, 0.65f};
  check(session, scores, {{0, 0}, {0, 2}, {0, 4}, {1, 4}, {1, 3}, {1, 1}});
  // Fewer kept: class 1 under the threshold everywhere.
  std::vector<float> fewer = scores;
  for (int i = 5; i < 10; ++i) fewer[static_cast<std::size_t>(i)] = 0;
  check(session, fewer, {{0, 0}, {0, 2}, {0, 4}});
  // None kept: the layers after it run on empty tensors.
  check(session, std::vector<float>(10, 0.0f), {});
  // A NaN score is no candidate (it passes no threshold).
  std::vector<float> with_nan = fewer;
  with_nan[0] = std::numeric_limits<float>::quiet_NaN();
  check(session, with_nan, {{0, 1}, {0, 2}, {0, 4}});
  // Another box count (the inputs' dynamic dim), then the first again.
  check(session, {0.9f, 0.8f, 0.0f, 0.0f, 0.3f, 0.0f}, {{0, 0}, {1, 1}});
  check(session, scores, {{0, 0}, {0, 2}, {0, 4}, {1, 4}, {1, 3}, {1, 1}});

  SECTION("the caller's outputs: copied where the shape matches, replaced where it does not") {
    std::vector<NamedBlob> out = {{"kept", Blob::allocate(Shape{6, 3})}, {"picked", Blob::allocate(Shape{1, 4})}};
    const void* kept_memory = out[0].blob.data();
    session.run(inputs(scores), out);
    CHECK(out[0].blob.data() == kept_memory);
    CHECK(out[1].blob.shape() == Shape{6, 4});
    CHECK(out[1].blob.data_as<float>()[4] == kBoxes[8]);  // row 1 is box 2
  }
  SECTION("layers() lists every stage's steps; run_timed times them all") {
    auto layers = session.layers();
    auto has = [&](const std::string& name) {
      return std::any_of(layers.begin(), layers.end(), [&](const LayerSummary& s) { return s.name == name; });
    };
    CHECK(has("nms"));
    CHECK(has("pick"));
    std::vector<NamedBlob> out = {{"kept", Blob{}}, {"picked", Blob{}}, {"count", Blob{}}};
    CHECK(session.run_timed(inputs(scores), out).size() == session.layers().size());
    CHECK(out[1].blob.shape() == Shape{6, 4});
  }
  SECTION("after a .dnn round trip") {
    // In this process's scratch folder: the same test runs at once in another process (ctest's
    // all_tests_at_avx2 beside this test's own entry), whose remove() took a shared /tmp file away.
    const std::string path = test::temp_path("softneuro_stages.dnn");
    model.save(path);
    Model loaded = Model::load(path);
    std::filesystem::remove(path);
    Session again(loaded);
    check(again, fewer, {{0, 0}, {0, 2}, {0, 4}});
  }
}

TEST_CASE("stages: split_stages cuts after value-shaped layers and copies shape computations", "[core][stages]") {
  core::Graph g;
  g.inputs = detector_tail().inputs();
  g.outputs = {"kept", "picked", "count"};
  g.layers = tail_layers();
  core::sort_topologically(g);
  REQUIRE(core::has_value_shaped(g));
  const auto stages = core::split_stages(g, core::infer_shapes(g));
  REQUIRE(stages.size() == 2);
  auto names = [](const core::Graph& sg) {
    std::vector<std::string> v;
    for (const auto& l : sg.layers) v.push_back(l.name);
    std::sort(v.begin(), v.end());
    return v;
  };
  auto inputs_of = [](const core::Graph& sg) {
    std::vector<std::string> v;
    for (const auto& t : sg.inputs) v.push_back(t.name);
    return v;
  };
  CHECK(names(stages[0].graph) == std::vector<std::string>{"nms", "rows"});
  CHECK(inputs_of(stages[0].graph) == std::vector<std::string>{"boxes", "scores"});
  CHECK(stages[0].graph.outputs == std::vector<std::string>{"kept", "rows"});
  CHECK(stages[0].value_shaped == std::vector<std::string>{"kept"});
  // The constants and shape computations stage 1 reads are its own.
  CHECK(names(stages[1].graph) == std::vector<std::string>{"box_index", "col", "count", "half", "k", "kf", "pick"});
  CHECK(inputs_of(stages[1].graph) == std::vector<std::string>{"kept", "rows"});
  CHECK(stages[1].graph.outputs == std::vector<std::string>{"picked", "count"});
  CHECK(stages[1].graph.inputs[0].dynamic_dims == std::vector<int>{0, 1});
  CHECK(stages[1].value_shaped.empty());
}

TEST_CASE("stages: a tuned model with a value-shaped layer plans and runs its stages the same", "[core][stages][tune]") {
  TuneOptions o;
  o.cache_dir = "-";
  o.unit_budget_ms = 0.5;
  o.integrated_runs = 2;
  const Model tuned = tune(detector_tail(), o);
  CHECK_FALSE(tuned.outputs()[0].dynamic_dims.empty());
  Session session(tuned);
  const std::vector<float> scores = {0.9f, 0.8f, 0.7f, 0.05f, 0.6f, 0.1f, 0.2f, 0.05f, 0.6f, 0.65f};
  check(session, scores, {{0, 0}, {0, 2}, {0, 4}, {1, 4}, {1, 3}, {1, 1}});
  check(session, std::vector<float>(10, 0.0f), {});
}
