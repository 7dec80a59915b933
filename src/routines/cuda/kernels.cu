// Our CUDA kernels (declared in kernels.hpp). Written to be plainly correct
// and memory-bound-efficient: grid-stride loops, one thread per output
// element, float32 arithmetic for both element types, block reductions for
// softmax and layernorm rows.
#include "routines/cuda/kernels_common.cuh"

namespace softneuro::cuda::kern {
namespace {

// ---------------------------------------------------------------------------
// Elementwise

template <class T>
__global__ void unary_kernel(ActParams act, const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  SOFTNEURO_GRID_LOOP(i, n) st(y, i, activate(act, ld(x, i)));
}

template <class T>
__global__ void channel_affine_kernel(const T* x, T* y, const float* __restrict__ scale,
                                      const float* __restrict__ shift, int64_t n, int64_t channels, int64_t inner,
                                      bool channels_last, ActParams act) {
  SOFTNEURO_GRID_LOOP(i, n) {
    const int64_t c = channels_last ? i % channels : (i / inner) % channels;
    float v = ld(x, i);
    if (scale) v *= scale[c];
    if (shift) v += shift[c];
    st(y, i, activate(act, v));
  }
}

__device__ __forceinline__ float binop(BinOp op, float a, float b) {
  switch (op) {
    case BinOp::add: return a + b;
    case BinOp::sub: return a - b;
    case BinOp::mul: return a * b;
    case BinOp::div: return a / b;
  }
  return 0.f;
}

template <class T>
__global__ void binary_same_kernel(BinOp op, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y,
                                   int64_t n, ActParams act) {
  SOFTNEURO_GRID_LOOP(i, n) st(y, i, activate(act, binop(op, ld(a, i), ld(b, i))));
}

template <class T>
__global__ void binary_strided_kernel(BinOp op, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y,
                                      int64_t n, Strided s, ActParams act) {
  SOFTNEURO_GRID_LOOP(i, n) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t c = rem % s.dims[d];
      rem /= s.dims[d];
      oa += c * s.sa[d];
      ob += c * s.sb[d];
    }
    st(y, i, activate(act, binop(op, ld(a, oa), ld(b, ob))));
  }
}

template <class T>
__global__ void strided_copy_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, Strided s) {
  SOFTNEURO_GRID_LOOP(i, n) {
    int64_t rem = i, off = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      off += (rem % s.dims[d]) * s.sa[d];
      rem /= s.dims[d];
    }
    y[i] = x[off];
  }
}

// ---------------------------------------------------------------------------
// Windows: pooling and depthwise convolution, one thread per output element.

struct Out4 {
  int64_t n, c, oh, ow;
};
__device__ __forceinline__ Out4 out_coords(const Window& g, int64_t i, bool nhwc) {
  Out4 o;
  if (nhwc) {
    o.c = i % g.oc;
    i /= g.oc;
    o.ow = i % g.ow;
    i /= g.ow;
    o.oh = i % g.oh;
    o.n = i / g.oh;
  } else {
    o.ow = i % g.ow;
    i /= g.ow;
    o.oh = i % g.oh;
    i /= g.oh;
    o.c = i % g.oc;
    o.n = i / g.oc;
  }
  return o;
}
__device__ __forceinline__ int64_t in_offset(const Window& g, int64_t n, int64_t c, int64_t h, int64_t w, bool nhwc) {
  return nhwc ? ((n * g.h + h) * g.w + w) * g.c + c : ((n * g.c + c) * g.h + h) * g.w + w;
}

template <class T>
__global__ void pool2_kernel(bool is_max, bool include_pad, Window g, bool nhwc, const T* __restrict__ x,
                             T* __restrict__ y, int64_t total) {
  SOFTNEURO_GRID_LOOP(i, total) {
    const Out4 o = out_coords(g, i, nhwc);
    float mx = -INFINITY, sum = 0.f;
    int inside = 0, padded = 0;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t ih = o.oh * g.sh - g.pt + ki * g.dh;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t iw = o.ow * g.sw - g.pl + kj * g.dw;
        if (ih >= -g.pt && ih < g.h + g.pb && iw >= -g.pl && iw < g.w + g.pr) ++padded;
        if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
        const float v = ld(x, in_offset(g, o.n, o.c, ih, iw, nhwc));
        ++inside;
        sum += v;
        mx = fmaxf(mx, v);
      }
    }
    const int div = include_pad ? padded : inside;
    st(y, i, is_max ? mx : (div ? sum / static_cast<float>(div) : 0.f));
  }
}

