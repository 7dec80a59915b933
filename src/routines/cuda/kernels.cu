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
    // As cpu/ref: C++'s float comparisons (NaN: only ne holds); nonzero is true (NaN too).
    case BinOp::eq: return a == b ? 1.f : 0.f;
    case BinOp::ne: return a != b ? 1.f : 0.f;
    case BinOp::lt: return a < b ? 1.f : 0.f;
    case BinOp::le: return a <= b ? 1.f : 0.f;
    case BinOp::gt: return a > b ? 1.f : 0.f;
    case BinOp::ge: return a >= b ? 1.f : 0.f;
    case BinOp::land: return a != 0.f && b != 0.f ? 1.f : 0.f;
    case BinOp::lor: return a != 0.f || b != 0.f ? 1.f : 0.f;
    case BinOp::lxor: return (a != 0.f) != (b != 0.f) ? 1.f : 0.f;
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
__global__ void where_kernel(const T* __restrict__ c, const T* __restrict__ a, const T* __restrict__ b,
                             T* __restrict__ y, int64_t n, Strided s) {
  SOFTNEURO_GRID_LOOP(i, n) {
    int64_t rem = i, oc = 0, oa = 0, ob = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t k = rem % s.dims[d];
      rem /= s.dims[d];
      oc += k * s.sa[d];
      oa += k * s.sb[d];
      ob += k * s.sc[d];
    }
    y[i] = ld(c, oc) != 0.f ? a[oa] : b[ob];
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

// ---------------------------------------------------------------------------
// Attention: FlashAttention's schedule on the CUDA cores. A block of 8 warps
// takes one (batch, head) and a tile of query rows, kRowsPerWarp per warp; the
// keys are walked in tiles of 32, each staged (with its values) in shared
// memory as float32. Per key tile, lane j scores key j against each of its
// warp's rows (the q rows broadcast from shared memory), the warp folds the
// tile into each row's running max and sum (the online softmax: earlier sums
// rescaled where the max rises), and the lanes split the output features
// (kDMax / 32 each), adding p_j * v_j for the tile's keys, p_j passed by
// shuffle. Each row is divided by its sum at the end. Everything is float32
// inside; q, k, v, the mask and the output are in T.

constexpr int kAttnWarps = 8;
constexpr int kAttnKeys = 32;  // keys per tile: one per lane when scoring

template <class T, int kDMax, int kRowsPerWarp>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(Attention g, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     const T* __restrict__ mask, T* __restrict__ out, int64_t query_tiles) {
  constexpr int kRows = kAttnWarps * kRowsPerWarp;  // query rows per block
  constexpr int kPerLane = kDMax / 32;               // output features per lane
  __shared__ float q_s[kRows][kDMax];
  // One padding column: lane j reads row j of a column, kDMax + 1 floats apart (no bank conflicts).
  __shared__ float k_s[kAttnKeys][kDMax + 1];
  __shared__ float v_s[kAttnKeys][kDMax];

  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t batch = blockIdx.x / g.h, head = blockIdx.x % g.h;
  const T* qh = q + batch * g.q[0] + head * g.q[1];
  const T* kh = k + batch * g.k[0] + head * g.k[1];
  const T* vh = v + batch * g.v[0] + head * g.v[1];
  const T* mh = mask ? mask + batch * g.mask[0] + head * g.mask[1] : nullptr;
  T* oh = out + batch * g.out[0] + head * g.out[1];
  const int d = static_cast<int>(g.d), dv = static_cast<int>(g.dv);

  for (int64_t tile = blockIdx.y; tile < query_tiles; tile += gridDim.y) {
    const int64_t i0 = tile * kRows;
    __syncthreads();  // the previous query tile's reads of q_s, k_s and v_s are done
    for (int r = warp; r < kRows; r += kAttnWarps) {
      const int64_t i = i0 + r;
      for (int c = lane; c < d; c += 32) q_s[r][c] = i < g.sq ? ld(qh, i * g.q[2] + c * g.q[3]) : 0.f;
    }
    // Keys past the last visible one of the tile's last row are hidden from all its rows.
    const int64_t last = (i0 + kRows < g.sq ? i0 + kRows : g.sq) - 1;
    int64_t keys = g.sk;
    if (g.causal) {
      keys = last + g.causal_offset + 1;
      keys = keys < 0 ? 0 : keys > g.sk ? g.sk : keys;
    }

    float row_max[kRowsPerWarp], row_sum[kRowsPerWarp], acc[kRowsPerWarp][kPerLane];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      row_max[rr] = -INFINITY;
      row_sum[rr] = 0.f;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) acc[rr][t] = 0.f;
    }

    for (int64_t j0 = 0; j0 < keys; j0 += kAttnKeys) {
      const int n = static_cast<int>(keys - j0 < kAttnKeys ? keys - j0 : kAttnKeys);  // keys in this tile
      __syncthreads();  // q_s is written; the previous key tile's reads of k_s and v_s are done
      for (int jj = warp; jj < kAttnKeys; jj += kAttnWarps) {
        const int64_t j = j0 + jj;
        const bool key = jj < n;
        for (int c = lane; c < d; c += 32) k_s[jj][c] = key ? ld(kh, j * g.k[2] + c * g.k[3]) : 0.f;
        // Zeros past dv and past the tile's keys: every lane's features read defined values.
        for (int c = lane; c < kDMax; c += 32) v_s[jj][c] = key && c < dv ? ld(vh, j * g.v[2] + c * g.v[3]) : 0.f;
      }
      __syncthreads();

      // Scores of key j0 + lane for each of the warp's rows.
      float p[kRowsPerWarp];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) p[rr] = 0.f;
#pragma unroll 4
      for (int c = 0; c < d; ++c) {
        const float kc = k_s[lane][c];
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) p[rr] = fmaf(q_s[warp * kRowsPerWarp + rr][c], kc, p[rr]);
      }
      const int64_t j = j0 + lane;
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int64_t i = i0 + warp * kRowsPerWarp + rr;
        // As cpu/ref: scale * q.k + mask, then -inf where causal hides the key.
        float x = -INFINITY;  // lanes past the tile's keys
        if (lane < n) {
          x = p[rr] * g.scale;
          if (mh && i < g.sq) x += ld(mh, i * g.mask[2] + j * g.mask[3]);
          if (g.causal && j > i + g.causal_offset) x = -INFINITY;
        }
        // Online softmax. A -inf score adds nothing (also while the max is still -inf,
        // where exp(-inf - -inf) would be NaN); NaN and +inf scores make the sum NaN,
        // which marks the row as softmax's NaN below.
        const float new_max = fmaxf(row_max[rr], warp_max(x));
        const float rescale = row_max[rr] == -INFINITY ? 0.f : expf(row_max[rr] - new_max);
        const float e = x == -INFINITY ? 0.f : expf(x - new_max);
        row_sum[rr] = row_sum[rr] * rescale + warp_sum(e);
        row_max[rr] = new_max;
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) acc[rr][t] *= rescale;
        p[rr] = e;
      }

      // p . V: lane takes features lane, lane + 32, ...; key jj's weight comes from lane jj.
      for (int jj = 0; jj < n; ++jj) {
        float vj[kPerLane];
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) vj[t] = v_s[jj][lane + 32 * t];
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          const float pj = __shfl_sync(0xffffffffu, p[rr], jj);
#pragma unroll
          for (int t = 0; t < kPerLane; ++t) acc[rr][t] = fmaf(pj, vj[t], acc[rr][t]);
        }
      }
    }

    const float masked_row = g.zero_masked_rows ? 0.f : NAN;
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int64_t i = i0 + warp * kRowsPerWarp + rr;
      if (i >= g.sq) continue;
      // No key at all (sk = 0): cpu/ref's empty sum, 0. A row that met only -inf
      // (sum 0), or NaN or +inf (sum NaN): softmax's NaN, or 0 under masked_rows = zero.
      const bool nan_row = g.sk > 0 && !(row_sum[rr] > 0.f);
      const float inv = 1.f / row_sum[rr];
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int c = lane + 32 * t;
        if (c >= dv) continue;
        const float y = g.sk == 0 ? 0.f : nan_row ? masked_row : acc[rr][t] * inv;
        st(oh, i * g.out[2] + c * g.out[3], y);
      }
    }
  }
}

