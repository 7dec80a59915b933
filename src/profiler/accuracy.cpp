#include "profiler/accuracy.hpp"

#include "core/executor.hpp"
#include "profiler/calibrate.hpp"

#include <softneuro/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>

#include <unistd.h>

namespace softneuro::profiler {

bool AccuracyBudget::met_by(double measured) const {
  switch (metric) {
    case Metric::none: return true;
    case Metric::top1:
    case Metric::seq:
    case Metric::ctc:
    case Metric::cosine: return measured >= value;
    case Metric::rel_l2: return measured <= value;
    case Metric::user: return measured >= value;
  }
  return false;
}

AccuracyBudget parse_accuracy(const std::string& text) {
  AccuracyBudget b;
  b.text = text;
  if (text == "none") return b;
  const auto colon = text.find(':');
  const std::string metric = text.substr(0, colon);
  const std::string value = colon == std::string::npos ? "" : text.substr(colon + 1);
  char* end = nullptr;
  const double v = value.empty() ? NAN : std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !std::isfinite(v))
    throw Error(fmt::format("'{}' is not METRIC:VALUE (top1:0.99, seq:0.95, ctc:0.95, cosine:0.999, rel-l2:0.02) or none",
                            text.substr(0, 60)),
                {}, {}, "accuracy");
  if (metric == "top1" || metric == "seq" || metric == "ctc" || metric == "cosine") {
    if (!(v > 0 && v <= 1)) throw Error(fmt::format("{} must be in (0, 1], not {}", metric, value), {}, {}, "accuracy");
    b.metric = metric == "top1"  ? AccuracyBudget::Metric::top1
               : metric == "seq" ? AccuracyBudget::Metric::seq
               : metric == "ctc" ? AccuracyBudget::Metric::ctc
                                 : AccuracyBudget::Metric::cosine;
  } else if (metric == "rel-l2") {
    if (!(v > 0)) throw Error(fmt::format("rel-l2 must be above 0, not {}", value), {}, {}, "accuracy");
    b.metric = AccuracyBudget::Metric::rel_l2;
  } else {
    throw Error(fmt::format("unknown metric '{}' (top1, seq, ctc, cosine, rel-l2)", metric.substr(0, 40)), {}, {}, "accuracy");
  }
  b.value = v;
  return b;
}

AccuracyBudget user_accuracy(const AccuracyMetric& metric) {
  if (!metric.score && !metric.score_set)
    throw Error("a user metric needs its score (or score_set) function", {}, {}, "accuracy_metric.score");
  if (metric.score && metric.score_set)
    throw Error("a user metric has score or score_set, not both", {}, {}, "accuracy_metric.score_set");
  if (metric.name.empty() || metric.name.size() > 60 ||
      metric.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != std::string::npos)
    throw Error(fmt::format("a user metric's name is a plain word (letters, digits, _-.), not '{}'", metric.name.substr(0, 60)),
                {}, {}, "accuracy_metric.name");
  if (!std::isfinite(metric.min_score))
    throw Error(fmt::format("min_score {} is not finite", metric.min_score), {}, {}, "accuracy_metric.min_score");
  if (metric.score_set && !(metric.max_drop >= 0 && std::isfinite(metric.max_drop)))
    throw Error(fmt::format("max_drop {} is not a finite value of 0 or more", metric.max_drop), {}, {},
                "accuracy_metric.max_drop");
  AccuracyBudget b;
  b.metric = AccuracyBudget::Metric::user;
  b.value = metric.min_score;
  b.text = metric.score_set ? fmt::format("{}:max_drop={}", metric.name, metric.max_drop)
                            : fmt::format("{}:{}", metric.name, metric.min_score);
  b.score = metric.score;
  b.score_set = metric.score_set;
  b.max_drop = metric.max_drop;
  return b;
}

namespace {
/// The dtype a routine computes in (its descriptor's schema).
DType dtype_of(const core::RoutineChoice& routine) {
  return Schema::parse(routine.descriptor.substr(0, routine.descriptor.find('/'))).dtype;
}
}  // namespace

bool runs_in_qint8(const core::RoutineChoice& routine) { return dtype_of(routine) == DType::qint8; }

bool uses_qint8(const core::RoutinePath& path) {
  return std::any_of(path.routines.begin(), path.routines.end(), runs_in_qint8);
}

bool below_float32(DType dtype) { return dtype == DType::qint8 || dtype == DType::float16 || dtype == DType::bfloat16; }


