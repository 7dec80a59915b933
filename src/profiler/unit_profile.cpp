#include "profiler/unit_profile.hpp"

#include "core/childnet.hpp"
#include "core/device.hpp"
#include "core/device_hooks.hpp"
#include "core/executor.hpp"
#include "core/hash.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/thread_pool.hpp"
#include "dprs/dprs.hpp"
#include "profiler/accuracy.hpp"
#include "profiler/calibrate.hpp"
#include "profiler/timing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <chrono>
#include <fnmatch.h>
#include <set>
#include <optional>

namespace softneuro::profiler {

using core::Candidate;

namespace {

bool glob(const std::string& pattern, const std::string& text) {
  return ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
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

}  // namespace

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
  const std::size_t size = b.byte_size();
  // Timing inputs need variety, not mt19937's quality: one draw seeds
  // splitmix64 (mt19937 and uniform_real_distribution took 13% of a ResNet50
  // tuning's first minute).
  uint64_t state = (uint64_t{rng()} << 32) | rng();
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
  };
  if (s.dtype == DType::float32) {
    float* f = b.data_as<float>();
    for (std::size_t i = 0; i < size / 4; ++i) {
      const uint32_t bits = 0x3f800000u | (next() >> 9);  // [1, 2)
      float x;
      std::memcpy(&x, &bits, 4);
      f[i] = 2.0f * x - 3.0f;  // [-1, 1)
    }
  } else if (s.dtype == DType::bfloat16 || s.dtype == DType::float16) {
    // Normal values of magnitude 2^-5 to 2: random bytes made subnormals and
    // products that underflow, whose microcode assists timed a bfloat16
    // depthwise convolution 10x slower than it ran in a net.
    const bool bf16 = s.dtype == DType::bfloat16;
    const unsigned mantissa = bf16 ? 7 : 10, bias = bf16 ? 127 : 15;
    auto* h = static_cast<uint16_t*>(b.data());
    for (std::size_t i = 0; i < size / 2; ++i) {
      const uint32_t r = next();
      const uint32_t exponent = bias - 5 + (r >> 1) % 6, fraction = (r >> 8) & ((1u << mantissa) - 1);
      h[i] = static_cast<uint16_t>(((r & 1u) << 15) | (exponent << mantissa) | fraction);
    }
  } else {
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(next() & 0x3f);
  }
  return b;
}

std::string params_text(const RoutineParams& p) {
  std::string s;
  for (const auto& [k, v] : p) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v);
  return s;
}

bool Rules::schema_allowed(const Schema& s) const {
  if (schemas.empty()) return s.device == Device::cpu && s.dtype == DType::float32;
  return std::any_of(schemas.begin(), schemas.end(), [&](const std::string& p) { return s.matches(p); });
}

bool Rules::candidate_allowed(const core::Candidate& c) const {
  if (!schema_allowed(c.schema)) return false;
  const DType p = c.precision();
  if (p == c.schema.dtype) return true;
  for (Layout l : {Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c})
    if (schema_allowed(Schema{c.schema.device, p, l})) return true;
  return false;
}

bool Rules::refuses_reduced(const std::string& layer, const core::Candidate& c) const {
  if (!reduced_only_for) return false;
  const DType d = c.precision();
  const bool schema_int8 = c.schema.dtype == DType::qint8;
  // A quantised model's own int8 layers keep their int8 schema; quantising
  // float32 inside a routine is this tuning's choice, not the model's.
  return below_float32(d) && !(schema_int8 && reduced_only_for->count(layer));
}

bool Rules::allows(const std::string& layer, const core::Candidate& c) const {
  if (refuses_reduced(layer, c)) return false;
  const std::string& descriptor = c.descriptor;
  for (const auto& r : ban)
    if (glob(r.layer, layer) && glob(r.descriptor, descriptor)) return false;
  bool pinned = false, match = false;
  for (const auto& r : pin)
    if (glob(r.layer, layer)) {
      pinned = true;
      match = match || glob(r.descriptor, descriptor);
    }
  return !pinned || match;
}

const Measured* LayerProfile::best_in(const Schema& s, bool integrated) const {
  const Measured* best = nullptr;
  for (const auto& m : measured)
    if (m.cand.schema == s && (!best || cost(m, integrated) < cost(*best, integrated))) best = &m;
  return best;
}

const Measured* LayerProfile::find(const std::string& descriptor, const RoutineParams& params) const {
  for (const auto& m : measured)
    if (m.cand.descriptor == descriptor && m.params == params) return &m;
  return nullptr;
}

FusedPair* LayerProfile::fused_pair(const Measured* previous, const Measured* mine) {
  if (!previous || !mine) return nullptr;
  for (auto& f : fused_with_previous)
    if (f.descriptor == mine->cand.descriptor && f.params == mine->params &&
        f.previous_descriptor == previous->cand.descriptor && f.previous_params == previous->params)
      return &f;
  return nullptr;
}

void update_context_ratios(std::vector<LayerProfile>& profiles) {
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 1.0 : v[v.size() / 2];
  };
  auto ratio = [](const Measured& m) { return m.integrated_ms > 0 && m.unit_ms > 0 ? m.integrated_ms / m.unit_ms : 0.0; };
  std::vector<double> all;
  std::map<std::pair<std::string, std::string>, std::vector<double>> routine_ratios;  // (layer type, descriptor)
  for (auto& p : profiles)
    for (const auto& m : p.measured)
      if (const double r = ratio(m); r > 0) {
        all.push_back(r);
        routine_ratios[{p.layer->type, m.cand.descriptor}].push_back(r);
      }
  std::map<std::pair<std::string, std::string>, double> routine_ratio;
  for (const auto& [key, v] : routine_ratios) routine_ratio[key] = median(v);
  const double global = std::max(1.0, median(all));
  for (auto& p : profiles) {
    // The layer's measured ratios, and each over its routine's (the layer's own
    // share of the slowdown).
    std::vector<double> mine, layer_share;
    for (const auto& m : p.measured)
      if (const double r = ratio(m); r > 0) {
        mine.push_back(r);
        layer_share.push_back(r / routine_ratio.at({p.layer->type, m.cand.descriptor}));
      }
    // Never below 1: a candidate alone is not slower than in a net, and
    // estimating it cheaper than measured would chase unmeasured candidates.
    p.context_ratio = mine.empty() ? global : std::max(1.0, median(mine));
    const double share = median(layer_share);
    for (auto& m : p.measured) {
      auto its = routine_ratio.find({p.layer->type, m.cand.descriptor});
      m.context_ratio = m.integrated_ms > 0 || mine.empty() || its == routine_ratio.end()
                            ? 0
                            : std::max(1.0, its->second * share);
    }
  }
}

