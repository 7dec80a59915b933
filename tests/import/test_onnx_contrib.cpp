// ONNX Runtime's transformer operators (com.microsoft), as its transformer
// optimizer writes them, against direct computations of what its CPU kernels
// compute (bench/transformers/ort_contrib_ops.py compares with ONNX Runtime itself).
#include "import/onnx_test_util.hpp"
#include "core/cpu_features.hpp"
#include "core/model_impl.hpp"

#include <softneuro/session.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

using namespace softneuro;
using namespace softneuro::test;

namespace {

void ms_domain(OnnxModel& m) {
  auto* o = m.proto.add_opset_import();
  o->set_domain("com.microsoft");
  o->set_version(1);
}

NodeRef ms_node(OnnxModel& m, const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
                const std::string& name = {}) {
  NodeRef r = m.node(op, in, out, name);
  r.p->set_domain("com.microsoft");
  return r;
}

Blob int_blob32(const Shape& s, const std::vector<int32_t>& v) {
  Blob b = Blob::allocate(s, DType::int32);
  std::memcpy(b.data(), v.data(), v.size() * sizeof(int32_t));
  return b;
}

std::vector<NamedBlob> run(Session&& s, std::vector<NamedBlob> in) { return s.run(in); }
std::vector<NamedBlob> run(Session& s, std::vector<NamedBlob> in) { return s.run(in); }

std::vector<float> values_of(const NamedBlob& b) {
  const float* p = b.blob.data_as<float>();
  return std::vector<float>(p, p + b.blob.numel());
}

/// Layer normalisation of each row of `h` values.
std::vector<float> layer_norm(const std::vector<float>& x, int64_t h, const std::vector<float>& gamma, const std::vector<float>& beta,
                              double eps) {
  std::vector<float> y(x.size());
  for (std::size_t r = 0; r < x.size() / static_cast<std::size_t>(h); ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < h; ++i) mean += x[r * h + i];
    mean /= static_cast<double>(h);
    for (int64_t i = 0; i < h; ++i) var += (x[r * h + i] - mean) * (x[r * h + i] - mean);
    var /= static_cast<double>(h);
    for (int64_t i = 0; i < h; ++i)
      y[r * h + i] = static_cast<float>((x[r * h + i] - mean) / std::sqrt(var + eps) * gamma[i] + (beta.empty() ? 0.0 : beta[i]));
  }
  return y;
}

/// Attention of q [B, S, N*H] over k, v [B, T, N*H] (rows of a past first),
/// bias(b, s, j) added to the scaled scores (-inf: not attended).
std::vector<float> attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int64_t B,
                             int64_t S, int64_t T, int64_t N, int64_t H, const std::function<double(int64_t, int64_t, int64_t)>& bias) {
  std::vector<float> y(static_cast<std::size_t>(B * S * N * H));
  const double scale = 1 / std::sqrt(static_cast<double>(H));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        std::vector<double> p(static_cast<std::size_t>(T));
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (int64_t h = 0; h < H; ++h) dot += q[((b * S + s) * N + n) * H + h] * k[((b * T + j) * N + n) * H + h];
          p[j] = dot * scale + bias(b, s, j);
          top = std::max(top, p[j]);
        }
        double sum = 0;
        for (auto& e : p) sum += (e = std::exp(e - top));
        for (int64_t h = 0; h < H; ++h) {
          double acc = 0;
          for (int64_t j = 0; j < T; ++j) acc += p[j] / sum * v[((b * T + j) * N + n) * H + h];
          y[((b * S + s) * N + n) * H + h] = static_cast<float>(acc);
        }
      }
  return y;
}

/// x [rows, in] @ w [in, out] columns [from, from + size) + bias.
std::vector<float> project(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias, int64_t rows,
                           int64_t in, int64_t out, int64_t from, int64_t size) {
  std::vector<float> y(static_cast<std::size_t>(rows * size));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < size; ++c) {
      double acc = bias[from + c];
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[i * out + from + c];
      y[r * size + c] = static_cast<float>(acc);
    }
  return y;
}

}  // namespace

TEST_CASE("contrib: SkipLayerNormalization normalises input + skip + bias, the sum its fourth output", "[onnx][contrib]") {
  const int64_t B = 2, S = 3, H = 8;
  const auto x = random_values(B * S * H, 1), skip = random_values(B * S * H, 2), gamma = random_values(H, 3), beta = random_values(H, 4),
             bias = random_values(H, 5);
  for (bool simplified : {false, true}) {
    INFO((simplified ? "SkipSimplifiedLayerNormalization" : "SkipLayerNormalization"));
    OnnxModel m(17);
    ms_domain(m);
    m.input("x", {B, S, H}).input("skip", {B, S, H}).output("y").output("sum");
    m.init("gamma", {H}, gamma).init("beta", {H}, beta).init("bias", {H}, bias);
    ms_node(m, simplified ? "SkipSimplifiedLayerNormalization" : "SkipLayerNormalization",
            simplified ? std::vector<std::string>{"x", "skip", "gamma", "bias"} : std::vector<std::string>{"x", "skip", "gamma", "beta", "bias"},
            {"y", "", "", "sum"})
        .f("epsilon", 1e-5f);
    auto out = run(Session(import_onnx(m.save("skip_ln.onnx"))),
                   {{"x", make_input(Shape{B, S, H}, x)}, {"skip", make_input(Shape{B, S, H}, skip)}});
    std::vector<float> sum(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) sum[i] = (x[i] + bias[i % H]) + skip[i];  // the bias first (contrib.cpp)
    std::vector<float> want;
    if (simplified) {
      want.resize(sum.size());
      for (int64_t r = 0; r < B * S; ++r) {
        double ms = 0;
        for (int64_t i = 0; i < H; ++i) ms += sum[r * H + i] * sum[r * H + i];
        for (int64_t i = 0; i < H; ++i) want[r * H + i] = static_cast<float>(sum[r * H + i] / std::sqrt(ms / H + 1e-5) * gamma[i]);
      }
    } else {
      want = layer_norm(sum, H, gamma, beta, 1e-5);
    }
    REQUIRE(out.size() == 2);
    CHECK(max_abs_diff(values_of(out[0]), want) < 1e-5);
    CHECK(max_abs_diff(values_of(out[1]), sum) == 0);
  }
}

