// Symbolic input dims stay dynamic: one session runs a model at several input
// shapes, each output equal to the same model imported at that fixed shape.
#include "support/tuning.hpp"
#include "import/onnx_test_util.hpp"

#include "core/model_impl.hpp"

#include <softneuro/session.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <limits>
#include <thread>
#include <cstdio>
#include <fstream>
#include <iterator>

#include <unistd.h>

using namespace softneuro;
using namespace softneuro::test;

namespace {

/// x [N,4,H,W] -> conv 3x3 -> reshape to [N,6,H*W] through a shape subgraph
/// (Shape, Gather, Mul, Unsqueeze, Concat) -> transpose -> unsqueeze/squeeze
/// of a leading dim -> relu. Every dim but the channels is symbolic.
OnnxModel shape_subgraph_model() {
  OnnxModel m(13);
  m.input("x", {-1, 4, -1, -1}).output("y");
  m.init("w", {6, 4, 3, 3}, random_values(6 * 4 * 9, 7)).init("b", {6}, random_values(6, 8));
  m.init_ints("i0", {}, {0}).init_ints("i2", {}, {2}).init_ints("i3", {}, {3}).init_ints("ax0", {1}, {0});
  m.init_ints("six", {1}, {6});
  m.node("Conv", {"x", "w", "b"}, {"c"}).ints("pads", {1, 1, 1, 1});
  m.node("Shape", {"c"}, {"s"});
  m.node("Gather", {"s", "i0"}, {"n"});
  m.node("Gather", {"s", "i2"}, {"h"});
  m.node("Gather", {"s", "i3"}, {"w_"});
  m.node("Mul", {"h", "w_"}, {"hw"});
  m.node("Unsqueeze", {"n", "ax0"}, {"n1"});
  m.node("Unsqueeze", {"hw", "ax0"}, {"hw1"});
  m.node("Concat", {"n1", "six", "hw1"}, {"target"}).i("axis", 0);
  m.node("Reshape", {"c", "target"}, {"r"});
  m.node("Transpose", {"r"}, {"t"}).ints("perm", {0, 2, 1});
  m.node("Unsqueeze", {"t", "ax0"}, {"u"});
  m.node("Relu", {"u"}, {"ru"});
  m.node("Squeeze", {"ru", "ax0"}, {"y"});
  return m;
}

std::vector<NamedBlob> input_of(const Shape& s, unsigned seed) {
  return {{"x", make_input(s, random_values(static_cast<std::size_t>(s.numel()), seed))}};
}

}  // namespace

TEST_CASE("dynamic shapes: one session runs three input shapes, each as the model imported at that shape",
          "[onnx][dynamic]") {
  const std::string path = shape_subgraph_model().save("dynamic.onnx");
  Model net = import_onnx(path);
  REQUIRE(net.inputs().size() == 1);
  CHECK(net.inputs()[0].shape == Shape{1, 4, 64, 64});
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 2, 3});

  // Through a .dnn file: the dynamic dims are kept.
  const std::string dnn = test_dir() + "/dynamic.dnn";
  net.save(dnn);
  Model model = Model::load(dnn);
  CHECK(model.inputs()[0].dynamic_dims == std::vector<int>{0, 2, 3});

  SessionOptions options;
  options.shape_cache = 2;  // three shapes in turn: prepared again after being dropped
  Session session(model, options);
  const std::vector<Shape> shapes{{1, 4, 5, 7}, {2, 4, 9, 3}, {1, 4, 16, 40}};
  for (int round = 0; round < 2; ++round)
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const Shape& s = shapes[k];
      INFO("shape " << s.to_string() << " round " << round);
      auto ins = input_of(s, static_cast<unsigned>(k));
      auto got = session.run(ins);
      CHECK(session.output_shape("y") == Shape{s[0], s[2] * s[3], 6});
      ImportOptions fixed;
      fixed.input_shapes["x"] = s;
      Model at_shape = import_onnx(path, fixed);
      CHECK(at_shape.inputs()[0].dynamic_dims.empty());
      auto want = Session(at_shape).run(ins);
      REQUIRE(got[0].blob.shape() == want[0].blob.shape());
      const float* g = got[0].blob.data_as<float>();
      const float* w = want[0].blob.data_as<float>();
      double diff = 0;
      for (int64_t i = 0; i < want[0].blob.numel(); ++i) diff = std::max(diff, double(std::abs(g[i] - w[i])));
      CHECK(diff == 0);
      // The caller-allocated form takes outputs of this shape.
      std::vector<NamedBlob> outs{{"y", Blob::allocate(session.output_shape("y"))}};
      session.run(ins, outs);
      CHECK(std::memcmp(outs[0].blob.data(), got[0].blob.data(), got[0].blob.byte_size()) == 0);
    }
  // An explicit reshape prepares ahead and answers output_shape.
  session.reshape({{"x", Shape{3, 4, 2, 2}}});
  CHECK(session.output_shape("y") == Shape{3, 4, 6});
}

