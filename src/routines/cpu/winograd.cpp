// cpu/winograd — Winograd F(m,3) convolution as a childnet (SoftNeuro III-A/B):
//   conv2 3x3, stride 1, dilation 1, group 1 (any channels, any pads), routine
//   parameter tile = m in {2, 4, 6}, expands to three children
//     <layer>/wgenc   V = B^T d B of every input tile           [P][C][Tp]
//     <layer>/wgconv  M[p] = U[p]^T V[p], one GEMM per position  [P][K][Tp]
//                     (weight U = G g G^T, transformed once here)
//     <layer>/wgdec   y = act(A^T M A + bias), clipped           [N][K][OH][OW]
//   whose routines are chosen like any layer's: cpu/ref (here, the oracle) and
//   cpu/winograd (winograd_kernels_{avx2,avx512}.cpp, parameter avx512).
// The transforms are in winograd_kernels.hpp (built at compile time).
// In the default order below oneDNN's conv2, so the untuned default keeps
// oneDNN; the tuner picks cpu/winograd where it measures faster.
#include "core/childnet.hpp"
#include "core/cpu_features.hpp"
#include "core/layer_types.hpp"
#include "core/prepared_weights.hpp"
#include "routines/cpu/f32_common.hpp"
#include "routines/cpu/winograd_blocked.hpp"
#include "routines/cpu/winograd_kernels.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace softneuro {
namespace {

using wg::WinogradTiles;
using wg::winograd_tiles;

// ---------------------------------------------------------------------------
// The layer types of the children (registered here, beside the built-in ones;
// children of the cpu/winograd conv2 childnet, F(m,3), P = (m+2)^2
// transformed positions, tiles t = (n*TY + ty)*TX + tx, T = N*TY*TX padded to Tp,
// a multiple of 16, so kernels vectorise over tiles without tails):
// wgenc     in [N,C,H,W]; tile = m (2|4|6), pads [t,l,b,r]=0; out V [P,C,Tp],
//           V[p][c][t] = (B^T d B)[p] of the (m+2)x(m+2) input patch of tile t
//           (zero outside the padded input; padding tiles t >= T are zero).
// wgconv    in V [P,C,Tp]; weight [P,C,K] (U = G g G^T per position); out M [P,K,Tp],
//           M[p][k][t] = sum_c U[p][c][k] V[p][c][t].
// wgdec     in M [P,K,Tp]; tile = m; out_shape [N,K,OH,OW]; bias [K] optional;
//           fused act as conv2; out = act(A^T M A + bias), clipped to OH x OW.

using core::check_optional_bias;
using core::expect_rank;
using core::fused_activation;
using core::ints_of_size;
[[noreturn]] void fail(const Layer& l, const std::string& field, const std::string& msg) { core::fail_field(l, field, msg); }
const Shape& weight_shape(const Layer& l, const char* key) { return l.weight(key).shape(); }

int64_t winograd_m(const Layer& l) {
  int64_t m = l.get_int("tile");
  if (m != 2 && m != 4 && m != 6) fail(l, "tile", fmt::format("tile {} is not one of 2, 4, 6", m));
  return m;
}

std::vector<Shape> infer_wgenc(const Layer& l, std::span<const Shape> in) {
  expect_rank(l, in[0], 4);
  const int64_t m = winograd_m(l);
  auto pads = ints_of_size(l, "pads", 4, {0, 0, 0, 0});
  for (auto v : pads)
    if (v < 0) fail(l, "pads", "pads must be non-negative");
  const int64_t oh = in[0][2] + pads[0] + pads[2] - 2, ow = in[0][3] + pads[1] + pads[3] - 2;
  if (oh < 1 || ow < 1) fail(l, "input", fmt::format("input {} is smaller than the 3x3 kernel", in[0].to_string()));
  WinogradTiles t = winograd_tiles(m, in[0][0], oh, ow);
  return {Shape{t.p, in[0][1], t.tp}};
}

std::vector<Shape> infer_wgconv(const Layer& l, std::span<const Shape> in) {
  expect_rank(l, in[0], 3);
  const Shape& w = weight_shape(l, "weight");
  if (w.rank() != 3 || w[0] != in[0][0] || w[1] != in[0][1])
    fail(l, "weight", fmt::format("weight has shape {}, expected [{},{},K]", w.to_string(), in[0][0], in[0][1]));
  return {Shape{in[0][0], w[2], in[0][2]}};
}

std::vector<Shape> infer_wgdec(const Layer& l, std::span<const Shape> in) {
  expect_rank(l, in[0], 3);
  const int64_t m = winograd_m(l);
  auto out = ints_of_size(l, "out_shape", 4, {});
  WinogradTiles t = winograd_tiles(m, out[0], out[2], out[3]);
  if (in[0][0] != t.p || in[0][1] != out[1] || in[0][2] != t.tp)
    fail(l, "input", fmt::format("input has shape {}, expected [{},{},{}] for tile {} and out_shape [{},{},{},{}]",
                                 in[0].to_string(), t.p, out[1], t.tp, m, out[0], out[1], out[2], out[3]));
  check_optional_bias(l, out[1]);
  fused_activation(l);
  return {Shape{out[0], out[1], out[2], out[3]}};
}

// The blocked Winograd children (cpu:float32:nchw16c/winograd, nchw8c/winograd): the same
// computation with 4-d shapes, so that a blocked layout stores V and M with
// channels innermost: V [P, C, T, 1], M [P, K, T, 1], T = tiles (unpadded).
std::vector<Shape> infer_wgencb(const Layer& l, std::span<const Shape> in) {
  const Shape v = infer_wgenc(l, in)[0];  // checks the input, tile and pads
  const auto pads = ints_of_size(l, "pads", 4, {0, 0, 0, 0});
  const int64_t oh = in[0][2] + pads[0] + pads[2] - 2, ow = in[0][3] + pads[1] + pads[3] - 2;
  return {Shape{v[0], v[1], winograd_tiles(winograd_m(l), in[0][0], oh, ow).t, 1}};
}

std::vector<Shape> infer_wgconvb(const Layer& l, std::span<const Shape> in) {
  expect_rank(l, in[0], 4);
  const Shape& w = weight_shape(l, "weight");
  if (w.rank() != 3 || w[0] != in[0][0] || w[1] != in[0][1] || in[0][3] != 1)
    fail(l, "weight", fmt::format("weight has shape {} for input {}, expected [{},{},K]", w.to_string(),
                                  in[0].to_string(), in[0][0], in[0][1]));
  return {Shape{in[0][0], w[2], in[0][2], 1}};
}

std::vector<Shape> infer_wgdecb(const Layer& l, std::span<const Shape> in) {
  expect_rank(l, in[0], 4);
  const int64_t m = winograd_m(l);
  auto out = ints_of_size(l, "out_shape", 4, {});
  WinogradTiles t = winograd_tiles(m, out[0], out[2], out[3]);
  if (in[0][0] != t.p || in[0][1] != out[1] || in[0][2] != t.t || in[0][3] != 1)
    fail(l, "input", fmt::format("input has shape {}, expected [{},{},{},1] for tile {} and out_shape [{},{},{},{}]",
                                 in[0].to_string(), t.p, out[1], t.t, m, out[0], out[1], out[2], out[3]));
  check_optional_bias(l, out[1]);
  fused_activation(l);
  return {Shape{out[0], out[1], out[2], out[3]}};
}


template <int M>
constexpr wg::Matrices<M> kMat = wg::make_matrices<M>();

/// Runs f with the compile-time tile size m.
template <class F>
decltype(auto) with_m(int64_t m, F&& f) {
  switch (m) {
    case 2: return f(kMat<2>);
    case 4: return f(kMat<4>);
    default: return f(kMat<6>);
  }
}

Support float_cpu(const Blob* b, const char* key) {
  if (!b) return Support::yes();
  if (b->dtype() != DType::float32 || b->device() != Device::cpu || b->layout() != Layout::nchw || (b->numel() && !b->data()))
    return Support::no(fmt::format("weight '{}' must be plain float32 on the CPU", key));
  return Support::yes();
}

template <int M>
void transform_weights_m(const float* w, int64_t c, int64_t k, float* ud) {
  constexpr int A = M + 2;
  constexpr const auto& g = kMat<M>.g;  // compile-time: zeros and ones fold away
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t ki = 0; ki < k; ++ki) {
      const float* gk = w + (ki * c + ci) * 9;
      double tmp[A][3];
      for (int i = 0; i < A; ++i)
        for (int j = 0; j < 3; ++j) tmp[i][j] = g[i][0] * gk[j] + g[i][1] * gk[3 + j] + g[i][2] * gk[6 + j];
      for (int i = 0; i < A; ++i)
        for (int j = 0; j < A; ++j)
          ud[((i * A + j) * c + ci) * k + ki] = static_cast<float>(tmp[i][0] * g[j][0] + tmp[i][1] * g[j][1] + tmp[i][2] * g[j][2]);
    }
}

