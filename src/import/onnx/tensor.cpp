// ONNX import: Shapes and data movement: Reshape, Transpose, Slice, Gather, Scatter, Concat, Cast, Expand, Pad, ...
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

// Tile: a constant is tiled at import; a blob becomes a concat of its copies
// along each tiled axis (repeats must be constant).
void Importer::tile(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const auto repeats = constant_ints(n, 1, "repeats");
  if (static_cast<int>(repeats.size()) != xs.rank())
    throw n.error(fmt::format("{} repeats for a rank-{} input", repeats.size(), xs.rank()), "repeats");
  int64_t total = 1;
  for (int64_t r : repeats) {
    if (r < 1) throw n.error(fmt::format("repeat {} is not a positive count", r), "repeats");
    if (r > 4096 || (total *= r) > 4096) throw Unsupported{fmt::format("Tile by {} in all (at most 4096 copies)", total)};
  }
  if (const Blob* cst = constant(n.in(0))) {
    try {
      check_folded_growth(Shape{cst->numel() * total}, cst->dtype(), cst->byte_size());
    } catch (const Error& e) {
      throw n.error(e.message(), "repeats");
    }
    Blob cur = *cst;
    for (int axis = 0; axis < xs.rank(); ++axis)
      if (repeats[static_cast<std::size_t>(axis)] > 1)
        cur = concatenated(std::vector<Blob>(static_cast<std::size_t>(repeats[static_cast<std::size_t>(axis)]), cur), axis);
    constants_[n.out(0)] = cur;
    return;
  }
  std::string cur = input(n, 0);
  int last = -1;
  for (int axis = 0; axis < xs.rank(); ++axis)
    if (repeats[static_cast<std::size_t>(axis)] > 1) last = axis;
  if (last < 0) return add_unary(n, "identity", cur, n.out(0));
  for (int axis = 0; axis <= last; ++axis) {
    const int64_t r = repeats[static_cast<std::size_t>(axis)];
    if (r == 1) continue;
    const std::string next = axis == last ? n.out(0) : fresh_blob(fmt::format("{}/tile{}", n.out(0), axis));
    Layer l = make("concat", fmt::format("{}/axis{}", n.name, axis), std::vector<std::string>(static_cast<std::size_t>(r), cur), {next});
    l.params["axis"] = int64_t{axis};
    add(std::move(l));
    cur = next;
  }
}

void Importer::identity(const Node& n) {
  if (n.op() == "Dropout") {
    if (used(n.out(1))) {  // nothing is dropped at inference: a mask of ones
      const Shape xs = shape_of(n, n.in(0));
      constants_[n.out(1)] = float_blob(xs, std::vector<float>(static_cast<std::size_t>(xs.numel()), 1.0f));
      onnx_types_[n.out(1)] = onnx::TensorProto::BOOL;
    }
    // Training mode drops values at random, unless the ratio is 0 (exporters emit
    // F.dropout(x, p=0.0, training=True) like that): then it is an identity too.
    // A training_mode computed at run time may be true: refused as that is
    // (it was an identity, whatever the value fed).
    const bool has_training = n.opset >= 12 && n.has_in(2);
    const Blob* training = has_training ? constant(n.in(2)) : nullptr;
    if (has_training && (!training || training->numel() != 1 || to_ints(*training)[0] != 0)) {
      const Blob* ratio = n.has_in(1) ? constant(n.in(1)) : nullptr;
      if (!ratio || ratio->numel() != 1 || to_doubles(*ratio)[0] != 0.0)
        throw Unsupported{training ? "Dropout in training mode with a ratio other than 0 (its drops are random)"
                                   : "Dropout whose training_mode is computed at run time, with a ratio other than 0 "
                                     "(in training mode its drops are random; a constant false is an identity)"};
    }
  }
  if (const Blob* c = constant(n.in(0))) {  // e.g. an Identity fed by an initializer: the same constant
    constants_[n.out(0)] = *c;
    return;
  }
  add_unary(n, "identity", input(n, 0), n.out(0));
}

void Importer::cast(const Node& n) { cast_to_type(n, static_cast<int>(n.get_int("to"))); }

// CastLike: Cast to the element type of its second input (a tensor computed at
// run time is float32 here).
void Importer::cast_like(const Node& n) {
  if (!n.has_in(1)) throw n.error("CastLike needs its target_type input", "target_type");
  auto t = onnx_types_.find(n.in(1));
  cast_to_type(n, t != onnx_types_.end() ? t->second : static_cast<int>(onnx::TensorProto::FLOAT));
}

void Importer::cast_to_type(const Node& n, int to) {
  using T = onnx::TensorProto;
  if (const auto narrow = narrow_dtype(to)) return cast_to_narrow(n, *narrow, to);
  const bool to_floating = to == T::FLOAT || to == T::FLOAT16 || to == T::DOUBLE || to == T::BFLOAT16;
  const bool to_integer = to == T::BOOL || to == T::INT8 || to == T::UINT8 || to == T::INT16 || to == T::UINT16 ||
                          to == T::INT32 || to == T::UINT32 || to == T::INT64 || to == T::UINT64;
  if (!to_floating && !to_integer)  // strings, complex
    throw Unsupported{fmt::format("Cast to {}", onnx_type_name(to))};
  if (const Blob* c = constant(n.in(0))) {
    constants_[n.out(0)] = cast_to(*c, to_floating ? DType::float32 : DType::int64);
    onnx_types_[n.out(0)] = to;  // a zero point's type is its range (qparams), a CastLike's target type
    return;
  }
  if (to == T::BOOL) {  // x != 0
    Layer l = make("compare", n.name, {input(n, 0), scalar_constant(n, n.out(0) + "/zero", 0.0)}, {n.out(0)});
    l.params["op"] = std::string("not_equal");
    add(std::move(l));
    value_types_[n.out(0)] = to;
    return;
  }
  if (!to_floating && !value_types_.count(n.in(0))) {
    // Floats to an integer type: toward zero, as C converts (ONNX leaves values
    // the type cannot hold undefined; a session refuses them at an output).
    add_unary(n, "round", input(n, 0), n.out(0), {{"mode", std::string("trunc")}});
    value_types_[n.out(0)] = to;
    return;
  }
  if (!to_floating) {
    // An integer tensor into a type that holds all its values (int32 -> int64,
    // uint8 -> int16, ...) is the same numbers.
    auto from = value_types_.find(n.in(0));
    auto range = [](int type) -> std::pair<double, double> {
      switch (type) {
        case T::BOOL: return {0, 1};
        case T::INT8: return {-128, 127};
        case T::UINT8: return {0, 255};
        case T::INT16: return {-32768, 32767};
        case T::UINT16: return {0, 65535};
        case T::INT32: return {-2147483648.0, 2147483647.0};
        case T::UINT32: return {0, 4294967295.0};
        case T::INT64: return {-9.2e18, 9.2e18};
        case T::UINT64: return {0, 1.8e19};
        default:
          if (const auto d = narrow_dtype(type); d && is_integer(*d)) {
            const auto [lo, hi] = core::narrow_integer_range(*d);
            return {static_cast<double>(lo), static_cast<double>(hi)};
          }
          return {1, 0};
      }
    };
    // Run-time integers are float32 inside, exact within +-2^24 (a session
    // refuses others at the edge): a narrowing cast whose type holds every such
    // value of the source (int64 -> int32: RoBERTa's position ids) is the same numbers.
    constexpr double kExact = 16777216.0;
    const double lo = from == value_types_.end() ? 0 : std::max(range(from->second).first, -kExact);
    const double hi = from == value_types_.end() ? 0 : std::min(range(from->second).second, kExact);
    if (from == value_types_.end() || to == T::BOOL || lo < range(to).first || hi > range(to).second)
      throw Unsupported{"Cast of a run-time tensor to a non-float type"};
    add_unary(n, "identity", input(n, 0), n.out(0));
    value_types_[n.out(0)] = to;
    return;
  }
  add_unary(n, "identity", input(n, 0), n.out(0));  // run-time tensors are float32 already
}

// Cast to float8, float4e2m1, int4 ... uint2: the values rounded (or wrapped)
// onto the type's, held in float32 (a cast layer; at import for a constant).
void Importer::cast_to_narrow(const Node& n, DType to, int onnx_type) {
  const bool saturate = n.get_int("saturate", 1) != 0;
  const std::string round_mode = n.get_string("round_mode", "up");
  core::ScaleRounding rounding;
  try {
    rounding = core::parse_scale_rounding(round_mode);
  } catch (const Error& e) {
    throw n.error(e.message(), "round_mode");
  }
  if (const Blob* c = constant(n.in(0))) {
    const std::vector<double> v = to_doubles(*c);
    Blob out = uninitialized_blob(c->shape(), is_integer(to) ? DType::int64 : DType::float32);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const float y = core::narrowed(to, static_cast<float>(v[i]), saturate, rounding);
      if (is_integer(to)) out.data_as<int64_t>()[i] = static_cast<int64_t>(y);
      else out.data_as<float>()[i] = y;
    }
    constants_[n.out(0)] = out;
    return;
  }
  add_cast(n, input(n, 0), n.out(0), to, saturate, round_mode);
  if (is_integer(to)) value_types_[n.out(0)] = onnx_type;
}

