// On-device dtype and layout conversion for the CUDA adapts
// (transfer.cpp): float32 <-> float16 (round to nearest even)
// and nchw <-> nhwc, any combination in one pass. A blob is seen as [N, C, S]
// (S: the spatial dims), as the CPU layout adapts see it.
#include "routines/cuda/kernels_common.cuh"

namespace softneuro::cuda::kern {
namespace {

template <class From, class To>
__global__ void convert_kernel(const From* __restrict__ x, bool from_nhwc, To* __restrict__ y, bool to_nhwc,
                               int64_t c, int64_t s, int64_t total) {
  SOFTNEURO_GRID_LOOP(i, total) {
    int64_t src = i;
    if (from_nhwc != to_nhwc) {
      // i walks the output; find (n, ch, sp) and the input's offset of it.
      int64_t n, ch, sp;
      if (to_nhwc) {
        ch = i % c;
        sp = (i / c) % s;
        n = i / (c * s);
        src = (n * c + ch) * s + sp;
      } else {
        sp = i % s;
        ch = (i / s) % c;
        n = i / (c * s);
        src = (n * s + sp) * c + ch;
      }
    }
    st(y, i, ld(x, src));
  }
}

template <class From, class To>
cudaError_t launch(const void* x, bool from_nhwc, void* y, bool to_nhwc, int64_t c, int64_t s, int64_t total,
                   cudaStream_t stream) {
  convert_kernel<From, To><<<blocks_for(total), kThreads, 0, stream>>>(
      static_cast<const From*>(x), from_nhwc, static_cast<To*>(y), to_nhwc, c, s, total);
  return cudaGetLastError();
}

}  // namespace

cudaError_t convert(Elem from, bool from_nhwc, Elem to, bool to_nhwc, const void* x, void* y, int64_t n, int64_t c,
                    int64_t spatial, cudaStream_t s) {
  const int64_t total = n * c * spatial;
  if (total <= 0) return cudaSuccess;
  if (from == Elem::f32 && to == Elem::f32) return launch<float, float>(x, from_nhwc, y, to_nhwc, c, spatial, total, s);
  if (from == Elem::f32) return launch<float, __half>(x, from_nhwc, y, to_nhwc, c, spatial, total, s);
  if (to == Elem::f32) return launch<__half, float>(x, from_nhwc, y, to_nhwc, c, spatial, total, s);
  return launch<__half, __half>(x, from_nhwc, y, to_nhwc, c, spatial, total, s);
}

}  // namespace softneuro::cuda::kern
