// ONNX import: QuantizeLinear, DequantizeLinear, the QLinear and integer operators, and ONNX Runtime's quantised ones.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

Importer::QParams Importer::qparams(const Node& n, int scale_k, int zp_k, const char* what, bool int32, bool blocks) {
  QParams q;
  for (double v : to_doubles(require_constant(n, scale_k, "scale"))) {
    if (!(blocks && std::isfinite(v) && std::fabs(v) <= 1e30) && !core::quant_scale_in_range(v))
      throw n.error(fmt::format("{} scale {} lies outside [1e-30, 1e30]", what, v), "scale");
    q.scales.push_back(static_cast<float>(v));
  }
  if (q.scales.empty()) throw n.error(fmt::format("{} has no scale", what), "scale");
  int type = onnx::TensorProto::UINT8;
  if (n.has_in(zp_k)) {
    q.zero_points = constant_ints(n, zp_k, "zero_point");
    auto t = onnx_types_.find(n.in(zp_k));
    if (t != onnx_types_.end()) type = t->second;
  }
  q.type = type;
  if (type == onnx::TensorProto::INT8) {
    q.qmin = -128;
    q.qmax = 127;
  } else if (type == onnx::TensorProto::UINT16) {
    q.qmax = 65535;
  } else if (type == onnx::TensorProto::INT16) {
    q.qmin = -32768;
    q.qmax = 32767;
  } else if (int32 && type == onnx::TensorProto::INT32) {
    q.qmin = std::numeric_limits<int32_t>::min();
    q.qmax = std::numeric_limits<int32_t>::max();
  } else if (narrow_dtype(type)) {
    set_narrow_type(q, type);
  } else if (type != onnx::TensorProto::UINT8) {
    throw Unsupported{fmt::format("{} with {} zero points (uint8, int8, uint16 and int16 are supported)", n.op(),
                                  onnx_type_name(type))};
  }
  if (q.zero_points.empty()) q.zero_points.assign(q.scales.size(), 0);
  if (q.float_type && std::any_of(q.zero_points.begin(), q.zero_points.end(), [](int64_t z) { return z != 0; }))
    throw n.error(fmt::format("a {} zero point must be 0", onnx_type_name(type)), "zero_point");
  q.saturate = n.get_int("saturate", 1) != 0;
  if (q.zero_points.size() != q.scales.size())
    throw n.error(fmt::format("{} zero points for {} scales", q.zero_points.size(), q.scales.size()), "zero_point");
  for (int64_t z : q.zero_points)
    if (z < q.qmin || z > q.qmax) throw n.error(fmt::format("zero point {} outside [{}, {}]", z, q.qmin, q.qmax), "zero_point");
  return q;
}

// int4 ... uint2: their integer range; float8, float4e2m1: values rounded onto the type.
void Importer::set_narrow_type(QParams& q, int type) {
  q.type = type;
  const DType narrow = *narrow_dtype(type);
  if (is_integer(narrow)) std::tie(q.qmin, q.qmax) = core::narrow_integer_range(narrow);
  else q.float_type = narrow;
}

core::FakeQuant Importer::per_tensor(const Node& n, const QParams& q, const char* what) const {
  if (q.float_type)
    throw Unsupported{fmt::format("{} with {} {} inside the net (integer quantisation only; float8 at graph outputs)", n.op(),
                                  onnx_type_name(q.type), what)};
  if (q.qmax - q.qmin > 255)
    throw Unsupported{fmt::format("{} with {} {} inside the net (8-bit quantisation; 16-bit at graph inputs and outputs)", n.op(),
                                  onnx_type_name(q.type), what)};
  if (q.scales.size() != 1)
    throw Unsupported{fmt::format("{} with {} quantised per axis ({} scales): activations are quantised per tensor", n.op(), what, q.scales.size())};
  core::FakeQuant f;
  f.scale = q.scales[0];
  f.zero_point = static_cast<int32_t>(q.zero_points[0]);
  f.qmin = static_cast<int32_t>(q.qmin);
  f.qmax = static_cast<int32_t>(q.qmax);
  return f;
}

void Importer::add_fake_quant(const Node& n, const std::string& x, const std::string& y, const core::FakeQuant& q) {
  Layer l = make("fake_quant", y == n.out(0) ? n.name : n.name + "/quantize", {x}, {y});
  l.params["scale"] = static_cast<double>(q.scale);
  l.params["zero_point"] = int64_t{q.zero_point};
  l.params["qmin"] = int64_t{q.qmin};
  l.params["qmax"] = int64_t{q.qmax};
  add(std::move(l));
  quantized_[y] = q;
}

