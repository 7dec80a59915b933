// cpu/onednn routines against the cpu/ref oracle: every registered onednn
// routine of a layer type (Catch2 GENERATE over registered_routines, so a new
// schema or type is tested the day it is registered), on randomised shapes
// and parameters, in its own schema (inputs converted from nchw, outputs
// converted back). Outputs are pre-filled with NaN so unwritten elements and
// non-zero channel padding in blocked layouts are caught.
//
// Tolerance: max |got - ref| <= 1e-4 * max |ref| (+1e-6 absolute), per output.
//
// cpu:bfloat16 routines (only where the CPU has AVX-512 BF16 or AMX-BF16; they
// refuse elsewhere and the test says so): inputs are rounded to bfloat16 first
// (the reference sees the same inputs), weights are rounded inside the routine
// and outputs are bfloat16 (8 significant bits, relative rounding 2^-9), so
// the stated tolerance is max |got - ref| <= 1.5e-2 * max |ref| (+1e-3 absolute).
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "support/layout_convert.hpp"
#include "support/run_layer.hpp"

#include <softneuro/session.hpp>
#include <softneuro/routine.hpp>

#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace softneuro;

namespace {

constexpr double kTolerance = 1e-4;
constexpr double kBf16Tolerance = 1.5e-2;

bool is_bf16(const std::string& descriptor) {
  return Schema::parse(descriptor.substr(0, descriptor.rfind('/'))).dtype == DType::bfloat16;
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Element-by-element cast of a blob's whole storage (padding included) between float32 and bfloat16.
Blob cast_storage(const Blob& b, DType to) {
  Blob out = Blob::allocate(b.shape(), to, b.layout());
  if (to == DType::bfloat16) {
    const std::size_t n = b.byte_size() / 4;
    for (std::size_t i = 0; i < n; ++i) out.data_as<uint16_t>()[i] = to_bf16(b.data_as<float>()[i]);
  } else {
    const std::size_t n = b.byte_size() / 2;
    for (std::size_t i = 0; i < n; ++i) out.data_as<float>()[i] = from_bf16(b.data_as<uint16_t>()[i]);
  }
  return out;
}

/// A float32 blob with its values rounded to bfloat16.
Blob round_bf16(const Blob& b) { return cast_storage(cast_storage(b, DType::bfloat16), DType::float32); }

std::vector<std::string> onednn_routines(std::string_view type) {
  std::vector<std::string> out;
  for (const std::string& d : registered_routines(type))
    if (d.size() > 7 && d.compare(d.size() - 7, 7, "/onednn") == 0 &&
        Schema::parse(d.substr(0, d.size() - 7)).dtype != DType::qint8)  // qint8: tests/routines/test_qint8.cpp
      out.push_back(d);
  return out;
}

Blob random_blob(const Shape& shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  Blob b = Blob::allocate(shape);
  for (int64_t i = 0; i < shape.numel(); ++i) b.data_as<float>()[i] = u(rng);
  return b;
}

struct Outcome {
  Support support;
  std::vector<Blob> outputs;  ///< plain
  bool padding_zero = true;
};

/// Runs `layer` with the routine `descriptor` in its schema: inputs are given
/// plain and converted, outputs come back plain. Unsupported: support.ok false.
Outcome run_in_schema(const Layer& layer, const std::vector<Blob>& plain_inputs, const std::string& descriptor) {
  LayerInfo info;
  info.layer = &layer;
  for (const Blob& b : plain_inputs) info.input_shapes.push_back(b.shape());
  info.output_shapes = core::infer_layer_shapes(layer, info.input_shapes);
  Schema schema;
  const Routine* routine = core::RoutineRegistry::instance().find(layer.type, descriptor, &schema);
  REQUIRE(routine);
  Outcome out;
  out.support = routine->supports(info, schema);
  if (!out.support) return out;

  std::vector<Blob> inputs, outputs;
  const bool bf16 = schema.dtype == DType::bfloat16;
  for (const Blob& b : plain_inputs) {
    Blob x = schema.layout == Layout::nchw ? b : test::to_layout(b, schema.layout);
    inputs.push_back(bf16 ? cast_storage(x, DType::bfloat16) : x);
  }
  auto prepared = routine->prepare(info, schema, {});
  for (const Shape& s : info.output_shapes) {
    outputs.push_back(Blob::allocate(s, schema.dtype, schema.layout));
    if (bf16)
      std::fill_n(outputs.back().data_as<uint16_t>(), outputs.back().byte_size() / 2, uint16_t{0x7fc0});  // NaN
    else
      test::fill_bytes(outputs.back(), std::numeric_limits<float>::quiet_NaN());
  }
  const std::size_t ws_bytes = prepared->workspace_bytes();
  std::unique_ptr<void, void (*)(void*)> workspace(
      ws_bytes ? std::aligned_alloc(64, (ws_bytes + 63) / 64 * 64) : nullptr, std::free);
  std::vector<const Blob*> in_ptrs;
  for (const Blob& b : inputs) in_ptrs.push_back(&b);
  std::vector<Blob*> out_ptrs;
  for (Blob& b : outputs) out_ptrs.push_back(&b);
  RunArgs args{in_ptrs, out_ptrs, workspace.get(), &core::global_pool()};
  prepared->run(args);
  prepared->run(args);  // twice: the second run reuses the bound handles
  for (const Blob& o : outputs) {
    const Blob b = bf16 ? cast_storage(o, DType::float32) : o;
    out.padding_zero = out.padding_zero && test::padding_is_zero(b);
    out.outputs.push_back(schema.layout == Layout::nchw ? b : test::to_plain(b));
  }
  return out;
}

/// max |got - want| <= tolerance * max |want| + absolute; NaN anywhere fails.
/// `magnitude`: when given, it replaces max |want| (the bf16 check passes the
/// magnitude before a fused activation: rounding errors scale with that).
void check_close(const Blob& got, const Blob& want, double tolerance = kTolerance, double absolute = 1e-6,
                 double magnitude = -1) {
  REQUIRE(got.shape() == want.shape());
  double max_ref = 0, max_err = 0;
  bool nan = false;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.data_as<float>()[i], g = got.data_as<float>()[i];
    if (std::isnan(g) != std::isnan(w)) nan = true;
    if (std::isfinite(w)) max_ref = std::max(max_ref, std::abs(w));
    if (std::isfinite(w) && std::isfinite(g)) max_err = std::max(max_err, std::abs(g - w));
    else if (w != g && !(std::isnan(w) && std::isnan(g))) nan = true;
  }
  if (magnitude >= 0) max_ref = std::max(max_ref, magnitude);
  INFO("max |ref| = " << max_ref << ", max error = " << max_err);
  CHECK_FALSE(nan);
  CHECK(max_err <= tolerance * max_ref + absolute);
}

bool check_case_exact_inputs(const Layer& layer, const std::vector<Blob>& inputs, const std::string& descriptor,
                             std::string* reason, bool bf16);

/// Runs one case through `descriptor` and cpu/ref and compares; returns
/// whether the routine supported it (with the reason kept for the summary).
/// bfloat16 routines: inputs rounded to bf16 for both, bf16 tolerance.
bool check_case(const Layer& layer, const std::vector<Blob>& inputs, const std::string& descriptor,
                std::string* reason = nullptr) {
  const bool bf16 = is_bf16(descriptor);
  if (bf16) {  // the reference sees the same (rounded) inputs
    std::vector<Blob> rounded;
    for (const Blob& b : inputs) rounded.push_back(round_bf16(b));
    return check_case_exact_inputs(layer, rounded, descriptor, reason, true);
  }
  return check_case_exact_inputs(layer, inputs, descriptor, reason, false);
}

bool check_case_exact_inputs(const Layer& layer, const std::vector<Blob>& inputs, const std::string& descriptor,
                             std::string* reason, bool bf16) {
  Outcome got = run_in_schema(layer, inputs, descriptor);
  if (!got.support) {
    if (reason) *reason = got.support.reason;
    return false;
  }
  std::vector<Blob> want = test::run_layer(layer, inputs, "cpu/ref");
  REQUIRE(got.outputs.size() == want.size());
  CHECK(got.padding_zero);
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!bf16) {
      check_close(got.outputs[i], want[i]);
      continue;
    }
    // bf16 rounds the products before the fused activation: measure against the
    // magnitude of the pre-activation values (clip can make the output tiny).
    double magnitude = -1;
    if (layer.has("act")) {
      Layer plain_layer = layer;
      plain_layer.params.erase("act");
      const Blob pre = test::run_layer(plain_layer, inputs, "cpu/ref")[i];
      magnitude = 0;
      for (int64_t k = 0; k < pre.numel(); ++k)
        if (std::isfinite(pre.data_as<float>()[k])) magnitude = std::max(magnitude, double(std::abs(pre.data_as<float>()[k])));
    }
    check_close(got.outputs[i], want[i], kBf16Tolerance, 1e-3, magnitude);
  }
  return true;
}

