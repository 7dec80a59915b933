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
#include <vector>

namespace softneuro::profiler {
namespace {

// v2: device routines are timed by their device time alone (v1 counted host launches too).
// v3: each record carries the load it was measured under, and a qint8 routine's
// key its quantisation (a warm cache chose a path 1.5x slower than a cold tuning).
constexpr const char* kVersion = "softneuro-profile-v3";
constexpr const char* kVersionStem = "softneuro-profile-v";

std::string checksum(const std::string& key, const std::string& ms, const std::string& load) {
  std::string s = key + '\t' + ms + '\t' + load;
  return fmt::format("{:016x}", core::xxh64(s.data(), s.size()));
}

std::string format_record(const std::string& key, const ProfileCache::Entry& e) {
  std::string v = fmt::format("{:.6g}", e.ms), l = fmt::format("{:.3g}", e.load);
  return fmt::format("{}\t{}\t{}\t{}\t{}\n", kVersion, key, v, l, checksum(key, v, l));
}

}  // namespace

std::string ProfileCache::default_dir() {
  if (const char* d = std::getenv("SOFTNEURO_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/softneuro";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/softneuro";
  return ".softneuro-cache";
}

namespace {

/// The file's records into `records` (a later tuner's override earlier
/// ones); the number of damaged lines. Records of an older version are
/// skipped (their times are measured again) and counted in `older`. Only a
/// regular file is read: a FIFO or a device there would block or never end.
int read_records(const std::string& path, std::map<std::string, ProfileCache::Entry>& records, int* older = nullptr) {
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
    // version \t key \t ms \t load \t checksum ; anything else is not trusted
    std::vector<std::size_t> tabs;
    for (std::size_t i = line.find('\t'); i != std::string::npos; i = line.find('\t', i + 1)) tabs.push_back(i);
    const std::string version = line.substr(0, tabs.empty() ? std::string::npos : tabs[0]);
    if (version != kVersion && version.rfind(kVersionStem, 0) == 0) {
      if (older) ++*older;
      continue;
    }
    if (tabs.size() < 4 || version != kVersion) {
      ++bad;
      continue;
    }
    const std::size_t n = tabs.size();
    std::string key = line.substr(tabs[0] + 1, tabs[n - 3] - tabs[0] - 1);
    std::string ms = line.substr(tabs[n - 3] + 1, tabs[n - 2] - tabs[n - 3] - 1);
    std::string load = line.substr(tabs[n - 2] + 1, tabs[n - 1] - tabs[n - 2] - 1), sum = line.substr(tabs[n - 1] + 1);
    char *end = nullptr, *load_end = nullptr;
    const double v = std::strtod(ms.c_str(), &end), l = std::strtod(load.c_str(), &load_end);
    if (sum != checksum(key, ms, load) || !end || *end || !(v >= 0) || v > 1e9 || !load_end || *load_end ||
        !(l >= -1 && l < 1e6)) {
      ++bad;
      continue;
    }
    records[key] = {v, l};
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
  int older = 0;
  if (int bad = read_records(path_, records_, &older)) core::warn("profile cache {}: ignored {} damaged record(s)", path_, bad);
  if (older) core::info("profile cache {}: {} record(s) of an older version are measured again", path_, older);
}

std::optional<double> ProfileCache::find(const std::string& key) const {
  if (auto it = fresh_.find(key); it != fresh_.end()) return it->second.ms;
  if (auto it = records_.find(key); it != records_.end() && it->second.load < kUntrustedLoad) return it->second.ms;
  return std::nullopt;
}

bool ProfileCache::untrusted(const std::string& key) const {
  auto it = records_.find(key);
  return !fresh_.count(key) && it != records_.end() && it->second.load >= kUntrustedLoad;
}

void ProfileCache::put(const std::string& key, double ms, double load) { fresh_[key] = {ms, load}; }

void ProfileCache::set_load(const std::string& key, double load) {
  if (auto it = fresh_.find(key); it != fresh_.end()) it->second.load = load;
}

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
