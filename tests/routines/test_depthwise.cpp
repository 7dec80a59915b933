// cpu:float32:{nhwc,nchw16c,nchw8c}/depthwise against cpu/ref: 3x3 and 5x5,
// strides 1 and 2 (and 3), dilations, asymmetric pads, batch 1 and 4, channel
// counts not multiples of the vector width, odd sizes, every activation.
#include "core/cpu_features.hpp"
#include "core/graph.hpp"
#include "core/model_impl.hpp"
#include "routines/f32_check.hpp"

#include <softneuro/session.hpp>

#include <sstream>

using namespace softneuro;
using namespace softneuro::test::f32;

namespace {

/// An affine after the layer's activation (act_scale, act_shift: PP-LCNetV3's).
void set_affine(Layer& l, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  l.params["act_scale"] = 1.0 + 0.5 * u(rng);
  l.params["act_shift"] = 0.5 * u(rng);
}

}  // namespace

TEST_CASE("depthwise conv2 matches cpu/ref", "[depthwise][conv2]") {
  const std::string descriptor = GENERATE(as<std::string>{}, "cpu:float32:nhwc/depthwise",
                                          "cpu:float32:nchw16c/depthwise", "cpu:float32:nchw8c/depthwise");
  INFO(descriptor);
  std::mt19937 rng(555);
  for (int t = 0; t < 30; ++t) {
    const int64_t n = t % 4 == 3 ? 4 : 1;
    const int64_t c = t % 3 == 0 ? 16 * pick(rng, 1, 4) : pick(rng, 1, 70);
    const int64_t k = t % 2 ? 3 : 5;
    const int64_t s = t % 9 == 8 ? 3 : pick(rng, 1, 2);
    const int64_t d = t % 5 == 4 ? 2 : 1;
    const int64_t reach = (k - 1) * d;
    const int64_t pt = pick(rng, 0, int(reach / 2 + 1)), pl = pick(rng, 0, int(reach / 2 + 1));
    const int64_t pb = t % 2 ? pick(rng, 0, int(reach / 2)) : pt, pr = t % 2 ? pick(rng, 0, int(reach / 2)) : pl;
    const int64_t h = std::max<int64_t>(pick(rng, 1, 29), reach + 1), w = std::max<int64_t>(pick(rng, 1, 37), reach + 1);
    Layer l = conv_layer(c, c, c, k, k, s, s, d, d, {pt, pl, pb, pr}, t % 3 != 2, rng);
    set_act(l, kActs[t % 5], rng);
    if (t % 4 == 1) set_affine(l, rng);
    std::ostringstream label;
    label << "case " << t << ": n" << n << " c" << c << " k" << k << " s" << s << " d" << d << " pads " << pt << ","
          << pl << "," << pb << "," << pr << " in " << h << "x" << w << " act " << kActs[t % 5]
          << (t % 4 == 1 ? " with an affine" : "");
    INFO(label.str());
    if (!check_or_skip(l, {random_blob({n, c, h, w}, rng)}, descriptor, {})) return;
  }
  // 5x5 at stride 1 over four vectors or more (in nhwc, the row-block kernels
  // on the whole vectors and rows on a partial last one): PP-OCR's layers.
  for (const int64_t c : {64, 70, 80, 240}) {
    for (const int64_t n : {1, 2}) {
      Layer l = conv_layer(c, c, c, 5, 5, 1, 1, 1, 1, {2, 2, 2, 2}, true, rng);
      set_act(l, kActs[static_cast<std::size_t>(c + n) % 5], rng);
      INFO("5x5 c" << c << " n" << n);
      if (!check_or_skip(l, {random_blob({n, c, 7, 13}, rng)}, descriptor, {})) return;
    }
  }
  // Refused: not depthwise, 7x7.
  Layer g2 = conv_layer(8, 8, 4, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, false, rng);
  CHECK_FALSE(run_in_schema(g2, {random_blob({1, 8, 5, 5}, rng)}, descriptor).support.ok);
  Layer k7 = conv_layer(8, 8, 8, 7, 7, 1, 1, 1, 1, {3, 3, 3, 3}, false, rng);
  CHECK_FALSE(run_in_schema(k7, {random_blob({1, 8, 9, 9}, rng)}, descriptor).support.ok);
}

