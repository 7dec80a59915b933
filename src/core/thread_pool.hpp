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

/// Whether the user set how OpenMP threads wait or where they run
/// (OMP_WAIT_POLICY, GOMP_SPINCOUNT, OMP_PROC_BIND, OMP_PLACES,
/// GOMP_CPU_AFFINITY): then no program of ours re-executes itself to choose the
/// wait. Under a binding, libgomp pins the initial thread to one CPU when it
/// loads, and a re-executed program inherited that mask, its whole team then on
/// one CPU (ResNet50 at 2 threads: 56 ms against 29).
bool openmp_set_by_user();

}  // namespace softneuro::core
