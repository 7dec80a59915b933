// cpu/tile_dense and cpu:bfloat16/tile_dense — a dense layer whose products
// run in int8 on AMX tiles (tile_kernels.hpp), and the same for pointwise
// convolutions channels last (cpu[:bfloat16]:nhwc/tile_dense, a row per
// pixel): each activation row quantised
// when the layer runs (symmetric, its own scale), the weights once per output
// channel (int8, packed as the tiles load them, 32 channels a panel), sums
// exact in int32, scaled back to float32 with the bias, then the fused
// activation; input and output in float32 or bfloat16 (the schema), so a
// bfloat16 path needs no casts around it. Each thread takes whole panels and
// runs every strip of 32 rows against a panel while it is in cache (the
// pointwise form's `split` 1: whole strips, every panel). AMX-INT8
// multiplies twice as many values per tile as AMX-BF16 does: where oneDNN's
// bf16 dense reached about 1.2 TFLOP/s on two cores (ViT's, 197 rows), int8
// tiles double that. Reduced precision (Routine::precision: qint8), held to
// the accuracy budget like cpu/dynamic_int8, never an untuned default.
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/prepared_weights.hpp"
#include "core/weight_quant.hpp"
#include "routines/cpu/f32_common.hpp"
#include "routines/cpu/tile_kernels.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

// AMX is x86-64's: elsewhere the kernels are not built (CMakeLists.txt) and
// these routines are not registered.
#if defined(__x86_64__)

namespace softneuro {
namespace {

namespace tile = cpu::tile;
using cpu::gemm::round_up;

constexpr int64_t kRows = 32, kPanel = 32;
/// int32 sums of int8 products stay exact up to this depth (127 * 127 * K < 2^31).
constexpr int64_t kMaxK = 131072;

/// The weights as the tiles load them: panels of 32 channels, each two streams
/// of K / 64 tiles; per channel its scale and bias (0 past the last channel).
struct Packed final : PackedWeights {
  Blob w;
  std::vector<float> scale, bias;
  Blob save() const override {
    return core::pack_arrays({core::array_bytes(static_cast<const std::byte*>(w.data()), w.byte_size()),
                              core::array_bytes(scale.data(), scale.size()), core::array_bytes(bias.data(), bias.size())});
  }
};

/// The panels' sizes, from the weights [O, K] (a pointwise convolution's [O, K, 1, 1]), never the input's.
struct Panels {
  int64_t n = 0, k = 0, k_pad = 0, panels = 0;
  explicit Panels(const Layer& layer) {
    const Shape& w = layer.weight("weight").shape();
    n = w[0];
    k = w[1];
    k_pad = round_up(k, tile::kDepth);
    panels = (n + kPanel - 1) / kPanel;
  }
  std::size_t bytes() const { return static_cast<std::size_t>(panels * kPanel * k_pad); }
  std::size_t lanes() const { return static_cast<std::size_t>(panels * kPanel); }
};

std::shared_ptr<const Packed> pack_panels(const PackInfo& info) {
  const Layer& layer = *info.layer;
  const Panels p(layer);
  const std::size_t bytes = p.bytes(), lanes = p.lanes();
  check_prepare_bytes(info, bytes + 2 * lanes * sizeof(float), "its int8 weights");
  const core::ChannelQuantized q = core::channel_int8(layer.weight("weight"), 127);
  const Blob* bias = layer.find_weight("bias");
  auto out = std::make_shared<Packed>();
  out->w = Blob::allocate(Shape{static_cast<int64_t>(bytes)}, DType::qint8);  // zero-filled
  out->scale.assign(lanes, 0.0f);
  out->bias.assign(lanes, 0.0f);
  const Blob b = bias ? core::float_weight(*bias) : Blob();
  auto* dst = static_cast<int8_t*>(out->w.data());
  const int64_t steps = p.k_pad / tile::kDepth;
  for (int64_t o = 0; o < p.n; ++o) {
    out->scale[static_cast<std::size_t>(o)] = q.scale[static_cast<std::size_t>(o)];
    if (bias) out->bias[static_cast<std::size_t>(o)] = b.data_as<float>()[o];
    // Channel o: stream o / 16 (two a panel), column o % 16 of each of its tiles.
    int8_t* stream = dst + (o / 16) * steps * 1024;
    const int64_t n = o % 16;
    for (int64_t kk = 0; kk < p.k; ++kk) {
      const int64_t ks = kk / tile::kDepth, e = kk % tile::kDepth;
      stream[ks * 1024 + (e / 4) * 64 + n * 4 + e % 4] = q.q[static_cast<std::size_t>(o * p.k + kk)];
    }
  }
  return out;
}

std::shared_ptr<const Packed> unpack_panels(const Blob& blob, const PackInfo& info) {
  const Panels p(*info.layer);
  const std::size_t bytes = p.bytes(), lanes = p.lanes();
  auto a = core::unpack_arrays(blob, {bytes, lanes * sizeof(float), lanes * sizeof(float)});
  if (!a) return nullptr;
  auto out = std::make_shared<Packed>();
  out->w = Blob::view(core::owner_of(blob), (*a)[0], Shape{static_cast<int64_t>(bytes)}, DType::qint8);
  out->scale.resize(lanes);
  out->bias.resize(lanes);
  std::memcpy(out->scale.data(), (*a)[1], lanes * sizeof(float));
  std::memcpy(out->bias.data(), (*a)[2], lanes * sizeof(float));
  return out;
}

template <DType D>
class Prepared final : public PreparedRoutine {
 public:
  static constexpr bool kBf16 = D == DType::bfloat16;
  using Element = std::conditional_t<kBf16, uint16_t, float>;

