// The one timer of the profiler: warm-up, repetitions until a time budget,
// median with outliers rejected, samples another process preempted left out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <vector>

namespace softneuro::profiler {

struct Timing {
  double median_ms = 0;
  int repetitions = 0;
};

/// Runs `fn` once to warm up, then repeatedly until `budget_ms` is spent or
/// the median of 16 or more clean samples is known to 1% (its standard error)
/// (at least `min_reps` — 2 when the warm-up alone took the budget — at most `max_reps` times) and returns the median of
/// the samples left after rejecting those above Q3 + 1.5 IQR. Samples during
/// which one of our threads was preempted are left out where any sample was not
/// (on a busy machine the budget stretches to 4x to find `min_reps` such); where
/// every sample was, the fastest is the least disturbed and is returned.
/// With a `cutoff_ms`: `min_reps` timed runs all slower than it end the
/// measurement there (a candidate that much slower than the best known is not
/// worth the budget; one run is not enough to say so, see kCutoffRuns).
Timing measure(const std::function<void()>& fn, double budget_ms, int min_reps = 3, int max_reps = 200,
               double cutoff_ms = 0);
/// measure() of a quantity `sample` reports itself (ms) each time it runs: a
/// device's time read off its own markers. The budget counts wall time.
Timing measure_samples(const std::function<double()>& sample, double budget_ms, int min_reps = 3, int max_reps = 200,
                       double cutoff_ms = 0);

/// The bytes of one core's private (L2) cache, 2 MiB where the system does not say.
std::size_t private_cache_bytes();
/// Reads a scratch buffer a little larger than its private cache on every
/// thread of the library's pool, so what a timed run reads next comes from the
/// shared cache or memory, as a layer's weights do in a run of the whole net.
void evict_private_caches();
/// How many times evict_private_caches has run in this process.
uint64_t private_cache_evictions();

/// The robust median used by measure(), for samples gathered elsewhere.
double robust_median(std::vector<double> samples);

/// Tells whether another process took a CPU from our threads during a timed
/// run: one of them was preempted (involuntary context switches, all threads),
/// or, where the team spins between regions (every thread on a CPU for the
/// whole run), the process got less than threads x wall of CPU time: a thread
/// preempted before the run and waited for during it. No per-thread run delay
/// is needed (schedstats, often missing in VMs' kernels).
class PreemptionProbe {
 public:
  /// `threads`: the team's size; `team_spins`: whether idle team threads spin.
  /// The threads alive now are those whose CPU time it reads (a team spinning
  /// between runs is alive after its first).
  PreemptionProbe(int threads, bool team_spins);
  /// Before a run.
  void start();
  /// After a run of `wall_ms`: whether it was preempted.
  bool preempted(double wall_ms) const;

 private:
  int threads_;
  bool team_spins_;
  long switches_ = 0;
  std::vector<clockid_t> clocks_;
  std::vector<double> cpu_ms_;
  mutable std::vector<double> now_ms_;
};

/// The CPU clocks of this process's threads alive now, and each one's CPU
/// time in ms (-1 for a thread that has ended). Exact at any moment, unlike
/// the process's clock, which adds other threads' time at scheduler ticks.
std::vector<clockid_t> process_thread_clocks();
void threads_cpu_ms(const std::vector<clockid_t>& clocks, std::vector<double>& ms);

/// A probe for runs on the library's pool under the process's OpenMP wait.
PreemptionProbe pool_preemption_probe();

/// Samples of one quantity, each marked whether it was preempted; the estimate
/// is measure()'s: robust median of the undisturbed ones, else the fastest.
struct Samples {
  std::vector<double> clean, preempted;
  void add(double ms, bool was_preempted) { (was_preempted ? preempted : clean).push_back(ms); }
  std::size_t size() const { return clean.size() + preempted.size(); }
  double estimate() const;
};

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