void Importer::flatten(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  int64_t axis = n.get_int("axis", 1);
  if (axis < 0) axis += xs.rank();
  if (axis < 0 || axis > xs.rank()) throw n.error(fmt::format("axis out of range for rank {}", xs.rank()), "axis");
  int64_t a = 1, b = 1;
  for (int i = 0; i < xs.rank(); ++i) (i < axis ? a : b) *= xs[i];
  if (constant(n.in(0))) return reshape_to(n, n.in(0), Shape{a, b}, n.out(0));
  add_unary(n, "flatten", input(n, 0), n.out(0), {{"axis", axis}});
}

void Importer::reshape(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const auto spec = constant_ints(n, 1, "shape");
  const bool allow_zero = n.get_int("allowzero", 0) != 0;
  if (spec.size() > static_cast<std::size_t>(Shape::max_rank)) throw n.error("too many dims", "shape");
  // ONNX semantics resolved here: 0 copies the input dim (unless allowzero), -1 is inferred.
  Shape out;
  int infer = -1;
  int64_t known = 1;
  for (std::size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allow_zero) {
      if (static_cast<int>(i) >= xs.rank()) throw n.error("0 refers past the input's rank", "shape");
      d = xs[static_cast<int>(i)];
    } else if (d == -1) {
      if (infer >= 0) throw n.error("more than one -1", "shape");
      infer = static_cast<int>(i);
      d = 1;
    } else if (d < 0) {
      throw n.error(fmt::format("invalid dim {}", d), "shape");
    }
    out.push_back(d);
    if (static_cast<int>(i) != infer && __builtin_mul_overflow(known, d, &known))
      throw n.error(fmt::format("the dims [{}] multiply beyond int64", fmt::join(spec, ",")), "shape");
  }
  if (infer >= 0) {
    if (known == 0 || xs.numel() % known) throw n.error(fmt::format("cannot reshape {} into [{}]", xs.to_string(), fmt::join(spec, ",")), "shape");
    out[infer] = xs.numel() / known;
  }
  if (out.numel() != xs.numel())
    throw n.error(fmt::format("cannot reshape {} into {}", xs.to_string(), out.to_string()), "shape");
  if (value_sized(n.in(0)) && !size_dependent(n.in(1))) {  // ONNX's 0 and -1 resolved when planned
    Layer l = make("reshape", n.name, {input(n, 0)}, {n.out(0)});
    l.params["shape"] = spec;
    if (allow_zero) l.params["allowzero"] = int64_t{1};
    return add(std::move(l));
  }
  if (size_dependent(n.in(1)) && !constant(n.in(0))) {  // the target is computed at every size
    Layer l = make("reshape", n.name, {input(n, 0), plan_value(n.in(1))}, {n.out(0)});
    l.params["shape"] = out.to_vector();
    if (allow_zero) l.params["allowzero"] = int64_t{1};
    return add(std::move(l));
  }
  reshape_to(n, n.in(0), out, n.out(0));
}

void Importer::squeeze(const Node& n) {
  const bool unsqueeze = n.op() == "Unsqueeze";
  const Shape xs = shape_of(n, n.in(0));
  // Opset 13 moved axes from an attribute to an input.
  std::vector<int64_t> axes;
  if (n.opset >= 13) {
    if (n.has_in(1)) axes = constant_ints(n, 1, "axes");
  } else {
    axes = n.get_ints("axes", std::vector<int64_t>{});
  }
  const int out_rank = unsqueeze ? xs.rank() + static_cast<int>(axes.size()) : xs.rank();
  if (unsqueeze && (axes.empty() || out_rank > Shape::max_rank)) throw n.error("invalid axes", "axes");
  std::vector<bool> marked(static_cast<std::size_t>(out_rank));
  for (auto a : axes) {
    if (a < -out_rank || a >= out_rank) throw n.error(fmt::format("axis {} out of range", a), "axes");
    marked[static_cast<std::size_t>(a < 0 ? a + out_rank : a)] = true;
  }
  Shape out;
  std::vector<int64_t> copy;  // the input dim each output dim is (-1: an inserted 1)
  if (unsqueeze) {
    for (int i = 0, j = 0; i < out_rank; ++i) {
      const bool inserted = marked[static_cast<std::size_t>(i)];
      copy.push_back(inserted ? -1 : j);
      out.push_back(inserted ? 1 : xs[j++]);
    }
  } else {
    if (axes.empty() && value_sized(n.in(0))) throw Unsupported{"Squeeze without axes of a tensor whose size is known at run time"};
    for (int i = 0; i < xs.rank(); ++i) {
      const bool drop = axes.empty() ? xs[i] == 1 : marked[static_cast<std::size_t>(i)];
      if (drop && xs[i] != 1 && !value_sized(n.in(0))) throw n.error(fmt::format("cannot squeeze dim {} of size {}", i, xs[i]), "axes");
      if (!drop) out.push_back(xs[i]), copy.push_back(i);
    }
  }
  if (value_sized(n.in(0))) {  // the dims copied when planned
    Layer l = make("reshape", n.name, {input(n, 0)}, {n.out(0)});
    std::vector<int64_t> spec(copy.size(), 1);
    l.params["shape"] = spec;
    l.params["copy_dims"] = copy;
    return add(std::move(l));
  }
  reshape_to(n, n.in(0), out, n.out(0));
}

void Importer::concat(const Node& n) {
  const int64_t axis_attr = n.get_int("axis");
  std::vector<const Blob*> parts;
  for (int k = 0; k < n.num_inputs(); ++k) parts.push_back(constant(n.in(k)));
  const int rank = shape_of(n, n.in(0)).rank();
  if (axis_attr < -rank || axis_attr >= rank) throw n.error(fmt::format("axis {} out of range for rank {}", axis_attr, rank), "axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  if (std::all_of(parts.begin(), parts.end(), [](const Blob* b) { return b != nullptr; })) {
    const bool ints = std::all_of(parts.begin(), parts.end(), [](const Blob* b) { return b->dtype() == DType::int64; });
    std::vector<Blob> blobs;
    for (const Blob* b : parts) blobs.push_back(cast_to(*b, ints ? DType::int64 : DType::float32));
    try {
      constants_[n.out(0)] = concatenated(blobs, axis);
    } catch (const Error& e) {
      throw n.error(e.message(), "input");
    }
    return;
  }
  std::vector<std::string> inputs;
  for (int k = 0; k < n.num_inputs(); ++k)
    if (!(parts[static_cast<std::size_t>(k)] && parts[static_cast<std::size_t>(k)]->numel() == 0)) inputs.push_back(input(n, k));
  Layer l = make("concat", n.name, inputs, {n.out(0)});
  l.params["axis"] = int64_t{axis};
  add(std::move(l));
}