  /// m rows of k values in, each to the weight's [O, k] outputs (a dense layer's rows;
  /// a pointwise convolution's pixels, channels last).
  /// by_rows: each thread takes whole strips of rows and every panel (else
  /// whole panels and every strip).
  Prepared(const LayerInfo& info, int64_t m, int64_t k, std::shared_ptr<const Packed> packed, bool by_rows)
      : k_(k), m_(m), by_rows_(by_rows), v_(cpu::vec::best_kernels()), packed_(std::move(packed)) {
    const Layer& layer = *info.layer;
    const Blob& w = layer.weight("weight");
    n_ = w.shape()[0];
    k_pad_ = round_up(k_, tile::kDepth);
    panels_ = (n_ + kPanel - 1) / kPanel;
    act_ = core::fused_activation(layer, true, true);
    // What dense_panel applies itself; the others (gelu, silu, sigmoid) by the vec kernels, over a strip at once.
    epilogue_.scale = act_.scale;
    epilogue_.shift = act_.shift;
    switch (act_.kind) {
      case core::Activation::none: epilogue_.act = tile::Act::none; break;
      case core::Activation::relu: epilogue_.act = tile::Act::relu; break;
      case core::Activation::clip: epilogue_.act = tile::Act::clip, epilogue_.p0 = act_.min, epilogue_.p1 = act_.max; break;
      case core::Activation::hardswish: epilogue_.act = tile::Act::hardswish; break;
      case core::Activation::hardsigmoid:
        epilogue_.act = tile::Act::hardsigmoid, epilogue_.p0 = act_.alpha, epilogue_.p1 = act_.beta;
        break;
      default:
        epilogue_.context = this;
        epilogue_.activate = [](const void* self, float* x, int64_t n) {
          const auto* me = static_cast<const Prepared*>(self);
          cpu::activate_row(me->act_, *me->v_, x, n, true);  // (int8 products: reduced precision either way)
        };
    }
    const Panels p(layer);
    if (!packed_ || p.k != k_ || p.n != n_ || packed_->w.byte_size() != p.bytes() || packed_->scale.size() != p.lanes())
      throw Error("tile_dense: its packed weights do not fit this layer", {}, layer.name, "weight");
    slots_ = team_threads(info);
  }

