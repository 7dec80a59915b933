// core_handoff_bench — what a step pays to read what the step before wrote on
// another core: one thread writes a buffer, then that thread (local) or
// another one (remote) reads it, GB/s of the read, medians over rounds.
//
//   core_handoff_bench [--sizes 256,480,1024 (KiB)] [--rounds 200]
//
// On a 2-vCPU AMX Xeon VM (2026-12-04): local 55-57 GB/s, remote 17-20. A net's
// step whose threads split its work unlike the step before reads part of its
// input at the remote rate (cpu:*:nhwc/depthwise's `split` parameter).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes_kib{256, 480, 1024};
  int rounds = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds") {
      rounds = std::max(1, std::atoi(argv[i + 1]));
    } else if (a == "--sizes") {
      sizes_kib.clear();
      for (const char* p = argv[i + 1]; *p;) {
        char* end = nullptr;
        const long v = std::strtol(p, &end, 10);
        if (end == p || v <= 0) break;
        sizes_kib.push_back(v);
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      fmt::print(stderr, "usage: core_handoff_bench [--sizes KIB,KIB,...] [--rounds N]\n");
      return 2;
    }
  }
  if (omp_get_max_threads() < 2) {
    fmt::print(stderr, "core_handoff_bench: needs 2 threads or more\n");
    return 2;
  }
  for (const int64_t kib : sizes_kib) {
    const std::size_t n = static_cast<std::size_t>(kib) * 1024 / sizeof(uint64_t);
    std::vector<uint64_t> buf(n, 1);
    std::vector<double> local, remote;
    uint64_t sink = 0;
    for (int r = 0; r < rounds; ++r)
      for (int reader = 0; reader < 2; ++reader) {
        double t = 0;
#pragma omp parallel num_threads(2) reduction(^ : sink)
        {
          const int me = omp_get_thread_num();
          if (me == 0)
            for (std::size_t i = 0; i < n; ++i) buf[i] = i + static_cast<std::size_t>(r);
#pragma omp barrier
          if (me == reader) {
            const double t0 = seconds();
            uint64_t x = 0;
            for (std::size_t i = 0; i < n; ++i) x ^= buf[i];
            t = seconds() - t0;
            sink ^= x;
          }
#pragma omp barrier
        }
        (reader == 0 ? local : remote).push_back(t);
      }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double bytes = static_cast<double>(n * sizeof(uint64_t));
    fmt::print("{:6} KiB  written by thread 0, read by thread 0: {:6.1f} GB/s, by thread 1: {:6.1f} GB/s{}\n", kib,
               bytes / median(local) / 1e9, bytes / median(remote) / 1e9, sink == 42 ? " " : "");
  }
  return 0;
}
