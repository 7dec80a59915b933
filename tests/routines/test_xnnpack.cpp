// cpu:float32:nhwc/xnnpack routines against the cpu/ref oracle, on randomised
// shapes and parameters (strides, pads, dilations, groups, depthwise, odd
// sizes, batch 1 and 4, every fused activation), in the nhwc schema (inputs
// converted from nchw, outputs converted back; outputs pre-filled with NaN so
// unwritten elements are caught). Where XNNPACK cannot initialise on this CPU,
// the routines refuse and the tests say so (WARN) instead of checking numbers.
//
// Tolerance: max |got - ref| <= 1e-4 * max |ref| (+1e-6 absolute), per output.
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "support/layout_convert.hpp"
#include "support/run_layer.hpp"

#include <softneuro/session.hpp>
#include <softneuro/routine.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace softneuro {
uint64_t xnnpack_allocations();  // src/routines/cpu/xnnpack.cpp
}

using namespace softneuro;

namespace {

constexpr double kTolerance = 1e-4;
const std::string kDescriptor = "cpu:float32:nhwc/xnnpack";

Blob random_blob(const Shape& shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  Blob b = Blob::allocate(shape);
  for (int64_t i = 0; i < shape.numel(); ++i) b.data_as<float>()[i] = u(rng);
  return b;
}

/// Copies between a plain blob and the nhwc schema's memory order ([N, D2.., C]
/// for rank >= 3, row-major below), written plainly for any rank.
Blob convert(const Blob& from, Layout to) {
  const Shape& s = from.shape();
  Blob out = Blob::allocate(s, DType::float32, to);
  const int64_t n = s.rank() >= 3 ? s[0] : 1, c = s.rank() >= 3 ? s[1] : 1;
  const int64_t inner = s.rank() >= 3 ? s.numel() / std::max<int64_t>(1, n * c) : s.numel();
  const float* x = from.data_as<float>();
  float* y = out.data_as<float>();
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < c; ++b)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t plain = (a * c + b) * inner + i, nhwc = (a * inner + i) * c + b;
        if (to == Layout::nhwc) y[nhwc] = x[plain];
        else y[plain] = x[nhwc];
      }
  return out;
}
Blob to_nhwc(const Blob& plain) { return convert(plain, Layout::nhwc); }
Blob from_nhwc(const Blob& b) { return convert(b, Layout::nchw); }

struct Outcome {
  Support support;
  std::vector<Blob> outputs;  ///< plain
};

const Routine* xnn_routine(const std::string& type, Schema* schema) {
  const Routine* r = core::RoutineRegistry::instance().find(type, kDescriptor, schema);
  REQUIRE(r);
  return r;
}

/// Runs `layer` with the XNNPACK routine in nhwc: plain inputs converted, outputs back plain.
Outcome run_xnn(const Layer& layer, const std::vector<Blob>& plain_inputs, const RoutineParams& params = {}) {
  LayerInfo info;
  info.layer = &layer;
  for (const Blob& b : plain_inputs) info.input_shapes.push_back(b.shape());
  info.output_shapes = core::infer_layer_shapes(layer, info.input_shapes);
  Schema schema;
  const Routine* routine = xnn_routine(layer.type, &schema);
  Outcome out;
  out.support = routine->supports(info, schema);
  if (!out.support) return out;
  std::vector<Blob> inputs, outputs;
  for (const Blob& b : plain_inputs) inputs.push_back(to_nhwc(b));
  auto prepared = routine->prepare(info, schema, params);
  for (const Shape& s : info.output_shapes) {
    outputs.push_back(Blob::allocate(s, DType::float32, Layout::nhwc));
    test::fill_bytes(outputs.back(), std::numeric_limits<float>::quiet_NaN());
  }
  REQUIRE(prepared->workspace_bytes() == 0);
  std::vector<const Blob*> in_ptrs;
  for (const Blob& b : inputs) in_ptrs.push_back(&b);
  std::vector<Blob*> out_ptrs;
  for (Blob& b : outputs) out_ptrs.push_back(&b);
  RunArgs args{in_ptrs, out_ptrs, nullptr, &core::global_pool()};
  prepared->run(args);
  prepared->run(args);  // twice: the second run reuses the setup
  for (const Blob& b : outputs) out.outputs.push_back(from_nhwc(b));
  return out;
}

