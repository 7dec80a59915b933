// Whole nets on the device: routine paths that put every layer on CUDA (the
// executor inserts the transfers, plans one device arena, records the second
// run into a CUDA graph and replays it), and hybrid tuning over
// cpu, cuda:float32 and cuda:float16.
#include "support/tuning.hpp"
#include "cuda_harness.hpp"

#include "core/model_impl.hpp"
#include "routines/cuda/cuda_stats.hpp"
#include "support/graphs.hpp"
#include "support/run_layer.hpp"

#include <softneuro/session.hpp>

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <latch>
#include <limits>
#include <thread>

using namespace softneuro;
using namespace softneuro::cudatest;

namespace {

/// Every layer on `schema` ("cuda" or "cuda:float16"): cuDNN for conv2,
/// cuBLAS for dense, our kernels for the rest.
core::Tuning on_device(const core::Graph& g, const std::string& schema) {
  core::Tuning t;
  for (const Layer& l : g.layers) {
    if (l.type == "constant") continue;
    const char* algo = l.type == "conv2" ? "cudnn" : l.type == "dense" ? "cublas" : "kernel";
    t.routine_path.routines.push_back({l.name, fmt::format("{}/{}", schema, algo), {}, 0, 0});
  }
  return t;
}

std::vector<NamedBlob> inputs_of(const Model& net, std::mt19937& rng) {
  std::vector<NamedBlob> in;
  for (const auto& t : net.inputs()) in.push_back({t.name, random_blob(t.shape, rng)});
  return in;
}

void check_same(const std::vector<NamedBlob>& got, const std::vector<NamedBlob>& want, const Tolerance& tol,
                const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) close(got[i].blob, want[i].blob, tol, what + " output " + got[i].name);
}

}  // namespace

TEST_CASE("a net entirely on the device runs, then replays as a CUDA graph", "[net]") {
  for (const std::string schema : {"cuda", "cuda:float16"}) {
    for (int which = 0; which < 2; ++which) {
      core::Graph g = which ? test::multi_io_graph() : test::chain_graph(6);
      Session cpu(detail::make_model(g));
      Session gpu(detail::make_model(g, on_device(g, schema)));
      for (const auto& l : gpu.layers()) {
        INFO(l.name << " " << l.descriptor);
        CHECK((l.descriptor.rfind("cuda", 0) == 0 || l.type == "adapt"));
      }
      CHECK(gpu.planned_bytes() > 0);
      const cuda::GraphStats before = cuda::graph_stats();
      std::mt19937 rng(31);
      for (int run = 0; run < 4; ++run) {  // fresh inputs and output blobs each time
        auto in = inputs_of(cpu.model(), rng);
        auto want = cpu.run(in);
        auto got = gpu.run(in);
        check_same(got, want, tolerance_for(Schema::parse(schema), 5.0), fmt::format("{} net {} run {}", schema, which, run));
      }
      const cuda::GraphStats after = cuda::graph_stats();
      const char* env = std::getenv("SOFTNEURO_CUDA_GRAPHS");
      if (!env || std::string(env) != "0") {
        CHECK(after.captures == before.captures + 1);  // recorded on the second run
        CHECK(after.launches >= before.launches + 3);  // replayed from then on
        CHECK(after.failures == before.failures);
      }
      // Outputs written in place into the caller's blobs, on a replay too.
      std::vector<NamedBlob> in = inputs_of(cpu.model(), rng), outs;
      for (const auto& t : gpu.model().outputs()) outs.push_back({t.name, Blob::allocate(t.shape)});
      gpu.run(in, outs);
      check_same(outs, cpu.run(in), tolerance_for(Schema::parse(schema), 5.0), schema + " in-place outputs");
    }
  }
}

TEST_CASE("NaN in an input only uploads read: found as it is copied, and it reaches the outputs as on the CPU", "[net]") {
  // conv2 -> relu -> sigmoid -> tanh -> hardswish -> conv2 on the device: the
  // session scans no input (the upload checks it), the kernels keep NaN
  // (relu and the clamps gave 0 for it), cuDNN's fused call propagates it.
  for (const std::string schema : {"cuda", "cuda:float16"}) {
    core::Graph g = test::chain_graph(6);
    Session cpu(detail::make_model(g));
    Session gpu(detail::make_model(g, on_device(g, schema)));
    std::mt19937 rng(5);
    for (int run = 0; run < 5; ++run) {  // eager, recorded, replayed; NaN, then finite again
      auto in = inputs_of(cpu.model(), rng);
      if (run < 3) in[0].blob.data_as<float>()[run * 7] = std::numeric_limits<float>::quiet_NaN();
      auto want = cpu.run(in);
      auto got = gpu.run(in);
      auto nan_count = [](const Blob& b) {
        int64_t n = 0;
        for (int64_t i = 0; i < b.numel(); ++i) n += std::isnan(b.data_as<float>()[i]) ? 1 : 0;
        return n;
      };
      INFO(schema << " run " << run);
      if (run < 3) {
        CHECK(nan_count(want[0].blob) > 0);
        CHECK(nan_count(got[0].blob) > 0);
      } else {
        CHECK(nan_count(got[0].blob) == 0);
        check_same(got, want, tolerance_for(Schema::parse(schema), 5.0), schema + " finite after NaN");
      }
    }
  }
}

