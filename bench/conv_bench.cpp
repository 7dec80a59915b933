// conv_bench — times every registered conv2 routine, in every schema it lists,
// on the convolution shapes of VGG16, ResNet50 and MobileNetV2 (batch 1, 224²
// input), and prints GFLOP/s next to the machine's measured FMA peak.
//
//   conv_bench [--model vgg16|resnet50|mobilenetv2|ppocr_rec] [--shape SUBSTRING]
//              [--routine SUBSTRING] [--with-ref] [--threads T] [--runs N]
//              [--budget SECONDS] [--peak avx2|max] [--list]
//              [--max-combos N] [--defaults] [--params k=v,...] [--fastest] [--cpu-time]
//              [--cold] [--rounds N] [--zero-points IN,OUT] [--peak-only]
//
// Routines with parameters (param_space) are prepared and timed once per
// combination (at most --max-combos, default 128, evenly spaced; --defaults:
// none; --params: exactly these values, e.g. oc_block=2,ow_tile=14), each with its share of the budget; the cell shows the best median
// and the best combination is listed after the table. --fastest reports the
// fastest run instead of the median: kernel efficiency on a loaded machine.
// --cold evicts the caches before each timed run (the input read back in):
// a layer's weights as a net sees them, from DRAM, not from the last run.
// The goals table after it times each shape's finalists again, interleaved
// with FMA probes (--rounds N rounds, default 11; 0: the cells and the start's
// peak instead): see print_goals.
//
// Only run() is timed: inputs are made in the routine's schema beforehand, so
// layout conversions (adapts) are excluded. CPU schemas only; quantised ones get
// per-tensor int8 calibration (input scale 0.02, output 0.05, zero points 0 or
// --zero-points: an ONNX Runtime QDQ file's u8 activations are s8 ones with the
// zero point less 128, e.g. 2 after a linear bottleneck, -128 after a relu). Each (shape, routine) gets two
// warm-up runs, then up to --runs timed runs or --budget seconds (default 0.8,
// 6 ms per combination of 128; at least 3
// runs), and the median is reported. GFLOP/s counts direct-convolution FLOPs:
// 2 * N * OC * OH * OW * (IC / group) * KH * KW. cpu/ref is skipped unless
// --with-ref (it is the oracle, never meant to be fast).
//
// OpenMP: the bench waits as the softneuro CLI does (tools/openmp_preinit.cpp:
// a short spin, unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set). Passive on a
// quiet VM wakes a sleeping vCPU per parallel region, which can take most of a
// 0.7 ms conv: timings then are those of one thread.
//
// The peak is our own probe: 12 independent FMA chains per thread (AVX2+FMA,
// and AVX-512 where the CPU has it), on all threads at once. --peak-only
// prints it alone, "fma_peak_gflops ISA VALUE" per ISA (bench/compare/per_layer.py
// reads it for each layer's limit).
//
// --cpu-time: every time (routines and the FMA probe alike) is the process's
// CPU time divided by the thread count instead of wall time, so that on a
// loaded machine the time our threads spent descheduled does not count (it
// assumes threads that sleep when idle: OMP_WAIT_POLICY=passive and our pool).
//
// Childnet routines (cpu/winograd: Winograd wgenc -> wgconv -> wgdec) run as a
// one-layer net of their children, each child with its default routine (the
// fastest ISA's); a routine with parameters gets a column per combination
// ("cpu/winograd tile=2", "tile=4", "tile=6"), filtered by --routine like the rest. Percentages are
// of the highest ISA's peak, or of the AVX2 one with --peak avx2 (the target
// machines of GOALS.md have no AVX-512).
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "conv_layer.hpp"
#include "evict_caches.hpp"

#include <softneuro/session.hpp>
#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <time.h>

using namespace softneuro;
using Clock = std::chrono::steady_clock;

namespace {

// ---------------------------------------------------------------------------
// The FMA probe

constexpr int64_t kProbeIters = 1 << 22;

__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iters) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

bool g_cpu_time = false;  // --cpu-time

/// Process CPU time in seconds.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

