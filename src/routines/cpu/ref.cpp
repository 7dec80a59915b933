// cpu/ref — the reference routines: one per layer type, float32, NCHW (the
// default schema). They are the oracle every other routine is tested against,
// so they are written to be obviously correct, never fast: plain loops over the
// conventions of src/core/layer_types.hpp, double accumulation for reductions.
//
// Structure: each layer type has a PreparedRoutine class P with
//   static constexpr std::string_view kType;           the layer type
//   static Support supports(const LayerInfo&);         beyond the schema check
//   explicit P(const LayerInfo&);                      = prepare()
//   void run(const RunArgs&);                          no allocation
// and Ref<P> turns it into the registered Routine. Elementwise types share
// Unary<Op> and Binary<Op>; reshape/flatten/identity share Copy<name>.
#include "routines/gather_table.hpp"
#include "routines/weight_checks.hpp"
#include "routines/cpu/f32_common.hpp"
#include "core/layer_types.hpp"
#include "core/narrow_types.hpp"
#include "core/weight_quant.hpp"

#include <softneuro/routine.hpp>
#include <softneuro/session.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <numbers>
#include <string_view>
#include <type_traits>
#include <vector>

namespace softneuro {
namespace {

using core::Activation;
using core::Window2d;

constexpr int kMaxRank = Shape::max_rank;

// ---------------------------------------------------------------------------
// Helpers

/// Row-major strides of a shape.
void contiguous_strides(const Shape& s, int64_t* strides) {
  int64_t st = 1;
  for (int d = s.rank() - 1; d >= 0; --d) {
    strides[d] = st;
    st *= s[d];
  }
}

int64_t prod(const Shape& s, int begin, int end) {
  int64_t p = 1;
  for (int d = begin; d < end; ++d) p *= s[d];
  return p;
}

Support float_weights(const Layer& l, std::initializer_list<const char*> keys) {
  return routines::float_weights(l, keys, "cpu/ref");
}

/// Maps a linear index over an output shape to offsets into two operands whose
/// shapes broadcast to it (NumPy rules; stride 0 along broadcast dims).
struct Broadcast2 {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t sa[kMaxRank] = {}, sb[kMaxRank] = {};

  Broadcast2() = default;
  Broadcast2(const Shape& out, const Shape& a, const Shape& b) : rank(out.rank()) {
    int64_t ca[kMaxRank], cb[kMaxRank];
    contiguous_strides(a, ca);
    contiguous_strides(b, cb);
    for (int d = 0; d < rank; ++d) {
      dims[d] = out[d];
      int da = d - (rank - a.rank()), db = d - (rank - b.rank());
      sa[d] = (da >= 0 && a[da] != 1) ? ca[da] : 0;
      sb[d] = (db >= 0 && b[db] != 1) ? cb[db] : 0;
    }
  }
  void offsets(int64_t i, int64_t& oa, int64_t& ob) const {
    oa = ob = 0;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t c = i % dims[d];
      i /= dims[d];
      oa += c * sa[d];
      ob += c * sb[d];
    }
  }
};

/// Base of every prepared reference routine: no extra support conditions.
struct RefPrepared : PreparedRoutine {
  static Support supports(const LayerInfo&) { return Support::yes(); }
};

/// The registered Routine for prepared class P.
template <class P>
class Ref final : public Routine {
 public:
  std::string_view layer_type() const override { return P::kType; }
  std::string_view algorithm() const override { return "ref"; }
  Support supports(const LayerInfo& info, const Schema& schema) const override {
    if (!(schema == Schema{}))
      return Support::no(fmt::format("cpu/ref computes in cpu:float32:nchw, not {}", schema.to_string()));
    if (!info.layer) return Support::no("no layer");
    return P::supports(info);
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&,
                                           const RoutineParams&) const override {
    return std::make_unique<P>(info);
  }
};

// ---------------------------------------------------------------------------
// Elementwise: one input, same shape out.

template <class Op>
struct Unary final : RefPrepared {
  static constexpr std::string_view kType = Op::kType;
  Op op;
  int64_t n;
  explicit Unary(const LayerInfo& info) : op(*info.layer), n(info.input_shapes[0].numel()) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = op(x[i]);
    });
  }
};

struct ReluOp {
  static constexpr std::string_view kType = "relu";
  explicit ReluOp(const Layer&) {}
  float operator()(float x) const { return x < 0 ? 0.0f : x; }  // NaN stays NaN
};

struct ClipOp {
  static constexpr std::string_view kType = "clip";
  float lo, hi;
  explicit ClipOp(const Layer& l)
      : lo(static_cast<float>(l.get_float("min", -std::numeric_limits<double>::infinity()))),
        hi(static_cast<float>(l.get_float("max", std::numeric_limits<double>::infinity()))) {}
  float operator()(float x) const { return std::min(std::max(x, lo), hi); }
};

struct HardswishOp {
  static constexpr std::string_view kType = "hardswish";
  explicit HardswishOp(const Layer&) {}
  float operator()(float x) const {
    double r6 = std::min(std::max(double(x) + 3.0, 0.0), 6.0);
    return static_cast<float>(double(x) * r6 / 6.0);
  }
};

struct HardsigmoidOp {
  static constexpr std::string_view kType = "hardsigmoid";
  double alpha, beta;
  explicit HardsigmoidOp(const Layer& l) : alpha(l.get_float("alpha", 0.2)), beta(l.get_float("beta", 0.5)) {}
  float operator()(float x) const {
    return static_cast<float>(std::min(std::max(alpha * double(x) + beta, 0.0), 1.0));
  }
};

struct SigmoidOp {
  static constexpr std::string_view kType = "sigmoid";
  explicit SigmoidOp(const Layer&) {}
  float operator()(float x) const { return static_cast<float>(1.0 / (1.0 + std::exp(-double(x)))); }
};

struct TanhOp {
  static constexpr std::string_view kType = "tanh";
  explicit TanhOp(const Layer&) {}
  float operator()(float x) const { return static_cast<float>(std::tanh(double(x))); }
};

struct GeluOp {
  static constexpr std::string_view kType = "gelu";
  bool tanh_approx;
  explicit GeluOp(const Layer& l) : tanh_approx(l.get_string("approximate", "none") == "tanh") {}
  float operator()(float xf) const {
    double x = xf;
    if (tanh_approx) {
      const double k = std::sqrt(2.0 / std::numbers::pi);
      return static_cast<float>(0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x))));
    }
    return static_cast<float>(0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))));
  }
};

struct AbsOp {
  static constexpr std::string_view kType = "abs";
  explicit AbsOp(const Layer&) {}
  float operator()(float x) const { return std::fabs(x); }
};
struct NegOp {
  static constexpr std::string_view kType = "neg";
  explicit NegOp(const Layer&) {}
  float operator()(float x) const { return -x; }
};
struct SqrtOp {
  static constexpr std::string_view kType = "sqrt";
  explicit SqrtOp(const Layer&) {}
  float operator()(float x) const { return static_cast<float>(std::sqrt(double(x))); }
};
struct ExpOp {
  static constexpr std::string_view kType = "exp";
  explicit ExpOp(const Layer&) {}
  float operator()(float x) const { return static_cast<float>(std::exp(double(x))); }
};
struct LogOp {
  static constexpr std::string_view kType = "log";
  explicit LogOp(const Layer&) {}
  float operator()(float x) const { return static_cast<float>(std::log(double(x))); }
};
struct ErfOp {
  static constexpr std::string_view kType = "erf";
  explicit ErfOp(const Layer&) {}
  float operator()(float x) const { return static_cast<float>(std::erf(double(x))); }
};
struct ReciprocalOp {
  static constexpr std::string_view kType = "reciprocal";
  explicit ReciprocalOp(const Layer&) {}
  float operator()(float x) const { return static_cast<float>(1.0 / double(x)); }
};
struct SiluOp {
  static constexpr std::string_view kType = "silu";
  explicit SiluOp(const Layer&) {}
  float operator()(float x) const { return static_cast<float>(double(x) / (1.0 + std::exp(-double(x)))); }
};
struct MishOp {
  static constexpr std::string_view kType = "mish";
  explicit MishOp(const Layer&) {}
  float operator()(float xf) const {
    const double x = xf, softplus = x > 20 ? x : std::log1p(std::exp(x));
    return static_cast<float>(x * std::tanh(softplus));
  }
};
/// softplus: log(1 + e^x) as max(x, 0) + log1p(e^-|x|), accurate where e^x is tiny.
struct SoftplusOp {
  static constexpr std::string_view kType = "softplus";
  explicit SoftplusOp(const Layer&) {}
  float operator()(float xf) const {
    const double x = xf;
    return static_cast<float>(std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))));
  }
};
struct LeakyReluOp {
  static constexpr std::string_view kType = "leaky_relu";
  double alpha;
  explicit LeakyReluOp(const Layer& l) : alpha(l.get_float("alpha", 0.01)) {}
  float operator()(float x) const { return x < 0 ? static_cast<float>(alpha * double(x)) : x; }
};

// ---------------------------------------------------------------------------
// Elementwise: two inputs, NumPy broadcasting; add's fused activation.

template <class Op>
struct Binary final : RefPrepared {
  static constexpr std::string_view kType = Op::kType;
  Op op;  // built from the layer where it has parameters (compare, logical: results 0 or 1)
  Broadcast2 bc;
  int64_t n;
  Activation act;
  explicit Binary(const LayerInfo& info)
      : op(make_op(*info.layer)),
        bc(info.output_shapes[0], info.input_shapes[0], info.input_shapes[1]),
        n(info.output_shapes[0].numel()),
        act(core::fused_activation(*info.layer)) {}
  static Op make_op(const Layer& l) {
    if constexpr (std::is_constructible_v<Op, const Layer&>) return Op(l);
    else return Op{};
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* y = a.inputs[1]->data_as<float>();
    float* z = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        int64_t ox, oy;
        bc.offsets(i, ox, oy);
        z[i] = core::apply_activation(act, static_cast<float>(op(x[ox], y[oy])));
      }
    });
  }
};

struct AddOp {
  static constexpr std::string_view kType = "add";
  std::optional<core::TfliteAdd> tflite;  // TensorFlow Lite's int8 ADD (requantize = tflite)
  explicit AddOp(const Layer& l) {
    if (core::requantizes_as_tflite(l) && l.has("input_scales")) tflite = core::tflite_add_params(l);
  }
  float operator()(float a, float b) const { return tflite ? tflite->apply(a, b) : a + b; }
};
struct SubOp {
  static constexpr std::string_view kType = "sub";
  float operator()(float a, float b) const { return a - b; }
};
struct MulOp {
  static constexpr std::string_view kType = "mul";
  float operator()(float a, float b) const { return a * b; }
};
struct DivOp {
  static constexpr std::string_view kType = "div";
  float operator()(float a, float b) const { return a / b; }
};
struct MaxOp {  // NaN where either is (numpy.maximum, ONNX Runtime)
  static constexpr std::string_view kType = "max";
  float operator()(float a, float b) const { return a != a || b != b ? a + b : a < b ? b : a; }
};
struct MinOp {
  static constexpr std::string_view kType = "min";
  float operator()(float a, float b) const { return a != a || b != b ? a + b : b < a ? b : a; }
};

struct CompareOp {
  static constexpr std::string_view kType = "compare";
  enum { eq, ne, lt, le, gt, ge } op;
  explicit CompareOp(const Layer& l) {
    const std::string o = l.get_string("op");
    op = o == "equal" ? eq : o == "not_equal" ? ne : o == "less" ? lt : o == "less_equal" ? le : o == "greater" ? gt : ge;
  }
  bool operator()(float a, float b) const {
    switch (op) {
      case eq: return a == b;
      case ne: return a != b;
      case lt: return a < b;
      case le: return a <= b;
      case gt: return a > b;
      default: return a >= b;
    }
  }
};

struct LogicalOp {
  static constexpr std::string_view kType = "logical";
  enum { land, lor, lxor } op;
  explicit LogicalOp(const Layer& l) {
    const std::string o = l.get_string("op");
    op = o == "and" ? land : o == "or" ? lor : lxor;
  }
  bool operator()(float a, float b) const {
    const bool x = a != 0, y = b != 0;
    return op == land ? x && y : op == lor ? x || y : x != y;
  }
};

// divmod and bitwise compute on integers held as floats (the values of
// integer-typed ONNX tensors): exactly, in double and in 64-bit words.
struct DivmodOp {
  static constexpr std::string_view kType = "divmod";
  enum { quotient, mod, fmod } op;
  explicit DivmodOp(const Layer& l) {
    const std::string o = l.get_string("op");
    op = o == "quotient" ? quotient : o == "mod" ? mod : fmod;
  }
  double operator()(float a, float b) const {
    const double x = a, y = b;
    if (op == quotient) return std::trunc(x / y);  // C's integer division: toward zero
    const double r = std::fmod(x, y);
    return op == mod && r != 0 && (r < 0) != (y < 0) ? r + y : r;  // mod: the divisor's sign (Python's %)
  }
};

struct BitwiseOp {
  static constexpr std::string_view kType = "bitwise";
  enum { band, bor, bxor, shl, shr } op;
  uint64_t mask;
  int bits;
  bool is_signed;
  explicit BitwiseOp(const Layer& l) : bits(static_cast<int>(l.get_int("bits"))), is_signed(l.get_int("signed", 0) != 0) {
    const std::string o = l.get_string("op");
    op = o == "and" ? band : o == "or" ? bor : o == "xor" ? bxor : o == "shift_left" ? shl : shr;
    mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  }
  static uint64_t word(float v) {  // two's complement; values are integers (NaN: 0)
    if (!(v == v)) return 0;
    if (v < 0) return static_cast<uint64_t>(static_cast<int64_t>(std::max(v, -9.2233720e18f)));
    return static_cast<uint64_t>(std::min(v, 1.8446743e19f));
  }
  double operator()(float a, float b) const {
    const uint64_t x = word(a) & mask, y = word(b) & mask;
    const int64_t sx = signed_value(x), sy = signed_value(y);
    // A shift by a negative amount or by the width or more saturates (NumPy,
    // ONNX): 0, or all ones where an arithmetic right shift fills with the sign.
    const bool out_of_range = is_signed ? (sy < 0 || sy >= bits) : y >= static_cast<uint64_t>(bits);
    uint64_t r;
    switch (op) {
      case band: r = x & y; break;
      case bor: r = x | y; break;
      case bxor: r = x ^ y; break;
      case shl: r = out_of_range ? 0 : x << y; break;
      default:
        if (out_of_range) r = is_signed && sx < 0 ? ~uint64_t{0} : 0;
        else r = is_signed ? static_cast<uint64_t>(sx >> y) : x >> y;
        break;
    }
    r &= mask;  // wraps as the integer type does
    return is_signed ? static_cast<double>(signed_value(r)) : static_cast<double>(r);
  }
  int64_t signed_value(uint64_t v) const {  // v (within mask) read as the signed type
    return is_signed && (v >> (bits - 1)) & 1 ? static_cast<int64_t>(v | ~mask) : static_cast<int64_t>(v);
  }
};

/// where: condition != 0 ? x : y, the three broadcast.
struct Where final : RefPrepared {
  static constexpr std::string_view kType = "where";
  Broadcast2 cx, cy;  // (condition, x) and (condition, y) offsets into the output's index space
  int64_t n;
  explicit Where(const LayerInfo& info)
      : cx(info.output_shapes[0], info.input_shapes[0], info.input_shapes[1]),
        cy(info.output_shapes[0], info.input_shapes[0], info.input_shapes[2]),
        n(info.output_shapes[0].numel()) {}
  void run(const RunArgs& a) override {
    const float* c = a.inputs[0]->data_as<float>();
    const float* x = a.inputs[1]->data_as<float>();
    const float* y = a.inputs[2]->data_as<float>();
    float* z = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        int64_t oc, ox, oc2, oy;
        cx.offsets(i, oc, ox);
        cy.offsets(i, oc2, oy);
        z[i] = c[oc] != 0 ? x[ox] : y[oy];
      }
    });
  }
};

struct RoundOp {
  static constexpr std::string_view kType = "round";
  enum { even, down, up, toward_zero } mode;
  explicit RoundOp(const Layer& l) {
    const std::string m = l.get_string("mode", "nearest_even");
    mode = m == "floor" ? down : m == "ceil" ? up : m == "trunc" ? toward_zero : even;
  }
  float operator()(float x) const {
    switch (mode) {
      case down: return std::floor(x);
      case up: return std::ceil(x);
      case toward_zero: return std::trunc(x);
      default: return std::nearbyint(x);  // the default rounding mode: half to even
    }
  }
};

