// Generates the bundled demo model: a small image classifier (input 1x3x96x96,
// 100 classes) with seeded random weights, built at build time without network.
// It uses the layer types torchvision classifiers need: conv2 with groups and
// fused activations, batchnorm, pooling, residual adds, a squeeze-excite block
// (global pool, mul broadcast), concat, dense and softmax.
#include <softneuro/softneuro.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <random>

using namespace softneuro;

namespace {

struct Builder {
  std::vector<Layer> layers;
  std::mt19937 rng{20261121};
  int counter = 0;

  Blob random(const Shape& s, float stddev, float mean = 0) {
    Blob b = Blob::allocate(s);
    std::normal_distribution<float> d(mean, stddev);
    for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = d(rng);
    return b;
  }
  Blob uniform(const Shape& s, float lo, float hi) {
    Blob b = Blob::allocate(s);
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = d(rng);
    return b;
  }
  std::string add(const std::string& type, std::vector<std::string> inputs, std::map<std::string, Attr> params = {},
                  std::map<std::string, Blob> weights = {}) {
    Layer l;
    l.name = fmt::format("{}_{}", type, counter++);
    l.type = type;
    l.inputs = std::move(inputs);
    l.outputs = {l.name};
    l.params = std::move(params);
    l.weights = std::move(weights);
    layers.push_back(std::move(l));
    return layers.back().name;
  }
  std::string conv(const std::string& x, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t group = 1,
                   const std::string& act = "none") {
    int64_t p = k / 2;
    float he = std::sqrt(2.0f / static_cast<float>(cin / group * k * k));
    std::map<std::string, Attr> params{{"strides", std::vector<int64_t>{stride, stride}},
                                       {"pads", std::vector<int64_t>{p, p, p, p}}, {"group", group}};
    if (act != "none") params["act"] = act;
    if (act == "clip") { params["act_min"] = 0.0; params["act_max"] = 6.0; }
    return add("conv2", {x}, params, {{"weight", random({cout, cin / group, k, k}, he)}, {"bias", random({cout}, 0.01f)}});
  }
  std::string bn(const std::string& x, int64_t c) {
    return add("batchnorm", {x}, {{"epsilon", 1e-5}},
               {{"scale", uniform({c}, 0.8f, 1.2f)}, {"bias", random({c}, 0.05f)},
                {"mean", random({c}, 0.05f)}, {"var", uniform({c}, 0.8f, 1.2f)}});
  }
  std::string basic_block(const std::string& x, int64_t c) {
    auto y = add("relu", {bn(conv(x, c, c, 3, 1), c)});
    y = bn(conv(y, c, c, 3, 1), c);
    return add("relu", {add("add", {x, y})});
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_demo_model OUT.dnn\n");
    return 2;
  }
  Builder b;
  auto x = b.add("relu", {b.bn(b.conv("input", 3, 16, 3, 2), 16)});                       // 48x48
  x = b.add("pool2", {x}, {{"mode", std::string("max")}, {"kernel", std::vector<int64_t>{3, 3}},
                           {"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});  // 24x24
  x = b.basic_block(x, 16);
  x = b.basic_block(x, 16);
  // Two branches concatenated: a strided 3x3 and a pooled 1x1 path.
  auto left = b.conv(x, 16, 16, 3, 2, 1, "relu");                                         // 12x12
  auto right = b.add("pool2", {x}, {{"mode", std::string("avg")}, {"kernel", std::vector<int64_t>{2, 2}},
                                    {"strides", std::vector<int64_t>{2, 2}}});
  right = b.conv(right, 16, 16, 1, 1, 1, "clip");
  x = b.add("concat", {left, right}, {{"axis", int64_t{1}}});                                // 32 ch
  x = b.basic_block(x, 32);
  // Inverted residual with a depthwise conv and squeeze-excite, MobileNetV3 style.
  auto e = b.conv(x, 32, 64, 1, 1, 1, "hardswish");
  e = b.conv(e, 64, 64, 3, 1, 64, "hardswish");
  auto s = b.add("pool2", {e}, {{"mode", std::string("avg")}, {"global", int64_t{1}}});
  s = b.conv(s, 64, 16, 1, 1, 1, "relu");
  s = b.conv(s, 16, 64, 1, 1, 1, "hardsigmoid");
  e = b.add("mul", {e, s});
  e = b.bn(b.conv(e, 64, 32, 1, 1), 32);
  x = b.add("add", {x, e});
  x = b.add("pool2", {x}, {{"mode", std::string("avg")}, {"global", int64_t{1}}});
  x = b.add("flatten", {x}, {{"axis", int64_t{1}}});
  x = b.add("dense", {x}, {}, {{"weight", b.random({100, 32}, 0.08f)}, {"bias", b.random({100}, 0.1f)}});
  x = b.add("softmax", {x}, {{"axis", int64_t{-1}}});
  b.layers.back().outputs = {"probabilities"};
  try {
    Model::build("softneuro-demo-classifier", {{"input", Shape{1, 3, 96, 96}, DType::float32}}, std::move(b.layers),
                 {"probabilities"})
        .save(argv[1]);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "make_demo_model: %s\n", ex.what());
    return 1;
  }
  return 0;
}
