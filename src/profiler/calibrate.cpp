// calibrate(): run the float32 net with its default (fast) float32
// routines on calibration inputs, record every blob's range, and store each
// blob's asymmetric int8 quantisation in graph.blob_quant (saved in the .dnn).
// The tuner keeps the result in its cache folder, keyed by the net's layers and
// weights and the calibration options, so tuning the same net again skips it.
//
// Every intermediate blob is seen by making it an output of a private copy of
// the graph: the executor then writes each one straight into memory of ours
// (outputs are zero-copy), where the shared arena would have reused it.
#include "profiler/calibrate.hpp"

#include "core/dnn_file.hpp"
#include "core/hash.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/passes.hpp"
#include "core/thread_pool.hpp"
#include "core/weight_quant.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <limits>
#include <map>
#include <optional>
#include <variant>
#include <random>
#include <set>
#include <tuple>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace softneuro {
namespace profiler {
namespace {

constexpr int kBins = 8192;  // fine enough for the entropy search to shrink a range 16-fold

/// Samples whose min and max set the histograms' bounds: the histogram pass
/// then runs over every sample, values beyond the bounds counted in the edge
/// bins (clipping methods clip them anyway; min/max stays exact). Two passes
/// over ResNet50's 300 calibration samples took 62 s of its tuning.
constexpr std::size_t kBoundSamples = 32;

/// Blobs of up to this many values are binned whole at every sample; larger
/// ones a block of kHistogramBlock values in every kHistogramStride blocks.
constexpr int64_t kHistogramAll = int64_t{1} << 16;
constexpr int64_t kHistogramBlock = 256;
constexpr int64_t kHistogramStride = 8;

/// Calibration::outputs beyond this many bytes are not kept.
constexpr std::size_t kKeptOutputBytes = std::size_t{256} << 20;

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  double hlo = 0, hhi = 0;     // the histogram's bounds: [lo, hi] over the first kBoundSamples samples
  std::vector<uint64_t> hist;  // second pass: kBins over [hlo, hhi]
  uint64_t count = 0;
  int64_t calls = 0;  // histogram() calls: which block of each stride is binned

  // Both loops run over every value of every blob of every sample (ResNet50:
  // 11 million a sample): in float, branch-free where they can be (x - x is 0
  // for finite x only), so that the compiler vectorises them.
  // (observe: GCC leaves a min or max into one value scalar without
  // -ffast-math, and branches on the finite test: it was 87% of the
  // statistics pass. Four lanes of SSE2, x86-64's baseline, where there are.)
  void observe(const float* p, int64_t n) {
    const float inf = std::numeric_limits<float>::infinity();
    float a = inf, b = -inf;
    int64_t i = 0;
#if defined(__SSE2__)
    const __m128 pos = _mm_set1_ps(inf), neg = _mm_set1_ps(-inf), zero = _mm_setzero_ps();
    __m128 a4 = pos, b4 = neg;
    for (; i + 4 <= n; i += 4) {
      const __m128 x = _mm_loadu_ps(p + i);
      const __m128 finite = _mm_cmpeq_ps(_mm_sub_ps(x, x), zero);  // (x - x is 0 for finite x only)
      a4 = _mm_min_ps(a4, _mm_or_ps(_mm_and_ps(finite, x), _mm_andnot_ps(finite, pos)));
      b4 = _mm_max_ps(b4, _mm_or_ps(_mm_and_ps(finite, x), _mm_andnot_ps(finite, neg)));
    }
    alignas(16) float la[4], lb[4];
    _mm_store_ps(la, a4);
    _mm_store_ps(lb, b4);
    a = std::min({la[0], la[1], la[2], la[3]});
    b = std::max({lb[0], lb[1], lb[2], lb[3]});
#endif
    for (; i < n; ++i) {
      const float x = p[i];
      const bool finite = x - x == 0.0f;
      a = finite && x < a ? x : a;
      b = finite && x > b ? x : b;
    }
    lo = std::min(lo, double(a));
    hi = std::max(hi, double(b));
  }
  /// Of a blob past kHistogramAll values, one block of kHistogramBlock in
  /// every kHistogramStride is binned, a different one at each call (sample):
  /// the histogram's shape and tails, at an eighth of the work (it was a
  /// quarter of calibration: ResNet50's 11 million values a sample); min and
  /// max (observe) still see every value.
  void histogram(const float* p, int64_t n) {
    if (hist.empty()) hist.assign(kBins, 0), hlo = lo, hhi = hi;
    const bool whole = n <= kHistogramAll;
    const int64_t take = whole ? n : kHistogramBlock, span = whole ? n : kHistogramBlock * kHistogramStride;
    const int64_t first = whole ? 0 : (calls++ % kHistogramStride) * kHistogramBlock;
    const double width = hhi - hlo;
    const double per = width > 0 ? kBins / width : 0.0, top = kBins - 1;
    // The bins of a block of values first, in a loop the compiler vectorises
    // (clamped as a double: values beyond the bounds may be far beyond an int;
    // a value that is not finite to bin kBins, never counted), then counted in
    // two interleaved tallies: in one, a run of one bin (a relu's zeros) waited
    // on the store of each increment. A third of a calibration was this loop.
    thread_local std::vector<uint32_t> tally;
    constexpr int64_t kBlock = 512, kMaxTallied = int64_t{1} << 31;  // (a tally fits in 32 bits)
    int32_t bin[kBlock];
    tally.resize(2 * (kBins + 1));  // (zeros: flush() leaves it so)
    uint32_t* t0 = tally.data();
    uint32_t* t1 = t0 + kBins + 1;
    int64_t tallied = 0;
    auto flush = [&] {
      for (int b = 0; b < kBins; ++b) {
        const uint64_t c = uint64_t{t0[b]} + t1[b];
        hist[static_cast<std::size_t>(b)] += c;
        count += c;
      }
      std::fill(tally.begin(), tally.end(), 0u);
      tallied = 0;
    };
    for (int64_t c0 = first; c0 < n; c0 += span)
      for (int64_t i0 = c0, end = std::min(c0 + take, n); i0 < end; i0 += kBlock) {
        const int64_t m = std::min(kBlock, end - i0);
        if (tallied + m > kMaxTallied) flush();
        for (int64_t i = 0; i < m; ++i) {
          const float x = p[i0 + i];
          const bool finite = x - x == 0.0f;
          const double at = std::min(std::max((double(finite ? x : 0.0f) - hlo) * per, 0.0), top);
          bin[i] = finite ? static_cast<int32_t>(at) : kBins;
        }
        int64_t i = 0;
        for (; i + 1 < m; i += 2) ++t0[bin[i]], ++t1[bin[i + 1]];
        if (i < m) ++t0[bin[i]];
        tallied += m;
      }
    flush();
  }
  double bin_width() const { return (hhi - hlo) / kBins; }
  double center(int i) const { return hlo + bin_width() * (i + 0.5); }

