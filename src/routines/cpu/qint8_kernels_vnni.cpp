// AVX-VNNI kernels of cpu:qint8/qint8 (routine parameter vnni=1); see qint8_kernels.hpp.
// Built with -mavx2 -mfma -mavxvnni (CMakeLists.txt); callers check
// vnni_usable() first. The same rules as qint8_kernels_avx2.cpp: nothing but
// intrinsics and this file's own internal functions.
//
// vpdpbusd multiplies unsigned bytes by signed bytes, four products summed into
// each int32 lane without intermediate saturation: exact. Activations enter as
// u8 = q + 128 (the caller folds (128 + zero_point) * sum(w) into the bias, and
// pads with zero_point + 128, the value of a real 0), weights as int8 in
// [-127, 127]; the accumulators equal those of the AVX2 kernels exactly.
#include "routines/cpu/qint8_kernels.hpp"
#include "routines/cpu/qint8_epilogue.inl"

#include <immintrin.h>

#include <cstring>

namespace softneuro::qint8 {
namespace {

template <int MR>
void tile_vnni(const uint8_t* u, int64_t ldu, const int8_t* v, int64_t k4, const Epilogue& ep, int8_t* dst, int64_t ldd,
               int nvalid) {
  __m256i c0[MR], c1[MR];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) c0[r] = c1[r] = _mm256_setzero_si256();
  for (int64_t k = 0; k < k4; ++k) {
    const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + k * 64));
    const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v + k * 64 + 32));
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      int32_t quad;
      std::memcpy(&quad, u + r * ldu + 4 * k, 4);
      const __m256i a = _mm256_set1_epi32(quad);
      c0[r] = _mm256_dpbusd_avx_epi32(c0[r], a, b0);
      c1[r] = _mm256_dpbusd_avx_epi32(c1[r], a, b1);
    }
  }
  const __m256i bias0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias));
  const __m256i bias1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.bias + 8));
  const __m256 m0 = _mm256_loadu_ps(ep.mult), m1 = _mm256_loadu_ps(ep.mult + 8);
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
    store16(requant8(_mm256_add_epi32(c0[r], bias0), m0, ep), requant8(_mm256_add_epi32(c1[r], bias1), m1, ep),
            dst + r * ldd, nvalid);
}

}  // namespace

void gemm_tile_vnni(int mr, const uint8_t* u, int64_t ldu, const int8_t* v, int64_t k4, const Epilogue& ep, int8_t* dst,
                    int64_t ldd, int nvalid) {
  static_assert(kTileMVnni == 6);
  switch (mr) {
    case 1: return tile_vnni<1>(u, ldu, v, k4, ep, dst, ldd, nvalid);
    case 2: return tile_vnni<2>(u, ldu, v, k4, ep, dst, ldd, nvalid);
    case 3: return tile_vnni<3>(u, ldu, v, k4, ep, dst, ldd, nvalid);
    case 4: return tile_vnni<4>(u, ldu, v, k4, ep, dst, ldd, nvalid);
    case 5: return tile_vnni<5>(u, ldu, v, k4, ep, dst, ldd, nvalid);
    default: return tile_vnni<6>(u, ldu, v, k4, ep, dst, ldd, nvalid);
  }
}

}  // namespace softneuro::qint8
