// The libFuzzer entry points of one harness: SOFTNEURO_FUZZ_TARGET names its target.
#include "fuzz_targets.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  softneuro::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  return softneuro::fuzz::SOFTNEURO_FUZZ_TARGET(data, size);
}
