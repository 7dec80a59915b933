#include "core/plan.hpp"

#include "core/childnet.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/shape_plan.hpp"
#include "core/thread_pool.hpp"
#include "core/weight_quant.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace softneuro::core {
namespace {


/// The routine parameters a file names, checked against the routine's space
/// for this layer, so a wild value (a block of 0x3000... wrapped a workspace
/// size to 0) never reaches prepare(). A parameter the routine does not have
/// here refuses the routine (the default choice runs the layer); a value that
/// is not one of its choices at this shape (a shape bucket's tuned value, when
/// another shape runs on it) is dropped for the routine's default, said in `note`.
Support params_in_space(const Routine& r, const LayerInfo& info, const Schema& schema, RoutineParams& params,
                        std::string& note) {
  if (params.empty()) return Support::yes();
  const std::vector<RoutineParamSpec> space = r.param_space(info, schema);
  RoutineParams kept;
  for (const auto& [name, value] : params) {
    auto spec = std::find_if(space.begin(), space.end(), [&name = name](const RoutineParamSpec& p) { return p.name == name; });
    if (spec == space.end()) return Support::no(fmt::format("it has no routine parameter '{}' here", name));
    if (std::find(spec->choices.begin(), spec->choices.end(), value) != spec->choices.end())
      kept.emplace_back(name, value);
    else
      note += fmt::format("{}{}={} is not one of its choices here ({})", note.empty() ? "" : "; ", name, value,
                          fmt::join(spec->choices, ", "));
  }
  params = std::move(kept);
  return Support::yes();
}

std::unique_ptr<Graph> specialized_if_needed(const Graph& graph, const std::map<std::string, Shape>& shapes) {
  if (!has_shape_math(graph)) return nullptr;
  std::map<std::string, Shape> inputs;
  for (const auto& in : graph.inputs) inputs[in.name] = shapes.at(in.name);
  return std::make_unique<Graph>(specialize(graph, inputs));
}

}  // namespace

bool makes_nan(const Layer& layer, const Blob* constant_second) {
  const std::string& t = layer.type;
  // Whether any value of a constant second input makes NaN (none given: a run-time one may).
  auto any_of_second = [constant_second](auto&& bad) {
    if (!constant_second || constant_second->dtype() != DType::float32 || !constant_second->data()) return true;
    const float* v = constant_second->data_as<float>();
    return std::any_of(v, v + constant_second->numel(), bad);
  };
  auto fractional = [](double e) { return !(std::isfinite(e) && e == std::floor(e)); };
  if (t == "div") return any_of_second([](float v) { return v == 0.0f || std::isnan(v); });
  if (t == "pow") {  // a negative base to a fractional power; an integral one never
    if (layer.inputs.size() == 1) return fractional(layer.get_float("exponent"));
    return any_of_second([&](float v) { return fractional(v); });
  }
  if (t == "trig") {
    const std::string op = layer.get_string("op", "");
    return op == "asin" || op == "acos" || op == "acosh" || op == "atanh";
  }
  // cast: an overflow without saturation, or an infinity into float8e8m0, is NaN
  return t == "sqrt" || t == "log" || t == "divmod" || t == "cast";
}

Layer adapt_layer(std::string name, std::string input, std::string output, const Schema& from, const Schema& to) {
  Layer l;
  l.name = std::move(name);
  l.type = "adapt";
  l.inputs = {std::move(input)};
  l.outputs = {std::move(output)};
  l.params["from"] = from.to_string();
  l.params["to"] = to.to_string();
  return l;
}

LayerInfo adapt_info(const Layer& adapt, const Shape& shape, const QuantParams& quant, const PlanOptions& options) {
  LayerInfo info;
  info.layer = &adapt;
  info.input_shapes = info.output_shapes = {shape};
  info.input_quant = info.output_quant = {quant};  // quantising adapts need the blob's calibration
  info.memory_limit = options.memory_limit;
  info.threads = options.threads;
  info.routines = options.registry.get();
  return info;
}

bool computes_below_float32(const RoutinePath& path, const std::set<std::string>& model_int8,
                            const RoutineRegistry& registry) {
  return std::any_of(path.routines.begin(), path.routines.end(), [&](const RoutineChoice& r) {
    const DType d = registry.precision(r.descriptor);
    const bool reduced = d == DType::qint8 || d == DType::float16 || d == DType::bfloat16;
    // A model's own int8 layers compute the model in a qint8 schema; a float32
    // routine quantising inside does not.
    const bool schema_int8 = Schema::parse(r.descriptor.substr(0, r.descriptor.find('/'))).dtype == DType::qint8;
    return reduced && !(schema_int8 && model_int8.count(r.layer));
  });
}

