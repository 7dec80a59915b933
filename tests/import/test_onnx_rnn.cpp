// ONNX LSTM and GRU into lstm / gru: directions, biases, initial states,
// peepholes, clip, linear_before_reset; values from ONNX Runtime 1.32 (opset 14,
// layout 0, which ONNX Runtime supports; layout 1 is checked against layout 0
// here and cpu/eigen against cpu/ref in the routine generator) for
// x = (arange % 7 - 3) / 4, W = (arange % 5 - 2) / 3, R = (arange % 6 - 2.5) / 4,
// B = (arange % 9 - 4) / 10, initial_h = (arange % 5 - 2) / 5,
// initial_c = (arange % 4 - 1.5) / 3, P = (arange % 5 - 2) / 6.
#include "import/onnx_test_util.hpp"

#include <catch2/catch.hpp>

#include <fmt/format.h>

using namespace softneuro;
using namespace softneuro::test;

namespace {


struct Case {
  const char* name;
  const char* op;
  int64_t T, B, I, H;
  const char* direction;
  int64_t layout;
  bool bias, initial_h, initial_c, peephole;
  float clip;
  int64_t linear_before_reset;
  std::vector<float> y, y_h, y_c;
};

const std::vector<Case> kCases = {
  {"lstm_fwd", "LSTM", 3, 2, 3, 2, "forward", 0, true, false, false, false, 0.0f, 0,
   {-0.031970985f, 0.057859935f, 0.02647727f, 0.059220087f, 0.038515035f, 0.070582546f, 0.016658731f, 0.091901667f, 0.10365334f, 0.040387686f, -0.012315991f, 0.11754535f},
   {0.10365334f, 0.040387686f, -0.012315991f, 0.11754535f},
   {0.36332589f, 0.093417361f, -0.028451497f, 0.32452711f},
  },
  {"lstm_bidi_states_peep", "LSTM", 3, 2, 3, 2, "bidirectional", 0, true, true, true, true, 0.8f, 0,
   {-0.013506422f, 0.03908515f, 0.056031805f, 0.14103125f, -0.35085297f, 0.093220457f, 0.11336749f, 0.028276214f, 0.044785745f, 0.04699501f, 0.02099349f, 0.14488059f, -0.22257803f, -0.078348778f, 0.032586884f, 0.11010354f, 0.086193062f, 0.033852641f, -0.016181774f, 0.1617348f, -0.12812062f, -0.20273975f, -0.041423552f, 0.15960379f},
   {0.086193062f, 0.033852641f, -0.016181774f, 0.1617348f, -0.35085297f, 0.093220457f, 0.11336749f, 0.028276214f},
   {0.28553408f, 0.077447526f, -0.036664829f, 0.44516331f, -0.61384273f, 0.31027406f, 0.23494227f, 0.08873263f},
  },
  {"lstm_rev_layout1", "LSTM", 4, 1, 2, 3, "reverse", 0, false, true, false, false, 0.0f, 0,
   {-0.20379466f, 0.1000948f, -0.083505586f, -0.027103547f, 0.016488696f, -0.039132379f, 0.017987339f, -0.07876014f, -0.038148474f, -0.074860796f, 0.015812991f, -0.11233359f},
   {-0.20379466f, 0.1000948f, -0.083505586f},
   {-0.38378012f, 0.28408316f, -0.12801236f},
  },
  {"gru_fwd", "GRU", 3, 2, 3, 2, "forward", 0, true, false, false, false, 0.0f, 0,
   {-0.21595937f, 0.30912155f, 0.066242099f, -0.09819027f, -0.502285f, 0.048401222f, -0.039408173f, -0.0076579973f, -0.48780847f, -0.10498951f, -0.18171701f, 0.16960068f},
   {-0.48780847f, -0.10498951f, -0.18171701f, 0.16960068f},
  },
  {"gru_bidi_lbr", "GRU", 3, 2, 3, 2, "bidirectional", 0, true, true, false, false, 0.0f, 1,
   {-0.41370192f, 0.22229448f, 0.14196901f, 0.090313874f, 0.60696542f, 0.34608856f, 0.25549996f, 0.29580575f, -0.51504731f, -0.014107801f, 0.053401444f, 0.17218867f, 0.10487725f, 0.5445174f, 0.40197149f, 0.16784252f, -0.40253043f, -0.14409074f, -0.091521956f, 0.33715954f, 0.13975435f, 0.51302582f, 0.35027003f, 0.04210132f},
   {-0.40253043f, -0.14409074f, -0.091521956f, 0.33715954f, 0.60696542f, 0.34608856f, 0.25549996f, 0.29580575f},
  },
  {"gru_rev_clip", "GRU", 4, 1, 2, 3, "reverse", 0, true, true, false, false, 0.5f, 0,
   {0.12180662f, 0.44139203f, 0.44663775f, 0.24396288f, 0.41290405f, 0.42111653f, 0.29548314f, 0.35218811f, 0.35351792f, 0.020750105f, 0.21214098f, 0.17446804f},
   {0.12180662f, 0.44139203f, 0.44663775f},
  },
};

/// The case's model; layout 1 transposes x and the states around the same computation.
OnnxModel model_of(const Case& c, int64_t layout) {
  const int64_t G = std::string(c.op) == "LSTM" ? 4 : 3, D = std::string(c.direction) == "bidirectional" ? 2 : 1;
  OnnxModel m(14);
  const std::vector<int64_t> xs = layout ? std::vector<int64_t>{c.B, c.T, c.I} : std::vector<int64_t>{c.T, c.B, c.I};
  const std::vector<int64_t> st = layout ? std::vector<int64_t>{c.B, D, c.H} : std::vector<int64_t>{D, c.B, c.H};
  m.input("x", xs);
  m.init("W", {D, G * c.H, c.I}, pattern(static_cast<std::size_t>(D * G * c.H * c.I), 5, 2, 3));
  m.init("R", {D, G * c.H, c.H}, pattern(static_cast<std::size_t>(D * G * c.H * c.H), 6, 2.5f, 4));
  std::vector<std::string> ins{"x", "W", "R", c.bias ? "B" : "", ""};
  if (c.bias) m.init("B", {D, 2 * G * c.H}, pattern(static_cast<std::size_t>(D * 2 * G * c.H), 9, 4, 10));
  const auto states = static_cast<std::size_t>(D * c.B * c.H);
  if (c.initial_h || c.initial_c || c.peephole) ins.push_back(c.initial_h ? "h0" : "");
  if (c.initial_h) m.init("h0", st, pattern(states, 5, 2, 5));
  if (G == 4 && (c.initial_c || c.peephole)) ins.push_back(c.initial_c ? "c0" : "");
  if (c.initial_c) m.init("c0", st, pattern(states, 4, 1.5f, 3));
  if (c.peephole) {
    ins.push_back("P");
    m.init("P", {D, 3 * c.H}, pattern(static_cast<std::size_t>(D * 3 * c.H), 5, 2, 6));
  }
  std::vector<std::string> outs{"y", "y_h"};
  if (G == 4) outs.push_back("y_c");
  for (const auto& o : outs) m.output(o);
  NodeRef n = m.node(c.op, ins, outs, c.name);
  n.i("hidden_size", c.H).s("direction", c.direction);
  if (layout) n.i("layout", layout);
  if (c.clip > 0) n.f("clip", c.clip);
  if (c.linear_before_reset) n.i("linear_before_reset", 1);
  return m;
}

std::vector<Output> run(const OnnxModel& m, const std::string& file, const Shape& xs, const std::vector<float>& x) {
  Model net = import_onnx(m.save(file));
  return run_net(net, {{"x", make_input(xs, x)}});
}

}  // namespace

