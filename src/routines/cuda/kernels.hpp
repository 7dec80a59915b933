// Our CUDA kernels, as host functions that queue them on a stream. Plain C++
// (no CUDA syntax, no project headers): kernels.cu and transfer_kernels.cu
// define them with nvcc; the routines in kernels.cpp, cudnn.cpp, cublas.cpp
// and transfer.cpp call them. Elements are float32 or float16
// (IEEE binary16); arithmetic is float32 either way. Every launcher returns
// the launch's error (cudaSuccess when queued).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace softneuro::cuda::kern {

enum class Elem : int { f32 = 0, f16 = 1 };

/// Activations (the fused ones of conv2/dense, and the unary layer types).
enum class Act : int { none = 0, relu, clip, hardswish, hardsigmoid, sigmoid, tanh, gelu, gelu_tanh, silu };
struct ActParams {
  Act kind = Act::none;
  float a = 0, b = 0;  ///< clip: [a, b]; hardsigmoid: max(0, min(1, a*x + b))
  /// After the activation, where `affine`: y * scale + shift (a conv2's or
  /// dense's act_scale and act_shift).
  bool affine = false;
  float scale = 1, shift = 0;
};

/// One thread that spins for `ms` of the device's clock (a hold for unit timing).
cudaError_t hold(double ms, cudaStream_t s);

/// y[i] = act(x[i]) for n elements (any layout: elementwise).
cudaError_t unary(Elem t, ActParams act, const void* x, void* y, int64_t n, cudaStream_t s);

/// Per-channel affine and activation over a blob seen as [outer, C, inner]
/// (channels_last: [outer, inner, C]): y = act(x * scale[c] + shift[c]).
/// scale/shift are float32 device arrays of C, or nullptr (1 and 0). x may be y.
cudaError_t channel_affine(Elem t, const void* x, void* y, const float* scale, const float* shift, int64_t outer,
                           int64_t channels, int64_t inner, bool channels_last, ActParams act, cudaStream_t s);

/// Strided addressing of up to 8 dims: an output walked in row-major order of
/// `dims`, and the element strides of one or two operands along each dim
/// (0 where an operand is broadcast).
struct Strided {
  static constexpr int max_rank = 8;
  int rank = 0;
  int64_t dims[max_rank] = {};
  int64_t sa[max_rank] = {};
  int64_t sb[max_rank] = {};
  int64_t sc[max_rank] = {};  ///< a third input's (where)
};

/// add..div; then compare (eq..ge) and logical (land..lxor), which give 1 or 0.
enum class BinOp : int { add = 0, sub, mul, div, eq, ne, lt, le, gt, ge, land, lor, lxor };
/// y = act(a op b) with NumPy broadcasting expressed by `st` over n output elements.
/// `same`: a and b are laid out like y (no index arithmetic).
cudaError_t binary(Elem t, BinOp op, const void* a, const void* b, void* y, int64_t n, const Strided& st, bool same,
                   ActParams act, cudaStream_t s);

/// y = condition != 0 ? a : b (NumPy broadcasting: condition sa, a sb, b sc over n output elements).
cudaError_t where(Elem t, const void* condition, const void* a, const void* b, void* y, int64_t n, const Strided& st,
                  cudaStream_t s);

/// y[i] = x[offset(i)]: a permutation (transpose) or any gather by strides (sa).
cudaError_t strided_copy(Elem t, const void* x, void* y, int64_t n, const Strided& st, cudaStream_t s);

/// Geometry of conv2/pool2 (as core::Window2d).
struct Window {
  int64_t n, c, h, w;
  int64_t oc, oh, ow;
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pt, pl, pb, pr;
};

/// Max or average pooling (count_include_pad: divide by the taps inside the
/// padded input; ceil-mode overhang never counts). An all-padding max window gives -inf.
cudaError_t pool2(Elem t, bool is_max, bool count_include_pad, const Window& g, bool nhwc, const void* x, void* y,
                  cudaStream_t s);

/// Depthwise convolution: output channel o reads input channel o / (oc / c);
/// w float32 [oc, 1, kh, kw]; bias float32 [oc] or nullptr; then the activation.
cudaError_t depthwise(Elem t, const Window& g, bool nhwc, const void* x, const float* w, const float* bias,
                      ActParams act, void* y, cudaStream_t s);

/// Softmax over `len` elements of stride `inner`, for outer * inner rows.
cudaError_t softmax(Elem t, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, cudaStream_t s);

/// Layer normalisation of `outer` contiguous rows of `inner`: scale (and bias,
/// or nullptr) float32 [inner].
cudaError_t layernorm(Elem t, const void* x, void* y, const float* scale, const float* bias, int64_t outer,
                      int64_t inner, float epsilon, cudaStream_t s);

/// Attention (core::AttentionGeometry): per batch, head and query row,
/// softmax(scale * q.k + mask) . v, each operand read through its element
/// strides in [b, h, seq, feature] order (0 where broadcast); the mask is in
/// the element type too, `mask` nullptr where there is none. Keys past
/// `i + causal_offset` are hidden from query i where `causal`. A row whose
/// every key is -inf (or whose scores meet NaN or +inf) is NaN, or 0 where
/// `zero_masked_rows`, as softmax gives it.
struct Attention {
  int64_t b = 1, h = 1, sq = 1, sk = 1, d = 1, dv = 1;
  int64_t q[4] = {}, k[4] = {}, v[4] = {}, out[4] = {}, mask[4] = {};
  bool causal = false, zero_masked_rows = false;
  int64_t causal_offset = 0;
  float scale = 1;
};
/// The largest d and dv attention() takes.
constexpr int64_t kAttentionMaxHeadDim = 128;
/// cudaErrorInvalidValue where d or dv is above kAttentionMaxHeadDim.
cudaError_t attention(Elem t, const Attention& g, const void* q, const void* k, const void* v, const void* mask,
                      void* out, cudaStream_t s);

/// Rows of a table seen as [outer, len, inner] at `count` indices held as
/// floats (elements of type t, like the table): y[o, i, :] = table[o, idx[i], :],
/// a negative index counting from the end. An index that is no whole number in
/// [-len, len) gives a row of NaN (a kernel cannot raise the CPU routines' error).
cudaError_t gather_rows(Elem t, const void* table, const void* indices, void* y, int64_t outer, int64_t len,
                        int64_t inner, int64_t count, cudaStream_t s);

/// Dtype and layout conversion of a blob seen as [N, C, S] (nhwc: [N, S, C]),
/// any of float32/float16 x nchw/nhwc to any (defined in transfer_kernels.cu).
cudaError_t convert(Elem from, bool from_nhwc, Elem to, bool to_nhwc, const void* x, void* y, int64_t n,
                    int64_t c, int64_t spatial, cudaStream_t s);

}  // namespace softneuro::cuda::kern