  /// [lower, upper] percentile bounds from the histogram (bin edges, conservative).
  std::pair<double, double> clipped(double percentile) const {
    if (hist.empty() || count == 0 || !(hhi > hlo)) return {lo, hi};
    const double width = bin_width();
    const double tail = (100.0 - percentile) / 100.0 * double(count);
    double a = hlo, b = hhi;
    uint64_t cum = 0;
    for (int i = 0; i < kBins; ++i) {
      cum += hist[static_cast<std::size_t>(i)];
      if (double(cum) > tail) {
        a = hlo + width * i;
        break;
      }
    }
    cum = 0;
    for (int i = kBins - 1; i >= 0; --i) {
      cum += hist[static_cast<std::size_t>(i)];
      if (double(cum) > tail) {
        b = hlo + width * (i + 1);
        break;
      }
    }
    // (an end in an edge bin, where values beyond the bounds were counted: the exact extreme)
    return {a <= hlo ? lo : a, b >= hhi ? hi : b};
  }

  /// The clipping [a, b] of least cost: each end (of the range widened to 0)
  /// shrunk towards 0 by factors 1, 0.93, 0.93^2, ... down to 0.01, one end at
  /// a time, twice over (outliers are often on one side only). Windows of fewer
  /// than `min_bins` histogram bins are not tried.
  template <class Cost>
  std::pair<double, double> search(Cost cost, int min_bins) const {
    if (hist.empty() || count == 0 || !(hhi > hlo)) return {lo, hi};
    const double a0 = std::min(hlo, 0.0), b0 = std::max(hhi, 0.0);
    double a = a0, b = b0, best = cost(a, b);
    auto consider = [&](double na, double nb) {
      if (nb - na < min_bins * bin_width()) return;
      const double c = cost(na, nb);
      if (c < best) best = c, a = na, b = nb;
    };
    for (int round = 0; round < 2; ++round) {
      for (double f = 1.0; f >= 0.01; f *= 0.93) consider(a, b0 * f);
      for (double f = 1.0; f >= 0.01; f *= 0.93) consider(a0 * f, b);
    }
    return {a, b};
  }

  /// Expected squared error of quantising the values seen into [a, b] (256
  /// levels): clipped values lose their distance to the edge, others a uniform
  /// rounding error of step^2 / 12.
  double mse(double a, double b) const {
    const double step = (b - a) / 255.0, inside = step * step / 12.0;
    double e = 0;
    for (int i = 0; i < kBins; ++i) {
      const uint64_t n = hist[static_cast<std::size_t>(i)];
      if (!n) continue;
      const double c = center(i);
      e += double(n) * (c < a ? (a - c) * (a - c) : c > b ? (c - b) * (c - b) : inside);
    }
    return e;
  }

