// The library's one thread pool, and the one thread-count setting that also
// reaches every wrapped library (through hooks those routines register).
#pragma once

#include <softneuro/routine.hpp>

namespace softneuro::core {

/// The pool every routine runs on. Sized by set_num_threads (default: all cores).
ThreadPool& global_pool();

/// Called with the new thread count whenever it changes (and once at
/// registration), so wrapped libraries (oneDNN, XNNPACK, Eigen) follow it.
using ThreadCountHook = void (*)(int threads);
void add_thread_count_hook(ThreadCountHook hook);

}  // namespace softneuro::core