void Importer::mark_int8_grid(Blob& w, const QParams& q, int axis, const std::string& source) const {
  // A symmetric int8 weight quantised per output channel (axis 0) or per
  // tensor: its values stay marked as the file's int8 grid (core::stored_as_int8),
  // so the .dnn stores them as int8 and no routine rounds them onto another grid.
  const auto t = onnx_types_.find(source);
  if (t == onnx_types_.end() || t->second != onnx::TensorProto::INT8 || w.shape().rank() < 1 || w.shape()[0] < 1) return;
  if (std::any_of(q.zero_points.begin(), q.zero_points.end(), [](int64_t z) { return z != 0; })) return;
  const int64_t channels = w.shape()[0];
  std::vector<float> scales;
  if (q.scales.size() == 1) scales.assign(static_cast<std::size_t>(channels), q.scales[0]);
  else if ((axis == 0 || axis == -w.shape().rank()) && static_cast<int64_t>(q.scales.size()) == channels) scales = q.scales;
  else return;
  if (!std::all_of(scales.begin(), scales.end(), [](float s) { return core::quant_scale_in_range(s); })) return;
  w.quant().scales = std::move(scales);
  w.quant().zero_points.clear();
  w.quant().axis = 0;
}

Blob Importer::dequantized(const Node& n, const Blob& v, const QParams& q, int axis, const char* what) const {
  const Shape& s = v.shape();
  if (q.scales.empty() || q.zero_points.size() != q.scales.size())
    throw n.error(fmt::format("{} has {} scales and {} zero points", what, q.scales.size(), q.zero_points.size()),
                  "zero_point");
  const std::vector<double> values = to_doubles(v);
  Blob out = Blob::allocate(s);
  int64_t inner = 1, dim = 1;
  if (q.scales.size() > 1) {
    if (axis < 0) axis += s.rank();
    if (axis < 0 || axis >= s.rank() || s[axis] != static_cast<int64_t>(q.scales.size()))
      throw n.error(fmt::format("{} scales along axis {} of {} {}", q.scales.size(), axis, what, s.to_string()), "axis");
    dim = s[axis];
    for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  }
  float* o = out.data_as<float>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto c = static_cast<std::size_t>(q.scales.size() > 1 ? static_cast<int64_t>(i) / inner % dim : 0);
    o[i] = static_cast<float>(values[i] - static_cast<double>(q.zero_points[c])) * q.scales[c];
  }
  return out;
}

// QuantizeLinear's output type: its zero point's, or (opset 21) output_dtype without one.
Importer::QParams Importer::quantize_params(const Node& n) {
  QParams q = qparams(n, 1, 2, "y");
  if (!n.has_in(2) && n.has("output_dtype")) {
    const auto t = n.get_int("output_dtype");
    if (t == onnx::TensorProto::INT8) q.qmin = -128, q.qmax = 127;
    else if (t == onnx::TensorProto::UINT16) q.qmax = 65535;
    else if (t == onnx::TensorProto::INT16) q.qmin = -32768, q.qmax = 32767;
    else if (narrow_dtype(static_cast<int>(t))) set_narrow_type(q, static_cast<int>(t));
    else if (t != onnx::TensorProto::UINT8)
      throw Unsupported{fmt::format("QuantizeLinear to {} (uint8, int8, uint16, int16, int4, uint4, int2, uint2, float8 and "
                                    "float4e2m1 are supported)",
                                    onnx_type_name(t))};
    q.type = static_cast<int>(t);
  }
  return q;
}

Importer::Blocked Importer::blocked(const Node& n, const QParams& q, const Shape& xs, int axis, int64_t block) const {
  if (block < 1) throw n.error(fmt::format("block_size {} is not positive", block), "block_size");
  const int rank = xs.rank();
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) throw n.error(fmt::format("axis out of range for rank {}", rank), "axis");
  const Shape ss = constant(n.in(1))->shape();
  Shape want = xs;
  want[axis] = (xs[axis] + block - 1) / block;
  if (ss != want)
    throw n.error(fmt::format("scale {} is not the input {} in blocks of {} (block_size) along axis {}: {}", ss.to_string(),
                              xs.to_string(), block, axis, want.to_string()),
                  "scale");
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= xs[d];
  for (int d = axis + 1; d < rank; ++d) inner *= xs[d];
  const int64_t dim = xs[axis], blocks = want[axis];
  Blocked b;
  b.scales.reserve(static_cast<std::size_t>(xs.numel()));
  b.zero_points.reserve(static_cast<std::size_t>(xs.numel()));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t d = 0; d < dim; ++d)
      for (int64_t i = 0; i < inner; ++i) {
        const auto at = static_cast<std::size_t>((o * blocks + d / block) * inner + i);
        b.scales.push_back(q.scales[at]);
        b.zero_points.push_back(static_cast<float>(q.zero_points[at]));
      }
  return b;
}