  /// KL(P || Q): P the histogram within [a, b] with the values outside added to
  /// its edge bins, Q the histogram within [a, b] merged into 255 quantisation
  /// steps and spread back evenly over each step's non-empty bins.
  double kl(double a, double b) const {
    const double w = bin_width();
    const int i0 = std::clamp(static_cast<int>(std::floor((a - hlo) / w)), 0, kBins - 1);
    const int i1 = std::clamp(static_cast<int>(std::ceil((b - hlo) / w)), i0 + 1, kBins);
    std::vector<double> p(hist.begin() + i0, hist.begin() + i1), q(p.size(), 0.0);
    const std::vector<double> inside = p;
    for (int i = 0; i < i0; ++i) p.front() += double(hist[static_cast<std::size_t>(i)]);
    for (int i = i1; i < kBins; ++i) p.back() += double(hist[static_cast<std::size_t>(i)]);
    const double step = (b - a) / 255.0;
    auto level = [&](std::size_t k) {
      return std::clamp(static_cast<int>((center(i0 + static_cast<int>(k)) - a) / step), 0, 254);
    };
    // The bin holding 0 is a level of its own: 0 is exact on every asymmetric
    // grid, and spreading a relu's spike of zeros over its neighbours made every
    // wide window look lossy (a half-normal was clipped at 2 sigma of 4.3).
    const int64_t zero_at = static_cast<int64_t>(std::floor((0.0 - hlo) / w)) - i0;
    const bool zero_inside = zero_at >= 0 && zero_at < static_cast<int64_t>(inside.size());
    std::vector<double> total(255, 0.0), nonzero(255, 0.0);
    for (std::size_t k = 0; k < inside.size(); ++k) {
      if (zero_inside && static_cast<int64_t>(k) == zero_at) continue;
      total[static_cast<std::size_t>(level(k))] += inside[k];
      nonzero[static_cast<std::size_t>(level(k))] += inside[k] > 0;
    }
    for (std::size_t k = 0; k < inside.size(); ++k)
      if (inside[k] > 0)
        q[k] = zero_inside && static_cast<int64_t>(k) == zero_at
                   ? inside[k]
                   : total[static_cast<std::size_t>(level(k))] / nonzero[static_cast<std::size_t>(level(k))];
    double sp = 0, sq = 0;
    for (std::size_t k = 0; k < p.size(); ++k) sp += p[k], sq += q[k];
    if (sp <= 0 || sq <= 0) return std::numeric_limits<double>::infinity();
    double d = 0;
    for (std::size_t k = 0; k < p.size(); ++k) {
      if (p[k] <= 0) continue;
      const double pk = p[k] / sp, qk = std::max(q[k], 0.5) / sq;  // an empty Q bin: half a value, not infinity
      d += pk * std::log(pk / qk);
    }
    return d;
  }

  std::pair<double, double> range(RangeMethod m, double percentile) const {
    switch (m) {
      case RangeMethod::minmax: return {lo, hi};
      case RangeMethod::percentile: return clipped(percentile);
      case RangeMethod::mse: return search([this](double a, double b) { return mse(a, b); }, 1);
      // (a window of fewer bins than 2 per step cannot show what the steps lose)
      case RangeMethod::entropy: return search([this](double a, double b) { return kl(a, b); }, 512);
    }
    return {lo, hi};
  }
};

constexpr const char* kCalibrationVersion = "softneuro-calibration-v6";  // v6: histogram bounds from the first kBoundSamples samples

}  // namespace

/// What the calibration result depends on: the layers (types, wiring,
/// parameters, weight bytes), the inputs' shapes, the options and the inputs given.
std::string calibration_key(const detail::WorkingModel& net, const CalibrationOptions& options) {
  std::string s = fmt::format("{}|{}|p{}|b{}|", kCalibrationVersion, version(), options.percentile,
                              options.inputs.empty() ? options.synthetic_batches : -1);
  for (RangeMethod m : options.methods) s += fmt::format("m:{}|", to_string(m));
  for (const auto& t : net.inputs) s += fmt::format("in {} {}|", t.name, t.shape.to_string());
  for (const Layer& l : net.graph.layers) {
    s += l.name + ' ' + l.type + " <";
    for (const auto& i : l.inputs) s += i + ',';
    s += "> <";
    for (const auto& o : l.outputs) s += o + ',';
    s += ">";
    for (const auto& [k, v] : l.params)
      std::visit([&, &k = k](const auto& x) {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::vector<int64_t>> ||
                      std::is_same_v<std::decay_t<decltype(x)>, std::vector<double>>)
          s += fmt::format(" {}=[{}]", k, fmt::join(x, ","));
        else
          s += fmt::format(" {}={}", k, x);
      }, v);
    for (const auto& [k, w] : l.weights)
      s += fmt::format(" w:{}:{}:{:016x}", k, w.shape().to_string(),
                       w.data() ? core::xxh64(w.data(), w.byte_size()) : 0);
    s += '|';
  }
  for (const auto& batch : options.inputs)
    for (const auto& in : batch)
      s += fmt::format("x {} {:016x}|", in.name, in.blob.data() ? core::xxh64(in.blob.data(), in.blob.byte_size()) : 0);
  return fmt::format("{:016x}{:016x}", core::xxh64(s.data(), s.size()), core::xxh64(s.data(), s.size(), 0x9e3779b9));
}

namespace {

std::string cache_file(const std::string& dir, const std::string& key) {
  return dir + "/calibration/" + key + ".tsv";
}

using Quantisation = std::map<std::string, QuantParams>;

}  // namespace

