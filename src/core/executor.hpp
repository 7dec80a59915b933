// The executor: routines chosen and prepared once, blobs planned into one
// arena by liveness, and a run loop that allocates nothing.
#pragma once

#include "core/device_hooks.hpp"
#include "core/graph.hpp"
#include "core/memory_plan.hpp"
#include "core/plan.hpp"
#include "core/registry.hpp"
#include "core/shape_plan.hpp"
#include "core/weight_store.hpp"

#include <softneuro/session.hpp>

#include <map>
#include <set>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace softneuro::core {

/// The CPU arena the executors of one session share: a session runs one of
/// them at a time, so it needs the largest of their plans, not their sum (four
/// input shapes cost one arena). Grows to the largest plan asked for; an
/// executor rebinds its blobs to it at every run.
class HostArena {
 public:
  /// Makes room for `bytes`; returns false where memory ran out.
  bool reserve(std::size_t bytes);
  char* base() const { return static_cast<char*>(memory_.get()); }
  std::size_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<void> memory_;
  std::size_t bytes_ = 0;
};

class Executor {
 public:
  /// Prepares every step of `plan` (its routines; constants converted to the
  /// schemas their readers want, once), lets steps fuse where their routines
  /// can (Routine::prepare_with_previous, int8 table gates, views, slices),
  /// and plans memory. Throws Error naming the layer at fault.
  /// `queues`: the session's device queues (core/device_hooks.hpp), bound while
  /// this executor prepares and runs; nullptr: whichever the calling thread has
  /// bound (a childnet's: its parent's; elsewhere each device's default queue).
  /// `host_arena`: the session's shared CPU arena (nullptr: one of its own),
  /// used where every step runs on the CPU (a device graph records host
  /// addresses, so an executor with device steps keeps its own).
  explicit Executor(Plan plan, std::shared_ptr<DeviceQueues> queues = nullptr, std::shared_ptr<HostArena> host_arena = nullptr);

  /// Makes this executor run at other input shapes, its routine choices kept
  /// (a session's shape bucket): `shapes` is every blob's there and `changes`
  /// what differs in the graph specialised there (respecialize; none where the
  /// graph has no shape computations). Only the steps whose shapes or
  /// shape-computed parameters change are prepared again; the constants
  /// computed from shapes take their new values; memory is planned again.
  /// False, with the reason in `why`, where that would not be the same plan: a
  /// step that changes is fused with another or a childnet's child, or the
  /// plan has device steps. After false or an Error the executor must not run again.
  bool rebind(const std::unordered_map<std::string_view, Shape>& shapes, const SpecializeChanges& changes,
              std::string* why = nullptr);

  /// The plan it runs (after fusion: Step::fused_into, Step::view).
  const Plan& plan() const { return plan_; }
  const LayerInfo* layer_info(const std::string& layer) const { return plan_.layer_info(layer); }

  /// Runs every step. With `step_ms` (steps().size() entries), also stores
  /// each step's wall time in milliseconds (integrated profiling).
  void run(std::span<const NamedBlob> inputs, std::span<NamedBlob> outputs, double* step_ms = nullptr);

  /// The actual shape of `blob` in the last run where a value-shaped layer
  /// (LayerType::value_shaped) writes it: its planned blob holds the capacity,
  /// the actual elements first. nullopt for other blobs.
  std::optional<Shape> value_shape(const std::string& blob) const;

  const std::vector<std::unique_ptr<Step>>& steps() const { return plan_.steps; }
  /// Whether every step that reads net input `name` checks it for NaN and inf
  /// as it copies it (PreparedRoutine::checks_non_finite: a device upload), so
  /// that the caller need not scan it before the run; saw_non_finite() then
  /// says after the run what they found.
  bool checks_non_finite(const std::string& name) const;
  /// After a run: whether a step that checks a net input found NaN or inf.
  bool saw_non_finite() const;
  /// Whether some of its memory is on a device other than the CPU.
  bool uses_device() const {
    for (const auto& a : arenas_)
      if (a.device != Device::cpu) return true;
    return false;
  }
  /// Bytes of all arenas (host and devices).
  std::size_t arena_bytes() const;
  std::size_t unplanned_bytes() const { return unplanned_bytes_; }

