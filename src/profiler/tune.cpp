// Net::tune(): unit profiling -> adapt costs -> DPRS -> integrated profiling
// -> DPRS again -> the routine path stored in the net. The runtime core never
// includes this file; it only stores and follows the path.
#include "core/device.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/net_impl.hpp"
#include "core/thread_pool.hpp"
#include "dprs/dprs.hpp"
#include "profiler/calibrate.hpp"
#include "profiler/profile_cache.hpp"
#include "profiler/timing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fnmatch.h>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <thread>

namespace softneuro {
namespace {

using core::Candidate;
constexpr double kInf = std::numeric_limits<double>::infinity();

bool glob(const std::string& pattern, const std::string& text) {
  return ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

std::string params_text(const RoutineParams& p) {
  std::string s;
  for (const auto& [k, v] : p) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v);
  return s;
}

/// Every combination of a routine's parameter choices, the first 64 (the
/// profiler measures each, so a routine with a huge space must offer fewer choices).
std::vector<RoutineParams> combinations(const std::vector<RoutineParamSpec>& space) {
  auto out = param_combinations(space);
  if (out.size() > 64) out.resize(64);
  return out;
}

/// Which parameter combinations of a routine to measure, measuring them as it
/// goes (`measure` returns ms). Up to 8 combinations: all of them. Beyond
/// (cache blocking: dozens), coordinate descent: from the first choice of each
/// parameter, try every choice of one parameter at a time with the others
/// fixed, keep the best, two passes at most. A few dozen combinations cost
/// ~10 measurements (ResNet50 hybrid tuning made 3863 measurements exhaustive).
template <class F>
std::vector<std::pair<RoutineParams, double>> search_params(const std::vector<RoutineParamSpec>& space, F&& measure) {
  std::vector<std::pair<RoutineParams, double>> out;
  auto all = combinations(space);
  if (all.size() <= 8) {
    for (auto& p : all) out.push_back({p, measure(p)});
    return out;
  }
  std::vector<const RoutineParamSpec*> specs;
  RoutineParams cur;
  for (const auto& s : space)
    if (!s.choices.empty()) {
      specs.push_back(&s);
      cur.emplace_back(s.name, s.choices[0]);
    }
  std::map<std::string, double> seen;
  auto eval = [&](const RoutineParams& p) {
    std::string k = params_text(p);
    if (auto it = seen.find(k); it != seen.end()) return it->second;
    double ms = measure(p);
    out.push_back({p, ms});
    return seen[k] = ms;
  };
  double best = eval(cur);
  for (int pass = 0; pass < 2; ++pass) {
    bool improved = false;
    for (std::size_t i = 0; i < specs.size(); ++i)
      for (int64_t v : specs[i]->choices) {
        RoutineParams p = cur;
        p[i].second = v;
        double t = eval(p);
        if (t < best) best = t, cur = p, improved = true;
      }
    if (!improved) break;
  }
  return out;
}

/// The best time measured so far per schema for one layer: a candidate three
/// times slower than it gets one timed run (measure()'s cut-off), not the budget.
struct CutOff {
  std::map<std::string, double> best;  // schema text -> ms
  double limit(const std::string& schema) const {
    auto b = best.find(schema);
    return b == best.end() ? 0 : 3 * b->second;
  }
  void seen(const std::string& schema, double ms) {
    auto& b = best.try_emplace(schema, ms).first->second;
    b = std::min(b, ms);
  }
};

/// A blob filled with small random values in the schema's dtype and layout;
/// on another device, zero-filled device memory from the device's backend.
Blob random_blob(const Shape& shape, const Schema& s, std::mt19937& rng) {
  if (s.device != Device::cpu) {
    const DeviceMemory* dm = device_memory(s.device);
    if (!dm) throw Error(fmt::format("no {} device is available", to_string(s.device)));
    std::size_t bytes = std::max<std::size_t>(64, storage_bytes(shape, s.dtype, s.layout));
    void* p = dm->allocate(bytes);
    if (!p) throw Error(fmt::format("out of {} memory ({} bytes)", to_string(s.device), bytes));
    std::shared_ptr<const void> owner(p, [release = dm->release](const void* q) { release(const_cast<void*>(q)); });
    return Blob::view(owner, p, shape, s.dtype, s.layout, s.device);
  }
  Blob b = Blob::allocate(shape, s.dtype, s.layout);
  auto* bytes = static_cast<unsigned char*>(b.data());
  if (s.dtype == DType::float32) {
    std::uniform_real_distribution<float> d(-1, 1);
    float* f = b.data_as<float>();
    for (std::size_t i = 0; i < b.byte_size() / 4; ++i) f[i] = d(rng);
  } else {
    for (std::size_t i = 0; i < b.byte_size(); ++i) bytes[i] = static_cast<unsigned char>(rng() & 0x3f);
  }
  return b;
}

/// One measured (routine, schema, parameters) for a layer.
struct Measured {
  Candidate cand;
  RoutineParams params;
  double unit_ms = kInf;
  double integrated_ms = 0;
  std::vector<core::RoutineChoice> children;  ///< a childnet candidate's child choices
};

struct LayerProfile {
  const Layer* layer = nullptr;
  LayerInfo info;
  std::vector<Measured> measured;  // sorted by unit_ms
  int node = -1;                   // DPRS node
  /// In-context time over unit time, from this layer's candidates measured in
  /// context (else the net's median ratio): a candidate measured only alone is
  /// estimated at unit_ms * context_ratio, so it does not look cheaper than the
  /// measured ones just because isolation keeps caches warm (VGG16's 400 MB
  /// dense layer: 4.1 ms alone, several times that in the net).
  double context_ratio = 1;
  /// The time DPRS uses for a candidate: in context where measured, else estimated.
  double cost(const Measured& m, bool integrated) const {
    return !integrated ? m.unit_ms : m.integrated_ms > 0 ? m.integrated_ms : m.unit_ms * context_ratio;
  }
};

/// Sets every layer's context_ratio from the candidates measured in context.
void update_context_ratios(std::vector<LayerProfile>& profiles) {
  std::vector<double> all;
  for (auto& p : profiles)
    for (const auto& m : p.measured)
      if (m.integrated_ms > 0 && m.unit_ms > 0) all.push_back(m.integrated_ms / m.unit_ms);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 1.0 : v[v.size() / 2];
  };
  const double global = std::max(1.0, median(all));
  for (auto& p : profiles) {
    std::vector<double> mine;
    for (const auto& m : p.measured)
      if (m.integrated_ms > 0 && m.unit_ms > 0) mine.push_back(m.integrated_ms / m.unit_ms);
    // Never below 1: a candidate alone is not slower than in a net, and
    // estimating it cheaper than measured would chase unmeasured candidates.
    p.context_ratio = mine.empty() ? global : std::max(1.0, median(mine));
  }
}

struct Tuner {
  detail::NetImpl& net;
  const TuneOptions& opt;
  profiler::ProfileCache cache;
  TuneReport report;
  std::vector<Schema> schemas;
  std::mt19937 rng{1234};
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  profiler::CpuClock cpu_at_start = profiler::cpu_clock();
  std::string key_prefix;

