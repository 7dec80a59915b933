// softneuro/tune.hpp — tune(): pick the fastest routine path on this device
// (library softneuro::tune; an app that only runs tuned models links the runtime alone).
#pragma once

#include <softneuro/calibrate.hpp>
#include <softneuro/session.hpp>

#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace softneuro {

/// Progress of a tuning run, for progress bars.
struct TuneProgress {
  std::string stage;  ///< "unit profiling", "adapts", "integrated profiling", "dprs"
  int done = 0;
  int total = 0;
  std::string item;  ///< the layer or edge being measured
};

/// A (layer-name pattern, descriptor pattern) rule; patterns are globs (* and ?).
struct RoutineRule {
  std::string layer;
  std::string descriptor;
};

/// An accuracy metric of your own (TuneOptions::accuracy_metric): `score`
/// compares one validation sample's outputs on a tuned path (`tuned`) with the
/// float32 net's (`float32`), both in the net's output order; higher is
/// better. A path meets the budget where the mean score over the validation
/// samples is at least `min_score`; what a path gives up is the float32
/// outputs' own mean score (score(float32, float32)) less its.
/// Or, in place of `score`, a metric over the whole validation set:
/// `score_set` gets one path's outputs of every validation sample (in sample
/// order), e.g. to count a recogniser's exact text lines against labels the
/// function holds; a path meets the budget where its score is at most
/// `max_drop` below the float32 net's score_set.
struct AccuracyMetric {
  std::string name;  ///< for the report, e.g. "exact-lines"
  std::function<double(std::span<const NamedBlob> float32, std::span<const NamedBlob> tuned)> score;
  double min_score = 0;
  std::function<double(std::span<const std::vector<NamedBlob>> outputs)> score_set;
  double max_drop = 0;
};

struct TuneOptions {
  /// Schemas to consider, e.g. {"cpu", "cpu:float32:nhwc"}, or globs over the
  /// full form device:dtype:layout ({"cpu:float32:*", "cpu:qint8:*"} = hybrid);
  /// empty: every float32 CPU schema (with every qint8 one for a model its
  /// author quantised: ONNX QDQ/QOperator, whose int8 layers are its default).
  std::vector<std::string> schemas;
  /// Profile cache folder; empty: $SOFTNEURO_CACHE_DIR, else
  /// $XDG_CACHE_HOME/softneuro, else ~/.cache/softneuro. "-" disables the cache.
  std::string cache_dir;
  /// Measurement time per candidate in unit profiling (ms): repetitions until spent.
  double unit_budget_ms = 15;
  /// Candidates kept per (layer, schema) for integrated profiling.
  int candidates_per_schema = 2;
  /// Whole-net runs per integrated-profiling round.
  int integrated_runs = 5;
  /// Overall time budget in seconds (0: none); when spent, remaining
  /// candidates are measured with a minimal budget.
  double time_budget_s = 0;
  /// Pin: layers matching `layer` may only use descriptors matching `descriptor`.
  std::vector<RoutineRule> pin;
  /// Ban: layers matching `layer` never use descriptors matching `descriptor`.
  std::vector<RoutineRule> ban;
  /// Skip cpu/ref routines when anything else supports the layer (they are the oracle).
  bool skip_reference = true;
  /// Used when a qint8 schema is among `schemas` and the net is not calibrated yet.
  CalibrationOptions calibration;
  /// The accuracy budget of a tuning that allows qint8, float16 or bfloat16:
  /// "top1:0.99" (argmax agreement over the last axis, per position),
  /// "seq:0.95" (the whole argmax sequence of a sample's output agrees),
  /// "ctc:0.95" (the line a greedy CTC decoder reads agrees; blank: class 0
  /// or the last, read off the float32 outputs),
  /// "cosine:0.999", "rel-l2:0.02", or "none". Empty, where qint8 is allowed:
  /// "seq:0.95" for a net with an output of several positions per sample (a
  /// language model's logits; "ctc:0.95" where class 0 or the last wins most
  /// positions of the float32 outputs: a CTC recogniser's blank), else
  /// "top1:0.99", the decisions such nets hand their users (a model whose
  /// outputs are boxes or embeddings should give cosine or rel-l2); without
  /// qint8, "cosine:0.999". Measured against the float32 net's own outputs on
  /// `validation` (else on `calibration.inputs`). Without samples of either,
  /// nothing below float32 is chosen (but for a quantised model's own int8
  /// layers), unless the budget is "none": reduced precision unchecked, which
  /// the file records. A path that misses it is never kept: the fastest
  /// float32 path measured is, and the report says so.
  std::string accuracy;
  /// A path with layers below float32 (qint8, bfloat16, float16) is kept only
  /// where DPRS predicts it at least this fraction faster than the fastest
  /// float32 path measured (0.02: 2%); else the float32 path is, and the
  /// tuning spends nothing on the accuracy budget or on calibrating with every
  /// sample (qint8 is first timed under scales from a few of them). A
  /// quantised model's own int8 layers are not judged by it. 0: any gain.
  double min_reduced_gain = 0.02;
  /// A metric of your own in place of `accuracy` (which must then be empty).
  AccuracyMetric accuracy_metric;
  /// Validation samples, each binding every net input by name (load_samples()
  /// reads a folder of them); keep them apart from `calibration.inputs`.
  std::vector<std::vector<NamedBlob>> validation;
  /// Input shapes to tune at, one routine path each (a shape bucket), for a
  /// model with dynamic dims; inputs not named keep their default shape. A
  /// session at other shapes runs the nearest bucket's path. Empty: the default shapes.
  std::vector<std::map<std::string, Shape>> shapes;
  /// Layers that run in qint8 on every tuned path keep their weights on the
  /// int8 grid their routine computes with, and the .dnn stores them as int8
  /// and per-channel scales (a quarter of the bytes; the tuned path computes
  /// exactly what it computed before). A session that later runs such a layer
  /// in float32 computes with those values (and with the corrected bias where
  /// bias correction was kept). True: every weight and bias stays as imported,
  /// and bias correction is not tried.
  bool keep_float_weights = false;
  /// The tuned model also holds its routine path's derived weights (packed,
  /// Winograd-transformed, reordered for oneDNN), saved in the .dnn, so that a
  /// session of it on a CPU with the same extensions and this library version
  /// derives nothing: it starts in milliseconds instead of a few hundred.
  /// Elsewhere they are ignored and derived as before. They add to the file's
  /// size (ResNet50 float32: docs/formats.md). False: the layers' weights only.
  bool prepared_weights = true;
  std::function<void(const TuneProgress&)> progress;
};