/// U[p][c][k] = (G g G^T)[p] for every (k, c) of a [K, C, 3, 3] weight, in
/// double. Input channel outermost so that the writes run along k in each of
/// the P rows (a k-outer order scattered them: seconds for a 512-channel
/// layer, paid by every tuning run that lists the candidate).
Blob transformed_weights(int64_t m, const float* w, int64_t c, int64_t k) {
  Blob u = Blob::allocate(Shape{(m + 2) * (m + 2), c, k});
  float* ud = u.data_as<float>();
  if (m == 2) transform_weights_m<2>(w, c, k, ud);
  else if (m == 4) transform_weights_m<4>(w, c, k, ud);
  else transform_weights_m<6>(w, c, k, ud);
  return u;
}

/// What both conv2 -> Winograd routines (plain and blocked) require.
Support winograd_conv_support(const LayerInfo& info) {
  const Layer& l = *info.layer;
  if (info.input_shapes.size() != 1 || info.input_shapes[0].rank() != 4) return Support::no("needs one NCHW input");
  const Blob* w = l.find_weight("weight");
  if (!w || w->shape().rank() != 4) return Support::no("needs a 4-d weight");
  core::Window2d g = core::conv2_window(l, info.input_shapes[0]);
  if (g.kh != 3 || g.kw != 3) return Support::no(fmt::format("kernel {}x{}, Winograd F(m,3) needs 3x3", g.kh, g.kw));
  if (g.sh != 1 || g.sw != 1) return Support::no("stride must be 1");
  if (g.dh != 1 || g.dw != 1) return Support::no("dilation must be 1");
  if (g.group != 1) return Support::no("group must be 1");
  if (core::fused_activation(l, true).affine())
    return Support::no("an affine after the fused activation (act_scale, act_shift) is not in its decoders");
  if (auto f = float_cpu(w, "weight"); !f) return f;
  return float_cpu(l.find_weight("bias"), "bias");
}