/// max |got - want| <= kTolerance * max |want| + 1e-6; NaN anywhere fails.
void check_close(const Blob& got, const Blob& want) {
  REQUIRE(got.shape() == want.shape());
  double max_ref = 0, max_err = 0;
  bool bad = false;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.data_as<float>()[i], g = got.data_as<float>()[i];
    if (std::isfinite(w)) max_ref = std::max(max_ref, std::abs(w));
    if (std::isfinite(w) && std::isfinite(g)) max_err = std::max(max_err, std::abs(g - w));
    else if (w != g) bad = true;
  }
  INFO("max |ref| = " << max_ref << ", max error = " << max_err);
  CHECK_FALSE(bad);
  CHECK(max_err <= kTolerance * max_ref + 1e-6);
}

bool check_case(const Layer& layer, const std::vector<Blob>& inputs, std::string* reason = nullptr,
                const RoutineParams& params = {}) {
  Outcome got = run_xnn(layer, inputs, params);
  if (!got.support) {
    if (reason) *reason = got.support.reason;
    return false;
  }
  std::vector<Blob> want = test::run_layer(layer, inputs, "cpu/ref");
  REQUIRE(got.outputs.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) check_close(got.outputs[i], want[i]);
  return true;
}

/// Whether XNNPACK works on this CPU (when not, every routine refuses, saying so).
bool xnnpack_available() {
  Layer relu = test::make_layer("relu");
  LayerInfo info{&relu, {Shape{1, 4}}, {Shape{1, 4}}, {}, {}};
  Schema schema;
  const Routine* r = xnn_routine("relu", &schema);
  Support s = r->supports(info, schema);
  if (!s) WARN("cpu/xnnpack not exercised: " << s.reason);
  return s.ok;
}

struct Tally {
  int supported = 0, total = 0;
  std::map<std::string, int> reasons;
  void run(const Layer& layer, const std::vector<Blob>& inputs) {
    ++total;
    std::string why;
    if (check_case(layer, inputs, &why)) ++supported;
    else ++reasons[why];
  }
  std::string summary() const {
    std::string text = std::to_string(supported) + "/" + std::to_string(total) + " supported";
    for (const auto& [why, count] : reasons) text += "\n    " + std::to_string(count) + "x " + why;
    return text;
  }
};

const char* const kActs[] = {"none", "relu", "clip", "hardswish", "hardsigmoid", "sigmoid"};

void set_act(Layer& l, const std::string& act, std::mt19937& rng) {
  l.params["act"] = act;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  if (act == "clip") {
    double a = u(rng), b = u(rng);
    l.params["act_min"] = std::min(a, b) - 0.1;
    l.params["act_max"] = std::max(a, b);
  }
  if (act == "hardsigmoid") {
    l.params["act_alpha"] = 0.1 + 0.3 * (u(rng) + 1.0);
    l.params["act_beta"] = 0.5 + 0.2 * u(rng);
  }
}

int pick(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

}  // namespace

// ---------------------------------------------------------------------------

TEST_CASE("xnnpack stays out under a SOFTNEURO_MAX_CPU_ISA that takes something away", "[xnnpack]") {
  // XNNPACK picks its kernels from the CPU itself: under the cap it would run
  // what the cap forbids (the CTests all_tests_at_* exercise this branch).
  Layer relu = test::make_layer("relu");
  LayerInfo info{&relu, {Shape{1, 4}}, {Shape{1, 4}}, {}, {}};
  Schema schema;
  const Routine* r = xnn_routine("relu", &schema);
  const Support s = r->supports(info, schema);
  if (core::cpu_features_capped()) {
    CHECK_FALSE(s.ok);
    CHECK(s.reason.find("SOFTNEURO_MAX_CPU_ISA") != std::string::npos);
  } else {
    CHECK(s.reason.find("SOFTNEURO_MAX_CPU_ISA") == std::string::npos);
  }
}

