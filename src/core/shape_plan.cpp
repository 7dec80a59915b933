#include "core/shape_plan.hpp"

#include "core/passes.hpp"

#include "core/layer_types.hpp"
#include "core/narrow_types.hpp"
#include "core/tensor_math.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <cmath>
#include <limits>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace softneuro::core {

namespace {

/// Values of any shape_math layer are small tensors; this bounds what a
/// damaged file or an absurd input shape can make one allocate.
constexpr int64_t kMaxValueElements = int64_t{1} << 26;

/// A layer taking a parameter from a value computed at plan time as input 1:
/// a reshape's target ("shape"), top_k's k (ONNX TopK's K from the number of
/// boxes a NonZero found), a loop's trip count M, a slice's starts and ends
/// (OPT's positions[:, past:] in a decode step), a pad's pads (SEW's sequence
/// padded back to its length after pooling).
bool reads_target(const Layer& l) {
  if (l.type == "loop") return l.get_int("m_input", 0) == 1 && l.inputs.size() >= 2;  // its trip count M
  return (l.type == "reshape" || l.type == "slice" || l.type == "pad" ||
          (l.type == "top_k" && l.get_int("k_at_run", 0) == 0)) &&
         l.inputs.size() == 2;
}

/// `l` (reads_target) with the parameter from `target`'s value, input 1 gone;
/// false where the value cannot be one (a zero-size dim in a reshape target
/// that may not copy it, a k that is not one integer).
bool resolve_target(Layer& l, const Blob& target, std::string* why = nullptr) {
  const auto v = to_ints(target);
  if (l.type == "slice") {  // the starts, then the ends, one per axis
    const std::size_t n = l.get_ints("axes", {}).size();
    if (v.size() != 2 * n) {
      if (why) *why = fmt::format("the bounds have {} values, not {} (a start and an end per axis)", v.size(), 2 * n);
      return false;
    }
    l.params["starts"] = std::vector<int64_t>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
    l.params["ends"] = std::vector<int64_t>(v.begin() + static_cast<std::ptrdiff_t>(n), v.end());
  } else if (l.type == "pad") {  // before and after each axis listed (every axis where none are)
    const auto axes = l.get_ints("pad_axes", {});
    const std::size_t n = axes.empty() ? l.get_ints("pads").size() / 2 : axes.size();
    if (v.size() != 2 * n || std::any_of(v.begin(), v.end(), [](int64_t p) { return p < 0; })) {
      if (why) *why = fmt::format("the pads {} are not {} values of at least 0", fmt::join(v, ","), 2 * n);
      return false;
    }
    if (axes.empty()) {
      l.params["pads"] = v;
    } else {
      std::vector<int64_t> full = l.get_ints("pads");
      const std::size_t rank = full.size() / 2;
      for (std::size_t i = 0; i < n; ++i) {
        const auto a = static_cast<std::size_t>(axes[i]);
        full[a] = v[i];
        full[a + rank] = v[i + n];
      }
      l.params["pads"] = std::move(full);
      l.params.erase("pad_axes");
    }
  } else if (l.type == "top_k" || l.type == "loop") {
    if (v.size() != 1) {
      if (why) *why = fmt::format("{} has {} values, not one", l.type == "loop" ? "the trip count" : "k", v.size());
      return false;
    }
    if (l.type == "loop") {
      l.params["trip_count"] = std::max<int64_t>(v[0], 0);
      l.params.erase("m_input");
    } else {
      l.params["k"] = v[0];
    }
  } else {
    if (l.get_int("allowzero", 0) && std::find(v.begin(), v.end(), 0) != v.end()) {
      if (why) *why = "a zero-size dim (allowzero)";
      return false;
    }
    l.params["shape"] = v;
    l.params.erase("copy_dims");
    l.params.erase("allowzero");
  }
  l.inputs.erase(l.inputs.begin() + 1);
  return true;
}

const Blob& value_input(const Layer& l, std::span<const Blob> values, std::size_t k, const char* field) {
  if (k >= values.size()) fail_field(l, field, fmt::format("op '{}' needs input {}", l.get_string("op"), k));
  if (values[k].empty())
    fail_field(l, field, fmt::format("input {} is computed at run time; op '{}' needs its value",
                                     k < l.inputs.size() ? fmt::format("'{}'", l.inputs[k]) : std::to_string(k),
                                     l.get_string("op")));
  return values[k];
}

int axis_in(const Layer& l, const char* field, int64_t axis, int rank) { return normalize_axis(l, field, axis, rank); }

Blob slice_value(const Layer& l, std::span<const Blob> values) {
  const Blob& data = value_input(l, values, 0, "data");
  const auto starts = to_ints(value_input(l, values, 1, "starts"));
  const auto ends = to_ints(value_input(l, values, 2, "ends"));
  const int rank = data.shape().rank();
  std::vector<int64_t> axes, steps;
  if (values.size() > 3 && !values[3].empty()) axes = to_ints(values[3]);
  else for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (values.size() > 4 && !values[4].empty()) steps = to_ints(values[4]);
  else steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail_field(l, "starts", "starts, ends, axes and steps differ in length");
  std::vector<SliceAxis> cut;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const int a = axis_in(l, "axes", axes[i], rank);
    const int64_t dim = data.shape()[a], step = steps[i];
    if (step == 0) fail_field(l, "steps", "step 0");
    // ONNX Slice: negative positions count from the end, then clamp to the
    // dim ([0, dim] stepping forward, [-1, dim - 1] stepping back).
    auto position = [&](int64_t v) {
      if (v < 0) v += dim;
      return step > 0 ? std::clamp<int64_t>(v, 0, dim) : std::clamp<int64_t>(v, -1, dim - 1);
    };
    cut.push_back({a, position(starts[i]), position(ends[i]), step});
  }
  return sliced(data, cut);
}

