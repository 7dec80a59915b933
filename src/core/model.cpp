#include "core/model_impl.hpp"

#include "core/device.hpp"
#include "core/executor.hpp"
#include "core/narrow_types.hpp"
#include "core/dnn_file.hpp"
#include "core/prepared_weights.hpp"
#include "core/shape_plan.hpp"
#include "core/stages.hpp"
#include "core/weight_quant.hpp"
#include "core/log.hpp"
#include "core/aligned_memory.hpp"
#include "core/thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <chrono>
#include <cstdlib>
#include <limits>

#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace softneuro {
namespace detail {

void ModelImpl::build(core::Graph g, core::Tuning t, const std::string& from, bool split) {
  file = from;
  try {
    core::sort_topologically(g);
    shapes = core::infer_shapes(g);
    graph = std::move(g);
    tuning = std::move(t);
    analyses = std::make_shared<const core::GraphAnalyses>(core::analyse(graph, tuning.blob_quant));
    if (tuning.prepared && tuning.prepared_tag == core::prepared_weights_tag()) weights->use_prepared(tuning.prepared);
    inputs = graph.inputs;
    outputs.clear();
    for (const auto& o : graph.outputs) {
      auto typed = graph.output_dtypes.find(o);
      outputs.push_back({o, shapes.at(o), typed == graph.output_dtypes.end() ? DType::float32 : typed->second, {}});
    }
    stages.clear();
    if (split) cut_stages();
  } catch (const Error& e) {
    throw file.empty() ? e : e.with_file(file);
  }
}

void ModelImpl::cut_stages() {
  stages.clear();
  if (!core::has_value_shaped(graph)) return;
  for (auto& cut : core::split_stages(graph, shapes)) {
    auto stage = std::make_shared<ModelImpl>();
    stage->weights = weights;
    stage->registry = registry;
    stage->build(std::move(cut.graph), tuning, file, /*split=*/false);  // layers keep their names: one tuning serves all
    stages.push_back({std::move(stage), std::move(cut.value_shaped)});
  }
  // An output of a later stage, or a value-shaped layer's, has its size from
  // the values: every dim is listed as dynamic, the shape gives the capacity.
  for (std::size_t k = 0; k < stages.size(); ++k)
    for (const auto& o : stages[k].model->graph.outputs) {
      const auto& vs = stages[k].value_shaped;
      if (k == 0 && std::find(vs.begin(), vs.end(), o) == vs.end()) continue;
      for (auto& info : outputs)
        if (info.name == o && info.dynamic_dims.empty())
          for (int d = 0; d < info.shape.rank(); ++d) info.dynamic_dims.push_back(d);
    }
}

std::unique_ptr<WorkingModel> WorkingModel::build(core::Graph graph, core::Tuning tuning, const std::string& file) {
  auto impl = std::make_unique<WorkingModel>();
  impl->ModelImpl::build(std::move(graph), std::move(tuning), file);
  return impl;
}

std::unique_ptr<WorkingModel> WorkingModel::of(const ModelImpl& model) {
  auto impl = std::make_unique<WorkingModel>();
  static_cast<ModelImpl&>(*impl) = model;
  // A copy made to change: what the file prepared for its path is not saved
  // again (the store keeps reading it while the graph is unchanged).
  impl->tuning.prepared.reset();
  impl->tuning.prepared_tag.clear();
  // Calibration, the reference routines and the int8 grids compute with
  // float32 weights: a tuned file's int8 ones (core::int8_weight) become their values.
  for (auto& l : impl->graph.layers)
    for (auto& [k, w] : l.weights)
      if (core::int8_weight(w)) w = core::float_weight(w);
  return impl;
}

void WorkingModel::store_prepared_weights(int threads) {
  ModelImpl copy = *this;
  copy.weights = std::make_shared<core::WeightStore>();
  copy.weights->record();
  copy.tuning.prepared.reset();
  SessionOptions options;
  options.threads = threads;
  options.shape_cache = tuning.shape_paths.size() + 1;
  core::SessionThreads team(threads);
  ShapedExecutors executors(copy, options);
  executors.at(tuning.routine_path.input_shapes);
  for (const auto& p : tuning.shape_paths) executors.at(p.input_shapes);
  auto saved = std::make_shared<std::map<std::string, Blob>>(copy.weights->saved());
  tuning.prepared_tag = core::prepared_weights_tag();
  tuning.prepared = std::move(saved);
}

Model WorkingModel::to_model() {
  auto impl = std::make_shared<ModelImpl>(static_cast<const ModelImpl&>(*this));
  impl->cut_stages();  // from the graph as it is now (its routine path, quantisation)
  return ModelAccess::make(std::move(impl));
}

Model make_model(core::Graph graph, core::Tuning tuning, const std::string& file,
                 std::shared_ptr<const core::RoutineRegistry> registry) {
  auto impl = std::make_shared<ModelImpl>();
  impl->registry = std::move(registry);
  impl->build(std::move(graph), std::move(tuning), file);
  return ModelAccess::make(std::move(impl));
}

namespace {
/// SessionOptions::memory_limit resolved: 0 is three quarters of the machine's physical memory.
std::size_t memory_limit_of(const SessionOptions& options) {
  if (options.memory_limit) return options.memory_limit == SessionOptions::kNoMemoryLimit ? 0 : options.memory_limit;
  return core::default_memory_limit();
}
}  // namespace

bool same_shape_bucket(const std::map<std::string, Shape>& a, const std::map<std::string, Shape>& b) {
  auto bucket = [](int64_t n) { return n <= 0 ? 0 : 1 + std::bit_width(static_cast<uint64_t>(n - 1)); };
  if (a.size() != b.size()) return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
    if (i->first != j->first || i->second.rank() != j->second.rank()) return false;
    for (int d = 0; d < i->second.rank(); ++d)
      if (bucket(i->second[d]) != bucket(j->second[d])) return false;
  }
  return true;
}