template <class T>
__global__ void depthwise_kernel(Window g, bool nhwc, const T* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ bias, ActParams act, T* __restrict__ y, int64_t total) {
  const int64_t mult = g.oc / g.c;
  SOFTNEURO_GRID_LOOP(i, total) {
    const Out4 o = out_coords(g, i, nhwc);
    const int64_t ic = o.c / mult;
    const float* wk = w + o.c * g.kh * g.kw;
    float acc = bias ? bias[o.c] : 0.f;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t ih = o.oh * g.sh - g.pt + ki * g.dh;
      if (ih < 0 || ih >= g.h) continue;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t iw = o.ow * g.sw - g.pl + kj * g.dw;
        if (iw < 0 || iw >= g.w) continue;
        acc = fmaf(ld(x, in_offset(g, o.n, ic, ih, iw, nhwc)), wk[ki * g.kw + kj], acc);
      }
    }
    st(y, i, activate(act, acc));
  }
}

// ---------------------------------------------------------------------------
// Row reductions

// One block per row of `len` contiguous elements.
template <class T>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t len) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * len;
    T* yr = y + r * len;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) mx = fmaxf(mx, ld(xr, j));
    mx = block_reduce<true>(mx);
    float sum = 0.f;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) sum += expf(ld(xr, j) - mx);
    sum = block_reduce<false>(sum);
    const float inv = 1.f / sum;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) st(yr, j, expf(ld(xr, j) - mx) * inv);
  }
}

// One thread per (outer, inner) column of `len` elements of stride `inner`.
template <class T>
__global__ void softmax_cols_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t len,
                                    int64_t inner) {
  SOFTNEURO_GRID_LOOP(i, outer * inner) {
    const int64_t base = (i / inner) * len * inner + i % inner;
    float mx = -INFINITY;
    for (int64_t j = 0; j < len; ++j) mx = fmaxf(mx, ld(x, base + j * inner));
    float sum = 0.f;
    for (int64_t j = 0; j < len; ++j) sum += expf(ld(x, base + j * inner) - mx);
    const float inv = 1.f / sum;
    for (int64_t j = 0; j < len; ++j) st(y, base + j * inner, expf(ld(x, base + j * inner) - mx) * inv);
  }
}

template <class T>
__global__ void layernorm_kernel(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ scale,
                                 const float* __restrict__ bias, int64_t rows, int64_t inner, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * inner;
    T* yr = y + r * inner;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x) s += ld(xr, j);
    const float mean = block_reduce<false>(s) / static_cast<float>(inner);
    float v = 0.f;
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x) {
      const float d = ld(xr, j) - mean;
      v += d * d;
    }
    const float var = block_reduce<false>(v) / static_cast<float>(inner);
    const float inv = rsqrtf(var + eps);
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x)
      st(yr, j, (ld(xr, j) - mean) * inv * scale[j] + (bias ? bias[j] : 0.f));
  }
}

int row_threads(int64_t len) {
  int t = 32;
  while (t < 1024 && t < len) t *= 2;
  return t > 256 ? 256 : t;
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 * 16 ? (rows < 1 ? 1 : rows) : 65535 * 16); }

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void hold_kernel(unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) {
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Launchers

cudaError_t hold(double ms, cudaStream_t s) {
  hold_kernel<<<1, 1, 0, s>>>(static_cast<unsigned long long>(ms > 0 ? ms * 1e6 : 0));
  return cudaGetLastError();
}

cudaError_t unary(Elem t, ActParams act, const void* x, void* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (t == Elem::f16)
    unary_kernel<__half><<<blocks_for(n), kThreads, 0, s>>>(act, static_cast<const __half*>(x), static_cast<__half*>(y), n);
  else
    unary_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(act, static_cast<const float*>(x), static_cast<float*>(y), n);
  return cudaGetLastError();
}

cudaError_t channel_affine(Elem t, const void* x, void* y, const float* scale, const float* shift, int64_t outer,
                           int64_t channels, int64_t inner, bool channels_last, ActParams act, cudaStream_t s) {
  const int64_t n = outer * channels * inner;
  if (n <= 0) return cudaSuccess;
  if (t == Elem::f16)
    channel_affine_kernel<__half><<<blocks_for(n), kThreads, 0, s>>>(
        static_cast<const __half*>(x), static_cast<__half*>(y), scale, shift, n, channels, inner, channels_last, act);
  else
    channel_affine_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(
        static_cast<const float*>(x), static_cast<float*>(y), scale, shift, n, channels, inner, channels_last, act);
  return cudaGetLastError();
}

cudaError_t binary(Elem t, BinOp op, const void* a, const void* b, void* y, int64_t n, const Strided& st, bool same,
                   ActParams act, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (t == Elem::f16) {
    auto A = static_cast<const __half*>(a);
    auto B = static_cast<const __half*>(b);
    auto Y = static_cast<__half*>(y);
    if (same) binary_same_kernel<__half><<<blocks_for(n), kThreads, 0, s>>>(op, A, B, Y, n, act);
    else binary_strided_kernel<__half><<<blocks_for(n), kThreads, 0, s>>>(op, A, B, Y, n, st, act);
  } else {
    auto A = static_cast<const float*>(a);
    auto B = static_cast<const float*>(b);
    auto Y = static_cast<float*>(y);
    if (same) binary_same_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(op, A, B, Y, n, act);
    else binary_strided_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(op, A, B, Y, n, st, act);
  }
  return cudaGetLastError();
}

cudaError_t strided_copy(Elem t, const void* x, void* y, int64_t n, const Strided& st, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (t == Elem::f16)
    strided_copy_kernel<uint16_t><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), n, st);
  else
    strided_copy_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(x), static_cast<float*>(y), n, st);
  return cudaGetLastError();
}