/// cast: x as a narrow type holds it (core/narrow_types.hpp), in float32.
struct CastOp {
  static constexpr std::string_view kType = "cast";
  DType to;
  bool saturate;
  core::ScaleRounding rounding;
  explicit CastOp(const Layer& l)
      : to(parse_dtype(l.get_string("to"))), saturate(l.get_int("saturate", 1) != 0),
        rounding(core::parse_scale_rounding(l.get_string("round_mode", "up"))) {}
  float operator()(float x) const { return core::narrowed(to, x, saturate, rounding); }
};

struct TrigOp {
  static constexpr std::string_view kType = "trig";
  double (*f)(double);
  explicit TrigOp(const Layer& l) {
    static const std::pair<const char*, double (*)(double)> ops[] = {
        {"sin", [](double x) { return std::sin(x); }},     {"cos", [](double x) { return std::cos(x); }},
        {"tan", [](double x) { return std::tan(x); }},     {"asin", [](double x) { return std::asin(x); }},
        {"acos", [](double x) { return std::acos(x); }},   {"atan", [](double x) { return std::atan(x); }},
        {"sinh", [](double x) { return std::sinh(x); }},   {"cosh", [](double x) { return std::cosh(x); }},
        {"asinh", [](double x) { return std::asinh(x); }}, {"acosh", [](double x) { return std::acosh(x); }},
        {"atanh", [](double x) { return std::atanh(x); }}};
    const std::string op = l.get_string("op");
    f = nullptr;
    for (const auto& [name, fn] : ops)
      if (op == name) f = fn;
    if (!f) throw Error(fmt::format("trig has no op '{}'", op), {}, l.name, "op");
  }
  float operator()(float x) const { return static_cast<float>(f(x)); }
};

/// einsum: each output element the sum, over the letters the output lacks, of
/// the operands' products (in double); a letter's stride in an operand is the
/// sum of its dims' strides (a diagonal), 0 where the operand broadcasts it.
struct Einsum final : RefPrepared {
  static constexpr std::string_view kType = "einsum";
  std::vector<int64_t> sizes;                // output letters, then summed ones
  std::size_t n_out = 0;                     // how many of them are the output's
  std::vector<std::vector<int64_t>> stride;  // [operand][letter]
  int64_t out_n = 1, sum_n = 1;
  explicit Einsum(const LayerInfo& info) {
    const core::EinsumSpec e = core::einsum_spec(*info.layer, info.input_shapes);
    std::string letters = e.output;
    for (const auto& [c, size] : e.sizes)
      if (letters.find(c) == std::string::npos) letters += c;
    n_out = e.output.size();
    for (std::size_t i = 0; i < letters.size(); ++i) {
      sizes.push_back(e.sizes.at(letters[i]));
      (i < n_out ? out_n : sum_n) *= sizes.back();
    }
    for (std::size_t k = 0; k < e.operands.size(); ++k) {
      const Shape& s = info.input_shapes[k];
      std::vector<int64_t> st(letters.size(), 0);
      int64_t step = 1;
      for (int d = s.rank() - 1; d >= 0; --d) {
        if (s[d] != 1) st[letters.find(e.operands[k][static_cast<std::size_t>(d)])] += step;
        step *= s[d];
      }
      stride.push_back(std::move(st));
    }
  }
  void run(const RunArgs& a) override {
    const std::size_t n_ops = stride.size(), n_letters = sizes.size();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(out_n, 256, [&](int64_t b, int64_t e) {
      std::vector<int64_t> base(n_ops), at(n_ops), idx(n_letters);
      for (int64_t o = b; o < e; ++o) {
        std::fill(base.begin(), base.end(), 0);
        int64_t rest = o;
        for (std::size_t i = n_out; i-- > 0;) {
          const int64_t v = rest % sizes[i];
          rest /= sizes[i];
          for (std::size_t k = 0; k < n_ops; ++k) base[k] += v * stride[k][i];
        }
        std::fill(idx.begin(), idx.end(), 0);
        at = base;
        double acc = 0;
        for (int64_t r = 0; r < sum_n; ++r) {
          double p = 1;
          for (std::size_t k = 0; k < n_ops; ++k) p *= a.inputs[k]->data_as<float>()[at[k]];
          acc += p;
          for (std::size_t i = n_letters; i-- > n_out;) {  // the summed letters' odometer
            for (std::size_t k = 0; k < n_ops; ++k) at[k] += stride[k][i];
            if (++idx[i] < sizes[i]) break;
            for (std::size_t k = 0; k < n_ops; ++k) at[k] -= sizes[i] * stride[k][i];
            idx[i] = 0;
          }
        }
        y[o] = static_cast<float>(acc);
      }
    });
  }
};

/// take: y = x.flat[indices] (the indices checked by shape inference).
struct Take final : RefPrepared {
  static constexpr std::string_view kType = "take";
  const int64_t* idx;
  int64_t n;
  explicit Take(const LayerInfo& info)
      : idx(info.layer->weight("indices").data_as<int64_t>()), n(info.layer->weight("indices").numel()) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = x[idx[i]];
    });
  }
};

using routines::checked_index;

/// gather: data [outer, len, inner] (input 0, or the weight "table":
/// routines::GatherTable) at run-time indices along the axis; each index
/// checked before any value is read.
struct Gather final : RefPrepared {
  static constexpr std::string_view kType = "gather";
  static Support supports(const LayerInfo& info) { return routines::GatherTable::check(info, "cpu/ref"); }
  routines::GatherTable table;
  int64_t outer = 1, len = 1, inner = 1, count;
  std::string name;
  std::vector<int64_t> at;
  explicit Gather(const LayerInfo& info) : table(info), count(info.input_shapes.back().numel()), name(info.layer->name) {
    const Shape& s = table.shape;
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", 0), s.rank());
    for (int d = 0; d < s.rank(); ++d) (d < axis ? outer : d == axis ? len : inner) *= s[d];
    at.resize(static_cast<std::size_t>(count));
  }
  void run(const RunArgs& a) override {
    const Blob* data = a.inputs.size() == 2 ? a.inputs[0] : nullptr;
    const float* idx = a.inputs.back()->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    for (int64_t i = 0; i < count; ++i) at[static_cast<std::size_t>(i)] = checked_index(idx[i], len, name);
    a.pool->parallel_for(outer * count, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, inner)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / count, i = r % count;
        table.copy(data, (o * len + at[static_cast<std::size_t>(i)]) * inner, inner, y + r * inner,
                   routines::dequantize_bytes);
      }
    });
  }
};

/// gather_elements: y[p] = x[p with its axis coordinate replaced by indices[p]].
struct GatherElements final : RefPrepared {
  static constexpr std::string_view kType = "gather_elements";
  Shape xs, is;
  int axis;
  std::string name;
  explicit GatherElements(const LayerInfo& info)
      : xs(info.input_shapes[0]), is(info.input_shapes[1]),
        axis(core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", 0), xs.rank())), name(info.layer->name) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* idx = a.inputs[1]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const int64_t n = is.numel(), len = xs[axis];
    if (n == 0) return;
    // A row (the last dim) at a time: its other coordinates give one offset into x,
    // so each value costs its index's conversion, not a division per dim
    // (a decoder's KV cache gathered so every step: 7.7 ns a value before).
    // The indices are checked there, on every thread (checked first on one, they
    // took most of such a gather's time); a bad one is reported after the loop,
    // before the output is handed back.
    const int r = is.rank();
    std::vector<int64_t> xstride(static_cast<std::size_t>(r), 1);
    for (int d = r - 2; d >= 0; --d) xstride[static_cast<std::size_t>(d)] = xstride[static_cast<std::size_t>(d) + 1] * xs[d + 1];
    const int64_t width = is[r - 1], rows = n / width, axis_stride = xstride[static_cast<std::size_t>(axis)];
    std::atomic<int64_t> bad{n};  // the first bad index's position, or n
    a.pool->parallel_for(rows, std::max<int64_t>(1, 4096 / width), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        const float* ir = idx + row * width;
        bool whole = true, same = true;
        for (int64_t c = 0; c < width; ++c) {
          whole = whole && routines::valid_index(ir[c], len);
          same = same && ir[c] == ir[0];
        }
        if (!whole) {
          for (int64_t at = bad.load(); row * width < at && !bad.compare_exchange_weak(at, row * width);) {
          }
          continue;
        }
        int64_t rest = row, base = 0;  // the row's offset in x, its axis coordinate left out
        for (int d = r - 2; d >= 0; --d) {
          const int64_t c = rest % is[d];
          rest /= is[d];
          if (d != axis) base += c * xstride[static_cast<std::size_t>(d)];
        }
        float* yr = y + row * width;
        if (same && axis != r - 1) {  // one index for the row (a cache's positions, expanded): a copy
          const auto k = static_cast<int64_t>(ir[0]);
          std::memcpy(yr, x + base + (k < 0 ? k + len : k) * axis_stride, sizeof(float) * static_cast<std::size_t>(width));
          continue;
        }
        for (int64_t c = 0; c < width; ++c) {
          const auto k = static_cast<int64_t>(ir[c]);  // (checked: whole, in [-len, len))
          const int64_t src = base + (k < 0 ? k + len : k) * axis_stride + (axis == r - 1 ? 0 : c);
          yr[c] = x[src];
        }
      }
    });
    if (const int64_t at = bad.load(); at < n)
      for (int64_t p = at; p < n; ++p) checked_index(idx[p], len, name);  // (throws at the first bad one)
  }
};

/// gather_nd: for each batch and index tuple, the block of data it names.
struct GatherNd final : RefPrepared {
  static constexpr std::string_view kType = "gather_nd";
  Shape xs;
  int64_t b, k, batch = 1, tuples, block = 1;
  std::string name;
  std::vector<int64_t> at;
  explicit GatherNd(const LayerInfo& info)
      : xs(info.input_shapes[0]), b(info.layer->get_int("batch_dims", 0)),
        k(info.input_shapes[1][info.input_shapes[1].rank() - 1]), name(info.layer->name) {
    for (int d = 0; d < b; ++d) batch *= xs[d];
    for (int d = static_cast<int>(b + k); d < xs.rank(); ++d) block *= xs[d];
    tuples = info.input_shapes[1].numel() / k;
    at.resize(static_cast<std::size_t>(tuples));
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* idx = a.inputs[1]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    if (tuples == 0 || batch == 0) return;  // an empty output
    const int64_t per_batch = tuples / batch;
    int64_t batch_size = 1;  // values of data per batch entry
    for (int d = static_cast<int>(b); d < xs.rank(); ++d) batch_size *= xs[d];
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = (t / per_batch) * batch_size;
      for (int64_t j = 0; j < k; ++j) {
        int64_t stride = block;
        for (int d = static_cast<int>(b + j + 1); d < static_cast<int>(b + k); ++d) stride *= xs[d];
        off += checked_index(idx[t * k + j], xs[static_cast<int>(b + j)], name) * stride;
      }
      at[static_cast<std::size_t>(t)] = off;
    }
    a.pool->parallel_for(tuples, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, block)), [&](int64_t s, int64_t e) {
      for (int64_t t = s; t < e; ++t)
        std::memcpy(y + t * block, x + at[static_cast<std::size_t>(t)], static_cast<std::size_t>(block) * sizeof(float));
    });
  }
};

/// A tensor seen as [outer, len, inner] around one axis (the layer's `axis`, negative from the end).
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
  AxisSplit(const LayerInfo& info, int64_t default_axis) {
    const Shape& s = info.input_shapes[0];
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", default_axis), s.rank());
    for (int d = 0; d < s.rank(); ++d) (d < axis ? outer : d == axis ? len : inner) *= s[d];
  }
};

/// arg_reduce: the index of the first (or last) max or min along one axis.
struct ArgReduce final : RefPrepared {
  static constexpr std::string_view kType = "arg_reduce";
  int64_t outer, len, inner;
  bool is_max, last;
  explicit ArgReduce(const LayerInfo& info)
      : is_max(info.layer->get_string("mode", "max") == "max"), last(info.layer->get_int("select_last_index", 0) != 0) {
    const AxisSplit a(info, 0);
    outer = a.outer, len = a.len, inner = a.inner;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(outer * inner, 1024, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float* row = x + (i / inner) * len * inner + i % inner;
        int64_t best = 0;
        float v = row[0];
        for (int64_t k = 1; k < len; ++k) {
          const float c = row[k * inner];
          if (v != v) break;  // NaN is the extreme: its first index
          const bool better = c != c || (is_max ? (last ? c >= v : c > v) : (last ? c <= v : c < v));
          if (better) best = k, v = c;
        }
        y[i] = static_cast<float>(best);
      }
    });
  }
};

/// pow: x ** y with y broadcast, or x ** exponent (one input).
struct Pow final : RefPrepared {
  static constexpr std::string_view kType = "pow";
  bool two_inputs;
  double exponent;
  Broadcast2 bc;
  int64_t n;
  explicit Pow(const LayerInfo& info)
      : two_inputs(info.input_shapes.size() == 2),
        exponent(two_inputs ? 0.0 : info.layer->get_float("exponent")),
        bc(two_inputs ? Broadcast2(info.output_shapes[0], info.input_shapes[0], info.input_shapes[1]) : Broadcast2()),
        n(info.output_shapes[0].numel()) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* y = two_inputs ? a.inputs[1]->data_as<float>() : nullptr;
    float* z = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (!two_inputs) {
          z[i] = static_cast<float>(std::pow(double(x[i]), exponent));
          continue;
        }
        int64_t ox, oy;
        bc.offsets(i, ox, oy);
        z[i] = static_cast<float>(std::pow(double(x[ox]), double(y[oy])));
      }
    });
  }
};

/// prelu: x < 0 ? slope * x : x, the slope weight broadcast to the input; or
/// TensorFlow Lite's integer PRELU (requantize = tflite, core::TflitePrelu).
struct Prelu final : RefPrepared {
  static constexpr std::string_view kType = "prelu";
  Broadcast2 bc;
  int64_t n;
  const float* slope;
  bool tflite;
  core::TflitePrelu tp;
  std::vector<int32_t> alpha;  // tflite: each slope's integer
  explicit Prelu(const LayerInfo& info)
      : bc(info.input_shapes[0], info.input_shapes[0], info.layer->weight("slope").shape()),
        n(info.input_shapes[0].numel()),
        slope(info.layer->weight("slope").data_as<float>()),
        tflite(core::requantizes_as_tflite(*info.layer)) {
    if (!tflite) return;
    tp = core::tflite_prelu_params(*info.layer);
    const Blob& w = info.layer->weight("slope");
    for (int64_t i = 0; i < w.numel(); ++i) alpha.push_back(tp.alpha_levels(slope[i]));
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        int64_t ox, os;
        bc.offsets(i, ox, os);
        y[i] = tflite ? tp.apply(x[i], alpha[static_cast<std::size_t>(os)]) : x[i] < 0 ? slope[os] * x[i] : x[i];
      }
    });
  }
};

/// reduce: each output element walks its reduced sub-space (double accumulation).
struct Reduce final : RefPrepared {
  static constexpr std::string_view kType = "reduce";
  enum Mode { mean, sum, max, min, l2, prod } mode;
  int kept = 0, red = 0;                        // kept and reduced dims
  int64_t kept_dims[kMaxRank] = {}, kept_strides[kMaxRank] = {};
  int64_t red_dims[kMaxRank] = {}, red_strides[kMaxRank] = {};
  int64_t outputs = 1, count = 1;               // output elements, elements reduced into each
  explicit Reduce(const LayerInfo& info) {
    const std::string m = info.layer->get_string("mode");
    mode = m == "mean" ? mean : m == "sum" ? sum : m == "max" ? max : m == "min" ? min : m == "prod" ? prod : l2;
    const Shape& in = info.input_shapes[0];
    const std::vector<bool> reduced = core::reduced_axes(*info.layer, in);
    int64_t strides[kMaxRank];
    contiguous_strides(in, strides);
    for (int d = 0; d < in.rank(); ++d) {
      if (reduced[static_cast<std::size_t>(d)]) {
        red_dims[red] = in[d];
        red_strides[red++] = strides[d];
        count *= in[d];
      } else {
        kept_dims[kept] = in[d];
        kept_strides[kept++] = strides[d];
        outputs *= in[d];
      }
    }
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(outputs, 64, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        int64_t base = 0;
        for (int64_t d = kept - 1, rest = o; d >= 0; --d) {
          base += rest % kept_dims[d] * kept_strides[d];
          rest /= kept_dims[d];
        }
        double acc = mode == max ? -INFINITY : mode == min ? INFINITY : mode == prod ? 1.0 : 0.0;
        for (int64_t r = 0; r < count; ++r) {
          int64_t off = base;
          for (int64_t d = red - 1, rest = r; d >= 0; --d) {
            off += rest % red_dims[d] * red_strides[d];
            rest /= red_dims[d];
          }
          const double v = x[off];
          // max and min: NaN wins and stays (NumPy, ONNX Runtime)
          if (mode == max) { if (acc == acc && !(v <= acc)) acc = v; }
          else if (mode == min) { if (acc == acc && !(v >= acc)) acc = v; }
          else if (mode == l2) acc += v * v;
          else if (mode == prod) acc *= v;
          else acc += v;
        }
        if (mode == mean) acc = count ? acc / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
        if (mode == l2) acc = std::sqrt(acc);
        y[o] = static_cast<float>(acc);
      }
    });
  }
};