namespace {

/// Values rounded to bfloat16 (nearest even), so that a cast to bfloat16 keeps them exactly.
Blob bf16_exact(Blob b) {
  for (float& v : std::span<float>(b.data_as<float>(), static_cast<std::size_t>(b.numel()))) v = bf16_round(v);
  return b;
}

/// The layer alone in a net whose routine path pins it to `descriptor` (the
/// casts to and from bfloat16 around it); empty where the net ran another routine.
std::vector<Blob> run_pinned(const Layer& layer, const Blob& x, const std::string& descriptor,
                             const RoutineParams& params) {
  core::Graph g;
  g.name = "dw";
  g.inputs.push_back({layer.inputs[0], x.shape(), DType::float32});
  g.layers.push_back(layer);
  g.outputs = layer.outputs;
  core::Tuning tuning;
  tuning.routine_path.routines = {core::RoutineChoice{layer.name, descriptor, params}};
  Model net = detail::make_model(std::move(g), tuning);
  Session session(net);
  bool ran = false;
  for (const auto& l : session.layers()) ran = ran || (l.name == layer.name && l.descriptor == descriptor);
  if (!ran) return {};
  std::vector<Blob> out;
  const std::vector<NamedBlob> in{{layer.inputs[0], x}};
  for (auto& o : session.run(in)) out.push_back(o.blob);
  return out;
}

}  // namespace

// bfloat16 in nhwc: channels of 16 up to 480 (AVX-512 takes them 32 at a time,
// 16 left over by the 16-channel kernel), every width from the edge-only to
// several 8-pixel runs, both strides and kernels, pads, activations. Inputs are
// bfloat16 values, so the only rounding is the output's: a channel or tap in
// the wrong place is off by far more than that.
TEST_CASE("bfloat16 depthwise conv2 matches cpu/ref", "[depthwise][conv2][bfloat16]") {
  const std::string descriptor = "cpu:bfloat16:nhwc/depthwise";
  std::mt19937 rng(556);
  const int64_t channels[] = {16, 32, 48, 64, 80, 240, 480};
  for (int t = 0; t < 36; ++t) {
    const int64_t c = channels[t % 7];
    // Row stride 2 over column stride 1 at t % 7 == 3 (PP-OCR's [2, 1]).
    const int64_t k = t % 2 ? 3 : 5, s = t % 4 < 2 ? 1 : 2, sh = t % 7 == 3 ? 2 : s;
    const int64_t reach = k - 1;
    const int64_t pt = pick(rng, 0, int(reach / 2)), pl = pick(rng, 0, int(reach / 2));
    const int64_t pb = t % 3 ? pt : pick(rng, 0, int(reach / 2)), pr = t % 3 ? pl : pick(rng, 0, int(reach / 2));
    const int64_t h = pick(rng, int(k), 14), w = t < 7 ? int64_t(k) + t : pick(rng, int(k), 41);
    Layer l = conv_layer(c, c, c, k, k, sh, s, 1, 1, {pt, pl, pb, pr}, t % 5 != 4, rng);
    if (t % 3 == 1) set_affine(l, rng);
    l.name = "dw";
    l.inputs = {"x"};
    l.outputs = {"y"};
    set_act(l, kActs[t % 5], rng);
    INFO("case " << t << ": c" << c << " k" << k << " s" << sh << "," << s << (t % 3 == 1 ? " affine" : "") << " pads " << pt << "," << pl << "," << pb << "," << pr
                 << " in " << h << "x" << w << " act " << kActs[t % 5]);
    const Blob x = bf16_exact(random_blob({t % 6 == 5 ? 2 : 1, c, h, w}, rng));
    // The untuned split, and then each: the threads' tasks by channels and by rows.
    const RoutineParams split = t % 3 == 0 ? RoutineParams{} : RoutineParams{{"split", t % 3 - 1}};
    INFO("split " << (split.empty() ? std::string("untuned") : std::to_string(split[0].second)));
    const std::vector<Blob> got = run_pinned(l, x, descriptor, split);
    if (got.empty()) {  // refused: only where the CPU has none of its kernels
      REQUIRE_FALSE(core::cpu_features().avx2_fma());
      WARN(descriptor << " not run here (no bfloat16 depthwise kernels on this CPU)");
      return;
    }
    const std::vector<Blob> want = test::run_layer(l, {x}, "cpu/ref");
    REQUIRE(got[0].shape() == want[0].shape());
    double max_ref = 0, max_err = 0;
    for (int64_t i = 0; i < want[0].numel(); ++i) {
      const double r = want[0].data_as<float>()[i], v = got[0].data_as<float>()[i];
      max_ref = std::max(max_ref, std::abs(r));
      max_err = std::max(max_err, std::isfinite(v) ? std::abs(v - r) : 1e30);
    }
    INFO("max |ref| " << max_ref << ", max error " << max_err);
    CHECK(max_err <= 8e-3 * max_ref + 1e-6);
  }
}
