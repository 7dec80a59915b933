// Layer types: what each computes is fixed by its parameters and weights
// (the conventions below), and its shape inference lives here with it.
//
// Conventions (logical shapes, images NCHW):
//  conv2     in [N,C,H,W]; weight [O,C/group,KH,KW], bias [O] optional;
//            strides [sh,sw]=1, pads [top,left,bottom,right]=0, dilations [dh,dw]=1, group=1;
//            fused activation: act = none|relu|clip|hardswish|hardsigmoid|sigmoid|silu,
//            act_min/act_max (clip), act_alpha/act_beta (hardsigmoid).
//  deconv2   transposed convolution (ONNX ConvTranspose): in [N,C,H,W]; weight
//            [C,O/group,KH,KW], bias [O] optional; strides, pads, dilations, group as
//            conv2; output_padding [oph,opw]=0 (each below its stride or dilation);
//            OH = sh*(H-1) + oph + dh*(KH-1) + 1 - pt - pb (OW alike).
//  dense     in [...,K]; weight [O,K], bias [O] optional; out [...,O]; fused act as conv2,
//            or gelu (act_approximate = none|tanh: the gelu layer's erf and tanh forms).
//  dynamic_quant_dense  dense whose input is quantised as it runs, as ONNX Runtime's
//            quantize_dynamic writes it (DynamicQuantizeLinear, MatMulInteger, the scales'
//            product, the bias): q, s, zp = dynamic_quantize(x) over the whole input; weight
//            [O,K] on its int8 grid (integers w, a scale s_w per output channel), bias [O]
//            optional; y = act(float(sum_k (q_k - zp) * w[o][k]) * (s * s_w[o]) + bias[o]), act fused
//            as dense's (gelu included).
//  matmul    two inputs, NumPy matmul (batch dims broadcast).
//  pool2     in [N,C,H,W]; mode = max|avg; kernel [kh,kw]; strides=1; pads=0;
//            ceil_mode=0; count_include_pad=0; global=0 (global=1: kernel = H,W).
//  deform_conv  ONNX DeformConv: inputs x [N,C,H,W], offset [N, offset_group*2*KH*KW, OH, OW]
//            (per tap its h then w shift), mask (optional, [N, offset_group*KH*KW, OH, OW]);
//            conv2's weight, bias, strides, pads, dilations, group; offset_group=1 (channels
//            split into groups of one offset each). Each tap samples x bilinearly at its
//            shifted position (corners outside the input read 0), times its mask.
//  max_pool_indices  pool2's max window (the same parameters): out the flat index into
//            the input of each window's first largest value (storage_order=0: [N,C,H,W]
//            row-major; 1: H and W column-major), as ONNX MaxPool's Indices; input at most 2^24.
//  batchnorm in [N,C,...]; weights scale, bias, mean, var [C]; epsilon=1e-5.
//  relu, sigmoid, tanh, hardswish; clip (min=-inf, max=+inf; relu6 is clip 0..6);
//  hardsigmoid (alpha=0.2, beta=0.5: max(0,min(1,alpha*x+beta)));
//  gelu (approximate = none|tanh).
//  softmax   axis=-1.
//  attention inputs q, k, v and an optional additive mask: softmax(scale * Q·Kᵀ + mask) · V per batch
//            and head, Q [B,H,Sq,D], K [B,H,Sk,D], V [B,H,Sk,Dv], out [B,H,Sq,Dv] in canonical order;
//            q_perm, k_perm, v_perm (default [0,1,2,3]): the input is the canonical tensor's
//            dims in that order (canonical = transpose(input, perm): [0,2,1,3] reads [B,S,H,D]);
//            out_perm: the output is transpose(canonical out, out_perm). K and V batch and
//            heads equal Q's or 1 (broadcast); the mask broadcasts (NumPy, right-aligned) to
//            [B,H,Sq,Sk]. scale (default 1/sqrt(D)); causal=0 (1: key j > i + Sk - Sq masked,
//            as -inf: the triangle aligned to the last key; causal_align = start: j > i, ONNX
//            Attention's without a cache); masked_rows = nan|zero: nan computes softmax's NaN where a row's
//            probabilities are not numbers (every key -inf), zero takes such a probability as
//            0 (the exporters' Where(IsNaN(p), 0, p) guard).
//  layernorm axis=-1 (normalises over dims axis..rank-1), epsilon=1e-5;
//            weights scale (shape = in.shape[axis:]), bias optional.
//  group_norm in [N,C,...]; groups (divides C); epsilon=1e-5; weights scale [C],
//            bias [C] optional: each group of C/groups channels (all their
//            positions) normalised by its mean and variance, then per channel
//            y*scale + bias (ONNX InstanceNormalization: groups = C).
//  fake_quant quantise and dequantise (an ONNX QuantizeLinear -> DequantizeLinear
//            pair, or a quantised tensor as its real values): scale > 0,
//            zero_point, qmin/qmax (0/255 for uint8, -128/127 for int8);
//            y = (clamp(nearbyint(x / scale) + zero_point, qmin, qmax) - zero_point) * scale
//            in float, as ONNX Runtime computes it. requantize = tflite with
//            input_scale: TensorFlow Lite's QUANTIZE between integer types, its
//            integers through a fixed-point multiplier (FakeQuant::requantize).
//  dynamic_quantize ONNX DynamicQuantizeLinear: outputs y (uint8 values, held as
//            floats), scale and zero_point (shape []): min/max of x widened to
//            include 0, scale = (max - min) / 255 (1 when max = min), zero_point =
//            nearbyint(clamp(-min / scale, 0, 255)), y = clamp(nearbyint(x / scale) + zero_point, 0, 255).
//  add, sub, mul, div, max, min: two inputs, NumPy broadcasting (max and min: NaN where either is).
//  pow       pow(x, y), NumPy broadcasting; or one input and exponent (a constant).
//  compare   two inputs, NumPy broadcasting; op = equal|not_equal|less|less_equal|
//            greater|greater_equal: 1 where it holds, else 0 (NaN: only not_equal holds).
//  logical   two inputs, NumPy broadcasting; op = and|or|xor of (x != 0): 1 or 0.
//  where     three inputs (condition, x, y), NumPy broadcasting: condition != 0 ? x : y.
//  einsum    1 to 8 inputs; equation = "ij,jk->ik": letters only, the output explicit (the importer
//            spells out ONNX's ellipses and implicit outputs); products summed over the letters the
//            output lacks, a letter repeated in an operand its diagonal, size-1 dims broadcast.
//  softplus  log(1 + e^x), accurate for large negative x (log1p).
//  round     mode = nearest_even (ONNX Round)|floor|ceil|trunc (toward zero).
//  cast      to = a narrow type (float8e4m3fn ... uint2): x as that type holds it, in float32
//            (ONNX Cast, core/narrow_types.hpp); saturate = 1|0, round_mode = up|down|nearest (float8e8m0).
//  take      weight indices (int64, any shape): y = x.flat[indices], out shape = the
//            indices' (each in [0, numel(x))): a gather at constant positions.
//  gather    two inputs (data, indices computed at run time, whole numbers held as floats):
//            ONNX Gather along `axis` (negative from the end); out shape = data's dims before
//            the axis, the indices' shape, data's dims after it. An index in [-dim, 0) counts
//            from the end; one outside [-dim, dim) or not a whole number is an Error naming the
//            layer (never a read out of bounds). The embedding lookup of token ids.
//  gather_elements two inputs (data, indices of data's rank): ONNX GatherElements along `axis`;
//            out shape = the indices'; indices checked as gather's.
//  gather_nd two inputs (data, indices [..., k]): ONNX GatherND with `batch_dims` b; out shape =
//            indices' dims but the last, then data's dims from b + k on; indices checked as gather's.
//  trig      op = sin|cos|tan|asin|acos|atan|sinh|cosh|asinh|acosh|atanh (in double, as std:: computes them).
//  arg_reduce index along `axis` (negative from the end) of the first (select_last_index=0)
//            or last maximum (mode=max) or minimum (mode=min); keepdims=1; NaN
//            counts as the extreme (NumPy's argmax); the index as a float.
//  divmod    two inputs, NumPy broadcasting, computed in double; op = quotient (toward zero,
//            C's integer division)|mod (the divisor's sign, NumPy/Python %)|fmod (the dividend's).
//  bitwise   two inputs (integers held as floats), NumPy broadcasting; op = and|or|xor|
//            shift_left|shift_right; bits = 8|16|32|64 and signed=0: the integer type, whose
//            width the result wraps to (right shifts of signed values are arithmetic; a
//            shift by a negative amount or the width or more gives 0, or -1 to the right).
//  cumulative op = sum|prod along axis (=0), exclusive=0, reverse=0 (ONNX CumSum/CumProd).
//  top_k     k, axis=-1, largest=1: outputs the k values in order and their indices
//            (as floats); ties to the lower index, NaN above every number. An input 1
//            (a shape_math value) gives k when a session plans (core/shape_plan.hpp);
//            with k_at_run=1 it is a blob computed at run time (value-shaped: capacity
//            the whole axis).
//  grid_sample two inputs: x [N,C,D1..Dr] (r = 1..3) and grid [N,O1..Or,r] (normalised,
//            x first); mode = linear|nearest|cubic; padding_mode = zeros|border|reflection;
//            align_corners=0; out [N,C,O1..Or] (ONNX GridSample).
//  abs, neg, sqrt, exp, log, erf, reciprocal (1/x); silu (x * sigmoid(x));
//  mish (x * tanh(softplus(x))); leaky_relu (alpha=0.01: x < 0 ? alpha*x : x).
//  prelu     weight slope, broadcast to the input: x < 0 ? slope*x : x.
//            (add: requantize = tflite with input_scales [2], output_scale,
//            output_zero_point, qmin, qmax is TensorFlow Lite's int8 ADD, TfliteAdd.)
//            requantize = tflite: TensorFlow Lite's int8 PRELU (TflitePrelu) with
//            input_scale, alpha_scale, output_scale, output_zero_point, qmin, qmax.
//  reduce    mode = mean|sum|max|min|l2 (sqrt of the sum of squares)|prod (max, min: NaN wins); axes (any
//            order, negative from the end; none: every axis); keepdims=1. Over an empty axis: the
//            identity (sum 0, prod 1, max -inf, min +inf; mean NaN).
//  concat    axis (required), one or more inputs.
//  split     axis=0; split = sizes (default: equal parts, one per output).
//  reshape   shape: ONNX semantics (0 copies the input dim, -1 is inferred);
//            copy_dims (optional, one per output dim): input dim to copy, -1: shape's.
//  resize    in [N,C,H,W]; out [N,C,OH,OW] = sizes [N,C,OH,OW] where given, else
//            floor(in * scales) (scales [1,1,sh,sw]); mode = nearest|linear|cubic
//            (cubic_coeff_a=-0.75, exclude_outside=0: Keys' 4 taps, the edge repeated);
//            coordinate_transformation_mode = half_pixel (default)|half_pixel_symmetric|
//            pytorch_half_pixel|align_corners|asymmetric|tf_half_pixel_for_nn|
//            tf_crop_and_resize (roi [4 starts, 4 ends], extrapolation_value=0);
//            nearest_mode = round_prefer_floor (default)|round_prefer_ceil|floor|ceil
//            (ONNX Resize; linear clamps the source coordinate into the input);
//            antialias=0 (linear, cubic: when downsampling, the kernel stretched by
//            in/out over as many taps as it covers, weights normalised, exclude_outside too).
//  flatten   axis=1: out [prod(in[:axis]), prod(in[axis:])].
//  transpose perm (default: reversed dims).
//  pad       pads [begin_0..begin_r-1, end_0..end_r-1] (non-negative);
//            mode = constant|reflect|edge; value=0.
//  identity  out = in.
//  lstm      ONNX LSTM: in x [T,B,I] (layout=0) or [B,T,I] (layout=1), optional
//            initial_h and initial_c [D,B,H] ([B,D,H] for layout=1) as inputs 2 and 3;
//            weights W [D,4H,I], R [D,4H,H] (gates i,o,f,c), B [D,8H] (Wb then Rb)
//            and P [D,3H] (peepholes i,o,f) optional; hidden_size H; direction =
//            forward|reverse|bidirectional (D = 2); clip (0: none); input_forget=0;
//            activations sigmoid, tanh, tanh. Outputs y [T,D,B,H] ([B,T,D,H]),
//            y_h and y_c [D,B,H] ([B,D,H]): all three, unused ones unread.
//  gru       ONNX GRU: as lstm with 3 gates (z,r,h), no initial_c or P, outputs y and
//            y_h; linear_before_reset=0.
//  rnn       ONNX RNN: as gru with one gate, h = tanh(x W' + h R' + Wb + Rb).
//  constant  no inputs; weight value; out = value.
//  non_max_suppression  ONNX NonMaxSuppression: boxes [B,N,4], scores [B,C,N];
//            max_output_boxes_per_class (0: none), iou_threshold=0, score_threshold
//            (absent: every box a candidate), center_point_box=0 (0: [y1,x1,y2,x2], any two
//            corners; 1: [xc,yc,w,h]). Per batch and class, candidates with score >
//            score_threshold taken by falling score (ties: the lower box first), each kept
//            unless its IoU with a kept box is > iou_threshold. Out [kept, 3] rows
//            (batch, class, box) by batch, class, then order kept. Value-shaped.
//  scatter_elements inputs data, indices (data's rank), updates (the indices' shape): ONNX
//            ScatterElements along `axis`; reduction = none|add|mul|max|min; out = data's shape;
//            each index checked as gather's (later updates win without a reduction).
//  slice     starts, ends, axes (normalised), steps (non-zero): ONNX Slice, clamped to the
//            input's dims when planned (a slice of a tensor whose size is known at run time).
//  branch    inputs condition (a shape_math value), a, b: a where condition != 0, else b, taken
//            when a session plans (ONNX If whose condition comes from shapes); the layers
//            only the other one reads are dropped then. probe: the condition's value at
//            import, which gives the shape before (a and b may differ in rank).
//  choose    inputs condition (one value), a, b of one rank: out = condition != 0 ? a : b,
//            whole (ONNX If with a condition computed at run time: both branches computed,
//            the taken one's outputs chosen). Value-shaped: capacity the larger of each dim.
//  loop      ONNX Loop and Scan: weight body (a .dnn graph's bytes) run once per iteration;
//            inputs cond, M (m_input=1: from shapes, read when planned; 2: at run time),
//            carried values (carried=N), values the body reads; outputs the carried values
//            after the last iteration, then scan_outputs stacked along a new first axis
//            (trip_count iterations planned; value-shaped where there are scan outputs).
//            scan_inputs=0: inputs after the carried ones the body reads a slice of per
//            iteration (along their first axis; their length is the trip count: ONNX Scan).
//            Body: [iteration, cond, carried..., slices..., read...] -> [cond, carried..., scans...].
//  non_zero  out [rank, count]: the indices of the input's non-zero elements, row-major
//            (ONNX NonZero; a rank-0 input is read as [1]). Value-shaped.
//  col2im    ONNX Col2Im: in [N, C * prod(block_shape), L] -> out [N, C, image_shape...]: each
//            column's block summed into the image at its sliding position; image_shape,
//            block_shape (r dims each), dilations, strides (r, default 1), pads (2r: begins,
//            then ends; default 0); L must be the number of positions.
//  dft       ONNX DFT: in [..., 1 (real) or 2 (complex)], along `axis` (not the last dim) of
//            `length` points (the signal cut or zero-padded); inverse=0 (1: the inverse, scaled
//            by 1/length), onesided=0 (forward: the first length/2+1 outputs; inverse: the input
//            is the first half of a Hermitian spectrum and the output real, numpy's irfft).
//            Out [..., length or length/2+1, ..., 2], or [..., length, ..., 1] for the inverse one-sided.
//  unique    ONNX Unique: outputs y (the distinct values, or slices along `axis` when given),
//            indices (first occurrence of each), inverse (each element's or slice's place in y),
//            counts; sorted=1 (ascending; slices compared element by element), 0: in order of
//            first occurrence. Value-shaped.
//  roi_align x [N,C,H,W], rois [R,4] (x1,y1,x2,y2 in input pixels / spatial_scale),
//            batch_indices [R]; mode = avg|max, output_height=1, output_width=1,
//            sampling_ratio=0 (0: ceil(roi size / output size) per bin), spatial_scale=1,
//            coordinate_transformation_mode = half_pixel|output_half_pixel (no -0.5 shift,
//            rois at least 1x1); out [R,C,output_height,output_width] (ONNX RoiAlign:
//            bilinear samples, max mode the largest weighted corner, as ONNX Runtime).
//  shape_math  a small int64/float32 value computed from its inputs' shapes and
//            values when the input shapes are known (op: shape with start, end and
//            perm (the shape of the input transposed by it), gather, concat,
//            slice, range, ..., fake_quant with fake_quant's parameters;
//            core/shape_plan.hpp); a reshape may read its
//            target from one as input 1.
//  Routine families add their own types (register_layer_type), e.g. the
//  Winograd sub-layers wgenc/wgconv/wgdec in src/routines/cpu/winograd.cpp.
#pragma once

