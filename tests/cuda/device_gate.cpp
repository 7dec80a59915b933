// The CUDA backend's tests skip as a whole without a usable CUDA device: a
// listener ends the program with 77 before any test runs, which CTest reports
// as skipped (SKIP_RETURN_CODE; Catch2 v2 has no SKIP()). Catch2's main is the
// suite's one (catch2_main), compiled once for every test program.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include "routines/cuda/cuda_stats.hpp"

#include <softneuro/routine.hpp>

#include <cstdio>
#include <cstdlib>

namespace {
struct CudaDeviceGate : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(const Catch::TestRunInfo&) override {
    if (!softneuro::device_memory(softneuro::Device::cuda)) {
      std::printf("SKIPPED: no CUDA device: %s\n", softneuro::cuda::device_unavailable_reason().c_str());
      std::fflush(stdout);
      std::_Exit(77);
    }
    std::printf("CUDA device: %s\n", softneuro::cuda::device_description().c_str());
  }
};
}  // namespace

CATCH_REGISTER_LISTENER(CudaDeviceGate)