// QuantizeLinear with block_size: saturate(round_half_even(x / scale) + zero
// point), the scale and zero point of each element's block.
void Importer::blocked_quantize(const Node& n, int64_t block) {
  const QParams q = quantize_params(n);
  if (q.float_type) throw Unsupported{"blocked QuantizeLinear to a float8 or float4 type"};
  const Shape xs = shape_of(n, n.in(0));
  const Blocked b = blocked(n, q, xs, static_cast<int>(n.get_int("axis", 1)), block);
  const std::string y = n.out(0);
  if (const Blob* c = constant(n.in(0))) {
    const std::vector<double> v = to_doubles(*c);
    Blob out = Blob::allocate(xs);
    for (std::size_t i = 0; i < v.size(); ++i)  // the integers (ONNX Runtime's float arithmetic)
      out.data_as<float>()[i] = std::clamp(std::nearbyint(static_cast<float>(v[i]) / b.scales[i]) + b.zero_points[i],
                                           static_cast<float>(q.qmin), static_cast<float>(q.qmax));
    constants_[y] = std::move(out);
    value_types_[y] = q.type;
    return;
  }
  add_integers(n, input(n, 0), as_blob(n, add_constant(y + "/scale", float_blob(xs, b.scales))),
               as_blob(n, add_constant(y + "/zero_point", float_blob(xs, b.zero_points))), q);
}

// DequantizeLinear with block_size: (x - zero point) * scale, those of each
// element's block (LLM weights quantised in blocks: folded when constant).
void Importer::blocked_dequantize(const Node& n, int64_t block) {
  const QParams q = qparams(n, 1, 2, "x", true, true);
  if (q.float_type) throw Unsupported{"blocked DequantizeLinear of a float8 or float4 type"};
  const Shape xs = shape_of(n, n.in(0));
  const Blocked b = blocked(n, q, xs, static_cast<int>(n.get_int("axis", 1)), block);
  const std::string y = n.out(0);
  if (const Blob* c = constant(n.in(0))) {
    const std::vector<double> v = to_doubles(*c);
    std::vector<float> real(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) real[i] = static_cast<float>((v[i] - b.zero_points[i]) * b.scales[i]);
    constants_[y] = float_blob(xs, real);
    // 4-bit LLM weights: kept for a MatMul (Importer::matmul), signed or not as
    // the codes are (a symmetric file's int4 codes come without zero points).
    bool into_matmul = false;
    if (auto readers = consumers_.find(y); readers != consumers_.end())
      for (int i : readers->second) into_matmul = into_matmul || (is(i, "MatMul") && node(i).in(1) == y);
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    const bool is_signed = lo != v.end() && *lo < 0;
    if (into_matmul && xs.rank() == 2 && lo != v.end() && *lo >= (is_signed ? -128 : 0) && *hi <= (is_signed ? 127 : 255)) {
      Blob codes = Blob::allocate(xs, is_signed ? DType::qint8 : DType::quint8);
      for (std::size_t i = 0; i < v.size(); ++i)
        codes.data_as<uint8_t>()[i] = static_cast<uint8_t>(static_cast<int64_t>(v[i]) & 0xFF);  // (int8's bits where signed)
      QuantParams& qp = codes.quant();
      qp.axis = static_cast<int>(n.get_int("axis", 1) < 0 ? n.get_int("axis", 1) + 2 : n.get_int("axis", 1));
      qp.block_size = block;
      qp.scales = q.scales;
      qp.zero_points.assign(q.zero_points.begin(), q.zero_points.end());
      blocked_codes_[y] = std::move(codes);
    }
    return;
  }
  const std::string centred = fresh_blob(y + "/centred");
  add(make("sub", n.name + "/zero_point", {input(n, 0), as_blob(n, add_constant(y + "/zero_point", float_blob(xs, b.zero_points)))}, {centred}));
  add(make("mul", n.name + "/scale", {centred, as_blob(n, add_constant(y + "/scale", float_blob(xs, b.scales)))}, {y}));
}

void Importer::quantize_linear(const Node& n) {
  if (const int64_t block = n.get_int("block_size", 0); block != 0) return blocked_quantize(n, block);
  if (!constant(n.in(1)) || (n.has_in(2) && !constant(n.in(2)))) return runtime_quantize(n);
  const QParams q = quantize_params(n);
  const int axis = static_cast<int>(n.get_int("axis", 1));
  if (const Blob* c = constant(n.in(0))) {
    // A constant: quantised now, held as its real values.
    const Shape& s = c->shape();
    Blob out = Blob::allocate(s);
    const std::vector<double> v = to_doubles(*c);
    int64_t inner = 1, dim = 1;
    int ax = axis < 0 ? axis + s.rank() : axis;
    if (q.scales.size() > 1) {
      if (ax < 0 || ax >= s.rank() || s[ax] != static_cast<int64_t>(q.scales.size())) throw n.error("scales do not match the axis", "axis");
      dim = s[ax];
      for (int d = ax + 1; d < s.rank(); ++d) inner *= s[d];
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto ch = static_cast<std::size_t>(q.scales.size() > 1 ? static_cast<int64_t>(i) / inner % dim : 0);
      if (q.float_type) {  // rounded onto the float type (as its values: it is an output, or dequantised next)
        out.data_as<float>()[i] = core::narrowed(*q.float_type, static_cast<float>(v[i]) / q.scales[ch], q.saturate,
                                                 core::ScaleRounding::up);
        continue;
      }
      core::FakeQuant f;
      f.scale = q.scales[ch];
      f.zero_point = static_cast<int32_t>(q.zero_points[ch]);
      f.qmin = static_cast<int32_t>(q.qmin);
      f.qmax = static_cast<int32_t>(q.qmax);
      out.data_as<float>()[i] = f.apply(static_cast<float>(v[i]));
    }
    constants_[n.out(0)] = out;
    if (q.scales.size() == 1 && q.qmax - q.qmin <= 255 && !q.float_type) quantized_[n.out(0)] = per_tensor(n, q, "y");
    return;
  }
  quantized_output(n, input(n, 0), q, axis);
}