/// cumulative: running sums or products along one axis (exclusive: of the
/// elements before; reverse: from the end), accumulated in double.
struct Cumulative final : RefPrepared {
  static constexpr std::string_view kType = "cumulative";
  int64_t outer, len, inner;
  bool prod, exclusive, reverse;
  explicit Cumulative(const LayerInfo& info)
      : prod(info.layer->get_string("op", "sum") == "prod"),
        exclusive(info.layer->get_int("exclusive", 0) != 0),
        reverse(info.layer->get_int("reverse", 0) != 0) {
    const AxisSplit a(info, 0);
    outer = a.outer, len = a.len, inner = a.inner;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(outer * inner, 64, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t base = (i / inner) * len * inner + i % inner;
        double acc = prod ? 1.0 : 0.0;
        for (int64_t k = 0; k < len; ++k) {
          const int64_t at = base + (reverse ? len - 1 - k : k) * inner;
          const double v = x[at];
          if (!exclusive) acc = prod ? acc * v : acc + v;
          y[at] = static_cast<float>(acc);
          if (exclusive) acc = prod ? acc * v : acc + v;
        }
      }
    });
  }
};

/// top_k: the k largest (or smallest) values along one axis, in order (ties:
/// the lower index first; NaN above every number), and their indices.
struct TopK final : RefPrepared {
  static constexpr std::string_view kType = "top_k";
  int64_t outer, len, inner, k;
  bool largest, at_run;  // at_run: k read from input 1 at every run (value-shaped)
  int axis;
  std::string name;
  explicit TopK(const LayerInfo& info)
      : k(info.layer->get_int("k", 0)), largest(info.layer->get_int("largest", 1) != 0),
        at_run(info.layer->inputs.size() == 2 && info.layer->get_int("k_at_run", 0) != 0), name(info.layer->name) {
    const AxisSplit a(info, -1);
    outer = a.outer, len = a.len, inner = a.inner;
    axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), info.input_shapes[0].rank());
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* values = a.outputs[0]->data_as<float>();
    float* indices = a.outputs[1]->data_as<float>();
    if (at_run) {
      const float kv = a.inputs[1]->data_as<float>()[0];
      if (!(kv >= 0 && kv <= static_cast<float>(len)) || kv != std::floor(kv))
        throw Error(fmt::format("K {} is not one of 0..{}", kv, len), {}, name, "k");
      k = static_cast<int64_t>(kv);
      std::fill(values + outer * k * inner, values + a.outputs[0]->numel(), 0.0f);
      std::fill(indices + outer * k * inner, indices + a.outputs[1]->numel(), 0.0f);
      if (a.output_shapes) {
        Shape s = a.inputs[0]->shape();
        s[axis] = k;
        a.output_shapes[0] = a.output_shapes[1] = s;
      }
    }
    a.pool->parallel_for(outer * inner, 16, [&](int64_t b, int64_t e) {
      std::vector<int64_t> order(static_cast<std::size_t>(len));
      for (int64_t i = b; i < e; ++i) {
        const float* row = x + (i / inner) * len * inner + i % inner;
        std::iota(order.begin(), order.end(), int64_t{0});
        auto before = [&](int64_t p, int64_t q) {
          const float u = row[p * inner], v = row[q * inner];
          if (u != u || v != v) return u != u && v == v;  // NaN first, as the largest (and the smallest) value
          return largest ? u > v : u < v;
        };
        std::stable_sort(order.begin(), order.end(), before);  // stable: ties keep the lower index first
        const int64_t out_base = (i / inner) * k * inner + i % inner;
        for (int64_t j = 0; j < k; ++j) {
          values[out_base + j * inner] = row[order[static_cast<std::size_t>(j)] * inner];
          indices[out_base + j * inner] = static_cast<float>(order[static_cast<std::size_t>(j)]);
        }
      }
    });
  }
};

/// non_max_suppression: per batch and class, greedy selection by falling score
/// (ties: the lower box first) of boxes whose IoU with every kept one is at most
/// the threshold (ONNX Runtime's order and comparisons). Rows (batch, class, box)
/// as floats; value-shaped: the rows kept, then zeros to the capacity.
struct NonMaxSuppression final : RefPrepared {
  static constexpr std::string_view kType = "non_max_suppression";
  int64_t batches, classes, boxes, most;
  bool center, thresholded;
  float iou_threshold, score_threshold;
  explicit NonMaxSuppression(const LayerInfo& info)
      : batches(info.input_shapes[0][0]), classes(info.input_shapes[1][1]), boxes(info.input_shapes[0][1]),
        most(std::min(info.layer->get_int("max_output_boxes_per_class", 0), boxes)),
        center(info.layer->get_int("center_point_box", 0) == 1),
        thresholded(info.layer->params.count("score_threshold") != 0),
        iou_threshold(static_cast<float>(info.layer->get_float("iou_threshold", 0.0))),
        score_threshold(static_cast<float>(info.layer->get_float("score_threshold", 0.0))) {}
  // Candidate order, then the kept boxes' corners (4 floats each).
  std::size_t workspace_bytes() const override {
    return static_cast<std::size_t>(boxes) * (sizeof(int64_t) + 4 * sizeof(float));
  }
  /// Box i's corners (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2.
  void corners(const float* b, float* out) const {
    if (center) {
      const float xc = b[0], yc = b[1], hw = b[2] / 2, hh = b[3] / 2;
      out[0] = yc - hh, out[1] = xc - hw, out[2] = yc + hh, out[3] = xc + hw;
    } else {
      out[0] = std::min(b[0], b[2]), out[1] = std::min(b[1], b[3]), out[2] = std::max(b[0], b[2]), out[3] = std::max(b[1], b[3]);
    }
  }
  bool suppresses(const float* a, const float* b) const {
    const float ih = std::min(a[2], b[2]) - std::max(a[0], b[0]), iw = std::min(a[3], b[3]) - std::max(a[1], b[1]);
    if (ih <= 0 || iw <= 0) return false;
    const float area_a = (a[2] - a[0]) * (a[3] - a[1]), area_b = (b[2] - b[0]) * (b[3] - b[1]);
    if (area_a <= 0 || area_b <= 0) return false;
    const float inter = ih * iw, uni = area_a + area_b - inter;
    if (uni <= 0) return false;
    return inter / uni > iou_threshold;
  }
  void run(const RunArgs& a) override {
    const float* box = a.inputs[0]->data_as<float>();
    const float* score = a.inputs[1]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    auto* order = static_cast<int64_t*>(a.workspace);
    auto* kept = reinterpret_cast<float*>(order + boxes);
    int64_t rows = 0;
    for (int64_t b = 0; b < batches && most > 0; ++b)
      for (int64_t c = 0; c < classes; ++c) {
        const float* sc = score + (b * classes + c) * boxes;
        int64_t candidates = 0;
        for (int64_t i = 0; i < boxes; ++i)
          if (!thresholded || sc[i] > score_threshold) order[candidates++] = i;
        // (NaN scores last: the comparison stays a strict weak order)
        auto key = [&](int64_t i) { return sc[i] != sc[i] ? -std::numeric_limits<float>::infinity() : sc[i]; };
        std::stable_sort(order, order + candidates, [&](int64_t p, int64_t q) { return key(p) > key(q); });
        int64_t n = 0;
        for (int64_t j = 0; j < candidates && n < most; ++j) {
          float mine[4];
          corners(box + (b * boxes + order[j]) * 4, mine);
          bool keep = true;
          for (int64_t k = 0; k < n && keep; ++k) keep = !suppresses(kept + 4 * k, mine);
          if (!keep) continue;
          std::copy(mine, mine + 4, kept + 4 * n++);
          y[3 * rows] = static_cast<float>(b), y[3 * rows + 1] = static_cast<float>(c);
          y[3 * rows + 2] = static_cast<float>(order[j]);
          ++rows;
        }
      }
    std::fill(y + 3 * rows, y + a.outputs[0]->numel(), 0.0f);
    if (a.output_shapes) a.output_shapes[0] = Shape{rows, 3};
  }
};

/// non_zero: the indices of the non-zero elements, row-major, one row per input
/// dim; value-shaped: [rank, count] first, then zeros to the capacity.
struct NonZero final : RefPrepared {
  static constexpr std::string_view kType = "non_zero";
  Shape x;
  explicit NonZero(const LayerInfo& info) : x(info.input_shapes[0].rank() ? info.input_shapes[0] : Shape{1}) {}
  void run(const RunArgs& a) override {
    const float* v = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const int64_t n = x.numel();
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) count += v[i] != 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (v[i] == 0) continue;
      int64_t rest = i;
      for (int d = x.rank() - 1; d >= 0; --d) {
        y[d * count + at] = static_cast<float>(rest % x[d]);
        rest /= x[d];
      }
      ++at;
    }
    std::fill(y + x.rank() * count, y + a.outputs[0]->numel(), 0.0f);
    if (a.output_shapes) a.output_shapes[0] = Shape{x.rank(), count};
  }
};

/// How a scatter combines an update with the value it lands on (ONNX's reduction attribute).
struct ScatterReduction {
  enum Op { none, add, mul, max, min } op = none;
  explicit ScatterReduction(const Layer& l) {
    const std::string r = l.get_string("reduction", "none");
    op = r == "add" ? add : r == "mul" ? mul : r == "max" ? max : r == "min" ? min : none;
  }
  void apply(float& t, float u) const {
    t = op == add ? t + u : op == mul ? t * u : op == max ? std::max(t, u) : op == min ? std::min(t, u) : u;
  }
};

/// scatter_elements: data with each update written (or reduced) at its index
/// along the axis; indices checked as gather's.
struct ScatterElements final : RefPrepared {
  static constexpr std::string_view kType = "scatter_elements";
  Shape data, idx;
  int axis;
  ScatterReduction reduce;
  std::string name;
  explicit ScatterElements(const LayerInfo& info)
      : data(info.input_shapes[0]), idx(info.input_shapes[1]),
        axis(core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", 0), data.rank())),
        reduce(*info.layer), name(info.layer->name) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* ind = a.inputs[1]->data_as<float>();
    const float* upd = a.inputs[2]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    std::copy(x, x + data.numel(), y);
    int64_t ds[kMaxRank];
    contiguous_strides(data, ds);
    for (int64_t i = 0; i < idx.numel(); ++i) {
      int64_t rest = i, at = 0;
      for (int d = idx.rank() - 1; d >= 0; --d) {
        const int64_t c = rest % idx[d];
        rest /= idx[d];
        at += (d == axis ? checked_index(ind[i], data[d], name) : c) * ds[d];
      }
      reduce.apply(y[at], upd[i]);
    }
  }
};

/// scatter_nd: data with each update slice written (or reduced) at its index
/// tuple (ONNX ScatterND; Longformer's chunks, a cache written at run-time
/// positions); every index checked as gather's.
struct ScatterNd final : RefPrepared {
  static constexpr std::string_view kType = "scatter_nd";
  Shape data;
  int64_t tuples, k, slice;
  ScatterReduction reduce;
  std::string name;
  explicit ScatterNd(const LayerInfo& info) : data(info.input_shapes[0]), reduce(*info.layer), name(info.layer->name) {
    const Shape& is = info.input_shapes[1];
    k = is[is.rank() - 1];
    tuples = k ? is.numel() / k : 0;
    slice = 1;
    for (int d = static_cast<int>(k); d < data.rank(); ++d) slice *= data[d];
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* ind = a.inputs[1]->data_as<float>();
    const float* upd = a.inputs[2]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    std::copy(x, x + data.numel(), y);
    int64_t ds[kMaxRank];
    contiguous_strides(data, ds);
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t at = 0;
      for (int64_t j = 0; j < k; ++j) at += checked_index(ind[t * k + j], data[static_cast<int>(j)], name) * ds[j];
      for (int64_t e = 0; e < slice; ++e) reduce.apply(y[at + e], upd[t * slice + e]);
    }
  }
};

/// slice: elements start, start + step, ... along each sliced axis (ONNX Slice).
struct Slice final : RefPrepared {
  static constexpr std::string_view kType = "slice";
  Shape in, out;
  int64_t first[kMaxRank] = {}, step[kMaxRank] = {};
  explicit Slice(const LayerInfo& info) : in(info.input_shapes[0]), out(info.output_shapes[0]) {
    for (int d = 0; d < in.rank(); ++d) step[d] = 1;
    const Layer& l = *info.layer;
    const auto starts = l.get_ints("starts"), ends = l.get_ints("ends"), axes = l.get_ints("axes");
    const auto steps = l.get_ints("steps", std::vector<int64_t>(starts.size(), 1));
    for (std::size_t i = 0; i < starts.size(); ++i) {
      const int a = static_cast<int>(axes[i]);
      first[a] = core::slice_range(starts[i], ends[i], steps[i], in[a]).start;
      step[a] = steps[i];
    }
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    int64_t strides[kMaxRank];
    contiguous_strides(in, strides);
    for (int64_t i = 0; i < out.numel(); ++i) {
      int64_t rest = i, at = 0;
      for (int d = out.rank() - 1; d >= 0; --d) {
        at += (first[d] + (rest % out[d]) * step[d]) * strides[d];
        rest /= out[d];
      }
      y[i] = x[at];
    }
  }
};

/// choose: the chosen input whole; value-shaped (the output holds the larger
/// of the two, the chosen one's elements first).
struct Choose final : RefPrepared {
  static constexpr std::string_view kType = "choose";
  explicit Choose(const LayerInfo&) {}
  void run(const RunArgs& a) override {
    const Blob& pick = *a.inputs[a.inputs[0]->data_as<float>()[0] != 0 ? 1 : 2];
    float* y = a.outputs[0]->data_as<float>();
    std::copy(pick.data_as<float>(), pick.data_as<float>() + pick.numel(), y);
    std::fill(y + pick.numel(), y + a.outputs[0]->numel(), 0.0f);
    if (a.output_shapes) a.output_shapes[0] = pick.shape();
  }
};

/// deform_conv: each tap read bilinearly at its offset position (corners outside
/// the input read 0), times its mask, times the weight.
struct DeformConv final : RefPrepared {
  static constexpr std::string_view kType = "deform_conv";
  Window2d g;
  int64_t offset_groups;
  const float* weight;
  const float* bias = nullptr;
  static Support supports(const LayerInfo& info) { return float_weights(*info.layer, {"weight", "bias"}); }
  explicit DeformConv(const LayerInfo& info)
      : g(core::conv2_window(*info.layer, info.input_shapes[0])),
        offset_groups(info.layer->get_int("offset_group", 1)),
        weight(info.layer->weight("weight").data_as<float>()) {
    if (const Blob* b = info.layer->find_weight("bias")) bias = b->data_as<float>();
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* off = a.inputs[1]->data_as<float>();
    const float* mask = a.inputs.size() > 2 ? a.inputs[2]->data_as<float>() : nullptr;
    float* y = a.outputs[0]->data_as<float>();
    const int64_t taps = g.kh * g.kw, plane = g.oh * g.ow, icg = g.c / g.group, ocg = g.oc / g.group;
    const int64_t per_offset = g.c / offset_groups;
    auto sample = [&](const float* xp, double h, double w) {
      // Wholly outside (NaN and inf offsets too): 0, and no index computed from it.
      if (!(h > -1 && h < static_cast<double>(g.h) && w > -1 && w < static_cast<double>(g.w))) return 0.0;
      const double h0 = std::floor(h), w0 = std::floor(w);
      const double fh = h - h0, fw = w - w0;
      double v = 0;
      for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx) {
          const int64_t r = static_cast<int64_t>(h0) + dy, c = static_cast<int64_t>(w0) + dx;
          if (r < 0 || r >= g.h || c < 0 || c >= g.w) continue;
          v += (dy ? fh : 1 - fh) * (dx ? fw : 1 - fw) * xp[r * g.w + c];
        }
      return v;
    };
    a.pool->parallel_for(g.n * g.oc, 1, [&](int64_t begin, int64_t end) {
      for (int64_t no = begin; no < end; ++no) {
        const int64_t n = no / g.oc, oc = no % g.oc, grp = oc / ocg;
        for (int64_t oh = 0; oh < g.oh; ++oh)
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            double acc = bias ? bias[oc] : 0.0;
            for (int64_t ci = 0; ci < icg; ++ci) {
              const int64_t c = grp * icg + ci, og = c / per_offset;
              const float* xp = x + (n * g.c + c) * g.h * g.w;
              for (int64_t i = 0; i < g.kh; ++i)
                for (int64_t j = 0; j < g.kw; ++j) {
                  const int64_t t = i * g.kw + j;
                  const int64_t at = oh * g.ow + ow;
                  const double dh = off[((n * offset_groups + og) * taps * 2 + 2 * t) * plane + at];
                  const double dw = off[((n * offset_groups + og) * taps * 2 + 2 * t + 1) * plane + at];
                  const double m = mask ? mask[((n * offset_groups + og) * taps + t) * plane + at] : 1.0;
                  const double h = static_cast<double>(oh * g.sh - g.pt + i * g.dh) + dh;
                  const double w = static_cast<double>(ow * g.sw - g.pl + j * g.dw) + dw;
                  acc += weight[((oc * icg + ci) * g.kh + i) * g.kw + j] * m * sample(xp, h, w);
                }
            }
            y[((n * g.oc + oc) * g.oh + oh) * g.ow + ow] = static_cast<float>(acc);
          }
      }
    });
  }
};

