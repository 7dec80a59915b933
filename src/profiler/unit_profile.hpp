// Profiling, the tuner's measuring half: every candidate routine of every layer
// timed alone on the layer's real shapes (unit profiling, childnets folded
// innermost-first), the cost of every adapt between two schemas, and whole-net
// runs of routine paths (in context). Every unit time goes through the profile
// cache. What to do with the times is the planner's and the tuner's business.
#pragma once

#include "core/graph.hpp"
#include "core/model_impl.hpp"
#include "core/registry.hpp"
#include "profiler/profile_cache.hpp"
#include "profiler/timing.hpp"

#include <softneuro/tune.hpp>

#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace softneuro::profiler {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

std::string params_text(const RoutineParams& p);

/// The inputs a unit measurement runs on: small random values in the schema's
/// dtype and layout (float16 and bfloat16: normal values, magnitudes 2^-5 to 2);
/// on another device, zero-filled device memory from the device's backend.
Blob random_blob(const Shape& shape, const Schema& s, std::mt19937& rng);

/// Layers with at least this many bytes of weights are measured with them out
/// of the cores' private caches (evict_private_caches before each timed run),
/// as a run of the net finds them: hot in L2, oneDNN's bfloat16 768x768 dense
/// measured 0.11 ms alone where it takes 0.135-0.16 in ViT, and won near-ties
/// it loses in the net against routines with half the weight bytes.
inline constexpr std::size_t kStreamedWeightBytes = 256 << 10;
/// Whether a layer's weights are that large.
bool weights_stream(const LayerInfo& info);
/// What a quantisation is, as text for a cache key (a digest of its values).
std::string quant_digest(const std::vector<QuantParams>& ins, const std::vector<QuantParams>& outs);

/// What the user lets the tuner choose from: schemas (globs), pins and bans.
struct Rules {
  std::vector<std::string> schemas;  ///< empty: every float32 CPU schema
  std::vector<RoutineRule> pin, ban;
  /// Where set, a routine computing below float32 (qint8, float16, bfloat16)
  /// is allowed only in qint8 and only for these layers (a quantised model's
  /// own int8 layers): a tuning without real samples to check accuracy on.
  std::optional<std::set<std::string>> reduced_only_for;
  bool schema_allowed(const Schema& s) const;
  /// Whether a candidate's schema is allowed and, for one computing below its
  /// schema's dtype (Routine::precision), some schema of that dtype on its
  /// device is too: a float32 routine multiplying int8 needs qint8 allowed.
  bool candidate_allowed(const core::Candidate& c) const;
  /// Whether reduced_only_for refuses `layer` the candidate `c`.
  bool refuses_reduced(const std::string& layer, const core::Candidate& c) const;
  /// Whether `layer` may use `c` (the reduced-precision rule, bans, then pins on its descriptor).
  bool allows(const std::string& layer, const core::Candidate& c) const;
};

/// One measured (routine, schema, parameters) for a layer.
struct Measured {
  core::Candidate cand;
  RoutineParams params;
  double unit_ms = kInf;
  double integrated_ms = 0;
  std::vector<core::RoutineChoice> children;  ///< a childnet candidate's child choices
  std::string cache_key;  ///< its profile cache key (empty: a childnet's cost, from its children)
  bool from_disk = false;  ///< unit_ms came from the profile cache file, not this tuning
  /// Not measured in context: its estimated in-context/unit ratio
  /// (update_context_ratios; 0: the layer's context_ratio).
  double context_ratio = 0;
};

/// A candidate of the layer before and one of this layer that one routine
/// computes as one step (Routine::fuses_previous: a oneDNN convolution and the
/// residual add after it), as the executor's plan runs them wherever a path
/// picks both: measured as that one step, so DPRS prices what runs.
struct FusedPair {
  std::string previous_descriptor, descriptor;
  RoutineParams previous_params, params;
  Schema previous_schema, schema;  ///< the two candidates' (a bfloat16 convolution, a float32 add)
  double unit_ms = kInf;
  double integrated_ms = 0;  ///< the two steps' time in a whole-net run, where one ran them fused
  std::string cache_key;
};

