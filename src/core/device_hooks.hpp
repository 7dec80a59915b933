// Hooks a device backend registers so that the executor can use the device
// while core stays free of any device API:
//  - queues: each session (ShapedExecutors) owns one queue of device work per
//    device (CUDA: a stream with its own cuBLAS/cuBLASLt/cuDNN handles), bound
//    to the calling thread while its executors prepare and run, so sessions on
//    one GPU neither wait for each other nor share a library handle, and one
//    session's graph recording never sees another's work;
//  - recordings (CUDA graphs): each run of consecutive steps that the hooks
//    call capturable (the whole run when every step is) runs eagerly first
//    (libraries load kernels lazily), is recorded on the second run and is
//    replayed from then on (DeviceGraphs below).
// Header-only: nothing to add to the build.
#pragma once

#include <softneuro/routine.hpp>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace softneuro::core {

struct DeviceHooks {
  /// A new queue of device work (cheap: device resources come on first use).
  void* (*create_queue)() = nullptr;
  void (*destroy_queue)(void* queue) = nullptr;
  /// Makes `queue` the calling thread's current one (nullptr: the device's
  /// default queue); returns the one it replaces.
  void* (*bind_queue)(void* queue) = nullptr;

  /// [step timing] A marker recorded on the current queue's work now, and the
  /// milliseconds of device work between two markers (waits for the second;
  /// releases both). The executor times its device steps with them: a step's
  /// synchronisation is not part of its cost in a run, which queues steps back
  /// to back (or replays them as one graph).
  void* (*mark)() = nullptr;
  double (*elapsed_ms)(void* from, void* to) = nullptr;
  /// [unit timing] Queues device work that only takes `ms`: work the host
  /// queues behind it meanwhile then runs back to back, and markers around it
  /// span its device time alone, without its launches. False on failure.
  bool (*hold)(double ms) = nullptr;

  /// Whether this prepared routine only queues work on the device that a
  /// recording may replay (pointers fixed; no host-side work at run time).
  bool (*capturable)(const PreparedRoutine* routine) = nullptr;
  /// Starts recording the device's queue; false when recording is off or fails.
  bool (*begin_capture)() = nullptr;
  /// Ends the recording: a replayable graph, or nullptr when it failed
  /// (nothing recorded has run then).
  void* (*end_capture)() = nullptr;
  /// Queues one replay; false on failure.
  bool (*launch)(void* graph) = nullptr;
  void (*destroy)(void* graph) = nullptr;
};

namespace detail {
inline std::mutex& device_hooks_mutex() {
  static std::mutex m;
  return m;
}
inline std::map<Device, DeviceHooks>& device_hooks_table() {
  static std::map<Device, DeviceHooks> table;
  return table;
}
}  // namespace detail

/// Registers the hooks of `device` (a backend calls this when its device works).
inline void register_device_hooks(Device device, const DeviceHooks& hooks) {
  std::lock_guard lock(detail::device_hooks_mutex());
  detail::device_hooks_table()[device] = hooks;
}

/// The hooks of `device`, or nullptr.
inline const DeviceHooks* device_hooks(Device device) {
  std::lock_guard lock(detail::device_hooks_mutex());
  auto it = detail::device_hooks_table().find(device);
  return it == detail::device_hooks_table().end() ? nullptr : &it->second;
}

/// One session's queues, one per device with hooks; bind() makes them the
/// calling thread's current ones until the returned binding ends.
class DeviceQueues {
 public:
  static constexpr std::size_t kMaxQueues = 4;  ///< devices with queue hooks (CUDA today)
  /// nullptr where no device registered queue hooks (nothing to bind).
  static std::shared_ptr<DeviceQueues> create() {
    std::vector<std::pair<const DeviceHooks*, void*>> queues;
    {
      std::lock_guard lock(detail::device_hooks_mutex());
      for (const auto& [device, hooks] : detail::device_hooks_table())
        if (hooks.create_queue && hooks.destroy_queue && hooks.bind_queue && queues.size() < kMaxQueues)
          queues.push_back({&hooks, nullptr});
    }
    if (queues.empty()) return nullptr;
    auto q = std::shared_ptr<DeviceQueues>(new DeviceQueues());
    for (auto& [hooks, queue] : queues) {
      queue = hooks->create_queue();
      if (queue) q->queues_.push_back({hooks, queue});
    }
    return q;
  }
  DeviceQueues(const DeviceQueues&) = delete;
  DeviceQueues& operator=(const DeviceQueues&) = delete;
  ~DeviceQueues() {
    for (auto& [hooks, queue] : queues_) hooks->destroy_queue(queue);
  }

  /// Restores the queues bound before it when it ends. Holds no heap memory:
  /// a session binds its queues on every run.
  class Binding {
   public:
    Binding() = default;
    Binding(Binding&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), previous_(o.previous_) {}
    Binding(const Binding&) = delete;
    Binding& operator=(const Binding&) = delete;
    ~Binding() {
      if (!owner_) return;
      for (std::size_t i = owner_->queues_.size(); i-- > 0;) owner_->queues_[i].first->bind_queue(previous_[i]);
    }

