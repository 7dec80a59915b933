// The .npy and .npz readers (inputs and calibration samples come as these).
#include "fuzz_targets.hpp"

#include <softneuro/error.hpp>
#include <softneuro/npy.hpp>

namespace softneuro::fuzz {

int npy_read(const uint8_t* data, std::size_t size) {
  // A zip archive (PK) is read as .npz, anything else as .npy.
  const bool npz = size >= 2 && data[0] == 'P' && data[1] == 'K';
  const std::string path = write_scratch(npz ? "a.npz" : "a.npy", data, size);
  try {
    if (npz)
      softneuro::load_npz(path);
    else
      softneuro::load_npy(path);
  } catch (const softneuro::Error&) {
  }
  return 0;
}

}  // namespace softneuro::fuzz