template <class T, int kDMax, int kRowsPerWarp>
cudaError_t launch_attention(const Attention& g, const void* q, const void* k, const void* v, const void* mask,
                             void* out, cudaStream_t s) {
  constexpr int kRows = kAttnWarps * kRowsPerWarp;
  const int64_t tiles = (g.sq + kRows - 1) / kRows;
  const dim3 grid(static_cast<unsigned>(g.b * g.h), static_cast<unsigned>(tiles < 65535 ? tiles : 65535));
  attention_kernel<T, kDMax, kRowsPerWarp><<<grid, kAttnWarps * 32, 0, s>>>(
      g, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const T*>(mask),
      static_cast<T*>(out), tiles);
  return cudaGetLastError();
}

/// Picks the feature tile from the wider of d and dv: rows per warp such that
/// the shared tiles stay under 48 KB (41 KB at 128 features).
template <class T>
cudaError_t attention_for(const Attention& g, const void* q, const void* k, const void* v, const void* mask,
                          void* out, cudaStream_t s) {
  const int64_t widest = g.d > g.dv ? g.d : g.dv;
  if (widest <= 32) return launch_attention<T, 32, 4>(g, q, k, v, mask, out, s);
  if (widest <= 64) return launch_attention<T, 64, 4>(g, q, k, v, mask, out, s);
  return launch_attention<T, 128, 2>(g, q, k, v, mask, out, s);
}

