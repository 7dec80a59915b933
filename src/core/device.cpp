#include "core/device.hpp"

#include <fmt/format.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace softneuro::core {

const std::string& device_fingerprint() {
  static const std::string fingerprint = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model = "unknown cpu";
    std::set<std::string> flags;
    while (std::getline(in, line)) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
      std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
      if (key == "model name" && model == "unknown cpu") model = value;
      if (key == "flags" && flags.empty()) {
        std::istringstream words(value);
        for (std::string w; words >> w;) flags.insert(w);
      }
    }
    // Only the extensions that change which routines can run or how fast.
    std::vector<std::string> isa;
    for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16",
                          "amx_tile", "amx_int8", "amx_bf16"})
      if (flags.count(f)) isa.push_back(f);
    return fmt::format("{} | {} | {} cpus", model, fmt::join(isa, " "), std::thread::hardware_concurrency());
  }();
  return fingerprint;
}

}  // namespace softneuro::core
