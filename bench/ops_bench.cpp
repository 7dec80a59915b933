// ops_bench — times every registered float32 CPU routine of the transformer
// layer types (layernorm, softmax, gelu, matmul, concat) on ViT-B/16-like
// shapes, at 1 and 2 threads (or --threads T), in every float32 CPU schema it
// lists and every routine-parameter combination it offers (cpu/vec:
// vector_bits 512 and 256).
//
//   ops_bench [--type SUBSTRING] [--routine SUBSTRING] [--threads T]
//             [--runs N] [--budget SECONDS] [--cold] [--dtype float32|bfloat16] [--nan]
//
// --dtype bfloat16: the routines of the bfloat16 CPU schemas instead, inputs
// rounded to bfloat16. --nan: a NaN as the first value of each case's second
// input (its only one where it has one; attention's keys): the routines' paths
// for inputs that hold NaN (a whole layer in scalar code was a cliff of seconds).
//
// Shapes: layernorm [1,197,768] over the last axis (scale and bias); softmax
// [1,12,197,197] last axis; gelu [1,197,3072] (erf and tanh forms); matmul
// [12,197,64] x [12,64,197] (attention scores) and [12,197,197] x [12,197,64]
// (attention times values); concat [1,1,768] + [1,196,768] on axis 1 (class
// token) and a DenseNet-like channel concat [1,128,28,28] + [1,32,28,28];
// dense layers of BERT-base at 128 tokens, ViT-B/16 and the Whisper-tiny
// encoder, and attention at BERT's, ViT's and Whisper's sizes (with GFLOP/s
// at the median: the products only).
//
// Only run() is timed, inputs already in the routine's schema; --cold evicts
// the caches before each timed run (weights and output from DRAM, as in a net). Each cell: two
// warm-up runs, then up to --runs (default 200) timed runs or --budget seconds
// (default 0.5, at least 5 runs); the median (and the fastest run) in
// microseconds, wall time. The routine is prepared again for each thread count
// (oneDNN primitives keep the OpenMP team size they were created with).
//
// OpenMP waits as its environment says (softneuro::openmp_wait(), printed).
#include "adapt/cast.hpp"
#include "core/layer_types.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "evict_caches.hpp"

#include <softneuro/session.hpp>
#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

using namespace softneuro;

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  std::string name;
  Layer layer;
  std::vector<Shape> inputs;
  double flops = 0;  // products and sums per run, where a GFLOP/s figure means something
};

Blob random_blob(const Shape& s, std::mt19937& rng, Layout layout = Layout::nchw) {
  Blob b = Blob::allocate(s, DType::float32, layout);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const std::size_t n = b.byte_size() / sizeof(float);
  for (std::size_t i = 0; i < n; ++i) b.data_as<float>()[i] = u(rng);
  return b;
}

/// `b` (float32) as bfloat16, converted as the cast adapt converts it.
Blob to_bfloat16(const Blob& b) {
  Blob out = Blob::allocate(b.shape(), DType::bfloat16, b.layout());
  adapt::cast_values(DType::float32, DType::bfloat16, b.data(), out.data(), static_cast<int64_t>(b.byte_size() / sizeof(float)));
  return out;
}

Layer make(std::string type, std::map<std::string, Attr> params, std::map<std::string, Blob> weights, int inputs) {
  Layer l;
  l.name = "L";
  l.type = std::move(type);
  for (int i = 0; i < inputs; ++i) l.inputs.push_back(fmt::format("x{}", i));
  l.outputs = {"y0"};
  l.params = std::move(params);
  l.weights = std::move(weights);
  return l;
}

