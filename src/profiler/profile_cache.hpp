// The profile cache: measured times on disk, keyed by meaning (device
// fingerprint, thread count, library version, layer signature, descriptor,
// routine parameters, a qint8 routine's quantisation), with the load they
// were measured under, one versioned, checksummed record per line.
#pragma once

#include "core/graph.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace softneuro::profiler {

class ProfileCache {
 public:
  /// Opens the cache in `dir` ("" or "-": no cache, nothing read or written).
  /// A damaged file or record is ignored with a warning, never trusted.
  explicit ProfileCache(std::string dir);
  /// $SOFTNEURO_CACHE_DIR, else $XDG_CACHE_HOME/softneuro, else ~/.cache/softneuro.
  static std::string default_dir();

  /// CPUs other processes kept busy while an entry was measured from which it
  /// is not reused (measured again): times taken under load do not hold on a
  /// quiet machine.
  static constexpr double kUntrustedLoad = 0.5;

  /// A trusted time for `key`: measured in this session, or on disk and
  /// measured with the machine otherwise quiet.
  std::optional<double> find(const std::string& key) const;
  /// Whether the file holds `key` but find() does not trust it.
  bool untrusted(const std::string& key) const;
  /// True when `key` was measured in this session (not read from disk).
  bool is_fresh(const std::string& key) const { return fresh_.count(key) != 0; }
  /// Remembers a measurement (in memory even without a cache folder), and
  /// the load it was taken under (others_cpus; -1: not known yet or unknown).
  void put(const std::string& key, double ms, double load = -1);
  /// Sets the load of a measurement put() in this session.
  void set_load(const std::string& key, double load);
  /// The paths earlier tunings of the model `model_key` chose (its structure,
  /// input shapes, device, threads and version), newest first, at most
  /// kPathsPerModel: the final check measures them beside the tuned path, so
  /// that a tuning misled by cached times keeps the path a colder one found.
  std::vector<core::RoutinePath> earlier_paths(const std::string& model_key) const;
  /// Remembers the path a tuning of `model_key` kept (saved by save()).
  void put_path(const std::string& model_key, const core::RoutinePath& path);
  static constexpr std::size_t kPathsPerModel = 4;

  /// The build whose records save() always keeps: keys holding `|tag|`
  /// (library_build()). Other builds' records (another version or source
  /// digest, whose times are never read by this one) stay only while the file
  /// is within `max_bytes`: a library rebuilt at every change would grow it
  /// without end.
  void keep_build(std::string tag, std::size_t max_bytes = kMaxBytesWithOtherBuilds) {
    build_ = std::move(tag);
    max_bytes_ = max_bytes;
  }
  static constexpr std::size_t kMaxBytesWithOtherBuilds = std::size_t{8} << 20;

  /// Merges new records into the files (atomically); errors are warnings.
  void save();
  const std::string& path() const { return path_; }

  struct Entry {
    double ms = 0;
    double load = -1;  ///< others_cpus while it was measured (-1: unknown)
  };

 private:
  struct PathRecord {
    std::string model_key;
    long long time = 0;   ///< seconds since the epoch when it was kept
    std::string encoded;  ///< encode_path()
  };
  void save_paths();
  std::string path_, paths_path_;
  std::string build_;
  std::size_t max_bytes_ = kMaxBytesWithOtherBuilds;
  std::map<std::string, Entry> records_, fresh_;
  std::vector<PathRecord> path_records_, fresh_paths_;
};

/// This library's build as the tuner's cache keys name it: "v<version>+<source digest>".
std::string library_build();

/// A routine path as one line of text (its routines, their parameters and
/// children, its adapts; no tabs or newlines), and back: nullopt for text
/// that is not one (a damaged record).
std::string encode_path(const core::RoutinePath& path);
std::optional<core::RoutinePath> decode_path(std::string_view text);

}  // namespace softneuro::profiler
