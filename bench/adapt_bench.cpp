// adapt_bench — times every registered CPU adapt routine (quantise,
// dequantise, casts to float16/bfloat16, layout changes nchw/nhwc/blocked, and
// their chains) on activation shapes of ResNet50 and MobileNetV2, for every
// (from, to) pair of CPU schemas some routine converts, and prints the median
// time and the bytes moved per second (input + output).
//
//   adapt_bench [--threads T] [--runs N] [--from SUBSTRING] [--to SUBSTRING]
//
// OpenMP waits as in the softneuro CLI (tools/openmp_preinit.cpp).
#include "core/registry.hpp"
#include "core/thread_pool.hpp"

#include <softneuro/session.hpp>
#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

using namespace softneuro;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int threads = 0, runs = 30;
  std::string from, to;
};

Blob filled(const Shape& shape, const Schema& s, std::mt19937& rng) {
  Blob b = Blob::allocate(shape, s.dtype, s.layout);
  auto* p = static_cast<unsigned char*>(b.data());
  const std::size_t n = b.byte_size();
  if (s.dtype == DType::float32) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (std::size_t i = 0; i + 4 <= n; i += 4) {
      float v = d(rng);
      std::memcpy(p + i, &v, 4);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(rng() & 0x3f);  // finite halves too
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--threads") o.threads = std::atoi(next().c_str());
    else if (a == "--runs") o.runs = std::max(3, std::atoi(next().c_str()));
    else if (a == "--from") o.from = next();
    else if (a == "--to") o.to = next();
    else {
      fmt::print(stderr, "usage: adapt_bench [--threads T] [--runs N] [--from SUBSTRING] [--to SUBSTRING]\n");
      return 2;
    }
  }
  if (o.threads > 0) set_num_threads(o.threads);

  std::vector<Schema> schemas;
  for (DType d : {DType::float32, DType::qint8, DType::float16, DType::bfloat16})
    for (Layout l : {Layout::nchw, Layout::nhwc, Layout::nchw8c, Layout::nchw16c}) schemas.push_back({Device::cpu, d, l});
  const std::vector<Shape> shapes = {Shape{1, 64, 112, 112}, Shape{1, 256, 56, 56}, Shape{1, 1024, 14, 14},
                                     Shape{1, 96, 28, 28}};
  QuantParams q;
  q.scales = {0.05f};
  q.zero_points = {-3};
  auto& registry = core::RoutineRegistry::instance();
  std::mt19937 rng(7);
  fmt::print("threads {}; median of {} runs after 2 warm-ups; GB/s = (input + output bytes) / time\n\n", num_threads(), o.runs);
  fmt::print("{:<22} {:<22} {:<30} {:>16} {:>10} {:>8}\n", "from", "to", "routine", "shape", "ms", "GB/s");
  for (const auto& from : schemas)
    for (const auto& to : schemas) {
      if (from == to) continue;
      if (!o.from.empty() && from.to_string().find(o.from) == std::string::npos) continue;
      if (!o.to.empty() && to.to_string().find(o.to) == std::string::npos) continue;
      for (const auto& shape : shapes) {
        Layer l;
        l.name = "adapt";
        l.type = "adapt";
        l.inputs = {"x"};
        l.outputs = {"y"};
        l.params["from"] = from.to_string();
        l.params["to"] = to.to_string();
        LayerInfo info{&l, {shape}, {shape}, {q}, {q}};
        for (const auto& c : registry.candidates(info, to)) {
          if (!c.support.ok) continue;
          std::unique_ptr<PreparedRoutine> prepared;
          try {
            prepared = c.routine->prepare(info, to, {});
          } catch (const std::exception& e) {
            fmt::print("{:<22} {:<22} {:<30} {:>16} prepare failed: {}\n", from.to_string(), to.to_string(), c.descriptor,
                       shape.to_string(), e.what());
            continue;
          }
          Blob x = filled(shape, from, rng), y = Blob::allocate(shape, to.dtype, to.layout);
          x.quant() = q;
          y.quant() = q;
          std::vector<unsigned char> ws(prepared->workspace_bytes() + 64);
          const Blob* in[] = {&x};
          Blob* out[] = {&y};
          RunArgs args{in, out, prepared->workspace_bytes() ? ws.data() : nullptr, &core::global_pool()};
          for (int w = 0; w < 2; ++w) prepared->run(args);
          std::vector<double> ms;
          for (int r = 0; r < o.runs; ++r) {
            auto t0 = Clock::now();
            prepared->run(args);
            ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          }
          std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
          const double med = ms[ms.size() / 2];
          const double gb = double(x.byte_size() + y.byte_size()) / 1e9;
          fmt::print("{:<22} {:<22} {:<30} {:>16} {:>10.4f} {:>8.2f}\n", from.to_string(), to.to_string(), c.descriptor,
                     shape.to_string(), med, gb / (med / 1e3));
        }
      }
    }
  return 0;
}
