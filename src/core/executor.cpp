#include "core/executor.hpp"
#include "core/slices.hpp"
#include "core/shape_plan.hpp"

#include "core/aligned_memory.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/thread_pool.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace softneuro::core {
namespace {


/// The step another step computes (Step::fused_into).
struct ComputedElsewhere final : PreparedRoutine {
  void run(const RunArgs&) override {}
};

std::string join_names(std::span<const NamedBlob> blobs) {
  std::string s;
  for (const auto& b : blobs) s += (s.empty() ? "" : ", ") + b.name;
  return s;
}

}  // namespace

void Executor::convert_constant(Step& step, int from, int to, std::shared_ptr<void>& into) {
  const Schema want = slots_[static_cast<std::size_t>(to)].schema;
  Blob& out = blobs_[static_cast<std::size_t>(to)];
  auto allocate_on = [&](Device device, std::size_t bytes) -> std::shared_ptr<void> {
    bytes = std::max<std::size_t>(64, bytes);
    if (device == Device::cpu) {
      void* p = allocate_aligned(bytes);
      if (!p) throw Error(fmt::format("out of memory converting constant '{}' ({} bytes)", slots_[static_cast<std::size_t>(from)].name, bytes));
      return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    }
    const DeviceMemory* dm = device_memory(device);
    if (!dm) throw Error(fmt::format("no {} device is available", to_string(device)));
    void* p = dm->allocate(bytes);
    if (!p)
      throw Error(fmt::format("out of {} memory converting constant '{}' ({} bytes)", to_string(device),
                              slots_[static_cast<std::size_t>(from)].name, bytes));
    return std::shared_ptr<void>(p, [release = dm->release](void* q) { release(q); });
  };
  std::shared_ptr<void> memory = allocate_on(want.device, storage_bytes(out.shape(), want.dtype, want.layout));
  out.rebind(memory.get());
  const std::size_t ws_bytes = step.prepared->workspace_bytes();
  std::shared_ptr<void> workspace = ws_bytes ? allocate_on(step.prepared->workspace_device(), ws_bytes) : nullptr;
  const Blob* in[] = {&blobs_[static_cast<std::size_t>(from)]};
  Blob* outs[] = {&out};
  step.prepared->run(RunArgs{in, outs, workspace.get(), &global_pool()});
  for (Device d : {slots_[static_cast<std::size_t>(from)].schema.device, want.device})
    if (d != Device::cpu) device_memory(d)->synchronize();  // before the workspace goes
  into = std::move(memory);
}

Executor::Executor(Plan plan, std::shared_ptr<DeviceQueues> queues, std::shared_ptr<HostArena> host_arena)
    : queues_(std::move(queues)), plan_(std::move(plan)) {
  const DeviceQueues::Binding bound = queues_ ? queues_->bind() : DeviceQueues::Binding{};  // prepare() on the session's queues
  // Every routine prepared (each step shares the model's derived weights
  // since the plan gave it its scope), the constants' copies converted.
  constant_copies_.resize(plan_.constant_adapts.size());
  for (std::size_t i = 0; i < plan_.constant_adapts.size(); ++i) {
    Step& step = *plan_.constant_adapts[i].step;
    step.prepared = step.routine.routine->prepare(step.info, step.routine.schema, step.params);
    convert_constant(step, plan_.constant_adapts[i].from, plan_.constant_adapts[i].to, constant_copies_[i]);
  }
  // The plan's fused steps are prepared with the step that computes them.
  for (std::size_t t = 0; t < steps_.size(); ++t) {
    Step& step = *steps_[t];
    if (step.fuses_previous) {
      prepare_fused_pair(t);
    } else if (step.gate) {
      prepare_step(step);
      prepare_gate(step);
    } else if (step.fused_into.empty()) {
      prepare_step(step);
    }
  }
  share_views();
  share_accumulators();
  share_slices();
  note_checking_steps();

  plan_arenas(host_arena);

  for (auto& step : steps_) {
    for (int s : step->input_blobs) step->inputs.push_back(&blobs_[static_cast<std::size_t>(s)]);
    for (int s : step->output_blobs) step->outputs.push_back(&blobs_[static_cast<std::size_t>(s)]);
  }
  // [device graphs] Record and replay the runs of steps a device backend can take.
  std::vector<Device> devices;
  std::vector<const PreparedRoutine*> prepared;
  for (const Arena& a : arenas_)
    if (a.device != Device::cpu) devices.push_back(a.device);
  for (const auto& step : steps_) prepared.push_back(step->prepared.get());
  device_graphs_.init(devices, prepared);
}
namespace {
/// Same shape, dtype and values (the same memory, or equal bytes).
bool same_blob(const Blob& a, const Blob& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype() || a.layout() != b.layout()) return false;
  if (a.data() == b.data()) return true;
  return a.data() && b.data() && std::memcmp(a.data(), b.data(), a.byte_size()) == 0;
}

}  // namespace