/// The three children of a Winograd conv2 (types enc/mul/dec, all in `schema`).
Childnet winograd_childnet(const Layer& l, const LayerInfo& info, int64_t m, const char* enc_type,
                           const char* mul_type, const char* dec_type, const Schema& schema) {
  if (m != 2 && m != 4 && m != 6) throw Error(fmt::format("tile {} is not one of 2, 4, 6", m), {}, l.name, "routine_params");
  core::Window2d g = core::conv2_window(l, info.input_shapes[0]);
  // The transformed weights, shared by every session and shape of the model (the view keeps them alive).
  const Shape u_shape{(m + 2) * (m + 2), g.c, g.oc};
  const auto shared = prepared_weights<Blob>(
      info, fmt::format("wg.U/{}", m), [&] { return transformed_weights(m, l.weight("weight").data_as<float>(), g.c, g.oc); },
      [](const Blob& u) { return core::save_float_blob(u); },
      [&](const Blob& bytes) { return core::load_float_blob(bytes, u_shape); });
  const Blob u = Blob::view(std::shared_ptr<const void>(shared, shared->data()), shared->data(), shared->shape(),
                            shared->dtype());
  Childnet cn;
  auto child = [&](const char* suffix, const char* type, const char* in, const char* out) {
    Layer c;
    c.name = l.name + suffix;
    c.type = type;
    c.inputs = {in};
    c.outputs = {out};
    return c;
  };
  Layer enc = child("/wgenc", enc_type, "x", "V");
  enc.params["tile"] = m;
  enc.params["pads"] = std::vector<int64_t>{g.pt, g.pl, g.pb, g.pr};
  Layer mul = child("/wgconv", mul_type, "V", "M");
  mul.weights["weight"] = u;
  Layer dec = child("/wgdec", dec_type, "M", "y");
  dec.params["tile"] = m;
  dec.params["out_shape"] = std::vector<int64_t>{g.n, g.oc, g.oh, g.ow};
  for (const auto& [key, v] : l.params)
    if (key.rfind("act", 0) == 0) dec.params[key] = v;
  if (const Blob* b = l.find_weight("bias")) dec.weights["bias"] = *b;
  cn.layers = {std::move(enc), std::move(mul), std::move(dec)};
  cn.schemas = {schema, schema, schema};
  cn.inputs = {"x"};
  cn.outputs = {"y"};
  return cn;
}

// ---------------------------------------------------------------------------
// conv2 -> wgenc -> wgconv -> wgdec

class WinogradConv final : public core::ChildnetRoutine {
 public:
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return "winograd"; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (!(s == Schema{})) return Support::no("computes in cpu (float32 nchw) only");
    return winograd_conv_support(info);
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {{"tile", {2, 4, 6}}};
  }
  std::optional<Childnet> childnet(const LayerInfo& info, const Schema&, const RoutineParams& params) const override {
    return winograd_childnet(*info.layer, info, routine_param(params, "tile", 4), "wgenc", "wgconv", "wgdec", Schema{});
  }
};
SOFTNEURO_REGISTER_ROUTINE(WinogradConv);

// ---------------------------------------------------------------------------
// The children's routines: cpu/ref (obviously correct, double accumulation)
// and cpu/winograd (AVX2 or AVX-512 kernels).

enum class Isa { ref, avx2, avx512 };
/// The x86 kernels are built for x86-64 only; elsewhere the avx2 and avx512
/// children say unsupported (isa_support) and reference no kernel.
#if defined(__x86_64__)
constexpr bool kX86Kernels = true;
#else
constexpr bool kX86Kernels = false;
#endif

Support isa_support(Isa isa) {
  const auto& f = core::cpu_features();
  if (isa == Isa::avx2 && !f.avx2_fma()) return Support::no("CPU lacks AVX2/FMA");
  if (isa == Isa::avx512 && !(f.avx512_core() && f.fma)) return Support::no("CPU lacks AVX-512 (F/BW/VL/DQ)");
  return Support::yes();
}

wg::Geometry geometry(const LayerInfo& info) {
  const Layer& l = *info.layer;
  wg::Geometry g;
  const int64_t m = l.get_int("tile");
  if (l.type == "wgenc" || l.type == "wgencb") {
    const Shape& x = info.input_shapes[0];
    auto pads = l.get_ints("pads", {0, 0, 0, 0});
    g.c = x[1], g.h = x[2], g.w = x[3], g.pt = pads[0], g.pl = pads[1];
    g.t = winograd_tiles(m, x[0], g.h + pads[0] + pads[2] - 2, g.w + pads[1] + pads[3] - 2);
  } else {
    auto out = l.get_ints("out_shape");
    g.k = out[1];
    g.t = winograd_tiles(m, out[0], out[2], out[3]);
  }
  return g;
}

// --- wgenc

