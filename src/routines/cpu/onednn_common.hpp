// Shared by the oneDNN routine families (cpu/onednn float32, cpu:qint8/onednn,
// cpu:bfloat16/onednn): the engine, the thread-count hook, post-ops, and the
// prepared routine that runs a Plan of primitives without allocating (see the
// comment at the top of onednn.cpp). Internal to src/routines/cpu.
#pragma once

#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/prepared_weights.hpp"
#include "core/hash.hpp"
#include "core/thread_pool.hpp"
#include "routines/cpu/f32_common.hpp"

#include <softneuro/routine.hpp>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace softneuro::onednn_common {

using core::Activation;
using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// ---------------------------------------------------------------------------
// The engine, the CPU's ISA, the thread count

inline std::string_view isa_name(dnnl::cpu_isa isa) {
#if !defined(__x86_64__)
  // oneDNN's cpu_isa names x86's levels only; elsewhere its value means none of them.
  (void)isa;
  return "none of x86's (not an x86 CPU)";
#endif
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
  }
}

/// SOFTNEURO_MAX_CPU_ISA for oneDNN too (core/cpu_features.hpp), set before
/// oneDNN's first use fixes its ISA; DNNL_MAX_CPU_ISA, where set, stays the user's.
inline void cap_onednn_isa() {
  static std::once_flag once;
  std::call_once(once, [] {
    const core::CpuIsa cap = core::max_cpu_isa();
    if (cap == core::CpuIsa::all || std::getenv("DNNL_MAX_CPU_ISA")) return;
    dnnl::cpu_isa isa = dnnl::cpu_isa::all;
    switch (cap) {
      case core::CpuIsa::sse41: isa = dnnl::cpu_isa::sse41; break;
      case core::CpuIsa::avx2: isa = dnnl::cpu_isa::avx2; break;
      case core::CpuIsa::avx2_vnni: isa = dnnl::cpu_isa::avx2_vnni; break;
      case core::CpuIsa::avx512_core: isa = dnnl::cpu_isa::avx512_core; break;
      case core::CpuIsa::avx512_core_vnni: isa = dnnl::cpu_isa::avx512_core_vnni; break;
      case core::CpuIsa::avx512_core_bf16: isa = dnnl::cpu_isa::avx512_core_bf16; break;
      case core::CpuIsa::avx512_core_amx: isa = dnnl::cpu_isa::avx512_core_amx; break;
      case core::CpuIsa::all: break;
    }
    if (dnnl::set_max_cpu_isa(isa) != dnnl::status::success)
      core::warn("SOFTNEURO_MAX_CPU_ISA={}: oneDNN had already fixed its ISA ({}); it is not capped",
                 core::cpu_isa_name(cap), isa_name(dnnl::get_effective_cpu_isa()));
  });
}

/// The ISA oneDNN dispatches to (within SOFTNEURO_MAX_CPU_ISA).
inline dnnl::cpu_isa onednn_isa() {
  cap_onednn_isa();
  return dnnl::get_effective_cpu_isa();
}

/// Whether oneDNN dispatches to `isa` or one above it here.
inline bool onednn_isa_has(dnnl_cpu_isa_t isa) {
  const auto want = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(onednn_isa()) & want) == want;
}

/// oneDNN keeps up to 1024 compiled primitives by default, each tens of KiB,
/// whatever shape they were made for: a session meeting thousands of input
/// shapes grew by 60 MiB through it alone (shape_memory_bench). Our prepared
/// steps hold their own primitives; the cache only spares compiling one again
/// (another session, a shape dropped and met again, the tuner's paths), and 64
/// keeps that for a model's layers. ONEDNN_PRIMITIVE_CACHE_CAPACITY, where
/// set, stays the user's.
inline void cap_onednn_primitive_cache() {
  if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") || std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY")) return;
  (void)dnnl::set_primitive_cache_capacity(64);
}

inline dnnl::engine& cpu_engine() {
  static dnnl::engine* e = [] {
    cap_onednn_isa();
    cap_onednn_primitive_cache();
    return new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed
  }();
  return *e;
}