cudaError_t pool2(Elem t, bool is_max, bool count_include_pad, const Window& g, bool nhwc, const void* x, void* y,
                  cudaStream_t s) {
  const int64_t total = g.n * g.oc * g.oh * g.ow;
  if (total <= 0) return cudaSuccess;
  if (t == Elem::f16)
    pool2_kernel<__half><<<blocks_for(total), kThreads, 0, s>>>(is_max, count_include_pad, g, nhwc,
                                                               static_cast<const __half*>(x), static_cast<__half*>(y), total);
  else
    pool2_kernel<float><<<blocks_for(total), kThreads, 0, s>>>(is_max, count_include_pad, g, nhwc,
                                                              static_cast<const float*>(x), static_cast<float*>(y), total);
  return cudaGetLastError();
}

cudaError_t depthwise(Elem t, const Window& g, bool nhwc, const void* x, const float* w, const float* bias,
                      ActParams act, void* y, cudaStream_t s) {
  const int64_t total = g.n * g.oc * g.oh * g.ow;
  if (total <= 0) return cudaSuccess;
  if (t == Elem::f16)
    depthwise_kernel<__half><<<blocks_for(total), kThreads, 0, s>>>(g, nhwc, static_cast<const __half*>(x), w, bias,
                                                                   act, static_cast<__half*>(y), total);
  else
    depthwise_kernel<float><<<blocks_for(total), kThreads, 0, s>>>(g, nhwc, static_cast<const float*>(x), w, bias,
                                                                  act, static_cast<float*>(y), total);
  return cudaGetLastError();
}

cudaError_t softmax(Elem t, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, cudaStream_t s) {
  if (outer * len * inner <= 0) return cudaSuccess;
  if (inner == 1) {
    const int threads = row_threads(len);
    if (t == Elem::f16)
      softmax_rows_kernel<__half><<<row_blocks(outer), threads, 0, s>>>(static_cast<const __half*>(x),
                                                                       static_cast<__half*>(y), outer, len);
    else
      softmax_rows_kernel<float><<<row_blocks(outer), threads, 0, s>>>(static_cast<const float*>(x),
                                                                      static_cast<float*>(y), outer, len);
  } else {
    const int64_t cols = outer * inner;
    if (t == Elem::f16)
      softmax_cols_kernel<__half><<<blocks_for(cols), kThreads, 0, s>>>(static_cast<const __half*>(x),
                                                                       static_cast<__half*>(y), outer, len, inner);
    else
      softmax_cols_kernel<float><<<blocks_for(cols), kThreads, 0, s>>>(static_cast<const float*>(x),
                                                                      static_cast<float*>(y), outer, len, inner);
  }
  return cudaGetLastError();
}

cudaError_t layernorm(Elem t, const void* x, void* y, const float* scale, const float* bias, int64_t outer,
                      int64_t inner, float epsilon, cudaStream_t s) {
  if (outer * inner <= 0) return cudaSuccess;
  const int threads = row_threads(inner);
  if (t == Elem::f16)
    layernorm_kernel<__half><<<row_blocks(outer), threads, 0, s>>>(static_cast<const __half*>(x),
                                                                  static_cast<__half*>(y), scale, bias, outer, inner, epsilon);
  else
    layernorm_kernel<float><<<row_blocks(outer), threads, 0, s>>>(static_cast<const float*>(x), static_cast<float*>(y),
                                                                 scale, bias, outer, inner, epsilon);
  return cudaGetLastError();
}

}  // namespace softneuro::cuda::kern
