// The generated cases of the routine tests: a few shapes and attribute sets
// per layer type, with random inputs and weights (support/generated_cases.cpp).
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/routine.hpp>

#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace softneuro::test {

struct GeneratedCase {
  std::string what;
  Layer layer;
  std::vector<Blob> inputs;
  /// The second input is a constant of the net (as an importer makes a divisor
  /// it knows), so the executor reads its values (core::makes_nan).
  bool constant_second = false;
};

/// The cases of a layer type (empty for a type without cases: a new layer
/// type needs some in support/generated_cases.cpp).
std::vector<GeneratedCase> cases_for(const std::string& type, std::mt19937& rng);

/// Whether the generators run a layer type's routines: not constant (bound to
/// its weight, never run), the Winograd children (run by cpu/winograd's
/// childnets, and alone in test_winograd.cpp), test_ or plan-time types.
bool generated(std::string_view type);

}  // namespace softneuro::test
