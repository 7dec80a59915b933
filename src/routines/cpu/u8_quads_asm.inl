// The K loops of the 4-row tiles (vpmaddubsw: cpu:qint8's u8 forms, cpu/dynamic_int8's
// u8 form; vpmaddwd: cpu:qint8's int16 form) in inline assembly, and the u8
// pairing's fixes, shared by their AVX2 kernel files. Internal
// linkage: each including file gets its own copy (no inline function shared
// across files built for different ISAs).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace softneuro {
namespace {

/// The K loop of a 4-row u8 tile in assembly: c0[r], c1[r] +=
/// the products of row r's quads (u + r * ldu) and v's 16 columns. With
/// intrinsics GCC 12 kept one of the 8 accumulators on the stack (a load and
/// a store in every step, a loop-carried dependency through memory) and
/// copied the others between registers: ResNet50's 1x1 layers at 62% of the
/// kernel's products per cycle. Here 8 accumulators, both weight vectors, the
/// broadcast, two products and the ones: 14 of the 16 ymm registers.
[[maybe_unused]] void u8_quads_4rows(const char* u, int64_t ldu, const char* v, int64_t ksteps, __m256i* c0, __m256i* c1) {
  if (ksteps <= 0) return;
  __m256i c00 = c0[0], c10 = c0[1], c20 = c0[2], c30 = c0[3], c01 = c1[0], c11 = c1[1], c21 = c1[2], c31 = c1[3];
  const char *u1 = u + ldu, *u2 = u + 2 * ldu, *u3 = u1 + 2 * ldu;
  int64_t off = 0;
  // ymm0, ymm1: the step's weights; ymm2: a row's broadcast quad; ymm3, ymm4: products; ymm5: 16-bit ones.
#define SN_U8_ROW(ROW, C0, C1)                      \
  "vpbroadcastd (%[" ROW "],%[off]), %%ymm2\n\t"    \
  "vpmaddubsw %%ymm0, %%ymm2, %%ymm3\n\t"          \
  "vpmaddubsw %%ymm1, %%ymm2, %%ymm4\n\t"          \
  "vpmaddwd %%ymm5, %%ymm3, %%ymm3\n\t"            \
  "vpmaddwd %%ymm5, %%ymm4, %%ymm4\n\t"            \
  "vpaddd %%ymm3, %[" C0 "], %[" C0 "]\n\t"        \
  "vpaddd %%ymm4, %[" C1 "], %[" C1 "]\n\t"
  asm volatile(
      "vpcmpeqw %%ymm5, %%ymm5, %%ymm5\n\t"
      "vpsrlw $15, %%ymm5, %%ymm5\n\t"
      "1:\n\t"
      "vmovdqa (%[v]), %%ymm0\n\t"
      "vmovdqa 32(%[v]), %%ymm1\n\t"
      SN_U8_ROW("u0", "c00", "c01") SN_U8_ROW("u1", "c10", "c11") SN_U8_ROW("u2", "c20", "c21") SN_U8_ROW("u3", "c30", "c31")
      "add $64, %[v]\n\t"
      "add $4, %[off]\n\t"
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      : [c00] "+x"(c00), [c01] "+x"(c01), [c10] "+x"(c10), [c11] "+x"(c11), [c20] "+x"(c20), [c21] "+x"(c21),
        [c30] "+x"(c30), [c31] "+x"(c31), [v] "+r"(v), [off] "+r"(off), [n] "+r"(ksteps)
      : [u0] "r"(u), [u1] "r"(u1), [u2] "r"(u2), [u3] "r"(u3)
      : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5");
#undef SN_U8_ROW
  c0[0] = c00, c0[1] = c10, c0[2] = c20, c0[3] = c30, c1[0] = c01, c1[1] = c11, c1[2] = c21, c1[3] = c31;
}

/// The same for the int16 form (cpu:qint8's exact GEMM without u8 pairs): each
/// step a pair of int16 activations per row against 64 bytes of int16 weight
/// pairs, one vpmaddwd per product vector. GCC's form of this loop moved six
/// accumulators between registers every step.
[[maybe_unused]] void i16_pairs_4rows(const char* u, int64_t ldu, const char* v, int64_t ksteps, __m256i* c0, __m256i* c1) {
  if (ksteps <= 0) return;
  __m256i c00 = c0[0], c10 = c0[1], c20 = c0[2], c30 = c0[3], c01 = c1[0], c11 = c1[1], c21 = c1[2], c31 = c1[3];
  const char *u1 = u + ldu, *u2 = u + 2 * ldu, *u3 = u1 + 2 * ldu;
  int64_t off = 0;
  // ymm0, ymm1: the step's weights; ymm2: a row's broadcast pair; ymm3, ymm4: products.
#define SN_I16_ROW(ROW, C0, C1)                     \
  "vpbroadcastd (%[" ROW "],%[off]), %%ymm2\n\t"    \
  "vpmaddwd %%ymm0, %%ymm2, %%ymm3\n\t"            \
  "vpmaddwd %%ymm1, %%ymm2, %%ymm4\n\t"            \
  "vpaddd %%ymm3, %[" C0 "], %[" C0 "]\n\t"        \
  "vpaddd %%ymm4, %[" C1 "], %[" C1 "]\n\t"
  asm volatile(
      "1:\n\t"
      "vmovdqa (%[v]), %%ymm0\n\t"
      "vmovdqa 32(%[v]), %%ymm1\n\t"
      SN_I16_ROW("u0", "c00", "c01") SN_I16_ROW("u1", "c10", "c11") SN_I16_ROW("u2", "c20", "c21") SN_I16_ROW("u3", "c30", "c31")
      "add $64, %[v]\n\t"
      "add $4, %[off]\n\t"
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      : [c00] "+x"(c00), [c01] "+x"(c01), [c10] "+x"(c10), [c11] "+x"(c11), [c20] "+x"(c20), [c21] "+x"(c21),
        [c30] "+x"(c30), [c31] "+x"(c31), [v] "+r"(v), [off] "+r"(off), [n] "+r"(ksteps)
      : [u0] "r"(u), [u1] "r"(u1), [u2] "r"(u2), [u3] "r"(u3)
      : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4");
#undef SN_I16_ROW
  c0[0] = c00, c0[1] = c10, c0[2] = c20, c0[3] = c30, c1[0] = c01, c1[1] = c11, c1[2] = c21, c1[3] = c31;
}

/// The pairing's fixes (pair_fix::PairFix: what packing cut off the unsafe
/// pairs) added back from the u8 values of rows u (ldu apart), each to its one
/// lane in registers: through an array in memory each vector's reload waited on
/// the scalar stores into it (15% of a K = 64 layer's tiles).
template <int MR, class Fix>
inline void add_fixes(__m256i* c0, __m256i* c1, const uint8_t* u, int64_t ldu, const Fix* fixes, int64_t nfix) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t f = 0; f < nfix; ++f) {
    const int lane = fixes[f].lane;
    const __m256i mask = _mm256_cmpeq_epi32(lanes, _mm256_set1_epi32(lane & 7));
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m256i add = _mm256_and_si256(_mm256_set1_epi32(int32_t{u[r * ldu + fixes[f].k]} * fixes[f].d), mask);
      if (lane < 8) c0[r] = _mm256_add_epi32(c0[r], add);
      else c1[r] = _mm256_add_epi32(c1[r], add);
    }
  }
}

}  // namespace
}  // namespace softneuro
