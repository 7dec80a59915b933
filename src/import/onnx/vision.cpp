// ONNX import: Image operators: Resize, RoiAlign, NonMaxSuppression, AffineGrid, GridSample.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

// Resize (opset 11+): inputs X, roi, scales, sizes (roi and scales optional from 13).
void Importer::resize(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const int rank = xs.rank();
  if (rank != 4) throw Unsupported{fmt::format("Resize of a rank-{} tensor (images [N,C,H,W] only)", rank)};
  const std::string mode = n.get_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic") throw Unsupported{fmt::format("Resize mode '{}'", mode)};
  const bool antialias = n.get_int("antialias", 0) != 0 && mode != "nearest";  // (nearest ignores it)
  if (mode == "linear" && !antialias && n.get_int("exclude_outside", 0) != 0)
    throw Unsupported{"linear Resize with exclude_outside (without antialias its two taps are inside)"};
  std::map<std::string, Attr> params{
      {"mode", mode},
      {"coordinate_transformation_mode", n.get_string("coordinate_transformation_mode", "half_pixel")},
      {"nearest_mode", n.get_string("nearest_mode", "round_prefer_floor")}};
  if (mode == "cubic") params["cubic_coeff_a"] = n.get_float("cubic_coeff_a", -0.75);
  if (mode == "cubic" || antialias) params["exclude_outside"] = n.get_int("exclude_outside", 0);
  if (antialias) params["antialias"] = int64_t{1};
  // axes: scales, sizes and roi name only these dims; the others keep their size.
  std::vector<int64_t> axes = n.get_ints("axes", std::vector<int64_t>{});
  for (auto& a : axes) a = normalized_axis(n, a, rank, "axes");
  if (axes.empty()) {
    axes.resize(static_cast<std::size_t>(rank));
    std::iota(axes.begin(), axes.end(), int64_t{0});
  }
  auto full = [&](const std::vector<double>& given, double fill, const char* field) {
    if (given.size() != axes.size())
      throw n.error(fmt::format("{} values for {} axes", given.size(), axes.size()), field);
    std::vector<double> out(static_cast<std::size_t>(rank), fill);
    for (std::size_t i = 0; i < axes.size(); ++i) out[static_cast<std::size_t>(axes[i])] = given[i];
    return out;
  };
  auto present = [&](int k) { return n.has_in(k) && shape_of(n, n.in(k)).numel() > 0; };
  if (present(3)) {
    std::vector<double> given;
    for (int64_t v : constant_ints(n, 3, "sizes")) given.push_back(static_cast<double>(v));
    const std::string policy = n.get_string("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") {  // one scale for every named axis: the largest that fits, or the smallest that covers
      if (policy != "not_larger" && policy != "not_smaller")
        throw n.error(fmt::format("keep_aspect_ratio_policy '{}' (stretch, not_larger, not_smaller)", policy), "keep_aspect_ratio_policy");
      double scale = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0;
      for (std::size_t i = 0; i < axes.size(); ++i) {
        const double r = given[i] / static_cast<double>(xs[static_cast<int>(axes[i])]);
        scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
      }
      for (std::size_t i = 0; i < axes.size(); ++i)
        given[i] = std::round(scale * static_cast<double>(xs[static_cast<int>(axes[i])]));  // half away from zero, as ONNX's reference
    }
    std::vector<double> in_dims;
    for (int d = 0; d < rank; ++d) in_dims.push_back(static_cast<double>(xs[d]));
    std::vector<double> sizes = full(given, 0, "sizes");
    std::vector<int64_t> out;
    for (int d = 0; d < rank; ++d)
      out.push_back(static_cast<int64_t>(std::find(axes.begin(), axes.end(), d) != axes.end() ? sizes[static_cast<std::size_t>(d)] : in_dims[static_cast<std::size_t>(d)]));
    params["sizes"] = out;
  } else if (present(2)) {
    params["scales"] = full(to_doubles(require_constant(n, 2, "scales")), 1.0, "scales");
  } else {
    throw n.error("neither scales nor sizes given", "scales");
  }
  if (std::get<std::string>(params["coordinate_transformation_mode"]) == "tf_crop_and_resize") {
    if (!present(1)) throw n.error("tf_crop_and_resize needs roi", "roi");
    const std::vector<double> roi = to_doubles(require_constant(n, 1, "roi"));
    if (roi.size() != 2 * axes.size()) throw n.error(fmt::format("roi has {} values for {} axes", roi.size(), axes.size()), "roi");
    const std::vector<double> starts = full({roi.begin(), roi.begin() + static_cast<std::ptrdiff_t>(axes.size())}, 0.0, "roi"),
                              ends = full({roi.begin() + static_cast<std::ptrdiff_t>(axes.size()), roi.end()}, 1.0, "roi");
    std::vector<double> all = starts;
    all.insert(all.end(), ends.begin(), ends.end());
    params["roi"] = all;
    params["extrapolation_value"] = n.get_float("extrapolation_value", 0.0);
  }
  add_unary(n, "resize", input(n, 0), n.out(0), std::move(params));
}

