// ONNX import: Element-wise operators: unary and binary math, comparisons, logic, activations.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

void Importer::unary(const Node& n) {
  static const std::map<std::string, std::string> types = {
      {"Relu", "relu"}, {"Sigmoid", "sigmoid"}, {"Tanh", "tanh"}, {"HardSwish", "hardswish"},
      {"HardSigmoid", "hardsigmoid"}, {"Gelu", "gelu"}, {"Abs", "abs"}, {"Neg", "neg"}, {"Sqrt", "sqrt"},
      {"Exp", "exp"}, {"Log", "log"}, {"Erf", "erf"}, {"Reciprocal", "reciprocal"}, {"LeakyRelu", "leaky_relu"},
      {"Mish", "mish"}};
  // Index arithmetic on constants (shape subgraphs) is computed here, in its own dtype.
  if (constant(n.in(0)) && (n.op() == "Neg" || n.op() == "Abs" || n.op() == "Sqrt" || n.op() == "Relu")) return constant_math(n);
  std::map<std::string, Attr> params;
  static const std::set<std::string> trig = {"Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"};
  if (trig.count(n.op())) {
    std::string op = n.op();
    op[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(op[0])));
    return add_unary(n, "trig", input(n, 0), n.out(0), {{"op", op}});
  }
  if (n.op() == "LeakyRelu") {
    params["alpha"] = n.get_float("alpha", 0.01);
  } else if (n.op() == "HardSigmoid") {
    params["alpha"] = n.get_float("alpha", 0.2);
    params["beta"] = n.get_float("beta", 0.5);
  } else if (n.op() == "Gelu") {
    params["approximate"] = n.get_string("approximate", "none");
  }
  add_unary(n, types.at(n.op()), input(n, 0), n.out(0), std::move(params));
}

void Importer::clip(const Node& n) {
  std::map<std::string, Attr> params;
  if (n.opset < 11) {
    if (n.has("min")) params["min"] = n.get_float("min");
    if (n.has("max")) params["max"] = n.get_float("max");
  } else {
    // Opset 11 made the bounds inputs (exporters pass Constant nodes or initializers).
    if (n.has_in(1)) params["min"] = constant_scalar(n, 1, "min");
    if (n.has_in(2)) params["max"] = constant_scalar(n, 2, "max");
  }
  // min > max: ONNX's min(max(x, min), max) is max everywhere, which clip(max, max) computes.
  if (params.count("min") && params.count("max") && std::get<double>(params["min"]) > std::get<double>(params["max"]))
    params["min"] = params["max"];
  add_unary(n, "clip", input(n, 0), n.out(0), std::move(params));
}