/// linear_attention (ONNX LinearAttention): per batch and key/value head, a
/// state S [dk, dv] carried over the tokens, in the spec's order: decayed by
/// exp(g) (gated rules), the value corrected by what S already holds for the key
/// (delta rules: v <- beta (v - Sᵀ k)), then S += k ⊗ v, and each query head of
/// the group reads o = scale qᵀ S. State in float32 as the reference's, dot
/// products summed in double.
struct LinearAttention final : RefPrepared {
  static constexpr std::string_view kType = "linear_attention";
  core::LinearAttentionGeometry g;
  double scale;
  explicit LinearAttention(const LayerInfo& info) : g(core::linear_attention_geometry(*info.layer, info.input_shapes)) {
    const double s = info.layer->get_float("scale", 0.0);
    scale = s == 0 ? 1.0 / std::sqrt(static_cast<double>(g.dk)) : s;
  }
  void run(const RunArgs& a) override {
    const float* q = a.inputs[0]->data_as<float>();
    const float* k = a.inputs[1]->data_as<float>();
    const float* v = a.inputs[2]->data_as<float>();
    std::size_t next = 3;
    const float* past = g.has_past ? a.inputs[next++]->data_as<float>() : nullptr;
    const float* decay = g.gated ? a.inputs[next++]->data_as<float>() : nullptr;
    const float* beta = g.delta ? a.inputs[next++]->data_as<float>() : nullptr;
    float* out = a.outputs[0]->data_as<float>();
    float* state = a.outputs[1]->data_as<float>();
    const int64_t group = g.hq / g.hkv, sd = g.dk * g.dv;
    a.pool->parallel_for(g.b * g.hkv, 1, [&](int64_t begin, int64_t end) {
      std::vector<double> corrected(static_cast<std::size_t>(g.dv));
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / g.hkv, h = bh % g.hkv;
        float* S = state + bh * sd;
        if (past) std::copy(past + bh * sd, past + (bh + 1) * sd, S);
        else std::fill(S, S + sd, 0.0f);
        for (int64_t t = 0; t < g.t; ++t) {
          const int64_t bt = b * g.t + t;
          const float* kt = k + (bt * g.hkv + h) * g.dk;
          const float* vt = v + (bt * g.hkv + h) * g.dv;
          if (decay) {
            for (int64_t d = 0; d < g.dk; ++d) {
              const float e = std::exp(g.decay_per_key ? decay[(bt * g.hkv + h) * g.dk + d] : decay[bt * g.hkv + h]);
              for (int64_t m = 0; m < g.dv; ++m) S[d * g.dv + m] *= e;
            }
          }
          for (int64_t m = 0; m < g.dv; ++m) corrected[static_cast<std::size_t>(m)] = vt[m];
          if (beta) {
            const double bv = g.beta_per_head ? beta[bt * g.hkv + h] : beta[bt];
            for (int64_t m = 0; m < g.dv; ++m) {
              double held = 0;
              for (int64_t d = 0; d < g.dk; ++d) held += static_cast<double>(S[d * g.dv + m]) * kt[d];
              corrected[static_cast<std::size_t>(m)] = bv * (vt[m] - static_cast<float>(held));
            }
          }
          for (int64_t d = 0; d < g.dk; ++d)
            for (int64_t m = 0; m < g.dv; ++m)
              S[d * g.dv + m] += static_cast<float>(kt[d] * static_cast<float>(corrected[static_cast<std::size_t>(m)]));
          for (int64_t gi = 0; gi < group; ++gi) {
            const int64_t hq = h * group + gi;
            const float* qt = q + (bt * g.hq + hq) * g.dk;
            float* ot = out + (bt * g.hq + hq) * g.dv;
            for (int64_t m = 0; m < g.dv; ++m) {
              double acc = 0;
              for (int64_t d = 0; d < g.dk; ++d) acc += static_cast<double>(qt[d]) * S[d * g.dv + m];
              ot[m] = static_cast<float>(scale * acc);
            }
          }
        }
      }
    });
  }
};

/// max_pool_indices: where each max window's first largest value lies in the
/// input (ONNX MaxPool's Indices), taps in the padding skipped.
struct MaxPoolIndices final : RefPrepared {
  static constexpr std::string_view kType = "max_pool_indices";
  Window2d g;
  bool column_major;
  explicit MaxPoolIndices(const LayerInfo& info)
      : g(core::pool2_window(*info.layer, info.input_shapes[0])),
        column_major(info.layer->get_int("storage_order", 0) == 1) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    for (int64_t nc = 0; nc < g.n * g.c; ++nc)
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          int64_t best_h = -1, best_w = -1;
          float best = 0;
          for (int64_t ki = 0; ki < g.kh; ++ki) {
            const int64_t ih = oh * g.sh - g.pt + ki * g.dh;
            if (ih < 0 || ih >= g.h) continue;
            for (int64_t kj = 0; kj < g.kw; ++kj) {
              const int64_t iw = ow * g.sw - g.pl + kj * g.dw;
              if (iw < 0 || iw >= g.w) continue;
              const float v = x[(nc * g.h + ih) * g.w + iw];
              if (best_h < 0 || v > best) best = v, best_h = ih, best_w = iw;
            }
          }
          const int64_t at = best_h < 0 ? 0 : column_major ? best_w * g.h + best_h : best_h * g.w + best_w;
          y[(nc * g.oh + oh) * g.ow + ow] = static_cast<float>(nc * g.h * g.w + at);
        }
  }
};

/// loop: the body, a model of its own (the layer's "body" bytes), run once
/// per iteration in a session of its own: the carried values fed back, each
/// scan output stacked along a new first axis. The body's session plans once
/// (its shapes stay the same from one iteration to the next).
struct Loop final : RefPrepared {
  static constexpr std::string_view kType = "loop";
  /// The most iterations a loop runs: 2^24, fewer where the session's memory
  /// limit divided by the bytes an iteration writes is less. A body whose
  /// condition never turns false is an Error, not a hang.
  static constexpr int64_t kMaxIterations = int64_t{1} << 24;
  int64_t most_iterations = kMaxIterations;
  int body_threads;  // 0: the run's
  const Layer& layer;
  core::LoopPorts ports;
  int64_t trip_count;
  std::size_t memory_limit;
  std::vector<Shape> capacity;  // of the outputs
  Model body;
  std::unique_ptr<Session> session;
  std::vector<NamedBlob> ins, outs;
  /// Each carried value's buffer that is not its body output's: the one the
  /// next iteration reads (the two swap after every iteration).
  std::vector<Blob> spare;
  std::vector<Shape> slices;  // each scan input's slice (planned once: shapes are fixed per prepare)

  explicit Loop(const LayerInfo& info, int64_t threads = 0)
      : body_threads(static_cast<int>(threads)), layer(*info.layer), ports(core::loop_ports(layer, info.input_shapes.size())),
        trip_count(layer.get_int("trip_count", -1)), memory_limit(info.memory_limit), capacity(info.output_shapes),
        body(load(layer)) {
    for (const auto& t : body.inputs())
      if (t.dtype != DType::float32) fail("body", fmt::format("body input '{}' is {}, not float32", t.name, to_string(t.dtype)));
    for (const auto& t : body.outputs())
      if (t.dtype != DType::float32) fail("body", fmt::format("body output '{}' is {}, not float32", t.name, to_string(t.dtype)));
  }
  static Model load(const Layer& l) {
    const Blob& bytes = l.weight("body");
    return Model::load_bytes(bytes.data(), bytes.byte_size(), l.name + "/body");
  }
  [[noreturn]] void fail(const char* field, const std::string& why) const { throw Error(why, {}, layer.name, field); }

  /// The body's session and blobs, made at the first run (its threads: the run's).
  void start(const RunArgs& a) {
    SessionOptions o;
    o.threads = body_threads > 0 ? body_threads : a.pool ? a.pool->num_threads() : 1;
    o.memory_limit = memory_limit ? memory_limit : SessionOptions::kNoMemoryLimit;
    session = std::make_unique<Session>(body, o);
    const auto& bin = body.inputs();
    const auto& bout = body.outputs();
    std::map<std::string, Shape> shapes{{bin[0].name, Shape{}}, {bin[1].name, Shape{}}};
    ins.clear();
    slices.clear();
    ins.push_back({bin[0].name, Blob::allocate(Shape{})});
    ins.push_back({bin[1].name, Blob::allocate(Shape{})});
    for (std::size_t j = 2; j < bin.size(); ++j) {
      Shape s = a.inputs[ports.first_carried + j - 2]->shape();
      if (sliced(j)) s = Shape(std::vector<int64_t>(s.begin() + 1, s.end())), slices.push_back(s);
      shapes[bin[j].name] = s;
      ins.push_back({bin[j].name, Blob{}});
    }
    session->reshape(shapes);
    outs.clear();
    for (const auto& t : bout) outs.push_back({t.name, Blob::allocate(session->output_shape(t.name))});
    spare.clear();
    for (std::size_t j = 0; j < ports.carried; ++j) spare.push_back(Blob::allocate(outs[1 + j].blob.shape()));
    std::size_t per_iteration = 0;
    for (const auto& o : outs) per_iteration += o.blob.byte_size();
    if (memory_limit)
      most_iterations = std::clamp<int64_t>(static_cast<int64_t>(memory_limit / std::max<std::size_t>(1, per_iteration)), 1, kMaxIterations);
  }

  /// Whether body input j (of [iteration, cond, carried..., slices..., read...]) is a slice.
  bool sliced(std::size_t j) const { return j >= 2 + ports.carried && j < 2 + ports.carried + ports.scan_inputs; }

  void run(const RunArgs& a) override {
    if (!session) start(a);
    const std::size_t n = ports.carried;
    for (std::size_t j = 2; j < ins.size(); ++j) {  // carried (at first) and outer values: the layer's inputs, read in place
      const Blob& x = *a.inputs[ports.first_carried + j - 2];
      if (!sliced(j)) ins[j].blob = Blob::view(const_cast<void*>(x.data()), x.shape());
    }
    int64_t trips = trip_count;
    if (ports.trip_count_input) trips = static_cast<int64_t>(std::max(0.0f, a.inputs[1]->data_as<float>()[0]));
    if (ports.scan_inputs) trips = a.inputs[ports.first_carried + n]->shape()[0];
    const int64_t most = trips >= 0 ? std::min(trips, most_iterations) : most_iterations;
    if (ports.scan_outputs && trips > capacity[n][0])
      fail("trip_count", fmt::format("trip count {} beyond the {} planned", trips, capacity[n][0]));
    bool cond = a.inputs[0]->data_as<float>()[0] != 0;
    int64_t i = 0;
    for (; cond && i < most; ++i) {
      ins[0].blob.data_as<float>()[0] = static_cast<float>(i);
      ins[1].blob.data_as<float>()[0] = 1.0f;
      for (std::size_t j = 0; j < ports.scan_inputs; ++j) {  // this iteration's slice, in place
        const Blob& x = *a.inputs[ports.first_carried + n + j];
        ins[2 + n + j].blob = Blob::view(const_cast<float*>(x.data_as<float>()) + i * slices[j].numel(), slices[j]);
      }
      session->run(ins, outs);
      const Blob& c = outs[0].blob;
      if (c.numel() != 1) fail("body", fmt::format("the body's condition has shape {}, not one value", c.shape().to_string()));
      cond = c.data_as<float>()[0] != 0;
      for (std::size_t j = 0; j < ports.scan_outputs; ++j) {
        const Blob& each = outs[1 + n + j].blob;
        Blob& y = *a.outputs[n + j];
        const std::size_t slice = static_cast<std::size_t>(y.numel() / std::max<int64_t>(1, capacity[n + j][0]));
        if (static_cast<std::size_t>(each.numel()) != slice)
          fail("body", fmt::format("scan output {} has shape {} in iteration {}, {} elements planned", j,
                                   each.shape().to_string(), i, slice));
        std::copy_n(each.data_as<float>(), slice, y.data_as<float>() + static_cast<std::size_t>(i) * slice);
      }
      for (std::size_t j = 0; j < n; ++j) {  // the next iteration reads what this one wrote
        Blob& out = outs[1 + j].blob;
        if (out.shape() != ins[2 + j].blob.shape())
          fail("body", fmt::format("loop-carried value {} changes shape from {} to {} in iteration {}", j,
                                   ins[2 + j].blob.shape().to_string(), out.shape().to_string(), i));
        std::swap(out, spare[j]);
        ins[2 + j].blob = spare[j];
      }
    }
    if (cond && i == most && most < trips)
      fail("trip_count", fmt::format("the loop ran {} iterations, the most it may (2^24, or the session's memory_limit "
                                     "divided by the bytes an iteration writes), and its condition still holds", most));
    if (cond && i == most && trips < 0)
      fail("cond", fmt::format("the loop ran {} iterations, the most it may (2^24, or the session's memory_limit "
                               "divided by the bytes an iteration writes), and its condition still holds", most));
    for (std::size_t j = 0; j < n; ++j) {
      const Blob& last = ins[2 + j].blob;
      std::copy_n(last.data_as<float>(), last.numel(), a.outputs[j]->data_as<float>());
    }
    for (std::size_t j = 0; j < ports.scan_outputs; ++j) {
      Blob& y = *a.outputs[n + j];
      const int64_t slice = y.numel() / std::max<int64_t>(1, capacity[n + j][0]);
      std::fill(y.data_as<float>() + i * slice, y.data_as<float>() + y.numel(), 0.0f);
      if (a.output_shapes) {
        Shape s = capacity[n + j];
        s[0] = i;
        a.output_shapes[n + j] = s;
      }
    }
    if (a.output_shapes)
      for (std::size_t j = 0; j < n; ++j) a.output_shapes[j] = capacity[j];
  }
};

/// col2im: each column value added into the image where its block element lands.
struct Col2Im final : RefPrepared {
  static constexpr std::string_view kType = "col2im";
  std::vector<int64_t> image, block, dil, stride, pads, pos;
  int64_t batch, channels, positions;
  explicit Col2Im(const LayerInfo& info) {
    const Layer& l = *info.layer;
    image = l.get_ints("image_shape"), block = l.get_ints("block_shape");
    const std::size_t r = image.size();
    dil = l.get_ints("dilations", std::vector<int64_t>(r, 1));
    stride = l.get_ints("strides", std::vector<int64_t>(r, 1));
    pads = l.get_ints("pads", std::vector<int64_t>(2 * r, 0));
    pos = core::col2im_positions(l, r);
    batch = info.input_shapes[0][0];
    channels = info.output_shapes[0][1];
    positions = info.input_shapes[0][2];
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    std::fill(y, y + a.outputs[0]->numel(), 0.0f);
    const std::size_t r = image.size();
    int64_t blocks = 1, pixels = 1;
    for (std::size_t d = 0; d < r; ++d) blocks *= block[d], pixels *= image[d];
    for (int64_t b = 0; b < batch * channels; ++b)
      for (int64_t k = 0; k < blocks; ++k)
        for (int64_t p = 0; p < positions; ++p) {
          int64_t kr = k, pr = p, at = 0;
          bool inside = true;
          for (std::size_t d = r; d-- > 0;) {  // the last spatial dim varies fastest
            const int64_t kd = kr % block[d], pd = pr % pos[d];
            kr /= block[d], pr /= pos[d];
            const int64_t o = pd * stride[d] - pads[d] + kd * dil[d];
            inside = inside && o >= 0 && o < image[d];
            int64_t scale = 1;
            for (std::size_t e = d + 1; e < r; ++e) scale *= image[e];
            at += o * scale;
          }
          if (inside) y[b * pixels + at] += x[(b * blocks + k) * positions + p];
        }
  }
};