Shape dims_of(const Layer& l, const Blob& b, const char* field) {
  const auto dims = to_ints(b);
  if (dims.size() > static_cast<std::size_t>(Shape::max_rank)) fail_field(l, field, "too many dims");
  for (auto d : dims)
    if (d < 0) fail_field(l, field, fmt::format("negative dim {}", d));
  return Shape(dims);
}

/// shape_math's shape and size: of the first input's shape, the dims [start, end)
/// after a `perm` and `merge_heads` (what fuse_attention absorbed).
Blob shape_dims(const Layer& l, std::span<const Shape> shapes, const std::string& op) {
  if (shapes.empty()) fail_field(l, "inputs", "shape of nothing");
  Shape s = shapes[0];
  if (op == "size") return int_blob({}, {s.numel()});
  // perm: the shape of transpose(input, perm) (a transpose fuse_attention absorbed);
  if (l.has("perm")) {
    const auto p = l.get_ints("perm");
    if (p.size() != static_cast<std::size_t>(s.rank())) fail_field(l, "perm", "perm's length is not the input's rank");
    std::vector<int64_t> dims;
    std::vector<bool> seen(static_cast<std::size_t>(s.rank()), false);
    for (int64_t d : p) {
      if (d < 0 || d >= s.rank() || seen[static_cast<std::size_t>(d)])
        fail_field(l, "perm", fmt::format("perm entry {} out of range or repeated", d));
      seen[static_cast<std::size_t>(d)] = true;
      dims.push_back(shapes[0][static_cast<int>(d)]);
    }
    s = Shape(dims);
  }
  // merge_heads: the first two dims as one (a reshape [b,h,s,d] -> [b*h,s,d] fuse_attention absorbed).
  if (l.get_int("merge_heads", 0)) {
    if (s.rank() < 2) fail_field(l, "merge_heads", fmt::format("{} has no two dims to merge", s.to_string()));
    std::vector<int64_t> dims{s[0] * s[1]};
    for (int d = 2; d < s.rank(); ++d) dims.push_back(s[d]);
    s = Shape(dims);
  }
  const int rank = s.rank();
  int64_t start = l.get_int("start", 0), end = l.get_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  return int_blob(Shape{end - start}, std::vector<int64_t>(s.begin() + start, s.begin() + end));
}

Blob reshape_value(const Layer& l, std::span<const Blob> values) {
  auto in = [&](std::size_t k, const char* field) -> const Blob& { return value_input(l, values, k, field); };
  const Blob& data = in(0, "data");
  Layer r;
  r.name = l.name;
  r.type = "reshape";
  r.inputs = {"data"};
  r.outputs = {"reshaped"};
  r.params["shape"] = to_ints(in(1, "shape"));
  if (l.get_int("allowzero", 0))
    for (auto d : to_ints(values[1]))
      if (d == 0) fail_field(l, "shape", "a zero-size dim (allowzero)");
  const Shape s = data.shape();
  return reshaped(data, infer_layer_shapes(r, std::span<const Shape>(&s, 1)).at(0));
}

/// unsqueeze, squeeze and flatten of `data`: its values under another shape.
Blob reshaped_dims(const Layer& l, const Blob& data, const std::string& op) {
  const Shape& s = data.shape();
  Shape out;
  if (op == "flatten") {
    const int axis = static_cast<int>(l.get_int("axis", 1) < 0 ? l.get_int("axis", 1) + s.rank() : l.get_int("axis", 1));
    if (axis < 0 || axis > s.rank()) fail_field(l, "axis", "out of range");
    int64_t a = 1, b = 1;
    for (int d = 0; d < s.rank(); ++d) (d < axis ? a : b) *= s[d];
    return reshaped(data, Shape{a, b});
  }
  const auto axes = l.get_ints("axes", {});
  if (op == "squeeze") {
    std::set<int> drop;
    for (auto a : axes) drop.insert(axis_in(l, "axes", a, s.rank()));
    for (int d = 0; d < s.rank(); ++d) {
      if (axes.empty() ? s[d] == 1 : drop.count(d) != 0) {
        if (s[d] != 1) fail_field(l, "axes", fmt::format("dim {} of {} is not 1", d, s.to_string()));
        continue;
      }
      out.push_back(s[d]);
    }
    return reshaped(data, out);
  }
  const int rank = s.rank() + static_cast<int>(axes.size());
  if (rank > Shape::max_rank) fail_field(l, "axes", "too many dims");
  std::set<int> add;
  for (auto a : axes)
    if (!add.insert(axis_in(l, "axes", a, rank)).second) fail_field(l, "axes", "an axis twice");
  for (int d = 0, k = 0; d < rank; ++d) out.push_back(add.count(d) ? 1 : s[k++]);
  return reshaped(data, out);
}