template <Isa I>
struct EncPrepared final : PreparedRoutine {
  int m;
  wg::Geometry g;
  int64_t ts;  ///< V's row of tiles: Tp (wgenc), T (wgencb, whose cpu/ref this also is, in plain layout)
  explicit EncPrepared(const LayerInfo& info)
      : m(static_cast<int>(info.layer->get_int("tile"))), g(geometry(info)), ts(info.output_shapes[0][2]) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* v = a.outputs[0]->data_as<float>();
    if constexpr (I == Isa::avx2 && kX86Kernels) {
      wg::avx2::encode(m, g, x, v, *a.pool);
    } else if constexpr (I == Isa::avx512 && kX86Kernels) {
      wg::avx512::encode(m, g, x, v, *a.pool);
    } else {
      const auto& t = g.t;
      with_m(m, [&](const auto& mat) {
        const int64_t A = m + 2;
        a.pool->parallel_for(g.c * ts, 1, [&](int64_t b0, int64_t b1) {
          for (int64_t idx = b0; idx < b1; ++idx) {
            const int64_t c = idx / ts, tile = idx % ts;
            double d[8][8] = {};
            if (tile < t.t) {
              const int64_t tx = tile % t.tx, ty = (tile / t.tx) % t.ty, n = tile / (t.tx * t.ty);
              for (int64_t i = 0; i < A; ++i)
                for (int64_t j = 0; j < A; ++j) {
                  const int64_t r = ty * m + i - g.pt, col = tx * m + j - g.pl;
                  d[i][j] = r >= 0 && r < g.h && col >= 0 && col < g.w ? x[((n * g.c + c) * g.h + r) * g.w + col] : 0.0;
                }
            }
            for (int64_t i = 0; i < A; ++i)
              for (int64_t j = 0; j < A; ++j) {
                double s = 0;
                for (int64_t p = 0; p < A; ++p)
                  for (int64_t q = 0; q < A; ++q) s += mat.bt[i][p] * d[p][q] * mat.bt[j][q];
                v[((i * A + j) * g.c + c) * ts + tile] = static_cast<float>(s);
              }
          }
        });
        return 0;
      });
    }
  }
};

// --- wgconv

/// wgconv's weight U [P][C][K] in panels of wg::kPackedRows kernels for the
/// SIMD gemm (Routine::pack): what the layer's weight gives, whatever the tile
/// count, so one pack serves every session and shape of the model.
struct WgPack final : PackedWeights {
  wg::PackedU u;
  Blob save() const override { return cpu::save_floats(u.data); }
};

/// The floats of the pack of `l`'s weight U [P][C][K].
std::size_t wg_packed_floats(const Layer& l) {
  const Shape& s = l.weight("weight").shape();
  const int64_t panels = (s[2] + wg::kPackedRows - 1) / wg::kPackedRows;
  return static_cast<std::size_t>(s[0] * panels * s[1] * wg::kPackedRows);
}

template <Isa I>
struct ConvPrepared final : PreparedRoutine {
  int64_t p, c, k, tp;
  Blob u;
  std::shared_ptr<const WgPack> packed;  ///< the model's (the SIMD kernels'); none for the reference
  explicit ConvPrepared(const LayerInfo& info, std::shared_ptr<const WgPack> pk = nullptr)
      : p(info.input_shapes[0][0]), c(info.input_shapes[0][1]), k(info.output_shapes[0][1]), tp(info.input_shapes[0][2]),
        u(info.layer->weight("weight")),
        packed(std::move(pk)) {}
  void run(const RunArgs& a) override {
    const float* v = a.inputs[0]->data_as<float>();
    float* mm = a.outputs[0]->data_as<float>();
    if constexpr (I == Isa::avx2 && kX86Kernels) {
      wg::avx2::gemm(packed->u, p, c, k, tp, v, mm, *a.pool);
    } else if constexpr (I == Isa::avx512 && kX86Kernels) {
      wg::avx512::gemm(packed->u, p, c, k, tp, v, mm, *a.pool);
    } else {
      const float* ud = u.data_as<float>();
      a.pool->parallel_for(p * k, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t idx = b0; idx < b1; ++idx) {
          const int64_t pi = idx / k, ki = idx % k;
          for (int64_t t = 0; t < tp; ++t) {
            double s = 0;
            for (int64_t ci = 0; ci < c; ++ci) s += double(ud[(pi * c + ci) * k + ki]) * v[(pi * c + ci) * tp + t];
            mm[(pi * k + ki) * tp + t] = static_cast<float>(s);
          }
        }
      });
    }
  }
};

// --- wgdec