/// Whether oneDNN dispatches to AVX-512 (core) kernels on this CPU: nChw16c is
/// only worth it there (elsewhere oneDNN would run reference code on it).
inline bool has_avx512() {
#if !defined(__x86_64__)
  return false;
#endif
  static const bool yes = onednn_isa_has(dnnl_cpu_isa_avx512_core);
  return yes;
}

/// Whether the CPU has bfloat16 instructions (AVX-512 BF16 or AMX-BF16) within
/// oneDNN's ISA limit (DNNL_MAX_CPU_ISA counts too): the cpu:bfloat16 routines
/// refuse everything elsewhere (oneDNN would emulate or run reference code).
inline bool has_bf16() {
  static const bool yes = [] {
    const core::CpuFeatures& f = core::cpu_features();
    return (f.avx512_bf16 || f.amx_bf16) && onednn_isa_has(dnnl_cpu_isa_avx512_core_bf16);
  }();
  return yes;
}

/// Makes the calling thread's OpenMP team size the threads the layer will run
/// on (LayerInfo::threads). libgomp keeps this setting per thread, so every
/// thread that plans or prepares a oneDNN routine sets it (cheap: one call to
/// omp_get_max_threads).
inline void match_threads(const LayerInfo& info) {
  const int n = team_threads(info);
  if (n > 0 && omp_get_max_threads() != n) omp_set_num_threads(n);
}

/// The threads a primitive runs on now: one while other processes hold the
/// CPUs (core::ContentionGuard), else the session's or the library's count.
inline int run_threads() {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  return core::contention_guard().full_team(now) ? core::global_pool().num_threads() : 1;
}

inline void thread_count_hook(int threads) { omp_set_num_threads(threads); }

/// Says once (at info level) how OpenMP will wait between oneDNN layers.
/// Measured on 2 vCPUs, a 64->64 3x3 conv at 28x28 (2 threads) followed by a
/// 10 us relu on our pool: idle machine, libgomp's default (spin up to
/// GOMP_SPINCOUNT=300000 pauses) 0.33 ms per conv, the pool relu after it
/// +15-25 us slower than alone (an OpenMP worker spins on the second core);
/// OMP_WAIT_POLICY=passive 0.37-0.39 ms per conv, no penalty after it. At load
/// 6-9 (other processes): spinning 12-16 ms per conv (a barrier waits whole
/// time slices for a preempted thread), passive 0.6 ms, GOMP_SPINCOUNT=1000
/// 0.36-0.6 ms.
inline void note_wait_policy() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    if (!policy && !spin)
      core::info("cpu/onednn: OpenMP threads spin between oneDNN layers (libgomp's default); on shared or "
                 "oversubscribed machines start the process with OMP_WAIT_POLICY=passive");
    else
      core::info("cpu/onednn: OpenMP wait policy from the environment: OMP_WAIT_POLICY={} GOMP_SPINCOUNT={}",
                 policy ? policy : "(unset)", spin ? spin : "(unset)");
  });
}

inline const bool g_hook_registered = [] {
  core::add_thread_count_hook(&thread_count_hook);
  return true;
}();

/// A oneDNN memory over a weight blob's memory (oneDNN only reads it).
inline dnnl::memory weight_memory(const dnnl::memory::desc& md, const Blob& b) {
  return dnnl::memory(md, cpu_engine(), const_cast<void*>(b.data()));
}

/// `user` in the layout `want` (a reorder, run once), or `user` itself when they agree.
inline dnnl::memory reorder_to(const dnnl::memory& user, const dnnl::memory::desc& want) {
  if (user.get_desc() == want) return user;
  dnnl::memory out(want, cpu_engine());
  dnnl::stream s(cpu_engine());
  dnnl::reorder(user, out).execute(s, const_cast<dnnl::memory&>(user), out);
  s.wait();
  return out;
}

/// A weight in the layout a primitive wants, and what keeps its memory alive
/// where it is read in place from a tuned file's prepared weights.
struct WeightMemory {
  dnnl::memory memory;
  std::shared_ptr<const void> owner;
};

