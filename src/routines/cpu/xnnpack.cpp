// cpu/xnnpack — routines wrapping XNNPACK (Debian's libxnnpack-dev, the
// 2022-02-16 snapshot: operators are create → setup → run, no reshape step),
// in channels-last: "cpu:float32:nhwc/xnnpack" (below), "cpu:qint8:nhwc/xnnpack"
// (conv2, dense, add, mul, pool2; see its section) and, on aarch64 with fp16
// arithmetic, "cpu:float16:nhwc/xnnpack" (conv2, dense, add, mul, pool2, resize).
//
// Layer types: conv2 (any group count, depthwise included; strides, pads,
// dilations; bias; deconv2 likewise, output_padding below the strides; fused relu/clip as XNNPACK's output clamp, fused hardswish
// and sigmoid as a second, in-place operator, fused hardsigmoid and SiLU
// (cpu/vec's kernel) as our own in-place loops on the same thread pool, XNNPACK
// having neither), dense (rank-2
// input [N,K]: in the nhwc schema a rank-2 blob lies row-major, as in nchw),
// pool2 (max; avg without counting padding; global avg and max), relu, clip,
// hardswish, sigmoid, hardsigmoid (ours), add, sub, mul, div (NumPy
// broadcasting, in the blobs' physical order), softmax (along the physically
// innermost dim: channels for rank >= 3, the last dim for rank <= 2), resize
// (bilinear, where XNNPACK samples where ONNX does; see its section).
//
// NaN: XNNPACK clamps every float32 output of conv2, dense, pool2, the binary
// operators and relu/clip, which turns NaN into the bound; those refuse layers
// NaN may reach (LayerInfo::keep_nan, docs/routines.md "NaN and inf").
//
// Physical order: a blob of rank >= 3 in the nhwc schema lies as [N, D2, ...,
// Dr-1, C] (as src/adapt/reorder.cpp writes it); one of rank <= 2 lies row-major.
//
// Weights: conv2's [O, C/g, KH, KW] is transposed once to XNNPACK's
// [g, O/g, KH, KW, C/g] in prepare; XNNPACK then packs it into its own memory
// when the operator is created (prepare), and the transposed copy is freed.
//
// Runs: the operators are set up (xnn_setup_*) only when the input/output
// pointers or the thread pool differ from the previous run, then run
// (xnn_run_operator). Allocation, measured with a counting xnn_allocator
// (xnnpack_allocations() below; tests/routines/test_xnnpack.cpp checks it):
// create + first setup of a 3x3 convolution made 4 allocations, of a padded
// 3x3 average pooling 6 (packed weights, indirection buffer, per-pixel
// multipliers); a setup with the same shapes and new pointers makes none
// (XNNPACK keeps its indirection buffer and shifts by the pointer difference),
// nor does xnn_run_operator. The first setup happens in prepare() on scratch
// buffers, so runs allocate nothing, whatever pointers they get.
// pthreadpool_parallelize allocates nothing either.
//
// XNNPACK may read up to XNN_EXTRA_BYTES (16) past the end of an input (never
// using what it reads). Our inputs are the executor's planned blobs, 64-byte
// rounded (a net input, plain, reaches this nhwc schema through an adapt), so
// only the arena's last blob is read past, inside the arena's heap block's page.
//
// Threads: XNNPACK calls the pthreadpool API, which the library serves on its
// one OpenMP team (src/core/pthreadpool.cpp): XNNPACK layers run on the same
// threads as oneDNN and our routines, which wait between layers as libgomp's
// policy says. One pool handle per thread count (XNNPACK sizes its tiles by it),
// created lazily; one thread means no pool (XNNPACK runs on the caller).
//
// Untuned default: conv2 ranks 84 (below every oneDNN conv), the others 54, so
// the default keeps oneDNN and XNNPACK is the tuner's to choose (Debian's build
// runs its convolutions at about 37% of the FMA peak: shared/GOALS.md).
#include "routines/weight_checks.hpp"
#include "core/cpu_features.hpp"
#include "core/weight_quant.hpp"
#include "core/layer_types.hpp"
#include "core/log.hpp"
#include "core/thread_pool.hpp"
#include "routines/cpu/f32_common.hpp"
#include "routines/cpu/quant_params.hpp"
#include "routines/cpu/vec_kernels.hpp"

#include <softneuro/routine.hpp>

#include <pthreadpool.h>
#include <xnnpack.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace softneuro {

/// Allocations XNNPACK has made through our allocator since the library loaded
/// (for tests that check that steady-state runs allocate nothing).
uint64_t xnnpack_allocations();

namespace {

using core::Activation;
using cpu::Int8Bounds;
using cpu::TQ;
using cpu::in_q;
using cpu::int8_bounds;
using cpu::out_q;
using cpu::tensor_quant;
using core::Window2d;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr Schema kSchema{Device::cpu, DType::float32, Layout::nhwc};
/// XNNPACK's float16 operators (aarch64 with fp16 arithmetic): see "float16" below.
constexpr Schema kHalfSchema{Device::cpu, DType::float16, Layout::nhwc};

// ---------------------------------------------------------------------------
// Initialisation, with a counting allocator

std::atomic<uint64_t> g_allocs{0};

void* xa_allocate(void*, size_t size) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size);
}
void* xa_reallocate(void*, void* p, size_t size) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::realloc(p, size);
}
void xa_deallocate(void*, void* p) { std::free(p); }
void* xa_aligned_allocate(void*, size_t alignment, size_t size) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  if (posix_memalign(&p, std::max(alignment, sizeof(void*)), size ? size : 1) != 0) return nullptr;
  return p;
}
void xa_aligned_deallocate(void*, void* p) { std::free(p); }

const xnn_allocator g_allocator{nullptr, xa_allocate, xa_reallocate, xa_deallocate, xa_aligned_allocate,
                                xa_aligned_deallocate};

std::string_view status_name(xnn_status s) {
  switch (s) {
    case xnn_status_success: return "success";
    case xnn_status_uninitialized: return "uninitialized";
    case xnn_status_invalid_parameter: return "invalid parameter";
    case xnn_status_invalid_state: return "invalid state";
    case xnn_status_unsupported_parameter: return "unsupported parameter";
    case xnn_status_unsupported_hardware: return "unsupported hardware";
    case xnn_status_out_of_memory: return "out of memory";
  }
  return "unknown status";
}

/// XNNPACK initialised once; its status (unsupported_hardware on a CPU without SSE2).
xnn_status init_status() {
  static const xnn_status s = [] {
    const xnn_status st = xnn_initialize(&g_allocator);
    if (st != xnn_status_success) core::warn("cpu/xnnpack: xnn_initialize failed ({})", status_name(st));
    return st;
  }();
  return s;
}

/// Whether the XNNPACK routines may run here: it initialised, and no
/// SOFTNEURO_MAX_CPU_ISA takes away what the CPU has (XNNPACK picks its
/// kernels from the CPU itself and would run them anyway).
Support xnnpack_available() {
  if (core::cpu_features_capped())
    return Support::no(fmt::format("SOFTNEURO_MAX_CPU_ISA={}: XNNPACK picks its kernels itself and cannot be capped",
                                   core::cpu_isa_name(core::max_cpu_isa())));
  if (const xnn_status s = init_status(); s != xnn_status_success)
    return Support::no(fmt::format("XNNPACK failed to initialise ({})", status_name(s)));
  return Support::yes();
}

void xcheck(xnn_status s, std::string_view what) {
  if (s != xnn_status_success) throw Error(fmt::format("cpu/xnnpack: {} failed ({})", what, status_name(s)));
}

// ---------------------------------------------------------------------------
// Threads: one pthreadpool handle per thread count (the library's, or a
// session's own), shared by every XNNPACK routine; its loops run on our pool.

constexpr int kMaxPoolThreads = 256;
std::array<std::atomic<pthreadpool_t>, kMaxPoolThreads + 1> g_pools{};
std::mutex g_pools_mutex;

/// Whether XNNPACK's pthreadpool calls land in the library's own API. Where
/// XNNPACK was loaded and bound to the real libpthreadpool before softneuro (a
/// process that imported PyTorch first), our handles reaching it crash or hang;
/// a tiny operator run on no pool shows where its loop goes.
bool loops_reach_our_pool() {
  static const bool ours = [] {
    if (init_status() != xnn_status_success) return false;
    xnn_operator_t op = nullptr;
    if (xnn_create_clamp_nc_f32(1, 1, 1, -kInf, kInf, 0, &op) != xnn_status_success) return false;
    std::array<float, 64> x{}, y{};
    const uint64_t before = core::pthreadpool_loops();
    const bool ran = xnn_setup_clamp_nc_f32(op, x.size(), x.data(), y.data(), nullptr) == xnn_status_success &&
                     xnn_run_operator(op, nullptr) == xnn_status_success;
    xnn_delete_operator(op);
    const bool reached = ran && core::pthreadpool_loops() > before;
    if (!reached)
      core::warn("cpu/xnnpack: XNNPACK's thread pool calls reach another libpthreadpool than softneuro's (it was "
                 "loaded first, e.g. by PyTorch), so XNNPACK layers run on one thread (import softneuro first)");
    return reached;
  }();
  return ours;
}

/// Times measured while XNNPACK's calls land elsewhere (one thread) are not
/// those of a process where they reach our pool: a condition of the profile cache.
const bool g_condition_registered = [] {
  core::add_run_condition([]() -> std::string {
    return xnnpack_available() && !loops_reach_our_pool() ? "xnnpack-one-thread" : "";
  });
  return true;
}();