struct LayerProfile {
  const Layer* layer = nullptr;
  LayerInfo info;
  std::vector<Measured> measured;  ///< sorted by unit_ms
  /// Pairs with the layer profiled before this one (measure_fused_pairs).
  std::vector<FusedPair> fused_with_previous;
  /// In-context time over unit time, from this layer's candidates measured in
  /// context (else the net's median ratio): a candidate measured only alone is
  /// estimated at unit_ms * context_ratio, so it does not look cheaper than the
  /// measured ones just because isolation keeps caches warm (VGG16's 400 MB
  /// dense layer: 4.1 ms alone, several times that in the net). Where its
  /// routine was measured in context elsewhere, Measured::context_ratio instead.
  double context_ratio = 1;
  /// The time the planner uses for a candidate: in context where measured, else estimated.
  double cost(const Measured& m, bool integrated) const {
    return !integrated              ? m.unit_ms
           : m.integrated_ms > 0    ? m.integrated_ms
           : m.context_ratio > 0    ? m.unit_ms * m.context_ratio
                                    : m.unit_ms * context_ratio;
  }
  /// A fused pair's time as cost() gives a candidate's (the pair estimated by this layer's ratio).
  double cost(const FusedPair& f, bool integrated) const {
    return !integrated ? f.unit_ms : f.integrated_ms > 0 ? f.integrated_ms : f.unit_ms * context_ratio;
  }
  /// The best candidate in schema `s` (nullptr: none).
  const Measured* best_in(const Schema& s, bool integrated) const;
  /// This layer's entry measuring `descriptor` with `params` (nullptr: none).
  const Measured* find(const std::string& descriptor, const RoutineParams& params) const;
  /// The pair of `previous` (the layer before's pick) and `mine` (this layer's), or nullptr: they run apart.
  FusedPair* fused_pair(const Measured* previous, const Measured* mine);
  const FusedPair* fused_pair(const Measured* previous, const Measured* mine) const {
    return const_cast<LayerProfile*>(this)->fused_pair(previous, mine);
  }
  Measured& entry(const Measured* m) { return measured[static_cast<std::size_t>(m - measured.data())]; }
};

/// Sets every layer's context_ratio from the candidates measured in context,
/// and each candidate's measured only alone whose routine (descriptor, on
/// this layer type) was measured in context somewhere: the layer's ratios
/// scaled by how that routine's ratio compares with theirs over the net
/// (medians). A net's slowdown is partly the layer's (weights from memory)
/// and partly the routine's: BERT's Q/K/V products in oneDNN's int8 ran 1.64x
/// their unit time in the net, our bfloat16 tile_dense 1.14x in the same
/// layers elsewhere, and at the layer's 1.64x tile_dense never looked faster.
void update_context_ratios(std::vector<LayerProfile>& profiles);

/// An adapt routine with its parameters, as measured.
struct AdaptPick {
  double ms = kInf;
  std::string descriptor;
  RoutineParams params;
};

/// Whole-net runs of one routine path.
struct InContext {
  std::map<std::string, double> per_step;  ///< median ms per step name (a childnet parent: its children's sum)
  std::set<std::string> fused_away;        ///< steps another step computed (Step::fused_into)
  double total_ms = 0;                     ///< median of the round medians
  /// Per step, what a whole run took beyond the sum of its steps (dispatch,
  /// pool wake-ups): the smallest over the runs, the one a preemption did not stretch.
  double step_gap_ms = 0;
  double steps_ms = 0;  ///< the sum of the steps' times (childnets: their children's)
  int steps = 0;
};

class Profiler {
 public:
  using Progress = std::function<void(const char* stage, int done, int total, const std::string& item)>;

  /// `key_prefix`: what every cached time depends on beyond the layer (device, threads, wait, version).
  Profiler(detail::WorkingModel& net, const TuneOptions& options, Rules rules, std::string key_prefix, Progress progress);

