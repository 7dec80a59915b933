// Net::calibrate(): run the float32 net with its default (fast) float32
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
#include "core/log.hpp"

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

namespace softneuro {
namespace profiler {
namespace {

constexpr int kBins = 2048;

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  std::vector<uint64_t> hist;  // percentile pass: kBins over [lo, hi]
  uint64_t count = 0;

  void observe(const float* p, int64_t n) {
    double a = lo, b = hi;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(p[i])) continue;
      a = std::min(a, double(p[i]));
      b = std::max(b, double(p[i]));
    }
    lo = a;
    hi = b;
  }
  void histogram(const float* p, int64_t n) {
    if (hist.empty()) hist.assign(kBins, 0);
    const double width = hi - lo;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(p[i])) continue;
      int bin = width > 0 ? static_cast<int>((double(p[i]) - lo) / width * kBins) : 0;
      ++hist[static_cast<std::size_t>(std::clamp(bin, 0, kBins - 1))];
      ++count;
    }
  }
  /// [lower, upper] percentile bounds from the histogram (bin edges, conservative).
  std::pair<double, double> clipped(double percentile) const {
    if (hist.empty() || count == 0 || !(hi > lo)) return {lo, hi};
    const double width = (hi - lo) / kBins;
    const double tail = (100.0 - percentile) / 100.0 * double(count);
    double a = lo, b = hi;
    uint64_t cum = 0;
    for (int i = 0; i < kBins; ++i) {
      cum += hist[static_cast<std::size_t>(i)];
      if (double(cum) > tail) {
        a = lo + width * i;
        break;
      }
    }
    cum = 0;
    for (int i = kBins - 1; i >= 0; --i) {
      cum += hist[static_cast<std::size_t>(i)];
      if (double(cum) > tail) {
        b = lo + width * (i + 1);
        break;
      }
    }
    return {std::max(lo, a), std::min(hi, b)};
  }
};

constexpr const char* kCalibrationVersion = "softneuro-calibration-v2";  // v2: ranges clipped to what relu/clip consumers tell apart