TEST_CASE("dynamic shapes: a shape the model does not take is an error naming the input", "[onnx][dynamic]") {
  Model net = import_onnx(shape_subgraph_model().save("dynamic_bad.onnx"));
  Session session(net);
  for (const Shape& bad : {Shape{1, 5, 8, 8}, Shape{1, 4, 8}, Shape{1, 4, 8, 8, 1}}) {
    INFO(bad.to_string());
    auto ins = input_of(bad, 1);
    CHECK_THROWS_WITH(session.run(ins), Catch::Contains("input 'x'") && Catch::Contains("[?,4,?,?]"));
  }
  CHECK_THROWS_WITH(session.reshape({{"nope", Shape{1}}}), Catch::Contains("nope"));
}

TEST_CASE("dynamic shapes: a dim the model needs at one size stays fixed, with a warning", "[onnx][dynamic]") {
  // y = tile(x, W / 32 copies along the last dim): copies, a structure made at
  // the import size, change with W, so W cannot vary; N can.
  OnnxModel m(13);
  m.input("x", {-1, 2, 8, -1}).output("y");
  m.init_ints("i3", {}, {3}).init_ints("ax0", {1}, {0}).init_ints("ones", {3}, {1, 1, 1}).init_ints("d32", {}, {32});
  m.node("Shape", {"x"}, {"s"});
  m.node("Gather", {"s", "i3"}, {"w"});
  m.node("Div", {"w", "d32"}, {"copies"});
  m.node("Unsqueeze", {"copies", "ax0"}, {"c1"});
  m.node("Concat", {"ones", "c1"}, {"repeats"}).i("axis", 0);
  m.node("Tile", {"x", "repeats"}, {"y"});
  Model net = import_onnx(m.save("fixed_dim.onnx"));
  CHECK(net.inputs()[0].shape == Shape{1, 2, 8, 64});
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0});
  Session session(net);
  auto ok = session.run(input_of(Shape{3, 2, 8, 64}, 2));
  CHECK(ok[0].blob.shape() == Shape{3, 2, 8, 128});
  CHECK_THROWS_WITH(session.run(input_of(Shape{1, 2, 8, 32}, 3)), Catch::Contains("input 'x'") && Catch::Contains("[?,2,8,64]"));
}

TEST_CASE("dynamic shapes: a fixed dim named in many inputs is one warning, not one per input", "[onnx][dynamic]") {
  // Five inputs name their last dim W (as a decoder's cache names its head dim in every past input), and a
  // Tile's copies fix it: before, five warnings (a 32-layer genai decoder: 64).
  OnnxModel m(13);
  for (int i = 0; i < 5; ++i) m.named_input("x" + std::to_string(i), onnx::TensorProto::FLOAT, {"N", "W"});
  m.output("y");
  m.init_ints("i1", {}, {1}).init_ints("ax0", {1}, {0}).init_ints("one", {1}, {1}).init_ints("d32", {}, {32});
  m.node("Add", {"x0", "x1"}, {"a1"});
  m.node("Add", {"a1", "x2"}, {"a2"});
  m.node("Add", {"a2", "x3"}, {"a3"});
  m.node("Add", {"a3", "x4"}, {"a4"});
  m.node("Shape", {"a4"}, {"s"});
  m.node("Gather", {"s", "i1"}, {"w"});
  m.node("Div", {"w", "d32"}, {"copies"});
  m.node("Unsqueeze", {"copies", "ax0"}, {"c1"});
  m.node("Concat", {"one", "c1"}, {"repeats"}).i("axis", 0);
  m.node("Tile", {"a4", "repeats"}, {"y"});
  const std::string path = m.save("fixed_dim_many.onnx"), log = test_dir() + "/fixed_dim_many.log";
  // stderr into a file while importing (the library logs there).
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* f = std::fopen(log.c_str(), "w");
  REQUIRE(f);
  dup2(fileno(f), 2);
  Model net = import_onnx(path);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fclose(f);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int warnings = 0;
  for (std::size_t at = text.find("symbolic (W)"); at != std::string::npos; at = text.find("symbolic (W)", at + 1)) ++warnings;
  CHECK(warnings == 1);
  CHECK(text.find("'x0' dim 1") != std::string::npos);
  CHECK(text.find("and 2 more") != std::string::npos);
  for (const auto& input : net.inputs()) CHECK(input.dynamic_dims == std::vector<int>{0});
}

