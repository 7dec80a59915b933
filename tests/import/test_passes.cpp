// Graph passes, each on its own: graphs built directly as layers, run through
// the public Model/Session API (cpu/ref routines) before and after; outputs must agree.
#include "core/layer_types.hpp"
#include "core/model_impl.hpp"
#include "core/passes.hpp"
#include "import/onnx_test_util.hpp"

#include <catch2/catch.hpp>

#include <limits>

using namespace softneuro;
using namespace softneuro::test;

namespace {

Layer layer(const std::string& type, const std::string& name, std::vector<std::string> in, std::vector<std::string> out,
            std::map<std::string, Attr> params = {}) {
  Layer l;
  l.type = type;
  l.name = name;
  l.inputs = std::move(in);
  l.outputs = std::move(out);
  l.params = std::move(params);
  return l;
}

Blob random_blob(const Shape& s, unsigned seed, float offset = 0) {
  auto v = random_values(static_cast<std::size_t>(s.numel()), seed);
  for (auto& x : v) x += offset;
  return make_input(s, v);
}

Layer constant(const std::string& name, const Blob& value) {
  Layer l = layer("constant", name, {}, {name});
  l.weights["value"] = value;
  return l;
}

Layer conv(const std::string& name, const std::string& in, const std::string& out, int64_t c, int64_t o, unsigned seed) {
  Layer l = layer("conv2", name, {in}, {out}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  l.weights["weight"] = random_blob(Shape{o, c, 3, 3}, seed);
  l.weights["bias"] = random_blob(Shape{o}, seed + 1);
  return l;
}

Layer dense(const std::string& name, const std::string& in, const std::string& out, int64_t k, int64_t o, unsigned seed) {
  Layer l = layer("dense", name, {in}, {out});
  l.weights["weight"] = random_blob(Shape{o, k}, seed);
  return l;
}

Layer batchnorm(const std::string& name, const std::string& in, const std::string& out, int64_t c, unsigned seed) {
  Layer l = layer("batchnorm", name, {in}, {out}, {{"epsilon", 1e-3}});
  l.weights["scale"] = random_blob(Shape{c}, seed);
  l.weights["bias"] = random_blob(Shape{c}, seed + 1);
  l.weights["mean"] = random_blob(Shape{c}, seed + 2);
  l.weights["var"] = random_blob(Shape{c}, seed + 3, 1.5f);  // positive
  return l;
}

/// Runs a graph (a copy) on seeded inputs; every output's values in order.
std::vector<Output> run_graph(const core::Graph& g) {
  Model net = detail::make_model(g);
  std::vector<NamedBlob> inputs;
  unsigned seed = 100;
  for (const auto& t : g.inputs) inputs.push_back({t.name, random_blob(t.shape, seed++)});
  return run_net(net, inputs);
}

/// Applies `pass` to a copy of `g`, checks that outputs agree, returns the rewritten graph.
core::Graph check_pass(const core::Graph& g, int (*pass)(core::Graph&), int expected_rewrites, double tol = 1e-5) {
  const auto before = run_graph(g);
  core::Graph after = g;
  CHECK(pass(after) == expected_rewrites);
  const auto got = run_graph(after);
  REQUIRE(got.size() == before.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].shape == before[i].shape);
    CHECK(max_abs_diff(got[i].values, before[i].values) <= tol);
  }
  return after;
}

int count(const core::Graph& g, const std::string& type) {
  int n = 0;
  for (const auto& l : g.layers) n += l.type == type;
  return n;
}

core::Graph graph(std::vector<TensorInfo> inputs, std::vector<std::string> outputs, std::vector<Layer> layers) {
  core::Graph g;
  g.inputs = std::move(inputs);
  g.outputs = std::move(outputs);
  g.layers = std::move(layers);
  return g;
}

}  // namespace

TEST_CASE("remove_identities: readers rewired, a net output keeps its name", "[passes][identity]") {
  auto g = graph({{"x", Shape{1, 2, 4, 4}}}, {"y", "z"},
                 {layer("identity", "i1", {"x"}, {"a"}), conv("c1", "a", "b", 2, 3, 1),
                  layer("identity", "i2", {"b"}, {"y"}),  // net output: c1 writes y instead
                  layer("relu", "r", {"b"}, {"r1"}), layer("identity", "i3", {"r1"}, {"z"})});
  auto after = check_pass(g, core::remove_identities, 3);
  CHECK(count(after, "identity") == 0);
  CHECK(after.find_layer("c1")->outputs[0] == "y");
  CHECK(after.find_layer("c1")->inputs[0] == "x");

  // Input straight to output: the identity has to stay.
  auto io = graph({{"x", Shape{2}}}, {"y"}, {layer("identity", "i", {"x"}, {"y"})});
  check_pass(io, core::remove_identities, 0);
}

TEST_CASE("fold_constants: layers of constants are computed once", "[passes][fold]") {
  auto g = graph({{"x", Shape{2, 3}}}, {"y", "s1"},
                 {constant("a", random_blob(Shape{2, 3}, 2)), constant("b", random_blob(Shape{3}, 3)),
                  layer("mul", "ab", {"a", "b"}, {"ab_out"}), layer("relu", "relu_ab", {"ab_out"}, {"r"}),
                  layer("split", "sp", {"r"}, {"s0", "s1"}, {{"axis", int64_t{0}}}),
                  layer("add", "sum", {"x", "s0"}, {"y"})});
  auto after = check_pass(g, core::fold_constants, 3);
  CHECK(count(after, "mul") == 0);
  CHECK(count(after, "split") == 0);
  CHECK(count(after, "add") == 1);  // reads the net input: stays
  CHECK(after.find_layer("sp")->type == "constant");
}