template <Isa I>
struct DecPrepared final : PreparedRoutine {
  int m;
  wg::Geometry g;
  wg::Epilogue e;
  Blob bias;
  int64_t ts;  ///< M's row of tiles: Tp (wgdec), T (wgdecb, whose cpu/ref this also is, in plain layout)
  explicit DecPrepared(const LayerInfo& info)
      : m(static_cast<int>(info.layer->get_int("tile"))), g(geometry(info)), ts(info.input_shapes[0][2]) {
    e.act = core::fused_activation(*info.layer);
    if (const Blob* b = info.layer->find_weight("bias")) bias = *b;
    e.bias = bias.numel() ? bias.data_as<float>() : nullptr;
  }
  void run(const RunArgs& a) override {
    const float* mm = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    if constexpr (I == Isa::avx2 && kX86Kernels) {
      wg::avx2::decode(m, g, e, mm, y, *a.pool);
    } else if constexpr (I == Isa::avx512 && kX86Kernels) {
      wg::avx512::decode(m, g, e, mm, y, *a.pool);
    } else {
      const auto& t = g.t;
      with_m(m, [&](const auto& mat) {
        const int64_t A = m + 2;
        a.pool->parallel_for(g.k * t.t, 1, [&](int64_t b0, int64_t b1) {
          for (int64_t idx = b0; idx < b1; ++idx) {
            const int64_t k = idx / t.t, tile = idx % t.t;
            const int64_t tx = tile % t.tx, ty = (tile / t.tx) % t.ty, n = tile / (t.tx * t.ty);
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < m; ++j) {
                const int64_t r = ty * m + i, col = tx * m + j;
                if (r >= t.oh || col >= t.ow) continue;
                double s = e.bias ? e.bias[k] : 0.0;
                for (int64_t p = 0; p < A; ++p)
                  for (int64_t q = 0; q < A; ++q) s += mat.at[i][p] * double(mm[((p * A + q) * g.k + k) * ts + tile]) * mat.at[j][q];
                y[((n * g.k + k) * t.oh + r) * t.ow + col] = core::apply_activation(e.act, static_cast<float>(s));
              }
          }
        });
        return 0;
      });
    }
  }
};

/// cpu/ref for wgenc / wgconv / wgdec (and the blocked children on 4-d shapes).
template <template <Isa> class P>
class WgRoutine final : public Routine {
 public:
  explicit WgRoutine(std::string_view type) : type_(type) {}
  std::string_view layer_type() const override { return type_; }
  std::string_view algorithm() const override { return "ref"; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (!(s == Schema{})) return Support::no("computes in cpu (float32 nchw) only");
    if (auto ok = float_cpu(info.layer->find_weight("weight"), "weight"); !ok) return ok;
    return float_cpu(info.layer->find_weight("bias"), "bias");
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    return std::make_unique<P<Isa::ref>>(info);
  }

 private:
  std::string_view type_;
};

/// cpu/winograd for wgenc / wgconv / wgdec: the SIMD kernels. `avx512` (0 or 1,
/// listed only where the CPU has AVX-512) picks the kernel set; the default is
/// the widest the CPU has, and a file tuned elsewhere asking for AVX-512 runs
/// the AVX2 kernels (the same arithmetic) where AVX-512 is missing.
class WgSimdBase : public Routine {
 public:
  explicit WgSimdBase(std::string_view type) : type_(type) {}
  std::string_view layer_type() const override { return type_; }
  std::string_view algorithm() const override { return "winograd"; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (!(s == Schema{})) return Support::no("computes in cpu (float32 nchw) only");
    if (auto ok = isa_support(Isa::avx2); !ok) return ok;
    if (auto ok = float_cpu(info.layer->find_weight("weight"), "weight"); !ok) return ok;
    return float_cpu(info.layer->find_weight("bias"), "bias");
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    if (!isa_support(Isa::avx512)) return {};
    return {{"avx512", {1, 0}}};
  }

 protected:
  /// The AVX-512 kernels: where the CPU has them and the parameters do not ask for AVX2.
  static bool avx512(const RoutineParams& params) {
    return isa_support(Isa::avx512).ok && routine_param(params, "avx512", 1) != 0;
  }

 private:
  std::string_view type_;
};

template <template <Isa> class P>
class WgSimdRoutine final : public WgSimdBase {
 public:
  using WgSimdBase::WgSimdBase;
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams& params) const override {
    if (avx512(params)) return std::make_unique<P<Isa::avx512>>(info);
    return std::make_unique<P<Isa::avx2>>(info);
  }
};

/// cpu/winograd for wgconv: its U packed once per model (pack), planned per
/// shape over that pack. `avx512` as WgSimdRoutine's; both kernel sets pack
/// U alike (panels of wg::kPackedRows).
class WgSimdConv final : public WgSimdBase {
 public:
  WgSimdConv() : WgSimdBase("wgconv") {}
  std::shared_ptr<const PackedWeights> pack(const PackInfo& info, const Schema&, const RoutineParams& params) const override {
    const Blob& w = info.layer->weight("weight");
    if (w.shape().rank() != 3) throw Error("the weight U is not [P,C,K]", {}, info.layer->name, "weight");
    check_prepare_bytes(info, wg_packed_floats(*info.layer) * sizeof(float), "packed weights");
    const int64_t p = w.shape()[0], c = w.shape()[1], k = w.shape()[2];
    auto out = std::make_shared<WgPack>();
    if constexpr (kX86Kernels) {
      out->u = avx512(params) ? wg::avx512::pack(w.data_as<float>(), p, c, k) : wg::avx2::pack(w.data_as<float>(), p, c, k);
    }
    return out;
  }
  std::shared_ptr<const PackedWeights> unpack(const Blob& bytes, const PackInfo& info, const Schema&,
                                              const RoutineParams&) const override {
    const Shape& s = info.layer->weight("weight").shape();
    if (s.rank() != 3) return nullptr;
    auto data = cpu::load_floats(bytes, wg_packed_floats(*info.layer));
    if (!data) return nullptr;
    auto out = std::make_shared<WgPack>();
    out->u.rows = wg::kPackedRows;
    out->u.panels = (s[2] + wg::kPackedRows - 1) / wg::kPackedRows;
    out->u.data = std::move(*data);
    return out;
  }
  std::unique_ptr<PreparedRoutine> plan(const LayerInfo& info, const Schema&, const RoutineParams& params,
                                        std::shared_ptr<const PackedWeights> packed) const override {
    auto pk = std::dynamic_pointer_cast<const WgPack>(packed);
    if (!pk || pk->u.data.size() != wg_packed_floats(*info.layer))
      throw Error("cpu/winograd: its packed weights do not fit this layer", {}, info.layer->name, "weight");
    if (avx512(params)) return std::make_unique<ConvPrepared<Isa::avx512>>(info, std::move(pk));
    return std::make_unique<ConvPrepared<Isa::avx2>>(info, std::move(pk));
  }
};

