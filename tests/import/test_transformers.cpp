// What transformers need at the front door: token ids (integer inputs) into
// an embedding table gathered at run time, index chains of constants folded
// by rule, symbolic dims that name one size varying together (and sums such
// as "past + 1"), graphs valid only at some sizes, and tuning with integer inputs.
#include "support/tuning.hpp"
#include "import/onnx_test_util.hpp"

#include "core/cpu_features.hpp"
#include "core/model_impl.hpp"
#include "core/shape_plan.hpp"

#include <softneuro/session.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <set>

using namespace softneuro;
using namespace softneuro::test;

namespace {

Blob ids_blob(const Shape& s, const std::vector<int64_t>& v) {
  Blob b = Blob::allocate(s, DType::int64);
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(int64_t));  // an empty blob has no data
  return b;
}

/// ids [batch, sequence] (INT64) -> Gather(table [V, D]) -> y [batch, sequence, D].
OnnxModel embedding_model(int64_t vocab, int64_t dim) {
  OnnxModel m(17);
  m.named_input("ids", onnx::TensorProto::INT64, {"batch", "sequence"}).output("y");
  m.init("table", {vocab, dim}, random_values(static_cast<std::size_t>(vocab * dim), 3));
  m.node("Gather", {"table", "ids"}, {"y"}).i("axis", 0);
  return m;
}

std::vector<NamedBlob> run(Session& s, std::vector<NamedBlob> in) { return s.run(in); }
std::vector<NamedBlob> run(Session&& s, std::vector<NamedBlob> in) { return s.run(in); }

}  // namespace

TEST_CASE("transformers: token ids gather rows of an embedding table at run time, at any length", "[onnx][transformers]") {
  const int64_t V = 50, D = 6;
  const std::vector<float> table = random_values(static_cast<std::size_t>(V * D), 3);
  Model net = import_onnx(embedding_model(V, D).save("embedding.onnx"));
  REQUIRE(net.inputs().size() == 1);
  CHECK(net.inputs()[0].dtype == DType::int64);
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 1});
  CHECK(count_layers(net, "gather") == 1);
  Session session(net);
  for (int64_t L : {5, 128, 77}) {
    INFO("length " << L);
    std::vector<int64_t> ids(static_cast<std::size_t>(L));
    for (int64_t i = 0; i < L; ++i) ids[static_cast<std::size_t>(i)] = (i * 7 + 3) % V - (i % 5 == 0 ? V : 0);  // some negative
    auto out = run(session, {{"ids", ids_blob(Shape{1, L}, ids)}});
    REQUIRE(out[0].blob.shape() == Shape{1, L, D});
    const float* y = out[0].blob.data_as<float>();
    for (int64_t i = 0; i < L; ++i) {
      const int64_t row = (ids[static_cast<std::size_t>(i)] + V) % V;
      for (int64_t d = 0; d < D; ++d) REQUIRE(y[i * D + d] == table[static_cast<std::size_t>(row * D + d)]);
    }
  }
  // An id outside the table is an error naming the layer, never a read out of bounds.
  for (int64_t bad : {V, -V - 1, int64_t{1} << 20}) {
    INFO("id " << bad);
    CHECK_THROWS_WITH(run(session, {{"ids", ids_blob(Shape{1, 3}, {0, bad, 1})}}),
                      Catch::Contains("out of range") && Catch::Contains(std::to_string(bad)));
  }
}

TEST_CASE("transformers: GatherElements with run-time indices", "[onnx][transformers]") {
  OnnxModel m(13);
  m.input("x", {2, 4}).typed_input("i", onnx::TensorProto::INT64, {2, 3}).output("y");
  m.node("GatherElements", {"x", "i"}, {"y"}).i("axis", 1);
  Model net = import_onnx(m.save("gather_elements.onnx"));
  CHECK(count_layers(net, "gather_elements") == 1);
  const std::vector<float> x{0, 1, 2, 3, 10, 11, 12, 13};
  auto out = run(Session(net), {{"x", make_input(Shape{2, 4}, x)}, {"i", ids_blob(Shape{2, 3}, {3, 0, -1, 1, 1, 2})}});
  const float* y = out[0].blob.data_as<float>();
  CHECK(std::vector<float>(y, y + 6) == std::vector<float>{3, 0, 3, 11, 11, 12});
  CHECK_THROWS_WITH(run(Session(net), {{"x", make_input(Shape{2, 4}, x)}, {"i", ids_blob(Shape{2, 3}, {4, 0, 0, 0, 0, 0})}}),
                    Catch::Contains("out of range"));
}

TEST_CASE("transformers: GatherElements at rank 4, along a middle and the last axis, indices smaller than the data",
          "[onnx][transformers]") {
  // (A decoder's KV cache built so: [B, heads, rows, features] along the rows.)
  // Rows of one index (the cache's positions expanded over the features) are copied whole.
  const std::vector<int64_t> xd{2, 3, 5, 4}, id{2, 2, 4, 3};
  std::vector<float> x(120);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  for (const auto& [axis, rows_of_one] : {std::pair{2, false}, std::pair{3, false}, std::pair{2, true}}) {
    INFO("axis " << axis << (rows_of_one ? ", one index a row" : ""));
    const int64_t len = xd[static_cast<std::size_t>(axis)];
    std::vector<int64_t> idx(48);
    for (std::size_t i = 0; i < idx.size(); ++i)  // negatives too
      idx[i] = static_cast<int64_t>(((rows_of_one ? i / 3 : i) * 7 + 1) % (2 * len)) - len;
    OnnxModel m(13);
    m.input("x", xd).typed_input("i", onnx::TensorProto::INT64, id).output("y");
    m.node("GatherElements", {"x", "i"}, {"y"}).i("axis", axis);
    Model net = import_onnx(m.save("gather_elements4.onnx"));
    auto out = run(Session(net), {{"x", make_input(Shape{2, 3, 5, 4}, x)}, {"i", ids_blob(Shape{2, 2, 4, 3}, idx)}});
    const float* y = out[0].blob.data_as<float>();
    std::size_t p = 0;
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t c = 0; c < 4; ++c)
          for (int64_t d = 0; d < 3; ++d, ++p) {
            int64_t at[4] = {a, b, c, d};
            at[axis] = (idx[p] + len) % len;
            CHECK(y[p] == x[static_cast<std::size_t>(((at[0] * 3 + at[1]) * 5 + at[2]) * 4 + at[3])]);
          }
    // An index out of range in a later row (the rows are checked on every thread) is still an error naming it.
    idx[40] = len;
    CHECK_THROWS_WITH(run(Session(net), {{"x", make_input(Shape{2, 3, 5, 4}, x)}, {"i", ids_blob(Shape{2, 2, 4, 3}, idx)}}),
                      Catch::Contains("out of range") && Catch::Contains("index " + std::to_string(len) + " "));
  }
}