TEST_CASE("contrib: EmbedLayerNormalization at any length, its mask_index the count of ones per row", "[onnx][contrib]") {
  const int64_t V = 20, P = 16, H = 8;
  const auto word = random_values(V * H, 1), pos = random_values(P * H, 2), seg = random_values(2 * H, 3), gamma = random_values(H, 4),
             beta = random_values(H, 5);
  OnnxModel m(17);
  ms_domain(m);
  m.named_input("ids", onnx::TensorProto::INT32, {"batch", "sequence"})
      .named_input("segments", onnx::TensorProto::INT32, {"batch", "sequence"})
      .named_input("mask", onnx::TensorProto::INT32, {"batch", "sequence"})
      .output("y")
      .typed_output("mask_index", onnx::TensorProto::INT32);
  m.init("word", {V, H}, word).init("pos", {P, H}, pos).init("seg", {2, H}, seg).init("gamma", {H}, gamma).init("beta", {H}, beta);
  ms_node(m, "EmbedLayerNormalization", {"ids", "segments", "word", "pos", "seg", "gamma", "beta", "mask"}, {"y", "mask_index"});
  Session session(import_onnx(m.save("embed_ln.onnx")));
  for (int64_t S : {5, 9}) {
    INFO("length " << S);
    const int64_t B = 2;
    std::vector<int32_t> ids, segments, mask;
    for (int64_t i = 0; i < B * S; ++i) {
      ids.push_back(static_cast<int32_t>((i * 7 + 3) % V));
      segments.push_back(static_cast<int32_t>(i % S >= 2));
      mask.push_back(i % S < S - 2 ? 1 : 0);
    }
    mask[1] = 2;  // not a one: not counted, as ONNX Runtime counts
    auto out = run(session, {{"ids", int_blob32(Shape{B, S}, ids)}, {"segments", int_blob32(Shape{B, S}, segments)},
                            {"mask", int_blob32(Shape{B, S}, mask)}});
    std::vector<float> sum(static_cast<std::size_t>(B * S * H));
    for (int64_t t = 0; t < B * S; ++t)
      for (int64_t h = 0; h < H; ++h)
        sum[t * H + h] = word[ids[t] * H + h] + pos[(t % S) * H + h] + seg[segments[t] * H + h];
    CHECK(max_abs_diff(values_of(out[0]), layer_norm(sum, H, gamma, beta, 1e-12)) < 1e-5);
    REQUIRE(out[1].blob.shape() == Shape{B});
    REQUIRE(out[1].blob.dtype() == DType::int32);
    CHECK(out[1].blob.data_as<int32_t>()[0] == S - 3);
    CHECK(out[1].blob.data_as<int32_t>()[1] == S - 2);
  }
}

TEST_CASE("contrib: Attention with merged Q/K/V weights, each mask form, causal and a past", "[onnx][contrib]") {
  const int64_t B = 2, N = 2, H = 3, D = N * H, P = 2;
  const auto w = random_values(D * 3 * D, 1), wb = random_values(3 * D, 2);
  const double filter = -10000;
  struct Form {
    const char* name;
    Shape shape;                                 // of the mask at sequence S (0 in a dim: the total T, -1: S)
    std::function<int32_t(int64_t, int64_t)> at;  // mask value at flat position i, given S
    std::function<bool(const std::vector<int32_t>&, int64_t, int64_t, int64_t, int64_t, int64_t)> attends;  // m, b, s, j, S, T
  };
  const std::vector<Form> forms = {
      {"none", {}, nullptr, [](auto&, int64_t, int64_t, int64_t, int64_t, int64_t) { return true; }},
      {"lengths [B]", {B}, [](int64_t i, int64_t S) { return static_cast<int32_t>(i == 0 ? S + P : S - 1 + P); },
       [](auto& m, int64_t b, int64_t, int64_t j, int64_t, int64_t) { return j < m[b]; }},
      {"ends and starts [2B]", {2 * B}, [](int64_t i, int64_t S) { return static_cast<int32_t>(i < B ? S + P - i : i - B + 1); },
       [](auto& m, int64_t b, int64_t, int64_t j, int64_t, int64_t) { return j < m[b] && j >= m[B + b]; }},
      {"raw [B, T]", {B, 0}, [](int64_t i, int64_t) { return static_cast<int32_t>((i * 5) % 7 != 3); },
       [](auto& m, int64_t b, int64_t, int64_t j, int64_t, int64_t T) { return m[b * T + j] > 0; }},
      {"raw [B, S, T]", {B, -1, 0}, [](int64_t i, int64_t) { return static_cast<int32_t>((i * 5) % 7 != 3); },
       [](auto& m, int64_t b, int64_t s, int64_t j, int64_t S, int64_t T) { return m[(b * S + s) * T + j] > 0; }},
  };
  for (bool causal : {false, true})
    for (bool past : {false, true})
      for (const Form& form : forms) {
        INFO(form.name << (causal ? ", causal" : "") << (past ? ", past" : ""));
        const int64_t PP = past ? P : 0;
        OnnxModel m(17);
        ms_domain(m);
        m.named_input("x", onnx::TensorProto::FLOAT, {std::to_string(B), "sequence", std::to_string(D)}).output("y");
        m.init("w", {D, 3 * D}, w).init("wb", {3 * D}, wb);
        std::vector<std::string> ins{"x", "w", "wb", form.at ? "mask" : ""};
        if (form.at) {
          std::vector<std::string> dims;
          for (int64_t d : form.shape) dims.push_back(d == 0 ? (past ? "past + sequence" : "sequence") : d == -1 ? "sequence" : std::to_string(d));
          m.named_input("mask", onnx::TensorProto::INT32, dims);
        }
        if (past) {
          m.named_input("past", onnx::TensorProto::FLOAT, {"2", std::to_string(B), std::to_string(N), "past", std::to_string(H)});
          ins.push_back("past");
          m.output("present");
        }
        ms_node(m, "Attention", ins, past ? std::vector<std::string>{"y", "present"} : std::vector<std::string>{"y"})
            .i("num_heads", N)
            .i("unidirectional", causal);
        const Model net = import_onnx(m.save("ms_attention.onnx"));
        CHECK(count_layers(net, "attention") == 1);
        // K and V read in place through the layer's perms, where no cache concatenates them.
        if (!past) CHECK(count_layers(net, "transpose") == 0);
        Session session(net);
        for (int64_t S : {4, 6}) {
          INFO("sequence " << S);
          const int64_t T = PP + S;
          const auto x = random_values(B * S * D, static_cast<unsigned>(S));
          std::vector<NamedBlob> in{{"x", make_input(Shape{B, S, D}, x)}};
          std::vector<int32_t> mask;
          if (form.at) {
            std::vector<int64_t> dims;
            for (int64_t d : form.shape) dims.push_back(d == 0 ? T : d == -1 ? S : d);
            const Shape ms(dims);
            for (int64_t i = 0; i < ms.numel(); ++i) mask.push_back(form.at(i, S));
            in.push_back({"mask", int_blob32(ms, mask)});
          }
          const auto past_values = random_values(2 * B * N * PP * H, 9);
          if (past) in.push_back({"past", make_input(Shape{2, B, N, PP, H}, past_values)});
          auto out = session.run(in);
          // K and V: the past's rows, then the new ones ([B, T, N*H] for the reference).
          std::vector<float> q = project(x, w, wb, B * S, D, 3 * D, 0, D), k_new = project(x, w, wb, B * S, D, 3 * D, D, D),
                             v_new = project(x, w, wb, B * S, D, 3 * D, 2 * D, D);
          std::vector<float> k(static_cast<std::size_t>(B * T * D)), v(k.size());
          for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < T; ++t)
              for (int64_t n = 0; n < N; ++n)
                for (int64_t h = 0; h < H; ++h) {
                  const auto at = static_cast<std::size_t>(((b * T + t) * N + n) * H + h);
                  if (t < PP) {
                    k[at] = past_values[static_cast<std::size_t>(((b * N + n) * PP + t) * H + h)];
                    v[at] = past_values[static_cast<std::size_t>((((B + b) * N + n) * PP + t) * H + h)];
                  } else {
                    k[at] = k_new[static_cast<std::size_t>(((b * S + t - PP) * N + n) * H + h)];
                    v[at] = v_new[static_cast<std::size_t>(((b * S + t - PP) * N + n) * H + h)];
                  }
                }
          auto bias = [&](int64_t b, int64_t s, int64_t j) {
            if (causal && j > PP + s) return -std::numeric_limits<double>::infinity();
            return form.attends(mask, b, s, j, S, T) ? 0.0 : filter;
          };
          const auto want = attention(q, k, v, B, S, T, N, H, bias);
          REQUIRE(out[0].blob.shape() == Shape{B, S, D});
          // A row whose every key is masked attends to them all shifted by the
          // filter, as ONNX Runtime does: its scores then keep float32's ~1e-3
          // steps at 10,000, which a computation in doubles does not.
          const std::vector<float> got = values_of(out[0]);
          for (int64_t b = 0; b < B; ++b)
            for (int64_t s = 0; s < S; ++s) {
              bool attended = false;
              for (int64_t j = 0; j < T; ++j) attended = attended || bias(b, s, j) == 0.0;
              for (int64_t i = (b * S + s) * D; i < (b * S + s + 1) * D; ++i)
                REQUIRE(got[static_cast<std::size_t>(i)] == Approx(want[static_cast<std::size_t>(i)]).margin(attended ? 2e-5 : 5e-3));
            }
          if (past) {
            REQUIRE(out[1].blob.shape() == Shape{2, B, N, T, H});
            const float* pr = out[1].blob.data_as<float>();
            for (int64_t b = 0; b < B; ++b)
              for (int64_t n = 0; n < N; ++n)
                for (int64_t t = 0; t < T; ++t)
                  for (int64_t h = 0; h < H; ++h)
                    REQUIRE(pr[((b * N + n) * T + t) * H + h] == Approx(k[static_cast<std::size_t>(((b * T + t) * N + n) * H + h)]).margin(1e-5));
          }
        }
      }
}