// ---------------------------------------------------------------------------
// Blocked layouts: cpu:float32:nchw16c/winograd (AVX-512) and cpu:float32:nchw8c/winograd
// (AVX2), conv2 -> wgencb -> wgconvb -> wgdecb, every value a vector of
// channels (winograd_blocked.hpp), the layer's neighbours stay blocked.

const wg::blocked::Kernels* blocked_kernels(Layout l) {
  return l == Layout::nchw16c ? wg::blocked::kernels_avx512() : wg::blocked::kernels_avx2();
}
const char* blocked_isa(Layout l) { return l == Layout::nchw16c ? "AVX-512 (F, BW, VL, DQ)" : "AVX2 + FMA"; }

template <Layout L>
class WinogradBlockedConv final : public core::ChildnetRoutine {
 public:
  static constexpr Schema kSchema{Device::cpu, DType::float32, L};
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return "winograd"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (!(s == kSchema)) return Support::no(fmt::format("computes in {}", kSchema.to_string()));
    if (!blocked_kernels(L)) return Support::no(fmt::format("{}/winograd needs {}", kSchema.to_string(), blocked_isa(L)));
    if (Support ok = winograd_conv_support(info); !ok) return ok;
    return cpu::check_activation(*info.layer);
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {{"tile", {2, 4, 6}}};
  }
  std::optional<Childnet> childnet(const LayerInfo& info, const Schema&, const RoutineParams& params) const override {
    return winograd_childnet(*info.layer, info, routine_param(params, "tile", 4), "wgencb", "wgconvb", "wgdecb", kSchema);
  }
};
SOFTNEURO_REGISTER_ROUTINE(WinogradBlockedConv<Layout::nchw16c>);
SOFTNEURO_REGISTER_ROUTINE(WinogradBlockedConv<Layout::nchw8c>);

/// wgencb / wgconvb / wgdecb: cpu:float32:nchw16c/winograd (AVX-512) and
/// cpu:float32:nchw8c/winograd (AVX2); the layout decides the kernels.
template <Layout L>
struct BlockedEnc final : PreparedRoutine {
  const wg::blocked::Kernels& k;
  int m;
  wg::Geometry g;
  BlockedEnc(const LayerInfo& info, const wg::blocked::Kernels& kernels)
      : k(kernels), m(static_cast<int>(info.layer->get_int("tile"))), g(geometry(info)) {}
  void run(const RunArgs& a) override {
    k.encode(m, g, a.inputs[0]->data_as<float>(), a.outputs[0]->data_as<float>(), *a.pool, false);
  }
};

/// U [P][C][K] (what `transformed()` returns) packed for kernels `k` and t
/// tiles: the model's, shared by sessions and by shapes of one grouping, and
/// stored with the prepared weights under `key` (the grouping appended).
template <class Transformed>
std::shared_ptr<const wg::blocked::PackedU> packed_u(const LayerInfo& info, const std::string& key,
                                                     const wg::blocked::Kernels& k, int64_t p, int64_t c, int64_t oc,
                                                     int64_t t, Transformed&& transformed) {
  // What pack() makes: K in vectors, C padded to whole vectors, group() vectors at a time.
  const int64_t vec = k.vec, kb = (oc + vec - 1) / vec, cpad = (c + vec - 1) / vec * vec;
  const int nk = k.group(t);
  const std::size_t floats = static_cast<std::size_t>(p * kb * cpad * vec);
  return prepared_weights<wg::blocked::PackedU>(
      info, fmt::format("{}/{}", key, nk),
      [&] {
        const Blob u = transformed();
        return k.pack(u.data_as<float>(), p, c, oc, t);
      },
      [](const wg::blocked::PackedU& pk) { return cpu::save_floats(pk.data); },
      [&](const Blob& bytes) -> std::optional<wg::blocked::PackedU> {
        auto data = cpu::load_floats(bytes, floats);
        if (!data) return std::nullopt;
        wg::blocked::PackedU pk;
        pk.kb = kb;
        pk.cpad = cpad;
        pk.nk = nk;
        pk.data = std::move(*data);
        return pk;
      });
}