TEST_CASE("xnnpack conv2 matches cpu/ref", "[xnnpack][conv2]") {
  if (!xnnpack_available()) return;
  std::mt19937 rng(4321);
  Tally tally;
  for (int t = 0; t < 40; ++t) {
    // Group kind: 0 plain, 1 depthwise (multiplier 1 or 2), 2 grouped.
    const int kind = t % 3, act = (t + t / 6) % 6;
    const int64_t n = (t % 4 == 3) ? 4 : 1;
    const int64_t unit = (t / 3) % 2 ? 8 : 1;
    int64_t group = 1, c, oc;
    if (kind == 0) {
      c = unit * pick(rng, 1, unit > 1 ? 4 : 19);
      oc = unit * pick(rng, 1, unit > 1 ? 4 : 21);
    } else if (kind == 1) {
      c = unit * pick(rng, 1, unit > 1 ? 4 : 24);
      group = c;
      oc = c * (t % 4 == 1 ? 2 : 1);
    } else {
      group = pick(rng, 2, 3);
      c = group * unit * pick(rng, 1, unit > 1 ? 2 : 6);
      oc = group * unit * pick(rng, 1, unit > 1 ? 2 : 7);
    }
    const int64_t kh = std::vector<int64_t>{1, 3, 5, 3, 1}[static_cast<std::size_t>(pick(rng, 0, 4))];
    const int64_t kw = (t % 5 == 4) ? std::vector<int64_t>{1, 3, 7}[static_cast<std::size_t>(pick(rng, 0, 2))] : kh;
    const int64_t sh = pick(rng, 1, 3), sw = (t % 6 == 5) ? pick(rng, 1, 3) : sh;
    const int64_t dh = (t % 4 == 1) ? 2 : 1, dw = (t % 8 == 1) ? 1 : dh;
    const int ph = static_cast<int>(std::min<int64_t>(2, (kh - 1) * dh));
    const int pw = static_cast<int>(std::min<int64_t>(2, (kw - 1) * dw));
    const int64_t pt = t == 12 ? 1 : pick(rng, 0, ph), pl = t == 12 ? 1 : pick(rng, 0, pw);
    const int64_t pb = (t % 2) ? pick(rng, 0, ph) : pt, pr = (t % 2) ? pick(rng, 0, pw) : pl;
    const int64_t h = std::max<int64_t>(pick(rng, 3, 14), (kh - 1) * dh + 1);
    const int64_t w = std::max<int64_t>(pick(rng, 3, 14), (kw - 1) * dw + 1);
    std::map<std::string, Blob> weights{{"weight", random_blob({oc, c / group, kh, kw}, rng)}};
    if (t % 3 != 2) weights["bias"] = random_blob({oc}, rng);
    Layer l = test::make_layer("conv2",
                               {{"strides", std::vector<int64_t>{sh, sw}},
                                {"pads", std::vector<int64_t>{pt, pl, pb, pr}},
                                {"dilations", std::vector<int64_t>{dh, dw}},
                                {"group", group}},
                               weights);
    set_act(l, kActs[act], rng);
    INFO("case " << t << ": n" << n << " c" << c << " oc" << oc << " g" << group << " k" << kh << "x" << kw << " s"
                 << sh << "x" << sw << " d" << dh << "x" << dw << " pads " << pt << "," << pl << "," << pb << "," << pr
                 << " in " << h << "x" << w << " act " << kActs[act]);
    tally.run(l, {random_blob({n, c, h, w}, rng)});
  }
  // MobileNetV2-like shapes: a first conv, a pointwise, a depthwise 3x3 stride 2 with relu6.
  struct Fixed { int64_t c, oc, group, k, s, p, hw; };
  for (Fixed f : {Fixed{3, 32, 1, 3, 2, 1, 33}, Fixed{64, 24, 1, 1, 1, 0, 14}, Fixed{48, 48, 48, 3, 2, 1, 15},
                  Fixed{96, 96, 96, 3, 1, 1, 14}}) {
    Layer l = test::make_layer("conv2",
                               {{"strides", std::vector<int64_t>{f.s, f.s}},
                                {"pads", std::vector<int64_t>{f.p, f.p, f.p, f.p}},
                                {"group", f.group}, {"act", std::string("clip")}, {"act_min", 0.0}, {"act_max", 6.0}},
                               {{"weight", random_blob({f.oc, f.c / f.group, f.k, f.k}, rng)},
                                {"bias", random_blob({f.oc}, rng)}});
    tally.run(l, {random_blob({1, f.c, f.hw, f.hw}, rng, -3.0f, 3.0f)});
  }
  INFO(tally.summary());
  if (std::getenv("SOFTNEURO_TEST_VERBOSE")) WARN(tally.summary());
  CHECK(tally.supported == tally.total);
}

