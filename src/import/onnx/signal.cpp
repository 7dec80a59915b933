// ONNX import: Signal processing: DFT, STFT and the window functions.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

// DFT: the length and axis must be constants (opset 20 made the axis an input).
void Importer::dft(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  int64_t axis = n.opset >= 20 ? -2 : n.get_int("axis", 1);
  if (n.opset >= 20 && n.has_in(2)) {
    const Blob& a = require_constant(n, 2, "axis");
    if (a.numel() != 1) throw n.error(fmt::format("axis has {} values, not one", a.numel()), "axis");
    axis = to_ints(a)[0];
  }
  axis = normalized_axis(n, axis, xs.rank(), "axis");
  const bool inverse = n.get_int("inverse", 0) != 0, onesided = n.get_int("onesided", 0) != 0;
  int64_t length = inverse && onesided ? 2 * (xs[static_cast<int>(axis)] - 1) : xs[static_cast<int>(axis)];
  if (n.has_in(1)) {
    const Blob& d = require_constant(n, 1, "dft_length");
    if (d.numel() != 1) throw n.error(fmt::format("dft_length has {} values, not one", d.numel()), "dft_length");
    length = to_ints(d)[0];
  }
  add_unary(n, "dft", input(n, 0), n.out(0),
            {{"axis", axis}, {"length", length}, {"inverse", int64_t{inverse}}, {"onesided", int64_t{onesided}}});
}

// STFT: the frames gathered (a constant index table), each multiplied by the
// window, then a DFT along the frame of frame_length points: [batch, frames,
// bins, 2]. frame_step and frame_length must be constants.
void Importer::stft(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 3 || (xs[2] != 1 && xs[2] != 2))
    throw n.error(fmt::format("signal has shape {}, not [batch, length, 1 or 2]", xs.to_string()), "signal");
  const int64_t step = static_cast<int64_t>(constant_scalar(n, 1, "frame_step"));
  int64_t length = -1;
  if (n.has_in(3)) length = static_cast<int64_t>(constant_scalar(n, 3, "frame_length"));
  if (n.has_in(2)) {
    const Shape ws = shape_of(n, n.in(2));
    if (ws.rank() != 1) throw n.error(fmt::format("window has shape {}, not [frame_length]", ws.to_string()), "window");
    if (length >= 0 && ws[0] != length)
      throw n.error(fmt::format("window has {} values, frame_length is {}", ws[0], length), "window");
    length = ws[0];
  }
  if (length < 1) throw n.error("STFT needs frame_length or a window", "frame_length");
  if (step < 1) throw n.error(fmt::format("frame_step {} is not positive", step), "frame_step");
  if (length > xs[1]) throw n.error(fmt::format("frame_length {} exceeds the signal's {} samples", length, xs[1]), "frame_length");
  const int64_t frames = (xs[1] - length) / step + 1;
  if (frames * length > (int64_t{1} << 26)) throw n.error(fmt::format("{} frames of {} samples", frames, length), "frame_step");
  std::vector<int64_t> at;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t k = 0; k < length; ++k) at.push_back(f * step + k);
  const std::string y = n.out(0);
  const std::string positions = as_blob(n, add_constant(y + "/positions", int_blob(Shape{frames, length}, at)));
  std::string framed = fresh_blob(y + "/frames");
  Layer g = make("gather", n.name + "/frames", {input(n, 0), positions}, {framed});
  g.params["axis"] = int64_t{1};
  add(std::move(g));
  if (n.has_in(2)) {
    std::string w;
    if (const Blob* c = constant(n.in(2)))
      w = as_blob(n, add_constant(y + "/window", reshaped(to_float(*c), Shape{1, 1, length, 1})));
    else {
      w = fresh_blob(y + "/window");
      add_unary(n, "reshape", input(n, 2), w, {{"shape", std::vector<int64_t>{1, 1, length, 1}}}, "window");
    }
    const std::string windowed = fresh_blob(y + "/windowed");
    add(make("mul", n.name + "/windowed", {framed, w}, {windowed}));
    framed = windowed;
  }
  const bool onesided = n.get_int("onesided", 1) != 0;
  add_unary(n, "dft", framed, y, {{"axis", int64_t{2}}, {"length", length}, {"inverse", int64_t{0}}, {"onesided", int64_t{onesided}}});
}

// HannWindow, HammingWindow, BlackmanWindow of a constant size: computed now
// (ONNX's reference formulas, in double), a constant like any other. Of a size
// a session gives (an input that sets shapes): again when it plans, as
// shape_math (record_shape_math).
void Importer::window(const Node& n) {
  const Blob* size_blob = constant(n.in(0));
  if (!size_blob) throw Unsupported{fmt::format("{} with a size computed at run time (a constant size, or a model input, is read when a session plans)", n.op())};
  if (size_blob->numel() != 1) throw n.error(fmt::format("size has {} values, not one", size_blob->numel()), "size");
  const int type = static_cast<int>(n.get_int("output_datatype", onnx::TensorProto::FLOAT));
  try {
    constants_[n.out(0)] = core::window_values(window_kind(n.op()), to_ints(*size_blob)[0], n.get_int("periodic", 1) != 0,
                                                !floating_type(type));
  } catch (const Error& e) {
    throw n.error(e.message(), "size");
  }
  onnx_types_[n.out(0)] = type;
}

}  // namespace onnx_import
}  // namespace softneuro