template <Layout L>
struct BlockedConv final : PreparedRoutine {
  const wg::blocked::Kernels& k;
  int64_t p, c, t;
  std::shared_ptr<const wg::blocked::PackedU> u;  ///< the model's: shared by sessions and by shapes of one grouping
  BlockedConv(const LayerInfo& info, const wg::blocked::Kernels& kernels)
      : k(kernels), p(info.input_shapes[0][0]), c(info.input_shapes[0][1]), t(info.input_shapes[0][2]) {
    const Blob& w = info.layer->weight("weight");
    u = packed_u(info, "wgb.packed", k, p, c, w.shape()[2], t, [&] { return w; });
  }
  void run(const RunArgs& a) override {
    k.gemm(*u, p, c, t, a.inputs[0]->data_as<float>(), a.outputs[0]->data_as<float>(), *a.pool);
  }
};

template <Layout L>
struct BlockedDec final : PreparedRoutine {
  const wg::blocked::Kernels& k;
  int m;
  wg::Geometry g;
  cpu::gemm::Epilogue ep;
  std::vector<float> bias;  ///< padded to whole vectors
  BlockedDec(const LayerInfo& info, const wg::blocked::Kernels& kernels)
      : k(kernels), m(static_cast<int>(info.layer->get_int("tile"))), g(geometry(info)) {
    cpu::to_epilogue(core::fused_activation(*info.layer), ep);
    if (const Blob* b = info.layer->find_weight("bias")) {
      bias.assign(static_cast<std::size_t>((g.k + k.vec - 1) / k.vec * k.vec), 0.0f);
      std::copy(b->data_as<float>(), b->data_as<float>() + g.k, bias.begin());
    }
  }
  void run(const RunArgs& a) override {
    k.decode(m, g, ep, bias.empty() ? nullptr : bias.data(), a.inputs[0]->data_as<float>(),
             a.outputs[0]->data_as<float>(), *a.pool, false);
  }
};

template <template <Layout> class P, Layout L>
class WgBlockedRoutine final : public Routine {
 public:
  static constexpr Schema kSchema{Device::cpu, DType::float32, L};
  explicit WgBlockedRoutine(std::string_view type) : type_(type) {}
  std::string_view layer_type() const override { return type_; }
  std::string_view algorithm() const override { return "winograd"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (!(s == kSchema)) return Support::no(fmt::format("computes in {}", kSchema.to_string()));
    if (!blocked_kernels(L)) return Support::no(fmt::format("needs {}", blocked_isa(L)));
    if (auto ok = float_cpu(info.layer->find_weight("weight"), "weight"); !ok) return ok;
    if (auto ok = float_cpu(info.layer->find_weight("bias"), "bias"); !ok) return ok;
    return cpu::check_activation(*info.layer);
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams&) const override {
    const wg::blocked::Kernels* k = blocked_kernels(L);
    if (!k) throw Error(fmt::format("{}: the CPU lacks {}", kSchema.to_string(), blocked_isa(L)));
    return std::make_unique<P<L>>(info, *k);
  }

 private:
  std::string_view type_;
};

// ---------------------------------------------------------------------------
// Channels last: cpu:float32:nhwc/winograd, one step running the blocked
// kernels (encode, GEMM, decode) with V and M in its workspace, reading and
// writing NHWC (a last part vector of channels masked). A detector's NHWC path
// reordered 9.8 MB blobs into nchw16c and back around its blocked Winograd.

/// The blocked kernels of the widest ISA here (AVX-512's, else AVX2's), or null.
const wg::blocked::Kernels* widest_blocked_kernels() {
  if (const wg::blocked::Kernels* k = wg::blocked::kernels_avx512()) return k;
  return wg::blocked::kernels_avx2();
}

struct NhwcWinograd final : PreparedRoutine {
  const wg::blocked::Kernels& k;
  int m;
  wg::Geometry enc, dec;
  int64_t p, c, oc, t;
  std::shared_ptr<const wg::blocked::PackedU> u;
  cpu::gemm::Epilogue ep;
  std::vector<float> bias;  ///< padded to whole vectors
  std::size_t v_bytes, m_bytes;

  NhwcWinograd(const LayerInfo& info, const wg::blocked::Kernels& kernels, int tile) : k(kernels), m(tile) {
    const Layer& l = *info.layer;
    const core::Window2d g = core::conv2_window(l, info.input_shapes[0]);
    p = (m + 2) * (m + 2), c = g.c, oc = g.oc;
    enc.c = g.c, enc.h = g.h, enc.w = g.w, enc.pt = g.pt, enc.pl = g.pl;
    enc.t = dec.t = winograd_tiles(m, g.n, g.oh, g.ow);
    dec.k = g.oc;
    t = enc.t.t;
    const int64_t vec = k.vec, kb = (oc + vec - 1) / vec, cpad = (c + vec - 1) / vec * vec;
    u = packed_u(info, fmt::format("wgn.packed/{}/{}", m, vec), k, p, c, oc, t,
                 [&] { return transformed_weights(m, l.weight("weight").data_as<float>(), c, oc); });
    cpu::to_epilogue(core::fused_activation(l), ep);
    if (const Blob* b = l.find_weight("bias")) {
      bias.assign(static_cast<std::size_t>(kb * vec), 0.0f);
      std::copy(b->data_as<float>(), b->data_as<float>() + oc, bias.begin());
    }
    v_bytes = static_cast<std::size_t>(p * cpad * t) * sizeof(float);
    m_bytes = static_cast<std::size_t>(p * kb * vec * t) * sizeof(float);
  }
  std::size_t workspace_bytes() const override { return (v_bytes + 63) / 64 * 64 + m_bytes; }
  void run(const RunArgs& a) override {
    float* v = static_cast<float*>(a.workspace);
    float* mm = v + (v_bytes + 63) / 64 * 64 / sizeof(float);
    k.encode(m, enc, a.inputs[0]->data_as<float>(), v, *a.pool, true);
    k.gemm(*u, p, c, t, v, mm, *a.pool);
    k.decode(m, dec, ep, bias.empty() ? nullptr : bias.data(), mm, a.outputs[0]->data_as<float>(), *a.pool, true);
  }
};

