// Hooks a device backend registers so that the executor can use the device
// while core stays free of any device API:
//  - queues: each session (ShapedExecutors) owns one queue of device work per
//    device (CUDA: a stream with its own cuBLAS/cuBLASLt/cuDNN handles), bound
//    to the calling thread while its executors prepare and run, so sessions on
//    one GPU neither wait for each other nor share a library handle, and one
//    session's graph recording never sees another's work;
//  - whole-run recording (CUDA graphs): an executor whose every step is a
//    routine the hooks call capturable runs its first run eagerly (libraries
//    load kernels lazily), records its second run and from then on replays
//    the recording. Recording is given up for good (eager runs) when any hook
//    refuses or fails.
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

/// One executor's recording.
class DeviceGraph {
 public:
  DeviceGraph() = default;
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;
  ~DeviceGraph() { reset(); }

  /// Enables recording when `devices` (the non-CPU devices the executor uses)
  /// is exactly one device with hooks, and every routine is capturable by them.
  void init(const std::vector<Device>& devices, const std::vector<const PreparedRoutine*>& routines) {
    reset();
    hooks_ = devices.size() == 1 ? device_hooks(devices[0]) : nullptr;
    enabled_ = hooks_ != nullptr && hooks_->capturable && !routines.empty();
    for (const PreparedRoutine* r : routines) enabled_ = enabled_ && hooks_->capturable(r);
    eager_runs_ = 0;
  }

  /// Replays the recording (recording it first on the second call): true
  /// when `run_steps`'s work was queued this way; false when the caller must
  /// run the steps itself, eagerly (nothing was queued then).
  template <class F>
  bool run(F&& run_steps) {
    if (!enabled_) return false;
    if (!graph_) {
      if (++eager_runs_ < 2) return false;
      if (!hooks_->begin_capture()) return give_up();
      try {
        run_steps();
      } catch (...) {
        if (void* g = hooks_->end_capture()) hooks_->destroy(g);
        return give_up();
      }
      graph_ = hooks_->end_capture();
      if (!graph_) return give_up();
    }
    return hooks_->launch(graph_) || give_up();
  }

  bool recorded() const { return graph_ != nullptr; }

 private:
  bool give_up() {
    reset();
    enabled_ = false;
    return false;
  }
  void reset() {
    if (graph_ && hooks_) hooks_->destroy(graph_);
    graph_ = nullptr;
  }

  const DeviceHooks* hooks_ = nullptr;
  bool enabled_ = false;
  int eager_runs_ = 0;
  void* graph_ = nullptr;
};

}  // namespace softneuro::core
