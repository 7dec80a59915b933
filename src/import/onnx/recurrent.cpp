// ONNX import: RNN, GRU and LSTM.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

// LSTM and GRU: weights W, R, B, P become the layer's; initial states stay
// inputs (constants get their constant layers); sequence_lens must cover every
// sequence whole (a constant equal to the sequence length), as exporters write it.
void Importer::rnn(const Node& n) {
  const bool lstm = n.op() == "LSTM", simple = n.op() == "RNN";
  const int gates = lstm ? 4 : simple ? 1 : 3;
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 3) throw n.error(fmt::format("X must be rank 3, it is {}", xs.to_string()), "X");
  const int64_t layout = n.opset >= 14 ? n.get_int("layout", 0) : 0;
  if (layout != 0 && layout != 1) throw n.error(fmt::format("layout {} is not 0 or 1", layout), "layout");
  const int64_t seq = layout ? xs[1] : xs[0];
  const std::string direction = n.get_string("direction", "forward");
  const Blob& w = require_constant(n, 1, "W");
  const int64_t hidden = n.get_int("hidden_size", w.shape().rank() == 3 ? w.shape()[1] / gates : 0);
  // Only the default activations: sigmoid for the gates, tanh elsewhere.
  if (n.has("activations")) {
    const auto* a = n.attr("activations");
    const std::vector<std::string> plain = lstm     ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                           : simple ? std::vector<std::string>{"Tanh"}
                                                    : std::vector<std::string>{"Sigmoid", "Tanh"};
    for (int i = 0; i < a->strings_size(); ++i)
      if (a->strings(i) != plain[static_cast<std::size_t>(i) % plain.size()])
        throw Unsupported{fmt::format("{} with activation {} (only {} are supported)", n.op(), a->strings(i),
                                      fmt::join(plain, ", "))};
  }
  if (n.has_in(4)) {
    const Blob* lens = constant(n.in(4));
    if (!lens) throw Unsupported{fmt::format("{} with sequence_lens computed at run time", n.op())};
    for (int64_t v : to_ints(*lens))
      if (v != seq)
        throw Unsupported{fmt::format("{} with sequence_lens {} shorter than the sequence ({}): padded batches", n.op(), v, seq)};
  }
  std::vector<std::string> inputs{input(n, 0)};
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t batch = layout ? xs[0] : xs[1];
  const Shape state = layout ? Shape{batch, dirs, hidden} : Shape{dirs, batch, hidden};
  auto zeros = [&](const std::string& what) {
    return as_blob(n, add_constant(n.name + "/" + what, float_blob(state, std::vector<float>(static_cast<std::size_t>(state.numel()), 0.0f))));
  };
  const bool has_c = lstm && n.has_in(6);
  if (n.has_in(5) || has_c) inputs.push_back(n.has_in(5) ? input(n, 5) : zeros("initial_h"));
  if (has_c) inputs.push_back(input(n, 6));
  std::vector<std::string> outputs;
  for (int k = 0; k < (lstm ? 3 : 2); ++k) outputs.push_back(output(n, k));
  Layer l = make(lstm ? "lstm" : simple ? "rnn" : "gru", n.name, std::move(inputs), std::move(outputs));
  l.weights["W"] = to_float(w);
  l.weights["R"] = to_float(require_constant(n, 2, "R"));
  if (n.has_in(3)) l.weights["B"] = to_float(require_constant(n, 3, "B"));
  if (lstm && n.has_in(7)) l.weights["P"] = to_float(require_constant(n, 7, "P"));
  l.params["hidden_size"] = hidden;
  l.params["direction"] = direction;
  if (layout) l.params["layout"] = layout;
  if (n.has("clip")) l.params["clip"] = n.get_float("clip");
  if (lstm && n.get_int("input_forget", 0) != 0) l.params["input_forget"] = int64_t{1};
  if (!lstm && !simple && n.get_int("linear_before_reset", 0) != 0) l.params["linear_before_reset"] = int64_t{1};
  add(std::move(l));
}

}  // namespace onnx_import
}  // namespace softneuro