bool Executor::rebind(const std::unordered_map<std::string_view, Shape>& shapes, const SpecializeChanges& changes,
                      std::string* why) {
  auto no = [why](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (uses_device()) return no("the plan has device steps");
  Graph* own = plan_.specialized.get();
  if (!own && (!changes.constants.empty() || !changes.params.empty()))
    return no("the plan's graph has no shape computations");
  // The layers of the graph at these shapes are the plan's; what differs is
  // shapes, reshape targets and the constants computed from shapes.
  std::vector<bool> layer_changed(own ? own->layers.size() : 0, false);
  std::map<std::string, std::size_t> constant_layer;  // blob -> its constant layer
  std::vector<const std::map<std::string, Attr>*> new_params(layer_changed.size(), nullptr);
  std::vector<const Blob*> new_values(layer_changed.size(), nullptr);
  if (own)
    for (std::size_t i = 0; i < own->layers.size(); ++i) {
      const Layer& a = own->layers[i];
      if (a.type == "constant" && !a.outputs.empty()) {
        constant_layer[a.outputs[0]] = i;
        if (auto c = changes.constants.find(a.name); c != changes.constants.end()) {
          const Blob* v = a.find_weight("value");
          layer_changed[i] = !v || !same_blob(*v, c->second);
          new_values[i] = &c->second;
        }
      } else if (auto p = changes.params.find(a.name); p != changes.params.end()) {
        layer_changed[i] = a.params != p->second;
        new_params[i] = &p->second;
      }
    }
  const Graph& graph = own ? *own : graph_;
  auto layer_index = [&](const Layer* l) -> std::optional<std::size_t> {
    if (!own || own->layers.empty() || l < own->layers.data() || l >= own->layers.data() + own->layers.size())
      return std::nullopt;
    return static_cast<std::size_t>(l - own->layers.data());
  };
  auto shape_of = [&](const std::string& blob) -> const Shape* {
    auto it = shapes.find(std::string_view(blob));
    return it == shapes.end() ? nullptr : &it->second;
  };
  // Every slot's shape there; a child's own blobs only change with their parent.
  std::vector<Shape> new_shapes(slots_.size());
  std::vector<bool> slot_changed(slots_.size(), false);
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    new_shapes[i] = blobs_[i].shape();
    if (slots_[i].blob.empty()) continue;
    const Shape* s = shape_of(slots_[i].blob);
    if (!s) return no(fmt::format("blob '{}' has no shape there", slots_[i].blob));
    new_shapes[i] = *s;
    slot_changed[i] = *s != blobs_[i].shape();
    if (slots_[i].kind == BlobKind::constant) {
      auto c = constant_layer.find(slots_[i].blob);
      if (c != constant_layer.end() && layer_changed[c->second]) slot_changed[i] = true;
    }
  }
  // A changed constant's copies in other schemas (converted once) are converted again.
  std::vector<std::size_t> reconverted;
  for (std::size_t i = 0; i < plan_.constant_adapts.size(); ++i) {
    const auto& c = plan_.constant_adapts[i];
    if (!slot_changed[static_cast<std::size_t>(c.from)]) continue;
    slot_changed[static_cast<std::size_t>(c.to)] = true;
    new_shapes[static_cast<std::size_t>(c.to)] = new_shapes[static_cast<std::size_t>(c.from)];
    reconverted.push_back(i);
  }
  // A layer's shapes there, by its graph blobs.
  auto layer_shapes = [&](const Layer& l, std::vector<Shape>& ins, std::vector<Shape>& outs) {
    ins.clear(), outs.clear();
    for (const auto& b : l.inputs) {
      const Shape* s = shape_of(b);
      if (!s) return false;
      ins.push_back(*s);
    }
    for (const auto& b : l.outputs) {
      const Shape* s = shape_of(b);
      if (!s) return false;
      outs.push_back(*s);
    }
    return true;
  };
  struct Change {
    std::size_t step;
    std::vector<Shape> ins, outs;
  };
  std::vector<Change> steps_changed;
  std::vector<Shape> ins, outs;
  for (std::size_t t = 0; t < steps_.size(); ++t) {
    const Step& step = *steps_[t];
    bool changed = false;
    if (step.layer->type == "adapt") {
      const auto in = static_cast<std::size_t>(step.input_blobs.at(0));
      ins = {new_shapes[in]};
      outs = ins;
      changed = slot_changed[in];
    } else if (!step.parent.empty()) {
      // A child changes where its parent does.
      const LayerInfo* parent = plan_.layer_info(step.parent);
      if (!parent || !parent->layer) return no(fmt::format("step '{}' has no parent layer", step.name));
      if (!layer_shapes(*parent->layer, ins, outs)) return no(fmt::format("layer '{}' has no shapes there", step.parent));
      const auto k = layer_index(parent->layer);
      changed = ins != parent->input_shapes || outs != parent->output_shapes || (k && layer_changed[*k]);
      if (changed) return no(fmt::format("layer '{}' runs as a childnet, whose children change", step.parent));
      continue;
    } else {
      if (!layer_shapes(*step.layer, ins, outs)) return no(fmt::format("layer '{}' has no shapes there", step.name));
      const auto k = layer_index(step.layer);
      changed = ins != step.info.input_shapes || outs != step.info.output_shapes || (k && layer_changed[*k]);
      if (changed && !k && own) return no(fmt::format("layer '{}' holds a copy of its weights", step.name));
    }
    if (!changed) continue;
    if (!step.fused_into.empty() || step.fuses || step.slices)
      return no(fmt::format("step '{}' is fused with another", step.name));
    steps_changed.push_back({t, ins, outs});
  }

  // The plan there: the graph's changed layers and constants, every blob's shape.
  if (own)
    for (std::size_t i = 0; i < own->layers.size(); ++i)
      if (layer_changed[i]) {
        if (new_params[i]) own->layers[i].params = *new_params[i];
        if (new_values[i]) own->layers[i].weights["value"] = *new_values[i];
      }
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (!slot_changed[i]) continue;
    Blob& b = blobs_[i];
    QuantParams quant = b.quant();
    // A constant layer's own slot (an adapted copy of a changed constant was refused above).
    auto c = slots_[i].kind == BlobKind::constant && slots_[i].name == slots_[i].blob ? constant_layer.find(slots_[i].blob)
                                                                                      : constant_layer.end();
    if (c != constant_layer.end())
      b = graph.layers[c->second].weight("value");
    else
      b = Blob::view(nullptr, new_shapes[i], b.dtype(), b.layout(), b.device());
    b.quant() = std::move(quant);
  }
  const DeviceQueues::Binding bound = queues_ ? queues_->bind() : DeviceQueues::Binding{};
  for (std::size_t i : reconverted) {
    auto& c = plan_.constant_adapts[i];
    Step& step = *c.step;
    const Shape& shape = new_shapes[static_cast<std::size_t>(c.to)];
    step.info.input_shapes = {shape};
    step.info.output_shapes = {shape};
    if (Support ok = step.routine.routine->supports(step.info, step.routine.schema); !ok)
      return no(fmt::format("{} does not convert constant '{}' there: {}", step.routine.descriptor,
                            slots_[static_cast<std::size_t>(c.from)].name, ok.reason));
    step.prepared = step.routine.routine->prepare(step.info, step.routine.schema, step.params);
    convert_constant(step, c.from, c.to, constant_copies_[i]);
  }
  for (Change& c : steps_changed) {
    Step& step = *steps_[c.step];
    step.info.input_shapes = std::move(c.ins);
    step.info.output_shapes = std::move(c.outs);
    if (step.parent.empty() && step.layer->type != "adapt") {
      LayerInfo& recorded = plan_.layer_infos[step.name];
      recorded.input_shapes = step.info.input_shapes;
      recorded.output_shapes = step.info.output_shapes;
    }
    const Routine& r = *step.routine.routine;
    if (Support ok = r.supports(step.info, step.routine.schema); !ok)
      return no(fmt::format("{} does not take layer '{}' there: {}", step.routine.descriptor, step.name, ok.reason));
    if (!step.params.empty()) {
      const auto space = r.param_space(step.info, step.routine.schema);
      for (const auto& [name, value] : step.params) {
        auto p = std::find_if(space.begin(), space.end(), [&n = name](const RoutineParamSpec& s) { return s.name == n; });
        if (p == space.end() || std::find(p->choices.begin(), p->choices.end(), value) == p->choices.end())
          return no(fmt::format("{}'s {}={} is not a choice for layer '{}' there", step.routine.descriptor, name, value,
                                step.name));
      }
    }
    std::unique_ptr<PreparedRoutine> prepared;
    try {
      prepared = r.prepare(step.info, step.routine.schema, step.params);
    } catch (const Error& e) {
      throw e.with_layer(step.name);
    } catch (const std::exception& e) {
      throw Error(fmt::format("{} failed to prepare: {}", step.routine.descriptor, e.what()), {}, step.name, "routine");
    }
    if (step.view) {
      const Blob& in = blobs_[static_cast<std::size_t>(step.input_blobs.at(0))];
      const Blob& out = blobs_[static_cast<std::size_t>(step.output_blobs.at(0))];
      if (!prepared->output_is_input() || in.byte_size() != out.byte_size())
        return no(fmt::format("step '{}' no longer shares its input's memory", step.name));
      continue;  // still runs nothing
    }
    step.prepared = std::move(prepared);
  }
  note_checking_steps();
  plan_arenas(arena(Device::cpu).shared);
  return true;
}