std::optional<Calibration> load_calibration(const std::string& path, std::size_t methods) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  auto damaged = [&](const char* why) {
    core::warn("calibration cache {}: {}; calibrating again", path, why);
    return std::nullopt;
  };
  if (!std::filesystem::is_regular_file(path, ec)) return damaged("not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return damaged("cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // Last line: the checksum of everything before it.
  auto cut = text.rfind('\n', text.size() >= 2 ? text.size() - 2 : 0);
  if (cut == std::string::npos) return damaged("truncated");
  std::string body = text.substr(0, cut + 1), sum = text.substr(cut + 1);
  if (!sum.empty() && sum.back() == '\n') sum.pop_back();
  if (sum != fmt::format("{:016x}", core::xxh64(body.data(), body.size()))) return damaged("checksum mismatch");
  std::istringstream lines(body);
  std::string line;
  if (!std::getline(lines, line) || line != kCalibrationVersion) return damaged("another version");
  Calibration out;
  out.quants.resize(methods);
  while (std::getline(lines, line)) {
    // method index, blob, scale, zero point; or "mean", blob, the channel means
    std::vector<std::string> f;
    for (std::size_t a = 0;;) {
      auto b = line.find('\t', a);
      f.push_back(line.substr(a, b == std::string::npos ? std::string::npos : b - a));
      if (b == std::string::npos) break;
      a = b + 1;
    }
    if (f.size() >= 2 && f[0] == "mean") {
      std::vector<double>& means = out.channel_means[f[1]];
      for (std::size_t k = 2; k < f.size(); ++k) {
        char* end = nullptr;
        const double v = std::strtod(f[k].c_str(), &end);
        if (end == f[k].c_str() || *end || !std::isfinite(v)) return damaged("bad channel mean");
        means.push_back(v);
      }
      continue;
    }
    if (f.size() != 4) return damaged("malformed record");
    char* end = nullptr;
    const unsigned long m = std::strtoul(f[0].c_str(), &end, 10);
    const float scale = std::strtof(f[2].c_str(), &end);
    const long zp = std::strtol(f[3].c_str(), &end, 10);
    if (m >= methods || !core::quant_scale_in_range(scale) || zp < -128 || zp > 127) return damaged("bad record");
    QuantParams q;
    q.scales = {scale};
    q.zero_points = {static_cast<int32_t>(zp)};
    q.axis = -1;
    out.quants[m][f[1]] = q;
  }
  for (const auto& q : out.quants)
    if (q.empty()) return damaged("a method without records");
  return out;
}

namespace {

void save_calibration(const std::string& path, const Calibration& c) {
  std::string body = std::string(kCalibrationVersion) + "\n";
  for (std::size_t m = 0; m < c.quants.size(); ++m)
    for (const auto& [name, q] : c.quants[m]) body += fmt::format("{}\t{}\t{:.9g}\t{}\n", m, name, q.scales.at(0), q.zero_points.at(0));
  for (const auto& [name, means] : c.channel_means) {
    body += "mean\t" + name;
    for (double v : means) body += fmt::format("\t{:.17g}", v);
    body += "\n";
  }
  body += fmt::format("{:016x}\n", core::xxh64(body.data(), body.size()));
  try {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    core::write_file_atomically(path, body.data(), body.size());
  } catch (const std::exception& e) {
    core::warn("could not save the calibration to {}: {}", path, e.what());
  }
}

/// The part of a blob's range its consumers can tell apart: when every
/// consumer is a relu (or a clip), values below 0 (outside [min, max]) all give
/// the same result, so the range can stop there and the 256 levels cover only
/// what matters — what a framework gets by fusing the relu into the producer's
/// requantisation (e.g. ResNet's add -> relu: the add's negative half is wasted
/// otherwise). Net outputs keep their full range.
std::pair<double, double> consumer_range(const core::Graph& g, const std::string& blob, double lo, double hi) {
  if (std::find(g.outputs.begin(), g.outputs.end(), blob) != g.outputs.end()) return {lo, hi};
  double floor = std::numeric_limits<double>::infinity(), ceil = -std::numeric_limits<double>::infinity();
  int consumers = 0;
  for (const Layer& l : g.layers) {
    if (std::find(l.inputs.begin(), l.inputs.end(), blob) == l.inputs.end()) continue;
    ++consumers;
    double a = -std::numeric_limits<double>::infinity(), b = std::numeric_limits<double>::infinity();
    if (l.type == "relu") {
      a = 0;
    } else if (l.type == "clip") {
      a = l.get_float("min", -std::numeric_limits<double>::infinity());
      b = l.get_float("max", std::numeric_limits<double>::infinity());
    } else {
      return {lo, hi};  // some consumer reads every value
    }
    floor = std::min(floor, a);
    ceil = std::max(ceil, b);
  }
  if (consumers == 0) return {lo, hi};
  const double nlo = std::max(lo, floor), nhi = std::min(hi, ceil);
  return nlo < nhi ? std::make_pair(nlo, nhi) : std::make_pair(lo, hi);
}

/// Whether every output value of `l` is one of its first input's values (or a
/// zero fill), so its outputs can share the input's quantisation.
bool moves_values(const Layer& l) {
  static const std::set<std::string> kMoves = {"reshape", "flatten", "squeeze", "unsqueeze", "transpose", "split",
                                               "slice",   "identity", "depth_to_space", "space_to_depth"};
  if (kMoves.count(l.type)) return true;
  if (l.type == "pool2") return l.get_string("mode") == "max" && l.outputs.size() == 1;
  // TensorFlow Lite's int8 bilinear resize has its own grids.
  if (l.type == "resize") return l.get_string("mode", "nearest") == "nearest" && !core::requantizes_as_tflite(l);
  if (l.type == "pad") return l.get_string("mode", "constant") != "constant" || l.get_float("value", 0.0) == 0.0;
  return false;
}

}  // namespace

