// Helpers shared by the CUDA routine files (kernels.cpp, cudnn.cpp, cublas.cpp,
// transfer.cpp): element types, activations, geometry and
// physical dimension orders of the cuda:* layouts.
#pragma once

#include "core/layer_types.hpp"
#include "routines/cuda/cuda_backend.hpp"
#include "routines/cuda/kernels.hpp"

#include <vector>

namespace softneuro::cuda {

inline kern::Elem elem(DType t) { return t == DType::float16 ? kern::Elem::f16 : kern::Elem::f32; }

inline kern::ActParams act_params(const core::Activation& a) {
  kern::ActParams p;
  switch (a.kind) {
    case core::Activation::none: p.kind = kern::Act::none; break;
    case core::Activation::relu: p.kind = kern::Act::relu; break;
    case core::Activation::clip: p.kind = kern::Act::clip, p.a = a.min, p.b = a.max; break;
    case core::Activation::hardswish: p.kind = kern::Act::hardswish; break;
    case core::Activation::hardsigmoid: p.kind = kern::Act::hardsigmoid, p.a = a.alpha, p.b = a.beta; break;
    case core::Activation::sigmoid: p.kind = kern::Act::sigmoid; break;
    case core::Activation::silu: p.kind = kern::Act::silu; break;
    case core::Activation::gelu: p.kind = kern::Act::gelu; break;
    case core::Activation::gelu_tanh: p.kind = kern::Act::gelu_tanh; break;
  }
  p.affine = a.affine();
  p.scale = a.scale;
  p.shift = a.shift;
  return p;
}

inline kern::Window window(const core::Window2d& g) {
  return kern::Window{g.n, g.c, g.h, g.w, g.oc, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.pb, g.pr};
}

/// The logical dims of a blob of `rank` in the order they lie in memory:
/// nchw as is; nhwc (rank >= 3) channels last: 0, 2, ..., rank-1, 1 (as the
/// layout adapts see a blob: [N, C, S] stored [N, S, C]).
inline std::vector<int> physical_order(int rank, Layout layout) {
  std::vector<int> p;
  p.push_back(0);
  if (layout == Layout::nhwc && rank >= 3) {
    for (int d = 2; d < rank; ++d) p.push_back(d);
    p.push_back(1);
  } else {
    for (int d = 1; d < rank; ++d) p.push_back(d);
  }
  if (rank == 0) p.clear();
  return p;
}

/// Element strides of each logical dim of `shape` stored in `layout`.
inline std::vector<int64_t> logical_strides(const Shape& shape, Layout layout) {
  auto p = physical_order(shape.rank(), layout);
  std::vector<int64_t> s(static_cast<std::size_t>(shape.rank()), 0);
  int64_t st = 1;
  for (int k = shape.rank() - 1; k >= 0; --k) {
    s[static_cast<std::size_t>(p[static_cast<std::size_t>(k)])] = st;
    st *= shape[p[static_cast<std::size_t>(k)]];
  }
  return s;
}

/// Blob seen as [N, C, S] (the adapts' view; rank < 2: [1, 1, numel]).
struct NCS {
  int64_t n = 1, c = 1, s = 1;
};
inline NCS ncs_of(const Shape& shape) {
  NCS v;
  if (shape.rank() < 2) {
    v.s = shape.numel();
    return v;
  }
  v.n = shape[0];
  v.c = shape[1];
  for (int i = 2; i < shape.rank(); ++i) v.s *= shape[i];
  return v;
}

}  // namespace softneuro::cuda
