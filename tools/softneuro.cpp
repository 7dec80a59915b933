// softneuro — the command-line program: inspect and run .dnn files.
// Uses only the public API, as an app would.
#include <softneuro/import.hpp>
#include <softneuro/softneuro.hpp>
#include <softneuro/routine.hpp>  // registered_routines, Schema: the CLI lists and checks routines
#include <softneuro/tune.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <unistd.h>

namespace sn = softneuro;

namespace {

const char* kUsage = R"(usage: softneuro [--plugin LIB.so ...] COMMAND ...

commands:
  --version                 print the library version
  inspect FILE [--verbose]  layers, shapes, parameters and the routine path;
                            --verbose: every routine per layer in the untuned default's
                            order (tier 1 first; src/routines/default_order.cpp), and why not
  report FILE --svg OUT.svg the routine path as a picture: steps coloured by schema,
                            adapts with their cost, edges, tuned times per step
  routines [LAYER_TYPE]     this device's fingerprint (CPU, ISA extensions), then the
                            descriptors of the registered routines (plugins included)
  import MODEL.onnx|MODEL.tflite -o OUT.dnn [options]
                            translate an ONNX model (opsets 11..28) or a TensorFlow
                            Lite model (told apart by the file's contents) and save it
      --input-shape NAME=1x3x48x?      fixes an input's symbolic dims; '?' keeps one dynamic.
                            Symbolic dims stay dynamic where the model runs at any size
                            of them; dims naming one size (ONNX dim_param) vary together, and
                            'past + 1' is a sum (default size: 1 for a name that is a leading
                            dim, 64 for others, else the first common size the graph takes)
      --no-passes           skip the graph passes (folding, fusion, clean-up)
  tune IN.dnn -o OUT.dnn [options]
                            measure routines on this device, pick the fastest routine path (DPRS)
      --schemas A,B,...     schemas to consider, or globs over device:dtype:layout
                            (default: every float32 CPU schema, i.e. cpu:float32:*, and cpu:qint8:* too for a
                            model its author quantised (ONNX QDQ); hybrid: cpu:float32:*,cpu:qint8:*, which also
                            allows float32 dense layers with int8 products, cpu/dynamic_int8)
      --cache DIR           profile cache folder ('-': none; default $SOFTNEURO_CACHE_DIR or ~/.cache/softneuro)
      --candidates K        candidates per layer and schema kept for integrated profiling (default 2)
      --unit-budget-ms X    measuring time per candidate (default 15)
      --time-budget S       overall budget in seconds (default: none)
      --pin LAYER=DESC      layers matching LAYER (glob) may only use descriptors matching DESC
      --ban LAYER=DESC      layers matching LAYER never use descriptors matching DESC
      --report FILE         write the tuning report as text (default: print it)
      --json FILE           write the tuning report as JSON
      --threads T           threads to tune for
      --calibration DIR     samples: a float32 .npy each, or one .npz per sample naming every input;
                            every fourth validates the accuracy budget, the others calibrate qint8
                            (without it nothing below float32 is chosen, unless --accuracy none)
      --accuracy M:V        budget for qint8, float16 and bfloat16 paths against float32: top1:0.99
                            (with qint8), seq:0.95 (with qint8, outputs of several positions per
                            sample: the whole argmax sequence; ctc:0.95 where a CTC blank wins most
                            positions: the line a greedy decoder reads), cosine:0.999 (without qint8, or
                            outputs straight from a layer norm: hidden states), rel-l2:0.02, or none (allowed unchecked); a path that misses it is not kept
      --min-reduced-gain F  keep a path below float32 only where it is predicted at least F faster
                            than the fastest float32 one (default 0.02: 2%); else float32, and no
                            time spent calibrating every sample or checking the budget (0: any gain)
      --keep-float-weights  keep float32 weights where layers run in qint8 (default: stored as int8
                            and per-channel scales, the values the qint8 routines compute with)
      --no-prepared-weights store the layers' weights only (default: also the routine path's derived
                            weights, packed and transformed, so that sessions start at once on a CPU
                            with these extensions; a larger file)
      --shapes NAME=S1,S2   input shapes to tune at, one routine path each (a model with dynamic
                            dims; e.g. x=1x3x48x320,1x3x48x640); other shapes run the nearest one's
  run FILE [options]        run a net and print its outputs and latency
      --input NAME=x.npy    an input (default: seeded random normal values; integer inputs as tuning
                            draws them: token ids below their table's size, masks 1); NAME=a.npy,b.npy,...:
                            input sets run one after another in the one session (shapes may differ)
      --output NAME=y.npy   write an output (several input sets: y.0.npy, y.1.npy, ...)
      --repeat N            timed runs after one warm-up (default 10)
      --threads T           threads (default: all cores)
      --seed S              seed of the random inputs (default 0)
      --top K               top-K entries printed per output (default 5)
      --schemas A,B,...     schemas the session may compute in (e.g. 'cpu:float32:*': a quantised
                            model's layers in float32, as without its int8 default)
      --steps FILE.tsv      write each step's median time over the runs (layer, type, routine,
                            routine parameters, the step it is fused into, ms), steps timed one by one
  bench FILE [options]      latency and throughput: N sessions of one model, each in its own thread;
                            outputs checked identical across sessions and runs; per-run percentiles
      --sessions N          sessions (default 1: latency mode)
      --threads T           threads per session (default: cores / sessions, at least 1)
      --time S              seconds to run (default 5), or
      --runs N              runs per session
      --input NAME=x.npy    an input (default: seeded random values, as run's)
      --seed S              seed of the random inputs (default 0)
)";

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::pair<std::string, std::string> split_assign(const std::string& s, const char* flag) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0) throw Usage(fmt::format("{} expects NAME=FILE, got '{}'", flag, s));
  return {s.substr(0, eq), s.substr(eq + 1)};
}