  std::size_t workspace_bytes() const override {
    return static_cast<std::size_t>(a_bytes() + 64 * round_up(m_pad(), 16) / 16 + slot_bytes() * slots_);
  }

  void run(const RunArgs& args) override {
    if (m_ == 0 || n_ == 0) return;
    const Element* x = args.inputs[0]->data_as<Element>();
    Element* y = args.outputs[0]->data_as<Element>();
    auto* base = static_cast<char*>(args.workspace);
    auto* a = reinterpret_cast<int8_t*>(base);
    auto* xs = reinterpret_cast<float*>(base + a_bytes());
    char* slots = base + a_bytes() + 64 * round_up(m_pad(), 16) / 16;
    std::atomic<bool> finite{true};  // every row: else the rows holding NaN or infinity are computed again below
    // The rows quantised into packed strips (rows past m zero: a strip's tail multiplies zeros).
    const int64_t strips = m_pad() / kRows;
    cpu::for_each_task(args.pool, slots_, strips, [&](int64_t s, int slot) {
      float* row = reinterpret_cast<float*>(slots + slot * slot_bytes());
      for (int64_t r = s * kRows; r < (s + 1) * kRows; ++r) {
        // Row r of its strip: chunk j of kDepth values at (j * 32 + r % 32) * kDepth in the strip.
        int8_t* q = a + s * kRows * k_pad_ + (r % kRows) * tile::kDepth;
        if (r >= m_) {
          for (int64_t j = 0; j < k_pad_ / tile::kDepth; ++j) std::memset(q + j * kRows * tile::kDepth, 0, tile::kDepth);
          xs[r] = 0;
          continue;
        }
        const float* xr;
        if constexpr (kBf16) {
          tile::from_bf16(x + r * k_, row, k_);
          xr = row;
        } else {
          xr = x + r * k_;
        }
        xs[r] = tile::quantize_row(xr, k_, q, k_pad_, kRows * tile::kDepth);
        if (std::isnan(xs[r])) finite.store(false, std::memory_order_relaxed);
      }
    });
    const Packed& p = *packed_;
    const auto* w = static_cast<const int8_t*>(p.w.data());
    const int64_t steps = k_pad_ / tile::kDepth;
    // Panels over the threads: each streams its panels' weights once. Or
    // (by_rows_) strips over the threads, each reading every panel: its rows
    // are those it quantised, and those the next step's threads take where
    // that step splits by rows.
    const int64_t parts = by_rows_ ? strips : panels_;
    const int64_t used = std::max<int64_t>(
        1, std::min<int64_t>({static_cast<int64_t>(slots_), parts, args.pool ? int64_t(args.pool->num_threads()) : 1}));
    cpu::for_each_task(args.pool, slots_, used, [&](int64_t t, int slot) {
      const int64_t q0 = parts * t / used, q1 = parts * (t + 1) / used;
      const int64_t p0 = by_rows_ ? 0 : q0, p1 = by_rows_ ? panels_ : q1;
      const int64_t r0 = by_rows_ ? q0 * kRows : 0, r1 = by_rows_ ? std::min(m_, q1 * kRows) : m_;
      if (r0 >= r1) return;
      auto* scratch = reinterpret_cast<int32_t*>(slots + slot * slot_bytes());
      tile::configure_tiles();
      for (int64_t panel = p0; panel < p1; ++panel) {
        const int8_t* b0 = w + panel * 2 * steps * 1024;
        const int64_t c0 = panel * kPanel, cols = std::min(kPanel, n_ - c0);
        tile::dense_panel(a + r0 * k_pad_, r1 - r0, k_pad_, b0, b0 + steps * 1024, xs + r0, p.scale.data() + c0,
                          p.bias.data() + c0, cols, epilogue_, y + r0 * n_ + c0, n_, kBf16, scratch);
      }
      tile::release_tiles();
    });
    // Rows holding NaN or infinity have no scale to quantise by: float32 keeps them as ONNX does.
    if (!finite.load())
      cpu::for_each_task(args.pool, slots_, m_, [&](int64_t r, int slot) {
        if (std::isnan(xs[r])) float_row(x + r * k_, y + r * n_, reinterpret_cast<float*>(slots + slot * slot_bytes()));
      });
  }

