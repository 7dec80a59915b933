// Shape computations kept in the graph (shape_math layers, core/shape_plan.hpp):
// evaluated at each new input shape, in a session and after a .dnn round trip.
#include "core/shape_plan.hpp"
#include "core/tensor_math.hpp"
#include "support/graphs.hpp"

#include <softneuro/session.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <numeric>

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

Layer math(std::string name, std::string op, std::vector<std::string> in, std::map<std::string, Attr> params = {}) {
  params["op"] = op;
  return layer("shape_math", name, std::move(in), name, std::move(params));
}

Layer ints(std::string name, std::vector<int64_t> v, bool scalar = false) {
  const Shape s = scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())};
  return layer("constant", name, {}, name, {}, {{"value", core::int_blob(s, v)}});
}

/// x [N,C,H,W] (N, H, W any size) -> flat = reshape(x, [N, -1]) with the
/// target computed from shape(x), and grid = x + arange(W) (a value computed
/// from the shape read as a constant input, like YOLOv8's anchors).
Model grid_model() {
  std::vector<Layer> layers = {
      math("s", "shape", {"x"}),
      ints("zero", {0}),
      ints("one", {1}),
      ints("minus_one", {-1}),
      math("n", "slice", {"s", "zero", "one"}),
      math("target", "concat", {"n", "minus_one"}, {{"axis", int64_t{0}}}),
      layer("reshape", "flatten", {"x", "target"}, "flat", {{"shape", std::vector<int64_t>{1, 48}}}),
      ints("three", {3}, true),
      ints("start", {0}, true),
      ints("step", {1}, true),
      math("w", "gather", {"s", "three"}, {{"axis", int64_t{0}}}),
      math("r", "range", {"start", "w", "step"}),
      math("rf", "cast", {"r"}, {{"to", std::string("float32")}}),
      layer("add", "grid_add", {"x", "rf"}, "grid"),
  };
  TensorInfo x{"x", Shape{1, 3, 4, 4}, DType::float32, {0, 2, 3}};
  return Model::build("grid", {x}, layers, {"flat", "grid"});
}

Blob iota_blob(const Shape& s) {
  Blob b = Blob::allocate(s);
  std::iota(b.data_as<float>(), b.data_as<float>() + b.numel(), 0.0f);
  return b;
}

void check_grid(Session& session, const Shape& s) {
  INFO("input shape " << s.to_string());
  const Blob x = iota_blob(s);
  std::vector<NamedBlob> in{{"x", x}};
  auto out = session.run(in);
  REQUIRE(out.size() == 2);
  const Blob& flat = out[0].name == "flat" ? out[0].blob : out[1].blob;
  const Blob& grid = out[0].name == "grid" ? out[0].blob : out[1].blob;
  CHECK(flat.shape() == Shape{s[0], s[1] * s[2] * s[3]});
  CHECK(grid.shape() == s);
  for (int64_t i = 0; i < x.numel(); ++i) {
    REQUIRE(flat.data_as<float>()[i] == x.data_as<float>()[i]);
    REQUIRE(grid.data_as<float>()[i] == x.data_as<float>()[i] + static_cast<float>(i % s[3]));
  }
}

}  // namespace

TEST_CASE("shape_math: reshape targets and values follow every input shape in one session", "[core][shape_plan]") {
  Model model = grid_model();
  CHECK(model.output_shape("grid") == Shape{1, 3, 4, 4});
  Session session(model);
  for (const Shape& s : {Shape{1, 3, 4, 4}, Shape{2, 3, 5, 7}, Shape{1, 3, 16, 3}, Shape{1, 3, 4, 4}})
    check_grid(session, s);

  SECTION("after a .dnn round trip") {
    // In this process's scratch folder: the same test runs at once in another process (ctest's
    // all_tests_at_avx2 beside this test's own entry), whose remove() took a shared /tmp file away.
    const std::string path = test::temp_path("softneuro_shape_plan.dnn");
    model.save(path);
    Model loaded = Model::load(path);
    std::filesystem::remove(path);
    Session again(loaded);
    check_grid(again, Shape{3, 3, 2, 9});
  }
}

