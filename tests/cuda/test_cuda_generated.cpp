// The routine test generator on the device: every CUDA routine (every schema it
// lists, every combination of its routine parameters: each cuDNN algorithm,
// each cuBLASLt heuristic) runs every generated case it supports
// (tests/support/generated_cases.cpp, the cases of the CPU routines' generator)
// against cpu/ref on the inputs its dtype sees (float16 schemas: inputs rounded
// to half first). Tolerances (cuda_harness.cpp, tolerance_for): float32
// 2e-5 x max|ref| + 1e-4 x |ref|, times 20 for convolutions, dense, matmul and
// the normalisations (long reductions; cuDNN's FFT and Winograd algorithms);
// float16 2e-2 x max|ref| + 2e-2 x |ref|.
#include "cuda_harness.hpp"

#include "core/layer_types.hpp"
#include "support/generated_cases.hpp"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <map>
#include <set>

using namespace softneuro;
using namespace softneuro::cudatest;

TEST_CASE("every CUDA routine matches cpu/ref on every generated case it supports", "[routines][generator]") {
  std::mt19937 rng(20261126);
  const std::set<std::string> long_reductions{"conv2", "deconv2", "dense", "matmul", "batchnorm", "layernorm", "softmax"};
  int compared = 0;
  for (const auto& type_info : core::layer_types()) {
    const std::string type(type_info.name);
    const std::vector<std::string> descriptors = cuda_descriptors(type);
    if (!test::generated(type) || descriptors.empty()) continue;
    std::map<std::string, RoutineTally> tally;
    for (const std::string& d : descriptors) tally[d];
    for (const test::GeneratedCase& c : test::cases_for(type, rng)) {
      INFO(c.what);
      try {
        compared += check_all_cuda_routines(c.layer, c.inputs, c.what, long_reductions.count(type) ? 20.0 : 1.0, &tally);
      } catch (const std::exception& e) {
        FAIL_CHECK(c.what << " (" << type << "): " << e.what());
      }
    }
    for (auto& [d, t] : tally) {
      if (t.refusals.size() > 1500) t.refusals = t.refusals.substr(0, 1500) + "\n  ...";
      // Like the CPU generator: a routine that runs no case fails until one is added.
      if (t.runs == 0) FAIL_CHECK(d << " (" << type << ") runs no generated case:" << t.refusals);
      else if (!t.refusals.empty()) WARN(d << " (" << type << ") ran " << t.runs << ", refused:" << t.refusals);
    }
  }
  CHECK(compared > 0);
  WARN(compared << " (routine, parameters, case) runs compared");
}
