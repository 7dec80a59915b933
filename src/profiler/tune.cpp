// Tuning as orchestration (SoftNeuro, section III): calibration where qint8 is
// allowed, unit profiling, DPRS on unit costs, integrated profiling of the
// chosen candidates, DPRS again on in-context costs, and a final check that
// keeps the tuned path only where it runs faster than the untuned default as
// `softneuro run` prepares it. Measuring is the profiler's (unit_profile.*),
// the cost graph and the path read back from it the planner's (planner.*).
// The runtime core never includes this file; it stores and follows the path.
#include "core/device.hpp"
#include "core/executor.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "core/model_impl.hpp"
#include "core/registry.hpp"
#include "core/shape_plan.hpp"
#include "core/thread_pool.hpp"
#include "core/weight_quant.hpp"
#include "profiler/accuracy.hpp"
#include "profiler/calibrate.hpp"
#include "profiler/planner.hpp"
#include "profiler/timing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <limits>
#include <set>
#include <thread>

namespace softneuro {
namespace {

using profiler::kInf;
using profiler::LayerProfile;
using profiler::Measured;
using profiler::params_text;

/// Validation samples a layer's sensitivity (the metric's loss with it alone
/// below float32) is measured on: enough for the cosine and rel-l2 means that
/// rank the layers; the paths the search then finds are validated on all.
constexpr std::size_t kSensitivitySamples = 16;

/// The budget search does not tell apart paths less than this fraction faster
/// than one that passed: the cost graph's times are no finer, and ResNet50's
/// search spent 4 of its 10 validations on paths 0.6% apart.
constexpr double kBudgetResolution = 0.01;

/// Calibration samples whose scales time the qint8 candidates until a path
/// below float32 is known to pay (times do not depend on the scales): every
/// sample calibrates only then. ResNet50's 300 took 113 s of a Zen 1 tuning
/// whose one int8 layer saved 0.1% of the run.
constexpr std::size_t kProvisionalSamples = 8;

/// The weight range (Routine::weight_qmax) of each conv2 and dense layer of
/// `g` that `path` runs in qint8 (its routines found in `registry`).
std::map<std::string, int> qint8_weight_ranges(const core::Graph& g, const core::RoutinePath& path,
                                               const core::RoutineRegistry& registry) {
  std::map<std::string, int> out;
  for (const auto& r : path.routines) {
    if (!profiler::runs_in_qint8(r)) continue;
    const Layer* l = g.find_layer(r.layer);
    if (!l || (l->type != "conv2" && l->type != "dense")) continue;
    Schema schema;
    const Routine* routine = registry.find(l->type, r.descriptor, &schema);
    out[r.layer] = routine ? routine->weight_qmax(r.params) : 127;
  }
  return out;
}

/// A layer's weights on an int8 grid and its corrected bias, made once: the
/// accuracy budget's every validation stores the graph of the path it judges
/// (as_stored), and making them again took 0.3-0.5 s of each (ResNet50).
/// Keyed by the float32 weight's memory and the grid's range; a bias by the
/// channel means too (a calibration replaced gives other means).
class StoredWeights {
 public:
  std::optional<Blob> grid(const Blob& w, int qmax) {
    const auto key = std::make_pair(w.data(), qmax);
    if (auto it = grids_.find(key); it != grids_.end()) return it->second.second;
    auto g = core::on_int8_grid(w, qmax);
    grids_.emplace(key, std::make_pair(w, g));  // (w held: its memory is not another weight's while the key stands)
    return g;
  }
  Blob bias(const Layer& l, const Blob& grid, const std::vector<double>& means) {
    const auto key = std::make_pair(grid.data(), l.name);
    if (auto it = biases_.find(key); it != biases_.end() && it->second.first == means) return it->second.second;
    Blob b = profiler::corrected_bias(l, grid, means);
    biases_[key] = {means, b};
    return b;
  }

 private:
  std::map<std::pair<const void*, int>, std::pair<Blob, std::optional<Blob>>> grids_;
  std::map<std::pair<const void*, std::string>, std::pair<std::vector<double>, Blob>> biases_;
};

/// `g` as it is stored once tuned: the conv2 and dense layers named in
/// `in_qint8` get their weights on the int8 grid their qint8 routine computes
/// with (its weight range; exactly what it computed before) and, with `means`, the bias that
/// cancels the grid's mean output shift. Returns each moved layer's float32 weight bytes.
std::map<std::string, std::size_t> as_stored(core::Graph& g, const std::map<std::string, int>& in_qint8,
                                             const std::map<std::string, std::vector<double>>* means,
                                             StoredWeights& made) {
  std::map<std::string, std::size_t> moved;
  for (Layer& l : g.layers) {
    const auto qmax = in_qint8.find(l.name);
    if ((l.type != "conv2" && l.type != "dense") || qmax == in_qint8.end()) continue;
    auto w = l.weights.find("weight");
    if (w == l.weights.end() || core::stored_as_int8(w->second)) continue;
    auto grid = made.grid(w->second, qmax->second);
    if (!grid) continue;
    if (means)
      if (auto m = means->find(l.inputs[0]); m != means->end()) l.weights["bias"] = made.bias(l, *grid, m->second);
    moved[l.name] = w->second.byte_size();
    l.weights["weight"] = std::move(*grid);
  }
  return moved;
}

struct Tuner {
  detail::WorkingModel& net;
  const TuneOptions& opt;
  profiler::AccuracyBudget budget;  ///< none where the tuning allows no qint8
  std::optional<profiler::Validator> validator;
  std::optional<profiler::Validator> confirmer;  ///< the budget on the calibration samples (confirmation())
  std::string sensitivity_base;  ///< sensitivity_key()'s digest of what every sensitivity depends on
  int sensitivities_measured = 0, sensitivities_cached = 0, sensitivities_dominated = 0;
  bool budget_resolved_with_calibration = false;  ///< resolves_budget() with the confirmation's observations
  /// The quantisation a path is judged and runs with: a range method (an
  /// index into calibration.quants) and whether biases are corrected.
  struct PathQuant {
    std::size_t method = 0;
    bool bias = false;
    bool operator==(const PathQuant&) const = default;
  };
  PathQuant quant_now;  ///< the one net.tuning holds (choose_range_method, adopt)
  std::map<std::string, double> accuracy_seen;  ///< by judged_key: paths validated so far
  std::set<std::string> accuracy_bounds;         ///< of those, values that are bounds (accuracy_of)
  /// By judged_key: the value on the calibration samples (confirmed) and whether
  /// it is exact (else a bound its early stop left: a miss).
  std::map<std::string, std::pair<double, bool>> confirmation_seen;
  /// Paths the budget's search found within float32 and one reduced dtype,
  /// measured beside the tuned path in final_check.
  std::vector<std::pair<std::string, profiler::PlannedPath>> budget_paths;
  std::map<std::string, double> sensitivity;    ///< by layer: the budget's loss with it alone below float32 (the worst dtype)
  /// The layers a quantised model's author put in int8, at the model's own
  /// scales: in qint8 they are the model itself, and answer to no budget.
  std::set<std::string> model_int8;
  /// What calibration measured: one quantisation per range method, and channel means.
  profiler::Calibration calibration;
  /// From kProvisionalSamples samples, one range method (calibrate_fully()
  /// replaces it), and the quantisation the net held before it.
  bool calibration_provisional = false;
  std::map<std::string, QuantParams> quant_before_calibration;
  bool bias_correction = false;  ///< kept where it measured better
  StoredWeights stored_weights;  ///< store_transform's, made once
  bool real_samples = false;     ///< the user gave samples (validation or calibration)
  TuneReport report;
  profiler::Profiler prof;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point stage_start = start;
  profiler::CpuClock cpu_at_start = profiler::cpu_clock();
  /// Each step's dispatch beyond its own time (whole-net run minus the sum of its steps, per step).
  double step_ms = 0;

  /// What every cached time depends on beyond the layer. Times measured while
  /// idle threads slept do not hold where they spin, and the other way round;
  /// another build's kernels' are not these (source_digest); nor are those
  /// measured under another condition of the process (core::run_conditions).
  static std::string cache_key_prefix() {
    const std::string conditions = core::run_conditions();
    return fmt::format("{}|t{}|{}|{}{}", core::device_fingerprint(), num_threads(), openmp_wait(), profiler::library_build(),
                       conditions.empty() ? "" : "|" + conditions);
  }

  Tuner(detail::WorkingModel& n, const TuneOptions& o)
      : net(n),
        opt(o),
        prof(n, o, profiler::Rules{o.schemas, o.pin, o.ban, std::nullopt},
             cache_key_prefix(),
             [this](const char* stage, int done, int total, const std::string& item) { progress(stage, done, total, item); }) {
    report.device_fingerprint = core::device_fingerprint();
    report.threads = num_threads();
    report.openmp_wait = openmp_wait();
  }

  void progress(const char* stage, int done, int total, const std::string& item) {
    // Stage times for the report: a stage runs until the next one starts.
    const auto now = std::chrono::steady_clock::now();
    if (report.stage_s.empty() || report.stage_s.back().first != stage) {
      if (!report.stage_s.empty()) report.stage_s.back().second = std::chrono::duration<double>(now - stage_start).count();
      report.stage_s.emplace_back(stage, 0.0);
      stage_start = now;
    }
    if (opt.progress) opt.progress(TuneProgress{stage, done, total, item});
  }

  /// A schema entry that matches no registered routine is a typo, not a wish.
  void check_schema_entries() const {
    std::vector<Schema> known;
    for (const auto& d : registered_routines()) {
      Schema s = Schema::parse(d.substr(0, d.find('/')));
      if (std::find(known.begin(), known.end(), s) == known.end()) known.push_back(s);
    }
    for (const auto& text : opt.schemas) {
      profiler::Rules one{{text}, {}, {}, std::nullopt};
      if (std::none_of(known.begin(), known.end(), [&](const Schema& s) { return one.schema_allowed(s); })) {
        std::string list;
        for (const auto& s : known) list += (list.empty() ? "" : ", ") + s.to_string();
        throw Error(fmt::format("no registered routine computes in '{}' (available: {})", text, list), {}, {}, "schemas");
      }
    }
  }

  profiler::PlannedPath solve(std::vector<LayerProfile>& profiles, bool integrated) {
    profiler::Plan plan = profiler::build_plan(net, profiles, prof, integrated, step_ms,
                                               [this](const char* s, int d, int t, const std::string& i) { progress(s, d, t, i); });
    dprs::Solution sol = dprs::solve(plan.graph);
    if (!sol.feasible)
      throw Error("no routine path exists: some edge has no adapt between the schemas its layers allow", net.file);
    report.exact = report.exact && sol.exact;
    return profiler::read_path(plan, sol, profiles, integrated, report.device_fingerprint);
  }

