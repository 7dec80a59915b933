// calibrate_bench — the time of softneuro::calibrate() on a model and samples
// of its inputs, with every range method (what a hybrid tuning's full
// calibration does), in rounds: median and spread.
//
//   calibrate_bench MODEL.dnn SAMPLES_DIR [--samples N] [--rounds R] [--threads T]
//
// The samples as `softneuro tune --calibration` reads them (load_samples).
#include <softneuro/calibrate.hpp>
#include <softneuro/error.hpp>
#include <softneuro/npy.hpp>
#include <softneuro/session.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

using namespace softneuro;

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: calibrate_bench MODEL.dnn SAMPLES_DIR [--samples N] [--rounds R] [--threads T]\n");
    return 2;
  }
  std::size_t samples = 40;
  int rounds = 3, threads = 0;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--samples") samples = std::strtoul(argv[i + 1], nullptr, 10);
    else if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    else {
      fmt::print(stderr, "calibrate_bench: unknown option {}\n", flag);
      return 2;
    }
  }
  try {
    if (threads > 0) set_num_threads(threads);
    const Model model = Model::load(argv[1]);
    std::vector<std::string> names;
    std::vector<DType> dtypes;
    for (const auto& t : model.inputs()) names.push_back(t.name), dtypes.push_back(t.dtype);
    CalibrationOptions o;
    o.inputs = load_samples(argv[2], names, 4096, dtypes);
    if (o.inputs.size() > samples) o.inputs.resize(samples);
    o.methods = {RangeMethod::minmax, RangeMethod::percentile, RangeMethod::mse, RangeMethod::entropy};
    std::vector<double> s;
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const Model calibrated = calibrate(model, o);
      s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      fmt::print("round {}: {:.2f} s\n", r + 1, s.back());
    }
    std::sort(s.begin(), s.end());
    fmt::print("{} samples, 4 range methods: median {:.2f} s (min {:.2f}, max {:.2f}) over {} rounds\n", o.inputs.size(),
               s[s.size() / 2], s.front(), s.back(), rounds);
  } catch (const Error& e) {
    fmt::print(stderr, "calibrate_bench: {}\n", e.what());
    return 1;
  }
}
