// Graph passes: rewrites of a core::Graph that keep its outputs the same (up to
// float rounding) and make it cheaper to run. Each pass is a small unit of its
// own, tested on its own; the importer runs them in the order of PassOptions.
//
// Every pass checks and sorts the graph first (core::sort_topologically), so
// it may be given layers in any order, and leaves them sorted. A pass never
// writes into an existing weight blob (copies of a graph share weight memory):
// it allocates new blobs for what it changes.
#pragma once

#include "core/graph.hpp"

#include <vector>

namespace softneuro::core {

/// Drops the layers flagged in `removed` (one flag per layer), keeping the order of the others.
void erase_flagged(Graph& graph, const std::vector<bool>& removed);

/// Removes identity layers: their consumers read the identity's input instead.
/// An identity whose output is a net output renames its producer's output
/// instead, when that producer is a layer whose output is not itself a net output.
/// Returns the number of layers removed.
int remove_identities(Graph& graph);

/// Runs one layer on constant float32 inputs, once, with the cpu/ref routine
/// where it supports the layer and its outputs hold at most 2^20 values, else
/// the registry's default choice in the default schema: its outputs.
std::vector<Blob> evaluate_layer(const Layer& layer, const std::vector<Blob>& inputs);

/// Computes once every layer whose inputs are all outputs of constant layers
/// (with the cpu/ref routine through the registry, else the default choice in
/// the default schema) and replaces it by constant layers holding its outputs.
/// Layers no routine supports are left alone. Returns the number of layers folded.
int fold_constants(Graph& graph);

/// Folds the dequantisation after a gather of an int8/uint8 table (the
/// weight "table": ONNX Runtime's quantize_dynamic quantises an embedding so,
/// imported as sub(zero point) then mul(scale)) into the table, which keeps
/// its integers as qint8/quint8 with that scale and zero point: a quarter of
/// the float table's memory, rows dequantised as they are read, the values
/// DequantizeLinear gives. Per tensor (scalar zero point and scale) only.
/// Returns the number of layers folded.
int fold_dequantized_gather(Graph& graph);

/// Rewrites a dense layer as ONNX Runtime's quantize_dynamic writes it,
/// dynamic_quantize(x) -> sub(q, zero point) -> dense (integer weights in
/// [-127, 127]: MatMulInteger's B) -> mul(sums, mul(scale, s_w)) with s_w a
/// constant per tensor or per output channel, then an add of a constant per
/// output channel (its bias), as one `dynamic_quant_dense(x)`: the weight
/// int8 with scales s_w, the same arithmetic, computed in integers by its
/// int8 routines (a quantised BERT ran at float32's speed). The quantisation
/// layers go once nothing else reads them. Returns the number of layers folded.
int fuse_dynamic_quant_dense(Graph& graph);

/// Folds a batchnorm into the conv2, deconv2 (or rank-2 dense) that produces
/// its input, when that output has no other consumer, is not a net output and
/// the layer has no fused activation: the weights are scaled per output channel
/// and the bias shifted. Returns the number of batchnorms folded.
int fold_batchnorm(Graph& graph);

/// Folds `add(x, c)` (either order), where x comes from a conv2/deconv2/dense
/// without fused activation, read by nothing else and not a net output, and c
/// is a constant with one value per output channel (shape [O] or [1,..,1,O] for
/// dense, [O,1,1] or [1,O,1,1] for conv2 and deconv2) or one value in all, into
/// that layer's bias (a ConvTranspose's bias exported as an add, PP-OCRv4's
/// detector). Returns the number of adds folded.
int fold_bias_add(Graph& graph);

/// Folds `mul(x, c)` under the same conditions into that layer's weights and
/// bias (each output channel's scaled by its value): the learnable scalar
/// affine blocks of PP-LCNetV3 (PP-OCRv4's recogniser), a conv's scale
/// exported apart. Returns the number of muls folded.
int fold_scale_mul(Graph& graph);

/// Folds `mul(x, c)` and `add(x, d)` read only by a conv2 or dense (its first
/// input), with c and d constants of one value per input channel or one in
/// all, into that layer: W[o][i] * c[i], and bias[o] + sum W[o][i] d[i] where
/// the conv2 has no padding (at a padded border x + d would read d, not 0).
/// PP-LCNetV3's affine blocks after an activation, input normalisation
/// ((x - mean) / std before the stem, where exported as mul and add).
/// Returns the number of layers folded.
int fold_input_affine(Graph& graph);

/// Rewrites `mul(x, hardsigmoid(x))` with alpha 1/6 and beta 0.5 (either
/// order; how exporters before ONNX opset 14 write hardswish) into one
/// `hardswish(x)`, and `mul(x, sigmoid(x))` (how exporters write SiLU/Swish:
/// YOLOv5/v8, EfficientNet) into one `silu(x)`, when the gate's output has no
/// other consumer and is not a net output. One pass over the blob instead of
/// two, and a conv2 before a hardswish can fuse it; in qint8 nets two fewer
/// blobs to quantise. Returns the number of rewrites.
int fuse_self_gating(Graph& graph);

/// Fuses relu, clip, hardswish, hardsigmoid, sigmoid and silu into the
/// conv2/deconv2/dense that produces their input (its `act` parameters), and relu and clip into an
/// add (ResNet's residual add -> relu: one pass over the blob instead of two),
/// when that output has no other consumer, is not a net output and the layer
/// has no activation yet.
/// Returns the number of activations fused.
int fuse_activations(Graph& graph);

/// Fuses `mul(x, c)` and `add(x, d)` after a conv2/dense with a fused
/// activation, c and d single constants, into its `act_scale` and `act_shift`
/// (y = act(z) * act_scale + act_shift): PP-LCNetV3's affine blocks before a
/// padded depthwise convolution, where fold_input_affine cannot take the add.
/// Routines that do not apply them refuse the layer (core::fused_activation).
/// Returns the number of layers fused.
int fuse_output_affine(Graph& graph);

/// A pad of zeros on H and W (constant mode) read only by a conv2 becomes that
/// convolution's padding (TensorFlow exports pad explicitly before strided
/// convolutions). Returns the number of pads folded.
int fold_pads(Graph& graph);

/// Rewrites scaled dot-product attention as the exporters write it into one
/// `attention` layer: matmul(Q, Kᵀ), scalings by constants (on Q, Kᵀ or the
/// scores), an optional add of a mask, softmax over the keys, optionally the
/// Where(IsNaN(p), 0, p) guard (masked_rows = zero), matmul with V; rank-4
/// transposes in front of Q, K and V and one after the output become the
/// layer's perms. Each intermediate blob must be read only within the pattern
/// and leave no net output; the layer is checked to compute the same shapes.
/// Returns the number of attention layers made.
int fuse_attention(Graph& graph);

/// Transformers' rotary position embedding, x * cos + rotate_half(x) * sin
/// with rotate_half(x) = concat(-x2, x1) of x's halves along its last dim
/// (add, two muls, a split, a neg and a concat), becomes one `rotary` layer
/// where the blobs between are read only there. Returns the number made.
int fuse_rotary(Graph& graph);

/// An attention layer whose K or V repeats each head of a blob `group` times
/// in a row (transformers' repeat_kv for grouped-query attention: unsqueeze,
/// expand, reshape; or a concat of copies) reads that blob instead: query head
/// h reads key/value head h / group, and the copies are not made. Returns the
/// number of inputs rewired (the repeats, unread, go with the dead layers).
int share_kv_heads(Graph& graph);

/// Keeps one of layers that compute the same thing: the same type, inputs,
/// parameters and weights (the same memory, or equal bytes); readers of the
/// others read its outputs. Layers writing a net output stay. BERT's exports
/// compute the attention mask once per encoder layer: twelve `where` steps
/// become one. Returns the number of layers removed.
int merge_duplicates(Graph& graph);

/// Gives a one-value constant operand of an add, mul, sub or div the rank of
/// the output ([1,1,1,1] for a scalar beside a rank-4 blob), as a constant of
/// its own: the same broadcast, which oneDNN's binary also takes in blocked
/// and channels-last layouts, so a scalar affine between convolutions (a QDQ
/// model's, where Q/DQ steps keep it out of the convolution) stays in their
/// layout. Returns the number of operands rewritten.
int broadcast_scalar_operands(Graph& graph);

/// Removes layers none of whose outputs a net output depends on.
/// Returns the number of layers removed.
int eliminate_dead_layers(Graph& graph);

/// A quantised model's own quantisation, for the qint8 routines: each
/// fake_quant layer's on its output, and on its input where nothing else gave
/// that one (the layer before then writes int8 straight at it, as QLinearConv
/// does). Empty for a float model.
std::map<std::string, QuantParams> model_quantisation(const Graph& graph);

/// Which passes optimize() runs.
struct PassOptions {
  bool remove_identities = true;
  bool fold_constants = true;
  bool fold_dequantized_gather = true;
  bool fuse_dynamic_quant_dense = true;
  bool fold_pads = true;
  bool fold_batchnorm = true;
  bool fold_scale_mul = true;
  bool fold_bias_add = true;
  bool fold_input_affine = true;
  bool fuse_self_gating = true;
  bool fuse_activations = true;
  bool fuse_output_affine = true;
  bool fuse_rotary = true;
  bool fuse_attention = true;
  bool merge_duplicates = true;
  bool broadcast_scalar_operands = true;
  bool eliminate_dead_layers = true;
};

/// Runs the enabled passes in the order of PassOptions' fields (dead layers
/// last, so that constants left unused by the other passes go too).
void optimize(Graph& graph, const PassOptions& options = {});

}  // namespace softneuro::core