TEST_CASE("contrib: MultiHeadAttention over K and V already in heads (a cross-attention cache), Q's bias only",
          "[onnx][contrib]") {
  const int64_t B = 1, S = 3, L = 5, N = 2, H = 4, D = N * H;
  const auto q = random_values(B * S * D, 1), k4 = random_values(B * N * L * H, 2), v4 = random_values(B * N * L * H, 3),
             bias = random_values(3 * D, 4);
  OnnxModel m(17);
  ms_domain(m);
  m.input("q", {B, S, D}).input("k", {B, N, L, H}).input("v", {B, N, L, H}).output("y");
  m.init("bias", {3 * D}, bias);
  ms_node(m, "MultiHeadAttention", {"q", "k", "v", "bias"}, {"y"}).i("num_heads", N);
  auto out = run(Session(import_onnx(m.save("mha_heads.onnx"))),
                 {{"q", make_input(Shape{B, S, D}, q)}, {"k", make_input(Shape{B, N, L, H}, k4)}, {"v", make_input(Shape{B, N, L, H}, v4)}});
  std::vector<float> qb(q.size()), k(k4.size()), v(v4.size());
  for (std::size_t i = 0; i < q.size(); ++i) qb[i] = q[i] + bias[i % D];
  for (int64_t n = 0; n < N; ++n)  // [B, N, L, H] -> [B, L, N*H]
    for (int64_t j = 0; j < L; ++j)
      for (int64_t h = 0; h < H; ++h) {
        k[static_cast<std::size_t>((j * N + n) * H + h)] = k4[static_cast<std::size_t>((n * L + j) * H + h)];
        v[static_cast<std::size_t>((j * N + n) * H + h)] = v4[static_cast<std::size_t>((n * L + j) * H + h)];
      }
  const auto want = attention(qb, k, v, B, S, L, N, H, [](int64_t, int64_t, int64_t) { return 0.0; });
  REQUIRE(out[0].blob.shape() == Shape{B, S, D});
  CHECK(max_abs_diff(values_of(out[0]), want) < 2e-5);
}

TEST_CASE("contrib: the GELU forms and FusedMatMul compute their formulas", "[onnx][contrib]") {
  const int64_t R = 4, C = 6;
  const auto x = random_values(R * C, 1), bias = random_values(C, 2);
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  auto fast = [](double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); };
  auto quick = [](double v) { return v / (1 + std::exp(-1.702 * v)); };
  struct Case {
    const char* op;
    bool biased;
    std::function<double(double)> f;
  };
  for (const Case& c : {Case{"BiasGelu", true, gelu}, Case{"FastGelu", true, fast}, Case{"FastGelu", false, fast}, Case{"Gelu", false, gelu},
                        Case{"QuickGelu", false, quick}}) {
    INFO(c.op << (c.biased ? " with a bias" : ""));
    OnnxModel m(17);
    ms_domain(m);
    m.input("x", {R, C}).output("y");
    m.init("bias", {C}, bias);
    ms_node(m, c.op, c.biased ? std::vector<std::string>{"x", "bias"} : std::vector<std::string>{"x"}, {"y"});
    const Output y = run_model(m, "gelu_form.onnx", Shape{R, C}, x);
    std::vector<float> want(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = static_cast<float>(c.f(x[i] + (c.biased ? bias[i % C] : 0.0)));
    CHECK(max_abs_diff(y.values, want) < 1e-5);
  }
  // FusedMatMul: alpha * Aᵀ @ Bᵀ.
  const auto b = random_values(5 * R, 3);
  OnnxModel m(17);
  ms_domain(m);
  m.input("x", {R, C}).output("y");
  m.init("b", {5, R}, b);
  ms_node(m, "FusedMatMul", {"x", "b"}, {"y"}).i("transA", 1).i("transB", 1).f("alpha", 0.5f);
  const Output y = run_model(m, "fused_matmul.onnx", Shape{R, C}, x);
  REQUIRE(y.shape == Shape{C, 5});
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < R; ++t) acc += x[t * C + i] * b[j * R + t];
      CHECK(y.values[static_cast<std::size_t>(i * 5 + j)] == Approx(0.5 * acc).margin(1e-5));
    }
}

TEST_CASE("contrib: forms ONNX Runtime's CPU kernels refuse are refused naming the node", "[onnx][contrib]") {
  OnnxModel m(17);
  ms_domain(m);
  m.input("x", {1, 4, 6}).typed_input("mask", onnx::TensorProto::INT32, {1, 1, 4, 4}).output("y");
  m.init("w", {6, 18}, random_values(108, 1));
  ms_node(m, "Attention", {"x", "w", "", "mask"}, {"y"}, "the_attention").i("num_heads", 2);
  CHECK_THROWS_WITH(import_onnx(m.save("attention_4d_mask.onnx")), Catch::Contains("the_attention") && Catch::Contains("4-D mask"));
  OnnxModel r(17);
  ms_domain(r);
  r.input("x", {1, 4, 6}).output("y");
  r.init("w", {6, 18}, random_values(108, 1));
  ms_node(r, "Attention", {"x", "w"}, {"y"}, "rotary").i("num_heads", 2).i("do_rotary", 1);
  CHECK_THROWS_WITH(import_onnx(r.save("attention_rotary.onnx")), Catch::Contains("rotary") && Catch::Contains("do_rotary"));
}

