// The pthreadpool API the library serves to XNNPACK (src/core/pthreadpool.cpp):
// every parallelize form visits each element of its range exactly once, in
// tiles of the requested size (the last one cut short), at 1 to 3 threads.
#include "core/thread_pool.hpp"

#include <softneuro/session.hpp>

#include <pthreadpool.h>

#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <vector>

using namespace softneuro;

namespace {

/// Counts visits per element of a up-to-6-d range; a task marks its tile.
struct Grid {
  std::array<size_t, 6> range{1, 1, 1, 1, 1, 1};
  std::array<size_t, 6> tile{1, 1, 1, 1, 1, 1};
  std::vector<std::atomic<int>> visits;
  std::atomic<int> bad_tiles{0};
  std::atomic<int> bad_uarch{0};

  Grid(std::array<size_t, 6> r, std::array<size_t, 6> t) : range(r), tile(t), visits(total()) {}
  size_t total() const {
    size_t n = 1;
    for (size_t r : range) n *= r;
    return n;
  }
  /// Marks [start, start + len) per dim; checks the tile's position and size.
  void mark(std::array<size_t, 6> start, std::array<size_t, 6> len) {
    for (int d = 0; d < 6; ++d) {
      const size_t want = std::min(tile[d], range[d] - start[d]);
      if (start[d] % tile[d] != 0 || len[d] != want) ++bad_tiles;
    }
    std::array<size_t, 6> i{};
    for (i[0] = start[0]; i[0] < start[0] + len[0]; ++i[0])
      for (i[1] = start[1]; i[1] < start[1] + len[1]; ++i[1])
        for (i[2] = start[2]; i[2] < start[2] + len[2]; ++i[2])
          for (i[3] = start[3]; i[3] < start[3] + len[3]; ++i[3])
            for (i[4] = start[4]; i[4] < start[4] + len[4]; ++i[4])
              for (i[5] = start[5]; i[5] < start[5] + len[5]; ++i[5]) {
                size_t x = 0;
                for (int d = 0; d < 6; ++d) x = x * range[d] + i[d];
                ++visits[x];
              }
  }
  bool each_once() const {
    for (const auto& v : visits)
      if (v.load() != 1) return false;
    return bad_tiles.load() == 0 && bad_uarch.load() == 0;
  }
};

Grid* G(void* c) { return static_cast<Grid*>(c); }
constexpr uint32_t kUarch = 7;

}  // namespace