namespace {

/// The size of the smallest table that net input `name` indexes (through
/// layers that only move values), or 0 where it indexes none.
int64_t index_bound(const core::Graph& g, const std::string& name) {
  static const std::set<std::string> moves = {"reshape", "flatten", "identity", "transpose", "split", "concat"};
  std::map<std::string, Shape> shapes;
  std::set<std::string> reach = {name};
  int64_t bound = 0;
  for (bool grew = true; grew;) {
    grew = false;
    for (const Layer& l : g.layers) {
      for (std::size_t k = 0; k < l.inputs.size(); ++k) {
        if (!reach.count(l.inputs[k])) continue;
        // The indices: input 1, or a gather's one input where its table is the weight "table".
        const bool table_weight = l.type == "gather" && l.inputs.size() == 1 && l.find_weight("table");
        if (((l.type == "gather" || l.type == "gather_elements") && k == 1) || (table_weight && k == 0)) {
          if (shapes.empty()) shapes = core::infer_shapes(g);
          const Shape& data = table_weight ? l.weight("table").shape() : shapes.at(l.inputs[0]);
          int64_t axis = l.get_int("axis", 0);
          if (axis < 0) axis += data.rank();
          if (axis >= 0 && axis < data.rank()) bound = bound == 0 ? data[static_cast<int>(axis)] : std::min(bound, data[static_cast<int>(axis)]);
        } else if (moves.count(l.type)) {
          for (const auto& o : l.outputs) grew = reach.insert(o).second || grew;
        }
      }
    }
  }
  return bound;
}

template <class T>
void fill_ints(Blob& b, const std::function<int64_t()>& draw) {
  T* p = b.data_as<T>();
  for (int64_t i = 0; i < b.numel(); ++i) p[i] = static_cast<T>(draw());
}

}  // namespace

Blob synthetic_input(const TensorInfo& t, const core::Graph& graph, std::mt19937& rng,
                     const std::function<float(std::mt19937&)>& real) {
  if (!is_integer(t.dtype) || is_narrow(t.dtype)) {
    Blob x = Blob::allocate(t.shape);
    float* p = x.data_as<float>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = real(rng);
    if (t.dtype != DType::float64) return x;
    Blob d = Blob::allocate(t.shape, DType::float64);
    std::copy(p, p + x.numel(), d.data_as<double>());
    return d;
  }
  const int64_t bound = t.dtype == DType::boolean ? 0 : index_bound(graph, t.name);
  std::function<int64_t()> draw = [] { return int64_t{1}; };
  if (bound > 0) draw = [&rng, bound] { return std::uniform_int_distribution<int64_t>(0, bound - 1)(rng); };
  Blob x = Blob::allocate(t.shape, t.dtype);
  switch (t.dtype) {
    case DType::int64: fill_ints<int64_t>(x, draw); break;
    case DType::int32: fill_ints<int32_t>(x, draw); break;
    case DType::int16: fill_ints<int16_t>(x, draw); break;
    case DType::int8: fill_ints<int8_t>(x, draw); break;
    case DType::uint8: case DType::boolean: fill_ints<uint8_t>(x, draw); break;
    case DType::uint16: fill_ints<uint16_t>(x, draw); break;
    case DType::uint32: fill_ints<uint32_t>(x, draw); break;
    case DType::uint64: fill_ints<uint64_t>(x, draw); break;
    default: throw Error(fmt::format("no synthetic values for an input of type {}", to_string(t.dtype)), {}, {}, t.name);
  }
  return x;
}

std::vector<std::vector<NamedBlob>> synthetic_inputs(const detail::WorkingModel& net, int batches, unsigned first) {
  std::vector<std::vector<NamedBlob>> out;
  for (int b = 0; b < std::max(1, batches); ++b) {
    std::mt19937 rng(0x5eedu + first + static_cast<unsigned>(b));
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<NamedBlob> batch;
    for (const auto& t : net.inputs)
      batch.push_back({t.name, synthetic_input(t, net.graph, rng, [&d](std::mt19937& r) { return d(r); })});
    out.push_back(std::move(batch));
  }
  return out;
}