  Tuner(detail::NetImpl& n, const TuneOptions& o)
      : net(n), opt(o), cache(o.cache_dir.empty() ? profiler::ProfileCache::default_dir() : o.cache_dir) {
    report.device_fingerprint = core::device_fingerprint();
    report.threads = num_threads();
    report.openmp_wait = openmp_wait();
    // Times measured while idle threads slept do not hold where they spin, and the other way round.
    key_prefix = fmt::format("{}|t{}|{}|v{}", report.device_fingerprint, report.threads, report.openmp_wait, version());
  }

  /// The calibrated quantisation of a blob (empty when uncalibrated).
  QuantParams quant_of(const std::string& blob) const {
    auto q = net.graph.blob_quant.find(blob);
    return q == net.graph.blob_quant.end() ? QuantParams{} : q->second;
  }

  void progress(const char* stage, int done, int total, const std::string& item) {
    // Stage times for the report: a stage runs until the next one starts.
    const auto now = std::chrono::steady_clock::now();
    if (report.stage_s.empty() || report.stage_s.back().first != stage) {
      if (!report.stage_s.empty())
        report.stage_s.back().second = std::chrono::duration<double>(now - stage_start).count();
      report.stage_s.emplace_back(stage, 0.0);
      stage_start = now;
    }
    if (opt.progress) opt.progress(TuneProgress{stage, done, total, item});
  }
  std::chrono::steady_clock::time_point stage_start = std::chrono::steady_clock::now();

  double budget_ms() const {
    if (opt.time_budget_s <= 0) return opt.unit_budget_ms;
    double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return spent > opt.time_budget_s ? 0.0 : opt.unit_budget_ms;  // over budget: one timed run each
  }

  bool schema_allowed(const Schema& s) const {
    if (opt.schemas.empty()) return s.device == Device::cpu && s.dtype == DType::float32;
    return std::any_of(opt.schemas.begin(), opt.schemas.end(), [&](const std::string& p) { return s.matches(p); });
  }

  bool rule_allows(const std::string& layer, const std::string& descriptor) const {
    for (const auto& r : opt.ban)
      if (glob(r.layer, layer) && glob(r.descriptor, descriptor)) return false;
    bool pinned = false, match = false;
    for (const auto& r : opt.pin)
      if (glob(r.layer, layer)) {
        pinned = true;
        match = match || glob(r.descriptor, descriptor);
      }
    return !pinned || match;
  }

  std::string signature(const LayerInfo& info) const {
    std::string shapes;
    for (const auto& s : info.input_shapes) shapes += s.to_string();
    return fmt::format("{}({}){}", info.layer->type, core::describe_params(*info.layer), shapes);
  }

  /// Times one prepared routine in isolation on the layer's real shapes.
  double time_routine(const Routine& r, const Schema& s, const LayerInfo& info, const RoutineParams& params,
                      const std::string& key, double cutoff_ms = 0) {
    if (auto hit = cache.find(key)) {
      report.cache_hits += !cache.is_fresh(key);
      return *hit;
    }
    std::unique_ptr<PreparedRoutine> prepared;
    try {
      prepared = r.prepare(info, s, params);
    } catch (const std::exception& e) {
      core::info("{}: {} cannot be prepared with ({}): {}", info.layer->name, make_descriptor(s, r.algorithm()),
                 params_text(params), e.what());
      return kInf;
    }
    return time_prepared(*prepared, s, s, info, key, cutoff_ms);
  }

  /// The median time of a prepared routine reading blobs in schema `in` and
  /// writing blobs in `out` (device work synchronised inside the timed region).
  double time_prepared(PreparedRoutine& prepared, const Schema& in, const Schema& out, const LayerInfo& info,
                       const std::string& key, double cutoff_ms = 0) {
    std::vector<Blob> ins, outs;
    for (const auto& shape : info.input_shapes) ins.push_back(random_blob(shape, in, rng));
    for (const auto& shape : info.output_shapes) outs.push_back(random_blob(shape, out, rng));
    std::vector<const Blob*> in_ptrs;
    std::vector<Blob*> out_ptrs;
    for (auto& b : ins) in_ptrs.push_back(&b);
    for (auto& b : outs) out_ptrs.push_back(&b);
    Blob workspace = random_blob(Shape{static_cast<int64_t>(prepared.workspace_bytes())},
                                 Schema{prepared.workspace_device(), DType::quint8, Layout::nchw}, rng);
    RunArgs args{in_ptrs, out_ptrs, prepared.workspace_bytes() ? workspace.data() : nullptr, &core::global_pool()};
    const Device dev = in.device != Device::cpu ? in.device : out.device;
    const DeviceMemory* device = dev == Device::cpu ? nullptr : device_memory(dev);
    double ms = profiler::measure([&] {
                  prepared.run(args);
                  if (device) device->synchronize();  // time the work, not its queueing
                }, budget_ms(), 3, 200, cutoff_ms).median_ms;
    ++report.measurements;
    cache.put(key, ms);
    return ms;
  }

  /// An adapt routine with its parameters, as measured.
  struct AdaptPick {
    double ms = kInf;
    std::string descriptor;
    RoutineParams params;
  };

  /// The cheapest adapt of a blob of `shape` from one schema to another (ms kInf: none),
  /// over every adapt routine and routine-parameter combination (e.g. a chain's order of steps).
  AdaptPick adapt_cost(const Shape& shape, const QuantParams& quant, const Schema& from, const Schema& to) {
    if (from == to) return {0.0, {}, {}};
    Layer l;
    l.name = "adapt";
    l.type = "adapt";
    l.inputs = {"x"};
    l.outputs = {"y"};
    l.params["from"] = from.to_string();
    l.params["to"] = to.to_string();
    LayerInfo info{&l, {shape}, {shape}, {quant}, {quant}};  // quantising adapts need the blob's calibration
    AdaptPick best;
    for (const auto& c : core::RoutineRegistry::instance().candidates(info, to)) {
      if (!c.support.ok) continue;
      for (const auto& params : combinations(c.routine->param_space(info, to))) {
        std::string key = fmt::format("{}|adapt{}|{}|{}{}", key_prefix, shape.to_string(), from.to_string(), c.descriptor,
                                      params.empty() ? std::string() : "|" + params_text(params));
        // Adapt inputs are in the source schema: time with a routine that reads `from`.
        double ms = time_adapt(*c.routine, from, to, info, params, key);
        if (ms < best.ms) best = {ms, c.descriptor, params};
      }
    }
    return best;
  }