Blob tiled(const Layer& l, const Blob& input, const Blob& repeats_blob) {
  Blob cur = input;
  const auto repeats = to_ints(repeats_blob);
  if (static_cast<int>(repeats.size()) != cur.shape().rank()) fail_field(l, "repeats", "not one per dim");
  int64_t total = cur.numel();
  for (std::size_t a = 0; a < repeats.size(); ++a) {
    if (repeats[a] < 0 || (repeats[a] > 0 && total > kMaxValueElements / repeats[a]))
      fail_field(l, "repeats", fmt::format("repeats [{}] of {}", fmt::join(repeats, ","), cur.shape().to_string()));
    total *= repeats[a];
    if (repeats[a] != 1)
      cur = concatenated(std::vector<Blob>(static_cast<std::size_t>(repeats[a]), cur), static_cast<int>(a));
  }
  return cur;
}

/// reduce_min and reduce_max of `x` over `axes` (default: all), keepdims (default 1); NaN wins.
Blob reduced_extreme(const Layer& l, const Blob& x, const std::string& op) {
  const int rank = x.shape().rank();
  std::vector<bool> reduced(static_cast<std::size_t>(rank), !l.has("axes"));
  if (l.has("axes"))
    for (int64_t a : l.get_ints("axes")) reduced[static_cast<std::size_t>(axis_in(l, "axes", a, rank))] = true;
  const bool keep = l.get_int("keepdims", 1) != 0;
  std::vector<int64_t> kept_dims, out_dims;  // the output with size-1 reduced dims, and as returned
  for (int d = 0; d < rank; ++d) {
    kept_dims.push_back(reduced[static_cast<std::size_t>(d)] ? 1 : x.shape()[d]);
    if (!reduced[static_cast<std::size_t>(d)] || keep) out_dims.push_back(kept_dims.back());
  }
  if (x.numel() == 0) fail_field(l, "data", "a reduction of an empty tensor has no minimum or maximum");
  auto reduce = [&](auto v) {  // v: the values as int64 or double; NaN wins
    std::vector<typename decltype(v)::value_type> r(static_cast<std::size_t>(Shape(kept_dims).numel()));
    std::vector<char> set(r.size(), 0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t rest = i, at = 0, stride = 1;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t c = rest % x.shape()[d];
        rest /= x.shape()[d];
        if (!reduced[static_cast<std::size_t>(d)]) at += c * stride;
        stride *= kept_dims[static_cast<std::size_t>(d)];
      }
      auto& m = r[static_cast<std::size_t>(at)];
      const auto e = v[static_cast<std::size_t>(i)];
      if (!set[static_cast<std::size_t>(at)]) m = e, set[static_cast<std::size_t>(at)] = 1;
      else if (m == m && (e != e || (op == "reduce_min" ? e < m : e > m))) m = e;
    }
    return r;
  };
  if (x.dtype() == DType::int64) return int_blob(Shape(out_dims), reduce(to_ints(x)));
  const auto r = reduce(to_doubles(x));
  return float_blob(Shape(out_dims), std::vector<float>(r.begin(), r.end()));
}