/// What tuning chose and measured (SoftNeuro's Table III), as text and JSON.
struct TuneReport {
  struct LayerLine {
    std::string layer, type, descriptor, routine_params;
    double unit_ms = 0;        ///< best unit-profiled time
    double integrated_ms = 0;  ///< time in context of whole-net runs (0 if not measured)
    int candidates = 0;        ///< routine × parameter combinations measured
    /// Under an accuracy budget the path first chosen missed: the budget's
    /// loss (1 - top1 or cosine, or rel-l2) with this layer alone in qint8;
    /// -1 where not measured.
    double sensitivity = -1;
    /// The quantisation the routine was measured with (its blobs' scales and
    /// zero points, as LayerSummary::quant names them); empty: none.
    std::string quant;
    /// The layer whose step computes this one too, as it was priced (a fused
    /// pair measured as one step: LayerSummary::fused_into); empty: none.
    std::string fused_into;
  };
  struct AdaptLine {
    std::string blob, consumer, from_schema, to_schema, descriptor;
    double ms = 0;
  };
  std::string device_fingerprint;
  int threads = 0;
  std::string openmp_wait;  ///< how idle OpenMP threads waited while measuring (softneuro::openmp_wait())
  std::vector<LayerLine> layers;
  std::vector<AdaptLine> adapts;
  double predicted_ms = 0;  ///< DPRS's total for the chosen path
  double measured_ms = 0;   ///< median end-to-end time of the tuned net
  /// The untuned default's median, measured interleaved with the tuned path in
  /// fresh executors (0 where the default breaks the schemas, pins or bans). A
  /// tuned path that is not faster than it is not kept: the default is.
  double default_ms = 0;
  bool kept_default = false;  ///< the final check kept the untuned default's routines
  /// The paths earlier tunings of this model kept (on this device, threads
  /// and version; from the profile cache) that the final check measured
  /// beside the tuned one, the fastest one's median (0: none), and whether it
  /// measured faster and was taken: cached times cannot lead a warm tuning to
  /// a path slower than one a colder tuning found.
  int earlier_paths = 0;
  double earlier_ms = 0;
  bool earlier_taken = false;
  /// The accuracy budget applied ("" where the tuning allowed nothing below
  /// float32), the value measured for the path chosen before the check (-1:
  /// not measured, the path ran nothing below float32), on what samples, and
  /// whether the path missed the budget and a float32 path was kept instead.
  std::string accuracy_budget;
  double accuracy = -1;
  int validation_samples = 0;
  bool validation_synthetic = false;
  /// No samples of the user's (validation or calibration) and a budget other
  /// than "none": nothing below float32 was chosen, but for a quantised
  /// model's own int8 layers.
  bool reduced_refused = false;
  bool accuracy_missed = false;
  /// The same metric for the path kept, on the calibration samples: data the
  /// search never chose paths by, so a path that met the budget on the
  /// validation samples by luck misses here (-1: not measured).
  double accuracy_confirmed = -1;
  /// Why a path missed where the value alone does not say (validation too
  /// small to resolve the budget, or missed on the calibration samples).
  std::string accuracy_note;
  /// The fraction of the fastest float32 path's predicted time that the path
  /// below float32 DPRS chose saves (-1: not compared: no such path); under
  /// TuneOptions::min_reduced_gain the float32 path was kept
  /// (reduced_not_worth) and only `provisional_samples` calibrated qint8's timing.
  double reduced_gain = -1;
  double min_reduced_gain = 0;  ///< TuneOptions::min_reduced_gain, as the tuning applied it
  bool reduced_not_worth = false;
  int provisional_samples = 0;
  /// The calibration's range method kept (CalibrationOptions::methods; "" where
  /// the tuning did not calibrate), and each method tried with the value the
  /// budget's metric measured for the chosen path under it.
  std::string range_method;
  std::vector<std::pair<std::string, double>> range_methods;
  /// Bias correction (conv2/dense layers in qint8 get the bias that cancels
  /// their int8 weights' mean output shift on the calibration data): kept only
  /// where it measured better on the validation samples; the value measured
  /// with it (-1: not tried).
  bool bias_correction = false;
  double bias_corrected_accuracy = -1;
  double tuning_s = 0;
  int measurements = 0;     ///< timings taken (not from the cache)
  int cache_hits = 0;       ///< times reused from the profile cache
  /// Cached times measured again: taken under load, or off when spot-checked
  /// (the fastest cached candidate of each layer's schemas is measured again).
  int cache_remeasured = 0;
  /// Layer sensitivities the accuracy budget's search read from the profile
  /// cache (measured by an earlier tuning on the same model, calibration,
  /// quantisation, budget and samples), and those it measured.
  int sensitivities_cached = 0;
  int sensitivities_measured = 0;
  /// Layers in a reduced dtype whose sensitivity the search did not need:
  /// float32 is as fast there whatever the neighbouring layers take.
  int sensitivities_dominated = 0;
  /// How much faster (below 1) or slower the machine ran the spot-checked
  /// candidates than when the cache measured them: cached times were read
  /// scaled by it (1: no drift, or too few checks to say).
  double cache_drift = 1;
  bool exact = true;        ///< DPRS solved exactly (no fallback)
  /// CPUs other processes (and a hypervisor) kept busy on average while tuning;
  /// -1 where the system does not say. From 0.5 up the times measured may not
  /// hold on a quiet machine (tune() then warns).
  double others_cpus = -1;
  /// Wall-clock seconds per stage (calibration, unit profiling, adapts, dprs,
  /// integrated profiling, final measurement), in order.
  std::vector<std::pair<std::string, double>> stage_s;
  /// The input shapes this path was tuned at (TuneOptions::shapes; empty: the defaults).
  std::map<std::string, Shape> input_shapes;
  /// Weights moved onto their int8 grid (stored as int8, see
  /// TuneOptions::keep_float_weights): how many layers, and their float32 bytes.
  int int8_weight_layers = 0;
  std::size_t int8_weight_float_bytes = 0;
  /// With several TuneOptions::shapes: the reports of the shapes after the first.
  std::vector<TuneReport> other_shapes;