/// The weight made by `make()` (a memory of desc `want`), once per model:
/// every session of it shares the copy (LayerInfo::shared), and a tuned file
/// stores it ready to use. `key` tells apart the layer's weights; the layout
/// oneDNN wants may differ between sessions (thread counts), so it is part of
/// the whole key. `hold` keeps it alive.
template <class Make>
dnnl::memory prepared_memory(const LayerInfo& info, std::vector<std::shared_ptr<const void>>& hold, std::string_view key,
                             const dnnl::memory::desc& want, Make&& make) {
  const std::size_t bytes = want.get_size();
  auto m = prepared_weights<WeightMemory>(
      info, fmt::format("{}/{:016x}", key, core::xxh64(&want.data, sizeof(want.data))),
      [&] { return WeightMemory{make(), nullptr}; },
      [](const WeightMemory& w) {
        return core::pack_arrays(
            {core::array_bytes(static_cast<const std::byte*>(w.memory.get_data_handle()), w.memory.get_desc().get_size())});
      },
      [&](const Blob& b) -> std::optional<WeightMemory> {
        auto arrays = core::unpack_arrays(b, {bytes});
        if (!arrays) return std::nullopt;
        return WeightMemory{dnnl::memory(want, cpu_engine(), const_cast<std::byte*>((*arrays)[0])), core::owner_of(b)};
      });
  hold.push_back(m);
  return m->memory;
}

/// The weight `user` in the layout `want`, reordered once per model
/// (prepared_memory), or `user` itself (the model's own weight) where they agree.
inline dnnl::memory shared_reorder(const LayerInfo& info, std::vector<std::shared_ptr<const void>>& hold,
                                   std::string_view key, const dnnl::memory& user, const dnnl::memory::desc& want) {
  if (user.get_desc() == want) return user;
  return prepared_memory(info, hold, key, want, [&] { return reorder_to(user, want); });
}
// ---------------------------------------------------------------------------
// Fused activations as post-ops

/// Whether oneDNN 2.6 drops NaN in `a`: its relu, clip (and so hardsigmoid's
/// clip) take max(x, lo) with x first, which gives lo for NaN where ONNX and
/// ONNX Runtime keep NaN, and no post-op chain computes them exactly and keeps
/// it (elu(0) and a swish sentinel do, at twice MobileNetV2's time).
inline bool drops_nan(const Activation& a) {
  return a.kind == Activation::relu || a.kind == Activation::clip || a.kind == Activation::hardsigmoid;
}

/// Appends `act` to `ops`, and returns what is left to run after the
/// primitive (Plan::after): with `keep_nan` (LayerInfo::keep_nan, on float32
/// data), the activations oneDNN would drop NaN in; none otherwise.
inline Activation append_activation(dnnl::post_ops& ops, const Activation& a, bool keep_nan) {
  using alg = dnnl::algorithm;
  if (keep_nan && drops_nan(a)) {
    if (a.affine()) throw Error("an affine after an activation applied in a pass of its own (NaN may reach it)");
    return a;
  }
  switch (a.kind) {
    case Activation::none: break;
    case Activation::relu: ops.append_eltwise(1.0f, alg::eltwise_relu, 0.0f, 0.0f); break;
    case Activation::clip: ops.append_eltwise(1.0f, alg::eltwise_clip, a.min, a.max); break;
    case Activation::hardswish:
#if defined(__aarch64__)
      // Its aarch64 post-op injector has no case for hardswish and, built
      // without asserts, leaves the values as they are: a depthwise convolution
      // with a fused hardswish gave its pre-activation (SVE-512 jit, under qemu).
      throw Error("oneDNN 2.6's aarch64 jit kernels skip a fused hardswish (their post-op injector lacks it)");
#else
      ops.append_eltwise(1.0f, alg::eltwise_hardswish, 0.0f, 0.0f);
      break;
#endif
    case Activation::hardsigmoid:  // oneDNN 2.6 has no hardsigmoid: linear, then clip to [0,1]
      ops.append_eltwise(1.0f, alg::eltwise_linear, a.alpha, a.beta);
      ops.append_eltwise(1.0f, alg::eltwise_clip, 0.0f, 1.0f);
      break;
    case Activation::sigmoid: ops.append_eltwise(1.0f, alg::eltwise_logistic, 0.0f, 0.0f); break;
    case Activation::silu: ops.append_eltwise(1.0f, alg::eltwise_swish, 1.0f, 0.0f); break;
    case Activation::gelu: ops.append_eltwise(1.0f, alg::eltwise_gelu_erf, 0.0f, 0.0f); break;
    case Activation::gelu_tanh: ops.append_eltwise(1.0f, alg::eltwise_gelu_tanh, 0.0f, 0.0f); break;
  }
  if (a.affine()) ops.append_eltwise(1.0f, alg::eltwise_linear, a.scale, a.shift);  // act_scale, act_shift
  return {};
}

