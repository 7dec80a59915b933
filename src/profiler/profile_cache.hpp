// The profile cache: measured times on disk, keyed by meaning (device
// fingerprint, thread count, library version, layer signature, descriptor,
// routine parameters), one versioned, checksummed record per line.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace softneuro::profiler {

class ProfileCache {
 public:
  /// Opens the cache in `dir` ("" or "-": no cache, nothing read or written).
  /// A damaged file or record is ignored with a warning, never trusted.
  explicit ProfileCache(std::string dir);
  /// $SOFTNEURO_CACHE_DIR, else $XDG_CACHE_HOME/softneuro, else ~/.cache/softneuro.
  static std::string default_dir();

  std::optional<double> find(const std::string& key) const;
  /// True when `key` was measured in this session (not read from disk).
  bool is_fresh(const std::string& key) const { return fresh_.count(key) != 0; }
  /// Remembers a measurement (in memory even without a cache folder).
  void put(const std::string& key, double ms);
  /// Merges new records into the file (atomically); errors are warnings.
  void save();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, double> records_, fresh_;
};

}  // namespace softneuro::profiler
