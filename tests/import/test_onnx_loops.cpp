// ONNX Loop and Scan (layer loop): the body imported as a graph of its own and
// run once per iteration, against references computed here.
#include "import/onnx_test_util.hpp"

#include <softneuro/tune.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include <vector>

using namespace softneuro;
using namespace softneuro::test;

namespace {

/// A Loop's body: acc_out = acc_in + step (read from outside), each iteration's
/// acc_out * iteration stacked, cond_out = iteration < limit (read from outside).
onnx::GraphProto accumulate_body() {
  OnnxModel b(13);
  b.typed_input("i", onnx::TensorProto::INT64, {}).typed_input("cond_in", onnx::TensorProto::BOOL, {}).input("acc_in", {2});
  b.typed_output("cond_out", onnx::TensorProto::BOOL).output("acc_out").output("scan");
  b.node("Add", {"acc_in", "step"}, {"acc_out"});
  b.node("Cast", {"i"}, {"i_f"}).i("to", onnx::TensorProto::FLOAT);
  b.node("Mul", {"acc_out", "i_f"}, {"scan"});
  b.node("Less", {"i_f", "limit"}, {"cond_out"});
  return b.graph();
}

/// The reference of accumulate_body's loop: (acc, scans) after at most `m`
/// iterations, the condition checked after each.
std::pair<std::vector<float>, std::vector<float>> accumulate(std::vector<float> acc, const std::vector<float>& step, int m,
                                                             float limit) {
  std::vector<float> scans;
  for (int i = 0; i < m; ++i) {
    for (int k = 0; k < 2; ++k) acc[k] += step[k];
    for (int k = 0; k < 2; ++k) scans.push_back(acc[k] * static_cast<float>(i));
    if (!(static_cast<float>(i) < limit)) break;
  }
  return {acc, scans};
}

}  // namespace

TEST_CASE("Loop: carried values, scan outputs, values read from outside, and a condition that ends it early", "[onnx][loop]") {
  OnnxModel m(13);
  m.input("x", {2}).input("step", {2}).input("limit", {}).output("acc").output("scans");
  m.init_ints("M", {}, {5});
  m.node("Loop", {"M", "", "x"}, {"acc", "scans"}).g("body", accumulate_body());
  const Model net = import_onnx(m.save("loop_accumulate.onnx"));
  CHECK(count_layers(net, "loop") == 1);
  Session session(net);
  const std::vector<float> x = {1, -2}, step = {0.5f, 3};
  for (float limit : {10.0f, 2.0f, 0.0f}) {
    INFO("limit " << limit);
    auto out = session.run(std::vector<NamedBlob>{
        {"x", make_input(Shape{2}, x)}, {"step", make_input(Shape{2}, step)}, {"limit", make_input(Shape{}, {limit})}});
    const auto [acc, scans] = accumulate(x, step, 5, limit);
    REQUIRE(out[0].blob.shape() == Shape{2});
    CHECK(std::vector<float>(out[0].blob.data_as<float>(), out[0].blob.data_as<float>() + 2) == acc);
    const int64_t ran = static_cast<int64_t>(scans.size() / 2);
    REQUIRE(out[1].blob.shape() == Shape{ran, 2});
    CHECK(std::vector<float>(out[1].blob.data_as<float>(), out[1].blob.data_as<float>() + scans.size()) == scans);
  }
  SECTION("a .dnn round trip and a tuned model run the same") {
    const std::string path = test_dir() + "/loop_accumulate.dnn";
    TuneOptions o;
    o.cache_dir = "-";
    o.unit_budget_ms = 1;
    o.integrated_runs = 2;
    tune(net, o).save(path);
    const Model loaded = Model::load(path);
    auto out = run_net(loaded, {{"x", make_input(Shape{2}, x)}, {"step", make_input(Shape{2}, step)},
                                {"limit", make_input(Shape{}, {2.0f})}});
    const auto [acc, scans] = accumulate(x, step, 5, 2.0f);
    CHECK(out[0].values == acc);
    CHECK(out[1].shape == Shape{3, 2});
    CHECK(out[1].values == scans);
  }
}