TEST_CASE("xnnpack dense matches cpu/ref, rank > 2 inputs are refused", "[xnnpack][dense]") {
  if (!xnnpack_available()) return;
  std::mt19937 rng(98);
  Tally tally;
  for (int t = 0; t < 18; ++t) {
    const int64_t n = std::vector<int64_t>{1, 4, 7}[static_cast<std::size_t>(t % 3)];
    const int64_t k = 4 * pick(rng, 1, 18), o = pick(rng, 1, 40);  // K % 4 != 0: refused, below
    std::map<std::string, Blob> weights{{"weight", random_blob({o, k}, rng)}};
    if (t % 4 != 3) weights["bias"] = random_blob({o}, rng);
    Layer l = test::make_layer("dense", {}, weights);
    set_act(l, kActs[t % 6], rng);
    INFO("case " << t << ": n" << n << " k" << k << " o" << o << " act " << kActs[t % 6]);
    tally.run(l, {random_blob({n, k}, rng)});
  }
  INFO(tally.summary());
  CHECK(tally.supported == tally.total);

  Layer l3 = test::make_layer("dense", {}, {{"weight", random_blob({5, 6}, rng)}});
  LayerInfo info{&l3, {Shape{2, 3, 6}}, {Shape{2, 3, 5}}, {}, {}};
  Schema schema;
  Support s = xnn_routine("dense", &schema)->supports(info, schema);
  CHECK_FALSE(s.ok);
  CHECK(s.reason.find("rank 3") != std::string::npos);

  // Debian's XNNPACK got K % 4 != 0 wrong on several threads (AVX2): refused, with the reason.
  Layer l5 = test::make_layer("dense", {}, {{"weight", random_blob({18, 5}, rng)}});
  LayerInfo info5{&l5, {Shape{1, 5}}, {Shape{1, 18}}, {}, {}};
  Support s5 = xnn_routine("dense", &schema)->supports(info5, schema);
  CHECK_FALSE(s5.ok);
  CHECK(s5.reason.find("multiple of 4") != std::string::npos);
}

TEST_CASE("xnnpack pool2 matches cpu/ref", "[xnnpack][pool2]") {
  if (!xnnpack_available()) return;
  std::mt19937 rng(77);
  Tally tally;
  for (int t = 0; t < 40; ++t) {
    const std::string mode = t % 2 ? "max" : "avg";
    const int64_t n = (t % 5 == 4) ? 4 : 1, c = pick(rng, 1, 21);
    std::map<std::string, Attr> p{{"mode", mode}};
    int64_t h = pick(rng, 3, 13), w = pick(rng, 3, 13);
    if (t % 10 == 9 || t % 10 == 8) {
      p["global"] = int64_t{1};
    } else {
      const int64_t kh = pick(rng, 2, 4), kw = (t % 3 == 0) ? pick(rng, 1, 4) : kh;
      const int64_t s = pick(rng, 1, 3);
      p["kernel"] = std::vector<int64_t>{kh, kw};
      p["strides"] = std::vector<int64_t>{s, (t % 4 == 1) ? pick(rng, 1, 3) : s};
      const int64_t pt = pick(rng, 0, (kh - 1) / 2 + (kh > 2)), pl = pick(rng, 0, (kw - 1) / 2 + (kw > 2));
      p["pads"] = std::vector<int64_t>{pt, pl, (t % 3 == 1) ? pick(rng, 0, pt) : pt, pl};
      if (t % 7 == 3) p["dilations"] = std::vector<int64_t>{2, 2};
      if (t % 4 == 2) p["ceil_mode"] = int64_t{1};
      if (mode == "avg" && t % 4 == 0) p["count_include_pad"] = int64_t{1};
      h = std::max<int64_t>(h, 2 * kh + 1);
      w = std::max<int64_t>(w, 2 * kw + 1);
    }
    Layer l = test::make_layer("pool2", p);
    std::ostringstream label;
    label << "case " << t << ": " << mode << " n" << n << " c" << c << " in " << h << "x" << w;
    for (const auto& [key, value] : p)
      if (const auto* v = std::get_if<std::vector<int64_t>>(&value)) label << " " << key << "=" << Shape(*v).to_string();
      else if (const auto* i = std::get_if<int64_t>(&value)) label << " " << key << "=" << *i;
    INFO(label.str());
    tally.run(l, {random_blob({n, c, h, w}, rng)});
  }
  INFO(tally.summary());
  if (std::getenv("SOFTNEURO_TEST_VERBOSE")) WARN(tally.summary());
  CHECK(tally.supported >= 24);
}

TEST_CASE("xnnpack activations match cpu/ref", "[xnnpack][eltwise]") {
  if (!xnnpack_available()) return;
  for (const char* type : {"relu", "clip", "hardswish", "sigmoid", "hardsigmoid"}) {
    INFO(type);
    std::mt19937 rng(5);
    for (int t = 0; t < 6; ++t) {
      std::map<std::string, Attr> p;
      if (std::string(type) == "clip") {
        if (t != 1) p["min"] = -2.0 + t * 0.3;
        if (t != 2) p["max"] = 1.5 + t * 0.2;
      }
      if (std::string(type) == "hardsigmoid" && t > 0) {
        p["alpha"] = 0.1 + 0.05 * t;
        p["beta"] = 0.4 + 0.03 * t;
      }
      Layer l = test::make_layer(type, p);
      Shape s = t == 5 ? Shape{3, 37} : Shape{t % 2 ? 4 : 1, pick(rng, 1, 21), pick(rng, 1, 9), pick(rng, 1, 9)};
      INFO("shape " << s.to_string());
      CHECK(check_case(l, {random_blob(s, rng, -6.0f, 6.0f)}));
    }
  }
}