/// What the calibration result depends on: the layers (types, wiring,
/// parameters, weight bytes), the inputs' shapes, the options and the inputs given.
std::string calibration_key(const detail::NetImpl& net, const CalibrationOptions& options) {
  std::string s = fmt::format("{}|{}|p{}|b{}|", kCalibrationVersion, version(), options.percentile,
                              options.inputs.empty() ? options.synthetic_batches : -1);
  for (const auto& t : net.inputs) s += fmt::format("in {} {}|", t.name, t.shape.to_string());
  for (const Layer& l : net.graph.layers) {
    s += l.name + ' ' + l.type + " <";
    for (const auto& i : l.inputs) s += i + ',';
    s += "> <";
    for (const auto& o : l.outputs) s += o + ',';
    s += ">";
    for (const auto& [k, v] : l.params)
      std::visit([&](const auto& x) {
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

std::string cache_file(const std::string& dir, const std::string& key) {
  return dir + "/calibration/" + key + ".tsv";
}

/// The cached quantisation, or nothing (missing, damaged: warned and ignored).
std::optional<std::map<std::string, QuantParams>> load_calibration(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // Last line: the checksum of everything before it.
  auto cut = text.rfind('\n', text.size() >= 2 ? text.size() - 2 : 0);
  auto damaged = [&](const char* why) {
    core::warn("calibration cache {}: {}; calibrating again", path, why);
    return std::nullopt;
  };
  if (cut == std::string::npos) return damaged("truncated");
  std::string body = text.substr(0, cut + 1), sum = text.substr(cut + 1);
  if (!sum.empty() && sum.back() == '\n') sum.pop_back();
  if (sum != fmt::format("{:016x}", core::xxh64(body.data(), body.size()))) return damaged("checksum mismatch");
  std::istringstream lines(body);
  std::string line;
  if (!std::getline(lines, line) || line != kCalibrationVersion) return damaged("another version");
  std::map<std::string, QuantParams> out;
  while (std::getline(lines, line)) {
    auto a = line.find('\t'), b = line.find('\t', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos) return damaged("malformed record");
    char* end = nullptr;
    float scale = std::strtof(line.c_str() + a + 1, &end);
    long zp = std::strtol(line.c_str() + b + 1, &end, 10);
    if (!(scale > 0) || zp < -128 || zp > 127) return damaged("bad record");
    QuantParams q;
    q.scales = {scale};
    q.zero_points = {static_cast<int32_t>(zp)};
    q.axis = -1;
    out[line.substr(0, a)] = q;
  }
  return out;
}

void save_calibration(const std::string& path, const std::map<std::string, QuantParams>& quant) {
  std::string body = std::string(kCalibrationVersion) + "\n";
  for (const auto& [name, q] : quant) body += fmt::format("{}\t{:.9g}\t{}\n", name, q.scales.at(0), q.zero_points.at(0));
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

}  // namespace

std::vector<std::vector<NamedBlob>> synthetic_inputs(const detail::NetImpl& net, int batches, unsigned first) {
  std::vector<std::vector<NamedBlob>> out;
  for (int b = 0; b < std::max(1, batches); ++b) {
    std::mt19937 rng(0x5eedu + first + static_cast<unsigned>(b));
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<NamedBlob> batch;
    for (const auto& t : net.inputs) {
      Blob x = Blob::allocate(t.shape);
      float* p = x.data_as<float>();
      for (int64_t i = 0; i < x.numel(); ++i) p[i] = d(rng);
      batch.push_back({t.name, x});
    }
    out.push_back(std::move(batch));
  }
  return out;
}


QuantParams quant_from_range(double lo, double hi) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 0;  // nothing observed
  double scale = (hi - lo) / 255.0;
  if (!(scale > 0) || !std::isfinite(float(scale)) || float(scale) <= 0) scale = 1.0 / 255.0;  // max == min (== 0)
  const float s = static_cast<float>(scale);
  double zp = std::nearbyint(-128.0 - lo / double(s));
  QuantParams q;
  q.scales = {s};
  q.zero_points = {static_cast<int32_t>(std::clamp(zp, -128.0, 127.0))};
  q.axis = -1;
  return q;
}

void calibrate(detail::NetImpl& net, const CalibrationOptions& options, const std::string& cache_dir) {
  if (!(options.percentile > 0 && options.percentile <= 100))
    throw Error(fmt::format("calibration percentile {} is not in (0, 100]", options.percentile), net.file, {},
                "percentile");
  const bool cached = !cache_dir.empty() && cache_dir != "-";
  const std::string path = cached ? cache_file(cache_dir, calibration_key(net, options)) : std::string();
  if (cached) {
    if (auto quant = load_calibration(path)) {
      net.graph.blob_quant = std::move(*quant);
      core::info("calibration of {} blobs read from {}", net.graph.blob_quant.size(), path);
      net.changed();
      return;
    }
  }
  // A private copy of the graph with the default float32 routines (not the
  // cpu/ref oracle: ranges do not need its exactness, and it took ~100 s of a
  // ResNet50 tuning), every layer output made a net output so that the run
  // leaves it in our memory.
  core::Graph g = net.graph;
  g.routine_path = {};
  g.blob_quant.clear();
  std::set<std::string> seen(g.outputs.begin(), g.outputs.end());
  for (const Layer& l : g.layers) {
    if (l.type == "constant") continue;
    for (const auto& o : l.outputs)
      if (seen.insert(o).second) g.outputs.push_back(o);
  }
  // Outputs that are constants or net inputs are measured from their data directly.
  std::set<std::string> direct;
  for (const auto& in : g.inputs) direct.insert(in.name);
  for (const Layer& l : g.layers)
    if (l.type == "constant") direct.insert(l.outputs[0]);
  std::vector<std::string> outs;
  for (const auto& o : g.outputs)
    if (!direct.count(o)) outs.push_back(o);
  g.outputs = outs;

  core::Executor exec(g, net.shapes);
  std::vector<NamedBlob> results;
  for (const auto& o : outs) results.push_back({o, Blob::allocate(net.shapes.at(o))});

  auto given = options.inputs.empty() ? synthetic_inputs(net, options.synthetic_batches) : options.inputs;
  std::map<std::string, Range> ranges;
  const bool clip = options.percentile < 100;
  for (int pass = 0; pass < (clip ? 2 : 1); ++pass) {
    for (const auto& batch : given) {
      for (const auto& in : batch) {
        if (in.blob.dtype() != DType::float32 || in.blob.layout() != Layout::nchw || !in.blob.data())
          throw Error(fmt::format("calibration input '{}' must be float32 nchw with memory", in.name), net.file, {},
                      in.name);
        Range& r = ranges[in.name];
        pass == 0 ? r.observe(in.blob.data_as<float>(), in.blob.numel())
                  : r.histogram(in.blob.data_as<float>(), in.blob.numel());
      }
      try {
        exec.run(batch, results);
      } catch (const Error& e) {
        throw e.file().empty() ? e.with_file(net.file) : e;
      }
      for (const auto& o : results) {
        Range& r = ranges[o.name];
        pass == 0 ? r.observe(o.blob.data_as<float>(), o.blob.numel())
                  : r.histogram(o.blob.data_as<float>(), o.blob.numel());
      }
    }
  }
  // Constants: their values are their range.
  for (const Layer& l : net.graph.layers) {
    if (l.type != "constant") continue;
    const Blob* v = l.find_weight("value");
    if (!v || v->dtype() != DType::float32 || !v->data()) continue;
    ranges[l.outputs[0]].observe(v->data_as<float>(), v->numel());
  }

  net.graph.blob_quant.clear();
  for (auto& [name, r] : ranges) {
    auto [lo, hi] = clip && name.size() && !r.hist.empty() ? r.clipped(options.percentile) : std::make_pair(r.lo, r.hi);
    std::tie(lo, hi) = consumer_range(net.graph, name, lo, hi);
    net.graph.blob_quant[name] = quant_from_range(lo, hi);
  }
  core::info("calibrated {} blobs on {} batch(es){}", net.graph.blob_quant.size(), given.size(),
             clip ? fmt::format(", {}th percentile", options.percentile) : std::string());
  if (cached) save_calibration(path, net.graph.blob_quant);
  net.changed();  // prepared again, with the quantisation, at the next run
}

}  // namespace profiler

void Net::calibrate(const CalibrationOptions& options) { profiler::calibrate(*impl_, options, {}); }

}  // namespace softneuro
