// exp(x) on one vector, for the kernel files that define their vector type
// `vf` and its helpers (vset1, vmin, vmax, vmul, vadd, vfma, vfnma, vround,
// vpow2i) for their ISA: f32_simd.hpp (our float32 epilogues) and
// vec_kernels.inl (the vec routines). Include inside their namespace, after
// the helpers; no include guard: each namespace gets its own copy.

/// exp(x), x clamped to [-87.3, 88.3] (so 2^n stays a normal float): n =
/// round(x log2 e), r = x - n ln 2 (two-part ln 2), Cephes' degree-6
/// polynomial on |r| <= ln2/2 (relative error ~1e-7), times 2^n.
inline vf vexp(vf x) {
  x = vmin(vset1(88.3f), vmax(vset1(-87.3f), x));  // x second: NaN stays NaN
  const vf n = vround(vmul(x, vset1(1.44269504088896341f)));
  vf r = vfnma(n, vset1(0.693359375f), x);
  r = vfnma(n, vset1(-2.12194440e-4f), r);
  vf p = vset1(1.9875691500e-4f);
  p = vfma(p, r, vset1(1.3981999507e-3f));
  p = vfma(p, r, vset1(8.3334519073e-3f));
  p = vfma(p, r, vset1(4.1665795894e-2f));
  p = vfma(p, r, vset1(1.6666665459e-1f));
  p = vfma(p, r, vset1(5.0000001201e-1f));
  p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
  return vmul(p, vpow2i(n));
}