TEST_CASE("Loop: a trip count M read at run time, carried values only", "[onnx][loop]") {
  OnnxModel b(13);
  b.typed_input("i", onnx::TensorProto::INT64, {}).typed_input("c", onnx::TensorProto::BOOL, {}).input("v", {3});
  b.typed_output("c_out", onnx::TensorProto::BOOL).output("v_out");
  b.node("Identity", {"c"}, {"c_out"});
  b.node("Mul", {"v", "two"}, {"v_out"});
  OnnxModel m(13);
  m.input("x", {3}).typed_input("M", onnx::TensorProto::INT64, {}).output("y");
  m.init("two", {}, {2});
  m.node("Loop", {"M", "", "x"}, {"y"}).g("body", b.graph());
  const Model net = import_onnx(m.save("loop_run_time_m.onnx"));
  Session session(net);
  for (int64_t trips : {0, 1, 4}) {
    Blob count = Blob::allocate(Shape{}, DType::int64);
    count.data_as<int64_t>()[0] = trips;
    auto out = session.run(std::vector<NamedBlob>{{"x", make_input(Shape{3}, {1, -1, 0.5f})}, {"M", count}});
    const float f = static_cast<float>(1 << trips);
    CHECK(std::vector<float>(out[0].blob.data_as<float>(), out[0].blob.data_as<float>() + 3) ==
          std::vector<float>{f, -f, 0.5f * f});
  }
}

TEST_CASE("Loop: scan outputs need a trip count known when planned: an input's plans per value, from data, a refusal says why",
          "[onnx][loop]") {
  {
    OnnxModel m(13);
    m.input("x", {2}).input("step", {2}).input("limit", {}).typed_input("M", onnx::TensorProto::INT64, {}).output("acc").output("scans");
    m.node("Loop", {"M", "", "x"}, {"acc", "scans"}).g("body", accumulate_body());
    Session session(import_onnx(m.save("loop_input_m_scans.onnx")));
    const std::vector<float> x = {1, -2}, step = {0.5f, 3};
    for (int trips : {3, 5, 3}) {
      Blob count = Blob::allocate(Shape{}, DType::int64);
      count.data_as<int64_t>()[0] = trips;
      auto out = session.run(std::vector<NamedBlob>{{"x", make_input(Shape{2}, x)}, {"step", make_input(Shape{2}, step)},
                                                    {"limit", make_input(Shape{}, {100.0f})}, {"M", count}});
      const auto [acc, scans] = accumulate(x, step, trips, 100.0f);
      REQUIRE(out[1].blob.shape() == Shape{trips, 2});
      CHECK(std::vector<float>(out[1].blob.data_as<float>(), out[1].blob.data_as<float>() + 2 * trips) == scans);
      CHECK(std::vector<float>(out[0].blob.data_as<float>(), out[0].blob.data_as<float>() + 2) == acc);
    }
  }
  OnnxModel m(13);
  m.input("x", {2}).input("step", {2}).input("limit", {}).output("acc").output("scans");
  m.node("ReduceSum", {"x"}, {"total"}).i("keepdims", 0);
  m.node("Cast", {"total"}, {"M"}).i("to", onnx::TensorProto::INT64);
  m.node("Loop", {"M", "", "x"}, {"acc", "scans"}).g("body", accumulate_body());
  try {
    import_onnx(m.save("loop_run_time_m_scans.onnx"));
    FAIL("imported");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Catch::Contains("Loop with scan outputs whose trip count M is computed at run time"));
  }
}

