// The derived weights every session of a model shares (SharedWeights), and the
// view of them one prepared layer gets.
#pragma once

#include <softneuro/routine.hpp>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace softneuro::core {

/// One per model. Objects live while a prepared routine holds them: a model
/// whose sessions are all gone holds no derived weights.
class WeightStore {
 public:
  /// The object under `key` (a whole key: layer, routine, shapes, the routine's
  /// own name), built by `make` where none is alive. One thread builds; others
  /// asking for the same key meanwhile wait for it.
  std::shared_ptr<const void> get_or_make(const std::string& key,
                                          const std::function<std::shared_ptr<const void>()>& make);
  /// How many objects were built (a second session of a model builds none).
  uint64_t built() const;
  /// Entries held, live or expired (expired ones are swept as the map grows).
  std::size_t entries() const;

 private:
  struct Entry {
    std::weak_ptr<const void> object;
    bool building = false;
  };
  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::map<std::string, Entry> entries_;
  std::size_t swept_size_ = 64;  ///< entries_.size() after the last sweep (at least 64)
  uint64_t built_ = 0;
};

/// A store scoped to one step (layer, routine, parameters, shapes, quantisation).
class ScopedWeights final : public SharedWeights {
 public:
  ScopedWeights(std::shared_ptr<WeightStore> store, std::string scope)
      : store_(std::move(store)), scope_(std::move(scope)) {}

 protected:
  std::shared_ptr<const void> get_or_make(std::string_view key,
                                          const std::function<std::shared_ptr<const void>()>& make) override {
    return store_->get_or_make(scope_ + "|" + std::string(key), make);
  }

 private:
  std::shared_ptr<WeightStore> store_;
  std::string scope_;
};

}  // namespace softneuro::core