void Importer::split(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int64_t axis_attr = n.get_int("axis", 0);
  if (axis_attr < -xs.rank() || axis_attr >= xs.rank()) throw n.error("axis out of range", "axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + xs.rank() : axis_attr);
  // Opset 13 moved the sizes from an attribute to an input; without them the parts are equal.
  std::vector<int64_t> sizes = n.opset >= 13 ? (n.has_in(1) ? constant_ints(n, 1, "split") : std::vector<int64_t>{})
                                             : n.get_ints("split", std::vector<int64_t>{});
  const int parts = n.num_outputs();
  if (sizes.empty() && n.opset >= 18 && n.has("num_outputs")) {
    // Opset 18: num_outputs chunks of ceil(dim / num_outputs), the last one smaller.
    const int64_t num = n.get_int("num_outputs");
    if (num != parts) throw n.error(fmt::format("num_outputs {} for {} outputs", num, parts), "num_outputs");
    const int64_t chunk = (xs[axis] + num - 1) / std::max<int64_t>(1, num);
    for (int64_t k = 0; k < num; ++k) sizes.push_back(std::max<int64_t>(0, std::min(chunk, xs[axis] - k * chunk)));
  }
  if (sizes.empty()) {
    if (parts == 0 || xs[axis] % parts) throw n.error(fmt::format("dim {} does not split into {} equal parts", xs[axis], parts), "split");
    sizes.assign(static_cast<std::size_t>(parts), xs[axis] / parts);
  }
  if (static_cast<int>(sizes.size()) != parts) throw n.error(fmt::format("{} sizes for {} outputs", sizes.size(), parts), "split");
  if (const Blob* c = constant(n.in(0))) {
    int64_t begin = 0;
    for (int k = 0; k < parts; ++k) {
      const int64_t size = sizes[static_cast<std::size_t>(k)];
      if (size < 0 || begin + size > xs[axis]) throw n.error("split sizes exceed the dim", "split");
      if (!n.out(k).empty()) constants_[n.out(k)] = sliced(*c, {{axis, begin, begin + size, 1}});
      begin += size;
    }
    return;
  }
  std::vector<std::string> outs;
  for (int k = 0; k < parts; ++k) outs.push_back(output(n, k));
  Layer l = make("split", n.name, {input(n, 0)}, outs);
  l.params["axis"] = int64_t{axis};
  l.params["split"] = sizes;
  add(std::move(l));
}

namespace {
/// Where slice_strided's run of count * step elements starts before `start`
/// (j <= start % step), or -1 where no such run fits in the dim.
int64_t strided_run_offset(const Shape& xs, int axis, int64_t start, int64_t count, int64_t step) {
  const int64_t dim = xs[axis];
  int64_t j = 0;
  while (j < step && j <= start && start - j + count * step > dim) ++j;
  return j == step || j > start || xs.rank() + 1 > Shape::max_rank ? -1 : j;
}
/// The most runs of indices `take` slices and concatenates.
constexpr int64_t kMaxTakenRuns = 256;
}  // namespace

void Importer::slice(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  const auto starts = constant_ints(n, 1, "starts"), ends = constant_ints(n, 2, "ends");
  std::vector<int64_t> axes, steps;
  if (n.has_in(3)) axes = constant_ints(n, 3, "axes");
  else for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (n.has_in(4)) steps = constant_ints(n, 4, "steps");
  else steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    throw n.error("starts, ends, axes and steps differ in length", "starts");
  std::vector<SliceAxis> spec;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    int64_t a = axes[i];
    if (a < -rank || a >= rank) throw n.error(fmt::format("axis {} out of range for rank {}", a, rank), "axes");
    if (a < 0) a += rank;
    const int64_t step = steps[i];
    if (step == 0) throw n.error("step 0", "steps");
    const core::SliceRange r = core::slice_range(starts[i], ends[i], step, xs[static_cast<int>(a)]);  // ONNX's clamping
    const int64_t last = r.start + (r.count ? r.count - 1 : 0) * step;  // (within the dim: no overflow)
    spec.push_back({static_cast<int>(a), r.start, r.count == 0 ? r.start : step > 0 ? last + 1 : last - 1, step});
  }
  if (const Blob* c = constant(n.in(0))) {
    constants_[n.out(0)] = sliced(*c, spec);
    return;
  }
  // One slice layer with ONNX's bounds, clamped when planned; `bounds`, where
  // given, computes them then.
  auto slice_layer = [&](const std::string& bounds) {
    std::vector<int64_t> norm_axes;
    for (const auto& c : spec) norm_axes.push_back(c.axis);
    std::vector<std::string> ins{input(n, 0)};
    if (!bounds.empty()) ins.push_back(bounds);
    Layer l = make("slice", n.name, ins, {n.out(0)});
    l.params = {{"starts", starts}, {"ends", ends}, {"axes", norm_axes}, {"steps", steps}};
    add(std::move(l));
  };
  // Bounds computed from sizes (OPT's positions[:, past:] in a decode step):
  // a slice layer whose starts and ends are taken when a session plans, from
  // a shape_math value of both; held at the import size for now.
  if ((size_dependent(n.in(1)) || size_dependent(n.in(2))) && !(n.has_in(3) && size_dependent(n.in(3))) &&
      !(n.has_in(4) && size_dependent(n.in(4)))) {
    Layer bounds;
    bounds.type = "shape_math";
    bounds.name = fresh_layer(n.name + "/bounds", false);
    bounds.outputs = {fresh_blob(n.out(0) + "/bounds")};
    bounds.params["op"] = std::string("concat");
    bounds.params["axis"] = int64_t{0};
    for (int k = 1; k <= 2; ++k) bounds.inputs.push_back(size_dependent(n.in(k)) ? plan_value(n.in(k)) : value_blob(n.in(k)));
    shapes_[bounds.outputs[0]] = Shape{static_cast<int64_t>(2 * starts.size())};
    const std::string b = bounds.outputs[0];
    graph_.layers.push_back(std::move(bounds));
    return slice_layer(b);
  }
  const bool empty = std::any_of(spec.begin(), spec.end(), [](const SliceAxis& s) {
    return s.step > 0 ? s.end <= s.start : s.end >= s.start;
  });
  // Clamped to the dims when planned (a value-sized input), or a slice to
  // nothing: one slice layer (an empty output runs on cpu/ref, which copies nothing).
  if (value_sized(n.in(0)) || empty) return slice_layer({});
  // At run time: split layers, one cut per sliced axis (see slice_blob and slice_strided).
  std::string cur = n.in(0);
  std::vector<SliceAxis> cuts;
  for (const auto& s : spec) {
    if (s.start != 0 || s.end != xs[s.axis] || s.step != 1) cuts.push_back(s);
  }
  if (cuts.empty()) return add_unary(n, "identity", input(n, 0), n.out(0));
  // A step that does not tile the dim (LeViT's x[:, ::2] of 7 positions), a
  // step over a graph whose sizes may change (Funnel's x[:, ::2] of an odd
  // sequence: the grid of slice_strided is made for one parity), or a long
  // run backwards: one slice layer, which takes any step.
  const bool by_splits = std::all_of(cuts.begin(), cuts.end(), [&](const SliceAxis& c) {
    if (c.step < 0) return (c.start - c.end) <= kMaxTakenRuns;
    if (c.step > 1 && symbolic_inputs_) return false;
    return c.step == 1 || strided_run_offset(xs, c.axis, c.start, (c.end - c.start + c.step - 1) / c.step, c.step) >= 0;
  });
  if (!by_splits) return slice_layer({});
  for (std::size_t i = 0; i < cuts.size(); ++i) {
    const auto& c = cuts[i];
    const std::string next = i + 1 == cuts.size() ? n.out(0) : fresh_blob(fmt::format("{}/axis{}", n.out(0), c.axis));
    if (c.step < 0) {  // going backwards (x[::-1]): the elements taken one by one, in that order
      std::vector<int64_t> idx;
      for (int64_t k = c.start; k > c.end; k += c.step) idx.push_back(k);
      take(n, cur, c.axis, idx, next);
    } else if (c.step == 1) slice_blob(n, cur, c.axis, c.start, c.end, next);
    else slice_strided(n, cur, c.axis, c.start, (c.end - c.start + c.step - 1) / c.step, c.step, next);
    cur = next;
  }
}

void Importer::take(const Node& n, const std::string& x, int axis, const std::vector<int64_t>& idx, const std::string& y) {
  // The runs of consecutive indices sliced and concatenated along the axis.
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t i : idx) {
    if (!runs.empty() && runs.back().second == i) ++runs.back().second;
    else runs.push_back({i, i + 1});
  }
  if (idx.empty() || static_cast<int64_t>(runs.size()) > kMaxTakenRuns)
    throw Unsupported{fmt::format("{} of a run-time tensor taking {} indices in {} runs (at most {})", n.op(), idx.size(),
                                  runs.size(), kMaxTakenRuns)};
  if (runs.size() == 1) return slice_blob(n, x, axis, runs[0].first, runs[0].second, y);
  std::vector<std::string> parts;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    parts.push_back(fresh_blob(fmt::format("{}/run{}", y, r)));
    slice_blob(n, x, axis, runs[r].first, runs[r].second, parts.back());
  }
  Layer c = make("concat", fresh_blob(n.name + "/join"), parts, {y});
  c.params["axis"] = int64_t{axis};
  add(std::move(c));
}