TEST_CASE("fold_batchnorm: into conv2 and dense, not when the output is shared", "[passes][batchnorm]") {
  SECTION("conv2 -> batchnorm, grouped conv2 -> batchnorm") {
    Layer grouped = layer("conv2", "g", {"b"}, {"c"}, {{"group", int64_t{2}}});
    grouped.weights["weight"] = random_blob(Shape{4, 2, 1, 1}, 30);  // no bias: one is made
    auto g = graph({{"x", Shape{1, 3, 5, 5}}}, {"y"},
                   {conv("c1", "x", "a", 3, 4, 10), batchnorm("bn1", "a", "b", 4, 20), grouped,
                    batchnorm("bn2", "c", "y", 4, 40)});
    auto after = check_pass(g, core::fold_batchnorm, 2, 1e-4);
    CHECK(count(after, "batchnorm") == 0);
    CHECK(after.find_layer("g")->find_weight("bias") != nullptr);
  }
  SECTION("dense -> batchnorm on [N,O]") {
    auto g = graph({{"x", Shape{3, 6}}}, {"y"}, {dense("d", "x", "a", 6, 4, 50), batchnorm("bn", "a", "y", 4, 60)});
    check_pass(g, core::fold_batchnorm, 1, 1e-4);
  }
  SECTION("shared output, net output, activation already fused: left alone") {
    Layer with_act = conv("c3", "x", "e", 3, 4, 90);
    with_act.params["act"] = std::string("relu");
    auto g = graph({{"x", Shape{1, 3, 4, 4}}}, {"y", "z", "a2"},
                   {conv("c1", "x", "a", 3, 4, 70), batchnorm("bn1", "a", "y", 4, 71), layer("relu", "r", {"a"}, {"z"}),
                    conv("c2", "x", "a2", 3, 4, 80), batchnorm("bn2", "a2", "b2", 4, 81), with_act,
                    batchnorm("bn3", "e", "f", 4, 91), layer("add", "sum", {"b2", "f"}, {"w"})});
    g.outputs.push_back("w");
    auto after = check_pass(g, core::fold_batchnorm, 0);
    CHECK(count(after, "batchnorm") == 3);
  }
}

TEST_CASE("fold_bias_add: per-channel constants into conv2/dense bias", "[passes][bias]") {
  auto g = graph({{"x", Shape{1, 3, 4, 4}}, {"v", Shape{2, 5}}}, {"y", "w", "u"},
                 {conv("c", "x", "a", 3, 4, 1), constant("cb", random_blob(Shape{1, 4, 1, 1}, 2)),
                  layer("add", "add_c", {"cb", "a"}, {"y"}),  // constant first: still folds
                  dense("d", "v", "b", 5, 3, 3), constant("db", random_blob(Shape{3}, 4)),
                  layer("add", "add_d", {"b", "db"}, {"w"}),
                  dense("d2", "v", "e", 5, 3, 5), constant("full", random_blob(Shape{2, 3}, 6)),
                  layer("add", "add_full", {"e", "full"}, {"u"})});  // not per channel: stays
  auto after = check_pass(g, core::fold_bias_add, 2);
  CHECK(count(after, "add") == 1);
  CHECK(after.find_layer("d")->outputs[0] == "w");
}

TEST_CASE("fold_scale_mul and fold_bias_add: per-channel and single constants into conv2/dense", "[passes][bias]") {
  // PP-LCNetV3's affine block after a conv: x * w_0 + w_1, both of shape [1].
  auto relu = conv("c3", "x", "a3", 3, 4, 7);
  relu.params["act"] = std::string("relu");
  auto g = graph({{"x", Shape{1, 3, 4, 4}}, {"v", Shape{2, 5}}}, {"y", "w", "u"},
                 {conv("c", "x", "a", 3, 4, 1), constant("s", random_blob(Shape{1}, 2)),
                  layer("mul", "mul_c", {"s", "a"}, {"m"}), constant("t", random_blob(Shape{1}, 3)),
                  layer("add", "add_c", {"m", "t"}, {"y"}),
                  dense("d", "v", "b", 5, 3, 4), constant("ds", random_blob(Shape{1, 3}, 5)),
                  layer("mul", "mul_d", {"b", "ds"}, {"w"}),
                  relu, layer("mul", "mul_relu", {"a3", "s"}, {"u"})});  // after a fused relu: stays
  auto scaled = check_pass(g, core::fold_scale_mul, 2);
  CHECK(count(scaled, "mul") == 1);
  auto folded = check_pass(scaled, core::fold_bias_add, 1);
  CHECK(count(folded, "add") == 0);
  CHECK(folded.find_layer("c")->outputs[0] == "y");
}

TEST_CASE("deconv2 (ConvTranspose) takes its bias add, batchnorm, scale and activation", "[passes][bias][act]") {
  // PP-OCRv4's detector head: ConvTranspose, its bias as an add of [24,1,1], batchnorm, relu; then
  // ConvTranspose to one channel, its bias add, sigmoid. Grouped: output channel g * O/group + o.
  auto deconv = [](const std::string& name, const std::string& in, const std::string& out, int64_t c, int64_t o,
                   int64_t group, unsigned seed) {
    Layer l = layer("deconv2", name, {in}, {out},
                    {{"strides", std::vector<int64_t>{2, 2}}, {"group", group}});
    l.weights["weight"] = random_blob(Shape{c, o / group, 2, 2}, seed);
    return l;
  };
  auto g = graph({{"x", Shape{1, 4, 3, 5}}}, {"y", "z"},
                 {deconv("t0", "x", "a", 4, 6, 1, 1), constant("b0", random_blob(Shape{6, 1, 1}, 2)),
                  layer("add", "add0", {"a", "b0"}, {"b"}), batchnorm("bn", "b", "c", 6, 3),
                  layer("relu", "r", {"c"}, {"d"}), deconv("t1", "d", "e", 6, 1, 1, 4),
                  constant("b1", random_blob(Shape{1}, 5)), layer("add", "add1", {"b1", "e"}, {"f"}),
                  layer("sigmoid", "s", {"f"}, {"y"}),
                  deconv("t2", "x", "h", 4, 6, 2, 6), constant("m2", random_blob(Shape{1, 6, 1, 1}, 7)),
                  layer("mul", "mul2", {"h", "m2"}, {"k"}), batchnorm("bn2", "k", "z", 6, 8)});
  auto biased = check_pass(g, core::fold_bias_add, 2);
  auto scaled = check_pass(biased, core::fold_scale_mul, 1, 1e-4);
  auto normed = check_pass(scaled, core::fold_batchnorm, 2, 1e-4);
  auto fused = check_pass(normed, core::fuse_activations, 2, 1e-4);
  for (const char* gone : {"add", "mul", "batchnorm", "relu", "sigmoid"}) CHECK(count(fused, gone) == 0);
  CHECK(fused.find_layer("t0")->get_string("act") == "relu");
  CHECK(fused.find_layer("t1")->get_string("act") == "sigmoid");
  CHECK(fused.find_layer("t2")->outputs[0] == "z");
  // optimize: the batchnorm after the bias add folds once the add has (the passes' order is bn, mul, add).
  core::Graph all = g;
  core::optimize(all);
  CHECK(count(all, "deconv2") == 3);
  CHECK(static_cast<int>(all.layers.size()) == 3);
  CHECK(all.find_layer("t0")->get_string("act") == "relu");
  const auto before = run_graph(g), after = run_graph(all);
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(max_abs_diff(after[i].values, before[i].values) < 1e-4);
}