  /// Runs `path` in context and stores each measured candidate's in-context time.
  void measure_in_context(std::vector<LayerProfile>& profiles, const profiler::PlannedPath& planned) {
    auto r = prof.run_interleaved({planned.path}, opt.integrated_runs, 1)[0];
    for (std::size_t i = 0; i < profiles.size(); ++i) {
      const std::string& name = profiles[i].layer->name;
      // Two layers one step computed: the pair's time, not either candidate's apart.
      if (i + 1 < profiles.size() && r.fused_away.count(name))
        if (profiler::FusedPair* f = profiles[i + 1].fused_pair(planned.picks[i], planned.picks[i + 1])) {
          f->integrated_ms = r.per_step[name] + r.per_step[profiles[i + 1].layer->name];
          ++i;
          continue;
        }
      auto it = r.per_step.find(name);
      if (it != r.per_step.end()) profiles[i].entry(planned.picks[i]).integrated_ms = it->second;
    }
    // The adapts' steps: from the blob, or (a consumer's) from its shared copy.
    for (const auto& a : planned.path.adapts) {
      const Schema from = Schema::parse(a.from_schema), to = Schema::parse(a.to_schema);
      for (const auto& source : {a.blob, a.blob + "@" + from.to_string()})
        if (auto it = r.per_step.find(core::adapt_step_name(source, a.consumer, to)); it != r.per_step.end()) {
          // (One a fused pair made unneeded ran nothing: its time is the pair's, not the adapt's.)
          if (!r.fused_away.count(it->first)) prof.record_adapt_in_context(a.blob, a.consumer, from, to, it->second);
          break;
        }
    }
    step_ms = r.step_gap_ms;
    core::debug("in context: {:.4f} ms a run, {} steps ({:.4f} ms), {:.5f} ms between steps", r.total_ms, r.steps, r.steps_ms,
                step_ms);
  }

  /// With several dtypes allowed (hybrid): the best path within each dtype alone
  /// ("qint8-only": each layer keeping the float32 CPU candidates where that
  /// dtype has none), and, for each reduced dtype, the best path over it and
  /// float32 together ("float32+bfloat16"): where the mixed path misses the
  /// accuracy budget by its qint8 layers, the bfloat16 one may meet it (PP-OCRv4's
  /// recogniser on an AMX Xeon: the budget kept float32 at 6.1 ms; float32 and
  /// bfloat16 read 39 of 40 lines as float32 does at 3.2 ms).
  std::vector<std::pair<std::string, profiler::PlannedPath>> dtype_restricted_paths(const std::vector<LayerProfile>& profiles) {
    std::set<DType> dtypes;
    for (const auto& p : profiles)
      for (const auto& m : p.measured) dtypes.insert(m.cand.precision());
    std::vector<std::pair<std::string, profiler::PlannedPath>> out;
    if (dtypes.size() < 2) return out;
    std::set<std::string> seen;
    auto add = [&](DType d, bool with_float32) {
      const std::string name = with_float32 ? fmt::format("float32+{}", to_string(d)) : fmt::format("{}-only", to_string(d));
      std::optional<profiler::PlannedPath> path = restricted_path(profiles, d, with_float32, name);
      if (!path || !seen.insert(path_key(path->path)).second) return;  // none, or the same path under another name
      out.push_back({name, std::move(*path)});
    };
    for (DType d : dtypes) add(d, false);
    // (With one reduced dtype, float32 and it together is the whole search.)
    if (dtypes.size() > 2)
      for (DType d : dtypes)
        if (d != DType::float32) add(d, true);
    return out;
  }

  /// The best path over the candidates computing in `d` (and float32 too
  /// with `with_float32`), each layer with none keeping its float32 CPU ones,
  /// with in-context costs; none where a layer has neither. Its picks are the
  /// profiles' own candidates (DPRS picked them in a copy): where the path is
  /// taken, the report tells by them which pairs run as one step.
  std::optional<profiler::PlannedPath> restricted_path(const std::vector<LayerProfile>& profiles, DType d,
                                                       bool with_float32, const std::string& name) {
    std::vector<LayerProfile> restricted = profiles;
    for (auto& p : restricted) {
      std::vector<Measured> keep;
      for (const auto& m : p.measured)
        if (m.cand.precision() == d || (with_float32 && m.cand.precision() == DType::float32)) keep.push_back(m);
      if (keep.empty())
        for (const auto& m : p.measured)
          if (m.cand.schema.device == Device::cpu && m.cand.precision() == DType::float32) keep.push_back(m);
      if (keep.empty()) {
        core::debug("no {} path: layer '{}' has no candidate in it", name, p.layer->name);
        return std::nullopt;
      }
      p.measured = std::move(keep);
    }
    profiler::Plan plan = profiler::build_plan(net, restricted, prof, true, step_ms);
    dprs::Solution sol = dprs::solve(plan.graph);
    if (!sol.feasible) {
      core::debug("no {} path: DPRS found none", name);
      return std::nullopt;
    }
    profiler::PlannedPath path = profiler::read_path(plan, sol, restricted, true, report.device_fingerprint);
    for (std::size_t i = 0; i < path.picks.size(); ++i)
      if (path.picks[i]) path.picks[i] = profiles[i].find(path.picks[i]->cand.descriptor, path.picks[i]->params);
    return path;
  }

  /// The untuned default as a complete path (its routines and adapts), and
  /// whether it obeys the user's schemas, pins and bans.
  struct DefaultPath {
    core::RoutinePath path;
    bool allowed = true;
    std::map<std::string, std::string> quant;  ///< each layer's, as its plan's step has it (describe_quant)
    std::map<std::string, std::string> fused_into;  ///< each layer's Step::fused_into
  };
  DefaultPath default_path() {
    DefaultPath out;
    out.path.device_fingerprint = report.device_fingerprint;
    const core::RoutinePath untuned;  // the untuned default, whatever the net held
    const core::Plan plan = core::build_plan(net.graph, net.tuning, net.shapes, &untuned, net.plan_options());
    for (const auto& step : plan.steps) {
      if (step->layer->type == "adapt") {
        out.path.adapts.push_back({step->adapt_layer.inputs[0], step->adapt_consumer, step->adapt_layer.get_string("from"),
                                   step->adapt_layer.get_string("to"), {step->routine.descriptor}, 0, step->params});
        continue;
      }
      out.allowed = out.allowed && prof.rules().schema_allowed(step->routine.schema) &&
                    prof.rules().allows(step->name, step->routine);
      if (step->parent.empty()) {  // a childnet's children follow their parent's default
        out.path.routines.push_back({step->name, step->routine.descriptor, step->params, 0, 0, {}});
        out.quant[step->name] = core::describe_quant(step->info.input_quant, step->info.output_quant);
        out.fused_into[step->name] = step->fused_into;
      }
    }
    return out;
  }

  /// An adapt as the report names it: its routine, and its parameters where it has any.
  static std::string adapt_text(const core::AdaptChoice& a) {
    return a.steps[0] + (a.params.empty() ? std::string() : " (" + params_text(a.params) + ")");
  }
  /// A path's prediction from a whole-net run of it: its steps' times and the
  /// dispatch between them, as DPRS sums a tuned path's (for a path this
  /// tuning did not solve for: a kept default, an earlier tuning's).
  static double in_run_prediction(const profiler::InContext& m) {
    return m.steps_ms + m.step_gap_ms * static_cast<double>(m.steps);
  }

  void report_path(const profiler::PlannedPath& planned, const std::vector<LayerProfile>& profiles) {
    report.layers.clear();
    report.adapts.clear();
    for (std::size_t i = 0; i < planned.path.routines.size(); ++i) {
      const auto& r = planned.path.routines[i];
      const Measured* m = i < planned.picks.size() ? planned.picks[i] : nullptr;
      report.layers.push_back({r.layer, net.graph.find_layer(r.layer)->type, r.descriptor, params_text(r.params),
                               m ? m->unit_ms : r.predicted_ms, m ? m->integrated_ms : 0,
                               i < profiles.size() ? static_cast<int>(profiles[i].measured.size()) : 0,
                               sensitivity.count(r.layer) ? sensitivity.at(r.layer) : -1.0,
                               i < profiles.size() ? core::describe_quant(profiles[i].info.input_quant, profiles[i].info.output_quant)
                                                   : std::string(),
                               std::string()});
      // A pair DPRS priced as one step: the second layer's step computes the first.
      if (i > 0 && i < profiles.size() && i < planned.picks.size() &&
          profiles[i].fused_pair(planned.picks[i - 1], planned.picks[i]))
        report.layers[i - 1].fused_into = r.layer;
    }
    for (const auto& a : planned.path.adapts)
      report.adapts.push_back({a.blob, a.consumer, a.from_schema, a.to_schema,
                               adapt_text(a),
                               a.predicted_ms});
  }

  TuneReport run() {
    if (num_threads() < 1) throw Error("no threads");
    check_schema_entries();
    resolve_budget_and_calibrate();
    auto profiles = prof.unit_profile();
    prof.measure_fused_pairs(profiles);

    // DPRS on unit costs.
    progress("dprs", 0, 1, "");
    profiler::PlannedPath planned = solve(profiles, false);
    integrated_profiling(profiles, planned);
    core::RoutinePath last_run = settle_in_context(profiles, planned);
    weigh_reduced(profiles, planned, last_run);
    const auto quant_profiled = net.tuning.blob_quant;
    choose_range_method(planned.path);
    // Another range method than the one profiled: every blob's scales changed.
    // The profiles take them (the report names what runs), and the path is
    // measured again in context with them below.
    const bool requantised = net.tuning.blob_quant != quant_profiled;
    if (requantised) prof.requantise(profiles);
    planned = meet_budget(profiles, std::move(planned));
    // The prediction: the chosen path's costs measured in its own context (the
    // minimum over noisy in-context costs DPRS took favours lucky samples).
    if (requantised || !same_routines(planned.path, last_run)) measure_in_context(profiles, planned);
    predict(profiles, planned);
    report.predicted_ms = planned.predicted_ms;
    report_path(planned, profiles);
    final_check(profiles, planned);
    return finish();
  }