int parse_int(const std::string& s, const char* flag, int min) {
  try {
    std::size_t used = 0;
    int v = std::stoi(s, &used);
    if (used == s.size() && v >= min) return v;
  } catch (...) {
  }
  throw Usage(fmt::format("{} expects an integer >= {}, got '{}'", flag, min, s));
}

/// A fraction in [0, 1): "0.02" (2%).
double parse_fraction(const std::string& s, const char* flag) {
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && v >= 0 && v < 1) return v;
  } catch (...) {
  }
  throw Usage(fmt::format("{} expects a fraction from 0 up to 1 (0.02: 2%), got '{}'", flag, s));
}

void write_text(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0)
    throw sn::Error("cannot write", path);
}

/// "[1,3,224,224]", or with dynamic dims "[?,3,48,?] (default [1,3,48,64])".
std::string input_shape_text(const sn::TensorInfo& t) {
  if (t.dynamic_dims.empty()) return t.shape.to_string();
  std::string text = "[";
  for (int i = 0; i < t.shape.rank(); ++i) {
    const bool dynamic = std::find(t.dynamic_dims.begin(), t.dynamic_dims.end(), i) != t.dynamic_dims.end();
    text += fmt::format("{}{}", i ? "," : "", dynamic ? std::string("?") : std::to_string(t.shape[i]));
  }
  return text + fmt::format("] (default {})", t.shape.to_string());
}

std::string human_bytes(std::size_t b) {
  if (b >= (1u << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024);
  return fmt::format("{} B", b);
}

int cmd_report(const std::vector<std::string>& args) {
  std::string file, svg;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--svg" && i + 1 < args.size()) svg = args[++i];
    else if (!args[i].empty() && args[i][0] == '-') throw Usage(fmt::format("unknown option '{}'", args[i]));
    else if (file.empty()) file = args[i];
    else throw Usage("report takes one FILE");
  }
  if (file.empty() || svg.empty()) throw Usage("report takes FILE --svg OUT.svg");
  const sn::Model model = sn::Model::load(file);
  const auto fp = model.tuned_fingerprint();
  const std::string title = fmt::format("{}: {}", std::filesystem::path(file).filename().string(),
                                        fp.empty() ? "untuned (the default routine per layer)" : "tuned on " + fp);
  // At the shapes it was tuned at (the first bucket), else the model's default ones.
  sn::Session session(model);
  const auto buckets = model.tuned_shapes();
  if (!buckets.empty()) session.reshape(buckets[0]);
  const auto steps = session.layers();
  const std::string text = sn::path_svg(steps, title);
  std::ofstream out(svg, std::ios::binary);
  if (!(out << text) || !out.flush()) throw sn::Error("cannot write the picture", svg);
  fmt::print("wrote {} ({} steps)\n", svg, steps.size());
  return 0;
}

/// How a tuned file's accuracy was checked, in a line.
std::string accuracy_text(const sn::AccuracyCheck& c) {
  if (!c.reduced_precision) return "float32 throughout (nothing below float32 to check)";
  if (!c.recorded) return "computes below float32; how its accuracy was checked is not recorded (tuned before records)";
  if (c.budget == "none") return "computes below float32; not checked (tuned with --accuracy none)";
  if (c.samples == 0) return fmt::format("computes below float32; budget {} not checked on real samples", c.budget);
  return fmt::format("computes below float32; budget {} met on {} real sample{} ({:.4f})", c.budget, c.samples,
                     c.samples == 1 ? "" : "s", c.measured);
}