TEST_CASE("xnnpack add, sub, mul, div match cpu/ref (broadcasting)", "[xnnpack][binary]") {
  if (!xnnpack_available()) return;
  for (const char* type : {"add", "sub", "mul", "div"}) {
    INFO(type);
    std::mt19937 rng(17);
    for (int t = 0; t < 10; ++t) {
      const int64_t n = t % 2 ? 4 : 1, c = pick(rng, 1, 21), h = pick(rng, 1, 9), w = pick(rng, 1, 9);
      Shape a{n, c, h, w}, b = a;
      if (t == 1) b = Shape{1, c, 1, 1};  // per channel
      if (t == 2) b = Shape{n, c, 1, 1};  // per image and channel (SE blocks)
      if (t == 3) a = Shape{1, c, 1, 1};  // the broadcast one first
      if (t == 4) b = Shape{1, 1, h, w};  // per pixel
      if (t == 5) b = Shape{n, 1, h, 1};
      if (t == 6) b = Shape{c, 1, 1};     // lower rank, lies as [C]
      if (t == 7) { a = Shape{n, c}; b = Shape{c}; }
      if (t == 8) { a = Shape{n, c}; b = Shape{1}; }
      INFO("shapes " << a.to_string() << " " << b.to_string());
      std::map<std::string, Attr> p;  // add's fused relu/clip (a residual add)
      if (std::string(type) == "add" && t % 3 == 1) p["act"] = std::string("relu");
      if (std::string(type) == "add" && t % 3 == 2) p = {{"act", std::string("clip")}, {"act_min", 0.25}, {"act_max", 1.5}};
      Layer l = test::make_layer(type, p, {}, 2);
      CHECK(check_case(l, {random_blob(a, rng), random_blob(b, rng, 0.5f, 1.5f)}));
    }
  }
  // A lower-rank input whose memory XNNPACK would misread in nhwc is refused.
  std::mt19937 rng(3);
  Layer l = test::make_layer("add", {}, {}, 2);
  LayerInfo info{&l, {Shape{2, 3, 4, 5}, Shape{3, 4, 5}}, {Shape{2, 3, 4, 5}}, {}, {}};
  Schema schema;
  CHECK_FALSE(xnn_routine("add", &schema)->supports(info, schema).ok);
}

TEST_CASE("xnnpack softmax matches cpu/ref along the innermost dim", "[xnnpack][softmax]") {
  if (!xnnpack_available()) return;
  std::mt19937 rng(8);
  for (auto [s, axis] : {std::pair{Shape{1, 1000}, int64_t{-1}}, std::pair{Shape{4, 37}, int64_t{1}},
                         std::pair{Shape{2, 5, 3, 4}, int64_t{1}}, std::pair{Shape{3, 7, 1, 1}, int64_t{1}}}) {
    Layer l = test::make_layer("softmax", {{"axis", axis}});
    INFO("shape " << s.to_string() << " axis " << axis);
    CHECK(check_case(l, {random_blob(s, rng, -5.0f, 5.0f)}));
  }
  Layer l = test::make_layer("softmax", {{"axis", int64_t{-1}}});
  LayerInfo info{&l, {Shape{2, 5, 3, 4}}, {Shape{2, 5, 3, 4}}, {}, {}};
  Schema schema;
  Support s = xnn_routine("softmax", &schema)->supports(info, schema);
  CHECK_FALSE(s.ok);
  CHECK(s.reason.find("innermost") != std::string::npos);
}

TEST_CASE("xnnpack runs with one, two and three threads", "[xnnpack][threads]") {
  if (!xnnpack_available()) return;
  std::mt19937 rng(2);
  Layer l = test::make_layer("conv2", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}},
                             {{"weight", random_blob({16, 16, 3, 3}, rng)}});
  Blob x = random_blob({2, 16, 12, 12}, rng);
  const int before = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    CHECK(check_case(l, {x}));
  }
  set_num_threads(before);
}

/// Threads of this process (entries of /proc/self/task).
int process_threads() {
  int n = 0;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Threads:", 0) == 0) n = std::atoi(line.c_str() + 8);
  return n;
}