/// The pass that applies Plan::after: `a` over the float32 blob `y` of
/// `shape` in `layout`, reading `x` (x == y: in place). A blocked layout's
/// padded channel lanes are left alone, so they stay zero. On OpenMP's
/// threads, as oneDNN's primitives before it.
inline void run_after(const Activation& a, const float* x, float* y, const Shape& shape, Layout layout) {
  const int64_t block = layout == Layout::nchw8c ? 8 : layout == Layout::nchw16c ? 16 : 0;
  constexpr int64_t kSerialBelow = 1 << 15;  // elements: a parallel region costs more below that
  if (block == 0 || shape[1] % block == 0) {
    const int64_t n = shape.numel();
    constexpr int64_t kChunk = 1 << 14;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kSerialBelow)
    for (int64_t c = 0; c < chunks; ++c)
      cpu::clamp_span(a, x + c * kChunk, y + c * kChunk, std::min(kChunk, n - c * kChunk));
    return;
  }
  // [N][C/block][H][W][block], the last channel block partly padding.
  const int64_t c = shape[1], cb = (c + block - 1) / block, plane = shape[2] * shape[3], rows = shape[0] * cb;
#pragma omp parallel for schedule(static) if (rows * plane * block >= kSerialBelow)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t lanes = std::min(block, c - (r % cb) * block);
    const float* xr = x + r * plane * block;
    float* yr = y + r * plane * block;
    if (lanes == block) {
      cpu::clamp_span(a, xr, yr, plane * block);
    } else {
      for (int64_t i = 0; i < plane; ++i) cpu::clamp_span(a, xr + i * block, yr + i * block, lanes);
    }
  }
}

inline dnnl::primitive_attr make_attr(const dnnl::post_ops* ops = nullptr) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (ops) attr.set_post_ops(*ops);
  return attr;
}

// ---------------------------------------------------------------------------
// Plans and the prepared routine

/// Where an execution argument's memory lives: a blob the routine reads or
/// writes, a fixed memory made in prepare (weights), or a temporary carved from
/// the workspace.
struct Mem {
  enum Kind { input, output, fixed, temp } kind;
  int index;
  bool operator==(const Mem&) const = default;
};

/// What an operation hands the prepared routine: one or more primitives run in
/// order (e.g. a reorder, then a convolution), each with its arguments.
struct Plan {
  struct Step {
    dnnl::primitive_desc_base pd;
    std::vector<std::pair<int, Mem>> args;  ///< (DNNL_ARG_*, memory); the scratchpad is added
  };
  std::vector<Step> steps;
  std::vector<dnnl::memory> fixed;        ///< Mem::fixed, by index
  std::vector<dnnl::memory::desc> temps;  ///< Mem::temp, by index
  std::vector<Blob> keep;                 ///< weights the fixed memories point into
  std::vector<std::shared_ptr<const void>> shared;  ///< derived weights of the model's store in use
  /// An activation oneDNN would drop NaN in, run by run_after on output 0
  /// (`after_shape` in `after_layout`) once the steps are done: in place, or
  /// from input 0 where there are no steps (a standalone relu or clip).
  Activation after;
  Shape after_shape;
  Layout after_layout = Layout::nchw;
  /// The input the steps add onto output 0 (a sum post-op): copied into the
  /// output first where the executor did not give them one memory; -1: none.
  int accumulate = -1;
  /// The temp that holds input 0 with each byte's sign bit flipped, written
  /// before the steps: an s8 activation with zero point -128 (a relu's) is
  /// then u8 with none, which oneDNN 2.6 convolves with its brgemm kernels;
  /// -1: none.
  int unsigned_input = -1;