/// dft: a direct (O(n * length)) discrete Fourier transform along one axis, in
/// double, per line of the signal.
struct Dft final : RefPrepared {
  static constexpr std::string_view kType = "dft";
  Shape in, out;
  int axis;
  int64_t n;
  bool inverse, onesided;
  explicit Dft(const LayerInfo& info) : in(info.input_shapes[0]), out(info.output_shapes[0]) {
    const Layer& l = *info.layer;
    axis = core::normalize_axis(l, "axis", l.get_int("axis"), in.rank());
    n = l.get_int("length", in[axis]);
    inverse = l.get_int("inverse", 0) != 0;
    onesided = l.get_int("onesided", 0) != 0;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const int r = in.rank();
    const int64_t ci = in[r - 1], co = out[r - 1];
    int64_t before = 1, after = 1;  // the lines: dims before the axis, and between it and the last
    for (int d = 0; d < axis; ++d) before *= in[d];
    for (int d = axis + 1; d < r - 1; ++d) after *= in[d];
    const int64_t m = in[axis], k_out = out[axis];
    const double tau = 2 * std::numbers::pi;
    a.pool->parallel_for(before * after, 1, [&](int64_t b, int64_t e) {
      for (int64_t line = b; line < e; ++line) {
        const int64_t o = line / after, i = line % after;
        auto re = [&](int64_t t) { return t < m ? static_cast<double>(x[((o * m + t) * after + i) * ci]) : 0.0; };
        auto im = [&](int64_t t) { return t < m && ci == 2 ? static_cast<double>(x[((o * m + t) * after + i) * ci + 1]) : 0.0; };
        for (int64_t k = 0; k < k_out; ++k) {
          double sr = 0, si = 0;
          if (inverse && onesided) {  // numpy's irfft: the Hermitian spectrum from its first n/2 + 1 values
            const int64_t half = n / 2;
            for (int64_t f = 0; f <= half; ++f) {
              const double w = (f == 0 || (n % 2 == 0 && f == half)) ? 1.0 : 2.0;
              const double ang = tau * static_cast<double>(f * k % n) / static_cast<double>(n);
              sr += w * (re(f) * std::cos(ang) - (f == 0 || (n % 2 == 0 && f == half) ? 0.0 : im(f)) * std::sin(ang));
            }
            y[((o * k_out + k) * after + i) * co] = static_cast<float>(sr / static_cast<double>(n));
            continue;
          }
          const int64_t len = std::min(m, n);
          for (int64_t t = 0; t < len; ++t) {
            const double ang = (inverse ? tau : -tau) * static_cast<double>(k * t % n) / static_cast<double>(n);
            const double c = std::cos(ang), sn = std::sin(ang);
            sr += re(t) * c - im(t) * sn;
            si += re(t) * sn + im(t) * c;
          }
          const double scale = inverse ? 1.0 / static_cast<double>(n) : 1.0;
          y[((o * k_out + k) * after + i) * co] = static_cast<float>(sr * scale);
          y[((o * k_out + k) * after + i) * co + 1] = static_cast<float>(si * scale);
        }
      }
    });
  }
};

/// unique: the distinct elements (or slices along the axis), sorted or in order
/// of first occurrence, with first indices, each one's place and the counts.
/// Value-shaped: every output written packed at its actual shape.
struct Unique final : RefPrepared {
  static constexpr std::string_view kType = "unique";
  int64_t outer = 1, len, inner = 1;  // slices: len of them, each outer x inner values
  bool sorted;
  Shape x;
  int axis;  // -1: the flattened input
  explicit Unique(const LayerInfo& info) : sorted(info.layer->get_int("sorted", 1) != 0), x(info.input_shapes[0]) {
    axis = info.layer->has("axis") ? core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis"), x.rank()) : -1;
    len = axis < 0 ? x.numel() : x[axis];
    for (int d = 0; axis >= 0 && d < x.rank(); ++d) {
      if (d < axis) outer *= x[d];
      if (d > axis) inner *= x[d];
    }
  }
  // Scratch: the slices' order and their first indices.
  std::size_t workspace_bytes() const override { return static_cast<std::size_t>(len) * 3 * sizeof(int64_t); }
  void run(const RunArgs& a) override {
    const float* v = a.inputs[0]->data_as<float>();
    auto at = [&](int64_t slice, int64_t k) { return v[((k / inner) * len + slice) * inner + k % inner]; };
    const int64_t width = outer * inner;
    auto less = [&](int64_t p, int64_t q) {  // NaN above every number and equal to NaN: a total order
      for (int64_t k = 0; k < width; ++k) {
        const float u = at(p, k), w = at(q, k);
        const bool un = u != u, wn = w != w;
        if (un || wn) {
          if (un != wn) return wn;
          continue;
        }
        if (u != w) return u < w;
      }
      return false;
    };
    auto same = [&](int64_t p, int64_t q) { return !less(p, q) && !less(q, p); };
    auto* order = static_cast<int64_t*>(a.workspace);
    int64_t* first = order + len;  // per distinct one, in output order
    int64_t* place = first + len;  // per slice: its distinct one
    std::iota(order, order + len, int64_t{0});
    std::stable_sort(order, order + len, less);  // equal slices keep their order: the first comes first
    int64_t distinct = 0;
    for (int64_t i = 0; i < len; ++i) {
      if (i == 0 || !same(order[i - 1], order[i])) first[distinct++] = order[i];
      place[order[i]] = distinct - 1;
    }
    if (!sorted) {  // by first occurrence: renumber
      std::vector<int64_t> by_first(first, first + distinct);
      std::sort(by_first.begin(), by_first.end());
      for (int64_t s = 0; s < len; ++s)
        place[s] = std::lower_bound(by_first.begin(), by_first.end(), first[place[s]]) - by_first.begin();
      std::copy(by_first.begin(), by_first.end(), first);
    }
    float* y = a.outputs[0]->data_as<float>();
    float* idx = a.outputs[1]->data_as<float>();
    float* inv = a.outputs[2]->data_as<float>();
    float* cnt = a.outputs[3]->data_as<float>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t u = 0; u < distinct; ++u)
        for (int64_t i = 0; i < inner; ++i) y[(o * distinct + u) * inner + i] = v[(o * len + first[u]) * inner + i];
    std::fill(y + outer * distinct * inner, y + a.outputs[0]->numel(), 0.0f);
    std::fill(cnt, cnt + len, 0.0f);
    for (int64_t u = 0; u < distinct; ++u) idx[u] = static_cast<float>(first[u]);
    std::fill(idx + distinct, idx + len, 0.0f);
    for (int64_t s = 0; s < len; ++s) {
      inv[s] = static_cast<float>(place[s]);
      cnt[place[s]] += 1;
    }
    if (a.output_shapes) {
      Shape ys = axis < 0 ? Shape{distinct} : x;
      if (axis >= 0) ys[axis] = distinct;
      a.output_shapes[0] = ys;
      a.output_shapes[1] = a.output_shapes[3] = Shape{distinct};
      a.output_shapes[2] = Shape{len};
    }
  }
};

/// roi_align: each output bin the average (or the largest) of bilinear samples
/// on a grid within it, as ONNX Runtime computes them (a sample more than one
/// pixel outside the input reads 0; max mode takes the largest weighted corner).
struct RoiAlign final : RefPrepared {
  static constexpr std::string_view kType = "roi_align";
  int64_t n, c, h, w, rois, oh, ow, ratio;
  float scale;
  bool max_mode, half_pixel;
  std::string name;
  explicit RoiAlign(const LayerInfo& info)
      : n(info.input_shapes[0][0]), c(info.input_shapes[0][1]), h(info.input_shapes[0][2]), w(info.input_shapes[0][3]),
        rois(info.input_shapes[1][0]), oh(info.layer->get_int("output_height", 1)), ow(info.layer->get_int("output_width", 1)),
        ratio(info.layer->get_int("sampling_ratio", 0)), scale(static_cast<float>(info.layer->get_float("spatial_scale", 1.0))),
        max_mode(info.layer->get_string("mode", "avg") == "max"),
        half_pixel(info.layer->get_string("coordinate_transformation_mode", "half_pixel") == "half_pixel"),
        name(info.layer->name) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* roi = a.inputs[1]->data_as<float>();
    const float* batch = a.inputs[2]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    for (int64_t r = 0; r < rois; ++r)
      if (!(batch[r] >= 0 && batch[r] < static_cast<float>(n)) || batch[r] != std::floor(batch[r]))
        throw Error(fmt::format("batch index {} of roi {} is not one of 0..{}", batch[r], r, n - 1), {}, name, "batch_indices");
    if (h == 0 || w == 0) {  // an empty image: every sample reads 0
      std::fill(y, y + a.outputs[0]->numel(), 0.0f);
      return;
    }
    a.pool->parallel_for(rois * c, 1, [&](int64_t b, int64_t e) {
      for (int64_t rc = b; rc < e; ++rc) {
        const int64_t r = rc / c, ch = rc % c;
        const float* plane = x + (static_cast<int64_t>(batch[r]) * c + ch) * h * w;
        const float offset = half_pixel ? 0.5f : 0.0f;
        const float* q = roi + 4 * r;
        const float x0 = q[0] * scale - offset, y0 = q[1] * scale - offset;
        const float x1 = q[2] * scale - offset, y1 = q[3] * scale - offset;
        float rw = x1 - x0, rh = y1 - y0;
        if (!half_pixel) rw = std::max(rw, 1.0f), rh = std::max(rh, 1.0f);
        const float bh = rh / static_cast<float>(oh), bw = rw / static_cast<float>(ow);
        const int64_t gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / static_cast<float>(oh)));
        const int64_t gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / static_cast<float>(ow)));
        const float count = static_cast<float>(std::max<int64_t>(gh * gw, 1));
        for (int64_t ph = 0; ph < oh; ++ph)
          for (int64_t pw = 0; pw < ow; ++pw) {
            float acc = 0;
            bool first = true;
            for (int64_t iy = 0; iy < gh; ++iy)
              for (int64_t ix = 0; ix < gw; ++ix) {
                float sy = y0 + static_cast<float>(ph) * bh + (static_cast<float>(iy) + 0.5f) * bh / static_cast<float>(gh);
                float sx = x0 + static_cast<float>(pw) * bw + (static_cast<float>(ix) + 0.5f) * bw / static_cast<float>(gw);
                float v1 = 0, v2 = 0, v3 = 0, v4 = 0, w1 = 0, w2 = 0, w3 = 0, w4 = 0;
                if (!(sy < -1.0f || sy > static_cast<float>(h) || sx < -1.0f || sx > static_cast<float>(w))) {
                  sy = std::max(sy, 0.0f), sx = std::max(sx, 0.0f);
                  int64_t ylo = static_cast<int64_t>(sy), xlo = static_cast<int64_t>(sx), yhi, xhi;
                  if (ylo >= h - 1) yhi = ylo = h - 1, sy = static_cast<float>(ylo); else yhi = ylo + 1;
                  if (xlo >= w - 1) xhi = xlo = w - 1, sx = static_cast<float>(xlo); else xhi = xlo + 1;
                  const float ly = sy - static_cast<float>(ylo), lx = sx - static_cast<float>(xlo), hy = 1 - ly, hx = 1 - lx;
                  w1 = hy * hx, w2 = hy * lx, w3 = ly * hx, w4 = ly * lx;
                  v1 = plane[ylo * w + xlo], v2 = plane[ylo * w + xhi], v3 = plane[yhi * w + xlo], v4 = plane[yhi * w + xhi];
                }
                if (max_mode) {
                  const float m = std::max(std::max(std::max(w1 * v1, w2 * v2), w3 * v3), w4 * v4);
                  acc = first ? m : std::max(acc, m);
                } else {
                  acc += w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4;
                }
                first = false;
              }
            y[(rc * oh + ph) * ow + pw] = max_mode ? acc : acc / count;
          }
      }
    });
  }
};

/// grid_sample: each output point reads the input at a grid position
/// (normalised to [-1, 1], x first), nearest, linear or cubic (Keys, a = -0.75)
/// per spatial dim; taps outside read 0, the border, or the reflection (ONNX's reference).
struct GridSample final : RefPrepared {
  static constexpr std::string_view kType = "grid_sample";
  enum Mode { nearest, linear, cubic } mode;
  enum Pad { zeros, border, reflection } pad;
  bool align;
  int r;
  int64_t n, c, in_dims[3] = {1, 1, 1}, out_points = 1, in_points = 1;
  explicit GridSample(const LayerInfo& info) {
    const Layer& l = *info.layer;
    const std::string m = l.get_string("mode", "linear"), p = l.get_string("padding_mode", "zeros");
    mode = m == "nearest" ? nearest : m == "cubic" ? cubic : linear;
    pad = p == "border" ? border : p == "reflection" ? reflection : zeros;
    align = l.get_int("align_corners", 0) != 0;
    const Shape& x = info.input_shapes[0];
    r = x.rank() - 2;
    n = x[0];
    c = x[1];
    for (int d = 0; d < r; ++d) in_dims[d] = x[d + 2], in_points *= x[d + 2];
    const Shape& y = info.output_shapes[0];
    for (int d = 2; d < y.rank(); ++d) out_points *= y[d];
  }
  double lo(int) const { return align ? 0.0 : -0.5; }
  double hi(int d) const { return align ? double(in_dims[d] - 1) : double(in_dims[d]) - 0.5; }
  double reflect(double v, int d) const {
    const double a = lo(d), b = hi(d), range = b - a;
    if (range <= 0) return a;
    if (v < a) {
      const double dx = a - v;
      const auto k = static_cast<int64_t>(dx / range);
      const double rest = dx - double(k) * range;
      return k % 2 == 0 ? a + rest : b - rest;
    }
    if (v > b) {
      const double dx = v - b;
      const auto k = static_cast<int64_t>(dx / range);
      const double rest = dx - double(k) * range;
      return k % 2 == 0 ? b - rest : a + rest;
    }
    return v;
  }
  /// Index i of dim d as read under the padding mode; -1: a zero.
  int64_t tap(int64_t i, int d) const {
    if (pad == zeros) return i >= 0 && i < in_dims[d] ? i : -1;
    if (pad == border) return std::clamp<int64_t>(i, 0, in_dims[d] - 1);
    return std::clamp<int64_t>(static_cast<int64_t>(reflect(double(i), d)), 0, in_dims[d] - 1);
  }
  static void keys(double t, double w[4]) {
    const double A = -0.75, d[4] = {t + 1, t, 1 - t, 2 - t};
    for (int k = 0; k < 4; ++k) {
      const double x = d[k];
      w[k] = x <= 1 ? ((A + 2) * x - (A + 3)) * x * x + 1 : ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    }
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* grid = a.inputs[1]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n * out_points, 64, [&](int64_t b, int64_t e) {
      for (int64_t q = b; q < e; ++q) {
        const int64_t batch = q / out_points, point = q % out_points;
        const float* g = grid + q * r;
        // Per spatial dim (outermost first): taps and weights.
        int64_t idx[3][4];
        double w[3][4];
        int taps = mode == nearest ? 1 : mode == linear ? 2 : 4;
        for (int d = 0; d < r; ++d) {
          const double norm = g[r - 1 - d];  // the grid lists x (the last dim) first
          const double len = double(in_dims[d]);
          double v = align ? (norm + 1) / 2 * (len - 1) : ((norm + 1) * len - 1) / 2;
          if (mode == nearest) v = std::nearbyint(v);
          if (v < lo(d) || v > hi(d)) {
            if (pad == border) v = std::clamp(v, 0.0, len - 1);
            else if (pad == reflection) v = reflect(v, d);
          }
          if (!std::isfinite(v)) v = 0;
          if (mode == nearest) {
            idx[d][0] = tap(static_cast<int64_t>(v), d);
            w[d][0] = 1;
          } else {
            const double f = std::floor(v), t = v - f;
            const auto i0 = static_cast<int64_t>(f);
            if (mode == linear) {
              idx[d][0] = tap(i0, d), idx[d][1] = tap(i0 + 1, d);
              w[d][0] = 1 - t, w[d][1] = t;
            } else {
              keys(t, w[d]);
              for (int k = 0; k < 4; ++k) idx[d][k] = tap(i0 - 1 + k, d);
            }
          }
        }
        int combos = 1;
        for (int d = 0; d < r; ++d) combos *= taps;
        for (int64_t ch = 0; ch < c; ++ch) {
          const float* plane = x + (batch * c + ch) * in_points;
          double acc = 0;
          for (int k = 0; k < combos; ++k) {
            int64_t off = 0;
            double weight = 1;
            bool zero = false;
            for (int d = 0, rest = k; d < r; ++d, rest /= taps) {
              const int t = rest % taps;
              const int64_t i = idx[d][t];
              if (i < 0) zero = true;
              off = off * in_dims[d] + std::max<int64_t>(i, 0);
              weight *= w[d][t];
            }
            if (!zero) acc += weight * plane[off];
          }
          y[(batch * c + ch) * out_points + point] = static_cast<float>(acc);
        }
      }
    });
  }
};