// A scale (and zero point) computed at run time, per tensor: DynamicQuantizeLinear
// written out as its function body (ReduceMin/Max, Div, Round, Cast, then
// QuantizeLinear of the computed scale and zero point). The integers come from
// the same layers as a constant scale's (add_integers).
void Importer::runtime_quantize(const Node& n) {
  const std::string y = n.out(0);
  for (int k = 1; k <= 2; ++k)
    if (n.has_in(k) && !constant(n.in(k)) && shape_of(n, n.in(k)).numel() != 1)
      throw Unsupported{fmt::format("QuantizeLinear with a {} computed at run time per axis (per tensor only)",
                                    k == 1 ? "scale" : "zero point")};
  const int t = n.has_in(2) ? elem_type(n.in(2)) : static_cast<int>(n.get_int("output_dtype", onnx::TensorProto::UINT8));
  QParams q;
  q.type = t;
  if (t == onnx::TensorProto::INT8) q.qmin = -128, q.qmax = 127;
  else if (t == onnx::TensorProto::UINT16) q.qmax = 65535;
  else if (t == onnx::TensorProto::INT16) q.qmin = -32768, q.qmax = 32767;
  else if (t != onnx::TensorProto::UINT8)
    throw Unsupported{fmt::format("QuantizeLinear to {} with a scale computed at run time (uint8, int8, uint16 and int16 are)",
                                  onnx_type_name(t))};
  const std::string zero_point = n.has_in(2) ? input(n, 2) : scalar_constant(n, y + "/zero_point", 0.0);
  add_integers(n, input(n, 0), input(n, 1), zero_point, q);
}

std::string Importer::along_axis(const Node& n, const std::string& name, const std::vector<float>& values, int axis, int rank) {
  if (values.size() == 1) return scalar_constant(n, name, values[0]);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) throw n.error(fmt::format("axis {} out of range for rank {}", axis, rank), "axis");
  Shape s{static_cast<int64_t>(values.size())};
  for (int d = axis + 1; d < rank; ++d) s.push_back(1);
  return as_blob(n, add_constant(name, float_blob(s, values)));
}

std::string Importer::real_values(const Node& n, int k, const QParams& q, int axis, const char* what) {
  const std::string& x = n.in(k);
  if (auto it = quantized_.find(x); it != quantized_.end()) {
    // Held as real values: this operator must read its integers at the quantisation they have.
    if (q.scales.size() == 1 && q.zero_points.size() == 1 &&
        (q.scales[0] != it->second.scale || q.zero_points[0] != it->second.zero_point))
      throw Unsupported{fmt::format("{} reads {} '{}' at scale {} and zero point {}; it was quantised with {} and {}", n.op(),
                                    what, x, q.scales[0], q.zero_points[0], it->second.scale, it->second.zero_point)};
    return input(n, k);
  }
  if (const Blob* c = constant(x)) return as_blob(n, add_constant(fmt::format("{}/{}_real", n.out(0), what), dequantized(n, *c, q, axis, what)));
  const int t = elem_type(x);
  if (t != onnx::TensorProto::UINT8 && t != onnx::TensorProto::INT8 && t != onnx::TensorProto::UINT16 &&
      t != onnx::TensorProto::INT16 && t != onnx::TensorProto::INT32 && !narrow_dtype(t))
    throw Unsupported{fmt::format("{} of a {} '{}' that is neither quantised by a QuantizeLinear nor integer-typed", n.op(), what, x)};
  const int rank = shape_of(n, x).rank();
  std::vector<float> zp(q.zero_points.begin(), q.zero_points.end());
  const std::string centred = fresh_blob(fmt::format("{}/{}_centred", n.out(0), what)),
                    real = fresh_blob(fmt::format("{}/{}_real", n.out(0), what));
  add(make("sub", fmt::format("{}/{}_zero_point", n.name, what), {input(n, k), along_axis(n, centred + "/zp", zp, axis, rank)},
           {centred}));
  add(make("mul", fmt::format("{}/{}_scale", n.name, what), {centred, along_axis(n, real + "/scale", q.scales, axis, rank)}, {real}));
  return real;
}

