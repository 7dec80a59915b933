// The routine registry: the one place that knows which routines exist.
// Routines add themselves (SOFTNEURO_REGISTER_ROUTINE) or come from plugins;
// nothing here names a routine.
#pragma once

#include <softneuro/routine.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace softneuro::core {

/// A routine considered for a layer in one schema, with its answer.
struct Candidate {
  const Routine* routine = nullptr;
  Schema schema;
  std::string descriptor;
  Support support;
  /// The dtype it computes at (Routine::precision): below the schema's for a
  /// routine that quantises inside.
  DType precision() const { return routine ? routine->precision(schema) : schema.dtype; }
};

/// The routines a plan chooses from. The process's (instance()) is what
/// built-in routines and plugins register into; a plan, a session and a tuning
/// read a frozen snapshot of it (snapshot()), passed to them explicitly
/// (PlanOptions::registry), so a plugin loaded or a routine registered later
/// never changes a plan already running, and a test extends its own copy
/// instead of the process's.
class RoutineRegistry {
 public:
  /// The process's registry, which registrations go to.
  static RoutineRegistry& instance();

  RoutineRegistry();
  /// A copy sharing the routines: what is added to it afterwards is its own.
  RoutineRegistry(const RoutineRegistry& other);
  RoutineRegistry& operator=(const RoutineRegistry&) = delete;

  /// This registry as it is now, frozen (the same object until it changes).
  std::shared_ptr<const RoutineRegistry> snapshot() const;
  /// A number no other registry state has (a copy or a change gets a new one),
  /// so caches of what the registered routines can do key on it.
  std::uint64_t generation() const;

  /// Adds a routine; `origin` is "builtin" or the plugin's path (for messages).
  /// Refuses a (layer type, descriptor) pair that is already registered.
  void add(std::unique_ptr<Routine> routine, const std::string& origin);
  /// Adds all of them or, where any is refused (a descriptor registered
  /// already, or twice among them), none: a plugin registers whole or not at all.
  void add_all(std::vector<std::unique_ptr<Routine>> routines, const std::string& origin);

  /// While a plugin library is being opened, the routines its static
  /// initialisers register (SOFTNEURO_REGISTER_ROUTINE) go into `*into` instead
  /// of the registry, on this thread (nullptr: register them): they are
  /// registered only after the plugin's ABI version has been checked.
  static void capture_static_registrations(std::vector<std::unique_ptr<Routine>>* into);
  static std::vector<std::unique_ptr<Routine>>* captured_static_registrations();

  /// Every routine of the layer's type in `schema`, each with supports()'s answer
  /// (unsupported ones included, so verbose modes can say why).
  std::vector<Candidate> candidates(const LayerInfo& layer, const Schema& schema) const;
  /// The same over every schema any routine of the layer's type lists.
  std::vector<Candidate> candidates(const LayerInfo& layer) const;

  /// The routine registered for (layer type, descriptor), or nullptr; sets *schema.
  const Routine* find(std::string_view layer_type, std::string_view descriptor, Schema* schema) const;
  /// The dtype a descriptor computes at, for paths that name descriptors only
  /// (a .dnn's): below its schema's where a routine registered under it
  /// quantises inside (Routine::precision); its schema's dtype otherwise, and
  /// for a descriptor no routine here has.
  DType precision(std::string_view descriptor) const;

  /// The untuned default in `schema`: the supported routine first in the layer
  /// type's default order (set_default_order). Throws Error listing every
  /// routine's reason when none supports the layer.
  Candidate default_choice(const LayerInfo& layer, const Schema& schema) const;

  /// The untuned default over every CPU schema of `dtype` (float32; qint8 for
  /// a model's own quantised layers) that `allowed` accepts (all when empty):
  /// the first tier of the default order with a supported routine, and in it
  /// the routine computing in `preferred` (the schema the layer's input
  /// already has) where there is one, else the first. So chains of layers stay
  /// in one layout and only the edges pay adapts. Float32: throws where none
  /// supports the layer; another dtype: a candidate whose routine is null.
  Candidate default_choice_any_schema(const LayerInfo& layer, const Schema& preferred,
                                      const std::function<bool(const Schema&)>& allowed = {},
                                      DType dtype = DType::float32) const;

  /// A descriptor's place in the default order of `layer_type`: (tier, position);
  /// unlisted descriptors come after every tier, in registration order.
  std::pair<int, int> default_rank(std::string_view layer_type, std::string_view descriptor) const;
  /// The default order of a layer type as set (empty when none).
  std::vector<std::vector<std::string>> default_order(std::string_view layer_type) const;
  void set_default_order(std::string_view layer_type, std::vector<std::vector<std::string>> tiers);
  /// Entries of the default orders that name no registered routine of their
  /// layer type ("type: descriptor"), which would never be chosen: a typo, or a
  /// routine renamed. CUDA entries and device transfers count only where some
  /// CUDA routine is registered (a build without the CUDA backend has none).
  std::vector<std::string> unknown_in_default_order() const;
  /// Throws Error listing them where there are any: once per process, at the
  /// first untuned default chosen (every default_choice asks), so a build
  /// whose order names a routine it lacks fails at start-up, not by ranking
  /// that routine last without a word.
  void check_default_order() const;

  /// Renamed descriptors (register_descriptor_alias).
  struct Alias {
    std::string descriptor;
    RoutineParams params;
  };
  void add_alias(std::string_view old_descriptor, std::string_view new_descriptor, RoutineParams params);
  /// The alias of a descriptor that is no longer registered, or nullptr.
  const Alias* alias(std::string_view descriptor) const;

  /// Whether `routine` is built into this library (not a plugin's).
  bool builtin(const Routine* routine) const;

  /// How many routines are registered.
  std::size_t routine_count() const;
  /// Every descriptor registered for a layer type ("" = all types), sorted.
  std::vector<std::string> descriptors(std::string_view layer_type = {}) const;

 private:
  struct Entry {
    std::shared_ptr<Routine> routine;  // shared with copies and snapshots
    std::string type;  // routine->layer_type(), kept: lookups compare it often
    std::string origin;
    std::vector<std::pair<Schema, std::string>> schemas;  // with their descriptors
  };
  std::map<std::string, std::vector<std::vector<std::string>>, std::less<>> default_order_;
  std::map<std::string, Alias, std::less<>> aliases_;
  mutable std::recursive_mutex mutex_;  // recursive: a composing adapt (src/adapt/chain.cpp) asks the registry from supports()
  std::vector<Entry> entries_;
  /// Indices into entries_ by layer type (session creation looks routines up
  /// per layer and per adapt: a scan over every routine was a tenth of it).
  std::map<std::string, std::vector<std::size_t>, std::less<>> by_type_;
  /// The entries of a layer type (empty when none); call with mutex_ held.
  const std::vector<std::size_t>& of_type(std::string_view layer_type) const;
  /// default_rank of every (routine, schema) of a layer type, in of_type's
  /// order: computed once (every untuned layer ranks them all), dropped when
  /// a routine or an order is added. Call with mutex_ held.
  const std::vector<std::pair<int, int>>& ranks_of_type(std::string_view layer_type) const;
  mutable std::map<std::string, std::vector<std::pair<int, int>>, std::less<>> ranks_;
  mutable std::once_flag order_checked_;
  std::uint64_t generation_;
  mutable std::shared_ptr<const RoutineRegistry> snapshot_;  // dropped at each change
  /// After a change, with mutex_ held.
  void changed();
};

}  // namespace softneuro::core
