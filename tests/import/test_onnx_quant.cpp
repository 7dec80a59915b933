// Quantised ONNX: QDQ pairs, QLinearConv, DynamicQuantizeLinear with
// MatMulInteger and ConvInteger, against ONNX Runtime 1.32 (values below);
// and a QDQ model tuned onto the qint8 routines with its own scales.
#include "support/tuning.hpp"
#include "core/cpu_features.hpp"
#include "core/model_impl.hpp"
#include "core/plan.hpp"
#include "core/registry.hpp"
#include "core/weight_quant.hpp"
#include "import/onnx_test_util.hpp"

#include <softneuro/calibrate.hpp>
#include <softneuro/tune.hpp>

#include <catch2/catch.hpp>

#include <limits>
#include <optional>

#include <algorithm>
#include <cmath>

using namespace softneuro;
using namespace softneuro::test;

namespace {

using T = onnx::TensorProto;

std::vector<int64_t> ints(std::size_t n, int mod, int shift) {
  std::vector<int64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>(i) % mod - shift;
  return v;
}

/// x [1,3,5,5] quantised (0.02, 128 uint8); weights int8 [4,3,3,3] per output channel; int32 bias; y (0.03, 0 uint8).
void conv_initializers(OnnxModel& m) {
  m.init("xs", {}, {0.02f}).init_typed("xz", T::UINT8, {}, {128});
  m.init_typed("w", T::INT8, {4, 3, 3, 3}, ints(108, 11, 5));
  m.init("ws", {4}, {0.05f, 0.04f, 0.03f, 0.06f}).init_typed("wz", T::INT8, {4}, {0, 0, 0, 0});
  m.init_typed("b", T::INT32, {4}, {100, -50, 0, 25});
  m.init("bs", {4}, {0.05f * 0.02f, 0.04f * 0.02f, 0.03f * 0.02f, 0.06f * 0.02f}).init_typed("bz", T::INT32, {4}, {0, 0, 0, 0});
  m.init("ys", {}, {0.03f}).init_typed("yz", T::UINT8, {}, {0});
}

OnnxModel qdq_conv() {
  OnnxModel m(13);
  m.input("x", {1, 3, 5, 5}).output("y");
  conv_initializers(m);
  m.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  m.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  m.node("DequantizeLinear", {"w", "ws", "wz"}, {"wd"}).i("axis", 0);
  m.node("DequantizeLinear", {"b", "bs", "bz"}, {"bd"}).i("axis", 0);
  m.node("Conv", {"xd", "wd", "bd"}, {"c"}).ints("pads", {1, 1, 1, 1});
  m.node("QuantizeLinear", {"c", "ys", "yz"}, {"cq"});
  m.node("DequantizeLinear", {"cq", "ys", "yz"}, {"y"});
  return m;
}

/// qdq_conv, then Flatten -> Q/DQ (y's scale) -> Gemm (int8 weights) -> Q/DQ to
/// z [1,3], as quantize_static writes a classifier's head; outputs z, and y too
/// where `with_y`.
OnnxModel qdq_conv_gemm(bool with_y) {
  OnnxModel m = qdq_conv();
  if (!with_y) m.graph().clear_output();
  m.output("z");
  m.init_typed("w2", T::INT8, {3, 100}, ints(300, 9, 4)).init("w2s", {3}, {0.02f, 0.03f, 0.04f});
  m.init_typed("w2z", T::INT8, {3}, {0, 0, 0});
  m.init("zs", {}, {0.05f}).init_typed("zz", T::UINT8, {}, {128});
  m.node("Flatten", {"y"}, {"f"}).i("axis", 1);
  m.node("QuantizeLinear", {"f", "ys", "yz"}, {"fq"});
  m.node("DequantizeLinear", {"fq", "ys", "yz"}, {"fd"});
  m.node("DequantizeLinear", {"w2", "w2s", "w2z"}, {"w2d"}).i("axis", 0);
  m.node("Gemm", {"fd", "w2d"}, {"g"}).i("transB", 1);
  m.node("QuantizeLinear", {"g", "zs", "zz"}, {"gq"});
  m.node("DequantizeLinear", {"gq", "zs", "zz"}, {"z"});
  return m;
}

const std::vector<float> kQdq = {0.0f, 0.69f, 1.6799999f, 0.87f, 0.41999999f, 2.01f, 1.26f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.23999999f, 0.81f, 0.65999997f, 0.89999998f, 1.92f, 0.89999998f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.32999998f, 1.77f, 1.05f, 0.41999999f, 0.65999997f, 0.20999999f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.26999998f, 0.69f, 0.75f, 0.81f, 0.47999999f, 0.12f, 0.89999998f, 0.75f, 0.29999998f, 0.0f, 0.47999999f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.089999996f, 0.63f, 0.29999998f, 0.53999996f, 0.81f, 0.75f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.12f, 0.0f, 0.26999998f, 2.04f, 2.8799999f, 1.02f, 0.38999999f, 0.26999998f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.81f, 1.4399999f, 1.3199999f, 1.23f, 0.65999997f};
const std::vector<float> kQLinearConv = {0.0f, 0.69f, 1.6799999f, 0.87f, 0.41999999f, 2.01f, 1.26f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.23999999f, 0.81f, 0.65999997f, 0.89999998f, 1.92f, 0.89999998f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.32999998f, 1.77f, 1.05f, 0.41999999f, 0.65999997f, 0.20999999f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.26999998f, 0.69f, 0.75f, 0.81f, 0.47999999f, 0.12f, 0.89999998f, 0.75f, 0.29999998f, 0.0f, 0.47999999f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.089999996f, 0.63f, 0.29999998f, 0.53999996f, 0.81f, 0.75f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.12f, 0.0f, 0.26999998f, 2.04f, 2.8799999f, 1.02f, 0.38999999f, 0.26999998f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.81f, 1.4399999f, 1.3199999f, 1.23f, 0.65999997f};
const std::vector<float> kDynamicMatMul = {0.19764708f, 0.36235297f, 0.028988238f, -0.05534118f, -0.586353f, -0.13901177f, -0.1956706f, -0.25232944f};
const std::vector<float> kDynamicConv = {0.020235296f, -0.28988239f, -0.31858826f, 0.041411769f, -0.021176472f, 0.25976473f, 0.15058824f, 0.24941179f, 0.47952944f, 0.09882354f, 0.00094117655f, 0.00047058827f, -0.29129413f, -0.058823533f, -0.48988238f, 0.0014117649f, -0.018352943f, 0.07858824f, 0.18117648f, 0.35105884f, -0.1604706f, 0.0098823542f, -0.00094117655f, -0.0098823542f, 0.090352952f, -0.38023531f, -0.04941177f, 0.20941179f, -0.18211766f, -0.039058827f, 0.35105884f, -0.25176471f, 0.25082356f, -0.031058826f, -0.33976474f, 0.15058824f, 0.29788238f, 0.15011767f, -0.25929415f, -0.0014117649f, -0.17882355f, -0.32141179f, -0.077647068f, 0.29129413f, -0.051764712f, 0.14917648f, 0.069647066f, 0.089411773f, 0.11058825f, 0.039058827f};

std::vector<float> x_values() { return pattern(75, 13, 6, 5); }

/// Every output of `got` (the untuned int8 default's, on `in`) equals the
/// float32-only session's: the model's QDQ arithmetic, exactly.
void check_equals_float_path(const Model& net, const std::vector<NamedBlob>& got, const std::vector<NamedBlob>& in) {
  SessionOptions floats;
  floats.schemas = {"cpu:float32:*"};
  const auto want = Session(net, floats).run(in);
  for (std::size_t k = 0; k < got.size(); ++k)
    for (int64_t i = 0; i < got[k].blob.numel(); ++i)
      CHECK(got[k].blob.data_as<float>()[i] == Approx(want[k].blob.data_as<float>()[i]).margin(1e-6));
}

/// The untuned default's steps: whether the layers of `type` run on qint8
/// routines, how many quantising or dequantising adapts there are (not NHWC
/// reorders), and the steps listed for a failure's message.
struct DefaultSteps {
  bool int8 = false;
  int adapts = 0;
  std::string listing;
};
DefaultSteps default_steps(const Session& s, const std::string& type) {
  DefaultSteps d;
  for (const auto& l : s.layers()) {
    d.listing += l.name + " " + l.type + " " + l.descriptor + "\n";
    if (l.type == type) d.int8 = l.descriptor.starts_with("cpu:qint8");
    if (l.type == "adapt" && l.descriptor.find("quantize") != std::string::npos) ++d.adapts;
  }
  return d;
}

/// qdq_conv() whose net output is `z` instead of y: tests add what reads y.
OnnxModel qdq_conv_to_z() {
  OnnxModel m = qdq_conv();
  m.graph().clear_output();
  m.output("z");
  return m;
}

/// A Q/DQ pair `from` -> `to` at y's quantisation (ys, yz).
void qdq_at_y(OnnxModel& m, const std::string& from, const std::string& to) {
  m.node("QuantizeLinear", {from, "ys", "yz"}, {from + "q"});
  m.node("DequantizeLinear", {from + "q", "ys", "yz"}, {to});
}

/// `m` imported: its untuned default runs the `type` layers on qint8 routines
/// with `adapts` quantising or dequantising adapts, and equals the float path
/// on x_values(); its outputs.
std::vector<NamedBlob> check_int8_default(const OnnxModel& m, const std::string& file, const std::string& type, int adapts) {
  Model net = import_onnx(m.save(file));
  Session untuned(net);
  const DefaultSteps steps = default_steps(untuned, type);
  INFO(steps.listing);
  CHECK(steps.int8);
  CHECK(steps.adapts == adapts);
  std::vector<NamedBlob> in{{"x", make_input(Shape{1, 3, 5, 5}, x_values())}};
  auto got = untuned.run(in);
  check_equals_float_path(net, got, in);
  return got;
}

/// ONNX Runtime 1.32 on qoperator_net() and x_values() (bench/.venv, onnxruntime.InferenceSession).
const float kQOperatorOrt[3] = {-0.35f, 0.29f, -0.23f};

}  // namespace

