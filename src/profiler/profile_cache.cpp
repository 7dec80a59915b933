#include "profiler/profile_cache.hpp"

#include "core/dnn_file.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace softneuro::profiler {
namespace {

constexpr const char* kVersion = "softneuro-profile-v1";

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

ProfileCache::ProfileCache(std::string dir) {
  if (dir.empty() || dir == "-") return;
  path_ = dir + "/profiles.tsv";
  std::ifstream in(path_);
  if (!in) return;
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
    records_[key] = v;
  }
  if (bad) core::warn("profile cache {}: ignored {} damaged record(s)", path_, bad);
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
