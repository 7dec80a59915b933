#include "profiler/profile_cache.hpp"

#include "core/dnn_file.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/file.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>

namespace softneuro::profiler {
namespace {

// v2: device routines are timed by their device time alone (v1 counted host launches too).
constexpr const char* kVersion = "softneuro-profile-v2";

std::string checksum(const std::string& key, const std::string& ms) {
  std::string s = key + '\t' + ms;
  return fmt::format("{:016x}", core::xxh64(s.data(), s.size()));
}

std::string format_record(const std::string& key, double ms) {
  std::string v = fmt::format("{:.6g}", ms);
  return fmt::format("{}\t{}\t{}\t{}\n", kVersion, key, v, checksum(key, v));
}

}  // namespace

std::string ProfileCache::default_dir() {
  if (const char* d = std::getenv("SOFTNEURO_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/softneuro";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/softneuro";
  return ".softneuro-cache";
}

namespace {

/// The file's trusted records into `records` (a later tuner's override earlier
/// ones); the number of damaged lines. Only a regular file is read: a FIFO or
/// a device there would block or never end.
int read_records(const std::string& path, std::map<std::string, double>& records) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return 0;
  if (!std::filesystem::is_regular_file(path, ec)) {
    core::warn("profile cache {}: not a regular file; ignored", path);
    return 0;
  }
  std::ifstream in(path);
  if (!in) return 0;
  int bad = 0;
  for (std::string line; std::getline(in, line);) {
    // version \t key \t ms \t checksum ; anything else is not trusted
    auto a = line.find('\t'), d = line.rfind('\t');
    auto c = d == std::string::npos || d == 0 ? std::string::npos : line.rfind('\t', d - 1);
    if (a == std::string::npos || c == std::string::npos || c <= a || line.substr(0, a) != kVersion) {
      ++bad;
      continue;
    }
    std::string key = line.substr(a + 1, c - a - 1), ms = line.substr(c + 1, d - c - 1), sum = line.substr(d + 1);
    char* end = nullptr;
    double v = std::strtod(ms.c_str(), &end);
    if (sum != checksum(key, ms) || !end || *end || !(v >= 0) || v > 1e9) {
      ++bad;
      continue;
    }
    records[key] = v;
  }
  return bad;
}

/// An exclusive lock on `path` + ".lock" while it lives (flock: released when
/// the process dies, so a crashed tuner never leaves the cache locked).
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw std::runtime_error(fmt::format("cannot open {}.lock: {}", path, std::strerror(errno)));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) {
        ::close(fd_);
        throw std::runtime_error(fmt::format("cannot lock {}.lock: {}", path, std::strerror(errno)));
      }
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

ProfileCache::ProfileCache(std::string dir) {
  if (dir.empty() || dir == "-") return;
  path_ = dir + "/profiles.tsv";
  if (int bad = read_records(path_, records_)) core::warn("profile cache {}: ignored {} damaged record(s)", path_, bad);
}

std::optional<double> ProfileCache::find(const std::string& key) const {
  if (auto it = fresh_.find(key); it != fresh_.end()) return it->second;
  if (auto it = records_.find(key); it != records_.end()) return it->second;
  return std::nullopt;
}

void ProfileCache::put(const std::string& key, double ms) { fresh_[key] = ms; }

void ProfileCache::save() {
  if (path_.empty() || fresh_.empty()) return;
  try {
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
    // Under the lock, what other tuners saved since we read the file is merged
    // in, so two tuners sharing a folder lose nothing (each rewrites the whole file).
    FileLock lock(path_);
    read_records(path_, records_);
    for (const auto& [k, v] : fresh_) records_[k] = v;
    std::string out;
    for (const auto& [k, v] : records_) out += format_record(k, v);
    core::write_file_atomically(path_, out.data(), out.size());
    fresh_.clear();
  } catch (const std::exception& e) {
    core::warn("profile cache {} not saved: {}", path_, e.what());
  }
}

}  // namespace softneuro::profiler
