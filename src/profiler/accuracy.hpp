// The accuracy budget of a tuning that allows qint8: the tuned path's outputs
// on validation samples against the float32 net's own (its untuned default).
#pragma once

#include "core/graph.hpp"
#include "core/model_impl.hpp"

#include <softneuro/blob.hpp>
#include <softneuro/tune.hpp>

#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <set>
#include <string>
#include <vector>

namespace softneuro::core {
class Executor;
}

namespace softneuro::profiler {

struct AccuracyBudget {
  enum class Metric { none, top1, seq, ctc, cosine, rel_l2, user };
  Metric metric = Metric::none;
  double value = 0;
  std::string text;  ///< as the user wrote it, e.g. "top1:0.99"; a user metric: "NAME:MIN"
  /// ctc: the blank class is the last one (else class 0); the Validator reads
  /// it off the float32 outputs (the one of the two that wins more positions).
  bool blank_last = false;
  /// seq given by default: a Validator that finds a CTC blank winning most
  /// positions of the float32 outputs measures ctc at the same value instead.
  bool ctc_if_blank = false;
  /// Metric::user: the user's score of a sample (TuneOptions::accuracy_metric).
  std::function<double(std::span<const NamedBlob>, std::span<const NamedBlob>)> score;
  /// Metric::user over the whole validation set (AccuracyMetric::score_set); `value`
  /// then becomes the float32 net's score less max_drop once the Validator has it.
  std::function<double(std::span<const std::vector<NamedBlob>>)> score_set;
  double max_drop = 0;
  /// Whether a measured value meets the budget (top1, seq, ctc, cosine: at least; rel-l2: at most).
  bool met_by(double measured) const;
  /// top1, seq, ctc: decisions (argmax) counted, so the value moves in whole steps.
  bool counts_argmax() const { return metric == Metric::top1 || metric == Metric::seq || metric == Metric::ctc; }
};

/// The default budget of a tuning that allows qint8 on a net whose outputs hold
/// one decision per sample (a classifier): argmax agreement over the last axis
/// on 99% of the samples. A model whose outputs are not scores (boxes,
/// embeddings) should pass cosine or rel-l2.
inline constexpr const char* kDefaultAccuracy = "top1:0.99";
/// The default where an output holds several positions per sample (a CTC
/// recogniser's [1, T, classes], a language model's [1, T, vocabulary]): the
/// whole argmax sequence agrees on 95% of the samples. Per-position top1 says
/// nothing there: a recogniser's blank class wins most positions, so 99% of
/// them agreed while every text line read differently. Where the float32
/// outputs show a CTC blank (class 0 or the last winning most positions), the
/// line the greedy decoder reads is compared instead (ctc:0.95): a blank and a
/// repeat trading places read the same line (PP-OCRv4's recogniser in
/// bfloat16: 87 of 96 argmax sequences identical, 95 of 96 lines).
inline constexpr const char* kDefaultSequenceAccuracy = "seq:0.95";
/// The default where float16 or bfloat16 but no qint8 is allowed: their errors
/// are small where they hold the values, and total where they do not (values
/// under 6e-8 flushed to zero, over 65504 to inf); a cosine resolves on few samples.
inline constexpr const char* kDefaultFloatAccuracy = "cosine:0.999";
/// The default where qint8 is allowed and every output comes straight from a
/// layer normalisation: hidden states (a transformer encoder's
/// last_hidden_state), features rather than scores, whose argmax means nothing
/// (ViT's 197 tokens by 768 features under seq:0.95 measured 0 on every path).
inline constexpr const char* kDefaultFeatureAccuracy = "cosine:0.999";

/// Parses "top1:V", "seq:V", "ctc:V", "cosine:V" (V in (0,1]), "rel-l2:V" (V > 0) or
/// "none"; anything else is an Error naming the field `accuracy`.
AccuracyBudget parse_accuracy(const std::string& text);

/// The budget of a user metric: its name must be a plain word, its score set
/// and its minimum finite; else an Error naming the field `accuracy_metric`.
AccuracyBudget user_accuracy(const AccuracyMetric& metric);

/// One output's score against the float32 output `want` under a built-in
/// budget's metric (top1: the share of positions agreeing; seq and ctc: 1 or 0;
/// cosine; rel-l2). An output with a last axis under 2 scores 1 under argmax metrics.
double output_score(const AccuracyBudget& budget, const Blob& got, const Blob& want);

/// How far `path`'s outputs lie from the float32 default's on `samples`: over every
/// float32 output and sample, max |path - default| / max |default| (positions where the
/// default's value is finite; a non-finite value where it is finite: infinity).
/// Float32 paths agree to ~1e-6; a routine that computes wrongly stands out.
double disagreement_with_default(const detail::WorkingModel& net, const core::RoutinePath& path,
                                 const std::vector<std::vector<NamedBlob>>& samples);

/// Measures paths against the float32 default on fixed samples (each binding
/// every net input); the float32 outputs are computed once.
class Validator {
 public:
  /// `references`: the float32 default's outputs of each sample, in the
  /// graph's output order, where already computed (Calibration::outputs);
  /// else (another count of them) they are run here.
  Validator(const detail::WorkingModel& net, std::vector<std::vector<NamedBlob>> samples, AccuracyBudget budget,
            std::vector<std::vector<NamedBlob>> references = {});
  /// The budget's metric of `path`, averaged over samples and outputs; with
  /// `cosine`, also the mean cosine similarity (a finer tie-break than top1).
  /// On the first `max_samples` samples only where given (not for a set metric,
  /// which scores the whole set).
  /// With `stopped_after`: the measurement stops as soon as the samples left
  /// cannot bring the value within the budget (a top1, seq, ctc, cosine or
  /// rel-l2 budget), returns the best value they could still have given and
  /// sets *stopped_after to the samples run (0: every sample ran, the value is exact).
  double measure(const core::RoutinePath& path, double* cosine = nullptr,
                 std::size_t max_samples = std::numeric_limits<std::size_t>::max(),
                 std::size_t* stopped_after = nullptr) const;
  /// measure() of a path that computes as the float32 default before layer
  /// `first` (an index into the graph's layers; a layer's sensitivity): the
  /// net runs from that layer on, reading the float32 values of the blobs
  /// before it from a run of the default kept from the first call (the
  /// layers before it compute them alike either way). measure() itself where
  /// a net output comes before `first`, or the values would take over kKeptBytes or a
  /// quarter of the machine's memory.
  double measure_from(std::size_t first, const core::RoutinePath& path, double* cosine = nullptr,
                      std::size_t max_samples = std::numeric_limits<std::size_t>::max()) const;
  /// What a measured value gives up: 1 - value for top1 and cosine, the value for rel-l2.
  double error(double value) const;
  /// The budget measured: a default seq becomes ctc where the float32 outputs show a CTC blank.
  const AccuracyBudget& budget() const { return budget_; }
  /// ctc: which class is the blank and how often it wins ("" otherwise).
  const std::string& blank_note() const { return blank_note_; }
  /// How a path's graph will be stored (weights moved onto their int8 grid,
  /// biases corrected): the graph as a path stores it, or nothing where it
  /// stores the graph as it is. Applied to the graph every path is measured with.
  using StoreTransform = std::function<std::optional<core::Graph>(const core::Graph&, const core::RoutinePath&)>;
  void set_store_transform(StoreTransform t) { transform_ = std::move(t); }
  /// A user metric's score of one sample, checked finite (an Error naming the metric otherwise).
  double user_score(const std::vector<NamedBlob>& float32, const std::vector<NamedBlob>& tuned) const;
  /// A set metric's score of every sample's outputs, checked finite.
  double user_set_score(const std::vector<std::vector<NamedBlob>>& outputs) const;
  std::size_t samples() const { return samples_.size(); }
  /// The samples' inputs, in order.
  const std::vector<std::vector<NamedBlob>>& sample_inputs() const { return samples_; }
  /// The decisions one measurement counts: top1, every position of every
  /// output over all samples; seq, every output (with a last axis of 2 or
  /// more) of every sample (ctc likewise); other metrics, every output of every sample.
  std::size_t observations() const { return observations_; }
  /// Whether that many observations can tell the budget's value from 1: for
  /// top1:V, seq:V and ctc:V at least 1 / (1 - V) of them (a 1% budget needs 100 positions);
  /// other metrics, any sample.
  bool resolves_budget() const;
  /// The observations resolves_budget() asks for.
  std::size_t observations_needed() const;