ShapedExecutors::ShapedExecutors(const ModelImpl& model, const SessionOptions& options,
                                 std::shared_ptr<const core::RoutineRegistry> registry, bool stage)
    : model_(model),
      value_inputs_(core::value_inputs(model.graph)),
      registry_(registry ? std::move(registry) : model.routines()),
      stage_(stage),
      capacity_(std::max<std::size_t>(1, options.shape_cache)),
      schemas_(options.schemas),
      memory_limit_(memory_limit_of(options)),
      threads_(options.threads) {}

namespace {
/// Whether two blobs hold the same shape, type and bytes (values of inputs that set shapes).
bool same_value(const Blob& a, const Blob& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         (a.numel() == 0 || std::memcmp(a.data(), b.data(), a.byte_size()) == 0);
}
bool same_values(const std::map<std::string, Blob>& a, const std::map<std::string, Blob>& b) {
  if (a.size() != b.size()) return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j)
    if (i->first != j->first || !same_value(i->second, j->second)) return false;
  return true;
}
}  // namespace

core::Executor& ShapedExecutors::at(const std::map<std::string, Shape>& given, const std::map<std::string, Blob>& given_values,
                                    bool keep_nan) {
  std::map<std::string, Shape> inputs;
  for (const auto& in : model_.inputs) {
    auto it = given.find(in.name);
    if (it == given.end()) {
      inputs[in.name] = in.shape;
      continue;
    }
    try {
      core::check_input_shape(in, it->second);
    } catch (const Error& e) {
      throw model_.file.empty() ? e : e.with_file(model_.file);
    }
    inputs[in.name] = it->second;
  }
  for (const auto& [name, shape] : given)
    if (!inputs.count(name)) throw Error(fmt::format("the model has no input named '{}'", name), model_.file, {}, name);
  std::map<std::string, Blob> values;
  for (const auto& name : value_inputs_) {
    auto v = given_values.find(name);
    const TensorInfo& in = *std::find_if(model_.inputs.begin(), model_.inputs.end(), [&](const TensorInfo& t) { return t.name == name; });
    values[name] = v != given_values.end() ? v->second : core::value_default(in);
  }
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->keep_nan == keep_nan && it->inputs == inputs && same_values(it->values, values)) {
      entries_.splice(entries_.begin(), entries_, it);
      return *entries_.front().executor;
    }
  const auto t0 = std::chrono::steady_clock::now();
  bool exact = false;
  const core::RoutinePath& path = model_.tuning.path_for(model_.graph, inputs, &exact);
  auto text = [](const std::map<std::string, Shape>& shapes) {
    std::string t;
    for (const auto& [name, shape] : shapes) t += fmt::format("{}{}={}", t.empty() ? "" : " ", name, shape.to_string());
    return t;
  };
  auto ms_since = [](auto t) { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count(); };
  const bool shape_math = core::has_shape_math(model_.graph);
  const auto kept = [&](bool nan) {
    return static_cast<std::size_t>(std::count_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.keep_nan == nan; }));
  };
  // The cache is full: a kept plan of this shape bucket runs at these shapes,
  // the graph specialised again only where the shapes change it.
  if (kept(keep_nan) >= capacity_)
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->keep_nan != keep_nan || it->path != &path || !same_shape_bucket(it->inputs, inputs) ||
          (shape_math && !it->specialized) || !same_values(it->values, values))
        continue;
      std::string why = "the graph folds otherwise at these shapes";
      bool rebound = false;
      std::map<std::string, Shape> shapes;  // (a graph without shape computations: all of them, here)
      try {
        std::optional<core::SpecializeChanges> changes;
        std::unordered_map<std::string_view, Shape> by_name;
        if (shape_math) {
          changes = core::respecialize(model_.graph, inputs, *it->specialized);
        } else {
          shapes = core::infer_shapes(model_.graph, inputs);
          for (const auto& [name, shape] : shapes) by_name.emplace(name, shape);
          changes.emplace();
        }
        if (changes)
          rebound = it->executor->rebind(shape_math ? it->specialized->shapes : by_name, *changes, &why);
        if (rebound) {
          if (shape_math)
            for (std::string_view b : changes->blobs) it->shapes[std::string(b)] = it->specialized->shapes.at(b);
          else
            it->shapes = std::move(shapes);
        }
      } catch (const Error& err) {
        why = err.what();
      }
      if (rebound) {
        core::debug("{}: the plan of input shapes {} runs at {} (re-bound in {:.1f} ms)",
                    model_.file.empty() ? model_.graph.name : model_.file, text(it->inputs), text(inputs), ms_since(t0));
        it->inputs = inputs;
        ++plans_rebound_;
        entries_.splice(entries_.begin(), entries_, it);
        return *entries_.front().executor;
      }
      core::debug("{}: a new plan for input shapes {}: the one of {} cannot run there ({})",
                  model_.file.empty() ? model_.graph.name : model_.file, text(inputs), text(it->inputs), why);
      entries_.erase(it);  // it may be half re-bound
      break;
    }
  Entry e;
  e.inputs = inputs;
  e.values = std::move(values);
  e.keep_nan = keep_nan;
  e.path = &path;
  // A graph with shape computations is specialised once here, for its shapes and its plan.
  auto specialized = shape_math ? std::make_unique<core::Graph>() : nullptr;
  if (shape_math) e.specialized = std::make_unique<core::SpecializeState>();
  try {
    e.shapes = core::infer_shapes(model_.graph, inputs, specialized.get(), e.specialized.get(), &e.values);
  } catch (const Error& err) {
    throw model_.file.empty() || !err.file().empty() ? err : err.with_file(model_.file);
  }
  try {
    core::PlanOptions options;
    options.weights = model_.weights;
    options.schemas = schemas_;
    options.memory_limit = memory_limit_;
    options.keep_nan = keep_nan;
    options.analyses = model_.analyses;
    options.registry = registry_;
    options.threads = threads_ > 0 ? threads_ : core::library_threads();
    e.executor = std::make_unique<core::Executor>(
        specialized ? core::build_plan(std::move(specialized), model_.tuning, e.shapes, path, std::move(options))
                    : core::build_plan(model_.graph, model_.tuning, e.shapes, &path, std::move(options)),
        queues_, host_arena_);
  } catch (const Error& err) {
    throw model_.file.empty() || !err.file().empty() ? err : err.with_file(model_.file);
  }
  ++plans_built_;
  bool default_shapes = true;
  for (const auto& in : model_.inputs) default_shapes = default_shapes && inputs.at(in.name) == in.shape;
  if (!stage_ && !keep_nan && (!default_shapes || !exact)) {
    std::string tuned;
    if (!path.empty() && !exact)
      tuned = fmt::format("; no routine path was tuned at these shapes: the one tuned at {} runs where its routines "
                          "support them (others: the default choice)",
                          path.input_shapes.empty() ? "the default shapes" : text(path.input_shapes));
    core::info("{}: prepared for input shapes {} in {:.1f} ms{}", model_.file.empty() ? model_.graph.name : model_.file,
               text(inputs), ms_since(t0), tuned);
  }
  if (keep_nan)
    core::debug("{}: a plan keeping NaN for input shapes {} (inputs hold NaN or inf)",
                model_.file.empty() ? model_.graph.name : model_.file, text(inputs));
  entries_.push_front(std::move(e));
  if (kept(keep_nan) > capacity_) {
    // The least recently used of its kind goes.
    while (kept(keep_nan) > capacity_) {
      auto last = std::find_if(entries_.rbegin(), entries_.rend(), [&](const Entry& x) { return x.keep_nan == keep_nan; });
      entries_.erase(std::next(last).base());
    }
#if defined(__GLIBC__)
    // The dropped arena's pages back to the system: arenas of ever other sizes
    // otherwise fragment glibc's heap, and resident memory creeps up with the
    // number of shapes met. (Runs where a shape is prepared anyway: milliseconds.)
    malloc_trim(0);
#endif
  }
  return *entries_.front().executor;
}