QuantParams quant_from_range(double lo, double hi) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 0;  // nothing observed
  double scale = (hi - lo) / 255.0;
  if (!(scale > 0)) scale = 1.0 / 255.0;  // max == min (== 0)
  // The loader's range (quant_scale_in_range): a wider range saturates, a
  // narrower one rounds to the zero point, and the file written loads.
  float s = static_cast<float>(std::clamp(scale, 1e-30, 1e30));
  if (!core::quant_scale_in_range(s)) s = std::nextafter(s, 1.0f);  // rounded to float just outside
  double zp = std::nearbyint(-128.0 - lo / double(s));
  QuantParams q;
  q.scales = {s};
  q.zero_points = {static_cast<int32_t>(std::clamp(zp, -128.0, 127.0))};
  q.axis = -1;
  return q;
}

core::Graph every_value_out(const core::Graph& graph) {
  core::Graph g = graph;
  g.output_dtypes.clear();  // every value as the float32 the layers compute
  std::set<std::string> seen(g.outputs.begin(), g.outputs.end());
  for (const Layer& l : g.layers) {
    if (l.type == "constant") continue;
    for (const auto& o : l.outputs)
      if (!o.empty() && seen.insert(o).second) g.outputs.push_back(o);
  }
  std::set<std::string> direct;
  for (const auto& in : g.inputs) direct.insert(in.name);
  for (const Layer& l : g.layers)
    if (l.type == "constant") direct.insert(l.outputs[0]);
  std::erase_if(g.outputs, [&](const std::string& o) { return direct.count(o) > 0; });
  return g;
}

namespace {

/// The sum of the finite values among n at p: blocks of 256 summed in 8 float
/// lanes (a loop the compiler vectorises), each block's sum added in double.
/// (A value at a time in double, with a branch per value, was most of
/// calibration's statistics pass after the histograms.)
double finite_sum(const float* p, int64_t n) {
  double sum = 0;
  for (int64_t i0 = 0; i0 < n; i0 += 256) {
    const int64_t m = std::min<int64_t>(256, n - i0);
    float lane[8] = {};
    int64_t i = 0;
    for (; i + 8 <= m; i += 8)
      for (int l = 0; l < 8; ++l) {
        const float x = p[i0 + i + l];
        lane[l] += x - x == 0.0f ? x : 0.0f;  // (x - x is 0 for finite x only)
      }
    for (; i < m; ++i) {
      const float x = p[i0 + i];
      lane[0] += x - x == 0.0f ? x : 0.0f;
    }
    double block = 0;
    for (float v : lane) block += v;
    sum += block;
  }
  return sum;
}

/// Channel sums of conv2 and dense inputs (axis 1; dense: the last axis), for
/// bias correction: their means over every value calibration sees.
class ChannelMeans {
 public:
  explicit ChannelMeans(const detail::WorkingModel& net) {
    for (const Layer& l : net.graph.layers)
      if ((l.type == "conv2" || l.type == "dense") && !l.inputs.empty() && net.shapes.count(l.inputs[0]) &&
          !sums_.count(l.inputs[0])) {
        const Shape& x = net.shapes.at(l.inputs[0]);
        if (x.rank() < 2) continue;
        Sums& c = sums_[l.inputs[0]];
        c.last_axis = l.type == "dense";
        c.sums.assign(static_cast<std::size_t>(c.last_axis ? x[x.rank() - 1] : x[1]), 0.0);
      }
  }
  /// Adds blob `name`'s values, where a layer reads it (threads may add different blobs at once).
  void add(const std::string& name, const Blob& b) {
    auto it = sums_.find(name);
    if (it == sums_.end()) return;
    Sums& c = it->second;
    const int64_t channels = static_cast<int64_t>(c.sums.size());
    if (channels == 0 || b.numel() % channels) return;
    const int64_t inner = c.last_axis ? 1 : b.numel() / std::max<int64_t>(1, b.shape()[0] * channels);
    const float* p = b.data_as<float>();
    // Runs of `inner` values of one channel, channel after channel (no division per value).
    for (int64_t i = 0, ch = 0; i < b.numel(); i += inner, ch = ch + 1 == channels ? 0 : ch + 1)
      c.sums[static_cast<std::size_t>(ch)] += finite_sum(p + i, inner);
    c.per_channel += double(b.numel()) / double(channels);
  }
  std::map<std::string, std::vector<double>> means() && {
    std::map<std::string, std::vector<double>> out;
    for (auto& [name, c] : sums_) {
      if (!(c.per_channel > 0)) continue;  // a constant input: nothing seen
      for (double& v : c.sums) v /= c.per_channel;
      out[name] = std::move(c.sums);
    }
    return out;
  }