TEST_CASE("fold_input_affine: mul and add of per-input-channel constants into the conv2/dense reading them",
          "[passes][bias]") {
  auto pointwise = [](const std::string& name, const std::string& in, const std::string& out, int64_t c, int64_t o,
                      int64_t group, unsigned seed) {
    Layer l = layer("conv2", name, {in}, {out}, {{"group", group}});
    l.weights["weight"] = random_blob(Shape{o, c / group, 1, 1}, seed);
    l.weights["bias"] = random_blob(Shape{o}, seed + 1);
    return l;
  };
  auto g = graph(
      {{"x", Shape{1, 3, 4, 4}}, {"v", Shape{2, 5}}}, {"y1", "y2", "y3", "y4", "y5"},
      {constant("c", random_blob(Shape{1, 3, 1, 1}, 1)), constant("d", random_blob(Shape{1}, 2)),
       constant("k", random_blob(Shape{5}, 3)),
       // hardswish -> x * c + d -> 1x1 conv (PP-LCNetV3): both fold
       layer("hardswish", "h", {"x"}, {"hx"}), layer("mul", "m1", {"hx", "c"}, {"p1"}),
       layer("add", "a1", {"d", "p1"}, {"q1"}), pointwise("pw", "q1", "y1", 3, 4, 1, 4),
       // before a padded 3x3 conv the add stays (its border would read d), and so the mul before it
       layer("mul", "m2", {"hx", "c"}, {"p2"}), layer("add", "a2", {"p2", "d"}, {"q2"}), conv("c2", "q2", "y2", 3, 4, 6),
       // a mul alone before a padded conv folds: zeros stay zeros
       layer("mul", "m3", {"x", "d"}, {"p3"}), conv("c3", "p3", "y3", 3, 2, 8),
       // grouped: each output channel reads its group's input channels
       layer("add", "a4", {"x", "c"}, {"q4"}), pointwise("g4", "q4", "y4", 3, 6, 3, 10),
       // dense: one value per input feature
       layer("add", "a5", {"v", "k"}, {"q5"}), layer("mul", "m5", {"q5", "k"}, {"p5"}), dense("d5", "p5", "y5", 5, 3, 12)});
  auto after = check_pass(g, core::fold_input_affine, 6);
  CHECK(count(after, "mul") == 1);
  CHECK(count(after, "add") == 1);
  CHECK(after.find_layer("pw")->inputs[0] == "hx");
  CHECK(after.find_layer("c2")->inputs[0] == "q2");
  CHECK(after.find_layer("c3")->inputs[0] == "x");
  CHECK(after.find_layer("d5")->inputs[0] == "v");
}

TEST_CASE("fuse_output_affine: a single-constant mul and add after a fused activation into the conv2/dense",
          "[passes][act]") {
  auto with_act = [](Layer l, const char* act) {
    l.params["act"] = std::string(act);
    return l;
  };
  auto g = graph({{"x", Shape{1, 3, 4, 4}}, {"v", Shape{2, 5}}}, {"y1", "y2", "y3", "y4"},
                 {constant("s", random_blob(Shape{1}, 1)), constant("t", random_blob(Shape{1, 1, 1, 1}, 2)),
                  constant("pc", random_blob(Shape{1, 4, 1, 1}, 3)),
                  // PP-LCNetV3: conv(hardswish) -> * s -> + t, before a padded depthwise conv
                  with_act(conv("c1", "x", "a1", 3, 4, 4), "hardswish"), layer("mul", "m1", {"a1", "s"}, {"p1"}),
                  layer("add", "t1", {"t", "p1"}, {"y1"}),
                  conv("c2", "x", "y2pre", 3, 4, 6), layer("mul", "m2", {"y2pre", "s"}, {"y2"}),  // no activation: not this pass's
                  with_act(conv("c3", "x", "a3", 3, 4, 8), "relu"), layer("mul", "m3", {"a3", "pc"}, {"y3"}),  // per channel: stays
                  with_act(dense("d4", "v", "a4", 5, 3, 10), "relu"), layer("add", "t4", {"a4", "s"}, {"y4"})});
  auto after = check_pass(g, core::fuse_output_affine, 3);
  const Layer* c1 = after.find_layer("c1");
  CHECK(c1->outputs[0] == "y1");
  CHECK(c1->get_float("act_scale") == Approx(random_blob(Shape{1}, 1).data_as<float>()[0]));
  CHECK(after.find_layer("d4")->get_float("act_scale", 1.0) == 1.0);
  CHECK(count(after, "mul") == 2);
  CHECK(count(after, "add") == 0);
}

TEST_CASE("fuse_activations: relu, clip, hardswish, hardsigmoid, sigmoid into conv2/dense", "[passes][act]") {
  auto g = graph({{"x", Shape{1, 2, 4, 4}}, {"v", Shape{2, 5}}}, {"y1", "y2", "y3", "y4", "y5", "y6"},
                 {conv("c1", "x", "a1", 2, 3, 1), layer("relu", "r", {"a1"}, {"y1"}),
                  conv("c2", "x", "a2", 2, 3, 2), layer("clip", "cl", {"a2"}, {"y2"}, {{"min", 0.0}, {"max", 0.5}}),
                  conv("c3", "x", "a3", 2, 3, 3), layer("hardswish", "hs", {"a3"}, {"y3"}),
                  dense("d4", "v", "a4", 5, 3, 4), layer("hardsigmoid", "hsg", {"a4"}, {"y4"}, {{"alpha", 0.3}, {"beta", 0.4}}),
                  dense("d5", "v", "a5", 5, 3, 5), layer("sigmoid", "sg", {"a5"}, {"y5"}),
                  // shared: the conv output is also read by the add, so the relu stays
                  conv("c6", "x", "a6", 2, 3, 6), layer("relu", "r6", {"a6"}, {"b6"}),
                  layer("add", "add6", {"a6", "b6"}, {"y6"})});
  auto after = check_pass(g, core::fuse_activations, 5);
  CHECK(after.find_layer("c1")->get_string("act") == "relu");
  CHECK(after.find_layer("c2")->get_float("act_max") == 0.5);
  CHECK(after.find_layer("d4")->get_float("act_alpha") == 0.3);
  CHECK(count(after, "relu") == 1);
}