TEST_CASE("LSTM and GRU: imported as lstm and gru, match ONNX Runtime", "[onnx][rnn]") {
  for (const Case& c : kCases) {
    INFO(c.name);
    const auto x = pattern(static_cast<std::size_t>(c.T * c.B * c.I), 7, 3, 4);
    auto out = run(model_of(c, 0), std::string(c.name) + ".onnx", Shape{c.T, c.B, c.I}, x);
    REQUIRE(out.size() == (c.y_c.empty() ? 2u : 3u));
    CHECK(max_abs_diff(out[0].values, c.y) < 2e-6);
    CHECK(max_abs_diff(out[1].values, c.y_h) < 2e-6);
    if (!c.y_c.empty()) CHECK(max_abs_diff(out[2].values, c.y_c) < 2e-6);

    // layout 1 ([B,T,I], states [B,D,H]): the same numbers, transposed.
    std::vector<float> xt(x.size());
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t i = 0; i < c.I; ++i) xt[static_cast<std::size_t>((b * c.T + t) * c.I + i)] = x[static_cast<std::size_t>((t * c.B + b) * c.I + i)];
    if (c.initial_h || c.initial_c) continue;  // the initial states' values would need transposing too
    auto out1 = run(model_of(c, 1), std::string(c.name) + "_layout1.onnx", Shape{c.B, c.T, c.I}, xt);
    const int64_t D = std::string(c.direction) == "bidirectional" ? 2 : 1;
    REQUIRE(out1[0].shape == Shape{c.B, c.T, D, c.H});
    std::vector<float> y1(c.y.size());
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t b = 0; b < c.B; ++b)
          for (int64_t h = 0; h < c.H; ++h)
            y1[static_cast<std::size_t>(((b * c.T + t) * D + d) * c.H + h)] = c.y[static_cast<std::size_t>(((t * D + d) * c.B + b) * c.H + h)];
    CHECK(max_abs_diff(out1[0].values, y1) < 2e-6);
  }
}

