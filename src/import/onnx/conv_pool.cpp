// ONNX import: Convolutions and pooling: Conv, ConvTranspose, DeformConv, the pools, Col2Im.
#include "import/onnx/importer.hpp"

namespace softneuro {
namespace onnx_import {

std::vector<int64_t> Importer::window_pads(const Node& n, const Shape& x, const std::vector<int64_t>& kernel,
                                           const std::vector<int64_t>& strides,
                                           const std::vector<int64_t>& dilations) const {
  const std::string mode = n.get_string("auto_pad", "NOTSET");
  const std::size_t spatial = kernel.size();
  if (mode == "NOTSET") {
    // ONNX [h_begin, w_begin, h_end, w_end] = ours (and [d_begin, h_begin, w_begin, d_end, ...] in 3-D)
    auto pads = n.get_ints_n("pads", 2 * spatial, std::vector<int64_t>(2 * spatial, 0));
    for (auto p : pads)
      if (p < 0) throw n.error("negative pads", "pads");
    return pads;
  }
  if (mode == "VALID") return std::vector<int64_t>(2 * spatial, 0);
  if (mode != "SAME_UPPER" && mode != "SAME_LOWER") throw n.error(fmt::format("unknown auto_pad '{}'", mode), "auto_pad");
  // SAME: output = ceil(input / stride); the odd pad goes at the end (UPPER) or the beginning (LOWER).
  std::vector<int64_t> pads(2 * spatial);
  for (std::size_t i = 0; i < spatial; ++i) {
    const int64_t in = x[2 + static_cast<int>(i)], s = strides[i];
    const int64_t k = (kernel[i] - 1) * dilations[i] + 1;
    const int64_t out = (in + s - 1) / s;
    const int64_t total = std::max<int64_t>(0, (out - 1) * s + k - in);
    const int64_t small = total / 2, large = total - small;
    pads[i] = mode == "SAME_UPPER" ? small : large;
    pads[i + spatial] = mode == "SAME_UPPER" ? large : small;
  }
  return pads;
}

namespace {

/// The window attributes Conv and ConvTranspose share, checked against the weight.
struct ConvAttrs {
  std::vector<int64_t> kernel, strides, dilations;
};

ConvAttrs conv_attrs(const Node& n, const Shape& xs, const Blob& w) {
  if (xs.rank() != 4 || w.shape().rank() != 4)
    throw Unsupported{fmt::format("only 2-D {} (input {}, weight {})", n.op() == "ConvTranspose" ? "transposed convolutions" : "convolutions",
                                  xs.to_string(), w.shape().to_string())};
  ConvAttrs a;
  a.kernel = n.get_ints_n("kernel_shape", 2, {w.shape()[2], w.shape()[3]});
  if (a.kernel[0] != w.shape()[2] || a.kernel[1] != w.shape()[3])
    throw n.error(fmt::format("kernel_shape [{}] differs from the weight's {}", fmt::join(a.kernel, ","), w.shape().to_string()), "kernel_shape");
  a.strides = n.get_ints_n("strides", 2, {1, 1});
  a.dilations = n.get_ints_n("dilations", 2, {1, 1});
  return a;
}

}  // namespace

void Importer::as_2d(const Node& n, Converter convert) {
  onnx::NodeProto p = n.proto();
  const Shape xs = shape_of(n, n.in(0));
  const std::string x2 = fresh_blob(n.in(0) + "/2d");
  if (const Blob* c = constant(n.in(0))) constants_[x2] = reshaped(*c, Shape{xs[0], xs[1], 1, xs[2]});
  else add_unary(n, "reshape", input(n, 0), x2, {{"shape", std::vector<int64_t>{xs[0], xs[1], 1, xs[2]}}}, "to_2d");
  p.set_input(0, x2);
  // A ConvInteger's input: DynamicQuantizeLinear's integers, reshaped.
  if (auto v = int_valued_.find(n.in(0)); v != int_valued_.end()) int_valued_[x2] = v->second;
  if (auto t = value_types_.find(n.in(0)); t != value_types_.end()) value_types_[x2] = t->second;
  if (n.op() == "Conv" || n.op() == "ConvTranspose" || n.op() == "ConvInteger") {
    const Blob& w = require_constant(n, 1, "W");
    if (w.shape().rank() != 3) throw n.error(fmt::format("weight {} of a 1-D {} is not 3-D", w.shape().to_string(), n.op()), "W");
    const std::string w2 = fresh_blob(n.in(1) + "/2d");
    constants_[w2] = reshaped(w, Shape{w.shape()[0], w.shape()[1], 1, w.shape()[2]});
    if (auto t = onnx_types_.find(n.in(1)); t != onnx_types_.end()) onnx_types_[w2] = t->second;
    p.set_input(1, w2);
  }
  for (auto& a : *p.mutable_attribute()) {
    if (a.type() != onnx::AttributeProto::INTS) continue;
    std::vector<int64_t> v(a.ints().begin(), a.ints().end());
    const std::string& key = a.name();
    if (key == "kernel_shape" || key == "dilations" || key == "strides") v.insert(v.begin(), 1);
    else if (key == "pads" && v.size() == 2) v = {0, v[0], 0, v[1]};
    else if (key == "output_padding") v.insert(v.begin(), 0);
    else if (key == "output_shape") v.insert(v.begin(), 1);
    else continue;
    a.clear_ints();
    for (int64_t e : v) a.add_ints(e);
  }
  std::vector<std::string> outs;
  for (int k = 0; k < p.output_size(); ++k) {
    outs.push_back(p.output(k));
    if (!p.output(k).empty()) p.set_output(k, fresh_blob(p.output(k) + "/2d"));
  }
  const Node n2(p, n.name, n.opset, file_);
  (this->*convert)(n2);
  for (int k = 0; k < p.output_size(); ++k) {
    if (outs[static_cast<std::size_t>(k)].empty() || !shapes_.count(p.output(k))) continue;
    Shape ys = shape_of(n2, p.output(k));
    add_unary(n, "reshape", p.output(k), outs[static_cast<std::size_t>(k)], {{"shape", std::vector<int64_t>{ys[0], ys[1], ys[3]}}},
              k == 0 ? "to_1d" : fmt::format("to_1d_{}", k));
    if (auto t = value_types_.find(p.output(k)); t != value_types_.end()) value_types_[outs[static_cast<std::size_t>(k)]] = t->second;
  }
}

void Importer::conv(const Node& n) {
  const Blob& w = require_constant(n, 1, "W");
  Layer l = conv2_layer(n, n.name, input(n, 0), n.out(0), to_float(w));
  if (n.has_in(2)) l.weights["bias"] = to_float(require_constant(n, 2, "B"));
  add(std::move(l));
}

Layer Importer::conv2_layer(const Node& n, const std::string& name, const std::string& x, const std::string& y, Blob w) {
  const Shape xs = shape_of(n, n.in(0));
  const auto [kernel, strides, dilations] = conv_attrs(n, xs, w);
  Layer l = make("conv2", name, {x}, {y});
  l.params["strides"] = strides;
  l.params["dilations"] = dilations;
  l.params["group"] = n.get_int("group", 1);
  l.params["pads"] = window_pads(n, xs, kernel, strides, dilations);
  l.weights["weight"] = std::move(w);
  return l;
}

// CausalConvWithState (opset 27; Mamba's and Gated DeltaNet's streaming
// convolution): the concat, depthwise 1-D Conv and slice it fuses, as layers.
// The input [B, C, L] after the k - 1 positions of past_state (zeros without
// it), a depthwise Conv of kernel k over that without padding (its own routines
// and tuning, as any 1-D Conv), an optional SiLU; present_state is the last
// k - 1 positions of the padded input.
void Importer::causal_conv_with_state(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 3) throw n.error(fmt::format("input {} is not rank 3 (batch, channels, length)", xs.to_string()), "input");
  const Blob& w = require_constant(n, 1, "weight");
  const int64_t c = xs[1];
  if (w.shape().rank() != 3 || w.shape()[0] != c || w.shape()[1] != 1 || w.shape()[2] < 1)
    throw n.error(fmt::format("weight {} is not (channels {}, 1, k)", w.shape().to_string(), c), "weight");
  const int64_t k = w.shape()[2];
  const std::string activation = n.get_string("activation", "none");
  if (activation != "none" && activation != "silu" && activation != "swish")
    throw n.error(fmt::format("unknown activation '{}' (none, silu, swish)", activation), "activation");
  if (n.has_in(2) && shape_of(n, n.in(2)) != Shape{c}) throw n.error(fmt::format("bias {} is not ({})", shape_of(n, n.in(2)).to_string(), c), "bias");
  if (k == 1 && n.num_outputs() > 1 && !n.out(1).empty())
    throw Unsupported{"CausalConvWithState of kernel size 1: its present_state is empty (no zero-length tensors)"};
  std::string padded = input(n, 0);
  if (n.has_in(3)) {
    const Shape ps = shape_of(n, n.in(3));
    if (ps.rank() != 3 || ps[0] != xs[0] || ps[1] != c || ps[2] != k - 1)
      throw n.error(fmt::format("past_state {} is not (batch {}, channels {}, k - 1 = {})", ps.to_string(), xs[0], c, k - 1), "past_state");
    padded = fresh_blob(n.out(0) + "/with_past");
    Layer l = make("concat", n.name + "/with_past", {input(n, 3), input(n, 0)}, {padded});
    l.params["axis"] = int64_t{2};
    add(std::move(l));
  } else if (k > 1) {
    padded = fresh_blob(n.out(0) + "/padded");
    add_unary(n, "pad", input(n, 0), padded, {{"pads", std::vector<int64_t>{0, 0, k - 1, 0, 0, 0}}, {"mode", std::string("constant")}},
              "pad");
  }
  // The convolution, as a 1-D Conv node of the graph would be imported.
  onnx::NodeProto p;
  p.set_op_type("Conv");
  p.add_input(padded);
  p.add_input(n.in(1));
  if (n.has_in(2)) p.add_input(n.in(2));
  const std::string conv_out = activation == "none" ? n.out(0) : fresh_blob(n.out(0) + "/conv");
  p.add_output(conv_out);
  auto* group = p.add_attribute();
  group->set_name("group");
  group->set_type(onnx::AttributeProto::INT);
  group->set_i(c);
  const Node conv_node(p, n.name + "/conv", n.opset, file_);
  as_2d(conv_node, &Importer::conv);
  if (activation != "none") add_unary(n, "silu", conv_out, n.out(0), {}, "silu");
  if (n.num_outputs() > 1 && !n.out(1).empty()) slice_blob(n, padded, 2, xs[2], xs[2] + k - 1, n.out(1));
}

// DeformConv (2-D): conv2's geometry, each tap shifted by its offset (layer deform_conv).
void Importer::deform_conv(const Node& n) {
  Layer l = conv2_layer(n, n.name, input(n, 0), n.out(0), to_float(require_constant(n, 1, "W")));
  l.type = "deform_conv";
  l.inputs.push_back(input(n, 2));
  if (n.has_in(3)) l.weights["bias"] = to_float(require_constant(n, 3, "B"));
  if (n.has_in(4)) l.inputs.push_back(input(n, 4));
  l.params["offset_group"] = n.get_int("offset_group", 1);
  add(std::move(l));
}

// ConvTranspose (2-D): weight [C, O/group, KH, KW]; pads from pads, auto_pad or output_shape.
// ConvTranspose of 3 spatial dims (or more): each input position's
// contributions as a dense layer (weight [M * prod(k), C]), then Col2Im adds
// the overlapping blocks into the output image: the transposed convolution's
// own definition, on our GEMM routines. One group.
void Importer::conv_transpose_nd(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  const Blob w = to_float(require_constant(n, 1, "W"));
  const int spatial = xs.rank() - 2;
  if (w.shape().rank() != xs.rank())
    throw n.error(fmt::format("weight {} for input {}", w.shape().to_string(), xs.to_string()), "W");
  const int64_t group = n.get_int("group", 1);
  if (group != 1) throw Unsupported{fmt::format("{}-D transposed convolutions of {} groups (one group is supported)", spatial, group)};
  const auto sn = static_cast<std::size_t>(spatial);
  const int64_t c = xs[1], m = w.shape()[1];
  if (w.shape()[0] != c) throw n.error(fmt::format("weight {} for {} input channels", w.shape().to_string(), c), "W");
  std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  if (n.get_ints("kernel_shape", kernel) != kernel)
    throw n.error(fmt::format("kernel_shape differs from the weight's {}", w.shape().to_string()), "kernel_shape");
  const auto strides = n.get_ints_n("strides", sn, std::vector<int64_t>(sn, 1));
  const auto dilations = n.get_ints_n("dilations", sn, std::vector<int64_t>(sn, 1));
  auto output_padding = n.get_ints_n("output_padding", sn, std::vector<int64_t>(sn, 0));
  std::vector<int64_t> pads = n.get_ints_n("pads", 2 * sn, std::vector<int64_t>(2 * sn, 0));
  const std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  if (n.has("output_shape") || (auto_pad != "NOTSET" && auto_pad != "VALID")) {
    std::vector<int64_t> out = n.has("output_shape") ? n.get_ints("output_shape") : std::vector<int64_t>{};
    if (out.size() == sn + 2) out.erase(out.begin(), out.begin() + 2);
    if (!n.has("output_shape"))
      for (std::size_t i = 0; i < sn; ++i) out.push_back(xs[static_cast<int>(i) + 2] * strides[i]);
    if (out.size() != sn) throw n.error(fmt::format("expected {} (or {}) dims", sn, sn + 2), "output_shape");
    for (std::size_t i = 0; i < sn; ++i) {  // as in 2-D (conv_transpose)
      int64_t total = strides[i] * (xs[static_cast<int>(i) + 2] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1 - out[i];
      if (total < 0) output_padding[i] -= total, total = 0;
      pads[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[i + sn] = total - pads[i];
    }
  } else if (auto_pad == "VALID") {
    pads.assign(2 * sn, 0);
  }
  std::vector<int64_t> image;
  int64_t blocks = 1, block_size = 1;
  for (std::size_t i = 0; i < sn; ++i) {
    const int64_t in = xs[static_cast<int>(i) + 2];
    if (output_padding[i] >= strides[i] && output_padding[i] >= dilations[i])
      throw n.error(fmt::format("output_padding {} is not below the stride {} or dilation {}", output_padding[i], strides[i],
                                dilations[i]), "output_padding");
    image.push_back(strides[i] * (in - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1 - pads[i] - pads[i + sn]);
    if (image.back() <= 0) throw n.error(fmt::format("output size {} along spatial dim {}", image.back(), i), "pads");
    blocks *= in;
    block_size *= kernel[i];
  }
  // The dense weight [M * K, C]: row m * K + k holds w[:, m, k] (Col2Im's channel-major blocks).
  Blob dense_w = Blob::allocate(Shape{m * block_size, c});
  const float* src = w.data_as<float>();
  float* dst = dense_w.data_as<float>();
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t r = 0; r < m * block_size; ++r) dst[r * c + ci] = src[ci * m * block_size + r];
  const std::string y = n.out(0);
  const std::string flat = fresh_blob(y + "/flat"), rows = fresh_blob(y + "/rows"), cols = fresh_blob(y + "/cols"),
                    by_block = fresh_blob(y + "/blocks");
  add_unary(n, "reshape", input(n, 0), flat, {{"shape", std::vector<int64_t>{xs[0], c, blocks}}}, "flat");
  add_unary(n, "transpose", flat, rows, {{"perm", std::vector<int64_t>{0, 2, 1}}}, "rows");
  Layer d = make("dense", n.name + "/blocks", {rows}, {cols});
  d.weights["weight"] = std::move(dense_w);
  add(std::move(d));
  add_unary(n, "transpose", cols, by_block, {{"perm", std::vector<int64_t>{0, 2, 1}}}, "by_block");
  std::map<std::string, Attr> p = {{"image_shape", image}, {"block_shape", kernel}, {"dilations", dilations},
                                   {"strides", strides}, {"pads", pads}};
  if (!n.has_in(2)) return add_unary(n, "col2im", by_block, y, std::move(p));
  const std::string summed = fresh_blob(y + "/summed");
  add_unary(n, "col2im", by_block, summed, std::move(p));
  Shape bias_shape(std::vector<int64_t>(static_cast<std::size_t>(xs.rank()), 1));
  bias_shape[1] = m;
  const Blob& b = require_constant(n, 2, "B");
  if (b.numel() != m) throw n.error(fmt::format("bias has {} values for {} output channels", b.numel(), m), "B");
  add(make("add", n.name + "/bias", {summed, as_blob(n, add_constant(y + "/bias", reshaped(to_float(b), bias_shape)))}, {y}));
}

void Importer::conv_transpose(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() > 4) return conv_transpose_nd(n);
  const Blob& w = require_constant(n, 1, "W");
  const auto [kernel, strides, dilations] = conv_attrs(n, xs, w);
  auto output_padding = n.get_ints_n("output_padding", 2, {0, 0});
  std::vector<int64_t> pads = n.get_ints_n("pads", 4, {0, 0, 0, 0});
  const std::string auto_pad = n.get_string("auto_pad", "NOTSET");
  const bool given_shape = n.has("output_shape");
  if (given_shape || (auto_pad != "NOTSET" && auto_pad != "VALID")) {
    // The ONNX rule: total padding = stride*(in-1) + output_padding + (k-1)*d + 1 - out,
    // split evenly, the odd one at the end for SAME_UPPER and at the begin otherwise.
    std::vector<int64_t> out(2);
    if (given_shape) {
      out = n.get_ints("output_shape");
      if (out.size() == 4) out = {out[2], out[3]};
      if (out.size() != 2) throw n.error("expected 2 (or 4) dims", "output_shape");
    } else {
      out = {xs[2] * strides[0], xs[3] * strides[1]};
    }
    for (int i = 0; i < 2; ++i) {
      const auto iu = static_cast<std::size_t>(i);
      int64_t total = strides[iu] * (xs[2 + i] - 1) + output_padding[iu] + (kernel[iu] - 1) * dilations[iu] + 1 - out[iu];
      if (total < 0) {  // a larger output than the kernel covers: output_padding makes up the rest
        output_padding[iu] -= total;
        total = 0;
      }
      pads[iu] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[iu + 2] = total - pads[iu];
    }
  } else if (auto_pad == "VALID") {
    pads = {0, 0, 0, 0};
  }
  Layer l = make("deconv2", n.name, {input(n, 0)}, {n.out(0)});
  l.weights["weight"] = to_float(w);
  if (n.has_in(2)) l.weights["bias"] = to_float(require_constant(n, 2, "B"));
  l.params["strides"] = strides;
  l.params["dilations"] = dilations;
  l.params["group"] = n.get_int("group", 1);
  l.params["pads"] = pads;
  if (output_padding != std::vector<int64_t>{0, 0}) l.params["output_padding"] = output_padding;
  add(std::move(l));
}

void Importer::pool(const Node& n) {
  const bool is_max = n.op() == "MaxPool";
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 4 && xs.rank() != 5) throw Unsupported{fmt::format("only 1-D, 2-D and 3-D pooling (input {})", xs.to_string())};
  const bool indices = is_max && used(n.out(1));
  if (indices && xs.rank() != 4) throw Unsupported{"MaxPool's Indices output of a pooling other than 2-D"};
  if (xs.rank() == 5) return pool_3d(n, input(n, 0), n.out(0), is_max, n.get_int("count_include_pad", 0));
  const auto kernel = n.get_ints_n("kernel_shape", 2, {});
  const auto strides = n.get_ints_n("strides", 2, {1, 1});
  const auto dilations = n.get_ints_n("dilations", 2, {1, 1});
  Layer l = make("pool2", n.name, {input(n, 0)}, {n.out(0)});
  l.params["mode"] = std::string(is_max ? "max" : "avg");
  l.params["kernel"] = kernel;
  l.params["strides"] = strides;
  l.params["dilations"] = dilations;
  l.params["pads"] = window_pads(n, xs, kernel, strides, dilations);
  l.params["ceil_mode"] = n.get_int("ceil_mode", 0);
  if (!is_max) l.params["count_include_pad"] = n.get_int("count_include_pad", 0);
  if (indices) {  // the values by any pool2 routine, the indices beside them
    Layer at = l;
    at.type = "max_pool_indices";
    at.name = fresh_layer(n.name + "/indices");
    at.outputs = {n.out(1)};
    at.params.erase("mode");
    at.params["storage_order"] = n.get_int("storage_order", 0);
    add(std::move(at));
    value_types_[n.out(1)] = onnx::TensorProto::INT64;
  }
  add(std::move(l));
}

// 3-D max and average pooling as two 2-D poolings: over (H, W) of
// [N, C*D, H, W], then over D of [N, C, D, H'*W']. Both are separable: a max
// over a box is the max over D of the maxes over (H, W), and a box's count of
// taps (padding counted or not, clipped in ceil mode) is the product of the
// counts along each axis, so the mean of the means is the box's mean.
void Importer::pool_3d(const Node& n, const std::string& x, const std::string& y, bool is_max, int64_t count_include_pad) {
  const Shape xs = shape_of(n, x);
  const auto kernel = n.get_ints_n("kernel_shape", 3, {});
  const auto strides = n.get_ints_n("strides", 3, {1, 1, 1});
  const auto dilations = n.get_ints_n("dilations", 3, {1, 1, 1});
  for (std::size_t i = 0; i < 3; ++i)
    if (kernel[i] < 1 || strides[i] < 1 || dilations[i] < 1)
      throw n.error("kernel_shape, strides and dilations must be positive", "kernel_shape");
  const auto pads = window_pads(n, xs, kernel, strides, dilations);  // [d0, h0, w0, d1, h1, w1]
  const std::string flat = fresh_blob(y + "/hw_in"), hw = fresh_blob(y + "/hw"),
                    by_depth = fresh_blob(y + "/d_in"), d = fresh_blob(y + "/d");
  auto pool2 = [&](const std::string& suffix, const std::string& in, const std::string& out, int64_t kh, int64_t kw,
                   int64_t sh, int64_t sw, int64_t dh, int64_t dw, std::vector<int64_t> p) {
    Layer l = make("pool2", n.name + suffix, {in}, {out});
    l.params["mode"] = std::string(is_max ? "max" : "avg");
    l.params["kernel"] = std::vector<int64_t>{kh, kw};
    l.params["strides"] = std::vector<int64_t>{sh, sw};
    l.params["dilations"] = std::vector<int64_t>{dh, dw};
    l.params["pads"] = std::move(p);
    l.params["ceil_mode"] = n.get_int("ceil_mode", 0);
    if (!is_max) l.params["count_include_pad"] = count_include_pad;
    add(std::move(l));
  };
  add_unary(n, "reshape", x, flat, {{"shape", std::vector<int64_t>{xs[0], xs[1] * xs[2], xs[3], xs[4]}}}, "to_hw");
  pool2("/hw", flat, hw, kernel[1], kernel[2], strides[1], strides[2], dilations[1], dilations[2],
        {pads[1], pads[2], pads[4], pads[5]});
  const Shape hs = shape_of(n, hw);
  add_unary(n, "reshape", hw, by_depth, {{"shape", std::vector<int64_t>{xs[0], xs[1], xs[2], hs[2] * hs[3]}}}, "to_d");
  pool2("/d", by_depth, d, kernel[0], 1, strides[0], 1, dilations[0], 1, {pads[0], 0, pads[3], 0});
  const Shape ds = shape_of(n, d);
  add_unary(n, "reshape", d, y, {{"shape", std::vector<int64_t>{xs[0], xs[1], ds[2], hs[2], hs[3]}}}, "to_3d");
}

// LpPool: (sum of |x|^p over the window)^(1/p), the sum an average pooling
// that counts the padding, times the window's taps.
void Importer::lp_pool(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() != 4 && xs.rank() != 5) throw Unsupported{fmt::format("only 1-D, 2-D and 3-D pooling (input {})", xs.to_string())};
  const double p = static_cast<double>(n.get_int("p", 2));
  if (p < 1) throw n.error(fmt::format("p {} is below 1", p), "p");
  const std::size_t spatial = static_cast<std::size_t>(xs.rank() - 2);
  const auto kernel = n.get_ints_n("kernel_shape", spatial, {});
  const auto strides = n.get_ints_n("strides", spatial, std::vector<int64_t>(spatial, 1));
  const auto dilations = n.get_ints_n("dilations", spatial, std::vector<int64_t>(spatial, 1));
  int64_t taps = 1;
  for (int64_t k : kernel) taps *= k;
  const std::string y = n.out(0), a = fresh_blob(y + "/abs"), powered = fresh_blob(y + "/pow"), mean = fresh_blob(y + "/mean"),
                    sum = fresh_blob(y + "/sum");
  add_unary(n, "abs", input(n, 0), a, {}, "abs");
  if (p == 2) add(make("mul", n.name + "/pow", {a, a}, {powered}));
  else add_unary(n, "pow", a, powered, {{"exponent", p}}, "pow");
  if (spatial == 3) {
    pool_3d(n, powered, mean, /*is_max=*/false, /*count_include_pad=*/1);
  } else {
    Layer l = make("pool2", n.name + "/window", {powered}, {mean});
    l.params["mode"] = std::string("avg");
    l.params["kernel"] = kernel;
    l.params["strides"] = strides;
    l.params["dilations"] = dilations;
    l.params["pads"] = window_pads(n, xs, kernel, strides, dilations);
    l.params["ceil_mode"] = n.get_int("ceil_mode", 0);
    l.params["count_include_pad"] = int64_t{1};
    add(std::move(l));
  }
  add(make("mul", n.name + "/taps", {mean, scalar_constant(n, y + "/taps", static_cast<double>(taps))}, {sum}));
  if (p == 1) return add_unary(n, "identity", sum, y);
  if (p == 2) return add_unary(n, "sqrt", sum, y);
  add_unary(n, "pow", sum, y, {{"exponent", 1.0 / p}});
}