#include "core/fixed_point.hpp"

#include <softneuro/routine.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace softneuro::core {

struct LayerType {
  std::string_view name;
  int min_inputs;
  int max_inputs;  ///< -1: any number
  /// Output shapes from input shapes; throws Error (field named) on inconsistency.
  ShapeInference infer;
  int outputs = 1;  ///< outputs a layer of this type has; 0: as many as it names (at least 1)
  /// Evaluated when the net's input shapes are known (core::specialize), never by a routine.
  bool plan_time = false;
  /// Its output shapes depend on its input values (NonMaxSuppression, NonZero):
  /// `infer` gives each output's capacity, the most it can hold; a routine writes
  /// the actual elements first (row-major in the actual shape), zeros after them,
  /// and reports the actual shapes (RunArgs::output_shapes). The layers reading
  /// such outputs run in a later stage, planned at the actual shapes (core/stages.hpp).
  bool value_shaped = false;
  /// Value-shaped only in some layers of the type (top_k with a K computed at run time).
  bool (*value_shaped_when)(const Layer& layer) = nullptr;
  /// Its "weight" is integers by definition (dynamic_quant_dense: the model's
  /// arithmetic is on them): kept int8 in `.dnn` files and handed to every
  /// built-in routine as stored, never as a float copy.
  bool integer_weight = false;
};