namespace {

struct Tally {
  double sum = 0;
  double count = 0;
};

/// Position p's argmax of a [..., last] output; a NaN wins (it never agrees by luck).
int64_t argmax_at(const float* x, int64_t p, int64_t last) {
  int64_t a = 0;
  for (int64_t i = 1; i < last; ++i)
    if (!(x[p * last + i] <= x[p * last + a])) a = i;
  return a;
}

/// How decided position p's argmax of a [..., last] output is: the gap between
/// its two largest values as a share of its spread (0: a tie or a flat row).
double margin_at(const float* x, int64_t p, int64_t last) {
  const float* row = x + p * last;
  float top = -std::numeric_limits<float>::infinity(), second = top, low = std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < last; ++i) {
    if (row[i] > top) second = top, top = row[i];
    else if (row[i] > second) second = row[i];
    low = std::min(low, row[i]);
  }
  const double spread = static_cast<double>(top) - low;
  return spread > 0 ? (static_cast<double>(top) - second) / spread : 0.0;
}

/// What a greedy CTC decoder reads: each position's argmax, repeats merged, blanks dropped.
std::vector<int64_t> ctc_read(const float* x, int64_t positions, int64_t last, int64_t blank) {
  std::vector<int64_t> out;
  int64_t previous = -1;
  for (int64_t p = 0; p < positions; ++p) {
    const int64_t a = argmax_at(x, p, last);
    if (!std::isfinite(x[p * last + a])) return {-1};  // a NaN reads nothing right
    if (a != previous && a != blank) out.push_back(a);
    previous = a;
  }
  return out;
}

/// Adds one output's comparison (`got` against the float32 `want`) to the tally.
void compare(const AccuracyBudget& budget, const Blob& got, const Blob& want, Tally& t) {
  const float* g = got.data_as<float>();
  const float* w = want.data_as<float>();
  const int64_t n = want.numel();
  if (budget.counts_argmax()) {
    const int64_t last = want.shape().rank() ? want.shape()[want.shape().rank() - 1] : 1;
    if (last < 2) return;  // nothing to choose between
    if (budget.metric == AccuracyBudget::Metric::ctc) {
      const int64_t blank = budget.blank_last ? last - 1 : 0;
      t.sum += ctc_read(g, n / last, last, blank) == ctc_read(w, n / last, last, blank);
      t.count += 1;
      return;
    }
    bool all = true;  // seq: the whole argmax sequence agrees
    for (int64_t p = 0; p < n / last; ++p) {
      const int64_t ag = argmax_at(g, p, last), aw = argmax_at(w, p, last);
      const bool agree = std::isfinite(g[p * last + ag]) && ag == aw;
      all = all && agree;
      if (budget.metric == AccuracyBudget::Metric::top1) t.sum += agree, t.count += 1;
    }
    if (budget.metric == AccuracyBudget::Metric::seq) t.sum += all, t.count += 1;
    return;
  }
  double dot = 0, gg = 0, ww = 0, dd = 0;
  for (int64_t i = 0; i < n; ++i) {
    dot += double(g[i]) * w[i], gg += double(g[i]) * g[i], ww += double(w[i]) * w[i];
    dd += (double(g[i]) - w[i]) * (double(g[i]) - w[i]);
  }
  double v;
  if (budget.metric == AccuracyBudget::Metric::cosine)
    v = gg == 0 && ww == 0 ? 1.0 : gg == 0 || ww == 0 ? 0.0 : dot / std::sqrt(gg * ww);
  else
    v = ww == 0 ? (dd == 0 ? 0.0 : std::numeric_limits<double>::infinity()) : std::sqrt(dd / ww);
  if (!std::isfinite(v)) v = budget.metric == AccuracyBudget::Metric::cosine ? 0.0 : std::numeric_limits<double>::infinity();
  t.sum += v;
  t.count += 1;
}

}  // namespace

double output_score(const AccuracyBudget& budget, const Blob& got, const Blob& want) {
  Tally t;
  compare(budget, got, want, t);
  return t.count ? t.sum / t.count : 1.0;
}