void Executor::plan_arenas(const std::shared_ptr<HostArena>& host_arena) {
  // Planned blobs and workspaces share one arena per device.
  unplanned_bytes_ = 0;
  for (Arena& a : arenas_) a.requests.clear();
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].request = -1;
    if (slots_[i].kind != BlobKind::planned || slots_[i].alias >= 0) continue;
    Arena& a = arena(slots_[i].schema.device);
    slots_[i].request = static_cast<int>(a.requests.size());
    a.requests.push_back({blobs_[i].byte_size(), slots_[i].first, slots_[i].last});
    unplanned_bytes_ += blobs_[i].byte_size();
  }
  std::vector<int> workspace_request(steps_.size(), -1);
  for (std::size_t t = 0; t < steps_.size(); ++t) {
    Step& step = *steps_[t];
    step.workspace_bytes = step.prepared->workspace_bytes();
    step.workspace_device = step.prepared->workspace_device();
    if (step.workspace_bytes == 0) continue;
    Arena& a = arena(step.workspace_device);
    workspace_request[t] = static_cast<int>(a.requests.size());
    a.requests.push_back({step.workspace_bytes, static_cast<int>(t), static_cast<int>(t)});
    unplanned_bytes_ += step.workspace_bytes;
  }
  for (Arena& a : arenas_) a.plan = plan_memory(a.requests);
  const std::size_t memory_limit = plan_.options.memory_limit;
  if (memory_limit && arena_bytes() > memory_limit)
    throw Error(fmt::format("the session's arena needs {} bytes, over its memory limit of {} bytes", arena_bytes(),
                            memory_limit),
                {}, {}, "memory_limit");
  for (Arena& a : arenas_) {
    std::size_t bytes = std::max<std::size_t>(64, a.plan.arena_bytes);
    if (a.device == Device::cpu && host_arena && !uses_device()) {
      if (!host_arena->reserve(bytes)) throw Error(fmt::format("out of memory: the net's arena needs {} bytes", bytes));
      a.shared = host_arena;
    } else if (bytes <= a.memory_bytes) {
      continue;  // re-planned smaller (rebind): the memory it has holds it
    } else if (a.device == Device::cpu) {
      a.memory.reset();
      void* p = allocate_aligned(bytes);
      if (!p) throw Error(fmt::format("out of memory: the net's arena needs {} bytes", bytes));
      a.memory = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
      a.memory_bytes = bytes;
    } else {
      const DeviceMemory* dm = device_memory(a.device);
      if (!dm) throw Error(fmt::format("no {} device is available", to_string(a.device)));
      a.memory.reset();
      void* p = dm->allocate(bytes);
      if (!p) throw Error(fmt::format("out of {} memory: the net's arena needs {} bytes", to_string(a.device), bytes));
      a.memory = std::shared_ptr<void>(p, [release = dm->release](void* q) { release(q); });
      a.memory_bytes = bytes;
    }
  }
  for (std::size_t t = 0; t < steps_.size(); ++t)
    steps_[t]->workspace_offset =
        workspace_request[t] >= 0
            ? arena(steps_[t]->workspace_device).plan.offsets[static_cast<std::size_t>(workspace_request[t])]
            : 0;
  bind_outputs_to_arena();
}