  double time_adapt(const Routine& r, const Schema& from, const Schema& to, const LayerInfo& info, const RoutineParams& params,
                    const std::string& key) {
    if (auto hit = cache.find(key)) {
      report.cache_hits += !cache.is_fresh(key);
      return *hit;
    }
    auto prepared = r.prepare(info, to, params);
    return time_prepared(*prepared, from, to, info, key);
  }

  /// The unit cost of a childnet candidate (-1 when the routine is not a childnet
  /// here; kInf when its children cannot run) and, in `choices`, its children's
  /// routines. Solved innermost-first: every child's candidates are unit-profiled
  /// (a childnet child recursively), then the cheapest child path is picked with
  /// the adapts between child schemas, the parent's input arriving and its output
  /// leaving in the candidate's schema: a DP over schemas along the chain of
  /// children (a childnet whose children are not a chain takes each child's
  /// cheapest routine in the schema the childnet gave it). The children of cpu/wg
  /// all run in cpu:float32 and no child routine computes in another schema, so
  /// there the per-child minimum is exact. The sum is the candidate's unit cost.
  double childnet_cost(const Routine& r, const Schema& schema, const LayerInfo& info, const RoutineParams& params,
                       std::vector<core::RoutineChoice>& choices, int depth = 0) {
    std::optional<Childnet> cn;
    try {
      cn = r.childnet(info, schema, params);
    } catch (const std::exception& e) {
      core::info("{}: {} cannot build its childnet with ({}): {}", info.layer->name, make_descriptor(schema, r.algorithm()),
                 params_text(params), e.what());
      return kInf;
    }
    if (!cn) return -1;
    if (depth > 8 || cn->inputs.size() != info.input_shapes.size() || cn->schemas.size() != cn->layers.size()) return kInf;
    auto& registry = core::RoutineRegistry::instance();
    std::map<std::string, Shape> shape;
    for (std::size_t i = 0; i < cn->inputs.size(); ++i) shape[cn->inputs[i]] = info.input_shapes[i];
    struct Option {
      Schema schema;
      double ms;
      core::RoutineChoice choice;
    };
    std::vector<std::vector<Option>> options(cn->layers.size());
    std::vector<LayerInfo> infos(cn->layers.size());
    bool chain = true;
    for (std::size_t k = 0; k < cn->layers.size(); ++k) {
      const Layer& child = cn->layers[k];
      LayerInfo& ci = infos[k];
      ci.layer = &child;
      try {
        for (const auto& i : child.inputs) ci.input_shapes.push_back(shape.at(i));
        ci.output_shapes = core::infer_layer_shapes(child, ci.input_shapes);
      } catch (const std::exception& e) {
        core::info("{}: childnet child '{}' is inconsistent: {}", info.layer->name, child.name, e.what());
        return kInf;
      }
      for (std::size_t o = 0; o < child.outputs.size(); ++o) shape[child.outputs[o]] = ci.output_shapes[o];
      for (const auto& i : child.inputs) {
        bool from_prev = k == 0 ? std::find(cn->inputs.begin(), cn->inputs.end(), i) != cn->inputs.end()
                                : std::find(cn->layers[k - 1].outputs.begin(), cn->layers[k - 1].outputs.end(), i) !=
                                      cn->layers[k - 1].outputs.end();
        chain = chain && from_prev;
      }
      const std::string sig = signature(ci);
      std::vector<Candidate> cands;
      for (auto& c : registry.candidates(ci))
        if (c.support.ok && (schema_allowed(c.schema) || c.schema == cn->schemas[k]) && rule_allows(child.name, c.descriptor))
          cands.push_back(std::move(c));
      bool has_fast = std::any_of(cands.begin(), cands.end(), [](const Candidate& c) { return c.routine->algorithm() != "ref"; });
      CutOff cutoff;
      for (const auto& c : cands) {
        if (opt.skip_reference && has_fast && c.routine->algorithm() == "ref") continue;
        const std::string schema_text = c.schema.to_string();
        search_params(c.routine->param_space(ci, c.schema), [&](const RoutineParams& cp) {
          std::vector<core::RoutineChoice> grandchildren;
          double ms = childnet_cost(*c.routine, c.schema, ci, cp, grandchildren, depth + 1);
          if (ms < 0)
            ms = time_routine(*c.routine, c.schema, ci, cp, fmt::format("{}|{}|{}|{}", key_prefix, sig, c.descriptor, params_text(cp)),
                              cutoff.limit(schema_text));
          if (ms < kInf) {
            options[k].push_back({c.schema, ms, {child.name, c.descriptor, cp, ms, 0, std::move(grandchildren)}});
            cutoff.seen(schema_text, ms);
          }
          return ms;
        });
      }
      if (options[k].empty()) return kInf;
    }
    if (!chain) {
      double total = 0;
      for (std::size_t k = 0; k < options.size(); ++k) {
        const Option* best = nullptr;
        for (const auto& o : options[k])
          if (o.schema == cn->schemas[k] && (!best || o.ms < best->ms)) best = &o;
        if (!best) return kInf;
        total += best->ms;
        choices.push_back(best->choice);
      }
      return total;
    }
    // DP along the chain: best[k][j] = cheapest path ending with option j of child k.
    auto edge_cost = [&](const std::vector<Shape>& shapes, const Schema& from, const Schema& to) {
      double ms = 0;
      for (const auto& sh : shapes) ms += adapt_cost(sh, {}, from, to).ms;
      return ms;
    };
    std::vector<std::vector<double>> best(options.size());
    std::vector<std::vector<int>> from(options.size());
    for (std::size_t k = 0; k < options.size(); ++k)
      for (const auto& o : options[k]) {
        double b = kInf;
        int arg = -1;
        if (k == 0) {
          b = edge_cost(info.input_shapes, schema, o.schema);
        } else {
          for (std::size_t j = 0; j < options[k - 1].size(); ++j) {
            double v = best[k - 1][j] + edge_cost(infos[k].input_shapes, options[k - 1][j].schema, o.schema);
            if (v < b) b = v, arg = static_cast<int>(j);
          }
        }
        if (k + 1 == options.size()) b += edge_cost(infos[k].output_shapes, o.schema, schema);
        best[k].push_back(b + o.ms);
        from[k].push_back(arg);
      }
    auto last = std::min_element(best.back().begin(), best.back().end());
    if (*last >= kInf) return kInf;
    std::vector<core::RoutineChoice> rev;
    for (int k = static_cast<int>(options.size()) - 1, j = static_cast<int>(last - best.back().begin()); k >= 0; --k) {
      rev.push_back(options[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)].choice);
      j = from[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)];
    }
    choices.assign(rev.rbegin(), rev.rend());
    return *last;
  }

  std::vector<LayerProfile> unit_profile() {
    auto& registry = core::RoutineRegistry::instance();
    std::vector<LayerProfile> profiles;
    int total = 0;
    for (const auto& l : net.graph.layers) total += l.type != "constant";
    int done = 0;
    for (const auto& layer : net.graph.layers) {
      if (layer.type == "constant") continue;
      LayerProfile p;
      p.layer = &layer;
      p.info.layer = &layer;
      for (const auto& i : layer.inputs) p.info.input_shapes.push_back(net.shapes.at(i)), p.info.input_quant.push_back(quant_of(i));
      for (const auto& o : layer.outputs) p.info.output_shapes.push_back(net.shapes.at(o)), p.info.output_quant.push_back(quant_of(o));
      progress("unit profiling", done++, total, layer.name);
      const auto layer_start = std::chrono::steady_clock::now();
      const int measured_before = report.measurements;
      std::vector<Candidate> cands;
      for (auto& c : registry.candidates(p.info)) {
        if (!c.support.ok) {
          core::debug("{}: {} is not a candidate: {}", layer.name, c.descriptor, c.support.reason);
          continue;
        }
        if (!schema_allowed(c.schema) || !rule_allows(layer.name, c.descriptor)) continue;
        cands.push_back(std::move(c));
      }
      if (cands.empty() && !opt.schemas.empty()) {
        // The user's schemas leave this layer nothing (e.g. qint8-only and no qint8
        // routine for its type): it falls back to float32 on the CPU rather than failing.
        for (auto& c : registry.candidates(p.info))
          if (c.support.ok && c.schema.device == Device::cpu && c.schema.dtype == DType::float32 &&
              rule_allows(layer.name, c.descriptor))
            cands.push_back(std::move(c));
        if (!cands.empty())
          core::warn("layer '{}' ({}): no routine in the schemas given supports it; it stays float32 on the CPU",
                     layer.name, layer.type);
      }
      bool has_fast = std::any_of(cands.begin(), cands.end(), [](const Candidate& c) { return c.routine->algorithm() != "ref"; });
      std::string sig = signature(p.info);
      CutOff cutoff;
      for (const auto& c : cands) {
        if (opt.skip_reference && has_fast && c.routine->algorithm() == "ref") continue;
        const std::string schema_text = c.schema.to_string();
        search_params(c.routine->param_space(p.info, c.schema), [&](const RoutineParams& params) {
          std::string key = fmt::format("{}|{}|{}|{}", key_prefix, sig, c.descriptor, params_text(params));
          std::vector<core::RoutineChoice> children;
          double ms = childnet_cost(*c.routine, c.schema, p.info, params, children);
          if (ms < 0) ms = time_routine(*c.routine, c.schema, p.info, params, key, cutoff.limit(schema_text));
          if (ms < kInf) {
            p.measured.push_back({c, params, ms, 0, std::move(children)});
            cutoff.seen(schema_text, ms);
          }
          return ms;
        });
      }
      if (p.measured.empty())
        throw Error(fmt::format("no routine can run this {} layer within the schemas and rules given", layer.type), net.file,
                    layer.name, "routine");
      std::stable_sort(p.measured.begin(), p.measured.end(), [](const Measured& a, const Measured& b) { return a.unit_ms < b.unit_ms; });
      core::debug("unit profiling {}: {} candidates, {} measurements, {:.2f} s", layer.name, p.measured.size(),
                  report.measurements - measured_before,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - layer_start).count());
      profiles.push_back(std::move(p));
    }
    progress("unit profiling", total, total, "");
    return profiles;
  }

  int schema_index(const Schema& s) {
    for (std::size_t i = 0; i < schemas.size(); ++i)
      if (schemas[i] == s) return static_cast<int>(i);
    schemas.push_back(s);
    return static_cast<int>(schemas.size()) - 1;
  }

  // The cost graph: net inputs, constants and net outputs are zero-cost nodes
  // fixed to the schema they have at run time (the paper's auxiliary nodes).
  struct Problem {
    dprs::CostGraph graph;
    std::vector<std::string> blob_of_edge, consumer_of_edge;
    std::vector<std::vector<AdaptPick>> adapt_pick;  // per edge, S*S
  };

  Problem build_problem(std::vector<LayerProfile>& profiles, bool integrated) {
    Problem pb;
    schemas.clear();
    schema_index(Schema{});
    for (auto& p : profiles)
      for (auto& m : p.measured) schema_index(m.cand.schema);
    const int S = static_cast<int>(schemas.size());
    pb.graph.num_schemas = S;
    std::map<std::string, int> producer_node;  // blob -> node
    auto fixed_node = [&](const Schema& s) {
      std::vector<double> cost(static_cast<std::size_t>(S), kInf);
      cost[static_cast<std::size_t>(schema_index(s))] = 0;
      return pb.graph.add_node(cost);
    };
    for (const auto& in : net.graph.inputs) producer_node[in.name] = fixed_node(Schema{});
    for (const auto& l : net.graph.layers)
      if (l.type == "constant") producer_node[l.outputs[0]] = fixed_node(Schema{Device::cpu, l.weight("value").dtype(), Layout::nchw});
    auto add_edge = [&](const std::string& blob, int to, const std::string& consumer) {
      std::vector<double> adapt(static_cast<std::size_t>(S * S), kInf);
      std::vector<AdaptPick> picks(static_cast<std::size_t>(S * S));
      const Shape& shape = net.shapes.at(blob);
      for (int a = 0; a < S; ++a)
        for (int b = 0; b < S; ++b) {
          auto& p = picks[static_cast<std::size_t>(a * S + b)];
          p = adapt_cost(shape, quant_of(blob), schemas[static_cast<std::size_t>(a)], schemas[static_cast<std::size_t>(b)]);
          adapt[static_cast<std::size_t>(a * S + b)] = p.ms;
        }
      pb.graph.add_edge(producer_node.at(blob), to, adapt);
      pb.blob_of_edge.push_back(blob);
      pb.consumer_of_edge.push_back(consumer);
      pb.adapt_pick.push_back(std::move(picks));
    };
    int edges_total = 0;
    for (auto& p : profiles) edges_total += static_cast<int>(p.layer->inputs.size());
    int done = 0;
    for (auto& p : profiles) {
      std::vector<double> cost(static_cast<std::size_t>(S), kInf);
      for (const auto& m : p.measured) {
        double t = p.cost(m, integrated);
        auto& c = cost[static_cast<std::size_t>(schema_index(m.cand.schema))];
        c = std::min(c, t);
      }
      p.node = pb.graph.add_node(cost);
      for (const auto& in : p.layer->inputs) {
        if (!integrated) progress("adapts", done++, edges_total, in + " -> " + p.layer->name);
        add_edge(in, p.node, p.layer->name);
      }
      for (const auto& o : p.layer->outputs) producer_node[o] = p.node;
    }
    for (const auto& o : net.graph.outputs) add_edge(o, fixed_node(Schema{}), "output");
    return pb;
  }

  static Measured& measured_entry(LayerProfile& p, const Measured* m) {
    return p.measured[static_cast<std::size_t>(m - p.measured.data())];
  }

  /// The best measured candidate of a layer in a schema (integrated time first when known).
  static const Measured* best_in(const LayerProfile& p, const Schema& s, bool integrated) {
    const Measured* best = nullptr;
    auto t = [&](const Measured& m) { return p.cost(m, integrated); };
    for (const auto& m : p.measured)
      if (m.cand.schema == s && (!best || t(m) < t(*best))) best = &m;
    return best;
  }

  core::RoutinePath path_from(const std::vector<const Measured*>& picks, const std::vector<LayerProfile>& profiles) {
    core::RoutinePath path;
    path.device_fingerprint = report.device_fingerprint;
    for (std::size_t i = 0; i < profiles.size(); ++i)
      path.routines.push_back({profiles[i].layer->name, picks[i]->cand.descriptor, picks[i]->params, 0, 0, picks[i]->children});
    return path;
  }

  struct InContext {
    std::map<std::string, double> per_step;  ///< median ms per step name
    double total_ms = 0;                     ///< median of the round medians
  };

  /// Runs the whole net with each of `paths`, interleaved: `rounds` rounds in
  /// which each path runs `runs` times, so that a burst of load elsewhere hits
  /// every path alike. Returns per path the median per-step times and the
  /// median of its round medians.
  std::vector<InContext> run_interleaved(const std::vector<core::RoutinePath>& paths, int runs, int rounds) {
    std::vector<NamedBlob> ins, outs;
    for (const auto& t : net.inputs) ins.push_back({t.name, random_blob(t.shape, Schema{}, rng)});
    for (const auto& t : net.outputs) outs.push_back({t.name, Blob::allocate(t.shape)});
    std::vector<core::Graph> graphs(paths.size(), net.graph);
    std::vector<std::unique_ptr<core::Executor>> execs;
    for (std::size_t p = 0; p < paths.size(); ++p) {
      graphs[p].routine_path = paths[p];
      execs.push_back(std::make_unique<core::Executor>(graphs[p], net.shapes, Schema{}, net.weights));
      execs.back()->run(ins, outs);  // warm-up
    }
    // Runs another process preempted are left out where a clean one exists (profiler::Samples).
    std::vector<std::vector<profiler::Samples>> samples(paths.size());
    std::vector<std::vector<double>> round_medians(paths.size());
    profiler::PreemptionProbe probe = profiler::pool_preemption_probe();
    for (int round = 0; round < std::max(1, rounds); ++round)
      for (std::size_t p = 0; p < paths.size(); ++p) {
        const auto& steps = execs[p]->steps();
        samples[p].resize(steps.size());
        std::vector<double> step_ms(steps.size());
        profiler::Samples totals;
        for (int r = 0; r < std::max(1, runs); ++r) {
          probe.start();
          auto t0 = std::chrono::steady_clock::now();
          execs[p]->run(ins, outs, step_ms.data());
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          const bool preempted = probe.preempted(ms);
          totals.add(ms, preempted);
          for (std::size_t i = 0; i < steps.size(); ++i) samples[p][i].add(step_ms[i], preempted);
        }
        round_medians[p].push_back(totals.estimate());
      }
    std::vector<InContext> out(paths.size());
    for (std::size_t p = 0; p < paths.size(); ++p) {
      const auto& steps = execs[p]->steps();
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const double ms = samples[p][i].estimate();
        out[p].per_step[steps[i]->name] = ms;
        // A childnet's children run as steps of their own: the parent layer's
        // in-context time is their sum.
        if (!steps[i]->parent.empty()) out[p].per_step[steps[i]->parent] += ms;
      }
      std::sort(round_medians[p].begin(), round_medians[p].end());
      out[p].total_ms = round_medians[p][round_medians[p].size() / 2];
    }
    return out;
  }

  /// Runs a whole net with `path` and returns the median per-step times and the median total.
  std::pair<std::map<std::string, double>, double> run_in_context(const core::RoutinePath& path, int runs) {
    auto r = run_interleaved({path}, runs, 1);
    return {r[0].per_step, r[0].total_ms};
  }

  /// Every schema some registered routine computes in.
  static std::vector<Schema> registered_schemas() {
    std::vector<Schema> out;
    for (const auto& d : registered_routines()) {
      Schema s = Schema::parse(d.substr(0, d.find('/')));
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
    return out;
  }

  /// A schema entry that matches no registered routine is a typo, not a wish.
  void check_schema_entries() const {
    auto known = registered_schemas();
    for (const auto& text : opt.schemas) {
      TuneOptions one;
      one.schemas = {text};
      one.cache_dir = "-";
      Tuner probe_rules(net, one);
      bool matched = std::any_of(known.begin(), known.end(), [&](const Schema& s) { return probe_rules.schema_allowed(s); });
      if (!matched) {
        std::string list;
        for (const auto& s : known) list += (list.empty() ? "" : ", ") + s.to_string();
        throw Error(fmt::format("no registered routine computes in '{}' (available: {})", text, list), {}, {}, "schemas");
      }
    }
  }

  struct Alternative {
    std::string name;
    core::RoutinePath path;  ///< routines only: the executor adds its adapts
    double predicted_ms = 0;
  };

  /// DPRS within each dtype the candidates span (when more than one), each
  /// layer keeping the float32 CPU candidates where that dtype has none.
  std::vector<Alternative> single_dtype_paths(const std::vector<LayerProfile>& profiles) {
    std::set<DType> dtypes;
    for (const auto& p : profiles)
      for (const auto& m : p.measured) dtypes.insert(m.cand.schema.dtype);
    std::vector<Alternative> out;
    if (dtypes.size() < 2) return out;
    for (DType d : dtypes) {
      std::vector<LayerProfile> restricted = profiles;
      bool possible = true;
      for (auto& p : restricted) {
        std::vector<Measured> keep;
        for (const auto& m : p.measured)
          if (m.cand.schema.dtype == d) keep.push_back(m);
        if (keep.empty())
          for (const auto& m : p.measured)
            if (m.cand.schema.device == Device::cpu && m.cand.schema.dtype == DType::float32) keep.push_back(m);
        if (keep.empty()) possible = false;
        p.measured = std::move(keep);
      }
      if (!possible) continue;
      Problem rpb = build_problem(restricted, true);
      auto rsol = dprs::solve(rpb.graph);
      if (!rsol.feasible) continue;
      std::vector<const Measured*> picks;
      for (const auto& p : restricted)
        picks.push_back(best_in(p, schemas[static_cast<std::size_t>(rsol.schema[static_cast<std::size_t>(p.node)])], true));
      Alternative alt{fmt::format("{}-only", to_string(d)), path_from(picks, restricted), rsol.total};
      for (std::size_t i = 0; i < restricted.size(); ++i) alt.path.routines[i].predicted_ms = restricted[i].cost(*picks[i], true);
      out.push_back(std::move(alt));
    }
    return out;
  }

  TuneReport run() {
    if (num_threads() < 1) throw Error("no threads");
    check_schema_entries();
    // qint8 routines need every blob's quantisation: calibrate when none is stored yet.
    bool wants_qint8 = false;
    for (Layout l : {Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c})
      wants_qint8 = wants_qint8 || schema_allowed(Schema{Device::cpu, DType::qint8, l});
    if (wants_qint8 && net.graph.blob_quant.empty()) {
      progress("calibration", 0, 1, "");
      profiler::calibrate(net, opt.calibration, opt.cache_dir.empty() ? profiler::ProfileCache::default_dir() : opt.cache_dir);
    }
    auto profiles = unit_profile();

    // DPRS on unit costs.
    Problem pb = build_problem(profiles, false);
    progress("dprs", 0, 1, "");
    auto sol = dprs::solve(pb.graph);
    if (!sol.feasible) throw Error("no routine path exists: some edge has no adapt between the schemas its layers allow", net.file);

    // Integrated profiling: the best few candidates per (layer, chosen schema), in whole-net runs.
    auto pick = [&](bool integrated) {
      std::vector<const Measured*> picks;
      for (const auto& p : profiles) picks.push_back(best_in(p, schemas[static_cast<std::size_t>(sol.schema[static_cast<std::size_t>(p.node)])], integrated));
      return picks;
    };
    int rounds = std::max(1, opt.candidates_per_schema);
    for (int k = 0; k < rounds; ++k) {
      progress("integrated profiling", k, rounds, "");
      std::vector<const Measured*> picks = pick(false);
      bool any = k == 0;
      for (std::size_t i = 0; i < profiles.size(); ++i) {
        const Schema& s = picks[i]->cand.schema;
        int seen = 0;
        for (const auto& m : profiles[i].measured)
          if (m.cand.schema == s && seen++ == k) {
            picks[i] = &m;
            any = true;
          }
      }
      if (!any) break;
      auto [per_step, total] = run_in_context(path_from(picks, profiles), opt.integrated_runs);
      for (std::size_t i = 0; i < profiles.size(); ++i) {
        auto it = per_step.find(profiles[i].layer->name);
        if (it != per_step.end()) measured_entry(profiles[i], picks[i]).integrated_ms = it->second;
      }
    }
    progress("integrated profiling", rounds, rounds, "");

    // DPRS again with in-context costs where measured. A path that picks
    // candidates measured only in isolation is run in context once more and
    // solved again, until the chosen path's costs are all in-context ones (or
    // four rounds): its predicted time is then a sum of in-context times.
    std::vector<const Measured*> picks;
    core::RoutinePath path;
    for (int round = 0;; ++round) {
      update_context_ratios(profiles);
      pb = build_problem(profiles, true);
      sol = dprs::solve(pb.graph);
      if (!sol.feasible) throw Error("no routine path exists", net.file);
      picks = pick(true);
      path = path_from(picks, profiles);
      bool all_in_context = true;
      for (const auto* m : picks) all_in_context = all_in_context && m->integrated_ms > 0;
      if (all_in_context || round == 3) break;
      progress("integrated profiling", rounds + round, rounds + round + 1, "");
      auto [per_step, total] = run_in_context(path, opt.integrated_runs);
      for (std::size_t i = 0; i < profiles.size(); ++i)
        if (auto it = per_step.find(profiles[i].layer->name); it != per_step.end())
          measured_entry(profiles[i], picks[i]).integrated_ms = it->second;
    }
    report.exact = sol.exact;
    report.predicted_ms = sol.total;
    const int S = pb.graph.num_schemas;
    // The executor converts a blob once per target schema and shares the copy
    // among its consumers there; DPRS (per-edge costs) counted each edge. The
    // prediction counts what will run. (The search itself may so overrate
    // paths that convert a branching blob: a known, conservative bias.)
    std::set<std::pair<std::string, int>> converted;
    for (std::size_t e = 0; e < pb.graph.edges.size(); ++e) {
      const auto& edge = pb.graph.edges[e];
      int a = sol.schema[static_cast<std::size_t>(edge.from)], b = sol.schema[static_cast<std::size_t>(edge.to)];
      if (a == b) continue;
      double ms = edge.adapt[static_cast<std::size_t>(a * S + b)];
      if (!converted.insert({pb.blob_of_edge[e], b}).second) {
        report.predicted_ms -= ms;
        continue;
      }
      const AdaptPick& ap = pb.adapt_pick[e][static_cast<std::size_t>(a * S + b)];
      const std::string& d = ap.descriptor;
      path.adapts.push_back({pb.blob_of_edge[e], pb.consumer_of_edge[e], schemas[static_cast<std::size_t>(a)].to_string(),
                             schemas[static_cast<std::size_t>(b)].to_string(), {d}, ms, ap.params});
      report.adapts.push_back({pb.blob_of_edge[e], pb.consumer_of_edge[e], schemas[static_cast<std::size_t>(a)].to_string(),
                               schemas[static_cast<std::size_t>(b)].to_string(),
                               d + (ap.params.empty() ? std::string() : " (" + params_text(ap.params) + ")"), ms});
    }
    for (std::size_t i = 0; i < profiles.size(); ++i) {
      auto& rc = path.routines[i];
      rc.predicted_ms = profiles[i].cost(*picks[i], true);
      report.layers.push_back({profiles[i].layer->name, profiles[i].layer->type, rc.descriptor, params_text(rc.params),
                               picks[i]->unit_ms, picks[i]->integrated_ms, static_cast<int>(profiles[i].measured.size())});
    }

    // Measure the tuned net end to end; never hand back a path slower than the untuned default.
    // Interleaved rounds: a comparison of two back-to-back measurements on a
    // busy machine once kept the default over a path 1.5x faster.
    // With several dtypes allowed (hybrid), the best path within each dtype
    // alone is measured beside it: in-context costs measured around a mixed
    // path can hide that a single-dtype path runs faster as a whole, and a
    // hybrid tuning must never hand back a path slower than those.
    std::vector<Alternative> alternatives = single_dtype_paths(profiles);
    progress("final measurement", 0, 1, "");
    std::vector<core::RoutinePath> to_measure{path, core::RoutinePath{}};
    for (const auto& alt : alternatives) to_measure.push_back(alt.path);
    // Fresh executors of each path (as `softneuro run` prepares one), alternated
    // round by round; each round runs a path for about 25 ms (5 to 100 runs), so
    // that a small net's comparison is not decided by a handful of runs.
    const int final_runs = std::clamp(static_cast<int>(25.0 / std::max(0.01, report.predicted_ms)),
                                      std::max(5, opt.integrated_runs), 100);
    const profiler::CpuClock final_start = profiler::cpu_clock();
    auto measured = run_interleaved(to_measure, final_runs, 5);
    const double final_others = profiler::others_cpus(final_start, profiler::cpu_clock());
    for (std::size_t k = 0; k < alternatives.size(); ++k) {
      const auto& m = measured[2 + k];
      if (m.total_ms < measured[0].total_ms * 0.97) {
        core::info("the {} path measured {:.3f} ms, the tuned path {:.3f} ms: taking the {} path", alternatives[k].name,
                   m.total_ms, measured[0].total_ms, alternatives[k].name);
        path = alternatives[k].path;
        measured[0] = m;
        report.predicted_ms = alternatives[k].predicted_ms;
        report.adapts.clear();  // the executor's adapts (see the inspect output)
        report.layers.clear();
        for (const auto& r : path.routines)
          report.layers.push_back({r.layer, net.graph.find_layer(r.layer)->type, r.descriptor, params_text(r.params),
                                   r.predicted_ms, 0, 0});
      }
    }
    auto& tuned_steps = measured[0].per_step;
    auto& default_steps = measured[1].per_step;
    const double tuned_ms = measured[0].total_ms, default_ms = measured[1].total_ms;
    for (auto& rc : path.routines)
      if (auto it = tuned_steps.find(rc.layer); it != tuned_steps.end()) rc.measured_ms = it->second;
    for (auto& l : report.layers)
      if (auto it = tuned_steps.find(l.layer); it != tuned_steps.end() && l.integrated_ms == 0) l.integrated_ms = it->second;
    report.measured_ms = tuned_ms;
    // (Only when the default itself obeys the user's schemas, pins and bans.)
    bool default_allowed = true;
    {
      core::Graph g = net.graph;
      core::Executor exec(g, net.shapes);
      for (const auto& step : exec.steps())
        if (step->layer->type != "adapt")
          default_allowed = default_allowed && schema_allowed(step->routine.schema) &&
                            rule_allows(step->name, step->routine.descriptor);
    }
    if (default_allowed) report.default_ms = default_ms;
    // A tuned path is kept only where it measured faster than the default,
    // with the machine otherwise quiet: where other processes kept every core
    // busy, a team of spinning threads waited whole time slices for each
    // other, and a path that won there ran 1.4x slower than the default on the
    // quiet machine. (Machine-wide CPU time, not per-run signals: involuntary
    // switches and the team's CPU time flagged 94% of the runs on a quiet
    // 2-core Xeon VM, our own threads preempting each other.)
    const bool disturbed = final_others >= 0.5;
    if (default_allowed && (default_ms <= tuned_ms || disturbed)) {
      report.kept_default = true;
      if (default_ms <= tuned_ms)
        core::warn("the tuned path measured {:.3f} ms, the untuned default {:.3f} ms: keeping the default's routines",
                   tuned_ms, default_ms);
      else
        core::warn("other processes kept {:.1f} CPUs busy during the final runs: the tuned path ({:.3f} ms against the "
                   "default's {:.3f}) cannot be trusted to be faster on a quiet machine; keeping the default's routines "
                   "(tune again when the machine is quiet)",
                   final_others, tuned_ms, default_ms);
      core::RoutinePath fallback;
      fallback.device_fingerprint = report.device_fingerprint;
      core::Graph g = net.graph;
      core::Executor exec(g, net.shapes);
      for (const auto& step : exec.steps())
        if (step->layer->type != "adapt" && step->parent.empty())  // a childnet's children follow their parent's default
          fallback.routines.push_back({step->name, step->routine.descriptor, step->params, default_steps[step->name], default_steps[step->name], {}});
      path = fallback;
      // The default's whole-net median stands for its prediction: DPRS did not
      // choose it, and a sum of per-step medians taken beside other processes
      // caught one stalled step (MobileNetV2: 284 ms against 3.4).
      report.measured_ms = default_ms;
      report.predicted_ms = default_ms;
      report.layers.clear();
      report.adapts.clear();
      for (const auto& r : path.routines) report.layers.push_back({r.layer, net.graph.find_layer(r.layer)->type, r.descriptor, params_text(r.params), r.predicted_ms, r.measured_ms, 1});
    }

    path.openmp_wait = report.openmp_wait;
    net.graph.routine_path = path;
    net.changed();
    cache.save();
    report.tuning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.others_cpus = profiler::others_cpus(cpu_at_start, profiler::cpu_clock());
    if (report.others_cpus >= 0.5)
      core::warn("other processes kept {:.1f} of {} CPUs busy while tuning: the times measured may not hold on a quiet "
                 "machine; tune again when it is quiet",
                 report.others_cpus, std::thread::hardware_concurrency());
    progress("done", 1, 1, "");
    report.stage_s.pop_back();  // "done" itself
    return report;
  }
};

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) o += fmt::format("\\u{:04x}", static_cast<int>(c));
    else o += c;
  }
  return o;
}

}  // namespace

