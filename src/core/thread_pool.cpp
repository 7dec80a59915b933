// A fork-join pool: the caller thread takes part, workers sleep on a condition
// variable between jobs after a short spin (so back-to-back layers do not pay a
// wake-up, yet idle workers do not steal cycles from other libraries' threads).
#include "core/thread_pool.hpp"

#include <softneuro/net.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace softneuro::core {
namespace {

class Pool final : public ThreadPool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() override { stop(); }

  int num_threads() const noexcept override { return threads_; }

  void resize(int threads) {
    threads = std::max(1, threads);
    if (threads == threads_ && static_cast<int>(workers_.size()) == threads - 1) return;
    stop();
    threads_ = threads;
    quit_ = false;
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }

 protected:
  void run_chunks(int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t), void* ctx) override {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    // Aim for a few chunks per thread so uneven chunks balance out.
    int64_t chunk = std::max(grain, (n + threads_ * 4 - 1) / (threads_ * 4));
    int64_t chunks = (n + chunk - 1) / chunk;
    if (threads_ == 1 || chunks == 1 || in_job_) {
      fn(ctx, 0, n);  // nested parallel_for runs serially on the calling thread
      return;
    }
    std::lock_guard serial(submit_);  // one job at a time
    {
      std::unique_lock lock(mutex_);
      // A worker still holding the previous job (woken late) must leave first.
      while (active_ != 0) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      }
      job_ = {fn, ctx, n, chunk, chunks};
      next_.store(0, std::memory_order_relaxed);
      done_.store(0, std::memory_order_relaxed);
      ++generation_;
    }
    cv_.notify_all();
    in_job_ = true;
    drain(job_);
    in_job_ = false;
    // Return only when every chunk is done and no worker still reads the job.
    while (done_.load(std::memory_order_acquire) < chunks || active_count() != 0) std::this_thread::yield();
  }

 private:
  struct Job {
    void (*fn)(void*, int64_t, int64_t) = nullptr;
    void* ctx = nullptr;
    int64_t n = 0, chunk = 1, chunks = 0;
  };

  void drain(const Job& j) {
    for (int64_t c; (c = next_.fetch_add(1, std::memory_order_relaxed)) < j.chunks;) {
      int64_t b = c * j.chunk, e = std::min(j.n, b + j.chunk);
      j.fn(j.ctx, b, e);
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  void work() {
    uint64_t seen = 0;
    while (true) {
      // Spin briefly for the next job before sleeping.
      for (int i = 0; i < 20000 && generation_seen() == seen && !quit_.load(); ++i) std::this_thread::yield();
      Job job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return quit_.load() || generation_ != seen; });
        if (quit_.load()) return;
        seen = generation_.load();
        job = job_;  // copied under the lock; active_ keeps the next post waiting
        ++active_;
      }
      in_job_ = true;
      drain(job);
      in_job_ = false;
      std::lock_guard lock(mutex_);
      --active_;
    }
  }

  int active_count() {
    std::lock_guard lock(mutex_);
    return active_;
  }

  uint64_t generation_seen() const { return generation_.load(std::memory_order_acquire); }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  int threads_ = 0;
  std::vector<std::thread> workers_;
  std::mutex mutex_, submit_;
  std::condition_variable cv_;
  std::atomic<bool> quit_{false};
  std::atomic<uint64_t> generation_{0};
  int active_ = 0;
  Job job_;
  std::atomic<int64_t> next_{0}, done_{0};
  static thread_local bool in_job_;
};
thread_local bool Pool::in_job_ = false;

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
