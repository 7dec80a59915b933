// cpu/eigen (dense) against cpu/ref: rows 1, 4, 7 and a rank-3 input (rows =
// product of the leading dimensions), odd K and O, every fused activation.
#include "routines/f32_check.hpp"

using namespace softneuro;
using namespace softneuro::test::f32;

TEST_CASE("eigen dense matches cpu/ref", "[eigen][dense]") {
  std::mt19937 rng(31);
  const char* acts[] = {"none", "relu", "clip", "hardswish", "hardsigmoid", "sigmoid"};
  for (int t = 0; t < 18; ++t) {
    const int64_t n = std::vector<int64_t>{1, 4, 7, 40}[static_cast<std::size_t>(t % 4)];
    const int64_t k = t == 5 ? 1500 : pick(rng, 1, 300), o = t == 6 ? 700 : pick(rng, 1, 90);
    std::map<std::string, Blob> weights{{"weight", random_blob({o, k}, rng)}};
    if (t % 4 != 3) weights["bias"] = random_blob({o}, rng);
    Layer l = test::make_layer("dense", {}, weights);
    set_act(l, acts[t % 6], rng);
    INFO("case " << t << ": n" << n << " k" << k << " o" << o << " act " << acts[t % 6]);
    const Shape in = t % 5 == 4 ? Shape{2, n, k} : Shape{n, k};
    if (!check_or_skip(l, {random_blob(in, rng)}, "cpu/eigen", {})) return;
  }
}
