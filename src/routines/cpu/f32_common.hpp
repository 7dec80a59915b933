// Small helpers shared by our float32 CPU routines (im2col.cpp, direct.cpp,
// depthwise.cpp, eigen.cpp): weight checks, the fused activation as a GEMM
// epilogue, and per-thread workspace slots.
#pragma once

#include "core/aligned_memory.hpp"
#include "core/layer_types.hpp"
#include "core/prepared_weights.hpp"
#include "core/thread_pool.hpp"
#include "routines/cpu/gemm.hpp"
#include "routines/cpu/vec_kernels.hpp"
#include "routines/weight_checks.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

namespace softneuro::cpu {

/// The sums (before scale, bias and activation) of one row of a dense layer
/// whose input row (k values, x(kk)) holds NaN or infinity, as float32
/// computes them with the weights w(kk, o), into acc[0, n): NaN everywhere for
/// a NaN; otherwise the sums of the infinities' products alone (a finite rest
/// added to +-inf or NaN changes nothing). O(n) work for a NaN row, O(n) per
/// infinity otherwise, where the whole product takes O(n k): the int8 routines'
/// rows without a scale to quantise by.
template <class X, class W>
void non_finite_row(int64_t k, int64_t n, X x, W w, float* acc) {
  bool nan = false;
  for (int64_t kk = 0; kk < k && !nan; ++kk) nan = std::isnan(x(kk));
  std::fill(acc, acc + n, nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
  if (nan) return;
  for (int64_t kk = 0; kk < k; ++kk) {
    const float v = x(kk);
    if (!std::isinf(v)) continue;
    for (int64_t o = 0; o < n; ++o) acc[o] += v * w(kk, o);
  }
}

/// y = a(x) over n floats where a is relu, clip or hardsigmoid, NaN kept as
/// ONNX does (every comparison with NaN is false); x may be y. The compiler
/// vectorises it as maxps(lo, v), which returns v where v is NaN.
inline void clamp_span(const core::Activation& a, const float* x, float* y, int64_t n) {
  float lo = 0, hi = INFINITY, alpha = 1, beta = 0;
  if (a.kind == core::Activation::clip) lo = a.min, hi = a.max;
  if (a.kind == core::Activation::hardsigmoid) hi = 1, alpha = a.alpha, beta = a.beta;
  if (a.kind == core::Activation::hardsigmoid) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = alpha * x[i] + beta;
      y[i] = v < lo ? lo : (hi < v ? hi : v);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      y[i] = v < lo ? lo : (hi < v ? hi : v);
    }
  }
}

/// A 64-byte aligned float array for packed weights (vector loads of a packed
/// panel never split a cache line: measured 10-20% on the direct kernels).
class AlignedFloats {
 public:
  AlignedFloats() = default;
  AlignedFloats(AlignedFloats&& o) noexcept : p_(o.p_), n_(o.n_), owner_(o.owner_) { o.p_ = nullptr, o.n_ = 0, o.owner_ = nullptr; }
  AlignedFloats& operator=(AlignedFloats&& o) noexcept {
    if (this != &o) {
      release();
      p_ = o.p_, n_ = o.n_, owner_ = o.owner_;
      o.p_ = nullptr, o.n_ = 0, o.owner_ = nullptr;
    }
    return *this;
  }
  ~AlignedFloats() { release(); }
  void assign(std::size_t n, float value) {
    float* p = static_cast<float*>(core::allocate_aligned((n * sizeof(float) + 63) / 64 * 64 + 64));
    if (!p) throw std::bad_alloc();
    release();
    p_ = p;
    n_ = n;
    std::fill(p, p + n, value);
  }
  /// `n` floats at `p` (64-byte aligned: a tuned file's prepared weights),
  /// read in place while `owner` keeps them alive. Never written.
  static AlignedFloats view(std::shared_ptr<const void> owner, const float* p, std::size_t n);
  float* data() { return p_; }
  const float* data() const { return p_; }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  float& operator[](std::size_t i) { return p_[i]; }
  const float& operator[](std::size_t i) const { return p_[i]; }
  float* begin() { return p_; }

 private:
  // A view's owner is held out of line (f32_common.cpp): the per-ISA files that
  // make and drop these must not instantiate shared_ptr's code themselves
  // (tests/layering/isa_files_symbols.cmake).
  void release() {
    if (owner_) release_owner(owner_);
    else std::free(p_);
    p_ = nullptr, n_ = 0, owner_ = nullptr;
  }
  static void release_owner(void* owner);
  float* p_ = nullptr;
  std::size_t n_ = 0;
  void* owner_ = nullptr;  ///< a view's: a heap std::shared_ptr<const void>
};

/// A packed float array as a tuned file's prepared weights (core/prepared_weights.hpp),
/// and back as a view of the file's when it holds exactly `floats` values.
Blob save_floats(const AlignedFloats& a);
std::optional<AlignedFloats> load_floats(const Blob& bytes, std::size_t floats);