namespace {
/// The net's outputs on one sample, each as float32 (an integer-typed output's values converted).
std::vector<NamedBlob> run(core::Executor& exec, const detail::WorkingModel& net, const std::vector<NamedBlob>& sample) {
  std::vector<NamedBlob> out;
  for (const auto& o : net.graph.outputs) {
    auto typed = net.graph.output_dtypes.find(o);
    out.push_back({o, Blob::allocate(net.shapes.at(o), typed == net.graph.output_dtypes.end() ? DType::float32 : typed->second)});
  }
  exec.run(sample, out);
  for (auto& o : out) {
    if (o.blob.dtype() == DType::float32) continue;
    Blob f = Blob::allocate(o.blob.shape());
    float* y = f.data_as<float>();
    const int64_t n = o.blob.numel();
    const auto* bytes = static_cast<const unsigned char*>(o.blob.data());
    auto copy = [&](auto tag) {
      using T = decltype(tag);
      for (int64_t i = 0; i < n; ++i) {
        T v;
        std::memcpy(&v, bytes + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
        y[i] = static_cast<float>(v);
      }
    };
    switch (o.blob.dtype()) {
      case DType::int64: copy(int64_t{}); break;
      case DType::int32: copy(int32_t{}); break;
      case DType::int16: copy(int16_t{}); break;
      case DType::int8: copy(int8_t{}); break;
      case DType::uint8: case DType::boolean: copy(uint8_t{}); break;
      case DType::uint16: copy(uint16_t{}); break;
      case DType::uint32: copy(uint32_t{}); break;
      case DType::uint64: copy(uint64_t{}); break;
      case DType::float64: copy(double{}); break;
      default: throw Error(fmt::format("output '{}' of type {} cannot be compared", o.name, to_string(o.blob.dtype())));
    }
    o.blob = f;
  }
  return out;
}

}  // namespace

double disagreement_with_default(const detail::WorkingModel& net, const core::RoutinePath& path,
                                 const std::vector<std::vector<NamedBlob>>& samples) {
  std::vector<std::vector<NamedBlob>> want;
  {
    const core::RoutinePath untuned;  // the float32 default
    core::Executor exec(core::build_plan(net.graph, net.tuning, net.shapes, &untuned, net.plan_options(false)));
    for (const auto& sample : samples) want.push_back(run(exec, net, sample));
  }
  core::Executor exec(core::build_plan(net.graph, net.tuning, net.shapes, &path, net.plan_options(false)));
  double worst = 0;
  for (std::size_t k = 0; k < samples.size(); ++k) {
    const std::vector<NamedBlob> got = run(exec, net, samples[k]);
    for (std::size_t o = 0; o < got.size(); ++o) {
      // Integer outputs (an argmax, indices) may flip on a rounding: float ones are compared.
      if (auto t = net.graph.output_dtypes.find(got[o].name); t != net.graph.output_dtypes.end() && t->second != DType::float32)
        continue;
      const float* g = got[o].blob.data_as<float>();
      const float* w = want[k][o].blob.data_as<float>();
      double diff = 0, scale = 0;
      for (int64_t i = 0; i < got[o].blob.numel(); ++i) {
        if (!std::isfinite(w[i])) continue;
        scale = std::max(scale, std::abs(double(w[i])));
        diff = std::isfinite(g[i]) ? std::max(diff, std::abs(double(g[i]) - w[i])) : std::numeric_limits<double>::infinity();
      }
      worst = std::max(worst, diff == 0 ? 0.0 : scale > 0 ? diff / scale : std::numeric_limits<double>::infinity());
    }
  }
  return worst;
}

Validator::Validator(const detail::WorkingModel& net, std::vector<std::vector<NamedBlob>> samples, AccuracyBudget budget,
                     std::vector<std::vector<NamedBlob>> references)
    : net_(net), samples_(std::move(samples)), budget_(std::move(budget)) {
  if (references.size() == samples_.size()) {
    reference_ = std::move(references);
  } else {
    const core::RoutinePath untuned;  // the float32 default
    core::Executor ref(core::build_plan(net.graph, net.tuning, net.shapes, &untuned, net.plan_options(false)));
    for (const auto& sample : samples_) reference_.push_back(run(ref, net, sample));
  }
  if (budget_.metric == AccuracyBudget::Metric::ctc || (budget_.metric == AccuracyBudget::Metric::seq && budget_.ctc_if_blank))
    find_blank();
  for (const auto& r : reference_) {
    std::size_t mine = 0;
    for (const auto& o : r) {
      const Shape& s = o.blob.shape();
      const int64_t last = s.rank() ? s[s.rank() - 1] : 1;
      if (budget_.metric == AccuracyBudget::Metric::top1) {
        if (last >= 2) mine += static_cast<std::size_t>(o.blob.numel() / last);
      } else if ((budget_.metric != AccuracyBudget::Metric::seq && budget_.metric != AccuracyBudget::Metric::ctc) ||
                 last >= 2) {
        ++mine;
      }
    }
    sample_observations_.push_back(mine);
    observations_ += mine;
  }
  order_samples();
  if (budget_.metric == AccuracyBudget::Metric::user && budget_.score_set) {
    reference_score_ = user_set_score(reference_);
    budget_.value = reference_score_ - budget_.max_drop;
  } else if (budget_.metric == AccuracyBudget::Metric::user) {
    for (const auto& r : reference_) reference_score_ += user_score(r, r);
    reference_score_ /= std::max<double>(1, static_cast<double>(reference_.size()));
  }
}

void Validator::order_samples() {
  order_.clear();
  if (!budget_.counts_argmax()) return;
  // A sample's least decided argmax (margin_at) over its outputs' positions (a
  // last axis of 2 or more): a path that flips argmaxes flips those first.
  std::vector<double> margin(reference_.size(), std::numeric_limits<double>::infinity());
  for (std::size_t k = 0; k < reference_.size(); ++k)
    for (const auto& o : reference_[k]) {
      const Shape& s = o.blob.shape();
      const int64_t last = s.rank() ? s[s.rank() - 1] : 1;
      if (last < 2 || o.blob.dtype() != DType::float32) continue;
      for (int64_t pos = 0; pos < o.blob.numel() / last; ++pos) {
        const double gap = margin_at(o.blob.data_as<float>(), pos, last);
        if (std::isfinite(gap)) margin[k] = std::min(margin[k], gap);
      }
    }
  order_.resize(reference_.size());
  std::iota(order_.begin(), order_.end(), std::size_t{0});
  std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return margin[a] < margin[b]; });
}