// ---------------------------------------------------------------------------
// gather: one thread per output element; the index checked as cpu/ref checks it.

template <class T>
__global__ void gather_rows_kernel(const T* __restrict__ table, const T* __restrict__ indices, T* __restrict__ y,
                                   int64_t len, int64_t inner, int64_t count, int64_t n) {
  SOFTNEURO_GRID_LOOP(e, n) {
    const int64_t col = e % inner, row = e / inner, i = row % count, o = row / count;
    const double at = ld(indices, i);  // double: the comparisons exact for any len, as cpu/ref's
    if (!(at >= -static_cast<double>(len) && at < static_cast<double>(len)) || at != floor(at)) {
      st(y, e, NAN);
      continue;
    }
    const int64_t r = static_cast<int64_t>(at < 0 ? at + static_cast<double>(len) : at);
    y[e] = table[(o * len + r) * inner + col];
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

cudaError_t where(Elem t, const void* condition, const void* a, const void* b, void* y, int64_t n, const Strided& st,
                  cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (t == Elem::f16)
    where_kernel<__half><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const __half*>(condition),
                                                            static_cast<const __half*>(a), static_cast<const __half*>(b),
                                                            static_cast<__half*>(y), n, st);
  else
    where_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(condition),
                                                           static_cast<const float*>(a), static_cast<const float*>(b),
                                                           static_cast<float*>(y), n, st);
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

cudaError_t attention(Elem t, const Attention& g, const void* q, const void* k, const void* v, const void* mask,
                      void* out, cudaStream_t s) {
  if (g.d > kAttentionMaxHeadDim || g.dv > kAttentionMaxHeadDim || g.d < 0 || g.dv < 0) return cudaErrorInvalidValue;
  if (g.b * g.h * g.sq * g.dv <= 0) return cudaSuccess;
  if (g.b * g.h > 0x7fffffff) return cudaErrorInvalidValue;  // gridDim.x
  return t == Elem::f16 ? attention_for<__half>(g, q, k, v, mask, out, s) : attention_for<float>(g, q, k, v, mask, out, s);
}

cudaError_t gather_rows(Elem t, const void* table, const void* indices, void* y, int64_t outer, int64_t len,
                        int64_t inner, int64_t count, cudaStream_t s) {
  const int64_t n = outer * count * inner;
  if (n <= 0) return cudaSuccess;
  if (t == Elem::f16)
    gather_rows_kernel<__half><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const __half*>(table),
                                                                  static_cast<const __half*>(indices),
                                                                  static_cast<__half*>(y), len, inner, count, n);
  else
    gather_rows_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(table),
                                                                 static_cast<const float*>(indices),
                                                                 static_cast<float*>(y), len, inner, count, n);
  return cudaGetLastError();
}

}  // namespace softneuro::cuda::kern