Profiler::Profiler(detail::WorkingModel& net, const TuneOptions& options, Rules rules, std::string key_prefix, Progress progress)
    : net_(net),
      opt_(options),
      rules_(std::move(rules)),
      cache_(options.cache_dir.empty() ? ProfileCache::default_dir() : options.cache_dir),
      key_prefix_(std::move(key_prefix)),
      progress_(std::move(progress)) {
  cache_.keep_build(library_build());
}

const Profiler::PlannedBlob& Profiler::planned_blob(const std::string& blob) const {
  auto it = planned_blobs_.find(blob);
  if (it == planned_blobs_.end()) throw Error("no layer of the executor's plan reads or writes this blob", net_.file, blob, "blobs");
  return it->second;
}

double Profiler::budget_ms() const {
  if (opt_.time_budget_s <= 0) return opt_.unit_budget_ms;
  double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return spent > opt_.time_budget_s ? 0.0 : opt_.unit_budget_ms;  // over budget: one timed run each
}

std::string Profiler::signature(const LayerInfo& info) const {
  std::string shapes;
  for (const auto& s : info.input_shapes) shapes += s.to_string();
  return fmt::format("{}({}){}", info.layer->type, core::describe_params(*info.layer), shapes);
}

bool weights_stream(const LayerInfo& info) {
  if (!info.layer) return false;
  std::size_t bytes = 0;
  for (const auto& [name, w] : info.layer->weights) bytes += w.byte_size();
  return bytes >= kStreamedWeightBytes;
}

std::optional<double> Profiler::cached(const std::string& key, bool* from_disk) {
  auto hit = cache_.find(key);
  if (!hit) return std::nullopt;
  const bool disk = !cache_.is_fresh(key);
  cache_hits_ += disk;
  if (from_disk) *from_disk = disk;
  return disk ? *hit * cache_drift() : *hit;
}