namespace {
/// A user metric's score, checked: what it throws or a value that is not finite is an Error naming the metric.
template <class F>
double checked_score(const AccuracyBudget& budget, const std::string& file, F&& score) {
  double v;
  try {
    v = score();
  } catch (const std::exception& e) {
    throw Error(fmt::format("the accuracy metric {} failed: {}", budget.text, e.what()), file, {}, "accuracy_metric");
  }
  if (!std::isfinite(v))
    throw Error(fmt::format("the accuracy metric {} scored {}: not a finite value", budget.text, v), file, {},
                "accuracy_metric");
  return v;
}
}  // namespace

double Validator::user_set_score(const std::vector<std::vector<NamedBlob>>& outputs) const {
  return checked_score(budget_, net_.file, [&] { return budget_.score_set(outputs); });
}

double Validator::user_score(const std::vector<NamedBlob>& float32, const std::vector<NamedBlob>& tuned) const {
  return checked_score(budget_, net_.file, [&] { return budget_.score(float32, tuned); });
}

void Validator::find_blank() {
  // Positions of the outputs with several of them per sample, and how many
  // class 0 and the last class win in the float32 outputs.
  double positions = 0, first = 0, last_class = 0;
  for (const auto& r : reference_)
    for (const auto& o : r) {
      const Shape& s = o.blob.shape();
      if (s.rank() < 2) continue;
      const int64_t last = s[s.rank() - 1];
      if (last < 2 || o.blob.numel() / last < 2) continue;
      const float* x = o.blob.data_as<float>();
      for (int64_t p = 0; p < o.blob.numel() / last; ++p) {
        const int64_t a = argmax_at(x, p, last);
        positions += 1;
        first += a == 0;
        last_class += a == last - 1;
      }
    }
  budget_.blank_last = last_class > first;
  const double share = positions > 0 ? std::max(first, last_class) / positions : 0;
  if (budget_.metric == AccuracyBudget::Metric::seq && share >= 0.5) {
    budget_.metric = AccuracyBudget::Metric::ctc;
    budget_.text = fmt::format("ctc:{}", budget_.value);
  }
  if (budget_.metric == AccuracyBudget::Metric::ctc)
    blank_note_ = fmt::format("blank class {} wins {:.0f}% of the float32 outputs' positions",
                              budget_.blank_last ? "last" : "0", 100 * share);
}

