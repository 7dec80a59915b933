// deconv2: cpu/ref against ONNX Runtime's ConvTranspose (tests/import/test_onnx_deconv.cpp),
// and */onednn in every layout and cpu:float32:nhwc/xnnpack against cpu/ref over groups, strides, dilations,
// pads, output_padding, bias and fused activations.
#include "routines/f32_check.hpp"

#include <fmt/format.h>

using namespace softneuro;
using namespace softneuro::test;
using namespace softneuro::test::f32;

namespace {

Layer deconv_layer(int64_t c, int64_t oc, int64_t group, int64_t k, int64_t s, int64_t d, std::vector<int64_t> pads,
                   std::vector<int64_t> output_padding, bool bias, std::mt19937& rng) {
  std::map<std::string, Blob> weights{{"weight", random_blob({c, oc / group, k, k + 1}, rng)}};
  if (bias) weights["bias"] = random_blob({oc}, rng);
  return make_layer("deconv2",
                    {{"strides", std::vector<int64_t>{s, s + 1}},
                     {"pads", pads},
                     {"dilations", std::vector<int64_t>{d, 1}},
                     {"output_padding", output_padding},
                     {"group", group}},
                    weights);
}

/// Trial `trial` of the generated deconvolutions: groups, kernel, stride,
/// dilation, pads, output_padding, bias and a fused activation vary with it.
struct DeconvCase {
  Layer layer;
  Blob x;
  std::string what;
};
DeconvCase random_deconv_case(int trial, std::mt19937& rng) {
  const int64_t group = trial % 3 == 2 ? 2 : 1;
  const int64_t c = 4 * group * pick(rng, 1, 3), oc = 2 * group * pick(rng, 1, 4);
  const int64_t k = pick(rng, 1, 3), s = pick(rng, 1, 3), d = trial % 4 == 1 ? 2 : 1;
  std::vector<int64_t> pads{pick(rng, 0, k - 1), pick(rng, 0, k - 1), pick(rng, 0, k - 1), pick(rng, 0, k - 1)};
  std::vector<int64_t> op{trial % 2 ? std::min<int64_t>(s - 1, 1) : 0, trial % 5 == 3 ? std::min<int64_t>(s, 1) : 0};
  Layer l = deconv_layer(c, oc, group, k, s, d, pads, op, trial % 3 != 1, rng);
  if (trial % 4 == 3) set_act(l, kActs[trial % 5], rng);
  Blob x = random_blob({trial % 2 ? 2 : 1, c, pick(rng, 2, 7), pick(rng, 2, 7)}, rng);
  return {std::move(l), std::move(x),
          fmt::format("trial {} c {} oc {} group {} k {} s {} d {}", trial, c, oc, group, k, s, d)};
}

}  // namespace

TEST_CASE("deconv2: */onednn matches cpu/ref in every layout", "[deconv][onednn]") {
  std::mt19937 rng(11);
  int checked = 0;
  for (const char* descriptor : {"cpu/onednn", "cpu:float32:nhwc/onednn", "cpu:float32:nchw8c/onednn", "cpu:float32:nchw16c/onednn"})
    for (int trial = 0; trial < 12; ++trial) {
      const DeconvCase t = random_deconv_case(trial, rng);
      INFO(descriptor << " " << t.what);
      std::string why;
      if (check_case(t.layer, {t.x}, descriptor, {}, &why)) {
        ++checked;
        continue;
      }
      // Refusals: a missing ISA, or a case oneDNN has only reference code for
      // (or, on aarch64, a fused hardswish its jit kernels skip), or a bias or
      // activation on partly filled channel blocks (no sound pass after it).
      INFO(why);
      CHECK((isa_missing(why) || why.find("reference implementation") != std::string::npos ||
             why.find("skip a fused hardswish") != std::string::npos ||
             why.find("leave a pass after it unsound") != std::string::npos));
    }
#if defined(__x86_64__)
  CHECK(checked >= 24);
#else
  if (checked == 0) WARN("oneDNN has only reference code for deconvolutions here");  // aarch64 without SVE
#endif
}