void Importer::quantized_output(const Node& n, const std::string& real, const QParams& q, int axis) {
  const std::string y = n.out(0);
  if (q.float_type) {  // float8, float4e2m1: x / scale rounded onto the type
    const std::string scaled = fresh_blob(y + "/scaled");
    add(make("div", n.name + "/scale", {real, along_axis(n, y + "/scale", q.scales, axis, shape_of(n, real).rank())}, {scaled}));
    add_cast(n, scaled, y, *q.float_type, q.saturate, "up", "cast");
    return;
  }
  if (!is_graph_output(y)) return add_fake_quant(n, real, y, per_tensor(n, q, "y"));
  const int rank = shape_of(n, real).rank();
  std::vector<float> zp(q.zero_points.begin(), q.zero_points.end());
  add_integers(n, real, along_axis(n, y + "/scale", q.scales, axis, rank), along_axis(n, y + "/zero_point", zp, axis, rank), q);
}

// The integers a QuantizeLinear outputs, at run time: saturate(round_half_even(real / scale) + zero point),
// scale and zero point blobs that broadcast to real's shape.
void Importer::add_integers(const Node& n, const std::string& real, const std::string& scale, const std::string& zero_point,
                            const QParams& q) {
  const std::string y = n.out(0);
  const std::string scaled = fresh_blob(y + "/scaled"), rounded = fresh_blob(y + "/rounded"), shifted = fresh_blob(y + "/shifted");
  add(make("div", n.name + "/scale", {real, scale}, {scaled}));
  add_unary(n, "round", scaled, rounded, {{"mode", std::string("nearest_even")}}, "round");
  add(make("add", n.name + "/zero_point", {rounded, zero_point}, {shifted}));
  add_unary(n, "clip", shifted, y, {{"min", static_cast<double>(q.qmin)}, {"max", static_cast<double>(q.qmax)}});
  value_types_[y] = q.type;
}

void Importer::dequantize_linear(const Node& n) {
  if (const int64_t block = n.get_int("block_size", 0); block != 0) return blocked_dequantize(n, block);
  const std::string& x = n.in(0);
  const int axis = static_cast<int>(n.get_int("axis", 1));
  if (auto it = quantized_.find(x); it != quantized_.end()) {
    // Already held as real values: the dequantisation must be the quantisation's.
    const QParams q = qparams(n, 1, 2, "x");
    const core::FakeQuant f = per_tensor(n, q, "x");
    if (f.scale != it->second.scale || f.zero_point != it->second.zero_point)
      throw Unsupported{fmt::format("DequantizeLinear with scale {} and zero point {} of '{}', quantised with {} and {}", f.scale,
                                    f.zero_point, x, it->second.scale, it->second.zero_point)};
    if (const Blob* c = constant(x)) {
      constants_[n.out(0)] = *c;
      return;
    }
    return add_unary(n, "identity", input(n, 0), n.out(0));
  }
  if (const Blob* c = constant(x)) {  // quantised weights, biases
    if (c->dtype() == DType::float32) throw n.error("a float constant is not quantised", "x");
    QParams q = qparams(n, 1, 2, "x", true);
    if (!n.has_in(2)) {  // no zero point: the range from x's own type
      auto t = onnx_types_.find(x);
      if (t != onnx_types_.end() && t->second == onnx::TensorProto::INT8) q.qmin = -128, q.qmax = 127;
    }
    Blob w = dequantized(n, *c, q, axis, "x");
    mark_int8_grid(w, q, axis, x);
    constants_[n.out(0)] = std::move(w);
    return;
  }
  if (auto it = int_valued_.find(x); it != int_valued_.end()) {
    // DynamicQuantizeLinear's integers: (x - zero_point) * scale, with the node's own scale and zero point.
    std::string centred = fresh_blob(n.out(0) + "/centred");
    add(make("sub", n.name + "/zero_point", {input(n, 0), input(n, 2)}, {centred}));
    add(make("mul", n.name, {centred, input(n, 1)}, {n.out(0)}));
    return;
  }
  // Integers computed at run time (an integer graph input, a quantising graph step).
  QParams q = qparams(n, 1, 2, "x", true);
  if (!n.has_in(2)) q.zero_points.assign(q.scales.size(), 0);
  add_unary(n, "identity", real_values(n, 0, q, axis, "x"), n.out(0));
}

