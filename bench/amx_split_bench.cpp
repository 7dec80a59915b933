// amx_split_bench — what float32 products from bfloat16 AMX tiles could reach:
// each float32 value the sum of three bfloat16 parts (8 + 8 + 8 mantissa bits),
// a product the six part products above 2^-24 (Henry, Tang and Heinecke's
// bf16x6, float32's accuracy), against one bfloat16 product per value.
//
//   amx_split_bench [M K N]...     (default: BERT-base's dense layers at 128 rows)
//
// Prints the tile product alone (tiles in registers), then a GEMM of packed
// operands per shape at 1 and 2 threads: bf16 (one product) and bf16x6, in
// float32-equivalent GFLOP/s (2*M*K*N a second) to set beside ops_bench's
// float32 dense routines. Operands are packed ahead of the clock; no split or
// epilogue is timed, so these are upper bounds for such a routine.
// Kernel: 16 output columns by 32 rows a block, the three B parts of a step
// held in tiles, each A part loaded once and multiplied by the B parts it
// pairs with (9 tile loads per 12 products; plain bf16: 4 per 4).
#include "core/cpu_features.hpp"
#include "routines/cpu/tile_kernels.hpp"

#include <immintrin.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

/// Every tile 16 rows of 64 bytes (the routines' own configuration).
void configure() { softneuro::cpu::tile::configure_tiles(); }

double tile_product_rate() {
  configure();
  alignas(64) static uint16_t ones[512];
  std::fill(std::begin(ones), std::end(ones), uint16_t{0x3f80});
  _tile_loadd(4, ones, 64); _tile_loadd(5, ones, 64); _tile_loadd(6, ones, 64); _tile_loadd(7, ones, 64);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  const long n = 1'000'000;
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  _tile_release();
  return 4.0 * n * 16 * 16 * 32 * 2 / s * 1e-9;
}

struct Gemm {
  int64_t m, k, n;
  int parts;  // 1: bf16, 3: bf16x6
  std::vector<uint16_t> a, b;  // packed: A [strip][part][step][2 tiles], B [panel][step][part tile]
  std::vector<float> c;
  Gemm(int64_t m_, int64_t k_, int64_t n_, int parts_)
      : m(m_), k(k_), n(n_), parts(parts_), a(static_cast<std::size_t>(parts_ * m_ * k_), 0x3f80),
        b(static_cast<std::size_t>(parts_ * k_ * n_), 0x3c00), c(static_cast<std::size_t>(m_ * n_)) {}

  void panels(int64_t p0, int64_t p1) {
    const int64_t steps = k / 32, strips = m / 32;
    for (int64_t p = p0; p < p1; ++p) {
      const uint16_t* bp = b.data() + p * steps * parts * 512;
      for (int64_t st = 0; st < strips; ++st) {
        const uint16_t* ap = a.data() + st * parts * steps * 1024;
        _tile_zero(0); _tile_zero(1);
        for (int64_t ks = 0; ks < steps; ++ks) {
          const uint16_t* bs = bp + ks * parts * 512;
          auto at = [&](int part) { return ap + (part * steps + ks) * 1024; };
          _tile_loadd(3, bs, 64);
          _tile_loadd(6, at(0), 64); _tile_loadd(7, at(0) + 512, 64);
          _tile_dpbf16ps(0, 6, 3); _tile_dpbf16ps(1, 7, 3);
          if (parts == 1) continue;
          _tile_loadd(4, bs + 512, 64); _tile_loadd(5, bs + 1024, 64);
          _tile_dpbf16ps(0, 6, 4); _tile_dpbf16ps(1, 7, 4);
          _tile_dpbf16ps(0, 6, 5); _tile_dpbf16ps(1, 7, 5);
          _tile_loadd(6, at(1), 64); _tile_loadd(7, at(1) + 512, 64);
          _tile_dpbf16ps(0, 6, 3); _tile_dpbf16ps(1, 7, 3);
          _tile_dpbf16ps(0, 6, 4); _tile_dpbf16ps(1, 7, 4);
          _tile_loadd(6, at(2), 64); _tile_loadd(7, at(2) + 512, 64);
          _tile_dpbf16ps(0, 6, 3); _tile_dpbf16ps(1, 7, 3);
        }
        float* cp = c.data() + st * 32 * n + p * 16;
        _tile_stored(0, cp, n * 4); _tile_stored(1, cp + 16 * n, n * 4);
      }
    }
  }

  /// Fastest of 30 runs, seconds.
  double time(int threads) {
    double best = 1e30;
    const int64_t np = n / 16;
    for (int rep = 0; rep < 30; ++rep) {
      const auto t0 = Clock::now();
      std::vector<std::thread> team;
      for (int t = 1; t < threads; ++t)
        team.emplace_back([&, t] {
          configure();
          panels(np * t / threads, np * (t + 1) / threads);
          _tile_release();
        });
      configure();
      panels(0, np / threads);
      _tile_release();
      for (auto& th : team) th.join();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const auto& f = softneuro::core::cpu_features();
  if (!(f.amx_tile && f.amx_bf16) || !softneuro::core::amx_tiles_permitted()) {
    fmt::print("amx_split_bench: this CPU (or the operating system) gives no AMX-BF16 tiles\n");
    return 0;
  }
  std::vector<std::array<int64_t, 3>> shapes;
  for (int i = 1; i + 2 < argc; i += 3) shapes.push_back({std::atoll(argv[i]), std::atoll(argv[i + 1]), std::atoll(argv[i + 2])});
  if (shapes.empty()) shapes = {{128, 768, 768}, {128, 768, 3072}, {128, 3072, 768}};
  fmt::print("tile product alone (4 accumulators, one thread): {:.0f} bf16 GFLOP/s\n", tile_product_rate());
  fmt::print("{:<22} {:>10} {:>22} {:>22}\n", "M K N", "threads", "bf16 (1 product)", "bf16x6 (f32-equiv.)");
  for (auto [m, k, n] : shapes) {
    if (m % 32 || k % 32 || n % 32) {
      fmt::print("{} {} {}: M, K and N must be multiples of 32\n", m, k, n);
      continue;
    }
    Gemm one(m, k, n, 1), six(m, k, n, 3);
    for (int threads : {1, 2}) {
      const double flop = 2.0 * m * k * n;
      fmt::print("{:<22} {:>10} {:>17.0f} GF/s {:>17.0f} GF/s\n", fmt::format("{} {} {}", m, k, n), threads,
                 flop / one.time(threads) * 1e-9, flop / six.time(threads) * 1e-9);
    }
  }
  return 0;
}
