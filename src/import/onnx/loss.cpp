// ONNX import: Losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

// NegativeLogLikelihoodLoss with constant targets (and weights): each loss
// term reads one value of the input at a constant position (a take layer),
// scaled by a constant -weight[target] (0 where the target is ignore_index),
// then summed and divided by the weights' sum for reduction 'mean'. Inputs [N, C]
// or [N, C, d1, ...], targets [N] or [N, d1, ...].
void Importer::nll_of(const Node& n, const std::string& logp, const Shape& xs, const std::string& y) {
  if (xs.rank() < 2) throw n.error(fmt::format("input {} has fewer than 2 dims [N, C, ...]", xs.to_string()), "input");
  const Blob* target = constant(n.in(1));
  if (!target) throw Unsupported{fmt::format("{} with targets computed at run time", n.op())};
  const Shape ts = target->shape();
  Shape want;
  for (int d = 0; d < xs.rank(); ++d)
    if (d != 1) want.push_back(xs[d]);
  if (ts != want)
    throw n.error(fmt::format("target {} does not match input {} (expected {})", ts.to_string(), xs.to_string(), want.to_string()),
                  "target");
  const int64_t classes = xs[1];
  std::vector<double> weight;
  if (n.has_in(2)) {
    const Blob* w = constant(n.in(2));
    if (!w) throw Unsupported{fmt::format("{} with weights computed at run time", n.op())};
    if (w->shape() != Shape{classes})
      throw n.error(fmt::format("weight {} is not [C] = [{}]", w->shape().to_string(), classes), "weight");
    weight = core::to_doubles(*w);
  }
  const bool has_ignore = n.has("ignore_index");
  const int64_t ignore = n.get_int("ignore_index", 0);
  const std::string reduction = n.get_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    throw n.error(fmt::format("reduction '{}' (supported: none, sum, mean)", reduction), "reduction");
  const std::vector<int64_t> t = to_ints(*target);
  const int64_t inner = ts.rank() > 1 ? ts.numel() / ts[0] : 1;  // positions per sample
  std::vector<int64_t> flat(t.size(), 0);
  std::vector<float> coeff(t.size(), 0.f);
  double denominator = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (has_ignore && t[i] == ignore) continue;  // reads position 0, times 0
    if (t[i] < 0 || t[i] >= classes)
      throw n.error(fmt::format("target {} out of range for {} classes", t[i], classes), "target");
    const int64_t sample = static_cast<int64_t>(i) / inner, pos = static_cast<int64_t>(i) % inner;
    flat[i] = (sample * classes + t[i]) * inner + pos;
    const double w = weight.empty() ? 1.0 : weight[static_cast<std::size_t>(t[i])];
    coeff[i] = static_cast<float>(-w);
    denominator += w;
  }
  const std::string picked = fresh_blob(y + "/picked"), terms = reduction == "none" ? y : fresh_blob(y + "/terms");
  Layer take = make("take", n.name + "/take", {logp}, {picked});
  take.weights["indices"] = int_blob(ts, flat);
  add(std::move(take));
  add(make("mul", reduction == "none" ? n.name : n.name + "/weighted",
           {picked, as_blob(n, add_constant(y + "/coeff", float_blob(ts, coeff)))}, {terms}));
  if (reduction == "none") return;
  const std::string sum = reduction == "sum" ? y : fresh_blob(y + "/sum");
  add_unary(n, "reduce", terms, sum, {{"mode", std::string("sum")}, {"keepdims", int64_t{0}}}, reduction == "sum" ? "" : "sum");
  if (reduction == "mean")  // every target ignored: 0 / 0, NaN as ONNX's reference
    add(make("mul", n.name, {sum, scalar_constant(n, y + "/inv_weight", denominator == 0 ? std::numeric_limits<double>::infinity()
                                                                                        : 1.0 / denominator)},
             {y}));
}

void Importer::nll_loss(const Node& n) { nll_of(n, input(n, 0), shape_of(n, n.in(0)), n.out(0)); }

// SoftmaxCrossEntropyLoss: LogSoftmax over the classes (axis 1), then the
// negative log-likelihood; the optional second output is the log-probabilities.
void Importer::softmax_cross_entropy(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() < 2) throw n.error(fmt::format("input {} has fewer than 2 dims [N, C, ...]", xs.to_string()), "scores");
  const std::string y = n.out(0);
  const std::string logp = n.num_outputs() > 1 && !n.out(1).empty() ? n.out(1) : fresh_blob(y + "/log_prob");
  const std::string x = input(n, 0), m = fresh_blob(y + "/max"), t = fresh_blob(y + "/shifted"), e = fresh_blob(y + "/exp"),
                    sum = fresh_blob(y + "/sum"), l = fresh_blob(y + "/log");
  const std::vector<int64_t> axes{1};
  add_unary(n, "reduce", x, m, {{"mode", std::string("max")}, {"axes", axes}, {"keepdims", int64_t{1}}}, "max");
  add(make("sub", n.name + "/shift", {x, m}, {t}));
  add_unary(n, "exp", t, e, {}, "exp");
  add_unary(n, "reduce", e, sum, {{"mode", std::string("sum")}, {"axes", axes}, {"keepdims", int64_t{1}}}, "sum");
  add_unary(n, "log", sum, l, {}, "log");
  add(make("sub", n.name + "/log_softmax", {t, l}, {logp}));
  nll_of(n, logp, xs, y);
}

}  // namespace onnx_import
}  // namespace softneuro