// ---------------------------------------------------------------------------
// Copies: reshape, flatten, identity (same elements, same order).

template <std::size_t N>
struct FixedString {
  char s[N];
  constexpr FixedString(const char (&str)[N]) { std::copy_n(str, N, s); }
  constexpr operator std::string_view() const { return {s, N - 1}; }
};

template <FixedString Name>
struct Copy final : RefPrepared {
  static constexpr std::string_view kType = Name;
  std::size_t bytes;
  explicit Copy(const LayerInfo& info)
      : bytes(static_cast<std::size_t>(info.input_shapes[0].numel()) * sizeof(float)) {}
  void run(const RunArgs& a) override {
    const void* x = a.inputs[0]->data();
    void* y = a.outputs[0]->data();
    if (x != y && bytes) std::memmove(y, x, bytes);
  }
};

// ---------------------------------------------------------------------------
// constant: out = weight "value".

struct Constant final : RefPrepared {
  static constexpr std::string_view kType = "constant";
  Blob value;
  static Support supports(const LayerInfo& info) {
    if (!info.layer->find_weight("value")) return Support::no("constant has no weight 'value'");
    return float_weights(*info.layer, {"value"});
  }
  explicit Constant(const LayerInfo& info) : value(info.layer->weight("value")) {}
  void run(const RunArgs& a) override {
    std::size_t bytes = static_cast<std::size_t>(value.numel()) * sizeof(float);
    if (bytes) std::memcpy(a.outputs[0]->data(), value.data(), bytes);
  }
};

// ---------------------------------------------------------------------------
// conv2: direct convolution with groups, strides, pads, dilations, bias, fused activation.

struct Conv2 final : RefPrepared {
  static constexpr std::string_view kType = "conv2";
  Window2d g;
  Activation act;
  Blob weight, bias;  // bias empty when absent
  static Support supports(const LayerInfo& info) { return float_weights(*info.layer, {"weight", "bias"}); }
  explicit Conv2(const LayerInfo& info)
      : g(core::conv2_window(*info.layer, info.input_shapes[0])),
        act(core::fused_activation(*info.layer, true)),
        weight(info.layer->weight("weight")) {
    if (const Blob* b = info.layer->find_weight("bias")) bias = *b;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* w = weight.data_as<float>();
    const float* bs = bias.data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const int64_t icg = g.c / g.group, ocg = g.oc / g.group;
    a.pool->parallel_for(g.n * g.oc, 1, [&](int64_t begin, int64_t end) {
      for (int64_t no = begin; no < end; ++no) {
        const int64_t n = no / g.oc, oc = no % g.oc, grp = oc / ocg;
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            double acc = bs ? bs[oc] : 0.0;
            for (int64_t ic = 0; ic < icg; ++ic) {
              const int64_t c = grp * icg + ic;
              for (int64_t ki = 0; ki < g.kh; ++ki) {
                const int64_t ih = oh * g.sh - g.pt + ki * g.dh;
                if (ih < 0 || ih >= g.h) continue;
                for (int64_t kj = 0; kj < g.kw; ++kj) {
                  const int64_t iw = ow * g.sw - g.pl + kj * g.dw;
                  if (iw < 0 || iw >= g.w) continue;
                  acc += double(x[((n * g.c + c) * g.h + ih) * g.w + iw]) *
                         double(w[((oc * icg + ic) * g.kh + ki) * g.kw + kj]);
                }
              }
            }
            y[((n * g.oc + oc) * g.oh + oh) * g.ow + ow] = core::apply_activation(act, static_cast<float>(acc));
          }
        }
      }
    });
  }
};

// ---------------------------------------------------------------------------
// deconv2: each output pixel gathers the input pixels whose kernel taps land on
// it, y[n,o,i,j] = b[o] + sum x[n,c,ih,iw] * W[c,o%ocg,ki,kj] over
// i = ih*sh - pt + ki*dh, j = iw*sw - pl + kj*dw, c in o's group.

struct Deconv2 final : RefPrepared {
  static constexpr std::string_view kType = "deconv2";
  core::Deconv2Window g;
  Activation act;
  Blob weight, bias;  // bias empty when absent
  static Support supports(const LayerInfo& info) { return float_weights(*info.layer, {"weight", "bias"}); }
  explicit Deconv2(const LayerInfo& info)
      : g(core::deconv2_window(*info.layer, info.input_shapes[0])),
        act(core::fused_activation(*info.layer)),
        weight(info.layer->weight("weight")) {
    if (const Blob* b = info.layer->find_weight("bias")) bias = *b;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* w = weight.data_as<float>();
    const float* bs = bias.data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const int64_t icg = g.c / g.group, ocg = g.oc / g.group;
    a.pool->parallel_for(g.n * g.oc, 1, [&](int64_t begin, int64_t end) {
      for (int64_t no = begin; no < end; ++no) {
        const int64_t n = no / g.oc, oc = no % g.oc, grp = oc / ocg, o = oc % ocg;
        for (int64_t oh = 0; oh < g.oh; ++oh)
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            double acc = bs ? bs[oc] : 0.0;
            for (int64_t ki = 0; ki < g.kh; ++ki) {
              const int64_t th = oh + g.pt - ki * g.dh;  // = ih * sh
              if (th < 0 || th % g.sh) continue;
              const int64_t ih = th / g.sh;
              if (ih >= g.h) continue;
              for (int64_t kj = 0; kj < g.kw; ++kj) {
                const int64_t tw = ow + g.pl - kj * g.dw;
                if (tw < 0 || tw % g.sw) continue;
                const int64_t iw = tw / g.sw;
                if (iw >= g.w) continue;
                for (int64_t ic = 0; ic < icg; ++ic) {
                  const int64_t c = grp * icg + ic;
                  acc += double(x[((n * g.c + c) * g.h + ih) * g.w + iw]) *
                         double(w[((c * ocg + o) * g.kh + ki) * g.kw + kj]);
                }
              }
            }
            y[((n * g.oc + oc) * g.oh + oh) * g.ow + ow] = core::apply_activation(act, static_cast<float>(acc));
          }
      }
    });
  }
};

// ---------------------------------------------------------------------------
// dense: y[..., o] = sum_k x[..., k] * W[o, k] + b[o], then the fused activation.

struct Dense final : RefPrepared {
  static constexpr std::string_view kType = "dense";
  int64_t rows, k, o;
  Activation act;
  Blob weight, bias;
  static Support supports(const LayerInfo& info) { return float_weights(*info.layer, {"weight", "bias"}); }
  explicit Dense(const LayerInfo& info)
      : act(core::fused_activation(*info.layer, true, true)), weight(info.layer->weight("weight")) {
    const Shape& s = info.input_shapes[0];
    rows = prod(s, 0, s.rank() - 1);
    k = s[s.rank() - 1];
    o = weight.shape()[0];
    if (const Blob* b = info.layer->find_weight("bias")) bias = *b;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* w = weight.data_as<float>();
    const float* bs = bias.data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t j = 0; j < o; ++j) {
          double acc = bs ? bs[j] : 0.0;
          for (int64_t i = 0; i < k; ++i) acc += double(x[r * k + i]) * double(w[j * k + i]);
          y[r * o + j] = core::apply_activation(act, static_cast<float>(acc));
        }
    });
  }
};

// dynamic_quant_dense: DynamicQuantizeLinear over the whole input, the
// integers' products summed exactly, y = act(float(sum) * (s * s_w) + bias) (one
// rounding, as the int8 routines' fused multiply-add); an input holding NaN
// or infinity has no scale to quantise by: every output NaN.

struct DynamicQuantDense final : RefPrepared {
  static constexpr std::string_view kType = "dynamic_quant_dense";
  int64_t rows, k, o;
  core::ChannelQuantized w;
  std::vector<float> bias;
  Activation act;
  static Support supports(const LayerInfo& info) {
    if (Support s = core::int8_routine_weight(*info.layer, "weight", true); !s) return s;
    return float_weights(*info.layer, {"bias"});
  }
  explicit DynamicQuantDense(const LayerInfo& info)
      : w(core::channel_int8(info.layer->weight("weight"))), act(core::fused_activation(*info.layer, true, true)) {
    const Shape& s = info.input_shapes[0];
    rows = prod(s, 0, s.rank() - 1);
    k = s[s.rank() - 1];
    o = info.layer->weight("weight").shape()[0];
    bias.assign(static_cast<std::size_t>(o), 0.0f);
    if (const Blob* b = info.layer->find_weight("bias")) std::copy_n(b->data_as<float>(), o, bias.begin());
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const int64_t n = rows * k;
    float lo = 0, hi = 0;
    bool finite = true;
    for (int64_t i = 0; i < n; ++i) {
      finite = finite && std::isfinite(x[i]);
      lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    }
    if (!finite) {
      std::fill_n(y, rows * o, std::numeric_limits<float>::quiet_NaN());
      return;
    }
    float scale, zp;
    core::dynamic_quant_params(lo, hi, scale, zp);
    std::vector<int32_t> q(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      q[static_cast<std::size_t>(i)] = static_cast<int32_t>(std::clamp(std::nearbyint(x[i] / scale) + zp, 0.0f, 255.0f)) -
                                       static_cast<int32_t>(zp);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < o; ++j) {
        int64_t acc = 0;
        for (int64_t i = 0; i < k; ++i)
          acc += int64_t{q[static_cast<std::size_t>(r * k + i)]} * w.q[static_cast<std::size_t>(j * k + i)];
        const auto c = static_cast<std::size_t>(j);
        y[r * o + j] = core::apply_activation(act, std::fma(static_cast<float>(acc), w.scale[c] * scale, bias[c]));
      }
  }
};

// ---------------------------------------------------------------------------
// matmul: NumPy semantics. A rank-1 left operand is [1,K], a rank-1 right one
// [K,1] (the added dim is dropped from the output); batch dims broadcast.

struct Matmul final : RefPrepared {
  static constexpr std::string_view kType = "matmul";
  int64_t m, k, nn, batches;
  Broadcast2 batch;  // offsets in elements of A and B
  explicit Matmul(const LayerInfo& info) {
    Shape a = info.input_shapes[0], b = info.input_shapes[1];
    if (a.rank() == 1) a = Shape{1, a[0]};
    if (b.rank() == 1) b = Shape{b[0], 1};
    m = a[a.rank() - 2];
    k = a[a.rank() - 1];
    nn = b[b.rank() - 1];
    Shape ab, bb, ob;
    for (int i = 0; i < a.rank() - 2; ++i) ab.push_back(a[i]);
    for (int i = 0; i < b.rank() - 2; ++i) bb.push_back(b[i]);
    int rank = std::max(ab.rank(), bb.rank());
    for (int i = 0; i < rank; ++i) {
      int ia = i - (rank - ab.rank()), ib = i - (rank - bb.rank());
      int64_t da = ia >= 0 ? ab[ia] : 1, db = ib >= 0 ? bb[ib] : 1;
      ob.push_back(da == 1 ? db : da);
    }
    batch = Broadcast2(ob, ab, bb);
    for (int d = 0; d < batch.rank; ++d) {
      batch.sa[d] *= m * k;
      batch.sb[d] *= k * nn;
    }
    batches = ob.numel();
  }
  void run(const RunArgs& args) override {
    const float* A = args.inputs[0]->data_as<float>();
    const float* B = args.inputs[1]->data_as<float>();
    float* C = args.outputs[0]->data_as<float>();
    args.pool->parallel_for(batches * m, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t bi = r / m, i = r % m;
        int64_t oa, ob;
        batch.offsets(bi, oa, ob);
        const float* a = A + oa + i * k;
        const float* b = B + ob;
        float* c = C + (bi * m + i) * nn;
        for (int64_t j = 0; j < nn; ++j) {
          double acc = 0;
          for (int64_t t = 0; t < k; ++t) acc += double(a[t]) * double(b[t * nn + j]);
          c[j] = static_cast<float>(acc);
        }
      }
    });
  }
};

// ---------------------------------------------------------------------------
// pool2: max ignores padding (an all-padding window gives -inf); avg divides by
// the taps inside the input, or with count_include_pad by those inside the
// padded input (a ceil_mode window hanging past the bottom/right pad does not
// count the overhang, as in PyTorch/ONNX Runtime; an empty avg window gives 0).

struct Pool2 final : RefPrepared {
  static constexpr std::string_view kType = "pool2";
  // The taps of one output row (or column) that fall inside the input, [lo, hi),
  // and how many fall inside the padded input: found once per row and column so
  // that a window far larger than its input costs only the taps it reads.
  struct Taps {
    int64_t lo = 0, hi = 0, padded = 0;
  };
  Window2d g;
  bool is_max, include_pad;
  std::vector<Taps> rows, cols;
  static std::vector<Taps> taps(int64_t outputs, int64_t stride, int64_t pad_before, int64_t dilation,
                                int64_t kernel, int64_t size, int64_t pad_after) {
    std::vector<Taps> t(static_cast<std::size_t>(outputs));
    for (int64_t o = 0; o < outputs; ++o) {
      Taps& r = t[static_cast<std::size_t>(o)];
      r.lo = kernel;
      for (int64_t k = 0; k < kernel; ++k) {
        const int64_t i = o * stride - pad_before + k * dilation;
        if (i >= -pad_before && i < size + pad_after) ++r.padded;
        if (i < 0 || i >= size) continue;
        r.lo = std::min(r.lo, k);
        r.hi = k + 1;
      }
      if (r.lo > r.hi) r.lo = r.hi;
    }
    return t;
  }
  explicit Pool2(const LayerInfo& info)
      : g(core::pool2_window(*info.layer, info.input_shapes[0])),
        is_max(info.layer->get_string("mode") == "max"),
        include_pad(info.layer->get_int("count_include_pad", 0) != 0),
        rows(taps(g.oh, g.sh, g.pt, g.dh, g.kh, g.h, g.pb)),
        cols(taps(g.ow, g.sw, g.pl, g.dw, g.kw, g.w, g.pr)) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(g.n * g.c, 1, [&](int64_t begin, int64_t end) {
      for (int64_t nc = begin; nc < end; ++nc) {
        const float* xp = x + nc * g.h * g.w;
        float* yp = y + nc * g.oh * g.ow;
        for (int64_t oh = 0; oh < g.oh; ++oh)
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const Taps& r = rows[static_cast<std::size_t>(oh)];
            const Taps& c = cols[static_cast<std::size_t>(ow)];
            double mx = -std::numeric_limits<double>::infinity(), sum = 0;
            for (int64_t ki = r.lo; ki < r.hi; ++ki) {
              const int64_t ih = oh * g.sh - g.pt + ki * g.dh;
              for (int64_t kj = c.lo; kj < c.hi; ++kj) {
                const double v = xp[ih * g.w + ow * g.sw - g.pl + kj * g.dw];
                sum += v;
                mx = std::max(mx, v);
              }
            }
            const int64_t div = include_pad ? r.padded * c.padded : (r.hi - r.lo) * (c.hi - c.lo);
            yp[oh * g.ow + ow] = static_cast<float>(is_max ? mx : (div ? sum / double(div) : 0.0));
          }
      }
    });
  }
};

// ---------------------------------------------------------------------------
// batchnorm: y = scale * (x - mean) / sqrt(var + epsilon) + bias, per channel (dim 1).

struct Batchnorm final : RefPrepared {
  static constexpr std::string_view kType = "batchnorm";
  int64_t n, c, inner;
  double eps;
  Blob scale, bias, mean, var;
  static Support supports(const LayerInfo& info) {
    return float_weights(*info.layer, {"scale", "bias", "mean", "var"});
  }
  explicit Batchnorm(const LayerInfo& info)
      : eps(info.layer->get_float("epsilon", 1e-5)),
        scale(info.layer->weight("scale")), bias(info.layer->weight("bias")),
        mean(info.layer->weight("mean")), var(info.layer->weight("var")) {
    const Shape& s = info.input_shapes[0];
    n = s[0];
    c = s[1];
    inner = prod(s, 2, s.rank());
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const float *sc = scale.data_as<float>(), *bi = bias.data_as<float>();
    const float *mu = mean.data_as<float>(), *va = var.data_as<float>();
    a.pool->parallel_for(n * c, 1, [&](int64_t begin, int64_t end) {
      for (int64_t nc = begin; nc < end; ++nc) {
        const int64_t ch = nc % c;
        const double inv = 1.0 / std::sqrt(double(va[ch]) + eps);
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t p = nc * inner + i;
          y[p] = static_cast<float>(double(sc[ch]) * (double(x[p]) - mu[ch]) * inv + bi[ch]);
        }
      }
    });
  }
};