TEST_CASE("contrib: GroupQueryAttention as onnxruntime-genai's decoders feed it: a prompt, then decode steps over a "
          "growing cache in one session, rotary and grouped heads",
          "[onnx][contrib]") {
  const int64_t N = 4, NKV = 2, H = 8, MC = 32, R = H / 2;  // rotary over every feature of a head
  std::vector<float> cos(static_cast<std::size_t>(MC * R)), sin(cos.size());
  for (int64_t p = 0; p < MC; ++p)
    for (int64_t i = 0; i < R; ++i) {
      const double f = static_cast<double>(p) / std::pow(10000.0, 2.0 * static_cast<double>(i) / H);
      cos[static_cast<std::size_t>(p * R + i)] = static_cast<float>(std::cos(f));
      sin[static_cast<std::size_t>(p * R + i)] = static_cast<float>(std::sin(f));
    }
  OnnxModel m(17);
  ms_domain(m);
  m.named_input("q", onnx::TensorProto::FLOAT, {"1", "sequence", std::to_string(N * H)})
      .named_input("k", onnx::TensorProto::FLOAT, {"1", "sequence", std::to_string(NKV * H)})
      .named_input("v", onnx::TensorProto::FLOAT, {"1", "sequence", std::to_string(NKV * H)})
      .named_input("past_key", onnx::TensorProto::FLOAT, {"1", std::to_string(NKV), "past", std::to_string(H)})
      .named_input("past_value", onnx::TensorProto::FLOAT, {"1", std::to_string(NKV), "past", std::to_string(H)})
      .named_input("attention_mask", onnx::TensorProto::INT64, {"1", "past + sequence"})
      .output("y")
      .output("present_key")
      .output("present_value");
  m.init("cos", {MC, R}, cos).init("sin", {MC, R}, sin).init_ints("one", {1}, {1});
  // seqlens_k and total_sequence_length from the mask, as the model builder writes them.
  m.node("ReduceSum", {"attention_mask", "one"}, {"length"}).i("keepdims", 0);
  m.node("Sub", {"length", "one"}, {"last"});
  m.node("Cast", {"last"}, {"seqlens_k"}).i("to", onnx::TensorProto::INT32);
  m.node("Shape", {"attention_mask"}, {"mask_shape"});
  m.node("Gather", {"mask_shape", "one"}, {"total64"}).i("axis", 0);
  m.node("Cast", {"total64"}, {"total"}).i("to", onnx::TensorProto::INT32);
  ms_node(m, "GroupQueryAttention", {"q", "k", "v", "past_key", "past_value", "seqlens_k", "total", "cos", "sin"},
          {"y", "present_key", "present_value"})
      .i("num_heads", N)
      .i("kv_num_heads", NKV)
      .i("do_rotary", 1);
  const Model net = import_onnx(m.save("gqa_decoder.onnx"));
  CHECK(count_layers(net, "rotary") == 2);  // queries and keys, each one layer (not 8 slices, products and sums)
  Session session(net);
  // Rotary in halves at position p of a head's features.
  auto rotate = [&](std::vector<float>& x, int64_t heads, int64_t S, int64_t first) {
    for (int64_t s = 0; s < S; ++s)
      for (int64_t n = 0; n < heads; ++n) {
        float* f = &x[static_cast<std::size_t>((s * heads + n) * H)];
        for (int64_t i = 0; i < R; ++i) {
          const double c = cos[static_cast<std::size_t>((first + s) * R + i)], sn = sin[static_cast<std::size_t>((first + s) * R + i)];
          const double a = f[i], b = f[i + R];
          f[i] = static_cast<float>(a * c - b * sn);
          f[i + R] = static_cast<float>(b * c + a * sn);
        }
      }
  };
  std::vector<float> cache_k, cache_v;  // [T, NKV, H] as the reference keeps them
  int64_t P = 0;
  for (int64_t S : {4, 1, 1, 3}) {
    INFO("past " << P << ", " << S << " new");
    auto q = random_values(S * N * H, static_cast<unsigned>(10 + P)), k = random_values(S * NKV * H, static_cast<unsigned>(20 + P)),
         v = random_values(S * NKV * H, static_cast<unsigned>(30 + P));
    // The session's past: [1, NKV, P, H] from the reference's cache.
    std::vector<float> pk(static_cast<std::size_t>(NKV * P * H)), pv(pk.size());
    for (int64_t t = 0; t < P; ++t)
      for (int64_t n = 0; n < NKV; ++n)
        for (int64_t h = 0; h < H; ++h) {
          pk[static_cast<std::size_t>((n * P + t) * H + h)] = cache_k[static_cast<std::size_t>((t * NKV + n) * H + h)];
          pv[static_cast<std::size_t>((n * P + t) * H + h)] = cache_v[static_cast<std::size_t>((t * NKV + n) * H + h)];
        }
    Blob mask = Blob::allocate(Shape{1, P + S}, DType::int64);
    std::fill(mask.data_as<int64_t>(), mask.data_as<int64_t>() + P + S, int64_t{1});
    auto out = run(session, {{"q", make_input(Shape{1, S, N * H}, q)},
                             {"k", make_input(Shape{1, S, NKV * H}, k)},
                             {"v", make_input(Shape{1, S, NKV * H}, v)},
                             {"past_key", make_input(Shape{1, NKV, P, H}, pk)},
                             {"past_value", make_input(Shape{1, NKV, P, H}, pv)},
                             {"attention_mask", std::move(mask)}});
    rotate(q, N, S, P);
    rotate(k, NKV, S, P);
    cache_k.insert(cache_k.end(), k.begin(), k.end());
    cache_v.insert(cache_v.end(), v.begin(), v.end());
    const int64_t T = P + S;
    std::vector<float> kf(static_cast<std::size_t>(T * N * H)), vf(kf.size());  // each KV head serving N / NKV query heads
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < H; ++h) {
          kf[static_cast<std::size_t>((t * N + n) * H + h)] = cache_k[static_cast<std::size_t>((t * NKV + n / (N / NKV)) * H + h)];
          vf[static_cast<std::size_t>((t * N + n) * H + h)] = cache_v[static_cast<std::size_t>((t * NKV + n / (N / NKV)) * H + h)];
        }
    const auto want = attention(q, kf, vf, 1, S, T, N, H, [&](int64_t, int64_t s, int64_t j) {
      return j > P + s ? -std::numeric_limits<double>::infinity() : 0.0;
    });
    REQUIRE(out[0].blob.shape() == Shape{1, S, N * H});
    CHECK(max_abs_diff(values_of(out[0]), want) < 2e-5);
    REQUIRE(out[1].blob.shape() == Shape{1, NKV, T, H});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < NKV; ++n)
        for (int64_t h = 0; h < H; ++h)
          REQUIRE(out[1].blob.data_as<float>()[(n * T + t) * H + h] ==
                  Approx(cache_k[static_cast<std::size_t>((t * NKV + n) * H + h)]).margin(1e-5));
    P = T;
  }
}

TEST_CASE("contrib: MatMulNBits dequantises its blockwise codes (low bits first, packed zero points)", "[onnx][contrib]") {
  const int64_t K = 40, N = 3, block = 16, blocks = 3;  // a K that is not a multiple of the block
  std::vector<int64_t> codes(static_cast<std::size_t>(N * blocks * block)), zeros(static_cast<std::size_t>(N * blocks));
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<int64_t>((i * 7 + 3) % 16);
  for (std::size_t i = 0; i < zeros.size(); ++i) zeros[i] = static_cast<int64_t>((i * 5 + 1) % 16);
  std::vector<int64_t> packed(static_cast<std::size_t>(N * blocks * block / 2)), zp_packed(static_cast<std::size_t>(N * 2));
  for (std::size_t i = 0; i < packed.size(); ++i) packed[i] = codes[2 * i] | (codes[2 * i + 1] << 4);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t b = 0; b < blocks; ++b) zp_packed[static_cast<std::size_t>(r * 2 + b / 2)] |= zeros[static_cast<std::size_t>(r * blocks + b)] << (4 * (b % 2));
  const auto scales = random_values(static_cast<std::size_t>(N * blocks), 2);
  OnnxModel m(17);
  ms_domain(m);
  m.input("x", {2, K}).output("y");
  m.init_typed("codes", onnx::TensorProto::UINT8, {N, blocks, block / 2}, packed)
      .init("scales", {N * blocks}, scales)
      .init_typed("zeros", onnx::TensorProto::UINT8, {N, 2}, zp_packed);
  ms_node(m, "MatMulNBits", {"x", "codes", "scales", "zeros"}, {"y"}).i("K", K).i("N", N).i("bits", 4).i("block_size", block);
  const auto x = random_values(2 * K, 1);
  const Output y = run_model(m, "matmul_nbits.onnx", Shape{2, K}, x);
  REQUIRE(y.shape == Shape{2, N});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t r = 0; r < N; ++r) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const auto b = static_cast<std::size_t>(r * blocks + k / block);
        acc += x[static_cast<std::size_t>(i * K + k)] *
               static_cast<double>(codes[static_cast<std::size_t>((r * blocks + k / block) * block + k % block)] - zeros[b]) * scales[b];
      }
      CHECK(y.values[static_cast<std::size_t>(i * N + r)] == Approx(acc).margin(1e-4));
    }
}