void Importer::binary_op(const Node& n) {
  static const std::map<std::string, std::pair<std::string, BinaryOp>> ops = {
      {"Add", {"add", BinaryOp::add}}, {"Sub", {"sub", BinaryOp::sub}},
      {"Mul", {"mul", BinaryOp::mul}}, {"Div", {"div", BinaryOp::div}}};
  const auto& [type, op] = ops.at(n.op());
  const Blob* a = constant(n.in(0));
  const Blob* b = constant(n.in(1));
  // Arithmetic on constants is computed now: shape arithmetic, and the index and
  // mask computations some exporters emit, whose results later nodes need as constants.
  if (a && b) {
    try {
      constants_[n.out(0)] = binary(op, *a, *b);
    } catch (const Error& e) {
      throw n.error(e.message(), "input");
    }
    return;
  }
  if (n.op() == "Div" && integer_inputs(n)) {  // integers divide toward zero
    Layer l = make("divmod", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
    l.params["op"] = std::string("quotient");
    add(std::move(l));
    return;
  }
  add(make(type, n.name, {input(n, 0), input(n, 1)}, {n.out(0)}));
}

bool Importer::integral_exponent(const Node& n) const {
  const Blob* e = n.has_in(1) ? constant(n.in(1)) : nullptr;
  if (!e) return false;
  for (double v : to_doubles(*e))
    if (!(v >= 0 && v == std::floor(v))) return false;
  return true;
}

void Importer::pow(const Node& n) {
  const Blob* e = constant(n.in(1));
  if (e && constant(n.in(0))) return constant_math(n);
  // An integer base to non-negative integral powers: integers again, the float
  // power rounded back onto them (an output refuses what float32 cannot hold).
  const bool integer_base = value_types_.count(n.in(0)) != 0 && integral_exponent(n);
  const std::string y = integer_base ? fresh_blob(n.out(0) + "/power") : n.out(0);
  if (!e || e->numel() != 1) {  // x ** y, y computed or not a scalar
    add(make("pow", n.name, {input(n, 0), input(n, 1)}, {y}));
  } else {
    const double v = to_doubles(*e)[0];
    if (!std::isfinite(v)) throw n.error(fmt::format("exponent {} is not finite", v), "Y");
    if (v == 1.0) add_unary(n, "identity", input(n, 0), y);
    else if (v == 2.0) add(make("mul", n.name, {input(n, 0), input(n, 0)}, {y}));  // one pass, any routine
    else add_unary(n, "pow", input(n, 0), y, {{"exponent", v}});
  }
  if (integer_base) add_unary(n, "round", y, n.out(0), {{"mode", std::string("nearest_even")}}, "round");
}

void Importer::prelu(const Node& n) {
  Layer l = make("prelu", n.name, {input(n, 0)}, {n.out(0)});
  l.weights["slope"] = to_float(require_constant(n, 1, "slope"));
  add(std::move(l));
}

// Softplus as one softplus layer (log(1 + e^x) from log1p: a log of 1 + tiny
// loses the tiny part); Elu and Selu as [gamma *] (relu(x) + alpha * (exp(min(x, 0)) - 1)).
void Importer::elu_softplus(const Node& n) {
  const std::string x = input(n, 0), y = n.out(0);
  if (n.op() == "Softplus") return add_unary(n, "softplus", x, y);
  const std::string pos = fresh_blob(y + "/relu");
  add_unary(n, "relu", x, pos, {}, "relu");
  const std::string rest = fresh_blob(y + "/rest");
  const bool selu = n.op() == "Selu";
  const double alpha = n.get_float("alpha", selu ? 1.67326319217681884765625 : 1.0);
  const double gamma = selu ? n.get_float("gamma", 1.05070102214813232421875) : 1.0;
  const std::string neg = fresh_blob(y + "/negative"), e = fresh_blob(y + "/exp"), em1 = fresh_blob(y + "/exp_minus_one");
  add(make("min", n.name + "/negative", {x, scalar_constant(n, y + "/zero", 0.0)}, {neg}));
  add_unary(n, "exp", neg, e, {}, "exp");
  add(make("add", n.name + "/minus_one", {e, scalar_constant(n, y + "/minus_one", -1.0)}, {em1}));
  add(make("mul", n.name + "/alpha", {em1, scalar_constant(n, y + "/alpha", alpha)}, {rest}));
  if (!selu) return add(make("add", n.name, {pos, rest}, {y}));
  const std::string sum = fresh_blob(y + "/sum");
  add(make("add", n.name + "/sum", {pos, rest}, {sum}));
  add(make("mul", n.name, {sum, scalar_constant(n, y + "/gamma", gamma)}, {y}));
}

// Softsign: x / (1 + |x|).
void Importer::softsign(const Node& n) {
  const std::string x = input(n, 0), y = n.out(0);
  const std::string a = fresh_blob(y + "/abs"), d = fresh_blob(y + "/denominator");
  add_unary(n, "abs", x, a, {}, "abs");
  add(make("add", n.name + "/plus_one", {a, scalar_constant(n, y + "/one", 1.0)}, {d}));
  add(make("div", n.name, {x, d}, {y}));
}

void Importer::equal(const Node& n) {
  const Blob& a = require_constant(n, 0, "A");
  const Blob& b = require_constant(n, 1, "B");
  try {
    constants_[n.out(0)] = binary(BinaryOp::equal, a, b);
  } catch (const Error& e) {
    throw n.error(e.message(), "input");
  }
}

void Importer::where_op(const Node& n) {
  if (!all_constant(n)) {
    add(make("where", n.name, {input(n, 0), input(n, 1), input(n, 2)}, {n.out(0)}));
    for (int k : {1, 2})  // the values' type, not the condition's
      if (auto t = value_types_.find(n.in(k)); t != value_types_.end()) value_types_[n.out(0)] = t->second;
      else if (auto c = onnx_types_.find(n.in(k)); c != onnx_types_.end() && edge_dtype(c->second) &&
                                                  is_integer(*edge_dtype(c->second)))
        value_types_[n.out(0)] = c->second;
    return;
  }
  const Blob& c = require_constant(n, 0, "condition");
  const Blob& a = require_constant(n, 1, "X");
  const Blob& b = require_constant(n, 2, "Y");
  try {
    constants_[n.out(0)] = where(c, a, b);
  } catch (const Error& e) {
    throw n.error(e.message(), "input");
  }
}

// Comparisons, logic and rounding: computed at import where every input is a
// constant (index and mask arithmetic), else layers whose results are 0/1
// (compare, logical) or whole numbers (round), held as floats and typed bool.
void Importer::compare(const Node& n) {
  static const std::map<std::string, std::string> ops = {{"Equal", "equal"},        {"Less", "less"},
                                                         {"Greater", "greater"},    {"LessOrEqual", "less_equal"},
                                                         {"GreaterOrEqual", "greater_equal"}};
  if (all_constant(n) && n.op() == "Equal") return equal(n);
  if (all_constant(n) && (n.op() == "Less" || n.op() == "Greater")) return constant_math(n);
  Layer l = make("compare", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
  l.params["op"] = ops.at(n.op());
  add(std::move(l));
  value_types_[n.out(0)] = onnx::TensorProto::BOOL;
}

// Sign: (x > 0) - (x < 0), and NaN where x is NaN (x == x false).
void Importer::sign(const Node& n) {
  const std::string x = input(n, 0), y = n.out(0), zero = scalar_constant(n, y + "/zero", 0.0);
  const std::string pos = fresh_blob(y + "/positive"), neg = fresh_blob(y + "/negative"), diff = fresh_blob(y + "/sign"),
                    number = fresh_blob(y + "/number");
  auto compare = [&](const std::string& a, const std::string& b, const char* op, const std::string& out) {
    Layer l = make("compare", fresh_blob(n.name + "/" + op), {a, b}, {out});
    l.params["op"] = std::string(op);
    add(std::move(l));
  };
  compare(x, zero, "greater", pos);
  compare(x, zero, "less", neg);
  add(make("sub", n.name + "/sub", {pos, neg}, {diff}));
  compare(x, x, "equal", number);
  add(make("where", n.name, {number, diff, x}, {y}));
}

void Importer::logical(const Node& n) {
  if (all_constant(n) && n.op() != "Xor") return constant_math(n);
  if (n.op() == "Not") {  // not x: x == 0
    Layer l = make("compare", n.name, {input(n, 0), scalar_constant(n, n.out(0) + "/zero", 0.0)}, {n.out(0)});
    l.params["op"] = std::string("equal");
    add(std::move(l));
  } else {
    Layer l = make("logical", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
    std::string op = n.op();
    std::transform(op.begin(), op.end(), op.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    l.params["op"] = op;
    add(std::move(l));
  }
  value_types_[n.out(0)] = onnx::TensorProto::BOOL;
}

void Importer::rounding(const Node& n) {
  if (all_constant(n) && n.op() != "Round") return constant_math(n);
  const std::string mode = n.op() == "Floor" ? "floor" : n.op() == "Ceil" ? "ceil" : "nearest_even";
  add_unary(n, "round", input(n, 0), n.out(0), {{"mode", mode}});
}

// IsNaN: x != x. IsInf: x (or |x|) == inf, the signs detect_positive/negative ask for.
void Importer::is_nan_inf(const Node& n) {
  const std::string x = input(n, 0);
  const double inf = std::numeric_limits<double>::infinity();
  std::string a = x, b = x, op = "not_equal";
  if (n.op() == "IsInf") {
    const bool pos = n.get_int("detect_positive", 1) != 0, neg = n.get_int("detect_negative", 1) != 0;
    op = "equal";
    if (pos && neg) {
      a = fresh_blob(n.out(0) + "/abs");
      add_unary(n, "abs", x, a, {}, "abs");
      b = scalar_constant(n, n.out(0) + "/inf", inf);
    } else {
      // One sign, or none: compared with NaN, nothing is equal.
      b = scalar_constant(n, n.out(0) + "/bound", pos ? inf : neg ? -inf : std::numeric_limits<double>::quiet_NaN());
    }
  }
  Layer l = make("compare", n.name, {a, b}, {n.out(0)});
  l.params["op"] = op;
  add(std::move(l));
  value_types_[n.out(0)] = onnx::TensorProto::BOOL;
}

bool Importer::integer_inputs(const Node& n) const {
  namespace T = onnx;
  for (int k = 0; k < n.num_inputs(); ++k) {
    const int t = n.has_in(k) ? elem_type(n.in(k)) : -1;
    if (t == T::TensorProto::INT8 || t == T::TensorProto::UINT8 || t == T::TensorProto::INT16 || t == T::TensorProto::UINT16 ||
        t == T::TensorProto::INT32 || t == T::TensorProto::UINT32 || t == T::TensorProto::INT64 || t == T::TensorProto::UINT64)
      return true;
  }
  return false;
}

// Mod: the divisor's sign (fmod 0, NumPy's mod) or the dividend's (fmod 1, C's fmod).
void Importer::mod_op(const Node& n) {
  if (constant(n.in(0)) && constant(n.in(1))) return constant_math(n);
  const bool fmod = n.get_int("fmod", 0) != 0;
  Layer l = make("divmod", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
  l.params["op"] = std::string(fmod ? "fmod" : "mod");
  add(std::move(l));
}

// BitwiseAnd/Or/Xor/Not and BitShift on integer tensors: a bitwise layer
// working on the type's width (Not as xor with all ones).
void Importer::bitwise(const Node& n) {
  namespace T = onnx;
  int type = -1;
  for (int k = 0; k < n.num_inputs() && type < 0; ++k)
    if (n.has_in(k)) type = elem_type(n.in(k));
  static const std::map<int, std::pair<int64_t, bool>> widths = {
      {T::TensorProto::UINT8, {8, false}},  {T::TensorProto::INT8, {8, true}},   {T::TensorProto::UINT16, {16, false}},
      {T::TensorProto::INT16, {16, true}},  {T::TensorProto::UINT32, {32, false}}, {T::TensorProto::INT32, {32, true}},
      {T::TensorProto::UINT64, {64, false}}, {T::TensorProto::INT64, {64, true}}};
  auto w = widths.find(type);
  if (w == widths.end())
    throw n.error(fmt::format("{} of a {} tensor (supported: integer tensors)", n.op(), type < 0 ? std::string("FLOAT") : onnx_type_name(type)),
                  "input");
  std::string op;
  if (n.op() == "BitShift") {
    const std::string dir = n.get_string("direction");
    if (dir != "LEFT" && dir != "RIGHT") throw n.error(fmt::format("direction '{}' is not LEFT or RIGHT", dir), "direction");
    op = dir == "LEFT" ? "shift_left" : "shift_right";
  } else {
    op = n.op() == "BitwiseAnd" ? "and" : n.op() == "BitwiseOr" ? "or" : "xor";
  }
  const std::string b = n.op() == "BitwiseNot" ? scalar_constant(n, n.out(0) + "/all_ones", -1.0) : input(n, 1);
  Layer l = make("bitwise", n.name, {input(n, 0), b}, {n.out(0)});
  l.params["op"] = op;
  l.params["bits"] = w->second.first;
  l.params["signed"] = int64_t{w->second.second};
  add(std::move(l));
  value_types_[n.out(0)] = type;
}

void Importer::thresholded_relu(const Node& n) {
  const std::string x = input(n, 0), y = n.out(0), above = fresh_blob(y + "/above");
  Layer c = make("compare", n.name + "/above", {x, scalar_constant(n, y + "/alpha", n.get_float("alpha", 1.0))}, {above});
  c.params["op"] = std::string("greater");
  add(std::move(c));
  add(make("where", n.name, {above, x, scalar_constant(n, y + "/zero", 0.0)}, {y}));
}

// Celu as relu(x) + min(0, alpha * (exp(x / alpha) - 1)).
void Importer::celu(const Node& n) {
  const double alpha = n.get_float("alpha", 1.0);
  if (alpha == 0) throw n.error("alpha is 0", "alpha");
  const std::string x = input(n, 0), y = n.out(0);
  const std::string pos = fresh_blob(y + "/relu"), scaled = fresh_blob(y + "/scaled"), e = fresh_blob(y + "/exp"),
                    em1 = fresh_blob(y + "/exp_minus_one"), neg = fresh_blob(y + "/neg"), negmin = fresh_blob(y + "/neg_part");
  add_unary(n, "relu", x, pos, {}, "relu");
  add(make("mul", n.name + "/scale", {x, scalar_constant(n, y + "/inv_alpha", 1.0 / alpha)}, {scaled}));
  add_unary(n, "exp", scaled, e, {}, "exp");
  add(make("sub", n.name + "/minus_one", {e, scalar_constant(n, y + "/one", 1.0)}, {em1}));
  add(make("mul", n.name + "/times_alpha", {em1, scalar_constant(n, y + "/alpha", alpha)}, {neg}));
  add(make("min", n.name + "/min", {neg, scalar_constant(n, y + "/zero", 0.0)}, {negmin}));
  add(make("add", n.name, {pos, negmin}, {y}));
}

// Swish: x * sigmoid(alpha * x) (silu where alpha is 1).
void Importer::swish(const Node& n) { add_swish(n, input(n, 0), n.out(0), n.get_float("alpha", 1.0)); }

void Importer::add_swish(const Node& n, const std::string& x, const std::string& y, double alpha) {
  if (alpha == 1.0) return add_unary(n, "silu", x, y);
  const std::string ax = fresh_blob(y + "/scaled"), s = fresh_blob(y + "/sigmoid");
  add(make("mul", n.name + "/scale", {x, scalar_constant(n, y + "/alpha", alpha)}, {ax}));
  add_unary(n, "sigmoid", ax, s, {}, "sigmoid");
  add(make("mul", n.name + "/swish", {x, s}, {y}));
}

// SwiGLU (opset 28): Swish_alpha(A) * B, A and B of one shape (no broadcasting).
void Importer::swiglu(const Node& n) {
  const Shape as = shape_of(n, n.in(0)), bs = shape_of(n, n.in(1));
  if (as != bs) throw n.error(fmt::format("A {} and B {} differ in shape (SwiGLU does not broadcast)", as.to_string(), bs.to_string()), "B");
  const std::string gate = fresh_blob(n.out(0) + "/gate");
  add_swish(n, input(n, 0), gate, n.get_float("alpha", 1.0));
  add(make("mul", n.name, {gate, input(n, 1)}, {n.out(0)}));
}

// Shrink: x + bias below -lambd, x - bias above lambd, 0 between.
void Importer::shrink(const Node& n) {
  const double lambd = n.get_float("lambd", 0.5), bias = n.get_float("bias", 0.0);
  const std::string x = input(n, 0), y = n.out(0);
  const std::string below = fresh_blob(y + "/below"), above = fresh_blob(y + "/above"), up = fresh_blob(y + "/plus_bias"),
                    down = fresh_blob(y + "/minus_bias"), upper = fresh_blob(y + "/upper");
  Layer lo = make("compare", n.name + "/below", {x, scalar_constant(n, y + "/neg_lambd", -lambd)}, {below});
  lo.params["op"] = std::string("less");
  add(std::move(lo));
  Layer hi = make("compare", n.name + "/above", {x, scalar_constant(n, y + "/lambd", lambd)}, {above});
  hi.params["op"] = std::string("greater");
  add(std::move(hi));
  add(make("add", n.name + "/plus_bias", {x, scalar_constant(n, y + "/bias", bias)}, {up}));
  add(make("sub", n.name + "/minus_bias", {x, scalar_constant(n, y + "/bias2", bias)}, {down}));
  add(make("where", n.name + "/upper", {above, down, scalar_constant(n, y + "/zero", 0.0)}, {upper}));
  add(make("where", n.name, {below, up, upper}, {y}));
}

}  // namespace onnx_import
}  // namespace softneuro
