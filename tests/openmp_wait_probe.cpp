// Runs softneuro::choose_openmp_wait as the CLI does, then reports on how many
// CPUs a team of one thread per CPU may run. Fails when the team is confined
// to one CPU on a machine with more: with OMP_PROC_BIND set, libgomp binds the
// initial thread to one CPU when it loads, and a re-executed program inherited
// that mask (ResNet50 at 2 threads ran at half speed, slower than 1 thread).
#include <softneuro/net.hpp>

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>

int main(int, char** argv) {
  softneuro::choose_openmp_wait(argv);
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t all;
  CPU_ZERO(&all);
#pragma omp parallel num_threads(cpus)
  {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    sched_getaffinity(0, sizeof(mine), &mine);
#pragma omp critical
    CPU_OR(&all, &all, &mine);
  }
  const int usable = CPU_COUNT(&all);
  std::printf("a team of %d threads may run on %d of %d CPUs\n", cpus, usable, cpus);
  return cpus >= 2 && usable < 2 ? 1 : 0;
}