   private:
    friend class DeviceQueues;
    const DeviceQueues* owner_ = nullptr;
    std::array<void*, kMaxQueues> previous_{};
  };
  [[nodiscard]] Binding bind() const {
    Binding b;
    b.owner_ = this;
    for (std::size_t i = 0; i < queues_.size(); ++i) b.previous_[i] = queues_[i].first->bind_queue(queues_[i].second);
    return b;
  }

 private:
  DeviceQueues() = default;
  std::vector<std::pair<const DeviceHooks*, void*>> queues_;
};

/// The maximal runs [begin, end) of consecutive steps that are all
/// capturable: each is recorded and replayed as one graph.
inline std::vector<std::pair<std::size_t, std::size_t>> capture_segments(const std::vector<bool>& capturable) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t t = 0; t < capturable.size(); ++t) {
    if (!capturable[t]) continue;
    if (!out.empty() && out.back().second == t)
      out.back().second = t + 1;
    else
      out.push_back({t, t + 1});
  }
  return out;
}

/// One executor's recordings. Each maximal run of steps the device's hooks can
/// capture (a whole run when every step can) runs eagerly the first time
/// (libraries load kernels lazily), is recorded on the second run and replayed
/// from then on, as one graph: its steps then cost their device time, not one
/// host launch each. The host steps between such runs run eagerly, after the
/// replayed device work they may read (a download's host node) has finished.
/// A recording that any hook refuses or fails is given up for good (its steps
/// run eagerly).
class DeviceGraphs {
 public:
  DeviceGraphs() = default;
  DeviceGraphs(const DeviceGraphs&) = delete;
  DeviceGraphs& operator=(const DeviceGraphs&) = delete;
  ~DeviceGraphs() { reset(); }

  /// Finds the runs to record when `devices` (the non-CPU devices the executor
  /// uses) is exactly one device with hooks; none otherwise.
  void init(const std::vector<Device>& devices, const std::vector<const PreparedRoutine*>& routines) {
    reset();
    segments_.clear();
    hooks_ = devices.size() == 1 ? device_hooks(devices[0]) : nullptr;
    if (!hooks_ || !hooks_->capturable || !hooks_->begin_capture || !hooks_->end_capture || !hooks_->launch) return;
    std::vector<bool> capturable;
    for (const PreparedRoutine* r : routines) capturable.push_back(hooks_->capturable(r));
    for (const auto& [b, e] : capture_segments(capturable)) segments_.push_back({b, e});
  }

  /// Runs steps [0, n): `run_steps(b, e)` runs steps b..e-1 eagerly (or, while
  /// recording, queues them into the recording); `synchronize()` waits for the
  /// device's queued work.
  template <class Run, class Sync>
  void run(std::size_t n, Run&& run_steps, Sync&& synchronize) {
    std::size_t t = 0;
    bool queued = false;  // replayed device work host steps may read
    auto host_steps = [&](std::size_t end) {
      if (t >= end) return;
      if (queued) synchronize();
      queued = false;
      run_steps(t, end);
    };
    for (Segment& s : segments_) {
      host_steps(s.begin);
      if (replay(s, [&] { run_steps(s.begin, s.end); }))
        queued = true;
      else
        run_steps(s.begin, s.end);
      t = s.end;
    }
    host_steps(n);
  }

  /// Whether step `t` is replayed (or will be, once recorded) as part of a graph.
  bool replays(std::size_t t) const {
    for (const Segment& s : segments_)
      if (t >= s.begin && t < s.end) return s.enabled;
    return false;
  }
  /// Graphs recorded so far.
  int recorded() const {
    int n = 0;
    for (const Segment& s : segments_) n += s.graph != nullptr;
    return n;
  }

 private:
  struct Segment {
    std::size_t begin = 0, end = 0;
    void* graph = nullptr;
    bool enabled = true;
    int eager_runs = 0;
  };
  /// True when `record`'s work was queued by a replay (recording it first on the second call).
  template <class F>
  bool replay(Segment& s, F&& record) {
    if (!s.enabled) return false;
    if (!s.graph) {
      if (++s.eager_runs < 2) return false;
      if (!hooks_->begin_capture()) return give_up(s);
      try {
        record();
      } catch (...) {
        if (void* g = hooks_->end_capture()) hooks_->destroy(g);
        return give_up(s);
      }
      s.graph = hooks_->end_capture();
      if (!s.graph) return give_up(s);
    }
    return hooks_->launch(s.graph) || give_up(s);
  }
  bool give_up(Segment& s) {
    if (s.graph) hooks_->destroy(s.graph);
    s.graph = nullptr;
    s.enabled = false;
    return false;
  }
  void reset() {
    for (Segment& s : segments_) {
      if (s.graph && hooks_) hooks_->destroy(s.graph);
      s.graph = nullptr;
    }
  }

  const DeviceHooks* hooks_ = nullptr;
  std::vector<Segment> segments_;
};

}  // namespace softneuro::core