/// A loop layer's inputs: [cond, (trip count M), carried..., outer values...]
/// and outputs [carried..., scan outputs...] (docs/layer-types.md, "loop").
struct LoopPorts {
  bool trip_count_input = false;  ///< input 1 is M (param m_input)
  std::size_t first_carried = 1;
  std::size_t carried = 0, scan_outputs = 0;
  /// Inputs after the carried ones read a slice per iteration (their first
  /// axis; param scan_inputs): the trip count is their length.
  std::size_t scan_inputs = 0;
};
LoopPorts loop_ports(const Layer& layer, std::size_t inputs);
/// A loop layer's body (its weight "body": a .dnn graph's bytes), read, checked
/// and sorted; its inputs [iteration, cond, carried..., outer...], its outputs
/// [cond, carried..., scan outputs...].
struct Graph;
Graph loop_body(const Layer& layer);

/// The type named `name` (built in or registered), or nullptr.
const LayerType* find_layer_type(std::string_view name);
/// Whether this layer's output shapes depend on its input values (LayerType::value_shaped).
bool is_value_shaped(const Layer& layer);
/// Whether this layer's weight is integers by definition (LayerType::integer_weight).
bool has_integer_weight(const Layer& layer);
/// Every layer type, built in and registered, for tests and `inspect`.
std::vector<LayerType> layer_types();