TEST_CASE("Scan: running sums over a sequence, forward and reverse, stacked along any axis, at any length", "[onnx][scan]") {
  OnnxModel b(16);
  b.input("sum_in", {2}).input("x_t", {2}).output("sum_out").output("each");
  b.node("Add", {"sum_in", "x_t"}, {"sum_out"});
  b.node("Identity", {"sum_out"}, {"each"});
  for (int reverse : {0, 1}) {
    DYNAMIC_SECTION("input direction " << reverse) {
      OnnxModel m(16);
      m.input("init", {2}).input("x", {-1, 2}).output("total").output("sums");
      m.node("Scan", {"init", "x"}, {"total", "sums"})
          .g("body", b.graph())
          .i("num_scan_inputs", 1)
          .ints("scan_input_directions", {reverse})
          .ints("scan_output_axes", {1});
      const Model net = import_onnx(m.save(fmt::format("scan_sums{}.onnx", reverse)));
      Session session(net);
      for (int64_t len : {3, 6}) {
        std::vector<float> x;
        for (int64_t t = 0; t < len; ++t) x.insert(x.end(), {static_cast<float>(t + 1), static_cast<float>(-2 * t)});
        auto out = session.run(std::vector<NamedBlob>{{"init", make_input(Shape{2}, {10, 0})}, {"x", make_input(Shape{len, 2}, x)}});
        std::vector<float> sum = {10, 0}, sums(static_cast<std::size_t>(2 * len));
        for (int64_t t = 0; t < len; ++t) {
          const int64_t at = reverse ? len - 1 - t : t;
          for (int k = 0; k < 2; ++k) {
            sum[k] += x[static_cast<std::size_t>(2 * at + k)];
            sums[static_cast<std::size_t>(k * len + t)] = sum[k];  // output axis 1: [2, len]
          }
        }
        REQUIRE(out[1].blob.shape() == Shape{2, len});
        CHECK(std::vector<float>(out[0].blob.data_as<float>(), out[0].blob.data_as<float>() + 2) == sum);
        CHECK(std::vector<float>(out[1].blob.data_as<float>(), out[1].blob.data_as<float>() + 2 * len) == sums);
      }
    }
  }
}

TEST_CASE("Scan: a reverse scan output, and a body that reads a weight from outside", "[onnx][scan]") {
  // An RNN written as a Scan: h' = tanh(x_t W + h), the outputs reversed.
  OnnxModel b(16);
  b.input("h", {1, 2}).input("x_t", {1, 3}).output("h_out").output("y_t");
  b.node("MatMul", {"x_t", "W"}, {"xw"});
  b.node("Add", {"xw", "h"}, {"pre"});
  b.node("Tanh", {"pre"}, {"h_out"});
  b.node("Identity", {"h_out"}, {"y_t"});
  OnnxModel m(16);
  m.input("h0", {1, 2}).input("x", {4, 1, 3}).output("h").output("ys");
  const std::vector<float> w = {0.5f, -0.25f, 0.1f, 0.3f, -0.4f, 0.2f};
  m.init("W", {3, 2}, w);
  m.node("Scan", {"h0", "x"}, {"h", "ys"}).g("body", b.graph()).i("num_scan_inputs", 1).ints("scan_output_directions", {1});
  const Model net = import_onnx(m.save("scan_rnn.onnx"));
  const std::vector<float> x = pattern(12, 7, 3, 4);
  auto out = run_net(net, {{"h0", make_input(Shape{1, 2}, {0.1f, -0.1f})}, {"x", make_input(Shape{4, 1, 3}, x)}});
  std::vector<float> h = {0.1f, -0.1f}, ys(8);
  for (int t = 0; t < 4; ++t) {
    std::vector<float> next(2);
    for (int j = 0; j < 2; ++j) {
      double s = h[static_cast<std::size_t>(j)];
      for (int i = 0; i < 3; ++i) s += x[static_cast<std::size_t>(3 * t + i)] * w[static_cast<std::size_t>(2 * i + j)];
      next[static_cast<std::size_t>(j)] = static_cast<float>(std::tanh(s));
    }
    h = next;
    for (int j = 0; j < 2; ++j) ys[static_cast<std::size_t>(2 * (3 - t) + j)] = h[static_cast<std::size_t>(j)];
  }
  REQUIRE(out[1].shape == Shape{4, 1, 2});
  CHECK(max_abs_diff(out[0].values, h) < 1e-6);
  CHECK(max_abs_diff(out[1].values, ys) < 1e-6);
}

TEST_CASE("Loop: a condition that never turns false stops at the iteration cap the memory limit sets, with an Error",
          "[onnx][loop][hostile]") {
  OnnxModel b(13);
  b.typed_input("i", onnx::TensorProto::INT64, {}).typed_input("c", onnx::TensorProto::BOOL, {}).input("v", {256});
  b.typed_output("c_out", onnx::TensorProto::BOOL).output("v_out");
  b.node("Identity", {"c"}, {"c_out"});
  b.node("Add", {"v", "one"}, {"v_out"});
  OnnxModel m(13);
  m.input("x", {256}).output("y");
  m.init("one", {}, {1});
  m.init_ints("forever", {}, {std::numeric_limits<int64_t>::max()});
  m.node("Loop", {"forever", "", "x"}, {"y"}).g("body", b.graph());
  const Model net = import_onnx(m.save("loop_forever.onnx"));
  SessionOptions o;
  o.memory_limit = 1 << 20;  // 1 MiB: about 1,000 iterations of 1 KiB
  Session session(net, o);
  try {
    session.run(std::vector<NamedBlob>{{"x", make_input(Shape{256}, std::vector<float>(256, 0.0f))}});
    FAIL("ran");
  } catch (const Error& e) {
    CHECK_THAT(e.message(), Catch::Contains("its condition still holds"));
    CHECK(e.layer() == "Loop_1");
  }
}