void Executor::prepare_step(Step& step) {
  if (step.layer->type == "adapt") {
    step.prepared = step.routine.routine->prepare(step.info, step.routine.schema, step.params);
    return;
  }
  if (is_value_shaped(*step.layer)) step.value_shapes = step.info.output_shapes;
  try {
    step.prepared = step.routine.routine->prepare(step.info, step.routine.schema, step.params);
  } catch (const Error& e) {
    throw e.with_layer(step.name);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{} failed to prepare: {}", step.routine.descriptor, e.what()), {}, step.name, "routine");
  }
}

void Executor::prepare_fused_pair(std::size_t t) {
  Step& b = *steps_[t];
  // The step it computes, and the adapt of that step's output between them
  // it makes unneeded, if any (PlanBuilder::fuse_pairs).
  Step& a = *steps_[b.fused_previous_step];
  Step* via = nullptr;
  for (std::size_t u = b.fused_previous_step + 1; u < t; ++u)
    if (steps_[u]->fused_into == b.name) via = steps_[u].get();
  std::unique_ptr<PreparedRoutine> both;
  try {
    both = b.routine.routine->prepare_with_previous(a.info, *a.routine.routine, a.params, b.info, b.routine.schema,
                                                    b.params);
  } catch (const std::exception& e) {
    debug("'{}' and '{}' run apart: {} could not prepare them as one ({})", a.name, b.name, b.routine.descriptor, e.what());
  }
  if (!both) {
    warn("'{}' and '{}' run apart: {} planned them as one step but could not prepare them so", a.name, b.name,
         b.routine.descriptor);
    a.fused_into.clear();
    b.fuses = b.fuses_previous = false;
    b.info.layer = b.layer;  // (its own names again, where a fake_quant was between)
    b.pair_layer.reset();
    prepare_step(a);
    if (via) {
      via->fused_into.clear();
      prepare_step(*via);
    }
    prepare_step(b);
    return;
  }
  b.prepared = std::move(both);
  // a's inputs, then b's others (prepare_with_previous's order).
  const int between = via ? via->output_blobs[0] : a.output_blobs[0];
  std::vector<int> inputs = a.input_blobs;
  for (int s : b.input_blobs)
    if (s != between) inputs.push_back(s);
  b.input_blobs = std::move(inputs);
  for (int s : a.input_blobs) {
    int& last = slots_[static_cast<std::size_t>(s)].last;
    last = std::max(last, static_cast<int>(t));
  }
  for (Step* s : {&a, via}) {
    if (!s) continue;
    slots_[static_cast<std::size_t>(s->output_blobs[0])].kind = BlobKind::unwritten;
    s->prepared = std::make_unique<ComputedElsewhere>();
    s->output_blobs.clear();
  }
}

