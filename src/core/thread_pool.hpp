// The library's one thread pool, and the one thread-count setting that also
// reaches every wrapped library (through hooks those routines register).
#pragma once

#include <softneuro/routine.hpp>

#include <string>

namespace softneuro::core {

/// The pool every routine runs on. Sized by set_num_threads (default: all cores).
ThreadPool& global_pool();

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

/// Parallel loops run through the library's pthreadpool API (src/core/pthreadpool.cpp),
/// for tests that check XNNPACK runs on our team.
uint64_t pthreadpool_loops();
/// Whether the process resolves the pthreadpool API to ours (false where the real
/// libpthreadpool was in the global scope first: then XNNPACK must get no pool).
bool pthreadpool_interposed();

}  // namespace softneuro::core