TEST_CASE("deconv2: cpu:float32:nhwc/xnnpack matches cpu/ref", "[deconv][xnnpack]") {
  std::mt19937 rng(12);
  int checked = 0, unavailable = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const DeconvCase t = random_deconv_case(trial, rng);
    INFO(t.what);
    std::string why;
    if (check_case(t.layer, {t.x}, "cpu:float32:nhwc/xnnpack", {}, &why)) {
      ++checked;
      continue;
    }
    INFO(why);
    const bool capped = why.find("SOFTNEURO_MAX_CPU_ISA") != std::string::npos;
    unavailable += capped;
    CHECK((capped || why.find("output_padding") != std::string::npos || why.find("SiLU") != std::string::npos));
  }
  if (unavailable == 0) CHECK(checked >= 18);
}

TEST_CASE("deconv2: cpu:float32:nhwc/pixel_shuffle matches cpu/ref where the kernel equals the stride", "[deconv][pixel_shuffle]") {
  // Output channels x kernel width below and above the GEMM tile's width (the transposed
  // product and the direct one), non-square kernels, a batch of two, bias or none, activations.
  std::mt19937 rng(13);
  struct C {
    int64_t c, oc, kh, kw, n, h, w;
  };
  int trial = 0;
  for (const C& t : {C{24, 1, 2, 2, 1, 9, 11}, C{24, 24, 2, 2, 1, 7, 13}, C{5, 3, 3, 1, 2, 4, 5}, C{8, 40, 1, 2, 1, 3, 17},
                     C{16, 7, 2, 3, 2, 5, 3}, C{300, 2, 2, 2, 1, 2, 3}, C{3, 17, 4, 4, 1, 1, 1}}) {
    std::map<std::string, Blob> weights{{"weight", random_blob({t.c, t.oc, t.kh, t.kw}, rng)}};
    if (trial % 3 != 2) weights["bias"] = random_blob({t.oc}, rng);
    Layer l = make_layer("deconv2", {{"strides", std::vector<int64_t>{t.kh, t.kw}}}, weights);
    if (trial == 0) l.params["act"] = std::string("sigmoid");
    else if (trial % 2) set_act(l, kActs[trial % 5], rng);
    INFO("trial " << trial << " c " << t.c << " oc " << t.oc << " kernel " << t.kh << "x" << t.kw);
    if (!check_or_skip(l, {random_blob({t.n, t.c, t.h, t.w}, rng)}, "cpu:float32:nhwc/pixel_shuffle")) return;
    ++trial;
  }
  SECTION("anything but a kernel equal to its stride is refused, naming why") {
    Blob x = random_blob({1, 4, 3, 3}, rng);
    auto refusal = [&](std::map<std::string, Attr> p, int64_t group = 1) {
      Layer l = make_layer("deconv2", std::move(p), {{"weight", random_blob({4, 4 / group, 2, 2}, rng)}});
      if (group > 1) l.params["group"] = group;
      return run_in_schema(l, {x}, "cpu:float32:nhwc/pixel_shuffle").support;
    };
    for (const Support& s : {refusal({{"strides", std::vector<int64_t>{1, 1}}}),
                             refusal({{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{0, 0, 1, 1}}}),
                             refusal({{"strides", std::vector<int64_t>{2, 2}}, {"output_padding", std::vector<int64_t>{1, 1}}}),
                             refusal({{"strides", std::vector<int64_t>{2, 2}}}, 2)}) {
      CHECK_FALSE(s);
      CHECK((s.reason.find("kernels equal to their strides") != std::string::npos || isa_missing(s.reason)));
    }
  }
}

TEST_CASE("deconv2: bad parameters are errors naming the field", "[deconv]") {
  std::mt19937 rng(1);
  Blob x = random_blob({1, 4, 3, 3}, rng);
  auto field_of = [&](const Layer& l) {
    try {
      run_layer(l, {x});
    } catch (const Error& e) {
      return e.field();
    }
    return std::string("(no error)");
  };
  CHECK(field_of(deconv_layer(4, 2, 1, 2, 1, 1, {0, 0, 0, 0}, {1, 0}, true, rng)) == "output_padding");  // not below stride 1
  CHECK(field_of(deconv_layer(4, 3, 3, 2, 2, 1, {0, 0, 0, 0}, {0, 0}, false, rng)) == "group");  // 3 groups of 4 channels
  CHECK(field_of(deconv_layer(6, 2, 1, 2, 2, 1, {0, 0, 0, 0}, {0, 0}, true, rng)) == "weight");  // 6 input channels in the weight, 4 given
  CHECK(field_of(deconv_layer(4, 2, 1, 1, 1, 1, {2, 0, 2, 0}, {0, 0}, true, rng)) == "pads");     // empty output
}