TEST_CASE("xnnpack runs on the library's OpenMP team, with no threads of its own", "[xnnpack][threads]") {
  if (!xnnpack_available()) return;
  std::mt19937 rng(3);
  Layer l = test::make_layer("conv2", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}},
                             {{"weight", random_blob({16, 16, 3, 3}, rng)}});
  Blob x = random_blob({1, 16, 20, 20}, rng);
  const int before = num_threads();
  // A team size no other test uses: XNNPACK's own pthreadpool would start 4 workers for it.
  set_num_threads(5);
  core::global_pool().parallel_for(64, 1, [](int64_t, int64_t) {});  // the OpenMP team exists
  const int threads_before = process_threads();
  const uint64_t loops_before = core::pthreadpool_loops();
  CHECK(check_case(l, {x}));
  CHECK(core::pthreadpool_loops() > loops_before);  // XNNPACK's loops went through our pool
  // (Under qemu-user the process's thread count is the emulator's too: 3 before, 6 after.)
  if (!std::getenv("SOFTNEURO_EMULATED")) CHECK(process_threads() == threads_before);
  set_num_threads(before);
}

TEST_CASE("xnnpack runs allocate nothing once prepared, whatever the pointers", "[xnnpack][alloc]") {
  if (!xnnpack_available()) return;
  std::mt19937 rng(6);
  std::vector<Layer> layers;
  layers.push_back(test::make_layer("conv2", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"act", std::string("hardswish")}},
                                    {{"weight", random_blob({8, 8, 3, 3}, rng)}}));
  layers.push_back(test::make_layer("conv2", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"group", int64_t{8}}},
                                    {{"weight", random_blob({8, 1, 3, 3}, rng)}}));
  layers.push_back(test::make_layer("pool2", {{"mode", std::string("avg")}, {"kernel", std::vector<int64_t>{3, 3}},
                                              {"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  layers.push_back(test::make_layer("pool2", {{"mode", std::string("max")}, {"kernel", std::vector<int64_t>{3, 3}},
                                              {"strides", std::vector<int64_t>{2, 2}}}));
  for (const Layer& l : layers) {
    INFO(l.type);
    LayerInfo info{&l, {Shape{1, 8, 10, 10}}, {}, {}, {}};
    info.output_shapes = core::infer_layer_shapes(l, info.input_shapes);
    Schema schema;
    const Routine* r = xnn_routine(l.type, &schema);
    REQUIRE(r->supports(info, schema).ok);
    auto prepared = r->prepare(info, schema, {});
    std::vector<Blob> xs, ys;
    for (int i = 0; i < 3; ++i) {
      xs.push_back(Blob::allocate(info.input_shapes[0], DType::float32, Layout::nhwc));
      ys.push_back(Blob::allocate(info.output_shapes[0], DType::float32, Layout::nhwc));
    }
    const uint64_t before = xnnpack_allocations();
    for (int i = 0; i < 6; ++i) {
      const Blob* in[] = {&xs[static_cast<std::size_t>(i % 3)]};
      Blob* out[] = {&ys[static_cast<std::size_t>((i + 1) % 3)]};
      prepared->run(RunArgs{in, out, nullptr, &core::global_pool()});
    }
    CHECK(xnnpack_allocations() == before);
  }
}

// Before, XNNPACK's resize tables (40 bytes an output pixel) were allocated
// whatever the session's memory limit.
TEST_CASE("xnnpack resize's indirection tables answer to the memory limit", "[xnnpack][resize]") {
  if (!xnnpack_available()) return;
  Layer up = test::make_layer("resize", {{"mode", std::string("linear")}});
  up.params["sizes"] = std::vector<int64_t>{1, 1, int64_t{1} << 22, 1};
  LayerInfo info;
  info.layer = &up;
  info.input_shapes = {Shape{1, 1, 2, 1}};
  info.output_shapes = core::infer_layer_shapes(up, info.input_shapes);
  info.memory_limit = std::size_t{64} << 20;
  Schema schema;
  const Routine* r = xnn_routine("resize", &schema);
  REQUIRE(r->supports(info, schema));
  try {
    r->prepare(info, schema, {});
    FAIL("tables over the memory limit were allocated");
  } catch (const Error& e) {
    CHECK(e.field() == "memory_limit");
    CHECK_THAT(std::string(e.what()), Catch::Contains("indirection tables"));
  }
}

TEST_CASE("xnnpack routines outrank cpu/ref and refuse other schemas", "[xnnpack]") {
  for (const char* type :
       {"conv2", "dense", "pool2", "relu", "clip", "hardswish", "sigmoid", "hardsigmoid", "add", "mul", "softmax"}) {
    INFO(type);
    Schema schema;
    const Routine* ref = core::RoutineRegistry::instance().find(type, "cpu/ref", nullptr);
    const Routine* xnn = xnn_routine(type, &schema);
    REQUIRE(ref);
    const auto& registry = core::RoutineRegistry::instance();
    CHECK(registry.default_rank(type, make_descriptor(schema, xnn->algorithm())) < registry.default_rank(type, "cpu/ref"));
    Layer l = test::make_layer(type);
    LayerInfo info{&l, {Shape{1, 4, 2, 2}}, {Shape{1, 4, 2, 2}}, {}, {}};
    CHECK_FALSE(xnn->supports(info, Schema{}).ok);
  }
}