void Importer::qlinear_conv(const Node& n) {
  const QParams xq = qparams(n, 1, 2, "x"), wq = qparams(n, 4, 5, "w"), yq = qparams(n, 6, 7, "y");
  if (xq.scales.size() != 1) throw Unsupported{"QLinearConv with x quantised per axis"};
  const Blob& w_int = require_constant(n, 3, "w");
  Blob w = dequantized(n, w_int, wq, 0, "w");
  mark_int8_grid(w, wq, 0, n.in(3));
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  Layer l = conv2_layer(n, n.name + "/conv", real_values(n, 0, xq, 1, "x"), tmp, w);
  if (n.has_in(8)) {  // int32 bias at scale x_scale * w_scale (per output channel)
    const std::vector<double> b = to_doubles(require_constant(n, 8, "B"));
    const int64_t oc = w.shape()[0];
    if (static_cast<int64_t>(b.size()) != oc) throw n.error(fmt::format("{} bias values for {} output channels", b.size(), oc), "B");
    std::vector<float> bias(b.size());
    for (std::size_t c = 0; c < b.size(); ++c)
      bias[c] = static_cast<float>(b[c] * static_cast<double>(xq.scales[0]) * static_cast<double>(wq.scales[wq.scales.size() > 1 ? c : 0]));
    l.weights["bias"] = float_blob(Shape{oc}, bias);
  }
  add(std::move(l));
  quantized_output(n, tmp, yq, 1);
}

void Importer::qlinear_matmul(const Node& n) {
  const QParams aq = qparams(n, 1, 2, "a"), bq = qparams(n, 4, 5, "b"), yq = qparams(n, 6, 7, "y");
  if (aq.scales.size() != 1) throw Unsupported{"QLinearMatMul with a quantised per axis"};
  const std::string a = real_values(n, 0, aq, 1, "a");
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  const Blob* b = constant(n.in(3));
  if (b && b->shape().rank() == 2) {
    // Per-column scales of B ([K, N]) lie along axis 1.
    Layer d = make("dense", n.name + "/matmul", {a}, {tmp});
    Blob w = transposed(dequantized(n, *b, bq, 1, "b"), {1, 0});
    mark_int8_grid(w, bq, 0, n.in(3));
    d.weights["weight"] = std::move(w);
    add(std::move(d));
  } else {
    if (bq.scales.size() != 1) throw Unsupported{"QLinearMatMul with a B quantised per axis that is not a 2-D constant"};
    add(make("matmul", n.name + "/matmul", {a, real_values(n, 3, bq, 1, "b")}, {tmp}));
  }
  quantized_output(n, tmp, yq, 1);
}

// ONNX Runtime's QOperator forms (com.microsoft): the operator on the real
// values, its output quantised as the node says.

void Importer::qlinear_binary(const Node& n) {  // QLinearAdd, QLinearMul
  const QParams aq = qparams(n, 1, 2, "A"), bq = qparams(n, 4, 5, "B"), cq = qparams(n, 6, 7, "C");
  const std::string a = real_values(n, 0, aq, 1, "A"), b = real_values(n, 3, bq, 1, "B");
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  add(make(n.op() == "QLinearAdd" ? "add" : "mul", n.name + "/real", {a, b}, {tmp}));
  quantized_output(n, tmp, cq, 1);
}

void Importer::qlinear_unary(const Node& n) {  // QLinearSigmoid, QLinearLeakyRelu
  const QParams xq = qparams(n, 1, 2, "X"), yq = qparams(n, 3, 4, "Y");
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  std::map<std::string, Attr> params;
  if (n.op() == "QLinearLeakyRelu") params["alpha"] = n.get_float("alpha", 0.01);
  add_unary(n, n.op() == "QLinearSigmoid" ? "sigmoid" : "leaky_relu", real_values(n, 0, xq, 1, "X"), tmp, std::move(params),
            "real");
  quantized_output(n, tmp, yq, 1);
}

void Importer::qlinear_softmax(const Node& n) {  // com.microsoft: X, X_scale, X_zp, Y_scale, Y_zp; axis, opset
  const QParams xq = qparams(n, 1, 2, "X"), yq = qparams(n, 3, 4, "Y");
  if (!n.has("opset")) throw n.error("QLinearSoftmax needs the opset of the Softmax it replaces", "opset");
  const int64_t opset = n.get_int("opset");
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  add_softmax(n, real_values(n, 0, xq, 1, "X"), tmp, opset, n.get_int("axis", -1));
  quantized_output(n, tmp, yq, 1);
}

void Importer::qlinear_global_pool(const Node& n) {
  if (n.get_int("channels_last", 0) != 0) throw Unsupported{"QLinearGlobalAveragePool with channels_last=1"};
  const QParams xq = qparams(n, 1, 2, "X"), yq = qparams(n, 3, 4, "Y");
  const std::string x = real_values(n, 0, xq, 1, "X");
  if (shape_of(n, x).rank() != 4) throw Unsupported{fmt::format("QLinearGlobalAveragePool of a rank-{} input", shape_of(n, x).rank())};
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  add_unary(n, "pool2", x, tmp, {{"mode", std::string("avg")}, {"global", int64_t{1}}}, "real");
  quantized_output(n, tmp, yq, 1);
}

