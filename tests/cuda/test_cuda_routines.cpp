// Every CUDA routine against cpu/ref on randomised shapes, in every schema it
// lists (float32/float16, nchw/nhwc) and with every routine parameter (each
// cuDNN algorithm, each cuBLASLt heuristic pick). float16 is compared with a
// looser tolerance, against cpu/ref on the same float16-rounded inputs.
#include "cuda_harness.hpp"
#include "support/run_layer.hpp"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

using namespace softneuro;
using namespace softneuro::cudatest;
using test::make_layer;

namespace {

int64_t pick(std::mt19937& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

std::string act_name(std::mt19937& rng) {
  const char* acts[] = {"none", "relu", "clip", "hardswish", "hardsigmoid", "sigmoid"};
  return acts[pick(rng, 0, 5)];
}

void add_act(std::map<std::string, Attr>& p, const std::string& act) {
  p["act"] = act;
  if (act == "clip") p["act_min"] = -0.5, p["act_max"] = 0.75;
  if (act == "hardsigmoid") p["act_alpha"] = 0.25, p["act_beta"] = 0.4;
}

}  // namespace

TEST_CASE("the CUDA routines are registered", "[routines]") {
  for (const char* type : {"conv2", "dense", "matmul", "pool2", "batchnorm", "relu", "clip", "hardswish",
                           "hardsigmoid", "sigmoid", "tanh", "gelu", "softmax", "layernorm", "add", "sub", "mul",
                           "div", "concat", "split", "transpose", "reshape", "flatten", "identity", "attention",
                           "gather", "compare", "logical", "where"}) {
    INFO(type);
    CHECK_FALSE(cuda_descriptors(type).empty());
  }
  auto conv = cuda_descriptors("conv2");
  CHECK(std::find(conv.begin(), conv.end(), "cuda:float16/cudnn") != conv.end());
  CHECK(std::find(conv.begin(), conv.end(), "cuda/kernel") != conv.end());
  auto dense = cuda_descriptors("dense");
  CHECK(std::find(dense.begin(), dense.end(), "cuda/cublaslt") != dense.end());
}

TEST_CASE("conv2: cuDNN (every algorithm) and the depthwise kernel match cpu/ref", "[routines]") {
  std::mt19937 rng(11);
  int compared = 0;
  for (int iter = 0; iter < 8; ++iter) {
    const int64_t k = pick(rng, 0, 2) * 2 + 1, s = pick(rng, 1, 2), d = iter % 4 == 3 ? 2 : 1;
    const int64_t span = d * (k - 1) + 1;  // the dilated kernel fits the input
    const int64_t n = pick(rng, 1, 2), c = pick(rng, 1, 12), h = pick(rng, span, 17), w = pick(rng, span, 17);
    const int64_t pad = pick(rng, 0, k / 2);
    int64_t group = 1, oc = pick(rng, 1, 12);
    if (iter % 3 == 1) group = c, oc = c * pick(rng, 1, 2);  // depthwise (with a multiplier)
    if (iter % 3 == 2 && c % 2 == 0) group = 2, oc = 2 * pick(rng, 1, 5);
    std::map<std::string, Attr> p{{"strides", std::vector<int64_t>{s, s}},
                                  {"pads", std::vector<int64_t>{pad, pad, pad, pad}},
                                  {"dilations", std::vector<int64_t>{d, d}},
                                  {"group", group}};
    add_act(p, act_name(rng));
    std::map<std::string, Blob> wts{{"weight", random_blob({oc, c / group, k, k}, rng)}};
    if (iter % 2 == 0) wts["bias"] = random_blob({oc}, rng);
    Layer l = make_layer("conv2", p, wts);
    compared += check_all_cuda_routines(
        l, {random_blob({n, c, h, w}, rng)},
        fmt::format("conv2 x[{},{},{},{}] k{} s{} d{} pad{} group{} oc{}", n, c, h, w, k, s, d, pad, group, oc), 10.0);
  }
  CHECK(compared >= 8 * 2);

  // Asymmetric pads: only the depthwise kernel (cuDNN pads symmetrically).
  Layer dw = make_layer("conv2", {{"pads", std::vector<int64_t>{0, 1, 1, 0}}, {"group", int64_t{4}}},
                        {{"weight", random_blob({4, 1, 3, 3}, rng)}});
  CHECK(check_all_cuda_routines(dw, {random_blob({1, 4, 7, 6}, rng)}, "depthwise asymmetric pads") >= 2);
}

TEST_CASE("dense: cuBLAS and cuBLASLt (with epilogues) match cpu/ref", "[routines]") {
  std::mt19937 rng(12);
  int compared = 0;
  for (int iter = 0; iter < 8; ++iter) {
    const int64_t rows = pick(rng, 1, 9), k = pick(rng, 1, 300), o = pick(rng, 1, 70);
    std::map<std::string, Attr> p;
    add_act(p, iter % 3 == 0 ? std::string("relu") : act_name(rng));
    std::map<std::string, Blob> wts{{"weight", random_blob({o, k}, rng)}};
    if (iter % 2 == 0) wts["bias"] = random_blob({o}, rng);
    Shape in = iter % 4 == 3 ? Shape{2, rows, k} : Shape{rows, k};
    compared += check_all_cuda_routines(make_layer("dense", p, wts), {random_blob(in, rng)},
                                        fmt::format("dense {} -> {}", in.to_string(), o), 3.0);
  }
  CHECK(compared >= 8 * 4);

  // A transformer's feed-forward: gelu fused into the dense (erf and tanh forms)
  // runs on every dense routine (cuBLAS, cuBLASLt with each heuristic, float32
  // and float16); prepare refused it, and BERT-base ran these layers on the CPU.
  for (const char* form : {"none", "tanh"}) {
    std::map<std::string, Attr> p{{"act", std::string("gelu")}, {"act_approximate", std::string(form)}};
    std::map<std::string, Blob> wts{{"weight", random_blob({96, 64}, rng)}, {"bias", random_blob({96}, rng)}};
    std::map<std::string, RoutineTally> tally;
    check_all_cuda_routines(make_layer("dense", p, wts), {random_blob({1, 16, 64}, rng, -3.f, 3.f)},
                            fmt::format("dense gelu {}", form), 3.0, &tally);
    for (const auto& [d, t] : tally) {
      INFO(d << " refused:" << t.refusals);
      CHECK(t.runs > 0);
      CHECK(t.refusals.empty());
    }
  }
}

TEST_CASE("matmul: cuBLAS strided batched matches cpu/ref", "[routines]") {
  std::mt19937 rng(13);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{5, 7}, {7, 3}}, {{2, 4, 6}, {2, 6, 5}}, {{3, 4, 6}, {6, 2}}, {{4, 6}, {3, 6, 2}}, {{6}, {6, 4}}, {{2, 3, 5}, {5}},
      {{2, 3, 4, 5}, {2, 3, 5, 6}}, {{1, 3, 4, 5}, {5, 2}}};
  int compared = 0;
  for (const auto& [a, b] : cases)
    compared += check_all_cuda_routines(make_layer("matmul", {}, {}, 2), {random_blob(a, rng), random_blob(b, rng)},
                                        fmt::format("matmul {} x {}", a.to_string(), b.to_string()), 3.0);
  CHECK(compared >= static_cast<int>(cases.size()) * 2);
}

