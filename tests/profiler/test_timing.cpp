// The profiler's timer: what it keeps of samples another process disturbed.
#include "profiler/timing.hpp"

#include <catch2/catch.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

using namespace softneuro;

TEST_CASE("timing: preempted samples count only where no clean one exists", "[timing]") {
  profiler::Samples s;
  s.add(9.0, true);
  s.add(3.0, true);
  CHECK(s.estimate() == 3.0);  // every one disturbed: the least disturbed
  s.add(1.0, false);
  s.add(1.2, false);
  s.add(1.1, false);
  CHECK(s.estimate() == 1.1);  // the clean ones' median, however fast a disturbed one was
  CHECK(s.size() == 5);
  CHECK(profiler::Samples{}.estimate() == 0);
}

TEST_CASE("timing: the preemption probe sees another process take our CPU", "[timing]") {
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof(saved), &saved) == 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &saved)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);  // the child inherits it
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0)
    for (;;) {
    }
  auto busy_run = [](profiler::PreemptionProbe& probe) {
    probe.start();
    const auto t0 = std::chrono::steady_clock::now();
    volatile unsigned spin = 0;
    while (std::chrono::steady_clock::now() < t0 + std::chrono::milliseconds(300)) spin = spin + 1;
    return probe.preempted(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  };
  profiler::PreemptionProbe switches(1, false), cpu_time(1, true);
  const bool seen_by_switches = busy_run(switches), seen_by_cpu_time = busy_run(cpu_time);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  sched_setaffinity(0, sizeof(saved), &saved);
  CHECK(seen_by_switches);
  CHECK(seen_by_cpu_time);
}