void Importer::qlinear_concat(const Node& n) {
  // Y_scale, Y_zero_point, then (tensor, scale, zero point) per input.
  if (n.num_inputs() < 5 || (n.num_inputs() - 2) % 3 != 0)
    throw n.error(fmt::format("{} inputs: expected Y_scale, Y_zero_point and triples of tensor, scale, zero point",
                              n.num_inputs()),
                  "input");
  const QParams yq = qparams(n, 0, 1, "Y");
  std::vector<std::string> reals;
  for (int k = 2; k < n.num_inputs(); k += 3) reals.push_back(real_values(n, k, qparams(n, k + 1, k + 2, "input"), 1, "input"));
  const int rank = shape_of(n, reals[0]).rank();
  int64_t axis = n.get_int("axis");
  if (axis < -rank || axis >= rank) throw n.error(fmt::format("axis {} out of range for rank {}", axis, rank), "axis");
  if (axis < 0) axis += rank;
  const std::string tmp = fresh_blob(n.out(0) + "/real");
  Layer l = make("concat", n.name + "/real", reals, {tmp});
  l.params["axis"] = axis;
  add(std::move(l));
  quantized_output(n, tmp, yq, 1);
}

void Importer::qgemm(const Node& n) {
  // Y = alpha * A' B' + C, C int32 at alpha * a_scale * b_scale; Y quantised where y_scale is given, else float.
  const QParams aq = qparams(n, 1, 2, "A"), bq = qparams(n, 4, 5, "B");
  if (n.get_int("transA", 0) != 0) throw Unsupported{"QGemm with transA"};
  if (aq.scales.size() != 1) throw Unsupported{"QGemm with A quantised per axis"};
  const std::string a = real_values(n, 0, aq, 1, "A");
  if (shape_of(n, a).rank() != 2) throw n.error(fmt::format("A is {}, not a matrix", shape_of(n, a).to_string()), "A");
  const Blob* b = constant(n.in(3));
  if (!b || b->shape().rank() != 2) throw Unsupported{"QGemm with a B that is not a constant matrix"};
  const bool trans_b = n.get_int("transB", 0) != 0;
  const double alpha = n.get_float("alpha", 1.0);
  // Per-column scales of B lie along its N axis: 1 as [K, N], 0 as [N, K].
  Blob w = dequantized(n, *b, bq, trans_b ? 0 : 1, "B");
  if (!trans_b) w = transposed(w, {1, 0});
  const int64_t oc = w.shape()[0];
  if (alpha == 1.0) mark_int8_grid(w, bq, 0, n.in(3));  // (scaled by alpha it is off the file's grid)
  else
    for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = static_cast<float>(w.data_as<float>()[i] * alpha);
  const bool quantised_y = n.has_in(7);
  const std::string y = quantised_y ? fresh_blob(n.out(0) + "/real") : n.out(0);
  Layer d = make("dense", quantised_y ? n.name + "/real" : n.name, {a}, {y});
  d.weights["weight"] = w;
  if (n.has_in(6)) {
    const std::vector<double> c = to_doubles(require_constant(n, 6, "C"));
    if (static_cast<int64_t>(c.size()) != oc && c.size() != 1)
      throw Unsupported{fmt::format("QGemm with a C of {} values for {} outputs (a row of N or a scalar)", c.size(), oc)};
    std::vector<float> bias(static_cast<std::size_t>(oc));
    for (int64_t j = 0; j < oc; ++j) {
      const double bs = bq.scales[bq.scales.size() > 1 ? static_cast<std::size_t>(j) : 0];
      bias[static_cast<std::size_t>(j)] =
          static_cast<float>(c[c.size() > 1 ? static_cast<std::size_t>(j) : 0] * alpha * aq.scales[0] * bs);
    }
    d.weights["bias"] = float_blob(Shape{oc}, bias);
  }
  add(std::move(d));
  if (quantised_y) quantized_output(n, y, qparams(n, 7, 8, "y"), 1);
}

void Importer::keep_quantisation(const Node& n) {
  static const std::unordered_set<std::string> moves = {"MaxPool",   "Flatten",      "Reshape",      "Squeeze", "Unsqueeze",
                                                        "Transpose", "DepthToSpace", "SpaceToDepth", "Identity",
                                                        "Split",     "Slice",        "Resize"};
  if (!moves.count(n.op()) || !n.has_in(0)) return;
  // A nearest resize moves values; a linear one computes new ones, which ONNX
  // Runtime rounds on the integers in its own way.
  if (n.op() == "Resize" && n.get_string("mode", "nearest") != "nearest") return;
  const auto q = quantized_.find(n.in(0));
  if (q == quantized_.end()) return;
  const core::FakeQuant fq = q->second;
  for (int k = 0; k < n.num_outputs(); ++k) {
    const std::string& y = n.out(k);
    if (y.empty() || constant(y) || quantized_.count(y) || is_graph_output(y) || !shapes_.count(y)) continue;
    auto producer = std::find_if(graph_.layers.rbegin(), graph_.layers.rend(), [&](const Layer& l) {
      return std::find(l.outputs.begin(), l.outputs.end(), y) != l.outputs.end();
    });
    if (producer == graph_.layers.rend()) continue;
    const std::string moved = fresh_blob(y + "/moved");
    std::replace(producer->outputs.begin(), producer->outputs.end(), y, moved);
    shapes_[moved] = shapes_.at(y);
    Layer l = make("fake_quant", n.num_outputs() == 1 ? n.name + "/quantize" : fmt::format("{}/quantize_{}", n.name, k), {moved}, {y});
    l.params["scale"] = static_cast<double>(fq.scale);
    l.params["zero_point"] = int64_t{fq.zero_point};
    l.params["qmin"] = int64_t{fq.qmin};
    l.params["qmax"] = int64_t{fq.qmax};
    graph_.layers.push_back(std::move(l));
    quantized_[y] = fq;
  }
}