TEST_CASE("LSTM and GRU with the sequence output Y omitted give Y_h", "[onnx][rnn]") {
  // Refused before ("node has no output"; ONNX's test_lstm_defaults and test_gru_defaults omit Y).
  for (const Case& c : kCases) {
    INFO(c.name);
    OnnxModel m = model_of(c, 0);
    m.graph().mutable_node(0)->set_output(0, "");
    auto* outputs = m.graph().mutable_output();
    outputs->erase(outputs->begin());  // y
    const auto x = pattern(static_cast<std::size_t>(c.T * c.B * c.I), 7, 3, 4);
    auto out = run(m, std::string(c.name) + "_no_y.onnx", Shape{c.T, c.B, c.I}, x);
    REQUIRE(out.size() == (c.y_c.empty() ? 1u : 2u));
    CHECK(max_abs_diff(out[0].values, c.y_h) < 2e-6);
    if (!c.y_c.empty()) CHECK(max_abs_diff(out[1].values, c.y_c) < 2e-6);
  }
}

TEST_CASE("LSTM and GRU: what they cannot run is refused naming the node", "[onnx][rnn]") {
  const Case& c = kCases[0];
  SECTION("other activations") {
    OnnxModel m = model_of(c, 0);
    auto* a = m.graph().mutable_node(0)->add_attribute();
    a->set_name("activations");
    a->set_type(onnx::AttributeProto::STRINGS);
    for (const char* s : {"Relu", "Tanh", "Tanh"}) a->add_strings(s);
    try {
      import_onnx(m.save("lstm_relu.onnx"));
      FAIL("imported an LSTM with Relu gates");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(c.name));
      CHECK_THAT(e.what(), Catch::Contains("Relu"));
    }
  }
  SECTION("sequence_lens shorter than the sequence") {
    OnnxModel m = model_of(c, 0);
    m.init_ints("lens", {c.B}, {c.T, c.T - 1});
    m.graph().mutable_node(0)->set_input(4, "lens");
    CHECK_THROWS_WITH(import_onnx(m.save("lstm_lens.onnx")), Catch::Contains("sequence_lens"));
  }
  SECTION("sequence_lens covering every sequence is accepted") {
    OnnxModel m = model_of(c, 0);
    m.init_ints("lens", {c.B}, {c.T, c.T});
    m.graph().mutable_node(0)->set_input(4, "lens");
    CHECK_NOTHROW(import_onnx(m.save("lstm_full_lens.onnx")));
  }
  SECTION("a bad hidden_size") {
    OnnxModel m = model_of(c, 0);
    m.graph().mutable_node(0)->mutable_attribute(0)->set_i(3);
    CHECK_THROWS_WITH(import_onnx(m.save("lstm_hidden.onnx")), Catch::Contains("W"));
  }
}