/// The pool handle for the current thread count (nullptr for one thread: XNNPACK runs on the
/// caller). Handles are created on first use and kept until the process exits.
pthreadpool_t current_pool() {
  const int n = std::min(core::global_pool().num_threads(), kMaxPoolThreads);
  if (n <= 1 || !loops_reach_our_pool()) return nullptr;
  pthreadpool_t p = g_pools[static_cast<std::size_t>(n)].load(std::memory_order_acquire);
  if (p) return p;
  std::lock_guard lock(g_pools_mutex);
  p = g_pools[static_cast<std::size_t>(n)].load(std::memory_order_relaxed);
  if (!p) {
    p = pthreadpool_create(static_cast<size_t>(n));
    if (!p) throw Error(fmt::format("cpu/xnnpack: could not create a pthreadpool of {} threads", n));
    g_pools[static_cast<std::size_t>(n)].store(p, std::memory_order_release);
  }
  return p;
}

// ---------------------------------------------------------------------------
// Physical shapes in the nhwc schema

/// The dims of a blob of `s` in the order they lie in memory in the nhwc schema.
std::vector<size_t> physical_dims(const Shape& s) {
  std::vector<size_t> d;
  if (s.rank() < 3) {
    for (int64_t v : s) d.push_back(static_cast<size_t>(v));
    return d;
  }
  d.push_back(static_cast<size_t>(s[0]));
  for (int i = 2; i < s.rank(); ++i) d.push_back(static_cast<size_t>(s[i]));
  d.push_back(static_cast<size_t>(s[1]));
  return d;
}

/// Physical index of each logical dim in the nhwc schema.
std::vector<int> physical_position(int rank) {
  std::vector<int> pos(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) pos[static_cast<std::size_t>(i)] = i;
  if (rank >= 3) {
    pos[1] = rank - 1;
    for (int i = 2; i < rank; ++i) pos[static_cast<std::size_t>(i)] = i - 1;
  }
  return pos;
}

std::vector<size_t> non_unit(const std::vector<size_t>& d) {
  std::vector<size_t> out;
  for (size_t v : d)
    if (v != 1) out.push_back(v);
  return out;
}

Support float_weights(const Layer& l, std::initializer_list<const char*> keys) {
  return routines::float_weights(l, keys, "cpu/xnnpack");
}

// ---------------------------------------------------------------------------
// Fused activations: XNNPACK's output clamp, or a second operator in place.

struct Clamp {
  float min = -kInf, max = kInf;
  enum After { none, hardswish, sigmoid, hardsigmoid, silu } after = none;
  float alpha = 0, beta = 0;  ///< hardsigmoid
};

Support fused_support(const Activation& a) {
  switch (a.kind) {
    case Activation::clip:
      if (!(a.min < a.max))
        return Support::no(fmt::format("clip range [{}, {}] is empty; XNNPACK's clamp needs min < max", a.min, a.max));
      break;
    case Activation::silu:  // XNNPACK (2022-02) has no SiLU operator: our cpu/vec kernel runs after it
      if (!cpu::vec::best_kernels()) return Support::no("XNNPACK has no SiLU and this CPU runs no cpu/vec kernels");
      break;
    default: break;
  }
  return Support::yes();
}

Clamp to_clamp(const Activation& a) {
  Clamp c;
  switch (a.kind) {
    case Activation::relu: c.min = 0; break;
    case Activation::clip: c.min = a.min; c.max = a.max; break;
    case Activation::hardswish: c.after = Clamp::hardswish; break;
    case Activation::sigmoid: c.after = Clamp::sigmoid; break;
    case Activation::silu: c.after = Clamp::silu; break;
    case Activation::hardsigmoid:
      c.after = Clamp::hardsigmoid;
      c.alpha = a.alpha;
      c.beta = a.beta;
      break;
    default: break;
  }
  return c;
}

// ---------------------------------------------------------------------------
// The prepared routine: operators run in order, set up when pointers change.

/// hardsigmoid, which XNNPACK lacks: max(0, min(1, alpha * x + beta)), our own
/// loop, run on the same pthreadpool (pthreadpool_parallelize_1d_tile_1d).
struct Hardsigmoid {
  const float* x = nullptr;
  float* y = nullptr;
  size_t n = 0;
  float alpha = 0, beta = 0;
  uint32_t flags = 0;  ///< pthreadpool flags
};
constexpr size_t kHardsigmoidTile = 4096;

void hardsigmoid_tile(void* ctx, size_t start, size_t count) {
  const auto& h = *static_cast<const Hardsigmoid*>(ctx);
  const float* x = h.x + start;
  float* y = h.y + start;
  core::Activation a{core::Activation::hardsigmoid};
  a.alpha = h.alpha;
  a.beta = h.beta;
  cpu::clamp_span(a, x, y, static_cast<int64_t>(count));  // NaN stays NaN, as ONNX has it
}

/// SiLU, which XNNPACK lacks: cpu/vec's kernel on the same pthreadpool.
struct Silu {
  const float* x = nullptr;
  float* y = nullptr;
  size_t n = 0;
  const cpu::vec::Kernels* k = nullptr;
  uint32_t flags = 0;  ///< pthreadpool flags
};

void silu_tile(void* ctx, size_t start, size_t count) {
  const auto& s = *static_cast<const Silu*>(ctx);
  s.k->silu(s.x + start, s.y + start, static_cast<int64_t>(count));
}

/// Requantisation of int8 values in place (qint8 max pooling between different
/// scales), our own loop on the pthreadpool: dequantised to float as the
/// reference does (si * (x - zi)), then quantised (round half to even): where
/// the scales' ratio makes exact halves common (2.5 = 255 / 102), any other
/// float arithmetic rounds those ties differently.
struct Requant {
  const int8_t* x = nullptr;
  int8_t* y = nullptr;
  size_t n = 0;
  int32_t zi = 0, zo = 0;
  float si = 1, so = 1;
  uint32_t flags = 0;  ///< pthreadpool flags
};

void requant_tile(void* ctx, size_t start, size_t count) {
  const auto& r = *static_cast<const Requant*>(ctx);
  for (size_t i = start; i < start + count; ++i) {
    const float real = r.si * static_cast<float>(r.x[i] - r.zi);
    const double v = std::nearbyint(double(real) / double(r.so)) + r.zo;
    r.y[i] = static_cast<int8_t>(std::clamp(v, -128.0, 127.0));
  }
}

/// One step of a routine: an XNNPACK operator, or (op == nullptr) one of our loops.
struct Op {
  xnn_operator_t op = nullptr;
  enum Kind { xnn, hardsigmoid, silu, requant } kind = xnn;
  Hardsigmoid hs;
  Silu si;
  Requant rq;
  Op() = default;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
  ~Op() {
    if (op) xnn_delete_operator(op);
  }
};

/// The operators a routine runs, in order, as prepare() creates them, and the
/// flags they are created with.
struct Build {
  std::vector<std::unique_ptr<Op>> ops;
  uint32_t flags = 0;
  void push_back(std::unique_ptr<Op> o) { ops.push_back(std::move(o)); }
  const std::unique_ptr<Op>& back() const { return ops.back(); }
};

/// Sets up every operator of a routine for these pointers and this pool.
using SetupFn = std::function<void(const void* const* in, void* out, pthreadpool_t pool)>;

class Prepared final : public PreparedRoutine {
 public:
  Prepared(std::vector<std::unique_ptr<Op>> ops, SetupFn setup, const LayerInfo& info)
      : ops_(std::move(ops)), setup_(std::move(setup)) {
    // A first setup on scratch buffers, so that its one-time allocations
    // (indirection buffers) happen here, not in the first Session::run. Setup only
    // computes addresses: the buffers are neither filled nor read, and nothing runs.
    auto scratch = [](const Shape& s) {
      return std::unique_ptr<float[]>(new float[static_cast<std::size_t>(s.numel()) + XNN_EXTRA_BYTES / sizeof(float)]);
    };
    std::unique_ptr<float[]> in[2];
    const void* ptrs[2] = {nullptr, nullptr};
    for (std::size_t i = 0; i < info.input_shapes.size() && i < 2; ++i) {
      in[i] = scratch(info.input_shapes[i]);
      ptrs[i] = in[i].get();
    }
    const std::unique_ptr<float[]> out = scratch(info.output_shapes[0]);
    setup_(ptrs, out.get(), current_pool());
    set_ = false;  // scratch memory is gone: set up again on the first run
  }

  void run(const RunArgs& a) override {
    const void* in[2] = {a.inputs[0]->data(), a.inputs.size() > 1 ? a.inputs[1]->data() : nullptr};
    run_ops(in, a.outputs[0]->data());
  }

 private:
  void run_ops(const void* const* in, void* out) {
    pthreadpool_t pool = current_pool();
    if (in[0] != last_in_[0] || in[1] != last_in_[1] || out != last_out_ || pool != last_pool_ || !set_) {
      setup_(in, out, pool);
      last_in_[0] = in[0];
      last_in_[1] = in[1];
      last_out_ = out;
      last_pool_ = pool;
      set_ = true;
    }
    for (const auto& o : ops_) {
      switch (o->kind) {
        case Op::xnn: xcheck(xnn_run_operator(o->op, pool), "xnn_run_operator"); break;
        case Op::hardsigmoid:
          pthreadpool_parallelize_1d_tile_1d(pool, &hardsigmoid_tile, &o->hs, o->hs.n, kHardsigmoidTile, o->hs.flags);
          break;
        case Op::silu:
          pthreadpool_parallelize_1d_tile_1d(pool, &silu_tile, &o->si, o->si.n, kHardsigmoidTile, o->si.flags);
          break;
        case Op::requant:
          pthreadpool_parallelize_1d_tile_1d(pool, &requant_tile, &o->rq, o->rq.n, kHardsigmoidTile, o->rq.flags);
          break;
      }
    }
  }

  std::vector<std::unique_ptr<Op>> ops_;
  SetupFn setup_;
  const void* last_in_[2] = {nullptr, nullptr};
  void* last_out_ = nullptr;
  pthreadpool_t last_pool_ = nullptr;
  bool set_ = false;
};

/// Appends the operator applying `after` in place over `count` floats; returns it or nullptr.
/// Appends our hardsigmoid step; returns it.
Op* add_hardsigmoid(Build& ops, float alpha, float beta) {
  auto o = std::make_unique<Op>();
  o->kind = Op::hardsigmoid;
  o->hs.alpha = alpha;
  o->hs.beta = beta;
  Op* raw = o.get();
  ops.push_back(std::move(o));
  return raw;
}

