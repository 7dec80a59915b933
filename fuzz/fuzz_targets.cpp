#include "fuzz_targets.hpp"

#include <softneuro/session.hpp>

#include <softneuro/error.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <unistd.h>

namespace softneuro::fuzz {

namespace {
// Removed when the process exits normally; a crash leaves it beside the crashing input.
struct ScratchDir {
  pid_t owner = ::getpid();
  std::filesystem::path path = std::filesystem::temp_directory_path() / fmt::format("softneuro-fuzz-{}", owner);
  std::string text = path.string();
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() {
    if (::getpid() != owner) return;
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};
}  // namespace

const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.text;
}

std::string write_scratch(const std::string& name, const uint8_t* data, std::size_t size) {
  std::string path = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  if (size && std::fwrite(data, 1, size, f) != size) {
    std::fclose(f);
    throw std::runtime_error("cannot write " + path);
  }
  std::fclose(f);
  return path;
}

void init() { set_num_threads(1); }

std::vector<NamedBlob> small_inputs(const Model& model, std::size_t max_elements) {
  std::vector<NamedBlob> inputs;
  std::size_t total = 0;
  for (const auto& in : model.inputs()) {
    std::size_t n = 1;
    for (auto d : in.shape) {
      if (d < 0 || (d > 0 && n > max_elements / static_cast<std::size_t>(d))) return {};
      n *= static_cast<std::size_t>(d);
    }
    total += n;
    if (total > max_elements) return {};
    inputs.push_back({in.name, Blob::allocate(in.shape, in.dtype)});
  }
  return inputs;
}

void run_once(const Model& model) {
  SessionOptions options;
  options.threads = 1;
  options.memory_limit = std::size_t{64} << 20;
  Session session(model, options);
  // Run where the net's blobs are small too: a mutated pad or resize scale
  // grows a 2,048-value input to 33 MB of blobs, and running those (30 ms, 30
  // times a typical input) ran the same code as a small net, a third of the
  // campaign's time. Such nets are still loaded and prepared.
  if (session.planned_bytes() > (std::size_t{4} << 20)) return;
  auto inputs = small_inputs(model, std::size_t{1} << 14);
  if (!inputs.empty() || model.inputs().empty()) session.run(inputs);
}

}  // namespace softneuro::fuzz