TEST_CASE("Loop: a body slicing rows by its iteration number plans per iteration", "[onnx][loop]") {
  // ONNX's test_loop11: each iteration adds row i of a table read from outside
  // (a Slice whose bounds come from the iteration number). More iterations
  // than a session keeps plans (shape_cache 4).
  OnnxModel b(13);
  b.typed_input("i", onnx::TensorProto::INT64, {}).typed_input("cond_in", onnx::TensorProto::BOOL, {}).input("y_in", {1});
  b.typed_output("cond_out", onnx::TensorProto::BOOL).output("y_out").output("scan");
  b.init_ints("zero", {1}, {0}).init_ints("one", {}, {1});
  b.node("Identity", {"cond_in"}, {"cond_out"});
  b.node("Unsqueeze", {"i", "zero"}, {"start"});
  b.node("Add", {"i", "one"}, {"i1"});
  b.node("Unsqueeze", {"i1", "zero"}, {"end"});
  b.node("Slice", {"table", "start", "end"}, {"row"});
  b.node("Add", {"y_in", "row"}, {"y_out"});
  b.node("Identity", {"y_out"}, {"scan"});
  OnnxModel m(13);
  m.typed_input("m", onnx::TensorProto::INT64, {}).output("y").output("scans");
  const std::vector<float> table = {1, -2, 4, 0.5f, 3, -1, 2, 6};
  m.init("table", {8}, table).init("y0", {1}, {10});
  m.init_typed("cond", onnx::TensorProto::BOOL, {}, {1});
  m.node("Loop", {"m", "cond", "y0"}, {"y", "scans"}).g("body", b.graph());
  const Model net = import_onnx(m.save("loop_slice_rows.onnx"));
  Session session(net);
  for (int64_t trips : {8, 3, 8}) {
    INFO(trips << " iterations");
    Blob mb = Blob::allocate(Shape{}, DType::int64);
    mb.data_as<int64_t>()[0] = trips;
    auto out = session.run(std::vector<NamedBlob>{{"m", mb}});
    REQUIRE(out[1].blob.shape() == Shape{trips, 1});
    float y = 10;
    for (int64_t i = 0; i < trips; ++i) {
      y += table[static_cast<std::size_t>(i)];
      CHECK(out[1].blob.data_as<float>()[i] == y);
    }
    CHECK(out[0].blob.data_as<float>()[0] == y);
  }
}

namespace {

/// Makes a graph input or output of `g` a sequence of float tensors.
void as_sequence(onnx::ValueInfoProto* v) {
  v->mutable_type()->Clear();
  v->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
}

}  // namespace