/// Appends the step applying `c.after` in place on the output; returns it or nullptr.
Op* add_after(Build& ops, const Clamp& c) {
  if (c.after == Clamp::none) return nullptr;
  if (c.after == Clamp::hardsigmoid) return add_hardsigmoid(ops, c.alpha, c.beta);
  auto o = std::make_unique<Op>();
  if (c.after == Clamp::silu) {
    o->kind = Op::silu;
    o->si.k = cpu::vec::best_kernels();
    if (!o->si.k) throw Error("cpu/xnnpack: SiLU needs cpu/vec's kernels, which this CPU cannot run");
    Op* raw = o.get();
    ops.push_back(std::move(o));
    return raw;
  }
  if (c.after == Clamp::hardswish)
    xcheck(xnn_create_hardswish_nc_f32(1, 1, 1, ops.flags, &o->op), "xnn_create_hardswish_nc_f32");
  else
    xcheck(xnn_create_sigmoid_nc_f32(1, 1, 1, ops.flags, &o->op), "xnn_create_sigmoid_nc_f32");
  Op* raw = o.get();
  ops.push_back(std::move(o));
  return raw;
}

void setup_after(Op* step, Clamp::After after, size_t count, void* out, pthreadpool_t pool) {
  if (!step) return;
  float* y = static_cast<float*>(out);
  switch (after) {
    case Clamp::hardswish:
      xcheck(xnn_setup_hardswish_nc_f32(step->op, count, y, y, pool), "xnn_setup_hardswish_nc_f32");
      break;
    case Clamp::sigmoid: xcheck(xnn_setup_sigmoid_nc_f32(step->op, count, y, y, pool), "xnn_setup_sigmoid_nc_f32"); break;
    case Clamp::hardsigmoid:
      step->hs.x = y;
      step->hs.y = y;
      step->hs.n = count;
      break;
    case Clamp::silu:
      step->si.x = y;
      step->si.y = y;
      step->si.n = count;
      break;
    case Clamp::none: break;
  }
}

// ---------------------------------------------------------------------------
// The registered routine for operation K.


/// prepare() of the float32 and qint8 routines alike: operation K's operators,
/// created once.
template <class K>
std::unique_ptr<PreparedRoutine> prepare_xnnpack(const LayerInfo& info, const Schema& schema) {
  xcheck(init_status(), "xnn_initialize");
  if (Support s = K::check(info); !s)
    throw Error(fmt::format("{}/xnnpack cannot compute layer '{}': {}", schema.to_string(), info.layer->name, s.reason));
  Build ops;
  SetupFn setup = K::create(info, ops);
  return std::make_unique<Prepared>(std::move(ops.ops), std::move(setup), info);
}

/// The layer types whose XNNPACK float32 operators clamp their output (min
/// -inf without an activation): they have no unclamped form on x86.
bool clamps_output(std::string_view type) {
  for (std::string_view t : {"conv2", "deconv2", "dense", "pool2", "add", "sub", "mul", "div", "relu", "clip"})
    if (type == t) return true;
  return false;
}

/// The float32 routine for operation K, or the float16 one where K says kHalf.
template <class K>
class Xnnpack final : public Routine {
  static constexpr bool kHalf = requires { K::kHalf; };
  static constexpr Schema kThisSchema = kHalf ? kHalfSchema : kSchema;

 public:
  std::string_view layer_type() const override { return K::kType; }
  std::string_view algorithm() const override { return "xnnpack"; }
  std::vector<Schema> schemas() const override { return {kThisSchema}; }

  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == kThisSchema))
      return Support::no(fmt::format("this routine computes in {}, not {}", kThisSchema.to_string(), schema.to_string()));
    if (!info.layer) return Support::no("no layer");
    if (Support a = xnnpack_available(); !a) return a;
    if (kHalf && !core::cpu_features().fp16_arith)
      return Support::no("CPU lacks fp16 arithmetic (XNNPACK's float16 kernels need it)");
    for (const Shape& s : info.input_shapes)
      if (s.numel() == 0) return Support::no(fmt::format("input {} is empty", s.to_string()));
    if (info.keep_nan && clamps_output(K::kType))
      return Support::no("NaN may reach this layer, and XNNPACK (2022-02) clamps every float32 output of this "
                         "operator with max(x, min) first, which gives the bound for NaN");
    try {
      return K::check(info);
    } catch (const Error& e) {
      return Support::no(e.what());
    }
  }

  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override { return {}; }

  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&,
                                           const RoutineParams&) const override {
    return prepare_xnnpack<K>(info, kThisSchema);
  }

};

// ---------------------------------------------------------------------------
// conv2

/// conv2's weight [O, C/g, KH, KW] as [O, KH, KW, C/g] (O ordered by group
/// already): XNNPACK's [g, O/g, KH, KW, C/g]. With C/g = 1 (depthwise) the two
/// are the same memory.
template <class T>
std::vector<T> okc_weights(const T* src, const Window2d& g) {
  const int64_t gi = g.c / g.group, kk = g.kh * g.kw;
  std::vector<T> kernel(static_cast<std::size_t>(g.oc * gi * kk));
  for (int64_t o = 0; o < g.oc; ++o)
    for (int64_t i = 0; i < gi; ++i)
      for (int64_t k = 0; k < kk; ++k) kernel[static_cast<std::size_t>((o * kk + k) * gi + i)] = src[(o * gi + i) * kk + k];
  return kernel;
}
std::vector<float> okc_weights(const Blob& w, const Window2d& g) { return okc_weights(w.data_as<float>(), g); }

struct Conv2 {
  static constexpr std::string_view kType = "conv2";
  /// Below oneDNN's nhwc conv (85): the untuned default keeps oneDNN (see
  /// "Untuned default" in the file comment); the tuner measures XNNPACK.

  static Support check(const LayerInfo& info) {
    if (info.input_shapes[0].rank() != 4) return Support::no("conv2 needs an input [N,C,H,W]");
    if (Support s = float_weights(*info.layer, {"weight", "bias"}); !s) return s;
    core::conv2_window(*info.layer, info.input_shapes[0]);  // throws on inconsistent parameters
    return fused_support(core::fused_activation(*info.layer));
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Layer& layer = *info.layer;
    const Window2d g = core::conv2_window(layer, info.input_shapes[0]);
    const Clamp c = to_clamp(core::fused_activation(layer));
    const Blob& w = layer.weight("weight");
    const Blob* bias = layer.find_weight("bias");
    const int64_t gi = g.c / g.group, go = g.oc / g.group;
    const std::vector<float> kernel = okc_weights(w, g);
    auto conv = std::make_unique<Op>();
    xcheck(xnn_create_convolution2d_nhwc_f32(
              static_cast<uint32_t>(g.pt), static_cast<uint32_t>(g.pr), static_cast<uint32_t>(g.pb),
              static_cast<uint32_t>(g.pl), static_cast<uint32_t>(g.kh), static_cast<uint32_t>(g.kw),
              static_cast<uint32_t>(g.sh), static_cast<uint32_t>(g.sw), static_cast<uint32_t>(g.dh),
              static_cast<uint32_t>(g.dw), static_cast<uint32_t>(g.group), static_cast<size_t>(gi),
              static_cast<size_t>(go), static_cast<size_t>(g.c), static_cast<size_t>(g.oc), kernel.data(),
              bias ? bias->data_as<float>() : nullptr, c.min, c.max, ops.flags, &conv->op),
          "xnn_create_convolution2d_nhwc_f32");
    xnn_operator_t op = conv->op;
    ops.push_back(std::move(conv));
    Op* after = add_after(ops, c);
    const size_t count = static_cast<size_t>(info.output_shapes[0].numel());
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      xcheck(xnn_setup_convolution2d_nhwc_f32(op, static_cast<size_t>(g.n), static_cast<size_t>(g.h),
                                             static_cast<size_t>(g.w), static_cast<const float*>(in[0]),
                                             static_cast<float*>(out), pool),
            "xnn_setup_convolution2d_nhwc_f32");
      setup_after(after, c.after, count, out, pool);
    };
  }
};

// ---------------------------------------------------------------------------
// deconv2 (ONNX ConvTranspose): output_padding as XNNPACK's adjustment.

struct Deconv2 {
  static constexpr std::string_view kType = "deconv2";

  static Support check(const LayerInfo& info) {
    if (info.input_shapes[0].rank() != 4) return Support::no("deconv2 needs an input [N,C,H,W]");
    if (Support s = float_weights(*info.layer, {"weight", "bias"}); !s) return s;
    const core::Deconv2Window g = core::deconv2_window(*info.layer, info.input_shapes[0]);
    if (g.oph >= g.sh || g.opw >= g.sw)
      return Support::no(fmt::format("output_padding [{},{}] not below the strides [{},{}] (XNNPACK's adjustment)",
                                     g.oph, g.opw, g.sh, g.sw));
    return fused_support(core::fused_activation(*info.layer));
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Layer& layer = *info.layer;
    const core::Deconv2Window g = core::deconv2_window(layer, info.input_shapes[0]);
    const Clamp c = to_clamp(core::fused_activation(layer));
    const Blob* bias = layer.find_weight("bias");
    const int64_t gi = g.c / g.group, go = g.oc / g.group, kk = g.kh * g.kw;
    // Ours (ONNX's) [G, C/G, O/G, KH, KW] -> XNNPACK's [G, O/G, KH, KW, C/G].
    std::vector<float> kernel(static_cast<std::size_t>(g.oc * gi * kk));
    const float* src = layer.weight("weight").data_as<float>();
    for (int64_t gr = 0; gr < g.group; ++gr)
      for (int64_t i = 0; i < gi; ++i)
        for (int64_t o = 0; o < go; ++o)
          for (int64_t k = 0; k < kk; ++k)
            kernel[static_cast<std::size_t>(((gr * go + o) * kk + k) * gi + i)] = src[((gr * gi + i) * go + o) * kk + k];
    const auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
    auto d = std::make_unique<Op>();
    xcheck(xnn_create_deconvolution2d_nhwc_f32(u(g.pt), u(g.pr), u(g.pb), u(g.pl), u(g.kh), u(g.kw), u(g.sh), u(g.sw),
                                               u(g.dh), u(g.dw), u(g.group), static_cast<size_t>(gi),
                                               static_cast<size_t>(go), static_cast<size_t>(g.c),
                                               static_cast<size_t>(g.oc), kernel.data(),
                                               bias ? bias->data_as<float>() : nullptr, c.min, c.max, ops.flags, &d->op),
           "xnn_create_deconvolution2d_nhwc_f32");
    xnn_operator_t op = d->op;
    ops.push_back(std::move(d));
    Op* after = add_after(ops, c);
    const size_t count = static_cast<size_t>(info.output_shapes[0].numel());
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      xcheck(xnn_setup_deconvolution2d_nhwc_f32(op, static_cast<size_t>(g.n), static_cast<size_t>(g.h),
                                                static_cast<size_t>(g.w), u(g.oph), u(g.opw),
                                                static_cast<const float*>(in[0]), static_cast<float*>(out), pool),
             "xnn_setup_deconvolution2d_nhwc_f32");
      setup_after(after, c.after, count, out, pool);
    };
  }
};

