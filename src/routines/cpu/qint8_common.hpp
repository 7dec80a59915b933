// What the cpu:qint8 routine files share (qint8.cpp, winograd_qint8.cpp): the
// checks every routine makes, the epilogue of a fused activation, the bias and
// requantisation multipliers of a GEMM's output channels, and the task loop.
// Defined in qint8.cpp (run_tasks here).
#pragma once

#include "routines/cpu/pair_fix.hpp"
#include "routines/cpu/qint8_kernels.hpp"
#include "routines/cpu/quant_params.hpp"

#include <softneuro/routine.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

namespace softneuro::qint8 {

/// What every cpu:qint8 routine needs: AVX2, a qint8 schema, calibration of every blob.
Support routine_support(const LayerInfo& info, const Schema& s);
/// The layer's fused activation as an epilogue (zero point, clamps, affine), or why it cannot be one.
Support activation_epilogue(const Layer& l, const cpu::TQ& out, Epilogue* ep);
/// A float bias as int32 at the accumulators' scale s_in * s_w.
int32_t quantise_bias(float b, float s_in, float s_w);
/// An output channel's requantisation multiplier (Epilogue::mult).
float output_multiplier(const Epilogue& ep, float s_in, float s_w, float s_out);

/// A GEMM's packed weights with the bias and requantisation multiplier of
/// each output channel (16 lanes a block): conv2's and dense's (Routine::pack).
struct GemmWeights final : softneuro::PackedWeights {
  /// How `packed` is laid out and on which CPU that was decided (qint8.cpp's GemmKernel).
  struct Form {
    int32_t kernel = 0;
    int32_t vnni_cpu = 0;
    bool operator==(const Form&) const = default;
  };
  Blob packed;
  std::vector<int32_t> bias;
  std::vector<float> mult;
  Form form;
  std::vector<uint8_t> perm;                ///< blocks x k16: each block's pairing (pair_fix.hpp); empty without one
  std::vector<int32_t> fix_start;           ///< blocks + 1: block b's fixes are [fix_start[b], fix_start[b + 1])
  std::vector<pair_fix::PairFix> fixes;     ///< by block
  Blob save() const override;
};
/// Their bytes in a file's weight store, and back: nothing where the bytes do
/// not hold `lanes` channels (blocks of 16), a valid pairing and valid fixes
/// below K position `k16`; the caller checks the form and the weights' size.
Blob save_packed(const GemmWeights& pw);
std::optional<GemmWeights> load_packed(const Blob& bytes, std::size_t lanes, int64_t k16);

/// Runs fn(task, slot) for every task in [0, tasks) on the pool; each slot
/// (a scratch area) is used by one thread at a time. Tasks are taken in order
/// by whichever thread is free (dynamic balance), without allocating.
template <class F>
void run_tasks(ThreadPool* pool, int64_t slots, int64_t tasks, F&& fn) {
  std::atomic<int64_t> next{0};
  pool->parallel_for(std::max<int64_t>(1, std::min(slots, tasks)), 1, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s)
      for (int64_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) fn(t, s);
  });
}

}  // namespace softneuro::qint8