double Profiler::time_routine(const Routine& r, const Schema& s, const LayerInfo& info, const RoutineParams& params,
                              const std::string& key, double cutoff_ms, bool* from_disk, bool fresh) {
  if (auto hit = fresh ? std::nullopt : cached(key, from_disk)) return *hit;
  cache_remeasured_ += cache_.untrusted(key);
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
double Profiler::time_prepared(PreparedRoutine& prepared, const Schema& in, const Schema& out, const LayerInfo& info,
                               const std::string& key, double cutoff_ms, const Schema* first_in) {
  std::vector<Blob> ins, outs;
  for (const auto& shape : info.input_shapes) ins.push_back(random_blob(shape, ins.empty() && first_in ? *first_in : in, rng_));
  for (const auto& shape : info.output_shapes) outs.push_back(random_blob(shape, out, rng_));
  // A gather's indices are whole numbers within the gathered dim (random
  // values would be refused): random rows, as token ids read them.
  const std::string& type = info.layer ? info.layer->type : std::string();
  // (A gather whose table is its weight "table" reads the indices alone.)
  const bool table_weight = type == "gather" && ins.size() == 1 && info.layer->find_weight("table");
  if ((type == "gather" || type == "gather_elements" || type == "gather_nd") && (ins.size() == 2 || table_weight) &&
      in.device == Device::cpu && in.dtype == DType::float32 && in.layout == Layout::nchw) {
    const Shape& data = table_weight ? info.layer->weight("table").shape() : info.input_shapes[0];
    const Shape& is = info.input_shapes.back();
    // The dim index i reads: gather_nd's tuples name dims batch_dims, batch_dims + 1, ...
    auto dim_of = [&](int64_t i) -> int64_t {
      if (type != "gather_nd") return data[core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", 0), data.rank())];
      const int64_t k = is.rank() ? is[is.rank() - 1] : 1;
      return data[static_cast<int>(info.layer->get_int("batch_dims", 0) + i % std::max<int64_t>(1, k))];
    };
    float* idx = ins.back().data_as<float>();
    for (int64_t i = 0; i < ins.back().numel(); ++i)
      idx[i] = static_cast<float>(std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(1, dim_of(i)) - 1)(rng_));
  }
  // Likewise roi_align's batch indices and scatter_elements' indices.
  const int index_input = type == "roi_align" ? 2 : type == "scatter_elements" ? 1 : -1;
  if (index_input >= 0 && static_cast<int>(ins.size()) > index_input && in.device == Device::cpu &&
      in.dtype == DType::float32 && in.layout == Layout::nchw) {
    const Shape& data = info.input_shapes[0];
    const int64_t dim = type == "roi_align"
                            ? data[0]
                            : data[core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", 0), data.rank())];
    Blob& b = ins[static_cast<std::size_t>(index_input)];
    for (int64_t i = 0; i < b.numel(); ++i)
      b.data_as<float>()[i] = static_cast<float>(std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(1, dim) - 1)(rng_));
  }
  // scatter_nd's index tuples: element i of a tuple of k names data dim i % k.
  if (type == "scatter_nd" && ins.size() == 3 && in.device == Device::cpu && in.dtype == DType::float32 &&
      in.layout == Layout::nchw) {
    const Shape& data = info.input_shapes[0];
    const Shape& is = info.input_shapes[1];
    const int64_t k = is.rank() ? std::max<int64_t>(1, is[is.rank() - 1]) : 1;
    Blob& b = ins[1];
    for (int64_t i = 0; i < b.numel(); ++i) {
      const int64_t dim = data.rank() ? data[static_cast<int>(std::min<int64_t>(i % k, data.rank() - 1))] : 1;
      b.data_as<float>()[i] = static_cast<float>(std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(1, dim) - 1)(rng_));
    }
  }
  // A loop runs while its condition holds: held true, and a trip count read at
  // run time is one iteration (its real count is the data's).
  if (type == "loop" && in.device == Device::cpu && in.dtype == DType::float32 && !ins.empty()) {
    ins[0].data_as<float>()[0] = 1.0f;
    if (core::loop_ports(*info.layer, ins.size()).trip_count_input) ins[1].data_as<float>()[0] = 1.0f;
  }
  // A step that adds its result onto an input gets that input's memory for its
  // output, as the executor gives it (else it copies the input in first).
  const int accumulates = prepared.output_accumulates();
  if (accumulates >= 0 && static_cast<std::size_t>(accumulates) < ins.size() && outs.size() == 1 &&
      ins[static_cast<std::size_t>(accumulates)].byte_size() == outs[0].byte_size()) {
    const Blob& acc = ins[static_cast<std::size_t>(accumulates)];
    Blob shared = Blob::view(const_cast<void*>(acc.data()), outs[0].shape(), outs[0].dtype(), outs[0].layout());
    shared.quant() = outs[0].quant();
    outs[0] = std::move(shared);
  }
  std::vector<const Blob*> in_ptrs;
  std::vector<Blob*> out_ptrs;
  for (auto& b : ins) in_ptrs.push_back(&b);
  for (auto& b : outs) out_ptrs.push_back(&b);
  Blob workspace = random_blob(Shape{static_cast<int64_t>(prepared.workspace_bytes())},
                               Schema{prepared.workspace_device(), DType::quint8, Layout::nchw}, rng_);
  RunArgs args{in_ptrs, out_ptrs, prepared.workspace_bytes() ? workspace.data() : nullptr, &core::global_pool()};
  const Device dev = in.device != Device::cpu ? in.device : out.device;
  const DeviceMemory* device = dev == Device::cpu ? nullptr : device_memory(dev);
  // A routine wholly on a device: its device time per run, as a run of the net
  // replays its runs of device steps as graphs; neither one run's
  // launch-and-wait latency nor a host launch each (both priced small layers
  // far above their cost in a run). The device is held busy while the host
  // queues the runs, and their span is read off device markers (timing
  // replays of a recorded graph stalled on some cuDNN algorithms).
  // Else: the work, synchronised.
  const int queued = device && in.device != Device::cpu && out.device != Device::cpu ? 8 : 1;
  const core::DeviceHooks* hooks = queued > 1 ? core::device_hooks(dev) : nullptr;
  double ms = 0;
  if (hooks && hooks->hold && hooks->mark && hooks->elapsed_ms) {
    // The hold outlasts the host's queueing of the runs (timed once here).
    prepared.run(args);  // libraries load their kernels lazily
    device->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < queued; ++k) prepared.run(args);
    const double launch_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    device->synchronize();
    const double hold_ms = std::min(50.0, 2 * launch_ms + 0.02);
    // Each sample: the runs' span on the device, or (a hold or marker refused) their wall time.
    ms = measure_samples([&] {
                        const auto w0 = std::chrono::steady_clock::now();
                        void* from = hooks->hold(hold_ms) ? hooks->mark() : nullptr;
                        for (int k = 0; k < queued; ++k) prepared.run(args);
                        void* to = from ? hooks->mark() : nullptr;
                        const double span = from ? hooks->elapsed_ms(from, to) : 0;  // releases both
                        device->synchronize();
                        return to && span > 0 ? span
                                              : std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
                      }, budget_ms(), 3, 200, cutoff_ms * queued).median_ms / queued;
  } else if (!device && weights_stream(info)) {
    // Weights that come from the shared cache in a run of the net, as they do
    // there; the inputs hot, as a previous layer leaves them. Not an input the
    // output accumulates onto: read here, its lines sat in this one core's
    // cache, and the step's threads writing them took twice its time in a
    // run (a convolution summing onto ResNet's residual: 0.57 ms here, 0.27 in the net).
    ms = measure_samples([&] {
           evict_private_caches();
           uint64_t sum = 0;
           for (std::size_t k = 0; k < in_ptrs.size(); ++k) {
             if (static_cast<int>(k) == accumulates && outs.size() == 1 && outs[0].data() == in_ptrs[k]->data()) continue;
             const Blob* b = in_ptrs[k];
             for (std::size_t i = 0; i < b->byte_size(); i += 64) sum += static_cast<const uint8_t*>(b->data())[i];
           }
           touched_ += sum;
           const auto t0 = std::chrono::steady_clock::now();
           prepared.run(args);
           return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
         }, budget_ms(), 3, 200, cutoff_ms).median_ms;
  } else {
    ms = measure([&] {
           for (int k = 0; k < queued; ++k) prepared.run(args);
           if (device) device->synchronize();
         }, budget_ms(), 3, 200, cutoff_ms * queued).median_ms / queued;
  }
  ++measurements_;
  cache_.put(key, ms);
  window_keys_.push_back(key);
  return ms;
}

void Profiler::close_load_window() {
  const CpuClock now = cpu_clock();
  const double load = others_cpus(window_start_, now);
  for (const auto& k : window_keys_) cache_.set_load(k, load);
  window_keys_.clear();
  window_start_ = now;
}

std::string quant_digest(const std::vector<QuantParams>& ins, const std::vector<QuantParams>& outs) {
  std::string bytes;
  for (const auto* list : {&ins, &outs}) {
    for (const auto& q : *list) {
      bytes += fmt::format("{}|", q.axis);
      for (float v : q.scales) bytes += fmt::format("{:a},", v);
      bytes += '|';
      for (auto z : q.zero_points) bytes += fmt::format("{},", static_cast<int>(z));
      bytes += ';';
    }
    bytes += '/';
  }
  return fmt::format("{:016x}", core::xxh64(bytes.data(), bytes.size()));
}

std::string Profiler::candidate_key(const LayerInfo& info, const Candidate& c, const RoutineParams& params) const {
  std::string key = fmt::format("{}|{}|{}|{}", key_prefix_, signature(info), c.descriptor, params_text(params));
  if (c.schema.dtype == DType::qint8) key += "|q" + quant_digest(info.input_quant, info.output_quant);
  // Measured on normal half-precision values (random_blob): times cached from
  // random bytes, subnormals among them, are not these.
  if (c.schema.dtype == DType::bfloat16 || c.schema.dtype == DType::float16) key += "|normal";
  // Measured with the weights out of the core's cache (time_prepared): times
  // cached with them hot are not these.
  if (c.schema.device == Device::cpu && weights_stream(info)) key += "|cold";
  return key;
}