TuneReport Net::tune(const TuneOptions& options) {
  if (options.shapes.empty()) {
    Tuner tuner(*impl_, options);
    return tuner.run();
  }
  // One routine path per shape bucket: the net tuned as if its default shapes were the bucket's.
  TuneOptions each = options;
  each.shapes.clear();
  TuneReport first;
  std::vector<core::RoutinePath> paths;
  for (const auto& bucket : options.shapes) {
    core::Graph g = impl_->graph;
    for (const auto& [name, shape] : bucket) {
      auto in = std::find_if(g.inputs.begin(), g.inputs.end(), [&](const TensorInfo& t) { return t.name == name; });
      if (in == g.inputs.end()) throw Error(fmt::format("the model has no input named '{}'", name), impl_->file, {}, "shapes");
      try {
        core::check_input_shape(*in, shape);
      } catch (const Error& e) {
        throw Error(e.message(), impl_->file, {}, "shapes");
      }
      in->shape = shape;
    }
    auto at = detail::NetImpl::build(std::move(g), impl_->file);
    TuneReport report = Tuner(*at, each).run();
    core::RoutinePath path = at->graph.routine_path;
    for (const auto& in : at->graph.inputs) path.input_shapes[in.name] = in.shape;
    report.input_shapes = path.input_shapes;
    paths.push_back(std::move(path));
    if (paths.size() == 1) {
      first = std::move(report);
      impl_->graph.blob_quant = at->graph.blob_quant;  // calibrated once, for every bucket
    } else {
      first.other_shapes.push_back(std::move(report));
    }
  }
  impl_->graph.routine_path = paths.front();
  impl_->graph.shape_paths.assign(paths.begin() + 1, paths.end());
  impl_->changed();
  return first;
}

