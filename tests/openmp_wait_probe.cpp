// Usage:
//   openmp_wait_probe EXPECTED_WAIT EXPECTED_SPINCOUNT
// Checks that libgomp itself read the expected spin count (omp_display_env),
// that softneuro::openmp_wait() reports the expected wait, and that a team of
// one thread per CPU may use every CPU: a predecessor that re-executed the
// program inherited the one CPU libgomp had bound the first process to.
#include <softneuro/session.hpp>

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace {

/// libgomp's own report of its settings (it writes to stderr).
std::string libgomp_settings() {
  std::fflush(stderr);
  std::FILE* tmp = std::tmpfile();
  const int saved = dup(2);
  dup2(fileno(tmp), 2);
  omp_display_env(1);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string text;
  std::rewind(tmp);
  for (int c; (c = std::fgetc(tmp)) != EOF;) text += static_cast<char>(c);
  std::fclose(tmp);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  int failures = 0;
  const std::string want_wait = argv[1], want_spin = std::string("GOMP_SPINCOUNT = '") + argv[2] + "'";
  const std::string settings = libgomp_settings();
  if (settings.find(want_spin) == std::string::npos) {
    std::printf("libgomp did not read %s:\n%s", want_spin.c_str(), settings.c_str());
    ++failures;
  }
  if (softneuro::openmp_wait() != want_wait) {
    std::printf("softneuro::openmp_wait() is %s, expected %s\n", softneuro::openmp_wait().c_str(), want_wait.c_str());
    ++failures;
  }
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
  std::printf("wait %s; a team of %d threads may run on %d of %d CPUs\n", softneuro::openmp_wait().c_str(), cpus, usable,
              cpus);
  if (cpus >= 2 && usable < 2) ++failures;
  return failures ? 1 : 0;
}