  /// The accuracy budget (parsed first: a bad one is an error before any
  /// measuring) and, where qint8 is wanted, calibration.
  void resolve_budget_and_calibrate() {
    model_int8 = net.analyses->quantised_by_model;
    // qint8 routines need every blob's quantisation: calibrate when none is stored yet.
    bool wants_qint8 = false;
    for (Layout l : {Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c})
      wants_qint8 = wants_qint8 || prof.rules().schema_allowed(Schema{Device::cpu, DType::qint8, l});
    const bool wants_reduced_float = allows_reduced_float();
    // Parsed first: a bad budget is an error before any measuring.
    if (opt.accuracy_metric.score || opt.accuracy_metric.score_set || !opt.accuracy_metric.name.empty()) {
      if (!opt.accuracy.empty())
        throw Error(fmt::format("both accuracy '{}' and the metric '{}' given: one budget at a time", opt.accuracy,
                                opt.accuracy_metric.name),
                    net.file, {}, "accuracy");
      budget = profiler::user_accuracy(opt.accuracy_metric);
    } else if (!opt.accuracy.empty() || wants_qint8 || wants_reduced_float) {
      budget = profiler::parse_accuracy(!opt.accuracy.empty() ? opt.accuracy
                                        : !wants_qint8        ? profiler::kDefaultFloatAccuracy
                                        : feature_outputs()   ? profiler::kDefaultFeatureAccuracy
                                        : sequence_outputs()  ? profiler::kDefaultSequenceAccuracy
                                                              : profiler::kDefaultAccuracy);
      budget.ctc_if_blank = opt.accuracy.empty();
    }
    if (wants_qint8 || wants_reduced_float) report.accuracy_budget = budget.text;
    else if (budget.metric == profiler::AccuracyBudget::Metric::user)
      core::warn("the accuracy metric {} is never called: the schemas allow nothing below float32 to check", budget.text);
    // Without the user's samples a budget is met on synthetic inputs, which
    // say nothing of real data (a recogniser met top1:0.99 on noise and then
    // read 0 of 40 text lines): nothing below float32 is chosen, but for a
    // quantised model's own int8 layers, unless the user allowed it unchecked.
    real_samples = !opt.validation.empty() || !opt.calibration.inputs.empty();
    if ((wants_qint8 || wants_reduced_float) && !real_samples && budget.metric != profiler::AccuracyBudget::Metric::none) {
      report.reduced_refused = true;
      prof.restrict_reduced_to(model_int8);
      wants_qint8 = wants_qint8 && !model_int8.empty();
    }
    if (wants_qint8 && (net.tuning.blob_quant.empty() || !opt.calibration.inputs.empty())) {
      progress("calibration", 0, 1, "");
      quant_before_calibration = net.tuning.blob_quant;
      if (model_int8.empty() && opt.calibration.inputs.size() > kProvisionalSamples && !opt.calibration.methods.empty()) {
        CalibrationOptions few = opt.calibration;
        few.inputs.resize(kProvisionalSamples);
        few.methods = {RangeMethod::minmax};  // one pass
        calibration = profiler::calibrate(net, few, calibration_dir());
        calibration_provisional = true;
        report.provisional_samples = static_cast<int>(kProvisionalSamples);
      } else {
        calibrate_every_sample();
      }
    }
  }
  std::string calibration_dir() const {
    return opt.cache_dir.empty() ? profiler::ProfileCache::default_dir() : opt.cache_dir;
  }
  /// The calibration the options ask for: every sample, every range method.
  void calibrate_every_sample() {
    calibration = profiler::calibrate(net, opt.calibration, calibration_dir());
    if (budget.metric == profiler::AccuracyBudget::Metric::none) calibration.outputs.clear();  // nothing confirms
    report.range_method = to_string(opt.calibration.methods.front());
  }

  /// Every sample and range method, where the provisional calibration timed qint8.
  void calibrate_fully(std::vector<LayerProfile>& profiles) {
    if (!calibration_provisional) return;
    calibration_provisional = false;
    progress("calibration", 0, 1, "every sample");
    calibrate_every_sample();
    prof.requantise(profiles);
  }

  /// Whether a candidate, or some layer of a path, computes below float32.
  static bool below_float32(const Measured* m) { return m && profiler::below_float32(m->cand.precision()); }
  static bool runs_below_float32(const profiler::PlannedPath& p) {
    return std::any_of(p.picks.begin(), p.picks.end(), [](const Measured* m) { return below_float32(m); });
  }

  /// Whether the path below float32 DPRS chose (`planned`, in-context costs)
  /// pays: at least TuneOptions::min_reduced_gain faster than the fastest
  /// float32 path. Where it does (or no float32 path exists: pins), the
  /// tuning goes on to calibrate with every sample and hold the path to the
  /// budget. Where it does not, every candidate below float32 leaves the
  /// profiles and the tuning goes on as a float32 one: no range methods, no
  /// sensitivities, no budget search for a gain below the noise of a
  /// measurement (ResNet50 on a Zen 1: 136 s of range methods for an int8
  /// classifier layer that saved 0.1 ms of 87). A quantised model's own int8
  /// layers are the model: not weighed.
  void weigh_reduced(std::vector<LayerProfile>& profiles, profiler::PlannedPath& planned, core::RoutinePath& last_run) {
    const auto reduced = [](const Measured& m) { return below_float32(&m); };
    const bool any = std::any_of(profiles.begin(), profiles.end(),
                                 [&](const LayerProfile& p) { return std::any_of(p.measured.begin(), p.measured.end(), reduced); });
    if (!any || !model_int8.empty() || !(opt.min_reduced_gain > 0)) return calibrate_fully(profiles);
    const bool chosen = runs_below_float32(planned);
    const std::optional<profiler::PlannedPath> f32 = restricted_path(profiles, DType::float32, false, "float32-only");
    if (!f32 || !(f32->predicted_ms > 0)) return calibrate_fully(profiles);
    report.reduced_gain = chosen ? 1.0 - planned.predicted_ms / f32->predicted_ms : 0.0;
    report.min_reduced_gain = opt.min_reduced_gain;
    if (report.reduced_gain >= opt.min_reduced_gain && chosen) return calibrate_fully(profiles);
    report.reduced_not_worth = true;
    core::info("below float32 the path was predicted {:.3f} ms against float32's {:.3f} ({:.1f}% faster, under {:.1f}%): "
               "float32 kept, nothing below it calibrated or validated",
               chosen ? planned.predicted_ms : f32->predicted_ms, f32->predicted_ms, 100 * report.reduced_gain,
               100 * opt.min_reduced_gain);
    for (auto& p : profiles) std::erase_if(p.measured, reduced);
    drop_broken_pairs(profiles);  // (a fused pair prices two candidates: kept where both still are)
    if (calibration_provisional) {
      // Scales that only timed candidates no path keeps: the net stays as it was given.
      calibration = {};
      calibration_provisional = false;
      net.tuning.blob_quant = quant_before_calibration;
      net.changed();
      prof.requantise(profiles);
    }
    planned = solve(profiles, true);
    if (!same_routines(planned.path, last_run)) {
      measure_in_context(profiles, planned);
      last_run = planned.path;
    }
  }

  /// Integrated profiling: the best few candidates per (layer, chosen schema), in whole-net runs.
  void integrated_profiling(std::vector<LayerProfile>& profiles, const profiler::PlannedPath& planned) {
    const int rounds = std::max(1, opt.candidates_per_schema);
    for (int k = 0; k < rounds; ++k) {
      progress("integrated profiling", k, rounds, "");
      profiler::PlannedPath kth = planned;
      bool any = k == 0;
      for (std::size_t i = 0; i < profiles.size(); ++i) {
        int seen = 0;
        for (const auto& m : profiles[i].measured)
          if (m.cand.schema == planned.picks[i]->cand.schema && seen++ == k) {
            kth.picks[i] = &m;
            kth.path.routines[i] = {profiles[i].layer->name, m.cand.descriptor, m.params, 0, 0, m.children};
            any = true;
          }
      }
      if (!any) break;
      measure_in_context(profiles, kth);
    }
    progress("integrated profiling", rounds, rounds, "");
  }

  static bool same_routines(const core::RoutinePath& a, const core::RoutinePath& b) {
    if (a.routines.size() != b.routines.size()) return false;
    for (std::size_t i = 0; i < a.routines.size(); ++i)
      if (a.routines[i].descriptor != b.routines[i].descriptor || a.routines[i].params != b.routines[i].params) return false;
    return true;
  }

  /// DPRS again with in-context costs. The path it chooses is run in context
  /// and solved again until it chooses the path it last ran (or four rounds):
  /// its prediction is then the sum of times measured in its own context, not
  /// of times each candidate had beside other neighbours (a mix of two
  /// measured paths predicted 0.31 ms and ran 0.38). Returns the path run last.
  core::RoutinePath settle_in_context(std::vector<LayerProfile>& profiles, profiler::PlannedPath& planned) {
    const int rounds = std::max(1, opt.candidates_per_schema);
    core::RoutinePath last_run = planned.path;  // the k = 0 round ran the unit-cost path
    for (int round = 0;; ++round) {
      profiler::update_context_ratios(profiles);
      planned = solve(profiles, true);
      if (same_routines(planned.path, last_run) || round == 3) break;
      progress("integrated profiling", rounds + round, rounds + round + 1, "");
      measure_in_context(profiles, planned);
      last_run = planned.path;
    }
    return last_run;
  }

  /// `planned`'s prediction: each step's in-context cost (a fused pair's, its
  /// second's) and a dispatch, and its adapts.
  void predict(const std::vector<LayerProfile>& profiles, profiler::PlannedPath& planned) const {
    planned.predicted_ms = 0;
    for (std::size_t i = 0; i < profiles.size(); ++i) {
      if (i + 1 < profiles.size())
        if (const profiler::FusedPair* f = profiles[i + 1].fused_pair(planned.picks[i], planned.picks[i + 1])) {
          planned.path.routines[i].predicted_ms = 0;
          planned.path.routines[i + 1].predicted_ms = profiles[i + 1].cost(*f, true);
          planned.predicted_ms += planned.path.routines[i + 1].predicted_ms + step_ms;
          ++i;
          continue;
        }
      planned.path.routines[i].predicted_ms = profiles[i].cost(*planned.picks[i], true);
      planned.predicted_ms += planned.path.routines[i].predicted_ms + step_ms;
    }
    for (const auto& a : planned.path.adapts) planned.predicted_ms += a.predicted_ms;
  }