TEST_CASE("fuse_activations: gelu (erf and tanh forms) into dense, not into conv2", "[passes][act]") {
  auto g = graph({{"x", Shape{1, 2, 4, 4}}, {"v", Shape{3, 5}}}, {"y1", "y2", "y3", "y4"},
                 {dense("d1", "v", "a1", 5, 7, 1), layer("gelu", "g1", {"a1"}, {"y1"}),
                  dense("d2", "v", "a2", 5, 7, 2), layer("gelu", "g2", {"a2"}, {"y2"}, {{"approximate", std::string("tanh")}}),
                  conv("c3", "x", "a3", 2, 3, 3), layer("gelu", "g3", {"a3"}, {"y3"}),
                  // GPT-2's Gemm on [tokens, hidden], back to [batch, tokens, 4*hidden], then the gelu
                  dense("d4", "v", "a4", 5, 8, 4), layer("reshape", "r4", {"a4"}, {"b4"}, {{"shape", std::vector<int64_t>{1, 3, 8}}}),
                  layer("gelu", "g4", {"b4"}, {"y4"}, {{"approximate", std::string("tanh")}})});
  auto after = check_pass(g, core::fuse_activations, 3);
  CHECK(after.find_layer("d1")->get_string("act") == "gelu");
  CHECK_FALSE(after.find_layer("d1")->has("act_approximate"));
  CHECK(after.find_layer("d2")->get_string("act_approximate") == "tanh");
  CHECK(count(after, "gelu") == 1);  // the conv2's stays a layer
  CHECK(after.find_layer("d4")->get_string("act_approximate") == "tanh");
  CHECK(after.find_layer("r4")->outputs[0] == "y4");
  // A routine that does not apply a fused gelu refuses it, naming the field.
  CHECK_THROWS_WITH(core::fused_activation(*after.find_layer("d1")), Catch::Contains("act") && Catch::Contains("gelu"));
  CHECK(core::fused_activation(*after.find_layer("d2"), false, true).kind == core::Activation::gelu_tanh);
}

TEST_CASE("fuse_activations: relu and clip into add (a residual add), not others", "[passes][act]") {
  auto g = graph({{"x", Shape{1, 2, 4, 4}}, {"z", Shape{1, 2, 4, 4}}}, {"y1", "y2", "y3", "y4"},
                 {layer("add", "a1", {"x", "z"}, {"s1"}), layer("relu", "r1", {"s1"}, {"y1"}),
                  layer("add", "a2", {"x", "z"}, {"s2"}), layer("clip", "c2", {"s2"}, {"y2"}, {{"min", -0.5}, {"max", 0.5}}),
                  layer("add", "a3", {"x", "z"}, {"s3"}), layer("sigmoid", "g3", {"s3"}, {"y3"}),  // add takes no sigmoid
                  layer("mul", "m4", {"x", "z"}, {"s4"}), layer("relu", "r4", {"s4"}, {"y4"})});    // nor does mul
  auto after = check_pass(g, core::fuse_activations, 2);
  CHECK(after.find_layer("a1")->get_string("act") == "relu");
  CHECK(after.find_layer("a1")->outputs[0] == "y1");
  CHECK(after.find_layer("a2")->get_float("act_min") == -0.5);
  CHECK(count(after, "relu") == 1);
  CHECK(count(after, "sigmoid") == 1);
}

TEST_CASE("fold_bias_add leaves an add with a fused activation alone", "[passes][bias]") {
  // conv -> add(bias constant, act relu): folding it into the bias would drop the relu.
  auto g = graph({{"x", Shape{1, 3, 4, 4}}}, {"y"},
                 {conv("c", "x", "a", 3, 4, 1), constant("cb", random_blob(Shape{1, 4, 1, 1}, 2)),
                  layer("add", "add_c", {"a", "cb"}, {"y"}, {{"act", std::string("relu")}})});
  auto after = check_pass(g, core::fold_bias_add, 0);
  CHECK(count(after, "add") == 1);
}

TEST_CASE("a fused activation on sub/mul/div, or other than relu/clip on add, is an error", "[passes][act]") {
  const std::vector<Shape> kTwo{Shape{2, 3}, Shape{2, 3}};
  for (const char* type : {"sub", "mul"})
    CHECK_THROWS_AS(core::infer_layer_shapes(layer(type, "b", {"x", "z"}, {"y"}, {{"act", std::string("relu")}}),
                                      kTwo),
                    Error);
  CHECK_THROWS_AS(core::infer_layer_shapes(layer("add", "b", {"x", "z"}, {"y"}, {{"act", std::string("sigmoid")}}),
                                    kTwo),
                  Error);
  CHECK(core::infer_layer_shapes(layer("add", "b", {"x", "z"}, {"y"}, {{"act", std::string("relu")}}),
                          kTwo)[0] == Shape{2, 3});
}

TEST_CASE("fuse_self_gating: mul(x, hardsigmoid(x)) with alpha 1/6 becomes hardswish(x), then fuses", "[passes][act]") {
  const double sixth = 1.0 / 6.0;
  auto g = graph({{"x", Shape{1, 2, 4, 4}}}, {"y1", "y2", "y3", "y4"},
                 {conv("c1", "x", "a1", 2, 3, 1),  // the MobileNetV3 shape: conv -> x * hardsigmoid(x)
                  layer("hardsigmoid", "h1", {"a1"}, {"s1"}, {{"alpha", sixth}, {"beta", 0.5}}),
                  layer("mul", "m1", {"a1", "s1"}, {"y1"}),
                  // operands swapped, and on a net input
                  layer("hardsigmoid", "h2", {"x"}, {"s2"}, {{"alpha", sixth}, {"beta", 0.5}}),
                  layer("mul", "m2", {"s2", "x"}, {"y2"}),
                  // not hardswish: ONNX's default alpha 0.2
                  layer("hardsigmoid", "h3", {"x"}, {"s3"}), layer("mul", "m3", {"x", "s3"}, {"y3"}),
                  // not hardswish: a gate on another blob (squeeze-excitation)
                  conv("c4", "x", "a4", 2, 2, 4),
                  layer("hardsigmoid", "h4", {"a4"}, {"s4"}, {{"alpha", sixth}, {"beta", 0.5}}),
                  layer("mul", "m4", {"x", "s4"}, {"y4"})});
  auto after = check_pass(g, core::fuse_self_gating, 2);
  CHECK(count(after, "hardswish") == 2);
  CHECK(count(after, "mul") == 2);
  CHECK(after.find_layer("h2")->type == "hardswish");
  CHECK(after.find_layer("h2")->outputs[0] == "y2");
  // c1's output is now read by the hardswish alone: it fuses into the conv
  // (as c4's gate does, which stayed a hardsigmoid).
  auto fused = check_pass(after, core::fuse_activations, 2);
  CHECK(fused.find_layer("c1")->get_string("act") == "hardswish");
  CHECK(fused.find_layer("c4")->get_string("act") == "hardsigmoid");
}