  /// The common case: one primitive reading inputs and writing output 0.
  static Plan single(const dnnl::primitive_desc_base& pd, std::vector<std::pair<int, Mem>> args) {
    Plan p;
    p.steps.push_back({pd, std::move(args)});
    return p;
  }
  int add_fixed(const dnnl::memory& m) {
    fixed.push_back(m);
    return static_cast<int>(fixed.size()) - 1;
  }
};

inline constexpr Mem in0{Mem::input, 0}, out0{Mem::output, 0};

/// Whether oneDNN picked its reference implementation for `pd`.
inline bool is_reference(const dnnl::primitive_desc_base& pd) {
  const std::string_view impl = pd.impl_info_str();
#if !defined(__x86_64__)
  // Debian's aarch64 oneDNN (no Arm Compute Library) runs convolutions, inner
  // products and deconvolutions on its reference GEMM without SVE ("gemm:ref",
  // "gemm_s8s8s32:ref"); XNNPACK and our GEMM routines cover them there.
  if (impl.ends_with(":ref")) return true;
#endif
  return impl.substr(0, 3) == "ref";
}

/// Whether oneDNN picked one of its brgemm-based implementations ("brgconv", "brg:").
inline bool is_brgemm(const dnnl::primitive_desc_base& pd) { return std::string_view(pd.impl_info_str()).starts_with("brg"); }

/// The implementation oneDNN picked, or an empty view when none is "ref" (for supports()).
inline std::string_view reference_impl(const Plan& p) {
  for (const auto& s : p.steps)
    if (is_reference(s.pd)) return s.pd.impl_info_str();
  return {};
}

/// y = x with each byte's top bit flipped (s8 <-> u8 shifted by 128), split
/// between `threads` in 4 KiB pieces (a 1x1 convolution's input is as large as
/// its output: on one thread the flip took about what u8 saved).
inline void flip_sign_bits(const uint8_t* x, uint8_t* y, std::size_t n, int threads = 1) {
  constexpr std::size_t kPiece = 4096;
  const std::ptrdiff_t pieces = static_cast<std::ptrdiff_t>((n + kPiece - 1) / kPiece);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && pieces > 1)
  for (std::ptrdiff_t k = 0; k < pieces; ++k) {
    const std::size_t end = std::min(n, static_cast<std::size_t>(k + 1) * kPiece);
    std::size_t i = static_cast<std::size_t>(k) * kPiece;
    for (; i + 8 <= end; i += 8) {
      uint64_t w;
      std::memcpy(&w, x + i, 8);
      w ^= 0x8080808080808080ull;
      std::memcpy(y + i, &w, 8);
    }
    for (; i < end; ++i) y[i] = static_cast<uint8_t>(x[i] ^ 0x80u);
  }
}