double Validator::measure(const core::RoutinePath& path, double* cosine, std::size_t max_samples,
                          std::size_t* stopped_after) const {
  if (stopped_after) *stopped_after = 0;
  if (budget_.metric == AccuracyBudget::Metric::none) return 0;
  // The path runs beside the graph; a graph is copied only where the path changes its weights.
  const std::optional<core::Graph> transformed = transform_ ? transform_(net_.graph, path) : std::nullopt;
  core::Executor tuned(
      core::build_plan(transformed ? *transformed : net_.graph, net_.tuning, net_.shapes, &path, net_.plan_options(false)));
  return score(tuned, [this](std::size_t k) -> const std::vector<NamedBlob>& { return samples_[k]; }, cosine, max_samples,
               stopped_after);
}

bool Validator::keep_values(std::size_t count) const {
  if (kept_.size() >= count) return true;
  if (keep_refused_) return false;
  const core::Graph every = every_value_out(net_.graph);
  // The values as the default computes them (a QDQ model's int8 layers at their quantisation).
  core::Tuning as_default;
  as_default.blob_quant = net_.tuning.blob_quant;
  std::size_t bytes = 0;
  for (const auto& o : every.outputs) bytes += static_cast<std::size_t>(net_.shapes.at(o).numel()) * sizeof(float);
  // At most a quarter of the machine's memory, and 4 GiB (ResNet50's 16 samples: 1.6 GB).
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const std::size_t quarter = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) / 4 * static_cast<std::size_t>(page) : 0;
  if (bytes * count > std::min(kKeptBytes, quarter)) {
    keep_refused_ = true;
    return false;
  }
  core::Executor exec(core::build_plan(every, as_default, net_.shapes, nullptr, net_.plan_options(false)));
  for (std::size_t k = kept_.size(); k < count; ++k) {
    std::vector<NamedBlob> out;
    for (const auto& o : every.outputs) out.push_back({o, Blob::allocate(net_.shapes.at(o))});
    exec.run(samples_[k], out);
    std::map<std::string, Blob> values;
    for (auto& o : out) values.emplace(o.name, std::move(o.blob));
    kept_.push_back(std::move(values));
  }
  return true;
}

double Validator::measure_from(std::size_t first, const core::RoutinePath& path, double* cosine,
                               std::size_t max_samples) const {
  const core::Graph& g = net_.graph;
  const std::size_t count = std::min(samples_.size(), max_samples);
  if (budget_.metric == AccuracyBudget::Metric::none || budget_.score_set || first == 0 || first >= g.layers.size())
    return measure(path, cosine, max_samples);
  // The layers from `first` on, and every constant; what they read from before, inputs.
  core::Graph sub = g;
  sub.layers.clear();
  std::set<std::string> produced;
  for (std::size_t j = 0; j < g.layers.size(); ++j)
    if (g.layers[j].type == "constant" || j >= first) {
      sub.layers.push_back(g.layers[j]);
      for (const auto& o : g.layers[j].outputs) produced.insert(o);
    }
  for (const auto& o : g.outputs)
    if (!produced.count(o)) return measure(path, cosine, max_samples);  // a net output computed before `first`
  sub.inputs.clear();
  std::vector<bool> kept_input;  // per sub input: a kept value (else the sample's own input)
  for (const Layer& l : sub.layers)
    for (const auto& i : l.inputs) {
      if (i.empty() || produced.count(i) ||
          std::any_of(sub.inputs.begin(), sub.inputs.end(), [&](const TensorInfo& t) { return t.name == i; }))
        continue;
      auto given = std::find_if(g.inputs.begin(), g.inputs.end(), [&](const TensorInfo& t) { return t.name == i; });
      sub.inputs.push_back(given != g.inputs.end() ? *given : TensorInfo{i, net_.shapes.at(i), DType::float32, {}});
      kept_input.push_back(given == g.inputs.end());
    }
  if (!keep_values(count)) return measure(path, cosine, max_samples);
  const std::optional<core::Graph> transformed = transform_ ? transform_(sub, path) : std::nullopt;
  core::Executor tuned(core::build_plan(transformed ? *transformed : sub, net_.tuning, net_.shapes, &path, net_.plan_options(false)));
  std::vector<NamedBlob> inputs;
  return score(tuned,
               [&](std::size_t k) -> const std::vector<NamedBlob>& {
                 inputs.clear();
                 for (std::size_t i = 0; i < sub.inputs.size(); ++i) {
                   const std::string& name = sub.inputs[i].name;
                   if (kept_input[i]) {
                     inputs.push_back({name, kept_[k].at(name)});
                     continue;
                   }
                   for (const auto& in : samples_[k])
                     if (in.name == name) inputs.push_back(in);
                 }
                 return inputs;
               },
               cosine, max_samples, nullptr);
}