std::set<std::string> layers_quantised_by_model(const Graph& graph, const std::map<std::string, QuantParams>& quant) {
  std::set<std::string> out;
  std::map<std::string, const Layer*> producer;
  std::map<std::string, std::vector<const Layer*>> readers;
  std::vector<const Layer*> fake_quants;
  for (const Layer& l : graph.layers) {
    for (const auto& o : l.outputs) producer[o] = &l;
    for (const auto& in : l.inputs) readers[in].push_back(&l);
    if (l.type == "fake_quant") fake_quants.push_back(&l);
  }
  if (fake_quants.empty()) return out;
  auto made_by = [&](const std::string& blob, const char* type) {
    auto p = producer.find(blob);
    return p != producer.end() && p->second->type == type;
  };
  auto int8_made = [&](const std::string& blob) {
    auto p = producer.find(blob);
    return p != producer.end() && out.count(p->second->name) > 0;
  };
  auto int8_read = [&](const std::string& blob) {
    auto r = readers.find(blob);
    if (r != readers.end())
      for (const Layer* l : r->second)
        if (out.count(l->name)) return true;
    return false;
  };
  const std::set<std::string> net_outputs(graph.outputs.begin(), graph.outputs.end());
  auto quantised = [&](const std::string& blob) { return quant.count(blob) > 0; };
  // Held in int8 at its recorded quantisation, the blob is what the model
  // computes only where every reader quantises it so at once.
  auto read_quantised = [&](const std::string& blob) {
    if (!quantised(blob) || net_outputs.count(blob) || !readers.count(blob)) return false;
    const QuantParams& q = quant.at(blob);
    for (const Layer* r : readers.at(blob)) {
      if (r->type != "fake_quant") return false;
      const QuantParams p = fake_quant_params(*r).as_int8();
      if (p.scales != q.scales || p.zero_points != q.zero_points) return false;
    }
    return true;
  };
  // The layers whose int8 result is the arithmetic the model's author
  // quantised for: every run-time input made by a Q/DQ step, and a weight on
  // the model's own int8 grid (symmetric, per output channel), which the
  // qint8 routines compute with (core::int8_grid_scales). The products
  // first; the sums, activations (by table), pools and concats joined to them
  // through Q/DQ steps (elsewhere a float step is cheaper than the
  // conversions around an int8 one).
  static const std::set<std::string> kProducts = {"conv2", "dense", "matmul"};
  static const std::set<std::string> kBeside = {"add", "mul", "sigmoid", "silu", "tanh", "gelu", "hardswish", "hardsigmoid",
                                                "relu", "clip", "pool2", "concat"};
  // Steps that only move values (a pad fills with the zero point, real 0): exact
  // in int8 where in and out share one quantisation; and TensorFlow Lite's
  // bilinear resize, defined as an int8 blend.
  static const std::set<std::string> kMoves = {"flatten", "reshape", "split", "resize", "pad"};
  auto same_quant = [&](const std::string& a, const std::string& b) {
    auto qa = quant.find(a), qb = quant.find(b);
    return qa != quant.end() && qb != quant.end() && qa->second.scales == qb->second.scales &&
           qa->second.zero_points == qb->second.zero_points;
  };
  std::vector<const Layer*> beside;
  for (const Layer& l : graph.layers) {
    const bool moves = kMoves.count(l.type) && !l.inputs.empty() && !l.outputs.empty() &&
                       (l.type != "resize" || l.get_string("mode", "nearest") == "nearest" || requantizes_as_tflite(l)) &&
                       (l.type != "pad" || l.get_float("value", 0.0) == 0.0) &&
                       std::all_of(l.outputs.begin(), l.outputs.end(), [&](const auto& o) { return same_quant(l.inputs[0], o); });
    if (!kProducts.count(l.type) && !kBeside.count(l.type) && !moves) continue;
    const Blob* w = l.find_weight("weight");
    const bool weighted = l.type == "conv2" || l.type == "dense";
    bool ok = (l.outputs.size() == 1 || l.type == "split") && (!weighted || (w && stored_as_int8(*w)));
    for (const auto& o : l.outputs) ok = ok && read_quantised(o);
    for (const auto& in : l.inputs) ok = ok && (made_by(in, "constant") || made_by(in, "fake_quant"));
    if (ok && kProducts.count(l.type)) out.insert(l.name);
    if (ok && !kProducts.count(l.type)) beside.push_back(&l);
  }
  // Whether a Q/DQ step joins layer `l` to an int8 one.
  auto joined = [&](const Layer& l) {
    for (const auto& in : l.inputs)
      if (made_by(in, "fake_quant") && int8_made(producer.at(in)->inputs[0])) return true;
    for (const auto& o : l.outputs)
      for (const Layer* fq : readers.at(o))
        if (int8_read(fq->outputs[0])) return true;
    return false;
  };
  for (bool grew = true; grew;) {
    grew = false;
    for (const Layer* l : beside)
      if (!out.count(l->name) && joined(*l)) {
        out.insert(l->name);
        grew = true;
      }
  }
  // The Q/DQ steps next to them.
  std::vector<std::string> steps;
  for (const Layer* fq : fake_quants)
    if (quantised(fq->inputs[0]) && quantised(fq->outputs[0]) && (int8_made(fq->inputs[0]) || int8_read(fq->outputs[0])))
      steps.push_back(fq->name);
  out.insert(steps.begin(), steps.end());
  return out;
}

GraphAnalyses analyse(const Graph& graph, const std::map<std::string, QuantParams>& quant) {
  return {layers_nan_may_reach(graph), layers_quantised_by_model(graph, quant)};
}

std::set<std::string> layers_nan_may_reach(const Graph& graph) {
  std::set<std::string> layers, nan_blobs;
  std::map<std::string, const Blob*> constants;
  for (const Layer& l : graph.layers) {
    if (l.type == "constant") {
      if (const Blob* v = l.find_weight("value"); v && !l.outputs.empty()) constants[l.outputs[0]] = v;
      continue;
    }
    bool reached = false;
    for (const auto& i : l.inputs) reached = reached || nan_blobs.count(i);
    const Blob* second = nullptr;  // Div's divisor, Pow's exponent
    if (l.inputs.size() == 2)
      if (auto it = constants.find(l.inputs[1]); it != constants.end()) second = it->second;
    if (!reached && !makes_nan(l, second)) continue;
    layers.insert(l.name);
    nan_blobs.insert(l.outputs.begin(), l.outputs.end());
  }
  return layers;
}

std::string adapt_step_name(const std::string& from, const std::string& consumer, const Schema& to) {
  return consumer.empty() ? fmt::format("adapt:{}@{}", from, to.to_string()) : fmt::format("adapt:{}->{}", from, consumer);
}

namespace {

/// Builds one plan (build_plan): the executor's planning, apart from its preparing.
class PlanBuilder {
 public:
  PlanBuilder(Plan& plan, const RoutinePath& path, const std::map<std::string, QuantParams>& quant)
      : plan_(plan), path_(path), quant_(quant) {}
  void build(const std::map<std::string, Shape>& shapes);

 private:
  int add_blob(const std::string& name, BlobKind kind, const Shape& shape, const Schema& schema);
  /// Slot `slot` in schema `want` for `consumer`: itself, or an adapt step's output;
  /// the tuned adapt is looked up for `priced_for` (a childnet's child reading
  /// its layer's input: the adapt the tuner priced for the layer), else `consumer`.
  int in_schema(int slot, const Schema& want, const std::string& consumer, const std::string& priced_for = {});
  /// An adapt step converting `slot` to `want` (once per slot and schema), with the tuned routine where it applies.
  int convert(int slot, const Schema& want, const std::string& consumer, const AdaptChoice* tuned);
  /// The routine path's adapt of `blob` read by `consumer` in schema `to` (nullptr: none).
  const AdaptChoice* tuned_adapt(const std::string& blob, const std::string& consumer, const Schema& to) const;
  /// Chooses and appends the step(s) of one layer reading `input_slots`: one
  /// step, or a childnet routine's child steps (recursively). Returns its output slots.
  std::vector<int> add_layer(const Layer& layer, const std::vector<int>& input_slots,
                             const std::vector<Shape>& output_shapes, const std::vector<QuantParams>& output_quant,
                             const RoutineChoice* choice, const Schema* child_schema, const std::string& parent);
  /// Gives `step` its view of the weight store before it is prepared.
  /// Binds the step to the model's store of derived weights, in a scope of
  /// its own; returns that scope.
  std::string share_weights(Step& step);
  /// `layer` with its stored weights (core::stored_quantized: int8, blockwise) as float32, made once per
  /// model; nullptr where it holds none.
  std::shared_ptr<const Layer> float_weights_of(const Layer& layer) const;
  bool allowed(const Schema& s) const;
  /// The steps that run as one, once every step is placed: a step and the one
  /// before it (Step::fuses_previous), then int8 gates (Step::gate).
  void fuse_pairs();
  /// Warns once of the layers whose tuned routine cannot run here (at the
  /// net input shapes in `shapes`).
  void warn_tuned_missing(const std::map<std::string, Shape>& shapes);
  void fuse_gates();
  /// The schema of a net input or output of dtype `d`: the I/O schema, typed.
  Schema edge_schema(DType d) const { return Schema{io_schema_.device, d, io_schema_.layout}; }