std::string TuneReport::to_text() const {
  std::string s;
  if (!input_shapes.empty()) {
    s += "input shapes:";
    for (const auto& [name, shape] : input_shapes) s += fmt::format(" {}={}", name, shape.to_string());
    s += "\n";
  }
  s += fmt::format("device: {}\nthreads: {}\nOpenMP wait: {}\n", device_fingerprint, threads, openmp_wait);
  std::size_t wn = 5, wd = 7;
  for (const auto& l : layers) {
    wn = std::max(wn, l.layer.size());
    wd = std::max(wd, l.descriptor.size() + (l.routine_params.empty() ? 0 : l.routine_params.size() + 3));
  }
  s += fmt::format("\n{:<{}}  {:<12} {:<{}}  {:>10}  {:>10}  {:>5}\n", "layer", wn, "type", "routine", wd, "unit ms", "in-net ms", "cands");
  for (const auto& l : layers)
    s += fmt::format("{:<{}}  {:<12} {:<{}}  {:>10.4f}  {:>10.4f}  {:>5}\n", l.layer, wn, l.type,
                     l.descriptor + (l.routine_params.empty() ? "" : " (" + l.routine_params + ")"), wd, l.unit_ms,
                     l.integrated_ms, l.candidates);
  double adapt_ms = 0;
  for (const auto& a : adapts) adapt_ms += a.ms;
  s += fmt::format("\n{} adapts, {:.4f} ms in all\n", adapts.size(), adapt_ms);
  for (const auto& a : adapts)
    s += fmt::format("  {} -> {}: {} -> {} by {} ({:.4f} ms)\n", a.blob, a.consumer, a.from_schema, a.to_schema, a.descriptor, a.ms);
  s += fmt::format("\npredicted (DPRS{}) {:.3f} ms, measured {:.3f} ms end to end\n", exact ? "" : ", heuristic fallback",
                   predicted_ms, measured_ms);
  if (default_ms > 0)
    s += kept_default ? fmt::format("the untuned default measured {:.3f} ms beside it: its routines are kept\n", default_ms)
                      : fmt::format("the untuned default measured {:.3f} ms beside it\n", default_ms);
  s += fmt::format("tuned in {:.2f} s: {} measurements, {} from the profile cache\n", tuning_s, measurements, cache_hits);
  if (others_cpus >= 0) s += fmt::format("other processes meanwhile: {:.2f} CPUs busy on average\n", others_cpus);
  for (const auto& [stage, secs] : stage_s) s += fmt::format("  {:<22} {:8.2f} s\n", stage, secs);
  for (const auto& o : other_shapes) s += "\n" + o.to_text();
  return s;
}