TEST_CASE("transformers: a chain of constants is folded at import whatever its operators (T5's buckets)",
          "[onnx][transformers]") {
  // buckets = min(int(log(pos + 1) * 3), 4) over constant positions, then a
  // Gather of a run-time tensor by them: Log, Min and the casts are not
  // index arithmetic the importer knows, yet their result is a constant.
  OnnxModel m(17);
  m.input("x", {1, 5, 3}).output("y");
  m.init_ints("pos", {4}, {0, 1, 5, 20});
  m.init("one", {}, {1.0f}).init("three", {}, {3.0f}).init_ints("cap", {}, {4});
  m.node("Cast", {"pos"}, {"posf"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Add", {"posf", "one"}, {"p1"});
  m.node("Log", {"p1"}, {"lg"});
  m.node("Mul", {"lg", "three"}, {"scaled"});
  m.node("Cast", {"scaled"}, {"bi"}).i("to", onnx::TensorProto::INT64);
  m.node("Min", {"bi", "cap"}, {"buckets"});
  m.node("Gather", {"x", "buckets"}, {"y"}).i("axis", 1);
  Model net = import_onnx(m.save("fold_by_rule.onnx"));
  CHECK(count_layers(net, "log") == 0);
  CHECK(count_layers(net, "gather") == 0);  // constant indices: a take of the runs
  const std::vector<float> x = random_values(15, 4);
  auto out = run(Session(net), {{"x", make_input(Shape{1, 5, 3}, x)}});
  REQUIRE(out[0].blob.shape() == Shape{1, 4, 3});
  const std::vector<int64_t> want{0, 2, 4, 4};  // min(trunc(log(p + 1) * 3), 4): 0, 2.08, 5.4, 9.1
  const float* y = out[0].blob.data_as<float>();
  for (std::size_t k = 0; k < want.size(); ++k)
    for (int64_t c = 0; c < 3; ++c) CHECK(y[k * 3 + static_cast<std::size_t>(c)] == x[static_cast<std::size_t>(want[k] * 3 + c)]);
}

TEST_CASE("transformers: inputs naming one sequence dim vary together, at any length", "[onnx][transformers][dynamic]") {
  // y = x * mask[..., None]: x [batch, sequence, 8] and mask [batch, sequence]
  // broadcast only where their sequence dims are equal.
  OnnxModel m(17);
  m.named_input("x", onnx::TensorProto::FLOAT, {"batch", "sequence", "8"});
  m.named_input("mask", onnx::TensorProto::INT64, {"batch", "sequence"}).output("y");
  m.init_ints("axes", {1}, {2});
  m.node("Unsqueeze", {"mask", "axes"}, {"m3"});
  m.node("Cast", {"m3"}, {"mf"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Mul", {"x", "mf"}, {"y"});
  Model net = import_onnx(m.save("shared_sequence.onnx"));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 1});
  CHECK(net.inputs()[1].dynamic_dims == std::vector<int>{0, 1});
  Session session(net);
  for (int64_t L : {128, 77, 3}) {
    INFO("length " << L);
    const std::vector<float> x = random_values(static_cast<std::size_t>(L * 8), 5);
    std::vector<int64_t> mask(static_cast<std::size_t>(L), 1);
    for (int64_t i = L - L / 4; i < L; ++i) mask[static_cast<std::size_t>(i)] = 0;  // padded
    auto out = run(session, {{"x", make_input(Shape{1, L, 8}, x)}, {"mask", ids_blob(Shape{1, L}, mask)}});
    REQUIRE(out[0].blob.shape() == Shape{1, L, 8});
    const float* y = out[0].blob.data_as<float>();
    for (int64_t i = 0; i < L * 8; ++i) REQUIRE(y[i] == x[static_cast<std::size_t>(i)] * float(mask[static_cast<std::size_t>(i / 8)]));
  }
  // Lengths that differ: an error naming the layer that needs them equal.
  CHECK_THROWS(run(session, {{"x", make_input(Shape{1, 5, 8}, random_values(40, 1))}, {"mask", ids_blob(Shape{1, 4}, {1, 1, 1, 1})}}));
}

TEST_CASE("transformers: a dim named past + 1 is a sum of sizes (a KV-cache decode step)", "[onnx][transformers][dynamic]") {
  // keys = concat(past [1, past, 4], new [1, 1, 4]) along 1, scaled by mask [1, past + 1].
  OnnxModel m(17);
  m.named_input("past", onnx::TensorProto::FLOAT, {"1", "past", "4"});
  m.named_input("new", onnx::TensorProto::FLOAT, {"1", "1", "4"});
  m.named_input("mask", onnx::TensorProto::INT64, {"1", "past + 1"}).output("y");
  m.init_ints("axes", {1}, {2});
  m.node("Concat", {"past", "new"}, {"keys"}).i("axis", 1);
  m.node("Unsqueeze", {"mask", "axes"}, {"m3"});
  m.node("Cast", {"m3"}, {"mf"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Mul", {"keys", "mf"}, {"y"});
  Model net = import_onnx(m.save("past_plus_one.onnx"));
  CHECK(net.inputs()[0].shape == Shape{1, 64, 4});
  CHECK(net.inputs()[2].shape == Shape{1, 65});
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{1});
  CHECK(net.inputs()[2].dynamic_dims == std::vector<int>{1});
  Session session(net);
  for (int64_t P : {1, 2, 100}) {
    INFO("past " << P);
    const std::vector<float> past = random_values(static_cast<std::size_t>(P * 4), 6), now = random_values(4, 7);
    std::vector<int64_t> mask(static_cast<std::size_t>(P + 1), 1);
    mask[0] = 0;
    auto out = run(session, {{"past", make_input(Shape{1, P, 4}, past)}, {"new", make_input(Shape{1, 1, 4}, now)},
                            {"mask", ids_blob(Shape{1, P + 1}, mask)}});
    REQUIRE(out[0].blob.shape() == Shape{1, P + 1, 4});
    const float* y = out[0].blob.data_as<float>();
    for (int64_t t = 0; t <= P; ++t)
      for (int64_t c = 0; c < 4; ++c) {
        const float k = t < P ? past[static_cast<std::size_t>(t * 4 + c)] : now[static_cast<std::size_t>(c)];
        REQUIRE(y[t * 4 + c] == k * float(mask[static_cast<std::size_t>(t)]));
      }
  }
}

namespace {
/// One attention head pair over a KV cache, as a decode step: keys and values
/// = concat(past, new) (outputs), scores = q k^T + positions * 0.01 (a value
/// computed from the cache length) + (1 - mask) * -1e4, softmax, times the
/// values, reshaped to [1, 8] by a target computed from the shapes.
OnnxModel decode_step_model() {
  OnnxModel m(17);
  m.named_input("past_k", onnx::TensorProto::FLOAT, {"1", "2", "past", "4"});
  m.named_input("past_v", onnx::TensorProto::FLOAT, {"1", "2", "past", "4"});
  m.named_input("q", onnx::TensorProto::FLOAT, {"1", "2", "1", "4"});
  m.named_input("k", onnx::TensorProto::FLOAT, {"1", "2", "1", "4"});
  m.named_input("v", onnx::TensorProto::FLOAT, {"1", "2", "1", "4"});
  m.named_input("mask", onnx::TensorProto::INT64, {"1", "past + 1"});
  m.output("y").output("present_k").output("present_v");
  m.init_ints("zero", {}, {0}).init_ints("one_i", {}, {1}).init_ints("i2", {}, {2}).init_ints("axes", {2}, {1, 2});
  m.init_ints("i0", {1}, {0}).init_ints("minus1", {1}, {-1});
  m.init("step", {}, {0.01f}).init("one", {}, {1.0f}).init("big", {}, {-1e4f});
  m.node("Concat", {"past_k", "k"}, {"present_k"}).i("axis", 2);
  m.node("Concat", {"past_v", "v"}, {"present_v"}).i("axis", 2);
  m.node("Transpose", {"present_k"}, {"kt"}).ints("perm", {0, 1, 3, 2});
  m.node("MatMul", {"q", "kt"}, {"s"});
  m.node("Shape", {"present_k"}, {"shape"});
  m.node("Gather", {"shape", "i2"}, {"len"});
  m.node("Range", {"zero", "len", "one_i"}, {"pos"});
  m.node("Cast", {"pos"}, {"posf"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Mul", {"posf", "step"}, {"bias"});
  m.node("Add", {"s", "bias"}, {"s2"});
  m.node("Unsqueeze", {"mask", "axes"}, {"m4"});
  m.node("Cast", {"m4"}, {"mf"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Sub", {"one", "mf"}, {"off"});
  m.node("Mul", {"off", "big"}, {"neg"});
  m.node("Add", {"s2", "neg"}, {"s3"});
  m.node("Softmax", {"s3"}, {"p"}).i("axis", -1);
  m.node("MatMul", {"p", "present_v"}, {"o"});
  m.node("Shape", {"o"}, {"oshape"});
  m.node("Gather", {"oshape", "i0"}, {"n"});
  m.node("Concat", {"n", "minus1"}, {"target"}).i("axis", 0);
  m.node("Reshape", {"o", "target"}, {"y"});
  return m;
}

std::vector<NamedBlob> decode_inputs(int64_t P, unsigned seed) {
  std::vector<int64_t> mask(static_cast<std::size_t>(P + 1), 1);
  mask[0] = 0;  // a padded first position
  return {{"past_k", make_input(Shape{1, 2, P, 4}, random_values(static_cast<std::size_t>(8 * P), seed))},
          {"past_v", make_input(Shape{1, 2, P, 4}, random_values(static_cast<std::size_t>(8 * P), seed + 1))},
          {"q", make_input(Shape{1, 2, 1, 4}, random_values(8, seed + 2))},
          {"k", make_input(Shape{1, 2, 1, 4}, random_values(8, seed + 3))},
          {"v", make_input(Shape{1, 2, 1, 4}, random_values(8, seed + 4))},
          {"mask", ids_blob(Shape{1, P + 1}, mask)}};
}
}  // namespace

TEST_CASE("transformers: an Expand by a constant target with 1s where the input has its sequence keeps the sequence "
          "dynamic (GPT-J's dynamo export)",
          "[onnx][transformers][dynamic]") {
  OnnxModel m(17);
  m.named_input("x", onnx::TensorProto::FLOAT, {"1", "sequence", "1", "4"}).output("y");
  m.init_ints("shape", {4}, {1, 1, 2, 1});
  m.node("Expand", {"x", "shape"}, {"y"});
  Model net = import_onnx(m.save("expand_constant_target.onnx"));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{1});
  Session session(net);
  for (int64_t S : {5, 70}) {
    INFO("sequence " << S);
    const auto x = random_values(static_cast<std::size_t>(S * 4), 3);
    auto out = run(session, {{"x", make_input(Shape{1, S, 1, 4}, x)}});
    REQUIRE(out[0].blob.shape() == Shape{1, S, 2, 4});
    for (int64_t t = 0; t < S; ++t)
      for (int64_t r = 0; r < 2; ++r)
        for (int64_t c = 0; c < 4; ++c)
          REQUIRE(out[0].blob.data_as<float>()[(t * 2 + r) * 4 + c] == x[static_cast<std::size_t>(t * 4 + c)]);
  }
}

TEST_CASE("transformers: a mask named past + 1 beside a symbolic sequence is read as past + sequence (Optimum's "
          "decoders), prompt and decode steps alike",
          "[onnx][transformers][dynamic]") {
  // As above, but the new tokens [1, sequence, 4]: the graph takes past + sequence, the name says past + 1.
  OnnxModel m(17);
  m.named_input("past", onnx::TensorProto::FLOAT, {"1", "past_sequence_length", "4"});
  m.named_input("new", onnx::TensorProto::FLOAT, {"1", "sequence_length", "4"});
  m.named_input("mask", onnx::TensorProto::INT64, {"1", "past_sequence_length + 1"}).output("y");
  m.init_ints("axes", {1}, {2});
  m.node("Concat", {"past", "new"}, {"keys"}).i("axis", 1);
  m.node("Unsqueeze", {"mask", "axes"}, {"m3"});
  m.node("Cast", {"m3"}, {"mf"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Mul", {"keys", "mf"}, {"y"});
  Model net = import_onnx(m.save("past_plus_sequence.onnx"));
  CHECK(net.inputs()[2].shape == Shape{1, 128});
  CHECK(net.inputs()[1].dynamic_dims == std::vector<int>{1});
  CHECK(net.inputs()[2].dynamic_dims == std::vector<int>{1});
  Session session(net);
  for (auto [P, S] : {std::pair<int64_t, int64_t>{0, 5}, {5, 1}, {6, 3}}) {
    INFO("past " << P << ", " << S << " new");
    const std::vector<float> past = random_values(static_cast<std::size_t>(P * 4), 6), now = random_values(static_cast<std::size_t>(S * 4), 7);
    std::vector<int64_t> mask(static_cast<std::size_t>(P + S), 1);
    mask[0] = 0;
    auto out = run(session, {{"past", make_input(Shape{1, P, 4}, past)}, {"new", make_input(Shape{1, S, 4}, now)},
                             {"mask", ids_blob(Shape{1, P + S}, mask)}});
    REQUIRE(out[0].blob.shape() == Shape{1, P + S, 4});
    const float* y = out[0].blob.data_as<float>();
    for (int64_t t = 0; t < P + S; ++t)
      for (int64_t c = 0; c < 4; ++c) {
        const float k = t < P ? past[static_cast<std::size_t>(t * 4 + c)] : now[static_cast<std::size_t>((t - P) * 4 + c)];
        REQUIRE(y[t * 4 + c] == k * float(mask[static_cast<std::size_t>(t)]));
      }
  }
}

TEST_CASE("transformers: a decode loop meeting a new cache length each step builds a plan per shape bucket",
          "[onnx][transformers][dynamic]") {
  Model net = import_onnx(decode_step_model().save("decode_step.onnx"));
  SessionOptions options;
  options.shape_cache = 2;
  Session session(net, options);
  std::size_t arena_at_64 = 0;
  for (int64_t P = 1; P <= 100; ++P) {
    INFO("cache length " << P);
    const auto in = decode_inputs(P, static_cast<unsigned>(P));
    auto got = run(session, in);
    // The same step in a session of its own: a plan made at this very shape.
    auto want = run(Session(net, options), in);
    REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
      REQUIRE(got[k].blob.shape() == want[k].blob.shape());
      const float* g = got[k].blob.data_as<float>();
      const float* w = want[k].blob.data_as<float>();
      for (int64_t i = 0; i < want[k].blob.numel(); ++i) REQUIRE(g[i] == Approx(w[i]).margin(1e-6));
    }
    REQUIRE(got[0].blob.shape() == Shape{1, 8});
    REQUIRE(got[1].blob.shape() == Shape{1, 2, P + 1, 4});
    if (P == 64) arena_at_64 = session.planned_bytes();
  }
  // The default shapes' plan at creation, then 100 lengths; the cache (past)
  // and mask (past + 1) dims change bucket at different steps: about two
  // plans per power of two, each re-bound after.
  const Session::PlanCounts counts = session.plan_counts();
  INFO("built " << counts.built << ", re-bound " << counts.rebound);
  CHECK(counts.built + counts.rebound == 101);
  CHECK(counts.built <= 16);
  CHECK(counts.rebound >= 84);
  CHECK(session.planned_bytes() < 2 * arena_at_64);

  // Back to a shorter length of a bucket it keeps: re-bound again, same values.
  const auto in = decode_inputs(99, 5);
  auto got = run(session, in);
  auto want = run(Session(net, options), in);
  for (int64_t i = 0; i < want[0].blob.numel(); ++i)
    CHECK(got[0].blob.data_as<float>()[i] == Approx(want[0].blob.data_as<float>()[i]).margin(1e-6));
}

TEST_CASE("transformers: a re-bound plan converts a constant computed from the shapes again where a step reads "
          "it in another layout", "[onnx][transformers][dynamic]") {
  // The position bias (a constant per cache length) added in nhwc (XNNPACK's
  // add, the aarch64 default): its nhwc copy is made once per plan, and again
  // at each re-bind (before, a re-bind was refused there: a plan per length).
  Model imported = import_onnx(decode_step_model().save("decode_step_nhwc.onnx"));
  core::Graph g = detail::impl_of(imported).graph;
  core::Tuning tuning = detail::impl_of(imported).tuning;
  std::string add;
  for (const auto& l : g.layers)
    if (l.type == "add" && std::find(l.inputs.begin(), l.inputs.end(), "bias") != l.inputs.end()) add = l.name;
  REQUIRE(!add.empty());
  tuning.routine_path.routines.push_back({add, "cpu:float32:nhwc/xnnpack", {}, 0, 0, {}});
  Model net = detail::make_model(g, tuning);
  SessionOptions options;
  options.shape_cache = 1;
  Session session(net, options);
  bool nhwc = false;
  for (const auto& l : session.layers()) nhwc = nhwc || (l.name == add && l.descriptor == "cpu:float32:nhwc/xnnpack");
  if (!nhwc) return;  // (no XNNPACK add here)
  for (int64_t P = 5; P <= 40; ++P) {
    INFO("cache length " << P);
    const auto in = decode_inputs(P, static_cast<unsigned>(P));
    auto got = run(session, in);
    auto want = run(Session(net, options), in);
    for (std::size_t k = 0; k < got.size(); ++k)
      for (int64_t i = 0; i < want[k].blob.numel(); ++i)
        REQUIRE(got[k].blob.data_as<float>()[i] == Approx(want[k].blob.data_as<float>()[i]).margin(1e-6));
  }
  INFO("built " << session.plan_counts().built << ", re-bound " << session.plan_counts().rebound);
  CHECK(session.plan_counts().rebound >= 25);  // 36 lengths; a plan at each bucket change of either dim
}

TEST_CASE("transformers: specialising again at a new length gives what specialising there gives",
          "[onnx][transformers][dynamic]") {
  Model net = import_onnx(decode_step_model().save("decode_step_respecialize.onnx"));
  const core::Graph& g = detail::impl_of(net).graph;
  auto inputs_at = [](int64_t P) {
    return std::map<std::string, Shape>{{"past_k", Shape{1, 2, P, 4}}, {"past_v", Shape{1, 2, P, 4}},
                                        {"q", Shape{1, 2, 1, 4}},      {"k", Shape{1, 2, 1, 4}},
                                        {"v", Shape{1, 2, 1, 4}},      {"mask", Shape{1, P + 1}}};
  };
  core::SpecializeState state;
  core::Graph before = core::specialize(g, inputs_at(5), nullptr, &state);
  for (int64_t P : {6, 7, 8, 13, 2, 40, 40}) {
    INFO("cache length " << P);
    const auto changes = core::respecialize(g, inputs_at(P), state);
    REQUIRE(changes);
    std::map<std::string, Shape> want;
    core::Graph at = core::specialize(g, inputs_at(P), &want);
    for (const auto& [name, shape] : want) REQUIRE(state.shapes.at(name) == shape);
    REQUIRE(at.layers.size() == before.layers.size());
    for (std::size_t i = 0; i < at.layers.size(); ++i) {
      const Layer& now = at.layers[i];
      const Layer& was = before.layers[i];
      REQUIRE(now.name == was.name);
      if (now.type == "constant") {
        // Its value: the change named, else the one it had.
        auto c = changes->constants.find(now.name);
        const Blob& expect = c != changes->constants.end() ? c->second : was.weight("value");
        const Blob& got = now.weight("value");
        REQUIRE(got.shape() == expect.shape());
        REQUIRE(std::memcmp(got.data(), expect.data(), got.byte_size()) == 0);
      } else if (auto p = changes->params.find(now.name); p != changes->params.end()) {
        REQUIRE(p->second == now.params);
      } else {
        REQUIRE(now.params == was.params);
      }
    }
    before = std::move(at);
  }
}

TEST_CASE("transformers: a plan whose changing step is fused with another is built again, not re-bound",
          "[onnx][transformers][dynamic]") {
  // conv 1x1 -> depthwise conv: oneDNN runs them as one step where it can
  // (and its input's reorder with the first); the spatial dims are dynamic.
  OnnxModel m(13);
  m.input("x", {1, 8, -1, -1}).output("y");
  m.init("w1", {16, 8, 1, 1}, random_values(128, 3)).init("w2", {16, 1, 3, 3}, random_values(144, 4));
  m.node("Conv", {"x", "w1"}, {"a"});
  m.node("Relu", {"a"}, {"r"});
  m.node("Conv", {"r", "w2"}, {"y"}).ints("pads", {1, 1, 1, 1}).i("group", 16);
  Model net = import_onnx(m.save("fused_pair.onnx"));
  SessionOptions options;
  options.shape_cache = 1;
  Session session(net, options);
  for (int64_t W : {9, 10, 11, 12, 13}) {
    INFO("width " << W);
    std::vector<NamedBlob> in{{"x", make_input(Shape{1, 8, 6, W}, random_values(static_cast<std::size_t>(48 * W), 5))}};
    auto got = run(session, in);
    auto want = run(Session(net, options), in);
    REQUIRE(got[0].blob.shape() == want[0].blob.shape());
    for (int64_t i = 0; i < want[0].blob.numel(); ++i)
      REQUIRE(got[0].blob.data_as<float>()[i] == Approx(want[0].blob.data_as<float>()[i]).margin(1e-5));
  }
  const Session::PlanCounts counts = session.plan_counts();
  CHECK(counts.built + counts.rebound == 6);  // the default shapes' at creation too
}

TEST_CASE("transformers: an embedding ONNX Runtime quantised (int8 rows gathered, then dequantised) keeps its "
          "table in int8", "[onnx][transformers]") {
  // quantize_dynamic's form: Gather(int8 table, ids) -> DequantizeLinear(scale, zero point).
  for (const bool is_signed : {true, false}) {
    INFO((is_signed ? "int8" : "uint8"));
    const int type = is_signed ? onnx::TensorProto::INT8 : onnx::TensorProto::UINT8;
    const int64_t zp = is_signed ? 3 : 131;
    std::vector<int64_t> table(10 * 6);
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = is_signed ? int64_t(i * 37 % 256) - 128 : int64_t(i * 53 % 256);
    OnnxModel m(17);
    m.named_input("ids", onnx::TensorProto::INT64, {"1", "sequence"}).output("y");
    m.init_typed("table", type, {10, 6}, table).init("scale", {}, {0.0125f}).init_typed("zp", type, {}, {zp});
    m.node("Gather", {"table", "ids"}, {"q"});
    m.node("DequantizeLinear", {"q", "scale", "zp"}, {"y"});
    const std::string onnx_path = m.save(is_signed ? "int8_embedding.onnx" : "uint8_embedding.onnx");
    Model net = import_onnx(onnx_path);
    // One gather layer, its table the integers with the scale and zero point.
    const core::Graph& g = detail::impl_of(net).graph;
    int gathers = 0;
    for (const auto& l : g.layers) {
      if (l.type == "sub" || l.type == "mul") FAIL("the dequantisation was not folded: " << l.name);
      if (l.type != "gather") continue;
      ++gathers;
      const Blob& t = l.weight("table");
      CHECK(t.dtype() == (is_signed ? DType::qint8 : DType::quint8));
      CHECK(t.quant().scales == std::vector<float>{0.0125f});
      CHECK(t.quant().zero_points == std::vector<int32_t>{static_cast<int32_t>(zp)});
    }
    CHECK(gathers == 1);
    // Through a .dnn file: still int8 in memory.
    const std::string dnn = test_dir() + (is_signed ? "/int8_embedding.dnn" : "/uint8_embedding.dnn");
    net.save(dnn);
    Model loaded = Model::load(dnn);
    for (const auto& l : detail::impl_of(loaded).graph.layers)
      if (l.type == "gather") CHECK(l.weight("table").dtype() == (is_signed ? DType::qint8 : DType::quint8));
    Session session(loaded);
    for (int64_t L : {5, 12}) {
      std::vector<int64_t> ids(static_cast<std::size_t>(L));
      for (int64_t i = 0; i < L; ++i) ids[static_cast<std::size_t>(i)] = (i * 7 + 3) % 10;
      auto out = run(session, {{"ids", ids_blob(Shape{1, L}, ids)}});
      REQUIRE(out[0].blob.shape() == Shape{1, L, 6});
      const float* y = out[0].blob.data_as<float>();
      for (int64_t i = 0; i < L; ++i)
        for (int64_t c = 0; c < 6; ++c) {
          const auto q = static_cast<float>(table[static_cast<std::size_t>(ids[static_cast<std::size_t>(i)] * 6 + c)]);
          REQUIRE(y[i * 6 + c] == (q - static_cast<float>(zp)) * 0.0125f);  // as DequantizeLinear computes it
        }
    }
    // An id past the table: an error naming the layer, nothing read out of bounds.
    CHECK_THROWS_WITH(run(session, {{"ids", ids_blob(Shape{1, 2}, {1, 10})}}), Catch::Contains("out of range"));
    // The default choice where its vector kernels run (x86 at SSE4.1: cpu/ref;
    // the generated cases check one against the other).
#if defined(__aarch64__)
    const bool vector_kernels = true;
#else
    const bool vector_kernels = core::cpu_features().avx2_fma();
#endif
    for (const auto& l : session.layers())
      if (l.type == "gather") CHECK(l.descriptor == (vector_kernels ? "cpu/vec" : "cpu/ref"));
  }
}

TEST_CASE("transformers: an all-dynamic input whose graph translates only at some sizes imports with no flags",
          "[onnx][transformers][dynamic]") {
  // x [?, 3, ?, ?] reshaped to [N, 144, -1]: 3*H*W must divide by 144, which
  // 64x64 (the default size) does not; 48x48 does, and then any width does.
  OnnxModel m(13);
  m.input("x", {-1, 3, -1, -1}).output("y");
  m.init_ints("target", {3}, {0, 144, -1});
  m.node("Reshape", {"x", "target"}, {"r"});
  m.node("Relu", {"r"}, {"y"});
  Model net = import_onnx(m.save("needs_48.onnx"));
  CHECK(net.inputs()[0].shape == Shape{1, 3, 48, 48});
  Session session(net);
  for (int64_t W : {160, 320, 640}) {
    INFO("width " << W);
    const std::vector<float> x = random_values(static_cast<std::size_t>(3 * 48 * W), 8);
    auto out = run(session, {{"x", make_input(Shape{1, 3, 48, W}, x)}});
    REQUIRE(out[0].blob.shape() == Shape{1, 144, W});
    const float* y = out[0].blob.data_as<float>();
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == std::max(0.0f, x[i]));
  }
  // At a height it does not take: an error naming the layer that needs it.
  CHECK_THROWS_WITH(run(session, {{"x", make_input(Shape{1, 3, 64, 64}, random_values(3 * 64 * 64, 9))}}),
                    Catch::Contains("Reshape") && Catch::Contains("[1,3,64,64]"));
}

TEST_CASE("transformers: tune takes integer inputs, with token ids below the table's size", "[onnx][transformers][tune]") {
  // ids -> embedding -> dense -> y; the mask scales the rows.
  OnnxModel m(17);
  m.named_input("ids", onnx::TensorProto::INT64, {"1", "sequence"});
  m.named_input("mask", onnx::TensorProto::INT64, {"1", "sequence"}).output("y");
  m.init("table", {30, 8}, random_values(240, 9)).init("w", {8, 4}, random_values(32, 10)).init_ints("axes", {1}, {2});
  m.node("Gather", {"table", "ids"}, {"e"});
  m.node("MatMul", {"e", "w"}, {"h"});
  m.node("Unsqueeze", {"mask", "axes"}, {"m3"});
  m.node("Cast", {"m3"}, {"mf"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Mul", {"h", "mf"}, {"y"});
  Model net = import_onnx(m.save("tune_ints.onnx"));
  Model untuned = net;
  TuneOptions o;
  o.cache_dir = "-";
  o.unit_budget_ms = 1;
  o.integrated_runs = 2;
  tune_and_keep(net, o);
  std::vector<int64_t> ids{1, 29, 0, 7, 3}, mask{1, 1, 1, 0, 0};
  std::vector<NamedBlob> in{{"ids", ids_blob(Shape{1, 5}, ids)}, {"mask", ids_blob(Shape{1, 5}, mask)}};
  auto got = Session(net).run(in);
  auto want = Session(untuned).run(in);
  REQUIRE(got[0].blob.shape() == Shape{1, 5, 4});
  CHECK(max_abs_diff(std::vector<float>(got[0].blob.data_as<float>(), got[0].blob.data_as<float>() + 20),
                     std::vector<float>(want[0].blob.data_as<float>(), want[0].blob.data_as<float>() + 20)) < 1e-5);
}

TEST_CASE("transformers: synthetic inputs give token ids below the table's size and a mask of ones", "[onnx][transformers]") {
  // What `softneuro run` feeds a model without --input, as tuning without samples draws them.
  OnnxModel m(17);
  m.named_input("ids", onnx::TensorProto::INT64, {"1", "7"});
  m.named_input("mask", onnx::TensorProto::INT64, {"1", "7"}).output("y");
  m.init("table", {30, 8}, random_values(240, 12)).init_ints("axes", {1}, {2});
  m.node("Gather", {"table", "ids"}, {"e"});
  m.node("Unsqueeze", {"mask", "axes"}, {"m3"});
  m.node("Cast", {"m3"}, {"mf"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Mul", {"e", "mf"}, {"y"});
  const Model net = import_onnx(m.save("synthetic_ids.onnx"));
  for (unsigned seed : {0u, 1u}) {
    std::set<int64_t> seen;
    for (const TensorInfo& t : net.inputs()) {
      const Blob b = synthetic_input(net, t, seed);
      REQUIRE(b.dtype() == DType::int64);
      REQUIRE(b.shape() == Shape{1, 7});
      for (int64_t i = 0; i < 7; ++i) {
        const int64_t v = b.data_as<int64_t>()[i];
        if (t.name == "ids") {
          CHECK((v >= 0 && v < 30));
          seen.insert(v);
        } else {
          CHECK(v == 1);
        }
      }
    }
    CHECK(seen.size() > 1);
  }
}

TEST_CASE("transformers: index math on the sequence length is computed per length by the reference routines",
          "[onnx][transformers][dynamic]") {
  // T5's buckets from the length: trunc(log(p + 1) / log(16) * 8) for p in
  // Range(length), gathering rows of a table. Truncation turns any
  // approximation of the log into another row; computed per length at the
  // session's shapes, exactly (a layer each run before, on oneDNN's log).
  OnnxModel m(17);
  m.named_input("x", onnx::TensorProto::FLOAT, {"1", "sequence"}).output("y");
  m.init("table", {40, 2}, random_values(80, 11));
  m.init_ints("zero", {}, {0}).init_ints("one_i", {}, {1}).init_ints("i1", {}, {1});
  m.init("one", {}, {1.0f}).init("lg16", {}, {std::log(16.0f)}).init("eight", {}, {8.0f});
  m.node("Shape", {"x"}, {"s"});
  m.node("Gather", {"s", "i1"}, {"len"});
  m.node("Range", {"zero", "len", "one_i"}, {"pos"});
  m.node("Cast", {"pos"}, {"posf"}).i("to", onnx::TensorProto::FLOAT);
  m.node("Add", {"posf", "one"}, {"p1"});
  m.node("Log", {"p1"}, {"lg"});
  m.node("Div", {"lg", "lg16"}, {"ratio"});
  m.node("Mul", {"ratio", "eight"}, {"scaled"});
  m.node("Cast", {"scaled"}, {"bucket"}).i("to", onnx::TensorProto::INT64);
  m.node("Gather", {"table", "bucket"}, {"rows"});
  m.node("Unsqueeze", {"rows", "zero_axes"}, {"y"});
  m.init_ints("zero_axes", {1}, {0});
  Model net = import_onnx(m.save("buckets_per_length.onnx"));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{1});
  const std::vector<float> table = random_values(80, 11);
  Session session(net);
  for (int64_t L : {64, 16, 300}) {
    INFO("length " << L);
    auto out = run(session, {{"x", make_input(Shape{1, L}, std::vector<float>(static_cast<std::size_t>(L), 0.0f))}});
    REQUIRE(out[0].blob.shape() == Shape{1, L, 2});
    const float* y = out[0].blob.data_as<float>();
    for (int64_t p = 0; p < L; ++p) {
      const auto b = static_cast<int64_t>(std::log(static_cast<float>(p) + 1.0f) / std::log(16.0f) * 8.0f);
      INFO("position " << p << " bucket " << b);
      REQUIRE(y[p * 2] == table[static_cast<std::size_t>(b * 2)]);
    }
  }
  for (const auto& l : session.layers()) CHECK(l.type != "log");
}

TEST_CASE("transformers: run-time int64 narrowed to int32 is the same numbers (RoBERTa's positions)", "[onnx][transformers]") {
  OnnxModel m(17);
  m.named_input("ids", onnx::TensorProto::INT64, {"1", "sequence"}).typed_output("y", onnx::TensorProto::INT32);
  m.init_ints("axis", {}, {1});
  m.node("CumSum", {"ids", "axis"}, {"c"});
  m.node("Cast", {"c"}, {"y"}).i("to", onnx::TensorProto::INT32);
  Model net = import_onnx(m.save("narrow_cast.onnx"));
  auto out = run(Session(net), {{"ids", ids_blob(Shape{1, 4}, {1, 1, 0, 5})}});
  REQUIRE(out[0].blob.dtype() == DType::int32);
  const int32_t* y = out[0].blob.data_as<int32_t>();
  CHECK(std::vector<int32_t>(y, y + 4) == std::vector<int32_t>{1, 2, 2, 7});
}

TEST_CASE("transformers: a dim_param of '?' names no size (each such dim varies alone)", "[onnx][transformers][dynamic]") {
  // PaddleOCR writes [p2o.DynamicDimension.0, 3, ?, p2o.DynamicDimension.1]:
  // two '?' dims are not one size (one batch-sized dim made both 1).
  OnnxModel m(13);
  m.named_input("a", onnx::TensorProto::FLOAT, {"?", "?"}).named_input("b", onnx::TensorProto::FLOAT, {"?", "1"}).output("y");
  m.node("Add", {"a", "b"}, {"y"});
  Model net = import_onnx(m.save("question_marks.onnx"));
  CHECK(net.inputs()[0].shape == Shape{1, 64});
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 1});
}

TEST_CASE("transformers: opset-23 Attention with a boolean mask computed at run time", "[onnx][transformers]") {
  // The mask from an int64 padding mask (x != 0), as the dynamo exporter
  // writes BERT's: refused by the importer's integer gate before; it equals
  // the same attention with the additive mask (0 kept, -1e9 masked).
  auto model = [](bool boolean) {
    OnnxModel m(23);
    m.input("q", {1, 2, 3, 4}).input("k", {1, 2, 5, 4}).input("v", {1, 2, 5, 4});
    m.typed_input("keep", onnx::TensorProto::INT64, {1, 1, 1, 5}).output("y");
    m.init_ints("zero", {}, {0}).init("big", {}, {-1e9f}).init("nil", {}, {0.0f});
    m.node("Equal", {"keep", "zero"}, {"pad"});
    m.node("Not", {"pad"}, {"attend"});
    if (boolean) {
      m.node("Attention", {"q", "k", "v", "attend"}, {"y"});
    } else {
      m.node("Where", {"attend", "nil", "big"}, {"bias"});
      m.node("Attention", {"q", "k", "v", "bias"}, {"y"});
    }
    return m;
  };
  const std::vector<NamedBlob> in{{"q", make_input(Shape{1, 2, 3, 4}, random_values(24, 1))},
                                  {"k", make_input(Shape{1, 2, 5, 4}, random_values(40, 2))},
                                  {"v", make_input(Shape{1, 2, 5, 4}, random_values(40, 3))},
                                  {"keep", ids_blob(Shape{1, 1, 1, 5}, {1, 1, 0, 1, 0})}};
  auto got = Session(import_onnx(model(true).save("attention_bool.onnx"))).run(in);
  auto want = Session(import_onnx(model(false).save("attention_additive.onnx"))).run(in);
  REQUIRE(got[0].blob.shape() == Shape{1, 2, 3, 4});
  const float *g = got[0].blob.data_as<float>(), *w = want[0].blob.data_as<float>();
  for (int i = 0; i < 24; ++i) CHECK(g[i] == Approx(w[i]).margin(1e-6));
}

TEST_CASE("transformers: an int64 output of a model with shape computations (positions from the length)",
          "[onnx][transformers][dynamic]") {
  // position ids = Range(0, length) + ids * 0: an int64 output of a graph
  // specialised per length (specialize() dropped output_dtypes: every run failed).
  OnnxModel m(17);
  m.named_input("ids", onnx::TensorProto::INT64, {"1", "sequence"}).typed_output("pos", onnx::TensorProto::INT64);
  m.init_ints("zero", {}, {0}).init_ints("one", {}, {1}).init_ints("i1", {}, {1});
  m.node("Shape", {"ids"}, {"s"});
  m.node("Gather", {"s", "i1"}, {"len"});
  m.node("Range", {"zero", "len", "one"}, {"r"});
  m.node("Mul", {"ids", "zero"}, {"z"});
  m.node("Add", {"z", "r"}, {"pos"});
  Model net = import_onnx(m.save("int64_positions.onnx"));
  Session session(net);
  for (int64_t L : {3, 9}) {
    std::vector<int64_t> ids(static_cast<std::size_t>(L), 4);
    auto out = run(session, {{"ids", ids_blob(Shape{1, L}, ids)}});
    REQUIRE(out[0].blob.dtype() == DType::int64);
    for (int64_t i = 0; i < L; ++i) CHECK(out[0].blob.data_as<int64_t>()[i] == i);
  }
}

TEST_CASE("transformers: GatherND with run-time indices, empty batches included", "[onnx][transformers]") {
  OnnxModel m(13);
  m.named_input("x", onnx::TensorProto::FLOAT, {"b", "5", "3"});
  m.named_input("i", onnx::TensorProto::INT64, {"b", "2", "1"}).output("y");
  m.node("GatherND", {"x", "i"}, {"y"}).i("batch_dims", 1);
  Model net = import_onnx(m.save("gather_nd_runtime.onnx"));
  CHECK(count_layers(net, "gather_nd") == 1);
  Session session(net);
  const std::vector<float> x = random_values(30, 12);
  auto out = run(session, {{"x", make_input(Shape{2, 5, 3}, x)}, {"i", ids_blob(Shape{2, 2, 1}, {4, 0, -1, 2})}});
  REQUIRE(out[0].blob.shape() == Shape{2, 2, 3});
  const float* y = out[0].blob.data_as<float>();
  const int rows[4] = {4, 0, 5 + 4, 5 + 2};  // batch 1's -1 is its row 4
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) CHECK(y[r * 3 + c] == x[static_cast<std::size_t>(rows[r] * 3 + c)]);
  // A batch of none: an empty output (a division by the batch count before).
  auto empty = run(session, {{"x", make_input(Shape{0, 5, 3}, {})}, {"i", ids_blob(Shape{0, 2, 1}, {})}});
  CHECK(empty[0].blob.shape() == Shape{0, 2, 3});
}

TEST_CASE("transformers: an Expand to [batch, sequence] keeps the batch dynamic (BERT's token-type ids)",
          "[onnx][transformers][dynamic]") {
  // y = expand(types [1, sequence], [batch, sequence] from ids' shape): at
  // batch 1 an identity, at 2 an expand; the graphs differed and the batch
  // stayed 1 (every BERT export).
  OnnxModel m(17);
  m.named_input("ids", onnx::TensorProto::INT64, {"batch", "sequence"});
  m.named_input("types", onnx::TensorProto::INT64, {"1", "sequence"}).typed_output("y", onnx::TensorProto::INT64);
  m.init_ints("i0", {1}, {0}).init_ints("zero", {}, {0}).init_ints("one", {}, {1});
  m.node("Shape", {"ids"}, {"s"});
  m.node("Gather", {"s", "zero"}, {"b"});
  m.node("Gather", {"s", "one"}, {"l"});
  m.node("Unsqueeze", {"b", "i0"}, {"b1"});
  m.node("Unsqueeze", {"l", "i0"}, {"l1"});
  m.node("Concat", {"b1", "l1"}, {"target"}).i("axis", 0);
  m.node("Expand", {"types", "target"}, {"y"});
  Model net = import_onnx(m.save("expand_batch.onnx"));
  CHECK(net.inputs()[0].dynamic_dims == std::vector<int>{0, 1});
  Session session(net);
  for (const auto& [B, L] : std::vector<std::pair<int64_t, int64_t>>{{3, 5}, {1, 4}, {2, 7}}) {
    std::vector<int64_t> types(static_cast<std::size_t>(L));
    for (std::size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int64_t>(i * 3 % 11);
    auto out = run(session, {{"ids", ids_blob(Shape{B, L}, std::vector<int64_t>(static_cast<std::size_t>(B * L), 1))},
                             {"types", ids_blob(Shape{1, L}, types)}});
    REQUIRE(out[0].blob.shape() == Shape{B, L});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < L; ++t) CHECK(out[0].blob.data_as<int64_t>()[b * L + t] == types[static_cast<std::size_t>(t)]);
  }
}
