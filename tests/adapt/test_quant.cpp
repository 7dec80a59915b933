// Quantising and casting adapts: every one round-trips within its precision
// (quantise -> dequantise within scale/2; float16 and bfloat16 within half an
// ulp of their precision), the vector paths agree with the scalar definition
// bit for bit (the same values sit in the vector body and in the scalar
// tail), and chains compose single steps for pairs no single adapt converts.
#include "core/cpu_features.hpp"
#include "core/model_impl.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "support/run_layer.hpp"

#include <softneuro/routine.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace softneuro;

namespace {

const Routine* adapt_routine(const std::string& descriptor) {
  return core::RoutineRegistry::instance().find("adapt", descriptor, nullptr);
}

/// Runs the adapt `descriptor` on `in` (a blob in schema `from`), quantisation `q`.
Support convert(const std::string& descriptor, const Blob& in, const Schema& from, const QuantParams& q, Blob* out,
                const RoutineParams& params = {}) {
  Schema to;
  const Routine* r = core::RoutineRegistry::instance().find("adapt", descriptor, &to);
  REQUIRE(r);
  Layer l = test::make_layer("adapt", {{"from", from.to_string()}, {"to", to.to_string()}});
  LayerInfo info{&l, {in.shape()}, {in.shape()}, {q}, {q}};
  Support s = r->supports(info, to);
  if (!s) return s;
  auto prepared = r->prepare(info, to, params);
  *out = Blob::allocate(in.shape(), to.dtype, to.layout);
  std::memset(out->data(), 0x7b, out->byte_size());
  const std::size_t ws = prepared->workspace_bytes();
  std::unique_ptr<void, void (*)(void*)> workspace(ws ? std::aligned_alloc(64, (ws + 63) / 64 * 64) : nullptr, std::free);
  const Blob* ins[] = {&in};
  Blob* outs[] = {out};
  prepared->run(RunArgs{ins, outs, workspace.get(), &core::global_pool()});
  return s;
}

Blob random_floats(const Shape& s, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Blob b = Blob::allocate(s);
  for (int64_t i = 0; i < s.numel(); ++i) b.data_as<float>()[i] = d(rng);
  return b;
}

/// Logical element i (nchw order) of a blob of rank >= 3 in nhwc, seen as [N, C, S].
int64_t nhwc_index(const Shape& s, int64_t i) {
  if (s.rank() < 3) return i;
  const int64_t c = s[1], sp = s.numel() / s[0] / c;
  return ((i / (c * sp)) * sp + i % sp) * c + (i / sp) % c;
}

Blob plain_to(const Blob& plain, Layout l) {
  if (l == Layout::nchw) return plain;
  Blob out = Blob::allocate(plain.shape(), plain.dtype(), l);
  const std::size_t e = dtype_size(plain.dtype());
  for (int64_t i = 0; i < plain.numel(); ++i)
    std::memcpy(static_cast<char*>(out.data()) + nhwc_index(plain.shape(), i) * static_cast<int64_t>(e),
                static_cast<const char*>(plain.data()) + i * static_cast<int64_t>(e), e);
  return out;
}
Blob to_plain(const Blob& b) {
  if (b.layout() == Layout::nchw) return b;
  Blob out = Blob::allocate(b.shape(), b.dtype(), Layout::nchw);
  const std::size_t e = dtype_size(b.dtype());
  for (int64_t i = 0; i < b.numel(); ++i)
    std::memcpy(static_cast<char*>(out.data()) + i * static_cast<int64_t>(e),
                static_cast<const char*>(b.data()) + nhwc_index(b.shape(), i) * static_cast<int64_t>(e), e);
  return out;
}

int8_t quantize_def(float x, float scale, int32_t zp) {
  float v = x * (1.0f / scale);
  if (!(v >= -65536.0f)) v = -65536.0f;
  if (v > 65536.0f) v = 65536.0f;
  return static_cast<int8_t>(std::clamp(static_cast<int32_t>(std::nearbyint(v)) + zp, -128, 127));
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("quantise -> dequantise round-trips within scale/2 in nchw and nhwc", "[adapt][qint8]") {
  const QuantParams q{{0.02f}, {-7}, -1};
  const float lo = 0.02f * (-128 + 7), hi = 0.02f * (127 + 7);
  // (27 and 64 channels at odd sizes: the 8 x 8 dequantising transpose's blocks and both edges.)
  for (Shape s : {Shape{1, 3, 5, 7}, Shape{2, 3, 23, 29}, Shape{1, 8, 9, 70}, Shape{2, 16, 4, 4}, Shape{1, 33, 3, 2},
                  Shape{1, 27, 5, 21}, Shape{2, 64, 17, 17}, Shape{3, 37}, Shape{101}}) {
    Blob x = random_floats(s, lo, hi, 5);
    for (Layout a : {Layout::nchw, Layout::nhwc})
      for (Layout b : {Layout::nchw, Layout::nhwc}) {
        INFO(s.to_string() << " float32 " << to_string(a) << " -> qint8 " << to_string(b));
        Schema fa{Device::cpu, DType::float32, a}, qb{Device::cpu, DType::qint8, b};
        Blob xa = plain_to(x, a), qx, back;
        REQUIRE(convert(make_descriptor(qb, "quantize"), xa, fa, q, &qx));
        // Exactly the scalar definition, element by element (vector body and tail alike).
        Blob qplain = to_plain(qx);
        for (int64_t i = 0; i < s.numel(); ++i)
          REQUIRE(qplain.data_as<int8_t>()[i] == quantize_def(x.data_as<float>()[i], 0.02f, -7));
        REQUIRE(convert(make_descriptor(fa, "dequantize"), qx, qb, q, &back));
        Blob bp = to_plain(back);
        for (int64_t i = 0; i < s.numel(); ++i)  // exactly scale * (q - zp)
          REQUIRE(bits(bp.data_as<float>()[i]) == bits(0.02f * static_cast<float>(qplain.data_as<int8_t>()[i] + 7)));
        double worst = 0;
        for (int64_t i = 0; i < s.numel(); ++i) worst = std::max(worst, double(std::fabs(bp.data_as<float>()[i] - x.data_as<float>()[i])));
        CHECK(worst <= 0.02 / 2 * 1.0001);
      }
  }
}

TEST_CASE("quantise saturates out-of-range values and NaN like the scalar definition", "[adapt][qint8]") {
  const QuantParams q{{0.1f}, {3}, -1};
  std::vector<float> v = {1e30f, -1e30f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), 0.05f, 0.15f, -0.05f, 12.7f, -13.1f, 0.0f};
  // 40 elements: the values in the vector body, then again in the scalar tail.
  std::vector<float> all;
  for (int k = 0; k < 3; ++k) all.insert(all.end(), v.begin(), v.end());
  all.resize(40, 0.25f);
  for (std::size_t i = 0; i < v.size() && 33 + i < all.size(); ++i) all[33 + i] = v[i];
  Blob x = test::make_blob(Shape{static_cast<int64_t>(all.size())}, all), qx;
  REQUIRE(convert("cpu:qint8/quantize", x, Schema{}, q, &qx));
  for (std::size_t i = 0; i < all.size(); ++i) {
    INFO(i << ": " << all[i]);
    CHECK(qx.data_as<int8_t>()[i] == quantize_def(all[i], 0.1f, 3));
  }
  CHECK(qx.data_as<int8_t>()[0] == 127);
  CHECK(qx.data_as<int8_t>()[1] == -128);
}

TEST_CASE("qint8 reorders are exact and quantising adapts need calibration", "[adapt][qint8]") {
  const QuantParams q{{0.05f}, {0}, -1};
  Blob x = random_floats(Shape{2, 19, 3, 5}, -6, 6, 8), qx, qn, back;
  REQUIRE(convert("cpu:qint8/quantize", x, Schema{}, q, &qx));
  REQUIRE(convert("cpu:qint8:nhwc/reorder", qx, Schema::parse("cpu:qint8"), q, &qn));
  REQUIRE(convert("cpu:qint8/reorder", qn, Schema::parse("cpu:qint8:nhwc"), q, &back));
  CHECK(std::memcmp(back.data(), qx.data(), qx.byte_size()) == 0);
  Blob plain_n = to_plain(qn);
  CHECK(std::memcmp(plain_n.data(), qx.data(), qx.byte_size()) == 0);

  Blob unused;
  Support s = convert("cpu:qint8/quantize", x, Schema{}, QuantParams{}, &unused);
  CHECK_FALSE(s.ok);
  CHECK_THAT(s.reason, Catch::Contains("not calibrated"));
}

TEST_CASE("float16 casts: round to nearest even, specials, round trip", "[adapt][cast]") {
  const float inf = std::numeric_limits<float>::infinity();
  struct Pair { float f; uint16_t h; };
  const Pair known[] = {{1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff}, {65519.0f, 0x7bff}, {65520.0f, 0x7c00},
                        {1e9f, 0x7c00}, {inf, 0x7c00}, {-inf, 0xfc00}, {0.0f, 0x0000}, {-0.0f, 0x8000},
                        {from_bits(0x33800000), 0x0001} /* 2^-24 */, {from_bits(0x33000000), 0x0000} /* 2^-25: tie to even */,
                        {from_bits(0x33c00000), 0x0002} /* 3*2^-25: tie to even */, {from_bits(0x38800000), 0x0400} /* 2^-14 */,
                        {1.0f + 1.0f / 2048, 0x3c00} /* tie, even */, {1.0f + 3.0f / 2048, 0x3c02} /* tie, up */,
                        {6.1e-5f, 0x03ff} /* subnormal: 1023.4 * 2^-24 */, {1e-10f, 0x0000}};
  const int n = static_cast<int>(std::size(known));
  // Each value twice: in the vector body and in the scalar tail.
  std::vector<float> v(static_cast<std::size_t>(2 * n + 3), 0.5f);
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = known[i].f, v[static_cast<std::size_t>(n + 3 + i)] = known[i].f;
  v[static_cast<std::size_t>(n)] = std::numeric_limits<float>::quiet_NaN();
  Blob x = test::make_blob(Shape{1, static_cast<int64_t>(v.size())}, v), h, back;
  REQUIRE(convert("cpu:float16/cast", x, Schema{}, {}, &h));
  const auto* hp = h.data_as<uint16_t>();
  for (int i = 0; i < n; ++i) {
    INFO(known[i].f);
    CHECK(hp[i] == known[i].h);
    CHECK(hp[n + 3 + i] == known[i].h);
  }
  CHECK((hp[n] & 0x7c00) == 0x7c00);
  CHECK((hp[n] & 0x3ff) != 0);  // NaN stays NaN
  REQUIRE(convert("cpu/cast", h, Schema::parse("cpu:float16"), {}, &back));
  const float* bp = back.data_as<float>();
  CHECK(std::isnan(bp[n]));
  CHECK(bp[0] == 1.0f);
  CHECK(bp[6] == inf);
  CHECK(bp[10] == from_bits(0x33800000));

  // Random values in the normal range round-trip within half an ulp (2^-11 relative).
  Blob r = random_floats(Shape{2, 3, 7, 5}, -1000, 1000, 9), rh, rb;
  for (Layout l : {Layout::nchw, Layout::nhwc, Layout::nchw8c}) {
    Schema f32{Device::cpu, DType::float32, l}, f16{Device::cpu, DType::float16, l};
    Blob rl = Blob::allocate(r.shape(), DType::float32, l);
    std::memset(rl.data(), 0, rl.byte_size());
    std::memcpy(rl.data(), r.data(), std::min(rl.byte_size(), r.byte_size()));  // any order: casts are elementwise
    REQUIRE(convert(make_descriptor(f16, "cast"), rl, f32, {}, &rh));
    REQUIRE(convert(make_descriptor(f32, "cast"), rh, f16, {}, &rb));
    for (std::size_t i = 0; i < rl.byte_size() / 4; ++i) {
      const float a = rl.data_as<float>()[i], b = rb.data_as<float>()[i];
      REQUIRE(std::fabs(a - b) <= std::fabs(a) * (1.0f / 2048) + 1e-7f);
    }
  }
}

TEST_CASE("bfloat16 casts: round to nearest even, NaN kept, round trip", "[adapt][cast]") {
  const float inf = std::numeric_limits<float>::infinity();
  struct Pair { float f; uint16_t b; };
  const Pair known[] = {{1.0f, 0x3f80}, {from_bits(0x3f808000), 0x3f80} /* tie, even */, {from_bits(0x3f818000), 0x3f82} /* tie, up */,
                        {from_bits(0x3f808001), 0x3f81}, {inf, 0x7f80}, {-inf, 0xff80}, {from_bits(0x7f7fffff), 0x7f80},
                        {-0.0f, 0x8000}, {from_bits(0x00000001), 0x0000}};
  const int n = static_cast<int>(std::size(known));
  std::vector<float> v(static_cast<std::size_t>(16 + n), 2.0f);
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = known[i].f, v[static_cast<std::size_t>(16 + i)] = known[i].f;
  v[15] = std::numeric_limits<float>::quiet_NaN();
  Blob x = test::make_blob(Shape{static_cast<int64_t>(v.size())}, v), b, back;
  REQUIRE(convert("cpu:bfloat16/cast", x, Schema{}, {}, &b));
  const auto* bp = b.data_as<uint16_t>();
  for (int i = 0; i < n; ++i) {
    INFO(known[i].f);
    CHECK(bp[i] == known[i].b);
    CHECK(bp[16 + i] == known[i].b);
  }
  CHECK((bp[15] & 0x7f80) == 0x7f80);
  CHECK((bp[15] & 0x7f) != 0);
  REQUIRE(convert("cpu/cast", b, Schema::parse("cpu:bfloat16"), {}, &back));
  CHECK(std::isnan(back.data_as<float>()[15]));
  CHECK(back.data_as<float>()[0] == 1.0f);
  Blob r = random_floats(Shape{3, 41}, -50, 50, 4), rb, rr;
  REQUIRE(convert("cpu:bfloat16/cast", r, Schema{}, {}, &rb));
  REQUIRE(convert("cpu/cast", rb, Schema::parse("cpu:bfloat16"), {}, &rr));
  for (int64_t i = 0; i < r.numel(); ++i)
    CHECK(std::fabs(rr.data_as<float>()[i] - r.data_as<float>()[i]) <= std::fabs(r.data_as<float>()[i]) / 256 + 1e-30f);
}

TEST_CASE("chains compose single adapts where none converts the pair directly", "[adapt][chain]") {
  const QuantParams q{{0.03f}, {5}, -1};
  const Shape s{2, 13, 3, 4};
  Blob x = random_floats(s, -3, 3, 21);
  // float32 nchw8c -> qint8 nhwc: reorder, then quantise.
  Blob x8, qn, expect, back;
  REQUIRE(convert("cpu:float32:nchw8c/reorder", x, Schema{}, {}, &x8));
  {
    Blob unused;
    Support direct = convert("cpu:qint8:nhwc/quantize", x8, Schema::parse("cpu:float32:nchw8c"), q, &unused);
    REQUIRE_FALSE(direct.ok);  // no single adapt does it
  }
  REQUIRE(convert("cpu:qint8:nhwc/chain", x8, Schema::parse("cpu:float32:nchw8c"), q, &qn));
  REQUIRE(convert("cpu:qint8:nhwc/quantize", x, Schema{}, q, &expect));
  CHECK(std::memcmp(qn.data(), expect.data(), expect.byte_size()) == 0);
  // ... and back: qint8 nhwc -> float32 nchw16c, then compare in nchw.
  Blob f16c, plain;
  REQUIRE(convert("cpu:float32:nchw16c/chain", qn, Schema::parse("cpu:qint8:nhwc"), q, &f16c));
  REQUIRE(convert("cpu/reorder", f16c, Schema::parse("cpu:float32:nchw16c"), {}, &plain));
  for (int64_t i = 0; i < s.numel(); ++i) CHECK(std::fabs(plain.data_as<float>()[i] - x.data_as<float>()[i]) <= 0.03f / 2 * 1.001f);
  // float16 nhwc -> qint8 nchw: cast, then quantise (with a layout change).
  Blob xh, qh, viaf;
  REQUIRE(convert("cpu:float16:nhwc/cast", plain_to(x, Layout::nhwc), Schema::parse("cpu:float32:nhwc"), {}, &xh));
  REQUIRE(convert("cpu:qint8/chain", xh, Schema::parse("cpu:float16:nhwc"), q, &qh));
  Blob xf;
  REQUIRE(convert("cpu:float32:nhwc/cast", xh, Schema::parse("cpu:float16:nhwc"), {}, &xf));
  REQUIRE(convert("cpu:qint8/quantize", xf, Schema::parse("cpu:float32:nhwc"), q, &viaf));
  CHECK(std::memcmp(qh.data(), viaf.data(), viaf.byte_size()) == 0);

  // A pair one adapt converts is left to it; an impossible one says why.
  Blob unused;
  Support direct = convert("cpu:qint8/chain", x, Schema{}, q, &unused);
  CHECK_FALSE(direct.ok);
  CHECK_THAT(direct.reason, Catch::Contains("single adapt"));
  Support uncalibrated = convert("cpu:qint8:nhwc/chain", x8, Schema::parse("cpu:float32:nchw8c"), QuantParams{}, &unused);
  CHECK_FALSE(uncalibrated.ok);
  CHECK_THAT(uncalibrated.reason, Catch::Contains("no chain"));
}

TEST_CASE("a chain offers each shortest order of steps as 'via', all giving the same result", "[adapt][chain]") {
  const QuantParams q{{0.03f}, {5}, -1};
  const Shape s{1, 19, 5, 3};
  Blob x = random_floats(s, -3, 3, 22), x8, expect;
  REQUIRE(convert("cpu:float32:nchw8c/reorder", x, Schema{}, {}, &x8));
  REQUIRE(convert("cpu:qint8:nhwc/quantize", x, Schema{}, q, &expect));
  Schema to;
  const Routine* chain = core::RoutineRegistry::instance().find("adapt", "cpu:qint8:nhwc/chain", &to);
  REQUIRE(chain);
  Layer l = test::make_layer("adapt", {{"from", "cpu:float32:nchw8c"}, {"to", to.to_string()}});
  LayerInfo info{&l, {s}, {s}, {q}, {q}};
  auto space = chain->param_space(info, to);
  // e.g. reorder to nhwc then quantise, or reorder to nchw then quantise to nhwc.
  REQUIRE(space.size() == 1);
  CHECK(space[0].name == "via");
  CHECK(space[0].choices.size() >= 2);
  for (int64_t via : space[0].choices) {
    INFO("via " << via);
    Blob out;
    REQUIRE(convert("cpu:qint8:nhwc/chain", x8, Schema::parse("cpu:float32:nchw8c"), q, &out, {{"via", via}}));
    CHECK(std::memcmp(out.data(), expect.data(), expect.byte_size()) == 0);
  }
}

TEST_CASE("the executor inserts quantising adapts and chains around qint8 layers", "[adapt][qint8]") {
  // x -> relu (qint8 nhwc, by the routine path) -> tanh (float32 cpu/ref); both y and z are net outputs.
  core::Graph g;
  core::Tuning tuning;
  g.name = "q";
  g.inputs = {{"x", Shape{1, 8, 4, 4}, DType::float32}};
  Layer relu = test::make_layer("relu", {}, {}, 1, 1, "r");
  relu.inputs = {"x"};
  relu.outputs = {"y"};
  Layer tanh = test::make_layer("tanh", {}, {}, 1, 1, "t");
  tanh.inputs = {"y"};
  tanh.outputs = {"z"};
  g.layers = {relu, tanh};
  g.outputs = {"z", "y"};
  tuning.blob_quant["x"] = QuantParams{{4.0f / 255}, {0}, -1};
  tuning.blob_quant["y"] = QuantParams{{2.0f / 255}, {-128}, -1};
  const auto relus = registered_routines("relu");
  if (std::find(relus.begin(), relus.end(), std::string("cpu:qint8:nhwc/qint8")) == relus.end()) return;  // none in this build
  tuning.routine_path.routines = {{"r", "cpu:qint8:nhwc/qint8", {}, 0, 0}, {"t", "cpu/ref", {}, 0, 0}};
  Session net(detail::make_model(g, tuning));
  bool quantised = false;
  for (const auto& l : net.layers()) quantised = quantised || l.descriptor == "cpu:qint8:nhwc/qint8";
  if (!quantised) return;  // CPU without AVX2: the default runs instead
  Blob x = random_floats(Shape{1, 8, 4, 4}, -1.5f, 1.5f, 2);
  auto out = net.run(std::vector<NamedBlob>{{"x", x}});
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float want = std::max(0.0f, x.data_as<float>()[i]);
    CHECK(std::fabs(out[1].blob.data_as<float>()[i] - want) <= 4.0f / 255 + 1e-6f);
    CHECK(std::fabs(out[0].blob.data_as<float>()[i] - std::tanh(want)) <= 4.0f / 255 + 1e-6f);
  }
}