TEST_CASE("fuse_self_gating: mul(x, sigmoid(x)) becomes silu(x), a gate on another blob stays", "[passes][act]") {
  auto g = graph({{"x", Shape{1, 2, 4, 4}}}, {"y1", "y2", "y3"},
                 {conv("c1", "x", "a1", 2, 3, 1),  // YOLOv8's conv -> x * sigmoid(x)
                  layer("sigmoid", "s1", {"a1"}, {"g1"}), layer("mul", "m1", {"a1", "g1"}, {"y1"}),
                  layer("sigmoid", "s2", {"x"}, {"g2"}), layer("mul", "m2", {"g2", "x"}, {"y2"}),  // swapped
                  conv("c3", "x", "a3", 2, 2, 4),  // squeeze-excitation: the gate reads another blob
                  layer("sigmoid", "s3", {"a3"}, {"g3"}), layer("mul", "m3", {"x", "g3"}, {"y3"})});
  auto after = check_pass(g, core::fuse_self_gating, 2);
  CHECK(count(after, "silu") == 2);
  CHECK(count(after, "mul") == 1);
  CHECK(after.find_layer("s1")->outputs[0] == "y1");
  CHECK(after.find_layer("s3")->type == "sigmoid");
  // c1's output is now read by the silu alone: it fuses into the conv.
  auto fused = check_pass(after, core::fuse_activations, 2);
  CHECK(fused.find_layer("c1")->get_string("act") == "silu");
  CHECK(fused.find_layer("c3")->get_string("act") == "sigmoid");
}

TEST_CASE("eliminate_dead_layers: only what an output needs stays", "[passes][dead]") {
  auto g = graph({{"x", Shape{2, 3}}}, {"y"},
                 {layer("relu", "live", {"x"}, {"y"}), layer("sigmoid", "dead1", {"x"}, {"d1"}),
                  layer("tanh", "dead2", {"d1"}, {"d2"}), constant("unused", random_blob(Shape{3}, 1))});
  auto after = check_pass(g, core::eliminate_dead_layers, 3);
  CHECK(after.layers.size() == 1);
}

TEST_CASE("fold_pads: zeros on H and W into the conv2 that reads them, not other pads", "[passes][pad]") {
  using Ints = std::vector<int64_t>;
  // x -> pad H/W (0,1 | 2,0) -> conv (pads 1) -> y; x -> pad of 0.5 -> conv -> z; x -> pad channels -> relu -> w
  auto g = graph({{"x", Shape{1, 3, 6, 5}}}, {"y", "z", "w"},
                 {layer("pad", "p1", {"x"}, {"xp"}, {{"pads", Ints{0, 0, 0, 1, 0, 0, 2, 0}}}), conv("c1", "xp", "y", 3, 4, 1),
                  layer("pad", "p2", {"x"}, {"xq"}, {{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}, {"value", 0.5}}),
                  conv("c2", "xq", "z", 3, 4, 2),
                  layer("pad", "p3", {"x"}, {"xr"}, {{"pads", Ints{0, 0, 0, 0, 0, 2, 0, 0}}}), layer("relu", "r", {"xr"}, {"w"})});
  auto after = check_pass(g, core::fold_pads, 1);
  CHECK(count(after, "pad") == 2);
  const Layer* c1 = after.find_layer("c1");
  REQUIRE(c1);
  CHECK(c1->inputs[0] == "x");
  CHECK(c1->get_ints("pads") == Ints{1, 2, 3, 1});
}

TEST_CASE("optimize: every pass in order on a conv/bn/relu/identity net", "[passes][optimize]") {
  auto g = graph({{"x", Shape{1, 3, 6, 6}}}, {"y"},
                 {conv("c1", "x", "a", 3, 4, 1), batchnorm("bn", "a", "b", 4, 2), layer("relu", "r", {"b"}, {"c"}),
                  layer("identity", "id", {"c"}, {"d"}), constant("k", random_blob(Shape{4, 1, 1}, 3)),
                  layer("mul", "k2", {"k", "k"}, {"kk"}), layer("add", "add", {"d", "kk"}, {"e"}),
                  layer("flatten", "fl", {"e"}, {"f"}), dense("fc", "f", "y", 144, 5, 4)});
  const auto before = run_graph(g);
  core::Graph after = g;
  core::optimize(after);
  // conv2 (bn folded, relu fused), add (of the folded constant), flatten, dense + its constant.
  CHECK(count(after, "batchnorm") == 0);
  CHECK(count(after, "relu") == 0);
  CHECK(count(after, "identity") == 0);
  CHECK(count(after, "mul") == 0);
  CHECK(max_abs_diff(run_graph(after)[0].values, before[0].values) < 1e-4);
}

TEST_CASE("fuse_rotary: x * cos + rotate_half(x) * sin becomes one rotary layer", "[passes][attention]") {
  using Ints = std::vector<int64_t>;
  // rotate_half(x) = concat(-x[..., 4:], x[..., :4]): as a split (transformers 4.x at a fixed head size),
  // or two slices (bounds computed from x.shape[-1] // 2); cos and sin [1,1,5,8] over [1,3,5,8].
  auto rotated = [&](bool slices, bool swapped) {
    std::vector<Layer> layers;
    if (slices) {
      layers.push_back(layer("slice", "lo", {"x"}, {"x1"}, {{"starts", Ints{0}}, {"ends", Ints{4}}, {"axes", Ints{3}}}));
      layers.push_back(layer("slice", "hi", {"x"}, {"x2"}, {{"starts", Ints{4}}, {"ends", Ints{INT64_MAX}}, {"axes", Ints{3}}}));
    } else {
      layers.push_back(layer("split", "halves", {"x"}, {"x1", "x2"}, {{"axis", int64_t{3}}, {"split", Ints{4, 4}}}));
    }
    layers.push_back(layer("neg", "n", {"x2"}, {"nx2"}));
    layers.push_back(layer("concat", "cat", swapped ? std::vector<std::string>{"x1", "nx2"} : std::vector<std::string>{"nx2", "x1"},
                           {"r"}, {{"axis", int64_t{-1}}}));
    layers.push_back(layer("mul", "xc", {"cos", "x"}, {"a"}));
    layers.push_back(layer("mul", "rs", {"r", "sin"}, {"b"}));
    layers.push_back(layer("add", "sum", {"a", "b"}, {"y"}));
    return graph({{"x", Shape{1, 3, 5, 8}}, {"cos", Shape{1, 1, 5, 8}}, {"sin", Shape{1, 1, 5, 8}}}, {"y"}, layers);
  };
  for (bool slices : {false, true}) {
    INFO((slices ? "slices" : "split"));
    auto after = check_pass(rotated(slices, false), core::fuse_rotary, 1);
    REQUIRE(after.layers.size() == 1);
    CHECK(after.layers[0].type == "rotary");
    CHECK(after.layers[0].inputs == std::vector<std::string>{"x", "cos", "sin"});
    // concat(x1, -x2) is another rotation: left alone.
    check_pass(rotated(slices, true), core::fuse_rotary, 0);
  }
}