// ---------------------------------------------------------------------------
// dense: fully connected on [N,K]

struct Dense {
  static constexpr std::string_view kType = "dense";

  static Support check(const LayerInfo& info) {
    const Shape& s = info.input_shapes[0];
    if (s.rank() != 2)
      return Support::no(fmt::format("cpu/xnnpack dense takes an input [N,K]; {} has rank {} (flatten it first)",
                                     s.to_string(), s.rank()));
    if (Support r = float_weights(*info.layer, {"weight", "bias"}); !r) return r;
    // Debian's XNNPACK (2022-02) packs the weights of its AVX2 shuffle kernels
    // with K padded to 4 but strides its output-channel tiles by K unpadded: on
    // more than one thread every tile after the first read the wrong weights
    // (K=5, 18 outputs, 2 threads: error 0.9 on outputs of 0.5; a null pool,
    // one tile, was right).
    if (s[1] % 4 != 0)
      return Support::no(fmt::format("XNNPACK's fully connected operator computes wrong outputs on several threads "
                                     "where K ({}) is not a multiple of 4",
                                     s[1]));
    return fused_support(core::fused_activation(*info.layer));
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Layer& layer = *info.layer;
    const Blob& w = layer.weight("weight");
    const Blob* bias = layer.find_weight("bias");
    const size_t n = static_cast<size_t>(info.input_shapes[0][0]), k = static_cast<size_t>(info.input_shapes[0][1]);
    const size_t o = static_cast<size_t>(w.shape()[0]);
    const Clamp c = to_clamp(core::fused_activation(layer));
    auto fc = std::make_unique<Op>();
    xcheck(xnn_create_fully_connected_nc_f32(k, o, k, o, w.data_as<float>(), bias ? bias->data_as<float>() : nullptr,
                                            c.min, c.max, ops.flags, &fc->op),
          "xnn_create_fully_connected_nc_f32");
    xnn_operator_t op = fc->op;
    ops.push_back(std::move(fc));
    Op* after = add_after(ops, c);
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      xcheck(xnn_setup_fully_connected_nc_f32(op, n, static_cast<const float*>(in[0]), static_cast<float*>(out), pool),
            "xnn_setup_fully_connected_nc_f32");
      setup_after(after, c.after, n * o, out, pool);
    };
  }
};

// ---------------------------------------------------------------------------
// pool2: max (padding ignored), avg (dividing by the taps inside the input),
// global avg/max. ceil_mode by widening the bottom/right padding to what the
// last window needs (XNNPACK's output size is the floor formula).

struct Pool2 {
  static constexpr std::string_view kType = "pool2";

  static int64_t padding_r(int64_t in, int64_t pad_l, int64_t pad_r, int64_t k, int64_t s, int64_t d, int64_t out) {
    const int64_t ext = (k - 1) * d + 1;
    return std::max(pad_r, (out - 1) * s + ext - in - pad_l);
  }
  static bool empty_window(int64_t in, int64_t pad_l, int64_t k, int64_t s, int64_t d, int64_t out) {
    for (int64_t o = 0; o < out; ++o) {
      bool any = false;
      for (int64_t t = 0; t < k && !any; ++t) {
        const int64_t i = o * s - pad_l + t * d;
        any = i >= 0 && i < in;
      }
      if (!any) return true;
    }
    return false;
  }

  struct Geometry {
    Window2d g;
    bool is_max, global_avg;
    int64_t pb, pr;  // widened for ceil_mode
  };

  static Geometry geometry(const LayerInfo& info) {
    const Layer& layer = *info.layer;
    Geometry r;
    r.g = core::pool2_window(layer, info.input_shapes[0]);
    r.is_max = layer.get_string("mode") == "max";
    const Window2d& g = r.g;
    r.pb = padding_r(g.h, g.pt, g.pb, g.kh, g.sh, g.dh, g.oh);
    r.pr = padding_r(g.w, g.pl, g.pr, g.kw, g.sw, g.dw, g.ow);
    r.global_avg = !r.is_max && g.oh == 1 && g.ow == 1 && g.kh == g.h && g.kw == g.w && g.pt == 0 && g.pl == 0 &&
                   r.pb == 0 && r.pr == 0 && g.dh == 1 && g.dw == 1;
    return r;
  }

  static Support check(const LayerInfo& info) {
    if (info.input_shapes[0].rank() != 4) return Support::no("pool2 needs an input [N,C,H,W]");
    const Layer& layer = *info.layer;
    const std::string mode = layer.get_string("mode");
    if (mode != "max" && mode != "avg") return Support::no(fmt::format("pool2 mode '{}'", mode));
    const Geometry p = geometry(info);
    const Window2d& g = p.g;
    if (p.global_avg) return Support::yes();
    if (g.kh * g.kw == 1) return Support::no("XNNPACK refuses 1x1 pooling windows");
    if (empty_window(g.h, g.pt, g.kh, g.sh, g.dh, g.oh) || empty_window(g.w, g.pl, g.kw, g.sw, g.dw, g.ow))
      return Support::no("a window covers only padding (cpu/ref gives -inf or 0 there; XNNPACK does not)");
    if (!p.is_max) {
      if (g.dh != 1 || g.dw != 1) return Support::no("XNNPACK's average pooling has no dilation");
      if (layer.get_int("count_include_pad", 0) != 0 && (g.pt | g.pl | g.pb | g.pr) != 0)
        return Support::no("count_include_pad=1 with padding: XNNPACK's average pooling divides by the taps inside "
                           "the input");
    }
    // The rest (stride vs window limits) XNNPACK says itself: create one without data.
    Build ops;
    try {
      make(p, ops);
    } catch (const Error& e) {
      return Support::no(e.what());
    }
    return Support::yes();
  }

  static void make(const Geometry& p, Build& ops) {
    const Window2d& g = p.g;
    auto o = std::make_unique<Op>();
    const size_t c = static_cast<size_t>(g.c);
    const auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
    if (p.global_avg)
      xcheck(xnn_create_global_average_pooling_nwc_f32(c, c, c, -kInf, kInf, ops.flags, &o->op),
            "xnn_create_global_average_pooling_nwc_f32");
    else if (p.is_max)
      xcheck(xnn_create_max_pooling2d_nhwc_f32(u(g.pt), u(p.pr), u(p.pb), u(g.pl), u(g.kh), u(g.kw), u(g.sh), u(g.sw),
                                              u(g.dh), u(g.dw), c, c, c, -kInf, kInf, ops.flags, &o->op),
            "xnn_create_max_pooling2d_nhwc_f32");
    else
      xcheck(xnn_create_average_pooling2d_nhwc_f32(u(g.pt), u(p.pr), u(p.pb), u(g.pl), u(g.kh), u(g.kw), u(g.sh),
                                                  u(g.sw), c, c, c, -kInf, kInf, ops.flags, &o->op),
            "xnn_create_average_pooling2d_nhwc_f32");
    ops.push_back(std::move(o));
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Geometry p = geometry(info);
    make(p, ops);
    xnn_operator_t op = ops.back()->op;
    const Window2d g = p.g;
    const bool global_avg = p.global_avg, is_max = p.is_max;
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      const float* x = static_cast<const float*>(in[0]);
      float* y = static_cast<float*>(out);
      const size_t n = static_cast<size_t>(g.n), h = static_cast<size_t>(g.h), w = static_cast<size_t>(g.w);
      if (global_avg)
        xcheck(xnn_setup_global_average_pooling_nwc_f32(op, n, h * w, x, y, pool),
              "xnn_setup_global_average_pooling_nwc_f32");
      else if (is_max)
        xcheck(xnn_setup_max_pooling2d_nhwc_f32(op, n, h, w, x, y, pool), "xnn_setup_max_pooling2d_nhwc_f32");
      else
        xcheck(xnn_setup_average_pooling2d_nhwc_f32(op, n, h, w, x, y, pool), "xnn_setup_average_pooling2d_nhwc_f32");
    };
  }
};

// ---------------------------------------------------------------------------
// Elementwise activations, layout-agnostic: the blob as one vector.

template <class K>
struct Unary {
  static constexpr std::string_view kType = K::kType;

  static Support check(const LayerInfo& info) { return K::check(*info.layer); }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    auto o = std::make_unique<Op>();
    K::create(*info.layer, ops.flags, &o->op);
    xnn_operator_t op = o->op;
    ops.push_back(std::move(o));
    const size_t count = static_cast<size_t>(info.input_shapes[0].numel());
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      K::setup(op, count, static_cast<const float*>(in[0]), static_cast<float*>(out), pool);
    };
  }
};

