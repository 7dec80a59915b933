#include "core/device.hpp"

#include "core/cpu_features.hpp"

#include <fmt/format.h>

#if defined(__aarch64__)
#include <cpuinfo.h>
#endif

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
    // Only the extensions that change which routines can run or how fast, and
    // of those only the ones SOFTNEURO_MAX_CPU_ISA leaves (a capped machine is
    // another device: its profiles and tuned paths are its own).
    const CpuIsa cap = max_cpu_isa();
    const CpuFeatures left = cap_cpu_features(CpuFeatures::every(), cap);
    const std::pair<const char*, bool> known[] = {
        {"avx2", left.avx2},         {"fma", left.fma},           {"f16c", left.f16c},
        {"avx512f", left.avx512f},   {"avx512bw", left.avx512bw}, {"avx512_vnni", left.avx512_vnni},
        {"avx_vnni", left.avx_vnni}, {"avx512_bf16", left.avx512_bf16}, {"amx_tile", left.amx_tile},
        {"amx_int8", left.amx_int8}, {"amx_bf16", left.amx_bf16}};
    std::vector<std::string> isa;
    for (const auto& [f, allowed] : known)
      if (allowed && flags.count(f)) isa.push_back(f);
#if defined(__aarch64__)
    // From the features detected (the kernel's HWCAPs; under emulation
    // /proc/cpuinfo is the host's), and the CPU's name where cpuinfo knows it.
    const CpuFeatures& a = cpu_features();
    const std::pair<const char*, bool> arm[] = {{"neon", a.neon}, {"dotprod", a.dotprod}, {"i8mm", a.i8mm},
                                                {"fp16", a.fp16_arith}, {"bf16", a.bf16}, {"sve", a.sve},
                                                {"sve2", a.sve2}};
    isa.clear();
    for (const auto& [f, has] : arm)
      if (has) isa.push_back(f);
    model = "aarch64";
    if (cpuinfo_initialize() && cpuinfo_get_packages_count() > 0) {
      const std::string name = cpuinfo_get_package(0)->name;
      if (!name.empty() && name != "Unknown") model = "aarch64 " + name;
    }
#endif
    return fmt::format("{} | {}{} | {} cpus", model, fmt::join(isa, " "),
                       cap == CpuIsa::all ? std::string() : fmt::format(" (max isa {})", cpu_isa_name(cap)),
                       std::thread::hardware_concurrency());
  }();
  return fingerprint;
}

}  // namespace softneuro::core