std::vector<Case> cases(std::mt19937& rng) {
  std::vector<Case> c;
  c.push_back({"layernorm [1,197,768]",
               make("layernorm", {}, {{"scale", random_blob({768}, rng)}, {"bias", random_blob({768}, rng)}}, 1),
               {Shape{1, 197, 768}}});
  c.push_back({"softmax [1,12,197,197]", make("softmax", {{"axis", int64_t{-1}}}, {}, 1), {Shape{1, 12, 197, 197}}});
  c.push_back({"gelu erf [1,197,3072]", make("gelu", {}, {}, 1), {Shape{1, 197, 3072}}});
  c.push_back({"gelu tanh [1,197,3072]", make("gelu", {{"approximate", std::string("tanh")}}, {}, 1),
               {Shape{1, 197, 3072}}});
  c.push_back({"matmul [12,197,64]x[12,64,197]", make("matmul", {}, {}, 2), {Shape{12, 197, 64}, Shape{12, 64, 197}}});
  c.push_back({"matmul [12,197,197]x[12,197,64]", make("matmul", {}, {}, 2),
               {Shape{12, 197, 197}, Shape{12, 197, 64}}});
  for (auto [rows, in, out] : {std::array<int64_t, 3>{128, 768, 768}, {128, 768, 3072}, {128, 3072, 768},
                                {197, 768, 3072}, {1500, 384, 1536}}) {
    c.push_back({fmt::format("dense [1,{},{}] -> {}", rows, in, out),
                 make("dense", {}, {{"weight", random_blob({out, in}, rng)}, {"bias", random_blob({out}, rng)}}, 1),
                 {Shape{1, rows, in}}, 2.0 * rows * in * out});
  }
  // Attention over [batch, tokens, heads, 64] as the exporters lay it out (heads second after the perms).
  for (auto [tokens, heads] : {std::array<int64_t, 2>{128, 12}, {197, 12}, {1500, 6}}) {
    const std::vector<int64_t> perm{0, 2, 1, 3};
    const Shape s{1, tokens, heads, 64};
    c.push_back({fmt::format("attention [1,{},{},64]", tokens, heads),
                 make("attention", {{"scale", 0.125}, {"q_perm", perm}, {"k_perm", perm}, {"v_perm", perm}, {"out_perm", perm}}, {}, 3),
                 {s, s, s}, 4.0 * heads * tokens * tokens * 64});
  }
  // PP-OCRv4's detector head at 640x640: ConvTranspose 2x2 stride 2, its bias, batchnorm and relu or sigmoid folded in.
  for (auto [c_in, c_out, hw, act] : {std::tuple<int64_t, int64_t, int64_t, const char*>{24, 24, 160, "relu"},
                                      {24, 1, 320, "sigmoid"}}) {
    c.push_back({fmt::format("deconv2 k2 s2 [1,{},{},{}] -> {} {}", c_in, hw, hw, c_out, act),
                 make("deconv2", {{"strides", std::vector<int64_t>{2, 2}}, {"act", std::string(act)}},
                      {{"weight", random_blob({c_in, c_out, 2, 2}, rng)}, {"bias", random_blob({c_out}, rng)}}, 1),
                 {Shape{1, c_in, hw, hw}}, 2.0 * c_in * c_out * 4 * hw * hw});
  }
  c.push_back({"concat [1,1,768]+[1,196,768] axis 1", make("concat", {{"axis", int64_t{1}}}, {}, 2),
               {Shape{1, 1, 768}, Shape{1, 196, 768}}});
  c.push_back({"concat [1,128,28,28]+[1,32,28,28] axis 1", make("concat", {{"axis", int64_t{1}}}, {}, 2),
               {Shape{1, 128, 28, 28}, Shape{1, 32, 28, 28}}});
  return c;
}


std::string params_text(const RoutineParams& p) {
  std::string s;
  for (const auto& [k, v] : p) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v);
  return s;
}

struct Timing {
  double median_us = 0, min_us = 0;
  int runs = 0;
};

Timing time_routine(const Routine& r, const LayerInfo& info, const Schema& schema, const RoutineParams& params,
                    std::vector<Blob>& ins, std::vector<Blob>& outs, int max_runs, double budget_s, bool cold) {
  auto prepared = r.prepare(info, schema, params);
  const std::size_t ws = prepared->workspace_bytes();
  std::unique_ptr<void, void (*)(void*)> workspace(ws ? std::aligned_alloc(64, (ws + 63) / 64 * 64) : nullptr,
                                                   std::free);
  std::vector<const Blob*> in_ptrs;
  for (const Blob& b : ins) in_ptrs.push_back(&b);
  std::vector<Blob*> out_ptrs;
  for (Blob& b : outs) out_ptrs.push_back(&b);
  RunArgs args{in_ptrs, out_ptrs, workspace.get(), &core::global_pool()};
  prepared->run(args);
  prepared->run(args);
  std::vector<double> t;
  const auto start = Clock::now();
  while (static_cast<int>(t.size()) < max_runs) {
    if (cold) bench::evict_caches(ins[0]);
    const auto t0 = Clock::now();
    prepared->run(args);
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (t.size() >= 5 && std::chrono::duration<double>(Clock::now() - start).count() > budget_s) break;
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), static_cast<int>(t.size())};
}

}  // namespace