void Importer::dynamic_quantize_linear(const Node& n) {
  if (const Blob* c = constant(n.in(0))) {
    // Of a constant (an exporter's weights): computed now, as the layer would.
    const Blob x = to_float(*c);
    const float* v = x.data_as<float>();
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < x.numel(); ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
    float scale, zp;
    core::dynamic_quant_params(lo, hi, scale, zp);
    Blob y = Blob::allocate(x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) y.data_as<float>()[i] = std::clamp(std::nearbyint(v[i] / scale) + zp, 0.0f, 255.0f);
    constants_[n.out(0)] = y;
    if (!n.out(1).empty()) constants_[n.out(1)] = float_blob({}, {scale});
    if (!n.out(2).empty()) constants_[n.out(2)] = int_blob({}, {static_cast<int64_t>(zp)});
    int_valued_[n.out(0)] = {n.out(1), n.out(2)};
    return;
  }
  std::vector<std::string> outs{output(n, 0), output(n, 1), output(n, 2)};
  add(make("dynamic_quantize", n.name, {input(n, 0)}, outs));
  int_valued_[outs[0]] = {outs[1], outs[2]};
}

void Importer::conv_integer(const Node& n) {
  if (!int_valued_.count(n.in(0)) && !integer_inputs(n))
    throw Unsupported{"ConvInteger of a tensor that is neither integer-typed nor made by a DynamicQuantizeLinear"};
  value_types_[n.out(0)] = onnx::TensorProto::INT32;
  QParams wq;
  wq.zero_points = n.has_in(3) ? constant_ints(n, 3, "w_zero_point") : std::vector<int64_t>{0};
  wq.scales.assign(wq.zero_points.size(), 1.0f);
  Blob w = dequantized(n, require_constant(n, 1, "w"), wq, 0, "w");  // w - w_zero_point, exact
  std::string x = input(n, 0);
  if (n.has_in(2)) {  // padding reads (x - x_zero_point) = 0, as ONNX Runtime pads with the zero point
    std::string centred = fresh_blob(n.out(0) + "/centred");
    add(make("sub", n.name + "/zero_point", {x, input(n, 2)}, {centred}));
    x = centred;
  }
  add(conv2_layer(n, n.name, x, n.out(0), std::move(w)));
}

void Importer::matmul_integer(const Node& n) {
  if (!int_valued_.count(n.in(0)) && !integer_inputs(n))
    throw Unsupported{"MatMulInteger of an A that is neither integer-typed nor made by a DynamicQuantizeLinear"};
  value_types_[n.out(0)] = onnx::TensorProto::INT32;
  const Blob* b = constant(n.in(1));
  if (!b || b->shape().rank() != 2) throw Unsupported{"MatMulInteger with a B that is not a 2-D constant"};
  QParams bq;
  bq.zero_points = n.has_in(3) ? constant_ints(n, 3, "b_zero_point") : std::vector<int64_t>{0};
  bq.scales.assign(bq.zero_points.size(), 1.0f);
  std::string a = input(n, 0);
  if (n.has_in(2)) {
    std::string centred = fresh_blob(n.out(0) + "/centred");
    add(make("sub", n.name + "/zero_point", {a, input(n, 2)}, {centred}));
    a = centred;
  }
  Layer d = make("dense", n.name, {a}, {n.out(0)});
  Blob w = transposed(dequantized(n, *b, bq, 1, "b"), {1, 0});  // B - b_zero_point, [N, K]
  // An int8 B without zero points (quantize_dynamic's symmetric weights): the
  // integers themselves, on a grid of scale 1, which the .dnn stores as int8.
  QParams unit = bq;
  unit.scales.assign(1, 1.0f);
  unit.zero_points.assign(1, 0);
  if (std::all_of(bq.zero_points.begin(), bq.zero_points.end(), [](int64_t z) { return z == 0; }))
    mark_int8_grid(w, unit, 0, n.in(1));
  d.weights["weight"] = std::move(w);
  add(std::move(d));
}

}  // namespace onnx_import
}  // namespace softneuro