namespace {
/// Whether a floating-point CPU blob holds NaN or inf.
bool holds_non_finite(const Blob& b) {
  return b.data() && b.device() == Device::cpu &&
         core::holds_non_finite(b.data(), static_cast<std::size_t>(b.numel()), b.dtype());
}
}  // namespace

core::Executor& ShapedExecutors::keeping_nan_front() {
  // (Copies: at() reorders the entries.)
  const std::map<std::string, Shape> inputs = entries_.front().inputs;
  const std::map<std::string, Blob> values = entries_.front().values;
  return at(inputs, values, /*keep_nan=*/true);
}

core::Executor& ShapedExecutors::for_inputs(std::span<const NamedBlob> inputs) {
  core::Executor* fast = nullptr;
  // The common case, the shapes of the last run, without building a map.
  if (!entries_.empty()) {
    const auto& last = entries_.front().inputs;
    bool same = inputs.size() == last.size();
    for (std::size_t i = 0; same && i < inputs.size(); ++i) {
      auto it = last.find(inputs[i].name);
      same = it != last.end() && it->second == inputs[i].blob.shape();
    }
    if (same && !entries_.front().keep_nan) fast = entries_.front().executor.get();
  }
  // Inputs that set sizes: the last run's plan fits only at the same values
  // (compared in place: a run at a kept shape allocates nothing).
  if (fast)
    for (const auto& name : value_inputs_)
      for (const auto& in : inputs)
        if (in.name == name) {
          const auto& kept = entries_.front().values;
          auto k = kept.find(name);
          if (k == kept.end() || !core::same_shape_value(k->second, in.blob)) fast = nullptr;
        }
  if (!fast) {
    std::map<std::string, Shape> shapes;
    std::map<std::string, Blob> values;
    for (const auto& in : inputs) {
      shapes[in.name] = in.blob.shape();
      if (std::find(value_inputs_.begin(), value_inputs_.end(), in.name) == value_inputs_.end()) continue;
      try {
        values[in.name] = core::shape_value(in.name, in.blob);
      } catch (const Error& e) {
        throw model_.file.empty() ? e : e.with_file(model_.file);
      }
    }
    fast = &at(shapes, values);
  }
  // NaN or inf given: the routines' fast forms may lose NaN (oneDNN's relu and
  // clip give 0). Inputs the plan's uploads check as they copy them are not
  // scanned here (run() asks the executor afterwards).
  bool non_finite = false;
  for (const auto& in : inputs)
    non_finite = non_finite || (!fast->checks_non_finite(in.name) && holds_non_finite(in.blob));
  return non_finite ? keeping_nan_front() : *fast;
}