  /// Unit profiling: every allowed candidate of every non-constant layer, over its parameter space.
  std::vector<LayerProfile> unit_profile();
  /// After the net's quantisation changed (the range method a tuning keeps):
  /// each profile's LayerInfo, and the blobs adapts are measured on, take the
  /// quantisation the net's plan now gives them. Times measured before stay.
  void requantise(std::vector<LayerProfile>& profiles);
  /// Each pair of consecutive layers the plan could run as one step (the
  /// second reads the first's one output, its only reader), for every pair of
  /// their candidates in one schema that a routine fuses: that step, measured
  /// (LayerProfile::fused_with_previous).
  void measure_fused_pairs(std::vector<LayerProfile>& profiles);
  /// The cheapest adapt of a blob from one schema to another (ms kInf: none), over
  /// every adapt routine and parameter combination.
  AdaptPick adapt_cost(const Shape& shape, const QuantParams& quant, const Schema& from, const Schema& to);
  /// Runs the net with each of `paths` in fresh executors, `rounds` rounds of `runs`
  /// runs each, interleaved, so that a burst of load elsewhere hits every path alike.
  std::vector<InContext> run_interleaved(const std::vector<core::RoutinePath>& paths, int runs, int rounds);

  /// An adapt's time in a whole-net run (run_interleaved), by blob, consumer
  /// ("" for a shared copy) and schemas: integrated planning prices that
  /// conversion so instead of by its unit time (alone, a large blob's reorder
  /// finds it in cache: a 9.8 MB one timed a fraction of its 1.2 ms in the net).
  void record_adapt_in_context(const std::string& blob, const std::string& consumer, const Schema& from,
                               const Schema& to, double ms);
  std::optional<double> adapt_in_context(const std::string& blob, const std::string& consumer, const Schema& from,
                                         const Schema& to) const;

  void save_cache() {
    close_load_window();
    cache_.save();
  }
  /// The cache's paths of earlier tunings (ProfileCache::earlier_paths).
  ProfileCache& cache() { return cache_; }
  /// What every cached time depends on beyond the layer (the constructor's `key_prefix`).
  const std::string& key_prefix() const { return key_prefix_; }
  int measurements() const { return measurements_; }
  int cache_hits() const { return cache_hits_; }
  /// Cached times measured again: entries taken under load, and entries the
  /// spot check found off (spot_check_cached).
  int cache_remeasured() const { return cache_remeasured_; }
  /// How much faster (below 1) or slower this machine runs the cached
  /// candidates now than when they were measured: the median ratio of the
  /// spot-checked times (1 before three, and beyond 4x either way: a cache of
  /// another machine, measured again). Cached times are read scaled by it,
  /// so that they compare with those measured now (a VM whose neighbours
  /// quieted ran them 1.5x faster, and every candidate measured afresh looked
  /// better than a cached one).
  double cache_drift() const;
  const Rules& rules() const { return rules_; }
  /// Below float32 only the qint8 routines of `layers` (Rules::reduced_only_for).
  void restrict_reduced_to(std::set<std::string> layers) { rules_.reduced_only_for = std::move(layers); }
  /// A blob's shape and quantisation as the executor's plan gives them to the
  /// layers reading or writing it (unit_profile() read them; a constant's
  /// storage scales where it has no calibrated ones). Throws for a blob no
  /// planned layer touches.
  struct PlannedBlob {
    Shape shape;
    QuantParams quant;
  };
  const PlannedBlob& planned_blob(const std::string& blob) const;