int cmd_inspect(const std::vector<std::string>& args) {
  bool verbose = false;
  std::vector<std::string> files;
  for (const auto& a : args) {
    if (a == "--verbose" || a == "-v") verbose = true;
    else if (!a.empty() && a[0] == '-') throw Usage(fmt::format("unknown option '{}'", a));
    else files.push_back(a);
  }
  if (files.size() != 1) throw Usage("inspect takes one FILE");
  const sn::Model model = sn::Model::load(files[0]);
  fmt::print("model: {} ({})\n", model.name().empty() ? "(unnamed)" : model.name(), files[0]);
  for (const auto& t : model.inputs()) fmt::print("input  {} {} {}\n", t.name, input_shape_text(t), sn::to_string(t.dtype));
  for (const auto& t : model.outputs()) fmt::print("output {} {} {}\n", t.name, t.shape.to_string(), sn::to_string(t.dtype));
  auto fp = model.tuned_fingerprint();
  fmt::print("routine path: {}\n", fp.empty() ? "untuned (default choice per layer)" : "tuned on " + fp);
  const auto buckets = model.tuned_shapes();
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    std::string text;
    for (const auto& [name, shape] : buckets[k]) text += fmt::format(" {}={}", name, shape.to_string());
    fmt::print("  tuned at{}\n", text);
  }
  if (!fp.empty()) fmt::print("accuracy: {}\n", accuracy_text(model.accuracy_check()));
  if (model.prepared_weight_bytes())
    fmt::print("prepared weights: {}, {}\n", human_bytes(model.prepared_weight_bytes()),
               model.prepared_weights_usable() ? "read in place here"
                                               : "not for this library build or CPU (sessions derive the weights)");
  const sn::Session session(model);
  fmt::print("memory: {} planned arena for {} of intermediate blobs\n\n", human_bytes(session.planned_bytes()),
             human_bytes(session.unplanned_bytes()));
  auto layers = session.layers(verbose);
  std::size_t wn = 4, wt = 4, wd = 7;
  for (const auto& l : layers) {
    wn = std::max(wn, l.name.size());
    wt = std::max(wt, l.type.size());
    wd = std::max(wd, l.descriptor.size() + (l.routine_params.empty() ? 0 : l.routine_params.size() + 3));
  }
  fmt::print("{:<{}}  {:<{}}  {:<{}}  {:<16}  {}\n", "name", wn, "type", wt, "routine", wd, "output", "parameters");
  int adapts = 0;
  double adapt_ms = 0, predicted_ms = 0, measured_ms = 0;
  for (const auto& l : layers) {
    std::string routine = l.descriptor + (l.routine_params.empty() ? "" : " (" + l.routine_params + ")");
    std::string shapes;
    for (const auto& s : l.output_shapes) shapes += (shapes.empty() ? "" : " ") + s.to_string();
    std::string times;
    if (l.tuned) times = fmt::format("  [predicted {:.3f} ms{}]", l.predicted_ms,
                                     l.measured_ms > 0 ? fmt::format(", measured {:.3f} ms", l.measured_ms) : "");
    const std::string fused = !l.fused_into.empty() ? fmt::format("  [computed in one step with '{}']", l.fused_into)
                              : !l.view            ? ""
                              : l.type == "concat" ? "  [runs nothing: its inputs lie in its output's memory]"
                              : l.type == "split"  ? "  [runs nothing: its outputs lie in its input's memory]"
                                                   : "  [runs nothing: its output shares its input's memory]";
    fmt::print("{:<{}}  {:<{}}  {:<{}}  {:<16}  {}{}{}\n", l.name, wn, l.type, wt, routine, wd, shapes, l.params, times, fused);
    if (l.type == "adapt") {
      ++adapts;
      adapt_ms += l.predicted_ms;
    }
    predicted_ms += l.predicted_ms;
    measured_ms += l.measured_ms;
    for (const auto& c : l.candidates)
      fmt::print("    {:>7} {} {}{}\n", c.default_tier >= 0 ? fmt::format("tier {}", c.default_tier + 1) : "unlisted",
                 c.supported ? "candidate    " : "not candidate", c.descriptor, c.supported ? "" : ": " + c.reason);
  }
  fmt::print("\n{} layers, {} adapts inserted", layers.size(), adapts);
  if (!fp.empty())
    fmt::print(" (predicted {:.3f} ms); predicted {:.3f} ms in all, layers measured in the tuner's whole-net run {:.3f} ms",
               adapt_ms, predicted_ms, measured_ms);
  fmt::print("\n");
  return 0;
}

/// Calls f(T{}) with the C++ type of a dtype's elements (bool as uint8_t);
/// float for the types without one of their own here (float16, quantised).
template <class F>
void by_dtype(sn::DType d, F&& f) {
  switch (d) {
    case sn::DType::float64: return f(double{});
    case sn::DType::int8: return f(int8_t{});
    case sn::DType::uint8: case sn::DType::boolean: return f(uint8_t{});
    case sn::DType::int16: return f(int16_t{});
    case sn::DType::uint16: return f(uint16_t{});
    case sn::DType::int32: return f(int32_t{});
    case sn::DType::uint32: return f(uint32_t{});
    case sn::DType::int64: return f(int64_t{});
    case sn::DType::uint64: return f(uint64_t{});
    default: return f(float{});
  }
}