void Importer::slice_strided(const Node& n, const std::string& x, int axis, int64_t start, int64_t count, int64_t step,
                             const std::string& y) {
  // Every step-th element (x[..., 1::2] in patch merging): a run of count*step
  // elements seen as [count, step], of which one column is kept. The run starts
  // j <= start % step before `start`, wherever it fits in the dim.
  const Shape xs = shape_of(n, x);
  const int64_t j = strided_run_offset(xs, axis, start, count, step);
  if (j < 0) throw Unsupported{fmt::format("Slice of a run-time tensor with step {} that does not tile the dim", step)};
  const int64_t base = start - j;
  const std::string run = fresh_blob(y + "/run"), grid = fresh_blob(y + "/grid"), column = fresh_blob(y + "/column");
  slice_blob(n, x, axis, base, base + count * step, run);
  std::vector<int64_t> grid_shape, out_shape = xs.to_vector();
  for (int d = 0; d < xs.rank(); ++d) {
    if (d == axis) {
      grid_shape.push_back(count);
      grid_shape.push_back(step);
    } else {
      grid_shape.push_back(xs[d]);
    }
  }
  out_shape[static_cast<std::size_t>(axis)] = count;
  add_unary(n, "reshape", run, grid, {{"shape", grid_shape}}, "grid");
  slice_blob(n, grid, axis + 1, j, j + 1, column);
  add_unary(n, "reshape", column, y, {{"shape", out_shape}}, "strided");
}

void Importer::gather(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int64_t axis_attr = n.get_int("axis", 0);
  if (axis_attr < -xs.rank() || axis_attr >= xs.rank()) throw n.error("axis out of range", "axis");
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + xs.rank() : axis_attr);
  const Blob* indices = constant(n.in(1));
  if (!indices || (size_dependent(n.in(1)) && !constant(n.in(0))) || value_sized(n.in(0))) {
    // Run-time indices (token ids into an embedding table), or data whose size is
    // known at run time: a gather layer, which checks each index (negative ones from the end).
    const Blob* table = constant(n.in(0));
    const int table_type = table ? elem_type(n.in(0)) : -1;
    const bool integer_table = table_type == onnx::TensorProto::INT8 || table_type == onnx::TensorProto::UINT8;
    // An integer table (ONNX Runtime's quantize_dynamic: int8 rows gathered,
    // then DequantizeLinear) stays a weight in its integers; the pass
    // fold_dequantized_gather gives it the scale and zero point after it.
    std::vector<std::string> inputs;
    if (!integer_table) inputs.push_back(input(n, 0));
    inputs.push_back(input(n, 1));
    Layer l = make("gather", n.name, std::move(inputs), {n.out(0)});
    if (integer_table) {
      // (Read as int64 values: held in their own type, a byte each.)
      const bool is_signed = table_type == onnx::TensorProto::INT8;
      Blob bytes = Blob::allocate(table->shape(), is_signed ? DType::int8 : DType::uint8);
      const std::vector<int64_t> v = to_ints(*table);
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] < (is_signed ? -128 : 0) || v[i] > (is_signed ? 127 : 255))
          throw n.error(fmt::format("value {} lies outside the table's type", v[i]), "data");
        if (is_signed) bytes.data_as<int8_t>()[i] = static_cast<int8_t>(v[i]);
        else bytes.data_as<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
      }
      l.weights["table"] = std::move(bytes);
      value_types_[n.out(0)] = table_type;
    }
    l.params["axis"] = int64_t{axis};
    add(std::move(l));
    return;
  }
  if (const Blob* data = constant(n.in(0))) {
    try {
      constants_[n.out(0)] = gathered(*data, *indices, axis);
    } catch (const Error& e) {
      throw n.error(e.message(), "indices");
    }
    return;
  }
  // Run-time data: a constant index (x[:, 0]) or a run of consecutive ones is a slice.
  std::vector<int64_t> idx = to_ints(*indices);
  const int64_t dim = xs[axis];
  for (auto& i : idx) {
    if (i < -dim || i >= dim) throw n.error(fmt::format("index {} out of range for a dim of {}", i, dim), "indices");
    if (i < 0) i += dim;
  }
  const bool scalar_index = indices->shape().rank() == 0;
  bool run = !idx.empty() && indices->shape().rank() <= 1;
  for (std::size_t i = 1; run && i < idx.size(); ++i) run = idx[i] == idx[i - 1] + 1;
  if (!run) {
    // Any other constant indices: taken along the axis, then the indices' shape put in its place.
    const std::string joined = fresh_blob(n.out(0) + "/joined");
    take(n, n.in(0), axis, idx, joined);
    Shape out;
    for (int d = 0; d < axis; ++d) out.push_back(xs[d]);
    for (int d = 0; d < indices->shape().rank(); ++d) out.push_back(indices->shape()[d]);
    for (int d = axis + 1; d < xs.rank(); ++d) out.push_back(xs[d]);
    if (out.rank() > Shape::max_rank) throw n.error(fmt::format("the output has rank {}", out.rank()), "indices");
    add_unary(n, "reshape", joined, n.out(0), {{"shape", out.to_vector()}}, "index_shape");
    return;
  }
  const int64_t begin = idx.front(), end = idx.back() + 1;
  if (!scalar_index) return slice_blob(n, n.in(0), axis, begin, end, n.out(0));
  const std::string part = fresh_blob(n.out(0) + "/slice");
  slice_blob(n, n.in(0), axis, begin, end, part);
  Shape out;
  for (int d = 0; d < xs.rank(); ++d)
    if (d != axis) out.push_back(xs[d]);
  add_unary(n, "reshape", part, n.out(0), {{"shape", out.to_vector()}}, "drop_axis");
}

void Importer::transpose(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  std::vector<int64_t> reversed;
  for (int i = xs.rank() - 1; i >= 0; --i) reversed.push_back(i);
  const auto perm = n.get_ints("perm", reversed);
  if (const Blob* c = constant(n.in(0))) {
    try {
      constants_[n.out(0)] = transposed(*c, perm);
    } catch (const Error& e) {
      throw n.error(e.message(), "perm");
    }
    return;
  }
  add_unary(n, "transpose", input(n, 0), n.out(0), {{"perm", perm}});
}

void Importer::pad(const Node& n) {
  const std::string mode = n.get_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") throw Unsupported{fmt::format("Pad mode '{}'", mode)};
  auto pads = constant_ints(n, 1, "pads");
  std::vector<int64_t> axes;
  if (n.has_in(3)) {  // opset 18: pads for these axes only, the others unpadded
    const int rank = shape_of(n, n.in(0)).rank();
    axes = constant_ints(n, 3, "axes");
    if (pads.size() != 2 * axes.size())
      throw n.error(fmt::format("{} pads for {} axes", pads.size(), axes.size()), "pads");
    std::vector<int64_t> full(static_cast<std::size_t>(2 * rank), 0);
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const int64_t a = normalized_axis(n, axes[i], rank, "axes");
      full[static_cast<std::size_t>(a)] = pads[i];
      full[static_cast<std::size_t>(a + rank)] = pads[i + axes.size()];
      axes[i] = a;
    }
    pads = std::move(full);
  }
  for (auto p : pads)
    if (p < 0) throw Unsupported{"Pad with negative pads (cropping)"};
  std::map<std::string, Attr> params{{"pads", pads}, {"mode", mode}};
  if (n.has_in(2)) params["value"] = constant_scalar(n, 2, "constant_value");
  // Pads computed from sizes (SEW pads its pooled sequence back to its
  // length): taken when a session plans, as a slice's bounds; these are the
  // import size's.
  if (size_dependent(n.in(1)) && !(n.has_in(3) && size_dependent(n.in(3)))) {
    if (!axes.empty()) params["pad_axes"] = axes;
    Layer l = make("pad", n.name, {input(n, 0), plan_value(n.in(1))}, {n.out(0)});
    l.params = std::move(params);
    return add(std::move(l));
  }
  add_unary(n, "pad", input(n, 0), n.out(0), std::move(params));
}