TEST_CASE("dynamic shapes: a split of rows gathered at the positions follows the sizes", "[onnx][dynamic]") {
  // y = x + split(table[range(W)], 2 halves along the last axis)[1], as
  // CodeGen splits its sin/cos table gathered at the positions. Before, the
  // split of that size-dependent value was a constant of the import size,
  // and W stayed 64 with a warning.
  OnnxModel m(13);
  m.input("x", {-1, -1, 2}).output("y");
  std::vector<float> table(100 * 4);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i);
  m.init("table", {100, 4}, table).init_ints("i1", {}, {1}).init_ints("zero", {}, {0}).init_ints("one", {}, {1});
  m.node("Shape", {"x"}, {"s"});
  m.node("Gather", {"s", "i1"}, {"w"});
  m.node("Range", {"zero", "w", "one"}, {"positions"});
  m.node("Gather", {"table", "positions"}, {"rows"});
  m.node("Split", {"rows"}, {"first", "second"}).i("axis", 1);
  m.node("Add", {"x", "second"}, {"y"});
  Model net = import_onnx(m.save("split_of_rows.onnx"));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 1});
  Session session(net);
  for (const Shape& s : {Shape{1, 64, 2}, Shape{2, 5, 2}, Shape{1, 70, 2}}) {
    INFO(s.to_string());
    auto ins = input_of(s, 5);
    auto y = session.run(ins);
    REQUIRE(y[0].blob.shape() == s);
    const float* x = ins[0].blob.data_as<float>();
    const float* out = y[0].blob.data_as<float>();
    bool same = true;
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t p = 0; p < s[1]; ++p)
        for (int64_t c = 0; c < 2; ++c) {
          const int64_t i = (b * s[1] + p) * 2 + c;
          same = same && out[i] == x[i] + table[static_cast<std::size_t>(p * 4 + 2 + c)];
        }
    CHECK(same);
  }
}

TEST_CASE("dynamic shapes: an EyeLike of the input's size follows it", "[onnx][dynamic]") {
  // y = x @ eye(W, k=1): each row shifted one column right, as XLNet builds
  // -eye(seq) into its mask. Before, the eye was a constant of the import
  // size and W stayed 64 with a warning.
  OnnxModel m(13);
  m.input("x", {-1, -1}).output("y");
  m.init_ints("i1", {}, {1}).init_ints("ax0", {1}, {0});
  m.node("Shape", {"x"}, {"s"});
  m.node("Gather", {"s", "i1"}, {"w"});
  m.node("Unsqueeze", {"w", "ax0"}, {"w1"});
  m.node("Concat", {"w1", "w1"}, {"square"}).i("axis", 0);
  m.node("ConstantOfShape", {"square"}, {"zeros"});
  m.node("EyeLike", {"zeros"}, {"eye"}).i("k", 1);
  m.node("MatMul", {"x", "eye"}, {"y"});
  Model net = import_onnx(m.save("eye_of_size.onnx"));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 1});
  Session session(net);
  for (const Shape& s : {Shape{1, 64}, Shape{3, 5}, Shape{2, 70}}) {
    INFO(s.to_string());
    auto ins = input_of(s, 6);
    auto y = session.run(ins);
    REQUIRE(y[0].blob.shape() == s);
    const float* x = ins[0].blob.data_as<float>();
    const float* out = y[0].blob.data_as<float>();
    bool same = true;
    for (int64_t r = 0; r < s[0]; ++r)
      for (int64_t j = 0; j < s[1]; ++j) same = same && out[r * s[1] + j] == (j == 0 ? 0.0f : x[r * s[1] + j - 1]);
    CHECK(same);
  }
}