TEST_CASE("the library's pthreadpool visits every element once, in the requested tiles", "[basics][threads]") {
  const int before = num_threads();
  const uint32_t flags = GENERATE(0u, static_cast<uint32_t>(PTHREADPOOL_FLAG_DISABLE_DENORMALS));
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    pthreadpool_t pool = pthreadpool_create(static_cast<size_t>(threads));
    REQUIRE(pool);
    CHECK(pthreadpool_get_threads_count(pool) == static_cast<size_t>(threads));
    const size_t a = 3, b = 5, c = 7, d = 2, e = 3, f = 4;
    INFO("threads " << threads << " flags " << flags);
    {
      Grid g({a * 11, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1});
      pthreadpool_parallelize_1d(pool, [](void* x, size_t i) { G(x)->mark({i, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}); }, &g,
                                 a * 11, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({29, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1});
      pthreadpool_parallelize_1d_with_uarch(
          pool,
          [](void* x, uint32_t u, size_t i) {
            if (u != kUarch) ++G(x)->bad_uarch;
            G(x)->mark({i, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1});
          },
          &g, kUarch, kUarch, 29, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({31, 1, 1, 1, 1, 1}, {4, 1, 1, 1, 1, 1});
      pthreadpool_parallelize_1d_tile_1d(
          pool, [](void* x, size_t i, size_t n) { G(x)->mark({i, 0, 0, 0, 0, 0}, {n, 1, 1, 1, 1, 1}); }, &g, 31, 4, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, b, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1});
      pthreadpool_parallelize_2d(
          pool, [](void* x, size_t i, size_t j) { G(x)->mark({i, j, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}); }, &g, a, b, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, 11, 1, 1, 1, 1}, {1, 3, 1, 1, 1, 1});
      pthreadpool_parallelize_2d_tile_1d(
          pool, [](void* x, size_t i, size_t j, size_t nj) { G(x)->mark({i, j, 0, 0, 0, 0}, {1, nj, 1, 1, 1, 1}); }, &g, a,
          11, 3, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({10, 11, 1, 1, 1, 1}, {4, 3, 1, 1, 1, 1});
      pthreadpool_parallelize_2d_tile_2d(
          pool,
          [](void* x, size_t i, size_t j, size_t ni, size_t nj) { G(x)->mark({i, j, 0, 0, 0, 0}, {ni, nj, 1, 1, 1, 1}); },
          &g, 10, 11, 4, 3, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({10, 11, 1, 1, 1, 1}, {4, 3, 1, 1, 1, 1});
      pthreadpool_parallelize_2d_tile_2d_with_uarch(
          pool,
          [](void* x, uint32_t u, size_t i, size_t j, size_t ni, size_t nj) {
            if (u != kUarch) ++G(x)->bad_uarch;
            G(x)->mark({i, j, 0, 0, 0, 0}, {ni, nj, 1, 1, 1, 1});
          },
          &g, kUarch, kUarch, 10, 11, 4, 3, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, b, c, 1, 1, 1}, {1, 1, 1, 1, 1, 1});
      pthreadpool_parallelize_3d(
          pool, [](void* x, size_t i, size_t j, size_t k) { G(x)->mark({i, j, k, 0, 0, 0}, {1, 1, 1, 1, 1, 1}); }, &g, a, b,
          c, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, b, 11, 1, 1, 1}, {1, 1, 4, 1, 1, 1});
      pthreadpool_parallelize_3d_tile_1d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t nk) { G(x)->mark({i, j, k, 0, 0, 0}, {1, 1, nk, 1, 1, 1}); }, &g,
          a, b, 11, 4, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, 7, 11, 1, 1, 1}, {1, 2, 4, 1, 1, 1});
      pthreadpool_parallelize_3d_tile_2d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t nj, size_t nk) {
            G(x)->mark({i, j, k, 0, 0, 0}, {1, nj, nk, 1, 1, 1});
          },
          &g, a, 7, 11, 2, 4, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, 7, 11, 1, 1, 1}, {1, 2, 4, 1, 1, 1});
      pthreadpool_parallelize_3d_tile_2d_with_uarch(
          pool,
          [](void* x, uint32_t u, size_t i, size_t j, size_t k, size_t nj, size_t nk) {
            if (u != kUarch) ++G(x)->bad_uarch;
            G(x)->mark({i, j, k, 0, 0, 0}, {1, nj, nk, 1, 1, 1});
          },
          &g, kUarch, kUarch, a, 7, 11, 2, 4, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, b, d, e, 1, 1}, {1, 1, 1, 1, 1, 1});
      pthreadpool_parallelize_4d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t l) { G(x)->mark({i, j, k, l, 0, 0}, {1, 1, 1, 1, 1, 1}); }, &g,
          a, b, d, e, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, b, d, 9, 1, 1}, {1, 1, 1, 4, 1, 1});
      pthreadpool_parallelize_4d_tile_1d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t l, size_t nl) {
            G(x)->mark({i, j, k, l, 0, 0}, {1, 1, 1, nl, 1, 1});
          },
          &g, a, b, d, 9, 4, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, d, 5, 9, 1, 1}, {1, 1, 2, 4, 1, 1});
      pthreadpool_parallelize_4d_tile_2d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t l, size_t nk, size_t nl) {
            G(x)->mark({i, j, k, l, 0, 0}, {1, 1, nk, nl, 1, 1});
          },
          &g, a, d, 5, 9, 2, 4, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, d, 5, 9, 1, 1}, {1, 1, 2, 4, 1, 1});
      pthreadpool_parallelize_4d_tile_2d_with_uarch(
          pool,
          [](void* x, uint32_t u, size_t i, size_t j, size_t k, size_t l, size_t nk, size_t nl) {
            if (u != kUarch) ++G(x)->bad_uarch;
            G(x)->mark({i, j, k, l, 0, 0}, {1, 1, nk, nl, 1, 1});
          },
          &g, kUarch, kUarch, a, d, 5, 9, 2, 4, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, d, e, d, f, 1}, {1, 1, 1, 1, 1, 1});
      pthreadpool_parallelize_5d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t l, size_t m) {
            G(x)->mark({i, j, k, l, m, 0}, {1, 1, 1, 1, 1, 1});
          },
          &g, a, d, e, d, f, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, d, e, d, 7, 1}, {1, 1, 1, 1, 3, 1});
      pthreadpool_parallelize_5d_tile_1d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t l, size_t m, size_t nm) {
            G(x)->mark({i, j, k, l, m, 0}, {1, 1, 1, 1, nm, 1});
          },
          &g, a, d, e, d, 7, 3, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, d, e, 5, 7, 1}, {1, 1, 1, 2, 3, 1});
      pthreadpool_parallelize_5d_tile_2d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t l, size_t m, size_t nl, size_t nm) {
            G(x)->mark({i, j, k, l, m, 0}, {1, 1, 1, nl, nm, 1});
          },
          &g, a, d, e, 5, 7, 2, 3, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, d, e, d, e, d}, {1, 1, 1, 1, 1, 1});
      pthreadpool_parallelize_6d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t l, size_t m, size_t n) {
            G(x)->mark({i, j, k, l, m, n}, {1, 1, 1, 1, 1, 1});
          },
          &g, a, d, e, d, e, d, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, d, e, d, e, 7}, {1, 1, 1, 1, 1, 3});
      pthreadpool_parallelize_6d_tile_1d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t l, size_t m, size_t n, size_t nn) {
            G(x)->mark({i, j, k, l, m, n}, {1, 1, 1, 1, 1, nn});
          },
          &g, a, d, e, d, e, 7, 3, flags);
      CHECK(g.each_once());
    }
    {
      Grid g({a, d, e, d, 5, 7}, {1, 1, 1, 1, 2, 3});
      pthreadpool_parallelize_6d_tile_2d(
          pool,
          [](void* x, size_t i, size_t j, size_t k, size_t l, size_t m, size_t n, size_t nm, size_t nn) {
            G(x)->mark({i, j, k, l, m, n}, {1, 1, 1, 1, nm, nn});
          },
          &g, a, d, e, d, 5, 7, 2, 3, flags);
      CHECK(g.each_once());
    }
    // Empty ranges call nothing; a null pool runs on the caller.
    {
      Grid g({1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1});
      pthreadpool_parallelize_2d(pool, [](void* x, size_t, size_t) { ++G(x)->bad_tiles; }, &g, 0, 5, flags);
      CHECK(g.bad_tiles.load() == 0);
      Grid h({6, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1});
      pthreadpool_parallelize_1d(nullptr, [](void* x, size_t i) { G(x)->mark({i, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}); },
                                 &h, 6, flags);
      CHECK(h.each_once());
    }
    pthreadpool_destroy(pool);
  }
  set_num_threads(before);
}