/// IEEE binary16 and bfloat16 bits as a float (exact).
float float_of_16(uint16_t h, bool brain) {
  if (brain) return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp == 0) {                                                                 // zero, subnormal
    const float m = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -m : m;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

/// A CPU blob's values as doubles, whatever its dtype (a typed output's indices or flags).
std::vector<double> values_of(const sn::Blob& b) {
  std::vector<double> v(static_cast<std::size_t>(b.numel()));
  if (b.dtype() == sn::DType::float16 || b.dtype() == sn::DType::bfloat16) {  // 2 bytes each: never read as float
    const auto* p = b.data_as<uint16_t>();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = float_of_16(p[i], b.dtype() == sn::DType::bfloat16);
    return v;
  }
  if (sn::is_narrow(b.dtype())) {
    const auto* p = b.data_as<uint8_t>();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = sn::narrow_value(b.dtype(), p[i]);
    return v;
  }
  by_dtype(b.dtype(), [&](auto t) {
    const auto* p = b.data_as<decltype(t)>();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(p[i]);
  });
  return v;
}

void print_output(const sn::NamedBlob& out, int top) {
  const sn::Blob& b = out.blob;
  const std::vector<double> p = values_of(b);
  int64_t n = b.numel();
  double sum = 0, mn = n ? p[0] : 0, mx = n ? p[0] : 0;
  for (double v : p) {
    sum += v;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  fmt::print("output {} {}{}: min {:.6g} max {:.6g} mean {:.6g}\n", out.name, b.shape().to_string(),
             b.dtype() == sn::DType::float32 ? "" : fmt::format(" {}", sn::to_string(b.dtype())), mn, mx,
             n ? sum / static_cast<double>(n) : 0.0);
  if (top <= 0 || n < 2) return;
  // Top-K over the last dimension of the first row (a batch-1 classifier's scores).
  int64_t row = b.shape().rank() ? b.shape()[b.shape().rank() - 1] : n;
  std::vector<int64_t> idx(static_cast<std::size_t>(row));
  std::iota(idx.begin(), idx.end(), 0);
  auto k = std::min<int64_t>(top, row);
  auto at = [&](int64_t i) { return p[static_cast<std::size_t>(i)]; };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](auto a, auto c) { return at(a) > at(c); });
  fmt::print("  top-{}:", k);
  for (int64_t i = 0; i < k; ++i) fmt::print(" #{}={:.6g}", idx[static_cast<std::size_t>(i)], at(idx[static_cast<std::size_t>(i)]));
  fmt::print("\n");
}

/// "1x3x224x224"; with `symbolic`, a "?" dim (kept dynamic) is -1.
sn::Shape parse_shape(const std::string& text, const char* flag, bool symbolic = false) {
  std::vector<int64_t> dims;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t x = text.find('x', pos);
    if (x == std::string::npos) x = text.size();
    const std::string dim = text.substr(pos, x - pos);
    dims.push_back(symbolic && dim == "?" ? -1 : parse_int(dim, flag, 1));
    pos = x + 1;
  }
  if (dims.size() > static_cast<std::size_t>(sn::Shape::max_rank)) throw Usage(fmt::format("{}: too many dims in '{}'", flag, text));
  return sn::Shape(dims);
}

/// Whether the file is a TensorFlow Lite FlatBuffer: "TFL3" at byte 4 (an
/// ONNX protobuf cannot hold those bytes there).
bool is_tflite(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;  // the importer names what it is (a FIFO would block here)
  std::ifstream f(path, std::ios::binary);
  char head[8] = {};
  return f.read(head, 8) && std::memcmp(head + 4, "TFL3", 4) == 0;
}

