// InstanceNormalization and GroupNormalization into group_norm, Tile into
// concats; values from ONNX Runtime 1.32 for x = (arange % 11 - 5) / 3 *
// (1 + arange % 3), scale = (arange % 5 - 2.5) / 2, bias = (arange % 4 - 1.5) / 5.
#include "import/onnx_test_util.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace softneuro;
using namespace softneuro::test;

namespace {


std::vector<float> x_values(std::size_t n) {
  auto v = pattern(n, 11, 5, 3);
  for (std::size_t i = 0; i < n; ++i) v[i] *= static_cast<float>(1 + i % 3);
  return v;
}

Output norm_model(const char* op, const std::vector<int64_t>& xs, int64_t scale_len, int opset,
                  const std::function<void(NodeRef&)>& attrs) {
  OnnxModel m(opset);
  m.input("x", xs).output("y");
  m.init("s", {scale_len}, pattern(static_cast<std::size_t>(scale_len), 5, 2.5f, 2));
  m.init("b", {scale_len}, pattern(static_cast<std::size_t>(scale_len), 4, 1.5f, 5));
  NodeRef node = m.node(op, {"x", "s", "b"}, {"y"}, op);
  attrs(node);
  Shape shape(xs);
  return run_model(m, std::string(op) + ".onnx", shape, x_values(static_cast<std::size_t>(shape.numel())));
}

}  // namespace

TEST_CASE("InstanceNormalization and GroupNormalization: group_norm, as ONNX Runtime computes them", "[onnx][norm]") {
  SECTION("InstanceNormalization") {
    auto y = norm_model("InstanceNormalization", {2, 3, 2, 3}, 3, 13, [](NodeRef& n) { n.f("epsilon", 1e-3f); });
    CHECK(max_abs_diff(y.values, {-0.047566295f, 1.0883861f, 1.4670367f, -1.1835184f, -1.1835184f, -1.94082f, 0.0057358369f, -0.26615638f, -0.7193101f, -0.26615638f, -0.80994081f, 1.4558276f, 0.22621688f, 0.37767717f, 0.37767717f, -0.00097354501f, -0.07670369f, -0.30389413f, -0.51613349f, -1.0924894f, -1.9570231f, -0.94840038f, 1.2129343f, 1.5011122f, 0.47186702f, 0.68631721f, 0.47186702f, -0.1714834f, -0.6003837f, -1.4581842f, 0.033765368f, -0.10816599f, -0.30686992f, 0.26085556f, 0.34601438f, 0.37440062f}) < 3e-6);
  }
  SECTION("GroupNormalization (opset 18: scale and bias per group)") {
    auto y = norm_model("GroupNormalization", {1, 4, 3, 2}, 2, 18, [](NodeRef& n) { n.i("num_groups", 2).f("epsilon", 1e-4f); });
    CHECK(max_abs_diff(y.values, {0.39069235f, 0.91973346f, 1.0960803f, -0.13834861f, -0.13834861f, -0.49104261f, -0.66738963f, -1.1964307f, -2.0781658f, -1.1964307f, -2.2545125f, 2.1541624f, 0.24443147f, 0.46784648f, 0.46784648f, -0.090691045f, -0.20239857f, -0.53752112f, -0.42581356f, -0.87264359f, -1.5428885f, -0.76093608f, 0.91467643f, 1.1380914f}) < 3e-6);
  }
  SECTION("groups that do not divide the channels are refused naming the field") {
    CHECK_THROWS_WITH(norm_model("GroupNormalization", {1, 4, 3, 2}, 3, 18, [](NodeRef& n) { n.i("num_groups", 3); }),
                      Catch::Contains("num_groups"));
  }
}

TEST_CASE("Split (opset 18): num_outputs parts of ceil(dim / num_outputs), the last smaller", "[onnx][split]") {
  OnnxModel m(18);
  m.input("x", {1, 7}).output("a").output("b").output("c");
  m.node("Split", {"x"}, {"a", "b", "c"}, "split").i("axis", 1).i("num_outputs", 3);
  Model net = import_onnx(m.save("split18.onnx"));
  auto out = run_net(net, {{"x", make_input(Shape{1, 7}, {0, 1, 2, 3, 4, 5, 6})}});
  REQUIRE(out.size() == 3);
  CHECK(out[0].values == std::vector<float>{0, 1, 2});
  CHECK(out[1].values == std::vector<float>{3, 4, 5});
  CHECK(out[2].values == std::vector<float>{6});
}

TEST_CASE("Tile: constants tiled at import, blobs by concats", "[onnx][tile]") {
  OnnxModel m(13);
  m.input("x", {2, 3}).output("y");
  m.init_ints("r", {2}, {2, 3});
  m.node("Tile", {"x", "r"}, {"y"}, "tile");
  const std::vector<float> x{1, 2, 3, 4, 5, 6};
  auto y = run_model(m, "tile.onnx", Shape{2, 3}, x);
  REQUIRE(y.shape == Shape{4, 9});
  std::vector<float> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 9; ++j) want.push_back(x[static_cast<std::size_t>((i % 2) * 3 + j % 3)]);
  CHECK(y.values == want);

  OnnxModel bad(13);
  bad.input("x", {2, 3}).output("y");
  bad.init_ints("r", {2}, {0, 1});
  bad.node("Tile", {"x", "r"}, {"y"}, "tile");
  CHECK_THROWS_WITH(run_model(bad, "tile_bad.onnx", Shape{2, 3}, x), Catch::Contains("repeats"));
}

TEST_CASE("BatchNormalization in training mode: the batch's statistics, and the running ones updated", "[onnx][norm]") {
  OnnxModel m(15);
  m.input("x", {2, 2, 1, 3}).output("y").output("running_mean").output("running_var");
  const std::vector<float> scale = {1.5f, -0.5f}, bias = {0.25f, 1}, mean = {0.1f, -0.2f}, var = {1, 2};
  m.init("scale", {2}, scale).init("B", {2}, bias).init("mean", {2}, mean).init("var", {2}, var);
  m.node("BatchNormalization", {"x", "scale", "B", "mean", "var"}, {"y", "running_mean", "running_var"})
      .i("training_mode", 1).f("momentum", 0.8f).f("epsilon", 1e-3f);
  const std::vector<float> x = x_values(12);
  auto out = run_net(import_onnx(m.save("batchnorm_training.onnx")), {{"x", make_input(Shape{2, 2, 1, 3}, x)}});
  REQUIRE(out.size() == 3);
  for (int c = 0; c < 2; ++c) {
    std::vector<double> v;  // the channel's values: both batch items, 3 each
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 3; ++i) v.push_back(x[static_cast<std::size_t>((b * 2 + c) * 3 + i)]);
    double mu = 0, s2 = 0;
    for (double e : v) mu += e / 6;
    for (double e : v) s2 += (e - mu) * (e - mu) / 6;
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 3; ++i) {
        const std::size_t at = static_cast<std::size_t>((b * 2 + c) * 3 + i);
        CHECK(out[0].values[at] == Approx((x[at] - mu) / std::sqrt(s2 + 1e-3) * scale[c] + bias[c]).margin(1e-5));
      }
    CHECK(out[1].values[static_cast<std::size_t>(c)] == Approx(mean[c] * 0.8 + mu * 0.2).margin(1e-6));
    CHECK(out[2].values[static_cast<std::size_t>(c)] == Approx(var[c] * 0.8 + s2 * 0.2).margin(1e-6));
  }
}