struct ClampSetup {
  static void setup(xnn_operator_t op, size_t n, const float* x, float* y, pthreadpool_t pool) {
    xcheck(xnn_setup_clamp_nc_f32(op, n, x, y, pool), "xnn_setup_clamp_nc_f32");
  }
};
struct ReluK : ClampSetup {
  static constexpr std::string_view kType = "relu";
  static Support check(const Layer&) { return Support::yes(); }
  static void create(const Layer&, uint32_t flags, xnn_operator_t* op) {
    xcheck(xnn_create_clamp_nc_f32(1, 1, 1, 0.0f, kInf, flags, op), "xnn_create_clamp_nc_f32");
  }
};
struct ClipK : ClampSetup {
  static constexpr std::string_view kType = "clip";
  static std::pair<float, float> range(const Layer& l) {
    return {static_cast<float>(l.get_float("min", -kInf)), static_cast<float>(l.get_float("max", kInf))};
  }
  static Support check(const Layer& l) {
    auto [lo, hi] = range(l);
    if (!(lo < hi)) return Support::no(fmt::format("clip range [{}, {}] is empty; XNNPACK's clamp needs min < max", lo, hi));
    return Support::yes();
  }
  static void create(const Layer& l, uint32_t flags, xnn_operator_t* op) {
    auto [lo, hi] = range(l);
    xcheck(xnn_create_clamp_nc_f32(1, 1, 1, lo, hi, flags, op), "xnn_create_clamp_nc_f32");
  }
};
struct HardswishK {
  static constexpr std::string_view kType = "hardswish";
  static Support check(const Layer&) { return Support::yes(); }
  static void create(const Layer&, uint32_t flags, xnn_operator_t* op) {
    xcheck(xnn_create_hardswish_nc_f32(1, 1, 1, flags, op), "xnn_create_hardswish_nc_f32");
  }
  static void setup(xnn_operator_t op, size_t n, const float* x, float* y, pthreadpool_t pool) {
    xcheck(xnn_setup_hardswish_nc_f32(op, n, x, y, pool), "xnn_setup_hardswish_nc_f32");
  }
};
struct SigmoidK {
  static constexpr std::string_view kType = "sigmoid";
  static Support check(const Layer&) { return Support::yes(); }
  static void create(const Layer&, uint32_t flags, xnn_operator_t* op) {
    xcheck(xnn_create_sigmoid_nc_f32(1, 1, 1, flags, op), "xnn_create_sigmoid_nc_f32");
  }
  static void setup(xnn_operator_t op, size_t n, const float* x, float* y, pthreadpool_t pool) {
    xcheck(xnn_setup_sigmoid_nc_f32(op, n, x, y, pool), "xnn_setup_sigmoid_nc_f32");
  }
};

struct HardsigmoidLayer {
  static constexpr std::string_view kType = "hardsigmoid";

  static Support check(const LayerInfo&) { return Support::yes(); }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Layer& l = *info.layer;
    Op* step = add_hardsigmoid(ops, static_cast<float>(l.get_float("alpha", 0.2)),
                               static_cast<float>(l.get_float("beta", 0.5)));
    const size_t count = static_cast<size_t>(info.input_shapes[0].numel());
    return [=](const void* const* in, void* out, pthreadpool_t) {
      step->hs.x = static_cast<const float*>(in[0]);
      step->hs.y = static_cast<float*>(out);
      step->hs.n = count;
    };
  }
};

// ---------------------------------------------------------------------------
// add, sub, mul, div: NumPy broadcasting over the blobs' physical dims; add's
// fused relu/clip as XNNPACK's output range.

/// The physical dims XNNPACK broadcasts: an input's logical shape, padded
/// with leading 1s to the output's rank, in the output's physical order.
/// Empty when that is not how the input lies in memory (or too many dims).
std::vector<size_t> broadcast_dims(const Shape& in, int out_rank) {
  Shape padded;
  for (int d = 0; d < out_rank - in.rank(); ++d) padded.push_back(1);
  for (int64_t v : in) padded.push_back(v);
  std::vector<size_t> dims = physical_dims(padded);
  if (non_unit(dims) != non_unit(physical_dims(in))) return {};
  // Leading 1s are implied; XNNPACK takes at most XNN_MAX_TENSOR_DIMS.
  while (dims.size() > 1 && dims.front() == 1) dims.erase(dims.begin());
  if (dims.size() > XNN_MAX_TENSOR_DIMS) return {};
  return dims;
}

/// Whether both inputs of a binary layer broadcast as XNNPACK reads them.
Support broadcasts(const LayerInfo& info) {
  const int rank = info.output_shapes[0].rank();
  for (std::size_t i = 0; i < 2; ++i)
    if (broadcast_dims(info.input_shapes[i], rank).empty())
      return Support::no(fmt::format(
          "input {} broadcast to {} does not lie in memory as XNNPACK would read it in the nhwc schema, or has "
          "more than {} dims",
          info.input_shapes[i].to_string(), info.output_shapes[0].to_string(), XNN_MAX_TENSOR_DIMS));
  return Support::yes();
}

template <class K>
struct Binary {
  static constexpr std::string_view kType = K::kType;

  static Support check(const LayerInfo& info) {
    if (core::requantizes_as_tflite(*info.layer))
      return Support::no("TensorFlow Lite's int8 add rounds with fixed-point multipliers; this one sums in float");
    if (Support s = broadcasts(info); !s) return s;
    return fused_support(core::fused_activation(*info.layer));
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    auto o = std::make_unique<Op>();
    const Clamp c = to_clamp(core::fused_activation(*info.layer));  // add's relu/clip: the output range
    K::create(c.min, c.max, ops.flags, &o->op);
    xnn_operator_t op = o->op;
    ops.push_back(std::move(o));
    const int rank = info.output_shapes[0].rank();
    const std::vector<size_t> a = broadcast_dims(info.input_shapes[0], rank), b = broadcast_dims(info.input_shapes[1], rank);
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      K::setup(op, a.size(), a.data(), b.size(), b.data(), in[0], in[1], out, pool);
    };
  }
};

// T: f32 (float) or f16 (XNNPACK's half operators take untyped pointers).
#define SOFTNEURO_XNN_BINARY(Name, type, fn, T, elem)                                                           \
  struct Name {                                                                                                 \
    static constexpr std::string_view kType = type;                                                             \
    static void create(float lo, float hi, uint32_t flags, xnn_operator_t* op) {                                \
      xcheck(xnn_create_##fn##_nd_##T(lo, hi, flags, op), #fn "_" #T);                                          \
    }                                                                                                           \
    static void setup(xnn_operator_t op, size_t na, const size_t* a, size_t nb, const size_t* b, const void* x, \
                      const void* y, void* z, pthreadpool_t pool) {                                             \
      xcheck(xnn_setup_##fn##_nd_##T(op, na, a, nb, b, static_cast<const elem*>(x), static_cast<const elem*>(y), \
                                     static_cast<elem*>(z), pool),                                              \
             #fn "_" #T);                                                                                       \
    }                                                                                                           \
  };
SOFTNEURO_XNN_BINARY(AddK, "add", add, f32, float)
SOFTNEURO_XNN_BINARY(SubK, "sub", subtract, f32, float)
SOFTNEURO_XNN_BINARY(MulK, "mul", multiply, f32, float)
SOFTNEURO_XNN_BINARY(DivK, "div", divide, f32, float)
#if defined(__aarch64__)
SOFTNEURO_XNN_BINARY(HalfAddK, "add", add, f16, void)
SOFTNEURO_XNN_BINARY(HalfMulK, "mul", multiply, f16, void)
#endif
#undef SOFTNEURO_XNN_BINARY

// ---------------------------------------------------------------------------
// softmax along the physically innermost dim (or one followed only by 1s).

struct Softmax {
  static constexpr std::string_view kType = "softmax";

  static int axis_of(const LayerInfo& info) {
    const Shape& s = info.input_shapes[0];
    return core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), s.rank());
  }

  static Support check(const LayerInfo& info) {
    const Shape& s = info.input_shapes[0];
    const int axis = axis_of(info);
    const std::vector<size_t> dims = physical_dims(s);
    const int pos = physical_position(s.rank())[static_cast<std::size_t>(axis)];
    for (std::size_t i = static_cast<std::size_t>(pos) + 1; i < dims.size(); ++i)
      if (dims[i] != 1)
        return Support::no(fmt::format("softmax axis {} of {} is not innermost in the nhwc schema", axis, s.to_string()));
    return Support::yes();
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Shape& s = info.input_shapes[0];
    const size_t channels = static_cast<size_t>(s[axis_of(info)]);
    const size_t batch = static_cast<size_t>(s.numel()) / channels;
    auto o = std::make_unique<Op>();
    xcheck(xnn_create_softmax_nc_f32(channels, channels, channels, ops.flags, &o->op), "xnn_create_softmax_nc_f32");
    xnn_operator_t op = o->op;
    ops.push_back(std::move(o));
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      xcheck(xnn_setup_softmax_nc_f32(op, batch, static_cast<const float*>(in[0]), static_cast<float*>(out), pool),
            "xnn_setup_softmax_nc_f32");
    };
  }
};

// ---------------------------------------------------------------------------
// resize: bilinear over H and W. XNNPACK's sampling is ONNX's half_pixel (and
// half_pixel_symmetric, pytorch_half_pixel where the output has more than one
// pixel), align_corners, and asymmetric (its TensorFlow legacy mode), at the
// scale in/out of the sizes: a given scale that is not out/in samples elsewhere.

struct Resize {
  static constexpr std::string_view kType = "resize";

  static Support check(const LayerInfo& info) {
    if (core::requantizes_as_tflite(*info.layer))
      return Support::no("TensorFlow Lite's int8 bilinear blends with 11-bit weights in integers (cpu/ref does)");
    return check_sampling(info);
  }