/// How many cases a routine supported, and why it refused the others.
struct Tally {
  std::string descriptor;
  int supported = 0, total = 0;
  std::map<std::string, int> reasons;
  std::vector<std::string> refused;  ///< labels of the cases refused

  /// Runs one case (see check_case) and counts it.
  void run(const Layer& layer, const std::vector<Blob>& inputs, const std::string& label = {}) {
    ++total;
    std::string why;
    if (check_case(layer, inputs, descriptor, &why)) {
      ++supported;
    } else {
      ++reasons[why];
      refused.push_back(label.empty() ? why : label + ": " + why);
    }
  }

  /// Every routine must support some case, unless its schema cannot run on this
  /// CPU. SOFTNEURO_TEST_VERBOSE=1 prints the tally and the reasons.
  void check() const {
    if (std::getenv("SOFTNEURO_TEST_VERBOSE")) {
      std::string text = descriptor + " " + std::to_string(supported) + "/" + std::to_string(total) + " supported";
      for (const auto& [why, count] : reasons) text += "\n    " + std::to_string(count) + "x " + why;
      if (std::string(std::getenv("SOFTNEURO_TEST_VERBOSE")) == "2")
        for (const auto& r : refused) text += "\n      refused " + r;
      WARN(text);
    }
    std::string last = reasons.empty() ? std::string() : reasons.rbegin()->first;
    INFO(descriptor << ": " << supported << " of " << total << " cases supported; a reason: " << last);
    // Not this CPU's: nchw16c without AVX-512, or a oneDNN build with no fast
    // code for it (Debian's aarch64 oneDNN 2.6: jit kernels for SVE only).
    if (supported == 0 && (last.find("AVX-512") != std::string::npos ||
                           last.find("only its reference implementation") != std::string::npos)) {
      WARN(descriptor << " not exercised: " << last);
      return;
    }
    CHECK(supported > 0);
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

TEST_CASE("onednn conv2 matches cpu/ref", "[onednn][conv2]") {
  const std::string descriptor = GENERATE(from_range(onednn_routines("conv2")));
  INFO(descriptor);
  std::mt19937 rng(1234);
  Tally tally{descriptor};
  for (int t = 0; t < 36; ++t) {
    // Group kind: 0 plain, 1 depthwise (multiplier 1 or 2), 2 grouped; every
    // fused activation meets every kind.
    const int kind = t % 3, act = (t + t / 6) % 6;
    const int64_t n = (t % 4 == 3) ? 4 : 1;
    // Every other case has channels (per group) in multiples of 16, as real
    // models do: oneDNN's blocked kernels want whole channel blocks.
    const int64_t unit = (t / 3) % 2 ? 16 : 1;
    int64_t group = 1, c, oc;
    if (kind == 0) {
      c = unit * pick(rng, 1, unit > 1 ? 3 : 19);
      oc = unit * pick(rng, 1, unit > 1 ? 3 : 21);
    } else if (kind == 1) {
      c = unit * pick(rng, 1, unit > 1 ? 3 : 24);
      group = c;
      oc = c * (t % 4 == 1 ? 2 : 1);  // depth multiplier 2 now and then
    } else {
      group = pick(rng, 2, 3);
      c = group * unit * pick(rng, 1, unit > 1 ? 2 : 6);
      oc = group * unit * pick(rng, 1, unit > 1 ? 2 : 7);
    }
    const int64_t kh = std::vector<int64_t>{1, 3, 5, 3, 1}[static_cast<std::size_t>(pick(rng, 0, 4))];
    const int64_t kw = (t % 5 == 4) ? std::vector<int64_t>{1, 3, 7}[static_cast<std::size_t>(pick(rng, 0, 2))] : kh;
    const int64_t sh = pick(rng, 1, 3), sw = (t % 6 == 5) ? pick(rng, 1, 3) : sh;
    const int64_t dh = (t % 4 == 1) ? 2 : 1, dw = (t % 8 == 1) ? 1 : dh;
    // Pads up to the kernel's reach (and 2), asymmetric in odd cases; case 12 pads a 1x1.
    const int ph = static_cast<int>(std::min<int64_t>(2, (kh - 1) * dh)), pw = static_cast<int>(std::min<int64_t>(2, (kw - 1) * dw));
    const int64_t pt = t == 12 ? 1 : pick(rng, 0, ph), pl = t == 12 ? 1 : pick(rng, 0, pw);
    const int64_t pb = (t % 2) ? pick(rng, 0, ph) : pt, pr = (t % 2) ? pick(rng, 0, pw) : pl;
    const int64_t h = std::max<int64_t>(pick(rng, 3, 14), (kh - 1) * dh + 1), w = std::max<int64_t>(pick(rng, 3, 14), (kw - 1) * dw + 1);
    std::map<std::string, Blob> weights{{"weight", random_blob({oc, c / group, kh, kw}, rng)}};
    if (t % 3 != 2) weights["bias"] = random_blob({oc}, rng);
    Layer l = test::make_layer("conv2",
                               {{"strides", std::vector<int64_t>{sh, sw}},
                                {"pads", std::vector<int64_t>{pt, pl, pb, pr}},
                                {"dilations", std::vector<int64_t>{dh, dw}},
                                {"group", group}},
                               weights);
    set_act(l, kActs[act], rng);
    std::ostringstream label;
    label << "case " << t << ": n" << n << " c" << c << " oc" << oc << " g" << group << " k" << kh << "x" << kw
          << " s" << sh << "x" << sw << " d" << dh << "x" << dw << " pads " << pt << "," << pl << "," << pb << ","
          << pr << " in " << h << "x" << w << " act " << kActs[act];
    INFO(label.str());
    tally.run(l, {random_blob({n, c, h, w}, rng)}, label.str());
  }
  // Shapes of the real models: a first conv, a 1x1, a depthwise 3x3 stride 2.
  struct Fixed { int64_t c, oc, group, k, s, p, hw; };
  for (Fixed f : {Fixed{3, 32, 1, 3, 2, 1, 33}, Fixed{64, 24, 1, 1, 1, 0, 14}, Fixed{48, 48, 48, 3, 2, 1, 15}}) {
    Layer l = test::make_layer("conv2",
                               {{"strides", std::vector<int64_t>{f.s, f.s}},
                                {"pads", std::vector<int64_t>{f.p, f.p, f.p, f.p}},
                                {"group", f.group}, {"act", std::string("relu")}},
                               {{"weight", random_blob({f.oc, f.c / f.group, f.k, f.k}, rng)},
                                {"bias", random_blob({f.oc}, rng)}});
    tally.run(l, {random_blob({1, f.c, f.hw, f.hw}, rng)});
  }
  tally.check();
}

TEST_CASE("onednn dense matches cpu/ref, on [N,K] and on [..., N, K] (rows over the leading dims)", "[onednn][dense]") {
  const std::string descriptor = GENERATE(from_range(onednn_routines("dense")));
  INFO(descriptor);
  std::mt19937 rng(99);
  Tally tally{descriptor};
  for (int t = 0; t < 18; ++t) {
    const int64_t n = std::vector<int64_t>{1, 4, 7}[static_cast<std::size_t>(t % 3)];
    const int64_t k = pick(rng, 1, 70), o = pick(rng, 1, 40);
    std::map<std::string, Blob> weights{{"weight", random_blob({o, k}, rng)}};
    if (t % 4 != 3) weights["bias"] = random_blob({o}, rng);
    Layer l = test::make_layer("dense", {}, weights);
    set_act(l, kActs[t % 6], rng);
    INFO("case " << t << ": n" << n << " k" << k << " o" << o << " act " << kActs[t % 6]);
    tally.run(l, {random_blob({n, k}, rng)});
  }
  // A transformer's [batch, tokens, hidden] and a rank-4 input: oneDNN refused
  // both, and the PP-OCR recogniser's nine denses fell to Eigen.
  for (const Shape& in : {Shape{2, 3, 6}, Shape{1, 40, 24}, Shape{2, 2, 3, 6}}) {
    Layer l = test::make_layer("dense", {}, {{"weight", random_blob({5, in[in.rank() - 1]}, rng)},
                                             {"bias", random_blob({5}, rng)}});
    set_act(l, "relu", rng);
    INFO("input " << in.to_string());
    std::string why;
    const bool ran = check_case(l, {random_blob(in, rng)}, descriptor, &why);
    INFO(why);
    // (Refused only for the CPU: bf16 without its instructions, or aarch64's Debian oneDNN with reference code alone.)
    CHECK((ran || why.find("CPU lacks") != std::string::npos || why.find("only its reference") != std::string::npos));
  }
  tally.check();

  Layer l1 = test::make_layer("dense", {}, {{"weight", random_blob({5, 6}, rng)}});
  Outcome r = run_in_schema(l1, {random_blob({6}, rng)}, descriptor);
  CHECK_FALSE(r.support.ok);
  if (r.support.reason.find("CPU lacks") == std::string::npos)  // bf16 without the instructions refuses first
    CHECK(r.support.reason.find("rank 1") != std::string::npos);
}

TEST_CASE("onednn pool2 matches cpu/ref", "[onednn][pool2]") {
  const std::string descriptor = GENERATE(from_range(onednn_routines("pool2")));
  INFO(descriptor);
  std::mt19937 rng(7);
  Tally tally{descriptor};
  for (int t = 0; t < 40; ++t) {
    const std::string mode = t % 2 ? "max" : "avg";
    const int64_t n = (t % 5 == 4) ? 4 : 1, c = pick(rng, 1, 21);
    std::map<std::string, Attr> p{{"mode", mode}};
    int64_t h = pick(rng, 3, 13), w = pick(rng, 3, 13);
    if (t % 10 == 9) {
      p["global"] = int64_t{1};
    } else {
      const int64_t kh = pick(rng, 1, 4), kw = (t % 3 == 0) ? pick(rng, 1, 4) : kh;
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
    label << "case " << t << ": " << mode << " c" << c << " in " << h << "x" << w;
    for (const auto& [key, value] : p)
      if (const auto* v = std::get_if<std::vector<int64_t>>(&value))
        label << " " << key << "=" << Shape(*v).to_string();
      else if (const auto* i = std::get_if<int64_t>(&value))
        label << " " << key << "=" << *i;
    INFO(label.str());
    tally.run(l, {random_blob({n, c, h, w}, rng)}, label.str());
  }
  tally.check();
}

TEST_CASE("onednn activations match cpu/ref", "[onednn][eltwise]") {
  for (const char* type : {"relu", "clip", "hardswish", "hardsigmoid", "sigmoid", "tanh", "gelu"}) {
    for (const std::string& descriptor : onednn_routines(type)) {
      INFO(type << " " << descriptor);
      std::mt19937 rng(5);
      Tally tally{descriptor};
      for (int t = 0; t < 6; ++t) {
        std::map<std::string, Attr> p;
        if (std::string(type) == "clip") {
          if (t != 1) p["min"] = -2.0 + t * 0.3;
          if (t != 2) p["max"] = 1.5 + t * 0.2;
        }
        if (std::string(type) == "hardsigmoid") {
          p["alpha"] = 0.1 + 0.05 * t;
          p["beta"] = 0.4 + 0.03 * t;
        }
        if (std::string(type) == "gelu" && t % 2) p["approximate"] = std::string("tanh");
        Layer l = test::make_layer(type, p);
        // Channels: odd ones (padded in blocked layouts) and whole blocks of 16.
        const int64_t c = t % 3 == 0 ? 16 * pick(rng, 1, 2) : pick(rng, 1, 21);
        Shape s = t == 5 ? Shape{3, 37} : Shape{t % 2 ? 4 : 1, c, pick(rng, 1, 9), pick(rng, 1, 9)};
        INFO("shape " << s.to_string());
        tally.run(l, {random_blob(s, rng, -6.0f, 6.0f)});
      }
      tally.check();
    }
  }
}

TEST_CASE("onednn add and mul match cpu/ref (same shapes, channel broadcast)", "[onednn][binary]") {
  for (const char* type : {"add", "mul"}) {
    for (const std::string& descriptor : onednn_routines(type)) {
      INFO(type << " " << descriptor);
      std::mt19937 rng(17);
      Tally tally{descriptor};
      for (int t = 0; t < 8; ++t) {
        const int64_t n = t % 2 ? 4 : 1, c = t < 4 ? 16 * pick(rng, 1, 2) : pick(rng, 1, 21);
        const int64_t h = pick(rng, 1, 9), w = pick(rng, 1, 9);
        Shape a{n, c, h, w}, b = a;
        if (t % 4 == 1) b = Shape{1, c, 1, 1};  // per-channel
        if (t % 4 == 2) b = Shape{n, c, 1, 1};  // per image and channel (SE blocks)
        if (t == 3) a = Shape{1, c, 1, 1};      // the broadcast one first
        if (t == 7) b = Shape{c, 1, 1};         // lower rank (plain layout only)
        INFO("shapes " << a.to_string() << " " << b.to_string());
        std::map<std::string, Attr> p;  // add's fused relu/clip (a residual add)
        if (std::string(type) == "add" && t % 3 == 1) p["act"] = std::string("relu");
        if (std::string(type) == "add" && t % 3 == 2) p = {{"act", std::string("clip")}, {"act_min", -0.25}, {"act_max", 0.5}};
        Layer l = test::make_layer(type, p, {}, 2);
        tally.run(l, {random_blob(a, rng), random_blob(b, rng)});
      }
      tally.check();
    }
  }
}

TEST_CASE("onednn sub and div match cpu/ref, a broadcast first input is refused (they do not commute)", "[onednn][binary]") {
  // (Before, sub and div had XNNPACK alone: where it could not run, as at
  // SOFTNEURO_MAX_CPU_ISA=avx2, YOLOv8n's box decoding ran on cpu/ref.)
  for (const char* type : {"sub", "div"}) {
    const auto routines = onednn_routines(type);
    CHECK(routines.size() >= 4);  // plain, nhwc and the two blocked layouts
    for (const std::string& descriptor : routines) {
      INFO(type << " " << descriptor);
      std::mt19937 rng(23);
      for (const auto& [a, b] : std::vector<std::pair<Shape, Shape>>{{{1, 2, 84, 4}, {1, 2, 84, 4}},
                                                                      {{2, 16, 5, 3}, {1, 16, 1, 1}},
                                                                      {{1, 24, 7, 7}, {1, 24, 7, 7}},
                                                                      {{1, 2, 8400}, {}}}) {  // YOLOv8's x / 2
        if (b.rank() == 0 && descriptor != "cpu/onednn") continue;  // a scalar: the plain layout
        INFO("shapes " << a.to_string() << " " << b.to_string());
        Blob y = random_blob(b, rng);
        if (std::string(type) == "div")  // divisors away from zero
          for (int64_t i = 0; i < y.numel(); ++i) y.data_as<float>()[i] = 0.5f + std::fabs(y.data_as<float>()[i]);
        std::string why;
        const bool ran = check_case(test::make_layer(type, {}, {}, 2), {random_blob(a, rng), y}, descriptor, &why);
        INFO(why);
        CHECK((ran || why.find("CPU lacks") != std::string::npos || why.find("needs AVX-512") != std::string::npos ||
               why.find("only its reference") != std::string::npos));
      }
      Outcome r = run_in_schema(test::make_layer(type, {}, {}, 2),
                                {random_blob({1, 16, 1, 1}, rng), random_blob({1, 16, 4, 4}, rng)}, descriptor);
      CHECK_FALSE(r.support.ok);
    }
  }
}

TEST_CASE("onednn add with a fused relu stays inside its output where channels fill blocks of 8, not 16", "[onednn][binary]") {
  // oneDNN 2.6's binary with an eltwise post-op, nChw8c on AVX-512, 24
  // channels at 64x64: it wrote past the output (heap corruption, a crash in
  // free; found tuning MediaPipe's face detector). The relu is now a second pass there.
  for (const std::string& descriptor : onednn_routines("add")) {
    INFO(descriptor);
    std::mt19937 rng(17);
    Tally tally{descriptor};
    for (const Shape& a : {Shape{1, 24, 64, 64}, Shape{1, 40, 17, 17}, Shape{1, 8, 32, 32}}) {
      INFO("shape " << a.to_string());
      Layer l = test::make_layer("add", {{"act", std::string("relu")}}, {}, 2);
      tally.run(l, {random_blob(a, rng), random_blob(a, rng)});
    }
    tally.check();
  }
}

TEST_CASE("onednn batchnorm matches cpu/ref", "[onednn][batchnorm]") {
  const std::string descriptor = GENERATE(from_range(onednn_routines("batchnorm")));
  INFO(descriptor);
  std::mt19937 rng(3);
  Tally tally{descriptor};
  for (int t = 0; t < 6; ++t) {
    const int64_t c = pick(rng, 1, 21);
    Shape s = t == 5 ? Shape{3, c} : Shape{t % 2 ? 4 : 1, c, pick(rng, 1, 9), pick(rng, 1, 9)};
    Layer l = test::make_layer("batchnorm", {{"epsilon", 1e-3}},
                               {{"scale", random_blob({c}, rng)}, {"bias", random_blob({c}, rng)},
                                {"mean", random_blob({c}, rng)}, {"var", random_blob({c}, rng, 0.1f, 2.0f)}});
    INFO("shape " << s.to_string());
    tally.run(l, {random_blob(s, rng, -3.0f, 3.0f)});
  }
  tally.check();
}

TEST_CASE("onednn concat matches cpu/ref", "[onednn][concat]") {
  const std::string descriptor = GENERATE(from_range(onednn_routines("concat")));
  INFO(descriptor);
  std::mt19937 rng(21);
  Tally tally{descriptor};
  for (int t = 0; t < 8; ++t) {
    const int64_t axis = t < 5 ? 1 : t - 5 == 0 ? 0 : t - 5 == 1 ? 2 : -1;
    const int inputs = 2 + t % 2;
    const int64_t n = t % 3 == 2 ? 4 : 1, h = pick(rng, 1, 7), w = pick(rng, 1, 7);
    std::vector<Blob> in;
    for (int i = 0; i < inputs; ++i) {
      Shape s{n, t == 4 ? 16 : pick(rng, 1, 13), h, w};
      if (axis != 1) {
        s[1] = 5;
        s[axis < 0 ? 3 : static_cast<int>(axis)] = pick(rng, 1, 6);
      }
      in.push_back(random_blob(s, rng));
    }
    Layer l = test::make_layer("concat", {{"axis", axis}}, {}, inputs);
    INFO("case " << t << " axis " << axis);
    tally.run(l, in);
  }
  tally.check();
}

TEST_CASE("onednn softmax matches cpu/ref", "[onednn][softmax]") {
  const std::string descriptor = GENERATE(from_range(onednn_routines("softmax")));
  INFO(descriptor);
  std::mt19937 rng(8);
  Tally tally{descriptor};
  for (auto [s, axis] : {std::pair{Shape{1, 1000}, int64_t{-1}}, std::pair{Shape{4, 37}, int64_t{1}},
                         std::pair{Shape{2, 5, 3, 4}, int64_t{1}}, std::pair{Shape{2, 5, 3, 4}, int64_t{-1}},
                         std::pair{Shape{3, 4, 6}, int64_t{0}}}) {
    Layer l = test::make_layer("softmax", {{"axis", axis}});
    INFO("shape " << s.to_string() << " axis " << axis);
    tally.run(l, {random_blob(s, rng, -5.0f, 5.0f)});
  }
  tally.check();
}

TEST_CASE("onednn layernorm matches cpu/ref", "[onednn][layernorm]") {
  const std::string descriptor = GENERATE(from_range(onednn_routines("layernorm")));
  INFO(descriptor);
  std::mt19937 rng(31);
  Tally tally{descriptor};
  // Odd sizes, batch 1 and 4, one and several normalised dims, with and without bias.
  const std::pair<Shape, int64_t> cases[] = {{Shape{1, 7, 33}, -1}, {Shape{4, 5, 17}, -1}, {Shape{4, 3, 5, 7}, 1},
                                             {Shape{1, 197, 64}, 2},  {Shape{3, 11}, -1},    {Shape{2, 6, 9}, 1}};
  int t = 0;
  for (const auto& [s, axis] : cases) {
    Shape norm;
    const int a = static_cast<int>(axis < 0 ? axis + s.rank() : axis);
    for (int d = a; d < s.rank(); ++d) norm.push_back(s[d]);
    std::map<std::string, Blob> w{{"scale", random_blob(norm, rng, 0.5f, 1.5f)}};
    if (t % 2 == 0) w["bias"] = random_blob(norm, rng);
    Layer l = test::make_layer("layernorm", {{"axis", axis}, {"epsilon", t == 4 ? 1e-3 : 1e-5}}, w);
    INFO("shape " << s.to_string() << " axis " << axis);
    tally.run(l, {random_blob(s, rng, -3.0f, 2.0f)});
    ++t;
  }
  tally.check();
}

TEST_CASE("onednn matmul matches cpu/ref (batch dims broadcast)", "[onednn][matmul]") {
  const std::string descriptor = GENERATE(from_range(onednn_routines("matmul")));
  INFO(descriptor);
  std::mt19937 rng(37);
  Tally tally{descriptor};
  const std::pair<Shape, Shape> cases[] = {
      {Shape{5, 7}, Shape{7, 3}},             {Shape{1, 13, 9}, Shape{1, 9, 11}},
      {Shape{4, 13, 9}, Shape{4, 9, 11}},     {Shape{3, 17, 8}, Shape{3, 8, 17}},
      {Shape{2, 1, 5, 7}, Shape{3, 7, 6}},    {Shape{4, 6, 7}, Shape{7, 5}},
      {Shape{6, 7}, Shape{4, 7, 5}},          {Shape{7}, Shape{4, 7, 3}},
      {Shape{4, 2, 5}, Shape{5}},             {Shape{1, 3, 19, 16}, Shape{1, 3, 16, 19}}};
  for (const auto& [a, b] : cases) {
    INFO("shapes " << a.to_string() << " x " << b.to_string());
    Layer l = test::make_layer("matmul", {}, {}, 2);
    tally.run(l, {random_blob(a, rng), random_blob(b, rng)});
  }
  tally.check();
  // Every case, but where the CPU lacks the routine's instructions (bfloat16 below AVX-512 BF16).
  if (tally.supported > 0 || descriptor.find("bfloat16") == std::string::npos) CHECK(tally.supported == tally.total);
}

TEST_CASE("onednn routines say why they refuse", "[onednn]") {
  std::mt19937 rng(1);
  // nchw16c: only where oneDNN can use AVX-512; the reason names it otherwise.
  Layer conv = test::make_layer("conv2", {}, {{"weight", random_blob({16, 16, 3, 3}, rng)}});
  LayerInfo info{&conv, {Shape{1, 16, 6, 6}}, {Shape{1, 16, 4, 4}}, {}, {}};
  Schema s16{Device::cpu, DType::float32, Layout::nchw16c};
  const Routine* r = core::RoutineRegistry::instance().find("conv2", "cpu:float32:nchw16c/onednn", nullptr);
  REQUIRE(r);
  Support why = r->supports(info, s16);
  if (!why) CHECK(why.reason.find("AVX-512") != std::string::npos);
  // Blocked layouts need rank-4 blobs.
  Layer relu = test::make_layer("relu");
  LayerInfo r2{&relu, {Shape{3, 37}}, {Shape{3, 37}}, {}, {}};
  const Routine* rr = core::RoutineRegistry::instance().find("relu", "cpu:float32:nchw8c/onednn", nullptr);
  REQUIRE(rr);
  Support no = rr->supports(r2, Schema{Device::cpu, DType::float32, Layout::nchw8c});
  CHECK_FALSE(no.ok);
  CHECK(no.reason.find("rank-4") != std::string::npos);
  // A schema the routine does not list.
  CHECK_FALSE(rr->supports(r2, Schema{}).ok);
}

TEST_CASE("onednn routines outrank cpu/ref in the untuned default", "[onednn]") {
  for (const char* type : {"conv2", "dense", "pool2", "relu", "add", "batchnorm", "concat", "softmax",
                           "layernorm", "matmul"}) {
    Schema schema;
    const Routine* ref = core::RoutineRegistry::instance().find(type, "cpu/ref", &schema);
    const Routine* dnn = core::RoutineRegistry::instance().find(type, "cpu/onednn", &schema);
    REQUIRE(ref);
    REQUIRE(dnn);
    CHECK(core::RoutineRegistry::instance().default_rank(type, "cpu/onednn") <
          core::RoutineRegistry::instance().default_rank(type, "cpu/ref"));
  }
}

TEST_CASE("onednn conv2 runs with one thread and with two", "[onednn][threads]") {
  std::mt19937 rng(2);
  Layer l = test::make_layer("conv2", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}},
                             {{"weight", random_blob({16, 16, 3, 3}, rng)}});
  Blob x = random_blob({1, 16, 12, 12}, rng);
  const int before = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::string why;
    if (check_case(l, {x}, "cpu:float32:nchw8c/onednn", &why)) continue;
    INFO(why);
    // Debian's aarch64 oneDNN has no fast nchw8c convolution without SVE: the routine refuses.
    CHECK((!core::cpu_features().avx2 && why.find("only its reference implementation") != std::string::npos));
  }
  set_num_threads(before);
}