int cmd_import(const std::vector<std::string>& args) {
  std::string model, out;
  sn::ImportOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      if (i + 1 >= args.size()) throw Usage(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "-o" || a == "--output") out = value("-o");
    else if (a == "--input-shape") {
      auto [name, dims] = split_assign(value("--input-shape"), "--input-shape");
      options.input_shapes[name] = parse_shape(dims, "--input-shape", true);
    } else if (a == "--no-passes") {
      options.remove_identities = options.fold_constants = options.fold_pads = options.fold_batchnorm = false;
      options.fold_scale_mul = options.fold_bias_add = options.fuse_self_gating = options.fuse_activations = false;
      options.fold_input_affine = options.fuse_output_affine = options.eliminate_dead_layers = false;
      options.fuse_attention = options.merge_duplicates = false;
    } else if (!a.empty() && a[0] == '-') throw Usage(fmt::format("unknown option '{}'", a));
    else if (model.empty()) model = a;
    else throw Usage(fmt::format("unexpected argument '{}'", a));
  }
  if (model.empty() || out.empty()) throw Usage("import needs MODEL.onnx (or MODEL.tflite) and -o OUT.dnn");
  auto t0 = std::chrono::steady_clock::now();
  const sn::Model imported = is_tflite(model) ? sn::import_tflite(model, options) : sn::import_onnx(model, options);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  imported.save(out);
  fmt::print("imported {} in {:.1f} ms: {} layers", model, ms, sn::Session(imported).layers().size());
  for (const auto& t : imported.inputs()) fmt::print(", input {} {}", t.name, input_shape_text(t));
  for (const auto& t : imported.outputs()) fmt::print(", output {} {}", t.name, t.shape.to_string());
  fmt::print("\nwrote {}\n", out);
  return 0;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto comma = s.find(',', start);
    auto item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int cmd_tune(const std::vector<std::string>& args) {
  std::string in, out, report_path, json_path, calibration_dir;
  sn::TuneOptions opt;
  int threads = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      if (i + 1 >= args.size()) throw Usage(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    const std::string& a = args[i];
    auto rule = [&](const char* flag) {
      auto [l, d] = split_assign(value(flag), flag);
      return sn::RoutineRule{l, d};
    };
    if (a == "-o" || a == "--output") out = value("-o");
    else if (a == "--schemas") opt.schemas = split_list(value("--schemas"));
    else if (a == "--cache") opt.cache_dir = value("--cache");
    else if (a == "--candidates") opt.candidates_per_schema = parse_int(value("--candidates"), "--candidates", 1);
    else if (a == "--unit-budget-ms") opt.unit_budget_ms = parse_int(value("--unit-budget-ms"), "--unit-budget-ms", 0);
    else if (a == "--time-budget") opt.time_budget_s = parse_int(value("--time-budget"), "--time-budget", 0);
    else if (a == "--pin") opt.pin.push_back(rule("--pin"));
    else if (a == "--ban") opt.ban.push_back(rule("--ban"));
    else if (a == "--report") report_path = value("--report");
    else if (a == "--json") json_path = value("--json");
    else if (a == "--threads") threads = parse_int(value("--threads"), "--threads", 1);
    else if (a == "--calibration") calibration_dir = value("--calibration");
    else if (a == "--accuracy") opt.accuracy = value("--accuracy");
    else if (a == "--min-reduced-gain") opt.min_reduced_gain = parse_fraction(value("--min-reduced-gain"), "--min-reduced-gain");
    else if (a == "--keep-float-weights") opt.keep_float_weights = true;
    else if (a == "--no-prepared-weights") opt.prepared_weights = false;
    else if (a == "--shapes") {
      // NAME=S1,S2,...: one shape bucket per entry (several inputs: the same number of entries each).
      auto [name, list] = split_assign(value("--shapes"), "--shapes");
      std::vector<sn::Shape> shapes;
      for (const auto& text : split_list(list)) shapes.push_back(parse_shape(text, "--shapes"));
      if (opt.shapes.empty()) opt.shapes.resize(shapes.size());
      if (shapes.size() != opt.shapes.size())
        throw Usage(fmt::format("--shapes: {} shapes for '{}', {} for another input", shapes.size(), name, opt.shapes.size()));
      for (std::size_t k = 0; k < shapes.size(); ++k) opt.shapes[k][name] = shapes[k];
    }
    else if (!a.empty() && a[0] == '-') throw Usage(fmt::format("unknown option '{}'", a));
    else if (in.empty()) in = a;
    else throw Usage(fmt::format("unexpected argument '{}'", a));
  }
  if (in.empty() || out.empty()) throw Usage("tune needs IN.dnn and -o OUT.dnn");
  for (const auto& s : opt.schemas)  // reject typos before measuring (globs are matched later)
    if (s.find_first_of("*?[") == std::string::npos) (void)sn::Schema::parse(s);
  if (threads > 0) sn::set_num_threads(threads);
  const sn::Model model = sn::Model::load(in);
  if (!calibration_dir.empty()) {
    std::vector<sn::DType> dtypes;
    for (const auto& t : model.inputs()) dtypes.push_back(t.dtype);
    auto samples = sn::load_samples(calibration_dir, model.input_names(), 4096, dtypes);
    // Every fourth sample validates the accuracy budget; the others calibrate.
    for (std::size_t k = 0; k < samples.size(); ++k)
      (samples.size() >= 2 && k % 4 == 3 ? opt.validation : opt.calibration.inputs).push_back(std::move(samples[k]));
    if (opt.validation.empty()) {
      fmt::print(stderr, "warning: one sample in {}: it calibrates and validates\n", calibration_dir);
      opt.validation = opt.calibration.inputs;
    }
  }
  if (isatty(fileno(stderr))) {
    opt.progress = [](const sn::TuneProgress& p) {
      int width = 30, filled = p.total ? width * p.done / p.total : width;
      fmt::print(stderr, "\r{:<22} [{}{}] {:>4}/{:<4} {:<30.30}", p.stage, std::string(static_cast<std::size_t>(filled), '#'),
                 std::string(static_cast<std::size_t>(width - filled), '.'), p.done, p.total, p.item);
      if (p.stage == "done") fmt::print(stderr, "\n");
    };
  } else {
    // A log (CI, a remote machine): a line when a stage starts, and every 10 s within one.
    opt.progress = [start = std::chrono::steady_clock::now(), stage = std::string(), last = 0.0](const sn::TuneProgress& p) mutable {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (p.stage == stage && s - last < 10) return;
      fmt::print(stderr, "tune: {:7.1f} s  {} {}/{} {}\n", s, p.stage, p.done, p.total, p.item);
      stage = std::string(p.stage);
      last = s;
    };
  }
  sn::TuneReport report;
  sn::tune(model, opt, &report).save(out);
  std::string text = report.to_text();
  if (report_path.empty()) fmt::print("{}", text);
  else write_text(report_path, text);
  if (!json_path.empty()) write_text(json_path, report.to_json());
  fmt::print("wrote {} (predicted {:.3f} ms, measured {:.3f} ms, tuned in {:.2f} s)\n", out, report.predicted_ms,
             report.measured_ms, report.tuning_s);
  return 0;
}

/// A seeded random input: normal values; integer inputs as tuning draws them
/// (token ids below their table's size, masks 1: a BERT's random mask of small
/// integers made its outputs NaN).
sn::Blob random_input(const sn::Model& model, const sn::TensorInfo& t, std::mt19937& rng) {
  if (t.dtype != sn::DType::float32 && t.dtype != sn::DType::float64 && !sn::is_integer(t.dtype) && !sn::is_narrow(t.dtype))
    throw sn::Error(fmt::format("no random values for input '{}' of dtype {}", t.name, sn::to_string(t.dtype)), {}, {}, t.name);
  if (sn::is_integer(t.dtype) && !sn::is_narrow(t.dtype)) return sn::synthetic_input(model, t, static_cast<unsigned>(rng()));
  sn::Blob b = sn::Blob::allocate(t.shape, t.dtype);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (sn::is_narrow(t.dtype)) {  // the normal values as the type holds them (int4 ... uint2 wrap)
    for (int64_t i = 0; i < b.numel(); ++i) b.data_as<uint8_t>()[i] = sn::narrow_bits(t.dtype, normal(rng));
    return b;
  }
  by_dtype(t.dtype, [&](auto v) {
    using T = decltype(v);
    auto* p = b.data_as<T>();
    for (int64_t i = 0; i < b.numel(); ++i) p[i] = static_cast<T>(normal(rng));
  });
  return b;
}