TEST_CASE("contrib: MatMulNBits keeps its codes blockwise (4-bit ones two a byte) and cpu/nbits_dense computes with them",
          "[onnx][contrib]") {
  // K not a multiple of the block (codes a byte each) and one of 32 (2- and
  // 4-bit codes two a byte); a decode step's 1 and 3 rows and a prompt's 9
  // (the rows kernel and the GEMM path); bits 2, 4 and 8; a bias input.
  const int64_t N = 70, block = 32;
  for (const auto& form : {std::pair<int64_t, int64_t>{200, 4}, {256, 4}, {200, 8}, {192, 2}}) {
    const int64_t K = form.first, bits = form.second;  // (not a structured binding: clang 14 captures none)
    INFO("K " << K << " bits " << bits);
    const int64_t blocks = (K + block - 1) / block;
    const int64_t levels = int64_t{1} << bits, row_codes = blocks * block, row_bytes = row_codes * bits / 8;
    std::vector<int64_t> codes(static_cast<std::size_t>(N * row_codes)), zeros(static_cast<std::size_t>(N * blocks));
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<int64_t>((i * 7 + 3) % levels);
    for (std::size_t i = 0; i < zeros.size(); ++i) zeros[i] = static_cast<int64_t>((i * 5 + 1) % levels);
    auto pack = [&](const std::vector<int64_t>& v, int64_t per_row, int64_t rows) {  // low bits first, rows byte-aligned
      const int64_t bytes = (per_row * bits + 7) / 8;
      std::vector<int64_t> out(static_cast<std::size_t>(rows * bytes));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < per_row; ++i)
          out[static_cast<std::size_t>(r * bytes + i * bits / 8)] |= v[static_cast<std::size_t>(r * per_row + i)] << (i * bits % 8);
      return out;
    };
    const auto scales = random_values(static_cast<std::size_t>(N * blocks), 2), bias = random_values(N, 3);
    OnnxModel m(17);
    ms_domain(m);
    m.named_input("x", onnx::TensorProto::FLOAT, {"1", "S", std::to_string(K)}).output("y");
    m.init_typed("codes", onnx::TensorProto::UINT8, {N, blocks, row_bytes / blocks}, pack(codes, row_codes, N))
        .init("scales", {N * blocks}, scales)
        .init_typed("zeros", onnx::TensorProto::UINT8, {N, (blocks * bits + 7) / 8}, pack(zeros, blocks, N))
        .init("bias", {N}, bias);
    ms_node(m, "MatMulNBits", {"x", "codes", "scales", "zeros", "", "bias"}, {"y"}).i("K", K).i("N", N).i("bits", bits).i("block_size", block);
    const Model net = import_onnx(m.save("matmul_nbits_" + std::to_string(bits) + ".onnx"));
    const std::string dnn = test_dir() + "/matmul_nbits.dnn";
    net.save(dnn);
    const Model loaded = Model::load(dnn);
    for (const Model* model : {&net, &loaded}) {
      bool nbits = false;
      for (const auto& l : Session(*model).layers()) nbits = nbits || (l.type == "dense" && l.descriptor == "cpu/nbits_dense");
      CHECK(nbits);
      // 2- and 4-bit codes two a byte, as the file holds 4-bit ones (a decode step reads half the bytes).
      for (const Layer& l : detail::impl_of(*model).graph.layers)
        if (l.type == "dense") CHECK(l.weight("weight").dtype() == (bits <= 4 && K % 32 == 0 ? DType::quint4 : DType::quint8));
      for (int64_t S : {1, 3, 9}) {
        INFO("S " << S << (model == &loaded ? " (the .dnn)" : ""));
        const auto x = random_values(static_cast<std::size_t>(S * K), static_cast<unsigned>(S));
        const Output y = run_net(*model, {{"x", make_input(Shape{1, S, K}, x)}}).at(0);
        REQUIRE(y.shape == Shape{1, S, N});
        for (int64_t i = 0; i < S; ++i)
          for (int64_t r = 0; r < N; ++r) {
            double acc = bias[static_cast<std::size_t>(r)], size = 0;
            for (int64_t k = 0; k < K; ++k) {
              const auto b = static_cast<std::size_t>(r * blocks + k / block);
              const double term = x[static_cast<std::size_t>(i * K + k)] *
                                  static_cast<double>(codes[static_cast<std::size_t>(r * row_codes + k)] - zeros[b]) * scales[b];
              acc += term;
              size += std::fabs(term);
            }
            // (float32 sums: a few float epsilons of the terms' size)
            CHECK(y.values[static_cast<std::size_t>(i * N + r)] == Approx(acc).margin(4e-6 * size + 1e-6));
          }
      }
    }
    // The codes with their scales: well under float32's N * K * 4 bytes.
    std::ifstream f(dnn, std::ios::binary | std::ios::ate);
    CHECK(static_cast<int64_t>(f.tellg()) < N * K * (bits <= 4 && K % 32 == 0 ? 1 : 2));
  }
}