/// A packed float array as Routine::pack makes it (a tuned file stores its bytes).
struct FloatPack final : PackedWeights {
  AlignedFloats floats;
  Blob save() const override { return save_floats(floats); }
};
/// `n` values packed by `pack(float* zeroed)`, for Routine::pack.
template <class Pack>
std::shared_ptr<const FloatPack> pack_floats(std::size_t n, Pack&& pack) {
  auto p = std::make_shared<FloatPack>();
  p->floats.assign(n, 0.0f);
  pack(p->floats.data());
  return p;
}
/// Routine::unpack's: a view of a tuned file's bytes where they hold exactly `n` values.
inline std::shared_ptr<const FloatPack> unpack_floats(const Blob& bytes, std::size_t n) {
  auto a = load_floats(bytes, n);
  if (!a) return nullptr;
  auto p = std::make_shared<FloatPack>();
  p->floats = std::move(*a);
  return p;
}
/// A pack's floats where it holds `n` of them; throws naming the layer otherwise.
inline std::shared_ptr<const AlignedFloats> packed_of(const std::shared_ptr<const PackedWeights>& packed, std::size_t n,
                                                       const LayerInfo& info, std::string_view who) {
  const auto* p = dynamic_cast<const FloatPack*>(packed.get());
  if (!p || p->floats.size() != n)
    throw Error(fmt::format("{}: its packed weights do not fit this layer", who), {}, info.layer ? info.layer->name : "", "weight");
  return std::shared_ptr<const AlignedFloats>(packed, &p->floats);
}

/// The layer's fused activation (and the affine after it, where `a` has one)
/// as an epilogue; false when our kernels lack it.
inline bool to_epilogue(const core::Activation& a, gemm::Epilogue& e) {
  e.affine = a.affine();
  e.scale = a.scale;
  e.shift = a.shift;
  switch (a.kind) {
    case core::Activation::none: e.act = gemm::Act::none; return true;
    case core::Activation::relu: e.act = gemm::Act::relu; return true;
    case core::Activation::clip:
      e.act = gemm::Act::clip;
      e.lo = a.min;
      e.hi = a.max;
      return true;
    case core::Activation::hardswish: e.act = gemm::Act::hardswish; return true;
    case core::Activation::hardsigmoid:
      e.act = gemm::Act::hardsigmoid;
      e.alpha = a.alpha;
      e.beta = a.beta;
      return true;
    case core::Activation::sigmoid: e.act = gemm::Act::sigmoid; return true;
    case core::Activation::silu: e.act = gemm::Act::silu; return true;
    case core::Activation::gelu:
    case core::Activation::gelu_tanh: return false;
  }
  return false;
}

/// Support::no when the layer's activation is one our epilogues lack, or has
/// an affine after it and the routine's kernels do not apply VAct's (`affine`).
inline Support check_activation(const Layer& l, bool affine = false) {
  if (!affine && core::fused_activation(l, true).affine())
    return Support::no("an affine after the fused activation (act_scale, act_shift) is not in our epilogues");
  gemm::Epilogue e;
  if (!to_epilogue(core::fused_activation(l, affine), e)) return Support::no(fmt::format("fused {} is not in our epilogues", l.get_string("act")));
  return Support::yes();
}

/// Support::no unless `info` is a dense layer of one input [..., K > 0] and a
/// weight [O, K], whose fused activation (and affine after it) apply_activation
/// computes: the routines that run dense through it (cpu/gemv, cpu/dynamic_int8).
inline Support check_dense(const LayerInfo& info, std::string_view who) {
  if (!info.layer || info.input_shapes.size() != 1 || info.input_shapes[0].rank() < 1)
    return Support::no("dense needs an input [..., K]");
  const Shape& in = info.input_shapes[0];
  const int64_t k = in[in.rank() - 1];
  const Shape& w = info.layer->weight("weight").shape();
  if (k == 0 || w.rank() != 2 || w[1] != k) return Support::no(fmt::format("{} needs weights [O, K] of the input's K > 0", who));
  try {
    core::fused_activation(*info.layer, true, true);
  } catch (const Error& e) {
    return Support::no(e.message());
  }
  return Support::yes();
}

/// A dense layer's fused activation and affine on n outputs in place: gelu by
/// the vec kernels (`v`; erf per value is ~50x slower; `approx`: a routine of
/// reduced precision, whose own error dwarfs gelu_approx's), the others per value.
inline void activate_row(const core::Activation& act, const vec::Kernels& v, float* y, int64_t n, bool approx = false) {
  if (act.kind == core::Activation::gelu || act.kind == core::Activation::gelu_tanh) {
    (approx ? v.gelu_approx : v.gelu)(y, y, n, act.kind == core::Activation::gelu_tanh);
    if (act.affine())
      for (int64_t i = 0; i < n; ++i) y[i] = y[i] * act.scale + act.shift;
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = core::apply_activation(act, y[i]);
}

/// Runs task(t, slot) for t in [0, tasks) on the pool with at most `slots`
/// concurrent slots: slot s takes tasks s, s+used, s+2*used, ... (static round robin).
template <class F>
void for_each_task(ThreadPool* pool, int slots, int64_t tasks, F&& task) {
  const int64_t used = std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(slots), tasks, pool ? int64_t(pool->num_threads()) : 1}));
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s)
      for (int64_t t = s; t < tasks; t += used) task(t, static_cast<int>(s));
  };
  if (pool && used > 1) pool->parallel_for(used, 1, body);
  else body(0, used);
}

}  // namespace softneuro::cpu