TEST_CASE("shape_math: specialize leaves no shape computation and names the layer that fails", "[core][shape_plan]") {
  Model model = grid_model();
  core::Graph g;
  g.inputs = model.inputs();
  g.outputs = {"flat", "grid"};
  g.layers = {math("s", "shape", {"x"}), ints("three", {3}, true), math("w", "gather", {"s", "three"}),
              ints("four", {4}), math("bad", "concat", {"w", "four"}, {{"axis", int64_t{0}}}),
              layer("reshape", "flatten", {"x", "bad"}, "flat", {{"shape", std::vector<int64_t>{1, 48}}}),
              layer("identity", "grid_id", {"x"}, "grid")};
  // A scalar cannot be concatenated: the layer and the input shapes are named.
  try {
    core::specialize(g, {{"x", Shape{1, 3, 4, 4}}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.layer() == "bad");
    CHECK_THAT(e.message(), Catch::Contains("x=[1,3,4,4]"));
  }
  // A target that holds at one size only is refused at another, naming the reshape.
  g.layers[2] = math("w", "gather", {"s", "three"}, {{"axis", int64_t{0}}});
  g.layers[1] = ints("three", {3});
  g.layers[3] = ints("four", {12});
  auto shapes = std::map<std::string, Shape>{};
  const core::Graph at4 = core::specialize(g, {{"x", Shape{1, 3, 4, 4}}}, &shapes);
  CHECK_FALSE(core::has_shape_math(at4));
  CHECK(shapes.at("flat") == Shape{4, 12});
  try {
    core::specialize(g, {{"x", Shape{1, 3, 5, 4}}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.layer() == "flatten");
    CHECK_THAT(e.message(), Catch::Contains("cannot reshape"));
  }
}

TEST_CASE("shape_math: ops follow ONNX semantics", "[core][shape_plan]") {
  auto eval = [](const Layer& l, std::vector<Blob> values, std::vector<Shape> shapes = {}) {
    if (shapes.empty())
      for (const Blob& b : values) shapes.push_back(b.shape());
    return core::to_ints(core::evaluate_shape_math(l, values, shapes));
  };
  const Blob s = core::int_blob(Shape{4}, {2, 3, 40, 60});
  auto op = [](std::string o, std::map<std::string, Attr> p = {}) { return math("m", std::move(o), {}, std::move(p)); };
  // Slice with negative starts, ends past the end and a negative step.
  CHECK(eval(op("slice"), {s, core::int_blob({1}, {-2}), core::int_blob({1}, {1000})}) == std::vector<int64_t>{40, 60});
  CHECK(eval(op("slice"), {s, core::int_blob({1}, {-1}), core::int_blob({1}, {-1000}), core::int_blob({1}, {0}),
                           core::int_blob({1}, {-2})}) == std::vector<int64_t>{60, 3});
  CHECK(eval(op("shape", {{"start", int64_t{-2}}}), {Blob{}}, {Shape{1, 3, 48, 320}}) == std::vector<int64_t>{48, 320});
  CHECK(eval(op("size"), {Blob{}}, {Shape{1, 3, 48, 320}}) == std::vector<int64_t>{46080});
  // perm: the shape of the input transposed (a transpose fuse_attention absorbed), then start and end.
  CHECK(eval(op("shape", {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}), {Blob{}}, {Shape{1, 64, 12, 32}}) ==
        std::vector<int64_t>{1, 12, 64, 32});
  CHECK(eval(op("shape", {{"perm", std::vector<int64_t>{0, 2, 1, 3}}, {"end", int64_t{3}}}), {Blob{}}, {Shape{1, 64, 12, 32}}) ==
        std::vector<int64_t>{1, 12, 64});
  for (const auto& bad : {std::vector<int64_t>{0, 1}, std::vector<int64_t>{0, 1, 2, 7}, std::vector<int64_t>{-1, 0, 1, 2},
                          std::vector<int64_t>{0, 1, 1, 2}}) {
    try {
      eval(op("shape", {{"perm", bad}}), {Blob{}}, {Shape{1, 64, 12, 32}});
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.layer() == "m");
      CHECK(e.field() == "perm");
    }
  }
  CHECK(eval(op("div"), {s, core::int_blob({}, {8})}) == std::vector<int64_t>{0, 0, 5, 7});
  CHECK(eval(op("unsqueeze", {{"axes", std::vector<int64_t>{0}}}), {core::int_blob({}, {7})}) == std::vector<int64_t>{7});
  CHECK(core::evaluate_shape_math(op("unsqueeze", {{"axes", std::vector<int64_t>{0}}}), std::vector<Blob>{core::int_blob({}, {7})},
                                  std::vector<Shape>{Shape{}}).shape() == Shape{1});
  CHECK(eval(op("range"), {core::int_blob({}, {10}), core::int_blob({}, {0}), core::int_blob({}, {-3})}) ==
        std::vector<int64_t>{10, 7, 4, 1});
  Layer cos = op("constant_of_shape");
  cos.weights["value"] = core::int_blob({1}, {5});
  CHECK(eval(cos, {core::int_blob({2}, {2, 2})}) == std::vector<int64_t>{5, 5, 5, 5});
  CHECK(eval(op("where"), {core::int_blob({2}, {1, 0}), core::int_blob({2}, {1, 2}), core::int_blob({2}, {3, 4})}) ==
        std::vector<int64_t>{1, 4});
  // Trilu: the lower triangle with k = 1 (upper 0), the upper one with k = -1, k missing: 0.
  const Blob ones = core::int_blob({2, 3}, {1, 1, 1, 1, 1, 1});
  CHECK(eval(op("trilu", {{"upper", int64_t{0}}}), {ones, core::int_blob({}, {1})}) == std::vector<int64_t>{1, 1, 0, 1, 1, 1});
  CHECK(eval(op("trilu"), {ones, core::int_blob({}, {-1})}) == std::vector<int64_t>{1, 1, 1, 1, 1, 1});
  CHECK(eval(op("trilu"), {ones}) == std::vector<int64_t>{1, 1, 1, 0, 1, 1});
  try {
    eval(op("trilu"), {core::int_blob({3}, {1, 1, 1})});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.field() == "input");
  }
  // Errors name the layer and the field; a range too long is refused before it is allocated.
  CHECK_THROWS_WITH(eval(op("range"), {core::int_blob({}, {0}), core::int_blob({}, {int64_t{1} << 40}), core::int_blob({}, {1})}),
                    Catch::Contains("a range of more than"));
  CHECK_THROWS_WITH(eval(op("frobnicate"), {s}), Catch::Contains("unknown shape_math op"));
  try {
    eval(op("gather", {{"axis", int64_t{0}}}), {s, Blob{}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.layer() == "m");
    CHECK(e.field() == "indices");
  }
}

TEST_CASE("shape_math: a slice's bounds from a value, and a bad one named", "[core][shape_plan]") {
  // y = x[:, W-2:W] along the last dim: the bounds [W-2, W] concatenated, read when planned.
  core::Graph g;
  g.inputs = {TensorInfo{"x", Shape{1, 3, 4, 4}, DType::float32, {3}}};
  g.outputs = {"y"};
  g.layers = {math("s", "shape", {"x"}), ints("three", {3}), math("w", "gather", {"s", "three"}, {{"axis", int64_t{0}}}),
              ints("two", {2}), math("start", "sub", {"w", "two"}),
              math("bounds", "concat", {"start", "w"}, {{"axis", int64_t{0}}}),
              layer("slice", "cut", {"x", "bounds"}, "y",
                    {{"starts", std::vector<int64_t>{2}}, {"ends", std::vector<int64_t>{4}}, {"axes", std::vector<int64_t>{3}},
                     {"steps", std::vector<int64_t>{1}}})};
  std::map<std::string, Shape> shapes;
  const core::Graph at9 = core::specialize(g, {{"x", Shape{1, 3, 4, 9}}}, &shapes);
  CHECK_FALSE(core::has_shape_math(at9));
  CHECK(shapes.at("y") == Shape{1, 3, 4, 2});
  CHECK(at9.find_layer("cut")->get_ints("starts") == std::vector<int64_t>{7});
  // Bounds of another length are an error naming the slice.
  g.layers[5] = math("bounds", "concat", {"start", "w", "two"}, {{"axis", int64_t{0}}});
  try {
    core::specialize(g, {{"x", Shape{1, 3, 4, 9}}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.layer() == "cut");
    CHECK_THAT(e.message(), Catch::Contains("a start and an end per axis"));
  }
}

TEST_CASE("specialize folds what depends on the input shapes, not a layer of constants alone", "[core][shape_plan]") {
  // GPT-2's tied LM head reads a transpose of the 38.6M-value embedding: the
  // import leaves it to run, and specialize computed it again at every new
  // cache length. Only layers reading a value of these shapes are folded.
  const Blob w = core::int_blob(Shape{2, 3}, {0, 1, 2, 3, 4, 5});
  core::Graph g;
  g.inputs = {{"x", Shape{1, 3}, DType::float32, {1}}};
  g.outputs = {"y", "z"};
  g.layers = {layer("constant", "w", {}, "w", {}, {{"value", core::to_float(w)}}),
              layer("transpose", "wt", {"w"}, "wt", {{"perm", std::vector<int64_t>{1, 0}}}),
              layer("matmul", "mm", {"x", "wt"}, "y"),
              math("s", "shape", {"x"}),
              math("sf", "cast", {"s"}, {{"to", std::string("float32")}}),
              layer("neg", "negated", {"sf"}, "ns"),
              layer("add", "z_add", {"ns", "ns"}, "z")};
  const core::Graph at = core::specialize(g, {{"x", Shape{1, 3}}});
  auto has = [&](const std::string& name, const std::string& type) {
    const Layer* l = at.find_layer(name);
    return l && l->type == type;
  };
  CHECK(has("wt", "transpose"));   // the model's constants alone: it runs, as the import left it
  CHECK(at.find_layer("negated") == nullptr);  // of the input's shape: computed once at this shape,
  CHECK(has("z_add", "constant"));              // as what reads it alone (the net's output)
}
