#include "profiler/timing.hpp"

#include "core/thread_pool.hpp"

#include <softneuro/session.hpp>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

namespace softneuro::profiler {

CpuClock cpu_clock() {
  CpuClock c;
  c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    c.ours_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  // "cpu  user nice system idle iowait irq softirq steal ...", in clock ticks.
  std::ifstream stat("/proc/stat");
  std::string line, label;
  const long hz = sysconf(_SC_CLK_TCK);
  if (stat && std::getline(stat, line) && hz > 0) {
    std::istringstream in(line);
    double v[8] = {};
    in >> label;
    for (double& x : v) in >> x;
    if (label == "cpu" && in) c.machine_s = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / static_cast<double>(hz);
  }
  return c;
}

double others_cpus(const CpuClock& from, const CpuClock& to) {
  const double wall = to.wall_s - from.wall_s;
  if (from.machine_s < 0 || to.machine_s < 0 || wall <= 0) return -1;
  return std::max(0.0, (to.machine_s - from.machine_s) - (to.ours_s - from.ours_s)) / wall;
}

std::size_t private_cache_bytes() {
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l2 >= (64 << 10) && l2 <= (64 << 20) ? static_cast<std::size_t>(l2) : std::size_t{2} << 20;
}

namespace {
std::atomic<uint64_t> g_evictions{0};
}

uint64_t private_cache_evictions() { return g_evictions.load(std::memory_order_relaxed); }

void evict_private_caches() {
  // Read, not written: dirty lines would be written back during the timed run.
  static const std::size_t bytes = private_cache_bytes() + private_cache_bytes() / 2;
  static std::mutex mutex;
  static std::vector<std::vector<uint64_t>> scratch;
  std::lock_guard lock(mutex);
  auto& pool = core::global_pool();
  const int n = pool.num_threads();
  while (static_cast<int>(scratch.size()) < n) scratch.emplace_back(bytes / sizeof(uint64_t), scratch.size() + 1);
  std::atomic<uint64_t> sink{0};
  pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      uint64_t sum = 0;
      const auto& buf = scratch[static_cast<std::size_t>(t)];
      for (std::size_t i = 0; i < buf.size(); i += 8) sum += buf[i];  // a line each
      sink.fetch_add(sum, std::memory_order_relaxed);
    }
  });
  g_evictions.fetch_add(1, std::memory_order_relaxed);
}

double robust_median(std::vector<double> s) {
  if (s.empty()) return 0;
  std::sort(s.begin(), s.end());
  auto q = [&](double f) { return s[static_cast<std::size_t>(f * static_cast<double>(s.size() - 1))]; };
  double limit = q(0.75) + 1.5 * (q(0.75) - q(0.25));
  while (s.size() > 1 && s.back() > limit) s.pop_back();
  std::size_t n = s.size();
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

namespace {

long involuntary_switches() {
  rusage ru{};
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_nivcsw : 0;
}

// A thread's CPU clock, as glibc's pthread_getcpuclockid makes it from a
// thread id (Linux: CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED).
clockid_t thread_cpu_clock(pid_t tid) { return static_cast<clockid_t>((~static_cast<clockid_t>(tid)) << 3) | 6; }

}  // namespace

std::vector<clockid_t> process_thread_clocks() {
  std::vector<clockid_t> clocks;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(dir)) {
      char* end = nullptr;
      const long tid = std::strtol(e->d_name, &end, 10);
      if (tid > 0 && end && *end == '\0') clocks.push_back(thread_cpu_clock(static_cast<pid_t>(tid)));
    }
    closedir(dir);
  }
  return clocks;
}

void threads_cpu_ms(const std::vector<clockid_t>& clocks, std::vector<double>& ms) {
  ms.resize(clocks.size());
  for (std::size_t i = 0; i < clocks.size(); ++i) {
    timespec t{};
    ms[i] = clock_gettime(clocks[i], &t) == 0 ? 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec)
                                              : -1;  // the thread has ended
  }
}

namespace {
}  // namespace

PreemptionProbe::PreemptionProbe(int threads, bool team_spins) : threads_(threads), team_spins_(team_spins) {
  if (team_spins_) clocks_ = process_thread_clocks();
}

void PreemptionProbe::start() {
  switches_ = involuntary_switches();
  if (team_spins_) threads_cpu_ms(clocks_, cpu_ms_);
}