 private:
  const detail::WorkingModel& net_;
  std::vector<std::vector<NamedBlob>> samples_;
  AccuracyBudget budget_;
  std::vector<std::vector<NamedBlob>> reference_;  ///< per sample, the float32 outputs
  std::vector<std::size_t> sample_observations_;    ///< per sample, its observations (observations())
  static constexpr std::size_t kKeptBytes = std::size_t{4} << 30;
  /// Per sample (the first ones), every layer output's float32 value (measure_from).
  mutable std::vector<std::map<std::string, Blob>> kept_;
  mutable bool keep_refused_ = false;
  /// Keeps the first `count` samples' values; false where they would take too much memory.
  bool keep_values(std::size_t count) const;
  /// The budget's metric of `tuned` run on sample(k) for the first samples (measure()).
  double score(core::Executor& tuned, const std::function<const std::vector<NamedBlob>&(std::size_t)>& sample,
               double* cosine, std::size_t max_samples, std::size_t* stopped_after) const;
  StoreTransform transform_;
  double reference_score_ = 0;
  std::string blank_note_;
  /// ctc, or seq given by default: the blank class read off the float32 outputs
  /// (the metric turns to ctc where it wins at least half the positions).
  void find_blank();
  /// Under an argmax metric, the order a measurement of every sample runs
  /// them in: the least decided argmax first (order_samples); else empty (as given).
  std::vector<std::size_t> order_;
  void order_samples();
  std::size_t observations_ = 0;  ///< a user metric's mean score of the float32 outputs against themselves
};

/// One range method's (or bias correction's) scores on a path: what the
/// tuner keeps the method by.
struct RangeMethodScore {
  double value = 0;        ///< the budget's metric on the validation samples
  double cosine = 0;       ///< their mean cosine
  double confirmed = std::numeric_limits<double>::quiet_NaN();  ///< the metric on the calibration samples, where measured
  bool preferred = false;  ///< the one an earlier tuning of the model kept
};
/// Whether the validation values of two methods tie (the same error to 1e-12).
bool ties_on_validation(const Validator& v, double a, double b);
/// Whether `a` scores better than `b` on `v`'s budget: the validation value;
/// on a tie, meeting the budget on the calibration samples where both were
/// measured there (a closer value alone does not count); then the earlier
/// tuning's choice (its sensitivities are cached under its scales); then the cosine.
bool better_range_method(const Validator& v, const RangeMethodScore& a, const RangeMethodScore& b);

/// Whether a routine computes in qint8 (its descriptor's schema).
bool runs_in_qint8(const core::RoutineChoice& routine);
/// Whether a path runs any layer in qint8.
bool uses_qint8(const core::RoutinePath& path);
/// Whether values in `dtype` hold less than float32 does: qint8, float16, bfloat16.
bool below_float32(DType dtype);

}  // namespace softneuro::profiler
