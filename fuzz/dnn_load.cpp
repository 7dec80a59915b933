// The .dnn loader: load from memory (header, flatbuffer, weights, the model verifier),
// prepare a session and run it once on a small zero input. The harness
// writes the file size and checksum the input's header should have, so that
// mutations reach the parts behind the checksum (an attacker recomputes it).
#include "fuzz_targets.hpp"

#include "core/hash.hpp"

#include <softneuro/error.hpp>

#include <cstring>
#include <vector>

namespace softneuro::fuzz {

int dnn_load(const uint8_t* data, std::size_t size) {
  std::vector<uint8_t> file(data, data + size);
  if (file.size() >= 64) {
    const uint64_t file_size = file.size();
    std::memcpy(file.data() + 48, &file_size, 8);
    const uint64_t sum = softneuro::core::xxh64(file.data() + 64, file.size() - 64, softneuro::core::xxh64(file.data(), 56));
    std::memcpy(file.data() + 56, &sum, 8);
  }
  try {
    run_once(softneuro::Model::load_bytes(file.data(), file.size(), "model.dnn"));
  } catch (const softneuro::Error&) {
  }
  return 0;
}

}  // namespace softneuro::fuzz
