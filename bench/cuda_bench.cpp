// cuda_bench — the CUDA backend on this machine's GPU:
//  1. every cuda conv2 routine, in every schema, with every cuDNN algorithm,
//     on a few ResNet50 / MobileNetV2 convolutions (batch 1), device-synchronised
//     median ms and GFLOP/s;
//  2. with a model: the net tuned onto the device (cuda:float32, then
//     cuda:float16), median Session::run latency with CUDA-graph replay and without
//     (SOFTNEURO_CUDA_GRAPHS=0): the launch overhead graphs remove at batch 1.
//
//   cuda_bench [MODEL.dnn] [--runs N]
//
// Without a usable GPU it says why and exits 0.
#include "core/layer_types.hpp"
#include "core/registry.hpp"
#include "core/thread_pool.hpp"
#include "routines/cuda/cuda_stats.hpp"
#include "conv_layer.hpp"

#include <softneuro/session.hpp>
#include <softneuro/tune.hpp>
#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

using namespace softneuro;
using Clock = std::chrono::steady_clock;

namespace {

struct ConvShape {
  const char* name;
  int64_t c, hw, oc, k, stride, pad, group;
  double gflop() const {
    const int64_t o = (hw + 2 * pad - k) / stride + 1;
    return 2.0 * double(oc) * double(o * o) * double(c / group) * double(k * k) * 1e-9;
  }
};

const ConvShape kShapes[] = {
    {"resnet50 3x3 64ch 56", 64, 56, 64, 3, 1, 1, 1},
    {"resnet50 1x1 1024->256 14", 1024, 14, 256, 1, 1, 0, 1},
    {"resnet50 3x3 256ch 14", 256, 14, 256, 3, 1, 1, 1},
    {"mobilenetv2 dw 144ch 56", 144, 56, 144, 3, 1, 1, 144},
};

double median_ms(const std::function<void()>& fn, int runs) {
  const DeviceMemory* dm = device_memory(Device::cuda);
  fn();
  dm->synchronize();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    fn();
    dm->synchronize();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::shared_ptr<void> device_bytes(std::size_t n) {
  const DeviceMemory* dm = device_memory(Device::cuda);
  void* p = dm->allocate(std::max<std::size_t>(n, 64));
  if (!p) throw Error(fmt::format("out of device memory ({} bytes)", n));
  return std::shared_ptr<void>(p, dm->release);
}

void bench_convs(int runs) {
  std::mt19937 rng(1);
  fmt::print("{:<28} {:<26} {:>6} {:>10} {:>9}\n", "shape", "routine", "algo", "ms", "GFLOP/s");
  for (const ConvShape& cs : kShapes) {
    Layer l = bench::conv_layer(cs.name, cs.c, cs.oc, cs.k, cs.stride, cs.pad, cs.group, rng);
    LayerInfo info;
    info.layer = &l;
    info.input_shapes = {Shape{1, cs.c, cs.hw, cs.hw}};
    info.output_shapes = core::infer_layer_shapes(l, info.input_shapes);
    for (const std::string& d : registered_routines("conv2")) {
      if (d.rfind("cuda", 0) != 0) continue;
      Schema s;
      const Routine* r = core::RoutineRegistry::instance().find("conv2", d, &s);
      if (!r || !r->supports(info, s)) continue;
      auto space = r->param_space(info, s);
      std::vector<int64_t> algos = space.empty() ? std::vector<int64_t>{-1} : space[0].choices;
      for (int64_t a : algos) {
        RoutineParams params;
        if (a >= 0) params.emplace_back(space[0].name, a);
        std::unique_ptr<PreparedRoutine> p;
        try {
          p = r->prepare(info, s, params);
        } catch (const std::exception&) {
          fmt::print("{:<28} {:<26} {:>6} {:>10}\n", cs.name, d, a, "refused");
          continue;
        }
        const std::size_t es = s.dtype == DType::float16 ? 2 : 4;
        auto x = device_bytes(static_cast<std::size_t>(info.input_shapes[0].numel()) * es);
        auto y = device_bytes(static_cast<std::size_t>(info.output_shapes[0].numel()) * es);
        auto ws = device_bytes(p->workspace_bytes());
        Blob xb = Blob::view(x.get(), info.input_shapes[0], s.dtype, s.layout, Device::cuda);
        Blob yb = Blob::view(y.get(), info.output_shapes[0], s.dtype, s.layout, Device::cuda);
        const Blob* ins[] = {&xb};
        Blob* outs[] = {&yb};
        RunArgs args{ins, outs, ws.get(), &core::global_pool()};
        const double ms = median_ms([&] { p->run(args); }, runs);
        fmt::print("{:<28} {:<26} {:>6} {:>10.4f} {:>9.1f}\n", cs.name, d, a, ms, cs.gflop() / (ms * 1e-3));
      }
    }
  }
}

double net_latency(const Model& model, int runs) {
  Session net(model);
  std::vector<NamedBlob> in, out;
  for (const auto& t : model.inputs()) in.push_back({t.name, Blob::allocate(t.shape)});
  for (const auto& t : model.outputs()) out.push_back({t.name, Blob::allocate(t.shape)});
  for (int i = 0; i < 3; ++i) net.run(in, out);  // eager, recorded, replayed
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    net.run(in, out);
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void bench_net(const std::string& model, int runs) {
  for (const char* schema : {"cuda:float32", "cuda:float16"}) {
    TuneOptions opt;
    opt.schemas = {schema};
    opt.pin = {{"*", "cuda*"}};
    opt.cache_dir = "-";
    opt.unit_budget_ms = 5;
    TuneReport r;
    const std::string tuned = fmt::format("/tmp/cuda_bench_{}.dnn", ::getpid());
    tune(Model::load(model), opt, &r).save(tuned);
    setenv("SOFTNEURO_CUDA_GRAPHS", "1", 1);
    const Model with_graphs = Model::load(tuned);
    const auto before = cuda::graph_stats();
    const double graphs_ms = net_latency(with_graphs, runs);
    const auto after = cuda::graph_stats();
    setenv("SOFTNEURO_CUDA_GRAPHS", "0", 1);
    const Model eager = Model::load(tuned);
    const double eager_ms = net_latency(eager, runs);
    unsetenv("SOFTNEURO_CUDA_GRAPHS");
    std::remove(tuned.c_str());
    fmt::print("{} {}: tuned (predicted {:.3f} ms), eager {:.3f} ms, CUDA graph {:.3f} ms ({} recorded, {} replays)\n",
               model, schema, r.predicted_ms, eager_ms, graphs_ms, after.captures - before.captures,
               after.launches - before.launches);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  int runs = 50;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    else model = argv[i];
  }
  if (!device_memory(Device::cuda)) {
    fmt::print("cuda_bench: no CUDA device: {}\n", cuda::device_unavailable_reason());
    return 0;
  }
  fmt::print("device: {}\n", cuda::device_description());
  try {
    bench_convs(runs);
    if (!model.empty()) bench_net(model, runs);
  } catch (const std::exception& e) {
    fmt::print(stderr, "cuda_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