 private:
  double budget_ms() const;
  std::string signature(const LayerInfo& info) const;
  /// A cached time as this tuning reads it (one from the file scaled by cache_drift()), counted as a hit.
  std::optional<double> cached(const std::string& key, bool* from_disk = nullptr);
  double time_routine(const Routine& r, const Schema& s, const LayerInfo& info, const RoutineParams& params,
                      const std::string& key, double cutoff_ms = 0, bool* from_disk = nullptr, bool fresh = false);
  /// The cache key of a candidate of `info` with `params`: a qint8 routine's
  /// includes the quantisation of its blobs (its speed may depend on it).
  std::string candidate_key(const LayerInfo& info, const core::Candidate& c, const RoutineParams& params) const;
  /// Cached times are spot-checked, on one layer in kSpotCheckEvery (every
  /// layer once a quarter of at least 16 checks, or one by more than 4x, found
  /// a time off: the cache no longer describes this machine): the fastest cached candidate of each of
  /// the layer's schemas is measured again, and where it is off by more than
  /// a quarter, every cached candidate of that schema is, and replaced. (A
  /// time recorded too low is then measured in context once DPRS picks it;
  /// one recorded too high is caught by the final check's earlier paths.)
  void spot_check_cached(const LayerInfo& info, std::vector<Measured>& measured);
  static constexpr int kSpotCheckEvery = 4;
  /// Measures a cached candidate again (its time replaced, counted as measured
  /// again); true where the two differ by more than `tolerance` of the larger.
  /// `factor`: the larger over the smaller.
  bool remeasure(const LayerInfo& info, Measured& m, double tolerance, double* factor = nullptr);
  /// The spot check of childnet children (hundreds of small layers, each
  /// measured in microseconds): once per layer type and routine, the first
  /// cached time met measured again; where it is off by more than half,
  /// every cached time of that type and routine met afterwards too.
  void spot_check_grouped(const LayerInfo& info, std::vector<Measured>& measured);
  /// The group check of one cached time (children, adapts, fused pairs):
  /// `measure_again` measures it afresh and says whether it was off by more
  /// than kGroupCheckTolerance; it runs for the first time met of `group`,
  /// and for every one of a group whose first was off.
  void check_in_group(const std::string& group, const std::function<bool()>& measure_again);
  /// Gives the times measured since the window opened the machine's load over it.
  void close_load_window();
  /// `first_in`: the first input's schema where it is not `in` (a fused pair across two schemas).
  double time_prepared(PreparedRoutine& prepared, const Schema& in, const Schema& out, const LayerInfo& info,
                       const std::string& key, double cutoff_ms = 0, const Schema* first_in = nullptr);
  /// Candidates of a layer (or childnet child) the rules allow, measured over their parameter spaces.
  std::vector<Measured> measure_candidates(const LayerInfo& info, const std::vector<core::Candidate>& cands, int depth);
  double childnet_cost(const Routine& r, const Schema& schema, const LayerInfo& info, const RoutineParams& params,
                       std::vector<core::RoutineChoice>& choices, int depth);

  detail::WorkingModel& net_;
  const TuneOptions& opt_;
  Rules rules_;
  ProfileCache cache_;
  std::string key_prefix_;
  Progress progress_;
  std::mt19937 rng_{1234};
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int measurements_ = 0, cache_hits_ = 0, cache_remeasured_ = 0;
  uint64_t touched_ = 0;  ///< a sink for the bytes read to warm inputs
  /// Groups of cached times spot-checked once each, with the verdict (true:
  /// they held): adapts by routine and source schema ("adapt|descriptor|from"),
  /// childnet children by layer type and routine (spot_check_grouped).
  std::map<std::string, bool> spot_checked_;
  int spot_layers_ = 0;           ///< layers with cached times met (spot_check_cached)
  int spot_checks_ = 0, spot_off_ = 0;  ///< schemas spot-checked, and those found off
  bool spot_all_ = false;         ///< every layer is checked from now on
  std::vector<double> drift_log_;  ///< log(measured now / cached) of each layer spot check
  /// Keys measured since the load window opened, and when it did.
  std::vector<std::string> window_keys_;
  CpuClock window_start_ = cpu_clock();
  std::map<std::string, PlannedBlob> planned_blobs_;  ///< from the plan unit_profile() read
  std::map<std::string, double> adapts_in_context_;  ///< record_adapt_in_context's, by "blob|consumer|from|to"
};

}  // namespace softneuro::profiler