TEST_CASE("activations match cpu/ref in every layout", "[routines]") {
  std::mt19937 rng(14);
  const std::vector<std::pair<std::string, std::map<std::string, Attr>>> ops = {
      {"relu", {}},
      {"clip", {{"min", 0.0}, {"max", 6.0}}},
      {"clip", {{"min", -0.3}}},
      {"hardswish", {}},
      {"hardsigmoid", {{"alpha", 0.3}, {"beta", 0.45}}},
      {"sigmoid", {}},
      {"tanh", {}},
      {"gelu", {}},
      {"gelu", {{"approximate", std::string("tanh")}}}};
  for (const auto& [type, params] : ops) {
    Shape s{pick(rng, 1, 2), pick(rng, 1, 9), pick(rng, 1, 13), pick(rng, 1, 13)};
    int compared = check_all_cuda_routines(make_layer(type, params), {random_blob(s, rng, -8, 8)},
                                           fmt::format("{} {}", type, s.to_string()));
    CHECK(compared == 4);  // float32/float16 x nchw/nhwc
  }
}

TEST_CASE("add/sub/mul/div broadcast like NumPy in both layouts", "[routines]") {
  std::mt19937 rng(15);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4, 5}, {2, 3, 4, 5}}, {{2, 3, 4, 5}, {3, 1, 1}}, {{2, 3, 4, 5}, {1}}, {{1, 3, 1, 5}, {2, 1, 4, 1}},
      {{4, 5}, {2, 3, 4, 5}},       {{7}, {3, 7}},             {{2, 3, 4}, {2, 3, 1}}};
  for (const char* type : {"add", "sub", "mul", "div"})
    for (const auto& [a, b] : cases) {
      float lo = std::string(type) == "div" ? 0.5f : -2.0f;
      int compared = check_all_cuda_routines(make_layer(type, {}, {}, 2), {random_blob(a, rng, lo, 2), random_blob(b, rng, lo, 2)},
                                             fmt::format("{} {} {}", type, a.to_string(), b.to_string()));
      CHECK(compared == 4);
    }
  // add's fused relu and clip (a residual add)
  for (const auto& p : std::vector<std::map<std::string, Attr>>{
           {{"act", std::string("relu")}}, {{"act", std::string("clip")}, {"act_min", -0.5}, {"act_max", 1.0}}}) {
    const Shape a{2, 3, 4, 5}, b{3, 1, 1};
    int compared = check_all_cuda_routines(make_layer("add", p, {}, 2), {random_blob(a, rng, -2, 2), random_blob(b, rng, -2, 2)},
                                           "add " + std::get<std::string>(p.at("act")));
    CHECK(compared == 4);
  }
}