void Executor::prepare_gate(Step& m) {
  const Step::Gate& g = *m.gate;
  std::unique_ptr<PreparedRoutine> fused = m.prepared->gated_by_table(g.gated, g.table.data());
  if (!fused) {
    warn("'{}' runs apart from its input's table steps: {} planned them as one table but could not prepare it so",
         m.name, m.routine.descriptor);
    for (int c : g.chain) {
      Step& s = *steps_[static_cast<std::size_t>(c)];
      s.fused_into.clear();
      prepare_step(s);
    }
    m.fuses = false;
    m.gate.reset();
    return;
  }
  m.prepared = std::move(fused);
  m.input_blobs = {m.input_blobs[1 - g.gated]};
  for (int c : g.chain) {
    Step& s = *steps_[static_cast<std::size_t>(c)];
    for (int o : s.output_blobs) slots_[static_cast<std::size_t>(o)].kind = BlobKind::unwritten;
    s.prepared = std::make_unique<ComputedElsewhere>();
    s.output_blobs.clear();
  }
}

void Executor::share_views() {
  auto is_net_output = [&](int slot) { return std::find(net_outputs_.begin(), net_outputs_.end(), slot) != net_outputs_.end(); };
  for (auto& step_ptr : steps_) {
    Step& step = *step_ptr;
    if (step.input_blobs.size() != 1 || step.output_blobs.size() != 1 || !step.prepared->output_is_input()) continue;
    const int in = step.input_blobs[0], out = step.output_blobs[0];
    BlobSlot& dst = slots_[static_cast<std::size_t>(out)];
    const int root = memory_root(in);
    BlobSlot& src = slots_[static_cast<std::size_t>(root)];
    // Net outputs are the caller's memory, net inputs and constants not ours to plan.
    if (src.kind != BlobKind::planned || dst.kind != BlobKind::planned || src.schema.device != Device::cpu ||
        dst.schema.device != Device::cpu || is_net_output(root) || is_net_output(out) ||
        blobs_[static_cast<std::size_t>(in)].byte_size() != blobs_[static_cast<std::size_t>(out)].byte_size())
      continue;
    dst.alias = root;
    src.last = std::max(src.last, dst.last);
    step.view = true;
    step.prepared = std::make_unique<ComputedElsewhere>();
    debug("'{}' runs nothing: blob '{}' shares the memory of '{}'", step.name, dst.name, src.name);
  }
}

void Executor::share_accumulators() {
  auto is_net_output = [&](int slot) { return std::find(net_outputs_.begin(), net_outputs_.end(), slot) != net_outputs_.end(); };
  for (std::size_t t = 0; t < steps_.size(); ++t) {
    Step& step = *steps_[t];
    if (!step.prepared || step.view || step.output_blobs.size() != 1) continue;
    const int k = step.prepared->output_accumulates();
    if (k < 0 || k >= static_cast<int>(step.input_blobs.size())) continue;
    const int in = step.input_blobs[static_cast<std::size_t>(k)], out = step.output_blobs[0];
    const int root = memory_root(in);
    BlobSlot& src = slots_[static_cast<std::size_t>(root)];
    BlobSlot& dst = slots_[static_cast<std::size_t>(out)];
    // The input's memory (and every view of it) must be read by nothing after this
    // step, and be ours to overwrite: not a net input, output or constant.
    if (src.kind != BlobKind::planned || dst.kind != BlobKind::planned || src.schema.device != Device::cpu ||
        dst.schema.device != Device::cpu || src.last != static_cast<int>(t) || is_net_output(root) || is_net_output(out) ||
        dst.alias >= 0 || blobs_[static_cast<std::size_t>(in)].byte_size() != blobs_[static_cast<std::size_t>(out)].byte_size())
      continue;
    // Nor another input of the step (a convolution of x added to x reads x while writing).
    bool read_otherwise = false;
    for (std::size_t i = 0; i < step.input_blobs.size(); ++i)
      read_otherwise = read_otherwise || (static_cast<int>(i) != k && memory_root(step.input_blobs[i]) == root);
    if (read_otherwise) continue;
    dst.alias = root;
    src.last = std::max(src.last, dst.last);
    // Views of the output (a QDQ file's QuantizeLinear after a residual add)
    // share the root's memory directly: bind_outputs_to_arena resolves one
    // alias, in slot order.
    for (auto& s : slots_)
      if (s.alias == out) s.alias = root;
    debug("'{}' writes its result onto blob '{}' in place", step.name, src.name);
  }
}