double Validator::score(core::Executor& tuned, const std::function<const std::vector<NamedBlob>&(std::size_t)>& sample,
                        double* cosine, std::size_t max_samples, std::size_t* stopped_after) const {
  Tally t, c;
  AccuracyBudget by_cosine;
  by_cosine.metric = AccuracyBudget::Metric::cosine;
  std::vector<std::vector<NamedBlob>> all;  // a set metric's input
  const std::size_t count = budget_.score_set ? samples_.size() : std::min(samples_.size(), max_samples);
  // Every sample: the least decided first (order_), so that a path that
  // misses shows it early; the first few (a sensitivity's): in their order.
  const bool reordered = count == samples_.size() && order_.size() == count;
  auto index = [&](std::size_t j) { return reordered ? order_[j] : j; };
  for (std::size_t j = 0; j < count; ++j) {
    const std::size_t k = index(j);
    auto got = run(tuned, net_, sample(k));
    if (budget_.score_set) {
      if (cosine)
        for (std::size_t o = 0; o < got.size(); ++o) compare(by_cosine, got[o].blob, reference_[k][o].blob, c);
      all.push_back(std::move(got));
      continue;
    }
    if (budget_.metric == AccuracyBudget::Metric::user) {
      t.sum += user_score(reference_[k], got);
      t.count += 1;
    }
    for (std::size_t o = 0; o < got.size(); ++o) {
      if (budget_.metric != AccuracyBudget::Metric::user)
      compare(budget_, got[o].blob, reference_[k][o].blob, t);
      if (cosine) compare(by_cosine, got[o].blob, reference_[k][o].blob, c);
    }
    // Every observation of the top1, seq, ctc and cosine metrics counts at
    // most 1 and every rel-l2 one at least 0: once even the best the samples
    // left could give misses the budget, the path misses it. The value
    // returned is that best.
    if (stopped_after && budget_.metric != AccuracyBudget::Metric::user && t.count > 0 && j + 1 < count) {
      double left = 0;
      for (std::size_t i = j + 1; i < count; ++i) left += static_cast<double>(sample_observations_[index(i)]);
      const double best = budget_.metric == AccuracyBudget::Metric::rel_l2 ? t.sum / (t.count + left)
                                                                           : (t.sum + left) / (t.count + left);
      if (!budget_.met_by(best)) {
        *stopped_after = j + 1;
        if (cosine) *cosine = c.count ? c.sum / c.count : 1.0;
        return best;
      }
    }
  }
  if (cosine) *cosine = c.count ? c.sum / c.count : 1.0;
  if (budget_.score_set) return user_set_score(all);
  if (t.count == 0)
    throw Error(fmt::format("accuracy budget {}: no output has a last axis of 2 or more entries to take the argmax "
                            "of; give --accuracy cosine:V or rel-l2:V",
                            budget_.text),
                net_.file, {}, "accuracy");
  return t.sum / t.count;
}

std::size_t Validator::observations_needed() const {
  if (!budget_.counts_argmax() || budget_.value >= 1)
    return 1;
  return static_cast<std::size_t>(std::ceil(1.0 / (1.0 - budget_.value) - 1e-9));
}

bool Validator::resolves_budget() const { return observations_ >= observations_needed(); }

bool ties_on_validation(const Validator& v, double a, double b) { return std::abs(v.error(a) - v.error(b)) <= 1e-12; }

bool better_range_method(const Validator& v, const RangeMethodScore& a, const RangeMethodScore& b) {
  if (!ties_on_validation(v, a.value, b.value)) return v.error(a.value) < v.error(b.value);
  if (!std::isnan(a.confirmed) && !std::isnan(b.confirmed)) {
    const bool a_meets = v.budget().met_by(a.confirmed), b_meets = v.budget().met_by(b.confirmed);
    if (a_meets != b_meets) return a_meets;
  }
  if (a.preferred != b.preferred) return a.preferred;
  return a.cosine > b.cosine;
}

double Validator::error(double value) const {
  switch (budget_.metric) {
    case AccuracyBudget::Metric::rel_l2: return value;
    case AccuracyBudget::Metric::user: return reference_score_ - value;
    default: return 1.0 - value;
  }
}

}  // namespace softneuro::profiler