std::string TuneReport::to_json() const {
  std::string s = fmt::format("{{\n  \"device_fingerprint\": \"{}\",\n  \"threads\": {},\n  \"openmp_wait\": \"{}\",\n"
                              "  \"predicted_ms\": {},\n  \"measured_ms\": {},\n  \"default_ms\": {},\n  \"kept_default\": {},\n"
                              "  \"tuning_s\": {},\n  \"measurements\": {},\n  \"cache_hits\": {},\n  \"exact\": {},\n"
                              "  \"others_cpus\": {},\n  \"layers\": [",
                              json_escape(device_fingerprint), threads, json_escape(openmp_wait), predicted_ms, measured_ms, default_ms, kept_default, tuning_s, measurements,
                              cache_hits, exact, others_cpus);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    s += fmt::format("{}\n    {{\"layer\": \"{}\", \"type\": \"{}\", \"descriptor\": \"{}\", \"routine_params\": \"{}\", "
                     "\"unit_ms\": {}, \"integrated_ms\": {}, \"candidates\": {}}}",
                     i ? "," : "", json_escape(l.layer), json_escape(l.type), json_escape(l.descriptor),
                     json_escape(l.routine_params), l.unit_ms, l.integrated_ms, l.candidates);
  }
  s += "\n  ],\n  \"stages\": [";
  for (std::size_t i = 0; i < stage_s.size(); ++i)
    s += fmt::format("{}{{\"stage\": \"{}\", \"s\": {}}}", i ? ", " : "", json_escape(stage_s[i].first), stage_s[i].second);
  s += "],\n  \"adapts\": [";
  for (std::size_t i = 0; i < adapts.size(); ++i) {
    const auto& a = adapts[i];
    s += fmt::format("{}\n    {{\"blob\": \"{}\", \"consumer\": \"{}\", \"from\": \"{}\", \"to\": \"{}\", \"descriptor\": \"{}\", \"ms\": {}}}",
                     i ? "," : "", json_escape(a.blob), json_escape(a.consumer), json_escape(a.from_schema),
                     json_escape(a.to_schema), json_escape(a.descriptor), a.ms);
  }
  s += "\n  ],\n  \"input_shapes\": {";
  std::size_t k = 0;
  for (const auto& [name, shape] : input_shapes)
    s += fmt::format("{}\"{}\": [{}]", k++ ? ", " : "", json_escape(name), fmt::join(shape.to_vector(), ", "));
  s += "},\n  \"other_shapes\": [";
  for (std::size_t i = 0; i < other_shapes.size(); ++i) s += (i ? ",\n" : "\n") + other_shapes[i].to_json();
  s += "]\n}\n";
  return s;
}

}  // namespace softneuro