TEST_CASE("xnnpack conv2 ranks below oneDNN's convs in the untuned default", "[xnnpack]") {
  // See "Untuned default" in src/routines/cpu/xnnpack.cpp and src/routines/default_order.cpp: on a loaded machine
  // XNNPACK's thread pool made whole nets slower; the tuner measures it instead.
#if defined(__aarch64__)
  return;  // there XNNPACK leads (test "xnnpack: on aarch64 its float32 routines lead ...")
#endif
  Schema schema;
  const Routine* xnn = xnn_routine("conv2", &schema);
  const auto& registry = core::RoutineRegistry::instance();
  for (const char* d : {"cpu/onednn", "cpu:float32:nhwc/onednn", "cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn"}) {
    INFO(d);
    const Routine* dnn = core::RoutineRegistry::instance().find("conv2", d, nullptr);
    REQUIRE(dnn);
    CHECK(registry.default_rank("conv2", make_descriptor(schema, xnn->algorithm())) > registry.default_rank("conv2", d));
  }
}

TEST_CASE("xnnpack qint8 routines take calibrated MobileNet-like layers and say why not otherwise", "[xnnpack][qint8]") {
  if (!xnnpack_available()) return;
  std::mt19937 rng(12);
  const Schema q{Device::cpu, DType::qint8, Layout::nhwc};
  const QuantParams qi{{0.02f}, {3}, -1}, qo{{0.05f}, {-10}, -1};
  auto supports = [&](const Layer& l, std::vector<Shape> in, bool calibrated = true) {
    LayerInfo info{&l, in, core::infer_layer_shapes(l, in), {}, {}};
    if (calibrated) {
      info.input_quant.assign(in.size(), qi);
      info.output_quant = {qo};
    }
    const Routine* r = core::RoutineRegistry::instance().find(l.type, "cpu:qint8:nhwc/xnnpack", nullptr);
    REQUIRE(r);
    return r->supports(info, q);
  };
  Layer dw = test::make_layer("conv2", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"group", int64_t{32}},
                                        {"act", std::string("clip")}, {"act_min", 0.0}, {"act_max", 6.0}},
                              {{"weight", random_blob({32, 1, 3, 3}, rng)}, {"bias", random_blob({32}, rng)}});
  CHECK(supports(dw, {Shape{1, 32, 14, 14}}).ok);
  Layer pw = test::make_layer("conv2", {}, {{"weight", random_blob({64, 32, 1, 1}, rng)}});
  CHECK(supports(pw, {Shape{1, 32, 14, 14}}).ok);
  Layer gap = test::make_layer("pool2", {{"mode", std::string("avg")}, {"global", int64_t{1}}});
  CHECK(supports(gap, {Shape{1, 32, 7, 7}}).ok);
  Layer add = test::make_layer("add", {}, {}, 2);
  CHECK(supports(add, {Shape{1, 24, 8, 8}, Shape{1, 24, 8, 8}}).ok);
  Layer fc = test::make_layer("dense", {}, {{"weight", random_blob({10, 32}, rng)}});
  CHECK(supports(fc, {Shape{2, 32}}).ok);
  // Refusals, with reasons.
  CHECK(supports(pw, {Shape{1, 32, 14, 14}}, false).reason.find("calibrat") != std::string::npos);
  Layer hs = test::make_layer("conv2", {{"act", std::string("hardswish")}}, {{"weight", random_blob({8, 8, 1, 1}, rng)}});
  CHECK_FALSE(supports(hs, {Shape{1, 8, 4, 4}}).ok);
  Layer avg = test::make_layer("pool2", {{"mode", std::string("avg")}, {"kernel", std::vector<int64_t>{2, 2}}});
  CHECK(supports(avg, {Shape{1, 8, 4, 4}}).reason.find("average") != std::string::npos);
  CHECK_FALSE(supports(add, {Shape{1, 24, 8, 8}, Shape{1, 24, 1, 1}}).ok);
}