// MaxUnpool: X's values at MaxPool's flat indices I (over the whole output,
// batch and channels included) of a zero tensor: a scatter into zeros of the
// size (in - 1) * stride + kernel - pads per spatial dim, flattened, then its
// shape; a larger output_shape pads it with zeros at the end of each dim (as
// ONNX's reference does).
void Importer::max_unpool(const Node& n) {
  const Shape xs = shape_of(n, n.in(0)), is = shape_of(n, n.in(1));
  if (xs.rank() < 3) throw n.error(fmt::format("input {} needs [N, C, spatial...]", xs.to_string()), "X");
  if (is != xs) throw n.error(fmt::format("indices {} are not the input's shape {}", is.to_string(), xs.to_string()), "I");
  const std::size_t spatial = static_cast<std::size_t>(xs.rank() - 2);
  const std::vector<int64_t> kernel = n.get_ints("kernel_shape");
  if (kernel.size() != spatial) throw n.error(fmt::format("{} sizes for {} spatial dims", kernel.size(), spatial), "kernel_shape");
  const std::vector<int64_t> strides = n.get_ints("strides", std::vector<int64_t>(spatial, 1));
  const std::vector<int64_t> pads = n.get_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  if (strides.size() != spatial) throw n.error(fmt::format("{} strides for {} spatial dims", strides.size(), spatial), "strides");
  if (pads.size() != 2 * spatial) throw n.error(fmt::format("{} pads for {} spatial dims", pads.size(), spatial), "pads");
  Shape out{xs[0], xs[1]};
  for (std::size_t d = 0; d < spatial; ++d) {
    if (kernel[d] < 1 || strides[d] < 1) throw n.error("kernel and strides must be positive", "kernel_shape");
    out.push_back((xs[static_cast<int>(d) + 2] - 1) * strides[d] + kernel[d] - pads[d] - pads[d + spatial]);
  }
  for (int d = 0; d < out.rank(); ++d)
    if (out[d] < 1) throw n.error(fmt::format("the output {} is empty", out.to_string()), "pads");
  std::vector<int64_t> grow(static_cast<std::size_t>(2 * xs.rank()), 0);  // zeros after each dim
  bool grows = false;
  if (n.has_in(2)) {
    const std::vector<int64_t> given = constant_ints(n, 2, "output_shape");
    if (given.size() != static_cast<std::size_t>(xs.rank()))
      throw n.error(fmt::format("output_shape {} for an input {}", fmt::join(given, "x"), xs.to_string()), "output_shape");
    for (int d = 0; d < out.rank(); ++d) {
      if (given[static_cast<std::size_t>(d)] < out[d] || (d < 2 && given[static_cast<std::size_t>(d)] != out[d]))
        throw n.error(fmt::format("output_shape {} is smaller than the unpooled {}", fmt::join(given, "x"),
                                  out.to_string()), "output_shape");
      grow[static_cast<std::size_t>(xs.rank() + d)] = given[static_cast<std::size_t>(d)] - out[d];
      grows = grows || grow[static_cast<std::size_t>(xs.rank() + d)] > 0;
    }
  }
  try {
    check_folded_growth(out, DType::float32, 0);  // the zeros are a constant of the model
  } catch (const Error& e) {
    throw n.error(e.message(), "output_shape");
  }
  const std::string zeros = as_blob(n, add_constant(n.out(0) + "/zeros", Blob::allocate(Shape{out.numel()})));
  const std::string flat_x = fresh_blob(n.out(0) + "/values"), flat_i = fresh_blob(n.out(0) + "/indices");
  reshape_to(n, input(n, 0), Shape{xs.numel()}, flat_x);
  reshape_to(n, n.in(1), Shape{xs.numel()}, flat_i);
  const std::string flat_y = fresh_blob(n.out(0) + "/flat");
  Layer l = make("scatter_elements", n.name, {zeros, as_blob(n, flat_i), as_blob(n, flat_x)}, {flat_y});
  l.params["axis"] = int64_t{0};
  l.params["reduction"] = std::string("none");
  add(std::move(l));
  if (!grows) return reshape_to(n, flat_y, out, n.out(0));
  const std::string unpooled = fresh_blob(n.out(0) + "/unpooled");
  reshape_to(n, flat_y, out, unpooled);
  add_unary(n, "pad", unpooled, n.out(0), {{"pads", grow}, {"mode", std::string("constant")}});
}

