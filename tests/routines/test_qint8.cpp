// cpu:qint8 routines against a float32 reference of the same quantised
// computation: every registered qint8 routine of a layer type (GENERATE over
// registered_routines, so routines added later are tested too), in its own
// schema, on randomised shapes and parameters (strides, pads, dilations,
// groups, depthwise, odd sizes, batch 1 and 4).
//
// The reference dequantises the int8 inputs, replaces conv2/dense weights by
// their per-output-channel quantised values (s_w = max|w|/127, round(w/s_w))
// and the bias by its int32 quantisation at s_in*s_w, runs cpu/ref, and
// quantises the result with the output's quantisation (chosen from the
// reference's range, as calibration would). Tolerance: every element within
// one quantisation step; where the arithmetic is integer (same scale in and
// out: max pool, relu, copies, concat) bit-exact; conv/dense also mostly
// exact (their int32 accumulators are exact; only the requantisation rounds).
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/prepared_weights.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "profiler/calibrate.hpp"
#include "routines/cpu/pair_fix.hpp"
#include "support/run_layer.hpp"

#include <softneuro/routine.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace softneuro;

namespace {

const char* const kCoveredTypes[] = {"conv2", "dense", "pool2", "add", "mul", "concat", "split", "resize", "relu", "clip",
                                     "hardsigmoid", "hardswish", "sigmoid", "silu", "tanh", "gelu", "flatten", "reshape", "identity",
                                     "fake_quant", "pad"};
/// Types computed by a table of the reference's own formula: bit-exact.
const std::set<std::string> kTableTypes = {"hardsigmoid", "hardswish", "sigmoid", "silu", "tanh", "gelu"};

std::vector<std::string> qint8_routines(std::string_view type) {
  std::vector<std::string> out;
  for (const std::string& d : registered_routines(type))
    if (Schema::parse(d.substr(0, d.rfind('/'))).dtype == DType::qint8) out.push_back(d);
  return out;
}

/// An int8 blob in logical (nchw) order with its quantisation.
struct QBlob {
  Shape shape;
  std::vector<int8_t> q;
  QuantParams quant;
};

QuantParams make_quant(float scale, int32_t zp) { return QuantParams{{scale}, {zp}, -1}; }

QuantParams random_quant(std::mt19937& rng) {
  std::uniform_real_distribution<float> s(0.004f, 0.06f);
  std::uniform_int_distribution<int> z(-110, 110);
  return make_quant(s(rng), z(rng));
}

QBlob random_qblob(const Shape& shape, std::mt19937& rng, QuantParams quant) {
  QBlob b{shape, std::vector<int8_t>(static_cast<std::size_t>(shape.numel())), std::move(quant)};
  std::uniform_int_distribution<int> d(-128, 127);
  for (auto& v : b.q) v = static_cast<int8_t>(d(rng));
  return b;
}

Blob dequantize(const QBlob& b) {
  Blob f = Blob::allocate(b.shape);
  for (std::size_t i = 0; i < b.q.size(); ++i)
    f.data_as<float>()[i] = b.quant.scales[0] * static_cast<float>(b.q[i] - b.quant.zero_points[0]);
  return f;
}

std::vector<int8_t> quantize(const Blob& f, const QuantParams& q) {
  std::vector<int8_t> out(static_cast<std::size_t>(f.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    double v = std::nearbyint(double(f.data_as<float>()[i]) / q.scales[0]) + q.zero_points[0];
    out[i] = static_cast<int8_t>(std::clamp(std::isfinite(v) ? v : -128.0, -128.0, 127.0));
  }
  return out;
}

/// Position of logical element i (nchw order) in a blob of `shape` laid out in `layout`.
int64_t physical(const Shape& s, Layout layout, int64_t i) {
  if (layout == Layout::nchw || s.rank() < 3) return i;
  int64_t sp = 1;
  for (int d = 2; d < s.rank(); ++d) sp *= s[d];
  const int64_t c = s[1], n = i / (c * sp), ch = (i / sp) % c, p = i % sp;
  return (n * sp + p) * c + ch;
}

/// The qint8 routine's outputs (logical order), or its refusal.
struct QRun {
  Support support;
  std::vector<std::vector<int8_t>> outputs;
  std::vector<RoutineParams> param_points;  ///< every combination of the routine's parameter space here
};

QRun run_qint8(const Layer& layer, const std::vector<QBlob>& ins, const std::vector<QuantParams>& out_quant,
               const std::string& descriptor, const RoutineParams& params = {}) {
  LayerInfo info;
  info.layer = &layer;
  for (const auto& b : ins) info.input_shapes.push_back(b.shape), info.input_quant.push_back(b.quant);
  info.output_shapes = core::infer_layer_shapes(layer, info.input_shapes);
  info.output_quant = out_quant;
  Schema schema;
  const Routine* routine = core::RoutineRegistry::instance().find(layer.type, descriptor, &schema);
  REQUIRE(routine);
  QRun r;
  r.support = routine->supports(info, schema);
  if (!r.support) return r;
  r.param_points = param_combinations(routine->param_space(info, schema));
  auto prepared = routine->prepare(info, schema, params);
  std::vector<Blob> inputs, outputs;
  for (const auto& b : ins) {
    Blob x = Blob::allocate(b.shape, DType::qint8, schema.layout);
    for (int64_t i = 0; i < b.shape.numel(); ++i) x.data_as<int8_t>()[physical(b.shape, schema.layout, i)] = b.q[static_cast<std::size_t>(i)];
    x.quant() = b.quant;
    inputs.push_back(x);
  }
  for (std::size_t k = 0; k < info.output_shapes.size(); ++k) {
    Blob y = Blob::allocate(info.output_shapes[k], DType::qint8, schema.layout);
    std::memset(y.data(), 0x5a, y.byte_size());  // unwritten elements show up
    y.quant() = out_quant[k];
    outputs.push_back(y);
  }
  const std::size_t ws = prepared->workspace_bytes();
  std::unique_ptr<void, void (*)(void*)> workspace(ws ? std::aligned_alloc(64, (ws + 63) / 64 * 64) : nullptr, std::free);
  std::vector<const Blob*> in_ptrs;
  for (const Blob& b : inputs) in_ptrs.push_back(&b);
  std::vector<Blob*> out_ptrs;
  for (Blob& b : outputs) out_ptrs.push_back(&b);
  RunArgs args{in_ptrs, out_ptrs, workspace.get(), &core::global_pool()};
  prepared->run(args);
  for (Blob& b : outputs) std::memset(b.data(), 0xa5, b.byte_size());
  prepared->run(args);  // twice: nothing may depend on the first run or on the outputs' old contents
  for (const Blob& b : outputs) {
    std::vector<int8_t> v(static_cast<std::size_t>(b.numel()));
    for (int64_t i = 0; i < b.numel(); ++i) v[static_cast<std::size_t>(i)] = b.data_as<int8_t>()[physical(b.shape(), schema.layout, i)];
    r.outputs.push_back(std::move(v));
  }
  return r;
}

/// The layer as the reference runs it: conv2/dense weights and bias replaced by
/// their quantised values (the project's weight convention, or 7-bit weights
/// for routine parameter u8s8: qmax 63), dequantised.
Layer reference_layer(const Layer& layer, const QuantParams& in_quant, int qmax = 127) {
  Layer l = layer;
  if (layer.type != "conv2" && layer.type != "dense") return l;
  const Blob& w = layer.weight("weight");
  const int64_t oc = w.shape()[0], k = w.numel() / oc;
  Blob wq = Blob::allocate(w.shape());
  const float* src = w.data_as<float>();
  std::vector<float> sw(static_cast<std::size_t>(oc));
  for (int64_t o = 0; o < oc; ++o) {
    float mx = 0;
    for (int64_t i = 0; i < k; ++i) mx = std::max(mx, std::fabs(src[o * k + i]));
    const float s = mx > 0 ? mx / static_cast<float>(qmax) : 1.0f;
    sw[static_cast<std::size_t>(o)] = s;
    for (int64_t i = 0; i < k; ++i)
      wq.data_as<float>()[o * k + i] = static_cast<float>(std::clamp(static_cast<int>(std::nearbyint(src[o * k + i] / s)), -qmax, qmax)) * s;
  }
  l.weights["weight"] = wq;
  if (const Blob* b = layer.find_weight("bias")) {
    Blob bq = Blob::allocate(b->shape());
    const double sx = in_quant.scales[0];
    for (int64_t o = 0; o < oc; ++o) {
      const double unit = sx * double(sw[static_cast<std::size_t>(o)]);
      bq.data_as<float>()[o] = static_cast<float>(std::nearbyint(double(b->data_as<float>()[o]) / unit) * unit);
    }
    l.weights["bias"] = bq;
  }
  return l;
}

struct Case {
  std::string label;
  Layer layer;
  std::vector<QBlob> inputs;
  /// Output quantisation: empty: from the reference output's range.
  std::vector<QuantParams> out_quant;
  bool exact = false;  ///< integer arithmetic: bit-exact expected
};

struct Tally {
  int supported = 0, total = 0;
  std::map<std::string, int> reasons;
};

void check_case(const Case& c, const std::string& descriptor, Tally& tally) {
  ++tally.total;
  INFO(descriptor << " on " << c.label);
  // The float32 reference of the quantised computation.
  std::vector<Blob> fin;
  for (const auto& b : c.inputs) fin.push_back(dequantize(b));
  Layer ref_layer = reference_layer(c.layer, c.inputs[0].quant);
  std::vector<Blob> want = test::run_layer(ref_layer, fin, "cpu/ref");
  std::vector<QuantParams> out_quant = c.out_quant;
  if (out_quant.empty())
    for (const Blob& w : want) {
      double lo = 0, hi = 0;
      for (int64_t i = 0; i < w.numel(); ++i)
        if (std::isfinite(w.data_as<float>()[i])) lo = std::min(lo, double(w.data_as<float>()[i])), hi = std::max(hi, double(w.data_as<float>()[i]));
      out_quant.push_back(profiler::quant_from_range(lo, hi));
    }
  QRun got = run_qint8(c.layer, c.inputs, out_quant, descriptor);
  if (!got.support) {
    ++tally.reasons[got.support.reason];
    return;
  }
  ++tally.supported;
  // The default parameters, then every point of the parameter space (e.g. vnni=0/1).
  std::vector<RoutineParams> points{{}};
  for (const RoutineParams& p : got.param_points)
    if (!p.empty()) points.push_back(p);
  for (std::size_t pi = 0; pi < points.size(); ++pi) {
    std::string point;
    for (const auto& [k, v] : points[pi]) point += fmt::format(" {}={}", k, v);
    INFO("parameters:" << (point.empty() ? " default" : point));
    if (pi > 0) got = run_qint8(c.layer, c.inputs, out_quant, descriptor, points[pi]);
    if (routine_param(points[pi], "u8s8", 0) != 0)
      want = test::run_layer(reference_layer(c.layer, c.inputs[0].quant, 63), fin, "cpu/ref");
    REQUIRE(got.outputs.size() == want.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      std::vector<int8_t> wq = quantize(want[k], out_quant[k]);
      REQUIRE(got.outputs[k].size() == wq.size());
      int64_t off = 0, worst = 0, first_bad = -1;
      for (std::size_t i = 0; i < wq.size(); ++i) {
        const int64_t d = std::abs(int64_t(got.outputs[k][i]) - int64_t(wq[i]));
        off += d != 0;
        if (d > worst) worst = d, first_bad = static_cast<int64_t>(i);
      }
      INFO("output " << k << ": " << off << " of " << wq.size() << " elements differ, worst by " << worst
                     << (first_bad >= 0 ? " at " + std::to_string(first_bad) + " (got " + std::to_string(got.outputs[k][static_cast<std::size_t>(first_bad)]) +
                                              ", want " + std::to_string(wq[static_cast<std::size_t>(first_bad)]) + ")"
                                        : std::string()));
      if (c.exact) CHECK(off == 0);
      CHECK(worst <= 1);
      // Only ties and float rounding of the requantisation may differ.
      CHECK(off <= 2 + static_cast<int64_t>(wq.size()) / 20);
    }
  }
}

// ---------------------------------------------------------------------------
// Case generators, one per layer type.

int pick(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

Blob normal_blob(const Shape& s, std::mt19937& rng, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  Blob b = Blob::allocate(s);
  for (int64_t i = 0; i < s.numel(); ++i) b.data_as<float>()[i] = d(rng);
  return b;
}

void add_activation(std::map<std::string, Attr>& p, std::mt19937& rng, std::string& label) {
  switch (pick(rng, 0, 5)) {
    case 1: p["act"] = std::string("relu"); break;
    case 2:
      p["act"] = std::string("clip");
      p["act_min"] = 0.0;
      p["act_max"] = 0.5;
      break;
    case 3: p["act"] = std::string("hardswish"); break;
    case 4:
      p["act"] = std::string("hardsigmoid");
      p["act_alpha"] = 0.25;
      p["act_beta"] = 0.5;
      break;
    default: break;
  }
  if (p.count("act")) label += " act=" + std::get<std::string>(p["act"]);
}

bool shapes_ok(const Layer& l, const std::vector<Shape>& in) {
  try {
    core::infer_layer_shapes(l, in);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::vector<Case> conv_cases(std::mt19937& rng, int count) {
  std::vector<Case> out;
  while (static_cast<int>(out.size()) < count) {
    const int kind = pick(rng, 0, 3);  // 0,1: dense groups; 2: grouped; 3: depthwise
    const int64_t n = pick(rng, 0, 5) == 0 ? 4 : 1;
    int64_t c = pick(rng, 1, 24), group = 1, oc = pick(rng, 1, 40);
    if (kind == 2) {
      group = pick(rng, 2, 4);
      c = group * pick(rng, 1, 6);
      oc = group * pick(rng, 1, 9);
    } else if (kind == 3) {
      c = pick(rng, 1, 40);
      group = c;
      oc = c;
    }
    if (kind < 2 && pick(rng, 0, 9) == 0) c = pick(rng, 120, 160);  // K = c*kh*kw > 1024 with 3x3 and 5x5
    const int64_t h = pick(rng, 1, 13), w = pick(rng, 1, 13);
    const int64_t k = std::array<int64_t, 5>{1, 1, 3, 3, 5}[static_cast<std::size_t>(pick(rng, 0, 4))];
    const int64_t kh = k, kw = pick(rng, 0, 3) == 0 ? pick(rng, 1, 3) : k;
    std::map<std::string, Attr> p;
    p["strides"] = std::vector<int64_t>{pick(rng, 1, 3), pick(rng, 1, 2)};
    p["pads"] = std::vector<int64_t>{pick(rng, 0, 2), pick(rng, 0, 2), pick(rng, 0, 2), pick(rng, 0, 2)};
    p["dilations"] = std::vector<int64_t>{pick(rng, 0, 4) == 0 ? 2 : 1, 1};
    p["group"] = group;
    std::ostringstream label;
    label << "conv2 n=" << n << " c=" << c << " " << h << "x" << w << " oc=" << oc << " k=" << kh << "x" << kw
          << " group=" << group << " strides=" << std::get<std::vector<int64_t>>(p["strides"])[0] << ","
          << std::get<std::vector<int64_t>>(p["strides"])[1];
    std::string lab = label.str();
    add_activation(p, rng, lab);
    std::map<std::string, Blob> weights{{"weight", normal_blob(Shape{oc, c / group, kh, kw}, rng, 0.3f)}};
    if (pick(rng, 0, 3)) weights["bias"] = normal_blob(Shape{oc}, rng, 0.5f);
    Layer l = test::make_layer("conv2", p, weights);
    Shape in{n, c, h, w};
    if (!shapes_ok(l, {in})) continue;
    out.push_back({lab, l, {random_qblob(in, rng, random_quant(rng))}, {}, false});
  }
  // And ResNet's 3x3 convolutions (stride 1, one group: cpu:qint8:nhwc/winograd's), padded on some sides.
  for (int i = 0; i < 12; ++i) {
    const int64_t n = pick(rng, 1, 2), c = pick(rng, 1, 48), oc = pick(rng, 1, 40), h = pick(rng, 3, 13), w = pick(rng, 3, 13);
    std::map<std::string, Attr> p;
    p["pads"] = std::vector<int64_t>{pick(rng, 0, 1), pick(rng, 0, 1), pick(rng, 0, 1), pick(rng, 0, 1)};
    std::string lab = fmt::format("conv2 3x3 n={} c={} {}x{} oc={}", n, c, h, w, oc);
    add_activation(p, rng, lab);
    std::map<std::string, Blob> weights{{"weight", normal_blob(Shape{oc, c, 3, 3}, rng, 0.3f)}};
    if (pick(rng, 0, 3)) weights["bias"] = normal_blob(Shape{oc}, rng, 0.5f);
    Layer l = test::make_layer("conv2", p, weights);
    out.push_back({lab, l, {random_qblob(Shape{n, c, h, w}, rng, random_quant(rng))}, {}, false});
  }
  return out;
}

std::vector<Case> dense_cases(std::mt19937& rng, int count) {
  std::vector<Case> out;
  for (int i = 0; i < count; ++i) {
    // Some long dot products (K > 1024: the K-blocked AVX2 path).
    const int64_t k = i % 5 == 4 ? pick(rng, 1025, 2600) : pick(rng, 1, 70), o = pick(rng, 1, 40);
    Shape in = pick(rng, 0, 3) == 0 ? Shape{2, pick(rng, 1, 3), k} : Shape{pick(rng, 0, 2) ? 1 : pick(rng, 2, 7), k};
    std::map<std::string, Attr> p;
    std::string lab = "dense " + in.to_string() + " o=" + std::to_string(o);
    add_activation(p, rng, lab);
    std::map<std::string, Blob> weights{{"weight", normal_blob(Shape{o, k}, rng, 0.2f)}};
    if (pick(rng, 0, 2)) weights["bias"] = normal_blob(Shape{o}, rng, 0.5f);
    out.push_back({lab, test::make_layer("dense", p, weights), {random_qblob(in, rng, random_quant(rng))}, {}, false});
  }
  // Rows beyond every row blocking (a sequence model's time steps x batch).
  out.push_back({"dense [3200,96] o=40", test::make_layer("dense", {}, {{"weight", normal_blob(Shape{40, 96}, rng, 0.2f)}}),
                 {random_qblob(Shape{3200, 96}, rng, random_quant(rng))}, {}, false});
  return out;
}

std::vector<Case> pool_cases(std::mt19937& rng, int count) {
  std::vector<Case> out;
  while (static_cast<int>(out.size()) < count) {
    const bool is_max = pick(rng, 0, 1) == 0, global = pick(rng, 0, 5) == 0;
    Shape in{pick(rng, 0, 5) == 0 ? 4 : 1, pick(rng, 1, 40), pick(rng, 1, 12), pick(rng, 1, 12)};
    std::map<std::string, Attr> p{{"mode", std::string(is_max ? "max" : "avg")}};
    std::string lab = std::string("pool2 ") + (is_max ? "max " : "avg ") + in.to_string();
    if (global) {
      p["global"] = int64_t{1};
      lab += " global";
    } else {
      const int64_t k = pick(rng, 1, 4);
      p["kernel"] = std::vector<int64_t>{k, pick(rng, 1, 4)};
      p["strides"] = std::vector<int64_t>{pick(rng, 1, 3), pick(rng, 1, 3)};
      const int64_t pad = pick(rng, 0, 1);
      p["pads"] = std::vector<int64_t>{pad, pad, pad, 0};
      p["ceil_mode"] = int64_t{pick(rng, 0, 1)};
      p["count_include_pad"] = int64_t{pick(rng, 0, 1)};
      lab += " k=" + std::to_string(k) + " pad=" + std::to_string(pad);
    }
    Layer l = test::make_layer("pool2", p);
    if (!shapes_ok(l, {in})) continue;
    QuantParams q = random_quant(rng);
    const bool same = is_max && pick(rng, 0, 1) == 0;
    out.push_back({lab + (same ? " same-quant" : ""), l, {random_qblob(in, rng, q)}, same ? std::vector<QuantParams>{q} : std::vector<QuantParams>{}, same});
  }
  return out;
}

Shape random_shape(std::mt19937& rng) {
  switch (pick(rng, 0, 3)) {
    case 0: return Shape{pick(rng, 1, 4), pick(rng, 1, 33)};
    case 1: return Shape{pick(rng, 1, 2), pick(rng, 1, 20), pick(rng, 1, 9)};
    default: return Shape{pick(rng, 0, 4) == 0 ? 4 : 1, pick(rng, 1, 40), pick(rng, 1, 11), pick(rng, 1, 11)};
  }
}

std::vector<Case> add_cases(std::mt19937& rng, int count) {
  std::vector<Case> out;
  for (int i = 0; i < count; ++i) {
    Shape s = random_shape(rng);
    std::map<std::string, Attr> p;  // a fused relu or clip (ResNet's add -> relu)
    if (i % 3 == 1) p["act"] = std::string("relu");
    if (i % 3 == 2) p = {{"act", std::string("clip")}, {"act_min", -0.5}, {"act_max", 1.0}};
    out.push_back({"add " + s.to_string() + (p.empty() ? "" : " " + std::get<std::string>(p["act"])), test::make_layer("add", p, {}, 2),
                   {random_qblob(s, rng, random_quant(rng)), random_qblob(s, rng, random_quant(rng))}, {}, false});
  }
  return out;
}

std::vector<Case> mul_cases(std::mt19937& rng, int count) {
  std::vector<Case> out;
  for (int i = 0; i < count; ++i) {
    Shape s = random_shape(rng);
    Shape t = s;
    const int kind = s.rank() >= 3 ? pick(rng, 0, 2) : 0;  // 0: same shapes; 1, 2: a per-channel gate first or second
    if (kind) {
      for (int d = 2; d < t.rank(); ++d) t[d] = 1;
      if (pick(rng, 0, 1)) t[0] = 1;
    }
    std::vector<QBlob> ins{random_qblob(s, rng, random_quant(rng)), random_qblob(t, rng, random_quant(rng))};
    if (kind == 2) std::swap(ins[0], ins[1]);
    out.push_back({"mul " + ins[0].shape.to_string() + " x " + ins[1].shape.to_string(), test::make_layer("mul", {}, {}, 2), ins, {}, false});
  }
  return out;
}

std::vector<Case> concat_cases(std::mt19937& rng, int count) {
  std::vector<Case> out;
  for (int i = 0; i < count; ++i) {
    Shape base = random_shape(rng);
    const int axis = pick(rng, 0, 2) ? 1 : pick(rng, 0, base.rank() - 1);
    const int inputs = pick(rng, 1, 3);
    const bool same = pick(rng, 0, 2) == 0;
    QuantParams shared = random_quant(rng);
    std::vector<QBlob> ins;
    for (int k = 0; k < inputs; ++k) {
      Shape s = base;
      s[axis] = pick(rng, 1, 9);
      ins.push_back(random_qblob(s, rng, same ? shared : random_quant(rng)));
    }
    out.push_back({"concat axis=" + std::to_string(axis) + " of " + std::to_string(inputs) + " like " + base.to_string() + (same ? " same-quant" : ""),
                   test::make_layer("concat", {{"axis", int64_t{axis}}}, {}, inputs), ins,
                   same ? std::vector<QuantParams>{shared} : std::vector<QuantParams>{}, same});
  }
  return out;
}

std::vector<Case> split_cases(std::mt19937& rng, int count) {
  std::vector<Case> out;
  for (int i = 0; i < count; ++i) {
    Shape in = random_shape(rng);
    const int axis = pick(rng, 0, 2) ? 1 : pick(rng, 0, in.rank() - 1);
    in[axis] = pick(rng, 2, 12);
    // Two to four parts of random sizes.
    std::vector<int64_t> sizes;
    int64_t left = in[axis];
    while (left > 0 && sizes.size() < 3) {
      const int64_t s = pick(rng, 1, static_cast<int>(left));
      sizes.push_back(s);
      left -= s;
    }
    if (left > 0) sizes.push_back(left);
    if (sizes.size() == 1) sizes = {in[axis] - 1, 1};
    const bool same = pick(rng, 0, 2) == 0;
    QuantParams q = random_quant(rng);
    Layer l = test::make_layer("split", {{"axis", int64_t{axis}}, {"split", sizes}});
    l.outputs.clear();
    for (std::size_t k = 0; k < sizes.size(); ++k) l.outputs.push_back("y" + std::to_string(k));
    out.push_back({"split axis=" + std::to_string(axis) + " of " + in.to_string() + " into " + std::to_string(sizes.size()) +
                       (same ? " same-quant" : ""),
                   l, {random_qblob(in, rng, q)}, same ? std::vector<QuantParams>(sizes.size(), q) : std::vector<QuantParams>{}, same});
  }
  return out;
}

/// Nearest resizes at one quantisation (what a QDQ YOLOv8's upsampling is), and
/// TensorFlow Lite's bilinear ones: bit-exact.
std::vector<Case> resize_cases(std::mt19937& rng, int count) {
  const char* transforms[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"};
  const char* roundings[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  std::vector<Case> out;
  for (int i = 0; i < count; ++i) {
    Shape in{pick(rng, 0, 3) == 0 ? 2 : 1, pick(rng, 1, 24), pick(rng, 1, 9), pick(rng, 1, 9)};
    std::map<std::string, Attr> p{{"mode", std::string("nearest")},
                                  {"coordinate_transformation_mode", std::string(transforms[pick(rng, 0, 4)])},
                                  {"nearest_mode", std::string(roundings[pick(rng, 0, 3)])}};
    const double factors[] = {2.0, 3.0, 0.5, 1.5};
    if (pick(rng, 0, 2)) p["scales"] = std::vector<double>{1, 1, factors[pick(rng, 0, 3)], factors[pick(rng, 0, 3)]};
    else p["sizes"] = std::vector<int64_t>{in[0], in[1], pick(rng, 1, 13), pick(rng, 1, 13)};
    if (p.count("scales") && (in[2] * std::get<std::vector<double>>(p["scales"])[2] < 1 || in[3] * std::get<std::vector<double>>(p["scales"])[3] < 1))
      p["scales"] = std::vector<double>{1, 1, 2, 2};
    QuantParams q = random_quant(rng);
    out.push_back({"resize " + in.to_string() + " " + std::get<std::string>(p["coordinate_transformation_mode"]), test::make_layer("resize", p),
                   {random_qblob(in, rng, q)}, {q}, true});
  }
  // TensorFlow Lite's bilinear resize (requantize = tflite): an int8 blend,
  // which cpu/ref computes from the real values, bit for bit.
  const char* tflite_transforms[] = {"half_pixel", "asymmetric", "align_corners"};
  for (int i = 0; i < count / 2; ++i) {
    Shape in{1, pick(rng, 1, 24), pick(rng, 2, 9), pick(rng, 2, 9)};
    const QuantParams q = random_quant(rng);
    std::map<std::string, Attr> p{{"mode", std::string("linear")},
                                  {"coordinate_transformation_mode", std::string(tflite_transforms[i % 3])},
                                  {"sizes", std::vector<int64_t>{in[0], in[1], pick(rng, 2, 17), pick(rng, 2, 17)}},
                                  {"requantize", std::string("tflite")},
                                  {"scale", static_cast<double>(q.scales[0])}};
    out.push_back({"tflite resize " + in.to_string() + " " + tflite_transforms[i % 3], test::make_layer("resize", p),
                   {random_qblob(in, rng, q)}, {q}, true});
  }
  return out;
}

/// Pads of every mode at one quantisation (a residual's channel pad in a
/// TensorFlow Lite int8 detector): the constant fill is the zero point; bit-exact.
std::vector<Case> pad_cases(std::mt19937& rng, int count) {
  const char* modes[] = {"constant", "reflect", "edge", "wrap"};
  std::vector<Case> out;
  for (int i = 0; i < count; ++i) {
    Shape in{pick(rng, 1, 2), pick(rng, 1, 20), pick(rng, 2, 7), pick(rng, 2, 7)};
    std::vector<int64_t> pads(8, 0);
    for (int d = 1; d < 4; ++d) pads[d] = pick(rng, 0, 1) * pick(rng, 0, int(in[d]) - 1), pads[d + 4] = pick(rng, 0, int(in[d]) - 1);
    const char* mode = modes[i % 4];
    const QuantParams q = random_quant(rng);
    out.push_back({std::string("pad ") + mode + " " + in.to_string(),
                   test::make_layer("pad", {{"pads", pads}, {"mode", std::string(mode)}}), {random_qblob(in, rng, q)}, {q}, true});
  }
  return out;
}

std::vector<Case> unary_cases(const std::string& type, std::mt19937& rng, int count) {
  std::vector<Case> out;
  for (int i = 0; i < count; ++i) {
    Shape s = random_shape(rng);
    if (pick(rng, 0, 1) == 0 && s.rank() == 4) s[2] = s[3] = 1;  // layout-trivial, for nhwc copies
    std::map<std::string, Attr> p;
    std::string lab = type + " " + s.to_string();
    if (type == "clip") {
      if (pick(rng, 0, 3)) p["min"] = -0.5 * pick(rng, 0, 2);
      if (pick(rng, 0, 3)) p["max"] = 0.25 * pick(rng, 1, 8);
    }
    if (type == "flatten") p["axis"] = int64_t{1};
    if (type == "hardsigmoid" && pick(rng, 0, 1)) p["alpha"] = 1.0 / 6, p["beta"] = 0.5;
    if (type == "gelu" && pick(rng, 0, 1)) p["approximate"] = std::string("tanh");
    if (type == "reshape") p["shape"] = std::vector<int64_t>{s[0], -1};
    if (type == "fake_quant") {
      const bool u8 = pick(rng, 0, 1) == 0;
      p["scale"] = 0.01 * pick(rng, 1, 20);
      p["qmin"] = int64_t{u8 ? 0 : -128};
      p["qmax"] = int64_t{u8 ? 255 : 127};
      p["zero_point"] = int64_t{u8 ? pick(rng, 0, 255) : pick(rng, -128, 127)};
    }
    QuantParams q = random_quant(rng);
    const bool same = pick(rng, 0, 1) == 0;
    out.push_back({lab + (same ? " same-quant" : ""), test::make_layer(type, p), {random_qblob(s, rng, q)},
                   same ? std::vector<QuantParams>{q} : std::vector<QuantParams>{}, same || kTableTypes.count(type) != 0});
  }
  return out;
}

std::vector<Case> cases_for(const std::string& type, std::mt19937& rng) {
  if (type == "conv2") return conv_cases(rng, 80);
  if (type == "dense") return dense_cases(rng, 30);
  if (type == "pool2") return pool_cases(rng, 40);
  if (type == "add") return add_cases(rng, 20);
  if (type == "mul") return mul_cases(rng, 30);
  if (type == "concat") return concat_cases(rng, 20);
  if (type == "split") return split_cases(rng, 24);
  if (type == "resize") return resize_cases(rng, 24);
  if (type == "pad") return pad_cases(rng, 24);
  return unary_cases(type, rng, 30);
}

}  // namespace

TEST_CASE("every cpu:qint8 routine matches the quantised float32 reference", "[qint8][routines]") {
  const std::string type = GENERATE(from_range(std::begin(kCoveredTypes), std::end(kCoveredTypes)));
  const auto routines = qint8_routines(type);
  for (const std::string& descriptor : routines) {
    DYNAMIC_SECTION(descriptor << " (" << type << ")") {
      std::mt19937 rng(std::hash<std::string>{}(descriptor) & 0xffffffu);
      Tally tally;
      for (const Case& c : cases_for(type, rng)) check_case(c, descriptor, tally);
      std::ostringstream why;
      for (const auto& [r, n] : tally.reasons) why << "\n  " << n << "x " << r;
      INFO(descriptor << " supported " << tally.supported << " of " << tally.total << " cases; refused:" << why.str());
      const std::string& only = tally.reasons.empty() ? std::string() : tally.reasons.begin()->first;
      auto most = std::max_element(tally.reasons.begin(), tally.reasons.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; });
      // Debian's aarch64 oneDNN has only reference int8 code without SVE (the routines refuse it);
      // the cases it refuses for other reasons are the shapes it never supports.
      const bool reference_only =
          most != tally.reasons.end() && most->first.find("only its reference implementation") != std::string::npos;
      if (tally.supported == 0 && ((tally.reasons.size() == 1 && (only.find("CPU lacks") != std::string::npos ||
                                                                   only.find("SOFTNEURO_MAX_CPU_ISA") != std::string::npos)) ||
                                   reference_only)) {
        WARN(descriptor << ": " << tally.reasons.begin()->first << ", nothing to compare on this machine");
      } else {
        CHECK(tally.supported >= std::min(10, tally.total));  // each routine is exercised on many cases
      }
    }
  }
}

TEST_CASE("our qint8 conv2 and dense apply an affine after the fused activation", "[qint8][routines]") {
  // PP-LCNetV3's affine blocks fold into act_scale/act_shift (fuse_output_affine):
  // the PP-OCRv4 recogniser's 16 heaviest convolutions had no int8 routine at AVX2.
  if (!core::cpu_features().avx2_fma()) return;  // our qint8 routines need AVX2 (x86 only)
  std::mt19937 rng(2024);
  std::vector<Case> cases;
  struct Spec {
    const char* act;
    double scale, shift;
    int64_t c, oc, k, group;
  };
  const Spec specs[] = {{"hardswish", 0.66, 0.21, 24, 20, 1, 1}, {"hardsigmoid", 1.5, -0.3, 8, 16, 3, 1},
                        {"relu", -0.5, 0.1, 12, 9, 3, 1},        {"clip", 0.8, 0.05, 10, 10, 1, 1},
                        {"none", 2.0, -1.0, 6, 17, 3, 1},        {"hardswish", 0.7, 0.3, 16, 16, 3, 16}};
  for (const Spec& sp : specs) {
    std::map<std::string, Attr> p{{"act", std::string(sp.act)}, {"act_scale", sp.scale}, {"act_shift", sp.shift},
                                  {"pads", std::vector<int64_t>{sp.k / 2, sp.k / 2, sp.k / 2, sp.k / 2}},
                                  {"group", sp.group}};
    if (std::string(sp.act) == "clip") p["act_min"] = 0.0, p["act_max"] = 0.5;
    if (std::string(sp.act) == "hardsigmoid") p["act_alpha"] = 0.2, p["act_beta"] = 0.5;
    Layer l = test::make_layer("conv2", p, {{"weight", normal_blob(Shape{sp.oc, sp.c / sp.group, sp.k, sp.k}, rng, 0.3f)},
                                             {"bias", normal_blob(Shape{sp.oc}, rng, 0.5f)}});
    cases.push_back({fmt::format("conv2 {} * {} + {} c={} oc={} k={} group={}", sp.act, sp.scale, sp.shift, sp.c, sp.oc,
                                 sp.k, sp.group),
                     l, {random_qblob(Shape{1, sp.c, 6, 7}, rng, random_quant(rng))}, {}});
  }
  Layer d = test::make_layer("dense", {{"act", std::string("hardswish")}, {"act_scale", 0.5}, {"act_shift", 0.25}},
                             {{"weight", normal_blob(Shape{24, 48}, rng, 0.3f)}, {"bias", normal_blob(Shape{24}, rng, 0.5f)}});
  cases.push_back({"dense hardswish * 0.5 + 0.25", d, {random_qblob(Shape{4, 48}, rng, random_quant(rng))}, {}});
  for (const char* descriptor : {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8"}) {
    Tally tally;
    for (const Case& c : cases) {
      if (c.layer.type == "dense" && std::string(descriptor).find("nhwc") != std::string::npos) continue;
      check_case(c, descriptor, tally);
    }
    std::ostringstream why;
    for (const auto& [r, n] : tally.reasons) why << "\n  " << n << "x " << r;
    INFO(descriptor << " supported " << tally.supported << " of " << tally.total << "; refused:" << why.str());
    CHECK(tally.supported == tally.total);  // (every case refused before: "does not apply an affine")
  }
}

TEST_CASE("qint8 routines refuse layers without calibration", "[qint8][routines]") {
  std::mt19937 rng(3);
  for (const char* type : kCoveredTypes)
    for (const std::string& descriptor : qint8_routines(type)) {
      Case c = cases_for(type, rng).front();
      LayerInfo info;
      info.layer = &c.layer;
      for (const auto& b : c.inputs) info.input_shapes.push_back(b.shape);
      info.output_shapes = core::infer_layer_shapes(c.layer, info.input_shapes);
      Schema schema;
      const Routine* r = core::RoutineRegistry::instance().find(type, descriptor, &schema);
      REQUIRE(r);
      Support s = r->supports(info, schema);
      INFO(descriptor);
      CHECK_FALSE(s.ok);
    }
}

TEST_CASE("every registered qint8 routine's layer type has test cases here", "[qint8][routines]") {
  std::set<std::string> covered(std::begin(kCoveredTypes), std::end(kCoveredTypes));
  for (const auto& t : core::layer_types()) {
    std::string type(t.name);
    if (!qint8_routines(type).empty() && !covered.count(type))
      WARN("qint8 routines for layer type '" << type << "' have no case generator in tests/routines/test_qint8.cpp");
  }
}

TEST_CASE("qint8 u8s8 (vpmaddubsw): extreme activations and weights never saturate int16 pair sums", "[qint8][routines]") {
  if (!core::cpu_features().avx2_fma()) {
    WARN("CPU lacks AVX2: nothing to compare on this machine");
    return;
  }
  // Every activation at the u8 extreme (q = 127 with zero point -128: u8 = 255,
  // or q = -128 with zero point 127: u8 = 0 against weights of both signs), and
  // every weight at +-max: with 8-bit weights a pair sums to 2 * 255 * 127 =
  // 64770, beyond int16; the 7-bit weights keep it at 32130. The outputs must be
  // exact against the reference with the same 7-bit weights.
  for (const int sign : {1, -1}) {
    for (const int zp : {-128, 127}) {
      const int64_t c = 64, oc = 16;
      Blob w = Blob::allocate(Shape{oc, c, 1, 1});
      for (int64_t o = 0; o < oc; ++o)
        for (int64_t i = 0; i < c; ++i) w.data_as<float>()[o * c + i] = static_cast<float>(sign * ((o + i) % 3 == 0 ? -1 : 1));
      Layer l = test::make_layer("conv2", {}, {{"weight", w}});
      QBlob x{Shape{1, c, 3, 3}, std::vector<int8_t>(static_cast<std::size_t>(c * 9), static_cast<int8_t>(zp == -128 ? 127 : -128)),
              make_quant(0.01f, zp)};
      std::vector<Blob> fin{dequantize(x)};
      std::vector<Blob> want = test::run_layer(reference_layer(l, x.quant, 63), fin, "cpu/ref");
      double lo = 0, hi = 0;
      for (int64_t i = 0; i < want[0].numel(); ++i) lo = std::min(lo, double(want[0].data_as<float>()[i])), hi = std::max(hi, double(want[0].data_as<float>()[i]));
      const std::vector<QuantParams> out_quant{profiler::quant_from_range(lo, hi)};
      for (const char* descriptor : {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8"}) {
        QRun got = run_qint8(l, {x}, out_quant, descriptor, {{"u8s8", 1}});
        REQUIRE(got.support.ok);
        const std::vector<int8_t> wq = quantize(want[0], out_quant[0]);
        INFO(descriptor << " sign " << sign << " zero point " << zp);
        CHECK(got.outputs[0] == wq);
      }
    }
  }
}

// TensorFlow Lite's interpreter (XNNPACK) requantises in float: s_in·s_w / s_out
// computed in float in that order, the product rounded half to even, then the
// zero point added as an integer. oneDNN added the zero point in float before
// rounding (x + z can round onto a tie x was not on), and the scales were
// computed in double: 2 of 401,408 outputs here differed by one step, and a
// TFLite int8 MobileNetV2 by 0.03-0.05 on logits of 0.54 (now bit for bit).
TEST_CASE("int8 conv2: oneDNN's, ours and XNNPACK's round exactly alike", "[qint8][xnnpack]") {
  std::mt19937 rng(4);
  int compared = 0;
  for (int variant = 0; variant < 3; ++variant) {
    const int64_t c = 3, oc = 32;
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    Blob w = Blob::allocate({oc, c, 3, 3});
    for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = u(rng);
    Blob b = Blob::allocate({oc});
    for (int64_t i = 0; i < oc; ++i) b.data_as<float>()[i] = u(rng);
    std::map<std::string, Attr> p{{"pads", std::vector<int64_t>{variant == 2 ? 1 : 0, variant == 2 ? 1 : 0, 1, 1}},
                                  {"strides", std::vector<int64_t>{2, 2}}};
    if (variant > 0) p["act"] = std::string("clip"), p["act_min"] = 0.0, p["act_max"] = 6.0;
    Layer l = test::make_layer("conv2", p, {{"weight", w}, {"bias", b}});
    QBlob x = random_qblob({1, c, 224, 224}, rng, make_quant(0.0078125f, -1));
    std::vector<QuantParams> oq{make_quant(0.020296666771173477f, -128)};
    QRun ref = run_qint8(l, {x}, oq, "cpu:qint8:nhwc/xnnpack");
    if (!ref.support) {
      WARN("XNNPACK's int8 conv does not run here: " << ref.support.reason);
      return;
    }
    for (const char* descriptor : {"cpu:qint8:nhwc/onednn", "cpu:qint8:nhwc/qint8", "cpu:qint8/qint8"}) {
      Schema schema;
      if (!core::RoutineRegistry::instance().find("conv2", descriptor, &schema)) continue;  // aarch64: no x86 qint8 family
      QRun got = run_qint8(l, {x}, oq, descriptor);
      if (!got.support) continue;  // oneDNN's needs VNNI, ours AVX2
      INFO(descriptor << " variant " << variant);
      int64_t differ = 0;
      for (std::size_t i = 0; i < ref.outputs[0].size(); ++i) differ += got.outputs[0][i] != ref.outputs[0][i];
      CHECK(differ == 0);
      ++compared;
    }
  }
  if (compared == 0) WARN("no int8 conv routine besides XNNPACK's runs here");
}

// A relu's output (zero point -128) reaches oneDNN's 3x3 convolution as u8
// with no zero point, its sign bits flipped in the step's workspace (its
// brgemm kernels; s8 with a zero point ran the older jit_int8 one): the padded
// borders stay exact (u8 0 is real 0), and the results equal our exact GEMM
// routine's bit for bit, for activations at both ends, strides 1 and 2,
// batches, and for zero points where the flip does not apply. Unpadded (1x1)
// layers take the input's zero point folded into the bias (with or without a
// bias of their own), the output's as a post-op after rounding.
TEST_CASE("int8 conv2: oneDNN's on inputs with zero point -128 equals ours bit for bit", "[qint8][routines]") {
  Schema schema;
  const Routine* onednn = core::RoutineRegistry::instance().find("conv2", "cpu:qint8:nhwc/onednn", &schema);
  if (!onednn || !core::RoutineRegistry::instance().find("conv2", "cpu:qint8:nhwc/qint8", &schema)) return;  // aarch64
  std::mt19937 rng(11);
  int compared = 0;
  for (const int zp : {-128, -128, -5, 2}) {
    for (const int64_t stride : {1, 2}) {
      // 3x3, 1x1 (u8 from 128 output channels) and depthwise 3x3 (u8 at stride 1)
      for (const int64_t k : {3, 1, 0}) {
        const bool depthwise = k == 0;
        const int64_t c = 32, oc = depthwise ? c : k == 3 ? 48 : 128, n = stride == 1 ? 2 : 1, kk = depthwise ? 3 : k;
        std::uniform_real_distribution<float> u(-0.3f, 0.3f);
        Blob w = Blob::allocate({oc, depthwise ? 1 : c, kk, kk});
        for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = u(rng);
        Blob b = Blob::allocate({oc});
        for (int64_t i = 0; i < oc; ++i) b.data_as<float>()[i] = u(rng);
        const bool biased = stride == 1;
        std::map<std::string, Blob> weights{{"weight", w}};
        if (biased) weights["bias"] = b;
        Layer l = test::make_layer("conv2",
                                   {{"pads", std::vector<int64_t>(4, kk / 2)}, {"strides", std::vector<int64_t>{stride, stride}},
                                    {"group", depthwise ? c : int64_t{1}}, {"act", std::string("relu")}},
                                   weights);
        QBlob x = random_qblob({n, c, 13, 11}, rng, make_quant(0.02f, zp));
        for (std::size_t i = 0; i < x.q.size(); i += 7) x.q[i] = static_cast<int8_t>(i % 2 ? 127 : -128);
        const std::vector<QuantParams> oq{make_quant(0.05f, biased ? -128 : 3)};
        QRun got = run_qint8(l, {x}, oq, "cpu:qint8:nhwc/onednn");
        if (!got.support) continue;  // oneDNN's needs VNNI
        QRun want = run_qint8(l, {x}, oq, "cpu:qint8:nhwc/qint8");
        REQUIRE(want.support);
        INFO("zero point " << zp << " stride " << stride << " kernel " << kk << (depthwise ? " depthwise" : "") << (biased ? "" : ", no bias"));
        int64_t differ = 0;
        for (std::size_t i = 0; i < want.outputs[0].size(); ++i) differ += got.outputs[0][i] != want.outputs[0][i];
        CHECK(differ == 0);
        ++compared;
      }
    }
  }
  if (compared == 0) WARN("oneDNN's int8 conv does not run here (needs AVX-512 VNNI)");
}

TEST_CASE("cpu:qint8/qint8 lists u8s8 for int8 weights on 7 bits only",
          "[qint8][params]") {
  const auto& f = core::cpu_features();
  if (!f.avx2_fma() || f.avx512_vnni || f.avx_vnni) return;  // VNNI CPUs list vnni instead
  auto dense_with = [](std::vector<int8_t> values, std::vector<float> scales) {
    Layer l;
    l.name = "d";
    l.type = "dense";
    l.inputs = {"x"};
    l.outputs = {"y"};
    Blob w = Blob::allocate(Shape{2, 4}, DType::qint8);
    std::memcpy(w.data(), values.data(), values.size());
    w.quant().scales = std::move(scales);
    w.quant().axis = 0;
    l.weights["weight"] = w;
    return l;
  };
  Schema schema;
  const Routine* r = core::RoutineRegistry::instance().find("dense", "cpu:qint8/qint8", &schema);
  REQUIRE(r);
  auto u8s8_choices = [&](const Layer& l) {
    LayerInfo info;
    info.layer = &l;
    info.input_shapes = {Shape{1, 4}};
    for (const auto& p : r->param_space(info, schema))
      if (p.name == "u8s8") return p.choices;
    return std::vector<int64_t>{};
  };
  // Every channel's largest |w| 63: on the u8s8 kernel's grid; one channel at 127: another grid.
  CHECK(u8s8_choices(dense_with({63, -1, 2, 0, -63, 5, 0, 1}, {0.1f, 0.2f})) == std::vector<int64_t>{0, 1});
  CHECK(u8s8_choices(dense_with({63, -1, 2, 0, -127, 5, 0, 1}, {0.1f, 0.2f})) == std::vector<int64_t>{0});
  CHECK(u8s8_choices(dense_with({0, 0, 0, 0, 63, 5, 0, 1}, {0.0f, 0.2f})) == std::vector<int64_t>{0, 1});  // a channel of zeros
}

// Winograd F(2x2, 3x3) in integers is exact (winograd_qint8.cpp): its outputs
// equal the GEMM routine's int16 kernel's bit for bit, for 8-bit weights at
// their extremes, activations at both ends of int8, any zero point, odd sizes
// (tiles past the output's edge), odd channel counts, batches, padding on one
// side only, and a fused clamp.
TEST_CASE("cpu:qint8:nhwc/winograd equals the GEMM routine bit for bit", "[qint8][routines][winograd]") {
  if (!core::cpu_features().avx2_fma()) {
    WARN("CPU lacks AVX2: nothing to compare on this machine");
    return;
  }
  struct Shape4 {
    int64_t n, c, h, w, oc;
    std::vector<int64_t> pads;
    bool relu, extreme;
  };
  const std::vector<Shape4> shapes{{1, 16, 8, 8, 16, {1, 1, 1, 1}, false, false},
                                   {1, 3, 7, 5, 20, {1, 1, 1, 1}, true, false},
                                   {2, 33, 9, 6, 17, {0, 1, 1, 0}, false, false},
                                   {1, 64, 14, 14, 64, {1, 1, 1, 1}, true, false},
                                   {1, 200, 5, 7, 40, {0, 0, 0, 0}, false, true},
                                   {1, 96, 3, 3, 8, {2, 2, 2, 2}, false, true},
                                   {1, 1800, 3, 3, 16, {1, 1, 1, 1}, false, true}};  // the most channels
  std::mt19937 rng(23);
  for (const auto& sh : shapes) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Blob w = Blob::allocate({sh.oc, sh.c, 3, 3});
    for (int64_t i = 0; i < w.numel(); ++i)  // extreme: every weight at +-max of its channel (+-127 after quantisation)
      w.data_as<float>()[i] = sh.extreme ? (rng() % 2 ? 1.0f : -1.0f) : u(rng);
    Blob b = Blob::allocate({sh.oc});
    for (int64_t i = 0; i < sh.oc; ++i) b.data_as<float>()[i] = u(rng);
    std::map<std::string, Attr> p{{"pads", sh.pads}};
    if (sh.relu) p["act"] = std::string("relu");
    Layer l = test::make_layer("conv2", p, {{"weight", w}, {"bias", b}});
    for (const int32_t zp : {-128, -3, 127}) {
      QBlob x = random_qblob({sh.n, sh.c, sh.h, sh.w}, rng, make_quant(0.02f, zp));
      if (sh.extreme)  // activations at the far end from the zero point: |q - zp| = 255 where zp is +-128/127
        for (auto& q : x.q) q = static_cast<int8_t>(zp < 0 ? 127 : -128);
      const std::vector<QuantParams> oq{make_quant(sh.extreme ? 40.0f : 0.3f, 5)};
      QRun want = run_qint8(l, {x}, oq, "cpu:qint8:nhwc/qint8", {{"u8s8", 0}});
      QRun got = run_qint8(l, {x}, oq, "cpu:qint8:nhwc/winograd");
      REQUIRE(want.support.ok);
      REQUIRE(got.support.ok);
      INFO("n " << sh.n << " c " << sh.c << " " << sh.h << "x" << sh.w << " oc " << sh.oc << " zero point " << zp);
      int64_t differ = 0, saturated = 0;
      for (std::size_t i = 0; i < want.outputs[0].size(); ++i) {
        differ += got.outputs[0][i] != want.outputs[0][i];
        saturated += want.outputs[0][i] == 127 || want.outputs[0][i] == -128;
      }
      CHECK(differ == 0);
      CHECK(saturated < static_cast<int64_t>(want.outputs[0].size()));  // the outputs say something
    }
  }
  // Refusals: stride 2, a 1x1 kernel, groups.
  Blob w3 = Blob::allocate({8, 8, 3, 3});
  Blob w1 = Blob::allocate({8, 8, 1, 1});
  Blob wg = Blob::allocate({8, 4, 3, 3});
  for (Blob* b : {&w3, &w1, &wg}) std::fill(b->data_as<float>(), b->data_as<float>() + b->numel(), 0.5f);
  QBlob x = random_qblob({1, 8, 6, 6}, rng, make_quant(0.02f, 0));
  const std::vector<QuantParams> oq{make_quant(0.3f, 0)};
  CHECK_FALSE(run_qint8(test::make_layer("conv2", {{"strides", std::vector<int64_t>{2, 2}}}, {{"weight", w3}}), {x}, oq,
                        "cpu:qint8:nhwc/winograd").support.ok);
  CHECK_FALSE(run_qint8(test::make_layer("conv2", {}, {{"weight", w1}}), {x}, oq, "cpu:qint8:nhwc/winograd").support.ok);
  CHECK_FALSE(run_qint8(test::make_layer("conv2", {{"group", int64_t{2}}}, {{"weight", wg}}), {x}, oq,
                        "cpu:qint8:nhwc/winograd").support.ok);
}

#if defined(__x86_64__)  // pair_fix.cpp and the u8 forms are built for x86 only
// ---------------------------------------------------------------------------
// Without VNNI, the exact GEMM (parameters vnni=0, u8s8=0) packs 8-bit weights
// for vpmaddubsw: paired within groups of 16 K indices, the unsafe pairs cut
// and fixed (pair_fix.hpp). Its outputs stay cpu/ref's bit for bit.

namespace {

/// A conv2 (or dense) whose integer weights are `q` x 0.01 (every channel's
/// largest |q| 127, so the per-channel scale is 0.01 and the integers are q's).
Layer integer_weight_layer(const std::string& type, const std::vector<int>& q, const Shape& shape) {
  Blob w = Blob::allocate(shape);
  for (std::size_t i = 0; i < q.size(); ++i) w.data_as<float>()[i] = static_cast<float>(q[i]) * 0.01f;
  return test::make_layer(type, {}, {{"weight", w}});
}

struct SavedGemm {
  Blob bytes;
  std::vector<std::size_t> sizes;
  std::vector<const std::byte*> arrays;
  int32_t kernel = -1;
};

SavedGemm saved_gemm(const Routine& r, const Layer& l, const QuantParams& in, const QuantParams& out, const Schema& s) {
  SavedGemm p{r.pack(PackInfo{&l, {in}, {out}, 0}, s, {})->save()};
  const auto sizes = core::packed_array_sizes(p.bytes);
  REQUIRE(sizes);
  REQUIRE(sizes->size() == 7);  // weights, bias, multipliers, form, pairing, fix starts, fixes
  p.sizes = *sizes;
  const auto& z = p.sizes;
  const auto arrays = core::unpack_arrays(p.bytes, {z[0], z[1], z[2], z[3], z[4], z[5], z[6]});
  REQUIRE(arrays);
  p.arrays = *arrays;
  std::memcpy(&p.kernel, p.arrays[3], sizeof p.kernel);
  return p;
}

}  // namespace

TEST_CASE("cpu:qint8 GEMM without VNNI: 8-bit weights paired for vpmaddubsw, unsafe pairs fixed, exact",
          "[qint8][routines][pair_fix]") {
  const auto& f = core::cpu_features();
  if (!f.avx2_fma() || f.avx_vnni) {
    WARN("the u8 pairing runs on AVX2 CPUs without AVX-VNNI only");
    return;
  }
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-30, 30);
  const int64_t c = 48, oc = 20, k = c * 9;  // K 432: 27 groups of 16; blocks of 16 and 4 channels
  // K order is (ki, kj, ic): index kk is tap kk / c, channel kk % c. Set through it.
  std::vector<int> q(static_cast<std::size_t>(oc * k));
  auto at = [&](int64_t o, int64_t kk) -> int& {
    const int64_t tap = kk / c, ic = kk % c;
    return q[static_cast<std::size_t>((o * c + ic) * 9 + tap)];
  };
  for (auto& v : q) v = small(rng);
  for (int64_t o = 0; o < oc; ++o) at(o, k - 1) = o % 2 ? -127 : 127;  // every channel's scale 0.01
  at(0, 0) = at(0, 1) = 127;                                         // unsafe in K's order, safe paired with small ones
  at(17, 32) = at(17, 33) = -127;                                    // the same in the second block
  for (int i = 0; i < 12; ++i) at(1, 16 + i) = 100;                  // 12 large of 16: at least 4 pairs stay unsafe
  for (int i = 0; i < 16; i += 2) at(2 + i / 2, 48 + i) = 127, at(2 + i / 2, 49 + i) = 90;  // unsafe in K's order
  const Layer conv = integer_weight_layer("conv2", q, Shape{oc, c, 3, 3});
  // u8 activations at 255 (q = 127 with zero point -128) under most weights, the rest random.
  QBlob x = random_qblob({1, c, 7, 5}, rng, make_quant(0.02f, -128));
  for (std::size_t i = 0; i < x.q.size(); i += 1 + (i % 5 == 0)) x.q[i] = 127;
  std::vector<Blob> fin{dequantize(x)};
  std::vector<Blob> want = test::run_layer(reference_layer(conv, x.quant), fin, "cpu/ref");
  double lo = 0, hi = 0;
  for (float v : test::values(want[0])) lo = std::min(lo, double(v)), hi = std::max(hi, double(v));
  const QuantParams oq = profiler::quant_from_range(lo, hi);
  const std::vector<int8_t> wq = quantize(want[0], oq);
  for (const char* descriptor : {"cpu:qint8/qint8", "cpu:qint8:nhwc/qint8"}) {
    INFO(descriptor);
    QRun got = run_qint8(conv, {x}, {oq}, descriptor);
    REQUIRE(got.support.ok);
    CHECK(got.outputs[0] == wq);
  }
  Schema schema;
  const Routine* r = core::RoutineRegistry::instance().find("conv2", "cpu:qint8:nhwc/qint8", &schema);
  REQUIRE(r);
  const SavedGemm p = saved_gemm(*r, conv, x.quant, oq, schema);
  CHECK(p.kernel == 3);                                       // GemmKernel::u8_pairs
  CHECK(p.sizes[4] == 2 * static_cast<std::size_t>(k));      // a pairing for each of the 2 blocks
  const std::size_t nfix = p.sizes[6] / sizeof(pair_fix::PairFix);
  CHECK(nfix >= 4);                                           // lane 1's twelve 100s
  CHECK(nfix * 256 <= static_cast<std::size_t>(oc * k));      // few enough for the u8 form
  const PackInfo info{&conv, {x.quant}, {oq}, 0};
  CHECK(r->unpack(p.bytes, info, schema, {}));

  SECTION("a pairing or fixes out of range are packed again, never read") {
    Blob bad = p.bytes.clone();
    auto offset = [&](int a) { return p.arrays[a] - static_cast<const std::byte*>(p.bytes.data()); };
    auto* fixes = reinterpret_cast<pair_fix::PairFix*>(static_cast<std::byte*>(bad.data()) + offset(6));
    fixes[0].k = static_cast<int32_t>(k);  // past K (432 = k16 here)
    CHECK_FALSE(r->unpack(bad, info, schema, {}));
    bad = p.bytes.clone();
    auto* perm = reinterpret_cast<uint8_t*>(static_cast<std::byte*>(bad.data()) + offset(4));
    perm[1] = perm[0];  // not a permutation
    CHECK_FALSE(r->unpack(bad, info, schema, {}));
    bad = p.bytes.clone();
    const int32_t u8s8 = 2;  // the 7-bit kernel's form where the exact one was asked
    std::memcpy(static_cast<std::byte*>(bad.data()) + offset(3), &u8s8, sizeof u8s8);
    CHECK_FALSE(r->unpack(bad, info, schema, {}));
  }
  SECTION("a dense layer, rows of 1..5") {
    const int64_t n = 20, kd = 200;
    std::vector<int> qd(static_cast<std::size_t>(n * kd));
    for (auto& v : qd) v = small(rng);
    for (int64_t o = 0; o < n; ++o) qd[static_cast<std::size_t>(o * kd + o)] = 127, qd[static_cast<std::size_t>(o * kd + o + 1)] = 127;
    const Layer dense = integer_weight_layer("dense", qd, Shape{n, kd});
    for (int64_t rows = 1; rows <= 5; ++rows) {
      QBlob xd = random_qblob({rows, kd}, rng, make_quant(0.02f, -128));
      for (auto& v : xd.q) v = 127;
      const std::vector<Blob> wd = test::run_layer(reference_layer(dense, xd.quant), {dequantize(xd)}, "cpu/ref");
      const QuantParams odq = profiler::quant_from_range(-400, 400);
      QRun got = run_qint8(dense, {xd}, {odq}, "cpu:qint8/qint8");
      REQUIRE(got.support.ok);
      INFO("rows " << rows);
      CHECK(got.outputs[0] == quantize(wd[0], odq));
    }
  }
  SECTION("weights whose pairs mostly stay unsafe: the int16 form") {
    std::vector<int> qa(q.size(), 0);
    for (std::size_t i = 0; i < qa.size(); ++i) qa[i] = i % 7 == 0 ? -127 : 120;
    const Layer heavy = integer_weight_layer("conv2", qa, Shape{oc, c, 3, 3});
    const std::vector<Blob> wh = test::run_layer(reference_layer(heavy, x.quant), fin, "cpu/ref");
    double hlo = 0, hhi = 0;
    for (float v : test::values(wh[0])) hlo = std::min(hlo, double(v)), hhi = std::max(hhi, double(v));
    const QuantParams hq = profiler::quant_from_range(hlo, hhi);
    QRun got = run_qint8(heavy, {x}, {hq}, "cpu:qint8:nhwc/qint8");
    REQUIRE(got.support.ok);
    CHECK(got.outputs[0] == quantize(wh[0], hq));
    const SavedGemm ph = saved_gemm(*r, heavy, x.quant, hq, schema);
    CHECK(ph.kernel == 0);  // GemmKernel::int16
    CHECK(ph.sizes[4] == 0);
    CHECK(ph.sizes[6] == 0);
  }
}

TEST_CASE("pair_fix: unsafe pairs cut to 128 together, a block paired around its large weights", "[qint8][pair_fix]") {
  auto cut = [](int32_t a, int32_t b) {
    int32_t da = 0, db = 0;
    pair_fix::make_pair_safe(a, b, da, db);
    return std::array<int32_t, 4>{a, b, da, db};
  };
  CHECK(cut(64, 64) == std::array<int32_t, 4>{64, 64, 0, 0});      // 128: safe
  CHECK(cut(127, -127) == std::array<int32_t, 4>{127, -127, 0, 0});  // opposite signs: safe
  CHECK(cut(100, 29) == std::array<int32_t, 4>{99, 29, 1, 0});
  CHECK(cut(50, 127) == std::array<int32_t, 4>{50, 78, 0, 49});
  CHECK(cut(127, 127) == std::array<int32_t, 4>{1, 127, 126, 0});
  CHECK(cut(-128, -128) == std::array<int32_t, 4>{0, -128, -128, 0});
  // One group of 16 K indices, 3 lanes: every large weight finds a partner it is safe with.
  std::vector<int8_t> w(3 * 16, 1);
  w[0] = w[1] = 127;                 // lane 0: indices 0 and 1
  w[16 + 2] = w[16 + 3] = -120;      // lane 1: 2 and 3
  w[32 + 0] = w[32 + 2] = 100;       // lane 2: 0 and 2
  std::vector<int8_t> out(16 * 16);
  std::vector<uint8_t> perm(16);
  std::vector<pair_fix::PairFix> fixes;
  CHECK(pair_fix::pair_block(w.data(), 16, 3, 16, out.data(), perm.data(), fixes));
  CHECK(fixes.empty());
  CHECK(pair_fix::pairing_valid(perm));
  for (int l = 0; l < 3; ++l)
    for (int p = 0; p < 16; ++p) CHECK(out[static_cast<std::size_t>(l * 16 + p)] == w[static_cast<std::size_t>(l * 16 + perm[static_cast<std::size_t>(p)])]);
  for (int p = 0; p < 16; ++p) CHECK(out[static_cast<std::size_t>(3 * 16 + p)] == 0);  // lanes past the block's channels
  // K 20 (two groups, the second padded): already safe in K's order, nothing moves.
  std::vector<int8_t> safe(20, 7), out2(16 * 32);
  std::vector<uint8_t> perm2(32);
  fixes.clear();
  CHECK_FALSE(pair_fix::pair_block(safe.data(), 20, 1, 20, out2.data(), perm2.data(), fixes));
  CHECK(out2[19] == 7);
  CHECK(out2[20] == 0);
  CHECK(fixes.empty());

  CHECK(pair_fix::fixes_valid({0, 1}, {{3, 2, 5}}, 16));
  CHECK_FALSE(pair_fix::fixes_valid({0, 1}, {{16, 2, 5}}, 16));   // past K
  CHECK_FALSE(pair_fix::fixes_valid({0, 1}, {{3, 16, 5}}, 16));   // past the block's lanes
  CHECK_FALSE(pair_fix::fixes_valid({0, 1}, {{3, 2, 129}}, 16));  // more than a cut can be
  CHECK_FALSE(pair_fix::fixes_valid({0, 2}, {{3, 2, 5}}, 16));    // starts past the fixes
  CHECK_FALSE(pair_fix::fixes_valid({}, {}, 16));
  std::vector<uint8_t> identity(32);
  for (int i = 0; i < 32; ++i) identity[static_cast<std::size_t>(i)] = static_cast<uint8_t>(i % 16);
  CHECK(pair_fix::pairing_valid(identity));
  identity[20] = 16;
  CHECK_FALSE(pair_fix::pairing_valid(identity));
  CHECK_FALSE(pair_fix::pairing_valid(std::vector<uint8_t>(15, 0)));
}

#endif  // defined(__x86_64__)

// A stride past the padded input gives one output position, whatever its value
// (a fuzzed .dnn had strides [2, 38402] over 16 columns): the window takes the
// shortest such stride, and oneDNN's int8 convolution, which on AMX wrote out
// of bounds at strides of 255 and more there, equals ours bit for bit.
TEST_CASE("int8 conv2: a stride past the padded input runs as the shortest such stride", "[qint8][routines]") {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  Blob w = Blob::allocate({16, 16, 3, 3});
  for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = u(rng);
  for (const int64_t stride : {255, 38402}) {
    Layer l = test::make_layer("conv2", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, stride}}},
                               {{"weight", w}});
    const core::Window2d g = core::conv2_window(l, Shape{1, 16, 16, 16});
    CHECK(g.ow == 1);
    CHECK(g.sw == 16);  // 16 + 1 + 1 - 3 + 1
    CHECK(g.sh == 2);
    QBlob x = random_qblob({1, 16, 16, 16}, rng, make_quant(0.02f, -3));
    const std::vector<QuantParams> oq{make_quant(0.05f, 1)};
    QRun want = run_qint8(l, {x}, oq, "cpu:qint8:nhwc/qint8");
    Schema schema;
    if (!want.support || !core::RoutineRegistry::instance().find("conv2", "cpu:qint8:nhwc/onednn", &schema)) continue;
    QRun got = run_qint8(l, {x}, oq, "cpu:qint8:nhwc/onednn");
    if (!got.support) continue;  // oneDNN's needs VNNI
    INFO("stride " << stride);
    CHECK(got.outputs[0] == want.outputs[0]);
  }
}