/// The inputs of a run: from .npy files where given (NAME=FILE), else seeded random values.
std::vector<sn::NamedBlob> make_inputs(const sn::Model& model, std::map<std::string, std::string> files,
                                       unsigned seed) {
  std::vector<sn::NamedBlob> inputs;
  std::mt19937 rng(seed);
  for (const auto& t : model.inputs()) {
    auto it = files.find(t.name);
    if (it != files.end()) {
      sn::Blob b = sn::load_npy(it->second, sn::is_narrow(t.dtype) ? std::optional(t.dtype) : std::nullopt);
      if (b.dtype() != t.dtype)
        throw sn::Error(fmt::format("input '{}' must be {}, the file holds {}", t.name, sn::to_string(t.dtype),
                                    sn::to_string(b.dtype())),
                        it->second);
      inputs.push_back({t.name, b});
      files.erase(it);
    } else {
      inputs.push_back({t.name, random_input(model, t, rng)});
    }
  }
  if (!files.empty()) throw Usage(fmt::format("the net has no input named '{}'", files.begin()->first));
  return inputs;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double at = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

/// Resident memory of this process ("VmRSS") or its peak ("VmHWM"), in bytes (0 where unknown).
std::size_t resident_bytes(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  std::size_t kb = 0;
  const std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') kb = std::strtoull(line + n + 1, nullptr, 10);
  std::fclose(f);
  return kb * 1024;
}

int cmd_bench(const std::vector<std::string>& args) {
  std::string file;
  std::map<std::string, std::string> input_files;
  int sessions = 1, threads = 0, runs = 0;
  double seconds = 5;
  unsigned seed = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      if (i + 1 >= args.size()) throw Usage(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--input") input_files.insert(split_assign(value("--input"), "--input"));
    else if (a == "--sessions") sessions = parse_int(value("--sessions"), "--sessions", 1);
    else if (a == "--threads") threads = parse_int(value("--threads"), "--threads", 1);
    else if (a == "--runs") runs = parse_int(value("--runs"), "--runs", 1);
    else if (a == "--time") seconds = parse_int(value("--time"), "--time", 1);
    else if (a == "--seed") seed = static_cast<unsigned>(parse_int(value("--seed"), "--seed", 0));
    else if (!a.empty() && a[0] == '-') throw Usage(fmt::format("unknown option '{}'", a));
    else if (file.empty()) file = a;
    else throw Usage(fmt::format("unexpected argument '{}'", a));
  }
  if (file.empty()) throw Usage("bench needs a FILE");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads == 0) threads = std::max(1, cores / sessions);
  const std::size_t rss_before = resident_bytes("VmRSS");
  sn::Model model = sn::Model::load(file);
  const std::vector<sn::NamedBlob> inputs = make_inputs(model, input_files, seed);

  // Each session is made, run once and then timed in its own thread; timing starts when all
  // are made (memory is measured with all of them alive). Nothing runs on this thread: a
  // team of its own would be one more set of OpenMP threads, and libgomp stops spinning
  // (waits sleeping) wherever it manages more threads than there are cores.
  std::vector<std::vector<sn::NamedBlob>> outputs(static_cast<std::size_t>(sessions));
  std::vector<std::vector<double>> ms(static_cast<std::size_t>(sessions));
  std::vector<int> differing(static_cast<std::size_t>(sessions), 0);
  std::atomic<int> made{0};
  std::atomic<bool> go{false}, abandon{false};
  std::vector<std::string> errors(static_cast<std::size_t>(sessions));
  auto identical = [&](const std::vector<sn::NamedBlob>& a, const std::vector<sn::NamedBlob>& b) {
    for (std::size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(a[i].blob.data(), b[i].blob.data(), a[i].blob.byte_size()) != 0) return false;
    return true;
  };
  std::vector<std::thread> workers;
  auto worker = [&](int k) {
      const auto ku = static_cast<std::size_t>(k);
      std::optional<sn::Session> session;
      try {
        session.emplace(model, sn::SessionOptions{threads});
        outputs[ku] = session->run(inputs);
      } catch (const std::exception& e) {
        errors[ku] = e.what();
      }
      ++made;
      while (!go.load()) std::this_thread::yield();
      if (!session || abandon.load()) return;
      std::vector<sn::NamedBlob> out;
      for (const auto& t : model.outputs()) out.push_back({t.name, sn::Blob::allocate(session->output_shape(t.name), t.dtype)});
      const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
      for (int r = 0; runs ? r < runs : std::chrono::steady_clock::now() < end; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        session->run(inputs, out);
        ms[ku].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        differing[ku] += !identical(out, outputs[ku]);
      }
  };
  for (int k = 0; k < sessions; ++k) {
    try {
      workers.emplace_back(worker, k);
    } catch (const std::system_error& e) {  // the threads made so far end before the Error
      made += sessions - k;
      abandon = true;
      go = true;
      for (auto& w : workers) w.join();
      throw sn::Error(fmt::format("cannot start the thread of session {} of {}: {}", k + 1, sessions, e.what()), file, {},
                      "--sessions");
    }
  }
  while (made.load() < sessions) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::size_t rss_sessions = resident_bytes("VmRSS");
  const auto wall0 = std::chrono::steady_clock::now();
  go = true;
  for (auto& w : workers) w.join();
  for (const auto& e : errors)
    if (!e.empty()) throw sn::Error(e, file);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  std::vector<double> every;
  int wrong = 0;
  for (int k = 0; k < sessions; ++k) {
    every.insert(every.end(), ms[static_cast<std::size_t>(k)].begin(), ms[static_cast<std::size_t>(k)].end());
    wrong += differing[static_cast<std::size_t>(k)] + !identical(outputs[static_cast<std::size_t>(k)], outputs[0]);
  }
  fmt::print("{}: {} session(s) x {} thread(s) on {} cores, {} runs in {:.2f} s\n", file, sessions, threads, cores,
             every.size(), wall_s);
  fmt::print("throughput: {:.1f} inferences/s\n", static_cast<double>(every.size()) / wall_s);
  fmt::print("latency ms: p50 {:.3f}  p90 {:.3f}  p99 {:.3f}  min {:.3f}  max {:.3f}\n", percentile(every, 50),
             percentile(every, 90), percentile(every, 99), percentile(every, 0), percentile(every, 100));
  fmt::print("resident memory: {} with the model and {} session(s) ({} before loading; peak {})\n",
             human_bytes(rss_sessions), sessions, human_bytes(rss_before), human_bytes(resident_bytes("VmHWM")));
  fmt::print("outputs: {}\n", wrong ? fmt::format("{} run(s) differ from the first session's first run", wrong)
                                   : std::string("identical in every session and run"));
  return wrong ? 1 : 0;
}