TEST_CASE("pool2 max/avg with pads, strides, dilations, ceil mode, global", "[routines]") {
  std::mt19937 rng(16);
  for (int iter = 0; iter < 10; ++iter) {
    std::map<std::string, Attr> p;
    p["mode"] = std::string(iter % 2 ? "max" : "avg");
    if (iter == 9) {
      p["global"] = int64_t{1};
    } else {
      const int64_t k = pick(rng, 1, 3), pad = pick(rng, 0, k / 2);
      p["kernel"] = std::vector<int64_t>{k, k + (iter % 3 == 0)};
      p["strides"] = std::vector<int64_t>{pick(rng, 1, 2), pick(rng, 1, 2)};
      p["pads"] = std::vector<int64_t>{pad, 0, pad, pick(rng, 0, k / 2)};
      p["ceil_mode"] = int64_t{iter % 4 == 2};
      p["count_include_pad"] = int64_t{iter % 3 == 1};
      if (iter == 7) p["dilations"] = std::vector<int64_t>{2, 2};
    }
    Shape s{pick(rng, 1, 2), pick(rng, 1, 8), pick(rng, 5, 15), pick(rng, 5, 15)};
    CHECK(check_all_cuda_routines(make_layer("pool2", p), {random_blob(s, rng)}, fmt::format("pool2 #{}", iter)) == 4);
  }
}

TEST_CASE("batchnorm, softmax and layernorm match cpu/ref", "[routines]") {
  std::mt19937 rng(17);
  for (int iter = 0; iter < 4; ++iter) {
    const int64_t c = pick(rng, 1, 9);
    Shape s = iter % 2 ? Shape{2, c, 5, 3} : Shape{3, c, 7};
    Layer bn = make_layer("batchnorm", {{"epsilon", 1e-3}},
                          {{"scale", random_blob({c}, rng)}, {"bias", random_blob({c}, rng)},
                           {"mean", random_blob({c}, rng)}, {"var", random_blob({c}, rng, 0.1f, 2.0f)}});
    CHECK(check_all_cuda_routines(bn, {random_blob(s, rng)}, "batchnorm " + s.to_string()) == 4);
  }
  for (int64_t axis : {-1, 1, 0, 2}) {
    Shape s{3, 5, 4, 70};
    CHECK(check_all_cuda_routines(make_layer("softmax", {{"axis", axis}}), {random_blob(s, rng, -5, 5)},
                                  fmt::format("softmax axis {}", axis)) == 4);
  }
  CHECK(check_all_cuda_routines(make_layer("softmax", {}), {random_blob({2, 3000}, rng, -5, 5)}, "softmax long rows") == 4);
  for (int64_t axis : {-1, 1, 2}) {
    Shape s{2, 3, 6, 50};
    Shape norm;
    for (int d = static_cast<int>(axis < 0 ? axis + 4 : axis); d < 4; ++d) norm.push_back(s[d]);
    std::map<std::string, Blob> w{{"scale", random_blob(norm, rng)}};
    if (axis != 2) w["bias"] = random_blob(norm, rng);
    CHECK(check_all_cuda_routines(make_layer("layernorm", {{"axis", axis}, {"epsilon", 1e-5}}, w),
                                  {random_blob(s, rng, -3, 3)}, fmt::format("layernorm axis {}", axis)) == 2);
  }
}