TEST_CASE("share_kv_heads: grouped-query attention reads its 2 key/value heads, not 6 copies", "[passes][attention]") {
  using Ints = std::vector<int64_t>;
  // transformers' repeat_kv: K [1,2,5,8] -> unsqueeze [1,2,1,5,8] -> expand (+ zeros) [1,2,3,5,8] ->
  // reshape [1,6,5,8]; V the same through a concat of three copies (ONNX Attention's import).
  auto g = graph({{"q", Shape{1, 6, 4, 8}}, {"k", Shape{1, 2, 5, 8}}, {"v", Shape{1, 2, 5, 8}}}, {"y"},
                 {layer("reshape", "uk", {"k"}, {"k5"}, {{"shape", Ints{1, 2, 1, 5, 8}}}),
                  constant("zeros", make_input(Shape{1, 2, 3, 5, 8}, std::vector<float>(240, 0.0f))),
                  layer("add", "ek", {"k5", "zeros"}, {"kx"}), layer("reshape", "rk", {"kx"}, {"k6"}, {{"shape", Ints{1, 6, 5, 8}}}),
                  layer("reshape", "uv", {"v"}, {"v5"}, {{"shape", Ints{1, 2, 1, 5, 8}}}),
                  layer("concat", "cv", {"v5", "v5", "v5"}, {"vx"}, {{"axis", int64_t{2}}}),
                  layer("reshape", "rv", {"vx"}, {"v6"}, {{"shape", Ints{1, 6, 5, 8}}}),
                  layer("attention", "a", {"q", "k6", "v6"}, {"y"}, {{"causal", int64_t{1}}})});
  auto after = check_pass(g, core::share_kv_heads, 2);
  CHECK(after.find_layer("a")->inputs == std::vector<std::string>{"q", "k", "v"});
  core::eliminate_dead_layers(after);
  CHECK(count(after, "add") == 0);
  CHECK(count(after, "concat") == 0);
  // Not a repeat: heads interleaved (group before hkv) stay as they are.
  auto interleaved = graph({{"q", Shape{1, 6, 4, 8}}, {"k", Shape{1, 2, 5, 8}}}, {"y"},
                           {layer("reshape", "uk", {"k"}, {"k5"}, {{"shape", Ints{1, 1, 2, 5, 8}}}),
                            constant("zeros", make_input(Shape{1, 3, 2, 5, 8}, std::vector<float>(240, 0.0f))),
                            layer("add", "ek", {"k5", "zeros"}, {"kx"}), layer("reshape", "rk", {"kx"}, {"k6"}, {{"shape", Ints{1, 6, 5, 8}}}),
                            layer("attention", "a", {"q", "k6", "k6"}, {"y"})});
  check_pass(interleaved, core::share_kv_heads, 0);
}