TEST_CASE("dynamic shapes: a strided slice of a dim that changes takes every parity", "[onnx][dynamic]") {
  // y = x[:, ::2] (Funnel pools its sequence so). Before, the cut was a grid of
  // [count, 2] made at the import size's (even) parity: an odd W failed to reshape.
  OnnxModel m(13);
  m.input("x", {-1, -1, 4}).output("y");
  m.init_ints("starts", {1}, {0}).init_ints("ends", {1}, {INT64_MAX}).init_ints("axes", {1}, {1}).init_ints("steps", {1}, {2});
  m.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});
  Model net = import_onnx(m.save("strided_dynamic.onnx"));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 1});
  Session session(net);
  for (const Shape& s : {Shape{1, 64, 4}, Shape{2, 7, 4}, Shape{1, 1, 4}}) {
    INFO(s.to_string());
    auto ins = input_of(s, 7);
    auto y = session.run(ins);
    const int64_t rows = (s[1] + 1) / 2;
    REQUIRE(y[0].blob.shape() == Shape{s[0], rows, 4});
    const float* x = ins[0].blob.data_as<float>();
    const float* out = y[0].blob.data_as<float>();
    bool same = true;
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < 4; ++c) same = same && out[(b * rows + r) * 4 + c] == x[(b * s[1] + 2 * r) * 4 + c];
    CHECK(same);
  }
}

TEST_CASE("dynamic shapes: pads computed from the sizes are taken at every size", "[onnx][dynamic]") {
  // y = pad(x, W % 2 zeros after the last dim, then W zeros after the rows),
  // as SEW pads its pooled sequence back to an odd length. Before, the pads
  // were the import size's: W % 2 is 0 at 64 and at the sizes the import
  // compared, so W stayed dynamic and an odd W lost its last column.
  OnnxModel m(13);
  m.input("x", {-1, 2, 8, -1}).output("y");
  m.init_ints("i3", {}, {3}).init_ints("ax0", {1}, {0}).init_ints("two", {}, {2});
  m.init_ints("zeros", {2}, {0, 0}).init_ints("zero", {1}, {0});
  m.node("Shape", {"x"}, {"s"});
  m.node("Gather", {"s", "i3"}, {"w"});
  m.node("Mod", {"w", "two"}, {"odd"});
  m.node("Unsqueeze", {"odd", "ax0"}, {"odd1"});
  m.node("Unsqueeze", {"w", "ax0"}, {"w1"});
  // pads: before N, C, H, W = 0; after N, C = 0, H = W, W = W % 2.
  m.node("Concat", {"zeros", "zeros", "zeros", "w1", "odd1"}, {"pads"}).i("axis", 0);
  m.node("Pad", {"x", "pads"}, {"y"});
  Model net = import_onnx(m.save("pads_from_sizes.onnx"));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 3});
  Session session(net);
  for (const Shape& s : {Shape{1, 2, 8, 64}, Shape{2, 2, 8, 33}, Shape{1, 2, 8, 5}}) {
    INFO(s.to_string());
    auto ins = input_of(s, 4);
    auto y = session.run(ins);
    const int64_t w = s[3], oh = 8 + w, ow = w + w % 2;
    REQUIRE(y[0].blob.shape() == Shape{s[0], 2, oh, ow});
    const float* x = ins[0].blob.data_as<float>();
    const float* out = y[0].blob.data_as<float>();
    bool same = true;
    for (int64_t p = 0; p < s[0] * 2; ++p)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          same = same && out[(p * oh + i) * ow + j] == (i < 8 && j < w ? x[(p * 8 + i) * w + j] : 0.0f);
    CHECK(same);
  }
}