  /// The validation samples (the user's, else synthetic, with a warning) and
  /// the float32 outputs on them, made at the first use.
  profiler::Validator& validation() {
    if (!validator) {
      std::vector<std::vector<NamedBlob>> samples = opt.validation;
      // The user's calibration samples are real data: better than any synthetic.
      if (samples.empty()) samples = opt.calibration.inputs;
      report.validation_synthetic = samples.empty();
      if (samples.empty()) {
        samples = profiler::synthetic_inputs(net, 16, 1000);  // not the calibration's own inputs
        core::warn("no validation samples: the accuracy budget {} is checked on {} synthetic inputs only, which say "
                   "little about accuracy on real data (give samples: --calibration DIR)",
                   budget.metric == profiler::AccuracyBudget::Metric::none ? "none (range methods compared by cosine)" : budget.text,
                   samples.size());
      }
      report.validation_samples = static_cast<int>(samples.size());
      // Without a budget the range methods are still compared, by cosine.
      validator.emplace(net, std::move(samples),
                        budget.metric == profiler::AccuracyBudget::Metric::none ? profiler::parse_accuracy("cosine:1") : budget);
      validator->set_store_transform(store_transform());
      if (budget.metric != profiler::AccuracyBudget::Metric::none && validator->budget().text != budget.text) {
        core::info("accuracy budget {}: the float32 outputs read as CTC ({}): measuring {}, the line a greedy decoder "
                   "reads", budget.text, validator->blank_note(), validator->budget().text);
        budget = validator->budget();
        report.accuracy_budget = budget.text;
      }
      if (budget.metric != profiler::AccuracyBudget::Metric::none && !validator->resolves_budget()) {
        // Every path kept also meets the budget on the user's calibration
        // samples (confirmed): together they may resolve what the validation
        // samples alone cannot (64 lines: 16 validate, ctc:0.95 needs 20).
        const std::size_t together = validator->observations() + confirmation_observations();
        if (together >= validator->observations_needed()) {
          budget_resolved_with_calibration = true;
          core::info("accuracy budget {}: {} validation observations cannot resolve it alone (it needs {}); every path "
                     "kept also meets it on the {} calibration samples ({} observations together)",
                     budget.text, validator->observations(), validator->observations_needed(),
                     confirmation().samples(), together);
        } else {
          report.accuracy_note = fmt::format("validation too small: {} observations cannot resolve {} (it needs {}); no "
                                             "path below float32 is kept",
                                             together, budget.text, validator->observations_needed());
          core::warn("{}: give more samples (--calibration DIR: every fourth validates), or a cosine or rel-l2 budget",
                     report.accuracy_note);
        }
      }
    }
    return *validator;
  }
  /// Whether the samples can tell the budget met (Validator::resolves_budget),
  /// the calibration samples every kept path is confirmed on counted in.
  bool resolves_budget() { return validation().resolves_budget() || budget_resolved_with_calibration; }
  /// The observations of the confirmation on the user's calibration samples
  /// (0 where they are not the user's, or a metric scores the validation set only).
  std::size_t confirmation_observations() {
    if (budget.score_set || opt.calibration.inputs.empty()) return 0;
    return confirmation().observations();
  }
  /// The budget on the calibration samples (made at the first use).
  profiler::Validator& confirmation() {
    if (!confirmer) {
      auto samples = opt.calibration.inputs.empty() ? profiler::synthetic_inputs(net, opt.calibration.synthetic_batches)
                                                    : opt.calibration.inputs;
      // The float32 outputs calibration computed on these samples, where it ran
      // them: 300 whole-net runs of ResNet50 not run again (27 s on a Zen 1).
      std::vector<std::vector<NamedBlob>> references;
      if (!opt.calibration.inputs.empty() && calibration.outputs.size() == samples.size())
        references = std::move(calibration.outputs);
      calibration.outputs.clear();
      confirmer.emplace(net, std::move(samples), budget, std::move(references));
      confirmer->set_store_transform(store_transform());
    }
    return *confirmer;
  }

  /// Whether an output holds several positions per sample: rank 3 or more
  /// with the dims between the first and the last above one position (a
  /// recogniser's [1, T, classes]), the last axis of 2 or more to choose from.
  bool sequence_outputs() const {
    for (const auto& o : net.graph.outputs) {
      const Shape& s = net.shapes.at(o);
      if (s.rank() < 3 || s[s.rank() - 1] < 2) continue;
      int64_t positions = 1;
      for (int i = 1; i + 1 < s.rank(); ++i) positions *= s[i];
      if (positions > 1) return true;
    }
    return false;
  }

  /// Whether every output comes straight from a layer normalisation (hidden states, not scores).
  bool feature_outputs() const {
    for (const auto& o : net.graph.outputs) {
      const auto producer = std::find_if(net.graph.layers.begin(), net.graph.layers.end(), [&](const Layer& l) {
        return std::find(l.outputs.begin(), l.outputs.end(), o) != l.outputs.end();
      });
      if (producer == net.graph.layers.end() || producer->type != "layernorm") return false;
    }
    return !net.graph.outputs.empty();
  }

  /// Whether the schemas allowed include float16 or bfloat16 ones (on any device):
  /// their paths answer to the accuracy budget as qint8 ones do.
  bool allows_reduced_float() {
    for (Device d : {Device::cpu, Device::cuda})
      for (DType t : {DType::float16, DType::bfloat16})
        for (Layout l : {Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c})
          if (prof.rules().schema_allowed(Schema{d, t, l})) return true;
    return false;
  }

  /// The budget's metric of `path` on the validation samples; NaN where there
  /// is nothing to check (no budget, or nothing below float32: float32 itself).
  /// A path's accuracy on the validation samples; where it misses the budget,
  /// the best value the samples left could still have given when that was
  /// clear (the search validates many paths that miss), unless `exact`.
  double accuracy_of(const core::RoutinePath& path, bool exact = false) {
    if (budget.metric == profiler::AccuracyBudget::Metric::none || !core::computes_below_float32(path, model_int8, *net.routines()))
      return NAN;
    const std::string key = judged_key(path);
    auto it = accuracy_seen.find(key);
    if (it != accuracy_seen.end() && !(exact && accuracy_bounds.count(key))) return it->second;
    std::size_t stopped = 0;
    const double v = validation().measure(path, nullptr, std::numeric_limits<std::size_t>::max(), exact ? nullptr : &stopped);
    accuracy_seen[key] = v;
    if (stopped) accuracy_bounds.insert(key);
    else accuracy_bounds.erase(key);
    return v;
  }
  bool accuracy_ok(const core::RoutinePath& path) {
    const double v = accuracy_of(path);
    return std::isnan(v) || (resolves_budget() && validation().budget().met_by(v));
  }
  /// Whether `path` also meets the budget on the calibration samples, which
  /// the search never chose paths by (meeting it on the validation samples
  /// after trying a dozen paths can be luck: MobileNetV2 met top1:0.99 on 8
  /// validation samples and agreed on 80% of 50 others).
  bool confirmed(const core::RoutinePath& path, bool report_it = false) {
    if (budget.metric == profiler::AccuracyBudget::Metric::none || !core::computes_below_float32(path, model_int8, *net.routines()))
      return true;
    // A metric over the validation set scores those samples only (its labels are the user's).
    if (budget.score_set) return true;
    // Asked of one path by the budget's search and again by the final check: measured once.
    const auto [it, first] = confirmation_seen.try_emplace(judged_key(path), 0.0, false);
    auto& [v, exact] = it->second;
    if (first || (report_it && !exact)) {
      std::size_t stopped = 0;
      v = confirmation().measure(path, nullptr, std::numeric_limits<std::size_t>::max(), report_it ? nullptr : &stopped);
      exact = stopped == 0;
    }
    if (report_it) report.accuracy_confirmed = v;
    if (budget.met_by(v)) return true;
    if (report_it)
      report.accuracy_note = fmt::format("met on the validation samples, missed on the {} calibration samples ({:.4f})",
                                         confirmer->samples(), v);
    return false;
  }
  /// How the graph of a path is stored (validators measure it so).
  profiler::Validator::StoreTransform store_transform() {
    return [this](const core::Graph& g, const core::RoutinePath& path) -> std::optional<core::Graph> {
      const auto in_qint8 = qint8_weight_ranges(g, path, *net.routines());
      if (in_qint8.empty()) return std::nullopt;
      core::Graph stored = g;
      as_stored(stored, in_qint8, bias_correction ? &calibration.channel_means : nullptr, stored_weights);
      return stored;
    };
  }
  static std::string path_key(const core::RoutinePath& path) {
    std::string k;
    for (const auto& r : path.routines) k += r.layer + '=' + r.descriptor + ' ' + params_text(r.params) + ';';
    return k;
  }
  /// A path as judged: its routines under the quantisation net.tuning holds.
  std::string judged_key(const core::RoutinePath& path) const {
    return fmt::format("{}#{}{}", path_key(path), quant_now.method, quant_now.bias ? "b" : "");
  }

  /// A quantisation as the profile cache keeps it (the range-method and
  /// path-quant records): 2 x the range method's own value (not an index:
  /// another tuning may try other methods) + bias correction.
  double quant_code(const PathQuant& q) const {
    return 2.0 * static_cast<int>(opt.calibration.methods[q.method]) + (q.bias ? 1 : 0);
  }
  /// A record's quantisation, where this tuning tries its range method (and can correct biases).
  std::optional<PathQuant> quant_of_code(std::optional<double> code) const {
    if (!code || !(*code >= 0 && *code < 64)) return std::nullopt;
    const int c = static_cast<int>(*code);
    const auto& methods = opt.calibration.methods;
    const auto it = std::find(methods.begin(), methods.end(), static_cast<RangeMethod>(c / 2));
    if (it == methods.end() || static_cast<std::size_t>(it - methods.begin()) >= calibration.quants.size()) return std::nullopt;
    return PathQuant{static_cast<std::size_t>(it - methods.begin()),
                     c % 2 == 1 && !opt.keep_float_weights && !calibration.channel_means.empty()};
  }

  /// Where the cache keeps the quantisation a tuning kept `path` with.
  std::string path_quant_key(const core::RoutinePath& path) const {
    const std::string k = path_key(path);
    return fmt::format("path-quant|{}|{:016x}", model_key(), core::xxh64(k.data(), k.size()));
  }
  void remember_path_quant(const core::RoutinePath& path) {
    if (calibration.quants.empty() || !profiler::uses_qint8(path)) return;
    prof.cache().put(path_quant_key(path), quant_code(quant_now), 0.0);
  }
  /// The quantisation an earlier tuning kept `path` with, where this tuning
  /// tries its range method; else the one held now.
  PathQuant path_quant(const core::RoutinePath& path) {
    if (calibration.quants.empty() || !profiler::uses_qint8(path)) return quant_now;
    return quant_of_code(prof.cache().find(path_quant_key(path))).value_or(quant_now);
  }
  /// Makes `q` the quantisation net.tuning holds (validators measure with it).
  void hold_quant(const PathQuant& q) {
    if (q == quant_now) return;
    net.tuning.blob_quant = calibration.quants[q.method];
    bias_correction = q.bias;
    quant_now = q;
    net.changed();
  }
  /// Whether `path` meets the budget on both sample sets under `q`; the
  /// quantisation held before is held again after.
  bool meets_budget_under(const core::RoutinePath& path, const PathQuant& q) {
    const PathQuant before = quant_now;
    hold_quant(q);
    const bool ok = accuracy_ok(path) && confirmed(path);
    hold_quant(before);
    return ok;
  }
  /// The tuning takes `q` for the path it keeps: the profiles' blobs (which
  /// the report names) and the range method the cache remembers follow.
  void adopt_quant(const PathQuant& q, std::vector<LayerProfile>& profiles) {
    if (q == quant_now) return;
    core::info("range method {}{} taken with the path an earlier tuning kept", to_string(opt.calibration.methods[q.method]),
               q.bias ? " with bias correction" : "");
    hold_quant(q);
    prof.requantise(profiles);
    report.range_method = to_string(opt.calibration.methods[q.method]);
    report.bias_correction = q.bias;
    prof.cache().put(range_method_key(), quant_code(q), 0.0);
  }
  std::string range_method_key() const {
    return fmt::format("range-method|{}|{}|{}", prof.key_prefix(), model_key(), profiler::calibration_key(net, opt.calibration));
  }