class Prepared final : public PreparedRoutine {
 public:
  explicit Prepared(Plan plan)
      : stream_(cpu_engine()), keep_(std::move(plan.keep)), shared_(std::move(plan.shared)), after_(plan.after),
        after_shape_(std::move(plan.after_shape)), after_layout_(plan.after_layout), accumulate_(plan.accumulate),
        unsigned_input_(plan.unsigned_input) {
    // One oneDNN memory per blob, fixed memory and temporary, shared by the steps.
    std::vector<std::pair<Mem, dnnl_memory_t>> handles;
    for (const auto& m : plan.fixed) {
      mems_.push_back(m);
      handles.push_back({Mem{Mem::fixed, static_cast<int>(handles.size())}, m.get()});
    }
    auto workspace_memory = [&](const dnnl::memory::desc& md) {
      mems_.emplace_back(md, cpu_engine(), nullptr);
      carved_.push_back({mems_.back().get(), workspace_bytes_});
      workspace_bytes_ += (md.get_size() + 63) / 64 * 64;
      return mems_.back().get();
    };
    for (std::size_t t = 0; t < plan.temps.size(); ++t) {
      handles.push_back({Mem{Mem::temp, static_cast<int>(t)}, workspace_memory(plan.temps[t])});
      if (static_cast<int>(t) == unsigned_input_) unsigned_at_ = carved_.back().offset, unsigned_bytes_ = plan.temps[t].get_size();
    }
    for (const auto& step : plan.steps) {
      Step s;
      s.prim = dnnl::primitive(step.pd.get());
      for (auto [arg, mem] : step.args) {
        auto it = std::find_if(handles.begin(), handles.end(), [&mem = mem](const auto& h) { return h.first == mem; });
        if (it == handles.end()) {  // a blob: its descriptor from the first step that uses it
          mems_.emplace_back(step.pd.query_md(dnnl::query::exec_arg_md, arg), cpu_engine(), nullptr);
          binds_.push_back({mems_.back().get(), mem.kind == Mem::output, mem.index, nullptr});
          handles.push_back({mem, mems_.back().get()});
          it = handles.end() - 1;
        }
        s.args.push_back({arg, it->second});
      }
      const dnnl::memory::desc scratch = step.pd.scratchpad_desc();
      if (scratch.get_size()) s.args.push_back({DNNL_ARG_SCRATCHPAD, workspace_memory(scratch)});
      steps_.push_back(std::move(s));
    }
  }

  std::size_t workspace_bytes() const override { return workspace_bytes_; }
  int output_accumulates() const override { return accumulate_; }

  /// How to plan the same layer again at the current thread count: a
  /// primitive fixes its thread count when created, so while other processes
  /// hold the CPUs (run_threads() 1) the run takes a plan made for one thread,
  /// made then, once. Without it a 2-thread primitive started its second
  /// thread anyway and waited a scheduler slice for it on every layer.
  void set_replan(std::function<Plan()> replan) {
    if (omp_get_max_threads() > 1) replan_ = std::move(replan);
  }

  void run(const RunArgs& a) override {
    const int threads = run_threads();
    if (threads == 1 && replan_) {
      if (!single_ && !single_failed_) make_single();
      if (single_) return single_->run(a);
    }
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    if (accumulate_ >= 0) {
      const Blob& from = *a.inputs[static_cast<std::size_t>(accumulate_)];
      if (from.data() != a.outputs[0]->data()) std::memcpy(a.outputs[0]->data(), from.data(), a.outputs[0]->byte_size());
    }
    for (Bind& b : binds_) {
      const void* p = b.output ? a.outputs[static_cast<std::size_t>(b.index)]->data()
                               : a.inputs[static_cast<std::size_t>(b.index)]->data();
      if (p != b.last) set_handle(b.memory, const_cast<void*>(p));
      b.last = p;
    }
    if (workspace_bytes_ && a.workspace != workspace_last_) {
      for (const Carved& c : carved_) set_handle(c.memory, static_cast<char*>(a.workspace) + c.offset);
      workspace_last_ = a.workspace;
    }
    if (unsigned_input_ >= 0)
      flip_sign_bits(static_cast<const uint8_t*>(a.inputs[0]->data()), static_cast<uint8_t*>(a.workspace) + unsigned_at_,
                     unsigned_bytes_, threads);
    dnnl_status_t st = dnnl_success;
    for (std::size_t i = 0; i < steps_.size() && st == dnnl_success; ++i)
      st = dnnl_primitive_execute(steps_[i].prim.get(), stream_.get(), static_cast<int>(steps_[i].args.size()),
                                  steps_[i].args.data());
    if (st == dnnl_success) st = dnnl_stream_wait(stream_.get());
    if (st != dnnl_success) throw Error(fmt::format("oneDNN failed to execute (status {})", static_cast<int>(st)));
    if (after_.kind != Activation::none) {
      float* y = static_cast<float*>(a.outputs[0]->data());
      const float* x = steps_.empty() ? static_cast<const float*>(a.inputs[0]->data()) : y;
      run_after(after_, x, y, after_shape_, after_layout_);
    }
  }