bool Profiler::remeasure(const LayerInfo& info, Measured& m, double tolerance, double* factor) {
  const double ms = time_routine(*m.cand.routine, m.cand.schema, info, m.params, m.cache_key, 0, nullptr, true);
  const double was = m.unit_ms;
  m.unit_ms = ms;
  m.from_disk = false;
  ++cache_remeasured_;
  --cache_hits_;
  if (factor) *factor = std::max(ms, was) / std::max(1e-12, std::min(ms, was));
  return std::abs(ms - was) > tolerance * std::max(ms, was);
}

/// One spot check off by more than kWildFactor says the cache describes another
/// machine: every layer is checked from then on. Steps under kJitterMs swing
/// further between runs on a shared 2-vCPU VM (a 10 us layer measured 68 us, a
/// 52 us one 9 us), and one such swing had a warm recogniser tuning measure 754
/// cached times again: for them only kTinyWildFactor counts. (A uniform lie,
/// or a drifted machine, is caught by the quarter of checks off.)
constexpr double kWildFactor = 4, kTinyWildFactor = 20, kJitterMs = 0.1;

void Profiler::spot_check_cached(const LayerInfo& info, std::vector<Measured>& measured) {
  std::map<std::string, std::vector<Measured*>> by_schema;
  for (auto& m : measured)
    if (m.from_disk && !m.cache_key.empty()) by_schema[m.cand.schema.to_string()].push_back(&m);
  if (by_schema.empty() || (!spot_all_ && spot_layers_++ % kSpotCheckEvery != 0)) return;
  bool wild = false;  // off by more than noise ever is (4x)
  const double applied = cache_drift();  // what this layer's cached times were scaled by
  for (auto& [schema, cached] : by_schema) {
    Measured* best = *std::min_element(cached.begin(), cached.end(),
                                       [](const Measured* a, const Measured* b) { return a->unit_ms < b->unit_ms; });
    auto again = [&](Measured& m) { return remeasure(info, m, 0.25); };
    ++spot_checks_;
    double factor = 1;
    const double was = best->unit_ms;
    const bool off = remeasure(info, *best, 0.25, &factor);
    if (was > 0 && best->unit_ms > 0) drift_log_.push_back(std::log(best->unit_ms / (was / applied)));
    if (!off) continue;
    ++spot_off_;
    wild = wild || factor > (std::max(was, best->unit_ms) >= kJitterMs ? kWildFactor : kTinyWildFactor);
    core::info("{}: cached time of {} off ({:.4f} ms cached, {:.4f} now): measuring its schema's {} cached candidates "
               "again", info.layer->name, best->cand.descriptor, was, best->unit_ms, cached.size() - 1);
    for (Measured* m : cached)
      if (m != best) again(*m);
  }
  // The times of this layer read before its checks, scaled as the checks now say.
  if (const double now = cache_drift(); now != applied)
    for (auto& m : measured)
      if (m.from_disk && !m.cache_key.empty()) m.unit_ms *= now / applied;
  if (!spot_all_ && (wild || (spot_checks_ >= 16 && spot_off_ * 4 > spot_checks_))) {
    spot_all_ = true;
    core::info("{} of {} spot-checked cached times were off: every layer's are checked from here on", spot_off_,
               spot_checks_);
  }
}

double Profiler::cache_drift() const {
  if (drift_log_.size() < 3) return 1.0;
  std::vector<double> v = drift_log_;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  const double d = std::exp(v[v.size() / 2]);
  // No machine speeds up or slows down 4x: such a cache describes another one,
  // and its times are measured again (the spot checks find them off), not scaled.
  return d > 4 || d < 0.25 ? 1.0 : d;
}

/// How far a group's spot-checked time may lie from the cached one (a half):
/// steps timed in microseconds vary by a quarter between runs on a shared
/// 2-vCPU machine, and at a quarter most groups failed on that noise alone.
constexpr double kGroupCheckTolerance = 0.5;

void Profiler::check_in_group(const std::string& group, const std::function<bool()>& measure_again) {
  auto it = spot_checked_.find(group);
  if (it == spot_checked_.end()) spot_checked_[group] = !measure_again();
  else if (!it->second) measure_again();
}

void Profiler::spot_check_grouped(const LayerInfo& info, std::vector<Measured>& measured) {
  for (auto& m : measured)
    if (m.from_disk && !m.cache_key.empty())
      check_in_group(info.layer->type + "|" + m.cand.descriptor, [&] { return remeasure(info, m, kGroupCheckTolerance); });
}

void Profiler::record_adapt_in_context(const std::string& blob, const std::string& consumer, const Schema& from,
                                       const Schema& to, double ms) {
  adapts_in_context_[fmt::format("{}|{}|{}|{}", blob, consumer, from.to_string(), to.to_string())] = ms;
}

std::optional<double> Profiler::adapt_in_context(const std::string& blob, const std::string& consumer,
                                                 const Schema& from, const Schema& to) const {
  auto it = adapts_in_context_.find(fmt::format("{}|{}|{}|{}", blob, consumer, from.to_string(), to.to_string()));
  if (it == adapts_in_context_.end()) return std::nullopt;
  return it->second;
}