  Plan& plan_;
  const RoutinePath& path_;
  const std::map<std::string, QuantParams>& quant_;  ///< the blobs' quantisation (Tuning::blob_quant)
  const Graph& graph_ = *plan_.graph;
  std::vector<BlobSlot>& slots_ = plan_.slots;
  std::vector<Blob>& blobs_ = plan_.blobs;
  std::vector<std::unique_ptr<Step>>& steps_ = plan_.steps;
  std::map<std::string, LayerInfo>& layer_infos_ = plan_.layer_infos;
  std::vector<std::unique_ptr<Childnet>>& childnets_ = plan_.childnets;
  const std::vector<std::string>& schemas_ = plan_.options.schemas;
  const std::shared_ptr<WeightStore>& weights_ = plan_.options.weights;
  const std::size_t memory_limit_ = plan_.options.memory_limit;
  const bool keep_nan_ = plan_.options.keep_nan;
  /// LayerInfo::threads: the options', else the calling thread's team, read once here.
  const int threads_ = plan_.options.threads;  // resolved by start_plan
  const Schema io_schema_ = plan_.options.io_schema;
  const RoutineRegistry& registry_ = *plan_.options.registry;
  /// While building: "descriptor (why)" -> the layers whose tuned routine cannot run here.
  std::map<std::string, std::vector<std::string>> tuned_missing_;
  bool layer_keep_nan_ = false;  ///< LayerInfo::keep_nan of the layer add_layer is adding
  bool layer_int8_ = false;      ///< the layer add_layer is adding defaults to qint8 (layers_quantised_by_model)
  std::map<std::pair<int, std::string>, int> adapted_;  ///< (slot, schema) -> adapted slot
  std::vector<std::string> parent_scopes_;  ///< the weight scopes of the childnets whose children are being added
};

int PlanBuilder::add_blob(const std::string& name, BlobKind kind, const Shape& shape, const Schema& schema) {
  BlobSlot s;
  s.name = name;
  s.blob = name;
  s.kind = kind;
  s.schema = schema;
  s.first = static_cast<int>(steps_.size());
  s.last = s.first;
  slots_.push_back(std::move(s));
  blobs_.push_back(Blob::view(nullptr, shape, schema.dtype, schema.layout, schema.device));
  // Calibrated quantisation travels with the blob (adapted copies "x@schema" share x's).
  auto q = quant_.find(name.substr(0, name.find('@')));
  if (q != quant_.end()) blobs_.back().quant() = q->second;
  return static_cast<int>(slots_.size()) - 1;
}

const AdaptChoice* PlanBuilder::tuned_adapt(const std::string& blob, const std::string& consumer, const Schema& to) const {
  const std::string want = to.to_string();
  for (const auto& ac : path_.adapts)
    if (ac.blob == blob && ac.consumer == consumer && ac.to_schema == want && !ac.steps.empty()) return &ac;
  return nullptr;
}

int PlanBuilder::in_schema(int slot, const Schema& want, const std::string& consumer, const std::string& priced_for) {
  if (slots_[static_cast<std::size_t>(slot)].schema == want) return slot;
  const std::string blob = slots_[static_cast<std::size_t>(slot)].name;
  // The tuned path names the schema each adapt converts from: the blob as its
  // producer wrote it, or the blob's shared copy in another schema (an adapt of
  // its own, consumer ""), which is then made first.
  const AdaptChoice* tuned = tuned_adapt(blob, priced_for.empty() ? consumer : priced_for, want);
  if (!tuned) {
    // The consumer reads the shared copy in its own schema.
    const AdaptChoice* shared = tuned_adapt(blob, "", want);
    if (shared && shared->from_schema == slots_[static_cast<std::size_t>(slot)].schema.to_string())
      return convert(slot, want, "", shared);
  }
  if (tuned && tuned->from_schema != slots_[static_cast<std::size_t>(slot)].schema.to_string()) {
    const Schema via = Schema::parse(tuned->from_schema);
    const AdaptChoice* shared = tuned_adapt(blob, "", via);
    if (shared && shared->from_schema == slots_[static_cast<std::size_t>(slot)].schema.to_string()) {
      slot = convert(slot, via, "", shared);
      if (slots_[static_cast<std::size_t>(slot)].schema == want) return slot;
    } else {
      tuned = nullptr;  // the path's producer schema did not hold (a tuned routine fell back): convert directly
    }
  }
  return convert(slot, want, consumer, tuned);
}

int PlanBuilder::convert(int slot, const Schema& want, const std::string& consumer, const AdaptChoice* tuned) {
  auto key = std::make_pair(slot, want.to_string());
  if (auto it = adapted_.find(key); it != adapted_.end()) return it->second;  // converted once, whoever reads it
  const BlobSlot& from = slots_[static_cast<std::size_t>(slot)];
  auto step = std::make_unique<Step>();
  step->name = adapt_step_name(from.name, consumer, want);
  step->adapt_consumer = consumer;
  step->adapt_layer =
      adapt_layer(step->name, from.name, fmt::format("{}@{}", from.name, want.to_string()), from.schema, want);
  step->layer = &step->adapt_layer;
  const Shape shape = blobs_[static_cast<std::size_t>(slot)].shape();  // (a copy: add_blob grows blobs_)
  step->info = adapt_info(step->adapt_layer, shape, blobs_[static_cast<std::size_t>(slot)].quant(), plan_.options);
  auto cands = registry_.candidates(step->info, want);
  const Candidate* pick = nullptr;
  // The adapt routine the tuner measured cheapest for this conversion, where it still applies.
  if (tuned)
    for (const auto& c : cands)
      if (c.support.ok && c.descriptor == tuned->steps[0]) {
        // Its parameters checked against its space as a layer routine's are.
        RoutineParams params = tuned->params;
        std::string dropped;
        if (Support ok = params_in_space(*c.routine, step->info, want, params, dropped); !ok) {
          warn("{}: tuned adapt {} cannot run here ({}); using the default choice", step->name, c.descriptor, ok.reason);
          break;
        }
        if (!dropped.empty()) info("{}: tuned adapt {} runs with its default for {}", step->name, c.descriptor, dropped);
        pick = &c;
        step->tuned = true;
        step->predicted_ms = tuned->predicted_ms;
        step->params = std::move(params);
      }
  if (!pick)
    for (const auto& c : cands)
      if (c.support.ok && (!pick || registry_.default_rank("adapt", c.descriptor) <
                                        registry_.default_rank("adapt", pick->descriptor)))
        pick = &c;
  if (!pick) {
    // No one adapt converts a device's blob from or to a blocked CPU layout
    // (CPU chains compose CPU adapts only): two steps through the plain CPU
    // schema, which every device's transfers reach. A layer tuned or pinned
    // onto a device beside layers left to blocked CPU defaults needs it (the
    // accuracy budget's search runs such paths, one layer at a time).
    const Schema plain{};
    if (!(from.schema == plain) && !(want == plain) && (from.schema.device != Device::cpu || want.device != Device::cpu)) {
      const int via = convert(slot, plain, "", nullptr);
      return convert(via, want, consumer, nullptr);
    }
    throw Error(fmt::format("no adapt routine converts blob '{}' from {} to {}", from.name,
                            from.schema.to_string(), want.to_string()),
                {}, consumer, "inputs");
  }
  step->routine = *pick;
  step->input_blobs = {slot};
  share_weights(*step);
  if (slots_[static_cast<std::size_t>(slot)].kind == BlobKind::constant) {
    // A constant's copy in another schema (a blocked layout, a device) is a
    // constant too: converted once by the executor, not by a step of every run.
    const int out = add_blob(step->adapt_layer.outputs[0], BlobKind::constant, shape, want);
    slots_[static_cast<std::size_t>(out)].blob = slots_[static_cast<std::size_t>(slot)].blob;
    plan_.constant_adapts.push_back({std::move(step), slot, out});
    adapted_[key] = out;
    return out;
  }
  slots_[static_cast<std::size_t>(slot)].last = static_cast<int>(steps_.size());
  int out = add_blob(step->adapt_layer.outputs[0], BlobKind::planned, shape, want);
  slots_[static_cast<std::size_t>(out)].blob = slots_[static_cast<std::size_t>(slot)].blob;
  step->output_blobs = {out};
  steps_.push_back(std::move(step));
  adapted_[key] = out;
  return out;
}

std::vector<int> PlanBuilder::add_layer(const Layer& layer, const std::vector<int>& input_slots,
                                     const std::vector<Shape>& output_shapes,
                                     const std::vector<QuantParams>& output_quant, const RoutineChoice* rc,
                                     const Schema* child_schema, const std::string& parent) {
  auto step = std::make_unique<Step>();
  step->name = layer.name;
  step->parent = parent;
  step->layer = &layer;
  step->info.layer = &layer;
  step->info.memory_limit = memory_limit_;
  step->info.threads = threads_;
  step->info.routines = &registry_;
  step->info.keep_nan = layer_keep_nan_;
  for (int s : input_slots) {
    step->info.input_shapes.push_back(blobs_[static_cast<std::size_t>(s)].shape());
    step->info.input_quant.push_back(blobs_[static_cast<std::size_t>(s)].quant());
  }
  step->info.output_shapes = output_shapes;
  step->info.output_quant = output_quant;
  if (parent.empty()) layer_infos_[layer.name] = step->info;  // before the weight store is bound
  // A weight the model holds as int8 (a tuned file's, core::int8_weight) goes
  // as it is to the built-in qint8 routines only, which derive theirs from the
  // int8 values: no float copy where the file prepared their weights. Any
  // other routine (a plugin's, a float one, the default after a tuned qint8
  // routine failed) reads the layer with those weights' float32 values.
  auto read_floats = [&] {
    if (step->float_layer) return;
    step->float_layer = float_weights_of(layer);
    if (step->float_layer) step->layer = step->info.layer = step->float_layer.get();
  };
  // A blockwise weight (core::block_quantized: 4-bit LLM weights) goes as it is
  // to the built-in routines that read it (cpu/nbits_dense), the model's own
  // arithmetic in a quarter of float32's memory; any other gets the floats.
  const bool holds_blocks =
      std::any_of(layer.weights.begin(), layer.weights.end(), [](const auto& kv) { return block_quantized(kv.second); });
  // A layer whose weight is integers by definition (dynamic_quant_dense)
  // computes with them in every built-in routine: no float copy.
  const bool integer_weight = has_integer_weight(layer);
  auto reads_stored = [&](const Routine* r, const Schema& s) {
    if (!r || !registry_.builtin(r)) return false;
    if (integer_weight) return true;
    if (!holds_blocks) return s.dtype == DType::qint8;
    try {
      return s.dtype != DType::qint8 && r->supports(step->info, s).ok;
    } catch (const std::exception&) {
      return false;
    }
  };

  // A step that meets an empty tensor (a zero-size dim) runs cpu/ref, which
  // loops over nothing (a reduction over nothing gives its identity); the other
  // routines are never asked to plan for one.
  bool chosen = false;
  auto empty = [](const Shape& s) { return s.numel() == 0; };
  if (!child_schema && (std::any_of(step->info.input_shapes.begin(), step->info.input_shapes.end(), empty) ||
                        std::any_of(output_shapes.begin(), output_shapes.end(), empty))) {
    Schema schema;
    if (const Routine* r = registry_.find(layer.type, "cpu/ref", &schema)) {
      read_floats();
      step->routine = Candidate{r, schema, "cpu/ref", r->supports(step->info, schema)};
      chosen = step->routine.support.ok;
    }
  }
  // The tuned choice where it still applies here, else the default.
  if (rc && !chosen) {
    Schema schema;
    const Routine* r = registry_.find(layer.type, rc->descriptor, &schema);
    if (!reads_stored(r, schema)) read_floats();
    Support why = Support::no("it is not registered in this build");
    try {
      if (r) why = r->supports(step->info, schema);
    } catch (const std::exception& e) {  // as the registry counts it
      why = Support::no(fmt::format("supports() failed: {}", e.what()));
    }
    RoutineParams params = rc->params;
    std::string dropped;
    if (why.ok) why = params_in_space(*r, step->info, schema, params, dropped);
    if (why.ok && !dropped.empty())
      info("layer '{}': tuned routine {} runs with its default for {}", layer.name, rc->descriptor, dropped);
    if (why.ok && !allowed(schema)) {
      why = Support::no(fmt::format("it computes in {}, which the session does not allow", schema.to_string()));
      info("layer '{}': tuned routine {} skipped ({}); using the default choice", layer.name, rc->descriptor, why.reason);
    } else if (!why.ok && keep_nan_) {  // the plan for inputs with NaN: the tuned path's fast routines may lose it
      info("layer '{}': tuned routine {} skipped where inputs hold NaN or inf ({}); using the default choice",
           layer.name, rc->descriptor, why.reason);
    } else if (!why.ok) {  // one warning for all of them, once the layers are placed
      tuned_missing_[fmt::format("{} ({})", rc->descriptor, why.reason)].push_back(layer.name);
    }
    if (why.ok) {
      step->routine = Candidate{r, schema, rc->descriptor, why};
      step->params = std::move(params);
      step->tuned = true;
      step->predicted_ms = rc->predicted_ms;
      step->measured_ms = rc->measured_ms;
      chosen = true;
    }
  }
  if (!chosen && holds_blocks && !child_schema) {
    try {
      Candidate c = registry_.default_choice_any_schema(step->info, Schema{}, [this](const Schema& s) { return allowed(s); });
      if (c.routine && c.support.ok && registry_.builtin(c.routine)) {
        step->routine = std::move(c);
        chosen = true;
      }
    } catch (const Error&) {  // none reads the blocks: the floats below
    }
  }
  if (!chosen) {
    // The model's own int8 layer goes to a built-in qint8 routine with its
    // stored weights where one takes it: no float copy (a QDQ ResNet50's
    // session held 94 MB of float32 weights it never read).
    const bool stored_first = layer_int8_ && !child_schema && !step->float_layer;
    if (!stored_first) read_floats();
    if (child_schema) {
      // A child computes in the schema its childnet gave it.
      step->routine = registry_.default_choice(step->info, *child_schema);
    } else {
      // The layout the computed inputs already have (a constant first operand,
      // mul(scale, x), is converted once; x would be reordered every run).
      Schema preferred = input_slots.empty() ? Schema{} : slots_[static_cast<std::size_t>(input_slots[0])].schema;
      for (int in : input_slots)
        if (slots_[static_cast<std::size_t>(in)].kind != BlobKind::constant) {
          preferred = slots_[static_cast<std::size_t>(in)].schema;
          break;
        }
      // After an int8 layer a float one stays in its layout: one dequantising adapt, no reorder.
      if (!layer_int8_ && preferred.dtype == DType::qint8) preferred.dtype = DType::float32;
      auto is_allowed = [this](const Schema& s) { return allowed(s); };
      // The model's own quantisation: on qint8 routines where one takes the layer,
      // channels last (oneDNN's int8 convolutions reorder nchw blobs inside:
      // a QDQ MobileNetV2 ran 3.0 ms so, 1.0 tuned in nhwc, on a Zen 5).
      auto int8_choice = [&] {
        step->routine = registry_.default_choice_any_schema(
            step->info, preferred.dtype == DType::qint8 ? preferred : Schema{Device::cpu, DType::qint8, Layout::nhwc},
            is_allowed, DType::qint8);
      };
      if (layer_int8_) {
        int8_choice();
        if (stored_first && !(step->routine.routine && reads_stored(step->routine.routine, step->routine.schema))) {
          read_floats();
          int8_choice();
        }
      }
      if (!step->routine.routine) {
        read_floats();
        step->routine = registry_.default_choice_any_schema(step->info, preferred, is_allowed);
      }
      if (!allowed(step->routine.schema))
        throw Error(fmt::format("no float32 routine in the session's schemas ({}) supports this layer",
                                fmt::join(schemas_, ", ")),
                    {}, layer.name, "schemas");
    }
  }
  const Schema schema = step->routine.schema;

  // A childnet routine: its children become steps here, their blobs planned like any other.
  std::optional<Childnet> children;
  const std::string scope = share_weights(*step);  // before childnet(): a childnet's derived weights (Winograd's transformed ones) are shared too
  try {
    children = step->routine.routine->childnet(step->info, schema, step->params);
  } catch (const Error& e) {
    throw e.with_layer(layer.name);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{} failed to build its childnet: {}", step->routine.descriptor, e.what()), {}, layer.name, "routine");
  }
  if (children) {
    const Childnet& cn = *childnets_.emplace_back(std::make_unique<Childnet>(std::move(*children)));
    std::vector<ChildShapes> shapes;
    try {
      shapes = child_shapes(cn, step->info);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", step->routine.descriptor, e.message()), {}, layer.name, e.field());
    }
    std::map<std::string, int> local;  // child blob name -> slot
    for (std::size_t i = 0; i < input_slots.size(); ++i) local[cn.inputs[i]] = input_slots[i];
    parent_scopes_.push_back(scope);
    struct Pop {
      std::vector<std::string>& scopes;
      ~Pop() { scopes.pop_back(); }
    } pop{parent_scopes_};
    std::vector<int> outs(output_shapes.size(), -1);
    for (std::size_t k = 0; k < cn.layers.size(); ++k) {
      const Layer& child = cn.layers[k];
      std::vector<int> child_in;
      for (const auto& i : child.inputs) child_in.push_back(local.at(i));  // (child_shapes checked each is written)
      const RoutineChoice* child_rc = rc && step->tuned ? rc->find_child(child.name) : nullptr;
      if (!child_rc) child_rc = path_.find(child.name);
      std::vector<int> produced = add_layer(child, child_in, shapes[k].outputs, shapes[k].output_quant, child_rc,
                                            &cn.schemas[k], parent.empty() ? layer.name : parent);
      for (std::size_t o = 0; o < child.outputs.size(); ++o) {
        local[child.outputs[o]] = produced[o];
        for (std::size_t j = 0; j < cn.outputs.size(); ++j)
          if (cn.outputs[j] == child.outputs[o]) outs[j] = produced[o];
      }
    }
    for (std::size_t j = 0; j < outs.size(); ++j)
      if (outs[j] < 0)
        throw Error(fmt::format("no child layer writes the layer's output '{}'", cn.outputs[j]), {}, layer.name, "routine");
    // The parent's outputs carry the parent's blob names (messages, quantisation).
    for (std::size_t j = 0; j < outs.size(); ++j) {
      BlobSlot& out = slots_[static_cast<std::size_t>(outs[j])];
      out.name = parent.empty() ? layer.outputs[j] : parent + "/" + layer.outputs[j];
      out.blob = parent.empty() ? layer.outputs[j] : std::string();
    }
    return outs;
  }

  for (int s : input_slots) step->input_blobs.push_back(in_schema(s, schema, layer.name, parent));
  int here = static_cast<int>(steps_.size());
  for (int s : step->input_blobs) slots_[static_cast<std::size_t>(s)].last = here;
  std::vector<int> outs;
  for (std::size_t k = 0; k < layer.outputs.size(); ++k) {
    // A child's internal blobs are named after the layer they belong to.
    std::string name = parent.empty() ? layer.outputs[k] : parent + "/" + layer.outputs[k];
    int slot = add_blob(name, BlobKind::planned, step->info.output_shapes[k], schema);
    if (!parent.empty()) slots_[static_cast<std::size_t>(slot)].blob.clear();
    if (k < output_quant.size()) blobs_[static_cast<std::size_t>(slot)].quant() = output_quant[k];
    step->output_blobs.push_back(slot);
    outs.push_back(slot);
  }
  steps_.push_back(std::move(step));
  return outs;
}

std::shared_ptr<const Layer> PlanBuilder::float_weights_of(const Layer& layer) const {
  if (std::none_of(layer.weights.begin(), layer.weights.end(), [](const auto& kv) { return stored_quantized(kv.second); }))
    return nullptr;
  auto make = [&] {
    Layer copy = layer;
    for (auto& [k, w] : copy.weights)
      if (stored_quantized(w)) w = float_weight(w);
    return std::make_shared<const Layer>(std::move(copy));
  };
  if (!weights_) return make();
  // '|' first: no step's scope (its name, then '|') begins so.
  return std::static_pointer_cast<const Layer>(
      weights_->get_or_make("|float32 weights|" + layer.name, [&]() -> std::shared_ptr<const void> { return make(); }));
}

std::string PlanBuilder::share_weights(Step& step) {
  if (!weights_) return {};
  // Everything a routine's derived weights depend on besides the layer's own
  // weights; a childnet's child's, its parent's too (Winograd's wgconv child
  // has other weights at each tile of its parent, under the same name).
  std::string scope = fmt::format("{}{}|{}|", parent_scopes_.empty() ? "" : parent_scopes_.back() + ">", step.name,
                                  step.routine.descriptor);
  for (const auto& [k, v] : step.params) scope += fmt::format("{}={},", k, v);
  auto quant = [&](const QuantParams& q) {
    scope += fmt::format("q{}:", q.axis);
    for (float f : q.scales) scope += fmt::format("{},", f);
    for (int32_t z : q.zero_points) scope += fmt::format("{},", z);
  };
  // No shapes: derived weights depend on the layer's weights, not on the input
  // size, so every shape a session meets shares them; a routine whose packing
  // does depend on a size puts what it depends on in its own key.
  for (const auto& q : step.info.input_quant) quant(q);
  for (const auto& q : step.info.output_quant) quant(q);
  step.shared_weights = std::make_unique<ScopedWeights>(weights_, scope);
  step.info.shared = step.shared_weights.get();
  return scope;
}

bool PlanBuilder::allowed(const Schema& s) const {
  return schemas_.empty() || std::any_of(schemas_.begin(), schemas_.end(), [&](const std::string& p) { return s.matches(p); });
}

/// The bytes of the blobs alive while each layer runs, which must fit the
/// session's memory limit together, checked before the layer's routine is
/// prepared: the arena's own check comes only after every layer was (a long
/// net at a huge shape prepared for a minute, XNNPACK running each operator
/// on scratch of its size, to be refused). Each blob lives until its last
/// reader in graph order; net outputs live on. A running sum (blobs join as
/// their producer is added, leave after their last reader): summed over every
/// blob at every layer, this check took most of a new shape's planning on a
/// net of thousands of layers.
class LiveBytes {
 public:
  LiveBytes(const Graph& graph, const std::map<std::string, Shape>& shapes, std::size_t limit)
      : shapes_(shapes), limit_(limit), leaving_(graph.layers.size() + 1) {
    for (std::size_t i = 0; i < graph.layers.size(); ++i)
      for (const auto& b : graph.layers[i].inputs) last_reader_[b] = i;
    for (const auto& o : graph.outputs) last_reader_[o] = graph.layers.size();
  }
  /// Before layer `index`: the blobs the one before it read last leave.
  void at(std::size_t index) {
    if (index > 0)
      for (uint64_t bytes : leaving_[index - 1]) live_ -= bytes;
  }
  /// A planned layer output of `bytes` joins until its last reader.
  void join(const std::string& blob, uint64_t bytes) {
    const auto r = last_reader_.find(blob);
    if (r == last_reader_.end()) return;
    live_ += bytes;
    leaving_[r->second].push_back(bytes);
  }
  /// Throws Error naming the layer where what is alive and its outputs (at least a byte a value) exceed the limit.
  void check(const Layer& layer) const {
    if (!limit_) return;
    uint64_t needed = live_;
    for (const auto& o : layer.outputs) needed += static_cast<uint64_t>(shapes_.at(o).numel());
    if (needed > limit_)
      throw Error(fmt::format("the blobs alive while it runs take at least {} bytes, more than the session's memory "
                              "limit of {} bytes", needed, limit_),
                  {}, layer.name, "memory_limit");
  }

