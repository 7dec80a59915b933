// Load a model, run it on a constant image, print the best class.
#include <softneuro/softneuro.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: classify MODEL.dnn\n");
    return 2;
  }
  try {
    const softneuro::Model model = softneuro::Model::load(argv[1]);
    softneuro::Session session(model);
    const auto& in = model.inputs().at(0);
    std::vector<float> pixels(static_cast<std::size_t>(in.shape.numel()), 0.5f);
    // Zero-copy: the blob views our vector.
    std::vector<softneuro::NamedBlob> inputs{{in.name, softneuro::Blob::view(pixels.data(), in.shape)}};
    auto outputs = session.run(inputs);
    const softneuro::Blob& scores = outputs.at(0).blob;
    const float* p = scores.data_as<float>();
    auto best = std::max_element(p, p + scores.numel()) - p;
    std::printf("class %ld score %g\n", static_cast<long>(best), p[best]);
  } catch (const softneuro::Error& e) {
    std::fprintf(stderr, "classify: %s\n", e.what());
    return 1;
  }
  return 0;
}