void Executor::share_slices() {
  std::vector<bool> net_output(slots_.size(), false);
  for (int s : net_outputs_) net_output[static_cast<std::size_t>(s)] = true;
  auto bytes_of = [&](int slot) { return blobs_[static_cast<std::size_t>(slot)].byte_size(); };
  // A planned CPU blob's memory root and offset in it, if it and every blob
  // sharing its root may move (none is a net output, whose memory is the caller's).
  struct Place {
    int root = -1;
    std::size_t offset = 0;
  };
  auto movable = [&](int slot) -> std::optional<Place> {
    const BlobSlot& b = slots_[static_cast<std::size_t>(slot)];
    Place p{b.alias >= 0 ? b.alias : slot, b.alias >= 0 ? b.alias_offset : 0};
    const BlobSlot& r = slots_[static_cast<std::size_t>(p.root)];
    if (r.kind != BlobKind::planned || r.schema.device != Device::cpu) return std::nullopt;
    for (std::size_t i = 0; i < slots_.size(); ++i)
      if ((static_cast<int>(i) == p.root || slots_[i].alias == p.root) && net_output[i]) return std::nullopt;
    return p;
  };
  // `root` and the blobs sharing it move to `offset` in `into`'s memory.
  auto move_into = [&](int root, int into, std::size_t offset) {
    for (auto& s : slots_)
      if (s.alias == root) s.alias = into, s.alias_offset += offset;
    BlobSlot& r = slots_[static_cast<std::size_t>(root)];
    BlobSlot& w = slots_[static_cast<std::size_t>(into)];
    r.alias = into;
    r.alias_offset = offset;
    w.first = std::min(w.first, r.first);
    w.last = std::max(w.last, r.last);
  };
  for (auto& step_ptr : steps_) {
    Step& step = *step_ptr;
    if (step.view || !step.fused_into.empty() || !step.parent.empty() || step.layer->type == "adapt") continue;
    std::vector<Shape> ins, outs;
    for (int s : step.input_blobs) ins.push_back(blobs_[static_cast<std::size_t>(s)].shape());
    for (int s : step.output_blobs) outs.push_back(blobs_[static_cast<std::size_t>(s)].shape());
    const auto cut = slice_cut(*step.layer, ins, outs);
    if (!cut) continue;
    const bool concat = step.layer->type == "concat";
    const int whole = concat ? step.output_blobs[0] : step.input_blobs[0];
    const std::vector<int>& pieces = concat ? step.input_blobs : step.output_blobs;
    const Schema schema = slots_[static_cast<std::size_t>(whole)].schema;
    bool same_schema = true;
    for (int p : pieces) same_schema = same_schema && slots_[static_cast<std::size_t>(p)].schema == schema;
    const std::vector<std::size_t> offsets = contiguous_slices(cut->whole, cut->axis, cut->sizes, schema);
    if (!same_schema || offsets.size() != pieces.size()) continue;
    if (concat) {
      // Each input's root goes where its piece lies in the output: roots read
      // by several inputs (a split's outputs) at one place, roots apart.
      const BlobSlot& out = slots_[static_cast<std::size_t>(whole)];
      if (out.kind != BlobKind::planned || out.alias >= 0 || net_output[static_cast<std::size_t>(whole)] ||
          out.schema.device != Device::cpu)
        continue;
      std::map<int, std::size_t> placed;  // root -> its offset in the output
      bool ok = true;
      for (std::size_t k = 0; k < pieces.size() && ok; ++k) {
        const auto p = movable(pieces[k]);
        ok = p && p->root != whole && offsets[k] >= p->offset &&
             offsets[k] - p->offset + bytes_of(p->root) <= bytes_of(whole);
        if (!ok) break;
        const std::size_t at = offsets[k] - p->offset;
        auto [it, fresh] = placed.emplace(p->root, at);
        ok = fresh || it->second == at;
      }
      // Roots apart: no two overlap in the output.
      std::vector<std::pair<std::size_t, std::size_t>> spans;
      for (const auto& [root, at] : placed) spans.push_back({at, at + bytes_of(root)});
      std::sort(spans.begin(), spans.end());
      for (std::size_t k = 1; k < spans.size() && ok; ++k) ok = spans[k].first >= spans[k - 1].second;
      if (!ok) continue;
      for (const auto& [root, at] : placed) move_into(root, whole, at);
    } else {
      const auto p = movable(whole);
      bool ok = p.has_value();
      for (int o : pieces) {
        const BlobSlot& b = slots_[static_cast<std::size_t>(o)];
        ok = ok && b.kind == BlobKind::planned && b.alias < 0 && movable(o).has_value();
      }
      if (!ok) continue;
      for (std::size_t k = 0; k < pieces.size(); ++k) move_into(pieces[k], p->root, p->offset + offsets[k]);
    }
    step.view = true;
    step.slices = true;
    step.prepared = std::make_unique<ComputedElsewhere>();
    debug("'{}' runs nothing: its {} share the memory of blob '{}'", step.name, concat ? "inputs" : "outputs",
          slots_[static_cast<std::size_t>(whole)].name);
  }
}

