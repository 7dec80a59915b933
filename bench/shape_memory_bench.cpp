// shape_memory_bench: resident memory of one session over many distinct input
// shapes (issue 51: a 7-layer net grew from 16 MB to 243 MB over 10,000 shapes
// with a shape cache of 4). A conv net with dynamic height and width runs at
// `shapes` distinct sizes in turn; VmRSS is printed after 10 and after every
// tenth of the run.
//
//   build/bench/shape_memory_bench [shapes=10000] [shape_cache=4]
#include <softneuro/softneuro.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace sn = softneuro;

namespace {

std::size_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

sn::Blob random_blob(const sn::Shape& s, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  sn::Blob b = sn::Blob::allocate(s);
  for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = u(rng);
  return b;
}

sn::Layer layer(std::string name, std::string type, std::vector<std::string> in, std::string out,
                std::map<std::string, sn::Attr> params = {}, std::map<std::string, sn::Blob> weights = {}) {
  sn::Layer l;
  l.name = std::move(name);
  l.type = std::move(type);
  l.inputs = std::move(in);
  l.outputs = {std::move(out)};
  l.params = std::move(params);
  l.weights = std::move(weights);
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  const int shapes = argc > 1 ? std::atoi(argv[1]) : 10000;
  const int cache = argc > 2 ? std::atoi(argv[2]) : 4;
  std::mt19937 rng(51);
  using Ints = std::vector<int64_t>;
  auto conv = [&](std::string name, std::string in, std::string out, int64_t cin, int64_t cout, int64_t stride) {
    return layer(std::move(name), "conv2", {std::move(in)}, std::move(out),
                 {{"strides", Ints{stride, stride}}, {"pads", Ints{1, 1, 1, 1}}, {"act", std::string("relu")}},
                 {{"weight", random_blob({cout, cin, 3, 3}, rng, 0.2f)}, {"bias", random_blob({cout}, rng, 0.1f)}});
  };
  std::vector<sn::Layer> layers{
      conv("c1", "x", "a", 3, 16, 2),
      conv("c2", "a", "b", 16, 32, 1),
      layer("p1", "pool2", {"b"}, "c", {{"mode", std::string("max")}, {"kernel", Ints{2, 2}}, {"strides", Ints{2, 2}}}),
      conv("c3", "c", "d", 32, 32, 1),
      layer("r1", "resize", {"d"}, "e", {{"mode", std::string("linear")}, {"scales", std::vector<double>{1, 1, 2, 2}}}),
      conv("c4", "e", "f", 32, 16, 1),
      layer("s1", "sigmoid", {"f"}, "y"),
  };
  sn::TensorInfo input{"x", sn::Shape{1, 3, 32, 32}, sn::DType::float32, {2, 3}};
  sn::Model model = sn::Model::build("shape_memory", {input}, layers, {"y"});
  sn::SessionOptions options;
  options.threads = 1;
  options.shape_cache = static_cast<std::size_t>(cache);
  sn::Session session(model, options);
  const std::size_t start = resident_bytes();
  std::size_t after10 = 0;
  // Distinct (h, w) in [16, 16 + side)^2, in a random order: the sizes met late are like the early ones.
  int side = 100;
  while (side * side < shapes) ++side;
  std::vector<int> order(static_cast<std::size_t>(side * side));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::shuffle(order.begin(), order.end(), rng);
  for (int k = 0; k < shapes; ++k) {
    const int64_t h = 16 + order[static_cast<std::size_t>(k)] % side, w = 16 + order[static_cast<std::size_t>(k)] / side;
    sn::Blob x = random_blob({1, 3, h, w}, rng, 1.0f);
    std::vector<sn::NamedBlob> in{{"x", x}};
    session.run(in);
    if (k + 1 == 10) after10 = resident_bytes();
    if ((k + 1) % std::max(1, shapes / 10) == 0)
      fmt::print("{:6} shapes: resident {:.1f} MiB\n", k + 1, resident_bytes() / 1048576.0);
  }
  const std::size_t end = resident_bytes();
  fmt::print("resident memory: {:.1f} MiB at start, {:.1f} MiB after 10 shapes, {:.1f} MiB after {} ({:.2f}x)\n",
             start / 1048576.0, after10 / 1048576.0, end / 1048576.0, shapes, double(end) / double(after10));
  return 0;
}