TEST_CASE("contrib: MatMulNBits with accuracy_level 4 quantises a decode step's activations per block as ONNX Runtime does",
          "[onnx][contrib]") {
  // N 13 (rows past the last four; the strip kernels' last strip of 5 of 8 or 13 of 16); prompts of 3, 6,
  // 7 and 13 rows (the row kernels' pairs of rows and one; the strip kernels' passes of 8 or 4, 2 and 1
  // rows) in int8 too, one of 300 (past kMaxInt8Rows, 64) in float32 on the dequantised weights, but in
  // int8 where the CPU has AVX2 (the strip kernels take any length). K and block: 10 blocks of 32
  // (pairs of groups), 11 (a last group alone), 3 (one pair and a last one), 6 of 64 and 3 of 128
  // (both groups of a pair in one block), without zero points (the default, 8) at 128.
  struct Form {
    int64_t k, block;
    bool zeros;
  };
  const bool prompt_int8 = core::cpu_features().avx2_fma();  // (the strip kernels: AVX2, AVX-512 VNNI)
  for (const Form form : {Form{320, 32, true}, Form{352, 32, true}, Form{96, 32, true}, Form{384, 64, true},
                          Form{384, 128, false}}) {
    const int64_t K = form.k, N = 13, block = form.block, blocks = K / block, zp_row = (blocks + 1) / 2;
    INFO("K " << K << ", block " << block << (form.zeros ? "" : ", no zero points"));
    std::vector<int64_t> codes(static_cast<std::size_t>(N * K)), zeros(static_cast<std::size_t>(N * blocks), 8);
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<int64_t>((i * 7 + 3) % 16);
    if (form.zeros)
      for (std::size_t i = 0; i < zeros.size(); ++i) zeros[i] = static_cast<int64_t>((i * 5 + 1) % 16);
    std::vector<int64_t> packed(codes.size() / 2), zp_packed(static_cast<std::size_t>(N * zp_row));
    for (std::size_t i = 0; i < packed.size(); ++i) packed[i] = codes[2 * i] | (codes[2 * i + 1] << 4);
    for (int64_t r = 0; r < N; ++r)  // each row's zero points two a byte, the row padded to a whole byte
      for (int64_t b = 0; b < blocks; ++b)
        zp_packed[static_cast<std::size_t>(r * zp_row + b / 2)] |= zeros[static_cast<std::size_t>(r * blocks + b)] << (4 * (b % 2));
    const auto scales = random_values(static_cast<std::size_t>(N * blocks), 6);
    OnnxModel m(17);
    ms_domain(m);
    m.named_input("x", onnx::TensorProto::FLOAT, {"S", std::to_string(K)}).output("y");
    m.init_typed("codes", onnx::TensorProto::UINT8, {N, blocks, block / 2}, packed).init("scales", {N * blocks}, scales);
    std::vector<std::string> inputs{"x", "codes", "scales"};
    if (form.zeros) {
      m.init_typed("zeros", onnx::TensorProto::UINT8, {N, zp_row}, zp_packed);
      inputs.push_back("zeros");
    }
    ms_node(m, "MatMulNBits", inputs, {"y"}).i("K", K).i("N", N).i("bits", 4).i("block_size", block).i("accuracy_level", 4);
    const Model net = import_onnx(m.save("matmul_nbits_int8.onnx"));
    for (int64_t S : {1, 2, 3, 6, 7, 13, 300}) {
      INFO("S " << S);
      auto x = random_values(static_cast<std::size_t>(S * K), 7);
      x[5] = 0.0f;
      const Output y = run_net(net, {{"x", make_input(Shape{S, K}, x)}}).at(0);
      REQUIRE(y.shape == Shape{S, N});
      for (int64_t i = 0; i < S; ++i) {
        // Each block of the row: codes round-half-even of x * 127 / amax, scale amax / 127.
        std::vector<int64_t> xq(static_cast<std::size_t>(K));
        std::vector<double> xs(static_cast<std::size_t>(blocks));
        for (int64_t b = 0; b < blocks; ++b) {
          float amax = 0;
          for (int64_t k = b * block; k < (b + 1) * block; ++k) amax = std::max(amax, std::fabs(x[static_cast<std::size_t>(i * K + k)]));
          const float inverse = 127.0f / amax;
          for (int64_t k = b * block; k < (b + 1) * block; ++k)
            xq[static_cast<std::size_t>(k)] = static_cast<int64_t>(std::nearbyint(x[static_cast<std::size_t>(i * K + k)] * inverse));
          xs[static_cast<std::size_t>(b)] = amax / 127.0f;
        }
        for (int64_t r = 0; r < N; ++r) {
          double exact = 0, int8 = 0, size = 0;
          for (int64_t b = 0; b < blocks; ++b) {
            const auto at = static_cast<std::size_t>(r * blocks + b);
            int64_t acc = 0;
            for (int64_t k = b * block; k < (b + 1) * block; ++k) {
              const int64_t w = codes[static_cast<std::size_t>(r * K + k)] - zeros[at];
              acc += w * xq[static_cast<std::size_t>(k)];
              exact += static_cast<double>(w) * scales[at] * x[static_cast<std::size_t>(i * K + k)];
              size += std::fabs(static_cast<double>(w) * scales[at] * x[static_cast<std::size_t>(i * K + k)]);
            }
            int8 += static_cast<double>(acc) * scales[at] * xs[static_cast<std::size_t>(b)];
          }
          const float got = y.values[static_cast<std::size_t>(i * N + r)];
          // The int8 arithmetic; a long prompt in float32, but with the strip kernels in int8 too.
          if (S <= 64 || prompt_int8) CHECK(got == Approx(int8).margin(1e-4));
          else CHECK(got == Approx(exact).margin(1e-4));
          CHECK(got == Approx(exact).margin(0.02 * size));  // int8 activations: near the exact sum of its terms' size
        }
      }
    }
  }
}

TEST_CASE("contrib: GatherBlockQuantized gathers an embedding's rows from its 4-bit codes, kept blockwise", "[onnx][contrib]") {
  // uint8 data: 4-bit codes two a byte along the last dim (D 40 of blocks of 16: the last one short),
  // zero points packed likewise or the default 8; int4 data gathered along axis 1 (dequantised at import).
  const int64_t V = 7, D = 40, block = 16, blocks = 3;
  std::vector<int64_t> codes(static_cast<std::size_t>(V * D)), zeros(static_cast<std::size_t>(V * blocks));
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<int64_t>((i * 7 + 3) % 16);
  for (std::size_t i = 0; i < zeros.size(); ++i) zeros[i] = static_cast<int64_t>((i * 5 + 1) % 16);
  std::vector<int64_t> packed(static_cast<std::size_t>(V * D / 2)), zp_packed(static_cast<std::size_t>(V * 2));
  for (std::size_t i = 0; i < packed.size(); ++i) packed[i] = codes[2 * i] | (codes[2 * i + 1] << 4);
  for (int64_t r = 0; r < V; ++r)
    for (int64_t b = 0; b < blocks; ++b) zp_packed[static_cast<std::size_t>(r * 2 + b / 2)] |= zeros[static_cast<std::size_t>(r * blocks + b)] << (4 * (b % 2));
  const auto scales = random_values(static_cast<std::size_t>(V * blocks), 4);
  const std::vector<int64_t> ids{3, 0, 6, 6, -1, 2};
  for (bool with_zeros : {true, false}) {
    INFO((with_zeros ? "packed zero points" : "default zero point 8"));
    OnnxModel m(17);
    ms_domain(m);
    m.typed_input("ids", onnx::TensorProto::INT64, {2, 3}).output("y");
    m.init_typed("data", onnx::TensorProto::UINT8, {V, D / 2}, packed).init("scales", {V, blocks}, scales);
    std::vector<std::string> in{"data", "ids", "scales"};
    if (with_zeros) {
      m.init_typed("zeros", onnx::TensorProto::UINT8, {V, 2}, zp_packed);
      in.push_back("zeros");
    }
    ms_node(m, "GatherBlockQuantized", in, {"y"}).i("block_size", block).i("bits", 4).i("gather_axis", 0).i("quantize_axis", 1);
    const Model net = import_onnx(m.save("gather_block_quantized.onnx"));
    const std::string dnn = test_dir() + "/gather_block_quantized.dnn";
    net.save(dnn);
    for (const Model& model : {net, Model::load(dnn)}) {
      Blob x = Blob::allocate(Shape{2, 3}, DType::int64);
      for (std::size_t i = 0; i < ids.size(); ++i) x.data_as<int64_t>()[i] = ids[i];
      const Output y = run_net(model, {{"ids", x}}).at(0);
      REQUIRE(y.shape == Shape{2, 3, D});
      for (std::size_t t = 0; t < ids.size(); ++t) {
        const int64_t r = ids[t] < 0 ? ids[t] + V : ids[t];
        for (int64_t c = 0; c < D; ++c) {
          const auto b = static_cast<std::size_t>(r * blocks + c / block);
          const double want = static_cast<double>(codes[static_cast<std::size_t>(r * D + c)] - (with_zeros ? zeros[b] : 8)) * scales[b];
          CHECK(y.values[t * D + static_cast<std::size_t>(c)] == Approx(want).margin(1e-6));
        }
      }
    }
    std::ifstream f(dnn, std::ios::binary | std::ios::ate);
    CHECK(static_cast<int64_t>(f.tellg()) < V * D * 4);  // codes a byte each, not float32
  }
  // int4 data [3, 2, 32] gathered along axis 1, blocks along the last dim: a float table.
  OnnxModel g(21);
  ms_domain(g);
  g.typed_input("ids", onnx::TensorProto::INT64, {1}).output("y");
  std::vector<int64_t> v4(3 * 2 * 32);
  for (std::size_t i = 0; i < v4.size(); ++i) v4[i] = static_cast<int64_t>(i % 16) - 8;
  std::vector<int64_t> v4_packed(v4.size() / 2);
  for (std::size_t i = 0; i < v4_packed.size(); ++i) v4_packed[i] = (v4[2 * i] & 0xF) | ((v4[2 * i + 1] & 0xF) << 4);
  const auto s4 = random_values(3 * 2 * 2, 5);
  g.init_typed("data", 22 /* INT4 */, {3, 2, 32}, v4_packed).init("scales", {3, 2, 2}, s4);
  ms_node(g, "GatherBlockQuantized", {"data", "ids", "scales"}, {"y"}).i("block_size", 16).i("gather_axis", 1).i("quantize_axis", 2);
  Blob one = Blob::allocate(Shape{1}, DType::int64);
  one.data_as<int64_t>()[0] = 1;
  const Output y4 = run_net(import_onnx(g.save("gather_block_quantized_int4.onnx")), {{"ids", one}}).at(0);
  REQUIRE(y4.shape == Shape{3, 1, 32});
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t c = 0; c < 32; ++c) {
      const auto i = static_cast<std::size_t>((a * 2 + 1) * 32 + c);
      CHECK(y4.values[static_cast<std::size_t>(a * 32 + c)] ==
            Approx(static_cast<double>(v4[i]) * s4[static_cast<std::size_t>((a * 2 + 1) * 2 + c / 16)]).margin(1e-6));
    }
}