  /// Whether XNNPACK samples where the layer does.
  static Support check_sampling(const LayerInfo& info) {
    const Shape& in = info.input_shapes[0];
    const Shape& out = info.output_shapes[0];
    if (in.rank() != 4 || out.rank() != 4 || in[0] != out[0] || in[1] != out[1])
      return Support::no("XNNPACK resizes H and W of an [N,C,H,W] input only");
    const core::ResizeGeometry g = core::resize_geometry(*info.layer, in, out);
    if (!g.linear) return Support::no("XNNPACK (2022-02) resizes bilinearly only");
    if (g.antialias) return Support::no("XNNPACK has no antialias (cpu/ref has)");
    for (const core::ResizeAxis* a : {&g.h, &g.w}) {
      using T = core::ResizeAxis;
      if (a->transform == T::tf_crop_and_resize || a->transform == T::tf_half_pixel_for_nn)
        return Support::no("XNNPACK samples as half_pixel, align_corners or asymmetric only");
      if (a->transform == T::pytorch_half_pixel && a->out == 1)
        return Support::no("pytorch_half_pixel to one pixel samples the first (XNNPACK's half_pixel the middle)");
      const double exact = static_cast<double>(a->out) / static_cast<double>(a->in);
      if (std::abs(a->scale - exact) > 1e-9 * exact)
        return Support::no(fmt::format("scale {} is not out/in = {}/{}: XNNPACK samples at in/out", a->scale, a->out,
                                       a->in));
    }
    return Support::yes();
  }

  static uint32_t flags(const LayerInfo& info) {
    const core::ResizeGeometry g = core::resize_geometry(*info.layer, info.input_shapes[0], info.output_shapes[0]);
    if (g.h.transform == core::ResizeAxis::align_corners) return XNN_FLAG_ALIGN_CORNERS;
    if (g.h.transform == core::ResizeAxis::asymmetric) return XNN_FLAG_TENSORFLOW_LEGACY_MODE;
    return 0;
  }

  /// One XNNPACK bilinear operator over elements E (float, int8_t; void for
  /// float16), by its create and setup functions; its tables hold weights of
  /// `weight_bytes` (check_tables).
  template <class E>
  static SetupFn create_op(const LayerInfo& info, Build& ops, std::size_t weight_bytes,
                           enum xnn_status (*create)(size_t, size_t, size_t, uint32_t, xnn_operator_t*),
                           enum xnn_status (*setup)(xnn_operator_t, size_t, size_t, size_t, size_t, size_t, const E*, E*,
                                                    pthreadpool_t),
                           const char* name) {
    check_tables(info, weight_bytes);
    const size_t c = static_cast<size_t>(info.input_shapes[0][1]);
    auto o = std::make_unique<Op>();
    xcheck(create(c, c, c, ops.flags | flags(info), &o->op), name);
    xnn_operator_t op = o->op;
    ops.push_back(std::move(o));
    const Shape in = info.input_shapes[0], out = info.output_shapes[0];
    const auto u = [](int64_t v) { return static_cast<size_t>(v); };
    return [=](const void* const* x, void* y, pthreadpool_t pool) {
      xcheck(setup(op, u(in[0]), u(in[2]), u(in[3]), u(out[2]), u(out[3]), static_cast<const E*>(x[0]), static_cast<E*>(y),
                   pool),
             name);
    };
  }

  /// XNNPACK's setup allocates, per output pixel, 4 input pointers and 2
  /// weights: within the session's memory limit (an output [1,1,2^22,1] asks
  /// for 168 MB beside its 16 MB blob).
  static void check_tables(const LayerInfo& info, std::size_t weight_bytes) {
    const auto pixels = static_cast<std::size_t>(info.output_shapes[0][2]) * static_cast<std::size_t>(info.output_shapes[0][3]);
    check_prepare_bytes(info, pixels * (4 * sizeof(void*) + 2 * weight_bytes), "XNNPACK's resize indirection tables");
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    return create_op<float>(info, ops, sizeof(float), xnn_create_resize_bilinear2d_nhwc_f32,
                            xnn_setup_resize_bilinear2d_nhwc_f32, "resize_bilinear2d_nhwc_f32");
  }

};

// ---------------------------------------------------------------------------
// cpu:qint8:nhwc/xnnpack: conv2 (XNNPACK's qc8: per-output-channel weights),
// dense (as a 1x1 qc8 convolution over N pixels, rank-2 inputs), add (same
// shapes, qs8), pool2 (global average: qs8; max: s8, then our requantisation
// where the output's quantisation differs). The project's qint8 conventions
// (see src/routines/cpu/qint8.cpp): activations int8, per tensor, from
// LayerInfo::input_quant/output_quant; weights float32 in the .dnn, quantised
// here per output channel, symmetric (s_w = max|w|/127, q = round(w/s_w)),
// bias to int32 at s_in*s_w. XNNPACK requantises in float (round to nearest
// even), so outputs are within one step of the exact quantised computation.

constexpr Schema kQSchema{Device::cpu, DType::qint8, Layout::nhwc};

/// The fused activation as XNNPACK's int8 output range, or why it cannot be one.
Support int8_range(const Layer& l, const TQ& out, int8_t* lo, int8_t* hi) {
  const Activation a = core::fused_activation(l);
  if (a.kind != Activation::none && a.kind != Activation::relu && a.kind != Activation::clip)
    return Support::no("fused activations other than relu/clip have no XNNPACK int8 form");
  const Int8Bounds b = int8_bounds(a, out);
  const auto mn = static_cast<int8_t>(b.lo), mx = static_cast<int8_t>(b.hi);
  if (mn >= mx) return Support::no(fmt::format("the activation leaves the int8 range [{}, {}] empty", mn, mx));
  if (lo) *lo = mn;
  if (hi) *hi = mx;
  return Support::yes();
}

/// Weights [O, K] (K in XNNPACK's order) quantised per output channel; bias at s_in * s_w.
struct QWeights {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> bias;
};
/// `weight` (float32 or int8, core::channel_int8) in XNNPACK's order.
QWeights quantise(const Blob& weight, const Window2d& g, const Blob* bias, float s_in) {
  core::ChannelQuantized q = core::channel_int8(weight);  // per output channel: the order within one is free
  const int64_t oc = g.oc;
  QWeights r{okc_weights(q.q.data(), g), std::move(q.scale), std::vector<int32_t>(static_cast<std::size_t>(oc), 0)};
  if (bias)
    for (int64_t o = 0; o < oc; ++o)
      r.bias[static_cast<std::size_t>(o)] =
          core::quantize_bias_value(bias->data_as<float>()[o], double(s_in) * double(r.scale[static_cast<std::size_t>(o)]));
  return r;
}

/// The registered qint8 routine for operation K.
template <class K>
class XnnpackQ final : public Routine {
 public:
  std::string_view layer_type() const override { return K::kType; }
  std::string_view algorithm() const override { return "xnnpack"; }
  std::vector<Schema> schemas() const override { return {kQSchema}; }

  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == kQSchema))
      return Support::no(fmt::format("this routine computes in {}, not {}", kQSchema.to_string(), schema.to_string()));
    if (!info.layer) return Support::no("no layer");
    if (Support a = xnnpack_available(); !a) return a;
    for (std::size_t i = 0; i < info.input_shapes.size(); ++i) {
      if (info.input_shapes[i].numel() == 0) return Support::no("an input is empty");
      if (Support q = tensor_quant(info.input_quant, i, "input", nullptr); !q) return q;
    }
    if (Support q = tensor_quant(info.output_quant, 0, "output", nullptr); !q) return q;
    try {
      if (Support s = K::check(info); !s) return s;
      // The rest (scale ratios XNNPACK accepts, ...) XNNPACK says itself: create the operators once.
      Build ops;
      K::create(info, ops);
      return Support::yes();
    } catch (const Error& e) {
      return Support::no(e.what());
    }
  }

  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override { return {}; }

  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&,
                                           const RoutineParams&) const override {
    return prepare_xnnpack<K>(info, kQSchema);
  }

  /// Below our own qint8 routines (10): the tuner decides.
};

/// TensorFlow Lite's int8 bilinear resize (requantize = tflite: one grid in
/// and out): XNNPACK's s8 operator, whose 11-bit integer blend is the one the
/// interpreter runs (core::tflite_bilinear; cpu/ref computes the same).
struct QResize {
  static constexpr std::string_view kType = "resize";

  static Support check(const LayerInfo& info) {
    if (!core::requantizes_as_tflite(*info.layer))
      return Support::no("an int8 blend is TensorFlow Lite's resize only (requantize = tflite); others round from float");
    if (Support s = Resize::check_sampling(info); !s) return s;
    const TQ in = in_q(info), y = out_q(info);
    if (in.scale != y.scale || in.zp != y.zp) return Support::no("the input and output need one quantisation");
    return Support::yes();
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    return Resize::create_op<int8_t>(info, ops, sizeof(int16_t), xnn_create_resize_bilinear2d_nhwc_s8,
                                     xnn_setup_resize_bilinear2d_nhwc_s8, "resize_bilinear2d_nhwc_s8");
  }

};

/// A qc8 convolution over nhwc int8 blobs; dense is one with 1x1 kernels.
xnn_operator_t create_qconv(const Window2d& g, const Blob& weight, const Blob* bias, const TQ& in, const TQ& out,
                            int8_t lo, int8_t hi, Build& ops) {
  const int64_t gi = g.c / g.group, go = g.oc / g.group;
  const QWeights q = quantise(weight, g, bias, in.scale);
  auto o = std::make_unique<Op>();
  const auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  xcheck(xnn_create_convolution2d_nhwc_qc8(u(g.pt), u(g.pr), u(g.pb), u(g.pl), u(g.kh), u(g.kw), u(g.sh), u(g.sw),
                                           u(g.dh), u(g.dw), u(g.group), static_cast<size_t>(gi),
                                           static_cast<size_t>(go), static_cast<size_t>(g.c),
                                           static_cast<size_t>(g.oc), static_cast<int8_t>(in.zp), in.scale,
                                           q.scale.data(), q.q.data(), q.bias.data(), static_cast<int8_t>(out.zp),
                                           out.scale, lo, hi, ops.flags, &o->op),
         "xnn_create_convolution2d_nhwc_qc8");
  xnn_operator_t op = o->op;
  ops.push_back(std::move(o));
  return op;
}