TEST_CASE("Loop building a sequence over a constant count is unrolled (refused before): repeat_interleave as exported",
          "[onnx][loop][sequence]") {
  // y = repeat_interleave(x, 2, dim=1), as TorchScript exports it where the
  // dim is symbolic (GPT-J's rotary tables): the columns split to a sequence,
  // a Loop over their count inserting each column twice side by side into a
  // sequence, concatenated.
  OnnxModel b(13);
  b.typed_input("i", onnx::TensorProto::INT64, {}).typed_input("cond_in", onnx::TensorProto::BOOL, {}).input("acc_in", {});
  b.typed_output("cond_out", onnx::TensorProto::BOOL).output("acc_out").output("column_scan");
  as_sequence(b.graph().mutable_input(2));
  as_sequence(b.graph().mutable_output(1));
  b.node("SequenceAt", {"columns", "i"}, {"column"});
  b.node("Concat", {"column", "column"}, {"twice"}).i("axis", 1);
  b.node("SequenceInsert", {"acc_in", "twice"}, {"acc_out"});
  b.node("Identity", {"cond_in"}, {"cond_out"});
  b.node("Neg", {"column"}, {"column_scan"});
  OnnxModel m(13);
  m.input("x", {-1, 3}).output("y").output("scans");
  m.init_ints("ones", {3}, {1, 1, 1}).init_ints("i1", {}, {1});
  m.node("SplitToSequence", {"x", "ones"}, {"columns"}).i("axis", 1);
  m.node("SequenceLength", {"columns"}, {"count"});
  m.node("SequenceEmpty", {}, {"empty"}).i("dtype", onnx::TensorProto::FLOAT);
  m.node("Loop", {"count", "", "empty"}, {"pieces", "scans"}).g("body", b.graph());
  m.node("ConcatFromSequence", {"pieces"}, {"y"}).i("axis", 1);
  const Model net = import_onnx(m.save("loop_sequence.onnx"));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0});
  Session session(net);
  for (int64_t rows : {1, 4}) {
    const std::vector<float> x = random_values(static_cast<std::size_t>(rows * 3), 7);
    auto y = session.run(std::vector<NamedBlob>{{"x", make_input(Shape{rows, 3}, x)}});
    REQUIRE(y[0].blob.shape() == Shape{rows, 6});
    const float* v = y[0].blob.data_as<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < 6; ++j) CHECK(v[r * 6 + j] == x[static_cast<std::size_t>(r * 3 + j / 2)]);
    // Each iteration's -column stacked: [3, rows, 1].
    REQUIRE(y[1].blob.shape() == Shape{3, rows, 1});
    const float* sc = y[1].blob.data_as<float>();
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t r = 0; r < rows; ++r) CHECK(sc[c * rows + r] == -x[static_cast<std::size_t>(r * 3 + c)]);
  }
}

TEST_CASE("Sequences known at import: construct, erase, at, length, stack, split without keeping the axis", "[onnx][sequence]") {
  // rows = SplitToSequence(x) (axis 0, keepdims 0): 3 rows of 4; drop row 1;
  // y = stack([rows[-1], rows[0], x[0] * count]) along a new axis 1.
  OnnxModel m(13);
  m.input("x", {3, 4}).output("y");
  m.init_ints("one", {}, {1}).init_ints("last", {}, {-1}).init_ints("first", {}, {0});
  m.node("SplitToSequence", {"x"}, {"rows"}).i("keepdims", 0);
  m.node("SequenceErase", {"rows", "one"}, {"kept"});
  m.node("SequenceAt", {"kept", "last"}, {"r2"});
  m.node("SequenceAt", {"kept", "first"}, {"r0"});
  m.node("SequenceLength", {"kept"}, {"count"});
  m.node("Cast", {"count"}, {"count_f"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Mul", {"r0", "count_f"}, {"scaled"});
  m.node("SequenceConstruct", {"r2", "r0", "scaled"}, {"three"});
  m.node("ConcatFromSequence", {"three"}, {"y"}).i("axis", 1).i("new_axis", 1);
  const std::vector<float> x = random_values(12, 8);
  auto y = run_model(m, "sequence_ops.onnx", Shape{3, 4}, x);
  REQUIRE(y.shape == Shape{4, 3});
  for (int64_t j = 0; j < 4; ++j) {
    CHECK(y.values[static_cast<std::size_t>(j * 3)] == x[static_cast<std::size_t>(8 + j)]);
    CHECK(y.values[static_cast<std::size_t>(j * 3 + 1)] == x[static_cast<std::size_t>(j)]);
    CHECK(y.values[static_cast<std::size_t>(j * 3 + 2)] == x[static_cast<std::size_t>(j)] * 2.0f);
  }
  // A position computed at run time is refused, naming the node.
  OnnxModel bad(13);
  bad.input("x", {3, 4}).typed_input("p", onnx::TensorProto::INT64, {}).output("y");
  bad.node("SplitToSequence", {"x"}, {"rows"}).i("keepdims", 0);
  bad.node("SequenceAt", {"rows", "p"}, {"y"}, "pick");
  CHECK_THROWS_WITH(import_onnx(bad.save("sequence_at_runtime.onnx")), Catch::Contains("pick") && Catch::Contains("run time"));
}
