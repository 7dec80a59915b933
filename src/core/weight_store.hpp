// The derived weights every session of a model shares (SharedWeights), and the
// view of them one prepared layer gets.
#pragma once

#include <softneuro/routine.hpp>

#include <condition_variable>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace softneuro::core {

/// How a derived weight is written to a .dnn file and read back from one
/// (prepared_weights.hpp): bytes (a 1-D uint8 Blob), and the object from a
/// view of them, or nullptr where they do not fit what the routine reads.
struct PreparedCodec {
  std::function<Blob(const void*)> save;
  std::function<std::shared_ptr<const void>(const Blob&)> load;
};

/// One per model. Objects live while a prepared routine holds them: a model
/// whose sessions are all gone holds no derived weights.
class WeightStore {
 public:
  /// The object under `key` (a whole key: layer, routine, shapes, the routine's
  /// own name), built by `make` where none is alive. One thread builds; others
  /// asking for the same key meanwhile wait for it. With `codec`, the object
  /// is read from the model file's prepared weights where they hold `key`
  /// (nothing built), and a recording store keeps how to save it.
  std::shared_ptr<const void> get_or_make(const std::string& key,
                                          const std::function<std::shared_ptr<const void>()>& make,
                                          const PreparedCodec* codec = nullptr);
  /// Derived weights as a tuned file stores them (bytes by whole key), read
  /// instead of built from now on.
  void use_prepared(std::shared_ptr<const std::map<std::string, Blob>> prepared);
  /// Keep the codec of every object built from now on, for saved().
  void record() { std::lock_guard lock(mutex_); recording_ = true; }
  /// The bytes of every live object built while recording, by whole key.
  std::map<std::string, Blob> saved() const;
  /// How many objects were read from prepared weights instead of built.
  uint64_t loaded() const;
  /// How many objects were built (a second session of a model builds none).
  uint64_t built() const;
  /// Entries held, live or expired (expired ones are swept as the map grows).
  std::size_t entries() const;

 private:
  struct Entry {
    std::weak_ptr<const void> object;
    bool building = false;
    std::function<Blob(const void*)> save;  ///< while recording, where the routine gave a codec
  };
  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::map<std::string, Entry> entries_;
  std::size_t swept_size_ = 64;  ///< entries_.size() after the last sweep (at least 64)
  uint64_t built_ = 0, loaded_ = 0;
  std::shared_ptr<const std::map<std::string, Blob>> prepared_;
  bool recording_ = false;
};

/// A store scoped to one step (layer, routine, parameters, shapes, quantisation).
class ScopedWeights final : public SharedWeights {
 public:
  ScopedWeights(std::shared_ptr<WeightStore> store, std::string scope)
      : store_(std::move(store)), scope_(std::move(scope)) {}

 protected:
  std::shared_ptr<const void> get_or_make_saved(std::string_view key,
                                                const std::function<std::shared_ptr<const void>()>& make,
                                                const std::function<Blob(const void*)>& save,
                                                const std::function<std::shared_ptr<const void>(const Blob&)>& load) override {
    const PreparedCodec codec{save, load};
    return store_->get_or_make(scope_ + "|" + std::string(key), make, &codec);
  }
  std::shared_ptr<const void> get_or_make(std::string_view key,
                                          const std::function<std::shared_ptr<const void>()>& make) override {
    return store_->get_or_make(scope_ + "|" + std::string(key), make);
  }

 private:
  std::shared_ptr<WeightStore> store_;
  std::string scope_;
};

}  // namespace softneuro::core