core::Executor& ShapedExecutors::run(core::Executor& chosen, std::span<const NamedBlob> inputs,
                                     std::span<NamedBlob> outputs, std::vector<double>* step_ms) {
  core::Executor* e = &chosen;
  auto run_on = [&](core::Executor& x) {
    if (step_ms) step_ms->assign(x.steps().size(), 0.0);
    x.run(inputs, outputs, step_ms ? step_ms->data() : nullptr);
  };
  run_on(*e);
  if (e == entries_.front().executor.get() && !entries_.front().keep_nan && e->saw_non_finite()) {
    e = &keeping_nan_front();
    run_on(*e);
  }
  return *e;
}

core::Executor& ShapedExecutors::current() {
  if (!entries_.empty()) return *entries_.front().executor;
  // At the shapes the routine path was tuned at, where the file names them
  // (a decode step's: one token and a cache), else the default shapes.
  const std::map<std::string, Shape>& tuned = model_.tuning.routine_path.input_shapes;
  for (const auto& kv : tuned)
    if (std::none_of(model_.inputs.begin(), model_.inputs.end(), [&](const TensorInfo& t) { return t.name == kv.first; }))
      return at({});
  return at(tuned);
}

const std::map<std::string, Shape>& ShapedExecutors::current_shapes() {
  current();
  return entries_.front().shapes;
}