TEST_CASE("host steps between device steps: each run of device steps replays as its own CUDA graph", "[net]") {
  // l2 and l6 on the host: [upload l0 l1 download] l2 [upload l3 l4 l5 download] l6 [upload l7 download]
  for (const std::string schema : {"cuda", "cuda:float16"}) {
    core::Graph g = test::chain_graph(8);
    Session cpu(detail::make_model(g));
    core::Graph mixed = g;
    core::Tuning mixed_tuning = on_device(g, schema);
    for (auto& r : mixed_tuning.routine_path.routines)
      if (r.layer == "l2" || r.layer == "l6") r.descriptor = "cpu/ref";
    Session gpu(detail::make_model(mixed, mixed_tuning));
    const cuda::GraphStats before = cuda::graph_stats();
    std::mt19937 rng(33);
    for (int run = 0; run < 5; ++run) {  // fresh inputs each time: the replayed uploads read them
      auto in = inputs_of(cpu.model(), rng);
      check_same(gpu.run(in), cpu.run(in), tolerance_for(Schema::parse(schema), 5.0), fmt::format("{} run {}", schema, run));
    }
    const cuda::GraphStats after = cuda::graph_stats();
    const char* env = std::getenv("SOFTNEURO_CUDA_GRAPHS");
    if (!env || std::string(env) != "0") {
      CHECK(after.captures == before.captures + 3);   // each run of device steps, on the second run
      CHECK(after.launches == before.launches + 12);  // 3 per run from the second on
      CHECK(after.failures == before.failures);
    }
  }
}

TEST_CASE("a layer on the device between CPU layers in a blocked layout runs, through the plain CPU schema", "[net]") {
  // As the accuracy budget's search runs one layer at a time below float32: on
  // an H200, "no adapt routine converts ... from cuda:float16 to cpu:float32:nchw16c".
  core::Graph g = test::chain_graph(3);  // l0 conv2, l1 relu, l2 sigmoid
  Session cpu(detail::make_model(g));
  core::Graph mixed = g;
  core::Tuning mixed_tuning;
  mixed_tuning.routine_path = {};
  mixed_tuning.routine_path.routines.push_back({"l0", "cpu:float32:nchw16c/onednn", {}, 0, 0});
  mixed_tuning.routine_path.routines.push_back({"l1", "cuda:float16/kernel", {}, 0, 0});
  mixed_tuning.routine_path.routines.push_back({"l2", "cpu:float32:nchw16c/onednn", {}, 0, 0});
  Session gpu(detail::make_model(mixed, mixed_tuning));
  for (const auto& l : gpu.layers()) {
    INFO(l.name << " " << l.descriptor);
    if (l.name == "l1") CHECK(l.descriptor == "cuda:float16/kernel");
  }
  std::mt19937 rng(34);
  for (int run = 0; run < 4; ++run) {
    auto in = inputs_of(cpu.model(), rng);
    check_same(gpu.run(in), cpu.run(in), tolerance_for(Schema::parse("cuda:float16"), 5.0), fmt::format("run {}", run));
  }
}