/// Helpers for shape inference functions (the built-in ones and those of
/// registered types): each throws Error naming the layer and field.
[[noreturn]] void fail_field(const Layer& layer, const std::string& field, const std::string& message);
void expect_rank(const Layer& layer, const Shape& shape, int rank, const char* what = "input");
/// The integer list `key` (or `fallback`), which must have n values.
std::vector<int64_t> ints_of_size(const Layer& layer, const char* key, std::size_t n, std::vector<int64_t> fallback);
/// An optional bias weight must be [channels].
void check_optional_bias(const Layer& layer, int64_t channels);

/// Col2Im's number of block positions along each of its r spatial dims (checked; errors name the field).
std::vector<int64_t> col2im_positions(const Layer& layer, std::size_t r);

/// One axis of an ONNX Slice clamped to a dim: the first index and how many are taken.
struct SliceRange {
  int64_t start, count;
};
SliceRange slice_range(int64_t start, int64_t end, int64_t step, int64_t dim);

/// Checks input/output counts and runs the type's shape inference; errors name the layer.
std::vector<Shape> infer_layer_shapes(const Layer& layer, std::span<const Shape> inputs);

/// Geometry of conv2 and pool2 (the two share it), derived once from parameters.
/// The largest stride, dilation, pad and kernel size a window may have, and
/// the largest spatial size of its input: every routine's 32-bit fields
/// (XNNPACK's among them) hold products of these, and sizes computed from them
/// cannot overflow int64_t. Larger values in a file are an Error naming the field.
inline constexpr int64_t kMaxWindowParam = 1 << 16;
inline constexpr int64_t kMaxSpatial = int64_t{1} << 30;

