// The tuner's cache readers: the profile cache (measured times) and the
// calibration cache (quantisation scales). Both checksum their contents; the
// harness writes the checksums the input should have, so that mutations reach
// the parsing and the value checks behind them.
#include "fuzz_targets.hpp"

#include "core/hash.hpp"
#include "profiler/calibrate.hpp"
#include "profiler/profile_cache.hpp"

#include <softneuro/error.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <string>

namespace {

std::string hex(const std::string& s) { return fmt::format("{:016x}", softneuro::core::xxh64(s.data(), s.size())); }

/// Each line's last field becomes the checksum of its key and time, as the
/// profile cache writes them (version \t key \t ms \t checksum).
std::string with_record_checksums(const std::string& text) {
  std::string out;
  for (std::size_t begin = 0; begin < text.size();) {
    std::size_t end = text.find('\n', begin);
    std::string line = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    begin = end == std::string::npos ? text.size() : end + 1;
    auto a = line.find('\t'), d = line.rfind('\t');
    auto c = d == std::string::npos || d == 0 ? std::string::npos : line.rfind('\t', d - 1);
    if (a != std::string::npos && c != std::string::npos && c > a)
      line = line.substr(0, d + 1) + hex(line.substr(a + 1, c - a - 1) + '\t' + line.substr(c + 1, d - c - 1));
    out += line + (end == std::string::npos ? "" : "\n");
  }
  return out;
}

}  // namespace

namespace softneuro::fuzz {

int cache_read(const uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  // Byte 0 picks the cache, byte 1 the calibration's number of range methods.
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
  try {
    if (data[0] % 2 == 0) {
      const std::string contents = with_record_checksums(text);
      const std::string dir = scratch_dir() + "/profiles";
      std::filesystem::create_directories(dir);
      write_scratch("profiles/profiles.tsv", reinterpret_cast<const uint8_t*>(contents.data()),
                                     contents.size());
      softneuro::profiler::ProfileCache cache(dir);
      (void)cache.find("conv2 1x3x8x8 cpu/ref");
    } else {
      std::string contents = text;
      if (!contents.empty() && contents.back() != '\n') contents += '\n';
      contents += hex(contents) + "\n";
      const std::string path = write_scratch(
          "calibration.tsv", reinterpret_cast<const uint8_t*>(contents.data()), contents.size());
      (void)softneuro::profiler::load_calibration(path, 1 + data[1] % 3);
    }
  } catch (const softneuro::Error&) {
  }
  return 0;
}

}  // namespace softneuro::fuzz