TEST_CASE("xnnpack qint8 routines refuse quantisation scales XNNPACK cannot take", "[xnnpack][qint8][limits]") {
  if (!xnnpack_available()) return;
  std::mt19937 rng(13);
  const Schema q{Device::cpu, DType::qint8, Layout::nhwc};
  Layer pw = test::make_layer("conv2", {}, {{"weight", random_blob({16, 16, 1, 1}, rng)}});
  Layer dw = test::make_layer("conv2", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"group", int64_t{16}}},
                              {{"weight", random_blob({16, 1, 3, 3}, rng)}});
  Layer gap = test::make_layer("pool2", {{"mode", std::string("avg")}, {"global", int64_t{1}}});
  Layer mx = test::make_layer("pool2", {{"mode", std::string("max")}, {"kernel", std::vector<int64_t>{2, 2}}});
  Layer add = test::make_layer("add", {}, {}, 2);
  Layer fc = test::make_layer("dense", {}, {{"weight", random_blob({10, 16}, rng)}});
  for (float bad : {1e38f, 1e-38f, 3e30f, 1e-30f}) {
    for (int side = 0; side < 2; ++side) {
      INFO("scale " << bad << (side ? " on the output" : " on the input"));
      const QuantParams ok{{0.05f}, {0}, -1}, odd{{bad}, {0}, -1};
      for (const Layer* l : {&pw, &dw, &gap, &mx, &add, &fc}) {
        INFO(l->type);
        std::vector<Shape> in = l->type == "dense" ? std::vector<Shape>{Shape{2, 16}}
                                : l->type == "add"  ? std::vector<Shape>{Shape{1, 16, 4, 4}, Shape{1, 16, 4, 4}}
                                                    : std::vector<Shape>{Shape{1, 16, 4, 4}};
        LayerInfo info{l, in, core::infer_layer_shapes(*l, in), {}, {}};
        info.input_quant.assign(in.size(), side ? ok : odd);
        info.output_quant = {side ? odd : ok};
        const Routine* r = core::RoutineRegistry::instance().find(l->type, "cpu:qint8:nhwc/xnnpack", nullptr);
        REQUIRE(r);
        Support s = r->supports(info, q);  // an answer, never an abort
        if (!s.ok) continue;
        auto prepared = r->prepare(info, q, {});
        std::vector<Blob> ins, outs;
        for (const Shape& sh : in) ins.push_back(Blob::allocate(sh, DType::qint8, Layout::nhwc));
        outs.push_back(Blob::allocate(info.output_shapes[0], DType::qint8, Layout::nhwc));
        std::vector<const Blob*> in_ptrs;
        for (auto& b : ins) in_ptrs.push_back(&b);
        std::vector<Blob*> out_ptrs{&outs[0]};
        std::vector<char> workspace(prepared->workspace_bytes() + 64);
        RunArgs args{in_ptrs, out_ptrs, workspace.data(), &core::global_pool()};
        prepared->run(args);  // nor at run
      }
    }
  }
}

TEST_CASE("xnnpack: on aarch64 its float32 routines lead the untuned default order, elsewhere the list is as written",
          "[xnnpack][default_order]") {
  // On aarch64 oneDNN 2.6 has reference implementations only for much of it
  // and our own kernels are x86's (docs/arm.md).
  const auto conv = core::RoutineRegistry::instance().default_order("conv2");
  REQUIRE(!conv.empty());
  const auto& first = conv.front();
  const bool leads = std::find(first.begin(), first.end(), "cpu:float32:nhwc/xnnpack") != first.end();
#if defined(__aarch64__)
  CHECK(leads);
  CHECK(first.size() == 1);
#else
  CHECK(!leads);
  CHECK(first.front() == "cpu:float32:nchw16c/onednn");
#endif
}

TEST_CASE("on aarch64 XNNPACK leads the untuned default, float32 and int8", "[xnnpack]") {
#if defined(__aarch64__)
  const auto& reg = core::RoutineRegistry::instance();
  for (const char* type : {"conv2", "dense", "pool2", "add"}) {
    INFO(type);
    CHECK(reg.default_rank(type, "cpu:float32:nhwc/xnnpack").first == 0);
    CHECK(reg.default_rank(type, "cpu:float32:nhwc/xnnpack") < reg.default_rank(type, "cpu/onednn"));
    // oneDNN's aarch64 int8 is mostly reference code; XNNPACK's qs8 kernels are NEON's
    CHECK(reg.default_rank(type, "cpu:qint8:nhwc/xnnpack") < reg.default_rank(type, "cpu:qint8:nhwc/onednn"));
    CHECK(reg.default_rank(type, "cpu:qint8:nhwc/xnnpack") < reg.default_rank(type, "cpu:qint8/onednn"));
  }
#else
  WARN("the aarch64 default order: not this processor's");
#endif
}