// TensorScatter (a KV cache written in place): each batch row b of `update`
// written into `past_cache` along `axis` from write_indices[b] (0 without
// them), wrapping past the end in circular mode. A ScatterElements whose
// indices are write_indices[b] + s along the axis: computed here where the
// write indices are constants, else by an add (and a mod) at run time, where
// the scatter checks each index.
void Importer::tensor_scatter(const Node& n) {
  const Shape ps = shape_of(n, n.in(0)), us = shape_of(n, n.in(1));
  const int rank = ps.rank();
  if (rank < 2 || us.rank() != rank)
    throw n.error(fmt::format("past_cache {} and update {} need one rank of at least 2", ps.to_string(), us.to_string()), "update");
  const int axis = normalized_axis(n, n.get_int("axis", -2), rank, "axis");
  if (axis == 0) throw n.error("axis 0 is the batch", "axis");
  for (int d = 0; d < rank; ++d)
    if (d == axis ? us[d] > ps[d] : us[d] != ps[d])
      throw n.error(fmt::format("update {} does not fit past_cache {} along axis {}", us.to_string(), ps.to_string(), axis), "update");
  const std::string mode = n.get_string("mode", "linear");
  if (mode != "linear" && mode != "circular") throw n.error(fmt::format("mode '{}' (linear or circular)", mode), "mode");
  const bool circular = mode == "circular";
  const int64_t max_seq = ps[axis], seq = us[axis], batch = us[0];
  int64_t inner = 1;  // elements after the axis
  for (int d = axis + 1; d < rank; ++d) inner *= us[d];
  // Each element's position along the axis in `update`, and its batch row.
  auto position = [&](int64_t e) { return (e / inner) % seq; };
  auto row = [&](int64_t e) { return e / (us.numel() / batch); };
  const Blob* wi = n.has_in(2) ? constant(n.in(2)) : nullptr;
  if (n.has_in(2) && shape_of(n, n.in(2)) != Shape{batch})
    throw n.error(fmt::format("write_indices {} are not one per batch row ({})", shape_of(n, n.in(2)).to_string(), batch),
                  "write_indices");
  std::string indices;
  if (!n.has_in(2) || wi) {
    const std::vector<int64_t> start = wi ? to_ints(*wi) : std::vector<int64_t>(static_cast<std::size_t>(batch), 0);
    std::vector<float> idx(static_cast<std::size_t>(us.numel()));
    for (int64_t e = 0; e < us.numel(); ++e) {
      const int64_t b = row(e), at = start[static_cast<std::size_t>(b)] + position(e);
      if (start[static_cast<std::size_t>(b)] < 0 || (!circular && at >= max_seq))
        throw n.error(fmt::format("row {} writes {} values from {} into {}", b, seq, start[static_cast<std::size_t>(b)], max_seq),
                      "write_indices");
      idx[static_cast<std::size_t>(e)] = static_cast<float>(circular ? at % max_seq : at);
    }
    indices = as_blob(n, add_constant(n.out(0) + "/indices", float_blob(us, idx)));
  } else {
    std::vector<float> pos(static_cast<std::size_t>(us.numel()));
    for (int64_t e = 0; e < us.numel(); ++e) pos[static_cast<std::size_t>(e)] = static_cast<float>(position(e));
    Shape row_shape(std::vector<int64_t>(static_cast<std::size_t>(rank), 1));
    row_shape[0] = batch;
    const std::string starts = fresh_blob(n.out(0) + "/starts");
    reshape_to(n, input(n, 2), row_shape, starts);
    indices = fresh_blob(n.out(0) + "/indices");
    add(make("add", n.name + "/indices", {starts, as_blob(n, add_constant(n.out(0) + "/positions", float_blob(us, pos)))},
             {indices}));
    if (circular) {
      const std::string wrapped = fresh_blob(n.out(0) + "/wrapped");
      Layer m = make("divmod", n.name + "/wrap", {indices, scalar_constant(n, n.out(0) + "/length", static_cast<double>(max_seq))},
                     {wrapped});
      m.params["op"] = std::string("mod");
      add(std::move(m));
      indices = wrapped;
    }
  }
  Layer l = make("scatter_elements", n.name, {input(n, 0), indices, input(n, 1)}, {n.out(0)});
  l.params["axis"] = int64_t{axis};
  l.params["reduction"] = std::string("none");
  add(std::move(l));
}

void Importer::expand(const Node& n) {
  const auto dims = constant_ints(n, 1, "shape");
  if (dims.size() > static_cast<std::size_t>(Shape::max_rank)) throw n.error("too many dims", "shape");
  Shape target(dims);
  Shape out;
  try {
    out = broadcast(shape_of(n, n.in(0)), target);
  } catch (const Error& e) {
    throw n.error(e.message(), "shape");
  }
  if (const Blob* c = constant(n.in(0))) {
    try {
      constants_[n.out(0)] = expanded(*c, out);
    } catch (const Error& e) {
      throw n.error(e.message(), "shape");
    }
    return;
  }
  // Broadcasting against zeros of the output's shape is an expand.
  try {
    check_folded_growth(out, DType::float32, 0);
  } catch (const Error& e) {
    throw n.error(e.message(), "shape");
  }
  // A target that follows the input sizes is an expand at every size, also
  // where it changes nothing at the import size (BERT's token-type ids to
  // [batch, sequence] at batch 1: an identity there, an expand at batch 2,
  // made the batch fixed).
  if (out == shape_of(n, n.in(0)) && !size_dependent(n.in(1))) return add_unary(n, "identity", input(n, 0), n.out(0));
  if (size_dependent(n.in(1))) {
    // A target that follows the input's size (a QOperator YOLOv8's anchor
    // grid, expanded on integers): its zeros are made at each size, as a
    // shape_math layer, not frozen at the import size.
    Layer z;
    z.type = "shape_math";
    z.name = fresh_layer(n.name + "/zeros", false);
    z.outputs = {fresh_blob(n.out(0) + "/zeros")};
    z.params["op"] = std::string("constant_of_shape");
    z.weights["value"] = float_blob({}, {0.0f});
    z.inputs = {plan_value(n.in(1))};
    shapes_[z.outputs[0]] = target;
    const std::string zeros = z.outputs[0];
    graph_.layers.push_back(std::move(z));
    add(make("add", n.name, {input(n, 0), zeros}, {n.out(0)}));
    return;
  }
  // Zeros only along the dims the target widens (1 where the input gives the
  // size): a dim that follows the input's size stays free (GPT-J's dynamo
  // export expands its gathered sin/cos rows over a constant [.., 1, 2]).
  const Shape xs = shape_of(n, n.in(0));
  std::vector<int64_t> widened(static_cast<std::size_t>(out.rank()), 1);
  for (int d = 0; d < out.rank(); ++d) {
    const int xd = d - (out.rank() - xs.rank());
    if (xd < 0 || xs[xd] != out[d]) widened[static_cast<std::size_t>(d)] = out[d];
  }
  const std::string zeros = add_constant(n.out(0) + "/zeros", Blob::allocate(Shape(widened)));
  add(make("add", n.name, {input(n, 0), as_blob(n, zeros)}, {n.out(0)}));
}

void Importer::constant_node(const Node& n) {
  const std::string& y = n.out(0);
  if (const auto* a = n.attr("value")) {
    if (a->type() != onnx::AttributeProto::TENSOR) throw n.error("expected a tensor", "value");
    constants_[y] = read_tensor(a->t(), src_, n.name, "value");
    onnx_types_[y] = a->t().data_type();
  } else if (n.has("value_float")) {
    constants_[y] = float_blob({}, {static_cast<float>(n.get_float("value_float"))});
  } else if (const auto* fs = n.attr("value_floats")) {
    constants_[y] = float_blob(Shape{fs->floats_size()}, {fs->floats().begin(), fs->floats().end()});
  } else if (n.has("value_int")) {
    constants_[y] = int_blob({}, {n.get_int("value_int")});
  } else if (n.has("value_ints")) {
    auto v = n.get_ints("value_ints");
    constants_[y] = int_blob(Shape{static_cast<int64_t>(v.size())}, v);
  } else {
    throw Unsupported{"Constant of a sparse tensor or strings"};
  }
}

void Importer::shape(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  int64_t start = n.get_int("start", 0), end = n.get_int("end", rank);  // opset 15
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<int64_t> dims(xs.begin() + start, xs.begin() + end);
  constants_[n.out(0)] = int_blob(Shape{static_cast<int64_t>(dims.size())}, dims);
}

void Importer::size(const Node& n) { constants_[n.out(0)] = int_blob({}, {shape_of(n, n.in(0)).numel()}); }

void Importer::constant_of_shape(const Node& n) {
  const auto dims = constant_ints(n, 0, "input");
  if (dims.size() > static_cast<std::size_t>(Shape::max_rank)) throw n.error("too many dims", "input");
  for (auto d : dims)
    if (d < 0) throw n.error("negative dim", "input");
  Blob value = float_blob({}, {0.0f});
  if (const auto* a = n.attr("value")) {
    if (a->type() != onnx::AttributeProto::TENSOR) throw n.error("expected a tensor", "value");
    value = read_tensor(a->t(), src_, n.name, "value");
    if (value.numel() != 1) throw n.error("expected one value", "value");
  }
  try {
    constants_[n.out(0)] = expanded(reshaped(value, Shape{}), Shape(dims));
  } catch (const Error& e) {
    throw n.error(e.message(), "input");
  }
}

void Importer::range(const Node& n) {
  const Blob& s = require_constant(n, 0, "start");
  const Blob& l = require_constant(n, 1, "limit");
  const Blob& d = require_constant(n, 2, "delta");
  try {
    constants_[n.out(0)] = core::arange(s, l, d, int64_t{1} << 28);
  } catch (const Error& e) {
    throw n.error(e.message(), "limit");
  }
}

namespace {
/// Row-major strides of a shape.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(static_cast<std::size_t>(s.rank()), 1);
  for (int d = s.rank() - 2; d >= 0; --d) st[static_cast<std::size_t>(d)] = st[static_cast<std::size_t>(d + 1)] * s[d + 1];
  return st;
}