TEST_CASE("concat, split, transpose and the copies match cpu/ref", "[routines]") {
  std::mt19937 rng(18);
  for (int64_t axis : {0, 1, 2, 3, -1}) {
    Shape a{2, 3, 4, 5}, b = a, c = a;
    const int ax = static_cast<int>(axis < 0 ? axis + 4 : axis);
    b[ax] = 2;
    c[ax] = 1;
    CHECK(check_all_cuda_routines(make_layer("concat", {{"axis", axis}}, {}, 3),
                                  {random_blob(a, rng), random_blob(b, rng), random_blob(c, rng)},
                                  fmt::format("concat axis {}", axis)) == 4);
    Shape whole = a;
    whole[ax] = 7;
    CHECK(check_all_cuda_routines(make_layer("split", {{"axis", axis}, {"split", std::vector<int64_t>{4, 2, 1}}}, {}, 1, 3),
                                  {random_blob(whole, rng)}, fmt::format("split axis {}", axis)) == 4);
  }
  CHECK(check_all_cuda_routines(make_layer("transpose", {{"perm", std::vector<int64_t>{0, 2, 3, 1}}}),
                                {random_blob({2, 3, 4, 5}, rng)}, "transpose nchw->nhwc") == 2);
  CHECK(check_all_cuda_routines(make_layer("transpose", {}), {random_blob({3, 4, 5}, rng)}, "transpose reversed") == 2);
  CHECK(check_all_cuda_routines(make_layer("flatten", {}), {random_blob({2, 3, 4, 5}, rng)}, "flatten") == 2);
  CHECK(check_all_cuda_routines(make_layer("reshape", {{"shape", std::vector<int64_t>{0, -1}}}),
                                {random_blob({2, 3, 4, 5}, rng)}, "reshape") == 2);
  CHECK(check_all_cuda_routines(make_layer("identity", {}), {random_blob({2, 3}, rng)}, "identity") == 2);
}

TEST_CASE("a cuDNN algorithm cuDNN refuses for the shape is rejected by prepare, not run", "[routines]") {
  std::mt19937 rng(19);
  // FFT needs stride 1 and no dilation: a strided, dilated convolution rules it out.
  Layer l = make_layer("conv2",
                       {{"strides", std::vector<int64_t>{2, 2}}, {"dilations", std::vector<int64_t>{2, 2}},
                        {"pads", std::vector<int64_t>{1, 1, 1, 1}}},
                       {{"weight", random_blob({4, 3, 3, 3}, rng)}});
  std::string why;
  auto got = run_on_device(l, {random_blob({1, 3, 12, 12}, rng)}, "cuda/cudnn", {{"algo", 4}}, &why);
  CHECK_FALSE(got.has_value());
  CHECK_THAT(why, Catch::Contains("does not support"));
  // Unknown algorithm numbers are refused too.
  got = run_on_device(l, {random_blob({1, 3, 12, 12}, rng)}, "cuda/cudnn", {{"algo", 99}}, &why);
  CHECK_FALSE(got.has_value());
}