 private:
  struct Sums {
    std::vector<double> sums;
    double per_channel = 0;  ///< values added to each sum
    bool last_axis = false;
  };
  std::map<std::string, Sums> sums_;
};

/// One quantisation per range method from what calibration saw of each blob.
std::vector<Quantisation> quantisations(const core::Graph& graph, std::map<std::string, Range>& ranges,
                                        const CalibrationOptions& options) {
  std::vector<Quantisation> out;
  const std::set<std::string> net_outputs(graph.outputs.begin(), graph.outputs.end());
  for (RangeMethod m : options.methods) {
    Quantisation q;
    for (auto& [name, r] : ranges) {
      // Net outputs keep every value seen: their rare extremes (the winning
      // class's score) are what the user reads, and clipping them cost the
      // PP-OCR recogniser's softmax most of its argmax under the entropy method.
      auto [lo, hi] = net_outputs.count(name) ? std::make_pair(r.lo, r.hi) : r.range(m, options.percentile);
      std::tie(lo, hi) = consumer_range(graph, name, lo, hi);
      q[name] = quant_from_range(lo, hi);
    }
    // A layer that only moves values (a max pooling, a nearest resize, a
    // reshape, ...) outputs some of its input's values: its outputs keep the
    // input's quantisation (what ONNX Runtime's QDQ rules do too), so no
    // routine requantises after it (XNNPACK's int8 max pooling then ran a
    // requantisation pass of its own: ResNet50's took 0.6 ms instead of 0.05),
    // and its int8 routines, which need one quantisation in and out, run it
    // under every range method, not only under the one the tuner priced.
    for (const Layer& l : graph.layers)
      if (moves_values(l) && !l.inputs.empty())
        if (auto in = q.find(l.inputs[0]); in != q.end())
          for (const auto& o : l.outputs)
            if (q.count(o)) q[o] = in->second;
    out.push_back(std::move(q));
  }
  return out;
}

}  // namespace

Calibration calibrate(detail::WorkingModel& net, const CalibrationOptions& options, const std::string& cache_dir) {
  if (options.methods.empty()) throw Error("no range method to calibrate with", net.file, {}, "methods");
  if (!(options.percentile > 50 && options.percentile <= 100))
    throw Error(fmt::format("calibration percentile {} is not in (50, 100]", options.percentile), net.file, {}, "percentile");
  const bool cached = !cache_dir.empty() && cache_dir != "-";
  const std::string path = cached ? cache_file(cache_dir, calibration_key(net, options)) : std::string();
  // A quantised model's own scales are what its int8 layers compute with:
  // calibration ranges the other blobs only.
  const Quantisation own = core::model_quantisation(net.graph);
  auto keep_own = [&own](Quantisation& q) {
    for (const auto& [blob, p] : own) q[blob] = p;
  };
  if (cached) {
    if (auto c = load_calibration(path, options.methods.size())) {
      for (Quantisation& q : c->quants) keep_own(q);
      net.tuning.blob_quant = c->quants.front();
      core::info("calibration of {} blobs read from {}", net.tuning.blob_quant.size(), path);
      net.changed();
      return std::move(*c);
    }
  }
  // A private copy of the graph with the default float32 routines (not the
  // cpu/ref oracle: ranges do not need its exactness, and it took ~100 s of a
  // ResNet50 tuning), every layer output made a net output so that the run
  // leaves it in our memory.
  // (Outputs that are constants or net inputs are measured from their data directly.)
  const core::Graph g = every_value_out(net.graph);
  const std::vector<std::string>& outs = g.outputs;
  core::Executor exec(core::build_plan(g, core::Tuning{}, net.shapes, nullptr, net.plan_options(false)));
  std::vector<NamedBlob> results;
  for (const auto& o : outs) results.push_back({o, Blob::allocate(net.shapes.at(o))});

  auto given = options.inputs.empty() ? synthetic_inputs(net, options.synthetic_batches) : options.inputs;
  std::map<std::string, Range> ranges;
  ChannelMeans channel_means(net);
  std::vector<Range*> result_ranges;  // made before the threads share the map
  for (const auto& o : results) result_ranges.push_back(&ranges[o.name]);
  // Min and max first (over the first kBoundSamples samples where a method
  // needs histograms); then, where one does, a pass over every sample fills
  // histograms within those bounds, extending min and max.
  const bool histograms = std::any_of(options.methods.begin(), options.methods.end(), [](RangeMethod m) { return m != RangeMethod::minmax; });
  // The net's outputs among the results, kept from the last pass (Calibration::outputs).
  std::vector<std::size_t> net_outputs;
  std::size_t output_bytes = 0;
  for (const auto& o : net.graph.outputs) {
    auto it = std::find_if(results.begin(), results.end(), [&](const NamedBlob& r) { return r.name == o; });
    if (it == results.end()) break;
    net_outputs.push_back(static_cast<std::size_t>(it - results.begin()));
    output_bytes += it->blob.byte_size();
  }
  const bool keep_outputs = net.graph.output_dtypes.empty() && net_outputs.size() == net.graph.outputs.size() &&
                            output_bytes * given.size() <= kKeptOutputBytes;
  std::vector<std::vector<NamedBlob>> kept_outputs;
  for (int pass = 0; pass < (histograms ? 2 : 1); ++pass) {
    const bool last = pass == (histograms ? 1 : 0);
    const std::size_t samples = histograms && pass == 0 ? std::min(given.size(), kBoundSamples) : given.size();
    for (std::size_t k = 0; k < samples; ++k) {
      const auto& batch = given[k];
      for (const auto& in : batch) {
        if (in.blob.layout() != Layout::nchw || !in.blob.data())
          throw Error(fmt::format("calibration input '{}' must be nchw with memory", in.name), net.file, {}, in.name);
        // Integer inputs (token ids, masks) index and select: nothing quantises them.
        if (in.blob.dtype() != DType::float32) continue;
        Range& r = ranges[in.name];
        if (pass == 1) r.histogram(in.blob.data_as<float>(), in.blob.numel());  // (its bounds from pass 0)
        r.observe(in.blob.data_as<float>(), in.blob.numel());
        if (last) channel_means.add(in.name, in.blob);
      }
      try {
        exec.run(batch, results);
      } catch (const Error& e) {
        throw e.file().empty() ? e.with_file(net.file) : e;
      }
      if (last && keep_outputs) {
        std::vector<NamedBlob>& mine = kept_outputs.emplace_back();
        for (std::size_t i : net_outputs) mine.push_back({results[i].name, results[i].blob.clone()});
      }
      // Each blob's statistics are its own: over the threads (one took 30% of
      // a ResNet50 calibration while the other waited).
      core::global_pool().parallel_for(static_cast<int64_t>(results.size()), 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const NamedBlob& o = results[static_cast<std::size_t>(i)];
          Range& r = *result_ranges[static_cast<std::size_t>(i)];
          if (pass == 1) r.histogram(o.blob.data_as<float>(), o.blob.numel());  // (its bounds from pass 0)
          r.observe(o.blob.data_as<float>(), o.blob.numel());
          if (last) channel_means.add(o.name, o.blob);
        }
      });
    }
  }
  // Constants: their values are their range.
  for (const Layer& l : net.graph.layers) {
    if (l.type != "constant") continue;
    const Blob* v = l.find_weight("value");
    if (!v || v->dtype() != DType::float32 || !v->data()) continue;
    ranges[l.outputs[0]].observe(v->data_as<float>(), v->numel());
  }

  Calibration result;
  result.quants = quantisations(net.graph, ranges, options);
  for (Quantisation& q : result.quants) keep_own(q);
  result.channel_means = std::move(channel_means).means();
  result.outputs = std::move(kept_outputs);
  net.tuning.blob_quant = result.quants.front();
  std::vector<std::string> names;
  for (RangeMethod m : options.methods) names.push_back(to_string(m));
  core::info("calibrated {} blobs on {} batch(es), range method{} {}", net.tuning.blob_quant.size(), given.size(),
             names.size() == 1 ? "" : "s", fmt::join(names, ", "));
  if (cached) save_calibration(path, result);
  net.changed();  // prepared again, with the quantisation, at the next run
  return result;
}