/// GatherElements' and ScatterElements' rule: element i of `indices` (shape
/// `is`, data's rank) addresses data at its own coordinates, with the one along
/// `axis` replaced by its value (negative from the end). The data positions,
/// flattened; errors name the node's `indices`.
std::vector<int64_t> element_positions(const Node& n, const Shape& ds, const Shape& is, const std::vector<int64_t>& idx, int axis) {
  if (is.rank() != ds.rank() || ds.rank() == 0)
    throw n.error(fmt::format("indices {} and data {} differ in rank", is.to_string(), ds.to_string()), "indices");
  for (int d = 0; d < ds.rank(); ++d)
    if (d != axis && is[d] > ds[d])
      throw n.error(fmt::format("indices {} exceed data {} in dim {}", is.to_string(), ds.to_string(), d), "indices");
  const std::vector<int64_t> stride = strides_of(ds);
  std::vector<int64_t> flat(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    int64_t rest = static_cast<int64_t>(i), pos = 0;
    for (int d = is.rank() - 1; d >= 0; --d) {
      int64_t c = rest % is[d];
      rest /= is[d];
      if (d == axis) {
        c = idx[i] < 0 ? idx[i] + ds[axis] : idx[i];
        if (c < 0 || c >= ds[axis]) throw n.error(fmt::format("index {} out of range for a dim of {}", idx[i], ds[axis]), "indices");
      }
      pos += c * stride[static_cast<std::size_t>(d)];
    }
    flat[i] = pos;
  }
  return flat;
}
}  // namespace

// GatherElements with constant indices: each output value's position in the
// input, flattened, read by one take layer.
void Importer::gather_elements(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const Blob* indices = constant(n.in(1));
  if (!indices || size_dependent(n.in(1))) {
    Layer l = make("gather_elements", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
    l.params["axis"] = n.get_int("axis", 0);
    add(std::move(l));
    return;
  }
  const Shape is = indices->shape();
  if (is.rank() != xs.rank() || xs.rank() == 0)
    throw n.error(fmt::format("indices {} and data {} differ in rank", is.to_string(), xs.to_string()), "indices");
  const int axis = normalized_axis(n, n.get_int("axis", 0), xs.rank(), "axis");
  Layer l = make("take", n.name, {input(n, 0)}, {n.out(0)});
  l.weights["indices"] = int_blob(is, element_positions(n, xs, is, to_ints(*indices), axis));
  add(std::move(l));
}

// Trilu: the kept triangle of the last two dims (k diagonals above or below)
// chosen by a constant mask: where(mask, x, 0).
void Importer::trilu(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() < 2) throw n.error(fmt::format("input {} has fewer than 2 dims", xs.to_string()), "input");
  int64_t k = 0;
  if (n.has_in(1)) {
    const Blob* kb = constant(n.in(1));
    if (!kb || kb->numel() != 1) throw Unsupported{"Trilu with k computed at run time"};
    k = to_ints(*kb)[0];
  }
  const bool upper = n.get_int("upper", 1) != 0;
  const int64_t rows = xs[xs.rank() - 2], cols = xs[xs.rank() - 1];
  std::vector<float> mask(static_cast<std::size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) mask[static_cast<std::size_t>(i * cols + j)] = (upper ? j - i >= k : j - i <= k) ? 1.f : 0.f;
  const std::string m = as_blob(n, add_constant(n.out(0) + "/mask", float_blob(Shape{rows, cols}, mask)));
  add(make("where", n.name, {m, input(n, 0), scalar_constant(n, n.out(0) + "/zero", 0.0)}, {n.out(0)}));
}

void Importer::non_zero(const Node& n) {
  add_unary(n, "non_zero", input(n, 0), n.out(0));
  value_types_[n.out(0)] = onnx::TensorProto::INT64;
  symbolic_inputs_ = true;
  value_sized_.insert(n.out(0));
}

// Unique: how many distinct values there are is known once it has run.
void Importer::unique(const Node& n) {
  std::vector<std::string> outs;
  for (int k = 0; k < 4; ++k) outs.push_back(k < n.num_outputs() && !n.out(k).empty() ? n.out(k) : fresh_blob(fmt::format("{}/unique{}", n.name, k)));
  Layer l = make("unique", n.name, {input(n, 0)}, outs);
  if (n.has("axis")) l.params["axis"] = n.get_int("axis");
  l.params["sorted"] = n.get_int("sorted", 1);
  add(std::move(l));
  for (int k = 0; k < 4; ++k) {
    if (k > 0) value_types_[outs[static_cast<std::size_t>(k)]] = onnx::TensorProto::INT64;
    value_sized_.insert(outs[static_cast<std::size_t>(k)]);
  }
  if (auto t = value_types_.find(n.in(0)); t != value_types_.end()) value_types_[outs[0]] = t->second;
  symbolic_inputs_ = true;
}

// SpaceToDepth and DepthToSpace (DCR or CRD) as reshape, transpose, reshape.
void Importer::space_depth(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 4) throw n.error(fmt::format("input {} is not 4-D [N, C, H, W]", xs.to_string()), "input");
  const int64_t b = n.get_int("blocksize");
  if (b < 1) throw n.error(fmt::format("blocksize {} is below 1", b), "blocksize");
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  std::vector<int64_t> split, perm, out;
  if (n.op() == "SpaceToDepth") {
    if (H % b || W % b) throw n.error(fmt::format("input {} is not divisible by blocksize {}", xs.to_string(), b), "blocksize");
    split = {N, C, H / b, b, W / b, b};
    const std::string mode = n.get_string("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") throw n.error(fmt::format("mode '{}' is not DCR or CRD", mode), "mode");
    perm = mode == "DCR" ? std::vector<int64_t>{0, 3, 5, 1, 2, 4} : std::vector<int64_t>{0, 1, 3, 5, 2, 4};
    out = {N, C * b * b, H / b, W / b};
  } else {
    if (C % (b * b)) throw n.error(fmt::format("channels {} are not divisible by blocksize^2 {}", C, b * b), "blocksize");
    const std::string mode = n.get_string("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") throw n.error(fmt::format("mode '{}' is not DCR or CRD", mode), "mode");
    if (mode == "DCR") {
      split = {N, b, b, C / (b * b), H, W};
      perm = {0, 3, 4, 1, 5, 2};
    } else {
      split = {N, C / (b * b), b, b, H, W};
      perm = {0, 1, 4, 2, 5, 3};
    }
    out = {N, C / (b * b), H * b, W * b};
  }
  const std::string y = n.out(0), a = fresh_blob(y + "/blocks"), t = fresh_blob(y + "/moved");
  add_unary(n, "reshape", input(n, 0), a, {{"shape", split}}, "blocks");
  add_unary(n, "transpose", a, t, {{"perm", perm}}, "move");
  add_unary(n, "reshape", t, y, {{"shape", out}});
}