void Importer::global_pool(const Node& n) {
  const Shape xs = shape_of(n, n.in(0));
  if (xs.rank() < 3) throw n.error(fmt::format("input {} has no spatial dims", xs.to_string()), "X");
  if (xs.rank() != 4) {  // 1-D, 3-D...: a reduction over every spatial dim
    std::vector<int64_t> axes(static_cast<std::size_t>(xs.rank() - 2));
    std::iota(axes.begin(), axes.end(), int64_t{2});
    add_unary(n, "reduce", input(n, 0), n.out(0),
              {{"mode", std::string(n.op() == "GlobalMaxPool" ? "max" : "mean")}, {"axes", axes}, {"keepdims", int64_t{1}}});
    return;
  }
  add_unary(n, "pool2", input(n, 0), n.out(0),
            {{"mode", std::string(n.op() == "GlobalMaxPool" ? "max" : "avg")}, {"global", int64_t{1}}});
}

// Col2Im: the image and block shapes must be constants.
void Importer::col2im(const Node& n) {
  const auto image = constant_ints(n, 1, "image_shape"), block = constant_ints(n, 2, "block_shape");
  std::map<std::string, Attr> p = {{"image_shape", image}, {"block_shape", block}};
  for (const char* a : {"dilations", "strides", "pads"})
    if (n.has(a)) p[a] = n.get_ints(a);
  add_unary(n, "col2im", input(n, 0), n.out(0), std::move(p));
}

}  // namespace onnx_import
}  // namespace softneuro