struct QConv2 {
  static constexpr std::string_view kType = "conv2";

  static Support check(const LayerInfo& info) {
    if (info.input_shapes[0].rank() != 4) return Support::no("conv2 needs an input [N,C,H,W]");
    if (Support s = core::int8_routine_weight(*info.layer, "weight", true); !s) return s;
    if (Support s = core::int8_routine_weight(*info.layer, "bias", false); !s) return s;
    core::conv2_window(*info.layer, info.input_shapes[0]);
    return int8_range(*info.layer, out_q(info), nullptr, nullptr);
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Layer& layer = *info.layer;
    const Window2d g = core::conv2_window(layer, info.input_shapes[0]);
    int8_t lo = -128, hi = 127;
    if (Support s = int8_range(layer, out_q(info), &lo, &hi); !s) throw Error(s.reason);
    xnn_operator_t op = create_qconv(g, layer.weight("weight"), layer.find_weight("bias"), in_q(info), out_q(info), lo, hi, ops);
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      xcheck(xnn_setup_convolution2d_nhwc_qc8(op, static_cast<size_t>(g.n), static_cast<size_t>(g.h),
                                              static_cast<size_t>(g.w), static_cast<const int8_t*>(in[0]),
                                              static_cast<int8_t*>(out), pool),
             "xnn_setup_convolution2d_nhwc_qc8");
    };
  }
};

struct QDense {
  static constexpr std::string_view kType = "dense";

  static Support check(const LayerInfo& info) {
    const Shape& s = info.input_shapes[0];
    if (s.rank() != 2)
      return Support::no(fmt::format("cpu:qint8:nhwc/xnnpack dense takes an input [N,K]; {} has rank {}", s.to_string(),
                                     s.rank()));
    if (Support r = core::int8_routine_weight(*info.layer, "weight", true); !r) return r;
    if (Support r = core::int8_routine_weight(*info.layer, "bias", false); !r) return r;
    return int8_range(*info.layer, out_q(info), nullptr, nullptr);
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Layer& layer = *info.layer;
    int8_t lo = -128, hi = 127;
    if (Support s = int8_range(layer, out_q(info), &lo, &hi); !s) throw Error(s.reason);
    const Blob& wb = layer.weight("weight");
    const int64_t n = info.input_shapes[0][0], k = info.input_shapes[0][1], o = wb.shape()[0];
    Window2d g{};
    g.n = n;
    g.c = k;
    g.h = g.w = g.oh = g.ow = 1;
    g.oc = o;
    g.kh = g.kw = g.sh = g.sw = g.dh = g.dw = 1;
    g.group = 1;
    xnn_operator_t op = create_qconv(g, wb, layer.find_weight("bias"), in_q(info), out_q(info), lo, hi, ops);
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      xcheck(xnn_setup_convolution2d_nhwc_qc8(op, static_cast<size_t>(n), 1, 1, static_cast<const int8_t*>(in[0]),
                                              static_cast<int8_t*>(out), pool),
             "xnn_setup_convolution2d_nhwc_qc8");
    };
  }
};

/// add (same shapes) and mul (broadcasting over the physical dims) on
/// XNNPACK's qs8 operators; a fused relu/clip as the int8 output range.
template <class K>
struct QBinary {
  static constexpr std::string_view kType = K::kType;

  static Support check(const LayerInfo& info) {
    if (K::kSameShapes && info.input_shapes[0] != info.input_shapes[1])
      return Support::no(fmt::format("cpu:qint8:nhwc/xnnpack {}s same shapes only, not {} and {}", K::kType,
                                     info.input_shapes[0].to_string(), info.input_shapes[1].to_string()));
    if (!K::kSameShapes)
      if (Support s = broadcasts(info); !s) return s;
    return int8_range(*info.layer, out_q(info), nullptr, nullptr);
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const TQ a = in_q(info, 0), b = in_q(info, 1), y = out_q(info);
    int8_t lo = -128, hi = 127;  // a fused relu/clip
    if (Support s = int8_range(*info.layer, y, &lo, &hi); !s) throw Error(s.reason);
    auto o = std::make_unique<Op>();
    K::create(a, b, y, lo, hi, ops.flags, &o->op);
    xnn_operator_t op = o->op;
    ops.push_back(std::move(o));
    const int rank = info.output_shapes[0].rank();
    const std::vector<size_t> flat{static_cast<size_t>(info.output_shapes[0].numel())};
    const std::vector<size_t> da = K::kSameShapes ? flat : broadcast_dims(info.input_shapes[0], rank),
                              db = K::kSameShapes ? flat : broadcast_dims(info.input_shapes[1], rank);
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      K::setup(op, da.size(), da.data(), db.size(), db.data(), static_cast<const int8_t*>(in[0]),
               static_cast<const int8_t*>(in[1]), static_cast<int8_t*>(out), pool);
    };
  }
};

#define SOFTNEURO_XNN_QBINARY(Name, type, fn, same_shapes)                                                         \
  struct Name {                                                                                                   \
    static constexpr std::string_view kType = type;                                                               \
    static constexpr bool kSameShapes = same_shapes;                                                              \
    static void create(const TQ& a, const TQ& b, const TQ& y, int8_t lo, int8_t hi, uint32_t flags,              \
                       xnn_operator_t* op) {                                                                      \
      xcheck(xnn_create_##fn##_nd_qs8(static_cast<int8_t>(a.zp), a.scale, static_cast<int8_t>(b.zp), b.scale,     \
                                      static_cast<int8_t>(y.zp), y.scale, lo, hi, flags, op),                     \
             "xnn_create_" #fn "_nd_qs8");                                                                        \
    }                                                                                                             \
    static void setup(xnn_operator_t op, size_t na, const size_t* da, size_t nb, const size_t* db, const int8_t* x, \
                      const int8_t* y, int8_t* z, pthreadpool_t pool) {                                           \
      xcheck(xnn_setup_##fn##_nd_qs8(op, na, da, nb, db, x, y, z, pool), "xnn_setup_" #fn "_nd_qs8");             \
    }                                                                                                             \
  };
SOFTNEURO_XNN_QBINARY(QAddK, "add", add, true)
SOFTNEURO_XNN_QBINARY(QMulK, "mul", multiply, false)
#undef SOFTNEURO_XNN_QBINARY

struct QPool2 {
  static constexpr std::string_view kType = "pool2";

  static Support check(const LayerInfo& info) {
    if (info.input_shapes[0].rank() != 4) return Support::no("pool2 needs an input [N,C,H,W]");
    const Pool2::Geometry p = Pool2::geometry(info);
    const Window2d& g = p.g;
    if (p.global_avg) return Support::yes();
    if (!p.is_max) return Support::no("XNNPACK has no int8 (qs8) average pooling but the global one");
    if (g.kh * g.kw == 1) return Support::no("XNNPACK refuses 1x1 pooling windows");
    if (Pool2::empty_window(g.h, g.pt, g.kh, g.sh, g.dh, g.oh) || Pool2::empty_window(g.w, g.pl, g.kw, g.sw, g.dw, g.ow))
      return Support::no("a window covers only padding");
    return Support::yes();
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Pool2::Geometry p = Pool2::geometry(info);
    const Window2d g = p.g;
    const TQ in = in_q(info), y = out_q(info);
    const size_t c = static_cast<size_t>(g.c);
    const auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
    auto o = std::make_unique<Op>();
    if (p.global_avg)
      xcheck(xnn_create_global_average_pooling_nwc_qs8(c, c, c, static_cast<int8_t>(in.zp), in.scale,
                                                       static_cast<int8_t>(y.zp), y.scale, -128, 127, ops.flags, &o->op),
             "xnn_create_global_average_pooling_nwc_qs8");
    else
      xcheck(xnn_create_max_pooling2d_nhwc_s8(u(g.pt), u(p.pr), u(p.pb), u(g.pl), u(g.kh), u(g.kw), u(g.sh), u(g.sw),
                                              u(g.dh), u(g.dw), c, c, c, -128, 127, ops.flags, &o->op),
             "xnn_create_max_pooling2d_nhwc_s8");
    xnn_operator_t op = o->op;
    ops.push_back(std::move(o));
    // Max pooling keeps the input's quantisation: requantise after it where the output's differs.
    Op* rq = nullptr;
    if (!p.global_avg && (in.scale != y.scale || in.zp != y.zp)) {
      auto r = std::make_unique<Op>();
      r->kind = Op::requant;
      r->rq.zi = in.zp;
      r->rq.zo = y.zp;
      r->rq.si = in.scale;
      r->rq.so = y.scale;
      rq = r.get();
      ops.push_back(std::move(r));
    }
    const bool global_avg = p.global_avg;
    const size_t count = static_cast<size_t>(info.output_shapes[0].numel());
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      const int8_t* x = static_cast<const int8_t*>(in[0]);
      int8_t* yy = static_cast<int8_t*>(out);
      const size_t n = static_cast<size_t>(g.n), h = static_cast<size_t>(g.h), w = static_cast<size_t>(g.w);
      if (global_avg)
        xcheck(xnn_setup_global_average_pooling_nwc_qs8(op, n, h * w, x, yy, pool),
               "xnn_setup_global_average_pooling_nwc_qs8");
      else
        xcheck(xnn_setup_max_pooling2d_nhwc_s8(op, n, h, w, x, yy, pool), "xnn_setup_max_pooling2d_nhwc_s8");
      if (rq) {
        rq->rq.x = yy;
        rq->rq.y = yy;
        rq->rq.n = count;
      }
    };
  }
};

#if defined(__aarch64__)
// ---------------------------------------------------------------------------
// float16, "cpu:float16:nhwc/xnnpack" (aarch64 with fp16 arithmetic: XNNPACK's
// f16 kernels compute in half precision, fp16 FMA): conv2, dense, add, mul,
// max and global average pool2. Weights and biases are converted once in
// prepare (round to nearest even). Fused activations: relu and clip, as the
// output range. Not in the untuned default: the tuner takes them where the
// casts around them pay (`--schemas 'cpu:float32:*,cpu:float16:*'`).