// ---------------------------------------------------------------------------
// softmax along one axis, max-subtracted.

struct Softmax final : RefPrepared {
  static constexpr std::string_view kType = "softmax";
  int64_t outer, len, inner;
  explicit Softmax(const LayerInfo& info) {
    const Shape& s = info.input_shapes[0];
    int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), s.rank());
    outer = prod(s, 0, axis);
    len = s[axis];
    inner = prod(s, axis + 1, s.rank());
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(outer * inner, 1, [&](int64_t begin, int64_t end) {
      for (int64_t oi = begin; oi < end; ++oi) {
        const int64_t base = (oi / inner) * len * inner + oi % inner;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < len; ++j) mx = std::max(mx, double(x[base + j * inner]));
        double sum = 0;
        for (int64_t j = 0; j < len; ++j) sum += std::exp(double(x[base + j * inner]) - mx);
        for (int64_t j = 0; j < len; ++j)
          y[base + j * inner] = static_cast<float>(std::exp(double(x[base + j * inner]) - mx) / sum);
      }
    });
  }
};

// ---------------------------------------------------------------------------
// attention: per batch, head and query row, softmax(scale * q·k + mask) · v in double.

struct Attention final : RefPrepared {
  static constexpr std::string_view kType = "attention";
  core::AttentionGeometry g;
  int slots = 1;
  explicit Attention(const LayerInfo& info)
      : g(core::attention_geometry(*info.layer, info.input_shapes)), slots(team_threads(info)) {}
  std::size_t workspace_bytes() const override { return sizeof(double) * static_cast<std::size_t>(g.sk * slots); }
  void run(const RunArgs& a) override {
    const float* q = a.inputs[0]->data_as<float>();
    const float* k = a.inputs[1]->data_as<float>();
    const float* v = a.inputs[2]->data_as<float>();
    const float* mask = g.has_mask ? a.inputs[3]->data_as<float>() : nullptr;
    float* out = a.outputs[0]->data_as<float>();
    double* ws = static_cast<double*>(a.workspace);
    cpu::for_each_task(a.pool, slots, g.b * g.h * g.sq, [&](int64_t t, int slot) {
      const int64_t i = t % g.sq, h = t / g.sq % g.h, b = t / g.sq / g.h;
      double* p = ws + slot * g.sk;
      const float* qi = q + b * g.q[0] + h * g.q[1] + i * g.q[2];
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < g.sk; ++j) {
        const float* kj = k + g.k_at(b, h) + j * g.k[2];
        double dot = 0;
        for (int64_t d = 0; d < g.d; ++d) dot += double(qi[d * g.q[3]]) * double(kj[d * g.k[3]]);
        double s = double(g.scale) * dot;
        if (mask) s += double(mask[b * g.mask[0] + h * g.mask[1] + i * g.mask[2] + j * g.mask[3]]);
        if (g.hidden(i, j)) s = -std::numeric_limits<double>::infinity();
        p[j] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (int64_t j = 0; j < g.sk; ++j) sum += std::exp(p[j] - mx);
      for (int64_t j = 0; j < g.sk; ++j) {
        p[j] = std::exp(p[j] - mx) / sum;
        if (g.zero_masked_rows && std::isnan(p[j])) p[j] = 0;
      }
      float* o = out + b * g.out[0] + h * g.out[1] + i * g.out[2];
      for (int64_t e = 0; e < g.dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < g.sk; ++j) acc += p[j] * double(v[g.v_at(b, h) + j * g.v[2] + e * g.v[3]]);
        o[e * g.out[3]] = static_cast<float>(acc);
      }
    });
  }
};

// ---------------------------------------------------------------------------
// rotary: y[j] = x[j] cos[j] - x[j+h] sin[j], y[j+h] = x[j+h] cos[j+h] + x[j] sin[j+h] (j < h = D/2),
// cos and sin broadcast onto x by an index per element.

struct Rotary final : RefPrepared {
  static constexpr std::string_view kType = "rotary";
  Shape x, c, s;
  explicit Rotary(const LayerInfo& info) : x(info.input_shapes[0]), c(info.input_shapes[1]), s(info.input_shapes[2]) {}
  /// The offset in `in` (broadcast onto x) of x's element `flat`.
  static int64_t offset(const Shape& x, const Shape& in, int64_t flat) {
    int64_t at = 0, stride = 1;
    for (int d = x.rank() - 1; d >= 0; --d) {
      const int64_t i = flat % x[d];
      flat /= x[d];
      const int id = d - (x.rank() - in.rank());
      if (id < 0) break;
      if (in[id] != 1) at += i * stride;
      stride *= in[id];
    }
    return at;
  }
  void run(const RunArgs& a) override {
    const float* xv = a.inputs[0]->data_as<float>();
    const float* cv = a.inputs[1]->data_as<float>();
    const float* sv = a.inputs[2]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const int64_t d = x[x.rank() - 1], h = d / 2;
    a.pool->parallel_for(x.numel(), 1024, [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) {
        const int64_t j = e % d;
        const double other = j < h ? -double(xv[e + h]) : double(xv[e - h]);
        y[e] = static_cast<float>(double(xv[e]) * cv[offset(x, c, e)] + other * sv[offset(x, s, e)]);
      }
    });
  }
};

// ---------------------------------------------------------------------------
// rms_norm over dims axis..rank-1: y = x / sqrt(mean(x^2) + eps) * scale.

struct RmsNorm final : RefPrepared {
  static constexpr std::string_view kType = "rms_norm";
  int64_t outer, inner;
  double eps;
  Blob scale;
  static Support supports(const LayerInfo& info) { return float_weights(*info.layer, {"scale"}); }
  explicit RmsNorm(const LayerInfo& info) : eps(info.layer->get_float("epsilon", 1e-6)), scale(info.layer->weight("scale")) {
    const Shape& s = info.input_shapes[0];
    const int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), s.rank());
    outer = prod(s, 0, axis);
    inner = prod(s, axis, s.rank());
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const float* sc = scale.data_as<float>();
    a.pool->parallel_for(outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const float* xr = x + o * inner;
        float* yr = y + o * inner;
        double squares = 0;
        for (int64_t i = 0; i < inner; ++i) squares += double(xr[i]) * double(xr[i]);
        const double inv = 1.0 / std::sqrt(squares / double(inner) + eps);
        for (int64_t i = 0; i < inner; ++i) yr[i] = static_cast<float>(xr[i] * inv * sc[i]);
      }
    });
  }
};

// ---------------------------------------------------------------------------
// layernorm over dims axis..rank-1: y = (x - mean) / sqrt(var + eps) * scale + bias.

struct Layernorm final : RefPrepared {
  static constexpr std::string_view kType = "layernorm";
  int64_t outer, inner;
  double eps;
  Blob scale, bias;
  static Support supports(const LayerInfo& info) { return float_weights(*info.layer, {"scale", "bias"}); }
  explicit Layernorm(const LayerInfo& info)
      : eps(info.layer->get_float("epsilon", 1e-5)), scale(info.layer->weight("scale")) {
    const Shape& s = info.input_shapes[0];
    int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", -1), s.rank());
    outer = prod(s, 0, axis);
    inner = prod(s, axis, s.rank());
    if (const Blob* b = info.layer->find_weight("bias")) bias = *b;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const float* sc = scale.data_as<float>();
    const float* bi = bias.data_as<float>();
    a.pool->parallel_for(outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const float* xr = x + o * inner;
        float* yr = y + o * inner;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < inner; ++i) mean += xr[i];
        mean /= double(inner);
        for (int64_t i = 0; i < inner; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        var /= double(inner);
        const double inv = 1.0 / std::sqrt(var + eps);
        for (int64_t i = 0; i < inner; ++i)
          yr[i] = static_cast<float>((xr[i] - mean) * inv * sc[i] + (bi ? bi[i] : 0.0));
      }
    });
  }
};

// ---------------------------------------------------------------------------
// group_norm: per (n, group) mean and variance over the group's channels and
// positions, then y = (x - mean) / sqrt(var + eps) * scale[c] + bias[c].

struct GroupNorm final : RefPrepared {
  static constexpr std::string_view kType = "group_norm";
  int64_t n, c, groups, spatial;
  double eps;
  Blob scale, bias;
  static Support supports(const LayerInfo& info) { return float_weights(*info.layer, {"scale", "bias"}); }
  explicit GroupNorm(const LayerInfo& info)
      : eps(info.layer->get_float("epsilon", 1e-5)), scale(info.layer->weight("scale")) {
    const Shape& s = info.input_shapes[0];
    n = s[0];
    c = s[1];
    groups = info.layer->get_int("groups");
    spatial = prod(s, 2, s.rank());
    if (const Blob* b = info.layer->find_weight("bias")) bias = *b;
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const float* sc = scale.data_as<float>();
    const float* bi = bias.numel() ? bias.data_as<float>() : nullptr;
    const int64_t per = c / groups, len = per * spatial;
    a.pool->parallel_for(n * groups, 1, [&](int64_t begin, int64_t end) {
      for (int64_t ng = begin; ng < end; ++ng) {
        const float* xr = x + ng * len;
        float* yr = y + ng * len;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < len; ++i) mean += xr[i];
        mean /= double(len);
        for (int64_t i = 0; i < len; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        var /= double(len);
        const double inv = 1.0 / std::sqrt(var + eps);
        for (int64_t k = 0; k < per; ++k) {
          const int64_t ch = ng % groups * per + k;
          for (int64_t i = k * spatial; i < (k + 1) * spatial; ++i)
            yr[i] = static_cast<float>((xr[i] - mean) * inv * sc[ch] + (bi ? bi[ch] : 0.0));
        }
      }
    });
  }
};

// ---------------------------------------------------------------------------
// fake_quant: quantise and dequantise each value (FakeQuant::apply, ONNX Runtime's float steps).
// dynamic_quantize: min and max, then ONNX DynamicQuantizeLinear's scale, zero point and values.

struct FakeQuantRef final : RefPrepared {
  static constexpr std::string_view kType = "fake_quant";
  core::FakeQuant q;
  int64_t n;
  explicit FakeQuantRef(const LayerInfo& info) : q(core::fake_quant_params(*info.layer)), n(info.input_shapes[0].numel()) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    for (int64_t i = 0; i < n; ++i) y[i] = q.apply(x[i]);
  }
};

struct DynamicQuantize final : RefPrepared {
  static constexpr std::string_view kType = "dynamic_quantize";
  int64_t n;
  explicit DynamicQuantize(const LayerInfo& info) : n(info.input_shapes[0].numel()) {}
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    float scale, zp;
    core::dynamic_quant_params(lo, hi, scale, zp);
    float* y = a.outputs[0]->data_as<float>();
    for (int64_t i = 0; i < n; ++i) y[i] = std::clamp(std::nearbyint(x[i] / scale) + zp, 0.0f, 255.0f);
    *a.outputs[1]->data_as<float>() = scale;
    *a.outputs[2]->data_as<float>() = zp;
  }
};

// ---------------------------------------------------------------------------
// concat / split along an axis: per outer index, contiguous chunks of axis*inner.

struct Concat final : RefPrepared {
  static constexpr std::string_view kType = "concat";
  int64_t outer, out_chunk;
  std::vector<int64_t> chunks;  // per input: its axis size * inner
  explicit Concat(const LayerInfo& info) {
    const Shape& s = info.output_shapes[0];
    int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis"), s.rank());
    outer = prod(s, 0, axis);
    out_chunk = prod(s, axis, s.rank());
    for (const Shape& in : info.input_shapes) chunks.push_back(prod(in, axis, in.rank()));
  }
  void run(const RunArgs& a) override {
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        float* dst = y + o * out_chunk;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
          std::copy_n(a.inputs[i]->data_as<float>() + o * chunks[i], chunks[i], dst);
          dst += chunks[i];
        }
      }
    });
  }
};

struct Split final : RefPrepared {
  static constexpr std::string_view kType = "split";
  int64_t outer, in_chunk;
  std::vector<int64_t> chunks;  // per output: its axis size * inner
  explicit Split(const LayerInfo& info) {
    const Shape& s = info.input_shapes[0];
    int axis = core::normalize_axis(*info.layer, "axis", info.layer->get_int("axis", 0), s.rank());
    outer = prod(s, 0, axis);
    in_chunk = prod(s, axis, s.rank());
    for (const Shape& out : info.output_shapes) chunks.push_back(prod(out, axis, out.rank()));
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    a.pool->parallel_for(outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const float* src = x + o * in_chunk;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
          std::copy_n(src, chunks[i], a.outputs[i]->data_as<float>() + o * chunks[i]);
          src += chunks[i];
        }
      }
    });
  }
};

// ---------------------------------------------------------------------------
// transpose: out[i_0..i_r-1] = in[j] with j[perm[d]] = i_d.

struct Transpose final : RefPrepared {
  static constexpr std::string_view kType = "transpose";
  int rank;
  int64_t n;
  int64_t dims[kMaxRank] = {}, in_stride[kMaxRank] = {};  // per output dim
  explicit Transpose(const LayerInfo& info) {
    const Shape& s = info.input_shapes[0];
    rank = s.rank();
    n = s.numel();
    std::vector<int64_t> def(static_cast<std::size_t>(rank));
    for (int i = 0; i < rank; ++i) def[static_cast<std::size_t>(i)] = rank - 1 - i;
    auto perm = info.layer->get_ints("perm", def);
    int64_t st[kMaxRank];
    contiguous_strides(s, st);
    for (int d = 0; d < rank; ++d) {
      dims[d] = info.output_shapes[0][d];
      in_stride[d] = st[perm[static_cast<std::size_t>(d)]];
    }
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        int64_t rem = i, off = 0;
        for (int d = rank - 1; d >= 0; --d) {
          off += (rem % dims[d]) * in_stride[d];
          rem /= dims[d];
        }
        y[i] = x[off];
      }
    });
  }
};

// ---------------------------------------------------------------------------
// resize: each output pixel from its source coordinate (ONNX Resize), nearest
// or bilinear, computed per pixel.