TEST_CASE("fuse_attention: the exporters' scaled dot-product attention becomes one layer", "[passes][attention]") {
  const float ninf = -std::numeric_limits<float>::infinity();
  auto scalar = [](const std::string& name, float v) { return constant(name, make_input(Shape{}, {v})); };
  // A constant mask whose second query row masks every key: the NaN guard makes that row 0.
  std::vector<float> mask(8 * 10, 0.0f);
  for (int j = 0; j < 10; ++j) mask[10 + j] = ninf;
  for (int j = 7; j < 10; ++j) mask[j] = -1e9f;
  SECTION("BERT's form: transposes, both operands scaled, mask, guard, a shape read of Q's transpose") {
    auto g = graph({{"q", Shape{1, 8, 2, 16}}, {"k", Shape{1, 10, 2, 16}}, {"v", Shape{1, 10, 2, 12}}}, {"y"},
                   {layer("transpose", "tq", {"q"}, {"qt"}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}),
                    layer("transpose", "tk", {"k"}, {"kt"}, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}}),
                    layer("transpose", "tv", {"v"}, {"vt"}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}),
                    scalar("c1", 0.5f), scalar("c2", 0.5f), constant("mask", make_input(Shape{1, 1, 8, 10}, mask)),
                    scalar("zero", 0.0f), layer("mul", "mq", {"qt", "c1"}, {"qs"}), layer("mul", "mk", {"c2", "kt"}, {"ks"}),
                    layer("matmul", "qk", {"qs", "ks"}, {"scores"}), layer("add", "masked", {"scores", "mask"}, {"biased"}),
                    layer("softmax", "sm", {"biased"}, {"p"}, {{"axis", int64_t{-1}}}),
                    layer("compare", "isnan", {"p", "p"}, {"nan"}, {{"op", std::string("not_equal")}}),
                    layer("where", "guard", {"nan", "zero", "p"}, {"pk"}), layer("matmul", "pv", {"pk", "vt"}, {"o"}),
                    layer("transpose", "to", {"o"}, {"ot"}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}),
                    // [1,8,2,12] read as Q's heads-first shape [1,2,8,16] with the last dim inferred: [1,2,8,12]
                    layer("shape_math", "qshape", {"qt"}, {"qdims3"}, {{"op", std::string("shape")}, {"end", int64_t{3}}}),
                    layer("reshape", "r", {"ot", "qdims_last"}, {"y"}),
                    constant("minus1", make_input(Shape{1}, {-1.0f})),
                    layer("shape_math", "target", {"qdims3", "minus1"}, {"qdims_last"}, {{"op", std::string("concat")}, {"axis", int64_t{0}}})});
    auto after = check_pass(g, core::fuse_attention, 1);
    REQUIRE(count(after, "attention") == 1);
    for (const char* t : {"transpose", "matmul", "softmax", "where", "compare", "mul", "add"}) CHECK(count(after, t) == 0);
    const Layer& a = *after.find_layer("sm");
    CHECK(a.get_string("masked_rows") == "zero");
    CHECK(a.get_float("scale") == Approx(0.25));
    CHECK(a.get_ints("q_perm") == std::vector<int64_t>{0, 2, 1, 3});
    CHECK(a.get_ints("k_perm") == std::vector<int64_t>{0, 2, 1, 3});
    CHECK(a.get_ints("out_perm") == std::vector<int64_t>{0, 2, 1, 3});
    CHECK(after.find_layer("qshape")->inputs[0] == "q");  // reads Q through a perm now
    CHECK(after.find_layer("qshape")->get_ints("perm") == std::vector<int64_t>{0, 2, 1, 3});
  }
  SECTION("GPT-2's cache: Kᵀ of a concat that is also a net output, the scores divided; shared blobs stay") {
    auto g = graph({{"q", Shape{1, 2, 3, 16}}, {"past", Shape{1, 2, 7, 16}}, {"k", Shape{1, 2, 3, 16}}, {"v", Shape{1, 2, 10, 16}}},
                   {"y", "present", "p2"},
                   {layer("concat", "cat", {"past", "k"}, {"present"}, {{"axis", int64_t{2}}}),
                    layer("transpose", "tk", {"present"}, {"kt"}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}}),
                    scalar("d", 4.0f), layer("matmul", "qk", {"q", "kt"}, {"scores"}), layer("div", "scaled", {"scores", "d"}, {"s2"}),
                    layer("softmax", "sm", {"s2"}, {"p"}, {{"axis", int64_t{3}}}), layer("matmul", "pv", {"p", "v"}, {"y"}),
                    // a second attention whose probabilities are a net output: not fused
                    layer("matmul", "qk2", {"q", "kt"}, {"scores2"}), layer("softmax", "sm2", {"scores2"}, {"p2"}),
                    layer("matmul", "pv2", {"p2", "v"}, {"y2"})});
    g.outputs.push_back("y2");
    auto after = check_pass(g, core::fuse_attention, 1);
    CHECK(count(after, "attention") == 1);
    CHECK(count(after, "softmax") == 1);
    CHECK(count(after, "matmul") == 2);     // the second attention's
    CHECK(count(after, "transpose") == 1);  // kt: qk2 reads it too, so the attention reads Kᵀ
    CHECK(after.find_layer("sm")->inputs[1] == "kt");
    CHECK(after.find_layer("sm")->get_ints("k_perm") == std::vector<int64_t>{0, 1, 3, 2});
  }
  SECTION("GPT-2 (transformers 4.x): a where-mask of lowest floats, a scaling by a value known at run time") {
    std::vector<float> tril(5 * 7, 0.0f), pad(7, 0.0f);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j <= i + 2; ++j) tril[i * 7 + j] = 1.0f;
    pad[0] = -1e9f;
    auto g = graph({{"q", Shape{1, 2, 5, 8}}, {"k", Shape{1, 2, 7, 8}}, {"v", Shape{1, 2, 7, 8}}, {"d", Shape{}}}, {"y"},
                   {constant("tril", make_input(Shape{5, 7}, tril)), scalar("half", 0.5f),
                    layer("compare", "causal", {"tril", "half"}, {"keep"}, {{"op", std::string("greater")}}),
                    scalar("lowest", std::numeric_limits<float>::lowest()),
                    constant("pad", make_input(Shape{1, 1, 1, 7}, pad)),
                    layer("transpose", "tk", {"k"}, {"kt"}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}}),
                    layer("matmul", "qk", {"q", "kt"}, {"scores"}), layer("mul", "scaled", {"scores", "d"}, {"s2"}),
                    layer("where", "masked", {"keep", "s2", "lowest"}, {"s3"}), layer("add", "padded", {"s3", "pad"}, {"s4"}),
                    layer("softmax", "sm", {"s4"}, {"p"}, {{"axis", int64_t{-1}}}), layer("matmul", "pv", {"p", "v"}, {"y"})});
    auto after = check_pass(g, core::fuse_attention, 1);
    REQUIRE(count(after, "attention") == 1);
    for (const char* t : {"transpose", "matmul", "softmax"}) CHECK(count(after, t) == 0);
    const Layer& a = *after.find_layer("sm");
    CHECK(a.inputs[0] == "sm/q_scaled");  // Q times d
    CHECK(after.find_layer("sm/q_scaled")->inputs == std::vector<std::string>{"q", "d"});
    CHECK(after.find_layer("sm/where_mask")->inputs == std::vector<std::string>{"keep", "sm/mask_zero", "lowest"});
    CHECK(a.inputs[3] == "sm/mask_sum");
  }
  SECTION("DistilBERT (transformers 4.x): masked_fill(mask expanded to the scores' shape, lowest)") {
    auto g = graph({{"q", Shape{1, 2, 5, 8}}, {"k", Shape{1, 2, 7, 8}}, {"v", Shape{1, 2, 7, 8}}}, {"y"},
                   {constant("keep", make_input(Shape{1, 1, 1, 7}, {1, 1, 1, 1, 1, 0, 0})), scalar("zero", 0.0f),
                    layer("compare", "is_pad", {"keep", "zero"}, {"pad"}, {{"op", std::string("equal")}}),
                    scalar("lowest", std::numeric_limits<float>::lowest()), scalar("c", 0.35f),
                    layer("mul", "mq", {"q", "c"}, {"qs"}),
                    layer("transpose", "tk", {"k"}, {"kt"}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}}),
                    layer("matmul", "qk", {"qs", "kt"}, {"scores"}),
                    layer("shape_math", "expand_as", {"scores"}, {"sdims"}, {{"op", std::string("shape")}}),
                    [] {
                      Layer z = layer("shape_math", "zeros", {"sdims"}, {"z"}, {{"op", std::string("constant_of_shape")}});
                      z.weights["value"] = make_input(Shape{}, {0.0f});
                      return z;
                    }(),
                    layer("add", "expand", {"pad", "z"}, {"pad4"}),
                    layer("compare", "cast", {"pad4", "zero"}, {"cond"}, {{"op", std::string("not_equal")}}),
                    layer("where", "fill", {"cond", "lowest", "scores"}, {"filled"}),
                    layer("softmax", "sm", {"filled"}, {"p"}, {{"axis", int64_t{-1}}}), layer("matmul", "pv", {"p", "v"}, {"y"})});
    auto after = check_pass(g, core::fuse_attention, 1);
    REQUIRE(count(after, "attention") == 1);
    for (const char* t : {"transpose", "matmul", "softmax", "mul"}) CHECK(count(after, t) == 0);
    // The mask compared before its expand: [1,1,1,7], broadcast in the attention.
    CHECK(after.find_layer("sm/where_mask")->inputs == std::vector<std::string>{"cast/unexpanded", "lowest", "sm/mask_zero"});
    CHECK(after.find_layer("cast/unexpanded")->inputs == std::vector<std::string>{"pad", "zero"});
    // The mask's expand reads the scores' shape from Q's first three dims and K's key count.
    CHECK(after.find_layer("expand_as")->inputs == std::vector<std::string>{"sm/scores_shape"});
    CHECK(after.find_layer("sm/key_count")->get_ints("perm") == std::vector<int64_t>{0, 1, 2, 3});
  }
  // transformers 4.x (Whisper, BART, Marian): heads merged into the batch,
  // [b,h,s,d] -> [b*h,s,d], the products on rank 3, Kᵀ a rank-3 transpose.
  auto ints = [](std::vector<int64_t> v) { return Attr{std::move(v)}; };
  auto merged_heads = [&](std::vector<Layer> scores_to_probs) {
    std::vector<Layer> l = {
        layer("transpose", "tq", {"q"}, {"qt"}, {{"perm", ints({0, 2, 1, 3})}}),
        layer("reshape", "rq", {"qt"}, {"q3"}, {{"shape", ints({2, -1, 16})}}), scalar("c", 0.25f),
        layer("mul", "mq", {"q3", "c"}, {"qs"}),
        layer("transpose", "tk", {"k"}, {"kt"}, {{"perm", ints({0, 2, 1, 3})}}),
        layer("reshape", "rk", {"kt"}, {"k3"}, {{"shape", ints({2, -1, 16})}}),
        layer("transpose", "tk3", {"k3"}, {"k3t"}, {{"perm", ints({0, 2, 1})}}),
        layer("transpose", "tv", {"v"}, {"vt"}, {{"perm", ints({0, 2, 1, 3})}}),
        layer("reshape", "rv", {"vt"}, {"v3"}, {{"shape", ints({2, -1, 12})}}),
        layer("matmul", "qk", {"qs", "k3t"}, {"scores"}),
        layer("softmax", "sm", {"probs_in"}, {"p"}, {{"axis", int64_t{-1}}}),
        layer("matmul", "pv", {"p", "v3"}, {"o3"}),
        layer("reshape", "ro", {"o3"}, {"o4"}, {{"shape", ints({1, 2, 5, 12})}}),
        layer("transpose", "to", {"o4"}, {"ot"}, {{"perm", ints({0, 2, 1, 3})}}),
        layer("reshape", "r", {"ot"}, {"y"}, {{"shape", ints({1, 5, 24})}})};
    for (Layer& x : scores_to_probs) l.push_back(std::move(x));
    return graph({{"q", Shape{1, 5, 2, 16}}, {"k", Shape{1, 7, 2, 16}}, {"v", Shape{1, 7, 2, 12}}}, {"y"}, std::move(l));
  };
  SECTION("Whisper's encoder (transformers 4.x): merged heads, Q scaled, no mask") {
    auto after = check_pass(merged_heads({layer("reshape", "id", {"scores"}, {"probs_in"}, {{"shape", ints({2, 5, 7})}})}),
                            core::fuse_attention, 0);
    // The scores pass through a reshape that changes nothing: not this form.
    CHECK(count(after, "attention") == 0);
    auto g = merged_heads({});
    for (Layer& l : g.layers)
      if (l.name == "sm") l.inputs[0] = "scores";
    after = check_pass(g, core::fuse_attention, 1);
    REQUIRE(count(after, "attention") == 1);
    for (const char* t : {"transpose", "matmul", "softmax", "mul"}) CHECK(count(after, t) == 0);
    CHECK(count(after, "reshape") == 1);  // the last, to [1,5,24]
    const Layer& a = *after.find_layer("sm");
    CHECK(a.inputs == std::vector<std::string>{"q", "k", "v"});
    CHECK(a.get_float("scale") == Approx(0.25));
    CHECK(a.get_ints("q_perm") == std::vector<int64_t>{0, 2, 1, 3});
    CHECK(a.get_ints("k_perm") == std::vector<int64_t>{0, 2, 1, 3});
    CHECK(a.get_ints("v_perm") == std::vector<int64_t>{0, 2, 1, 3});
    CHECK(a.get_ints("out_perm") == std::vector<int64_t>{0, 2, 1, 3});
  }
  SECTION("BART's key length read from the merged keys' shape: the reader reads K's, merged") {
    auto g = merged_heads({});
    for (Layer& l : g.layers)
      if (l.name == "sm") l.inputs[0] = "scores";
    g.layers.push_back(layer("shape_math", "klen", {"k3t"}, {"kdims"}, {{"op", std::string("shape")}}));
    g.outputs.push_back("kdims");
    auto after = check_pass(g, core::fuse_attention, 1);
    REQUIRE(count(after, "attention") == 1);
    const Layer& reader = *after.find_layer("klen");
    CHECK(reader.inputs[0] == "k");
    CHECK(reader.get_ints("perm") == std::vector<int64_t>{0, 2, 3, 1});
    CHECK(reader.get_int("merge_heads") == 1);
  }
  SECTION("BART's encoder (transformers 4.x): the mask added between a split and a merge of the heads") {
    std::vector<float> m(5 * 7, 0.0f);
    for (int i = 0; i < 5; ++i) m[i * 7 + 6] = -1e9f;
    auto g = merged_heads({layer("reshape", "split", {"scores"}, {"s4"}, {{"shape", ints({1, 2, 5, 7})}}),
                           constant("mask", make_input(Shape{1, 1, 5, 7}, m)),
                           layer("add", "masked", {"s4", "mask"}, {"b4"}),
                           layer("reshape", "merge", {"b4"}, {"probs_in"}, {{"shape", ints({2, 5, 7})}})});
    auto after = check_pass(g, core::fuse_attention, 1);
    REQUIRE(count(after, "attention") == 1);
    CHECK(count(after, "add") == 0);
    CHECK(count(after, "reshape") == 1);
    CHECK(after.find_layer("sm")->inputs.back() == "mask");
  }
}