TEST_CASE("hybrid tuning over cpu, cuda:float32 and cuda:float16 runs", "[net]") {
  for (int which = 0; which < 2; ++which) {
    core::Graph g = which ? test::multi_io_graph() : test::chain_graph(6);
    Model cpu = detail::make_model(g);
    Model net = detail::make_model(g);
    TuneOptions opt;
    opt.schemas = {"cpu", "cuda:float32", "cuda:float16"};
    opt.accuracy = "none";  // no samples: float16 only where allowed unchecked (this test checks it runs, within float16's tolerance)
    opt.cache_dir = "-";
    opt.unit_budget_ms = 1;
    opt.integrated_runs = 2;
    TuneReport r = tune_and_keep(net, opt);
    INFO(r.to_text());
    CHECK(r.measured_ms > 0);
    CHECK(r.measurements > 0);
    std::mt19937 rng(32);
    Session tuned(net), reference(cpu);
    for (int run = 0; run < 3; ++run) {
      auto in = inputs_of(cpu, rng);
      check_same(tuned.run(in), reference.run(in), tolerance_for(Schema::parse("cuda:float16"), 5.0),
                 fmt::format("hybrid net {} run {}", which, run));
    }
    // The tuned path saves and loads; on this device it loads as tuned.
    const std::string path = test::temp_path(fmt::format("cuda_hybrid_{}.dnn", which));
    net.save(path);
    Model loaded = Model::load(path);
    auto a = Session(net).layers(), b = Session(loaded).layers();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].descriptor == b[i].descriptor);
    auto in = inputs_of(cpu, rng);
    check_same(Session(loaded).run(in), Session(net).run(in), Tolerance{1e-6, 1e-6}, "reloaded tuned net");
  }
}

TEST_CASE("tuning pinned to the device measures cuDNN algorithms and keeps a CUDA path", "[net]") {
  core::Graph g = test::chain_graph(6);
  Model cpu = detail::make_model(g);
  Model net = detail::make_model(g);
  TuneOptions opt;
  opt.schemas = {"cuda:float32"};
  opt.cache_dir = "-";
  opt.unit_budget_ms = 1;
  opt.integrated_runs = 2;
  opt.pin = {{"*", "cuda*"}};
  TuneReport r = tune_and_keep(net, opt);
  INFO(r.to_text());
  for (const auto& l : r.layers) CHECK(l.descriptor.rfind("cuda", 0) == 0);
  for (const auto& l : r.layers)
    if (l.type == "conv2" && l.descriptor == "cuda/cudnn") {
      CHECK(l.candidates >= 2);  // several algorithms measured
      CHECK_THAT(l.routine_params, Catch::Contains("algo="));
    }
  std::mt19937 rng(33);
  auto in = inputs_of(cpu, rng);
  check_same(Session(net).run(in), Session(cpu).run(in), tolerance_for(Schema{Device::cuda}, 10.0), "pinned net");
}

TEST_CASE("sessions on one GPU run at once, each on its own stream and library handles", "[net][concurrency]") {
  // One shared stream (and cuBLAS/cuDNN handle) before: a session recording its
  // second run into a CUDA graph made another's cudaStreamSynchronize fail
  // ("operation not permitted when stream is capturing"); `softneuro bench
  // --sessions 4` of a tuned ResNet50 aborted.
  constexpr int kSessions = 4, kRuns = 12;
  for (const std::string schema : {"cuda", "cuda:float16"}) {
    const core::Graph g = test::multi_io_graph();
    const core::Tuning tuning = on_device(g, schema);
    Model reference = detail::make_model(g, tuning);
    Session reference_session(reference);
    std::vector<std::vector<NamedBlob>> inputs, want;
    std::mt19937 rng(34);
    for (int r = 0; r < kSessions * kRuns; ++r) {
      inputs.push_back(inputs_of(reference, rng));
      want.push_back(reference_session.run(inputs.back()));
    }
    // A model each, as separate apps would load it.
    std::vector<std::unique_ptr<Session>> nets;
    for (int s = 0; s < kSessions; ++s) nets.push_back(std::make_unique<Session>(detail::make_model(g, tuning)));
    std::latch first_runs_done(kSessions);  // every session records its second run at the same time
    std::vector<std::string> errors(kSessions);
    std::vector<int> mismatches(kSessions, 0);
    std::vector<std::thread> threads;
    for (int s = 0; s < kSessions; ++s)
      threads.emplace_back([&, s] {
        bool arrived = false;
        try {
          for (int r = 0; r < kRuns; ++r) {
            const int k = s * kRuns + r;
            auto got = nets[static_cast<std::size_t>(s)]->run(inputs[static_cast<std::size_t>(k)]);
            if (r == 0) {
              arrived = true;
              first_runs_done.arrive_and_wait();
            }
            for (std::size_t o = 0; o < got.size(); ++o) {
              const auto a = test::values(got[o].blob), b = test::values(want[static_cast<std::size_t>(k)][o].blob);
              mismatches[static_cast<std::size_t>(s)] += a != b;
            }
          }
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(s)] = e.what();
          if (!arrived) first_runs_done.count_down();
        }
      });
    for (auto& t : threads) t.join();
    for (int s = 0; s < kSessions; ++s) {
      INFO(schema << " session " << s);
      CHECK(errors[static_cast<std::size_t>(s)].empty());
      CHECK(mismatches[static_cast<std::size_t>(s)] == 0);  // bit for bit the single session's outputs
    }
  }
}