struct Resize final : RefPrepared {
  static constexpr std::string_view kType = "resize";
  core::ResizeGeometry g;
  int64_t planes;
  /// The 4 taps around source coordinate src (floor - 1 .. floor + 2, read
  /// clamped into the input: the edge repeats) and Keys' weights for them.
  void cubic_taps(const core::ResizeAxis& axis, double src, double w[4], int64_t idx[4]) const {
    const double f = std::floor(src), t = src - f, A = g.cubic_a;
    const double d[4] = {t + 1, t, 1 - t, 2 - t};  // distances to the taps
    double sum = 0;
    for (int k = 0; k < 4; ++k) {
      const double x = d[k];
      w[k] = x <= 1 ? ((A + 2) * x - (A + 3)) * x * x + 1 : ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
      const double i = f - 1 + k;
      if (g.exclude_outside && (i < 0 || i >= double(axis.in))) w[k] = 0;
      sum += w[k];
      idx[k] = static_cast<int64_t>(std::clamp(i, 0.0, double(axis.in - 1)));
    }
    if (g.exclude_outside && sum != 0)
      for (int k = 0; k < 4; ++k) w[k] /= sum;
  }
  /// ONNX's antialias along one axis: for each output index, the first input
  /// index its taps read (clamped when read: the edge repeats) and their weights.
  struct Taps {
    std::vector<int64_t> first;
    std::vector<double> weights;  // n per output index
    int n = 0;
  };
  Taps antialias_taps(const core::ResizeAxis& axis) const {
    Taps t;
    const double s = std::min(axis.scale, 1.0), A = g.cubic_a;
    // The kernel covers (-1, 1) (linear) or (-2, 2) (cubic), stretched by 1/s.
    const int64_t start = static_cast<int64_t>(std::floor((g.cubic ? -2.0 : -1.0) / s)) + 1;
    t.n = static_cast<int>(2 - 2 * start);
    auto kernel = [&](double x) {
      x = std::abs(x);
      if (!g.cubic) return std::max(0.0, 1 - x);
      if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
      return x < 2 ? ((A * x - 5 * A) * x + 8 * A) * x - 4 * A : 0.0;
    };
    for (int64_t i = 0; i < axis.out; ++i) {
      const double x = axis.source(i);
      const int64_t first = static_cast<int64_t>(std::ceil(x)) - t.n / 2;  // the n nearest, ties to the lower
      double sum = 0;
      const std::size_t at = t.weights.size();
      for (int k = 0; k < t.n; ++k) {
        const double w = kernel((static_cast<double>(first + k) - x) * s);
        t.weights.push_back(w);
        sum += w;
      }
      if (g.exclude_outside) {
        for (int k = 0; k < t.n; ++k) {
          const int64_t j = first + k;
          if (j < 0 || j >= axis.in) t.weights[at + static_cast<std::size_t>(k)] = 0;
        }
        sum = 0;
        for (int k = 0; k < t.n; ++k) sum += t.weights[at + static_cast<std::size_t>(k)];
      }
      for (int k = 0; k < t.n; ++k) t.weights[at + static_cast<std::size_t>(k)] /= sum != 0 ? sum : 1;
      t.first.push_back(first);
    }
    return t;
  }
  Taps ay, ax;
  bool tflite = false;  // TensorFlow Lite's int8 bilinear (requantize = tflite), on the grid of `scale`
  float scale = 1;
  core::TfliteResizeAxis ty, tx;
  explicit Resize(const LayerInfo& info)
      : g(core::resize_geometry(*info.layer, info.input_shapes[0], info.output_shapes[0])),
        planes(info.input_shapes[0][0] * info.input_shapes[0][1]),
        tflite(core::requantizes_as_tflite(*info.layer)) {
    if (g.antialias) ay = antialias_taps(g.h), ax = antialias_taps(g.w);
    if (!tflite) return;
    scale = static_cast<float>(info.layer->get_float("scale"));
    ty = core::tflite_resize_axis(*info.layer, g.h.in, g.h.out);
    tx = core::tflite_resize_axis(*info.layer, g.w.in, g.w.out);
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    const int64_t ih = g.h.in, iw = g.w.in, oh = g.h.out, ow = g.w.out;
    if (tflite) {
      auto level = [&](const float* plane, int64_t r, int64_t c) {
        return core::grid_levels(plane[r * iw + c], scale);
      };
      for (int64_t p = 0; p < planes; ++p) {
        const float* plane = x + p * ih * iw;
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            const int64_t t = ty.lo[static_cast<std::size_t>(i)], b = ty.hi[static_cast<std::size_t>(i)];
            const int64_t l = tx.lo[static_cast<std::size_t>(j)], r = tx.hi[static_cast<std::size_t>(j)];
            const int32_t v = core::tflite_bilinear(level(plane, t, l), level(plane, t, r), level(plane, b, l), level(plane, b, r),
                                                    tx.weight[static_cast<std::size_t>(j)], ty.weight[static_cast<std::size_t>(i)]);
            y[(p * oh + i) * ow + j] = static_cast<float>(v) * scale;
          }
      }
      return;
    }
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const double sy = g.h.source(i), sx = g.w.source(j);
          float& out = y[(p * oh + i) * ow + j];
          if (g.h.outside(sy) || g.w.outside(sx)) {
            out = g.extrapolation_value;
            continue;
          }
          const float* plane = x + p * ih * iw;
          if (g.antialias) {
            double acc = 0;
            for (int a = 0; a < ay.n; ++a) {
              const int64_t r = std::clamp<int64_t>(ay.first[static_cast<std::size_t>(i)] + a, 0, ih - 1);
              double row = 0;
              for (int b = 0; b < ax.n; ++b) {
                const int64_t c = std::clamp<int64_t>(ax.first[static_cast<std::size_t>(j)] + b, 0, iw - 1);
                row += ax.weights[static_cast<std::size_t>(j * ax.n + b)] * plane[r * iw + c];
              }
              acc += ay.weights[static_cast<std::size_t>(i * ay.n + a)] * row;
            }
            out = static_cast<float>(acc);
            continue;
          }
          if (g.cubic) {
            double wy[4], wx[4];
            int64_t ry[4], rx[4];
            cubic_taps(g.h, sy, wy, ry);
            cubic_taps(g.w, sx, wx, rx);
            double acc = 0;
            for (int a = 0; a < 4; ++a) {
              double row = 0;
              for (int b = 0; b < 4; ++b) row += wx[b] * plane[ry[a] * iw + rx[b]];
              acc += wy[a] * row;
            }
            out = static_cast<float>(acc);
            continue;
          }
          if (!g.linear) {
            out = plane[g.h.nearest(sy) * iw + g.w.nearest(sx)];
            continue;
          }
          const double cy = g.h.clamped(sy), cx = g.w.clamped(sx);
          const int64_t y0 = static_cast<int64_t>(cy), x0 = static_cast<int64_t>(cx);
          const int64_t y1 = std::min(y0 + 1, ih - 1), x1 = std::min(x0 + 1, iw - 1);
          const double fy = cy - double(y0), fx = cx - double(x0);
          out = static_cast<float>((1 - fy) * ((1 - fx) * plane[y0 * iw + x0] + fx * plane[y0 * iw + x1]) +
                                   fy * ((1 - fx) * plane[y1 * iw + x0] + fx * plane[y1 * iw + x1]));
        }
  }
};

// ---------------------------------------------------------------------------
// pad: constant value, reflect (mirror without repeating the edge), edge, or
// wrap (the input repeated: circular padding).

struct Pad final : RefPrepared {
  static constexpr std::string_view kType = "pad";
  enum Mode { constant, reflect, edge, wrap } mode;
  int rank;
  int64_t n;
  float value;
  int64_t out_dims[kMaxRank] = {}, in_dims[kMaxRank] = {}, begin_pad[kMaxRank] = {}, in_stride[kMaxRank] = {};
  explicit Pad(const LayerInfo& info) {
    const Layer& l = *info.layer;
    const Shape& s = info.input_shapes[0];
    auto m = l.get_string("mode", "constant");
    mode = m == "reflect" ? reflect : m == "edge" ? edge : m == "wrap" ? wrap : constant;
    value = static_cast<float>(l.get_float("value", 0.0));
    rank = s.rank();
    n = info.output_shapes[0].numel();
    auto pads = l.get_ints("pads");
    contiguous_strides(s, in_stride);
    for (int d = 0; d < rank; ++d) {
      in_dims[d] = s[d];
      out_dims[d] = info.output_shapes[0][d];
      begin_pad[d] = pads[static_cast<std::size_t>(d)];
    }
  }
  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    float* y = a.outputs[0]->data_as<float>();
    a.pool->parallel_for(n, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        int64_t rem = i, off = 0;
        bool outside = false;
        for (int d = rank - 1; d >= 0; --d) {
          int64_t c = rem % out_dims[d] - begin_pad[d];
          rem /= out_dims[d];
          const int64_t len = in_dims[d];
          if (c < 0 || c >= len) {
            if (mode == constant) outside = true;
            else if (mode == edge) c = c < 0 ? 0 : len - 1;
            else if (mode == wrap) c = ((c % len) + len) % len;  // pads may exceed len: any number of turns
            else c = c < 0 ? -c : 2 * (len - 1) - c;  // pads < len, so one reflection
          }
          off += c * in_stride[d];
        }
        y[i] = outside ? value : x[off];
      }
    });
  }
};

}  // namespace

// ---------------------------------------------------------------------------
// lstm, gru: the ONNX recurrences, one time step after another, double sums.

template <int Gates>
struct Rnn final : RefPrepared {
  static constexpr std::string_view kType = Gates == 4 ? "lstm" : Gates == 3 ? "gru" : "rnn";
  core::RnnGeometry g;
  Blob w, r, bias, peep;
  std::vector<double> h, c, pre, hr;  // state, gate pre-activations, gru's h·Rh

  static Support supports(const LayerInfo& info) { return float_weights(*info.layer, {"W", "R", "B", "P"}); }
  explicit Rnn(const LayerInfo& info) : g(core::rnn_geometry(*info.layer, info.input_shapes)) {
    const Layer& l = *info.layer;
    w = l.weight("W");
    r = l.weight("R");
    if (g.has_bias) bias = l.weight("B");
    if (g.has_peephole) peep = l.weight("P");
    h.resize(static_cast<std::size_t>(g.hidden));
    c.resize(h.size());
    pre.resize(static_cast<std::size_t>(Gates * g.hidden));
    hr.resize(h.size());
  }
  static double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
  double clipped(double x) const { return g.clip > 0 ? std::clamp(x, -double(g.clip), double(g.clip)) : x; }
  static double dot(const float* a, const float* b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(a[i]) * b[i];
    return s;
  }
  static double dot(const float* a, const std::vector<double>& b) {
    double s = 0;
    for (std::size_t i = 0; i < b.size(); ++i) s += a[i] * b[i];
    return s;
  }

  void run(const RunArgs& a) override {
    const float* x = a.inputs[0]->data_as<float>();
    const float* h0 = g.has_initial_h ? a.inputs[1]->data_as<float>() : nullptr;
    const float* c0 = g.has_initial_c ? a.inputs[2]->data_as<float>() : nullptr;
    float* y = a.outputs[0]->data_as<float>();
    float* yh = a.outputs[1]->data_as<float>();
    float* yc = Gates == 4 ? a.outputs[2]->data_as<float>() : nullptr;
    const int64_t H = g.hidden, I = g.input, G = Gates;
    for (int d = 0; d < g.directions; ++d) {
      const float* W = w.data_as<float>() + d * G * H * I;
      const float* R = r.data_as<float>() + d * G * H * H;
      const float* Wb = g.has_bias ? bias.data_as<float>() + d * 2 * G * H : nullptr;
      const float* Rb = Wb ? Wb + G * H : nullptr;
      const float* P = g.has_peephole ? peep.data_as<float>() + d * 3 * H : nullptr;
      for (int64_t b = 0; b < g.batch; ++b) {
        const int64_t s0 = g.state_at(d, b);
        for (int64_t j = 0; j < H; ++j) {
          h[static_cast<std::size_t>(j)] = h0 ? h0[s0 + j] : 0.0;
          c[static_cast<std::size_t>(j)] = c0 ? c0[s0 + j] : 0.0;
        }
        for (int64_t step = 0; step < g.seq; ++step) {
          const int64_t t = g.backwards(d) ? g.seq - 1 - step : step;
          const float* xt = x + g.x_at(t, b);
          for (int64_t k = 0; k < G * H; ++k) {
            double v = dot(W + k * I, xt, I) + (Wb ? Wb[k] : 0.0);
            const double rk = dot(R + k * H, h) + (Rb ? Rb[k] : 0.0);
            if (Gates == 3 && k >= 2 * H) {
              hr[static_cast<std::size_t>(k - 2 * H)] = rk;  // gru's candidate: h·Rh + Rbh, used after the reset gate
            } else {
              v += rk;
            }
            pre[static_cast<std::size_t>(k)] = v;
          }
          if constexpr (Gates == 1) {  // rnn: h = tanh(x·W + h·R + Wb + Rb)
            for (int64_t j = 0; j < H; ++j) c[static_cast<std::size_t>(j)] = std::tanh(clipped(pre[static_cast<std::size_t>(j)]));
            h = c;
          } else if constexpr (Gates == 4) {
            for (int64_t j = 0; j < H; ++j) {
              const auto J = static_cast<std::size_t>(j);
              const double cp = c[J];
              const double i = sigmoid(clipped(pre[J] + (P ? P[j] * cp : 0.0)));
              const double f = g.input_forget ? 1 - i : sigmoid(clipped(pre[J + 2 * H] + (P ? P[2 * H + j] * cp : 0.0)));
              const double cc = std::tanh(clipped(pre[J + 3 * H]));
              c[J] = f * cp + i * cc;
              const double o = sigmoid(clipped(pre[J + H] + (P ? P[H + j] * c[J] : 0.0)));
              h[J] = o * std::tanh(c[J]);
            }
          } else {
            for (int64_t j = 0; j < 2 * H; ++j) pre[static_cast<std::size_t>(j)] = sigmoid(clipped(pre[static_cast<std::size_t>(j)]));
            for (int64_t j = 0; j < H; ++j) {
              const auto J = static_cast<std::size_t>(j);
              const double z = pre[J], rr = pre[J + H];
              double cand = pre[J + 2 * H];
              if (g.linear_before_reset) {
                cand += rr * hr[J];  // r ⊙ (h·Rh + Rbh)
              } else {
                for (int64_t m = 0; m < H; ++m)  // (r ⊙ h)·Rh + Rbh
                  cand += double(R[(2 * H + j) * H + m]) * pre[static_cast<std::size_t>(m + H)] * h[static_cast<std::size_t>(m)];
                cand += Rb ? Rb[2 * H + j] : 0.0;
              }
              c[J] = (1 - z) * std::tanh(clipped(cand)) + z * h[J];  // c holds the new h until every unit has its own
            }
            h = c;
          }
          for (int64_t j = 0; j < H; ++j) y[g.y_at(t, d, b) + j] = static_cast<float>(h[static_cast<std::size_t>(j)]);
        }
        for (int64_t j = 0; j < H; ++j) {
          yh[s0 + j] = static_cast<float>(h[static_cast<std::size_t>(j)]);
          if (yc) yc[s0 + j] = static_cast<float>(c[static_cast<std::size_t>(j)]);
        }
      }
    }
  }
};

/// loop's routine: Ref's, with one parameter the tuner measures: the threads
/// of the body's session (0: the run's; 1: one, where a small body loses more
/// to starting a parallel region per step than a second thread gives).
class LoopRoutine final : public Routine {
 public:
  std::string_view layer_type() const override { return Loop::kType; }
  std::string_view algorithm() const override { return "ref"; }
  Support supports(const LayerInfo& info, const Schema& schema) const override { return ref_.supports(info, schema); }
  std::vector<RoutineParamSpec> param_space(const LayerInfo&, const Schema&) const override {
    return {{"body_threads", {0, 1}}};
  }
  std::unique_ptr<PreparedRoutine> prepare(const LayerInfo& info, const Schema&, const RoutineParams& params) const override {
    return std::make_unique<Loop>(info, routine_param(params, "body_threads", 0));
  }

 private:
  Ref<Loop> ref_;
};

// ---------------------------------------------------------------------------
// Registration: one line per layer type.

SOFTNEURO_REGISTER_ROUTINE(Ref<Conv2>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Dense>);
SOFTNEURO_REGISTER_ROUTINE(Ref<DynamicQuantDense>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Matmul>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Pool2>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Batchnorm>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<ReluOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<ClipOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<HardswishOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<HardsigmoidOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<SigmoidOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<TanhOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<GeluOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Softmax>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Attention>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Layernorm>);
SOFTNEURO_REGISTER_ROUTINE(Ref<RmsNorm>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Rotary>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Binary<AddOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Binary<SubOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Binary<MulOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Binary<DivOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Binary<MaxOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Binary<MinOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Binary<CompareOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Binary<LogicalOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Where>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<RoundOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<CastOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<ArgReduce>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<TrigOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Take>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Gather>);
SOFTNEURO_REGISTER_ROUTINE(Ref<GatherElements>);
SOFTNEURO_REGISTER_ROUTINE(Ref<GatherNd>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Einsum>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Binary<DivmodOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Binary<BitwiseOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Cumulative>);
SOFTNEURO_REGISTER_ROUTINE(Ref<TopK>);
SOFTNEURO_REGISTER_ROUTINE(Ref<NonMaxSuppression>);
SOFTNEURO_REGISTER_ROUTINE(Ref<NonZero>);
SOFTNEURO_REGISTER_ROUTINE(Ref<RoiAlign>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unique>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Dft>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Col2Im>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Choose>);
SOFTNEURO_REGISTER_ROUTINE(LoopRoutine);
SOFTNEURO_REGISTER_ROUTINE(Ref<MaxPoolIndices>);
SOFTNEURO_REGISTER_ROUTINE(Ref<DeformConv>);
SOFTNEURO_REGISTER_ROUTINE(Ref<LinearAttention>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Slice>);
SOFTNEURO_REGISTER_ROUTINE(Ref<ScatterElements>);
SOFTNEURO_REGISTER_ROUTINE(Ref<ScatterNd>);
SOFTNEURO_REGISTER_ROUTINE(Ref<GridSample>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Concat>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Split>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Copy<"reshape">>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Copy<"flatten">>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Copy<"identity">>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Transpose>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Resize>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Deconv2>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Pad>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Constant>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<AbsOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<NegOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<SqrtOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<ExpOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<LogOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<ErfOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<ReciprocalOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<SiluOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<MishOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<SoftplusOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Unary<LeakyReluOp>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Pow>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Prelu>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Reduce>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Rnn<4>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Rnn<3>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<Rnn<1>>);
SOFTNEURO_REGISTER_ROUTINE(Ref<GroupNorm>);
SOFTNEURO_REGISTER_ROUTINE(Ref<FakeQuantRef>);
SOFTNEURO_REGISTER_ROUTINE(Ref<DynamicQuantize>);

}  // namespace softneuro