/// GFLOP/s of one probe: `iters` iterations of the FMA chains on `threads`
/// threads at once, the library's pool (the OpenMP team the routines run on).
/// Fresh std::threads per probe came out biased low: on this 2-vCPU VM their
/// median was 277-341 GFLOP/s against 406-423 on the warm team (best of 30
/// alike, ~420), so each interleaved round's "peak" sat ~20% under what the
/// routines' own threads could reach, and the goals' percentages above it.
double probe_once(int threads, bool avx512, int64_t iters) {
  const double flops_per_iter = 12.0 * 2.0 * (avx512 ? 16 : 8);
  std::atomic<float> sink{0};
  const double c0 = cpu_seconds();
  auto t0 = Clock::now();
  core::global_pool().parallel_for(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sink.store(avx512 ? fma_chains_avx512(iters) : fma_chains_avx2(iters), std::memory_order_relaxed);
  });
  const double s = g_cpu_time ? (cpu_seconds() - c0) / threads : std::chrono::duration<double>(Clock::now() - t0).count();
  return flops_per_iter * double(iters) * threads / s / 1e9;
}

/// The machine's peak: the best of 20 short bursts (~10 ms each), so that on a
/// shared machine one burst likely runs unpreempted.
double probe_peak(int threads, bool avx512) {
  double best = 0;
  for (int rep = 0; rep < 20; ++rep) best = std::max(best, probe_once(threads, avx512, kProbeIters));
  return best;
}

// ---------------------------------------------------------------------------
// The shapes

struct ConvShape {
  std::string model, name;
  int64_t c, oc, k, stride, pad, group, hw;  ///< square kernels and inputs
  int count = 1;                             ///< how often the model has it
  double gflop() const {
    const int64_t o = (hw + 2 * pad - k) / stride + 1;
    return 2.0 * double(oc) * double(o * o) * double(c / group) * double(k * k) / 1e9;
  }
  std::string text() const {
    return fmt::format("{}x{} {}->{}{} s{} @{}", k, k, c, oc, group == 1 ? "" : group == c ? " dw" : fmt::format(" g{}", group),
                       stride, hw);
  }
};

/// Adds a layer to `out`, merging it with an identical shape of the same model.
void add(std::vector<ConvShape>& out, const std::string& model, int64_t c, int64_t oc, int64_t k, int64_t s,
         int64_t hw, int64_t group = 1) {
  for (auto& e : out)
    if (e.model == model && e.c == c && e.oc == oc && e.k == k && e.stride == s && e.hw == hw && e.group == group) {
      ++e.count;
      return;
    }
  out.push_back({model, {}, c, oc, k, s, k / 2, group, hw});
  out.back().name = out.back().text();
}

std::vector<ConvShape> model_shapes() {
  std::vector<ConvShape> v;
  // VGG16: 13 3x3 convolutions, pad 1.
  const int64_t vgg[][3] = {{3, 64, 224},   {64, 64, 224},  {64, 128, 112}, {128, 128, 112}, {128, 256, 56},
                            {256, 256, 56}, {256, 256, 56}, {256, 512, 28}, {512, 512, 28},  {512, 512, 28},
                            {512, 512, 14}, {512, 512, 14}, {512, 512, 14}};
  for (auto& l : vgg) add(v, "vgg16", l[0], l[1], 3, 1, l[2]);
  // ResNet50 (v1.5: stride in the 3x3 of each stage's first block).
  add(v, "resnet50", 3, 64, 7, 2, 224);
  int64_t in = 64, hw = 56;
  const int64_t stages[][3] = {{64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}};  // width, blocks, stride
  for (auto& st : stages) {
    const int64_t w = st[0], out = 4 * w;
    for (int64_t b = 0; b < st[1]; ++b) {
      const int64_t s = b == 0 ? st[2] : 1;
      add(v, "resnet50", in, w, 1, 1, hw);
      add(v, "resnet50", w, w, 3, s, hw);
      const int64_t ohw = hw / s;
      add(v, "resnet50", w, out, 1, 1, ohw);
      if (b == 0) add(v, "resnet50", in, out, 1, s, hw);  // downsample
      in = out;
      hw = ohw;
    }
  }
  // MobileNetV2: stem, inverted residual blocks (expand 1x1, depthwise 3x3, project 1x1), head.
  add(v, "mobilenetv2", 3, 32, 3, 2, 224);
  const int64_t blocks[][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                               {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};  // t, c, n, s
  in = 32;
  hw = 112;
  for (auto& bl : blocks)
    for (int64_t i = 0; i < bl[2]; ++i) {
      const int64_t s = i == 0 ? bl[3] : 1, mid = in * bl[0];
      if (bl[0] != 1) add(v, "mobilenetv2", in, mid, 1, 1, hw);
      add(v, "mobilenetv2", mid, mid, 3, s, hw, mid);
      hw /= s;
      add(v, "mobilenetv2", mid, bl[1], 1, 1, hw);
      in = bl[1];
    }
  add(v, "mobilenetv2", 320, 1280, 1, 1, 7);
  // PP-OCRv4's recogniser (48x320 input): its 5x5 depthwise layers, on square
  // planes of about their pixels (240 channels at 12x80, 480 at 6x80).
  add(v, "ppocr_rec", 240, 240, 5, 1, 31, 240);
  add(v, "ppocr_rec", 480, 480, 5, 1, 22, 480);
  return v;
}

// ---------------------------------------------------------------------------
// Timing one routine on one shape

/// Random values (float32 and bfloat16 in [-1,1], int8 in [-100,100]) in a blob
/// of any layout; the padded channels of blocked layouts stay zero. (bfloat16
/// once got int8 bytes: half its values subnormal, its routines timed 7x slow.)
void fill_random(Blob& x, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const Shape& s = x.shape();
  const int64_t block = channel_block(x.layout());
  const bool f32 = x.dtype() == DType::float32;
  const int64_t count = static_cast<int64_t>(x.byte_size() / dtype_size(x.dtype()));
  for (int64_t i = 0; i < count; ++i) {
    bool pad = false;
    if (block) {
      const int64_t cb = (s[1] + block - 1) / block;
      pad = (i / (block * s[2] * s[3])) % cb * block + i % block >= s[1];
    }
    const float v = pad ? 0.0f : u(rng);
    if (f32) {
      x.data_as<float>()[i] = v;
    } else if (x.dtype() == DType::bfloat16) {
      uint32_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      x.data_as<uint16_t>()[i] = static_cast<uint16_t>(bits >> 16);
    } else {
      x.data_as<int8_t>()[i] = static_cast<int8_t>(v * 100.0f);
    }
  }
}

std::string load_average() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return "?";
  char buf[64] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  std::string s = ok ? buf : "?";
  return s.substr(0, s.find(' ', s.find(' ', s.find(' ') + 1) + 1));
}