Blob evaluate(const Layer& l, std::span<const Blob> values, std::span<const Shape> shapes) {
  static const std::map<std::string, BinaryOp, std::less<>> binary_ops = {
      {"add", BinaryOp::add},     {"sub", BinaryOp::sub},   {"mul", BinaryOp::mul},         {"div", BinaryOp::div},
      {"mod", BinaryOp::mod},     {"fmod", BinaryOp::fmod}, {"pow", BinaryOp::pow},         {"equal", BinaryOp::equal},
      {"less", BinaryOp::less},   {"greater", BinaryOp::greater}, {"and", BinaryOp::logical_and},
      {"or", BinaryOp::logical_or}, {"min", BinaryOp::min}, {"max", BinaryOp::max}};
  static const std::map<std::string, UnaryOp, std::less<>> unary_ops = {
      {"neg", UnaryOp::neg},     {"abs", UnaryOp::abs},   {"sqrt", UnaryOp::sqrt},
      {"floor", UnaryOp::floor}, {"ceil", UnaryOp::ceil}, {"not", UnaryOp::logical_not}, {"relu", UnaryOp::relu}};
  const std::string op = l.get_string("op");
  auto in = [&](std::size_t k, const char* field) -> const Blob& { return value_input(l, values, k, field); };
  if (op == "shape" || op == "size") return shape_dims(l, shapes, op);
  if (auto b = binary_ops.find(op); b != binary_ops.end()) return binary(b->second, in(0, "A"), in(1, "B"));
  if (auto u = unary_ops.find(op); u != unary_ops.end()) return unary(u->second, in(0, "X"));
  if (op == "identity") return in(0, "input");
  if (op == "cast") {
    const std::string to = l.get_string("to");
    if (to != "float32" && to != "int64") fail_field(l, "to", fmt::format("'{}' is not float32 or int64", to));
    return cast_to(in(0, "input"), to == "int64" ? DType::int64 : DType::float32);
  }
  if (op == "gather") {
    const Blob& data = in(0, "data");
    return gathered(data, in(1, "indices"), axis_in(l, "axis", l.get_int("axis", 0), data.shape().rank()));
  }
  if (op == "concat") {
    std::vector<Blob> parts;
    bool ints = true;
    for (std::size_t k = 0; k < values.size(); ++k) ints = ints && in(k, "inputs").dtype() == DType::int64;
    for (std::size_t k = 0; k < values.size(); ++k) parts.push_back(cast_to(values[k], ints ? DType::int64 : DType::float32));
    if (parts.empty()) fail_field(l, "inputs", "concat of nothing");
    return concatenated(parts, axis_in(l, "axis", l.get_int("axis"), parts[0].shape().rank()));
  }
  if (op == "slice") return slice_value(l, values);
  if (op == "reshape") return reshape_value(l, values);
  if (op == "unsqueeze" || op == "squeeze" || op == "flatten") return reshaped_dims(l, in(0, "data"), op);
  if (op == "transpose") {
    const Blob& data = in(0, "data");
    std::vector<int64_t> perm = l.get_ints("perm", {});
    if (perm.empty())
      for (int d = data.shape().rank() - 1; d >= 0; --d) perm.push_back(d);
    return transposed(data, perm);
  }
  if (op == "expand") {
    const Blob& data = in(0, "input");
    return expanded(data, broadcast(data.shape(), dims_of(l, in(1, "shape"), "shape")));
  }
  if (op == "tile") return tiled(l, in(0, "input"), in(1, "repeats"));
  if (op == "constant_of_shape") {
    const Blob& v = l.weight("value");
    if (v.numel() != 1) fail_field(l, "value", "expected one value");
    return expanded(reshaped(v, Shape{}), dims_of(l, in(0, "shape"), "shape"));
  }
  if (op == "range") {
    try {
      return arange(in(0, "start"), in(1, "limit"), in(2, "delta"), kMaxValueElements);
    } catch (const Error& e) {
      fail_field(l, "limit", e.message());
    }
  }
  if (op == "window") {  // HannWindow, HammingWindow, BlackmanWindow of a size known when planned
    const Blob& size = in(0, "size");
    if (size.numel() != 1) fail_field(l, "size", fmt::format("size has {} values, not one", size.numel()));
    try {
      return window_values(l.get_string("kind"), to_ints(size)[0], l.get_int("periodic", 1) != 0, l.get_int("integer", 0) != 0);
    } catch (const Error& e) {
      fail_field(l, e.field(), e.message());
    }
  }
  if (op == "fake_quant") {  // a QuantizeLinear of a size-dependent value, held as its real values
    const FakeQuant q = fake_quant_params(l);
    const Blob x = cast_to(in(0, "x"), DType::float32);  // (the input itself where float32 already)
    Blob y = Blob::allocate(x.shape());
    for (int64_t i = 0; i < y.numel(); ++i) y.data_as<float>()[i] = q.apply(x.data_as<float>()[i]);
    return y;
  }
  if (op == "dequantize") {  // DequantizeLinear of integers, per tensor: (x - zero point) * scale in float
    const Blob x = cast_to(in(0, "x"), DType::float32);
    const auto scale = static_cast<float>(l.get_float("scale"));
    const auto zero_point = static_cast<float>(l.get_int("zero_point"));
    Blob y = Blob::allocate(x.shape());
    for (int64_t i = 0; i < y.numel(); ++i) y.data_as<float>()[i] = (x.data_as<float>()[i] - zero_point) * scale;
    return y;
  }
  if (op == "reduce_min" || op == "reduce_max") return reduced_extreme(l, in(0, "data"), op);
  if (op == "where") return where(in(0, "condition"), in(1, "X"), in(2, "Y"));
  if (op == "trilu") {  // (Mistral's sliding-window mask: ones of the mask's shape, k from the cache length)
    int64_t k = 0;
    if (values.size() > 1) {
      const auto kv = to_ints(in(1, "k"));
      if (kv.size() != 1) fail_field(l, "k", fmt::format("k has {} values, not one", kv.size()));
      k = kv[0];
    }
    try {
      return triangle(in(0, "input"), k, l.get_int("upper", 1) != 0);
    } catch (const Error& e) {
      fail_field(l, "input", e.message());
    }
  }
  if (op == "eye_like") {  // ones on diagonal k of a matrix of the input's shape (XLNet's mask of its length)
    const Shape& s = in(0, "input").shape();
    if (s.rank() != 2) fail_field(l, "input", fmt::format("input {} is not 2-D", s.to_string()));
    return eye(s, l.get_int("k", 0), l.get_int("integer", 0) ? DType::int64 : DType::float32);
  }
  if (op == "scatter_nd") return scattered(in(0, "data"), in(1, "indices"), in(2, "updates"));
  fail_field(l, "op", fmt::format("unknown shape_math op '{}'", op));
}

}  // namespace

Blob evaluate_shape_math(const Layer& l, std::span<const Blob> values, std::span<const Shape> shapes) {
  Blob v;
  try {
    v = evaluate(l, values, shapes);
  } catch (const Error& e) {
    if (!e.layer().empty()) throw;
    throw e.with_layer(l.name);
  }
  if (v.numel() > kMaxValueElements)
    fail_field(l, "op", fmt::format("value {} holds more than {} elements", v.shape().to_string(), kMaxValueElements));
  return v;
}

