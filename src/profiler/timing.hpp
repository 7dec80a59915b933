// The one timer of the profiler: warm-up, repetitions until a time budget,
// median with outliers rejected.
#pragma once

#include <functional>
#include <vector>

namespace softneuro::profiler {

struct Timing {
  double median_ms = 0;
  int repetitions = 0;
};

/// Runs `fn` once to warm up, then repeatedly until `budget_ms` is spent
/// (at least `min_reps` — 2 when the warm-up alone took the budget — at most `max_reps` times) and returns the median of
/// the samples left after rejecting those above Q3 + 1.5 IQR (preemptions).
/// With a `cutoff_ms`: a first timed run slower than it ends the measurement
/// there (a candidate that much slower than the best known is not worth the budget).
Timing measure(const std::function<void()>& fn, double budget_ms, int min_reps = 3, int max_reps = 200,
               double cutoff_ms = 0);

/// The robust median used by measure(), for samples gathered elsewhere.
double robust_median(std::vector<double> samples);

/// CPU time spent by the whole machine (all CPUs busy, a hypervisor's steal
/// included; from /proc/stat, -1 where unknown) and by this process, and the
/// wall clock: two readings tell how much of the machine others took between them.
struct CpuClock {
  double machine_s = -1, ours_s = 0, wall_s = 0;
};
CpuClock cpu_clock();
/// CPUs that other processes (and the hypervisor) kept busy on average between
/// two readings; -1 where unknown. Times measured while others take half a CPU
/// or more can mislead: a tuning on a busy 2-CPU machine picked a path of
/// XNNPACK and oneDNN layers whose thread pools then fought (1.0 ms on the
/// quiet machine, where the untuned default ran 0.31).
double others_cpus(const CpuClock& from, const CpuClock& to);

}  // namespace softneuro::profiler
