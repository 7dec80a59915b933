// The pthreadpool API (XNNPACK's thread runtime) on the library's one OpenMP
// team, so XNNPACK layers run on the same threads as oneDNN and our routines.
//
// Debian ships XNNPACK only as a shared library that needs libpthreadpool.so.0.
// Our library exports every function of pthreadpool.h and does not link
// libpthreadpool itself: the dynamic linker searches libsoftneuro before the
// libpthreadpool that XNNPACK pulls in, so XNNPACK's calls land here (as
// PyTorch serves its XNNPACK from its own pthreadpool implementation). Where
// XNNPACK was loaded and bound before us (a Python process that imported
// PyTorch first), its calls reach the real libpthreadpool: cpu/xnnpack checks
// where they land before it hands XNNPACK one of our pool handles. A
// second pool of workers spinning or sleeping beside OpenMP's made mixed
// oneDNN/XNNPACK paths depend on two runtimes' waits: a tuned demo that
// measured 0.75 ms ran at 0.9-2.7 ms on a 2-core EPYC.
//
// Every pool handle runs its loops on the library's team (set_num_threads);
// pthreadpool_get_threads_count still answers the count the pool was created
// with, which XNNPACK uses to size its tiles. PTHREADPOOL_FLAG_YIELD_WORKERS is
// moot (idle threads wait as libgomp's policy says); DISABLE_DENORMALS is
// honoured on every thread for the duration of the loop.
#include "core/thread_pool.hpp"

#include <pthreadpool.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <new>
#include <thread>

struct pthreadpool {
  size_t threads;
};

namespace softneuro::core {
namespace {

/// Loops this thread started through the API (whichever pool ran them).
thread_local uint64_t t_loops = 0;

/// Denormals flushed to zero (pthreadpool's PTHREADPOOL_FLAG_DISABLE_DENORMALS)
/// while a chunk runs: returns the control register to restore.
uint64_t flush_denormals() {
#if defined(__x86_64__)
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040);  // FTZ | DAZ
  return csr;
#elif defined(__aarch64__)
  uint64_t fpcr = 0;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (uint64_t{1} << 24)));  // FZ
  return fpcr;
#else
  return 0;
#endif
}
void restore_denormals(uint64_t saved) {
#if defined(__x86_64__)
  _mm_setcsr(static_cast<unsigned>(saved));
#elif defined(__aarch64__)
  __asm__ volatile("msr fpcr, %0" : : "r"(saved));
#else
  (void)saved;
#endif
}

/// Runs body(linear index) for every index in [0, n) on the team, in static
/// contiguous chunks (the same split our own routines use).
template <class Body>
void run_loop(pthreadpool_t pool, size_t n, uint32_t flags, Body&& body) {
  if (n == 0) return;
  ++t_loops;
  auto chunk = [&](int64_t b, int64_t e) {
    const bool ftz = flags & PTHREADPOOL_FLAG_DISABLE_DENORMALS;
    const uint64_t saved = ftz ? flush_denormals() : 0;
    for (int64_t i = b; i < e; ++i) body(static_cast<size_t>(i));
    if (ftz) restore_denormals(saved);
  };
  if (!pool) {  // pthreadpool's contract: a null pool runs on the caller
    chunk(0, static_cast<int64_t>(n));
    return;
  }
  global_pool().parallel_for(static_cast<int64_t>(n), 1, chunk);
}

size_t tiles(size_t range, size_t tile) { return tile == 0 ? 0 : (range + tile - 1) / tile; }

}  // namespace

uint64_t pthreadpool_loops() { return t_loops; }

}  // namespace softneuro::core

using softneuro::core::run_loop;
using softneuro::core::tiles;