  /// Calibration gave one quantisation per range method: the path DPRS chose
  /// is validated under each (the budget's metric, then cosine to break ties)
  /// and the best is kept. The times measured do not depend on the scales.
  /// Where the metric ties, the method (and bias correction) an earlier tuning
  /// of this model with this calibration kept wins: every method read 1.0000
  /// on the recogniser's ctc budget, the cosine on each tuning's own path
  /// picked mse once and percentile the next, and another quantisation had
  /// the warm tuning measure all 195 layer sensitivities again (13 s).
  void choose_range_method(const core::RoutinePath& path) {
    const auto& quants = calibration.quants;
    if (quants.empty() || !profiler::uses_qint8(path)) return;
    profiler::Validator& v = validation();
    if (budget.metric != profiler::AccuracyBudget::Metric::none && !resolves_budget()) return;  // no qint8 path is kept
    const std::optional<PathQuant> remembered = quant_of_code(prof.cache().find(range_method_key()));
    // (profiler::better_range_method. The calibration samples count because
    // the final check asks them too: on the recogniser every method read
    // 1.0000 on 16 validation lines, and the cosine's pick missed ctc:0.95 on
    // the calibration lines where another method met them, so the budget's
    // search ran and kept a 1.2x slower path.)
    using Score = profiler::RangeMethodScore;
    const bool can_confirm = budget.metric != profiler::AccuracyBudget::Metric::none && !budget.score_set;
    // (On 64 of them at most: a tie-break, not the final check; ResNet50 calibrates on 300.)
    constexpr std::size_t kTieSamples = 64;
    // Whether `a` scores better than `b`; `hold_a` and `hold_b` make each one's
    // quantisation the net's, for the calibration samples' values where the validation ties.
    auto better = [&](Score& a, const std::function<void()>& hold_a, Score& b, const std::function<void()>& hold_b) {
      if (can_confirm && profiler::ties_on_validation(v, a.value, b.value)) {
        for (auto [sc, hold] : {std::pair{&a, &hold_a}, std::pair{&b, &hold_b}})
          if (std::isnan(sc->confirmed)) {
            (*hold)();
            sc->confirmed = confirmation().measure(path, nullptr, kTieSamples);
          }
      }
      return profiler::better_range_method(v, a, b);
    };
    std::vector<Score> scores(quants.size());
    std::size_t best = 0;
    for (std::size_t k = 0; k < quants.size(); ++k) {
      progress("range methods", static_cast<int>(k), static_cast<int>(quants.size()), to_string(opt.calibration.methods[k]));
      net.tuning.blob_quant = quants[k];
      Score& sc = scores[k];
      sc.value = quants.size() == 1 ? 0 : v.measure(path, &sc.cosine);
      sc.preferred = remembered && remembered->method == k;
      if (quants.size() > 1) report.range_methods.emplace_back(to_string(opt.calibration.methods[k]), sc.value);
      if (k > 0 && better(sc, [&] { net.tuning.blob_quant = quants[k]; }, scores[best],
                          [&, b = best] { net.tuning.blob_quant = quants[b]; }))
        best = k;
    }
    net.tuning.blob_quant = quants[best];
    net.changed();
    report.range_method = to_string(opt.calibration.methods[best]);
    Score kept = scores[best];
    // Bias correction, under the method kept: measured, not assumed.
    if (!opt.keep_float_weights && !calibration.channel_means.empty()) {
      if (quants.size() == 1) kept.value = v.measure(path, &kept.cosine);
      progress("range methods", static_cast<int>(quants.size()), static_cast<int>(quants.size()), "bias correction");
      const bool same_method = remembered && remembered->method == best;
      kept.preferred = same_method && !remembered->bias;
      Score corrected;
      corrected.preferred = same_method && remembered->bias;
      bias_correction = true;
      corrected.value = v.measure(path, &corrected.cosine);
      report.bias_corrected_accuracy = corrected.value;
      bias_correction = better(corrected, [&] { bias_correction = true; }, kept, [&] { bias_correction = false; });
      if (bias_correction) kept = corrected;
    }
    const double best_value = kept.value;
    report.bias_correction = bias_correction;
    quant_now = {best, bias_correction};
    prof.cache().put(range_method_key(), quant_code(quant_now), 0.0);
    accuracy_seen[judged_key(path)] = best_value;
    if (!std::isnan(kept.confirmed) && confirmation().samples() <= kTieSamples)
      confirmation_seen[judged_key(path)] = {kept.confirmed, true};
    core::info("range method {}{} kept: the chosen path measured {:.4f}{}", report.range_method,
               bias_correction ? " with bias correction" : "", best_value,
               remembered ? " (an earlier tuning's choice wins a tie)" : "");
  }

  /// A layer's candidates in a reduced dtype where float32 is as fast there
  /// whatever its neighbours take (dprs::dominated: its own time and the most
  /// its adapts could cost beyond theirs): no path under the budget is faster
  /// for them, so they leave the search's profiles and their sensitivity is
  /// not measured. (Every bfloat16 convolution of ResNet50 on a Xeon without
  /// AMX ran 1.4-4.5x slower than float32: 42-48 of its 146 sensitivities,
  /// each 16 runs of the net from the layer on.)
  void drop_dominated(std::vector<LayerProfile>& profiles) {
    const profiler::Plan plan = profiler::build_plan(net, profiles, prof, true, step_ms);
    std::vector<std::set<DType>> drop(profiles.size());
    for (std::size_t i = 0; i < profiles.size(); ++i) {
      const int node = plan.node_of[i];
      if (node < 0) continue;
      std::map<DType, std::vector<int>> by_dtype;  // schemas by the precision of the candidate pricing them
      for (std::size_t s = 0; s < plan.schemas.size(); ++s)
        if (const Measured* m = profiles[i].best_in(plan.schemas[s], true)) by_dtype[m->cand.precision()].push_back(static_cast<int>(s));
      const auto f32 = by_dtype.find(DType::float32);
      if (f32 == by_dtype.end()) continue;
      for (const auto& [dtype, schemas] : by_dtype)
        if (profiler::below_float32(dtype) && dprs::dominated(plan.graph, node, schemas, f32->second)) drop[i].insert(dtype);
    }
    for (std::size_t i = 0; i < profiles.size(); ++i) {
      if (drop[i].empty()) continue;
      for (DType d : drop[i])
        core::debug("accuracy budget: '{}' in {} is never faster than in float32: no sensitivity measured",
                    profiles[i].layer->name, to_string(d));
      sensitivities_dominated += static_cast<int>(drop[i].size());
      std::erase_if(profiles[i].measured, [&](const Measured& m) { return drop[i].count(m.cand.precision()) > 0; });
    }
    drop_broken_pairs(profiles);
  }

  /// Fused pairs whose two candidates are no longer both in `profiles`.
  static void drop_broken_pairs(std::vector<LayerProfile>& profiles) {
    for (std::size_t i = 0; i < profiles.size(); ++i)
      std::erase_if(profiles[i].fused_with_previous, [&](const profiler::FusedPair& f) {
        return !profiles[i].find(f.descriptor, f.params) ||
               (i > 0 && !profiles[i - 1].find(f.previous_descriptor, f.previous_params));
      });
  }

  /// Under an accuracy budget the path DPRS chose may miss it: then each layer's
  /// sensitivity in each dtype below float32 (the metric's loss with that layer
  /// alone in it) prices its schemas of that dtype, and the budget search
  /// (dprs::solve_under_budget) finds the fastest path whose validated accuracy meets the budget.
  /// Unchanged where it already does; where no path passes, final_check falls
  /// back to float32.
  profiler::PlannedPath meet_budget(std::vector<LayerProfile>& all, profiler::PlannedPath planned) {
    // On both sample sets, as final_check judges it: a path that met it on the
    // validation samples and missed on the calibration samples had final_check
    // fall back to float32 and bfloat16 alone (4.0 ms) where the search finds
    // a mixed path meeting both (3.1 ms, the recogniser).
    // (A stage of its own in the report: validating the path on both sets ran
    // 400 whole-net runs of ResNet50, reported as calibration before.)
    if (budget.metric != profiler::AccuracyBudget::Metric::none && runs_below_float32(planned))
      progress("accuracy budget", 0, 1, "validating the path");
    if ((accuracy_ok(planned.path) && confirmed(planned.path)) || !resolves_budget()) return planned;
    const profiler::Validator& v = validation();
    // DPRS prices a layer in a schema by its fastest candidate there: a float32
    // schema whose fastest multiplies in int8 (cpu/dynamic_int8) would carry
    // that error and hide the exact routines from the search. So the search
    // sees, in a schema with candidates of its own dtype, only those.
    std::vector<LayerProfile> profiles = all;
    for (auto& p : profiles) {
      std::set<std::string> exact_schemas;
      for (const auto& m : p.measured)
        if (m.cand.precision() == m.cand.schema.dtype) exact_schemas.insert(m.cand.schema.to_string());
      std::erase_if(p.measured, [&](const Measured& m) {
        return m.cand.precision() != m.cand.schema.dtype && exact_schemas.count(m.cand.schema.to_string());
      });
    }
    drop_dominated(profiles);
    const std::vector<const Measured*> picks = planned.picks;  // into `all`, kept where nothing better is found
    for (std::size_t i = 0; i < planned.picks.size() && i < profiles.size(); ++i)
      planned.picks[i] = same_in(profiles[i], planned.picks[i]);
    std::vector<std::map<DType, double>> error(profiles.size());
    for (std::size_t i = 0; i < profiles.size(); ++i) {
      std::map<DType, const Measured*> reduced;  // the pick where it is in that dtype, else the first measured
      if (planned.picks[i] && profiler::below_float32(planned.picks[i]->cand.precision()))
        reduced[planned.picks[i]->cand.precision()] = planned.picks[i];
      for (const auto& m : profiles[i].measured)
        if (profiler::below_float32(m.cand.precision())) reduced.emplace(m.cand.precision(), &m);
      for (const auto& [dtype, q] : reduced) {
        progress("accuracy budget", static_cast<int>(i), static_cast<int>(profiles.size()), profiles[i].layer->name);
        core::RoutinePath alone;
        alone.routines.push_back({profiles[i].layer->name, q->cand.descriptor, q->params, 0, 0, q->children});
        // An argmax budget moves in steps of one sample (seq:0.95 on 24 lines:
        // 0.042): most layers alone lose nothing, and the search could not tell
        // the one bfloat16 layer that flips a line from the harmless ones. The
        // outputs' cosine loss, far below one step, ranks them.
        // On a few samples: ranks the layers for the search, whose paths are
        // then validated on every sample (ResNet50's 73 layers by 2 dtypes on
        // 100 samples took 420 s of a 590 s tuning).
        const std::string key = sensitivity_key(alone.routines[0], *profiles[i].layer);
        if (auto hit = key.empty() ? std::nullopt : prof.cache().find(key)) {
          error[i][dtype] = *hit;
          ++sensitivities_cached;
        } else {
          double cosine = 1;
          const auto first = static_cast<std::size_t>(profiles[i].layer - net.graph.layers.data());
          const double value = v.measure_from(first, alone, &cosine, kSensitivitySamples);
          error[i][dtype] = std::max(0.0, v.error(value)) + (budget.counts_argmax() ? std::max(0.0, 1.0 - cosine) : 0.0);
          if (!key.empty()) prof.cache().put(key, error[i][dtype], 0.0);
          ++sensitivities_measured;
        }
        double& s = sensitivity[profiles[i].layer->name];
        s = std::max(s, error[i][dtype]);
      }
    }
    core::info("accuracy budget {}: {} layer sensitivities measured, {} from the profile cache, {} not needed (float32 as "
               "fast)", budget.text, sensitivities_measured, sensitivities_cached, sensitivities_dominated);
    // The search over every dtype allowed, then within float32 and each reduced
    // dtype alone: a mixed path can meet the budget on the validation samples by
    // luck and miss it on the calibration samples, where float32 and bfloat16
    // alone meet both (final_check measures these beside it).
    std::set<DType> reduced_dtypes;
    for (const auto& e : error)
      for (const auto& [dtype, value] : e) reduced_dtypes.insert(dtype);
    std::optional<profiler::PlannedPath> out;
    budget_paths.clear();
    // The cost graph's total of the fastest path found so far: a later search
    // validates only paths faster than it (each validation is hundreds of runs).
    double fastest = dprs::kInfinity;
    for (std::optional<DType> only : all_then_each(reduced_dtypes)) {
      std::vector<LayerProfile> subset = profiles;
      if (only)
        for (auto& p : subset)
          std::erase_if(p.measured, [&](const Measured& m) {
            return profiler::below_float32(m.cand.precision()) && m.cand.precision() != *only;
          });
      std::optional<profiler::PlannedPath> found = search_under_budget(subset, error, fastest);
      if (!found) continue;
      for (std::size_t i = 0; i < found->picks.size() && i < all.size(); ++i) found->picks[i] = same_in(all[i], found->picks[i]);
      if (!out) {
        out = std::move(found);
      } else {
        // (Its picks kept, as the first's: where it is taken, the report reads its fused pairs by them.)
        budget_paths.push_back({fmt::format("float32+{} under the budget", to_string(*only)), std::move(*found)});
      }
    }
    core::info("accuracy budget {}: {} of {} validated paths met it", budget.text,
               std::count_if(accuracy_seen.begin(), accuracy_seen.end(), [&](const auto& kv) { return validation().budget().met_by(kv.second); }),
               accuracy_seen.size());
    if (!out) {
      planned.picks = picks;
      return planned;
    }
    return std::move(*out);
  }

