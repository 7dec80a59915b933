// The library's one thread pool runs on OpenMP, the runtime oneDNN (Debian's
// build) already uses: a second set of worker threads beside libgomp's would
// spin against it, and on two loaded cores one team's spin-wait costs the
// other whole scheduler time slices (measured: 8-24 ms per conv at load 6-9).
// With one runtime, the same warm team serves our routines and oneDNN's.
#include "core/thread_pool.hpp"

#include <softneuro/error.hpp>
#include <softneuro/session.hpp>

#include <omp.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace softneuro::core {
namespace {

/// A session's own thread count on the thread running it (0: the library's).
thread_local int t_session_threads = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ContentionGuard& contention() {
  static ContentionGuard* g = [] {
    auto* guard = new ContentionGuard;  // never destroyed, as the pool
    if (const char* env = std::getenv("SOFTNEURO_CONTENTION_GUARD"); env && std::string(env) == "0") guard->set_enabled(false);
    return guard;
  }();
  return *g;
}

class Pool final : public ThreadPool {
 public:
  explicit Pool(int threads) { resize(threads); }

  int num_threads() const noexcept override {
    return t_session_threads > 0 ? t_session_threads : threads_.load(std::memory_order_relaxed);
  }

  void resize(int threads) { threads_.store(std::max(1, threads), std::memory_order_relaxed); }
  int library_threads() const noexcept { return threads_.load(std::memory_order_relaxed); }

 protected:
  void run_chunks(int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t), void* ctx) override {
    if (n <= 0) return;
    const int threads = num_threads();
    grain = std::max<int64_t>(1, grain);
    const int64_t units = (n + grain - 1) / grain;  // chunks start at multiples of grain
    const int team = static_cast<int>(std::min<int64_t>(threads, units));
    // A nested parallel_for (from inside a chunk) runs serially on its thread;
    // so does every region while other processes hold the CPUs (ContentionGuard).
    ContentionGuard& guard = contention();
    const int64_t entered = now_ns();
    if (team <= 1 || omp_in_parallel() || !guard.full_team(entered)) {
      fn(ctx, 0, n);
      return;
    }
    std::atomic<int64_t> latest_start{entered};
    // One contiguous chunk per thread, the same one on every call: a layer run
    // again (or the next layer over the same rows) finds its data in the cache
    // of the core that touched it last. Dynamic chunks moved it between the
    // cores' L2 on every call: MobileNetV2's depthwise 960@7 ran 10 us at 2
    // threads against 11 us at one (oneDNN, which splits statically: 6 us).
#pragma omp parallel num_threads(team)
    {
      const int t = omp_get_thread_num(), size = omp_get_num_threads();
      if (t > 0) {
        const int64_t started = now_ns();
        int64_t seen = latest_start.load(std::memory_order_relaxed);
        while (started > seen && !latest_start.compare_exchange_weak(seen, started, std::memory_order_relaxed)) {
        }
      }
      const int64_t b = std::min(n, units * t / size * grain), e = std::min(n, units * (t + 1) / size * grain);
      if (b < e) fn(ctx, b, e);
    }
    guard.record(latest_start.load(std::memory_order_relaxed) - entered, now_ns());
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
  std::vector<RunCondition> conditions;
  Pool pool{default_threads()};
};
State& state() {
  static State* s = new State;  // never destroyed: routines may run during static destruction
  return *s;
}

}  // namespace

bool ContentionGuard::full_team(int64_t now) const {
  return now >= degraded_until_.load(std::memory_order_relaxed);
}

void ContentionGuard::set_enabled(bool on) {
  std::lock_guard lock(mutex_);
  enabled_.store(on, std::memory_order_relaxed);
  degraded_until_.store(0, std::memory_order_relaxed);
  regions_ = stalls_ = 0;
  last_shrink_ns_ = 0;
  backoff_ns_ = kMinBackoffNs;
}

void ContentionGuard::record(int64_t lag_ns, int64_t now) {
  if (!enabled_.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(mutex_);
  if (now < degraded_until_.load(std::memory_order_relaxed)) return;  // a region begun before the team shrank
  if (regions_ == 0) window_start_ = now;
  ++regions_;
  if (lag_ns > kStallNs) ++stalls_;
  if (stalls_ >= kStallsToShrink) {
    // A probe that stalls again soon after the last shrink waits twice as long next time.
    backoff_ns_ = last_shrink_ns_ && now - last_shrink_ns_ < 2 * backoff_ns_ + kWindowNs ? std::min(2 * backoff_ns_, kMaxBackoffNs)
                                                                                           : kMinBackoffNs;
    last_shrink_ns_ = now;
    degraded_until_.store(now + backoff_ns_, std::memory_order_relaxed);
    ++shrinks_;
    regions_ = stalls_ = 0;
  } else if (regions_ >= kWindowRegions || now - window_start_ > kWindowNs) {
    regions_ = stalls_ = 0;
  }
}

int64_t ContentionGuard::shrinks() const {
  std::lock_guard lock(mutex_);
  return shrinks_;
}

ContentionGuard& contention_guard() { return contention(); }

ThreadPool& global_pool() { return state().pool; }
int library_threads() { return state().pool.library_threads(); }

}  // namespace softneuro::core

