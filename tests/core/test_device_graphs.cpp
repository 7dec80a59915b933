// Recording runs of device steps (core/device_hooks.hpp) with hooks of a
// made-up device that log what the executor would do: which steps run eagerly,
// which are recorded and replayed, and where host steps wait for the device.
#include "core/device_hooks.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace softneuro;

namespace {

struct FakeStep final : PreparedRoutine {
  explicit FakeStep(bool on_device) : on_device(on_device) {}
  void run(const RunArgs&) override {}
  bool on_device;
};

std::vector<std::string> g_log;
bool g_recording = false;
int g_graphs = 0;
int g_refuse_capture = -1;  // the begin_capture call (0-based) to refuse
int g_begins = 0;

core::DeviceHooks fake_hooks() {
  core::DeviceHooks h;
  h.capturable = [](const PreparedRoutine* r) { return static_cast<const FakeStep*>(r)->on_device; };
  h.begin_capture = [] {
    if (g_begins++ == g_refuse_capture) return false;
    g_recording = true;
    return true;
  };
  h.end_capture = []() -> void* {
    g_recording = false;
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(++g_graphs));
  };
  h.launch = [](void* g) {
    g_log.push_back("launch " + std::to_string(reinterpret_cast<std::uintptr_t>(g)));
    return true;
  };
  h.destroy = [](void*) {};
  return h;
}

std::vector<std::string> run_once(core::DeviceGraphs& graphs, std::size_t n) {
  g_log.clear();
  graphs.run(
      n,
      [](std::size_t b, std::size_t e) {
        g_log.push_back(std::string(g_recording ? "record " : "run ") + std::to_string(b) + "-" + std::to_string(e));
      },
      [] { g_log.push_back("sync"); });
  return g_log;
}

using Log = std::vector<std::string>;

}  // namespace

TEST_CASE("capture_segments finds the maximal runs of capturable steps", "[device_graphs]") {
  using Runs = std::vector<std::pair<std::size_t, std::size_t>>;
  CHECK(core::capture_segments({}) == Runs{});
  CHECK(core::capture_segments({false, false}) == Runs{});
  CHECK(core::capture_segments({true, true, true}) == Runs{{0, 3}});
  CHECK(core::capture_segments({true, true, false, true, false, false, true, true}) == Runs{{0, 2}, {3, 4}, {6, 8}});
}

TEST_CASE("runs of device steps between host steps are recorded and replayed each as one graph", "[device_graphs]") {
  const auto fake = static_cast<Device>(200);  // a device no backend registers
  core::register_device_hooks(fake, fake_hooks());
  // steps: 0,1 device; 2 host; 3,4 device; 5 host
  std::vector<FakeStep> steps{FakeStep(true), FakeStep(true), FakeStep(false), FakeStep(true), FakeStep(true), FakeStep(false)};
  std::vector<const PreparedRoutine*> routines;
  for (const auto& s : steps) routines.push_back(&s);

  SECTION("recorded on the second run, replayed after; host steps wait for replayed work") {
    g_graphs = 0, g_begins = 0, g_refuse_capture = -1;
    core::DeviceGraphs graphs;
    graphs.init({fake}, routines);
    CHECK(graphs.replays(0));
    CHECK_FALSE(graphs.replays(2));
    CHECK(graphs.replays(4));
    CHECK_FALSE(graphs.replays(5));
    CHECK(run_once(graphs, 6) == Log{"run 0-2", "run 2-3", "run 3-5", "run 5-6"});
    CHECK(graphs.recorded() == 0);
    CHECK(run_once(graphs, 6) == Log{"record 0-2", "launch 1", "sync", "run 2-3", "record 3-5", "launch 2", "sync", "run 5-6"});
    CHECK(graphs.recorded() == 2);
    CHECK(run_once(graphs, 6) == Log{"launch 1", "sync", "run 2-3", "launch 2", "sync", "run 5-6"});
  }
  SECTION("a recording the device refuses leaves that run of steps eager for good") {
    g_graphs = 0, g_begins = 0, g_refuse_capture = 1;
    core::DeviceGraphs graphs;
    graphs.init({fake}, routines);
    run_once(graphs, 6);
    CHECK(run_once(graphs, 6) == Log{"record 0-2", "launch 1", "sync", "run 2-3", "run 3-5", "run 5-6"});
    CHECK(run_once(graphs, 6) == Log{"launch 1", "sync", "run 2-3", "run 3-5", "run 5-6"});
    CHECK_FALSE(graphs.replays(3));
    CHECK(graphs.replays(0));
  }
  SECTION("nothing is recorded without exactly one device with hooks") {
    core::DeviceGraphs graphs;
    graphs.init({}, routines);
    CHECK(run_once(graphs, 6) == Log{"run 0-6"});
    CHECK(run_once(graphs, 6) == Log{"run 0-6"});
    CHECK_FALSE(graphs.replays(0));
  }
  core::register_device_hooks(fake, core::DeviceHooks{});
}
