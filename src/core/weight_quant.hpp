// The project's int8 weight convention, shared by every qint8 routine, the
// tuner (weights stored quantised) and the .dnn reader and writer.
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/routine.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace softneuro::core {

/// Whether a quantisation scale (of a weight, a blob, a calibration) lies in
/// the range the library computes with: [1e-30, 1e30], finite. Outside it
/// products of scales overflow or vanish in float, and a library under a
/// routine may assert; a file that holds one is damaged.
inline bool quant_scale_in_range(double s) { return s >= 1e-30 && s <= 1e30; }

/// Whether a 256-entry int8 table (Routine::int8_table: indexed by the byte as
/// uint8_t) maps every value to itself: the step applying it copies, or runs nothing.
inline bool int8_table_identity(const int8_t* table) {
  for (int q = -128; q < 128; ++q)
    if (table[static_cast<uint8_t>(static_cast<int8_t>(q))] != q) return false;
  return true;
}

/// Per output channel (the first `channels` rows of `k` values), symmetric:
/// s[o] = max|w[o]| / qmax (1 where a channel is all zeros or below 1.27e-28),
/// q = round(w / s) in [-qmax, qmax]. qmax: 127 (the convention), or 63 for
/// kernels whose int16 pair sums need 7-bit weights (vpmaddubsw).
/// Throws softneuro::Error (field "weight") on a value that is not finite or
/// needs a scale above 1e30 (|w| > 1.27e32).
struct ChannelQuantized {
  std::vector<int8_t> q;     ///< [channels][k]
  std::vector<float> scale;  ///< [channels]
};
/// With `grid` (a model's own int8 weight: int8_grid_scales), a channel whose
/// values lie on its grid within [-qmax, qmax] keeps the model's scale and
/// integers, whatever its largest value (an ONNX QDQ weight's scale comes from
/// its calibration, not always from max|w| / 127): the model's own arithmetic.
ChannelQuantized quantize_per_channel(const float* w, int64_t channels, int64_t k, int qmax = 127,
                                      const std::vector<float>* grid = nullptr);
/// The per-output-channel scales of a weight that carries its int8 grid
/// (stored_as_int8, axis 0 of `channels`), else nullptr.
const std::vector<float>* int8_grid_scales(const Blob& w, int64_t channels);

/// A bias value on the int32 grid of its conv/dense's accumulators (step
/// s_in * s_w), rounded and clamped to +-2^30 (headroom for the products added
/// to it). Throws softneuro::Error (field "bias") where it is not finite.
int32_t quantize_bias_value(float bias, double step);

/// `w` (float32, axis 0 = output channels) moved onto its int8 grid of
/// [-qmax, qmax]: values q * s whose quantize_per_channel(..., qmax) gives back exactly those q and s, so a
/// qint8 routine computes with it what it computed with `w`. The blob carries
/// the scales (axis 0), which tells the .dnn writer to store it as int8.
/// Nothing where no such scales are found (a channel with non-finite values).
std::optional<Blob> on_int8_grid(const Blob& w, int qmax = 127);

/// Whether a weight is on an int8 grid per output channel: a float32 one that
/// carries the scales of its grid (on_int8_grid's result), or an int8_weight.
bool stored_as_int8(const Blob& w);

/// Whether `w` is int8 values with their scales as a tuned file stores them:
/// qint8, per output channel (axis 0), symmetric. A loaded model keeps a
/// conv2's or dense's weight so (no float copy); the executor hands it only to
/// built-in qint8 routines and gives the others its float32 values.
bool int8_weight(const Blob& w);
/// Whether an int8 routine reads weight `key` of `layer`: plain on the CPU,
/// float32 (quantised in prepare) or, the "weight", an int8_weight. `required`:
/// a missing weight is a no.
Support int8_routine_weight(const Layer& layer, const char* key, bool required);
/// The float32 values of `w`: `w` itself where it is float32, else
/// dequantize_weight's copy. Routines given an int8_weight call it where they
/// derive weights, not sooner: with prepared weights they never do.
Blob float_weight(const Blob& w);
/// `w` per output channel (dim 0) on [-qmax, qmax], as quantize_per_channel
/// with its grid gives it: an int8_weight's own values and scales where they
/// fit qmax, without a float copy.
ChannelQuantized channel_int8(const Blob& w, int qmax = 127);

/// Whether `w` is a dense weight [N, K] of codes (quint8 or qint8 a byte each;
/// quint4 two a byte, K a multiple of 32) with one scale (and zero point) per block of
/// quant().block_size along K, N x ceil(K / block_size) of them: the 2-, 4-
/// and 8-bit blockwise weights of LLM files (ONNX Runtime's MatMulNBits).
/// Those weights are the model's own: a routine that reads them
/// (cpu/nbits_dense) computes the model's arithmetic in float32; the others
/// get their float32 values.
bool block_quantized(const Blob& w);
/// A block_quantized weight of a byte a code whose codes span at most 16
/// values (4-bit codes; int4's shifted by 8, with their zero points) as quint4
/// with the same values; nullopt for any other weight, or K not a multiple of 32.
std::optional<Blob> packed_codes4(const Blob& w);
/// Code i of quint4 codes (a row's, or a whole weight's: rows are whole groups).
inline int32_t quint4_code(const uint8_t* codes, int64_t i) {
  return (codes[i / 32 * 16 + i % 16] >> (i % 32 < 16 ? 0 : 4)) & 15;
}
/// Whether the model holds `w` in a form only some routines read (an
/// int8_weight or a block_quantized one); the others read its float32 values.
inline bool stored_quantized(const Blob& w) { return int8_weight(w) || block_quantized(w); }

/// The float32 values of an int8 weight (qint8 or quint8) with its scales and
/// zero points (per tensor, per slice of `quant().axis` or per block of it),
/// which it keeps.
/// An Error naming `field` where the scales do not fit the shape or are not
/// finite and positive, or a zero point lies outside the dtype.
Blob dequantize_weight(const Blob& q, const std::string& field);
/// dequantize_weight's checks alone: the Error it would throw, or nothing.
void check_weight_quant(const Blob& q, const std::string& field);

/// The int8 storage of a weight that stored_as_int8(): exact (q * s gives back
/// every value), else nothing (the weight is then stored as float32).
std::optional<Blob> int8_storage(const Blob& w);

}  // namespace softneuro::core