namespace softneuro {
int team_threads(const LayerInfo& info) {
  return std::max(1, info.threads > 0 ? info.threads : core::global_pool().num_threads());
}
}  // namespace softneuro

namespace softneuro::core {

void add_thread_count_hook(ThreadCountHook hook) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.hooks.push_back(hook);
  hook(s.pool.num_threads());
}

void add_run_condition(RunCondition condition) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.conditions.push_back(condition);
}

std::string run_conditions() {
  std::vector<RunCondition> conditions;
  {
    auto& s = state();
    std::lock_guard lock(s.mutex);
    conditions = s.conditions;
  }
  std::string all;
  for (RunCondition c : conditions)
    if (std::string name = c(); !name.empty()) all += (all.empty() ? "" : ",") + name;
  return all;
}

void require_startable_threads(int threads, const std::string& file, const std::string& field) {
  static std::mutex mutex;
  static int verified = 1;
  std::lock_guard lock(mutex);
  if (threads <= verified) return;
  // threads - 1 of ours alive at once (the caller is the team's first), with
  // the default stack libgomp's threads get too; then all released.
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  std::vector<std::thread> started;
  std::string failure;
  try {
    started.reserve(static_cast<std::size_t>(threads - 1));
    for (int k = 1; k < threads; ++k)
      started.emplace_back([&] {
        std::unique_lock l(m);
        cv.wait(l, [&] { return release; });
      });
  } catch (const std::system_error& e) {
    failure = e.what();
  } catch (const std::bad_alloc&) {
    failure = "out of memory";
  }
  {
    std::lock_guard l(m);
    release = true;
  }
  cv.notify_all();
  for (auto& t : started) t.join();
  if (!failure.empty())
    throw Error(fmt::format("{} threads cannot run at once in this process: thread {} could not start ({})", threads,
                            started.size() + 1, failure),
                file, {}, field);
  verified = threads;
}

SessionThreads::SessionThreads(int threads) : previous_(t_session_threads), previous_omp_(omp_get_max_threads()) {
  t_session_threads = threads > 0 ? threads : 0;
  // An empty region first: its workers' start lag tells the guard whether
  // other processes hold the CPUs, even for a model whose regions are all
  // oneDNN's (which the pool does not see). Microseconds on a quiet machine.
  if (global_pool().num_threads() > 1 && !omp_in_parallel() && contention().full_team(now_ns()))
    global_pool().parallel_for(global_pool().num_threads(), 1, [](int64_t, int64_t) {});
  // What oneDNN reads: one thread while other processes hold the CPUs (its
  // primitives split their work by it when they run).
  const int n = contention().full_team(now_ns()) ? global_pool().num_threads() : 1;
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

SessionThreads::~SessionThreads() {
  t_session_threads = previous_;
  if (omp_get_max_threads() != previous_omp_) omp_set_num_threads(previous_omp_);
}

}  // namespace softneuro::core

namespace softneuro {

void set_num_threads(int threads) {
  if (threads > 1) core::require_startable_threads(threads, {}, "threads");
  auto& s = core::state();
  std::lock_guard lock(s.mutex);
  s.pool.resize(threads < 1 ? core::default_threads() : threads);
  for (auto hook : s.hooks) hook(s.pool.num_threads());
}

int num_threads() { return core::global_pool().num_threads(); }

int64_t contention_shrinks() { return core::contention_guard().shrinks(); }

namespace {

/// libgomp's spin count as its constructor computes it from the environment
/// (libgomp/env.c: GOMP_SPINCOUNT wins, with k/M/G/T suffixes or "infinite";
/// else OMP_WAIT_POLICY: active 3e10, unset 300000, passive 0).
std::string wait_from_environment() {
  constexpr unsigned long long kInfinite = 30000000000ULL;
  unsigned long long spin = 300000;
  bool have_count = false;
  if (const char* c = std::getenv("GOMP_SPINCOUNT")) {
    std::string v(c);
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (v == "infinite" || v == "infinity") {
      spin = kInfinite, have_count = true;
    } else {
      char* end = nullptr;
      errno = 0;
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      unsigned long long mult = 1;
      if (end && *end) {
        const std::string suffix(end);
        mult = suffix == "k" ? 1000ULL : suffix == "m" ? 1000000ULL : suffix == "g" ? 1000000000ULL
             : suffix == "t" ? 1000000000000ULL : 0;
      }
      if (errno == 0 && end != v.c_str() && mult) spin = n * mult, have_count = true;
    }
  }
  if (!have_count)
    if (const char* p = std::getenv("OMP_WAIT_POLICY")) {
      std::string v(p);
      std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
      if (v == "passive") spin = 0;
      else if (v == "active") spin = kInfinite;
    }
  if (spin == 0) return "passive";
  if (spin >= kInfinite) return "active";
  return fmt::format("spin={}", spin);
}

// Read when the library loads, right after libgomp (a dependency) read the same variables.
const std::string g_openmp_wait = wait_from_environment();

}  // namespace

std::string openmp_wait() { return g_openmp_wait; }

}  // namespace softneuro
