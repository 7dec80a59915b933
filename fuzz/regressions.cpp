// The inputs with which fuzzing once found a crash (fuzz/regressions/<target>/),
// each run through its target again: a test of every build (and of the
// sanitizer run, where a relapse is a report, not only a wrong result).
#include "fuzz_targets.hpp"

#include <softneuro/error.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <fuzz/regressions folder>\n", argv[0]);
    return 2;
  }
  softneuro::fuzz::init();
  const std::map<std::string, int (*)(const uint8_t*, std::size_t)> targets = {
      {"dnn_load", softneuro::fuzz::dnn_load},
      {"onnx_import", softneuro::fuzz::onnx_import},
      {"tflite_import", softneuro::fuzz::tflite_import},
      {"npy_read", softneuro::fuzz::npy_read},
      {"cache_read", softneuro::fuzz::cache_read}};
  int inputs = 0, failed = 0;
  for (const auto& [name, target] : targets) {
    const auto dir = std::filesystem::path(argv[1]) / name;
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(entry.path(), std::ios::binary);
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      ++inputs;
      try {
        target(bytes.data(), bytes.size());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s: %s\n", name.c_str(), entry.path().c_str(), e.what());
        ++failed;
      }
    }
  }
  std::printf("%d fuzz regression inputs, %d failed\n", inputs, failed);
  return failed ? 1 : 0;
}
