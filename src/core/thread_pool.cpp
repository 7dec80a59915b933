// The library's one thread pool runs on OpenMP, the runtime oneDNN (Debian's
// build) already uses: a second set of worker threads beside libgomp's would
// spin against it, and on two loaded cores one team's spin-wait costs the
// other whole scheduler time slices (measured: 8-24 ms per conv at load 6-9).
// With one runtime, the same warm team serves our routines and oneDNN's.
#include "core/thread_pool.hpp"

#include <softneuro/net.hpp>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace softneuro::core {
namespace {

class Pool final : public ThreadPool {
 public:
  explicit Pool(int threads) { resize(threads); }

  int num_threads() const noexcept override { return threads_.load(std::memory_order_relaxed); }

  void resize(int threads) { threads_.store(std::max(1, threads), std::memory_order_relaxed); }

 protected:
  void run_chunks(int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t), void* ctx) override {
    if (n <= 0) return;
    const int threads = num_threads();
    grain = std::max<int64_t>(1, grain);
    // Aim for a few chunks per thread so uneven chunks balance out.
    const int64_t chunk = std::max(grain, (n + threads * 4 - 1) / (threads * 4));
    const int64_t chunks = (n + chunk - 1) / chunk;
    // A nested parallel_for (from inside a chunk) runs serially on its thread.
    if (threads == 1 || chunks == 1 || omp_in_parallel()) {
      fn(ctx, 0, n);
      return;
    }
    const int team = static_cast<int>(std::min<int64_t>(threads, chunks));
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c * chunk, std::min(n, (c + 1) * chunk));
  }

 private:
  std::atomic<int> threads_{1};
};

int default_threads() {
  if (const char* env = std::getenv("SOFTNEURO_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

struct State {
  std::mutex mutex;
  std::vector<ThreadCountHook> hooks;
  Pool pool{default_threads()};
};
State& state() {
  static State* s = new State;  // never destroyed: routines may run during static destruction
  return *s;
}

}  // namespace

ThreadPool& global_pool() { return state().pool; }

void add_thread_count_hook(ThreadCountHook hook) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.hooks.push_back(hook);
  hook(s.pool.num_threads());
}

}  // namespace softneuro::core

namespace softneuro {

void set_num_threads(int threads) {
  auto& s = core::state();
  std::lock_guard lock(s.mutex);
  s.pool.resize(threads < 1 ? core::default_threads() : threads);
  for (auto hook : s.hooks) hook(s.pool.num_threads());
}

int num_threads() { return core::global_pool().num_threads(); }

}  // namespace softneuro