bool PreemptionProbe::preempted(double wall_ms) const {
  if (involuntary_switches() != switches_) return true;
  if (!team_spins_) return false;
  // Each thread's own clock: the process's CPU clock adds the other threads'
  // time only when a scheduler tick accounts it (every few ms), so over a
  // sub-millisecond run it read a spinning team as mostly idle, 78% of a
  // recogniser tuning's samples were thrown away as preempted, and the few
  // kept (those a tick fell in) were the slow ones.
  threads_cpu_ms(clocks_, now_ms_);
  double used_ms = 0;
  for (std::size_t i = 0; i < clocks_.size(); ++i)
    if (cpu_ms_[i] >= 0 && now_ms_[i] >= 0) used_ms += now_ms_[i] - cpu_ms_[i];
  // A thread kept off its CPU for a tenth of the run made it slower by about that much.
  const double lost_ms = threads_ * wall_ms - used_ms;
  return lost_ms > 0.1 * wall_ms + 0.005;
}

PreemptionProbe pool_preemption_probe() {
  return PreemptionProbe(core::global_pool().num_threads(), openmp_wait() != "passive");
}

double Samples::estimate() const {
  if (!clean.empty()) return robust_median(clean);
  return preempted.empty() ? 0 : *std::min_element(preempted.begin(), preempted.end());
}

Timing measure(const std::function<void()>& fn, double budget_ms, int min_reps, int max_reps, double cutoff_ms) {
  return measure_samples(
      [&] {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      },
      budget_ms, min_reps, max_reps, cutoff_ms);
}

/// How long a measurement goes on without one clean sample (see measure_samples).
constexpr double kPreemptedPatienceMs = 50;

/// Timed runs that must all exceed a cutoff before a measurement stops there.
/// One was not enough: the first run after the warm-up was often 3-60x its
/// usual time (0.19 ms for a 0.05 ms conv, 8 ms for a 0.15 ms one), and the
/// candidate's time entered the cache as that; a third of the times two cold
/// tunings of the recogniser measured 3x apart were such single runs.
constexpr int kCutoffRuns = 3;

namespace {
/// Clean samples after which a measurement may end before its budget, and
/// the relative standard error of their median that ends it: a quiet
/// machine's times settle within a few dozen runs, and the budget's rest
/// bought nothing (a 5 us adapt ran 200 times; ResNet50's 1,957 adapts took
/// 20 s of a tuning).
constexpr std::size_t kSettledSamples = 16;
constexpr double kSettledError = 0.01;

/// Whether the median of `clean` is known to kSettledError: its standard
/// error, 1.2533 sigma / sqrt(n) with sigma from the median absolute deviation.
bool settled(const std::vector<double>& clean) {
  const std::size_t n = clean.size();
  if (n < kSettledSamples || n % 8 != 0) return false;  // (checked every 8: a sort each time)
  auto middle = [n](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  std::vector<double> s = clean;
  const double median = middle(s);
  for (double& v : s) v = std::abs(v - median);
  const double mad = middle(s);
  return median > 0 && 1.2533 * 1.4826 * mad / std::sqrt(static_cast<double>(n)) <= kSettledError * median;
}
}  // namespace

Timing measure_samples(const std::function<double()>& sample, double budget_ms, int min_reps, int max_reps,
                       double cutoff_ms) {
  using clock = std::chrono::steady_clock;
  auto w0 = clock::now();
  sample();  // warm-up: caches, lazy initialisation in wrapped libraries
  // A routine whose one run already takes the whole budget (VGG16's large
  // convolutions, 400 MB dense layers) gets two timed runs, not three.
  if (std::chrono::duration<double, std::milli>(clock::now() - w0).count() >= budget_ms) min_reps = std::min(min_reps, 2);
  Samples samples;
  PreemptionProbe probe = pool_preemption_probe();
  const int cutoff_runs = std::max(1, std::min(kCutoffRuns, min_reps));
  double fastest = 0;
  auto start = clock::now();
  while (static_cast<int>(samples.size()) < max_reps) {
    probe.start();
    auto t0 = clock::now();
    const double ms = sample();
    auto t1 = clock::now();
    samples.add(ms, probe.preempted(std::chrono::duration<double, std::milli>(t1 - t0).count()));
    fastest = samples.size() == 1 ? ms : std::min(fastest, ms);
    if (cutoff_ms > 0 && static_cast<int>(samples.size()) == cutoff_runs && fastest > cutoff_ms) break;
    const double spent = std::chrono::duration<double, std::milli>(t1 - start).count();
    const bool enough_clean = static_cast<int>(samples.clean.size()) >= min_reps;
    // Without a clean sample, four budgets or kPreemptedPatienceMs, whichever
    // is longer: a 1 us step measured first in a process ran 7.5 ms in each of
    // its samples, all preempted, and two of them took four budgets of 0.5 ms.
    const double patience = samples.clean.empty() ? std::max(4 * budget_ms, kPreemptedPatienceMs) : 4 * budget_ms;
    if (static_cast<int>(samples.size()) >= min_reps && spent >= budget_ms && (enough_clean || spent >= patience))
      break;
    if (enough_clean && settled(samples.clean)) break;
  }
  return {samples.estimate(), static_cast<int>(samples.size())};
}

}  // namespace softneuro::profiler