extern "C" {

#define SN_EXPORT __attribute__((visibility("default")))

SN_EXPORT pthreadpool_t pthreadpool_create(size_t threads_count) {
  if (threads_count == 0) threads_count = std::max(1u, std::thread::hardware_concurrency());
  return new (std::nothrow) pthreadpool{threads_count};
}

SN_EXPORT void pthreadpool_destroy(pthreadpool_t pool) { delete pool; }

SN_EXPORT size_t pthreadpool_get_threads_count(pthreadpool_t pool) { return pool ? pool->threads : 1; }

SN_EXPORT void pthreadpool_parallelize_1d(pthreadpool_t pool, pthreadpool_task_1d_t f, void* c, size_t r, uint32_t flags) {
  run_loop(pool, r, flags, [&](size_t i) { f(c, i); });
}

SN_EXPORT void pthreadpool_parallelize_1d_with_uarch(pthreadpool_t pool, pthreadpool_task_1d_with_id_t f, void* c,
                                                     uint32_t default_uarch, uint32_t, size_t r, uint32_t flags) {
  run_loop(pool, r, flags, [&](size_t i) { f(c, default_uarch, i); });
}

SN_EXPORT void pthreadpool_parallelize_1d_tile_1d(pthreadpool_t pool, pthreadpool_task_1d_tile_1d_t f, void* c, size_t r,
                                                  size_t t, uint32_t flags) {
  run_loop(pool, tiles(r, t), flags, [&](size_t i) { f(c, i * t, std::min(t, r - i * t)); });
}

SN_EXPORT void pthreadpool_parallelize_2d(pthreadpool_t pool, pthreadpool_task_2d_t f, void* c, size_t ri, size_t rj,
                                          uint32_t flags) {
  run_loop(pool, ri * rj, flags, [&](size_t x) { f(c, x / rj, x % rj); });
}

SN_EXPORT void pthreadpool_parallelize_2d_tile_1d(pthreadpool_t pool, pthreadpool_task_2d_tile_1d_t f, void* c, size_t ri,
                                                  size_t rj, size_t tj, uint32_t flags) {
  const size_t nj = tiles(rj, tj);
  run_loop(pool, ri * nj, flags, [&](size_t x) {
    const size_t j = x % nj * tj;
    f(c, x / nj, j, std::min(tj, rj - j));
  });
}

SN_EXPORT void pthreadpool_parallelize_2d_tile_2d(pthreadpool_t pool, pthreadpool_task_2d_tile_2d_t f, void* c, size_t ri,
                                                  size_t rj, size_t ti, size_t tj, uint32_t flags) {
  const size_t ni = tiles(ri, ti), nj = tiles(rj, tj);
  run_loop(pool, ni * nj, flags, [&](size_t x) {
    const size_t i = x / nj * ti, j = x % nj * tj;
    f(c, i, j, std::min(ti, ri - i), std::min(tj, rj - j));
  });
}

SN_EXPORT void pthreadpool_parallelize_2d_tile_2d_with_uarch(pthreadpool_t pool, pthreadpool_task_2d_tile_2d_with_id_t f,
                                                             void* c, uint32_t default_uarch, uint32_t, size_t ri, size_t rj,
                                                             size_t ti, size_t tj, uint32_t flags) {
  const size_t ni = tiles(ri, ti), nj = tiles(rj, tj);
  run_loop(pool, ni * nj, flags, [&](size_t x) {
    const size_t i = x / nj * ti, j = x % nj * tj;
    f(c, default_uarch, i, j, std::min(ti, ri - i), std::min(tj, rj - j));
  });
}

SN_EXPORT void pthreadpool_parallelize_3d(pthreadpool_t pool, pthreadpool_task_3d_t f, void* c, size_t ri, size_t rj,
                                          size_t rk, uint32_t flags) {
  run_loop(pool, ri * rj * rk, flags, [&](size_t x) { f(c, x / (rj * rk), x / rk % rj, x % rk); });
}

SN_EXPORT void pthreadpool_parallelize_3d_tile_1d(pthreadpool_t pool, pthreadpool_task_3d_tile_1d_t f, void* c, size_t ri,
                                                  size_t rj, size_t rk, size_t tk, uint32_t flags) {
  const size_t nk = tiles(rk, tk);
  run_loop(pool, ri * rj * nk, flags, [&](size_t x) {
    const size_t k = x % nk * tk;
    f(c, x / (rj * nk), x / nk % rj, k, std::min(tk, rk - k));
  });
}

SN_EXPORT void pthreadpool_parallelize_3d_tile_2d(pthreadpool_t pool, pthreadpool_task_3d_tile_2d_t f, void* c, size_t ri,
                                                  size_t rj, size_t rk, size_t tj, size_t tk, uint32_t flags) {
  const size_t nj = tiles(rj, tj), nk = tiles(rk, tk);
  run_loop(pool, ri * nj * nk, flags, [&](size_t x) {
    const size_t j = x / nk % nj * tj, k = x % nk * tk;
    f(c, x / (nj * nk), j, k, std::min(tj, rj - j), std::min(tk, rk - k));
  });
}

SN_EXPORT void pthreadpool_parallelize_3d_tile_2d_with_uarch(pthreadpool_t pool, pthreadpool_task_3d_tile_2d_with_id_t f,
                                                             void* c, uint32_t default_uarch, uint32_t, size_t ri, size_t rj,
                                                             size_t rk, size_t tj, size_t tk, uint32_t flags) {
  const size_t nj = tiles(rj, tj), nk = tiles(rk, tk);
  run_loop(pool, ri * nj * nk, flags, [&](size_t x) {
    const size_t j = x / nk % nj * tj, k = x % nk * tk;
    f(c, default_uarch, x / (nj * nk), j, k, std::min(tj, rj - j), std::min(tk, rk - k));
  });
}

SN_EXPORT void pthreadpool_parallelize_4d(pthreadpool_t pool, pthreadpool_task_4d_t f, void* c, size_t ri, size_t rj,
                                          size_t rk, size_t rl, uint32_t flags) {
  run_loop(pool, ri * rj * rk * rl, flags,
           [&](size_t x) { f(c, x / (rj * rk * rl), x / (rk * rl) % rj, x / rl % rk, x % rl); });
}

SN_EXPORT void pthreadpool_parallelize_4d_tile_1d(pthreadpool_t pool, pthreadpool_task_4d_tile_1d_t f, void* c, size_t ri,
                                                  size_t rj, size_t rk, size_t rl, size_t tl, uint32_t flags) {
  const size_t nl = tiles(rl, tl);
  run_loop(pool, ri * rj * rk * nl, flags, [&](size_t x) {
    const size_t l = x % nl * tl;
    f(c, x / (rj * rk * nl), x / (rk * nl) % rj, x / nl % rk, l, std::min(tl, rl - l));
  });
}

SN_EXPORT void pthreadpool_parallelize_4d_tile_2d(pthreadpool_t pool, pthreadpool_task_4d_tile_2d_t f, void* c, size_t ri,
                                                  size_t rj, size_t rk, size_t rl, size_t tk, size_t tl, uint32_t flags) {
  const size_t nk = tiles(rk, tk), nl = tiles(rl, tl);
  run_loop(pool, ri * rj * nk * nl, flags, [&](size_t x) {
    const size_t k = x / nl % nk * tk, l = x % nl * tl;
    f(c, x / (rj * nk * nl), x / (nk * nl) % rj, k, l, std::min(tk, rk - k), std::min(tl, rl - l));
  });
}

SN_EXPORT void pthreadpool_parallelize_4d_tile_2d_with_uarch(pthreadpool_t pool, pthreadpool_task_4d_tile_2d_with_id_t f,
                                                             void* c, uint32_t default_uarch, uint32_t, size_t ri, size_t rj,
                                                             size_t rk, size_t rl, size_t tk, size_t tl, uint32_t flags) {
  const size_t nk = tiles(rk, tk), nl = tiles(rl, tl);
  run_loop(pool, ri * rj * nk * nl, flags, [&](size_t x) {
    const size_t k = x / nl % nk * tk, l = x % nl * tl;
    f(c, default_uarch, x / (rj * nk * nl), x / (nk * nl) % rj, k, l, std::min(tk, rk - k), std::min(tl, rl - l));
  });
}

SN_EXPORT void pthreadpool_parallelize_5d(pthreadpool_t pool, pthreadpool_task_5d_t f, void* c, size_t ri, size_t rj,
                                          size_t rk, size_t rl, size_t rm, uint32_t flags) {
  run_loop(pool, ri * rj * rk * rl * rm, flags, [&](size_t x) {
    f(c, x / (rj * rk * rl * rm), x / (rk * rl * rm) % rj, x / (rl * rm) % rk, x / rm % rl, x % rm);
  });
}

SN_EXPORT void pthreadpool_parallelize_5d_tile_1d(pthreadpool_t pool, pthreadpool_task_5d_tile_1d_t f, void* c, size_t ri,
                                                  size_t rj, size_t rk, size_t rl, size_t rm, size_t tm, uint32_t flags) {
  const size_t nm = tiles(rm, tm);
  run_loop(pool, ri * rj * rk * rl * nm, flags, [&](size_t x) {
    const size_t m = x % nm * tm;
    f(c, x / (rj * rk * rl * nm), x / (rk * rl * nm) % rj, x / (rl * nm) % rk, x / nm % rl, m, std::min(tm, rm - m));
  });
}

SN_EXPORT void pthreadpool_parallelize_5d_tile_2d(pthreadpool_t pool, pthreadpool_task_5d_tile_2d_t f, void* c, size_t ri,
                                                  size_t rj, size_t rk, size_t rl, size_t rm, size_t tl, size_t tm,
                                                  uint32_t flags) {
  const size_t nl = tiles(rl, tl), nm = tiles(rm, tm);
  run_loop(pool, ri * rj * rk * nl * nm, flags, [&](size_t x) {
    const size_t l = x / nm % nl * tl, m = x % nm * tm;
    f(c, x / (rj * rk * nl * nm), x / (rk * nl * nm) % rj, x / (nl * nm) % rk, l, m, std::min(tl, rl - l),
      std::min(tm, rm - m));
  });
}

SN_EXPORT void pthreadpool_parallelize_6d(pthreadpool_t pool, pthreadpool_task_6d_t f, void* c, size_t ri, size_t rj,
                                          size_t rk, size_t rl, size_t rm, size_t rn, uint32_t flags) {
  run_loop(pool, ri * rj * rk * rl * rm * rn, flags, [&](size_t x) {
    f(c, x / (rj * rk * rl * rm * rn), x / (rk * rl * rm * rn) % rj, x / (rl * rm * rn) % rk, x / (rm * rn) % rl,
      x / rn % rm, x % rn);
  });
}

SN_EXPORT void pthreadpool_parallelize_6d_tile_1d(pthreadpool_t pool, pthreadpool_task_6d_tile_1d_t f, void* c, size_t ri,
                                                  size_t rj, size_t rk, size_t rl, size_t rm, size_t rn, size_t tn,
                                                  uint32_t flags) {
  const size_t nn = tiles(rn, tn);
  run_loop(pool, ri * rj * rk * rl * rm * nn, flags, [&](size_t x) {
    const size_t n = x % nn * tn;
    f(c, x / (rj * rk * rl * rm * nn), x / (rk * rl * rm * nn) % rj, x / (rl * rm * nn) % rk, x / (rm * nn) % rl,
      x / nn % rm, n, std::min(tn, rn - n));
  });
}

SN_EXPORT void pthreadpool_parallelize_6d_tile_2d(pthreadpool_t pool, pthreadpool_task_6d_tile_2d_t f, void* c, size_t ri,
                                                  size_t rj, size_t rk, size_t rl, size_t rm, size_t rn, size_t tm,
                                                  size_t tn, uint32_t flags) {
  const size_t nm = tiles(rm, tm), nn = tiles(rn, tn);
  run_loop(pool, ri * rj * rk * rl * nm * nn, flags, [&](size_t x) {
    const size_t m = x / nn % nm * tm, n = x % nn * tn;
    f(c, x / (rj * rk * rl * nm * nn), x / (rk * rl * nm * nn) % rj, x / (rl * nm * nn) % rk, x / (nm * nn) % rl, m, n,
      std::min(tm, rm - m), std::min(tn, rn - n));
  });
}

// The deprecated first API, still exported by libpthreadpool: served too, so
// that every caller in the process sees one implementation.
SN_EXPORT void pthreadpool_compute_1d(pthreadpool_t pool, pthreadpool_function_1d_t f, void* c, size_t r) {
  pthreadpool_parallelize_1d(pool, f, c, r, 0);
}

SN_EXPORT void pthreadpool_compute_1d_tiled(pthreadpool_t pool, pthreadpool_function_1d_tiled_t f, void* c, size_t r,
                                            size_t t) {
  pthreadpool_parallelize_1d_tile_1d(pool, f, c, r, t, 0);
}

SN_EXPORT void pthreadpool_compute_2d(pthreadpool_t pool, pthreadpool_function_2d_t f, void* c, size_t ri, size_t rj) {
  pthreadpool_parallelize_2d(pool, f, c, ri, rj, 0);
}

SN_EXPORT void pthreadpool_compute_2d_tiled(pthreadpool_t pool, pthreadpool_function_2d_tiled_t f, void* c, size_t ri,
                                            size_t rj, size_t ti, size_t tj) {
  pthreadpool_parallelize_2d_tile_2d(pool, f, c, ri, rj, ti, tj, 0);
}

SN_EXPORT void pthreadpool_compute_3d_tiled(pthreadpool_t pool, pthreadpool_function_3d_tiled_t f, void* c, size_t ri,
                                            size_t rj, size_t rk, size_t ti, size_t tj, size_t tk) {
  const size_t ni = tiles(ri, ti), nj = tiles(rj, tj), nk = tiles(rk, tk);
  run_loop(pool, ni * nj * nk, 0, [&](size_t x) {
    const size_t i = x / (nj * nk) * ti, j = x / nk % nj * tj, k = x % nk * tk;
    f(c, i, j, k, std::min(ti, ri - i), std::min(tj, rj - j), std::min(tk, rk - k));
  });
}

SN_EXPORT void pthreadpool_compute_4d_tiled(pthreadpool_t pool, pthreadpool_function_4d_tiled_t f, void* c, size_t ri,
                                            size_t rj, size_t rk, size_t rl, size_t ti, size_t tj, size_t tk, size_t tl) {
  const size_t ni = tiles(ri, ti), nj = tiles(rj, tj), nk = tiles(rk, tk), nl = tiles(rl, tl);
  run_loop(pool, ni * nj * nk * nl, 0, [&](size_t x) {
    const size_t i = x / (nj * nk * nl) * ti, j = x / (nk * nl) % nj * tj, k = x / nl % nk * tk, l = x % nl * tl;
    f(c, i, j, k, l, std::min(ti, ri - i), std::min(tj, rj - j), std::min(tk, rk - k), std::min(tl, rl - l));
  });
}

}  // extern "C"