TEST_CASE("attention: BERT-base with a padding mask, causal float16, wide heads, decode steps", "[routines]") {
  std::mt19937 rng(20);
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<int64_t> bshd{0, 2, 1, 3};
  // BERT-base as its exporters write it: q, k, v [B,S,H,D] read through perms, out
  // [B,S,H,D], the padding mask [B,1,1,S] (-10000 from the attention_mask; -inf too).
  {
    const int64_t b = 2, s = 128, h = 12, d = 64;
    Blob mask = Blob::allocate(Shape{b, 1, 1, s});
    for (int64_t j = 0; j < s; ++j) {
      mask.data_as<float>()[j] = j < 120 ? 0.0f : ninf;
      mask.data_as<float>()[s + j] = j < 100 ? 0.0f : -10000.0f;
    }
    Layer l = make_layer("attention", {{"q_perm", bshd}, {"k_perm", bshd}, {"v_perm", bshd}, {"out_perm", bshd}}, {}, 4);
    CHECK(check_all_cuda_routines(l, {random_blob({b, s, h, d}, rng), random_blob({b, s, h, d}, rng),
                                      random_blob({b, s, h, d}, rng), mask},
                                  "BERT-base attention") == 2);
  }
  // Causal (a decoder's prompt), float32 and float16: sequences that are no multiple of the
  // 32-key tile, masked rows as 0.
  CHECK(check_all_cuda_routines(make_layer("attention", {{"causal", int64_t{1}}, {"masked_rows", std::string("zero")}}, {}, 3),
                                {random_blob({2, 4, 77, 32}, rng), random_blob({2, 4, 77, 32}, rng),
                                 random_blob({2, 4, 77, 32}, rng)},
                                "causal attention 77") == 2);
  // The widest heads (128 features, 16 query rows a block) and 96 (inside that tile), a
  // mask per head and query; one query against 300 cached keys, causal from the end.
  CHECK(check_all_cuda_routines(make_layer("attention", {{"scale", 0.05}}, {}, 4),
                                {random_blob({1, 3, 40, 128}, rng), random_blob({1, 3, 200, 128}, rng),
                                 random_blob({1, 3, 200, 128}, rng), random_blob({1, 3, 40, 200}, rng)},
                                "attention d 128") == 2);
  CHECK(check_all_cuda_routines(make_layer("attention", {}, {}, 3),
                                {random_blob({2, 2, 19, 96}, rng), random_blob({2, 2, 33, 96}, rng),
                                 random_blob({2, 2, 33, 72}, rng)},
                                "attention d 96, dv 72") == 2);
  CHECK(check_all_cuda_routines(make_layer("attention", {{"causal", int64_t{1}}}, {}, 3),
                                {random_blob({1, 8, 1, 64}, rng), random_blob({1, 8, 300, 64}, rng),
                                 random_blob({1, 8, 300, 64}, rng)},
                                "attention decode step, causal") == 2);
  // Every key of every row hidden, masked_rows = nan: NaN as cpu/ref's softmax gives it.
  Blob all_hidden = Blob::allocate(Shape{1, 1, 1, 5});
  for (int64_t j = 0; j < 5; ++j) all_hidden.data_as<float>()[j] = ninf;
  auto nan_rows = run_on_device(make_layer("attention", {}, {}, 4),
                                {random_blob({1, 2, 3, 8}, rng), random_blob({1, 2, 5, 8}, rng),
                                 random_blob({1, 2, 5, 8}, rng), all_hidden},
                                "cuda/kernel");
  REQUIRE(nan_rows.has_value());
  for (int64_t i = 0; i < (*nan_rows)[0].numel(); ++i) CHECK(std::isnan((*nan_rows)[0].data_as<float>()[i]));
  // Heads wider than the kernel's shared tiles are refused.
  CHECK_THROWS_WITH(run_on_device(make_layer("attention", {}, {}, 3),
                                  {random_blob({1, 1, 4, 160}, rng), random_blob({1, 1, 4, 160}, rng),
                                   random_blob({1, 1, 4, 160}, rng)},
                                  "cuda/kernel"),
                    Catch::Contains("at most 128"));
}

TEST_CASE("gather: an embedding table's rows, negative and bad indices, float16's exact range", "[routines]") {
  std::mt19937 rng(21);
  // Token ids into a [1000, 64] weight table, some negative (from the end).
  Blob ids = Blob::allocate(Shape{2, 9});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data_as<float>()[i] = static_cast<float>(pick(rng, -1000, 999));
  Layer embed = make_layer("gather", {{"axis", int64_t{0}}}, {{"table", random_blob({1000, 64}, rng)}});
  CHECK(check_all_cuda_routines(embed, {ids}, "embedding [1000, 64]") == 2);
  // An index outside [-1000, 1000) or not whole: a row of NaN (cpu/ref raises an Error).
  Blob bad = Blob::allocate(Shape{3});
  bad.data_as<float>()[0] = 1000.0f;
  bad.data_as<float>()[1] = 2.5f;
  bad.data_as<float>()[2] = -1000.0f;
  auto got = run_on_device(embed, {bad}, "cuda/kernel");
  REQUIRE(got.has_value());
  const float* y = (*got)[0].data_as<float>();
  const float* row0 = embed.weight("table").data_as<float>();
  for (int64_t e = 0; e < 64; ++e) {
    CHECK(std::isnan(y[e]));
    CHECK(std::isnan(y[64 + e]));
    CHECK(y[128 + e] == row0[e]);
  }
  // Ids above 2048 are not all float16 values: cuda:float16 refuses such a table, float32 takes it.
  Layer vocab = make_layer("gather", {{"axis", int64_t{0}}}, {{"table", random_blob({3000, 8}, rng)}});
  Blob high = Blob::allocate(Shape{1, 5});
  for (int64_t i = 0; i < 5; ++i) high.data_as<float>()[i] = static_cast<float>(2995 - 700 * i);
  CHECK(check_all_cuda_routines(vocab, {high}, "gather [3000, 8]") == 1);
  CHECK_THROWS_WITH(run_on_device(vocab, {high}, "cuda:float16/kernel"), Catch::Contains("2048"));
}
