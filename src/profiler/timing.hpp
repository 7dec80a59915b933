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

}  // namespace softneuro::profiler