TEST_CASE("QDQ: QuantizeLinear/DequantizeLinear pairs compute what ONNX Runtime computes", "[onnx][quant]") {
  auto y = run_model(qdq_conv(), "qdq_conv.onnx", Shape{1, 3, 5, 5}, x_values());
  REQUIRE(y.shape == Shape{1, 4, 5, 5});
  // Equal up to float rounding at a quantisation step's edge: at most one step (0.03) anywhere, mostly exact.
  int off = 0;
  for (std::size_t i = 0; i < y.values.size(); ++i) {
    CHECK(std::fabs(y.values[i] - kQdq[i]) <= 0.03f + 1e-6f);
    off += std::fabs(y.values[i] - kQdq[i]) > 1e-6f;
  }
  CHECK(off <= 2);
  // The model's own quantisation is recorded for the qint8 routines.
  Model net = import_onnx(qdq_conv().save("qdq_conv_q.onnx"));
  int fake_quant = count_layers(net, "fake_quant");
  CHECK(fake_quant == 2);
  // The int8 weight stays marked as the file's grid (stored as int8, never
  // rounded onto the 7-bit grid of the u8s8 kernels).
  int marked = 0;
  for (const Layer& l : detail::impl_of(net).graph.layers)
    if (l.type == "conv2") {
      const Blob& w = l.weight("weight");
      CHECK(core::stored_as_int8(w));
      Schema schema;
      const Routine* r = core::RoutineRegistry::instance().find("conv2", "cpu:qint8:nhwc/qint8", &schema);
#if defined(__x86_64__)
      REQUIRE(r);  // elsewhere our qint8 family (x86 kernels) is not built
#endif
      LayerInfo info;
      info.layer = &l;
      info.input_shapes = {Shape{1, 3, 5, 5}};
      if (r)
        for (const RoutineParamSpec& p : r->param_space(info, schema))
          if (p.name == "u8s8") CHECK(p.choices == std::vector<int64_t>{0});
      ++marked;
    }
  CHECK(marked == 1);
}