// ScatterND and ScatterElements with constant indices. Each update lands at a
// data position computed now. Without a reduction the output takes from
// [data, updates] flattened (a take layer; later updates win), or, with
// constant updates, where(mask, updates, data); with a reduction and constant
// updates, data op U where U folds the updates per position (the op's identity elsewhere).
void Importer::scatter(const Node& n) {
  if (all_constant(n) && n.op() == "ScatterND") return constant_math(n);
  const Shape ds = shape_of(n, n.in(0));
  const Blob* indices = constant(n.in(1));
  if (n.op() == "ScatterElements" && (!indices || value_sized(n.in(0)) || value_sized(n.in(2)))) {
    // Indices computed at run time (torchvision's RoI levels merged): a layer that checks each.
    Layer l = make("scatter_elements", n.name, {input(n, 0), input(n, 1), input(n, 2)}, {n.out(0)});
    l.params["axis"] = n.get_int("axis", 0);
    l.params["reduction"] = n.get_string("reduction", "none");
    return add(std::move(l));
  }
  if (n.op() == "ScatterND" && (!indices || size_dependent(n.in(1)) || value_sized(n.in(0)) || value_sized(n.in(2)))) {
    // Indices computed at run time or from the sizes (Longformer's chunked
    // attention): a layer that checks each tuple.
    Layer l = make("scatter_nd", n.name, {input(n, 0), input(n, 1), input(n, 2)}, {n.out(0)});
    l.params["reduction"] = n.get_string("reduction", "none");
    return add(std::move(l));
  }
  if (!indices) throw Unsupported{fmt::format("{} with indices computed at run time", n.op())};
  const Shape is = indices->shape(), us = shape_of(n, n.in(2));
  const std::vector<int64_t> idx = to_ints(*indices), dst = strides_of(ds);
  std::vector<int64_t> target;  // data position of each update element
  if (n.op() == "ScatterElements") {
    const int axis = normalized_axis(n, n.get_int("axis", 0), std::max(ds.rank(), 1), "axis");
    if (is != us || is.rank() != ds.rank())
      throw n.error(fmt::format("indices {} and updates {} must match and have data {}'s rank", is.to_string(), us.to_string(),
                                ds.to_string()), "indices");
    target = element_positions(n, ds, is, idx, axis);
  } else {
    if (is.rank() < 1) throw n.error("indices need at least one dim", "indices");
    const int64_t k = is[is.rank() - 1];
    if (k < 1 || k > ds.rank()) throw n.error(fmt::format("index tuples of {} for data {}", k, ds.to_string()), "indices");
    Shape want;
    for (int d = 0; d < is.rank() - 1; ++d) want.push_back(is[d]);
    int64_t slice = 1;
    for (int d = static_cast<int>(k); d < ds.rank(); ++d) want.push_back(ds[d]), slice *= ds[d];
    if (us != want) throw n.error(fmt::format("updates {} are not {}", us.to_string(), want.to_string()), "updates");
    for (std::size_t t = 0; t * static_cast<std::size_t>(k) < idx.size(); ++t) {
      int64_t base = 0;
      for (int64_t j = 0; j < k; ++j) {
        int64_t c = idx[t * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)];
        const int64_t dim = ds[static_cast<int>(j)];
        if (c < 0) c += dim;
        if (c < 0 || c >= dim) throw n.error(fmt::format("index {} out of range for a dim of {}", c, dim), "indices");
        base += c * dst[static_cast<std::size_t>(j)];
      }
      for (int64_t e = 0; e < slice; ++e) target.push_back(base + e);
    }
  }
  const std::string reduction = n.get_string("reduction", "none");
  const int64_t total = ds.numel();
  const std::string y = n.out(0);
  if (const Blob* u = constant(n.in(2))) {
    const std::vector<double> uv = to_doubles(*u);
    const double inf = std::numeric_limits<double>::infinity();
    const double identity = reduction == "mul" ? 1.0 : reduction == "max" ? -inf : reduction == "min" ? inf : 0.0;
    if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" && reduction != "min")
      throw n.error(fmt::format("reduction '{}' (supported: none, add, mul, max, min)", reduction), "reduction");
    std::vector<double> folded(static_cast<std::size_t>(total), identity);
    std::vector<float> mask(static_cast<std::size_t>(total), 0.f);
    for (std::size_t i = 0; i < target.size(); ++i) {
      double& f = folded[static_cast<std::size_t>(target[i])];
      const double v = uv[i];
      f = reduction == "add" ? f + v : reduction == "mul" ? f * v : reduction == "max" ? std::max(f, v)
        : reduction == "min" ? std::min(f, v) : v;
      mask[static_cast<std::size_t>(target[i])] = 1.f;
    }
    const std::string values = as_blob(n, add_constant(y + "/updates", float_blob(ds, std::vector<float>(folded.begin(), folded.end()))));
    if (reduction == "none") {
      add(make("where", n.name, {as_blob(n, add_constant(y + "/mask", float_blob(ds, mask))), values, input(n, 0)}, {y}));
      return;
    }
    static const std::map<std::string, std::string> ops = {{"add", "add"}, {"mul", "mul"}, {"max", "max"}, {"min", "min"}};
    add(make(ops.at(reduction), n.name, {input(n, 0), values}, {y}));
    return;
  }
  if (reduction != "none") throw Unsupported{fmt::format("{} with a reduction of updates computed at run time", n.op())};
  std::vector<int64_t> source(static_cast<std::size_t>(total));
  std::iota(source.begin(), source.end(), int64_t{0});
  for (std::size_t i = 0; i < target.size(); ++i) source[static_cast<std::size_t>(target[i])] = total + static_cast<int64_t>(i);
  take_from_two(n, input(n, 0), input(n, 2), y, ds, source);
}

void Importer::take_from_two(const Node& n, const std::string& a, const std::string& b, const std::string& y, const Shape& shape,
                             const std::vector<int64_t>& positions) {
  const std::string af = fresh_blob(y + "/first_flat"), bf = fresh_blob(y + "/second_flat"), both = fresh_blob(y + "/both");
  add_unary(n, "reshape", a, af, {{"shape", std::vector<int64_t>{shape_of(n, a).numel()}}}, "first_flat");
  add_unary(n, "reshape", b, bf, {{"shape", std::vector<int64_t>{shape_of(n, b).numel()}}}, "second_flat");
  Layer c = make("concat", n.name + "/both", {af, bf}, {both});
  c.params["axis"] = int64_t{0};
  add(std::move(c));
  Layer t = make("take", n.name, {both}, {y});
  t.weights["indices"] = int_blob(shape, positions);
  add(std::move(t));
}

// GatherND with constant indices: the data positions of every output value, one take.
void Importer::gather_nd(const Node& n) {
  const Shape ds = shape_of(n, n.in(0));
  const Blob* indices = constant(n.in(1));
  if (!indices || size_dependent(n.in(1))) {  // indices computed at run time (or from the input sizes)
    Layer l = make("gather_nd", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
    l.params["batch_dims"] = n.get_int("batch_dims", 0);
    add(std::move(l));
    return;
  }
  const Shape is = indices->shape();
  const int64_t b = n.get_int("batch_dims", 0);
  if (is.rank() < 1 || b < 0 || b >= std::min(is.rank(), ds.rank()))
    throw n.error(fmt::format("batch_dims {} for indices {} and data {}", b, is.to_string(), ds.to_string()), "batch_dims");
  const int64_t k = is[is.rank() - 1];
  if (k < 1 || b + k > ds.rank()) throw n.error(fmt::format("index tuples of {} for data {}", k, ds.to_string()), "indices");
  for (int d = 0; d < b; ++d)
    if (is[d] != ds[d]) throw n.error(fmt::format("batch dims of indices {} and data {} differ", is.to_string(), ds.to_string()), "indices");
  Shape out;
  for (int d = 0; d < is.rank() - 1; ++d) out.push_back(is[d]);
  int64_t slice = 1;
  for (int d = static_cast<int>(b + k); d < ds.rank(); ++d) out.push_back(ds[d]), slice *= ds[d];
  int64_t batch = 1;
  for (int d = 0; d < b; ++d) batch *= ds[d];
  const std::vector<int64_t> idx = to_ints(*indices), dst = strides_of(ds);
  const int64_t tuples = static_cast<int64_t>(idx.size()) / k, per_batch = tuples / batch, batch_stride = b ? dst[static_cast<std::size_t>(b - 1)] : 0;
  std::vector<int64_t> flat;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t base = (t / per_batch) * batch_stride;
    for (int64_t j = 0; j < k; ++j) {
      int64_t c = idx[static_cast<std::size_t>(t * k + j)];
      const int64_t dim = ds[static_cast<int>(b + j)];
      if (c < 0) c += dim;
      if (c < 0 || c >= dim) throw n.error(fmt::format("index {} out of range for a dim of {}", c, dim), "indices");
      base += c * dst[static_cast<std::size_t>(b + j)];
    }
    for (int64_t e = 0; e < slice; ++e) flat.push_back(base + e);
  }
  Layer l = make("take", n.name, {input(n, 0)}, {n.out(0)});
  l.weights["indices"] = int_blob(out, flat);
  add(std::move(l));
}

