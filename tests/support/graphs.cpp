#include "support/graphs.hpp"

#include "support/run_layer.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <random>
#include <unistd.h>

namespace softneuro::test {

namespace {
Blob random_blob(const Shape& s, unsigned seed, float scale = 0.3f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, scale);
  Blob b = Blob::allocate(s);
  for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = d(rng);
  return b;
}
}  // namespace

Layer layer(std::string name, std::string type, std::vector<std::string> in, std::vector<std::string> out,
            std::map<std::string, Attr> params, std::map<std::string, Blob> weights) {
  Layer l;
  l.name = std::move(name);
  l.type = std::move(type);
  l.inputs = std::move(in);
  l.outputs = std::move(out);
  l.params = std::move(params);
  l.weights = std::move(weights);
  return l;
}

core::Graph chain_graph(int length, int64_t channels, int64_t size) {
  core::Graph g;
  g.name = "chain";
  g.inputs = {{"input", Shape{1, channels, size, size}, DType::float32, {}}};
  std::string prev = "input";
  const char* kinds[] = {"conv2", "relu", "sigmoid", "tanh", "hardswish"};
  for (int i = 0; i < length; ++i) {
    std::string type = kinds[i % 5];
    std::string out = i + 1 == length ? "out" : fmt::format("b{}", i);
    std::map<std::string, Blob> w;
    std::map<std::string, Attr> p;
    if (type == "conv2") {
      w = {{"weight", random_blob({channels, channels, 3, 3}, static_cast<unsigned>(i))},
           {"bias", random_blob({channels}, 99u + static_cast<unsigned>(i))}};
      p = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    }
    g.layers.push_back(layer(fmt::format("l{}", i), type, {prev}, {out}, p, w));
    prev = out;
  }
  g.outputs = {"out"};
  return g;
}

core::Graph multi_io_graph() {
  core::Graph g;
  g.name = "multi_io";
  g.inputs = {{"a", Shape{1, 6, 4, 4}, DType::float32}, {"b", Shape{1, 6, 4, 4}, DType::float32}};
  g.layers.push_back(layer("sum", "add", {"a", "b"}, {"s"}));
  g.layers.push_back(layer("split", "split", {"s"}, {"s0", "s1"}, {{"axis", int64_t{1}}, {"split", std::vector<int64_t>{2, 4}}}));
  g.layers.push_back(layer("act", "relu", {"s1"}, {"r"}));
  g.layers.push_back(layer("cat", "concat", {"s0", "r", "a"}, {"c"}, {{"axis", int64_t{1}}}));
  g.layers.push_back(layer("pool", "pool2", {"c"}, {"p"}, {{"mode", std::string("avg")}, {"global", int64_t{1}}}));
  g.layers.push_back(layer("flat", "flatten", {"p"}, {"f"}));
  g.layers.push_back(layer("fc", "dense", {"f"}, {"logits"}, {}, {{"weight", random_blob({5, 12}, 7)}}));
  g.outputs = {"logits", "r"};
  return g;
}

namespace {
// The test process's scratch directory, removed when the process exits normally (a forked child that
// exits through _exit or a signal leaves it to its parent).
struct ScratchDir {
  pid_t owner = ::getpid();
  std::filesystem::path path = std::filesystem::temp_directory_path() / fmt::format("softneuro-test-{}", owner);
  ~ScratchDir() {
    if (::getpid() != owner) return;
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};
}  // namespace

std::string temp_path(const std::string& name) {
  static const ScratchDir scratch;
  std::filesystem::create_directories(scratch.path);
  return (scratch.path / name).string();
}

std::shared_ptr<core::RoutineRegistry> registry_with(std::vector<std::unique_ptr<Routine>> extra) {
  auto registry = std::make_shared<core::RoutineRegistry>(core::RoutineRegistry::instance());
  registry->add_all(std::move(extra), "test");
  return registry;
}

}  // namespace softneuro::test
