// The routine registry: the one place that knows which routines exist.
// Routines add themselves (SOFTNEURO_REGISTER_ROUTINE) or come from plugins;
// nothing here names a routine.
#pragma once

#include <softneuro/routine.hpp>

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
};

class RoutineRegistry {
 public:
  static RoutineRegistry& instance();

  /// Adds a routine; `origin` is "builtin" or the plugin's path (for messages).
  /// Refuses a (layer type, descriptor) pair that is already registered.
  void add(std::unique_ptr<Routine> routine, const std::string& origin);

  /// Every routine of the layer's type in `schema`, each with supports()'s answer
  /// (unsupported ones included, so verbose modes can say why).
  std::vector<Candidate> candidates(const LayerInfo& layer, const Schema& schema) const;
  /// The same over every schema any routine of the layer's type lists.
  std::vector<Candidate> candidates(const LayerInfo& layer) const;

  /// The routine registered for (layer type, descriptor), or nullptr; sets *schema.
  const Routine* find(std::string_view layer_type, std::string_view descriptor, Schema* schema) const;

  /// The untuned default: the supported routine of highest default_priority_for(layer)
  /// in `schema` (ties: first registered). Throws Error listing every routine's
  /// reason when none supports the layer.
  Candidate default_choice(const LayerInfo& layer, const Schema& schema) const;

  /// The untuned default over every float32 CPU schema: the supported routine of highest
  /// default_priority_for(layer), plus a small bonus (kStayBonus) for computing in
  /// `preferred` (the schema the layer's input already has), so chains of
  /// layers stay in one layout and only the edges pay adapts.
  static constexpr int kStayBonus = 5;
  Candidate default_choice_any_schema(const LayerInfo& layer, const Schema& preferred) const;

  /// Every descriptor registered for a layer type ("" = all types), sorted.
  std::vector<std::string> descriptors(std::string_view layer_type = {}) const;

 private:
  struct Entry {
    std::unique_ptr<Routine> routine;
    std::string origin;
    std::vector<std::pair<Schema, std::string>> schemas;  // with their descriptors
  };
  mutable std::recursive_mutex mutex_;  // recursive: a composing adapt (src/adapt/compose.cpp) asks the registry from supports()
  std::vector<Entry> entries_;
};

}  // namespace softneuro::core
