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
#include <unistd.h>
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
    const int64_t units = (n + grain - 1) / grain;  // chunks start at multiples of grain
    const int team = static_cast<int>(std::min<int64_t>(threads, units));
    // A nested parallel_for (from inside a chunk) runs serially on its thread.
    if (team <= 1 || omp_in_parallel()) {
      fn(ctx, 0, n);
      return;
    }
    // One contiguous chunk per thread, the same one on every call: a layer run
    // again (or the next layer over the same rows) finds its data in the cache
    // of the core that touched it last. Dynamic chunks moved it between the
    // cores' L2 on every call: MobileNetV2's depthwise 960@7 ran 10 us at 2
    // threads against 11 us at one (oneDNN, which splits statically: 6 us).
#pragma omp parallel num_threads(team)
    {
      const int t = omp_get_thread_num(), size = omp_get_num_threads();
      const int64_t b = std::min(n, units * t / size * grain), e = std::min(n, units * (t + 1) / size * grain);
      if (b < e) fn(ctx, b, e);
    }
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

bool openmp_set_by_user() {
  for (const char* v : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"})
    if (std::getenv(v)) return true;
  return false;
}

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

// Measured at 2 threads on 2 cores:
//   quiet machine (load 1.1): MobileNetV2 2.8 ms with a short spin
//     (GOMP_SPINCOUNT=10000), 3.1 ms spinning (libgomp's default), 6.8 ms
//     passive (every parallel region wakes sleeping workers; on a VM a sleeping
//     vCPU can take most of a 0.7 ms conv to wake: ResNet50's 3x3 64->64 @56
//     direct ran 1.36 ms passive, 0.69 ms spinning, its 1-thread time 1.31);
//   busy machine (load 7.5): 55 ms with the short spin, 5 ms passive (a
//     spinning thread keeps its descheduled peer from finishing; ResNet50
//     took 1.2 s instead of 0.13 s with libgomp's default);
//   moderately loaded (load 1.5-1.7, a benchmark harness beside us): passive
//     made MobileNetV3-Small 6-14 ms against ONNX Runtime's 1.2 ms.
void choose_openmp_wait(char** argv) {
  if (core::openmp_set_by_user()) return;
  double load[1] = {0};
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const bool busy = getloadavg(load, 1) == 1 && load[0] >= static_cast<double>(std::max(1L, cpus));
  if (busy) setenv("OMP_WAIT_POLICY", "passive", 1);
  else setenv("GOMP_SPINCOUNT", "10000", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: run on as we are
}

}  // namespace softneuro
