// The library's one thread pool, and the one thread-count setting that also
// reaches every wrapped library (through hooks those routines register).
#pragma once

#include <softneuro/routine.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace softneuro::core {

/// The pool every routine runs on. Sized by set_num_threads (default: all cores).
ThreadPool& global_pool();
/// The library's thread count (set_num_threads), whatever session's team the
/// calling thread runs (global_pool().num_threads() gives that team's).
int library_threads();

/// Steady under contention: where other processes hold the CPUs, a parallel
/// region's workers start late (a scheduler slice, milliseconds, instead of
/// microseconds) and the team waits for them while they wait for a CPU. The
/// pool measures each region's worker start lag; after kStallsToShrink stalls
/// (lag above kStallNs) within a window, regions run on the calling thread
/// alone for a while (kMinBackoffNs), then the whole team is tried again; a
/// probe that stalls again soon doubles the wait (up to kMaxBackoffNs). Idle
/// workers then sleep instead of spinning against the busy machine. oneDNN's
/// team follows it at each session run (SessionThreads). One per process: the
/// machine's load is the same for every session.
class ContentionGuard {
 public:
  static constexpr int64_t kStallNs = 1'000'000;
  static constexpr int kStallsToShrink = 2;
  static constexpr int kWindowRegions = 64;
  static constexpr int64_t kWindowNs = 200'000'000;
  static constexpr int64_t kMinBackoffNs = 100'000'000;
  static constexpr int64_t kMaxBackoffNs = 1'600'000'000;

  /// Whether a region beginning at `now_ns` (steady clock) may use its whole team.
  bool full_team(int64_t now_ns) const;
  /// A whole-team region ended at `now_ns`; its last worker started `lag_ns` after it began.
  void record(int64_t lag_ns, int64_t now_ns);
  /// Times the team shrank so far.
  int64_t shrinks() const;
  /// Off: every region uses its whole team (tests of the team's chunks;
  /// SOFTNEURO_CONTENTION_GUARD=0 in the environment). Clears the state.
  void set_enabled(bool on);

 private:
  std::atomic<bool> enabled_{true};
  mutable std::mutex mutex_;
  std::atomic<int64_t> degraded_until_{0};
  int64_t window_start_ = 0, last_shrink_ns_ = 0, backoff_ns_ = kMinBackoffNs, shrinks_ = 0;
  int regions_ = 0, stalls_ = 0;
};
/// The process's guard (the pool's).
ContentionGuard& contention_guard();

/// While alive, on the calling thread only: the pool's team (and OpenMP's, which
/// oneDNN reads) has `threads` threads (a session's own count; 0: the library's).
/// Sessions in several threads so run side by side, each on its own team.
class SessionThreads {
 public:
  explicit SessionThreads(int threads);
  ~SessionThreads();
  SessionThreads(const SessionThreads&) = delete;
  SessionThreads& operator=(const SessionThreads&) = delete;

 private:
  int previous_, previous_omp_;
};

/// Throws softneuro::Error (naming `file` and `field`) where `threads` threads
/// cannot run at once in this process: libgomp ends the process when it cannot
/// start a team's thread, so a count is tried with threads of our own first
/// (once per new largest count).
void require_startable_threads(int threads, const std::string& file, const std::string& field);

/// Called with the new thread count whenever it changes (and once at
/// registration), so wrapped libraries (oneDNN, XNNPACK, Eigen) follow it.
using ThreadCountHook = void (*)(int threads);
void add_thread_count_hook(ThreadCountHook hook);

/// A condition of this process that changes how fast registered routines run,
/// as a short name, or "" where it does not hold (XNNPACK bound to another
/// libpthreadpool than ours: its layers on one thread). Asked when a tuning
/// starts, not at registration.
using RunCondition = std::string (*)();
void add_run_condition(RunCondition condition);
/// The conditions that hold now, joined by ',' ("": none): part of every
/// profile cache key, so that times measured under one are never reused where
/// it does not hold, nor the reverse.
std::string run_conditions();

/// Parallel loops this thread has started through the library's pthreadpool API
/// (src/core/pthreadpool.cpp): XNNPACK's calls moving it show they land in ours.
uint64_t pthreadpool_loops();

}  // namespace softneuro::core