namespace {

/// `m` imported keeps every dim of x [N,2,H,W] dynamic, and one session runs
/// it at three shapes, each output of x's shape checked by `check(x, y, shape)`.
void check_every_shape(const OnnxModel& m, const std::string& file,
                       const std::function<void(const float* x, const float* y, const Shape& s)>& check) {
  Model net = import_onnx(m.save(file));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 2, 3});
  Session session(net);
  for (const Shape& s : {Shape{1, 2, 5, 7}, Shape{2, 2, 3, 20}, Shape{1, 2, 64, 100}}) {
    INFO(s.to_string());
    auto ins = input_of(s, 4);
    auto got = session.run(ins);
    REQUIRE(got[0].blob.shape() == s);
    check(ins[0].blob.data_as<float>(), got[0].blob.data_as<float>(), s);
  }
}

/// x [N,2,H,W] + a grid over W from Shape -> Gather -> Range -> Cast -> +0.5
/// (YOLOv8's anchors), then `finish` ("centre" -> "grid"): grid(w) is added at column w.
void check_anchor_grid(const std::string& file, const std::function<void(OnnxModel&)>& finish,
                       const std::function<float(float centre)>& grid) {
  OnnxModel m(13);
  m.input("x", {-1, 2, -1, -1}).output("y");
  m.init_ints("i3", {}, {3}).init_ints("zero", {}, {0}).init_ints("one", {}, {1});
  m.init("half", {}, {0.5f});
  m.node("Shape", {"x"}, {"s"});
  m.node("Gather", {"s", "i3"}, {"w"});
  m.node("Range", {"zero", "w", "one"}, {"r"});
  m.node("Cast", {"r"}, {"rf"}).i("to", 1);
  m.node("Add", {"rf", "half"}, {"centre"});
  finish(m);
  m.node("Add", {"x", "grid"}, {"y"});
  check_every_shape(m, file, [&](const float* x, const float* y, const Shape& s) {
    for (int64_t i = 0; i < s.numel(); ++i) REQUIRE(y[i] == Approx(x[i] + grid(static_cast<float>(i % s[3]) + 0.5f)));
  });
}

}  // namespace

TEST_CASE("dynamic shapes: values computed from the shape (an anchor grid) follow every input shape", "[onnx][dynamic]") {
  // Folded at the import size, the grid fixed H and W at 64 (the grid constant changes with W).
  check_anchor_grid(
      "anchor_grid.onnx",
      [](OnnxModel& m) {
        m.init("stride", {1}, {8.0f});
        m.node("Mul", {"centre", "stride"}, {"grid"});
      },
      [](float centre) { return centre * 8.0f; });
}

TEST_CASE("dynamic shapes: an anchor grid quantised by QuantizeLinear/DequantizeLinear follows every input shape",
          "[onnx][dynamic][quant]") {
  // The grid as quantize_static leaves it in a QDQ YOLOv8: its Q/DQ pair was
  // folded at the import size, and a plain import fixed H and W at 64.
  check_anchor_grid(
      "anchor_grid_qdq.onnx",
      [](OnnxModel& m) {
        m.init("gs", {}, {0.3f}).init_typed("gz", onnx::TensorProto::UINT8, {}, {0});
        m.node("QuantizeLinear", {"centre", "gs", "gz"}, {"cq"});
        m.node("DequantizeLinear", {"cq", "gs", "gz"}, {"grid"});
      },
      // Round half to even onto 0.3 steps, clamped to uint8's range.
      [](float centre) { return std::clamp(std::nearbyint(centre / 0.3f), 0.0f, 255.0f) * 0.3f; });
}

TEST_CASE("dynamic shapes: Expand of a computed tensor to a shape from the input follows every input shape", "[onnx][dynamic]") {
  // y = x + expand(mean over H and W, Shape(x)): the expand's zeros were a
  // constant of the import size, and a plain import fixed H and W at 64 (a
  // QOperator YOLOv8n expands its anchors so).
  OnnxModel m(13);
  m.input("x", {-1, 2, -1, -1}).output("y");
  m.node("ReduceMean", {"x"}, {"mean"}).ints("axes", {2, 3});
  m.node("Shape", {"x"}, {"s"});
  m.node("Expand", {"mean", "s"}, {"e"});
  m.node("Add", {"x", "e"}, {"y"});
  check_every_shape(m, "expand_to_input_shape.onnx", [](const float* x, const float* y, const Shape& s) {
    const int64_t plane = s[2] * s[3];
    for (int64_t p = 0; p < s[0] * s[1]; ++p) {
      double mean = 0;
      for (int64_t i = 0; i < plane; ++i) mean += x[p * plane + i];
      mean /= static_cast<double>(plane);
      for (int64_t i = 0; i < plane; ++i) REQUIRE(y[p * plane + i] == Approx(x[p * plane + i] + mean).margin(1e-5));
    }
  });
}