AdaptPick Profiler::adapt_cost(const Shape& shape, const QuantParams& quant, const Schema& from, const Schema& to) {
  if (from == to) return {0.0, {}, {}};
  const Layer l = core::adapt_layer("adapt", "x", "y", from, to);
  const core::PlanOptions options = net_.plan_options();  // (its registry alive while measured)
  const LayerInfo info = core::adapt_info(l, shape, quant, options);
  struct Timed {
    const Candidate* cand;
    RoutineParams params;
    std::string key;
    double ms;
    bool from_disk;
  };
  // Adapt inputs are in the source schema: timed with blobs read in `from`.
  auto measure = [&](Timed& t) {
    cache_remeasured_ += cache_.untrusted(t.key);
    auto prepared = t.cand->routine->prepare(info, to, t.params);
    t.ms = time_prepared(*prepared, from, to, info, t.key);
  };
  const auto cands = net_.routines()->candidates(info, to);
  std::vector<Timed> timed;
  for (const auto& c : cands) {
    if (!c.support.ok) continue;
    for (const auto& params : combinations(c.routine->param_space(info, to))) {
      std::string key = fmt::format("{}|adapt{}|{}|{}{}", key_prefix_, shape.to_string(), from.to_string(), c.descriptor,
                                    params.empty() ? std::string() : fmt::format("|{}", params_text(params)));
      if (from.dtype == DType::qint8 || to.dtype == DType::qint8) key += fmt::format("|q{}", quant_digest({quant}, {}));
      Timed t{&c, params, key, 0, false};
      if (auto hit = cache_.find(key)) {
        t.from_disk = !cache_.is_fresh(key);
        cache_hits_ += t.from_disk;
        t.ms = t.from_disk ? *hit * cache_drift() : *hit;
      } else {
        measure(t);
      }
      timed.push_back(std::move(t));
    }
  }
  // Cached adapt times are spot-checked once per adapt routine and source
  // schema, not per shape (a net asks for over a thousand (shape, schema)
  // pairs, each measured in microseconds): the first cached time of each met
  // is measured again, and where it is off by more than half, every cached
  // time of that routine and schema is, at every shape met later too.
  auto again = [&](Timed& t) {
    const double was = t.ms;
    measure(t);
    t.from_disk = false;
    --cache_hits_;
    ++cache_remeasured_;
    return std::abs(t.ms - was) > kGroupCheckTolerance * std::max(t.ms, was);
  };
  for (auto& t : timed)
    if (t.from_disk) check_in_group("adapt|" + t.cand->descriptor + "|" + from.to_string(), [&] { return again(t); });
  AdaptPick best;
  for (const auto& t : timed)
    if (t.ms < best.ms) best = {t.ms, t.cand->descriptor, t.params};
  return best;
}

std::vector<Measured> Profiler::measure_candidates(const LayerInfo& info, const std::vector<Candidate>& cands, int depth) {
  std::vector<Measured> out;
  // The reference gives way to a faster routine of its own dtype only: a
  // float32-only path (the accuracy budget's fallback in a hybrid tuning)
  // needs a float32 candidate for every layer.
  auto has_fast = [&](DType dtype) {
    return std::any_of(cands.begin(), cands.end(), [&](const Candidate& c) {
      return c.routine->algorithm() != "ref" && c.schema.dtype == dtype;
    });
  };
  CutOff cutoff;
  auto measure_one = [&](const Candidate& c) {
    const std::string schema_text = c.schema.to_string();
    search_params(c.routine->param_space(info, c.schema), [&](const RoutineParams& params) {
      std::vector<core::RoutineChoice> children;
      double ms = childnet_cost(*c.routine, c.schema, info, params, children, depth);
      std::string key;
      bool from_disk = false;
      if (ms < 0) {
        key = candidate_key(info, c, params);
        ms = time_routine(*c.routine, c.schema, info, params, key, cutoff.limit(schema_text), &from_disk);
      }
      if (ms < kInf) {
        out.push_back({c, params, ms, 0, std::move(children), key, from_disk});
        cutoff.seen(schema_text, ms);
      }
      return ms;
    });
  };
  std::vector<const Candidate*> skipped;
  for (const auto& c : cands) {
    if (opt_.skip_reference && c.routine->algorithm() == "ref" && has_fast(c.schema.dtype)) {
      skipped.push_back(&c);
      continue;
    }
    measure_one(c);
  }
  // The faster routines of a dtype may all fail here (a childnet whose children
  // cannot run, a prepare that throws): the reference stands in for them then.
  for (const Candidate* c : skipped)
    if (std::none_of(out.begin(), out.end(), [&](const Measured& m) { return m.cand.schema.dtype == c->schema.dtype; }))
      measure_one(*c);
  std::stable_sort(out.begin(), out.end(), [](const Measured& a, const Measured& b) { return a.unit_ms < b.unit_ms; });
  return out;
}

