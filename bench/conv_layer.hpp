// A conv2 layer as the benchmarks time it (conv_bench, cuda_bench).
#pragma once

#include <softneuro/session.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace softneuro::bench {

/// conv2 with input "x", output "y": weights uniform in [-0.1, 0.1), zero bias, fused relu.
inline Layer conv_layer(const std::string& name, int64_t c, int64_t oc, int64_t k, int64_t stride, int64_t pad,
                        int64_t group, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  Blob w = Blob::allocate({oc, c / group, k, k});
  for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = u(rng);
  Layer l;
  l.name = name;
  l.type = "conv2";
  l.inputs = {"x"};
  l.outputs = {"y"};
  l.params["strides"] = std::vector<int64_t>{stride, stride};
  l.params["pads"] = std::vector<int64_t>{pad, pad, pad, pad};
  l.params["group"] = group;
  l.params["act"] = std::string("relu");
  l.weights["weight"] = w;
  l.weights["bias"] = Blob::allocate({oc});
  return l;
}

}  // namespace softneuro::bench