TEST_CASE("QLinearConv: the QOperator form, as ONNX Runtime computes it", "[onnx][quant]") {
  OnnxModel m(13);
  m.input("x", {1, 3, 5, 5}).output("y");
  conv_initializers(m);
  m.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  m.node("QLinearConv", {"xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, {"cq"}).ints("pads", {1, 1, 1, 1});
  m.node("DequantizeLinear", {"cq", "ys", "yz"}, {"y"});
  auto y = run_model(m, "qlinearconv.onnx", Shape{1, 3, 5, 5}, x_values());
  for (std::size_t i = 0; i < y.values.size(); ++i) CHECK(std::fabs(y.values[i] - kQLinearConv[i]) <= 0.03f + 1e-6f);
}

TEST_CASE("MatMulInteger with an empty zero point is an error naming the node", "[onnx][quant]") {
  // Fuzzing found it (fuzz/regressions/onnx_import/matmulinteger-empty-zero-point):
  // an empty b_zero_point left no scale, and element 0 was read anyway.
  OnnxModel m(13);
  m.input("x", {2, 6}).output("y");
  m.init_typed("B", T::INT8, {6, 4}, ints(24, 9, 4)).init_typed("bz", T::INT8, {0}, {});
  m.node("DynamicQuantizeLinear", {"x"}, {"aq", "as", "az"});
  m.node("MatMulInteger", {"aq", "B", "az", "bz"}, {"acc"}, "mmi");
  m.node("Cast", {"acc"}, {"y"}).i("to", T::FLOAT);
  CHECK_THROWS_WITH(import_onnx(m.save("mmi_empty_zp.onnx")), Catch::Contains("mmi") && Catch::Contains("0 scales"));
}

TEST_CASE("Dynamic quantisation: DynamicQuantizeLinear, MatMulInteger and ConvInteger as ONNX Runtime computes them", "[onnx][quant]") {
  SECTION("MatMulInteger") {
    OnnxModel m(13);
    m.input("x", {2, 6}).output("y");
    m.init_typed("B", T::INT8, {6, 4}, ints(24, 9, 4)).init_typed("bz", T::INT8, {}, {0}).init("bs", {}, {0.07f});
    m.node("DynamicQuantizeLinear", {"x"}, {"aq", "as", "az"});
    m.node("MatMulInteger", {"aq", "B", "az", "bz"}, {"acc"});
    m.node("Cast", {"acc"}, {"accf"}).i("to", T::FLOAT);
    m.node("Mul", {"as", "bs"}, {"s"});
    m.node("Mul", {"accf", "s"}, {"y"});
    auto y = run_model(m, "dyn_matmul.onnx", Shape{2, 6}, pattern(12, 7, 3, 2.5f));
    CHECK(max_abs_diff(y.values, kDynamicMatMul) < 1e-6);
    // B's integers (int8, zero point 0) are stored as int8 in a .dnn, not as
    // float32 (quantize_dynamic's BERT-base: 367 MB before, 113 after), and
    // compute the same.
    Model net = import_onnx(test_dir() + "/dyn_matmul.onnx");
    const std::string dnn = test_dir() + "/dyn_matmul.dnn";
    net.save(dnn);
    bool int8 = false;
    Model loaded = Model::load(dnn);
    for (const auto& l : detail::impl_of(loaded).graph.layers)
      if (l.type == "dynamic_quant_dense") int8 = l.weight("weight").dtype() == DType::qint8;
    CHECK(int8);
    const std::vector<NamedBlob> in{{"x", make_input(Shape{2, 6}, pattern(12, 7, 3, 2.5f))}};
    CHECK(max_abs_diff(run_net(loaded, in)[0].values, kDynamicMatMul) < 1e-6);
  }
  SECTION("DynamicQuantizeLinear of constant weights, computed at import") {
    OnnxModel m(11);
    m.input("x", {1, 3, 5, 5}).output("y");
    m.init("w", {2, 3, 3, 3}, pattern(54, 7, 3.3f, 4));
    m.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
    m.node("DynamicQuantizeLinear", {"w"}, {"wq", "ws", "wz"});
    m.node("ConvInteger", {"xq", "wq", "xz", "wz"}, {"acc"}).ints("pads", {1, 1, 1, 1});
    m.node("Cast", {"acc"}, {"accf"}).i("to", T::FLOAT);
    m.node("Mul", {"xs", "ws"}, {"s"});
    m.node("Mul", {"accf", "s"}, {"y"});
    const std::vector<float> want = {0.2357924f, -1.0939794f, -1.1098685f, 0.61143255f, 0.077176474f, 1.1148512f, 0.57140487f, 1.2509344f, 2.5792665f, 0.66917652f, 0.23125261f, 0.13862976f, -1.5244292f, -0.38294813f, -2.4520969f, 0.050325263f, -0.22316957f, 0.048996542f, 0.54732186f, 1.5824499f, -0.44047061f, 0.45204157f, 0.12877509f, -0.18579932f, 0.27044985f, -1.7688582f, 0.11892042f, 1.5271419f, -0.50734949f, -0.018103808f, 1.5824499f, -1.4368443f, 1.2544776f, 0.023418687f, -1.514353f, 0.97533572f, 1.624526f, 0.67443603f, -1.3853011f, 0.002546713f, -0.84739107f, -1.7442769f, -0.72979933f, 1.100789f, -0.44694811f, 1.1059932f, 0.75559866f, 0.58463669f, 0.42004156f, 0.015778547f};
    auto y = run_model(m, "dyn_weights.onnx", Shape{1, 3, 5, 5}, x_values());
    CHECK(max_abs_diff(y.values, want) < 1e-5);
  }
  SECTION("ConvInteger") {
    OnnxModel m(13);
    m.input("x", {1, 3, 5, 5}).output("y");
    std::vector<int64_t> w(54);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<int64_t>(i % 7 + 120);
    m.init_typed("w", T::UINT8, {2, 3, 3, 3}, w).init_typed("wz", T::UINT8, {}, {123}).init("ws", {}, {0.05f});
    m.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
    m.node("ConvInteger", {"xq", "w", "xz", "wz"}, {"acc"}).ints("pads", {1, 1, 1, 1});
    m.node("Cast", {"acc"}, {"accf"}).i("to", T::FLOAT);
    m.node("Mul", {"xs", "ws"}, {"s"});
    m.node("Mul", {"accf", "s"}, {"y"});
    auto y = run_model(m, "dyn_conv.onnx", Shape{1, 3, 5, 5}, x_values());
    CHECK(max_abs_diff(y.values, kDynamicConv) < 1e-5);
  }
}

TEST_CASE("A dense layer as quantize_dynamic writes it runs as one dynamic_quant_dense, computing what its nodes do",
          "[onnx][quant]") {
  // One DynamicQuantizeLinear read by two MatMulIntegers (a transformer's
  // query and key), each then Cast and multiplied by the scales' product (the
  // weights' per tensor, or per output column in the other order), the first
  // then its bias.
  constexpr int64_t k = 37, n = 20;
  OnnxModel m(13);
  m.input("x", {1, 5, k}).output("y1").output("y2");
  std::vector<float> s2(n), b1(n);
  for (int64_t j = 0; j < n; ++j) s2[j] = 0.004f + 0.001f * static_cast<float>(j), b1[j] = 0.1f * static_cast<float>(j % 7) - 0.3f;
  m.init_typed("B1", T::INT8, {k, n}, ints(k * n, 255, 127)).init_typed("z1", T::INT8, {}, {0}).init("s1", {}, {0.013f});
  m.init_typed("B2", T::INT8, {k, n}, ints(k * n, 201, 100)).init_typed("z2", T::INT8, {n}, std::vector<int64_t>(n, 0));
  m.init("s2", {n}, s2).init("b1", {n}, b1);
  m.node("DynamicQuantizeLinear", {"x"}, {"q", "qs", "qz"});
  m.node("MatMulInteger", {"q", "B1", "qz", "z1"}, {"a1"});
  m.node("Cast", {"a1"}, {"a1f"}).i("to", T::FLOAT);
  m.node("Mul", {"qs", "s1"}, {"m1"});
  m.node("Mul", {"a1f", "m1"}, {"p1"});
  m.node("Add", {"p1", "b1"}, {"y1"});
  m.node("MatMulInteger", {"q", "B2", "qz", "z2"}, {"a2"});
  m.node("Cast", {"a2"}, {"a2f"}).i("to", T::FLOAT);
  m.node("Mul", {"s2", "qs"}, {"m2"});
  m.node("Mul", {"m2", "a2f"}, {"y2"});
  const std::string path = m.save("dyn_dense.onnx");
  Model fused = import_onnx(path);
  CHECK(count_layers(fused, "dynamic_quant_dense") == 2);
  CHECK(count_layers(fused, "dynamic_quantize") == 0);
  CHECK(count_layers(fused, "dense") == 0);
  CHECK(count_layers(fused, "add") == 0);
  ImportOptions apart;
  apart.fold_constants = false;
  Model nodes = import_onnx(path, apart);
  CHECK(count_layers(nodes, "dynamic_quant_dense") == 0);
  for (float spread : {1.0f, 40.0f}) {  // (also an input of one sign: zero point 0)
    const std::vector<NamedBlob> in{{"x", make_input(Shape{1, 5, k}, pattern(5 * k, 23, spread > 1 ? 0.0f : 9.0f, 7.0f / spread))}};
    const auto want = run_net(nodes, in), got = run_net(fused, in);
    for (std::size_t o = 0; o < 2; ++o) {
      INFO("output " << o << " spread " << spread);
      double scale = 0;
      for (float v : want[o].values) scale = std::max(scale, static_cast<double>(std::fabs(v)));
      CHECK(max_abs_diff(got[o].values, want[o].values) <= 1e-6 * scale);  // one rounding fewer: the bias in the fma
    }
  }
  // The weights stay int8 through a .dnn, and compute the same.
  const std::string dnn = test_dir() + "/dyn_dense.dnn";
  fused.save(dnn);
  Model loaded = Model::load(dnn);
  for (const auto& l : detail::impl_of(loaded).graph.layers)
    if (l.type == "dynamic_quant_dense") CHECK(l.weight("weight").dtype() == DType::qint8);
  const std::vector<NamedBlob> in{{"x", make_input(Shape{1, 5, k}, pattern(5 * k, 23, 9.0f, 7.0f))}};
  const auto a = run_net(fused, in), b = run_net(loaded, in);
  CHECK(a[0].values == b[0].values);
  CHECK(a[1].values == b[1].values);
}

TEST_CASE("A 1-D ConvInteger (Whisper's stem quantised by quantize_dynamic) is its 2-D form", "[onnx][quant]") {
  auto model = [](bool one_d) {
    OnnxModel m(13);
    m.input("x", one_d ? std::vector<int64_t>{1, 3, 9} : std::vector<int64_t>{1, 3, 1, 9}).output("y");
    std::vector<int64_t> w(18);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<int64_t>(i * 29 % 255) - 127;
    m.init_typed("w", T::INT8, one_d ? std::vector<int64_t>{2, 3, 3} : std::vector<int64_t>{2, 3, 1, 3}, w)
        .init("ws", {}, {0.05f});
    m.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
    auto c = m.node("ConvInteger", {"xq", "w", "xz"}, {"acc"});
    if (one_d) c.ints("pads", {1, 1}).ints("strides", {2});
    else c.ints("pads", {0, 1, 0, 1}).ints("strides", {1, 2});
    m.node("Cast", {"acc"}, {"accf"}).i("to", T::FLOAT);
    m.node("Mul", {"xs", "ws"}, {"s"});
    m.node("Mul", {"accf", "s"}, {"y"});
    return import_onnx(m.save(one_d ? "conv_integer_1d.onnx" : "conv_integer_2d.onnx"));
  };
  const auto x = pattern(27, 11, 4, 3.0f);
  const auto y1 = run_net(model(true), {{"x", make_input(Shape{1, 3, 9}, x)}});
  const auto y2 = run_net(model(false), {{"x", make_input(Shape{1, 3, 1, 9}, x)}});
  CHECK(y1[0].shape == Shape{1, 2, 5});
  CHECK(y1[0].values == y2[0].values);
}

TEST_CASE("Quantised ONNX: bad quantisation is refused naming the node and field", "[onnx][quant]") {
  SECTION("a zero scale") {
    OnnxModel m(13);
    m.input("x", {1, 4}).output("y");
    m.init("s", {}, {0.0f}).init_typed("z", T::UINT8, {}, {3});
    m.node("QuantizeLinear", {"x", "s", "z"}, {"q"}, "quantize");
    m.node("DequantizeLinear", {"q", "s", "z"}, {"y"});
    CHECK_THROWS_WITH(import_onnx(m.save("qdq_zero_scale.onnx")), Catch::Contains("quantize") && Catch::Contains("scale"));
  }
  SECTION("a zero point outside its type") {
    OnnxModel m(13);
    m.input("x", {1, 4}).output("y");
    m.init("s", {}, {0.1f}).init_typed("z", T::INT8, {}, {200});
    m.node("QuantizeLinear", {"x", "s", "z"}, {"q"});
    m.node("DequantizeLinear", {"q", "s", "z"}, {"y"});
    CHECK_THROWS_WITH(import_onnx(m.save("qdq_bad_zp.onnx")), Catch::Contains("zero point"));
  }
}

TEST_CASE("A QDQ model tuned with qint8 schemas runs on int8 routines with its own scales", "[onnx][quant][tune]") {
  Model net = import_onnx(qdq_conv().save("qdq_conv_tune.onnx"));
  std::vector<NamedBlob> in{{"x", make_input(Shape{1, 3, 5, 5}, x_values())}};
  const auto floats = run_net(net, in)[0].values;
  TuneOptions o;
  o.cache_dir = "-";
  o.unit_budget_ms = 0.2;
  o.integrated_runs = 2;
  o.schemas = {"cpu:qint8:*", "cpu:float32:*"};
  o.pin = {{"*", "cpu:qint8*"}};  // every layer on a qint8 routine
  if (!core::cpu_features().avx2_fma()) return;  // our qint8 routines need AVX2
  tune_and_keep(net, o);
  bool int8_conv = false;
  for (const auto& l : Session(net).layers()) int8_conv = int8_conv || (l.type == "conv2" && l.descriptor.starts_with("cpu:qint8"));
  CHECK(int8_conv);
  const auto int8 = run_net(net, in)[0].values;
  // No calibration ran: the conv writes int8 at the model's output scale, so
  // its result is the float path's to within one step of 0.03.
  for (std::size_t i = 0; i < int8.size(); ++i) CHECK(std::fabs(int8[i] - floats[i]) <= 0.03f + 1e-5f);
}

TEST_CASE("A QDQ model runs untuned on int8 routines with its own scales, a float32-only session keeps floats", "[onnx][quant]") {
  if (!core::cpu_features().avx2_fma()) return;  // our qint8 routines need AVX2
  // qdq_conv's weights are int8 in [-5, 5] (a channel's largest is not 127):
  // the qint8 routines compute with the model's integers and scales, so the
  // int8 run equals the float one (they re-derived max|w| / 127 before).
  Model net = import_onnx(qdq_conv().save("qdq_conv_default.onnx"));
  std::vector<NamedBlob> in{{"x", make_input(Shape{1, 3, 5, 5}, x_values())}};
  Session untuned(net);
  int int8 = 0;
  for (const auto& l : untuned.layers()) {
    INFO(l.name << " " << l.type << " " << l.descriptor);
    if (l.type == "conv2" || l.type == "fake_quant") {
      CHECK(l.descriptor.starts_with("cpu:qint8"));  // (float32 routines before: the Q/DQ pairs as float steps)
      ++int8;
    }
  }
  CHECK(int8 == 3);
  // The plan for inputs that hold NaN keeps the model's int8 layers too: int8
  // holds no NaN (quantising one gives a number, as ONNX Runtime's
  // QuantizeLinear does), so they compute what they compute for any input
  // (that plan ran them in float32 before).
  {
    const auto& impl = detail::impl_of(net);
    const core::Plan exact = core::build_plan(impl.graph, impl.tuning, impl.shapes, nullptr,
                                              core::PlanOptions{.weights = impl.weights, .keep_nan = true});
    int exact_int8 = 0;
    for (const auto& st : exact.steps)
      if (st->layer->type == "conv2" || st->layer->type == "fake_quant") {
        INFO(st->name << " " << st->routine.descriptor);
        CHECK(st->routine.descriptor.starts_with("cpu:qint8"));
        ++exact_int8;
      }
    CHECK(exact_int8 == 3);
    // Saved, the weights are the file's int8 values; the int8 convolutions read
    // them as they are: no float32 copy beside (every QDQ file's session held one).
    net.save(test_dir() + "/qdq_conv_default.dnn");
    const Model loaded = Model::load(test_dir() + "/qdq_conv_default.dnn");
    const auto& back = detail::impl_of(loaded);
    const core::Plan plan = core::build_plan(back.graph, back.tuning, back.shapes, nullptr, core::PlanOptions{.weights = back.weights});
    int stored = 0;
    for (const auto& st : plan.steps)
      if (st->layer->type == "conv2" && core::stored_quantized(st->layer->weight("weight"))) {
        INFO(st->name << " " << st->routine.descriptor);
        CHECK_FALSE(st->float_layer);
        ++stored;
      }
    CHECK(stored >= 1);
    std::vector<NamedBlob> nan_in{{"x", make_input(Shape{1, 3, 5, 5}, x_values())}};
    nan_in[0].blob.data_as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    const auto nan_out = untuned.run(nan_in)[0];
    for (const auto& l : untuned.layers())  // the plan that ran
      if (l.type == "conv2" || l.type == "fake_quant") CHECK(l.descriptor.starts_with("cpu:qint8"));
    const auto finite_out = untuned.run(in)[0];
    REQUIRE(nan_out.blob.numel() == finite_out.blob.numel());
  }
  SessionOptions floats;
  floats.schemas = {"cpu:float32:*"};
  Session float_session(net, floats);
  for (const auto& l : float_session.layers()) CHECK(l.descriptor.find("qint8") == std::string::npos);
  const auto got = untuned.run(in)[0], want = float_session.run(in)[0];
  const float* g = got.blob.data_as<float>();
  const float* w = want.blob.data_as<float>();
  for (std::size_t i = 0; i < kQdq.size(); ++i) {
    CHECK(std::fabs(g[i] - kQdq[i]) <= 0.03f + 1e-6f);  // ONNX Runtime's, to a step
    CHECK(g[i] == Approx(w[i]).margin(1e-6));           // the float path's QDQ arithmetic, exactly
  }
}

TEST_CASE("Tuning a QDQ model with the default schemas weighs its int8 default against float32", "[onnx][quant][tune]") {
  if (!core::cpu_features().avx2_fma()) return;
  Model net = import_onnx(qdq_conv().save("qdq_conv_tune_default.onnx"));
  TuneOptions o;
  o.cache_dir = "-";
  o.unit_budget_ms = 0.2;
  o.integrated_runs = 2;
  TuneReport r;
  Model tuned = tune(net, o, &r);
  INFO(r.to_text());
  // The int8 default obeys the schemas tuned over, so it was measured beside
  // the tuned path (default_ms 0 before: float32 schemas only, the default outside them).
  CHECK(r.default_ms > 0);
  // Whichever it kept runs the model's arithmetic.
  std::vector<NamedBlob> in{{"x", make_input(Shape{1, 3, 5, 5}, x_values())}};
  const auto y = Session(tuned).run(in)[0];
  for (std::size_t i = 0; i < kQdq.size(); ++i) CHECK(std::fabs(y.blob.data_as<float>()[i] - kQdq[i]) <= 0.03f + 1e-6f);
}

TEST_CASE("A QDQ model's float layers between int8 ones stay in the int8 layers' layout", "[onnx][quant]") {
  if (!core::cpu_features().avx2_fma()) return;
  // Conv -> Q/DQ -> Sigmoid -> Q/DQ (YOLOv8's SiLU halves): the sigmoid after
  // an int8 conv computes in the conv's layout, so one dequantising adapt
  // feeds it (it took a blocked layout before: a chain and reorders around it).
  OnnxModel m = qdq_conv();
  m.node("Sigmoid", {"y"}, {"s"});
  m.init("ss", {}, {1.0f / 255}).init_typed("sz", T::UINT8, {}, {0});
  m.node("QuantizeLinear", {"s", "ss", "sz"}, {"sq"});
  m.node("DequantizeLinear", {"sq", "ss", "sz"}, {"z"});
  m.output("z");
  Model net = import_onnx(m.save("qdq_conv_sigmoid.onnx"));
  auto layout_of = [](const std::string& descriptor) { return Schema::parse(descriptor.substr(0, descriptor.find('/'))).layout; };
  std::optional<Layout> conv, sigmoid;
  for (const auto& l : Session(net).layers()) {
    INFO(l.name << " " << l.type << " " << l.descriptor);
    if (l.type == "conv2" && l.descriptor.starts_with("cpu:qint8")) conv = layout_of(l.descriptor);
    if (l.type == "sigmoid") sigmoid = layout_of(l.descriptor);
    if (!l.name.ends_with("->output")) CHECK(l.descriptor.find("reorder") == std::string::npos);  // (the net's output leaves in nchw)
    CHECK(l.descriptor.find("chain") == std::string::npos);
  }
  REQUIRE(conv);
  CHECK(sigmoid == conv);
}

TEST_CASE("QuantizeLinear as a graph output hands back the integers, DequantizeLinear reads integer inputs", "[onnx][quant]") {
  // y = saturate(round_half_even(x / 0.5) + 10) as uint8 (the dequantised values were handed back before).
  OnnxModel m(13);
  m.input("x", {6});
  m.init("s", {}, {0.5f}).init_typed("z", T::UINT8, {}, {10});
  m.node("QuantizeLinear", {"x", "s", "z"}, {"q"});
  m.typed_output("q", T::UINT8);
  Model net = import_onnx(m.save("quantize_output.onnx"));
  net.save(test_dir() + "/quantize_output.dnn");
  Session s(Model::load(test_dir() + "/quantize_output.dnn"));
  Blob x = Blob::allocate(Shape{6});
  const float xv[] = {0.25f, 0.75f, -1.0f, 3.3f, -20.0f, 200.0f};
  std::copy(std::begin(xv), std::end(xv), x.data_as<float>());
  auto out = s.run(std::vector<NamedBlob>{{"x", x}});
  REQUIRE(out[0].blob.dtype() == DType::uint8);
  const uint8_t* q = out[0].blob.data_as<uint8_t>();
  CHECK(std::vector<int>(q, q + 6) == std::vector<int>{10, 12, 8, 17, 0, 255});  // 0.5 and 1.5 round to even

  // A uint8 graph input, dequantised per channel: (x - z[c]) * s[c].
  OnnxModel d(13);
  d.typed_input("xi", T::UINT8, {2, 3});
  d.init("ds", {3}, {0.5f, 1.0f, 2.0f}).init_typed("dz", T::UINT8, {3}, {0, 10, 100});
  d.node("DequantizeLinear", {"xi", "ds", "dz"}, {"y"}).i("axis", 1);
  d.output("y");
  Model dn = import_onnx(d.save("dequantize_input.onnx"));
  dn.save(test_dir() + "/dequantize_input.dnn");
  Session ds(Model::load(test_dir() + "/dequantize_input.dnn"));
  Blob xi = Blob::allocate(Shape{2, 3}, DType::uint8);
  const uint8_t iv[] = {4, 12, 101, 0, 0, 255};
  std::copy(std::begin(iv), std::end(iv), xi.data_as<uint8_t>());
  auto y = ds.run(std::vector<NamedBlob>{{"xi", xi}});
  const float* yv = y[0].blob.data_as<float>();
  CHECK(std::vector<float>(yv, yv + 6) == std::vector<float>{2, 2, 2, 0, -10, 310});
}

TEST_CASE("A QDQ model's Q/DQ pair between two int8 layers runs nothing", "[onnx][quant][views]") {
  if (!core::cpu_features().avx2_fma()) return;  // our qint8 routines need AVX2
  // conv -> Q/DQ -> conv: the pair between the convolutions has the int8
  // blob's own quantisation, so its table is the identity and its output is
  // the first convolution's memory (the step copied 66 times in MobileNetV2).
  OnnxModel m = qdq_conv();
  m.output("y2");
  m.init_typed("w2", T::INT8, {4, 4, 1, 1}, ints(16, 7, 3)).init("w2s", {4}, {0.02f, 0.03f, 0.04f, 0.05f});
  m.init_typed("w2z", T::INT8, {4}, {0, 0, 0, 0});
  m.node("DequantizeLinear", {"w2", "w2s", "w2z"}, {"w2d"}).i("axis", 0);
  m.node("Conv", {"y", "w2d"}, {"c2"});
  m.node("QuantizeLinear", {"c2", "ys", "yz"}, {"c2q"});
  m.node("DequantizeLinear", {"c2q", "ys", "yz"}, {"y2"});
  Model net = import_onnx(m.save("qdq_conv2.onnx"));
  std::vector<NamedBlob> in{{"x", make_input(Shape{1, 3, 5, 5}, x_values())}};
  Session untuned(net);
  int views = 0;
  for (const auto& l : untuned.layers()) {
    INFO(l.name << " " << l.type << " " << l.descriptor);
    views += l.view;
    if (l.view) CHECK(l.type == "fake_quant");
  }
  CHECK(views >= 1);
  const auto got = untuned.run(in);
  REQUIRE(got.size() == 2);
  check_equals_float_path(net, got, in);
}

TEST_CASE("Calibrating a QDQ model keeps the model's own scales, so its int8 layers still compute the model", "[onnx][quant][tune]") {
  if (!core::cpu_features().avx2_fma()) return;  // our qint8 routines need AVX2
  Model net = import_onnx(qdq_conv().save("qdq_conv_calibrate.onnx"));
  CalibrationOptions c;
  c.methods = {RangeMethod::minmax};
  for (int k = 0; k < 3; ++k)  // ranges unlike the file's scales
    c.inputs.push_back({{"x", make_input(Shape{1, 3, 5, 5}, pattern(75, 7 + k, 3, 1))}});
  Model calibrated = calibrate(net, c);
  // (The calibrated ranges replaced the file's: the Q/DQ steps no longer
  // matched their blobs' quantisation and the conv fell back to float32.)
  bool int8_conv = false;
  Session s(calibrated);
  for (const auto& l : s.layers()) int8_conv = int8_conv || (l.type == "conv2" && l.descriptor.starts_with("cpu:qint8"));
  CHECK(int8_conv);
  std::vector<NamedBlob> in{{"x", make_input(Shape{1, 3, 5, 5}, x_values())}};
  const auto y = s.run(in)[0];
  for (std::size_t i = 0; i < kQdq.size(); ++i) CHECK(std::fabs(y.blob.data_as<float>()[i] - kQdq[i]) <= 0.03f + 1e-6f);

  // Tuned on those samples with no budget and every layer in qint8: still the model's arithmetic.
  TuneOptions o;
  o.cache_dir = "-";
  o.unit_budget_ms = 0.2;
  o.integrated_runs = 2;
  o.accuracy = "none";
  o.calibration = c;
  o.schemas = {"cpu:qint8:*", "cpu:float32:*"};
  o.pin = {{"*", "cpu:qint8*"}};
  Model tuned = tune(net, o);
  const auto t = Session(tuned).run(in)[0];
  for (std::size_t i = 0; i < kQdq.size(); ++i) CHECK(std::fabs(t.blob.data_as<float>()[i] - kQdq[i]) <= 0.03f + 1e-6f);
}

TEST_CASE("A QDQ model's own int8 layers answer to no accuracy budget: tuning keeps a path of them without samples", "[onnx][quant][tune]") {
  if (!core::cpu_features().avx2_fma()) return;
  // A classifier's [1,3] output: 16 synthetic samples are too few to resolve top1:0.99.
  Model net = import_onnx(qdq_conv_gemm(false).save("qdq_conv_tune_budget.onnx"));
  TuneOptions o;  // the default schemas and budget (top1:0.99), no samples
  o.cache_dir = "-";
  o.unit_budget_ms = 0.2;
  o.integrated_runs = 2;
  o.pin = {{"*", "cpu:qint8*"}};
  TuneReport r;
  Model tuned = tune(net, o, &r);
  INFO(r.to_text());
  // (Before: "validation too small: ... no path below float32 is kept", and
  // every tuning of a QDQ model fell back to its untuned default.)
  CHECK_FALSE(r.accuracy_missed);
  CHECK(r.accuracy_note.empty());
  bool int8_conv = false;
  for (const auto& l : Session(tuned).layers()) int8_conv = int8_conv || (l.type == "conv2" && l.descriptor.starts_with("cpu:qint8"));
  CHECK(int8_conv);
}

TEST_CASE("A QDQ model's Flatten between int8 layers runs in int8, with no conversions around it", "[onnx][quant][views]") {
  if (!core::cpu_features().avx2_fma()) return;
  // conv -> Q/DQ -> Flatten -> Q/DQ (the same scale) -> Gemm, as quantize_static
  // writes MobileNetV2's head: the flatten ran in float between a dequantising
  // and a quantising adapt.
  // 3: the input's quantisation, the two outputs' dequantisation (5: and two around the flatten).
  const auto got = check_int8_default(qdq_conv_gemm(true), "qdq_flatten.onnx", "flatten", 3);
  REQUIRE(got.size() == 2);
}

TEST_CASE("A QDQ model's Split of an int8 tensor runs in int8, with no conversions around it", "[onnx][quant]") {
  if (!core::cpu_features().avx2_fma()) return;
  // conv -> Q/DQ -> Split (channels 1 + 3) -> Q/DQ each -> Concat (swapped)
  // -> Q/DQ, as quantize_static writes YOLOv8's C2f blocks: the split ran in
  // float between a dequantising adapt and two quantising ones.
  OnnxModel m = qdq_conv_to_z();
  m.init_ints("sizes", {2}, {1, 3});
  m.node("Split", {"y", "sizes"}, {"s0", "s1"}).i("axis", 1);
  qdq_at_y(m, "s0", "s0d");
  qdq_at_y(m, "s1", "s1d");
  m.node("Concat", {"s1d", "s0d"}, {"c2"}).i("axis", 1);
  qdq_at_y(m, "c2", "z");
  // 2: the input's quantisation and the output's dequantisation.
  const auto got = check_int8_default(m, "qdq_split.onnx", "split", 2);
  REQUIRE(got.size() == 1);
}

TEST_CASE("A QDQ model's nearest Resize of an int8 tensor runs in int8, with no conversions around it", "[onnx][quant]") {
  if (!core::cpu_features().avx2_fma()) return;
  // conv -> Q/DQ -> Resize (nearest, x2) -> Q/DQ (the same scale), as
  // quantize_static writes YOLOv8's upsampling: the resize ran in float
  // between a dequantising and a quantising adapt.
  OnnxModel m = qdq_conv_to_z();
  m.init("scales", {4}, {1, 1, 2, 2});
  m.node("Resize", {"y", "", "scales"}, {"r"}).s("mode", "nearest");
  qdq_at_y(m, "r", "z");
  // 2: the input's quantisation and the output's dequantisation.
  const auto got = check_int8_default(m, "qdq_resize.onnx", "resize", 2);
  REQUIRE(got.size() == 1);
  CHECK(got[0].blob.shape() == Shape{1, 4, 10, 10});
}

TEST_CASE("A QDQ model's int8 SiLU (Sigmoid, Q/DQ, Mul) runs as one table, computing what its two steps did", "[onnx][quant]") {
  if (!core::cpu_features().avx2_fma()) return;
  // conv -> Q/DQ -> Sigmoid -> Q/DQ -> Mul(conv, sigmoid) -> Q/DQ, as
  // quantize_static writes every YOLOv8 activation: two passes over the
  // tensor (the sigmoid's table, then the mul) where one table gives the same bytes.
  OnnxModel m = qdq_conv_to_z();
  m.init("ss", {}, {1.0f / 255}).init_typed("sz", T::UINT8, {}, {0});
  m.init("ms", {}, {0.02f}).init_typed("mz", T::UINT8, {}, {10});
  m.node("Sigmoid", {"y"}, {"sig"});
  m.node("QuantizeLinear", {"sig", "ss", "sz"}, {"sigq"});
  m.node("DequantizeLinear", {"sigq", "ss", "sz"}, {"sigd"});
  m.node("Mul", {"y", "sigd"}, {"silu"});
  m.node("QuantizeLinear", {"silu", "ms", "mz"}, {"siluq"});
  m.node("DequantizeLinear", {"siluq", "ms", "mz"}, {"z"});
  Model net = import_onnx(m.save("qdq_silu.onnx"));
  Session untuned(net);
  std::string steps, sigmoid_fused_into;
  bool mul_int8 = false;
  for (const auto& l : untuned.layers()) {
    steps += l.name + " " + l.type + " " + l.descriptor + (l.fused_into.empty() ? "" : " fused into " + l.fused_into) + "\n";
    if (l.type == "sigmoid") sigmoid_fused_into = l.fused_into;
    if (l.type == "mul") mul_int8 = l.descriptor.starts_with("cpu:qint8");
  }
  INFO(steps);
  CHECK(mul_int8);
  CHECK_FALSE(sigmoid_fused_into.empty());
  // Every int8 input value: the conv's output spans its whole range on these inputs.
  for (int k = 0; k < 3; ++k) {
    std::vector<NamedBlob> in{{"x", make_input(Shape{1, 3, 5, 5}, pattern(75, 13 + k, 6 + k, 1.0f + 0.5f * k))}};
    const auto got = untuned.run(in);
    REQUIRE(got.size() == 1);
    check_equals_float_path(net, got, in);
  }
}

TEST_CASE("A QDQ model's Swish and Gelu between Q/DQ steps run on int8 tables", "[onnx][quant]") {
  if (!core::cpu_features().avx2_fma()) return;
  for (const char* op : {"Swish", "Gelu"}) {
    INFO(op);
    OnnxModel m = qdq_conv_to_z();
    m.init("as", {}, {0.02f}).init_typed("az", T::UINT8, {}, {20});
    m.node(op, {"y"}, {"a"});
    m.node("QuantizeLinear", {"a", "as", "az"}, {"aq"});
    m.node("DequantizeLinear", {"aq", "as", "az"}, {"z"});
    Model net = import_onnx(m.save(std::string("qdq_") + op + ".onnx"));
    Session untuned(net);
    const DefaultSteps steps = default_steps(untuned, op == std::string("Swish") ? "silu" : "gelu");
    INFO(steps.listing);
    CHECK(steps.int8);  // (before: in float32, between a dequantise and a quantise)
    std::vector<NamedBlob> in{{"x", make_input(Shape{1, 3, 5, 5}, x_values())}};
    check_equals_float_path(net, untuned.run(in), in);
  }
}

TEST_CASE("A QDQ model's float convolutions and the scalar affine between them stay in one layout", "[onnx][quant]") {
  // quantize_static on weights held in Constant nodes (PaddleOCR's exports)
  // quantises them as activations: uint8, per tensor, with a zero point; no
  // int8 routine computes that exactly, so the convolutions stay float. The
  // PP-LCNetV3 affine between them, mul(scale, x) with the scalar first, then
  // ran in the plain layout between two reorders (a QDQ PP-OCRv4 recogniser:
  // 12.4 ms untuned, 10.3 without them).
  OnnxModel m(13);
  m.input("x", {1, 16, 8, 8}).output("y");
  m.init("xs", {}, {0.02f}).init_typed("xz", T::UINT8, {}, {128});
  m.init("ws", {}, {0.01f}).init_typed("wz", T::UINT8, {}, {119});
  m.init_typed("w1", T::UINT8, {16, 16, 1, 1}, ints(256, 200, -20));
  m.init_typed("w2", T::UINT8, {16, 16, 3, 3}, ints(2304, 230, -10));
  m.init("k", {}, {1.5f});
  m.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  m.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  m.node("DequantizeLinear", {"w1", "ws", "wz"}, {"w1d"});
  m.node("DequantizeLinear", {"w2", "ws", "wz"}, {"w2d"});
  m.node("Conv", {"xd", "w1d"}, {"c1"});
  m.node("QuantizeLinear", {"c1", "xs", "xz"}, {"c1q"});
  m.node("DequantizeLinear", {"c1q", "xs", "xz"}, {"c1d"});
  m.node("Mul", {"k", "c1d"}, {"a"});
  m.node("QuantizeLinear", {"a", "xs", "xz"}, {"aq"});
  m.node("DequantizeLinear", {"aq", "xs", "xz"}, {"ad"});
  m.node("Conv", {"ad", "w2d"}, {"c2"}).ints("pads", {1, 1, 1, 1});
  m.node("QuantizeLinear", {"c2", "xs", "xz"}, {"c2q"});
  m.node("DequantizeLinear", {"c2q", "xs", "xz"}, {"y"});
  Model net = import_onnx(m.save("qdq_float_affine.onnx"));
  Session untuned(net);
  std::string steps, conv_schema, mul_schema;
  int reorders = 0;
  for (const auto& l : untuned.layers()) {
    steps += l.name + " " + l.type + " " + l.descriptor + "\n";
    const std::string schema = l.descriptor.substr(0, l.descriptor.rfind('/'));
    if (l.type == "conv2" && conv_schema.empty()) conv_schema = schema;
    if (l.type == "mul") mul_schema = schema;
    if (l.type == "adapt" && l.descriptor.find("reorder") != std::string::npos) ++reorders;
  }
  INFO(steps);
  CHECK(conv_schema.find("qint8") == std::string::npos);  // (no exact int8 routine for these weights)
  // Below AVX2 (SOFTNEURO_MAX_CPU_ISA=sse41) no routine multiplies in the blocked layout: the layout
  // is AVX2's question; the values are every ISA's.
  if (core::cpu_features().avx2_fma()) {
    CHECK(mul_schema == conv_schema);
    CHECK(reorders == 2);  // into the convolutions' layout and out of it
  }
  std::vector<NamedBlob> in{{"x", make_input(Shape{1, 16, 8, 8}, pattern(1024, 37, 18, 10))}};
  check_equals_float_path(net, untuned.run(in), in);
}

namespace {
/// The QOperator form ONNX Runtime's quantize_static writes (QuantFormat.QOperator):
/// QLinearConv -> MaxPool on the integers -> QLinearAdd of it and a 1x1
/// QLinearConv of it -> QLinearGlobalAveragePool -> Flatten -> QGemm, the
/// last three in ONNX Runtime's domain com.microsoft.
OnnxModel qoperator_net() {
  OnnxModel m(13);
  auto* ms = m.proto.add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  m.input("x", {1, 3, 5, 5}).output("z");
  conv_initializers(m);
  m.init_typed("w1", T::INT8, {4, 4, 1, 1}, ints(16, 7, 3)).init("w1s", {4}, {0.02f, 0.03f, 0.04f, 0.05f});
  m.init_typed("w1z", T::INT8, {4}, {0, 0, 0, 0});
  m.init("c1s", {}, {0.01f}).init_typed("c1z", T::UINT8, {}, {120});
  m.init("as", {}, {0.04f}).init_typed("az", T::UINT8, {}, {10});
  m.init("gs", {}, {0.02f}).init_typed("gz", T::UINT8, {}, {5});
  m.init_typed("w2", T::INT8, {3, 4}, ints(12, 9, 4)).init("w2s", {3}, {0.05f, 0.06f, 0.07f});
  m.init_typed("w2z", T::INT8, {3}, {0, 0, 0});
  m.init_typed("c2", T::INT32, {3}, {40, -25, 10});
  m.init("zs", {}, {0.01f}).init_typed("zz", T::UINT8, {}, {128});
  auto ms_node = [&](const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out) {
    NodeRef r = m.node(op, in, out);
    r.p->set_domain("com.microsoft");
    return r;
  };
  m.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  m.node("QLinearConv", {"xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, {"cq"}).ints("pads", {1, 1, 1, 1});
  m.node("MaxPool", {"cq"}, {"mq"}).ints("kernel_shape", {2, 2}).ints("pads", {0, 0, 1, 1});
  m.node("QLinearConv", {"mq", "ys", "yz", "w1", "w1s", "w1z", "c1s", "c1z"}, {"c1q"});
  ms_node("QLinearAdd", {"mq", "ys", "yz", "c1q", "c1s", "c1z", "as", "az"}, {"aq"});
  ms_node("QLinearGlobalAveragePool", {"aq", "as", "az", "gs", "gz"}, {"gq"});
  m.node("Flatten", {"gq"}, {"fq"}).i("axis", 1);
  ms_node("QGemm", {"fq", "gs", "gz", "w2", "w2s", "w2z", "c2", "zs", "zz"}, {"zq"}).i("transB", 1);
  m.node("DequantizeLinear", {"zq", "zs", "zz"}, {"z"});
  return m;
}
}  // namespace

TEST_CASE("QOperator models (ONNX Runtime's com.microsoft QLinearAdd, QLinearGlobalAveragePool, QGemm) import and run int8", "[onnx][quant]") {
  // (Refused before: "com.microsoft.QLinearAdd: unsupported operator", and a
  // QLinearConv after a MaxPool of integers read a tensor "neither quantised
  // by a QuantizeLinear nor integer-typed".)
  Model net = import_onnx(qoperator_net().save("qoperator.onnx"));
  std::vector<NamedBlob> in{{"x", make_input(Shape{1, 3, 5, 5}, x_values())}};
  Session untuned(net);
  const auto outputs = untuned.run(in);
  const std::vector<float> got(outputs[0].blob.data_as<float>(), outputs[0].blob.data_as<float>() + outputs[0].blob.numel());
  // ONNX Runtime 1.32 on the same file.
  const std::vector<float> ort = {kQOperatorOrt[0], kQOperatorOrt[1], kQOperatorOrt[2]};
  REQUIRE(got.size() == ort.size());
  for (std::size_t i = 0; i < ort.size(); ++i) CHECK(std::fabs(got[i] - ort[i]) <= 0.01f + 1e-6f);  // a step of z
  if (!core::cpu_features().avx2_fma()) return;  // our qint8 routines need AVX2
  // The untuned default runs the model's int8 layers on qint8 routines, and equals the float path.
  int int8 = 0;
  for (const auto& l : untuned.layers())
    if ((l.type == "conv2" || l.type == "dense" || l.type == "add" || l.type == "pool2") && l.descriptor.starts_with("cpu:qint8"))
      ++int8;
  CHECK(int8 == 6);  // two convolutions, the max and the average pooling, the add, the dense
  check_equals_float_path(net, outputs, in);
}

TEST_CASE("QOperator: a Split of integers keeps its quantisation, and com.microsoft.QLinearSoftmax, as ONNX Runtime computes them",
          "[onnx][quant]") {
  // quantize_static(..., QuantFormat.QOperator) on YOLOv8n: its C2f split runs
  // on the integers before a QLinearConv, and its DFL softmax is a
  // QLinearSoftmax. Both were refused ("QLinearConv of a x ... that is neither
  // quantised by a QuantizeLinear nor integer-typed", "unsupported operator").
  OnnxModel m(13);
  auto* ms = m.proto.add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  m.input("x", {1, 4, 3, 3}).output("y").output("z");
  m.init("xs", {}, {0.02f}).init_typed("xz", T::UINT8, {}, {128});
  m.init_ints("sizes", {2}, {1, 3});
  m.init_typed("w", T::INT8, {2, 3, 1, 1}, ints(6, 7, 3)).init("ws", {2}, {0.05f, 0.07f});
  m.init_typed("wz", T::INT8, {2}, {0, 0});
  m.init("ys", {}, {0.03f}).init_typed("yz", T::UINT8, {}, {100});
  m.init("ss", {}, {1.0f / 256}).init_typed("sz", T::UINT8, {}, {0});
  m.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  m.node("Split", {"xq", "sizes"}, {"s0", "s1"}).i("axis", 1);
  m.node("QLinearConv", {"s1", "xs", "xz", "w", "ws", "wz", "ys", "yz"}, {"cq"});
  NodeRef sm = m.node("QLinearSoftmax", {"cq", "ys", "yz", "ss", "sz"}, {"smq"});
  sm.p->set_domain("com.microsoft");
  sm.i("axis", 1).i("opset", 13);
  m.node("DequantizeLinear", {"smq", "ss", "sz"}, {"y"});
  m.node("DequantizeLinear", {"s0", "xs", "xz"}, {"z"});
  Model net = import_onnx(m.save("qop_split_softmax.onnx"));
  const auto out = run_net(net, {{"x", make_input(Shape{1, 4, 3, 3}, pattern(36, 11, 5, 4))}});
  REQUIRE(out.size() == 2);
  // ONNX Runtime 1.32 on this model and input (bench/.venv).
  const std::vector<float> y = {0.44140625f, 0.41015625f, 0.4765625f, 0.45703125f, 0.53125f,    0.5078125f,
                                0.6015625f,  0.56640625f, 0.5390625f, 0.55859375f, 0.58984375f, 0.5234375f,
                                0.54296875f, 0.46875f,    0.4921875f, 0.3984375f,  0.43359375f, 0.4609375f};
  const std::vector<float> z = {-1.24f, -1.0f, -0.76f, -0.5f, -0.24f, 0.0f, 0.24f, 0.5f, 0.76f};
  REQUIRE(out[0].shape == Shape{1, 2, 3, 3});
  int off = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    CHECK(std::fabs(out[0].values[i] - y[i]) <= 1.0f / 256 + 1e-6f);  // one step at most, at a rounding edge
    off += std::fabs(out[0].values[i] - y[i]) > 1e-6f;
  }
  CHECK(off <= 2);
  REQUIRE(out[1].shape == Shape{1, 1, 3, 3});
  for (std::size_t i = 0; i < z.size(); ++i) CHECK(out[1].values[i] == Approx(z[i]).margin(1e-6));
}


TEST_CASE("DequantizeLinear and QuantizeLinear with block_size: each element at its block's scale and zero point", "[onnx][quant]") {
  // An LLM's weights quantised in blocks of 4 along K ([K 8, N 3] int8, scale and zero point [2, 3]),
  // dequantised into a MatMul: kept as those codes, a blockwise weight that cpu/nbits_dense reads.
  const int64_t k = 8, n = 3, block = 4;
  std::vector<int64_t> wq(k * n);
  for (int64_t i = 0; i < k * n; ++i) wq[static_cast<std::size_t>(i)] = (i * 37) % 255 - 127;
  const std::vector<float> scale{0.5f, 0.25f, 0.125f, 2.0f, 1.0f, 0.75f};
  const std::vector<int64_t> zp{0, 3, -2, 1, 0, -5};
  OnnxModel m(21);
  m.input("x", {1, k}).output("y").output("q");
  m.init_typed("W", onnx::TensorProto::INT8, {k, n}, wq).init("s", {2, n}, scale).init_typed("z", onnx::TensorProto::INT8, {2, n}, zp);
  m.node("DequantizeLinear", {"W", "s", "z"}, {"Wf"}).i("axis", 0).i("block_size", block);
  m.node("MatMul", {"x", "Wf"}, {"y"});
  // The same blocks quantising the input's run-time values ([1, 8]: blocks of 4 along axis 1).
  m.init("xs", {1, 2}, {0.1f, 0.05f}).init_typed("xz", onnx::TensorProto::INT8, {1, 2}, {0, 10});
  m.node("QuantizeLinear", {"x", "xs", "xz"}, {"q"}).i("axis", 1).i("block_size", block);
  Model net = import_onnx(m.save("blocked_quant.onnx"));
  std::vector<float> x(static_cast<std::size_t>(k));
  for (int64_t i = 0; i < k; ++i) x[static_cast<std::size_t>(i)] = 0.3f * static_cast<float>(i) - 1.1f;
  auto out = run_net(net, {{"x", make_input(Shape{1, k}, x)}});
  bool blockwise = false;
  for (const auto& l : Session(net).layers()) blockwise = blockwise || (l.type == "dense" && l.descriptor == "cpu/nbits_dense");
  CHECK(blockwise);
  for (int64_t j = 0; j < n; ++j) {
    double want = 0;
    for (int64_t i = 0; i < k; ++i) {
      const auto b = static_cast<std::size_t>((i / block) * n + j);
      want += x[static_cast<std::size_t>(i)] * (wq[static_cast<std::size_t>(i * n + j)] - zp[b]) * scale[b];
    }
    CHECK(out[0].values[static_cast<std::size_t>(j)] == Approx(want).epsilon(1e-5));
  }
  for (int64_t i = 0; i < k; ++i) {
    const float s = i < block ? 0.1f : 0.05f, z = i < block ? 0.0f : 10.0f;
    CHECK(out[1].values[static_cast<std::size_t>(i)] == std::clamp(std::nearbyint(x[static_cast<std::size_t>(i)] / s) + z, -128.0f, 127.0f));
  }
  // A scale not shaped as the blocks: an error naming the field.
  OnnxModel bad(21);
  bad.input("x", {1, k}).output("y");
  bad.init_typed("W", onnx::TensorProto::INT8, {k, n}, wq).init("s", {3, n}, std::vector<float>(9, 1.0f));
  bad.node("DequantizeLinear", {"W", "s"}, {"Wf"}, "dq").i("axis", 0).i("block_size", block);
  bad.node("MatMul", {"x", "Wf"}, {"y"});
  CHECK_THROWS_WITH(import_onnx(bad.save("blocked_quant_bad.onnx")),
                    Catch::Contains("'dq'") && Catch::Contains("scale") && Catch::Contains("blocks of 4"));
}

TEST_CASE("QuantizeLinear with a scale computed at run time (DynamicQuantizeLinear's function body)", "[onnx][quant]") {
  // scale = max(x) / 127 at run time, zero point a constant int8 0: y = saturate(round_half_even(x / scale) + 0).
  OnnxModel m(19);
  m.input("x", {6}).typed_output("y", onnx::TensorProto::FLOAT);
  m.init("d", {}, {127.0f});
  m.init_ints("zp", {}, {0});
  m.node("ReduceMax", {"x"}, {"mx"}).i("keepdims", 0);
  m.node("Div", {"mx", "d"}, {"scale"});
  m.node("Cast", {"zp"}, {"zp8"}).i("to", onnx::TensorProto::INT8);
  m.node("QuantizeLinear", {"x", "scale", "zp8"}, {"q"});
  m.node("Cast", {"q"}, {"y"}).i("to", onnx::TensorProto::FLOAT);
  const std::vector<float> x = {-3.0f, -1.0f, 0.0f, 0.5f, 1.27f, 2.54f};
  Output y = run_model(m, "quantize_runtime_scale.onnx", Shape{6}, x);
  REQUIRE(y.values.size() == 6);
  const float scale = 2.54f / 127.0f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO(i);
    CHECK(y.values[i] == std::clamp(std::nearbyint(x[i] / scale), -128.0f, 127.0f));
  }

  // Per axis at run time: refused, naming what is supported.
  OnnxModel p(19);
  p.input("x", {2, 3}).output("y");
  p.init_ints("axes", {1}, {1});
  p.node("ReduceMax", {"x", "axes"}, {"scale"}).i("keepdims", 0);
  p.node("QuantizeLinear", {"x", "scale"}, {"y"}).i("axis", 0);
  CHECK_THROWS_WITH(import_onnx(p.save("quantize_runtime_axis.onnx")), Catch::Contains("per tensor only"));
}