TEST_CASE("contrib: FusedConv and FusedGemm are their convolution or product, Z added, then the activation",
          "[onnx][contrib]") {
  const auto w = random_values(6 * 4 * 9, 1), b = random_values(6, 2), z = random_values(6 * 5 * 5, 3), x = random_values(4 * 5 * 5, 4);
  auto conv_model = [&](bool fused) {
    OnnxModel m(17);
    ms_domain(m);
    m.input("x", {1, 4, 5, 5}).output("y");
    m.init("w", {6, 4, 3, 3}, w).init("b", {6}, b).init("z", {1, 6, 5, 5}, z);
    if (fused) {
      NodeRef c = ms_node(m, "FusedConv", {"x", "w", "b", "z"}, {"y"}).s("activation", "HardSigmoid").ints("pads", {1, 1, 1, 1});
      auto* a = c.p->add_attribute();  // activation_params: alpha 1/6, beta 0.5 (as ONNX Runtime writes HardSwish's)
      a->set_name("activation_params");
      a->set_type(onnx::AttributeProto::FLOATS);
      a->add_floats(1.0f / 6);
      a->add_floats(0.5f);
    } else {
      m.node("Conv", {"x", "w", "b"}, {"c"}).ints("pads", {1, 1, 1, 1});
      m.node("Add", {"c", "z"}, {"s"});
      m.node("HardSigmoid", {"s"}, {"y"}).f("alpha", 1.0f / 6).f("beta", 0.5f);
    }
    return m;
  };
  const Output got = run_model(conv_model(true), "fused_conv.onnx", Shape{1, 4, 5, 5}, x);
  const Output want = run_model(conv_model(false), "plain_conv.onnx", Shape{1, 4, 5, 5}, x);
  REQUIRE(got.shape == Shape{1, 6, 5, 5});
  CHECK(max_abs_diff(got.values, want.values) < 1e-6);
  // FusedGemm: LeakyRelu(0.5 * x @ bᵀ + 2 * c), activation_alpha its slope.
  OnnxModel g(17);
  ms_domain(g);
  g.input("x", {3, 8}).output("y");
  const auto gb = random_values(5 * 8, 5), gc = random_values(5, 6), gx = random_values(3 * 8, 7);
  g.init("b", {5, 8}, gb).init("c", {5}, gc);
  ms_node(g, "FusedGemm", {"x", "b", "c"}, {"y"}).s("activation", "LeakyRelu").f("activation_alpha", 0.1f).i("transB", 1).f("alpha", 0.5f).f(
      "beta", 2.0f);
  const Output y = run_model(g, "fused_gemm.onnx", Shape{3, 8}, gx);
  REQUIRE(y.shape == Shape{3, 5});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double acc = 2.0 * gc[static_cast<std::size_t>(j)];
      for (int64_t k = 0; k < 8; ++k) acc += 0.5 * gx[static_cast<std::size_t>(i * 8 + k)] * gb[static_cast<std::size_t>(j * 8 + k)];
      CHECK(y.values[static_cast<std::size_t>(i * 5 + j)] == Approx(acc > 0 ? acc : 0.1 * acc).margin(1e-5));
    }
}

TEST_CASE("contrib: GroupQueryAttention's position_ids: a first prompt counts from its first id", "[onnx][contrib]") {
  const int64_t N = 2, NKV = 1, H = 4, MC = 16, R = H / 2, S = 3;
  std::vector<float> cos(static_cast<std::size_t>(MC * R)), sin(cos.size());
  for (int64_t p = 0; p < MC; ++p)
    for (int64_t i = 0; i < R; ++i) {
      cos[static_cast<std::size_t>(p * R + i)] = static_cast<float>(std::cos(0.3 * static_cast<double>(p * (i + 1))));
      sin[static_cast<std::size_t>(p * R + i)] = static_cast<float>(std::sin(0.3 * static_cast<double>(p * (i + 1))));
    }
  OnnxModel m(17);
  ms_domain(m);
  m.input("q", {1, S, N * H}).input("k", {1, S, NKV * H}).input("v", {1, S, NKV * H});
  m.typed_input("seqlens_k", onnx::TensorProto::INT32, {1}).typed_input("position_ids", onnx::TensorProto::INT64, {1, S});
  m.output("y");
  m.init("cos", {MC, R}, cos).init("sin", {MC, R}, sin).init_typed("total", onnx::TensorProto::INT32, {}, {S});
  ms_node(m, "GroupQueryAttention", {"q", "k", "v", "", "", "seqlens_k", "total", "cos", "sin", "position_ids"}, {"y"})
      .i("num_heads", N)
      .i("kv_num_heads", NKV)
      .i("do_rotary", 1);
  auto q = random_values(S * N * H, 1), k = random_values(S * NKV * H, 2), v = random_values(S * NKV * H, 3);
  Blob ids = Blob::allocate(Shape{1, S}, DType::int64);
  const int64_t given[] = {5, 0, 0};  // only the first counts in a first prompt: positions 5, 6, 7
  std::copy(given, given + S, ids.data_as<int64_t>());
  auto out = run(Session(import_onnx(m.save("gqa_position_ids.onnx"))),
                 {{"q", make_input(Shape{1, S, N * H}, q)}, {"k", make_input(Shape{1, S, NKV * H}, k)},
                  {"v", make_input(Shape{1, S, NKV * H}, v)}, {"seqlens_k", int_blob32(Shape{1}, {static_cast<int32_t>(S - 1)})},
                  {"position_ids", std::move(ids)}});
  auto rotate = [&](std::vector<float>& x, int64_t heads) {
    for (int64_t s = 0; s < S; ++s)
      for (int64_t n = 0; n < heads; ++n)
        for (int64_t i = 0; i < R; ++i) {
          float* f = &x[static_cast<std::size_t>((s * heads + n) * H)];
          const double c = cos[static_cast<std::size_t>((5 + s) * R + i)], sn = sin[static_cast<std::size_t>((5 + s) * R + i)];
          const double a = f[i], b = f[i + R];
          f[i] = static_cast<float>(a * c - b * sn);
          f[i + R] = static_cast<float>(b * c + a * sn);
        }
  };
  rotate(q, N);
  rotate(k, NKV);
  std::vector<float> kf, vf;  // the one KV head for both query heads
  for (int64_t t = 0; t < S; ++t)
    for (int64_t n = 0; n < N; ++n) {
      kf.insert(kf.end(), k.begin() + t * H, k.begin() + (t + 1) * H);
      vf.insert(vf.end(), v.begin() + t * H, v.begin() + (t + 1) * H);
    }
  const auto want = attention(q, kf, vf, 1, S, S, N, H, [](int64_t, int64_t s, int64_t j) {
    return j > s ? -std::numeric_limits<double>::infinity() : 0.0;
  });
  REQUIRE(out[0].blob.shape() == Shape{1, S, N * H});
  CHECK(max_abs_diff(values_of(out[0]), want) < 2e-5);
}