/// The unit cost of a childnet candidate (-1 when the routine is not a childnet
/// here; kInf when its children cannot run) and, in `choices`, its children's
/// routines. Solved innermost-first: every child's candidates are measured (a
/// childnet child recursively), then the children form a cost graph of their
/// own, entered and left in the candidate's schema, which DPRS solves with the
/// adapts between child schemas priced; its total is the candidate's unit cost.
double Profiler::childnet_cost(const Routine& r, const Schema& schema, const LayerInfo& info, const RoutineParams& params,
                               std::vector<core::RoutineChoice>& choices, int depth) {
  std::optional<Childnet> cn;
  try {
    cn = r.childnet(info, schema, params);
  } catch (const std::exception& e) {
    core::info("{}: {} cannot build its childnet with ({}): {}", info.layer->name, make_descriptor(schema, r.algorithm()),
               params_text(params), e.what());
    return kInf;
  }
  if (!cn) return -1;
  if (depth > 8) return kInf;
  // Each child as the plan would tell it (core::child_shapes).
  std::vector<core::ChildShapes> shapes;
  try {
    shapes = core::child_shapes(*cn, info);
  } catch (const std::exception& e) {
    core::info("{}: the childnet of {} is inconsistent: {}", info.layer->name, make_descriptor(schema, r.algorithm()),
               e.what());
    return kInf;
  }
  std::map<std::string, Shape> shape;  // every blob of the childnet
  for (std::size_t i = 0; i < cn->inputs.size(); ++i) shape[cn->inputs[i]] = info.input_shapes[i];
  for (std::size_t k = 0; k < cn->layers.size(); ++k)
    for (std::size_t o = 0; o < cn->layers[k].outputs.size(); ++o) shape[cn->layers[k].outputs[o]] = shapes[k].outputs[o];
  const std::shared_ptr<const core::RoutineRegistry> routines = net_.routines();
  const core::RoutineRegistry& registry = *routines;
  std::vector<LayerInfo> infos(cn->layers.size());
  std::vector<std::vector<Measured>> options(cn->layers.size());
  for (std::size_t k = 0; k < cn->layers.size(); ++k) {
    const Layer& child = cn->layers[k];
    LayerInfo& ci = infos[k];
    ci.layer = &child;
    ci.input_shapes = shapes[k].inputs;
    ci.output_shapes = shapes[k].outputs;
    ci.input_quant = shapes[k].input_quant;
    ci.output_quant = shapes[k].output_quant;
    ci.keep_nan = info.keep_nan;
    ci.threads = info.threads;
    ci.routines = info.routines;
    ci.memory_limit = info.memory_limit;
    std::vector<Candidate> cands;
    for (auto& c : registry.candidates(ci))
      if (c.support.ok && (rules_.candidate_allowed(c) || (c.schema == cn->schemas[k] && c.precision() == c.schema.dtype)) &&
          rules_.allows(child.name, c))
        cands.push_back(std::move(c));
    options[k] = measure_candidates(ci, cands, depth + 1);
    spot_check_grouped(ci, options[k]);  // the childnet's cost is its children's
    if (options[k].empty()) return kInf;
  }
  // The children's cost graph: node 0 the parent's inputs arriving in `schema`,
  // one node per child, a last node the parent's outputs leaving in `schema`.
  std::vector<Schema> schemas{schema};
  auto index = [&](const Schema& s) {
    auto it = std::find(schemas.begin(), schemas.end(), s);
    if (it != schemas.end()) return static_cast<int>(it - schemas.begin());
    schemas.push_back(s);
    return static_cast<int>(schemas.size()) - 1;
  };
  for (const auto& o : options)
    for (const auto& m : o) index(m.cand.schema);
  const int S = static_cast<int>(schemas.size());
  dprs::CostGraph g;
  g.num_schemas = S;
  auto boundary = [&] {
    std::vector<double> cost(static_cast<std::size_t>(S), kInf);
    cost[0] = 0;
    return g.add_node(cost);
  };
  auto add_edge = [&](int from, int to, const Shape& sh) {
    std::vector<double> adapt(static_cast<std::size_t>(S * S));
    for (int a = 0; a < S; ++a)
      for (int b = 0; b < S; ++b)
        adapt[static_cast<std::size_t>(a * S + b)] = adapt_cost(sh, {}, schemas[static_cast<std::size_t>(a)], schemas[static_cast<std::size_t>(b)]).ms;
    g.add_edge(from, to, std::move(adapt));
  };
  std::map<std::string, int> producer;
  const int entry = boundary();
  for (const auto& i : cn->inputs) producer[i] = entry;
  std::vector<int> node(cn->layers.size());
  // A child reading the layer's inputs or writing its outputs computes in the
  // layer's schema (or the one its childnet gives it): the executor converts
  // the layer's inputs straight into that child's schema and its consumers read
  // that child's outputs, so the adapts the outer path prices are the ones that run.
  auto on_boundary = [&](const Layer& child) {
    for (const auto& i : child.inputs)
      if (std::find(cn->inputs.begin(), cn->inputs.end(), i) != cn->inputs.end()) return true;
    for (const auto& o : child.outputs)
      if (std::find(cn->outputs.begin(), cn->outputs.end(), o) != cn->outputs.end()) return true;
    return false;
  };
  for (std::size_t k = 0; k < cn->layers.size(); ++k) {
    std::vector<double> cost(static_cast<std::size_t>(S), kInf);
    const bool boundary_child = on_boundary(cn->layers[k]);
    for (const auto& m : options[k]) {
      if (boundary_child && !(m.cand.schema == schema) && !(m.cand.schema == cn->schemas[k])) continue;
      auto& c = cost[static_cast<std::size_t>(index(m.cand.schema))];
      c = std::min(c, m.unit_ms);
    }
    node[k] = g.add_node(std::move(cost));
    for (const auto& i : cn->layers[k].inputs) add_edge(producer.at(i), node[k], shape.at(i));
    for (const auto& o : cn->layers[k].outputs) producer[o] = node[k];
  }
  const int exit = boundary();
  for (const auto& o : cn->outputs) {
    auto it = producer.find(o);
    if (it == producer.end()) return kInf;
    add_edge(it->second, exit, shape.at(o));
  }
  const dprs::Solution sol = dprs::solve(g);
  if (!sol.feasible) return kInf;
  for (std::size_t k = 0; k < cn->layers.size(); ++k) {
    const Schema& s = schemas[static_cast<std::size_t>(sol.schema[static_cast<std::size_t>(node[k])])];
    const Measured* best = nullptr;
    for (const auto& m : options[k])
      if (m.cand.schema == s && (!best || m.unit_ms < best->unit_ms)) best = &m;
    choices.push_back({cn->layers[k].name, best->cand.descriptor, best->params, best->unit_ms, 0, best->children});
  }
  return sol.total;
}

void Profiler::requantise(std::vector<LayerProfile>& profiles) {
  const core::RoutinePath untuned;
  const core::Plan plan = core::build_plan(net_.graph, net_.tuning, net_.shapes, &untuned, net_.plan_options());
  for (auto& p : profiles) {
    const LayerInfo* planned = plan.layer_info(p.layer->name);
    if (!planned) continue;
    p.info.input_quant = planned->input_quant;
    p.info.output_quant = planned->output_quant;
    for (std::size_t i = 0; i < p.layer->inputs.size() && i < planned->input_quant.size(); ++i)
      if (auto b = planned_blobs_.find(p.layer->inputs[i]); b != planned_blobs_.end()) b->second.quant = planned->input_quant[i];
    for (std::size_t i = 0; i < p.layer->outputs.size() && i < planned->output_quant.size(); ++i)
      if (auto b = planned_blobs_.find(p.layer->outputs[i]); b != planned_blobs_.end()) b->second.quant = planned->output_quant[i];
  }
}