using half = __fp16;

std::vector<half> to_half(const float* x, std::size_t n) {
  std::vector<half> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<half>(x[i]);
  return out;
}

Support half_activation(const core::Activation& a) {
  if (a.kind != Activation::none && a.kind != Activation::relu && a.kind != Activation::clip)
    return Support::no("cpu:float16:nhwc/xnnpack fuses relu and clip only");
  return fused_support(a);
}

struct HalfConv2 {
  static constexpr std::string_view kType = "conv2";
  static constexpr bool kHalf = true;

  static Support check(const LayerInfo& info) {
    if (info.input_shapes[0].rank() != 4) return Support::no("conv2 needs an input [N,C,H,W]");
    if (Support s = float_weights(*info.layer, {"weight", "bias"}); !s) return s;
    core::conv2_window(*info.layer, info.input_shapes[0]);  // throws on inconsistent parameters
    return half_activation(core::fused_activation(*info.layer));
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Layer& layer = *info.layer;
    const Window2d g = core::conv2_window(layer, info.input_shapes[0]);
    const Clamp c = to_clamp(core::fused_activation(layer));
    const std::vector<float> okc = okc_weights(layer.weight("weight"), g);
    const std::vector<half> kernel = to_half(okc.data(), okc.size());
    const Blob* bias = layer.find_weight("bias");
    const std::vector<half> b = bias ? to_half(bias->data_as<float>(), static_cast<std::size_t>(g.oc)) : std::vector<half>{};
    const auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
    auto conv = std::make_unique<Op>();
    xcheck(xnn_create_convolution2d_nhwc_f16(u(g.pt), u(g.pr), u(g.pb), u(g.pl), u(g.kh), u(g.kw), u(g.sh), u(g.sw),
                                             u(g.dh), u(g.dw), u(g.group), static_cast<size_t>(g.c / g.group),
                                             static_cast<size_t>(g.oc / g.group), static_cast<size_t>(g.c),
                                             static_cast<size_t>(g.oc), kernel.data(), bias ? b.data() : nullptr,
                                             c.min, c.max, ops.flags, &conv->op),
           "xnn_create_convolution2d_nhwc_f16");
    xnn_operator_t op = conv->op;
    ops.push_back(std::move(conv));
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      xcheck(xnn_setup_convolution2d_nhwc_f16(op, static_cast<size_t>(g.n), static_cast<size_t>(g.h),
                                              static_cast<size_t>(g.w), in[0], out, pool),
             "xnn_setup_convolution2d_nhwc_f16");
    };
  }
};

struct HalfDense {
  static constexpr std::string_view kType = "dense";
  static constexpr bool kHalf = true;

  static Support check(const LayerInfo& info) {
    const Shape& s = info.input_shapes[0];
    if (s.rank() != 2)
      return Support::no(fmt::format("cpu:float16:nhwc/xnnpack dense takes an input [N,K]; {} has rank {}",
                                     s.to_string(), s.rank()));
    if (Support r = float_weights(*info.layer, {"weight", "bias"}); !r) return r;
    return half_activation(core::fused_activation(*info.layer));
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Layer& layer = *info.layer;
    const Blob& w = layer.weight("weight");  // [O, K]: XNNPACK's kernel order
    const Blob* bias = layer.find_weight("bias");
    const size_t n = static_cast<size_t>(info.input_shapes[0][0]), k = static_cast<size_t>(info.input_shapes[0][1]);
    const size_t o = static_cast<size_t>(w.shape()[0]);
    const Clamp c = to_clamp(core::fused_activation(layer));
    const std::vector<half> kernel = to_half(w.data_as<float>(), o * k);
    const std::vector<half> b = bias ? to_half(bias->data_as<float>(), o) : std::vector<half>{};
    auto fc = std::make_unique<Op>();
    xcheck(xnn_create_fully_connected_nc_f16(k, o, k, o, kernel.data(), bias ? b.data() : nullptr, c.min, c.max,
                                             ops.flags, &fc->op),
           "xnn_create_fully_connected_nc_f16");
    xnn_operator_t op = fc->op;
    ops.push_back(std::move(fc));
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      xcheck(xnn_setup_fully_connected_nc_f16(op, n, in[0], out, pool), "xnn_setup_fully_connected_nc_f16");
    };
  }
};

/// Max and global average pooling (XNNPACK has no float16 windowed average).
struct HalfPool2 {
  static constexpr std::string_view kType = "pool2";
  static constexpr bool kHalf = true;

  static Support check(const LayerInfo& info) {
    if (Support s = Pool2::check(info); !s) return s;
    const Pool2::Geometry p = Pool2::geometry(info);
    if (!p.is_max && !p.global_avg)
      return Support::no("cpu:float16:nhwc/xnnpack pools max and global average only (XNNPACK has no float16 "
                         "windowed average pooling)");
    return Support::yes();
  }

  static SetupFn create(const LayerInfo& info, Build& ops) {
    const Pool2::Geometry p = Pool2::geometry(info);
    const Window2d g = p.g;
    const size_t c = static_cast<size_t>(g.c);
    const auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
    auto o = std::make_unique<Op>();
    if (p.global_avg)
      xcheck(xnn_create_global_average_pooling_nwc_f16(c, c, c, -kInf, kInf, ops.flags, &o->op),
             "xnn_create_global_average_pooling_nwc_f16");
    else
      xcheck(xnn_create_max_pooling2d_nhwc_f16(u(g.pt), u(p.pr), u(p.pb), u(g.pl), u(g.kh), u(g.kw), u(g.sh), u(g.sw),
                                               u(g.dh), u(g.dw), c, c, c, -kInf, kInf, ops.flags, &o->op),
             "xnn_create_max_pooling2d_nhwc_f16");
    xnn_operator_t op = o->op;
    ops.push_back(std::move(o));
    const bool global_avg = p.global_avg;
    return [=](const void* const* in, void* out, pthreadpool_t pool) {
      const size_t n = static_cast<size_t>(g.n), h = static_cast<size_t>(g.h), w = static_cast<size_t>(g.w);
      if (global_avg)
        xcheck(xnn_setup_global_average_pooling_nwc_f16(op, n, h * w, in[0], out, pool),
               "xnn_setup_global_average_pooling_nwc_f16");
      else
        xcheck(xnn_setup_max_pooling2d_nhwc_f16(op, n, h, w, in[0], out, pool), "xnn_setup_max_pooling2d_nhwc_f16");
    };
  }
};

/// Bilinear resize in float16: Resize's sampling rules, XNNPACK's f16 operator.
struct HalfResize {
  static constexpr std::string_view kType = "resize";
  static constexpr bool kHalf = true;
  static Support check(const LayerInfo& info) { return Resize::check(info); }
  static SetupFn create(const LayerInfo& info, Build& ops) {
    return Resize::create_op<void>(info, ops, sizeof(uint16_t), xnn_create_resize_bilinear2d_nhwc_f16,
                                   xnn_setup_resize_bilinear2d_nhwc_f16, "resize_bilinear2d_nhwc_f16");
  }

};

/// add and mul in float16: Binary's broadcasting, XNNPACK's f16 operators.
template <class K>
struct HalfBinary : Binary<K> {
  static constexpr bool kHalf = true;
  static Support check(const LayerInfo& info) {
    if (Support s = Binary<K>::check(info); !s) return s;
    return half_activation(core::fused_activation(*info.layer));
  }
};
#endif

// ---------------------------------------------------------------------------

const bool g_registered = [] {
  register_routine(std::make_unique<Xnnpack<Conv2>>());
  register_routine(std::make_unique<Xnnpack<Deconv2>>());
  register_routine(std::make_unique<Xnnpack<Dense>>());
  register_routine(std::make_unique<Xnnpack<Pool2>>());
  register_routine(std::make_unique<Xnnpack<Unary<ReluK>>>());
  register_routine(std::make_unique<Xnnpack<Unary<ClipK>>>());
  register_routine(std::make_unique<Xnnpack<Unary<HardswishK>>>());
  register_routine(std::make_unique<Xnnpack<Unary<SigmoidK>>>());
  register_routine(std::make_unique<Xnnpack<HardsigmoidLayer>>());
  register_routine(std::make_unique<Xnnpack<Binary<AddK>>>());
  register_routine(std::make_unique<Xnnpack<Binary<SubK>>>());
  register_routine(std::make_unique<Xnnpack<Binary<MulK>>>());
  register_routine(std::make_unique<Xnnpack<Binary<DivK>>>());
  register_routine(std::make_unique<Xnnpack<Softmax>>());
  register_routine(std::make_unique<Xnnpack<Resize>>());
  register_routine(std::make_unique<XnnpackQ<QConv2>>());
  register_routine(std::make_unique<XnnpackQ<QDense>>());
  register_routine(std::make_unique<XnnpackQ<QBinary<QAddK>>>());
  register_routine(std::make_unique<XnnpackQ<QPool2>>());
  register_routine(std::make_unique<XnnpackQ<QResize>>());
  register_routine(std::make_unique<XnnpackQ<QBinary<QMulK>>>());
#if defined(__aarch64__)
  register_routine(std::make_unique<Xnnpack<HalfConv2>>());
  register_routine(std::make_unique<Xnnpack<HalfDense>>());
  register_routine(std::make_unique<Xnnpack<HalfPool2>>());
  register_routine(std::make_unique<Xnnpack<HalfBinary<HalfAddK>>>());
  register_routine(std::make_unique<Xnnpack<HalfBinary<HalfMulK>>>());
  register_routine(std::make_unique<Xnnpack<HalfResize>>());
#endif
  return true;
}();

}  // namespace

uint64_t xnnpack_allocations() { return g_allocs.load(std::memory_order_relaxed); }

}  // namespace softneuro