struct Result {
  bool ok = false;
  std::string why;
  double ms = 0;
  int runs = 0;
};

/// --fastest: report the fastest run instead of the median (kernel efficiency on a loaded machine).
bool g_fastest = false;
bool g_cold = false;  // --cold

/// Every combination of a routine's parameters (its param_space cross
/// product), at most `cap` of them (evenly spaced), or just the defaults.
std::vector<RoutineParams> capped_combinations(const std::vector<RoutineParamSpec>& space, std::size_t cap) {
  std::vector<RoutineParams> out = param_combinations(space);
  if (out.size() > cap && cap > 0) {
    std::vector<RoutineParams> kept;
    for (std::size_t i = 0; i < cap; ++i) kept.push_back(out[i * out.size() / cap]);
    out = std::move(kept);
  }
  return out;
}

/// "k=v,k=v" (--params) as routine parameters.
RoutineParams parse_params(const std::string& text) {
  RoutineParams out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) {
      fmt::print(stderr, "conv_bench: --params wants k=v,k=v, got '{}'\n", item);
      std::exit(2);
    }
    out.emplace_back(item.substr(0, eq), std::atoll(item.c_str() + eq + 1));
    pos = end + 1;
  }
  return out;
}

std::string params_text(const RoutineParams& p) {
  std::string s;
  for (const auto& [k, v] : p) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v);
  return s.empty() ? "(defaults)" : s;
}

/// Median of `v` (not empty).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The quantised routines' input and output zero points (--zero-points).
int32_t g_zero_points[2] = {0, 0};

/// A conv2 layer of the shape (random weights, fused bias + relu) and what a
/// routine is told about it. Not movable: info points at layer.
struct ConvCase {
  Layer layer;
  LayerInfo info;
  ConvCase(const ConvCase&) = delete;
  ConvCase(const ConvShape& cs, std::mt19937& rng)
      : layer(bench::conv_layer(cs.name, cs.c, cs.oc, cs.k, cs.stride, cs.pad, cs.group, rng)) {
    info.layer = &layer;
    info.input_shapes = {Shape{1, cs.c, cs.hw, cs.hw}};
    info.output_shapes = core::infer_layer_shapes(layer, info.input_shapes);
    // Calibration as a quantised routine would get it (per tensor, int8 activations).
    info.input_quant = {QuantParams{{0.02f}, {g_zero_points[0]}, -1}};
    info.output_quant = {QuantParams{{0.05f}, {g_zero_points[1]}, -1}};
  }
};