/// `run --steps`: each step's median over `runs` timed runs, as TSV (one
/// header line; several input sets: a column `set` first).
void write_step_times(const std::string& path, sn::Session& session, std::span<const sn::NamedBlob> inputs,
                      std::span<sn::NamedBlob> outputs, int runs, int set) {
  std::vector<std::vector<double>> times;
  for (int r = 0; r < runs; ++r) {
    const std::vector<double> ms = session.run_timed(inputs, outputs);
    times.resize(ms.size());
    for (std::size_t s = 0; s < ms.size(); ++s) times[s].push_back(ms[s]);
  }
  const auto layers = session.layers();
  auto clean = [](std::string s) {
    for (char& c : s)
      if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    return s;
  };
  std::string text = set > 0 ? "" : fmt::format("{}step\tlayer\ttype\tdescriptor\troutine_params\tfused_into\tms\n", set >= 0 ? "set\t" : "");
  for (std::size_t s = 0; s < layers.size() && s < times.size(); ++s) {
    std::vector<double>& v = times[s];
    std::sort(v.begin(), v.end());
    const double median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    text += fmt::format("{}{}\t{}\t{}\t{}\t{}\t{}\t{:.4f}\n", set >= 0 ? fmt::format("{}\t", set) : "", s,
                        clean(layers[s].name), layers[s].type, layers[s].descriptor, clean(layers[s].routine_params),
                        clean(layers[s].fused_into), median);
  }
  if (set > 0) {
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0)
      throw sn::Error(fmt::format("cannot write '{}'", path), path);
  } else {
    write_text(path, text);
  }
}