struct Window2d {
  int64_t n, c, h, w;        ///< input
  int64_t oc, oh, ow;        ///< output channels and size
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pt, pl, pb, pr;    ///< pads top, left, bottom, right
  int64_t group = 1;
};
Window2d conv2_window(const Layer& layer, const Shape& input);
Window2d pool2_window(const Layer& layer, const Shape& input);
/// Geometry of deconv2 (oc, oh, ow: its output; oph, opw: output_padding).
struct Deconv2Window : Window2d {
  int64_t oph = 0, opw = 0;
};
Deconv2Window deconv2_window(const Layer& layer, const Shape& input);

/// Fused activation of conv2/dense, resolved from parameters.
struct Activation {
  enum Kind { none, relu, clip, hardswish, hardsigmoid, sigmoid, silu, gelu, gelu_tanh } kind = none;
  float min = 0, max = 0;       ///< clip bounds
  float alpha = 0, beta = 0;    ///< hardsigmoid
  /// After the activation: y * scale + shift (a conv2's or dense's `act_scale`
  /// and `act_shift`, fuse_output_affine: PP-LCNetV3's affine blocks).
  float scale = 1, shift = 0;
  bool affine() const { return scale != 1 || shift != 0; }
};
/// The layer's fused activation. Where it has an affine after it (act_scale,
/// act_shift), only routines that apply that too ask for it (`with_affine`):
/// for the others this throws an Error, so that their supports() refuses the
/// layer instead of dropping the affine.
/// A fused gelu (dense layers: fuse_activations) likewise only for routines
/// that apply it (`with_gelu`).
Activation fused_activation(const Layer& layer, bool with_affine = false, bool with_gelu = false);
/// Applies an activation to one value (reference semantics).
float apply_activation(const Activation& act, float x);

