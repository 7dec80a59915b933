// Optional whole-run recording for device backends (CUDA graphs), so that the
// executor can replay a net's device work with one launch while core stays
// free of any device API.
//
// A backend registers hooks for its device (the CUDA backend does when it
// finds a GPU). An executor whose every step is a routine the hooks call
// capturable runs its first run eagerly (libraries load kernels lazily),
// records its second run and from then on replays the recording. Recording
// is given up for good (eager runs) when any hook refuses or fails.
// Header-only: nothing to add to the build.
#pragma once

#include <softneuro/routine.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace softneuro::core {

struct DeviceGraphHooks {
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
inline std::mutex& device_graph_mutex() {
  static std::mutex m;
  return m;
}
inline std::map<Device, DeviceGraphHooks>& device_graph_table() {
  static std::map<Device, DeviceGraphHooks> table;
  return table;
}
}  // namespace detail

/// Registers the hooks of `device` (a backend calls this when its device works).
inline void register_device_graph_hooks(Device device, const DeviceGraphHooks& hooks) {
  std::lock_guard lock(detail::device_graph_mutex());
  detail::device_graph_table()[device] = hooks;
}

/// The hooks of `device`, or nullptr.
inline const DeviceGraphHooks* device_graph_hooks(Device device) {
  std::lock_guard lock(detail::device_graph_mutex());
  auto it = detail::device_graph_table().find(device);
  return it == detail::device_graph_table().end() ? nullptr : &it->second;
}

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
    hooks_ = devices.size() == 1 ? device_graph_hooks(devices[0]) : nullptr;
    enabled_ = hooks_ != nullptr && !routines.empty();
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

  const DeviceGraphHooks* hooks_ = nullptr;
  bool enabled_ = false;
  int eager_runs_ = 0;
  void* graph_ = nullptr;
};

}  // namespace softneuro::core