void WorkingModel::changed() {
  weights = std::make_shared<core::WeightStore>();
  analyses = std::make_shared<const core::GraphAnalyses>(core::analyse(graph, tuning.blob_quant));  // weights read as constants may have moved
  tuning.prepared.reset();
  tuning.prepared_tag.clear();
}

std::vector<NamedBlob> SessionImpl::output_blobs(const std::map<std::string, Shape>& shapes) {
  ++runs_;
  // Memory returned two runs ago or earlier and not taken again is let go.
  std::erase_if(handed_out_, [&](const HandedOut& h) { return h.run + 2 < runs_; });
  std::vector<NamedBlob> outs;
  for (const auto& t : model.outputs()) {
    const Shape& shape = shapes.at(t.name);
    const std::size_t bytes = storage_bytes(shape, t.dtype, Layout::nchw);
    if (bytes > std::numeric_limits<std::size_t>::max() / 2)
      throw Error(fmt::format("output '{}' of shape {} is too large to allocate", t.name, shape.to_string()), {}, {}, t.name);
    const std::size_t need = std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
    // Memory only this session holds (use_count 1: no blob over it is left),
    // of a size that fits without wasting half of it.
    auto it = std::find_if(handed_out_.begin(), handed_out_.end(), [&](const HandedOut& h) {
      return h.run < runs_ && h.memory.use_count() == 1 && h.bytes >= need && h.bytes / 2 <= need;
    });
    if (it == handed_out_.end()) {
      void* p = core::allocate_aligned(need);
      if (!p) throw Error(fmt::format("out of memory allocating {} bytes for output '{}'", need, t.name), {}, {}, t.name);
      std::memset(p, 0, need);
      handed_out_.push_back({std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); }), need, runs_});
      it = std::prev(handed_out_.end());
    }
    // (use_count() reads relaxed: the writes of a thread that let go of a blob
    // over this memory happen before ours.)
    std::atomic_thread_fence(std::memory_order_acquire);
    it->run = runs_;
    outs.push_back({t.name, Blob::view(it->memory, it->memory.get(), shape, t.dtype)});
  }
  return outs;
}

SessionImpl::SessionImpl(const Model& m, const SessionOptions& o)
    : model(m),
      options(o),
      registry(detail::impl_of(m).routines()),
      executors(detail::impl_of(m).stages.empty() ? detail::impl_of(m) : *detail::impl_of(m).stages.front().model, o,
                registry) {
  for (std::size_t k = 1; k < detail::impl_of(model).stages.size(); ++k)
    later_stages.push_back(
        std::make_unique<ShapedExecutors>(*detail::impl_of(model).stages[k].model, o, registry, /*stage=*/true));
  if (options.threads < 0) throw Error(fmt::format("SessionOptions.threads is {}; give 0 (the library's) or more", options.threads), detail::impl_of(model).file, {}, "threads");
  if (options.threads > 1) core::require_startable_threads(options.threads, detail::impl_of(model).file, "threads");
  for (const auto& p : options.schemas) {
    try {
      (void)Schema{}.matches(p);  // a pattern that is no schema and no glob
    } catch (const Error& e) {
      throw Error(e.message(), detail::impl_of(model).file, {}, "schemas");
    }
  }
  core::SessionThreads threads(options.threads);  // routines prepare for the team they will run on
  executors.current();  // prepared at the default shapes now, within the memory limit
}