/// A layer whose file (TensorFlow Lite) defines its int8 result by the
/// interpreter's integer arithmetic with fixed-point multipliers
/// (core/fixed_point.hpp): an add (the scaled inputs summed, as its XNNPACK
/// path does), a prelu (TflitePrelu), a fake_quant between integer grids
/// (FakeQuant::requantize). Routines that compute such a layer in float refuse it.
inline bool requantizes_as_tflite(const Layer& l) { return l.get_string("requantize", "") == "tflite"; }

/// TensorFlow Lite's int8/uint8 PRELU on real values that lie on the input's
/// grid: x >= 0 scaled by input_scale / output_scale, x < 0 times the integer
/// alpha by input_scale * alpha_scale / output_scale (each product in float,
/// as the interpreter computes them), onto the output's grid.
struct TflitePrelu {
  float input_scale = 1, alpha_scale = 1, output_scale = 1;
  int32_t output_zero_point = 0, qmin = -128, qmax = 127;
  FixedPointMultiplier positive, negative;
  /// The alpha's integer (less its zero point) for its real value.
  int32_t alpha_levels(float slope) const { return grid_levels(slope, alpha_scale); }
  float apply(float x, int32_t alpha) const {
    const int32_t levels = grid_levels(x, input_scale);
    const int32_t v = levels >= 0 ? multiply(levels, positive) : multiply(levels * alpha, negative);
    return static_cast<float>(std::clamp(v + output_zero_point, qmin, qmax) - output_zero_point) * output_scale;
  }
};
/// A prelu's TflitePrelu parameters (requantizes_as_tflite), checked.
TflitePrelu tflite_prelu_params(const Layer& layer);

/// TensorFlow Lite's int8/uint8 ADD as the interpreter runs it (XNNPACK's
/// quantised add): each input's integers (less their zero points) times a
/// multiplier below 2^21, s_in / s_out scaled by 2^shift and rounded, summed
/// with 2^(shift-1) in wrapping int32, shifted right; on real values that lie
/// on the inputs' grids. XNNPACK takes scale ratios in [2^-10, 2^8) only.
struct TfliteAdd {
  float a_scale = 1, b_scale = 1, output_scale = 1;
  float a_inverse = 1, b_inverse = 1;  ///< 1 / the inputs' scales: on the grid, x * (1/s) rounds to x / s's integer
  int32_t a_multiplier = 0, b_multiplier = 0, output_zero_point = 0, qmin = -128, qmax = 127;
  int shift = 0;
  float apply(float a, float b) const {
    const auto la = static_cast<uint32_t>(nearest_integer(a * a_inverse)), lb = static_cast<uint32_t>(nearest_integer(b * b_inverse));
    const uint32_t acc = (uint32_t{1} << (shift - 1)) + la * static_cast<uint32_t>(a_multiplier) +
                         lb * static_cast<uint32_t>(b_multiplier);
    const int32_t q = std::clamp((static_cast<int32_t>(acc) >> shift) + output_zero_point, qmin, qmax);
    return static_cast<float>(q - output_zero_point) * output_scale;
  }
};
/// Whether the scales make an add XNNPACK's (both ratios in [2^-10, 2^8)).
bool tflite_add_in_range(float a_scale, float b_scale, float output_scale);
/// An add's TfliteAdd parameters (requantizes_as_tflite: input_scales,
/// output_scale, output_zero_point, qmin, qmax), checked.
TfliteAdd tflite_add_params(const Layer& layer);

/// One resized axis of a resize layer: where output index x reads (ONNX Resize).