class WinogradNhwcConv final : public Routine {
 public:
  static constexpr Schema kSchema{Device::cpu, DType::float32, Layout::nhwc};
  std::string_view layer_type() const override { return "conv2"; }
  std::string_view algorithm() const override { return "winograd"; }
  std::vector<Schema> schemas() const override { return {kSchema}; }
  Support supports(const LayerInfo& info, const Schema& s) const override {
    if (!(s == kSchema)) return Support::no(fmt::format("computes in {}", kSchema.to_string()));
    const wg::blocked::Kernels* k = widest_blocked_kernels();
    if (!k) return Support::no("needs AVX2 + FMA");
    if (Support ok = winograd_conv_support(info); !ok) return ok;
    return cpu::check_activation(*info.layer);
  }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {{"tile", {2, 4, 6}}};
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema& s, const RoutineParams& params) const override {
    if (Support ok = supports(info, s); !ok) throw Error(fmt::format("{}/winograd: {}", kSchema.to_string(), ok.reason));
    const int64_t m = routine_param(params, "tile", 4);
    if (m != 2 && m != 4 && m != 6) throw Error(fmt::format("tile {} is not one of 2, 4, 6", m), {}, info.layer->name, "routine_params");
    return std::make_unique<NhwcWinograd>(info, *widest_blocked_kernels(), static_cast<int>(m));
  }
};
SOFTNEURO_REGISTER_ROUTINE(WinogradNhwcConv);

struct Registrations {
  Registrations() {
    register_layer_type({"wgenc", 1, 1, infer_wgenc});
    register_layer_type({"wgconv", 1, 1, infer_wgconv});
    register_layer_type({"wgdec", 1, 1, infer_wgdec});
    register_layer_type({"wgencb", 1, 1, infer_wgencb});
    register_layer_type({"wgconvb", 1, 1, infer_wgconvb});
    register_layer_type({"wgdecb", 1, 1, infer_wgdecb});
    // The blocked children's cpu/ref: the plain routines' reference code on 4-d shapes.
    register_routine(std::make_unique<WgRoutine<EncPrepared>>("wgencb"));
    register_routine(std::make_unique<WgRoutine<ConvPrepared>>("wgconvb"));
    register_routine(std::make_unique<WgRoutine<DecPrepared>>("wgdecb"));
    register_routine(std::make_unique<WgBlockedRoutine<BlockedEnc, Layout::nchw16c>>("wgencb"));
    register_routine(std::make_unique<WgBlockedRoutine<BlockedConv, Layout::nchw16c>>("wgconvb"));
    register_routine(std::make_unique<WgBlockedRoutine<BlockedDec, Layout::nchw16c>>("wgdecb"));
    register_routine(std::make_unique<WgBlockedRoutine<BlockedEnc, Layout::nchw8c>>("wgencb"));
    register_routine(std::make_unique<WgBlockedRoutine<BlockedConv, Layout::nchw8c>>("wgconvb"));
    register_routine(std::make_unique<WgBlockedRoutine<BlockedDec, Layout::nchw8c>>("wgdecb"));
    register_routine(std::make_unique<WgRoutine<EncPrepared>>("wgenc"));
    register_routine(std::make_unique<WgSimdRoutine<EncPrepared>>("wgenc"));
    register_routine(std::make_unique<WgRoutine<ConvPrepared>>("wgconv"));
    register_routine(std::make_unique<WgSimdConv>());
    register_routine(std::make_unique<WgRoutine<DecPrepared>>("wgdec"));
    register_routine(std::make_unique<WgSimdRoutine<DecPrepared>>("wgdec"));
    // Names before the family took its file's name.
    register_descriptor_alias("cpu/wg", "cpu/winograd");
    register_descriptor_alias("cpu:float32:nchw16c/wg", "cpu:float32:nchw16c/winograd");
    register_descriptor_alias("cpu:float32:nchw8c/wg", "cpu:float32:nchw8c/winograd");
    register_descriptor_alias("cpu/avx2", "cpu/winograd", {{"avx512", 0}});
    register_descriptor_alias("cpu/avx512", "cpu/winograd", {{"avx512", 1}});
    register_descriptor_alias("cpu:float32:nchw16c/avx512", "cpu:float32:nchw16c/winograd");
    register_descriptor_alias("cpu:float32:nchw8c/avx2", "cpu:float32:nchw8c/winograd");
  }
};
const Registrations registrations;

}  // namespace
}  // namespace softneuro
