#include "profiler/timing.hpp"

#include <algorithm>
#include <chrono>

namespace softneuro::profiler {

double robust_median(std::vector<double> s) {
  if (s.empty()) return 0;
  std::sort(s.begin(), s.end());
  auto q = [&](double f) { return s[static_cast<std::size_t>(f * static_cast<double>(s.size() - 1))]; };
  double limit = q(0.75) + 1.5 * (q(0.75) - q(0.25));
  while (s.size() > 1 && s.back() > limit) s.pop_back();
  std::size_t n = s.size();
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

Timing measure(const std::function<void()>& fn, double budget_ms, int min_reps, int max_reps, double cutoff_ms) {
  using clock = std::chrono::steady_clock;
  auto w0 = clock::now();
  fn();  // warm-up: caches, lazy initialisation in wrapped libraries
  // A routine whose one run already takes the whole budget (VGG16's large
  // convolutions, 400 MB dense layers) gets two timed runs, not three.
  if (std::chrono::duration<double, std::milli>(clock::now() - w0).count() >= budget_ms) min_reps = std::min(min_reps, 2);
  std::vector<double> samples;
  auto start = clock::now();
  while (static_cast<int>(samples.size()) < max_reps) {
    auto t0 = clock::now();
    fn();
    auto t1 = clock::now();
    samples.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    if (cutoff_ms > 0 && samples.size() == 1 && samples[0] > cutoff_ms) break;
    double spent = std::chrono::duration<double, std::milli>(t1 - start).count();
    if (static_cast<int>(samples.size()) >= min_reps && spent >= budget_ms) break;
  }
  return {robust_median(samples), static_cast<int>(samples.size())};
}

}  // namespace softneuro::profiler