TEST_CASE("dynamic shapes: slices whose one changing part is the rest of the dim keep it dynamic", "[onnx][dynamic]") {
  // y = concat(x[..., 1:], x[..., :1]): x rolled by one column, constant
  // bounds cutting a dim that changes (MobileBERT's trigram embedding,
  // wav2vec2's x[..., :-1]). Before, both slices' split sizes held W at the
  // import size, and W was fixed at 64 with a warning.
  OnnxModel m(13);
  m.input("x", {-1, 2, -1, -1}).output("y");
  m.init_ints("one", {1}, {1}).init_ints("zero", {1}, {0}).init_ints("ax", {1}, {3});
  m.init_ints("end", {1}, {std::numeric_limits<int64_t>::max()});
  m.node("Slice", {"x", "one", "end", "ax"}, {"rest"});
  m.node("Slice", {"x", "zero", "one", "ax"}, {"first"});
  m.node("Concat", {"rest", "first"}, {"y"}).i("axis", 3);
  check_every_shape(m, "roll_by_slices.onnx", [](const float* x, const float* y, const Shape& s) {
    const int64_t w = s[3];
    for (int64_t r = 0; r < s.numel() / w; ++r)
      for (int64_t j = 0; j < w; ++j) REQUIRE(y[r * w + j] == x[r * w + (j + 1) % w]);
  });
}

TEST_CASE("dynamic shapes: a slice whose start is computed from the sizes takes it when planned", "[onnx][dynamic]") {
  // y = x[..., W/2:]: both of the cut's parts change with W (OPT's
  // positions[:, past:] in a decode step). Before, W was fixed at 64 with a warning.
  OnnxModel m(13);
  m.input("x", {-1, 2, -1, -1}).output("y");
  m.init_ints("i3", {}, {3}).init_ints("two", {1}, {2}).init_ints("ax", {1}, {3}).init_ints("ax0", {1}, {0});
  m.node("Shape", {"x"}, {"s"});
  m.node("Gather", {"s", "i3"}, {"w"});
  m.node("Unsqueeze", {"w", "ax0"}, {"w1"});
  m.node("Div", {"w1", "two"}, {"start"});
  m.node("Slice", {"x", "start", "w1", "ax"}, {"y"});
  Model net = import_onnx(m.save("slice_from_sizes.onnx"));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 2, 3});
  Session session(net);
  for (const Shape& s : {Shape{1, 2, 5, 7}, Shape{2, 2, 3, 20}, Shape{1, 2, 64, 100}, Shape{1, 2, 4, 1}}) {
    INFO(s.to_string());
    auto ins = input_of(s, 5);
    auto got = session.run(ins);
    const int64_t w = s[3], start = w / 2;
    REQUIRE(got[0].blob.shape() == Shape{s[0], s[1], s[2], w - start});
    const float* x = ins[0].blob.data_as<float>();
    const float* y = got[0].blob.data_as<float>();
    for (int64_t r = 0; r < s.numel() / w; ++r)
      for (int64_t j = start; j < w; ++j) REQUIRE(y[r * (w - start) + j - start] == x[r * w + j]);
  }
}