// NonMaxSuppression: its limit and thresholds are constants (the exporters
// write them so); the number of boxes kept is known only at run time
// (core/stages.hpp).
void Importer::non_max_suppression(const Node& n) {
  Layer l = make("non_max_suppression", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
  auto scalar = [&](int k, const char* field) -> std::optional<double> {
    if (!n.has_in(k)) return std::nullopt;
    const Blob& c = require_constant(n, k, field);
    if (c.numel() != 1) throw n.error(fmt::format("{} has {} values, not one", field, c.numel()), field);
    return to_doubles(c)[0];
  };
  const auto most = scalar(2, "max_output_boxes_per_class");
  // (a limit beyond the int64 range, e.g. 2^63 - 1 read through a double, means none)
  l.params["max_output_boxes_per_class"] =
      most ? (*most >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(*most)) : int64_t{0};
  if (const auto iou = scalar(3, "iou_threshold")) l.params["iou_threshold"] = *iou;
  if (const auto score = scalar(4, "score_threshold")) l.params["score_threshold"] = *score;
  l.params["center_point_box"] = n.get_int("center_point_box", 0);
  add(std::move(l));
  value_types_[n.out(0)] = onnx::TensorProto::INT64;
  symbolic_inputs_ = true;
  value_sized_.insert(n.out(0));
}

// RoiAlign: opset 16 added coordinate_transformation_mode (half_pixel by
// default); before it, every RoiAlign computed output_half_pixel.
void Importer::roi_align(const Node& n) {
  Layer l = make("roi_align", n.name, {input(n, 0), input(n, 1), input(n, 2)}, {n.out(0)});
  l.params = {{"mode", n.get_string("mode", "avg")},
              {"output_height", n.get_int("output_height", 1)},
              {"output_width", n.get_int("output_width", 1)},
              {"sampling_ratio", n.get_int("sampling_ratio", 0)},
              {"spatial_scale", n.get_float("spatial_scale", 1.0)},
              {"coordinate_transformation_mode",
               n.opset >= 16 ? n.get_string("coordinate_transformation_mode", "half_pixel") : std::string("output_half_pixel")}};
  add(std::move(l));
}

// AffineGrid: each output point is theta times the point's homogeneous
// normalised coordinates (x, y[, z], 1). Those form a constant [P, S+1]
// matrix for the constant size, so the grid is a dense layer over theta
// ([N, S, S+1] -> [N, S, P]) transposed to [N, P, S] and shaped [N, (D,) H, W, S].
void Importer::affine_grid(const Node& n) {
  const std::vector<int64_t> size = constant_ints(n, 1, "size");
  if (size.size() != 4 && size.size() != 5) throw n.error(fmt::format("size has {} values; 4 (2-D) or 5 (3-D) are read", size.size()), "size");
  const int64_t spatial = static_cast<int64_t>(size.size()) - 2;
  const Shape ts = shape_of(n, n.in(0));
  if (ts.rank() != 3 || ts[1] != spatial || ts[2] != spatial + 1 || ts[0] != size[0])
    throw n.error(fmt::format("theta {} for size [{}]: [N, {}, {}] expected", ts.to_string(), fmt::join(size, ","), spatial, spatial + 1), "theta");
  for (std::size_t i = 2; i < size.size(); ++i)
    if (size[i] < 1) throw n.error(fmt::format("size [{}] has a dim below 1", fmt::join(size, ",")), "size");
  const bool align = n.get_int("align_corners", 0) != 0;
  auto coord = [&](int64_t i, int64_t len) {
    if (align) return len == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1);
    return (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len) - 1.0;
  };
  const int64_t d = spatial == 3 ? size[2] : 1, h = size[size.size() - 2], w = size[size.size() - 1];
  const int64_t points = d * h * w;
  if (points > (int64_t{1} << 26)) throw n.error(fmt::format("size [{}] makes a grid of {} points", fmt::join(size, ","), points), "size");
  std::vector<float> base;
  base.reserve(static_cast<std::size_t>(points * (spatial + 1)));
  for (int64_t z = 0; z < d; ++z)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        base.push_back(static_cast<float>(coord(x, w)));
        base.push_back(static_cast<float>(coord(y, h)));
        if (spatial == 3) base.push_back(static_cast<float>(coord(z, d)));
        base.push_back(1.0f);
      }
  const std::string out = n.out(0), per_axis = fresh_blob(out + "/per_axis"), per_point = fresh_blob(out + "/per_point");
  Layer dense = make("dense", n.name, {input(n, 0)}, {per_axis});
  dense.weights["weight"] = float_blob(Shape{points, spatial + 1}, std::move(base));
  add(std::move(dense));
  add_unary(n, "transpose", per_axis, per_point, {{"perm", std::vector<int64_t>{0, 2, 1}}}, "points_first");
  std::vector<int64_t> grid{size[0]};
  if (spatial == 3) grid.push_back(d);
  grid.insert(grid.end(), {h, w, spatial});
  add_unary(n, "reshape", per_point, out, {{"shape", grid}}, "to_grid");
}

void Importer::grid_sample(const Node& n) {
  std::string mode = n.get_string("mode", n.opset >= 20 ? "linear" : "bilinear");
  if (mode == "bilinear") mode = "linear";  // opset 16's names
  if (mode == "bicubic") mode = "cubic";
  Layer l = make("grid_sample", n.name, {input(n, 0), input(n, 1)}, {n.out(0)});
  l.params = {{"mode", mode}, {"padding_mode", n.get_string("padding_mode", "zeros")}, {"align_corners", n.get_int("align_corners", 0)}};
  add(std::move(l));
}

}  // namespace onnx_import
}  // namespace softneuro
