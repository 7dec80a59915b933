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
#include "core/registry.hpp"
#include "support/run_layer.hpp"
#include "support/generated_cases.hpp"

#include <catch2/catch.hpp>

#include <fmt/format.h>

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
    const std::vector<test::GeneratedCase> cases = test::cases_for(type, rng);
    for (const std::string& d : descriptors) {
      Schema schema;
      const Routine* r = core::RoutineRegistry::instance().find(type, d, &schema);
      REQUIRE(r);
      int ran = 0;
      std::string refusals;
      for (const test::GeneratedCase& c : cases) {
        const std::string what = fmt::format("{} on {}", c.what, d);
        INFO(what);
        try {
          LayerInfo info;
          info.layer = &c.layer;
          for (const Blob& b : c.inputs) info.input_shapes.push_back(b.shape());
          info.output_shapes = core::infer_layer_shapes(c.layer, info.input_shapes);
          if (Support sup = r->supports(info, schema); !sup) {
            refusals += fmt::format("\n  {}: {}", c.what, sup.reason);
            continue;
          }
          const std::vector<Blob> want = test::run_layer(c.layer, as_seen_by(c.inputs, schema), "cpu/ref");
          for (const RoutineParams& params : param_combinations(r->param_space(info, schema))) {
            std::string why;
            auto got = run_on_device(c.layer, c.inputs, d, params, &why);
            if (!got) {
              refusals += fmt::format("\n  {} ({} parameters): {}", c.what, params.size(), why);
              continue;
            }
            REQUIRE(got->size() == want.size());
            for (std::size_t k = 0; k < want.size(); ++k)
              close((*got)[k], want[k], tolerance_for(schema, long_reductions.count(type) ? 20.0 : 1.0), what);
            ++compared;
            ++ran;
          }
        } catch (const std::exception& e) {
          FAIL_CHECK(what << ": " << e.what());
        }
      }
      if (refusals.size() > 1500) refusals = refusals.substr(0, 1500) + "\n  ...";
      // Like the CPU generator: a routine that runs no case fails until one is added.
      if (ran == 0) FAIL_CHECK(d << " (" << type << ") runs no generated case:" << refusals);
      else if (!refusals.empty()) WARN(d << " (" << type << ") ran " << ran << ", refused:" << refusals);
    }
  }
  CHECK(compared > 0);
  WARN(compared << " (routine, parameters, case) runs compared");
}