namespace {

/// Warnings where a tuned path was made under other conditions than this process's.
void check_tuned_conditions(const core::Tuning& t, const std::string& path) {
  const std::string& tuned_on = t.routine_path.device_fingerprint;
  if (!tuned_on.empty() && tuned_on != core::device_fingerprint())
    core::warn("{}: tuned on another device ({}); this is {}. It runs, but re-tune for the best speed", path,
               tuned_on, core::device_fingerprint());
  const std::string& tuned_wait = t.routine_path.openmp_wait;
  if (!tuned_wait.empty() && tuned_wait != openmp_wait())
    core::warn("{}: tuned while OpenMP threads waited '{}', this process waits '{}': its times may differ from the "
               "tuner's (set GOMP_SPINCOUNT or OMP_WAIT_POLICY before the process starts; see softneuro::openmp_wait)",
               path, tuned_wait, openmp_wait());
}

/// A .dnn file read and checked: from `path`, or from `bytes` (then `path` names them in messages).
core::TunedGraph read_checked(const std::string& path, const void* bytes = nullptr, std::size_t size = 0) {
  core::TunedGraph g;
  try {
    g = bytes ? core::read_dnn_bytes(bytes, size, path) : core::read_dnn(path);
  } catch (const Error& e) {
    throw e.file().empty() ? e.with_file(path) : e;
  }
  check_tuned_conditions(g.tuning, path);
  return g;
}

Shape find_shape(const std::vector<TensorInfo>& ts, const std::string& name, const char* what) {
  for (const auto& t : ts)
    if (t.name == name) return t.shape;
  throw Error(fmt::format("the model has no {} named '{}'", what, name), {}, {}, name);
}

std::vector<NamedBlob> allocate_outputs(const std::vector<TensorInfo>& outputs, const std::map<std::string, Shape>& shapes) {
  std::vector<NamedBlob> outs;
  for (const auto& t : outputs) outs.push_back({t.name, Blob::allocate(shapes.at(t.name), t.dtype)});
  return outs;
}

std::vector<LayerSummary> summarize(const core::Executor& executor, bool explain) {
  std::vector<LayerSummary> out;
  for (const auto& step : executor.steps()) {
    LayerSummary s;
    s.name = step->name;
    s.type = step->layer->type;
    s.inputs = step->layer->inputs;
    s.outputs = step->layer->outputs;
    s.output_shapes = step->info.output_shapes;
    s.params = core::describe_params(*step->layer);
    s.descriptor = step->routine.descriptor;
    for (const auto& [k, v] : step->params) s.routine_params += fmt::format("{}{}={}", s.routine_params.empty() ? "" : " ", k, v);
    s.quant = core::describe_quant(step->info.input_quant, step->info.output_quant);
    s.tuned = step->tuned;
    s.predicted_ms = step->predicted_ms;
    s.measured_ms = step->measured_ms;
    s.fused_into = step->fused_into;
    s.view = step->view;
    if (explain) {
      const core::RoutineRegistry& registry = *executor.plan().options.registry;
      auto all = registry.candidates(step->info);
      const int listed_tiers = static_cast<int>(registry.default_order(s.type).size());
      std::vector<std::pair<std::pair<int, int>, LayerSummary::Candidate>> ranked;
      for (const auto& c : all) {
        const auto rank = registry.default_rank(s.type, c.descriptor);
        ranked.push_back({rank, {c.descriptor, c.support.ok, c.support.reason, rank.first < listed_tiers ? rank.first : -1}});
      }
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (auto& [rank, c] : ranked) s.candidates.push_back(std::move(c));
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

std::vector<NamedBlob> SessionImpl::run_stages(std::span<const NamedBlob> inputs, std::vector<double>* step_ms) {
  const auto& stages = detail::impl_of(model).stages;
  std::vector<NamedBlob> known(inputs.begin(), inputs.end());  // the net's inputs, then each stage's outputs
  auto find = [&](const std::string& name) -> const NamedBlob* {
    for (const auto& b : known)
      if (b.name == name) return &b;
    return nullptr;
  };
  for (std::size_t k = 0; k < stages.size(); ++k) {
    const ModelImpl& stage = *stages[k].model;
    ShapedExecutors& shaped = k == 0 ? executors : *later_stages[k - 1];
    std::vector<NamedBlob> in;
    if (k == 0) {
      in.assign(inputs.begin(), inputs.end());  // (the executor names what is missing or extra)
    } else {
      for (const auto& info : stage.inputs)
        if (const NamedBlob* b = find(info.name)) in.push_back(*b);
    }
    core::Executor& chosen = shaped.for_inputs(in);
    auto outs = allocate_outputs(stage.outputs, shaped.current_shapes());
    std::vector<double> ms;
    core::Executor& executor = shaped.run(chosen, in, outs, step_ms ? &ms : nullptr);
    if (step_ms) step_ms->insert(step_ms->end(), ms.begin(), ms.end());
    for (auto& o : outs)
      if (auto actual = executor.value_shape(o.name)) o.blob.reshape(*actual);
    known.insert(known.end(), std::make_move_iterator(outs.begin()), std::make_move_iterator(outs.end()));
  }
  std::vector<NamedBlob> result;
  run_shapes.clear();
  for (const auto& info : model.outputs()) {
    const NamedBlob* b = find(info.name);
    if (!b) throw Error(fmt::format("output '{}' was computed by no stage", info.name), detail::impl_of(model).file, {}, info.name);
    result.push_back(*b);
    run_shapes[info.name] = b->blob.shape();
  }
  return result;
}

std::vector<core::Executor*> SessionImpl::current_executors() {
  std::vector<core::Executor*> out{&executors.current()};
  for (auto& later : later_stages) out.push_back(&later->current());
  return out;
}

}  // namespace detail

// --- Model

Model::Model(std::shared_ptr<const detail::ModelImpl> impl) : impl_(std::move(impl)) {}

Model Model::load(const std::string& path) {
  auto impl = std::make_shared<detail::ModelImpl>();
  core::TunedGraph read = detail::read_checked(path);
  impl->build(std::move(read.graph), std::move(read.tuning), path);
  return Model(std::move(impl));
}

Model Model::load_bytes(const void* data, std::size_t size, const std::string& name) {
  if (!data && size) throw Error("no bytes to read (null data)", name);
  static const unsigned char empty = 0;
  auto impl = std::make_shared<detail::ModelImpl>();
  core::TunedGraph read = detail::read_checked(name, data ? data : &empty, size);
  impl->build(std::move(read.graph), std::move(read.tuning), name);
  return Model(std::move(impl));
}

Model Model::build(std::string name, std::vector<TensorInfo> inputs, std::vector<Layer> layers,
                   std::vector<std::string> outputs) {
  core::Graph g;
  g.name = std::move(name);
  g.inputs = std::move(inputs);
  g.layers = std::move(layers);
  g.outputs = std::move(outputs);
  auto impl = std::make_shared<detail::ModelImpl>();
  impl->build(std::move(g), {}, {});
  return Model(std::move(impl));
}

void Model::save(const std::string& path) const { core::write_dnn(impl_->graph, path, impl_->tuning); }
const std::vector<TensorInfo>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Model::outputs() const { return impl_->outputs; }
std::vector<std::string> Model::input_names() const {
  std::vector<std::string> v;
  for (const auto& t : impl_->inputs) v.push_back(t.name);
  return v;
}
std::vector<std::string> Model::output_names() const {
  std::vector<std::string> v;
  for (const auto& t : impl_->outputs) v.push_back(t.name);
  return v;
}
Shape Model::input_shape(const std::string& name) const { return detail::find_shape(impl_->inputs, name, "input"); }
Shape Model::output_shape(const std::string& name) const { return detail::find_shape(impl_->outputs, name, "output"); }
std::string Model::tuned_fingerprint() const { return impl_->tuning.routine_path.device_fingerprint; }
std::string Model::tuned_openmp_wait() const { return impl_->tuning.routine_path.openmp_wait; }
static std::vector<std::map<std::string, Shape>> tuned_shapes_of(const core::Tuning& g) {
  std::vector<std::map<std::string, Shape>> out;
  if (!g.routine_path.input_shapes.empty()) out.push_back(g.routine_path.input_shapes);
  for (const auto& p : g.shape_paths) out.push_back(p.input_shapes);
  return out;
}
std::vector<std::map<std::string, Shape>> Model::tuned_shapes() const { return tuned_shapes_of(impl_->tuning); }
AccuracyCheck Model::accuracy_check() const {
  // One record for the model: the main path's, where any bucket's path
  // computes below float32 so does the model, and it is checked only as far as
  // its least checked path.
  const core::Tuning& t = impl_->tuning;
  AccuracyCheck out;
  bool first = true;
  std::vector<const core::RoutinePath*> paths{&t.routine_path};
  for (const auto& p : t.shape_paths) paths.push_back(&p);
  for (const core::RoutinePath* p : paths) {
    AccuracyCheck c;
    if (p->accuracy) {
      c = *p->accuracy;
    } else {
      c.reduced_precision = core::computes_below_float32(*p, impl_->analyses->quantised_by_model, *impl_->routines());
    }
    if (first) {
      out = c, first = false;
      continue;
    }
    out.recorded = out.recorded && c.recorded;
    if (c.reduced_precision && (!out.reduced_precision || !c.checked()))
      out.budget = c.budget, out.samples = c.samples, out.measured = c.measured;
    out.reduced_precision = out.reduced_precision || c.reduced_precision;
  }
  return out;
}

const std::string& Model::name() const { return impl_->graph.name; }
std::size_t Model::prepared_weight_bytes() const {
  std::size_t n = 0;
  if (impl_->tuning.prepared)
    for (const auto& [key, bytes] : *impl_->tuning.prepared) n += bytes.byte_size();
  return n;
}
bool Model::prepared_weights_usable() const {
  return impl_->tuning.prepared && impl_->tuning.prepared_tag == core::prepared_weights_tag();
}

// --- Session

Session::Session(const Model& model, const SessionOptions& options)
    : impl_(std::make_unique<detail::SessionImpl>(model, options)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

namespace {
/// A staged model's results into the caller's outputs: copied where the caller's
/// blob has the result's shape and type, else the caller's blob is replaced.
void hand_over(std::vector<NamedBlob>& results, std::span<NamedBlob> outputs) {
  for (auto& given : outputs) {
    auto r = std::find_if(results.begin(), results.end(), [&](const NamedBlob& b) { return b.name == given.name; });
    if (r == results.end()) throw Error(fmt::format("the net has no output named '{}'", given.name), {}, {}, given.name);
    const Blob& got = r->blob;
    if (given.blob.data() && given.blob.shape() == got.shape() && given.blob.dtype() == got.dtype() &&
        given.blob.layout() == got.layout() && given.blob.device() == Device::cpu)
      std::memcpy(given.blob.data(), got.data(), got.byte_size());
    else
      given.blob = got;
  }
}
}  // namespace

void Session::run(std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs) {
  core::SessionThreads threads(impl_->options.threads);
  if (impl_->staged()) {
    auto results = impl_->run_stages(inputs);
    hand_over(results, outputs);
    return;
  }
  impl_->executors.run(impl_->executor_for(inputs), inputs, outputs);
}

std::vector<NamedBlob> Session::run(std::span<const NamedBlob> inputs) {
  core::SessionThreads threads(impl_->options.threads);
  if (impl_->staged()) return impl_->run_stages(inputs);
  core::Executor& executor = impl_->executor_for(inputs);
  auto outs = impl_->output_blobs(impl_->executors.current_shapes());
  impl_->executors.run(executor, inputs, outs);
  return outs;
}

std::vector<double> Session::run_timed(std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs) {
  core::SessionThreads threads(impl_->options.threads);
  if (impl_->staged()) {
    std::vector<double> ms;
    auto results = impl_->run_stages(inputs, &ms);
    hand_over(results, outputs);
    return ms;
  }
  std::vector<double> ms;
  impl_->executors.run(impl_->executor_for(inputs), inputs, outputs, &ms);
  return ms;
}

void Session::reshape(const std::map<std::string, Shape>& input_shapes) {
  core::SessionThreads threads(impl_->options.threads);
  impl_->executors.at(input_shapes);
}

Shape Session::output_shape(const std::string& name) const {
  const Shape most = detail::find_shape(impl_->model.outputs(), name, "output");
  if (impl_->staged()) {
    auto it = impl_->run_shapes.find(name);
    return it == impl_->run_shapes.end() ? most : it->second;
  }
  return impl_->executors.current_shapes().at(name);
}

const Model& Session::model() const { return impl_->model; }
std::vector<LayerSummary> Session::layers(bool explain) const {
  std::vector<LayerSummary> out;
  for (core::Executor* e : impl_->current_executors()) {
    auto part = detail::summarize(*e, explain);
    out.insert(out.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return out;
}
std::size_t Session::planned_bytes() const {
  std::size_t n = 0;
  for (core::Executor* e : impl_->current_executors()) n += e->arena_bytes();
  return n;
}
std::size_t Session::unplanned_bytes() const {
  std::size_t n = 0;
  for (core::Executor* e : impl_->current_executors()) n += e->unplanned_bytes();
  return n;
}
Session::PlanCounts Session::plan_counts() const {
  return {impl_->executors.plans_built(), impl_->executors.plans_rebound()};
}

const char* version() { return SOFTNEURO_VERSION; }

const char* source_digest() { return core::source_digest(); }

std::string device_fingerprint() { return core::device_fingerprint(); }

}  // namespace softneuro