TEST_CASE("dynamic shapes: a triangle of a mask of the input's size follows every input shape", "[onnx][dynamic]") {
  // y = x * tril(ones(H, W), k = W - H) (Mistral's sliding-window mask: Trilu
  // of ConstantOfShape, k from the sizes). Before, the triangle was a constant
  // of the import size, and H and W were fixed at 64 with a warning.
  OnnxModel m(14);
  m.input("x", {-1, 2, -1, -1}).output("y");
  m.init_ints("i2", {}, {2}).init_ints("i3", {}, {3}).init_ints("hw_from", {1}, {2}).init_ints("hw_to", {1}, {4});
  m.init_ints("ax0", {1}, {0});
  m.node("Shape", {"x"}, {"s"});
  m.node("Slice", {"s", "hw_from", "hw_to", "ax0"}, {"hw"});
  m.node("ConstantOfShape", {"hw"}, {"ones"}).t("value", float_tensor({1}, {1.0f}));
  m.node("Gather", {"s", "i2"}, {"h"});
  m.node("Gather", {"s", "i3"}, {"w"});
  m.node("Sub", {"w", "h"}, {"k"});
  m.node("Trilu", {"ones", "k"}, {"mask"}).i("upper", 0);
  m.node("Mul", {"x", "mask"}, {"y"});
  check_every_shape(m, "trilu_of_input_size.onnx", [](const float* x, const float* y, const Shape& s) {
    const int64_t h = s[2], w = s[3];
    for (int64_t r = 0; r < s[0] * s[1]; ++r)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j) {
          const int64_t at = (r * h + i) * w + j;
          REQUIRE(y[at] == (j - i <= w - h ? x[at] : 0.0f));
        }
  });
}

TEST_CASE("dynamic shapes: a leading dim that is batch times heads takes a size the graph translates at", "[onnx][dynamic]") {
  // y = x[:, None, :] + reshape(cache, [batch, 4, 8]): Bloom's KV cache is
  // [batch * heads, ...], its own name at 1 like a batch, and the reshape
  // refused 1 x 8 values. Before, the import failed at every size tried.
  OnnxModel m(13);
  m.named_input("x", onnx::TensorProto::FLOAT, {"batch", "8"}).named_input("cache", onnx::TensorProto::FLOAT, {"batch_heads", "8"});
  m.output("y");
  m.init_ints("i0", {}, {0}).init_ints("ax0", {1}, {0}).init_ints("rest", {2}, {4, 8}).init_ints("ax1", {1}, {1});
  m.node("Shape", {"x"}, {"s"});
  m.node("Gather", {"s", "i0"}, {"b"});
  m.node("Unsqueeze", {"b", "ax0"}, {"b1"});
  m.node("Concat", {"b1", "rest"}, {"target"}).i("axis", 0);
  m.node("Reshape", {"cache", "target"}, {"heads"});
  m.node("Unsqueeze", {"x", "ax1"}, {"x3"});
  m.node("Add", {"x3", "heads"}, {"y"});
  Model net = import_onnx(m.save("batch_times_heads.onnx"));
  REQUIRE(net.inputs().size() == 2);
  CHECK(net.inputs()[1].shape == Shape{4, 8});
  auto x = random_values(8, 1), c = random_values(32, 2);
  std::vector<NamedBlob> ins{{"x", make_input(Shape{1, 8}, x)}, {"cache", make_input(Shape{4, 8}, c)}};
  Session session(net);
  auto got = session.run(ins);
  REQUIRE(got[0].blob.shape() == Shape{1, 4, 8});
  const float* y = got[0].blob.data_as<float>();
  for (std::size_t h = 0; h < 4; ++h)
    for (std::size_t i = 0; i < 8; ++i) CHECK(y[h * 8 + i] == x[i] + c[h * 8 + i]);
}

TEST_CASE("dynamic shapes: --input-shape fixes symbolic dims, '?' (-1) keeps one dynamic", "[onnx][dynamic]") {
  const std::string path = shape_subgraph_model().save("dynamic_given.onnx");
  ImportOptions o;
  o.input_shapes["x"] = Shape{2, 4, 32, -1};
  Model net = import_onnx(path, o);
  CHECK(net.inputs()[0].shape == Shape{2, 4, 32, 64});
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{3});
  o.input_shapes["x"] = Shape{2, 5, 32, -1};  // the channels are fixed by the model
  CHECK_THROWS_WITH(import_onnx(path, o), Catch::Contains("does not fit"));
}