  /// The profile cache's key of a layer's sensitivity with `alone` its one
  /// routine below float32: beside the layer and routine, what the value
  /// depends on (the model and its calibration, the budget, the samples it is
  /// measured on, the library; for a qint8 routine, its blobs' quantisation
  /// and bias correction: the other layers run in float32, and a bfloat16
  /// routine's loss depends on no scale, so another calibration or range
  /// method no longer has it measured again).
  /// Empty for a metric of the user's (a function: not a key). A stale value
  /// only ranks the layers for the search; each path it finds is validated.
  std::string sensitivity_key(const core::RoutineChoice& alone, const Layer& layer) {
    if (budget.metric == profiler::AccuracyBudget::Metric::user) return {};
    if (sensitivity_base.empty()) {
      // The model's layers and weights (calibration_key without samples or options).
      std::string s = fmt::format("{}|{}|{}|", prof.key_prefix(), profiler::calibration_key(net, CalibrationOptions{}),
                                  validation().budget().text);
      const auto& samples = validation().sample_inputs();
      for (std::size_t k = 0; k < samples.size() && k < kSensitivitySamples; ++k)
        for (const auto& in : samples[k])
          s += fmt::format("x {} {} {:016x}|", in.name, in.blob.shape().to_string(),
                           in.blob.data() ? core::xxh64(in.blob.data(), in.blob.byte_size()) : 0);
      sensitivity_base = fmt::format("{:016x}{:016x}", core::xxh64(s.data(), s.size()),
                                     core::xxh64(s.data(), s.size(), 0x9e3779b9));
    }
    std::string quant;
    if (alone.descriptor.find(":qint8") != std::string::npos) {
      std::vector<QuantParams> ins, outs;
      for (const auto& b : layer.inputs)
        if (auto it = net.tuning.blob_quant.find(b); it != net.tuning.blob_quant.end()) ins.push_back(it->second);
      for (const auto& b : layer.outputs)
        if (auto it = net.tuning.blob_quant.find(b); it != net.tuning.blob_quant.end()) outs.push_back(it->second);
      quant = fmt::format("|{}|{}", profiler::quant_digest(ins, outs), bias_correction ? "bias-corrected" : "as calibrated");
    }
    return fmt::format("sensitivity|{}|{}|{}|{}{}", sensitivity_base, alone.layer, alone.descriptor, params_text(alone.params),
                       quant);
  }

  /// Every dtype together (nullopt), then each one alone where there are several.
  static std::vector<std::optional<DType>> all_then_each(const std::set<DType>& dtypes) {
    std::vector<std::optional<DType>> out{std::nullopt};
    if (dtypes.size() > 1)
      for (DType d : dtypes) out.push_back(d);
    return out;
  }

  /// The budget search over `profiles` with each layer's `error` in each
  /// reduced dtype: the fastest path whose validated accuracy meets the budget.
  /// Only paths faster than `fastest` (a cost-graph total) are validated; a
  /// path found lowers it.
  std::optional<profiler::PlannedPath> search_under_budget(const std::vector<LayerProfile>& profiles,
                                                           const std::vector<std::map<DType, double>>& error,
                                                           double& fastest) {
    profiler::Plan plan = profiler::build_plan(net, profiles, prof, true, step_ms);
    std::vector<std::vector<double>> node_error(plan.graph.node_cost.size(),
                                                std::vector<double>(static_cast<std::size_t>(plan.graph.num_schemas), 0));
    // A node's error in a schema is that of the candidate DPRS prices it by
    // there, whose precision may be below the schema's (cpu/dynamic_int8).
    for (std::size_t i = 0; i < profiles.size(); ++i)
      for (std::size_t s = 0; s < plan.schemas.size(); ++s) {
        const Measured* m = profiles[i].best_in(plan.schemas[s], true);
        if (!m) continue;
        if (auto e = error[i].find(m->cand.precision()); e != error[i].end())
          node_error[static_cast<std::size_t>(plan.node_of[i])][s] = e->second;
      }
    int checks = 0;
    auto path_of = [&](const dprs::Solution& candidate) {
      return profiler::read_path(plan, candidate, profiles, true, report.device_fingerprint).path;
    };
    double checking_s = 0;
    auto timed = [&checking_s](const char* what, const dprs::Solution& candidate, auto&& check) {
      const auto start = std::chrono::steady_clock::now();
      const bool ok = check();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      checking_s += s;
      core::debug("accuracy budget: a path of {:.3f} ms (cost graph) {} {} ({:.1f} s)", candidate.total,
                  ok ? "met it on the" : "missed it on the", what, s);
      return ok;
    };
    const auto search_start = std::chrono::steady_clock::now();
    // On both sample sets at once: where the validation samples are few, a
    // path meeting the budget on them often misses it on the calibration
    // samples (ResNet50's seeded weights, 100 and 300: confirming only the
    // search's answer then took 27-30 validations and 5-11 confirmations, where
    // checking both took 21).
    dprs::Solution sol = dprs::solve_under_budget(
        plan.graph, node_error,
        [&](const dprs::Solution& candidate) {
          progress("accuracy budget", ++checks, 10, "validating a path");
          const core::RoutinePath path = path_of(candidate);
          return timed("validation samples", candidate, [&] { return accuracy_ok(path); }) &&
                 timed("calibration samples", candidate, [&] { return confirmed(path); });
        },
        {.max_checks = 10, .faster_than = fastest, .resolution = kBudgetResolution});
    core::debug("accuracy budget: the search's DPRS solves took {:.2f} s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - search_start).count() - checking_s);
    if (!sol.feasible) return std::nullopt;
    fastest = std::min(fastest, sol.total);
    return profiler::read_path(plan, sol, profiles, true, report.device_fingerprint);
  }

  /// The entry of `p` measuring what `m` measured (the same routine and
  /// parameters), or nullptr: picks move between copies of the profiles.
  static const Measured* same_in(const LayerProfile& p, const Measured* m) {
    return m ? p.find(m->cand.descriptor, m->params) : nullptr;
  }

  /// What the paths of earlier tunings are kept under in the profile cache:
  /// the model's structure and input shapes, with the cache's key prefix
  /// (device, threads, OpenMP wait, version). Not the schemas or budget: a
  /// path another tuning of the model kept is a contender wherever this
  /// tuning's rules allow each of its routines and its accuracy holds.
  std::string model_key() const {
    std::string s = prof.key_prefix();
    for (const auto& in : net.graph.inputs) s += fmt::format("|in {} {}", in.name, net.shapes.at(in.name).to_string());
    for (const auto& l : net.graph.layers)
      s += fmt::format("|{} {} ({}) ({})", l.name, l.type, fmt::join(l.inputs, ","), fmt::join(l.outputs, ","));
    for (const auto& o : net.graph.outputs) s += "|out " + o;
    return fmt::format("{:016x}", core::xxh64(s.data(), s.size()));
  }

  /// The cache's paths of earlier tunings of this model that this tuning's
  /// rules allow: each layer's routine one this tuning measured (so allowed,
  /// and supported here), with its parameters; each once, and not the tuned path.
  std::vector<std::pair<std::string, profiler::PlannedPath>> earlier_paths(const std::vector<LayerProfile>& profiles,
                                                                           const core::RoutinePath& tuned) {
    std::vector<std::pair<std::string, profiler::PlannedPath>> out;
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < profiles.size(); ++i) index[profiles[i].layer->name] = i;
    for (auto& path : prof.cache().earlier_paths(model_key())) {
      profiler::PlannedPath p;
      p.picks.assign(profiles.size(), nullptr);
      bool ok = path.routines.size() == profiles.size();
      for (const auto& r : path.routines) {
        auto it = index.find(r.layer);
        if (!ok || it == index.end() || p.picks[it->second]) {
          ok = false;
          break;
        }
        for (const auto& m : profiles[it->second].measured)
          if (m.cand.descriptor == r.descriptor && m.params == r.params && std::isfinite(m.unit_ms)) p.picks[it->second] = &m;
        ok = p.picks[it->second] != nullptr;
      }
      // (The tuned path itself where the earlier tuning kept it under another
      // quantisation: it may meet the budget under that one only.)
      const bool known = (path_key(tuned) == path_key(path) && path_quant(path) == quant_now) ||
                         std::any_of(out.begin(), out.end(), [&](const auto& q) { return path_key(q.second.path) == path_key(path); });
      if (!ok || known) continue;
      path.device_fingerprint = report.device_fingerprint;
      p.path = std::move(path);
      out.push_back({"earlier tuning's", std::move(p)});
    }
    return out;
  }