 private:
  int64_t m_pad() const { return round_up(m_, kRows); }
  int64_t a_bytes() const { return round_up(m_pad() * k_pad_, 64); }
  /// Per thread: a row of the input in float32 (bf16 inputs), dense_panel's scratch, or a row's sums (float_row).
  int64_t slot_bytes() const { return round_up(4 * std::max({k_, n_, 3 * kRows * kPanel}), 64); }

  /// One output row in float32 with the dequantised weights, for an input row
  /// holding NaN or infinity (cpu::non_finite_row); `acc` n floats.
  void float_row(const Element* x, Element* y, float* acc) const {
    const Packed& p = *packed_;
    const auto* w = static_cast<const int8_t*>(p.w.data());
    const int64_t steps = k_pad_ / tile::kDepth;
    auto value = [&](int64_t kk) {
      if constexpr (kBf16) {
        const uint32_t u = static_cast<uint32_t>(x[kk]) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
      } else {
        return x[kk];
      }
    };
    auto weight = [&](int64_t kk, int64_t o) {
      const int64_t ks = kk / tile::kDepth, e = kk % tile::kDepth;
      return static_cast<float>(w[(o / 16) * steps * 1024 + ks * 1024 + (e / 4) * 64 + (o % 16) * 4 + e % 4]);
    };
    cpu::non_finite_row(k_, n_, value, weight, acc);
    for (int64_t o = 0; o < n_; ++o) {
      const auto c = static_cast<std::size_t>(o);
      acc[o] = core::apply_activation(act_, acc[o] * p.scale[c] + p.bias[c]);
    }
    if constexpr (kBf16) tile::scaled_to_bf16(acc, 1.0f, y, 1, n_);
    else std::memcpy(y, acc, sizeof(float) * static_cast<std::size_t>(n_));
  }

