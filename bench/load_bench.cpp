// load_bench: how long a tuned .dnn takes from process start to the first run
// possible (issue 52, "instant load"): Model::load, Session creation (routines
// prepared, weights packed or reordered), the first run and a later run, in
// milliseconds. Each phase runs in a fresh process, so the file is read as an
// app reads it (page cache warm: run it twice and read the second).
//
//   build/load_bench FILE.dnn [threads=0]
#include <softneuro/softneuro.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace sn = softneuro;

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// MiB of this process's `field` in /proc/self/status (RssAnon: memory of its
/// own, weight copies included; RssFile: the mapped file's pages, shared).
double status_mib(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  double kb = 0;
  const std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') kb = std::strtod(line + n + 1, nullptr);
  std::fclose(f);
  return kb / 1024;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: load_bench FILE.dnn [threads]\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    sn::Model model = sn::Model::load(argv[1]);
    const double load_ms = ms_since(start);
    sn::SessionOptions options;
    options.threads = argc > 2 ? std::atoi(argv[2]) : 0;
    sn::Session session(model, options);
    const double session_ms = ms_since(start);
    std::vector<sn::NamedBlob> inputs;
    std::mt19937 rng(0);
    std::normal_distribution<float> normal;
    for (const auto& info : model.inputs()) {
      sn::Blob b = sn::Blob::allocate(model.input_shape(info.name));
      for (int64_t i = 0; i < b.numel(); ++i) b.data_as<float>()[i] = normal(rng);
      inputs.push_back({info.name, std::move(b)});
    }
    auto t = std::chrono::steady_clock::now();
    session.run(inputs);
    const double first_ms = ms_since(t);
    t = std::chrono::steady_clock::now();
    session.run(inputs);
    const double second_ms = ms_since(t);
    // A second session shares the first's derived weights: its creation is
    // what remains of session creation once no weight is transformed.
    t = std::chrono::steady_clock::now();
    sn::Session again(model, options);
    const double again_ms = ms_since(t);
    fmt::print(
        "load {:.1f} ms, session {:.1f} ms (to first run possible), first run {:.1f} ms, second run {:.1f} ms, "
        "a second session {:.1f} ms; resident: {:.0f} MiB own (RssAnon), {:.0f} MiB of the file (RssFile)\n",
        load_ms, session_ms - load_ms, first_ms, second_ms, again_ms, status_mib("RssAnon"), status_mib("RssFile"));
  } catch (const sn::Error& e) {
    fmt::print(stderr, "load_bench: {}\n", e.what());
    return 1;
  }
}
