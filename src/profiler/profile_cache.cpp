#include "profiler/profile_cache.hpp"

#include "core/dnn_file.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"

#include <softneuro/session.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/file.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

namespace softneuro::profiler {
namespace {

// v2: device routines are timed by their device time alone (v1 counted host launches too).
// v3: each record carries the load it was measured under, and a qint8 routine's
// key its quantisation (a warm cache chose a path 1.5x slower than a cold tuning).
// v4: times whose samples were judged preempted by each thread's exact CPU
// clock and cut off after three slow runs, not one (v3's: 2% of them 4x off).
constexpr const char* kVersion = "softneuro-profile-v4";
constexpr const char* kVersionStem = "softneuro-profile-v";

/// A record's checksum: of its three fields (a profile's key, time and load; a path's model, time and text).
std::string checksum(const std::string& a, const std::string& b, const std::string& c) {
  std::string s = a + '\t' + b + '\t' + c;
  return fmt::format("{:016x}", core::xxh64(s.data(), s.size()));
}

std::string format_record(const std::string& key, const ProfileCache::Entry& e) {
  std::string v = fmt::format("{:.6g}", e.ms), l = fmt::format("{:.3g}", e.load);
  return fmt::format("{}\t{}\t{}\t{}\t{}\n", kVersion, key, v, l, checksum(key, v, l));
}

}  // namespace

std::string library_build() { return fmt::format("v{}+{}", version(), source_digest()); }

std::string ProfileCache::default_dir() {
  if (const char* d = std::getenv("SOFTNEURO_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/softneuro";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/softneuro";
  return ".softneuro-cache";
}

namespace {

/// Opens `path` for reading where it is a regular file; false where it is
/// missing, unreadable or anything else (a FIFO or a device there would block
/// or never end: warned).
bool open_regular(const std::string& path, std::ifstream& in) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return false;
  if (!std::filesystem::is_regular_file(path, ec)) {
    core::warn("profile cache {}: not a regular file; ignored", path);
    return false;
  }
  in.open(path);
  return static_cast<bool>(in);
}

/// The file's records into `records` (a later tuner's override earlier
/// ones); the number of damaged lines. Records of an older version are
/// skipped (their times are measured again) and counted in `older`. Only a
/// regular file is read: a FIFO or a device there would block or never end.
int read_records(const std::string& path, std::map<std::string, ProfileCache::Entry>& records, int* older = nullptr) {
  std::ifstream in;
  if (!open_regular(path, in)) return 0;
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

namespace {

constexpr const char* kPathsVersion = "softneuro-paths-v1";
constexpr const char* kPathsStem = "softneuro-paths-v";

/// The paths file's records appended to `out`; the number of damaged lines.
int read_path_records(const std::string& path, std::vector<std::tuple<std::string, long long, std::string>>& out) {
  std::ifstream in;
  if (!open_regular(path, in)) return 0;
  int bad = 0;
  for (std::string line; std::getline(in, line);) {
    // version \t model key \t time \t encoded path \t checksum
    std::vector<std::string> f;
    for (std::size_t at = 0;;) {
      const std::size_t tab = line.find('\t', at);
      f.push_back(line.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
      if (tab == std::string::npos) break;
      at = tab + 1;
    }
    if (f[0] != kPathsVersion && f[0].rfind(kPathsStem, 0) == 0) continue;  // another version's: not damaged
    if (f.size() != 5 || f[0] != kPathsVersion || f[4] != checksum(f[1], f[2], f[3]) || !decode_path(f[3])) {
      ++bad;
      continue;
    }
    char* end = nullptr;
    const long long t = std::strtoll(f[2].c_str(), &end, 10);
    if (!end || *end) {
      ++bad;
      continue;
    }
    out.emplace_back(f[1], t, f[3]);
  }
  return bad;
}

long long now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

ProfileCache::ProfileCache(std::string dir) {
  if (dir.empty() || dir == "-") return;
  path_ = dir + "/profiles.tsv";
  paths_path_ = dir + "/paths.tsv";
  int older = 0;
  if (int bad = read_records(path_, records_, &older)) core::warn("profile cache {}: ignored {} damaged record(s)", path_, bad);
  if (older) core::info("profile cache {}: {} record(s) of an older version are measured again", path_, older);
  std::vector<std::tuple<std::string, long long, std::string>> paths;
  if (int bad = read_path_records(paths_path_, paths))
    core::warn("profile cache {}: ignored {} damaged record(s)", paths_path_, bad);
  for (auto& [key, time, encoded] : paths) path_records_.push_back({std::move(key), time, std::move(encoded)});
}

std::vector<core::RoutinePath> ProfileCache::earlier_paths(const std::string& model_key) const {
  std::vector<const PathRecord*> mine;
  for (const auto* records : {&path_records_, &fresh_paths_})
    for (const auto& r : *records)
      if (r.model_key == model_key) mine.push_back(&r);
  std::stable_sort(mine.begin(), mine.end(), [](const PathRecord* a, const PathRecord* b) { return a->time > b->time; });
  std::vector<core::RoutinePath> out;
  std::vector<std::string> seen;
  for (const PathRecord* r : mine) {
    if (out.size() == kPathsPerModel) break;
    if (std::find(seen.begin(), seen.end(), r->encoded) != seen.end()) continue;
    seen.push_back(r->encoded);
    if (auto p = decode_path(r->encoded)) out.push_back(std::move(*p));
  }
  return out;
}

void ProfileCache::put_path(const std::string& model_key, const core::RoutinePath& path) {
  fresh_paths_.push_back({model_key, now_s(), encode_path(path)});
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
  save_paths();
  if (path_.empty() || fresh_.empty()) return;
  try {
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
    // Under the lock, what other tuners saved since we read the file is merged
    // in, so two tuners sharing a folder lose nothing (each rewrites the whole file).
    FileLock lock(path_);
    read_records(path_, records_);
    for (const auto& [k, v] : fresh_) records_[k] = v;
    std::string out, others;
    const std::string mine = "|" + build_ + "|";
    std::size_t other_records = 0;
    for (const auto& [k, v] : records_) {
      const bool other = !build_.empty() && k.find(mine) == std::string::npos;
      (other ? others : out) += format_record(k, v);
      other_records += other;
    }
    if (out.size() + others.size() <= max_bytes_) {
      out += others;
    } else {
      core::info("profile cache {}: {} record(s) of other library builds dropped (the file would hold {:.1f} MiB)", path_,
                 other_records, double(out.size() + others.size()) / (1 << 20));
    }
    core::write_file_atomically(path_, out.data(), out.size());
    fresh_.clear();
  } catch (const std::exception& e) {
    core::warn("profile cache {} not saved: {}", path_, e.what());
  }
}

void ProfileCache::save_paths() {
  if (paths_path_.empty() || fresh_paths_.empty()) return;
  try {
    std::filesystem::create_directories(std::filesystem::path(paths_path_).parent_path());
    FileLock lock(paths_path_);
    std::vector<std::tuple<std::string, long long, std::string>> all;
    read_path_records(paths_path_, all);
    for (const auto& r : fresh_paths_) all.emplace_back(r.model_key, r.time, r.encoded);
    // Per model, each path once (its newest record), the newest kPathsPerModel kept.
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return std::get<1>(a) > std::get<1>(b); });
    std::map<std::string, std::vector<std::string>> kept;
    std::string out;
    for (const auto& [key, time, encoded] : all) {
      auto& k = kept[key];
      if (k.size() == kPathsPerModel || std::find(k.begin(), k.end(), encoded) != k.end()) continue;
      k.push_back(encoded);
      const std::string t = std::to_string(time);
      out += fmt::format("{}\t{}\t{}\t{}\t{}\n", kPathsVersion, key, t, encoded, checksum(key, t, encoded));
    }
    core::write_file_atomically(paths_path_, out.data(), out.size());
    for (auto& r : fresh_paths_) path_records_.push_back(std::move(r));
    fresh_paths_.clear();
  } catch (const std::exception& e) {
    core::warn("profile cache {} not saved: {}", paths_path_, e.what());
  }
}

// A path's text: counts and integers end in ';', strings are "<length>:<bytes>";
// then '%', tab, newline and carriage return escaped (%25, %09, %0A, %0D).
namespace {

void put_str(std::string& out, const std::string& s) { out += fmt::format("{}:{}", s.size(), s); }
void put_params(std::string& out, const RoutineParams& params) {
  out += fmt::format("{};", params.size());
  for (const auto& [k, v] : params) {
    put_str(out, k);
    out += fmt::format("{};", v);
  }
}
void put_choice(std::string& out, const core::RoutineChoice& c) {
  put_str(out, c.layer);
  put_str(out, c.descriptor);
  put_params(out, c.params);
  out += fmt::format("{};", c.children.size());
  for (const auto& child : c.children) put_choice(out, child);
}

class PathReader {
 public:
  explicit PathReader(std::string_view s) : s_(s) {}
  bool done() const { return at_ == s_.size(); }
  std::optional<long long> integer() {
    std::size_t end = s_.find(';', at_);
    if (end == std::string_view::npos || end == at_ || end - at_ > 19) return std::nullopt;
    const std::string digits(s_.substr(at_, end - at_));
    char* stop = nullptr;
    const long long v = std::strtoll(digits.c_str(), &stop, 10);
    if (!stop || *stop) return std::nullopt;
    at_ = end + 1;
    return v;
  }
  /// A count of items that each take at least one more byte.
  std::optional<std::size_t> count() {
    auto n = integer();
    if (!n || *n < 0 || static_cast<unsigned long long>(*n) > s_.size() - at_) return std::nullopt;
    return static_cast<std::size_t>(*n);
  }
  std::optional<std::string> str() {
    std::size_t colon = s_.find(':', at_);
    if (colon == std::string_view::npos || colon == at_ || colon - at_ > 9) return std::nullopt;
    std::size_t n = 0;
    for (std::size_t i = at_; i < colon; ++i) {
      if (s_[i] < '0' || s_[i] > '9') return std::nullopt;
      n = n * 10 + static_cast<std::size_t>(s_[i] - '0');
    }
    if (n > s_.size() - colon - 1) return std::nullopt;
    at_ = colon + 1 + n;
    return std::string(s_.substr(colon + 1, n));
  }
  std::optional<RoutineParams> params() {
    auto n = count();
    if (!n) return std::nullopt;
    RoutineParams p;
    for (std::size_t i = 0; i < *n; ++i) {
      auto k = str();
      auto v = k ? integer() : std::nullopt;
      if (!v) return std::nullopt;
      p.emplace_back(std::move(*k), *v);
    }
    return p;
  }
  std::optional<core::RoutineChoice> choice(int depth) {
    core::RoutineChoice c;
    auto layer = str();
    auto descriptor = layer ? str() : std::nullopt;
    auto params = descriptor ? this->params() : std::nullopt;
    auto children = params ? count() : std::nullopt;
    if (!children || (*children > 0 && depth >= 8)) return std::nullopt;
    c.layer = std::move(*layer);
    c.descriptor = std::move(*descriptor);
    c.params = std::move(*params);
    for (std::size_t i = 0; i < *children; ++i) {
      auto child = choice(depth + 1);
      if (!child) return std::nullopt;
      c.children.push_back(std::move(*child));
    }
    return c;
  }

 private:
  std::string_view s_;
  std::size_t at_ = 0;
};

}  // namespace

std::string encode_path(const core::RoutinePath& path) {
  std::string raw = "P1;";
  raw += fmt::format("{};", path.routines.size());
  for (const auto& r : path.routines) put_choice(raw, r);
  raw += fmt::format("{};", path.adapts.size());
  for (const auto& a : path.adapts) {
    for (const auto* s : {&a.blob, &a.consumer, &a.from_schema, &a.to_schema}) put_str(raw, *s);
    raw += fmt::format("{};", a.steps.size());
    for (const auto& step : a.steps) put_str(raw, step);
    put_params(raw, a.params);
  }
  std::string out;
  for (char c : raw) {
    if (c == '%' || c == '\t' || c == '\n' || c == '\r') out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else out += c;
  }
  return out;
}

std::optional<core::RoutinePath> decode_path(std::string_view text) {
  std::string raw;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      raw += text[i];
      continue;
    }
    const std::string_view hex = text.substr(i + 1, 2);
    if (hex == "25") raw += '%';
    else if (hex == "09") raw += '\t';
    else if (hex == "0A") raw += '\n';
    else if (hex == "0D") raw += '\r';
    else return std::nullopt;
    i += 2;
  }
  if (raw.rfind("P1;", 0) != 0) return std::nullopt;
  PathReader in(std::string_view(raw).substr(3));
  core::RoutinePath path;
  auto routines = in.count();
  if (!routines) return std::nullopt;
  for (std::size_t i = 0; i < *routines; ++i) {
    auto c = in.choice(0);
    if (!c) return std::nullopt;
    path.routines.push_back(std::move(*c));
  }
  auto adapts = in.count();
  if (!adapts) return std::nullopt;
  for (std::size_t i = 0; i < *adapts; ++i) {
    core::AdaptChoice a;
    for (auto* s : {&a.blob, &a.consumer, &a.from_schema, &a.to_schema}) {
      auto v = in.str();
      if (!v) return std::nullopt;
      *s = std::move(*v);
    }
    auto steps = in.count();
    if (!steps) return std::nullopt;
    for (std::size_t k = 0; k < *steps; ++k) {
      auto v = in.str();
      if (!v) return std::nullopt;
      a.steps.push_back(std::move(*v));
    }
    auto params = in.params();
    if (!params || a.steps.empty()) return std::nullopt;
    a.params = std::move(*params);
    path.adapts.push_back(std::move(a));
  }
  if (!in.done()) return std::nullopt;
  return path;
}

}  // namespace softneuro::profiler