struct ResizeAxis {
  enum Transform { half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric,
                   tf_half_pixel_for_nn, tf_crop_and_resize } transform = half_pixel;
  enum Rounding { round_prefer_floor, round_prefer_ceil, floor, ceil } rounding = round_prefer_floor;
  int64_t in = 1, out = 1;
  double scale = 1;              ///< out/in where sizes were given, else the given scale
  double roi_start = 0, roi_end = 1;
  /// The source coordinate of output index x (may lie outside [0, in-1]).
  double source(int64_t x) const;
  /// tf_crop_and_resize reads outside the input there: the output is extrapolation_value.
  bool outside(double src) const { return transform == tf_crop_and_resize && (src < 0 || src > double(in - 1)); }
  /// The nearest input index of a source coordinate, clamped into the input.
  int64_t nearest(double src) const;
  /// A source coordinate clamped into [0, in - 1] (NaN: 0), where linear
  /// interpolation reads: safe to convert to an index.
  double clamped(double src) const { return src >= 0 ? std::min(src, double(in - 1)) : 0.0; }
};
struct ResizeGeometry {
  bool linear = false;
  bool cubic = false;            ///< 4 taps of Keys' cubic convolution (coefficient cubic_a)
  double cubic_a = -0.75;
  bool exclude_outside = false;  ///< cubic: taps outside the input weigh 0, the rest renormalised
  /// Linear or cubic downsampling with the kernel stretched by in/out (ONNX's
  /// antialias: as many taps as the kernel covers, their weights normalised).
  bool antialias = false;
  float extrapolation_value = 0;
  ResizeAxis h, w;
};
ResizeGeometry resize_geometry(const Layer& layer, const Shape& input, const Shape& output);

/// One axis of TensorFlow Lite's int8 RESIZE_BILINEAR as the interpreter runs
/// it (XNNPACK's: source positions in float, 11-bit weights): output i blends
/// lo[i] and hi[i] with weight[i] / 2^11 on hi.
struct TfliteResizeAxis {
  std::vector<int64_t> lo, hi;
  std::vector<int32_t> weight;
};
/// A linear resize with requantize = tflite (and its grid's `scale`): each
/// axis's taps for the layer's coordinate transformation (half_pixel,
/// align_corners or asymmetric, TFLite's legacy mode).
TfliteResizeAxis tflite_resize_axis(const Layer& layer, int64_t in, int64_t out);
/// Its checks alone (mode, sizes below 2^24), naming the field.
void check_tflite_resize(const Layer& layer, int64_t in, int64_t out);
/// The blend of four levels (values / scale) by XNNPACK's int8 bilinear kernel:
/// horizontal then vertical, in 2^22ths, rounded half up.
inline int32_t tflite_bilinear(int32_t tl, int32_t tr, int32_t bl, int32_t br, int32_t wx, int32_t wy) {
  const int32_t top = tl * 2048 + (tr - tl) * wx, bottom = bl * 2048 + (br - bl) * wx;
  const int32_t acc = top * 2048 + (bottom - top) * wy;
  return (acc + (1 << 21)) >> 22;
}

/// Geometry of lstm and gru (`gates`: 4 or 3), checked against the weights.
struct RnnGeometry {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0;
  int directions = 1;
  bool reverse = false;      ///< direction = reverse (one direction, run backwards)
  bool batch_first = false;  ///< layout = 1
  int gates = 4;
  float clip = 0;            ///< 0: none
  bool has_bias = false, has_peephole = false, has_initial_h = false, has_initial_c = false;
  bool linear_before_reset = false;  ///< gru
  bool input_forget = false;         ///< lstm
  /// Offsets into x, y ([T,B,*] or [B,T,*]) and the states ([D,B,H] or [B,D,H]).
  int64_t row(int64_t t, int64_t b) const { return batch_first ? b * seq + t : t * batch + b; }
  int64_t x_at(int64_t t, int64_t b) const { return row(t, b) * input; }
  int64_t y_at(int64_t t, int d, int64_t b) const {
    return (batch_first ? (b * seq + t) * directions + d : (t * directions + d) * batch + b) * hidden;
  }
  int64_t state_at(int d, int64_t b) const { return (batch_first ? b * directions + d : d * batch + b) * hidden; }
  /// Whether direction d walks the sequence from its end.
  bool backwards(int d) const { return d == 1 || reverse; }
};
RnnGeometry rnn_geometry(const Layer& layer, std::span<const Shape> inputs);

/// An einsum layer's equation, checked against its inputs: each operand's
/// letters (one per dim; a repeated letter takes the diagonal), the output's,
/// and each letter's size (operands' dims of it agree, or are 1 and broadcast).
/// Letters of no output dim are summed over.
struct EinsumSpec {
  std::vector<std::string> operands;
  std::string output;
  std::map<char, int64_t> sizes;
};
EinsumSpec einsum_spec(const Layer& layer, std::span<const Shape> inputs);