  std::string to_text() const;
  std::string to_json() const;
};

/// The routine path a session runs (Session::layers()) as an
/// SVG picture: a row per step in execution order, coloured by the schema its
/// routine computes in, adapts as diamonds with their cost, edges from each
/// blob's producer to its readers, and a bar of each step's tuned time.
std::string path_svg(std::span<const LayerSummary> steps, const std::string& title);

/// A benchmark chart: one panel per group (a model), a horizontal bar per
/// entry (an engine) at its median with min-max whiskers, on a log scale.
struct BarChart {
  struct Bar {
    std::string label;
    double median = 0, min = 0, max = 0;  ///< median <= 0: no result; `note` says why
    std::string colour = "#4e79a7";
    bool hatched = false;  ///< e.g. int8 entries
    std::string note;
  };
  struct Panel {
    std::string title;
    std::vector<Bar> bars;
  };
  std::string title;
  std::string unit = "ms";
  std::vector<Panel> panels;
};
/// The chart as SVG, in path_svg's frame and bars (bench/compare's chart).
std::string chart_svg(const BarChart& chart);

/// Measures the candidate routines of every layer of `model` on this device
/// (unit profiling, then integrated profiling in whole-net runs), picks the
/// fastest routine path with DPRS, adapts included, and returns the model with
/// that path (sessions of it run the path; save() stores it with this device's
/// fingerprint). `model` itself is unchanged. Where a qint8 schema is allowed
/// and the model is not calibrated, calibrates it first (options.calibration).
/// Fills `report` where given. Throws softneuro::Error when no path exists.
Model tune(const Model& model, const TuneOptions& options = {}, TuneReport* report = nullptr);

}  // namespace softneuro