namespace {

/// Where every input of `l` is in `values` and one of them depends on the
/// input shapes (`sized`: made by shape_math, or by a layer folded so):
/// computes it (within the values' size cap), records its outputs there (and
/// in `sized`) and appends constant layers for those a data layer reads;
/// false (nothing changed) where it cannot. A layer of the model's constants
/// alone is the same at every shape: the import left it to run (GPT-2's tied
/// LM head, a transpose of the 38.6M-value embedding, was computed again at
/// every new cache length).
// Blob names as views of the graph's own strings (hashed: GPT-2's thousands
// of long, common-prefixed names made ordered maps most of a new length's cost).
using NameSet = std::unordered_set<std::string_view>;
template <class T>
using ByName = std::unordered_map<std::string_view, T>;

bool fold_values(const Layer& l, const Layer& original, ByName<Blob>& values, NameSet& sized,
                 const NameSet& read_as_data, std::vector<Layer>& layers) {
  if (l.inputs.empty() || l.type == "constant") return false;
  if (std::none_of(l.inputs.begin(), l.inputs.end(), [&](const std::string& i) { return sized.count(i) != 0; }))
    return false;
  std::vector<Blob> ins;
  for (const auto& i : l.inputs) {
    auto v = values.find(i);
    if (v == values.end()) return false;
    ins.push_back(to_float(v->second));
  }
  std::vector<Blob> outs;
  try {
    outs = evaluate_layer(l, ins);
  } catch (const std::exception&) {
    return false;  // no routine computes it here: it runs as a layer
  }
  for (const Blob& o : outs)
    if (o.numel() > kMaxValueElements) return false;
  for (std::size_t k = 0; k < outs.size() && k < l.outputs.size(); ++k) {
    if (read_as_data.count(l.outputs[k])) {
      Layer c;
      c.type = "constant";
      c.name = k == 0 ? l.name : fmt::format("{}:{}", l.name, k);
      c.outputs = {l.outputs[k]};
      c.weights["value"] = outs[k];
      layers.push_back(std::move(c));
    }
    values[original.outputs[k]] = std::move(outs[k]);  // (keys view the graph's strings, not the copy's)
    sized.insert(original.outputs[k]);
  }
  return true;
}

}  // namespace

bool has_shape_math(const Graph& g) {
  return std::any_of(g.layers.begin(), g.layers.end(),
                     [](const Layer& l) { return l.type == "shape_math" || l.type == "branch" || reads_target(l); });
}

namespace {
/// Whether layer `l` reads its input k for its value when shapes are planned.
bool reads_value(const Layer& l, std::size_t k) {
  if (l.type == "shape_math") {
    const std::string op = l.get_string("op", "");
    return op != "shape" && op != "size";
  }
  return (reads_target(l) && k == 1) || (l.type == "branch" && k == 0);
}
}  // namespace

std::vector<std::string> value_inputs(const Graph& graph) {
  std::vector<std::string> out;
  for (const auto& in : graph.inputs) {
    bool read = false;
    for (const auto& l : graph.layers) {
      for (std::size_t k = 0; k < l.inputs.size() && !read; ++k) read = l.inputs[k] == in.name && reads_value(l, k);
      if (read) break;
    }
    if (read) out.push_back(in.name);
  }
  return out;
}