  /// Measures the tuned path against the untuned default (and, in a hybrid
  /// tuning, the best single-dtype paths, and the paths earlier tunings of
  /// this model kept) in fresh executors, interleaved, as `softneuro run`
  /// prepares them; never hands back a path slower than the default.
  /// The paths measured whole beside the tuned one in the final runs: the
  /// single-dtype ones, those the budget's search found, then those earlier
  /// tunings kept; measured[0] is the tuned path's, measured[1] the default's,
  /// measured[2 + k] alternatives[k]'s.
  struct Finalists {
    std::vector<std::pair<std::string, profiler::PlannedPath>> alternatives;
    std::vector<PathQuant> quants;  ///< each alternative's: an earlier tuning's path is judged under the one it kept
    std::size_t singles = 0;  ///< alternatives before this are not earlier tunings'
    std::vector<profiler::InContext> measured;
    double others = 0;  ///< other processes' CPUs busy during the runs (profiler::others_cpus)
  };
  Finalists measure_finalists(const std::vector<LayerProfile>& profiles, const profiler::PlannedPath& planned,
                              const DefaultPath& fallback) {
    Finalists f;
    // In-context costs measured around a mixed path can hide that a
    // single-dtype path runs faster as a whole: those are measured beside it.
    f.alternatives = dtype_restricted_paths(profiles);
    for (auto& b : budget_paths)
      if (path_key(b.second.path) != path_key(planned.path) &&
          std::none_of(f.alternatives.begin(), f.alternatives.end(),
                       [&](const auto& a) { return path_key(a.second.path) == path_key(b.second.path); }))
        f.alternatives.push_back(std::move(b));
    progress("final measurement", 0, 1, "");
    std::vector<core::RoutinePath> to_measure{planned.path, core::RoutinePath{}};
    for (const auto& alt : f.alternatives) to_measure.push_back(alt.second.path);
    // Cached times a spot check cannot catch (a fast candidate's time recorded
    // too high) lead DPRS to a slower path; the paths earlier tunings kept,
    // the cold one's among them, are measured beside it whole.
    // (One the untuned default runs is measured as the default.)
    auto earlier = earlier_paths(profiles, planned.path);
    report.earlier_paths = static_cast<int>(earlier.size());
    f.singles = f.alternatives.size();
    bool earlier_is_default = false;
    for (auto& e : earlier) {
      if (path_key(e.second.path) == path_key(fallback.path)) {
        earlier_is_default = true;
        continue;
      }
      to_measure.push_back(e.second.path);
      f.alternatives.push_back(std::move(e));
    }
    f.quants.assign(f.alternatives.size(), quant_now);
    for (std::size_t k = f.singles; k < f.alternatives.size(); ++k) f.quants[k] = path_quant(f.alternatives[k].second.path);
    // Each round runs a path for about 25 ms (5 to 100 runs), so that a small
    // net's comparison is not decided by a handful of runs.
    const int final_runs = std::clamp(static_cast<int>(25.0 / std::max(0.01, report.predicted_ms)),
                                      std::max(5, opt.integrated_runs), 100);
    const profiler::CpuClock final_start = profiler::cpu_clock();
    f.measured = prof.run_interleaved(to_measure, final_runs, 5);
    f.others = profiler::others_cpus(final_start, profiler::cpu_clock());
    if (earlier_is_default) report.earlier_ms = f.measured[1].total_ms;
    return f;
  }

  /// `planned` becomes a finalist that measured 3% faster and meets the budget.
  void take_faster(Finalists& f, std::vector<LayerProfile>& profiles, profiler::PlannedPath& planned) {
    for (std::size_t k = 0; k < f.alternatives.size(); ++k) {
      const auto& m = f.measured[2 + k];
      const bool earlier_one = k >= f.singles;
      core::debug("final measurement: the {} path {:.3f} ms, the tuned path {:.3f} ms", f.alternatives[k].first,
                  m.total_ms, f.measured[0].total_ms);
      if (earlier_one && (report.earlier_ms == 0 || m.total_ms < report.earlier_ms)) report.earlier_ms = m.total_ms;
      // The tuned routines under an earlier tuning's quantisation run as fast:
      // only the budget (meet_budget_finally) may prefer them.
      if (path_key(f.alternatives[k].second.path) == path_key(planned.path)) continue;
      if (m.total_ms < f.measured[0].total_ms * 0.97 && meets_budget_under(f.alternatives[k].second.path, f.quants[k])) {
        core::info("the {} path measured {:.3f} ms, the tuned path {:.3f} ms: taking the {} path", f.alternatives[k].first,
                   m.total_ms, f.measured[0].total_ms, f.alternatives[k].first);
        adopt_quant(f.quants[k], profiles);
        planned = f.alternatives[k].second;
        f.measured[0] = m;
        // An earlier tuning's prediction is not this one's: its steps' times here.
        report.predicted_ms = earlier_one ? in_run_prediction(m) : planned.predicted_ms;
        report.earlier_taken = earlier_one;
        report_path(planned, profiles);
      }
    }
  }

  /// The accuracy budget: a path that misses it gives way to the fastest
  /// finalist that meets it (float32 throughout, or float32 and one reduced
  /// dtype, or an earlier tuning's, validated here like the tuned one); else
  /// the untuned default is kept (returns true) where the rules allow it, and
  /// tuning fails where they do not.
  bool meet_budget_finally(Finalists& f, std::vector<LayerProfile>& profiles, profiler::PlannedPath& planned,
                           const DefaultPath& fallback) {
    report.accuracy = accuracy_of(planned.path, true);
    if (std::isnan(report.accuracy)) report.accuracy = -1;
    report.accuracy_missed = !accuracy_ok(planned.path) || !confirmed(planned.path, true);
    if (!report.accuracy_missed) return false;
    const std::string why = report.accuracy_note.empty() ? "" : "; " + report.accuracy_note;
    int best = -1;
    for (std::size_t k = 0; k < f.alternatives.size(); ++k) {
      if (best >= 0 && f.measured[2 + k].total_ms >= f.measured[2 + best].total_ms) continue;
      const core::RoutinePath& alt = f.alternatives[k].second.path;
      const bool ok = meets_budget_under(alt, f.quants[k]);
      core::debug("the {} path ({:.3f} ms) {} the accuracy budget", f.alternatives[k].first, f.measured[2 + k].total_ms,
                  ok ? "meets" : "misses");
      if (ok) best = static_cast<int>(k);
    }
    const bool alt_faster = best >= 0 && f.measured[2 + best].total_ms < f.measured[1].total_ms;
    if (best >= 0 && (alt_faster || !fallback.allowed)) {
      const auto& alt = f.alternatives[static_cast<std::size_t>(best)];
      const auto& m = f.measured[2 + best];
      core::warn("the tuned path misses the accuracy budget {} ({:.4f}{}): taking the {} path ({:.3f} ms)", budget.text,
                 report.accuracy, why, alt.first, m.total_ms);
      adopt_quant(f.quants[static_cast<std::size_t>(best)], profiles);
      planned = alt.second;
      f.measured[0] = m;
      report.earlier_taken = static_cast<std::size_t>(best) >= f.singles;
      report.predicted_ms = report.earlier_taken ? in_run_prediction(m) : planned.predicted_ms;
      report_path(planned, profiles);
      if (core::computes_below_float32(planned.path, model_int8, *net.routines())) {
        // It meets the budget: the report and the file carry its values.
        report.accuracy_note = fmt::format("the mixed path missed it ({:.4f}{}); the {} path meets it", report.accuracy,
                                           why, alt.first);
        report.accuracy = accuracy_of(planned.path, true);
        confirmed(planned.path, true);
        report.accuracy_missed = false;
      }
      return false;
    }
    if (fallback.allowed) {
      core::warn("the tuned path misses the accuracy budget {} ({:.4f}{}): keeping the untuned default's routines "
                 "(float32, but for the layers a quantised model's author put in int8)",
                 budget.text, report.accuracy, why);
      return true;
    }
    throw Error(fmt::format("the tuned path misses the accuracy budget {} (measured {:.4f}{}) and the schemas allowed "
                            "leave no float32 path to keep instead; allow cpu:float32:* or loosen the budget",
                            budget.text, report.accuracy, why),
                net.file, {}, "accuracy");
  }

  /// The untuned default's routines kept, its times from the final runs
  /// (`default_run`) in the report and the path.
  core::RoutinePath keep_default(const DefaultPath& fallback, const profiler::InContext& default_run) {
    auto text_of = [](const std::map<std::string, std::string>& m, const std::string& layer) {
      auto it = m.find(layer);
      return it == m.end() ? std::string() : it->second;
    };
    report.kept_default = true;
    report.earlier_taken = false;
    core::RoutinePath path = fallback.path;
    for (auto& rc : path.routines)
      if (auto it = default_run.per_step.find(rc.layer); it != default_run.per_step.end())
        rc.predicted_ms = rc.measured_ms = it->second;
    // Its in-context cost, as DPRS sums a tuned path's: each step's time in the
    // final runs (the median of those no other process preempted, else the
    // fastest: under load the whole-net median counts stalls) and the gaps
    // between steps.
    report.measured_ms = default_run.total_ms;
    report.predicted_ms = in_run_prediction(default_run);
    report.layers.clear();
    report.adapts.clear();
    for (const auto& r : path.routines)
      report.layers.push_back({r.layer, net.graph.find_layer(r.layer)->type, r.descriptor, params_text(r.params),
                               r.predicted_ms, r.measured_ms, 1, -1.0, text_of(fallback.quant, r.layer),
                               text_of(fallback.fused_into, r.layer)});
    // And its adapts, with their times in those runs (a kept default's were
    // left out: the report named none of the conversions a session then ran).
    for (const auto& a : path.adapts) {
      auto it = default_run.per_step.find(core::adapt_step_name(a.blob, a.consumer, Schema::parse(a.to_schema)));
      report.adapts.push_back({a.blob, a.consumer, a.from_schema, a.to_schema, adapt_text(a),
                               it == default_run.per_step.end() ? 0.0 : it->second});
    }
    return path;
  }

