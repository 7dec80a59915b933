// The TensorFlow Lite importer: verify, translate, fold, run the graph passes,
// prepare; then run the imported model once on a small zero input.
#include "fuzz_targets.hpp"

#include <softneuro/error.hpp>
#include <softneuro/import.hpp>
#include <softneuro/session.hpp>

namespace softneuro::fuzz {

int tflite_import(const uint8_t* data, std::size_t size) {
  const std::string path = write_scratch("model.tflite", data, size);
  try {
    run_once(softneuro::import_tflite(path));
  } catch (const softneuro::Error&) {
  }
  return 0;
}

}  // namespace softneuro::fuzz