namespace {
/// Element i of a host blob of a plain type: as float32 where the type is a
/// floating one, else exactly as an int64. False for a type that holds no size.
bool shape_element(const Blob& b, int64_t i, bool& floating, float& f, int64_t& n) {
  const auto* p = static_cast<const unsigned char*>(b.data());
  auto at = [&]<class T>(T) {
    T x;
    std::memcpy(&x, p + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return x;
  };
  floating = b.dtype() == DType::float32 || b.dtype() == DType::float64 || b.dtype() == DType::float16 ||
             b.dtype() == DType::bfloat16;
  switch (b.dtype()) {
    case DType::float32: f = at(float{}); return true;
    case DType::float64: f = static_cast<float>(at(double{})); return true;
    case DType::float16: f = half_to_float(at(uint16_t{})); return true;
    case DType::bfloat16: f = std::bit_cast<float>(uint32_t{at(uint16_t{})} << 16); return true;
    case DType::int8: n = at(int8_t{}); return true;
    case DType::uint8: case DType::boolean: n = at(uint8_t{}); return true;
    case DType::int16: n = at(int16_t{}); return true;
    case DType::uint16: n = at(uint16_t{}); return true;
    case DType::int32: n = at(int32_t{}); return true;
    case DType::uint32: n = at(uint32_t{}); return true;
    case DType::int64: n = at(int64_t{}); return true;
    case DType::uint64: n = static_cast<int64_t>(at(uint64_t{})); return true;
    default: return false;
  }
}
}  // namespace

Blob shape_value(const std::string& input, const Blob& value) {
  if (value.device() != Device::cpu || (!value.data() && value.numel() > 0))
    throw Error("this input sets the model's shapes (a size, a bound or a count): give it in host memory", {}, {}, input);
  if (value.numel() > 1024)
    throw Error(fmt::format("this input sets the model's shapes and holds {} values (at most 1024)", value.numel()), {}, {},
                input);
  std::vector<float> floats;
  std::vector<int64_t> ints;
  bool floating = false;
  for (int64_t i = 0; i < value.numel(); ++i) {
    float f = 0;
    int64_t n = 0;
    if (!shape_element(value, i, floating, f, n))
      throw Error(fmt::format("this input sets the model's shapes; its type {} cannot hold a size", to_string(value.dtype())),
                  {}, {}, input);
    floating ? floats.push_back(f) : ints.push_back(n);
  }
  floating = floating || value.dtype() == DType::float32 || value.dtype() == DType::float64 ||
             value.dtype() == DType::float16 || value.dtype() == DType::bfloat16;  // (an empty one)
  return floating ? float_blob(value.shape(), floats) : int_blob(value.shape(), ints);
}

bool same_shape_value(const Blob& kept, const Blob& given) {
  if (given.device() != Device::cpu || given.shape() != kept.shape() || (!given.data() && given.numel() > 0)) return false;
  for (int64_t i = 0; i < given.numel(); ++i) {
    bool floating = false;
    float f = 0;
    int64_t n = 0;
    if (!shape_element(given, i, floating, f, n) || floating != (kept.dtype() == DType::float32)) return false;
    if (floating ? kept.data_as<float>()[i] != f : kept.data_as<int64_t>()[i] != n) return false;
  }
  return true;
}

Blob value_default(const TensorInfo& input) {
  const auto n = static_cast<std::size_t>(input.shape.numel());
  const bool floating = input.dtype == DType::float32 || input.dtype == DType::float64 || input.dtype == DType::float16 ||
                        input.dtype == DType::bfloat16;
  return floating ? float_blob(input.shape, std::vector<float>(n, 1.0f)) : int_blob(input.shape, std::vector<int64_t>(n, 1));
}

Graph specialize(const Graph& graph, const std::map<std::string, Shape>& input_shapes,
                 std::map<std::string, Shape>* shapes_out, SpecializeState* state,
                 const std::map<std::string, Blob>* input_values) {
  auto at_shapes = [&] {
    std::string t;
    for (const auto& [name, shape] : input_shapes) t += fmt::format("{}{}={}", t.empty() ? "" : " ", name, shape.to_string());
    return t;
  };
  // Blobs read by a layer that is not shape_math (as data) or as a reshape target.
  NameSet read_as_data;
  read_as_data.reserve(2 * graph.layers.size());
  for (const auto& l : graph.layers)
    if (l.type != "shape_math")
      for (std::size_t k = 0; k < l.inputs.size(); ++k)
        if (!(reads_target(l) && k == 1) && !(l.type == "branch" && k == 0)) read_as_data.insert(l.inputs[k]);
  for (const auto& o : graph.outputs) read_as_data.insert(o);

  // Every field but the layers, as the graph has it (a field left out here
  // was lost: int64 outputs of a model with shape_math failed every run).
  // What tuning added stays beside the graph (Tuning): nothing of it is copied.
  Graph out;
  out.name = graph.name;
  out.inputs = graph.inputs;
  out.outputs = graph.outputs;
  out.output_dtypes = graph.output_dtypes;
  out.storage = graph.storage;
  for (auto& in : out.inputs) {
    auto it = input_shapes.find(in.name);
    if (it == input_shapes.end()) throw Error(fmt::format("no shape for net input '{}'", in.name), {}, {}, in.name);
    in.shape = it->second;
  }
  ByName<Shape> shapes;
  shapes.reserve(2 * graph.layers.size() + graph.inputs.size());
  for (const auto& in : graph.inputs) shapes[in.name] = input_shapes.at(in.name);
  ByName<Blob> values;  // shape_math outputs and constants
  values.reserve(graph.layers.size());
  NameSet sized;        // those of them that depend on the input shapes
  sized.reserve(graph.layers.size());
  // The inputs whose values set shapes: their values as given, else the default.
  for (const auto& name : value_inputs(graph)) {
    const TensorInfo& in = *std::find_if(graph.inputs.begin(), graph.inputs.end(), [&](const TensorInfo& t) { return t.name == name; });
    const auto given = input_values ? input_values->find(name) : std::map<std::string, Blob>::const_iterator{};
    Blob v = input_values && given != input_values->end() ? given->second : value_default(in);
    if (v.shape() != shapes.at(in.name))
      throw Error(fmt::format("the value given has shape {}, the input {}", v.shape().to_string(), shapes.at(in.name).to_string()),
                  {}, {}, name);
    values[in.name] = std::move(v);
    sized.insert(in.name);
  }
  out.layers.reserve(graph.layers.size());
  std::vector<Shape> ins;
  std::vector<char> folded(graph.layers.size(), 0);
  for (const Layer& layer : graph.layers) {
    try {
      ins.clear();
      for (const auto& i : layer.inputs) {
        auto it = shapes.find(i);
        if (it == shapes.end()) throw Error(fmt::format("input '{}' is not computed before this layer", i), {}, layer.name, "inputs");
        ins.push_back(it->second);
      }
      if (layer.type == "shape_math") {
        std::vector<Blob> in_values;
        for (const auto& i : layer.inputs) {
          auto v = values.find(i);
          in_values.push_back(v == values.end() ? Blob{} : v->second);
        }
        Blob v = evaluate_shape_math(layer, in_values, ins);
        const std::string& name = layer.outputs.at(0);
        shapes[name] = v.shape();
        if (read_as_data.count(name)) {  // a data layer reads it: a constant layer at these shapes
          Layer c;
          c.type = "constant";
          c.name = layer.name;
          c.outputs = {name};
          c.weights["value"] = to_float(v);
          out.layers.push_back(std::move(c));
        }
        values[name] = std::move(v);
        sized.insert(name);
        continue;
      }
      if (layer.type == "constant") {
        if (const Blob* v = layer.find_weight("value"); v && layer.outputs.size() == 1) values[layer.outputs[0]] = *v;
        const auto outs = infer_layer_shapes(layer, ins);
        for (std::size_t k = 0; k < outs.size(); ++k) shapes[layer.outputs[k]] = outs[k];
        bool used = false;
        for (const auto& o : layer.outputs) used = used || read_as_data.count(o);
        if (used) out.layers.push_back(layer);
        continue;
      }
      if (layer.type == "branch") {  // the branch the condition takes: its output as this one's
        auto cond = values.find(layer.inputs[0]);
        if (cond == values.end())
          throw Error(fmt::format("the condition '{}' is computed at run time", layer.inputs[0]), {}, layer.name, "condition");
        const auto c = to_doubles(cond->second);
        if (c.size() != 1) throw Error(fmt::format("the condition has {} values, not one", c.size()), {}, layer.name, "condition");
        const std::string& from = layer.inputs[c[0] != 0 ? 1 : 2];
        const std::string& name = layer.outputs.at(0);
        shapes[name] = shapes.at(from);
        if (auto v = values.find(from); v != values.end()) {  // a value: this one too
          values[name] = v->second;
          sized.insert(name);
          if (read_as_data.count(name)) {
            Layer k;
            k.type = "constant";
            k.name = layer.name;
            k.outputs = {name};
            k.weights["value"] = to_float(v->second);
            out.layers.push_back(std::move(k));
          }
          continue;
        }
        Layer id;
        id.type = "identity";
        id.name = layer.name;
        id.inputs = {from};
        id.outputs = {name};
        out.layers.push_back(std::move(id));
        continue;
      }
      Layer l = layer;
      if (reads_target(l)) {
        const char* field = l.type == "top_k" ? "k" : l.type == "loop" ? "trip_count" : l.type == "slice" ? "starts" : "shape";
        auto v = values.find(l.inputs[1]);
        if (v == values.end()) throw Error(fmt::format("the value of '{}' is computed at run time", l.inputs[1]), {}, l.name, field);
        std::string why;
        if (!resolve_target(l, v->second, &why)) throw Error(why, {}, l.name, field);
        ins.erase(ins.begin() + 1);
      }
      auto outs = infer_layer_shapes(l, ins);
      for (std::size_t k = 0; k < outs.size(); ++k) shapes[layer.outputs[k]] = outs[k];
      // A layer of values known at these shapes (T5's relative-position
      // buckets, Swin's window masks: Log, Min, compares of Range's output)
      // is computed now, once per shape, by the reference routines.
      if (fold_values(l, layer, values, sized, read_as_data, out.layers)) {
        folded[static_cast<std::size_t>(&layer - graph.layers.data())] = 1;
        for (const auto& o : layer.outputs) shapes[o] = values.at(o).shape();  // (a value-shaped layer's: actual)
        continue;
      }
      out.layers.push_back(std::move(l));
    } catch (const Error& e) {
      Error named = e.layer().empty() ? e.with_layer(layer.name) : e;
      throw Error(fmt::format("{} (at input shapes {})", named.message(), at_shapes()), named.file(), named.layer(),
                  named.field());
    }
  }
  // Constants only a folded layer read are read no more.
  NameSet read(out.outputs.begin(), out.outputs.end());
  for (const auto& l : out.layers)
    for (const auto& i : l.inputs) read.insert(i);
  std::vector<bool> drop(out.layers.size(), false);
  for (std::size_t i = 0; i < out.layers.size(); ++i) {
    const Layer& l = out.layers[i];
    drop[i] = l.type == "constant" &&
              std::none_of(l.outputs.begin(), l.outputs.end(), [&](const std::string& o) { return read.count(o) != 0; });
  }
  read.clear();  // (it views the layers' strings, which move now)
  erase_flagged(out, drop);
  // The branches not taken (ONNX If on a condition from shapes) are read by nothing now: dropped.
  if (std::any_of(graph.layers.begin(), graph.layers.end(), [](const Layer& l) { return l.type == "branch"; })) {
    std::unordered_set<std::string> needed(out.outputs.begin(), out.outputs.end());
    std::vector<bool> dead(out.layers.size(), false);
    for (std::size_t i = out.layers.size(); i-- > 0;) {
      const Layer& l = out.layers[i];
      dead[i] = std::none_of(l.outputs.begin(), l.outputs.end(), [&](const std::string& o) { return needed.count(o) != 0; });
      if (!dead[i]) needed.insert(l.inputs.begin(), l.inputs.end());
    }
    erase_flagged(out, dead);
  }
  if (state) {
    state->read_as_data = read_as_data;
    state->folded = std::move(folded);
    state->values = values;
    state->sized = sized;
    state->shapes = shapes;
  }
  if (shapes_out) {
    std::vector<std::pair<std::string_view, const Shape*>> sorted;
    sorted.reserve(shapes.size());
    for (const auto& [name, shape] : shapes) sorted.emplace_back(name, &shape);
    std::sort(sorted.begin(), sorted.end());
    shapes_out->clear();
    for (const auto& [name, shape] : sorted) shapes_out->emplace_hint(shapes_out->end(), std::string(name), *shape);
  }
  return out;
}

std::optional<SpecializeChanges> respecialize(const Graph& graph, const std::map<std::string, Shape>& input_shapes,
                                              SpecializeState& state) {
  if (state.folded.size() != graph.layers.size()) return std::nullopt;
  // A branch may take the other way at these shapes: planned again (its layers differ).
  if (std::any_of(graph.layers.begin(), graph.layers.end(), [](const Layer& l) { return l.type == "branch"; }))
    return std::nullopt;
  SpecializeChanges changes;
  NameSet changed;  // blobs whose shape or value differs from the state's
  for (const auto& in : graph.inputs) {
    auto given = input_shapes.find(in.name);
    if (given == input_shapes.end()) return std::nullopt;
    Shape& s = state.shapes[in.name];
    if (s == given->second) continue;
    s = given->second;
    changed.insert(in.name);
    changes.blobs.push_back(in.name);
  }
  const NameSet& read_as_data = state.read_as_data;
  auto same = [](const Blob& a, const Blob& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() &&
           (a.data() == b.data() || (a.data() && b.data() && std::memcmp(a.data(), b.data(), a.byte_size()) == 0));
  };
  // A blob's new shape and (where it has one) value, noted where they differ.
  auto set = [&](const std::string& name, const Shape& shape, const Blob* value) {
    bool differs = false;
    Shape& s = state.shapes[name];
    if (s != shape) {
      s = shape;
      differs = true;
      changes.blobs.push_back(name);
    }
    if (value) {
      Blob& v = state.values[name];
      if (!same(v, *value)) {
        v = *value;
        differs = true;
      }
    }
    if (differs) changed.insert(name);
    return differs;
  };
  std::vector<Shape> ins;
  std::vector<Blob> in_values;
  try {
    for (std::size_t i = 0; i < graph.layers.size(); ++i) {
      const Layer& layer = graph.layers[i];
      if (std::none_of(layer.inputs.begin(), layer.inputs.end(), [&](const std::string& n) { return changed.count(n) != 0; }))
        continue;
      ins.clear();
      for (const auto& n : layer.inputs) ins.push_back(state.shapes.at(n));
      if (layer.type == "shape_math") {
        in_values.clear();
        for (const auto& n : layer.inputs) {
          auto v = state.values.find(n);
          in_values.push_back(v == state.values.end() ? Blob{} : v->second);
        }
        Blob v = evaluate_shape_math(layer, in_values, ins);
        const std::string& name = layer.outputs.at(0);
        if (set(name, v.shape(), &v) && read_as_data.count(name)) changes.constants[layer.name] = to_float(v);
        continue;
      }
      // (A copy only where the target is resolved into it: copying every layer's
      // parameters and weights took a decode loop's re-binds a third of their time.)
      const bool target = reads_target(layer);
      std::optional<Layer> resolved;
      if (target) {
        resolved = layer;
        auto v = state.values.find(layer.inputs[1]);
        if (v == state.values.end() || !resolve_target(*resolved, v->second)) return std::nullopt;
        ins.erase(ins.begin() + 1);
      }
      const Layer& l = target ? *resolved : layer;
      const auto outs = infer_layer_shapes(l, ins);
      if (!state.folded[i]) {
        // A layer that runs: its output shapes, and a reshape's target.
        for (std::size_t k = 0; k < outs.size() && k < layer.outputs.size(); ++k) set(layer.outputs[k], outs[k], nullptr);
        if (reads_target(layer)) changes.params[layer.name] = l.params;
        // It folded nowhere before: it must not now (fold_values' condition).
        const bool could_fold = std::any_of(layer.inputs.begin(), layer.inputs.end(), [&](const std::string& n) { return state.sized.count(n) != 0; }) &&
                                std::all_of(l.inputs.begin(), l.inputs.end(), [&](const std::string& n) { return state.values.count(n) != 0; });
        if (could_fold) return std::nullopt;  // (it failed to fold at the state's shapes: it may not here)
        continue;
      }
      // A layer computed at the shapes: computed again.
      std::vector<Blob> vals;
      for (const auto& n : l.inputs) {
        auto v = state.values.find(n);
        if (v == state.values.end()) return std::nullopt;
        vals.push_back(to_float(v->second));
      }
      std::vector<Blob> results;
      try {
        results = evaluate_layer(l, vals);
      } catch (const std::exception&) {
        return std::nullopt;
      }
      for (std::size_t k = 0; k < results.size() && k < layer.outputs.size(); ++k) {
        if (results[k].numel() > kMaxValueElements) return std::nullopt;
        if (set(layer.outputs[k], results[k].shape(), &results[k]) && read_as_data.count(layer.outputs[k]))
          changes.constants[k == 0 ? layer.name : fmt::format("{}:{}", layer.name, k)] = results[k];
      }
    }
  } catch (const Error&) {
    return std::nullopt;  // specialize says why
  }
  for (std::string_view b : changes.blobs) check_size(state.shapes.at(b), {}, std::string(b));
  return changes;
}

}  // namespace softneuro::core