/// A prepared routine with its input, output and workspace, ready to run.
struct PreparedCase {
  std::unique_ptr<PreparedRoutine> prepared;
  std::unique_ptr<void, void (*)(void*)> workspace{nullptr, std::free};
  const Blob* ins[1];
  Blob* outs[1];
  PreparedCase(const Routine& routine, const ConvCase& c, const Schema& schema, const RoutineParams& params, const Blob& x,
               Blob& y)
      : prepared(routine.prepare(c.info, schema, params)), ins{&x}, outs{&y} {
    const std::size_t ws = prepared->workspace_bytes();
    if (ws) workspace.reset(std::aligned_alloc(64, (ws + 63) / 64 * 64));
  }
  void run() {
    RunArgs args{ins, outs, workspace.get(), &core::global_pool()};
    prepared->run(args);
  }
  /// One run's time in ms (wall, or --cpu-time: CPU time / threads; --cold: caches evicted first).
  double time_run(int threads) {
    if (g_cold) bench::evict_caches(*ins[0]);
    const double c0 = cpu_seconds();
    auto t0 = Clock::now();
    run();
    return g_cpu_time ? (cpu_seconds() - c0) * 1e3 / threads
                      : std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
};

/// Times `routine` with `fixed` parameters, or (when `fixed` is empty) with
/// each of at most `max_combos` combinations of its parameters, keeping the best.
Result time_routine(const Routine& routine, const Schema& schema, const RoutineParams& fixed, const ConvShape& cs,
                    int max_runs, double budget_s, std::mt19937& rng, std::size_t max_combos, RoutineParams* best_params) {
  const ConvCase c(cs, rng);
  const LayerInfo& info = c.info;
  Result r;
  Support s = routine.supports(info, schema);
  if (!s) {
    r.why = s.reason;
    return r;
  }
  Blob x = Blob::allocate(info.input_shapes[0], schema.dtype, schema.layout);
  fill_random(x, rng);
  Blob y = Blob::allocate(info.output_shapes[0], schema.dtype, schema.layout);
  // Each parameter combination is prepared and timed (its share of the budget);
  // the best median wins.
  // A childnet routine (cpu/winograd) prepares as a one-layer net of its children,
  // each child with its default routine (core/childnet.hpp).
  const std::vector<RoutineParams> combos =
      fixed.empty() ? capped_combinations(routine.param_space(info, schema), max_combos) : std::vector<RoutineParams>{fixed};
  for (const RoutineParams& params : combos) {
    PreparedCase pc(routine, c, schema, params, x, y);
    pc.run();
    pc.run();
    std::vector<double> times;
    const double share = combos.size() > 1 ? budget_s / double(combos.size()) : budget_s;
    const int runs = combos.size() > 1 ? std::max(3, std::min(max_runs, 5)) : max_runs;
    const auto start = Clock::now();
    const int threads = num_threads();
    while (static_cast<int>(times.size()) < runs) {
      times.push_back(pc.time_run(threads));
      if (times.size() >= 3 && std::chrono::duration<double>(Clock::now() - start).count() > share) break;
    }
    const double ms = g_fastest ? *std::min_element(times.begin(), times.end()) : median(times);
    if (!r.ok || ms < r.ms) {
      r.ms = ms;
      r.runs = static_cast<int>(times.size());
      if (best_params) *best_params = params;
    }
    r.ok = true;
  }
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------

/// Timed runs of a finalist per round (their median is the round's time).
constexpr int kRunsPerRound = 3;

/// How the goals are measured (--rounds).
struct GoalsSetup {
  int rounds = 11;  ///< interleaved rounds per shape; 0: from the table's cells and the peak probed at the start
  int threads = 2;
  bool avx512 = true;
  double peak = 0;  ///< the start's peak (rounds == 0)
};

/// The interleaved rounds of print_goals: per finalist (a column of `cols`,
/// run with `params[column]`) its time in each round, and each round's peak.
template <class Cols>
void time_interleaved(const ConvShape& cs, const Cols& cols, const std::vector<int>& fin,
                      const std::vector<RoutineParams>& params, const GoalsSetup& setup, std::mt19937& rng,
                      std::map<int, std::vector<double>>& times, std::vector<double>& peaks) {
  const ConvCase c(cs, rng);
  std::vector<Blob> xs, ys;
  xs.reserve(fin.size());
  ys.reserve(fin.size());
  std::vector<std::unique_ptr<PreparedCase>> pcs;
  for (int f : fin) {
    xs.push_back(Blob::allocate(c.info.input_shapes[0], cols[f].schema.dtype, cols[f].schema.layout));
    fill_random(xs.back(), rng);
    ys.push_back(Blob::allocate(c.info.output_shapes[0], cols[f].schema.dtype, cols[f].schema.layout));
    pcs.push_back(std::make_unique<PreparedCase>(*cols[f].routine, c, cols[f].schema, params[f], xs.back(), ys.back()));
    pcs.back()->run();
    pcs.back()->run();
  }
  auto probe = [&] { return probe_once(setup.threads, setup.avx512, kProbeIters); };
  for (int r = 0; r < setup.rounds; ++r) {
    const double before = probe();
    for (std::size_t k = 0; k < fin.size(); ++k) {
      const std::size_t j = (k + r) % fin.size();
      pcs[j]->run();  // untimed: the first run after the probe wakes the pool and brings the weights back
      std::vector<double> runs;
      for (int run = 0; run < kRunsPerRound; ++run) runs.push_back(pcs[j]->time_run(setup.threads));
      times[fin[j]].push_back(median(runs));
    }
    peaks.push_back((before + probe()) / 2);
  }
}

/// The goals per shape (float32 routines only: the bfloat16 and int8
/// ones compute something else): our best routine against oneDNN's best (goal:
/// within 10%, i.e. ratio <= 1.10); the best direct or GEMM routine's share of
/// the FMA peak (goal >= 85% on the 3x3 layers of VGG16 and ResNet50); the best
/// Winograd routine's, by the same direct-convolution FLOPs (goal >= 150% on
/// 3x3 stride-1 layers with >= 128 channels; Winograd computes stride 1 only).
///
/// The finalists come from the table: per shape the best cell of ours, of
/// oneDNN, of direct/GEMM and of Winograd, with their best parameters. On a
/// shared machine both the routines' times and the FMA peak drift by 10-30%
/// within minutes, so (rounds > 0) the finalists are timed again interleaved:
/// each round probes the peak (before and after, averaged), then runs every
/// finalist in a rotated order (an untimed run, then the median of
/// kRunsPerRound); the goals are the medians over rounds of each round's
/// ratios (ours / oneDNN, FLOP/s / that round's peak).
template <class Cols>
void print_goals(const std::vector<ConvShape>& shapes, const Cols& cols, const std::vector<std::vector<double>>& cell_ms,
                 const std::vector<std::vector<RoutineParams>>& cell_params, const GoalsSetup& setup,
                 std::mt19937& rng) {
  auto algorithm = [](const std::string& d) {
    const auto slash = d.find('/');
    return d.substr(slash + 1, d.find(' ', slash) - slash - 1);
  };
  fmt::print("\ngoals per layer (float32 routines; ok / MISSED / - where the goal does not apply or a column is missing)");
  if (setup.rounds > 0)
    fmt::print(",\nthe finalists timed again interleaved: medians of {} rounds (each: an FMA probe, every finalist's "
               "median of {} runs, a probe):\n", setup.rounds, kRunsPerRound);
  else
    fmt::print(", from the cells above and the peak probed at the start:\n");
  fmt::print("{:<12} {:<22} | {:<34} {:>8} | {:>9} {:>6} {:<6} | {:>13} {:<6} | {:>12} {:<6}\n", "model", "layer",
             "best of ours", "ms", "oneDNN ms", "ratio", "<=1.10", "direct/GEMM %", ">=85%", "Winograd %", ">=150%");
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    const ConvShape& cs = shapes[s];
    // The finalists: columns (-1: none).
    int ours = -1, onednn = -1, dg = -1, wg = -1;
    for (std::size_t i = 0; i < cols.size(); ++i) {
      const double ms = cell_ms[s][i];
      if (ms <= 0 || cols[i].schema.dtype != DType::float32 || cols[i].descriptor == "cpu/ref") continue;
      const std::string a = algorithm(cols[i].descriptor);
      auto take = [&](int& best) {
        if (best < 0 || ms < cell_ms[s][best]) best = static_cast<int>(i);
      };
      if (a == "onednn") {
        take(onednn);
        continue;
      }
      take(ours);
      if (a == "direct" || a == "im2col" || a == "gemm1x1") take(dg);
      if (a == "wg") take(wg);
    }
    // Per finalist, its time in each round; per round, the peak.
    std::vector<int> fin;
    for (int f : {ours, onednn, dg, wg})
      if (f >= 0 && std::find(fin.begin(), fin.end(), f) == fin.end()) fin.push_back(f);
    std::map<int, std::vector<double>> times;
    std::vector<double> peaks;
    if (setup.rounds > 0 && !fin.empty()) {
      time_interleaved(cs, cols, fin, cell_params[s], setup, rng, times, peaks);
    } else {
      for (int f : fin) times[f] = {cell_ms[s][f]};
      peaks = {setup.peak};
    }
    // Medians over rounds: a finalist's time, our best of a round, ratios of a round.
    const std::size_t n = peaks.size();
    auto ours_at = [&](std::size_t r) {
      double best = 0;
      for (int f : {ours, dg, wg})
        if (f >= 0) best = best == 0 ? times[f][r] : std::min(best, times[f][r]);
      return best;
    };
    auto over_rounds = [&](auto fn) {
      std::vector<double> v;
      for (std::size_t r = 0; r < n; ++r) v.push_back(fn(r));
      return median(v);
    };
    const double ours_ms = ours >= 0 ? over_rounds(ours_at) : 0;
    const double onednn_ms = onednn >= 0 ? median(times[onednn]) : 0;
    const double ratio = ours >= 0 && onednn >= 0 ? over_rounds([&](std::size_t r) { return ours_at(r) / times[onednn][r]; }) : 0;
    auto pct = [&](int f) {
      return f < 0 ? 0.0 : over_rounds([&](std::size_t r) { return 100.0 * cs.gflop() / (times[f][r] / 1e3) / peaks[r]; });
    };
    const double dg_pct = pct(dg), wg_pct = pct(wg);
    auto verdict = [](bool applies, bool have, bool met) { return !applies || !have ? "-" : met ? "ok" : "MISSED"; };
    const bool dense3 = cs.k == 3 && cs.group == 1 && (cs.model == "vgg16" || cs.model == "resnet50");
    const bool wide3 = dense3 && cs.stride == 1 && cs.c >= 128 && cs.oc >= 128;
    const std::string ours_name = ours >= 0 ? cols[ours].descriptor : std::string();
    fmt::print("{:<12} {:<22} | {:<34} {:>8.3f} | {:>9.3f} {:>6.2f} {:<6} | {:>12.1f}% {:<6} | {:>11.1f}% {:<6}{}\n", cs.model,
               cs.name, ours_name.substr(0, 34), ours_ms, onednn_ms, ratio, verdict(true, ratio > 0, ratio <= 1.10), dg_pct,
               verdict(dense3, dg >= 0, dg_pct >= 85), wg_pct, verdict(wide3, wg >= 0, wg_pct >= 150),
               n > 1 ? fmt::format("  peak {:.0f}", median(peaks)) : std::string());
    std::fflush(stdout);
  }
}

int main(int argc, char** argv) {
  std::string model_filter, shape_filter, routine_filter, peak_isa = "max";
  bool peak_only = false;
  bool with_ref = false, list = false;
  // 128 combinations: the direct routine's 288 sampled as densely as its 144 were at 64.
  int threads = 2, runs = 20, max_combos = 128;
  RoutineParams fixed_params;  // --params: these values instead of the search
  double budget = 0.8;
  GoalsSetup goals;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "conv_bench: {} needs a value\n", a);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model_filter = value();
    else if (a == "--shape") shape_filter = value();
    else if (a == "--routine") routine_filter = value();
    else if (a == "--with-ref") with_ref = true;
    else if (a == "--threads") threads = std::atoi(value().c_str());
    else if (a == "--runs") runs = std::max(3, std::atoi(value().c_str()));
    else if (a == "--budget") budget = std::atof(value().c_str());
    else if (a == "--list") list = true;
    else if (a == "--peak") peak_isa = value();
    else if (a == "--peak-only") peak_only = true;
    else if (a == "--max-combos") max_combos = std::max(1, std::atoi(value().c_str()));
    else if (a == "--defaults") max_combos = 1;
    else if (a == "--params") fixed_params = parse_params(value());
    else if (a == "--fastest") g_fastest = true;
    else if (a == "--cold") g_cold = true;
    else if (a == "--cpu-time") g_cpu_time = true;
    else if (a == "--rounds") goals.rounds = std::max(0, std::atoi(value().c_str()));
    else if (a == "--zero-points") {
      const std::string v = value();
      if (std::sscanf(v.c_str(), "%d,%d", &g_zero_points[0], &g_zero_points[1]) != 2) {
        fmt::print(stderr, "conv_bench: --zero-points takes IN,OUT (e.g. 2,-128), not '{}'\n", v);
        return 2;
      }
    } else {
      fmt::print(stderr,
                 "usage: conv_bench [--model vgg16|resnet50|mobilenetv2|ppocr_rec] [--shape SUBSTRING] [--routine SUBSTRING]\n"
                 "                  [--with-ref] [--threads T] [--runs N] [--budget SECONDS] [--peak avx2|max]\n"
                 "                  [--list] [--max-combos N] [--defaults] [--params k=v,...] [--fastest] [--cpu-time] [--cold]\n"
                 "                  [--rounds N] [--zero-points IN,OUT] [--peak-only]\n");
      return 2;
    }
  }

  if (peak_only) {
    set_num_threads(threads);
    fmt::print("fma_peak_gflops avx2 {:.1f}\n", probe_peak(threads, false));
    if (softneuro::core::cpu_features().avx512_core()) fmt::print("fma_peak_gflops avx512 {:.1f}\n", probe_peak(threads, true));
    return 0;
  }
  std::vector<ConvShape> shapes;
  for (const auto& cs : model_shapes())
    if ((model_filter.empty() || cs.model == model_filter) &&
        (shape_filter.empty() || cs.name.find(shape_filter) != std::string::npos))
      shapes.push_back(cs);
  if (list) {
    for (const auto& cs : shapes) fmt::print("{:<12} {:<24} x{} {:.3f} GFLOP\n", cs.model, cs.name, cs.count, cs.gflop());
    return 0;
  }

  struct Col {
    std::string descriptor;  ///< with its routine parameters, e.g. "cpu/winograd tile=4"
    const Routine* routine;
    Schema schema;
    RoutineParams params;
  };
  // Routines with parameters (cpu/winograd's tile) get a column per combination: their
  // space as a 3x3 stride-1 layer reports it.
  Layer probe_layer;
  probe_layer.name = "probe";
  probe_layer.type = "conv2";
  probe_layer.inputs = {"x"};
  probe_layer.outputs = {"y"};
  probe_layer.params["pads"] = std::vector<int64_t>{1, 1, 1, 1};
  probe_layer.weights["weight"] = Blob::allocate({64, 64, 3, 3});
  LayerInfo probe{&probe_layer, {Shape{1, 64, 56, 56}}, {Shape{1, 64, 56, 56}}, {}, {}};
  std::vector<Col> cols;
  for (const std::string& d : registered_routines("conv2")) {
    if (!with_ref && d == "cpu/ref") continue;
    Schema schema;
    const Routine* r = core::RoutineRegistry::instance().find("conv2", d, &schema);
    if (!r || schema.device != Device::cpu) continue;
    std::vector<RoutineParams> combos = param_combinations(r->param_space(probe, schema));
    // A few combinations (Winograd's tile): a column each; many (cache
    // blocking): one column, the best combination per shape.
    if (combos.size() > 4) combos = {{}};
    for (const auto& p : combos) {
      std::string name = d;
      for (const auto& [k, v] : p) name += fmt::format(" {}={}", k, v);
      if (!routine_filter.empty() && name.find(routine_filter) == std::string::npos) continue;
      cols.push_back({name, r, schema, p});
    }
  }

  set_num_threads(threads);
  const double peak2 = probe_peak(threads, false);
  // Within SOFTNEURO_MAX_CPU_ISA, like the routines: capped at avx2, the AVX2 peak.
  const bool has512 = softneuro::core::cpu_features().avx512_core();
  const double peak512 = has512 ? probe_peak(threads, true) : 0;
  const bool use512 = has512 && peak_isa != "avx2";
  const double peak = use512 ? peak512 : peak2;
  fmt::print("conv_bench: batch 1, {} threads, {} of <= {} runs (budget {:.2f} s per cell), fused relu + bias{}{}\n",
             threads, g_fastest ? "fastest" : "median", runs, budget,
             g_cold ? "; cold: caches evicted before each run, the input read back in" : "",
             g_cpu_time ? "; CPU time / threads, not wall time" : "");
  fmt::print("OpenMP wait: {}; load average at start {}\n", softneuro::openmp_wait(), load_average());
  fmt::print("FMA peak (12 chains/thread, all threads): AVX2 {:.1f} GFLOP/s{}\n", peak2,
             has512 ? fmt::format(", AVX-512 {:.1f} GFLOP/s", peak512) : std::string());
  fmt::print("cells: ms / GFLOP/s / % of the {} peak; n/a = not supported (reasons below)\n\n",
             use512 ? "AVX-512" : "AVX2");

  fmt::print("{:<12} {:<22} {:>7} {:>2}", "model", "layer", "GFLOP", "x");
  for (const auto& c : cols) fmt::print(" | {:^24}", c.descriptor.size() > 24 ? c.descriptor.substr(0, 24) : c.descriptor);
  fmt::print("\n");

  std::mt19937 rng(42);
  std::map<std::string, std::string> reasons;  // "descriptor: reason" -> first shape
  std::vector<std::string> tuned;  // "shape descriptor: best parameters"
  std::vector<std::vector<double>> cell_ms;  // per shape, per column: ms (0: n/a)
  std::vector<std::vector<RoutineParams>> cell_params;  // per shape, per column: the best parameters
  for (const auto& cs : shapes) {
    cell_ms.emplace_back(cols.size(), 0.0);
    cell_params.emplace_back(cols.size());
    fmt::print("{:<12} {:<22} {:>7.3f} {:>2}", cs.model, cs.name, cs.gflop(), cs.count);
    std::fflush(stdout);
    for (std::size_t i = 0; i < cols.size(); ++i) {
      RoutineParams best_params;
      Result r = time_routine(*cols[i].routine, cols[i].schema, cols[i].params.empty() ? fixed_params : cols[i].params,
                              cs, runs, budget, rng,
                              static_cast<std::size_t>(max_combos), &best_params);
      if (r.ok && cols[i].params.empty() && !best_params.empty())
        tuned.push_back(fmt::format("{:<22} {:<32} {}", cs.name, cols[i].descriptor, params_text(best_params)));
      if (!r.ok) {
        fmt::print(" | {:^24}", "n/a");
        reasons.emplace(cols[i].descriptor + ": " + r.why, cs.name);
      } else {
        const double gf = cs.gflop() / (r.ms / 1e3);
        fmt::print(" | {:>8.3f} {:>6.1f} {:>6.1f}%", r.ms, gf, 100.0 * gf / peak);
        cell_ms.back()[i] = r.ms;
        cell_params.back()[i] = best_params;
      }
      std::fflush(stdout);
    }
    fmt::print("\n");
  }
  fmt::print("\nconv time per model (sum over its conv layers, count-weighted; best = best routine per layer):\n");
  // Per model and column: total ms (count-weighted), incomplete where a shape did not run.
  std::map<std::string, std::vector<std::pair<double, bool>>> totals;
  std::map<std::string, double> best_total;
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    auto& tot = totals[shapes[s].model];
    tot.resize(cols.size(), {0.0, true});
    double best = 0;
    for (std::size_t i = 0; i < cols.size(); ++i) {
      const double ms = cell_ms[s][i];
      tot[i].first += ms * shapes[s].count;
      tot[i].second = tot[i].second && ms > 0;
      if (ms > 0 && (best == 0 || ms < best)) best = ms;
    }
    best_total[shapes[s].model] += best * shapes[s].count;
  }
  for (const auto& [model, tot] : totals) {
    fmt::print("  {:<12}", model);
    for (std::size_t i = 0; i < cols.size(); ++i)
      if (tot[i].second) fmt::print("  {} {:.2f} ms", cols[i].descriptor, tot[i].first);
      else fmt::print("  {} (incomplete)", cols[i].descriptor);
    fmt::print("  best {:.2f} ms\n", best_total[model]);
  }
  goals.threads = threads;
  goals.avx512 = use512;
  goals.peak = peak;
  print_goals(shapes, cols, cell_ms, cell_params, goals, rng);
  fmt::print("\nFMA peak probed again after the table: AVX2 {:.1f} GFLOP/s{} (a large change means a noisy machine)\n",
             probe_peak(threads, false), has512 ? fmt::format(", AVX-512 {:.1f}", probe_peak(threads, true)) : std::string());
  if (!tuned.empty()) {
    fmt::print("\nbest routine parameters (each combination of param_space timed, the best median reported):\n");
    for (const auto& t : tuned) fmt::print("  {}\n", t);
  }
  if (!reasons.empty()) {
    fmt::print("\nnot supported (first shape):\n");
    for (const auto& [why, shape] : reasons) fmt::print("  {} [{}]\n", why, shape);
  }
  return 0;
}