TEST_CASE("dynamic shapes: tuning at several shapes stores a routine path per shape bucket", "[onnx][dynamic][tune]") {
  const std::string path = shape_subgraph_model().save("buckets.onnx");
  Model net = import_onnx(path);
  TuneOptions o;
  o.cache_dir = "-";
  o.unit_budget_ms = 1;
  o.integrated_runs = 2;
  o.shapes = {{{"x", Shape{1, 4, 8, 8}}}, {{"x", Shape{1, 4, 32, 32}}}};
  TuneReport report = tune_and_keep(net, o);
  CHECK(report.input_shapes.at("x") == Shape{1, 4, 8, 8});
  REQUIRE(report.other_shapes.size() == 1);
  CHECK(report.other_shapes[0].input_shapes.at("x") == Shape{1, 4, 32, 32});
  CHECK(report.to_text().find("x=[1,4,32,32]") != std::string::npos);

  const std::string dnn = test_dir() + "/buckets.dnn";
  net.save(dnn);
  Model model = Model::load(dnn);
  const core::Graph& graph = detail::impl_of(model).graph;
  const core::Tuning& g = detail::impl_of(model).tuning;
  CHECK(g.routine_path.input_shapes.at("x") == Shape{1, 4, 8, 8});
  REQUIRE(g.shape_paths.size() == 1);
  CHECK(g.shape_paths[0].input_shapes.at("x") == Shape{1, 4, 32, 32});
  CHECK(!g.shape_paths[0].routines.empty());

  // The bucket of a shape: its own, else the nearest by dim ratios.
  bool exact = false;
  CHECK(&g.path_for(graph, {{"x", Shape{1, 4, 32, 32}}}, &exact) == &g.shape_paths[0]);
  CHECK(exact);
  CHECK(&g.path_for(graph, {{"x", Shape{1, 4, 24, 30}}}, &exact) == &g.shape_paths[0]);
  CHECK(!exact);
  CHECK(&g.path_for(graph, {{"x", Shape{1, 4, 9, 7}}}, &exact) == &g.routine_path);

  // A session prepares first at the shapes the path was tuned at, not the
  // model's default [1,4,64,64] (a decode step's file planned a prompt first).
  {
    Session first(model);
    CHECK(first.output_shape("y") == Shape{1, 64, 6});
    first.run(input_of(Shape{1, 4, 8, 8}, 6));
    CHECK(first.plan_counts().built == 1);
  }

  // Every bucket's path, and a shape between them, computes what the untuned model does.
  Session session(model);
  for (const Shape& s : {Shape{1, 4, 8, 8}, Shape{1, 4, 32, 32}, Shape{2, 4, 20, 12}}) {
    INFO(s.to_string());
    auto ins = input_of(s, 5);
    auto got = session.run(ins);
    ImportOptions fixed;
    fixed.input_shapes["x"] = s;
    Model at_shape = import_onnx(path, fixed);
    auto want = Session(at_shape).run(ins);
    REQUIRE(got[0].blob.shape() == want[0].blob.shape());
    for (int64_t i = 0; i < want[0].blob.numel(); ++i)
      REQUIRE(std::abs(got[0].blob.data_as<float>()[i] - want[0].blob.data_as<float>()[i]) <=
              1e-4f * (1 + std::abs(want[0].blob.data_as<float>()[i])));
  }
}

TEST_CASE("dynamic shapes: sessions of one model at different shapes in several threads", "[onnx][dynamic][concurrency]") {
  Model net = import_onnx(shape_subgraph_model().save("dynamic_threads.onnx"));
  Model model = net;
  const std::vector<Shape> shapes{{1, 4, 6, 6}, {2, 4, 5, 9}, {1, 4, 12, 4}};
  std::vector<std::vector<NamedBlob>> inputs, expected;
  {
    Session one(model, SessionOptions{1});
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      inputs.push_back(input_of(shapes[k], static_cast<unsigned>(k)));
      expected.push_back(one.run(inputs.back()));
    }
  }
  constexpr int kThreads = 3, kRuns = 12;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      SessionOptions o{1};
      o.shape_cache = 2;  // shapes dropped and prepared again while other sessions run
      Session s(model, o);
      for (int r = 0; r < kRuns; ++r) {
        const auto k = static_cast<std::size_t>((r + t) % 3);
        auto got = s.run(inputs[k]);
        wrong[static_cast<std::size_t>(t)] += std::memcmp(got[0].blob.data(), expected[k][0].blob.data(),
                                                          expected[k][0].blob.byte_size()) != 0;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(wrong[static_cast<std::size_t>(t)] == 0);
}
