// Main of the CUDA backend's tests. Without a usable CUDA device it runs
// nothing and exits 77, which CTest reports as skipped (SKIP_RETURN_CODE):
// Catch2 v2 has no SKIP().
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "routines/cuda/cuda_stats.hpp"

#include <softneuro/routine.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (!softneuro::device_memory(softneuro::Device::cuda)) {
    std::printf("SKIPPED: no CUDA device: %s\n", softneuro::cuda::device_unavailable_reason().c_str());
    return 77;
  }
  std::printf("CUDA device: %s\n", softneuro::cuda::device_description().c_str());
  return Catch::Session().run(argc, argv);
}