 private:
  void make_single() {
    single_failed_ = true;
    const int previous = omp_get_max_threads();
    omp_set_num_threads(1);
    try {
      auto single = std::make_unique<Prepared>(replan_());
      // The executor sized the workspace for this plan; one that needs more runs the team's.
      if (single->workspace_bytes_ <= workspace_bytes_) {
        single_ = std::move(single);
        single_failed_ = false;
      }
    } catch (const dnnl::error&) {
    } catch (const Error&) {
    }
    omp_set_num_threads(previous);
  }

  struct Step {
    dnnl::primitive prim;
    std::vector<dnnl_exec_arg_t> args;
  };
  struct Bind {
    dnnl_memory_t memory;
    bool output;
    int index;
    const void* last;
  };
  struct Carved {
    dnnl_memory_t memory;
    std::size_t offset;
  };
  // Handles change only when the executor rebinds a blob (first run, new
  // caller memory), so the zero-padding oneDNN does on a new handle is rare.
  void set_handle(dnnl_memory_t m, void* p) {
    dnnl_status_t st = dnnl_memory_set_data_handle_v2(m, p, stream_.get());
    if (st != dnnl_success) throw Error(fmt::format("oneDNN refused a data handle (status {})", static_cast<int>(st)));
  }

  dnnl::stream stream_;
  std::vector<dnnl::memory> mems_;
  std::vector<Step> steps_;
  std::vector<Bind> binds_;
  std::vector<Carved> carved_;
  std::size_t workspace_bytes_ = 0;
  const void* workspace_last_ = nullptr;
  std::vector<Blob> keep_;
  std::vector<std::shared_ptr<const void>> shared_;
  Activation after_;
  Shape after_shape_;
  Layout after_layout_;
  int accumulate_ = -1;
  int unsigned_input_ = -1;
  std::size_t unsigned_at_ = 0, unsigned_bytes_ = 0;
  std::function<Plan()> replan_;
  std::unique_ptr<Prepared> single_;
  bool single_failed_ = false;
};

/// Whether `make()` plans two layers as one step (planned without preparing:
/// fuses_previous); a oneDNN error is a no.
template <class Make>
bool plans_pair(Make make) {
  try {
    return make().has_value();
  } catch (const dnnl::error&) {
    return false;
  }
}

/// Two layers as one prepared step: `make()` plans them (nullopt: oneDNN cannot
/// compute them together), and plans them again for one thread where other
/// processes hold the CPUs (Prepared::set_replan). nullptr: they run apart.
template <class Make>
std::unique_ptr<PreparedRoutine> prepare_pair(const LayerInfo& previous, const LayerInfo& info, const Schema& schema,
                                              Make make) {
  try {
    std::optional<Plan> plan = make();
    if (!plan) return nullptr;
    core::debug("'{}' + '{}': {}/onednn runs oneDNN {}", previous.layer->name, info.layer->name, schema.to_string(),
                plan->steps.back().pd.impl_info_str());
    auto prepared = std::make_unique<Prepared>(std::move(*plan));
    prepared->set_replan([make] {
      std::optional<Plan> again = make();
      if (!again) throw Error("oneDNN cannot plan the pair for one thread");
      return std::move(*again);
    });
    return prepared;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

/// A cpu:qint8 oneDNN convolution (`conv`, in layout `l`) and the float32 add
/// after it (`add`) as one step: the int8 products scaled to real values,
/// written in float32 onto the add's other operand (input 1 of the step) by a
/// sum post-op, then the add's activation; nullopt where oneDNN cannot (its
/// reference code). In onednn_int8.cpp.
std::optional<Plan> int8_conv_sum(const LayerInfo& conv, const LayerInfo& add, Layout l, bool prepare);
}  // namespace softneuro::onednn_common
