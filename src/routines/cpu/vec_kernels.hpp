// Kernels of the cpu/vec routines (vec.cpp): one set per ISA, built from
// vec_kernels.inl with that ISA's flags (vec_kernels_avx2.cpp: AVX2+FMA,
// vec_kernels_avx512.cpp: AVX-512F/BW/VL/DQ; vec_kernels_neon.cpp: aarch64). vec.cpp picks a set at run time
// from core::cpu_features(). Internal to src/routines/cpu.
#pragma once

#include <cstdint>

namespace softneuro::cpu::vec {

struct Kernels {
  /// rows x n, row-major: y = (x - mean) / sqrt(var + eps) * scale + bias per
  /// row (bias may be null); mean and variance in one pass (shifted by the
  /// row's first element against cancellation).
  void (*layernorm_rows)(const float* x, float* y, int64_t rows, int64_t n, const float* scale, const float* bias,
                         float eps);
  /// rows x n, row-major: y = x / sqrt(mean(x^2) + eps) * scale per row (RMSNorm).
  void (*rms_norm_rows)(const float* x, float* y, int64_t rows, int64_t n, const float* scale, float eps);
  /// rows x n, row-major: softmax of each row (max-subtracted, vectorised exp).
  void (*softmax_rows)(const float* x, float* y, int64_t rows, int64_t n);
  /// One [n, inner] slab, softmax along n (values `inner` apart), for the
  /// columns [begin, end): a softmax over a middle axis, inner positions as lanes.
  void (*softmax_strided)(const float* x, float* y, int64_t n, int64_t inner, int64_t begin, int64_t end);
  /// y[i] = gelu(x[i]), i < n: erf form (Abramowitz-Stegun 7.1.26 erfc, |error|
  /// <= 1.5e-7) or tanh form (x / (1 + exp(-2u))).
  void (*gelu)(const float* x, float* y, int64_t n, bool tanh_form);
  /// The same within 5e-5 max(1, |x|), for routines whose own error dwarfs it
  /// (bfloat16 outputs, int8 products; AVX-512: no division, a cheaper exp,
  /// 1.6x faster; elsewhere gelu's).
  void (*gelu_approx)(const float* x, float* y, int64_t n, bool tanh_form);
  /// y[i] = erf(x[i]), i < n (the same erfc, |error| <= 1.5e-7).
  void (*erf)(const float* x, float* y, int64_t n);
  /// One group of group_norm: `channels` planes of `spatial` floats, normalised
  /// by the group's mean and variance, then per channel y * scale[c] + bias[c]
  /// (bias may be null). Sums per plane in float vectors, across planes in double.
  void (*group_norm)(const float* x, float* y, int64_t channels, int64_t spatial, const float* scale, const float* bias,
                     float eps);
  /// q = clamp(round(x[i] / scale) + zp, qmin, qmax), i < n (round: to nearest even; a division,
  /// not a multiplication by 1/scale, as ONNX Runtime rounds); y[i] = dequantize ? (q - zp) * scale : q.
  void (*quantize)(const float* x, float* y, int64_t n, float scale, float zp, float qmin, float qmax, bool dequantize);
  /// min and max of x[0..n) (n > 0).
  void (*min_max)(const float* x, int64_t n, float* min, float* max);
  /// y[i] = x[i] / (1 + exp(-x[i])) (SiLU), i < n; y may be x.
  void (*silu)(const float* x, float* y, int64_t n);
  /// y[i] = table[(uint8_t) x[i]], i < n (int8 by a 256-entry table); y may be x.
  void (*lookup)(const int8_t* x, int8_t* y, int64_t n, const int8_t* table);
  /// y[i] = (q[i] - zero_point) * scale, i < n: q int8 where is_signed, else
  /// uint8 (a quantised embedding table's row).
  void (*dequantize_bytes)(const uint8_t* q, bool is_signed, float* y, int64_t n, float scale, float zero_point);
  /// One attention row in place: t = s[j] * scale + (bias ? bias[j] : add), m = max t
  /// (to *max_out), s[j] = exp(t - m); returns the sum of the exponentials.
  float (*exp_row)(float* s, const float* bias, float add, int64_t n, float scale, float* max_out);
  /// y[i * ldy + r] = dot(w + r * k, x + i * k) for r < rows, i < m (a dense layer of few rows).
  void (*gemv)(const float* w, int64_t rows, int64_t k, const float* x, int64_t m, float* y, int64_t ldy);
  /// O[rows, dv] = P[rows, n] · V[n, dv] (+ O where `accumulate`), all row-major with the
  /// given row strides, P read in place (attention's probabilities times the values).
  void (*rows_times)(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t ldv, int64_t n, int64_t dv,
                     float* o, int64_t ldo, bool accumulate);
};

/// The widest set this CPU runs (vec.cpp: AVX-512, AVX2+FMA; Advanced SIMD on
/// aarch64), or nullptr: for other routines' epilogues (cpu/xnnpack's SiLU).
const Kernels* best_kernels();

namespace avx2 {
extern const Kernels kKernels;
}
namespace avx512 {
extern const Kernels kKernels;
}
namespace neon {  // aarch64 only (vec_kernels_neon.cpp)
extern const Kernels kKernels;
}

}  // namespace softneuro::cpu::vec