TEST_CASE("contrib: QAttention and QEmbedLayerNormalization (quantize_dynamic after the optimizer) compute their float "
          "forms on the dequantised values, in integers",
          "[onnx][contrib]") {
  const int64_t S = 5, N = 2, H = 3, D = N * H, V = 11, P = 8;
  std::vector<int64_t> w(static_cast<std::size_t>(D * 3 * D)), table(static_cast<std::size_t>(V * D));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<int64_t>((i * 37) % 255) - 127;
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int64_t>((i * 53) % 256);
  std::vector<float> w_scale(static_cast<std::size_t>(3 * D));
  for (std::size_t j = 0; j < w_scale.size(); ++j) w_scale[j] = 0.002f + 0.0005f * static_cast<float>(j);
  const auto bias = random_values(3 * D, 2), x = random_values(S * D, 3);
  std::vector<float> w_deq(w.size()), table_deq(table.size());
  for (std::size_t i = 0; i < w.size(); ++i) w_deq[i] = static_cast<float>(w[i]) * w_scale[i % (3 * D)];
  for (std::size_t i = 0; i < table.size(); ++i) table_deq[i] = (static_cast<float>(table[i]) - 120.0f) * 0.01f;
  const std::vector<NamedBlob> in{{"x", make_input(Shape{1, S, D}, x)}};

  SECTION("QAttention: each projection one dynamic_quant_dense") {
    auto model = [&](bool quantised) {
      OnnxModel m(17);
      ms_domain(m);
      m.input("x", {1, S, D}).output("y");
      m.init("bias", {3 * D}, bias);
      m.node("DynamicQuantizeLinear", {"x"}, {"q", "s", "z"});
      if (quantised) {
        m.init_typed("w", onnx::TensorProto::INT8, {D, 3 * D}, w).init("ws", {3 * D}, w_scale);
        ms_node(m, "QAttention", {"q", "w", "bias", "s", "ws", "", "z"}, {"y"}).i("num_heads", N);
      } else {
        m.init("w", {D, 3 * D}, w_deq);
        m.node("DequantizeLinear", {"q", "s", "z"}, {"xd"});
        ms_node(m, "Attention", {"xd", "w", "bias"}, {"y"}).i("num_heads", N);
      }
      return import_onnx(m.save(quantised ? "qattention.onnx" : "qattention_float.onnx"));
    };
    const Model q = model(true), f = model(false);
    CHECK(count_layers(q, "dynamic_quant_dense") == 3);
    const auto got = values_of(run(Session(q), in)[0]), want = values_of(run(Session(f), in)[0]);
    double scale = 0;
    for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    CHECK(max_abs_diff(got, want) <= 1e-5 * scale);
  }
  SECTION("QEmbedLayerNormalization: the word table stays uint8") {
    const auto pos = random_values(P * D, 4), gamma = random_values(D, 5), beta = random_values(D, 6);
    auto model = [&](bool quantised) {
      OnnxModel m(17);
      ms_domain(m);
      m.named_input("ids", onnx::TensorProto::INT32, {"batch", "sequence"}).output("y");
      if (quantised) {
        // The small tables on a grid of 1/64 with zero point 0 (exact), the word table's own.
        auto grid = [](const std::vector<float>& v) {
          std::vector<int64_t> q;
          for (float f : v) q.push_back(static_cast<int64_t>(std::lround(f * 64.0f)) + 128);
          return q;
        };
        m.init_typed("word", onnx::TensorProto::UINT8, {V, D}, table).init("word_s", {}, {0.01f}).init_typed("word_z", onnx::TensorProto::UINT8, {}, {120});
        m.init_typed("pos", onnx::TensorProto::UINT8, {P, D}, grid(pos)).init("pos_s", {}, {1.0f / 64}).init_typed("pos_z", onnx::TensorProto::UINT8, {}, {128});
        m.init_typed("gamma", onnx::TensorProto::UINT8, {D}, grid(gamma)).init("gamma_s", {}, {1.0f / 64}).init_typed("gamma_z", onnx::TensorProto::UINT8, {}, {128});
        m.init_typed("beta", onnx::TensorProto::UINT8, {D}, grid(beta)).init("beta_s", {}, {1.0f / 64}).init_typed("beta_z", onnx::TensorProto::UINT8, {}, {128});
        ms_node(m, "QEmbedLayerNormalization",
                {"ids", "", "word", "pos", "", "gamma", "beta", "", "word_s", "pos_s", "", "gamma_s", "beta_s", "word_z", "pos_z", "",
                 "gamma_z", "beta_z"},
                {"y"});
      } else {
        auto on_grid = [](const std::vector<float>& v) {
          std::vector<float> g;
          for (float f : v) g.push_back(static_cast<float>(std::lround(f * 64.0f)) / 64.0f);
          return g;
        };
        m.init("word", {V, D}, table_deq).init("pos", {P, D}, on_grid(pos)).init("gamma", {D}, on_grid(gamma)).init("beta", {D}, on_grid(beta));
        ms_node(m, "EmbedLayerNormalization", {"ids", "", "word", "pos", "", "gamma", "beta"}, {"y"});
      }
      return import_onnx(m.save(quantised ? "qembed.onnx" : "qembed_float.onnx"));
    };
    const Model q = model(true), f = model(false);
    bool uint8_table = false;
    for (const auto& l : detail::impl_of(q).graph.layers)
      if (l.type == "gather" && l.find_weight("table")) uint8_table = l.weight("table").dtype() == DType::quint8;
    CHECK(uint8_table);
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < 2 * S; ++i) ids.push_back(static_cast<int32_t>((i * 7 + 2) % V));
    const std::vector<NamedBlob> tokens{{"ids", int_blob32(Shape{2, S}, ids)}};
    CHECK(max_abs_diff(values_of(run(Session(q), tokens)[0]), values_of(run(Session(f), tokens)[0])) < 1e-6);
  }
}