int cmd_run(const std::vector<std::string>& args) {
  std::string file;
  std::map<std::string, std::string> input_files, output_files;
  std::string steps_file;
  int repeat = 10, threads = 0, top = 5;
  unsigned seed = 0;
  sn::SessionOptions session_options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      if (i + 1 >= args.size()) throw Usage(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--input") input_files.insert(split_assign(value("--input"), "--input"));
    else if (a == "--output") output_files.insert(split_assign(value("--output"), "--output"));
    else if (a == "--repeat") repeat = parse_int(value("--repeat"), "--repeat", 1);
    else if (a == "--threads") threads = parse_int(value("--threads"), "--threads", 1);
    else if (a == "--top") top = parse_int(value("--top"), "--top", 0);
    else if (a == "--seed") seed = static_cast<unsigned>(parse_int(value("--seed"), "--seed", 0));
    else if (a == "--steps") steps_file = value("--steps");
    else if (a == "--schemas") session_options.schemas = split_list(value("--schemas"));
    else if (!a.empty() && a[0] == '-') throw Usage(fmt::format("unknown option '{}'", a));
    else if (file.empty()) file = a;
    else throw Usage(fmt::format("unexpected argument '{}'", a));
  }
  if (file.empty()) throw Usage("run needs a FILE");
  if (threads > 0) sn::set_num_threads(threads);
  const sn::Model model = sn::Model::load(file);
  if (const sn::AccuracyCheck check = model.accuracy_check(); !check.checked()) {
    // Calibration samples alone do not check it under --accuracy none: the budget does.
    const bool unbudgeted = check.recorded && check.budget == "none";
    fmt::print(stderr, "softneuro: warning: {} computes below float32 and its accuracy was never checked on real samples "
                       "({}); tune it with --calibration DIR{}\n",
               file, !check.recorded ? "tuned before records were kept" : unbudgeted ? "tuned with --accuracy none"
                                                                                      : "no samples recorded",
               unbudgeted ? " and an accuracy budget (the default, or --accuracy M:V)" : "");
  }
  sn::Session session(model, session_options);
  for (const auto& [name, path] : output_files) model.output_shape(name);  // unknown names fail before running

  // NAME=a.npy,b.npy: input sets run one after another in the one net (inputs of several shapes).
  std::map<std::string, std::vector<std::string>> lists;
  std::size_t sets = 1;
  for (const auto& [name, paths] : input_files) {
    auto& list = lists[name];
    for (std::size_t pos = 0; pos <= paths.size();) {
      std::size_t comma = std::min(paths.find(',', pos), paths.size());
      list.push_back(paths.substr(pos, comma - pos));
      pos = comma + 1;
    }
    if (sets > 1 && list.size() > 1 && list.size() != sets)
      throw Usage(fmt::format("--input lists of {} and {} files: give every input one file or the same number", sets, list.size()));
    sets = std::max(sets, list.size());
  }
  for (std::size_t set = 0; set < sets; ++set) {
    std::map<std::string, std::string> files;
    for (const auto& [name, list] : lists) files[name] = list[std::min(set, list.size() - 1)];
    std::vector<sn::NamedBlob> inputs = make_inputs(model, files, seed);
    if (sets > 1) {
      std::string shapes;
      for (const auto& in : inputs) shapes += fmt::format(" {}={}", in.name, in.blob.shape().to_string());
      fmt::print("input set {}:{}\n", set, shapes);
    }
    std::vector<sn::NamedBlob> outputs = session.run(inputs);  // warm-up; outputs at these inputs' shapes
    std::vector<double> ms;
    for (int r = 0; r < repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      session.run(inputs, outputs);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (!steps_file.empty()) write_step_times(steps_file, session, inputs, outputs, repeat, sets > 1 ? static_cast<int>(set) : -1);
    for (const auto& o : outputs) print_output(o, top);
    for (const auto& [name, path] : output_files)
      for (const auto& o : outputs)
        if (o.name == name) {
          // Several input sets: y.npy becomes y.0.npy, y.1.npy, ...
          std::string at = path;
          if (sets > 1) {
            const std::size_t dot = at.rfind('.');
            const std::size_t slash = at.rfind('/');
            const std::size_t cut = dot != std::string::npos && (slash == std::string::npos || dot > slash) ? dot : at.size();
            at.insert(cut, fmt::format(".{}", set));
          }
          sn::save_npy(at, o.blob);
        }
    std::sort(ms.begin(), ms.end());
    double median = ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
    fmt::print("latency over {} runs ({} threads): median {:.3f} ms, min {:.3f} ms, max {:.3f} ms\n", repeat,
               sn::num_threads(), median, ms.front(), ms.back());
  }
  if (const int64_t shrinks = sn::contention_shrinks())
    fmt::print("threads: other processes held the CPUs: the team ran on one thread for a while, {} time{}\n", shrinks,
               shrinks == 1 ? "" : "s");
  const std::string tuned_wait = model.tuned_openmp_wait();
  fmt::print("OpenMP wait: {}{}\n", sn::openmp_wait(),
             tuned_wait.empty() ? "" : tuned_wait == sn::openmp_wait() ? " (as tuned)" : fmt::format(" (tuned under {})", tuned_wait));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    while (args.size() >= 2 && args[0] == "--plugin") {
      sn::load_plugin(args[1]);
      args.erase(args.begin(), args.begin() + 2);
    }
    if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
      std::fputs(kUsage, args.empty() ? stderr : stdout);
      return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
      fmt::print("softneuro {} (sources {})\n", sn::version(), sn::source_digest());
      return 0;
    }
    std::string cmd = args[0];
    args.erase(args.begin());
    if (cmd == "inspect") return cmd_inspect(args);
    if (cmd == "report") return cmd_report(args);
    if (cmd == "run") return cmd_run(args);
    if (cmd == "bench") return cmd_bench(args);
    if (cmd == "tune") return cmd_tune(args);
    if (cmd == "import") return cmd_import(args);
    if (cmd == "routines") {
      if (args.size() > 1) throw Usage("routines takes at most one LAYER_TYPE");
      // The device first: which routines are registered depends on the build,
      // which can run on its CPU's features (softneuro inspect --verbose says why not).
      fmt::print("# device: {}\n", sn::device_fingerprint());
      for (const auto& d : sn::registered_routines(args.empty() ? "" : args[0])) fmt::print("{}\n", d);
      return 0;
    }
    throw Usage(fmt::format("unknown command '{}'", cmd));
  } catch (const Usage& e) {
    fmt::print(stderr, "softneuro: {}\n\n{}", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "softneuro: error: {}\n", e.what());
    return 1;
  } catch (...) {  // a plugin's routine may throw anything
    fmt::print(stderr, "softneuro: error: an exception that is not a std::exception\n");
    return 1;
  }
}