bool HostArena::reserve(std::size_t bytes) {
  if (bytes <= bytes_) return true;
  memory_.reset();  // the old one first: never both at once
  bytes_ = 0;
  void* p = allocate_aligned(bytes);
  if (!p) return false;
  memory_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  bytes_ = bytes;
  return true;
}

Executor::Arena& Executor::arena(Device d) {
  for (auto& a : arenas_)
    if (a.device == d) return a;
  arenas_.push_back(Arena{});
  arenas_.back().device = d;
  return arenas_.back();
}

std::size_t Executor::arena_bytes() const {
  std::size_t n = 0;
  for (const auto& a : arenas_) n += a.plan.arena_bytes;
  return n;
}

void Executor::bind_outputs_to_arena() {
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].request >= 0)
      blobs_[i].rebind(arena(slots_[i].schema.device).base() +
                       arena(slots_[i].schema.device).plan.offsets[static_cast<std::size_t>(slots_[i].request)]);
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].alias >= 0)
      blobs_[i].rebind(static_cast<char*>(blobs_[static_cast<std::size_t>(slots_[i].alias)].data()) + slots_[i].alias_offset);
}

std::optional<Shape> Executor::value_shape(const std::string& blob) const {
  for (const auto& step : steps_)
    for (std::size_t k = 0; k < step->value_shapes.size() && k < step->layer->outputs.size(); ++k)
      if (step->layer->outputs[k] == blob) return step->value_shapes[k];
  return std::nullopt;
}

void Executor::note_checking_steps() {
  checking_steps_.clear();
  for (std::size_t t = 0; t < steps_.size(); ++t)
    if (steps_[t]->prepared && steps_[t]->prepared->checks_non_finite()) checking_steps_.push_back(t);
  checked_inputs_.assign(net_inputs_.size(), false);
  for (std::size_t k = 0; k < net_inputs_.size(); ++k) {
    bool read = false, all_check = true;
    for (const auto& step : steps_)
      for (std::size_t i = 0; i < step->input_blobs.size(); ++i) {
        if (step->input_blobs[i] != net_inputs_[k]) continue;
        read = true;
        all_check = all_check && i == 0 && step->prepared && step->prepared->checks_non_finite();
      }
    checked_inputs_[k] = read && all_check;
  }
}

bool Executor::checks_non_finite(const std::string& name) const {
  for (std::size_t k = 0; k < net_inputs_.size(); ++k)
    if (graph_.inputs[k].name == name) return checked_inputs_[k];
  return false;
}

bool Executor::saw_non_finite() const {
  for (std::size_t t : checking_steps_)
    if (steps_[t]->prepared->saw_non_finite()) return true;
  return false;
}