std::vector<LayerProfile> Profiler::unit_profile() {
  const std::shared_ptr<const core::RoutineRegistry> routines = net_.routines();
  const core::RoutineRegistry& registry = *routines;
  std::vector<LayerProfile> profiles;
  int total = 0;
  for (const auto& l : net_.graph.layers) total += l.type != "constant";
  int done = 0;
  // Each layer as the executor tells its routines about it (shapes, the
  // quantisation of its blobs, constants' included, keep_nan): read from its
  // plan, never derived again here.
  const core::RoutinePath untuned;
  const core::Plan plan = core::build_plan(net_.graph, net_.tuning, net_.shapes, &untuned, net_.plan_options());
  for (const auto& layer : net_.graph.layers) {
    if (layer.type == "constant") {
      // A constant the net returns (a value computed from shapes) has its edge to the output.
      for (const auto& o : layer.outputs)
        if (auto s = net_.shapes.find(o); s != net_.shapes.end()) planned_blobs_.emplace(o, PlannedBlob{s->second, QuantParams{}});
      continue;
    }
    LayerProfile p;
    p.layer = &layer;
    const LayerInfo* planned = plan.layer_info(layer.name);
    if (!planned) throw Error("the plan has no step for this layer", net_.file, layer.name, "layers");
    p.info = *planned;
    p.info.layer = &layer;
    for (std::size_t i = 0; i < layer.inputs.size() && i < p.info.input_shapes.size(); ++i)
      planned_blobs_[layer.inputs[i]] = {p.info.input_shapes[i],
                                         i < p.info.input_quant.size() ? p.info.input_quant[i] : QuantParams{}};
    for (std::size_t i = 0; i < layer.outputs.size() && i < p.info.output_shapes.size(); ++i)
      planned_blobs_[layer.outputs[i]] = {p.info.output_shapes[i],
                                          i < p.info.output_quant.size() ? p.info.output_quant[i] : QuantParams{}};
    progress_("unit profiling", done++, total, layer.name);
    const auto layer_start = std::chrono::steady_clock::now();
    const int measured_before = measurements_;
    std::vector<Candidate> cands;
    bool refused_reduced = false;  // a candidate only the no-samples rule refused
    for (auto& c : registry.candidates(p.info)) {
      if (!c.support.ok) {
        core::debug("{}: {} is not a candidate: {}", layer.name, c.descriptor, c.support.reason);
        continue;
      }
      if (!rules_.candidate_allowed(c)) continue;
      if (rules_.allows(layer.name, c)) cands.push_back(std::move(c));
      else refused_reduced = refused_reduced || rules_.refuses_reduced(layer.name, c);
    }
    if (cands.empty() && !rules_.schemas.empty()) {
      // The user's schemas leave this layer nothing (e.g. qint8-only and no qint8
      // routine for its type): it falls back to float32 on the CPU rather than failing.
      for (auto& c : registry.candidates(p.info))
        if (c.support.ok && c.schema.device == Device::cpu && c.precision() == DType::float32 &&
            rules_.allows(layer.name, c))
          cands.push_back(std::move(c));
      if (!cands.empty() && !refused_reduced)  // (refused for want of samples: tune() says so once)
        core::warn("layer '{}' ({}): no routine in the schemas given supports it; it stays float32 on the CPU",
                   layer.name, layer.type);
    }
    p.measured = measure_candidates(p.info, cands, 0);
    spot_check_cached(p.info, p.measured);
    std::stable_sort(p.measured.begin(), p.measured.end(),
                     [](const Measured& a, const Measured& b) { return a.unit_ms < b.unit_ms; });
    close_load_window();
    if (p.measured.empty())
      throw Error(fmt::format("no routine can run this {} layer within the schemas and rules given{}", layer.type,
                              refused_reduced ? " (below float32 it needs samples of your own to check accuracy on: "
                                                "--calibration DIR, or --accuracy none to allow it unchecked)"
                                              : ""),
                  net_.file, layer.name, "routine");
    core::debug("unit profiling {}: {} candidates, {} measurements, {:.2f} s", layer.name, p.measured.size(),
                measurements_ - measured_before,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - layer_start).count());
    profiles.push_back(std::move(p));
  }
  progress_("unit profiling", total, total, "");
  return profiles;
}

void Profiler::measure_fused_pairs(std::vector<LayerProfile>& profiles) {
  std::map<std::string, int> readers;
  for (const auto& l : net_.graph.layers)
    for (const auto& i : l.inputs) ++readers[i];
  for (const auto& o : net_.graph.outputs) readers[o] += 2;  // the caller reads it too
  for (std::size_t i = 1; i < profiles.size(); ++i) {
    progress_("fused pairs", static_cast<int>(i), static_cast<int>(profiles.size()), profiles[i].layer->name);
    const LayerProfile& a = profiles[i - 1];
    LayerProfile& b = profiles[i];
    b.fused_with_previous.clear();
    // The plan fuses a step with the one right after it that alone reads its one output, once.
    if (a.layer->outputs.size() != 1) continue;
    const std::string& between = a.layer->outputs[0];
    const auto& ins = b.layer->inputs;
    if (readers[between] != 1 || std::count(ins.begin(), ins.end(), between) != 1) continue;
    const auto reads = static_cast<std::size_t>(std::find(ins.begin(), ins.end(), between) - ins.begin());
    // The step reads a's inputs, then b's others.
    LayerInfo pair = b.info;
    pair.layer = a.layer;  // whose weights the step streams (weights_stream)
    pair.input_shapes = a.info.input_shapes;
    for (std::size_t k = 0; k < b.info.input_shapes.size(); ++k)
      if (k != reads) pair.input_shapes.push_back(b.info.input_shapes[k]);
    // Of a routine with several parameter sets (cpu/direct's tiles: up to 28 per
    // layer), the pairs of its fastest two alone: a pair is priced where a's
    // routine is worth choosing, and each measurement adds to the tuning's time.
    std::vector<char> pairs_a(a.measured.size(), 0);
    {
      std::map<std::string, int> seen;  // a.measured is fastest first
      for (std::size_t k = 0; k < a.measured.size(); ++k) pairs_a[k] = ++seen[a.measured[k].cand.descriptor] <= 2;
    }
    for (const auto& mb : b.measured) {
      if (mb.unit_ms == kInf || !mb.children.empty()) continue;
      for (std::size_t ka = 0; ka < a.measured.size(); ++ka) {
        const Measured& ma = a.measured[ka];
        // (Across two schemas where b's routine computes a's output in its own: the adapt between them runs nothing.)
        if (!pairs_a[ka] || ma.unit_ms == kInf || !ma.children.empty() || ma.cand.schema.device != mb.cand.schema.device)
          continue;
        bool fuses = false;
        try {
          fuses = mb.cand.routine->fuses_previous(a.info, *ma.cand.routine, ma.params, b.info, mb.cand.schema, mb.params);
        } catch (const std::exception&) {
        }
        if (!fuses) continue;
        FusedPair f{ma.cand.descriptor, mb.cand.descriptor, ma.params, mb.params, ma.cand.schema, mb.cand.schema, kInf, 0,
                    ma.cache_key + "+" + mb.cache_key};
        // A pair read from the cache beside members measured now (fresh, or
        // spot-checked and found off) would compare unevenly: measured again.
        const bool stale = cache_.find(f.cache_key) && !cache_.is_fresh(f.cache_key) && !(ma.from_disk && mb.from_disk);
        cache_remeasured_ += stale;
        auto measure = [&] {
          std::unique_ptr<PreparedRoutine> prepared;
          try {
            prepared = mb.cand.routine->prepare_with_previous(a.info, *ma.cand.routine, ma.params, b.info,
                                                              mb.cand.schema, mb.params);
          } catch (const std::exception& e) {
            core::info("'{}' + '{}': {} cannot prepare them as one step: {}", a.layer->name, b.layer->name,
                       mb.cand.descriptor, e.what());
          }
          return prepared ? time_prepared(*prepared, mb.cand.schema, mb.cand.schema, pair, f.cache_key, 0, &ma.cand.schema)
                          : kInf;
        };
        bool from_disk = false;
        if (auto hit = stale ? std::nullopt : cached(f.cache_key, &from_disk)) {
          f.unit_ms = *hit;
          // Cached pairs are checked by routine pair and schema, as childnet children are.
          if (from_disk)
            check_in_group("pair|" + ma.cand.descriptor + "+" + mb.cand.descriptor + "|" + mb.cand.schema.to_string(), [&] {
              const double was = f.unit_ms;
              f.unit_ms = measure();
              --cache_hits_;
              ++cache_remeasured_;
              return std::abs(f.unit_ms - was) > kGroupCheckTolerance * std::max(f.unit_ms, was);
            });
        } else {
          f.unit_ms = measure();
        }
        core::debug("'{}' + '{}' as one step of {} ({} before): {:.4f} ms, apart {:.4f} + {:.4f}", a.layer->name,
                    b.layer->name, mb.cand.descriptor, ma.cand.descriptor, f.unit_ms, ma.unit_ms, mb.unit_ms);
        if (f.unit_ms < kInf) b.fused_with_previous.push_back(std::move(f));
      }
    }
    close_load_window();
  }
}