int main(int argc, char** argv) {
  std::string type_filter, routine_filter;
  std::vector<int> thread_counts{1, 2};
  int runs = 200;
  double budget = 0.5;
  bool cold = false, nan = false;
  DType dtype = DType::float32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--type") type_filter = next();
    else if (a == "--routine") routine_filter = next();
    else if (a == "--threads") thread_counts = {std::atoi(next().c_str())};
    else if (a == "--runs") runs = std::max(1, std::atoi(next().c_str()));
    else if (a == "--budget") budget = std::atof(next().c_str());
    else if (a == "--cold") cold = true;
    else if (a == "--nan") nan = true;
    else if (a == "--dtype") {
      const std::string d = next();
      if (d != "float32" && d != "bfloat16") {
        std::fprintf(stderr, "--dtype: float32 or bfloat16, not '%s'\n", d.c_str());
        return 2;
      }
      dtype = d == "float32" ? DType::float32 : DType::bfloat16;
    } else {
      std::fprintf(stderr,
                   "usage: ops_bench [--type SUBSTRING] [--routine SUBSTRING] [--threads T] [--runs N] "
                   "[--budget SECONDS] [--cold] [--dtype float32|bfloat16] [--nan]\n");
      return 2;
    }
  }
  std::mt19937 rng(7);
  fmt::print("ops_bench: median (fastest) run() time in us, wall clock; OpenMP wait {}\n", softneuro::openmp_wait());
  std::string header = fmt::format("{:<42} {:<30} {:<16}", "case", "routine", "params");
  for (int t : thread_counts) header += fmt::format(" {:>32}", fmt::format("{} thread{}", t, t > 1 ? "s" : ""));
  fmt::print("{}\n", header);
  for (Case& c : cases(rng)) {
    if (!type_filter.empty() && c.name.find(type_filter) == std::string::npos) continue;
    LayerInfo info;
    info.layer = &c.layer;
    info.input_shapes = c.inputs;
    info.output_shapes = core::infer_layer_shapes(c.layer, info.input_shapes);
    for (const std::string& d : registered_routines(c.layer.type)) {
      if (!routine_filter.empty() && d.find(routine_filter) == std::string::npos) continue;
      Schema schema;
      const Routine* r = core::RoutineRegistry::instance().find(c.layer.type, d, &schema);
      if (!r || schema.device != Device::cpu || schema.dtype != dtype) continue;
      const Support s = r->supports(info, schema);
      if (!s) {
        fmt::print("{:<42} {:<30} unsupported: {}\n", c.name, d, s.reason);
        continue;
      }
      std::vector<Blob> ins, outs;
      for (const Shape& sh : info.input_shapes) {
        Blob b = random_blob(sh, rng, schema.layout);
        ins.push_back(dtype == DType::bfloat16 ? to_bfloat16(b) : std::move(b));
      }
      if (nan && dtype == DType::float32) ins[std::min<std::size_t>(1, ins.size() - 1)].data_as<float>()[0] = NAN;
      for (const Shape& sh : info.output_shapes) outs.push_back(Blob::allocate(sh, dtype, schema.layout));
      for (const RoutineParams& p : param_combinations(r->param_space(info, schema))) {
        std::string line = fmt::format("{:<42} {:<30} {:<16}", c.name, d, params_text(p));
        for (int t : thread_counts) {
          set_num_threads(t);
          const Timing tm = time_routine(*r, info, schema, p, ins, outs, runs, budget, cold);
          std::string cell = fmt::format("{:.1f} ({:.1f})", tm.median_us, tm.min_us);
          if (c.flops > 0) cell += fmt::format(" {:.0f} GF/s", c.flops / tm.median_us * 1e-3);
          line += fmt::format(" {:>32}", cell);
        }
        fmt::print("{}\n", line);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