void Executor::run(std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs, double* step_ms) {
  const DeviceQueues::Binding bound = queues_ ? queues_->bind() : DeviceQueues::Binding{};
  for (const auto& given : inputs) {
    bool known = false;
    for (std::size_t k = 0; k < net_inputs_.size(); ++k) {
      if (graph_.inputs[k].name != given.name) continue;
      known = true;
      Blob& b = blobs_[static_cast<std::size_t>(net_inputs_[k])];
      if (given.blob.shape() != b.shape())
        throw Error(fmt::format("input '{}' has shape {}, the net expects {}", given.name, given.blob.shape().to_string(), b.shape().to_string()), {}, {}, given.name);
      const Schema want = slots_[static_cast<std::size_t>(net_inputs_[k])].schema;
      if (given.blob.dtype() != want.dtype || given.blob.layout() != want.layout || given.blob.device() != want.device)
        throw Error(fmt::format("input '{}' must be {} (given: {})", given.name, want.to_string(),
                                Schema{given.blob.device(), given.blob.dtype(), given.blob.layout()}.to_string()),
                    {}, {}, given.name);
      if (!given.blob.data()) throw Error(fmt::format("input '{}' has no memory", given.name), {}, {}, given.name);
      b.rebind(const_cast<void*>(given.blob.data()));  // routines never write their inputs
    }
    if (!known) throw Error(fmt::format("the net has no input named '{}'", given.name), {}, {}, given.name);
  }
  for (std::size_t k = 0; k < net_inputs_.size(); ++k) {
    bool found = false;
    for (const auto& given : inputs) found = found || given.name == graph_.inputs[k].name;
    if (!found) throw Error(fmt::format("input '{}' is missing (given: {})", graph_.inputs[k].name, join_names(inputs)), {}, {}, graph_.inputs[k].name);
  }
  // A shared arena another executor of the session failed to grow is empty: make room again.
  for (const Arena& a : arenas_)
    if (a.shared && a.shared->bytes() < std::max<std::size_t>(64, a.plan.arena_bytes) &&
        !a.shared->reserve(std::max<std::size_t>(64, a.plan.arena_bytes)))
      throw Error(fmt::format("out of memory: the net's arena needs {} bytes", a.plan.arena_bytes));
  bind_outputs_to_arena();
  for (auto& given : outputs) {
    bool known = false;
    for (std::size_t k = 0; k < net_outputs_.size(); ++k) {
      if (graph_.outputs[k] != given.name) continue;
      known = true;
      auto slot = static_cast<std::size_t>(net_outputs_[k]);
      const Schema want = slots_[slot].schema;
      if (given.blob.shape() != blobs_[slot].shape() || given.blob.dtype() != want.dtype ||
          given.blob.layout() != want.layout || given.blob.device() != want.device || !given.blob.data())
        throw Error(fmt::format("output '{}' must be {} {} with memory", given.name, want.to_string(),
                                blobs_[slot].shape().to_string()), {}, {}, given.name);
      // Zero-copy: the producing routine writes straight into the caller's memory.
      if (slots_[slot].kind == BlobKind::planned) blobs_[slot].rebind(given.blob.data());
    }
    if (!known) throw Error(fmt::format("the net has no output named '{}'", given.name), {}, {}, given.name);
  }

  ThreadPool* pool = &global_pool();
  auto run_steps = [&](std::size_t begin, std::size_t end, double* times) {
    for (std::size_t t = begin; t < end; ++t) {
      Step& step = *steps_[t];
      RunArgs args{step.inputs, step.outputs,
                   step.workspace_bytes ? arena(step.workspace_device).base() + step.workspace_offset : nullptr, pool,
                   step.value_shapes.empty() ? nullptr : step.value_shapes.data()};
      if (!times) {
        step.prepared->run(args);
        continue;
      }
      // A device step costs what it holds up a run: its work on the device
      // where a graph replays it, else (steps queued back to back) its launch
      // on the host or its work, whichever is longer. Its markers span the
      // launch too (the queue is empty when it starts), so the work is their
      // span less the launch; the synchronisation after it is not counted.
      // Host steps: their wall time.
      const Device dev = step.routine.schema.device;
      const DeviceHooks* hooks = dev == Device::cpu ? nullptr : device_hooks(dev);
      void* from = hooks && hooks->mark && hooks->elapsed_ms ? hooks->mark() : nullptr;
      auto t0 = std::chrono::steady_clock::now();
      step.prepared->run(args);
      const auto launched = std::chrono::steady_clock::now();
      void* to = from ? hooks->mark() : nullptr;
      for (const auto& a : arenas_)
        if (a.device != Device::cpu) device_memory(a.device)->synchronize();
      times[t] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (from) {  // (elapsed_ms releases both markers, one of them missing too)
        const double launch = std::chrono::duration<double, std::milli>(launched - t0).count();
        const double device_ms = hooks->elapsed_ms(from, to);
        if (to) times[t] = device_graphs_.replays(t) ? std::max(0.0, device_ms - launch) : std::max(launch, device_ms - launch);
      }
    }
  };
  // [device graphs] replay recorded runs of steps where possible (never when timing steps)
  auto synchronize = [&] {
    for (const auto& a : arenas_)
      if (a.device != Device::cpu) device_memory(a.device)->synchronize();
  };
  if (step_ms)
    run_steps(0, steps_.size(), step_ms);
  else
    device_graphs_.run(steps_.size(), [&](std::size_t b, std::size_t e) { run_steps(b, e, nullptr); }, synchronize);


  synchronize();  // device work finishes before the outputs are handed back

  // Outputs that are net inputs or constants are copied.
  for (auto& given : outputs)
    for (std::size_t k = 0; k < net_outputs_.size(); ++k) {
      auto slot = static_cast<std::size_t>(net_outputs_[k]);
      if (graph_.outputs[k] == given.name && slots_[slot].kind != BlobKind::planned)
        std::memcpy(given.blob.data(), blobs_[slot].data(), blobs_[slot].byte_size());
    }
}

}  // namespace softneuro::core