std::vector<InContext> Profiler::run_interleaved(const std::vector<core::RoutinePath>& paths, int runs, int rounds) {
  std::vector<NamedBlob> ins, outs;
  std::uniform_real_distribution<float> real(-1, 1);
  for (const auto& t : net_.inputs)
    ins.push_back({t.name, synthetic_input(t, net_.graph, rng_, [&real](std::mt19937& r) { return real(r); })});
  for (const auto& t : net_.outputs) outs.push_back({t.name, Blob::allocate(t.shape, t.dtype)});
  std::vector<std::unique_ptr<core::Executor>> execs;
  for (std::size_t p = 0; p < paths.size(); ++p) {
    // The path beside the graph: nothing of the graph is copied.
    execs.push_back(std::make_unique<core::Executor>(core::build_plan(net_.graph, net_.tuning, net_.shapes, &paths[p], net_.plan_options())));
    execs.back()->run(ins, outs);  // warm-up
  }
  // Runs another process preempted are left out where a clean one exists (Samples).
  std::vector<std::vector<Samples>> samples(paths.size());
  std::vector<std::vector<double>> round_medians(paths.size());
  std::vector<double> gaps(paths.size(), kInf);
  PreemptionProbe probe = pool_preemption_probe();
  for (int round = 0; round < std::max(1, rounds); ++round)
    for (std::size_t p = 0; p < paths.size(); ++p) {
      const auto& steps = execs[p]->steps();
      samples[p].resize(steps.size());
      std::vector<double> step_ms(steps.size());
      Samples totals;
      double least_sum = kInf;
      for (int r = 0; r < std::max(1, runs); ++r) {
        probe.start();
        auto t0 = std::chrono::steady_clock::now();
        execs[p]->run(ins, outs, step_ms.data());
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        const bool preempted = probe.preempted(ms);
        totals.add(ms, preempted);
        double sum = 0;
        for (std::size_t i = 0; i < steps.size(); ++i) {
          samples[p][i].add(step_ms[i], preempted);
          sum += step_ms[i];
        }
        least_sum = std::min(least_sum, sum);
        gaps[p] = std::min(gaps[p], std::max(0.0, ms - sum) / static_cast<double>(std::max<std::size_t>(1, steps.size())));
      }
      if (execs[p]->uses_device()) {
        // Runs that time their steps synchronise after each; a net on a device
        // runs without (queued back to back, or replayed as one graph): its
        // total, and what it takes beyond its steps, from such runs.
        Samples plain;
        double least = kInf;
        for (int r = 0; r < std::max(1, runs); ++r) {
          probe.start();
          auto t0 = std::chrono::steady_clock::now();
          execs[p]->run(ins, outs);
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          plain.add(ms, probe.preempted(ms));
          least = std::min(least, ms);
        }
        totals = plain;
        gaps[p] = std::max(0.0, least - least_sum) / static_cast<double>(std::max<std::size_t>(1, steps.size()));
      }
      round_medians[p].push_back(totals.estimate());
    }
  std::vector<InContext> out(paths.size());
  for (std::size_t p = 0; p < paths.size(); ++p) {
    const auto& steps = execs[p]->steps();
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const double ms = samples[p][i].estimate();
      out[p].per_step[steps[i]->name] = ms;
      if (!steps[i]->fused_into.empty()) out[p].fused_away.insert(steps[i]->name);
      out[p].steps_ms += ms;
      // A childnet's children run as steps of their own: the parent layer's
      // in-context time is their sum.
      if (!steps[i]->parent.empty()) out[p].per_step[steps[i]->parent] += ms;
    }
    std::sort(round_medians[p].begin(), round_medians[p].end());
    out[p].total_ms = round_medians[p][round_medians[p].size() / 2];
    out[p].step_gap_ms = gaps[p] < kInf ? gaps[p] : 0;
    out[p].steps = static_cast<int>(steps.size());
  }
  return out;
}

}  // namespace softneuro::profiler