 private:
  /// One arena per device: the plan of the blobs and workspaces living there.
  struct Arena {
    Device device = Device::cpu;
    std::vector<BufferRequest> requests;
    MemoryPlan plan;
    std::shared_ptr<void> memory;
    std::size_t memory_bytes = 0;       ///< of `memory`
    std::shared_ptr<HostArena> shared;  ///< the session's, in place of `memory`
    char* base() const { return shared ? shared->base() : static_cast<char*>(memory.get()); }
  };
  Arena& arena(Device d);
  /// Plans the blobs and workspaces into one arena per device (again after a
  /// rebind: memory grows where it must, never shrinks) and binds them.
  void plan_arenas(const std::shared_ptr<HostArena>& host_arena);
  void bind_outputs_to_arena();
  /// Prepares step `t` alone.
  void prepare_step(Step& step);
  /// Prepares the steps the plan fused (Step::fuses_previous, Step::gate) as
  /// one and wires their blobs so; where a routine cannot after all (nullptr),
  /// they are prepared and run apart.
  void prepare_fused_pair(std::size_t t);
  void prepare_gate(Step& m);
  /// Runs the adapt `step` once, from constant slot `from` into constant slot
  /// `to`, whose memory the executor then owns (`into`, one of constant_copies_).
  void convert_constant(Step& step, int from, int to, std::shared_ptr<void>& into);
  /// Concats whose inputs, and splits whose outputs, are contiguous byte ranges
  /// of their whole (core::contiguous_slices) between planned CPU blobs: the
  /// pieces live in the whole's memory and the step runs nothing.
  void share_slices();
  /// Which net inputs only checking steps read, and which steps check
  /// (checked_inputs_, checking_steps_): once the steps are prepared.
  void note_checking_steps();
  /// Steps whose output is their input's bytes (PreparedRoutine::output_is_input)
  /// between planned CPU blobs: the output shares the input's memory, whose
  /// lifetime grows to cover it, and the step runs nothing.
  void share_views();
  /// Gives a step's output the memory of the input it accumulates onto
  /// (PreparedRoutine::output_accumulates) where nothing reads that input after.
  void share_accumulators();
  /// The planned blob whose memory `slot` uses (its own, or the one it aliases).
  int memory_root(int slot) const {
    const int a = slots_[static_cast<std::size_t>(slot)].alias;
    return a >= 0 ? a : slot;
  }

  /// First, so destroyed last: the prepared routines and the recording go before their queues.
  std::shared_ptr<DeviceQueues> queues_;
  Plan plan_;
  const Graph& graph_ = *plan_.graph;
  std::vector<BlobSlot>& slots_ = plan_.slots;
  std::vector<Blob>& blobs_ = plan_.blobs;
  std::vector<std::unique_ptr<Step>>& steps_ = plan_.steps;
  const std::vector<int>& net_inputs_ = plan_.net_inputs;
  const std::vector<int>& net_outputs_ = plan_.net_outputs;
  std::vector<std::shared_ptr<void>> constant_copies_;  ///< memory of constants converted once (convert_constant), one per plan_.constant_adapts
  std::vector<Arena> arenas_;
  std::size_t unplanned_bytes_ = 0;
  std::vector<bool> checked_inputs_;      ///< per net input: checks_non_finite
  std::vector<std::size_t> checking_steps_;  ///< steps whose prepared routine checks its input 0
  DeviceGraphs device_graphs_;  ///< [device graphs] replays runs of device steps (core/device_hooks.hpp)
};

}  // namespace softneuro::core