// oneDNN 2.6's aarch64 jit (SVE) skips a fused hardswish (its post-op injector
// has no case for it: a depthwise conv gave its pre-activation under qemu's
// SVE-512) and turns NaN into 0 in leaky_relu (FMINNM/FMAXNM): there its
// routines refuse both, naming the cause, whatever the CPU's vector length.
TEST_CASE("onednn on aarch64 refuses what its jit kernels compute wrong", "[onednn][arm]") {
#if !defined(__aarch64__)
  SUCCEED("x86: oneDNN's x86 kernels compute both");
#else
  std::mt19937 rng(5);
  Layer conv = test::make_layer("conv2", {{"group", int64_t{8}}, {"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                          {"act", std::string("hardswish")}},
                                {{"weight", random_blob({8, 1, 3, 3}, rng)}});
  for (const std::string& descriptor : onednn_routines("conv2")) {
    INFO(descriptor);
    const Outcome o = run_in_schema(conv, {random_blob({1, 8, 9, 9}, rng)}, descriptor);
    REQUIRE_FALSE(o.support);
    if (descriptor.find("bfloat16") == std::string::npos && descriptor.find("nchw16c") == std::string::npos)
      CHECK_THAT(o.support.reason, Catch::Contains("hardswish"));
  }
  Layer leaky = test::make_layer("leaky_relu", {{"alpha", 0.1}});
  LayerInfo info;
  info.layer = &leaky;
  info.input_shapes = {Shape{1, 8, 4, 4}};
  info.output_shapes = info.input_shapes;
  info.keep_nan = true;
  Schema schema;
  const Routine* r = core::RoutineRegistry::instance().find("leaky_relu", "cpu/onednn", &schema);
  REQUIRE(r);
  const Support s = r->supports(info, schema);
  CHECK_FALSE(s);
  CHECK_THAT(s.reason, Catch::Contains("NaN"));
#endif
}

// A oneDNN primitive fixes its thread count when created: while other
// processes hold the CPUs (the contention guard runs regions on one thread),
// a primitive made for two threads still started its second and waited a
// scheduler slice for it, and the run set OpenMP's count back to two. The
// layer now runs a plan made for one thread, with the same values (up to
// summation order).
TEST_CASE("onednn layers run on one thread while the contention guard has shrunk the team", "[onednn][threads]") {
  set_num_threads(2);
  std::mt19937 rng(9);
  Layer conv = test::make_layer("conv2", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}},
                                {{"weight", random_blob({32, 16, 3, 3}, rng)}, {"bias", random_blob({32}, rng)}});
  LayerInfo info;
  info.layer = &conv;
  info.input_shapes = {Shape{1, 16, 20, 20}};
  info.output_shapes = core::infer_layer_shapes(conv, info.input_shapes);
  Schema schema;
  const Routine* routine = core::RoutineRegistry::instance().find("conv2", "cpu/onednn", &schema);
  REQUIRE(routine);
  if (!routine->supports(info, schema)) {
    WARN("cpu/onednn does not run this conv here: " << routine->supports(info, schema).reason);
    set_num_threads(0);
    return;
  }
  std::unique_ptr<PreparedRoutine> prepared = routine->prepare(info, schema, {});
  const Blob x = random_blob(info.input_shapes[0], rng);
  auto run = [&] { return test::values(test::run_prepared(*prepared, {x}, info.output_shapes)[0]); };
  // The full team's plan with the guard off: earlier tests in this process, or
  // real stalls beside a parallel ctest, may have shrunk the team already.
  core::contention_guard().set_enabled(false);
  const std::vector<float> team = run();
  REQUIRE(omp_get_max_threads() == 2);
  // Two stalled regions: the guard shrinks the team for its shortest wait (0.1 s).
  // (From a clear state: earlier tests in this process leave a window open.)
  core::contention_guard().set_enabled(true);
  const auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  core::contention_guard().record(5'000'000, now());
  core::contention_guard().record(5'000'000, now());
  REQUIRE_FALSE(core::contention_guard().full_team(now()));
  const std::vector<float> alone = run();
  CHECK(omp_get_max_threads() == 1);
  // The same values up to summation order (oneDNN may block a one-thread plan otherwise).
  REQUIRE(alone.size() == team.size());
  for (std::size_t i = 0; i < team.size(); ++i) REQUIRE(alone[i] == Approx(team[i]).margin(1e-5));
  // The full team's plan again (the guard off, as for `team`).
  core::contention_guard().set_enabled(false);
  CHECK(run() == team);
  CHECK(omp_get_max_threads() == 2);
  core::contention_guard().set_enabled(true);  // on, and clear, for the tests after this one
  set_num_threads(0);
}