TEST_CASE("merge_duplicates: twelve mask computations become one, weights compared, net outputs kept", "[passes][merge]") {
  auto g = graph({{"x", Shape{1, 4, 6}}, {"m", Shape{1, 6}}}, {"y", "y2", "c"},
                 {constant("zero", make_input(Shape{}, {0.0f})), constant("zero_again", make_input(Shape{}, {0.0f})),
                  constant("big", make_input(Shape{}, {-1e9f})),
                  // the same where twice (BERT: once per encoder layer), on constants that are equal too
                  layer("where", "w1", {"m", "zero", "big"}, {"mask1"}), layer("where", "w2", {"m", "zero_again", "big"}, {"mask2"}),
                  layer("add", "a1", {"x", "mask1"}, {"s1"}), layer("add", "a2", {"x", "mask2"}, {"s2"}),
                  layer("softmax", "sm1", {"s1"}, {"y"}), layer("softmax", "sm2", {"s2"}, {"y2"}),  // net outputs: stay
                  // the same inputs, other weights: both stay
                  dense("d1", "x", "c1", 6, 3, 7), dense("d2", "x", "c2", 6, 3, 8), layer("add", "both", {"c1", "c2"}, {"c"})});
  auto after = check_pass(g, core::merge_duplicates, 3);  // zero_again, w2, a2
  CHECK(count(after, "where") == 1);
  CHECK(count(after, "add") == 2);  // a1 and both
  CHECK(count(after, "softmax") == 2);
  CHECK(count(after, "dense") == 2);
  CHECK(after.find_layer("sm2")->inputs[0] == "s1");
}
