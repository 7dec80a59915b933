// What cpu/gemm_attention and cpu/flash_attention share: their support checks,
// K packed per head as the packed GEMM's B operand, a query row's mask, and
// how a head's queries split into tasks. Internal to src/routines/cpu.
#pragma once

#include "routines/cpu/f32_common.hpp"
#include "routines/cpu/vec_kernels.hpp"

#include <softneuro/routine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

namespace softneuro::cpu::attention {

/// Both routines compute in plain float32 with the packed GEMM and the vec
/// kernels, reading q, v and the output with the feature dim innermost, k either way.
inline Support supports(const LayerInfo& info, const Schema& schema, std::string_view who) {
  if (!(schema == Schema{})) return Support::no(fmt::format("{} computes in cpu:float32:nchw", who));
  if (!gemm::best_kernel() || !vec::best_kernels())
    return Support::no(fmt::format("{} needs AVX2+FMA, AVX-512 or Advanced SIMD", who));
  const core::AttentionGeometry g = core::attention_geometry(*info.layer, info.input_shapes);
  if (g.q[3] != 1 || g.v[3] != 1 || g.out[3] != 1 || (g.k[3] != 1 && g.k[2] != 1))
    return Support::no(fmt::format("{} reads q, v and the output with the feature dim innermost, k either way", who));
  if (g.sk == 0 || g.d == 0) return Support::no(fmt::format("{} needs keys and features", who));
  return Support::yes();
}

/// K of batch b and head h as the B operand [D, Sk] of Q·Kᵀ, packed in K blocks of kc.
inline void pack_keys(const gemm::Kernel& k, const core::AttentionGeometry& g, const float* keys, int64_t b,
                      int64_t h, int64_t kc, float* out) {
  const float* kh = keys + g.k_at(b, h);
  if (g.k[3] == 1) gemm::pack_b(k, g.d, g.sk, kc, kh, g.k[2], true, out);  // rows of K: Bᵀ
  else gemm::pack_b(k, g.d, g.sk, kc, kh, g.k[3], false, out);             // K stored transposed
}

/// The mask of query row i from key j0 on: a row to add (`bias`), or one value
/// for every key (`add`, a mask broadcast along the keys). Neither without a mask.
inline void mask_row(const core::AttentionGeometry& g, const float* mask, int64_t b, int64_t h, int64_t i, int64_t j0,
                     const float*& bias, float& add) {
  bias = nullptr;
  add = 0;
  if (!mask) return;
  const float* row = mask + b * g.mask[0] + h * g.mask[1] + i * g.mask[2];
  if (g.mask[3] != 0) bias = row + j0;
  else add = *row;
}

/// Query row i's scores (Sk of them, at s) to exponentials in place: scaled,
/// masked, the keys causal attention hides 0. Unnormalised where it returns
/// 1/sum (the caller divides the row's output), else normalised, NaN kept or
/// zeroed per masked_rows, and 1 returned.
inline float softmax_row(const core::AttentionGeometry& g, const vec::Kernels& v, float* s, const float* mask,
                         int64_t b, int64_t h, int64_t i) {
  const int64_t n = g.visible(i);
  const float* bias;
  float add;
  mask_row(g, mask, b, h, i, 0, bias, add);
  float m = -std::numeric_limits<float>::infinity();
  const float sum = n > 0 ? v.exp_row(s, bias, add, n, g.scale, &m) : 0.0f;
  std::fill(s + n, s + g.sk, 0.0f);
  if (std::isfinite(m) && std::isfinite(sum) && sum > 0) return 1.0f / sum;
  // Every key masked (-inf: exp(-inf - -inf) is NaN), or NaN or inf in the scores: as softmax computes it.
  for (int64_t j = 0; j < g.sk; ++j) {
    float p = j < n ? s[j] / sum : (n == 0 ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
    if (std::isnan(p) && g.zero_masked_rows) p = 0;
    s[j] = p;
  }
  return 1.0f;
}

/// O = P·V for `rows` query rows (P [rows, Sk] with row stride ldp, read in
/// place by vec kernel rows_times; V of one head at vh; O at o, the output's
/// row stride), each row then times its softmax_row result `inv` (1/sum).
inline void outputs_of(const core::AttentionGeometry& g, const vec::Kernels& v, const float* p, int64_t ldp,
                       int64_t rows, const float* vh, const float* inv, float* o) {
  v.rows_times(p, ldp, rows, vh, g.v[2], g.sk, g.dv, o, g.out[2], false);
  for (int64_t r = 0; r < rows; ++r)
    if (inv[r] != 1.0f)
      for (int64_t e = 0; e < g.dv; ++e) o[r * g.out[2] + e] *= inv[r];
}

/// Chunks of query blocks per head: enough tasks for every thread where heads are fewer.
inline int64_t query_chunks(const core::AttentionGeometry& g, int64_t block, int slots) {
  const int64_t heads = g.b * g.h, blocks = (g.sq + block - 1) / block;
  return std::min(blocks, std::max<int64_t>(1, (slots + heads - 1) / heads));
}

}  // namespace softneuro::cpu::attention
