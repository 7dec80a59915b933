#include "core/registry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <tuple>

namespace softneuro {

void register_routine(std::unique_ptr<Routine> routine) {
  if (auto* captured = core::RoutineRegistry::captured_static_registrations()) {
    captured->push_back(std::move(routine));  // a plugin's static initialiser: registered after its ABI check
    return;
  }
  core::RoutineRegistry::instance().add(std::move(routine), "builtin");
}

void set_default_order(std::string_view layer_type, std::vector<std::vector<std::string>> tiers) {
  core::RoutineRegistry::instance().set_default_order(layer_type, std::move(tiers));
}

void register_descriptor_alias(std::string_view old_descriptor, std::string_view new_descriptor, RoutineParams params) {
  core::RoutineRegistry::instance().add_alias(old_descriptor, new_descriptor, std::move(params));
}

std::vector<std::string> registered_routines(std::string_view layer_type) {
  return core::RoutineRegistry::instance().descriptors(layer_type);
}

namespace {
// A function-local static: backends register from their own static
// initialisers, whose order relative to this file's is unspecified.
struct DeviceMemoryTable {
  std::mutex mutex;
  std::map<Device, DeviceMemory> memory;
};
DeviceMemoryTable& device_table() {
  static DeviceMemoryTable* table = new DeviceMemoryTable;
  return *table;
}
}  // namespace

void register_device_memory(Device device, const DeviceMemory& memory) {
  if (device == Device::cpu) throw Error("the CPU's memory is not registered");
  if (!memory.allocate || !memory.release || !memory.synchronize)
    throw Error(fmt::format("incomplete memory functions for device {}", to_string(device)));
  auto& t = device_table();
  std::lock_guard lock(t.mutex);
  t.memory[device] = memory;
}

const DeviceMemory* device_memory(Device device) {
  auto& t = device_table();
  std::lock_guard lock(t.mutex);
  auto it = t.memory.find(device);
  return it == t.memory.end() ? nullptr : &it->second;
}

namespace core {

RoutineRegistry& RoutineRegistry::instance() {
  // Constructed on first use, so static registrations in any order are safe.
  static RoutineRegistry* registry = new RoutineRegistry;
  return *registry;
}

namespace {
thread_local std::vector<std::unique_ptr<Routine>>* t_captured = nullptr;
std::atomic<std::uint64_t> g_generations{0};
}  // namespace

RoutineRegistry::RoutineRegistry() : generation_(++g_generations) {}

RoutineRegistry::RoutineRegistry(const RoutineRegistry& other) : generation_(++g_generations) {
  std::lock_guard lock(other.mutex_);
  entries_ = other.entries_;
  default_order_ = other.default_order_;
  aliases_ = other.aliases_;
  by_type_ = other.by_type_;
}

void RoutineRegistry::changed() {
  generation_ = ++g_generations;
  ranks_.clear();
  snapshot_.reset();
}

std::shared_ptr<const RoutineRegistry> RoutineRegistry::snapshot() const {
  std::lock_guard lock(mutex_);
  if (!snapshot_) snapshot_ = std::make_shared<const RoutineRegistry>(*this);
  return snapshot_;
}

std::uint64_t RoutineRegistry::generation() const {
  std::lock_guard lock(mutex_);
  return generation_;
}

void RoutineRegistry::capture_static_registrations(std::vector<std::unique_ptr<Routine>>* into) { t_captured = into; }
std::vector<std::unique_ptr<Routine>>* RoutineRegistry::captured_static_registrations() { return t_captured; }

void RoutineRegistry::add(std::unique_ptr<Routine> routine, const std::string& origin) {
  std::vector<std::unique_ptr<Routine>> one;
  one.push_back(std::move(routine));
  add_all(std::move(one), origin);
}

void RoutineRegistry::add_all(std::vector<std::unique_ptr<Routine>> routines, const std::string& origin) {
  std::vector<Entry> fresh;
  for (auto& routine : routines) {
    if (!routine) throw Error("null routine", origin);
    Entry e;
    for (const Schema& s : routine->schemas()) e.schemas.emplace_back(s, make_descriptor(s, routine->algorithm()));
    if (e.schemas.empty())
      throw Error(fmt::format("routine '{}' for {} lists no schema", routine->algorithm(), routine->layer_type()), origin);
    e.routine = std::move(routine);
    e.type = std::string(e.routine->layer_type());
    e.origin = origin;
    fresh.push_back(std::move(e));
  }
  std::lock_guard lock(mutex_);
  // Every descriptor checked against those registered and those before it here, before any is added.
  for (std::size_t i = 0; i < fresh.size(); ++i) {
    const Entry& e = fresh[i];
    auto clash = [&](const Entry& old) {
      if (old.type != e.type) return;
      for (const auto& [s, d] : old.schemas)
        for (const auto& [s2, d2] : e.schemas)
          if (d == d2)
            throw Error(fmt::format("routine {} for layer type {} is already registered (by {})", d,
                                    e.routine->layer_type(), old.origin),
                        origin);
    };
    for (std::size_t k : of_type(e.type)) clash(entries_[k]);
    for (std::size_t j = 0; j < i; ++j) clash(fresh[j]);
  }
  for (auto& e : fresh) {
    by_type_[e.type].push_back(entries_.size());
    entries_.push_back(std::move(e));
  }
  changed();
}

const std::vector<std::pair<int, int>>& RoutineRegistry::ranks_of_type(std::string_view layer_type) const {
  auto it = ranks_.find(layer_type);
  if (it != ranks_.end()) return it->second;
  std::vector<std::pair<int, int>> ranks;
  for (std::size_t k : of_type(layer_type))
    for (const auto& sd : entries_[k].schemas) ranks.push_back(default_rank(layer_type, sd.second));
  return ranks_.emplace(std::string(layer_type), std::move(ranks)).first->second;
}

const std::vector<std::size_t>& RoutineRegistry::of_type(std::string_view layer_type) const {
  static const std::vector<std::size_t> none;
  auto it = by_type_.find(layer_type);
  return it == by_type_.end() ? none : it->second;
}

std::vector<Candidate> RoutineRegistry::candidates(const LayerInfo& layer, const Schema& schema) const {
  std::vector<Candidate> out;
  std::lock_guard lock(mutex_);
  for (std::size_t k : of_type(layer.layer->type)) {
    const Entry& e = entries_[k];
    for (const auto& [s, d] : e.schemas) {
      if (!(s == schema)) continue;
      Candidate c{e.routine.get(), s, d, {}};
      try {
        c.support = e.routine->supports(layer, s);
      } catch (const std::exception& ex) {
        c.support = Support::no(fmt::format("supports() failed: {}", ex.what()));
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<Candidate> RoutineRegistry::candidates(const LayerInfo& layer) const {
  std::vector<Schema> schemas;
  {
    std::lock_guard lock(mutex_);
    for (std::size_t k : of_type(layer.layer->type))
      for (const auto& [s, d] : entries_[k].schemas)
        if (std::find(schemas.begin(), schemas.end(), s) == schemas.end()) schemas.push_back(s);
  }
  std::vector<Candidate> out;
  for (const auto& s : schemas) {
    auto c = candidates(layer, s);
    std::move(c.begin(), c.end(), std::back_inserter(out));
  }
  return out;
}

const Routine* RoutineRegistry::find(std::string_view layer_type, std::string_view descriptor,
                                     Schema* schema) const {
  std::lock_guard lock(mutex_);
  for (std::size_t k : of_type(layer_type)) {
    const Entry& e = entries_[k];
    for (const auto& [s, d] : e.schemas)
      if (d == descriptor) {
        if (schema) *schema = s;
        return e.routine.get();
      }
  }
  return nullptr;
}

DType RoutineRegistry::precision(std::string_view descriptor) const {
  {
    std::lock_guard lock(mutex_);
    for (const Entry& e : entries_)
      for (const auto& [s, d] : e.schemas)
        if (d == descriptor && e.routine->precision(s) != s.dtype) return e.routine->precision(s);
  }
  return Schema::parse(descriptor.substr(0, descriptor.find('/'))).dtype;
}

std::pair<int, int> RoutineRegistry::default_rank(std::string_view layer_type, std::string_view descriptor) const {
  std::lock_guard lock(mutex_);
  auto order = default_order_.find(layer_type);
  if (order != default_order_.end()) {
    const std::string_view algorithm = descriptor.substr(descriptor.find('/') + 1);
    for (std::size_t t = 0; t < order->second.size(); ++t)
      for (std::size_t i = 0; i < order->second[t].size(); ++i) {
        const std::string& d = order->second[t][i];
        if (d == descriptor || (d.starts_with("*/") && std::string_view(d).substr(2) == algorithm))
          return {static_cast<int>(t), static_cast<int>(i)};
      }
  }
  const int unlisted = order == default_order_.end() ? 0 : static_cast<int>(order->second.size());
  int registered = 0;
  for (std::size_t k : of_type(layer_type)) {
    for (const auto& [s, d] : entries_[k].schemas) {
      if (d == descriptor) return {unlisted, registered};
      ++registered;
    }
  }
  return {unlisted, registered};
}

std::vector<std::vector<std::string>> RoutineRegistry::default_order(std::string_view layer_type) const {
  std::lock_guard lock(mutex_);
  auto order = default_order_.find(layer_type);
  return order == default_order_.end() ? std::vector<std::vector<std::string>>{} : order->second;
}

void RoutineRegistry::set_default_order(std::string_view layer_type, std::vector<std::vector<std::string>> tiers) {
  std::lock_guard lock(mutex_);
  default_order_[std::string(layer_type)] = std::move(tiers);
  changed();
}

std::vector<std::string> RoutineRegistry::unknown_in_default_order() const {
  std::lock_guard lock(mutex_);
  const bool cuda_built = std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) {
    return std::any_of(e.schemas.begin(), e.schemas.end(), [](const auto& sd) { return sd.first.device == Device::cuda; });
  });
  std::vector<std::string> unknown;
  for (const auto& [type, tiers] : default_order_)
    for (const auto& tier : tiers)
      for (const std::string& d : tier) {
        // (Device transfers, "cpu/transfer" included, are the CUDA backend's.)
        if (!cuda_built && (d.starts_with("cuda") || d.ends_with("/transfer"))) continue;
        bool found = false;
        for (std::size_t k : of_type(type))
          for (const auto& sd : entries_[k].schemas)
            found = found || sd.second == d ||
                    (d.starts_with("*/") && std::string_view(sd.second).substr(sd.second.find('/') + 1) == d.substr(2));
        if (!found) unknown.push_back(type + ": " + d);
      }
  return unknown;
}

void RoutineRegistry::check_default_order() const {
  // (A throw leaves the flag unset: every later use fails the same way.)
  std::call_once(order_checked_, [this] {
    const std::vector<std::string> unknown = unknown_in_default_order();
    if (!unknown.empty())
      throw Error(fmt::format("the default routine order (src/routines/default_order.cpp) names routines this build "
                              "does not register: {}", fmt::join(unknown, ", ")));
  });
}

Candidate RoutineRegistry::default_choice(const LayerInfo& layer, const Schema& schema) const {
  check_default_order();
  auto all = candidates(layer, schema);
  const Candidate* best = nullptr;
  std::pair<int, int> best_rank;
  for (const auto& c : all) {
    if (!c.support.ok || c.precision() != c.schema.dtype) continue;  // reduced precision only where tuned so
    const auto rank = default_rank(layer.layer->type, c.descriptor);
    if (!best || rank < best_rank) {
      best = &c;
      best_rank = rank;
    }
  }
  if (best) return *best;
  std::string why;
  for (const auto& c : all) why += fmt::format("\n  {}: {}", c.descriptor, c.support.reason);
  if (all.empty()) why = fmt::format(" (no routine is registered for {} in {})", layer.layer->type, schema.to_string());
  throw Error(fmt::format("no routine supports this {} layer in schema {}:{}", layer.layer->type, schema.to_string(), why),
              {}, layer.layer->name, "type");
}

Candidate RoutineRegistry::default_choice_any_schema(const LayerInfo& layer, const Schema& preferred,
                                                     const std::function<bool(const Schema&)>& allowed,
                                                     DType dtype) const {
  check_default_order();
  // The untuned default computes in float32 on the CPU; other dtypes and
  // devices need calibration or transfers that only the tuner can weigh.
  // Ranked first, asked second: supports() only until one says yes (a
  // oneDNN routine builds a primitive descriptor to answer).
  struct Ranked {
    const Entry* entry;
    const Schema* schema;
    const std::string* descriptor;
    std::tuple<int, bool, int> rank;  // an earlier tier wins; in one tier, staying in the input's schema, then list order
  };
  // A layer of a few hundred values: preparing a oneDNN primitive (25-160 us)
  // costs more than running it on cpu/ref (a decode loop's index arithmetic,
  // prepared again at every new cache length: 0.35 of a 1.5 ms re-bind), so a
  // costly first choice gives way to a cheap routine in its schema.
  constexpr int64_t kTinyValues = 1024;
  const std::string& type = layer.layer->type;
  bool tiny = layer.layer->weights.empty() &&  // (index arithmetic: not a small convolution or activation)
              (type == "add" || type == "sub" || type == "mul" || type == "div" || type == "reduce");
  for (const auto* shapes : {&layer.input_shapes, &layer.output_shapes})
    for (const Shape& sh : *shapes) tiny = tiny && sh.numel() <= kTinyValues;
  std::vector<Ranked> order;
  std::lock_guard lock(mutex_);
  const std::vector<std::pair<int, int>>& ranks = ranks_of_type(layer.layer->type);
  std::size_t r = 0;
  for (std::size_t k : of_type(layer.layer->type))
    for (const auto& [s, d] : entries_[k].schemas) {
      const auto [tier, position] = ranks[r++];
      if (s.dtype != dtype || s.device != Device::cpu || (allowed && !allowed(s)) ||
          entries_[k].routine->precision(s) != s.dtype)
        continue;
      order.push_back({&entries_[k], &s, &d, {tier, !(s == preferred), position}});
    }
  std::stable_sort(order.begin(), order.end(), [](const Ranked& a, const Ranked& b) { return a.rank < b.rank; });
  auto ask = [&](const Ranked& r) {
    Candidate c{r.entry->routine.get(), *r.schema, *r.descriptor, {}};
    try {
      c.support = r.entry->routine->supports(layer, *r.schema);
    } catch (const std::exception& ex) {
      c.support = Support::no(fmt::format("supports() failed: {}", ex.what()));
    }
    return c;
  };
  for (std::size_t i = 0; i < order.size(); ++i) {
    Candidate c = ask(order[i]);
    if (!c.support.ok) continue;
    // (A tiny layer: the first routine after it in the same schema that is cheap to prepare.)
    if (tiny && c.routine->costly_prepare())
      for (std::size_t j = i + 1; j < order.size(); ++j)
        if (*order[j].schema == c.schema && !order[j].entry->routine->costly_prepare())
          if (Candidate cheap = ask(order[j]); cheap.support.ok) return cheap;
    return c;
  }
  if (dtype != DType::float32) return Candidate{};
  return default_choice(layer, Schema{});  // throws, listing every routine's reason
}

void RoutineRegistry::add_alias(std::string_view old_descriptor, std::string_view new_descriptor, RoutineParams params) {
  if (old_descriptor.empty() || new_descriptor.empty() || old_descriptor == new_descriptor)
    throw Error(fmt::format("descriptor alias '{}' -> '{}': both must be given and differ", old_descriptor, new_descriptor));
  std::lock_guard lock(mutex_);
  if (aliases_.count(old_descriptor))
    throw Error(fmt::format("descriptor alias '{}' is already registered", old_descriptor));
  aliases_.emplace(std::string(old_descriptor), Alias{std::string(new_descriptor), std::move(params)});
  changed();
}

const RoutineRegistry::Alias* RoutineRegistry::alias(std::string_view descriptor) const {
  std::lock_guard lock(mutex_);
  auto it = aliases_.find(descriptor);
  if (it == aliases_.end()) return nullptr;
  for (const auto& e : entries_)
    for (const auto& [s, d] : e.schemas)
      if (d == descriptor) return nullptr;  // registered again (e.g. by a plugin): the name holds
  return &it->second;
}

bool RoutineRegistry::builtin(const Routine* routine) const {
  std::lock_guard lock(mutex_);
  if (!routine) return false;
  for (std::size_t k : of_type(routine->layer_type()))
    if (entries_[k].routine.get() == routine) return entries_[k].origin == "builtin";
  return false;
}

std::size_t RoutineRegistry::routine_count() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::vector<std::string> RoutineRegistry::descriptors(std::string_view layer_type) const {
  std::vector<std::string> out;
  std::lock_guard lock(mutex_);
  for (const auto& e : entries_)
    if (layer_type.empty() || e.type == layer_type)
      for (const auto& [s, d] : e.schemas)
        if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace core
}  // namespace softneuro