  int64_t k_ = 0, m_ = 0, n_ = 0, k_pad_ = 0, panels_ = 0;
  bool by_rows_ = false;
  int slots_ = 1;
  core::Activation act_;
  tile::Epilogue epilogue_;
  const cpu::vec::Kernels* v_;
  std::shared_ptr<const Packed> packed_;
};

Support usable() {
  const core::CpuFeatures& f = core::cpu_features();
  if (!(f.amx_tile && f.amx_int8 && f.amx_bf16 && f.avx512_bf16 && f.avx512_core()))
    return Support::no("tile_dense needs AMX-INT8 and AVX-512 BF16");
  if (!core::amx_tiles_permitted()) return Support::no("the operating system refused this process the AMX tile state");
  if (!cpu::vec::best_kernels()) return Support::no("tile_dense's epilogue needs AVX-512");
  return Support::yes();
}

/// What both forms check: the schema, the CPU, one input, an int8-able weight and a float bias.
Support common_checks(const LayerInfo& info, const Schema& schema, const Schema& own) {
  if (!(schema == own)) return Support::no(fmt::format("{}/tile_dense computes in {}", own.to_string(), own.to_string()));
  if (Support s = usable(); !s) return s;
  if (!info.layer || info.input_shapes.size() != 1) return Support::no(fmt::format("{} needs one input", info.layer ? info.layer->type : "the layer"));
  if (Support s = core::int8_routine_weight(*info.layer, "weight", true); !s) return s;
  return routines::float_weights(*info.layer, {"bias"}, "tile_dense");
}

/// The prepared form of m rows of k values, or the reason it cannot run here.
template <DType D>
std::unique_ptr<PreparedRoutine> prepared(const LayerInfo& info, const Schema& own, int64_t m, int64_t k,
                                          std::shared_ptr<const PackedWeights> packed, bool by_rows = false) {
  if (Support s = usable(); !s) throw Error(fmt::format("{}/tile_dense: {}", own.to_string(), s.reason));
  return std::make_unique<Prepared<D>>(info, m, k, std::dynamic_pointer_cast<const Packed>(std::move(packed)), by_rows);
}

/// Both forms' packing: the panels of their weights [O, K] (a pointwise convolution's [O, K, 1, 1]).
class TilePacking : public Routine {
 public:
  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams&) const override {
    return pack_panels(info);
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& info, const Schema&,
                                              const RoutineParams&) const override {
    return unpack_panels(bytes, info);
  }
};

template <DType D>
class TileDense final : public TilePacking {
 public:
  static constexpr Schema kSchema{Device::cpu, D, Layout::nchw};
  std::string_view layer_type() const override { return "dense"; }
  std::string_view algorithm() const override { return "tile_dense"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }
  DType precision(const Schema&) const override { return DType::qint8; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (Support s = common_checks(info, schema, kSchema); !s) return s;
    if (Support s = cpu::check_dense(info, "tile_dense"); !s) return s;
    const Shape& in = info.input_shapes[0];
    if (const int64_t k = in[in.rank() - 1]; k > kMaxK)
      return Support::no(fmt::format("K {} over {}: the int32 sums of int8 products could overflow", k, kMaxK));
    return Support::yes();
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams&,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    const Shape& in = info.input_shapes[0];
    const int64_t k = in[in.rank() - 1];
    return prepared<D>(info, kSchema, k ? in.numel() / k : 0, k, std::move(packed));
  }
};

/// A pointwise convolution (1x1, stride 1, unpadded, one group) channels last:
/// a dense layer over the pixels, each pixel's channels quantised by its own
/// scale when the layer runs (where static int8 has one scale for a blob).
template <DType D>
class TileConv1x1 final : public TilePacking {
 public:
  static constexpr Schema kSchema{Device::cpu, D, Layout::nhwc};
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return "tile_dense"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }
  DType precision(const Schema&) const override { return DType::qint8; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (Support s = common_checks(info, schema, kSchema); !s) return s;
    if (info.input_shapes[0].rank() != 4) return Support::no("conv2 needs an input [N,C,H,W]");
    const core::Window2d g = core::conv2_window(*info.layer, info.input_shapes[0]);
    if (!(g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 && g.pb == 0 && g.pr == 0 &&
          g.group == 1 && g.oh == g.h && g.ow == g.w))
      return Support::no("tile_dense takes 1x1 stride-1 unpadded convolutions of one group");
    if (g.c == 0 || g.c > kMaxK) return Support::no(fmt::format("{} input channels: 1 to {}", g.c, kMaxK));
    try {
      core::fused_activation(*info.layer, true, true);
    } catch (const Error& e) {
      return Support::no(e.message());
    }
    return Support::yes();
  }
  /// split: 0 the threads take panels of output channels (each streams its
  /// panels' weights once), 1 strips of pixels (each reads every panel: the
  /// pixels it quantised, and those the next step's threads read where that
  /// step splits by rows). Which pays depends on the steps around it (in the
  /// net: the tuner measures both), and only where there are two strips or more.
  std::vector<RoutineParamSpec> param_space(const LayerInfo& info, const Schema& schema) const override {
    if (!supports(info, schema)) return {};
    const Shape& in = info.input_shapes[0];
    if (in[0] * in[2] * in[3] < 2 * kRows) return {};
    return {{"split", {0, 1}}};
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams& params,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    const Shape& in = info.input_shapes[0];
    return prepared<D>(info, kSchema, in[0] * in[2] * in[3], in[1], std::move(packed),
                       routine_param(params, "split", 0) == 1);
  }
};

}  // namespace

SOFTNEURO_REGISTER_ROUTINE(TileDense<DType::float32>);
SOFTNEURO_REGISTER_ROUTINE(TileDense<DType::bfloat16>);
SOFTNEURO_REGISTER_ROUTINE(TileConv1x1<DType::float32>);
SOFTNEURO_REGISTER_ROUTINE(TileConv1x1<DType::bfloat16>);

}  // namespace softneuro

#endif  // defined(__x86_64__)