// OneHot: (indices == position along the new axis) as a mask, then
// where(mask, on, off); negative indices count from depth's end.
void Importer::one_hot(const Node& n) {
  const Shape is = shape_of(n, n.in(0));
  const Blob* depth_b = constant(n.in(1));
  const Blob* values = constant(n.in(2));
  if (!depth_b || depth_b->numel() != 1 || !values || values->numel() != 2)
    throw Unsupported{"OneHot with depth or values computed at run time"};
  const double depth_d = to_doubles(*depth_b)[0];
  if (!(depth_d >= 1) || depth_d > 1e7) throw n.error(fmt::format("depth {} outside 1..1e7", depth_d), "depth");
  const auto depth = static_cast<int64_t>(depth_d);
  const int rank = is.rank() + 1;
  const int axis = normalized_axis(n, n.get_int("axis", -1), rank, "axis");
  const std::string y = n.out(0), x = fresh_blob(y + "/indices"), pos = fresh_blob(y + "/positive"), neg = fresh_blob(y + "/negative"),
                    mask = fresh_blob(y + "/mask");
  Shape xs;
  for (int d = 0; d < is.rank(); ++d) {
    if (d == axis) xs.push_back(1);
    xs.push_back(is[d]);
  }
  if (axis == is.rank()) xs.push_back(1);
  if (constant(n.in(0))) constants_[x] = reshaped(*constant(n.in(0)), xs);
  else add_unary(n, "reshape", input(n, 0), x, {{"shape", xs.to_vector()}}, "indices");
  Shape ps{depth};
  for (int d = axis + 1; d < rank; ++d) ps.push_back(1);
  std::vector<float> p(static_cast<std::size_t>(depth)), q(static_cast<std::size_t>(depth));
  for (int64_t i = 0; i < depth; ++i) p[static_cast<std::size_t>(i)] = static_cast<float>(i), q[static_cast<std::size_t>(i)] = static_cast<float>(i - depth);
  for (auto [out, vals, what] : {std::tuple{pos, &p, "positive"}, std::tuple{neg, &q, "negative"}}) {
    Layer c = make("compare", fmt::format("{}/{}", n.name, what), {as_blob(n, x), as_blob(n, add_constant(fmt::format("{}/{}_positions", y, what), float_blob(ps, *vals)))}, {out});
    c.params["op"] = std::string("equal");
    add(std::move(c));
  }
  Layer o = make("logical", n.name + "/either", {pos, neg}, {mask});
  o.params["op"] = std::string("or");
  add(std::move(o));
  const std::vector<double> v = to_doubles(*values);
  add(make("where", n.name, {mask, scalar_constant(n, y + "/on", v[1]), scalar_constant(n, y + "/off", v[0])}, {y}));
  if (auto t = onnx_types_.find(n.in(2)); t != onnx_types_.end() && t->second != onnx::TensorProto::FLOAT) value_types_[y] = t->second;
}

// EyeLike: a constant of the input's (static) shape, ones on diagonal k.
void Importer::eye_like(const Node& n) {
  const Shape s = shape_of(n, n.in(0));
  if (s.rank() != 2) throw n.error(fmt::format("input {} is not 2-D", s.to_string()), "input");
  constants_[n.out(0)] = core::eye(s, n.get_int("k", 0), DType::float32);
}

void Importer::take_positions(const Node& n, const std::string& y, const Shape& shape, const std::vector<int64_t>& positions) {
  if (const Blob* c = constant(n.in(0))) {
    const std::vector<double> v = to_doubles(*c);
    std::vector<float> out;
    for (int64_t p : positions) out.push_back(static_cast<float>(v[static_cast<std::size_t>(p)]));
    constants_[y] = float_blob(shape, out);
    return;
  }
  Layer l = make("take", n.name, {input(n, 0)}, {y});
  l.weights["indices"] = int_blob(shape, positions);
  add(std::move(l));
}

// CenterCropPad: each named axis cropped or zero-padded about its centre to the size given.
void Importer::center_crop_pad(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const std::vector<int64_t> target = constant_ints(n, 1, "shape");
  std::vector<int64_t> axes = n.get_ints("axes", std::vector<int64_t>{});
  for (auto& a : axes) a = normalized_axis(n, a, xs.rank(), "axes");
  if (axes.empty())
    for (int d = 0; d < xs.rank(); ++d) axes.push_back(d);
  if (target.size() != axes.size()) throw n.error(fmt::format("{} sizes for {} axes", target.size(), axes.size()), "shape");
  Shape out = xs;
  std::vector<int64_t> offset(static_cast<std::size_t>(xs.rank()), 0);  // output index - input index, per dim
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const int a = static_cast<int>(axes[i]);
    if (target[i] < 0 || target[i] > (int64_t{1} << 31)) throw n.error(fmt::format("size {} outside 0..2^31", target[i]), "shape");
    out[a] = target[i];
    offset[static_cast<std::size_t>(a)] = target[i] >= xs[a] ? (target[i] - xs[a]) / 2 : -((xs[a] - target[i]) / 2);
  }
  // Every output position reads an input position or a zero: the input and one zero, taken.
  double points = 1;
  for (int d = 0; d < out.rank(); ++d) points *= static_cast<double>(out[d]);
  if (points > double(int64_t{1} << 40)) throw n.error(fmt::format("output {} is too large", out.to_string()), "shape");
  try {
    check_folded_growth(out, DType::int64, static_cast<std::size_t>(xs.numel()) * sizeof(float));  // the positions table
  } catch (const Error& e) {
    throw n.error(e.message(), "shape");
  }
  const int64_t total = xs.numel();
  std::vector<int64_t> positions(static_cast<std::size_t>(out.numel()));
  const std::vector<int64_t> in_strides = strides_of(xs);
  for (int64_t o = 0; o < out.numel(); ++o) {
    int64_t rest = o, pos = 0;
    bool inside = true;
    for (int d = out.rank() - 1; d >= 0; --d) {
      const int64_t c = rest % out[d] - offset[static_cast<std::size_t>(d)];
      rest /= out[d];
      inside = inside && c >= 0 && c < xs[d];
      pos += c * in_strides[static_cast<std::size_t>(d)];
    }
    positions[static_cast<std::size_t>(o)] = inside ? pos : total;
  }
  const std::string zero = as_blob(n, add_constant(n.out(0) + "/zero", float_blob(Shape{1}, {0.0f})));
  take_from_two(n, input(n, 0), zero, n.out(0), out, positions);
}

// Compress with a constant condition: the kept slices along the axis (or of the flattened input).
void Importer::compress(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const Blob* cond = constant(n.in(1));
  if (!cond) throw Unsupported{"Compress with a condition computed at run time"};
  const std::vector<int64_t> keep = to_ints(*cond);
  std::vector<int64_t> positions;
  Shape out;
  if (!n.has("axis")) {
    for (std::size_t i = 0; i < keep.size() && static_cast<int64_t>(i) < xs.numel(); ++i)
      if (keep[i]) positions.push_back(static_cast<int64_t>(i));
    out = Shape{static_cast<int64_t>(positions.size())};
  } else {
    const int axis = normalized_axis(n, n.get_int("axis"), xs.rank(), "axis");
    std::vector<int64_t> kept;
    for (std::size_t i = 0; i < keep.size() && static_cast<int64_t>(i) < xs[axis]; ++i)
      if (keep[i]) kept.push_back(static_cast<int64_t>(i));
    out = xs;
    out[axis] = static_cast<int64_t>(kept.size());
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < xs.rank(); ++d) (d < axis ? outer : d > axis ? inner : outer) *= d == axis ? 1 : xs[d];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k : kept)
        for (int64_t i = 0; i < inner; ++i) positions.push_back((o * xs[axis] + k) * inner + i);
  }
  if (positions.empty()) throw Unsupported{"Compress that keeps nothing (an empty tensor)"};
  take_positions(n, n.out(0), out, positions);
}

// ReverseSequence with constant lengths: the first len[b] steps of each batch entry reversed.
void Importer::reverse_sequence(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() < 2) throw n.error(fmt::format("input {} has fewer than 2 dims", xs.to_string()), "input");
  const Blob* lens_b = constant(n.in(1));
  if (!lens_b) throw Unsupported{"ReverseSequence with lengths computed at run time"};
  const std::vector<int64_t> lens = to_ints(*lens_b);
  const int batch_axis = static_cast<int>(n.get_int("batch_axis", 1)), time_axis = static_cast<int>(n.get_int("time_axis", 0));
  if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0)))
    throw n.error("batch_axis and time_axis must be 0 and 1", "batch_axis");
  if (static_cast<int64_t>(lens.size()) != xs[batch_axis])
    throw n.error(fmt::format("{} lengths for a batch of {}", lens.size(), xs[batch_axis]), "sequence_lens");
  int64_t inner = 1;
  for (int d = 2; d < xs.rank(); ++d) inner *= xs[d];
  std::vector<int64_t> positions(static_cast<std::size_t>(xs.numel()));
  for (int64_t i0 = 0; i0 < xs[0]; ++i0)
    for (int64_t i1 = 0; i1 < xs[1]; ++i1) {
      const int64_t b = batch_axis == 0 ? i0 : i1, t = batch_axis == 0 ? i1 : i0, len = lens[static_cast<std::size_t>(b)];
      if (len < 0 || len > xs[time_axis]) throw n.error(fmt::format("length {} outside 0..{}", len, xs[time_axis]), "sequence_lens");
      const int64_t src_t = t < len ? len - 1 - t : t;
      const int64_t s0 = batch_axis == 0 ? i0 : src_t, s1 = batch_axis == 0 ? src_t : i1;
      for (int64_t e = 0; e < inner; ++e)
        positions[static_cast<std::size_t>((i0 * xs[1] + i1) * inner + e)] = (s0 * xs[1] + s1) * inner + e;
    }
  take_positions(n, n.out(0), xs, positions);
}

}  // namespace onnx_import
}  // namespace softneuro