 private:
  const std::map<std::string, Shape>& shapes_;
  std::size_t limit_;
  std::map<std::string, std::size_t> last_reader_;
  std::vector<std::vector<uint64_t>> leaving_;  ///< bytes leaving after layer i
  uint64_t live_ = 0;  ///< planned layer outputs read at or after the current layer, in their schemas
};

void PlanBuilder::warn_tuned_missing(const std::map<std::string, Shape>& shapes) {
  if (tuned_missing_.empty()) return;
  std::size_t n = 0;
  std::string groups;
  for (const auto& [routine, layers] : tuned_missing_) {
    n += layers.size();
    groups += fmt::format("; {}: '{}'", routine, fmt::join(layers, "', '"));
  }
  tuned_missing_.clear();
  // A path tuned at other input shapes (a decode step's, planned at a
  // prompt's) may name routines that do not take these: nothing is wrong.
  std::string tuned_at, here;
  for (const auto& in : graph_.inputs) {
    auto t = path_.input_shapes.find(in.name);
    const Shape& tuned = t != path_.input_shapes.end() ? t->second : in.shape;
    auto s = shapes.find(in.name);
    if (s == shapes.end() || s->second == tuned) continue;
    tuned_at += fmt::format("{}{}={}", tuned_at.empty() ? "" : " ", in.name, tuned.to_string());
    here += fmt::format("{}{}={}", here.empty() ? "" : " ", in.name, s->second.to_string());
  }
  if (!tuned_at.empty()) {
    info("{} layer(s) run the default choice at input shapes {}: their routine, tuned at {}, does not take them{}", n,
         here, tuned_at, groups);
    return;
  }
  // A file tuned on another machine (x86 on ARM, AVX-512 on AVX2): name every such layer once.
  warn("{} layer(s) cannot run their tuned routine here and run the default choice (tuned on another CPU? "
       "tune again on this one){}",
       n, groups);
}

void PlanBuilder::build(const std::map<std::string, Shape>& shapes) {
  const Graph& graph = graph_;
  std::map<std::string, int> blob_index;  // blob name -> slot in its producer's schema
  // Blobs over the limit are refused before a routine's prepare() allocates
  // scratch memory of their size: a net input at its I/O schema's size, a
  // layer output (its schema not chosen yet) at one byte per value.
  auto check_fits = [&](const std::string& layer, const std::string& blob, const Shape& shape, std::size_t value_bytes) {
    const auto values = static_cast<uint64_t>(shape.numel());
    if (memory_limit_ && values > memory_limit_ / value_bytes)
      throw Error(fmt::format("blob '{}' {} holds {} values of at least {} bytes, more than the session's memory limit "
                              "of {} bytes", blob, shape.to_string(), values, value_bytes, memory_limit_),
                  {}, layer, "memory_limit");
  };

  for (const auto& in : graph.inputs) {
    const Schema s = edge_schema(in.dtype);
    check_fits({}, in.name, shapes.at(in.name), dtype_size(s.dtype));
    blob_index[in.name] = add_blob(in.name, BlobKind::net_input, shapes.at(in.name), s);
  }
  LiveBytes live(graph, shapes, memory_limit_);

  // The model's own int8 layers (also where every layer keeps NaN: int8 holds
  // none, quantising one gives a number, as ONNX Runtime's QuantizeLinear
  // does) and the layers NaN may reach: the session's, else computed here.
  std::shared_ptr<const GraphAnalyses> analyses = plan_.options.analyses;
  if (!analyses || plan_.specialized) analyses = std::make_shared<const GraphAnalyses>(analyse(graph, quant_));
  const std::set<std::string> no_layers;
  const std::set<std::string>& nan_layers = keep_nan_ ? no_layers : analyses->nan_may_reach;
  const std::set<std::string>& int8_layers = analyses->quantised_by_model;
  for (std::size_t layer_index = 0; layer_index < graph.layers.size(); ++layer_index) {
    const Layer& layer = graph.layers[layer_index];
    live.at(layer_index);
    if (layer.type == "constant") {
      // Constants are bound to their weight's memory once; nothing runs.
      const Blob& value = layer.weight("value");
      int slot = add_blob(layer.outputs[0], BlobKind::constant, value.shape(), Schema{Device::cpu, value.dtype(), Layout::nchw});
      // The blob's calibrated quantisation (the one the tuner priced its adapts
      // with) wins over the weight's storage scales, as on any blob; the graph's
      // weight keeps its own.
      QuantParams calibrated = blobs_[static_cast<std::size_t>(slot)].quant();
      blobs_[static_cast<std::size_t>(slot)] = value;
      if (!calibrated.scales.empty()) blobs_[static_cast<std::size_t>(slot)].quant() = std::move(calibrated);
      blob_index[layer.outputs[0]] = slot;
      continue;
    }
    auto quant_of = [&](const std::string& blob) {
      auto q = quant_.find(blob);
      return q == quant_.end() ? QuantParams{} : q->second;
    };
    std::vector<int> ins;
    for (const auto& i : layer.inputs) ins.push_back(blob_index.at(i));
    std::vector<Shape> out_shapes;
    std::vector<QuantParams> out_quant;
    for (const auto& o : layer.outputs) {
      out_shapes.push_back(shapes.at(o));
      out_quant.push_back(quant_of(o));
      check_fits(layer.name, o, out_shapes.back(), 1);
    }
    live.check(layer);
    layer_keep_nan_ = keep_nan_ || nan_layers.count(layer.name);
    layer_int8_ = int8_layers.count(layer.name) > 0;
    auto outs = add_layer(layer, ins, out_shapes, out_quant, path_.find(layer.name), nullptr, {});
    for (std::size_t k = 0; k < layer.outputs.size(); ++k) {
      blob_index[layer.outputs[k]] = outs[k];
      if (slots_[static_cast<std::size_t>(outs[k])].kind == BlobKind::planned)
        live.join(layer.outputs[k], blobs_[static_cast<std::size_t>(outs[k])].byte_size());
    }
  }
  layer_keep_nan_ = false;
  layer_int8_ = false;
  warn_tuned_missing(shapes);

  // Net outputs leave in the I/O schema (a net's: float32, nchw, on the CPU),
  // typed ones in their dtype.
  for (const auto& o : graph.outputs) {
    auto typed = graph.output_dtypes.find(o);
    int slot = in_schema(blob_index.at(o), edge_schema(typed == graph.output_dtypes.end() ? io_schema_.dtype : typed->second),
                         "output");
    plan_.net_outputs.push_back(slot);
  }
  for (const auto& in : graph.inputs) plan_.net_inputs.push_back(blob_index.at(in.name));
  const int end = static_cast<int>(steps_.size());
  for (int s : plan_.net_outputs) slots_[static_cast<std::size_t>(s)].last = end;
  fuse_pairs();
  fuse_gates();
}

void PlanBuilder::fuse_pairs() {
  // A step and the next layer's step, which reads its one output (and maybe
  // other blobs) and is that blob's only reader, as one prepared routine
  // (oneDNN's 1x1 + depthwise pair, a first convolution reading the plain
  // image its adapt would copy, a convolution adding its result to a
  // residual). Adapts of other blobs may run between them, and one adapt of
  // the output itself that only the second reads: the pair then computes
  // across the two schemas (a bfloat16 convolution writing the float32
  // residual sum), and that adapt runs nothing. Or, in place of that adapt, a
  // fake_quant that restates the output's quantisation (the identity table in
  // int8: an ONNX QDQ file's QuantizeLinear after a convolution, before the
  // residual add), which then runs nothing either.
  std::vector<bool> absorbed(steps_.size(), false);  // a step already computing the one before it
  auto reads = [](const Step& s, int blob) { return std::count(s.input_blobs.begin(), s.input_blobs.end(), blob); };
  auto restates = [](const Step& s, int blob, const Schema& schema) {
    if (s.layer->type != "fake_quant" || !s.parent.empty() || s.input_blobs != std::vector<int>{blob} ||
        s.output_blobs.size() != 1 || !(s.routine.schema == schema))
      return false;
    int8_t table[256];
    try {
      if (!s.routine.routine->int8_table(s.info, s.routine.schema, table)) return false;
    } catch (const std::exception&) {
      return false;
    }
    return int8_table_identity(table);
  };
  for (std::size_t t = 0; t + 1 < steps_.size(); ++t) {
    Step& a = *steps_[t];
    if (!a.parent.empty() || absorbed[t] || !a.fused_into.empty() || a.output_blobs.size() != 1) continue;
    const int out = a.output_blobs[0];
    // After a layer's step: the adapts, the one converting its output (`via`), the step after them.
    std::size_t u = t + 1;
    int via = -1;
    bool other_reader = false;
    if (a.layer->type != "adapt")
      for (; u < steps_.size() && steps_[u]->layer->type == "adapt" && steps_[u]->parent.empty(); ++u)
        if (reads(*steps_[u], out)) {
          other_reader = other_reader || via >= 0;
          via = static_cast<int>(u);
        }
    bool restated = false;
    if (via < 0 && u + 1 < steps_.size() && a.layer->type != "adapt" && restates(*steps_[u], out, a.routine.schema)) {
      via = static_cast<int>(u++);
      restated = true;
    }
    if (u == steps_.size() || other_reader) continue;
    Step& b = *steps_[u];
    if (b.layer->type == "adapt" || !b.parent.empty() || absorbed[u]) continue;
    const int read = via >= 0 ? steps_[static_cast<std::size_t>(via)]->output_blobs[0] : out;
    if (reads(b, read) != 1 || ((via < 0 || restated) && !(a.routine.schema == b.routine.schema))) continue;
    // Read by b alone (through `via`): not a net output, no other adapted copy, no later reader.
    const BlobSlot& between = slots_[static_cast<std::size_t>(out)];
    if (between.kind != BlobKind::planned || between.last != (via >= 0 ? via : static_cast<int>(u))) continue;
    if (via >= 0) {
      const BlobSlot& copy = slots_[static_cast<std::size_t>(read)];
      if (copy.kind != BlobKind::planned || copy.last != static_cast<int>(u) || !(copy.schema == b.routine.schema))
        continue;
    }
    // Across a restating fake_quant, b reads a's output under the fake_quant's
    // name: routines pair layers by names, so b's layer reads a's instead.
    std::shared_ptr<Layer> renamed;
    LayerInfo b_info = b.info;
    if (restated) {
      renamed = std::make_shared<Layer>(*b.info.layer);
      for (auto& in : renamed->inputs)
        if (in == steps_[static_cast<std::size_t>(via)]->layer->outputs[0]) in = a.layer->outputs[0];
      b_info.layer = renamed.get();
    }
    bool fuses = false;
    try {
      fuses = b.routine.routine->fuses_previous(a.info, *a.routine.routine, a.params, b_info, b.routine.schema, b.params);
    } catch (const std::exception& e) {
      debug("'{}' and '{}' run apart: {} could not tell whether they fuse ({})", a.name, b.name, b.routine.descriptor,
            e.what());
    }
    if (!fuses) continue;
    debug("'{}' and '{}' run as one step of {}: blob '{}' is never written{}", a.name, b.name, b.routine.descriptor,
          between.name,
          restated ? fmt::format(" (nor '{}', which restates it)", steps_[static_cast<std::size_t>(via)]->name)
          : via >= 0 ? fmt::format(" (nor its {} copy)", b.routine.schema.to_string())
                     : std::string());
    b.fuses = b.fuses_previous = true;
    b.fused_previous_step = t;
    if (renamed) {
      b.pair_layer = renamed;
      b.info.layer = renamed.get();
    }
    a.fused_into = b.name;
    if (via >= 0) steps_[static_cast<std::size_t>(via)]->fused_into = b.name;
    absorbed[u] = true;
  }
}

void PlanBuilder::fuse_gates() {
  // A binary step one of whose inputs is the other through one-input int8
  // table steps that nothing else reads: one table (YOLOv8's int8 SiLU).
  std::vector<int> readers(slots_.size(), 0), producer(slots_.size(), -1);
  for (std::size_t t = 0; t < steps_.size(); ++t) {
    for (int s : steps_[t]->input_blobs) ++readers[static_cast<std::size_t>(s)];
    for (int s : steps_[t]->output_blobs) producer[static_cast<std::size_t>(s)] = static_cast<int>(t);
  }
  for (int s : plan_.net_outputs) ++readers[static_cast<std::size_t>(s)];  // the caller reads them too
  auto alone = [](const Step& s) {
    return s.parent.empty() && s.fused_into.empty() && !s.fuses && s.layer->type != "adapt";
  };
  for (auto& step_ptr : steps_) {
    Step& m = *step_ptr;
    if (m.input_blobs.size() != 2 || m.output_blobs.size() != 1 || !alone(m) || m.input_blobs[0] == m.input_blobs[1]) continue;
    for (std::size_t gated = 0; gated < 2; ++gated) {
      const int x = m.input_blobs[1 - gated];
      // Back from the gated input through one-input table steps that nothing else reads, to x.
      std::vector<int> chain;
      std::vector<std::array<int8_t, 256>> tables;
      bool reaches_x = false;
      for (int blob = m.input_blobs[gated]; !reaches_x;) {
        const auto b = static_cast<std::size_t>(blob);
        if (readers[b] != 1 || slots_[b].kind != BlobKind::planned || producer[b] < 0) break;
        const Step& s = *steps_[static_cast<std::size_t>(producer[b])];
        if (s.input_blobs.size() != 1 || s.output_blobs.size() != 1 || !alone(s) || !(s.routine.schema == m.routine.schema))
          break;
        int8_t table[256];
        if (!s.routine.routine->int8_table(s.info, s.routine.schema, table)) break;
        chain.push_back(producer[b]);
        tables.emplace_back();
        std::copy(table, table + 256, tables.back().begin());
        blob = s.input_blobs[0];
        reaches_x = blob == x;
      }
      if (!reaches_x || !m.routine.routine->gates_by_table(m.info, m.routine.schema, gated)) continue;
      Step::Gate g;
      g.gated = gated;
      for (int u = 0; u < 256; ++u) g.table[static_cast<std::size_t>(u)] = static_cast<int8_t>(static_cast<uint8_t>(u));
      for (auto it = tables.rbegin(); it != tables.rend(); ++it)  // the first applied first
        for (int8_t& v : g.table) v = (*it)[static_cast<uint8_t>(v)];
      g.chain.assign(chain.rbegin(), chain.rend());
      debug("'{}' runs as one table: {} step(s) of its input '{}' fold into it", m.name, chain.size(),
            slots_[static_cast<std::size_t>(x)].name);
      for (int c : chain) steps_[static_cast<std::size_t>(c)]->fused_into = m.name;
      m.fuses = true;
      m.gate = std::move(g);
      break;
    }
  }
}

/// A plan of `options` with what they leave open resolved: the process's
/// registry as it is now, the calling thread's team.
Plan start_plan(PlanOptions options) {
  Plan plan;
  plan.options = std::move(options);
  if (!plan.options.registry) plan.options.registry = RoutineRegistry::instance().snapshot();
  if (plan.options.threads <= 0) plan.options.threads = global_pool().num_threads();
  return plan;
}

}  // namespace

Plan build_plan(const Graph& given, const Tuning& tuning, const std::map<std::string, Shape>& shapes,
                const RoutinePath* path, PlanOptions options) {
  Plan plan = start_plan(std::move(options));
  plan.specialized = specialized_if_needed(given, shapes);
  plan.graph = plan.specialized ? plan.specialized.get() : &given;
  PlanBuilder(plan, path ? *path : tuning.routine_path, tuning.blob_quant).build(shapes);
  return plan;
}

Plan build_plan(std::unique_ptr<Graph> specialized, const Tuning& tuning, const std::map<std::string, Shape>& shapes,
                const RoutinePath& path, PlanOptions options) {
  Plan plan = start_plan(std::move(options));
  plan.specialized = std::move(specialized);
  plan.graph = plan.specialized.get();
  PlanBuilder(plan, path, tuning.blob_quant).build(shapes);
  return plan;
}

}  // namespace softneuro::core