Blob corrected_bias(const Layer& l, const Blob& grid, const std::vector<double>& means) {
  const Blob& w = l.weight("weight");
  const Shape& s = w.shape();
  const int64_t oc = s[0], k = w.numel() / std::max<int64_t>(1, oc);
  const int64_t group = l.type == "conv2" ? l.get_int("group", 1) : 1;
  const int64_t icg = s.rank() >= 2 ? s[1] : 1, taps = k / std::max<int64_t>(1, icg), per_group = oc / std::max<int64_t>(1, group);
  if (static_cast<int64_t>(means.size()) != icg * group || grid.shape() != s)
    throw Error(fmt::format("{} channel means for {} input channels", means.size(), icg * group), {}, l.name, "bias");
  Blob b = Blob::allocate(Shape{oc});
  const Blob* bias = l.find_weight("bias");
  for (int64_t o = 0; o < oc; ++o) {
    const int64_t first = o / per_group * icg;
    double shift = 0;
    for (int64_t i = 0; i < k; ++i)
      shift += (double(grid.data_as<float>()[o * k + i]) - double(w.data_as<float>()[o * k + i])) *
               means[static_cast<std::size_t>(first + i / taps)];
    b.data_as<float>()[o] = static_cast<float>((bias ? double(bias->data_as<float>()[o]) : 0.0) - shift);
  }
  return b;
}

}  // namespace profiler

Model calibrate(const Model& model, const CalibrationOptions& options) {
  auto work = detail::WorkingModel::of(detail::impl_of(model));
  const std::shared_ptr<const core::RoutineRegistry> given = work->registry;
  work->registry = work->routines();  // one set of routines for every plan of the calibration
  profiler::calibrate(*work, options, {});
  work->registry = given;
  return work->to_model();
}

Blob synthetic_input(const Model& model, const TensorInfo& input, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  return profiler::synthetic_input(input, detail::impl_of(model).graph, rng,
                                   [&normal](std::mt19937& r) { return normal(r); });
}

const char* to_string(RangeMethod m) {
  switch (m) {
    case RangeMethod::minmax: return "minmax";
    case RangeMethod::percentile: return "percentile";
    case RangeMethod::mse: return "mse";
    case RangeMethod::entropy: return "entropy";
  }
  return "?";
}

}  // namespace softneuro