TEST_CASE("a calibrated constant read by a qint8 layer is quantised by the scale the tuner planned with", "[adapt][qint8]") {
  // The tuner priced the constant's quantising adapt with graph.blob_quant; the
  // executor bound the constant to its weight and dropped that quantisation, so
  // no adapt could convert it (YOLOv8n, hybrid: "no adapt routine converts blob
  // '/model.22/Unsqueeze_12_output_0' from cpu to cpu:qint8").
  core::Graph g;
  core::Tuning tuning;
  g.name = "qconst";
  g.inputs = {{"x", Shape{1, 8, 4, 4}, DType::float32}};
  Layer c;
  c.name = "c";
  c.type = "constant";
  c.outputs = {"k"};
  c.weights["value"] = random_floats(Shape{1, 8, 4, 4}, -1.5f, 1.5f, 3);
  Layer relu = test::make_layer("relu", {}, {}, 1, 1, "r");
  relu.inputs = {"k"};
  relu.outputs = {"y"};
  Layer tanh = test::make_layer("tanh", {}, {}, 1, 1, "t");
  tanh.inputs = {"x"};
  tanh.outputs = {"z"};
  g.layers = {c, relu, tanh};
  g.outputs = {"y", "z"};
  tuning.blob_quant["k"] = QuantParams{{4.0f / 255}, {0}, -1};
  tuning.blob_quant["y"] = QuantParams{{2.0f / 255}, {-128}, -1};
  const auto relus = registered_routines("relu");
  if (std::find(relus.begin(), relus.end(), std::string("cpu:qint8:nhwc/qint8")) == relus.end()) return;  // none in this build
  tuning.routine_path.routines = {{"r", "cpu:qint8:nhwc/qint8", {}, 0, 0}, {"t", "cpu/ref", {}, 0, 0}};
  Session net(detail::make_model(g, tuning));
  bool quantised = false;
  for (const auto& l : net.layers()) quantised = quantised || l.descriptor == "cpu:qint8:nhwc/qint8";
  if (!core::cpu_features().avx2_fma()) return;  // the qint8 routines need AVX2: the default runs instead
  CHECK(quantised);
  Blob x = random_floats(Shape{1, 8, 4, 4}, -1.0f, 1.0f, 4);
  auto out = net.run(std::vector<NamedBlob>{{"x", x}});
  const Blob& k = g.layers[0].weights.at("value");
  for (int64_t i = 0; i < k.numel(); ++i)
    CHECK(std::fabs(out[0].blob.data_as<float>()[i] - std::max(0.0f, k.data_as<float>()[i])) <= 4.0f / 255 + 1e-6f);
  // The graph's weight keeps its own (float32, unquantised) description.
  CHECK(k.quant().scales.empty());
}