/// An attention layer's sizes and the element strides, in canonical dim order
/// (batch, head, sequence, feature), of its inputs and output; broadcast dims
/// have stride 0. K and V may have fewer heads than Q where theirs divide Q's
/// (grouped-query attention: query head h reads key/value head h / group).
/// Checked against the inputs: errors name the layer and field.
struct AttentionGeometry {
  int64_t b = 1, h = 1, sq = 1, sk = 1, d = 1, dv = 1;
  std::array<int64_t, 4> q{}, k{}, v{}, out{}, mask{};  ///< mask: [b, h, query, key]
  int64_t k_group = 1, v_group = 1;  ///< query heads per key / value head
  /// Where the keys / values of batch b read by query head h start.
  int64_t k_at(int64_t b_, int64_t h_) const { return b_ * k[0] + h_ / k_group * k[1]; }
  int64_t v_at(int64_t b_, int64_t h_) const { return b_ * v[0] + h_ / v_group * v[1]; }
  bool grouped() const { return k_group > 1 || v_group > 1; }
  bool has_mask = false;
  bool causal = false;
  int64_t causal_offset = 0;  ///< key j is hidden from query i where j > i + causal_offset
  bool zero_masked_rows = false;
  float scale = 1;
  std::array<int64_t, 4> out_shape{};  ///< canonical [B,H,Sq,Dv] permuted by out_perm
  /// Whether key j is hidden from query i by `causal`.
  bool hidden(int64_t i, int64_t j) const { return causal && j > i + causal_offset; }
  /// The keys query i sees under `causal`: [0, visible(i)).
  int64_t visible(int64_t i) const { return causal ? std::clamp<int64_t>(i + causal_offset + 1, 0, sk) : sk; }
};
AttentionGeometry attention_geometry(const Layer& layer, std::span<const Shape> inputs);

/// A linear_attention layer's sizes (ONNX LinearAttention): B batches of T
/// tokens, hq query heads sharing hkv key/value heads, keys of dk, values of dv;
/// which optional inputs it reads (past_state, then decay for the gated rules,
/// then beta for the delta rules) and their forms. Throws Error naming the field.
struct LinearAttentionGeometry {
  int64_t b = 1, t = 1, hq = 1, hkv = 1, dk = 1, dv = 1;
  bool has_past = false, gated = false, delta = false;
  bool decay_per_key = false;  ///< decay [B, T, hkv * dk] (else one per head: [B, T, hkv])
  bool beta_per_head = false;  ///< beta [B, T, hkv] (else one for every head: [B, T, 1])
};
LinearAttentionGeometry linear_attention_geometry(const Layer& layer, std::span<const Shape> inputs);

/// Parameters of a fake_quant layer, checked.
struct FakeQuant {
  float scale = 1;
  int32_t zero_point = 0, qmin = 0, qmax = 255;
  /// TensorFlow Lite's QUANTIZE between integer types (`requantize = tflite`):
  /// the input lies on the grid of `input_scale`, and its integers (less their
  /// zero point) map through the fixed-point multiplier input_scale / scale.
  bool requantize = false;
  float input_scale = 1;
  FixedPointMultiplier multiplier;
  /// The ONNX QuantizeLinear -> DequantizeLinear of one value, in float as ONNX
  /// Runtime does; or TensorFlow Lite's integer requantisation.
  float apply(float x) const {
    if (requantize) {
      const int32_t levels = grid_levels(x, input_scale);
      const int32_t q = std::clamp(multiply(levels, multiplier) + zero_point, qmin, qmax);
      return static_cast<float>(q - zero_point) * scale;
    }
    const float q = std::clamp(std::nearbyint(x / scale) + static_cast<float>(zero_point), static_cast<float>(qmin),
                               static_cast<float>(qmax));
    return (q - static_cast<float>(zero_point)) * scale;
  }
  /// The same quantisation in int8 terms (qint8 routines: zero point in [-128, 127]).
  QuantParams as_int8() const;
};
FakeQuant fake_quant_params(const Layer& layer);

/// ONNX DynamicQuantizeLinear's scale and zero point for a tensor's min and max.
void dynamic_quant_params(float min, float max, float& scale, float& zero_point);

/// NumPy broadcast of two shapes; throws Error naming the layer when incompatible.
Shape broadcast_shapes(const Layer& layer, const Shape& a, const Shape& b);
/// Normalises a possibly negative axis for a given rank; throws Error naming the field.
int normalize_axis(const Layer& layer, const char* field, int64_t axis, int rank);
/// reduce: which axes of `input` the layer reduces (its `axes`; none given: all).
std::vector<bool> reduced_axes(const Layer& layer, const Shape& input);

}  // namespace softneuro::core