  void final_check(std::vector<LayerProfile>& profiles, profiler::PlannedPath planned) {
    DefaultPath fallback = default_path();
    const auto quant_measured = net.tuning.blob_quant;
    Finalists f = measure_finalists(profiles, planned, fallback);
    take_faster(f, profiles, planned);
    const bool force_default = meet_budget_finally(f, profiles, planned, fallback);
    // A finalist's quantisation taken (adopt_quant): a kept default reports the
    // blobs' scales a session of the file runs with, not those it was measured with.
    if (net.tuning.blob_quant != quant_measured) fallback.quant = default_path().quant;
    core::RoutinePath path = planned.path;
    const double tuned_ms = f.measured[0].total_ms, default_ms = f.measured[1].total_ms;
    for (auto& rc : path.routines)
      if (auto it = f.measured[0].per_step.find(rc.layer); it != f.measured[0].per_step.end()) rc.measured_ms = it->second;
    for (auto& l : report.layers)
      if (auto it = f.measured[0].per_step.find(l.layer); it != f.measured[0].per_step.end() && l.integrated_ms == 0)
        l.integrated_ms = it->second;
    report.measured_ms = tuned_ms;
    // (Only when the default itself obeys the user's schemas, pins and bans.)
    if (fallback.allowed) report.default_ms = default_ms;
    // A tuned path is kept only where it measured faster than the default,
    // with the machine otherwise quiet: where other processes kept every core
    // busy, a team of spinning threads waited whole time slices for each
    // other, and a path that won there ran 1.4x slower than the default on the
    // quiet machine. (Machine-wide CPU time, not per-run signals: involuntary
    // switches and the team's CPU time flagged 94% of the runs on a quiet
    // 2-core Xeon VM, our own threads preempting each other.)
    const bool disturbed = f.others >= 0.5;
    if (fallback.allowed && (force_default || default_ms <= tuned_ms || disturbed)) {
      if (force_default) {
        // (said in meet_budget_finally; the report keeps the value the tuned path missed by)
      } else if (default_ms <= tuned_ms) {
        core::warn("the tuned path measured {:.3f} ms, the untuned default {:.3f} ms: keeping the default's routines",
                   tuned_ms, default_ms);
      } else {
        core::warn("other processes kept {:.1f} CPUs busy during the final runs: the tuned path ({:.3f} ms against the "
                   "default's {:.3f}) cannot be trusted to be faster on a quiet machine; keeping the default's routines "
                   "(tune again when the machine is quiet)",
                   f.others, tuned_ms, default_ms);
      }
      if (!force_default) report.accuracy = -1;  // the default runs nothing in qint8: no value of its own
      path = keep_default(fallback, f.measured[1]);
    }
    if (!report.kept_default) path = agreeing_with_default(std::move(path), fallback, f.measured[1]);
    path.openmp_wait = report.openmp_wait;
    path.accuracy = accuracy_check(path);
    net.tuning.routine_path = path;
    net.changed();
    prof.cache().put_path(model_key(), path);
    remember_path_quant(path);
    prof.save_cache();
  }

  /// `path`, where it computes what the float32 default does (float32 paths of a
  /// model without int8 layers of its own); else the default's routines, with a
  /// warning. A float32 path that disagrees holds a routine that computes wrongly
  /// on this CPU (oneDNN 2.6's 1x1 + depthwise pair in channels
  /// last at AVX2 put a tuned MobileNetV2 37% off).
  core::RoutinePath agreeing_with_default(core::RoutinePath path, const DefaultPath& fallback,
                                          const profiler::InContext& default_run) {
    if (!model_int8.empty() || core::computes_below_float32(path, model_int8, *net.routines())) return path;
    const auto samples = opt.calibration.inputs.empty() ? profiler::synthetic_inputs(net, 1)
                                                        : std::vector<std::vector<NamedBlob>>{opt.calibration.inputs.front()};
    const double d = profiler::disagreement_with_default(net, path, samples);
    if (d <= kFloat32Agreement) return path;
    core::warn("the tuned path's outputs differ from the untuned default's by {:.3g} of their largest value (float32 "
               "paths agree far within {:g}): a routine computes wrongly on this CPU; {}",
               d, kFloat32Agreement,
               fallback.allowed ? "keeping the default's routines" : "the schemas, pins and bans given leave no default to keep");
    return fallback.allowed ? keep_default(fallback, default_run) : path;
  }
  /// Float32 paths agree to ~1e-6 of the largest output on most nets; where a net
  /// squashes its outputs near zero (PP-OCRv4's detector on noise: a largest
  /// probability of 2e-5) its relative spread reaches ~7e-3. A wrong routine was 0.37 off.
  static constexpr double kFloat32Agreement = 2e-2;

  /// What the file records of how `path`'s accuracy was checked.
  AccuracyCheck accuracy_check(const core::RoutinePath& path) const {
    AccuracyCheck c;
    c.recorded = true;
    c.reduced_precision = core::computes_below_float32(path, model_int8, *net.routines());
    c.budget = budget.text;
    if (c.reduced_precision && !report.accuracy_missed && report.accuracy >= 0) {
      c.measured = report.accuracy;
      c.samples = report.validation_synthetic ? 0 : report.validation_samples;
    }
    return c;
  }

  TuneReport finish() {
    report.measurements = prof.measurements();
    report.cache_hits = prof.cache_hits();
    report.cache_remeasured = prof.cache_remeasured();
    report.sensitivities_cached = sensitivities_cached;
    report.sensitivities_measured = sensitivities_measured;
    report.sensitivities_dominated = sensitivities_dominated;
    report.cache_drift = prof.cache_drift();
    report.tuning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.others_cpus = profiler::others_cpus(cpu_at_start, profiler::cpu_clock());
    if (report.others_cpus >= 0.5)
      core::warn("other processes kept {:.1f} of {} CPUs busy while tuning: the times measured may not hold on a quiet "
                 "machine; tune again when it is quiet",
                 report.others_cpus, std::thread::hardware_concurrency());
    if (report.reduced_refused)
      core::warn("nothing below float32 chosen: no samples of your own to check the accuracy budget {} on; give "
                 "samples (--calibration DIR, Python calibration=) or allow it unchecked (--accuracy none)",
                 budget.text);
    progress("done", 1, 1, "");
    report.stage_s.pop_back();  // "done" itself
    return report;
  }
};

/// The weights of conv2 and dense layers whose routine runs in qint8 on every
/// tuned path move onto the int8 grid that routine computes with (every qint8
/// routine quantises weights by core::quantize_per_channel), so the .dnn stores
/// them as int8 and the path computes what it computed while tuned; with
/// `means`, their biases are corrected as the path was validated.
void store_int8_weights(detail::WorkingModel& net, TuneReport& report, const std::map<std::string, std::vector<double>>* means) {
  std::vector<const core::RoutinePath*> paths{&net.tuning.routine_path};
  for (const auto& p : net.tuning.shape_paths) paths.push_back(&p);
  // Layers in qint8 on every path, with one weight range on all of them.
  const std::shared_ptr<const core::RoutineRegistry> routines = net.routines();
  std::map<std::string, int> in_qint8 = qint8_weight_ranges(net.graph, *paths[0], *routines);
  for (std::size_t k = 1; k < paths.size(); ++k) {
    const auto other = qint8_weight_ranges(net.graph, *paths[k], *routines);
    for (auto it = in_qint8.begin(); it != in_qint8.end();) {
      const auto o = other.find(it->first);
      it = o == other.end() || o->second != it->second ? in_qint8.erase(it) : std::next(it);
    }
  }
  StoredWeights made;
  const auto moved = as_stored(net.graph, in_qint8, means, made);
  report.int8_weight_layers = static_cast<int>(moved.size());
  report.int8_weight_float_bytes = 0;
  for (const auto& [layer, bytes] : moved) report.int8_weight_float_bytes += bytes;
  if (!moved.empty()) net.changed();
}

/// Tunes `net` in place (the body of tune()).
TuneReport tune_in_place(detail::WorkingModel& net, const TuneOptions& options) {
  if (options.shapes.empty() && !core::has_shape_math(net.graph)) {
    Tuner tuner(net, options);
    TuneReport report = tuner.run();
    if (!options.keep_float_weights)
      store_int8_weights(net, report, tuner.bias_correction ? &tuner.calibration.channel_means : nullptr);
    return report;
  }
  // Tuned at given shapes (or, where shape_math layers compute values from the
  // shapes, at the default ones): on the net as it is planned there, whose
  // layers keep their names, so the routine path applies to this net.
  // One routine path per shape bucket: the net tuned as if its default shapes were the bucket's.
  TuneOptions each = options;
  each.shapes.clear();
  TuneReport first;
  std::vector<core::RoutinePath> paths;
  bool correct_bias = true;
  std::map<std::string, std::vector<double>> means;
  std::vector<std::map<std::string, Shape>> buckets = options.shapes;
  if (buckets.empty()) buckets.emplace_back();  // the default shapes
  for (const auto& bucket : buckets) {
    core::Graph g = net.graph;
    for (const auto& [name, shape] : bucket) {
      auto in = std::find_if(g.inputs.begin(), g.inputs.end(), [&name = name](const TensorInfo& t) { return t.name == name; });
      if (in == g.inputs.end()) throw Error(fmt::format("the model has no input named '{}'", name), net.file, {}, "shapes");
      try {
        core::check_input_shape(*in, shape);
      } catch (const Error& e) {
        throw Error(e.message(), net.file, {}, "shapes");
      }
      in->shape = shape;
    }
    if (core::has_shape_math(g)) {
      std::map<std::string, Shape> shapes;
      for (const auto& in : g.inputs) shapes[in.name] = in.shape;
      g = core::specialize(g, shapes);
    }
    auto at = detail::WorkingModel::build(std::move(g), net.tuning, net.file);
    at->registry = net.registry;
    Tuner tuner(*at, each);
    TuneReport report = tuner.run();
    // Biases are corrected where every bucket kept the correction (the first bucket's calibration).
    correct_bias = correct_bias && tuner.bias_correction;
    if (paths.empty()) means = tuner.calibration.channel_means;
    core::RoutinePath path = at->tuning.routine_path;
    if (!options.shapes.empty())
      for (const auto& in : at->graph.inputs) path.input_shapes[in.name] = in.shape;
    report.input_shapes = path.input_shapes;
    paths.push_back(std::move(path));
    if (paths.size() == 1) {
      first = std::move(report);
      net.tuning.blob_quant = at->tuning.blob_quant;  // calibrated once, for every bucket
    } else {
      first.other_shapes.push_back(std::move(report));
    }
  }
  net.tuning.routine_path = paths.front();
  net.tuning.shape_paths.assign(paths.begin() + 1, paths.end());
  net.changed();
  if (!options.keep_float_weights) store_int8_weights(net, first, correct_bias ? &means : nullptr);
  return first;
}

}  // namespace

Model tune(const Model& model, const TuneOptions& options, TuneReport* report) {
  auto work = detail::WorkingModel::of(detail::impl_of(model));
  // One set of routines for the whole tuning (every plan measured, validated
  // and stored); the tuned model's sessions choose as the given model's do.
  const std::shared_ptr<const core::RoutineRegistry> given = work->registry;
  work->registry = work->routines();
  // A model its author quantised runs its int8 layers by default: tuning
  // weighs them against float32 rather than leaving int8 out.
  TuneOptions opt = options;
  if (opt.schemas.empty() && !work->analyses->quantised_by_model.empty())
    opt.schemas = {"cpu:float32:*", "cpu:qint8:*"};
  TuneReport r = tune_in_place(*work, opt);
  if (opt.prepared_weights) work->store_prepared_weights(r.threads);
  if (report) *report = std::move(r);
  work->registry = given;
  return work->to_model();
}

}  // namespace softneuro
