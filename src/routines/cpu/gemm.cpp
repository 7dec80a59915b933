// The ISA-neutral parts of our float32 GEMM: packing and the blocked driver
// around the per-ISA micro-kernels. See gemm.hpp.
#include "routines/cpu/gemm.hpp"

#include "core/cpu_features.hpp"

#include <algorithm>
#include <cstring>

namespace softneuro::cpu::gemm {

// The x86 files are built for x86-64 only, the Advanced SIMD one for aarch64 only.
#if defined(__x86_64__)
const Kernel* kernel_avx2() { return core::cpu_features().avx2_fma() ? unchecked_kernel_avx2() : nullptr; }

const Kernel* kernel_avx512() { return core::cpu_features().avx512_core() ? unchecked_kernel_avx512() : nullptr; }
#else
const Kernel* kernel_avx2() { return nullptr; }
const Kernel* kernel_avx512() { return nullptr; }
#endif
#if defined(__aarch64__)
const Kernel* kernel_neon() { return unchecked_kernel_neon(); }  // Advanced SIMD is aarch64's baseline
#else
const Kernel* kernel_neon() { return nullptr; }
#endif

const Kernel* best_kernel() {
  if (const Kernel* k = kernel_avx512()) return k;
  if (const Kernel* k = kernel_avx2()) return k;
  return kernel_neon();
}

void pack_a(const Kernel& k, int64_t m, int64_t kk, int64_t kc, const float* a, int64_t lda, bool trans, float* out) {
  const int mr = k.mr;
  const int64_t mp = round_up(m, mr);
  for (int64_t k0 = 0; k0 < kk; k0 += kc) {
    const int64_t kcb = std::min(kc, kk - k0);
    for (int64_t p = 0; p < mp / mr; ++p) {
      float* dst = out + k0 * mp + p * kcb * mr;
      for (int64_t x = 0; x < kcb; ++x)
        for (int i = 0; i < mr; ++i) {
          const int64_t row = p * mr + i, col = k0 + x;
          dst[x * mr + i] = row < m ? (trans ? a[col * lda + row] : a[row * lda + col]) : 0.0f;
        }
    }
  }
}

void pack_b(const Kernel& k, int64_t kk, int64_t n, int64_t kc, const float* b, int64_t ldb, bool trans, float* out) {
  const int nr = k.nr;
  const int64_t np = round_up(n, nr);
  for (int64_t k0 = 0; k0 < kk; k0 += kc) {
    const int64_t kcb = std::min(kc, kk - k0);
    for (int64_t q = 0; q < np / nr; ++q) {
      float* dst = out + k0 * np + q * kcb * nr;
      const int64_t cols = std::min<int64_t>(nr, n - q * nr);
      for (int64_t x = 0; x < kcb; ++x) {
        float* d = dst + x * nr;
        if (!trans) {
          std::memcpy(d, b + (k0 + x) * ldb + q * nr, sizeof(float) * cols);
        } else {
          for (int64_t j = 0; j < cols; ++j) d[j] = b[(q * nr + j) * ldb + k0 + x];
        }
        for (int64_t j = cols; j < nr; ++j) d[j] = 0.0f;
      }
    }
  }
}

namespace {
constexpr int kMaxTile = 16 * 64;  // MR * NR of any kernel
}

void gemm_block(const Kernel& k, int64_t m, int64_t n, int64_t kk, int64_t kc, const float* pa, const float* pb,
                float* c, int64_t ldc, const Epilogue& ep, int64_t m_begin, int64_t m_end, int64_t n_begin,
                int64_t n_end) {
  const int mr = k.mr, nr = k.nr;
  const int64_t mp = round_up(m, mr), np = round_up(n, nr);
  alignas(64) float tile[kMaxTile];
  alignas(64) float bias_m[64], bias_n[64];
  for (int64_t k0 = 0; k0 < kk; k0 += kc) {
    const int64_t kcb = std::min(kc, kk - k0);
    const bool load_c = k0 > 0 || ep.accumulate, last = k0 + kcb >= kk;
    for (int64_t j0 = n_begin; j0 < n_end; j0 += nr) {
      const float* bp = pb + k0 * np + (j0 / nr) * kcb * nr;
      const int64_t cols = std::min<int64_t>(nr, n - j0);
      for (int64_t i0 = m_begin; i0 < m_end; i0 += mr) {
        const float* ap = pa + k0 * mp + (i0 / mr) * kcb * mr;
        const int64_t rows = std::min<int64_t>(mr, m - i0);
        float* cp = c + i0 * ldc + j0;
        if (rows == mr && cols == nr) {
          k.micro(kcb, ap, bp, cp, ldc, load_c, last, ep.bias_m ? ep.bias_m + i0 : nullptr,
                  ep.bias_n ? ep.bias_n + j0 : nullptr, ep);
          continue;
        }
        // An edge tile: through the stack buffer, with zero-padded biases.
        if (load_c)
          for (int64_t i = 0; i < rows; ++i) std::memcpy(tile + i * nr, cp + i * ldc, sizeof(float) * cols);
        const float* bm = nullptr;
        const float* bn = nullptr;
        if (last && ep.bias_m) {
          for (int i = 0; i < mr; ++i) bias_m[i] = i < rows ? ep.bias_m[i0 + i] : 0.0f;
          bm = bias_m;
        }
        if (last && ep.bias_n) {
          for (int j = 0; j < nr; ++j) bias_n[j] = j < cols ? ep.bias_n[j0 + j] : 0.0f;
          bn = bias_n;
        }
        k.micro(kcb, ap, bp, tile, nr, load_c, last, bm, bn, ep);
        for (int64_t i = 0; i < rows; ++i) std::memcpy(cp + i * ldc, tile + i * nr, sizeof(float) * cols);
      }
    }
  }
}

void gemm(const Kernel& k, ThreadPool* pool, int64_t m, int64_t n, int64_t kk, int64_t kc, const float* pa,
          const float* pb, float* c, int64_t ldc, const Epilogue& ep) {
  const int64_t mpanels = round_up(m, k.mr) / k.mr, npanels = round_up(n, k.nr) / k.nr;
  // Tasks: blocks of about 96 rows x 256 columns (at least one panel each).
  const int64_t mb = std::max<int64_t>(1, 96 / k.mr), nb = std::max<int64_t>(1, 256 / k.nr);
  const int64_t tm = (mpanels + mb - 1) / mb, tn = (npanels + nb - 1) / nb;
  auto task = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t bi = t % tm, bj = t / tm;
      const int64_t m0 = bi * mb * k.mr, m1 = std::min(m, (bi + 1) * mb * k.mr);
      const int64_t n0 = bj * nb * k.nr, n1 = std::min(n, (bj + 1) * nb * k.nr);
      gemm_block(k, m, n, kk, kc, pa, pb, c, ldc, ep, m0, m1, n0, n1);
    }
  };
  if (pool && tm * tn > 1) pool->parallel_for(tm * tn, 1, task);
  else task(0, tm * tn);
}

}  // namespace softneuro::cpu::gemm
